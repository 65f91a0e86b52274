/* layer.c - the transformer layer's two blocks (attention, SwiGLU or GeGLU
 * feed-forward) over one thread group's part of a layer: the whole layer in
 * plain execution, a slice of its heads and rows under tensor parallelism.
 * Every value is computed by the same kernels in the same order either way,
 * which is what keeps tensor-parallel results bit-identical to plain ones. */
#include "model/layer-impl.h"

#include "kernels/quant.h"

#include <math.h>
#include <string.h>

/* The experts' buffers of e (a plain layer of a model with experts). */
static bool hr_layer_env_moe(hr_layer_env *e, size_t B, hr_layer_alloc_fn alloc, void *ud) {
    const hr_hparams *hp = e->hp;
    size_t NE = (size_t)hp->n_expert, K = (size_t)hp->n_expert_used, E = (size_t)hp->n_embd;
    size_t F = (size_t)hp->n_ff_exp, BK = B * K;
    e->moe_prob = alloc(ud, B * NE * sizeof(float));
    e->moe_sel = alloc(ud, BK * sizeof(int));
    e->moe_wt = alloc(ud, BK * sizeof(float));
    e->moe_rows = alloc(ud, BK * sizeof(int));
    e->moe_at = alloc(ud, BK * sizeof(int));
    e->moe_first = alloc(ud, (2 * NE + 1) * sizeof(int));
    e->moe_x = alloc(ud, BK * E * sizeof(float));
    e->moe_g = alloc(ud, BK * F * sizeof(float));
    e->moe_u = alloc(ud, BK * F * sizeof(float));
    e->moe_y = alloc(ud, BK * E * sizeof(float));
    e->moe_groups = alloc(ud, NE * sizeof(hr_mm_group));
    e->moe_ffn = alloc(ud, NE * sizeof(hr_ffn_group));
    e->moe_list = alloc(ud, NE * sizeof(int));
    /* converted inputs: at most 2 bytes per value (f16), K rows per row,
     * for the gate/up and the down products of a group at once, each
     * group's start aligned to 64 bytes */
    e->moe_wbuf = alloc(ud, BK * (2 * E + F) * 2 + 3 * 64 * (NE + BK));
    return e->moe_prob && e->moe_sel && e->moe_wt && e->moe_rows && e->moe_at && e->moe_first &&
           e->moe_x && e->moe_g && e->moe_u && e->moe_y && e->moe_groups && e->moe_ffn &&
           e->moe_list && e->moe_wbuf;
}

int hr_layer_env_alloc(hr_layer_env *e, int n_batch, int n_kv, int n_ff, int n_threads, size_t wbuf,
                       hr_layer_alloc_fn alloc, void *ud) {
    const hr_hparams *hp = e->hp;
    size_t B = (size_t)n_batch, E = (size_t)hp->n_embd, D = (size_t)hp->head_dim;
    if (hp->n_expert > 0 && n_ff > 0) {
        if (!hr_layer_env_moe(e, B, alloc, ud))
            return HR_ENOMEM;
        n_ff = hp->n_ff_shexp > n_ff ? hp->n_ff_shexp : n_ff; /* the shared expert's gate/up */
    }
    size_t KD = (size_t)n_kv * D, QD = KD * (size_t)(hp->n_head / hp->n_head_kv);
    e->xb = alloc(ud, B * E * sizeof(float));
    e->q = alloc(ud, B * QD * sizeof(float));
    e->kk = alloc(ud, B * KD * sizeof(float));
    e->vv = alloc(ud, B * KD * sizeof(float));
    e->att = alloc(ud, B * QD * sizeof(float));
    e->gate = alloc(ud, B * (size_t)n_ff * sizeof(float));
    e->up = alloc(ud, B * (size_t)n_ff * sizeof(float));
    e->scratch = alloc(
        ud, hr_attn_scratch_floats(n_threads, hp->n_head, hp->n_head_kv, hp->head_dim, e->n_ctx) *
                sizeof(float));
    e->wbuf = alloc(ud, wbuf);
    bool ok =
        e->xb && e->q && e->kk && e->vv && e->att && e->gate && e->up && e->scratch && e->wbuf;
    return ok ? 0 : HR_ENOMEM;
}

/* xb[t] = rmsnorm(x[t]) * w for t < n; x, xb: [n][n_embd] f32. */
static void hr_layer_norm(const hr_layer_env *e, const float *x, const hr_weight *w, int n) {
    int E = e->hp->n_embd;
    for (int t = 0; t < n; t++)
        hr_rmsnorm(e->xb + (size_t)t * E, x + (size_t)t * E, w->data, E, e->hp->rms_eps);
}

/* y_j = W_j x for weights sharing the input x, one hr_matmul call per run
 * of weights with the same activation format (the input converts once); a
 * step of several runs multiplies each run as if it were alone. */
static void hr_layer_mm(const hr_layer_env *e, int n_w, const hr_weight *const *w, float *const *y,
                        const float *x, int n, const hr_layer_rows *R) {
    int i = 0;
    while (i < n_w) {
        int act = hr_type_get(w[i]->type)->vec_dot_type;
        int jn = i + 1;
        while (jn < n_w && (int)hr_type_get(w[jn]->type)->vec_dot_type == act)
            jn++;
        if (R->n_runs > 1)
            hr_matmul_runs(e->pool, jn - i, w + i, y + i, x, n, R->run_len, R->n_runs, e->wbuf);
        else
            hr_matmul(e->pool, jn - i, w + i, y + i, x, n, e->wbuf);
        i = jn;
    }
}

void hr_layer_matmul(const hr_layer_env *e, const hr_weight *w, const float *x, float *y, int n,
                     const hr_layer_rows *R) {
    hr_layer_mm(e, 1, &w, &y, x, n, R);
}

void hr_layer_residual(float *hidden, const float *y, int n, int n_embd) {
    for (int t = 0; t < n; t++)
        hr_add(hidden + (size_t)t * n_embd, y + (size_t)t * n_embd, n_embd);
}

/* One token's q/k/v: bias, per-head norm, RoPE at pos; K and V into KV
 * slot seq at pos. q: [qh*D], k, v: [kvh*D] f32. */
static void hr_layer_qkv_token(const hr_layer_env *e, const hr_layer_part *P, float *q, float *k,
                               float *v, int seq, int pos) {
    const hr_hparams *hp = e->hp;
    const hr_layer_weights *W = &P->w;
    int D = hp->head_dim, kvh = P->n_kv, qh = kvh * (hp->n_head / hp->n_head_kv);
    int QD = qh * D, KD = kvh * D;
    if (W->bq.data)
        hr_add(q, W->bq.data, QD);
    if (W->bk.data)
        hr_add(k, W->bk.data, KD);
    if (W->bv.data)
        hr_add(v, W->bv.data, KD);
    if (W->q_norm.data) {
        for (int h = 0; h < qh; h++)
            hr_rmsnorm(q + (size_t)h * D, q + (size_t)h * D, W->q_norm.data, D, hp->rms_eps);
        for (int h = 0; h < kvh; h++)
            hr_rmsnorm(k + (size_t)h * D, k + (size_t)h * D, W->k_norm.data, D, hp->rms_eps);
    }
    bool global = !P->swa || hp->rope_swa_global; /* scaled as the global layers */
    hr_rope_params rp = {.n_rot = hp->n_rot,
                         .freq_base = P->swa ? hp->rope_base_swa : hp->rope_base,
                         .neox = hp->rope_neox,
                         .freq_factors = e->rope_freqs,
                         .freq_scale = global ? hp->rope_scale : 1.0f,
                         .ext_factor = global ? hp->yarn_ext : 0.0f,
                         .mscale = global ? hp->yarn_mscale : 1.0f,
                         .corr = {hp->yarn_corr[0], hp->yarn_corr[1]}};
    hr_rope(q, qh, D, pos, &rp);
    hr_rope(k, kvh, D, pos, &rp);
    size_t slot = (size_t)seq * (size_t)e->n_ctx * (size_t)KD;
    uint16_t *kc = P->k + slot + (size_t)pos * KD, *vt = P->vt + slot;
    for (int i = 0; i < KD; i++) {
        kc[i] = hr_fp32_to_fp16(k[i]);
        vt[(size_t)i * e->n_ctx + pos] = hr_fp32_to_fp16(v[i]);
    }
}

void hr_layer_attention(const hr_layer_env *e, const hr_layer_part *P, const float *hidden, int n,
                        const hr_layer_rows *R) {
    const hr_hparams *hp = e->hp;
    const hr_layer_weights *W = &P->w;
    int D = hp->head_dim, kvh = P->n_kv, qh = kvh * (hp->n_head / hp->n_head_kv);
    size_t QD = (size_t)qh * D, KD = (size_t)kvh * D;
    hr_layer_norm(e, hidden, &W->attn_norm, n); /* xb: [n][E] */
    const hr_weight *wqkv[3] = {&W->wq, &W->wk, &W->wv};
    float *yqkv[3] = {e->q, e->kk, e->vv}; /* [n][QD], [n][KD], [n][KD] */
    hr_layer_mm(e, 3, wqkv, yqkv, e->xb, n, R);
    for (int t = 0; t < n; t++)
        hr_layer_qkv_token(e, P, e->q + t * QD, e->kk + t * KD, e->vv + t * KD, R->seq[t],
                           R->pos[t]);
    size_t slot = (size_t)e->n_ctx * KD;
    hr_attn_args aa = {.n_head = qh,
                       .n_kv = kvh,
                       .head_dim = D,
                       .n_ctx = e->n_ctx,
                       .k = P->k + (size_t)R->seq[0] * slot,
                       .vt = P->vt + (size_t)R->seq[0] * slot,
                       .scratch = e->scratch,
                       .scale = hp->attn_scale,
                       .window = P->swa ? hp->n_swa : 0,
                       .sinks = W->sinks.data};
    if (R->n_runs == 1) { /* one sequence: its slot, positions pos[0]..pos[0]+n-1 */
        hr_attention(e->pool, &aa, e->q, n, R->pos[0], e->att); /* att: [n][QD] */
        return;
    }
    for (int t = 0; t < n; t++)
        R->attn[t] = (hr_attn_row){.k = P->k + (size_t)R->seq[t] * slot,
                                   .vt = P->vt + (size_t)R->seq[t] * slot,
                                   .pos = R->pos[t]};
    hr_attention_rows(e->pool, &aa, R->attn, e->q, n, e->att);
}

void hr_layer_ffn(const hr_layer_env *e, const hr_layer_part *P, const float *hidden, int n,
                  const hr_layer_rows *R) {
    const hr_layer_weights *W = &P->w;
    size_t F = (size_t)P->n_ff;
    hr_layer_norm(e, hidden, &W->ffn_norm, n); /* xb: [n][E] */
    const hr_weight *wgu[2] = {&W->w_gate, &W->w_up};
    float *ygu[2] = {e->gate, e->up}; /* [n][F] each */
    hr_layer_mm(e, 2, wgu, ygu, e->xb, n, R);
    bool geglu = e->hp->arch->flags & HR_ARCH_GEGLU;
    for (int t = 0; t < n; t++)
        (geglu ? hr_geglu : hr_swiglu)(e->gate + t * F, e->gate + t * F, e->up + t * F, (int)F);
}

/* Each row's top K experts by router probability (ties: the lower index)
 * and their weights, divided by their sum where the architecture says so
 * (gpt-oss: by biased logit, weights a softmax over the K); the rows
 * grouped by expert. */
static void hr_moe_route(const hr_layer_env *e, const hr_layer_part *P, int n) {
    const hr_hparams *hp = e->hp;
    int NE = hp->n_expert, K = hp->n_expert_used;
    int *first = e->moe_first;
    bool oai = hp->arch->flags & HR_ARCH_OAI; /* top-k of the logits, softmax over those */
    memset(first, 0, (size_t)(NE + 1) * sizeof(int));
    for (int t = 0; t < n; t++) {
        float *p = e->moe_prob + (size_t)t * NE;
        if (P->w.gate_inp_b.data)
            hr_add(p, P->w.gate_inp_b.data, NE);
        if (!oai)
            hr_softmax(p, NE);
        int *sel = e->moe_sel + (size_t)t * K;
        float *wt = e->moe_wt + (size_t)t * K, sum = 0.0f;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int x = 0; x < NE; x++) {
                bool taken = false;
                for (int i = 0; i < j && !taken; i++)
                    taken = sel[i] == x;
                if (!taken && (best < 0 || p[x] > p[best]))
                    best = x;
            }
            sel[j] = best;
            wt[j] = p[best];
            sum += p[best];
            first[best + 1]++;
            if (P->hits)
                P->hits[best]++;
        }
        if (oai)
            hr_softmax(wt, K);
        if (hp->arch->moe_norm_w) {
            sum = sum > 6.103515625e-5f ? sum : 6.103515625e-5f; /* as llama.cpp clamps */
            for (int j = 0; j < K; j++)
                wt[j] /= sum;
        }
    }
    for (int x = 0; x < NE; x++)
        first[x + 1] += first[x];
    int *fill = first + NE + 1; /* each expert's next free place */
    memcpy(fill, first, (size_t)NE * sizeof(int));
    for (int t = 0; t < n; t++)
        for (int j = 0; j < K; j++) {
            int x = e->moe_sel[t * K + j], at = fill[x]++;
            e->moe_rows[at] = t * K + j;
        }
    for (int g = 0; g < n * K; g++)
        e->moe_at[e->moe_rows[g]] = g;
}

/* One product group per expert with rows: its stack's matrix (two for
 * gate/up) over x's grouped rows (stride floats each) into y0 / y1. */
static int hr_moe_groups(const hr_layer_env *e, const hr_weight *w0, const hr_weight *w1,
                         const float *x, size_t stride, float *y0, float *y1, size_t ystride) {
    const hr_hparams *hp = e->hp;
    int ng = 0;
    for (int x_ = 0; x_ < hp->n_expert; x_++) {
        int f = e->moe_first[x_], m = e->moe_first[x_ + 1] - f;
        if (m == 0)
            continue;
        hr_mm_group *g = &e->moe_groups[ng++];
        *g = (hr_mm_group){.n_w = w1 ? 2 : 1, .x = x + (size_t)f * stride, .n_tok = m};
        g->w[0] = hr_expert_view(w0, hp->n_expert, x_);
        g->y[0] = y0 + (size_t)f * ystride;
        if (w1) {
            g->w[1] = hr_expert_view(w1, hp->n_expert, x_);
            g->y[1] = y1 + (size_t)f * ystride;
        }
    }
    return ng;
}

/* Expert x's row of an experts' bias (HR_LT_MOE_BIAS), or NULL without one. */
static const float *hr_moe_bias(const hr_weight *b, int x) {
    return b->data ? (const float *)((const char *)b->data + (size_t)x * b->row_bytes) : NULL;
}

/* The experts' feed-forwards as products over all of them: gate/up of
 * every expert in one pass, SwiGLU, down in another (prefill: many rows
 * per expert, the tiles' work). */
static void hr_moe_ffn_grouped(const hr_layer_env *e, const hr_layer_weights *W, int n) {
    size_t E = (size_t)e->hp->n_embd, F = (size_t)e->hp->n_ff_exp;
    int K = e->hp->n_expert_used;
    bool oai = e->hp->arch->flags & HR_ARCH_OAI;
    int ng = hr_moe_groups(e, &W->gate_exps, &W->up_exps, e->moe_x, E, e->moe_g, e->moe_u, F);
    hr_matmul_groups(e->pool, e->moe_groups, ng, e->moe_wbuf);
    for (int g = 0; g < n * K; g++) {
        float *h = e->moe_g + (size_t)g * F, *u = e->moe_u + (size_t)g * F;
        int x = e->moe_sel[e->moe_rows[g]]; /* the expert of grouped row g */
        hr_expert_act(h, u, hr_moe_bias(&W->gate_exps_b, x), hr_moe_bias(&W->up_exps_b, x), (int)F,
                      oai);
    }
    ng = hr_moe_groups(e, &W->down_exps, NULL, e->moe_g, F, e->moe_y, NULL, E);
    hr_matmul_groups(e->pool, e->moe_groups, ng, e->moe_wbuf);
    for (int g = 0; W->down_exps_b.data && g < n * K; g++)
        hr_add(e->moe_y + (size_t)g * E, hr_moe_bias(&W->down_exps_b, e->moe_sel[e->moe_rows[g]]),
               (int)E);
}

/* The experts' feed-forwards one expert at a time per thread, when each
 * has at most HR_DOT_N_MAX rows (decode steps): one pass of the pool.
 * The same values as hr_moe_ffn_grouped. false when a group is larger. */
static bool hr_moe_ffn_fused(const hr_layer_env *e, const hr_layer_weights *W) {
    const hr_hparams *hp = e->hp;
    size_t E = (size_t)hp->n_embd, F = (size_t)hp->n_ff_exp;
    for (int x = 0; x < hp->n_expert; x++)
        if (e->moe_first[x + 1] - e->moe_first[x] > HR_DOT_N_MAX)
            return false;
    int ng = 0;
    char *act = e->moe_wbuf;
    for (int x = 0; x < hp->n_expert; x++) {
        int f = e->moe_first[x], m = e->moe_first[x + 1] - f;
        if (m == 0)
            continue;
        hr_ffn_group *g = &e->moe_ffn[ng++];
        *g = (hr_ffn_group){.gate = hr_expert_view(&W->gate_exps, hp->n_expert, x),
                            .up = hr_expert_view(&W->up_exps, hp->n_expert, x),
                            .down = hr_expert_view(&W->down_exps, hp->n_expert, x),
                            .x = e->moe_x + (size_t)f * E,
                            .n_tok = m,
                            .h = e->moe_g + (size_t)f * F,
                            .u = e->moe_u + (size_t)f * F,
                            .y = e->moe_y + (size_t)f * E,
                            .act = act,
                            .b_gate = hr_moe_bias(&W->gate_exps_b, x),
                            .b_up = hr_moe_bias(&W->up_exps_b, x),
                            .b_down = hr_moe_bias(&W->down_exps_b, x),
                            .oai = (hp->arch->flags & HR_ARCH_OAI) != 0};
        act += (hr_swiglu_group_wbuf_size(g) + 63) & ~(size_t)63;
    }
    hr_swiglu_groups(e->pool, e->moe_ffn, ng);
    return true;
}

/* The shared expert, gated by sigmoid(w . xb), added to y. */
static void hr_moe_shared(const hr_layer_env *e, const hr_layer_weights *W, float *y, int n,
                          const hr_layer_rows *R) {
    size_t E = (size_t)e->hp->n_embd, F = (size_t)e->hp->n_ff_shexp;
    const hr_weight *wgu[2] = {&W->gate_shexp, &W->up_shexp};
    float *ygu[2] = {e->gate, e->up};
    hr_layer_mm(e, 2, wgu, ygu, e->xb, n, R);
    for (int t = 0; t < n; t++)
        hr_swiglu(e->gate + t * F, e->gate + t * F, e->up + t * F, (int)F);
    float *s = e->moe_x; /* [n][E], free again */
    hr_layer_matmul(e, &W->down_shexp, e->gate, s, n, R);
    const float *gw = W->gate_inp_shexp.data;
    for (int t = 0; t < n; t++) {
        const float *xb = e->xb + t * E;
        float d = 0.0f;
        for (size_t i = 0; i < E; i++)
            d += gw[i] * xb[i];
        float gate = 1.0f / (1.0f + expf(-d));
        for (size_t i = 0; i < E; i++)
            y[t * E + i] += s[t * E + i] * gate;
    }
}

void hr_layer_moe(const hr_layer_env *e, const hr_layer_part *P, float *hidden, float *y, int n,
                  const hr_layer_rows *R) {
    const hr_hparams *hp = e->hp;
    const hr_layer_weights *W = &P->w;
    int K = hp->n_expert_used;
    size_t E = (size_t)hp->n_embd;
    hr_layer_norm(e, hidden, &W->ffn_norm, n);                  /* xb: [n][E] */
    hr_layer_matmul(e, &W->gate_inp, e->xb, e->moe_prob, n, R); /* [n][n_expert] logits */
    hr_moe_route(e, P, n);
    if (e->on_route) { /* the experts about to be read, for a streamer */
        int nu = 0;
        for (int x = 0; x < hp->n_expert; x++)
            if (e->moe_first[x + 1] > e->moe_first[x])
                e->moe_list[nu++] = x;
        e->on_route(e->route_ud, P->layer, e->moe_list, nu);
    }
    for (int g = 0; g < n * K; g++) /* grouped inputs */
        memcpy(e->moe_x + (size_t)g * E, e->xb + (size_t)(e->moe_rows[g] / K) * E,
               E * sizeof(float));
    if (!hr_moe_ffn_fused(e, W))
        hr_moe_ffn_grouped(e, W, n);
    for (int t = 0; t < n; t++) { /* weighted sum in the router's order */
        float *yt = y + (size_t)t * E;
        for (int j = 0; j < K; j++) {
            const float *d = e->moe_y + (size_t)e->moe_at[t * K + j] * E;
            float w = e->moe_wt[t * K + j];
            for (size_t i = 0; i < E; i++)
                yt[i] = j == 0 ? d[i] * w : yt[i] + d[i] * w;
        }
    }
    if (W->gate_shexp.data)
        hr_moe_shared(e, W, y, n, R);
    hr_layer_residual(hidden, y, n, (int)E);
}

/* The output projection of a block (Wo over att, Wdown over gate), plus
 * its bias where it has one (HR_LT_OUT_BIAS), through the block's
 * post-norm where it has one (HR_LT_POST_NORM), added to the hidden state:
 * what a whole layer does with its block's output. */
static void hr_layer_project(const hr_layer_env *e, const hr_weight *w, const hr_weight *bias,
                             const hr_weight *post, const float *x, float *hidden, float *y, int n,
                             const hr_layer_rows *R) {
    int E = e->hp->n_embd;
    hr_layer_matmul(e, w, x, y, n, R);
    for (int t = 0; bias && bias->data && t < n; t++)
        hr_add(y + (size_t)t * E, bias->data, E);
    for (int t = 0; post->data && t < n; t++)
        hr_rmsnorm(y + (size_t)t * E, y + (size_t)t * E, post->data, E, e->hp->rms_eps);
    hr_layer_residual(hidden, y, n, E);
}

void hr_layer_window(const hr_layer_env *e, const hr_layer_part *parts, size_t stride, int nl,
                     float *hidden, float *y, int n, const hr_layer_rows *R,
                     const hr_layer_join *j) {
    for (int li = 0; li < nl; li++) { /* hidden: [n][E] f32 */
        const hr_layer_part *P = (const hr_layer_part *)((const char *)parts + (size_t)li * stride);
        if (P->n_kv > 0)
            hr_layer_attention(e, P, hidden, n, R); /* att: [n][n_head*head_dim] */
        if (j && j->attn)
            j->attn(j->ud, P, hidden, li);
        else
            hr_layer_project(e, &P->w.wo, &P->w.bo, &P->w.attn_post_norm, e->att, hidden, y, n, R);
        if (P->w.gate_inp.data) {
            hr_layer_moe(e, P, hidden, y, n, R);
            goto next;
        }
        if (P->n_ff > 0)
            hr_layer_ffn(e, P, hidden, n, R); /* gate: [n][n_ff] */
        if (j && j->ffn)
            j->ffn(j->ud, P, hidden, li);
        else
            hr_layer_project(e, &P->w.w_down, NULL, &P->w.ffn_post_norm, e->gate, hidden, y, n, R);
    next:
        if (j && j->on_layer)
            j->on_layer(j->ud, li);
    }
}
