/* gemmp_fast_avxvnni.c - the free-order AVX2 prompt panels of
 * gemmp2-impl.h with AVX-VNNI's vpdpbusd on ymm registers (hr_gemmp2v_*):
 * the default AVX2 table's entries on CPUs that have AVX-VNNI (Intel cores
 * since Alder Lake; CPUs with AVX-512 VNNI run their own table). */
#define HR_P2_VNNI 1
#include "kernels/gemmp2-impl.h"
