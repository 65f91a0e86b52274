/* quant_neon.c - the aarch64 baseline table: the row kernels of neon-impl.h
 * on Advanced SIMD alone (every ARMv8-A core: Cortex-A53/A55/A72, Pi 3/4).
 * Only reached through the table quant.c fills when AT_HWCAP has ASIMD. */
#include "kernels/neon-impl.h"

void hr_quant_fill_neon(hr_kernels *k) { hr_neon_fill_common(k); }
