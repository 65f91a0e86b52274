/* quant-impl.h - what the dispatcher quant.c and the SIMD kernel files
 * (quant_avx2.c, dotc_*.c, gemm*.c) share: the block layouts and
 * scalar helpers of types-impl.h, SIMD helpers and the per-ISA table fillers
 * the dispatcher calls. The SIMD files call nothing in quant.c.
 * Internal to kernels/ (tests may include it to reach ISA variants). */
#ifndef HR_KERNELS_QUANT_IMPL_H
#define HR_KERNELS_QUANT_IMPL_H

#include "kernels/quant.h"
#include "kernels/types-impl.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>

/* SIMD form of hr_kq_unpack_scales: bytes 0-7 scales, 8-15 mins. Reads 16
 * bytes at s (the 12 scale bytes and 4 bytes of the block that follow). */
static inline __m128i hr_kq_unpack_scales_sse(const uint8_t *s) {
    const __m128i v = _mm_loadu_si128((const __m128i *)s);
    const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); /* w0 w2 w1 w2 */
    const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); /* w0 w0 w1 w1 */
    const __m128i lo =
        _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                      _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi =
        _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/* The fp16 values at p + k * stride, k < 4, as 4 floats. Packed in a
 * general register: the vector ports are the busy ones in the dot kernels,
 * the integer ones idle. */
static inline __m128 hr_halves4(const void *p, size_t stride) {
    const uint8_t *b = p;
    uint64_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint16_t h;
        memcpy(&h, b + (size_t)k * stride, 2);
        v |= (uint64_t)h << (16 * k);
    }
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

/* hr_e8m0_half of the MXFP4 exponent bytes at p, p + stride, ... (4 blocks) */
static inline __m128 hr_e8m0_half4(const uint8_t *p, size_t stride) {
    const __m128i e = _mm_setr_epi32(p[0], p[stride], p[2 * stride], p[3 * stride]);
    const __m128i one = _mm_set1_epi32(1), two = _mm_set1_epi32(2);
    const __m128i norm = _mm_slli_epi32(_mm_sub_epi32(e, one), 23);
    const __m128i sub = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e); /* e < 2 */
    return _mm_castsi128_ps(_mm_blendv_epi8(norm, sub, _mm_cmplt_epi32(e, two)));
}

/* The MXFP4 codes' doubled E2M1 values + 12 (0..24), a vpshufb table: the
 * unsigned form the integer kernels multiply, -12 * sum(y) making up for it */
static inline __m128i hr_mxfp4_lut12(void) {
    return _mm_add_epi8(_mm_loadu_si128((const __m128i *)hr_mxfp4_values), _mm_set1_epi8(12));
}
#endif

/* Per-ISA table fillers: overwrite the entries the ISA specialises, leave the
 * rest. The AVX-512 ones take HR_AVX512_* flags and specialise only with
 * HR_AVX512_VNNI (without it the table keeps the AVX2 kernels). */
enum { HR_AVX512_VNNI = 1u };
void hr_quant_fill_avx2(hr_kernels *k);
/* Tile kernels (gemm_avx2.c, gemm_avx512.c): fill k->gemm; the AVX-512 one
 * only with HR_AVX512_VNNI (it runs VNNI on ymm registers). */
void hr_gemm_fill_avx2(hr_kernels *k);
void hr_gemm_fill_avx512(hr_kernels *k, unsigned flags);
/* Packed-panel GEMM on AVX-512 VNNI (gemmp_avx512.c), hr_gemm_fn
 * semantics; gemm_avx512.c uses them for every call of HR_GEMMP_MIN_T
 * tokens and more, and asks for HR_GEMMP_ROWS rows per call
 * (hr_kernels.gemm_rows: Q4_0's activation seeds are prepared once per
 * call for all its rows). They, the tiles and vec_dot give the same bits
 * (the canonical order), so a token's result does not depend on how many
 * tokens share its call. */
#define HR_GEMMP_MIN_T 2
#define HR_GEMMP_ROWS 128
void hr_gemmp_q4_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                   float *y, size_t ys);
void hr_gemmp_q4_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                   float *y, size_t ys);
void hr_gemmp_q6_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                   float *y, size_t ys);
/* The free-order packed panels (gemmp_fast_avx512.c): the same calls,
 * values equal to vec_dot up to float summation order. */
void hr_gemmpf_q4_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                    float *y, size_t ys);
void hr_gemmpf_q8_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                    float *y, size_t ys);
void hr_gemmpf_q4_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                    float *y, size_t ys);
void hr_gemmpf_mxfp4(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmpf_q6_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                    float *y, size_t ys);
/* The free-order AVX2 panels (gemmp2-impl.h): hr_gemm_fn semantics for two
 * or more tokens; hr_gemmp2f_* on every AVX2 CPU (gemmp_fast_avx2.c),
 * hr_gemmp2v_* with AVX-VNNI (gemmp_fast_avxvnni.c). */
void hr_gemmp2f_q4_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmp2f_q8_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmp2f_mxfp4(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                      float *y, size_t ys);
void hr_gemmp2f_q4_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmp2f_q5_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmp2f_q6_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmp2v_q4_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmp2v_q8_0(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmp2v_mxfp4(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                      float *y, size_t ys);
void hr_gemmp2v_q4_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmp2v_q5_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
void hr_gemmp2v_q6_k(int64_t n, int nr, int nt, const void *w, size_t ws, const void *a, size_t as,
                     float *y, size_t ys);
/* The fast (default) AVX2 table's entries over the canonical one in k: the
 * free-order panels (the AVX-VNNI ones with avxvnni). Returns whether it
 * changed anything. */
bool hr_gemm_fill_avx2_fast(hr_kernels *k, bool avxvnni);
/* The fast (default) AVX-512 table's entries over the canonical one in k:
 * the free-order panels where VNNI runs them. Returns whether it changed
 * anything. */
bool hr_gemm_fill_avx512_fast(hr_kernels *k, unsigned flags);
/* Canonical-order decode kernels (dotc_avx512.c): Q4_0 and Q8_0 vec_dot_n
 * (also for one column) on 512-bit VNNI, with vec_dot taken from the
 * canonical AVX2 table avx2, whose values they equal bit for bit. */
void hr_dotc_fill_avx512(hr_kernels *k, unsigned flags, const hr_kernels *avx2);
/* expf over arrays in doubles (vexp_avx512.c), the C library's algorithm
 * and bits (glibc's FMA build) */
void hr_vexp_fill_avx512(hr_kernels *k);
void hr_vexp_fill_avx2(hr_kernels *k);
/* glibc's expf table: the bits of 2^(i / 32) less i << 47 (quant.c) */
extern const uint64_t hr_vexp_table[32];
/* ... and its constants, as double bits: 32 / ln 2, the rounding shift
 * 1.5 * 2^52, the cubic's coefficients C0, C1, C2 */
#define HR_VEXP_INV_LN2_N 0x40471547652b82feull
#define HR_VEXP_SHIFT 0x4338000000000000ull
#define HR_VEXP_C0 0x3ebc6af84b912394ull
#define HR_VEXP_C1 0x3f2ebfce50fac4f3ull
#define HR_VEXP_C2 0x3f962e42ff0c52d6ull
/* y[l] = expf(x[l]) for every lane l set in the mask big: the arguments
 * glibc treats as special cases (|x| >= 88, infinities, NaN), from the
 * library itself */
static inline void hr_vexp_special(const float *x, float *y, unsigned big, int lanes) {
    for (int l = 0; l < lanes; l++)
        if (big & (1u << l))
            y[l] = expf(x[l]);
}
/* AVX2 Q4_0 and Q8_0 vec_dot_n over several rows at once (dotc_avx2.c),
 * also for one column; bit-identical to the AVX2 vec_dot. */
void hr_dotc_fill_avx2(hr_kernels *k);
/* aarch64 (quant_neon.c, quant_dotprod.c, gemm_i8mm.c): the NEON table
 * (dot products of every supported type, activation quantizers, fp16/bf16
 * conversions), the dotprod one (SDOT for the integer dot products) and the
 * i8mm one (4 x 4 SDOT tiles in k->gemm, in the canonical order). */
void hr_quant_fill_neon(hr_kernels *k);
void hr_quant_fill_dotprod(hr_kernels *k);
void hr_gemm_fill_i8mm(hr_kernels *k);
/* HR_AVX512_* flags this CPU supports / prefers (0 without AVX-512). */
unsigned hr_quant_avx512_flags(void);

/* CALL(T) with T = n (1..8, larger taken as 8) as a compile-time constant,
 * so that each count gets its own unrolled kernel (the batched decode and
 * prompt GEMM kernels' column and token counts). */
#define HR_BY_COUNT8(n, CALL)                                                                      \
    switch (n) {                                                                                   \
    case 1:                                                                                        \
        CALL(1);                                                                                   \
        break;                                                                                     \
    case 2:                                                                                        \
        CALL(2);                                                                                   \
        break;                                                                                     \
    case 3:                                                                                        \
        CALL(3);                                                                                   \
        break;                                                                                     \
    case 4:                                                                                        \
        CALL(4);                                                                                   \
        break;                                                                                     \
    case 5:                                                                                        \
        CALL(5);                                                                                   \
        break;                                                                                     \
    case 6:                                                                                        \
        CALL(6);                                                                                   \
        break;                                                                                     \
    case 7:                                                                                        \
        CALL(7);                                                                                   \
        break;                                                                                     \
    default:                                                                                       \
        CALL(8);                                                                                   \
        break;                                                                                     \
    }

#endif
