/* tp-impl.h - what model.c and tp.c share: the tensor-parallel executor a
 * hr_ctx delegates to when it runs with several thread groups. Internal to
 * model/. */
#ifndef HR_MODEL_TP_IMPL_H
#define HR_MODEL_TP_IMPL_H

#include "model/model.h"
#include "model/tp.h"

typedef struct hr_tp hr_tp;

/* What the executor borrows from the model (all outlive it). */
typedef struct {
    const hr_hparams *hp;
    const hr_layer_weights *layers; /* [n_layer], absolute layer index */
    const hr_weight *output;
    const float *output_norm; /* [n_embd] */
    const float *rope_freqs;  /* [n_rot/2] or NULL */
} hr_tp_model;

/* p is the context's resolved parameters. Returns 0 with *out == NULL when
 * the topology yields a single group (the caller then runs plainly). */
int hr_tp_create(hr_tp **out, const hr_tp_model *m, const hr_ctx_params *p, char err[HR_ERR_LEN]);
void hr_tp_destroy(hr_tp *tp);
size_t hr_tp_memory(const hr_tp *tp);
hr_pool *hr_tp_pool0(hr_tp *tp);
int hr_tp_n_groups(const hr_tp *tp);
#include "model/layer-impl.h"

/* The window over a step's n rows R (one run of slot 0: the executor has
 * one KV slot), as hr_ctx_step; hr_tp_output as hr_ctx_output. Arguments
 * already checked. */
void hr_tp_layers(hr_tp *tp, float *hidden, int n, const hr_layer_rows *R);
void hr_tp_output(hr_tp *tp, const float *hidden, int row0, int n_rows, float *logits);
void hr_tp_get_stats(const hr_tp *tp, hr_tp_stats *out);
void hr_tp_reset_stats(hr_tp *tp);

#endif
