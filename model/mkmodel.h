/* mkmodel.h - writes random-weight GGUF models of any llama/qwen2 shape in
 * any supported weight type, so benchmarks and cluster tests can run at
 * realistic sizes without downloading anything.
 *
 * The weights are seeded pseudo-random values (reproducible), quantized
 * with hearth's own quantizers. The tokenizer is copied from another GGUF
 * (vocab_from) or, without one, a byte-fallback SentencePiece vocabulary
 * of n_vocab entries is synthesised. Not thread-safe (writes one file). */
#ifndef HR_MODEL_MKMODEL_H
#define HR_MODEL_MKMODEL_H

#include <stdint.h>

#include "common/error.h"

typedef struct {
    const char *arch; /* "llama", "qwen2" or "qwen3" */
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    const char *ftype;      /* "q4_0", "q4_k_m", "q5_k_m", "q6_k", "q8_0", "f16", ... */
    const char *vocab_from; /* GGUF to copy tokenizer.* keys from, or NULL */
    float rope_base;        /* 0 = architecture default */
    uint64_t seed;
} hr_mkmodel_params;

/* TinyLlama-1.1B shape in Q4_0 with a synthetic vocabulary. */
hr_mkmodel_params hr_mkmodel_params_default(void);

/* Named shapes: "tinyllama" (2048x22, 32/4 heads, ffn 5632, vocab 32000),
 * "small" (256x4, 8/4, 768), "tiny" (64x2, 4/2, 160), "llama7b"
 * (4096x32, 32/32, 11008). Returns HR_ENOENT for an unknown name. */
int hr_mkmodel_shape(hr_mkmodel_params *p, const char *name);

/* Progress callback (done, total tensors) or NULL. */
typedef void (*hr_mkmodel_progress)(int done, int total, void *ud);

int hr_mkmodel_write(const hr_mkmodel_params *p, const char *path, hr_mkmodel_progress cb, void *ud,
                     char err[HR_ERR_LEN]);

#endif
