/* layer-impl.h - the transformer layer written once, shared by model.c
 * (plain execution: one group, the whole layer) and tp.c (each thread group
 * runs its slice of the layer): the attention and feed-forward blocks, the
 * buffers they work in, and table-driven helpers. Internal to model/. */
#ifndef HR_MODEL_LAYER_IMPL_H
#define HR_MODEL_LAYER_IMPL_H

#include "model/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A layer as one group runs it. */
typedef struct {
    /* whole tensors (plain) or the group's slices, cut as hr_layer_tensor.split
     * says: Wq/Wk/Wv and their biases by the group's KV heads, Wgate/Wup by
     * its n_ff rows, Wo/Wdown by its output rows (or input columns); norms
     * whole */
    hr_layer_weights w;
    int n_kv;       /* KV heads in w; query heads: n_kv * n_head / n_head_kv */
    int n_ff;       /* n_ff rows of Wgate/Wup in w */
    bool swa;       /* a sliding-window (local) layer: hr_hparams_layer_swa */
    uint16_t *k;    /* [n_seq][n_ctx][n_kv*head_dim] f16 cache, one slot per sequence */
    uint16_t *vt;   /* [n_seq][n_kv*head_dim][n_ctx] f16 cache, transposed */
    uint64_t *hits; /* [n_expert] rows routed to each expert (HR_LT_MOE), or NULL */
    int layer;      /* its model layer index (hr_ctx_params.on_route) */
} hr_layer_part;

/* Where the rows of a step over several sequences belong: row t is at
 * position pos[t] of the sequence in KV slot seq[t]; the rows come in
 * n_runs runs of consecutive rows of one sequence (hr_matmul_runs). */
typedef struct {
    const int *seq;     /* [n] */
    const int *pos;     /* [n] */
    const int *run_len; /* [n_runs] */
    int n_runs;
    hr_attn_row *attn; /* [n] scratch the attention block fills */
} hr_layer_rows;

/* What the blocks run with: one group's pool and work buffers for up to
 * n_batch tokens (qh, kvh, f: the most heads / rows a part of it has). */
typedef struct {
    const hr_hparams *hp;
    const float *rope_freqs; /* [n_rot/2] or NULL */
    int n_ctx;
    hr_pool *pool;
    float *xb;        /* [B][n_embd] normed input of a block */
    float *q, *att;   /* [B][qh*head_dim] queries, attention output */
    float *kk, *vv;   /* [B][kvh*head_dim] keys, values */
    float *gate, *up; /* [B][f]; gate ends as the SwiGLU output */
    float *scratch;   /* attention: hr_attn_scratch_floats() */
    void *wbuf;       /* hr_matmul scratch */
    /* mixture of experts (hp->n_expert > 0; K = n_expert_used): router
     * probabilities [B][n_expert], each row's experts and weights [B][K],
     * the routed rows grouped by expert ([B*K]: row * K + slot, and where
     * each landed), per expert its first grouped row [n_expert + 1] (+ [n_expert] scratch), the
     * grouped inputs [B*K][n_embd], gate / up [B*K][n_ff_exp] and outputs
     * [B*K][n_embd], one product group per expert and their scratch */
    float *moe_prob;
    int *moe_sel;
    float *moe_wt;
    int *moe_rows, *moe_at, *moe_first;
    float *moe_x, *moe_g, *moe_u, *moe_y;
    hr_mm_group *moe_groups;
    hr_ffn_group *moe_ffn; /* [n_expert]: one feed-forward per expert (decode steps) */
    int *moe_list;         /* [n_expert]: the experts a step uses (on_route) */
    void (*on_route)(void *ud, int layer, const int *experts, int n);
    void *route_ud;
    void *moe_wbuf;
} hr_layer_env;

/* Allocates env's buffers through alloc(ud, bytes) (NULL on failure; the
 * caller frees what it handed out): n_batch tokens, up to n_kv KV heads and
 * n_ff rows per part, n_threads attention threads, wbuf bytes of matmul
 * scratch. Returns 0 or HR_ENOMEM. */
typedef void *(*hr_layer_alloc_fn)(void *ud, size_t bytes);
int hr_layer_env_alloc(hr_layer_env *e, int n_batch, int n_kv, int n_ff, int n_threads, size_t wbuf,
                       hr_layer_alloc_fn alloc, void *ud);

/* Attention block up to the output projection, for the n rows R places
 * (one run: one sequence at consecutive positions): xb = rmsnorm(hidden),
 * q/k/v = its projections (+ bias, per-head norm, RoPE: a local layer's
 * base), K/V stored in P's cache slots, att = attention over each row's
 * slot (a local layer's window of it). hidden: [n][n_embd] f32, read only.
 * Each row's values are what a step of its run alone computes. */
void hr_layer_attention(const hr_layer_env *e, const hr_layer_part *P, const float *hidden, int n,
                        const hr_layer_rows *R);
/* Feed-forward block up to the down projection: xb = rmsnorm(hidden),
 * gate = SwiGLU(Wgate xb, Wup xb) (GeGLU where the architecture says). */
void hr_layer_ffn(const hr_layer_env *e, const hr_layer_part *P, const float *hidden, int n,
                  const hr_layer_rows *R);
/* y = W x over the rows of R: the output projections (Wo over att, Wdown
 * over gate). x: [n][w.n_in], y: [n][w.n_out] f32. */
void hr_layer_matmul(const hr_layer_env *e, const hr_weight *w, const float *x, float *y, int n,
                     const hr_layer_rows *R);
/* Mixture-of-experts feed-forward (HR_LT_MOE): xb = rmsnorm(hidden), the
 * router's top n_expert_used experts per row, each expert run once over
 * the rows routed to it, their outputs weighted and summed per row in the
 * router's order (+ the gated shared expert), added to hidden. y: [n][n_embd]
 * scratch. A row's result does not depend on the other rows. */
void hr_layer_moe(const hr_layer_env *e, const hr_layer_part *P, float *hidden, float *y, int n,
                  const hr_layer_rows *R);
/* hidden[t] += y[t] for t < n; both [n][n_embd] f32. */
void hr_layer_residual(float *hidden, const float *y, int n, int n_embd);

/* How a group's block outputs reach the hidden state, for a window run by
 * several groups (tp.c): attn after the attention block (att holds the
 * group's heads' output), ffn after the feed-forward block (gate holds
 * its SwiGLU slice); each ends with hidden updated. NULL hooks (or no
 * join): the part is the whole layer, its output projection is added to
 * hidden (plain execution). on_layer (may be NULL) runs after each layer
 * with its index in the window. */
typedef struct {
    void (*attn)(void *ud, const hr_layer_part *P, float *hidden, int li);
    void (*ffn)(void *ud, const hr_layer_part *P, float *hidden, int li);
    void (*on_layer)(void *ud, int li);
    void *ud;
} hr_layer_join;

/* The loop around a layer, the one every CPU window runs (plain and each
 * tensor-parallel group): layers parts[0..nl) (a part every stride bytes)
 * over hidden ([n][n_embd] f32, in place) for the rows R places. y:
 * [n][n_embd] scratch for the output projections (plain). */
void hr_layer_window(const hr_layer_env *e, const hr_layer_part *parts, size_t stride, int nl,
                     float *hidden, float *y, int n, const hr_layer_rows *R,
                     const hr_layer_join *j);

/* A fused tensor (layer_table.c's second table): one GGUF tensor of
 * n_in columns whose rows are those of its parts stacked in order. A file
 * with it binds the parts as views of its rows (hr_layer_fused_split), so
 * the blocks, byte counts, tensor-parallel slices and GPU uploads only ever
 * see the parts; mkmodel writes it in place of its first part. */
typedef struct {
    const char *name; /* after "blk.N.", e.g. "attn_qkv.weight" */
    unsigned set;     /* its HR_LT_* set */
    int n_parts;
    size_t part[3]; /* offsets of the parts' fields in hr_layer_weights, in row order */
} hr_layer_fused;

/* Table-driven (layer_table.c): */
int hr_layer_fused_count(void);
const hr_layer_fused *hr_layer_fused_get(int i);
/* The fused tensor of sets that holds row t (*part: which of its parts), or
 * NULL (t is a tensor of its own). */
const hr_layer_fused *hr_layer_fused_of(const hr_layer_tensor *t, unsigned sets, int *part);
/* f's columns (its parts'), and its rows (theirs summed) for hp. */
hr_dim hr_layer_fused_in(const hr_layer_fused *f);
int64_t hr_layer_fused_rows(const hr_layer_fused *f, const hr_hparams *hp);
/* L's parts of f as views of w, f's bound matrix. */
void hr_layer_fused_split(const hr_layer_fused *f, const hr_hparams *hp, const hr_weight *w,
                          hr_layer_weights *L);
hr_weight *hr_layer_weight_mut(hr_layer_weights *L, const hr_layer_tensor *t);
/* Whether a file of these hyper-parameters must have t. */
bool hr_layer_tensor_needed(const hr_layer_tensor *t, const hr_hparams *hp);
/* The HR_LT_* sets the layers of a file of architecture a with n_expert
 * experts carry (*sets) and must carry (*needs): the dense feed-forward
 * without experts, the routed experts (and a shared one where a has it)
 * with them. */
void hr_arch_layer_sets(const hr_arch_info *a, int n_expert, unsigned *sets, unsigned *needs);
/* Bytes of L's routed experts. */
uint64_t hr_layer_expert_bytes(const hr_layer_weights *L);
/* Bytes of L's tensors (matrices; vectors too when asked). */
uint64_t hr_layer_bytes(const hr_layer_weights *L, bool vectors);
/* max(cur, hr_matmul work buffer any matrix of L needs for n_batch tokens). */
size_t hr_layer_wbuf_size(const hr_layer_weights *L, int n_batch, size_t cur);

#endif
