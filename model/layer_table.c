/* layer_table.c - what a transformer layer is made of: the per-layer tensor
 * table (one row per GGUF tensor of a block) and the architecture table
 * (one row per supported general.architecture). Loading, byte counts, work
 * buffer sizes, tensor-parallel slicing, the profiler and mkmodel all walk
 * these rows; the blocks that use the tensors are in layer.c. */
#include "model/layer-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
#define HR_ROW(name, field, n_in, n_out, set, split, mm)                              \
    {name, offsetof(hr_layer_weights, field), HR_DIM_##n_in, HR_DIM_##n_out, false, set, \
     HR_SPLIT_##split, mm}
/* a stack of one matrix per expert (ne[2] = n_expert) */
#define HR_EXP(name, field, n_in, n_out, set, mm)                                        \
    {name, offsetof(hr_layer_weights, field), HR_DIM_##n_in, HR_DIM_##n_out, true, set,  \
     HR_SPLIT_NONE, mm}

/* Rows in GGUF writing order (mkmodel's, llama.cpp's). */
static const hr_layer_tensor hr_layer_tensors[] = {
    /*     name after blk.N.     field      n_in  n_out set             split  mm */
    HR_ROW("attn_norm.weight",   attn_norm, EMBD, 1,    0,              NONE,  0),
    HR_ROW("attn_q.weight",      wq,        EMBD, Q,    0,              HEADS, 1),
    HR_ROW("attn_k.weight",      wk,        EMBD, KV,   0,              HEADS, 1),
    HR_ROW("attn_v.weight",      wv,        EMBD, KV,   0,              HEADS, 1),
    HR_ROW("attn_output.weight", wo,        Q,    EMBD, 0,              OUT,   2),
    HR_ROW("attn_output.bias",   bo,        EMBD, 1,    HR_LT_OUT_BIAS, NONE,  0),
    HR_ROW("attn_sinks.weight",  sinks,     HEADS, 1,   HR_LT_SINKS,    NONE,  0),
    HR_ROW("post_attention_norm.weight", attn_post_norm, EMBD, 1, HR_LT_POST_NORM, NONE, 0),
    HR_ROW("attn_q.bias",        bq,        Q,    1,    HR_LT_QKV_BIAS, HEADS, 0),
    HR_ROW("attn_k.bias",        bk,        KV,   1,    HR_LT_QKV_BIAS, HEADS, 0),
    HR_ROW("attn_v.bias",        bv,        KV,   1,    HR_LT_QKV_BIAS, HEADS, 0),
    HR_ROW("attn_q_norm.weight", q_norm,    HEAD, 1,    HR_LT_QK_NORM,  NONE,  0),
    HR_ROW("attn_k_norm.weight", k_norm,    HEAD, 1,    HR_LT_QK_NORM,  NONE,  0),
    HR_ROW("ffn_norm.weight",    ffn_norm,  EMBD, 1,    0,              NONE,  0),
    HR_ROW("ffn_gate.weight",    w_gate,    EMBD, FF,   HR_LT_FFN,      ROWS,  3),
    HR_ROW("ffn_up.weight",      w_up,      EMBD, FF,   HR_LT_FFN,      ROWS,  3),
    HR_ROW("ffn_down.weight",    w_down,    FF,   EMBD, HR_LT_FFN,      OUT,   4),
    HR_ROW("post_ffw_norm.weight", ffn_post_norm, EMBD, 1, HR_LT_POST_NORM, NONE, 0),
    HR_ROW("ffn_gate_inp.weight", gate_inp, EMBD, NEXP, HR_LT_MOE,      NONE,  5),
    HR_EXP("ffn_gate_exps.weight", gate_exps, EMBD, FFE, HR_LT_MOE,            6),
    HR_EXP("ffn_up_exps.weight",   up_exps,   EMBD, FFE, HR_LT_MOE,            6),
    HR_EXP("ffn_down_exps.weight", down_exps, FFE,  EMBD, HR_LT_MOE,           7),
    HR_ROW("ffn_gate_inp.bias",  gate_inp_b,  NEXP, 1,    HR_LT_MOE_BIAS, NONE, 0),
    HR_ROW("ffn_gate_exps.bias", gate_exps_b, FFE,  NEXP, HR_LT_MOE_BIAS, NONE, 0),
    HR_ROW("ffn_up_exps.bias",   up_exps_b,   FFE,  NEXP, HR_LT_MOE_BIAS, NONE, 0),
    HR_ROW("ffn_down_exps.bias", down_exps_b, EMBD, NEXP, HR_LT_MOE_BIAS, NONE, 0),
    HR_ROW("ffn_gate_inp_shexp.weight", gate_inp_shexp, EMBD, 1, HR_LT_SHEXP, NONE, 0),
    HR_ROW("ffn_gate_shexp.weight", gate_shexp, EMBD, FFS, HR_LT_SHEXP, NONE,  8),
    HR_ROW("ffn_up_shexp.weight",   up_shexp,   EMBD, FFS, HR_LT_SHEXP, NONE,  8),
    HR_ROW("ffn_down_shexp.weight", down_shexp, FFS,  EMBD, HR_LT_SHEXP, NONE, 9),
};
/* clang-format on */

#define HR_N_LAYER_TENSORS ((int)(sizeof hr_layer_tensors / sizeof hr_layer_tensors[0]))

/* Fused tensors: one GGUF tensor holding the rows of several table rows
 * (its parts: their fields, in row order). */
#define HR_PART(field) offsetof(hr_layer_weights, field)
static const hr_layer_fused hr_layer_fused_tensors[] = {
    {"attn_qkv.weight", HR_LT_QKV_FUSED, 3, {HR_PART(wq), HR_PART(wk), HR_PART(wv)}},
    {"ffn_up.weight", HR_LT_UP_FUSED, 2, {HR_PART(w_gate), HR_PART(w_up)}}, /* gate rows first */
};
#define HR_N_FUSED ((int)(sizeof hr_layer_fused_tensors / sizeof hr_layer_fused_tensors[0]))

/* One row per architecture. qwen2 files carry biases, but a file without
 * them is accepted (as it always was); qwen3 needs its q/k norms. A llama
 * file with experts (Mixtral) routes its feed-forward through them; the
 * *moe rows always do. phi3 fuses gate/up always and q/k/v in the files
 * that have attn_qkv (all converted ones). gpt-oss has biases on every
 * projection, the router and the experts. */
/* clang-format off */
static const hr_arch_info hr_archs[] = {
    /* name       rms_eps  rope_base   rope_neox sets            needs          moe norm_w flags */
    {"llama",    1e-5f,   10000.0f,   false,    0,              0,             0,  true,  0},
    {"qwen2",    1e-6f,   1000000.0f, true,     HR_LT_QKV_BIAS, 0,             0,  false, 0},
    {"qwen3",    1e-6f,   1000000.0f, true,     HR_LT_QK_NORM,  HR_LT_QK_NORM, 0,  false, 0},
    {"qwen3moe", 1e-6f,   1000000.0f, true,     HR_LT_QK_NORM,  HR_LT_QK_NORM, 1,  true,  0},
    {"qwen2moe", 1e-6f,   1000000.0f, true,     HR_LT_QKV_BIAS | HR_LT_SHEXP, HR_LT_SHEXP, 1, false, 0},
    {"phi3",     1e-5f,   10000.0f,   true,     HR_LT_QKV_FUSED | HR_LT_UP_FUSED, HR_LT_UP_FUSED, 0, false,
     HR_ARCH_DENSE},
    {"gemma3",   1e-6f,   10000.0f,   true,     HR_LT_QK_NORM | HR_LT_POST_NORM,
     HR_LT_QK_NORM | HR_LT_POST_NORM, 0, false, HR_ARCH_DENSE | HR_ARCH_GEGLU | HR_ARCH_EMBD_SCALE |
     HR_ARCH_SWA},
    {"gpt-oss",  1e-5f,   150000.0f,  true,     HR_LT_QKV_BIAS | HR_LT_OUT_BIAS | HR_LT_SINKS | HR_LT_MOE_BIAS,
     HR_LT_QKV_BIAS | HR_LT_OUT_BIAS | HR_LT_SINKS | HR_LT_MOE_BIAS, 1, false, HR_ARCH_OAI | HR_ARCH_SWA},
};
/* clang-format on */

#define HR_N_ARCHS ((int)(sizeof hr_archs / sizeof hr_archs[0]))

int hr_layer_tensor_count(void) { return HR_N_LAYER_TENSORS; }

const hr_layer_tensor *hr_layer_tensor_get(int i) {
    return i >= 0 && i < HR_N_LAYER_TENSORS ? &hr_layer_tensors[i] : NULL;
}

const char *hr_layer_tensor_name(const hr_layer_tensor *t, const hr_hparams *hp) {
    if (hp->arch && (hp->arch->flags & HR_ARCH_OAI) &&
        t->offset == offsetof(hr_layer_weights, ffn_norm))
        return "post_attention_norm.weight";
    return t->name;
}

const hr_weight *hr_layer_weight(const hr_layer_weights *L, const hr_layer_tensor *t) {
    return (const hr_weight *)((const char *)L + t->offset);
}

hr_weight *hr_layer_weight_mut(hr_layer_weights *L, const hr_layer_tensor *t) {
    return (hr_weight *)((char *)L + t->offset);
}

int64_t hr_dim_size(const hr_hparams *hp, hr_dim d) {
    switch (d) {
    case HR_DIM_1:
        return 1;
    case HR_DIM_HEAD:
        return hp->head_dim;
    case HR_DIM_HEADS:
        return hp->n_head;
    case HR_DIM_EMBD:
        return hp->n_embd;
    case HR_DIM_Q:
        return (int64_t)hp->n_head * hp->head_dim;
    case HR_DIM_KV:
        return (int64_t)hp->n_head_kv * hp->head_dim;
    case HR_DIM_FF:
        return hp->n_ff;
    case HR_DIM_NEXP:
        return hp->n_expert;
    case HR_DIM_FFE:
        return hp->n_ff_exp;
    case HR_DIM_FFS:
        return hp->n_ff_shexp;
    }
    abort(); /* not a hr_dim */
}

bool hr_hparams_layer_swa(const hr_hparams *hp, int il) {
    return hp->n_swa > 0 && (hp->swa_pattern == 0 || il % hp->swa_pattern < hp->swa_pattern - 1);
}

int hr_layer_fused_count(void) { return HR_N_FUSED; }

const hr_layer_fused *hr_layer_fused_get(int i) {
    return i >= 0 && i < HR_N_FUSED ? &hr_layer_fused_tensors[i] : NULL;
}

/* The table row of the field at offset off. */
static const hr_layer_tensor *hr_layer_row_at(size_t off) {
    for (int i = 0; i < HR_N_LAYER_TENSORS; i++)
        if (hr_layer_tensors[i].offset == off)
            return &hr_layer_tensors[i];
    abort(); /* a fused part names no field of the table */
}

const hr_layer_fused *hr_layer_fused_of(const hr_layer_tensor *t, unsigned sets, int *part) {
    for (int i = 0; i < HR_N_FUSED; i++) {
        const hr_layer_fused *f = &hr_layer_fused_tensors[i];
        for (int k = 0; (sets & f->set) && k < f->n_parts; k++)
            if (f->part[k] == t->offset) {
                *part = k;
                return f;
            }
    }
    return NULL;
}

hr_dim hr_layer_fused_in(const hr_layer_fused *f) { return hr_layer_row_at(f->part[0])->n_in; }

int64_t hr_layer_fused_rows(const hr_layer_fused *f, const hr_hparams *hp) {
    int64_t rows = 0;
    for (int k = 0; k < f->n_parts; k++)
        rows += hr_dim_size(hp, hr_layer_row_at(f->part[k])->n_out);
    return rows;
}

void hr_layer_fused_split(const hr_layer_fused *f, const hr_hparams *hp, const hr_weight *w,
                          hr_layer_weights *L) {
    int64_t r0 = 0;
    for (int k = 0; k < f->n_parts; k++) {
        hr_weight *p = (hr_weight *)((char *)L + f->part[k]);
        *p = *w;
        p->n_out = hr_dim_size(hp, hr_layer_row_at(f->part[k])->n_out);
        p->data = (const char *)w->data + (size_t)r0 * w->row_bytes;
        r0 += p->n_out;
    }
}

void hr_arch_layer_sets(const hr_arch_info *a, int n_expert, unsigned *sets, unsigned *needs) {
    unsigned ffn = n_expert > 0 ? HR_LT_MOE : HR_LT_FFN;
    *sets = (a->sets | ffn) & (n_expert > 0 ? ~0u : ~(unsigned)HR_LT_SHEXP);
    *needs = (a->needs | ffn) & *sets;
}

bool hr_layer_tensor_needed(const hr_layer_tensor *t, const hr_hparams *hp) {
    return t->set == 0 || (hp->needs & t->set) != 0;
}

hr_weight hr_expert_view(const hr_weight *w, int n_expert, int e) {
    hr_weight v = *w;
    v.n_out = w->n_out / n_expert;
    v.data = (const char *)w->data + (size_t)e * (size_t)v.n_out * w->row_bytes;
    return v;
}

uint64_t hr_layer_expert_bytes(const hr_layer_weights *L) {
    uint64_t s = 0;
    for (int i = 0; i < HR_N_LAYER_TENSORS; i++) {
        const hr_layer_tensor *t = &hr_layer_tensors[i];
        const hr_weight *w = hr_layer_weight(L, t);
        if (w->data && t->experts)
            s += (uint64_t)w->row_bytes * (uint64_t)w->n_out;
    }
    return s;
}

uint64_t hr_layer_bytes(const hr_layer_weights *L, bool vectors) {
    uint64_t s = 0;
    for (int i = 0; i < HR_N_LAYER_TENSORS; i++) {
        const hr_layer_tensor *t = &hr_layer_tensors[i];
        const hr_weight *w = hr_layer_weight(L, t);
        if (w->data && (vectors || t->n_out != HR_DIM_1))
            s += (uint64_t)w->row_bytes * (uint64_t)w->n_out;
    }
    return s;
}

size_t hr_layer_wbuf_size(const hr_layer_weights *L, int n_batch, size_t cur) {
    for (int i = 0; i < HR_N_LAYER_TENSORS; i++) {
        const hr_layer_tensor *t = &hr_layer_tensors[i];
        const hr_weight *w = hr_layer_weight(L, t);
        if (t->n_out == HR_DIM_1 || !w->data)
            continue;
        size_t s = hr_matmul_wbuf_size(w->type, w->n_in, n_batch);
        cur = s > cur ? s : cur;
    }
    return cur;
}

const hr_arch_info *hr_arch_find(const char *name) {
    for (int i = 0; name && i < HR_N_ARCHS; i++)
        if (strcmp(hr_archs[i].name, name) == 0)
            return &hr_archs[i];
    return NULL;
}

size_t hr_arch_names(char *buf, size_t cap) {
    size_t len = 0;
    for (int i = 0; i < HR_N_ARCHS && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", hr_archs[i].name);
    return len;
}
