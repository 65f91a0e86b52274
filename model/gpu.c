/* gpu.c - a window's first layers on a Vulkan device: upload, device
 * buffers, and the transformer layer as kernel dispatches in layer.c's
 * order (RMSNorm, Q/K/V projections, biases, per-head norms, RoPE, F16 KV
 * store, GQA attention, output projection, residual, RMSNorm, gate/up,
 * SwiGLU, down projection, residual), one command buffer per call. The
 * exact path (--exact) records one kernel per step; the fast path (the
 * default) fuses RoPE with the KV store, gate/up with SwiGLU and the
 * residual adds with their projections (gpu/vk.h). */
#include "model/gpu-impl.h"

#include "common/log.h"
#include "kernels/quant.h"
#include "kernels/types.h"
#include "model/layer-impl.h"

#include <stdlib.h>
#include <string.h>

#define TAG "gpu"
#define HR_GPU_ALIGN 256 /* bytes between tensors in a layer's buffer */
#define HR_GPU_NW ((int)(sizeof(hr_layer_weights) / sizeof(hr_weight)))

typedef struct {
    hr_layer_weights w;      /* shapes and types (data: the host copy) */
    uint32_t off[HR_GPU_NW]; /* byte offset of each field's tensor in wb */
    hr_vk_buf *wb, *kv;
    hr_vk_set *set;
} hr_gpu_layer;

/* Word offsets of the work buffer's regions. */
typedef struct {
    uint32_t h, xb, xb2, q, k, v, att, gate, up, act, tab, sc, end;
} hr_gpu_regions;

struct hr_gpu_win {
    hr_vk *vk;
    const hr_hparams *hp;
    const float *rope_freqs;
    int n, n_ctx, n_batch, n_seq;
    hr_gpu_layer *L; /* [n] */
    hr_vk_buf *x;    /* work buffer */
    hr_vk_buf *io;   /* host-visible: hidden in/out + RoPE table */
    hr_gpu_regions r;
    size_t bytes;
};

static uint32_t hr_field(const hr_gpu_layer *L, const hr_weight *w) {
    return L->off[((const char *)w - (const char *)&L->w) / sizeof(hr_weight)];
}

/* Lays out and uploads layer il's tensors; vectors are the model's f32
 * copies, matrices the mapping's bytes. */
static int hr_gpu_layer_upload(hr_gpu_win *g, hr_gpu_layer *L, const hr_layer_weights *src,
                               size_t kv_bytes, char *err) {
    L->w = *src;
    uint64_t size = 0;
    for (int i = 0; i < hr_layer_tensor_count(); i++) {
        const hr_layer_tensor *t = hr_layer_tensor_get(i);
        const hr_weight *w = hr_layer_weight(src, t);
        if (!w->data)
            continue;
        if (!hr_vk_type_supported(w->type))
            return hr_seterr(err, HR_EUNSUPPORTED, "%s: no GPU kernel for type %s", t->name,
                             hr_type_name(w->type));
        L->off[(t->offset) / sizeof(hr_weight)] = (uint32_t)size;
        size += ((uint64_t)w->row_bytes * (uint64_t)w->n_out + HR_GPU_ALIGN - 1) / HR_GPU_ALIGN *
                HR_GPU_ALIGN;
        if (size >= (1ull << 32) || size > hr_vk_info(g->vk)->max_storage_range)
            return hr_seterr(err, HR_ERANGE,
                             "a layer of %.1f MiB exceeds what one GPU buffer "
                             "binding may cover",
                             size / 1048576.0);
    }
    int rc;
    if ((rc = hr_vk_buf_create(g->vk, &L->wb, (size_t)size, false, err)) ||
        (rc = hr_vk_buf_create(g->vk, &L->kv, kv_bytes, false, err)) ||
        (rc = hr_vk_fill0(g->vk, L->kv, 0, hr_vk_buf_size(L->kv), err)) ||
        (rc = hr_vk_set_create(g->vk, &L->set, L->wb, g->x, L->kv, err)))
        return rc;
    g->bytes += (size_t)size + hr_vk_buf_size(L->kv);
    for (int i = 0; i < hr_layer_tensor_count(); i++) {
        const hr_layer_tensor *t = hr_layer_tensor_get(i);
        const hr_weight *w = hr_layer_weight(src, t);
        if (w->data && (rc = hr_vk_write(g->vk, L->wb, L->off[t->offset / sizeof(hr_weight)],
                                         w->data, w->row_bytes * (size_t)w->n_out, err)))
            return rc;
    }
    return 0;
}

int hr_gpu_win_create(hr_gpu_win **out, hr_vk *vk, const hr_hparams *hp,
                      const hr_layer_weights *layers, int il0, int n, const float *rope_freqs,
                      int n_ctx, int n_batch, int n_seq, char err[HR_ERR_LEN]) {
    *out = NULL;
    if (hp->head_dim > 1024)
        return hr_seterr(err, HR_EUNSUPPORTED, "head dimension %d above the GPU kernel's 1024",
                         hp->head_dim);
    hr_gpu_win *g = calloc(1, sizeof *g);
    if (!g || !(g->L = calloc((size_t)n, sizeof *g->L))) {
        free(g);
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    }
    g->vk = vk;
    g->hp = hp;
    g->rope_freqs = rope_freqs;
    g->n = n;
    g->n_ctx = n_ctx;
    g->n_batch = n_batch;
    g->n_seq = n_seq < 1 ? 1 : n_seq;
    uint64_t B = (uint64_t)n_batch, E = (uint64_t)hp->n_embd, D = (uint64_t)hp->head_dim;
    uint64_t QD = (uint64_t)hp->n_head * D, KD = (uint64_t)hp->n_head_kv * D,
             F = (uint64_t)hp->n_ff;
    /* the widest 8-bit activation: any format, any matrix input width */
    uint64_t maxin = E > QD ? E : QD;
    maxin = maxin > F ? maxin : F;
    uint64_t act = (uint64_t)B * (maxin / 4 + 2 * (maxin / 32) + 2);
    uint64_t o = 0, rot = (uint64_t)hp->n_rot;
    hr_gpu_regions *r = &g->r;
    uint64_t sizes[] = {B * E,  B * E, B * E, B * QD, B * KD,  B * KD,
                        B * QD, B * F, B * F, act,    B * rot, B * hp->n_head * (uint64_t)n_ctx};
    uint32_t *dst[] = {&r->h,   &r->xb,   &r->xb2, &r->q,   &r->k,   &r->v,
                       &r->att, &r->gate, &r->up,  &r->act, &r->tab, &r->sc};
    int rc = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *dst[i] = (uint32_t)o;
        o += (sizes[i] + 63) / 64 * 64;
        if (o >= (1ull << 32) || o * 4 > hr_vk_info(vk)->max_storage_range) {
            rc = hr_seterr(err, HR_ERANGE,
                           "GPU work buffer for batch %d and context %d too "
                           "large for one buffer binding",
                           n_batch, n_ctx);
            goto fail;
        }
    }
    r->end = (uint32_t)o;
    if ((rc = hr_vk_buf_create(vk, &g->x, (size_t)o * 4, false, err)) ||
        (rc = hr_vk_buf_create(vk, &g->io, (size_t)B * (E + rot) * 4, true, err)))
        goto fail;
    g->bytes = (size_t)o * 4;
    size_t kv_bytes = 2 * (size_t)g->n_seq * (size_t)n_ctx * (size_t)KD * sizeof(uint16_t);
    if (kv_bytes / 4 >= (1ull << 32) || kv_bytes > hr_vk_info(vk)->max_storage_range) {
        rc = hr_seterr(err, HR_ERANGE,
                       "GPU KV cache of %d x %d positions too large for one "
                       "buffer binding",
                       g->n_seq, n_ctx);
        goto fail;
    }
    for (int i = 0; i < n; i++)
        if ((rc = hr_gpu_layer_upload(g, &g->L[i], &layers[il0 + i], kv_bytes, err)))
            goto fail;
    HR_LOG_INFO(TAG, "layers [%d, %d) on %s: %.1f MiB of device memory", il0, il0 + n,
                hr_vk_info(vk)->name, g->bytes / 1048576.0);
    *out = g;
    return 0;
fail:
    hr_gpu_win_destroy(g);
    return rc;
}

void hr_gpu_win_destroy(hr_gpu_win *g) {
    if (!g)
        return;
    for (int i = 0; i < g->n; i++) {
        hr_vk_set_destroy(g->vk, g->L[i].set);
        hr_vk_buf_destroy(g->vk, g->L[i].wb);
        hr_vk_buf_destroy(g->vk, g->L[i].kv);
    }
    free(g->L);
    hr_vk_buf_destroy(g->vk, g->x);
    hr_vk_buf_destroy(g->vk, g->io);
    free(g);
}

size_t hr_gpu_win_bytes(const hr_gpu_win *g) { return g->bytes; }

/* What the 8-bit activation region holds: the input and format quantized. */
typedef struct {
    uint32_t src;
    int type;
} hr_gpu_act;

/* The activations W's kernel reads for the n tokens of x ([n][w.n_in] at
 * word in): x itself (F32) or the 8-bit region, quantized first unless it
 * already holds x in the weight's format. *a: their word offset. */
static int hr_gpu_act_for(hr_gpu_win *g, const hr_gpu_layer *L, const hr_weight *w, uint32_t in,
                          int n, hr_gpu_act *st, uint32_t *a) {
    int act = hr_type_get(w->type)->vec_dot_type;
    *a = in;
    if (act == HR_TYPE_F32)
        return 0;
    if (st->src != in || st->type != act) {
        int rc = hr_vk_quantize(g->vk, L->set, act, (uint32_t)w->n_in, (uint32_t)n, in, g->r.act);
        if (rc)
            return rc;
        *st = (hr_gpu_act){in, act};
    }
    *a = g->r.act;
    return 0;
}

/* y_i = W_i x for the nw weights of one input (outputs at words out[i]).
 * When they dot the same activation format the matmuls run side by side
 * (one barrier after all of them), else one after another. */
static int hr_gpu_mm(hr_gpu_win *g, const hr_gpu_layer *L, int nw, const hr_weight *const *w,
                     uint32_t in, const uint32_t *out, int n, hr_gpu_act *st) {
    bool same = true;
    for (int i = 1; i < nw; i++)
        same =
            same && hr_type_get(w[i]->type)->vec_dot_type == hr_type_get(w[0]->type)->vec_dot_type;
    uint32_t a = in;
    int rc = same ? hr_gpu_act_for(g, L, w[0], in, n, st, &a) : 0;
    if (rc)
        return rc;
    if (same && nw > 1)
        hr_vk_group_begin(g->vk);
    for (int i = 0; rc == 0 && i < nw; i++) {
        if (!same)
            rc = hr_gpu_act_for(g, L, w[i], in, n, st, &a);
        if (rc == 0)
            rc = hr_vk_matmul(g->vk, L->set, w[i]->type, (uint32_t)w[i]->n_in,
                              (uint32_t)w[i]->n_out, (uint32_t)w[i]->row_bytes, hr_field(L, w[i]),
                              a, out[i], (uint32_t)n, (uint32_t)w[i]->n_out);
    }
    if (same && nw > 1)
        hr_vk_group_end(g->vk);
    return rc;
}

/* After the Q, K, V projections of the n rows: their biases and the
 * RMSNorm of each Q and K head, where the layer has them; with grouped,
 * the kernels of each of the two steps side by side. */
static void hr_gpu_qkv_bias_norm(hr_gpu_win *g, const hr_gpu_layer *L, int n, bool grouped) {
    const hr_hparams *hp = g->hp;
    const hr_layer_weights *W = &L->w;
    const hr_gpu_regions *r = &g->r;
    hr_vk *vk = g->vk;
    hr_vk_set *s = L->set;
    uint32_t D = (uint32_t)hp->head_dim, N = (uint32_t)n;
    uint32_t qh = (uint32_t)hp->n_head, kvh = (uint32_t)hp->n_head_kv, QD = qh * D, KD = kvh * D;
    if (W->bq.data) { /* [N][QD], [N][KD], [N][KD] += the bias rows */
        if (grouped)
            hr_vk_group_begin(vk);
        hr_vk_add(vk, s, N * QD, r->q, hr_field(L, &W->bq) / 4, QD, true);
        hr_vk_add(vk, s, N * KD, r->k, hr_field(L, &W->bk) / 4, KD, true);
        hr_vk_add(vk, s, N * KD, r->v, hr_field(L, &W->bv) / 4, KD, true);
        if (grouped)
            hr_vk_group_end(vk);
    }
    if (W->q_norm.data) { /* rows of D: N * qh of Q, N * kvh of K */
        if (grouped)
            hr_vk_group_begin(vk);
        hr_vk_rmsnorm(vk, s, D, N * qh, r->q, D, r->q, D, hr_field(L, &W->q_norm) / 4, hp->rms_eps);
        hr_vk_rmsnorm(vk, s, D, N * kvh, r->k, D, r->k, D, hr_field(L, &W->k_norm) / 4,
                      hp->rms_eps);
        if (grouped)
            hr_vk_group_end(vk);
    }
}

/* Records one layer over the n rows in the work buffer's h region: rows
 * in runs of run_len[i] consecutive positions from pos[i] of KV slot seq[i]. */
static int hr_gpu_layer_record(hr_gpu_win *g, const hr_gpu_layer *L, int n, const int *seq,
                               const int *pos, const int *run_len, int n_runs) {
    const hr_hparams *hp = g->hp;
    const hr_layer_weights *W = &L->w;
    const hr_gpu_regions *r = &g->r;
    hr_vk *vk = g->vk;
    hr_vk_set *s = L->set;
    uint32_t E = (uint32_t)hp->n_embd, D = (uint32_t)hp->head_dim, N = (uint32_t)n;
    uint32_t qh = (uint32_t)hp->n_head, kvh = (uint32_t)hp->n_head_kv;
    uint32_t QD = qh * D, KD = kvh * D, F = (uint32_t)hp->n_ff;
    hr_gpu_act st = {UINT32_MAX, -1};
    int rc = 0;
    /* attention block */
    hr_vk_rmsnorm(vk, s, E, N, r->h, E, r->xb, E, hr_field(L, &W->attn_norm) / 4, hp->rms_eps);
    const hr_weight *qkv[3] = {&W->wq, &W->wk, &W->wv};
    if ((rc = hr_gpu_mm(g, L, 3, qkv, r->xb, (const uint32_t[]){r->q, r->k, r->v}, n, &st)))
        return rc;
    hr_gpu_qkv_bias_norm(g, L, n, false);
    hr_vk_group_begin(vk); /* q and k rotate side by side */
    hr_vk_rope(vk, s, N, qh, D, (uint32_t)hp->n_rot, hp->rope_neox, r->q, QD, r->tab);
    hr_vk_rope(vk, s, N, kvh, D, (uint32_t)hp->n_rot, hp->rope_neox, r->k, KD, r->tab);
    hr_vk_group_end(vk);
    uint32_t slot = (uint32_t)g->n_ctx * KD / 2, vcache = slot * (uint32_t)g->n_seq;
    for (int i = 0, t0 = 0; i < n_runs; t0 += run_len[i++]) { /* each run's cache */
        uint32_t len = (uint32_t)run_len[i], p0 = (uint32_t)pos[i], ks = (uint32_t)seq[i] * slot;
        hr_vk_kv_store(vk, s, KD, len, p0, r->k + (uint32_t)t0 * KD, r->v + (uint32_t)t0 * KD, ks,
                       vcache + ks);
        hr_vk_attn a = {.n_head = qh,
                        .n_kv = kvh,
                        .head_dim = D,
                        .n_ctx = (uint32_t)g->n_ctx,
                        .n_tok = len,
                        .pos0 = p0,
                        .q = r->q + (uint32_t)t0 * QD,
                        .out = r->att + (uint32_t)t0 * QD,
                        .sc = r->sc + (uint32_t)t0 * qh * (uint32_t)g->n_ctx,
                        .k = ks,
                        .v = vcache + ks};
        hr_vk_attention(vk, s, &a);
    }
    const hr_weight *wo = &W->wo;
    if ((rc = hr_gpu_mm(g, L, 1, &wo, r->att, &r->xb2, n, &st)))
        return rc;
    hr_vk_add(vk, s, N * E, r->h, r->xb2, N * E, false);
    /* feed-forward block */
    hr_vk_rmsnorm(vk, s, E, N, r->h, E, r->xb, E, hr_field(L, &W->ffn_norm) / 4, hp->rms_eps);
    st.src = UINT32_MAX; /* xb was rewritten */
    const hr_weight *gu[2] = {&W->w_gate, &W->w_up};
    if ((rc = hr_gpu_mm(g, L, 2, gu, r->xb, (const uint32_t[]){r->gate, r->up}, n, &st)))
        return rc;
    hr_vk_swiglu(vk, s, N * F, r->gate, r->up);
    const hr_weight *wd = &W->w_down;
    if ((rc = hr_gpu_mm(g, L, 1, &wd, r->gate, &r->xb2, n, &st)))
        return rc;
    hr_vk_add(vk, s, N * E, r->h, r->xb2, N * E, false);
    return 0;
}

/* A fast-path matmul of W (one input) with its fusions: y (word y_off,
 * stride y_stride) = or += W x, or silu(W x) * (W2 x) with W2. */
static int hr_gpu_mm_fast(hr_gpu_win *g, const hr_gpu_layer *L, const hr_weight *w,
                          const hr_weight *w2, uint32_t in, uint32_t y_off, uint32_t y_stride,
                          bool accum, int n, hr_gpu_act *st) {
    uint32_t a = in;
    int rc = hr_gpu_act_for(g, L, w, in, n, st, &a);
    if (rc)
        return rc;
    hr_vk_mm m = {.type = w->type,
                  .n_in = (uint32_t)w->n_in,
                  .n_out = (uint32_t)w->n_out,
                  .row_bytes = (uint32_t)w->row_bytes,
                  .w_off = hr_field(L, w),
                  .w2_off = w2 ? hr_field(L, w2) : 0,
                  .act_off = a,
                  .y_off = y_off,
                  .n_tok = (uint32_t)n,
                  .y_stride = y_stride,
                  .glu = w2 != NULL,
                  .accum = accum};
    return hr_vk_matmul_ex(g->vk, L->set, &m);
}

/* The fast path's RMSNorm of the n rows of h into xb with weight norm; when
 * w (the first matrix to read xb) dots 8-bit activations, quantized to them
 * in the same kernel (*st then says the activation region holds them). */
static int hr_gpu_norm_fast(hr_gpu_win *g, const hr_gpu_layer *L, const hr_weight *norm,
                            const hr_weight *w, int n, hr_gpu_act *st) {
    const hr_hparams *hp = g->hp;
    uint32_t E = (uint32_t)hp->n_embd, N = (uint32_t)n, go = hr_field(L, norm) / 4;
    int act = hr_type_get(w->type)->vec_dot_type;
    if (act == HR_TYPE_F32 || hr_vk_act_block(act) == 0 || E % hr_vk_act_block(act)) {
        hr_vk_rmsnorm(g->vk, L->set, E, N, g->r.h, E, g->r.xb, E, go, hp->rms_eps);
        return 0;
    }
    int rc = hr_vk_rmsnorm_quantize(g->vk, L->set, act, E, N, g->r.h, g->r.xb, go, hp->rms_eps,
                                    g->r.act);
    if (rc == 0)
        *st = (hr_gpu_act){g->r.xb, act};
    return rc;
}

/* hr_gpu_layer_record on the fast path: the same steps, fused where the
 * kernels allow (RoPE of K with the KV store, gate/up with SwiGLU when
 * both have one type, the residual adds in the projections). */
static int hr_gpu_layer_record_fast(hr_gpu_win *g, const hr_gpu_layer *L, int n, const int *seq,
                                    const int *pos, const int *run_len, int n_runs) {
    const hr_hparams *hp = g->hp;
    const hr_layer_weights *W = &L->w;
    const hr_gpu_regions *r = &g->r;
    hr_vk *vk = g->vk;
    hr_vk_set *s = L->set;
    uint32_t E = (uint32_t)hp->n_embd, D = (uint32_t)hp->head_dim, N = (uint32_t)n;
    uint32_t qh = (uint32_t)hp->n_head, kvh = (uint32_t)hp->n_head_kv, rot = (uint32_t)hp->n_rot;
    uint32_t QD = qh * D, KD = kvh * D, F = (uint32_t)hp->n_ff;
    hr_gpu_act st = {UINT32_MAX, -1};
    int rc = 0;
    /* attention block */
    if ((rc = hr_gpu_norm_fast(g, L, &W->attn_norm, &W->wq, n, &st)))
        return rc;
    const hr_weight *qkv[3] = {&W->wq, &W->wk, &W->wv};
    if ((rc = hr_gpu_mm(g, L, 3, qkv, r->xb, (const uint32_t[]){r->q, r->k, r->v}, n, &st)))
        return rc;
    hr_gpu_qkv_bias_norm(g, L, n, true);
    uint32_t slot = (uint32_t)g->n_ctx * KD / 2, vcache = slot * (uint32_t)g->n_seq;
    hr_vk_group_begin(vk); /* q rotates while each run's K (rotated) and V are stored */
    hr_vk_rope(vk, s, N, qh, D, rot, hp->rope_neox, r->q, QD, r->tab);
    for (int i = 0, t0 = 0; i < n_runs; t0 += run_len[i++]) {
        uint32_t ks = (uint32_t)seq[i] * slot, t = (uint32_t)t0;
        hr_vk_rope_kv(vk, s, (uint32_t)run_len[i], kvh, D, rot, hp->rope_neox, r->k + t * KD,
                      r->v + t * KD, KD, r->tab + t * rot, (uint32_t)pos[i], ks, vcache + ks);
    }
    hr_vk_group_end(vk);
    hr_vk_group_begin(vk); /* each run's attention */
    for (int i = 0, t0 = 0; i < n_runs; t0 += run_len[i++]) {
        uint32_t ks = (uint32_t)seq[i] * slot;
        hr_vk_attn a = {.n_head = qh,
                        .n_kv = kvh,
                        .head_dim = D,
                        .n_ctx = (uint32_t)g->n_ctx,
                        .n_tok = (uint32_t)run_len[i],
                        .pos0 = (uint32_t)pos[i],
                        .q = r->q + (uint32_t)t0 * QD,
                        .out = r->att + (uint32_t)t0 * QD,
                        .sc = r->sc,
                        .k = ks,
                        .v = vcache + ks};
        hr_vk_attention(vk, s, &a);
    }
    hr_vk_group_end(vk);
    if ((rc = hr_gpu_mm_fast(g, L, &W->wo, NULL, r->att, r->h, E, true, n, &st)))
        return rc;
    /* feed-forward block */
    st.src = UINT32_MAX; /* xb is rewritten */
    if ((rc = hr_gpu_norm_fast(g, L, &W->ffn_norm, &W->w_gate, n, &st)))
        return rc;
    if (W->w_gate.type == W->w_up.type && W->w_gate.n_out == W->w_up.n_out) {
        if ((rc = hr_gpu_mm_fast(g, L, &W->w_gate, &W->w_up, r->xb, r->gate, F, false, n, &st)))
            return rc;
    } else {
        const hr_weight *gu[2] = {&W->w_gate, &W->w_up};
        if ((rc = hr_gpu_mm(g, L, 2, gu, r->xb, (const uint32_t[]){r->gate, r->up}, n, &st)))
            return rc;
        hr_vk_swiglu(vk, s, N * F, r->gate, r->up);
    }
    return hr_gpu_mm_fast(g, L, &W->w_down, NULL, r->gate, r->h, E, true, n, &st);
}

int hr_gpu_win_run_runs(hr_gpu_win *g, float *hidden, int n, const int *seq, const int *pos,
                        const int *run_len, int n_runs, char err[HR_ERR_LEN]) {
    int rows = 0;
    bool exact = hr_kernels_exact();
    if (hr_vk_set_exact(g->vk, exact) != 0)
        return hr_seterr(err, HR_EUNSUPPORTED,
                         "exact mode on the GPU needs 64-bit floats, which %s lacks "
                         "(shaderFloat64): run without --exact, or keep these layers on the CPU",
                         hr_vk_info(g->vk)->name);
    for (int i = 0; i < n_runs; i++) {
        if (seq[i] < 0 || seq[i] >= g->n_seq || run_len[i] < 1 || pos[i] < 0 ||
            pos[i] + run_len[i] > g->n_ctx)
            return hr_seterr(err, HR_EINVAL,
                             "GPU layers: run %d (slot %d, %d rows at %d) "
                             "outside %d slots of %d positions",
                             i, seq[i], run_len[i], pos[i], g->n_seq, g->n_ctx);
        rows += run_len[i];
    }
    if (n < 1 || n > g->n_batch || rows != n)
        return hr_seterr(err, HR_EINVAL, "GPU layers: %d rows (runs of %d) outside batch %d", n,
                         rows, g->n_batch);
    const hr_hparams *hp = g->hp;
    size_t hb = (size_t)n * hp->n_embd * sizeof(float);
    size_t tb = (size_t)n * hp->n_rot * sizeof(float);
    float *io = hr_vk_buf_map(g->io), *tab = io + (size_t)n * hp->n_embd;
    memcpy(io, hidden, hb);
    for (int i = 0, t0 = 0; i < n_runs; t0 += run_len[i++])
        hr_vk_rope_table(tab + (size_t)t0 * hp->n_rot, run_len[i], pos[i], hp->n_rot, hp->rope_base,
                         g->rope_freqs);
    int rc = hr_vk_begin(g->vk, err);
    if (rc)
        return rc;
    hr_vk_copy(g->vk, g->io, 0, g->x, (size_t)g->r.h * 4, hb);
    hr_vk_copy(g->vk, g->io, hb, g->x, (size_t)g->r.tab * 4, tb);
    for (int i = 0; i < g->n; i++)
        if ((rc = (exact ? hr_gpu_layer_record : hr_gpu_layer_record_fast)(g, &g->L[i], n, seq, pos,
                                                                           run_len, n_runs))) {
            hr_vk_submit(g->vk, err); /* close the recording; nothing of it is used */
            return hr_seterr(err, rc, "GPU layer %d: a kernel refused its shapes", i);
        }
    hr_vk_copy(g->vk, g->x, (size_t)g->r.h * 4, g->io, 0, hb);
    if ((rc = hr_vk_submit(g->vk, err)))
        return rc;
    memcpy(hidden, io, hb);
    return 0;
}

int hr_gpu_win_run(hr_gpu_win *g, float *hidden, int n, int pos, char err[HR_ERR_LEN]) {
    int seq = 0;
    return hr_gpu_win_run_runs(g, hidden, n, &seq, &pos, &n, 1, err);
}
