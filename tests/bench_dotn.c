/* bench_dotn.c - throughput of the multi-column decode kernels (vec_dot_n)
 * against one vec_dot per row, as batched decode runs them: rows in tiles of
 * 16, the columns of all active sequences per tile. Not a CTest test; build
 * by hand against the kernels library:
 *
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I. tests/bench_dotn.c \
 *       build/libhr_kernels.a build/libhr_types.a build/libhr_common.a \
 *       -lm -lpthread -o bench_dotn
 *
 *   bench_dotn [type] [MiB] [threads]   weights of one type (q4_0, q6_k, ...;
 *                          default q4_0), n = 2048, MiB of them (default 256:
 *                          streamed from DRAM; 1: cache resident) over
 *                          1..threads threads. Prints ms per pass and
 *                          column-throughput relative to vec_dot alone. */
#include "kernels/quant.h"
#include "kernels/types.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define TILE 16
#define NIN 2048

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t g_rng = 88172645463325252ull;

static float rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)(g_rng >> 40) / 16777216.0f - 0.5f;
}

typedef struct {
    const hr_kernels *k;
    int type, nt; /* nt 0: vec_dot per row */
    const char *w;
    size_t rb;
    long rows;
    const void *const *a;
    float *y;
    long r0, r1;
    int reps;
    double cpu; /* seconds of this thread's CPU time */
} job;

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *run(void *p) {
    job *j = p;
    float out[HR_DOT_N_MAX * TILE];
    double c0 = cpu_s();
    for (int rep = 0; rep < j->reps; rep++) {
        long r0 = j->r0, r1 = j->r1;
        for (long r = r0; r < r1; r += TILE) {
            int nr = (int)(r1 - r < TILE ? r1 - r : TILE);
            const char *wr = j->w + (size_t)r * j->rb;
            if (j->nt == 0) {
                for (int i = 0; i < nr; i++)
                    out[i] = j->k->vec_dot[j->type](NIN, wr + (size_t)i * j->rb, j->a[0]);
            } else {
                hr_vec_dot_n(j->k, j->type, NIN, nr, wr, j->rb, j->a, j->nt, out, TILE);
            }
            j->y[r % 4096] += out[0];
        }
    }
    j->cpu = cpu_s() - c0;
    return NULL;
}

static double pass(job *base, int nth, int nt, int reps) {
    pthread_t th[16];
    job jobs[16];
    double t0 = now_s();
    for (int t = 0; t < nth; t++) {
        jobs[t] = *base;
        jobs[t].nt = nt;
        jobs[t].reps = reps;
        jobs[t].r0 = base->rows / TILE * t / nth * TILE;
        jobs[t].r1 = base->rows / TILE * (t + 1) / nth * TILE;
        pthread_create(&th[t], NULL, run, &jobs[t]);
    }
    for (int t = 0; t < nth; t++)
        pthread_join(th[t], NULL);
    double wall = now_s() - t0, cpu = 0;
    for (int t = 0; t < nth; t++)
        cpu = jobs[t].cpu > cpu ? jobs[t].cpu : cpu;
    /* one thread: its CPU time (robust to a busy machine); more: wall time */
    return (nth == 1 ? cpu : wall) / reps;
}

int main(int argc, char **argv) {
    int type = HR_TYPE_Q4_0;
    if (argc > 1)
        for (int t = 0; t < HR_TYPE_COUNT; t++)
            if (hr_type_get(t) && strcasecmp(hr_type_get(t)->name, argv[1]) == 0)
                type = t;
    double mib = argc > 2 ? atof(argv[2]) : 256;
    int max_th = argc > 3 ? atoi(argv[3]) : 2;
    int only = argc > 4 ? atoi(argv[4]) : -1; /* profile one column count */
    const hr_kernels *k = hr_kernels_best();
    const hr_type_traits *tt = hr_type_get(type);
    size_t rb = hr_type_row_bytes(type, NIN), ab = hr_type_row_bytes(tt->vec_dot_type, NIN);
    long rows = (long)(mib * 1048576.0 / (double)rb) / TILE * TILE;
    if (rows < TILE)
        rows = TILE;
    /* quantize a few random rows and repeat them (valid scales) */
    float *f = malloc(NIN * sizeof(float));
    char *w = malloc((size_t)rows * rb);
    const long distinct = rows < 64 ? rows : 64;
    for (long r = 0; r < distinct; r++) {
        for (int i = 0; i < NIN; i++)
            f[i] = rnd();
        k->quant[type](f, w + (size_t)r * rb, NIN);
    }
    for (long r = distinct; r < rows; r++)
        memcpy(w + (size_t)r * rb, w + (size_t)(r % distinct) * rb, rb);
    void *a[HR_DOT_N_MAX];
    for (int t = 0; t < HR_DOT_N_MAX; t++) {
        a[t] = malloc(ab);
        for (int i = 0; i < NIN; i++)
            f[i] = rnd();
        if (tt->vec_dot_type == HR_TYPE_F32)
            memcpy(a[t], f, ab);
        else
            k->quant[tt->vec_dot_type](f, a[t], NIN);
    }
    float *y = calloc(4096, sizeof(float));
    job base = {
        .k = k, .type = type, .w = w, .rb = rb, .rows = rows, .a = (const void *const *)a, .y = y};
    int passes = 15, reps = mib >= 64 ? 1 : (int)(500.0 / mib) + 1;
    printf("%s, isa %s, %.1f MiB (%ld rows x %d), best of %d passes\n", tt->name,
           hr_isa_name(k->isa), (double)rows * rb / 1048576.0, rows, NIN, passes);
    const int cols[] = {0, 1, 2, 4, 8};
    for (int nth = 1; nth <= max_th; nth++) {
        double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
        for (int p = 0; p < passes; p++) /* interleaved: each sees the same load */
            for (int c = 0; c < 5; c++) {
                if (only >= 0 && cols[c] != only)
                    continue;
                double dt = pass(&base, nth, cols[c], reps);
                best[c] = dt < best[c] ? dt : best[c];
            }
        for (int c = 0; c < 5; c++) {
            int ncol = cols[c] ? cols[c] : 1;
            char name[16];
            snprintf(name, sizeof name, c == 0 ? "vec_dot" : "n=%d", cols[c]);
            printf("  %d thread%s %-8s %8.3f ms/pass %7.2f GB/s  columns x solo %5.2f  time x solo "
                   "%5.2f\n",
                   nth, nth > 1 ? "s" : " ", name, best[c] * 1e3, (double)rows * rb / best[c] / 1e9,
                   ncol * best[0] / best[c], best[c] / best[0]);
        }
    }
    return y[0] == 12345.0f;
}
