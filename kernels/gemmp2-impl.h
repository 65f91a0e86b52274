/* gemmp2-impl.h - the free-order prompt-processing GEMM of the default
 * AVX2 table (kernels/quant.h, "Exactness is a mode") for Q4_0, Q8_0, Q4_K,
 * Q5_K and Q6_K weights and calls of two or more tokens: packed panels of 8
 * weight rows, one row per 32-bit lane of a ymm register. The K-quants are
 * described at their section below.
 *
 * For a chunk of a row (HR_GEMMP2_CHUNK elements) the panel is unpacked
 * once into a stack buffer: per 32-element block, 8 vectors of 32 bytes,
 * vector g holding elements 4g..4g+3 (u8) of each of the 8 rows, then the
 * 8 rows' scales. Every token of the call meets the panel: vpmaddubsw of a
 * weight vector with 4 activation bytes of one token broadcast, the 8
 * groups' int16 pair sums added in int16 (Q4_0: 8 x 15 x 127 x 2 fits),
 * one vpmaddwd to int32 and one convert and FMA per (8 rows, token,
 * block): a block's lanes are summed in integers, which is what makes this
 * order free, and about twice the work per instruction of the canonical
 * tiles (gemm-impl.h), which keep 8 float lanes per (row, token, block).
 *
 * Offsets: Q4_0 values are kept as 0..15 and the -8 enters as -8 * sum(y)
 * per (token, block); Q8_0 values as x + 128 would overflow the int16
 * pair sums, so Q8_0 keeps them signed and multiplies |x| by y signed as
 * x (vpsignb), each group's pair sums widened to int32 on their own. Results equal
 * vec_dot up to float summation order; test_gemm holds them to 2e-5 of the
 * sum of the products' magnitudes. Panels are built from in-order row loads
 * and an in-lane dword transpose. Stack use: about 60 KiB.
 *
 * Included twice: by gemmp_fast_avx2.c with HR_P2_VNNI 0 (the functions
 * hr_gemmp2f_*) and by gemmp_fast_avxvnni.c with HR_P2_VNNI 1 (hr_gemmp2v_*,
 * for CPUs with AVX-VNNI: Intel cores since Alder Lake). With VNNI,
 * vpdpbusd sums 4 products straight into int32 without saturation, so the
 * int16 pair sums, their widening and the sign trick go: one instruction
 * per (group, token) for every type; Q8_0 then keeps x + 128 (u8) with
 * -128 * sum(y) per block like Q4_0's offset, and the K-quants' sub-block
 * scales are applied in floats (one convert and FMA per sub-block) since
 * their integer sums no longer pass through int16. */
#ifndef HR_P2_VNNI
#error "define HR_P2_VNNI (0 or 1) before including gemmp2-impl.h"
#endif
#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define HR_P2 static inline __attribute__((always_inline))
#if HR_P2_VNNI
#define HR_P2_FN(name) hr_gemmp2v_##name
/* acc + the 4-byte dot products of u (u8) and s (s8) per int32 lane */
#define HR_P2_DOT(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#else
#define HR_P2_FN(name) hr_gemmp2f_##name
#endif
/* the exported function of a type: its driver and kind */
#define HR_P2_ENTRY(NAME, DRIVER, KIND)                                                            \
    void HR_P2_FN(NAME)(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a,        \
                        size_t as, float *y, size_t ys) {                                          \
        DRIVER(KIND, n, nr, nt, w, ws, a, as, y, ys);                                              \
    }
#define HR_UNROLL2 _Pragma("GCC unroll 8")

/* tokens per micro-kernel call (T int and T float accumulators in ymm) */
#define HR_GEMMP2_TT 4
/* elements of a row per packed chunk */
#define HR_GEMMP2_CHUNK 1024
/* tokens whose block sums are prepared at a time */
#define HR_GEMMP2_TG 128
#define KB2 (HR_GEMMP2_CHUNK / HR_QK4_0)
/* bytes of a packed panel per block: 8 groups, 8 scales */
#define PB2 (8 * 32 + 32)

HR_P2 __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The panel's row pointers: rows past nr repeat the last one (their lanes
 * are computed but never stored), so every load stays inside the matrix. */
HR_P2 void row_ptrs8(const uint8_t *w, size_t ws, int nr, const uint8_t *rp[8]) {
    for (int r = 0; r < 8; r++)
        rp[r] = w + (size_t)(r < nr ? r : nr - 1) * ws;
}

/* V[g] lane r = the 4 bytes at rp[r] + off + 4g (g < 4): 8 row loads of 16
 * bytes (each row read in order) and a 4 x 4 dword transpose inside each
 * 128-bit lane (lane k holds rows 4k..4k+3). */
HR_P2 void tr8x4(const uint8_t *const *rp, size_t off, __m256i V[4]) {
    __m256i B[4];
    HR_UNROLL2
    for (int j = 0; j < 4; j++)
        B[j] = _mm256_setr_m128i(_mm_loadu_si128((const __m128i *)(rp[j] + off)),
                                 _mm_loadu_si128((const __m128i *)(rp[4 + j] + off)));
    const __m256i t0 = _mm256_unpacklo_epi32(B[0], B[1]), t1 = _mm256_unpackhi_epi32(B[0], B[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(B[2], B[3]), t3 = _mm256_unpackhi_epi32(B[2], B[3]);
    V[0] = _mm256_unpacklo_epi64(t0, t2);
    V[1] = _mm256_unpackhi_epi64(t0, t2);
    V[2] = _mm256_unpacklo_epi64(t1, t3);
    V[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* the fp16 at rp[r] + off of the 8 rows, as floats */
HR_P2 __m256 rows_h(const uint8_t *const *rp, size_t off) {
    uint16_t h[8];
    for (int r = 0; r < 8; r++)
        memcpy(&h[r], rp[r] + off, 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

enum { B2_Q4_0, B2_Q8_0, B2_MXFP4 };

/* Q8_0's values as the panel keeps them: x (s8), or with VNNI x + 128 (u8) */
HR_P2 __m256i q8v(__m256i v) {
    return HR_P2_VNNI ? _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) : v;
}

/* The panel of rows [0, nr) (nr <= 8) for blocks [b0, b0 + kn). MXFP4's
 * codes become their doubled E2M1 values + 12 (0..24), its scale
 * 2^(e-128). */
static void pack2(int kind, const uint8_t *w, size_t ws, int nr, int64_t b0, int kn, uint8_t *P) {
    const bool q8 = kind == B2_Q8_0, fp4 = kind == B2_MXFP4;
    const size_t xb = q8    ? sizeof(hr_block_q8_0)
                      : fp4 ? sizeof(hr_block_mxfp4)
                            : sizeof(hr_block_q4_0);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i lut = _mm256_broadcastsi128_si256(hr_mxfp4_lut12());
    const uint8_t *rp[8];
    row_ptrs8(w, ws, nr, rp);
    for (int b = 0; b < kn; b++) {
        const size_t bo = (size_t)(b0 + b) * xb;
        uint8_t *o = P + (size_t)b * PB2;
        __m256i V[4];
        tr8x4(rp, bo + (fp4 ? 1 : 2), V);
        HR_UNROLL2
        for (int g = 0; g < 4; g++) {
            if (q8) {
                _mm256_store_si256((__m256i *)(o + 32 * g), q8v(V[g]));
                continue;
            }
            __m256i lo = _mm256_and_si256(V[g], m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi32(V[g], 4), m4);
            if (fp4) {
                lo = _mm256_shuffle_epi8(lut, lo);
                hi = _mm256_shuffle_epi8(lut, hi);
            }
            _mm256_store_si256((__m256i *)(o + 32 * g), lo);
            _mm256_store_si256((__m256i *)(o + 32 * (g + 4)), hi);
        }
        if (q8) {
            tr8x4(rp, bo + 18, V);
            HR_UNROLL2
            for (int g = 0; g < 4; g++)
                _mm256_store_si256((__m256i *)(o + 32 * (g + 4)), q8v(V[g]));
        }
        if (fp4) {
            float *dx = (float *)(o + 256);
            for (int r = 0; r < 8; r++)
                dx[r] = hr_e8m0_half(rp[r][bo]);
        } else {
            _mm256_store_ps((float *)(o + 256), rows_h(rp, bo));
        }
    }
}

/* Per token t and block b of the chunk: -k * sum(y) (k the values' offset:
 * 8 for Q4_0, 12 for MXFP4, 0 for Q8_0) and dy. */
static void aux2(int k, const uint8_t *a, size_t as, int tn, int64_t b0, int kn, int32_t *corr,
                 float *dy) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int t = 0; t < tn; t++) {
        const uint8_t *yr = a + (size_t)t * as + (size_t)b0 * sizeof(hr_block_q8_0);
        for (int b = 0; b < kn; b++) {
            const uint8_t *yb = yr + (size_t)b * sizeof(hr_block_q8_0);
            int sum = 0;
            if (k) { /* sum of (y + 128) per 8 bytes, less 32 * 128 */
                const __m256i s = _mm256_sad_epu8(
                    _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(yb + 2)), flip),
                    _mm256_setzero_si256());
                const __m128i h =
                    _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                sum = (int)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
            }
            uint16_t d;
            memcpy(&d, yb, 2);
            corr[t * KB2 + b] = -k * sum;
            dy[t * KB2 + b] = _cvtsh_ss(d);
        }
    }
}

/* y[t * ys + r] (r < nr) = or += v */
HR_P2 void put_row8(float *yt, int nr, __m256 v, bool first) {
    const __m256i m =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    if (!first)
        v = _mm256_add_ps(v, _mm256_maskload_ps(yt, m));
    _mm256_maskstore_ps(yt, m, v);
}

/* T tokens (activation rows a, a + as, ...; their aux at corr / dy) x the
 * panel over kn blocks from b0; y[t * ys + r] for the panel's nr rows. */
HR_P2 void micro2(const int kind, const int T, const uint8_t *P, int kn, int64_t b0,
                  const uint8_t *a, size_t as, const int32_t *corr, const float *dy, float *y,
                  size_t ys, int nr, bool first) {
#if HR_P2_VNNI
    (void)kind; /* one instruction per group for every type */
#else
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    __m256 F[HR_GEMMP2_TT];
    HR_UNROLL2
    for (int t = 0; t < T; t++)
        F[t] = _mm256_setzero_ps();
    const uint8_t *ab = a + 2 + (size_t)b0 * sizeof(hr_block_q8_0);
    for (int b = 0; b < kn; b++) {
        const uint8_t *W = P + (size_t)b * PB2;
        const uint8_t *yb = ab + (size_t)b * sizeof(hr_block_q8_0);
        __m256i acc[HR_GEMMP2_TT];
        HR_UNROLL2
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_set1_epi32(corr[t * KB2 + b]);
#if HR_P2_VNNI
        HR_UNROLL2
        for (int g = 0; g < 8; g++) {
            const __m256i wv = _mm256_load_si256((const __m256i *)(W + 32 * g));
            HR_UNROLL2
            for (int t = 0; t < T; t++)
                acc[t] = HR_P2_DOT(acc[t], wv, bcast4(yb + (size_t)t * as + 4 * g));
        }
#else
        if (kind == B2_Q8_0) { /* |x| . sign(y, x), each group to int32 (2 x 127^2 fills int16) */
            HR_UNROLL2
            for (int g = 0; g < 8; g++) {
                const __m256i wv = _mm256_load_si256((const __m256i *)(W + 32 * g));
                const __m256i u = _mm256_sign_epi8(wv, wv);
                HR_UNROLL2
                for (int t = 0; t < T; t++) {
                    const __m256i yv = bcast4(yb + (size_t)t * as + 4 * g);
                    const __m256i q = _mm256_maddubs_epi16(u, _mm256_sign_epi8(yv, wv));
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(q, ones));
                }
            }
        } else { /* Q4_0 0..15 x y: all 8 groups' int16 pair sums fit int16;
                    MXFP4 0..24: 4 at a time */
            const int GH = kind == B2_MXFP4 ? 4 : 8;
            __m256i p[HR_GEMMP2_TT];
            HR_UNROLL2
            for (int g = 0; g < 8; g++) {
                const __m256i wv = _mm256_load_si256((const __m256i *)(W + 32 * g));
                HR_UNROLL2
                for (int t = 0; t < T; t++) {
                    const __m256i q = _mm256_maddubs_epi16(wv, bcast4(yb + (size_t)t * as + 4 * g));
                    p[t] = g % GH == 0 ? q : _mm256_add_epi16(p[t], q);
                }
                if (g % GH == GH - 1) {
                    HR_UNROLL2
                    for (int t = 0; t < T; t++)
                        acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p[t], ones));
                }
            }
        }
#endif
        const __m256 dx = _mm256_load_ps((const float *)(W + 256));
        HR_UNROLL2
        for (int t = 0; t < T; t++)
            F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]),
                                   _mm256_mul_ps(dx, _mm256_set1_ps(dy[t * KB2 + b])), F[t]);
    }
    HR_UNROLL2
    for (int t = 0; t < T; t++)
        put_row8(y + (size_t)t * ys, nr, F[t], first);
}

static void gemmp2(int kind, int64_t n, int nr, int nt, const void *w, size_t ws, const void *a,
                   size_t as, float *y, size_t ys) {
    const int64_t nb = n / HR_QK4_0;
    const uint8_t *wb = w, *ab = a;
    const int k = kind == B2_Q4_0 ? 8 : kind == B2_MXFP4 ? 12 : HR_P2_VNNI ? 128 : 0;
    _Alignas(32) uint8_t P[KB2 * PB2];
    _Alignas(32) int32_t corr[HR_GEMMP2_TG * KB2];
    _Alignas(32) float dy[HR_GEMMP2_TG * KB2];
    for (int64_t b0 = 0; b0 < nb; b0 += KB2) {
        const int kn = (int)(nb - b0 < KB2 ? nb - b0 : KB2);
        for (int tg = 0; tg < nt; tg += HR_GEMMP2_TG) {
            const int tn = nt - tg < HR_GEMMP2_TG ? nt - tg : HR_GEMMP2_TG;
            aux2(k, ab + (size_t)tg * as, as, tn, b0, kn, corr, dy);
            for (int r0 = 0; r0 < nr; r0 += 8) {
                const int pn = nr - r0 < 8 ? nr - r0 : 8;
                pack2(kind, wb + (size_t)r0 * ws, ws, pn, b0, kn, P);
                for (int t0 = 0; t0 < tn; t0 += HR_GEMMP2_TT) {
                    const uint8_t *at = ab + (size_t)(tg + t0) * as;
                    float *yt = y + (size_t)(tg + t0) * ys + r0;
                    const int32_t *ct = corr + t0 * KB2;
                    const float *dt = dy + t0 * KB2;
                    switch (tn - t0 < HR_GEMMP2_TT ? tn - t0 : HR_GEMMP2_TT) {
#define P2_CALL(T)                                                                                 \
    case T:                                                                                        \
        if (kind == B2_Q8_0)                                                                       \
            micro2(B2_Q8_0, T, P, kn, b0, at, as, ct, dt, yt, ys, pn, b0 == 0);                    \
        else if (kind == B2_MXFP4)                                                                 \
            micro2(B2_MXFP4, T, P, kn, b0, at, as, ct, dt, yt, ys, pn, b0 == 0);                   \
        else                                                                                       \
            micro2(B2_Q4_0, T, P, kn, b0, at, as, ct, dt, yt, ys, pn, b0 == 0);                    \
        break;
                        P2_CALL(1)
                        P2_CALL(2)
                        P2_CALL(3)
                        P2_CALL(4)
#undef P2_CALL
                    }
                }
            }
        }
    }
}

HR_P2_ENTRY(q4_0, gemmp2, B2_Q4_0)

HR_P2_ENTRY(mxfp4, gemmp2, B2_MXFP4)

HR_P2_ENTRY(q8_0, gemmp2, B2_Q8_0)

/* ---- K-quants ------------------------------------------------------------- */

/* Q4_K and Q6_K: 8-row panels per 256-element super-block, the values as
 * above (one vector per 4 elements of the 8 rows, element order), and the
 * scales as int16 pairs (s, s) per lane so that vpmaddwd applies them to
 * the int16 pair sums while widening: a super-block's integer sum is exact
 * in int32 (Q4_K: 8 x 63 x 32 x 15 x 127; Q6_K: 16 x 128 x 16 x 63 x 127,
 * plus the -32 term) and costs one convert and one or two FMAs per
 * (8 rows, token). The mins (Q4_K) and the -32 (Q6_K) enter through the
 * activation's bsums. */
#define PBK_Q4 (2048 + 256 + 256 + 64) /* values, (sc,sc), (m,m), d, -dmin */
#define PBK_Q6 (2048 + 512 + 256 + 32) /* values, (sc,sc), (sc2i,sc2i+1), d */
#define KBK (HR_GEMMP2_CHUNK / HR_QK_K)
/* tokens per K-quant micro-kernel call: 3 without VNNI (the int16 pair
 * sums need registers of their own; 4 spilled, about 15% slower on an
 * Emerald Rapids core), 4 with it (about 5% faster than 3) */
#define HR_GEMMK2_TT (HR_P2_VNNI ? 4 : 3)
#define YQ offsetof(hr_block_q8_k, qs)
#define YBS offsetof(hr_block_q8_k, bsums)

/* Q4_K / Q5_K: the scale and min pairs, d and -dmin of the super-block at
 * byte bo of the 8 rows, after the values */
HR_P2 void kq_scales2(const uint8_t *const *rp, size_t bo, uint8_t *o) {
    int16_t(*sp)[8][2] = (int16_t(*)[8][2])(o + 2048); /* [j][row][2] */
    float(*fs)[8] = (float(*)[8])(o + 2048);           /* VNNI: d * sc, [j][row] */
    const __m256 d = rows_h(rp, bo);
    float dr[8];
    _mm256_storeu_ps(dr, d);
    for (int r = 0; r < 8; r++) {
        uint8_t sc[8], mn[8];
        hr_kq_unpack_scales(rp[r] + bo + 4, sc, mn);
        for (int j = 0; j < 8; j++) {
            if (HR_P2_VNNI)
                fs[j][r] = dr[r] * (float)sc[j];
            else
                sp[j][r][0] = sp[j][r][1] = (int16_t)sc[j];
            sp[8 + j][r][0] = sp[8 + j][r][1] = (int16_t)mn[j];
        }
    }
    _mm256_store_ps((float *)(o + 2560), d);
    _mm256_store_ps((float *)(o + 2592), _mm256_sub_ps(_mm256_setzero_ps(), rows_h(rp, bo + 2)));
}

static void pack_q4_k2(const uint8_t *w, size_t ws, int nr, int64_t s0, int kn, uint8_t *P) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const uint8_t *rp[8];
    row_ptrs8(w, ws, nr, rp);
    for (int s = 0; s < kn; s++) {
        const size_t bo = (size_t)(s0 + s) * sizeof(hr_block_q4_k);
        uint8_t *o = P + (size_t)s * PBK_Q4;
        for (int c = 0; c < 4; c++) /* qs[32c + l]: sub-block 2c low, 2c + 1 high */
            for (int q = 0; q < 2; q++) {
                __m256i V[4];
                tr8x4(rp, bo + 16 + 32 * c + 16 * q, V);
                HR_UNROLL2
                for (int g = 0; g < 4; g++) {
                    _mm256_store_si256((__m256i *)(o + 32 * (16 * c + 4 * q + g)),
                                       _mm256_and_si256(V[g], m4));
                    _mm256_store_si256((__m256i *)(o + 32 * (16 * c + 8 + 4 * q + g)),
                                       _mm256_and_si256(_mm256_srli_epi32(V[g], 4), m4));
                }
            }
        kq_scales2(rp, bo, o);
    }
}

/* Q5_K: Q4_K's panel, the values with their fifth bit from qh */
static void pack_q5_k2(const uint8_t *w, size_t ws, int nr, int64_t s0, int kn, uint8_t *P) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const uint8_t *rp[8];
    row_ptrs8(w, ws, nr, rp);
    for (int s = 0; s < kn; s++) {
        const size_t bo = (size_t)(s0 + s) * sizeof(hr_block_q5_k);
        uint8_t *o = P + (size_t)s * PBK_Q4;
        for (int q = 0; q < 2; q++) {
            __m256i H[4];
            tr8x4(rp, bo + offsetof(hr_block_q5_k, qh) + 16 * q, H);
            for (int c = 0; c < 4;
                 c++) { /* element 64c + l: bit 2c of qh[l], 64c + 32 + l: 2c + 1 */
                __m256i V[4];
                tr8x4(rp, bo + offsetof(hr_block_q5_k, qs) + 32 * c + 16 * q, V);
                HR_UNROLL2
                for (int g = 0; g < 4; g++) {
                    const __m256i lo =
                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(H[g], 2 * c), one), 4);
                    const __m256i hi = _mm256_slli_epi32(
                        _mm256_and_si256(_mm256_srli_epi32(H[g], 2 * c + 1), one), 4);
                    _mm256_store_si256((__m256i *)(o + 32 * (16 * c + 4 * q + g)),
                                       _mm256_or_si256(_mm256_and_si256(V[g], m4), lo));
                    _mm256_store_si256(
                        (__m256i *)(o + 32 * (16 * c + 8 + 4 * q + g)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(V[g], 4), m4), hi));
                }
            }
        }
        kq_scales2(rp, bo, o);
    }
}

static void pack_q6_k2(const uint8_t *w, size_t ws, int nr, int64_t s0, int kn, uint8_t *P) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const uint8_t *rp[8];
    row_ptrs8(w, ws, nr, rp);
    for (int s = 0; s < kn; s++) {
        const size_t bo = (size_t)(s0 + s) * sizeof(hr_block_q6_k);
        uint8_t *o = P + (size_t)s * PBK_Q6;
        for (int h = 0; h < 2; h++) /* hr_block_q6_k's element map */
            for (int l0 = 0; l0 < 32; l0 += 16) {
                __m256i VA[4], VB[4], VH[4];
                tr8x4(rp, bo + 64 * h + l0, VA);
                tr8x4(rp, bo + 64 * h + 32 + l0, VB);
                tr8x4(rp, bo + 128 + 32 * h + l0, VH);
                HR_UNROLL2
                for (int g = 0; g < 4; g++) {
                    const __m256i A = VA[g], B = VB[g], H = VH[g];
                    const int e = 128 * h + l0 + 4 * g;
                    _mm256_store_si256(
                        (__m256i *)(o + 8 * e),
                        _mm256_or_si256(_mm256_and_si256(A, m4),
                                        _mm256_and_si256(_mm256_slli_epi32(H, 4), m30)));
                    _mm256_store_si256(
                        (__m256i *)(o + 8 * (e + 32)),
                        _mm256_or_si256(_mm256_and_si256(B, m4),
                                        _mm256_and_si256(_mm256_slli_epi32(H, 2), m30)));
                    _mm256_store_si256(
                        (__m256i *)(o + 8 * (e + 64)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(A, 4), m4),
                                        _mm256_and_si256(H, m30)));
                    _mm256_store_si256(
                        (__m256i *)(o + 8 * (e + 96)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(B, 4), m4),
                                        _mm256_and_si256(_mm256_srli_epi32(H, 2), m30)));
                }
            }
        int16_t(*sp)[8][2] = (int16_t(*)[8][2])(o + 2048); /* [g][row][2], then [i][row][2] */
        float(*fs)[8] = (float(*)[8])(o + 2048);           /* VNNI: d * sc, [g][row] */
        const __m256 d = rows_h(rp, bo + offsetof(hr_block_q6_k, d));
        float dr[8];
        _mm256_storeu_ps(dr, d);
        for (int r = 0; r < 8; r++) {
            const int8_t *sc = (const int8_t *)(rp[r] + bo + offsetof(hr_block_q6_k, scales));
            for (int g = 0; g < 16; g++) {
                if (HR_P2_VNNI)
                    fs[g][r] = dr[r] * (float)sc[g];
                else
                    sp[g][r][0] = sp[g][r][1] = sc[g];
                sp[16 + g / 2][r][g & 1] = sc[g];
            }
        }
        _mm256_store_ps((float *)(o + 2816), d);
    }
}

/* T tokens (Q8_K activation rows a, a + as, ...) x a Q4_K (q6 false) or
 * Q6_K panel over kn super-blocks from s0. */
HR_P2 void micro_k2(const bool q6, const int T, const uint8_t *P, int kn, int64_t s0,
                    const uint8_t *a, size_t as, float *y, size_t ys, int nr, bool first) {
    __m256 F[HR_GEMMK2_TT];
    HR_UNROLL2
    for (int t = 0; t < T; t++)
        F[t] = _mm256_setzero_ps();
    for (int s = 0; s < kn; s++) {
        const uint8_t *W = P + (size_t)s * (q6 ? PBK_Q6 : PBK_Q4);
        const uint8_t *yb = a + (size_t)(s0 + s) * sizeof(hr_block_q8_k);
        __m256i acc[HR_GEMMK2_TT], p[HR_GEMMK2_TT];
#if HR_P2_VNNI
        /* scale c covers 8 groups (Q4_K) or 4 (Q6_K): their int32 sum, then
         * one convert and FMA with d * sc */
        __m256 G[HR_GEMMK2_TT];
        HR_UNROLL2
        for (int t = 0; t < T; t++)
            G[t] = _mm256_setzero_ps();
        const int GC = q6 ? 4 : 8;
        for (int c = 0; c < 256 / 4 / GC; c++) {
            HR_UNROLL2
            for (int t = 0; t < T; t++)
                acc[t] = _mm256_setzero_si256();
            HR_UNROLL2
            for (int g = 0; g < GC; g++) {
                const __m256i wv = _mm256_load_si256((const __m256i *)(W + 32 * (GC * c + g)));
                HR_UNROLL2
                for (int t = 0; t < T; t++)
                    acc[t] =
                        HR_P2_DOT(acc[t], wv, bcast4(yb + (size_t)t * as + YQ + 4 * (GC * c + g)));
            }
            const __m256 dsc = _mm256_load_ps((const float *)(W + 2048 + 32 * c));
            HR_UNROLL2
            for (int t = 0; t < T; t++)
                G[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), dsc, G[t]);
        }
#else
        HR_UNROLL2
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_setzero_si256();
        /* scale c covers 8 groups (Q4_K: a sub-block of 32) or 4 (Q6_K: 16
         * elements); its groups' pair sums are added in int16 two or four
         * at a time (Q6_K: 2 x 2 x 63 x 127, Q4_K: 4 x 2 x 15 x 127 fit),
         * then vpmaddwd with (sc, sc) widens and scales them */
        const int GC = q6 ? 4 : 8, GH = GC / 2;
        for (int c = 0; c < 256 / 4 / GC; c++) {
            const __m256i sc = _mm256_load_si256((const __m256i *)(W + 2048 + 32 * c));
            HR_UNROLL2
            for (int h = 0; h < 2; h++) {
                const int g0 = GC * c + GH * h; /* first group of the half */
                HR_UNROLL2
                for (int g = 0; g < GH; g++) {
                    const __m256i wv = _mm256_load_si256((const __m256i *)(W + 32 * (g0 + g)));
                    HR_UNROLL2
                    for (int t = 0; t < T; t++) {
                        const __m256i q = _mm256_maddubs_epi16(
                            wv, bcast4(yb + (size_t)t * as + YQ + 4 * (g0 + g)));
                        p[t] = g == 0 ? q : _mm256_add_epi16(p[t], q);
                    }
                }
                HR_UNROLL2
                for (int t = 0; t < T; t++)
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p[t], sc));
            }
        }
#endif
        /* Q4_K: sum_j m_j (bsums 2j + 2j + 1); Q6_K: sum_g sc_g bsums_g */
        HR_UNROLL2
        for (int t = 0; t < T; t++)
            p[t] = _mm256_setzero_si256();
        HR_UNROLL2
        for (int i = 0; i < 8; i++) {
            const __m256i mv =
                _mm256_load_si256((const __m256i *)(W + 2304 + 32 * i + (q6 ? 256 : 0)));
            HR_UNROLL2
            for (int t = 0; t < T; t++)
                p[t] = _mm256_add_epi32(
                    p[t], _mm256_madd_epi16(mv, bcast4(yb + (size_t)t * as + YBS + 4 * i)));
        }
#if HR_P2_VNNI
        const __m256 nm =
            q6 ? _mm256_mul_ps(_mm256_load_ps((const float *)(W + 2816)), _mm256_set1_ps(-32.0f))
               : _mm256_load_ps((const float *)(W + 2592));
        HR_UNROLL2
        for (int t = 0; t < T; t++) {
            float dy;
            memcpy(&dy, yb + (size_t)t * as, 4);
            F[t] = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_cvtepi32_ps(p[t]), nm, G[t]),
                                   _mm256_set1_ps(dy), F[t]);
        }
#else
        if (q6) {
            const __m256 d = _mm256_load_ps((const float *)(W + 2816));
            HR_UNROLL2
            for (int t = 0; t < T; t++) {
                float dy;
                memcpy(&dy, yb + (size_t)t * as, 4);
                const __m256i v = _mm256_sub_epi32(acc[t], _mm256_slli_epi32(p[t], 5));
                F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(d, _mm256_set1_ps(dy)),
                                       F[t]);
            }
        } else {
            const __m256 d = _mm256_load_ps((const float *)(W + 2560));
            const __m256 ndmin = _mm256_load_ps((const float *)(W + 2592));
            HR_UNROLL2
            for (int t = 0; t < T; t++) {
                float dy;
                memcpy(&dy, yb + (size_t)t * as, 4);
                const __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), d,
                                                 _mm256_mul_ps(_mm256_cvtepi32_ps(p[t]), ndmin));
                F[t] = _mm256_fmadd_ps(v, _mm256_set1_ps(dy), F[t]);
            }
        }
#endif
    }
    HR_UNROLL2
    for (int t = 0; t < T; t++)
        put_row8(y + (size_t)t * ys, nr, F[t], first);
}

enum { K2_Q4, K2_Q5, K2_Q6 };

static void gemmp2k(int kind, int64_t n, int nr, int nt, const void *w, size_t ws, const void *a,
                    size_t as, float *y, size_t ys) {
    const int64_t nb = n / HR_QK_K;
    const uint8_t *wb = w, *ab = a;
    _Alignas(32) uint8_t P[KBK * PBK_Q6];
    _Static_assert(PBK_Q4 <= PBK_Q6, "one buffer for both panels");
    for (int64_t s0 = 0; s0 < nb; s0 += KBK) {
        const int kn = (int)(nb - s0 < KBK ? nb - s0 : KBK);
        for (int r0 = 0; r0 < nr; r0 += 8) {
            const int pn = nr - r0 < 8 ? nr - r0 : 8;
            const bool q6 = kind == K2_Q6;
            if (q6)
                pack_q6_k2(wb + (size_t)r0 * ws, ws, pn, s0, kn, P);
            else if (kind == K2_Q5)
                pack_q5_k2(wb + (size_t)r0 * ws, ws, pn, s0, kn, P);
            else
                pack_q4_k2(wb + (size_t)r0 * ws, ws, pn, s0, kn, P);
            for (int t0 = 0; t0 < nt; t0 += HR_GEMMK2_TT) {
                const uint8_t *at = ab + (size_t)t0 * as;
                float *yt = y + (size_t)t0 * ys + r0;
                switch (nt - t0 < HR_GEMMK2_TT ? nt - t0 : HR_GEMMK2_TT) {
#define K2_CALL(T)                                                                                 \
    case T:                                                                                        \
        if (q6)                                                                                    \
            micro_k2(true, T, P, kn, s0, at, as, yt, ys, pn, s0 == 0);                             \
        else                                                                                       \
            micro_k2(false, T, P, kn, s0, at, as, yt, ys, pn, s0 == 0);                            \
        break;
                    K2_CALL(1)
                    K2_CALL(2)
                    K2_CALL(3)
#if HR_P2_VNNI
                    K2_CALL(4)
#endif
#undef K2_CALL
                }
            }
        }
    }
}

HR_P2_ENTRY(q4_k, gemmp2k, K2_Q4)

HR_P2_ENTRY(q5_k, gemmp2k, K2_Q5)

HR_P2_ENTRY(q6_k, gemmp2k, K2_Q6)
