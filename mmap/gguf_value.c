/* gguf_value.c - the value side of the GGUF reader: value-type sizes and
 * names, scalar decoding, the typed kv getters, array and nested-array
 * accessors, and value formatting for humans. Works on the records
 * gguf.c parsed (gguf-impl.h); nothing here reads the file itself. */
#include "mmap/gguf.h"

#include "mmap/gguf-impl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- value types ---- */

size_t hr_gguf_vtype_size(hr_gguf_vtype t) {
    switch (t) {
    case HR_GGUF_UINT8:
    case HR_GGUF_INT8:
    case HR_GGUF_BOOL:
        return 1;
    case HR_GGUF_UINT16:
    case HR_GGUF_INT16:
        return 2;
    case HR_GGUF_UINT32:
    case HR_GGUF_INT32:
    case HR_GGUF_FLOAT32:
        return 4;
    case HR_GGUF_UINT64:
    case HR_GGUF_INT64:
    case HR_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *hr_gguf_vtype_name(hr_gguf_vtype t) {
    static const char *names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                  "int32",  "float32", "bool",   "string", "array",
                                  "uint64", "int64",   "float64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

void hr_gguf_impl_decode_scalar(hr_gguf_vtype t, const uint8_t *p, hr_gguf_value *out) {
    out->type = t;
    out->arr_type = HR_GGUF_NONE;
    out->n = 0;
    switch (t) {
    case HR_GGUF_UINT8:
    case HR_GGUF_BOOL:
        out->as.u = p[0];
        break;
    case HR_GGUF_INT8:
        out->as.i = (int8_t)p[0];
        break;
    case HR_GGUF_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        out->as.u = v;
        break;
    }
    case HR_GGUF_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        out->as.i = v;
        break;
    }
    case HR_GGUF_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        out->as.u = v;
        break;
    }
    case HR_GGUF_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        out->as.i = v;
        break;
    }
    case HR_GGUF_FLOAT32: {
        float v;
        memcpy(&v, p, 4);
        out->as.f = v;
        break;
    }
    case HR_GGUF_UINT64:
        memcpy(&out->as.u, p, 8);
        break;
    case HR_GGUF_INT64:
        memcpy(&out->as.i, p, 8);
        break;
    case HR_GGUF_FLOAT64:
        memcpy(&out->as.f, p, 8);
        break;
    default:
        out->as.u = 0;
        break;
    }
}

/* ---- metadata ---- */

hr_gguf_vtype hr_gguf_kv_type(const hr_gguf *g, int64_t kv) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, kv);
    return e ? e->v.type : HR_GGUF_NONE;
}

const hr_gguf_value *hr_gguf_kv_value(const hr_gguf *g, int64_t kv) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, kv);
    return e ? &e->v : NULL;
}

/* Integer scalar (or bool when allowed) as int64. */
static int value_int(const hr_gguf_value *v, bool allow_bool, int64_t *out) {
    if (hr_gguf_impl_is_signed(v->type)) {
        *out = v->as.i;
        return 0;
    }
    if (hr_gguf_impl_is_int(v->type) || (allow_bool && v->type == HR_GGUF_BOOL)) {
        if (v->type == HR_GGUF_BOOL) {
            *out = v->as.u != 0;
            return 0;
        }
        if (v->as.u > (uint64_t)INT64_MAX)
            return HR_EFORMAT;
        *out = (int64_t)v->as.u;
        return 0;
    }
    return HR_EFORMAT;
}

static int value_num(const hr_gguf_value *v, double *out) {
    if (v->type == HR_GGUF_FLOAT32 || v->type == HR_GGUF_FLOAT64)
        *out = v->as.f;
    else if (hr_gguf_impl_is_signed(v->type))
        *out = (double)v->as.i;
    else if (v->type == HR_GGUF_BOOL)
        *out = v->as.u != 0;
    else if (hr_gguf_impl_is_int(v->type))
        *out = (double)v->as.u;
    else
        return HR_EFORMAT;
    return 0;
}

static const hr_gguf_value *find_value(const hr_gguf *g, const char *key) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, hr_gguf_find_key(g, key));
    return e ? &e->v : NULL;
}

int hr_gguf_get_u32(const hr_gguf *g, const char *key, uint32_t *out) {
    const hr_gguf_value *v = find_value(g, key);
    if (!v)
        return HR_ENOENT;
    if (hr_gguf_impl_is_signed(v->type)) {
        if (v->as.i < 0 || v->as.i > (int64_t)UINT32_MAX)
            return HR_EFORMAT;
        *out = (uint32_t)v->as.i;
        return 0;
    }
    if (!hr_gguf_impl_is_int(v->type) || v->as.u > UINT32_MAX)
        return HR_EFORMAT;
    *out = (uint32_t)v->as.u;
    return 0;
}

int hr_gguf_get_i64(const hr_gguf *g, const char *key, int64_t *out) {
    const hr_gguf_value *v = find_value(g, key);
    return v ? value_int(v, false, out) : HR_ENOENT;
}

int hr_gguf_get_f32(const hr_gguf *g, const char *key, float *out) {
    const hr_gguf_value *v = find_value(g, key);
    if (!v)
        return HR_ENOENT;
    if (v->type != HR_GGUF_FLOAT32 && v->type != HR_GGUF_FLOAT64)
        return HR_EFORMAT;
    *out = (float)v->as.f;
    return 0;
}

int hr_gguf_get_bool(const hr_gguf *g, const char *key, bool *out) {
    const hr_gguf_value *v = find_value(g, key);
    if (!v)
        return HR_ENOENT;
    if (v->type != HR_GGUF_BOOL)
        return HR_EFORMAT;
    *out = v->as.u != 0;
    return 0;
}

int hr_gguf_get_str(const hr_gguf *g, const char *key, const char **out) {
    const hr_gguf_value *v = find_value(g, key);
    if (!v)
        return HR_ENOENT;
    if (v->type != HR_GGUF_STRING)
        return HR_EFORMAT;
    *out = v->as.s;
    return 0;
}

hr_gguf_vtype hr_gguf_arr_type(const hr_gguf *g, int64_t kv) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, kv);
    return e ? hr_gguf_value_arr_type(&e->v) : HR_GGUF_NONE;
}

uint64_t hr_gguf_arr_len(const hr_gguf *g, int64_t kv) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, kv);
    return e ? hr_gguf_value_arr_len(&e->v) : 0;
}

int hr_gguf_arr_str(const hr_gguf *g, int64_t kv, uint64_t j, const char **s, size_t *len) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, kv);
    return e ? hr_gguf_value_arr_str(&e->v, j, s, len) : HR_ENOENT;
}

int hr_gguf_arr_f64(const hr_gguf *g, int64_t kv, uint64_t j, double *out) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, kv);
    return e ? hr_gguf_value_arr_f64(&e->v, j, out) : HR_ENOENT;
}

int hr_gguf_arr_i64(const hr_gguf *g, int64_t kv, uint64_t j, int64_t *out) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, kv);
    return e ? hr_gguf_value_arr_i64(&e->v, j, out) : HR_ENOENT;
}

const void *hr_gguf_arr_data(const hr_gguf *g, int64_t kv) {
    const hr_gguf_kvrec *e = hr_gguf_impl_kv_at(g, kv);
    return e ? hr_gguf_value_arr_data(&e->v) : NULL;
}

/* ---- values ---- */

hr_gguf_vtype hr_gguf_value_type(const hr_gguf_value *v) { return v ? v->type : HR_GGUF_NONE; }

hr_gguf_vtype hr_gguf_value_arr_type(const hr_gguf_value *v) {
    return v && v->type == HR_GGUF_ARRAY ? v->arr_type : HR_GGUF_NONE;
}

uint64_t hr_gguf_value_arr_len(const hr_gguf_value *v) {
    return v && v->type == HR_GGUF_ARRAY ? v->n : 0;
}

const hr_gguf_value *hr_gguf_value_arr_at(const hr_gguf_value *v, uint64_t j) {
    if (!v || v->type != HR_GGUF_ARRAY || v->arr_type != HR_GGUF_ARRAY || j >= v->n)
        return NULL;
    return &v->as.elems[j];
}

const void *hr_gguf_value_arr_data(const hr_gguf_value *v) {
    if (!v || v->type != HR_GGUF_ARRAY || !hr_gguf_vtype_size(v->arr_type))
        return NULL;
    return v->as.raw;
}

int hr_gguf_value_str(const hr_gguf_value *v, const char **s, size_t *len) {
    if (!v)
        return HR_ENOENT;
    if (v->type != HR_GGUF_STRING)
        return HR_EFORMAT;
    *s = v->as.s;
    if (len)
        *len = (size_t)v->n;
    return 0;
}

int hr_gguf_value_i64(const hr_gguf_value *v, int64_t *out) {
    return v ? value_int(v, false, out) : HR_ENOENT;
}

int hr_gguf_value_f64(const hr_gguf_value *v, double *out) {
    return v ? value_num(v, out) : HR_ENOENT;
}

int hr_gguf_value_arr_str(const hr_gguf_value *v, uint64_t j, const char **s, size_t *len) {
    if (!v)
        return HR_ENOENT;
    if (v->type != HR_GGUF_ARRAY || v->arr_type != HR_GGUF_STRING)
        return HR_EFORMAT;
    if (j >= v->n)
        return HR_ERANGE;
    *s = v->as.strs[j].s;
    if (len)
        *len = (size_t)v->as.strs[j].len;
    return 0;
}

/* Element j of a numeric/bool array decoded as a scalar value. */
static int arr_elem(const hr_gguf_value *v, uint64_t j, hr_gguf_value *e) {
    if (!v)
        return HR_ENOENT;
    size_t esz = v->type == HR_GGUF_ARRAY ? hr_gguf_vtype_size(v->arr_type) : 0;
    if (!esz)
        return HR_EFORMAT;
    if (j >= v->n)
        return HR_ERANGE;
    hr_gguf_impl_decode_scalar(v->arr_type, v->as.raw + j * esz, e);
    return 0;
}

int hr_gguf_value_arr_i64(const hr_gguf_value *v, uint64_t j, int64_t *out) {
    hr_gguf_value e;
    int rc = arr_elem(v, j, &e);
    return rc ? rc : value_int(&e, true, out);
}

int hr_gguf_value_arr_f64(const hr_gguf_value *v, uint64_t j, double *out) {
    hr_gguf_value e;
    int rc = arr_elem(v, j, &e);
    return rc ? rc : value_num(&e, out);
}

/* ---- formatting ---- */

typedef struct {
    char *buf;
    size_t cap, len;
} fmtbuf;

static bool fb_full(const fmtbuf *f) { return f->len + 1 >= f->cap; }

static void fb_put(fmtbuf *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fb_put(fmtbuf *f, const char *fmt, ...) {
    if (fb_full(f))
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(f->buf + f->len, f->cap - f->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        f->len = (size_t)n >= f->cap - f->len ? f->cap - 1 : f->len + (size_t)n;
}

static void fb_string(fmtbuf *f, const char *s, uint64_t len) {
    fb_put(f, "\"");
    for (uint64_t i = 0; i < len && !fb_full(f); i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fb_put(f, "\\%c", c);
        else if (c == '\n')
            fb_put(f, "\\n");
        else if (c < 0x20 || c == 0x7f)
            fb_put(f, "\\x%02x", c);
        else
            fb_put(f, "%c", c);
    }
    fb_put(f, "\"");
}

static void fb_scalar(fmtbuf *f, const hr_gguf_value *v) {
    switch (v->type) {
    case HR_GGUF_BOOL:
        fb_put(f, "%s", v->as.u ? "true" : "false");
        break;
    case HR_GGUF_FLOAT32:
        fb_put(f, "%.9g", v->as.f);
        break;
    case HR_GGUF_FLOAT64:
        fb_put(f, "%.17g", v->as.f);
        break;
    default:
        if (hr_gguf_impl_is_signed(v->type))
            fb_put(f, "%" PRId64, v->as.i);
        else
            fb_put(f, "%" PRIu64, v->as.u);
        break;
    }
}

static void fb_value(fmtbuf *f, const hr_gguf_value *v, int max_elems) {
    if (v->type == HR_GGUF_STRING) {
        fb_string(f, v->as.s, v->n);
        return;
    }
    if (v->type != HR_GGUF_ARRAY) {
        fb_scalar(f, v);
        return;
    }
    fb_put(f, "[");
    uint64_t shown = max_elems < 0 || (uint64_t)max_elems > v->n ? v->n : (uint64_t)max_elems;
    for (uint64_t j = 0; j < shown && !fb_full(f); j++) {
        if (j)
            fb_put(f, ", ");
        if (v->arr_type == HR_GGUF_STRING) {
            fb_string(f, v->as.strs[j].s, v->as.strs[j].len);
        } else if (v->arr_type == HR_GGUF_ARRAY) {
            fb_value(f, &v->as.elems[j], max_elems);
        } else {
            hr_gguf_value e;
            hr_gguf_impl_decode_scalar(v->arr_type, v->as.raw + j * hr_gguf_vtype_size(v->arr_type),
                                       &e);
            fb_scalar(f, &e);
        }
    }
    if (shown < v->n)
        fb_put(f, "%s... (%" PRIu64 " total)", shown ? ", " : "", v->n);
    fb_put(f, "]");
}

void hr_gguf_value_format(const hr_gguf_value *v, char *buf, size_t cap, int max_elems) {
    if (!buf || cap == 0)
        return;
    buf[0] = '\0';
    fmtbuf f = {buf, cap, 0};
    if (v)
        fb_value(&f, v, max_elems);
}
