/* gemm-impl.h - R x T tile kernels (R weight rows x T activation rows) for
 * prompt processing, written once and compiled twice: by gemm_avx2.c (AVX2,
 * 16 ymm registers, VNNI emulated with vpmaddubsw/vpmaddwd) and by
 * gemm_avx512.c (AVX-512VL + VNNI on ymm, 32 registers). Each file sets
 * HR_GEMM_RM / HR_GEMM_TM (the full tile) before including this.
 *
 * A tile keeps R x T accumulators in registers: every weight block is
 * unpacked once and used for T tokens, every activation block is loaded once
 * and used for R rows, so per (row, token, 32 elements) only the multiply,
 * the int->float conversion and one FMA remain (vec_dot also unpacks, offsets
 * and reloads scales per pair). Constant offsets (-8 for q4_0, +128 bias for
 * q8_0 under VNNI, -32 for q6_K) are folded in per token (or per row) rather
 * than per pair. Results equal the scalar vec_dot bit for bit (below).
 * Internal to kernels/. */
#ifndef HR_KERNELS_GEMM_IMPL_H
#define HR_KERNELS_GEMM_IMPL_H

#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <math.h>

#if !defined(HR_GEMM_RM) || !defined(HR_GEMM_TM)
#error "define HR_GEMM_RM and HR_GEMM_TM before including gemm-impl.h"
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define HR_GEMM_VNNI 1
#else
#define HR_GEMM_VNNI 0
#endif

/* The tiles follow the canonical float order of kernels/canon-impl.h and
 * equal the scalar vec_dot bit for bit (q4_K / q5_K mins in their own
 * accumulators, q6_K's -32 per element, f16's tail in the lanes). */

_Static_assert(HR_GEMM_RM >= 1 && HR_GEMM_RM <= 4 && HR_GEMM_TM >= 1 && HR_GEMM_TM <= 4,
               "tile of at most 4 x 4");

/* blocks per chunk of precomputed q4_0/q8_0 scales */
#define HR_GEMM_CB 32

#define HR_GI static inline __attribute__((always_inline))
#define HR_UNROLL _Pragma("GCC unroll 8")

HR_GI float g_h2f(uint16_t h) { return _cvtsh_ss(h); }

HR_GI __m256i g_load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

HR_GI __m128i g_load128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

/* (s0 + s2) + (s1 + s3) */
HR_GI float g_hsum128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

HR_GI float g_hsum(__m256 v) {
    return g_hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

/* acc + sums of 4 adjacent u8 x s8 products per s32 lane (the emulation
 * needs pair sums that fit int16: u <= 127 or |s| small) */
HR_GI __m256i g_dpbusd(__m256i acc, __m256i u, __m256i s) {
#if HR_GEMM_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* acc + sums of 2 adjacent s16 x s16 products per s32 lane */
HR_GI __m256i g_dpwssd(__m256i acc, __m256i p, __m256i s) {
#if HR_GEMM_VNNI
    return _mm256_dpwssd_epi32(acc, p, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

/* T fp16 values at p, p + stride, ... as floats (lanes >= T are 0) */
HR_GI __m128 g_halves(const uint8_t *p, size_t stride, const int T) {
    uint64_t v = 0;
    HR_UNROLL
    for (int k = 0; k < T; k++) {
        uint16_t h;
        memcpy(&h, p + (size_t)k * stride, 2);
        v |= (uint64_t)h << (16 * k);
    }
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

/* dd[r][t] = dx[r] * dy[t] for a tile: the per-pair scales, written ahead of
 * use (a whole chunk of blocks at a time, so no load waits on a store) and
 * read by the FMAs as broadcast memory operands instead of shuffles */
HR_GI void g_outer(float dd[HR_GEMM_RM][4], __m128 dx, __m128 dy, const int R) {
    HR_UNROLL
    for (int r = 0; r < R; r++) {
        const __m128 b = _mm_permutevar_ps(dx, _mm_set1_epi32(r));
        _mm_storeu_ps(dd[r], _mm_mul_ps(b, dy));
    }
}

HR_GI void g_store(float *y, size_t ys, __m256 acc[HR_GEMM_RM][HR_GEMM_TM], const int R,
                   const int T) {
    HR_UNROLL
    for (int r = 0; r < R; r++)
        HR_UNROLL
    for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r] = g_hsum(acc[r][t]);
}

#define G_ZERO_ACC(acc, R, T)                                                                      \
    HR_UNROLL                                                                                      \
    for (int r_ = 0; r_ < (R); r_++)                                                               \
        HR_UNROLL                                                                                  \
    for (int t_ = 0; t_ < (T); t_++)                                                               \
    (acc)[r_][t_] = _mm256_setzero_ps()

/* ---- Q4_0 / Q8_0 / MXFP4 x Q8_0 ------------------------------------------ */

/* R E8M0 block scales at p, p + stride, ... as floats 2^(e-128) (lanes >= R are 0) */
HR_GI __m128 g_e8m0s(const uint8_t *p, size_t stride, const int R) {
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    HR_UNROLL
    for (int k = 0; k < R; k++)
        v[k] = hr_e8m0_half(p[(size_t)k * stride]);
    return _mm_loadu_ps(v);
}

enum { G_B32_Q4_0, G_B32_Q8_0, G_B32_MXFP4 };

/* 32-element blocks. Q4_0: u = [low nibbles | high nibbles] (0..15), pair
 * sum = dot(u, y) - 8 * sum(y). Q8_0 with VNNI: u = x + 128 (unsigned),
 * pair sum = dot(u, y) - 128 * sum(y); the offset term is per token and
 * seeds the integer sum. Q8_0 without VNNI (vpmaddubsw saturates on
 * u > 127) uses the sign trick per pair instead. MXFP4: u = the codes'
 * doubled E2M1 values + 12 (0..24, looked up as Q4_0's nibbles), pair sum
 * = dot(u, y) - 12 * sum(y), the scale 2^(e-128) * dy. */
HR_GI void tile_b32(const int kind, int64_t n, const int R, const int T, const uint8_t *w,
                    size_t ws, const uint8_t *a, size_t as, float *y, size_t ys) {
    const bool q8 = kind == G_B32_Q8_0, fp4 = kind == G_B32_MXFP4;
    const size_t xb = q8    ? sizeof(hr_block_q8_0)
                      : fp4 ? sizeof(hr_block_mxfp4)
                            : sizeof(hr_block_q4_0);
    const size_t qo = fp4 ? 1 : 2; /* where the values start in a block */
    const size_t yb = sizeof(hr_block_q8_0);
    const int64_t nb = n / HR_QK8_0;
    const bool use_off = !q8 || HR_GEMM_VNNI;
    const __m256i off = _mm256_set1_epi8(q8 ? (char)0x80 : fp4 ? 12 : 8);
    const __m128i lut = hr_mxfp4_lut12();
    const __m128i m4h = _mm_set1_epi8(0x0f);
    const __m256i m4 = _mm256_set1_epi8(0x0f), z = _mm256_setzero_si256();
    __m256 acc[HR_GEMM_RM][HR_GEMM_TM];
    G_ZERO_ACC(acc, R, T);
    float dd[HR_GEMM_CB][HR_GEMM_RM][4];
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *wi = w + (size_t)i * xb, *ai = a + (size_t)i * yb;
        const int ci = (int)(i % HR_GEMM_CB);
        if (ci == 0) /* scales of the next chunk of blocks */
            for (int64_t k = i; k < nb && k < i + HR_GEMM_CB; k++)
                g_outer(dd[k - i],
                        fp4 ? g_e8m0s(w + (size_t)k * xb, ws, R)
                            : g_halves(w + (size_t)k * xb, ws, R),
                        g_halves(a + (size_t)k * yb, as, T), R);
        __m256i yq[HR_GEMM_TM], yo[HR_GEMM_TM];
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            yq[t] = g_load256(ai + (size_t)t * as + 2);
            if (use_off)
                yo[t] = _mm256_sub_epi32(z, g_dpbusd(z, off, yq[t]));
        }
        HR_UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t *qs = wi + (size_t)r * ws + qo;
            __m256i u;
            if (q8) {
                u = g_load256(qs);
            } else if (fp4) {
                const __m128i q = g_load128(qs);
                u = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_shuffle_epi8(lut, _mm_and_si128(q, m4h))),
                    _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4h)), 1);
            } else {
                const __m128i t4 = g_load128(qs);
                u = _mm256_and_si256(
                    _mm256_inserti128_si256(_mm256_castsi128_si256(t4), _mm_srli_epi16(t4, 4), 1),
                    m4);
            }
            __m256i ux = u;
            if (q8 && use_off)
                ux = _mm256_xor_si256(u, off);
            else if (q8)
                ux = _mm256_sign_epi8(u, u);
            HR_UNROLL
            for (int t = 0; t < T; t++) {
                __m256i s;
                if (use_off)
                    s = g_dpbusd(yo[t], ux, yq[t]);
                else
                    s = g_dpbusd(z, ux, _mm256_sign_epi8(yq[t], u));
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s),
                                            _mm256_broadcast_ss(&dd[ci][r][t]), acc[r][t]);
            }
        }
    }
    g_store(y, ys, acc, R, T);
}

/* ---- Q4_K / Q5_K x Q8_K -------------------------------------------------- */

/* Per 256-element super-block: integer sums sc[j] * dot(q, y) per pair over
 * the 8 sub-blocks (vpmaddubsw then vpdpwssd by the broadcast scale), then
 * d * sum - dmin * sum_j mn[j] * bsums(j) once per pair. */
HR_GI void tile_q45_k(const bool q5, int64_t n, const int R, const int T, const uint8_t *w,
                      size_t ws, const uint8_t *a, size_t as, float *y, size_t ys) {
    const size_t xb = q5 ? sizeof(hr_block_q5_k) : sizeof(hr_block_q4_k);
    const int64_t nb = n / HR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    __m256 acc[HR_GEMM_RM][HR_GEMM_TM];
    G_ZERO_ACC(acc, R, T);
    __m128 accm[HR_GEMM_RM][HR_GEMM_TM]; /* q4_K: 4 min lanes; q5_K: lane 0 */
    HR_UNROLL
    for (int r = 0; r < R; r++)
        HR_UNROLL
    for (int t = 0; t < T; t++)
        accm[r][t] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const hr_block_q8_k *yk[HR_GEMM_TM];
        __m128i bs[HR_GEMM_TM];
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            yk[t] = (const hr_block_q8_k *)(a + (size_t)t * as) + i;
            const __m256i b = g_load256(yk[t]->bsums);
            bs[t] = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
        }
        const uint8_t *xr[HR_GEMM_RM];
        __m256i sc[HR_GEMM_RM], qh[HR_GEMM_RM];
        __m256i sumi[HR_GEMM_RM][HR_GEMM_TM];
        HR_UNROLL
        for (int r = 0; r < R; r++) {
            xr[r] = w + (size_t)r * ws + (size_t)i * xb;
            /* d, dmin, scales[12] lead both block layouts */
            sc[r] = _mm256_broadcastsi128_si256(hr_kq_unpack_scales_sse(xr[r] + 4));
            if (q5)
                qh[r] = g_load256(((const hr_block_q5_k *)xr[r])->qh);
            HR_UNROLL
            for (int t = 0; t < T; t++)
                sumi[r][t] = _mm256_setzero_si256();
        }
        for (int c = 0; c < 4; c++) {
            const __m256i sell = _mm256_set1_epi16((short)(0x8000 | (2 * c)));
            const __m256i selh = _mm256_set1_epi16((short)(0x8000 | (2 * c + 1)));
            HR_UNROLL
            for (int r = 0; r < R; r++) {
                const uint8_t *qs =
                    q5 ? ((const hr_block_q5_k *)xr[r])->qs : ((const hr_block_q4_k *)xr[r])->qs;
                const __m256i q = g_load256(qs + 32 * c);
                __m256i lo = _mm256_and_si256(q, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (q5) {
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh[r], 4), b4));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh[r], 3), b4));
                    qh[r] = _mm256_srli_epi16(qh[r], 2);
                }
                const __m256i sl = _mm256_shuffle_epi8(sc[r], sell);
                const __m256i sh = _mm256_shuffle_epi8(sc[r], selh);
                HR_UNROLL
                for (int t = 0; t < T; t++) {
                    const int8_t *q8 = yk[t]->qs + 64 * c;
                    sumi[r][t] = g_dpwssd(sumi[r][t], _mm256_maddubs_epi16(lo, g_load256(q8)), sl);
                    sumi[r][t] =
                        g_dpwssd(sumi[r][t], _mm256_maddubs_epi16(hi, g_load256(q8 + 32)), sh);
                }
            }
        }
        HR_UNROLL
        for (int r = 0; r < R; r++) {
            uint16_t hd, hm;
            memcpy(&hd, xr[r], 2);
            memcpy(&hm, xr[r] + 2, 2);
            const float dx = g_h2f(hd), dmx = g_h2f(hm);
            const __m128i mn = _mm_cvtepu8_epi16(_mm_srli_si128(_mm256_castsi256_si128(sc[r]), 8));
            HR_UNROLL
            for (int t = 0; t < T; t++) {
                const __m128i m = _mm_madd_epi16(mn, bs[t]);
                const float dy = yk[t]->d;
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r][t]), _mm256_set1_ps(dx * dy),
                                            acc[r][t]);
                const __m128 ndm = _mm_set1_ps(-(dmx * dy));
                if (q5) { /* one scalar: the exact integer sum of the 4 lanes */
                    __m128i ms = _mm_add_epi32(m, _mm_unpackhi_epi64(m, m));
                    ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, 1));
                    accm[r][t] = _mm_fmadd_ss(ndm, _mm_cvtepi32_ps(ms), accm[r][t]);
                } else {
                    accm[r][t] = _mm_fmadd_ps(ndm, _mm_cvtepi32_ps(m), accm[r][t]);
                }
            }
        }
    }
    HR_UNROLL
    for (int r = 0; r < R; r++)
        HR_UNROLL
    for (int t = 0; t < T; t++) {
        /* q4_K: 4 min lanes; q5_K: lane 0 alone */
        const float m = q5 ? _mm_cvtss_f32(accm[r][t]) : g_hsum128(accm[r][t]);
        y[(size_t)t * ys + (size_t)r] = g_hsum(acc[r][t]) + m;
    }
}

/* ---- Q6_K x Q8_K --------------------------------------------------------- */

/* Half h (128 elements) of a row as 4 registers of 32 (q 0..63); the int16
 * scales of the half spread by in-lane shuffles (low 128-bit lane: scale 2m,
 * high: 2m+1). sum (q - 32) * y seeds the integer sum with -32 * sc . bsums. */
HR_GI void tile_q6_k(int64_t n, const int R, const int T, const uint8_t *w, size_t ws,
                     const uint8_t *a, size_t as, float *y, size_t ys) {
    const int64_t nb = n / HR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256i sel[4];
    for (int m = 0; m < 4; m++)
        sel[m] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_set1_epi16((short)(((4 * m + 1) << 8) | (4 * m)))),
            _mm_set1_epi16((short)(((4 * m + 3) << 8) | (4 * m + 2))), 1);
    __m256 acc[HR_GEMM_RM][HR_GEMM_TM];
    G_ZERO_ACC(acc, R, T);
    for (int64_t i = 0; i < nb; i++) {
        const hr_block_q8_k *yk[HR_GEMM_TM];
        HR_UNROLL
        for (int t = 0; t < T; t++)
            yk[t] = (const hr_block_q8_k *)(a + (size_t)t * as) + i;
        /* the -32 per element pair: 32 * y pair sums, once per token */
        __m256i o32[HR_GEMM_TM][8];
        HR_UNROLL
        for (int t = 0; t < T; t++)
            HR_UNROLL
        for (int m = 0; m < 8; m++)
            o32[t][m] = _mm256_maddubs_epi16(_mm256_set1_epi8(32), g_load256(yk[t]->qs + 32 * m));
        const hr_block_q6_k *xr[HR_GEMM_RM];
        __m256i sc16[HR_GEMM_RM];
        __m256i sumi[HR_GEMM_RM][HR_GEMM_TM];
        HR_UNROLL
        for (int r = 0; r < R; r++) {
            xr[r] = (const hr_block_q6_k *)(w + (size_t)r * ws) + i;
            sc16[r] = _mm256_cvtepi8_epi16(g_load128(xr[r]->scales));
            HR_UNROLL
            for (int t = 0; t < T; t++)
                sumi[r][t] = _mm256_setzero_si256();
        }
        for (int h = 0; h < 2; h++) {
            HR_UNROLL
            for (int r = 0; r < R; r++) {
                const __m256i scl = h == 0 ? _mm256_permute2x128_si256(sc16[r], sc16[r], 0x00)
                                           : _mm256_permute2x128_si256(sc16[r], sc16[r], 0x11);
                const uint8_t *ql = xr[r]->ql + 64 * h;
                const __m256i l0 = g_load256(ql), l1 = g_load256(ql + 32);
                const __m256i qh = g_load256(xr[r]->qh + 32 * h);
                __m256i q[4];
                q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
                q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
                q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                       _mm256_and_si256(qh, m30));
                q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
                __m256i s[4];
                HR_UNROLL
                for (int m = 0; m < 4; m++)
                    s[m] = _mm256_shuffle_epi8(scl, sel[m]);
                HR_UNROLL
                for (int t = 0; t < T; t++) {
                    const int8_t *q8 = yk[t]->qs + 128 * h;
                    HR_UNROLL
                    for (int m = 0; m < 4; m++) {
                        __m256i p = _mm256_maddubs_epi16(q[m], g_load256(q8 + 32 * m));
                        p = _mm256_sub_epi16(p, o32[t][4 * h + m]);
                        sumi[r][t] = g_dpwssd(sumi[r][t], p, s[m]);
                    }
                }
            }
        }
        HR_UNROLL
        for (int r = 0; r < R; r++) {
            const float dx = g_h2f(xr[r]->d);
            HR_UNROLL
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r][t]),
                                            _mm256_set1_ps(dx * yk[t]->d), acc[r][t]);
        }
    }
    g_store(y, ys, acc, R, T);
}

/* ---- F16 x F32 ----------------------------------------------------------- */

/* 8 weights converted once per row and used for T tokens; 8 lanes per pair. */
HR_GI void tile_f16(int64_t n, const int R, const int T, const uint8_t *w, size_t ws,
                    const uint8_t *a, size_t as, float *y, size_t ys) {
    __m256 acc[HR_GEMM_RM][HR_GEMM_TM];
    G_ZERO_ACC(acc, R, T);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 yv[HR_GEMM_TM];
        HR_UNROLL
        for (int t = 0; t < T; t++)
            yv[t] = _mm256_loadu_ps((const float *)(a + (size_t)t * as) + i);
        HR_UNROLL
        for (int r = 0; r < R; r++) {
            const __m256 xv =
                _mm256_cvtph_ps(g_load128((const uint16_t *)(w + (size_t)r * ws) + i));
            HR_UNROLL
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm256_fmadd_ps(xv, yv[t], acc[r][t]);
        }
    }
    if (i < n) { /* tail: n % 8 elements into their lanes by fmaf */
        HR_UNROLL
        for (int r = 0; r < R; r++)
            HR_UNROLL
        for (int t = 0; t < T; t++) {
            float l[8];
            _mm256_storeu_ps(l, acc[r][t]);
            for (int j = 0; i + j < n; j++)
                l[j] = fmaf(g_h2f(((const uint16_t *)(w + (size_t)r * ws))[i + j]),
                            ((const float *)(a + (size_t)t * as))[i + j], l[j]);
            acc[r][t] = _mm256_loadu_ps(l);
        }
    }
    g_store(y, ys, acc, R, T);
}

/* ---- drivers ------------------------------------------------------------- */

/* hr_gemm_fn over any nr x nt: full RM x TM tiles, then RM x 1 / 1 x TM /
 * 1 x 1 at the edges. Tokens outer: a tile's activations stay in L1 while
 * the (few) rows pass. */
#define HR_GEMM_DRIVER(NAME, KERN)                                                                 \
    static void NAME(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a,           \
                     size_t as, float *y, size_t ys) {                                             \
        const uint8_t *wb = w, *ab = a;                                                            \
        int t = 0;                                                                                 \
        for (; t + HR_GEMM_TM <= nt; t += HR_GEMM_TM) {                                            \
            int r = 0;                                                                             \
            for (; r + HR_GEMM_RM <= nr; r += HR_GEMM_RM)                                          \
                KERN(n, HR_GEMM_RM, HR_GEMM_TM, wb + (size_t)r * ws, ws, ab + (size_t)t * as, as,  \
                     y + (size_t)t * ys + r, ys);                                                  \
            for (; r < nr; r++)                                                                    \
                KERN(n, 1, HR_GEMM_TM, wb + (size_t)r * ws, ws, ab + (size_t)t * as, as,           \
                     y + (size_t)t * ys + r, ys);                                                  \
        }                                                                                          \
        for (; t < nt; t++) {                                                                      \
            int r = 0;                                                                             \
            for (; r + HR_GEMM_RM <= nr; r += HR_GEMM_RM)                                          \
                KERN(n, HR_GEMM_RM, 1, wb + (size_t)r * ws, ws, ab + (size_t)t * as, as,           \
                     y + (size_t)t * ys + r, ys);                                                  \
            for (; r < nr; r++)                                                                    \
                KERN(n, 1, 1, wb + (size_t)r * ws, ws, ab + (size_t)t * as, as,                    \
                     y + (size_t)t * ys + r, ys);                                                  \
        }                                                                                          \
    }

HR_GI void kern_q4_0(int64_t n, const int R, const int T, const uint8_t *w, size_t ws,
                     const uint8_t *a, size_t as, float *y, size_t ys) {
    tile_b32(G_B32_Q4_0, n, R, T, w, ws, a, as, y, ys);
}
HR_GI void kern_q8_0(int64_t n, const int R, const int T, const uint8_t *w, size_t ws,
                     const uint8_t *a, size_t as, float *y, size_t ys) {
    tile_b32(G_B32_Q8_0, n, R, T, w, ws, a, as, y, ys);
}
HR_GI void kern_q4_k(int64_t n, const int R, const int T, const uint8_t *w, size_t ws,
                     const uint8_t *a, size_t as, float *y, size_t ys) {
    tile_q45_k(false, n, R, T, w, ws, a, as, y, ys);
}
HR_GI void kern_q5_k(int64_t n, const int R, const int T, const uint8_t *w, size_t ws,
                     const uint8_t *a, size_t as, float *y, size_t ys) {
    tile_q45_k(true, n, R, T, w, ws, a, as, y, ys);
}

HR_GEMM_DRIVER(gemm_q4_0, kern_q4_0)
HR_GEMM_DRIVER(gemm_q8_0, kern_q8_0)
HR_GEMM_DRIVER(gemm_q4_k, kern_q4_k)
HR_GEMM_DRIVER(gemm_q5_k, kern_q5_k)
HR_GEMM_DRIVER(gemm_q6_k, tile_q6_k)
HR_GEMM_DRIVER(gemm_f16, tile_f16)
HR_GI void kern_mxfp4(int64_t n, const int R, const int T, const uint8_t *w, size_t ws,
                      const uint8_t *a, size_t as, float *y, size_t ys) {
    tile_b32(G_B32_MXFP4, n, R, T, w, ws, a, as, y, ys);
}
HR_GEMM_DRIVER(gemm_mxfp4, kern_mxfp4)

/* the gemm entries this build specialises */
HR_GI void hr_gemm_fill_common(hr_kernels *k) {
    k->gemm[HR_TYPE_Q4_0] = gemm_q4_0;
    k->gemm[HR_TYPE_Q8_0] = gemm_q8_0;
    k->gemm[HR_TYPE_Q4_K] = gemm_q4_k;
    k->gemm[HR_TYPE_Q5_K] = gemm_q5_k;
    k->gemm[HR_TYPE_Q6_K] = gemm_q6_k;
    k->gemm[HR_TYPE_F16] = gemm_f16;
    k->gemm[HR_TYPE_MXFP4] = gemm_mxfp4;
}

/* A table entry that runs the packed panels PACKED from HR_GEMMP_MIN_T
 * tokens on and the tiles TILES below (one token: decode rows) */
#define HR_GEMMP_ENTRY(NAME, PACKED, TILES)                                                        \
    static void NAME(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a,           \
                     size_t as, float *y, size_t ys) {                                             \
        if (nt >= HR_GEMMP_MIN_T)                                                                  \
            PACKED(n, nr, nt, w, ws, a, as, y, ys);                                                \
        else                                                                                       \
            TILES(n, nr, nt, w, ws, a, as, y, ys);                                                 \
    }

#endif
