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

/* 32 quants of 4 bits into qs[16]: q[j] in the low nibble of qs[j], q[j+16] in the high
 * (higher bits of q ignored). */
static void pack4(const uint8_t *q, uint8_t *qs) {
    for (int j = 0; j < QK / 2; j++)
        qs[j] = (uint8_t)((q[j] & 0x0f) | (q[j + QK / 2] << 4));
}

/* Q4_0, 18 B: d f16 | qs[16], q[j] in the low nibble of qs[j], q[j+16] in the high.
 *   max = blocks[abs(blocks).argmax()];  d = max / -8;  id = where(d == 0, 0, 1 / d)
 *   q = trunc(blocks * id + 8.5).astype(uint8).clip(0, 15) */
void pi_quantize_q4_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK, b += 18) {
        uint8_t q[QK];
        wr16(b, pi_fp32_to_fp16(quants_sym(src, 8, -8.0f, q)));
        pack4(q, b + 2);
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
        pack4(q, b + 4);
    }
}

/* The 5-bit layouts: low nibbles as Q4, bit 4 of q[j] in bit j of the u32 qh. */
static void pack5(const uint8_t *q, uint8_t *qh, uint8_t *qs) {
    uint32_t h = 0;
    for (int j = 0; j < QK; j++)
        h |= (uint32_t)((q[j] >> 4) & 1u) << j;
    for (int k = 0; k < 4; k++)
        qh[k] = (uint8_t)(h >> (8 * k));
    pack4(q, qs);
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
        pack4(q, b + 1);
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

/* ---- least-squares quantizers (not gguf's bytes) ----------------------------------------
 *
 * pi_quantize_row_mse: the same block layouts with the scale (and min) chosen to
 * minimize the block's squared error rather than by its extremes. Symmetric types
 * (Q4_0, Q5_0, Q8_0): for each of 42 trial scales, the largest-magnitude element mapped
 * to -(L + k/10) or to (L - 1 + k/10) levels, k = -10 .. 10 (L = 8, 16, 127; Q8_0 keeps
 * -127 .. 127 as gguf does), the quants are rounded and clamped, the least-squares scale
 * for those quants sum(x q) / sum(q q) is taken, rounded to f16, and the quants rounded
 * again with it; the trial with the least error wins, the extremes' choice included as
 * a trial, so no block is worse than the reference quantizer's up to the f16 rounding.
 * Offset types (Q4_1, Q5_1): from min/max, up to 8 rounds of rounding the quants and
 * solving the 2 x 2 least squares for (d, m), keeping the best. A block with a
 * non-finite value, or all zeros, is quantized as pi_quantize_row does it. */

static int block_finite(const float *x) {
    for (int j = 0; j < QK; j++)
        if (!isfinite(x[j]))
            return 0;
    return 1;
}

/* q = clamp(round(x / d), lo, hi) for j < QK; returns the squared error with d. */
static double sym_round(const float *x, float d, int lo, int hi, int *q) {
    double e = 0.0;
    for (int j = 0; j < QK; j++) {
        int v = d != 0.0f ? (int)lrintf(x[j] / d) : 0;
        v = v < lo ? lo : v > hi ? hi : v;
        q[j] = v;
        const double r = (double)x[j] - (double)d * v;
        e += r * r;
    }
    return e;
}

/* The best f16 scale for x over levels lo .. hi (lo = -L); q gets the quants. */
static float sym_search(const float *x, int lo, int hi, int *q) {
    float amax = 0.0f, v = 0.0f;
    for (int j = 0; j < QK; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            v = x[j];
        }
    int t[QK];
    float best_d = pi_fp16_to_fp32(pi_fp32_to_fp16(v / (float)lo));
    double best = sym_round(x, best_d, lo, hi, q);
    for (int side = 0; side < 2; side++)
        for (int k = -10; k <= 10; k++) {
            const float lv = side ? (float)hi + 0.1f * (float)k : (float)lo - 0.1f * (float)k;
            if (fabsf(lv) < 0.5f)
                continue;
            sym_round(x, v / lv, lo, hi, t);
            double sxq = 0.0, sqq = 0.0;
            for (int j = 0; j < QK; j++) {
                sxq += (double)x[j] * t[j];
                sqq += (double)t[j] * t[j];
            }
            if (sqq <= 0.0)
                continue;
            const float d = pi_fp16_to_fp32(pi_fp32_to_fp16((float)(sxq / sqq)));
            if (!isfinite(d) || d == 0.0f)
                continue;
            const double e = sym_round(x, d, lo, hi, t);
            if (e < best) {
                best = e;
                best_d = d;
                memcpy(q, t, sizeof t);
            }
        }
    return best_d;
}

/* The best f16 (d, m) for x over levels 0 .. top: x ~ d q + m. */
static void min_search(const float *x, int top, int *q, float *dd, float *mm) {
    float mn, mx;
    min_max(x, &mn, &mx);
    float d = (mx - mn) / (float)top, m = mn;
    double best = INFINITY;
    *dd = 0.0f;
    *mm = mn;
    int t[QK];
    for (int it = 0; it < 8; it++) {
        const float d16 = pi_fp16_to_fp32(pi_fp32_to_fp16(d)), m16 = pi_fp16_to_fp32(pi_fp32_to_fp16(m));
        double e = 0.0, sq = 0.0, sqq = 0.0, sx = 0.0, sxq = 0.0;
        for (int j = 0; j < QK; j++) {
            int v = d16 != 0.0f ? (int)lrintf((x[j] - m16) / d16) : 0;
            v = v < 0 ? 0 : v > top ? top : v;
            t[j] = v;
            const double r = (double)x[j] - ((double)d16 * v + m16);
            e += r * r;
            sq += v;
            sqq += (double)v * v;
            sx += x[j];
            sxq += (double)x[j] * v;
        }
        if (e < best) {
            best = e;
            *dd = d16;
            *mm = m16;
            memcpy(q, t, sizeof t);
        }
        const double det = QK * sqq - sq * sq;
        if (det <= 0.0)
            break;
        d = (float)((QK * sxq - sq * sx) / det);
        m = (float)((sx - d * sq) / QK);
        if (!isfinite(d) || !isfinite(m))
            break;
    }
}

void pi_quantize_row_mse(uint32_t type, const float *src, void *dst, int64_t n) {
    const int sym = type == PI_TYPE_Q4_0 || type == PI_TYPE_Q5_0 || type == PI_TYPE_Q8_0;
    const int offs = type == PI_TYPE_Q4_1 || type == PI_TYPE_Q5_1;
    if (!sym && !offs) {
        pi_quantize_row(type, src, dst, n);
        return;
    }
    const size_t bb = pi_type_row_bytes(type, QK);
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK; i++, src += QK, b += bb) {
        int zero = 1;
        for (int j = 0; j < QK; j++)
            zero &= src[j] == 0.0f;
        if (zero || !block_finite(src)) {
            pi_quantize_row(type, src, b, QK);
            continue;
        }
        int q[QK];
        uint8_t u[QK];
        if (type == PI_TYPE_Q8_0) {
            wr16(b, pi_fp32_to_fp16(sym_search(src, -127, 127, q)));
            for (int j = 0; j < QK; j++)
                b[2 + j] = (uint8_t)(q[j] & 0xff);
        } else if (sym) {
            const int L = type == PI_TYPE_Q4_0 ? 8 : 16;
            wr16(b, pi_fp32_to_fp16(sym_search(src, -L, L - 1, q)));
            for (int j = 0; j < QK; j++)
                u[j] = (uint8_t)(q[j] + L);
            if (type == PI_TYPE_Q4_0)
                pack4(u, b + 2);
            else
                pack5(u, b + 2, b + 6);
        } else {
            const int top = type == PI_TYPE_Q4_1 ? 15 : 31;
            float d, m;
            min_search(src, top, q, &d, &m);
            wr16(b, pi_fp32_to_fp16(d));
            wr16(b + 2, pi_fp32_to_fp16(m));
            for (int j = 0; j < QK; j++)
                u[j] = (uint8_t)q[j];
            if (type == PI_TYPE_Q4_1)
                pack4(u, b + 4);
            else
                pack5(u, b + 4, b + 8);
        }
    }
}
