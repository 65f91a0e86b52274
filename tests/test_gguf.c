/* test_gguf.c - GGUF reader and writer on well-formed input: the shared
 * model and tokenizer fixtures (header facts, invariants, every accessor),
 * and a writer round trip over every value type, alignment, borrowed
 * tensor data, argument errors and kv copies. Hostile input is in
 * test_gguf_bad.c. */
#include "tests/test_gguf_util.h"

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
        uint8_t *a = (uint8_t *)slurp(path, &n1), *b2 = (uint8_t *)slurp(out, &n2);
        CHECK(a && b2 && n1 == n2 && memcmp(a, b2, n1) == 0);
        free(a);
        free(b2);
        hr_gguf_close(m);
    }
    hr_gguf_close(src);
}

int main(void) {
    if (!make_tmpdir("hr_test_gguf"))
        return 1;
    double t0 = now_s();
    test_models();
    test_tokenizers();
    test_writer();
    printf("test_gguf: %.1f s\n", now_s() - t0);
    cleanup();
    free_round_data();
    return hr_check_finish("test_gguf");
}
