/* gguf-impl.h - what the files of mmap/ share: the layout of a parsed
 * value and of the hr_gguf itself (parsed by gguf.c, read by gguf_value.c
 * and stream.c), scalar decoding, and the encoded-value validator the
 * writer (gguf_write.c) uses. Internal to mmap/: no other module includes
 * this. */
#ifndef HR_MMAP_GGUF_IMPL_H
#define HR_MMAP_GGUF_IMPL_H

#include "mmap/gguf.h"

/* One element of a string array: NUL-terminated copy in the arena. */
typedef struct {
    const char *s;
    uint64_t len; /* bytes, excluding the NUL */
} hr_gguf_sref;

struct hr_gguf_value {
    hr_gguf_vtype type;
    hr_gguf_vtype arr_type; /* element type when type == ARRAY */
    uint64_t n;             /* array length, or string length in bytes */
    union {
        uint64_t u;                 /* UINT8/16/32/64, BOOL (raw byte) */
        int64_t i;                  /* INT8/16/32/64 */
        double f;                   /* FLOAT32 (exact) / FLOAT64 */
        const char *s;              /* STRING: NUL-terminated, in the arena */
        const uint8_t *raw;         /* numeric/bool array: packed LE, in the mapping */
        const hr_gguf_sref *strs;   /* string array: n refs */
        const hr_gguf_value *elems; /* array of arrays: n array values */
    } as;
};

/* One metadata record. */
typedef struct {
    const char *key; /* NUL-terminated, in the arena */
    uint64_t offset; /* file offset of the kv */
    hr_gguf_value v;
} hr_gguf_kvrec;

/* Byte range of the tensors of one "blk.N." layer. */
typedef struct {
    int layer;
    uint64_t begin, end; /* file byte range */
} hr_gguf_span;

/* The parsed file: one arena allocation holds this and every record. */
struct hr_gguf {
    const uint8_t *base;
    uint64_t size;
    bool mapped; /* base is our own mmap of a file (not a caller buffer) */
    int fd;      /* the mapped file, kept open for page-cache advice; -1 for a buffer */
    bool huge;   /* the mapping is advised MADV_HUGEPAGE (gguf.c advise_huge) */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    hr_gguf_kvrec *kvs;
    int64_t n_tensors;
    hr_gguf_tensor *tensors;
    int64_t *kv_index; /* open-addressing hash: kv index or -1 */
    uint64_t kv_mask;
    int64_t *t_index; /* same for tensor names */
    uint64_t t_mask;
    hr_gguf_span *spans; /* sorted by layer, one per layer seen */
    int64_t n_spans;
    int n_layers_seen;
};

/* kv record kv, or NULL when g is NULL or kv is out of range. */
static inline const hr_gguf_kvrec *hr_gguf_impl_kv_at(const hr_gguf *g, int64_t kv) {
    return g && kv >= 0 && kv < g->n_kv ? &g->kvs[kv] : NULL;
}

static inline bool hr_gguf_impl_is_int(hr_gguf_vtype t) {
    return t == HR_GGUF_UINT8 || t == HR_GGUF_INT8 || t == HR_GGUF_UINT16 || t == HR_GGUF_INT16 ||
           t == HR_GGUF_UINT32 || t == HR_GGUF_INT32 || t == HR_GGUF_UINT64 || t == HR_GGUF_INT64;
}

static inline bool hr_gguf_impl_is_signed(hr_gguf_vtype t) {
    return t == HR_GGUF_INT8 || t == HR_GGUF_INT16 || t == HR_GGUF_INT32 || t == HR_GGUF_INT64;
}

/* Decodes one little-endian scalar of type t at p (hr_gguf_vtype_size(t)
 * bytes, possibly unaligned) into out; unknown types decode as 0. */
void hr_gguf_impl_decode_scalar(hr_gguf_vtype t, const uint8_t *p, hr_gguf_value *out);

/* Checks that enc[0..len) is exactly one well-formed encoded value of the
 * given type (the bytes that follow the type field in a kv). 0 or a
 * negative HR_E* code with err saying what is wrong and at which offset. */
int hr_gguf_impl_check_encoded(hr_gguf_vtype type, const void *enc, size_t len,
                               char err[HR_ERR_LEN]);

#endif
