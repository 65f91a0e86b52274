/* gguf.c - GGUF v2/v3 reader over a read-only mapping: opening, parsing
 * and validating the header, key/values, tensor table and layer spans;
 * the file-level, key-index and tensor getters. The value accessors and
 * formatting are in gguf_value.c.
 *
 * Parsing runs twice over the header. Pass 1 checks every bound, type and
 * count and sums what the arena needs (kv and tensor records, string
 * bytes, string-array refs, nested-array nodes); one allocation then holds
 * the hr_gguf and all of that. Pass 2 walks the same bytes again, copying
 * keys and strings into the arena, and does the cross-record checks
 * (duplicate keys / tensor names, tensor data inside the file). Every count
 * read from the file is checked against the bytes left before it is used,
 * so the arena is bounded by a small multiple of the file size. */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "mmap/gguf.h"

#include "common/log.h"
#include "kernels/types.h"
#include "mmap/gguf-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

#define TAG "gguf"
#define HEADER_BYTES 24 /* magic, version, n_tensors, n_kv */
/* Smallest possible kv: key length 8 + 1 key byte + type 4 + 1 value byte. */
#define MIN_KV_BYTES 14
/* Smallest tensor info: name 8+1, n_dims 4, one dim 8, type 4, offset 8. */
#define MIN_TENSOR_BYTES 33

/* Parser state shared by both passes. */
typedef struct {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    const char *name; /* file name for messages */
    char *err;
    char what[112]; /* record being parsed, e.g. "kv 3 'general.name'" */
    int64_t elem;   /* innermost array element being parsed, or -1 */
    bool fill;      /* pass 2 */
    uint64_t alignment;
    /* pass 1 totals */
    uint64_t n_chars, n_srefs, n_nodes;
    /* pass 2 cursors into the arena */
    char *chars;
    hr_gguf_sref *srefs;
    hr_gguf_value *nodes;
} rd;

/* ---- errors and primitive reads ---- */

static int fail(rd *r, int code, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(rd *r, int code, uint64_t off, const char *fmt, ...) {
    char msg[HR_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->what[0] && r->elem >= 0)
        return hr_seterr(r->err, code, "%s: offset %" PRIu64 ": %s element %" PRId64 ": %s",
                         r->name, off, r->what, r->elem, msg);
    if (r->what[0])
        return hr_seterr(r->err, code, "%s: offset %" PRIu64 ": %s: %s", r->name, off, r->what,
                         msg);
    return hr_seterr(r->err, code, "%s: offset %" PRIu64 ": %s", r->name, off, msg);
}

static uint64_t remaining(const rd *r) { return r->size - r->pos; }

static int need(rd *r, uint64_t n, const char *item) {
    if (remaining(r) < n)
        return fail(r, HR_EFORMAT, r->pos,
                    "truncated %s: need %" PRIu64 " bytes, %" PRIu64 " remain", item, n,
                    remaining(r));
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *item) {
    int rc = need(r, 4, item);
    if (rc)
        return rc;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *item) {
    int rc = need(r, 8, item);
    if (rc)
        return rc;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

/* Reads a GGUF string (u64 length + bytes). Pass 1 counts its arena bytes,
 * pass 2 copies it NUL-terminated into the arena (*copy). Names (keys,
 * tensor names) must be non-empty and free of NUL bytes. */
static int rd_str(rd *r, const char *item, bool is_name, const uint8_t **src, uint64_t *len,
                  const char **copy) {
    uint64_t at = r->pos;
    int rc = need(r, 8, item);
    if (rc)
        return rc;
    memcpy(len, r->p + r->pos, 8);
    r->pos += 8;
    if (*len > remaining(r))
        return fail(r, HR_EFORMAT, at, "%s length %" PRIu64 " exceeds remaining %" PRIu64 " bytes",
                    item, *len, remaining(r));
    const uint8_t *s = r->p + r->pos;
    if (is_name) {
        if (*len == 0)
            return fail(r, HR_EFORMAT, at, "empty %s", item);
        if (memchr(s, 0, *len))
            return fail(r, HR_EFORMAT, at, "%s contains a NUL byte", item);
    }
    if (r->fill) {
        memcpy(r->chars, s, *len);
        r->chars[*len] = '\0';
        if (copy)
            *copy = r->chars;
        r->chars += *len + 1;
    } else {
        r->n_chars += *len + 1;
    }
    if (src)
        *src = s;
    r->pos += *len;
    return 0;
}

/* ---- values ---- */

/* Parses one value of type t (the bytes after a type field). out is NULL
 * in pass 1. depth counts enclosing arrays. */
static int parse_value(rd *r, uint32_t t, hr_gguf_value *out, int depth) {
    uint64_t at = r->pos;
    size_t sz = hr_gguf_vtype_size((hr_gguf_vtype)t);
    int rc;
    if (sz) {
        if ((rc = need(r, sz, hr_gguf_vtype_name((hr_gguf_vtype)t))))
            return rc;
        if (out)
            hr_gguf_impl_decode_scalar((hr_gguf_vtype)t, r->p + r->pos, out);
        r->pos += sz;
        return 0;
    }
    if (t == HR_GGUF_STRING) {
        const char *s = NULL;
        uint64_t len;
        if ((rc = rd_str(r, "string", false, NULL, &len, &s)))
            return rc;
        if (out) {
            out->type = HR_GGUF_STRING;
            out->arr_type = HR_GGUF_NONE;
            out->n = len;
            out->as.s = s;
        }
        return 0;
    }
    if (t != HR_GGUF_ARRAY)
        return fail(r, HR_EFORMAT, at, "unknown value type %" PRIu32, t);
    if (depth >= HR_GGUF_MAX_NESTING)
        return fail(r, HR_EUNSUPPORTED, at, "arrays nested deeper than %d levels",
                    HR_GGUF_MAX_NESTING);
    uint32_t et;
    uint64_t n;
    if ((rc = rd_u32(r, &et, "array element type")) || (rc = rd_u64(r, &n, "array length")))
        return rc;
    size_t esz = hr_gguf_vtype_size((hr_gguf_vtype)et);
    uint64_t min = esz ? esz : et == HR_GGUF_STRING ? 8 : et == HR_GGUF_ARRAY ? 12 : 0;
    if (min == 0)
        return fail(r, HR_EFORMAT, at, "unknown array element type %" PRIu32, et);
    if (n > remaining(r) / min)
        return fail(r, HR_EFORMAT, at + 4,
                    "array length %" PRIu64 " exceeds what the remaining %" PRIu64
                    " bytes can hold (%s elements, >= %" PRIu64 " bytes each)",
                    n, remaining(r), hr_gguf_vtype_name((hr_gguf_vtype)et), min);
    if (out) {
        out->type = HR_GGUF_ARRAY;
        out->arr_type = (hr_gguf_vtype)et;
        out->n = n;
        out->as.raw = NULL;
    }
    if (esz) {
        if (out)
            out->as.raw = r->p + r->pos;
        r->pos += n * esz;
        return 0;
    }
    int64_t outer = r->elem;
    if (et == HR_GGUF_STRING) {
        hr_gguf_sref *refs = NULL;
        if (r->fill) {
            refs = r->srefs;
            r->srefs += n;
            out->as.strs = refs;
        } else {
            r->n_srefs += n;
        }
        for (uint64_t j = 0; j < n; j++) {
            const char *s = NULL;
            uint64_t len;
            r->elem = (int64_t)j;
            if ((rc = rd_str(r, "string", false, NULL, &len, &s)))
                return rc;
            if (refs) {
                refs[j].s = s;
                refs[j].len = len;
            }
        }
        r->elem = outer;
        return 0;
    }
    /* array of arrays: each element is (element type, count, elements) */
    hr_gguf_value *kids = NULL;
    if (r->fill) {
        kids = r->nodes;
        r->nodes += n;
        out->as.elems = kids;
    } else {
        r->n_nodes += n;
    }
    for (uint64_t j = 0; j < n; j++) {
        r->elem = (int64_t)j;
        if ((rc = parse_value(r, HR_GGUF_ARRAY, kids ? &kids[j] : NULL, depth + 1)))
            return rc;
    }
    r->elem = outer;
    return 0;
}

static bool is_pow2(uint64_t a) { return a && (a & (a - 1)) == 0; }

/* general.alignment: an integer, a non-zero power of two. */
static int check_alignment(rd *r, uint64_t at, uint32_t t, const uint8_t *val) {
    if (!hr_gguf_impl_is_int((hr_gguf_vtype)t))
        return fail(r, HR_EFORMAT, at, "general.alignment has type %s, expected uint32",
                    hr_gguf_vtype_name((hr_gguf_vtype)t));
    hr_gguf_value v;
    hr_gguf_impl_decode_scalar((hr_gguf_vtype)t, val, &v);
    if (hr_gguf_impl_is_signed((hr_gguf_vtype)t) && v.as.i < 0)
        return fail(r, HR_EFORMAT, at, "general.alignment %" PRId64 " is not a power of two",
                    v.as.i);
    if (!is_pow2(v.as.u))
        return fail(r, HR_EFORMAT, at, "general.alignment %" PRIu64 " is not a power of two",
                    v.as.u);
    r->alignment = v.as.u;
    return 0;
}

static int parse_kvs(rd *r, uint64_t n_kv, hr_gguf_kvrec *kvs) {
    static const char align_key[] = "general.alignment";
    int rc;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t at = r->pos;
        const uint8_t *key = NULL;
        uint64_t klen = 0;
        const char *kcopy = NULL;
        snprintf(r->what, sizeof r->what, "kv %" PRIu64, i);
        if ((rc = rd_str(r, "key", true, &key, &klen, &kcopy)))
            return rc;
        snprintf(r->what, sizeof r->what, "kv %" PRIu64 " '%.*s%s'", i,
                 (int)(klen > 64 ? 64 : klen), (const char *)key, klen > 64 ? "..." : "");
        uint32_t t;
        if ((rc = rd_u32(r, &t, "value type")))
            return rc;
        uint64_t vat = r->pos;
        if ((rc = parse_value(r, t, kvs ? &kvs[i].v : NULL, 0)))
            return rc;
        if (klen == sizeof align_key - 1 && memcmp(key, align_key, klen) == 0 &&
            (rc = check_alignment(r, vat, t, r->p + vat)))
            return rc;
        if (kvs) {
            kvs[i].key = kcopy;
            kvs[i].offset = at;
        }
    }
    r->what[0] = '\0';
    return 0;
}

/* ---- tensor infos ---- */

static int parse_tensor(rd *r, uint64_t i, hr_gguf_tensor *t) {
    int rc;
    const uint8_t *name = NULL;
    uint64_t nlen = 0;
    const char *ncopy = NULL;
    snprintf(r->what, sizeof r->what, "tensor %" PRIu64, i);
    if ((rc = rd_str(r, "tensor name", true, &name, &nlen, &ncopy)))
        return rc;
    snprintf(r->what, sizeof r->what, "tensor %" PRIu64 " '%.*s%s'", i,
             (int)(nlen > 64 ? 64 : nlen), (const char *)name, nlen > 64 ? "..." : "");
    uint64_t at = r->pos;
    uint32_t n_dims;
    if ((rc = rd_u32(r, &n_dims, "n_dims")))
        return rc;
    if (n_dims < 1 || n_dims > HR_GGUF_MAX_DIMS)
        return fail(r, HR_EFORMAT, at, "n_dims %" PRIu32 " outside 1..%d", n_dims,
                    HR_GGUF_MAX_DIMS);
    int64_t ne[HR_GGUF_MAX_DIMS] = {1, 1, 1, 1};
    at = r->pos;
    if ((rc = need(r, 8ull * n_dims, "dims")))
        return rc;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t v;
        memcpy(&v, r->p + r->pos, 8);
        r->pos += 8;
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return fail(r, HR_EFORMAT, at + 8ull * d,
                        "ne[%" PRIu32 "] = %" PRId64 " is not positive", d, (int64_t)v);
        ne[d] = (int64_t)v;
    }
    uint32_t type;
    uint64_t offset;
    uint64_t type_at = r->pos;
    if ((rc = rd_u32(r, &type, "tensor type")) || (rc = rd_u64(r, &offset, "tensor offset")))
        return rc;
    const hr_type_traits *tr = type <= INT_MAX ? hr_type_get((int)type) : NULL;
    if (!tr || tr->block_elems <= 0 || tr->block_bytes == 0)
        return fail(r, HR_EUNSUPPORTED, type_at, "unknown tensor type id %" PRIu32, type);
    int64_t nel = ne[0];
    for (int d = 1; d < HR_GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(nel, ne[d], &nel))
            return fail(r, HR_EFORMAT, at,
                        "element count %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
                        " overflows int64",
                        ne[0], ne[1], ne[2], ne[3]);
    if (ne[0] % tr->block_elems != 0)
        return fail(r, HR_EFORMAT, at,
                    "ne[0] = %" PRId64 " is not a multiple of the block size %d of type %s", ne[0],
                    tr->block_elems, tr->name ? tr->name : "?");
    int64_t bytes;
    if (__builtin_mul_overflow(ne[0] / tr->block_elems, (int64_t)tr->block_bytes, &bytes) ||
        __builtin_mul_overflow(bytes, ne[1], &bytes) ||
        __builtin_mul_overflow(bytes, ne[2], &bytes) ||
        __builtin_mul_overflow(bytes, ne[3], &bytes))
        return fail(r, HR_EFORMAT, at,
                    "byte size of %" PRId64 " elements of type %s overflows int64", nel,
                    tr->name ? tr->name : "?");
    if (offset % r->alignment != 0)
        return fail(r, HR_EFORMAT, type_at + 4,
                    "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, offset,
                    r->alignment);
    if (t) {
        t->name = ncopy;
        t->type = (int)type;
        t->n_dims = (int)n_dims;
        memcpy(t->ne, ne, sizeof ne);
        t->offset = offset; /* relative until pass 2 adds the data start */
        t->size = (uint64_t)bytes;
        t->data = NULL;
    }
    return 0;
}

static int parse_tensors(rd *r, uint64_t n, hr_gguf_tensor *ts) {
    for (uint64_t i = 0; i < n; i++) {
        int rc = parse_tensor(r, i, ts ? &ts[i] : NULL);
        if (rc)
            return rc;
    }
    r->what[0] = '\0';
    return 0;
}

/* ---- hashing ---- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t table_cap(uint64_t n) {
    uint64_t cap = 8;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

/* Inserts index i under name; returns -1, or the index already there. */
static int64_t table_insert(int64_t *tab, uint64_t mask, const char *name, int64_t i,
                            const char *(*name_of)(const hr_gguf *, int64_t), const hr_gguf *g) {
    for (uint64_t s = hash_str(name) & mask;; s = (s + 1) & mask) {
        if (tab[s] < 0) {
            tab[s] = i;
            return -1;
        }
        if (strcmp(name_of(g, tab[s]), name) == 0)
            return tab[s];
    }
}

static int64_t table_find(const int64_t *tab, uint64_t mask, const char *name,
                          const char *(*name_of)(const hr_gguf *, int64_t), const hr_gguf *g) {
    for (uint64_t s = hash_str(name) & mask;; s = (s + 1) & mask) {
        if (tab[s] < 0)
            return -1;
        if (strcmp(name_of(g, tab[s]), name) == 0)
            return tab[s];
    }
}

static const char *kv_name(const hr_gguf *g, int64_t i) { return g->kvs[i].key; }
static const char *tensor_name(const hr_gguf *g, int64_t i) { return g->tensors[i].name; }

/* ---- layers ---- */

/* N of a "blk.N." name, or -1. */
static int layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    const char *p = name + 4;
    long v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (digits >= 9)
            return -1;
        v = v * 10 + (*p - '0');
    }
    return digits > 0 && *p == '.' ? (int)v : -1;
}

static int span_cmp(const void *a, const void *b) {
    const hr_gguf_span *x = a, *y = b;
    return (x->layer > y->layer) - (x->layer < y->layer);
}

static void build_layers(hr_gguf *g) {
    int64_t n = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const hr_gguf_tensor *t = &g->tensors[i];
        int l = layer_of(t->name);
        if (l < 0)
            continue;
        g->spans[n].layer = l;
        g->spans[n].begin = t->offset;
        g->spans[n].end = t->offset + t->size;
        n++;
    }
    qsort(g->spans, (size_t)n, sizeof *g->spans, span_cmp);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m > 0 && g->spans[m - 1].layer == g->spans[i].layer) {
            hr_gguf_span *s = &g->spans[m - 1];
            if (g->spans[i].begin < s->begin)
                s->begin = g->spans[i].begin;
            if (g->spans[i].end > s->end)
                s->end = g->spans[i].end;
        } else {
            g->spans[m++] = g->spans[i];
        }
    }
    g->n_spans = m;
    g->n_layers_seen = m > 0 ? g->spans[m - 1].layer + 1 : 0;
}

/* ---- open ---- */

static int parse_header(rd *r, uint32_t *version, uint64_t *n_tensors, uint64_t *n_kv) {
    int rc;
    if ((rc = need(r, 4, "header magic")))
        return rc;
    const uint8_t *m = r->p;
    if (memcmp(m, "GGUF", 4) != 0) {
        if (memcmp(m, "FUGG", 4) == 0)
            return fail(r, HR_EUNSUPPORTED, 0,
                        "byte-swapped magic 'FUGG': big-endian GGUF is not supported");
        return fail(r, HR_EFORMAT, 0,
                    "bad magic %02x %02x %02x %02x (expected 'GGUF'): not a GGUF file", m[0], m[1],
                    m[2], m[3]);
    }
    r->pos = 4;
    if ((rc = rd_u32(r, version, "header version")))
        return rc;
    uint32_t v = *version;
    if (v != 2 && v != 3) {
        if (v != 0 && (v & 0xffffu) == 0)
            return fail(r, HR_EUNSUPPORTED, 4,
                        "byte-swapped version 0x%08" PRIx32 ": big-endian GGUF is not supported",
                        v);
        return fail(r, HR_EUNSUPPORTED, 4, "unsupported version %" PRIu32 " (only 2 and 3)%s", v,
                    v == 1 ? "; convert GGUF v1 files with a newer tool" : "");
    }
    if ((rc = rd_u64(r, n_tensors, "tensor count")) || (rc = rd_u64(r, n_kv, "kv count")))
        return rc;
    if (*n_kv > remaining(r) / MIN_KV_BYTES)
        return fail(r, HR_EFORMAT, 16,
                    "n_kv %" PRIu64 " exceeds what the remaining %" PRIu64 " bytes can hold", *n_kv,
                    remaining(r));
    if (*n_tensors > remaining(r) / MIN_TENSOR_BYTES)
        return fail(r, HR_EFORMAT, 8,
                    "n_tensors %" PRIu64 " exceeds what the remaining %" PRIu64 " bytes can hold",
                    *n_tensors, remaining(r));
    return 0;
}

/* off += count * elem, rounded up to 8; false on overflow. */
static bool arena_add(size_t *off, uint64_t count, size_t elem) {
    uint64_t bytes;
    if (__builtin_mul_overflow(count, (uint64_t)elem, &bytes) || bytes > SIZE_MAX - *off - 8)
        return false;
    *off = (*off + (size_t)bytes + 7) & ~(size_t)7;
    return true;
}

static int parse(hr_gguf **out, const uint8_t *p, uint64_t size, const char *name, char *err) {
    rd r;
    memset(&r, 0, sizeof r);
    r.p = p;
    r.size = size;
    r.name = name;
    r.err = err;
    r.elem = -1;
    r.alignment = HR_GGUF_DEFAULT_ALIGNMENT;

    uint32_t version = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    int rc = parse_header(&r, &version, &n_tensors, &n_kv);
    if (rc)
        return rc;
    uint64_t body = r.pos;
    /* pass 1: validate and size */
    if ((rc = parse_kvs(&r, n_kv, NULL)) || (rc = parse_tensors(&r, n_tensors, NULL)))
        return rc;
    uint64_t header_end = r.pos;

    uint64_t kv_cap = table_cap(n_kv), t_cap = table_cap(n_tensors);
    size_t off = (sizeof(hr_gguf) + 7) & ~(size_t)7;
    size_t o_kvs = off, o_nodes, o_srefs, o_tensors, o_spans, o_kvidx, o_tidx, o_chars;
    bool ok = arena_add(&off, n_kv, sizeof(hr_gguf_kvrec));
    o_nodes = off;
    ok = ok && arena_add(&off, r.n_nodes, sizeof(hr_gguf_value));
    o_srefs = off;
    ok = ok && arena_add(&off, r.n_srefs, sizeof(hr_gguf_sref));
    o_tensors = off;
    ok = ok && arena_add(&off, n_tensors, sizeof(hr_gguf_tensor));
    o_spans = off;
    ok = ok && arena_add(&off, n_tensors, sizeof(hr_gguf_span));
    o_kvidx = off;
    ok = ok && arena_add(&off, kv_cap, sizeof(int64_t));
    o_tidx = off;
    ok = ok && arena_add(&off, t_cap, sizeof(int64_t));
    o_chars = off;
    ok = ok && arena_add(&off, r.n_chars, 1);
    uint8_t *arena = ok ? malloc(off) : NULL;
    if (!arena)
        return hr_seterr(err, HR_ENOMEM, "%s: cannot allocate %zu bytes for the GGUF metadata",
                         name, off);

    hr_gguf *g = (hr_gguf *)arena;
    memset(g, 0, sizeof *g);
    g->base = p;
    g->size = size;
    g->fd = -1;
    g->version = version;
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kvs = (hr_gguf_kvrec *)(arena + o_kvs);
    g->tensors = (hr_gguf_tensor *)(arena + o_tensors);
    g->spans = (hr_gguf_span *)(arena + o_spans);
    g->kv_index = (int64_t *)(arena + o_kvidx);
    g->kv_mask = kv_cap - 1;
    g->t_index = (int64_t *)(arena + o_tidx);
    g->t_mask = t_cap - 1;
    memset(g->kv_index, 0xff, kv_cap * sizeof(int64_t));
    memset(g->t_index, 0xff, t_cap * sizeof(int64_t));

    /* pass 2: fill */
    r.pos = body;
    r.fill = true;
    r.nodes = (hr_gguf_value *)(arena + o_nodes);
    r.srefs = (hr_gguf_sref *)(arena + o_srefs);
    r.chars = (char *)(arena + o_chars);
    if ((rc = parse_kvs(&r, n_kv, g->kvs)) || (rc = parse_tensors(&r, n_tensors, g->tensors)))
        goto fail; /* cannot happen after pass 1, kept for safety */
    g->alignment = r.alignment;

    for (int64_t i = 0; i < g->n_kv; i++) {
        int64_t prev = table_insert(g->kv_index, g->kv_mask, g->kvs[i].key, i, kv_name, g);
        if (prev >= 0) {
            rc = hr_seterr(err, HR_EFORMAT,
                           "%s: offset %" PRIu64 ": duplicate key '%.64s' (kv %" PRId64
                           " and kv %" PRId64 ")",
                           name, g->kvs[i].offset, g->kvs[i].key, prev, i);
            goto fail;
        }
    }

    uint64_t pad = header_end % g->alignment ? g->alignment - header_end % g->alignment : 0;
    uint64_t data_offset = pad > UINT64_MAX - header_end ? UINT64_MAX : header_end + pad;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        hr_gguf_tensor *t = &g->tensors[i];
        uint64_t rel = t->offset;
        if (data_offset > size || rel > size - data_offset || t->size > size - data_offset - rel) {
            rc = hr_seterr(err, HR_EFORMAT,
                           "%s: tensor '%.64s' data [%" PRIu64 ", %" PRIu64
                           ") extends past end of file (size %" PRIu64 ")",
                           name, t->name, data_offset + rel, data_offset + rel + t->size, size);
            goto fail;
        }
        t->offset = data_offset + rel;
        t->data = p + t->offset;
        int64_t prev = table_insert(g->t_index, g->t_mask, t->name, i, tensor_name, g);
        if (prev >= 0) {
            rc =
                hr_seterr(err, HR_EFORMAT,
                          "%s: duplicate tensor name '%.64s' (tensors %" PRId64 " and %" PRId64 ")",
                          name, t->name, prev, i);
            goto fail;
        }
    }
    /* A vocab-only file may end right after its kvs, without padding. */
    g->data_offset = g->n_tensors == 0 && data_offset > size ? size : data_offset;
    build_layers(g);
    HR_LOG_DEBUG(TAG,
                 "%s: GGUF v%" PRIu32 ", %" PRId64 " kv, %" PRId64 " tensors, data at %" PRIu64,
                 name, version, g->n_kv, g->n_tensors, g->data_offset);
    *out = g;
    return 0;
fail:
    free(arena);
    return rc;
}

int hr_gguf_open_memory(hr_gguf **out, const void *data, size_t size, char err[HR_ERR_LEN]) {
    if (!out || (!data && size))
        return hr_seterr(err, HR_EINVAL, "hr_gguf_open_memory: NULL argument");
    *out = NULL;
    static const uint8_t empty[1];
    return parse(out, data ? data : empty, size, "<memory>", err);
}

/* Asks for the file's pages in 2 MiB folios mapped by one page-table entry
 * each (MADV_HUGEPAGE on a file mapping). Where the kernel's page cache
 * keeps large folios for the file system (ext4 from Linux 6.16, XFS from
 * 5.18), a fault then reads the aligned 2 MiB around it and maps it whole.
 * Weights are streamed through once per token, and with 4 KiB pages each
 * page costs a TLB miss: on a 2-core Zen 5 guest (nested paging) a pass
 * over a 607 MiB model took 35 ms of CPU in 4 KiB pages against 21 ms in
 * 2 MiB ones, and under a CPU quota 54 ms against 25 (the quota's idle
 * spells cost the cached translations). Pages cached before the mapping
 * keep the size they were read in; elsewhere the advice only widens a
 * fault's read. HEARTH_NO_HUGEPAGE set turns it off. */
static bool advise_huge(void *map, size_t size) {
#ifdef MADV_HUGEPAGE
    if (getenv("HEARTH_NO_HUGEPAGE") == NULL && madvise(map, size, MADV_HUGEPAGE) == 0)
        return true;
#else
    (void)map;
    (void)size;
#endif
    return false;
}

int hr_gguf_open(hr_gguf **out, const char *path, char err[HR_ERR_LEN]) {
    if (!out || !path)
        return hr_seterr(err, HR_EINVAL, "hr_gguf_open: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        int code = e == ENOENT ? HR_ENOENT : e == EACCES ? HR_EDENIED : HR_EIO;
        return hr_seterr(err, code, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return hr_seterr(err, HR_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return hr_seterr(err, HR_EINVAL, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return hr_seterr(err, HR_ENOMEM, "%s: file too large to map", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    bool huge = false;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return hr_seterr(err, e == ENOMEM ? HR_ENOMEM : HR_EIO, "%s: cannot map %zu bytes: %s",
                             path, size, strerror(e));
        }
        huge = advise_huge(map, size);
    }
    if (!map)
        close(fd);
    static const uint8_t empty[1];
    int rc = parse(out, map ? map : empty, size, path, err);
    if (rc) {
        if (map) {
            munmap(map, size);
            close(fd);
        }
        return rc;
    }
    (*out)->mapped = map != NULL;
    (*out)->fd = map ? fd : -1;
    (*out)->huge = huge;
    return 0;
}

void hr_gguf_close(hr_gguf *g) {
    if (!g)
        return;
    if (g->mapped)
        munmap((void *)g->base, g->size);
    if (g->fd >= 0) /* only a mapped file keeps one */
        close(g->fd);
    free(g);
}

int hr_gguf_impl_check_encoded(hr_gguf_vtype type, const void *enc, size_t len,
                               char err[HR_ERR_LEN]) {
    static const uint8_t empty[1];
    rd r;
    memset(&r, 0, sizeof r);
    r.p = enc ? enc : empty;
    r.size = enc ? len : 0;
    r.name = "encoded value";
    r.err = err;
    r.elem = -1;
    r.alignment = HR_GGUF_DEFAULT_ALIGNMENT;
    int rc = parse_value(&r, (uint32_t)type, NULL, 0);
    if (rc)
        return rc;
    if (r.pos != len)
        return hr_seterr(err, HR_EFORMAT,
                         "encoded value: %" PRIu64 " bytes left over after the %s value",
                         (uint64_t)len - r.pos, hr_gguf_vtype_name(type));
    return 0;
}

/* ---- file-level getters ---- */

uint32_t hr_gguf_version(const hr_gguf *g) { return g->version; }
uint64_t hr_gguf_alignment(const hr_gguf *g) { return g->alignment; }
const void *hr_gguf_base(const hr_gguf *g) { return g->base; }
uint64_t hr_gguf_file_size(const hr_gguf *g) { return g->size; }
uint64_t hr_gguf_data_offset(const hr_gguf *g) { return g->data_offset; }

/* ---- metadata ---- */

int64_t hr_gguf_n_kv(const hr_gguf *g) { return g->n_kv; }

int64_t hr_gguf_find_key(const hr_gguf *g, const char *key) {
    if (!g || !key)
        return -1;
    return table_find(g->kv_index, g->kv_mask, key, kv_name, g);
}

const char *hr_gguf_key(const hr_gguf *g, int64_t kv) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, kv);
    return e ? e->key : NULL;
}

/* ---- tensors ---- */

int64_t hr_gguf_n_tensors(const hr_gguf *g) { return g->n_tensors; }

const hr_gguf_tensor *hr_gguf_tensor_at(const hr_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const hr_gguf_tensor *hr_gguf_find_tensor(const hr_gguf *g, const char *name) {
    if (!g || !name)
        return NULL;
    int64_t i = table_find(g->t_index, g->t_mask, name, tensor_name, g);
    return i >= 0 ? &g->tensors[i] : NULL;
}

int hr_gguf_layer_range(const hr_gguf *g, int layer, uint64_t *begin, uint64_t *end) {
    int64_t lo = 0, hi = g->n_spans;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (g->spans[mid].layer < layer)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo >= g->n_spans || g->spans[lo].layer != layer)
        return HR_ENOENT;
    *begin = g->spans[lo].begin;
    *end = g->spans[lo].end;
    return 0;
}

int hr_gguf_n_layers_seen(const hr_gguf *g) { return g->n_layers_seen; }
