/* sampler.h - choosing the next token from logits.
 *
 * Greedy (temperature 0), or temperature with top-k, top-p and min-p
 * filtering, plus repetition / presence / frequency penalties over the
 * last penalty_last_n tokens, with a seeded RNG so runs are reproducible.
 * A hr_sampler owns its buffers (allocated at create for n_vocab); it is
 * used by one thread at a time. */
#ifndef HR_MODEL_SAMPLER_H
#define HR_MODEL_SAMPLER_H

#include <stdint.h>

typedef struct {
    float temperature;     /* 0 = greedy */
    int top_k;             /* 0 = off */
    float top_p;           /* 1 = off */
    float min_p;           /* 0 = off */
    float repeat_penalty;  /* 1 = off (llama.cpp semantics: divide positive logits) */
    float presence_penalty;
    float frequency_penalty;
    int penalty_last_n;    /* how many recent tokens the penalties look at */
    uint64_t seed;
} hr_sampler_params;

hr_sampler_params hr_sampler_params_default(void);

typedef struct hr_sampler hr_sampler;

hr_sampler *hr_sampler_create(const hr_sampler_params *p, int n_vocab); /* NULL on OOM */
void hr_sampler_destroy(hr_sampler *s);
/* Records an accepted token (prompt or generated) for the penalties. */
void hr_sampler_accept(hr_sampler *s, int32_t id);
void hr_sampler_reset(hr_sampler *s);
/* Picks a token from logits[n_vocab]; logits is modified (penalties). */
int32_t hr_sampler_sample(hr_sampler *s, float *logits);
/* Index of the largest value (first on ties). */
int32_t hr_argmax(const float *x, int n);

#endif
