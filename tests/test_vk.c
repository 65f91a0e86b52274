/* test_vk.c - every Vulkan kernel against the scalar CPU reference on
 * random data: matmul for every weight type (1 row, odd row counts, token
 * tails, F32/F16/BF16 rows of any length, quantized rows refused when their
 * length is not a whole number of blocks), the Q8 activation quantizers,
 * RMSNorm, add, SwiGLU, softmax, RoPE (normal, NEOX, frequency factors), the
 * F16 KV store and GQA attention. Runs on the device HR_GPU names (ctest
 * sets "any", which takes lavapipe when there is no GPU); prints SKIPPED and
 * exits 77 when there is no Vulkan device or the build has no backend. */
#include "tests/check.h"
#include "tests/fixtures.h"
#include "tests/vk_harness.h"

#include "common/sync.h"
#include "gpu/vk.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/types-impl.h"
#include "mmap/gguf.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/sampler.h"
#include "profiler/profiler.h"
#include "sched/sched.h"

#include <float.h>
#include <jansson.h>
#include <unistd.h>

#define W_BYTES (4u << 20) /* the weight buffer */

/* env_open with the environment's var set to val while the device opens
 * (a switch hr_vk_create reads); whether it opened */
static bool env_open_with(hr_env *e, int idx, const char *var, const char *val) {
    setenv(var, val, 1);
    CHECK_EQ(env_open(e, idx, W_BYTES, true), 0);
    unsetenv(var);
    return e->vk != NULL;
}

/* how many of n floats differ from b in any bit */
/* Whether the device flushes subnormal floats (Vulkan allows it; NVIDIA's
 * driver does, lavapipe does not): then a device value that is zero or
 * subnormal where the CPU's is subnormal counts as the same, and is
 * tallied in g_flushed. */
static bool g_flush;
static size_t g_flushed;

static bool same_bits(float dev, float cpu) {
    if (memcmp(&dev, &cpu, sizeof dev) == 0)
        return true;
    if (g_flush && fabsf(cpu) < FLT_MIN && fabsf(dev) < FLT_MIN) {
        g_flushed++;
        return true;
    }
    return false;
}

/* how many of the n device floats a differ from the CPU's b in any bit */
static size_t n_diff(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += !same_bits(a[i], b[i]);
    return d;
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
    fill(xf, (size_t)n_in * n_tok, n_tok > 1 ? 2.0f : 0.001f); /* small scales: f16 subnormals */
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
    /* bit for bit the scalar vec_dot: the same activation bytes, the same
     * integer sums, the same float steps in the same order */
    double err = rel_err(got, ref, (size_t)n_out * n_tok);
    size_t nd = n_diff(got, ref, (size_t)n_out * n_tok);
    if (nd)
        fprintf(stderr, "matmul %s n_in %d n_out %d n_tok %d: %zu values differ, rel err %.3g\n",
                tt->name, n_in, n_out, n_tok, nd, err);
    CHECK_EQ(nd, 0);
    free(wf), free(xf), free(ref), free(got), free(wq), free(aq);
    return err;
}

static void test_matmul(hr_env *e) {
    for (size_t i = 0; i < N_VK_MM_TYPES; i++) {
        int t = vk_mm_types[i], be = hr_type_get(t)->block_elems;
        CHECK(hr_vk_type_supported(t));
        int n_in = be == 1 ? 37 : be * 3;                   /* a float row of odd length */
        double err = test_matmul_case(e, t, n_in, 1, 1, 0); /* 1 row, 1 token */
        /* odd row count, rows at an offset; then 8 tokens + a tail of 3 */
        err = fmax(err, test_matmul_case(e, t, n_in, 37, 1, 2 * (t != 0)));
        err = fmax(err, test_matmul_case(e, t, be == 1 ? 300 : be * 5, 19, 11, 0));
        /* one token over rows long enough for matvec.comp's rounds (16
         * blocks, 4 super-blocks or 256 float values each) to run twice and
         * end in a partial one */
        err = fmax(err, test_matmul_case(e, t,
                                         be == 1    ? 555
                                         : be == 32 ? 32 * 37
                                                    : 256 * 9,
                                         13, 1, 0));
        check_partial_blocks_refused(e, t);
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
                    mism += sv[t * chunks + c] != (float)sum ||
                            sum != b->bsums[2 * (c % 8)] + b->bsums[2 * (c % 8) + 1];
                } else if (act == HR_TYPE_Q8_1) {
                    const hr_block_q8_1 *b = (const hr_block_q8_1 *)cq + c;
                    mism += sv[t * chunks + c] != hr_fp16_to_fp32(b->s);
                }
            }
        }
        double err = rel_err(got_q, ref_q, sizeof x / 4);
        size_t nd = n_diff(got_q, ref_q, sizeof x / 4);
        printf("quantize %-4s %zu values differ (rel err %.3g), sum mismatches %d\n", at->name, nd,
               err, mism);
        CHECK_EQ(nd, 0);
        CHECK_EQ(mism, 0);
        free(buf);
        free(cq);
    }
}

/* ---- exact.glsl: expf, division, sqrt, fma against the C library ---- */

/* one op over n inputs (a, b, c) on the device; out: n results */
static void probe(hr_env *e, int op, const float *a, const float *b, const float *c, float *out,
                  uint32_t n) {
    put(e, 0, a, n);
    put(e, n, b, n);
    put(e, 2 * n, c, n);
    begin(e);
    hr_vk_probe(e->vk, e->set, op, n, 0);
    submit(e);
    get(e, 3 * n, out, n);
}

static uint32_t urand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static float fbits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_exact(hr_env *e) {
    enum { N = 1 << 18 };
    float *a = malloc(N * 4), *b = malloc(N * 4), *c = malloc(N * 4), *got = malloc(N * 4);
    /* expf over every binade that matters: random floats in [-110, 95],
     * the overflow / underflow edges, the specials and two inputs where a
     * plain double evaluation rounds differently from glibc's */
    static const float edge[] = {
        0.0f,           -0.0f,           INFINITY,       -INFINITY,      NAN,    0x1.62e42ep6f,
        0x1.62e430p6f,  -0x1.9fe368p6f,  -0x1.9fe36ap6f, -0x1.9d1d9ep6f, -87.0f, -100.0f,
        0x1.04845ep+5f, -0x1.f8cbb2p+5f, 1e-30f,         -1e-30f};
    size_t ne = sizeof edge / sizeof edge[0];
    for (uint32_t i = 0; i < N; i++) {
        a[i] = i < ne ? edge[i] : (float)((double)urand() / 4294967296.0 * 205.0 - 110.0);
        if (i >= ne && i % 3 == 0) /* and small magnitudes, down to 1e-20 */
            a[i] = fbits((urand() % 0x1e000000u + 0x20000000u) | (urand() & 0x80000000u));
        b[i] = c[i] = 0.0f;
    }
    probe(e, 0, a, b, c, got, N);
    size_t bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        float want = expf(a[i]);
        if (isnan(want) ? !isnan(got[i]) : !same_bits(got[i], want)) {
            if (bad++ < 3)
                fprintf(stderr, "expf(%a): device %a, libm %a\n", a[i], got[i], want);
        }
    }
    CHECK_EQ(bad, 0);
    size_t n_exp = bad;
    /* division, sqrt and fma of random floats over 2^-40 .. 2^40, both signs */
    for (uint32_t i = 0; i < N; i++) {
        a[i] = fbits(((urand() % (80u << 23)) + (87u << 23)) | (urand() & 0x80000000u));
        b[i] = fbits(((urand() % (80u << 23)) + (87u << 23)) | (urand() & 0x80000000u));
        c[i] = i % 2 ? -(a[i] * b[i]) : fbits(((urand() % (80u << 23)) + (87u << 23)));
    }
    /* fma cases where the product plus c lands on a float midpoint in a
     * double and only the last bits decide (the emulation's hard case),
     * normal and subnormal results, both signs */
    static const float mid[][3] = {{0x1.001p0f, 0x1.001p0f, 0x1p-60f},
                                   {0x1.001p0f, 0x1.001p0f, -0x1p-60f},
                                   {-0x1.001p0f, 0x1.001p0f, 0x1p-60f},
                                   {0x1.0001p-75f, 0x1.fffep-76f, 0x1.000004p-127f},
                                   {-0x1.0001p-75f, 0x1.fffep-76f, -0x1.000004p-127f},
                                   {0x1.8p-75f, 0x1.8p-75f, 0x1p-149f},
                                   {0x1p-75f, 0x1p-75f, -0x1p-149f}};
    for (uint32_t i = 0; i < sizeof mid / sizeof mid[0]; i++)
        a[i] = mid[i][0], b[i] = mid[i][1], c[i] = mid[i][2];
    size_t bad_op[3] = {0};
    for (int op = 1; op <= 3; op++) {
        probe(e, op, a, b, c, got, N);
        for (uint32_t i = 0; i < N; i++) {
            float x = op == 2 ? fabsf(a[i]) : a[i];
            float want = op == 1 ? a[i] / b[i] : op == 2 ? sqrtf(x) : fmaf(a[i], b[i], c[i]);
            if (op == 2 && x != a[i])
                continue; /* sqrt: the positive half */
            if (!same_bits(got[i], want) && bad_op[op - 1]++ < 3)
                fprintf(stderr, "op %d (%a, %a, %a): device %a, libm %a\n", op, a[i], b[i], c[i],
                        got[i], want);
        }
        CHECK_EQ(bad_op[op - 1], 0);
    }
    printf("exact ops, %d inputs each: expf %zu, division %zu, sqrt %zu, fma %zu differ from the "
           "C library (fma %s)\n",
           N, n_exp, bad_op[0], bad_op[1], bad_op[2],
           hr_vk_uses_native_fma(e->vk) ? "the device's" : "from doubles");
    free(a), free(b), free(c), free(got);
}

/* ---- element-wise kernels ---- */

/* rows of N values in [-scale, scale) (N = 37: odd lengths; 4099: double
 * sums long enough for their order to matter, large exponents in softmax) */
static void test_elementwise_n(hr_env *e, const int N, float scale) {
    const int R = 3;
    const uint32_t o1 = (uint32_t)(N * R) + 64, o2 = 2 * o1, o3 = 3 * o1; /* X regions */
    float *x = malloc((size_t)N * R * 4), *g = malloc((size_t)N * 4);
    float *ref = malloc((size_t)N * R * 4), *got = malloc((size_t)N * R * 4);
    float *u = malloc((size_t)N * R * 4);
    fill(x, (size_t)N * R, scale);
    fill(g, N, 1.0f);
    fill(u, N * R, 1.0f);
    /* rmsnorm with and without a weight */
    CHECK_EQ(hr_vk_write(e->vk, e->w, 64, g, (size_t)N * 4, e->err), 0);
    put(e, 0, x, N * R);
    begin(e);
    hr_vk_rmsnorm(e->vk, e->set, N, R, 0, N, o1, N, 16, 1e-5f);
    hr_vk_rmsnorm(e->vk, e->set, N, R, 0, N, o2, N, UINT32_MAX, 1e-6f);
    submit(e);
    for (int r = 0; r < R; r++)
        hr_rmsnorm(ref + r * N, x + r * N, g, N, 1e-5f);
    get(e, o1, got, N * R);
    CHECK_EQ(n_diff(got, ref, N * R), 0);
    for (int r = 0; r < R; r++)
        hr_rmsnorm(ref + r * N, x + r * N, NULL, N, 1e-6f);
    get(e, o2, got, N * R);
    CHECK_EQ(n_diff(got, ref, N * R), 0);
    /* add: residual (work buffer) and a bias repeated per row (weights) */
    put(e, o3, u, N * R);
    begin(e);
    hr_vk_add(e->vk, e->set, N * R, 0, o3, N * R, false);
    hr_vk_add(e->vk, e->set, N * R, 0, 16, N, true);
    submit(e);
    for (int i = 0; i < N * R; i++)
        ref[i] = x[i] + u[i] + g[i % N];
    get(e, 0, got, N * R);
    CHECK_EQ(n_diff(got, ref, N * R), 0);
    /* swiglu */
    put(e, 0, x, N * R);
    begin(e);
    hr_vk_swiglu(e->vk, e->set, N * R, 0, o3);
    submit(e);
    hr_swiglu(ref, x, u, N * R);
    get(e, 0, got, N * R);
    CHECK_EQ(n_diff(got, ref, N * R), 0);
    /* softmax over rows of odd length */
    put(e, 0, x, N * R);
    begin(e);
    hr_vk_softmax(e->vk, e->set, N, R, 0, N);
    submit(e);
    memcpy(ref, x, (size_t)N * R * 4);
    for (int r = 0; r < R; r++)
        hr_softmax(ref + r * N, N);
    get(e, 0, got, N * R);
    CHECK_EQ(n_diff(got, ref, N * R), 0);
    printf("rmsnorm, add, swiglu, softmax, rows of %d in [-%g, %g): checked\n", N, scale, scale);
    free(x), free(g), free(ref), free(got), free(u);
}

static void test_elementwise(hr_env *e) {
    test_elementwise_n(e, 37, 2.0f);
    test_elementwise_n(e, 4099, 100.0f);
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
        CHECK_EQ(n_diff(got, ref, T * H * D), 0);
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
    fill(k, (size_t)n_all * KD, 1.0f);
    fill(v, (size_t)n_all * KD, 1.0f);
    fill(q, (size_t)n_tok * QD, 1.5f);
    attn_reference(n_head, n_kv, hd, n_ctx, pos0, n_tok, k, v, q, kc, vt, ref);
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
    size_t nd = n_diff(got, ref, (size_t)n_tok * QD);
    printf("attention heads %d/%d dim %d pos %d+%d: %zu values differ\n", n_head, n_kv, hd, pos0,
           n_tok, nd);
    CHECK_EQ(nd, 0);
    /* the cache holds what the CPU rounds to f16 */
    uint16_t *dk = malloc((size_t)n_all * KD * 2);
    CHECK_EQ(hr_vk_read(e->vk, e->kv, 0, dk, (size_t)n_all * KD * 2, e->err), 0);
    CHECK_EQ(memcmp(dk, kc, (size_t)n_all * KD * 2), 0);
    free(dk);
    free(k), free(v), free(q), free(ref), free(got), free(kc), free(vt);
}

static void test_attention(hr_env *e) {
    test_attention_case(e, 4, 2, 8, 16, 0, 1);    /* first token */
    test_attention_case(e, 4, 2, 8, 16, 0, 5);    /* prefill, causal */
    test_attention_case(e, 8, 2, 64, 100, 70, 3); /* positions beyond a workgroup */
    test_attention_case(e, 6, 6, 34, 40, 11, 1);  /* no grouping, odd head count */
}

/* ---- the forward pass: every shared fixture with all layers on the GPU,
 * and split windows, against llama.cpp's logits and the CPU path ---- */

/* Teacher-forced logits of ids with the window's first n_gpu layers on vk
 * (in prefill chunks of 8), then n_greedy greedy tokens one at a time. */
static int run_model(const hr_model *m, hr_vk *vk, int n_gpu, const int32_t *ids, int n, float *lg,
                     int32_t *greedy, int n_greedy) {
    char err[HR_ERR_LEN] = "";
    hr_ctx *c = NULL;
    int rc = ctx_create(&c, m, vk, n_gpu, err);
    if (rc == 0)
        rc = hr_ctx_eval(c, ids, n, 0, lg, true, err);
    int nv = hr_model_hparams(m)->n_vocab;
    float *last = malloc((size_t)nv * sizeof(float));
    if (rc == 0 && n_greedy > 0)
        memcpy(last, lg + (size_t)(n - 1) * nv, (size_t)nv * sizeof(float));
    for (int i = 0; rc == 0 && i < n_greedy; i++) {
        greedy[i] = hr_argmax(last, nv);
        rc = hr_ctx_eval(c, &greedy[i], 1, n + i, last, false, err);
    }
    if (rc)
        fprintf(stderr, "n_gpu %d: %s\n", n_gpu, err);
    free(last);
    hr_ctx_destroy(c);
    return rc;
}

static void test_fixture(hr_vk *vk, const hr_fixture *fx) {
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    int32_t ids[64];
    int n = 0;
    float *ref = NULL;
    if (!open_fixture(fx->name, &g, &m, ids, 64, &n, &ref))
        return;
    const hr_hparams *hp = hr_model_hparams(m);
    int nv = hp->n_vocab, L = hp->n_layer, ng = 32;
    size_t sz = (size_t)n * nv * sizeof(float);
    float *cpu = malloc(sz), *gpu = malloc(sz), *split = malloc(sz);
    int32_t gc[32], gg[32], gs[32];
    CHECK_EQ(run_model(m, NULL, 0, ids, n, cpu, gc, ng), 0);
    CHECK_EQ(run_model(m, vk, L, ids, n, gpu, gg, ng), 0);
    const hr_logits_cmp c_cpu = hr_compare_logits(cpu, ref, n, nv);
    const hr_logits_cmp c_gpu = hr_compare_logits(gpu, ref, n, nv);
    const hr_logits_cmp c_gc = hr_compare_logits(gpu, cpu, n, nv);
    const double e_cpu = c_cpu.rel, e_gpu = c_gpu.rel, e_gc = c_gc.rel;
    const int agree_cpu = c_cpu.agree, agree_gpu = c_gpu.agree;
    printf("%-20s all %d layers on GPU: rel err %.3e vs llama.cpp (CPU %.3e), %.3e vs CPU; "
           "argmax agree %d/%d (CPU %d/%d)\n",
           fx->name, L, e_gpu, e_cpu, e_gc, agree_gpu, n, agree_cpu, n);
    /* the CPU path's bounds to llama.cpp (test_model.c), every argmax */
    CHECK(e_gpu <= (fx->quantized ? 1e-2 : 1e-4));
    CHECK_EQ(agree_gpu, n);
    /* and the CPU path's logits and greedy ids, bit for bit: the kernels
     * round every step as the CPU does (gpu/shaders/exact.glsl) */
    CHECK_EQ(memcmp(gpu, cpu, sz), 0);
    CHECK_EQ(memcmp(gg, gc, sizeof gc), 0);
    /* splits: the first a layers on the GPU, the rest on the CPU */
    for (int a = 1; a<L; a += L> 2 ? L - 2 : 1) {
        CHECK_EQ(run_model(m, vk, a, ids, n, split, gs, ng), 0);
        const double e_s = hr_compare_logits(split, ref, n, nv).rel;
        const double e_sc = hr_compare_logits(split, cpu, n, nv).rel;
        printf("%-20s %d of %d layers on GPU: rel err %.3e vs llama.cpp, %.3e vs CPU\n", fx->name,
               a, L, e_s, e_sc);
        CHECK(e_s <= (fx->quantized ? 1e-2 : 1e-4));
        CHECK_EQ(memcmp(split, cpu, sz), 0);
        CHECK_EQ(memcmp(gs, gc, sizeof gc), 0);
    }
    free(cpu), free(gpu), free(split), free(ref);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* A step over several sequences with GPU layers: each sequence's logits
 * are bit-identical to the same runs on a one-sequence GPU context, and to
 * the CPU's batched step. */
static void test_batch(hr_vk *vk, const char *name, int n_gpu) {
    char path[512], rel[128], err[HR_ERR_LEN] = "";
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (hr_gguf_open(&g, hr_shared_path(rel, path, sizeof path), err) ||
        hr_model_load(&m, g, err)) {
        CHECK(false);
        hr_gguf_close(g);
        return;
    }
    int nv = hr_model_hparams(m)->n_vocab;
    /* step 1: sequence 0 prompt of 5, sequence 1 prompt of 3; step 2: one
     * decode row each, then a row of sequence 1 alone */
    const int32_t p0[7] = {1, 450, 4996, 17354, 1701, 29889, 13};
    const int32_t p1[5] = {1, 15043, 3186, 3444, 920};
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 32;
    cp.n_batch = 8;
    cp.n_seq = 2;
    hr_ctx *cb = NULL, *cc = NULL, *c0 = NULL, *c1 = NULL;
    CHECK_EQ(hr_ctx_create(&cc, m, &cp, err), 0); /* CPU, batched */
    cp.vk = vk;
    cp.n_gpu = n_gpu;
    CHECK_EQ(hr_ctx_create(&cb, m, &cp, err), 0); /* GPU, batched */
    cp.n_seq = 1;
    CHECK_EQ(hr_ctx_create(&c0, m, &cp, err), 0);
    CHECK_EQ(hr_ctx_create(&c1, m, &cp, err), 0);
    if (!cb || !cc || !c0 || !c1)
        goto done;
    float *lb = malloc(2 * (size_t)nv * 4), *lc = malloc(2 * (size_t)nv * 4);
    float *l0 = malloc((size_t)nv * 4), *l1 = malloc((size_t)nv * 4);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(hr_ctx_seq_add(cb, i), i);
        CHECK_EQ(hr_ctx_seq_add(cc, i), i);
    }
    int32_t ids[8];
    hr_seq_pos rows[8];
    int n = 0, nl = 0;
    for (int i = 0; i < 5; i++, n++)
        ids[n] = p0[i], rows[n] = (hr_seq_pos){.seq = 0, .pos = i};
    for (int i = 0; i < 3; i++, n++)
        ids[n] = p1[i], rows[n] = (hr_seq_pos){.seq = 1, .pos = i};
    CHECK_EQ(hr_ctx_eval_batch(cb, ids, rows, n, lb, &nl, err), 0);
    CHECK_EQ(hr_ctx_eval_batch(cc, ids, rows, n, lc, &nl, err), 0);
    CHECK_EQ(memcmp(lb, lc, 2 * (size_t)nv * 4), 0); /* GPU batched = CPU batched, bits */
    CHECK_EQ(hr_ctx_eval(c0, p0, 5, 0, l0, false, err), 0);
    CHECK_EQ(hr_ctx_eval(c1, p1, 3, 0, l1, false, err), 0);
    CHECK_EQ(memcmp(lb, l0, (size_t)nv * 4), 0);
    CHECK_EQ(memcmp(lb + nv, l1, (size_t)nv * 4), 0);
    const double e1 = hr_compare_logits(lb, lc, 2, nv).rel;
    ids[0] = p0[5], rows[0] = (hr_seq_pos){.seq = 0, .pos = 5};
    ids[1] = p1[3], rows[1] = (hr_seq_pos){.seq = 1, .pos = 3};
    CHECK_EQ(hr_ctx_eval_batch(cb, ids, rows, 2, lb, &nl, err), 0);
    CHECK_EQ(hr_ctx_eval_batch(cc, ids, rows, 2, lc, &nl, err), 0);
    CHECK_EQ(memcmp(lb, lc, 2 * (size_t)nv * 4), 0);
    CHECK_EQ(hr_ctx_eval(c0, &p0[5], 1, 5, l0, false, err), 0);
    CHECK_EQ(hr_ctx_eval(c1, &p1[3], 1, 3, l1, false, err), 0);
    CHECK_EQ(memcmp(lb, l0, (size_t)nv * 4), 0);
    CHECK_EQ(memcmp(lb + nv, l1, (size_t)nv * 4), 0);
    const double e2 = hr_compare_logits(lb, lc, 2, nv).rel;
    ids[0] = p1[4], rows[0] = (hr_seq_pos){.seq = 1, .pos = 4};
    CHECK_EQ(hr_ctx_eval_batch(cb, ids, rows, 1, lb, &nl, err), 0);
    CHECK_EQ(hr_ctx_eval(c1, &p1[4], 1, 4, l1, false, err), 0);
    CHECK_EQ(memcmp(lb, l1, (size_t)nv * 4), 0);
    printf("%-20s batched step, %d GPU layers: as one sequence alone; rel err %.3e, %.3e vs "
           "the CPU's batched step\n",
           name, n_gpu, e1, e2);
    CHECK(e1 == 0.0 && e2 == 0.0); /* (and bit for bit, above) */
    free(lb), free(lc), free(l0), free(l1);
done:
    hr_ctx_destroy(cb);
    hr_ctx_destroy(cc);
    hr_ctx_destroy(c0);
    hr_ctx_destroy(c1);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* What a context refuses: more GPU layers than its window, thread groups. */
static void test_ctx_refusals(hr_vk *vk) {
    char err[HR_ERR_LEN] = "";
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (!open_model("tiny-llama-f32", &g, &m))
        return;
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 32;
    cp.vk = vk;
    cp.n_gpu = 3;
    cp.layer_end = 2;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), HR_EINVAL);
    cp.n_gpu = 1; /* a window [1, 2) with its layer on the GPU */
    cp.layer_begin = 1;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    CHECK(hr_ctx_gpu_memory(c) > 0);
    hr_ctx_destroy(c);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* on_layer of a window whose first layers run on the GPU: every model
 * layer of the window once, in order, for a step of one sequence and for
 * a step of two (a streamer releases and reads ahead by these indices). */
typedef struct {
    int got[16];
    int n;
} layer_log;

static void log_layer(void *ud, int layer) {
    layer_log *l = ud;
    if (l->n < 16)
        l->got[l->n] = layer;
    l->n++;
}

static void check_layer_log(const layer_log *l, int begin, int end, const char *what) {
    bool in_order = l->n == end - begin;
    for (int i = 0; in_order && i < l->n; i++)
        in_order = l->got[i] == begin + i;
    printf("on_layer, %s:", what);
    for (int i = 0; i < l->n && i < 16; i++)
        printf(" %d", l->got[i]);
    printf(" (window [%d, %d))\n", begin, end);
    CHECK(in_order);
}

static void test_layer_index(hr_vk *vk) {
    char err[HR_ERR_LEN] = "";
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    if (!open_model("tiny-llama-f32", &g, &m))
        return;
    const hr_hparams *hp = hr_model_hparams(m);
    CHECK(hp->n_layer >= 2);
    int begin = hp->n_layer >= 3 ? 1 : 0; /* the first layer on the GPU, the others on the CPU */
    layer_log log = {0};
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 32;
    cp.n_batch = 8;
    cp.n_seq = 2;
    cp.layer_begin = begin;
    cp.vk = vk;
    cp.n_gpu = 1;
    cp.on_layer = log_layer;
    cp.on_layer_ud = &log;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    float *h = calloc(8 * (size_t)hp->n_embd, sizeof(float));
    if (c && h) {
        CHECK_EQ(hr_ctx_seq_add(c, 0), 0);
        CHECK_EQ(hr_ctx_seq_add(c, 1), 1);
        const int32_t ids[4] = {1, 450, 1, 15043};
        CHECK_EQ(hr_model_embed(m, ids, 4, h, err), 0);
        hr_seq_pos one[2] = {{.seq = 0, .pos = 0}, {.seq = 0, .pos = 1}};
        CHECK_EQ(hr_ctx_step(c, h, one, 2, err), 0);
        check_layer_log(&log, begin, hp->n_layer, "a step of one sequence");
        log.n = 0;
        hr_seq_pos two[4] = {
            {.seq = 0, .pos = 2}, {.seq = 1, .pos = 0}, {.seq = 1, .pos = 1}, {.seq = 1, .pos = 2}};
        CHECK_EQ(hr_ctx_step(c, h, two, 4, err), 0);
        check_layer_log(&log, begin, hp->n_layer, "a step of two sequences");
        log.n = 0;
        CHECK_EQ(hr_ctx_layers(c, h, 1, 3, err), 0);
        check_layer_log(&log, begin, hp->n_layer, "slot 0 alone (hr_ctx_layers)");
    }
    free(h);
    hr_ctx_destroy(c);
    hr_model_free(m);
    hr_gguf_close(g);
}

/* A dense neighbour of llama generated by mkmodel (shape): its GPU layers
 * compute the CPU's bits (phi3: its fused tensors upload as their parts'
 * views), or are refused. */
static void test_dense_neighbour(hr_vk *vk, const char *shape, bool refused) {
    char path[128], err[HR_ERR_LEN] = "";
    snprintf(path, sizeof path, "/tmp/hearth-vk-%d-%s.gguf", (int)getpid(), shape);
    hr_mkmodel_params mp = hr_mkmodel_params_default();
    CHECK_EQ(hr_mkmodel_shape(&mp, shape), 0);
    mp.ftype = "q8_0";
    mp.n_vocab = 512;
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    CHECK_EQ(hr_mkmodel_write(&mp, path, NULL, NULL, err), 0);
    CHECK_EQ(hr_gguf_open(&g, path, err), 0);
    CHECK_EQ(g ? hr_model_load(&m, g, err) : -1, 0);
    if (m && !refused) {
        const int32_t ids[10] = {1, 40, 300, 12, 9, 77, 401, 5, 66, 201};
        int nv = hr_model_hparams(m)->n_vocab, L = hr_model_hparams(m)->n_layer;
        size_t sz = (size_t)10 * nv * sizeof(float);
        float *cpu = malloc(sz), *gpu = malloc(sz);
        int32_t gc[8], gg[8];
        CHECK_EQ(run_model(m, NULL, 0, ids, 10, cpu, gc, 8), 0);
        CHECK_EQ(run_model(m, vk, L, ids, 10, gpu, gg, 8), 0);
        bool same = memcmp(gpu, cpu, sz) == 0 && memcmp(gg, gc, sizeof gc) == 0;
        printf("%-20s all %d layers on GPU: logits and greedy ids %s the CPU's\n", shape, L,
               same ? "bit-identical to" : "differ from");
        CHECK(same);
        free(cpu), free(gpu);
    } else if (m) {
        hr_ctx_params cp = hr_ctx_params_default();
        cp.n_ctx = 32;
        cp.vk = vk;
        cp.n_gpu = 1;
        hr_ctx *c = NULL;
        CHECK_EQ(hr_ctx_create(&c, m, &cp, err), HR_EUNSUPPORTED);
        printf("%-20s GPU layers refused: %s\n", shape, err);
        CHECK(strstr(err, "--gpu-layers 0") != NULL);
    }
    hr_model_free(m);
    hr_gguf_close(g);
    unlink(path);
}

/* ---- profiler and planner: the device measured, its layers planned ---- */

/* Plans model m on one device d (the head); returns the plan's GPU layers. */
static int plan_gpu_layers(const hr_sched_model *sm, const hr_sched_device *d, double *lat) {
    hr_sched_plan plan;
    char err[HR_ERR_LEN] = "";
    hr_sched_opts so = hr_sched_opts_default();
    int rc = hr_sched_solve(sm, d, 1, &so, &plan, err);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "plan: %s\n", err);
        return -1;
    }
    *lat = plan.latency_ms;
    return plan.dev[0].n_gpu;
}

static void test_planner(int vk_index) {
    char path[512], err[HR_ERR_LEN] = "";
    hr_gguf *g = NULL;
    hr_model *m = NULL;
    hr_prof_model pm = {0};
    if (hr_gguf_open(&g, hr_shared_path("models/small-llama-q4_k_m.gguf", path, sizeof path),
                     err) ||
        hr_model_load(&m, g, err) || hr_prof_model_build(&pm, m, g, err)) {
        fprintf(stderr, "planner: %s\n", err);
        CHECK(false);
        hr_model_free(m);
        hr_gguf_close(g);
        return;
    }
    const hr_hparams *hp = hr_model_hparams(m);
    hr_prof_params pp = hr_prof_params_default();
    pp.quick = true;
    pp.use_cache = false;
    char spec[16];
    snprintf(spec, sizeof spec, "%d", vk_index);
    pp.gpu = spec;
    pp.n_types = hr_prof_model_types(&pm, pp.types, HR_PROF_MAX_TYPES);
    pp.threads[0] = 1;
    pp.n_threads = 1;
    pp.row_len = hp->n_embd;
    pp.ffn_len = hp->n_ff;
    hr_prof_device *d = calloc(1, sizeof *d);
    CHECK_EQ(hr_prof_device_measure(d, &pp, err), 0);
    const hr_prof_gpu *gp = hr_prof_device_gpu(d);
    CHECK(gp != NULL);
    if (!gp) {
        fprintf(stderr, "planner: no GPU rates (%s)\n", err);
        goto done;
    }
    CHECK_EQ(gp->n_rates, pp.n_types); /* every weight type of the model */
    CHECK(gp->vram_bytes > 0 && gp->h2d_gbs > 0 && gp->d2h_gbs > 0 && gp->submit_us > 0);
    for (int i = 0; i < gp->n_rates; i++)
        CHECK(gp->rates[i].matvec_gbs > 0 && gp->rates[i].matmat_gflops > 0);
    hr_sched_model sm;
    hr_sched_device sd;
    hr_prof_sched_params sp = hr_prof_sched_params_default();
    sp.is_head = true;
    sp.n_ctx = 256;
    CHECK_EQ(hr_prof_to_sched_model(&pm, sp.n_ctx, &sm, err), 0);
    CHECK_EQ(hr_prof_to_sched_device(d, &pm, NULL, &sp, &sd, err), 0);
    CHECK(sd.vram_bytes > 0 && sd.t_layer_gpu_ms > 0);
    double lat = 0, cpu_ms = sd.decode_ms[0];
    int ng = plan_gpu_layers(&sm, &sd, &lat);
    printf("planner: %s %.3f ms per GPU layer, CPU %.3f ms per layer: %d of %d layers on the "
           "GPU (%.3f ms per token)\n",
           gp->name, sd.t_layer_gpu_ms, cpu_ms, ng, hp->n_layer, lat);
    if (sd.t_layer_gpu_ms > cpu_ms)
        CHECK_EQ(ng, 0); /* a slower device (lavapipe here) gets no layers */
    else
        CHECK(ng > 0);
    /* The same device made 100 times faster than the CPU takes every layer,
     * and only as many as its memory holds when that is short. */
    hr_sched_device fast = sd;
    fast.t_layer_gpu_ms = cpu_ms / 100;
    CHECK_EQ(plan_gpu_layers(&sm, &fast, &lat), hp->n_layer);
    fast.vram_bytes = 2.5 * (sm.layer_bytes + sm.kv_bytes_per_layer);
    CHECK_EQ(plan_gpu_layers(&sm, &fast, &lat), 2);

    /* prediction check: a decode step through every layer on the device
     * against hr_prof_gpu_window_ms */
    hr_vk *vk = NULL;
    CHECK_EQ(hr_vk_create(&vk, gp->index, err), 0);
    hr_ctx_params cp = hr_ctx_params_default();
    cp.n_ctx = 64;
    cp.n_batch = 1;
    cp.vk = vk;
    cp.n_gpu = hp->n_layer;
    hr_ctx *c = NULL;
    CHECK_EQ(hr_ctx_create(&c, m, &cp, err), 0);
    float *h = calloc((size_t)hp->n_embd, sizeof(float));
    int32_t id = 1;
    double best = 1e30;
    for (int pos = 0; c && pos < 8; pos++) {
        CHECK_EQ(hr_model_embed(m, &id, 1, h, err), 0);
        double t0 = hr_now_s();
        CHECK_EQ(hr_ctx_layers(c, h, 1, pos, err), 0);
        double ms = (hr_now_s() - t0) * 1e3;
        best = ms < best ? ms : best;
    }
    double pred = hr_prof_gpu_window_ms(gp, &pm, 0, hp->n_layer);
    printf("planner: %d GPU layers: measured %.3f ms per decode step, predicted %.3f ms\n",
           hp->n_layer, best, pred);
    CHECK(pred > 0 && best < 10 * pred && pred < 10 * best); /* a loose bound: load varies */
    free(h);
    hr_ctx_destroy(c);
    hr_vk_destroy(vk);
done:
    free(d);
    hr_prof_model_clear(&pm);
    hr_model_free(m);
    hr_gguf_close(g);
}

int main(void) {
    hr_env e = {0};
    /* the GPU's exact kernels equal the CPU's canonical order: compare
     * with the CPU in exact mode */
    hr_kernels_set_exact(true);
    if (!hr_vk_built()) {
        hr_check_skip("built without Vulkan");
        return hr_check_finish("test_vk");
    }
    int idx = -1;
    if (!env_start(&e, &idx, W_BYTES, true)) /* the exact kernels */
        return hr_check_finish("test_vk");
    { /* 2^-140 / 2 is a subnormal: a device that flushes returns 0 */
        float a = 0x1p-140f, b = 2.0f, c = 0.0f, q = 1.0f;
        probe(&e, 1, &a, &b, &c, &q, 1);
        g_flush = q != 0x1p-141f;
    }
    printf("device %d: %s (%s)%s, fma %s\n", idx, hr_vk_info(e.vk)->name,
           hr_vk_type_name(hr_vk_info(e.vk)->type),
           hr_vk_uses_int_dot(e.vk) ? ", packed int8 dot products" : "",
           hr_vk_uses_native_fma(e.vk) ? "native" : "from 64-bit floats");
    test_exact(&e);
    test_elementwise(&e);
    test_rope(&e);
    test_quantize(&e);
    test_matmul(&e);
    if (!hr_vk_uses_int_dot(e.vk))
        hr_check_skip("vk: packed int8 dot product kernels (the device offers none)");
    if (!hr_vk_uses_native_fma(e.vk))
        hr_check_skip("vk: kernels with the device's own fma (not used on this device: fma from "
                      "64-bit floats only)");
    if (hr_vk_uses_int_dot(e.vk)) { /* the other integer path of the same kernels */
        hr_env e2 = {0};
        if (env_open_with(&e2, idx, "HR_VK_INT_DOT", "0")) {
            CHECK(!hr_vk_uses_int_dot(e2.vk));
            printf("without packed dot products:\n");
            test_matmul(&e2);
        }
        env_close(&e2);
    }
    if (hr_vk_uses_native_fma(e.vk)) { /* the emulated fma as well */
        hr_env e3 = {0};
        if (env_open_with(&e3, idx, "HR_VK_FMA", "emulate")) {
            CHECK(!hr_vk_uses_native_fma(e3.vk));
            printf("with the emulated fma:\n");
            test_exact(&e3);
            test_matmul(&e3);
        }
        env_close(&e3);
    }
    test_attention(&e);
    test_ctx_refusals(e.vk);
    test_layer_index(e.vk);
    test_batch(e.vk, "tiny-llama-f32", 2);
    test_batch(e.vk, "small-qwen2-f16", 1);
    test_dense_neighbour(e.vk, "phi3-tiny", false);
    test_dense_neighbour(e.vk, "gemma3-tiny", true);
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        test_fixture(e.vk, &fixtures[i]);
    test_planner(idx);
    env_close(&e);
    printf("subnormal floats: %s (%zu values compared as flushed)\n",
           g_flush ? "flushed by this device" : "kept", g_flushed);
    return hr_check_finish("test_vk");
}
