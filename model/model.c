/* model.c - hyper-parameters and weights from GGUF, and the forward pass
 * over a layer window with an F16 KV cache. */
#include "model/model.h"

#include "common/log.h"
#include "kernels/quant.h"
#include "model/tp-impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HR_TAG "model"
#define HR_MAX_CTX_DEFAULT 4096

struct hr_model {
    hr_hparams hp;
    hr_weight tok_embd, output, output_norm;
    hr_layer_weights *layers; /* [n_layer] */
    float *rope_freqs;        /* [n_rot/2] or NULL */
    float *f32_arena;         /* converted norm/bias vectors */
    size_t arena_used, arena_cap;
};

/* ---- loading ---- */

static int hr_get_u32_arch(const hr_gguf *g, const char *arch, const char *suffix, uint32_t *out,
                           bool required, char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = hr_gguf_get_u32(g, key, out);
    if (rc == HR_ENOENT && !required)
        return HR_ENOENT;
    if (rc != 0)
        return hr_seterr(err, rc == HR_ENOENT ? HR_EFORMAT : rc, "metadata %s: %s", key,
                         rc == HR_ENOENT ? "missing" : "wrong type or out of range");
    return 0;
}

static int hr_get_f32_arch(const hr_gguf *g, const char *arch, const char *suffix, float *out,
                           float dflt, char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = hr_gguf_get_f32(g, key, out);
    if (rc == HR_ENOENT) {
        *out = dflt;
        return 0;
    }
    if (rc != 0)
        return hr_seterr(err, rc, "metadata %s: wrong type", key);
    return 0;
}

static int hr_read_hparams(const hr_gguf *g, hr_hparams *hp, char *err) {
    const char *arch = NULL;
    if (hr_gguf_get_str(g, "general.architecture", &arch) != 0)
        return hr_seterr(err, HR_EFORMAT, "metadata general.architecture missing");
    if (strcmp(arch, "llama") == 0)
        hp->arch = HR_ARCH_LLAMA;
    else if (strcmp(arch, "qwen2") == 0)
        hp->arch = HR_ARCH_QWEN2;
    else if (strcmp(arch, "qwen3") == 0)
        hp->arch = HR_ARCH_QWEN3;
    else
        return hr_seterr(err, HR_EUNSUPPORTED,
                         "unsupported architecture '%s' (supported: llama, qwen2, qwen3)", arch);
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", arch);
    uint32_t v;
    int rc;
    if ((rc = hr_get_u32_arch(g, arch, "embedding_length", &v, true, err)))
        return rc;
    hp->n_embd = (int)v;
    if ((rc = hr_get_u32_arch(g, arch, "block_count", &v, true, err)))
        return rc;
    hp->n_layer = (int)v;
    if ((rc = hr_get_u32_arch(g, arch, "feed_forward_length", &v, true, err)))
        return rc;
    hp->n_ff = (int)v;
    if ((rc = hr_get_u32_arch(g, arch, "attention.head_count", &v, true, err)))
        return rc;
    hp->n_head = (int)v;
    hp->n_head_kv = hp->n_head;
    rc = hr_get_u32_arch(g, arch, "attention.head_count_kv", &v, false, err);
    if (rc == 0)
        hp->n_head_kv = (int)v;
    else if (rc != HR_ENOENT)
        return rc;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 ||
        hp->n_head_kv <= 0 || hp->n_embd > (1 << 20) || hp->n_ff > (1 << 22) ||
        hp->n_layer > 4096 || hp->n_head > 4096)
        return hr_seterr(err, HR_EFORMAT,
                         "implausible hyper-parameters: n_embd %d, n_layer %d, n_ff %d, "
                         "n_head %d, n_head_kv %d",
                         hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv);
    if (hp->n_head % hp->n_head_kv != 0)
        return hr_seterr(err, HR_EFORMAT, "n_head %d is not a multiple of n_head_kv %d", hp->n_head,
                         hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    rc = hr_get_u32_arch(g, arch, "attention.key_length", &v, false, err);
    if (rc == 0)
        hp->head_dim = (int)v;
    else if (rc != HR_ENOENT)
        return rc;
    if (hp->head_dim <= 0 || hp->head_dim > 1024 || hp->head_dim % 2)
        return hr_seterr(err, HR_EFORMAT, "implausible head dimension %d", hp->head_dim);
    hp->n_rot = hp->head_dim;
    rc = hr_get_u32_arch(g, arch, "rope.dimension_count", &v, false, err);
    if (rc == 0)
        hp->n_rot = (int)v;
    else if (rc != HR_ENOENT)
        return rc;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return hr_seterr(err, HR_EFORMAT, "rope.dimension_count %d invalid for head_dim %d",
                         hp->n_rot, hp->head_dim);
    hp->n_ctx_train = 2048;
    rc = hr_get_u32_arch(g, arch, "context_length", &v, false, err);
    if (rc == 0 && v > 0)
        hp->n_ctx_train = v > (1u << 24) ? (1 << 24) : (int)v;
    else if (rc != 0 && rc != HR_ENOENT)
        return rc;
    float dflt_eps = hp->arch == HR_ARCH_LLAMA ? 1e-5f : 1e-6f;
    if ((rc = hr_get_f32_arch(g, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps, dflt_eps,
                              err)))
        return rc;
    float dflt_base = hp->arch == HR_ARCH_LLAMA ? 10000.0f : 1000000.0f;
    if ((rc = hr_get_f32_arch(g, arch, "rope.freq_base", &hp->rope_base, dflt_base, err)))
        return rc;
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f) || !(hp->rope_base > 1.0f))
        return hr_seterr(err, HR_EFORMAT, "implausible rms_eps %g or rope.freq_base %g",
                         hp->rms_eps, hp->rope_base);
    hp->rope_neox = hp->arch != HR_ARCH_LLAMA;
    return 0;
}

static float *hr_arena_take(hr_model *m, size_t n) {
    if (m->arena_used + n > m->arena_cap)
        return NULL;
    float *p = m->f32_arena + m->arena_used;
    m->arena_used += n;
    return p;
}

/* Resolves a matrix (n_in x n_out) of a supported type. */
static int hr_bind_matrix(const hr_gguf *g, const char *name, int64_t n_in, int64_t n_out,
                          hr_weight *w, bool optional, char *err) {
    const hr_gguf_tensor *t = hr_gguf_find_tensor(g, name);
    if (!t) {
        if (optional)
            return HR_ENOENT;
        return hr_seterr(err, HR_EFORMAT, "tensor '%s' missing", name);
    }
    const hr_type_traits *tt = hr_type_get(t->type);
    if (!tt || !tt->supported)
        return hr_seterr(err, HR_EUNSUPPORTED, "tensor '%s' has unsupported type %s (%d)", name,
                         hr_type_name(t->type), t->type);
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
        return hr_seterr(err, HR_EFORMAT,
                         "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                         name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], (long long)n_in, (long long)n_out);
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = hr_type_row_bytes(t->type, n_in);
    w->data = t->data;
    return 0;
}

/* Resolves a vector of n values, converted to f32 in the model's arena. */
static int hr_bind_vector(hr_model *m, const hr_gguf *g, const char *name, int64_t n, hr_weight *w,
                          bool optional, char *err) {
    hr_weight raw;
    int rc = hr_bind_matrix(g, name, n, 1, &raw, optional, err);
    if (rc)
        return rc;
    float *dst = hr_arena_take(m, (size_t)n);
    if (!dst)
        return hr_seterr(err, HR_EINTERNAL, "arena exhausted binding '%s'", name);
    hr_dequantize_row(raw.type, raw.data, dst, n);
    *w = (hr_weight){.type = HR_TYPE_F32,
                     .n_in = n,
                     .n_out = 1,
                     .row_bytes = (size_t)n * sizeof(float),
                     .data = dst};
    return 0;
}

int hr_model_load(hr_model **out, const hr_gguf *g, char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_model *m = calloc(1, sizeof *m);
    if (!m)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    hr_hparams *hp = &m->hp;
    int rc = hr_read_hparams(g, hp, err);
    if (rc)
        goto fail;
    const hr_gguf_tensor *te = hr_gguf_find_tensor(g, "token_embd.weight");
    if (!te) {
        rc = hr_seterr(err, HR_EFORMAT, "tensor 'token_embd.weight' missing");
        goto fail;
    }
    hp->n_vocab = (int)te->ne[1];
    if (te->ne[1] <= 0 || te->ne[1] > (1 << 22)) {
        rc = hr_seterr(err, HR_EFORMAT, "implausible vocabulary size %lld", (long long)te->ne[1]);
        goto fail;
    }
    int E = hp->n_embd, H = hp->n_head, KV = hp->n_head_kv, D = hp->head_dim, F = hp->n_ff;
    /* arena: output norm + per layer 2 norms + 3 biases + 2 head norms + rope freqs */
    m->arena_cap =
        (size_t)E +
        (size_t)hp->n_layer * (2 * (size_t)E + (size_t)H * D + 2 * (size_t)KV * D + 2 * (size_t)D) +
        (size_t)hp->n_rot;
    m->f32_arena = malloc(m->arena_cap * sizeof(float));
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->f32_arena || !m->layers) {
        rc = hr_seterr(err, HR_ENOMEM, "out of memory for model tables");
        goto fail;
    }
    if ((rc = hr_bind_matrix(g, "token_embd.weight", E, hp->n_vocab, &m->tok_embd, false, err)))
        goto fail;
    if ((rc = hr_bind_vector(m, g, "output_norm.weight", E, &m->output_norm, false, err)))
        goto fail;
    rc = hr_bind_matrix(g, "output.weight", E, hp->n_vocab, &m->output, true, err);
    if (rc == HR_ENOENT) {
        m->output = m->tok_embd;
        hp->tied_output = true;
    } else if (rc) {
        goto fail;
    }
    const hr_gguf_tensor *rf = hr_gguf_find_tensor(g, "rope_freqs.weight");
    if (rf) {
        hr_weight w;
        if ((rc = hr_bind_vector(m, g, "rope_freqs.weight", hp->n_rot / 2, &w, false, err)))
            goto fail;
        m->rope_freqs = (float *)w.data;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        hr_layer_weights *L = &m->layers[il];
        char nm[96];
#define HR_MAT(field, suffix, nin, nout)                                                           \
    snprintf(nm, sizeof nm, "blk.%d.%s.weight", il, suffix);                                       \
    if ((rc = hr_bind_matrix(g, nm, nin, nout, &L->field, false, err)))                            \
        goto fail;
#define HR_VEC(field, suffix, kind, n, opt)                                                        \
    snprintf(nm, sizeof nm, "blk.%d.%s.%s", il, suffix, kind);                                     \
    rc = hr_bind_vector(m, g, nm, n, &L->field, opt, err);                                         \
    if (rc && !(opt && rc == HR_ENOENT))                                                           \
        goto fail;
        HR_VEC(attn_norm, "attn_norm", "weight", E, false)
        HR_VEC(ffn_norm, "ffn_norm", "weight", E, false)
        HR_MAT(wq, "attn_q", E, (int64_t)H * D)
        HR_MAT(wk, "attn_k", E, (int64_t)KV * D)
        HR_MAT(wv, "attn_v", E, (int64_t)KV * D)
        HR_MAT(wo, "attn_output", (int64_t)H * D, E)
        HR_MAT(w_gate, "ffn_gate", E, F)
        HR_MAT(w_up, "ffn_up", E, F)
        HR_MAT(w_down, "ffn_down", F, E)
        HR_VEC(bq, "attn_q", "bias", (int64_t)H * D, true)
        HR_VEC(bk, "attn_k", "bias", (int64_t)KV * D, true)
        HR_VEC(bv, "attn_v", "bias", (int64_t)KV * D, true)
        HR_VEC(q_norm, "attn_q_norm", "weight", D, true)
        HR_VEC(k_norm, "attn_k_norm", "weight", D, true)
#undef HR_MAT
#undef HR_VEC
        rc = 0;
        if (hp->arch == HR_ARCH_QWEN3 && (!L->q_norm.data || !L->k_norm.data)) {
            rc = hr_seterr(err, HR_EFORMAT, "qwen3 layer %d lacks attn_q_norm/attn_k_norm", il);
            goto fail;
        }
    }
    *out = m;
    return 0;
fail:
    hr_model_free(m);
    return rc;
}

void hr_model_free(hr_model *m) {
    if (!m)
        return;
    free(m->layers);
    free(m->f32_arena);
    free(m);
}

const hr_hparams *hr_model_hparams(const hr_model *m) { return &m->hp; }
const hr_layer_weights *hr_model_layer(const hr_model *m, int il) { return &m->layers[il]; }
const hr_weight *hr_model_tok_embd(const hr_model *m) { return &m->tok_embd; }
const hr_weight *hr_model_output(const hr_model *m) { return &m->output; }

static uint64_t hr_weight_bytes(const hr_weight *w) {
    return w->data ? (uint64_t)w->row_bytes * (uint64_t)w->n_out : 0;
}

uint64_t hr_model_layer_bytes(const hr_model *m, int il) {
    const hr_layer_weights *L = &m->layers[il];
    return hr_weight_bytes(&L->wq) + hr_weight_bytes(&L->wk) + hr_weight_bytes(&L->wv) +
           hr_weight_bytes(&L->wo) + hr_weight_bytes(&L->w_gate) + hr_weight_bytes(&L->w_up) +
           hr_weight_bytes(&L->w_down) + hr_weight_bytes(&L->attn_norm) +
           hr_weight_bytes(&L->ffn_norm);
}

uint64_t hr_model_output_bytes(const hr_model *m) {
    return hr_weight_bytes(&m->output) + hr_weight_bytes(&m->output_norm);
}

int hr_model_embed(const hr_model *m, const int32_t *ids, int n, float *hidden,
                   char err[HR_ERR_LEN]) {
    const hr_weight *w = &m->tok_embd;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->hp.n_vocab)
            return hr_seterr(err, HR_ERANGE, "token id %d out of range [0, %d)", ids[i],
                             m->hp.n_vocab);
        hr_dequantize_row(w->type, (const char *)w->data + (size_t)ids[i] * w->row_bytes,
                          hidden + (size_t)i * m->hp.n_embd, m->hp.n_embd);
    }
    return 0;
}

/* ---- context ---- */

struct hr_ctx {
    const hr_model *m;
    hr_ctx_params p;
    hr_pool *pool;
    bool own_pool;
    uint16_t **k;  /* per window layer: [n_ctx][KV*D] f16 */
    uint16_t **vt; /* per window layer: [KV*D][n_ctx] f16 */
    float *hb, *xb, *xb2, *q, *kk, *vv, *att, *gate, *up, *attn_scratch;
    void *wbuf;
    size_t mem;
    int n_threads_decode; /* resolved per-phase thread plan */
    hr_tp *tp;            /* tensor-parallel executor, or NULL (plain) */
};

hr_ctx_params hr_ctx_params_default(void) {
    return (hr_ctx_params){.n_ctx = 0,
                           .n_batch = 64,
                           .n_threads = 1,
                           .layer_begin = 0,
                           .layer_end = 0,
                           .n_groups = 0,
                           .tp_copy = -1};
}

static void *hr_ctx_alloc(hr_ctx *c, size_t bytes) {
    void *p = NULL;
    if (bytes == 0)
        bytes = 64;
    bytes = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    c->mem += bytes;
    return p;
}

static size_t hr_max_wbuf(const hr_weight *w, int n_batch, size_t cur) {
    size_t s = hr_matmul_wbuf_size(w->type, w->n_in, n_batch);
    return s > cur ? s : cur;
}

int hr_ctx_create(hr_ctx **out, const hr_model *m, const hr_ctx_params *p, char err[HR_ERR_LEN]) {
    *out = NULL;
    const hr_hparams *hp = &m->hp;
    hr_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    c->m = m;
    c->p = *p;
    if (c->p.layer_end == 0)
        c->p.layer_end = hp->n_layer;
    if (c->p.n_ctx <= 0)
        c->p.n_ctx = hp->n_ctx_train < HR_MAX_CTX_DEFAULT ? hp->n_ctx_train : HR_MAX_CTX_DEFAULT;
    if (c->p.n_batch <= 0)
        c->p.n_batch = 1;
    if (c->p.n_batch > c->p.n_ctx)
        c->p.n_batch = c->p.n_ctx;
    if (c->p.n_threads < 1)
        c->p.n_threads = 1;
    int rc = 0, nl_plain = -1;
    if (c->p.layer_begin < 0 || c->p.layer_begin > c->p.layer_end || c->p.layer_end > hp->n_layer) {
        rc = hr_seterr(err, HR_EINVAL, "layer window [%d, %d) outside model with %d layers",
                       c->p.layer_begin, c->p.layer_end, hp->n_layer);
        goto fail;
    }
    if (c->p.n_groups < 0 || c->p.n_groups >= 2) {
        hr_tp_model tm = {.hp = hp,
                          .layers = m->layers,
                          .output = &m->output,
                          .output_norm = m->output_norm.data,
                          .rope_freqs = m->rope_freqs};
        if ((rc = hr_tp_create(&c->tp, &tm, &c->p, err)))
            goto fail;
        if (c->tp) { /* the plain buffers below serve embedding and hr_ctx_eval only */
            c->pool = hr_tp_pool0(c->tp);
            c->mem += hr_tp_memory(c->tp);
            nl_plain = 0;
        }
    }
    if (c->tp) {
        /* pool borrowed from the executor */
    } else if (p->pool) {
        c->pool = p->pool;
        c->p.n_threads = hr_pool_size(p->pool);
    } else {
        c->pool = hr_pool_create(c->p.n_threads);
        c->own_pool = true;
    }
    int nl = nl_plain < 0 ? c->p.layer_end - c->p.layer_begin : 0;
    c->n_threads_decode = c->p.n_threads_decode > 0 && c->p.n_threads_decode < c->p.n_threads
                              ? c->p.n_threads_decode
                              : c->p.n_threads;
    c->k = calloc((size_t)nl + 1, sizeof *c->k);
    c->vt = calloc((size_t)nl + 1, sizeof *c->vt);
    if (!c->pool || !c->k || !c->vt) {
        rc = hr_seterr(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    size_t E = (size_t)hp->n_embd, B = (size_t)c->p.n_batch;
    size_t QD = (size_t)hp->n_head * hp->head_dim, KD = (size_t)hp->n_head_kv * hp->head_dim;
    size_t kv_bytes = (size_t)c->p.n_ctx * KD * sizeof(uint16_t);
    for (int i = 0; i < nl; i++) {
        c->k[i] = hr_ctx_alloc(c, kv_bytes);
        c->vt[i] = hr_ctx_alloc(c, kv_bytes);
        if (!c->k[i] || !c->vt[i]) {
            rc = hr_seterr(err, HR_ENOMEM, "cannot allocate KV cache (%zu MiB per layer)",
                           2 * kv_bytes >> 20);
            goto fail;
        }
        memset(c->k[i], 0, kv_bytes);
        memset(c->vt[i], 0, kv_bytes);
    }
    size_t wb = 0;
    for (int il = c->p.layer_begin; il < c->p.layer_end && !c->tp; il++) {
        const hr_layer_weights *L = &m->layers[il];
        wb = hr_max_wbuf(&L->wq, (int)B, wb);
        wb = hr_max_wbuf(&L->wk, (int)B, wb);
        wb = hr_max_wbuf(&L->wv, (int)B, wb);
        wb = hr_max_wbuf(&L->wo, (int)B, wb);
        wb = hr_max_wbuf(&L->w_gate, (int)B, wb);
        wb = hr_max_wbuf(&L->w_up, (int)B, wb);
        wb = hr_max_wbuf(&L->w_down, (int)B, wb);
    }
    wb = hr_max_wbuf(&m->output, (int)B, wb);
    size_t F = (size_t)hp->n_ff;
    size_t plain = c->tp ? 0 : 1; /* the executor has its own per-group buffers */
    QD *= plain;
    KD *= plain;
    F *= plain;
    c->hb = hr_ctx_alloc(c, B * E * 4);
    c->xb = hr_ctx_alloc(c, B * E * 4);
    c->xb2 = hr_ctx_alloc(c, B * (E > QD ? E : QD) * 4);
    c->q = hr_ctx_alloc(c, B * QD * 4);
    c->kk = hr_ctx_alloc(c, B * KD * 4);
    c->vv = hr_ctx_alloc(c, B * KD * 4);
    c->att = hr_ctx_alloc(c, B * QD * 4);
    c->gate = hr_ctx_alloc(c, B * F * 4);
    c->up = hr_ctx_alloc(c, B * F * 4);
    c->attn_scratch =
        hr_ctx_alloc(c, plain * c->p.n_threads * ((size_t)c->p.n_ctx + hp->head_dim) * 4);
    c->wbuf = hr_ctx_alloc(c, wb);
    if (!c->hb || !c->xb || !c->xb2 || !c->q || !c->kk || !c->vv || !c->att || !c->gate || !c->up ||
        !c->attn_scratch || !c->wbuf) {
        rc = hr_seterr(err, HR_ENOMEM, "cannot allocate work buffers for batch %d", c->p.n_batch);
        goto fail;
    }
    *out = c;
    return 0;
fail:
    hr_ctx_destroy(c);
    return rc;
}

void hr_ctx_destroy(hr_ctx *c) {
    if (!c)
        return;
    int nl = c->tp ? 0 : c->p.layer_end - c->p.layer_begin;
    for (int i = 0; c->k && i < nl; i++)
        free(c->k[i]);
    for (int i = 0; c->vt && i < nl; i++)
        free(c->vt[i]);
    free(c->k);
    free(c->vt);
    free(c->hb);
    free(c->xb);
    free(c->xb2);
    free(c->q);
    free(c->kk);
    free(c->vv);
    free(c->att);
    free(c->gate);
    free(c->up);
    free(c->attn_scratch);
    free(c->wbuf);
    if (c->own_pool)
        hr_pool_destroy(c->pool);
    hr_tp_destroy(c->tp);
    free(c);
}

const hr_ctx_params *hr_ctx_get_params(const hr_ctx *c) { return &c->p; }
hr_pool *hr_ctx_pool(hr_ctx *c) { return c->pool; }
int hr_ctx_n_groups(const hr_ctx *c) { return c->tp ? hr_tp_n_groups(c->tp) : 1; }

int hr_ctx_tp_stats(const hr_ctx *c, hr_tp_stats *out) {
    if (!c->tp)
        return HR_EINVAL;
    hr_tp_get_stats(c->tp, out);
    return 0;
}

void hr_ctx_tp_stats_reset(hr_ctx *c) {
    if (c->tp)
        hr_tp_reset_stats(c->tp);
}
size_t hr_ctx_memory(const hr_ctx *c) { return c->mem; }

/* Runs y_j = W_j x, grouping weights that share an activation format. */
static void hr_mm_group(hr_ctx *c, int n_w, const hr_weight *const *w, float *const *y,
                        const float *x, int n) {
    int i = 0;
    while (i < n_w) {
        int act = hr_type_get(w[i]->type)->vec_dot_type;
        int jn = i + 1;
        while (jn < n_w && (int)hr_type_get(w[jn]->type)->vec_dot_type == act)
            jn++;
        hr_matmul(c->pool, jn - i, w + i, y + i, x, n, c->wbuf);
        i = jn;
    }
}

static void hr_mm1(hr_ctx *c, const hr_weight *w, float *y, const float *x, int n) {
    hr_matmul(c->pool, 1, &w, &y, x, n, c->wbuf);
}

int hr_ctx_layers(hr_ctx *c, float *hidden, int n, int pos, char err[HR_ERR_LEN]) {
    const hr_hparams *hp = &c->m->hp;
    if (n < 1 || n > c->p.n_batch)
        return hr_seterr(err, HR_EINVAL, "batch of %d tokens outside [1, %d]", n, c->p.n_batch);
    if (pos < 0 || pos + n > c->p.n_ctx)
        return hr_seterr(err, HR_ERANGE, "positions [%d, %d) exceed context size %d", pos, pos + n,
                         c->p.n_ctx);
    int E = hp->n_embd, D = hp->head_dim, H = hp->n_head, KV = hp->n_head_kv, F = hp->n_ff;
    int QD = H * D, KD = KV * D;
    if (c->tp) {
        hr_tp_layers(c->tp, hidden, n, pos);
        return 0;
    }
    hr_pool_set_active(c->pool, n == 1 ? c->n_threads_decode : c->p.n_threads);
    hr_rope_params rp = {.n_rot = hp->n_rot,
                         .freq_base = hp->rope_base,
                         .neox = hp->rope_neox,
                         .freq_factors = c->m->rope_freqs};
    for (int il = c->p.layer_begin; il < c->p.layer_end; il++) {
        const hr_layer_weights *L = &c->m->layers[il];
        int li = il - c->p.layer_begin;
        /* attention block */
        for (int t = 0; t < n; t++)
            hr_rmsnorm(c->xb + (size_t)t * E, hidden + (size_t)t * E, L->attn_norm.data, E,
                       hp->rms_eps);
        const hr_weight *wqkv[3] = {&L->wq, &L->wk, &L->wv};
        float *yqkv[3] = {c->q, c->kk, c->vv};
        hr_mm_group(c, 3, wqkv, yqkv, c->xb, n);
        for (int t = 0; t < n; t++) {
            float *qt = c->q + (size_t)t * QD, *kt = c->kk + (size_t)t * KD;
            float *vt = c->vv + (size_t)t * KD;
            if (L->bq.data)
                hr_add(qt, L->bq.data, QD);
            if (L->bk.data)
                hr_add(kt, L->bk.data, KD);
            if (L->bv.data)
                hr_add(vt, L->bv.data, KD);
            if (L->q_norm.data) {
                for (int h = 0; h < H; h++)
                    hr_rmsnorm(qt + (size_t)h * D, qt + (size_t)h * D, L->q_norm.data, D,
                               hp->rms_eps);
                for (int h = 0; h < KV; h++)
                    hr_rmsnorm(kt + (size_t)h * D, kt + (size_t)h * D, L->k_norm.data, D,
                               hp->rms_eps);
            }
            hr_rope(qt, H, D, pos + t, &rp);
            hr_rope(kt, KV, D, pos + t, &rp);
            uint16_t *kc = c->k[li] + (size_t)(pos + t) * KD;
            uint16_t *vc = c->vt[li];
            for (int i = 0; i < KD; i++) {
                kc[i] = hr_fp32_to_fp16(kt[i]);
                vc[(size_t)i * c->p.n_ctx + pos + t] = hr_fp32_to_fp16(vt[i]);
            }
        }
        hr_attn_args aa = {.n_head = H,
                           .n_kv = KV,
                           .head_dim = D,
                           .n_ctx = c->p.n_ctx,
                           .k = c->k[li],
                           .vt = c->vt[li],
                           .scratch = c->attn_scratch};
        hr_attention(c->pool, &aa, c->q, n, pos, c->att);
        hr_mm1(c, &L->wo, c->xb2, c->att, n);
        for (int t = 0; t < n; t++)
            hr_add(hidden + (size_t)t * E, c->xb2 + (size_t)t * E, E);
        /* feed-forward block */
        for (int t = 0; t < n; t++)
            hr_rmsnorm(c->xb + (size_t)t * E, hidden + (size_t)t * E, L->ffn_norm.data, E,
                       hp->rms_eps);
        const hr_weight *wgu[2] = {&L->w_gate, &L->w_up};
        float *ygu[2] = {c->gate, c->up};
        hr_mm_group(c, 2, wgu, ygu, c->xb, n);
        for (int t = 0; t < n; t++)
            hr_swiglu(c->gate + (size_t)t * F, c->gate + (size_t)t * F, c->up + (size_t)t * F, F);
        hr_mm1(c, &L->w_down, c->xb2, c->gate, n);
        for (int t = 0; t < n; t++)
            hr_add(hidden + (size_t)t * E, c->xb2 + (size_t)t * E, E);
    }
    return 0;
}

int hr_ctx_output(hr_ctx *c, const float *hidden, int row0, int n_rows, float *logits) {
    const hr_hparams *hp = &c->m->hp;
    if (n_rows < 1 || n_rows > c->p.n_batch)
        return HR_EINVAL;
    if (c->tp) {
        hr_tp_output(c->tp, hidden, row0, n_rows, logits);
        return 0;
    }
    int E = hp->n_embd;
    for (int t = 0; t < n_rows; t++)
        hr_rmsnorm(c->xb + (size_t)t * E, hidden + (size_t)(row0 + t) * E, c->m->output_norm.data,
                   E, hp->rms_eps);
    hr_mm1(c, &c->m->output, logits, c->xb, n_rows);
    return 0;
}

int hr_ctx_eval(hr_ctx *c, const int32_t *ids, int n, int pos, float *logits, bool all_logits,
                char err[HR_ERR_LEN]) {
    const hr_hparams *hp = &c->m->hp;
    if (c->p.layer_begin != 0 || c->p.layer_end != hp->n_layer)
        return hr_seterr(err, HR_EINVAL, "hr_ctx_eval needs a context over all layers");
    if (n < 1)
        return hr_seterr(err, HR_EINVAL, "no tokens to evaluate");
    for (int done = 0; done < n;) {
        int nb = n - done < c->p.n_batch ? n - done : c->p.n_batch;
        int rc = hr_model_embed(c->m, ids + done, nb, c->hb, err);
        if (rc)
            return rc;
        if ((rc = hr_ctx_layers(c, c->hb, nb, pos + done, err)))
            return rc;
        if (all_logits)
            hr_ctx_output(c, c->hb, 0, nb, logits + (size_t)done * hp->n_vocab);
        else if (done + nb == n)
            hr_ctx_output(c, c->hb, nb - 1, 1, logits);
        done += nb;
    }
    return 0;
}
