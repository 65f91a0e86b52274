/* gguf.h - GGUF v2/v3 reader over a read-only mmap, and a small writer.
 *
 * hr_gguf_open() maps the file read-only and validates everything before
 * returning: header, every metadata key/value (all value types, nested
 * arrays), tensor infos (names unique, dims and byte sizes without
 * overflow, known types, offsets aligned to general.alignment, data inside
 * the file). Any malformed input returns a negative HR_E* code with err
 * naming what and where (byte offset); it never crashes or reads outside
 * the mapping.
 *
 * Keys and string values are copied NUL-terminated into memory owned by
 * the hr_gguf; tensor data pointers point into the mapping. A hr_gguf is
 * immutable after open: all getters are thread-safe. */
#ifndef HR_MMAP_GGUF_H
#define HR_MMAP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define HR_GGUF_MAX_DIMS 4
#define HR_GGUF_DEFAULT_ALIGNMENT 32
/* Arrays of arrays nested deeper than this are refused (HR_EUNSUPPORTED). */
#define HR_GGUF_MAX_NESTING 8

typedef enum {
    HR_GGUF_UINT8 = 0,
    HR_GGUF_INT8 = 1,
    HR_GGUF_UINT16 = 2,
    HR_GGUF_INT16 = 3,
    HR_GGUF_UINT32 = 4,
    HR_GGUF_INT32 = 5,
    HR_GGUF_FLOAT32 = 6,
    HR_GGUF_BOOL = 7,
    HR_GGUF_STRING = 8,
    HR_GGUF_ARRAY = 9,
    HR_GGUF_UINT64 = 10,
    HR_GGUF_INT64 = 11,
    HR_GGUF_FLOAT64 = 12,
} hr_gguf_vtype;

/* Returned by the type getters for a missing kv or a value that is not an
 * array. */
#define HR_GGUF_NONE ((hr_gguf_vtype)-1)

/* Bytes of one scalar of type t; 0 for STRING, ARRAY and unknown ids. */
size_t hr_gguf_vtype_size(hr_gguf_vtype t);
/* "uint32", "string", "array", ...; "unknown" otherwise. */
const char *hr_gguf_vtype_name(hr_gguf_vtype t);

typedef struct hr_gguf hr_gguf;

typedef struct {
    const char *name;             /* NUL-terminated, owned by the hr_gguf */
    int type;                     /* hr_type id (kernels/types.h) */
    int n_dims;                   /* 1..4 */
    int64_t ne[HR_GGUF_MAX_DIMS]; /* ne[0] = row length; unused dims = 1 */
    uint64_t offset;              /* absolute file offset of the data */
    uint64_t size;                /* bytes */
    const void *data;             /* into the mapping */
} hr_gguf_tensor;

/* Opens and validates path. On success *out owns the mapping.
 * Errors: HR_ENOENT / HR_EDENIED / HR_EIO / HR_EINVAL (not a regular file)
 * for the file itself; HR_EFORMAT for malformed content (bad magic,
 * truncation, counts or lengths past the end, empty or duplicate names,
 * bad alignment, dims, sizes, offsets); HR_EUNSUPPORTED for v1, big-endian
 * files, unknown tensor types and arrays nested past HR_GGUF_MAX_NESTING;
 * HR_ENOMEM. Thread-safe (no shared state). */
int hr_gguf_open(hr_gguf **out, const char *path, char err[HR_ERR_LEN]);
/* Same over a caller buffer (borrowed; must outlive the hr_gguf). */
int hr_gguf_open_memory(hr_gguf **out, const void *data, size_t size, char err[HR_ERR_LEN]);
void hr_gguf_close(hr_gguf *g); /* NULL is a no-op */

uint32_t hr_gguf_version(const hr_gguf *g);
uint64_t hr_gguf_alignment(const hr_gguf *g);
const void *hr_gguf_base(const hr_gguf *g); /* start of the mapping */
uint64_t hr_gguf_file_size(const hr_gguf *g);
/* Start of tensor data (clamped to the file size in a tensor-less file
 * that ends without padding). */
uint64_t hr_gguf_data_offset(const hr_gguf *g);

/* ---- metadata ---- */
int64_t hr_gguf_n_kv(const hr_gguf *g);
int64_t hr_gguf_find_key(const hr_gguf *g, const char *key); /* -1 if absent */
const char *hr_gguf_key(const hr_gguf *g, int64_t kv);
hr_gguf_vtype hr_gguf_kv_type(const hr_gguf *g, int64_t kv);

/* Typed scalar getters by key. Return 0, HR_ENOENT when the key is absent,
 * HR_EFORMAT when the type does not fit (integers convert between widths
 * when the value is in range; floats accept float32/float64). */
int hr_gguf_get_u32(const hr_gguf *g, const char *key, uint32_t *out);
int hr_gguf_get_i64(const hr_gguf *g, const char *key, int64_t *out);
int hr_gguf_get_f32(const hr_gguf *g, const char *key, float *out);
int hr_gguf_get_bool(const hr_gguf *g, const char *key, bool *out);
int hr_gguf_get_str(const hr_gguf *g, const char *key, const char **out);

/* Arrays (by kv index). Element type of a nested array is HR_GGUF_ARRAY. */
hr_gguf_vtype hr_gguf_arr_type(const hr_gguf *g, int64_t kv);
uint64_t hr_gguf_arr_len(const hr_gguf *g, int64_t kv);
/* Element j of a string array (NUL-terminated; *len excludes the NUL). */
int hr_gguf_arr_str(const hr_gguf *g, int64_t kv, uint64_t j, const char **s, size_t *len);
/* Element j of a numeric or bool array converted to double / int64. */
int hr_gguf_arr_f64(const hr_gguf *g, int64_t kv, uint64_t j, double *out);
int hr_gguf_arr_i64(const hr_gguf *g, int64_t kv, uint64_t j, int64_t *out);
/* The above return HR_ENOENT for a missing kv (kv < 0, e.g. straight from
 * hr_gguf_find_key), HR_EFORMAT when the kv is not an array of a fitting
 * type (arr_i64 refuses float arrays and uint64 values above INT64_MAX),
 * HR_ERANGE when j >= length. */
/* Packed little-endian elements of a numeric/bool array, straight from the
 * mapping (possibly unaligned: memcpy them); NULL for other kvs. */
const void *hr_gguf_arr_data(const hr_gguf *g, int64_t kv);

/* Generic value access for printing / nested arrays. A value handle is an
 * opaque pointer valid for the hr_gguf's lifetime. */
typedef struct hr_gguf_value hr_gguf_value;
const hr_gguf_value *hr_gguf_kv_value(const hr_gguf *g, int64_t kv);
hr_gguf_vtype hr_gguf_value_type(const hr_gguf_value *v);
uint64_t hr_gguf_value_arr_len(const hr_gguf_value *v);                        /* 0 unless array */
const hr_gguf_value *hr_gguf_value_arr_at(const hr_gguf_value *v, uint64_t j); /* nested only */
/* Formats a value for humans (arrays abbreviated past max_elems; a
 * negative max_elems prints every element). Always NUL-terminates when
 * cap > 0. */
void hr_gguf_value_format(const hr_gguf_value *v, char *buf, size_t cap, int max_elems);
/* Value-level getters, the same rules as the kv-level ones (HR_EFORMAT on
 * a type that does not fit, HR_ERANGE for j >= length). value_i64 takes
 * integer scalars; value_f64 takes any numeric scalar. Arrays: */
hr_gguf_vtype hr_gguf_value_arr_type(const hr_gguf_value *v); /* HR_GGUF_NONE unless array */
int hr_gguf_value_str(const hr_gguf_value *v, const char **s, size_t *len);
int hr_gguf_value_i64(const hr_gguf_value *v, int64_t *out);
int hr_gguf_value_f64(const hr_gguf_value *v, double *out);
int hr_gguf_value_arr_str(const hr_gguf_value *v, uint64_t j, const char **s, size_t *len);
int hr_gguf_value_arr_i64(const hr_gguf_value *v, uint64_t j, int64_t *out);
int hr_gguf_value_arr_f64(const hr_gguf_value *v, uint64_t j, double *out);
const void *hr_gguf_value_arr_data(const hr_gguf_value *v); /* numeric/bool arrays */

/* ---- tensors ---- */
int64_t hr_gguf_n_tensors(const hr_gguf *g);
const hr_gguf_tensor *hr_gguf_tensor_at(const hr_gguf *g, int64_t i);
const hr_gguf_tensor *hr_gguf_find_tensor(const hr_gguf *g, const char *name); /* NULL if absent */

/* Byte range [*begin, *end) of the file covering every "blk.<layer>.*"
 * tensor. Returns HR_ENOENT if the layer has no tensors. */
int hr_gguf_layer_range(const hr_gguf *g, int layer, uint64_t *begin, uint64_t *end);
/* Number of layers = 1 + the largest N seen in "blk.N." names (0 if none). */
int hr_gguf_n_layers_seen(const hr_gguf *g);

/* ---- writer (used by `hearth mkmodel` and tests) ----
 * Collects metadata and tensors in memory, then writes a GGUF v3 file.
 * Tensor data passed to add_tensor is copied. Not thread-safe. */
typedef struct hr_gguf_writer hr_gguf_writer;
hr_gguf_writer *hr_gguf_writer_create(void);
void hr_gguf_writer_destroy(hr_gguf_writer *w);
int hr_gguf_writer_set_u32(hr_gguf_writer *w, const char *key, uint32_t v);
int hr_gguf_writer_set_i32(hr_gguf_writer *w, const char *key, int32_t v);
int hr_gguf_writer_set_f32(hr_gguf_writer *w, const char *key, float v);
int hr_gguf_writer_set_bool(hr_gguf_writer *w, const char *key, bool v);
int hr_gguf_writer_set_str(hr_gguf_writer *w, const char *key, const char *v);
/* Arrays: elem_type is a scalar vtype (not STRING/ARRAY); data holds n
 * packed little-endian elements of that type. */
int hr_gguf_writer_set_arr(hr_gguf_writer *w, const char *key, hr_gguf_vtype elem_type,
                           const void *data, uint64_t n);
int hr_gguf_writer_set_arr_str(hr_gguf_writer *w, const char *key, const char *const *strs,
                               uint64_t n);
/* Copies every kv of src (used to carry a tokenizer into a new model)
 * whose key starts with prefix (NULL or "": all of them). */
int hr_gguf_writer_copy_kv(hr_gguf_writer *w, const hr_gguf *src, const char *prefix);
int hr_gguf_writer_add_tensor(hr_gguf_writer *w, const char *name, int type, int n_dims,
                              const int64_t *ne, const void *data, uint64_t size);
/* Streams to path (tensor data written as added); err says what failed. */
int hr_gguf_writer_write(hr_gguf_writer *w, const char *path, char err[HR_ERR_LEN]);

/* Additions. Setting a key that is already set replaces its value. A
 * general.alignment kv (uint32, power of two) overrides the default 32.
 * Setters return HR_EINVAL on bad arguments, HR_ENOMEM; the message of the
 * last failed call is hr_gguf_writer_error() ("" if none). */
/* Any scalar type; v points to its C value (uint8_t ... double, bool). */
int hr_gguf_writer_set_scalar(hr_gguf_writer *w, const char *key, hr_gguf_vtype type,
                              const void *v);
/* Deep copy of a value of an open hr_gguf (any type, nested arrays too). */
int hr_gguf_writer_set_value(hr_gguf_writer *w, const char *key, const hr_gguf_value *v);
/* A value given as its GGUF encoding (what follows the type field: for an
 * ARRAY the element type, count and elements, nested arrays included);
 * validated like the reader does (HR_EFORMAT / HR_EUNSUPPORTED). */
int hr_gguf_writer_set_encoded(hr_gguf_writer *w, const char *key, hr_gguf_vtype type,
                               const void *enc, size_t len);
/* Like add_tensor but borrows data: it must stay valid until write. */
int hr_gguf_writer_add_tensor_nocopy(hr_gguf_writer *w, const char *name, int type, int n_dims,
                                     const int64_t *ne, const void *data, uint64_t size);
const char *hr_gguf_writer_error(const hr_gguf_writer *w);

#endif
