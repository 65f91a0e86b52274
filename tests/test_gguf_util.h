/* test_gguf_util.h - what the two GGUF test executables share
 * (test_gguf.c: reading, accessors, writer round trips; test_gguf_bad.c:
 * hostile input): a temp dir, a seeded RNG, exact-size heap copies that
 * ASan watches, a walk over everything an opened file exposes, a byte
 * builder for crafted files, and the round-trip writer holding every value
 * type. Included by one test file each; everything is static. */
#ifndef HR_TESTS_TEST_GGUF_UTIL_H
#define HR_TESTS_TEST_GGUF_UTIL_H

#include "tests/check.h"

#include "kernels/quant.h"
#include "mmap/gguf.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[512];

/* ---- helpers ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static inline uint64_t rnd(void) { /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline const char *tmp_path(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
    return buf;
}

/* Opens an exact-size heap copy of data[0..n) so ASan sees any overread. */
static inline int open_copy(hr_gguf **g, const uint8_t *data, size_t n, char *err) {
    uint8_t *copy = malloc(n ? n : 1);
    if (n)
        memcpy(copy, data, n);
    int rc = hr_gguf_open_memory(g, n ? copy : NULL, n, err);
    if (rc == 0) {
        /* the hr_gguf borrows the buffer: keep it until close */
        return rc;
    }
    free(copy);
    return rc;
}

static inline void close_copy(hr_gguf *g) {
    if (!g)
        return;
    void *base = (void *)hr_gguf_base(g);
    size_t n = hr_gguf_file_size(g);
    hr_gguf_close(g);
    if (n)
        free(base);
}

/* Touches everything an opened file exposes; returns a checksum. */
static inline uint64_t walk(const hr_gguf *g) {
    uint64_t sum = 0;
    char buf[256];
    for (int64_t i = 0; i < hr_gguf_n_kv(g); i++) {
        const char *key = hr_gguf_key(g, i);
        sum += hr_gguf_find_key(g, key) == i;
        const hr_gguf_value *v = hr_gguf_kv_value(g, i);
        hr_gguf_value_format(v, buf, sizeof buf, 4);
        sum += strlen(buf);
        uint64_t n = hr_gguf_arr_len(g, i);
        if (n) {
            const char *s;
            size_t len;
            double d;
            int64_t x;
            uint64_t js[2] = {0, n - 1};
            for (int k = 0; k < 2; k++) {
                if (hr_gguf_arr_str(g, i, js[k], &s, &len) == 0)
                    sum += len + (uint8_t)s[len];
                if (hr_gguf_arr_f64(g, i, js[k], &d) == 0)
                    sum += d == d;
                if (hr_gguf_arr_i64(g, i, js[k], &x) == 0)
                    sum += (uint64_t)x;
                const hr_gguf_value *e = hr_gguf_value_arr_at(v, js[k]);
                if (e)
                    sum += hr_gguf_value_arr_len(e);
            }
        }
    }
    for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        const hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        sum += hr_gguf_find_tensor(g, t->name) == t;
        const uint8_t *d = t->data;
        sum += d[0] + d[t->size - 1];
    }
    for (int l = 0; l < hr_gguf_n_layers_seen(g); l++) {
        uint64_t b, e;
        if (hr_gguf_layer_range(g, l, &b, &e) == 0)
            sum += e - b;
    }
    return sum;
}

/* ---- byte builder for crafted files ---- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} buf_t;

static inline void b_put(buf_t *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static inline void b_u8(buf_t *b, uint8_t v) { b_put(b, &v, 1); }
static inline void b_u32(buf_t *b, uint32_t v) { b_put(b, &v, 4); }
static inline void b_u64(buf_t *b, uint64_t v) { b_put(b, &v, 8); }
static inline void b_f64(buf_t *b, double v) { b_put(b, &v, 8); }
static inline void b_str(buf_t *b, const char *s) {
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static inline void b_hdr(buf_t *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->len = 0;
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
static inline void b_kv_u32(buf_t *b, const char *key, uint32_t v) {
    b_str(b, key);
    b_u32(b, HR_GGUF_UINT32);
    b_u32(b, v);
}
static inline void b_tensor(buf_t *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                            uint32_t type, uint64_t offset) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        b_u64(b, ne[d]);
    b_u32(b, type);
    b_u64(b, offset);
}
static inline void b_pad(buf_t *b, size_t align) {
    while (b->len % align)
        b_u8(b, 0);
}
static inline void b_zeros(buf_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        b_u8(b, 0);
}

/* ---- writer round trip ---- */

typedef struct {
    const char *name;
    int type, n_dims;
    int64_t ne[4];
} tspec;

static const tspec round_tensors[] = {
    {"token_embd.weight", HR_TYPE_F32, 2, {8, 3, 1, 1}},
    {"half", HR_TYPE_F16, 1, {32, 1, 1, 1}},
    {"blk.0.attn_q.weight", HR_TYPE_Q4_0, 2, {64, 2, 1, 1}},
    {"blk.0.attn_norm.weight", HR_TYPE_F32, 1, {5, 1, 1, 1}},
    {"blk.1.ffn_up.weight", HR_TYPE_Q8_0, 3, {32, 2, 2, 1}},
    {"blk.1.ffn_down.weight", HR_TYPE_Q6_K, 4, {256, 1, 1, 2}},
    {"output.weight", HR_TYPE_Q4_K, 2, {256, 3, 1, 1}},
};
#define N_ROUND_TENSORS (sizeof round_tensors / sizeof round_tensors[0])

static inline uint64_t tspec_bytes(const tspec *t) {
    return hr_type_row_bytes(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

/* Encoded nested array: [[1,2,3],[4]] of uint32. */
static inline void enc_nested_u32(buf_t *b) {
    b->len = 0;
    b_u32(b, HR_GGUF_ARRAY);
    b_u64(b, 2);
    b_u32(b, HR_GGUF_UINT32);
    b_u64(b, 3);
    b_u32(b, 1);
    b_u32(b, 2);
    b_u32(b, 3);
    b_u32(b, HR_GGUF_UINT32);
    b_u64(b, 1);
    b_u32(b, 4);
}

/* [["a","bc"],[]] of strings. */
static inline void enc_nested_str(buf_t *b) {
    b->len = 0;
    b_u32(b, HR_GGUF_ARRAY);
    b_u64(b, 2);
    b_u32(b, HR_GGUF_STRING);
    b_u64(b, 2);
    b_str(b, "a");
    b_str(b, "bc");
    b_u32(b, HR_GGUF_STRING);
    b_u64(b, 0);
}

/* [[[1.5]],[[2.5,-3.5]]] of float64, three levels. */
static inline void enc_nested3(buf_t *b) {
    b->len = 0;
    b_u32(b, HR_GGUF_ARRAY);
    b_u64(b, 2);
    b_u32(b, HR_GGUF_ARRAY);
    b_u64(b, 1);
    b_u32(b, HR_GGUF_FLOAT64);
    b_u64(b, 1);
    b_f64(b, 1.5);
    b_u32(b, HR_GGUF_ARRAY);
    b_u64(b, 1);
    b_u32(b, HR_GGUF_FLOAT64);
    b_u64(b, 2);
    b_f64(b, 2.5);
    b_f64(b, -3.5);
}

static uint8_t *tensor_data[N_ROUND_TENSORS];

/* Builds the round-trip writer: every value type and round_tensors. */
static inline hr_gguf_writer *build_writer(void) {
    hr_gguf_writer *w = hr_gguf_writer_create();
    CHECK(w != NULL);
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    uint32_t u32 = 4000000000u;
    int32_t i32 = -2000000000;
    float f32 = 1.5f;
    bool bo = true;
    uint64_t u64 = (1ull << 63) + 5;
    int64_t i64 = -(1ll << 62);
    double f64 = 3.141592653589793;
    CHECK_EQ(hr_gguf_writer_set_str(w, "general.architecture", "test"), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.u8", HR_GGUF_UINT8, &u8), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.i8", HR_GGUF_INT8, &i8), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.u16", HR_GGUF_UINT16, &u16), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.i16", HR_GGUF_INT16, &i16), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.u32", HR_GGUF_UINT32, &u32), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.i32", HR_GGUF_INT32, &i32), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.f32", HR_GGUF_FLOAT32, &f32), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.bool", HR_GGUF_BOOL, &bo), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.u64", HR_GGUF_UINT64, &u64), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.i64", HR_GGUF_INT64, &i64), 0);
    CHECK_EQ(hr_gguf_writer_set_scalar(w, "s.f64", HR_GGUF_FLOAT64, &f64), 0);
    CHECK_EQ(hr_gguf_writer_set_str(w, "s.str", "h\xc3\xa9llo \"w\"\n"), 0);
    CHECK_EQ(hr_gguf_writer_set_str(w, "s.empty", ""), 0);
    CHECK_EQ(hr_gguf_writer_set_u32(w, "c.u32", 7), 0);
    CHECK_EQ(hr_gguf_writer_set_i32(w, "c.i32", -7), 0);
    CHECK_EQ(hr_gguf_writer_set_f32(w, "c.f32", 0.25f), 0);
    CHECK_EQ(hr_gguf_writer_set_bool(w, "c.bool", false), 0);
    /* replaced, not duplicated */
    CHECK_EQ(hr_gguf_writer_set_u32(w, "c.u32", 8), 0);

    const uint8_t a_u8[] = {0, 1, 255};
    const int8_t a_i8[] = {-128, 0, 127};
    const uint16_t a_u16[] = {0, 65535};
    const int16_t a_i16[] = {-32768, 32767};
    const uint32_t a_u32[] = {1, 2, 3, 4, 5};
    const int32_t a_i32[] = {-1, 2, -3};
    const float a_f32[] = {0.5f, -1.25f, 1e30f};
    const uint8_t a_bool[] = {1, 0, 1};
    const uint64_t a_u64[] = {UINT64_MAX, 0};
    const int64_t a_i64[] = {INT64_MIN, INT64_MAX};
    const double a_f64[] = {1e-300, -2.5};
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.u8", HR_GGUF_UINT8, a_u8, 3), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.i8", HR_GGUF_INT8, a_i8, 3), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.u16", HR_GGUF_UINT16, a_u16, 2), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.i16", HR_GGUF_INT16, a_i16, 2), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.u32", HR_GGUF_UINT32, a_u32, 5), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.i32", HR_GGUF_INT32, a_i32, 3), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.f32", HR_GGUF_FLOAT32, a_f32, 3), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.bool", HR_GGUF_BOOL, a_bool, 3), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.u64", HR_GGUF_UINT64, a_u64, 2), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.i64", HR_GGUF_INT64, a_i64, 2), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.f64", HR_GGUF_FLOAT64, a_f64, 2), 0);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "a.empty", HR_GGUF_UINT32, NULL, 0), 0);
    const char *strs[] = {"x", "", "\xe2\x96\x81the", "longer string value"};
    CHECK_EQ(hr_gguf_writer_set_arr_str(w, "a.str", strs, 4), 0);
    buf_t b = {0};
    enc_nested_u32(&b);
    CHECK_EQ(hr_gguf_writer_set_encoded(w, "n.u32", HR_GGUF_ARRAY, b.p, b.len), 0);
    enc_nested_str(&b);
    CHECK_EQ(hr_gguf_writer_set_encoded(w, "n.str", HR_GGUF_ARRAY, b.p, b.len), 0);
    enc_nested3(&b);
    CHECK_EQ(hr_gguf_writer_set_encoded(w, "n.f64", HR_GGUF_ARRAY, b.p, b.len), 0);
    free(b.p);

    for (size_t i = 0; i < N_ROUND_TENSORS; i++) {
        const tspec *t = &round_tensors[i];
        uint64_t n = tspec_bytes(t);
        if (!tensor_data[i]) {
            tensor_data[i] = malloc(n);
            for (uint64_t k = 0; k < n; k++)
                tensor_data[i][k] = (uint8_t)rnd();
        }
        CHECK_EQ(
            hr_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, tensor_data[i], n), 0);
    }
    return w;
}

/* Writes the round-trip file; returns its bytes (caller frees). */
static inline uint8_t *write_small(const char *name, size_t *size) {
    char path[1024], err[HR_ERR_LEN];
    hr_gguf_writer *w = build_writer();
    int rc = hr_gguf_writer_write(w, tmp_path(name, path, sizeof path), err);
    if (rc)
        fprintf(stderr, "write: %s\n", err);
    CHECK_EQ(rc, 0);
    hr_gguf_writer_destroy(w);
    return (uint8_t *)slurp(path, size);
}

/* Removes the temp dir's files. */
static inline void cleanup(void) {
    DIR *d = opendir(tmpdir);
    if (!d)
        return;
    struct dirent *de;
    char path[1024];
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            unlink(tmp_path(de->d_name, path, sizeof path));
    closedir(d);
    rmdir(tmpdir);
}

/* Creates the temp dir TMPDIR/<prefix>_XXXXXX; false (with a message) on
 * failure. */
static inline bool make_tmpdir(const char *prefix) {
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/%s_XXXXXX", t && t[0] ? t : "/tmp", prefix);
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot create temp dir %s\n", tmpdir);
        return false;
    }
    return true;
}

/* Frees the round-trip tensor data build_writer made. */
static inline void free_round_data(void) {
    for (size_t i = 0; i < N_ROUND_TENSORS; i++) {
        free(tensor_data[i]);
        tensor_data[i] = NULL;
    }
}

#endif
