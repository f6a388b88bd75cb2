/* fp16.h -- exact IEEE binary16 and bfloat16 <-> binary32 conversions (internal).
 *
 * Portable bit manipulation only: no hardware half type, no compiler builtins.
 *  - half -> float is exact for every bit pattern (subnormals are normalised,
 *    inf stays inf, a NaN keeps its sign and payload shifted into the top bits).
 *  - float -> half rounds to nearest, ties to even; too-large values become inf,
 *    too-small ones round into the subnormal range or to signed zero; a NaN keeps
 *    its sign and the top 10 payload bits (a payload that would vanish becomes the
 *    quiet bit), so half -> float -> half is the identity on all 65536 patterns.
 *  - bf16 -> float is a 16-bit shift; float -> bf16 rounds to nearest even and
 *    turns a NaN into a quiet NaN with the same sign.
 *  - E8M0 (MXFP4's shared block exponent) -> half its power of two as a float. */
#ifndef PI_RUNTIME_FP16_H
#define PI_RUNTIME_FP16_H

#include <stdint.h>
#include <string.h>

static inline float pi_bits_to_fp32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t pi_fp32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float pi_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (man << 13); /* inf or NaN */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13); /* 127 - 15 = 112 */
    } else if (man == 0) {
        bits = sign; /* signed zero */
    } else {
        /* subnormal: man * 2^-24; normalise so the leading 1 lands on bit 10 */
        uint32_t e = 113u; /* biased float exponent of 2^-14 */
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
    }
    return pi_bits_to_fp32(bits);
}

static inline uint16_t pi_fp32_to_fp16(float f) {
    uint32_t x = pi_fp32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    uint32_t q, rem, halfway;
    int32_t e;

    if (exp == 0xffu) {
        if (man == 0)
            return (uint16_t)(sign | 0x7c00u);
        q = man >> 13;
        if (q == 0)
            q = 0x200u;
        return (uint16_t)(sign | 0x7c00u | q);
    }
    e = (int32_t)exp - 112; /* biased half exponent */
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e >= 1) {
        q = ((uint32_t)e << 10) | (man >> 13);
        rem = man & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
            q++; /* a carry moves into the exponent; 0x7bff + 1 is inf */
        return (uint16_t)(sign | q);
    }
    /* Result is subnormal or zero: value = (2^23 | man) * 2^(exp-150), in units
     * of 2^-24 that is (2^23 | man) >> (14 - e). */
    if (exp == 0 || 14 - e > 24)
        return (uint16_t)sign; /* below half of the smallest subnormal */
    {
        uint32_t shift = (uint32_t)(14 - e); /* 14..24 */
        uint32_t m = 0x800000u | man;
        q = m >> shift;
        rem = m & ((1u << shift) - 1u);
        halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (q & 1u)))
            q++; /* 0x3ff + 1 becomes the smallest normal, as it should */
        return (uint16_t)(sign | q);
    }
}

static inline float pi_bf16_to_fp32(uint16_t h) {
    return pi_bits_to_fp32((uint32_t)h << 16);
}

static inline uint16_t pi_fp32_to_bf16(float f) {
    uint32_t x = pi_fp32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* MXFP4's block scale: the E8M0 byte e stands for 2^(e - 127), and MXFP4's 4-bit codes
 * are kept as twice their E2M1 values (integers), so the scale used is half of it,
 * 2^(e - 128): the float with exponent field e - 1 for e >= 2, the subnormals 2^-127
 * and 2^-128 for e = 1 and 0. Exact for every byte; e = 255 (NaN in the OCP MX
 * specification) gives 2^127, as ggml and the gguf package read it. */
static inline float pi_e8m0_half_to_fp32(uint8_t e) {
    return pi_bits_to_fp32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

#endif
