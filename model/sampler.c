/* sampler.c - greedy / temperature / top-k / top-p / min-p sampling with
 * penalties and a seeded splitmix64 RNG. */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float logit;
    int32_t id;
} hr_cand;

struct hr_sampler {
    hr_sampler_params p;
    int n_vocab;
    hr_cand *cand;   /* [n_vocab] */
    int32_t *recent; /* ring of the last penalty_last_n tokens */
    int n_recent, recent_head;
    int32_t *counts; /* [n_vocab] scratch for penalties */
    uint64_t rng;
};

hr_sampler_params hr_sampler_params_default(void) {
    return (hr_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                               .repeat_penalty = 1.0f, .presence_penalty = 0.0f,
                               .frequency_penalty = 0.0f, .penalty_last_n = 64, .seed = 0};
}

hr_sampler *hr_sampler_create(const hr_sampler_params *p, int n_vocab) {
    hr_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->p = *p;
    if (s->p.penalty_last_n < 0)
        s->p.penalty_last_n = 0;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->recent = malloc(((size_t)s->p.penalty_last_n + 1) * sizeof *s->recent);
    if (!s->cand || !s->counts || !s->recent) {
        hr_sampler_destroy(s);
        return NULL;
    }
    s->rng = p->seed ^ 0x9E3779B97F4A7C15ull;
    return s;
}

void hr_sampler_destroy(hr_sampler *s) {
    if (!s)
        return;
    free(s->cand);
    free(s->counts);
    free(s->recent);
    free(s);
}

void hr_sampler_reset(hr_sampler *s) {
    s->n_recent = 0;
    s->recent_head = 0;
    s->rng = s->p.seed ^ 0x9E3779B97F4A7C15ull;
}

void hr_sampler_accept(hr_sampler *s, int32_t id) {
    int cap = s->p.penalty_last_n;
    if (cap == 0)
        return;
    s->recent[s->recent_head] = id;
    s->recent_head = (s->recent_head + 1) % cap;
    if (s->n_recent < cap)
        s->n_recent++;
}

static uint64_t hr_rng_next(uint64_t *st) {
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int32_t hr_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int hr_cand_desc(const void *a, const void *b) {
    float x = ((const hr_cand *)a)->logit, y = ((const hr_cand *)b)->logit;
    if (x != y)
        return x < y ? 1 : -1;
    return ((const hr_cand *)a)->id - ((const hr_cand *)b)->id;
}

static void hr_apply_penalties(hr_sampler *s, float *logits) {
    const hr_sampler_params *p = &s->p;
    if (s->n_recent == 0 ||
        (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        return;
    for (int i = 0; i < s->n_recent; i++) {
        int32_t id = s->recent[i];
        if (id >= 0 && id < s->n_vocab)
            s->counts[id]++;
    }
    for (int i = 0; i < s->n_recent; i++) {
        int32_t id = s->recent[i];
        if (id < 0 || id >= s->n_vocab || s->counts[id] == 0)
            continue;
        float *l = &logits[id];
        if (p->repeat_penalty != 1.0f)
            *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        *l -= (float)s->counts[id] * p->frequency_penalty + p->presence_penalty;
        s->counts[id] = 0; /* each distinct token once */
    }
}

int32_t hr_sampler_sample(hr_sampler *s, float *logits) {
    const hr_sampler_params *p = &s->p;
    hr_apply_penalties(s, logits);
    if (p->temperature <= 0.0f)
        return hr_argmax(logits, s->n_vocab);
    int n = s->n_vocab;
    for (int i = 0; i < n; i++)
        s->cand[i] = (hr_cand){logits[i], i};
    /* top-k: partial order by sorting only when k is small, full sort otherwise */
    int k = (p->top_k > 0 && p->top_k < n) ? p->top_k : n;
    if (k < n) {
        /* selection of the k largest by a simple threshold pass + sort */
        qsort(s->cand, (size_t)n, sizeof *s->cand, hr_cand_desc);
        n = k;
    } else {
        qsort(s->cand, (size_t)n, sizeof *s->cand, hr_cand_desc);
    }
    /* softmax with temperature */
    float mx = s->cand[0].logit;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        float e = expf((s->cand[i].logit - mx) / p->temperature);
        s->cand[i].logit = e;
        sum += e;
    }
    for (int i = 0; i < n; i++)
        s->cand[i].logit = (float)(s->cand[i].logit / sum);
    /* min-p: drop tokens below min_p * max prob */
    if (p->min_p > 0.0f) {
        float thr = p->min_p * s->cand[0].logit;
        int m = 1;
        while (m < n && s->cand[m].logit >= thr)
            m++;
        n = m;
    }
    /* top-p: smallest prefix with mass >= top_p */
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        int m = 0;
        while (m < n) {
            cum += s->cand[m].logit;
            m++;
            if (cum >= p->top_p)
                break;
        }
        n = m;
    }
    double mass = 0.0;
    for (int i = 0; i < n; i++)
        mass += s->cand[i].logit;
    double r = (double)(hr_rng_next(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * mass;
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += s->cand[i].logit;
        if (r < acc)
            return s->cand[i].id;
    }
    return s->cand[n - 1].id;
}
