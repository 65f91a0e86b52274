/* tp.c - tensor-parallel forward pass over a layer window: each thread
 * group runs layer.c's blocks over its slice of every layer (cut as the
 * tensor table's split column says; node-local copies or views of the
 * mapping) with its own KV cache, and the groups meet at global barriers
 * between the blocks: exchanging activations (exact split) or summing
 * partial outputs in the same order into each group's replica of the
 * hidden state (reduce split). See tp.h. */
#include "model/tp-impl.h"

#include "model/layer-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG "tp"

/* ---- split plan ---- */

static long hr_gcd(long a, long b) {
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int hr_tp_check(const hr_tp_shape *s, int n_groups, char *err) {
    if (n_groups < 1 || n_groups > HR_NUMA_MAX_GROUPS)
        return hr_seterr(err, HR_EINVAL, "%d groups; 1..%d supported", n_groups,
                         HR_NUMA_MAX_GROUPS);
    if (s->n_head <= 0 || s->n_head_kv <= 0 || s->head_dim <= 0 || s->n_ff <= 0 || s->n_embd <= 0 ||
        s->n_head % s->n_head_kv)
        return hr_seterr(err, HR_EINVAL, "cannot split heads %d/%d (head_dim %d), ffn %d",
                         s->n_head, s->n_head_kv, s->head_dim, s->n_ff);
    const hr_type_traits *to = hr_type_get(s->type_wo), *td = hr_type_get(s->type_down);
    if (!to || !td || !to->supported || !td->supported)
        return hr_seterr(err, HR_EUNSUPPORTED, "Wo type %d / Wdown type %d not supported",
                         s->type_wo, s->type_down);
    if (!s->reduce)
        return 0; /* row splits need no block alignment */
    if ((long)s->n_head * s->head_dim % to->block_elems)
        return hr_seterr(err, HR_EUNSUPPORTED, "Wo rows of %d are not whole %s blocks",
                         s->n_head * s->head_dim, to->name);
    if (s->n_ff % td->block_elems)
        return hr_seterr(err, HR_EUNSUPPORTED, "Wdown rows of %d are not whole %s blocks", s->n_ff,
                         td->name);
    return 0;
}

int hr_tp_head_unit(const hr_tp_shape *s) {
    if (hr_tp_check(s, 1, NULL))
        return 0;
    if (!s->reduce)
        return 1;
    long blk = hr_type_get(s->type_wo)->block_elems;
    long cols = (long)(s->n_head / s->n_head_kv) * s->head_dim; /* Wo columns per KV head */
    return (int)(blk / hr_gcd(blk, cols));
}

int hr_tp_split(const hr_tp_shape *s, int n_groups, hr_tp_slice *out, char err[HR_ERR_LEN]) {
    int rc = hr_tp_check(s, n_groups, err);
    if (rc)
        return rc;
    long unit = hr_tp_head_unit(s);
    long fblk = s->reduce ? hr_type_get(s->type_down)->block_elems : 1;
    for (int g = 0; g < n_groups; g++) {
        long b, e;
        hr_split_range(s->n_head_kv, g, n_groups, unit, &b, &e);
        out[g].kv_begin = (int)b;
        out[g].kv_end = (int)e;
        /* FFN parts in reverse group order: the first groups get the extra heads */
        hr_split_range(s->n_ff, n_groups - 1 - g, n_groups, fblk, &b, &e);
        out[g].ff_begin = (int)b;
        out[g].ff_end = (int)e;
        if (s->reduce) {
            out[g].out_begin = 0;
            out[g].out_end = s->n_embd;
        } else {
            hr_split_range(s->n_embd, g, n_groups, 4, &b, &e);
            out[g].out_begin = (int)b;
            out[g].out_end = (int)e;
        }
    }
    return 0;
}

/* ---- executor ---- */

typedef struct {
    void *ptr;
    size_t bytes;
} hr_tp_alloc;

typedef struct {
    hr_layer_part part; /* the group's slice of the layer and its KV cache */
    hr_tp_slice s;      /* what the slice covers */
} hr_tp_layer;

typedef struct {
    hr_tp_layer *L;   /* [n window layers] */
    hr_layer_env env; /* the group's pool and work buffers */
    float *hid;       /* [B][E] replica of the hidden state (groups >= 1) */
    float *part[2];   /* [B][E] partial outputs of Wo and Wdown */
    hr_weight out;    /* LM head rows [v0, v1) */
    int v0, v1;
    hr_tp_alloc *allocs;
    int n_allocs, cap_allocs;
    double compute_s[2], barrier_s[2];
    uint64_t weight_bytes;
} hr_tp_group;

struct hr_tp {
    hr_tp_model m;
    hr_gpool *gp;
    int G, layer_begin, nl, n_ctx, n_batch;
    bool copies;
    bool reduce; /* column split + partial sums (else exact row split + exchange) */
    /* exact mode: exchanged activations, [B][H*D], [B][E], [B][F], [B][E] */
    float *att_full, *wo_full, *gate_full, *down_full;
    size_t mem;
    hr_tp_group g[HR_NUMA_MAX_GROUPS];
    /* the job in flight */
    float *hidden;
    const float *chidden;
    float *logits;
    const hr_layer_rows *R; /* the step's rows: one run of slot 0 */
    int n, row0;
    hr_phase ph;
    int64_t tokens[2], calls[2], barriers[2];
};

static void *hr_tp_take(hr_tp *tp, int g, size_t bytes) {
    hr_tp_group *gr = &tp->g[g];
    if (gr->n_allocs == gr->cap_allocs) {
        int cap = gr->cap_allocs ? 2 * gr->cap_allocs : 32;
        hr_tp_alloc *na = realloc(gr->allocs, (size_t)cap * sizeof *na);
        if (!na)
            return NULL;
        gr->allocs = na;
        gr->cap_allocs = cap;
    }
    void *p = hr_gpool_alloc(tp->gp, g, bytes);
    if (!p)
        return NULL;
    gr->allocs[gr->n_allocs++] = (hr_tp_alloc){p, bytes};
    tp->mem += bytes;
    return p;
}

/* Rows [r0, r1) of w: a view, or a copy in group g's memory. */
static int hr_tp_rows(hr_tp *tp, int g, const hr_weight *w, long r0, long r1, hr_weight *out) {
    *out = *w;
    out->n_out = r1 - r0;
    const char *src = (const char *)w->data + (size_t)r0 * w->row_bytes;
    size_t bytes = (size_t)(r1 - r0) * w->row_bytes;
    tp->g[g].weight_bytes += bytes;
    if (r1 <= r0) {
        out->data = NULL;
        return 0;
    }
    if (!tp->copies) {
        out->data = src;
        hr_gpool_bind_area(tp->gp, g, src, bytes);
        return 0;
    }
    void *dst = hr_tp_take(tp, g, bytes);
    if (!dst)
        return HR_ENOMEM;
    memcpy(dst, src, bytes);
    out->data = dst;
    return 0;
}

/* Columns [c0, c1) of w (block-aligned): a strided view or a compact copy. */
static int hr_tp_cols(hr_tp *tp, int g, const hr_weight *w, long c0, long c1, hr_weight *out) {
    *out = *w;
    out->n_in = c1 - c0;
    if (c1 <= c0) {
        out->data = NULL;
        return 0;
    }
    size_t off = hr_type_row_bytes(w->type, c0), len = hr_type_row_bytes(w->type, c1 - c0);
    if (len == 0 || (c0 > 0 && off == 0))
        return HR_EINTERNAL; /* the split plan guarantees whole blocks */
    tp->g[g].weight_bytes += len * (size_t)w->n_out;
    if (!tp->copies) {
        out->data = (const char *)w->data + off;
        return 0;
    }
    char *dst = hr_tp_take(tp, g, len * (size_t)w->n_out);
    if (!dst)
        return HR_ENOMEM;
    for (int64_t r = 0; r < w->n_out; r++)
        memcpy(dst + (size_t)r * len, (const char *)w->data + (size_t)r * w->row_bytes + off, len);
    out->data = dst;
    out->row_bytes = len;
    return 0;
}

/* [a, b) of dimension d that slice s covers (whole for unsplit ones). */
static void hr_tp_range(const hr_hparams *hp, const hr_tp_slice *s, hr_dim d, long *a, long *b) {
    long D = hp->head_dim, r = hp->n_head / hp->n_head_kv;
    *a = 0;
    *b = (long)hr_dim_size(hp, d);
    if (d == HR_DIM_Q || d == HR_DIM_KV) {
        long per = d == HR_DIM_Q ? r * D : D; /* elements per KV head */
        *a = s->kv_begin * per;
        *b = s->kv_end * per;
    } else if (d == HR_DIM_FF) {
        *a = s->ff_begin;
        *b = s->ff_end;
    } else if (d == HR_DIM_EMBD) {
        *a = s->out_begin;
        *b = s->out_end;
    }
}

/* Group g's slice of tensor t of L into P, as t->split says: vectors (f32
 * in the model) become views of their elements, matrices rows (or columns
 * of Wo/Wdown when reducing) through hr_tp_rows / hr_tp_cols. */
static int hr_tp_cut(hr_tp *tp, int g, const hr_layer_tensor *t, const hr_layer_weights *L,
                     const hr_tp_slice *s, hr_layer_weights *P) {
    const hr_weight *w = hr_layer_weight(L, t);
    hr_weight *out = hr_layer_weight_mut(P, t);
    *out = *w;
    if (!w->data || t->split == HR_SPLIT_NONE)
        return 0;
    long a, b;
    if (t->n_out == HR_DIM_1) {
        hr_tp_range(tp->m.hp, s, t->n_in, &a, &b);
        out->data = (const float *)w->data + a;
        out->n_in = b - a;
        out->row_bytes = (size_t)(b - a) * sizeof(float);
        return 0;
    }
    if (t->split == HR_SPLIT_OUT && tp->reduce) {
        hr_tp_range(tp->m.hp, s, t->n_in, &a, &b);
        return hr_tp_cols(tp, g, w, a, b, out);
    }
    hr_tp_range(tp->m.hp, s, t->n_out, &a, &b);
    return hr_tp_rows(tp, g, w, a, b, out);
}

static bool hr_tp_want_copies(const hr_tp *tp, const hr_ctx_params *p, uint64_t bytes) {
    if (p->tp_copy >= 0)
        return p->tp_copy > 0;
    if (!hr_gpool_binds_memory(tp->gp))
        return false; /* one node: copies would only cost RAM */
    long pages = sysconf(_SC_AVPHYS_PAGES), ps = sysconf(_SC_PAGESIZE);
    double avail = pages > 0 && ps > 0 ? (double)pages * (double)ps : 0.0;
    bool ok = (double)bytes * 1.25 + (256.0 * 1048576.0) < avail;
    if (!ok)
        HR_LOG_INFO(TAG,
                    "%.0f MiB of weight slices do not fit in %.0f MiB of free RAM; "
                    "binding the mapped pages instead of copying",
                    (double)bytes / 1048576.0, avail / 1048576.0);
    return ok;
}

void hr_tp_destroy(hr_tp *tp) {
    if (!tp)
        return;
    for (int g = 0; g < tp->G; g++) {
        hr_tp_group *gr = &tp->g[g];
        for (int i = 0; i < gr->n_allocs; i++)
            hr_gpool_free(tp->gp, g, gr->allocs[i].ptr, gr->allocs[i].bytes);
        free(gr->allocs);
        free(gr->L);
    }
    hr_gpool_destroy(tp->gp);
    free(tp);
}

/* Group g's part of window layer li: its tensor slices and KV cache. */
static int hr_tp_layer_init(hr_tp *tp, int g, int li, const hr_tp_slice *s) {
    const hr_hparams *hp = tp->m.hp;
    hr_tp_layer *S = &tp->g[g].L[li];
    S->s = *s;
    S->part.n_kv = s->kv_end - s->kv_begin;
    S->part.n_ff = s->ff_end - s->ff_begin;
    S->part.swa = hr_hparams_layer_swa(hp, tp->layer_begin + li);
    for (int i = 0; i < hr_layer_tensor_count(); i++) {
        int rc = hr_tp_cut(tp, g, hr_layer_tensor_get(i), &tp->m.layers[tp->layer_begin + li], s,
                           &S->part.w);
        if (rc)
            return rc;
    }
    if (S->part.n_kv > 0) {
        size_t kv_bytes =
            (size_t)tp->n_ctx * (size_t)S->part.n_kv * hp->head_dim * sizeof(uint16_t);
        S->part.k = hr_tp_take(tp, g, kv_bytes);
        S->part.vt = hr_tp_take(tp, g, kv_bytes);
        if (!S->part.k || !S->part.vt)
            return HR_ENOMEM;
    }
    return 0;
}

typedef struct {
    hr_tp *tp;
    int g;
} hr_tp_buf_ctx;

/* A work buffer in group g's memory (hr_layer_alloc_fn). */
static void *hr_tp_buf(void *ud, size_t bytes) {
    hr_tp_buf_ctx *b = ud;
    return hr_tp_take(b->tp, b->g, bytes);
}

/* Group g's slices, LM head rows and work buffers. */
static int hr_tp_group_init(hr_tp *tp, int g, const hr_tp_slice *slices, char *err) {
    const hr_hparams *hp = tp->m.hp;
    hr_tp_group *gr = &tp->g[g];
    int B = tp->n_batch, max_kv = 0, max_f = 0, rc = 0;
    size_t wb = 0;
    for (int li = 0; li < tp->nl && rc == 0; li++) {
        rc = hr_tp_layer_init(tp, g, li, &slices[(size_t)li * tp->G + g]);
        const hr_layer_part *P = &gr->L[li].part;
        max_kv = P->n_kv > max_kv ? P->n_kv : max_kv;
        max_f = P->n_ff > max_f ? P->n_ff : max_f;
        wb = hr_layer_wbuf_size(&P->w, B, wb);
    }
    if (rc == HR_ENOMEM)
        return hr_seterr(err, rc, "out of memory for group %d's weight slices and KV cache", g);
    if (rc)
        return hr_seterr(err, rc, "group %d: a column slice is not block-aligned", g);
    long v0, v1;
    hr_split_range(hp->n_vocab, g, tp->G, 16, &v0, &v1);
    gr->v0 = (int)v0;
    gr->v1 = (int)v1;
    if ((rc = hr_tp_rows(tp, g, tp->m.output, v0, v1, &gr->out)))
        return hr_seterr(err, rc, "out of memory for group %d's LM head slice", g);
    if (gr->out.data) {
        size_t wo = hr_matmul_wbuf_size(gr->out.type, gr->out.n_in, 1);
        wb = wo > wb ? wo : wb;
    }
    hr_pool *pool = hr_gpool_group(tp->gp, g);
    gr->env =
        (hr_layer_env){.hp = hp, .rope_freqs = tp->m.rope_freqs, .n_ctx = tp->n_ctx, .pool = pool};
    hr_tp_buf_ctx bc = {tp, g};
    size_t E = (size_t)hp->n_embd;
    gr->hid = g > 0 ? hr_tp_take(tp, g, (size_t)B * E * 4) : NULL;
    rc = hr_layer_env_alloc(&gr->env, B, max_kv, max_f, hr_pool_size(pool), wb, hr_tp_buf, &bc);
    gr->part[0] = hr_tp_take(tp, g, (size_t)B * E * 4);
    gr->part[1] = hr_tp_take(tp, g, (size_t)B * E * 4);
    if ((g > 0 && !gr->hid) || rc || !gr->part[0] || !gr->part[1])
        return hr_seterr(err, HR_ENOMEM, "out of memory for group %d's work buffers", g);
    return 0;
}

int hr_tp_create(hr_tp **out, const hr_tp_model *m, const hr_ctx_params *p, char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_gpool_params gpp = hr_gpool_params_default();
    gpp.n_groups = p->n_groups < 0 ? 0 : p->n_groups;
    gpp.domain = p->group_l3 ? HR_NUMA_DOMAIN_L3 : HR_NUMA_DOMAIN_NODE;
    gpp.n_threads = p->n_threads;
    gpp.n_threads_decode = p->n_threads_decode;
    gpp.topology = p->topology;
    hr_tp *tp = calloc(1, sizeof *tp);
    if (!tp)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    tp->m = *m;
    int rc = hr_gpool_create(&tp->gp, &gpp, err);
    if (rc) {
        free(tp);
        return rc;
    }
    tp->G = hr_gpool_n_groups(tp->gp);
    if (tp->G < 2) {
        hr_tp_destroy(tp);
        return 0; /* one group: the caller runs plainly */
    }
    tp->layer_begin = p->layer_begin;
    tp->nl = p->layer_end - p->layer_begin;
    tp->n_ctx = p->n_ctx;
    tp->n_batch = p->n_batch;
    tp->reduce = p->tp_reduce;
    const hr_hparams *hp = m->hp;
    hr_tp_slice *slices = calloc((size_t)(tp->nl > 0 ? tp->nl : 1) * tp->G, sizeof *slices);
    if (!slices) {
        hr_tp_destroy(tp);
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    }
    uint64_t bytes = (uint64_t)m->output->row_bytes * (uint64_t)m->output->n_out;
    for (int li = 0; li < tp->nl && rc == 0; li++) {
        const hr_layer_weights *L = &m->layers[tp->layer_begin + li];
        hr_tp_shape s = {.n_embd = hp->n_embd,
                         .reduce = tp->reduce,
                         .n_head = hp->n_head,
                         .n_head_kv = hp->n_head_kv,
                         .head_dim = hp->head_dim,
                         .n_ff = hp->n_ff,
                         .type_wo = L->wo.type,
                         .type_down = L->w_down.type};
        char e2[HR_ERR_LEN] = "";
        rc = hr_tp_split(&s, tp->G, slices + (size_t)li * tp->G, e2);
        if (rc)
            hr_seterr(err, rc, "layer %d cannot be split over %d groups: %s", tp->layer_begin + li,
                      tp->G, e2);
        bytes += hr_layer_bytes(L, false); /* the matrices slices may copy */
    }
    tp->copies = rc == 0 && hr_tp_want_copies(tp, p, bytes);
    if (rc == 0 && !tp->reduce) {
        size_t B = (size_t)tp->n_batch, E = (size_t)hp->n_embd;
        tp->att_full = hr_tp_take(tp, 0, B * (size_t)hp->n_head * hp->head_dim * 4);
        tp->wo_full = hr_tp_take(tp, 0, B * E * 4);
        tp->gate_full = hr_tp_take(tp, 0, B * (size_t)hp->n_ff * 4);
        tp->down_full = hr_tp_take(tp, 0, B * E * 4);
        if (!tp->att_full || !tp->wo_full || !tp->gate_full || !tp->down_full)
            rc = hr_seterr(err, HR_ENOMEM, "out of memory for the exchange buffers");
    }
    for (int g = 0; g < tp->G && rc == 0; g++) {
        tp->g[g].L = calloc((size_t)(tp->nl > 0 ? tp->nl : 1), sizeof *tp->g[g].L);
        rc = tp->g[g].L ? hr_tp_group_init(tp, g, slices, err)
                        : hr_seterr(err, HR_ENOMEM, "out of memory");
    }
    free(slices);
    if (rc) {
        hr_tp_destroy(tp);
        return rc;
    }
    HR_LOG_INFO(TAG, "layers [%d, %d) over %d groups (%s split, %s slices, %.1f MiB)",
                p->layer_begin, p->layer_end, tp->G, tp->reduce ? "reduce" : "exact",
                tp->copies ? "copied" : "mapped", (double)tp->mem / 1048576.0);
    *out = tp;
    return 0;
}

size_t hr_tp_memory(const hr_tp *tp) { return tp->mem; }
hr_pool *hr_tp_pool0(hr_tp *tp) { return hr_gpool_group(tp->gp, 0); }
int hr_tp_n_groups(const hr_tp *tp) { return tp->G; }

/* ---- forward ---- */

typedef struct {
    hr_tp *tp;
    float *hid;
    int which, li, n;
} hr_tp_gather_job;

/* hid[t][i] += sum over groups with work, in group order, of part[t][i]. */
static void hr_tp_gather_worker(void *ctx, int ith, int nth) {
    hr_tp_gather_job *j = ctx;
    hr_tp *tp = j->tp;
    long total = (long)j->n * tp->m.hp->n_embd, b, e;
    hr_split_range(total, ith, nth, 16, &b, &e);
    const float *src[HR_NUMA_MAX_GROUPS];
    int ns = 0;
    for (int g = 0; g < tp->G; g++) {
        const hr_layer_part *P = &tp->g[g].L[j->li].part;
        if (j->which == 0 ? P->n_kv > 0 : P->n_ff > 0)
            src[ns++] = tp->g[g].part[j->which];
    }
    if (ns == 0)
        return;
    for (long i = b; i < e; i++) {
        float s = src[0][i];
        for (int k = 1; k < ns; k++)
            s += src[k][i];
        j->hid[i] += s;
    }
}

static void hr_tp_barrier(hr_tp *tp, hr_tp_group *gr) {
    double t0 = hr_now_s();
    hr_gpool_barrier(tp->gp);
    gr->barrier_s[tp->ph] += hr_now_s() - t0;
}

static void hr_tp_sync(hr_tp *tp, hr_tp_group *gr, float *hid, int which, int li, int n) {
    hr_tp_barrier(tp, gr);
    hr_tp_gather_job j = {.tp = tp, .hid = hid, .which = which, .li = li, .n = n};
    if ((long)n * tp->m.hp->n_embd >= 16384)
        hr_pool_run(gr->env.pool, hr_tp_gather_worker, &j);
    else
        hr_tp_gather_worker(&j, 0, 1);
}

/* Exact mode: rows [out_begin, out_end) of w over the exchanged input x
 * ([n][w.n_in]) into out ([n][E]) at those columns; then, after a barrier,
 * hid += out. */
static void hr_tp_rows_out(hr_tp *tp, hr_tp_group *gr, const hr_tp_layer *S, const hr_weight *w,
                           const float *x, float *out, float *hid, int n) {
    int E = tp->m.hp->n_embd, e0 = S->s.out_begin, R = S->s.out_end - e0;
    if (R > 0) {
        float *y = n == 1 ? out + e0 : gr->part[0];
        hr_layer_matmul(&gr->env, w, x, y, n, tp->R);
        for (int t = 0; t < n && n > 1; t++)
            memcpy(out + (size_t)t * E + e0, y + (size_t)t * R, (size_t)R * sizeof(float));
    }
    hr_tp_barrier(tp, gr);
    hr_layer_residual(hid, out, n, E); /* the order of plain execution's residual */
}

/* A group's window job: the group and the executor (hr_layer_join.ud). */
typedef struct {
    hr_tp *tp;
    hr_tp_group *gr;
} hr_tp_run;

/* After the group's heads of the attention block: its partial Wo output
 * summed over the groups (reduce), or its heads' output published, and
 * its rows of Wo over every head's output (exact). */
static void hr_tp_attn_join(void *ud, const hr_layer_part *P, float *hid, int li) {
    hr_tp_run *r = ud;
    hr_tp *tp = r->tp;
    hr_tp_group *gr = r->gr;
    const hr_layer_env *e = &gr->env;
    int n = tp->n;
    if (tp->reduce) {
        if (P->n_kv > 0)
            hr_layer_matmul(e, &P->w.wo, e->att, gr->part[0], n, tp->R);
        hr_tp_sync(tp, gr, hid, 0, li, n);
        return;
    }
    const hr_tp_layer *S = &gr->L[li];
    const hr_hparams *hp = tp->m.hp;
    int rh = hp->n_head / hp->n_head_kv, D = hp->head_dim, HD = hp->n_head * D;
    int QD = P->n_kv * rh * D;
    for (int t = 0; t < n && P->n_kv > 0; t++)
        memcpy(tp->att_full + (size_t)t * HD + (size_t)S->s.kv_begin * rh * D,
               e->att + (size_t)t * QD, (size_t)QD * sizeof(float));
    hr_tp_barrier(tp, gr); /* every head's output is in att_full */
    hr_tp_rows_out(tp, gr, S, &P->w.wo, tp->att_full, tp->wo_full, hid, n);
}

/* After the group's rows of the feed-forward block: its partial Wdown
 * output summed (reduce), or its SwiGLU slice published and its rows of
 * Wdown over the whole (exact). */
static void hr_tp_ffn_join(void *ud, const hr_layer_part *P, float *hid, int li) {
    hr_tp_run *r = ud;
    hr_tp *tp = r->tp;
    hr_tp_group *gr = r->gr;
    const hr_layer_env *e = &gr->env;
    int n = tp->n;
    if (tp->reduce) {
        if (P->n_ff > 0)
            hr_layer_matmul(e, &P->w.w_down, e->gate, gr->part[1], n, tp->R);
        hr_tp_sync(tp, gr, hid, 1, li, n);
        return;
    }
    const hr_tp_layer *S = &gr->L[li];
    int F = P->n_ff, FF = tp->m.hp->n_ff;
    for (int t = 0; t < n && F > 0; t++)
        memcpy(tp->gate_full + (size_t)t * FF + S->s.ff_begin, e->gate + (size_t)t * F,
               (size_t)F * sizeof(float));
    hr_tp_barrier(tp, gr); /* the whole SwiGLU output is in gate_full */
    hr_tp_rows_out(tp, gr, S, &P->w.w_down, tp->gate_full, tp->down_full, hid, n);
}

static void hr_tp_layers_job(void *ctx, int g, int n_groups) {
    (void)n_groups;
    hr_tp *tp = ctx;
    hr_tp_group *gr = &tp->g[g];
    int n = tp->n, E = tp->m.hp->n_embd;
    double t0 = hr_now_s(), b0 = gr->barrier_s[tp->ph];
    float *hid = tp->hidden; /* [n][E] */
    if (g > 0) {             /* scatter: each group works on its own replica */
        hid = gr->hid;
        memcpy(hid, tp->hidden, (size_t)n * E * sizeof(float));
    }
    hr_tp_run r = {.tp = tp, .gr = gr};
    hr_layer_join j = {.attn = hr_tp_attn_join, .ffn = hr_tp_ffn_join, .ud = &r};
    hr_layer_window(&gr->env, &gr->L[0].part, sizeof *gr->L, tp->nl, hid, NULL, n, tp->R, &j);
    gr->compute_s[tp->ph] += hr_now_s() - t0 - (gr->barrier_s[tp->ph] - b0);
}

void hr_tp_layers(hr_tp *tp, float *hidden, int n, const hr_layer_rows *R) {
    tp->ph = n == 1 ? HR_PHASE_DECODE : HR_PHASE_PREFILL;
    hr_gpool_set_phase(tp->gp, tp->ph);
    tp->hidden = hidden;
    tp->n = n;
    tp->R = R;
    hr_gpool_run(tp->gp, hr_tp_layers_job, tp);
    tp->tokens[tp->ph] += n;
    tp->calls[tp->ph]++;
    tp->barriers[tp->ph] += (tp->reduce ? 2 : 4) * tp->nl;
}

static void hr_tp_output_job(void *ctx, int g, int n_groups) {
    (void)n_groups;
    hr_tp *tp = ctx;
    hr_tp_group *gr = &tp->g[g];
    if (gr->v1 <= gr->v0)
        return;
    const hr_hparams *hp = tp->m.hp;
    int E = hp->n_embd, len = 1;
    hr_layer_rows one = {.run_len = &len, .n_runs = 1};
    for (int t = 0; t < tp->n; t++) {
        hr_rmsnorm(gr->env.xb, tp->chidden + (size_t)(tp->row0 + t) * E, tp->m.output_norm, E,
                   hp->rms_eps);
        float *y = tp->logits + (size_t)t * hp->n_vocab + gr->v0;
        hr_layer_matmul(&gr->env, &gr->out, gr->env.xb, y, 1, &one);
    }
}

void hr_tp_output(hr_tp *tp, const float *hidden, int row0, int n_rows, float *logits) {
    tp->chidden = hidden;
    tp->row0 = row0;
    tp->n = n_rows;
    tp->logits = logits;
    hr_gpool_run(tp->gp, hr_tp_output_job, tp);
}

void hr_tp_get_stats(const hr_tp *tp, hr_tp_stats *out) {
    memset(out, 0, sizeof *out);
    out->n_groups = tp->G;
    out->copies = tp->copies;
    out->reduce = tp->reduce;
    out->membind = hr_gpool_binds_memory(tp->gp);
    const hr_numa_plan *pl = hr_gpool_plan(tp->gp);
    for (int p = 0; p < 2; p++) {
        out->tokens[p] = tp->tokens[p];
        out->calls[p] = tp->calls[p];
        out->barriers[p] = tp->barriers[p];
    }
    for (int g = 0; g < tp->G; g++) {
        const hr_tp_group *gr = &tp->g[g];
        hr_tp_group_stats *s = &out->group[g];
        s->node = pl->groups[g].node;
        s->n_threads = pl->groups[g].n_threads;
        s->n_threads_decode = pl->groups[g].n_threads_decode;
        for (int li = 0; li < tp->nl; li++) {
            s->kv_heads += gr->L[li].part.n_kv;
            s->ff_rows += gr->L[li].part.n_ff;
        }
        s->weight_bytes = gr->weight_bytes;
        for (int p = 0; p < 2; p++) {
            s->compute_s[p] = gr->compute_s[p];
            s->barrier_s[p] = gr->barrier_s[p];
        }
    }
}

void hr_tp_reset_stats(hr_tp *tp) {
    for (int p = 0; p < 2; p++)
        tp->tokens[p] = tp->calls[p] = tp->barriers[p] = 0;
    for (int g = 0; g < tp->G; g++)
        for (int p = 0; p < 2; p++)
            tp->g[g].compute_s[p] = tp->g[g].barrier_s[p] = 0.0;
}
