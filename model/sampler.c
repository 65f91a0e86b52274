/* sampler.c - penalties, top-k / top-p / min-p filtering, temperature and a
 * seeded splitmix64 draw, without sorting the whole vocabulary. */
#include "model/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float logit;
    float w; /* exp(logit - max), filled for top-p */
    int32_t id;
} hr_cand;

#define HR_NB 1024 /* logit buckets for top-p */

struct hr_sampler {
    hr_sampler_params p;
    int n_vocab;
    hr_cand *cand;   /* [n_vocab] candidates */
    int32_t *recent; /* ring of the last penalty_last_n tokens */
    int n_recent, recent_head;
    int32_t *counts; /* [n_vocab] scratch for penalties, all zero between calls */
    uint64_t rng;
    double mass[HR_NB]; /* top-p: probability mass per logit bucket */
};

hr_sampler_params hr_sampler_params_default(void) {
    return (hr_sampler_params){.temperature = 0.8f,
                               .top_k = 40,
                               .top_p = 0.95f,
                               .min_p = 0.05f,
                               .repeat_penalty = 1.0f,
                               .presence_penalty = 0.0f,
                               .frequency_penalty = 0.0f,
                               .penalty_last_n = 64,
                               .seed = 0};
}

hr_sampler *hr_sampler_create(const hr_sampler_params *p, int n_vocab) {
    if (!p || n_vocab <= 0)
        return NULL;
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

/* Total order: larger logit first, then smaller id (deterministic ties). */
static bool hr_better(const hr_cand *a, const hr_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Sift-down in a heap whose root is its worst candidate. */
static void hr_sift(hr_cand *h, int n, int i) {
    hr_cand v = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && hr_better(&h[c], &h[c + 1]))
            c++;
        if (!hr_better(&v, &h[c]))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

/* Moves the k best of c[0..n) to c[0..k), sorted best first: a k-entry
 * min-heap sees each candidate once, O(n log k) worst case and about O(n)
 * on real logits; then heap-sorts the k survivors. */
static void hr_top_k(hr_cand *c, int n, int k) {
    for (int i = k / 2 - 1; i >= 0; i--)
        hr_sift(c, k, i);
    for (int i = k; i < n; i++) {
        if (hr_better(&c[i], &c[0])) {
            c[0] = c[i];
            hr_sift(c, k, 0);
        }
    }
    for (int end = k - 1; end > 0; end--) { /* worst to the back: ends best first */
        hr_cand t = c[0];
        c[0] = c[end];
        c[end] = t;
        hr_sift(c, end, 0);
    }
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
        s->counts[id] = 0; /* each distinct token once; leaves counts all zero */
    }
}

/* exp((l - mx) / t), 0 for -inf logits whatever t is. */
static float hr_weight(float l, float mx, float t) {
    if (l == -INFINITY)
        return 0.0f;
    float x = (l - mx) / t;
    return x != x ? 0.0f : expf(x);
}

static void hr_swap(hr_cand *a, hr_cand *b) {
    hr_cand t = *a;
    *a = *b;
    *b = t;
}

static int hr_bucket(float l, float mn, float scale) {
    float f = (l - mn) * scale;
    if (!(f >= 0.0f)) /* -inf, NaN */
        return 0;
    return f >= (float)(HR_NB - 1) ? HR_NB - 1 : (int)f;
}

/* Moves the nucleus of c[0..n) (the smallest set of best candidates whose
 * weights .w sum to >= want) to the front, unsorted, and returns its size:
 * a quickselect that keeps the mass of what it has settled, expected O(n). */
static int hr_nucleus(hr_cand *c, int n, double want) {
    int lo = 0, hi = n; /* c[0..lo) settled in the nucleus, c[lo..hi) undecided */
    double acc = 0.0;
    while (hi - lo > 16) {
        int mid = lo + (hi - lo) / 2, last = hi - 1;
        /* median of three to c[last] as the pivot */
        if (hr_better(&c[mid], &c[lo]))
            hr_swap(&c[mid], &c[lo]);
        if (hr_better(&c[last], &c[lo]))
            hr_swap(&c[last], &c[lo]);
        if (hr_better(&c[mid], &c[last]))
            hr_swap(&c[mid], &c[last]);
        int j = lo;
        double upper = 0.0;
        for (int k = lo; k < last; k++) {
            if (hr_better(&c[k], &c[last])) {
                upper += c[k].w;
                hr_swap(&c[j++], &c[k]);
            }
        }
        hr_swap(&c[j], &c[last]); /* pivot at j: c[lo..j) better, c[j+1..hi) worse */
        if (acc + upper >= want) {
            hi = j;
        } else if (acc + upper + c[j].w >= want) {
            return j + 1;
        } else {
            acc += upper + c[j].w;
            lo = j + 1;
        }
    }
    /* a few left: selection sort them best first and finish the scan */
    for (int i = lo; i < hi; i++) {
        int b = i;
        for (int k = i + 1; k < hi; k++)
            if (hr_better(&c[k], &c[b]))
                b = k;
        hr_swap(&c[i], &c[b]);
        acc += c[i].w;
        if (acc >= want)
            return i + 1;
    }
    return hi > 0 ? hi : 1;
}

/* The same, faster on big vocabularies: a histogram of the mass over
 * logit buckets (monotone in the logit) finds the bucket the nucleus ends
 * in; the buckets above it are in, and only that one goes to hr_nucleus. */
static int hr_top_p(hr_sampler *s, hr_cand *c, int n, float mx, double want) {
    float mn = mx;
    for (int i = 0; i < n; i++)
        if (c[i].logit < mn && c[i].logit != -INFINITY)
            mn = c[i].logit;
    float range = mx - mn;
    float scale = range > 0.0f ? (HR_NB - 1) / range : INFINITY;
    if (n < 4 * HR_NB || !(scale < 1e30f))
        return hr_nucleus(c, n, want);
    memset(s->mass, 0, sizeof s->mass);
    for (int i = 0; i < n; i++)
        s->mass[hr_bucket(c[i].logit, mn, scale)] += c[i].w;
    double cum = 0.0;
    int bb = HR_NB - 1;
    for (; bb > 0; bb--) {
        if (cum + s->mass[bb] >= want)
            break;
        cum += s->mass[bb];
    }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (hr_bucket(c[i].logit, mn, scale) > bb)
            hr_swap(&c[m++], &c[i]);
    int k = m;
    for (int i = m; i < n; i++)
        if (hr_bucket(c[i].logit, mn, scale) == bb)
            hr_swap(&c[k++], &c[i]);
    return m + hr_nucleus(c + m, k - m, want - cum);
}

int32_t hr_sampler_sample(hr_sampler *s, float *logits) {
    const hr_sampler_params *p = &s->p;
    hr_apply_penalties(s, logits);
    if (p->temperature <= 0.0f)
        return hr_argmax(logits, s->n_vocab);
    int n = s->n_vocab;
    hr_cand *c = s->cand;
    for (int i = 0; i < n; i++)
        c[i] = (hr_cand){logits[i], 0.0f, i};
    bool sorted = false; /* c[0..n) best first */
    if (p->top_k > 0 && p->top_k < n) {
        hr_top_k(c, n, p->top_k);
        n = p->top_k;
        sorted = true;
    }
    float mx = c[0].logit;
    if (!sorted)
        for (int i = 1; i < n; i++)
            mx = c[i].logit > mx ? c[i].logit : mx;
    if (mx == -INFINITY || mx != mx)
        return sorted ? c[0].id : hr_argmax(logits, s->n_vocab);

    /* top-p on softmax(logits) over the current candidates */
    if (p->top_p < 1.0f) {
        double total = 0.0;
        for (int i = 0; i < n; i++) {
            c[i].w = hr_weight(c[i].logit, mx, 1.0f);
            total += c[i].w;
        }
        double want = (double)p->top_p * total, cum = 0.0;
        int m = 0;
        if (sorted) {
            while (m < n) {
                cum += c[m++].w;
                if (cum >= want)
                    break;
            }
        } else {
            m = hr_top_p(s, c, n, mx, want);
        }
        n = m;
    }

    /* min-p: p >= min_p * p_max  <=>  logit >= max + log(min_p) */
    if (p->min_p > 0.0f && n > 1) {
        float thr = mx + logf(p->min_p);
        thr = thr > mx ? mx : thr; /* min_p > 1 keeps the top token */
        int m = 0;
        if (sorted) {
            while (m < n && c[m].logit >= thr)
                m++;
        } else {
            for (int i = 0; i < n; i++)
                if (c[i].logit >= thr)
                    c[m++] = c[i];
        }
        n = m > 0 ? m : 1;
    }

    /* temperature, then draw */
    double mass = 0.0;
    for (int i = 0; i < n; i++) {
        c[i].w = hr_weight(c[i].logit, mx, p->temperature);
        mass += c[i].w;
    }
    double r = (double)(hr_rng_next(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * mass;
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += c[i].w;
        if (r < acc)
            return c[i].id;
    }
    /* rounding left r at the very top: the last candidate with weight */
    for (int i = n - 1; i > 0; i--)
        if (c[i].w > 0.0f)
            return c[i].id;
    return c[0].id;
}
