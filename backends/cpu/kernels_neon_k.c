/* kernels_neon_k.c -- ARM64 NEON overrides for the K-quants (Q2_K..Q6_K) and IQ4_XS:
 * dots and gemms against PI_VEC_Q8_K activations. Compiled twice like kernels_neon.c. */
#include <arm_neon.h>

#include "kernels.h"

#if defined(PI_NEON_DOTPROD)
#  define PI_NEON_K_ENTRY pi_cpu_kernels_neon_k_dotprod
#else
#  define PI_NEON_K_ENTRY pi_cpu_kernels_neon_k
#endif

void PI_NEON_K_ENTRY(struct pi_cpu_kernels *k) {
    (void)k;
}
