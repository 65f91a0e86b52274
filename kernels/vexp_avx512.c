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

static const uint64_t vx_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

static inline __m512d vx_bits(uint64_t b) {
    return _mm512_castsi512_pd(_mm512_set1_epi64((long long)b));
}

/* the table's 32 entries in four vectors */
typedef struct {
    __m512i t[4];
} vx_table;

/* expf of 8 floats (|x| < 88 in every lane) */
static inline __m256 vx_exp8(__m256 x, const vx_table *tb) {
    const __m512d inv_ln2_n = vx_bits(0x40471547652b82feull); /* 32 / ln 2 */
    const __m512d shift = vx_bits(0x4338000000000000ull);     /* 1.5 * 2^52 */
    const __m512d c0 = vx_bits(0x3ebc6af84b912394ull);
    const __m512d c1 = vx_bits(0x3f2ebfce50fac4f3ull);
    const __m512d c2 = vx_bits(0x3f962e42ff0c52d6ull);
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
        tb.t[j] = _mm512_loadu_si512(vx_tab + 8 * j);
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
            for (int l = 0; l < 8; l++)
                if (big & (1u << l))
                    y[i + l] = expf(s[l]);
        } else {
            _mm256_storeu_ps(y + i, e);
        }
    }
    for (; i < n; i++)
        y[i] = expf(x[i]);
}

void hr_vexp_fill_avx512(hr_kernels *k) { k->expf_n = vexp_avx512; }
