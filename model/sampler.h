/* sampler.h - choosing the next token from logits.
 *
 * Greedy (temperature <= 0), or a chain applied in llama.cpp's default
 * order:
 *   penalties -> top-k -> top-p -> min-p -> temperature -> random draw
 * top-p and min-p look at the untempered distribution softmax(logits)
 * (renormalised over the candidates top-k left), and temperature then
 * reshapes what survives. The RNG is seeded (splitmix64), so a run with the
 * same seed, params and logits draws the same tokens.
 *
 * Penalties (llama.cpp semantics) over the last penalty_last_n accepted
 * tokens; for each distinct token seen there `count` times:
 *   logit = logit > 0 ? logit / repeat_penalty : logit * repeat_penalty
 *   logit -= count * frequency_penalty + presence_penalty
 *
 * Cost per token: O(n_vocab) for penalties, top-k (a k-entry heap) and
 * min-p; top-p without top-k finds its nucleus with a histogram of the
 * mass over logit buckets plus a mass-weighted quickselect inside the
 * boundary bucket. Nothing is fully sorted and nothing is allocated after
 * create.
 *
 * A hr_sampler owns its buffers (allocated at create for n_vocab); it is
 * used by one thread at a time. */
#ifndef HR_MODEL_SAMPLER_H
#define HR_MODEL_SAMPLER_H

#include <stdint.h>

typedef struct {
    float temperature;    /* <= 0 = greedy (argmax after penalties) */
    int top_k;            /* keep the k largest logits; <= 0 = off */
    float top_p;          /* smallest set with probability mass >= top_p; >= 1 = off */
    float min_p;          /* drop tokens with p < min_p * p_max; <= 0 = off */
    float repeat_penalty; /* 1 = off */
    float presence_penalty;
    float frequency_penalty;
    int penalty_last_n; /* how many recent tokens the penalties look at (<= 0 = none) */
    uint64_t seed;
} hr_sampler_params;

hr_sampler_params hr_sampler_params_default(void);

typedef struct hr_sampler hr_sampler;

hr_sampler *hr_sampler_create(const hr_sampler_params *p, int n_vocab); /* NULL on OOM */
void hr_sampler_destroy(hr_sampler *s);                                 /* NULL is a no-op */
/* Records an accepted token (prompt or generated) for the penalties. */
void hr_sampler_accept(hr_sampler *s, int32_t id);
/* Forgets the accepted tokens and reseeds the RNG. */
void hr_sampler_reset(hr_sampler *s);
/* Picks a token from logits[n_vocab]; logits is modified (penalties). */
int32_t hr_sampler_sample(hr_sampler *s, float *logits);
/* Index of the largest value (first on ties). */
int32_t hr_argmax(const float *x, int n);

#endif
