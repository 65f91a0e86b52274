/* gemm_avx2.c - the tile kernels of gemm-impl.h on AVX2 (VNNI emulated with
 * vpmaddubsw / vpmaddwd; 16 registers: 2 rows x 4 tokens), in the canonical
 * float order (kernels/canon-impl.h): bit-identical to the scalar vec_dot;
 * and the default (free-order) table's entries. */
#define HR_GEMM_RM 2
#define HR_GEMM_TM 4
#include "kernels/gemm-impl.h"

void hr_gemm_fill_avx2(hr_kernels *k) { hr_gemm_fill_common(k); }

/* the default (free-order) table: the panels of gemmp2-impl.h from two
 * tokens on, the canonical tiles for one */
HR_GEMMP_ENTRY(gemmf2_q4_0, hr_gemmp2f_q4_0, gemm_q4_0)
HR_GEMMP_ENTRY(gemmf2_q8_0, hr_gemmp2f_q8_0, gemm_q8_0)
HR_GEMMP_ENTRY(gemmf2_mxfp4, hr_gemmp2f_mxfp4, gemm_mxfp4)
HR_GEMMP_ENTRY(gemmf2_q4_k, hr_gemmp2f_q4_k, gemm_q4_k)
HR_GEMMP_ENTRY(gemmf2_q5_k, hr_gemmp2f_q5_k, gemm_q5_k)
HR_GEMMP_ENTRY(gemmf2_q6_k, hr_gemmp2f_q6_k, gemm_q6_k)

HR_GEMMP_ENTRY(gemmv2_q4_0, hr_gemmp2v_q4_0, gemm_q4_0)
HR_GEMMP_ENTRY(gemmv2_q8_0, hr_gemmp2v_q8_0, gemm_q8_0)
HR_GEMMP_ENTRY(gemmv2_mxfp4, hr_gemmp2v_mxfp4, gemm_mxfp4)
HR_GEMMP_ENTRY(gemmv2_q4_k, hr_gemmp2v_q4_k, gemm_q4_k)
HR_GEMMP_ENTRY(gemmv2_q5_k, hr_gemmp2v_q5_k, gemm_q5_k)
HR_GEMMP_ENTRY(gemmv2_q6_k, hr_gemmp2v_q6_k, gemm_q6_k)

bool hr_gemm_fill_avx2_fast(hr_kernels *k, bool avxvnni) {
    k->gemm[HR_TYPE_Q4_0] = avxvnni ? gemmv2_q4_0 : gemmf2_q4_0;
    k->gemm[HR_TYPE_Q8_0] = avxvnni ? gemmv2_q8_0 : gemmf2_q8_0;
    k->gemm[HR_TYPE_MXFP4] = avxvnni ? gemmv2_mxfp4 : gemmf2_mxfp4;
    k->gemm[HR_TYPE_Q4_K] = avxvnni ? gemmv2_q4_k : gemmf2_q4_k;
    k->gemm[HR_TYPE_Q5_K] = avxvnni ? gemmv2_q5_k : gemmf2_q5_k;
    k->gemm[HR_TYPE_Q6_K] = avxvnni ? gemmv2_q6_k : gemmf2_q6_k;
    if (k->gemm_rows < 128)
        k->gemm_rows = 128; /* a call's per-token block sums serve 16 panels */
    return true;
}
