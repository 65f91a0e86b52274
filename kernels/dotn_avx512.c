/* dotn_avx512.c - decode of several sequences at once on AVX-512 VNNI
 * (hr_vec_dot_n_fn): each weight row is unpacked once for up to
 * HR_DOT_N_MAX activation columns, and every (row, column) value is
 * bit-identical to the 512-bit VNNI vec_dot of quant_avx512.c, which the
 * same table uses for single-sequence decode.
 *
 * Bit-identity: the integer block sums are exact however they are formed
 * (here the -8 offset, a property of the column alone, seeds vpdpbusd once
 * per column for two rows); the float operations per (row, column) are
 * vec_dot's, in its order: per pair of blocks one FMA of the converted sums
 * by dx*dy (by dx*dy/16 in the lanes of the in-place high nibbles) into one
 * of two accumulators (blocks 4i, 4i+1 into acc0, 4i+2, 4i+3 into acc1),
 * the same 16-lane reduction, then the tail blocks one at a time.
 * The lane scales are (dx*hs) * dy where vec_dot has (dx*dy) * hs, with hs
 * 1 or 1/16: a power-of-two factor commutes with rounding while nothing is
 * subnormal, and |dx*dy| >= 2^-48 for fp16 scales, far above fp32's 2^-126.
 * test_gemm compares every entry with vec_dot bit for bit. */
#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <string.h>

#define HR_DI static inline __attribute__((always_inline))
#define HR_UNROLL _Pragma("GCC unroll 8")

/* columns per pass over a pair of rows (accumulators: 2 x 4 x 2 zmm) */
#define HR_DN_T 4

HR_DI __m128 dn_halves4(const uint8_t *p, size_t stride) {
    uint64_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint16_t h;
        memcpy(&h, p + (size_t)k * stride, 2);
        v |= (uint64_t)h << (16 * k);
    }
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

HR_DI float dn_hsum128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One block by vec_dot's tail rule (q4_0_one): the 8 lane sums folded to 4
 * as integers, reduced as floats, times dx*dy. */
HR_DI float dn_q4_0_one(const hr_block_q4_0 *x, const hr_block_q8_0 *y) {
    const __m128i t = _mm_loadu_si128((const __m128i *)x->qs);
    const __m256i u = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1),
        _mm256_set1_epi8(0x0f));
    const __m256i s = _mm256_loadu_si256((const __m256i *)y->qs);
    const __m256i z = _mm256_setzero_si256();
    const __m256i v = _mm256_sub_epi32(_mm256_dpbusd_epi32(z, u, s),
                                       _mm256_dpbusd_epi32(z, _mm256_set1_epi8(8), s));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return dn_hsum128(_mm_cvtepi32_ps(h)) * (_cvtsh_ss(x->d) * _cvtsh_ss(y->d));
}

/* Rows [0, R) (R = 1 or 2) x columns [0, T) of Q4_0 x Q8_0. */
HR_DI void dn_q4_0_tile(int64_t n, const int R, const int T, const uint8_t *w, size_t ws,
                        const void *const *a, float *y, size_t ys) {
    const int64_t nb = n / HR_QK4_0;
    const long long f0 = (long long)0xf0f0f0f0f0f0f0f0ull, f = 0x0f0f0f0f0f0f0f0fll;
    const long long e0 = (long long)0x8080808080808080ull, e = 0x0808080808080808ll;
    const __m512i lohi = _mm512_set_epi64(f0, f0, f, f, f0, f0, f, f);
    const __m512i off = _mm512_set_epi64(e0, e0, e, e, e0, e0, e, e);
    const __m512i lo2 = _mm512_set_epi32(5, 5, 5, 5, 1, 1, 1, 1, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i hi2 = _mm512_set_epi32(7, 7, 7, 7, 3, 3, 3, 3, 6, 6, 6, 6, 2, 2, 2, 2);
    const __m512i ylo = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i yhi = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    const __m128 hs = _mm_set1_ps(1.0f / 16.0f);
    const __m512i z = _mm512_setzero_si512();
    const size_t xb = sizeof(hr_block_q4_0), yb = sizeof(hr_block_q8_0);
    __m512 acc0[2][HR_DN_T], acc1[2][HR_DN_T];
    HR_UNROLL
    for (int r = 0; r < R; r++)
        HR_UNROLL
    for (int t = 0; t < T; t++)
        acc0[r][t] = acc1[r][t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        __m512i u01[2], u23[2];
        __m512 px_lo[2], px_hi[2];
        HR_UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t *xr = w + (size_t)r * ws + (size_t)i * xb;
            const __m128 dx = dn_halves4(xr, xb);
            const __m512 d8 = _mm512_castps256_ps512(_mm256_set_m128(_mm_mul_ps(dx, hs), dx));
            px_lo[r] = _mm512_permutexvar_ps(lo2, d8);
            px_hi[r] = _mm512_permutexvar_ps(hi2, d8);
            const __m512i q01 = _mm512_mask_broadcast_i32x4(
                _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xr + 2))), 0xff00,
                _mm_loadu_si128((const __m128i *)(xr + xb + 2)));
            const __m512i q23 = _mm512_mask_broadcast_i32x4(
                _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xr + 2 * xb + 2))), 0xff00,
                _mm_loadu_si128((const __m128i *)(xr + 3 * xb + 2)));
            u01[r] = _mm512_and_si512(q01, lohi);
            u23[r] = _mm512_and_si512(q23, lohi);
        }
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            const uint8_t *yr = (const uint8_t *)a[t] + (size_t)i * yb;
            const __m512 dy = _mm512_castps128_ps512(dn_halves4(yr, yb));
            const __m512 py_lo = _mm512_permutexvar_ps(ylo, dy);
            const __m512 py_hi = _mm512_permutexvar_ps(yhi, dy);
            const __m512i s01 = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(yr + 2))),
                _mm256_loadu_si256((const __m256i *)(yr + yb + 2)), 1);
            const __m512i s23 = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(yr + 2 * yb + 2))),
                _mm256_loadu_si256((const __m256i *)(yr + 3 * yb + 2)), 1);
            const __m512i n01 = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, off, s01));
            const __m512i n23 = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, off, s23));
            HR_UNROLL
            for (int r = 0; r < R; r++) {
                const __m512i i01 = _mm512_dpbusd_epi32(n01, u01[r], s01);
                const __m512i i23 = _mm512_dpbusd_epi32(n23, u23[r], s23);
                acc0[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(px_lo[r], py_lo),
                                             _mm512_cvtepi32_ps(i01), acc0[r][t]);
                acc1[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(px_hi[r], py_hi),
                                             _mm512_cvtepi32_ps(i23), acc1[r][t]);
            }
        }
    }
    HR_UNROLL
    for (int r = 0; r < R; r++) {
        const hr_block_q4_0 *xr = (const hr_block_q4_0 *)(w + (size_t)r * ws);
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            const hr_block_q8_0 *yt = a[t];
            float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r][t], acc1[r][t]));
            for (int64_t k = i; k < nb; k++)
                sum += dn_q4_0_one(xr + k, yt + k);
            y[(size_t)t * ys + (size_t)r] = sum;
        }
    }
}

/* Columns in passes of up to HR_DN_T. */
HR_DI void dn_q4_0_rows(int64_t n, const int R, const uint8_t *w, size_t ws, const void *const *a,
                        int nt, float *y, size_t ys) {
    for (int t0 = 0; t0 < nt; t0 += HR_DN_T) {
        const int T = nt - t0 < HR_DN_T ? nt - t0 : HR_DN_T;
        const void *const *at = a + t0;
        float *yt = y + (size_t)t0 * ys;
        switch (T) {
        case 1:
            dn_q4_0_tile(n, R, 1, w, ws, at, yt, ys);
            break;
        case 2:
            dn_q4_0_tile(n, R, 2, w, ws, at, yt, ys);
            break;
        case 3:
            dn_q4_0_tile(n, R, 3, w, ws, at, yt, ys);
            break;
        default:
            dn_q4_0_tile(n, R, 4, w, ws, at, yt, ys);
            break;
        }
    }
}

/* Rows in pairs, then the last one. */
static void dotn_q4_0_vnni(int64_t n, int nr, const void *w, size_t ws, const void *const *a,
                           int nt, float *y, size_t ys) {
    const uint8_t *wb = w;
    int r = 0;
    for (; r + 2 <= nr; r += 2)
        dn_q4_0_rows(n, 2, wb + (size_t)r * ws, ws, a, nt, y + r, ys);
    if (r < nr)
        dn_q4_0_rows(n, 1, wb + (size_t)r * ws, ws, a, nt, y + r, ys);
}

void hr_dotn_fill_avx512(hr_kernels *k, unsigned flags) {
    /* only where the table's vec_dot is the 512-bit VNNI one */
    if ((flags & HR_AVX512_VNNI) && !(flags & HR_AVX512_PREFER_YMM))
        k->vec_dot_n[HR_TYPE_Q4_0] = dotn_q4_0_vnni;
}
