/* model_prof.c - the model profile: what one decode token costs a layer in
 * weight bytes (per type), FLOPs, hr_matmul calls and element-wise work,
 * plus input/output layer sizes, KV bytes per token and the hidden state
 * sent per hop. Walks model.h's per-layer tensor table and mirrors
 * model/layer.c's blocks. */
#include "profiler/profiler-impl.h"

#include "kernels/types.h"

#include <stdlib.h>
#include <string.h>

/* Adds w to L; of a stack of experts a token reads share (n_expert_used /
 * n_expert; 1 for the rest). */
static void hr_prof_layer_add(hr_prof_layer *L, const hr_weight *w, double share) {
    if (!w->data)
        return;
    L->bytes += (uint64_t)w->row_bytes * (uint64_t)w->n_out;
    uint64_t n_out = (uint64_t)((double)w->n_out * share + 0.5);
    uint64_t bytes = (uint64_t)w->row_bytes * n_out;
    uint64_t params = (uint64_t)w->n_in * n_out;
    if (w->n_out <= 1)
        return; /* norm and bias vectors: read, but no matmul */
    L->flops += 2.0 * (double)params;
    for (int i = 0; i < L->n_types; i++) {
        if (L->types[i].type == w->type) {
            L->types[i].bytes += bytes;
            L->types[i].params += params;
            L->types[i].rows += n_out;
            L->types[i].n_mats++;
            return;
        }
    }
    if (L->n_types < HR_PROF_MAX_TYPES)
        L->types[L->n_types++] = (hr_prof_tbytes){
            .type = w->type, .bytes = bytes, .params = params, .rows = n_out, .n_mats = 1};
}

/* hr_matmul calls for weights run together when they share the activation
 * format (layer.c's hr_layer_mm). */
static int hr_group_calls(const hr_weight *const *w, int n) {
    int calls = 0;
    for (int i = 0; i < n;) {
        const hr_type_traits *tt = hr_type_get(w[i]->type);
        int act = tt ? (int)tt->vec_dot_type : -1;
        int j = i + 1;
        while (j < n) {
            const hr_type_traits *tj = hr_type_get(w[j]->type);
            if (!tj || (int)tj->vec_dot_type != act)
                break;
            j++;
        }
        calls++;
        i = j;
    }
    return calls;
}

/* hr_matmul calls of one layer: per batch of the tensor table's mm column. */
static int hr_prof_layer_calls(const hr_layer_weights *L) {
    int calls = 0;
    for (int mm = 1;; mm++) {
        const hr_weight *w[16];
        int n = 0;
        for (int i = 0; i < hr_layer_tensor_count() && n < 16; i++) {
            const hr_layer_tensor *t = hr_layer_tensor_get(i);
            if (t->mm == mm && hr_layer_weight(L, t)->data)
                w[n++] = hr_layer_weight(L, t);
        }
        if (n == 0)
            return calls;
        calls += hr_group_calls(w, n);
    }
}

int hr_prof_model_build(hr_prof_model *out, const hr_model *m, const hr_gguf *g,
                        char err[HR_ERR_LEN]) {
    memset(out, 0, sizeof *out);
    if (!m)
        return hr_seterr(err, HR_EINVAL, "no model");
    const hr_hparams *hp = hr_model_hparams(m);
    hr_prof_strlcpy(out->arch, hp->arch_name, sizeof out->arch);
    const char *name = NULL;
    if (g && hr_gguf_get_str(g, "general.name", &name) == 0)
        hr_prof_strlcpy(out->name, name, sizeof out->name);
    out->file_bytes = g ? hr_gguf_file_size(g) : 0;
    out->n_layer = hp->n_layer;
    out->n_embd = hp->n_embd;
    out->n_ff = hp->n_ff;
    out->n_head = hp->n_head;
    out->n_head_kv = hp->n_head_kv;
    out->head_dim = hp->head_dim;
    out->n_vocab = hp->n_vocab;
    out->tied_output = hp->tied_output;
    const hr_weight *te = hr_model_tok_embd(m);
    out->embd_type = te->type;
    out->embd_row_bytes = te->row_bytes;
    out->embd_bytes = (uint64_t)te->row_bytes * (uint64_t)te->n_out;
    /* output: norm (f32 vector in the model's arena) + LM head */
    hr_prof_layer_add(&out->output, hr_model_output(m), 1.0);
    out->output.bytes += (uint64_t)hp->n_embd * sizeof(float);
    out->output.n_calls = 1;
    int64_t E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim;
    int64_t KD = (int64_t)hp->n_head_kv * hp->head_dim;
    out->kv_bytes_per_token = 2u * (uint64_t)KD * 2u; /* K and V, f16 */
    out->hidden_bytes = (uint64_t)E * 4u;             /* f32 on the wire (the default) */
    out->n_expert = hp->n_expert;
    out->n_expert_used = hp->n_expert_used;
    for (int il = 0; il < hp->n_layer; il++)
        out->expert_bytes += hr_model_layer_expert_bytes(m, il);
    out->layers = calloc((size_t)hp->n_layer, sizeof *out->layers);
    if (!out->layers)
        return hr_seterr(err, HR_ENOMEM, "out of memory for %d layer profiles", hp->n_layer);
    out->n_layers_listed = hp->n_layer;
    for (int il = 0; il < hp->n_layer; il++) {
        const hr_layer_weights *L = hr_model_layer(m, il);
        hr_prof_layer *pl = &out->layers[il];
        double share = hp->n_expert > 0 ? (double)hp->n_expert_used / hp->n_expert : 1.0;
        for (int i = 0; i < hr_layer_tensor_count(); i++) {
            const hr_layer_tensor *t = hr_layer_tensor_get(i);
            hr_prof_layer_add(pl, hr_layer_weight(L, t), t->experts ? share : 1.0);
        }
        pl->n_calls = hr_prof_layer_calls(L);
        if (il == 0) {
            hr_prof_elems *el = &out->elems;
            el->norm =
                2 * E + (L->q_norm.data ? QD + KD : 0) + (L->attn_post_norm.data ? 2 * E : 0);
            el->add = 2 * E + (L->bq.data ? QD + 2 * KD : 0);
            el->rope = QD + KD;
            el->swiglu = hp->n_expert > 0 ? (int64_t)hp->n_ff_exp * hp->n_expert_used +
                                                (L->gate_shexp.data ? hp->n_ff_shexp : 0)
                                          : hp->n_ff;
            el->f16 = 2 * KD;
        }
    }
    return 0;
}

void hr_prof_model_clear(hr_prof_model *pm) {
    if (!pm)
        return;
    free(pm->layers);
    pm->layers = NULL;
    pm->n_layers_listed = 0;
}

int hr_prof_model_copy(hr_prof_model *dst, const hr_prof_model *src) {
    *dst = *src;
    dst->layers = NULL;
    dst->n_layers_listed = 0;
    if (src->n_layers_listed > 0 && src->layers) {
        dst->layers = malloc((size_t)src->n_layers_listed * sizeof *dst->layers);
        if (!dst->layers)
            return HR_ENOMEM;
        memcpy(dst->layers, src->layers, (size_t)src->n_layers_listed * sizeof *dst->layers);
        dst->n_layers_listed = src->n_layers_listed;
    }
    return 0;
}

uint64_t hr_prof_model_window_bytes(const hr_prof_model *pm, int b, int e, bool input,
                                    bool output) {
    uint64_t s = 0;
    for (int il = b < 0 ? 0 : b; il < e && il < pm->n_layers_listed; il++)
        s += pm->layers[il].bytes;
    if (input)
        s += pm->embd_row_bytes;
    if (output)
        s += pm->output.bytes;
    return s;
}

static int hr_types_add(int *types, int n, int max, int t) {
    for (int i = 0; i < n; i++)
        if (types[i] == t)
            return n;
    if (n < max)
        types[n++] = t;
    return n;
}

int hr_prof_model_types(const hr_prof_model *pm, int *types, int max) {
    int n = 0;
    for (int il = 0; il < pm->n_layers_listed; il++)
        for (int i = 0; i < pm->layers[il].n_types; i++)
            n = hr_types_add(types, n, max, pm->layers[il].types[i].type);
    for (int i = 0; i < pm->output.n_types; i++)
        n = hr_types_add(types, n, max, pm->output.types[i].type);
    return n;
}
