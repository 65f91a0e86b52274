/* membw.c - streaming-read bandwidth probe. */
#include "profiler/membw.h"

#include "common/sync.h"
#include "kernels/pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const uint64_t *buf;
    size_t n_words;
    uint64_t sink[64];
} hr_bw_job;

static void hr_bw_worker(void *ctx, int ith, int nth) {
    hr_bw_job *j = ctx;
    long b, e;
    hr_split_range((long)j->n_words, ith, nth, 512, &b, &e);
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (long i = b; i + 8 <= e; i += 8) {
        a0 ^= j->buf[i];
        a1 ^= j->buf[i + 1];
        a2 ^= j->buf[i + 2];
        a3 ^= j->buf[i + 3];
        a4 ^= j->buf[i + 4];
        a5 ^= j->buf[i + 5];
        a6 ^= j->buf[i + 6];
        a7 ^= j->buf[i + 7];
    }
    j->sink[ith & 63] = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

static int hr_dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double hr_membw_read_pool(hr_pool *pool, int n_threads, const void *buf, size_t bytes, int reps) {
    bytes &= ~(size_t)63;
    if (!pool || !buf || bytes == 0)
        return -1.0;
    if (reps < 1)
        reps = 1;
    if (reps > 32)
        reps = 32;
    if (n_threads < 1 || n_threads > hr_pool_size(pool))
        n_threads = hr_pool_size(pool);
    hr_bw_job j = {.buf = buf, .n_words = bytes / 8};
    double gbs[32];
    hr_pool_run_n(pool, n_threads, hr_bw_worker, &j); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = hr_now_s();
        hr_pool_run_n(pool, n_threads, hr_bw_worker, &j);
        double dt = hr_now_s() - t0;
        gbs[r] = (double)bytes / dt / 1e9;
    }
    qsort(gbs, (size_t)reps, sizeof gbs[0], hr_dbl_cmp);
    return gbs[reps / 2];
}

double hr_membw_read(int n_threads, size_t bytes, int reps) {
    bytes = (bytes + 4095) & ~(size_t)4095;
    void *mem = NULL;
    if (posix_memalign(&mem, 4096, bytes) != 0)
        return -1.0;
    memset(mem, 1, bytes);
    hr_pool *pool = hr_pool_create(n_threads);
    if (!pool) {
        free(mem);
        return -1.0;
    }
    double r = hr_membw_read_pool(pool, n_threads, mem, bytes, reps);
    hr_pool_destroy(pool);
    free(mem);
    return r;
}
