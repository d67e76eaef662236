/*
 * bridge.otlp._fastlink: the link gateway's rules (bridge/otlp/link.py) applied to the *wire bytes* of an
 * ExportProfilesServiceRequest, so linking a request costs about as much as parsing it, not 8-10 times more.
 *
 * link.py is the reference: it states the rules, it is what runs when this extension is not built, and
 * tests/test_fastlink.py checks that both give the same requests, counts and errors. Read it first.
 *
 * One pass over the request (opentelemetry-proto 1.45 field numbers):
 *
 *   ExportProfilesServiceRequest { 1: repeated ResourceProfiles; 2: ProfilesDictionary }
 *   ResourceProfiles { 2: repeated ScopeProfiles }   ScopeProfiles { 2: repeated Profile }
 *   Profile { 2: repeated Sample }
 *   Sample { 1: stack_index; 2: repeated int32 attribute_indices; 3: int32 link_index; 4: values; 5: timestamps }
 *
 * Every other field (known or unknown) is copied byte for byte. A field whose wire type does not match its
 * declaration is an unknown field to protobuf, and is copied as such here. The decision for a sample depends only
 * on its attribute indices, so it is made once per distinct attribute-indices payload and cached. A linked sample
 * is re-emitted without its old attribute_indices / link_index records and with the new ones where the first of
 * fields >= 2 stood (canonical order for canonical input); the lengths of its enclosing messages are re-written.
 * New links are appended to the last dictionary record (repeated fields concatenate, so indices stay right).
 *
 * The dictionary is read from its canonical serialisation (the caller's parsed ProfilesDictionary, serialised):
 * attribute entries are parsed lazily, only those samples refer to.
 *
 * Malformed wire data raises ValueError with an offset; out-of-range dictionary indices raise OutOfRange whose
 * args let the caller word the same message as link.py. Every read is bounds-checked; nothing recurses on input.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define WT_VARINT 0
#define WT_I64 1
#define WT_LEN 2
#define WT_SGROUP 3
#define WT_EGROUP 4
#define WT_I32 5
#define MAX_GROUP_DEPTH 100
#define SPAN_BYTES 8
#define TRACE_BYTES 16

static PyObject *OutOfRange;

/* ------------------------------------------------------------------------------------------- wire reading */

typedef struct {
    const uint8_t *base; /* start of the whole input: offsets in error messages are relative to it */
    const char *what;    /* "request" or "dictionary" */
} Src;

static int malformed(const Src *src, const uint8_t *at, const char *why) {
    PyErr_Format(PyExc_ValueError, "malformed %s at byte %zd: %s", src->what, (Py_ssize_t)(at - src->base), why);
    return -1;
}

static inline int read_varint(const Src *src, const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return malformed(src, p, "truncated varint");
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return malformed(src, *pp, "varint longer than 10 bytes");
}

/* A tag: field number and wire type. Field 0 and wire types 6 and 7 are errors, as in protobuf. */
static inline int read_tag(const Src *src, const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wt) {
    const uint8_t *start = *pp;
    uint64_t tag;
    if (read_varint(src, pp, end, &tag) < 0)
        return -1;
    if (tag > UINT32_MAX)
        return malformed(src, start, "tag out of range");
    *field = (uint32_t)(tag >> 3);
    *wt = (int)(tag & 7);
    if (*field == 0)
        return malformed(src, start, "field number 0");
    if (*wt > WT_I32)
        return malformed(src, start, "invalid wire type");
    return 0;
}

/* After a tag of wire type LEN: the payload bounds. */
static inline int read_len(const Src *src, const uint8_t **pp, const uint8_t *end, const uint8_t **payload,
                           const uint8_t **payload_end) {
    const uint8_t *start = *pp;
    uint64_t n;
    if (read_varint(src, pp, end, &n) < 0)
        return -1;
    if (n > (uint64_t)(end - *pp))
        return malformed(src, start, "length runs past the end of its message");
    *payload = *pp;
    *payload_end = *pp + n;
    *pp = *payload_end;
    return 0;
}

/* Skip the value of a field whose tag was just read (groups: up to the matching end-group, iteratively). */
static int skip_value(const Src *src, const uint8_t **pp, const uint8_t *end, uint32_t field, int wt) {
    uint32_t stack[MAX_GROUP_DEPTH];
    int depth = 0;
    for (;;) {
        uint64_t v;
        const uint8_t *a, *b;
        switch (wt) {
        case WT_VARINT:
            if (read_varint(src, pp, end, &v) < 0)
                return -1;
            break;
        case WT_I64:
            if (end - *pp < 8)
                return malformed(src, *pp, "truncated fixed64");
            *pp += 8;
            break;
        case WT_I32:
            if (end - *pp < 4)
                return malformed(src, *pp, "truncated fixed32");
            *pp += 4;
            break;
        case WT_LEN:
            if (read_len(src, pp, end, &a, &b) < 0)
                return -1;
            break;
        case WT_SGROUP:
            if (depth == MAX_GROUP_DEPTH)
                return malformed(src, *pp, "groups nested too deeply");
            stack[depth++] = field;
            break;
        case WT_EGROUP:
            if (depth == 0 || stack[depth - 1] != field)
                return malformed(src, *pp, "end-group without its start-group");
            depth--;
            break;
        }
        if (depth == 0)
            return 0;
        if (read_tag(src, pp, end, &field, &wt) < 0)
            return -1;
    }
}

/* Skip one whole field; an end-group here has no start-group. */
static inline int skip_field(const Src *src, const uint8_t **pp, const uint8_t *end, uint32_t field, int wt,
                             const uint8_t *tag_start) {
    if (wt == WT_EGROUP)
        return malformed(src, tag_start, "end-group without its start-group");
    return skip_value(src, pp, end, field, wt);
}

static inline int varint_size(uint64_t v) {
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* ------------------------------------------------------------------------------------------- output buffer */

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->cap - b->len >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    uint8_t *data = PyMem_Realloc(b->data, cap);
    if (!data) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const uint8_t *p, size_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* ------------------------------------------------------------------------------------------- link state */

typedef struct {
    int pair;
    int is_span;
    int valid;
    uint8_t id[TRACE_BYTES];
} Role;

typedef struct {
    size_t first;  /* index into Ctx.roles */
    int count;     /* -1: not computed yet */
} AttrRoles;

enum { DECISION_NONE = 1, DECISION_INVALID = 2, DECISION_LINK = 3 };

#define INLINE_BYTES 16

/* One distinct attribute-indices payload (the key) and what to do with its samples. Short keys and kept payloads
 * live inside the entry: the per-sample lookup touches one slot and one entry. */
typedef struct {
    uint32_t key_len, kept_len;
    int32_t kind;
    int32_t link;
    uint8_t *key_ext, *kept_ext; /* owned, when longer than INLINE_BYTES */
    uint8_t key_in[INLINE_BYTES];
    uint8_t kept_in[INLINE_BYTES];
} Decision;

static inline const uint8_t *key_of(const Decision *d) { return d->key_len > INLINE_BYTES ? d->key_ext : d->key_in; }
static inline const uint8_t *kept_of(const Decision *d) {
    return d->kept_len > INLINE_BYTES ? d->kept_ext : d->kept_in;
}

typedef struct {
    /* dictionary */
    Src dsrc;
    const uint8_t *dict_end;
    const uint8_t **attr_at; /* start of each attribute_table entry's payload */
    const uint8_t **attr_end;
    Py_ssize_t n_attrs, n_strings;
    AttrRoles *attr_roles;
    Role *roles;
    size_t n_roles, roles_cap;
    PyObject *key_roles; /* {string index: ((pair, is_span), ...)} */
    int has_keys;
    /* links */
    PyObject *link_of;   /* {(trace bytes, span bytes): index}, updated */
    PyObject *new_links; /* [(trace bytes, span bytes)], appended (the sentinel first when the table was empty) */
    Py_ssize_t n_links_in, n_links, links_added;
    /* decisions */
    Decision *entries;
    size_t n_entries, entries_cap;
    uint64_t *slots; /* open addressing: high 32 bits of the key's hash, low 32 bits entry index + 1; 0 free */
    size_t slots_cap;
    /* scratch */
    int32_t *vals;
    size_t vals_cap;
    uint8_t *scratch;
    size_t scratch_cap;
    /* request */
    Src src;
    Buf out;
    Py_ssize_t samples, linked, invalid, already;
    Py_ssize_t dict_tag_at, dict_payload_at, dict_end_at; /* last dictionary record in out; -1: none */
    int changed;
} Ctx;

static void ctx_free(Ctx *c) {
    for (size_t i = 0; i < c->n_entries; i++) {
        PyMem_Free(c->entries[i].key_ext);
        PyMem_Free(c->entries[i].kept_ext);
    }
    PyMem_Free(c->entries);
    PyMem_Free(c->slots);
    PyMem_Free(c->attr_at);
    PyMem_Free(c->attr_end);
    PyMem_Free(c->attr_roles);
    PyMem_Free(c->roles);
    PyMem_Free(c->vals);
    PyMem_Free(c->scratch);
    PyMem_Free(c->out.data);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    if (n > PY_SSIZE_T_MAX / elem) {
        PyErr_NoMemory();
        return -1;
    }
    void *q = PyMem_Realloc(*p, n * elem);
    if (!q) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = n;
    return 0;
}

/* ------------------------------------------------------------------------------------------- dictionary */

/* Index the canonical dictionary: where each attribute entry is, how many strings there are. */
static int index_dictionary(Ctx *c, const uint8_t *p, const uint8_t *end) {
    size_t cap = 0;
    Py_ssize_t n = 0;
    c->dict_end = end;
    while (p < end) {
        const uint8_t *tag_at = p, *a, *b;
        uint32_t field = 0;
        int wt = 0;
        if (read_tag(&c->dsrc, &p, end, &field, &wt) < 0)
            return -1;
        if (wt == WT_LEN && (field == 5 || field == 6)) {
            if (read_len(&c->dsrc, &p, end, &a, &b) < 0)
                return -1;
            if (field == 5) {
                c->n_strings++;
                continue;
            }
            if ((size_t)n == cap) {
                size_t cap2 = cap;
                if (grow((void **)&c->attr_at, &cap2, cap + 1, sizeof(*c->attr_at)) < 0)
                    return -1;
                if (grow((void **)&c->attr_end, &cap, cap + 1, sizeof(*c->attr_end)) < 0)
                    return -1;
            }
            c->attr_at[n] = a;
            c->attr_end[n] = b;
            n++;
        } else if (skip_field(&c->dsrc, &p, end, field, wt, tag_at) < 0) {
            return -1;
        }
    }
    c->n_attrs = n;
    c->attr_roles = PyMem_Malloc(sizeof(AttrRoles) * (size_t)(n ? n : 1));
    if (!c->attr_roles) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        c->attr_roles[i].count = -1;
    return 0;
}

static inline int hexval(uint8_t ch) {
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static int unhex(const uint8_t *text, size_t len, size_t size, uint8_t *out) {
    if (len != 2 * size)
        return 0;
    for (size_t i = 0; i < size; i++) {
        int hi = hexval(text[2 * i]), lo = hexval(text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return 0;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 1;
}

/* link.parse_id: kind 1 string_value, 7 bytes_value; anything else is not an id. */
static int parse_id(int kind, const uint8_t *v, size_t len, size_t size, uint8_t *out) {
    int ok;
    if (kind == 1)
        ok = unhex(v, len, size, out);
    else if (kind == 7 && len == size) {
        memcpy(out, v, size);
        ok = 1;
    } else if (kind == 7)
        ok = unhex(v, len, size, out);
    else
        ok = 0;
    if (!ok)
        return 0;
    for (size_t i = 0; i < size; i++)
        if (out[i])
            return 1;
    return 0; /* all zeros: OTLP's "no id" */
}

/* link._Linker.roles_of: the roles attribute `index` plays; range errors as OutOfRange. */
static AttrRoles *roles_of(Ctx *c, int32_t index) {
    if (index < 0 || index >= c->n_attrs) {
        PyObject *args = Py_BuildValue("(sin)", "attribute", (int)index, c->n_attrs);
        if (args) {
            PyErr_SetObject(OutOfRange, args);
            Py_DECREF(args);
        }
        return NULL;
    }
    AttrRoles *ar = &c->attr_roles[index];
    if (ar->count >= 0)
        return ar;
    /* KeyValueAndUnit { 1: key_strindex; 2: AnyValue value; 3: unit_strindex } */
    const uint8_t *p = c->attr_at[index], *end = c->attr_end[index];
    int32_t key = 0;
    int kind = 0;
    const uint8_t *val = NULL;
    size_t val_len = 0;
    while (p < end) {
        const uint8_t *tag_at = p, *a, *b;
        uint32_t field = 0;
        int wt = 0;
        uint64_t v;
        if (read_tag(&c->dsrc, &p, end, &field, &wt) < 0)
            return NULL;
        if (field == 1 && wt == WT_VARINT) {
            if (read_varint(&c->dsrc, &p, end, &v) < 0)
                return NULL;
            key = (int32_t)(uint32_t)v;
        } else if (field == 2 && wt == WT_LEN) {
            if (read_len(&c->dsrc, &p, end, &a, &b) < 0)
                return NULL;
            /* AnyValue: the oneof member that comes last wins; 1 string_value, 7 bytes_value */
            while (a < b) {
                const uint8_t *vtag = a, *x, *y;
                uint32_t vf;
                int vwt;
                if (read_tag(&c->dsrc, &a, b, &vf, &vwt) < 0)
                    return NULL;
                int member = (vwt == WT_LEN && (vf == 1 || vf == 5 || vf == 6 || vf == 7)) ||
                             (vwt == WT_VARINT && (vf == 2 || vf == 3 || vf == 8)) || (vwt == WT_I64 && vf == 4);
                if (vwt == WT_LEN) {
                    if (read_len(&c->dsrc, &a, b, &x, &y) < 0)
                        return NULL;
                    if (member) {
                        val = x;
                        val_len = (size_t)(y - x);
                    }
                } else if (skip_field(&c->dsrc, &a, b, vf, vwt, vtag) < 0) {
                    return NULL;
                }
                if (member)
                    kind = (int)vf;
            }
        } else if (skip_field(&c->dsrc, &p, end, field, wt, tag_at) < 0) {
            return NULL;
        }
    }
    if (key < 0 || key >= c->n_strings) {
        PyObject *args = Py_BuildValue("(siin)", "key_strindex", (int)index, (int)key, c->n_strings);
        if (args) {
            PyErr_SetObject(OutOfRange, args);
            Py_DECREF(args);
        }
        return NULL;
    }
    ar->first = c->n_roles;
    ar->count = 0;
    PyObject *pykey = PyLong_FromLong(key);
    if (!pykey)
        return NULL;
    PyObject *found = PyDict_GetItemWithError(c->key_roles, pykey); /* borrowed */
    Py_DECREF(pykey);
    if (!found) {
        if (PyErr_Occurred())
            return NULL;
        return ar;
    }
    PyObject *seq = PySequence_Fast(found, "key roles must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (grow((void **)&c->roles, &c->roles_cap, c->n_roles + (size_t)n, sizeof(Role)) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int pair, is_span;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ip", &pair, &is_span)) {
            Py_DECREF(seq);
            return NULL;
        }
        Role *r = &c->roles[c->n_roles++];
        r->pair = pair;
        r->is_span = is_span;
        r->valid = parse_id(kind, val, val_len, is_span ? SPAN_BYTES : TRACE_BYTES, r->id);
    }
    Py_DECREF(seq);
    ar->count = (int)n;
    return ar;
}

/* link._Linker.link_index: find or append the (trace, span) link. */
static int32_t link_index(Ctx *c, const uint8_t *trace, size_t trace_len, const uint8_t *span) {
    static const uint8_t no_trace[1] = {0};
    if (!trace) /* Py_BuildValue makes None of a NULL buffer: a span-only link has an empty trace_id */
        trace = no_trace;
    PyObject *key = Py_BuildValue("(y#y#)", (const char *)trace, (Py_ssize_t)trace_len, (const char *)span,
                                  (Py_ssize_t)SPAN_BYTES);
    if (!key)
        return -1;
    PyObject *found = PyDict_GetItemWithError(c->link_of, key);
    if (found) {
        long idx = PyLong_AsLong(found);
        Py_DECREF(key);
        if (idx == -1 && PyErr_Occurred())
            return -1;
        return (int32_t)idx;
    }
    if (PyErr_Occurred())
        goto fail;
    if (c->n_links == 0) {
        static const uint8_t zeros[TRACE_BYTES] = {0};
        PyObject *sentinel = Py_BuildValue("(y#y#)", (const char *)zeros, (Py_ssize_t)TRACE_BYTES, (const char *)zeros,
                                           (Py_ssize_t)SPAN_BYTES);
        if (!sentinel || PyList_Append(c->new_links, sentinel) < 0) {
            Py_XDECREF(sentinel);
            goto fail;
        }
        Py_DECREF(sentinel);
        c->n_links = 1;
    }
    if (c->n_links >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many links for an int32 link_index");
        goto fail;
    }
    PyObject *idx = PyLong_FromSsize_t(c->n_links);
    if (!idx || PyDict_SetItem(c->link_of, key, idx) < 0 || PyList_Append(c->new_links, key) < 0) {
        Py_XDECREF(idx);
        goto fail;
    }
    Py_DECREF(idx);
    Py_DECREF(key);
    c->links_added++;
    return (int32_t)c->n_links++;
fail:
    Py_DECREF(key);
    return -1;
}

/* ------------------------------------------------------------------------------------------- decisions */

typedef struct {
    size_t pos;
    size_t role; /* index into Ctx.roles (which may move while roles are computed) */
} Hit;

/* Decode a packed int32 payload into c->vals (int32 truncation, as protobuf reads int32 fields). */
static Py_ssize_t decode_indices(Ctx *c, const uint8_t *p, const uint8_t *end) {
    size_t n = 0;
    while (p < end) {
        uint64_t v;
        if (read_varint(&c->src, &p, end, &v) < 0)
            return -1;
        if (grow((void **)&c->vals, &c->vals_cap, n + 1, sizeof(int32_t)) < 0)
            return -1;
        c->vals[n++] = (int32_t)(uint32_t)v;
    }
    return (Py_ssize_t)n;
}

/* link._Linker.decide (its general rule; the simple one is a shortcut of it) for one distinct payload. */
static int decide(Ctx *c, Decision *d) {
    const uint8_t *key = key_of(d);
    Py_ssize_t n = decode_indices(c, key, key + d->key_len);
    if (n < 0)
        return -1;
    d->kind = DECISION_NONE;
    if (!c->has_keys) { /* link._check_only: indices are range-checked, nothing else */
        for (Py_ssize_t i = 0; i < n; i++)
            if (c->vals[i] < 0 || c->vals[i] >= c->n_attrs)
                return roles_of(c, c->vals[i]) ? 0 : -1;
        return 0;
    }
    Hit *hits = NULL;
    size_t n_hits = 0, hits_cap = 0;
    int rc = -1, any_span = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        AttrRoles *ar = roles_of(c, c->vals[i]);
        if (!ar)
            goto done;
        for (int k = 0; k < ar->count; k++) {
            if (grow((void **)&hits, &hits_cap, n_hits + 1, sizeof(Hit)) < 0)
                goto done;
            hits[n_hits].pos = (size_t)i;
            hits[n_hits].role = ar->first + (size_t)k;
            any_span |= c->roles[ar->first + (size_t)k].is_span;
            n_hits++;
        }
    }
    if (!n_hits) {
        rc = 0;
        goto done;
    }
    /* pairs in configured order: the first with a valid span id, and a valid trace id if it has a trace attribute */
    const uint8_t *span = NULL, *trace = NULL;
    int last_pair = -1;
    for (;;) {
        int pair = -1;
        for (size_t h = 0; h < n_hits; h++)
            if (c->roles[hits[h].role].pair > last_pair && (pair < 0 || c->roles[hits[h].role].pair < pair))
                pair = c->roles[hits[h].role].pair;
        if (pair < 0)
            break;
        last_pair = pair;
        const uint8_t *s = NULL, *t = NULL;
        int trace_seen = 0;
        for (size_t h = 0; h < n_hits; h++) {
            const Role *r = &c->roles[hits[h].role];
            if (r->pair != pair)
                continue;
            if (r->is_span) {
                if (!s && r->valid)
                    s = r->id;
            } else {
                trace_seen = 1;
                if (!t && r->valid)
                    t = r->id;
            }
        }
        if (!s || (trace_seen && !t))
            continue;
        span = s;
        trace = t;
        break;
    }
    if (!span) {
        d->kind = any_span ? DECISION_INVALID : DECISION_NONE;
        rc = 0;
        goto done;
    }
    /* consumed: every position holding the chosen span id as a span, or the chosen trace id as a trace */
    if (grow((void **)&c->scratch, &c->scratch_cap, (size_t)n + 1, 1) < 0)
        goto done;
    uint8_t *consumed = c->scratch;
    memset(consumed, 0, (size_t)n);
    for (size_t h = 0; h < n_hits; h++) {
        const Role *r = &c->roles[hits[h].role];
        if (!r->valid)
            continue;
        if (r->is_span ? memcmp(r->id, span, SPAN_BYTES) == 0 : (trace && memcmp(r->id, trace, TRACE_BYTES) == 0))
            consumed[hits[h].pos] = 1;
    }
    size_t kept_len = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!consumed[i])
            kept_len += (size_t)varint_size((uint64_t)(int64_t)c->vals[i]);
    if (kept_len > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "attribute_indices too long");
        goto done;
    }
    uint8_t *w = d->kept_in;
    if (kept_len > INLINE_BYTES) {
        w = d->kept_ext = PyMem_Malloc(kept_len);
        if (!w) {
            PyErr_NoMemory();
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!consumed[i])
            w = put_varint(w, (uint64_t)(int64_t)c->vals[i]);
    d->kept_len = (uint32_t)kept_len;
    int32_t link = link_index(c, trace, trace ? TRACE_BYTES : 0, span);
    if (link < 0)
        goto done;
    d->link = link;
    d->kind = DECISION_LINK;
    rc = 0;
done:
    PyMem_Free(hits);
    return rc;
}

static inline uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL ^ n; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    h ^= h >> 33; /* murmur3's finaliser: the table indexes by the low bits */
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

static int slots_grow(Ctx *c) {
    size_t cap = c->slots_cap ? c->slots_cap * 2 : 1024;
    uint64_t *slots = PyMem_Calloc(cap, sizeof(uint64_t));
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < c->slots_cap; i++) {
        uint64_t v = c->slots[i];
        if (!v)
            continue;
        /* the slot keeps only the hash's high half: re-hash the key to place it */
        const Decision *d = &c->entries[(v & 0xffffffffu) - 1];
        size_t j = hash_bytes(key_of(d), d->key_len) & (cap - 1);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = v;
    }
    PyMem_Free(c->slots);
    c->slots = slots;
    c->slots_cap = cap;
    return 0;
}

static inline int same_key(const Decision *d, const uint8_t *key, size_t key_len) {
    if (d->key_len != key_len)
        return 0;
    const uint8_t *k = key_of(d);
    for (size_t i = 0; i < key_len; i++)
        if (k[i] != key[i])
            return 0;
    return 1;
}

/* The decision for this attribute-indices payload, decided on first sight. The pointer is valid until the next
 * lookup. */
static const Decision *lookup(Ctx *c, const uint8_t *key, size_t key_len) {
    if ((c->n_entries + 1) * 2 > c->slots_cap && slots_grow(c) < 0)
        return NULL;
    uint64_t h = hash_bytes(key, key_len);
    uint64_t tag = h & 0xffffffff00000000ULL;
    size_t j = h & (c->slots_cap - 1);
    for (;;) {
        uint64_t v = c->slots[j];
        if (!v)
            break;
        if ((v & 0xffffffff00000000ULL) == tag) {
            const Decision *d = &c->entries[(v & 0xffffffffu) - 1];
            if (same_key(d, key, key_len))
                return d;
        }
        j = (j + 1) & (c->slots_cap - 1);
    }
    if (key_len > UINT32_MAX || c->n_entries >= UINT32_MAX - 1) {
        PyErr_SetString(PyExc_ValueError, "too many distinct attribute_indices");
        return NULL;
    }
    if (grow((void **)&c->entries, &c->entries_cap, c->n_entries + 1, sizeof(Decision)) < 0)
        return NULL;
    Decision *d = &c->entries[c->n_entries];
    memset(d, 0, sizeof(*d));
    uint8_t *k = d->key_in;
    if (key_len > INLINE_BYTES) {
        k = d->key_ext = PyMem_Malloc(key_len);
        if (!k) {
            PyErr_NoMemory();
            return NULL;
        }
    }
    if (key_len)
        memcpy(k, key, key_len);
    d->key_len = (uint32_t)key_len;
    c->n_entries++;
    c->slots[j] = tag | (uint64_t)c->n_entries;
    if (decide(c, d) < 0)
        return NULL;
    return d;
}

/* ------------------------------------------------------------------------------------------- the request walk */

/* One Sample record: `tag_at` .. `end`, payload from `s`. Appends the (possibly rewritten) record to out. */
static int sample(Ctx *c, const uint8_t *tag_at, const uint8_t *s, const uint8_t *end) {
    const uint8_t *p = s, *anchor = NULL;
    const uint8_t *packed = NULL, *packed_end = NULL;
    int attr_records = 0, unpacked = 0;
    uint64_t li = 0;
    size_t removed = 0;
    c->samples++;
    while (p < end) {
        const uint8_t *rec = p;
        uint32_t field = 0;
        int wt = 0;
        uint64_t v;
        if (read_tag(&c->src, &p, end, &field, &wt) < 0)
            return -1;
        if (field >= 2 && !anchor)
            anchor = rec;
        if (field == 2 && wt == WT_LEN) {
            const uint8_t *a, *b;
            if (read_len(&c->src, &p, end, &a, &b) < 0)
                return -1;
            for (const uint8_t *q = a; q < b;) /* a packed payload must hold whole varints */
                if (read_varint(&c->src, &q, b, &v) < 0)
                    return -1;
            packed = a;
            packed_end = b;
            attr_records++;
        } else if (field == 2 && wt == WT_VARINT) {
            if (read_varint(&c->src, &p, end, &v) < 0)
                return -1;
            attr_records++;
            unpacked = 1;
        } else if (field == 3 && wt == WT_VARINT) {
            if (read_varint(&c->src, &p, end, &li) < 0)
                return -1;
        } else {
            if (skip_field(&c->src, &p, end, field, wt, rec) < 0)
                return -1;
            continue;
        }
        removed += (size_t)(p - rec);
    }
    int32_t link_in = (int32_t)(uint32_t)li;
    if (link_in != 0) {
        if (!(0 < link_in && link_in < c->n_links_in)) {
            PyObject *args = Py_BuildValue("(sin)", "link", (int)link_in, c->n_links_in);
            if (args) {
                PyErr_SetObject(OutOfRange, args);
                Py_DECREF(args);
            }
            return -1;
        }
        c->already++;
        return buf_put(&c->out, tag_at, (size_t)(end - tag_at));
    }
    const Decision *d;
    if (attr_records <= 1 && !unpacked) {
        d = lookup(c, packed, packed ? (size_t)(packed_end - packed) : 0);
    } else { /* several records or unpacked values: key on the packed form of all of them, in order */
        size_t n = 0;
        for (p = s; p < end;) {
            const uint8_t *rec = p;
            uint32_t field = 0;
            int wt = 0;
            uint64_t v;
            (void)read_tag(&c->src, &p, end, &field, &wt); /* validated above */
            if (field == 2 && (wt == WT_LEN || wt == WT_VARINT)) {
                const uint8_t *a = p, *b = p;
                if (wt == WT_VARINT) {
                    (void)read_varint(&c->src, &p, end, &v);
                    b = p;
                } else {
                    (void)read_len(&c->src, &p, end, &a, &b);
                }
                if (grow((void **)&c->scratch, &c->scratch_cap, n + (size_t)(b - a) + 1, 1) < 0)
                    return -1;
                memcpy(c->scratch + n, a, (size_t)(b - a));
                n += (size_t)(b - a);
            } else {
                (void)skip_field(&c->src, &p, end, field, wt, rec);
            }
        }
        d = lookup(c, c->scratch, n);
    }
    if (!d)
        return -1;
    if (d->kind != DECISION_LINK) {
        c->invalid += d->kind == DECISION_INVALID;
        return buf_put(&c->out, tag_at, (size_t)(end - tag_at));
    }
    /* rewrite: same tag, new length, fields before the anchor, new attribute_indices and link_index, the rest
     * without the old attribute_indices / link_index records */
    c->linked++;
    c->changed = 1;
    size_t added = (d->kept_len ? 1 + (size_t)varint_size(d->kept_len) + d->kept_len : 0) + 1 +
                   (size_t)varint_size((uint64_t)d->link);
    size_t new_len = (size_t)(end - s) - removed + added;
    const uint8_t *q = tag_at; /* tag_at..s holds the tag and the old length: keep the tag bytes */
    uint64_t tag;
    (void)read_varint(&c->src, &q, s, &tag);
    size_t tag_len = (size_t)(q - tag_at);
    if (buf_reserve(&c->out, tag_len + 10 + new_len) < 0)
        return -1;
    uint8_t *w = c->out.data + c->out.len;
    memcpy(w, tag_at, tag_len);
    w = put_varint(w + tag_len, new_len);
    uint8_t *content = w;
    if (!anchor)
        anchor = end;
    memcpy(w, s, (size_t)(anchor - s));
    w += anchor - s;
    if (d->kept_len) {
        *w++ = (2 << 3) | WT_LEN;
        w = put_varint(w, d->kept_len);
        memcpy(w, kept_of(d), d->kept_len);
        w += d->kept_len;
    }
    *w++ = (3 << 3) | WT_VARINT;
    w = put_varint(w, (uint64_t)d->link);
    for (p = anchor; p < end;) {
        const uint8_t *rec = p;
        uint32_t field = 0;
        int wt = 0;
        uint64_t v;
        (void)read_tag(&c->src, &p, end, &field, &wt); /* validated above */
        if ((field == 2 && (wt == WT_LEN || wt == WT_VARINT)) || (field == 3 && wt == WT_VARINT)) {
            if (wt == WT_LEN) {
                const uint8_t *a, *b;
                (void)read_len(&c->src, &p, end, &a, &b);
            } else {
                (void)read_varint(&c->src, &p, end, &v);
            }
            continue;
        }
        (void)skip_field(&c->src, &p, end, field, wt, rec);
        memcpy(w, rec, (size_t)(p - rec));
        w += p - rec;
    }
    if ((size_t)(w - content) != new_len) {
        PyErr_SetString(PyExc_SystemError, "fastlink: sample length mismatch");
        return -1;
    }
    c->out.len = (size_t)(w - c->out.data);
    return 0;
}

/* Walk one message of `level` (0 request, 1 ResourceProfiles, 2 ScopeProfiles, 3 Profile) into out. Field 2
 * descends (level 0: field 1; level 3: samples); field 2 of the request is the dictionary. */
static int message(Ctx *c, int level, const uint8_t *p, const uint8_t *end) {
    uint32_t child = level == 0 ? 1 : 2;
    while (p < end) {
        const uint8_t *rec = p;
        uint32_t field = 0;
        int wt = 0;
        if (read_tag(&c->src, &p, end, &field, &wt) < 0)
            return -1;
        if (wt == WT_LEN && field == child) {
            const uint8_t *tag_end = p, *a, *b;
            if (read_len(&c->src, &p, end, &a, &b) < 0)
                return -1;
            if (level == 3) {
                if (sample(c, rec, a, b) < 0)
                    return -1;
                continue;
            }
            /* tag as it was, a length of the old length's size (fixed up after), the rewritten content */
            size_t tag_len = (size_t)(tag_end - rec);
            int reserved = varint_size((uint64_t)(b - a));
            if (buf_reserve(&c->out, tag_len + (size_t)reserved) < 0)
                return -1;
            memcpy(c->out.data + c->out.len, rec, tag_len);
            c->out.len += tag_len + (size_t)reserved;
            size_t start = c->out.len;
            if (message(c, level + 1, a, b) < 0)
                return -1;
            size_t len = c->out.len - start;
            int need = varint_size(len);
            if (need != reserved) {
                if (buf_reserve(&c->out, (size_t)need) < 0)
                    return -1;
                memmove(c->out.data + start - reserved + need, c->out.data + start, len);
                c->out.len = start - (size_t)reserved + (size_t)need + len;
                start = start - (size_t)reserved + (size_t)need;
            }
            put_varint(c->out.data + start - need, len);
            continue;
        }
        if (skip_field(&c->src, &p, end, field, wt, rec) < 0)
            return -1;
        if (level == 0 && field == 2 && wt == WT_LEN) { /* the dictionary: remember where the last one went */
            const uint8_t *q = rec;
            uint64_t tag;
            (void)read_varint(&c->src, &q, p, &tag);
            const uint8_t *payload = q;
            uint64_t n;
            (void)read_varint(&c->src, &payload, p, &n);
            c->dict_tag_at = (Py_ssize_t)c->out.len;
            c->dict_payload_at = (Py_ssize_t)(c->out.len + (size_t)(payload - rec));
            c->dict_end_at = (Py_ssize_t)(c->out.len + (size_t)(p - rec));
        }
        if (buf_put(&c->out, rec, (size_t)(p - rec)) < 0)
            return -1;
    }
    return 0;
}

/* The new links as Link records of the dictionary: field 4 { 1: trace_id (omitted when empty); 2: span_id }. */
static int encode_links(PyObject *links, Buf *b) {
    Py_ssize_t n = PyList_GET_SIZE(links);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *trace, *span;
        Py_ssize_t trace_len, span_len;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(links, i), "y#y#", &trace, &trace_len, &span, &span_len))
            return -1;
        size_t body = (trace_len ? 1 + (size_t)varint_size((uint64_t)trace_len) + (size_t)trace_len : 0) + 1 +
                      (size_t)varint_size((uint64_t)span_len) + (size_t)span_len;
        if (buf_reserve(b, body + 11) < 0)
            return -1;
        uint8_t *w = b->data + b->len;
        *w++ = (4 << 3) | WT_LEN;
        w = put_varint(w, body);
        if (trace_len) {
            *w++ = (1 << 3) | WT_LEN;
            w = put_varint(w, (uint64_t)trace_len);
            memcpy(w, trace, (size_t)trace_len);
            w += trace_len;
        }
        *w++ = (2 << 3) | WT_LEN;
        w = put_varint(w, (uint64_t)span_len);
        memcpy(w, span, (size_t)span_len);
        w += span_len;
        b->len = (size_t)(w - b->data);
    }
    return 0;
}

/* out with the new links appended to the last dictionary record (or a new dictionary record when none). */
static PyObject *splice_links(Ctx *c) {
    Buf links = {0};
    PyObject *result = NULL;
    if (encode_links(c->new_links, &links) < 0)
        goto done;
    Py_ssize_t tag_at, payload_at, end_at;
    uint8_t tag[1] = {(2 << 3) | WT_LEN};
    const uint8_t *tag_src = tag;
    size_t tag_len = 1;
    if (c->dict_tag_at >= 0) {
        tag_at = c->dict_tag_at;
        payload_at = c->dict_payload_at;
        end_at = c->dict_end_at;
        const uint8_t *q = c->out.data + tag_at;
        uint64_t t;
        (void)read_varint(&c->src, &q, c->out.data + payload_at, &t);
        tag_src = c->out.data + tag_at;
        tag_len = (size_t)(q - tag_src);
    } else {
        tag_at = payload_at = end_at = (Py_ssize_t)c->out.len;
    }
    size_t dict_len = (size_t)(end_at - payload_at) + links.len;
    size_t total = (size_t)tag_at + tag_len + (size_t)varint_size(dict_len) + dict_len + (c->out.len - (size_t)end_at);
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!result)
        goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(result);
    memcpy(w, c->out.data, (size_t)tag_at);
    w += tag_at;
    memcpy(w, tag_src, tag_len);
    w = put_varint(w + tag_len, dict_len);
    memcpy(w, c->out.data + payload_at, (size_t)(end_at - payload_at));
    w += end_at - payload_at;
    memcpy(w, links.data, links.len);
    w += links.len;
    memcpy(w, c->out.data + end_at, c->out.len - (size_t)end_at);
done:
    PyMem_Free(links.data);
    return result;
}

PyDoc_STRVAR(link_doc,
"link(data, dictionary, key_roles, has_keys, link_of, n_links, new_links)\n"
"--\n\n"
"Link the wire-format ExportProfilesServiceRequest `data` (bytes). `dictionary`: the canonical serialisation of\n"
"its parsed dictionary; `key_roles`: {string index: ((pair, is_span), ...)} for the configured keys; `has_keys`:\n"
"whether any configured key is in the string table; `link_of`: {(trace_id, span_id): index} of the existing links\n"
"(updated); `n_links`: link_table's length; `new_links`: a list the appended (trace_id, span_id) pairs go to, the\n"
"zero sentinel first when the table was empty.\n\n"
"Returns (linked bytes, samples, linked, invalid, already_linked, links_added); `data` itself when nothing\n"
"changed. Raises ValueError for malformed wire data, OutOfRange(kind, ...) for out-of-range indices.");

static PyObject *fastlink_link(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data, *dict_obj, *key_roles, *link_of, *new_links;
    int has_keys;
    Py_ssize_t n_links;
    if (!PyArg_ParseTuple(args, "SSO!pO!nO!", &data, &dict_obj, &PyDict_Type, &key_roles, &has_keys, &PyDict_Type,
                          &link_of, &n_links, &PyList_Type, &new_links))
        return NULL;
    if (n_links < 0) {
        PyErr_SetString(PyExc_ValueError, "n_links must not be negative");
        return NULL;
    }
    Ctx c;
    memset(&c, 0, sizeof(c));
    const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(dict_obj);
    const uint8_t *r = (const uint8_t *)PyBytes_AS_STRING(data);
    c.dsrc.base = d;
    c.dsrc.what = "dictionary";
    c.src.base = r;
    c.src.what = "request";
    c.key_roles = key_roles;
    c.has_keys = has_keys;
    c.link_of = link_of;
    c.new_links = new_links;
    c.n_links_in = c.n_links = n_links;
    c.dict_tag_at = c.dict_payload_at = c.dict_end_at = -1;
    PyObject *out = NULL;
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    if (index_dictionary(&c, d, d + PyBytes_GET_SIZE(dict_obj)) < 0)
        goto done;
    if (buf_reserve(&c.out, (size_t)size + 64) < 0)
        goto done;
    if (message(&c, 0, r, r + size) < 0)
        goto done;
    if (PyList_GET_SIZE(new_links))
        out = splice_links(&c);
    else if (!c.changed) {
        Py_INCREF(data);
        out = data;
    } else
        out = PyBytes_FromStringAndSize((const char *)c.out.data, (Py_ssize_t)c.out.len);
    if (!out)
        goto done;
    PyObject *result = Py_BuildValue("(Nnnnnn)", out, c.samples, c.linked, c.invalid, c.already, c.links_added);
    ctx_free(&c);
    return result;
done:
    ctx_free(&c);
    return NULL;
}

static PyMethodDef methods[] = {
    {"link", fastlink_link, METH_VARARGS, link_doc},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *m) {
    OutOfRange = PyErr_NewExceptionWithDoc(
        "bridge.otlp._fastlink.OutOfRange",
        "A dictionary index out of range: args ('attribute', index, n_attrs), ('key_strindex', attribute index, "
        "key, n_strings) or ('link', link_index, n_links).",
        NULL, NULL);
    if (!OutOfRange)
        return -1;
    if (PyModule_AddObjectRef(m, "OutOfRange", OutOfRange) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "bridge.otlp._fastlink",
    "Native linking of OTLP profile samples on the wire bytes (see bridge/otlp/fastlink.py).",
    0,
    methods,
    slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastlink(void) { return PyModuleDef_Init(&module); }
