/* gemm_avx512.c - the tile kernels of gemm-impl.h on AVX-512VL + VNNI with
 * ymm registers (vpdpbusd / vpdpwssd, 32 registers: 4 rows x 4 tokens).
 * Used by both VNNI builds of the AVX-512 table; without VNNI the table
 * keeps the AVX2 tiles. */
#define HR_GEMM_RM 4
#define HR_GEMM_TM 4
#include "kernels/gemm-impl.h"

void hr_gemm_fill_avx512(hr_kernels *k, unsigned flags) {
    if (flags & HR_AVX512_VNNI)
        hr_gemm_fill_common(k);
}
