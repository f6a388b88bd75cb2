/* cuda_quant.cuh -- weight decoding for the GPU kernels: every type is read in
 * "pieces" of 8 values, the unit one thread decodes at a time.
 *
 * qtype<T> gives a type's block geometry: QK values in BYTES bytes, NP = QK / 8 pieces
 * per block. Piece p of a block holds values at block positions qpos(p, k), k < 8:
 * 8 consecutive values 8p .. 8p+7 for most types; for the 4- and 5-bit legacy quants
 * (whose byte j holds values j and j + 16) the values 4p .. 4p+3 and 16+4p .. 16+4p+3,
 * decoded from the 4 bytes qs[4p .. 4p+3] (SPLIT). The float types are cut into
 * "blocks" of 8 values whose last one may be partial (FLOAT): values past the row's end
 * are neither read nor used.
 *
 * Reading a piece is split in two: load() fetches the raw words the piece needs (a few
 * aligned 16-bit loads, no branches), decode() turns them into floats. A kernel loads
 * several pieces before decoding the first, so their memory latencies overlap.
 *
 * decode() is the scalar reference of lib/runtime/dequant.c, piece by piece, with every
 * product an unfused __fmul_rn, so the values are bit-exact (get_rows is tested for
 * equality). Weights must be 2-byte aligned (F32: 4-byte), which every row is when
 * w->data is (block sizes and row lengths are even): pi_cuda_check_weight checks it.
 * MXFP4 (17-byte blocks) is read bytewise and needs no alignment. */
#ifndef PI_CUDA_QUANT_CUH
#define PI_CUDA_QUANT_CUH

#include <type_traits>

#include "cuda_common.cuh"
#include "runtime/types.h" /* PI_TYPE_ID_IQ4_NL, PI_TYPE_ID_IQ4_XS */

static __device__ __forceinline__ uint32_t ld16(const uint8_t *p) {
    return *reinterpret_cast<const uint16_t *>(p);
}

/* 4 bytes at a 2-byte aligned address */
static __device__ __forceinline__ uint32_t ld32(const uint8_t *p) {
    return ld16(p) | (ld16(p + 2) << 16);
}

/* byte k (0..7) of the 8 bytes (lo, hi) */
static __device__ __forceinline__ uint32_t byte8(uint32_t lo, uint32_t hi, int k) {
    return ((k < 4 ? lo : hi) >> (8 * (k & 3))) & 0xffu;
}

static __device__ __forceinline__ float s8f(uint32_t b) {
    return (float)(int)(int8_t)(uint8_t)b;
}

template <uint32_t T> struct qtype;

/* ---- float types: "blocks" of 8 values, the last one possibly partial ---- */

template <> struct qtype<PI_TYPE_F32> {
    static constexpr int QK = 8, BYTES = 32, NP = 1, SPLIT = 0, FLOAT = 1;
    struct raw {
        float f[8];
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        raw r;
        const float *f = reinterpret_cast<const float *>(b);
#pragma unroll
        for (int k = 0; k < 8; k++)
            r.f[k] = k < nv ? f[k] : 0.0f;
        return r;
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = r.f[k];
    }
};

/* F16 and BF16: 16-bit values, which H::to_f32 turns into floats. */
template <typename H> struct qtype_16bit {
    static constexpr int QK = 8, BYTES = 16, NP = 1, SPLIT = 0, FLOAT = 1;
    struct raw {
        uint32_t h[8];
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        raw r;
#pragma unroll
        for (int k = 0; k < 8; k++)
            r.h[k] = k < nv ? ld16(b + 2 * k) : 0u;
        return r;
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = H::to_f32(r.h[k]);
    }
};

struct f16_bits {
    static __device__ __forceinline__ float to_f32(uint32_t h) {
        return pi_h2f(h);
    }
};
struct bf16_bits {
    static __device__ __forceinline__ float to_f32(uint32_t h) {
        return __uint_as_float(h << 16);
    }
};

template <> struct qtype<PI_TYPE_F16> : qtype_16bit<f16_bits> {};
template <> struct qtype<PI_TYPE_BF16> : qtype_16bit<bf16_bits> {};

/* ---- legacy quants: 32 values per block ---- */

/* A 4- or 5-bit legacy quant q as a float: (q - 2^(BITS-1))*d without a min (Q4_0,
 * Q5_0), q*d + m with one (Q4_1, Q5_1). q keeps its type (Q4_1's nibbles are unsigned),
 * so each type converts to float exactly as it did before this helper. */
template <int BITS, bool MIN, typename Q>
static __device__ __forceinline__ float split_scale(Q q, float d, float m) {
    if constexpr (MIN)
        return __fmul_rn(d, (float)q) + m;
    else
        return __fmul_rn(d, (float)((int)q - (1 << (BITS - 1))));
}

/* The 8 values of piece p of Q4_0, Q4_1, Q5_0 or Q5_1: byte k of qs holds piece values
 * k (low nibble, block value j = 4p + k) and k + 4 (high nibble, block value j + 16);
 * with 5 bits, bit j of qh is bit 4 of block value j. BITS and MIN are constants: no
 * branch is left in the code. */
template <int BITS, bool MIN>
static __device__ __forceinline__ void decode_split(uint32_t qs, uint32_t qh, int p, float d,
                                                    float m, float v[8]) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int j = 4 * p + k;
        const uint32_t q = (qs >> (8 * k)) & 0xffu;
        if constexpr (BITS == 4) {
            v[k] = split_scale<4, MIN>(q & 0x0f, d, m);
            v[k + 4] = split_scale<4, MIN>(q >> 4, d, m);
        } else {
            const int lo = (int)(q & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            const int hi = (int)(q >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            v[k] = split_scale<5, MIN>(lo, d, m);
            v[k + 4] = split_scale<5, MIN>(hi, d, m);
        }
    }
}

/* Q4_0, 18 B: d f16 | qs[16]; x = (q-8)*d */
template <> struct qtype<PI_TYPE_Q4_0> {
    static constexpr int QK = 32, BYTES = 18, NP = 4, SPLIT = 1, FLOAT = 0;
    struct raw {
        uint32_t d, qs;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        return {ld16(b), ld32(b + 2 + 4 * p)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        decode_split<4, false>(r.qs, 0u, p, pi_h2f(r.d), 0.0f, v);
    }
};

/* Q4_1, 20 B: d f16 | m f16 | qs[16]; x = q*d + m */
template <> struct qtype<PI_TYPE_Q4_1> {
    static constexpr int QK = 32, BYTES = 20, NP = 4, SPLIT = 1, FLOAT = 0;
    struct raw {
        uint32_t dm, qs;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        return {ld32(b), ld32(b + 4 + 4 * p)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        decode_split<4, true>(r.qs, 0u, p, pi_h2f(r.dm & 0xffffu), pi_h2f(r.dm >> 16), v);
    }
};

/* Q5_0, 22 B: d f16 | qh u32 (bit j = bit 4 of value j) | qs[16]; x = (q-16)*d */
template <> struct qtype<PI_TYPE_Q5_0> {
    static constexpr int QK = 32, BYTES = 22, NP = 4, SPLIT = 1, FLOAT = 0;
    struct raw {
        uint32_t d, qh, qs;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        return {ld16(b), ld32(b + 2), ld32(b + 6 + 4 * p)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        decode_split<5, false>(r.qs, r.qh, p, pi_h2f(r.d), 0.0f, v);
    }
};

/* Q5_1, 24 B: d f16 | m f16 | qh u32 | qs[16]; x = q*d + m */
template <> struct qtype<PI_TYPE_Q5_1> {
    static constexpr int QK = 32, BYTES = 24, NP = 4, SPLIT = 1, FLOAT = 0;
    struct raw {
        uint32_t dm, qh, qs;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        return {ld32(b), ld32(b + 4), ld32(b + 8 + 4 * p)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        decode_split<5, true>(r.qs, r.qh, p, pi_h2f(r.dm & 0xffffu), pi_h2f(r.dm >> 16), v);
    }
};

/* Q8_0, 34 B: d f16 | int8 qs[32]; x = q*d */
template <> struct qtype<PI_TYPE_Q8_0> {
    static constexpr int QK = 32, BYTES = 34, NP = 4, SPLIT = 0, FLOAT = 0;
    struct raw {
        uint32_t d, q0, q1;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        return {ld16(b), ld32(b + 2 + 8 * p), ld32(b + 6 + 8 * p)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        const float d = pi_h2f(r.d);
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = __fmul_rn(d, s8f(byte8(r.q0, r.q1, k)));
    }
};

/* ---- K-quants: 256 values per super-block, 32 pieces ---- */

/* The 12 scale bytes of Q4_K/Q5_K hold eight 6-bit scales and mins (dequant.c):
 * sub-block j uses bytes jj = j % 4, jj + 4 and jj + 8 only; `s` packs those three. */
static __device__ __forceinline__ uint32_t load_scales_k4(const uint8_t *sc, int j) {
    const int jj = j & 3;
    return (uint32_t)sc[jj] | ((uint32_t)sc[jj + 4] << 8) | ((uint32_t)sc[jj + 8] << 16);
}

static __device__ __forceinline__ void scale_min_k4(uint32_t s, int j, int *sc, int *mn) {
    const int a = (int)(s & 0xff), b = (int)((s >> 8) & 0xff), c = (int)(s >> 16);
    if (j < 4) {
        *sc = a & 63;
        *mn = b & 63;
    } else {
        *sc = (c & 0x0f) | ((a >> 6) << 4);
        *mn = (c >> 4) | ((b >> 6) << 4);
    }
}

/* Sub-block s of a Q4_K/Q5_K super-block: x = ds*q - dm, from dm (d f16 | dmin f16) and
 * the packed scale bytes sc (load_scales_k4). */
static __device__ __forceinline__ void scales_k4(uint32_t dm, uint32_t sc, int s, float *ds,
                                                 float *dmin) {
    int scale, mn;
    scale_min_k4(sc, s, &scale, &mn);
    *ds = __fmul_rn(pi_h2f(dm & 0xffffu), (float)scale);
    *dmin = __fmul_rn(pi_h2f(dm >> 16), (float)mn);
}

/* Q4_K, 144 B: d f16 | dmin f16 | scales[12] | qs[128]. Sub-block s = p/4 uses
 * qs[32(s/2) ..], low nibble for even s; x = (d*sc)*q - dmin*mn. */
template <> struct qtype<PI_TYPE_Q4_K> {
    static constexpr int QK = 256, BYTES = 144, NP = 32, SPLIT = 0, FLOAT = 0;
    struct raw {
        uint32_t dm, sc, q0, q1;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        const int s = p / 4, l0 = (p % 4) * 8;
        const uint8_t *q = b + 16 + 32 * (s / 2) + l0;
        return {ld32(b), load_scales_k4(b + 4, s), ld32(q), ld32(q + 4)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        const int s = p / 4, shift = 4 * (s & 1);
        float ds, dm;
        scales_k4(r.dm, r.sc, s, &ds, &dm);
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = __fmul_rn(ds, (float)((byte8(r.q0, r.q1, k) >> shift) & 0x0f)) - dm;
    }
};

/* Q5_K, 176 B: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; bit 4 of value l of
 * sub-block s is bit s of qh[l]. */
template <> struct qtype<PI_TYPE_Q5_K> {
    static constexpr int QK = 256, BYTES = 176, NP = 32, SPLIT = 0, FLOAT = 0;
    struct raw {
        uint32_t dm, sc, q0, q1, h0, h1;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        const int s = p / 4, l0 = (p % 4) * 8;
        const uint8_t *q = b + 48 + 32 * (s / 2) + l0, *qh = b + 16 + l0;
        return {ld32(b), load_scales_k4(b + 4, s), ld32(q), ld32(q + 4), ld32(qh), ld32(qh + 4)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        const int s = p / 4, shift = 4 * (s & 1);
        float ds, dm;
        scales_k4(r.dm, r.sc, s, &ds, &dm);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t x = ((byte8(r.q0, r.q1, k) >> shift) & 0x0f) |
                               (((byte8(r.h0, r.h1, k) >> s) & 1u) << 4);
            v[k] = __fmul_rn(ds, (float)x) - dm;
        }
    }
};

/* Q6_K, 210 B: ql[128] | qh[64] | int8 scales[16] | d f16. Value e: h = e/128,
 * r = e%128; low 4 bits from ql[64h + r%64] (nibble r/64), high 2 bits from
 * qh[32h + r%32] (bits 2(r/32)); x = (d*scales[e/16]) * (q - 32). A piece of 8
 * aligned values shares h, r/64, r/32 and the scale. */
template <> struct qtype<PI_TYPE_Q6_K> {
    static constexpr int QK = 256, BYTES = 210, NP = 32, SPLIT = 0, FLOAT = 0;
    struct raw {
        uint32_t l0, l1, h0, h1, sd;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        const int e0 = 8 * p, h = e0 / 128, r0 = e0 % 128;
        const uint8_t *ql = b + 64 * h + r0 % 64, *qh = b + 128 + 32 * h + r0 % 32;
        return {ld32(ql), ld32(ql + 4), ld32(qh), ld32(qh + 4),
                (uint32_t)b[192 + e0 / 16] | (ld16(b + 208) << 16)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        const int r0 = (8 * p) % 128, sl = 4 * (r0 / 64), sh = 2 * (r0 / 32);
        const float ds = __fmul_rn(pi_h2f(r.sd >> 16), s8f(r.sd & 0xffu));
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int lo = (int)((byte8(r.l0, r.l1, k) >> sl) & 0x0f);
            const int hi = (int)((byte8(r.h0, r.h1, k) >> sh) & 0x03);
            v[k] = __fmul_rn(ds, (float)((lo | (hi << 4)) - 32));
        }
    }
};

/* Q2_K, 84 B: scales[16] | qs[64] | d f16 | dmin f16. Value e: h = e/128, r = e%128;
 * q = (qs[32h + r%32] >> 2(r/32)) & 3; scales[e/16]: low nibble scale, high nibble min;
 * x = (d*sc)*q - dmin*mn. A piece of 8 aligned values shares h, r/32 and the scale. */
template <> struct qtype<PI_TYPE_Q2_K> {
    static constexpr int QK = 256, BYTES = 84, NP = 32, SPLIT = 0, FLOAT = 0;
    struct raw {
        uint32_t q0, q1, dm, sc;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        const int e0 = 8 * p, h = e0 / 128, l0 = e0 % 32;
        const uint8_t *q = b + 16 + 32 * h + l0;
        return {ld32(q), ld32(q + 4), ld32(b + 80), (uint32_t)b[e0 / 16]};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        const int sh = 2 * ((8 * p) % 128 / 32);
        const float dl = __fmul_rn(pi_h2f(r.dm & 0xffffu), (float)(r.sc & 0x0fu));
        const float ml = __fmul_rn(pi_h2f(r.dm >> 16), (float)(r.sc >> 4));
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = __fmul_rn(dl, (float)((byte8(r.q0, r.q1, k) >> sh) & 3u)) - ml;
    }
};

/* Q3_K, 110 B: hmask[32] | qs[64] | scales[12] | d f16. Value e: low 2 bits as Q2_K's
 * (qs at byte 32), minus 4 where bit e/32 of hmask[e%32] is clear; 16 signed 6-bit
 * scales, scale j: low 4 bits from scales[j%8] (nibble j/8), high 2 bits from
 * scales[8 + j%4] (bits 2(j/4)), minus 32; x = (d*scale)*q. */
template <> struct qtype<PI_TYPE_Q3_K> {
    static constexpr int QK = 256, BYTES = 110, NP = 32, SPLIT = 0, FLOAT = 0;
    struct raw {
        uint32_t q0, q1, h0, h1, sd;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        const int e0 = 8 * p, h = e0 / 128, l0 = e0 % 32, j = e0 / 16;
        const uint8_t *q = b + 32 + 32 * h + l0, *hm = b + l0;
        return {ld32(q), ld32(q + 4), ld32(hm), ld32(hm + 4),
                (uint32_t)b[96 + j % 8] | ((uint32_t)b[104 + j % 4] << 8) | (ld16(b + 108) << 16)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        const int e0 = 8 * p, j = e0 / 16, sh = 2 * (e0 % 128 / 32), hb = e0 / 32;
        const int lo = (int)((r.sd >> (4 * (j / 8))) & 0x0fu);
        const int hi = (int)((r.sd >> (8 + 2 * (j / 4))) & 0x03u);
        const float dl = __fmul_rn(pi_h2f(r.sd >> 16), (float)((lo | (hi << 4)) - 32));
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int q = (int)((byte8(r.q0, r.q1, k) >> sh) & 3u);
            q -= ((byte8(r.h0, r.h1, k) >> hb) & 1u) ? 0 : 4;
            v[k] = __fmul_rn(dl, (float)q);
        }
    }
};

/* The IQ4 grid (lib/runtime/dequant.c's pi_iq4_grid) as bytes of two words: value q
 * is byte q%8 of IQ4_LO (q < 8) or IQ4_HI. */
#define PI_IQ4_LO 0xf6eaddcfbfad9881ull
#define PI_IQ4_HI 0x7159453526190d01ull
static __device__ __forceinline__ float iq4f(uint32_t q) {
    const unsigned long long w = (q & 8u) ? PI_IQ4_HI : PI_IQ4_LO;
    return s8f((uint32_t)(w >> (8 * (q & 7u))) & 0xffu);
}

/* IQ4_NL, 18 B: d f16 | qs[16], nibbles as Q4_0; x = d * grid[q]. */
template <> struct qtype<PI_TYPE_ID_IQ4_NL> {
    static constexpr int QK = 32, BYTES = 18, NP = 4, SPLIT = 1, FLOAT = 0;
    struct raw {
        uint32_t d, qs;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        return {ld16(b), ld32(b + 2 + 4 * p)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        const float d = pi_h2f(r.d);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t q = (r.qs >> (8 * k)) & 0xffu;
            v[k] = __fmul_rn(d, iq4f(q & 0x0fu));
            v[k + 4] = __fmul_rn(d, iq4f(q >> 4));
        }
    }
};

/* IQ4_XS, 136 B: d f16 | scales_h u16 | scales_l[4] | qs[128]. Sub-block s = e/32:
 * scale ((scales_l[s/2] >> 4(s%2)) & 15 | ((scales_h >> 2s) & 3) << 4) - 32; value j
 * of it: nibble j/16 of qs[16s + j%16]; x = (d*scale) * grid[q]. */
template <> struct qtype<PI_TYPE_ID_IQ4_XS> {
    static constexpr int QK = 256, BYTES = 136, NP = 32, SPLIT = 0, FLOAT = 0;
    struct raw {
        uint32_t q0, q1, dsh, sl;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        const int e0 = 8 * p, s = e0 / 32;
        const uint8_t *q = b + 8 + 16 * s + (e0 % 16);
        return {ld32(q), ld32(q + 4), ld32(b), (uint32_t)b[4 + s / 2]};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        const int e0 = 8 * p, s = e0 / 32, sh = (e0 % 32) >= 16 ? 4 : 0;
        const int ls = (int)(((r.sl >> (4 * (s % 2))) & 0x0fu) | (((r.dsh >> (16 + 2 * s)) & 3u) << 4));
        const float dl = __fmul_rn(pi_h2f(r.dsh & 0xffffu), (float)(ls - 32));
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = __fmul_rn(dl, iq4f((byte8(r.q0, r.q1, k) >> sh) & 0x0fu));
    }
};

/* MXFP4's grid (lib/runtime/dequant.c's pi_mxfp4_grid: doubled E2M1 values) as bytes
 * of two words, as for IQ4. */
#define PI_MXFP4_LO 0x0c08060403020100ull
#define PI_MXFP4_HI 0xf4f8fafcfdfeff00ull
static __device__ __forceinline__ float mxfp4f(uint32_t q) {
    const unsigned long long w = (q & 8u) ? PI_MXFP4_HI : PI_MXFP4_LO;
    return s8f((uint32_t)(w >> (8 * (q & 7u))) & 0xffu);
}

/* MXFP4, 17 B: e (E8M0) | qs[16], nibbles as Q4_0; x = 2^(e-128) * grid[q]
 * (pi_e8m0_half_to_fp32). Blocks are 17 bytes, so rows and blocks may sit at odd
 * addresses: bytes are read one at a time (pi_cuda_check_weight asks no alignment). */
template <> struct qtype<PI_TYPE_MXFP4> {
    static constexpr int QK = 32, BYTES = 17, NP = 4, SPLIT = 1, FLOAT = 0;
    struct raw {
        uint32_t e, qs;
    };
    static __device__ __forceinline__ raw load(const uint8_t *b, int p, int nv) {
        const uint8_t *q = b + 1 + 4 * p;
        return {(uint32_t)b[0], (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) |
                                    ((uint32_t)q[3] << 24)};
    }
    static __device__ __forceinline__ void decode(const raw &r, int p, float v[8]) {
        const float d = __uint_as_float(r.e < 2u ? 0x00200000u << r.e : (r.e - 1u) << 23);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t q = (r.qs >> (8 * k)) & 0xffu;
            v[k] = __fmul_rn(d, mxfp4f(q & 0x0fu));
            v[k + 4] = __fmul_rn(d, mxfp4f(q >> 4));
        }
    }
};

/* Block position of value k of piece p. */
template <uint32_t T> static __device__ __forceinline__ int qpos(int p, int k) {
    return qtype<T>::SPLIT ? (k < 4 ? 4 * p + k : 16 + 4 * p + (k - 4)) : 8 * p + k;
}

/* Pieces per row of n values. */
template <uint32_t T> static __host__ __device__ __forceinline__ int64_t qpieces(int64_t n) {
    return qtype<T>::FLOAT ? (n + 7) / 8 : n / qtype<T>::QK * qtype<T>::NP;
}

/* Piece q (counted over a whole row of n values) of one row: its raw words, its index
 * p in its block, and the row position `base` of its block (value k of the piece is at
 * base + qpos(p, k)). */
template <uint32_t T> struct qpiece {
    typename qtype<T>::raw r;
    int p;
    int64_t base;
};

template <uint32_t T> static __device__ __forceinline__ void qwhere(int64_t q, qpiece<T> *pc) {
    pc->p = (int)(q % qtype<T>::NP);
    pc->base = q / qtype<T>::NP * qtype<T>::QK;
}

template <uint32_t T>
static __device__ __forceinline__ qpiece<T> qload(const uint8_t *row, int64_t q, int64_t n) {
    typedef qtype<T> Q;
    qpiece<T> pc;
    qwhere<T>(q, &pc);
    const int nv = Q::FLOAT ? (int)(n - pc.base < 8 ? n - pc.base : 8) : 8;
    pc.r = Q::load(row + (size_t)(q / Q::NP) * Q::BYTES, pc.p, nv);
    return pc;
}

template <uint32_t T>
static __device__ __forceinline__ void qdecode(const qpiece<T> &pc, float v[8]) {
    qtype<T>::decode(pc.r, pc.p, v);
}

/* PI_OK, or the status an op on this weight records (type, shape, row length,
 * alignment). */
int pi_cuda_check_weight(const struct pi_weight *w);

/* Calls f(std::integral_constant<uint32_t, T>()) for weight type T (one
 * instantiation per type), or records PI_ERR_UNSUPPORTED. */
template <typename F> static void pi_cuda_dispatch(struct pi_backend *b, uint32_t type, F &&f) {
    switch (type) {
    case PI_TYPE_F32:
        f(std::integral_constant<uint32_t, PI_TYPE_F32>());
        break;
    case PI_TYPE_F16:
        f(std::integral_constant<uint32_t, PI_TYPE_F16>());
        break;
    case PI_TYPE_BF16:
        f(std::integral_constant<uint32_t, PI_TYPE_BF16>());
        break;
    case PI_TYPE_Q4_0:
        f(std::integral_constant<uint32_t, PI_TYPE_Q4_0>());
        break;
    case PI_TYPE_Q4_1:
        f(std::integral_constant<uint32_t, PI_TYPE_Q4_1>());
        break;
    case PI_TYPE_Q5_0:
        f(std::integral_constant<uint32_t, PI_TYPE_Q5_0>());
        break;
    case PI_TYPE_Q5_1:
        f(std::integral_constant<uint32_t, PI_TYPE_Q5_1>());
        break;
    case PI_TYPE_Q8_0:
        f(std::integral_constant<uint32_t, PI_TYPE_Q8_0>());
        break;
    case PI_TYPE_Q4_K:
        f(std::integral_constant<uint32_t, PI_TYPE_Q4_K>());
        break;
    case PI_TYPE_Q5_K:
        f(std::integral_constant<uint32_t, PI_TYPE_Q5_K>());
        break;
    case PI_TYPE_Q6_K:
        f(std::integral_constant<uint32_t, PI_TYPE_Q6_K>());
        break;
    case PI_TYPE_Q2_K:
        f(std::integral_constant<uint32_t, PI_TYPE_Q2_K>());
        break;
    case PI_TYPE_Q3_K:
        f(std::integral_constant<uint32_t, PI_TYPE_Q3_K>());
        break;
    case PI_TYPE_ID_IQ4_NL:
        f(std::integral_constant<uint32_t, PI_TYPE_ID_IQ4_NL>());
        break;
    case PI_TYPE_ID_IQ4_XS:
        f(std::integral_constant<uint32_t, PI_TYPE_ID_IQ4_XS>());
        break;
    case PI_TYPE_MXFP4:
        f(std::integral_constant<uint32_t, PI_TYPE_MXFP4>());
        break;
    default:
        pi_cuda_fail(b, PI_ERR_UNSUPPORTED);
        break;
    }
}

#endif
