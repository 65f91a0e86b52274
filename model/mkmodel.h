/* mkmodel.h - writes random-weight GGUF models of any supported architecture and shape in
 * any supported weight type, so benchmarks and cluster tests can run at
 * realistic sizes without downloading anything.
 *
 * The weights are seeded pseudo-random values (reproducible), quantized
 * with hearth's own quantizers. The tokenizer is copied from another GGUF
 * (vocab_from) or, without one, a byte-fallback SentencePiece vocabulary
 * of n_vocab entries is synthesised. Not thread-safe (writes one file). */
#ifndef HR_MODEL_MKMODEL_H
#define HR_MODEL_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

typedef struct {
    const char *arch; /* an architecture of model.h's table */
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    /* experts (0: dense): routed experts, used per token, rows of each
     * (llama's experts use n_ff), rows of the shared expert (qwen2moe) */
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int head_dim; /* 0 = n_embd / n_head */
    /* sliding window of the local layers (architectures with them, e.g.
     * gemma3; 0 = none) and every how many layers one is global (0 = the
     * architecture's default, not written) */
    int n_swa, swa_pattern;
    bool tied;              /* no output.weight: the output head is token_embd */
    float norm_std;         /* norm weights 1 + N(0, norm_std); 0 = all 1 */
    const char *ftype;      /* "q4_0", "q4_k_m", "q5_k_m", "q6_k", "q8_0", "f16", "mxfp4",
                               "mxfp4_moe" (experts mxfp4, the rest q8_0), ... */
    const char *vocab_from; /* GGUF to copy tokenizer.* keys from, or NULL */
    float rope_base;        /* 0 = architecture default */
    float rope_factor;      /* RoPE scaling factor written (0 = none): linear, or YaRN's */
    int yarn_ctx;           /* > 0: rope_factor is YaRN's, over this original context */
    uint64_t seed;
} hr_mkmodel_params;

/* TinyLlama-1.1B shape in Q4_0 with a synthetic vocabulary. */
hr_mkmodel_params hr_mkmodel_params_default(void);

/* Named shapes: "tinyllama" (2048x22, 32/4 heads, ffn 5632, vocab 32000),
 * "small" (256x4, 8/4, 768), "tiny" (64x2, 4/2, 160), "llama7b"
 * (4096x32, 32/32, 11008), and with experts (setting the architecture
 * too): "qwen3moe-small" (Qwen3-30B-A3B's 128 experts, 8 used, of 768
 * rows, at 1024x12, 16/4 heads: about 2 GiB at q4_k_m), "qwen3moe-tiny"
 * (256x2, 16 experts, 4 used, 256 rows), "qwen2moe-tiny" (256x2, 8/4
 * used, 256 rows, shared 512), "mixtral-tiny" (llama 256x2, 8 experts,
 * 2 used, 512 rows); of other architectures (setting it too):
 * "phi3-mini" (Phi-3 mini 4k: 3072x32, 32/32 heads, ffn 8192, vocab
 * 32064: about 2.2 GiB at q4_k_m), "phi3-small" (1024x8, 16/16, 2816),
 * "phi3-tiny" (256x2, 8/4, 512), "gemma3-1b" (Gemma 3 1B: 1152x26, 4/1
 * heads of 256, ffn 6912, vocab 262144, a window of 512 on 5 of 6 layers,
 * tied output), "gemma3-270m" (Gemma 3 270M: 640x18, the same heads, ffn
 * 2048) and "gemma3-tiny" (256x4, 4/2 heads of 128, ffn 512, a window of
 * 8 on 2 of 3 layers, linear RoPE scaling by 8 as Gemma 3 4B and larger
 * have); "gpt-oss-20b" (gpt-oss-20b: 2880x24, 64/8 heads of 64, 32
 * experts, 4 used, of 2880 rows, vocab 201088, a window of 128 on every
 * other layer, YaRN by 32 over 4096; about 12 GiB at mxfp4_moe),
 * "gpt-oss-small" (1024x12, 16/4 heads of 64, 32 experts, 4 used, of
 * 1024 rows: about 0.7 GiB at mxfp4_moe) and "gpt-oss-tiny" (256x2, 8/4
 * heads of 64, 8 experts, 2 used, of 256 rows, a window of 8). The phi3,
 * gemma3 and gpt-oss shapes draw their norm weights around 1.
 * Returns HR_ENOENT for an unknown name. */
int hr_mkmodel_shape(hr_mkmodel_params *p, const char *name);
/* "tinyllama, small, ...": the names hr_mkmodel_shape knows, made from its
 * table (a static buffer: not for several threads at once). */
const char *hr_mkmodel_shape_names(void);

/* Progress callback (done, total tensors) or NULL. */
typedef void (*hr_mkmodel_progress)(int done, int total, void *ud);

int hr_mkmodel_write(const hr_mkmodel_params *p, const char *path, hr_mkmodel_progress cb, void *ud,
                     char err[HR_ERR_LEN]);

#endif
