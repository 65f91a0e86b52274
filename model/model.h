/* model.h - transformer hyper-parameters, weights view and the forward
 * pass over a window of layers, with its KV cache.
 *
 * hr_model is an immutable view of a GGUF file's weights (borrowed from
 * the hr_gguf, which must outlive it); it is thread-safe to share. A
 * hr_ctx owns the KV cache for one contiguous layer window [layer_begin,
 * layer_end) plus work buffers sized up front for n_batch tokens, and a
 * thread pool; it is used by one thread at a time. The per-token path
 * allocates nothing.
 *
 * Supported architectures (the table in model/layer_table.c): llama
 * (Llama 2/3, Mistral, TinyLlama, SmolLM; Mixtral when the file has
 * experts), qwen2 (q/k/v bias, NEOX RoPE, tied embeddings), qwen3
 * (per-head q/k RMSNorm), qwen3moe (qwen3 with routed experts), qwen2moe
 * (qwen2 with routed experts and a gated shared expert), phi3 (Phi-3 mini
 * and medium: fused q/k/v and gate/up tensors; the 128k variants' LongRoPE
 * is refused) and gemma3 (sliding-window local layers between global
 * ones, GeGLU, norms after attention and feed-forward, per-head q/k norms,
 * scaled embeddings) and gpt-oss (biases everywhere, attention sinks,
 * local layers every other layer, YaRN RoPE, routed experts with a
 * clamped SwiGLU, usually in MXFP4). Anything else is refused with a
 * clear message. */
#ifndef HR_MODEL_MODEL_H
#define HR_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "gpu/vk.h"
#include "kernels/ops.h"
#include "mmap/gguf.h"

/* Optional tensor sets of a layer (hr_layer_tensor.set, hr_arch_info). */
enum {
    HR_LT_QKV_BIAS = 1u << 0, /* attn_{q,k,v}.bias */
    HR_LT_QK_NORM = 1u << 1,  /* per-head attn_{q,k}_norm.weight */
    HR_LT_FFN = 1u << 2,   /* the dense SwiGLU ffn_{gate,up,down} (every layer of a dense model) */
    HR_LT_MOE = 1u << 3,   /* mixture of experts: router ffn_gate_inp + ffn_{gate,up,down}_exps */
    HR_LT_SHEXP = 1u << 4, /* a shared expert beside the routed ones, with its sigmoid gate */
    HR_LT_QKV_FUSED = 1u << 5, /* attn_qkv.weight: the rows of Wq, Wk, Wv in one tensor */
    HR_LT_UP_FUSED = 1u << 6,  /* ffn_up.weight of 2 n_ff rows: Wgate's, then Wup's */
    HR_LT_POST_NORM = 1u << 7, /* post_attention_norm, post_ffw_norm: each block's output normed */
    HR_LT_OUT_BIAS = 1u << 8,  /* attn_output.bias */
    HR_LT_SINKS = 1u << 9,     /* attn_sinks.weight: one learned logit per head in each softmax */
    HR_LT_MOE_BIAS = 1u << 10, /* ffn_gate_inp.bias and the experts' ffn_{gate,up,down}_exps.bias */
};

/* What an architecture computes differently (hr_arch_info.flags). */
enum {
    HR_ARCH_DENSE = 1u << 0,      /* experts refused */
    HR_ARCH_GEGLU = 1u << 1,      /* feed-forward gate through the tanh GELU, not SiLU */
    HR_ARCH_EMBD_SCALE = 1u << 2, /* embeddings times sqrt(n_embd) */
    /* local and global layers: attention.sliding_window positions on all but
     * every attention.sliding_window_pattern-th layer (6 by default), RoPE
     * base rope.freq_base_swa (10000) there */
    HR_ARCH_SWA = 1u << 3,
    /* gpt-oss: the feed-forward's input norm is stored as post_attention_norm;
     * the router picks the top-k logits and weighs them by a softmax over
     * those k; the experts' SwiGLU is clamped (gate <= 7, |up| <= 7, gate
     * through x * sigmoid(1.702 x), times up + 1) after their biases; every
     * other layer is local (pattern 2) with the global layers' RoPE */
    HR_ARCH_OAI = 1u << 4,
};

/* One row of the architecture table (model/layer_table.c). */
typedef struct {
    const char *name; /* GGUF general.architecture */
    float rms_eps;    /* default when the GGUF has no attention.layer_norm_rms_epsilon */
    float rope_base;  /* default when the GGUF has no rope.freq_base */
    bool rope_neox;   /* RoPE on (i, i + n_rot/2) pairs, else on adjacent pairs */
    unsigned sets;    /* HR_LT_* sets its layers carry (mkmodel writes them); HR_LT_FFN or
                         HR_LT_MOE follow the file's expert_count (hr_hparams.sets) */
    unsigned needs;   /* those of sets a file must have (the others bind when present) */
    int moe;          /* experts: 0 = by expert_count (dense without), 1 = always (refused
                         without experts) */
    bool moe_norm_w;  /* the top-k routing weights are divided by their sum */
    unsigned flags;   /* HR_ARCH_* */
} hr_arch_info;

/* The architecture called name, or NULL. Thread-safe (static table). */
const hr_arch_info *hr_arch_find(const char *name);
/* Writes "llama, qwen2, ..." (for messages) into buf; returns its length. */
size_t hr_arch_names(char *buf, size_t cap);

typedef struct {
    const hr_arch_info *arch; /* row of the architecture table */
    char arch_name[32];
    int n_vocab;
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim; /* key_length (may differ from n_embd / n_head) */
    int n_ff;
    int n_ctx_train;
    int n_rot;
    float rms_eps;
    float rope_base;
    float rope_scale; /* RoPE scaling (linear or YaRN): angles times 1 / rope.scaling.factor
                         (1: none) */
    /* YaRN (rope.scaling.type yarn; yarn_ext 0 otherwise): dimensions below
     * yarn_corr[0] keep their unscaled angle, those above yarn_corr[1] take
     * the scaled one, a linear ramp between (times yarn_ext); cos and sin are
     * multiplied by yarn_mscale (1 + 0.1 ln factor, as llama.cpp's graph
     * ends up with) */
    float yarn_ext, yarn_mscale, yarn_corr[2];
    bool rope_neox;
    bool tied_output; /* output head reuses token_embd */
    float attn_scale; /* of the attention scores: 1/sqrt(head_dim), or the architecture's */
    float embd_scale; /* embeddings times this (1: as stored) */
    /* sliding-window attention (HR_ARCH_SWA; n_swa 0: every layer sees every
     * earlier position): layer il is local unless il % swa_pattern ==
     * swa_pattern - 1; a local layer sees its last n_swa positions (itself
     * included) and rotates with base rope_base_swa, unscaled */
    int n_swa;
    int swa_pattern;
    float rope_base_swa;
    bool rope_swa_global; /* local layers rotate as the global ones (scaling, YaRN) too */
    /* mixture of experts (n_expert 0: a dense model) */
    int n_expert;      /* routed experts per layer */
    int n_expert_used; /* experts each token is routed to (top-k) */
    int n_ff_exp;      /* rows of each expert's gate/up */
    int n_ff_shexp;    /* rows of the shared expert's gate/up (HR_LT_SHEXP) */
    unsigned sets;     /* HR_LT_* sets this file's layers carry (arch's, with FFN or MOE) */
    unsigned needs;    /* those it must have */
} hr_hparams;

/* One layer's tensors; the per-layer tensor table below says which GGUF
 * tensor each field holds. Vectors (norms, biases) are f32 copies in the
 * model with n_in elements and n_out = 1; absent optional ones have data
 * NULL. A fused tensor of the file (HR_LT_QKV_FUSED, HR_LT_UP_FUSED) has
 * no field: its parts (wq/wk/wv, w_gate/w_up) are views of its rows. */
typedef struct {
    hr_weight attn_norm, wq, wk, wv, wo, ffn_norm;
    hr_weight bo;                            /* HR_LT_OUT_BIAS */
    hr_weight sinks;                         /* HR_LT_SINKS: [n_head] */
    hr_weight w_gate, w_up, w_down;          /* HR_LT_FFN */
    hr_weight bq, bk, bv;                    /* HR_LT_QKV_BIAS */
    hr_weight q_norm, k_norm;                /* HR_LT_QK_NORM */
    hr_weight attn_post_norm, ffn_post_norm; /* HR_LT_POST_NORM */
    /* HR_LT_MOE: the router [n_embd -> n_expert] and the experts, each a
     * stack of n_expert matrices (n_out counts all experts' rows; expert
     * e's rows are [e * n_out / n_expert, (e + 1) * n_out / n_expert)) */
    hr_weight gate_inp, gate_exps, up_exps, down_exps;
    hr_weight gate_inp_shexp, gate_shexp, up_shexp, down_shexp; /* HR_LT_SHEXP */
    /* HR_LT_MOE_BIAS: the router's bias [n_expert] and the experts' biases,
     * f32 matrices of one row per expert ([n_ff_exp] for gate and up,
     * [n_embd] for down) */
    hr_weight gate_inp_b, gate_exps_b, up_exps_b, down_exps_b;
} hr_layer_weights;

/* A tensor dimension in terms of the hyper-parameters. */
typedef enum {
    HR_DIM_1,     /* 1: the tensor is a vector */
    HR_DIM_HEAD,  /* head_dim */
    HR_DIM_HEADS, /* n_head */
    HR_DIM_EMBD,  /* n_embd */
    HR_DIM_Q,     /* n_head * head_dim */
    HR_DIM_KV,    /* n_head_kv * head_dim */
    HR_DIM_FF,    /* n_ff */
    HR_DIM_NEXP,  /* n_expert */
    HR_DIM_FFE,   /* n_ff_exp */
    HR_DIM_FFS,   /* n_ff_shexp */
} hr_dim;

/* How a tensor splits over tensor-parallel thread groups (model/tp.h). */
typedef enum {
    HR_SPLIT_NONE,  /* replicated: every group reads it whole */
    HR_SPLIT_HEADS, /* by KV-head groups: the rows (vector: elements) of the group's heads */
    HR_SPLIT_ROWS,  /* by rows: the group's n_ff range */
    HR_SPLIT_OUT,   /* by output rows (n_embd), or by the matching input columns with tp_reduce */
} hr_split;

/* One row of the per-layer tensor table (model/layer_table.c). */
typedef struct {
    const char *name;   /* GGUF name after "blk.N.", e.g. "attn_q.weight" */
    size_t offset;      /* of its hr_weight in hr_layer_weights */
    hr_dim n_in, n_out; /* ne[0], ne[1]; n_out HR_DIM_1 for a vector */
    bool experts;       /* ne[2] = n_expert: a stack of one matrix per expert */
    unsigned set;       /* 0 = every layer of every architecture has it; else its HR_LT_* set */
    hr_split split;
    int mm; /* hr_matmul batch in layer.c: matrices with the same mm share their input and run
               in one call when their activation formats agree; 0 for vectors */
} hr_layer_tensor;

/* The table: rows 0 .. hr_layer_tensor_count() - 1. Thread-safe. */
int hr_layer_tensor_count(void);
const hr_layer_tensor *hr_layer_tensor_get(int i);
/* The GGUF name of row t (after "blk.N.") in a file of these
 * hyper-parameters: gpt-oss stores the feed-forward's input norm as
 * "post_attention_norm.weight". */
const char *hr_layer_tensor_name(const hr_layer_tensor *t, const hr_hparams *hp);
/* The weight a row names in L. */
const hr_weight *hr_layer_weight(const hr_layer_weights *L, const hr_layer_tensor *t);
/* Size of d for these hyper-parameters. */
int64_t hr_dim_size(const hr_hparams *hp, hr_dim d);
/* Whether layer il is a sliding-window (local) layer. Thread-safe. */
bool hr_hparams_layer_swa(const hr_hparams *hp, int il);
/* What layers of this model compute that only plain CPU execution does
 * ("experts", "sliding-window layers", ...): tensor-parallel thread groups
 * run such a window plain; GPU layers (gpu true: the GPU's longer list)
 * are refused. NULL: nothing. Thread-safe. */
const char *hr_hparams_cpu_only(const hr_hparams *hp, bool gpu);

typedef struct hr_model hr_model;

/* Reads hyper-parameters and resolves every tensor, checking shapes and
 * types against the hyper-parameters. */
int hr_model_load(hr_model **out, const hr_gguf *g, char err[HR_ERR_LEN]);
/* Copies the vectors (norms, biases) of layers [il0, il1) from g again into
 * the model's own f32 copies: for a model loaded from a file whose layer
 * bytes arrived afterwards (a worker's cache). Not while a context of those
 * layers computes. */
int hr_model_refresh_layers(hr_model *m, const hr_gguf *g, int il0, int il1, char err[HR_ERR_LEN]);
void hr_model_free(hr_model *m);
const hr_hparams *hr_model_hparams(const hr_model *m);
/* The context (KV positions) everything sizes by default: requested when
 * > 0, else the training context capped at 4096. */
int hr_hparams_ctx(const hr_hparams *hp, int requested);
const hr_layer_weights *hr_model_layer(const hr_model *m, int il);
const hr_weight *hr_model_tok_embd(const hr_model *m);
const hr_weight *hr_model_output(const hr_model *m);
/* Weight bytes of layer il: every tensor of the table it has (matrices as
 * stored, vectors as f32), all experts included. */
uint64_t hr_model_layer_bytes(const hr_model *m, int il);
/* Of those, the bytes of the routed experts (0 for a dense layer): a token
 * reads n_expert_used / n_expert of them. */
uint64_t hr_model_layer_expert_bytes(const hr_model *m, int il);
/* Expert e's matrix of a stack w (HR_LT_MOE): a view of its rows. */
hr_weight hr_expert_view(const hr_weight *w, int n_expert, int e);
/* LM head + output norm bytes read per output row. */
uint64_t hr_model_output_bytes(const hr_model *m);

/* hidden[i][:] = embedding row of ids[i]; hidden: [n][n_embd] f32. */
int hr_model_embed(const hr_model *m, const int32_t *ids, int n, float *hidden,
                   char err[HR_ERR_LEN]);

typedef struct {
    int n_ctx;       /* KV cache positions per sequence (0 = model's training context, capped
                        at 4096) */
    int n_seq;       /* KV slots: sequences a step may carry (hr_ctx_step); 0 = 1 */
    int n_batch;     /* most rows per step */
    int n_threads;   /* pool size (>= 1) */
    int layer_begin; /* window [layer_begin, layer_end) */
    int layer_end;   /* 0 = n_layer */
    hr_pool *pool;   /* borrowed shared pool (then n_threads is ignored), or
                        NULL for a pool owned by the context; ignored with groups */
    /* Per-phase thread plan: single-token calls (decode) use this many
     * threads (0 = n_threads); batches (prefill) use n_threads. */
    int n_threads_decode;
    /* NUMA-aware tensor parallelism (model/tp.h): 0 or 1 = plain execution;
     * N >= 2 = N thread groups laid over the NUMA nodes (several logical
     * groups per node when there are fewer nodes); -1 = one group per NUMA
     * node (per L3 domain with group_l3), which is plain on a single node.
     * With groups, n_threads and n_threads_decode count all groups' threads
     * (each group gets at least one). */
    int n_groups;
    bool group_l3;
    int tp_copy;          /* weight slices: -1 = copy into node memory when memory is
                             bound and RAM suffices, 0 = views of the mapping, 1 = copy */
    bool tp_reduce;       /* split Wo/Wdown by columns and sum partial outputs (2 barriers
                             per layer, not bit-identical) instead of the exact row split
                             (4 barriers per layer, bit-identical to plain); see tp.h */
    const char *topology; /* borrowed hwloc synthetic description or .xml path (tests);
                             NULL = this machine (or HWLOC_SYNTHETIC / HWLOC_XMLFILE) */
    /* Progress: called on the calling thread after each layer of
     * a step (hr_ctx_step, hr_ctx_layers) with its model layer index (with
     * thread groups: for each layer once the window is done). It must be
     * cheap (a streamer's signal, never disk or allocation). NULL = none. */
    void (*on_layer)(void *ud, int layer);
    void *on_layer_ud; /* borrowed, passed to on_layer and on_route */
    /* Experts: called on the calling thread once a CPU layer's router has
     * chosen, before the experts are read: the model layer index and the
     * distinct experts the step's rows go to (ascending, n of them). Cheap,
     * as on_layer (a streamer's signal). NULL = none. */
    void (*on_route)(void *ud, int layer, const int *experts, int n);
    /* Work buffers of another context to use instead of allocating them
     * (borrowed; it must outlive this one, and the two must be used by one
     * thread at a time): a device's windows run one after another. Taken
     * when both run plain on the same model with the same n_batch, n_ctx
     * and thread count and its matmul scratch is large enough; otherwise
     * this context allocates its own. NULL = own buffers. */
    const struct hr_ctx *share;
    /* GPU layers: the first n_gpu layers of the window run on vk (borrowed,
     * must outlive the context), which holds their weights (uploaded once
     * at creation), KV caches and work buffers; the rest run on the CPU,
     * with one hidden-state copy to the device and one back per call
     * (batched steps included: the device keeps n_seq KV slots). Plain
     * execution only: a context with thread groups refuses GPU layers. vk
     * NULL or n_gpu 0 = CPU only. */
    hr_vk *vk;
    int n_gpu;
} hr_ctx_params;

hr_ctx_params hr_ctx_params_default(void);

typedef struct hr_ctx hr_ctx;

int hr_ctx_create(hr_ctx **out, const hr_model *m, const hr_ctx_params *p, char err[HR_ERR_LEN]);
void hr_ctx_destroy(hr_ctx *c);
const hr_ctx_params *hr_ctx_get_params(const hr_ctx *c);
/* The context's pool (group 0's pool when it runs tensor-parallel). */
hr_pool *hr_ctx_pool(hr_ctx *c);
/* Thread groups the context runs with (1 = plain execution). */
int hr_ctx_n_groups(const hr_ctx *c);
/* Bytes of KV cache + work buffers this context allocated (host memory). */
size_t hr_ctx_memory(const hr_ctx *c);
/* Routing counts of model layer il (a CPU layer of the window, of a model
 * with experts): how many rows each expert was routed to since the
 * context was made; out: [n_expert]. HR_EINVAL otherwise. */
int hr_ctx_expert_hits(const hr_ctx *c, int il, uint64_t *out);
/* Bytes of device memory its GPU layers hold (weights, KV, work); 0 without. */
size_t hr_ctx_gpu_memory(const hr_ctx *c);
/* What hr_ctx_create would allocate for p (plain execution, n_groups 0 or
 * 1, p->share ignored: a context with its own buffers), without
 * allocating: *kv bytes of KV cache and *work bytes of work buffers (either
 * may be NULL); their sum is hr_ctx_memory of that context. A window of no layers (layer_begin ==
 * layer_end) is the output head's context. With p->pool the thread count is the pool's. 0 or
 * HR_EINVAL (the window does not fit the model). Reentrant. */
int hr_ctx_memory_predict(const hr_model *m, const hr_ctx_params *p, size_t *kv, size_t *work);

/* One sequence in slot 0: hr_ctx_step over the rows (0, pos) ..
 * (0, pos+n-1), without claiming the slot (a context of one sequence).
 * Needs 1 <= n <= n_batch and pos+n <= n_ctx; later positions of slot 0
 * are forgotten. */
int hr_ctx_layers(hr_ctx *c, float *hidden, int n, int pos, char err[HR_ERR_LEN]);

/* Output norm + LM head for rows [row0, row0+n_rows) of hidden
 * ([*][n_embd]); logits: [n_rows][n_vocab]. n_rows <= n_batch. */
int hr_ctx_output(hr_ctx *c, const float *hidden, int row0, int n_rows, float *logits);

/* Convenience for a context that covers every layer: embeds ids, runs all
 * layers in chunks of n_batch, and writes logits for the last token (or
 * for every token when all_logits; logits then holds [n][n_vocab]). */
int hr_ctx_eval(hr_ctx *c, const int32_t *ids, int n, int pos, float *logits, bool all_logits,
                char err[HR_ERR_LEN]);

/* ---- several sequences in one context (continuous batching) ----
 *
 * A context with n_seq > 1 holds one KV slot of n_ctx positions per
 * sequence. Sequences join (hr_ctx_seq_add) and leave (hr_ctx_seq_remove)
 * between steps; a step (hr_ctx_step) carries rows (seq, pos), in
 * runs of consecutive rows of one sequence: a run of one row is a decode
 * token, a longer run a chunk of prompt. Every weight matrix is read once
 * per step for all rows, and each row's result is bit-identical to what the
 * single-sequence calls compute for its run alone (a step of that run
 * only, hr_ctx_output of one row): a sequence's output never depends on
 * who else shares the step. The single-sequence calls (hr_ctx_layers,
 * hr_ctx_eval) work on slot 0. A context with thread groups has one slot
 * (it refuses n_seq > 1). Not thread-safe (one thread per context, as
 * above). */

/* One row of a step: position pos of the sequence in slot seq. A row
 * marked decode is a run of its own even where it follows the row before
 * it in its sequence: it computes, bit for bit, what a step of that row
 * alone computes (a decode token), while the step still reads each weight
 * once for all its rows. A replay of generated tokens after a re-plan
 * sends them so: many in one step, each as it was first computed. */
typedef struct {
    int seq;
    int pos;
    bool decode;
} hr_seq_pos;

/* KV slots of the context (hr_ctx_params.n_seq, resolved). */
int hr_ctx_n_seq(const hr_ctx *c);
/* Claims slot seq (0 <= seq < n_seq), or the lowest free slot when seq < 0,
 * for a new, empty sequence. Returns the slot, HR_EAGAIN when it is taken
 * (or none is free), HR_EINVAL when seq is out of range. */
int hr_ctx_seq_add(hr_ctx *c, int seq);
/* Frees slot seq and forgets its cache; nothing for a free or bad slot. */
void hr_ctx_seq_remove(hr_ctx *c, int seq);
/* Keeps positions [0, n_keep) of sequence seq and forgets the rest, so its
 * next row may be at any position <= n_keep (0: start over). HR_EINVAL for a
 * slot not in use. */
int hr_ctx_seq_clear(hr_ctx *c, int seq, int n_keep);
/* Positions cached for seq (where its next token goes), or HR_EINVAL. */
int hr_ctx_seq_len(const hr_ctx *c, int seq);

/* The step: runs the window's layers over hidden: [n][n_embd] f32 in
 * place, row t at rows[t]. Every window runs through it: plain CPU layers,
 * tensor-parallel thread groups and GPU layers alike. Needs 1 <= n <=
 * n_batch; the rows of a sequence are consecutive positions starting at
 * or before its length (earlier positions are rewritten, later ones
 * forgotten), each below n_ctx, in slots in use: one run, or (rows marked
 * decode) one run per row. On error nothing was computed. */
int hr_ctx_step(hr_ctx *c, float *hidden, const hr_seq_pos *rows, int n, char err[HR_ERR_LEN]);
/* Output norm + LM head for rows idx[0..n_rows) of hidden ([*][n_embd]),
 * each computed as hr_ctx_output of that row alone; logits:
 * [n_rows][n_vocab]. n_rows <= n_batch. */
int hr_ctx_output_rows(hr_ctx *c, const float *hidden, const int *idx, int n_rows, float *logits);
/* Convenience for a context over every layer: embeds ids[n], runs one step
 * over rows[n] and writes the logits of the last row of each run, in run
 * order, into logits ([n_runs][n_vocab]); *n_logits = n_runs. */
int hr_ctx_eval_batch(hr_ctx *c, const int32_t *ids, const hr_seq_pos *rows, int n, float *logits,
                      int *n_logits, char err[HR_ERR_LEN]);

#endif
