/* fmaf_exact.h -- a correctly rounded fmaf for C libraries whose own is not: MinGW-w64's
 * fmaf rounds a*b before adding c (about a quarter of random operands end one ulp off
 * the fused result), so the reference kernels would differ from the SIMD ones, whose
 * FMA instructions round once. Elsewhere fmaf is the C library's (glibc, macOS, and
 * MSVC's UCRT are correct). Include after <math.h>. */
#ifndef PI_CPU_FMAF_EXACT_H
#define PI_CPU_FMAF_EXACT_H

#if defined(__MINGW32__)
#  include <math.h>
#  include <stdint.h>
#  include <string.h>

/* a*b is exact in double (24 + 24 bits); the sum is rounded to odd in double (53 bits,
 * at least 2 more than float's 24 twice), and rounding that to float is then the
 * correctly rounded a*b + c. */
static inline float pi_fmaf_exact(float a, float b, float c) {
    const double p = (double)a * (double)b, cd = (double)c;
    double s = p + cd;
    if (!isfinite(s))
        return (float)s;
    const double bv = s - p;
    const double err = (p - (s - bv)) + (cd - bv); /* TwoSum: s + err == p + cd exactly */
    if (err != 0.0) {
        uint64_t u;
        memcpy(&u, &s, sizeof u);
        if ((u & 1) == 0) { /* inexact and even: the odd neighbour on err's side */
            u += (err > 0) == (s > 0) ? 1 : (uint64_t)-1;
            memcpy(&s, &u, sizeof s);
        }
    }
    return (float)s;
}
#  define fmaf(a, b, c) pi_fmaf_exact((a), (b), (c))
#endif

#endif
