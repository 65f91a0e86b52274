/* dotn_avx512.c - decode of several sequences at once on AVX-512 VNNI
 * (hr_vec_dot_n_fn): each weight row is unpacked once for up to
 * HR_DOT_N_MAX activation columns, and every (row, column) value is
 * bit-identical to the 512-bit VNNI vec_dot of quant_avx512.c, which the
 * same table uses for single-sequence decode.
 *
 * Q4_0 and Q8_0 work split: what depends on a column alone (its q8 bytes in
 * register layout, its block scales) is prepared once per call for all
 * rows, in chunks of DN_QC quads of blocks that stay in L1; each row is
 * then unpacked once per quad and met by every column. Rows are taken one
 * at a time, so the weights stream through memory in order (two rows
 * interleaved ran at less than half the speed from DRAM). Q4_K, Q5_K and
 * Q6_K (the output head of the common quantized models): each super-block
 * of a row is unpacked once for all columns.
 *
 * Bit-identity (Q4_0; Q6_K repeats vec_dot's operations per column): the
 * integer lane sums are exact however they are formed, and the float
 * operations per (row, column) are vec_dot's, in its order:
 * per pair of blocks one FMA of the converted lane sums by the lane scale
 * into one of two accumulators (blocks 4i, 4i+1 into acc0, 4i+2, 4i+3 into
 * acc1), the same 16-lane reduction, then the tail blocks one at a time.
 * The lanes keep vec_dot's layout; the low-nibble lanes hold 16x vec_dot's
 * sums with 1/16 of its scale (all lanes are scaled by (dx/16)*dy, where
 * vec_dot's low lanes have dx*dy and its high lanes (dx*dy)/16). Each
 * product scale * sum is thus the same real number, and the FMA rounds it
 * once either way: dx*dy of two fp16 values is exact in fp32 (11-bit
 * significands) and at least 2^-48 in magnitude, so the power-of-two
 * factors commute with rounding. test_gemm compares every entry with
 * vec_dot bit for bit. */
#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <string.h>

#define HR_DI static inline __attribute__((always_inline))
#define HR_UNROLL _Pragma("GCC unroll 8")

HR_DI __m128 dn_halves4(const uint8_t *p, size_t stride) {
    uint64_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint16_t h;
        memcpy(&h, p + (size_t)k * stride, 2);
        v |= (uint64_t)h << (16 * k);
    }
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

HR_DI float dn_hsum128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One block by vec_dot's tail rule (q4_0_one): the 8 lane sums folded to 4
 * as integers, reduced as floats, times dx*dy. */
/* One Q8_0 block by vec_dot's tail rule (q8_0_one): |x| * (y with x's
 * sign) in 16-bit pairs, folded to 4 lanes, reduced as floats, times dx*dy. */
HR_DI float dn_q8_0_one(const hr_block_q8_0 *x, const hr_block_q8_0 *y) {
    const __m256i xs = _mm256_loadu_si256((const __m256i *)x->qs);
    const __m256i ys = _mm256_loadu_si256((const __m256i *)y->qs);
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(xs, xs), _mm256_sign_epi8(ys, xs));
    const __m256i v = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return dn_hsum128(_mm_cvtepi32_ps(h)) * (_cvtsh_ss(x->d) * _cvtsh_ss(y->d));
}

HR_DI float dn_q4_0_one(const hr_block_q4_0 *x, const hr_block_q8_0 *y) {
    const __m128i t = _mm_loadu_si128((const __m128i *)x->qs);
    const __m256i u = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1),
        _mm256_set1_epi8(0x0f));
    const __m256i s = _mm256_loadu_si256((const __m256i *)y->qs);
    const __m256i z = _mm256_setzero_si256();
    const __m256i v = _mm256_sub_epi32(_mm256_dpbusd_epi32(z, u, s),
                                       _mm256_dpbusd_epi32(z, _mm256_set1_epi8(8), s));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return dn_hsum128(_mm_cvtepi32_ps(h)) * (_cvtsh_ss(x->d) * _cvtsh_ss(y->d));
}

/* Column data of one quad of blocks (4i..4i+3): the q8 bytes of blocks
 * (0, 1) and (2, 3) with their sign bits flipped (y + 128, unsigned), and
 * the blocks' dy spread over the lanes of those blocks (256 bytes). */
typedef struct {
    __m512i y[2];
    __m512 d[2];
} dn_colq;

/* lanes 0-7: block 0 of a pair, 8-15: block 1 (pairs (0, 1) and (2, 3)) */
#define DN_LO2 _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
#define DN_HI2 _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2)

/* The fp16 scales of a quad of Q4_0 blocks (at bytes 0, 18, 36, 54 of its
 * 72) as 4 floats: one load and a word permute. */
HR_DI __m128 dn_quad_dx(const uint8_t *xq) {
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 0, 27, 18, 9, 0);
    const __m512i v = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(xq));
    return _mm_cvtph_ps(_mm512_castsi512_si128(v));
}

/* quads per chunk of prepared columns (2048 elements: 24 KiB for 8 columns) */
#define DN_QC 16
/* bytes ahead of a row's quad that it prefetches: the rows stream from
 * memory one at a time, and the hardware prefetchers alone left the weight
 * loads waiting (bench --parallel 4 on a 2-core Zen 5 VM, Q4_0 1.1B:
 * 54-64 -> 66-67 tok/s; 512 and 2048 bytes did worse than 1024) */
#define DN_PF 1024
/* rows per block of spilled accumulators when a row spans several chunks */
#define DN_RB 32

/* Column data of quads [q0, q0 + nq) of the Q8_0 row y. */
HR_DI void dn_prep(const uint8_t *y, int64_t q0, int nq, dn_colq *out) {
    const size_t yb = sizeof(hr_block_q8_0);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int q = 0; q < nq; q++) {
        const uint8_t *yq = y + (size_t)(q0 + q) * 4 * yb;
        const __m512 dy = _mm512_castps128_ps512(dn_halves4(yq, yb));
        out[q].d[0] = _mm512_permutexvar_ps(DN_LO2, dy);
        out[q].d[1] = _mm512_permutexvar_ps(DN_HI2, dy);
        HR_UNROLL
        for (int p = 0; p < 2; p++) {
            const uint8_t *b = yq + (size_t)(2 * p) * yb + 2;
            const __m512i v =
                _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b)),
                                   _mm256_loadu_si256((const __m256i *)(b + yb)), 1);
            _mm512_store_si512(&out[q].y[p], _mm512_xor_si512(v, flip));
        }
    }
}

/* One row x columns [0, T) over the nq quads of a chunk. Q8_0 weights
 * (q8) are the signed bytes x as they are, with scale dx * dy; Q4_0: the weights are
 * taken as signed bytes 16 * (v - 8) for both nibbles (x; the low nibble
 * shifted up), so sum x * (y + 128) = sum x * y + 128 * sum x: the row's
 * -128 * sum x seeds vpdpbusd for every column, and every lane holds 16x
 * vec_dot's low-nibble sums (as its high-nibble lanes do), all scaled by
 * (dx / 16) * dy (formed once per column and quad, spread over each
 * block's lanes by a permute). w: the chunk's first block of the row; col[t]: the
 * chunk's column data. Accumulators start at zero (first) or from
 * acc[t][2] and end there (!fin) or reduced into y[t * ys] with the tail
 * blocks [tail_b, nb) of the row tail_x and the columns a (fin). */
HR_DI void dn_row(const bool q8, const int T, int nq, const uint8_t *w, const dn_colq *const *col,
                  __m512 (*acc)[2], bool first, bool fin, const uint8_t *tail_x, int64_t tail_b,
                  int64_t nb, const void *const *a, float *y, size_t ys) {
    const size_t xb = q8 ? sizeof(hr_block_q8_0) : sizeof(hr_block_q4_0);
    const __m512i shift = _mm512_set_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    const __m512i hi4 = _mm512_set1_epi8((char)0xf0), flip = _mm512_set1_epi8((char)0x80);
    const __m128 hs = _mm_set1_ps(1.0f / 16.0f);
    const __m512i z = _mm512_setzero_si512();
    __m512 A[HR_DOT_N_MAX][2];
    HR_UNROLL
    for (int t = 0; t < T; t++)
        HR_UNROLL
    for (int p = 0; p < 2; p++)
        A[t][p] = first ? _mm512_setzero_ps() : acc[t][p];
    for (int q = 0; q < nq; q++) {
        const uint8_t *xq = w + (size_t)q * 4 * xb;
        _mm_prefetch((const char *)xq + DN_PF, _MM_HINT_T0);
        _mm_prefetch((const char *)xq + DN_PF + 64, _MM_HINT_T0);
        if (q8)
            _mm_prefetch((const char *)xq + DN_PF + 128, _MM_HINT_T0);
        const __m512 dx4 =
            _mm512_castps128_ps512(q8 ? dn_halves4(xq, xb) : _mm_mul_ps(dn_quad_dx(xq), hs));
        const __m512 DX[2] = {_mm512_permutexvar_ps(DN_LO2, dx4),
                              _mm512_permutexvar_ps(DN_HI2, dx4)};
        __m512i X[2], S[2];
        HR_UNROLL
        for (int p = 0; p < 2; p++) {
            const uint8_t *b = xq + (size_t)(2 * p) * xb + 2;
            if (q8) {
                X[p] = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b)),
                    _mm256_loadu_si256((const __m256i *)(b + xb)), 1);
                S[p] = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, flip, X[p]));
                continue;
            }
            const __m512i u = _mm512_mask_broadcast_i32x4(
                _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)b)), 0xff00,
                _mm_loadu_si128((const __m128i *)(b + xb)));
            /* (nibble << 4) ^ 0x80 = 16 * (v - 8) as a signed byte */
            X[p] = _mm512_ternarylogic_epi64(_mm512_sllv_epi64(u, shift), hi4, flip, 0x6a);
            S[p] = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, flip, X[p]));
        }
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            const dn_colq *cq = col[t] + q;
            HR_UNROLL
            for (int p = 0; p < 2; p++) {
                const __m512i v = _mm512_dpbusd_epi32(S[p], cq->y[p], X[p]);
                const __m512 sc = _mm512_mul_ps(DX[p], cq->d[p]);
                A[t][p] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(v), A[t][p]);
            }
        }
    }
    HR_UNROLL
    for (int t = 0; t < T; t++) {
        if (!fin) {
            acc[t][0] = A[t][0];
            acc[t][1] = A[t][1];
            continue;
        }
        float sum = _mm512_reduce_add_ps(_mm512_add_ps(A[t][0], A[t][1]));
        const hr_block_q8_0 *yt = a[t];
        for (int64_t k = tail_b; k < nb; k++)
            sum += q8 ? dn_q8_0_one((const hr_block_q8_0 *)tail_x + k, yt + k)
                      : dn_q4_0_one((const hr_block_q4_0 *)tail_x + k, yt + k);
        y[(size_t)t * ys] = sum;
    }
}

/* dn_row with the column count as a constant. */
HR_DI void dn_row_n(const bool q8, int nt, int nq, const uint8_t *w, const dn_colq *const *col,
                    __m512 (*acc)[2], bool first, bool fin, const uint8_t *tail_x, int64_t tail_b,
                    int64_t nb, const void *const *a, float *y, size_t ys){
#define DN_ROW(T) dn_row(q8, T, nq, w, col, acc, first, fin, tail_x, tail_b, nb, a, y, ys)
    HR_BY_COUNT8(nt, DN_ROW)
#undef DN_ROW
}

/* Stack: 34 KiB of column data, 32 KiB of accumulators for long rows. */
HR_DI void dn_matrix(const bool q8, int64_t n, int nr, const void *w, size_t ws,
                     const void *const *a, int nt, float *y, size_t ys) {
    const int64_t nb = n / HR_QK4_0, nq = nb / 4;
    const size_t xb = q8 ? sizeof(hr_block_q8_0) : sizeof(hr_block_q4_0);
    const uint8_t *wb = w;
    _Alignas(64) dn_colq cbuf[HR_DOT_N_MAX][DN_QC + 1];
    const dn_colq *col[HR_DOT_N_MAX];
    for (int t = 0; t < nt; t++)
        col[t] = cbuf[t];
    if (nq <= DN_QC) { /* one chunk: columns prepared once, accumulators in registers */
        for (int t = 0; t < nt; t++)
            dn_prep(a[t], 0, (int)nq, cbuf[t]);
        for (int r = 0; r < nr; r++)
            dn_row_n(q8, nt, (int)nq, wb + (size_t)r * ws, col, NULL, true, true,
                     wb + (size_t)r * ws, nq * 4, nb, a, y + r, ys);
        return;
    }
    /* several chunks: per block of DN_RB rows, chunk by chunk, the
     * accumulators kept in abuf between chunks */
    _Alignas(64) __m512 abuf[DN_RB][HR_DOT_N_MAX][2];
    for (int r0 = 0; r0 < nr; r0 += DN_RB) {
        const int rn = nr - r0 < DN_RB ? nr - r0 : DN_RB;
        for (int64_t q0 = 0; q0 < nq; q0 += DN_QC) {
            const int qn = (int)(nq - q0 < DN_QC ? nq - q0 : DN_QC);
            for (int t = 0; t < nt; t++)
                dn_prep(a[t], q0, qn, cbuf[t]);
            for (int r = 0; r < rn; r++) {
                const uint8_t *xr = wb + (size_t)(r0 + r) * ws;
                dn_row_n(q8, nt, qn, xr + (size_t)q0 * 4 * xb, col, abuf[r], q0 == 0, q0 + qn == nq,
                         xr, nq * 4, nb, a, y + r0 + r, ys);
            }
        }
    }
}

static void dotn_q4_0_vnni(int64_t n, int nr, const void *w, size_t ws, const void *const *a,
                           int nt, float *y, size_t ys) {
    dn_matrix(false, n, nr, w, ws, a, nt, y, ys);
}

/* Q8_0 x Q8_0: vec_dot sums (x + 128) * y - 128 * sum y per lane; here
 * (y + 128) * x - 128 * sum x, the same integers. */
static void dotn_q8_0_vnni(int64_t n, int nr, const void *w, size_t ws, const void *const *a,
                           int nt, float *y, size_t ys) {
    dn_matrix(true, n, nr, w, ws, a, nt, y, ys);
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
#define DN6_ROW(T) dn6_row(T, nb, x, a, yr, ys)
        HR_BY_COUNT8(nt, DN6_ROW)
#undef DN6_ROW
    }
}

/* ---- Q4_K / Q5_K x Q8_K -------------------------------------------------- */

/* vpshufb mask giving int16 lanes: 128-bit lanes 0-1 <- byte a of the lane
 * (zero-extended), lanes 2-3 <- byte b (vec_dot's scale spread) */
HR_DI __m512i dnk_pair_sel(int a, int b) {
    const __m256i lo = _mm256_set1_epi16((short)(0x8000 | a));
    const __m256i hi = _mm256_set1_epi16((short)(0x8000 | b));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* One row x columns [0, T), as vec_dot's dot_q45_k_body (VNNI): per
 * super-block the row's four 64-element chunks (nibbles, and for Q5_K the
 * fifth bit), its scale shuffles and its min bytes are formed once, and
 * every column's integer sums, its FMA by d = dy * dx, its mins term and
 * the final reductions follow vec_dot's operations in vec_dot's order. */
HR_DI void dnk_row(const int T, const bool five, int64_t nb, const uint8_t *w, const void *const *a,
                   float *y, size_t ys) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    const __m512i nib_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i hbit_shift = _mm512_set_epi64(1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i ssel[4] = {dnk_pair_sel(0, 1), dnk_pair_sel(2, 3), dnk_pair_sel(4, 5),
                             dnk_pair_sel(6, 7)};
    const size_t xb = five ? sizeof(hr_block_q5_k) : sizeof(hr_block_q4_k);
    __m512 acc[HR_DOT_N_MAX];
    __m128 accm[HR_DOT_N_MAX];
    HR_UNROLL
    for (int t = 0; t < T; t++) {
        acc[t] = _mm512_setzero_ps();
        accm[t] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *xi = w + (size_t)i * xb;
        _mm_prefetch((const char *)xi + DN_PF, _MM_HINT_T0);
        _mm_prefetch((const char *)xi + DN_PF + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)xi + DN_PF + 128, _MM_HINT_T0);
        const uint8_t *qs, *scales;
        uint16_t dh, dmh;
        __m512i qh = _mm512_setzero_si512();
        if (five) {
            const hr_block_q5_k *x = (const hr_block_q5_k *)xi;
            qs = x->qs;
            scales = x->scales;
            dh = x->d;
            dmh = x->dmin;
            qh = _mm512_srlv_epi64(
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->qh)), hbit_shift);
        } else {
            const hr_block_q4_k *x = (const hr_block_q4_k *)xi;
            qs = x->qs;
            scales = x->scales;
            dh = x->d;
            dmh = x->dmin;
        }
        const float dx = _cvtsh_ss(dh), dmx = _cvtsh_ss(dmh);
        const __m128i scmn = hr_kq_unpack_scales_sse(scales);
        const __m128i mn16 = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(scmn, scmn));
        const __m512i sc = _mm512_broadcast_i32x4(scmn);
        __m512i U[4], SCV[4];
        HR_UNROLL
        for (int c = 0; c < 4; c++) {
            const __m512i raw = _mm512_srlv_epi64(
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * c))),
                nib_shift);
            if (five) {
                const __m512i hb = _mm512_and_si512(_mm512_slli_epi64(qh, 4), b4);
                U[c] = _mm512_ternarylogic_epi64(raw, m4, hb, 0xEA);
                qh = _mm512_srli_epi64(qh, 2);
            } else {
                U[c] = _mm512_and_si512(raw, m4);
            }
            SCV[c] = _mm512_shuffle_epi8(sc, ssel[c]);
        }
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            const hr_block_q8_k *yi = (const hr_block_q8_k *)a[t] + i;
            const float d = yi->d * dx, dmin = yi->d * dmx;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)yi->bsums);
            const __m128i q8s =
                _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            accm[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mn16, q8s)),
                                   accm[t]);
            __m512i sumi0 = _mm512_setzero_si512(), sumi1 = _mm512_setzero_si512();
            HR_UNROLL
            for (int c = 0; c < 4; c++) {
                const __m512i p = _mm512_maddubs_epi16(U[c], _mm512_loadu_si512(yi->qs + 64 * c));
                if (c & 1)
                    sumi1 = _mm512_dpwssd_epi32(sumi1, p, SCV[c]);
                else
                    sumi0 = _mm512_dpwssd_epi32(sumi0, p, SCV[c]);
            }
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d),
                                     _mm512_cvtepi32_ps(_mm512_add_epi32(sumi0, sumi1)), acc[t]);
        }
    }
    HR_UNROLL
    for (int t = 0; t < T; t++)
        y[(size_t)t * ys] = _mm512_reduce_add_ps(acc[t]) - dn_hsum128(accm[t]);
}

/* Q4_K (five false) / Q5_K rows, one at a time. */
HR_DI void dnk_matrix(const bool five, int64_t n, int nr, const void *w, size_t ws,
                      const void *const *a, int nt, float *y, size_t ys) {
    const int64_t nb = n / HR_QK_K;
    const uint8_t *wb = w;
    for (int r = 0; r < nr; r++) {
        const uint8_t *x = wb + (size_t)r * ws;
        float *yr = y + r;
#define DNK_ROW(T) dnk_row(T, five, nb, x, a, yr, ys)
        HR_BY_COUNT8(nt, DNK_ROW)
#undef DNK_ROW
    }
}

static void dotn_q4_k_vnni(int64_t n, int nr, const void *w, size_t ws, const void *const *a,
                           int nt, float *y, size_t ys) {
    dnk_matrix(false, n, nr, w, ws, a, nt, y, ys);
}

static void dotn_q5_k_vnni(int64_t n, int nr, const void *w, size_t ws, const void *const *a,
                           int nt, float *y, size_t ys) {
    dnk_matrix(true, n, nr, w, ws, a, nt, y, ys);
}

void hr_dotn_fill_avx512(hr_kernels *k, unsigned flags) {
    /* only where the table's vec_dot is the 512-bit VNNI one */
    if ((flags & HR_AVX512_VNNI) && !(flags & HR_AVX512_PREFER_YMM)) {
        k->vec_dot_n[HR_TYPE_Q4_0] = dotn_q4_0_vnni;
        k->vec_dot_n[HR_TYPE_Q8_0] = dotn_q8_0_vnni;
        k->vec_dot_n[HR_TYPE_Q6_K] = dotn_q6_k_vnni;
        k->vec_dot_n[HR_TYPE_Q4_K] = dotn_q4_k_vnni;
        k->vec_dot_n[HR_TYPE_Q5_K] = dotn_q5_k_vnni;
    }
}
