/* quant_dotprod.c - the row kernels of neon-impl.h built with
 * -march=armv8.2-a+dotprod, so their 8-bit dot products are SDOT (Cortex-A76
 * / Pi 5, Neoverse N1 / Graviton 2, Apple M1 and later). Only reached through
 * the table quant.c fills when AT_HWCAP has ASIMDDP. */
#include "kernels/neon-impl.h"

#if !HR_NEON_SDOT
#error "quant_dotprod.c must be built with the dotprod extension"
#endif

void hr_quant_fill_dotprod(hr_kernels *k) { hr_neon_fill_common(k); }
