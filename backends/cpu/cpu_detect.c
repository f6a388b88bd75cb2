/* cpu_detect.c -- run-time CPU feature detection: cpuid and xgetbv on x86, the
 * kernel's hardware capabilities (Linux) or sysctl (macOS) on ARM64.
 *
 * A feature counts only if the CPU has it and the OS saves the registers it uses:
 * XCR0 bits 1-2 (SSE, AVX state) for AVX2, plus bits 5-7 (opmask, ZMM_Hi256,
 * Hi16_ZMM) for AVX-512. No state is kept: every call asks the CPU again. */
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#  include <cpuid.h>

/* XCR0, the OS-enabled state components; only valid when CPUID says OSXSAVE. */
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

unsigned pi_cpu_detect(void) {
    unsigned a, b, c, d, flags = 0;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    unsigned ecx1, ebx7, ecx7;
    uint64_t xcr0;

    if (max_leaf < 7 || !__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    ecx1 = c;
    if (!(ecx1 & (1u << 27))) /* OSXSAVE: xgetbv usable */
        return 0;
    xcr0 = read_xcr0();
    __cpuid_count(7, 0, a, b, c, d);
    ebx7 = b;
    ecx7 = c;

    if ((xcr0 & 0x6) == 0x6 && (ecx1 & (1u << 28)) /* AVX */ && (ecx1 & (1u << 12)) /* FMA */ &&
        (ecx1 & (1u << 29)) /* F16C */ && (ebx7 & (1u << 5)) /* AVX2 */)
        flags |= PI_CPU_AVX2;
    if ((flags & PI_CPU_AVX2) && (xcr0 & 0xe6) == 0xe6 && (ebx7 & (1u << 16)) /* F */ &&
        (ebx7 & (1u << 17)) /* DQ */ && (ebx7 & (1u << 30)) /* BW */ &&
        (ebx7 & (1u << 31)) /* VL */) {
        flags |= PI_CPU_AVX512;
        if (ecx7 & (1u << 11))
            flags |= PI_CPU_AVX512_VNNI;
    }
    return flags;
}

#elif defined(__aarch64__)
/* AArch64: Advanced SIMD is part of the base architecture (the ABI passes floats in its
 * registers), so NEON is always there; SDOT/UDOT are optional (ARMv8.2 FEAT_DotProd,
 * e.g. absent on Cortex-A53/A72, present on A55/A76, Neoverse and Apple M). */
#  if defined(__linux__)
#    include <sys/auxv.h>
#    ifndef HWCAP_ASIMDDP
#      define HWCAP_ASIMDDP (1ul << 20)
#    endif
#  elif defined(__APPLE__)
#    include <sys/sysctl.h>
#  endif

unsigned pi_cpu_detect(void) {
    unsigned flags = PI_CPU_NEON;
#  if defined(__linux__)
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP)
        flags |= PI_CPU_DOTPROD;
#  elif defined(__APPLE__)
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0 && v)
        flags |= PI_CPU_DOTPROD;
#  elif defined(__ARM_FEATURE_DOTPROD)
    flags |= PI_CPU_DOTPROD; /* no way to ask here: trust the compiler's target */
#  endif
    return flags;
}

#else

unsigned pi_cpu_detect(void) {
    return 0;
}

#endif
