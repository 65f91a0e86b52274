/* dotc_avx2.c - Q4_0, Q8_0 and MXFP4 decode on AVX2 over several rows at once
 * (hr_vec_dot_n_fn, also for one column), in the canonical float order of
 * kernels/canon-impl.h: every value equals the AVX2 (and scalar) vec_dot
 * bit for bit.
 *
 * vec_dot keeps one 8-lane FMA chain per row, one FMA per 32-element block,
 * so a single row waits on the FMA latency. Here up to four rows are in
 * flight (four chains; fewer with more columns, as 16 ymm registers hold
 * rows x columns accumulators), each weight block is unpacked once for
 * every column, and what depends on a column alone is prepared once per
 * call: the Q4_0 offset term (-8 times the lane's sum of y) as the lane
 * seed, and the block scales dy as floats. The four fp16 scales of a row's
 * quad of blocks are converted together and multiplied by the column's dy
 * in one step, then spread to the lanes of each block.
 *
 * Rows read side by side defeat the hardware prefetchers (they follow one
 * ascending stream per page), so each group of rows prefetches the same
 * blocks of the group after it, as dotc_avx512.c does. Column data is
 * prepared per chunk of blocks that stays in L1 for all columns; rows
 * longer than a chunk keep their accumulators in a spill buffer between
 * chunks. */
#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <string.h>

#define DV_I static inline __attribute__((always_inline))
#define DV_UNROLL _Pragma("GCC unroll 8")

/* the 32-element block types of dv_dot; MXFP4 goes as Q4_0 does, its codes
 * looked up as their doubled E2M1 values + 12 (0..24) and the offset -12 */
enum { DV_Q4_0, DV_Q8_0, DV_MXFP4 };

DV_I size_t dv_xb(const int kind) {
    return kind == DV_Q4_0   ? sizeof(hr_block_q4_0)
           : kind == DV_Q8_0 ? sizeof(hr_block_q8_0)
                             : sizeof(hr_block_mxfp4);
}

/* the scales of a row's quad of blocks at x: fp16, or MXFP4's 2^(e-128) */
DV_I __m128 dv_scales4(const int kind, const uint8_t *x) {
    if (kind != DV_MXFP4)
        return hr_halves4(x, dv_xb(kind));
    return hr_e8m0_half4(x, sizeof(hr_block_mxfp4));
}

/* blocks per chunk of prepared column data (36 bytes per block and
 * column): 256 for one or two columns, 64 for more */
#define DV_CB_WIDE 256
#define DV_CB 64
#define DV_COL_BYTES(cb) ((size_t)(cb)*36)
/* rows per block of spilled accumulators */
#define DV_RB 32

DV_I __m256i dv_load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* ggml's hsum_float_8 */
DV_I float dv_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Column data for blocks [b0, b0 + nbc) of the q8_0 row y: per block the
 * lane seeds (Q4_0: -8 * the lane's sum of y, MXFP4: -12 *; Q8_0: none),
 * then per block its dy. */
DV_I void dv_prep(const int kind, const hr_block_q8_0 *y, int64_t b0, int nbc, uint8_t *col) {
    __m256i *seed = (__m256i *)col;
    float *dy = (float *)(col + (size_t)nbc * 32);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i off = _mm256_set1_epi8(kind == DV_MXFP4 ? 12 : 8);
    for (int i = 0; i < nbc; i++) {
        if (kind != DV_Q8_0) {
            const __m256i s =
                _mm256_madd_epi16(_mm256_maddubs_epi16(off, dv_load256(y[b0 + i].qs)), ones);
            _mm256_store_si256(&seed[i], _mm256_sub_epi32(_mm256_setzero_si256(), s));
        }
        dy[i] = _cvtsh_ss(y[b0 + i].d);
    }
}

/* Unpacked weights of one block: Q4_0 the nibbles 0..15 (low ones, then
 * high ones), MXFP4 its values + 12 in the same order, Q8_0 |x|; xs keeps
 * Q8_0's signed bytes for the sign trick. */
DV_I __m256i dv_unpack(const int kind, const uint8_t *qs, __m256i *xs) {
    if (kind == DV_MXFP4) {
        const __m128i lut = hr_mxfp4_lut12();
        const __m128i q = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(15);
        return _mm256_set_m128i(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4)),
                                _mm_shuffle_epi8(lut, _mm_and_si128(q, m4)));
    }
    if (kind == DV_Q4_0) {
        const __m128i t = _mm_loadu_si128((const __m128i *)qs);
        const __m256i v =
            _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
        return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
    }
    *xs = dv_load256(qs);
    return _mm256_sign_epi8(*xs, *xs);
}

/* lane sums of one block against column data: Q4_0 sum (v - 8) * y per 4
 * elements (nibbles times y plus the seed), Q8_0 sum x * y (|x| times y
 * with x's sign) */
DV_I __m256i dv_isum(const bool q4, __m256i u, __m256i xs, const int8_t *yq, const void *seed) {
    const __m256i y = dv_load256(yq), ones = _mm256_set1_epi16(1);
    if (q4)
        return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, y), ones),
                                _mm256_load_si256((const __m256i *)seed));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(y, xs)), ones);
}

/* One group of R rows x T columns over the nbc blocks of a chunk. rp[r]:
 * row r at the chunk's first block; ya[t], col[t]: column t's q8_0 blocks
 * there and its prepared data. Accumulators start at zero (first) or from
 * spill[r][t] and end in spill (!fin) or reduced into y[t * ys + out[r]]
 * (out < 0: a repeated row, not stored). pfd: bytes from a row to the row
 * the next group reads at the same block. */
DV_I void dv_group(const int kind, const int R, const int T, const uint8_t *const *rp, int nbc,
                   const hr_block_q8_0 *const *ya, uint8_t *const *col,
                   __m256 (*spill)[HR_DOT_N_MAX], bool first, bool fin, float *y, size_t ys,
                   const int *out, size_t pfd) {
    const bool q4 = kind != DV_Q8_0;                              /* unsigned values and a seed */
    const size_t xb = dv_xb(kind), qo = kind == DV_MXFP4 ? 1 : 2; /* where the values start */
    __m256 A[4][HR_DOT_N_MAX];
    DV_UNROLL
    for (int r = 0; r < R; r++)
        DV_UNROLL
    for (int t = 0; t < T; t++)
        A[r][t] = first ? _mm256_setzero_ps() : spill[r][t];
    int q = 0;
    for (; q + 3 < nbc; q += 4) {
        DV_UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t *x = rp[r] + (size_t)q * xb;
            for (int l = 0; l < 4 * (int)xb; l += 64)
                _mm_prefetch((const char *)x + pfd + l, _MM_HINT_T0);
            const __m128 f = dv_scales4(kind, x);
            __m256i U[4], XS[4];
            DV_UNROLL
            for (int j = 0; j < 4; j++) {
                XS[j] = _mm256_setzero_si256();
                U[j] = dv_unpack(kind, x + (size_t)j * xb + qo, &XS[j]);
            }
            DV_UNROLL
            for (int t = 0; t < T; t++) {
                const __m128 d4 =
                    _mm_mul_ps(f, _mm_loadu_ps((const float *)(col[t] + (size_t)nbc * 32) + q));
                const __m256 d8 = _mm256_set_m128(d4, d4);
                DV_UNROLL
                for (int j = 0; j < 4; j++) {
                    const __m256i v =
                        dv_isum(q4, U[j], XS[j], ya[t][q + j].qs, col[t] + (size_t)(q + j) * 32);
                    A[r][t] = _mm256_fmadd_ps(_mm256_permutevar_ps(d8, _mm256_set1_epi32(j)),
                                              _mm256_cvtepi32_ps(v), A[r][t]);
                }
            }
        }
    }
    for (; q < nbc; q++) { /* a row's last blocks outside quads */
        DV_UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t *x = rp[r] + (size_t)q * xb;
            uint16_t h;
            memcpy(&h, x, 2);
            const float dx = kind == DV_MXFP4 ? hr_e8m0_half(x[0]) : _cvtsh_ss(h);
            __m256i xs = _mm256_setzero_si256();
            const __m256i u = dv_unpack(kind, x + qo, &xs);
            DV_UNROLL
            for (int t = 0; t < T; t++) {
                const float dy = ((const float *)(col[t] + (size_t)nbc * 32))[q];
                const __m256i v = dv_isum(q4, u, xs, ya[t][q].qs, col[t] + (size_t)q * 32);
                A[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy), _mm256_cvtepi32_ps(v), A[r][t]);
            }
        }
    }
    DV_UNROLL
    for (int r = 0; r < R; r++)
        DV_UNROLL
    for (int t = 0; t < T; t++) {
        if (!fin)
            spill[r][t] = A[r][t];
        else if (out[r] >= 0)
            y[(size_t)t * ys + (size_t)out[r]] = dv_hsum8(A[r][t]);
    }
}

DV_I void dv_dot(const int kind, const int T, int64_t n, int nr, const void *w, size_t ws,
                 const void *const *a, float *y, size_t ys) {
    const size_t xb = dv_xb(kind);
    const int64_t nb = n / 32;
    const int cb = T <= 2 ? DV_CB_WIDE : DV_CB;
    /* rows in flight: 16 ymm registers hold R x T accumulators */
    const int R = T == 1 ? 4 : T == 2 ? 2 : 1;
    _Alignas(64) uint8_t colbuf[2 * DV_COL_BYTES(DV_CB_WIDE)];
    _Alignas(64) __m256 spill[DV_RB][HR_DOT_N_MAX];
    uint8_t *col[HR_DOT_N_MAX];
    const hr_block_q8_0 *ya[HR_DOT_N_MAX];
    for (int t = 0; t < T; t++)
        col[t] = colbuf + (size_t)t * DV_COL_BYTES(cb);
    const bool one_chunk = nb <= cb;
    for (int r0 = 0; r0 < nr; r0 += DV_RB) {
        const int rows = nr - r0 < DV_RB ? nr - r0 : DV_RB;
        for (int64_t b0 = 0; b0 < nb; b0 += cb) {
            const int nbc = (int)(nb - b0 < cb ? nb - b0 : cb);
            for (int t = 0; t < T; t++) {
                ya[t] = (const hr_block_q8_0 *)a[t] + b0;
                if (!one_chunk || r0 == 0)
                    dv_prep(kind, a[t], b0, nbc, col[t]);
            }
            const bool first = b0 == 0, fin = b0 + nbc == nb;
            for (int g = 0; g < rows; g += R) {
                const uint8_t *rp[4];
                int out[4];
                for (int i = 0; i < R; i++) {
                    const int r = g + i < rows ? g + i : rows - 1;
                    rp[i] = (const uint8_t *)w + (size_t)(r0 + r) * ws + (size_t)b0 * xb;
                    out[i] = g + i < rows ? r0 + r : -1;
                }
                dv_group(kind, R, T, rp, nbc, ya, col, &spill[g], first, fin, y, ys, out,
                         (size_t)R * ws);
            }
        }
    }
}

#define DV_Q4(T) dv_dot(DV_Q4_0, T, n, nr, w, ws, a, y, ys)
#define DV_Q8(T) dv_dot(DV_Q8_0, T, n, nr, w, ws, a, y, ys)
#define DV_FP4(T) dv_dot(DV_MXFP4, T, n, nr, w, ws, a, y, ys)

static void dotv_q4_0(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                      float *y, size_t ys) {
    HR_BY_COUNT8(nt, DV_Q4)
}

static void dotv_q8_0(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                      float *y, size_t ys) {
    HR_BY_COUNT8(nt, DV_Q8)
}

static void dotv_mxfp4(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                       float *y, size_t ys) {
    HR_BY_COUNT8(nt, DV_FP4)
}

void hr_dotc_fill_avx2(hr_kernels *k) {
    k->vec_dot_n[HR_TYPE_Q4_0] = dotv_q4_0;
    k->vec_dot_n[HR_TYPE_Q8_0] = dotv_q8_0;
    k->vec_dot_n[HR_TYPE_MXFP4] = dotv_mxfp4;
    k->dotn_one[HR_TYPE_Q4_0] = k->dotn_one[HR_TYPE_Q8_0] = k->dotn_one[HR_TYPE_MXFP4] = true;
}
