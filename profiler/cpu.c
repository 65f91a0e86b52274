/* cpu.c - CPU side of the device profile, measured with hearth's own
 * kernels the way decode and prefill call them:
 *   - hr_matmul at n_tok = 1 over matrices of realistic size cycling through
 *     a buffer several times the L3 (so rows stream from DRAM as in decode),
 *     less the fixed per-call cost measured on an in-cache 64-row matrix;
 *   - hr_matmul at n_tok = 32 (prefill);
 *   - hr_attention at two head sizes, an empty pool run, the element-wise
 *     ops, streaming read bandwidth and KV-cache-sized memcpy.
 * Every figure is the median of several repetitions. */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "kernels/ops.h"
#include "kernels/pool.h"
#include "kernels/quant.h"
#include "profiler/membw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HR_CPU_MAT_BYTES (4u << 20) /* one test matrix, about a 7B layer's wk */
#define HR_CPU_SMALL_ROWS 64        /* in-cache matrix for the per-call cost */
#define HR_CPU_MM_TOK 32            /* prefill batch */
#define HR_CPU_MM_ROWS 256          /* rows of the prefill test matrix */
#define HR_CPU_MAX_REPS 16

static uint64_t hr_lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static float hr_frand(uint64_t *s) { return (float)((double)hr_lcg(s) / 9007199254740992.0) * 2.0f - 1.0f; }

static void hr_fill_f32(float *x, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++)
        x[i] = hr_frand(s);
}

static void hr_noop(void *ctx, int ith, int nth) {
    (void)ctx;
    (void)ith;
    (void)nth;
}

/* Work shared by the measurements of one thread count. */
typedef struct {
    hr_pool *pool;
    int nt;
    int64_t n_in;
    float *x;    /* [HR_CPU_MM_TOK][n_in] */
    float *y;    /* [HR_CPU_MM_TOK][max rows] */
    void *wbuf;  /* activation scratch */
} hr_cpu_run;

static double hr_time_calls(hr_cpu_run *r, const hr_weight *w, int n_tok, int calls) {
    const hr_weight *wp = w;
    float *yp = r->y;
    double t0 = hr_prof_now();
    for (int i = 0; i < calls; i++)
        hr_matmul(r->pool, 1, &wp, &yp, r->x, n_tok, r->wbuf);
    return (hr_prof_now() - t0) / calls;
}

/* Measures one (type, thread count) on the filled buffer. */
static void hr_measure_rate(hr_cpu_run *r, int type, const unsigned char *buf, size_t row_bytes,
                            int64_t rows, int n_mat, int reps, hr_prof_rate *out) {
    size_t mat_bytes = row_bytes * (size_t)rows;
    hr_weight w = {.type = type, .n_in = r->n_in, .n_out = rows, .row_bytes = row_bytes};
    const hr_weight *wp = &w;
    float *yp = r->y;
    double t[HR_CPU_MAX_REPS];
    /* decode: sweep every matrix once per repetition (first sweep warms up) */
    for (int rep = -1; rep < reps; rep++) {
        double t0 = hr_prof_now();
        for (int m = 0; m < n_mat; m++) {
            w.data = buf + (size_t)m * mat_bytes;
            hr_matmul(r->pool, 1, &wp, &yp, r->x, 1, r->wbuf);
        }
        if (rep >= 0)
            t[rep] = (hr_prof_now() - t0) / n_mat;
    }
    double t_big = hr_prof_median(t, reps);
    /* per-call cost: a 64-row matrix that stays in cache */
    hr_weight ws = w;
    ws.n_out = HR_CPU_SMALL_ROWS;
    ws.data = buf;
    hr_time_calls(r, &ws, 1, 20);
    for (int rep = 0; rep < reps; rep++)
        t[rep] = hr_time_calls(r, &ws, 1, 50);
    double t_small = hr_prof_median(t, reps);
    double t_stream = t_big - t_small;
    if (t_stream < 0.5 * t_big) /* noise: never credit more than half to the call */
        t_stream = 0.5 * t_big;
    out->type = type;
    out->n_threads = r->nt;
    out->matvec_gbs = (double)mat_bytes / t_stream / 1e9;
    out->matvec_call_us = (t_big - t_stream) * 1e6;
    /* prefill: n_tok = 32 on a 256-row matrix */
    hr_weight wm = w;
    wm.n_out = rows < HR_CPU_MM_ROWS ? rows : HR_CPU_MM_ROWS;
    wm.data = buf;
    hr_time_calls(r, &wm, HR_CPU_MM_TOK, 1);
    for (int rep = 0; rep < reps; rep++)
        t[rep] = hr_time_calls(r, &wm, HR_CPU_MM_TOK, 1);
    double t_mm = hr_prof_median(t, reps);
    out->matmat_gflops = 2.0 * (double)r->n_in * (double)wm.n_out * HR_CPU_MM_TOK / t_mm / 1e9;
}

/* Fills n_rows rows of `type` from a few quantized random seed rows. */
static int hr_fill_rows(int type, int64_t n_in, size_t row_bytes, unsigned char *dst,
                        size_t n_rows, uint64_t *rng) {
    enum { SEED = 16 };
    const hr_kernels *k = hr_kernels_best();
    unsigned char *seed = malloc(row_bytes * SEED);
    float *f = malloc((size_t)n_in * sizeof *f);
    if (!seed || !f) {
        free(seed);
        free(f);
        return HR_ENOMEM;
    }
    for (int i = 0; i < SEED; i++) {
        hr_fill_f32(f, (size_t)n_in, rng);
        if (type == HR_TYPE_F32)
            memcpy(seed + (size_t)i * row_bytes, f, row_bytes);
        else
            k->quant[type](f, seed + (size_t)i * row_bytes, n_in);
    }
    for (size_t r = 0; r < n_rows; r++)
        memcpy(dst + r * row_bytes, seed + (r % SEED) * row_bytes, row_bytes);
    free(seed);
    free(f);
    return 0;
}

/* hr_attention time per call at one head size, seconds. */
static double hr_time_attention(hr_pool *pool, int hd, int reps, uint64_t *rng) {
    enum { NH = 32, NKV = 8, NCTX = 512 };
    size_t kvn = (size_t)NCTX * NKV * (size_t)hd;
    uint16_t *k = malloc(kvn * 2), *vt = malloc(kvn * 2);
    float *q = malloc((size_t)NH * hd * sizeof *q), *out = malloc((size_t)NH * hd * sizeof *out);
    float *scratch = malloc((size_t)hr_pool_size(pool) * NCTX * sizeof *scratch);
    double res = -1.0;
    if (k && vt && q && out && scratch) {
        for (size_t i = 0; i < kvn; i++) {
            k[i] = hr_fp32_to_fp16(hr_frand(rng) * 0.5f);
            vt[i] = hr_fp32_to_fp16(hr_frand(rng) * 0.5f);
        }
        hr_fill_f32(q, (size_t)NH * hd, rng);
        hr_attn_args a = {.n_head = NH, .n_kv = NKV, .head_dim = hd, .n_ctx = NCTX, .k = k,
                          .vt = vt, .scratch = scratch};
        double t[HR_CPU_MAX_REPS];
        hr_attention(pool, &a, q, 1, NCTX - 1, out);
        for (int r = 0; r < reps; r++) {
            double t0 = hr_prof_now();
            for (int i = 0; i < 4; i++)
                hr_attention(pool, &a, q, 1, NCTX - 1, out);
            t[r] = (hr_prof_now() - t0) / 4;
        }
        res = hr_prof_median(t, reps);
    }
    free(k);
    free(vt);
    free(q);
    free(out);
    free(scratch);
    return res;
}

static void hr_measure_opcost(hr_pool *pool, int nt, int reps, uint64_t *rng,
                              hr_prof_opcost *oc) {
    enum { NH = 32, NCTX = 512 };
    double t[HR_CPU_MAX_REPS];
    oc->n_threads = nt;
    for (int i = 0; i < 200; i++)
        hr_pool_run(pool, hr_noop, NULL);
    for (int r = 0; r < reps; r++) {
        double t0 = hr_prof_now();
        for (int i = 0; i < 500; i++)
            hr_pool_run(pool, hr_noop, NULL);
        t[r] = (hr_prof_now() - t0) / 500;
    }
    oc->pool_us = hr_prof_median(t, reps) * 1e6;
    double t64 = hr_time_attention(pool, 64, reps, rng);
    double t128 = hr_time_attention(pool, 128, reps, rng);
    if (t64 <= 0 || t128 <= 0) {
        oc->attn_pos_ns = oc->attn_dim_ns = -1.0;
        return;
    }
    /* per head and position: alpha + beta x head_dim */
    double per64 = (t64 - oc->pool_us * 1e-6) / (NH * NCTX) * 1e9;
    double per128 = (t128 - oc->pool_us * 1e-6) / (NH * NCTX) * 1e9;
    double beta = (per128 - per64) / 64.0;
    if (beta < 0)
        beta = per128 / 128.0;
    double alpha = per64 - beta * 64.0;
    if (alpha < 0)
        alpha = 0;
    oc->attn_pos_ns = alpha;
    oc->attn_dim_ns = beta;
}

/* Element-wise ops on the calling thread, as the forward pass runs them. */
static void hr_measure_eltwise(hr_prof_eltwise *ew, int reps, uint64_t *rng) {
    enum { N = 8192, KD = 1024, NCTX = 1024, IT = 40 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    uint16_t *kc = malloc(KD * sizeof *kc), *vc = malloc((size_t)KD * NCTX * sizeof *vc);
    ew->norm_ns = ew->add_ns = ew->rope_ns = ew->swiglu_ns = ew->f16_ns = -1.0;
    if (!a || !b || !c || !kc || !vc)
        goto done;
    hr_fill_f32(a, N, rng);
    hr_fill_f32(b, N, rng);
    memset(vc, 0, (size_t)KD * NCTX * sizeof *vc);
    double t[HR_CPU_MAX_REPS];
    hr_rope_params rp = {.n_rot = 128, .freq_base = 10000.0f, .neox = false};
#define HR_TIME_OP(field, elems, stmt)                                                         \
    do {                                                                                       \
        for (int r = 0; r < reps; r++) {                                                       \
            double t0 = hr_prof_now();                                                         \
            for (int it = 0; it < IT; it++) {                                                  \
                stmt;                                                                          \
            }                                                                                  \
            t[r] = (hr_prof_now() - t0) / ((double)IT * (elems)) * 1e9;                        \
        }                                                                                      \
        ew->field = hr_prof_median(t, reps);                                                   \
    } while (0)
    HR_TIME_OP(norm_ns, N, hr_rmsnorm(c, a, b, N, 1e-5f));
    HR_TIME_OP(add_ns, N, hr_add(c, b, N));
    HR_TIME_OP(rope_ns, 32 * 128, hr_rope(c, 32, 128, 100 + it, &rp));
    HR_TIME_OP(swiglu_ns, N, hr_swiglu(c, a, b, N));
    HR_TIME_OP(f16_ns, 2 * KD, for (int i = 0; i < KD; i++) {
        kc[i] = hr_fp32_to_fp16(a[i]);
        vc[(size_t)i * NCTX + (size_t)it] = hr_fp32_to_fp16(b[i]);
    });
#undef HR_TIME_OP
    /* keep the results observable */
    HR_LOG_DEBUG(HR_PROF_TAG, "eltwise sink %g %u", (double)c[N / 2], (unsigned)kc[7] + vc[3]);
done:
    free(a);
    free(b);
    free(c);
    free(kc);
    free(vc);
}

/* memcpy between two KV-sized blocks: bytes copied per second, GB/s. */
static double hr_measure_kv_copy(size_t bytes, int reps) {
    unsigned char *src = malloc(bytes), *dst = malloc(bytes);
    double res = -1.0;
    if (src && dst) {
        memset(src, 3, bytes);
        memset(dst, 0, bytes);
        double t[HR_CPU_MAX_REPS];
        for (int r = 0; r < reps; r++) {
            double t0 = hr_prof_now();
            memcpy(dst, src, bytes);
            t[r] = hr_prof_now() - t0;
            src[r] ^= dst[bytes - 1 - (size_t)r];
        }
        res = (double)bytes / hr_prof_median(t, reps) / 1e9;
    }
    free(src);
    free(dst);
    return res;
}

int hr_prof_cpu_measure(hr_prof_device *d, const int *types, int n_types, const int *threads,
                        int n_threads, int64_t row_len, bool quick, char err[HR_ERR_LEN]) {
    int reps = quick ? 3 : 5;
    int64_t l3 = d->topo.l3_bytes > 0 ? d->topo.l3_bytes : (32 << 20);
    /* test buffer: several L3s, so decode rows come from DRAM */
    size_t buf_bytes = (size_t)(quick ? 2 : 4) * (size_t)l3;
    size_t floor_b = quick ? (48u << 20) : (96u << 20), cap_b = quick ? (256u << 20) : (512u << 20);
    if (buf_bytes < floor_b)
        buf_bytes = floor_b;
    if (buf_bytes > cap_b)
        buf_bytes = cap_b;
    if (d->mem.weights_avail_bytes > 0 && (int64_t)buf_bytes > d->mem.weights_avail_bytes / 4) {
        buf_bytes = (size_t)(d->mem.weights_avail_bytes / 4);
        HR_LOG_WARN(HR_PROF_TAG, "little free memory: CPU test buffer cut to %zu MiB",
                    buf_bytes >> 20);
    }
    int max_nt = 1;
    for (int i = 0; i < n_threads; i++)
        max_nt = threads[i] > max_nt ? threads[i] : max_nt;
    hr_pool *pools[HR_PROF_MAX_THREADS] = {0};
    unsigned char *buf = NULL;
    hr_cpu_run run = {.n_in = row_len};
    int rc = 0;
    size_t min_row = 0;
    for (int i = 0; i < n_types; i++) {
        size_t rb = hr_type_row_bytes(types[i], row_len);
        if (rb && (!min_row || rb < min_row))
            min_row = rb;
    }
    size_t wbuf_bytes = 0;
    for (int i = 0; i < n_types; i++) {
        size_t s = hr_matmul_wbuf_size(types[i], row_len, HR_CPU_MM_TOK);
        wbuf_bytes = s > wbuf_bytes ? s : wbuf_bytes;
    }
    /* the narrowest rows give the most rows per matrix */
    size_t max_rows = (min_row ? HR_CPU_MAT_BYTES / min_row : 0) + HR_CPU_MM_ROWS;
    run.x = malloc((size_t)HR_CPU_MM_TOK * (size_t)row_len * sizeof(float));
    run.y = malloc((size_t)HR_CPU_MM_TOK * max_rows * sizeof(float));
    run.wbuf = malloc(wbuf_bytes ? wbuf_bytes : 64);
    if (posix_memalign((void **)&buf, 4096, buf_bytes) != 0)
        buf = NULL;
    if (!run.x || !run.y || !run.wbuf || !buf) {
        rc = hr_seterr(err, HR_ENOMEM, "cannot allocate %zu MiB for the CPU test", buf_bytes >> 20);
        goto done;
    }
    for (int i = 0; i < n_threads; i++) {
        pools[i] = hr_pool_create(threads[i]);
        if (!pools[i]) {
            rc = hr_seterr(err, HR_ENOMEM, "cannot start %d threads", threads[i]);
            goto done;
        }
    }
    uint64_t rng = 0x243f6a8885a308d3ull;
    hr_fill_f32(run.x, (size_t)HR_CPU_MM_TOK * (size_t)row_len, &rng);
    memset(buf, 0x11, buf_bytes); /* fault the pages in once */
    /* memory bandwidth over the same buffer */
    hr_pool *big = pools[0];
    for (int i = 0; i < n_threads; i++)
        if (threads[i] == max_nt)
            big = pools[i];
    d->membw_1t_gbs = hr_membw_read_pool(big, 1, buf, buf_bytes, reps);
    d->membw_all_gbs = hr_membw_read_pool(big, max_nt, buf, buf_bytes, reps);
    d->membw_threads = max_nt;
    d->kv_copy_gbs = hr_measure_kv_copy(quick ? (8u << 20) : (16u << 20), reps);
    hr_measure_eltwise(&d->eltwise, reps, &rng);
    d->n_opcosts = 0;
    for (int i = 0; i < n_threads; i++)
        hr_measure_opcost(pools[i], threads[i], reps, &rng, &d->opcosts[d->n_opcosts++]);
    d->n_rates = 0;
    d->row_len = row_len;
    for (int ti = 0; ti < n_types; ti++) {
        int type = types[ti];
        size_t row_bytes = hr_type_row_bytes(type, row_len);
        int64_t rows = (int64_t)(HR_CPU_MAT_BYTES / (row_bytes ? row_bytes : 1)) & ~(int64_t)31;
        if (rows < HR_CPU_SMALL_ROWS)
            rows = HR_CPU_SMALL_ROWS;
        size_t mat_bytes = row_bytes * (size_t)rows;
        int n_mat = mat_bytes ? (int)(buf_bytes / mat_bytes) : 0;
        if (n_mat < 2) {
            HR_LOG_WARN(HR_PROF_TAG, "buffer too small to measure %s", hr_type_name(type));
            continue;
        }
        if (hr_fill_rows(type, row_len, row_bytes, buf, (size_t)rows * (size_t)n_mat, &rng)) {
            rc = hr_seterr(err, HR_ENOMEM, "out of memory filling %s rows", hr_type_name(type));
            goto done;
        }
        for (int i = 0; i < n_threads; i++) {
            run.pool = pools[i];
            run.nt = threads[i];
            hr_prof_rate *rt = &d->rates[d->n_rates++];
            hr_measure_rate(&run, type, buf, row_bytes, rows, n_mat, reps, rt);
            HR_LOG_INFO(HR_PROF_TAG,
                        "%-5s %d thread%s: matvec %.2f GB/s + %.1f us/call, matmat %.1f GFLOP/s",
                        hr_type_name(type), threads[i], threads[i] > 1 ? "s" : "",
                        rt->matvec_gbs, rt->matvec_call_us, rt->matmat_gflops);
        }
    }
    if (d->n_rates == 0)
        rc = hr_seterr(err, HR_EUNSUPPORTED, "no weight type could be measured");
done:
    for (int i = 0; i < n_threads; i++)
        hr_pool_destroy(pools[i]);
    free(buf);
    free(run.x);
    free(run.y);
    free(run.wbuf);
    return rc;
}
