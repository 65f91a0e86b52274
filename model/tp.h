/* tp.h - tensor parallelism of a layer window over thread groups (one per
 * NUMA node): how each layer's matrices are split, and what the groups
 * spent their time on.
 *
 * Two ways to split a layer (hr_ctx_params.tp_reduce picks):
 *
 * - exact (default): whole KV heads go to a group with the query heads that
 *   read them (GQA stays exact), Wq/Wk/Wv split by those heads' rows,
 *   Wgate/Wup by rows; Wo and Wdown are split by output rows, after the
 *   groups have exchanged their attention / SwiGLU outputs. Every value is
 *   computed by the same kernel over the same inputs as in plain execution,
 *   so results are bit-identical to it. Four global barriers per layer.
 * - reduce (ArcLight): as above, but Wo and Wdown are split by the matching
 *   columns and each group produces a partial output that every group sums
 *   in the same order into its own replica of the hidden state. Two
 *   barriers per layer and no exchange, but the partial sums round
 *   differently from a whole-row dot product, and quantized activations
 *   (Q8 blocks, the F16 KV cache) can amplify that to ~1e-2 relative on
 *   random-weight models. Column slices must start on quant-block
 *   boundaries: head ranges are rounded to the smallest KV-head count whose
 *   Wo columns fill whole blocks, FFN ranges to Wdown's block size, and the
 *   split is then uneven (a group may get no heads, or no FFN slice, in a
 *   layer), never wrong. Attention goes preferably to the first groups and
 *   FFN slices to the last, to balance.
 *
 * A context asks for groups with hr_ctx_params.n_groups (model.h). */
#ifndef HR_MODEL_TP_H
#define HR_MODEL_TP_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/numa.h"
#include "model/model.h"

typedef struct {
    int n_embd, n_head, n_head_kv, head_dim, n_ff;
    bool reduce;   /* column split of Wo/Wdown (else exact row split) */
    int type_wo;   /* hr_type of Wo ([n_head*head_dim] columns) */
    int type_down; /* hr_type of Wdown ([n_ff] columns) */
} hr_tp_shape;

typedef struct {
    int kv_begin, kv_end;   /* KV heads; query heads [kv_begin*r, kv_end*r), r = n_head/n_head_kv */
    int ff_begin, ff_end;   /* rows of Wgate/Wup (= columns of Wdown when reducing) */
    int out_begin, out_end; /* exact: rows of Wo and Wdown ([n_embd]); reduce: 0, n_embd */
} hr_tp_slice;

/* Splits one layer over n_groups (1..HR_NUMA_MAX_GROUPS) groups into
 * out[n_groups]. Returns 0, or HR_EINVAL / HR_EUNSUPPORTED with err filled
 * for shapes that cannot be split (bad counts, rows not whole blocks).
 * Reentrant. */
int hr_tp_split(const hr_tp_shape *s, int n_groups, hr_tp_slice *out, char err[HR_ERR_LEN]);

/* KV heads per unit of the split: 1 when exact, else the smallest count
 * whose Wo columns are whole blocks. 0 on bad input. */
int hr_tp_head_unit(const hr_tp_shape *s);

typedef struct {
    int node;              /* NUMA node of its memory (-1 unknown) */
    int n_threads;         /* prefill */
    int n_threads_decode;  /* decode */
    int kv_heads;          /* summed over the window's layers */
    int64_t ff_rows;       /* summed over the window's layers */
    uint64_t weight_bytes; /* weights it reads per token (slices + LM head part) */
    double compute_s[2];   /* [HR_PHASE_PREFILL / DECODE] seconds working */
    double barrier_s[2];   /* seconds waiting at the global barrier */
} hr_tp_group_stats;

typedef struct {
    int n_groups;
    bool copies;         /* slices copied into node memory (else views of the mapping) */
    bool reduce;         /* column split with partial sums (else exact) */
    bool membind;        /* memory bound per node (multi-node machine) */
    int64_t tokens[2];   /* tokens through hr_ctx_layers per phase */
    int64_t calls[2];    /* hr_ctx_layers calls per phase */
    int64_t barriers[2]; /* global barriers per phase */
    hr_tp_group_stats group[HR_NUMA_MAX_GROUPS];
} hr_tp_stats;

/* Fills out for a tensor-parallel context; HR_EINVAL for a plain one.
 * Not thread-safe against a concurrent forward pass on c. */
int hr_ctx_tp_stats(const hr_ctx *c, hr_tp_stats *out);
void hr_ctx_tp_stats_reset(hr_ctx *c);

#endif
