/* test_gemm.c - the tile kernels (hr_kernels.gemm) of every ISA table this
 * CPU runs against the vec_dot reference of the same table and of the scalar
 * table, on random data, for full tiles and for edge tiles (row and token
 * counts that are not multiples of the tile), for every supported type of
 * the traits table: bit for bit (every table follows one float order,
 * kernels/canon-impl.h), and the default mode's free-order tables within
 * 2e-5 of the sum of the products' magnitudes; the multi-column decode
 * kernels (vec_dot_n) bit
 * for bit against the same table's vec_dot;
 * hr_matmul_runs against hr_matmul of each run alone, bit for bit. */
#include "tests/check.h"

#include "tests/tables.h"

#include "kernels/ops.h"
#include "kernels/pool.h"
#include "kernels/quant-impl.h"
#include "kernels/quant.h"
#include "kernels/types.h"

#include <stdint.h>
#include <string.h>

#include <sys/mman.h>
#include <unistd.h>

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static uint64_t rnd_u64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rnd_unit(void) { return (float)(rnd_u64() >> 40) / 16777216.0f; } /* [0,1) */

static float rnd_normal(void) {
    float s = 0.0f;
    for (int k = 0; k < 12; k++)
        s += rnd_unit();
    return s - 6.0f;
}

static void fill_floats(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = rnd_normal() * scale;
        if (rnd_u64() % 97 == 0)
            x[i] *= 8.0f;
    }
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static int g_fast_checks; /* shapes checked on a default-mode (free-order) table */

#define MAX_R 19
#define MAX_T 11

/* Weights: float rows quantized with the scalar weight quantizer (realistic
 * scales); activations: float rows in the vec_dot type. Each shape {nr, nt}
 * runs on the last nr of max_r rows and the last nt of max_t tokens. */
static void check_shapes(int type, int64_t n, int max_r, int max_t, const int (*shapes)[2],
                         size_t n_shapes) {
    const hr_kernels *ks = hr_kernels_for_isa(HR_ISA_SCALAR);
    const hr_type_traits *tt = hr_type_get(type);
    const int at = tt->vec_dot_type;
    const size_t wrb = hr_type_row_bytes(type, n), arb = hr_type_row_bytes(at, n);
    /* output with a row stride wider than max_r, guard values around */
    const size_t ys = (size_t)max_r + 13;
    float *xf = malloc(sizeof(float) * (size_t)n);
    uint8_t *w = malloc(wrb * (size_t)max_r), *a = malloc(arb * (size_t)max_t);
    float *ref = malloc(sizeof(float) * (size_t)max_r * (size_t)max_t);
    float *got = malloc(sizeof(float) * ys * (size_t)max_t);
    CHECK(xf && w && a && ref && got);
    for (int r = 0; r < max_r; r++) {
        fill_floats(xf, n, 0.02f + 0.01f * (float)(r % 5));
        ks->quant[type](xf, w + (size_t)r * wrb, n);
    }
    for (int t = 0; t < max_t; t++) {
        fill_floats(xf, n, 0.5f + 0.25f * (float)(t % 3));
        ks->quant[at](xf, a + (size_t)t * arb, n);
    }
    /* reference: scalar vec_dot, in doubles of magnitude for the tolerance */
    double mag = 0.0;
    for (int t = 0; t < max_t; t++)
        for (int r = 0; r < max_r; r++) {
            ref[t * max_r + r] = ks->vec_dot[type](n, w + (size_t)r * wrb, a + (size_t)t * arb);
            mag = fmax(mag, fabs(ref[t * max_r + r]));
        }
    /* dequantized operands: the free-order tables' bound is 2e-5 of the
     * sum of the products' magnitudes */
    float *wd = malloc(sizeof(float) * (size_t)n * (size_t)max_r);
    float *ad = malloc(sizeof(float) * (size_t)n * (size_t)max_t);
    CHECK(wd && ad);
    for (int r = 0; r < max_r; r++)
        ks->dequant[type](w + (size_t)r * wrb, wd + (size_t)r * n, n);
    for (int t = 0; t < max_t; t++)
        ks->dequant[at](a + (size_t)t * arb, ad + (size_t)t * n, n);
    for (int tab = 0; tab < 2 * HR_ISA_COUNT; tab++) {
        const hr_isa isa = (hr_isa)(tab % HR_ISA_COUNT);
        const bool fast = tab >= HR_ISA_COUNT; /* the default mode's table */
        const hr_kernels *k = fast ? hr_kernels_fast_for_isa(isa) : hr_kernels_for_isa(isa);
        if (!k || (fast && k->canonical))
            continue; /* none, or the same as the exact one */
        for (size_t s = 0; s < n_shapes; s++) {
            const int nr = shapes[s][0], nt = shapes[s][1];
            for (size_t i = 0; i < ys * (size_t)max_t; i++)
                got[i] = -12345.0f;
            /* an offset start row/token so tiles start unaligned */
            const int r0 = max_r - nr, t0 = max_t - nt;
            hr_gemm_tile(k, type, n, nr, nt, w + (size_t)r0 * wrb, wrb, a + (size_t)t0 * arb, arb,
                         got, ys);
            int bad = 0, guard = 0;
            double worst = 0.0;
            for (int t = 0; t < max_t; t++)
                for (int r = 0; r < (int)ys; r++) {
                    const float g = got[(size_t)t * ys + (size_t)r];
                    if (t >= nt || r >= nr) {
                        guard += g != -12345.0f;
                        continue;
                    }
                    /* the same table's vec_dot and the scalar one, bit
                     * for bit (the worst difference is printed on failure) */
                    const float kd =
                        k->vec_dot[type](n, w + (size_t)(r0 + r) * wrb, a + (size_t)(t0 + t) * arb);
                    const float sd = ref[(t0 + t) * max_r + r0 + r];
                    const double e = fmax(fabs((double)g - kd), fabs((double)g - sd));
                    worst = fmax(worst, e);
                    if (!k->canonical) { /* a free order: within the bound, never NaN */
                        double sabs = 0.0;
                        const float *wr = wd + (size_t)(r0 + r) * n,
                                    *ar = ad + (size_t)(t0 + t) * n;
                        for (int64_t i = 0; i < n; i++)
                            sabs += fabs((double)wr[i] * ar[i]);
                        bad += !(fabs((double)g - sd) <= 2e-5 * sabs + 1e-6);
                        continue;
                    }
                    bad += !(same_bits(g, kd) && same_bits(g, sd));
                }
            if (bad || guard)
                fprintf(stderr,
                        "%s%s %s %dx%d n=%lld: %d mismatches (worst %.3g of %.3g), %d guard\n",
                        hr_isa_name(k->isa), fast ? " (default mode)" : "", tt->name, nr, nt,
                        (long long)n, bad, worst, mag, guard);
            CHECK_EQ(bad, 0);
            CHECK_EQ(guard, 0);
            g_fast_checks += fast;
        }
    }
    free(wd);
    free(ad);
    free(xf);
    free(w);
    free(a);
    free(ref);
    free(got);
}

static void check_type(int type, int64_t n) {
    static const int shapes[][2] = {{4, 4}, {2, 4}, {8, 8}, {MAX_R, MAX_T}, {1, 1}, {3, 5},
                                    {5, 3}, {4, 1}, {1, 4}, {7, 2},         {0, 3}, {3, 0}};
    check_shapes(type, n, MAX_R, MAX_T, shapes, sizeof(shapes) / sizeof(shapes[0]));
}

/* Batches of many tokens (the packed-panel kernels of prompt processing
 * take over from HR_GEMMP_MIN_T tokens): row counts over and under whole
 * panels of 16, token counts that are not multiples of the micro-kernel,
 * one row, rows long enough for several packed chunks with a tail, more
 * than a pass of rows and a group of tokens. */
static void check_type_batch(int type, int64_t n) {
    static const int shapes[][2] = {{37, 45}, {1, 16},  {16, 17}, {33, 23}, {5, 40},
                                    {17, 31}, {32, 16}, {2, 33},  {36, 1},  {1, 15}};
    check_shapes(type, n, 37, 45, shapes, sizeof(shapes) / sizeof(shapes[0]));
    /* more rows than one pass of panels and more tokens than one group
     * whose accumulators are kept (gemmp_avx512.c) */
    static const int big[][2] = {{131, 133}, {129, 3}};
    check_shapes(type, n, 131, 133, big, sizeof(big) / sizeof(big[0]));
}

/* the tables specialise what they should: every VNNI/AVX2 table has tiles for
 * the hot types, the scalar table none (it is the reference) */
static void check_tables(void) {
    const hr_kernels *ks = hr_kernels_for_isa(HR_ISA_SCALAR);
    for (int i = 0; i < HR_TYPE_COUNT; i++)
        CHECK(ks->gemm[i] == NULL);
    const hr_kernels *k2 = hr_kernels_for_isa(HR_ISA_AVX2);
    if (k2) {
        const int hot[] = {HR_TYPE_Q4_0, HR_TYPE_Q8_0, HR_TYPE_Q4_K, HR_TYPE_Q5_K,
                           HR_TYPE_Q6_K, HR_TYPE_F16,  HR_TYPE_MXFP4};
        for (size_t i = 0; i < sizeof(hot) / sizeof(hot[0]); i++)
            CHECK(k2->gemm[hot[i]] != NULL);
        /* MXFP4: several columns per pass (tiles fall back to it) */
        CHECK(k2->vec_dot_n[HR_TYPE_MXFP4] != NULL);
    }
    /* the AVX-512 VNNI table decodes several Q4_0 columns in one pass */
    const hr_kernels *k5 = hr_kernels_for_isa(HR_ISA_AVX512);
    if (k5 && (hr_quant_avx512_flags() & HR_AVX512_VNNI)) {
        const int dn[] = {HR_TYPE_Q4_0, HR_TYPE_Q8_0, HR_TYPE_Q4_K, HR_TYPE_Q5_K, HR_TYPE_Q6_K};
        for (size_t i = 0; i < sizeof(dn) / sizeof(dn[0]); i++)
            CHECK(k5->vec_dot_n[dn[i]] != NULL && k5->dotn_one[dn[i]]);
    }
    /* the AVX2 table decodes float rows several at a time, also for one
     * column, and so does the AVX-512 table (F16 with 8 rows at once where
     * it has VNNI, the others with the AVX2 kernels) */
    if (k2) {
        const int fl[] = {HR_TYPE_F32, HR_TYPE_F16, HR_TYPE_BF16};
        for (size_t i = 0; i < sizeof(fl) / sizeof(fl[0]); i++) {
            CHECK(k2->vec_dot_n[fl[i]] != NULL && k2->dotn_one[fl[i]]);
            if (k5)
                CHECK(k5->vec_dot_n[fl[i]] != NULL && k5->dotn_one[fl[i]] &&
                      k5->vec_dot[fl[i]] == k2->vec_dot[fl[i]]);
        }
    }
    /* the i8mm table: tiles for every integer weight type */
    const hr_kernels *k8 = hr_kernels_for_isa(HR_ISA_I8MM);
    if (k8) {
        const int mm[] = {HR_TYPE_Q4_0, HR_TYPE_Q4_1, HR_TYPE_Q5_0, HR_TYPE_Q5_1,
                          HR_TYPE_Q8_0, HR_TYPE_Q4_K, HR_TYPE_Q5_K, HR_TYPE_Q6_K};
        for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++)
            CHECK(k8->gemm[mm[i]] != NULL);
    }
    /* every table can run every supported type (hr_gemm_tile falls back to
     * vec_dot, which needs activations in the vec_dot type) */
    for (int isa = HR_ISA_SCALAR; isa < HR_ISA_COUNT; isa++) {
        const hr_kernels *k = hr_kernels_for_isa((hr_isa)isa);
        for (int t = 0; k && t < HR_TYPE_COUNT; t++)
            if (hr_type_get(t) && hr_type_get(t)->supported)
                CHECK(k->vec_dot[t] && k->quant[hr_type_get(t)->vec_dot_type]);
    }
    /* every table follows the canonical float order (kernels/canon-impl.h) */
    for (int isa = HR_ISA_SCALAR; isa < HR_ISA_COUNT; isa++) {
        const hr_kernels *k = hr_kernels_for_isa((hr_isa)isa);
        if (k)
            CHECK(k->canonical);
    }
    /* unsupported type: does nothing */
    float y = 7.0f;
    hr_gemm_tile(ks, HR_TYPE_Q2_K, 256, 1, 1, NULL, 0, NULL, 0, &y, 1);
    CHECK_EQ(y, 7.0f);
}

/* Quantized test rows: nr weight rows of type, nt activation rows. */
static void make_rows(int type, int64_t n, int nr, int nt, uint8_t **w, uint8_t **a) {
    const hr_kernels *ks = hr_kernels_for_isa(HR_ISA_SCALAR);
    const int at = hr_type_get(type)->vec_dot_type;
    const size_t wrb = hr_type_row_bytes(type, n), arb = hr_type_row_bytes(at, n);
    float *xf = malloc(sizeof(float) * (size_t)n);
    *w = malloc(wrb * (size_t)nr);
    *a = malloc(arb * (size_t)nt);
    CHECK(xf && *w && *a);
    for (int r = 0; r < nr; r++) {
        fill_floats(xf, n, 0.02f + 0.01f * (float)(r % 5));
        ks->quant[type](xf, *w + (size_t)r * wrb, n);
    }
    for (int t = 0; t < nt; t++) {
        fill_floats(xf, n, 0.5f + 0.25f * (float)(t % 3));
        ks->quant[at](xf, *a + (size_t)t * arb, n);
    }
    free(xf);
}

/* Weights that end exactly where a mapping ends (the last tensor of a file
 * whose size is a page multiple): every table's tiles and multi-column
 * kernels read nothing past the last row (the page after it is
 * inaccessible), and give the scalar values. */
static void check_page_end(int type, int64_t n) {
    const int nr = 19, nt = 5;
    const size_t wrb = hr_type_row_bytes(type, n), bytes = wrb * (size_t)nr;
    const long pg = sysconf(_SC_PAGESIZE);
    const size_t span = (bytes + (size_t)pg - 1) / (size_t)pg * (size_t)pg;
    uint8_t *map =
        mmap(NULL, span + (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED)
        return;
    CHECK_EQ(mprotect(map + span, (size_t)pg, PROT_NONE), 0);
    uint8_t *w, *a;
    make_rows(type, n, nr, nt, &w, &a);
    uint8_t *wm = map + span - bytes; /* the rows end at the guard page */
    memcpy(wm, w, bytes);
    const size_t arb = hr_type_row_bytes(hr_type_get(type)->vec_dot_type, n);
    const hr_kernels *ks = hr_kernels_for_isa(HR_ISA_SCALAR);
    float ref[19 * 5], y[19 * 5];
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            ref[t * nr + r] = ks->vec_dot[type](n, wm + (size_t)r * wrb, a + (size_t)t * arb);
    for (int isa = HR_ISA_SCALAR; isa < HR_ISA_COUNT; isa++) {
        const hr_kernels *k = hr_kernels_for_isa((hr_isa)isa);
        if (!k)
            continue;
        hr_gemm_tile(k, type, n, nr, nt, wm, wrb, a, arb, y, (size_t)nr);
        int same = 0;
        for (int i = 0; i < nr * nt; i++)
            same += same_bits(y[i], ref[i]);
        CHECK_EQ(same, nr * nt);
        const void *cols[5];
        for (int t = 0; t < nt; t++)
            cols[t] = a + (size_t)t * arb;
        hr_vec_dot_n(k, type, n, nr, wm, wrb, cols, nt, y, (size_t)nr);
        same = 0;
        for (int i = 0; i < nr * nt; i++)
            same += same_bits(y[i], ref[i]);
        CHECK_EQ(same, nr * nt);
    }
    /* the default mode's free-order tiles read no further, and land close */
    double mag = 0.0;
    for (int i = 0; i < nr * nt; i++)
        mag = fmax(mag, fabs(ref[i]));
    for (int isa = HR_ISA_SCALAR; isa < HR_ISA_COUNT; isa++) {
        const hr_kernels *k = hr_kernels_fast_for_isa((hr_isa)isa);
        if (!k || k->canonical)
            continue;
        hr_gemm_tile(k, type, n, nr, nt, wm, wrb, a, arb, y, (size_t)nr);
        int close = 0;
        for (int i = 0; i < nr * nt; i++)
            close += fabs((double)y[i] - ref[i]) <= 1e-4 * mag + 1e-6;
        CHECK_EQ(close, nr * nt);
    }
    free(w);
    free(a);
    munmap(map, span + (size_t)pg);
}

/* hr_vec_dot_n of every table equals that table's vec_dot bit for bit, for
 * 1..HR_DOT_N_MAX columns (in scrambled order) and row counts around the
 * kernels' row pairs. */
static void check_dotn(int type, int64_t n) {
    const int at = hr_type_get(type)->vec_dot_type;
    const size_t wrb = hr_type_row_bytes(type, n), arb = hr_type_row_bytes(at, n);
    uint8_t *w, *a;
    make_rows(type, n, MAX_R, HR_DOT_N_MAX, &w, &a);
    float got[HR_DOT_N_MAX * 32];
    const int rows[] = {1, 2, 3, 5, 7, 16, MAX_R};
    for (int isa = HR_ISA_SCALAR; isa < HR_ISA_COUNT; isa++) {
        const hr_kernels *k = hr_kernels_for_isa((hr_isa)isa);
        if (!k)
            continue;
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (int nt = 1; nt <= HR_DOT_N_MAX; nt++) {
                const int nr = rows[ri];
                const void *ap[HR_DOT_N_MAX];
                for (int t = 0; t < nt; t++)
                    ap[t] = a + (size_t)((t * 5 + 3) % HR_DOT_N_MAX) * arb;
                for (int i = 0; i < HR_DOT_N_MAX * 32; i++)
                    got[i] = -12345.0f;
                hr_vec_dot_n(k, type, n, nr, w, wrb, ap, nt, got, 32);
                int bad = 0, guard = 0;
                for (int t = 0; t < HR_DOT_N_MAX; t++)
                    for (int r = 0; r < 32; r++) {
                        const float g = got[t * 32 + r];
                        if (t >= nt || r >= nr) {
                            guard += g != -12345.0f;
                            continue;
                        }
                        bad += !same_bits(g, k->vec_dot[type](n, w + (size_t)r * wrb, ap[t]));
                    }
                if (bad || guard)
                    fprintf(stderr,
                            "vec_dot_n %s %s %dx%d n=%lld: %d differ from vec_dot, %d guard\n",
                            hr_isa_name(k->isa), hr_type_get(type)->name, nr, nt, (long long)n, bad,
                            guard);
                CHECK_EQ(bad, 0);
                CHECK_EQ(guard, 0);
            }
    }
    free(w);
    free(a);
}

/* hr_vec_dot_n of the best table over more rows than a kernel keeps
 * accumulators for at once (nr rows, 8 columns), bit for bit. */
static void check_dotn_rows(int type, int64_t n, int nr) {
    const int at = hr_type_get(type)->vec_dot_type;
    const size_t wrb = hr_type_row_bytes(type, n), arb = hr_type_row_bytes(at, n);
    const hr_kernels *k = hr_kernels_best();
    uint8_t *w, *a;
    make_rows(type, n, nr, HR_DOT_N_MAX, &w, &a);
    float *got = malloc(sizeof(float) * (size_t)nr * HR_DOT_N_MAX);
    CHECK(got);
    const void *ap[HR_DOT_N_MAX];
    for (int t = 0; t < HR_DOT_N_MAX; t++)
        ap[t] = a + (size_t)t * arb;
    hr_vec_dot_n(k, type, n, nr, w, wrb, ap, HR_DOT_N_MAX, got, (size_t)nr);
    int bad = 0;
    for (int t = 0; t < HR_DOT_N_MAX; t++)
        for (int r = 0; r < nr; r++)
            bad += !same_bits(got[(size_t)t * nr + r],
                              k->vec_dot[type](n, w + (size_t)r * wrb, ap[t]));
    CHECK_EQ(bad, 0);
    free(got);
    free(w);
    free(a);
}

/* hr_matmul_runs over mixed runs (decode rows and prefill runs, in any
 * order) equals hr_matmul of each run alone, bit for bit, on 1 and 2
 * threads. */
static void check_matmul_runs(int type, int64_t n) {
    enum { NO = 37, NT = 23 };
    const int runs[] = {1, 3, 1, 1, 5, 1, 2, 1, 1, 1, 1, 1, 4};
    const int n_runs = (int)(sizeof runs / sizeof runs[0]);
    float *x = malloc(sizeof(float) * (size_t)n * NT);
    uint8_t *wd, *unused;
    make_rows(type, n, NO, 1, &wd, &unused);
    float *y = malloc(sizeof(float) * NO * NT), *ref = malloc(sizeof(float) * NO * NT);
    size_t wb = hr_matmul_wbuf_size(type, n, NT);
    void *wbuf = malloc(wb ? wb : 64);
    CHECK(x && y && ref && wbuf);
    fill_floats(x, n * NT, 0.7f);
    hr_weight w = {
        .type = type, .n_in = n, .n_out = NO, .row_bytes = hr_type_row_bytes(type, n), .data = wd};
    const hr_weight *wp = &w;
    for (int nth = 1; nth <= 2; nth++) {
        hr_pool *pool = hr_pool_create(nth);
        CHECK(pool);
        int t0 = 0;
        for (int ri = 0; ri < n_runs; ri++) {
            float *yr = ref + (size_t)t0 * NO;
            hr_matmul(pool, 1, &wp, &yr, x + (size_t)t0 * n, runs[ri], wbuf);
            t0 += runs[ri];
        }
        CHECK_EQ(t0, NT);
        { /* a single-token hr_matmul equals the best table's vec_dot per row */
            const hr_kernels *k = hr_kernels_best();
            const int at = hr_type_get(type)->vec_dot_type;
            const void *act = x;
            if (at != HR_TYPE_F32) {
                k->quant[at](x, wbuf, n);
                act = wbuf;
            }
            int bad1 = 0;
            for (int r = 0; r < NO; r++)
                bad1 += !same_bits(ref[r], k->vec_dot[type](n, wd + (size_t)r * w.row_bytes, act));
            CHECK_EQ(bad1, 0);
        }
        hr_matmul_runs(pool, 1, &wp, &y, x, NT, runs, n_runs, wbuf);
        int bad = 0;
        for (int i = 0; i < NO * NT; i++)
            bad += !same_bits(y[i], ref[i]);
        if (bad)
            fprintf(stderr, "matmul_runs %s n=%lld %d threads: %d values differ\n",
                    hr_type_get(type)->name, (long long)n, nth, bad);
        CHECK_EQ(bad, 0);
        hr_pool_destroy(pool);
    }
    free(x);
    free(y);
    free(ref);
    free(wbuf);
    free(wd);
    free(unused);
}

int main(void) {
    check_tables();
    int n_types = 0;
    for (int type = 0; type < HR_TYPE_COUNT; type++) {
        if (!hr_type_get(type) || !hr_type_get(type)->supported)
            continue;
        n_types++;
        const int64_t be = hr_type_get(type)->block_elems;
        const int64_t base = be == 1 ? 32 : be;
        check_type(type, base * (be == 256 ? 3 : 9)); /* short rows, odd block counts */
        check_type(type, 2048);
        check_dotn(type, base * (be == 256 ? 3 : 9));
        check_dotn(type, 2048);
        if (type == HR_TYPE_Q4_0 || type == HR_TYPE_Q8_0) { /* rows over several chunks of
                                                                prepared columns, with tails */
            check_dotn(type, 32 * (4 * 37 + 3));
            check_dotn_rows(type, 32 * (4 * 37 + 3), 71);
        }
        check_matmul_runs(type, 2048);
        check_page_end(type, base * (be == 256 ? 2 : 8));
        check_type_batch(type, be == 256 ? 256 * 5 : be == 1 ? 96 : 32 * (32 + 5));
        if (be != 1)
            check_type_batch(type, be);
        if (be == 1) {
            check_type(type, 2048 + 5); /* float tails */
            check_dotn(type, 2048 + 5);
            check_dotn(type, 13); /* shorter than f32's 16 lanes */
            check_dotn(type, 5);  /* shorter than 8 */
            check_dotn_rows(type, 2048 + 5, 71);
            check_matmul_runs(type, 2048 + 5);
        }
    }
    CHECK(n_types > 0);
    /* a default-mode table that differs from its exact one was checked */
    bool have_fast = false;
    for (int isa = 0; isa < HR_ISA_COUNT; isa++)
        have_fast = have_fast || (hr_kernels_fast_for_isa((hr_isa)isa) &&
                                  !hr_kernels_fast_for_isa((hr_isa)isa)->canonical);
    printf("default-mode (free-order) tables: %s; %d shapes checked on them\n",
           have_fast ? "yes" : "none on this CPU", g_fast_checks);
    CHECK(!have_fast || g_fast_checks > 0);
    hr_skip_unrunnable_tables("gemm kernels");
    return hr_check_finish("gemm");
}
