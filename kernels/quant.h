/* quant.h - the per-ISA kernel tables over the types of kernels/types.h:
 * dequantize, quantize, dot product and prompt-processing tiles for every
 * supported type, on scalar, AVX2 and AVX-512 (x86) or NEON, NEON + dotprod
 * and NEON + dotprod + i8mm (aarch64).
 *
 * The scalar table is the traits rows' reference kernels; each SIMD table
 * starts from the next narrower one and overwrites what its ISA specialises
 * (quant_avx2.c, dotc_*.c, gemm*.c; quant_neon.c, quant_dotprod.c,
 * gemm_i8mm.c). hr_kernels_best() picks by CPU at run time (cpuid on x86,
 * getauxval(AT_HWCAP / AT_HWCAP2) on aarch64), and hr_kernels_for_isa()
 * exposes each so tests compare SIMD against scalar. SIMD dequantizers and
 * activation quantizers are bit-exact with the scalar ones. Dot products,
 * tiles and multi-column kernels of every table follow one float order
 * (kernels/canon-impl.h), so the tables give bit-identical results and a
 * model's logits do not depend on which of them ran it
 * (hr_kernels.canonical says so per table).
 * Setting HR_ISA in the environment to
 * the name of a table this CPU can run (scalar, avx2, avx512, neon, dotprod,
 * i8mm) makes hr_kernels_best() return it (debugging, benchmarks, tests of
 * each path); an unknown or unavailable name is ignored with a warning.
 * All functions here are thread-safe and allocate nothing. */
#ifndef HR_KERNELS_QUANT_H
#define HR_KERNELS_QUANT_H

#include "kernels/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    HR_ISA_SCALAR = 0,
    HR_ISA_AVX2 = 1,
    HR_ISA_AVX512 = 2,
    HR_ISA_NEON = 3,    /* aarch64 Advanced SIMD (every ARMv8-A core) */
    HR_ISA_DOTPROD = 4, /* + SDOT/UDOT (ARMv8.2 dotprod: Cortex-A76, Neoverse N1) */
    HR_ISA_I8MM = 5,    /* + SMMLA/USDOT (ARMv8.6 i8mm: Neoverse V1/N2, Graviton 3) */
    HR_ISA_COUNT
} hr_isa;

/* A tile of dot products for prompt processing:
 *   y[t * y_stride + r] = vec_dot(n, w + r * w_stride, a + t * a_stride)
 * for r < nr weight rows and t < nt activation rows (any nr, nt >= 0;
 * strides in bytes for w and a, in floats for y). SIMD versions unpack each
 * weight block once for several tokens and load each activation block once
 * for several rows; results equal vec_dot bit for bit in a canonical table,
 * up to float summation order in the others. */
typedef void (*hr_gemm_fn)(int64_t n, int nr, int nt, const void *w, size_t w_stride, const void *a,
                           size_t a_stride, float *y, size_t y_stride);

/* Decode rows of several sequences against the same weight rows:
 *   y[t * y_stride + r] = vec_dot(n, w + r * w_stride, a[t])
 * for r < nr (any nr >= 0) and t < nt (1 <= nt <= HR_DOT_N_MAX), each value
 * bit-identical to the same table's vec_dot: the per-column float
 * operations are vec_dot's, in its order, while each weight block is
 * unpacked once for all columns (and integer terms that depend only on a
 * column are computed once for all rows). A sequence's result thus never
 * depends on which others share the batch. */
#define HR_DOT_N_MAX 8
typedef void (*hr_vec_dot_n_fn)(int64_t n, int nr, const void *w, size_t w_stride,
                                const void *const *a, int nt, float *y, size_t y_stride);

typedef struct {
    hr_isa isa;
    hr_dequant_fn dequant[HR_TYPE_COUNT];     /* NULL where unsupported */
    hr_quant_fn quant[HR_TYPE_COUNT];         /* activation + weight quantizers */
    hr_vec_dot_fn vec_dot[HR_TYPE_COUNT];     /* indexed by the weight type */
    hr_gemm_fn gemm[HR_TYPE_COUNT];           /* tile kernels; NULL: use hr_gemm_tile */
    hr_vec_dot_n_fn vec_dot_n[HR_TYPE_COUNT]; /* NULL: hr_vec_dot_n loops vec_dot */
    /* true: vec_dot_n[type] is faster than vec_dot per row also for one
     * column (several rows' chains in flight), so hr_vec_dot_n and
     * single-token decode use it there too; false: one column loops vec_dot */
    bool dotn_one[HR_TYPE_COUNT];
    /* true: vec_dot, gemm and vec_dot_n follow kernels/canon-impl.h and
     * equal the scalar table's bit for bit (every hr_kernels_for_isa table;
     * test_gemm and test_isa require it); false for a fast table with
     * free-order kernels */
    bool canonical;
    int gemm_rows; /* weight rows per gemm call the tiles are best fed (0: the caller's choice) */
    /* y[i] = expf(x[i]) for i < n (x == y allowed), equal to the C
     * library's expf bit for bit (the scalar table calls it per value) */
    void (*expf_n)(const float *x, float *y, int n);
} hr_kernels;

/* The best table this CPU can run (detected once, cached). Thread-safe.
 *
 * Exactness is a mode. By default a table may sum in the fastest order it
 * has (today: the AVX-512 VNNI prompt panels, whose blocks sum their lanes
 * in integers; canonical false), within stated bounds of the canonical
 * result. In exact mode (--exact, or HEARTH_EXACT=1 in the environment)
 * every table is its canonical one, bit-identical to the scalar path on
 * every ISA. */
const hr_kernels *hr_kernels_best(void);
/* Switches exact mode (HEARTH_EXACT's value at start); hr_kernels_best()
 * follows. Call it only while no kernel runs (at start-up). */
void hr_kernels_set_exact(bool exact);
bool hr_kernels_exact(void);
/* The default-mode table of isa (hr_kernels_for_isa's where it has no
 * faster kernels), or NULL if this CPU cannot run it. */
const hr_kernels *hr_kernels_fast_for_isa(hr_isa isa);
/* A specific table, or NULL if this CPU cannot run it. Entries a SIMD table
 * does not specialise fall back to those of the next narrower table (AVX-512
 * to AVX2 to scalar). */
const hr_kernels *hr_kernels_for_isa(hr_isa isa);
/* Makes isa's table the one hr_kernels_best() returns from now on (bench
 * compares tables in one run); call it only while no kernel runs. 0, or
 * -1 where this CPU cannot run that table. */
int hr_kernels_use(hr_isa isa);
/* Whether isa's table is compiled into this build (x86: avx2, avx512;
 * aarch64: neon, dotprod, i8mm; scalar everywhere), whether or not this CPU
 * can run it. */
bool hr_isa_built(hr_isa isa);
const char *hr_isa_name(hr_isa isa);
/* The table hr_isa_name() calls name (any case), or -1. */
int hr_isa_by_name(const char *name);
/* What the CPU reports, as space-separated names of the features the
 * kernels look at ("avx2 fma f16c avx512 vnni"; "asimd fphp asimddp i8mm
 * sve"); "unknown" on an architecture hearth has no detection for. */
const char *hr_isa_features(void);

/* Convenience wrappers over hr_kernels_best(); they do nothing for a type
 * without a kernel (check hr_type_get(type)->supported first). */
void hr_dequantize_row(int type, const void *src, float *dst, int64_t n);
void hr_quantize_row(int type, const float *src, void *dst, int64_t n);

/* k->gemm[type] where the table has one, else the same tile computed with
 * k->vec_dot[type] one pair at a time (the reference the tiles are tested
 * against). Arguments as hr_gemm_fn. */
void hr_gemm_tile(const hr_kernels *k, int type, int64_t n, int nr, int nt, const void *w,
                  size_t w_stride, const void *a, size_t a_stride, float *y, size_t y_stride);

/* k->vec_dot_n[type] where the table has one, else vec_dot per pair (the
 * weight rows stay in cache across the columns). Arguments as
 * hr_vec_dot_n_fn. */
void hr_vec_dot_n(const hr_kernels *k, int type, int64_t n, int nr, const void *w, size_t w_stride,
                  const void *const *a, int nt, float *y, size_t y_stride);

#endif
