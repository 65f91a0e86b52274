/* gemm_i8mm.c - prompt-processing tiles on aarch64 with the i8mm extension
 * (-march=armv8.2-a+dotprod+i8mm; Neoverse V1/N2/V2, Graviton 3/4, Apple M2
 * and later). SMMLA multiplies a 2 x 8 by an 8 x 2 matrix of signed bytes
 * into a 2 x 2 tile of s32 sums: two weight rows against two activation rows
 * per instruction, where SDOT gives one row pair. Weight rows and activation
 * rows are interleaved in pairs, 8 bytes of each in a register, so one
 * 32-element block of a row pair against a token pair is 4 SMMLA.
 *
 * A tile is up to 4 rows x 4 tokens (2 x 2 SMMLA tiles): every weight block
 * is unpacked once for 4 tokens and every activation block interleaved once
 * for 4 rows. A 2 x 2 integer tile holds each pair's exact block sum (K-quant
 * sub-block scales applied in integers first), so the float part follows
 * kernels/canon-impl.h per pair with vector operations: the block term,
 * lane b % 16 (kept in a [16][2][2] array of 2 x 2 tiles), the fixed tree.
 * Rows or tokens left at an edge reuse the last one (results not stored), so
 * every shape goes through SMMLA. Results equal vec_dot (and the scalar
 * reference) bit for bit.
 * Only reached through the table quant.c fills when AT_HWCAP2 has I8MM. */
#define HR_NEON_HELPERS_ONLY 1
#include "kernels/neon-impl.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "gemm_i8mm.c must be built with the i8mm extension"
#endif

/* 32 bytes of a row pair (or token pair), 8-byte chunks interleaved:
 * c[k] = [a[8k..8k+7], b[8k..8k+7]], the SMMLA operand layout */
typedef struct {
    int8x16_t c[4];
} m_pair32;

HR_NI int8x16_t m_zip1(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

HR_NI int8x16_t m_zip2(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* a = (a_lo, a_hi), b = (b_lo, b_hi): 32 bytes each */
HR_NI m_pair32 m_pair(int8x16_t a_lo, int8x16_t a_hi, int8x16_t b_lo, int8x16_t b_hi) {
    return (m_pair32){
        {m_zip1(a_lo, b_lo), m_zip2(a_lo, b_lo), m_zip1(a_hi, b_hi), m_zip2(a_hi, b_hi)}};
}

HR_NI m_pair32 m_pair_load(const int8_t *a, const int8_t *b) {
    return m_pair(vld1q_s8(a), vld1q_s8(a + 16), vld1q_s8(b), vld1q_s8(b + 16));
}

/* [a0.b0, a0.b1, a1.b0, a1.b1] over 32 elements */
HR_NI int32x4_t m_mmla32(const m_pair32 *x, const m_pair32 *y) {
    int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), x->c[0], y->c[0]);
    s = vmmlaq_s32(s, x->c[1], y->c[1]);
    s = vmmlaq_s32(s, x->c[2], y->c[2]);
    return vmmlaq_s32(s, x->c[3], y->c[3]);
}

/* [a0.b0, a0.b1, a1.b0, a1.b1] over 16 elements */
HR_NI int32x4_t m_mmla16(int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1) {
    const int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), m_zip1(a0, a1), m_zip1(b0, b1));
    return vmmlaq_s32(s, m_zip2(a0, a1), m_zip2(b0, b1));
}

/* lanes in tile order from per-row (r) and per-token (t) values */
HR_NI float32x4_t m_rows(float r0, float r1) { return (float32x4_t){r0, r0, r1, r1}; }
HR_NI float32x4_t m_toks(float t0, float t1) { return (float32x4_t){t0, t1, t0, t1}; }
HR_NI int32x4_t m_rows_i(int r0, int r1) { return (int32x4_t){r0, r0, r1, r1}; }

HR_NI float m_h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return n_h2f(h);
}

/* out[r][t] from the canonical lanes of the 2 x 2 tiles (the fixed tree,
 * per pair) */
HR_NI void m_out(float out[4][4], float32x4_t lanes[HR_CANON_LANES][2][2], const int RP,
                 const int TP) {
    float32x4_t acc[2][2];
    for (int rp = 0; rp < RP; rp++)
        for (int tp = 0; tp < TP; tp++) {
            for (int h = HR_CANON_LANES / 2; h >= 1; h /= 2)
                for (int l = 0; l < h; l++)
                    lanes[l][rp][tp] = vaddq_f32(lanes[l][rp][tp], lanes[l + h][rp][tp]);
            acc[rp][tp] = lanes[0][rp][tp];
        }
    for (int rp = 0; rp < RP; rp++)
        for (int tp = 0; tp < TP; tp++) {
            out[2 * rp][2 * tp] = vgetq_lane_f32(acc[rp][tp], 0);
            out[2 * rp][2 * tp + 1] = vgetq_lane_f32(acc[rp][tp], 1);
            out[2 * rp + 1][2 * tp] = vgetq_lane_f32(acc[rp][tp], 2);
            out[2 * rp + 1][2 * tp + 1] = vgetq_lane_f32(acc[rp][tp], 3);
        }
}

#define M_ZERO_ACC(acc)                                                                            \
    float32x4_t acc[HR_CANON_LANES][2][2];                                                         \
    for (int l_ = 0; l_ < HR_CANON_LANES; l_++)                                                    \
        for (int k_ = 0; k_ < 4; k_++)                                                             \
    acc[l_][k_ / 2][k_ % 2] = vdupq_n_f32(0.0f)

/* ---- 32-element blocks: q4_0, q4_1, q5_0, q5_1, q8_0 --------------------- */

enum { M_Q4_0, M_Q4_1, M_Q5_0, M_Q5_1, M_Q8_0 };

HR_NI n_s8x32 m_unpack(const int kind, const uint8_t *b) {
    switch (kind) {
    case M_Q4_0:
        return n_unpack_q4_0((const hr_block_q4_0 *)b);
    case M_Q4_1:
        return n_unpack_q4_1((const hr_block_q4_1 *)b);
    case M_Q5_0:
        return n_unpack_q5_0((const hr_block_q5_0 *)b);
    case M_Q5_1:
        return n_unpack_q5_1((const hr_block_q5_1 *)b);
    default:
        return n_unpack_q8_0((const hr_block_q8_0 *)b);
    }
}

HR_NI size_t m_block_bytes(const int kind) {
    switch (kind) {
    case M_Q4_0:
        return sizeof(hr_block_q4_0);
    case M_Q4_1:
        return sizeof(hr_block_q4_1);
    case M_Q5_0:
        return sizeof(hr_block_q5_0);
    case M_Q5_1:
        return sizeof(hr_block_q5_1);
    default:
        return sizeof(hr_block_q8_0);
    }
}

/* Every layout starts with d (fp16); q4_1/q5_1 follow it with m and dot
 * with q8_1 (d, s = d * sum q, qs), the others with q8_0 (d, qs). */
HR_NI void tile_b32(const int kind, int64_t n, const int RP, const int TP,
                    const uint8_t *const xr[4], const uint8_t *const ya[4], float out[4][4]) {
    const bool q81 = kind == M_Q4_1 || kind == M_Q5_1;
    const size_t xb = m_block_bytes(kind);
    const size_t yb = q81 ? sizeof(hr_block_q8_1) : sizeof(hr_block_q8_0), yq = q81 ? 4 : 2;
    const int64_t nb = n / 32;
    M_ZERO_ACC(acc);
    for (int64_t i = 0; i < nb; i++) {
        m_pair32 x[2], y[2];
        float32x4_t dx[2], mx[2], dy[2], sy[2];
        for (int rp = 0; rp < RP; rp++) {
            const uint8_t *b0 = xr[2 * rp] + (size_t)i * xb, *b1 = xr[2 * rp + 1] + (size_t)i * xb;
            const n_s8x32 u0 = m_unpack(kind, b0), u1 = m_unpack(kind, b1);
            x[rp] = m_pair(u0.lo, u0.hi, u1.lo, u1.hi);
            dx[rp] = m_rows(m_h2f(b0), m_h2f(b1));
            if (q81)
                mx[rp] = m_rows(m_h2f(b0 + 2), m_h2f(b1 + 2));
        }
        for (int tp = 0; tp < TP; tp++) {
            const uint8_t *c0 = ya[2 * tp] + (size_t)i * yb, *c1 = ya[2 * tp + 1] + (size_t)i * yb;
            y[tp] = m_pair_load((const int8_t *)(c0 + yq), (const int8_t *)(c1 + yq));
            dy[tp] = m_toks(m_h2f(c0), m_h2f(c1));
            if (q81)
                sy[tp] = m_toks(m_h2f(c0 + 2), m_h2f(c1 + 2));
        }
        for (int rp = 0; rp < RP; rp++)
            for (int tp = 0; tp < TP; tp++) {
                const int32x4_t s = m_mmla32(&x[rp], &y[tp]);
                float32x4_t t = vmulq_f32(vmulq_f32(dx[rp], dy[tp]), vcvtq_f32_s32(s));
                if (q81)
                    t = vaddq_f32(t, vmulq_f32(mx[rp], sy[tp]));
                float32x4_t *l = &acc[i % HR_CANON_LANES][rp][tp];
                *l = vaddq_f32(*l, t);
            }
    }
    m_out(out, acc, RP, TP);
}

/* ---- q4_K / q5_K x q8_K -------------------------------------------------- */

/* Per super-block: sub-block j's 2 x 2 integer tile times [sc_r0[j] x2,
 * sc_r1[j] x2], summed over the 8 sub-blocks; then d * sum - dmin * mins. */
HR_NI void tile_q45_k(const bool q5, int64_t n, const int RP, const int TP,
                      const uint8_t *const xr[4], const uint8_t *const ya[4], float out[4][4]) {
    const size_t xb = q5 ? sizeof(hr_block_q5_k) : sizeof(hr_block_q4_k);
    const int64_t nb = n / HR_QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), b4 = vdupq_n_u8(0x10);
    M_ZERO_ACC(acc);
    for (int64_t i = 0; i < nb; i++) {
        const hr_block_q8_k *yk[4];
        for (int t = 0; t < 2 * TP; t++)
            yk[t] = (const hr_block_q8_k *)ya[t] + i;
        const hr_block_q4_k *x4[4]; /* d, dmin, scales lead both layouts */
        const uint8_t *qs[4];
        uint8_t sc[4][8], mn[4][8];
        uint8x16_t qh[4][2];
        for (int r = 0; r < 2 * RP; r++) {
            const uint8_t *xi = xr[r] + (size_t)i * xb;
            x4[r] = (const hr_block_q4_k *)xi;
            qs[r] = q5 ? ((const hr_block_q5_k *)xi)->qs : x4[r]->qs;
            hr_kq_unpack_scales(x4[r]->scales, sc[r], mn[r]);
            if (q5) {
                qh[r][0] = vld1q_u8(((const hr_block_q5_k *)xi)->qh);
                qh[r][1] = vld1q_u8(((const hr_block_q5_k *)xi)->qh + 16);
            }
        }
        int32x4_t isum[2][2] = {{vdupq_n_s32(0), vdupq_n_s32(0)}, {vdupq_n_s32(0), vdupq_n_s32(0)}};
        for (int c = 0; c < 4; c++) {
            m_pair32 yl[2], yh[2];
            for (int tp = 0; tp < TP; tp++) {
                yl[tp] = m_pair_load(yk[2 * tp]->qs + 64 * c, yk[2 * tp + 1]->qs + 64 * c);
                yh[tp] =
                    m_pair_load(yk[2 * tp]->qs + 64 * c + 32, yk[2 * tp + 1]->qs + 64 * c + 32);
            }
            for (int rp = 0; rp < RP; rp++) {
                int8x16_t lo[2][2], hi[2][2]; /* [row of the pair][16-byte half] */
                for (int k = 0; k < 2; k++) {
                    const int r = 2 * rp + k;
                    for (int e = 0; e < 2; e++) {
                        const uint8x16_t q = vld1q_u8(qs[r] + 32 * c + 16 * e);
                        uint8x16_t l = vandq_u8(q, m4), h = vshrq_n_u8(q, 4);
                        if (q5) {
                            l = vorrq_u8(l, vandq_u8(vshlq_n_u8(qh[r][e], 4), b4));
                            h = vorrq_u8(h, vandq_u8(vshlq_n_u8(qh[r][e], 3), b4));
                            qh[r][e] = vshrq_n_u8(qh[r][e], 2);
                        }
                        lo[k][e] = n_s8(l);
                        hi[k][e] = n_s8(h);
                    }
                }
                const m_pair32 xl = m_pair(lo[0][0], lo[0][1], lo[1][0], lo[1][1]);
                const m_pair32 xh = m_pair(hi[0][0], hi[0][1], hi[1][0], hi[1][1]);
                const int r0 = 2 * rp, r1 = 2 * rp + 1;
                const int32x4_t scl = m_rows_i(sc[r0][2 * c], sc[r1][2 * c]);
                const int32x4_t sch = m_rows_i(sc[r0][2 * c + 1], sc[r1][2 * c + 1]);
                for (int tp = 0; tp < TP; tp++) {
                    isum[rp][tp] = vmlaq_s32(isum[rp][tp], m_mmla32(&xl, &yl[tp]), scl);
                    isum[rp][tp] = vmlaq_s32(isum[rp][tp], m_mmla32(&xh, &yh[tp]), sch);
                }
            }
        }
        for (int rp = 0; rp < RP; rp++)
            for (int tp = 0; tp < TP; tp++) {
                const int r0 = 2 * rp, r1 = 2 * rp + 1, t0 = 2 * tp, t1 = 2 * tp + 1;
                const float32x4_t dy = m_toks(yk[t0]->d, yk[t1]->d);
                const float32x4_t d = vmulq_f32(m_rows(n_h2f(x4[r0]->d), n_h2f(x4[r1]->d)), dy);
                const float32x4_t dm =
                    vmulq_f32(m_rows(n_h2f(x4[r0]->dmin), n_h2f(x4[r1]->dmin)), dy);
                const int32x4_t mins = {
                    n_kq_mins(mn[r0], yk[t0]->bsums), n_kq_mins(mn[r0], yk[t1]->bsums),
                    n_kq_mins(mn[r1], yk[t0]->bsums), n_kq_mins(mn[r1], yk[t1]->bsums)};
                const float32x4_t t = vsubq_f32(vmulq_f32(d, vcvtq_f32_s32(isum[rp][tp])),
                                                vmulq_f32(dm, vcvtq_f32_s32(mins)));
                float32x4_t *l = &acc[i % HR_CANON_LANES][rp][tp];
                *l = vaddq_f32(*l, t);
            }
    }
    m_out(out, acc, RP, TP);
}

/* ---- q6_K x q8_K --------------------------------------------------------- */

/* 16 groups of 16 elements, one int8 scale each: 2 SMMLA per group */
HR_NI void tile_q6_k(int64_t n, const int RP, const int TP, const uint8_t *const xr[4],
                     const uint8_t *const ya[4], float out[4][4]) {
    const int64_t nb = n / HR_QK_K;
    const int8x16_t o32 = vdupq_n_s8(32);
    M_ZERO_ACC(acc);
    for (int64_t i = 0; i < nb; i++) {
        const hr_block_q8_k *yk[4];
        for (int t = 0; t < 2 * TP; t++)
            yk[t] = (const hr_block_q8_k *)ya[t] + i;
        const hr_block_q6_k *x6[4];
        for (int r = 0; r < 2 * RP; r++)
            x6[r] = (const hr_block_q6_k *)xr[r] + i;
        int32x4_t isum[2][2] = {{vdupq_n_s32(0), vdupq_n_s32(0)}, {vdupq_n_s32(0), vdupq_n_s32(0)}};
        for (int h = 0; h < 2; h++)
            for (int rp = 0; rp < RP; rp++) {
                const int r0 = 2 * rp, r1 = 2 * rp + 1;
                uint8x16_t q0[8], q1[8];
                n_q6_half(x6[r0], h, q0);
                n_q6_half(x6[r1], h, q1);
                for (int g = 0; g < 8; g++) {
                    const int8x16_t a0 = vsubq_s8(n_s8(q0[g]), o32);
                    const int8x16_t a1 = vsubq_s8(n_s8(q1[g]), o32);
                    const int32x4_t sc =
                        m_rows_i(x6[r0]->scales[8 * h + g], x6[r1]->scales[8 * h + g]);
                    for (int tp = 0; tp < TP; tp++) {
                        const int8_t *p0 = yk[2 * tp]->qs + 128 * h + 16 * g;
                        const int8_t *p1 = yk[2 * tp + 1]->qs + 128 * h + 16 * g;
                        isum[rp][tp] = vmlaq_s32(isum[rp][tp],
                                                 m_mmla16(a0, a1, vld1q_s8(p0), vld1q_s8(p1)), sc);
                    }
                }
            }
        for (int rp = 0; rp < RP; rp++)
            for (int tp = 0; tp < TP; tp++) {
                const float32x4_t d =
                    vmulq_f32(m_rows(n_h2f(x6[2 * rp]->d), n_h2f(x6[2 * rp + 1]->d)),
                              m_toks(yk[2 * tp]->d, yk[2 * tp + 1]->d));
                float32x4_t *l = &acc[i % HR_CANON_LANES][rp][tp];
                *l = vaddq_f32(*l, vmulq_f32(d, vcvtq_f32_s32(isum[rp][tp])));
            }
    }
    m_out(out, acc, RP, TP);
}

/* ---- drivers ------------------------------------------------------------- */

/* hr_gemm_fn over any nr x nt in tiles of up to 4 x 4; at an edge the last
 * row / token stands in for the missing ones and only real ones are stored */
#define M_DRIVER(NAME, KERN)                                                                       \
    static void NAME(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a,           \
                     size_t as, float *y, size_t ys) {                                             \
        const uint8_t *wb = w, *ab = a;                                                            \
        for (int t = 0; t < nt; t += 4) {                                                          \
            const int tn = nt - t < 4 ? nt - t : 4;                                                \
            for (int r = 0; r < nr; r += 4) {                                                      \
                const int rn = nr - r < 4 ? nr - r : 4;                                            \
                const uint8_t *xr[4], *ya[4];                                                      \
                for (int k = 0; k < 4; k++) {                                                      \
                    xr[k] = wb + (size_t)(r + (k < rn ? k : rn - 1)) * ws;                         \
                    ya[k] = ab + (size_t)(t + (k < tn ? k : tn - 1)) * as;                         \
                }                                                                                  \
                float out[4][4];                                                                   \
                if (rn > 2 && tn > 2)                                                              \
                    KERN(n, 2, 2, xr, ya, out);                                                    \
                else if (rn > 2)                                                                   \
                    KERN(n, 2, 1, xr, ya, out);                                                    \
                else if (tn > 2)                                                                   \
                    KERN(n, 1, 2, xr, ya, out);                                                    \
                else                                                                               \
                    KERN(n, 1, 1, xr, ya, out);                                                    \
                for (int tt = 0; tt < tn; tt++)                                                    \
                    for (int rr = 0; rr < rn; rr++)                                                \
                        y[(size_t)(t + tt) * ys + (size_t)(r + rr)] = out[rr][tt];                 \
            }                                                                                      \
        }                                                                                          \
    }

#define M_KERN_B32(NAME, KIND)                                                                     \
    HR_NI void NAME(int64_t n, const int RP, const int TP, const uint8_t *const xr[4],             \
                    const uint8_t *const ya[4], float out[4][4]) {                                 \
        tile_b32(KIND, n, RP, TP, xr, ya, out);                                                    \
    }

M_KERN_B32(kern_q4_0, M_Q4_0)
M_KERN_B32(kern_q4_1, M_Q4_1)
M_KERN_B32(kern_q5_0, M_Q5_0)
M_KERN_B32(kern_q5_1, M_Q5_1)
M_KERN_B32(kern_q8_0, M_Q8_0)

HR_NI void kern_q4_k(int64_t n, const int RP, const int TP, const uint8_t *const xr[4],
                     const uint8_t *const ya[4], float out[4][4]) {
    tile_q45_k(false, n, RP, TP, xr, ya, out);
}

HR_NI void kern_q5_k(int64_t n, const int RP, const int TP, const uint8_t *const xr[4],
                     const uint8_t *const ya[4], float out[4][4]) {
    tile_q45_k(true, n, RP, TP, xr, ya, out);
}

M_DRIVER(gemm_q4_0, kern_q4_0)
M_DRIVER(gemm_q4_1, kern_q4_1)
M_DRIVER(gemm_q5_0, kern_q5_0)
M_DRIVER(gemm_q5_1, kern_q5_1)
M_DRIVER(gemm_q8_0, kern_q8_0)
M_DRIVER(gemm_q4_k, kern_q4_k)
M_DRIVER(gemm_q5_k, kern_q5_k)
M_DRIVER(gemm_q6_k, tile_q6_k)

void hr_gemm_fill_i8mm(hr_kernels *k) {
    k->gemm[HR_TYPE_Q4_0] = gemm_q4_0;
    k->gemm[HR_TYPE_Q4_1] = gemm_q4_1;
    k->gemm[HR_TYPE_Q5_0] = gemm_q5_0;
    k->gemm[HR_TYPE_Q5_1] = gemm_q5_1;
    k->gemm[HR_TYPE_Q8_0] = gemm_q8_0;
    k->gemm[HR_TYPE_Q4_K] = gemm_q4_k;
    k->gemm[HR_TYPE_Q5_K] = gemm_q5_k;
    k->gemm[HR_TYPE_Q6_K] = gemm_q6_k;
}
