/* ops.h - the non-matmul building blocks of a transformer layer, and the
 * threaded matrix products over quantized weights.
 *
 * Shapes are given next to each argument; all activations are f32 and
 * row-major ([n_tok][dim]). Functions taking a hr_pool run on its threads;
 * the rest are single-threaded. None allocates. */
#ifndef HR_KERNELS_OPS_H
#define HR_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/pool.h"

/* A weight matrix as stored in GGUF: n_out rows of n_in elements. */
typedef struct {
    int type;         /* hr_type */
    int64_t n_in;     /* ne[0] */
    int64_t n_out;    /* ne[1] */
    size_t row_bytes; /* bytes per row */
    const void *data; /* borrowed (usually the read-only mapping) */
} hr_weight;

/* Bytes of work buffer hr_matmul needs for n_tok rows of n_in inputs
 * against weights of this type. */
size_t hr_matmul_wbuf_size(int type, int64_t n_in, int n_tok);

/* y_j[t][r] = sum_i W_j[r][i] * x[t][i] for each of the n_w weights (all
 * with the same n_in and the same activation format, hr_type_traits'
 * vec_dot_type, so the input is converted once).
 * x: [n_tok][n_in] f32; y_j: [n_tok][W_j.n_out] f32; wbuf: scratch of
 * hr_matmul_wbuf_size() bytes. */
void hr_matmul(hr_pool *pool, int n_w, const hr_weight *const *w, float *const *y, const float *x,
               int n_tok, void *wbuf);

/* As hr_matmul, for a batch of sequences: x's rows come in n_runs runs of
 * run_len[i] consecutive rows, one run per sequence (summing to n_tok). A
 * run of one row (decode) is computed exactly as hr_matmul computes a
 * single row, a longer run (prefill) exactly as hr_matmul computes that run
 * alone, so no row's result depends on the other runs, while each weight
 * row is read once for all of them. */
void hr_matmul_runs(hr_pool *pool, int n_w, const hr_weight *const *w, float *const *y,
                    const float *x, int n_tok, const int *run_len, int n_runs, void *wbuf);

/* One matrix product of several (hr_matmul_groups): n_w weights (1 or 2,
 * same n_in and activation format) over their own input rows. */
typedef struct {
    int n_w;
    hr_weight w[2];
    float *y[2];    /* [n_tok][w[i].n_out] */
    const float *x; /* [n_tok][n_in] f32 */
    int n_tok;
    /* filled by hr_matmul_groups */
    const void *act;
    size_t act_row_bytes;
    long row0, tok0;
} hr_mm_group;

/* Bytes of work buffer hr_matmul_groups needs for groups of n_in inputs
 * against weights of this type carrying n_tok rows in all. */
#define hr_matmul_groups_wbuf_size hr_matmul_wbuf_size

/* Each group's product, as hr_matmul computes it for that group alone
 * (bit for bit: every row's values are those of a single-row product), in
 * one pass of the pool over all groups' weight rows: the experts a step's
 * rows are routed to, each read once for the rows routed to it. wbuf:
 * scratch for every group's converted input (the sum of
 * hr_matmul_wbuf_size over groups). */
void hr_matmul_groups(hr_pool *pool, hr_mm_group *g, int n_g, void *wbuf);

/* A SwiGLU feed-forward over its own rows (hr_swiglu_groups): y = down .
 * swiglu(gate x, up x) for n_tok <= HR_DOT_N_MAX rows; with biases and
 * gpt-oss's clamped SwiGLU where set. */
typedef struct {
    hr_weight gate, up, down;            /* gate, up: n_in -> F; down: F -> n_out */
    const float *b_gate, *b_up, *b_down; /* added after each product, or NULL */
    bool oai;                            /* hr_swiglu_oai (1.702, 7) instead of hr_swiglu */
    const float *x;                      /* [n_tok][n_in] f32 */
    int n_tok;
    float *h, *u; /* [n_tok][F] scratch (h ends as the SwiGLU values) */
    float *y;     /* [n_tok][n_out] */
    void *act;    /* scratch: hr_swiglu_group_wbuf_size() bytes */
} hr_ffn_group;

/* Bytes of g's act scratch. */
size_t hr_swiglu_group_wbuf_size(const hr_ffn_group *g);

/* Each group's feed-forward in one pass of the pool (a group at a time
 * per thread, no barrier between its products): the few rows of a decode
 * step routed to each expert. Every value equals what hr_matmul, hr_swiglu
 * and hr_matmul compute for that group alone, bit for bit. */
void hr_swiglu_groups(hr_pool *pool, hr_ffn_group *g, int n_g);

/* out[i] = x[i] / rms(x) * g[i]  (g may be NULL) ; n elements. */
void hr_rmsnorm(float *out, const float *x, const float *g, int n, float eps);
/* x[i] += b[i] */
void hr_add(float *x, const float *b, int n);
/* In-place softmax over n values. */
void hr_softmax(float *x, int n);
/* As hr_softmax with one more value, sink, in the maximum and the sum
 * (an attention sink: its share of the weight is dropped). */
void hr_softmax_sink(float *x, int n, float sink);
/* out[i] = silu(gate[i]) * up[i] */
void hr_swiglu(float *out, const float *gate, const float *up, int n);
/* gpt-oss's clamped SwiGLU: g = min(gate[i], limit), u = clamp(up[i],
 * -limit, limit), out[i] = g * sigmoid(alpha g) * (u + 1) */
void hr_swiglu_oai(float *out, const float *gate, const float *up, int n, float alpha, float limit);
/* An expert's activation in place: the gate and up biases where given
 * (NULL: none), then hr_swiglu_oai (1.702, 7) with oai, else hr_swiglu;
 * the result in h. */
void hr_expert_act(float *h, float *u, const float *b_gate, const float *b_up, int n, bool oai);
/* out[i] = gelu(gate[i]) * up[i], GELU in its tanh form (GeGLU) */
void hr_geglu(float *out, const float *gate, const float *up, int n);

typedef struct {
    int n_rot;                 /* rotated dims per head (<= head_dim) */
    float freq_base;           /* rope.freq_base */
    bool neox;                 /* pairs (i, i+n_rot/2) instead of (2i, 2i+1) */
    const float *freq_factors; /* [n_rot/2] divisors (Llama-3 rope_freqs) or NULL */
    float freq_scale;          /* angles times this (linear scaling: 1 / factor); 0 = 1 */
    /* YaRN (ext_factor 0: off): pair i's angle mixes the unscaled and the
     * scaled one by ramp(i) * ext_factor, ramp 1 below corr[0] falling to 0
     * at corr[1]; cos and sin times mscale (0 = 1) */
    float ext_factor, mscale, corr[2];
} hr_rope_params;

/* Rotates n_heads heads of head_dim values at position pos, in place. */
void hr_rope(float *x, int n_heads, int head_dim, int pos, const hr_rope_params *rp);

/* Causal GQA attention over an F16 KV cache.
 * q: [n_tok][n_head*hd]; k: [n_ctx][n_kv*hd] f16; vt: [n_kv*hd][n_ctx] f16
 * (transposed); token t sits at position pos0+t and sees positions
 * 0..pos0+t (the last window of them with a sliding window). out:
 * [n_tok][n_head*hd]. scratch: hr_attn_scratch_floats() floats. */
typedef struct {
    int n_head, n_kv, head_dim, n_ctx;
    const uint16_t *k;
    const uint16_t *vt;
    float *scratch;
    float scale;        /* of the scores q.k; 0 = 1/sqrt(head_dim) */
    int window;         /* > 0: a token at pos sees positions pos-window+1..pos only; 0: all */
    const float *sinks; /* [n_head] or NULL: head h's softmax has one more logit, sinks[h],
                           whose weight goes nowhere */
} hr_attn_args;
void hr_attention(hr_pool *pool, const hr_attn_args *a, const float *q, int n_tok, int pos0,
                  float *out);
/* floats of scratch hr_attention needs on a pool of n_threads */
size_t hr_attn_scratch_floats(int n_threads, int n_head, int n_kv, int head_dim, int n_ctx);

/* Token t of a batch of sequences: its sequence's cache (layout of
 * hr_attn_args' k / vt) and its position there. */
typedef struct {
    const uint16_t *k;
    const uint16_t *vt;
    int pos;
} hr_attn_row;
/* As hr_attention, with each token's cache and position from rows[n_tok]
 * (a's k and vt are not used); every token's output is what hr_attention
 * computes for it alone. */
void hr_attention_rows(hr_pool *pool, const hr_attn_args *a, const hr_attn_row *rows,
                       const float *q, int n_tok, float *out);

#endif
