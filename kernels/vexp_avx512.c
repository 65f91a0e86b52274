/* vexp_avx512.c - expf over arrays on AVX-512, equal to the C library's
 * expf bit for bit, so softmax and SwiGLU give the same values on every
 * kernel table.
 *
 * glibc (2.27 and later) computes expf in doubles: with N = 32,
 * k = round(x * N / ln 2) and r = x * N / ln 2 - k (rounded once),
 * exp(x) = 2^(k / N) * p(r), where 2^(k / N) is a table entry T[k % N]
 * (the bits of 2^(i / N) less i << 47) plus k << 47 in the exponent, and
 * p(r) = (C0 r + C1) r^2 + (C2 r + 1), then the double is rounded to float.
 * On a CPU with FMA (every CPU this table runs on) its x86-64 build fuses
 * x * N / ln 2 + 1.5 * 2^52 (the rounding shift), the reduction
 * x * N / ln 2 - k and the cubic's three multiply-adds; the steps below are
 * those, in that order, 8 doubles per vector. Arguments whose magnitude is
 * 88 or more (overflow, underflow, infinities, NaN) go to the library
 * itself, lane by lane, so its special cases stay its own. test_ops
 * compares this with expf on a million inputs and the edge cases; it was
 * also checked once against all 2^32 floats. */
#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

static inline __m512d vx_bits(uint64_t b) {
    return _mm512_castsi512_pd(_mm512_set1_epi64((long long)b));
}

/* the table's 32 entries in four vectors */
typedef struct {
    __m512i t[4];
} vx_table;

/* expf of 8 floats (|x| < 88 in every lane) */
static inline __m256 vx_exp8(__m256 x, const vx_table *tb) {
    const __m512d inv_ln2_n = vx_bits(HR_VEXP_INV_LN2_N);
    const __m512d shift = vx_bits(HR_VEXP_SHIFT);
    const __m512d c0 = vx_bits(HR_VEXP_C0);
    const __m512d c1 = vx_bits(HR_VEXP_C1);
    const __m512d c2 = vx_bits(HR_VEXP_C2);
    const __m512d one = _mm512_set1_pd(1.0);
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d kd0 = _mm512_fmadd_pd(inv_ln2_n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd0);
    const __m512d kd = _mm512_sub_pd(kd0, shift);
    const __m512d r = _mm512_fmsub_pd(inv_ln2_n, xd, kd);
    /* T[k % 32]: two 16-entry lookups (index bits 0-3), chosen by bit 4 */
    const __m512i lo = _mm512_permutex2var_epi64(tb->t[0], ki, tb->t[1]);
    const __m512i hi = _mm512_permutex2var_epi64(tb->t[2], ki, tb->t[3]);
    const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    const __m512i t =
        _mm512_add_epi64(_mm512_mask_blend_epi64(upper, lo, hi), _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(c0, r, c1);
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, c2, one);
    y = _mm512_fmadd_pd(z, r2, y);
    y = _mm512_mul_pd(y, _mm512_castsi512_pd(t));
    return _mm512_cvtpd_ps(y);
}

static void vexp_avx512(const float *x, float *y, int n) {
    vx_table tb;
    for (int j = 0; j < 4; j++)
        tb.t[j] = _mm512_loadu_si512(hr_vexp_table + 8 * j);
    /* |x| >= 88, infinities and NaN: the 11 bits under the sign, as glibc
     * tests them (its "abstop" against that of 88.0f) */
    const __m256i top = _mm256_set1_epi32(0x7ff00000), lim = _mm256_set1_epi32(0x42b00000);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __mmask8 big =
            _mm256_cmpge_epu32_mask(_mm256_and_si256(_mm256_castps_si256(v), top), lim);
        const __m256 e = vx_exp8(v, &tb);
        if (big) {
            float s[8];
            _mm256_storeu_ps(s, v);
            _mm256_storeu_ps(y + i, e);
            hr_vexp_special(s, y + i, big, 8);
        } else {
            _mm256_storeu_ps(y + i, e);
        }
    }
    for (; i < n; i++)
        y[i] = expf(x[i]);
}

void hr_vexp_fill_avx512(hr_kernels *k) { k->expf_n = vexp_avx512; }
