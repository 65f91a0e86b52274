/* bench_scheduler.c - hr_sched_solve wall time on random clusters (not a
 * ctest; build with `cmake --build build --target bench_scheduler`).
 * Usage: bench_scheduler [instances per case, default 40] [only this device count] */
#include "common/error.h"
#include "sched/sched.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(double lo, double hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* kind 0: mixed; 1: memory short, fast disks; 2: identical devices, memory
 * short; 3: memory plentiful. A 70B-like model of n_layer layers (~0.49 GiB each). */
static void make(hr_sched_model *m, hr_sched_device *d, int n, int L, int kind) {
    memset(m, 0, sizeof *m);
    m->n_layer = L;
    m->layer_bytes = 0.49 * GIB * 80 / L;
    m->hidden_bytes = 16384;
    m->kv_bytes_per_layer = 4.0 * 1024 * 1024 * 80 / L;
    m->output_bytes = 0.8 * GIB;
    double model = L * m->layer_bytes;
    for (int i = 0; i < n; i++) {
        hr_sched_device *x = &d[i];
        *x = hr_sched_device_default();
        snprintf(x->name, sizeof x->name, "dev%d", i);
        x->is_head = i == 0;
        x->t_head_ms = 20;
        x->t_layer_ms = urand(8, 40) * 80 / L;
        x->mem_bytes = model * urand(0.03, 0.3);
        x->disk_bps = urand(0.3e9, 3.5e9);
        x->rtt_ms = urand(1, 12);
        x->link_bps = urand(12e6, 125e6);
        x->os = urand(0, 1) < 0.25 ? HR_SCHED_OS_MACOS : HR_SCHED_OS_LINUX;
        if (kind == 0 && urand(0, 1) < 0.3)
            x->disk_bps = 0;
        if (kind == 0 && urand(0, 1) < 0.2)
            x->t_layer_ms *= 8;
        if (kind == 1)
            x->mem_bytes = model * urand(0.03, 0.12);
        if (kind == 2) {
            x->t_layer_ms = 12 * 80.0 / L;
            x->mem_bytes = model * 0.08 + 0.8 * GIB * (i == 0);
            x->disk_bps = 2e9;
            x->rtt_ms = 4;
            x->link_bps = 50e6;
            x->os = HR_SCHED_OS_LINUX;
        }
        if (kind == 3)
            x->mem_bytes = model * urand(0.3, 1.2);
    }
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 40;
    int only_n = argc > 2 ? atoi(argv[2]) : 0;
    if (reps < 1 || reps > 100000) {
        fprintf(stderr, "usage: bench_scheduler [instances per case]\n");
        return 2;
    }
    static const struct { int n, L; } sizes[] = {{8, 80}, {4, 80}, {16, 80}, {8, 126}};
    static const char *kinds[] = {"mixed", "memory-short", "identical", "roomy"};
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t)
        return 1;
    int worst_fail = 0;
    double worst_88 = 0.0;
    printf("%-8s %-13s %6s %9s %9s %9s %8s\n", "devs", "case", "runs", "min_ms", "median_ms",
           "max_ms", "k>1");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        if (only_n > 0 && sizes[s].n != only_n)
            continue;
        for (int kind = 0; kind < 4; kind++) {
            int kgt1 = 0, done = 0;
            for (int r = 0; r < reps; r++) {
                hr_sched_model m;
                static hr_sched_device d[HR_SCHED_MAX_DEV];
                static hr_sched_plan p;
                make(&m, d, sizes[s].n, sizes[s].L, kind);
                char err[HR_ERR_LEN];
                double t0 = now_ms();
                int rc = hr_sched_solve(&m, d, sizes[s].n, NULL, &p, err);
                double dt = now_ms() - t0;
                if (rc != 0 && rc != HR_EINFEASIBLE) {
                    fprintf(stderr, "solve failed: %s\n", err);
                    worst_fail = 1;
                    continue;
                }
                t[done++] = dt;
                kgt1 += rc == 0 && p.k > 1;
            }
            if (done == 0)
                continue;
            qsort(t, (size_t)done, sizeof t[0], cmp_double);
            printf("%2dx%-5d %-13s %6d %9.2f %9.2f %9.2f %8d\n", sizes[s].n, sizes[s].L,
                   kinds[kind], done, t[0], t[done / 2], t[done - 1], kgt1);
            if (sizes[s].n == 8 && sizes[s].L == 80 && t[done - 1] > worst_88)
                worst_88 = t[done - 1];
        }
    }
    free(t);
    printf("worst 8 devices x 80 layers: %.2f ms (target < 200 ms): %s\n", worst_88,
           worst_88 < 200.0 ? "ok" : "SLOW");
    return worst_fail || worst_88 >= 200.0;
}
