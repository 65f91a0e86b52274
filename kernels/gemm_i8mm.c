/* gemm_i8mm.c - prompt-processing tiles of the aarch64 i8mm table
 * (-march=armv8.2-a+dotprod+i8mm; Neoverse V1/N2/V2, Graviton 3/4, Apple M2
 * and later).
 *
 * The canonical order (kernels/canon-impl.h) keeps one float lane per
 * 4-element group of a 32-element chunk. SMMLA sums 8 products per s32
 * lane (a 2 x 8 by 8 x 2 byte matrix product), which merges two groups, so
 * it cannot produce those lanes; the tiles therefore use SDOT (4 products
 * per lane, exactly the groups) through the block helpers of neon-impl.h
 * that the dotprod vec_dot uses. A tile is up to 4 rows x 4 tokens: every
 * weight block is unpacked once for the tile's tokens and each (row,
 * token) pair follows vec_dot's steps (integer lanes, VFMA per block,
 * hsum8, the min term), so results equal vec_dot (and the scalar
 * reference) bit for bit. Only reached through the table quant.c fills
 * when AT_HWCAP2 has I8MM. */
#define HR_NEON_HELPERS_ONLY 1
#include "kernels/neon-impl.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8) || !HR_NEON_SDOT
#error "gemm_i8mm.c must be built with the dotprod and i8mm extensions"
#endif

HR_NI float m_h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return n_h2f(h);
}

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
HR_NI void tile_b32(const int kind, int64_t n, const int RN, const int TN,
                    const uint8_t *const xr[4], const uint8_t *const ya[4], float out[4][4]) {
    const bool q81 = kind == M_Q4_1 || kind == M_Q5_1;
    const size_t xb = m_block_bytes(kind);
    const size_t yb = q81 ? sizeof(hr_block_q8_1) : sizeof(hr_block_q8_0), yq = q81 ? 4 : 2;
    n_f32x8 acc[4][4];
    float summs[4][4];
    for (int r = 0; r < RN; r++)
        for (int t = 0; t < TN; t++) {
            acc[r][t] = n_zero8();
            summs[r][t] = 0.0f;
        }
    for (int64_t i = 0; i < n / 32; i++) {
        n_s8x32 u[4];
        float dx[4], mx[4];
        for (int r = 0; r < RN; r++) {
            const uint8_t *b = xr[r] + (size_t)i * xb;
            u[r] = m_unpack(kind, b);
            dx[r] = m_h2f(b);
            mx[r] = q81 ? m_h2f(b + 2) : 0.0f;
        }
        for (int t = 0; t < TN; t++) {
            const uint8_t *c = ya[t] + (size_t)i * yb;
            const float dy = m_h2f(c), sy = q81 ? m_h2f(c + 2) : 0.0f;
            const int8_t *q8 = (const int8_t *)(c + yq);
            for (int r = 0; r < RN; r++) {
                if (q81)
                    summs[r][t] = fmaf(mx[r], sy, summs[r][t]);
                n_acc8(&acc[r][t], dx[r] * dy, n_lanes32(u[r], q8));
            }
        }
    }
    for (int r = 0; r < RN; r++)
        for (int t = 0; t < TN; t++)
            out[r][t] = q81 ? n_hsum8(acc[r][t]) + summs[r][t] : n_hsum8(acc[r][t]);
}

/* ---- K-quants x q8_K ----------------------------------------------------- */

/* q4_K (min term in 4 lanes), q5_K (in a scalar), q6_K (none) */
HR_NI void tile_k(const int kind, int64_t n, const int RN, const int TN, const uint8_t *const xr[4],
                  const uint8_t *const ya[4], float out[4][4]) {
    const bool q6 = kind == HR_TYPE_Q6_K, q5 = kind == HR_TYPE_Q5_K;
    const size_t xb = q6   ? sizeof(hr_block_q6_k)
                      : q5 ? sizeof(hr_block_q5_k)
                           : sizeof(hr_block_q4_k);
    n_f32x8 acc[4][4];
    float32x4_t accm[4][4];
    float summs[4][4];
    for (int r = 0; r < RN; r++)
        for (int t = 0; t < TN; t++) {
            acc[r][t] = n_zero8();
            accm[r][t] = vdupq_n_f32(0.0f);
            summs[r][t] = 0.0f;
        }
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        n_kq u[4];
        uint8_t mn[4][8];
        float dw[4], dmw[4];
        for (int r = 0; r < RN; r++) {
            const uint8_t *xi = xr[r] + (size_t)i * xb;
            if (q6) {
                n_unpack_q6_k((const hr_block_q6_k *)xi, &u[r]);
                dw[r] = n_h2f(((const hr_block_q6_k *)xi)->d);
                dmw[r] = 0.0f;
            } else {
                const hr_block_q4_k *x4 = (const hr_block_q4_k *)xi;
                n_unpack_q45_k(q5, xi, &u[r], mn[r]);
                dw[r] = n_h2f(x4->d);
                dmw[r] = n_h2f(x4->dmin);
            }
        }
        for (int t = 0; t < TN; t++) {
            const hr_block_q8_k *yk = (const hr_block_q8_k *)ya[t] + i;
            for (int r = 0; r < RN; r++) {
                if (!q6) {
                    const float dmin = -yk->d * dmw[r];
                    const int32x4_t m4 = n_kq_mins4(mn[r], yk->bsums);
                    if (q5)
                        summs[r][t] = fmaf(dmin, (float)vaddvq_s32(m4), summs[r][t]);
                    else
                        accm[r][t] = vfmaq_f32(accm[r][t], vdupq_n_f32(dmin), vcvtq_f32_s32(m4));
                }
                n_acc8(&acc[r][t], yk->d * dw[r], n_kq_lanes(&u[r], yk->qs));
            }
        }
    }
    for (int r = 0; r < RN; r++)
        for (int t = 0; t < TN; t++)
            out[r][t] = q6   ? n_hsum8(acc[r][t])
                        : q5 ? n_hsum8(acc[r][t]) + summs[r][t]
                             : n_hsum8(acc[r][t]) + n_hsum4(accm[r][t]);
}

/* ---- drivers ------------------------------------------------------------- */

/* hr_gemm_fn over any nr x nt in tiles of up to 4 x 4 (the full tile with
 * constant bounds) */
#define M_DRIVER(NAME, KERN, KIND)                                                                 \
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
                if (rn == 4 && tn == 4)                                                            \
                    KERN(KIND, n, 4, 4, xr, ya, out);                                              \
                else                                                                               \
                    KERN(KIND, n, rn, tn, xr, ya, out);                                            \
                for (int tt = 0; tt < tn; tt++)                                                    \
                    for (int rr = 0; rr < rn; rr++)                                                \
                        y[(size_t)(t + tt) * ys + (size_t)(r + rr)] = out[rr][tt];                 \
            }                                                                                      \
        }                                                                                          \
    }

M_DRIVER(gemm_q4_0, tile_b32, M_Q4_0)
M_DRIVER(gemm_q4_1, tile_b32, M_Q4_1)
M_DRIVER(gemm_q5_0, tile_b32, M_Q5_0)
M_DRIVER(gemm_q5_1, tile_b32, M_Q5_1)
M_DRIVER(gemm_q8_0, tile_b32, M_Q8_0)
M_DRIVER(gemm_q4_k, tile_k, HR_TYPE_Q4_K)
M_DRIVER(gemm_q5_k, tile_k, HR_TYPE_Q5_K)
M_DRIVER(gemm_q6_k, tile_k, HR_TYPE_Q6_K)

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
