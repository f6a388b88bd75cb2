/* kernels_neon.c -- ARM64 NEON overrides: float, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4
 * dots and gemms, the activation quantizers, axpy and the attention helpers.
 * Compiled twice (backends/cpu/meson.build): plain ARMv8-A, and with PI_NEON_DOTPROD
 * and +dotprod, where the integer dot products use SDOT. Both builds fill the same
 * entries with the same code; only the int8 dot primitive differs (and it is exact). */
#include <arm_neon.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "runtime/fp16.h" /* pi_e8m0_half_to_fp32 */

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
        const int32_t isum = sum;
        memcpy(out + pi_q8_0_d_offset(b), &d, 4);
        memcpy(out + pi_q8_0_d_offset(b) + 32, &s, 4);
        memcpy(out + pi_q8_0_d_offset(b) + 64, &isum, 4);
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

/* acc lane i += sum of the products of bytes 4i..4i+3 (SDOT). */
#if defined(__ARM_FEATURE_DOTPROD)
static inline int32x4_t sdot4(int32x4_t acc, int8x16_t a, int8x16_t b) {
    return vdotq_s32(acc, a, b);
}
#endif

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

/* MXFP4, 17 B: e | qs[16]; its scales are E8M0 bytes, not f16, hence no UNPACK_*. */
static inline void unpack_mxfp4(struct wq4 *w, const uint8_t *blk, int k) {
    const int8x16_t grid = vld1q_s8(pi_mxfp4_grid);
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < 4; j++) {
        if (j >= k) {
            w->lo[j] = w->hi[j] = vdupq_n_s8(0);
            continue;
        }
        const uint8_t *p = blk + 17 * j;
        const uint8x16_t qs = vld1q_u8(p + 1);
        d[j] = pi_e8m0_half_to_fp32(p[0]);
        w->lo[j] = vqtbl1q_s8(grid, vandq_u8(qs, vdupq_n_u8(15)));
        w->hi[j] = vqtbl1q_s8(grid, vshrq_n_u8(qs, 4));
    }
    w->d = vld1q_f32(d);
    w->m = vdupq_n_f32(0.0f);
}

/* acc += the 4 blocks' d_w * d_x * isum (+ m_w * s_x); xg: the token's group, h: which half. */
static inline float32x4_t blocks4(float32x4_t acc, const struct wq4 *w, const uint8_t *xg,
                                  int h, int has_m) {
    const int8_t *xq = (const int8_t *)(xg + 16 * h);
#if defined(__ARM_FEATURE_DOTPROD)
    int32x4_t is = vdupq_n_s32(0);
    for (int s = 0; s < 4; s++) {
        is = sdot4(is, w->lo[s], vld1q_s8(xq + 32 * s));
        is = sdot4(is, w->hi[s], vld1q_s8(xq + 32 * (s + 4)));
    }
#else
    /* Two int8 products (|w q| <= 128 * 127) fit an int16 lane: steps s and s + 4 share
     * lanes, so they are summed in int16 before the pairwise widening; bytes 4i..4i+3 end
     * in lane i after the final pairwise add of the two halves. */
    int32x4_t ea = vdupq_n_s32(0), eb = vdupq_n_s32(0);
    for (int s = 0; s < 4; s++) {
        const int8x16_t x0 = vld1q_s8(xq + 32 * s), x1 = vld1q_s8(xq + 32 * (s + 4));
        int16x8_t pl = vmull_s8(vget_low_s8(w->lo[s]), vget_low_s8(x0));
        int16x8_t ph = vmull_high_s8(w->lo[s], x0);
        pl = vmlal_s8(pl, vget_low_s8(w->hi[s]), vget_low_s8(x1));
        ph = vmlal_high_s8(ph, w->hi[s], x1);
        ea = vpadalq_s16(ea, pl);
        eb = vpadalq_s16(eb, ph);
    }
    const int32x4_t is = vpaddq_s32(ea, eb);
#endif
    const float32x4_t dx = vld1q_f32((const float *)(const void *)(xg + 256 + 16 * h));
    float32x4_t t = vmulq_f32(vmulq_f32(w->d, dx), vcvtq_f32_s32(is));
    if (has_m) {
        const float32x4_t sx = vld1q_f32((const float *)(const void *)(xg + 288 + 16 * h));
        t = vaddq_f32(t, vmulq_f32(w->m, sx));
    }
    return vaddq_f32(acc, t);
}

/* One row against nt <= 4 tokens; the dot is the nt = 1 case, so gemm == dot exactly.
 * n is a multiple of 32; a last run of fewer than 4 blocks gets zero weight blocks (the
 * activation vector is padded to whole groups of 8, so those reads stay inside it). */
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
Q8_0_KERNELS(mxfp4, 17, 0)
#undef Q8_0_KERNELS

/* ---- float dots -------------------------------------------------------------------------
 * 16 values per step in 4 independent FMA chains (the reference's one chain in order is
 * latency-bound), added pairwise at the end; the tail is scalar. A gemm runs one weight
 * row against 4 tokens with the dot's own arithmetic, so it also equals the dot. */

static inline void ld_f32x8(const uint8_t *p, float32x4_t *lo, float32x4_t *hi) {
    *lo = vld1q_f32((const float *)(const void *)p);
    *hi = vld1q_f32((const float *)(const void *)(p + 16));
}

static inline float f32s(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

#define FLOAT_KERNELS(name, esize, ld8, lds)                                                     \
    static inline void frows1_##name(const uint8_t *w, const float *X, size_t vb, int nt,        \
                                     float *out, int64_t ldy, int64_t n) {                       \
        float32x4_t acc[4][4];                                                                   \
        for (int t = 0; t < 4; t++)                                                              \
            for (int c = 0; c < 4; c++)                                                          \
                acc[t][c] = vdupq_n_f32(0.0f);                                                   \
        int64_t i = 0;                                                                           \
        for (; i + 16 <= n; i += 16) {                                                           \
            float32x4_t w0, w1, w2, w3;                                                          \
            ld8(w + (esize) * i, &w0, &w1);                                                      \
            ld8(w + (esize) * (i + 8), &w2, &w3);                                                \
            for (int t = 0; t < nt; t++) {                                                       \
                const float *x = (const float *)(const void *)((const uint8_t *)X + t * vb) + i; \
                acc[t][0] = vfmaq_f32(acc[t][0], w0, vld1q_f32(x));                              \
                acc[t][1] = vfmaq_f32(acc[t][1], w1, vld1q_f32(x + 4));                          \
                acc[t][2] = vfmaq_f32(acc[t][2], w2, vld1q_f32(x + 8));                          \
                acc[t][3] = vfmaq_f32(acc[t][3], w3, vld1q_f32(x + 12));                         \
            }                                                                                    \
        }                                                                                        \
        for (int t = 0; t < nt; t++) {                                                           \
            const float *x = (const float *)(const void *)((const uint8_t *)X + t * vb);         \
            float s = vaddvq_f32(vaddq_f32(vaddq_f32(acc[t][0], acc[t][1]),                      \
                                           vaddq_f32(acc[t][2], acc[t][3])));                    \
            for (int64_t e = i; e < n; e++)                                                      \
                s += lds(w + (esize) * e) * x[e];                                                \
            out[t * ldy] = s;                                                                    \
        }                                                                                        \
    }                                                                                            \
    static float dot_##name##_neon(const void *w, const void *x, int64_t n) {                    \
        float r;                                                                                 \
        frows1_##name(w, x, 0, 1, &r, 0, n);                                                     \
        return r;                                                                                \
    }                                                                                            \
    static void gemm_##name##_neon(const void *W, size_t rb, int64_t nr, const void *X,          \
                                   size_t vb, int64_t nt, float *Y, int64_t ldy, int64_t n) {    \
        for (int64_t t = 0; t < nt; t += 4)                                                      \
            for (int64_t r = 0; r < nr; r++)                                                     \
                frows1_##name((const uint8_t *)W + (size_t)r * rb,                               \
                              (const float *)(const void *)((const uint8_t *)X + t * vb), vb,    \
                              nt - t < 4 ? (int)(nt - t) : 4, Y + t * ldy + r, ldy, n);          \
    }
FLOAT_KERNELS(f32, 4, ld_f32x8, f32s)
FLOAT_KERNELS(f16, 2, ld_f16x8, f16s)
FLOAT_KERNELS(bf16, 2, ld_bf16x8, bf16s)
#undef FLOAT_KERNELS

/* ---- gemv over scattered rows ----------------------------------------------------------
 * The table's own dot per row (bit for bit), with the next row prefetched. */
#define GEMV_IDX(name)                                                                           \
    static void gemv_idx_##name##_neon(const void *W, size_t rb, const int32_t *idx, int64_t ni, \
                                       const void *x, float *y, int64_t n) {                     \
        for (int64_t i = 0; i < ni; i++) {                                                       \
            if (i + 1 < ni)                                                                      \
                __builtin_prefetch((const uint8_t *)W + (size_t)idx[i + 1] * rb);                \
            y[idx[i]] = dot_##name##_neon((const uint8_t *)W + (size_t)idx[i] * rb, x, n);       \
        }                                                                                        \
    }
GEMV_IDX(f32)
GEMV_IDX(f16)
GEMV_IDX(bf16)
GEMV_IDX(q4_0)
GEMV_IDX(q4_1)
GEMV_IDX(q5_0)
GEMV_IDX(q5_1)
GEMV_IDX(q8_0)
GEMV_IDX(iq4_nl)
GEMV_IDX(mxfp4)
#undef GEMV_IDX

/* ---- axpy, axpy_rows, to_float -----------------------------------------------------------
 * One 32-value block (8 float registers of y) at a time: the weight block is unpacked to
 * int8 as for the dots, widened to float, and applied with the contract's exact fused
 * operations (s = a * d, vfmaq; Q4_1/Q5_1 y + fma(s, q, t)). axpy_rows keeps the 8
 * registers of y while it runs over every row, so each value sees the rows in order. */

static inline void i8_to_f32(int8x16_t q, float32x4_t f[4]) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    f[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    f[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    f[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    f[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

/* One block's 32 quants as floats (offset removed), its d and m. */
#define QBLOCK(name, bytes)                                                                      \
    static inline void qblock_##name(const uint8_t *blk, float32x4_t q[8], float *d, float *m) { \
        struct wq4 w;                                                                            \
        unpack_##name(&w, blk, 1);                                                               \
        i8_to_f32(w.lo[0], q);                                                                   \
        i8_to_f32(w.hi[0], q + 4);                                                               \
        *d = vgetq_lane_f32(w.d, 0);                                                             \
        *m = vgetq_lane_f32(w.m, 0);                                                             \
    }
QBLOCK(q4_0, 18)
QBLOCK(q4_1, 20)
QBLOCK(q5_0, 22)
QBLOCK(q5_1, 24)
QBLOCK(q8_0, 34)
QBLOCK(iq4_nl, 18)
QBLOCK(mxfp4, 17)
#undef QBLOCK

#define AXPY_Q(name, bytes, has_m)                                                               \
    static inline void ablock_##name(float32x4_t y[8], float a, const uint8_t *blk) {            \
        float32x4_t q[8];                                                                        \
        float d, m;                                                                              \
        qblock_##name(blk, q, &d, &m);                                                           \
        const float s = a * d, t = a * m;                                                        \
        for (int c = 0; c < 8; c++)                                                              \
            y[c] = has_m ? vaddq_f32(y[c], vfmaq_n_f32(vdupq_n_f32(t), q[c], s))                 \
                         : vfmaq_n_f32(y[c], q[c], s);                                           \
    }                                                                                            \
    static void axpy_##name##_neon(float *y, float a, const void *w, int64_t n) {                \
        for (int64_t b = 0; b < n / 32; b++) {                                                   \
            float32x4_t v[8];                                                                    \
            for (int c = 0; c < 8; c++)                                                          \
                v[c] = vld1q_f32(y + 32 * b + 4 * c);                                            \
            ablock_##name(v, a, (const uint8_t *)w + (size_t)b * (bytes));                       \
            for (int c = 0; c < 8; c++)                                                          \
                vst1q_f32(y + 32 * b + 4 * c, v[c]);                                             \
        }                                                                                        \
    }                                                                                            \
    static void axpy_rows_##name##_neon(float *y, const float *a, const uint8_t *const *w,       \
                                        int64_t nrows, int64_t n) {                              \
        for (int64_t b = 0; b < n / 32; b++) {                                                   \
            float32x4_t v[8];                                                                    \
            for (int c = 0; c < 8; c++)                                                          \
                v[c] = vld1q_f32(y + 32 * b + 4 * c);                                            \
            for (int64_t r = 0; r < nrows; r++)                                                  \
                ablock_##name(v, a[r], w[r] + (size_t)b * (bytes));                              \
            for (int c = 0; c < 8; c++)                                                          \
                vst1q_f32(y + 32 * b + 4 * c, v[c]);                                             \
        }                                                                                        \
    }
AXPY_Q(q4_0, 18, 0)
AXPY_Q(q4_1, 20, 1)
AXPY_Q(q5_0, 22, 0)
AXPY_Q(q5_1, 24, 1)
AXPY_Q(q8_0, 34, 0)
#undef AXPY_Q

/* to_float: d * q (+ m, a separate add: the type traits do not fuse). */
#define TO_FLOAT_Q(name, bytes, has_m)                                                           \
    static void to_float_##name##_neon(const void *src, float *dst, int64_t n) {                 \
        for (int64_t b = 0; b < n / 32; b++) {                                                   \
            float32x4_t q[8];                                                                    \
            float d, m;                                                                          \
            qblock_##name((const uint8_t *)src + (size_t)b * (bytes), q, &d, &m);                \
            for (int c = 0; c < 8; c++) {                                                        \
                float32x4_t v = vmulq_n_f32(q[c], d);                                            \
                vst1q_f32(dst + 32 * b + 4 * c, has_m ? vaddq_f32(v, vdupq_n_f32(m)) : v);       \
            }                                                                                    \
        }                                                                                        \
    }
TO_FLOAT_Q(q4_0, 18, 0)
TO_FLOAT_Q(q4_1, 20, 1)
TO_FLOAT_Q(q5_0, 22, 0)
TO_FLOAT_Q(q5_1, 24, 1)
TO_FLOAT_Q(q8_0, 34, 0)
TO_FLOAT_Q(iq4_nl, 18, 0)
TO_FLOAT_Q(mxfp4, 17, 0)
#undef TO_FLOAT_Q

/* Float rows: 8 values per step, the tail scalar with fmaf (also one rounding). */
#define AXPY_F(name, esize, ld8, lds)                                                            \
    static void axpy_##name##_neon(float *y, float a, const void *w, int64_t n) {                \
        const uint8_t *p = w;                                                                    \
        int64_t i = 0;                                                                           \
        for (; i + 8 <= n; i += 8) {                                                             \
            float32x4_t lo, hi;                                                                  \
            ld8(p + (esize) * i, &lo, &hi);                                                      \
            vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), lo, a));                              \
            vst1q_f32(y + i + 4, vfmaq_n_f32(vld1q_f32(y + i + 4), hi, a));                      \
        }                                                                                        \
        for (; i < n; i++)                                                                       \
            y[i] = fmaf(a, lds(p + (esize) * i), y[i]);                                          \
    }                                                                                            \
    static void axpy_rows_##name##_neon(float *y, const float *a, const uint8_t *const *w,       \
                                        int64_t nrows, int64_t n) {                              \
        int64_t i = 0;                                                                           \
        for (; i + 32 <= n; i += 32) {                                                           \
            float32x4_t v[8];                                                                    \
            for (int c = 0; c < 8; c++)                                                          \
                v[c] = vld1q_f32(y + i + 4 * c);                                                 \
            for (int64_t r = 0; r < nrows; r++)                                                  \
                for (int c = 0; c < 8; c += 2) {                                                 \
                    float32x4_t lo, hi;                                                          \
                    ld8(w[r] + (esize) * (i + 4 * c), &lo, &hi);                                 \
                    v[c] = vfmaq_n_f32(v[c], lo, a[r]);                                          \
                    v[c + 1] = vfmaq_n_f32(v[c + 1], hi, a[r]);                                  \
                }                                                                                \
            for (int c = 0; c < 8; c++)                                                          \
                vst1q_f32(y + i + 4 * c, v[c]);                                                  \
        }                                                                                        \
        for (; i < n; i++)                                                                       \
            for (int64_t r = 0; r < nrows; r++)                                                  \
                y[i] = fmaf(a[r], lds(w[r] + (esize) * i), y[i]);                                \
    }
AXPY_F(f32, 4, ld_f32x8, f32s)
AXPY_F(f16, 2, ld_f16x8, f16s)
AXPY_F(bf16, 2, ld_bf16x8, bf16s)
#undef AXPY_F

#define TO_FLOAT_F(name, esize, ld8, lds)                                                        \
    static void to_float_##name##_neon(const void *src, float *dst, int64_t n) {                 \
        const uint8_t *p = src;                                                                  \
        int64_t i = 0;                                                                           \
        for (; i + 8 <= n; i += 8) {                                                             \
            float32x4_t lo, hi;                                                                  \
            ld8(p + (esize) * i, &lo, &hi);                                                      \
            vst1q_f32(dst + i, lo);                                                              \
            vst1q_f32(dst + i + 4, hi);                                                          \
        }                                                                                        \
        for (; i < n; i++)                                                                       \
            dst[i] = lds(p + (esize) * i);                                                       \
    }
TO_FLOAT_F(f16, 2, ld_f16x8, f16s)
TO_FLOAT_F(bf16, 2, ld_bf16x8, bf16s)
#undef TO_FLOAT_F

/* ---- attention helpers -------------------------------------------------------------------
 * axpy_f16 keeps 32 values of y in registers across the rows; multiply, then add (the
 * contract's two roundings; C11 mode does not contract the scalar tail either). */

static void axpy_f16_attn_neon(float *y, const float *a, const void *x, size_t stride,
                               int64_t nrows, int64_t n) {
    const uint8_t *p = x;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        float32x4_t v[8];
        for (int c = 0; c < 8; c++)
            v[c] = vld1q_f32(y + i + 4 * c);
        for (int64_t r = 0; r < nrows; r++)
            for (int c = 0; c < 8; c += 2) {
                float32x4_t lo, hi;
                ld_f16x8(p + (size_t)r * stride + 2 * (i + 4 * c), &lo, &hi);
                v[c] = vaddq_f32(v[c], vmulq_n_f32(lo, a[r]));
                v[c + 1] = vaddq_f32(v[c + 1], vmulq_n_f32(hi, a[r]));
            }
        for (int c = 0; c < 8; c++)
            vst1q_f32(y + i + 4 * c, v[c]);
    }
    for (; i < n; i++)
        for (int64_t r = 0; r < nrows; r++) {
            const float prod = a[r] * f16s(p + (size_t)r * stride + 2 * i);
            y[i] = y[i] + prod;
        }
}

static void dot_f16_rows_neon(float *s, const void *x, size_t stride, int64_t nrows,
                              const float *q, int64_t n) {
    for (int64_t r = 0; r < nrows; r++)
        s[r] = dot_f16_neon((const uint8_t *)x + (size_t)r * stride, q, n);
}

/* ---- exponential activations and softmax -------------------------------------------------
 * e^x in 4 lanes: x = n ln2 + r, n = round(x log2 e), ln2 in two parts (Cody-Waite) so r
 * is exact to a few ulp; e^r = 1 + r + r^2 P(r), P Cephes' degree-5 polynomial for expf;
 * 2^n enters through the exponent bits as (2 e^r) * 2^(n-1), which keeps n = 128 finite.
 * x is clamped to [-86.5, 88.72283]: below, 0 (the contract's rule); above, +inf; NaN in
 * gives NaN out. Tails (n not a multiple of 4) go through a zeroed 4-float buffer, so
 * nothing outside n values is read or written. Arguments of the exponentials are rounded
 * as the reference rounds them (no FMA, the same order). */

static inline float32x4_t exp4(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-86.5f), hi = vdupq_n_f32(88.72283f);
    const float32x4_t xc = vminq_f32(vmaxq_f32(x, lo), hi);
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(xc, 1.44269504088896341f));
    float32x4_t r = vfmsq_f32(xc, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    /* n in -125 .. 128: n - 1 + 127 is a valid biased exponent */
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(126)), 23);
    float32x4_t y = vmulq_f32(vaddq_f32(p, p), vreinterpretq_f32_s32(e));
    y = vbslq_f32(vcltq_f32(x, lo), vdupq_n_f32(0.0f), y);
    y = vbslq_f32(vcgtq_f32(x, hi), vdupq_n_f32(INFINITY), y);
    return vbslq_f32(vceqq_f32(x, x), y, x);
}

static inline float32x4_t silu4(float32x4_t x) {
    const float32x4_t e = exp4(vnegq_f32(x));
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e));
}

static inline float32x4_t gelu4(float32x4_t x) {
    const float32x4_t c3 = vmulq_f32(vmulq_f32(vmulq_n_f32(x, 0.044715f), x), x);
    const float32x4_t v = vmulq_n_f32(vaddq_f32(x, c3), 0.7978845608028654f);
    const float32x4_t e = exp4(vmulq_n_f32(v, -2.0f));
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e));
}

static inline float32x4_t gelu_erf4(float32x4_t x) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t a = vmulq_n_f32(vabsq_f32(x), 0.7071067811865476f);
    const float32x4_t t = vdivq_f32(one, vaddq_f32(one, vmulq_n_f32(a, 0.3275911f)));
    float32x4_t poly = vfmaq_f32(vdupq_n_f32(-1.453152027f), vdupq_n_f32(1.061405429f), t);
    poly = vfmaq_f32(vdupq_n_f32(1.421413741f), poly, t);
    poly = vfmaq_f32(vdupq_n_f32(-0.284496736f), poly, t);
    poly = vfmaq_f32(vdupq_n_f32(0.254829592f), poly, t);
    poly = vmulq_f32(poly, t);
    const float32x4_t erfc_a = vmulq_f32(poly, exp4(vmulq_f32(vnegq_f32(a), a)));
    const float32x4_t c =
        vbslq_f32(vcltq_f32(x, vdupq_n_f32(0.0f)), erfc_a, vsubq_f32(vdupq_n_f32(2.0f), erfc_a));
    return vmulq_f32(vmulq_n_f32(x, 0.5f), c);
}

#define ACT_NEON(name)                                                                           \
    static void name##_neon(float *g, const float *u, int64_t n) {                               \
        int64_t i = 0;                                                                           \
        for (; i + 4 <= n; i += 4) {                                                             \
            float32x4_t y = name##4(vld1q_f32(g + i));                                           \
            if (u)                                                                               \
                y = vmulq_f32(y, vld1q_f32(u + i));                                              \
            vst1q_f32(g + i, y);                                                                 \
        }                                                                                        \
        if (i < n) {                                                                             \
            float tg[4] = {0, 0, 0, 0}, tu[4] = {0, 0, 0, 0};                                    \
            const size_t r = (size_t)(n - i) * sizeof(float);                                    \
            memcpy(tg, g + i, r);                                                                \
            float32x4_t y = name##4(vld1q_f32(tg));                                              \
            if (u) {                                                                             \
                memcpy(tu, u + i, r);                                                            \
                y = vmulq_f32(y, vld1q_f32(tu));                                                 \
            }                                                                                    \
            vst1q_f32(tg, y);                                                                    \
            memcpy(g + i, tg, r);                                                                \
        }                                                                                        \
    }
ACT_NEON(silu)
ACT_NEON(gelu)
ACT_NEON(gelu_erf)
#undef ACT_NEON

/* scale, then cap * tanh(v / cap) = cap * (1 - 2 / (e^(2v/cap) + 1)) when capped */
static inline float32x4_t capped4(float32x4_t s, float scale, float cap) {
    const float32x4_t v = vmulq_n_f32(s, scale);
    if (!(cap > 0.0f))
        return v;
    const float32x4_t u = vdivq_f32(v, vdupq_n_f32(cap));
    const float32x4_t e = exp4(vaddq_f32(u, u));
    const float32x4_t th = vsubq_f32(
        vdupq_n_f32(1.0f), vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e, vdupq_n_f32(1.0f))));
    return vmulq_n_f32(th, cap);
}

static float softmax_exp_neon(float *s, int64_t n, float scale, float cap) {
    float32x4_t mx = vdupq_n_f32(-INFINITY);
    const int64_t n4 = n / 4 * 4;
    const size_t r = (size_t)(n - n4) * sizeof(float);
    float tmp[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n4; i += 4) {
        const float32x4_t v = capped4(vld1q_f32(s + i), scale, cap);
        vst1q_f32(s + i, v);
        mx = vmaxq_f32(mx, v);
    }
    float m = vmaxvq_f32(mx);
    for (int64_t i = n4; i < n; i++) {
        memcpy(tmp, s + i, sizeof(float));
        const float v = vgetq_lane_f32(capped4(vld1q_f32(tmp), scale, cap), 0);
        s[i] = v;
        m = v > m ? v : m;
    }
    const float32x4_t vm = vdupq_n_f32(m);
    float32x4_t sum = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n4; i += 4) {
        const float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + i), vm));
        vst1q_f32(s + i, e);
        sum = vaddq_f32(sum, e);
    }
    if (r) {
        float t4[4] = {m, m, m, m};
        memcpy(t4, s + n4, r);
        float32x4_t e = exp4(vsubq_f32(vld1q_f32(t4), vm));
        vst1q_f32(t4, e);
        memset((uint8_t *)t4 + r, 0, sizeof t4 - r);
        memcpy(s + n4, t4, r);
        sum = vaddq_f32(sum, vld1q_f32(t4));
    }
    return vaddvq_f32(sum);
}

static void softcap_neon(float *x, int64_t n, float cap) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(x + i, capped4(vld1q_f32(x + i), 1.0f, cap));
    if (i < n) {
        float t[4] = {0, 0, 0, 0};
        const size_t r = (size_t)(n - i) * sizeof(float);
        memcpy(t, x + i, r);
        vst1q_f32(t, capped4(vld1q_f32(t), 1.0f, cap));
        memcpy(x + i, t, r);
    }
}

/* ---- table ---------------------------------------------------------------------------- */

void PI_NEON_ENTRY(struct pi_cpu_kernels *k) {
    k->quantize_q8_0 = quantize_q8_0_neon;
    k->quantize_q8_k = quantize_q8_k_neon;
#define SETQ(T, name)                                                                      \
    k->dot[T].dot = dot_##name##_neon;                                                     \
    k->dot[T].gemm = gemm_##name##_neon;                                                   \
    k->gemv_idx[T] = gemv_idx_##name##_neon;
    SETQ(PI_TYPE_Q4_0, q4_0)
    SETQ(PI_TYPE_Q4_1, q4_1)
    SETQ(PI_TYPE_Q5_0, q5_0)
    SETQ(PI_TYPE_Q5_1, q5_1)
    SETQ(PI_TYPE_Q8_0, q8_0)
    SETQ(PI_TYPE_ID_IQ4_NL, iq4_nl)
    SETQ(PI_TYPE_MXFP4, mxfp4)
    SETQ(PI_TYPE_F32, f32)
    SETQ(PI_TYPE_F16, f16)
    SETQ(PI_TYPE_BF16, bf16)
#undef SETQ
    k->to_float[PI_TYPE_F16] = to_float_f16_neon;
    k->to_float[PI_TYPE_BF16] = to_float_bf16_neon;
    k->to_float[PI_TYPE_Q4_0] = to_float_q4_0_neon;
    k->to_float[PI_TYPE_Q4_1] = to_float_q4_1_neon;
    k->to_float[PI_TYPE_Q5_0] = to_float_q5_0_neon;
    k->to_float[PI_TYPE_Q5_1] = to_float_q5_1_neon;
    k->to_float[PI_TYPE_Q8_0] = to_float_q8_0_neon;
    k->to_float[PI_TYPE_ID_IQ4_NL] = to_float_iq4_nl_neon;
    k->to_float[PI_TYPE_MXFP4] = to_float_mxfp4_neon;
#define SETA(T, name)                                                                      \
    k->axpy[T] = axpy_##name##_neon;                                                       \
    k->axpy_rows[T] = axpy_rows_##name##_neon;
    SETA(PI_TYPE_F32, f32)
    SETA(PI_TYPE_F16, f16)
    SETA(PI_TYPE_BF16, bf16)
    SETA(PI_TYPE_Q4_0, q4_0)
    SETA(PI_TYPE_Q4_1, q4_1)
    SETA(PI_TYPE_Q5_0, q5_0)
    SETA(PI_TYPE_Q5_1, q5_1)
    SETA(PI_TYPE_Q8_0, q8_0)
#undef SETA
    k->axpy_f16 = axpy_f16_attn_neon;
    k->dot_f16_rows = dot_f16_rows_neon;
    k->silu = silu_neon;
    k->gelu = gelu_neon;
    k->gelu_erf = gelu_erf_neon;
    k->softmax_exp = softmax_exp_neon;
    k->softcap = softcap_neon;
}
