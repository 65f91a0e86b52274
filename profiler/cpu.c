/* cpu.c - CPU side of the device profile, measured with hearth's own
 * kernels the way decode and prefill call them:
 *   - hr_matmul at n_tok = 1 over matrices of realistic size cycling through
 *     a buffer several times the L3 (so rows stream from DRAM as in decode),
 *     in four shapes (two sizes, two row lengths, one and four matrices per
 *     call) that separate the per-call, per-matrix and per-row costs from
 *     the streaming bandwidth;
 *   - hr_matmul at n_tok = 32 (prefill);
 *   - hr_attention at two head sizes and two context lengths, the
 *     element-wise ops, streaming read bandwidth and KV-cache-sized memcpy.
 *
 * The machine may be shared: every figure is the median of several
 * repetitions, and a repetition during which our threads waited for a CPU
 * (schedstat run_delay) is set aside and repeated, up to three times the
 * planned count; when too few clean ones remain all are used and the
 * profile counts the contended ones. */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "kernels/ops.h"
#include "kernels/pool.h"
#include "kernels/quant.h"
#include "profiler/membw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HR_CPU_MAT_BYTES (16u << 20) /* largest test matrix: a 7B layer's wq + wk + wv */
#define HR_CPU_MM_TOK 32             /* prefill batch */
#define HR_CPU_MM_ROWS 256           /* rows of the prefill test matrix */
#define HR_CPU_MAX_REPS 16
#define HR_REP_VALUES 4

static uint64_t hr_lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static float hr_frand(uint64_t *s) {
    return (float)((double)hr_lcg(s) / 9007199254740992.0) * 2.0f - 1.0f;
}

static void hr_fill_f32(float *x, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++)
        x[i] = hr_frand(s);
}

/* ---- repetitions ---- */

/* One repetition: fills up to HR_REP_VALUES measured values. */
typedef void (*hr_rep_fn)(void *ctx, double *v);

typedef struct {
    int total, contended; /* repetitions run, set aside */
    double quota_cores;   /* our cgroups' CPU quota (cores; <= 0 none) */
    double period_s;      /* ... and its period */
} hr_rep_stats;

/* Wait (s) a repetition of dt s on nt threads may show without another
 * program taking our CPUs: 3% of our CPU time plus 0.1 ms of wake-up
 * jitter, and under a CPU quota of q < nt cores the time the quota holds
 * our threads back, (nt - q) * dt, give or take one period's quota (a
 * repetition need not end on a period). Throttled threads count as waiting
 * in the scheduler's statistics, so without this a device under a quota
 * looked busy in every repetition and its profile was never cached. */
static double hr_rep_wait_ok(const hr_rep_stats *st, double dt, int nt) {
    double ok = 0.03 * dt * nt + 1e-4;
    double q = st->quota_cores;
    if (q > 0 && q < nt)
        ok += (nt - q) * dt + q * (st->period_s > 0 ? st->period_s : 0.1);
    return ok;
}

/* Runs fn until `want` repetitions ran without our nt threads waiting for a
 * CPU (or 3 x want attempts) and writes the median of each of the nv values
 * over the clean repetitions (over all of them when fewer than half of
 * `want` were clean) to med. */
static void hr_reps(hr_rep_fn fn, void *ctx, int want, int nt, int nv, double *med,
                    hr_rep_stats *st) {
    double clean[HR_CPU_MAX_REPS][HR_REP_VALUES], all[3 * HR_CPU_MAX_REPS][HR_REP_VALUES];
    int n_clean = 0, n_all = 0;
    if (want > HR_CPU_MAX_REPS)
        want = HR_CPU_MAX_REPS;
    while (n_clean < want && n_all < 3 * want) {
        int64_t w0 = hr_prof_run_delay_ns();
        double t0 = hr_now_s();
        fn(ctx, all[n_all]);
        double dt = hr_now_s() - t0;
        int64_t w1 = hr_prof_run_delay_ns();
        bool busy = w0 >= 0 && w1 >= 0 && (double)(w1 - w0) * 1e-9 > hr_rep_wait_ok(st, dt, nt);
        st->total++;
        if (busy)
            st->contended++;
        else
            memcpy(clean[n_clean++], all[n_all], sizeof clean[0]);
        n_all++;
    }
    bool use_clean = n_clean * 2 >= want;
    for (int k = 0; k < nv; k++) {
        double col[3 * HR_CPU_MAX_REPS];
        int n = use_clean ? n_clean : n_all;
        for (int i = 0; i < n; i++)
            col[i] = use_clean ? clean[i][k] : all[i][k];
        med[k] = hr_prof_median(col, n);
    }
}

/* ---- matrix products ---- */

/* Work shared by the measurements of one thread count. */
typedef struct {
    hr_pool *pool;
    int nt;
    int64_t n_in;
    float *x;                 /* [HR_CPU_MM_TOK][n_in] */
    float *y;                 /* [HR_CPU_MM_TOK][max rows] */
    void *wbuf;               /* activation scratch */
    double sustain_s;         /* > 0: also time sweeps back to back for this long */
    hr_prof_sustain *sustain; /* where that goes */
} hr_cpu_run;

/* Mean time of one hr_matmul (n_tok = 1) over n_call groups of n_w
 * matrices laid end to end in buf (each group like a layer's q/k/v
 * tensors): every call streams its rows from DRAM. */
static double hr_sweep(hr_cpu_run *r, hr_weight *w, int n_w, const unsigned char *buf, int n_call) {
    const hr_weight *wp[4];
    float *yp[4];
    size_t mat_bytes = w->row_bytes * (size_t)w->n_out;
    for (int i = 0; i < n_w; i++) {
        wp[i] = &w[i];
        yp[i] = r->y + (size_t)i * (size_t)w->n_out;
    }
    double t0 = hr_now_s();
    for (int c = 0; c < n_call; c++) {
        for (int i = 0; i < n_w; i++)
            w[i].data = buf + ((size_t)c * (size_t)n_w + (size_t)i) * mat_bytes;
        hr_matmul(r->pool, n_w, wp, yp, r->x, 1, r->wbuf);
    }
    return (hr_now_s() - t0) / n_call;
}

/* The four decode shapes, bracketing a layer's real calls: A = mat_bytes
 * (16 MiB, less in a small buffer) of rows of row_len; B = a quarter of A's
 * rows; C = mat_bytes of rows of ffn_len; D = B's rows as 4 matrices in one
 * call. */
typedef struct {
    hr_cpu_run *r;
    const unsigned char *buf;
    hr_weight a, b, c, d[4];
    int n_a, n_b, n_c, n_d; /* calls per sweep */
} hr_mv_job;

/* v = {t_A, t_B, t_C, t_D}, s per call, adjacent in time so a change in
 * background load hits all four. */
static void hr_rep_matvec(void *ctx, double *v) {
    hr_mv_job *j = ctx;
    v[0] = hr_sweep(j->r, &j->a, 1, j->buf, j->n_a);
    v[1] = hr_sweep(j->r, &j->b, 1, j->buf, j->n_b);
    v[2] = hr_sweep(j->r, &j->c, 1, j->buf, j->n_c);
    v[3] = hr_sweep(j->r, j->d, 4, j->buf, j->n_d);
}

typedef struct {
    hr_cpu_run *r;
    hr_weight w;
} hr_mm_job;

static void hr_rep_matmat(void *ctx, double *v) {
    hr_mm_job *j = ctx;
    const hr_weight *wp = &j->w;
    float *yp = j->r->y;
    double t0 = hr_now_s();
    for (int i = 0; i < 2; i++)
        hr_matmul(j->r->pool, 1, &wp, &yp, j->r->x, HR_CPU_MM_TOK, j->r->wbuf);
    v[0] = (hr_now_s() - t0) / 2;
}

/* Solves t = call + mats x mat + rows x row + bytes / bw from the medians
 * of the four shapes (s, bytes, rows). Falls back to a plain bytes / time
 * rate when noise makes a term negative. */
static void hr_fit_matvec(const hr_mv_job *j, const double *t, hr_prof_rate *out) {
    double ra = (double)j->a.n_out, rb = (double)j->b.n_out, rc = (double)j->c.n_out;
    double bpa = (double)j->a.row_bytes, bpc = (double)j->c.row_bytes; /* bytes per row */
    double s1 = (t[0] - t[1]) / (ra - rb); /* per row at row_len: row + bpa / bw */
    double k = t[1] - s1 * rb;             /* call + one matrix */
    double s2 = (t[2] - k) / rc;           /* per row at ffn_len: row + bpc / bw */
    double inv_bw = (s2 - s1) / (bpc - bpa);
    double row = s1 - bpa * inv_bw;
    double mat = (t[3] - t[1]) / 3.0;
    bool ok = s1 > 0 && inv_bw > 0 && row >= 0 && k >= 0 && k < 0.5 * t[1];
    if (!ok) {
        /* noise: keep the per-call intercept if sane, charge the rest to bytes */
        HR_LOG_INFO(HR_PROF_TAG, "%s/%d: noisy fit (A %.1f, B %.1f, C %.1f, D %.1f us)",
                    hr_type_name(j->a.type), j->r->nt, t[0] * 1e6, t[1] * 1e6, t[2] * 1e6,
                    t[3] * 1e6);
        k = k > 0 && k < 0.5 * t[1] ? k : 0.0;
        row = 0;
        inv_bw = (t[0] - k) / (ra * bpa);
    }
    if (mat < 0 || mat > k)
        mat = mat < 0 ? 0 : k;
    out->matvec_gbs = 1.0 / inv_bw / 1e9;
    out->matvec_row_ns = row * 1e9;
    out->matvec_mat_us = mat * 1e6;
    out->matvec_call_us = (k - mat) * 1e6;
}

/* Measures one (type, thread count) on the buffer (buf_bytes of whole
 * blocks of `type`, valid as rows of either length). */
static void hr_measure_rate(hr_cpu_run *r, int type, const unsigned char *buf, size_t buf_bytes,
                            size_t mat_bytes, int64_t ffn_len, int reps, hr_rep_stats *st,
                            hr_prof_rate *out) {
    hr_mv_job j = {.r = r, .buf = buf};
    size_t rb1 = hr_type_row_bytes(type, r->n_in), rb2 = hr_type_row_bytes(type, ffn_len);
    int64_t rows_a = (int64_t)(mat_bytes / rb1) & ~(int64_t)31;
    int64_t rows_c = (int64_t)(mat_bytes / rb2) & ~(int64_t)31;
    rows_a = rows_a < 64 ? 64 : rows_a;
    rows_c = rows_c < 64 ? 64 : rows_c;
    int64_t rows_b = (rows_a / 4) & ~(int64_t)15;
    j.a = (hr_weight){.type = type, .n_in = r->n_in, .n_out = rows_a, .row_bytes = rb1};
    j.b = j.a;
    j.b.n_out = rows_b;
    j.c = (hr_weight){.type = type, .n_in = ffn_len, .n_out = rows_c, .row_bytes = rb2};
    for (int i = 0; i < 4; i++) {
        j.d[i] = j.b;
        j.d[i].n_out = rows_b / 4;
    }
    j.n_a = (int)(buf_bytes / (rb1 * (size_t)rows_a));
    j.n_b = (int)(buf_bytes / (rb1 * (size_t)rows_b));
    j.n_c = (int)(buf_bytes / (rb2 * (size_t)rows_c));
    j.n_d = j.n_b;
    double v[HR_REP_VALUES];
    hr_rep_matvec(&j, v); /* warm-up: pool, pages, activation buffers */
    hr_reps(hr_rep_matvec, &j, reps, r->nt, 4, v, st);
    out->type = type;
    out->n_threads = r->nt;
    hr_fit_matvec(&j, v, out);
    if (r->sustain && r->sustain_s > 0) {
        /* whole-buffer sweeps of shape A until the window is over: under a
         * CPU quota this includes the throttled time the short repetitions
         * above escape (or set aside as contended) */
        long calls = 0;
        double t0 = hr_now_s(), dt;
        do {
            hr_sweep(r, &j.a, 1, buf, j.n_a);
            calls += j.n_a;
            dt = hr_now_s() - t0;
        } while (dt < r->sustain_s);
        double f = dt / (double)calls / v[0];
        *r->sustain =
            (hr_prof_sustain){.n_threads = r->nt, .factor = f > 1.0 ? f : 1.0, .window_s = dt};
        HR_LOG_INFO(HR_PROF_TAG,
                    "%d thread%s under a CPU quota: sustained sweeps %.2fx the repetitions' "
                    "time over %.2f s",
                    r->nt, r->nt > 1 ? "s" : "", f, dt);
    }
    hr_mm_job m = {.r = r, .w = j.a};
    m.w.n_out = rows_a < HR_CPU_MM_ROWS ? rows_a : HR_CPU_MM_ROWS;
    m.w.data = buf;
    hr_rep_matmat(&m, v); /* warm-up */
    hr_reps(hr_rep_matmat, &m, reps, r->nt, 1, v, st);
    out->matmat_gflops = 2.0 * (double)r->n_in * (double)m.w.n_out * HR_CPU_MM_TOK / v[0] / 1e9;
}

/* Fills n_rows rows of `type` from a few quantized random seed rows. */
static int hr_fill_rows(int type, int64_t n_in, size_t row_bytes, unsigned char *dst, size_t n_rows,
                        uint64_t *rng) {
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

/* ---- attention ---- */

enum { HR_ATT_NH = 32, HR_ATT_NKV = 8, HR_ATT_NCTX = 512, HR_ATT_P0 = 16 };

typedef struct {
    hr_pool *pool;
    hr_attn_args a;
    float *q, *out;
    int pos;
} hr_att_job;

static void hr_rep_attention(void *ctx, double *v) {
    hr_att_job *j = ctx;
    double t0 = hr_now_s();
    for (int i = 0; i < 8; i++)
        hr_attention(j->pool, &j->a, j->q, 1, j->pos, j->out);
    v[0] = (hr_now_s() - t0) / 8;
}

/* hr_attention time per call for one token seeing n_pos positions with
 * head size hd (32 query heads, 8 KV heads), seconds; -1 on failure. */
static double hr_time_attention(hr_pool *pool, int nt, int hd, int n_pos, int reps, uint64_t *rng,
                                hr_rep_stats *st) {
    size_t kvn = (size_t)HR_ATT_NCTX * HR_ATT_NKV * (size_t)hd;
    hr_att_job j = {.pool = pool, .pos = n_pos - 1};
    uint16_t *k = malloc(kvn * 2), *vt = malloc(kvn * 2);
    j.q = malloc((size_t)HR_ATT_NH * hd * sizeof *j.q);
    j.out = malloc((size_t)HR_ATT_NH * hd * sizeof *j.out);
    float *scratch =
        malloc(hr_attn_scratch_floats(hr_pool_size(pool), HR_ATT_NH, HR_ATT_NKV, hd, HR_ATT_NCTX) *
               sizeof *scratch);
    double res = -1.0;
    if (k && vt && j.q && j.out && scratch && n_pos <= HR_ATT_NCTX) {
        for (size_t i = 0; i < kvn; i++) {
            k[i] = hr_fp32_to_fp16(hr_frand(rng) * 0.5f);
            vt[i] = hr_fp32_to_fp16(hr_frand(rng) * 0.5f);
        }
        hr_fill_f32(j.q, (size_t)HR_ATT_NH * hd, rng);
        j.a = (hr_attn_args){.n_head = HR_ATT_NH,
                             .n_kv = HR_ATT_NKV,
                             .head_dim = hd,
                             .n_ctx = HR_ATT_NCTX,
                             .k = k,
                             .vt = vt,
                             .scratch = scratch};
        double v[HR_REP_VALUES];
        hr_rep_attention(&j, v);
        hr_reps(hr_rep_attention, &j, reps, nt, 1, v, st);
        res = v[0];
    }
    free(k);
    free(vt);
    free(j.q);
    free(j.out);
    free(scratch);
    return res;
}

/* Four calls (head size 64 / 128, 16 / 512 positions) give the fixed cost
 * and the per-position terms. */
static void hr_measure_opcost(hr_pool *pool, int nt, int reps, uint64_t *rng, hr_rep_stats *st,
                              hr_prof_opcost *oc) {
    const double NH = HR_ATT_NH, P0 = HR_ATT_P0, P1 = HR_ATT_NCTX;
    oc->n_threads = nt;
    oc->attn_call_us = oc->attn_pos_ns = oc->attn_dim_ns = -1.0;
    double t64a = hr_time_attention(pool, nt, 64, HR_ATT_P0, reps, rng, st);
    double t64b = hr_time_attention(pool, nt, 64, HR_ATT_NCTX, reps, rng, st);
    double t128a = hr_time_attention(pool, nt, 128, HR_ATT_P0, reps, rng, st);
    double t128b = hr_time_attention(pool, nt, 128, HR_ATT_NCTX, reps, rng, st);
    if (t64a <= 0 || t64b <= 0 || t128a <= 0 || t128b <= 0)
        return;
    /* per head and position at each head size, ns */
    double k64 = (t64b - t64a) / (NH * (P1 - P0)) * 1e9;
    double k128 = (t128b - t128a) / (NH * (P1 - P0)) * 1e9;
    if (k64 < 0)
        k64 = t64b / (NH * P1) * 1e9;
    if (k128 < k64)
        k128 = k64;
    double beta = (k128 - k64) / 64.0;
    double alpha = k64 - 64.0 * beta;
    if (alpha < 0) {
        alpha = 0;
        beta = k64 / 64.0;
    }
    double call = t64a - NH * P0 * k64 * 1e-9;
    oc->attn_call_us = (call > 0 ? call : 0) * 1e6;
    oc->attn_pos_ns = alpha;
    oc->attn_dim_ns = beta;
}

/* ---- element-wise ops, bandwidth, KV copy ---- */

enum { HR_EW_N = 8192, HR_EW_KD = 1024, HR_EW_NCTX = 1024, HR_EW_IT = 40 };

typedef struct {
    int op;
    float *a, *b, *c;
    uint16_t *kc, *vc;
    unsigned sink;
} hr_ew_job;

/* One repetition of op: v[0] = ns per element. */
static void hr_rep_eltwise(void *ctx, double *v) {
    hr_ew_job *j = ctx;
    static const hr_rope_params rp = {.n_rot = 128, .freq_base = 10000.0f, .neox = false};
    double elems = 0;
    double t0 = hr_now_s();
    for (int it = 0; it < HR_EW_IT; it++) {
        switch (j->op) {
        case 0:
            hr_rmsnorm(j->c, j->a, j->b, HR_EW_N, 1e-5f);
            elems += HR_EW_N;
            break;
        case 1:
            hr_add(j->c, j->b, HR_EW_N);
            elems += HR_EW_N;
            break;
        case 2:
            hr_rope(j->c, 32, 128, 100 + it, &rp);
            elems += 32 * 128;
            break;
        case 3:
            hr_swiglu(j->c, j->a, j->b, HR_EW_N);
            elems += HR_EW_N;
            break;
        default:
            /* as model.c stores K (contiguous) and V (transposed) */
            for (int i = 0; i < HR_EW_KD; i++) {
                j->kc[i] = hr_fp32_to_fp16(j->a[i]);
                j->vc[(size_t)i * HR_EW_NCTX + (size_t)it] = hr_fp32_to_fp16(j->b[i]);
            }
            elems += 2 * HR_EW_KD;
            break;
        }
    }
    v[0] = (hr_now_s() - t0) / elems * 1e9;
    j->sink += hr_f32_bits(j->c[7]) + j->kc[3]; /* the bits: c may be negative */
}

static void hr_measure_eltwise(hr_prof_eltwise *ew, int reps, uint64_t *rng, hr_rep_stats *st) {
    hr_ew_job j = {0};
    j.a = malloc(HR_EW_N * sizeof *j.a);
    j.b = malloc(HR_EW_N * sizeof *j.b);
    j.c = malloc(HR_EW_N * sizeof *j.c);
    j.kc = malloc(HR_EW_KD * sizeof *j.kc);
    j.vc = calloc((size_t)HR_EW_KD * HR_EW_NCTX, sizeof *j.vc);
    *ew = (hr_prof_eltwise){-1.0, -1.0, -1.0, -1.0, -1.0};
    if (j.a && j.b && j.c && j.kc && j.vc) {
        hr_fill_f32(j.a, HR_EW_N, rng);
        hr_fill_f32(j.b, HR_EW_N, rng);
        memcpy(j.c, j.a, HR_EW_N * sizeof *j.c);
        double *dst[5] = {&ew->norm_ns, &ew->add_ns, &ew->rope_ns, &ew->swiglu_ns, &ew->f16_ns};
        for (int op = 0; op < 5; op++) {
            double v[HR_REP_VALUES];
            j.op = op;
            hr_rep_eltwise(&j, v);
            hr_reps(hr_rep_eltwise, &j, reps, 1, 1, v, st);
            *dst[op] = v[0];
        }
        HR_LOG_DEBUG(HR_PROF_TAG, "eltwise sink %u", j.sink);
    }
    free(j.a);
    free(j.b);
    free(j.c);
    free(j.kc);
    free(j.vc);
}

typedef struct {
    hr_pool *pool;
    int nt;
    const void *buf;
    size_t bytes;
} hr_bw_job;

static void hr_rep_membw(void *ctx, double *v) {
    hr_bw_job *j = ctx;
    v[0] = hr_membw_read_pool(j->pool, j->nt, j->buf, j->bytes, 1);
}

typedef struct {
    unsigned char *src, *dst;
    size_t bytes;
} hr_cp_job;

static void hr_rep_copy(void *ctx, double *v) {
    hr_cp_job *j = ctx;
    double t0 = hr_now_s();
    memcpy(j->dst, j->src, j->bytes);
    v[0] = (double)j->bytes / (hr_now_s() - t0) / 1e9;
    j->src[0] ^= j->dst[j->bytes - 1];
}

/* memcpy between two KV-sized blocks: bytes copied per second, GB/s. */
static double hr_measure_kv_copy(size_t bytes, int reps, hr_rep_stats *st) {
    hr_cp_job j = {.src = malloc(bytes), .dst = malloc(bytes), .bytes = bytes};
    double v[HR_REP_VALUES] = {-1.0};
    if (j.src && j.dst) {
        memset(j.src, 3, bytes);
        memset(j.dst, 0, bytes);
        hr_rep_copy(&j, v);
        hr_reps(hr_rep_copy, &j, reps, 1, 1, v, st);
    }
    free(j.src);
    free(j.dst);
    return v[0];
}

/* ---- driver ---- */

int hr_prof_cpu_measure(hr_prof_device *d, const int *types, int n_types, const int *threads,
                        int n_threads, int64_t row_len, int64_t ffn_len, bool quick,
                        char err[HR_ERR_LEN]) {
    int reps = quick ? 3 : 7;
    hr_rep_stats st = {.quota_cores = d->cpu_quota_cores,
                       .period_s = d->cpu_period_ms > 0 ? d->cpu_period_ms * 1e-3 : 0.1};
    int64_t l3 = d->topo.l3_bytes > 0 ? d->topo.l3_bytes : (32 << 20);
    /* test buffer: several L3s, so decode rows come from DRAM */
    size_t buf_bytes = (size_t)(quick ? 2 : 4) * (size_t)l3;
    size_t floor_b = quick ? (64u << 20) : (96u << 20), cap_b = quick ? (256u << 20) : (512u << 20);
    if (buf_bytes < floor_b)
        buf_bytes = floor_b;
    if (buf_bytes > cap_b)
        buf_bytes = cap_b;
    if (d->mem.weights_avail_bytes > 0 && (int64_t)buf_bytes > d->mem.weights_avail_bytes / 4) {
        buf_bytes = (size_t)(d->mem.weights_avail_bytes / 4);
        HR_LOG_WARN(HR_PROF_TAG, "little free memory: CPU test buffer cut to %zu MiB",
                    buf_bytes >> 20);
    }
    /* six of the largest test matrices per sweep at least */
    size_t mat_bytes = buf_bytes / 6 < HR_CPU_MAT_BYTES ? buf_bytes / 6 : HR_CPU_MAT_BYTES;
    int max_nt = 1;
    for (int i = 0; i < n_threads; i++)
        max_nt = threads[i] > max_nt ? threads[i] : max_nt;
    hr_pool *pools[HR_PROF_MAX_THREADS] = {0};
    unsigned char *buf = NULL;
    hr_cpu_run run = {.n_in = row_len};
    int rc = 0;
    size_t min_row = 0, wbuf_bytes = 0;
    int64_t max_len = ffn_len > row_len ? ffn_len : row_len;
    for (int i = 0; i < n_types; i++) {
        size_t rb = hr_type_row_bytes(types[i], row_len);
        if (rb && (!min_row || rb < min_row))
            min_row = rb;
        size_t s = hr_matmul_wbuf_size(types[i], max_len, HR_CPU_MM_TOK);
        wbuf_bytes = s > wbuf_bytes ? s : wbuf_bytes;
    }
    /* the narrowest rows give the most rows per matrix */
    size_t max_rows = (min_row ? mat_bytes / min_row : 0) + HR_CPU_MM_ROWS;
    run.x = malloc((size_t)HR_CPU_MM_TOK * (size_t)max_len * sizeof(float));
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
    hr_fill_f32(run.x, (size_t)HR_CPU_MM_TOK * (size_t)max_len, &rng);
    memset(buf, 0x11, buf_bytes); /* fault the pages in once */
    /* memory bandwidth over the same buffer */
    hr_pool *big = pools[0];
    for (int i = 0; i < n_threads; i++)
        if (threads[i] == max_nt)
            big = pools[i];
    double v[HR_REP_VALUES];
    hr_bw_job bj = {.pool = big, .nt = 1, .buf = buf, .bytes = buf_bytes};
    hr_reps(hr_rep_membw, &bj, reps, 1, 1, v, &st);
    d->membw_1t_gbs = v[0];
    bj.nt = max_nt;
    hr_reps(hr_rep_membw, &bj, reps, max_nt, 1, v, &st);
    d->membw_all_gbs = v[0];
    d->membw_threads = max_nt;
    d->kv_copy_gbs = hr_measure_kv_copy(quick ? (8u << 20) : (16u << 20), reps, &st);
    hr_measure_eltwise(&d->eltwise, reps, &rng, &st);
    d->n_opcosts = 0;
    for (int i = 0; i < n_threads; i++)
        hr_measure_opcost(pools[i], threads[i], reps, &rng, &st, &d->opcosts[d->n_opcosts++]);
    d->n_rates = 0;
    d->n_sustain = 0;
    double sustain_s = 0; /* several quota periods */
    if (d->cpu_quota_cores > 0 && d->cpu_period_ms > 0) {
        sustain_s = (quick ? 6 : 10) * d->cpu_period_ms * 1e-3;
        double lo = quick ? 0.1 : 0.2, hi = quick ? 1.0 : 2.0;
        sustain_s = sustain_s < lo ? lo : sustain_s > hi ? hi : sustain_s;
    }
    d->row_len = row_len;
    d->ffn_len = ffn_len;
    for (int ti = 0; ti < n_types; ti++) {
        int type = types[ti];
        size_t row_bytes = hr_type_row_bytes(type, row_len);
        size_t n_rows = row_bytes ? buf_bytes / row_bytes : 0;
        /* whole blocks: the same bytes are valid rows of either length */
        if (n_rows * row_bytes < 4 * mat_bytes ||
            hr_type_row_bytes(type, ffn_len) > mat_bytes / 64) {
            HR_LOG_WARN(HR_PROF_TAG, "buffer too small to measure %s", hr_type_name(type));
            continue;
        }
        if (hr_fill_rows(type, row_len, row_bytes, buf, n_rows, &rng)) {
            rc = hr_seterr(err, HR_ENOMEM, "out of memory filling %s rows", hr_type_name(type));
            goto done;
        }
        for (int i = 0; i < n_threads; i++) {
            run.pool = pools[i];
            run.nt = threads[i];
            /* under a CPU quota, the first type also measures its sustained rate */
            run.sustain = ti == 0 && sustain_s > 0 ? &d->sustain[d->n_sustain++] : NULL;
            run.sustain_s = sustain_s;
            hr_prof_rate *rt = &d->rates[d->n_rates++];
            hr_measure_rate(&run, type, buf, n_rows * row_bytes, mat_bytes, ffn_len, reps, &st, rt);
            HR_LOG_INFO(HR_PROF_TAG,
                        "%-5s %d thread%s: matvec %.2f GB/s + %.1f us/call + %.1f us/matrix + "
                        "%.2f ns/row, matmat %.1f GFLOP/s",
                        hr_type_name(type), threads[i], threads[i] > 1 ? "s" : "", rt->matvec_gbs,
                        rt->matvec_call_us, rt->matvec_mat_us, rt->matvec_row_ns,
                        rt->matmat_gflops);
        }
    }
    d->reps_total = st.total;
    d->reps_contended = st.contended;
    if (st.contended)
        HR_LOG_INFO(HR_PROF_TAG, "%d of %d repetitions waited for a CPU and were repeated",
                    st.contended, st.total);
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
