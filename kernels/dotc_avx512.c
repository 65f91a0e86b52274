/* dotc_avx512.c - Q4_0, Q8_0, MXFP4, Q4_K, Q5_K and Q6_K decode on AVX-512 VNNI
 * in the canonical float order of kernels/canon-impl.h (hr_vec_dot_n_fn, also for one
 * column): every value equals the scalar reference's vec_dot bit for bit,
 * so the AVX-512 table decodes these types exactly as the scalar, AVX2 and
 * aarch64 tables do (and as llama.cpp's x86 kernels).
 *
 * The canonical order gives each (row, column) one chain of 8 float lanes
 * with one FMA per 32-element block, a dependent chain that a single row
 * cannot keep a core busy with. So rows go in pairs, one row per half of a
 * zmm register (lanes 0-7 row r, 8-15 row r + 1; lane k of a row holds
 * elements 4k..4k+3 of the block, as in canon-impl.h), and two pairs are
 * in flight, each weight block unpacked once for up to 4 columns. More
 * columns take a second pass over the same rows (in L1 by then): 16
 * accumulators spilled registers, and the two passes ran 8 columns 7-10%
 * faster (AMD EPYC Zen 5, hearth bench --parallel 8: 113-116 -> 124
 * tok/s aggregate).
 *
 * Per (pair, block) the weights need one masked broadcast and one AND
 * (Q4_0: the high nibbles stay in place, so lanes 4-7 of a row hold 16x
 * their integer sum and take 1/16 of the scale: d / 16 * 16 s = d * s as
 * real numbers and the FMA rounds once, with 16 s exact in float and d / 16
 * exact because d = dx * dy of two fp16 scales is far from float's
 * subnormals) or a 256-bit insert and an XOR (Q8_0: x + 128 as unsigned
 * bytes; MXFP4: the codes looked up as their doubled E2M1 values + 12,
 * the E8M0 scales made in integers). The activation offsets (-8 * sum y per
 * lane group for Q4_0, -128 * sum y for Q8_0, -12 * sum y for MXFP4) depend on the column alone:
 * they are computed once per call and seed vpdpbusd, so each (pair, block, column) costs one
 * vpdpbusd, one convert, one scale permute and the FMA. Scales: the fp16
 * dx of a quad of blocks of both rows come out of two loads by one word
 * permute (Q4_0) or two (Q8_0), are converted together and multiplied by
 * the column's dy once per quad.
 *
 * Column data (seeds, dy) is prepared per chunk of blocks small enough to
 * stay in L1 for all columns; rows longer than a chunk keep their
 * accumulators in a spill buffer between chunks.
 *
 * Q4_K, Q5_K and Q6_K: one pair of rows at a time, the sub-block scales
 * applied in integers (vpmaddubsw, vpdpwssd), one FMA per super-block and
 * column (below).
 *
 * Prefetch: rows streamed side by side defeat the hardware prefetchers
 * (they follow one ascending stream per page), so each group of rows
 * prefetches the same blocks of the group after it, one group's time
 * ahead. On a 2-core Xeon (Cascade Lake) that took these kernels' decode
 * from DRAM from 12.6 to 19.2 GB/s (Q4_0) and from 9.6 to 15.3 (Q4_K, one
 * pair at a time, which did better than two there); bench_quant --mem 2,
 * medians of 5, against a plain read loop's 19-20 GB/s. */
#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#define DC_I static inline __attribute__((always_inline))
#define DC_UNROLL _Pragma("GCC unroll 8")

/* blocks per chunk of prepared column data: one or two columns keep a
 * whole row of up to 8192 elements in one chunk */
#define DC_CB_WIDE 256
#define DC_CB 64
/* bytes of prepared data per block and column: an 8-lane seed and a
 * quarter of a quad's 8 dy floats */
#define DC_COL_BYTES(cb) ((size_t)(cb)*40)
/* rows per block of spilled accumulators */
#define DC_RB 32

DC_I float dc_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* the 32-element block types of dc_dot */
enum { DC_Q4_0, DC_Q8_0, DC_MXFP4 };

DC_I size_t dc_xb(const int kind) {
    return kind == DC_Q4_0   ? sizeof(hr_block_q4_0)
           : kind == DC_Q8_0 ? sizeof(hr_block_q8_0)
                             : sizeof(hr_block_mxfp4);
}

DC_I __m256i dc_load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

DC_I __m512i dc_bcast256(const void *p) { return _mm512_broadcast_i64x4(dc_load256(p)); }

/* ggml's hsum_float_8 of each half: lanes 0-7 and 8-15 */
DC_I float dc_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The weights of one block of rows a and b (their qs bytes) as unsigned
 * bytes in lane order: [a's 32 | b's 32]. MXFP4: the codes' doubled E2M1
 * values + 12, in element order (low nibbles, then high ones). */
DC_I __m512i dc_unpack(const int kind, const uint8_t *a, const uint8_t *b) {
    if (kind == DC_MXFP4) {
        const __m512i q =
            _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)a)),
                                        0xff00, _mm_loadu_si128((const __m128i *)b));
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        const __m512i v = _mm512_mask_blend_epi32(0xf0f0, _mm512_and_si512(q, m4),
                                                  _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
        const __m512i lut = _mm512_broadcast_i32x4(hr_mxfp4_lut12());
        return _mm512_shuffle_epi8(lut, v);
    }
    if (kind == DC_Q4_0) {
        const long long f0 = (long long)0xf0f0f0f0f0f0f0f0ull, f = 0x0f0f0f0f0f0f0f0fll;
        const __m512i q =
            _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)a)),
                                        0xff00, _mm_loadu_si128((const __m128i *)b));
        return _mm512_and_si512(q, _mm512_set_epi64(f0, f0, f, f, f0, f0, f, f));
    }
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(dc_load256(a)), dc_load256(b), 1);
    return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
}

/* The fp16 scales of blocks 0..3 of rows a and b (blocks xb bytes apart,
 * the scale first) as floats [a0 a1 a2 a3 b0 b1 b2 b3]. */
DC_I __m256 dc_scales(const int kind, const uint8_t *a, const uint8_t *b) {
    if (kind == DC_MXFP4) { /* 17-byte blocks: E8M0 bytes 0, 17, 34, 51 */
        const __m256i e = _mm256_setr_epi32(a[0], a[17], a[34], a[51], b[0], b[17], b[34], b[51]);
        const __m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e); /* e < 2 */
        return _mm256_castsi256_ps(
            _mm256_mask_blend_epi32(_mm256_cmplt_epi32_mask(e, _mm256_set1_epi32(2)), nrm, sub));
    }
    __m512i h;
    if (kind == DC_Q4_0) { /* 18-byte blocks: words 0, 9, 18, 27 of one 64-byte load */
        const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                             0, 0, 0, 0, 0, 0, 59, 50, 41, 32, 27, 18, 9, 0);
        h = _mm512_permutex2var_epi16(_mm512_loadu_si512(a), idx, _mm512_loadu_si512(b));
    } else { /* 34-byte blocks: words 0, 17 of the loads at blocks 0 and 2 */
        const __m512i i01 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                             0, 0, 0, 0, 0, 0, 0, 0, 49, 32, 0, 0, 17, 0);
        const __m512i i23 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                             0, 0, 0, 0, 0, 0, 49, 32, 0, 0, 17, 0, 0, 0);
        const size_t x2 = 2 * sizeof(hr_block_q8_0);
        const __m512i h01 =
            _mm512_permutex2var_epi16(_mm512_loadu_si512(a), i01, _mm512_loadu_si512(b));
        const __m512i h23 =
            _mm512_permutex2var_epi16(_mm512_loadu_si512(a + x2), i23, _mm512_loadu_si512(b + x2));
        h = _mm512_mask_blend_epi16(0xcc, h01, h23);
    }
    return _mm256_cvtph_ps(_mm512_castsi512_si128(h));
}

/* Column data for blocks [b0, b0 + nbc) of the q8_0 row y: per block the
 * lane seeds (minus the offset times the lane's sum of y), per quad its 4
 * dy twice. */
DC_I void dc_prep(const int kind, const hr_block_q8_0 *y, int64_t b0, int nbc, uint8_t *col) {
    const bool q4 = kind == DC_Q4_0;
    __m256i *seed = (__m256i *)col;
    float *dy = (float *)(col + (size_t)nbc * 32);
    /* Q4_0: -8 for elements 0-15 (lanes 0-3), -8 * 16 for the in-place
     * high nibbles (lanes 4-7); Q8_0: -128; MXFP4: -12 */
    const __m256i off = q4 ? _mm256_set_m128i(_mm_set1_epi8((char)128), _mm_set1_epi8(8))
                        : kind == DC_Q8_0 ? _mm256_set1_epi8((char)128)
                                          : _mm256_set1_epi8(12);
    const __m256i z = _mm256_setzero_si256();
    for (int i = 0; i < nbc; i++) {
        const __m256i s = _mm256_dpbusd_epi32(z, off, dc_load256(y[b0 + i].qs));
        _mm256_store_si256(&seed[i], _mm256_sub_epi32(z, s));
    }
    for (int q = 0; q + 3 < nbc; q += 4)
        for (int j = 0; j < 4; j++)
            dy[2 * q + j] = dy[2 * q + 4 + j] = dc_h2f(y[b0 + q + j].d);
}

/* lane indices into the scale vector s of a pair for block j of a quad:
 * Q4_0 s = [F * dy, F * dy / 16] (16 lanes), Q8_0 s = F * dy (8 lanes) */
DC_I __m512i dc_idx(const bool q4, int j) { /* q4: Q4_0 */
    if (q4)
        return _mm512_set_epi32(12 + j, 12 + j, 12 + j, 12 + j, 4 + j, 4 + j, 4 + j, 4 + j, 8 + j,
                                8 + j, 8 + j, 8 + j, j, j, j, j);
    return _mm512_set_epi32(4 + j, 4 + j, 4 + j, 4 + j, 4 + j, 4 + j, 4 + j, 4 + j, j, j, j, j, j,
                            j, j, j);
}

/* One group of P row pairs x T columns over the nbc blocks of a chunk.
 * rp[2p], rp[2p + 1]: the rows of pair p at the chunk's first block (the
 * same row twice for a lone row); ya[t]: column t's q8_0 blocks at the
 * chunk's first block; col[t]: its prepared data. Accumulators start at
 * zero (first) or from spill[p][t], and end in spill (!fin) or reduced
 * into y[t * ys + out[2p]] and [out[2p + 1]] (out < 0: not stored). */
DC_I void dc_group(const int kind, const int P, const int T, const uint8_t *const *rp, int nbc,
                   const hr_block_q8_0 *const *ya, uint8_t *const *col,
                   __m512 (*spill)[HR_DOT_N_MAX], bool first, bool fin, float *y, size_t ys,
                   const int *out, size_t pfd) {
    const bool q4 = kind == DC_Q4_0;
    const size_t xb = dc_xb(kind), qo = kind == DC_MXFP4 ? 1 : 2; /* where the values start */
    const __m256 sixteenth = _mm256_set1_ps(1.0f / 16.0f);
    __m512 A[2][HR_DOT_N_MAX];
    DC_UNROLL
    for (int p = 0; p < P; p++)
        DC_UNROLL
    for (int t = 0; t < T; t++)
        A[p][t] = first ? _mm512_setzero_ps() : spill[p][t];
    int q = 0;
    for (; q + 3 < nbc; q += 4) {
        DC_UNROLL
        for (int p = 0; p < P; p++) {
            const uint8_t *xa = rp[2 * p] + (size_t)q * xb, *xc = rp[2 * p + 1] + (size_t)q * xb;
            for (int l = 0; l < 4 * (int)xb; l += 64) {
                _mm_prefetch((const char *)xa + pfd + l, _MM_HINT_T0);
                _mm_prefetch((const char *)xc + pfd + l, _MM_HINT_T0);
            }
            const __m256 F = dc_scales(kind, xa, xc);
            __m512i X[4];
            DC_UNROLL
            for (int j = 0; j < 4; j++)
                X[j] = dc_unpack(kind, xa + (size_t)j * xb + qo, xc + (size_t)j * xb + qo);
            DC_UNROLL
            for (int t = 0; t < T; t++) {
                const uint8_t *c = col[t];
                const __m256 s8 =
                    _mm256_mul_ps(F, _mm256_load_ps((const float *)(c + (size_t)nbc * 32) + 2 * q));
                const __m512 s = q4 ? _mm512_insertf32x8(_mm512_castps256_ps512(s8),
                                                         _mm256_mul_ps(s8, sixteenth), 1)
                                    : _mm512_castps256_ps512(s8);
                DC_UNROLL
                for (int j = 0; j < 4; j++) {
                    const __m512i v = _mm512_dpbusd_epi32(dc_bcast256(c + (size_t)(q + j) * 32),
                                                          X[j], dc_bcast256(ya[t][q + j].qs));
                    A[p][t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(dc_idx(q4, j), s),
                                              _mm512_cvtepi32_ps(v), A[p][t]);
                }
            }
        }
    }
    for (; q < nbc; q++) { /* a row's last blocks outside quads */
        DC_UNROLL
        for (int p = 0; p < P; p++) {
            const uint8_t *xa = rp[2 * p] + (size_t)q * xb, *xc = rp[2 * p + 1] + (size_t)q * xb;
            uint16_t ha, hc;
            memcpy(&ha, xa, 2);
            memcpy(&hc, xc, 2);
            const float da = kind == DC_MXFP4 ? hr_e8m0_half(xa[0]) : dc_h2f(ha);
            const float dc = kind == DC_MXFP4 ? hr_e8m0_half(xc[0]) : dc_h2f(hc);
            const __m512i X = dc_unpack(kind, xa + qo, xc + qo);
            DC_UNROLL
            for (int t = 0; t < T; t++) {
                const float dy = dc_h2f(ya[t][q].d), sa = da * dy, sc = dc * dy;
                const __m512 s =
                    q4 ? _mm512_setr_ps(sa, sa, sa, sa, sa / 16, sa / 16, sa / 16, sa / 16, sc, sc,
                                        sc, sc, sc / 16, sc / 16, sc / 16, sc / 16)
                       : _mm512_insertf32x8(_mm512_set1_ps(sa), _mm256_set1_ps(sc), 1);
                const __m512i v = _mm512_dpbusd_epi32(dc_bcast256(col[t] + (size_t)q * 32), X,
                                                      dc_bcast256(ya[t][q].qs));
                A[p][t] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(v), A[p][t]);
            }
        }
    }
    DC_UNROLL
    for (int p = 0; p < P; p++)
        DC_UNROLL
    for (int t = 0; t < T; t++) {
        if (!fin) {
            spill[p][t] = A[p][t];
            continue;
        }
        if (out[2 * p] >= 0)
            y[(size_t)t * ys + (size_t)out[2 * p]] = dc_hsum8(_mm512_castps512_ps256(A[p][t]));
        if (out[2 * p + 1] >= 0)
            y[(size_t)t * ys + (size_t)out[2 * p + 1]] =
                dc_hsum8(_mm512_extractf32x8_ps(A[p][t], 1));
    }
}

/* dc_group over a group of rows: two pairs when it has 3 or 4 rows (left:
 * rows from its first to the end of the block), else one pair */
DC_I void dc_rows(const int kind, const int T, int left, const uint8_t *const *rp, int nbc,
                  const hr_block_q8_0 *const *ya, uint8_t *const *col,
                  __m512 (*spill)[HR_DOT_N_MAX], bool first, bool fin, float *y, size_t ys,
                  const int *out, size_t ws) {
    if (left >= 3)
        dc_group(kind, 2, T, rp, nbc, ya, col, spill, first, fin, y, ys, out, 4 * ws);
    else
        dc_group(kind, 1, T, rp, nbc, ya, col, spill, first, fin, y, ys, out, 2 * ws);
}

DC_I void dc_dot(const int kind, const int T, int64_t n, int nr, const void *w, size_t ws,
                 const void *const *a, float *y, size_t ys) {
    const size_t xb = dc_xb(kind);
    const int64_t nb = n / 32;
    const int cb = T <= 2 ? DC_CB_WIDE : DC_CB;
    _Alignas(64) uint8_t colbuf[2 * DC_COL_BYTES(DC_CB_WIDE)];
    _Alignas(64) __m512 spill[DC_RB / 2][HR_DOT_N_MAX];
    uint8_t *col[HR_DOT_N_MAX];
    const hr_block_q8_0 *ya[HR_DOT_N_MAX];
    for (int t = 0; t < T; t++)
        col[t] = colbuf + (size_t)t * DC_COL_BYTES(cb);
    const bool one_chunk = nb <= cb;
    for (int r0 = 0; r0 < nr; r0 += DC_RB) {
        const int rows = nr - r0 < DC_RB ? nr - r0 : DC_RB;
        for (int64_t b0 = 0; b0 < nb; b0 += cb) {
            const int nbc = (int)(nb - b0 < cb ? nb - b0 : cb);
            for (int t = 0; t < T; t++) {
                ya[t] = (const hr_block_q8_0 *)a[t] + b0;
                if (!one_chunk || r0 == 0)
                    dc_prep(kind, a[t], b0, nbc, col[t]);
            }
            const bool first = b0 == 0, fin = b0 + nbc == nb;
            for (int g = 0; g < rows; g += 4) {
                const int left = rows - g;
                const uint8_t *rp[4];
                int out[4];
                for (int i = 0; i < 4; i++) {
                    const int r = i < left ? g + i : rows - 1;
                    rp[i] = (const uint8_t *)w + (size_t)(r0 + r) * ws + (size_t)b0 * xb;
                    out[i] = i < left ? r0 + r : -1;
                }
                /* more than 4 columns: two passes over the group's rows (in
                 * L1 by then), 4 columns and the rest, so the accumulators
                 * stay in registers */
                const int T0 = T > 4 ? 4 : T;
                dc_rows(kind, T0, left, rp, nbc, ya, col, &spill[g / 2], first, fin, y, ys, out,
                        ws);
                if (T > T0)
                    dc_rows(kind, T - T0, left, rp, nbc, ya + T0, col + T0,
                            (__m512(*)[HR_DOT_N_MAX]) & spill[g / 2][T0], first, fin,
                            y + (size_t)T0 * ys, ys, out, ws);
            }
        }
    }
}

/* ---- Q4_K / Q5_K / Q6_K x Q8_K ------------------------------------------- */

/* Canonical lane k of a K-quant super-block sums, over its 32-element
 * chunks, the sub-block scale times the products of chunk elements
 * 4k..4k+3, exactly in integers: vpmaddubsw gives the pair sums as int16
 * (|sums| < 2^15 for 6-bit weights at most 63 and |y| <= 128) and vpdpwssd
 * multiplies a lane's two pairs by the scale (held twice per int32 lane)
 * and adds them. One FMA per super-block and column then applies d. */

/* int32 lanes holding (v, v) as int16 pairs, v the int32 value */
DC_I __m512i dk_pairs(__m512i v) {
    return _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0xffff)),
                           _mm512_slli_epi32(v, 16));
}

/* permute index: lanes 0-3 <- a, 4-7 <- b, 8-11 <- c, 12-15 <- d */
DC_I __m512i dk_sel(int a, int b, int c, int d) {
    return _mm512_set_epi32(d, d, d, d, c, c, c, c, b, b, b, b, a, a, a, a);
}

/* the 8 sub-block sums of y's 32-element sub-blocks as int16, twice */
DC_I __m256i dk_subsums(const hr_block_q8_k *y) {
    const __m256i bs = dc_load256(y->bsums);
    const __m128i s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return _mm256_broadcastsi128_si256(s);
}

DC_I void dk_group(const int kind, const int T, const uint8_t *const *rp, int64_t nb,
                   const hr_block_q8_k *const *ya, float *y, size_t ys, const int *out,
                   size_t pfd) {
    /* kind 4: q4_K, 5: q5_K, 6: q6_K */
    const size_t xb = kind == 4   ? sizeof(hr_block_q4_k)
                      : kind == 5 ? sizeof(hr_block_q5_k)
                                  : sizeof(hr_block_q6_k);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 A[HR_DOT_N_MAX];
    __m256 M[HR_DOT_N_MAX];
    DC_UNROLL
    for (int t = 0; t < T; t++) {
        A[t] = _mm512_setzero_ps();
        M[t] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++) {
        {
            const uint8_t *xa = rp[0] + (size_t)i * xb, *xc = rp[1] + (size_t)i * xb;
            for (int l = 0; l < (int)xb; l += 64) {
                _mm_prefetch((const char *)xa + pfd + l, _MM_HINT_T0);
                _mm_prefetch((const char *)xc + pfd + l, _MM_HINT_T0);
            }
            __m512i I[HR_DOT_N_MAX];
            DC_UNROLL
            for (int t = 0; t < T; t++)
                I[t] = _mm512_setzero_si512();
            __m512 DX;
            if (kind != 6) {
                const hr_block_q4_k *ba = (const hr_block_q4_k *)xa,
                                    *bc = (const hr_block_q4_k *)xc;
                const __m128i sa = hr_kq_unpack_scales_sse(ba->scales);
                const __m128i sc = hr_kq_unpack_scales_sse(bc->scales);
                const __m512i V = dk_pairs(_mm512_cvtepu8_epi32(_mm_unpacklo_epi64(sa, sc)));
                const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi64(sa, sc));
                DX = _mm512_insertf32x8(_mm512_set1_ps(dc_h2f(ba->d)),
                                        _mm256_set1_ps(dc_h2f(bc->d)), 1);
                const __m256 DM =
                    _mm256_set_m128(_mm_set1_ps(dc_h2f(bc->dmin)), _mm_set1_ps(dc_h2f(ba->dmin)));
                const size_t qso =
                    kind == 4 ? offsetof(hr_block_q4_k, qs) : offsetof(hr_block_q5_k, qs);
                __m512i QH = _mm512_setzero_si512();
                if (kind == 5)
                    QH = _mm512_inserti64x4(
                        _mm512_castsi256_si512(dc_load256(xa + offsetof(hr_block_q5_k, qh))),
                        dc_load256(xc + offsetof(hr_block_q5_k, qh)), 1);
                DC_UNROLL
                for (int c = 0; c < 4; c++) {
                    const __m512i W =
                        _mm512_inserti64x4(_mm512_castsi256_si512(dc_load256(xa + qso + 32 * c)),
                                           dc_load256(xc + qso + 32 * c), 1);
                    __m512i lo = _mm512_and_si512(W, m4);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(W, 4), m4);
                    if (kind == 5) {
                        const __m512i b16 = _mm512_set1_epi8(16);
                        lo = _mm512_mask_or_epi32(
                            lo, 0xffff, lo,
                            _mm512_maskz_mov_epi8(
                                _mm512_test_epi8_mask(QH, _mm512_set1_epi8((char)(1 << (2 * c)))),
                                b16));
                        hi = _mm512_mask_or_epi32(
                            hi, 0xffff, hi,
                            _mm512_maskz_mov_epi8(
                                _mm512_test_epi8_mask(QH, _mm512_set1_epi8((char)(2 << (2 * c)))),
                                b16));
                    }
                    const __m512i S0 =
                        _mm512_permutexvar_epi32(dk_sel(2 * c, 2 * c, 8 + 2 * c, 8 + 2 * c), V);
                    const __m512i S1 = _mm512_permutexvar_epi32(
                        dk_sel(2 * c + 1, 2 * c + 1, 9 + 2 * c, 9 + 2 * c), V);
                    DC_UNROLL
                    for (int t = 0; t < T; t++) {
                        const int8_t *q8 = ya[t][i].qs + 64 * c;
                        I[t] = _mm512_dpwssd_epi32(I[t], _mm512_maddubs_epi16(lo, dc_bcast256(q8)),
                                                   S0);
                        I[t] = _mm512_dpwssd_epi32(
                            I[t], _mm512_maddubs_epi16(hi, dc_bcast256(q8 + 32)), S1);
                    }
                }
                DC_UNROLL
                for (int t = 0; t < T; t++) {
                    const float yd = ya[t][i].d;
                    A[t] = _mm512_fmadd_ps(_mm512_mul_ps(DX, _mm512_set1_ps(yd)),
                                           _mm512_cvtepi32_ps(I[t]), A[t]);
                    /* mins: lane j of a row = mn[2j] s(2j) + mn[2j+1] s(2j+1) */
                    __m256i mm = _mm256_madd_epi16(mn16, dk_subsums(&ya[t][i]));
                    if (kind == 5) /* one sum per row, in every lane of its half */
                        mm =
                            _mm256_hadd_epi32(_mm256_hadd_epi32(mm, mm), _mm256_hadd_epi32(mm, mm));
                    M[t] = _mm256_fmadd_ps(_mm256_mul_ps(DM, _mm256_set1_ps(-yd)),
                                           _mm256_cvtepi32_ps(mm), M[t]);
                }
                continue;
            }
            /* q6_K */
            const hr_block_q6_k *ba = (const hr_block_q6_k *)xa, *bc = (const hr_block_q6_k *)xc;
            DX =
                _mm512_insertf32x8(_mm512_set1_ps(dc_h2f(ba->d)), _mm256_set1_ps(dc_h2f(bc->d)), 1);
            const __m512i m32 = _mm512_set1_epi8(32);
            DC_UNROLL
            for (int h = 0; h < 2; h++) {
                const __m128i sca = _mm_loadl_epi64((const __m128i *)(ba->scales + 8 * h));
                const __m128i scc = _mm_loadl_epi64((const __m128i *)(bc->scales + 8 * h));
                const __m512i V = dk_pairs(_mm512_cvtepi8_epi32(_mm_unpacklo_epi64(sca, scc)));
                const __m512i QL0 =
                    _mm512_inserti64x4(_mm512_castsi256_si512(dc_load256(ba->ql + 64 * h)),
                                       dc_load256(bc->ql + 64 * h), 1);
                const __m512i QL1 =
                    _mm512_inserti64x4(_mm512_castsi256_si512(dc_load256(ba->ql + 64 * h + 32)),
                                       dc_load256(bc->ql + 64 * h + 32), 1);
                const __m512i QH =
                    _mm512_inserti64x4(_mm512_castsi256_si512(dc_load256(ba->qh + 32 * h)),
                                       dc_load256(bc->qh + 32 * h), 1);
                const __m512i m3 = _mm512_set1_epi8(0x30);
                __m512i Q[4];
                /* (ql nibble) | (2 qh bits) << 4, as the scalar reference */
                Q[0] = _mm512_or_si512(_mm512_and_si512(QL0, m4),
                                       _mm512_and_si512(_mm512_slli_epi16(QH, 4), m3));
                Q[1] = _mm512_or_si512(_mm512_and_si512(QL1, m4),
                                       _mm512_and_si512(_mm512_slli_epi16(QH, 2), m3));
                Q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(QL0, 4), m4),
                                       _mm512_and_si512(QH, m3));
                Q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(QL1, 4), m4),
                                       _mm512_and_si512(_mm512_srli_epi16(QH, 2), m3));
                DC_UNROLL
                for (int m = 0; m < 4; m++) {
                    /* lanes 0-3 of a row: scale 2m (elements l < 16), 4-7: 2m + 1 */
                    const __m512i S =
                        _mm512_permutexvar_epi32(dk_sel(2 * m, 2 * m + 1, 8 + 2 * m, 9 + 2 * m), V);
                    DC_UNROLL
                    for (int t = 0; t < T; t++) {
                        const __m512i Y = dc_bcast256(ya[t][i].qs + 128 * h + 32 * m);
                        const __m512i pq = _mm512_sub_epi16(_mm512_maddubs_epi16(Q[m], Y),
                                                            _mm512_maddubs_epi16(m32, Y));
                        I[t] = _mm512_dpwssd_epi32(I[t], pq, S);
                    }
                }
            }
            DC_UNROLL
            for (int t = 0; t < T; t++)
                A[t] = _mm512_fmadd_ps(_mm512_mul_ps(DX, _mm512_set1_ps(ya[t][i].d)),
                                       _mm512_cvtepi32_ps(I[t]), A[t]);
        }
    }
    DC_UNROLL
    for (int t = 0; t < T; t++) {
        float r[2] = {dc_hsum8(_mm512_castps512_ps256(A[t])),
                      dc_hsum8(_mm512_extractf32x8_ps(A[t], 1))};
        if (kind != 6) {
            float m[8];
            _mm256_storeu_ps(m, M[t]);
            for (int h = 0; h < 2; h++)
                r[h] += kind == 5 ? m[4 * h]
                                  : (m[4 * h] + m[4 * h + 2]) + (m[4 * h + 1] + m[4 * h + 3]);
        }
        for (int h = 0; h < 2; h++)
            if (out[h] >= 0)
                y[(size_t)t * ys + (size_t)out[h]] = r[h];
    }
}

DC_I void dk_dot(const int kind, const int T, int64_t n, int nr, const void *w, size_t ws,
                 const void *const *a, float *y, size_t ys) {
    const int64_t nb = n / HR_QK_K;
    const hr_block_q8_k *ya[HR_DOT_N_MAX];
    for (int t = 0; t < T; t++)
        ya[t] = a[t];
    /* one pair at a time (the integer chains keep a core busy with one):
     * two rows streamed faster from memory than four here */
    for (int g = 0; g < nr; g += 2) {
        const int last = g + 1 < nr ? g + 1 : g;
        const uint8_t *rp[2] = {(const uint8_t *)w + (size_t)g * ws,
                                (const uint8_t *)w + (size_t)last * ws};
        const int out[2] = {g, last != g ? last : -1};
        dk_group(kind, T, rp, nb, ya, y, ys, out, 2 * ws);
    }
}

#define DC_Q4(T) dc_dot(DC_Q4_0, T, n, nr, w, ws, a, y, ys)
#define DC_Q8(T) dc_dot(DC_Q8_0, T, n, nr, w, ws, a, y, ys)
#define DC_FP4(T) dc_dot(DC_MXFP4, T, n, nr, w, ws, a, y, ys)

static void dotc_q4_0(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                      float *y, size_t ys) {
    HR_BY_COUNT8(nt, DC_Q4)
}

static void dotc_mxfp4(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                       float *y, size_t ys) {
    HR_BY_COUNT8(nt, DC_FP4)
}

#define DK_4(T) dk_dot(4, T, n, nr, w, ws, a, y, ys)
#define DK_5(T) dk_dot(5, T, n, nr, w, ws, a, y, ys)
#define DK_6(T) dk_dot(6, T, n, nr, w, ws, a, y, ys)

static void dotc_q4_k(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                      float *y, size_t ys) {
    HR_BY_COUNT8(nt, DK_4)
}

static void dotc_q5_k(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                      float *y, size_t ys) {
    HR_BY_COUNT8(nt, DK_5)
}

static void dotc_q6_k(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                      float *y, size_t ys) {
    HR_BY_COUNT8(nt, DK_6)
}

static void dotc_q8_0(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                      float *y, size_t ys) {
    HR_BY_COUNT8(nt, DC_Q8)
}

/* ---- F16: eight rows at once ---------------------------------------------- */

/* ggml's hsum_float_8 of the eight dots in c[0..3] (rows 2q and 2q + 1 in
 * the low and high halves of c[q]), all eight at once: the same pairs
 * added in the same tree (lanes i and i + 4, then the sums 0 + 2 and
 * 1 + 3, then those two), so every value is hsum_float_8's bit for bit
 * (a + b and b + a round alike). Row k of the result is lane k. */
static inline __m256 hsum8_x8(const __m512 c[4]) {
    /* 128-bit lane k of a: row k's lanes i + (i + 4); of b: row k + 4's */
    const __m512 a = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 b = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(3, 1, 3, 1)));
    /* [a0 + a2, a1 + a3, b0 + b2, b1 + b3] in each 128-bit lane */
    const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 g = _mm512_add_ps(f, _mm512_movehdup_ps(f));
    /* element 0 of 128-bit lane k is row k, element 2 row k + 4 */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, g));
}

/* eight rows (two per zmm) against nc columns: each (row, column) is
 * vec_dot's own 8-lane chain (element i into lane i % 8 by an fma, the
 * n % 8 tail into its lanes by one masked fma, hsum_float_8), so the same
 * bits; the rows are converted once for all nc columns. Rows at or after
 * nr repeat row 0 and are not stored. */
DC_I void f16_rows8(int64_t n, const uint16_t *const x[8], int nr, const float *const *y, int nc,
                    float *out, size_t ys) {
    __m512 c[4][4];
    DC_UNROLL
    for (int t = 0; t < 4; t++)
        DC_UNROLL
    for (int q = 0; q < 4; q++)
        c[t][q] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512 wv[4];
        DC_UNROLL
        for (int q = 0; q < 4; q++)
            wv[q] = _mm512_cvtph_ps(_mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(x[2 * q] + i))),
                _mm_loadu_si128((const __m128i *)(x[2 * q + 1] + i)), 1));
        DC_UNROLL
        for (int t = 0; t < 4; t++) {
            if (t >= nc)
                break;
            const __m512 yv = _mm512_broadcast_f32x8(_mm256_loadu_ps(y[t] + i));
            DC_UNROLL
            for (int q = 0; q < 4; q++)
                c[t][q] = _mm512_fmadd_ps(wv[q], yv, c[t][q]);
        }
    }
    if (i < n) {
        /* lanes j < n - i of both rows: fmaf(x, y, lane) as vec_dot's tail */
        const __mmask8 m8 = (__mmask8)((1u << (n - i)) - 1u);
        const __mmask16 m16 = (__mmask16)(m8 | (unsigned)m8 << 8);
        __m512 wv[4];
        DC_UNROLL
        for (int q = 0; q < 4; q++)
            wv[q] = _mm512_cvtph_ps(_mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_maskz_loadu_epi16(m8, x[2 * q] + i)),
                _mm_maskz_loadu_epi16(m8, x[2 * q + 1] + i), 1));
        DC_UNROLL
        for (int t = 0; t < 4; t++) {
            if (t >= nc)
                break;
            const __m512 yv = _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m8, y[t] + i));
            DC_UNROLL
            for (int q = 0; q < 4; q++)
                c[t][q] = _mm512_mask3_fmadd_ps(wv[q], yv, c[t][q], m16);
        }
    }
    const __mmask8 keep = (__mmask8)(nr >= 8 ? 0xff : (1u << nr) - 1u);
    DC_UNROLL
    for (int t = 0; t < 4; t++) {
        if (t >= nc)
            break;
        _mm256_mask_storeu_ps(out + (size_t)t * ys, keep, hsum8_x8(c[t]));
    }
}

/* Rows in groups of eight (the last one padded), columns in groups of up
 * to four (sixteen accumulators). Attention's scores (keys against the
 * query heads that share them) and weighted values run through this. */
static void dotn_f16(int64_t n, int nr, const void *w, size_t ws, const void *const *a, int nt,
                     float *out, size_t ys) {
    const uint8_t *wb = w;
    for (int r = 0; r < nr; r += 8) {
        const int rn = nr - r < 8 ? nr - r : 8;
        const uint16_t *x[8];
        for (int j = 0; j < 8; j++)
            x[j] = (const uint16_t *)(wb + (size_t)(r + (j < rn ? j : 0)) * ws);
        for (int t = 0; t < nt; t += 4) {
            const int nc = nt - t < 4 ? nt - t : 4;
            const float *const *y = (const float *const *)a + t;
            float *o = out + (size_t)t * ys + r;
            /* a constant column count per call keeps the accumulators in registers */
            switch (nc) {
            case 1:
                f16_rows8(n, x, rn, y, 1, o, ys);
                break;
            case 2:
                f16_rows8(n, x, rn, y, 2, o, ys);
                break;
            case 3:
                f16_rows8(n, x, rn, y, 3, o, ys);
                break;
            default:
                f16_rows8(n, x, rn, y, 4, o, ys);
                break;
            }
        }
    }
}

void hr_dotc_fill_avx512(hr_kernels *k, unsigned flags, const hr_kernels *avx2) {
    if (!(flags & HR_AVX512_VNNI))
        return;
    /* vec_dot is the AVX2 table's, which is canonical: the same values */
    const int types[] = {HR_TYPE_Q4_0, HR_TYPE_Q8_0, HR_TYPE_Q4_K,
                         HR_TYPE_Q5_K, HR_TYPE_Q6_K, HR_TYPE_MXFP4};
    const hr_vec_dot_n_fn fns[] = {dotc_q4_0, dotc_q8_0, dotc_q4_k,
                                   dotc_q5_k, dotc_q6_k, dotc_mxfp4};
    for (int i = 0; i < 6; i++) {
        k->vec_dot[types[i]] = avx2->vec_dot[types[i]];
        k->vec_dot_n[types[i]] = fns[i];
        k->dotn_one[types[i]] = true;
    }
    /* F16 (attention's KV cache among others): vec_dot stays the AVX2 one */
    if (k->vec_dot[HR_TYPE_F16] == avx2->vec_dot[HR_TYPE_F16]) {
        k->vec_dot_n[HR_TYPE_F16] = dotn_f16;
        k->dotn_one[HR_TYPE_F16] = true;
    }
}
