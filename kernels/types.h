/* types.h - the element-type layer: GGUF type ids, one traits row per type
 * (layout, whether hearth runs it as weights, the activation format it dots
 * with, and the scalar reference kernels), row sizes and fp16/bf16
 * conversions. Depends on libc only; mmap/ and ring/ use this header, the
 * SIMD kernel tables live in kernels/quant.h on top of it.
 *
 * Type ids equal the GGUF/ggml type ids so they can be read straight from a
 * file. Block layouts are the standard GGUF ones (kernels/types-impl.h).
 *
 * Dot products pair a weight row of type T with an activation row already
 * converted to hr_type_get(T)->vec_dot_type (Q8_0 for Q4_0/Q5_0/Q8_0/MXFP4, Q8_1
 * for Q4_1/Q5_1, Q8_K for the K-quants, F32 for F32/F16/BF16), the way
 * llama.cpp quantizes activations, so results land close to its logits.
 * The scalar kernels of a row define the semantics every SIMD kernel is
 * tested against. All functions here are thread-safe and allocate nothing. */
#ifndef HR_KERNELS_TYPES_H
#define HR_KERNELS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Every GGUF id is named; hr_type_get() knows those with a traits row. */
typedef enum {
    HR_TYPE_F32 = 0,
    HR_TYPE_F16 = 1,
    HR_TYPE_Q4_0 = 2,
    HR_TYPE_Q4_1 = 3,
    HR_TYPE_Q5_0 = 6,
    HR_TYPE_Q5_1 = 7,
    HR_TYPE_Q8_0 = 8,
    HR_TYPE_Q8_1 = 9,
    HR_TYPE_Q2_K = 10,
    HR_TYPE_Q3_K = 11,
    HR_TYPE_Q4_K = 12,
    HR_TYPE_Q5_K = 13,
    HR_TYPE_Q6_K = 14,
    HR_TYPE_Q8_K = 15,
    HR_TYPE_IQ2_XXS = 16,
    HR_TYPE_IQ2_XS = 17,
    HR_TYPE_IQ3_XXS = 18,
    HR_TYPE_IQ1_S = 19,
    HR_TYPE_IQ4_NL = 20,
    HR_TYPE_IQ3_S = 21,
    HR_TYPE_IQ2_S = 22,
    HR_TYPE_IQ4_XS = 23,
    HR_TYPE_I8 = 24,
    HR_TYPE_I16 = 25,
    HR_TYPE_I32 = 26,
    HR_TYPE_I64 = 27,
    HR_TYPE_F64 = 28,
    HR_TYPE_IQ1_M = 29,
    HR_TYPE_BF16 = 30,
    HR_TYPE_TQ1_0 = 34,
    HR_TYPE_TQ2_0 = 35,
    HR_TYPE_MXFP4 = 39, /* OCP MXFP4: 32 E2M1 values and one E8M0 exponent (gpt-oss experts) */
    HR_TYPE_COUNT = 40, /* one past the largest id the table can hold */
} hr_type;

/* Row kernels. n is the element count (a multiple of the block size). */
typedef void (*hr_dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*hr_quant_fn)(const float *src, void *dst, int64_t n);
/* Returns sum_i w[i]*a[i]; w of the weight type, a of its vec_dot_type. */
typedef float (*hr_vec_dot_fn)(int64_t n, const void *w, const void *a);

typedef struct {
    const char *name;     /* "q4_0", "f16", ... */
    int block_elems;      /* elements per block (1 for F32/F16/BF16) */
    size_t block_bytes;   /* bytes per block */
    bool supported;       /* weight type with dequant + dot kernels */
    hr_type vec_dot_type; /* activation format this weight type dots with */
    /* Scalar reference kernels; NULL where the type has none (vec_dot is
     * set exactly for supported types, dequant/quant also for activation
     * formats such as Q8_1 and Q8_K). */
    hr_dequant_fn dequant;
    hr_quant_fn quant; /* weight quantizer, or ggml's activation quantizer */
    hr_vec_dot_fn vec_dot;
} hr_type_traits;

/* NULL when the id is unknown to hearth (not even the layout). */
const hr_type_traits *hr_type_get(int type);
/* "unknown" when unknown. */
const char *hr_type_name(int type);
/* The id whose name is name (ASCII case ignored: "q4_k" finds q4_K), or -1. */
int hr_type_by_name(const char *name);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
size_t hr_type_row_bytes(int type, int64_t n);

/* ---- half / bfloat16 conversions (exact; round to nearest even when
 * narrowing; nan stays nan) ------------------------------------------------ */

static inline float hr_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t hr_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float hr_fp16_to_fp32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf / nan, payload kept */
        return hr_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) { /* zero / subnormal: mant * 2^-24, exact in f32 */
        const float v = (float)mant * 5.9604644775390625e-8f;
        return hr_f32_from_bits(sign | hr_f32_bits(v));
    }
    return hr_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t hr_fp32_to_fp16(float f) {
    const uint32_t u = hr_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* nan: quiet, top payload bits kept (as F16C does) */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal half: rebias, round to nearest even */
        const uint32_t r = a - 0x38000000u;
        return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    if (a <= 0x33000000u) /* <= 2^-25 (the tie goes to even zero) */
        return sign;
    /* subnormal half: units of 2^-24 */
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - (a >> 23); /* 14..24 */
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

static inline float hr_bf16_to_fp32(uint16_t h) { return hr_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t hr_fp32_to_bf16(float f) {
    const uint32_t u = hr_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* nan: quiet it */
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif
