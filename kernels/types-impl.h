/* types-impl.h - the packed GGUF block layouts and the small inline helpers
 * the scalar reference kernels (types.c) and the SIMD kernels (quant_*.c,
 * gemm-impl.h) share. Depends on libc only. Internal to kernels/ (tests may
 * include it to build blocks by hand). A new block type adds its struct and
 * size check here. */
#ifndef HR_KERNELS_TYPES_IMPL_H
#define HR_KERNELS_TYPES_IMPL_H

#include "kernels/types.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define HR_QK4_0 32
#define HR_QK4_1 32
#define HR_QK5_0 32
#define HR_QK5_1 32
#define HR_QK8_0 32
#define HR_QK8_1 32
#define HR_QK_K 256
#define HR_QK_MXFP4 32
#define HR_K_SCALE_SIZE 12

/* Half-precision values are kept as raw uint16_t bits. Element order inside a
 * block is the ggml one, given next to each struct. */

/* x[j] = d * ((qs[j] & 15) - 8), x[j+16] = d * ((qs[j] >> 4) - 8), j < 16 */
typedef struct {
    uint16_t d;
    uint8_t qs[HR_QK4_0 / 2];
} hr_block_q4_0;

/* OCP microscaling FP4: x[j] = 2^(e-128) * kv[qs[j] & 15], x[j+16] = 2^(e-128)
 * * kv[qs[j] >> 4], j < 16, with kv the E2M1 values doubled
 * (hr_mxfp4_values) and e an E8M0 exponent (2^(e-127) halved, so the
 * doubled values come out right; e < 2 as the OCP subnormal patterns) */
typedef struct {
    uint8_t e;
    uint8_t qs[HR_QK_MXFP4 / 2];
} hr_block_mxfp4;

static const int8_t hr_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e-128): the block scale of hr_block_mxfp4 (half its E8M0 value) */
static inline float hr_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* as q4_0 without the -8, plus m */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qs[HR_QK4_1 / 2];
} hr_block_q4_1;

/* 5th bit of element j is bit j of the little-endian uint32 qh; value - 16 */
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[HR_QK5_0 / 2];
} hr_block_q5_0;

typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[HR_QK5_1 / 2];
} hr_block_q5_1;

typedef struct {
    uint16_t d;
    int8_t qs[HR_QK8_0];
} hr_block_q8_0;

/* s = d * sum(qs) */
typedef struct {
    uint16_t d;
    uint16_t s;
    int8_t qs[HR_QK8_1];
} hr_block_q8_1;

/* Not supported as weights; layouts kept for the table and for size checks. */
typedef struct {
    uint8_t scales[HR_QK_K / 16];
    uint8_t qs[HR_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} hr_block_q2_k;

typedef struct {
    uint8_t hmask[HR_QK_K / 8];
    uint8_t qs[HR_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} hr_block_q3_k;

/* 8 sub-blocks of 32: x = d*sc[j]*q - dmin*m[j], q in 0..15; sc/m 6-bit packed
 * in scales[12] (see hr_kq_unpack_scales). Chunk c (64 elements) uses
 * qs[32c..32c+31]: low nibbles = sub-block 2c, high nibbles = 2c+1. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[HR_K_SCALE_SIZE];
    uint8_t qs[HR_QK_K / 2];
} hr_block_q4_k;

/* As q4_K; the 5th bit of element 64c+l (l < 32) is bit 2c of qh[l], of
 * element 64c+32+l bit 2c+1. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[HR_K_SCALE_SIZE];
    uint8_t qh[HR_QK_K / 8];
    uint8_t qs[HR_QK_K / 2];
} hr_block_q5_k;

/* x = d * scales[e/16] * (q - 32), q 6-bit. Half h (128 elements) uses
 * ql[64h..], qh[32h..]; for l < 32: element l = ql[l] low | qh[l] bits 0-1,
 * 32+l = ql[32+l] low | bits 2-3, 64+l = ql[l] high | bits 4-5,
 * 96+l = ql[32+l] high | bits 6-7. */
typedef struct {
    uint8_t ql[HR_QK_K / 2];
    uint8_t qh[HR_QK_K / 4];
    int8_t scales[HR_QK_K / 16];
    uint16_t d;
} hr_block_q6_k;

/* Activations for the K-quants: bsums[g] = sum of qs[16g..16g+15]. */
typedef struct {
    float d;
    int8_t qs[HR_QK_K];
    int16_t bsums[HR_QK_K / 16];
} hr_block_q8_k;

_Static_assert(sizeof(hr_block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(hr_block_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(hr_block_q5_0) == 22, "q5_0 block size");
_Static_assert(sizeof(hr_block_q5_1) == 24, "q5_1 block size");
_Static_assert(sizeof(hr_block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(hr_block_q8_1) == 36, "q8_1 block size");
_Static_assert(sizeof(hr_block_q2_k) == 84, "q2_K block size");
_Static_assert(sizeof(hr_block_q3_k) == 110, "q3_K block size");
_Static_assert(sizeof(hr_block_q4_k) == 144, "q4_K block size");
_Static_assert(sizeof(hr_block_q5_k) == 176, "q5_K block size");
_Static_assert(sizeof(hr_block_q6_k) == 210, "q6_K block size");
_Static_assert(sizeof(hr_block_q8_k) == 292, "q8_K block size");

/* Unpacks the 12-byte K-quant scale field into 8 scales and 8 mins (6 bits
 * each). Bytes 0-3 hold sc[0..3] in bits 0-5 and sc[4..7] bits 4-5 in bits
 * 6-7; bytes 4-7 the same for the mins; bytes 8-11 hold sc[4..7] bits 0-3
 * (low nibble) and m[4..7] bits 0-3 (high nibble). Little-endian host. */
static inline void hr_kq_unpack_scales(const uint8_t s[HR_K_SCALE_SIZE], uint8_t sc[8],
                                       uint8_t mn[8]) {
    uint32_t w[3];
    memcpy(w, s, sizeof(w));
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t sc_lo = w[0] & lo6;
    const uint32_t mn_lo = w[1] & lo6;
    const uint32_t sc_hi = (w[2] & lo4) | (((w[0] >> 6) & lo2) << 4);
    const uint32_t mn_hi = ((w[2] >> 4) & lo4) | (((w[1] >> 6) & lo2) << 4);
    memcpy(sc, &sc_lo, 4);
    memcpy(sc + 4, &sc_hi, 4);
    memcpy(mn, &mn_lo, 4);
    memcpy(mn + 4, &mn_hi, 4);
}

/* Round to nearest, ties to even, for |x| < 2^22 (ggml's nearest_int). */
static inline int hr_nearest_int(float x) {
    float v = x + 12582912.0f; /* 1.5 * 2^23 */
    int32_t i;
    memcpy(&i, &v, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

#endif
