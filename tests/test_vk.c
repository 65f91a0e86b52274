/* test_vk.c - every Vulkan kernel against the scalar CPU reference on
 * random data: matmul for every weight type (1 row, odd row counts, token
 * tails, F32/F16/BF16 rows of any length, quantized rows refused when their
 * length is not a whole number of blocks), the Q8 activation quantizers,
 * RMSNorm, add, SwiGLU, softmax, RoPE (normal, NEOX, frequency factors), the
 * F16 KV store and GQA attention. Runs on the device HR_GPU names (ctest
 * sets "any", which takes lavapipe when there is no GPU); prints SKIPPED and
 * exits 77 when there is no Vulkan device or the build has no backend. */
#include "tests/check.h"

#include "gpu/vk.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/types-impl.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}

typedef struct {
    hr_vk *vk;
    hr_vk_buf *w, *x, *kv;
    hr_vk_set *set;
    char err[HR_ERR_LEN];
} hr_env;

#define W_BYTES (4u << 20)
#define X_WORDS (1u << 20)
#define KV_WORDS (1u << 16)

static void put(hr_env *e, uint32_t off, const float *v, size_t n) {
    CHECK_EQ(hr_vk_write(e->vk, e->x, (size_t)off * 4, v, n * 4, e->err), 0);
}

static void get(hr_env *e, uint32_t off, float *v, size_t n) {
    CHECK_EQ(hr_vk_read(e->vk, e->x, (size_t)off * 4, v, n * 4, e->err), 0);
}

static int begin(hr_env *e) { return hr_vk_begin(e->vk, e->err); }
static void submit(hr_env *e) {
    int rc = hr_vk_submit(e->vk, e->err);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "submit: %s\n", e->err);
}

/* max |a - b| over n, relative to max |b| (absolute when b is all tiny) */
static double rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 1e-6;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mb = fmax(mb, fabs((double)b[i]));
    }
    return md / mb;
}

/* ---- matmul: every weight type against its scalar vec_dot ---- */

/* Returns the relative error. */
static double test_matmul_case(hr_env *e, int type, int n_in, int n_out, int n_tok,
                               uint32_t w_off) {
    const hr_type_traits *tt = hr_type_get(type);
    const hr_type_traits *at = hr_type_get(tt->vec_dot_type);
    size_t rb = hr_type_row_bytes(type, n_in);
    float *wf = malloc((size_t)n_in * n_out * 4), *xf = malloc((size_t)n_in * n_tok * 4);
    float *ref = malloc((size_t)n_out * n_tok * 4), *got = malloc((size_t)n_out * n_tok * 4);
    char *wq = malloc(rb * n_out);
    size_t arb = hr_type_row_bytes(tt->vec_dot_type, n_in);
    char *aq = malloc(arb * n_tok);
    fill(wf, (size_t)n_in * n_out, 1.0f);
    fill(xf, (size_t)n_in * n_tok, 2.0f);
    for (int r = 0; r < n_out; r++)
        tt->quant(wf + (size_t)r * n_in, wq + r * rb, n_in);
    for (int t = 0; t < n_tok; t++)
        at->quant(xf + (size_t)t * n_in, aq + t * arb, n_in);
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < n_out; r++)
            ref[(size_t)t * n_out + r] = tt->vec_dot(n_in, wq + r * rb, aq + t * arb);
    CHECK_EQ(hr_vk_write(e->vk, e->w, w_off, wq, rb * n_out, e->err), 0);
    uint32_t x_off = 16, act_off = x_off + (uint32_t)(n_in * n_tok) + 8;
    uint32_t y_off = act_off + (uint32_t)hr_vk_act_words(tt->vec_dot_type, n_in, n_tok) + 8;
    put(e, x_off, xf, (size_t)n_in * n_tok);
    begin(e);
    bool q = tt->vec_dot_type != HR_TYPE_F32;
    if (q)
        CHECK_EQ(hr_vk_quantize(e->vk, e->set, tt->vec_dot_type, n_in, n_tok, x_off, act_off), 0);
    CHECK_EQ(hr_vk_matmul(e->vk, e->set, type, n_in, n_out, rb, w_off, q ? act_off : x_off, y_off,
                          n_tok, n_out),
             0);
    submit(e);
    get(e, y_off, got, (size_t)n_out * n_tok);
    /* float summation order differs, and the device's scale division may
     * round an activation the other way now and then: 1e-3 of the largest */
    double err = rel_err(got, ref, (size_t)n_out * n_tok);
    if (err > (q ? 2e-3 : 1e-5))
        fprintf(stderr, "matmul %s n_in %d n_out %d n_tok %d: rel err %.3g\n", tt->name, n_in,
                n_out, n_tok, err);
    CHECK(err <= (q ? 2e-3 : 1e-5));
    free(wf), free(xf), free(ref), free(got), free(wq), free(aq);
    return err;
}

static void test_matmul(hr_env *e) {
    static const int types[] = {HR_TYPE_F32,  HR_TYPE_F16,  HR_TYPE_BF16, HR_TYPE_Q4_0,
                                HR_TYPE_Q4_1, HR_TYPE_Q5_0, HR_TYPE_Q5_1, HR_TYPE_Q8_0,
                                HR_TYPE_Q4_K, HR_TYPE_Q5_K, HR_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        int t = types[i], be = hr_type_get(t)->block_elems;
        CHECK(hr_vk_type_supported(t));
        int n_in = be == 1 ? 37 : be * 3;                   /* a float row of odd length */
        double err = test_matmul_case(e, t, n_in, 1, 1, 0); /* 1 row, 1 token */
        /* odd row count, rows at an offset; then 8 tokens + a tail of 3 */
        err = fmax(err, test_matmul_case(e, t, n_in, 37, 1, 2 * (t != 0)));
        err = fmax(err, test_matmul_case(e, t, be == 1 ? 300 : be * 5, 19, 11, 0));
        if (be > 1) { /* partial blocks refused */
            size_t rb = hr_type_row_bytes(t, be);
            CHECK_EQ(
                hr_vk_matmul(e->vk, e->set, t, (uint32_t)be + 16, 4, (uint32_t)rb, 0, 0, 0, 1, 4),
                HR_EINVAL);
        }
        printf("matmul %-5s max rel err %.3g\n", hr_type_name(t), err);
    }
    /* types with no kernel, and activation formats quantizing partial blocks */
    CHECK(!hr_vk_type_supported(HR_TYPE_Q2_K));
    CHECK_EQ(hr_vk_matmul(e->vk, e->set, HR_TYPE_Q2_K, 256, 1, 84, 0, 0, 0, 1, 1), HR_EINVAL);
    CHECK_EQ(hr_vk_quantize(e->vk, e->set, HR_TYPE_Q8_0, 48, 1, 0, 64), HR_EINVAL);
    CHECK_EQ(hr_vk_quantize(e->vk, e->set, HR_TYPE_Q8_K, 288, 1, 0, 64), HR_EINVAL);
}

/* ---- the activation quantizers: dequantized values as the scalar ones ---- */

static void test_quantize(hr_env *e) {
    static const int acts[] = {HR_TYPE_Q8_0, HR_TYPE_Q8_1, HR_TYPE_Q8_K};
    int n_in = 512, n_tok = 3;
    float x[512 * 3], got_q[512 * 3], ref_q[512 * 3];
    fill(x, sizeof x / 4, 3.0f);
    x[5] = 0.0f; /* a tie case: equal magnitudes of both signs */
    x[40] = 2.5f, x[41] = -2.5f;
    for (size_t a = 0; a < 3; a++) {
        int act = acts[a];
        const hr_type_traits *at = hr_type_get(act);
        size_t words = hr_vk_act_words(act, n_in, n_tok);
        uint32_t *buf = malloc(words * 4);
        char *cq = malloc(hr_type_row_bytes(act, n_in));
        put(e, 0, x, sizeof x / 4);
        begin(e);
        CHECK_EQ(hr_vk_quantize(e->vk, e->set, act, n_in, n_tok, 0, 4096), 0);
        submit(e);
        CHECK_EQ(hr_vk_read(e->vk, e->x, 4096 * 4, buf, words * 4, e->err), 0);
        int chunks = n_in / 32, mism = 0;
        const float *dv = (const float *)buf + (size_t)n_tok * n_in / 4;
        const float *sv = dv + (size_t)n_tok * chunks;
        for (int t = 0; t < n_tok; t++) {
            const int8_t *qs = (const int8_t *)(buf + (size_t)t * n_in / 4);
            for (int i = 0; i < n_in; i++)
                got_q[t * n_in + i] = dv[t * chunks + i / 32] * (float)qs[i];
            at->quant(x + (size_t)t * n_in, cq, n_in);
            at->dequant(cq, ref_q + (size_t)t * n_in, n_in);
            for (int c = 0; c < chunks; c++) { /* the per-chunk sums */
                int sum = 0;
                for (int l = 0; l < 32; l++)
                    sum += qs[32 * c + l];
                if (act == HR_TYPE_Q8_K) {
                    const hr_block_q8_k *b = (const hr_block_q8_k *)cq + c / 8;
                    mism += sv[t * chunks + c] !=
                            (float)(b->bsums[2 * (c % 8)] + b->bsums[2 * (c % 8) + 1]);
                } else if (act == HR_TYPE_Q8_1) {
                    const hr_block_q8_1 *b = (const hr_block_q8_1 *)cq + c;
                    mism += fabsf(sv[t * chunks + c] - hr_fp16_to_fp32(b->s)) >
                            1e-3f * fabsf(hr_fp16_to_fp32(b->s)) + 1e-6f;
                }
            }
        }
        double err = rel_err(got_q, ref_q, sizeof x / 4);
        printf("quantize %-4s rel err %.3g, sum mismatches %d\n", at->name, err, mism);
        CHECK(err <= 1e-6);
        CHECK_EQ(mism, 0);
        free(buf);
        free(cq);
    }
}

/* ---- element-wise kernels ---- */

static void test_elementwise(hr_env *e) {
    enum { N = 37, R = 3 };
    float x[N * R], g[N], ref[N * R], got[N * R], u[N * R];
    fill(x, N * R, 2.0f);
    fill(g, N, 1.0f);
    fill(u, N * R, 1.0f);
    /* rmsnorm with and without a weight */
    CHECK_EQ(hr_vk_write(e->vk, e->w, 64, g, sizeof g, e->err), 0);
    put(e, 0, x, N * R);
    begin(e);
    hr_vk_rmsnorm(e->vk, e->set, N, R, 0, N, 1000, N, 16, 1e-5f);
    hr_vk_rmsnorm(e->vk, e->set, N, R, 0, N, 2000, N, UINT32_MAX, 1e-6f);
    submit(e);
    for (int r = 0; r < R; r++)
        hr_rmsnorm(ref + r * N, x + r * N, g, N, 1e-5f);
    get(e, 1000, got, N * R);
    CHECK(rel_err(got, ref, N * R) <= 1e-6);
    for (int r = 0; r < R; r++)
        hr_rmsnorm(ref + r * N, x + r * N, NULL, N, 1e-6f);
    get(e, 2000, got, N * R);
    CHECK(rel_err(got, ref, N * R) <= 1e-6);
    /* add: residual (work buffer) and a bias repeated per row (weights) */
    put(e, 3000, u, N * R);
    begin(e);
    hr_vk_add(e->vk, e->set, N * R, 0, 3000, N * R, false);
    hr_vk_add(e->vk, e->set, N * R, 0, 16, N, true);
    submit(e);
    for (int i = 0; i < N * R; i++)
        ref[i] = x[i] + u[i] + g[i % N];
    get(e, 0, got, N * R);
    CHECK(rel_err(got, ref, N * R) <= 1e-6);
    /* swiglu */
    put(e, 0, x, N * R);
    begin(e);
    hr_vk_swiglu(e->vk, e->set, N * R, 0, 3000);
    submit(e);
    hr_swiglu(ref, x, u, N * R);
    get(e, 0, got, N * R);
    CHECK(rel_err(got, ref, N * R) <= 1e-5);
    /* softmax over rows of odd length */
    put(e, 0, x, N * R);
    begin(e);
    hr_vk_softmax(e->vk, e->set, N, R, 0, N);
    submit(e);
    memcpy(ref, x, sizeof x);
    for (int r = 0; r < R; r++)
        hr_softmax(ref + r * N, N);
    get(e, 0, got, N * R);
    CHECK(rel_err(got, ref, N * R) <= 1e-5);
    printf("rmsnorm, add, swiglu, softmax ok\n");
}

/* ---- RoPE: normal and NEOX pairs, partial rotation, frequency factors ---- */

static void test_rope(hr_env *e) {
    enum { T = 3, H = 4, D = 16 };
    float x[T * H * D], ref[T * H * D], got[T * H * D], ff[D / 2], tab[T * D];
    fill(ff, D / 2, 0.5f);
    for (int i = 0; i < D / 2; i++)
        ff[i] += 1.5f;
    for (int mode = 0; mode < 4; mode++) {
        bool neox = mode & 1;
        int n_rot = mode & 2 ? D / 2 : D;
        const float *fac = mode == 3 ? ff : NULL;
        hr_rope_params rp = {
            .n_rot = n_rot, .freq_base = 10000.0f, .neox = neox, .freq_factors = fac};
        fill(x, T * H * D, 1.0f);
        memcpy(ref, x, sizeof x);
        for (int t = 0; t < T; t++)
            hr_rope(ref + t * H * D, H, D, 100 + t, &rp);
        hr_vk_rope_table(tab, T, 100, n_rot, 10000.0f, fac);
        put(e, 0, x, T * H * D);
        put(e, 5000, tab, (size_t)T * n_rot);
        begin(e);
        hr_vk_rope(e->vk, e->set, T, H, D, n_rot, neox, 0, H * D, 5000);
        submit(e);
        get(e, 0, got, T * H * D);
        CHECK(rel_err(got, ref, T * H * D) <= 1e-6);
    }
    printf("rope (normal, neox, partial, factors) ok\n");
}

/* ---- KV store + attention against hr_attention ---- */

static void test_attention_case(hr_env *e, int n_head, int n_kv, int hd, int n_ctx, int pos0,
                                int n_tok) {
    int KD = n_kv * hd, QD = n_head * hd, n_all = pos0 + n_tok;
    float *k = malloc((size_t)n_all * KD * 4), *v = malloc((size_t)n_all * KD * 4);
    float *q = malloc((size_t)n_tok * QD * 4), *ref = malloc((size_t)n_tok * QD * 4);
    float *got = malloc((size_t)n_tok * QD * 4);
    uint16_t *kc = calloc((size_t)n_ctx * KD, 2), *vt = calloc((size_t)n_ctx * KD, 2);
    float *scratch = malloc((size_t)(n_ctx + hd) * 4);
    fill(k, (size_t)n_all * KD, 1.0f);
    fill(v, (size_t)n_all * KD, 1.0f);
    fill(q, (size_t)n_tok * QD, 1.5f);
    for (int p = 0; p < n_all; p++)
        for (int i = 0; i < KD; i++) {
            kc[(size_t)p * KD + i] = hr_fp32_to_fp16(k[(size_t)p * KD + i]);
            vt[(size_t)i * n_ctx + p] = hr_fp32_to_fp16(v[(size_t)p * KD + i]);
        }
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
    /* device: earlier positions stored by one call, this step's by another */
    uint32_t kx = 0, vx = (uint32_t)(n_all * KD), qx = 2 * vx, ox = qx + (uint32_t)(n_tok * QD);
    uint32_t sc = ox + (uint32_t)(n_tok * QD), kk = 0, vv = (uint32_t)(n_ctx * KD / 2);
    put(e, kx, k, (size_t)n_all * KD);
    put(e, vx, v, (size_t)n_all * KD);
    put(e, qx, q, (size_t)n_tok * QD);
    begin(e);
    if (pos0 > 0)
        hr_vk_kv_store(e->vk, e->set, KD, pos0, 0, kx, vx, kk, vv);
    hr_vk_kv_store(e->vk, e->set, KD, n_tok, pos0, kx + pos0 * KD, vx + pos0 * KD, kk, vv);
    hr_vk_attn a = {.n_head = n_head,
                    .n_kv = n_kv,
                    .head_dim = hd,
                    .n_ctx = n_ctx,
                    .n_tok = n_tok,
                    .pos0 = pos0,
                    .q = qx,
                    .out = ox,
                    .sc = sc,
                    .k = kk,
                    .v = vv};
    hr_vk_attention(e->vk, e->set, &a);
    submit(e);
    get(e, ox, got, (size_t)n_tok * QD);
    double err = rel_err(got, ref, (size_t)n_tok * QD);
    printf("attention heads %d/%d dim %d pos %d+%d: rel err %.3g\n", n_head, n_kv, hd, pos0, n_tok,
           err);
    CHECK(err <= 1e-5);
    /* the cache holds what the CPU rounds to f16 */
    uint16_t *dk = malloc((size_t)n_all * KD * 2);
    CHECK_EQ(hr_vk_read(e->vk, e->kv, 0, dk, (size_t)n_all * KD * 2, e->err), 0);
    CHECK_EQ(memcmp(dk, kc, (size_t)n_all * KD * 2), 0);
    free(dk);
    free(k), free(v), free(q), free(ref), free(got), free(kc), free(vt), free(scratch);
}

static void test_attention(hr_env *e) {
    test_attention_case(e, 4, 2, 8, 16, 0, 1);    /* first token */
    test_attention_case(e, 4, 2, 8, 16, 0, 5);    /* prefill, causal */
    test_attention_case(e, 8, 2, 64, 100, 70, 3); /* positions beyond a workgroup */
    test_attention_case(e, 6, 6, 34, 40, 11, 1);  /* no grouping, odd head count */
}

int main(void) {
    hr_env e = {0};
    if (!hr_vk_built()) {
        hr_check_skip("built without Vulkan");
        return hr_check_finish("test_vk");
    }
    int idx = -1;
    if (hr_vk_pick(NULL, &idx, e.err) != 0 || idx < 0) {
        printf("no Vulkan device (%s)\n", e.err[0] ? e.err : "HR_GPU unset or none");
        hr_check_skip("no Vulkan device");
        return hr_check_finish("test_vk");
    }
    int rc = hr_vk_create(&e.vk, idx, e.err);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "%s\n", e.err);
        return hr_check_finish("test_vk");
    }
    printf("device %d: %s (%s)\n", idx, hr_vk_info(e.vk)->name,
           hr_vk_type_name(hr_vk_info(e.vk)->type));
    CHECK_EQ(hr_vk_buf_create(e.vk, &e.w, W_BYTES, false, e.err), 0);
    CHECK_EQ(hr_vk_buf_create(e.vk, &e.x, (size_t)X_WORDS * 4, false, e.err), 0);
    CHECK_EQ(hr_vk_buf_create(e.vk, &e.kv, (size_t)KV_WORDS * 4, false, e.err), 0);
    CHECK_EQ(hr_vk_set_create(e.vk, &e.set, e.w, e.x, e.kv, e.err), 0);
    test_elementwise(&e);
    test_rope(&e);
    test_quantize(&e);
    test_matmul(&e);
    test_attention(&e);
    hr_vk_set_destroy(e.vk, e.set);
    hr_vk_buf_destroy(e.vk, e.w);
    hr_vk_buf_destroy(e.vk, e.x);
    hr_vk_buf_destroy(e.vk, e.kv);
    hr_vk_destroy(e.vk);
    return hr_check_finish("test_vk");
}
