/* model.c - hyper-parameters and weights from GGUF (driven by the tables in
 * layer_table.c), and the forward pass over a layer window with an F16 KV
 * cache: plain execution runs layer.c's blocks over whole layers, a context
 * with thread groups hands the window to tp.c. */
#include "model/model.h"

#include "common/log.h"
#include "kernels/quant.h"
#include "mmap/stream.h"
#include "model/gpu-impl.h"
#include "model/layer-impl.h"
#include "model/tp-impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "model"
/* sets whose tensors bind only in files whose architecture has them (the
 * others, such as q/k/v biases, bind when present) */
#define HR_LT_ONLY_SETS                                                                            \
    (HR_LT_FFN | HR_LT_MOE | HR_LT_SHEXP | HR_LT_POST_NORM | HR_LT_OUT_BIAS | HR_LT_SINKS |        \
     HR_LT_MOE_BIAS)
#define HR_MAX_CTX_DEFAULT 4096

int hr_hparams_ctx(const hr_hparams *hp, int requested) {
    if (requested > 0)
        return requested;
    return hp->n_ctx_train < HR_MAX_CTX_DEFAULT ? hp->n_ctx_train : HR_MAX_CTX_DEFAULT;
}

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

/* The experts' hyper-parameters, and the tensor sets that follow from them. */
static int hr_read_experts(const hr_gguf *g, const char *arch, hr_hparams *hp, char *err) {
    uint32_t v;
    int rc = hr_get_u32_arch(g, arch, "expert_count", &v, false, err);
    if (rc != 0 && rc != HR_ENOENT)
        return rc;
    hp->n_expert = rc == 0 ? (int)v : 0;
    if (hp->n_expert > 0 && (hp->arch->flags & HR_ARCH_DENSE))
        return hr_seterr(err, HR_EUNSUPPORTED,
                         "%s with experts (%s.expert_count %d) is not supported", arch, arch,
                         hp->n_expert);
    if (hp->n_expert > 0) {
        if ((rc = hr_get_u32_arch(g, arch, "expert_used_count", &v, true, err)))
            return rc;
        hp->n_expert_used = (int)v;
        /* llama.cpp's defaults: the dense length (Mixtral), or that length
         * shared among the used experts (qwen3moe without the key) */
        hp->n_ff_exp =
            hp->arch->moe ? hp->n_ff / (hp->n_expert_used > 0 ? hp->n_expert_used : 1) : hp->n_ff;
        rc = hr_get_u32_arch(g, arch, "expert_feed_forward_length", &v, false, err);
        if (rc == 0)
            hp->n_ff_exp = (int)v;
        else if (rc != HR_ENOENT)
            return rc;
        hp->n_ff_shexp = hp->n_ff;
        rc = hr_get_u32_arch(g, arch, "expert_shared_feed_forward_length", &v, false, err);
        if (rc == 0)
            hp->n_ff_shexp = (int)v;
        else if (rc != HR_ENOENT)
            return rc;
        if (hp->n_expert > 1024 || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert ||
            hp->n_ff_exp <= 0 || hp->n_ff_exp > (1 << 22) || hp->n_ff_shexp <= 0 ||
            hp->n_ff_shexp > (1 << 22))
            return hr_seterr(err, HR_EFORMAT,
                             "implausible experts: %d experts, %d used, expert ffn %d, shared %d",
                             hp->n_expert, hp->n_expert_used, hp->n_ff_exp, hp->n_ff_shexp);
    } else if (hp->arch->moe) {
        return hr_seterr(err, HR_EFORMAT, "metadata %s.expert_count missing or 0: %s needs experts",
                         arch, arch);
    }
    hr_arch_layer_sets(hp->arch, hp->n_expert, &hp->sets, &hp->needs);
    return 0;
}

/* llama.cpp's YaRN correction dimension: where n_rot dims of base b turn
 * `rot` times over n_ctx_orig positions */
static float hr_yarn_corr_dim(int n_rot, int n_ctx_orig, float rot, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (rot * 2.0f * 3.14159265358979323846f)) /
           (2.0f * logf(base));
}

/* RoPE scaling as llama.cpp reads it: rope.scaling.factor (or the older
 * rope.scale_linear) when rope.scaling.type is linear or absent, or yarn
 * with its original context and beta_fast / beta_slow (32 / 1 unless the
 * file says). Other scaling types are not applied. */
static int hr_read_rope_scaling(const hr_gguf *g, const char *arch, hr_hparams *hp, char *err) {
    char key[128];
    const char *type = "linear";
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    int rc = hr_gguf_get_str(g, key, &type);
    if (rc != 0 && rc != HR_ENOENT)
        return hr_seterr(err, rc, "metadata %s: wrong type", key);
    float factor = 0.0f;
    if ((rc = hr_get_f32_arch(g, arch, "rope.scaling.factor", &factor, 0.0f, err)))
        return rc;
    if (factor == 0.0f && (rc = hr_get_f32_arch(g, arch, "rope.scale_linear", &factor, 0.0f, err)))
        return rc;
    hp->rope_scale = 1.0f;
    hp->yarn_ext = 0.0f;
    hp->yarn_mscale = 1.0f;
    bool yarn = strcmp(type, "yarn") == 0;
    if ((!yarn && strcmp(type, "linear") != 0) || factor == 0.0f)
        return 0;
    if (!(factor > 0.0f && factor <= 1024.0f))
        return hr_seterr(err, HR_EFORMAT, "implausible rope.scaling.factor %g", factor);
    hp->rope_scale = 1.0f / factor;
    if (!yarn)
        return 0;
    float fast, slow, log_mul, attn;
    uint32_t orig = (uint32_t)hp->n_ctx_train;
    if ((rc = hr_get_f32_arch(g, arch, "rope.scaling.yarn_beta_fast", &fast, 32.0f, err)) ||
        (rc = hr_get_f32_arch(g, arch, "rope.scaling.yarn_beta_slow", &slow, 1.0f, err)) ||
        (rc = hr_get_f32_arch(g, arch, "rope.scaling.yarn_ext_factor", &hp->yarn_ext, 1.0f, err)) ||
        (rc = hr_get_f32_arch(g, arch, "rope.scaling.yarn_log_multiplier", &log_mul, 0.0f, err)) ||
        (rc = hr_get_f32_arch(g, arch, "rope.scaling.attn_factor", &attn, 1.0f, err)))
        return rc;
    rc = hr_get_u32_arch(g, arch, "rope.scaling.original_context_length", &orig, false, err);
    if (rc != 0 && rc != HR_ENOENT)
        return rc;
    if (log_mul != 0.0f)
        return hr_seterr(err, HR_EUNSUPPORTED,
                         "%s.rope.scaling.yarn_log_multiplier %g: YaRN with a log multiplier (as "
                         "in DeepSeek) is not supported",
                         arch, log_mul);
    if (!(fast > slow && slow > 0.0f && fast < 1e4f) || orig < 16 || orig > (1u << 24) ||
        !(hp->yarn_ext >= 0.0f && hp->yarn_ext <= 1.0f) || !(attn > 0.0f && attn < 100.0f))
        return hr_seterr(err, HR_EFORMAT,
                         "implausible YaRN parameters: beta_fast %g, beta_slow %g, original "
                         "context %u, ext_factor %g, attn_factor %g",
                         fast, slow, orig, hp->yarn_ext, attn);
    /* llama.cpp's attention factor (1 + 0.1 ln f), divided out again by the
     * context and multiplied back in by the rotation: the same float steps */
    const float m = 0.1f * logf(factor) + 1.0f;
    hp->yarn_mscale = m * (1.0f / (1.0f + 0.1f * logf(factor))) * attn;
    if (hp->yarn_ext != 0.0f)
        hp->yarn_mscale *= 1.0f + 0.1f * logf(1.0f / hp->rope_scale);
    float lo = floorf(hr_yarn_corr_dim(hp->n_rot, (int)orig, fast, hp->rope_base));
    float hi = ceilf(hr_yarn_corr_dim(hp->n_rot, (int)orig, slow, hp->rope_base));
    hp->yarn_corr[0] = lo > 0.0f ? lo : 0.0f;
    hp->yarn_corr[1] = hi < (float)(hp->n_rot - 1) ? hi : (float)(hp->n_rot - 1);
    return 0;
}

/* The scales and sliding windows an architecture's flags ask for. */
static int hr_read_arch_extras(const hr_gguf *g, const char *arch, hr_hparams *hp, char *err) {
    unsigned flags = hp->arch->flags;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    /* Gemma 3 27B scales by query_pre_attn_scalar = n_embd / n_head, not
     * head_dim; the GGUF does not carry it, and llama.cpp knows the model
     * by its 62 layers, as we do */
    if (strcmp(arch, "gemma3") == 0 && hp->n_layer == 62)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    hp->embd_scale = flags & HR_ARCH_EMBD_SCALE ? sqrtf((float)hp->n_embd) : 1.0f;
    bool oai = flags & HR_ARCH_OAI;
    hp->n_swa = 0;
    hp->swa_pattern = oai ? 2 : 6;
    hp->rope_base_swa = oai ? hp->rope_base : 10000.0f;
    hp->rope_swa_global = oai;
    uint32_t v;
    int rc;
    if (flags & HR_ARCH_SWA) {
        rc = hr_get_u32_arch(g, arch, "attention.sliding_window", &v, false, err);
        if (rc == 0)
            hp->n_swa = v > (1u << 24) ? (1 << 24) : (int)v;
        else if (rc != HR_ENOENT)
            return rc;
        rc = hr_get_u32_arch(g, arch, "attention.sliding_window_pattern", &v, false, err);
        if (rc == 0)
            hp->swa_pattern = v > 4096 ? 4096 : (int)v;
        else if (rc != HR_ENOENT)
            return rc;
        if ((rc = hr_get_f32_arch(g, arch, "rope.freq_base_swa", &hp->rope_base_swa,
                                  hp->rope_base_swa, err)))
            return rc;
        if (!(hp->rope_base_swa > 1.0f))
            return hr_seterr(err, HR_EFORMAT, "implausible rope.freq_base_swa %g",
                             hp->rope_base_swa);
    }
    float cap = 0.0f;
    if ((rc = hr_get_f32_arch(g, arch, "final_logit_softcapping", &cap, 0.0f, err)))
        return rc;
    if (cap != 0.0f)
        return hr_seterr(err, HR_EUNSUPPORTED,
                         "%s.final_logit_softcapping %g: soft-capped logits are not supported",
                         arch, cap);
    return 0;
}

/* Whether the file takes an optional fused tensor (phi3's attn_qkv): when
 * its first layer has it, every layer must; otherwise its parts are
 * tensors of their own. */
static void hr_read_fused(const hr_gguf *g, hr_hparams *hp) {
    for (int i = 0; i < hr_layer_fused_count(); i++) {
        const hr_layer_fused *f = hr_layer_fused_get(i);
        if (!(hp->sets & f->set) || (hp->needs & f->set))
            continue;
        char nm[96];
        snprintf(nm, sizeof nm, "blk.0.%s", f->name);
        if (hr_gguf_find_tensor(g, nm))
            hp->needs |= f->set;
        else
            hp->sets &= ~f->set;
    }
}

static int hr_read_hparams(const hr_gguf *g, hr_hparams *hp, char *err) {
    const char *arch = NULL;
    if (hr_gguf_get_str(g, "general.architecture", &arch) != 0)
        return hr_seterr(err, HR_EFORMAT, "metadata general.architecture missing");
    hp->arch = hr_arch_find(arch);
    if (!hp->arch) {
        char names[128];
        hr_arch_names(names, sizeof names);
        return hr_seterr(err, HR_EUNSUPPORTED, "unsupported architecture '%s' (supported: %s)",
                         arch, names);
    }
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
    if ((rc = hr_get_f32_arch(g, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps,
                              hp->arch->rms_eps, err)))
        return rc;
    if ((rc = hr_get_f32_arch(g, arch, "rope.freq_base", &hp->rope_base, hp->arch->rope_base, err)))
        return rc;
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f) || !(hp->rope_base > 1.0f))
        return hr_seterr(err, HR_EFORMAT, "implausible rms_eps %g or rope.freq_base %g",
                         hp->rms_eps, hp->rope_base);
    hp->rope_neox = hp->arch->rope_neox;
    if ((rc = hr_read_rope_scaling(g, arch, hp, err)) ||
        (rc = hr_read_arch_extras(g, arch, hp, err)) || (rc = hr_read_experts(g, arch, hp, err)))
        return rc;
    hr_read_fused(g, hp);
    return 0;
}

static float *hr_arena_take(hr_model *m, size_t n) {
    if (m->arena_used + n > m->arena_cap)
        return NULL;
    float *p = m->f32_arena + m->arena_used;
    m->arena_used += n;
    return p;
}

/* Resolves a matrix (n_in x n_out), or a stack of n_mat of them (ne[2];
 * w->n_out then counts every matrix's rows), of a supported type. */
static int hr_bind_stack(const hr_gguf *g, const char *name, int64_t n_in, int64_t n_out,
                         int64_t n_mat, hr_weight *w, bool optional, char *err) {
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
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_mat || t->ne[3] != 1)
        return hr_seterr(err, HR_EFORMAT,
                         "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, "
                         "%lld]",
                         name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], (long long)n_in, (long long)n_out, (long long)n_mat);
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out * n_mat;
    w->row_bytes = hr_type_row_bytes(t->type, n_in);
    w->data = t->data;
    return 0;
}

static int hr_bind_matrix(const hr_gguf *g, const char *name, int64_t n_in, int64_t n_out,
                          hr_weight *w, bool optional, char *err) {
    return hr_bind_stack(g, name, n_in, n_out, 1, w, optional, err);
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

/* Binds layer il's tensors as the tensor table lists them; a fused tensor
 * of the file in place of its first part, the parts as its views. */
static int hr_bind_layer(hr_model *m, const hr_gguf *g, int il, char *err) {
    for (int i = 0; i < hr_layer_tensor_count(); i++) {
        const hr_layer_tensor *t = hr_layer_tensor_get(i);
        if ((t->set & HR_LT_ONLY_SETS) && !(t->set & m->hp.sets))
            continue; /* e.g. a feed-forward this file does not have (dense, routed or shared) */
        int part;
        const hr_layer_fused *f = hr_layer_fused_of(t, m->hp.sets, &part);
        if (f && part == 0) {
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%d.%s", il, f->name);
            hr_weight w;
            int rc = hr_bind_matrix(g, nm, hr_dim_size(&m->hp, hr_layer_fused_in(f)),
                                    hr_layer_fused_rows(f, &m->hp), &w, false, err);
            if (rc)
                return rc;
            hr_layer_fused_split(f, &m->hp, &w, &m->layers[il]);
        }
        if (f)
            continue;
        bool optional = !hr_layer_tensor_needed(t, &m->hp);
        int64_t n_in = hr_dim_size(&m->hp, t->n_in), n_out = hr_dim_size(&m->hp, t->n_out);
        hr_weight *w = hr_layer_weight_mut(&m->layers[il], t);
        char nm[96];
        snprintf(nm, sizeof nm, "blk.%d.%s", il, hr_layer_tensor_name(t, &m->hp));
        int rc = t->n_out == HR_DIM_1
                     ? hr_bind_vector(m, g, nm, n_in, w, optional, err)
                     : hr_bind_stack(g, nm, n_in, n_out, t->experts ? m->hp.n_expert : 1, w,
                                     optional, err);
        if (rc && !(optional && rc == HR_ENOENT))
            return rc;
    }
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
    int E = hp->n_embd;
    /* arena: output norm + every layer's vectors + rope freqs */
    size_t layer_vec = 0;
    for (int i = 0; i < hr_layer_tensor_count(); i++) {
        const hr_layer_tensor *t = hr_layer_tensor_get(i);
        layer_vec += t->n_out == HR_DIM_1 ? (size_t)hr_dim_size(hp, t->n_in) : 0;
    }
    m->arena_cap = (size_t)E + (size_t)hp->n_layer * layer_vec + (size_t)hp->n_rot;
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
    } else if (hr_gguf_base(g)) {
        /* A token's embedding is one row looked up at random: a fault there
         * reads that page, not the read-around window (read_ahead_kb, up
         * to megabytes) that a device short of memory then loses again to
         * the next layer's weights and reads once more for the next token.
         * (Tied to the output head, the table is read whole every token.) */
        const char *base = hr_gguf_base(g);
        hr_stream_random(g, (uint64_t)((const char *)m->tok_embd.data - base),
                         m->tok_embd.row_bytes * (uint64_t)hp->n_vocab, true);
    }
    if (hr_gguf_find_tensor(g, "rope_factors_long.weight") ||
        hr_gguf_find_tensor(g, "rope_factors_short.weight")) {
        rc = hr_seterr(err, HR_EUNSUPPORTED,
                       "LongRoPE (rope_factors_long/short, as in Phi-3's 128k variants) is not "
                       "supported: use a 4k variant");
        goto fail;
    }
    const hr_gguf_tensor *rf = hr_gguf_find_tensor(g, "rope_freqs.weight");
    if (rf) {
        hr_weight w;
        if ((rc = hr_bind_vector(m, g, "rope_freqs.weight", hp->n_rot / 2, &w, false, err)))
            goto fail;
        m->rope_freqs = (float *)w.data;
    }
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = hr_bind_layer(m, g, il, err)))
            goto fail;
    *out = m;
    return 0;
fail:
    hr_model_free(m);
    return rc;
}

int hr_model_refresh_layers(hr_model *m, const hr_gguf *g, int il0, int il1, char err[HR_ERR_LEN]) {
    for (int il = il0 < 0 ? 0 : il0; il < il1 && il < m->hp.n_layer; il++)
        for (int i = 0; i < hr_layer_tensor_count(); i++) {
            const hr_layer_tensor *t = hr_layer_tensor_get(i);
            hr_weight *w = hr_layer_weight_mut(&m->layers[il], t);
            if (t->n_out != HR_DIM_1 || !w->data)
                continue;
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%d.%s", il, hr_layer_tensor_name(t, &m->hp));
            hr_weight raw;
            int rc = hr_bind_matrix(g, nm, w->n_in, 1, &raw, false, err);
            if (rc)
                return rc;
            hr_dequantize_row(raw.type, raw.data, (float *)w->data, w->n_in);
        }
    return 0;
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
    return hr_layer_bytes(&m->layers[il], true);
}

uint64_t hr_model_layer_expert_bytes(const hr_model *m, int il) {
    return hr_layer_expert_bytes(&m->layers[il]);
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
        float *h = hidden + (size_t)i * m->hp.n_embd;
        hr_dequantize_row(w->type, (const char *)w->data + (size_t)ids[i] * w->row_bytes, h,
                          m->hp.n_embd);
        for (int j = 0; m->hp.embd_scale != 1.0f && j < m->hp.n_embd; j++)
            h[j] *= m->hp.embd_scale;
    }
    return 0;
}

/* ---- context ---- */

#define HR_CTX_MAX_BUFS 40

struct hr_ctx {
    const hr_model *m;
    hr_ctx_params p;
    hr_pool *pool;
    bool own_pool;
    hr_layer_part *parts; /* [n_parts]: the window's whole layers and their KV caches (plain) */
    int n_parts;          /* 0 with groups: the executor holds the layers */
    hr_layer_env env;     /* the blocks' work buffers (with groups: the output head's only) */
    float *hb;            /* [n_batch][n_embd] hidden state of hr_ctx_eval */
    float *xb2;           /* [n_batch][n_embd] output of Wo / Wdown */
    void *bufs[HR_CTX_MAX_BUFS];
    int n_bufs;
    size_t mem;
    size_t wbuf_bytes;    /* env.wbuf's size */
    bool shared;          /* env, hb and xb2 are p.share's */
    int n_threads_decode; /* resolved per-phase thread plan */
    hr_tp *tp;            /* tensor-parallel executor, or NULL (plain) */
    hr_gpu_win *gpu;      /* the window's first n_gpu layers on a device, or NULL */
    int n_gpu;            /* layers in gpu; parts hold the window's others */
    /* sequences: [n_seq] slot in use, positions cached, last step's run */
    bool *seq_used;
    int *seq_len;
    unsigned *seq_run, step; /* the step a slot last had a run in; step counter */
    /* a step's rows: [n_batch] slots, positions, run lengths, attention
     * rows, a run of ones (hr_ctx_output_rows), each run's slot and first
     * position (GPU layers) */
    int *row_seq, *row_pos, *run_len, *ones, *run_seq, *run_pos;
    hr_attn_row *row_attn;
    int on_layer0; /* model index of parts[0] (for p.on_layer) */
};

/* hr_layer_join.on_layer of plain execution: the model's layer index. */
static void hr_ctx_on_layer(void *ud, int li) {
    hr_ctx *c = ud;
    c->p.on_layer(c->p.on_layer_ud, c->on_layer0 + li);
}

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

/* A work buffer, freed with the context (hr_layer_alloc_fn). */
static void *hr_ctx_buf(void *ud, size_t bytes) {
    hr_ctx *c = ud;
    void *p = c->n_bufs < HR_CTX_MAX_BUFS ? hr_ctx_alloc(c, bytes) : NULL;
    if (p)
        c->bufs[c->n_bufs++] = p;
    return p;
}

/* Resolves sizes, thread counts and the window; checks the window. */
static int hr_ctx_resolve(hr_ctx *c, const hr_hparams *hp, char *err) {
    if (c->p.layer_end == 0)
        c->p.layer_end = hp->n_layer;
    c->p.n_ctx = hr_hparams_ctx(hp, c->p.n_ctx);
    if (hp->n_ctx_train > 0 && c->p.n_ctx > hp->n_ctx_train)
        HR_LOG_WARN(TAG,
                    "context %d is larger than the %d tokens the model was trained on: text past "
                    "%d tokens is unreliable and the larger KV cache costs memory",
                    c->p.n_ctx, hp->n_ctx_train, hp->n_ctx_train);
    if (c->p.n_batch <= 0)
        c->p.n_batch = 1;
    if (c->p.n_batch > c->p.n_ctx)
        c->p.n_batch = c->p.n_ctx;
    if (c->p.n_threads < 1)
        c->p.n_threads = 1;
    if (c->p.n_seq < 1)
        c->p.n_seq = 1;

    if (c->p.layer_begin < 0 || c->p.layer_begin > c->p.layer_end || c->p.layer_end > hp->n_layer)
        return hr_seterr(err, HR_EINVAL, "layer window [%d, %d) outside model with %d layers",
                         c->p.layer_begin, c->p.layer_end, hp->n_layer);
    return 0;
}

const char *hr_hparams_cpu_only(const hr_hparams *hp, bool gpu) {
    if (hp->n_expert > 0)
        return "experts";
    if (hp->sets & HR_LT_POST_NORM)
        return "norms after attention and feed-forward";
    if (hp->n_swa > 0)
        return "sliding-window layers";
    if (gpu && (hp->arch->flags & HR_ARCH_GEGLU))
        return "a GeGLU feed-forward";
    if (gpu && (hp->rope_scale != 1.0f || hp->attn_scale != 1.0f / sqrtf((float)hp->head_dim)))
        return "scaled RoPE or attention scores";
    return NULL;
}

/* The thread pool: group 0's of the executor, the caller's, or our own. */
static int hr_ctx_pool_setup(hr_ctx *c, const hr_ctx_params *p, char *err) {
    const hr_model *m = c->m;
    const char *plain = hr_hparams_cpu_only(&m->hp, false);
    if (plain && (c->p.n_groups < 0 || c->p.n_groups >= 2)) {
        if (c->p.n_groups >= 2)
            HR_LOG_WARN(TAG,
                        "thread groups do not split a model with %s yet: the window runs plain "
                        "(one pool of %d threads)",
                        plain, c->p.n_threads);
        c->p.n_groups = 0;
    }
    if (c->p.n_groups < 0 || c->p.n_groups >= 2) {
        hr_tp_model tm = {.hp = &m->hp,
                          .layers = m->layers,
                          .output = &m->output,
                          .output_norm = m->output_norm.data,
                          .rope_freqs = m->rope_freqs};
        int rc = hr_tp_create(&c->tp, &tm, &c->p, err);
        if (rc)
            return rc;
    }
    if (c->tp && c->p.n_seq > 1)
        return hr_seterr(err, HR_EUNSUPPORTED,
                         "%d sequences need plain execution (no thread groups)", c->p.n_seq);
    if (c->tp) {
        c->pool = hr_tp_pool0(c->tp);
        c->mem += hr_tp_memory(c->tp);
    } else if (p->pool) {
        c->pool = p->pool;
        c->p.n_threads = hr_pool_size(p->pool);
    } else {
        c->pool = hr_pool_create(c->p.n_threads);
        c->own_pool = true;
    }
    c->n_threads_decode = c->p.n_threads_decode > 0 && c->p.n_threads_decode < c->p.n_threads
                              ? c->p.n_threads_decode
                              : c->p.n_threads;
    return c->pool ? 0 : hr_seterr(err, HR_ENOMEM, "out of memory");
}

/* The window's first p.n_gpu layers on p.vk. */
static int hr_ctx_gpu_setup(hr_ctx *c, char *err) {
    int nl = c->p.layer_end - c->p.layer_begin;
    if (!c->p.vk || c->p.n_gpu <= 0)
        return 0;
    if (c->p.n_gpu > nl)
        return hr_seterr(err, HR_EINVAL, "%d GPU layers in a window of %d", c->p.n_gpu, nl);
    if (c->tp)
        return hr_seterr(err, HR_EUNSUPPORTED,
                         "GPU layers need plain execution (no thread groups)");
    const char *plain = hr_hparams_cpu_only(&c->m->hp, true);
    if (plain)
        return hr_seterr(err, HR_EUNSUPPORTED,
                         "GPU layers of a model with %s are not supported: run its layers "
                         "on the CPU (--gpu-layers 0)",
                         plain);
    int rc =
        hr_gpu_win_create(&c->gpu, c->p.vk, &c->m->hp, c->m->layers, c->p.layer_begin, c->p.n_gpu,
                          c->m->rope_freqs, c->p.n_ctx, c->p.n_batch, c->p.n_seq, err);
    if (rc == 0)
        c->n_gpu = c->p.n_gpu;
    return rc;
}

/* The window's CPU layers with zeroed KV caches (none with groups). */
static int hr_ctx_parts_setup(hr_ctx *c, char *err) {
    const hr_hparams *hp = &c->m->hp;
    int nl = c->tp ? 0 : c->p.layer_end - c->p.layer_begin - c->n_gpu;
    c->parts = calloc((size_t)nl + 1, sizeof *c->parts);
    if (!c->parts)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    size_t kv_bytes =
        (size_t)c->p.n_seq * (size_t)c->p.n_ctx * hp->n_head_kv * hp->head_dim * sizeof(uint16_t);
    for (int i = 0; i < nl; i++) {
        hr_layer_part *P = &c->parts[c->n_parts++];
        P->w = c->m->layers[c->p.layer_begin + c->n_gpu + i];
        P->layer = c->p.layer_begin + c->n_gpu + i;
        P->n_kv = hp->n_head_kv;
        P->n_ff = hp->n_ff;
        P->swa = hr_hparams_layer_swa(hp, c->p.layer_begin + c->n_gpu + i);
        P->k = hr_ctx_alloc(c, kv_bytes);
        P->vt = hr_ctx_alloc(c, kv_bytes);
        if (!P->k || !P->vt)
            return hr_seterr(err, HR_ENOMEM, "cannot allocate KV cache (%zu MiB per layer)",
                             2 * kv_bytes >> 20);
        memset(P->k, 0, kv_bytes);
        memset(P->vt, 0, kv_bytes);
        if (hp->n_expert > 0) {
            P->hits = hr_ctx_alloc(c, (size_t)hp->n_expert * sizeof *P->hits);
            if (!P->hits)
                return hr_seterr(err, HR_ENOMEM, "out of memory");
            memset(P->hits, 0, (size_t)hp->n_expert * sizeof *P->hits);
        }
    }
    return 0;
}

/* Work buffers for n_batch tokens (with groups: for the output head). */
static int hr_ctx_buffers(hr_ctx *c, char *err) {
    const hr_model *m = c->m;
    const hr_hparams *hp = &m->hp;
    int B = c->p.n_batch;
    size_t E = (size_t)hp->n_embd, wb = 0;
    for (int i = 0; i < c->n_parts; i++)
        wb = hr_layer_wbuf_size(&c->parts[i].w, B, wb);
    size_t wo = hr_matmul_wbuf_size(m->output.type, m->output.n_in, B);
    wb = wo > wb ? wo : wb;
    c->env =
        (hr_layer_env){.hp = hp, .rope_freqs = m->rope_freqs, .n_ctx = c->p.n_ctx, .pool = c->pool};
    bool plain = !c->tp;
    const hr_ctx *sh = c->p.share;
    if (plain && sh && !sh->tp && sh->m == m && sh->p.n_batch == B && sh->p.n_ctx == c->p.n_ctx &&
        sh->p.n_threads == c->p.n_threads && sh->wbuf_bytes >= wb) {
        c->env = sh->env; /* the same sizes: n_batch, n_ctx, threads, heads, n_ff */
        c->env.pool = c->pool;
        c->hb = sh->hb;
        c->xb2 = sh->xb2;
        c->wbuf_bytes = sh->wbuf_bytes;
        c->shared = true;
    } else {
        c->hb = hr_ctx_buf(c, (size_t)B * E * 4);
        c->xb2 = hr_ctx_buf(c, (size_t)B * E * 4);
        int rc = hr_layer_env_alloc(&c->env, B, plain ? hp->n_head_kv : 0, plain ? hp->n_ff : 0,
                                    plain ? c->p.n_threads : 0, wb, hr_ctx_buf, c);
        if (rc || !c->hb || !c->xb2)
            return hr_seterr(err, HR_ENOMEM, "cannot allocate work buffers for batch %d", B);
        c->wbuf_bytes = wb;
    }
    c->env.on_route = c->p.on_route;
    c->env.route_ud = c->p.on_layer_ud;
    size_t S = (size_t)c->p.n_seq, Bz = (size_t)B;
    c->seq_used = hr_ctx_buf(c, S * sizeof *c->seq_used);
    c->seq_len = hr_ctx_buf(c, S * sizeof *c->seq_len);
    c->seq_run = hr_ctx_buf(c, S * sizeof *c->seq_run);
    c->row_seq = hr_ctx_buf(c, Bz * 6 * sizeof(int));
    c->row_attn = hr_ctx_buf(c, Bz * sizeof *c->row_attn);
    if (!c->seq_used || !c->seq_len || !c->seq_run || !c->row_seq || !c->row_attn)
        return hr_seterr(err, HR_ENOMEM, "cannot allocate tables for %zu sequences", S);
    memset(c->seq_used, 0, S * sizeof *c->seq_used);
    memset(c->seq_len, 0, S * sizeof *c->seq_len);
    memset(c->seq_run, 0, S * sizeof *c->seq_run);
    c->row_pos = c->row_seq + Bz;
    c->run_len = c->row_pos + Bz;
    c->ones = c->run_len + Bz;
    c->run_seq = c->ones + Bz;
    c->run_pos = c->run_seq + Bz;
    for (int i = 0; i < B; i++)
        c->ones[i] = 1;
    return 0;
}

int hr_ctx_create(hr_ctx **out, const hr_model *m, const hr_ctx_params *p, char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    c->m = m;
    c->p = *p;
    int rc;
    if ((rc = hr_ctx_resolve(c, &m->hp, err)) || (rc = hr_ctx_pool_setup(c, p, err)) ||
        (rc = hr_ctx_gpu_setup(c, err)) || (rc = hr_ctx_parts_setup(c, err)) ||
        (rc = hr_ctx_buffers(c, err))) {
        hr_ctx_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}

void hr_ctx_destroy(hr_ctx *c) {
    if (!c)
        return;
    for (int i = 0; i < c->n_parts; i++) {
        free(c->parts[i].k);
        free(c->parts[i].vt);
        free(c->parts[i].hits);
    }
    free(c->parts);
    for (int i = 0; i < c->n_bufs; i++)
        free(c->bufs[i]);
    if (c->own_pool)
        hr_pool_destroy(c->pool);
    hr_tp_destroy(c->tp);
    hr_gpu_win_destroy(c->gpu);
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

int hr_ctx_expert_hits(const hr_ctx *c, int il, uint64_t *out) {
    int i = il - c->p.layer_begin - c->n_gpu;
    if (i < 0 || i >= c->n_parts || !c->parts[i].hits)
        return HR_EINVAL;
    memcpy(out, c->parts[i].hits, (size_t)c->m->hp.n_expert * sizeof *out);
    return 0;
}
size_t hr_ctx_gpu_memory(const hr_ctx *c) { return c->gpu ? hr_gpu_win_bytes(c->gpu) : 0; }

/* hr_ctx_alloc's size for a request of bytes. */
static size_t hr_ctx_rounded(size_t bytes) { return ((bytes ? bytes : 64) + 63) & ~(size_t)63; }

/* A work-buffer allocator that only counts (hr_ctx_memory_predict): hands
 * out a dummy address nobody writes to. */
static void *hr_ctx_count(void *ud, size_t bytes) {
    *(size_t *)ud += hr_ctx_rounded(bytes);
    return ud;
}

int hr_ctx_memory_predict(const hr_model *m, const hr_ctx_params *p, size_t *kv, size_t *work) {
    hr_ctx c = {.m = m, .p = *p};
    char err[HR_ERR_LEN];
    if (hr_ctx_resolve(&c, &m->hp, err))
        return HR_EINVAL;
    if (p->pool)
        c.p.n_threads = hr_pool_size(p->pool);
    const hr_hparams *hp = &m->hp;
    int n_gpu = c.p.vk && c.p.n_gpu > 0 ? c.p.n_gpu : 0;
    int nl = c.p.layer_end - c.p.layer_begin, B = c.p.n_batch;
    if (n_gpu > nl)
        return HR_EINVAL;
    nl -= n_gpu;
    size_t kv_bytes =
        (size_t)c.p.n_seq * (size_t)c.p.n_ctx * hp->n_head_kv * hp->head_dim * sizeof(uint16_t);
    size_t E = (size_t)hp->n_embd, S = (size_t)c.p.n_seq, Bz = (size_t)B, wb = 0, w = 0;
    for (int i = 0; i < nl; i++)
        wb = hr_layer_wbuf_size(&m->layers[c.p.layer_begin + n_gpu + i], B, wb);
    size_t wo = hr_matmul_wbuf_size(m->output.type, m->output.n_in, B);
    wb = wo > wb ? wo : wb;
    /* hr_ctx_buffers, in its order */
    w += 2 * hr_ctx_rounded(Bz * E * 4); /* hb, xb2 */
    hr_layer_env env = {.hp = hp, .n_ctx = c.p.n_ctx};
    if (hr_layer_env_alloc(&env, B, hp->n_head_kv, hp->n_ff, c.p.n_threads, wb, hr_ctx_count, &w) !=
        0)
        return HR_EINVAL;
    w += hr_ctx_rounded(S * sizeof *c.seq_used) + hr_ctx_rounded(S * sizeof *c.seq_len) +
         hr_ctx_rounded(S * sizeof *c.seq_run) + hr_ctx_rounded(Bz * 6 * sizeof(int)) +
         hr_ctx_rounded(Bz * sizeof *c.row_attn);
    if (hp->n_expert > 0) /* each layer's routing counts */
        w += (size_t)nl * hr_ctx_rounded((size_t)hp->n_expert * sizeof(uint64_t));
    if (kv)
        *kv = (size_t)nl * 2 * hr_ctx_rounded(kv_bytes);
    if (work)
        *work = w;
    return 0;
}

/* Runs the window over a step's n rows, checked and laid out in c->row_seq,
 * c->row_pos and c->run_len (n_runs runs): its GPU layers, then its CPU
 * layers, tensor-parallel or plain. Every step of every window goes
 * through here. */
static int hr_ctx_forward(hr_ctx *c, float *hidden, int n, int n_runs, char *err) {
    hr_layer_rows R = {.seq = c->row_seq,
                       .pos = c->row_pos,
                       .run_len = c->run_len,
                       .n_runs = n_runs,
                       .attn = c->row_attn};
    if (c->gpu) {
        int rc;
        if (n_runs == 1 && c->row_seq[0] == 0) {
            rc = hr_gpu_win_run(c->gpu, hidden, n, c->row_pos[0], err);
        } else { /* each run's slot and first position */
            for (int i = 0, t = 0; i < n_runs; t += c->run_len[i++]) {
                c->run_seq[i] = c->row_seq[t];
                c->run_pos[i] = c->row_pos[t];
            }
            rc = hr_gpu_win_run_runs(c->gpu, hidden, n, c->run_seq, c->run_pos, c->run_len, n_runs,
                                     err);
        }
        if (rc)
            return rc;
        for (int il = c->p.layer_begin; c->p.on_layer && il < c->p.layer_begin + c->n_gpu; il++)
            c->p.on_layer(c->p.on_layer_ud, il);
    }
    int il0 = c->p.layer_begin + c->n_gpu;
    if (c->tp) {
        hr_tp_layers(c->tp, hidden, n, &R);
        for (int il = il0; c->p.on_layer && il < c->p.layer_end; il++)
            c->p.on_layer(c->p.on_layer_ud, il);
        return 0;
    }
    hr_pool_set_active(c->pool, n == 1 ? c->n_threads_decode : c->p.n_threads);
    c->on_layer0 = il0;
    hr_layer_join j = {.on_layer = c->p.on_layer ? hr_ctx_on_layer : NULL, .ud = c};
    hr_layer_window(&c->env, c->parts, sizeof *c->parts, c->n_parts, hidden, c->xb2, n, &R, &j);
    return 0;
}

int hr_ctx_layers(hr_ctx *c, float *hidden, int n, int pos, char err[HR_ERR_LEN]) {
    if (n < 1 || n > c->p.n_batch)
        return hr_seterr(err, HR_EINVAL, "batch of %d tokens outside [1, %d]", n, c->p.n_batch);
    if (pos < 0 || pos + n > c->p.n_ctx)
        return hr_seterr(err, HR_ERANGE, "positions [%d, %d) exceed context size %d", pos, pos + n,
                         c->p.n_ctx);
    for (int t = 0; t < n; t++) {
        c->row_seq[t] = 0;
        c->row_pos[t] = pos + t;
    }
    c->run_len[0] = n;
    c->seq_len[0] = pos + n; /* slot 0: later positions are stale */
    return hr_ctx_forward(c, hidden, n, 1, err);
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
        hr_rmsnorm(c->env.xb + (size_t)t * E, hidden + (size_t)(row0 + t) * E,
                   c->m->output_norm.data, E, hp->rms_eps);
    int one = n_rows; /* the rows as one run */
    hr_layer_rows R = {.run_len = &one, .n_runs = 1};
    hr_layer_matmul(&c->env, &c->m->output, c->env.xb, logits, n_rows, &R);
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

/* ---- several sequences ---- */

int hr_ctx_n_seq(const hr_ctx *c) { return c->p.n_seq; }

int hr_ctx_seq_add(hr_ctx *c, int seq) {
    if (seq >= c->p.n_seq)
        return HR_EINVAL;
    if (seq < 0)
        for (int i = 0; i < c->p.n_seq && seq < 0; i++)
            seq = c->seq_used[i] ? -1 : i;
    if (seq < 0 || c->seq_used[seq])
        return HR_EAGAIN;
    c->seq_used[seq] = true;
    c->seq_len[seq] = 0;
    return seq;
}

void hr_ctx_seq_remove(hr_ctx *c, int seq) {
    if (seq < 0 || seq >= c->p.n_seq)
        return;
    c->seq_used[seq] = false;
    c->seq_len[seq] = 0;
}

int hr_ctx_seq_clear(hr_ctx *c, int seq, int n_keep) {
    if (seq < 0 || seq >= c->p.n_seq || !c->seq_used[seq] || n_keep < 0)
        return HR_EINVAL;
    if (n_keep < c->seq_len[seq])
        c->seq_len[seq] = n_keep;
    return 0;
}

int hr_ctx_seq_len(const hr_ctx *c, int seq) {
    if (seq < 0 || seq >= c->p.n_seq || !c->seq_used[seq])
        return HR_EINVAL;
    return c->seq_len[seq];
}

/* Checks a step's rows and splits them into runs (c->row_*, c->run_len);
 * returns the number of runs or an error. */
static int hr_ctx_rows(hr_ctx *c, const hr_seq_pos *rows, int n, char *err) {
    if (n < 1 || n > c->p.n_batch)
        return hr_seterr(err, HR_EINVAL, "batch of %d rows outside [1, %d]", n, c->p.n_batch);
    if (++c->step == 0) { /* wrapped: forget every mark */
        memset(c->seq_run, 0, (size_t)c->p.n_seq * sizeof *c->seq_run);
        c->step = 1;
    }
    int n_runs = 0;
    for (int t = 0; t < n; t++) {
        int s = rows[t].seq, p = rows[t].pos;
        if (s < 0 || s >= c->p.n_seq || !c->seq_used[s])
            return hr_seterr(err, HR_EINVAL, "row %d: sequence %d is not in use", t, s);
        if (p < 0 || p >= c->p.n_ctx)
            return hr_seterr(err, HR_ERANGE, "row %d: position %d outside context size %d", t, p,
                             c->p.n_ctx);
        if (t > 0 && rows[t - 1].seq == s) {
            if (p != rows[t - 1].pos + 1)
                return hr_seterr(err, HR_EINVAL, "row %d: position %d does not follow %d", t, p,
                                 rows[t - 1].pos);
            if (rows[t].decode || rows[t - 1].decode)
                c->run_len[n_runs++] = 1; /* a decode row: a run of its own */
            else
                c->run_len[n_runs - 1]++;
        } else {
            if (c->seq_run[s] == c->step)
                return hr_seterr(err, HR_EINVAL, "row %d: sequence %d has two runs in one step", t,
                                 s);
            if (p > c->seq_len[s])
                return hr_seterr(err, HR_ERANGE,
                                 "row %d: position %d leaves a gap after %d cached positions of "
                                 "sequence %d",
                                 t, p, c->seq_len[s], s);
            c->seq_run[s] = c->step;
            c->run_len[n_runs++] = 1;
        }
        c->row_seq[t] = s;
        c->row_pos[t] = p;
    }
    return n_runs;
}

int hr_ctx_step(hr_ctx *c, float *hidden, const hr_seq_pos *rows, int n, char err[HR_ERR_LEN]) {
    int n_runs = hr_ctx_rows(c, rows, n, err);
    if (n_runs < 0)
        return n_runs;
    for (int t = 0; t < n; t++)
        c->seq_len[rows[t].seq] = rows[t].pos + 1; /* the run's last row sets it */
    bool own = false; /* runs of one sequence side by side (decode rows) */
    for (int t = 1; t < n && !own; t++)
        own = rows[t].seq == rows[t - 1].seq && (rows[t].decode || rows[t - 1].decode);
    if (!own || (!c->tp && !c->gpu))
        return hr_ctx_forward(c, hidden, n, n_runs, err);
    /* thread groups and GPU layers take one run per sequence: one step per
     * run, in order (the same values, without the shared weight reads) */
    size_t E = (size_t)c->m->hp.n_embd;
    for (int t0 = 0, rc; t0 < n;) {
        int l = 1;
        while (t0 + l < n && rows[t0 + l].seq == rows[t0].seq && !rows[t0 + l].decode &&
               !rows[t0 + l - 1].decode)
            l++;
        for (int t = 0; t < l; t++) {
            c->row_seq[t] = rows[t0 + t].seq;
            c->row_pos[t] = rows[t0 + t].pos;
        }
        c->run_len[0] = l;
        if ((rc = hr_ctx_forward(c, hidden + (size_t)t0 * E, l, 1, err)))
            return rc;
        t0 += l;
    }
    return 0;
}

int hr_ctx_output_rows(hr_ctx *c, const float *hidden, const int *idx, int n_rows, float *logits) {
    const hr_hparams *hp = &c->m->hp;
    if (c->tp || n_rows < 1 || n_rows > c->p.n_batch)
        return HR_EINVAL;
    int E = hp->n_embd;
    for (int t = 0; t < n_rows; t++)
        hr_rmsnorm(c->env.xb + (size_t)t * E, hidden + (size_t)idx[t] * E, c->m->output_norm.data,
                   E, hp->rms_eps);
    hr_layer_rows R = {.run_len = c->ones, .n_runs = n_rows};
    hr_layer_matmul(&c->env, &c->m->output, c->env.xb, logits, n_rows, &R);
    return 0;
}

int hr_ctx_eval_batch(hr_ctx *c, const int32_t *ids, const hr_seq_pos *rows, int n, float *logits,
                      int *n_logits, char err[HR_ERR_LEN]) {
    const hr_hparams *hp = &c->m->hp;
    *n_logits = 0;
    if (c->p.layer_begin != 0 || c->p.layer_end != hp->n_layer)
        return hr_seterr(err, HR_EINVAL, "hr_ctx_eval_batch needs a context over all layers");
    if (n < 1 || n > c->p.n_batch)
        return hr_seterr(err, HR_EINVAL, "batch of %d rows outside [1, %d]", n, c->p.n_batch);
    int rc = hr_model_embed(c->m, ids, n, c->hb, err);
    if (rc == 0)
        rc = hr_ctx_step(c, c->hb, rows, n, err);
    if (rc)
        return rc;
    int *last = c->row_seq; /* the rows are consumed: reuse for the runs' last rows */
    int nl = 0;
    for (int t = 0; t < n; t++)
        if (t == n - 1 || rows[t + 1].seq != rows[t].seq || rows[t + 1].decode || rows[t].decode)
            last[nl++] = t;
    hr_ctx_output_rows(c, c->hb, last, nl, logits);
    *n_logits = nl;
    return 0;
}
