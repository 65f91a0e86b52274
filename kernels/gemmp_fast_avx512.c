/* gemmp_fast_avx512.c - the fast (free-order) prompt-processing GEMM over
 * packed weight panels on AVX-512 VNNI (zmm vpdpbusd), for Q4_0, Q8_0, Q4_K,
 * Q6_K and MXFP4 weights and batches of two or more tokens: the kernels of the
 * default AVX-512 table (kernels/quant.h, "Exactness is a mode"); the
 * canonical ones of gemmp_avx512.c run under --exact.
 *
 * A panel is 16 weight rows, one per 32-bit lane. For a chunk of the row
 * (HR_GEMMP_CHUNK elements) the panel is unpacked once into a stack buffer
 * laid out for the lanes: per group of 4 consecutive elements a 64-byte
 * vector holding those 4 values (u8) of each of the 16 rows, followed by
 * the per-lane scales of the block. Every token of the call then meets the
 * panel: vpdpbusd of a weight vector with 4 activation bytes of one token
 * broadcast from the activation row as it is in memory (the quantized
 * activations are not copied), so one 64-byte weight load serves
 * HR_GEMMP_TT tokens and each instruction does 64 multiply-adds. The
 * float work per (16 rows, token) is one convert and one FMA per 32-element
 * block (Q4_0) or sub-block (K-quants): a block's lanes are summed in
 * integers first, which is what makes this order free and about 1.5x the
 * canonical panels' speed on a core with one 512-bit FMA port.
 *
 * Offsets: Q4_0 values are kept as 0..15 and the -8 enters as -8 * sum(y)
 * per (token, block), computed once per call for all panels (Q8_0: x + 128
 * and -128 * sum(y); MXFP4: its doubled E2M1 values + 12, looked up from the
 * codes, and -12 * sum(y)); Q4_K mins as
 * dmin * m_j * (sum of sub-block j of y) from the activation's bsums
 * (vpdpwssd with (m_j, m_j) pairs against bsums pairs); Q6_K's -32 as
 * -32 * d * sum_g sc_g * bsums_g the same way. Results equal vec_dot up to
 * float summation order; test_gemm checks them against the scalar
 * reference within a bound. Stack use: about 90 KiB. */
#include "kernels/gemmp-impl.h"

/* tokens per micro-kernel (accumulators in registers) */
#define HR_GEMMP_TT 8
/* elements of a row per packed chunk (a multiple of 256) */
#define HR_GEMMP_CHUNK 1024
/* tokens whose Q4_0 block sums are prepared at a time */
#define HR_GEMMP_TG 256

/* bytes of a packed panel per block */
#define PB_Q4_0 (8 * 64 + 64)                     /* 8 groups, dx */
#define PB_Q4_K (64 * 64 + 8 * 64 + 8 * 64 + 64)  /* 64 groups, d*sc, (m,m), -dmin */
#define PB_Q6_K (64 * 64 + 16 * 64 + 8 * 64 + 64) /* 64 groups, d*sc, sc pairs, -32d */

#define KB_Q4_0 (HR_GEMMP_CHUNK / HR_QK4_0)
#define KB_K (HR_GEMMP_CHUNK / HR_QK_K)

/* y[t * ys + lane] (lanes < nr) = or += v */
HR_PI void put_row16(float *y, __mmask16 m, __m512 v, bool first) {
    if (!first)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y));
    _mm512_mask_storeu_ps(y, m, v);
}

/* ---- Q4_0 ------------------------------------------------------------------ */

/* 2^(e-128) (hr_e8m0_half) of the E8M0 bytes at base + off[lane] */
HR_PI __m512 gather_e8m0(__mmask16 m, __m512i off, const uint8_t *base) {
    const __m512i e = _mm512_and_si512(gather32(m, off, base), _mm512_set1_epi32(0xff));
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __m512i nrm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __mmask16 small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, nrm, sub));
}

/* Panel of rows [0, nr) for blocks [b0, b0 + kn): Q4_0's nibbles, or
 * MXFP4's codes as their doubled E2M1 values + 12 (0..24) */
static void pack_q4_0(bool fp4, const uint8_t *w, size_t ws, int nr, int64_t b0, int kn,
                      uint8_t *P) {
    const __mmask16 m = (__mmask16)((1u << nr) - 1u);
    const __m512i off = row_offsets(ws), m4 = _mm512_set1_epi8(0x0f);
    const __m512i lut = _mm512_broadcast_i32x4(hr_mxfp4_lut12());
    const size_t xb = fp4 ? sizeof(hr_block_mxfp4) : sizeof(hr_block_q4_0);
    const uint8_t *rp[16];
    row_ptrs(w, ws, nr, rp);
    for (int b = 0; b < kn; b++) {
        const size_t bo = (size_t)(b0 + b) * xb;
        uint8_t *o = P + (size_t)b * PB_Q4_0;
        __m512i V[4];
        tr16x4(rp, bo + (fp4 ? 1 : 2), V);
        HR_UNROLL
        for (int g = 0; g < 4; g++) {
            __m512i lo = _mm512_and_si512(V[g], m4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi32(V[g], 4), m4);
            if (fp4) {
                lo = _mm512_shuffle_epi8(lut, lo);
                hi = _mm512_shuffle_epi8(lut, hi);
            }
            _mm512_store_si512(o + 64 * g, lo);
            _mm512_store_si512(o + 64 * (g + 4), hi);
        }
        _mm512_store_ps(o + 512, fp4 ? gather_e8m0(m, off, w + bo) : gather_h(m, off, w + bo));
    }
}

/* Q8_0's panel: as Q4_0's, the values x + 128 (u8) in the same groups,
 * elements 0-15 in groups 0-3 and 16-31 in groups 4-7 */
static void pack_q8_0(const uint8_t *w, size_t ws, int nr, int64_t b0, int kn, uint8_t *P) {
    const __mmask16 m = (__mmask16)((1u << nr) - 1u);
    const __m512i off = row_offsets(ws), flip = _mm512_set1_epi8((char)0x80);
    const uint8_t *rp[16];
    row_ptrs(w, ws, nr, rp);
    for (int b = 0; b < kn; b++) {
        const size_t bo = (size_t)(b0 + b) * sizeof(hr_block_q8_0);
        uint8_t *o = P + (size_t)b * PB_Q4_0;
        for (int h = 0; h < 2; h++) {
            __m512i V[4];
            tr16x4(rp, bo + 2 + 16 * (size_t)h, V);
            HR_UNROLL
            for (int g = 0; g < 4; g++)
                _mm512_store_si512(o + 64 * (g + 4 * h), _mm512_xor_si512(V[g], flip));
        }
        _mm512_store_ps(o + 512, gather_h(m, off, w + bo));
    }
}

/* Per token t and block b of the chunk: -k * sum(y) (k the weights'
 * offset: 8 for Q4_0, 128 for Q8_0) and dy. */
static void aux_q4_0(const uint8_t *a, size_t as, int tn, int64_t b0, int kn, int k, int32_t *corr,
                     float *dy) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int t = 0; t < tn; t++) {
        const uint8_t *yr = a + (size_t)t * as + (size_t)b0 * sizeof(hr_block_q8_0);
        for (int b = 0; b < kn; b++) {
            const uint8_t *yb = yr + (size_t)b * sizeof(hr_block_q8_0);
            /* sum of (y + 128) per 8 bytes, less 32 * 128 */
            const __m256i s = _mm256_sad_epu8(
                _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(yb + 2)), flip),
                _mm256_setzero_si256());
            const __m128i h =
                _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            const int sum = (int)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
            uint16_t d;
            memcpy(&d, yb, 2);
            corr[t * KB_Q4_0 + b] = -k * sum;
            dy[t * KB_Q4_0 + b] = _cvtsh_ss(d);
        }
    }
}

/* T tokens (activation rows a, a + as, ...; their aux at corr / dy) x the
 * panel over kn blocks from b0. */
HR_PI void micro_q4_0(const int T, const uint8_t *P, int kn, int64_t b0, const uint8_t *a,
                      size_t as, const int32_t *corr, const float *dy, float *y, size_t ys,
                      __mmask16 m, bool first) {
    __m512 F[HR_GEMMP_TT];
    HR_UNROLL
    for (int t = 0; t < T; t++)
        F[t] = _mm512_setzero_ps();
    const uint8_t *ab = a + 2 + (size_t)b0 * sizeof(hr_block_q8_0);
    for (int b = 0; b < kn; b++) {
        const uint8_t *W = P + (size_t)b * PB_Q4_0;
        const uint8_t *yb = ab + (size_t)b * sizeof(hr_block_q8_0);
        __m512i acc[HR_GEMMP_TT];
        HR_UNROLL
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_set1_epi32(corr[t * KB_Q4_0 + b]);
        HR_UNROLL
        for (int g = 0; g < 8; g++) {
            const __m512i wv = _mm512_load_si512(W + 64 * g);
            HR_UNROLL
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_dpbusd_epi32(acc[t], wv, pbcast(yb + (size_t)t * as + 4 * g));
        }
        const __m512 dx = _mm512_load_ps(W + 512);
        HR_UNROLL
        for (int t = 0; t < T; t++)
            F[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]),
                                   _mm512_mul_ps(dx, _mm512_set1_ps(dy[t * KB_Q4_0 + b])), F[t]);
    }
    HR_UNROLL
    for (int t = 0; t < T; t++)
        put_row16(y + (size_t)t * ys, m, F[t], first);
}

/* ---- Q4_K ------------------------------------------------------------------ */

static void pack_q4_k(const uint8_t *w, size_t ws, int nr, int64_t s0, int kn, uint8_t *P) {
    const __mmask16 m = (__mmask16)((1u << nr) - 1u);
    const __m512i off = row_offsets(ws), m4 = _mm512_set1_epi8(0x0f);
    const uint8_t *rp[16];
    row_ptrs(w, ws, nr, rp);
    for (int s = 0; s < kn; s++) {
        const size_t bo = (size_t)(s0 + s) * sizeof(hr_block_q4_k);
        const uint8_t *base = w + bo;
        uint8_t *o = P + (size_t)s * PB_Q4_K;
        for (int c = 0; c < 4; c++)
            for (int q = 0; q < 2; q++) {
                __m512i V[4];
                tr16x4(rp, bo + 16 + 32 * c + 16 * q, V);
                HR_UNROLL
                for (int g = 0; g < 4; g++) {
                    _mm512_store_si512(o + 64 * (16 * c + 4 * q + g), _mm512_and_si512(V[g], m4));
                    _mm512_store_si512(o + 64 * (16 * c + 8 + 4 * q + g),
                                       _mm512_and_si512(_mm512_srli_epi32(V[g], 4), m4));
                }
            }
        const __m512 d = gather_h(m, off, base), dmin = gather_h(m, off, base + 2);
        float dsc[8][16];
        int16_t mm[8][16][2];
        for (int r = 0; r < 16; r++) {
            uint8_t sc[8] = {0}, mn[8] = {0};
            if (r < nr)
                hr_kq_unpack_scales(w + (size_t)r * ws + bo + 4, sc, mn);
            for (int j = 0; j < 8; j++) {
                dsc[j][r] = (float)sc[j];
                mm[j][r][0] = mm[j][r][1] = (int16_t)mn[j];
            }
        }
        float *fo = (float *)(o + 4096);
        for (int j = 0; j < 8; j++)
            _mm512_store_ps(fo + 16 * j, _mm512_mul_ps(d, _mm512_loadu_ps(dsc[j])));
        memcpy(o + 4096 + 512, mm, sizeof(mm));
        _mm512_store_ps(o + 4096 + 1024, _mm512_sub_ps(_mm512_setzero_ps(), dmin));
    }
}

HR_PI void micro_q4_k(const int T, const uint8_t *P, int kn, int64_t s0, const uint8_t *a,
                      size_t as, float *y, size_t ys, __mmask16 m, bool first) {
    __m512 F[HR_GEMMP_TT];
    HR_UNROLL
    for (int t = 0; t < T; t++)
        F[t] = _mm512_setzero_ps();
    for (int s = 0; s < kn; s++) {
        const uint8_t *W = P + (size_t)s * PB_Q4_K;
        const uint8_t *yb = a + (size_t)(s0 + s) * sizeof(hr_block_q8_k);
        const uint8_t *yq = yb + offsetof(hr_block_q8_k, qs);
        __m512 G[HR_GEMMP_TT];
        __m512i acc[HR_GEMMP_TT];
        HR_UNROLL
        for (int t = 0; t < T; t++)
            G[t] = _mm512_setzero_ps();
        for (int j = 0; j < 8; j++) {
            HR_UNROLL
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_setzero_si512();
            HR_UNROLL
            for (int g = 0; g < 8; g++) {
                const __m512i wv = _mm512_load_si512(W + 64 * (8 * j + g));
                HR_UNROLL
                for (int t = 0; t < T; t++)
                    acc[t] = _mm512_dpbusd_epi32(acc[t], wv,
                                                 pbcast(yq + (size_t)t * as + 32 * j + 4 * g));
            }
            const __m512 dsc = _mm512_load_ps(W + 4096 + 64 * j);
            HR_UNROLL
            for (int t = 0; t < T; t++)
                G[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), dsc, G[t]);
        }
        const uint8_t *bs = yb + offsetof(hr_block_q8_k, bsums);
        HR_UNROLL
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_setzero_si512();
        HR_UNROLL
        for (int j = 0; j < 8; j++) {
            const __m512i mv = _mm512_load_si512(W + 4096 + 512 + 64 * j);
            HR_UNROLL
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_dpwssd_epi32(acc[t], mv, pbcast(bs + (size_t)t * as + 4 * j));
        }
        const __m512 ndmin = _mm512_load_ps(W + 4096 + 1024);
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            G[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), ndmin, G[t]);
            F[t] = _mm512_fmadd_ps(G[t], _mm512_set1_ps(pbcastf(yb + (size_t)t * as)), F[t]);
        }
    }
    HR_UNROLL
    for (int t = 0; t < T; t++)
        put_row16(y + (size_t)t * ys, m, F[t], first);
}

/* ---- Q6_K ------------------------------------------------------------------ */

static void pack_q6_k(const uint8_t *w, size_t ws, int nr, int64_t s0, int kn, uint8_t *P) {
    const __mmask16 m = (__mmask16)((1u << nr) - 1u);
    const __m512i off = row_offsets(ws);
    const uint8_t *rp[16];
    row_ptrs(w, ws, nr, rp);
    for (int s = 0; s < kn; s++) {
        const size_t bo = (size_t)(s0 + s) * sizeof(hr_block_q6_k);
        const uint8_t *base = w + bo;
        uint8_t *o = P + (size_t)s * PB_Q6_K;
        q6k_values(rp, bo, o);
        const __m512 d = gather_h_end(m, off, base + offsetof(hr_block_q6_k, d));
        float dsc[16][16];
        int16_t sp[8][32]; /* [pair i][2 * row + k]: sc_2i+k */
        for (int r = 0; r < 16; r++) {
            const int8_t *sc = (const int8_t *)(w + (size_t)r * ws + bo + 192);
            for (int g = 0; g < 16; g++) {
                const int v = r < nr ? sc[g] : 0;
                dsc[g][r] = (float)v;
                sp[g / 2][2 * r + (g & 1)] = (int16_t)v;
            }
        }
        float *fo = (float *)(o + 4096);
        for (int g = 0; g < 16; g++)
            _mm512_store_ps(fo + 16 * g, _mm512_mul_ps(d, _mm512_loadu_ps(dsc[g])));
        memcpy(o + 4096 + 1024, sp, 8 * 64);
        _mm512_store_ps(o + 4096 + 1024 + 512, _mm512_mul_ps(d, _mm512_set1_ps(-32.0f)));
    }
}

HR_PI void micro_q6_k(const int T, const uint8_t *P, int kn, int64_t s0, const uint8_t *a,
                      size_t as, float *y, size_t ys, __mmask16 m, bool first) {
    __m512 F[HR_GEMMP_TT];
    HR_UNROLL
    for (int t = 0; t < T; t++)
        F[t] = _mm512_setzero_ps();
    for (int s = 0; s < kn; s++) {
        const uint8_t *W = P + (size_t)s * PB_Q6_K;
        const uint8_t *yb = a + (size_t)(s0 + s) * sizeof(hr_block_q8_k);
        const uint8_t *yq = yb + offsetof(hr_block_q8_k, qs);
        __m512 G[HR_GEMMP_TT];
        __m512i acc[HR_GEMMP_TT];
        HR_UNROLL
        for (int t = 0; t < T; t++)
            G[t] = _mm512_setzero_ps();
        for (int g = 0; g < 16; g++) {
            HR_UNROLL
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_setzero_si512();
            HR_UNROLL
            for (int q = 0; q < 4; q++) {
                const __m512i wv = _mm512_load_si512(W + 64 * (4 * g + q));
                HR_UNROLL
                for (int t = 0; t < T; t++)
                    acc[t] = _mm512_dpbusd_epi32(acc[t], wv,
                                                 pbcast(yq + (size_t)t * as + 16 * g + 4 * q));
            }
            const __m512 dsc = _mm512_load_ps(W + 4096 + 64 * g);
            HR_UNROLL
            for (int t = 0; t < T; t++)
                G[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), dsc, G[t]);
        }
        const uint8_t *bs = yb + offsetof(hr_block_q8_k, bsums);
        HR_UNROLL
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_setzero_si512();
        HR_UNROLL
        for (int i = 0; i < 8; i++) {
            const __m512i sv = _mm512_load_si512(W + 4096 + 1024 + 64 * i);
            HR_UNROLL
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_dpwssd_epi32(acc[t], sv, pbcast(bs + (size_t)t * as + 4 * i));
        }
        const __m512 n32d = _mm512_load_ps(W + 4096 + 1024 + 512);
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            G[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), n32d, G[t]);
            F[t] = _mm512_fmadd_ps(G[t], _mm512_set1_ps(pbcastf(yb + (size_t)t * as)), F[t]);
        }
    }
    HR_UNROLL
    for (int t = 0; t < T; t++)
        put_row16(y + (size_t)t * ys, m, F[t], first);
}

/* ---- drivers --------------------------------------------------------------- */

_Static_assert(HR_GEMMP_TT == 8, "HR_BY_COUNT8 covers 1..8 tokens");

enum { B32_Q4_0, B32_Q8_0, B32_MXFP4 };

/* Q4_0, Q8_0 and MXFP4: the same panels and micro-kernel, their own packing
 * and offset */
static void gemmpf_b32(int kind, int64_t n, int nr, int nt, const void *w, size_t ws, const void *a,
                       size_t as, float *y, size_t ys) {
    const int64_t nb = n / HR_QK4_0;
    const uint8_t *wb = w, *ab = a;
    _Alignas(64) uint8_t P[KB_Q4_0 * PB_Q4_0];
    _Alignas(64) int32_t corr[HR_GEMMP_TG * KB_Q4_0];
    _Alignas(64) float dy[HR_GEMMP_TG * KB_Q4_0];
    for (int64_t b0 = 0; b0 < nb; b0 += KB_Q4_0) {
        const int kn = (int)(nb - b0 < KB_Q4_0 ? nb - b0 : KB_Q4_0);
        for (int tg = 0; tg < nt; tg += HR_GEMMP_TG) {
            const int tn = nt - tg < HR_GEMMP_TG ? nt - tg : HR_GEMMP_TG;
            aux_q4_0(ab + (size_t)tg * as, as, tn, b0, kn,
                     kind == B32_Q8_0    ? 128
                     : kind == B32_MXFP4 ? 12
                                         : 8,
                     corr, dy);
            for (int r0 = 0; r0 < nr; r0 += 16) {
                const int pn = nr - r0 < 16 ? nr - r0 : 16;
                const __mmask16 m = (__mmask16)((1u << pn) - 1u);
                if (kind == B32_Q8_0)
                    pack_q8_0(wb + (size_t)r0 * ws, ws, pn, b0, kn, P);
                else
                    pack_q4_0(kind == B32_MXFP4, wb + (size_t)r0 * ws, ws, pn, b0, kn, P);
                for (int t0 = 0; t0 < tn; t0 += HR_GEMMP_TT) {
                    const int tt = tn - t0;
                    const uint8_t *at = ab + (size_t)(tg + t0) * as;
                    float *yt = y + (size_t)(tg + t0) * ys + r0;
                    const int32_t *ct = corr + t0 * KB_Q4_0;
                    const float *dt = dy + t0 * KB_Q4_0;
#define Q4_0_CALL(T) micro_q4_0(T, P, kn, b0, at, as, ct, dt, yt, ys, m, b0 == 0)
                    HR_BY_COUNT8(tt, Q4_0_CALL)
#undef Q4_0_CALL
                }
            }
        }
    }
}

void hr_gemmpf_q4_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                    float *y, size_t ys) {
    gemmpf_b32(B32_Q4_0, n, nr, nt, w, ws, a, as, y, ys);
}

void hr_gemmpf_mxfp4(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys) {
    gemmpf_b32(B32_MXFP4, n, nr, nt, w, ws, a, as, y, ys);
}

void hr_gemmpf_q8_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                    float *y, size_t ys) {
    gemmpf_b32(B32_Q8_0, n, nr, nt, w, ws, a, as, y, ys);
}

void hr_gemmpf_q4_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                    float *y, size_t ys) {
    const int64_t nb = n / HR_QK_K;
    const uint8_t *wb = w, *ab = a;
    _Alignas(64) uint8_t P[KB_K * PB_Q4_K];
    for (int64_t s0 = 0; s0 < nb; s0 += KB_K) {
        const int kn = (int)(nb - s0 < KB_K ? nb - s0 : KB_K);
        for (int r0 = 0; r0 < nr; r0 += 16) {
            const int pn = nr - r0 < 16 ? nr - r0 : 16;
            const __mmask16 m = (__mmask16)((1u << pn) - 1u);
            pack_q4_k(wb + (size_t)r0 * ws, ws, pn, s0, kn, P);
            for (int t0 = 0; t0 < nt; t0 += HR_GEMMP_TT) {
                const uint8_t *at = ab + (size_t)t0 * as;
                float *yt = y + (size_t)t0 * ys + r0;
#define Q4_K_CALL(T) micro_q4_k(T, P, kn, s0, at, as, yt, ys, m, s0 == 0)
                HR_BY_COUNT8(nt - t0, Q4_K_CALL)
#undef Q4_K_CALL
            }
        }
    }
}

void hr_gemmpf_q6_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                    float *y, size_t ys) {
    const int64_t nb = n / HR_QK_K;
    const uint8_t *wb = w, *ab = a;
    _Alignas(64) uint8_t P[KB_K * PB_Q6_K];
    for (int64_t s0 = 0; s0 < nb; s0 += KB_K) {
        const int kn = (int)(nb - s0 < KB_K ? nb - s0 : KB_K);
        for (int r0 = 0; r0 < nr; r0 += 16) {
            const int pn = nr - r0 < 16 ? nr - r0 : 16;
            const __mmask16 m = (__mmask16)((1u << pn) - 1u);
            pack_q6_k(wb + (size_t)r0 * ws, ws, pn, s0, kn, P);
            for (int t0 = 0; t0 < nt; t0 += HR_GEMMP_TT) {
                const uint8_t *at = ab + (size_t)t0 * as;
                float *yt = y + (size_t)t0 * ys + r0;
#define Q6_K_CALL(T) micro_q6_k(T, P, kn, s0, at, as, yt, ys, m, s0 == 0)
                HR_BY_COUNT8(nt - t0, Q6_K_CALL)
#undef Q6_K_CALL
            }
        }
    }
}
