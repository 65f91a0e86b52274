/* ops.c - norms, RoPE, softmax, SwiGLU, attention and threaded matmul. */
#include "kernels/ops.h"

#include "kernels/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* ---- matmul ---- */

size_t hr_matmul_wbuf_size(int type, int64_t n_in, int n_tok) {
    const hr_type_traits *tt = hr_type_get(type);
    if (!tt || tt->vec_dot_type == HR_TYPE_F32)
        return 0;
    return hr_type_row_bytes(tt->vec_dot_type, n_in) * (size_t)n_tok;
}

typedef struct {
    int n_w;
    const hr_weight *const *w;
    float *const *y;
    const float *x;
    void *act;
    size_t act_row_bytes;
    int act_type;
    int n_tok;
    long total_rows;
    const hr_kernels *k;
    hr_quant_fn quant;
    const int *run_len; /* [n_runs] rows per sequence (hr_matmul_runs), or NULL */
    int n_runs;
    long chunk;            /* rows per work item */
    _Atomic long next_row; /* next unclaimed row (concatenated over weights) */
} hr_mm_job;

static void hr_mm_dot_rows(hr_mm_job *j, long b, long e);

static void hr_mm_quant_worker(void *ctx, int ith, int nth) {
    hr_mm_job *j = ctx;
    int64_t n_in = j->w[0]->n_in;
    for (int t = ith; t < j->n_tok; t += nth)
        j->quant(j->x + (size_t)t * n_in, (char *)j->act + (size_t)t * j->act_row_bytes, n_in);
}

/* Rows per tile when several tokens share the weight rows (keeps the
 * tile's weights in L1/L2 while the activations stream past). */
#define HR_MM_TILE_ROWS 16

/* Rows are handed out in chunks from a shared counter, so a thread that
 * loses its core to another program does not hold up the others. */
static void hr_mm_dot_worker(void *ctx, int ith, int nth) {
    hr_mm_job *j = ctx;
    (void)ith;
    (void)nth;
    for (;;) {
        long b = atomic_fetch_add_explicit(&j->next_row, j->chunk, memory_order_relaxed);
        if (b >= j->total_rows)
            break;
        long e = b + j->chunk < j->total_rows ? b + j->chunk : j->total_rows;
        hr_mm_dot_rows(j, b, e);
    }
}

/* Rows per vec_dot_n call when every run is one row (decode): the kernels
 * prepare each column once per call, so calls cover many rows. */
#define HR_MM_DOTN_ROWS 64

/* Rows [lo, hi) of w for a batch of runs, a tile of rows at a time: the
 * one-row runs (decode) by vec_dot_n, as single-token hr_matmul computes
 * them, the longer ones (prefill) by the gemm tiles, as hr_matmul computes
 * a run alone. */
static void hr_mm_runs_rows(hr_mm_job *j, const hr_weight *w, float *y, long lo, long hi) {
    const char *wd = w->data;
    size_t rb = w->row_bytes, ab = j->act_row_bytes, yn = (size_t)w->n_out;
    const char *act = j->act;
    const long tile = j->n_runs == j->n_tok ? HR_MM_DOTN_ROWS : HR_MM_TILE_ROWS;
    for (long r0 = lo; r0 < hi; r0 += tile) {
        int nr = (int)(hi - r0 < tile ? hi - r0 : tile);
        const void *a[HR_DOT_N_MAX];
        int col[HR_DOT_N_MAX], na = 0;
        float out[HR_DOT_N_MAX * HR_MM_DOTN_ROWS];
        long t0 = 0;
        for (int ri = 0; ri <= j->n_runs; ri++) {
            int len = ri < j->n_runs ? j->run_len[ri] : 0;
            if (len == 1) {
                col[na] = (int)t0;
                a[na++] = act + (size_t)t0 * ab;
            } else if (len > 1) {
                hr_gemm_tile(j->k, w->type, w->n_in, nr, len, wd + (size_t)r0 * rb, rb,
                             act + (size_t)t0 * ab, ab, y + (size_t)t0 * yn + r0, yn);
            }
            t0 += len;
            if (na == HR_DOT_N_MAX || (ri == j->n_runs && na > 0)) {
                hr_vec_dot_n(j->k, w->type, w->n_in, nr, wd + (size_t)r0 * rb, rb, a, na, out,
                             HR_MM_DOTN_ROWS);
                for (int t = 0; t < na; t++)
                    memcpy(y + (size_t)col[t] * yn + r0, out + (size_t)t * HR_MM_DOTN_ROWS,
                           (size_t)nr * sizeof(float));
                na = 0;
            }
        }
    }
}

static void hr_mm_dot_rows(hr_mm_job *j, long b, long e) {
    long base = 0;
    for (int wi = 0; wi < j->n_w && base < e; wi++) {
        const hr_weight *w = j->w[wi];
        long lo = b > base ? b - base : 0;
        long hi = e - base < w->n_out ? e - base : w->n_out;
        base += w->n_out;
        if (lo >= hi)
            continue;
        const char *wd = w->data;
        hr_vec_dot_fn dot = j->k->vec_dot[w->type];
        float *y = j->y[wi];
        int64_t n_in = w->n_in;
        if (j->run_len) {
            hr_mm_runs_rows(j, w, y, lo, hi);
            continue;
        }
        if (j->n_tok == 1 && j->k->dotn_one[w->type]) {
            /* several rows per call where the table's vec_dot_n is faster
             * than vec_dot per row (same values bit for bit) */
            const void *a[1] = {j->act};
            for (long r0 = lo; r0 < hi; r0 += HR_MM_DOTN_ROWS) {
                int nr = (int)(hi - r0 < HR_MM_DOTN_ROWS ? hi - r0 : HR_MM_DOTN_ROWS);
                hr_vec_dot_n(j->k, w->type, n_in, nr, wd + (size_t)r0 * w->row_bytes, w->row_bytes,
                             a, 1, y + r0, (size_t)w->n_out);
            }
            continue;
        }
        if (j->n_tok == 1) {
            for (long r = lo; r < hi; r++)
                y[r] = dot(n_in, wd + (size_t)r * w->row_bytes, j->act);
            continue;
        }
        /* prefill: register-blocked tiles over (rows x tokens), as many
         * rows per call as the table's tiles want */
        const long tile = j->k->gemm_rows > 0 ? j->k->gemm_rows : HR_MM_TILE_ROWS;
        for (long r0 = lo; r0 < hi; r0 += tile) {
            long r1 = r0 + tile < hi ? r0 + tile : hi;
            hr_gemm_tile(j->k, w->type, n_in, (int)(r1 - r0), j->n_tok,
                         wd + (size_t)r0 * w->row_bytes, w->row_bytes, j->act, j->act_row_bytes,
                         y + r0, (size_t)w->n_out);
        }
    }
}

static void hr_matmul_job(hr_pool *pool, int n_w, const hr_weight *const *w, float *const *y,
                          const float *x, int n_tok, const int *run_len, int n_runs, void *wbuf) {
    const hr_kernels *k = hr_kernels_best();
    const hr_type_traits *tt = hr_type_get(w[0]->type);
    hr_mm_job j = {.n_w = n_w,
                   .w = w,
                   .y = y,
                   .x = x,
                   .n_tok = n_tok,
                   .k = k,
                   .run_len = run_len,
                   .n_runs = n_runs};
    j.act_type = tt->vec_dot_type;
    for (int i = 0; i < n_w; i++)
        j.total_rows += w[i]->n_out;
    if (j.act_type == HR_TYPE_F32) {
        j.act = (void *)x;
        j.act_row_bytes = (size_t)w[0]->n_in * sizeof(float);
    } else {
        j.act = wbuf;
        j.act_row_bytes = hr_type_row_bytes(j.act_type, w[0]->n_in);
        j.quant = k->quant[j.act_type];
        if (n_tok == 1)
            j.quant(x, wbuf, w[0]->n_in);
        else
            hr_pool_run(pool, hr_mm_quant_worker, &j);
    }
    /* about 8 chunks per thread, multiples of the tile (of the table's
     * gemm call for prefill) */
    long nth = hr_pool_size(pool);
    long tile = HR_MM_TILE_ROWS;
    if (n_tok > 1 && !run_len && k->gemm_rows > tile)
        tile = k->gemm_rows;
    j.chunk = (j.total_rows / (nth * 8) + tile - 1) / tile * tile;
    if (j.chunk < tile)
        j.chunk = tile;
    atomic_init(&j.next_row, 0);
    hr_pool_run(pool, hr_mm_dot_worker, &j);
}

void hr_matmul(hr_pool *pool, int n_w, const hr_weight *const *w, float *const *y, const float *x,
               int n_tok, void *wbuf) {
    hr_matmul_job(pool, n_w, w, y, x, n_tok, NULL, 0, wbuf);
}

void hr_matmul_runs(hr_pool *pool, int n_w, const hr_weight *const *w, float *const *y,
                    const float *x, int n_tok, const int *run_len, int n_runs, void *wbuf) {
    hr_matmul_job(pool, n_w, w, y, x, n_tok, run_len, n_runs, wbuf);
}

/* ---- groups of products (experts) ---- */

typedef struct {
    hr_mm_group *g;
    int n_g;
    long total_rows, total_tok, chunk;
    const hr_kernels *k;
    _Atomic long next_row;
} hr_mmg_job;

static void hr_mmg_quant_worker(void *ctx, int ith, int nth) {
    hr_mmg_job *j = ctx;
    for (int gi = 0; gi < j->n_g; gi++) {
        hr_mm_group *g = &j->g[gi];
        int act_type = hr_type_get(g->w[0].type)->vec_dot_type;
        if (act_type == HR_TYPE_F32)
            continue;
        hr_quant_fn q = j->k->quant[act_type];
        int64_t n_in = g->w[0].n_in;
        for (int t = 0; t < g->n_tok; t++)
            if ((g->tok0 + t) % nth == ith)
                q(g->x + (size_t)t * n_in, (char *)g->act + (size_t)t * g->act_row_bytes, n_in);
    }
}

/* Rows [b, e) of the groups' weights (concatenated) as hr_matmul's worker
 * computes them for each group alone. */
static void hr_mmg_rows(hr_mmg_job *j, long b, long e) {
    int lo = 0, hi = j->n_g - 1; /* the group holding row b */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (j->g[mid].row0 <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    for (int gi = lo; gi < j->n_g && j->g[gi].row0 < e; gi++) {
        hr_mm_group *g = &j->g[gi];
        const hr_weight *w[2] = {&g->w[0], &g->w[1]};
        hr_mm_job sub = {.n_w = g->n_w,
                         .w = w,
                         .y = g->y,
                         .act = (void *)g->act,
                         .act_row_bytes = g->act_row_bytes,
                         .n_tok = g->n_tok,
                         .k = j->k};
        long rows = g->w[0].n_out + (g->n_w > 1 ? g->w[1].n_out : 0);
        long gb = b > g->row0 ? b - g->row0 : 0, ge = e - g->row0 < rows ? e - g->row0 : rows;
        if (gb < ge)
            hr_mm_dot_rows(&sub, gb, ge);
    }
}

static void hr_mmg_dot_worker(void *ctx, int ith, int nth) {
    hr_mmg_job *j = ctx;
    (void)ith;
    (void)nth;
    for (;;) {
        long b = atomic_fetch_add_explicit(&j->next_row, j->chunk, memory_order_relaxed);
        if (b >= j->total_rows)
            break;
        hr_mmg_rows(j, b, b + j->chunk < j->total_rows ? b + j->chunk : j->total_rows);
    }
}

void hr_matmul_groups(hr_pool *pool, hr_mm_group *g, int n_g, void *wbuf) {
    hr_mmg_job j = {.g = g, .n_g = n_g, .k = hr_kernels_best()};
    char *act = wbuf;
    for (int gi = 0; gi < n_g; gi++) {
        hr_mm_group *x = &g[gi];
        int act_type = hr_type_get(x->w[0].type)->vec_dot_type;
        x->row0 = j.total_rows;
        x->tok0 = j.total_tok;
        j.total_rows += x->w[0].n_out + (x->n_w > 1 ? x->w[1].n_out : 0);
        j.total_tok += x->n_tok;
        if (act_type == HR_TYPE_F32) {
            x->act = x->x;
            x->act_row_bytes = (size_t)x->w[0].n_in * sizeof(float);
        } else {
            x->act = act;
            x->act_row_bytes = hr_type_row_bytes(act_type, x->w[0].n_in);
            act += x->act_row_bytes * (size_t)x->n_tok;
        }
    }
    if (j.total_rows == 0)
        return;
    hr_pool_run(pool, hr_mmg_quant_worker, &j);
    long nth = hr_pool_size(pool);
    j.chunk = (j.total_rows / (nth * 8) + HR_MM_TILE_ROWS - 1) / HR_MM_TILE_ROWS * HR_MM_TILE_ROWS;
    if (j.chunk < HR_MM_TILE_ROWS)
        j.chunk = HR_MM_TILE_ROWS;
    atomic_init(&j.next_row, 0);
    hr_pool_run(pool, hr_mmg_dot_worker, &j);
}

/* ---- groups of SwiGLU feed-forwards (experts of a decode step) ---- */

/* The n rows of x in w's activation format: into buf (returned pointers in
 * a[]), or x itself for float activations. Returns the bytes used. */
static size_t hr_ffg_convert(const hr_kernels *k, const hr_weight *w, const float *x, int n,
                             char *buf, const void **a) {
    int at = hr_type_get(w->type)->vec_dot_type;
    if (at == HR_TYPE_F32) {
        for (int t = 0; t < n; t++)
            a[t] = x + (size_t)t * w->n_in;
        return 0;
    }
    size_t rb = hr_type_row_bytes(at, w->n_in);
    for (int t = 0; t < n; t++) {
        k->quant[at](x + (size_t)t * w->n_in, buf + (size_t)t * rb, w->n_in);
        a[t] = buf + (size_t)t * rb;
    }
    return (rb * (size_t)n + 63) & ~(size_t)63;
}

/* y[t][r] = W[r] . a[t] for every row of w, n columns (<= HR_DOT_N_MAX). */
static void hr_ffg_product(const hr_kernels *k, const hr_weight *w, const void *const *a, int n,
                           float *y) {
    const char *wd = w->data;
    size_t yn = (size_t)w->n_out;
    if (n == 1 && !k->dotn_one[w->type]) {
        hr_vec_dot_fn dot = k->vec_dot[w->type];
        for (int64_t r = 0; r < w->n_out; r++)
            y[r] = dot(w->n_in, wd + (size_t)r * w->row_bytes, a[0]);
        return;
    }
    for (int64_t r0 = 0; r0 < w->n_out; r0 += HR_MM_DOTN_ROWS) {
        int nr = (int)(w->n_out - r0 < HR_MM_DOTN_ROWS ? w->n_out - r0 : HR_MM_DOTN_ROWS);
        hr_vec_dot_n(k, w->type, w->n_in, nr, wd + (size_t)r0 * w->row_bytes, w->row_bytes, a, n,
                     y + r0, yn);
    }
}

static size_t hr_ffg_act_bytes(const hr_weight *w, int n) {
    return (hr_matmul_wbuf_size(w->type, w->n_in, n) + 63) & ~(size_t)63;
}

size_t hr_swiglu_group_wbuf_size(const hr_ffn_group *g) {
    return hr_ffg_act_bytes(&g->gate, g->n_tok) + hr_ffg_act_bytes(&g->up, g->n_tok) +
           hr_ffg_act_bytes(&g->down, g->n_tok);
}

typedef struct {
    hr_ffn_group *g;
    int n_g;
    const hr_kernels *k;
    _Atomic int next;
} hr_ffg_job;

static void hr_ffg_one(const hr_kernels *k, hr_ffn_group *g) {
    const void *a[HR_DOT_N_MAX], *b[HR_DOT_N_MAX];
    char *buf = g->act;
    int n = g->n_tok, ga = hr_type_get(g->gate.type)->vec_dot_type;
    size_t F = (size_t)g->gate.n_out;
    buf += hr_ffg_convert(k, &g->gate, g->x, n, buf, a);
    if ((int)hr_type_get(g->up.type)->vec_dot_type == ga)
        memcpy(b, a, sizeof a);
    else
        buf += hr_ffg_convert(k, &g->up, g->x, n, buf, b);
    hr_ffg_product(k, &g->gate, a, n, g->h);
    hr_ffg_product(k, &g->up, b, n, g->u);
    for (int t = 0; t < n; t++)
        hr_expert_act(g->h + t * F, g->u + t * F, g->b_gate, g->b_up, (int)F, g->oai);
    hr_ffg_convert(k, &g->down, g->h, n, buf, a);
    hr_ffg_product(k, &g->down, a, n, g->y);
    for (int t = 0; g->b_down && t < n; t++)
        hr_add(g->y + (size_t)t * g->down.n_out, g->b_down, (int)g->down.n_out);
}

static void hr_ffg_worker(void *ctx, int ith, int nth) {
    hr_ffg_job *j = ctx;
    (void)ith;
    (void)nth;
    for (int i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_g;)
        hr_ffg_one(j->k, &j->g[i]);
}

void hr_swiglu_groups(hr_pool *pool, hr_ffn_group *g, int n_g) {
    hr_ffg_job j = {.g = g, .n_g = n_g, .k = hr_kernels_best()};
    atomic_init(&j.next, 0);
    if (n_g > 0)
        hr_pool_run(pool, hr_ffg_worker, &j);
}

/* ---- element-wise ---- */

/* As ggml's rms_norm: float squares summed in double, the mean rounded to
 * float, scale = 1/sqrtf(mean + eps) in float. (A double scale rounded once
 * differs in the last bit now and then, and every element moves with it.) */
void hr_rmsnorm(float *out, const float *x, const float *g, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)(x[i] * x[i]);
    const float mean = (float)(ss / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (g) {
        for (int i = 0; i < n; i++)
            out[i] = x[i] * scale * g[i];
    } else {
        for (int i = 0; i < n; i++)
            out[i] = x[i] * scale;
    }
}

void hr_add(float *x, const float *b, int n) {
    for (int i = 0; i < n; i++)
        x[i] += b[i];
}

/* In-place softmax of n values with the extra value sink (-INFINITY: none)
 * in the maximum and the sum. */
static void hr_softmax_with(float *x, int n, float sink) {
    /* eight partial maxima (the maximum does not depend on the order) */
    float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                   -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int i8 = 0;
    for (; i8 + 8 <= n; i8 += 8)
        for (int l = 0; l < 8; l++)
            m8[l] = x[i8 + l] > m8[l] ? x[i8 + l] : m8[l];
    float mx = -INFINITY;
    for (; i8 < n; i8++)
        mx = x[i8] > mx ? x[i8] : mx;
    for (int l = 0; l < 8; l++)
        mx = m8[l] > mx ? m8[l] : mx;
    mx = sink > mx ? sink : mx;
    const hr_kernels *k = hr_kernels_best();
    for (int i = 0; i < n; i++)
        x[i] -= mx;
    k->expf_n(x, x, n);
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += x[i];
    if (sink > -INFINITY)
        sum += expf(sink - mx);
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void hr_softmax(float *x, int n) { hr_softmax_with(x, n, -INFINITY); }

void hr_softmax_sink(float *x, int n, float sink) { hr_softmax_with(x, n, sink); }

void hr_swiglu(float *out, const float *gate, const float *up, int n) {
    const hr_kernels *k = hr_kernels_best();
    float e[256];
    for (int i0 = 0; i0 < n; i0 += 256) {
        const int m = n - i0 < 256 ? n - i0 : 256;
        for (int j = 0; j < m; j++)
            e[j] = -gate[i0 + j];
        k->expf_n(e, e, m);
        for (int j = 0; j < m; j++) {
            const float g = gate[i0 + j];
            out[i0 + j] = g / (1.0f + e[j]) * up[i0 + j];
        }
    }
}

void hr_expert_act(float *h, float *u, const float *b_gate, const float *b_up, int n, bool oai) {
    if (b_gate)
        hr_add(h, b_gate, n);
    if (b_up)
        hr_add(u, b_up, n);
    if (oai)
        hr_swiglu_oai(h, h, u, n, 1.702f, 7.0f);
    else
        hr_swiglu(h, h, u, n);
}

void hr_swiglu_oai(float *out, const float *gate, const float *up, int n, float alpha,
                   float limit) {
    const hr_kernels *k = hr_kernels_best();
    float e[256];
    for (int i0 = 0; i0 < n; i0 += 256) {
        const int m = n - i0 < 256 ? n - i0 : 256;
        for (int j = 0; j < m; j++) {
            const float g = gate[i0 + j] < limit ? gate[i0 + j] : limit;
            e[j] = alpha * -g;
        }
        k->expf_n(e, e, m);
        for (int j = 0; j < m; j++) {
            const float g = gate[i0 + j] < limit ? gate[i0 + j] : limit;
            const float u = up[i0 + j] < -limit ? -limit : up[i0 + j] > limit ? limit : up[i0 + j];
            out[i0 + j] = g / (1.0f + e[j]) * (u + 1.0f);
        }
    }
}

void hr_geglu(float *out, const float *gate, const float *up, int n) {
    /* gelu(x) = 0.5 x (1 + tanh(z)) = x / (1 + exp(-2z)),
     * z = sqrt(2/pi) (x + 0.044715 x^3) */
    const hr_kernels *k = hr_kernels_best();
    float e[256];
    for (int i0 = 0; i0 < n; i0 += 256) {
        const int m = n - i0 < 256 ? n - i0 : 256;
        for (int j = 0; j < m; j++) {
            const float x = gate[i0 + j];
            e[j] = -2.0f * 0.7978845608f * x * (1.0f + 0.044715f * x * x);
        }
        k->expf_n(e, e, m);
        for (int j = 0; j < m; j++)
            out[i0 + j] = gate[i0 + j] / (1.0f + e[j]) * up[i0 + j];
    }
}

void hr_rope(float *x, int n_heads, int head_dim, int pos, const hr_rope_params *rp) {
    int half = rp->n_rot / 2;
    /* theta_i = pos * base^(-2i/n_rot), built by repeated multiplication in
     * f32 as llama.cpp does, so both engines rotate by identical angles. */
    const float theta_scale = powf(rp->freq_base, -2.0f / (float)rp->n_rot);
    const float scale = rp->freq_scale > 0.0f ? rp->freq_scale : 1.0f;
    const float mscale = rp->mscale > 0.0f ? rp->mscale : 1.0f;
    float theta_base = (float)pos;
    for (int i = 0; i < half; i++, theta_base *= theta_scale) {
        float theta_x = theta_base; /* unscaled (extrapolated) */
        if (rp->freq_factors)
            theta_x /= rp->freq_factors[i];
        float theta = theta_x * scale;
        if (rp->ext_factor != 0.0f) { /* YaRN's ramp over the pair index */
            float y = ((float)i - rp->corr[0]) /
                      (rp->corr[1] - rp->corr[0] > 0.001f ? rp->corr[1] - rp->corr[0] : 0.001f);
            float ramp = 1.0f - (y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y);
            float mix = ramp * rp->ext_factor;
            theta = theta * (1.0f - mix) + theta_x * mix;
        }
        float c = cosf(theta) * mscale, s = sinf(theta) * mscale;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            int i0 = rp->neox ? i : 2 * i;
            int i1 = rp->neox ? i + half : 2 * i + 1;
            float a = v[i0], b = v[i1];
            v[i0] = a * c - b * s;
            v[i1] = a * s + b * c;
        }
    }
}

/* ---- attention ---- */

typedef struct {
    const hr_attn_args *a;
    const hr_attn_row *rows; /* per token (hr_attention_rows), or NULL */
    const float *q;
    float *out;
    int n_tok, pos0;
    int group;           /* query heads per work item (of one KV head) */
    const hr_kernels *k; /* f16 dot products, several rows per call */
} hr_attn_job;

/* query heads that share a KV head and go through the dot products
 * together (each head's values do not depend on the grouping) */
static int hr_attn_group_max(int n_head, int n_kv) {
    int hpk = n_head / n_kv;
    return hpk < HR_DOT_N_MAX ? hpk : HR_DOT_N_MAX;
}

size_t hr_attn_scratch_floats(int n_threads, int n_head, int n_kv, int head_dim, int n_ctx) {
    return (size_t)n_threads * (size_t)hr_attn_group_max(n_head, n_kv) *
           ((size_t)n_ctx + (size_t)head_dim);
}

/* Query heads h0 .. h0 + nh - 1 (nh <= HR_DOT_N_MAX, all of one KV head) of
 * one token at position pos over the cache k/vt (its window of it): q and o point at the
 * token's [n_head * hd] query and output. The keys are read once for all
 * nh heads (one vec_dot_n with nh columns), and so are the value rows.
 * sc: nh * (n_ctx + hd) floats of scratch. */
static void hr_attn_heads(const hr_attn_job *j, const uint16_t *k, const uint16_t *vt,
                          const float *q, float *o, int pos, int h0, int nh, float *sc) {
    const hr_attn_args *a = j->a;
    int hd = a->head_dim, kvh = h0 / (a->n_head / a->n_kv);
    int kv_stride = a->n_kv * hd;
    float scale = a->scale > 0.0f ? a->scale : 1.0f / sqrtf((float)hd);
    int p0 = a->window > 0 && pos >= a->window ? pos - a->window + 1 : 0, n_pos = pos + 1 - p0;
    float *qh = sc + (size_t)nh * a->n_ctx;
    const void *col[HR_DOT_N_MAX] = {0};
    for (int g = 0; g < nh; g++) {
        /* Q is rounded to f16 like the cache it meets (as llama.cpp does
         * with an F16 KV cache), so logits track that engine closely. */
        const float *qg = q + (size_t)(h0 + g) * hd;
        float *qr = qh + (size_t)g * hd;
        uint16_t h16[256];
        for (int d0 = 0; d0 < hd; d0 += 256) {
            const int dn = hd - d0 < 256 ? hd - d0 : 256;
            j->k->quant[HR_TYPE_F16](qg + d0, h16, dn);
            j->k->dequant[HR_TYPE_F16](h16, qr + d0, dn);
        }
        col[g] = qr;
    }
    /* the cached keys and value rows as rows of an f16 matrix: the table's
     * vec_dot_n keeps several rows' chains in flight, each row's value
     * bit for bit its vec_dot */
    hr_vec_dot_n(j->k, HR_TYPE_F16, hd, n_pos, k + (size_t)p0 * kv_stride + (size_t)kvh * hd,
                 (size_t)kv_stride * 2, col, nh, sc, (size_t)a->n_ctx);
    for (int g = 0; g < nh; g++) {
        float *s = sc + (size_t)g * a->n_ctx;
        for (int p = 0; p < n_pos; p++)
            s[p] *= scale;
        if (a->sinks)
            hr_softmax_sink(s, n_pos, a->sinks[h0 + g]);
        else
            hr_softmax(s, n_pos);
        col[g] = s;
    }
    hr_vec_dot_n(j->k, HR_TYPE_F16, n_pos, hd, vt + (size_t)kvh * hd * a->n_ctx + p0,
                 (size_t)a->n_ctx * 2, col, nh, o + (size_t)h0 * hd, (size_t)hd);
}

static void hr_attn_worker(void *ctx, int ith, int nth) {
    hr_attn_job *j = ctx;
    const hr_attn_args *a = j->a;
    int hd = a->head_dim, q_stride = a->n_head * hd, hpk = a->n_head / a->n_kv;
    int n_sub = (hpk + j->group - 1) / j->group, per_tok = a->n_kv * n_sub;
    float *sc =
        a->scratch + (size_t)ith * hr_attn_scratch_floats(1, a->n_head, a->n_kv, hd, a->n_ctx);
    long n_items = (long)j->n_tok * per_tok;
    for (long it = ith; it < n_items; it += nth) {
        int t = (int)(it / per_tok), rem = (int)(it % per_tok);
        int h0 = (rem / n_sub) * hpk + (rem % n_sub) * j->group;
        int nh = hpk - (rem % n_sub) * j->group;
        nh = nh < j->group ? nh : j->group;
        size_t off = (size_t)t * q_stride;
        if (j->rows)
            hr_attn_heads(j, j->rows[t].k, j->rows[t].vt, j->q + off, j->out + off, j->rows[t].pos,
                          h0, nh, sc);
        else
            hr_attn_heads(j, a->k, a->vt, j->q + off, j->out + off, j->pos0 + t, h0, nh, sc);
    }
}

/* whole groups of a KV head's query heads, split while that leaves a
 * thread without two work items (single-token decode on many cores) */
static void hr_attn_run(hr_pool *pool, hr_attn_job *j) {
    const hr_attn_args *a = j->a;
    int g = hr_attn_group_max(a->n_head, a->n_kv), hpk = a->n_head / a->n_kv;
    long want = 2L * hr_pool_size(pool);
    while (g > 1 && (long)j->n_tok * a->n_kv * ((hpk + g - 1) / g) < want)
        g = (g + 1) / 2;
    j->group = g;
    j->k = hr_kernels_best();
    hr_pool_run(pool, hr_attn_worker, j);
}

void hr_attention(hr_pool *pool, const hr_attn_args *a, const float *q, int n_tok, int pos0,
                  float *out) {
    hr_attn_job j = {.a = a, .q = q, .out = out, .n_tok = n_tok, .pos0 = pos0};
    hr_attn_run(pool, &j);
}

void hr_attention_rows(hr_pool *pool, const hr_attn_args *a, const hr_attn_row *rows,
                       const float *q, int n_tok, float *out) {
    hr_attn_job j = {.a = a, .rows = rows, .q = q, .out = out, .n_tok = n_tok};
    hr_attn_run(pool, &j);
}
