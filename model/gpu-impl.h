/* gpu-impl.h - the first layers of a context's window on a Vulkan device
 * (gpu/vk.h): their weights uploaded once from the mapping, their F16 KV
 * caches and the work buffer held on the device, and the layer recorded as
 * kernel dispatches that reproduce layer.c's blocks. Internal to model/. */
#ifndef HR_MODEL_GPU_IMPL_H
#define HR_MODEL_GPU_IMPL_H

#include "gpu/vk.h"
#include "model/model.h"

typedef struct hr_gpu_win hr_gpu_win;

/* Uploads layers [il0, il0 + n) of m (hyper-parameters hp, Llama-3 factors
 * rope_freqs or NULL) to vk (borrowed; must outlive the window) with n_seq
 * KV slots of n_ctx positions and work buffers for n_batch tokens. */
int hr_gpu_win_create(hr_gpu_win **out, hr_vk *vk, const hr_hparams *hp,
                      const hr_layer_weights *layers, int il0, int n, const float *rope_freqs,
                      int n_ctx, int n_batch, int n_seq, char err[HR_ERR_LEN]);
void hr_gpu_win_destroy(hr_gpu_win *g);
/* Runs the window's layers over hidden: [n][n_embd] f32 in place (one copy
 * to the device and one back) for tokens at positions pos..pos+n-1. */
int hr_gpu_win_run(hr_gpu_win *g, float *hidden, int n, int pos, char err[HR_ERR_LEN]);
/* The same for a step over several sequences: hidden's n rows come in
 * n_runs runs, run i of run_len[i] consecutive positions from pos[i] of KV
 * slot seq[i]. Each row's result does not depend on the other runs. */
int hr_gpu_win_run_runs(hr_gpu_win *g, float *hidden, int n, const int *seq, const int *pos,
                        const int *run_len, int n_runs, char err[HR_ERR_LEN]);
/* Device bytes the window holds (weights, KV caches, work buffers). */
size_t hr_gpu_win_bytes(const hr_gpu_win *g);

#endif
