/* test_gguf.c - GGUF reader and writer: the shared model and tokenizer
 * fixtures, a writer round trip over every value type, and hostile input
 * (truncation at many offsets, seeded byte flips, one crafted file per
 * validation rule). */
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

static uint64_t rnd(void) { /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

static const char *tmp_path(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
    return buf;
}

/* Opens an exact-size heap copy of data[0..n) so ASan sees any overread. */
static int open_copy(hr_gguf **g, const uint8_t *data, size_t n, char *err) {
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

static void close_copy(hr_gguf *g) {
    if (!g)
        return;
    void *base = (void *)hr_gguf_base(g);
    size_t n = hr_gguf_file_size(g);
    hr_gguf_close(g);
    if (n)
        free(base);
}

static bool known_code(int rc) {
    return rc == HR_EFORMAT || rc == HR_EUNSUPPORTED || rc == HR_ENOMEM;
}

/* Touches everything an opened file exposes; returns a checksum. */
static uint64_t walk(const hr_gguf *g) {
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

static void b_put(buf_t *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void b_u8(buf_t *b, uint8_t v) { b_put(b, &v, 1); }
static void b_u32(buf_t *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(buf_t *b, uint64_t v) { b_put(b, &v, 8); }
static void b_f64(buf_t *b, double v) { b_put(b, &v, 8); }
static void b_str(buf_t *b, const char *s) {
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static void b_hdr(buf_t *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->len = 0;
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
static void b_kv_u32(buf_t *b, const char *key, uint32_t v) {
    b_str(b, key);
    b_u32(b, HR_GGUF_UINT32);
    b_u32(b, v);
}
static void b_tensor(buf_t *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                     uint64_t offset) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        b_u64(b, ne[d]);
    b_u32(b, type);
    b_u64(b, offset);
}
static void b_pad(buf_t *b, size_t align) {
    while (b->len % align)
        b_u8(b, 0);
}
static void b_zeros(buf_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        b_u8(b, 0);
}

/* Opens b and checks the return code and that err mentions want. */
static void expect(const char *label, const buf_t *b, int code, const char *want) {
    hr_gguf *g = NULL;
    char err[HR_ERR_LEN] = "";
    int rc = open_copy(&g, b->p, b->len, err);
    if (rc != code || (want && !strstr(err, want)))
        fprintf(stderr, "case '%s': rc %d (want %d), err \"%s\" (want \"%s\")\n", label, rc, code,
                err, want ? want : "");
    CHECK_EQ(rc, code);
    if (want)
        CHECK(strstr(err, want) != NULL);
    if (rc == 0) {
        walk(g);
        close_copy(g);
    } else {
        CHECK(g == NULL);
    }
}

/* ---- fixtures ---- */

typedef struct {
    const char *file, *arch;
    uint32_t block_count, n_embd;
    int64_t n_tensors;
    int embd_type, output_type; /* -1: no output.weight (tied) */
} model_fact;

static const model_fact model_facts[] = {
    {"tiny-llama-f32.gguf", "llama", 2, 64, 21, HR_TYPE_F32, HR_TYPE_F32},
    {"small-llama-q4_0.gguf", "llama", 4, 256, 39, HR_TYPE_Q4_0, HR_TYPE_Q6_K},
    {"small-llama-q8_0.gguf", "llama", 4, 256, 39, HR_TYPE_Q8_0, HR_TYPE_Q8_0},
    {"small-llama-q4_k_m.gguf", "llama", 4, 256, 39, HR_TYPE_Q4_K, HR_TYPE_Q6_K},
    {"small-llama-q5_k_m.gguf", "llama", 4, 256, 39, HR_TYPE_Q5_K, HR_TYPE_Q6_K},
    {"small-llama-q6_k.gguf", "llama", 4, 256, 39, HR_TYPE_Q6_K, HR_TYPE_Q6_K},
    {"small-qwen2-f16.gguf", "qwen2", 3, 256, 38, HR_TYPE_F16, -1},
    {"small-qwen2-q4_k_m.gguf", "qwen2", 3, 256, 38, HR_TYPE_Q6_K, -1},
};

/* Checks invariants that hold for any valid model file. */
static void check_model_invariants(const hr_gguf *g, const char *file) {
    uint64_t align = hr_gguf_alignment(g), size = hr_gguf_file_size(g);
    const uint8_t *base = hr_gguf_base(g);
    CHECK_EQ(hr_gguf_data_offset(g) % align, 0);
    int bad = 0;
    for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        const hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        size_t row = hr_type_row_bytes(t->type, t->ne[0]);
        bad += hr_gguf_find_tensor(g, t->name) != t;
        bad += (const uint8_t *)t->data != base + t->offset;
        bad += t->offset % align != 0 || t->offset < hr_gguf_data_offset(g);
        bad += t->offset + t->size > size;
        bad += row == 0 || t->size != (uint64_t)row * (uint64_t)rows;
        for (int d = t->n_dims; d < HR_GGUF_MAX_DIMS; d++)
            bad += t->ne[d] != 1;
        int layer = -1;
        if (sscanf(t->name, "blk.%d.", &layer) == 1) {
            uint64_t b = 0, e = 0;
            bad += hr_gguf_layer_range(g, layer, &b, &e) != 0;
            bad += t->offset < b || t->offset + t->size > e;
        }
    }
    if (bad)
        fprintf(stderr, "%s: %d tensor invariant violations\n", file, bad);
    CHECK_EQ(bad, 0);
    for (int64_t i = 0; i < hr_gguf_n_kv(g); i++)
        CHECK_EQ(hr_gguf_find_key(g, hr_gguf_key(g, i)), i);
}

static void test_models(void) {
    char path[1024], err[HR_ERR_LEN];
    for (size_t m = 0; m < sizeof model_facts / sizeof model_facts[0]; m++) {
        const model_fact *f = &model_facts[m];
        char rel[256];
        snprintf(rel, sizeof rel, "models/%s", f->file);
        hr_gguf *g = NULL;
        int rc = hr_gguf_open(&g, hr_shared_path(rel, path, sizeof path), err);
        if (rc)
            fprintf(stderr, "open %s: %s\n", path, err);
        CHECK_EQ(rc, 0);
        if (rc)
            continue;
        CHECK_EQ(hr_gguf_version(g), 3);
        CHECK_EQ(hr_gguf_alignment(g), 32);
        const char *arch = NULL;
        CHECK_EQ(hr_gguf_get_str(g, "general.architecture", &arch), 0);
        CHECK_STR(arch, f->arch);
        char key[128];
        uint32_t u = 0;
        snprintf(key, sizeof key, "%s.block_count", f->arch);
        CHECK_EQ(hr_gguf_get_u32(g, key, &u), 0);
        CHECK_EQ(u, f->block_count);
        CHECK_EQ(hr_gguf_n_layers_seen(g), (int)f->block_count);
        snprintf(key, sizeof key, "%s.embedding_length", f->arch);
        CHECK_EQ(hr_gguf_get_u32(g, key, &u), 0);
        CHECK_EQ(u, f->n_embd);
        CHECK_EQ(hr_gguf_n_tensors(g), f->n_tensors);
        int64_t tok = hr_gguf_find_key(g, "tokenizer.ggml.tokens");
        CHECK(tok >= 0);
        CHECK_EQ(hr_gguf_kv_type(g, tok), HR_GGUF_ARRAY);
        CHECK_EQ(hr_gguf_arr_type(g, tok), HR_GGUF_STRING);
        CHECK_EQ(hr_gguf_arr_len(g, tok), 32000);
        const hr_gguf_tensor *e = hr_gguf_find_tensor(g, "token_embd.weight");
        CHECK(e != NULL);
        if (e) {
            CHECK_EQ(e->type, f->embd_type);
            CHECK_EQ(e->n_dims, 2);
            CHECK_EQ(e->ne[0], f->n_embd);
            CHECK_EQ(e->ne[1], 32000);
        }
        const hr_gguf_tensor *o = hr_gguf_find_tensor(g, "output.weight");
        CHECK_EQ(o ? o->type : -1, f->output_type);
        CHECK(hr_gguf_find_tensor(g, "no.such.tensor") == NULL);
        CHECK_EQ(hr_gguf_find_key(g, "no.such.key"), -1);
        uint64_t b, en;
        CHECK_EQ(hr_gguf_layer_range(g, (int)f->block_count, &b, &en), HR_ENOENT);
        check_model_invariants(g, f->file);
        hr_gguf_close(g);
    }

    /* tiny-llama-f32 in detail */
    hr_gguf *g = NULL;
    int rc = hr_gguf_open(&g, hr_shared_path("models/tiny-llama-f32.gguf", path, sizeof path), err);
    CHECK_EQ(rc, 0);
    if (rc)
        return;
    uint32_t u = 0;
    float f = 0;
    bool bo = false;
    const char *s = NULL;
    CHECK_EQ(hr_gguf_n_kv(g), 23);
    CHECK_EQ(hr_gguf_get_u32(g, "llama.block_count", &u), 0);
    CHECK_EQ(u, 2);
    CHECK_EQ(hr_gguf_get_u32(g, "llama.attention.head_count", &u), 0);
    CHECK_EQ(u, 4);
    CHECK_EQ(hr_gguf_get_u32(g, "llama.attention.head_count_kv", &u), 0);
    CHECK_EQ(u, 2);
    CHECK_EQ(hr_gguf_get_u32(g, "llama.feed_forward_length", &u), 0);
    CHECK_EQ(u, 160);
    CHECK_EQ(hr_gguf_get_f32(g, "llama.rope.freq_base", &f), 0);
    CHECK_NEAR(f, 10000.0, 0);
    CHECK_EQ(hr_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f), 0);
    CHECK_NEAR(f, 1e-5, 1e-12);
    CHECK_EQ(hr_gguf_get_str(g, "general.name", &s), 0);
    CHECK_STR(s, "fixture-llama-64x2");
    CHECK_EQ(hr_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bo), 0);
    CHECK(bo);
    CHECK_EQ(hr_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &bo), 0);
    CHECK(!bo);
    CHECK_EQ(hr_gguf_get_bool(g, "llama.block_count", &bo), HR_EFORMAT);
    const hr_gguf_tensor *t = hr_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 32000 && t->size == 64ull * 32000 * 4);
    CHECK(t && t->offset == hr_gguf_data_offset(g));
    t = hr_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    CHECK(t && t->ne[0] == 160 && t->ne[1] == 64 && t->n_dims == 2);
    uint64_t b0, e0, b1, e1;
    CHECK_EQ(hr_gguf_layer_range(g, 0, &b0, &e0), 0);
    CHECK_EQ(hr_gguf_layer_range(g, 1, &b1, &e1), 0);
    CHECK_EQ(b0, hr_gguf_find_tensor(g, "blk.0.attn_norm.weight")->offset);
    CHECK(e0 <= b1 && b1 < e1 && e1 <= hr_gguf_file_size(g));
    CHECK_EQ(hr_gguf_layer_range(g, -1, &b0, &e0), HR_ENOENT);
    int64_t kv = hr_gguf_find_key(g, "tokenizer.ggml.token_type");
    int64_t x = 0;
    CHECK_EQ(hr_gguf_arr_type(g, kv), HR_GGUF_INT32);
    CHECK_EQ(hr_gguf_arr_i64(g, kv, 0, &x), 0);
    CHECK_EQ(x, 2);
    CHECK_EQ(hr_gguf_arr_i64(g, kv, 1, &x), 0);
    CHECK_EQ(x, 3);
    CHECK_EQ(hr_gguf_arr_i64(g, kv, 32000, &x), HR_ERANGE);
    char fmt[128];
    hr_gguf_value_format(hr_gguf_kv_value(g, kv), fmt, sizeof fmt, 3);
    CHECK_STR(fmt, "[2, 3, 3, ... (32000 total)]");
    hr_gguf_close(g);
}

static void test_tokenizers(void) {
    char path[1024], err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    int rc = hr_gguf_open(
        &g, hr_shared_path("tokenizer/ggml-vocab-llama-spm.gguf", path, sizeof path), err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        CHECK_EQ(hr_gguf_n_tensors(g), 0);
        CHECK(hr_gguf_data_offset(g) <= hr_gguf_file_size(g));
        const char *s = NULL;
        size_t len = 0;
        CHECK_EQ(hr_gguf_get_str(g, "tokenizer.ggml.model", &s), 0);
        CHECK_STR(s, "llama");
        int64_t tok = hr_gguf_find_key(g, "tokenizer.ggml.tokens");
        CHECK_EQ(hr_gguf_arr_len(g, tok), 32000);
        CHECK_EQ(hr_gguf_arr_str(g, tok, 0, &s, &len), 0);
        CHECK_STR(s, "<unk>");
        CHECK_EQ(len, 5);
        CHECK_EQ(hr_gguf_arr_str(g, tok, 1, &s, &len), 0);
        CHECK_STR(s, "<s>");
        CHECK_EQ(hr_gguf_arr_str(g, tok, 2, &s, &len), 0);
        CHECK_STR(s, "</s>");
        CHECK_EQ(hr_gguf_arr_str(g, tok, 32000, &s, &len), HR_ERANGE);
        CHECK_EQ(hr_gguf_arr_str(g, -1, 0, &s, &len), HR_ENOENT);
        int64_t sc = hr_gguf_find_key(g, "tokenizer.ggml.scores");
        CHECK_EQ(hr_gguf_arr_type(g, sc), HR_GGUF_FLOAT32);
        CHECK_EQ(hr_gguf_arr_len(g, sc), 32000);
        CHECK(hr_gguf_arr_data(g, sc) != NULL);
        CHECK(hr_gguf_arr_data(g, tok) == NULL);
        double d;
        CHECK_EQ(hr_gguf_arr_f64(g, sc, 31999, &d), 0);
        CHECK_EQ(hr_gguf_arr_str(g, sc, 0, &s, &len), HR_EFORMAT);
        uint32_t u;
        CHECK_EQ(hr_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u), 0);
        CHECK_EQ(u, 1);
        /* every token is NUL-terminated at its length */
        int bad = 0;
        for (uint64_t j = 0; j < 32000; j++)
            bad += hr_gguf_arr_str(g, tok, j, &s, &len) != 0 || strlen(s) != len || len == 0;
        CHECK_EQ(bad, 0);
        hr_gguf_close(g);
    }

    rc = hr_gguf_open(&g, hr_shared_path("tokenizer/vocab-qwen2.gguf", path, sizeof path), err);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        const char *s = NULL;
        size_t len;
        CHECK_EQ(hr_gguf_get_str(g, "tokenizer.ggml.pre", &s), 0);
        CHECK_STR(s, "qwen2");
        int64_t tok = hr_gguf_find_key(g, "tokenizer.ggml.tokens");
        int64_t mg = hr_gguf_find_key(g, "tokenizer.ggml.merges");
        CHECK_EQ(hr_gguf_arr_len(g, tok), 151669);
        CHECK_EQ(hr_gguf_arr_len(g, mg), 151387);
        CHECK_EQ(hr_gguf_arr_str(g, mg, 0, &s, &len), 0);
        CHECK_STR(s, "\xc4\xa0 \xc4\xa0"); /* "Ġ Ġ" */
        uint32_t u;
        CHECK_EQ(hr_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u), 0);
        CHECK_EQ(u, 151645);
        hr_gguf_close(g);
    }

    /* speed: the largest vocab, 128k tokens + 280k merges */
    hr_shared_path("tokenizer/vocab-llama-bpe.gguf", path, sizeof path);
    double t0 = now_s();
    int reps = 5;
    for (int i = 0; i < reps; i++) {
        rc = hr_gguf_open(&g, path, err);
        CHECK_EQ(rc, 0);
        if (rc)
            break;
        CHECK_EQ(hr_gguf_arr_len(g, hr_gguf_find_key(g, "tokenizer.ggml.merges")), 280147);
        hr_gguf_close(g);
    }
    double ms = (now_s() - t0) * 1e3 / reps;
    printf("open vocab-llama-bpe.gguf (128k tokens, 280k merges): %.1f ms\n", ms);
    CHECK(ms < 2000);

    /* every tokenizer file opens */
    DIR *dir = opendir(hr_shared_path("tokenizer", path, sizeof path));
    CHECK(dir != NULL);
    struct dirent *de;
    int n = 0;
    while (dir && (de = readdir(dir))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 5, ".gguf") != 0)
            continue;
        char rel[512], p2[1024];
        snprintf(rel, sizeof rel, "tokenizer/%s", de->d_name);
        rc = hr_gguf_open(&g, hr_shared_path(rel, p2, sizeof p2), err);
        if (rc)
            fprintf(stderr, "open %s: %s\n", p2, err);
        CHECK_EQ(rc, 0);
        if (rc == 0) {
            CHECK(hr_gguf_arr_len(g, hr_gguf_find_key(g, "tokenizer.ggml.tokens")) > 1000);
            walk(g);
            hr_gguf_close(g);
        }
        n++;
    }
    if (dir)
        closedir(dir);
    CHECK(n >= 7);
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

static uint64_t tspec_bytes(const tspec *t) {
    return hr_type_row_bytes(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

/* Encoded nested array: [[1,2,3],[4]] of uint32. */
static void enc_nested_u32(buf_t *b) {
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
static void enc_nested_str(buf_t *b) {
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
static void enc_nested3(buf_t *b) {
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
static hr_gguf_writer *build_writer(void) {
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

/* Compares a reopened round-trip file with what build_writer put in. */
static void check_round(const hr_gguf *g, uint64_t align) {
    CHECK_EQ(hr_gguf_version(g), 3);
    CHECK_EQ(hr_gguf_alignment(g), align);
    CHECK_EQ(hr_gguf_n_kv(g), 34 + (align != 32));
    uint32_t u;
    int64_t x;
    float f;
    bool bo;
    const char *s;
    size_t len;
    double d;
    CHECK_EQ(hr_gguf_get_u32(g, "s.u8", &u), 0);
    CHECK_EQ(u, 200);
    CHECK_EQ(hr_gguf_get_i64(g, "s.i8", &x), 0);
    CHECK_EQ(x, -100);
    CHECK_EQ(hr_gguf_get_u32(g, "s.i8", &u), HR_EFORMAT);
    CHECK_EQ(hr_gguf_get_u32(g, "s.u16", &u), 0);
    CHECK_EQ(u, 60000);
    CHECK_EQ(hr_gguf_get_i64(g, "s.i16", &x), 0);
    CHECK_EQ(x, -30000);
    CHECK_EQ(hr_gguf_get_u32(g, "s.u32", &u), 0);
    CHECK_EQ(u, 4000000000u);
    CHECK_EQ(hr_gguf_get_i64(g, "s.i32", &x), 0);
    CHECK_EQ(x, -2000000000);
    CHECK_EQ(hr_gguf_get_f32(g, "s.f32", &f), 0);
    CHECK_NEAR(f, 1.5, 0);
    CHECK_EQ(hr_gguf_get_bool(g, "s.bool", &bo), 0);
    CHECK(bo);
    CHECK_EQ(hr_gguf_get_i64(g, "s.u64", &x), HR_EFORMAT); /* > INT64_MAX */
    CHECK_EQ(hr_gguf_get_u32(g, "s.u64", &u), HR_EFORMAT);
    CHECK_EQ(hr_gguf_get_i64(g, "s.i64", &x), 0);
    CHECK_EQ(x, -(1ll << 62));
    CHECK_EQ(hr_gguf_get_f32(g, "s.f64", &f), 0);
    CHECK_NEAR(f, 3.14159265f, 1e-6);
    CHECK_EQ(hr_gguf_value_f64(hr_gguf_kv_value(g, hr_gguf_find_key(g, "s.f64")), &d), 0);
    CHECK(d == 3.141592653589793);
    CHECK_EQ(hr_gguf_get_f32(g, "s.u32", &f), HR_EFORMAT);
    CHECK_EQ(hr_gguf_get_str(g, "s.str", &s), 0);
    CHECK_STR(s, "h\xc3\xa9llo \"w\"\n");
    CHECK_EQ(hr_gguf_get_str(g, "s.empty", &s), 0);
    CHECK_STR(s, "");
    CHECK_EQ(hr_gguf_get_str(g, "s.u8", &s), HR_EFORMAT);
    CHECK_EQ(hr_gguf_get_u32(g, "nope", &u), HR_ENOENT);
    CHECK_EQ(hr_gguf_get_u32(g, "c.u32", &u), 0);
    CHECK_EQ(u, 8);
    CHECK_EQ(hr_gguf_get_i64(g, "c.i32", &x), 0);
    CHECK_EQ(x, -7);
    CHECK_EQ(hr_gguf_get_f32(g, "c.f32", &f), 0);
    CHECK_NEAR(f, 0.25, 0);
    CHECK_EQ(hr_gguf_get_bool(g, "c.bool", &bo), 0);
    CHECK(!bo);

    char fmt[256];
    struct {
        const char *key;
        const char *want;
    } fmts[] = {
        {"s.u8", "200"},
        {"s.i8", "-100"},
        {"s.u64", "9223372036854775813"},
        {"s.bool", "true"},
        {"s.f32", "1.5"},
        {"s.str", "\"h\xc3\xa9llo \\\"w\\\"\\n\""},
        {"a.u8", "[0, 1, 255]"},
        {"a.i8", "[-128, 0, 127]"},
        {"a.u16", "[0, 65535]"},
        {"a.i16", "[-32768, 32767]"},
        {"a.u32", "[1, 2, 3, 4, 5]"},
        {"a.i32", "[-1, 2, -3]"},
        {"a.f32", "[0.5, -1.25, 1.00000002e+30]"},
        {"a.bool", "[true, false, true]"},
        {"a.u64", "[18446744073709551615, 0]"},
        {"a.i64", "[-9223372036854775808, 9223372036854775807]"},
        {"a.f64", "[1e-300, -2.5]"},
        {"a.empty", "[]"},
        {"a.str", "[\"x\", \"\", \"\xe2\x96\x81the\", \"longer string value\"]"},
        {"n.u32", "[[1, 2, 3], [4]]"},
        {"n.str", "[[\"a\", \"bc\"], []]"},
        {"n.f64", "[[[1.5]], [[2.5, -3.5]]]"},
    };
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        int64_t kv = hr_gguf_find_key(g, fmts[i].key);
        CHECK(kv >= 0);
        hr_gguf_value_format(hr_gguf_kv_value(g, kv), fmt, sizeof fmt, -1);
        CHECK_STR(fmt, fmts[i].want);
    }
    int64_t kv = hr_gguf_find_key(g, "a.u32");
    hr_gguf_value_format(hr_gguf_kv_value(g, kv), fmt, sizeof fmt, 2);
    CHECK_STR(fmt, "[1, 2, ... (5 total)]");
    hr_gguf_value_format(hr_gguf_kv_value(g, kv), fmt, 6, -1);
    CHECK_STR(fmt, "[1, 2");
    CHECK_EQ(hr_gguf_arr_i64(g, kv, 4, &x), 0);
    CHECK_EQ(x, 5);
    CHECK_EQ(hr_gguf_arr_i64(g, kv, 5, &x), HR_ERANGE);
    kv = hr_gguf_find_key(g, "a.u64");
    CHECK_EQ(hr_gguf_arr_i64(g, kv, 0, &x), HR_EFORMAT);
    CHECK_EQ(hr_gguf_arr_f64(g, kv, 0, &d), 0);
    CHECK_EQ(hr_gguf_arr_i64(g, hr_gguf_find_key(g, "a.f32"), 0, &x), HR_EFORMAT);
    CHECK_EQ(hr_gguf_arr_f64(g, hr_gguf_find_key(g, "a.f32"), 1, &d), 0);
    CHECK(d == -1.25);
    CHECK_EQ(hr_gguf_arr_i64(g, hr_gguf_find_key(g, "a.bool"), 2, &x), 0);
    CHECK_EQ(x, 1);
    CHECK_EQ(hr_gguf_arr_i64(g, hr_gguf_find_key(g, "a.i64"), 0, &x), 0);
    CHECK(x == INT64_MIN);
    CHECK_EQ(hr_gguf_arr_len(g, hr_gguf_find_key(g, "s.u8")), 0);
    CHECK_EQ(hr_gguf_arr_type(g, hr_gguf_find_key(g, "s.u8")), HR_GGUF_NONE);
    CHECK_EQ(hr_gguf_kv_type(g, -1), HR_GGUF_NONE);
    CHECK(hr_gguf_key(g, hr_gguf_n_kv(g)) == NULL);
    kv = hr_gguf_find_key(g, "a.str");
    CHECK_EQ(hr_gguf_arr_str(g, kv, 1, &s, &len), 0);
    CHECK_EQ(len, 0);
    CHECK_EQ(hr_gguf_arr_str(g, kv, 2, &s, &len), 0);
    CHECK_EQ(len, 6);

    /* nested arrays through the value API */
    const hr_gguf_value *v = hr_gguf_kv_value(g, hr_gguf_find_key(g, "n.u32"));
    CHECK_EQ(hr_gguf_value_type(v), HR_GGUF_ARRAY);
    CHECK_EQ(hr_gguf_value_arr_type(v), HR_GGUF_ARRAY);
    CHECK_EQ(hr_gguf_value_arr_len(v), 2);
    const hr_gguf_value *e = hr_gguf_value_arr_at(v, 0);
    CHECK_EQ(hr_gguf_value_arr_type(e), HR_GGUF_UINT32);
    CHECK_EQ(hr_gguf_value_arr_len(e), 3);
    CHECK_EQ(hr_gguf_value_arr_i64(e, 2, &x), 0);
    CHECK_EQ(x, 3);
    CHECK_EQ(hr_gguf_value_arr_i64(hr_gguf_value_arr_at(v, 1), 0, &x), 0);
    CHECK_EQ(x, 4);
    CHECK(hr_gguf_value_arr_at(v, 2) == NULL);
    CHECK(hr_gguf_value_arr_at(e, 0) == NULL);
    v = hr_gguf_kv_value(g, hr_gguf_find_key(g, "n.str"));
    CHECK_EQ(hr_gguf_value_arr_str(hr_gguf_value_arr_at(v, 0), 1, &s, &len), 0);
    CHECK_STR(s, "bc");
    CHECK_EQ(hr_gguf_value_arr_len(hr_gguf_value_arr_at(v, 1)), 0);
    v = hr_gguf_kv_value(g, hr_gguf_find_key(g, "n.f64"));
    e = hr_gguf_value_arr_at(hr_gguf_value_arr_at(v, 1), 0);
    CHECK_EQ(hr_gguf_value_arr_f64(e, 1, &d), 0);
    CHECK(d == -3.5);

    /* tensors */
    CHECK_EQ(hr_gguf_n_tensors(g), (int64_t)N_ROUND_TENSORS);
    CHECK_EQ(hr_gguf_data_offset(g) % align, 0);
    for (size_t i = 0; i < N_ROUND_TENSORS; i++) {
        const tspec *ts = &round_tensors[i];
        const hr_gguf_tensor *t = hr_gguf_find_tensor(g, ts->name);
        CHECK(t != NULL);
        if (!t)
            continue;
        CHECK(t == hr_gguf_tensor_at(g, (int64_t)i));
        CHECK_EQ(t->type, ts->type);
        CHECK_EQ(t->n_dims, ts->n_dims);
        for (int dd = 0; dd < 4; dd++)
            CHECK_EQ(t->ne[dd], ts->ne[dd]);
        CHECK_EQ(t->size, tspec_bytes(ts));
        CHECK_EQ(t->offset % align, 0);
        CHECK(memcmp(t->data, tensor_data[i], t->size) == 0);
    }
    CHECK_EQ(hr_gguf_n_layers_seen(g), 2);
    uint64_t b, en;
    CHECK_EQ(hr_gguf_layer_range(g, 0, &b, &en), 0);
    CHECK_EQ(b, hr_gguf_find_tensor(g, "blk.0.attn_q.weight")->offset);
    const hr_gguf_tensor *t = hr_gguf_find_tensor(g, "blk.0.attn_norm.weight");
    CHECK_EQ(en, t->offset + t->size);
    CHECK_EQ(hr_gguf_layer_range(g, 1, &b, &en), 0);
    CHECK_EQ(b, hr_gguf_find_tensor(g, "blk.1.ffn_up.weight")->offset);
    t = hr_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    CHECK_EQ(en, t->offset + t->size);
    CHECK_EQ(hr_gguf_layer_range(g, 2, &b, &en), HR_ENOENT);
    const hr_gguf_tensor *last = hr_gguf_tensor_at(g, hr_gguf_n_tensors(g) - 1);
    CHECK_EQ(last->offset + last->size, hr_gguf_file_size(g));
}

/* Writes the round-trip file; returns its bytes (caller frees). */
static uint8_t *write_small(const char *name, size_t *size) {
    char path[1024], err[HR_ERR_LEN];
    hr_gguf_writer *w = build_writer();
    int rc = hr_gguf_writer_write(w, tmp_path(name, path, sizeof path), err);
    if (rc)
        fprintf(stderr, "write: %s\n", err);
    CHECK_EQ(rc, 0);
    hr_gguf_writer_destroy(w);
    return read_file(path, size);
}

static void test_writer(void) {
    char path[1024], err[HR_ERR_LEN];
    size_t size = 0;
    uint8_t *bytes = write_small("round.gguf", &size);
    CHECK(bytes != NULL);
    hr_gguf *g = NULL;
    int rc = hr_gguf_open(&g, tmp_path("round.gguf", path, sizeof path), err);
    if (rc)
        fprintf(stderr, "reopen: %s\n", err);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        check_round(g, 32);
        hr_gguf_close(g);
    }
    rc = open_copy(&g, bytes, size, err);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        check_round(g, 32);
        close_copy(g);
    }
    free(bytes);

    /* alignment 64, and borrowed tensor data */
    hr_gguf_writer *w = build_writer();
    CHECK_EQ(hr_gguf_writer_set_u32(w, "general.alignment", 64), 0);
    const tspec *t0 = &round_tensors[0];
    CHECK_EQ(hr_gguf_writer_add_tensor_nocopy(w, "borrowed", t0->type, t0->n_dims, t0->ne,
                                              tensor_data[0], tspec_bytes(t0)),
             HR_OK);
    CHECK_EQ(hr_gguf_writer_write(w, tmp_path("align64.gguf", path, sizeof path), err), 0);
    hr_gguf_writer_destroy(w);
    rc = hr_gguf_open(&g, path, err);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        CHECK_EQ(hr_gguf_alignment(g), 64);
        const hr_gguf_tensor *t = hr_gguf_find_tensor(g, "borrowed");
        CHECK(t && t->offset % 64 == 0 && memcmp(t->data, tensor_data[0], t->size) == 0);
        for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++)
            CHECK_EQ(hr_gguf_tensor_at(g, i)->offset % 64, 0);
        hr_gguf_close(g);
    }

    /* writer argument errors */
    w = hr_gguf_writer_create();
    int64_t ne[2] = {32, 2};
    uint8_t data[256] = {0};
    CHECK_STR(hr_gguf_writer_error(w), "");
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "t", HR_TYPE_Q8_0, 2, ne, data, 68), 0);
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "t", HR_TYPE_Q8_0, 2, ne, data, 68), HR_EINVAL);
    CHECK(strstr(hr_gguf_writer_error(w), "duplicate") != NULL);
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "u", HR_TYPE_Q8_0, 2, ne, data, 67), HR_EINVAL);
    CHECK(strstr(hr_gguf_writer_error(w), "does not match") != NULL);
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "u", 99, 2, ne, data, 68), HR_EINVAL);
    int64_t ne_bad[2] = {33, 2};
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "u", HR_TYPE_Q8_0, 2, ne_bad, data, 68), HR_EINVAL);
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "u", HR_TYPE_F32, 5, ne, data, 68), HR_EINVAL);
    CHECK_EQ(hr_gguf_writer_add_tensor(w, "", HR_TYPE_F32, 1, ne, data, 128), HR_EINVAL);
    CHECK_EQ(hr_gguf_writer_set_u32(w, "general.alignment", 48), HR_EINVAL);
    CHECK_EQ(hr_gguf_writer_set_i32(w, "general.alignment", 64), HR_EINVAL);
    CHECK_EQ(hr_gguf_writer_set_u32(w, "", 1), HR_EINVAL);
    CHECK_EQ(hr_gguf_writer_set_arr(w, "k", HR_GGUF_STRING, data, 1), HR_EINVAL);
    uint8_t garbage[12] = {8, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0};
    CHECK_EQ(hr_gguf_writer_set_encoded(w, "k", HR_GGUF_ARRAY, garbage, sizeof garbage),
             HR_EFORMAT);
    CHECK(strstr(hr_gguf_writer_error(w), "exceeds") != NULL);
    uint32_t one = 1;
    CHECK_EQ(hr_gguf_writer_set_encoded(w, "k", HR_GGUF_UINT32, &one, 3), HR_EFORMAT);
    CHECK_EQ(hr_gguf_writer_set_encoded(w, "k", HR_GGUF_UINT16, &one, 4), HR_EFORMAT);
    CHECK_EQ(hr_gguf_writer_write(w, "/nonexistent-dir/x.gguf", err), HR_EIO);
    CHECK(strstr(err, "/nonexistent-dir/x.gguf") != NULL);
    hr_gguf_writer_destroy(w);
    hr_gguf_writer_destroy(NULL);
    hr_gguf_close(NULL);

    /* copy_kv: the tokenizer of a vocab file into a new model */
    hr_gguf *src = NULL;
    rc = hr_gguf_open(
        &src, hr_shared_path("tokenizer/ggml-vocab-llama-spm.gguf", path, sizeof path), err);
    CHECK_EQ(rc, 0);
    if (rc)
        return;
    w = hr_gguf_writer_create();
    CHECK_EQ(hr_gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    CHECK_EQ(hr_gguf_writer_copy_kv(w, src, "tokenizer."), 0);
    float emb[64 * 4];
    for (int i = 0; i < 64 * 4; i++)
        emb[i] = (float)i;
    int64_t ne2[2] = {64, 4};
    CHECK_EQ(
        hr_gguf_writer_add_tensor(w, "token_embd.weight", HR_TYPE_F32, 2, ne2, emb, sizeof emb), 0);
    char out[1024];
    CHECK_EQ(hr_gguf_writer_write(w, tmp_path("copy.gguf", out, sizeof out), err), 0);
    hr_gguf_writer_destroy(w);
    rc = hr_gguf_open(&g, out, err);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        int copied = 0, bad = 0;
        for (int64_t i = 0; i < hr_gguf_n_kv(src); i++) {
            const char *key = hr_gguf_key(src, i);
            int64_t j = hr_gguf_find_key(g, key);
            if (strncmp(key, "tokenizer.", 10) != 0) {
                bad += strcmp(key, "general.architecture") != 0 && j >= 0;
                continue;
            }
            copied++;
            bad += j < 0 || hr_gguf_kv_type(g, j) != hr_gguf_kv_type(src, i) ||
                   hr_gguf_arr_len(g, j) != hr_gguf_arr_len(src, i);
            uint64_t n = hr_gguf_arr_len(src, i);
            for (uint64_t k = 0; k < n && j >= 0; k++) {
                const char *s1, *s2;
                size_t l1, l2;
                double d1, d2;
                if (hr_gguf_arr_str(src, i, k, &s1, &l1) == 0)
                    bad += hr_gguf_arr_str(g, j, k, &s2, &l2) != 0 || l1 != l2 ||
                           memcmp(s1, s2, l1) != 0;
                else if (hr_gguf_arr_f64(src, i, k, &d1) == 0)
                    bad += hr_gguf_arr_f64(g, j, k, &d2) != 0 || d1 != d2;
            }
            char f1[128], f2[128];
            hr_gguf_value_format(hr_gguf_kv_value(src, i), f1, sizeof f1, 8);
            hr_gguf_value_format(hr_gguf_kv_value(g, j), f2, sizeof f2, 8);
            bad += strcmp(f1, f2) != 0;
        }
        CHECK_EQ(copied, 10);
        CHECK_EQ(bad, 0);
        CHECK_EQ(hr_gguf_n_kv(g), 11);
        hr_gguf_close(g);
    }

    /* copy everything of a real model, and its tensors (borrowed) */
    hr_gguf *m = NULL;
    rc = hr_gguf_open(&m, hr_shared_path("models/small-qwen2-q4_k_m.gguf", path, sizeof path), err);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        w = hr_gguf_writer_create();
        CHECK_EQ(hr_gguf_writer_copy_kv(w, m, NULL), 0);
        for (int64_t i = 0; i < hr_gguf_n_tensors(m); i++) {
            const hr_gguf_tensor *t = hr_gguf_tensor_at(m, i);
            CHECK_EQ(hr_gguf_writer_add_tensor_nocopy(w, t->name, t->type, t->n_dims, t->ne,
                                                      t->data, t->size),
                     0);
        }
        CHECK_EQ(hr_gguf_writer_write(w, tmp_path("qwen-copy.gguf", out, sizeof out), err), 0);
        hr_gguf_writer_destroy(w);
        /* same writer layout as the fixture: byte-identical file */
        size_t n1 = 0, n2 = 0;
        uint8_t *a = read_file(path, &n1), *b2 = read_file(out, &n2);
        CHECK(a && b2 && n1 == n2 && memcmp(a, b2, n1) == 0);
        free(a);
        free(b2);
        hr_gguf_close(m);
    }
    hr_gguf_close(src);
}

/* ---- hostile inputs ---- */

static void test_truncation(void) {
    size_t size = 0;
    uint8_t *bytes = write_small("trunc.gguf", &size);
    CHECK(bytes != NULL);
    if (!bytes)
        return;
    int bad = 0;
    char err[HR_ERR_LEN];
    /* every prefix of the small file */
    for (size_t n = 0; n < size; n++) {
        hr_gguf *g = NULL;
        err[0] = '\0';
        int rc = open_copy(&g, bytes, n, err);
        if (rc != HR_EFORMAT || !err[0] || g) {
            if (bad++ < 5)
                fprintf(stderr, "truncated at %zu: rc %d err '%s'\n", n, rc, err);
            close_copy(g);
        }
    }
    CHECK_EQ(bad, 0);
    free(bytes);

    /* a spread of offsets across a real model */
    char path[1024];
    bytes = read_file(hr_shared_path("models/tiny-llama-f32.gguf", path, sizeof path), &size);
    CHECK(bytes != NULL);
    if (!bytes)
        return;
    hr_gguf *g = NULL;
    CHECK_EQ(hr_gguf_open_memory(&g, bytes, size, err), 0);
    size_t hdr = g ? (size_t)hr_gguf_data_offset(g) : 4096;
    hr_gguf_close(g);
    bad = 0;
    size_t cuts[1200];
    size_t nc = 0;
    for (size_t n = 0; n < 512; n++)
        cuts[nc++] = n; /* header, first kvs */
    for (size_t n = hdr - 400; n < hdr; n++)
        cuts[nc++] = n; /* tensor infos and padding */
    for (int i = 0; i < 200; i++)
        cuts[nc++] = 512 + (size_t)(rnd() % (hdr - 912)); /* inside the token arrays */
    for (int i = 0; i < 88; i++)
        cuts[nc++] = hdr + (size_t)(rnd() % (size - hdr)); /* tensor data */
    for (size_t i = 0; i < nc; i++) {
        size_t n = cuts[i];
        err[0] = '\0';
        int rc = n < hdr ? open_copy(&g, bytes, n, err) : hr_gguf_open_memory(&g, bytes, n, err);
        if (rc != HR_EFORMAT || !err[0]) {
            if (bad++ < 5)
                fprintf(stderr, "tiny-llama truncated at %zu: rc %d err '%s'\n", n, rc, err);
            if (rc == 0 && n < hdr)
                close_copy(g);
            else if (rc == 0)
                hr_gguf_close(g);
        }
        if (n >= hdr && !strstr(err, "extends past end of file"))
            bad++;
    }
    CHECK_EQ(bad, 0);
    printf("truncation: %zu offsets of tiny-llama-f32.gguf, all refused\n", nc);
    free(bytes);
}

/* Flips 1..max_flips random bytes within [lo, hi) biased to hot, opens an
 * exact copy, walks it if it opens, and checks errors are clean. */
static void flip_run(const char *label, uint8_t *bytes, size_t size, size_t hot_hi, size_t flip_hi,
                     int iters, int max_flips) {
    int opened = 0, failed = 0, bad = 0;
    uint64_t sink = 0;
    char err[HR_ERR_LEN];
    size_t pos[8];
    uint8_t old[8];
    for (int it = 0; it < iters; it++) {
        int nf = 1 + (int)(rnd() % (uint64_t)max_flips);
        for (int k = 0; k < nf; k++) {
            size_t hi = rnd() % 2 ? hot_hi : flip_hi;
            pos[k] = (size_t)(rnd() % hi);
            old[k] = bytes[pos[k]];
            uint64_t r = rnd();
            bytes[pos[k]] = r % 3 == 0   ? (uint8_t)(1u << (r >> 8) % 8) ^ old[k]
                            : r % 3 == 1 ? (uint8_t)(r >> 16)
                                         : (uint8_t)(r % 2 ? 0xff : 0);
        }
        hr_gguf *g = NULL;
        err[0] = '\0';
        int rc = size < (1u << 20) ? open_copy(&g, bytes, size, err)
                                   : hr_gguf_open_memory(&g, bytes, size, err);
        if (rc == 0) {
            opened++;
            sink += walk(g);
            if (size < (1u << 20))
                close_copy(g);
            else
                hr_gguf_close(g);
        } else {
            failed++;
            if (!known_code(rc) || !err[0] || g) {
                if (bad++ < 5)
                    fprintf(stderr, "%s: iteration %d: rc %d err '%s'\n", label, it, rc, err);
            }
        }
        for (int k = nf - 1; k >= 0; k--)
            bytes[pos[k]] = old[k];
    }
    CHECK_EQ(bad, 0);
    printf("byte flips %s: %d iterations, %d opened, %d refused (sink %llu)\n", label, iters,
           opened, failed, (unsigned long long)(sink & 0xff));
}

static void test_flips(void) {
    size_t size = 0;
    uint8_t *bytes = write_small("flip.gguf", &size);
    CHECK(bytes != NULL);
    if (bytes) {
        hr_gguf *g = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(hr_gguf_open_memory(&g, bytes, size, err), 0);
        size_t hdr = g ? (size_t)hr_gguf_data_offset(g) : size;
        hr_gguf_close(g);
        flip_run("small generated file", bytes, size, hdr, size, 20000, 4);
        free(bytes);
    }
    /* the header region of a real model, the whole file in memory */
    char path[1024];
    bytes = read_file(hr_shared_path("models/tiny-llama-f32.gguf", path, sizeof path), &size);
    CHECK(bytes != NULL);
    if (bytes) {
        hr_gguf *g = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(hr_gguf_open_memory(&g, bytes, size, err), 0);
        size_t hdr = g ? (size_t)hr_gguf_data_offset(g) : 4096;
        hr_gguf_close(g);
        /* a heap copy of exactly the file so overreads are caught */
        flip_run("tiny-llama-f32 header", bytes, size, 2048, hdr, 4000, 3);
        free(bytes);
    }
}

static void test_crafted(void) {
    buf_t b = {0};
    uint64_t ne1[1] = {8};

    b.len = 0;
    expect("empty file", &b, HR_EFORMAT, "truncated header magic");
    b_put(&b, "GGU", 3);
    expect("short magic", &b, HR_EFORMAT, "truncated header magic");
    b.len = 0;
    b_put(&b, "GGML", 4);
    b_u32(&b, 3);
    expect("bad magic", &b, HR_EFORMAT, "bad magic");
    b.len = 0;
    b_put(&b, "FUGG", 4);
    expect("swapped magic", &b, HR_EUNSUPPORTED, "big-endian");
    b_hdr(&b, 1, 0, 0);
    expect("v1", &b, HR_EUNSUPPORTED, "unsupported version 1");
    b_hdr(&b, 4, 0, 0);
    expect("v4", &b, HR_EUNSUPPORTED, "unsupported version 4");
    b_hdr(&b, 0x03000000u, 0, 0);
    expect("big-endian v3", &b, HR_EUNSUPPORTED, "big-endian");
    b_hdr(&b, 0x02000000u, 0, 0);
    expect("big-endian v2", &b, HR_EUNSUPPORTED, "byte-swapped version 0x02000000");
    b_hdr(&b, 3, 0, 0);
    b.len = 13;
    expect("truncated counts", &b, HR_EFORMAT, "truncated tensor count");
    b_hdr(&b, 3, 0, 0);
    b.len = 20;
    expect("truncated kv count", &b, HR_EFORMAT, "truncated kv count");
    b_hdr(&b, 3, 0, 0);
    expect("empty v3", &b, 0, NULL);
    b_hdr(&b, 2, 0, 1);
    b_kv_u32(&b, "a", 1);
    expect("v2 ok", &b, 0, NULL);

    /* hostile counts */
    b_hdr(&b, 3, 0, 1ull << 63);
    expect("n_kv 2^63", &b, HR_EFORMAT, "n_kv 9223372036854775808 exceeds");
    b_hdr(&b, 3, UINT64_MAX, 0);
    expect("n_tensors max", &b, HR_EFORMAT, "n_tensors 18446744073709551615 exceeds");
    b_hdr(&b, 3, 0, 2);
    b_kv_u32(&b, "a", 1);
    b_kv_u32(&b, "b", 2);
    b.len -= 1;
    expect("truncated kv value", &b, HR_EFORMAT, "truncated uint32");
    b_hdr(&b, 3, 0, 1);
    b_u64(&b, 1ull << 62);
    b_put(&b, "key", 3);
    b_zeros(&b, 9);
    expect("key length", &b, HR_EFORMAT, "key length 4611686018427387904 exceeds remaining");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "");
    b_u32(&b, HR_GGUF_UINT8);
    b_u8(&b, 1);
    b_zeros(&b, 4);
    expect("empty key", &b, HR_EFORMAT, "empty key");
    b_hdr(&b, 3, 0, 1);
    b_u64(&b, 3);
    b_put(&b, "a\0b", 3);
    b_u32(&b, HR_GGUF_UINT8);
    b_u8(&b, 1);
    expect("NUL in key", &b, HR_EFORMAT, "key contains a NUL byte");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "x.y");
    b_u32(&b, 13);
    b_u32(&b, 0);
    expect("value type 13", &b, HR_EFORMAT, "unknown value type 13");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "general.name");
    b_u32(&b, HR_GGUF_STRING);
    b_u64(&b, 9999999);
    b_put(&b, "abcdefghijkl", 12);
    expect("string length", &b, HR_EFORMAT,
           "'general.name': string length 9999999 exceeds remaining 12 bytes");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, HR_GGUF_UINT32);
    b_u64(&b, 1ull << 62);
    b_zeros(&b, 16);
    expect("u32 array length", &b, HR_EFORMAT, "array length 4611686018427387904 exceeds");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, HR_GGUF_STRING);
    b_u64(&b, 1ull << 40);
    b_zeros(&b, 16);
    expect("string array length", &b, HR_EFORMAT, "array length 1099511627776 exceeds");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "tokenizer.ggml.tokens");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, HR_GGUF_STRING);
    b_u64(&b, 4);
    b_str(&b, "a");
    b_str(&b, "b");
    b_u64(&b, 1000);
    b_zeros(&b, 20);
    expect("string element length", &b, HR_EFORMAT,
           "'tokenizer.ggml.tokens' element 2: string length 1000 exceeds remaining");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, 42);
    b_u64(&b, 0);
    expect("array element type", &b, HR_EFORMAT, "unknown array element type 42");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, HR_GGUF_ARRAY);
    b_u32(&b, HR_GGUF_ARRAY);
    b_u64(&b, 3);
    b_u32(&b, HR_GGUF_UINT8);
    b_u64(&b, 0);
    expect("nested truncated", &b, HR_EFORMAT, "exceeds");

    /* nesting depth: HR_GGUF_MAX_NESTING levels open, one more does not */
    for (int levels = HR_GGUF_MAX_NESTING; levels <= HR_GGUF_MAX_NESTING + 1; levels++) {
        b_hdr(&b, 3, 0, 1);
        b_str(&b, "deep");
        b_u32(&b, HR_GGUF_ARRAY);
        for (int l = 0; l < levels - 1; l++) {
            b_u32(&b, HR_GGUF_ARRAY);
            b_u64(&b, 1);
        }
        b_u32(&b, HR_GGUF_UINT8);
        b_u64(&b, 1);
        b_u8(&b, 7);
        if (levels == HR_GGUF_MAX_NESTING)
            expect("max nesting", &b, 0, NULL);
        else
            expect("too deep", &b, HR_EUNSUPPORTED, "nested deeper than");
    }
    /* a hostile chain of nested arrays deeper than the limit (stack) */
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "deep");
    b_u32(&b, HR_GGUF_ARRAY);
    for (int l = 0; l < 100000; l++) {
        b_u32(&b, HR_GGUF_ARRAY);
        b_u64(&b, 1);
    }
    expect("very deep", &b, HR_EUNSUPPORTED, "nested deeper than");

    b_hdr(&b, 3, 0, 3);
    b_kv_u32(&b, "a.b", 1);
    b_kv_u32(&b, "c", 2);
    b_kv_u32(&b, "a.b", 3);
    expect("duplicate key", &b, HR_EFORMAT, "duplicate key 'a.b' (kv 0 and kv 2)");

    /* alignment */
    b_hdr(&b, 3, 0, 1);
    b_kv_u32(&b, "general.alignment", 0);
    expect("alignment 0", &b, HR_EFORMAT, "general.alignment 0 is not a power of two");
    b_hdr(&b, 3, 0, 1);
    b_kv_u32(&b, "general.alignment", 48);
    expect("alignment 48", &b, HR_EFORMAT, "general.alignment 48 is not a power of two");
    b_hdr(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, HR_GGUF_STRING);
    b_str(&b, "32");
    expect("alignment string", &b, HR_EFORMAT, "general.alignment has type string");
    b_hdr(&b, 3, 1, 1);
    b_kv_u32(&b, "general.alignment", 256);
    b_tensor(&b, "t", 1, ne1, HR_TYPE_F32, 0);
    b_pad(&b, 256);
    size_t want_data = b.len;
    b_zeros(&b, 32);
    {
        hr_gguf *g = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(open_copy(&g, b.p, b.len, err), 0);
        if (g) {
            CHECK_EQ(hr_gguf_alignment(g), 256);
            CHECK_EQ(hr_gguf_data_offset(g), want_data);
            CHECK_EQ(hr_gguf_tensor_at(g, 0)->offset, want_data);
            close_copy(g);
        }
    }

    /* tensor infos */
    struct {
        const char *label;
        uint32_t n_dims;
        uint64_t ne[5];
        uint32_t type;
        uint64_t offset;
        int code;
        const char *want;
    } tcases[] = {
        {"n_dims 0", 0, {8}, HR_TYPE_F32, 0, HR_EFORMAT, "n_dims 0 outside 1..4"},
        {"n_dims 5", 5, {8, 1, 1, 1, 1}, HR_TYPE_F32, 0, HR_EFORMAT, "n_dims 5 outside 1..4"},
        {"dim 0", 2, {8, 0}, HR_TYPE_F32, 0, HR_EFORMAT, "ne[1] = 0 is not positive"},
        {"dim negative", 1, {UINT64_MAX}, HR_TYPE_F32, 0, HR_EFORMAT, "ne[0] = -1 is not positive"},
        {"element overflow",
         2,
         {1ull << 32, 1ull << 32},
         HR_TYPE_F32,
         0,
         HR_EFORMAT,
         "element count"},
        {"byte overflow",
         1,
         {1ull << 62},
         HR_TYPE_F32,
         0,
         HR_EFORMAT,
         "byte size of 4611686018427387904 elements of type"},
        {"block multiple",
         1,
         {33},
         HR_TYPE_Q4_0,
         0,
         HR_EFORMAT,
         "ne[0] = 33 is not a multiple of the block size 32"},
        {"unknown type", 1, {8}, 99, 0, HR_EUNSUPPORTED, "unknown tensor type id 99"},
        {"type 4", 1, {32}, 4, 0, HR_EUNSUPPORTED, "unknown tensor type id 4"},
        {"huge type", 1, {8}, 0x80000001u, 0, HR_EUNSUPPORTED, "unknown tensor type id"},
        {"unaligned",
         1,
         {8},
         HR_TYPE_F32,
         4,
         HR_EFORMAT,
         "data offset 4 is not a multiple of the alignment 32"},
        {"past end", 1, {16}, HR_TYPE_F32, 0, HR_EFORMAT, "extends past end of file"},
        {"offset past end",
         1,
         {8},
         HR_TYPE_F32,
         1ull << 63,
         HR_EFORMAT,
         "extends past end of file"},
        {"ok", 1, {8}, HR_TYPE_F32, 0, 0, NULL},
    };
    for (size_t i = 0; i < sizeof tcases / sizeof tcases[0]; i++) {
        b_hdr(&b, 3, 1, 0);
        b_tensor(&b, "blk.3.attn_q.weight", tcases[i].n_dims, tcases[i].ne, tcases[i].type,
                 tcases[i].offset);
        b_pad(&b, 32);
        b_zeros(&b, 32); /* room for 8 floats */
        expect(tcases[i].label, &b, tcases[i].code, tcases[i].want);
    }
    b_hdr(&b, 3, 1, 0);
    b_tensor(&b, "blk.3.attn_q.weight", 1, (uint64_t[]){16}, HR_TYPE_F32, 0);
    b_pad(&b, 32);
    size_t dstart = b.len;
    b_zeros(&b, 32);
    char want[160];
    snprintf(want, sizeof want,
             "tensor 'blk.3.attn_q.weight' data [%zu, %zu) extends past end of file (size %zu)",
             dstart, dstart + 64, b.len);
    expect("past end message", &b, HR_EFORMAT, want);

    b_hdr(&b, 3, 2, 0);
    b_tensor(&b, "w", 1, ne1, HR_TYPE_F32, 0);
    b_tensor(&b, "w", 1, ne1, HR_TYPE_F32, 32);
    b_pad(&b, 32);
    b_zeros(&b, 64);
    expect("duplicate tensor", &b, HR_EFORMAT, "duplicate tensor name 'w' (tensors 0 and 1)");
    b_hdr(&b, 3, 1, 0);
    b_tensor(&b, "", 1, ne1, HR_TYPE_F32, 0);
    b_zeros(&b, 64);
    expect("empty tensor name", &b, HR_EFORMAT, "empty tensor name");
    b_hdr(&b, 3, 1, 0);
    b_tensor(&b, "blk.0.some_long_name", 3, (uint64_t[]){8, 1, 1}, HR_TYPE_F32, 0);
    b.len -= 20; /* cut inside the dims */
    expect("truncated dims", &b, HR_EFORMAT, "truncated dims: need 24 bytes, 16 remain");
    b_hdr(&b, 3, 1, 0);
    b_tensor(&b, "w", 3, (uint64_t[]){8, 1, 1}, HR_TYPE_F32, 0);
    /* header is complete, but n_tensors' minimum size check passes and the
     * data section is missing */
    expect("no data", &b, HR_EFORMAT, "extends past end of file");

    /* the layer index ignores non-numeric and huge layer numbers */
    b_hdr(&b, 3, 4, 0);
    b_tensor(&b, "blk.x.w", 1, ne1, HR_TYPE_F32, 0);
    b_tensor(&b, "blk.1234567890.w", 1, ne1, HR_TYPE_F32, 32);
    b_tensor(&b, "blk.7.w", 1, ne1, HR_TYPE_F32, 64);
    b_tensor(&b, "blk.7", 1, ne1, HR_TYPE_F32, 96);
    b_pad(&b, 32);
    b_zeros(&b, 128);
    {
        hr_gguf *g = NULL;
        char err[HR_ERR_LEN];
        CHECK_EQ(open_copy(&g, b.p, b.len, err), 0);
        if (g) {
            CHECK_EQ(hr_gguf_n_layers_seen(g), 8);
            uint64_t lb, le;
            CHECK_EQ(hr_gguf_layer_range(g, 7, &lb, &le), 0);
            CHECK_EQ(le - lb, 32);
            CHECK_EQ(hr_gguf_layer_range(g, 6, &lb, &le), HR_ENOENT);
            close_copy(g);
        }
    }
    free(b.p);

    /* files */
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    CHECK_EQ(hr_gguf_open(&g, "/nonexistent/model.gguf", err), HR_ENOENT);
    CHECK(strstr(err, "/nonexistent/model.gguf") != NULL);
    CHECK_EQ(hr_gguf_open(&g, tmpdir, err), HR_EINVAL);
    char path[1024];
    FILE *f = fopen(tmp_path("empty.gguf", path, sizeof path), "wb");
    if (f)
        fclose(f);
    CHECK_EQ(hr_gguf_open(&g, path, err), HR_EFORMAT);
    CHECK(strstr(err, "empty.gguf: offset 0: truncated header magic") != NULL);
    CHECK_EQ(hr_gguf_open_memory(&g, NULL, 5, err), HR_EINVAL);
}

/* Removes the temp dir's files. */
static void cleanup(void) {
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

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/hr_test_gguf_XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot create temp dir %s\n", tmpdir);
        return 1;
    }
    double t0 = now_s();
    test_models();
    test_tokenizers();
    test_writer();
    test_crafted();
    test_truncation();
    test_flips();
    printf("test_gguf: %.1f s\n", now_s() - t0);
    cleanup();
    for (size_t i = 0; i < N_ROUND_TENSORS; i++)
        free(tensor_data[i]);
    return hr_check_finish("test_gguf");
}
