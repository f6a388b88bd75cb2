/* kernels.c -- filling the kernel table: the scalar reference first, then the SIMD
 * overrides the CPU flags allow. The overrides live in files compiled with their own
 * ISA flags; nothing here uses SIMD, so this file runs on any x86-64 or ARM64 CPU. */
#include "kernels.h"

size_t pi_vec_bytes(enum pi_vec_fmt f, int64_t n) {
    if (n <= 0)
        return 0;
    switch (f) {
    case PI_VEC_F32:
        return (size_t)n * sizeof(float);
    case PI_VEC_Q8_0: /* groups of 8 blocks of 32 */
        return n % 32 ? 0 : (size_t)((n + 255) / 256) * PI_Q8_0_GROUP_BYTES;
    case PI_VEC_Q8_K:
        return n % 256 ? 0 : (size_t)(n / 256) * PI_Q8_K_BLOCK_BYTES;
    default:
        return 0;
    }
}

size_t pi_gemm_pack_bytes(int64_t n, int64_t nt) {
    if (n <= 0 || nt <= 0)
        return 0;
    const int64_t tiles = (nt + PI_GEMM_PACK_TOKENS - 1) / PI_GEMM_PACK_TOKENS;
    return (size_t)tiles * PI_GEMM_PACK_TOKENS * (size_t)((n + 255) / 256) *
           PI_GEMM_PACK_UNIT_BYTES;
}

void pi_cpu_kernels_init(struct pi_cpu_kernels *k, unsigned flags) {
    pi_cpu_kernels_ref(k);
#if defined(PI_HAVE_AVX2_KERNELS)
    if (flags & PI_CPU_AVX2) {
        pi_cpu_kernels_avx2(k);
        pi_cpu_kernels_avx2_math(k);
        k->flags |= PI_CPU_AVX2;
    }
#endif
#if defined(PI_HAVE_AVX512_KERNELS)
    /* The AVX-512 file replaces only some entries and relies on the AVX2 ones. */
    if ((flags & PI_CPU_AVX2) && (flags & PI_CPU_AVX512) && (flags & PI_CPU_AVX512_VNNI)) {
        pi_cpu_kernels_avx512(k);
        k->flags |= PI_CPU_AVX512 | PI_CPU_AVX512_VNNI;
    }
#endif
#if defined(PI_HAVE_NEON_KERNELS)
    if (flags & PI_CPU_NEON) {
        pi_cpu_kernels_neon(k);
        pi_cpu_kernels_neon_k(k);
        k->flags |= PI_CPU_NEON;
        if (flags & PI_CPU_DOTPROD) {
            pi_cpu_kernels_neon_dotprod(k);
            pi_cpu_kernels_neon_k_dotprod(k);
            k->flags |= PI_CPU_DOTPROD;
        }
    }
#endif
    (void)flags;
}
