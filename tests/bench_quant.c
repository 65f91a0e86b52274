/* bench_quant.c - throughput of the vec_dot kernels, in GB/s of weight bytes,
 * per weight type and ISA table. Not a CTest test; build by hand against the
 * library (only the quant and common objects get pulled in):
 *
 *   cmake --build build
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I. tests/bench_quant.c build/libhr_kernels.a \
 *       build/libhr_types.a build/libhr_common.a -lnuma -lhwloc -lm -lpthread -o bench_quant
 *
 *   bench_quant [type]     matrix x vector, n = 4096, ~512 KiB of weights (L2
 *                          resident): compute headroom per byte, per table
 *                          (best single pass, robust to a busy machine)
 *   bench_quant --mem [T [type]]
 *                          ~256 MiB of weights streamed from DRAM by 1..T
 *                          threads with the best table (vec_dot per row, and
 *                          the vec_dot_n path single-token decode takes where
 *                          the table has one), next to a plain read-bandwidth
 *                          baseline
 *   bench_quant --gemm [T [type]]
 *                          prompt GEMM: 128 rows x T tokens (default 64), n =
 *                          2048, one thread, GMAC/s of thread CPU time (best
 *                          of 200 calls, so other programs on the core cost
 *                          little), every table in the default (free order)
 *                          and exact modes; HR_NO_AVXVNNI=1 for the plain
 *                          AVX2 panels on a CPU with AVX-VNNI */
#include "kernels/quant-impl.h"
#include "kernels/quant.h"
#include "kernels/types.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* The supported weight types of the traits table, in id order. */
static int weight_types(int out[HR_TYPE_COUNT]) {
    int n = 0;
    for (int t = 0; t < HR_TYPE_COUNT; t++)
        if (hr_type_get(t) && hr_type_get(t)->supported)
            out[n++] = t;
    return n;
}

typedef struct {
    const char *name;
    const hr_kernels *k;
} table_ref;

static int tables(table_ref *t) {
    int n = 0;
    t[n++] = (table_ref){"scalar", hr_kernels_for_isa(HR_ISA_SCALAR)};
    const hr_kernels *a2 = hr_kernels_for_isa(HR_ISA_AVX2);
    if (a2)
        t[n++] = (table_ref){"avx2", a2};
    for (int isa = HR_ISA_NEON; isa < HR_ISA_COUNT; isa++)
        if (hr_kernels_for_isa((hr_isa)isa))
            t[n++] = (table_ref){hr_isa_name((hr_isa)isa), hr_kernels_for_isa((hr_isa)isa)};
    if (hr_kernels_for_isa(HR_ISA_AVX512))
        t[n++] = (table_ref){"avx512", hr_kernels_for_isa(HR_ISA_AVX512)};
    return n;
}

/* fills rows x n weights of type ty: quantizes one chunk, repeats it */
static void *make_weights(int ty, int64_t n, int64_t rows, size_t *bytes) {
    const hr_kernels *s = hr_kernels_for_isa(HR_ISA_SCALAR);
    const size_t rb = hr_type_row_bytes(ty, n);
    *bytes = rb * (size_t)rows;
    uint8_t *w = aligned_alloc(64, (*bytes + 63) / 64 * 64);
    const int64_t chunk_rows = rows < 64 ? rows : 64;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t r = 0; r < chunk_rows; r++) {
        for (int64_t i = 0; i < n; i++)
            x[i] = rnd() * 0.1f;
        s->quant[ty](x, w + rb * (size_t)r, n);
    }
    for (int64_t r = chunk_rows; r < rows; r += chunk_rows) {
        const int64_t c = rows - r < chunk_rows ? rows - r : chunk_rows;
        memcpy(w + rb * (size_t)r, w, rb * (size_t)c);
    }
    free(x);
    return w;
}

static void *make_act(int ty, int64_t n) {
    const int aty = hr_type_get(ty)->vec_dot_type;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd();
    void *a = aligned_alloc(64, (hr_type_row_bytes(aty, n) + 63) / 64 * 64);
    hr_kernels_for_isa(HR_ISA_SCALAR)->quant[aty](x, a, n);
    free(x);
    return a;
}

typedef struct {
    const hr_kernels *k;
    int type;
    const uint8_t *w;
    const void *a;
    size_t row_bytes;
    int64_t n, r0, r1;
    int passes;
    int dotn; /* 1: hr_vec_dot_n, one column, 64-row tiles (single-token decode) */
    float *out;
} job;

static void *run_job(void *p) {
    job *j = p;
    const hr_vec_dot_fn fn = j->k->vec_dot[j->type];
    if (j->dotn) {
        const void *a[1] = {j->a};
        for (int it = 0; it < j->passes; it++)
            for (int64_t r = j->r0; r < j->r1; r += 64) {
                const int nr = (int)(j->r1 - r < 64 ? j->r1 - r : 64);
                hr_vec_dot_n(j->k, j->type, j->n, nr, j->w + j->row_bytes * (size_t)r, j->row_bytes,
                             a, 1, j->out + r, 1);
            }
        return NULL;
    }
    for (int it = 0; it < j->passes; it++)
        for (int64_t r = j->r0; r < j->r1; r++)
            j->out[r] = fn(j->n, j->w + j->row_bytes * (size_t)r, j->a);
    return NULL;
}

/* GB/s of weight bytes for `passes` matvecs split over nth threads */
static int g_dotn; /* matvec_gbs runs hr_vec_dot_n (one column) instead of vec_dot */

static double matvec_gbs(const hr_kernels *k, int ty, const void *w, const void *a, size_t rb,
                         int64_t n, int64_t nrows, int passes, int nth, float *out) {
    pthread_t th[16];
    job jobs[16];
    for (int t = 0; t < nth; t++)
        jobs[t] =
            (job){k, ty, w, a, rb, n, nrows * t / nth, nrows * (t + 1) / nth, passes, g_dotn, out};
    const double t0 = now_s();
    for (int t = 1; t < nth; t++)
        pthread_create(&th[t], NULL, run_job, &jobs[t]);
    run_job(&jobs[0]);
    for (int t = 1; t < nth; t++)
        pthread_join(th[t], NULL);
    const double dt = now_s() - t0;
    return (double)rb * (double)nrows * passes / dt / 1e9;
}

static void bench_l2(const char *only) {
    table_ref t[6];
    const int nt = tables(t);
    const int64_t n = 4096;
    printf("vec_dot, n=%lld, ~512 KiB of weights (L2-resident), 1 thread, GB/s of weight bytes "
           "(best pass)\n",
           (long long)n);
    printf("%-6s %9s", "type", "KiB");
    for (int k = 0; k < nt; k++)
        printf(" %14s", t[k].name);
    printf("\n");
    int types[HR_TYPE_COUNT];
    const int n_types = weight_types(types);
    for (int ti = 0; ti < n_types; ti++) {
        const int ty = types[ti];
        if (only && strcmp(only, hr_type_name(ty)) != 0)
            continue;
        const size_t rb = hr_type_row_bytes(ty, n);
        const int64_t rows = (int64_t)((512u << 10) / rb) > 0 ? (int64_t)((512u << 10) / rb) : 1;
        size_t bytes;
        void *w = make_weights(ty, n, rows, &bytes);
        void *a = make_act(ty, n);
        float *out = malloc((size_t)rows * sizeof(float));
        for (g_dotn = 0; g_dotn < 2; g_dotn++) {
            int any = 0;
            for (int k = 0; k < nt; k++)
                any |= t[k].k->vec_dot_n[ty] != NULL && t[k].k->dotn_one[ty];
            if (g_dotn && !any)
                break;
            if (g_dotn) /* what single-token decode runs: hr_vec_dot_n over 64-row tiles */
                printf("%-6s %9s", " rows", "");
            else
                printf("%-6s %9.0f", hr_type_name(ty), (double)bytes / 1024);
            for (int k = 0; k < nt; k++) {
                const hr_kernels *kt = t[k].k;
                /* best single pass out of many short ones: robust to preemption
                 * by other jobs on a shared machine */
                matvec_gbs(kt, ty, w, a, rb, n, rows, 3, 1, out); /* warm caches */
                double best = 0;
                const double t_end = now_s() + 0.8;
                for (int r = 0; r < 100000 && (r < 50 || now_s() < t_end); r++) {
                    const double g = matvec_gbs(kt, ty, w, a, rb, n, rows, 1, 1, out);
                    best = g > best ? g : best;
                }
                printf(" %14.2f", best);
                fflush(stdout);
            }
            printf("\n");
        }
        free(w);
        free(a);
        free(out);
    }
}

/* plain streaming read: sum of 64-bit words */
typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} read_job;

/* 32-byte loads into 4 accumulators: close to what a core can stream */
__attribute__((target("avx2"))) static void *read_words(void *arg) {
    read_job *j = arg;
    const __m256i *p = (const __m256i *)(const void *)j->p;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 16 <= j->n; i += 16, p += 4) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256(p));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256(p + 1));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256(p + 2));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256(p + 3));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)(void *)v, s);
    j->sum = v[0] + v[1] + v[2] + v[3];
    return NULL;
}

static double read_gbs(const void *buf, size_t bytes, int nth) {
    pthread_t th[16];
    read_job jobs[16];
    const size_t words = bytes / 8;
    for (int t = 0; t < nth; t++)
        jobs[t] = (read_job){(const uint64_t *)buf + words / nth * t, words / nth, 0};
    const double t0 = now_s();
    for (int t = 1; t < nth; t++)
        pthread_create(&th[t], NULL, read_words, &jobs[t]);
    read_words(&jobs[0]);
    for (int t = 1; t < nth; t++)
        pthread_join(th[t], NULL);
    const double dt = now_s() - t0;
    volatile uint64_t sink = 0;
    for (int t = 0; t < nth; t++)
        sink += jobs[t].sum;
    (void)sink;
    return (double)bytes / dt / 1e9;
}

static void bench_mem(int max_threads, const char *only) {
    const hr_kernels *best = hr_kernels_best();
    const int64_t n = 4096;
    const size_t target = (size_t)256 << 20;
    printf("DRAM: ~256 MiB of weights per type, n=%lld, best table (%s), GB/s of weight bytes\n",
           (long long)n, hr_isa_name(best->isa));
    if (hr_kernels_for_isa(HR_ISA_AVX2)) {
        uint8_t *buf = aligned_alloc(64, target);
        memset(buf, 1, target);
        printf("%-6s", "read");
        for (int th = 1; th <= max_threads; th++) {
            double g = 0;
            for (int r = 0; r < 3; r++) {
                const double v = read_gbs(buf, target, th);
                g = v > g ? v : g;
            }
            printf("   %dT %7.2f", th, g);
        }
        printf("   (AVX2 read loop)\n");
        free(buf);
    }
    int types[HR_TYPE_COUNT];
    const int n_types = weight_types(types);
    for (int ti = 0; ti < n_types; ti++) {
        const int ty = types[ti];
        if (only && strcmp(only, hr_type_name(ty)) != 0)
            continue;
        const size_t rb = hr_type_row_bytes(ty, n);
        const int64_t rows = (int64_t)(target / rb);
        size_t bytes;
        void *w = make_weights(ty, n, rows, &bytes);
        void *a = make_act(ty, n);
        float *out = malloc((size_t)rows * sizeof(float));
        /* vec_dot per row, then (where the table decodes one column by
         * vec_dot_n) what single-token decode runs */
        for (g_dotn = 0; g_dotn < 2; g_dotn++) {
            if (g_dotn && !(best->vec_dot_n[ty] && best->dotn_one[ty]))
                break;
            printf("%-6s", g_dotn ? " rows" : hr_type_name(ty));
            for (int th = 1; th <= max_threads; th++) {
                double g = 0;
                for (int r = 0; r < 3; r++) {
                    const double v = matvec_gbs(best, ty, w, a, rb, n, rows, 1, th, out);
                    g = v > g ? v : g;
                }
                printf("   %dT %7.2f", th, g);
                fflush(stdout);
            }
            printf("\n");
        }
        g_dotn = 0;
        free(w);
        free(a);
        free(out);
    }
}

static double thread_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench_gemm(int nt, const char *only) {
    const int64_t n = 2048;
    const int nr = 128;
    int types[HR_TYPE_COUNT];
    const int nty = weight_types(types);
    table_ref tabs[HR_ISA_COUNT];
    const int ntab = tables(tabs);
    printf("prompt GEMM, %d rows x %d tokens, n=%lld, 1 thread, GMAC/s of thread CPU time "
           "(best of 200)\n%-8s",
           nr, nt, (long long)n, "type");
    for (int i = 1; i < ntab; i++)
        printf(" %8s %8s", tabs[i].name, "exact");
    printf("\n");
    float *y = malloc(sizeof(float) * (size_t)nr * (size_t)nt);
    for (int ti = 0; ti < nty; ti++) {
        const int ty = types[ti];
        if (only && strcmp(only, hr_type_get(ty)->name) != 0)
            continue;
        size_t wb;
        uint8_t *w = make_weights(ty, n, nr, &wb);
        const int aty = hr_type_get(ty)->vec_dot_type;
        const size_t arb = hr_type_row_bytes(aty, n);
        uint8_t *a = malloc(arb * (size_t)nt);
        for (int t = 0; t < nt; t++) {
            void *at = make_act(ty, n);
            memcpy(a + arb * (size_t)t, at, arb);
            free(at);
        }
        printf("%-8s", hr_type_get(ty)->name);
        for (int i = 1; i < ntab; i++)
            for (int exact = 0; exact < 2; exact++) {
                const hr_isa isa = tabs[i].k->isa;
                const hr_kernels *k =
                    exact ? hr_kernels_for_isa(isa) : hr_kernels_fast_for_isa(isa);
                double best = 1e30;
                for (int rep = 0; rep < 200; rep++) {
                    const double t0 = thread_s();
                    hr_gemm_tile(k, ty, n, nr, nt, w, wb / (size_t)nr, a, arb, y, (size_t)nr);
                    const double d = thread_s() - t0;
                    best = d < best ? d : best;
                }
                printf(" %8.1f", (double)n * nr * nt / (best > 0 ? best : 1e-9) / 1e9);
            }
        printf("\n");
        free(w);
        free(a);
    }
    free(y);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--gemm") == 0) {
        int nt = argc > 2 ? atoi(argv[2]) : 64;
        bench_gemm(nt < 1 ? 1 : nt > 512 ? 512 : nt, argc > 3 ? argv[3] : NULL);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--mem") == 0) {
        int th = argc > 2 ? atoi(argv[2]) : 2;
        bench_mem(th < 1 ? 1 : th > 16 ? 16 : th, argc > 3 ? argv[3] : NULL);
    } else {
        bench_l2(argc > 1 ? argv[1] : NULL);
    }
    return 0;
}
