/* gemm_avx2.c - the tile kernels of gemm-impl.h on AVX2 (VNNI emulated with
 * vpmaddubsw / vpmaddwd; 16 registers: 2 rows x 4 tokens), in the canonical
 * float order (kernels/canon-impl.h): bit-identical to the scalar vec_dot. */
#define HR_GEMM_RM 2
#define HR_GEMM_TM 4
#include "kernels/gemm-impl.h"

void hr_gemm_fill_avx2(hr_kernels *k) { hr_gemm_fill_common(k); }
