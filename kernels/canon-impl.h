/* canon-impl.h - the one float reduction order the scalar reference and the
 * aarch64 kernels (NEON, dotprod, i8mm tiles) follow for every dot product,
 * so those tables return bit-identical results and a model's logits do not
 * depend on which of them ran it.
 *
 * Why: a last-bit difference in one dot product can move an activation
 * across a q8 rounding step of the next layer's activation quantizer, and
 * across a model that grows to differences of 1e-2 in the logits. Integer
 * sums are exact in any order, so only the float part needs fixing:
 *
 *  1. Each block's term is computed from its exact integer sums by a fixed
 *     expression (no contraction: the scalar and aarch64 kernel files build
 *     with -ffp-contract=off and the NEON kernels use separate mul/add,
 *     never FMA, so the scalar reference needs no FMA hardware):
 *       32-element blocks (q4_0, q5_0, q8_0):  t = (dw * dx) * (float)isum
 *       with a min term (q4_1, q5_1):         t = (dw * dx) * (float)isum
 *                                                 + mw * sx
 *       K-quant super-blocks (q4_K, q5_K):     t = (dx * dw) * (float)isum
 *                                                 - (dx * dmin) * (float)msum
 *       q6_K:                                  t = (dx * dw) * (float)isum
 *       float weights (f32, f16, bf16):        t = w[i] * x[i] (per element)
 *     where dw, dmin, mw are the weight block's scales as float, dx / sx
 *     the activation block's, isum = sum of (scale-weighted) integer
 *     products of the block and msum = sum_j mn[j] * (sum of the 32
 *     activations of sub-block j).
 *  2. Term b (block, super-block or element index in the row) is added to
 *     lane b % 16 of 16 float accumulators, in increasing b.
 *  3. The 16 lanes are reduced by a fixed tree: lane l += lane l + 8, then
 *     + 4, + 2, + 1 (l below the step); the result is lane 0.
 *
 * 16 lanes are four NEON registers: 4 blocks' integer sums reduce into one
 * s32x4 (ADDP), are converted and scaled as a vector and added to 4 lanes.
 * The lane count also leaves 16 independent add chains, so the adds are
 * never latency-bound. Tiles and multi-column kernels produce the same
 * numbers as vec_dot because they follow the same three steps per pair.
 *
 * The x86 kernels (AVX2, AVX-512) do not follow this order: there it cost
 * 6-14% of decode and 12-20% of prefill speed, so they keep FMA chains and
 * their own lane layout and agree with scalar up to float summation order
 * (hr_kernels.canonical is false for them). Internal to kernels/ (tests may
 * include it). */
#ifndef HR_KERNELS_CANON_IMPL_H
#define HR_KERNELS_CANON_IMPL_H

#include <stdint.h>

#define HR_CANON_LANES 16

/* the fixed tree of step 3 */
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

/* block terms of step 1 */
static inline float hr_canon_t32(float dw, float dx, int32_t isum) {
    const float d = dw * dx;
    return d * (float)isum;
}

static inline float hr_canon_t32m(float dw, float dx, int32_t isum, float mw, float sx) {
    const float d = dw * dx;
    const float t = d * (float)isum;
    const float m = mw * sx;
    return t + m;
}

static inline float hr_canon_tk(float dx, float dw, float dmin, int32_t isum, int32_t msum) {
    const float d = dx * dw, dm = dx * dmin;
    const float a = d * (float)isum, b = dm * (float)msum;
    return a - b;
}

static inline float hr_canon_tk6(float dx, float dw, int32_t isum) {
    const float d = dx * dw;
    return d * (float)isum;
}

#endif
