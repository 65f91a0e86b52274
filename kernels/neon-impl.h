/* neon-impl.h - aarch64 row kernels written once and compiled twice: by
 * quant_neon.c (baseline Advanced SIMD, every ARMv8-A core: 8-bit dot
 * products as SMULL/SMULL2 + pairwise adds) and by quant_dotprod.c
 * (-march=armv8.2-a+dotprod: SDOT, four 8-bit products summed into each
 * 32-bit lane in one instruction). Dot products for every supported weight
 * type, the activation quantizers (Q8_0, Q8_1, Q8_K, F16) and the fp16 /
 * bf16 conversions (FCVTL / FCVTN; bf16 is a 16-bit shift).
 *
 * Integer dot kernels unpack a weight block into signed bytes (nibbles and
 * high bits shifted into place, the type's offset subtracted), dot them
 * with the activation bytes into s32 lanes of 4-element groups (lane k of
 * a 16-byte register: elements 4k..4k+3; SDOT gives them directly, plain
 * NEON reduces SMULL products pairwise down to groups of 4), scale them by
 * the sub-block scales in integers (K-quants) and follow the float order of
 * kernels/canon-impl.h: the 8 canonical lanes as a pair of float32x4
 * registers, VFMA per block (fused, as the scalar fmaf), ggml's
 * hsum_float_8 at the end; so results equal the scalar reference bit for
 * bit. Quantizers and dequantizers are bit-exact too (no fused multiply-add
 * where the scalar code rounds twice: the files build with
 * -ffp-contract=off, every fma is explicit). The block helpers serve the
 * i8mm table's gemm tiles as well (gemm_i8mm.c). Internal to kernels/. */
#ifndef HR_KERNELS_NEON_IMPL_H
#define HR_KERNELS_NEON_IMPL_H

#include "kernels/canon-impl.h"
#include "kernels/quant-impl.h"

#include <arm_neon.h>
#include <math.h>

#if defined(__ARM_FEATURE_DOTPROD)
#define HR_NEON_SDOT 1
#else
#define HR_NEON_SDOT 0
#endif

#define HR_NI static inline __attribute__((always_inline))

/* ---- helpers ------------------------------------------------------------- */

/* fp16 bits -> float with the FCVT instruction */
HR_NI float n_h2f(uint16_t h) {
    __fp16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
}

/* acc + the sums of the products of elements 4k..4k+3 of a and b in lane
 * k (SDOT; plain NEON: SMULL products, pairwise adds to groups of 2, then
 * of 4) */
HR_NI int32x4_t n_dot4(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if HR_NEON_SDOT
    return vdotq_s32(acc, a, b);
#else
    const int32x4_t p0 = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    const int32x4_t p1 = vpaddlq_s16(vmull_high_s8(a, b));
    return vaddq_s32(acc, vpaddq_s32(p0, p1));
#endif
}

HR_NI int8x16_t n_s8(uint8x16_t v) { return vreinterpretq_s8_u8(v); }

/* byte j = 0x10 where bit j of the 16-bit value b is set, else 0 */
HR_NI uint8x16_t n_bits16(uint32_t b) {
    static const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)b), vdup_n_u8((uint8_t)(b >> 8)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(sel)), vdupq_n_u8(0x10));
}

/* ---- 32-element blocks: unpack to signed bytes -------------------------- */

typedef struct {
    int8x16_t lo, hi; /* elements 0-15, 16-31 */
} n_s8x32;

HR_NI n_s8x32 n_unpack_q4_0(const hr_block_q4_0 *x) {
    const uint8x16_t q = vld1q_u8(x->qs), m4 = vdupq_n_u8(0x0f);
    const int8x16_t o = vdupq_n_s8(8);
    return (n_s8x32){vsubq_s8(n_s8(vandq_u8(q, m4)), o), vsubq_s8(n_s8(vshrq_n_u8(q, 4)), o)};
}

HR_NI n_s8x32 n_unpack_q4_1(const hr_block_q4_1 *x) {
    const uint8x16_t q = vld1q_u8(x->qs);
    return (n_s8x32){n_s8(vandq_u8(q, vdupq_n_u8(0x0f))), n_s8(vshrq_n_u8(q, 4))};
}

HR_NI n_s8x32 n_unpack_q5(const uint8_t qs[16], const uint8_t qh4[4], int off) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const uint8x16_t q = vld1q_u8(qs);
    const uint8x16_t lo = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), n_bits16(qh & 0xffffu));
    const uint8x16_t hi = vorrq_u8(vshrq_n_u8(q, 4), n_bits16(qh >> 16));
    const int8x16_t o = vdupq_n_s8((int8_t)off);
    return (n_s8x32){vsubq_s8(n_s8(lo), o), vsubq_s8(n_s8(hi), o)};
}

HR_NI n_s8x32 n_unpack_q5_0(const hr_block_q5_0 *x) { return n_unpack_q5(x->qs, x->qh, 16); }

HR_NI n_s8x32 n_unpack_q5_1(const hr_block_q5_1 *x) { return n_unpack_q5(x->qs, x->qh, 0); }

HR_NI n_s8x32 n_unpack_q8_0(const hr_block_q8_0 *x) {
    return (n_s8x32){vld1q_s8(x->qs), vld1q_s8(x->qs + 16)};
}

/* q4_K's 4 min lanes: lane j = mn[2j] * s(2j) + mn[2j+1] * s(2j+1), s(j)
 * the q8 sum of sub-block j (bsums pairs: int16, |.| <= 4064); their total
 * is q5_K's msum */
HR_NI int32x4_t n_kq_mins4(const uint8_t mn[8], const int16_t bsums[16]) {
    const int16x8_t bp = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
    const int32x4_t p0 = vmull_s16(vget_low_s16(m), vget_low_s16(bp));
    return vpaddq_s32(p0, vmull_high_s16(m, bp));
}

/* ---- the canonical lanes ------------------------------------------------- */

/* 8 integer lanes (lo: lanes 0-3, hi: 4-7) and 8 float lanes */
typedef struct {
    int32x4_t lo, hi;
} n_i32x8;

typedef struct {
    float32x4_t lo, hi;
} n_f32x8;

HR_NI n_f32x8 n_zero8(void) { return (n_f32x8){vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }

/* lane[k] = fmaf(d, (float)s[k], lane[k]) */
HR_NI void n_acc8(n_f32x8 *acc, float d, n_i32x8 s) {
    const float32x4_t dv = vdupq_n_f32(d);
    acc->lo = vfmaq_f32(acc->lo, dv, vcvtq_f32_s32(s.lo));
    acc->hi = vfmaq_f32(acc->hi, dv, vcvtq_f32_s32(s.hi));
}

/* hr_canon_hsum8: a_k = lane k + lane k+4, (a0 + a2) + (a1 + a3) */
HR_NI float n_hsum8(n_f32x8 acc) {
    const float32x4_t a = vaddq_f32(acc.lo, acc.hi);
    const float b0 = vgetq_lane_f32(a, 0) + vgetq_lane_f32(a, 2);
    const float b1 = vgetq_lane_f32(a, 1) + vgetq_lane_f32(a, 3);
    return b0 + b1;
}

/* hr_canon_hsum4 */
HR_NI float n_hsum4(float32x4_t m) {
    return (vgetq_lane_f32(m, 0) + vgetq_lane_f32(m, 2)) +
           (vgetq_lane_f32(m, 1) + vgetq_lane_f32(m, 3));
}

/* the lanes of a 32-element block: elements 0-15 to lanes 0-3, 16-31 to
 * lanes 4-7 */
HR_NI n_i32x8 n_lanes32(n_s8x32 u, const int8_t *q8) {
    return (n_i32x8){n_dot4(vdupq_n_s32(0), u.lo, vld1q_s8(q8)),
                     n_dot4(vdupq_n_s32(0), u.hi, vld1q_s8(q8 + 16))};
}

/* q6_K half h of a block as 8 registers of 16 unsigned 6-bit values,
 * register g covering exactly the elements of scale 8h + g */
HR_NI void n_q6_half(const hr_block_q6_k *x, int h, uint8x16_t q[8]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m30 = vdupq_n_u8(0x30), m3 = vdupq_n_u8(0x03);
    const uint8_t *ql = x->ql + 64 * h, *qhp = x->qh + 32 * h;
    const uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16);
    const uint8x16_t l2 = vld1q_u8(ql + 32), l3 = vld1q_u8(ql + 48);
    const uint8x16_t h0 = vld1q_u8(qhp), h1 = vld1q_u8(qhp + 16);
    q[0] = vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h0, m3), 4));
    q[1] = vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(h1, m3), 4));
    q[2] = vorrq_u8(vandq_u8(l2, m4), vandq_u8(vshlq_n_u8(h0, 2), m30));
    q[3] = vorrq_u8(vandq_u8(l3, m4), vandq_u8(vshlq_n_u8(h1, 2), m30));
    q[4] = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(h0, m30));
    q[5] = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(h1, m30));
    q[6] = vorrq_u8(vshrq_n_u8(l2, 4), vshlq_n_u8(vshrq_n_u8(h0, 6), 4));
    q[7] = vorrq_u8(vshrq_n_u8(l3, 4), vshlq_n_u8(vshrq_n_u8(h1, 6), 4));
}

/* A K-quant super-block as 16 registers of 16 signed values: register g
 * pairs with activations 16g..16g+15, has the integer scale s[g] and goes
 * to lanes 0-3 (g even: elements 0-15 of a 32-element chunk) or 4-7 (g
 * odd: elements 16-31) */
typedef struct {
    int8x16_t q[16];
    int32_t s[16];
} n_kq;

/* q4_K / q5_K: chunk c (64 elements) is registers 4c..4c+3: low nibbles of
 * bytes 0-15, 16-31 (sub-block 2c), high nibbles of the same (2c+1); q5_K
 * ORs in bit 2c / 2c+1 of qh as 0x10. mn: the 6-bit mins. */
HR_NI void n_unpack_q45_k(const bool q5, const uint8_t *xi, n_kq *w, uint8_t mn[8]) {
    const hr_block_q4_k *x4 = (const hr_block_q4_k *)xi; /* d, dmin, scales lead both */
    const uint8_t *qs = q5 ? ((const hr_block_q5_k *)xi)->qs : x4->qs;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), b4 = vdupq_n_u8(0x10);
    uint8_t sc[8];
    hr_kq_unpack_scales(x4->scales, sc, mn);
    uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);
    if (q5) {
        qh0 = vld1q_u8(((const hr_block_q5_k *)xi)->qh);
        qh1 = vld1q_u8(((const hr_block_q5_k *)xi)->qh + 16);
    }
    for (int c = 0; c < 4; c++, qs += 32) {
        const uint8x16_t qa = vld1q_u8(qs), qb = vld1q_u8(qs + 16);
        uint8x16_t la = vandq_u8(qa, m4), lb = vandq_u8(qb, m4);
        uint8x16_t ha = vshrq_n_u8(qa, 4), hb = vshrq_n_u8(qb, 4);
        if (q5) {
            la = vorrq_u8(la, vandq_u8(vshlq_n_u8(qh0, 4), b4));
            lb = vorrq_u8(lb, vandq_u8(vshlq_n_u8(qh1, 4), b4));
            ha = vorrq_u8(ha, vandq_u8(vshlq_n_u8(qh0, 3), b4));
            hb = vorrq_u8(hb, vandq_u8(vshlq_n_u8(qh1, 3), b4));
            qh0 = vshrq_n_u8(qh0, 2);
            qh1 = vshrq_n_u8(qh1, 2);
        }
        w->q[4 * c] = n_s8(la);
        w->q[4 * c + 1] = n_s8(lb);
        w->q[4 * c + 2] = n_s8(ha);
        w->q[4 * c + 3] = n_s8(hb);
        w->s[4 * c] = w->s[4 * c + 1] = sc[2 * c];
        w->s[4 * c + 2] = w->s[4 * c + 3] = sc[2 * c + 1];
    }
}

/* q6_K: register 8h + g is register g of half h (q - 32, scale 8h + g) */
HR_NI void n_unpack_q6_k(const hr_block_q6_k *x, n_kq *w) {
    const int8x16_t o32 = vdupq_n_s8(32);
    for (int h = 0; h < 2; h++) {
        uint8x16_t q[8];
        n_q6_half(x, h, q);
        for (int g = 0; g < 8; g++) {
            w->q[8 * h + g] = vsubq_s8(n_s8(q[g]), o32);
            w->s[8 * h + g] = x->scales[8 * h + g];
        }
    }
}

/* the lanes of a K-quant super-block against its 256 activations */
HR_NI n_i32x8 n_kq_lanes(const n_kq *w, const int8_t *q8) {
    int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);
    for (int g = 0; g < 8; g++) {
        const int32x4_t pl = n_dot4(vdupq_n_s32(0), w->q[2 * g], vld1q_s8(q8 + 32 * g));
        const int32x4_t ph = n_dot4(vdupq_n_s32(0), w->q[2 * g + 1], vld1q_s8(q8 + 32 * g + 16));
        lo = vmlaq_n_s32(lo, pl, w->s[2 * g]);
        hi = vmlaq_n_s32(hi, ph, w->s[2 * g + 1]);
    }
    return (n_i32x8){lo, hi};
}

/* The row kernels below; gemm_i8mm.c includes only the helpers above. */
#ifndef HR_NEON_HELPERS_ONLY

/* ---- dot products: 32-element blocks ------------------------------------ */

/* Canonical 32-element-block dot, one block at a time; MIN: q4_1 / q5_1
 * (the scalar fmaf(m, s, summs) added after hsum8) */
#define N_DOT_BLOCKS32(NAME, XT, YT, UNPACK, MIN)                                                  \
    static float NAME(int64_t n, const void *w, const void *a) {                                   \
        const XT *x = w;                                                                           \
        const YT *y = a;                                                                           \
        n_f32x8 acc = n_zero8();                                                                   \
        float summs = 0.0f;                                                                        \
        for (int64_t i = 0; i < n / 32; i++) {                                                     \
            if (MIN)                                                                               \
                summs = fmaf(N_MINF(x + i), N_MINA(y + i), summs);                                 \
            n_acc8(&acc, n_h2f(x[i].d) * n_h2f(y[i].d), n_lanes32(UNPACK(x + i), y[i].qs));        \
        }                                                                                          \
        return MIN ? n_hsum8(acc) + summs : n_hsum8(acc);                                          \
    }

#define N_MINF(xb) 0.0f
#define N_MINA(yb) 0.0f
N_DOT_BLOCKS32(dot_q4_0, hr_block_q4_0, hr_block_q8_0, n_unpack_q4_0, 0)
N_DOT_BLOCKS32(dot_q5_0, hr_block_q5_0, hr_block_q8_0, n_unpack_q5_0, 0)
N_DOT_BLOCKS32(dot_q8_0, hr_block_q8_0, hr_block_q8_0, n_unpack_q8_0, 0)
#undef N_MINF
#undef N_MINA
#define N_MINF(xb) n_h2f((xb)->m)
#define N_MINA(yb) n_h2f((yb)->s)
N_DOT_BLOCKS32(dot_q4_1, hr_block_q4_1, hr_block_q8_1, n_unpack_q4_1, 1)
N_DOT_BLOCKS32(dot_q5_1, hr_block_q5_1, hr_block_q8_1, n_unpack_q5_1, 1)
#undef N_MINF
#undef N_MINA

/* ---- dot products: K-quants x Q8_K --------------------------------------- */

/* q4_K: min term in 4 lanes (hsum4); q5_K: in one scalar */
HR_NI float n_dot_q45_k(const bool q5, int64_t n, const void *w, const void *a) {
    const hr_block_q8_k *y = a;
    const size_t xb = q5 ? sizeof(hr_block_q5_k) : sizeof(hr_block_q4_k);
    n_f32x8 acc = n_zero8();
    float32x4_t accm = vdupq_n_f32(0.0f);
    float summs = 0.0f;
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        const uint8_t *xi = (const uint8_t *)w + (size_t)i * xb;
        const hr_block_q4_k *x4 = (const hr_block_q4_k *)xi;
        n_kq u;
        uint8_t mn[8];
        n_unpack_q45_k(q5, xi, &u, mn);
        const float d = y[i].d * n_h2f(x4->d), dmin = -y[i].d * n_h2f(x4->dmin);
        const int32x4_t m4 = n_kq_mins4(mn, y[i].bsums);
        if (q5)
            summs = fmaf(dmin, (float)vaddvq_s32(m4), summs);
        else
            accm = vfmaq_f32(accm, vdupq_n_f32(dmin), vcvtq_f32_s32(m4));
        n_acc8(&acc, d, n_kq_lanes(&u, y[i].qs));
    }
    return n_hsum8(acc) + (q5 ? summs : n_hsum4(accm));
}

static float dot_q4_k(int64_t n, const void *w, const void *a) {
    return n_dot_q45_k(false, n, w, a);
}

static float dot_q5_k(int64_t n, const void *w, const void *a) {
    return n_dot_q45_k(true, n, w, a);
}

static float dot_q6_k(int64_t n, const void *w, const void *a) {
    const hr_block_q6_k *x = w;
    const hr_block_q8_k *y = a;
    n_f32x8 acc = n_zero8();
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        n_kq u;
        n_unpack_q6_k(x + i, &u);
        n_acc8(&acc, y[i].d * n_h2f(x[i].d), n_kq_lanes(&u, y[i].qs));
    }
    return n_hsum8(acc);
}

/* ---- dot products: F32 / F16 / BF16 x F32 -------------------------------- */

HR_NI float32x4_t n_load_f16x4(const uint16_t *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

HR_NI float32x4_t n_load_bf16x4(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

/* f32: the 16 lanes of the older order, element i to lane i % 16 (four
 * registers), separate multiply and add */
static float dot_f32(int64_t n, const void *w, const void *a) {
    const float *x = w, *y = a;
    float32x4_t s[4];
    for (int k = 0; k < 4; k++)
        s[k] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++)
            s[k] = vaddq_f32(s[k], vmulq_f32(vld1q_f32(x + i + 4 * k), vld1q_f32(y + i + 4 * k)));
    float l[HR_CANON_LANES];
    for (int k = 0; k < 4; k++)
        vst1q_f32(l + 4 * k, s[k]);
    for (; i < n; i++)
        l[i % HR_CANON_LANES] += x[i] * y[i];
    return hr_canon_reduce(l);
}

/* f16 / bf16: element i to lane i % 8 by fma, hsum8 */
#define N_DOT_F8_BODY(LOAD4, SCALAR)                                                               \
    n_f32x8 s = n_zero8();                                                                         \
    int64_t i = 0;                                                                                 \
    for (; i + 8 <= n; i += 8) {                                                                   \
        s.lo = vfmaq_f32(s.lo, LOAD4(x + i), vld1q_f32(y + i));                                    \
        s.hi = vfmaq_f32(s.hi, LOAD4(x + i + 4), vld1q_f32(y + i + 4));                            \
    }                                                                                              \
    float l[8];                                                                                    \
    vst1q_f32(l, s.lo);                                                                            \
    vst1q_f32(l + 4, s.hi);                                                                        \
    for (; i < n; i++)                                                                             \
        l[i % 8] = fmaf(SCALAR(x[i]), y[i], l[i % 8]);                                             \
    return hr_canon_hsum8(l);

static float dot_f16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    N_DOT_F8_BODY(n_load_f16x4, n_h2f)
}

static float dot_bf16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    N_DOT_F8_BODY(n_load_bf16x4, hr_bf16_to_fp32)
}

/* ---- dequantizers (bit-exact with the scalar ones) ----------------------- */

static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(dst + i, n_load_f16x4(s + i));
    for (; i < n; i++)
        dst[i] = n_h2f(s[i]);
}

static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(dst + i, n_load_bf16x4(s + i));
    for (; i < n; i++)
        dst[i] = hr_bf16_to_fp32(s[i]);
}

/* dst[0..15] = (float)q[j] * d */
HR_NI void n_store_s8x16_scaled(float *dst, int8x16_t q, float d) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    vst1q_f32(dst, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
    vst1q_f32(dst + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
    vst1q_f32(dst + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
    vst1q_f32(dst + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
}

static void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const hr_block_q4_0 *x = src;
    for (int64_t i = 0; i < n / HR_QK4_0; i++, dst += HR_QK4_0) {
        const n_s8x32 u = n_unpack_q4_0(x + i);
        const float d = n_h2f(x[i].d);
        n_store_s8x16_scaled(dst, u.lo, d);
        n_store_s8x16_scaled(dst + 16, u.hi, d);
    }
}

static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const hr_block_q8_0 *x = src;
    for (int64_t i = 0; i < n / HR_QK8_0; i++, dst += HR_QK8_0) {
        const float d = n_h2f(x[i].d);
        n_store_s8x16_scaled(dst, vld1q_s8(x[i].qs), d);
        n_store_s8x16_scaled(dst + 16, vld1q_s8(x[i].qs + 16), d);
    }
}

/* ---- activation quantizers (bit-exact with the scalar ones) -------------- */

/* 8 x s32x4 (each within int8 range) -> 32 int8 in order */
HR_NI void n_pack_s8x32(const int32x4_t q[8], int8_t *out) {
    for (int k = 0; k < 2; k++) {
        const int16x8_t a = vcombine_s16(vqmovn_s32(q[4 * k]), vqmovn_s32(q[4 * k + 1]));
        const int16x8_t b = vcombine_s16(vqmovn_s32(q[4 * k + 2]), vqmovn_s32(q[4 * k + 3]));
        vst1q_s8(out + 16 * k, vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)));
    }
}

/* one 32-element block: d = amax/127, q = roundf(x * (1/d)) (FCVTAS: ties
 * away from zero, as roundf); amax with FMAXNM (a nan is skipped, as
 * fmaxf); returns sum q */
HR_NI int n_quant_block32(const float *x, int8_t *qs, uint16_t *dh, float *dout) {
    float32x4_t v[8], amax = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        amax = vmaxnmq_f32(amax, vabsq_f32(v[k]));
    }
    const float d = vmaxnmvq_f32(amax) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int32x4_t q[8], sum = vdupq_n_s32(0);
    for (int k = 0; k < 8; k++) {
        q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
        sum = vaddq_s32(sum, q[k]);
    }
    n_pack_s8x32(q, qs);
    *dh = hr_fp32_to_fp16(d);
    *dout = d;
    return vaddvq_s32(sum);
}

static void quant_q8_0(const float *src, void *dst, int64_t n) {
    hr_block_q8_0 *y = dst;
    float d;
    for (int64_t i = 0; i < n / HR_QK8_0; i++, src += HR_QK8_0)
        n_quant_block32(src, y[i].qs, &y[i].d, &d);
}

static void quant_q8_1(const float *src, void *dst, int64_t n) {
    hr_block_q8_1 *y = dst;
    float d;
    for (int64_t i = 0; i < n / HR_QK8_1; i++, src += HR_QK8_1) {
        const int sum = n_quant_block32(src, y[i].qs, &y[i].d, &d);
        y[i].s = hr_fp32_to_fp16((float)sum * d);
    }
}

/* q8_K: the first value of largest magnitude maps to -127; q rounds half to
 * even (FCVTNS, as hr_nearest_int), capped at 127 */
static void quant_q8_k(const float *src, void *dst, int64_t n) {
    hr_block_q8_k *y = dst;
    for (int64_t i = 0; i < n / HR_QK_K; i++, src += HR_QK_K) {
        /* FMAXNM skips nans, as the scalar scan's strict > does */
        float32x4_t amv = vdupq_n_f32(0.0f);
        for (int k = 0; k < 64; k++)
            amv = vmaxnmq_f32(amv, vabsq_f32(vld1q_f32(src + 4 * k)));
        const float amax = vmaxnmvq_f32(amv);
        float max = 0.0f;
        int found = 0;
        for (int k = 0; k < 64 && !found; k++) {
            const uint32x4_t eq = vceqq_f32(vabsq_f32(vld1q_f32(src + 4 * k)), vdupq_n_f32(amax));
            if (vmaxvq_u32(eq))
                for (int j = 0; j < 4 && !found; j++)
                    if (fabsf(src[4 * k + j]) == amax) {
                        max = src[4 * k + j];
                        found = 1;
                    }
        }
        if (amax == 0.0f || !found) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -127.0f / max;
        const int32x4_t c127 = vdupq_n_s32(127);
        for (int g = 0; g < 8; g++) {
            int32x4_t q[8];
            for (int k = 0; k < 8; k++)
                q[k] = vminq_s32(
                    vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(src + 32 * g + 4 * k), iscale)), c127);
            n_pack_s8x32(q, y[i].qs + 32 * g);
            y[i].bsums[2 * g] =
                (int16_t)vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
            y[i].bsums[2 * g + 1] =
                (int16_t)vaddvq_s32(vaddq_s32(vaddq_s32(q[4], q[5]), vaddq_s32(q[6], q[7])));
        }
        y[i].d = 1.0f / iscale;
    }
}

/* FCVTN rounds to nearest even (FPCR default), keeps subnormals, and quiets
 * a nan keeping its top payload bits: hr_fp32_to_fp16 exactly */
static void quant_f16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(d + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    for (; i < n; i++)
        d[i] = hr_fp32_to_fp16(src[i]);
}

/* ---- the table ----------------------------------------------------------- */

HR_NI void hr_neon_fill_common(hr_kernels *k) {
    k->vec_dot[HR_TYPE_F32] = dot_f32;
    k->vec_dot[HR_TYPE_F16] = dot_f16;
    k->vec_dot[HR_TYPE_BF16] = dot_bf16;
    k->vec_dot[HR_TYPE_Q4_0] = dot_q4_0;
    k->vec_dot[HR_TYPE_Q4_1] = dot_q4_1;
    k->vec_dot[HR_TYPE_Q5_0] = dot_q5_0;
    k->vec_dot[HR_TYPE_Q5_1] = dot_q5_1;
    k->vec_dot[HR_TYPE_Q8_0] = dot_q8_0;
    k->vec_dot[HR_TYPE_Q4_K] = dot_q4_k;
    k->vec_dot[HR_TYPE_Q5_K] = dot_q5_k;
    k->vec_dot[HR_TYPE_Q6_K] = dot_q6_k;

    k->dequant[HR_TYPE_F16] = dequant_f16;
    k->dequant[HR_TYPE_BF16] = dequant_bf16;
    k->dequant[HR_TYPE_Q4_0] = dequant_q4_0;
    k->dequant[HR_TYPE_Q8_0] = dequant_q8_0;

    k->quant[HR_TYPE_F16] = quant_f16;
    k->quant[HR_TYPE_Q8_0] = quant_q8_0;
    k->quant[HR_TYPE_Q8_1] = quant_q8_1;
    k->quant[HR_TYPE_Q8_K] = quant_q8_k;
}

#endif /* HR_NEON_HELPERS_ONLY */

#endif
