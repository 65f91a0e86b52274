/* gemm_avx512.c - the tile kernels of gemm-impl.h on AVX-512VL + VNNI with
 * ymm registers (vpdpbusd / vpdpwssd, 32 registers: 4 rows x 4 tokens),
 * and from HR_GEMMP_MIN_T tokens on the packed-panel zmm kernels of
 * gemmp_avx512.c for Q4_0, Q4_K and Q6_K (the free-order ones of
 * gemmp_fast_avx512.c in the fast table). Used by the AVX-512 table with
 * VNNI; without VNNI the table keeps the AVX2 tiles. */
#define HR_GEMM_RM 4
#define HR_GEMM_TM 4
#include "kernels/gemm-impl.h"

HR_GEMMP_ENTRY(gemmx_q4_0, hr_gemmp_q4_0, gemm_q4_0)
HR_GEMMP_ENTRY(gemmx_q4_k, hr_gemmp_q4_k, gemm_q4_k)
HR_GEMMP_ENTRY(gemmx_q6_k, hr_gemmp_q6_k, gemm_q6_k)
HR_GEMMP_ENTRY(gemmf_q4_0, hr_gemmpf_q4_0, gemm_q4_0)
HR_GEMMP_ENTRY(gemmf_q8_0, hr_gemmpf_q8_0, gemm_q8_0)
HR_GEMMP_ENTRY(gemmf_q4_k, hr_gemmpf_q4_k, gemm_q4_k)
HR_GEMMP_ENTRY(gemmf_q6_k, hr_gemmpf_q6_k, gemm_q6_k)
HR_GEMMP_ENTRY(gemmf_mxfp4, hr_gemmpf_mxfp4, gemm_mxfp4)

void hr_gemm_fill_avx512(hr_kernels *k, unsigned flags) {
    if (!(flags & HR_AVX512_VNNI))
        return;
    hr_gemm_fill_common(k);
    k->gemm[HR_TYPE_Q4_0] = gemmx_q4_0;
    k->gemm[HR_TYPE_Q4_K] = gemmx_q4_k;
    k->gemm[HR_TYPE_Q6_K] = gemmx_q6_k;
    k->gemm_rows = HR_GEMMP_ROWS;
}

bool hr_gemm_fill_avx512_fast(hr_kernels *k, unsigned flags) {
    if (!(flags & HR_AVX512_VNNI))
        return false;
    k->gemm[HR_TYPE_Q4_0] = gemmf_q4_0;
    k->gemm[HR_TYPE_Q8_0] = gemmf_q8_0;
    k->gemm[HR_TYPE_Q4_K] = gemmf_q4_k;
    k->gemm[HR_TYPE_Q6_K] = gemmf_q6_k;
    k->gemm[HR_TYPE_MXFP4] = gemmf_mxfp4;
    return true;
}
