/* quant_avx512.c - AVX-512 (F/BW/VL/DQ) dot products for cores without
 * VNNI (Skylake-SP class): Q4_0, Q8_0, Q4_K, Q5_K and Q6_K on vpmaddubsw +
 * vpmaddwd, 32-element blocks two per register with the scales spread by
 * one permute per pair, K-quant super-blocks 64 elements per register; and
 * F16, BF16, F32 for every AVX-512 core. These keep their own float order
 * (per-block int32 sums scaled with one FMA, one reduction per row), not
 * the canonical one. With VNNI the integer types keep the AVX2 table's
 * canonical vec_dot and decode through dotc_avx512.c instead, which is
 * faster and gives the same values. */
#include "kernels/quant-impl.h"

#include <immintrin.h>

#define HR_AI static inline __attribute__((always_inline))

HR_AI float h2f(uint16_t h) { return _cvtsh_ss(h); }

HR_AI __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

HR_AI __m128i loadu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

HR_AI __m512i loadu512(const void *p) { return _mm512_loadu_si512(p); }

/* two 32-byte runs in one register: [a | b] */
HR_AI __m512i load2x256(const void *a, const void *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(a)), loadu256(b), 1);
}

/* acc + sums over int16 pairs of p * s */
HR_AI __m512i dp_s16(__m512i acc, __m512i p, __m512i s) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p, s));
}

HR_AI __m256i dp_u8s8_256(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

HR_AI float hsum_ps128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* dx*dy of 4 consecutive 32-element blocks (x blocks xstride bytes apart,
 * y blocks q8_0). The 8 fp16 scales are packed in general registers: the
 * vector pipes are the bottleneck here, the integer ones are idle. */
HR_AI __m128 scales4(const void *x, size_t xstride, const hr_block_q8_0 *y) {
    const uint8_t *px = x;
    uint64_t vx = 0, vy = 0;
    for (int k = 0; k < 4; k++) {
        uint16_t hx, hy;
        memcpy(&hx, px + (size_t)k * xstride, 2);
        memcpy(&hy, &y[k].d, 2);
        vx |= (uint64_t)hx << (16 * k);
        vy |= (uint64_t)hy << (16 * k);
    }
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)vx)),
                      _mm_cvtph_ps(_mm_cvtsi64_si128((long long)vy)));
}

/* ---- Q4_0 x Q8_0 --------------------------------------------------------- */

/* s32x16: lanes 0-7 partial sums of block x[0], lanes 8-15 of x[1] (the
 * high nibbles shifted down: vpmaddubsw saturates) */
HR_AI __m512i q4_0_pair(const hr_block_q4_0 *x, const hr_block_q8_0 *y) {
    const __m512i q = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(loadu128(x[0].qs)), 0xff00,
                                                  loadu128(x[1].qs));
    const __m512i s = load2x256(y[0].qs, y[1].qs);
    const __m512i shift = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    const __m512i u = _mm512_and_si512(_mm512_srlv_epi64(q, shift), _mm512_set1_epi8(0x0f));
    const __m512i off = _mm512_set1_epi8(8);
    const __m512i p = _mm512_sub_epi16(_mm512_maddubs_epi16(u, s), _mm512_maddubs_epi16(off, s));
    return _mm512_madd_epi16(p, _mm512_set1_epi16(1));
}

HR_AI float q4_0_one(const hr_block_q4_0 *x, const hr_block_q8_0 *y) {
    const __m128i t = loadu128(x->qs);
    const __m256i u = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1),
        _mm256_set1_epi8(0x0f));
    const __m256i s = loadu256(y->qs);
    const __m256i z = _mm256_setzero_si256();
    const __m256i v =
        _mm256_sub_epi32(dp_u8s8_256(z, u, s), dp_u8s8_256(z, _mm256_set1_epi8(8), s));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return hsum_ps128(_mm_cvtepi32_ps(h)) * (h2f(x->d) * h2f(y->d));
}

static float dot_q4_0_bw(int64_t n, const void *w, const void *a) {
    const hr_block_q4_0 *x = w;
    const hr_block_q8_0 *y = a;
    const int64_t nb = n / HR_QK4_0;
    /* block 4i + k's scale on its lanes: d4 = [d0..d3] */
    const __m512i lo2 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i hi2 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        const __m128 d4 = scales4(&x[i], sizeof(*x), &y[i]);
        const __m512 d8 = _mm512_castps128_ps512(d4);
        const __m512i s01 = q4_0_pair(x + i, y + i);
        const __m512i s23 = q4_0_pair(x + i + 2, y + i + 2);
        acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(lo2, d8), _mm512_cvtepi32_ps(s01), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(hi2, d8), _mm512_cvtepi32_ps(s23), acc1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < nb; i++)
        sum += q4_0_one(x + i, y + i);
    return sum;
}

/* ---- Q8_0 x Q8_0 --------------------------------------------------------- */

HR_AI __m512i q8_0_pair(const hr_block_q8_0 *x, const hr_block_q8_0 *y) {
    const __m512i xs = load2x256(x[0].qs, x[1].qs);
    const __m512i ys = load2x256(y[0].qs, y[1].qs);
    /* |x| * (y with x's sign), x != -128 */
    const __m512i ax = _mm512_abs_epi8(xs);
    const __m512i sy =
        _mm512_mask_sub_epi8(ys, _mm512_movepi8_mask(xs), _mm512_setzero_si512(), ys);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(ax, sy), _mm512_set1_epi16(1));
}

HR_AI float q8_0_one(const hr_block_q8_0 *x, const hr_block_q8_0 *y) {
    const __m256i xs = loadu256(x->qs), ys = loadu256(y->qs);
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(xs, xs), _mm256_sign_epi8(ys, xs));
    const __m256i v = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return hsum_ps128(_mm_cvtepi32_ps(h)) * (h2f(x->d) * h2f(y->d));
}

static float dot_q8_0_bw(int64_t n, const void *w, const void *a) {
    const hr_block_q8_0 *x = w;
    const hr_block_q8_0 *y = a;
    const int64_t nb = n / HR_QK8_0;
    const __m512i lo2 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i hi2 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        const __m128 d4 = scales4(&x[i], sizeof(*x), &y[i]);
        const __m512 dd = _mm512_castps128_ps512(d4);
        const __m512i s01 = q8_0_pair(x + i, y + i);
        const __m512i s23 = q8_0_pair(x + i + 2, y + i + 2);
        acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(lo2, dd), _mm512_cvtepi32_ps(s01), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(hi2, dd), _mm512_cvtepi32_ps(s23), acc1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < nb; i++)
        sum += q8_0_one(x + i, y + i);
    return sum;
}

/* ---- K-quants x Q8_K ----------------------------------------------------- */

/* sum_j mn[j] * (q8 sum of sub-block j) as s32x4 partial sums; scmn holds
 * the 8 scale bytes then the 8 min bytes */
HR_AI __m128i kq_mins_dot(__m128i scmn, const int16_t bsums[16]) {
    const __m256i bs = loadu256(bsums);
    const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(scmn, scmn)), q8s);
}

/* vpshufb mask giving int16 lanes: 128-bit lanes 0-1 <- byte a of the lane
 * (zero-extended), lanes 2-3 <- byte b */
HR_AI __m512i byte_pair_sel(int a, int b) {
    const __m256i lo = _mm256_set1_epi16((short)(0x8000 | a));
    const __m256i hi = _mm256_set1_epi16((short)(0x8000 | b));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* q4_K / q5_K: chunk c (64 elements) = [sub-block 2c | 2c+1] in one register:
 * the 32 packed bytes broadcast to both halves, the upper half shifted by 4.
 * Scales are spread to int16 lanes with in-lane byte shuffles (vpermw is slow
 * on some cores). */
HR_AI float dot_q45_k_body(int64_t n, const void *w, const void *a, const bool five) {
    const hr_block_q8_k *y = a;
    const int64_t nb = n / HR_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    const __m512i nib_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i hbit_shift = _mm512_set_epi64(1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i ssel[4] = {byte_pair_sel(0, 1), byte_pair_sel(2, 3), byte_pair_sel(4, 5),
                             byte_pair_sel(6, 7)};
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *qs, *scales;
        uint16_t dh, dmh;
        __m512i qh = _mm512_setzero_si512();
        if (five) {
            const hr_block_q5_k *x = (const hr_block_q5_k *)w + i;
            qs = x->qs;
            scales = x->scales;
            dh = x->d;
            dmh = x->dmin;
            /* lower half: bit 2c of each byte, upper half: bit 2c+1, at bit 0 */
            qh = _mm512_srlv_epi64(_mm512_broadcast_i64x4(loadu256(x->qh)), hbit_shift);
        } else {
            const hr_block_q4_k *x = (const hr_block_q4_k *)w + i;
            qs = x->qs;
            scales = x->scales;
            dh = x->d;
            dmh = x->dmin;
        }
        const float d = y[i].d * h2f(dh), dmin = y[i].d * h2f(dmh);
        const __m128i scmn = hr_kq_unpack_scales_sse(scales);
        accm =
            _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(kq_mins_dot(scmn, y[i].bsums)), accm);
        const __m512i sc = _mm512_broadcast_i32x4(scmn);
        const int8_t *q8 = y[i].qs;
        __m512i sumi0 = _mm512_setzero_si512(), sumi1 = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            const __m512i raw =
                _mm512_srlv_epi64(_mm512_broadcast_i64x4(loadu256(qs + 32 * c)), nib_shift);
            __m512i u;
            if (five) {
                const __m512i hb = _mm512_and_si512(_mm512_slli_epi64(qh, 4), b4);
                u = _mm512_ternarylogic_epi64(raw, m4, hb, 0xEA); /* (raw & m4) | hb */
                qh = _mm512_srli_epi64(qh, 2);
            } else {
                u = _mm512_and_si512(raw, m4);
            }
            const __m512i p = _mm512_maddubs_epi16(u, loadu512(q8 + 64 * c));
            const __m512i scv = _mm512_shuffle_epi8(sc, ssel[c]);
            if (c & 1)
                sumi1 = dp_s16(sumi1, p, scv);
            else
                sumi0 = dp_s16(sumi0, p, scv);
        }
        const __m512i sumi = _mm512_add_epi32(sumi0, sumi1);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc) - hsum_ps128(accm);
}

/* q6_K: half h (128 elements) in two registers: [elements 0-31 | 32-63] from
 * the low nibbles of ql[0..63], [64-95 | 96-127] from the high nibbles; qh
 * broadcast to both halves and shifted so the right 2 bits land at bits 4-5.
 * sum (q - 32) * q8 is taken as sum q * q8 - 32 * bsums. Register k covers
 * scales 4k..4k+3, one per 128-bit lane: spread with vpshufb from the
 * (int16) scales of its half. */
static float dot_q6_k_bw(int64_t n, const void *w, const void *a) {
    const hr_block_q6_k *x = w;
    const hr_block_q8_k *y = a;
    const int64_t nb = n / HR_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i sh_lo = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4); /* left */
    const __m512i sh_hi = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0); /* right */
    /* lane L picks int16 word L (first register of a half) or 4+L (second) */
    const __m512i wsel0 = _mm512_set_epi64(
        0x0706070607060706ll, 0x0706070607060706ll, 0x0504050405040504ll, 0x0504050405040504ll,
        0x0302030203020302ll, 0x0302030203020302ll, 0x0100010001000100ll, 0x0100010001000100ll);
    const __m512i wsel1 = _mm512_add_epi8(wsel0, _mm512_set1_epi8(8));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const float d = y[i].d * h2f(x[i].d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(x[i].scales));
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu256(y[i].bsums)), 5);
        __m512i sumi0 = _mm512_setzero_si512(), sumi1 = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i sch = _mm512_broadcast_i32x4(h == 0 ? _mm256_castsi256_si128(sc16)
                                                              : _mm256_extracti128_si256(sc16, 1));
            const __m512i l = loadu512(x[i].ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(loadu256(x[i].qh + 32 * h));
            const __m512i hlo = _mm512_and_si512(_mm512_sllv_epi64(qh, sh_lo), m30);
            const __m512i hhi = _mm512_and_si512(_mm512_srlv_epi64(qh, sh_hi), m30);
            const __m512i qlo = _mm512_ternarylogic_epi64(l, m4, hlo, 0xEA);
            const __m512i qhi = _mm512_ternarylogic_epi64(_mm512_srli_epi64(l, 4), m4, hhi, 0xEA);
            const int8_t *q8 = y[i].qs + 128 * h;
            const __m512i p0 = _mm512_maddubs_epi16(qlo, loadu512(q8));
            const __m512i p1 = _mm512_maddubs_epi16(qhi, loadu512(q8 + 64));
            sumi0 = dp_s16(sumi0, p0, _mm512_shuffle_epi8(sch, wsel0));
            sumi1 = dp_s16(sumi1, p1, _mm512_shuffle_epi8(sch, wsel1));
        }
        const __m512i sumi =
            _mm512_sub_epi32(_mm512_add_epi32(sumi0, sumi1), _mm512_zextsi256_si512(corr));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* ---- F32 / F16 / BF16 x F32 ---------------------------------------------- */

HR_AI __m512 load16_f32(const void *p, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

HR_AI __m512 load16_f16(const void *p, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
}

HR_AI __m512 load16_bf16(const void *p, int64_t i, __mmask16 m) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

#define DOT_F512(NAME, LOAD)                                                                       \
    static float NAME(int64_t n, const void *w, const void *a) {                                   \
        const float *y = a;                                                                        \
        const __mmask16 all = 0xffff;                                                              \
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();                                 \
        __m512 s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();                                 \
        int64_t i = 0;                                                                             \
        for (; i + 64 <= n; i += 64) {                                                             \
            s0 = _mm512_fmadd_ps(LOAD(w, i, all), _mm512_loadu_ps(y + i), s0);                     \
            s1 = _mm512_fmadd_ps(LOAD(w, i + 16, all), _mm512_loadu_ps(y + i + 16), s1);           \
            s2 = _mm512_fmadd_ps(LOAD(w, i + 32, all), _mm512_loadu_ps(y + i + 32), s2);           \
            s3 = _mm512_fmadd_ps(LOAD(w, i + 48, all), _mm512_loadu_ps(y + i + 48), s3);           \
        }                                                                                          \
        for (; i < n; i += 16) {                                                                   \
            const __mmask16 m = n - i >= 16 ? all : (__mmask16)((1u << (n - i)) - 1u);             \
            s0 = _mm512_fmadd_ps(LOAD(w, i, m), _mm512_maskz_loadu_ps(m, y + i), s0);              \
        }                                                                                          \
        return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));  \
    }

DOT_F512(dot_f32, load16_f32)
DOT_F512(dot_f16, load16_f16)
DOT_F512(dot_bf16, load16_bf16)

static float dot_q4_k_bw(int64_t n, const void *w, const void *a) {
    return dot_q45_k_body(n, w, a, false);
}

static float dot_q5_k_bw(int64_t n, const void *w, const void *a) {
    return dot_q45_k_body(n, w, a, true);
}

void hr_quant_fill_avx512(hr_kernels *k, unsigned flags) {
    /* these kernels keep their own float order (the AVX2 table they start
     * from is canonical) */
    k->canonical = false;
    k->vec_dot[HR_TYPE_F32] = dot_f32;
    k->vec_dot[HR_TYPE_F16] = dot_f16;
    k->vec_dot[HR_TYPE_BF16] = dot_bf16;
    if (flags & HR_AVX512_VNNI)
        return; /* the canonical AVX2 vec_dot stays; dotc_avx512.c decodes */
    k->vec_dot[HR_TYPE_Q4_0] = dot_q4_0_bw;
    k->vec_dot[HR_TYPE_Q8_0] = dot_q8_0_bw;
    k->vec_dot[HR_TYPE_Q4_K] = dot_q4_k_bw;
    k->vec_dot[HR_TYPE_Q5_K] = dot_q5_k_bw;
    k->vec_dot[HR_TYPE_Q6_K] = dot_q6_k_bw;
}
