/* gemmp-impl.h - what the packed-panel prompt kernels of AVX-512 VNNI share
 * (gemmp_avx512.c, the canonical order; gemmp_fast_avx512.c, the free
 * one): broadcasts, the panel's row pointers and offsets, the in-lane
 * transpose that builds a panel from in-order row loads, and fp16 gathers.
 * Internal to kernels/; include it from files compiled for AVX-512. */
#ifndef HR_KERNELS_GEMMP_IMPL_H
#define HR_KERNELS_GEMMP_IMPL_H

#include "kernels/quant-impl.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define HR_PI static inline __attribute__((always_inline))
#define HR_UNROLL _Pragma("GCC unroll 16")

HR_PI __m512i pbcast(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

HR_PI float pbcastf(const void *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* lane r: r * ws (byte offsets of the panel's rows) */
HR_PI __m512i row_offsets(size_t ws) {
    return _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)ws));
}

HR_PI __m512i gather32(__mmask16 m, __m512i off, const uint8_t *base) {
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, off, base, 1);
}

/* The panel's row pointers: rows past nr repeat the last one (their lanes
 * are computed but never stored), so every load stays inside the matrix. */
HR_PI void row_ptrs(const uint8_t *w, size_t ws, int nr, const uint8_t *rp[16]) {
    for (int r = 0; r < 16; r++)
        rp[r] = w + (size_t)(r < nr ? r : nr - 1) * ws;
}

/* V[g] lane r = the 4 bytes at rp[r] + off + 4g (g < 4): 16 row loads of 16
 * bytes (each row read in order, as the prefetchers like it) and a 4 x 4
 * dword transpose inside each 128-bit lane (lane k holds rows 4k..4k+3). */
HR_PI void tr16x4(const uint8_t *const *rp, size_t off, __m512i V[4]) {
    __m512i B[4];
    HR_UNROLL
    for (int j = 0; j < 4; j++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rp[j] + off)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rp[4 + j] + off)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rp[8 + j] + off)), 2);
        B[j] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rp[12 + j] + off)), 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(B[0], B[1]), t1 = _mm512_unpackhi_epi32(B[0], B[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(B[2], B[3]), t3 = _mm512_unpackhi_epi32(B[2], B[3]);
    V[0] = _mm512_unpacklo_epi64(t0, t2);
    V[1] = _mm512_unpackhi_epi64(t0, t2);
    V[2] = _mm512_unpacklo_epi64(t1, t3);
    V[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* fp16 at base + off[lane] as floats (lanes outside m: 0) */
HR_PI __m512 gather_h(__mmask16 m, __m512i off, const uint8_t *base) {
    const __m512i v = gather32(m, off, base);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* fp16 in the last 2 bytes before base + off[lane] + 2, as floats (lanes
 * outside m: 0): a field at the very end of a block, read without touching
 * the bytes after it (the block may end a mapping at a page's end) */
HR_PI __m512 gather_h_end(__mmask16 m, __m512i off, const uint8_t *base) {
    const __m512i v = _mm512_srli_epi32(gather32(m, off, base - 2), 16);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* A Q6_K super-block at byte bo of the panel's rows, its 256 values
 * (0..63, low 4 bits from ql, high 2 from qh) as 64 groups of 4 (element
 * order) of the 16 rows at o + 64 * G */
HR_PI void q6k_values(const uint8_t *const *rp, size_t bo, uint8_t *o) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; h++)
        for (int l0 = 0; l0 < 32; l0 += 16) {
            __m512i VA[4], VB[4], VH[4];
            tr16x4(rp, bo + 64 * h + l0, VA);
            tr16x4(rp, bo + 64 * h + 32 + l0, VB);
            tr16x4(rp, bo + 128 + 32 * h + l0, VH);
            HR_UNROLL
            for (int g = 0; g < 4; g++) {
                const __m512i A = VA[g], B = VB[g], H = VH[g];
                const int e = 128 * h + l0 + 4 * g; /* first element of quarter 0 */
                _mm512_store_si512(o + 16 * e,
                                   _mm512_or_si512(_mm512_and_si512(A, m4),
                                                   _mm512_and_si512(_mm512_slli_epi32(H, 4), m30)));
                _mm512_store_si512(o + 16 * (e + 32),
                                   _mm512_or_si512(_mm512_and_si512(B, m4),
                                                   _mm512_and_si512(_mm512_slli_epi32(H, 2), m30)));
                _mm512_store_si512(o + 16 * (e + 64),
                                   _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(A, 4), m4),
                                                   _mm512_and_si512(H, m30)));
                _mm512_store_si512(o + 16 * (e + 96),
                                   _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(B, 4), m4),
                                                   _mm512_and_si512(_mm512_srli_epi32(H, 2), m30)));
            }
        }
}

#endif
