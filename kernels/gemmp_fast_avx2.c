/* gemmp_fast_avx2.c - the free-order AVX2 prompt panels of gemmp2-impl.h
 * with vpmaddubsw / vpmaddwd (hr_gemmp2f_*): every AVX2 CPU. */
#define HR_P2_VNNI 0
#include "kernels/gemmp2-impl.h"
