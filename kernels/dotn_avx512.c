/* dotn_avx512.c - decode of several sequences at once on AVX-512 VNNI
 * (hr_vec_dot_n_fn): each weight row is unpacked once for up to
 * HR_DOT_N_MAX activation columns, and every (row, column) value is
 * bit-identical to the table's vec_dot, which for Q4_0 is this file's
 * hr_dot_q4_0_vnni512 (the same code with one column) and for Q6_K the
 * 512-bit VNNI vec_dot of quant_avx512.c.
 *
 * Q4_0 runs in groups of 16 blocks with one block per 32-bit lane: the
 * weights of a group are brought into that layout by 16 loads and an
 * in-lane transpose (vectors g = 0..7: bytes 4g..4g+3 of the 16 blocks'
 * values, nibbles 0..15 as u8), a column's q8 bytes the same way (s8, with
 * -8 * sum(y) per block and its dy per lane), once per call for all rows.
 * Per (row, column, group) that leaves 8 vpdpbusd (64 products each, every
 * lane's integer sum is its block's whole exact dot product), one convert,
 * the lane scales dx * dy (exact: two fp16 significands) and one FMA into
 * the column's accumulator; the row's value is the 16-lane reduction of it.
 * Lanes past the last block get dx = 0 and contribute exact zeros. The
 * float operations of a (row, column) depend only on that row and column,
 * in the same order whatever the number of columns, so the results are
 * those of vec_dot bit for bit (test_gemm checks every entry). Q6_K (the
 * output head of the common quantized models): each super-block of a row
 * is unpacked once for all columns. */
#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <string.h>

#define HR_DI static inline __attribute__((always_inline))
#define HR_UNROLL _Pragma("GCC unroll 8")

/* V[g] lane b = the 4 bytes at p[b] + 4g (g < 4): 16 loads of 16 bytes and
 * a 4 x 4 dword transpose inside each 128-bit lane. */
HR_DI void dn_tr16x4(const uint8_t *const *p, __m512i V[4]) {
    __m512i B[4];
    HR_UNROLL
    for (int j = 0; j < 4; j++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p[j]));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p[4 + j]), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p[8 + j]), 2);
        B[j] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p[12 + j]), 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(B[0], B[1]), t1 = _mm512_unpackhi_epi32(B[0], B[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(B[2], B[3]), t3 = _mm512_unpackhi_epi32(B[2], B[3]);
    V[0] = _mm512_unpacklo_epi64(t0, t2);
    V[1] = _mm512_unpackhi_epi64(t0, t2);
    V[2] = _mm512_unpacklo_epi64(t1, t3);
    V[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* lane b: fp16 at base + b * stride as a float (lanes outside m: 0) */
HR_DI __m512 dn_scales16(const uint8_t *base, int stride, __mmask16 m) {
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(stride));
    const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, base, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* A column's group of 16 blocks in lane layout (640 bytes). */
typedef struct {
    __m512i y[8]; /* bytes 4g..4g+3 of each block's q8 values */
    __m512i c;    /* -8 * sum(y) per block */
    __m512 d;     /* dy per block, 0 past the last block */
} dn_colg;

/* blocks per group, groups per chunk of prepared columns (2048 elements:
 * 20 KiB for 8 columns), rows per block of spilled accumulators */
#define DN_GB 16
#define DN_GC 4
#define DN_RB 32

/* Group of blocks [b0, b0 + nbk) (1 <= nbk <= 16) of the Q8_0 row y. */
HR_DI void dn_prep(const uint8_t *y, int64_t b0, int nbk, dn_colg *o) {
    const size_t yb = sizeof(hr_block_q8_0);
    const uint8_t *p[DN_GB];
    for (int b = 0; b < DN_GB; b++)
        p[b] = y + (size_t)(b0 + (b < nbk ? b : nbk - 1)) * yb + 2;
    __m512i V[4];
    dn_tr16x4(p, V);
    for (int g = 0; g < 4; g++)
        o->y[g] = V[g];
    for (int b = 0; b < DN_GB; b++)
        p[b] += 16;
    dn_tr16x4(p, V);
    __m512i s = _mm512_setzero_si512();
    const __m512i eight = _mm512_set1_epi8(8);
    for (int g = 0; g < 4; g++) {
        o->y[4 + g] = V[g];
        s = _mm512_dpbusd_epi32(s, eight, o->y[g]);
        s = _mm512_dpbusd_epi32(s, eight, V[g]);
    }
    o->c = _mm512_sub_epi32(_mm512_setzero_si512(), s);
    o->d = dn_scales16(y + (size_t)b0 * yb, (int)yb, (__mmask16)((1u << nbk) - 1u));
}

/* A row's group of blocks [b0, b0 + nbk): W[g] pairs with column y[g]
 * (low nibbles of bytes 4g..4g+3 for g < 4, high nibbles of 4(g-4).. for
 * g >= 4, as the q4_0 element order has it); *dx per block. */
HR_DI void dn_wgroup(const uint8_t *x, int64_t b0, int nbk, __m512i W[8], __m512 *dx) {
    const size_t xb = sizeof(hr_block_q4_0);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const uint8_t *p[DN_GB];
    for (int b = 0; b < DN_GB; b++)
        p[b] = x + (size_t)(b0 + (b < nbk ? b : nbk - 1)) * xb + 2;
    __m512i V[4];
    dn_tr16x4(p, V);
    for (int g = 0; g < 4; g++) {
        W[g] = _mm512_and_si512(V[g], m4);
        W[4 + g] = _mm512_and_si512(_mm512_srli_epi32(V[g], 4), m4);
    }
    *dx = dn_scales16(x + (size_t)b0 * xb, (int)xb, (__mmask16)((1u << nbk) - 1u));
}

/* acc + the group's products of one (row, column) */
HR_DI __m512 dn_step(__m512 acc, const __m512i W[8], __m512 dx, const dn_colg *c) {
    __m512i s = c->c;
    HR_UNROLL
    for (int g = 0; g < 8; g++)
        s = _mm512_dpbusd_epi32(s, W[g], c->y[g]);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dx, c->d), acc);
}

float hr_dot_q4_0_vnni512(int64_t n, const void *w, const void *a) {
    const int64_t nb = n / HR_QK4_0;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += DN_GB) {
        const int nbk = (int)(nb - b0 < DN_GB ? nb - b0 : DN_GB);
        dn_colg c;
        dn_prep(a, b0, nbk, &c);
        __m512i W[8];
        __m512 dx;
        dn_wgroup(w, b0, nbk, W, &dx);
        acc = dn_step(acc, W, dx, &c);
    }
    return _mm512_reduce_add_ps(acc);
}

/* One row x columns [0, T) over groups [g0, g0 + ng) of the row (col[t]:
 * the chunk's prepared groups of column t). Accumulators start at zero
 * (first) or from acc[t] and end there (!fin) or reduced into y[t * ys]. */
HR_DI void dn_row(const int T, const uint8_t *x, int64_t nb, int64_t g0, int ng,
                  const dn_colg *const *col, __m512 *acc, bool first, bool fin, float *y,
                  size_t ys) {
    __m512 A[HR_DOT_N_MAX];
    HR_UNROLL
    for (int t = 0; t < T; t++)
        A[t] = first ? _mm512_setzero_ps() : acc[t];
    for (int g = 0; g < ng; g++) {
        const int64_t b0 = (g0 + g) * DN_GB;
        const int nbk = (int)(nb - b0 < DN_GB ? nb - b0 : DN_GB);
        __m512i W[8];
        __m512 dx;
        dn_wgroup(x, b0, nbk, W, &dx);
        HR_UNROLL
        for (int t = 0; t < T; t++)
            A[t] = dn_step(A[t], W, dx, col[t] + g);
    }
    HR_UNROLL
    for (int t = 0; t < T; t++) {
        if (fin)
            y[(size_t)t * ys] = _mm512_reduce_add_ps(A[t]);
        else
            acc[t] = A[t];
    }
}

/* dn_row with the column count as a constant. */
HR_DI void dn_row_n(int nt, const uint8_t *x, int64_t nb, int64_t g0, int ng,
                    const dn_colg *const *col, __m512 *acc, bool first, bool fin, float *y,
                    size_t ys) {
#define DN_ROW(T) dn_row(T, x, nb, g0, ng, col, acc, first, fin, y, ys)
    switch (nt) {
    case 1:
        DN_ROW(1);
        break;
    case 2:
        DN_ROW(2);
        break;
    case 3:
        DN_ROW(3);
        break;
    case 4:
        DN_ROW(4);
        break;
    case 5:
        DN_ROW(5);
        break;
    case 6:
        DN_ROW(6);
        break;
    case 7:
        DN_ROW(7);
        break;
    default:
        DN_ROW(8);
        break;
    }
#undef DN_ROW
}

/* Stack: 20 KiB of column data, 16 KiB of accumulators for long rows. */
static void dotn_q4_0_vnni(int64_t n, int nr, const void *w, size_t ws, const void *const *a,
                           int nt, float *y, size_t ys) {
    const int64_t nb = n / HR_QK4_0, ngr = (nb + DN_GB - 1) / DN_GB;
    const uint8_t *wb = w;
    _Alignas(64) dn_colg cbuf[HR_DOT_N_MAX][DN_GC];
    const dn_colg *col[HR_DOT_N_MAX];
    for (int t = 0; t < nt; t++)
        col[t] = cbuf[t];
    _Alignas(64) __m512 abuf[DN_RB][HR_DOT_N_MAX];
    /* per block of DN_RB rows, chunk by chunk of groups, the accumulators
     * kept in abuf between chunks (in registers when one chunk holds all) */
    for (int r0 = 0; r0 < nr; r0 += DN_RB) {
        const int rn = nr - r0 < DN_RB ? nr - r0 : DN_RB;
        for (int64_t g0 = 0; g0 < ngr; g0 += DN_GC) {
            const int gn = (int)(ngr - g0 < DN_GC ? ngr - g0 : DN_GC);
            if (r0 == 0 || ngr > DN_GC)
                for (int t = 0; t < nt; t++)
                    for (int g = 0; g < gn; g++) {
                        const int64_t b0 = (g0 + g) * DN_GB;
                        dn_prep(a[t], b0, (int)(nb - b0 < DN_GB ? nb - b0 : DN_GB), &cbuf[t][g]);
                    }
            for (int r = 0; r < rn; r++)
                dn_row_n(nt, wb + (size_t)(r0 + r) * ws, nb, g0, gn, col, abuf[r], g0 == 0,
                         g0 + gn == ngr, y + r0 + r, ys);
        }
    }
}

/* ---- Q6_K x Q8_K ---------------------------------------------------------- */

/* One row x columns [0, T), as vec_dot's dot_q6_k_body (VNNI): per
 * super-block the row's 6-bit values and scale shuffles are formed once
 * (halves h = 0, 1: [elements 0-31 | 32-63] from the low nibbles of ql,
 * [64-95 | 96-127] from the high nibbles, qh bits at 4-5) and every
 * column's integer sums and its one FMA by d = dy * dx follow, in vec_dot's
 * order. */
HR_DI void dn6_row(const int T, int64_t nb, const hr_block_q6_k *x, const void *const *a, float *y,
                   size_t ys) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i sh_lo = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);
    const __m512i sh_hi = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    const __m512i wsel0 = _mm512_set_epi64(
        0x0706070607060706ll, 0x0706070607060706ll, 0x0504050405040504ll, 0x0504050405040504ll,
        0x0302030203020302ll, 0x0302030203020302ll, 0x0100010001000100ll, 0x0100010001000100ll);
    const __m512i wsel1 = _mm512_add_epi8(wsel0, _mm512_set1_epi8(8));
    __m512 acc[HR_DOT_N_MAX];
    HR_UNROLL
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const hr_block_q6_k *xi = x + i;
        const float dx = _cvtsh_ss(xi->d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xi->scales));
        __m512i qlo[2], qhi[2], s0[2], s1[2];
        HR_UNROLL
        for (int h = 0; h < 2; h++) {
            const __m512i sch = _mm512_broadcast_i32x4(h == 0 ? _mm256_castsi256_si128(sc16)
                                                              : _mm256_extracti128_si256(sc16, 1));
            const __m512i l = _mm512_loadu_si512(xi->ql + 64 * h);
            const __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xi->qh + 32 * h)));
            const __m512i hlo = _mm512_and_si512(_mm512_sllv_epi64(qh, sh_lo), m30);
            const __m512i hhi = _mm512_and_si512(_mm512_srlv_epi64(qh, sh_hi), m30);
            qlo[h] = _mm512_ternarylogic_epi64(l, m4, hlo, 0xEA);
            qhi[h] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(l, 4), m4, hhi, 0xEA);
            s0[h] = _mm512_shuffle_epi8(sch, wsel0);
            s1[h] = _mm512_shuffle_epi8(sch, wsel1);
        }
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            const hr_block_q8_k *yi = (const hr_block_q8_k *)a[t] + i;
            const float d = yi->d * dx;
            const __m256i corr = _mm256_slli_epi32(
                _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)yi->bsums)), 5);
            __m512i sumi0 = _mm512_setzero_si512(), sumi1 = _mm512_setzero_si512();
            HR_UNROLL
            for (int h = 0; h < 2; h++) {
                const int8_t *q8 = yi->qs + 128 * h;
                const __m512i p0 = _mm512_maddubs_epi16(qlo[h], _mm512_loadu_si512(q8));
                const __m512i p1 = _mm512_maddubs_epi16(qhi[h], _mm512_loadu_si512(q8 + 64));
                sumi0 = _mm512_dpwssd_epi32(sumi0, p0, s0[h]);
                sumi1 = _mm512_dpwssd_epi32(sumi1, p1, s1[h]);
            }
            const __m512i sumi =
                _mm512_sub_epi32(_mm512_add_epi32(sumi0, sumi1), _mm512_zextsi256_si512(corr));
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc[t]);
        }
    }
    HR_UNROLL
    for (int t = 0; t < T; t++)
        y[(size_t)t * ys] = _mm512_reduce_add_ps(acc[t]);
}

static void dotn_q6_k_vnni(int64_t n, int nr, const void *w, size_t ws, const void *const *a,
                           int nt, float *y, size_t ys) {
    const int64_t nb = n / HR_QK_K;
    const uint8_t *wb = w;
    for (int r = 0; r < nr; r++) {
        const hr_block_q6_k *x = (const hr_block_q6_k *)(wb + (size_t)r * ws);
        float *yr = y + r;
        switch (nt) {
        case 1:
            dn6_row(1, nb, x, a, yr, ys);
            break;
        case 2:
            dn6_row(2, nb, x, a, yr, ys);
            break;
        case 3:
            dn6_row(3, nb, x, a, yr, ys);
            break;
        case 4:
            dn6_row(4, nb, x, a, yr, ys);
            break;
        case 5:
            dn6_row(5, nb, x, a, yr, ys);
            break;
        case 6:
            dn6_row(6, nb, x, a, yr, ys);
            break;
        case 7:
            dn6_row(7, nb, x, a, yr, ys);
            break;
        default:
            dn6_row(8, nb, x, a, yr, ys);
            break;
        }
    }
}

void hr_dotn_fill_avx512(hr_kernels *k, unsigned flags) {
    /* only where the table's vec_dot is the 512-bit VNNI one */
    if ((flags & HR_AVX512_VNNI) && !(flags & HR_AVX512_PREFER_YMM)) {
        k->vec_dot_n[HR_TYPE_Q4_0] = dotn_q4_0_vnni;
        k->vec_dot_n[HR_TYPE_Q6_K] = dotn_q6_k_vnni;
    }
}
