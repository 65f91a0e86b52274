/* vk_harness.h - what the Vulkan kernel tests share (test_vk.c, the exact
 * kernels; test_vk_fast.c, the fast ones): random data, a device opened with
 * a weight buffer, a work buffer and a KV buffer in one set, reads and
 * writes of the work buffer in words, one recorded batch at a time, the
 * relative error of a result, the CPU's attention, and a shared fixture's
 * model, reference and context. One test executable includes it once;
 * everything is static. */
#ifndef HR_TESTS_VK_HARNESS_H
#define HR_TESTS_VK_HARNESS_H

#include "gpu/vk.h"
#include "kernels/ops.h"
#include "kernels/pool.h"
#include "kernels/types-impl.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "tests/check.h"
#include "tests/fixtures.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- random data ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static inline float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static inline void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}

/* ---- the device and its buffers ---- */

typedef struct {
    hr_vk *vk;
    hr_vk_buf *w, *x, *kv;
    hr_vk_set *set;
    char err[HR_ERR_LEN];
} hr_env;

#define X_WORDS (1u << 20)
#define KV_WORDS (1u << 16)

/* Device idx with a weight buffer of w_bytes, a work buffer, a KV buffer
 * and their set; with exact, the exact kernels (else the device's default,
 * the fast ones). */
static inline int env_open(hr_env *e, int idx, size_t w_bytes, bool exact) {
    int rc = hr_vk_create(&e->vk, idx, e->err);
    if (rc == 0)
        rc = hr_vk_buf_create(e->vk, &e->w, w_bytes, false, e->err);
    if (rc == 0)
        rc = hr_vk_buf_create(e->vk, &e->x, (size_t)X_WORDS * 4, false, e->err);
    if (rc == 0)
        rc = hr_vk_buf_create(e->vk, &e->kv, (size_t)KV_WORDS * 4, false, e->err);
    if (rc == 0)
        rc = hr_vk_set_create(e->vk, &e->set, e->w, e->x, e->kv, e->err);
    if (rc == 0 && exact)
        rc = hr_vk_set_exact(e->vk, true);
    return rc;
}

static inline void env_close(hr_env *e) {
    if (!e->vk)
        return;
    hr_vk_set_destroy(e->vk, e->set);
    hr_vk_buf_destroy(e->vk, e->w);
    hr_vk_buf_destroy(e->vk, e->x);
    hr_vk_buf_destroy(e->vk, e->kv);
    hr_vk_destroy(e->vk);
}

/* The device HR_GPU names, opened as env_open does, into *e (its index in
 * *idx). False when the test is to end here: no device (a skip, said on
 * stdout) or one that does not open (a failed check, its error on
 * stderr). */
static inline bool env_start(hr_env *e, int *idx, size_t w_bytes, bool exact) {
    *idx = -1;
    if (hr_vk_pick(NULL, idx, e->err) != 0 || *idx < 0) {
        printf("no Vulkan device (%s)\n", e->err[0] ? e->err : "HR_GPU unset or none");
        hr_check_skip("no Vulkan device");
        return false;
    }
    int rc = env_open(e, *idx, w_bytes, exact);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "%s\n", e->err);
    return rc == 0;
}

/* n floats to / from the work buffer at word off */
static inline void put(hr_env *e, uint32_t off, const float *v, size_t n) {
    CHECK_EQ(hr_vk_write(e->vk, e->x, (size_t)off * 4, v, n * 4, e->err), 0);
}

static inline void get(hr_env *e, uint32_t off, float *v, size_t n) {
    CHECK_EQ(hr_vk_read(e->vk, e->x, (size_t)off * 4, v, n * 4, e->err), 0);
}

/* a batch of kernels: begin, record, submit (which waits) */
static inline void begin(hr_env *e) { CHECK_EQ(hr_vk_begin(e->vk, e->err), 0); }
static inline void submit(hr_env *e) {
    int rc = hr_vk_submit(e->vk, e->err);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "submit: %s\n", e->err);
}

/* max |a - b| over n, relative to max |b| (absolute when b is all tiny) */
static inline double rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 1e-6;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY; /* fmax would drop a NaN */
        md = fmax(md, fabs((double)a[i] - b[i]));
        mb = fmax(mb, fabs((double)b[i]));
    }
    return md / mb;
}

/* ---- matmul ---- */

/* the weight types with a matmul kernel */
static const int vk_mm_types[] = {HR_TYPE_F32,  HR_TYPE_F16,  HR_TYPE_BF16, HR_TYPE_Q4_0,
                                  HR_TYPE_Q4_1, HR_TYPE_Q5_0, HR_TYPE_Q5_1, HR_TYPE_Q8_0,
                                  HR_TYPE_Q4_K, HR_TYPE_Q5_K, HR_TYPE_Q6_K};
#define N_VK_MM_TYPES (sizeof vk_mm_types / sizeof vk_mm_types[0])

/* A quantized type's matmul over rows that end in a partial block is
 * refused. */
static inline void check_partial_blocks_refused(hr_env *e, int type) {
    int be = hr_type_get(type)->block_elems;
    if (be == 1)
        return;
    size_t rb = hr_type_row_bytes(type, be);
    CHECK_EQ(hr_vk_matmul(e->vk, e->set, type, (uint32_t)be + 16, 4, (uint32_t)rb, 0, 0, 0, 1, 4),
             HR_EINVAL);
}

/* ---- CPU references ---- */

/* The CPU's attention (hr_attention) of the n_tok queries q
 * ([n_tok][n_head * hd] f32) at positions pos0.. over k, v ([pos0 + n_tok]
 * [n_kv * hd] f32) into ref (as q): k and v rounded into the f16 caches
 * kc ([n_ctx][n_kv * hd]) and vt (transposed, [n_kv * hd][n_ctx]), which
 * the caller allocates zeroed and keeps. */
static inline void attn_reference(int n_head, int n_kv, int hd, int n_ctx, int pos0, int n_tok,
                                  const float *k, const float *v, const float *q, uint16_t *kc,
                                  uint16_t *vt, float *ref) {
    int KD = n_kv * hd;
    for (int p = 0; p < pos0 + n_tok; p++)
        for (int i = 0; i < KD; i++) {
            kc[(size_t)p * KD + i] = hr_fp32_to_fp16(k[(size_t)p * KD + i]);
            vt[(size_t)i * n_ctx + p] = hr_fp32_to_fp16(v[(size_t)p * KD + i]);
        }
    float *scratch = malloc(hr_attn_scratch_floats(1, n_head, n_kv, hd, n_ctx) * 4);
    hr_pool *pool = hr_pool_create(1);
    hr_attn_args aa = {.n_head = n_head,
                       .n_kv = n_kv,
                       .head_dim = hd,
                       .n_ctx = n_ctx,
                       .k = kc,
                       .vt = vt,
                       .scratch = scratch};
    hr_attention(pool, &aa, q, n_tok, pos0, ref);
    hr_pool_destroy(pool);
    free(scratch);
}

/* ---- shared fixtures ---- */

/* A context for m with its window's first n_gpu layers on vk (none: NULL,
 * 0): 64 positions, batches of 8, one thread. */
static inline int ctx_create(hr_ctx **c, const hr_model *m, hr_vk *vk, int n_gpu,
                             char err[HR_ERR_LEN]) {
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 64;
    cp.n_batch = 8;
    cp.n_threads = 1;
    cp.vk = vk;
    cp.n_gpu = n_gpu;
    *c = NULL;
    return hr_ctx_create(c, m, &cp, err);
}

/* Opens shared model `name` into *g, *m; false (both NULL, a failed
 * check, the error on stderr) when it cannot. */
static inline bool open_model(const char *name, hr_gguf **g, hr_model **m) {
    char path[512], rel[128], err[HR_ERR_LEN] = "";
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    *g = NULL;
    *m = NULL;
    if (hr_gguf_open(g, hr_shared_path(rel, path, sizeof path), err) == 0 &&
        hr_model_load(m, *g, err) == 0)
        return true;
    fprintf(stderr, "%s: %s\n", name, err);
    CHECK(false);
    hr_gguf_close(*g);
    *g = NULL;
    return false;
}

/* Fixture name's model (into *g, *m, as open_model) and reference: its
 * prompt ids (at most cap, their count in *n) and llama.cpp's logits for
 * them (*ref, [*n][n_vocab], checked; the caller frees them). False when
 * the model does not open. */
static inline bool open_fixture(const char *name, hr_gguf **g, hr_model **m, int32_t *ids, int cap,
                                int *n, float **ref) {
    *n = 0;
    *ref = NULL;
    if (!open_model(name, g, m))
        return false;
    char path[512], rel[128];
    snprintf(rel, sizeof rel, "reference/%s.json", name);
    json_error_t jerr;
    json_t *root = json_load_file(hr_shared_path(rel, path, sizeof path), 0, &jerr);
    CHECK(root != NULL);
    *n = read_ids(root, "prompt_ids", ids, cap);
    json_decref(root);
    snprintf(rel, sizeof rel, "reference/%s.logits", name);
    size_t n_ref = 0;
    *ref = read_floats(hr_shared_path(rel, path, sizeof path), &n_ref);
    CHECK_EQ(n_ref, (size_t)*n * hr_model_hparams(*m)->n_vocab);
    return true;
}

#endif
