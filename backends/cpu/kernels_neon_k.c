/* kernels_neon_k.c -- ARM64 NEON overrides for the K-quants (Q2_K..Q6_K) and IQ4_XS:
 * dots, gemms and gemv_idx against PI_VEC_Q8_K activations, and to_float. Compiled twice
 * like kernels_neon.c: plain ARMv8-A, and with PI_NEON_DOTPROD and +dotprod, where the
 * int8 dot products are SDOT (vdotq_s32).
 *
 * A super-block of weights is decoded once into 16 registers of 16 int8 quants in value
 * order (q[g] = values 16g..16g+15; signed, as SDOT and vmull_s8 take them: Q6_K's
 * v - 32 and Q3_K's -4..3 as they are, IQ4_XS's grid values) plus its integer scales,
 * and the decoded registers are dotted with up to GEMM_TILE activation vectors (prefill
 * reuses each weight load; decode is the same code with one vector). Per token and
 * super-block the integer sums are exact -- the per-group dots, times the group scale,
 * summed in int32 lanes -- and the mins (Q2_K, Q4_K, Q5_K) go through the activation's
 * 16-value sums. The tokens' integer sums are reduced together (token t in lane t), and
 * each lane then takes the reference's own float expression, d*dx*isum (- dmin*dx*msum),
 * added super-block after super-block: the same integers and the same float operations
 * (no multiply-add contraction: GCC in C11 mode, clang by pragma), hence bit for bit the
 * reference, and gemm gives exactly dot (both run the one inline kernel).
 *
 * Without SDOT an int8 dot of 16 values is vmull_s8 + vmlal_s8 (pairs of products in
 * int16: at most 2 * 127 * 127 = 32258 for IQ4_XS, less for the other types) and
 * vpadalq_s16 into int32 lanes. Lane sums differ from SDOT's, their total does not.
 * int32 range: |isum| <= 256 values * 32 * 127 * 128 (Q6_K) ~ 1.3e8. */
#include <arm_neon.h>

#include "kernels.h"

#include "runtime/fp16.h"

#include <string.h>

/* clang contracts a*b+c within an expression by default, even in ISO mode: that would
 * break the bit-exact float steps (GCC in C11 mode does not contract) */
#if defined(__clang__)
#  pragma STDC FP_CONTRACT OFF
#endif

#if defined(PI_NEON_DOTPROD)
#  define PI_NEON_K_ENTRY pi_cpu_kernels_neon_k_dotprod
#  define NAME(f)         f##_neon_dotprod
#else
#  define PI_NEON_K_ENTRY pi_cpu_kernels_neon_k
#  define NAME(f)         f##_neon
#endif

#define INLINE static inline __attribute__((always_inline))
/* Short fixed loops over registers must be unrolled for the arrays to live in them. */
#define UNROLL _Pragma("GCC unroll 16")

#define GEMM_TILE 4 /* tokens per decoded super-block */

/* ---- helpers -------------------------------------------------------------------------- */

INLINE float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return pi_fp16_to_fp32(h);
}

/* Views of super-block b of a PI_VEC_Q8_K vector of nb super-blocks (kernels.h). */
INLINE const int8_t *xk_q(const uint8_t *x, int64_t b) {
    return (const int8_t *)x + 256 * b;
}
INLINE const int16_t *xk_bsum(const uint8_t *x, int64_t nb, int64_t b) {
    return (const int16_t *)(const void *)(x + 256 * nb) + 16 * b;
}
INLINE float xk_d(const uint8_t *x, int64_t nb, int64_t b) {
    float d;
    memcpy(&d, x + 288 * nb + 4 * b, 4);
    return d;
}

/* acc + the products a*b summed into int32 lanes (4 consecutive bytes per lane with
 * SDOT; the emulation's lanes hold other products, with the same total). */
INLINE int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    int16x8_t p = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    p = vmlal_s8(p, vget_high_s8(a), vget_high_s8(b));
    return vpadalq_s16(acc, p);
#endif
}

/* Per byte: val where bit `bit` of h is set, else 0 (a quant's high bit moved to where
 * it belongs, whichever bit of h holds it). */
INLINE uint8x16_t bit_to(uint8x16_t h, int bit, uint8_t val) {
    return vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(1u << bit))), vdupq_n_u8(val));
}

/* One decoded super-block. q: the 256 quants in value order. sc: the integer scale of
 * each 16 values, 4 per register (types with 32-value sub-blocks, per32(): of each 32,
 * in sc[0..1]). mn: the int16 vectors dotted with the activation's bsums: the mins
 * (Q2_K per 16 values in mn[0..1]; Q4_K, Q5_K per 32 values in mn[0], dotted with the
 * bsums added in pairs), subtracted times dmin; unused for the other types. */
struct kblock {
    int8x16_t q[16];
    int32x4_t sc[4];
    int16x8_t mn[2];
    float d, dmin;
};

/* The 16 int16 scales s0 (0-7), s1 (8-15) as int32 sc[0..3]. */
INLINE void widen_scales(int16x8_t s0, int16x8_t s1, int32x4_t sc[4]) {
    sc[0] = vmovl_s16(vget_low_s16(s0));
    sc[1] = vmovl_s16(vget_high_s16(s0));
    sc[2] = vmovl_s16(vget_low_s16(s1));
    sc[3] = vmovl_s16(vget_high_s16(s1));
}

/* ---- decoders ------------------------------------------------------------------------- */

/* Q4_K/Q5_K 12 packed bytes -> out = sc[0..7] | mn[0..7] (6 bits each), on 32-bit words
 * (little-endian, as every ARM64 Linux and macOS target is):
 * sc[0..3] = s0-3 & 63, mn[0..3] = s4-7 & 63, sc[4..7] = (s8-11 & 15) | (s0-3 >> 6) << 4,
 * mn[4..7] = (s8-11 >> 4) | (s4-7 >> 6) << 4. */
INLINE void k4_scales(const uint8_t *s, uint8_t out[16]) {
    uint32_t a, b, c, w[4];
    memcpy(&a, s, 4);
    memcpy(&b, s + 4, 4);
    memcpy(&c, s + 8, 4);
    w[0] = a & 0x3f3f3f3fu;
    w[1] = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
    w[2] = b & 0x3f3f3f3fu;
    w[3] = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
    memcpy(out, w, 16);
}

/* Q4_K (144 B: d | dmin | scales[12] | qs[128]) and Q5_K (176 B: ... | qh[32] | qs):
 * sub-block 2j is the low nibbles of qs[32j..32j+31], 2j+1 the high ones; bit s of
 * qh[l] is bit 4 of value l of sub-block s (vtst picks it out). A min serves 32 values:
 * k_ints adds the bsums in pairs. */
INLINE void k45_decode(const uint8_t *blk, const uint8_t *qh, const uint8_t *qs,
                       struct kblock *kb) {
    const uint8x16_t m4 = vdupq_n_u8(15);
    uint8_t sm[16];
    uint8x16_t h0 = vdupq_n_u8(0), h1 = vdupq_n_u8(0);
    k4_scales(blk + 4, sm);
    if (qh) {
        h0 = vld1q_u8(qh);
        h1 = vld1q_u8(qh + 16);
    }
    UNROLL
    for (int j = 0; j < 4; j++) {
        const uint8x16_t a = vld1q_u8(qs + 32 * j), b = vld1q_u8(qs + 32 * j + 16);
        uint8x16_t q0 = vandq_u8(a, m4), q1 = vandq_u8(b, m4);
        uint8x16_t q2 = vshrq_n_u8(a, 4), q3 = vshrq_n_u8(b, 4);
        if (qh) {
            q0 = vorrq_u8(q0, bit_to(h0, 2 * j, 16));
            q1 = vorrq_u8(q1, bit_to(h1, 2 * j, 16));
            q2 = vorrq_u8(q2, bit_to(h0, 2 * j + 1, 16));
            q3 = vorrq_u8(q3, bit_to(h1, 2 * j + 1, 16));
        }
        kb->q[4 * j] = vreinterpretq_s8_u8(q0);
        kb->q[4 * j + 1] = vreinterpretq_s8_u8(q1);
        kb->q[4 * j + 2] = vreinterpretq_s8_u8(q2);
        kb->q[4 * j + 3] = vreinterpretq_s8_u8(q3);
    }
    const int16x8_t sc = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm)));
    widen_scales(sc, sc, kb->sc); /* sc[2..3] unused */
    kb->mn[0] = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8))); /* mins 0..7 */
    kb->mn[1] = vdupq_n_s16(0);
    kb->d = f16_at(blk);
    kb->dmin = f16_at(blk + 2);
}

/* Q6_K, 210 B: ql[128] | qh[64] | int8 scales[16] | d. Value e = 128h + 16k + i (half h,
 * k = 0..7): low nibble (k < 4) or high nibble of ql[64h + 16(k%4) + i], bits 2(k/2)..
 * of qh[32h + 16(k%2) + i] as bits 4-5; minus 32 in the register (-32..31). */
INLINE void q6_k_decode(const uint8_t *blk, struct kblock *kb) {
    const uint8x16_t m4 = vdupq_n_u8(15), m30 = vdupq_n_u8(0x30);
    UNROLL
    for (int h = 0; h < 2; h++) {
        uint8x16_t l[4], qh[2];
        UNROLL
        for (int j = 0; j < 4; j++)
            l[j] = vld1q_u8(blk + 64 * h + 16 * j);
        qh[0] = vld1q_u8(blk + 128 + 32 * h);
        qh[1] = vld1q_u8(blk + 128 + 32 * h + 16);
        UNROLL
        for (int k = 0; k < 8; k++) {
            const uint8x16_t lo = k < 4 ? vandq_u8(l[k % 4], m4) : vshrq_n_u8(l[k % 4], 4);
            uint8x16_t hi;
            switch (k / 2) { /* bits 2(k/2)..2(k/2)+1 to bits 4-5 */
            case 0:
                hi = vshlq_n_u8(qh[k % 2], 4);
                break;
            case 1:
                hi = vshlq_n_u8(qh[k % 2], 2);
                break;
            case 2:
                hi = qh[k % 2];
                break;
            default:
                hi = vshrq_n_u8(qh[k % 2], 2);
                break;
            }
            kb->q[8 * h + k] =
                vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vandq_u8(hi, m30))), vdupq_n_s8(32));
        }
    }
    const int8x16_t sc = vld1q_s8((const int8_t *)(blk + 192));
    widen_scales(vmovl_s8(vget_low_s8(sc)), vmovl_s8(vget_high_s8(sc)), kb->sc);
    kb->mn[0] = kb->mn[1] = vdupq_n_s16(0); /* unused */
    kb->d = f16_at(blk + 208);
    kb->dmin = 0.0f;
}

/* Q2_K, 84 B: scales[16] | qs[64] | d | dmin. Value e = 128h + 16k + i: bits 2(k/2).. of
 * qs[32h + 16(k%2) + i]; scales[g] = scale (low nibble) | min (high nibble) of group g. */
INLINE void q2_k_decode(const uint8_t *blk, struct kblock *kb) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    UNROLL
    for (int h = 0; h < 2; h++) {
        const uint8x16_t q0 = vld1q_u8(blk + 16 + 32 * h), q1 = vld1q_u8(blk + 32 + 32 * h);
        kb->q[8 * h + 0] = vreinterpretq_s8_u8(vandq_u8(q0, m3));
        kb->q[8 * h + 1] = vreinterpretq_s8_u8(vandq_u8(q1, m3));
        kb->q[8 * h + 2] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q0, 2), m3));
        kb->q[8 * h + 3] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q1, 2), m3));
        kb->q[8 * h + 4] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q0, 4), m3));
        kb->q[8 * h + 5] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(q1, 4), m3));
        kb->q[8 * h + 6] = vreinterpretq_s8_u8(vshrq_n_u8(q0, 6));
        kb->q[8 * h + 7] = vreinterpretq_s8_u8(vshrq_n_u8(q1, 6));
    }
    const uint8x16_t sb = vld1q_u8(blk);
    const uint8x16_t mins = vshrq_n_u8(sb, 4), scs = vandq_u8(sb, vdupq_n_u8(15));
    widen_scales(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(scs))),
                 vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(scs))), kb->sc);
    kb->mn[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
    kb->mn[1] = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(mins)));
    kb->d = f16_at(blk + 80);
    kb->dmin = f16_at(blk + 82);
}

/* Q3_K, 110 B: hmask[32] | qs[64] | scales[12] | d. The low 2 bits as Q2_K's (qs at 32),
 * plus 4 where bit g/2 of hmask[16(g%2) + i] is set, minus 4: the quant in -4..3. Scale g:
 * low 4 bits from byte g%8 (low nibble for g < 8), high 2 from byte 8 + g%4, bits
 * 2(g/4); minus 32. */
INLINE void q3_k_decode(const uint8_t *blk, struct kblock *kb) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    const uint8x16_t hm0 = vld1q_u8(blk), hm1 = vld1q_u8(blk + 16);
    UNROLL
    for (int h = 0; h < 2; h++) {
        const uint8x16_t q0 = vld1q_u8(blk + 32 + 32 * h), q1 = vld1q_u8(blk + 48 + 32 * h);
        uint8x16_t v[8];
        v[0] = vandq_u8(q0, m3);
        v[1] = vandq_u8(q1, m3);
        v[2] = vandq_u8(vshrq_n_u8(q0, 2), m3);
        v[3] = vandq_u8(vshrq_n_u8(q1, 2), m3);
        v[4] = vandq_u8(vshrq_n_u8(q0, 4), m3);
        v[5] = vandq_u8(vshrq_n_u8(q1, 4), m3);
        v[6] = vshrq_n_u8(q0, 6);
        v[7] = vshrq_n_u8(q1, 6);
        UNROLL
        for (int k = 0; k < 8; k++) {
            const int g = 8 * h + k;
            const uint8x16_t q = vorrq_u8(v[k], bit_to(g % 2 ? hm1 : hm0, g / 2, 4));
            kb->q[g] = vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(4));
        }
    }
    const uint8_t *s = blk + 96;
    int16_t sw[16];
    UNROLL
    for (int g = 0; g < 16; g++) {
        const int lo = (s[g % 8] >> (4 * (g / 8))) & 15, hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
        sw[g] = (int16_t)((lo | (hi << 4)) - 32);
    }
    widen_scales(vld1q_s16(sw), vld1q_s16(sw + 8), kb->sc);
    kb->mn[0] = kb->mn[1] = vdupq_n_s16(0); /* unused */
    kb->d = f16_at(blk + 108);
    kb->dmin = 0.0f;
}

/* IQ4_XS, 136 B: d | scales_h u16 | scales_l[4] | qs[128]. Sub-block s: the grid values
 * (signed) of the low nibbles of qs[16s..16s+15], then of the high ones, one vqtbl1q
 * lookup each; scale: nibble s of scales_l, bits 2s..2s+1 of scales_h, minus 32. */
INLINE void iq4_xs_decode(const uint8_t *blk, struct kblock *kb) {
    const int8x16_t grid = vld1q_s8(pi_iq4_grid);
    const uint8x16_t m4 = vdupq_n_u8(15);
    const unsigned sh = (unsigned)blk[2] | ((unsigned)blk[3] << 8);
    int32_t ls[8];
    UNROLL
    for (int s = 0; s < 8; s++) {
        const uint8x16_t q = vld1q_u8(blk + 8 + 16 * s);
        kb->q[2 * s] = vqtbl1q_s8(grid, vandq_u8(q, m4));
        kb->q[2 * s + 1] = vqtbl1q_s8(grid, vshrq_n_u8(q, 4));
        const unsigned lo = (blk[4 + s / 2] >> (4 * (s % 2))) & 15u, hi = (sh >> (2 * s)) & 3u;
        ls[s] = (int32_t)(lo | (hi << 4)) - 32;
    }
    kb->sc[0] = vld1q_s32(ls);
    kb->sc[1] = vld1q_s32(ls + 4);
    kb->sc[2] = kb->sc[3] = vdupq_n_s32(0); /* unused */
    kb->mn[0] = vdupq_n_s16(0);
    kb->mn[1] = vdupq_n_s16(0);
    kb->d = f16_at(blk);
    kb->dmin = 0.0f;
}

INLINE void k_decode(int type, const uint8_t *blk, struct kblock *kb) {
    switch (type) {
    case PI_TYPE_Q2_K:
        q2_k_decode(blk, kb);
        break;
    case PI_TYPE_Q3_K:
        q3_k_decode(blk, kb);
        break;
    case PI_TYPE_ID_IQ4_XS:
        iq4_xs_decode(blk, kb);
        break;
    case PI_TYPE_Q4_K:
        k45_decode(blk, NULL, blk + 16, kb);
        break;
    case PI_TYPE_Q5_K:
        k45_decode(blk, blk + 16, blk + 48, kb);
        break;
    default:
        q6_k_decode(blk, kb);
        break;
    }
}

INLINE size_t k_block_bytes(int type) {
    switch (type) {
    case PI_TYPE_Q2_K:
        return 84;
    case PI_TYPE_Q3_K:
        return 110;
    case PI_TYPE_Q4_K:
        return 144;
    case PI_TYPE_Q5_K:
        return 176;
    case PI_TYPE_ID_IQ4_XS:
        return 136;
    default:
        return 210;
    }
}

/* 32-value sub-blocks: one scale per two groups. */
INLINE int per32(int type) {
    return type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K || type == PI_TYPE_ID_IQ4_XS;
}

/* The four lane sums of a, b, c, e in one register (pairwise adds, no serial chain). */
INLINE int32x4_t sum4(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t e) {
    return vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, e));
}

/* The integer part of one decoded super-block dotted with activations xq [256] and
 * bsum [16]: lanes 0+1 sum to isum = sum_g sc[g] * dot(q[g], x[g]), lanes 2+3 to
 * aux = mn . bsums (kernels_ref.c's msum for the types with mins, else 0). The group
 * dots are gathered four to a register and multiplied by four scales at once: two
 * short multiply-add chains instead of one per group (one token's dot would wait on a
 * chain of 16 multiply-adds). */
INLINE int32x4_t k_ints(int type, const struct kblock *kb, const int8_t *xq, const int16_t *bsum) {
    int32x4_t iv, av = vdupq_n_s32(0);
    if (per32(type)) {
        int32x4_t p[8];
        UNROLL
        for (int s = 0; s < 8; s++) {
            p[s] = dot16(vdupq_n_s32(0), kb->q[2 * s], vld1q_s8(xq + 32 * s));
            p[s] = dot16(p[s], kb->q[2 * s + 1], vld1q_s8(xq + 32 * s + 16));
        }
        iv = vmlaq_s32(vmulq_s32(sum4(p[0], p[1], p[2], p[3]), kb->sc[0]),
                       sum4(p[4], p[5], p[6], p[7]), kb->sc[1]);
    } else {
        int32x4_t p[16];
        UNROLL
        for (int g = 0; g < 16; g++)
            p[g] = dot16(vdupq_n_s32(0), kb->q[g], vld1q_s8(xq + 16 * g));
        const int32x4_t i0 = vmlaq_s32(vmulq_s32(sum4(p[0], p[1], p[2], p[3]), kb->sc[0]),
                                       sum4(p[4], p[5], p[6], p[7]), kb->sc[1]);
        const int32x4_t i1 = vmlaq_s32(vmulq_s32(sum4(p[8], p[9], p[10], p[11]), kb->sc[2]),
                                       sum4(p[12], p[13], p[14], p[15]), kb->sc[3]);
        iv = vaddq_s32(i0, i1);
    }
    if (type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K) {
        /* the bsums of each 32 values: |b| <= 2 * 16 * 127, no int16 overflow */
        const int16x8_t bs = vpaddq_s16(vld1q_s16(bsum), vld1q_s16(bsum + 8));
        av = vmull_s16(vget_low_s16(kb->mn[0]), vget_low_s16(bs));
        av = vmlal_s16(av, vget_high_s16(kb->mn[0]), vget_high_s16(bs));
    } else if (type == PI_TYPE_Q2_K) {
        av = vmull_s16(vget_low_s16(kb->mn[0]), vld1_s16(bsum));
        av = vmlal_s16(av, vget_high_s16(kb->mn[0]), vld1_s16(bsum + 4));
        av = vmlal_s16(av, vget_low_s16(kb->mn[1]), vld1_s16(bsum + 8));
        av = vmlal_s16(av, vget_high_s16(kb->mn[1]), vld1_s16(bsum + 12));
    }
    return vpaddq_s32(iv, av);
}

/* out[t] = dot(row, token t) for tt <= GEMM_TILE tokens vb bytes apart: each
 * super-block decoded once for all of them. Token t lives in lane t: the integer sums
 * of the tokens are reduced together, then each lane takes the reference's float
 * expression, d*dx*isum (- dmin*dx*aux), and is added to its accumulator, super-block
 * after super-block. */
INLINE void row_tokens(int type, const uint8_t *row, int64_t nb, const uint8_t *x, size_t vb,
                       int tt, float *out) {
    const int has_min = type == PI_TYPE_Q2_K || type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float res[GEMM_TILE];
    for (int64_t b = 0; b < nb; b++) {
        struct kblock kb;
        int32x4_t r[GEMM_TILE];
        float dx[GEMM_TILE];
        k_decode(type, row + (size_t)b * k_block_bytes(type), &kb);
        UNROLL
        for (int t = 0; t < GEMM_TILE; t++) {
            const uint8_t *xt = x + (size_t)t * vb;
            r[t] = t < tt ? k_ints(type, &kb, xk_q(xt, b), xk_bsum(xt, nb, b)) : vdupq_n_s32(0);
            dx[t] = t < tt ? xk_d(xt, nb, b) : 0.0f;
        }
        /* r[t] = [isum, aux] in pairs of lanes -> isum and aux of token t in lane t */
        const int32x4_t r01 = vpaddq_s32(r[0], r[1]), r23 = vpaddq_s32(r[2], r[3]);
        const int32x4_t is = vuzp1q_s32(r01, r23), as = vuzp2q_s32(r01, r23);
        const float32x4_t dxv = vld1q_f32(dx);
        float32x4_t c = vmulq_f32(vmulq_n_f32(dxv, kb.d), vcvtq_f32_s32(is));
        if (has_min)
            c = vsubq_f32(c, vmulq_f32(vmulq_n_f32(dxv, kb.dmin), vcvtq_f32_s32(as)));
        acc = vaddq_f32(acc, c);
    }
    vst1q_f32(res, acc);
    for (int t = 0; t < tt; t++)
        out[t] = res[t];
}

INLINE float k_dot(int type, const void *w, const void *x, int64_t n) {
    float s;
    row_tokens(type, w, n / 256, x, 0, 1, &s);
    return s;
}

/* Token tiles outside, rows inside: a tile's activations stay in cache across rows. */
INLINE void k_gemm(int type, const void *W, size_t rb, int64_t nr, const void *X, size_t vb,
                   int64_t nt, float *Y, int64_t ldy, int64_t n) {
    for (int64_t t0 = 0; t0 < nt; t0 += GEMM_TILE) {
        const int tt = nt - t0 < GEMM_TILE ? (int)(nt - t0) : GEMM_TILE;
        const uint8_t *xt = (const uint8_t *)X + (size_t)t0 * vb;
        for (int64_t r = 0; r < nr; r++) {
            const uint8_t *row = (const uint8_t *)W + (size_t)r * rb;
            float out[GEMM_TILE];
            /* a constant count for full tiles: no per-token tests, fewer spills */
            if (tt == GEMM_TILE)
                row_tokens(type, row, n / 256, xt, vb, GEMM_TILE, out);
            else
                row_tokens(type, row, n / 256, xt, vb, tt, out);
            for (int t = 0; t < tt; t++)
                Y[(t0 + t) * ldy + r] = out[t];
        }
    }
}

/* The decode case of a sparse matmul: y[idx[i]] = dot(row idx[i], x), rows in list
 * order by the dot's own kernel (so bit for bit dot), with the row PREFETCH_AHEAD
 * further down the list requested meanwhile: scattered rows defeat the hardware
 * prefetcher. */
#define PREFETCH_AHEAD 8
INLINE void prefetch_row(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64)
        __builtin_prefetch(p + o, 0, 2);
}

INLINE void k_gemv_idx(int type, const void *W, size_t rb, const int32_t *idx, int64_t ni,
                       const void *X, float *Y, int64_t n) {
    const uint8_t *w = W;
    for (int64_t i = 0; i < ni && i < PREFETCH_AHEAD; i++)
        prefetch_row(w + (size_t)idx[i] * rb, rb);
    for (int64_t i = 0; i < ni; i++) {
        if (i + PREFETCH_AHEAD < ni)
            prefetch_row(w + (size_t)idx[i + PREFETCH_AHEAD] * rb, rb);
        Y[idx[i]] = k_dot(type, w + (size_t)idx[i] * rb, X, n);
    }
}

/* ---- to_float ------------------------------------------------------------------------- */

/* Dequantizes one row with the dot's decoder: per 16 values the quant times the group's
 * float scale, less its float min, as the
 * separate float operations of dequant.c (ds = d * scale, dm = dmin * min, ds * q - dm):
 * bit for bit pi_dequant_*. */
INLINE void k_to_float(int type, const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int has_min = type == PI_TYPE_Q2_K || type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K;
    for (int64_t i = 0; i < n / 256; i++, b += k_block_bytes(type), dst += 256) {
        struct kblock kb;
        int16_t mn[16];
        int32_t sc[16];
        k_decode(type, b, &kb);
        vst1q_s16(mn, kb.mn[0]);
        vst1q_s16(mn + 8, kb.mn[1]);
        for (int j = 0; j < 4; j++)
            vst1q_s32(sc + 4 * j, kb.sc[j]);
        UNROLL
        for (int g = 0; g < 16; g++) {
            const int8x16_t q = kb.q[g];
            const int e = per32(type) ? g / 2 : g; /* the scale's (and min's) index */
            const float ds = kb.d * (float)sc[e];
            const float dm = has_min ? kb.dmin * (float)mn[e] : 0.0f;
            const int16x8_t w[2] = {vmovl_s8(vget_low_s8(q)), vmovl_s8(vget_high_s8(q))};
            UNROLL
            for (int j = 0; j < 4; j++) {
                const int32x4_t v = j % 2 ? vmovl_s16(vget_high_s16(w[j / 2]))
                                          : vmovl_s16(vget_low_s16(w[j / 2]));
                float32x4_t f = vmulq_f32(vdupq_n_f32(ds), vcvtq_f32_s32(v));
                if (has_min)
                    f = vsubq_f32(f, vdupq_n_f32(dm));
                vst1q_f32(dst + 16 * g + 4 * j, f);
            }
        }
    }
}

#define K_KERNELS(name, type)                                                                  \
    static float NAME(dot_##name)(const void *w, const void *x, int64_t n) {                   \
        return k_dot(type, w, x, n);                                                           \
    }                                                                                          \
    static void NAME(gemm_##name)(const void *W, size_t rb, int64_t nr, const void *X,         \
                                  size_t vb, int64_t nt, float *Y, int64_t ldy, int64_t n) {   \
        k_gemm(type, W, rb, nr, X, vb, nt, Y, ldy, n);                                         \
    }                                                                                          \
    static void NAME(gemv_idx_##name)(const void *W, size_t rb, const int32_t *idx, int64_t ni,\
                                      const void *X, float *Y, int64_t n) {                    \
        k_gemv_idx(type, W, rb, idx, ni, X, Y, n);                                             \
    }                                                                                          \
    static void NAME(to_float_##name)(const void *src, float *dst, int64_t n) {                \
        k_to_float(type, src, dst, n);                                                         \
    }
K_KERNELS(q4_k, PI_TYPE_Q4_K)
K_KERNELS(q6_k, PI_TYPE_Q6_K)
K_KERNELS(q5_k, PI_TYPE_Q5_K)
K_KERNELS(q3_k, PI_TYPE_Q3_K)
K_KERNELS(q2_k, PI_TYPE_Q2_K)
K_KERNELS(iq4_xs, PI_TYPE_ID_IQ4_XS)
#undef K_KERNELS

static void set(struct pi_cpu_kernels *k, int type, pi_dot_fn dot, pi_gemm_fn gemm,
                pi_gemv_idx_fn gemv_idx, pi_to_float_fn to_float) {
    k->dot[type].dot = dot;
    k->dot[type].gemm = gemm;
    k->gemv_idx[type] = gemv_idx;
    k->to_float[type] = to_float;
}

void PI_NEON_K_ENTRY(struct pi_cpu_kernels *k) {
    set(k, PI_TYPE_Q4_K, NAME(dot_q4_k), NAME(gemm_q4_k), NAME(gemv_idx_q4_k),
        NAME(to_float_q4_k));
    set(k, PI_TYPE_Q6_K, NAME(dot_q6_k), NAME(gemm_q6_k), NAME(gemv_idx_q6_k),
        NAME(to_float_q6_k));
    set(k, PI_TYPE_Q5_K, NAME(dot_q5_k), NAME(gemm_q5_k), NAME(gemv_idx_q5_k),
        NAME(to_float_q5_k));
    set(k, PI_TYPE_Q3_K, NAME(dot_q3_k), NAME(gemm_q3_k), NAME(gemv_idx_q3_k),
        NAME(to_float_q3_k));
    set(k, PI_TYPE_Q2_K, NAME(dot_q2_k), NAME(gemm_q2_k), NAME(gemv_idx_q2_k),
        NAME(to_float_q2_k));
    set(k, PI_TYPE_ID_IQ4_XS, NAME(dot_iq4_xs), NAME(gemm_iq4_xs), NAME(gemv_idx_iq4_xs),
        NAME(to_float_iq4_xs));
}
