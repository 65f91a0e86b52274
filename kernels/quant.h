/* quant.h - weight/activation element types, quant block formats, and the
 * per-type row kernels: dequantize, quantize, dot product.
 *
 * Type ids equal the GGUF/ggml type ids so they can be read straight from a
 * file. Block layouts are the standard GGUF ones (little-endian, packed).
 *
 * Dot products pair a weight row of type T with an activation row already
 * converted to hr_type_traits(T)->vec_dot_type (Q8_0 for Q4_0/Q5_0/Q8_0,
 * Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants, F32 for F32/F16/BF16), the way
 * llama.cpp quantizes activations, so results land close to its logits.
 *
 * Every kernel exists as a scalar reference plus AVX2 and AVX-512 versions
 * where useful; hr_kernels_best() picks by CPU at run time (cpuid), and
 * hr_kernels_for_isa() exposes each so tests compare SIMD against scalar.
 * SIMD dequantizers and activation quantizers are bit-exact with the scalar
 * ones; SIMD dot products differ only by float summation order.
 * Setting HR_ISA=scalar or HR_ISA=avx2 in the environment caps what
 * hr_kernels_best() returns (debugging, benchmarks).
 * All functions here are thread-safe and allocate nothing. */
#ifndef HR_KERNELS_QUANT_H
#define HR_KERNELS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    HR_TYPE_BF16 = 30,
    HR_TYPE_COUNT = 39, /* one past the largest id the table knows */
} hr_type;

typedef struct {
    const char *name;     /* "q4_0", "f16", ... */
    int block_elems;      /* elements per block (1 for F32/F16/BF16) */
    size_t block_bytes;   /* bytes per block */
    bool supported;       /* weight type with dequant + dot kernels */
    hr_type vec_dot_type; /* activation format this weight type dots with */
} hr_type_traits;

/* NULL when the id is unknown to hearth (not even the layout). */
const hr_type_traits *hr_type_get(int type);
/* "unknown" when unknown. */
const char *hr_type_name(int type);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
size_t hr_type_row_bytes(int type, int64_t n);

/* Half/bfloat16 conversions (exact, round-to-nearest-even when narrowing). */
float hr_fp16_to_fp32(uint16_t h);
uint16_t hr_fp32_to_fp16(float f);
float hr_bf16_to_fp32(uint16_t h);
uint16_t hr_fp32_to_bf16(float f);

typedef enum { HR_ISA_SCALAR = 0, HR_ISA_AVX2 = 1, HR_ISA_AVX512 = 2 } hr_isa;

/* Row kernels. n is the element count (a multiple of the block size). */
typedef void (*hr_dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*hr_quant_fn)(const float *src, void *dst, int64_t n);
/* Returns sum_i w[i]*a[i]; w of the weight type, a of its vec_dot_type. */
typedef float (*hr_vec_dot_fn)(int64_t n, const void *w, const void *a);
/* A tile of dot products for prompt processing:
 *   y[t * y_stride + r] = vec_dot(n, w + r * w_stride, a + t * a_stride)
 * for r < nr weight rows and t < nt activation rows (any nr, nt >= 0;
 * strides in bytes for w and a, in floats for y). SIMD versions unpack each
 * weight block once for several tokens and load each activation block once
 * for several rows; results equal vec_dot up to float summation order. */
typedef void (*hr_gemm_fn)(int64_t n, int nr, int nt, const void *w, size_t w_stride, const void *a,
                           size_t a_stride, float *y, size_t y_stride);

typedef struct {
    hr_isa isa;
    hr_dequant_fn dequant[HR_TYPE_COUNT]; /* NULL where unsupported */
    hr_quant_fn quant[HR_TYPE_COUNT];     /* activation + weight quantizers */
    hr_vec_dot_fn vec_dot[HR_TYPE_COUNT]; /* indexed by the weight type */
    hr_gemm_fn gemm[HR_TYPE_COUNT];       /* tile kernels; NULL: use hr_gemm_tile */
} hr_kernels;

/* The best table this CPU can run (detected once, cached). Thread-safe. */
const hr_kernels *hr_kernels_best(void);
/* A specific table, or NULL if this CPU cannot run it. Entries a SIMD table
 * does not specialise fall back to those of the next narrower table (AVX-512
 * to AVX2 to scalar). */
const hr_kernels *hr_kernels_for_isa(hr_isa isa);
const char *hr_isa_name(hr_isa isa);

/* Convenience wrappers over hr_kernels_best(); they do nothing for a type
 * without a kernel (check hr_type_get(type)->supported first). */
void hr_dequantize_row(int type, const void *src, float *dst, int64_t n);
void hr_quantize_row(int type, const float *src, void *dst, int64_t n);

/* k->gemm[type] where the table has one, else the same tile computed with
 * k->vec_dot[type] one pair at a time (the reference the tiles are tested
 * against). Arguments as hr_gemm_fn. */
void hr_gemm_tile(const hr_kernels *k, int type, int64_t n, int nr, int nt, const void *w,
                  size_t w_stride, const void *a, size_t a_stride, float *y, size_t y_stride);

#endif
