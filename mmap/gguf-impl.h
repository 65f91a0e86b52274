/* gguf-impl.h - what the GGUF reader (gguf.c) and writer (gguf_write.c)
 * share: the layout of a parsed value and the encoded-value validator.
 * Internal to mmap/: no other module includes this. */
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

/* Checks that enc[0..len) is exactly one well-formed encoded value of the
 * given type (the bytes that follow the type field in a kv). 0 or a
 * negative HR_E* code with err saying what is wrong and at which offset. */
int hr_gguf_impl_check_encoded(hr_gguf_vtype type, const void *enc, size_t len,
                               char err[HR_ERR_LEN]);

#endif
