/* vexp_avx2.c - expf over arrays on AVX2 + FMA, the steps of
 * vexp_avx512.c (glibc's algorithm, the same bits as the library's expf)
 * on 4 doubles per vector, the table entry fetched by a gather. */
#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

static inline __m256d vx2_bits(uint64_t b) {
    return _mm256_castsi256_pd(_mm256_set1_epi64x((long long)b));
}

/* expf of 4 floats (|x| < 88 in every lane) */
static inline __m128 vx2_exp4(__m128 x) {
    const __m256d inv_ln2_n = vx2_bits(HR_VEXP_INV_LN2_N);
    const __m256d shift = vx2_bits(HR_VEXP_SHIFT);
    const __m256d c0 = vx2_bits(HR_VEXP_C0);
    const __m256d c1 = vx2_bits(HR_VEXP_C1);
    const __m256d c2 = vx2_bits(HR_VEXP_C2);
    const __m256d xd = _mm256_cvtps_pd(x);
    const __m256d kd0 = _mm256_fmadd_pd(inv_ln2_n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd0);
    const __m256d kd = _mm256_sub_pd(kd0, shift);
    const __m256d r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);
    const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    const __m256i t =
        _mm256_add_epi64(_mm256_i64gather_epi64((const long long *)hr_vexp_table, idx, 8),
                         _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(c0, r, c1);
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, c2, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    y = _mm256_mul_pd(y, _mm256_castsi256_pd(t));
    return _mm256_cvtpd_ps(y);
}

static void vexp_avx2(const float *x, float *y, int n) {
    const __m128i top = _mm_set1_epi32(0x7ff00000), below = _mm_set1_epi32(0x42afffff);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m128 v = _mm_loadu_ps(x + i);
        /* |x| >= 88, infinities and NaN, as glibc tests them */
        const int big = _mm_movemask_ps(
            _mm_castsi128_ps(_mm_cmpgt_epi32(_mm_and_si128(_mm_castps_si128(v), top), below)));
        const __m128 e = vx2_exp4(v);
        if (big) {
            float s[4];
            _mm_storeu_ps(s, v);
            _mm_storeu_ps(y + i, e);
            hr_vexp_special(s, y + i, (unsigned)big, 4);
        } else {
            _mm_storeu_ps(y + i, e);
        }
    }
    for (; i < n; i++)
        y[i] = expf(x[i]);
}

void hr_vexp_fill_avx2(hr_kernels *k) { k->expf_n = vexp_avx2; }
