/* gemmp_avx512.c - prompt-processing GEMM over packed weight panels on
 * AVX-512 VNNI (zmm), for Q4_0, Q4_K and Q6_K weights and two or more
 * tokens (gemm_avx512.c calls these from nt >= HR_GEMMP_MIN_T). The results
 * follow the canonical float order of kernels/canon-impl.h and equal the
 * scalar vec_dot bit for bit (test_gemm compares every entry).
 *
 * A panel is 16 weight rows, one per 32-bit lane. For a chunk of the row
 * (HR_GEMMP_CHUNK elements) the panel is unpacked once into a stack buffer
 * laid out for the lanes: per group of 4 consecutive elements (group G =
 * elements 4G..4G+3 of a block or super-block) a 64-byte vector holding
 * those 4 values (u8) of each of the 16 rows, then the rows' scales. The
 * canonical order keeps 8 float lanes per (row, token), lane k taking the
 * groups G with G % 8 == k, so a (panel, token) pair carries 8 float
 * accumulators L[k], each a zmm over the 16 rows:
 *
 *  - Q4_0: per block and group, s = vpdpbusd(-8 * sum(y of the group),
 *    weights 0..15, 4 activation bytes broadcast) is the group's exact
 *    integer sum, then L[g] = fma(dx * dy, s, L[g]). The -8 * sum(y) seeds
 *    are prepared once per chunk and token group for all panels of a pass.
 *  - Q4_K / Q6_K: per super-block, I[G % 8] += sc * (vpmaddubsw pair sums)
 *    by vpdpwssd with the sub-block scale in both words, then per
 *    super-block L[k] = fma(dx * dy, I[k], L[k]). Q4_K's mins take 4 more
 *    lanes, M[i] = fma(-(dmin * dy), mn[2i] * s(2i) + mn[2i+1] * s(2i+1),
 *    M[i]), s(j) the activations' sub-block sums (from bsums). Q6_K packs
 *    q - 32 (s8) and multiplies it by y + 128 (u8): the packing adds
 *    -128 * sum(sc * (q - 32)) per lane as the seed of I, so the -32 needs
 *    nothing per token. (Q4_0 in that form measured slower: the flip of y
 *    is one more vector operation per group and token there.)
 *
 * The accumulators persist over the row's chunks in a stack buffer:
 * HR_GEMMP_TG tokens for every panel of a pass (Q4_0, whose seeds are per
 * token), or HR_GEMMP_TGP tokens for one panel (the K-quants: a chunk is
 * packed once per HR_GEMMP_TGP tokens). At the row's end each (row,
 * token) reduces as ggml's hsum_float_8 (plus (M0 + M2) + (M1 + M3)), 16
 * rows per vector. Stack use: at most about 250 KiB. */
#include "kernels/gemmp-impl.h"

/* tokens per micro-kernel call (2: 16 float or 16 integer accumulators) */
#define HR_GEMMP_T 2
/* elements of a row per packed chunk (a multiple of 256) */
#define HR_GEMMP_CHUNK 1024
/* tokens whose accumulators persist over a row's chunks (for every panel
 * of a pass: Q4_0, Q6_K; for one panel: Q4_K) */
#define HR_GEMMP_TG 32
#define HR_GEMMP_TGP 128
/* panels of 16 rows per pass */
#define HR_GEMMP_PN (HR_GEMMP_ROWS / 16)

/* bytes of a packed panel per block */
#define PB_Q4_0 (8 * 64 + 64)                     /* 8 groups, dx */
#define PB_Q4_K (64 * 64 + 8 * 64 + 8 * 64 + 128) /* 64 groups, (sc,sc), (mn,mn), d, dmin */
#define PB_Q6_K (64 * 64 + 16 * 64 + 8 * 64 + 64) /* 64 groups, (sc,sc), seeds, d */

#define KB_Q4_0 (HR_GEMMP_CHUNK / HR_QK4_0)
#define KB_K (HR_GEMMP_CHUNK / HR_QK_K)

/* float accumulators per (panel, token): 8 lanes, and Q4_K's 4 min lanes */
#define HR_GEMMP_NS 12

/* each 32-bit lane's value x (which fits int16) as an (x, x) int16 pair */
HR_PI __m512i pair16(__m512i v) {
    const __m512i x = _mm512_and_si512(v, _mm512_set1_epi32(0xffff));
    return _mm512_or_si512(x, _mm512_slli_epi32(x, 16));
}

/* -x, exactly (the sign bit flipped, also for zero) */
HR_PI __m512 negv(__m512 x) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

/* ggml's hsum_float_8 of 8 lane vectors, 16 (row, token) sums at once */
HR_PI __m512 hsum8v(const __m512 *L) {
    const __m512 a0 = _mm512_add_ps(L[0], L[4]), a1 = _mm512_add_ps(L[1], L[5]);
    const __m512 a2 = _mm512_add_ps(L[2], L[6]), a3 = _mm512_add_ps(L[3], L[7]);
    return _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
}

/* the T tokens' accumulators (HR_GEMMP_NS vectors each) from st reduced
 * into y + t * ys, lanes < nr; q4_K adds its min lanes */
HR_PI void finish(const int T, bool mins, const __m512 *st, float *y, size_t ys, __mmask16 m) {
    HR_UNROLL
    for (int t = 0; t < T; t++) {
        const __m512 *L = st + t * HR_GEMMP_NS;
        __m512 v = hsum8v(L);
        if (mins)
            v = _mm512_add_ps(
                v, _mm512_add_ps(_mm512_add_ps(L[8], L[10]), _mm512_add_ps(L[9], L[11])));
        _mm512_mask_storeu_ps(y + (size_t)t * ys, m, v);
    }
}

/* The micro-kernel over the pairs of tokens [0, tn) of a group, their
 * accumulators from st (a fresh start where first), reduced into y at the
 * row's last chunk. */
#define HR_GEMMP_TOKENS(MICRO, MINS, STBASE, TG0)                                                  \
    for (int t0 = 0; t0 < tn; t0 += HR_GEMMP_T) {                                                  \
        __m512 *st = (STBASE) + (size_t)t0 * HR_GEMMP_NS;                                          \
        const uint8_t *at = ab + (size_t)((TG0) + t0) * as;                                        \
        float *yt = y + (size_t)((TG0) + t0) * ys + r0;                                            \
        if (tn - t0 >= 2) {                                                                        \
            MICRO(2);                                                                              \
            if (last)                                                                              \
                finish(2, MINS, st, yt, ys, m);                                                    \
        } else {                                                                                   \
            MICRO(1);                                                                              \
            if (last)                                                                              \
                finish(1, MINS, st, yt, ys, m);                                                    \
        }                                                                                          \
    }

/* The loop nest of Q4_0: rows in passes of HR_GEMMP_PN panels,
 * tokens in groups of HR_GEMMP_TG, the row in chunks of KB blocks; per
 * chunk the type's activation terms (AUX, once for all panels), per panel
 * its packing (PACK) and the micro-kernel over pairs of tokens (MICRO(T));
 * at the row's last chunk the sums are reduced into y. */
#define HR_GEMMP_LOOPS(KB, PBYTES, AUX, PACK, MICRO, MINS)                                         \
    do {                                                                                           \
        _Alignas(64) uint8_t P[(KB) * (PBYTES)];                                                   \
        _Alignas(64) __m512 S[HR_GEMMP_PN * HR_GEMMP_TG * HR_GEMMP_NS];                            \
        for (int rg = 0; rg < nr; rg += HR_GEMMP_PN * 16)                                          \
            for (int tg = 0; tg < nt; tg += HR_GEMMP_TG) {                                         \
                const int tn = nt - tg < HR_GEMMP_TG ? nt - tg : HR_GEMMP_TG;                      \
                for (int64_t b0 = 0; b0 < nb; b0 += (KB)) {                                        \
                    const int kn = (int)(nb - b0 < (KB) ? nb - b0 : (KB));                         \
                    const bool first = b0 == 0, last = b0 + kn == nb;                              \
                    AUX;                                                                           \
                    for (int p = 0; p < HR_GEMMP_PN && rg + 16 * p < nr; p++) {                    \
                        const int r0 = rg + 16 * p;                                                \
                        const int pn = nr - r0 < 16 ? nr - r0 : 16;                                \
                        const __mmask16 m = (__mmask16)((1u << pn) - 1u);                          \
                        PACK;                                                                      \
                        HR_GEMMP_TOKENS(MICRO, MINS, S + (size_t)p * HR_GEMMP_TG * HR_GEMMP_NS,    \
                                        tg)                                                        \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
    } while (0)

/* The loop nest of a type without activation terms to prepare (K-quants):
 * tokens in groups of HR_GEMMP_TGP, then panels, then the row's chunks,
 * so a panel's accumulators are kept for a group only and a chunk is
 * packed once per HR_GEMMP_TGP tokens. */
#define HR_GEMMP_LOOPS_P(KB, PBYTES, PACK, MICRO, MINS)                                            \
    do {                                                                                           \
        _Alignas(64) uint8_t P[(KB) * (PBYTES)];                                                   \
        _Alignas(64) __m512 S[HR_GEMMP_TGP * HR_GEMMP_NS];                                         \
        for (int tg = 0; tg < nt; tg += HR_GEMMP_TGP) {                                            \
            const int tn = nt - tg < HR_GEMMP_TGP ? nt - tg : HR_GEMMP_TGP;                        \
            for (int r0 = 0; r0 < nr; r0 += 16) {                                                  \
                const int pn = nr - r0 < 16 ? nr - r0 : 16;                                        \
                const __mmask16 m = (__mmask16)((1u << pn) - 1u);                                  \
                for (int64_t b0 = 0; b0 < nb; b0 += (KB)) {                                        \
                    const int kn = (int)(nb - b0 < (KB) ? nb - b0 : (KB));                         \
                    const bool first = b0 == 0, last = b0 + kn == nb;                              \
                    PACK;                                                                          \
                    HR_GEMMP_TOKENS(MICRO, MINS, S, tg)                                            \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* ---- Q4_0 ------------------------------------------------------------------ */

/* Panel of rows [0, nr) for blocks [b0, b0 + kn): group g (elements
 * 4g..4g+3: low nibbles for g < 4, high ones after) at 64 * g, dx at 512. */
static void pack_q4_0(const uint8_t *w, size_t ws, int nr, int64_t b0, int kn, uint8_t *P) {
    const __mmask16 m = (__mmask16)((1u << nr) - 1u);
    const __m512i off = row_offsets(ws), m4 = _mm512_set1_epi8(0x0f);
    const uint8_t *rp[16];
    row_ptrs(w, ws, nr, rp);
    for (int b = 0; b < kn; b++) {
        const size_t bo = (size_t)(b0 + b) * sizeof(hr_block_q4_0);
        uint8_t *o = P + (size_t)b * PB_Q4_0;
        __m512i V[4];
        tr16x4(rp, bo + 2, V);
        HR_UNROLL
        for (int g = 0; g < 4; g++) {
            _mm512_store_si512(o + 64 * g, _mm512_and_si512(V[g], m4));
            _mm512_store_si512(o + 64 * (g + 4), _mm512_and_si512(_mm512_srli_epi32(V[g], 4), m4));
        }
        _mm512_store_ps(o + 512, gather_h(m, off, w + bo));
    }
}

/* Per token t < tn and block b of the chunk: the 8 group seeds -8 * sum(y)
 * at seed[(t * KB + b) * 8], dy at dy[t * KB + b]. */
static void aux_q4_0(const uint8_t *a, size_t as, int tn, int64_t b0, int kn, int32_t *seed,
                     float *dy) {
    const __m256i ones = _mm256_set1_epi8(1), z = _mm256_setzero_si256();
    for (int t = 0; t < tn; t++) {
        const uint8_t *yr = a + (size_t)t * as + (size_t)b0 * sizeof(hr_block_q8_0);
        for (int b = 0; b < kn; b++) {
            const uint8_t *yb = yr + (size_t)b * sizeof(hr_block_q8_0);
            const __m256i s =
                _mm256_dpbusd_epi32(z, ones, _mm256_loadu_si256((const __m256i *)(yb + 2)));
            _mm256_store_si256((__m256i *)(seed + (size_t)(t * KB_Q4_0 + b) * 8),
                               _mm256_sub_epi32(z, _mm256_slli_epi32(s, 3)));
            uint16_t d;
            memcpy(&d, yb, 2);
            dy[t * KB_Q4_0 + b] = _cvtsh_ss(d);
        }
    }
}

/* T tokens (activation rows a, a + as: the chunk's first block) x the
 * panel over kn blocks; accumulators in st */
HR_PI void micro_q4_0(const int T, const uint8_t *P, int kn, const uint8_t *a, size_t as,
                      const int32_t *seed, const float *dy, __m512 *st, bool first) {
    __m512 L[HR_GEMMP_T][8];
    HR_UNROLL
    for (int t = 0; t < T; t++)
        HR_UNROLL
    for (int k = 0; k < 8; k++)
        L[t][k] = first ? _mm512_setzero_ps() : st[t * HR_GEMMP_NS + k];
    for (int b = 0; b < kn; b++) {
        const uint8_t *W = P + (size_t)b * PB_Q4_0;
        const uint8_t *yb = a + 2 + (size_t)b * sizeof(hr_block_q8_0);
        const __m512 dx = _mm512_load_ps(W + 512);
        __m512 D[HR_GEMMP_T];
        HR_UNROLL
        for (int t = 0; t < T; t++)
            D[t] = _mm512_mul_ps(dx, _mm512_set1_ps(dy[t * KB_Q4_0 + b]));
        HR_UNROLL
        for (int g = 0; g < 8; g++) {
            const __m512i wv = _mm512_load_si512(W + 64 * g);
            HR_UNROLL
            for (int t = 0; t < T; t++) {
                const __m512i s =
                    _mm512_dpbusd_epi32(_mm512_set1_epi32(seed[(t * KB_Q4_0 + b) * 8 + g]), wv,
                                        pbcast(yb + (size_t)t * as + 4 * g));
                L[t][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), D[t], L[t][g]);
            }
        }
    }
    HR_UNROLL
    for (int t = 0; t < T; t++)
        HR_UNROLL
    for (int k = 0; k < 8; k++)
        st[t * HR_GEMMP_NS + k] = L[t][k];
}

void hr_gemmp_q4_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                   float *y, size_t ys) {
    const int64_t nb = n / HR_QK4_0;
    const uint8_t *wb = w, *ab = a;
    _Alignas(64) int32_t seed[HR_GEMMP_TG * KB_Q4_0 * 8];
    _Alignas(64) float dy[HR_GEMMP_TG * KB_Q4_0];
#define Q4_0_MICRO(T)                                                                              \
    micro_q4_0(T, P, kn, at + (size_t)b0 * sizeof(hr_block_q8_0), as,                              \
               seed + (size_t)t0 * KB_Q4_0 * 8, dy + t0 * KB_Q4_0, st, first)
    HR_GEMMP_LOOPS(KB_Q4_0, PB_Q4_0, aux_q4_0(ab + (size_t)tg * as, as, tn, b0, kn, seed, dy),
                   pack_q4_0(wb + (size_t)r0 * ws, ws, pn, b0, kn, P), Q4_0_MICRO, false);
#undef Q4_0_MICRO
}

/* ---- Q4_K ------------------------------------------------------------------ */

/* Panel of rows [0, nr) for super-blocks [s0, s0 + kn): group G = 8j + k
 * (sub-block j, elements 4k..4k+3 of it) at 64 * G, then per row the
 * sub-block scales as (sc, sc) and mins as (mn, mn) int16 pairs, d, dmin. */
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
        /* per row its 8 scales and 8 mins as bytes, then per sub-block
         * the 16 rows' bytes gathered into (x, x) int16 pairs */
        _Alignas(16) uint8_t sm[17][16]; /* a row more: the gathers read 4 bytes */
        for (int r = 0; r < 16; r++)
            _mm_store_si128((__m128i *)sm[r], hr_kq_unpack_scales_sse(rp[r] + bo + 4));
        const __m512i soff = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(16));
        HR_UNROLL
        for (int j = 0; j < 16; j++) /* scales at 4096, mins at 4608 */
            _mm512_store_si512(
                o + 4096 + 64 * j,
                pair16(_mm512_and_si512(gather32(m, soff, &sm[0][j]), _mm512_set1_epi32(0xff))));
        _mm512_store_ps(o + 5120, gather_h(m, off, base));
        _mm512_store_ps(o + 5184, gather_h(m, off, base + 2));
    }
}

HR_PI void micro_q4_k(const int T, const uint8_t *P, int kn, const uint8_t *a, size_t as,
                      __m512 *st, bool first) {
    for (int s = 0; s < kn; s++) {
        const bool fresh = first && s == 0; /* the accumulators start at 0 */
        const uint8_t *W = P + (size_t)s * PB_Q4_K;
        const uint8_t *yb = a + (size_t)s * sizeof(hr_block_q8_k);
        const uint8_t *yq = yb + offsetof(hr_block_q8_k, qs);
        __m512i I[HR_GEMMP_T][8];
        HR_UNROLL
        for (int t = 0; t < T; t++)
            HR_UNROLL
        for (int k = 0; k < 8; k++)
            I[t][k] = _mm512_setzero_si512();
        HR_UNROLL
        for (int j = 0; j < 8; j++) {
            const __m512i sc = _mm512_load_si512(W + 4096 + 64 * j);
            HR_UNROLL
            for (int k = 0; k < 8; k++) {
                const __m512i wv = _mm512_load_si512(W + 64 * (8 * j + k));
                HR_UNROLL
                for (int t = 0; t < T; t++) {
                    const __m512i p =
                        _mm512_maddubs_epi16(wv, pbcast(yq + (size_t)t * as + 32 * j + 4 * k));
                    I[t][k] = _mm512_dpwssd_epi32(I[t][k], p, sc);
                }
            }
        }
        const __m512 d = _mm512_load_ps(W + 5120), dmin = _mm512_load_ps(W + 5184);
        const uint8_t *bs = yb + offsetof(hr_block_q8_k, bsums);
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            __m512 *L = st + t * HR_GEMMP_NS;
            const __m512 dy = _mm512_set1_ps(pbcastf(yb + (size_t)t * as));
            const __m512 D = _mm512_mul_ps(d, dy), ND = negv(_mm512_mul_ps(dmin, dy));
            HR_UNROLL
            for (int k = 0; k < 8; k++)
                L[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[t][k]), D,
                                       fresh ? _mm512_setzero_ps() : L[k]);
            HR_UNROLL
            for (int i = 0; i < 4; i++) {
                const uint8_t *bt = bs + (size_t)t * as;
                __m512i mi = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                                 _mm512_load_si512(W + 4608 + 64 * (2 * i)),
                                                 pbcast(bt + 4 * (2 * i)));
                mi = _mm512_dpwssd_epi32(mi, _mm512_load_si512(W + 4608 + 64 * (2 * i + 1)),
                                         pbcast(bt + 4 * (2 * i + 1)));
                L[8 + i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mi), ND,
                                           fresh ? _mm512_setzero_ps() : L[8 + i]);
            }
        }
    }
}

void hr_gemmp_q4_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                   float *y, size_t ys) {
    const int64_t nb = n / HR_QK_K;
    const uint8_t *wb = w, *ab = a;
#define Q4_K_MICRO(T) micro_q4_k(T, P, kn, at + (size_t)b0 * sizeof(hr_block_q8_k), as, st, first)
    HR_GEMMP_LOOPS_P(KB_K, PB_Q4_K, pack_q4_k(wb + (size_t)r0 * ws, ws, pn, b0, kn, P), Q4_K_MICRO,
                     true);
#undef Q4_K_MICRO
}

/* ---- Q6_K ------------------------------------------------------------------ */

/* Panel of rows [0, nr) for super-blocks [s0, s0 + kn): group G (elements
 * 4G..4G+3) as q - 32 (s8) at 64 * G, the 16 scales as (sc, sc) int16
 * pairs per row at 4096, the 8 lanes' seeds at 5120 (lane k: -128 * sum
 * over its groups of sc * sum(q - 32), int32 per row), d at 5632. */
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
        HR_UNROLL
        for (int g = 0; g < 16; g++) {
            /* each row's int8 scale g as the top byte of a dword (read
             * from 3 bytes before it: no read past the block), sign-extended,
             * as an (sc, sc) pair */
            const __m512i v = gather32(m, off, base + offsetof(hr_block_q6_k, scales) + g - 3);
            _mm512_store_si512(o + 4096 + 64 * g, pair16(_mm512_srai_epi32(v, 24)));
        }
        /* q - 32 in place, and the seeds */
        const __m512i c32 = _mm512_set1_epi8(32), ones = _mm512_set1_epi8(1);
        const __m512i lo16 = _mm512_set1_epi32(0xffff), z = _mm512_setzero_si512();
        __m512i acc[8];
        HR_UNROLL
        for (int k = 0; k < 8; k++)
            acc[k] = z;
        for (int v = 0; v < 8; v++)
            HR_UNROLL
        for (int k = 0; k < 8; k++) {
            const int G = 8 * v + k;
            const __m512i q = _mm512_sub_epi8(_mm512_load_si512(o + 64 * G), c32);
            _mm512_store_si512(o + 64 * G, q);
            /* sum(q - 32) of the group (|.| <= 128) in the low word, 0 above */
            const __m512i t = _mm512_and_si512(_mm512_dpbusd_epi32(z, ones, q), lo16);
            acc[k] = _mm512_dpwssd_epi32(acc[k], t, _mm512_load_si512(o + 4096 + 64 * (G / 4)));
        }
        HR_UNROLL
        for (int k = 0; k < 8; k++)
            _mm512_store_si512(o + 5120 + 64 * k,
                               _mm512_sub_epi32(z, _mm512_slli_epi32(acc[k], 7)));
        _mm512_store_ps(o + 5632, gather_h_end(m, off, base + offsetof(hr_block_q6_k, d)));
    }
}

/* T tokens x the panel over kn super-blocks; accumulators in st. The
 * activations go in as y + 128 (u8) against q - 32 (s8): the lane's sum of
 * sc * (y + 128)(q - 32) plus the panel's seed is its exact sum of
 * sc * y (q - 32). */
HR_PI void micro_q6_k(const int T, const uint8_t *P, int kn, const uint8_t *a, size_t as,
                      __m512 *st, bool first) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int s = 0; s < kn; s++) {
        const bool fresh = first && s == 0; /* the accumulators start at 0 */
        const uint8_t *W = P + (size_t)s * PB_Q6_K;
        const uint8_t *yb = a + (size_t)s * sizeof(hr_block_q8_k);
        const uint8_t *yq = yb + offsetof(hr_block_q8_k, qs);
        __m512i I[HR_GEMMP_T][8];
        HR_UNROLL
        for (int t = 0; t < T; t++)
            HR_UNROLL
        for (int k = 0; k < 8; k++)
            I[t][k] = _mm512_load_si512(W + 5120 + 64 * k);
        HR_UNROLL
        for (int v = 0; v < 8; v++) {
            const __m512i sc0 = _mm512_load_si512(W + 4096 + 64 * (2 * v));
            const __m512i sc1 = _mm512_load_si512(W + 4096 + 64 * (2 * v + 1));
            HR_UNROLL
            for (int k = 0; k < 8; k++) {
                const int G = 8 * v + k;
                const __m512i wv = _mm512_load_si512(W + 64 * G);
                HR_UNROLL
                for (int t = 0; t < T; t++) {
                    const __m512i yv = _mm512_xor_si512(pbcast(yq + (size_t)t * as + 4 * G), flip);
                    I[t][k] = _mm512_dpwssd_epi32(I[t][k], _mm512_maddubs_epi16(yv, wv),
                                                  k < 4 ? sc0 : sc1);
                }
            }
        }
        const __m512 d = _mm512_load_ps(W + 5632);
        HR_UNROLL
        for (int t = 0; t < T; t++) {
            __m512 *L = st + t * HR_GEMMP_NS;
            const __m512 D = _mm512_mul_ps(d, _mm512_set1_ps(pbcastf(yb + (size_t)t * as)));
            HR_UNROLL
            for (int k = 0; k < 8; k++)
                L[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[t][k]), D,
                                       fresh ? _mm512_setzero_ps() : L[k]);
        }
    }
}

void hr_gemmp_q6_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                   float *y, size_t ys) {
    const int64_t nb = n / HR_QK_K;
    const uint8_t *wb = w, *ab = a;
#define Q6_K_MICRO(T) micro_q6_k(T, P, kn, at + (size_t)b0 * sizeof(hr_block_q8_k), as, st, first)
    HR_GEMMP_LOOPS_P(KB_K, PB_Q6_K, pack_q6_k(wb + (size_t)r0 * ws, ws, pn, b0, kn, P), Q6_K_MICRO,
                     false);
#undef Q6_K_MICRO
}
