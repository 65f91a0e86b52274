/* test_ops.c - thread pool, element-wise ops, RoPE, attention and the
 * threaded matmul against straightforward reference computations. */
#include "tests/check.h"
#include "tests/tables.h"

#include "kernels/ops.h"
#include "kernels/pool.h"
#include "kernels/quant.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static _Atomic long pool_sum;
static void pool_fn(void *ctx, int ith, int nth) {
    long *v = ctx;
    long b, e;
    hr_split_range(1000, ith, nth, 1, &b, &e);
    long s = 0;
    for (long i = b; i < e; i++)
        s += v[i];
    atomic_fetch_add(&pool_sum, s);
}

/* Every part of a job runs exactly once, whoever runs it: the caller
 * takes the parts of workers that have not started (workers that lost
 * their core), under two busy threads competing for the machine's cores. */
static _Atomic int part_runs[8], part_nth;
static void part_fn(void *ctx, int ith, int nth) {
    (void)ctx;
    atomic_store(&part_nth, nth); /* fewer than asked when the pool stepped back */
    atomic_fetch_add(&part_runs[ith], 1);
}

static _Atomic int spin_stop;
static void *spin_main(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load(&spin_stop))
        x++;
    return NULL;
}

static void test_pool_parts(void) {
    pthread_t spin[2];
    atomic_store(&spin_stop, 0);
    int n_spin = 0;
    for (int i = 0; i < 2; i++)
        n_spin += pthread_create(&spin[n_spin], NULL, spin_main, NULL) == 0;
    hr_pool *p = hr_pool_create(4);
    CHECK(p != NULL);
    int bad = 0, reps = 20000;
    for (int rep = 0; p && rep < reps && bad == 0; rep++) {
        int nth = 2 + rep % 3;
        for (int i = 0; i < 8; i++)
            atomic_store(&part_runs[i], 0);
        hr_pool_run_n(p, nth, part_fn, NULL);
        int ran = atomic_load(&part_nth);
        bad += ran != nth && ran != 1; /* all its threads, or the caller alone */
        for (int i = 0; i < 8; i++)
            bad += atomic_load(&part_runs[i]) != (i < ran ? 1 : 0);
    }
    CHECK_EQ(bad, 0);
    printf("pool: %d jobs of 2-4 parts beside %d busy threads, each part once; the pool stepped "
           "back %llu times\n",
           reps, n_spin, p ? hr_pool_backoffs(p) : 0ull);
    hr_pool_destroy(p);
    atomic_store(&spin_stop, 1);
    for (int i = 0; i < n_spin; i++)
        pthread_join(spin[i], NULL);
}

static void test_pool(void) {
    long v[1000], want = 0;
    for (int i = 0; i < 1000; i++) {
        v[i] = i * 7 % 13;
        want += v[i];
    }
    for (int nt = 1; nt <= 4; nt++) {
        hr_pool *p = hr_pool_create(nt);
        CHECK(p != NULL);
        CHECK_EQ(hr_pool_size(p), nt);
        for (int rep = 0; rep < 200; rep++) {
            atomic_store(&pool_sum, 0);
            hr_pool_run(p, pool_fn, v);
            if (atomic_load(&pool_sum) != want) {
                CHECK_EQ(atomic_load(&pool_sum), want);
                break;
            }
        }
        CHECK_EQ(atomic_load(&pool_sum), want);
        hr_pool_destroy(p);
    }
    hr_pool_destroy(NULL);
    /* split covers [0,n) exactly, aligned */
    for (int nth = 1; nth <= 5; nth++) {
        long prev = 0;
        for (int i = 0; i < nth; i++) {
            long b, e;
            hr_split_range(103, i, nth, 4, &b, &e);
            CHECK_EQ(b, prev);
            CHECK(b % 4 == 0 || b == 103);
            prev = e;
        }
        CHECK_EQ(prev, 103);
    }
}

static void test_elementwise(void) {
    float x[37], o[37], g[37];
    for (int i = 0; i < 37; i++) {
        x[i] = frand() * 3;
        g[i] = frand();
    }
    hr_rmsnorm(o, x, g, 37, 1e-5f);
    double ss = 0;
    for (int i = 0; i < 37; i++)
        ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / 37 + 1e-5);
    for (int i = 0; i < 37; i++)
        CHECK_NEAR(o[i], x[i] * sc * g[i], 1e-5);
    float s[5] = {1, 2, 3, 4, 1000};
    hr_softmax(s, 5);
    CHECK_NEAR(s[4], 1.0, 1e-6);
    float s2[3] = {0, 0, log(2.0)};
    hr_softmax(s2, 3);
    CHECK_NEAR(s2[0], 0.25, 1e-6);
    CHECK_NEAR(s2[2], 0.5, 1e-6);
    float gt[3] = {0, 1, -2}, up[3] = {5, 2, 3}, out[3];
    hr_swiglu(out, gt, up, 3);
    CHECK_NEAR(out[0], 0.0, 1e-7);
    CHECK_NEAR(out[1], 2.0 / (1 + exp(-1.0)), 1e-6);
    CHECK_NEAR(out[2], 3.0 * -2.0 / (1 + exp(2.0)), 1e-6);
    /* GeGLU: the tanh GELU, large inputs of either sign included */
    float gg[6] = {0, 1, -2, 0.3f, 12, -40}, ug[6] = {5, 2, 3, -1, 0.5f, 2}, og[6];
    hr_geglu(og, gg, ug, 6);
    for (int i = 0; i < 6; i++) {
        double v = gg[i],
               gl = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        CHECK_NEAR(og[i], gl * ug[i], 2e-6 * (1 + fabs(gl * ug[i])));
    }
}

/* bits equal, any NaN equal to any NaN */
static int same_float(float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    return ua == ub || (isnan(a) && isnan(b));
}

/* Every table's expf_n against the C library's expf: random bit patterns
 * (all exponents, subnormals, infinities, NaN), random values over the
 * range where expf is finite and non-zero, and the edges of its special
 * cases; odd lengths and in place. Then softmax and SwiGLU, which use it,
 * against the same formulas on the library's expf, bit for bit. */
static void test_expf(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    CHECK(x && y);
    if (!x || !y) {
        free(x);
        free(y);
        return;
    }
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        uint32_t u = (uint32_t)(st >> 17);
        if (i % 2)
            memcpy(&x[i], &u, 4);
        else
            x[i] = -110.0f + 205.0f * (float)(u >> 8) / 16777216.0f;
    }
    const float edge[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 88.0f, -88.0f,
                          nextafterf(88.0f, 0), nextafterf(-88.0f, 0), 0x1.62e42ep6f,
                          nextafterf(0x1.62e42ep6f, INFINITY), -0x1.9fe368p6f,
                          nextafterf(-0x1.9fe368p6f, 0), nextafterf(-0x1.9fe368p6f, -INFINITY),
                          -0x1.9d1d9ep6f, nextafterf(-0x1.9d1d9ep6f, 0), -87.5f, -87.0f, 1e-8f,
                          -1e-8f, 0x1p-149f, -0x1p-149f, 0x1p-126f, FLT_MAX, -FLT_MAX, 1.0f, -1.0f,
                          /* the two floats where an unfused x * 32/ln2 - k rounds differently */
                          0x1.04845ep+5f, -0x1.f8cbb2p+5f};
    const int ne = (int)(sizeof edge / sizeof edge[0]);
    memcpy(x, edge, sizeof edge);
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_kernels *k = hr_kernels_for_isa((hr_isa)isa);
        if (!k)
            continue;
        long bad = 0, total = N;
        k->expf_n(x, y, N);
        for (int i = 0; i < N; i++)
            if (!same_float(y[i], expf(x[i])))
                bad++;
        /* odd lengths over the edges, in place */
        for (int n = 1; n <= ne; n += 6) {
            float v[64];
            memcpy(v, edge, (size_t)n * sizeof(float));
            k->expf_n(v, v, n);
            total += n;
            for (int i = 0; i < n; i++)
                if (!same_float(v[i], expf(edge[i])))
                    bad++;
        }
        printf("expf_n (%s): %ld of %ld differ from expf\n", hr_isa_name(k->isa), bad, total);
        CHECK_EQ(bad, 0);
    }
    /* softmax and SwiGLU on the best table against the library's expf */
    const int n = 1000;
    float *sm = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
    float *g = malloc(n * sizeof(float)), *up = malloc(n * sizeof(float));
    CHECK(sm && ref && g && up);
    if (sm && ref && g && up) {
        for (int i = 0; i < n; i++) {
            sm[i] = frand() * 40.0f;
            g[i] = frand() * 30.0f;
            up[i] = frand();
        }
        float mx = -INFINITY;
        for (int i = 0; i < n; i++)
            mx = sm[i] > mx ? sm[i] : mx;
        double sum = 0;
        for (int i = 0; i < n; i++) {
            ref[i] = expf(sm[i] - mx);
            sum += ref[i];
        }
        const float inv = (float)(1.0 / sum);
        for (int i = 0; i < n; i++)
            ref[i] *= inv;
        hr_softmax(sm, n);
        CHECK_EQ(memcmp(sm, ref, n * sizeof(float)), 0);
        for (int i = 0; i < n; i++) {
            const float a = g[i];
            ref[i] = a / (1.0f + expf(-a)) * up[i];
        }
        hr_swiglu(g, g, up, n); /* in place, as the model calls it */
        CHECK_EQ(memcmp(g, ref, n * sizeof(float)), 0);
    }
    free(sm);
    free(ref);
    free(g);
    free(up);
    free(x);
    free(y);
}

static void test_rope(void) {
    enum { HD = 16, NH = 3 };
    float x[NH * HD], y[NH * HD];
    for (int i = 0; i < NH * HD; i++)
        x[i] = y[i] = frand();
    float ff[HD / 2];
    for (int i = 0; i < HD / 2; i++)
        ff[i] = 1.0f + i * 0.5f;
    for (int neox = 0; neox < 2; neox++) {
        for (int use_ff = 0; use_ff < 3; use_ff++) { /* 2: linear scaling by 1/8 */
            memcpy(y, x, sizeof x);
            hr_rope_params rp = {.n_rot = HD,
                                 .freq_base = 10000.0f,
                                 .neox = neox,
                                 .freq_factors = use_ff == 1 ? ff : NULL,
                                 .freq_scale = use_ff == 2 ? 0.125f : 0.0f};
            int pos = 7;
            hr_rope(y, NH, HD, pos, &rp);
            for (int h = 0; h < NH; h++) {
                for (int i = 0; i < HD / 2; i++) {
                    double th = pos * pow(10000.0, -2.0 * i / HD) / (use_ff == 1 ? ff[i] : 1.0) *
                                (use_ff == 2 ? 0.125 : 1.0);
                    int i0 = neox ? i : 2 * i, i1 = neox ? i + HD / 2 : 2 * i + 1;
                    double a = x[h * HD + i0], b = x[h * HD + i1];
                    CHECK_NEAR(y[h * HD + i0], a * cos(th) - b * sin(th), 1e-4);
                    CHECK_NEAR(y[h * HD + i1], a * sin(th) + b * cos(th), 1e-4);
                }
            }
        }
    }
    /* position 0 is the identity */
    memcpy(y, x, sizeof x);
    hr_rope_params rp0 = {.n_rot = HD, .freq_base = 10000.0f};
    hr_rope(y, NH, HD, 0, &rp0);
    CHECK(memcmp(x, y, sizeof x) == 0);
}

static void test_attention(void) {
    enum { H = 4, KV = 2, D = 8, CTX = 16, NT = 3, POS0 = 5 };
    uint16_t k[CTX * KV * D], vt[KV * D * CTX];
    float kf[CTX][KV * D], vf[CTX][KV * D];
    for (int p = 0; p < CTX; p++)
        for (int i = 0; i < KV * D; i++) {
            k[p * KV * D + i] = hr_fp32_to_fp16(frand());
            vt[i * CTX + p] = hr_fp32_to_fp16(frand());
            kf[p][i] = hr_fp16_to_fp32(k[p * KV * D + i]);
            vf[p][i] = hr_fp16_to_fp32(vt[i * CTX + p]);
        }
    float q[NT * H * D], out[NT * H * D];
    for (int i = 0; i < NT * H * D; i++)
        q[i] = frand();
    hr_pool *pool = hr_pool_create(2);
    float *scratch = malloc(hr_attn_scratch_floats(2, H, KV, D, CTX) * sizeof(float));
    CHECK(scratch);
    /* every earlier position, then a sliding window of 3 (token t sees
     * POS0+t-2..POS0+t) with a score scale of its own */
    for (int win = 0; win <= 3; win += 3) {
        hr_attn_args a = {.n_head = H,
                          .n_kv = KV,
                          .head_dim = D,
                          .n_ctx = CTX,
                          .k = k,
                          .vt = vt,
                          .scratch = scratch,
                          .scale = win ? 0.3f : 0.0f,
                          .window = win};
        hr_attention(pool, &a, q, NT, POS0, out);
        for (int t = 0; t < NT; t++) {
            for (int h = 0; h < H; h++) {
                int kvh = h / (H / KV), p1 = POS0 + t + 1, p0 = win ? p1 - win : 0;
                double sc[CTX], mx = -1e30, sum = 0;
                for (int p = p0; p < p1; p++) {
                    double d = 0;
                    for (int i = 0; i < D; i++)
                        d += hr_fp16_to_fp32(hr_fp32_to_fp16(q[(t * H + h) * D + i])) *
                             kf[p][kvh * D + i];
                    sc[p] = d * (win ? 0.3 : 1.0 / sqrt((double)D));
                    mx = fmax(mx, sc[p]);
                }
                for (int p = p0; p < p1; p++)
                    sum += (sc[p] = exp(sc[p] - mx));
                for (int i = 0; i < D; i++) {
                    double o = 0;
                    for (int p = p0; p < p1; p++)
                        o += sc[p] / sum * vf[p][kvh * D + i];
                    CHECK_NEAR(out[(t * H + h) * D + i], o, 1e-5);
                }
            }
        }
    }
    hr_pool_destroy(pool);
    free(scratch);
}

/* Query heads that share a KV head go through the dot products together
 * (several per call, fewer when a token alone must feed many threads):
 * every head's output equals the same head computed alone with the best
 * table's vec_dot, row by row, bit for bit, for any grouping. */
static void test_attention_groups(void) {
    enum { H = 20, KV = 2, D = 64, CTX = 80, NT = 4, POS0 = 61 };
    const int hpk = H / KV;
    const hr_kernels *kt = hr_kernels_best();
    uint16_t *k = malloc(sizeof(uint16_t) * CTX * KV * D);
    uint16_t *vt = malloc(sizeof(uint16_t) * KV * D * CTX);
    float *q = malloc(sizeof(float) * NT * H * D), *out = malloc(sizeof(float) * NT * H * D);
    float *sc = malloc(sizeof(float) * CTX), *qr = malloc(sizeof(float) * D);
    CHECK(k && vt && q && out && sc && qr);
    for (int i = 0; i < CTX * KV * D; i++) {
        k[i] = hr_fp32_to_fp16(frand());
        vt[i] = hr_fp32_to_fp16(frand());
    }
    for (int i = 0; i < NT * H * D; i++)
        q[i] = frand() * 2.0f;
    for (int nth = 1; nth <= 7; nth += 3)
        for (int nt = 1; nt <= NT; nt += NT - 1) {
            hr_pool *pool = hr_pool_create(nth);
            float *scratch = malloc(hr_attn_scratch_floats(nth, H, KV, D, CTX) * sizeof(float));
            CHECK(pool && scratch);
            hr_attn_args a = {.n_head = H,
                              .n_kv = KV,
                              .head_dim = D,
                              .n_ctx = CTX,
                              .k = k,
                              .vt = vt,
                              .scratch = scratch};
            hr_attention(pool, &a, q, nt, POS0, out);
            int bad = 0;
            for (int t = 0; t < nt; t++)
                for (int h = 0; h < H; h++) {
                    const int kvh = h / hpk, np = POS0 + t + 1;
                    for (int i = 0; i < D; i++)
                        qr[i] = hr_fp16_to_fp32(hr_fp32_to_fp16(q[(t * H + h) * D + i]));
                    for (int p = 0; p < np; p++)
                        sc[p] = kt->vec_dot[HR_TYPE_F16](D, k + (size_t)p * KV * D + kvh * D, qr) *
                                (1.0f / sqrtf((float)D));
                    hr_softmax(sc, np);
                    for (int i = 0; i < D; i++) {
                        float o =
                            kt->vec_dot[HR_TYPE_F16](np, vt + (size_t)(kvh * D + i) * CTX, sc);
                        bad += memcmp(&o, &out[(t * H + h) * D + i], sizeof o) != 0;
                    }
                }
            if (bad)
                fprintf(stderr, "attention groups: %d threads, %d tokens: %d values differ\n", nth,
                        nt, bad);
            CHECK_EQ(bad, 0);
            free(scratch);
            hr_pool_destroy(pool);
        }
    free(k);
    free(vt);
    free(q);
    free(out);
    free(sc);
    free(qr);
}

static void test_matmul_type(int type, hr_pool *pool) {
    const hr_type_traits *tt = hr_type_get(type);
    int64_t n_in = tt->block_elems >= 256 ? 512 : 96;
    int n_out = 37, n_tok = 5;
    size_t rb = hr_type_row_bytes(type, n_in);
    char *wq = malloc(rb * n_out);
    float *wf = malloc(sizeof(float) * n_in * n_out), *x = malloc(sizeof(float) * n_in * n_tok);
    for (int r = 0; r < n_out; r++) {
        for (int i = 0; i < n_in; i++)
            wf[r * n_in + i] = frand();
        hr_quantize_row(type, wf + r * n_in, wq + r * rb, n_in);
        hr_dequantize_row(type, wq + r * rb, wf + r * n_in, n_in);
    }
    for (int i = 0; i < n_in * n_tok; i++)
        x[i] = frand();
    hr_weight w = {.type = type, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = wq};
    const hr_weight *ws[2] = {&w, &w};
    float *y1 = malloc(sizeof(float) * n_out * n_tok), *y2 = malloc(sizeof(float) * n_out * n_tok);
    float *ys[2] = {y1, y2};
    void *wbuf = malloc(hr_matmul_wbuf_size(type, n_in, n_tok) + 1);
    for (int nt = 1; nt <= n_tok; nt += n_tok - 1) {
        hr_matmul(pool, 2, ws, ys, x, nt, wbuf);
        double worst = 0;
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < n_out; r++) {
                double ref = 0, mag = 0;
                for (int i = 0; i < n_in; i++) {
                    ref += (double)wf[r * n_in + i] * x[t * n_in + i];
                    mag += fabs((double)wf[r * n_in + i] * x[t * n_in + i]);
                }
                worst = fmax(worst, fabs(y1[t * n_out + r] - ref) / mag);
                CHECK(y1[t * n_out + r] == y2[t * n_out + r]);
            }
        /* activation quantization (8-bit) bounds the error relative to sum |w x| */
        if (worst > 1.5e-2)
            fprintf(stderr, "matmul %s n_tok %d: worst rel err %.3e\n", tt->name, nt, worst);
        CHECK(worst <= 1.5e-2);
    }
    free(wq);
    free(wf);
    free(x);
    free(y1);
    free(y2);
    free(wbuf);
}

/* every supported type of the traits table */
static void test_matmul(void) {
    hr_pool *pool = hr_pool_create(2);
    int n_types = 0;
    for (int t = 0; t < HR_TYPE_COUNT; t++) {
        if (hr_type_get(t) && hr_type_get(t)->supported) {
            test_matmul_type(t, pool);
            n_types++;
        }
    }
    CHECK(n_types > 0);
    hr_pool_destroy(pool);
}

int main(void) {
    test_pool();
    test_pool_parts();
    test_elementwise();
    test_expf();
    test_rope();
    test_attention();
    test_attention_groups();
    test_matmul();
    hr_skip_unrunnable_tables("ops kernels");
    return hr_check_finish("test_ops");
}
