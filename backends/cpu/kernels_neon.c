/* kernels_neon.c -- ARM64 NEON overrides: float, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL
 * dots and gemms, the activation quantizers, axpy and the attention helpers.
 * Compiled twice (backends/cpu/meson.build): plain ARMv8-A, and with PI_NEON_DOTPROD
 * and +dotprod, where the integer dot products use SDOT. Both builds fill the same
 * entries with the same code; only the int8 dot primitive differs (and it is exact). */
#include <arm_neon.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels.h"

#if defined(PI_NEON_DOTPROD)
#  define PI_NEON_ENTRY pi_cpu_kernels_neon_dotprod
#else
#  define PI_NEON_ENTRY pi_cpu_kernels_neon
#endif

/* ---- small helpers -------------------------------------------------------------------- */

static inline uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* One f16 to float through the hardware conversion (exact, subnormals included). */
static inline float f16s(const uint8_t *p) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(ld16(p)))), 0);
}

static inline float bf16s(const uint8_t *p) {
    uint32_t u = (uint32_t)ld16(p) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* 8 f16 / bf16 at p (any alignment) as two float vectors. */
static inline void ld_f16x8(const uint8_t *p, float32x4_t *lo, float32x4_t *hi) {
    uint16x8_t h = vld1q_u16((const uint16_t *)(const void *)p);
    *lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
    *hi = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)));
}

static inline void ld_bf16x8(const uint8_t *p, float32x4_t *lo, float32x4_t *hi) {
    uint16x8_t h = vld1q_u16((const uint16_t *)(const void *)p);
    *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    *hi = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(h), 16));
}

/* ---- activation quantizers -------------------------------------------------------------
 * One block of m values: max|x| by vmaxq (which passes a NaN on, so one test of the
 * maximum also finds non-finite blocks), q = vcvtaq (round half away from zero, as
 * roundf) of x * (1/d), exactly the reference's arithmetic. */

static float quant_block(const float *x, int m, int8_t *q) {
    float32x4_t mx = vdupq_n_f32(0.0f);
    for (int i = 0; i < m; i += 4)
        mx = vmaxq_f32(mx, vabsq_f32(vld1q_f32(x + i)));
    const float amax = vmaxvq_f32(mx);
    const float d = amax / 127.0f;
    if (!(amax <= FLT_MAX)) {
        memset(q, 0, (size_t)m);
        return NAN;
    }
    if (!(d >= FLT_MIN)) {
        memset(q, 0, (size_t)m);
        return 0.0f;
    }
    const float id = 1.0f / d;
    for (int i = 0; i < m; i += 16) {
        int32x4_t a = vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + i), id));
        int32x4_t b = vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 4), id));
        int32x4_t c = vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 8), id));
        int32x4_t e = vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 12), id));
        int16x8_t ab = vcombine_s16(vmovn_s32(a), vmovn_s32(b));
        int16x8_t ce = vcombine_s16(vmovn_s32(c), vmovn_s32(e));
        vst1q_s8(q + i, vcombine_s8(vmovn_s16(ab), vmovn_s16(ce)));
    }
    return d;
}

/* Each 4-value chunk c of block b goes to 32*c + 4*(b%8) of its group. */
static void quantize_q8_0_neon(const float *x, void *y, int64_t n) {
    uint8_t *out = y;
    const int64_t nb = n / 32;
    memset(y, 0, pi_vec_bytes(PI_VEC_Q8_0, n));
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[32];
        const float d = quant_block(x + 32 * b, 32, q);
        const int sum = vaddlvq_s8(vld1q_s8(q)) + vaddlvq_s8(vld1q_s8(q + 16));
        const float s = d * (float)sum;
        uint8_t *g = out + (size_t)(b / 8) * PI_Q8_0_GROUP_BYTES + 4 * (size_t)(b % 8);
        for (int c = 0; c < 8; c++)
            memcpy(g + 32 * c, q + 4 * c, 4);
        memcpy(out + pi_q8_0_d_offset(b), &d, 4);
        memcpy(out + pi_q8_0_d_offset(b) + 32, &s, 4);
    }
}

static void quantize_q8_k_neon(const float *x, void *y, int64_t n) {
    const int64_t nb = n / 256;
    int8_t *q = y;
    int16_t *bsum = (int16_t *)(void *)(q + 256 * nb);
    float *d = (float *)(void *)(bsum + 16 * nb);
    for (int64_t b = 0; b < nb; b++) {
        d[b] = quant_block(x + 256 * b, 256, q + 256 * b);
        for (int g = 0; g < 16; g++)
            bsum[16 * b + g] = vaddlvq_s8(vld1q_s8(q + 256 * b + 16 * g));
    }
}

/* ---- Q8_0-format dots --------------------------------------------------------------------
 * Layout trick: an activation group holds, per 16-byte half-step, 4 values of each of 4
 * blocks (one per 32-bit lane). Instead of gathering the activations, 4 weight blocks are
 * unpacked to int8 in value order and 4x4-transposed in 32-bit lanes, so that lane j of
 * weight register s holds values 4s..4s+3 of block j: then 8 lane-wise int8 dot products
 * give the 4 blocks' integer sums in one int32x4, with no horizontal adds, and the
 * activation d and s of those 4 blocks are one contiguous float32x4. A gemm unpacks the
 * weights once and applies them to 4 tokens; the per-token arithmetic is the dot's. */

/* acc lane i += sum of the products of bytes 4i..4i+3 (SDOT, or its exact emulation). */
static inline int32x4_t sdot4(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    int16x8_t hi = vmull_high_s8(a, b);
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

/* 4 weight blocks unpacked: lo[j] values 0..15, hi[j] values 16..31 of block j; d and m
 * their scales and offsets (m unused by symmetric types). */
struct wq4 {
    int8x16_t lo[4], hi[4];
    float32x4_t d, m;
};

static inline void transpose4(int8x16_t r[4]) {
    int32x4_t a0 = vreinterpretq_s32_s8(r[0]), a1 = vreinterpretq_s32_s8(r[1]);
    int32x4_t a2 = vreinterpretq_s32_s8(r[2]), a3 = vreinterpretq_s32_s8(r[3]);
    int64x2_t t0 = vreinterpretq_s64_s32(vtrn1q_s32(a0, a1));
    int64x2_t t1 = vreinterpretq_s64_s32(vtrn2q_s32(a0, a1));
    int64x2_t t2 = vreinterpretq_s64_s32(vtrn1q_s32(a2, a3));
    int64x2_t t3 = vreinterpretq_s64_s32(vtrn2q_s32(a2, a3));
    r[0] = vreinterpretq_s8_s64(vtrn1q_s64(t0, t2));
    r[1] = vreinterpretq_s8_s64(vtrn1q_s64(t1, t3));
    r[2] = vreinterpretq_s8_s64(vtrn2q_s64(t0, t2));
    r[3] = vreinterpretq_s8_s64(vtrn2q_s64(t1, t3));
}

static inline float32x4_t f16x4(uint16_t a, uint16_t b, uint16_t c, uint16_t e) {
    const uint16_t h[4] = {a, b, c, e};
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* Bit v of qh (32 bits) as 0x10 in byte v: lo bytes 0..15, hi bytes 16..31. */
static inline void q5_high(uint32_t qh, uint8x16_t *lo, uint8x16_t *hi) {
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t m = vld1q_u8(bits), x10 = vdupq_n_u8(0x10);
    uint8x16_t l = vcombine_u8(vdup_n_u8((uint8_t)qh), vdup_n_u8((uint8_t)(qh >> 8)));
    uint8x16_t h = vcombine_u8(vdup_n_u8((uint8_t)(qh >> 16)), vdup_n_u8((uint8_t)(qh >> 24)));
    *lo = vandq_u8(vtstq_u8(l, m), x10);
    *hi = vandq_u8(vtstq_u8(h, m), x10);
}

/* Unpackers: block j of k (< 4) valid blocks at blk + j * size; missing ones are zero. */
#define UNPACK_BEGIN(size)                                                                 \
    uint16_t dh[4] = {0, 0, 0, 0}, mh[4] = {0, 0, 0, 0};                                   \
    for (int j = 0; j < 4; j++) {                                                          \
        if (j >= k) {                                                                      \
            w->lo[j] = w->hi[j] = vdupq_n_s8(0);                                           \
            continue;                                                                      \
        }                                                                                  \
        const uint8_t *p = blk + (size) * j;
#define UNPACK_END                                                                         \
    }                                                                                      \
    w->d = f16x4(dh[0], dh[1], dh[2], dh[3]);                                              \
    w->m = f16x4(mh[0], mh[1], mh[2], mh[3]);

static inline void unpack_q4_0(struct wq4 *w, const uint8_t *blk, int k) {
    UNPACK_BEGIN(18)
    const uint8x16_t qs = vld1q_u8(p + 2);
    dh[j] = ld16(p);
    w->lo[j] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(qs, vdupq_n_u8(15))), vdupq_n_s8(8));
    w->hi[j] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(qs, 4)), vdupq_n_s8(8));
    UNPACK_END
}

static inline void unpack_q4_1(struct wq4 *w, const uint8_t *blk, int k) {
    UNPACK_BEGIN(20)
    const uint8x16_t qs = vld1q_u8(p + 4);
    dh[j] = ld16(p);
    mh[j] = ld16(p + 2);
    w->lo[j] = vreinterpretq_s8_u8(vandq_u8(qs, vdupq_n_u8(15)));
    w->hi[j] = vreinterpretq_s8_u8(vshrq_n_u8(qs, 4));
    UNPACK_END
}

static inline void unpack_q5_0(struct wq4 *w, const uint8_t *blk, int k) {
    UNPACK_BEGIN(22)
    const uint8x16_t qs = vld1q_u8(p + 6);
    uint8x16_t bl, bh;
    dh[j] = ld16(p);
    q5_high(ld32(p + 2), &bl, &bh);
    w->lo[j] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(qs, vdupq_n_u8(15)), bl)),
                        vdupq_n_s8(16));
    w->hi[j] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(qs, 4), bh)), vdupq_n_s8(16));
    UNPACK_END
}

static inline void unpack_q5_1(struct wq4 *w, const uint8_t *blk, int k) {
    UNPACK_BEGIN(24)
    const uint8x16_t qs = vld1q_u8(p + 8);
    uint8x16_t bl, bh;
    dh[j] = ld16(p);
    mh[j] = ld16(p + 2);
    q5_high(ld32(p + 4), &bl, &bh);
    w->lo[j] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(qs, vdupq_n_u8(15)), bl));
    w->hi[j] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(qs, 4), bh));
    UNPACK_END
}

static inline void unpack_q8_0(struct wq4 *w, const uint8_t *blk, int k) {
    UNPACK_BEGIN(34)
    dh[j] = ld16(p);
    w->lo[j] = vld1q_s8((const int8_t *)(p + 2));
    w->hi[j] = vld1q_s8((const int8_t *)(p + 18));
    UNPACK_END
}

static inline void unpack_iq4_nl(struct wq4 *w, const uint8_t *blk, int k) {
    const int8x16_t grid = vld1q_s8(pi_iq4_grid);
    UNPACK_BEGIN(18)
    const uint8x16_t qs = vld1q_u8(p + 2);
    dh[j] = ld16(p);
    w->lo[j] = vqtbl1q_s8(grid, vandq_u8(qs, vdupq_n_u8(15)));
    w->hi[j] = vqtbl1q_s8(grid, vshrq_n_u8(qs, 4));
    UNPACK_END
}

#undef UNPACK_BEGIN
#undef UNPACK_END

/* acc += the 4 blocks' d_w * d_x * isum (+ m_w * s_x): xh the half-group of the token. */
static inline float32x4_t blocks4(float32x4_t acc, const struct wq4 *w, const uint8_t *xg,
                                  int h, int has_m) {
    const int8_t *xq = (const int8_t *)(xg + 16 * h);
    int32x4_t is = vdupq_n_s32(0);
    for (int s = 0; s < 4; s++) {
        is = sdot4(is, w->lo[s], vld1q_s8(xq + 32 * s));
        is = sdot4(is, w->hi[s], vld1q_s8(xq + 32 * (s + 4)));
    }
    const float32x4_t dx = vld1q_f32((const float *)(const void *)(xg + 256 + 16 * h));
    float32x4_t t = vmulq_f32(vmulq_f32(w->d, dx), vcvtq_f32_s32(is));
    if (has_m) {
        const float32x4_t sx = vld1q_f32((const float *)(const void *)(xg + 288 + 16 * h));
        t = vaddq_f32(t, vmulq_f32(w->m, sx));
    }
    return vaddq_f32(acc, t);
}

/* One row against nt <= 4 tokens; the dot is the nt = 1 case, so gemm == dot exactly. */
#define Q8_0_KERNELS(name, bytes, has_m)                                                         \
    static inline void rows1_##name(const uint8_t *wr, const uint8_t *X, size_t vb, int nt,      \
                                    float *out, int64_t ldy, int64_t n) {                        \
        const int64_t nb = n / 32;                                                               \
        float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),           \
                              vdupq_n_f32(0.0f)};                                                \
        for (int64_t b = 0; b < nb; b += 4) {                                                    \
            struct wq4 w;                                                                        \
            unpack_##name(&w, wr + (size_t)b * (bytes), nb - b < 4 ? (int)(nb - b) : 4);         \
            transpose4(w.lo);                                                                    \
            transpose4(w.hi);                                                                    \
            const size_t go = (size_t)(b / 8) * PI_Q8_0_GROUP_BYTES;                             \
            const int h = (int)((b / 4) & 1);                                                    \
            for (int t = 0; t < nt; t++)                                                         \
                acc[t] = blocks4(acc[t], &w, X + (size_t)t * vb + go, h, has_m);                 \
        }                                                                                        \
        for (int t = 0; t < nt; t++)                                                             \
            out[t * ldy] = vaddvq_f32(acc[t]);                                                   \
    }                                                                                            \
    static float dot_##name##_neon(const void *w, const void *x, int64_t n) {                    \
        float r;                                                                                 \
        rows1_##name(w, x, 0, 1, &r, 0, n);                                                      \
        return r;                                                                                \
    }                                                                                            \
    static void gemm_##name##_neon(const void *W, size_t rb, int64_t nr, const void *X,          \
                                   size_t vb, int64_t nt, float *Y, int64_t ldy, int64_t n) {    \
        for (int64_t t = 0; t < nt; t += 4)                                                      \
            for (int64_t r = 0; r < nr; r++)                                                     \
                rows1_##name((const uint8_t *)W + (size_t)r * rb,                                \
                             (const uint8_t *)X + (size_t)t * vb, vb,                            \
                             nt - t < 4 ? (int)(nt - t) : 4, Y + t * ldy + r, ldy, n);           \
    }
Q8_0_KERNELS(q4_0, 18, 0)
Q8_0_KERNELS(q4_1, 20, 1)
Q8_0_KERNELS(q5_0, 22, 0)
Q8_0_KERNELS(q5_1, 24, 1)
Q8_0_KERNELS(q8_0, 34, 0)
Q8_0_KERNELS(iq4_nl, 18, 0)
#undef Q8_0_KERNELS

/* ---- table ---------------------------------------------------------------------------- */

void PI_NEON_ENTRY(struct pi_cpu_kernels *k) {
    k->quantize_q8_0 = quantize_q8_0_neon;
    k->quantize_q8_k = quantize_q8_k_neon;
#define SETQ(T, name)                                                                      \
    k->dot[T].dot = dot_##name##_neon;                                                     \
    k->dot[T].gemm = gemm_##name##_neon;
    SETQ(PI_TYPE_Q4_0, q4_0)
    SETQ(PI_TYPE_Q4_1, q4_1)
    SETQ(PI_TYPE_Q5_0, q5_0)
    SETQ(PI_TYPE_Q5_1, q5_1)
    SETQ(PI_TYPE_Q8_0, q8_0)
    SETQ(PI_TYPE_ID_IQ4_NL, iq4_nl)
#undef SETQ
}
