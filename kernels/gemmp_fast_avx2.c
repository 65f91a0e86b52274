/* gemmp_fast_avx2.c - the free-order prompt-processing GEMM of the default
 * AVX2 table (kernels/quant.h, "Exactness is a mode") for Q4_0 and Q8_0
 * weights and calls of two or more tokens: packed panels of 8 weight rows,
 * one row per 32-bit lane of a ymm register.
 *
 * For a chunk of a row (HR_GEMMP2_CHUNK elements) the panel is unpacked
 * once into a stack buffer: per 32-element block, 8 vectors of 32 bytes,
 * vector g holding elements 4g..4g+3 (u8) of each of the 8 rows, then the
 * 8 rows' scales. Every token of the call meets the panel: vpmaddubsw of a
 * weight vector with 4 activation bytes of one token broadcast, the 8
 * groups' int16 pair sums added in int16 (Q4_0: 8 x 15 x 127 x 2 fits),
 * one vpmaddwd to int32 and one convert and FMA per (8 rows, token,
 * block): a block's lanes are summed in integers, which is what makes this
 * order free, and about twice the work per instruction of the canonical
 * tiles (gemm-impl.h), which keep 8 float lanes per (row, token, block).
 *
 * Offsets: Q4_0 values are kept as 0..15 and the -8 enters as -8 * sum(y)
 * per (token, block); Q8_0 values as x + 128 would overflow the int16
 * pair sums, so Q8_0 keeps them signed and multiplies |x| by y signed as
 * x (vpsignb), each group's pair sums widened to int32 on their own. Results equal
 * vec_dot up to float summation order; test_gemm holds them to 2e-5 of the
 * sum of the products' magnitudes. Stack use: about 60 KiB. */
#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define HR_P2 static inline __attribute__((always_inline))
#define HR_UNROLL2 _Pragma("GCC unroll 8")

/* tokens per micro-kernel call (T int and T float accumulators in ymm) */
#define HR_GEMMP2_TT 4
/* elements of a row per packed chunk */
#define HR_GEMMP2_CHUNK 1024
/* tokens whose block sums are prepared at a time */
#define HR_GEMMP2_TG 128
#define KB2 (HR_GEMMP2_CHUNK / HR_QK4_0)
/* bytes of a packed panel per block: 8 groups, 8 scales */
#define PB2 (8 * 32 + 32)

HR_P2 __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The panel of rows [0, nr) (nr <= 8; missing rows repeat the last) for
 * blocks [b0, b0 + kn). */
static void pack2(bool q8, const uint8_t *w, size_t ws, int nr, int64_t b0, int kn, uint8_t *P) {
    const size_t xb = q8 ? sizeof(hr_block_q8_0) : sizeof(hr_block_q4_0);
    for (int b = 0; b < kn; b++) {
        uint8_t *o = P + (size_t)b * PB2;
        float *dx = (float *)(o + 256);
        for (int r = 0; r < 8; r++) {
            const uint8_t *blk = w + (size_t)(r < nr ? r : nr - 1) * ws + (size_t)(b0 + b) * xb;
            uint16_t d;
            memcpy(&d, blk, 2);
            dx[r] = _cvtsh_ss(d);
            uint8_t v[32];
            if (q8) {
                memcpy(v, blk + 2, 32);
            } else {
                for (int j = 0; j < 16; j++) {
                    v[j] = blk[2 + j] & 15;
                    v[16 + j] = blk[2 + j] >> 4;
                }
            }
            for (int g = 0; g < 8; g++)
                memcpy(o + 32 * g + 4 * r, v + 4 * g, 4);
        }
    }
}

/* Per token t and block b of the chunk: -8 * sum(y) (Q4_0; 0 for Q8_0)
 * and dy. */
static void aux2(bool q8, const uint8_t *a, size_t as, int tn, int64_t b0, int kn, int32_t *corr,
                 float *dy) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int t = 0; t < tn; t++) {
        const uint8_t *yr = a + (size_t)t * as + (size_t)b0 * sizeof(hr_block_q8_0);
        for (int b = 0; b < kn; b++) {
            const uint8_t *yb = yr + (size_t)b * sizeof(hr_block_q8_0);
            int sum = 0;
            if (!q8) { /* sum of (y + 128) per 8 bytes, less 32 * 128 */
                const __m256i s = _mm256_sad_epu8(
                    _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(yb + 2)), flip),
                    _mm256_setzero_si256());
                const __m128i h =
                    _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                sum = (int)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
            }
            uint16_t d;
            memcpy(&d, yb, 2);
            corr[t * KB2 + b] = -8 * sum;
            dy[t * KB2 + b] = _cvtsh_ss(d);
        }
    }
}

/* T tokens (activation rows a, a + as, ...; their aux at corr / dy) x the
 * panel over kn blocks from b0; y[t * ys + r] for the panel's nr rows. */
HR_P2 void micro2(const bool q8, const int T, const uint8_t *P, int kn, int64_t b0,
                  const uint8_t *a, size_t as, const int32_t *corr, const float *dy, float *y,
                  size_t ys, int nr, bool first) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 F[HR_GEMMP2_TT];
    HR_UNROLL2
    for (int t = 0; t < T; t++)
        F[t] = _mm256_setzero_ps();
    const uint8_t *ab = a + 2 + (size_t)b0 * sizeof(hr_block_q8_0);
    for (int b = 0; b < kn; b++) {
        const uint8_t *W = P + (size_t)b * PB2;
        const uint8_t *yb = ab + (size_t)b * sizeof(hr_block_q8_0);
        __m256i acc[HR_GEMMP2_TT];
        HR_UNROLL2
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_set1_epi32(corr[t * KB2 + b]);
        if (q8) { /* |x| . sign(y, x), each group to int32 (2 x 127^2 fills int16) */
            HR_UNROLL2
            for (int g = 0; g < 8; g++) {
                const __m256i wv = _mm256_load_si256((const __m256i *)(W + 32 * g));
                const __m256i u = _mm256_sign_epi8(wv, wv);
                HR_UNROLL2
                for (int t = 0; t < T; t++) {
                    const __m256i yv = bcast4(yb + (size_t)t * as + 4 * g);
                    const __m256i q = _mm256_maddubs_epi16(u, _mm256_sign_epi8(yv, wv));
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(q, ones));
                }
            }
        } else { /* 0..15 x y: all 8 groups' int16 pair sums fit int16 */
            __m256i p[HR_GEMMP2_TT];
            HR_UNROLL2
            for (int g = 0; g < 8; g++) {
                const __m256i wv = _mm256_load_si256((const __m256i *)(W + 32 * g));
                HR_UNROLL2
                for (int t = 0; t < T; t++) {
                    const __m256i q = _mm256_maddubs_epi16(wv, bcast4(yb + (size_t)t * as + 4 * g));
                    p[t] = g == 0 ? q : _mm256_add_epi16(p[t], q);
                }
            }
            HR_UNROLL2
            for (int t = 0; t < T; t++)
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p[t], ones));
        }
        const __m256 dx = _mm256_load_ps((const float *)(W + 256));
        HR_UNROLL2
        for (int t = 0; t < T; t++)
            F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]),
                                   _mm256_mul_ps(dx, _mm256_set1_ps(dy[t * KB2 + b])), F[t]);
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane);
    HR_UNROLL2
    for (int t = 0; t < T; t++) {
        float *yt = y + (size_t)t * ys;
        __m256 v = F[t];
        if (!first)
            v = _mm256_add_ps(v, _mm256_maskload_ps(yt, m));
        _mm256_maskstore_ps(yt, m, v);
    }
}

static void gemmp2(bool q8, int64_t n, int nr, int nt, const void *w, size_t ws, const void *a,
                   size_t as, float *y, size_t ys) {
    const int64_t nb = n / HR_QK4_0;
    const uint8_t *wb = w, *ab = a;
    _Alignas(32) uint8_t P[KB2 * PB2];
    _Alignas(32) int32_t corr[HR_GEMMP2_TG * KB2];
    _Alignas(32) float dy[HR_GEMMP2_TG * KB2];
    for (int64_t b0 = 0; b0 < nb; b0 += KB2) {
        const int kn = (int)(nb - b0 < KB2 ? nb - b0 : KB2);
        for (int tg = 0; tg < nt; tg += HR_GEMMP2_TG) {
            const int tn = nt - tg < HR_GEMMP2_TG ? nt - tg : HR_GEMMP2_TG;
            aux2(q8, ab + (size_t)tg * as, as, tn, b0, kn, corr, dy);
            for (int r0 = 0; r0 < nr; r0 += 8) {
                const int pn = nr - r0 < 8 ? nr - r0 : 8;
                pack2(q8, wb + (size_t)r0 * ws, ws, pn, b0, kn, P);
                for (int t0 = 0; t0 < tn; t0 += HR_GEMMP2_TT) {
                    const uint8_t *at = ab + (size_t)(tg + t0) * as;
                    float *yt = y + (size_t)(tg + t0) * ys + r0;
                    const int32_t *ct = corr + t0 * KB2;
                    const float *dt = dy + t0 * KB2;
                    switch (tn - t0 < HR_GEMMP2_TT ? tn - t0 : HR_GEMMP2_TT) {
#define P2_CALL(T)                                                                                 \
    case T:                                                                                        \
        if (q8)                                                                                    \
            micro2(true, T, P, kn, b0, at, as, ct, dt, yt, ys, pn, b0 == 0);                       \
        else                                                                                       \
            micro2(false, T, P, kn, b0, at, as, ct, dt, yt, ys, pn, b0 == 0);                      \
        break;
                        P2_CALL(1)
                        P2_CALL(2)
                        P2_CALL(3)
                        P2_CALL(4)
#undef P2_CALL
                    }
                }
            }
        }
    }
}

void hr_gemmp2f_q4_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys) {
    gemmp2(false, n, nr, nt, w, ws, a, as, y, ys);
}

void hr_gemmp2f_q8_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys) {
    gemmp2(true, n, nr, nt, w, ws, a, as, y, ys);
}
