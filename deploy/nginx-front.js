// njs for deploy/nginx-front.conf: which of Pyroscope's span-capable RPCs the bridge has to see (route), and the key
// the bridge's access answers are kept under (credential).
//
// SelectMergeStacktraces is Grafana's plain flame-graph query, and the bridge relays it untouched unless it carries a
// span selector (Pyroscope v2.2's span_selector = 11, or trace_id_selector = 10). nginx alone cannot look into a
// body, so every such call went through the bridge (and its Python) only to be handed back. This reads the body
// here: a call with neither field goes straight to Pyroscope, anything else — a selector, SelectMergeSpanProfile, a
// compressed or unreadable body, one nginx kept in a file, a codec this does not know — to the bridge, which
// resolves it, cleans it, answers the error, or hands it back (421) for nginx to send on after all. When in doubt:
// the bridge.
//
// Needs nginx's njs module (ngx_http_js_module; njs 0.7 or later): the official nginx image has it (load it with
// `load_module modules/ngx_http_js_module.so;`), Debian and Ubuntu have it as libnginx-mod-http-js.

import crypto from 'crypto';

var SELECTOR_FIELDS = { 10: true, 11: true };
var SELECTOR_KEYS = ['spanSelector', 'span_selector', 'traceIdSelector', 'trace_id_selector'];
var PROTO_TYPES = { 'application/proto': true, 'application/x-protobuf': true, 'application/protobuf': true };

// [value, next position] of the varint at pos, or null when it is cut short or longer than 10 bytes.
function varint(buf, pos) {
    var value = 0;
    var scale = 1;
    for (var i = 0; i < 10; i++) {
        if (pos >= buf.length) {
            return null;
        }
        var byte = buf[pos++];
        value += (byte & 0x7f) * scale;
        if (byte < 0x80) {
            return [value, pos];
        }
        scale *= 128;
    }
    return null;
}

// Whether a protobuf message has a top-level selector field; true as well when it is not valid protobuf.
function protoHasSelector(buf) {
    var pos = 0;
    while (pos < buf.length) {
        var key = varint(buf, pos);
        if (key === null) {
            return true;
        }
        pos = key[1];
        var field = Math.floor(key[0] / 8);
        var wire = key[0] % 8;
        if (field === 0 || SELECTOR_FIELDS[field]) {
            return true;
        }
        if (wire === 0) {
            var skipped = varint(buf, pos);
            if (skipped === null) {
                return true;
            }
            pos = skipped[1];
        } else if (wire === 1) {
            pos += 8;
        } else if (wire === 2) {
            var len = varint(buf, pos);
            if (len === null) {
                return true;
            }
            pos = len[1] + len[0];
        } else if (wire === 5) {
            pos += 4;
        } else {
            return true; // groups and reserved wire types: not Pyroscope's
        }
        if (pos > buf.length) {
            return true;
        }
    }
    return false;
}

// Whether a Connect JSON body names a selector (empty or not); true as well when it is not a JSON object.
function jsonHasSelector(text) {
    var msg;
    try {
        msg = JSON.parse(text);
    } catch (e) {
        return true;
    }
    if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) {
        return true;
    }
    for (var i = 0; i < SELECTOR_KEYS.length; i++) {
        if (Object.prototype.hasOwnProperty.call(msg, SELECTOR_KEYS[i])) {
            return true;
        }
    }
    return false;
}

function needsBridge(r) {
    if (r.method !== 'POST' || !/\/SelectMergeStacktraces$/.test(r.uri)) {
        return true;
    }
    var encoding = (r.headersIn['Content-Encoding'] || '').trim().toLowerCase();
    if (encoding !== '' && encoding !== 'identity') {
        return true;
    }
    var body;
    try {
        body = r.requestBuffer; // njs throws (0.7) or gives undefined when nginx kept the body in a file
    } catch (e) {
        return true;
    }
    if (body === undefined) {
        return true; // not in memory (over client_body_buffer_size): the bridge reads it
    }
    var type = (r.headersIn['Content-Type'] || '').split(';')[0].trim().toLowerCase();
    if (PROTO_TYPES[type]) {
        return protoHasSelector(body);
    }
    if (type === 'application/json') {
        return jsonHasSelector(body.toString());
    }
    return true;
}

// The cache key of the bridge's access answer: a SHA-256 of every header that answer depends on (the bridge's token
// header, Authorization, X-Scope-OrgID), so that no token is ever written to nginx's cache directory.
function credential(r) {
    var h = r.headersIn;
    var text = [h['X-Profile-Bridge-Token'] || '', h['Authorization'] || '', h['X-Scope-OrgID'] || ''].join('\n');
    return crypto.createHash('sha256').update(text).digest('hex');
}

function route(r) {
    r.internalRedirect(needsBridge(r) ? '@profile_bridge_span_rpc' : '@pyroscope');
}

export default {
    route: route,
    credential: credential,
    protoHasSelector: protoHasSelector,
    jsonHasSelector: jsonHasSelector,
};
