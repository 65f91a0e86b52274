/* test_archs.c - the dense neighbours (phi3, gemma3) against llama.cpp on
 * the fixtures of tests/fixtures/archs: each GGUF is rebuilt with mkmodel
 * exactly as mkref.sh made it (its sha256 must match), then every
 * position's logits and the greedy continuation are compared with what
 * llama.cpp computed. Also: a step of several sequences gives each the
 * bits it gets alone (sliding windows over each row's own positions),
 * layer windows chain to the whole model's bits, phi3 splits over thread
 * groups while gemma3 runs plain, and what is refused. */
#include "tests/check.h"
#include "tests/fixtures.h"
#include "tests/mkfixture.h"

#include "kernels/quant.h"
#include "mmap/gguf.h"
#include "model/layer-impl.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/sampler.h"

#include <unistd.h>

static const char *fixture_names[] = {"phi3-f32", "phi3-q4_k_m", "gemma3-f32", "gemma3-q4_k_m"};

static char tmpdir[] = "/tmp/hr_archs_XXXXXX";

static const char *fixture_path(const char *name, const char *ext, char *buf, size_t cap) {
    const char *dir = getenv("HR_FIXTURES");
    snprintf(buf, cap, "%s/archs/%s%s", dir ? dir : "tests/fixtures", name, ext);
    return buf;
}

/* Writes the model of params mp as tmpdir/name.gguf and opens it. */
static bool open_generated(const hr_mkmodel_params *mp, const char *name, hr_gguf **g, hr_model **m,
                           char *path, size_t cap) {
    snprintf(path, cap, "%s/%s.gguf", tmpdir, name);
    return mkfix_generate(mp, path, g, m);
}

/* A shape of mkmodel in type ftype with the synthetic vocabulary of 512. */
static bool open_shape(const char *shape, const char *ftype, hr_gguf **g, hr_model **m) {
    char path[512], name[64];
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    CHECK_EQ(hr_mkmodel_shape(&mp, shape), 0);
    mp.ftype = ftype;
    mp.n_vocab = 512;
    snprintf(name, sizeof name, "%s-%s", shape, ftype);
    return open_generated(&mp, name, g, m, path, sizeof path);
}

static void test_fixture(const char *name) {
    char js[512], lf[512], gguf[512], err[HR_ERR_LEN];
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", tmpdir, name);
    mkfix f;
    bool ok = mkfix_open(&f, fixture_path(name, ".json", js, sizeof js),
                         fixture_path(name, ".logits", lf, sizeof lf), gguf);
    if (!ok) {
        mkfix_close(&f);
        return;
    }
    const hr_model *m = f.m;
    const int32_t *ids = f.ids;
    const float *ref = f.ref;
    int n = f.n, nv = hr_model_hparams(m)->n_vocab;

    /* the prompt in chunks of 8 (each chunk's rows see their own windows) */
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 64;
    cp.n_batch = 8;
    cp.n_threads = 2;
    hr_ctx *c = NULL, *c1 = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    CHECK_EQ(hr_ctx_create(&c1, m, &cp, err), 0);
    float *lg = malloc((size_t)n * nv * sizeof(float)), *lg1 = malloc((size_t)n * nv * 4);
    CHECK_EQ(c ? hr_ctx_eval(c, ids, n, 0, lg, true, err) : -1, 0);
    for (int p = 0; c1 && p < n; p++) /* and one token at a time */
        CHECK_EQ(hr_ctx_eval(c1, &ids[p], 1, p, lg1 + (size_t)p * nv, false, err), 0);
    hr_ctx_destroy(c1);
    hr_logits_cmp lc = hr_compare_logits(lg, ref, n, nv);
    printf("%-14s max rel err %.3e, argmax %d/%d\n", name, lc.rel, lc.agree, n);
    CHECK(lc.agree >= f.share * n);
    CHECK(lc.rel <= f.bound);
    /* one token at a time: within float noise in exact mode, within the
     * fixture's bound where prompts sum in a free order (AVX-512 default) */
    hr_logits_cmp l1 = hr_compare_logits(lg1, lg, n, nv);
    CHECK(l1.rel <= (hr_kernels_best()->canonical ? 1e-5 : f.bound));

    float *last = malloc((size_t)nv * sizeof(float));
    memcpy(last, lg + (size_t)(n - 1) * nv, (size_t)nv * sizeof(float));
    mkfix_greedy(&f, c, last, name);
    free(last);
    free(lg);
    free(lg1);
    hr_ctx_destroy(c);
    mkfix_close(&f);
}

/* The hyper-parameters and tensors each architecture's file brings. */
static void test_hparams(void) {
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (open_shape("phi3-tiny", "q8_0", &g, &m)) {
        const hr_hparams *hp = hr_model_hparams(m);
        const hr_layer_weights *L = hr_model_layer(m, 1);
        const hr_gguf_tensor *qkv = hr_gguf_find_tensor(g, "blk.1.attn_qkv.weight");
        const hr_gguf_tensor *up = hr_gguf_find_tensor(g, "blk.1.ffn_up.weight");
        CHECK(qkv && up && !hr_gguf_find_tensor(g, "blk.1.attn_q.weight") &&
              !hr_gguf_find_tensor(g, "blk.1.ffn_gate.weight"));
        CHECK(hp->rope_neox && !hp->tied_output && hp->n_swa == 0);
        CHECK_EQ(hp->sets & (HR_LT_QKV_FUSED | HR_LT_UP_FUSED), HR_LT_QKV_FUSED | HR_LT_UP_FUSED);
        if (qkv && up) { /* the parts: rows of the fused tensors, in order */
            size_t rb = L->wq.row_bytes;
            CHECK(L->wq.data == qkv->data);
            CHECK(L->wk.data == (const char *)qkv->data + rb * (size_t)L->wq.n_out);
            CHECK(L->wv.data == (const char *)L->wk.data + rb * (size_t)L->wk.n_out);
            CHECK_EQ(L->wq.n_out + L->wk.n_out + L->wv.n_out, qkv->ne[1]);
            CHECK_EQ(L->wk.n_out, (int64_t)hp->n_head_kv * hp->head_dim);
            CHECK(L->w_gate.data == up->data);
            CHECK(L->w_up.data == (const char *)up->data + L->w_gate.row_bytes * (size_t)hp->n_ff);
            CHECK_EQ(L->w_up.n_out, hp->n_ff);
            CHECK_EQ(hr_model_layer_bytes(m, 1) - 2 * (uint64_t)hp->n_embd * 4,
                     qkv->size + up->size +
                         hr_gguf_find_tensor(g, "blk.1.attn_output.weight")->size +
                         hr_gguf_find_tensor(g, "blk.1.ffn_down.weight")->size);
        }
        hr_model_free(m);
        hr_gguf_close(g);
    }
    if (open_shape("gemma3-tiny", "q8_0", &g, &m)) {
        const hr_hparams *hp = hr_model_hparams(m);
        const hr_layer_weights *L = hr_model_layer(m, 0);
        CHECK(hp->tied_output && hp->rope_neox);
        CHECK_EQ(hp->head_dim, 128);
        CHECK_EQ(hp->n_swa, 8);
        CHECK_EQ(hp->swa_pattern, 3);
        CHECK(hp->rope_base == 1e6f && hp->rope_base_swa == 10000.0f);
        CHECK(hp->rope_scale == 0.125f);
        CHECK(hp->attn_scale == 1.0f / sqrtf(128.0f));
        CHECK(hp->embd_scale == 16.0f);
        CHECK(L->attn_post_norm.data && L->ffn_post_norm.data && L->q_norm.data);
        /* layers 0, 1 local, 2 global, 3 local */
        CHECK(hr_hparams_layer_swa(hp, 0) && hr_hparams_layer_swa(hp, 1));
        CHECK(!hr_hparams_layer_swa(hp, 2) && hr_hparams_layer_swa(hp, 3));
        /* embeddings scaled by sqrt(n_embd) */
        float h[256], raw[256];
        int32_t id = 77;
        char err[HR_ERR_LEN];
        CHECK_EQ(hr_model_embed(m, &id, 1, h, err), 0);
        const hr_weight *te = hr_model_tok_embd(m);
        hr_dequantize_row(te->type, (const char *)te->data + 77 * te->row_bytes, raw, 256);
        int same = 0;
        for (int i = 0; i < 256; i++)
            same += h[i] == raw[i] * 16.0f;
        CHECK_EQ(same, 256);
        hr_model_free(m);
        hr_gguf_close(g);
    }
}

/* Two sequences in one step (prompts of 11 and 9 rows, longer than
 * gemma3-tiny's window of 8, then one decode row each): each gets the bits
 * it gets alone. */
static void test_batch_invariance(const char *shape) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (!open_shape(shape, "q4_k_m", &g, &m))
        return;
    int nv = hr_model_hparams(m)->n_vocab;
    int32_t a[11] = {1, 40, 300, 12, 9, 77, 401, 5, 66, 201, 3},
            b[9] = {1, 5, 200, 3, 99, 8, 7, 6, 310};
    int na = 11, nb = 9;
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 32;
    cp.n_batch = 24;
    cp.n_threads = 2;
    float *alone = malloc((size_t)4 * nv * sizeof(float)), *both = malloc((size_t)4 * nv * 4);
    for (int s = 0; s < 2; s++) { /* each alone: its prompt, then one token */
        hr_ctx *c = NULL;
        CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
        const int32_t *ids = s ? b : a;
        int n = s ? nb : na;
        int32_t next = 123;
        CHECK_EQ(c ? hr_ctx_eval(c, ids, n, 0, alone + (size_t)(2 * s) * nv, false, err) : -1, 0);
        CHECK_EQ(c ? hr_ctx_eval(c, &next, 1, n, alone + (size_t)(2 * s + 1) * nv, false, err) : -1,
                 0);
        hr_ctx_destroy(c);
    }
    cp.n_seq = 2;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    if (c) {
        CHECK_EQ(hr_ctx_seq_add(c, 0), 0);
        CHECK_EQ(hr_ctx_seq_add(c, 1), 1);
        int32_t ids[20];
        hr_seq_pos rows[20];
        for (int i = 0; i < na; i++) {
            ids[i] = a[i];
            rows[i] = (hr_seq_pos){.seq = 0, .pos = i};
        }
        for (int i = 0; i < nb; i++) {
            ids[na + i] = b[i];
            rows[na + i] = (hr_seq_pos){.seq = 1, .pos = i};
        }
        int nl = 0;
        float *out = malloc((size_t)2 * nv * sizeof(float));
        CHECK_EQ(hr_ctx_eval_batch(c, ids, rows, na + nb, out, &nl, err), 0);
        CHECK_EQ(nl, 2);
        memcpy(both, out, (size_t)nv * 4);
        memcpy(both + (size_t)2 * nv, out + (size_t)nv, (size_t)nv * 4);
        int32_t dec[2] = {123, 123};
        hr_seq_pos drows[2] = {{.seq = 0, .pos = na}, {.seq = 1, .pos = nb}};
        CHECK_EQ(hr_ctx_eval_batch(c, dec, drows, 2, out, &nl, err), 0);
        memcpy(both + (size_t)nv, out, (size_t)nv * 4);
        memcpy(both + (size_t)3 * nv, out + (size_t)nv, (size_t)nv * 4);
        free(out);
        int same = 0;
        for (int r = 0; r < 4; r++)
            same += memcmp(alone + (size_t)r * nv, both + (size_t)r * nv, (size_t)nv * 4) == 0;
        printf("%-14s batched step: %d/4 rows bit-identical to each sequence alone\n", shape, same);
        CHECK_EQ(same, 4);
        hr_ctx_destroy(c);
    }
    free(alone);
    free(both);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* Layer windows [0, k) and [k, n_layer) chained through the hidden state
 * compute the whole model's bits (a window knows which of its layers are
 * local by their model index). */
static void test_windows(const char *shape, int k) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (!open_shape(shape, "q8_0", &g, &m))
        return;
    const hr_hparams *hp = hr_model_hparams(m);
    int nv = hp->n_vocab, E = hp->n_embd;
    int32_t ids[12] = {1, 40, 300, 12, 9, 77, 401, 5, 66, 201, 3, 99};
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 32;
    cp.n_batch = 4;
    hr_ctx *whole = NULL, *w0 = NULL, *w1 = NULL;
    CHECK_EQ(hr_ctx_create(&whole, m, &cp, err), 0);
    cp.layer_end = k;
    CHECK_EQ(hr_ctx_create(&w0, m, &cp, err), 0);
    cp.layer_begin = k;
    cp.layer_end = 0;
    CHECK_EQ(hr_ctx_create(&w1, m, &cp, err), 0);
    float *ref = malloc((size_t)12 * nv * 4), *lg = malloc((size_t)4 * nv * 4);
    float *h = malloc((size_t)4 * E * 4);
    int same = 0;
    if (whole && w0 && w1) {
        CHECK_EQ(hr_ctx_eval(whole, ids, 12, 0, ref, true, err), 0);
        for (int p = 0; p < 12; p += 4) {
            CHECK_EQ(hr_model_embed(m, ids + p, 4, h, err), 0);
            CHECK_EQ(hr_ctx_layers(w0, h, 4, p, err), 0);
            CHECK_EQ(hr_ctx_layers(w1, h, 4, p, err), 0);
            CHECK_EQ(hr_ctx_output(w1, h, 0, 4, lg), 0);
            same += memcmp(lg, ref + (size_t)p * nv, (size_t)4 * nv * 4) == 0;
        }
    }
    printf("%-14s windows [0, %d) + [%d, %d): %d/3 chunks bit-identical to the whole model\n",
           shape, k, k, hp->n_layer, same);
    CHECK_EQ(same, 3);
    free(ref);
    free(lg);
    free(h);
    hr_ctx_destroy(whole);
    hr_ctx_destroy(w0);
    hr_ctx_destroy(w1);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* Thread groups on a synthetic two-node machine: phi3 splits (its fused
 * tensors' views slice by heads and rows like separate tensors), computing
 * plain execution's values; gemma3 runs plain. */
static void test_groups(const char *shape, int want) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (!open_shape(shape, "q8_0", &g, &m))
        return;
    int nv = hr_model_hparams(m)->n_vocab;
    int32_t ids[12] = {1, 40, 300, 12, 9, 77, 401, 5, 66, 201, 3, 99};
    float *ref = malloc((size_t)12 * nv * 4), *lg = malloc((size_t)12 * nv * 4);
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 32;
    cp.n_batch = 4;
    cp.n_threads = 2;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    CHECK_EQ(c ? hr_ctx_eval(c, ids, 12, 0, ref, true, err) : -1, 0);
    hr_ctx_destroy(c);
    c = NULL;
    cp.n_groups = 2;
    cp.topology = "numa:2 core:2 pu:1";
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    if (c) {
        CHECK_EQ(hr_ctx_n_groups(c), want);
        CHECK_EQ(hr_ctx_eval(c, ids, 12, 0, lg, true, err), 0);
        double rel = hr_compare_logits(lg, ref, 12, nv).rel;
        printf("%-14s 2 groups asked: %d ran, max rel diff to plain %.2e\n", shape,
               hr_ctx_n_groups(c), rel);
        CHECK(rel <= 1e-5);
    }
    hr_ctx_destroy(c);
    free(ref);
    free(lg);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* A copy of src's file with one more kv (key of type u32 / f32, or an
 * array of u32 when arr) or one more 1-d f32 tensor (tensor, n values). */
static int write_variant(const hr_gguf *src, const char *path, const char *key, bool f32, bool arr,
                         const char *tensor, int64_t n) {
    char err[HR_ERR_LEN];
    hr_gguf_writer *w = hr_gguf_writer_create();
    int rc = hr_gguf_writer_copy_kv(w, src, NULL);
    uint32_t u[4] = {6, 6, 6, 6};
    float x = 30.0f;
    if (key && arr)
        rc = rc ? rc : hr_gguf_writer_set_arr(w, key, HR_GGUF_UINT32, u, 4);
    else if (key)
        rc = rc ? rc : f32 ? hr_gguf_writer_set_f32(w, key, x) : hr_gguf_writer_set_u32(w, key, 6);
    for (int64_t i = 0; rc == 0 && i < hr_gguf_n_tensors(src); i++) {
        const hr_gguf_tensor *t = hr_gguf_tensor_at(src, i);
        rc = hr_gguf_writer_add_tensor_nocopy(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                              t->size);
    }
    float *v = calloc((size_t)n + 1, sizeof(float));
    if (tensor && rc == 0)
        rc = hr_gguf_writer_add_tensor(w, tensor, HR_TYPE_F32, 1, &n, v, (uint64_t)n * 4);
    rc = rc ? rc : hr_gguf_writer_write(w, path, err);
    free(v);
    hr_gguf_writer_destroy(w);
    return rc;
}

/* Loading g's file changed by write_variant: the error and its message. */
static void check_refused(const hr_gguf *src, const char *key, bool f32, bool arr,
                          const char *tensor, int64_t n, int want, const char *msg) {
    char path[512], err[HR_ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/variant.gguf", tmpdir);
    CHECK_EQ(write_variant(src, path, key, f32, arr, tensor, n), 0);
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    CHECK_EQ(hr_gguf_open(&g, path, err), 0);
    int rc = g ? hr_model_load(&m, g, err) : -1;
    printf("refused: %s\n", err);
    CHECK_EQ(rc, want);
    CHECK(strstr(err, msg) != NULL);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* What phi3 and gemma3 files may not have. */
static void test_refusals(void) {
    char err[HR_ERR_LEN];
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (open_shape("phi3-tiny", "q8_0", &g, &m)) {
        /* the 128k variants' LongRoPE factors */
        check_refused(g, NULL, false, false, "rope_factors_long.weight",
                      hr_model_hparams(m)->n_rot / 2, HR_EUNSUPPORTED, "LongRoPE");
        check_refused(g, "phi3.expert_count", false, false, NULL, 0, HR_EUNSUPPORTED,
                      "with experts");
        hr_model_free(m);
        hr_gguf_close(g);
    }
    if (open_shape("gemma3-tiny", "q8_0", &g, &m)) {
        check_refused(g, "gemma3.final_logit_softcapping", true, false, NULL, 0, HR_EUNSUPPORTED,
                      "soft-capped");
        check_refused(g, "gemma3.attention.sliding_window_pattern", false, true, NULL, 0,
                      HR_EFORMAT, "sliding_window_pattern");
        hr_model_free(m);
        hr_gguf_close(g);
    }
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    CHECK_EQ(hr_mkmodel_shape(&mp, "phi3-tiny"), 0);
    mp.n_expert = 4;
    mp.n_expert_used = 2;
    char path[512];
    snprintf(path, sizeof path, "%s/bad.gguf", tmpdir);
    CHECK(hr_mkmodel_write(&mp, path, NULL, NULL, err) != 0);
    CHECK(strstr(err, "no experts") != NULL);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    if (sodium_init() < 0)
        return 1;
    for (size_t i = 0; i < sizeof fixture_names / sizeof fixture_names[0]; i++)
        test_fixture(fixture_names[i]);
    test_hparams();
    test_batch_invariance("phi3-tiny");
    test_batch_invariance("gemma3-tiny");
    test_windows("phi3-tiny", 1);
    test_windows("gemma3-tiny", 1);
    test_windows("gemma3-tiny", 3);
    test_groups("phi3-tiny", 2);
    test_groups("gemma3-tiny", 1);
    test_refusals();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return hr_check_finish("test_archs");
}
