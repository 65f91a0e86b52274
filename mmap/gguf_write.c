/* gguf_write.c - GGUF v3 writer: collects kvs (already encoded) and
 * tensors in memory, then writes header, tensor infos and aligned tensor
 * data with one fwrite for the header and one per tensor. */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "mmap/gguf.h"

#include "kernels/types.h"
#include "mmap/gguf-impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF writer assumes a little-endian host"
#endif

typedef struct {
    char *key;
    hr_gguf_vtype type;
    uint8_t *enc; /* encoded value (what follows the type field) */
    size_t len;
} wkv;

typedef struct {
    char *name;
    int type;
    int n_dims;
    int64_t ne[HR_GGUF_MAX_DIMS];
    const void *data; /* owned copy, or borrowed (nocopy) */
    void *owned;
    uint64_t size;   /* bytes */
    uint64_t offset; /* relative to the data section, set by write */
} wtensor;

struct hr_gguf_writer {
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *ts;
    size_t n_t, cap_t;
    char err[HR_ERR_LEN];
};

static int werr(hr_gguf_writer *w, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int werr(hr_gguf_writer *w, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return code;
}

hr_gguf_writer *hr_gguf_writer_create(void) { return calloc(1, sizeof(hr_gguf_writer)); }

void hr_gguf_writer_destroy(hr_gguf_writer *w) {
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].enc);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->ts[i].name);
        free(w->ts[i].owned);
    }
    free(w->kvs);
    free(w->ts);
    free(w);
}

const char *hr_gguf_writer_error(const hr_gguf_writer *w) { return w ? w->err : ""; }

static bool grow(void **p, size_t *cap, size_t n, size_t elem) {
    if (n < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 16;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Stores key = (type, enc); takes ownership of enc (freed on failure). */
static int put_kv(hr_gguf_writer *w, const char *key, hr_gguf_vtype type, uint8_t *enc,
                  size_t len) {
    if (strcmp(key, "general.alignment") == 0) {
        uint32_t a = 0;
        if (type == HR_GGUF_UINT32)
            memcpy(&a, enc, 4);
        if (type != HR_GGUF_UINT32 || a == 0 || (a & (a - 1)) != 0) {
            free(enc);
            return werr(w, HR_EINVAL, "general.alignment must be a uint32 power of two");
        }
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            free(w->kvs[i].enc);
            w->kvs[i].type = type;
            w->kvs[i].enc = enc;
            w->kvs[i].len = len;
            return 0;
        }
    }
    char *k = dupstr(key);
    if (!k || !grow((void **)&w->kvs, &w->cap_kv, w->n_kv, sizeof *w->kvs)) {
        free(k);
        free(enc);
        return werr(w, HR_ENOMEM, "out of memory adding key '%.64s'", key);
    }
    w->kvs[w->n_kv++] = (wkv){k, type, enc, len};
    return 0;
}

static int check_key(hr_gguf_writer *w, const char *key) {
    if (!key || !key[0])
        return werr(w, HR_EINVAL, "empty or NULL key");
    return 0;
}

static uint8_t *alloc_enc(hr_gguf_writer *w, size_t len, const char *key) {
    uint8_t *p = malloc(len ? len : 1);
    if (!p)
        werr(w, HR_ENOMEM, "out of memory encoding '%.64s' (%zu bytes)", key, len);
    return p;
}

int hr_gguf_writer_set_scalar(hr_gguf_writer *w, const char *key, hr_gguf_vtype type,
                              const void *v) {
    int rc = check_key(w, key);
    if (rc)
        return rc;
    size_t sz = hr_gguf_vtype_size(type);
    if (!sz || !v)
        return werr(w, HR_EINVAL, "'%.64s': set_scalar needs a scalar type, got %s", key,
                    hr_gguf_vtype_name(type));
    uint8_t *enc = alloc_enc(w, sz, key);
    if (!enc)
        return HR_ENOMEM;
    if (type == HR_GGUF_BOOL)
        enc[0] = *(const bool *)v ? 1 : 0;
    else
        memcpy(enc, v, sz);
    return put_kv(w, key, type, enc, sz);
}

int hr_gguf_writer_set_u32(hr_gguf_writer *w, const char *key, uint32_t v) {
    return hr_gguf_writer_set_scalar(w, key, HR_GGUF_UINT32, &v);
}

int hr_gguf_writer_set_i32(hr_gguf_writer *w, const char *key, int32_t v) {
    return hr_gguf_writer_set_scalar(w, key, HR_GGUF_INT32, &v);
}

int hr_gguf_writer_set_f32(hr_gguf_writer *w, const char *key, float v) {
    return hr_gguf_writer_set_scalar(w, key, HR_GGUF_FLOAT32, &v);
}

int hr_gguf_writer_set_bool(hr_gguf_writer *w, const char *key, bool v) {
    return hr_gguf_writer_set_scalar(w, key, HR_GGUF_BOOL, &v);
}

int hr_gguf_writer_set_str(hr_gguf_writer *w, const char *key, const char *v) {
    int rc = check_key(w, key);
    if (rc)
        return rc;
    if (!v)
        return werr(w, HR_EINVAL, "'%.64s': NULL string", key);
    uint64_t n = strlen(v);
    uint8_t *enc = alloc_enc(w, 8 + n, key);
    if (!enc)
        return HR_ENOMEM;
    memcpy(enc, &n, 8);
    memcpy(enc + 8, v, n);
    return put_kv(w, key, HR_GGUF_STRING, enc, 8 + n);
}

int hr_gguf_writer_set_arr(hr_gguf_writer *w, const char *key, hr_gguf_vtype elem_type,
                           const void *data, uint64_t n) {
    int rc = check_key(w, key);
    if (rc)
        return rc;
    size_t esz = hr_gguf_vtype_size(elem_type);
    if (!esz)
        return werr(w, HR_EINVAL, "'%.64s': array element type %s is not a scalar", key,
                    hr_gguf_vtype_name(elem_type));
    if (n && !data)
        return werr(w, HR_EINVAL, "'%.64s': NULL array data", key);
    if (n > (SIZE_MAX - 12) / esz)
        return werr(w, HR_EINVAL, "'%.64s': array of %" PRIu64 " elements too large", key, n);
    size_t len = 12 + (size_t)n * esz;
    uint8_t *enc = alloc_enc(w, len, key);
    if (!enc)
        return HR_ENOMEM;
    uint32_t et = (uint32_t)elem_type;
    memcpy(enc, &et, 4);
    memcpy(enc + 4, &n, 8);
    if (n)
        memcpy(enc + 12, data, (size_t)n * esz);
    return put_kv(w, key, HR_GGUF_ARRAY, enc, len);
}

int hr_gguf_writer_set_arr_str(hr_gguf_writer *w, const char *key, const char *const *strs,
                               uint64_t n) {
    int rc = check_key(w, key);
    if (rc)
        return rc;
    if (n && !strs)
        return werr(w, HR_EINVAL, "'%.64s': NULL string array", key);
    size_t len = 12;
    for (uint64_t j = 0; j < n; j++) {
        if (!strs[j])
            return werr(w, HR_EINVAL, "'%.64s': element %" PRIu64 " is NULL", key, j);
        len += 8 + strlen(strs[j]);
    }
    uint8_t *enc = alloc_enc(w, len, key);
    if (!enc)
        return HR_ENOMEM;
    uint32_t et = HR_GGUF_STRING;
    memcpy(enc, &et, 4);
    memcpy(enc + 4, &n, 8);
    uint8_t *p = enc + 12;
    for (uint64_t j = 0; j < n; j++) {
        uint64_t sl = strlen(strs[j]);
        memcpy(p, &sl, 8);
        memcpy(p + 8, strs[j], sl);
        p += 8 + sl;
    }
    return put_kv(w, key, HR_GGUF_ARRAY, enc, len);
}

/* Encodes v (without its type field) into dst, or only sizes it when dst
 * is NULL. Returns the byte count. */
static size_t encode_value(const hr_gguf_value *v, uint8_t *dst) {
    size_t esz = hr_gguf_vtype_size(v->type);
    if (esz) {
        if (dst) {
            switch (v->type) {
            case HR_GGUF_FLOAT32: {
                float f = (float)v->as.f;
                memcpy(dst, &f, 4);
                break;
            }
            case HR_GGUF_FLOAT64:
                memcpy(dst, &v->as.f, 8);
                break;
            default: /* little-endian: the low bytes of the 64-bit field */
                memcpy(dst, &v->as.u, esz);
                break;
            }
        }
        return esz;
    }
    if (v->type == HR_GGUF_STRING) {
        if (dst) {
            memcpy(dst, &v->n, 8);
            memcpy(dst + 8, v->as.s, v->n);
        }
        return 8 + v->n;
    }
    /* array: element type, count, elements */
    size_t len = 12;
    if (dst) {
        uint32_t et = (uint32_t)v->arr_type;
        memcpy(dst, &et, 4);
        memcpy(dst + 4, &v->n, 8);
    }
    size_t aesz = hr_gguf_vtype_size(v->arr_type);
    if (aesz) {
        if (dst && v->n)
            memcpy(dst + 12, v->as.raw, v->n * aesz);
        return len + v->n * aesz;
    }
    for (uint64_t j = 0; j < v->n; j++) {
        if (v->arr_type == HR_GGUF_STRING) {
            const hr_gguf_sref *s = &v->as.strs[j];
            if (dst) {
                memcpy(dst + len, &s->len, 8);
                memcpy(dst + len + 8, s->s, s->len);
            }
            len += 8 + s->len;
        } else {
            len += encode_value(&v->as.elems[j], dst ? dst + len : NULL);
        }
    }
    return len;
}

int hr_gguf_writer_set_value(hr_gguf_writer *w, const char *key, const hr_gguf_value *v) {
    int rc = check_key(w, key);
    if (rc)
        return rc;
    if (!v)
        return werr(w, HR_EINVAL, "'%.64s': NULL value", key);
    size_t len = encode_value(v, NULL);
    uint8_t *enc = alloc_enc(w, len, key);
    if (!enc)
        return HR_ENOMEM;
    encode_value(v, enc);
    return put_kv(w, key, v->type, enc, len);
}

int hr_gguf_writer_set_encoded(hr_gguf_writer *w, const char *key, hr_gguf_vtype type,
                               const void *enc, size_t len) {
    int rc = check_key(w, key);
    if (rc)
        return rc;
    char e[HR_ERR_LEN];
    if ((rc = hr_gguf_impl_check_encoded(type, enc, len, e)))
        return werr(w, rc, "'%.64s': %s", key, e);
    uint8_t *copy = alloc_enc(w, len, key);
    if (!copy)
        return HR_ENOMEM;
    if (len)
        memcpy(copy, enc, len);
    return put_kv(w, key, type, copy, len);
}

int hr_gguf_writer_copy_kv(hr_gguf_writer *w, const hr_gguf *src, const char *prefix) {
    if (!src)
        return werr(w, HR_EINVAL, "copy_kv: NULL source");
    size_t pl = prefix ? strlen(prefix) : 0;
    for (int64_t i = 0; i < hr_gguf_n_kv(src); i++) {
        const char *key = hr_gguf_key(src, i);
        if (pl && strncmp(key, prefix, pl) != 0)
            continue;
        int rc = hr_gguf_writer_set_value(w, key, hr_gguf_kv_value(src, i));
        if (rc)
            return rc;
    }
    return 0;
}

static int add_tensor(hr_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                      const void *data, uint64_t size, bool copy) {
    if (!name || !name[0])
        return werr(w, HR_EINVAL, "add_tensor: empty or NULL name");
    const hr_type_traits *tr = hr_type_get(type);
    if (!tr || tr->block_elems <= 0 || tr->block_bytes == 0)
        return werr(w, HR_EINVAL, "tensor '%.64s': unknown type id %d", name, type);
    if (n_dims < 1 || n_dims > HR_GGUF_MAX_DIMS || !ne)
        return werr(w, HR_EINVAL, "tensor '%.64s': n_dims %d outside 1..%d", name, n_dims,
                    HR_GGUF_MAX_DIMS);
    wtensor t = {0};
    t.type = type;
    t.n_dims = n_dims;
    for (int d = 0; d < HR_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] <= 0)
            return werr(w, HR_EINVAL, "tensor '%.64s': ne[%d] = %" PRId64 " is not positive", name,
                        d, t.ne[d]);
    }
    if (t.ne[0] % tr->block_elems)
        return werr(w, HR_EINVAL,
                    "tensor '%.64s': ne[0] = %" PRId64 " is not a multiple of the block size %d",
                    name, t.ne[0], tr->block_elems);
    int64_t bytes, nel;
    if (__builtin_mul_overflow(t.ne[0], t.ne[1], &nel) ||
        __builtin_mul_overflow(nel, t.ne[2], &nel) || __builtin_mul_overflow(nel, t.ne[3], &nel) ||
        __builtin_mul_overflow(t.ne[0] / tr->block_elems, (int64_t)tr->block_bytes, &bytes) ||
        __builtin_mul_overflow(bytes, t.ne[1], &bytes) ||
        __builtin_mul_overflow(bytes, t.ne[2], &bytes) ||
        __builtin_mul_overflow(bytes, t.ne[3], &bytes))
        return werr(w, HR_EINVAL, "tensor '%.64s': size overflows int64", name);
    if ((uint64_t)bytes != size)
        return werr(w, HR_EINVAL,
                    "tensor '%.64s': size %" PRIu64 " does not match %" PRId64 " bytes of type %s",
                    name, size, bytes, tr->name ? tr->name : "?");
    if (!data)
        return werr(w, HR_EINVAL, "tensor '%.64s': NULL data", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->ts[i].name, name) == 0)
            return werr(w, HR_EINVAL, "duplicate tensor name '%.64s'", name);
    if (size > SIZE_MAX)
        return werr(w, HR_ENOMEM, "tensor '%.64s': %" PRIu64 " bytes do not fit in memory", name,
                    size);
    t.size = size;
    t.name = dupstr(name);
    if (copy && t.name) {
        t.owned = malloc((size_t)size);
        if (t.owned)
            memcpy(t.owned, data, (size_t)size);
    }
    t.data = copy ? t.owned : data;
    if (!t.name || !t.data || !grow((void **)&w->ts, &w->cap_t, w->n_t, sizeof *w->ts)) {
        free(t.name);
        free(t.owned);
        return werr(w, HR_ENOMEM, "tensor '%.64s': out of memory (%" PRIu64 " bytes)", name, size);
    }
    w->ts[w->n_t++] = t;
    return 0;
}

int hr_gguf_writer_add_tensor(hr_gguf_writer *w, const char *name, int type, int n_dims,
                              const int64_t *ne, const void *data, uint64_t size) {
    return add_tensor(w, name, type, n_dims, ne, data, size, true);
}

int hr_gguf_writer_add_tensor_nocopy(hr_gguf_writer *w, const char *name, int type, int n_dims,
                                     const int64_t *ne, const void *data, uint64_t size) {
    return add_tensor(w, name, type, n_dims, ne, data, size, false);
}

/* ---- write ---- */

static uint8_t *put(uint8_t *p, const void *src, size_t n) {
    memcpy(p, src, n);
    return p + n;
}

static uint8_t *put_u32(uint8_t *p, uint32_t v) { return put(p, &v, 4); }
static uint8_t *put_u64(uint8_t *p, uint64_t v) { return put(p, &v, 8); }

/* Writes n zero bytes. */
static bool write_zeros(FILE *f, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (fwrite(zeros, 1, k, f) != k)
            return false;
        n -= k;
    }
    return true;
}

static uint64_t pad_to(uint64_t off, uint64_t align) {
    return off % align ? align - off % align : 0;
}

int hr_gguf_writer_write(hr_gguf_writer *w, const char *path, char err[HR_ERR_LEN]) {
    if (!w || !path)
        return hr_seterr(err, HR_EINVAL, "hr_gguf_writer_write: NULL argument");
    uint64_t align = HR_GGUF_DEFAULT_ALIGNMENT;
    /* header size: magic, version, counts, kvs, tensor infos */
    uint64_t hdr = 24;
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *k = &w->kvs[i];
        hdr += 8 + strlen(k->key) + 4 + k->len;
        if (strcmp(k->key, "general.alignment") == 0) {
            uint32_t a;
            memcpy(&a, k->enc, 4);
            align = a;
        }
    }
    uint64_t data_bytes = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->ts[i];
        hdr += 8 + strlen(t->name) + 4 + 8ull * (uint64_t)t->n_dims + 4 + 8;
        data_bytes += pad_to(data_bytes, align);
        t->offset = data_bytes;
        data_bytes += t->size;
    }
    uint64_t hdr_pad = w->n_t ? pad_to(hdr, align) : 0;
    if (hdr > SIZE_MAX)
        return hr_seterr(err, HR_ENOMEM, "%s: header of %" PRIu64 " bytes too large", path, hdr);
    uint8_t *buf = malloc((size_t)hdr);
    if (!buf)
        return hr_seterr(err, HR_ENOMEM, "%s: cannot allocate %" PRIu64 " header bytes", path, hdr);
    uint8_t *p = put(buf, "GGUF", 4);
    p = put_u32(p, 3);
    p = put_u64(p, w->n_t);
    p = put_u64(p, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *k = &w->kvs[i];
        uint64_t kl = strlen(k->key);
        p = put_u64(p, kl);
        p = put(p, k->key, kl);
        p = put_u32(p, (uint32_t)k->type);
        p = put(p, k->enc, k->len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        uint64_t nl = strlen(t->name);
        p = put_u64(p, nl);
        p = put(p, t->name, nl);
        p = put_u32(p, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            p = put_u64(p, (uint64_t)t->ne[d]);
        p = put_u32(p, (uint32_t)t->type);
        p = put_u64(p, t->offset);
    }

    FILE *f = fopen(path, "wb");
    if (!f) {
        int e = errno;
        free(buf);
        return hr_seterr(err, HR_EIO, "%s: cannot create: %s", path, strerror(e));
    }
    uint64_t at = 0;
    bool ok = fwrite(buf, 1, (size_t)hdr, f) == hdr && write_zeros(f, hdr_pad);
    free(buf);
    at = hdr + hdr_pad;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        uint64_t gap = hdr + hdr_pad + t->offset - at;
        ok = write_zeros(f, gap) && fwrite(t->data, 1, (size_t)t->size, f) == t->size;
        if (ok)
            at += gap + t->size;
    }
    int e = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        unlink(path);
        return hr_seterr(err, HR_EIO, "%s: write failed near byte %" PRIu64 ": %s", path, at,
                         strerror(e ? e : EIO));
    }
    return 0;
}
