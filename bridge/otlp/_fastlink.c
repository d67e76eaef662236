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
 * declaration is an unknown field to protobuf, and is copied as such here. A sample's fate depends only on its
 * attribute indices (and a non-zero link_index, which it keeps), so it is decided once per distinct
 * attribute-indices payload, with link.py's rules ported: roles per attribute (parse_id), the first configured pair
 * with valid ids, consumed attributes, de-duplicated links. A linked sample is re-emitted without its old
 * attribute_indices / link_index records and with the new ones where the first of fields >= 2 stood (canonical
 * order for canonical input); the lengths of its enclosing messages are re-written. New Link records are appended
 * to the last dictionary record (repeated fields concatenate, so indices stay right), after the zero sentinel when
 * the table was empty.
 *
 * The dictionary is read from the request's own dictionary record (or, when the request splits it over several
 * records, from the caller's serialisation of the merged one): attribute entries are parsed lazily, only those
 * samples refer to, with the parser's rules for repeated fields (the last key wins, AnyValue records merge). The
 * existing links and the configured keys come from link.py's _Linker, so both paths start from the same tables.
 *
 * The walk touches no Python object, so it runs without the GIL. Malformed wire data raises ValueError with an
 * offset; out-of-range dictionary indices raise OutOfRange whose args let the caller word the same message as
 * link.py. Every read is bounds-checked; nothing recurses on input.
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

/* ------------------------------------------------------------------------------------------- errors */

/* The walk runs without the GIL, so it cannot raise: the first failure is recorded here and raised (ValueError,
 * OutOfRange, MemoryError, SystemError) once the GIL is held again. Every function returns -1 (or NULL) after it. */
enum { ERR_NONE, ERR_MALFORMED, ERR_RANGE, ERR_NOMEM, ERR_VALUE, ERR_INTERNAL };

typedef struct {
    int kind;
    const char *what;   /* malformed: "request" or "dictionary" */
    const char *why;    /* malformed: the reason; value / internal: the message */
    Py_ssize_t offset;  /* malformed: where */
    const char *range;  /* out of range: "attribute", "key_strindex" or "link" */
    long long args[3];
    int nargs;
} Err;

static int fail(Err *e, int kind, const char *why) {
    if (e->kind == ERR_NONE) {
        e->kind = kind;
        e->why = why;
    }
    return -1;
}

static int out_of_range(Err *e, const char *range, int nargs, long long a, long long b, long long c) {
    if (e->kind == ERR_NONE) {
        e->kind = ERR_RANGE;
        e->range = range;
        e->nargs = nargs;
        e->args[0] = a;
        e->args[1] = b;
        e->args[2] = c;
    }
    return -1;
}

/* With the GIL held: turn the recorded failure into the Python exception. */
static void raise_err(const Err *e) {
    switch (e->kind) {
    case ERR_MALFORMED:
        PyErr_Format(PyExc_ValueError, "malformed %s at byte %zd: %s", e->what, e->offset, e->why);
        break;
    case ERR_RANGE: {
        PyObject *args = e->nargs == 2 ? Py_BuildValue("(sLL)", e->range, e->args[0], e->args[1])
                                       : Py_BuildValue("(sLLL)", e->range, e->args[0], e->args[1], e->args[2]);
        if (args) {
            PyErr_SetObject(OutOfRange, args);
            Py_DECREF(args);
        }
        break;
    }
    case ERR_NOMEM:
        PyErr_NoMemory();
        break;
    case ERR_VALUE:
        PyErr_SetString(PyExc_ValueError, e->why);
        break;
    default:
        PyErr_SetString(PyExc_SystemError, e->why ? e->why : "bridge.otlp._fastlink failed without saying why");
    }
}

/* ------------------------------------------------------------------------------------------- wire reading */

typedef struct {
    const uint8_t *base; /* start of the whole input: offsets in error messages are relative to it */
    const char *what;    /* "request" or "dictionary" */
    Err *err;
} Src;

static int malformed(const Src *src, const uint8_t *at, const char *why) {
    Err *e = src->err;
    if (e->kind == ERR_NONE) {
        e->kind = ERR_MALFORMED;
        e->what = src->what;
        e->why = why;
        e->offset = (Py_ssize_t)(at - src->base);
    }
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
    uint64_t v;
    const uint8_t *a, *b;
    switch (wt) { /* the usual wire types inline; groups (and their errors) in skip_value */
    case WT_VARINT:
        return read_varint(src, pp, end, &v);
    case WT_LEN:
        return read_len(src, pp, end, &a, &b);
    case WT_EGROUP:
        return malformed(src, tag_start, "end-group without its start-group");
    default:
        return skip_value(src, pp, end, field, wt);
    }
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

/* FNV-1a, then murmur3's finaliser: the hash tables index by the low bits */
static inline uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL ^ n; /* FNV-1a over 8-byte words (keys are a few bytes long) */
    while (n) {
        uint64_t w = 0;
        size_t k = n < 8 ? n : 8;
        memcpy(&w, p, k);
        h ^= w;
        h *= 1099511628211ULL;
        p += k;
        n -= k;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

/* ------------------------------------------------------------------------------------------- output buffer */

/* A growable byte buffer; with `obj` set it is that bytes object's storage (the result is built in place), and
 * growing it takes the GIL for a moment when `*ts` says it was released. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
    PyObject *obj;
    PyThreadState **ts;
    Err *err;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->cap - b->len >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < extra) {
        if (cap > PY_SSIZE_T_MAX / 2)
            return fail(b->err, ERR_NOMEM, NULL);
        cap *= 2;
    }
    if (b->obj) {
        PyThreadState *released = b->ts ? *b->ts : NULL;
        if (released)
            PyEval_RestoreThread(released);
        int rc = _PyBytes_Resize(&b->obj, (Py_ssize_t)cap);
        if (rc < 0)
            PyErr_Clear(); /* raised again from err, with the GIL, at the end */
        if (released)
            *b->ts = PyEval_SaveThread();
        if (rc < 0)
            return fail(b->err, ERR_NOMEM, NULL);
        b->data = (uint8_t *)PyBytes_AS_STRING(b->obj);
    } else {
        uint8_t *data = PyMem_RawRealloc(b->data, cap);
        if (!data)
            return fail(b->err, ERR_NOMEM, NULL);
        b->data = data;
    }
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
    int32_t strindex;
    int pair;
    int is_span;
} KeyRole;

typedef struct {
    uint64_t hash;
    int32_t index;
    uint8_t used, has_trace;
    uint8_t trace[TRACE_BYTES];
    uint8_t span[SPAN_BYTES];
} LinkSlot;

/* One attribute_table entry: where it is in the dictionary, and the roles it plays (computed on first use). */
typedef struct {
    const uint8_t *at, *end; /* its KeyValueAndUnit payload */
    size_t first;            /* its roles: Ctx.roles[first .. first + count] */
    int count;               /* -1: not computed yet */
} Attr;

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
    Attr *attrs;
    size_t attrs_cap;
    Py_ssize_t n_attrs, n_strings;
    Role *roles;
    size_t n_roles, roles_cap;
    KeyRole *key_roles; /* the configured keys found in the string table */
    size_t n_key_roles, key_roles_cap;
    int has_keys;
    /* links */
    LinkSlot *link_map; /* (trace, span) -> index: the existing links, then the appended ones */
    size_t link_map_cap, link_map_used;
    Buf new_links; /* the appended links as dictionary records (field 4), the zero sentinel first if it was missing */
    Py_ssize_t n_links_in, n_links, links_added;
    /* decisions */
    Decision *entries;
    size_t n_entries, entries_cap;
    uint64_t *slots; /* open addressing: high 32 bits of the key's hash, low 32 bits entry index + 1; 0 free */
    size_t slots_cap;
    /* scratch */
    struct Hit *hits;
    size_t hits_cap;
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
    Err err;
    PyThreadState *ts; /* while the GIL is released */
} Ctx;

static void ctx_free(Ctx *c) {
    for (size_t i = 0; i < c->n_entries; i++) {
        PyMem_RawFree(c->entries[i].key_ext);
        PyMem_RawFree(c->entries[i].kept_ext);
    }
    PyMem_RawFree(c->entries);
    PyMem_RawFree(c->slots);
    PyMem_RawFree(c->attrs);
    PyMem_RawFree(c->roles);
    PyMem_RawFree(c->hits);
    PyMem_RawFree(c->vals);
    PyMem_RawFree(c->scratch);
    Py_XDECREF(c->out.obj);
    PyMem_RawFree(c->key_roles);
    PyMem_RawFree(c->link_map);
    PyMem_RawFree(c->new_links.data);
}

static int grow(Err *err, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    if (n > PY_SSIZE_T_MAX / elem)
        return fail(err, ERR_NOMEM, NULL);
    void *q = PyMem_RawRealloc(*p, n * elem);
    if (!q)
        return fail(err, ERR_NOMEM, NULL);
    *p = q;
    *cap = n;
    return 0;
}

/* ------------------------------------------------------------------------------------------- dictionary */

/* Index the canonical dictionary: where each attribute entry is, how many strings there are. */
static int index_dictionary(Ctx *c, const uint8_t *p, const uint8_t *end) {
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
            if (grow(&c->err, (void **)&c->attrs, &c->attrs_cap, (size_t)c->n_attrs + 1, sizeof(Attr)) < 0)
                return -1;
            Attr *attr = &c->attrs[c->n_attrs++];
            attr->at = a;
            attr->end = b;
            attr->count = -1;
        } else if (skip_field(&c->dsrc, &p, end, field, wt, tag_at) < 0) {
            return -1;
        }
    }
    return 0;
}

/* hex digit values + 1 (0: not a hex digit), as binascii.unhexlify reads them */
static uint8_t hex_table[256];

static void init_hex_table(void) {
    for (int i = 0; i < 10; i++)
        hex_table['0' + i] = (uint8_t)(i + 1);
    for (int i = 0; i < 6; i++) {
        hex_table['a' + i] = (uint8_t)(i + 11);
        hex_table['A' + i] = (uint8_t)(i + 11);
    }
}

static int unhex(const uint8_t *text, size_t len, size_t size, uint8_t *out) {
    if (len != 2 * size)
        return 0;
    for (size_t i = 0; i < size; i++) {
        int hi = hex_table[text[2 * i]], lo = hex_table[text[2 * i + 1]];
        if (!hi || !lo)
            return 0;
        out[i] = (uint8_t)((hi - 1) << 4 | (lo - 1));
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
static Attr *roles_of(Ctx *c, int32_t index) {
    if (index < 0 || index >= c->n_attrs) {
        out_of_range(&c->err, "attribute", 2, index, c->n_attrs, 0);
        return NULL;
    }
    Attr *ar = &c->attrs[index];
    if (ar->count >= 0)
        return ar;
    /* KeyValueAndUnit { 1: key_strindex; 2: AnyValue value; 3: unit_strindex } */
    const uint8_t *p = ar->at, *end = ar->end;
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
        out_of_range(&c->err, "key_strindex", 3, index, key, c->n_strings);
        return NULL;
    }
    ar->first = c->n_roles;
    ar->count = 0;
    for (size_t i = 0; i < c->n_key_roles; i++) {
        const KeyRole *kr = &c->key_roles[i];
        if (kr->strindex != key)
            continue;
        if (grow(&c->err, (void **)&c->roles, &c->roles_cap, c->n_roles + 1, sizeof(Role)) < 0)
            return NULL;
        Role *r = &c->roles[c->n_roles++];
        r->pair = kr->pair;
        r->is_span = kr->is_span;
        r->valid = parse_id(kind, val, val_len, kr->is_span ? SPAN_BYTES : TRACE_BYTES, r->id);
        ar->count++;
    }
    return ar;
}

static uint64_t link_hash(int has_trace, const uint8_t *trace, const uint8_t *span) {
    uint8_t key[1 + TRACE_BYTES + SPAN_BYTES] = {0};
    key[0] = (uint8_t)has_trace;
    if (has_trace)
        memcpy(key + 1, trace, TRACE_BYTES);
    memcpy(key + 1 + TRACE_BYTES, span, SPAN_BYTES);
    return hash_bytes(key, sizeof(key));
}

/* The slot of (trace, span) in the link map: its entry, or the free slot where it belongs. */
static LinkSlot *link_slot(Ctx *c, uint64_t h, int has_trace, const uint8_t *trace, const uint8_t *span) {
    size_t j = h & (c->link_map_cap - 1);
    for (;;) {
        LinkSlot *e = &c->link_map[j];
        if (!e->used || (e->hash == h && e->has_trace == has_trace && memcmp(e->span, span, SPAN_BYTES) == 0 &&
                         (!has_trace || memcmp(e->trace, trace, TRACE_BYTES) == 0)))
            return e;
        j = (j + 1) & (c->link_map_cap - 1);
    }
}

static int link_map_grow(Ctx *c) {
    size_t cap = c->link_map_cap ? c->link_map_cap * 2 : 256;
    LinkSlot *old = c->link_map;
    size_t old_cap = c->link_map_cap;
    c->link_map = PyMem_RawCalloc(cap, sizeof(LinkSlot));
    if (!c->link_map) {
        c->link_map = old;
        return fail(&c->err, ERR_NOMEM, NULL);
    }
    c->link_map_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].used)
            *link_slot(c, old[i].hash, old[i].has_trace, old[i].trace, old[i].span) = old[i];
    PyMem_RawFree(old);
    return 0;
}

/* Remember that (trace, span) is link `index`, unless an earlier link already is (the first one wins). */
static int link_put(Ctx *c, int has_trace, const uint8_t *trace, const uint8_t *span, int32_t index) {
    if ((c->link_map_used + 1) * 2 > c->link_map_cap && link_map_grow(c) < 0)
        return -1;
    uint64_t h = link_hash(has_trace, trace, span);
    LinkSlot *e = link_slot(c, h, has_trace, trace, span);
    if (e->used)
        return 0;
    e->used = 1;
    e->hash = h;
    e->has_trace = (uint8_t)has_trace;
    if (has_trace)
        memcpy(e->trace, trace, TRACE_BYTES);
    memcpy(e->span, span, SPAN_BYTES);
    e->index = index;
    c->link_map_used++;
    return 0;
}

/* A Link record of the dictionary (field 4): { 1: trace_id (omitted when empty); 2: span_id }. */
static int put_link_record(Buf *b, const uint8_t *trace, size_t trace_len, const uint8_t *span) {
    size_t body = (trace_len ? 2 + trace_len : 0) + 2 + SPAN_BYTES;
    if (buf_reserve(b, body + 2) < 0)
        return -1;
    uint8_t *w = b->data + b->len;
    *w++ = (4 << 3) | WT_LEN;
    *w++ = (uint8_t)body;
    if (trace_len) {
        *w++ = (1 << 3) | WT_LEN;
        *w++ = (uint8_t)trace_len;
        memcpy(w, trace, trace_len);
        w += trace_len;
    }
    *w++ = (2 << 3) | WT_LEN;
    *w++ = SPAN_BYTES;
    memcpy(w, span, SPAN_BYTES);
    b->len = (size_t)(w + SPAN_BYTES - b->data);
    return 0;
}

/* link._Linker.link_index: find or append the (trace, span) link; trace NULL for a span-only link. */
static int32_t link_index(Ctx *c, const uint8_t *trace, const uint8_t *span) {
    int has_trace = trace != NULL;
    if (c->link_map_cap) {
        LinkSlot *e = link_slot(c, link_hash(has_trace, trace, span), has_trace, trace, span);
        if (e->used)
            return e->index;
    }
    static const uint8_t zeros[TRACE_BYTES] = {0};
    if (c->n_links == 0) { /* index 0 is the zero sentinel; added with the first link */
        if (put_link_record(&c->new_links, zeros, TRACE_BYTES, zeros) < 0)
            return -1;
        c->n_links = 1;
    }
    if (c->n_links >= INT32_MAX) {
        return fail(&c->err, ERR_VALUE, "too many links for an int32 link_index");
    }
    int32_t index = (int32_t)c->n_links;
    if (put_link_record(&c->new_links, trace, has_trace ? TRACE_BYTES : 0, span) < 0 ||
        link_put(c, has_trace, trace, span, index) < 0)
        return -1;
    c->n_links++;
    c->links_added++;
    return index;
}

/* The existing links ({(trace_id, span_id): index} from link.py, all-zero trace ids already made empty). Keys
 * that cannot be looked up (other lengths) are left out. */
static int load_links(Ctx *c, PyObject *link_of) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(link_of, &pos, &key, &value)) {
        const char *trace, *span;
        Py_ssize_t trace_len, span_len;
        if (!PyArg_ParseTuple(key, "y#y#", &trace, &trace_len, &span, &span_len))
            return -1;
        long index = PyLong_AsLong(value);
        if (index == -1 && PyErr_Occurred())
            return -1;
        if ((trace_len != 0 && trace_len != TRACE_BYTES) || span_len != SPAN_BYTES || index <= 0 || index > INT32_MAX)
            continue;
        if (link_put(c, trace_len != 0, (const uint8_t *)trace, (const uint8_t *)span, (int32_t)index) < 0)
            return -1;
    }
    return 0;
}

/* {string index: ((pair, is_span), ...)} from link.py, as a flat table. */
static int load_key_roles(Ctx *c, PyObject *key_roles) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(key_roles, &pos, &key, &value)) {
        long strindex = PyLong_AsLong(key);
        if (strindex == -1 && PyErr_Occurred())
            return -1;
        PyObject *seq = PySequence_Fast(value, "key roles must be sequences of (pair, is_span)");
        if (!seq)
            return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (grow(&c->err, (void **)&c->key_roles, &c->key_roles_cap, c->n_key_roles + (size_t)n, sizeof(KeyRole)) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            int pair, is_span;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ip", &pair, &is_span)) {
                Py_DECREF(seq);
                return -1;
            }
            KeyRole *kr = &c->key_roles[c->n_key_roles++];
            kr->strindex = strindex < INT32_MIN || strindex > INT32_MAX ? -1 : (int32_t)strindex;
            kr->pair = pair;
            kr->is_span = is_span;
        }
        Py_DECREF(seq);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------- decisions */

typedef struct Hit {
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
        if (grow(&c->err, (void **)&c->vals, &c->vals_cap, n + 1, sizeof(int32_t)) < 0)
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
    /* hits: (position, role) for every role of every attribute, in position order */
    size_t n_hits = 0;
    int any_span = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Attr *ar = roles_of(c, c->vals[i]);
        if (!ar)
            return -1;
        if (grow(&c->err, (void **)&c->hits, &c->hits_cap, n_hits + (size_t)ar->count, sizeof(Hit)) < 0)
            return -1;
        for (int k = 0; k < ar->count; k++) {
            c->hits[n_hits].pos = (size_t)i;
            c->hits[n_hits].role = ar->first + (size_t)k;
            any_span |= c->roles[ar->first + (size_t)k].is_span;
            n_hits++;
        }
    }
    if (!n_hits)
        return 0;
    const Hit *hits = c->hits;
    /* pairs in configured order: the first with a valid span id, and a valid trace id if it has a trace attribute */
    const uint8_t *span = NULL, *trace = NULL;
    int last_pair = -1;
    for (;;) {
        int pair = -1;
        for (size_t h = 0; h < n_hits; h++) {
            int p = c->roles[hits[h].role].pair;
            if (p > last_pair && (pair < 0 || p < pair))
                pair = p;
        }
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
        return 0;
    }
    /* consumed: every position holding the chosen span id as a span, or the chosen trace id as a trace */
    if (grow(&c->err, (void **)&c->scratch, &c->scratch_cap, (size_t)n + 1, 1) < 0)
        return -1;
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
        return fail(&c->err, ERR_VALUE, "attribute_indices too long");
    }
    uint8_t *w = d->kept_in;
    if (kept_len > INLINE_BYTES) {
        w = d->kept_ext = PyMem_RawMalloc(kept_len);
        if (!w)
            return fail(&c->err, ERR_NOMEM, NULL);
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!consumed[i])
            w = put_varint(w, (uint64_t)(int64_t)c->vals[i]);
    d->kept_len = (uint32_t)kept_len;
    int32_t link = link_index(c, trace, span);
    if (link < 0)
        return -1;
    d->link = link;
    d->kind = DECISION_LINK;
    return 0;
}

static int slots_grow(Ctx *c) {
    size_t cap = c->slots_cap ? c->slots_cap * 2 : 1024;
    uint64_t *slots = PyMem_RawCalloc(cap, sizeof(uint64_t));
    if (!slots)
        return fail(&c->err, ERR_NOMEM, NULL);
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
    PyMem_RawFree(c->slots);
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
        fail(&c->err, ERR_VALUE, "too many distinct attribute_indices");
        return NULL;
    }
    if (grow(&c->err, (void **)&c->entries, &c->entries_cap, c->n_entries + 1, sizeof(Decision)) < 0)
        return NULL;
    Decision *d = &c->entries[c->n_entries];
    memset(d, 0, sizeof(*d));
    uint8_t *k = d->key_in;
    if (key_len > INLINE_BYTES) {
        k = d->key_ext = PyMem_RawMalloc(key_len);
        if (!k) {
            fail(&c->err, ERR_NOMEM, NULL);
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
    const uint8_t *run = NULL, *run_end = NULL; /* the removed records, when they are one run */
    int attr_records = 0, unpacked = 0, one_run = 1;
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
        if (!run)
            run = rec;
        else if (rec != run_end)
            one_run = 0;
        run_end = p;
    }
    int32_t link_in = (int32_t)(uint32_t)li;
    if (link_in != 0) {
        if (!(0 < link_in && link_in < c->n_links_in)) {
            return out_of_range(&c->err, "link", 2, link_in, c->n_links_in, 0);
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
                if (grow(&c->err, (void **)&c->scratch, &c->scratch_cap, n + (size_t)(b - a) + 1, 1) < 0)
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
    p = anchor;
    if (one_run && run == anchor) { /* the usual layout: the rest is one copy */
        memcpy(w, run_end, (size_t)(end - run_end));
        w += end - run_end;
        p = end;
    }
    while (p < end) {
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
        return fail(&c->err, ERR_INTERNAL, "bridge.otlp._fastlink: sample length mismatch");
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

/* Append the new links to the last dictionary record of out, in place (or add a dictionary record when none). */
static int splice_links(Ctx *c) {
    const Buf links = c->new_links;
    if (c->dict_tag_at < 0) { /* no dictionary record: a new one at the end */
        c->dict_tag_at = (Py_ssize_t)c->out.len;
        if (buf_reserve(&c->out, 1) < 0)
            return -1;
        c->out.data[c->out.len++] = (2 << 3) | WT_LEN;
        c->dict_payload_at = c->dict_end_at = (Py_ssize_t)c->out.len;
    }
    size_t payload_at = (size_t)c->dict_payload_at, end_at = (size_t)c->dict_end_at;
    const uint8_t *q = c->out.data + c->dict_tag_at;
    uint64_t t;
    (void)read_varint(&c->src, &q, c->out.data + payload_at, &t); /* the tag; the old length follows it */
    size_t len_at = (size_t)(q - c->out.data);
    size_t dict_len = end_at - payload_at + links.len;
    size_t new_payload_at = len_at + (size_t)varint_size(dict_len);
    /* new layout: ..tag, length, old payload, links, tail; the links are at least as long as any shrink of a
     * padded length varint, so the tail only moves right */
    size_t tail = c->out.len - end_at;
    size_t new_end = new_payload_at + (end_at - payload_at) + links.len;
    if (new_end + tail > c->out.len && buf_reserve(&c->out, new_end + tail - c->out.len) < 0)
        return -1;
    uint8_t *o = c->out.data;
    memmove(o + new_end, o + end_at, tail);
    memmove(o + new_payload_at, o + payload_at, end_at - payload_at);
    put_varint(o + len_at, dict_len);
    memcpy(o + new_payload_at + (end_at - payload_at), links.data, links.len);
    c->out.len = new_end + tail;
    return 0;
}

PyDoc_STRVAR(link_doc,
"link(data, dictionary, key_roles, has_keys, link_of, n_links)\n"
"--\n\n"
"Link the wire-format ExportProfilesServiceRequest `data` (bytes). `dictionary`: the canonical serialisation of\n"
"its parsed dictionary, or None to read the request's own dictionary record (then the answer is None when there\n"
"are several records: call again with the serialisation); `key_roles`: {string index: ((pair, is_span), ...)} for the configured keys; `has_keys`:\n"
"whether any configured key is in the string table; `link_of`: {(trace_id, span_id): index} of the existing links\n"
"(all-zero trace ids as empty ones); `n_links`: link_table's length. Arguments are not modified.\n\n"
"Returns (linked bytes, samples, linked, invalid, already_linked, links_added); `data` itself when nothing\n"
"changed. Raises ValueError for malformed wire data, OutOfRange(kind, ...) for out-of-range indices.");

/* The request's own dictionary record, when it has at most one (found: 1, none: 0, several or malformed: -1). */
static int own_dictionary(const uint8_t *p, const uint8_t *end, const uint8_t **d, const uint8_t **d_end) {
    Err err = {0};
    Src src = {p, "request", &err};
    int found = 0;
    *d = *d_end = p;
    while (p < end) {
        const uint8_t *rec = p, *a, *b;
        uint32_t field = 0;
        int wt = 0;
        if (read_tag(&src, &p, end, &field, &wt) < 0)
            return -1;
        if (field == 2 && wt == WT_LEN) {
            if (read_len(&src, &p, end, &a, &b) < 0 || found++)
                return -1;
            *d = a;
            *d_end = b;
        } else if (skip_field(&src, &p, end, field, wt, rec) < 0) {
            return -1;
        }
    }
    return found;
}

static PyObject *fastlink_link(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data, *dict_obj, *key_roles, *link_of;
    int has_keys;
    Py_ssize_t n_links;
    if (!PyArg_ParseTuple(args, "SOO!pO!n", &data, &dict_obj, &PyDict_Type, &key_roles, &has_keys, &PyDict_Type,
                          &link_of, &n_links))
        return NULL;
    if (dict_obj != Py_None && !PyBytes_Check(dict_obj)) {
        PyErr_SetString(PyExc_TypeError, "dictionary must be bytes or None");
        return NULL;
    }
    if (n_links < 0) {
        PyErr_SetString(PyExc_ValueError, "n_links must not be negative");
        return NULL;
    }
    const uint8_t *r = (const uint8_t *)PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    const uint8_t *d, *d_end;
    if (dict_obj == Py_None) {
        /* parsing merges repeated dictionary records; the lazy attribute reader does not: ask for the merged form */
        if (own_dictionary(r, r + size, &d, &d_end) < 0)
            Py_RETURN_NONE;
    } else {
        d = (const uint8_t *)PyBytes_AS_STRING(dict_obj);
        d_end = d + PyBytes_GET_SIZE(dict_obj);
    }
    Ctx c;
    memset(&c, 0, sizeof(c));
    c.dsrc.base = d;
    c.dsrc.what = "dictionary";
    c.dsrc.err = &c.err;
    c.src.base = r;
    c.src.what = "request";
    c.src.err = &c.err;
    c.out.err = c.new_links.err = &c.err;
    c.out.ts = &c.ts;
    c.has_keys = has_keys;
    c.n_links_in = c.n_links = n_links;
    c.dict_tag_at = c.dict_payload_at = c.dict_end_at = -1;
    PyObject *out = NULL;
    if (load_key_roles(&c, key_roles) < 0 || load_links(&c, link_of) < 0)
        goto fail;
    /* the result is built in a bytes object with room for the usual growth (link_index fields, new links) */
    c.out.cap = (size_t)size + (size_t)size / 8 + 1024;
    c.out.obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)c.out.cap);
    if (!c.out.obj)
        goto fail;
    c.out.data = (uint8_t *)PyBytes_AS_STRING(c.out.obj);
    /* The walk reads two bytes objects and writes one nobody else sees yet: other threads (the gateway's event
     * loop, when it links in a worker thread) run meanwhile. */
    c.ts = PyEval_SaveThread();
    int rc = index_dictionary(&c, d, d_end);
    if (rc == 0)
        rc = message(&c, 0, r, r + size);
    if (rc == 0 && c.new_links.len)
        rc = splice_links(&c);
    PyEval_RestoreThread(c.ts);
    c.ts = NULL;
    if (rc < 0)
        goto fail;
    if (!c.changed && !c.new_links.len) {
        Py_INCREF(data);
        out = data;
    } else {
        if (_PyBytes_Resize(&c.out.obj, (Py_ssize_t)c.out.len) < 0)
            goto fail;
        out = c.out.obj;
        c.out.obj = NULL;
    }
    PyObject *result = Py_BuildValue("(Nnnnnn)", out, c.samples, c.linked, c.invalid, c.already, c.links_added);
    ctx_free(&c);
    return result;
fail:
    if (!PyErr_Occurred())
        raise_err(&c.err);
    ctx_free(&c);
    return NULL;
}

static PyMethodDef methods[] = {
    {"link", fastlink_link, METH_VARARGS, link_doc},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *m) {
    init_hex_table();
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
