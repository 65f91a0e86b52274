/* test_sampler.c - the sampler: greedy is argmax, seeds reproduce, top-k /
 * top-p / min-p keep exactly the documented sets (heap paths checked against
 * a full sort), penalties change logits as documented, draws follow the
 * tempered softmax (chi-square), and extreme temperatures stay sane. */
#include "tests/check.h"

#include "model/sampler.h"

#include <float.h>
#include <stdint.h>
#include <time.h>

static uint64_t rng_state = 88172645463325252ull;

static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static void random_logits(float *x, int n, float scale) {
    for (int i = 0; i < n; i++)
        x[i] = (float)((urand() * 2.0 - 1.0) * scale);
}

static hr_sampler_params plain(float temp) {
    hr_sampler_params p = hr_sampler_params_default();
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

/* Draws n_draw tokens from fresh copies of logits; counts[n] gets the
 * histogram. */
static void histogram(hr_sampler *s, const float *logits, int n, int n_draw, int *counts,
                      float *work) {
    memset(counts, 0, (size_t)n * sizeof *counts);
    for (int d = 0; d < n_draw; d++) {
        memcpy(work, logits, (size_t)n * sizeof *work);
        int32_t id = hr_sampler_sample(s, work);
        if (id >= 0 && id < n)
            counts[id]++;
    }
}

/* Pearson chi-square of counts against probabilities p (cells with p = 0
 * must have no counts: they add a huge value otherwise). */
static double chi_square(const int *counts, const double *p, int n, int n_draw) {
    double chi = 0.0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * n_draw;
        if (e == 0.0) {
            chi += counts[i] ? 1e9 : 0.0;
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

static void softmax(const float *x, int n, double temp, double *p) {
    double mx = -DBL_MAX, sum = 0.0;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) {
        p[i] = exp((x[i] - mx) / temp);
        sum += p[i];
    }
    for (int i = 0; i < n; i++)
        p[i] /= sum;
}

static void test_greedy(void) {
    enum { N = 32000 };
    static float logits[N], work[N];
    hr_sampler_params p = plain(0.0f);
    hr_sampler *s = hr_sampler_create(&p, N);
    CHECK(s != NULL);
    for (int rep = 0; rep < 20; rep++) {
        random_logits(logits, N, 10.0f);
        int32_t want = hr_argmax(logits, N);
        memcpy(work, logits, sizeof work);
        CHECK_EQ(hr_sampler_sample(s, work), want);
    }
    /* ties: the first index */
    float tie[5] = {1, 3, 3, 2, 3};
    CHECK_EQ(hr_argmax(tie, 5), 1);
    hr_sampler_destroy(s);

    /* top-k = 1, tiny top-p, min-p = 1 and a tiny temperature are all
     * greedy, whatever the seed */
    for (int mode = 0; mode < 4; mode++) {
        p = plain(1.0f);
        if (mode == 0)
            p.top_k = 1;
        else if (mode == 1)
            p.top_p = 1e-6f;
        else if (mode == 2)
            p.min_p = 1.0f;
        else
            p.temperature = 1e-6f;
        for (uint64_t seed = 0; seed < 5; seed++) {
            p.seed = seed;
            s = hr_sampler_create(&p, N);
            for (int rep = 0; rep < 10; rep++) {
                random_logits(logits, N, 3.0f);
                int32_t want = hr_argmax(logits, N);
                memcpy(work, logits, sizeof work);
                int32_t got = hr_sampler_sample(s, work);
                if (got != want)
                    fprintf(stderr, "mode %d seed %d: %d vs %d\n", mode, (int)seed, got, want);
                CHECK_EQ(got, want);
            }
            hr_sampler_destroy(s);
        }
    }
    hr_sampler_destroy(NULL);
}

static void test_seed(void) {
    enum { N = 5000, D = 300 };
    static float logits[N], work[N];
    random_logits(logits, N, 2.0f);
    hr_sampler_params p = hr_sampler_params_default();
    p.seed = 42;
    int32_t a[D], b[D], c[D], d[D];
    hr_sampler *s1 = hr_sampler_create(&p, N), *s2 = hr_sampler_create(&p, N);
    p.seed = 43;
    hr_sampler *s3 = hr_sampler_create(&p, N);
    for (int i = 0; i < D; i++) {
        memcpy(work, logits, sizeof work);
        a[i] = hr_sampler_sample(s1, work);
        memcpy(work, logits, sizeof work);
        b[i] = hr_sampler_sample(s2, work);
        memcpy(work, logits, sizeof work);
        c[i] = hr_sampler_sample(s3, work);
    }
    hr_sampler_reset(s1);
    for (int i = 0; i < D; i++) {
        memcpy(work, logits, sizeof work);
        d[i] = hr_sampler_sample(s1, work);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, d, sizeof a) == 0); /* reset reseeds */
    CHECK(memcmp(a, c, sizeof a) != 0);
    int distinct = 0;
    for (int i = 1; i < D; i++)
        distinct += a[i] != a[0];
    CHECK(distinct > 0); /* it does sample, not argmax */
    hr_sampler_destroy(s1);
    hr_sampler_destroy(s2);
    hr_sampler_destroy(s3);
}

static int cmp_desc(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a < b) - (a > b);
}

/* top-k on a large vocabulary keeps exactly the k largest logits: with a
 * huge temperature the survivors are drawn uniformly. */
static void test_top_k(void) {
    enum { N = 152064, K = 40, D = 1000 };
    static float logits[N], work[N], sorted[N];
    static int counts[N];
    random_logits(logits, N, 8.0f);
    memcpy(sorted, logits, sizeof sorted);
    qsort(sorted, N, sizeof *sorted, cmp_desc);
    float kth = sorted[K - 1];
    hr_sampler_params p = plain(1e9f);
    p.top_k = K;
    hr_sampler *s = hr_sampler_create(&p, N);
    histogram(s, logits, N, D, counts, work);
    int outside = 0, hit = 0;
    double chi = 0.0, e = (double)D / K;
    for (int i = 0; i < N; i++) {
        if (logits[i] >= kth) {
            hit += counts[i] > 0;
            chi += (counts[i] - e) * (counts[i] - e) / e;
        } else {
            outside += counts[i];
        }
    }
    CHECK_EQ(outside, 0);
    CHECK_EQ(hit, K);
    CHECK(chi < 100.0); /* 39 dof: mean 39, sd ~8.8 */
    hr_sampler_destroy(s);

    /* k >= n and k <= 0 are off */
    float small[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    float w4[4];
    int c4[4];
    p = plain(1e9f);
    p.top_k = 10;
    s = hr_sampler_create(&p, 4);
    histogram(s, small, 4, 4000, c4, w4);
    for (int i = 0; i < 4; i++)
        CHECK(c4[i] > 800);
    hr_sampler_destroy(s);
}

/* top-p keeps the smallest set with mass >= top_p (at temperature 1,
 * before temperature is applied); the heap path (no top-k) and the sorted
 * path (after top-k) agree. */
static void test_top_p(void) {
    /* probabilities 0.5, 0.25, 0.15, 0.1 */
    float logits[4] = {logf(0.15f), logf(0.5f), logf(0.1f), logf(0.25f)};
    float work[4];
    int counts[4];
    for (int path = 0; path < 2; path++) {
        hr_sampler_params p = plain(1.0f);
        p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.75: keeps ids 1 and 3 */
        p.top_k = path ? 4 - 1 : 0;
        hr_sampler *s = hr_sampler_create(&p, 4);
        histogram(s, logits, 4, 30000, counts, work);
        double want[4] = {0, 2.0 / 3.0, 0, 1.0 / 3.0};
        CHECK_EQ(counts[0] + counts[2], 0);
        CHECK(chi_square(counts, want, 4, 30000) < 20.0);
        hr_sampler_destroy(s);
        /* temperature reshapes the survivors only: T = 0.5 squares them */
        p.temperature = 0.5f;
        s = hr_sampler_create(&p, 4);
        histogram(s, logits, 4, 30000, counts, work);
        double want2[4] = {0, 0.8, 0, 0.2};
        CHECK_EQ(counts[0] + counts[2], 0);
        CHECK(chi_square(counts, want2, 4, 30000) < 20.0);
        hr_sampler_destroy(s);
    }
    /* the quickselect / bucket paths on larger vocabularies (also with
     * many ties): nothing below the nucleus of a full sort is drawn */
    enum { NMAX = 32000, D = 600 };
    static float big[NMAX], sorted[NMAX], w[NMAX];
    static int cnt[NMAX];
    static double pr[NMAX];
    const int sizes[] = {3000, 32000};
    const float tps[] = {0.5f, 0.95f};
    for (int si = 0; si < 2; si++) {
        for (int ti = 0; ti < 2; ti++) {
            for (int ties = 0; ties < 2; ties++) {
                int n = sizes[si];
                random_logits(big, n, 6.0f);
                if (ties)
                    for (int i = 0; i < n; i++)
                        big[i] = roundf(big[i]);
                memcpy(sorted, big, (size_t)n * sizeof *big);
                qsort(sorted, (size_t)n, sizeof *sorted, cmp_desc);
                softmax(sorted, n, 1.0, pr);
                double cum = 0.0;
                int m = 0;
                while (m < n) {
                    cum += pr[m++];
                    if (cum >= tps[ti])
                        break;
                }
                float thr = sorted[m - 1];
                hr_sampler_params p = plain(1.0f);
                p.top_p = tps[ti];
                hr_sampler *s = hr_sampler_create(&p, n);
                histogram(s, big, n, D, cnt, w);
                int outside = 0, distinct = 0;
                for (int i = 0; i < n; i++) {
                    if (big[i] < thr)
                        outside += cnt[i];
                    distinct += cnt[i] > 0;
                }
                CHECK_EQ(outside, 0);
                CHECK(m > 10);        /* the test means something */
                CHECK(distinct > 10); /* and it samples */
                hr_sampler_destroy(s);
            }
        }
    }
}

/* min-p drops tokens with p < min_p * p_max and renormalises the rest. */
static void test_min_p(void) {
    float logits[5] = {logf(0.4f), logf(0.3f), logf(0.15f), logf(0.1f), logf(0.05f)};
    float work[5];
    int counts[5];
    for (int path = 0; path < 2; path++) {
        hr_sampler_params p = plain(1.0f);
        p.min_p = 0.3f; /* threshold 0.12: keeps 0.4, 0.3, 0.15 */
        p.top_k = path ? 4 : 0;
        hr_sampler *s = hr_sampler_create(&p, 5);
        histogram(s, logits, 5, 30000, counts, work);
        double want[5] = {0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0};
        CHECK_EQ(counts[3] + counts[4], 0);
        CHECK(chi_square(counts, want, 5, 30000) < 20.0);
        hr_sampler_destroy(s);
    }
}

/* Penalties, llama.cpp semantics: positive logits divided by the repeat
 * penalty, negative ones multiplied; count * frequency + presence
 * subtracted; only the last penalty_last_n tokens count. */
static void test_penalties(void) {
    float l[6] = {4.0f, -1.0f, 2.0f, 0.5f, 3.0f, 1.0f};
    hr_sampler_params p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 1.0f;
    p.penalty_last_n = 5;
    hr_sampler *s = hr_sampler_create(&p, 6);
    int32_t hist[] = {4, 0, 1, 1, 1, 0}; /* the first falls out of the window */
    for (size_t i = 0; i < sizeof hist / sizeof hist[0]; i++)
        hr_sampler_accept(s, hist[i]);
    hr_sampler_accept(s, -7); /* ignored as an id out of range: pushes 1 out */
    /* window now: 1 1 1 0 -7 -> counts: 1 x3, 0 x1 */
    int32_t id = hr_sampler_sample(s, l);
    CHECK_NEAR(l[0], 4.0f / 2 - 0.5f * 1 - 1.0f, 1e-6);  /* 0.5 */
    CHECK_NEAR(l[1], -1.0f * 2 - 0.5f * 3 - 1.0f, 1e-6); /* -4.5 */
    CHECK_NEAR(l[2], 2.0f, 0);
    CHECK_NEAR(l[4], 3.0f, 0); /* 4 left the window */
    CHECK_EQ(id, 4);
    /* applied once per sample, not compounded on the caller's logits copy */
    float l2[6] = {4.0f, -1.0f, 2.0f, 0.5f, 3.0f, 1.0f};
    hr_sampler_sample(s, l2);
    CHECK_NEAR(l2[0], 0.5f, 1e-6);
    hr_sampler_reset(s);
    float l3[6] = {4.0f, -1.0f, 2.0f, 0.5f, 3.0f, 1.0f};
    CHECK_EQ(hr_sampler_sample(s, l3), 0); /* nothing accepted: no penalty */
    CHECK_NEAR(l3[0], 4.0f, 0);
    hr_sampler_destroy(s);

    /* off by default values; penalty_last_n = 0 disables */
    p = plain(0.0f);
    p.repeat_penalty = 3.0f;
    p.penalty_last_n = 0;
    s = hr_sampler_create(&p, 6);
    hr_sampler_accept(s, 0);
    float l4[6] = {4.0f, -1.0f, 2.0f, 0.5f, 3.0f, 1.0f};
    CHECK_EQ(hr_sampler_sample(s, l4), 0);
    CHECK_NEAR(l4[0], 4.0f, 0);
    hr_sampler_destroy(s);
}

/* Draws follow softmax(logits / T) when no filter is on. */
static void test_distribution(void) {
    enum { N = 12, D = 120000 };
    float logits[N], work[N];
    int counts[N];
    double pr[N];
    random_logits(logits, N, 2.0f);
    const float temps[] = {0.5f, 1.0f, 2.0f};
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++) {
        hr_sampler_params p = plain(temps[t]);
        p.seed = 7 + t;
        hr_sampler *s = hr_sampler_create(&p, N);
        histogram(s, logits, N, D, counts, work);
        softmax(logits, N, temps[t], pr);
        double chi = chi_square(counts, pr, N, D);
        /* 11 dof: mean 11, P(chi > 45) ~ 5e-6 */
        if (chi >= 45.0)
            fprintf(stderr, "temperature %g: chi-square %.1f\n", temps[t], chi);
        CHECK(chi < 45.0);
        hr_sampler_destroy(s);
    }
}

static void test_temperature_extremes(void) {
    enum { N = 8, D = 16000 };
    float logits[N] = {1.0f, 5.0f, -INFINITY, 2.0f, 0.0f, -3.0f, 4.9f, 1.5f};
    float work[N];
    int counts[N];
    /* huge and infinite temperatures: uniform over the finite logits */
    const float temps[] = {1e30f, INFINITY};
    for (int t = 0; t < 2; t++) {
        hr_sampler_params p = plain(temps[t]);
        hr_sampler *s = hr_sampler_create(&p, N);
        histogram(s, logits, N, D, counts, work);
        double want[N];
        for (int i = 0; i < N; i++)
            want[i] = i == 2 ? 0.0 : 1.0 / 7;
        CHECK_EQ(counts[2], 0);
        CHECK(chi_square(counts, want, N, D) < 40.0);
        hr_sampler_destroy(s);
    }
    /* tiny temperature: the argmax even with a close runner-up */
    hr_sampler_params p = plain(FLT_MIN);
    hr_sampler *s = hr_sampler_create(&p, N);
    histogram(s, logits, N, 1000, counts, work);
    CHECK_EQ(counts[1], 1000);
    hr_sampler_destroy(s);
    /* negative temperature is greedy */
    p = plain(-1.0f);
    s = hr_sampler_create(&p, N);
    memcpy(work, logits, sizeof work);
    CHECK_EQ(hr_sampler_sample(s, work), 1);
    hr_sampler_destroy(s);
    /* every logit -inf: still returns a valid id */
    float dead[3] = {-INFINITY, -INFINITY, -INFINITY};
    p = plain(1.0f);
    s = hr_sampler_create(&p, 3);
    int32_t id = hr_sampler_sample(s, dead);
    CHECK(id >= 0 && id < 3);
    hr_sampler_destroy(s);
    CHECK(hr_sampler_create(&p, 0) == NULL);
}

/* Not a benchmark: prints the per-token cost of the usual chains on a
 * Qwen-sized vocabulary, and checks it is far from a full sort's. */
static void test_speed(void) {
    enum { N = 152064, D = 20 };
    static float logits[N], work[N];
    random_logits(logits, N, 10.0f);
    struct {
        const char *name;
        int k;
        float p, minp;
    } cases[] = {{"top-k 40, top-p .95, min-p .05", 40, 0.95f, 0.05f},
                 {"top-p .9 only", 0, 0.9f, 0.0f},
                 {"min-p .05 only", 0, 1.0f, 0.05f},
                 {"no filter", 0, 1.0f, 0.0f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        hr_sampler_params p = plain(0.8f);
        p.top_k = cases[c].k;
        p.top_p = cases[c].p;
        p.min_p = cases[c].minp;
        hr_sampler *s = hr_sampler_create(&p, N);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int d = 0; d < D; d++) {
            memcpy(work, logits, sizeof work);
            hr_sampler_sample(s, work);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6) / D;
        printf("sampler %-32s %.3f ms/token (n_vocab %d)\n", cases[c].name, ms, N);
        CHECK(ms < 50.0);
        hr_sampler_destroy(s);
    }
}

int main(void) {
    test_greedy();
    test_seed();
    test_top_k();
    test_top_p();
    test_min_p();
    test_penalties();
    test_distribution();
    test_temperature_extremes();
    test_speed();
    return hr_check_finish("sampler");
}
