/* bench_gemm.c - prompt-processing tile throughput (hr_gemm_tile) per
 * weight type on the best kernel table, in multiply-adds per second of one
 * thread's CPU time (best of several passes, so a busy machine shows less).
 * Not a CTest test; build by hand against the library:
 *
 *   cmake --build build --target hr_kernels
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I. tests/bench_gemm.c build/libhr_kernels.a \
 *       build/libhr_types.a build/libhr_common.a -lm -lpthread -o bench_gemm
 *
 *   bench_gemm [n_tok]    a 2048 x 2048 matrix times n_tok (default 256)
 *                         activation rows, 128 rows per call, next to the
 *                         same work in calls of 15 tokens */
#include "kernels/quant.h"
#include "kernels/types.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NIN 2048
#define NOUT 2048

static uint64_t g_rng = 88172645463325252ull;

static float rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)(g_rng >> 40) / 16777216.0f - 0.5f;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* best seconds of one pass over the matrix, tokens in calls of tstep */
static double time_pass(const hr_kernels *k, int type, const char *w, size_t wrb, const char *a,
                        size_t arb, float *y, int nt, int tstep) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double c0 = cpu_s();
        for (int r = 0; r < NOUT; r += 128)
            for (int t = 0; t < nt; t += tstep)
                hr_gemm_tile(k, type, NIN, 128, nt - t < tstep ? nt - t : tstep,
                             w + (size_t)r * wrb, wrb, a + (size_t)t * arb, arb,
                             y + (size_t)t * NOUT + r, NOUT);
        double c = cpu_s() - c0;
        best = c < best ? c : best;
    }
    return best;
}

int main(int argc, char **argv) {
    const int nt = argc > 1 ? atoi(argv[1]) : 256;
    const hr_kernels *k = hr_kernels_best();
    const int types[] = {HR_TYPE_Q4_0, HR_TYPE_Q4_K, HR_TYPE_Q6_K, HR_TYPE_Q8_0};
    float *xf = malloc(sizeof(float) * NIN);
    float *y = malloc(sizeof(float) * (size_t)nt * NOUT);
    printf("table %s, %d x %d weights, %d tokens, one thread\n", hr_isa_name(k->isa), NOUT, NIN,
           nt);
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        const int type = types[i], at = hr_type_get(type)->vec_dot_type;
        const size_t wrb = hr_type_row_bytes(type, NIN), arb = hr_type_row_bytes(at, NIN);
        char *w = malloc(wrb * NOUT), *a = malloc(arb * (size_t)nt);
        for (int r = 0; r < NOUT; r++) {
            for (int j = 0; j < NIN; j++)
                xf[j] = rnd() * 0.1f;
            k->quant[type](xf, w + (size_t)r * wrb, NIN);
        }
        for (int t = 0; t < nt; t++) {
            for (int j = 0; j < NIN; j++)
                xf[j] = rnd();
            k->quant[at](xf, a + (size_t)t * arb, NIN);
        }
        const double macs = (double)NIN * NOUT * nt;
        const double tb = time_pass(k, type, w, wrb, a, arb, y, nt, nt);
        const double ts = time_pass(k, type, w, wrb, a, arb, y, nt, 15);
        printf("%-5s one call per 128 rows: %6.1f GMAC/s   calls of 15 tokens: %6.1f GMAC/s\n",
               hr_type_name(type), macs / tb * 1e-9, macs / ts * 1e-9);
        free(w);
        free(a);
    }
    free(xf);
    free(y);
    return 0;
}
