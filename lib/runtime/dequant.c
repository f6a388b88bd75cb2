/* dequant.c -- scalar reference dequantizers.
 *
 * Blocks are little-endian byte arrays with no alignment guarantee, so every
 * multi-byte field is assembled from bytes. Every product and sum is a separate
 * float operation in the same order as the gguf package's numpy reference
 * (tests/fixtures/gen_quant_fixtures.py), so results are bit-exact as long as the
 * compiler does not contract a*b+c into an FMA (ISO C mode: GCC does not; clang
 * is told not to below). */
#include "runtime/types.h"

#include "runtime/fp16.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK 32   /* weights per block, legacy quants */
#define QK_K 256 /* weights per super-block, K-quants */

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static float rdf16(const uint8_t *p) {
    return pi_fp16_to_fp32(rd16(p));
}

/* two's complement byte without implementation-defined conversion */
static int s8(uint8_t b) {
    return (int)b - ((int)(b & 0x80u) << 1);
}

void pi_dequant_f32(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = pi_bits_to_fp32(rd32(p + 4 * i));
}

void pi_dequant_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = pi_fp16_to_fp32(rd16(p + 2 * i));
}

void pi_dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = pi_bf16_to_fp32(rd16(p + 2 * i));
}

/* Q4_0, 18 B: d f16 | qs[16]; qs[j] low nibble -> j, high -> j+16; x = (q-8)*d */
void pi_dequant_q4_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 18, dst += QK) {
        float d = rdf16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = d * (float)((qs[j] & 0x0f) - 8);
            dst[j + QK / 2] = d * (float)((qs[j] >> 4) - 8);
        }
    }
}

/* Q4_1, 20 B: d f16 | m f16 | qs[16]; x = q*d + m */
void pi_dequant_q4_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 20, dst += QK) {
        float d = rdf16(b), m = rdf16(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < QK / 2; j++) {
            float lo = d * (float)(qs[j] & 0x0f);
            float hi = d * (float)(qs[j] >> 4);
            dst[j] = lo + m;
            dst[j + QK / 2] = hi + m;
        }
    }
}

/* Q5_0, 22 B: d f16 | qh u32 LE (bit j = bit 4 of element j) | qs[16];
 * x = (q-16)*d */
void pi_dequant_q5_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 22, dst += QK) {
        float d = rdf16(b);
        uint32_t qh = rd32(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < QK / 2; j++) {
            int lo = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = d * (float)(lo - 16);
            dst[j + QK / 2] = d * (float)(hi - 16);
        }
    }
}

/* Q5_1, 24 B: d f16 | m f16 | qh u32 LE | qs[16]; x = q*d + m */
void pi_dequant_q5_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 24, dst += QK) {
        float d = rdf16(b), m = rdf16(b + 2);
        uint32_t qh = rd32(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < QK / 2; j++) {
            int lo = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            float plo = d * (float)lo;
            float phi = d * (float)hi;
            dst[j] = plo + m;
            dst[j + QK / 2] = phi + m;
        }
    }
}

/* Q8_0, 34 B: d f16 | int8 qs[32]; x = q*d */
void pi_dequant_q8_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 34, dst += QK) {
        float d = rdf16(b);
        for (int j = 0; j < QK; j++)
            dst[j] = d * (float)s8(b[2 + j]);
    }
}

/* The 12 scale bytes of Q4_K/Q5_K hold eight 6-bit scales and eight 6-bit mins:
 * j < 4: sc = s[j] & 63, min = s[j+4] & 63;
 * j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
 *         min = (s[j+4] >> 4) | (s[j] >> 6) << 4. */
static void scale_min_k4(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K, 144 B: d f16 | dmin f16 | scales[12] | qs[128]. Sub-block s (32 weights)
 * of the 8: group g = s/2 uses qs[32g .. 32g+31], low nibble for even s, high
 * nibble for odd s. x = (d*sc[s])*q - (dmin*min[s]). */
void pi_dequant_q4_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 144, dst += QK_K) {
        float d = rdf16(b), dmin = rdf16(b + 2);
        const uint8_t *sc = b + 4;
        const uint8_t *qs = b + 16;
        for (int s = 0; s < 8; s++) {
            int isc, imn;
            scale_min_k4(sc, s, &isc, &imn);
            float ds = d * (float)isc;
            float dm = dmin * (float)imn;
            const uint8_t *q = qs + 32 * (s / 2);
            int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++) {
                float p = ds * (float)((q[l] >> shift) & 0x0f);
                dst[32 * s + l] = p - dm;
            }
        }
    }
}

/* Q5_K, 176 B: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]. Low 4 bits as in
 * Q4_K; bit 4 of weight l of sub-block s is bit s of qh[l]. */
void pi_dequant_q5_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 176, dst += QK_K) {
        float d = rdf16(b), dmin = rdf16(b + 2);
        const uint8_t *sc = b + 4;
        const uint8_t *qh = b + 16;
        const uint8_t *qs = b + 48;
        for (int s = 0; s < 8; s++) {
            int isc, imn;
            scale_min_k4(sc, s, &isc, &imn);
            float ds = d * (float)isc;
            float dm = dmin * (float)imn;
            const uint8_t *q = qs + 32 * (s / 2);
            int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0x0f) | (((qh[l] >> s) & 1) << 4);
                float p = ds * (float)v;
                dst[32 * s + l] = p - dm;
            }
        }
    }
}

/* Q6_K, 210 B: ql[128] | qh[64] | int8 scales[16] | d f16. Weight e (0..255):
 * h = e/128, r = e%128; low 4 bits: ql[64h + r%64] nibble r/64 (0 low, 1 high);
 * high 2 bits: qh[32h + r%32] bits 2*(r/32); q = v - 32;
 * x = (d*scales[e/16]) * q. */
void pi_dequant_q6_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 210, dst += QK_K) {
        const uint8_t *ql = b;
        const uint8_t *qh = b + 128;
        const uint8_t *scales = b + 192;
        float d = rdf16(b + 208);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, r = e % 128;
            int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
            int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
            float ds = d * (float)s8(scales[e / 16]);
            dst[e] = ds * (float)((lo | (hi << 4)) - 32);
        }
    }
}

/* Q2_K, 84 B: scales[16] | qs[64] | d f16 | dmin f16. Weight e (0..255): h = e/128,
 * r = e%128; q = (qs[32h + r%32] >> 2*(r/32)) & 3; scale byte g = e/16: low nibble
 * the scale, high nibble the min. x = (d*sc)*q - (dmin*mn). */
void pi_dequant_q2_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 84, dst += QK_K) {
        const uint8_t *sc = b, *qs = b + 16;
        float d = rdf16(b + 80), dmin = rdf16(b + 82);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, r = e % 128;
            int q = (qs[32 * h + r % 32] >> (2 * (r / 32))) & 3;
            float dl = d * (float)(sc[e / 16] & 0x0f);
            float ml = dmin * (float)(sc[e / 16] >> 4);
            float p = dl * (float)q;
            dst[e] = p - ml;
        }
    }
}

/* The 16 6-bit signed scales of Q3_K (12 bytes): scale j has low 4 bits from s[j%8]
 * (low nibble for j < 8, high for j >= 8) and high 2 bits from s[8 + j%4] bits
 * 2*(j/4); its value is that 6-bit number minus 32. */
static int scale_q3_k(const uint8_t *s, int j) {
    int lo = (s[j % 8] >> (4 * (j / 8))) & 0x0f;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 0x03;
    return (lo | (hi << 4)) - 32;
}

/* Q3_K, 110 B: hmask[32] | qs[64] | scales[12] | d f16. Weight e: h = e/128, r = e%128;
 * low 2 bits (qs[32h + r%32] >> 2*(r/32)) & 3; bit e/32 of hmask[e%32] clear means
 * minus 4. x = (d*scale[e/16]) * q, q in -4..3. */
void pi_dequant_q3_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 110, dst += QK_K) {
        const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
        float d = rdf16(b + 108);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, r = e % 128;
            int q = (qs[32 * h + r % 32] >> (2 * (r / 32))) & 3;
            q -= ((hm[e % 32] >> (e / 32)) & 1) ? 0 : 4;
            float dl = d * (float)scale_q3_k(sc, e / 16);
            dst[e] = dl * (float)q;
        }
    }
}

const int8_t pi_iq4_grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};

/* IQ4_NL, 18 B: d f16 | qs[16], nibbles as Q4_0; x = d * grid[q]. */
void pi_dequant_iq4_nl(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 18, dst += QK) {
        float d = rdf16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = d * (float)pi_iq4_grid[qs[j] & 0x0f];
            dst[j + QK / 2] = d * (float)pi_iq4_grid[qs[j] >> 4];
        }
    }
}

/* IQ4_XS, 136 B: d f16 | scales_h u16 LE | scales_l[4] | qs[128]. Sub-block s (32
 * weights) of the 8: 6-bit scale ls = (scales_l[s/2] nibble s%2) | ((scales_h >> 2s)
 * & 3) << 4, minus 32; its quants are qs[16s .. 16s+15], low nibbles first, as IQ4_NL.
 * x = (d*ls) * grid[q]. */
void pi_dequant_iq4_xs(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 136, dst += QK_K) {
        float d = rdf16(b);
        unsigned sh = rd16(b + 2);
        for (int s = 0; s < 8; s++) {
            int lo = (b[4 + s / 2] >> (4 * (s % 2))) & 0x0f;
            int ls = (lo | (int)(((sh >> (2 * s)) & 3u) << 4)) - 32;
            float dl = d * (float)ls;
            const uint8_t *qs = b + 8 + 16 * s;
            for (int j = 0; j < 16; j++) {
                dst[32 * s + j] = dl * (float)pi_iq4_grid[qs[j] & 0x0f];
                dst[32 * s + j + 16] = dl * (float)pi_iq4_grid[qs[j] >> 4];
            }
        }
    }
}

const int8_t pi_mxfp4_grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* MXFP4, 17 B: e (E8M0) | qs[16], nibbles as Q4_0 (low nibbles are weights 0..15);
 * x = d * grid[q] with d = 2^(e - 128), half the block scale, as the grid holds twice
 * the E2M1 values. Products of a power of two and a small integer: exact. */
void pi_dequant_mxfp4(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 17, dst += QK) {
        float d = pi_e8m0_half_to_fp32(b[0]);
        const uint8_t *qs = b + 1;
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = d * (float)pi_mxfp4_grid[qs[j] & 0x0f];
            dst[j + QK / 2] = d * (float)pi_mxfp4_grid[qs[j] >> 4];
        }
    }
}
