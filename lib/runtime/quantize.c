/* quantize.c -- scalar reference quantizers, bit-exact with gguf.quants.
 *
 * Each function mirrors one numpy expression of the gguf package (quoted above it):
 * every product, sum and quotient is a separate float operation in the package's
 * order. That is exact only without FMA contraction: ISO C mode (c_std=c11) keeps
 * GCC from contracting, clang is told below, and lib/meson.build passes
 * -ffp-contract=off where the compiler knows it. Blocks are written byte by byte
 * (little-endian, no alignment needed). */
#include "runtime/quantize.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "powerinfer.h"
#include "runtime/fp16.h"
#include "runtime/types.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK 32 /* weights per block */

static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* numpy's float32 -> uint8 / int8 cast (`.astype`) on x86-64: a truncating
 * conversion to int32 (cvttss2si, which gives INT32_MIN for NaN, infinities and
 * values out of range) of which the low byte is kept. */
static uint8_t np_byte(float v) {
    if (!(v >= -2147483648.0f && v < 2147483648.0f))
        return 0;
    return (uint8_t)((uint32_t)(int32_t)v & 0xffu);
}

/* The first element of largest magnitude, as `abs(blocks).argmax()` picks it (a NaN
 * is the largest). */
static float signed_absmax(const float *x) {
    int im = 0;
    float am = fabsf(x[0]);
    for (int j = 1; j < QK && !isnan(am); j++) {
        float a = fabsf(x[j]);
        if (isnan(a) || a > am) {
            am = a;
            im = j;
        }
    }
    return x[im];
}

/* blocks.min() and blocks.max(): of equal values the later one is kept (it matters
 * for +0 and -0 only), a NaN wins. */
static void min_max(const float *x, float *mn, float *mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < QK && !isnan(lo); j++) {
        float v = x[j];
        if (isnan(v)) {
            lo = hi = v;
            break;
        }
        if (v <= lo)
            lo = v;
        if (v >= hi)
            hi = v;
    }
    *mn = lo;
    *mx = hi;
}

/* np.where(d == 0, 0, 1 / d) */
static float inverse(float d) {
    return d == 0.0f ? 0.0f : 1.0f / d;
}

/* Symmetric blocks (Q4_0, Q5_0): half = 2^(bits-1); d = max / neg_half (neg_half =
 * -half, passed as the float constant so that the division is exactly numpy's: a NaN
 * keeps its sign, which -(max / half) would flip), max the value of largest magnitude
 * with its sign; q = trunc(x * id + half + 0.5) clipped to 2 half - 1. Returns d. */
static float quants_sym(const float *src, int half, float neg_half, uint8_t q[QK]) {
    const float d = signed_absmax(src) / neg_half;
    const float id = inverse(d);
    for (int j = 0; j < QK; j++) {
        float v = src[j] * id;
        v = v + ((float)half + 0.5f);
        const uint8_t u = np_byte(v);
        q[j] = u > 2 * half - 1 ? (uint8_t)(2 * half - 1) : u;
    }
    return d;
}

/* Blocks with an offset (Q4_1, Q5_1): d = (max - min) / top, m = min,
 * q = trunc((x - min) * id + 0.5) clipped to top. Returns d, sets *m. */
static float quants_min(const float *src, int top, uint8_t q[QK], float *m) {
    float mn, mx;
    min_max(src, &mn, &mx);
    const float d = (mx - mn) / (float)top;
    const float id = inverse(d);
    for (int j = 0; j < QK; j++) {
        float v = src[j] - mn;
        v = v * id;
        v = v + 0.5f;
        const uint8_t u = np_byte(v);
        q[j] = u > top ? (uint8_t)top : u;
    }
    *m = mn;
    return d;
}

void pi_quantize_f32(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = pi_fp32_to_bits(src[i]);
        for (int k = 0; k < 4; k++)
            p[4 * i + k] = (uint8_t)(u >> (8 * k));
    }
}

/* data.astype(np.float16): round to nearest even */
void pi_quantize_f16(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        wr16(p + 2 * i, pi_fp32_to_fp16(src[i]));
}

/* BF16.quantize_blocks: round to nearest even, NaN made quiet */
void pi_quantize_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        wr16(p + 2 * i, pi_fp32_to_bf16(src[i]));
}

/* Q4_0, 18 B: d f16 | qs[16], q[j] in the low nibble of qs[j], q[j+16] in the high.
 *   max = blocks[abs(blocks).argmax()];  d = max / -8;  id = where(d == 0, 0, 1 / d)
 *   q = trunc(blocks * id + 8.5).astype(uint8).clip(0, 15) */
void pi_quantize_q4_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK, b += 18) {
        uint8_t q[QK];
        wr16(b, pi_fp32_to_fp16(quants_sym(src, 8, -8.0f, q)));
        for (int j = 0; j < QK / 2; j++)
            b[2 + j] = (uint8_t)(q[j] | (q[j + QK / 2] << 4));
    }
}

/* Q4_1, 20 B: d f16 | m f16 | qs[16].
 *   d = (max - min) / 15;  id = where(d == 0, 0, 1 / d)
 *   q = trunc((blocks - min) * id + 0.5).astype(uint8).clip(0, 15);  m = min */
void pi_quantize_q4_1(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK, b += 20) {
        uint8_t q[QK];
        float mn;
        wr16(b, pi_fp32_to_fp16(quants_min(src, 15, q, &mn)));
        wr16(b + 2, pi_fp32_to_fp16(mn));
        for (int j = 0; j < QK / 2; j++)
            b[4 + j] = (uint8_t)(q[j] | (q[j + QK / 2] << 4));
    }
}

/* The 5-bit layouts: low nibbles as Q4, bit 4 of q[j] in bit j of the u32 qh. */
static void pack5(const uint8_t *q, uint8_t *qh, uint8_t *qs) {
    uint32_t h = 0;
    for (int j = 0; j < QK; j++)
        h |= (uint32_t)((q[j] >> 4) & 1u) << j;
    for (int k = 0; k < 4; k++)
        qh[k] = (uint8_t)(h >> (8 * k));
    for (int j = 0; j < QK / 2; j++)
        qs[j] = (uint8_t)((q[j] & 0x0f) | (q[j + QK / 2] << 4));
}

/* Q5_0, 22 B: d f16 | qh u32 | qs[16].
 *   d = max / -16;  q = trunc(blocks * id + 16.5).astype(uint8).clip(0, 31) */
void pi_quantize_q5_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK, b += 22) {
        uint8_t q[QK];
        wr16(b, pi_fp32_to_fp16(quants_sym(src, 16, -16.0f, q)));
        pack5(q, b + 2, b + 6);
    }
}

/* Q5_1, 24 B: d f16 | m f16 | qh u32 | qs[16].
 *   d = (max - min) / 31;  q = trunc((blocks - min) * id + 0.5).astype(uint8).clip(0, 31) */
void pi_quantize_q5_1(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK, b += 24) {
        uint8_t q[QK];
        float mn;
        wr16(b, pi_fp32_to_fp16(quants_min(src, 31, q, &mn)));
        wr16(b + 2, pi_fp32_to_fp16(mn));
        pack5(q, b + 4, b + 8);
    }
}

/* np_roundf(v).astype(int8): np_roundf is sign(v) * (floor(a) + floor(2 * (a -
 * floor(a)))) with a = |v|, i.e. round half away from zero, and NaN for NaN and
 * infinities; both those and |v| >= 2^31 become byte 0 (np_byte). Below 2^31 the
 * int32 truncation is floor(a), and the fraction test is exact. */
static uint8_t round_byte(float v) {
    float a = fabsf(v);
    if (!(a < 2147483648.0f))
        return 0;
    int32_t t = (int32_t)a;
    float frac = a - (float)t;
    uint32_t r = (uint32_t)t + (frac >= 0.5f ? 1u : 0u);
    if (v < 0.0f)
        r = 0u - r;
    return (uint8_t)(r & 0xffu);
}

/* Q8_0, 34 B: d f16 | qs[32] int8.
 *   d = abs(blocks).max() / 127;  id = where(d == 0, 0, 1 / d)
 *   q = np_roundf(blocks * id).astype(int8) */
void pi_quantize_q8_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK, b += 34) {
        float amax = fabsf(src[0]);
        for (int j = 1; j < QK && !isnan(amax); j++) {
            float a = fabsf(src[j]);
            if (isnan(a) || a > amax)
                amax = a;
        }
        float d = amax / 127.0f;
        float id = inverse(d);
        wr16(b, pi_fp32_to_fp16(d));
        for (int j = 0; j < QK; j++)
            b[2 + j] = round_byte(src[j] * id);
    }
}

/* np.log2 on a float32 array, then np.floor: log2 is taken in double and rounded to
 * float32, which is correctly rounded where it matters (near the powers of two, where
 * a float32 log2 may round up to the integer: floor then gives that integer, as numpy
 * does; numpy's own float32 log2 is not correctly rounded elsewhere, but only its floor
 * is used, and that agrees on every value tried, tests/format/test_quantize.py). */
static float floor_log2(float d) {
    return floorf((float)log2((double)d));
}

/* MXFP4, 17 B: e | qs[16], q[j] in the low nibble of qs[j], q[j+16] in the high.
 *   d = abs(blocks).max()
 *   e = where(d > 0, floor(log2(d)) - 2 + 127, 0).astype(uint8)
 *   d = e8m0_to_fp32_half(e)
 *   q = argmin(abs(d * kvalues - blocks))  (the first of equal errors)
 * d * kvalues is exact (a power of two times a small integer); the subtraction is
 * rounded in float32 as numpy's is, which decides ties. For max |x| below 2^-125 the
 * exponent is negative and wraps to its low byte as numpy's cast does on x86-64
 * (np_byte): a huge scale, and every quant 0. A NaN in the block gives e = 0 and NaN
 * errors, so quants 0 (argmin takes the first NaN); an infinity gives e = 0 (np_byte
 * of inf). */
void pi_quantize_mxfp4(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK, b += 17) {
        float amax = fabsf(src[0]);
        for (int j = 1; j < QK && !isnan(amax); j++) {
            float a = fabsf(src[j]);
            if (isnan(a) || a > amax)
                amax = a;
        }
        const uint8_t e = amax > 0.0f ? np_byte(floor_log2(amax) - 2.0f + 127.0f) : 0;
        const float d = pi_e8m0_half_to_fp32(e);
        uint8_t q[QK];
        for (int j = 0; j < QK; j++) {
            int best = 0;
            float err = fabsf(d * (float)pi_mxfp4_grid[0] - src[j]);
            for (int k = 1; k < 16 && !isnan(err); k++) {
                const float ek = fabsf(d * (float)pi_mxfp4_grid[k] - src[j]);
                if (isnan(ek) || ek < err) {
                    err = ek;
                    best = k;
                }
            }
            q[j] = (uint8_t)best;
        }
        b[0] = e;
        for (int j = 0; j < QK / 2; j++)
            b[1 + j] = (uint8_t)(q[j] | (q[j + QK / 2] << 4));
    }
}

int pi_quantize_supported(uint32_t type) {
    switch (type) {
    case PI_TYPE_F32:
    case PI_TYPE_F16:
    case PI_TYPE_BF16:
    case PI_TYPE_Q4_0:
    case PI_TYPE_Q4_1:
    case PI_TYPE_Q5_0:
    case PI_TYPE_Q5_1:
    case PI_TYPE_Q8_0:
    case PI_TYPE_MXFP4:
        return 1;
    default:
        return 0;
    }
}

void pi_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    switch (type) {
    case PI_TYPE_F32: pi_quantize_f32(src, dst, n); break;
    case PI_TYPE_F16: pi_quantize_f16(src, dst, n); break;
    case PI_TYPE_BF16: pi_quantize_bf16(src, dst, n); break;
    case PI_TYPE_Q4_0: pi_quantize_q4_0(src, dst, n); break;
    case PI_TYPE_Q4_1: pi_quantize_q4_1(src, dst, n); break;
    case PI_TYPE_Q5_0: pi_quantize_q5_0(src, dst, n); break;
    case PI_TYPE_Q5_1: pi_quantize_q5_1(src, dst, n); break;
    case PI_TYPE_Q8_0: pi_quantize_q8_0(src, dst, n); break;
    case PI_TYPE_MXFP4: pi_quantize_mxfp4(src, dst, n); break;
    default: break; /* callers check pi_quantize_supported */
    }
}
