/* canon-impl.h - the one float reduction order the scalar reference, the
 * AVX2 kernels (dot products and tiles) and the aarch64 kernels (NEON,
 * dotprod, the i8mm table's tiles) follow for every dot product, so those
 * tables return bit-identical results and a model's logits do not depend on
 * which of them ran it.
 *
 * Why: a last-bit difference in one dot product can move an activation
 * across a q8 rounding step of the next layer's activation quantizer, and
 * across a model that grows to differences of 1e-2 in the logits. Integer
 * sums are exact in any order, so only the float part needs fixing. The
 * order is that of llama.cpp's x86 (AVX2) kernels, so the canonical tables
 * also reproduce llama.cpp's CPU logits (to ~4e-7 on the quantized shared
 * fixtures, q4_0 and q8_0 exactly):
 *
 *  1. 8 float lanes. Lane k of a 32-element chunk gets the exact integer
 *     sum of the products of its elements 4k..4k+3 (vpmaddubsw + vpmaddwd
 *     in ggml; SDOT gives it directly, plain NEON SMULL + pairwise adds);
 *     all chunks of a block (K-quant super-block) go to the same lanes,
 *     K-quant sub-block scales applied in integers.
 *  2. Per block, in increasing block order:
 *       lane[k] = fmaf(d, (float)isum[k], lane[k])
 *     with d the float product of the two block scales (fused: explicit
 *     fmaf / vfmaq_f32 / _mm256_fmadd_ps, so -ffp-contract=off elsewhere
 *     stays correct).
 *  3. The lanes reduce as ggml's hsum_float_8: a_k = lane[k] + lane[k+4],
 *     then (a0 + a2) + (a1 + a3).
 *  Terms outside the lanes, added to the result of step 3:
 *   - q4_1 / q5_1: summs = fmaf(mw, sx, summs) per block (weight min times
 *     the activation block's s), in a scalar;
 *   - q4_K: 4 min lanes, lane j = mn[2j] * s(2j) + mn[2j+1] * s(2j+1)
 *     (s = the activations' sub-block sums), accm[j] = fmaf(-dx * dmin,
 *     (float)., accm[j]) per super-block, reduced (m0 + m2) + (m1 + m3);
 *   - q5_K: one scalar summs = fmaf(-dx * dmin, (float)msum, summs), msum
 *     = sum_j mn[j] * s(j);
 *   - q6_K has none: its -32 offset is applied per element.
 *  Float weights: f16 / bf16 put element i into lane i % 8 by
 *  fmaf(w[i], x[i], lane), then step 3 (a tail as if zero-padded). f32
 *  keeps the older order: 16 lanes, lane i % 16 += w[i] * x[i] (separate
 *  multiply and add), reduced by the tree lane l += lane l + 8, + 4, + 2,
 *  + 1.
 *
 * Tiles produce the same numbers as vec_dot because they follow the same
 * steps per (row, token) pair.
 *
 * The AVX2 table follows it too (quant_avx2.c, gemm_avx2.c: one 8-lane
 * accumulator per pair in block order, q6_K's -32 per element pair as ggml,
 * the min terms in their own accumulators), and so does the AVX-512 VNNI
 * table's decode of q4_0, q8_0, q4_K, q5_K and q6_K (dotc_avx512.c) and
 * its prompt panels (gemmp_avx512.c: the 8 lanes of 16 rows as 8 zmm).
 * Internal to kernels/
 * (tests may include it). */
#ifndef HR_KERNELS_CANON_IMPL_H
#define HR_KERNELS_CANON_IMPL_H

#include <math.h>
#include <stdint.h>

/* ---- quantized and f16 / bf16 weights: 8 lanes --------------------------- */

/* step 3 (ggml's hsum_float_8) */
static inline float hr_canon_hsum8(const float l[8]) {
    const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    const float b0 = a0 + a2, b1 = a1 + a3;
    return b0 + b1;
}

/* step 2 */
static inline void hr_canon_acc8(float acc[8], float d, const int32_t isum[8]) {
    for (int k = 0; k < 8; k++)
        acc[k] = fmaf(d, (float)isum[k], acc[k]);
}

/* q4_K's 4 min lanes */
static inline float hr_canon_hsum4(const float m[4]) { return (m[0] + m[2]) + (m[1] + m[3]); }

/* ---- f32 weights: 16 lanes ----------------------------------------------- */

#define HR_CANON_LANES 16

static inline float hr_canon_reduce(float acc[HR_CANON_LANES]) {
    for (int h = HR_CANON_LANES / 2; h >= 1; h /= 2)
        for (int l = 0; l < h; l++)
            acc[l] += acc[l + h];
    return acc[0];
}

static inline void hr_canon_zero(float acc[HR_CANON_LANES]) {
    for (int l = 0; l < HR_CANON_LANES; l++)
        acc[l] = 0.0f;
}

#endif
