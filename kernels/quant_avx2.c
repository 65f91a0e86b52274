/* quant_avx2.c - AVX2/FMA/F16C row kernels: dot products for every supported
 * weight type, dequantizers for the common ones and the activation
 * quantizers (Q8_0, Q8_1, Q8_K, F16). Built with -mavx2 -mfma -mf16c -mbmi2;
 * only reached through the table quant.c fills after cpuid says so.
 *
 * Dot kernels keep per-block integer sums (maddubs: u8 x s8 -> s16 pairs,
 * madd -> s32: s32 lane k holds elements 4k..4k+3 of a 32-element chunk),
 * scale them once per block with one explicit FMA into one 8-lane float
 * accumulator, in block order, and reduce it as ggml's hsum_float_8: the
 * canonical order of kernels/canon-impl.h, so every result equals the scalar
 * reference bit for bit (built with -ffp-contract=off); dequant and quant are
 * bit-exact too. */
#include "kernels/canon-impl.h"
#include "kernels/quant-impl.h"

#include <immintrin.h>

/* ---- helpers ------------------------------------------------------------- */

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hsum_ps128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

static inline __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline __m128i loadu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

/* 16 bytes of packed nibbles -> 32 bytes 0..15: low nibbles then high ones */
static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i t = loadu128(qs);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* byte j = 0x10 where bit j of the 32-bit little-endian qh is set, else 0 */
static inline __m256i qh_bits32(const uint8_t qh[4]) {
    uint32_t v;
    memcpy(&v, qh, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                          2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit),
                            _mm256_set1_epi8(0x10));
}

/* s32x8 partial sums of u[j]*s[j], u unsigned 0..63 */
static inline __m256i dot_u8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* s32x8 partial sums of (u[j] - off)*s[j], u 0..31, off 8 or 16 */
static inline __m256i dot_u8_off(__m256i u, __m256i s, __m256i off) {
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, s), _mm256_maddubs_epi16(off, s));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* s32x8 partial sums of x[j]*y[j], both signed (x != -128) */
static inline __m256i dot_s8(__m256i x, __m256i y) {
    return dot_u8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* ---- dot products: 32-element blocks ------------------------------------ */

/* Products a[k]*b[k] of the fp16 values at pa + k*sa and pb + k*sb, k < 4,
 * in both 128-bit halves. */
static inline __m256 scales4(const void *pa, size_t sa, const void *pb, size_t sb) {
    const __m128 d = _mm_mul_ps(hr_halves4(pa, sa), hr_halves4(pb, sb));
    return _mm256_set_m128(d, d);
}

/* lane k of scales4() in all 8 lanes */
#define SCALE_K(d4, k) _mm256_shuffle_ps((d4), (d4), (k)*0x55)

/* s32x8 partial sums of block i of each type against its activation block */
static inline __m256i sum_q4_0(const hr_block_q4_0 *x, const hr_block_q8_0 *y) {
    return dot_u8_off(nibbles32(x->qs), loadu256(y->qs), _mm256_set1_epi8(8));
}

static inline __m256i sum_q5_0(const hr_block_q5_0 *x, const hr_block_q8_0 *y) {
    const __m256i u = _mm256_or_si256(nibbles32(x->qs), qh_bits32(x->qh));
    return dot_u8_off(u, loadu256(y->qs), _mm256_set1_epi8(16));
}

static inline __m256i sum_q8_0(const hr_block_q8_0 *x, const hr_block_q8_0 *y) {
    return dot_s8(loadu256(x->qs), loadu256(y->qs));
}

static inline __m256i sum_q4_1(const hr_block_q4_1 *x, const hr_block_q8_1 *y) {
    return dot_u8(nibbles32(x->qs), loadu256(y->qs));
}

static inline __m256i sum_q5_1(const hr_block_q5_1 *x, const hr_block_q8_1 *y) {
    return dot_u8(_mm256_or_si256(nibbles32(x->qs), qh_bits32(x->qh)), loadu256(y->qs));
}

/* sum_b dx_b*dy_b * sum_b in one accumulator, in block order (canonical
 * step 2); the four scales of a step converted together. */
#define DOT_BLOCKS32(NAME, XT, YT, SUM)                                                            \
    static float NAME(int64_t n, const void *w, const void *a) {                                   \
        const XT *x = w;                                                                           \
        const YT *y = a;                                                                           \
        const int64_t nb = n / 32;                                                                 \
        __m256 acc = _mm256_setzero_ps();                                                          \
        float summs = 0.0f;                                                                        \
        int64_t i = 0;                                                                             \
        for (; i + 3 < nb; i += 4) {                                                               \
            const __m256 d = scales4(&x[i].d, sizeof(XT), &y[i].d, sizeof(YT));                    \
            const __m256 s0 = _mm256_cvtepi32_ps(SUM(x + i, y + i));                               \
            const __m256 s1 = _mm256_cvtepi32_ps(SUM(x + i + 1, y + i + 1));                       \
            const __m256 s2 = _mm256_cvtepi32_ps(SUM(x + i + 2, y + i + 2));                       \
            const __m256 s3 = _mm256_cvtepi32_ps(SUM(x + i + 3, y + i + 3));                       \
            acc = _mm256_fmadd_ps(SCALE_K(d, 0), s0, acc);                                         \
            acc = _mm256_fmadd_ps(SCALE_K(d, 1), s1, acc);                                         \
            acc = _mm256_fmadd_ps(SCALE_K(d, 2), s2, acc);                                         \
            acc = _mm256_fmadd_ps(SCALE_K(d, 3), s3, acc);                                         \
            MIN_TERM(summs, x + i, y + i, 4);                                                      \
        }                                                                                          \
        for (; i < nb; i++) {                                                                      \
            const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));                            \
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(SUM(x + i, y + i)), acc);                  \
            MIN_TERM(summs, x + i, y + i, 1);                                                      \
        }                                                                                          \
        return hsum_ps(acc) + summs;                                                               \
    }

/* Q4_1 / Q5_1: summs = fmaf(m_b, s_b, summs) per block, in block order
 * (s = dy * sum of the activation block), added after the lane sum */
#define MIN_TERM_NONE(summs, x, y, cnt) (void)(summs)

static inline float min_term_m(float summs, const void *pm, size_t sm, const void *ps, size_t ss,
                               int cnt) {
    __m128 acc = _mm_set_ss(summs);
    if (cnt == 4) { /* the four blocks' m and s converted together */
        __m128 m = hr_halves4(pm, sm), v = hr_halves4(ps, ss);
        acc = _mm_fmadd_ss(m, v, acc);
        acc = _mm_fmadd_ss(_mm_movehdup_ps(m), _mm_movehdup_ps(v), acc);
        m = _mm_movehl_ps(m, m);
        v = _mm_movehl_ps(v, v);
        acc = _mm_fmadd_ss(m, v, acc);
        acc = _mm_fmadd_ss(_mm_movehdup_ps(m), _mm_movehdup_ps(v), acc);
    } else {
        uint16_t hm, hs;
        memcpy(&hm, pm, 2);
        memcpy(&hs, ps, 2);
        acc = _mm_fmadd_ss(_mm_set_ss(h2f(hm)), _mm_set_ss(h2f(hs)), acc);
    }
    return _mm_cvtss_f32(acc);
}

#define MIN_TERM_M(summs, x, y, cnt)                                                               \
    (summs) = min_term_m(summs, &(x)->m, sizeof(*(x)), &(y)->s, sizeof(*(y)), cnt)

#define MIN_TERM MIN_TERM_NONE
DOT_BLOCKS32(dot_q4_0, hr_block_q4_0, hr_block_q8_0, sum_q4_0)
DOT_BLOCKS32(dot_q5_0, hr_block_q5_0, hr_block_q8_0, sum_q5_0)
DOT_BLOCKS32(dot_q8_0, hr_block_q8_0, hr_block_q8_0, sum_q8_0)
#undef MIN_TERM
/* MXFP4: the codes looked up as signed bytes (their doubled E2M1 values,
 * |v| <= 12), low nibbles then high ones as q4_0's lanes; scale 2^(e-128)
 * times dy, one block at a time in block order */
static inline __m256i sum_mxfp4(const hr_block_mxfp4 *x, const hr_block_q8_0 *y) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)hr_mxfp4_values);
    const __m128i q = _mm_loadu_si128((const __m128i *)x->qs), m4 = _mm_set1_epi8(15);
    const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(q, m4));
    const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    return dot_s8(_mm256_set_m128i(hi, lo), loadu256(y->qs));
}

static float dot_mxfp4(int64_t n, const void *w, const void *a) {
    const hr_block_mxfp4 *x = w;
    const hr_block_q8_0 *y = a;
    const int64_t nb = n / HR_QK_MXFP4;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) { /* the four blocks' scales made together */
        const __m128 d4 = _mm_mul_ps(hr_e8m0_half4(&x[i].e, sizeof(hr_block_mxfp4)),
                                     hr_halves4(&y[i].d, sizeof(hr_block_q8_0)));
        const __m256 d = _mm256_set_m128(d4, d4);
        acc = _mm256_fmadd_ps(SCALE_K(d, 0), _mm256_cvtepi32_ps(sum_mxfp4(x + i, y + i)), acc);
        acc = _mm256_fmadd_ps(SCALE_K(d, 1), _mm256_cvtepi32_ps(sum_mxfp4(x + i + 1, y + i + 1)),
                              acc);
        acc = _mm256_fmadd_ps(SCALE_K(d, 2), _mm256_cvtepi32_ps(sum_mxfp4(x + i + 2, y + i + 2)),
                              acc);
        acc = _mm256_fmadd_ps(SCALE_K(d, 3), _mm256_cvtepi32_ps(sum_mxfp4(x + i + 3, y + i + 3)),
                              acc);
    }
    for (; i < nb; i++) {
        const __m256 d = _mm256_set1_ps(hr_e8m0_half(x[i].e) * h2f(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum_mxfp4(x + i, y + i)), acc);
    }
    return hsum_ps(acc);
}

#define MIN_TERM MIN_TERM_M
DOT_BLOCKS32(dot_q4_1, hr_block_q4_1, hr_block_q8_1, sum_q4_1)
DOT_BLOCKS32(dot_q5_1, hr_block_q5_1, hr_block_q8_1, sum_q5_1)
#undef MIN_TERM

/* ---- dot products: K-quants x Q8_K --------------------------------------- */

/* int16 scales (lanes 0-7) and mins (lanes 8-15) of a q4_K/q5_K block */
static inline __m256i kq_scales_mins(const uint8_t s[12]) {
    return _mm256_cvtepu8_epi16(hr_kq_unpack_scales_sse(s));
}

/* sum_j mn[j] * (q8 sum of sub-block j) as s32x4 partial sums */
static inline __m128i kq_mins_dot(__m256i scmn16, const int16_t bsums[16]) {
    const __m256i bs = loadu256(bsums);
    const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return _mm_madd_epi16(_mm256_extracti128_si256(scmn16, 1), q8s);
}

/* int16 lane k broadcast: shuffle mask selecting word k of each 128-bit lane */
#define WORD_SEL(k) _mm256_set1_epi16((short)(((2 * (k) + 1) << 8) | (2 * (k))))

static inline __attribute__((always_inline)) float dot_q4_k_body(int64_t n, const void *w,
                                                                 const void *a, size_t pfd) {
    const hr_block_q4_k *x = w;
    const hr_block_q8_k *y = a;
    const int64_t nb = n / HR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps(); /* lane j: sub-blocks 2j and 2j + 1 */
    for (int64_t i = 0; i < nb; i++) {
        if (pfd)
            for (size_t l = 0; l < sizeof(hr_block_q4_k); l += 64)
                _mm_prefetch((const char *)&x[i] + pfd + l, _MM_HINT_T0);
        const float d = y[i].d * h2f(x[i].d), dmin = -y[i].d * h2f(x[i].dmin);
        const __m256i scmn = kq_scales_mins(x[i].scales);
        accm =
            _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(kq_mins_dot(scmn, y[i].bsums)), accm);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(scmn));
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++, q4 += 32, q8 += 64) {
            const __m256i q = loadu256(q4);
            const __m256i lo = _mm256_and_si256(q, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(q8)),
                                                 _mm256_shuffle_epi8(sc, WORD_SEL(2 * c)));
            const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(q8 + 32)),
                                                 _mm256_shuffle_epi8(sc, WORD_SEL(2 * c + 1)));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc) + hsum_ps128(accm); /* (m0 + m2) + (m1 + m3) */
}

/* q5_K: the min term in one scalar, summs = fmaf(-dy * dmin, msum, summs) */
static inline __attribute__((always_inline)) float dot_q5_k_body(int64_t n, const void *w,
                                                                 const void *a, size_t pfd) {
    const hr_block_q5_k *x = w;
    const hr_block_q8_k *y = a;
    const int64_t nb = n / HR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    __m128 summs = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        if (pfd)
            for (size_t l = 0; l < sizeof(hr_block_q5_k); l += 64)
                _mm_prefetch((const char *)&x[i] + pfd + l, _MM_HINT_T0);
        const float d = y[i].d * h2f(x[i].d), dmin = -y[i].d * h2f(x[i].dmin);
        const __m256i scmn = kq_scales_mins(x[i].scales);
        const __m128i m4s = kq_mins_dot(scmn, y[i].bsums);
        __m128i ms = _mm_add_epi32(m4s, _mm_unpackhi_epi64(m4s, m4s));
        ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, 1));
        summs = _mm_fmadd_ss(_mm_set_ss(dmin), _mm_cvtepi32_ps(ms), summs);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(scmn));
        const uint8_t *q5 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i qh = loadu256(x[i].qh); /* bits 0 and 1 of each byte: chunk c */
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++, q5 += 32, q8 += 64) {
            const __m256i q = loadu256(q5);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4),
                                               _mm256_and_si256(_mm256_slli_epi16(qh, 4), b4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                               _mm256_and_si256(_mm256_slli_epi16(qh, 3), b4));
            qh = _mm256_srli_epi16(qh, 2);
            const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(q8)),
                                                 _mm256_shuffle_epi8(sc, WORD_SEL(2 * c)));
            const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(q8 + 32)),
                                                 _mm256_shuffle_epi8(sc, WORD_SEL(2 * c + 1)));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc) + _mm_cvtss_f32(summs);
}

/* int16 pair sums of (u - 32) * s */
static inline __m256i maddubs_off32(__m256i u, __m256i s) {
    return _mm256_sub_epi16(_mm256_maddubs_epi16(u, s),
                            _mm256_maddubs_epi16(_mm256_set1_epi8(32), s));
}

/* q6_K: sum_g sc[g] * sum (q - 32) * q8 with the -32 per element pair (as
 * ggml: maddubs(q, q8) - maddubs(32, q8) in int16), so s32 lane k holds
 * elements 4k..4k+3 of each chunk; q is 0..63 so maddubs takes it unsigned. */
static inline __attribute__((always_inline)) float dot_q6_k_body(int64_t n, const void *w,
                                                                 const void *a, size_t pfd) {
    const hr_block_q6_k *x = w;
    const hr_block_q8_k *y = a;
    const int64_t nb = n / HR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    const __m256i m2_2 = _mm256_set1_epi8(0x0c), m2_4 = _mm256_set1_epi8(0x30);
    /* low 128-bit lane picks word 2m, high lane word 2m+1 */
    const __m256i sel[4] = {
        _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2,
                         3, 2, 3, 2, 3, 2, 3),
        _mm256_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6,
                         7, 6, 7, 6, 7, 6, 7),
        _mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10,
                         11, 10, 11, 10, 11, 10, 11, 10, 11),
        _mm256_setr_epi8(12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14,
                         15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15),
    };
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        if (pfd)
            for (size_t l = 0; l < sizeof(hr_block_q6_k); l += 64)
                _mm_prefetch((const char *)&x[i] + pfd + l, _MM_HINT_T0);
        const float d = y[i].d * h2f(x[i].d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(x[i].scales));
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qhp = x[i].qh + 32 * h;
            const int8_t *q8 = y[i].qs + 128 * h;
            const __m256i scl = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                       : _mm256_permute2x128_si256(sc16, sc16, 0x11);
            const __m256i l0 = loadu256(ql), l1 = loadu256(ql + 32), qh = loadu256(qhp);
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(qh, m2_2), 2));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                               _mm256_and_si256(qh, m2_4));
            const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2_4));
            const __m256i p1 = _mm256_madd_epi16(maddubs_off32(q1, loadu256(q8)),
                                                 _mm256_shuffle_epi8(scl, sel[0]));
            const __m256i p2 = _mm256_madd_epi16(maddubs_off32(q2, loadu256(q8 + 32)),
                                                 _mm256_shuffle_epi8(scl, sel[1]));
            const __m256i p3 = _mm256_madd_epi16(maddubs_off32(q3, loadu256(q8 + 64)),
                                                 _mm256_shuffle_epi8(scl, sel[2]));
            const __m256i p4 = _mm256_madd_epi16(maddubs_off32(q4, loadu256(q8 + 96)),
                                                 _mm256_shuffle_epi8(scl, sel[3]));
            sumi = _mm256_add_epi32(
                sumi, _mm256_add_epi32(_mm256_add_epi32(p1, p2), _mm256_add_epi32(p3, p4)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* K-quant vec_dot and vec_dot_n: one row at a time (the integer work keeps a
 * core busy with one), each row prefetching the same blocks of the next
 * (the hardware prefetchers alone left the loads waiting: Q4_K decode from
 * DRAM, 2 threads on a Xeon, 13.2 -> 17 GB/s), the other columns against
 * the row while it is in L1. Bit-identical to vec_dot: the same body. */
#define DOT_K(NAME)                                                                                \
    static float dot_##NAME(int64_t n, const void *w, const void *a) {                             \
        return dot_##NAME##_body(n, w, a, 0);                                                      \
    }                                                                                              \
    static void dotn_##NAME(int64_t n, int nr, const void *w, size_t ws, const void *const *a,     \
                            int nt, float *y, size_t ys) {                                         \
        for (int r = 0; r < nr; r++) {                                                             \
            const uint8_t *x = (const uint8_t *)w + (size_t)r * ws;                                \
            y[r] = dot_##NAME##_body(n, x, a[0], ws);                                              \
            for (int t = 1; t < nt; t++)                                                           \
                y[(size_t)t * ys + (size_t)r] = dot_##NAME##_body(n, x, a[t], 0);                  \
        }                                                                                          \
    }
DOT_K(q4_k)
DOT_K(q5_k)
DOT_K(q6_k)

/* ---- dot products: F32 / F16 / BF16 x F32 -------------------------------- */

static inline __m256 load_bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16));
}

/* f16 / bf16: element i into lane i % 8 by fma, one accumulator, hsum8 (the
 * canonical order; a tail shorter than 8 goes to its lanes by fmaf) */
#define DOT_F8_BODY(LOAD8, SCALAR)                                                                 \
    __m256 acc = _mm256_setzero_ps();                                                              \
    int64_t i = 0;                                                                                 \
    for (; i + 8 <= n; i += 8)                                                                     \
        acc = _mm256_fmadd_ps(LOAD8(x + i), _mm256_loadu_ps(y + i), acc);                          \
    if (i < n) {                                                                                   \
        float l[8];                                                                                \
        _mm256_storeu_ps(l, acc);                                                                  \
        for (int j = 0; i + j < n; j++)                                                            \
            l[j] = fmaf(SCALAR(x[i + j]), y[i + j], l[j]);                                         \
        acc = _mm256_loadu_ps(l);                                                                  \
    }                                                                                              \
    return hsum_ps(acc);

#define LOAD_F16(p) _mm256_cvtph_ps(loadu128(p))

/* f32: 16 lanes, lane i % 16 += x[i] * y[i] (separate multiply and add),
 * reduced by the tree l += l + 8, + 4, + 2, + 1 (hsum_ps of the two halves'
 * sum is that tree) */
static float dot_f32(int64_t n, const void *w, const void *a) {
    const float *x = w, *y = a;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_add_ps(s0, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        s1 = _mm256_add_ps(s1,
                           _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
    }
    if (i < n) {
        float l[HR_CANON_LANES];
        _mm256_storeu_ps(l, s0);
        _mm256_storeu_ps(l + 8, s1);
        for (int j = 0; i + j < n; j++)
            l[j] += x[i + j] * y[i + j];
        s0 = _mm256_loadu_ps(l);
        s1 = _mm256_loadu_ps(l + 8);
    }
    return hsum_ps(_mm256_add_ps(s0, s1));
}

static float dot_f16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    DOT_F8_BODY(LOAD_F16, h2f)
}

static float dot_bf16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    DOT_F8_BODY(load_bf16x8, hr_bf16_to_fp32)
}

/* ---- several rows at once: F32 / F16 / BF16 (hr_vec_dot_n_fn) ------------ */

/* A single-row dot above is one dependent chain of fma (add) per lane, so it
 * runs at the fma latency, not the load bandwidth. These take DN_ROWS rows
 * at a time, each with its own accumulator(s) in vec_dot's order, so the
 * chains of the rows overlap; each (row, column) value is vec_dot's bit for
 * bit (same operations per element, same tail, same reduction). Columns are
 * looped with the rows' weights still in L1/L2. Fewer than DN_ROWS rows left
 * go to vec_dot itself. */
#define DN_ROWS 4

#define DOTN_F8(NAME, ONE, LOAD8, SCALAR)                                                          \
    static void NAME(int64_t n, int nr, const void *w, size_t w_stride, const void *const *a,      \
                     int nt, float *out, size_t y_stride) {                                        \
        const char *wb = w;                                                                        \
        int r = 0;                                                                                 \
        for (; r + DN_ROWS <= nr; r += DN_ROWS) {                                                  \
            const uint16_t *x0 = (const uint16_t *)(wb + (size_t)r * w_stride);                    \
            const uint16_t *x1 = (const uint16_t *)(wb + (size_t)(r + 1) * w_stride);              \
            const uint16_t *x2 = (const uint16_t *)(wb + (size_t)(r + 2) * w_stride);              \
            const uint16_t *x3 = (const uint16_t *)(wb + (size_t)(r + 3) * w_stride);              \
            for (int t = 0; t < nt; t++) {                                                         \
                const float *y = a[t];                                                             \
                __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();                         \
                __m256 c2 = _mm256_setzero_ps(), c3 = _mm256_setzero_ps();                         \
                int64_t i = 0;                                                                     \
                for (; i + 8 <= n; i += 8) {                                                       \
                    const __m256 yv = _mm256_loadu_ps(y + i);                                      \
                    c0 = _mm256_fmadd_ps(LOAD8(x0 + i), yv, c0);                                   \
                    c1 = _mm256_fmadd_ps(LOAD8(x1 + i), yv, c1);                                   \
                    c2 = _mm256_fmadd_ps(LOAD8(x2 + i), yv, c2);                                   \
                    c3 = _mm256_fmadd_ps(LOAD8(x3 + i), yv, c3);                                   \
                }                                                                                  \
                if (i < n) {                                                                       \
                    float l[DN_ROWS][8];                                                           \
                    _mm256_storeu_ps(l[0], c0);                                                    \
                    _mm256_storeu_ps(l[1], c1);                                                    \
                    _mm256_storeu_ps(l[2], c2);                                                    \
                    _mm256_storeu_ps(l[3], c3);                                                    \
                    for (int j = 0; i + j < n; j++) {                                              \
                        l[0][j] = fmaf(SCALAR(x0[i + j]), y[i + j], l[0][j]);                      \
                        l[1][j] = fmaf(SCALAR(x1[i + j]), y[i + j], l[1][j]);                      \
                        l[2][j] = fmaf(SCALAR(x2[i + j]), y[i + j], l[2][j]);                      \
                        l[3][j] = fmaf(SCALAR(x3[i + j]), y[i + j], l[3][j]);                      \
                    }                                                                              \
                    c0 = _mm256_loadu_ps(l[0]);                                                    \
                    c1 = _mm256_loadu_ps(l[1]);                                                    \
                    c2 = _mm256_loadu_ps(l[2]);                                                    \
                    c3 = _mm256_loadu_ps(l[3]);                                                    \
                }                                                                                  \
                float *o = out + (size_t)t * y_stride + r;                                         \
                o[0] = hsum_ps(c0);                                                                \
                o[1] = hsum_ps(c1);                                                                \
                o[2] = hsum_ps(c2);                                                                \
                o[3] = hsum_ps(c3);                                                                \
            }                                                                                      \
        }                                                                                          \
        for (; r < nr; r++)                                                                        \
            for (int t = 0; t < nt; t++)                                                           \
                out[(size_t)t * y_stride + r] = ONE(n, wb + (size_t)r * w_stride, a[t]);           \
    }

DOTN_F8(dotn_bf16, dot_bf16, load_bf16x8, hr_bf16_to_fp32)

/* hsum_float_8 (hsum_ps) of four rows' lanes c[0..3] at once: the same
 * pairs added in the same tree (lanes i and i + 4, then the sums 0 + 2 and
 * 1 + 3, then those two; a + b and b + a round alike), so every value is
 * hsum_ps's bit for bit. Row k is lane k of the result. */
static inline __m128 hsum_ps_x4(const __m256 c[4]) {
    const __m256 a = _mm256_add_ps(_mm256_permute2f128_ps(c[0], c[1], 0x20),
                                   _mm256_permute2f128_ps(c[0], c[1], 0x31));
    const __m256 b = _mm256_add_ps(_mm256_permute2f128_ps(c[2], c[3], 0x20),
                                   _mm256_permute2f128_ps(c[2], c[3], 0x31));
    const __m256 f = _mm256_add_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 g = _mm256_add_ps(f, _mm256_movehdup_ps(f));
    /* element 0 of each 128-bit half: rows 0 and 1; element 2: rows 2 and 3 */
    return _mm256_castps256_ps128(
        _mm256_permutevar8x32_ps(g, _mm256_setr_epi32(0, 4, 2, 6, 0, 0, 0, 0)));
}

/* four rows against nc (<= 2) columns: each (row, column) is dot_f16's own
 * 8-lane chain, the rows converted once for both columns. The n % 8 tail
 * runs as one more step over copies padded with zeros whose results are
 * kept in the tail's lanes only: fmaf(x, y, l) per lane, as dot_f16.
 * Rows at or after nr repeat row 0 and are not stored. */
static inline __attribute__((always_inline)) void f16_rows4(int64_t n, const uint16_t *const x[4],
                                                            int nr, const float *const *y, int nc,
                                                            float *out, size_t ys) {
    __m256 c[2][4];
    for (int t = 0; t < 2; t++)
        for (int q = 0; q < 4; q++)
            c[t][q] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[4];
        for (int q = 0; q < 4; q++)
            wv[q] = LOAD_F16(x[q] + i);
        for (int t = 0; t < nc; t++) {
            const __m256 yv = _mm256_loadu_ps(y[t] + i);
            for (int q = 0; q < 4; q++)
                c[t][q] = _mm256_fmadd_ps(wv[q], yv, c[t][q]);
        }
    }
    if (i < n) {
        const int rem = (int)(n - i);
        uint16_t xt[4][8] = {{0}};
        float yt[2][8] = {{0}};
        for (int q = 0; q < 4; q++)
            memcpy(xt[q], x[q] + i, (size_t)rem * sizeof(uint16_t));
        for (int t = 0; t < nc; t++)
            memcpy(yt[t], y[t] + i, (size_t)rem * sizeof(float));
        __m256 wv[4];
        for (int q = 0; q < 4; q++)
            wv[q] = LOAD_F16(xt[q]);
        const __m256 tail = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
        for (int t = 0; t < nc; t++) {
            const __m256 yv = _mm256_loadu_ps(yt[t]);
            for (int q = 0; q < 4; q++)
                c[t][q] = _mm256_blendv_ps(c[t][q], _mm256_fmadd_ps(wv[q], yv, c[t][q]), tail);
        }
    }
    for (int t = 0; t < nc; t++) {
        const __m128 r = hsum_ps_x4(c[t]);
        if (nr >= 4) {
            _mm_storeu_ps(out + (size_t)t * ys, r);
        } else {
            float o4[4];
            _mm_storeu_ps(o4, r);
            memcpy(out + (size_t)t * ys, o4, (size_t)nr * sizeof(float));
        }
    }
}

/* F16 rows in groups of four (the last one padded), columns in pairs
 * (eight accumulators): attention's scores (keys against the query heads
 * that share them) and weighted values run through this. */
static void dotn_f16(int64_t n, int nr, const void *w, size_t w_stride, const void *const *a,
                     int nt, float *out, size_t y_stride) {
    const char *wb = w;
    for (int r = 0; r < nr; r += 4) {
        const int rn = nr - r < 4 ? nr - r : 4;
        const uint16_t *x[4];
        for (int q = 0; q < 4; q++)
            x[q] = (const uint16_t *)(wb + (size_t)(r + (q < rn ? q : 0)) * w_stride);
        for (int t = 0; t < nt; t += 2) {
            const float *const *y = (const float *const *)a + t;
            float *o = out + (size_t)t * y_stride + r;
            if (nt - t >= 2)
                f16_rows4(n, x, rn, y, 2, o, y_stride);
            else
                f16_rows4(n, x, rn, y, 1, o, y_stride);
        }
    }
}

/* f32: per row vec_dot's two 8-lane halves (lanes 0-7 and 8-15 of the 16),
 * separate multiply and add, the same tail and tree */
static void dotn_f32(int64_t n, int nr, const void *w, size_t w_stride, const void *const *a,
                     int nt, float *out, size_t y_stride) {
    const char *wb = w;
    int r = 0;
    for (; r + DN_ROWS <= nr; r += DN_ROWS) {
        const float *x[DN_ROWS];
        for (int k = 0; k < DN_ROWS; k++)
            x[k] = (const float *)(wb + (size_t)(r + k) * w_stride);
        for (int t = 0; t < nt; t++) {
            const float *y = a[t];
            __m256 s0[DN_ROWS], s1[DN_ROWS];
            for (int k = 0; k < DN_ROWS; k++)
                s0[k] = s1[k] = _mm256_setzero_ps();
            int64_t i = 0;
            for (; i + 16 <= n; i += 16) {
                const __m256 y0 = _mm256_loadu_ps(y + i), y1 = _mm256_loadu_ps(y + i + 8);
                for (int k = 0; k < DN_ROWS; k++) {
                    s0[k] = _mm256_add_ps(s0[k], _mm256_mul_ps(_mm256_loadu_ps(x[k] + i), y0));
                    s1[k] = _mm256_add_ps(s1[k], _mm256_mul_ps(_mm256_loadu_ps(x[k] + i + 8), y1));
                }
            }
            float *o = out + (size_t)t * y_stride + r;
            for (int k = 0; k < DN_ROWS; k++) {
                if (i < n) {
                    float l[HR_CANON_LANES];
                    _mm256_storeu_ps(l, s0[k]);
                    _mm256_storeu_ps(l + 8, s1[k]);
                    for (int j = 0; i + j < n; j++)
                        l[j] += x[k][i + j] * y[i + j];
                    s0[k] = _mm256_loadu_ps(l);
                    s1[k] = _mm256_loadu_ps(l + 8);
                }
                o[k] = hsum_ps(_mm256_add_ps(s0[k], s1[k]));
            }
        }
    }
    for (; r < nr; r++)
        for (int t = 0; t < nt; t++)
            out[(size_t)t * y_stride + r] = dot_f32(n, wb + (size_t)r * w_stride, a[t]);
}

/* ---- dequantizers (bit-exact with the scalar ones) ----------------------- */

/* dst[0..31] = (float)q[j] * d for 32 signed bytes q */
static inline void store_s8x32_scaled(float *dst, __m256i q, __m256 d) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)};
    for (int k = 0; k < 4; k++)
        _mm256_storeu_ps(dst + 8 * k,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])), d));
}

static void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const hr_block_q4_0 *x = src;
    for (int64_t i = 0; i < n / HR_QK4_0; i++, dst += HR_QK4_0) {
        const __m256i q = _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8));
        store_s8x32_scaled(dst, q, _mm256_set1_ps(h2f(x[i].d)));
    }
}

static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const hr_block_q8_0 *x = src;
    for (int64_t i = 0; i < n / HR_QK8_0; i++, dst += HR_QK8_0)
        store_s8x32_scaled(dst, loadu256(x[i].qs), _mm256_set1_ps(h2f(x[i].d)));
}

/* dst[0..31] = d * (float)u[j] - m for 32 unsigned bytes u (mul, then sub) */
static inline void store_u8x32_affine(float *dst, __m256i u, float d, float m) {
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    const __m128i lo = _mm256_castsi256_si128(u), hi = _mm256_extracti128_si256(u, 1);
    const __m128i parts[4] = {lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)};
    for (int k = 0; k < 4; k++) {
        const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
        _mm256_storeu_ps(dst + 8 * k, _mm256_sub_ps(_mm256_mul_ps(vd, v), vm));
    }
}

static void dequant_q4_k(const void *src, float *dst, int64_t n) {
    const hr_block_q4_k *x = src;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        uint8_t sc[8], mn[8];
        hr_kq_unpack_scales(x[i].scales, sc, mn);
        for (int c = 0; c < 4; c++, dst += 64) {
            const __m256i q = loadu256(x[i].qs + 32 * c);
            store_u8x32_affine(dst, _mm256_and_si256(q, m4), d * (float)sc[2 * c],
                               dmin * (float)mn[2 * c]);
            store_u8x32_affine(dst + 32, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                               d * (float)sc[2 * c + 1], dmin * (float)mn[2 * c + 1]);
        }
    }
}

static void dequant_q6_k(const void *src, float *dst, int64_t n) {
    const hr_block_q6_k *x = src;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    const __m256i b32 = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / HR_QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int h = 0; h < 2; h++, dst += 128) {
            const uint8_t *ql = x[i].ql + 64 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            const __m256i l0 = loadu256(ql), l1 = loadu256(ql + 32);
            const __m256i qh = loadu256(x[i].qh + 32 * h);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            q[1] = _mm256_or_si256(
                _mm256_and_si256(l1, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            q[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            q[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                const __m256i v = _mm256_sub_epi8(q[k], b32);
                const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
                const __m256 d0 = _mm256_set1_ps(d * (float)sc[2 * k]);
                const __m256 d1 = _mm256_set1_ps(d * (float)sc[2 * k + 1]);
                float *o = dst + 32 * k;
                _mm256_storeu_ps(o,
                                 _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
                _mm256_storeu_ps(o + 8, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                              _mm_unpackhi_epi64(lo, lo)))));
                _mm256_storeu_ps(o + 16,
                                 _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
                _mm256_storeu_ps(o + 24, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                               _mm_unpackhi_epi64(hi, hi)))));
            }
        }
    }
}

static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(loadu128(s + i)));
    for (; i < n; i++)
        dst[i] = h2f(s[i]);
}

static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load_bf16x8(s + i));
    for (; i < n; i++)
        dst[i] = hr_bf16_to_fp32(s[i]);
}

/* ---- activation quantizers (bit-exact with the scalar ones) -------------- */

static inline __m256 abs_ps(__m256 v) {
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

static inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* roundf(): nearest, ties away from zero */
static inline __m256i round_away_epi32(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_sub_ps(v, t); /* exact */
    const __m256 ge = _mm256_cmp_ps(abs_ps(frac), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 sign = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), v);
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), sign);
    return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(ge, one)));
}

/* 4 x s32x8 (each within int8 range) -> 32 int8 in order */
static inline __m256i pack_s32_s8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* one 32-element block: q = roundf(x * (1/d)), d = amax/127; returns sum q */
static inline int quant_block32(const float *x, int8_t *qs, uint16_t *dh, float *dout) {
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, abs_ps(v[k]));
    }
    const float d = hmax_ps(amax) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = round_away_epi32(_mm256_mul_ps(v[k], vid));
    _mm256_storeu_si256((__m256i *)qs, pack_s32_s8(q[0], q[1], q[2], q[3]));
    *dh = hr_fp32_to_fp16(d);
    *dout = d;
    return hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
}

static void quant_q8_0(const float *src, void *dst, int64_t n) {
    hr_block_q8_0 *y = dst;
    float d;
    for (int64_t i = 0; i < n / HR_QK8_0; i++, src += HR_QK8_0)
        quant_block32(src, y[i].qs, &y[i].d, &d);
}

static void quant_q8_1(const float *src, void *dst, int64_t n) {
    hr_block_q8_1 *y = dst;
    float d;
    for (int64_t i = 0; i < n / HR_QK8_1; i++, src += HR_QK8_1) {
        const int sum = quant_block32(src, y[i].qs, &y[i].d, &d);
        y[i].s = hr_fp32_to_fp16((float)sum * d);
    }
}

static void quant_q8_k(const float *src, void *dst, int64_t n) {
    hr_block_q8_k *y = dst;
    for (int64_t i = 0; i < n / HR_QK_K; i++, src += HR_QK_K) {
        __m256 amv = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++)
            amv = _mm256_max_ps(amv, abs_ps(_mm256_loadu_ps(src + 8 * k)));
        const float amax = hmax_ps(amv);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float max = 0.0f; /* first element of largest magnitude, as the scalar scan */
        for (int k = 0; k < 32; k++) {
            const __m256 eq = _mm256_cmp_ps(abs_ps(_mm256_loadu_ps(src + 8 * k)),
                                            _mm256_set1_ps(amax), _CMP_EQ_OQ);
            const int m = _mm256_movemask_ps(eq);
            if (m) {
                max = src[8 * k + __builtin_ctz((unsigned)m)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 vis = _mm256_set1_ps(iscale);
        const __m256i c127 = _mm256_set1_epi32(127);
        __m256i gs[16];
        for (int g = 0; g < 8; g++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 v = _mm256_mul_ps(vis, _mm256_loadu_ps(src + 32 * g + 8 * k));
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(v), c127);
            }
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * g), pack_s32_s8(q[0], q[1], q[2], q[3]));
            gs[2 * g] = _mm256_add_epi32(q[0], q[1]);
            gs[2 * g + 1] = _mm256_add_epi32(q[2], q[3]);
        }
        for (int g = 0; g < 16; g += 4) { /* 4 groups: hadd tree, then fold lanes */
            const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(gs[g], gs[g + 1]),
                                                _mm256_hadd_epi32(gs[g + 2], gs[g + 3]));
            const __m128i s =
                _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            _mm_storel_epi64((__m128i *)(y[i].bsums + g), _mm_packs_epi32(s, s));
        }
        y[i].d = 1.0f / iscale;
    }
}

static void quant_f16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        d[i] = hr_fp32_to_fp16(src[i]);
}

void hr_quant_fill_avx2(hr_kernels *k) {
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
    k->vec_dot[HR_TYPE_MXFP4] = dot_mxfp4;

    /* several rows at once: faster than vec_dot per row even for one column */
    k->vec_dot_n[HR_TYPE_F32] = dotn_f32;
    k->vec_dot_n[HR_TYPE_F16] = dotn_f16;
    k->vec_dot_n[HR_TYPE_BF16] = dotn_bf16;
    k->dotn_one[HR_TYPE_F32] = k->dotn_one[HR_TYPE_F16] = k->dotn_one[HR_TYPE_BF16] = true;
    k->vec_dot_n[HR_TYPE_Q4_K] = dotn_q4_k;
    k->vec_dot_n[HR_TYPE_Q5_K] = dotn_q5_k;
    k->vec_dot_n[HR_TYPE_Q6_K] = dotn_q6_k;
    k->dotn_one[HR_TYPE_Q4_K] = k->dotn_one[HR_TYPE_Q5_K] = k->dotn_one[HR_TYPE_Q6_K] = true;

    k->dequant[HR_TYPE_F16] = dequant_f16;
    k->dequant[HR_TYPE_BF16] = dequant_bf16;
    k->dequant[HR_TYPE_Q4_0] = dequant_q4_0;
    k->dequant[HR_TYPE_Q8_0] = dequant_q8_0;
    k->dequant[HR_TYPE_Q4_K] = dequant_q4_k;
    k->dequant[HR_TYPE_Q6_K] = dequant_q6_k;

    k->quant[HR_TYPE_F16] = quant_f16;
    k->quant[HR_TYPE_Q8_0] = quant_q8_0;
    k->quant[HR_TYPE_Q8_1] = quant_q8_1;
    k->quant[HR_TYPE_Q8_K] = quant_q8_k;
}
