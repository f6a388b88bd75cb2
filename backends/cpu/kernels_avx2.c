/* kernels_avx2.c -- AVX2 + FMA + F16C kernels (this file alone is compiled with
 * -mavx2 -mfma -mf16c; pi_cpu_kernels_init calls it only when the CPU has them).
 * kernels_avx512.c compiles this same source again with PI_VNNI defined and AVX-512
 * VL + VNNI enabled: the integer dot products then use vpdpbusd / vpdpwssd on 256-bit
 * vectors (see there why 256 bits).
 *
 * Quantized weights are decoded once per "unit" of 256 values and the decoded registers
 * are dotted with up to GEMM_TILE activation vectors (prefill reuses each weight load;
 * decode is the same code with one vector; in the AVX2 build, prompts of 16 tokens or
 * more go through the panel gemm instead, see there; IQ4_XS excepted):
 *
 * 32-blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4): a unit is a group of 8
 *   blocks, matching the block-transposed PI_VEC_Q8_0 layout (kernels.h). The weight
 *   quants of the 8 blocks are transposed into 8 "steps" of 32 bytes, dword j of step
 *   u = quants 4u..4u+3 of block j, exactly like the activation group. Then
 *   maddubs(weights, x) -> int16 pairs, madd(., 1) -> int32 lane j = block j's sum: no
 *   horizontal sums, and the 8 block scales are applied with one FMA on 8 lanes. Quants
 *   are used unsigned (Q4_0 without its -8, Q5_0 without -16); the offset goes through
 *   the activation block sums: as a float m * s in the AVX2 build, as an integer
 *   subtracted from the block sum in the VNNI build (int_offset). A row's last group may
 *   be partial; it is computed as a group whose missing blocks add zeros (blk).
 *   IQ4_NL's nibbles index its grid with one pshufb and are then signed like Q8_0's;
 *   MXFP4's index its grid of doubled E2M1 values (integers, |w| <= 12) the same way,
 *   with the E8M0 exponents turned into the floats 2^(e-128) as block scales.
 *
 * K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS): a unit is a super-block, in value
 *   order: maddubs of 32 quants with 32 activations, madd with the sub-block scale, int32
 *   accumulation, one FMA per super-block; the mins (Q2_K, Q4_K, Q5_K) and the offsets
 *   (Q3_K's -4, used as q + 4 in 0..7; Q6_K's -32) use the activation's 16-value sums.
 *   IQ4_XS's grid values are signed: |w| times x with the sign of w, as for Q8_0.
 *
 * maddubs saturates at +-32767: unsigned 4-bit quants times |x| <= 127 give pairs of at
 * most 3810, so 8 steps add up in int16 (30480); 5-bit ones are widened after 4 steps
 * (31496), 6-bit ones at once (16002); Q8_0 and IQ4_NL use the sign trick (|w| times x
 * with the sign of w) and widen every step (32512), MXFP4 too but after 8 steps
 * (8 * 2 * 12 * 127 = 24384). In the K-quants each maddubs is widened at once (IQ4_XS:
 * 2 * 127 * 127 = 32258).
 *
 * Rows are summed in K-blocks of 2048 values, each reduced to a float and added in
 * order, by dot and gemm alike: for quantized types they agree bit for bit. */
#include "kernels.h"
#include "runtime/fp16.h" /* pi_e8m0_half_to_fp32 */

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#  pragma STDC FP_CONTRACT OFF
#endif

#define INLINE static inline __attribute__((always_inline))
#if defined(PI_VNNI) /* names that tell the two builds apart in a profile */
#  define NAME(f) f##_avx512
#else
#  define NAME(f) f##_avx2
#endif
/* Short fixed loops over registers must be unrolled for the arrays to live in
 * registers; -O3 does it anyway, this keeps -O2 builds as fast. */
#define UNROLL _Pragma("GCC unroll 8")

#define GEMM_TILE         8 /* tokens per gemm tile: one decoded weight group serves them all */
#define KB_UNITS          8 /* units of 256 values per K-block (2048 values) */
#define GEMM_L2_BYTES     (256 * 1024) /* weight rows that gemm keeps in L2 across tiles */
#define GEMM_L1_ACT_BYTES (16 * 1024)  /* activations that stay in L1 across rows */

/* ---- helpers -------------------------------------------------------------------------- */

INLINE float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

INLINE float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INLINE __m256i loadu256(const void *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

INLINE __m128i loadu128(const void *p) {
    return _mm_loadu_si128((const __m128i *)p);
}

/* Two 16-byte loads as the low and high lane of one register. */
INLINE __m256i load2x128(const uint8_t *lo, const uint8_t *hi) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(lo)), loadu128(hi), 1);
}

/* 16 bytes of nibbles -> 32 quants in value order (low nibbles first). */
INLINE __m256i unpack_nibbles(const uint8_t *qs) {
    __m128i q = loadu128(qs);
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* A Q5_0 block's 32 quants as unsigned bytes 0..31 in value order; blk at its qh. Bit j
 * of qh goes to byte j: each byte takes qh's byte j / 8 and tests its own bit. */
INLINE __m256i unpack_q5(const uint8_t *blk) {
    uint32_t qh;
    memcpy(&qh, blk, 4);
#if defined(PI_VNNI) /* AVX-512 BW/VL: qh is the byte mask itself */
    const __m256i nib = unpack_nibbles(blk + 4);
    return _mm256_mask_add_epi8(nib, (__mmask32)qh, nib, _mm256_set1_epi8(0x10));
#else
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                         2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i by = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), sel);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(by, bit), bit);
    return _mm256_or_si256(unpack_nibbles(blk + 4), _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
#endif
}

/* A Q4_0, Q5_0 or Q8_0 block's 32 integer quants as signed bytes (offset removed); blk
 * at the block's scale. */
INLINE __m256i sym_quants(int type, const uint8_t *blk) {
    if (type == PI_TYPE_Q4_0)
        return _mm256_sub_epi8(unpack_nibbles(blk + 2), _mm256_set1_epi8(8));
    if (type == PI_TYPE_Q5_0)
        return _mm256_sub_epi8(unpack_q5(blk + 2), _mm256_set1_epi8(16));
    return loadu256(blk + 2);
}

/* The IQ4 grid (pi_iq4_grid) in both lanes: pshufb of 4-bit indices gives the values. */
INLINE __m256i iq4_grid256(void) {
    return _mm256_broadcastsi128_si256(loadu128(pi_iq4_grid));
}

/* MXFP4's grid (pi_mxfp4_grid) in both lanes. */
INLINE __m256i mxfp4_grid256(void) {
    return _mm256_broadcastsi128_si256(loadu128(pi_mxfp4_grid));
}

/* Where the 8 blocks of a weight group are read from: blocks 0-3 at lo, 4-7 at hi, bb
 * bytes apart, of which the first rlo (rhi) are real; a missing block reads that half's
 * first block again. A full group is lo = p, hi = p + 4 bb; the partial group at the
 * end of a row (r < 8 blocks) reads its real blocks and repeats one in place of the
 * rest: the activations' blocks there are zero (kernels.h: the last group of a vector is
 * padded), so those lanes add exact zeros whatever the weights, in every path alike.
 * The decode path also puts the partial groups (r <= 4) of two rows in one group, one
 * per half (rows_ptr_to_y). */
struct gsrc {
    const uint8_t *lo, *hi;
    size_t bb;
    int rlo, rhi;
};

INLINE const uint8_t *gblk(const struct gsrc *g, int j) {
    const int k = j & 3, r = j < 4 ? g->rlo : g->rhi;
    return (j < 4 ? g->lo : g->hi) + g->bb * (size_t)(k < r ? k : 0);
}

/* MXFP4 block scale at p: pi_e8m0_half_to_fp32 */
INLINE float e8m0_at(const uint8_t *p) {
    return pi_e8m0_half_to_fp32(*p);
}

/* The E8M0 bytes at p + bb*j (j < 8) -> 8 floats 2^(e-128): exponent field e - 1, or
 * the subnormal 0x00200000 << e for e < 2. The bytes are gathered in a general
 * register, as in halves8. */
INLINE __m256 e8m0x8(const struct gsrc *g, size_t off) {
    uint64_t w = 0;
    UNROLL
    for (int j = 0; j < 8; j++) {
        uint64_t v = gblk(g, j)[off];
        __asm__("" : "+r"(v));
        w |= v << (8 * j);
    }
    const __m256i e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)w));
    const __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(norm, sub, small));
}

/* 8 x 8 transpose of dwords: dword c of t[u] = dword u of v[c]. */
INLINE void transpose8(const __m256i v[8], __m256i t[8]) {
    __m256i a[8], b[8];
    UNROLL
    for (int i = 0; i < 8; i += 2) {
        a[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        a[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
    UNROLL
    for (int i = 0; i < 8; i += 4) {
        b[i] = _mm256_unpacklo_epi64(a[i], a[i + 2]);
        b[i + 1] = _mm256_unpackhi_epi64(a[i], a[i + 2]);
        b[i + 2] = _mm256_unpacklo_epi64(a[i + 1], a[i + 3]);
        b[i + 3] = _mm256_unpackhi_epi64(a[i + 1], a[i + 3]);
    }
    /* b[k] (k < 4) holds dwords k and 4 + k of v[0..3] in its lanes, b[4 + k] of v[4..7] */
    UNROLL
    for (int k = 0; k < 4; k++) {
        t[k] = _mm256_permute2x128_si256(b[k], b[4 + k], 0x20);
        t[4 + k] = _mm256_permute2x128_si256(b[k], b[4 + k], 0x31);
    }
}

/* ---- activation quantization ---------------------------------------------------------- */

/* roundf() of 8 floats (half away from zero), exactly: floor(|v|), plus one when the
 * fraction |v| - floor(|v|) (exact) is at least 1/2, with the sign of v put back. */
INLINE __m256i round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign, v);
    __m256 f = _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m256 up = _mm256_cmp_ps(_mm256_sub_ps(a, f), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    f = _mm256_add_ps(f, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
    return _mm256_cvttps_epi32(_mm256_or_ps(f, _mm256_and_ps(sign, v)));
}

/* max |x[i]| over m floats, m a multiple of 8; NaN when one is a NaN or an infinity */
INLINE float amax_ps(const float *x, int m) {
    const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(FLT_MAX);
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    __m128 s;
    for (int i = 0; i < m; i += 8) {
        const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ)); /* > FLT_MAX or NaN */
        mx = _mm256_max_ps(mx, a);
    }
    if (_mm256_movemask_ps(bad))
        return NAN;
    s = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 values x * id rounded to int8, in order, in one register; *sum = their sum. */
INLINE __m256i quantize32v(const float *x, float id, int *sum) {
    const __m256 vid = _mm256_set1_ps(id);
    __m256i a = round_away(_mm256_mul_ps(_mm256_loadu_ps(x), vid));
    __m256i b = round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid));
    __m256i c = round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid));
    __m256i d = round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid));
    *sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, d)));
    /* packs interleave the 128-bit lanes; the permute restores value order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 32 values x * id rounded to int8 in order into q; returns their sum. */
INLINE int quantize32(const float *x, float id, int8_t q[32]) {
    const __m256 vid = _mm256_set1_ps(id);
    __m256i a = round_away(_mm256_mul_ps(_mm256_loadu_ps(x), vid));
    __m256i b = round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid));
    __m256i c = round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid));
    __m256i d = round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid));
    int sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, d)));
    /* packs interleave the 128-bit lanes; the permute restores value order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
    return sum;
}

/* The reference's block rule: d = max|x|/127, zero block when d < FLT_MIN, d = NaN
 * (and zero quants: the caller tests live()) when a value is not finite. */
INLINE float block_scale(const float *x, int m, float *id) {
    float d = amax_ps(x, m) / 127.0f;
    if (isnan(d))
        return d;
    if (!(d >= FLT_MIN))
        return 0.0f;
    *id = 1.0f / d;
    return d;
}

/* A group of 8 blocks at a time: each block quantized into a register in value order,
 * the 8 registers transposed into the group's steps (dword j of step u = values
 * 4u..4u+3 of block j), stored with the 8 d, s and sums: the reference's bytes. */
static void NAME(quantize_q8_0)(const float *x, void *y, int64_t n) {
    uint8_t *out = y;
    const int64_t nb = n / 32;
    for (int64_t g = 0; g < (nb + 7) / 8; g++) {
        __m256i v[8], t[8];
        float d[8], s[8];
        int32_t isum[8];
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * g + j;
            float id = 0.0f;
            int sum = 0;
            d[j] = b < nb ? block_scale(x + 32 * b, 32, &id) : 0.0f;
            v[j] = _mm256_setzero_si256();
            if (d[j] != 0.0f && !isnan(d[j]))
                v[j] = quantize32v(x + 32 * b, id, &sum);
            s[j] = d[j] * (float)sum;
            isum[j] = sum;
        }
        transpose8(v, t);
        uint8_t *o = out + (size_t)g * PI_Q8_0_GROUP_BYTES;
        UNROLL
        for (int u = 0; u < 8; u++)
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * u), t[u]);
        memcpy(o + 256, d, sizeof d);
        memcpy(o + 288, s, sizeof s);
        memcpy(o + 320, isum, sizeof isum);
    }
}

static void NAME(quantize_q8_k)(const float *x, void *y, int64_t n) {
    int64_t nb = n / 256;
    int8_t *q = y;
    int16_t *bsum = (int16_t *)(q + 256 * nb);
    float *dd = (float *)(bsum + 16 * nb);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 256 * b;
        int8_t *qb = q + 256 * b;
        float id = 0.0f, d = block_scale(xb, 256, &id);
        dd[b] = d;
        const int live = d != 0.0f && !isnan(d);
        if (!live)
            memset(qb, 0, 256);
        for (int i = 0; live && i < 256; i += 32)
            quantize32(xb + i, id, qb + i);
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++)
                sum += qb[16 * g + i];
            bsum[16 * b + g] = (int16_t)sum;
        }
    }
}

/* ---- 32-blocks: groups of 8 ------------------------------------------------------------ */

/* One decoded group of 8 weight blocks: q[u] = step u of the quants (unsigned, or |w| for
 * Q8_0 with the signed values in s[u]), d = the 8 block scales, m = what multiplies the
 * activation block sums s: the offset m (Q4_1, Q5_1), or -8d (Q4_0) and -16d (Q5_0), as
 * the quants are used unsigned, without their -8 or -16. */
struct wgroup {
    __m256i q[8];
    __m256i s[8];
    __m256 d, m;
};

/* 4x4 transpose of dwords inside each 128-bit lane: dword j of t[u] = dword u of a[j]. */
INLINE void transpose4(const __m256i a[4], __m256i t[4]) {
    __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
    __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
    t[0] = _mm256_unpacklo_epi64(t0, t2);
    t[1] = _mm256_unpackhi_epi64(t0, t2);
    t[2] = _mm256_unpacklo_epi64(t1, t3);
    t[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* 16 bytes per block at p + bb*j (j < 8) transposed: dword j of t[u] = bytes 4u..4u+3 of
 * block j. Blocks 0-3 go to the low lane, 4-7 to the high lane. */
INLINE void transpose16(const struct gsrc *g, size_t off, __m256i t[4]) {
    __m256i a[4];
    UNROLL
    for (int j = 0; j < 4; j++)
        a[j] = load2x128(gblk(g, j) + off, gblk(g, j + 4) + off);
    transpose4(a, t);
}

#if defined(PI_VNNI)
/* Q4 quants for the VNNI dot8_u4: the high nibbles stay in place, as 16 times their
 * value (vpdpbusd does not saturate), which saves four shifts per group. */
INLINE void nibbles_x16(const __m256i t[4], __m256i q[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    UNROLL
    for (int u = 0; u < 4; u++) {
        q[u] = _mm256_and_si256(t[u], m4);
        q[u + 4] = _mm256_andnot_si256(m4, t[u]);
    }
}
#else
#  define nibbles_x16 nibbles
#endif

/* The nibbles of transposed Q4 quants: low nibbles are values 4u.., high 16 + 4u... */
INLINE void nibbles(const __m256i t[4], __m256i q[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    UNROLL
    for (int u = 0; u < 4; u++) {
        q[u] = _mm256_and_si256(t[u], m4);
        q[u + 4] = _mm256_and_si256(_mm256_srli_epi16(t[u], 4), m4);
    }
}

/* The dwords at p + bb*j (j < 8) as one vector, assembled in general registers as in
 * halves8 (a vpgatherdd costs more on the CPUs we measured). */
INLINE __m256i dwords8(const struct gsrc *g, size_t off) {
    uint64_t w[4];
    UNROLL
    for (int k = 0; k < 4; k++) {
        uint32_t lo, hi;
        uint64_t v;
        memcpy(&lo, gblk(g, 2 * k) + off, 4);
        memcpy(&hi, gblk(g, 2 * k + 1) + off, 4);
        v = (uint64_t)hi << 32;
        __asm__("" : "+r"(v));
        w[k] = lo | v;
    }
    return _mm256_setr_epi64x((long long)w[0], (long long)w[1], (long long)w[2], (long long)w[3]);
}

/* The f16 at p + bb*j (j < 8) -> 8 floats, assembled as two 64-bit words in general
 * registers, which are idle here (the empty asm keeps the compiler from turning this
 * into vector shuffles, which are the busy units). */
INLINE __m256 halves8(const struct gsrc *g, size_t off) {
    uint64_t w[2] = {0, 0};
    UNROLL
    for (int j = 0; j < 8; j++) {
        uint16_t h;
        uint64_t v;
        memcpy(&h, gblk(g, j) + off, 2);
        v = h;
        __asm__("" : "+r"(v));
        w[j / 4] |= v << (16 * (j % 4));
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)w[1], (long long)w[0]));
}

/* Bit 4 of Q5 quants: qh (dword j = qh of block j) bit 4u+t -> 0x10 in byte 4j+t of
 * step u, or-ed into q[u]. Byte u/2 of each dword is spread over the dword, then each
 * byte tests its own bit. */
INLINE void q5_high_bits(__m256i qh, __m256i q[8]) {
    const __m256i b16 = _mm256_set1_epi8(0x10);
    UNROLL
    for (int k = 0; k < 4; k++) {
        const __m256i spread =
            _mm256_add_epi8(_mm256_set1_epi32(0x01010101 * k),
                            _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0,
                                             0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
        __m256i bk = _mm256_shuffle_epi8(qh, spread);
        UNROLL
        for (int half = 0; half < 2; half++) {
            const __m256i bit = _mm256_set1_epi32(half ? (int)0x80402010 : 0x08040201);
            __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bk, bit), bit);
            q[2 * k + half] = _mm256_or_si256(q[2 * k + half], _mm256_and_si256(set, b16));
        }
    }
}

/* The K-quants whose super-blocks the VNNI build computes as groups (kgroup_decode):
 * the 8 sub-blocks of 32 values take the place of a group's 8 blocks, with the
 * sub-block scales folded into per-lane d (and m), against PI_VEC_Q8_0 activations. */
INLINE int is_kgroup(int type) {
#if defined(PI_VNNI)
    return type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K || type == PI_TYPE_ID_IQ4_XS ||
           type == PI_TYPE_Q6_K || type == PI_TYPE_Q3_K;
#else
    (void)type;
    return 0;
#endif
}

/* The kgroup types with a scale per 16 values (Q3_K, Q6_K): each block of 32 has two,
 * so its steps 0-3 and 4-7 are summed apart and scaled by two FMAs (d: the first
 * half's d * sc, m: the second's). */
INLINE int is_split(int type) {
    return is_kgroup(type) && (type == PI_TYPE_Q6_K || type == PI_TYPE_Q3_K);
}

/* Bytes of one block of a 32-block type. */
INLINE size_t block_bytes(int type) {
    switch (type) {
    case PI_TYPE_Q4_0:
        return 18;
    case PI_TYPE_Q4_1:
        return 20;
    case PI_TYPE_Q5_0:
        return 22;
    case PI_TYPE_Q5_1:
        return 24;
    case PI_TYPE_ID_IQ4_NL:
        return 18;
    case PI_TYPE_MXFP4:
        return 17;
    default:
        return 34;
    }
}

/* Bytes of a K super-block. */
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

/* Bytes of one group: 8 blocks, or a K super-block (is_kgroup). */
INLINE size_t group_bytes(int type) {
    return is_kgroup(type) ? k_block_bytes(type) : 8 * block_bytes(type);
}


/* Q4_K/Q5_K 12 packed bytes -> bytes sc[0..7] | mn[0..7]. Bytewise on 32-bit words:
 * sc[0..3] = s0-3 & 63, mn[0..3] = s4-7 & 63, sc[4..7] = (s8-11 & 15) | (s0-3 >> 6) << 4,
 * mn[4..7] = (s8-11 >> 4) | (s4-7 >> 6) << 4. */
INLINE __m128i k4_scales(const uint8_t *s) {
    uint32_t a, b, c, w[4];
    memcpy(&a, s, 4);
    memcpy(&b, s + 4, 4);
    memcpy(&c, s + 8, 4);
    w[0] = a & 0x3f3f3f3fu;
    w[1] = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
    w[2] = b & 0x3f3f3f3fu;
    w[3] = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
    return loadu128(w);
}

/* A K super-block decoded as a group (is_kgroup; defined with the K-quants below). */
INLINE void kgroup_decode(int type, const uint8_t *blk, struct wgroup *w);


/* Decode the group of `type` whose blocks g locates (gsrc). */
INLINE void load_group(int type, const struct gsrc *g, struct wgroup *w) {
    if (is_kgroup(type)) {
        kgroup_decode(type, g->lo, w);
        return;
    }
    __m256i t[4], a[4];
    switch (type) {
    case PI_TYPE_Q4_0:
        transpose16(g, 2, t);
        nibbles_x16(t, w->q);
        w->d = halves8(g, 0);
#if !defined(PI_VNNI) /* the VNNI build subtracts the offset as an integer (int_offset) */
        w->m = _mm256_mul_ps(w->d, _mm256_set1_ps(-8.0f));
#endif
        break;
    case PI_TYPE_Q4_1:
        transpose16(g, 4, t);
        nibbles_x16(t, w->q);
        w->d = halves8(g, 0);
        w->m = halves8(g, 2);
        break;
    case PI_TYPE_Q5_0:
        transpose16(g, 6, t);
        nibbles(t, w->q);
        q5_high_bits(dwords8(g, 2), w->q);
        w->d = halves8(g, 0);
#if !defined(PI_VNNI)
        w->m = _mm256_mul_ps(w->d, _mm256_set1_ps(-16.0f));
#endif
        break;
    case PI_TYPE_Q5_1:
        transpose16(g, 8, t);
        nibbles(t, w->q);
        q5_high_bits(dwords8(g, 4), w->q);
        w->d = halves8(g, 0);
        w->m = halves8(g, 2);
        break;
    case PI_TYPE_Q8_0:
        UNROLL
        for (int j = 0; j < 4; j++)
            a[j] = load2x128(gblk(g, j) + 2, gblk(g, j + 4) + 2);
        transpose4(a, w->s);
        UNROLL
        for (int j = 0; j < 4; j++)
            a[j] = load2x128(gblk(g, j) + 18, gblk(g, j + 4) + 18);
        transpose4(a, w->s + 4);
        UNROLL
        for (int u = 0; u < 8; u++)
            w->q[u] = _mm256_abs_epi8(w->s[u]);
        w->d = halves8(g, 0);
        break;
    case PI_TYPE_ID_IQ4_NL: {
        const __m256i grid = iq4_grid256();
        __m256i idx[8];
        transpose16(g, 2, t);
        nibbles(t, idx);
        UNROLL
        for (int u = 0; u < 8; u++) {
            w->s[u] = _mm256_shuffle_epi8(grid, idx[u]);
            w->q[u] = _mm256_abs_epi8(w->s[u]);
        }
        w->d = halves8(g, 0);
        break;
    }
    case PI_TYPE_MXFP4: {
        const __m256i grid = mxfp4_grid256();
        __m256i idx[8];
        transpose16(g, 1, t);
        nibbles(t, idx);
        UNROLL
        for (int u = 0; u < 8; u++) {
            w->s[u] = _mm256_shuffle_epi8(grid, idx[u]);
            w->q[u] = _mm256_abs_epi8(w->s[u]);
        }
        w->d = e8m0x8(g, 0);
        break;
    }
    }
}

/* The 32-block types' three ways with a block's offset:
 * - signed_type: Q8_0, IQ4_NL and MXFP4 quants are signed; no offset;
 * - int_offset (the VNNI build's Q4_0 and Q5_0): the quants are used unsigned and the
 *   offset (8, 16) is subtracted from the exact integer block sum as offset * sum(x),
 *   with the activation's integer block sums (PI_VEC_Q8_0's sum); returns log2 of the
 *   offset, 0 for the others. One fma per group then applies the block's scales, which
 *   is what lets the packed gemm reach its rate;
 * - has_offset: the rest (Q4_1, Q5_1; Q4_0 and Q5_0 in the AVX2 build) add m * s, the
 *   block's offset m (Q4_0: -8 d) times the activation block's s = dx * sum(q), as a
 *   second fma. */
INLINE int signed_type(int type) {
    return type == PI_TYPE_Q8_0 || type == PI_TYPE_ID_IQ4_NL || type == PI_TYPE_MXFP4 ||
           (is_kgroup(type) && (type == PI_TYPE_ID_IQ4_XS || is_split(type)));
}

INLINE int int_offset(int type) {
#if defined(PI_VNNI)
    return type == PI_TYPE_Q4_0 ? 3 : type == PI_TYPE_Q5_0 ? 4 : 0;
#else
    (void)type;
    return 0;
#endif
}

INLINE int has_offset(int type) {
    return !signed_type(type) && !int_offset(type);
}

/* load_group of a partial group: the repeated blocks' scales (d, and m where the type
 * has one) are made 0, so that their lanes add exact zeros even when a real block's
 * scale is not finite. */
INLINE void load_partial(int type, const struct gsrc *g, struct wgroup *w) {
    const __m256i k = _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3);
    const __m256i r = _mm256_setr_epi32(g->rlo, g->rlo, g->rlo, g->rlo, g->rhi, g->rhi, g->rhi,
                                        g->rhi);
    const __m256 real = _mm256_castsi256_ps(_mm256_cmpgt_epi32(r, k));
    load_group(type, g, w);
    w->d = _mm256_and_ps(w->d, real);
    if (has_offset(type))
        w->m = _mm256_and_ps(w->m, real);
}

/* The group of `type` at p of one row, its first r (1..8) blocks real; a full group
 * (r = 8) with constant offsets. */
INLINE void load_group_at(int type, const uint8_t *p, int r, struct wgroup *w) {
    const size_t bb = block_bytes(type); /* (not used by the K super-blocks) */
    if (r == 8) {
        const struct gsrc g = {p, p + 4 * bb, bb, 4, 4};
        load_group(type, &g, w);
    } else {
        const struct gsrc g = {p, r > 4 ? p + 4 * bb : p, bb, r < 4 ? r : 4, r > 4 ? r - 4 : r};
        load_partial(type, &g, w);
    }
}


#if defined(PI_VNNI)

/* Per block j (lane j): sum q*x over its 32 values, unsigned quants: 8 vpdpbusd in two
 * chains. */
INLINE __m256i dot8_u8(const __m256i q[8], const uint8_t *xg) {
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    UNROLL
    for (int u = 0; u < 8; u += 2) {
        a = _mm256_dpbusd_epi32(a, q[u], loadu256(xg + 32 * u));
        b = _mm256_dpbusd_epi32(b, q[u + 1], loadu256(xg + 32 * (u + 1)));
    }
    return _mm256_add_epi32(a, b);
}
#  define dot8_u5 dot8_u8

/* As dot8_u8 for the quants of nibbles_x16: steps 4-7 hold 16 times the high nibbles,
 * so their sum (a multiple of 16) is shifted back. */
INLINE __m256i dot8_u4(const __m256i q[8], const uint8_t *xg) {
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    UNROLL
    for (int u = 0; u < 4; u++) {
        a = _mm256_dpbusd_epi32(a, q[u], loadu256(xg + 32 * u));
        b = _mm256_dpbusd_epi32(b, q[u + 4], loadu256(xg + 32 * (u + 4)));
    }
    return _mm256_add_epi32(a, _mm256_srai_epi32(b, 4));
}

/* Per block j (lane j): sum w*x for signed w: |w| * (x with w's sign). */
INLINE __m256i dot8_s8(const struct wgroup *w, const uint8_t *xg) {
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    UNROLL
    for (int u = 0; u < 8; u += 2) {
        a = _mm256_dpbusd_epi32(a, w->q[u], _mm256_sign_epi8(loadu256(xg + 32 * u), w->s[u]));
        b = _mm256_dpbusd_epi32(b, w->q[u + 1],
                                _mm256_sign_epi8(loadu256(xg + 32 * (u + 1)), w->s[u + 1]));
    }
    return _mm256_add_epi32(a, b);
}
#  define dot8_s4 dot8_s8

/* dot8_s8 of steps 0-3 (returned) and 4-7 (*hi) apart: the split types' halves. */
INLINE __m256i dot8_s8_halves(const struct wgroup *w, const uint8_t *xg, __m256i *hi) {
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    UNROLL
    for (int u = 0; u < 4; u++) {
        a = _mm256_dpbusd_epi32(a, w->q[u], _mm256_sign_epi8(loadu256(xg + 32 * u), w->s[u]));
        b = _mm256_dpbusd_epi32(b, w->q[u + 4],
                                _mm256_sign_epi8(loadu256(xg + 32 * (u + 4)), w->s[u + 4]));
    }
    *hi = b;
    return a;
}

#else

/* Per block j (lane j): sum over steps u0..u0+n-1 of q*x, as int16 pairs added before
 * one madd (the caller keeps n * 2 * qmax * 127 below 32768). */
INLINE __m256i dot_steps(const __m256i q[8], const uint8_t *xg, int u0, int n) {
    __m256i p = _mm256_maddubs_epi16(q[u0], loadu256(xg + 32 * u0));
    UNROLL
    for (int u = u0 + 1; u < u0 + n; u++)
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q[u], loadu256(xg + 32 * u)));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* Per block j (lane j): sum q*x over its 32 values; 4-bit quants: 8 steps in int16
 * (8 * 2 * 15 * 127 = 30480), 5-bit: twice 4 (4 * 2 * 31 * 127 = 31496). */
INLINE __m256i dot8_u4(const __m256i q[8], const uint8_t *xg) {
    return dot_steps(q, xg, 0, 8);
}
INLINE __m256i dot8_u5(const __m256i q[8], const uint8_t *xg) {
    return _mm256_add_epi32(dot_steps(q, xg, 0, 4), dot_steps(q, xg, 4, 4));
}

/* Per block j (lane j): sum w*x for signed w (sign trick: |w| * (x with w's sign)),
 * widened every step (2 * 128 * 127 = 32512). */
INLINE __m256i dot8_s8(const struct wgroup *w, const uint8_t *xg) {
    const __m256i one = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    UNROLL
    for (int u = 0; u < 8; u++) {
        __m256i sx = _mm256_sign_epi8(loadu256(xg + 32 * u), w->s[u]);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w->q[u], sx), one));
    }
    return acc;
}

/* dot8_s8 for signed weights of at most 12 in magnitude (MXFP4): the pairs of 8 steps
 * add up in int16 (8 * 2 * 12 * 127 = 24384) before one madd. */
INLINE __m256i dot8_s4(const struct wgroup *w, const uint8_t *xg) {
    __m256i p = _mm256_maddubs_epi16(w->q[0], _mm256_sign_epi8(loadu256(xg), w->s[0]));
    UNROLL
    for (int u = 1; u < 8; u++)
        p = _mm256_add_epi16(
            p, _mm256_maddubs_epi16(w->q[u], _mm256_sign_epi8(loadu256(xg + 32 * u), w->s[u])));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

#endif

/* acc + the group's contribution to dot(row, x) for one activation group xg:
 * d*dx*isum + m*s (but Q8_0 has no m). */
/* The operands of group_dot's multiply-adds: acc + a * b (+ m * s for has_offset). */
struct gterms {
    __m256 a, b, m, s;
};

INLINE struct gterms group_terms(int type, const struct wgroup *w, const uint8_t *xg) {
    const __m256 dx = _mm256_loadu_ps((const float *)(const void *)(xg + 256));
    __m256i isum;
#if defined(PI_VNNI)
    if (is_split(type)) {
        __m256i hi;
        isum = dot8_s8_halves(w, xg, &hi);
        const struct gterms t = {_mm256_mul_ps(w->d, dx), _mm256_cvtepi32_ps(isum),
                                 _mm256_mul_ps(w->m, dx), _mm256_cvtepi32_ps(hi)};
        return t;
    }
#endif
    if (signed_type(type))
        isum = type == PI_TYPE_MXFP4 ? dot8_s4(w, xg) : dot8_s8(w, xg);
    else if (type == PI_TYPE_Q4_0 || type == PI_TYPE_Q4_1)
        isum = dot8_u4(w->q, xg);
    else
        isum = dot8_u5(w->q, xg);
    if (int_offset(type))
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(loadu256(xg + 320), int_offset(type)));
    struct gterms t = {_mm256_mul_ps(w->d, dx), _mm256_cvtepi32_ps(isum), w->d, dx};
    if (has_offset(type)) {
        t.m = w->m;
        t.s = _mm256_loadu_ps((const float *)(const void *)(xg + 288));
    }
    return t;
}

/* acc + one row's group terms, in the lanes of `keep` = 0 (all) or only the low four
 * lanes (keep = 0xf0: the high lanes stay as they were). */
INLINE __m256 apply_terms(int type, struct gterms t, __m256 acc, int keep) {
    __m256 r = _mm256_fmadd_ps(t.a, t.b, acc);
    if (has_offset(type) || is_split(type))
        r = _mm256_fmadd_ps(t.m, t.s, r);
    return keep ? _mm256_blend_ps(r, acc, 0xf0) : r;
}

/* The high half's terms in the low lanes (the second row of a merged partial group). */
INLINE struct gterms high_terms(struct gterms t) {
    const struct gterms h = {_mm256_permute2f128_ps(t.a, t.a, 0x01),
                             _mm256_permute2f128_ps(t.b, t.b, 0x01),
                             _mm256_permute2f128_ps(t.m, t.m, 0x01),
                             _mm256_permute2f128_ps(t.s, t.s, 0x01)};
    return h;
}

INLINE __m256 group_dot(int type, const struct wgroup *w, const uint8_t *xg, __m256 acc) {
    return apply_terms(type, group_terms(type, w, xg), acc, 0);
}


/* ---- 32-blocks: the tail of a row ----------------------------------------------------
 *
 * A row whose block count nb is not a multiple of 8 ends with r = nb % 8 blocks that do
 * not fill a group. They are computed as one more group whose missing blocks re-read
 * block 0 (blk); the activation vector's last group is padded with zero blocks
 * (kernels.h: q = 0, d = 0, s = 0), so those lanes add exact zeros. Every path -- dot,
 * gemm, the pairs and the packed gemm -- does the tail this way, so they stay bit for
 * bit equal, and a row of 576 values costs 3 groups, not 2 groups and 2 slow blocks.
 * group_r gives a group's r. */

INLINE int group_r(int64_t nb, int64_t g) {
    return nb - 8 * g < 8 ? (int)(nb - 8 * g) : 8;
}



/* Sums over the groups [g0, g1) of one row (nb blocks, the last group possibly partial)
 * for tt activation vectors vb bytes apart: out[t] = hsum of an 8-lane accumulator. */
INLINE void row_kblock_n(int type, const uint8_t *row, int64_t nb, int64_t g0, int64_t g1,
                         const uint8_t *x, size_t vb, int tt, float *out) {
    const size_t gb = group_bytes(type);
    __m256 acc[GEMM_TILE];
    UNROLL
    for (int t = 0; t < tt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t g = g0; g < g1; g++) {
        struct wgroup wg;
        const uint8_t *xg = x + (size_t)g * PI_Q8_0_GROUP_BYTES;
        load_group_at(type, row + (size_t)g * gb, group_r(nb, g), &wg);
        UNROLL
        for (int t = 0; t < tt; t++)
            acc[t] = group_dot(type, &wg, xg + (size_t)t * vb, acc[t]);
    }
    for (int t = 0; t < tt; t++)
        out[t] = hsum_ps(acc[t]);
}

/* ---- K-quants ------------------------------------------------------------------------- */

/* PI_VEC_Q8_K views of super-block b (of nb). */
INLINE const int8_t *xk_q(const void *x, int64_t b) {
    return (const int8_t *)x + 256 * b;
}
INLINE const int16_t *xk_bsum(const void *x, int64_t nb, int64_t b) {
    return (const int16_t *)(const void *)((const int8_t *)x + 256 * nb) + 16 * b;
}
INLINE float xk_d(const void *x, int64_t nb, int64_t b) {
    float d;
    memcpy(&d, (const int8_t *)x + 288 * nb + 4 * b, 4);
    return d;
}


/* acc + the int16 products a*b summed in pairs (vpdpwssd with VNNI). */
INLINE __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#if defined(PI_VNNI)
    return _mm256_dpwssd_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* int16 vector with every element = word s of the low 8 words in both lanes of v. */
INLINE __m256i bcast_word(__m256i v, int s) {
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)(0x0100 + 0x0202 * s)));
}

/* One decoded K-quant super-block: q[c] = the 32 unsigned quants of chunk c (values
 * 32c..32c+31), sc[c] = the int16 scale vector madd applies to maddubs(q[c], x) (Q4_K,
 * Q5_K: the sub-block scale everywhere; Q6_K: scale 2c in the low lane, 2c+1 in the
 * high lane, as the low lane holds values 0-15), aux = the int16 vector madd-ed with
 * the activation's 16 bsums (Q4_K, Q5_K: each min twice; Q6_K: the 16 scales), d and
 * dmin the f16 scales (dmin 0 for Q6_K). */
struct kblock {
    __m256i q[8], sc[8], aux;
    float d, dmin;
};

/* Q4_K / Q5_K (qh NULL for Q4_K): low nibbles of qs[32g..] are sub-block 2g, high
 * nibbles 2g+1; bit s of qh[l] is bit 4 of value l of sub-block s. */
INLINE void k45_decode(const uint8_t *blk, const uint8_t *qh, const uint8_t *qs,
                       struct kblock *kb) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), b16 = _mm256_set1_epi8(0x10);
    __m128i scm = k4_scales(blk + 4);
    __m256i sc = _mm256_cvtepu8_epi16(scm); /* words 0-7 scales, 8-15 mins */
    __m256i h = qh ? loadu256(qh) : _mm256_setzero_si256();
    __m128i mn2 = _mm_shuffle_epi8(
        scm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
    sc = _mm256_permute2x128_si256(sc, sc, 0x00);
    UNROLL
    for (int g = 0; g < 4; g++) {
        __m256i q = loadu256(qs + 32 * g);
        kb->q[2 * g] = _mm256_and_si256(q, m4);
        kb->q[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh) {
            kb->q[2 * g] =
                _mm256_or_si256(kb->q[2 * g], _mm256_and_si256(_mm256_slli_epi16(h, 4), b16));
            kb->q[2 * g + 1] =
                _mm256_or_si256(kb->q[2 * g + 1], _mm256_and_si256(_mm256_slli_epi16(h, 3), b16));
            h = _mm256_srli_epi16(h, 2);
        }
        kb->sc[2 * g] = bcast_word(sc, 2 * g);
        kb->sc[2 * g + 1] = bcast_word(sc, 2 * g + 1);
    }
    kb->aux = _mm256_cvtepu8_epi16(mn2);
    kb->d = f16_at(blk);
    kb->dmin = f16_at(blk + 2);
}

/* Q6_K: per half hh (128 values) ql[64hh..] and qh[32hh..] give chunks 4hh..4hh+3: low
 * nibbles of ql 0-31, 32-63, then high nibbles, each with 2 bits of qh (bits 0-1, 2-3,
 * 4-5, 6-7) as bits 4-5. The -32 offset is taken off with the bsums. */
INLINE void q6_k_decode(const uint8_t *blk, struct kblock *kb) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    /* within each lane: word 0 (low lane) or 1 (high lane) of the broadcast dword */
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2,
                                          3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    __m256i sc = _mm256_cvtepi8_epi16(loadu128(blk + 192)); /* 16 scales as words */
    UNROLL
    for (int hh = 0; hh < 2; hh++) {
        __m256i l0 = loadu256(blk + 64 * hh), l1 = loadu256(blk + 64 * hh + 32);
        __m256i qh = loadu256(blk + 128 + 32 * hh);
        __m256i *c = kb->q + 4 * hh;
        c[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                               _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        c[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                               _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        c[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_and_si256(qh, m30));
        c[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
    }
    UNROLL
    for (int c = 0; c < 8; c++)
        kb->sc[c] =
            _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(c)), pick);
    kb->aux = sc;
    kb->d = f16_at(blk + 208);
    kb->dmin = 0.0f;
}

/* sc[c] for a type with one scale per 16 values (Q2_K, Q3_K, Q6_K): scale 2c in the
 * low lane, 2c+1 in the high lane, from the 16 scales as words of sc. */
INLINE __m256i scale_pair(__m256i sc, int c) {
    /* within each lane: word 0 (low lane) or 1 (high lane) of the broadcast dword */
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2,
                                          3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    return _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(c)), pick);
}

/* Q2_K: chunk c = 4h + s (values 32c..) is bits 2s..2s+1 of qs[32h..32h+31]; scales[g]
 * holds scale g (low nibble) and min g (high nibble), one per 16 values. */
INLINE void q2_k_decode(const uint8_t *blk, struct kblock *kb) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i sb = loadu128(blk);
    const __m256i sc = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0f)));
    UNROLL
    for (int h = 0; h < 2; h++) {
        const __m256i q = loadu256(blk + 16 + 32 * h);
        kb->q[4 * h] = _mm256_and_si256(q, m3);
        kb->q[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
        kb->q[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
        kb->q[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
    }
    UNROLL
    for (int c = 0; c < 8; c++)
        kb->sc[c] = scale_pair(sc, c);
    kb->aux = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0f)));
    kb->d = f16_at(blk + 80);
    kb->dmin = f16_at(blk + 82);
}

/* Q3_K 12 packed bytes -> the 16 signed 6-bit scales as bytes, on 32-bit words (scale j:
 * low 4 bits from byte j%8, low nibble for j < 8; high 2 bits from byte 8 + j%4, bits
 * 2(j/4); minus 32). */
INLINE __m128i q3_k_scales(const uint8_t *s) {
    uint32_t a, b, c, w[4];
    memcpy(&a, s, 4);
    memcpy(&b, s + 4, 4);
    memcpy(&c, s + 8, 4);
    w[0] = (a & 0x0f0f0f0fu) | ((c & 0x03030303u) << 4);
    w[1] = (b & 0x0f0f0f0fu) | (((c >> 2) & 0x03030303u) << 4);
    w[2] = ((a >> 4) & 0x0f0f0f0fu) | (((c >> 4) & 0x03030303u) << 4);
    w[3] = ((b >> 4) & 0x0f0f0f0fu) | (((c >> 6) & 0x03030303u) << 4);
    /* from registers: a 16-byte load of the four words just stored waits for store
     * forwarding, which fails across stores (measured: it halved Q3_K's dot) */
    return _mm_sub_epi8(_mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]),
                        _mm_set1_epi8(32));
}

/* Q3_K: chunk c = 4h + s: bits 2s..2s+1 of qs[32h..], plus 4 where bit c of hmask[l] is
 * set: the quant plus 4, in 0..7 (the -4 is taken off with the bsums). */
INLINE void q3_k_decode(const uint8_t *blk, struct kblock *kb) {
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m256i hm = loadu256(blk);
    const __m256i sc = _mm256_cvtepi8_epi16(q3_k_scales(blk + 96));
    UNROLL
    for (int h = 0; h < 2; h++) {
        const __m256i q = loadu256(blk + 32 + 32 * h);
        UNROLL
        for (int s = 0; s < 4; s++) {
            const int c = 4 * h + s;
            /* bit c of each hmask byte moved to bit 2 (16-bit shifts: both bytes of a word
             * move by the same count, and bit 2 of each comes from its own byte) */
            const __m256i hb = c >= 2 ? _mm256_srli_epi16(hm, c - 2) : _mm256_slli_epi16(hm, 2 - c);
            kb->q[c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3),
                                       _mm256_and_si256(hb, four));
        }
    }
    UNROLL
    for (int c = 0; c < 8; c++)
        kb->sc[c] = scale_pair(sc, c);
    kb->aux = sc;
    kb->d = f16_at(blk + 108);
    kb->dmin = 0.0f;
}

/* IQ4_XS: chunk c is sub-block c: the grid values (signed: k_token uses |w| and the
 * sign) of the nibbles of qs[16c..16c+15], low nibbles first; one 6-bit scale minus 32
 * per sub-block. */
INLINE void iq4_xs_decode(const uint8_t *blk, struct kblock *kb) {
    const __m256i grid = iq4_grid256();
    uint16_t sh;
    uint32_t sl;
    memcpy(&sh, blk + 2, 2);
    memcpy(&sl, blk + 4, 4);
    /* dword s = scale s: nibble s of the u32 scales_l, 2 bits 2s of scales_h; then the
     * low word copied to the high word, so that a broadcast dword is 16 equal words */
    __m256i ls = _mm256_or_si256(
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl),
                                           _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                         _mm256_set1_epi32(15)),
        _mm256_slli_epi32(
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(sh),
                                               _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                             _mm256_set1_epi32(3)),
            4));
    ls = _mm256_and_si256(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)), _mm256_set1_epi32(0xffff));
    ls = _mm256_or_si256(ls, _mm256_slli_epi32(ls, 16));
    UNROLL
    for (int c = 0; c < 8; c++) {
        kb->q[c] = _mm256_shuffle_epi8(grid, unpack_nibbles(blk + 8 + 16 * c));
        kb->sc[c] = _mm256_permutevar8x32_epi32(ls, _mm256_set1_epi32(c));
    }
    kb->aux = _mm256_setzero_si256();
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

/* A K super-block as a group (is_kgroup): v[c] = sub-block c's 32 quants in value order
 * (unsigned for Q4_K/Q5_K, the signed grid values for IQ4_XS), transposed into the
 * group's steps; d = the sub-block scales d * sc_c, m = -dmin * min_c (exact products of
 * an f16 and a 6-bit integer). */
/* The 16 signed scales (bytes) of a split type as the floats d * sc of the even ones
 * (lo) and the odd ones (hi): per block of 32, its first and second half's. */
INLINE void split_scales(__m128i sc, float d, __m256 *lo, __m256 *hi) {
    const __m128i ev = _mm_shuffle_epi8(sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9,
                                                          11, 13, 15));
    *lo = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(ev)));
    *hi = _mm256_mul_ps(_mm256_set1_ps(d),
                        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(ev, 8))));
}

INLINE void kgroup_decode(int type, const uint8_t *blk, struct wgroup *w) {
    __m256i v[8];
    if (type == PI_TYPE_Q6_K || type == PI_TYPE_Q3_K) {
        struct kblock kb; /* blocks of 32 in value order, quants + 32 (+ 4 for Q3_K) */
        k_decode(type, blk, &kb);
        const __m256i off = _mm256_set1_epi8(type == PI_TYPE_Q6_K ? 32 : 4);
        UNROLL
        for (int c = 0; c < 8; c++)
            v[c] = _mm256_sub_epi8(kb.q[c], off);
        transpose8(v, w->s);
        UNROLL
        for (int u = 0; u < 8; u++)
            w->q[u] = _mm256_abs_epi8(w->s[u]);
        if (type == PI_TYPE_Q6_K)
            split_scales(loadu128(blk + 192), kb.d, &w->d, &w->m);
        else
            split_scales(q3_k_scales(blk + 96), kb.d, &w->d, &w->m);
        return;
    }
    if (type == PI_TYPE_ID_IQ4_XS) {
        const __m256i grid = iq4_grid256();
        uint16_t sh;
        uint32_t sl;
        memcpy(&sh, blk + 2, 2);
        memcpy(&sl, blk + 4, 4);
        const __m256i ls = _mm256_or_si256(
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl),
                                               _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                             _mm256_set1_epi32(15)),
            _mm256_slli_epi32(
                _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(sh),
                                                   _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                 _mm256_set1_epi32(3)),
                4));
        UNROLL
        for (int c = 0; c < 8; c++)
            v[c] = _mm256_shuffle_epi8(grid, unpack_nibbles(blk + 8 + 16 * c));
        transpose8(v, w->s);
        UNROLL
        for (int u = 0; u < 8; u++)
            w->q[u] = _mm256_abs_epi8(w->s[u]);
        w->d = _mm256_mul_ps(_mm256_set1_ps(f16_at(blk)),
                             _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f), b16 = _mm256_set1_epi8(0x10);
    const uint8_t *qs = blk + (type == PI_TYPE_Q5_K ? 48 : 16);
    const __m128i scm = k4_scales(blk + 4); /* bytes 0-7 scales, 8-15 mins */
    __m256i h = type == PI_TYPE_Q5_K ? loadu256(blk + 16) : _mm256_setzero_si256();
    UNROLL
    for (int g = 0; g < 4; g++) {
        const __m256i q = loadu256(qs + 32 * g);
        v[2 * g] = _mm256_and_si256(q, m4);
        v[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (type == PI_TYPE_Q5_K) {
            v[2 * g] = _mm256_or_si256(v[2 * g], _mm256_and_si256(_mm256_slli_epi16(h, 4), b16));
            v[2 * g + 1] =
                _mm256_or_si256(v[2 * g + 1], _mm256_and_si256(_mm256_slli_epi16(h, 3), b16));
            h = _mm256_srli_epi16(h, 2);
        }
    }
    transpose8(v, w->q);
    w->d = _mm256_mul_ps(_mm256_set1_ps(f16_at(blk)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(scm)));
    w->m = _mm256_mul_ps(_mm256_set1_ps(-f16_at(blk + 2)),
                         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(scm, 8))));
}

/* acc + one decoded super-block dotted with activations xq [256], bsum [16], scale dx:
 * isum = sum_c madd(maddubs(q[c], x[c]), sc[c]) (IQ4_XS: maddubs(|q[c]|, x[c] with the
 * sign of q[c])); Q2_K/Q4_K/Q5_K: d*dx*isum - dmin*dx*(mins . bsums); Q6_K:
 * d*dx*(isum - 32 * (scales . bsums)), Q3_K the same with 4; IQ4_XS: d*dx*isum. */
INLINE __m256 k_token(int type, const struct kblock *kb, const int8_t *xq, const int16_t *bsum,
                      float dx, __m256 acc) {
    const int has_min = type == PI_TYPE_Q2_K || type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K;
    __m256i isum = _mm256_setzero_si256(), aux = _mm256_setzero_si256();
    if (type != PI_TYPE_ID_IQ4_XS)
        aux = _mm256_madd_epi16(kb->aux, loadu256(bsum));
    UNROLL
    for (int c = 0; c < 8; c++) {
        __m256i x = loadu256(xq + 32 * c), q = kb->q[c];
        if (type == PI_TYPE_ID_IQ4_XS) {
            x = _mm256_sign_epi8(x, q);
            q = _mm256_abs_epi8(q);
        }
        isum = madd_acc(isum, _mm256_maddubs_epi16(q, x), kb->sc[c]);
    }
    if (type == PI_TYPE_Q6_K)
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(aux, 5));
    if (type == PI_TYPE_Q3_K)
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(aux, 2));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(kb->d * dx), _mm256_cvtepi32_ps(isum), acc);
    if (has_min)
        acc = _mm256_fnmadd_ps(_mm256_set1_ps(kb->dmin * dx), _mm256_cvtepi32_ps(aux), acc);
    return acc;
}


/* As row_kblock_n, for super-blocks [b0, b1) of a row of nb. */
INLINE void row_kblock_kn(int type, const uint8_t *row, int64_t nb, int64_t b0, int64_t b1,
                          const uint8_t *x, size_t vb, int tt, float *out) {
    __m256 acc[GEMM_TILE];
    UNROLL
    for (int t = 0; t < tt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = b0; b < b1; b++) {
        struct kblock kb;
        k_decode(type, row + (size_t)b * k_block_bytes(type), &kb);
        UNROLL
        for (int t = 0; t < tt; t++) {
            const uint8_t *xt = x + (size_t)t * vb;
            acc[t] = k_token(type, &kb, xk_q(xt, b), xk_bsum(xt, nb, b), xk_d(xt, nb, b), acc[t]);
        }
    }
    for (int t = 0; t < tt; t++)
        out[t] = hsum_ps(acc[t]);
}

/* With 32 registers, full tiles get a constant token count, so that their accumulators
 * live in registers (with 16 that spills more than it saves). In the VNNI build only
 * IQ4_XS still reaches it with a full tile: the other types' full tiles go through
 * gemm_pairs_avx512.h. */
INLINE void row_kblock_k(int type, const uint8_t *row, int64_t nb, int64_t b0, int64_t b1,
                         const uint8_t *x, size_t vb, int tt, float *out) {
#if defined(PI_VNNI)
    if (tt == GEMM_TILE) {
        row_kblock_kn(type, row, nb, b0, b1, x, vb, GEMM_TILE, out);
        return;
    }
#endif
    row_kblock_kn(type, row, nb, b0, b1, x, vb, tt, out);
}

/* ---- dot and gemm drivers, both block families ------------------------------------ */

/* The types computed as K super-blocks against PI_VEC_Q8_K (the kgroup ones are groups). */
INLINE int is_k_quant(int type) {
    return !is_kgroup(type) &&
           (type == PI_TYPE_Q2_K || type == PI_TYPE_Q3_K || type == PI_TYPE_Q4_K ||
            type == PI_TYPE_Q5_K || type == PI_TYPE_Q6_K || type == PI_TYPE_ID_IQ4_XS);
}

/* out[t] for tt tokens: units [u0, u1) of one row, a unit being 256 values (a group of
 * 8 32-blocks or a K super-block). */
INLINE void row_units(int type, const uint8_t *row, int64_t n, int64_t u0, int64_t u1,
                      const uint8_t *x, size_t vb, int tt, float *out) {
    if (tt == 1) { /* decode: a literal count keeps the one accumulator in a register */
        if (is_k_quant(type))
            row_kblock_k(type, row, n / 256, u0, u1, x, 0, 1, out);
        else
            row_kblock_n(type, row, n / 32, u0, u1, x, 0, 1, out);
    } else if (is_k_quant(type)) {
        row_kblock_k(type, row, n / 256, u0, u1, x, vb, tt, out);
    } else {
        row_kblock_n(type, row, n / 32, u0, u1, x, vb, tt, out);
    }
}

/* Rows are summed in K-blocks of KB_UNITS units (2048 values), each reduced to a float
 * and added in order, by dot and gemm alike, so that they agree bit for bit. */
INLINE float dot_units(int type, const void *w, const void *x, int64_t n) {
    const int64_t nu = (n + 255) / 256;
    float sum = 0.0f;
    for (int64_t u0 = 0; u0 < nu; u0 += KB_UNITS) {
        float part;
        row_units(type, w, n, u0, u0 + KB_UNITS < nu ? u0 + KB_UNITS : nu, x, 0, 1, &part);
        sum += part;
    }
    return sum;
}

/* *y after K-block k: the K-blocks' sums added in order (every gemm path does it this
 * way, so that gemm equals dot bit for bit). */
INLINE void kblock_add(float *y, int64_t k, float part) {
    *y = k == 0 ? 0.0f + part : *y + part;
}

/* Y[t][r] for the tile's tokens after K-block k of row r. */
INLINE void kblock_to_y(int type, const uint8_t *row, int64_t n, int64_t k, const uint8_t *x,
                        size_t vb, int tt, float *y, int64_t ldy) {
    const int64_t nu = (n + 255) / 256, u0 = k * KB_UNITS;
    float part[GEMM_TILE];
    row_units(type, row, n, u0, u0 + KB_UNITS < nu ? u0 + KB_UNITS : nu, x, vb, tt, part);
    for (int t = 0; t < tt; t++)
        kblock_add(y + t * ldy, k, part[t]);
}

/* Decode (one token, 32-blocks, rows of at most one K-block): DEC_ROWS rows per call,
 * one after the other so that the weights stream in order, with one reduction for all
 * of them; the short rows of small models then overlap better. Each row's sum is formed
 * exactly as by row_kblock_n (same lanes, same reduction tree), so gemm equals dot. */
#define DEC_ROWS 2

/* hsum_ps of a and of b: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), both at once. */
INLINE void hsum2_ps(__m256 a, __m256 b, float *sa, float *sb) {
    __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    s = _mm256_add_ps(s, _mm256_permute_ps(s, 0x4e));
    s = _mm256_add_ps(s, _mm256_permute_ps(s, 0xb1));
    *sa = _mm256_cvtss_f32(s);
    *sb = _mm_cvtss_f32(_mm256_extractf128_ps(s, 1));
}

/* *y[i] = dot(rows[i], x), i < DEC_ROWS, n <= KB_UNITS * 256. */
/* The activation group xg with its low half (blocks 0-3) copied into the high half, for
 * two rows' partial groups merged into one (rows_ptr_to_y). */
INLINE void dup_low_half(const uint8_t *xg, uint8_t *out) {
    UNROLL
    for (int u = 0; u < 11; u++) /* 8 steps, d, s, sum */
        _mm256_storeu_si256((__m256i *)(void *)(out + 32 * u),
                            _mm256_permute4x64_epi64(loadu256(xg + 32 * u), 0x44));
}

/* dup_low_half of x's last group into xd when its partial group merges (1..4 blocks);
 * returns xd then, else NULL. */
INLINE const uint8_t *tail_dup(const uint8_t *x, int64_t n, uint8_t *xd) {
    const int rt = (int)(n / 32 % 8);
    if (rt == 0 || rt > 4)
        return NULL;
    dup_low_half(x + (size_t)(n / 256) * PI_Q8_0_GROUP_BYTES, xd);
    return xd;
}

/* xd: tail_dup of x. */
INLINE void rows_ptr_to_y(int type, const uint8_t *const *rows, int64_t n, const uint8_t *x,
                          const uint8_t *xd, float *const *y) {
    const int64_t nb = n / 32, gf = nb / 8;
    const int rt = (int)(nb % 8); /* blocks of the partial last group */
    const size_t gb = group_bytes(type);
    __m256 acc[DEC_ROWS];
    float part[DEC_ROWS];
    UNROLL
    for (int i = 0; i < DEC_ROWS; i++) {
        const uint8_t *r = rows[i];
        acc[i] = _mm256_setzero_ps();
        for (int64_t g = 0; g < gf; g++) {
            struct wgroup wg;
            load_group_at(type, r + (size_t)g * gb, 8, &wg);
            acc[i] = group_dot(type, &wg, x + (size_t)g * PI_Q8_0_GROUP_BYTES, acc[i]);
        }
    }
    /* A partial last group of at most 4 blocks: both rows' blocks in one group, one row
     * per half, against the activations' low half in both; each row's lanes get exactly
     * what their own group would give them (its high lanes would only add zeros). */
    const uint8_t *xl = x + (size_t)gf * PI_Q8_0_GROUP_BYTES;
    if (xd) {
        struct wgroup wg;
        const struct gsrc g = {rows[0] + (size_t)gf * gb, rows[1] + (size_t)gf * gb,
                               block_bytes(type), rt, rt};
        _Static_assert(DEC_ROWS == 2, "two rows per merged group");
        load_partial(type, &g, &wg);
        const struct gterms t = group_terms(type, &wg, xd);
        acc[0] = apply_terms(type, t, acc[0], 1);
        acc[1] = apply_terms(type, high_terms(t), acc[1], 1);
    } else if (rt > 0) {
        UNROLL
        for (int i = 0; i < DEC_ROWS; i++) {
            struct wgroup wg;
            load_group_at(type, rows[i] + (size_t)gf * gb, rt, &wg);
            acc[i] = group_dot(type, &wg, xl, acc[i]);
        }
    }
    UNROLL
    for (int i = 0; i < DEC_ROWS; i += 2)
        hsum2_ps(acc[i], acc[i + 1], part + i, part + i + 1);
    UNROLL
    for (int i = 0; i < DEC_ROWS; i++)
        *y[i] = 0.0f + part[i];
}

/* y[i] = dot(row i, x), i < DEC_ROWS, rows rb bytes apart, n <= KB_UNITS * 256. */
INLINE void rows_to_y(int type, const uint8_t *row, size_t rb, int64_t n, const uint8_t *x,
                      const uint8_t *xd, float *y) {
    const uint8_t *rows[DEC_ROWS];
    float *ys[DEC_ROWS];
    for (int i = 0; i < DEC_ROWS; i++) {
        rows[i] = row + (size_t)i * rb;
        ys[i] = y + i;
    }
    rows_ptr_to_y(type, rows, n, x, xd, ys);
}

#if !defined(PI_VNNI)
/* ---- the AVX2 panel gemm (prompts of the 32-block types and the K-quants) -----------
 *
 * gemm_units' tile path decodes a weight group (transpose and nibble split, about 30
 * shuffles) for every tile of 8 tokens and loads every activation step once per row; on
 * Zen 3 its 8 accumulators and 8 decoded steps do not fit 16 registers either. Here a
 * thread decodes 8 or 16 rows of one K-block once into a panel on its stack (per
 * group the 8 steps, for the signed types their signs too, then d and m:
 * panel_gb bytes), and a register tile of 2 rows x PANEL_TOKENS tokens runs over the
 * panel for every tile of tokens: per step 2 weight and PANEL_TOKENS activation loads
 * feed 2 * PANEL_TOKENS maddubs.
 *
 * Bit for bit with dot: each (row, token) gets the same exact integer block sums (4-bit
 * quants and MXFP4: 8 steps in int16; 5-bit: two halves of 4; Q8_0 and IQ4_NL: the sign
 * trick, widened every step: dot8_u4, dot8_u5, dot8_s4, dot8_s8), the same
 * fma(d * dx, isum, acc) (and fma(m, s, acc) for has_offset) in the same group order
 * into the same 8 lanes, hsum_ps per K-block, and the K-blocks added in order as
 * kblock_to_y does. The K-quants but IQ4_XS take the same loop nest with their own
 * panel (panel_row_k, panel_micro_k). Rates: docs/design.md, "The AVX2 panel gemm". */
#  define PANEL_BYTES      (KB_UNITS * 16 * 320) /* 40 KB of stack: 16 rows of 320-byte groups */
#  define PANEL_TOKENS     4  /* 2 x 4: 8 accumulators; 3, 5 and 6 measured slower */
#  define PANEL_MIN_TOKENS 16 /* fewer: the decode of a panel does not pay */


/* Bytes of one group in the panel: q [8][32], (signed types: s [8][32]), d [8], m [8]. */
INLINE size_t panel_gb(int type) {
    return signed_type(type) ? 576 : 320;
}

/* Groups [g0, g1) of one row (nb blocks) decoded into the panel at o. */
INLINE void panel_row(int type, const uint8_t *row, int64_t nb, int64_t g0, int64_t g1,
                      uint8_t *o) {
    const size_t gb = group_bytes(type), pg = panel_gb(type), sd = pg - 64;
    for (int64_t g = g0; g < g1; g++, o += pg) {
        struct wgroup wg;
        load_group_at(type, row + (size_t)g * gb, group_r(nb, g), &wg);
        UNROLL
        for (int u = 0; u < 8; u++) {
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * u), wg.q[u]);
            if (signed_type(type))
                _mm256_storeu_si256((__m256i *)(void *)(o + 256 + 32 * u), wg.s[u]);
        }
        _mm256_storeu_ps((float *)(void *)(o + sd), wg.d);
        if (has_offset(type))
            _mm256_storeu_ps((float *)(void *)(o + sd + 32), wg.m);
    }
}

/* out[r][t] = the K-block's sum for panel rows p0, p1 (ng groups) and the tokens at
 * x + t * vb (x: the K-block's first activation group). */
INLINE void panel_micro(int type, const uint8_t *p0, const uint8_t *p1, int64_t ng,
                        const uint8_t *x, size_t vb, float out[2][PANEL_TOKENS]) {
    const __m256i one = _mm256_set1_epi16(1);
    const size_t pg = panel_gb(type), sd = pg - 64;
    /* passes of steps summed in int16 before one madd: 4-bit quants and MXFP4 one of 8,
     * 5-bit two of 4, Q8_0 and IQ4_NL eight of 1 */
    const int sgn = signed_type(type),
              nu = type == PI_TYPE_Q4_0 || type == PI_TYPE_Q4_1 || type == PI_TYPE_MXFP4 ? 8
                   : sgn                                                              ? 1
                                                                                      : 4;
    __m256 acc[2][PANEL_TOKENS];
    UNROLL
    for (int t = 0; t < PANEL_TOKENS; t++)
        acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *o[2] = {p0 + (size_t)g * pg, p1 + (size_t)g * pg};
        const uint8_t *xg = x + (size_t)g * PI_Q8_0_GROUP_BYTES;
        __m256i is[2][PANEL_TOKENS];
        UNROLL
        for (int u0 = 0; u0 < 8; u0 += nu) {
            __m256i s[2][PANEL_TOKENS];
            UNROLL
            for (int u = u0; u < u0 + nu; u++) {
                __m256i w[2], ws[2];
                UNROLL
                for (int r = 0; r < 2; r++) {
                    w[r] = _mm256_loadu_si256((const __m256i *)(const void *)(o[r] + 32 * u));
                    if (sgn)
                        ws[r] = _mm256_loadu_si256(
                            (const __m256i *)(const void *)(o[r] + 256 + 32 * u));
                }
                UNROLL
                for (int t = 0; t < PANEL_TOKENS; t++) {
                    __m256i xv = loadu256(xg + (size_t)t * vb + 32 * u);
                    __asm__("" : "+x"(xv)); /* one load for both rows */
                    UNROLL
                    for (int r = 0; r < 2; r++) {
                        const __m256i p = _mm256_maddubs_epi16(
                            w[r], sgn ? _mm256_sign_epi8(xv, ws[r]) : xv);
                        s[r][t] = u == u0 ? p : _mm256_add_epi16(s[r][t], p);
                        /* in place: otherwise gcc keeps every product for an add tree
                         * and spills most of them (52 -> 88 GMAC/s for Q4_0) */
                        __asm__("" : "+x"(s[r][t]));
                    }
                }
            }
            UNROLL
            for (int r = 0; r < 2; r++)
                UNROLL
            for (int t = 0; t < PANEL_TOKENS; t++) {
                const __m256i v = _mm256_madd_epi16(s[r][t], one);
                is[r][t] = u0 == 0 ? v : _mm256_add_epi32(is[r][t], v);
            }
        }
        UNROLL
        for (int r = 0; r < 2; r++) {
            const __m256 d = _mm256_loadu_ps((const float *)(const void *)(o[r] + sd));
            UNROLL
            for (int t = 0; t < PANEL_TOKENS; t++) {
                const uint8_t *xt = xg + (size_t)t * vb;
                const __m256 dx = _mm256_loadu_ps((const float *)(const void *)(xt + 256));
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(is[r][t]),
                                            acc[r][t]);
                if (has_offset(type))
                    acc[r][t] = _mm256_fmadd_ps(
                        _mm256_loadu_ps((const float *)(const void *)(o[r] + sd + 32)),
                        _mm256_loadu_ps((const float *)(const void *)(xt + 288)), acc[r][t]);
            }
        }
    }
    UNROLL
    for (int r = 0; r < 2; r++)
        UNROLL
    for (int t = 0; t < PANEL_TOKENS; t++)
        out[r][t] = hsum_ps(acc[r][t]);
}

/* The K-quants (Q2_K..Q6_K; not IQ4_XS) in the panel: per super-block the 8 decoded
 * chunks q (as k_decode leaves them), their 8 scale registers sc, aux, d and dmin:
 * PANEL_KGB bytes; the tile then does k_token's arithmetic for 2 rows x PANEL_TOKENS
 * tokens, with the same integer sums and the same float operations in the same order. */
#  define PANEL_KGB 576 /* q [8][32], sc [8][32], aux [32], d, dmin (552 used) */

INLINE int panel_k_type(int type) {
    return is_k_quant(type) && type != PI_TYPE_ID_IQ4_XS;
}

/* Super-blocks [b0, b1) of one row decoded into the panel at o. */
INLINE void panel_row_k(int type, const uint8_t *row, int64_t b0, int64_t b1, uint8_t *o) {
    for (int64_t b = b0; b < b1; b++, o += PANEL_KGB) {
        struct kblock kb;
        k_decode(type, row + (size_t)b * k_block_bytes(type), &kb);
        UNROLL
        for (int c = 0; c < 8; c++) {
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * c), kb.q[c]);
            _mm256_storeu_si256((__m256i *)(void *)(o + 256 + 32 * c), kb.sc[c]);
        }
        _mm256_storeu_si256((__m256i *)(void *)(o + 512), kb.aux);
        memcpy(o + 544, &kb.d, sizeof kb.d);
        memcpy(o + 548, &kb.dmin, sizeof kb.dmin);
    }
}

/* out[r][t] = the sum over super-blocks [b0, b1) (of nb) for panel rows p0, p1 and the
 * PI_VEC_Q8_K vectors at x + t * vb. */
INLINE void panel_micro_k(int type, const uint8_t *p0, const uint8_t *p1, int64_t b0, int64_t b1,
                          int64_t nb, const uint8_t *x, size_t vb, float out[2][PANEL_TOKENS]) {
    const int has_min = type == PI_TYPE_Q2_K || type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K;
    __m256 acc[2][PANEL_TOKENS];
    UNROLL
    for (int t = 0; t < PANEL_TOKENS; t++)
        acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *o[2] = {p0 + (size_t)(b - b0) * PANEL_KGB,
                               p1 + (size_t)(b - b0) * PANEL_KGB};
        __m256i is[2][PANEL_TOKENS];
        UNROLL
        for (int c = 0; c < 8; c++) {
            const __m256i w0 = loadu256(o[0] + 32 * c), w1 = loadu256(o[1] + 32 * c);
            UNROLL
            for (int t = 0; t < PANEL_TOKENS; t++) {
                __m256i xv = loadu256(xk_q(x + (size_t)t * vb, b) + 32 * c);
                __asm__("" : "+x"(xv)); /* one load for both rows */
                const __m256i v0 = _mm256_madd_epi16(_mm256_maddubs_epi16(w0, xv),
                                                     loadu256(o[0] + 256 + 32 * c));
                const __m256i v1 = _mm256_madd_epi16(_mm256_maddubs_epi16(w1, xv),
                                                     loadu256(o[1] + 256 + 32 * c));
                is[0][t] = c == 0 ? v0 : _mm256_add_epi32(is[0][t], v0);
                is[1][t] = c == 0 ? v1 : _mm256_add_epi32(is[1][t], v1);
                __asm__("" : "+x"(is[0][t]), "+x"(is[1][t])); /* in place (see panel_micro) */
            }
        }
        UNROLL
        for (int r = 0; r < 2; r++) {
            float d, dmin;
            memcpy(&d, o[r] + 544, sizeof d);
            memcpy(&dmin, o[r] + 548, sizeof dmin);
            UNROLL
            for (int t = 0; t < PANEL_TOKENS; t++) {
                const uint8_t *xt = x + (size_t)t * vb;
                const float dx = xk_d(xt, nb, b);
                const __m256i aux =
                    _mm256_madd_epi16(loadu256(o[r] + 512), loadu256(xk_bsum(xt, nb, b)));
                __m256i isum = is[r][t];
                if (type == PI_TYPE_Q6_K)
                    isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(aux, 5));
                if (type == PI_TYPE_Q3_K)
                    isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(aux, 2));
                acc[r][t] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(isum), acc[r][t]);
                if (has_min)
                    acc[r][t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dx),
                                                 _mm256_cvtepi32_ps(aux), acc[r][t]);
            }
        }
    }
    UNROLL
    for (int r = 0; r < 2; r++)
        UNROLL
    for (int t = 0; t < PANEL_TOKENS; t++)
        out[r][t] = hsum_ps(acc[r][t]);
}

/* Rows [r0, r1) of W (or of idx, as gemm_units takes them) for tokens [0, nt), nt a
 * multiple of PANEL_TOKENS. */
INLINE void gemm_panel(int type, const uint8_t *W, size_t rb, const int32_t *idx, int64_t r0,
                       int64_t r1, const uint8_t *X, size_t vb, int64_t nt, float *Y,
                       int64_t ldy, int64_t n) {
    const int kq = panel_k_type(type);
    /* units: groups of 8 blocks, or K super-blocks */
    const int64_t nb = n / 32, nu = kq ? n / 256 : (nb + 7) / 8,
                  nk = (nu + KB_UNITS - 1) / KB_UNITS;
    const size_t prow = (size_t)KB_UNITS * (kq ? PANEL_KGB : panel_gb(type));
    /* rows per panel: 16 of the unsigned types' groups, 8 of the others' (whose groups
     * are 576 bytes); the stack is all the panel has, and callers' threads may have
     * small stacks (musl's default is 128 KB) */
    const int64_t prows = (int64_t)(PANEL_BYTES / prow);
    _Alignas(32) uint8_t panel[PANEL_BYTES];
    _Static_assert(PANEL_BYTES / (KB_UNITS * 576) >= 2, "a panel holds a tile's two rows");
    for (int64_t c0 = r0; c0 < r1; c0 += prows) {
        const int64_t c1 = c0 + prows < r1 ? c0 + prows : r1;
        for (int64_t k = 0; k < nk; k++) {
            const int64_t g0 = k * KB_UNITS, g1 = g0 + KB_UNITS < nu ? g0 + KB_UNITS : nu;
            for (int64_t i = c0; i < c1; i++) {
                const uint8_t *row = W + (size_t)(idx ? idx[i] : i) * rb;
                if (kq)
                    panel_row_k(type, row, g0, g1, panel + (size_t)(i - c0) * prow);
                else
                    panel_row(type, row, nb, g0, g1, panel + (size_t)(i - c0) * prow);
            }
            for (int64_t t0 = 0; t0 < nt; t0 += PANEL_TOKENS) {
                const uint8_t *xt = X + (size_t)t0 * vb;
                for (int64_t i = c0; i < c1; i += 2) {
                    const int two = i + 1 < c1; /* a last odd row is computed twice */
                    const uint8_t *pa = panel + (size_t)(i - c0) * prow;
                    float out[2][PANEL_TOKENS];
                    if (kq)
                        panel_micro_k(type, pa, two ? pa + prow : pa, g0, g1, n / 256, xt, vb,
                                      out);
                    else
                        panel_micro(type, pa, two ? pa + prow : pa, g1 - g0,
                                    xt + (size_t)g0 * PI_Q8_0_GROUP_BYTES, vb, out);
                    for (int r = 0; r < 1 + two; r++) {
                        float *y = Y + t0 * ldy + (idx ? idx[i + r] : i + r);
                        for (int t = 0; t < PANEL_TOKENS; t++)
                            kblock_add(y + t * ldy, k, out[r][t]);
                    }
                }
            }
        }
    }
}
#endif

#if defined(PI_VNNI)
#  include "gemm_pairs_avx512.h"
#  include "gemm_packed_avx512.h"
#endif

/* The loop nest of gemm: blocks of rows that fit in L2 (GEMM_L2_BYTES); inside them
 * tiles of GEMM_TILE tokens, each decoded weight unit serving the whole tile. When the
 * tile's activations fit in L1 (decode: one token) each row is done in one pass, so the
 * weights stream in order; otherwise K-blocks are the outer loop, so the tile's
 * activations for one K-block (GEMM_TILE * 2.5 KB) stay in L1 while the rows pass. */
INLINE void gemm_units(int type, const void *W, size_t rb, const int32_t *idx, int64_t nr,
                       const void *X, size_t vb, int64_t nt, float *Y, int64_t ldy, int64_t n) {
    const int64_t nk = ((n + 255) / 256 + KB_UNITS - 1) / KB_UNITS;
    const int64_t rows = rb < GEMM_L2_BYTES ? (int64_t)(GEMM_L2_BYTES / rb) : 1;
    const uint8_t *w = W;
    int64_t tp = 0; /* tokens [0, tp) go through the panel gemm */
#if !defined(PI_VNNI)
    if (type != PI_TYPE_ID_IQ4_XS && nt >= PANEL_MIN_TOKENS) /* (no kgroup types here) */
        tp = nt / PANEL_TOKENS * PANEL_TOKENS;
#endif
    for (int64_t r0 = 0; r0 < nr; r0 += rows) {
        const int64_t r1 = r0 + rows < nr ? r0 + rows : nr;
#if !defined(PI_VNNI)
        if (tp > 0)
            gemm_panel(type, w, rb, idx, r0, r1, X, vb, tp, Y, ldy, n);
#endif
        for (int64_t t0 = tp; t0 < nt; t0 += GEMM_TILE) {
            const int tt = nt - t0 < GEMM_TILE ? (int)(nt - t0) : GEMM_TILE;
            const uint8_t *x = (const uint8_t *)X + (size_t)t0 * vb;
            float *y = Y + t0 * ldy;
#if defined(PI_VNNI)
            if (tt == GEMM_TILE && (pairs_type(type) || kpairs_type(type))) {
                gemm_tile_pairs(type, w, rb, idx, r0, r1, x, vb, y, ldy, n);
                continue;
            }
#endif
            if (tt == 1 && nk == 1 && !is_k_quant(type) && !idx) {
                _Alignas(32) uint8_t xdb[PI_Q8_0_GROUP_BYTES];
                const uint8_t *xd = tail_dup(x, n, xdb);
                int64_t r = r0;
                for (; r + DEC_ROWS <= r1; r += DEC_ROWS)
                    rows_to_y(type, w + (size_t)r * rb, rb, n, x, xd, y + r);
                for (; r < r1; r++)
                    kblock_to_y(type, w + (size_t)r * rb, n, 0, x, vb, 1, y + r, ldy);
            } else if ((size_t)tt * vb <= GEMM_L1_ACT_BYTES) {
                for (int64_t i = r0; i < r1; i++)
                    for (int64_t k = 0; k < nk; k++) {
                        const int64_t r = idx ? idx[i] : i;
                        kblock_to_y(type, w + (size_t)r * rb, n, k, x, vb, tt, y + r, ldy);
                    }
            } else {
                for (int64_t k = 0; k < nk; k++)
                    for (int64_t i = r0; i < r1; i++) {
                        const int64_t r = idx ? idx[i] : i;
                        kblock_to_y(type, w + (size_t)r * rb, n, k, x, vb, tt, y + r, ldy);
                    }
            }
        }
    }
}

/* The decode case of a sparse matmul: y[idx[i]] = dot(row idx[i], x) for i < ni, rows
 * in list order, DEC_ROWS at a time where rows fit one K-block (as the dense decode
 * does, so each value equals dot), with the rows PREFETCH_AHEAD further down the list
 * requested meanwhile, into L2: on Zen 4, L2 prefetches of whole rows doubled the rate
 * of scattered 2.3 KB rows over L1 prefetches (7 -> 12-14 GB/s on one thread). */
#define PREFETCH_AHEAD 8
INLINE void prefetch_row(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64)
        _mm_prefetch((const char *)p + o, _MM_HINT_T1);
}

INLINE void gemv_idx_units(int type, const void *W, size_t rb, const int32_t *idx, int64_t ni,
                           const void *X, float *Y, int64_t n) {
    const uint8_t *w = W, *x = X;
    const int pairs = !is_k_quant(type) && (n + 255) / 256 <= KB_UNITS;
    _Alignas(32) uint8_t xdb[PI_Q8_0_GROUP_BYTES];
    const uint8_t *xd = pairs ? tail_dup(x, n, xdb) : NULL;
    for (int64_t i = 0; i < ni && i < PREFETCH_AHEAD; i++)
        prefetch_row(w + (size_t)idx[i] * rb, rb);
    int64_t i = 0;
    if (pairs)
        for (; i + DEC_ROWS <= ni; i += DEC_ROWS) {
            const uint8_t *rows[DEC_ROWS];
            float *ys[DEC_ROWS];
            for (int k = 0; k < DEC_ROWS; k++) {
                if (i + k + PREFETCH_AHEAD < ni)
                    prefetch_row(w + (size_t)idx[i + k + PREFETCH_AHEAD] * rb, rb);
                rows[k] = w + (size_t)idx[i + k] * rb;
                ys[k] = Y + idx[i + k];
            }
            rows_ptr_to_y(type, rows, n, x, xd, ys);
        }
    for (; i < ni; i++) {
        if (i + PREFETCH_AHEAD < ni)
            prefetch_row(w + (size_t)idx[i + PREFETCH_AHEAD] * rb, rb);
        Y[idx[i]] = dot_units(type, w + (size_t)idx[i] * rb, x, n);
    }
}

/* gemm_few: Y[t * ldy + r] = dot(row r, x_t) for r < nr, t < nt, with few vectors (a
 * decode step's GQA group of queries against a Q8_0 K cache): each pair of rows is
 * decoded once (load_group / load_partial, the transposes) for all the vectors, then
 * every vector's terms are applied exactly as rows_ptr_to_y applies one vector's (same
 * lanes, same merged partial group, same reduction), so each value is the dot's bit for
 * bit. Rows past one K-block, K-quants and more than FEW_MAX vectors take gemm_units. */
#define FEW_MAX 16

/* The activation group xg with blocks 0 .. nb-1 (nb = 1 or 2) repeated over all 8 lanes
 * (lane j holds block j % nb), for rows of nb blocks packed 8 / nb to a group. */
INLINE void repeat_blocks(const uint8_t *xg, int nb, uint8_t *out) {
    const __m256i pick = nb == 1 ? _mm256_setzero_si256()
                                 : _mm256_setr_epi32(0, 1, 0, 1, 0, 1, 0, 1);
    UNROLL
    for (int u = 0; u < 11; u++) /* 8 steps, d, s, sum */
        _mm256_storeu_si256((__m256i *)(void *)(out + 32 * u),
                            _mm256_permutevar8x32_epi32(loadu256(xg + 32 * u), pick));
}

/* gemm_few of rows of nb = 1 or 2 blocks (head dims 32 and 64): 8 / nb rows per group,
 * row i in lanes nb i .. nb i + nb - 1 (its blocks copied next to each other in bl), the
 * activations' blocks repeated to match (xr, repeat_blocks). Lane values are those of
 * the rows' own groups (the same d, dx and integer sums); a row's value is its lane
 * (nb = 1) or its two lanes added (hadd), plus 0: what rows_ptr_to_y's reduction gives,
 * its other lanes being exact zeros (+0 + x = x, and the final 0 + makes -0 +0 alike).
 * Returns the rows done (a multiple of 8 / nb). */
INLINE int64_t few_packed(int type, const uint8_t *w, size_t rb, int64_t nr,
                          const uint8_t (*xr)[PI_Q8_0_GROUP_BYTES], int64_t nt, float *Y,
                          int64_t ldy, int nb) {
    const int rpg = 8 / nb;
    const size_t rowb = (size_t)nb * block_bytes(type);
    _Alignas(32) uint8_t bl[8 * 34];
    int64_t r = 0;
    for (; r + rpg <= nr; r += rpg) {
        for (int i = 0; i < rpg; i++)
            memcpy(bl + (size_t)i * rowb, w + (size_t)(r + i) * rb, rowb);
        struct wgroup wg;
        load_group_at(type, bl, 8, &wg);
        for (int64_t t = 0; t < nt; t++) {
            __m256 a = group_dot(type, &wg, xr[t], _mm256_setzero_ps());
            if (nb == 2) /* rows 0, 1 in lanes 0, 1; rows 2, 3 in lanes 4, 5 */
                a = _mm256_hadd_ps(a, a);
            _Alignas(32) float v[8];
            _mm256_store_ps(v, _mm256_add_ps(_mm256_setzero_ps(), a));
            float *y = Y + t * ldy + r;
            if (nb == 2) {
                y[0] = v[0];
                y[1] = v[1];
                y[2] = v[4];
                y[3] = v[5];
            } else {
                memcpy(y, v, sizeof v);
            }
        }
    }
    return r;
}

INLINE void gemm_few_units(int type, const void *W, size_t rb, int64_t nr, const void *X,
                           size_t vb, int64_t nt, float *Y, int64_t ldy, int64_t n) {
    if (nt > FEW_MAX || is_k_quant(type) || is_kgroup(type) || (n + 255) / 256 > KB_UNITS) {
        gemm_units(type, W, rb, NULL, nr, X, vb, nt, Y, ldy, n);
        return;
    }
    const uint8_t *w = W, *x = X;
    const int64_t nb = n / 32, gf = nb / 8;
    const int rt = (int)(nb % 8), merge = rt > 0 && rt <= 4;
    const size_t gb = group_bytes(type), tail = (size_t)gf * PI_Q8_0_GROUP_BYTES;
    _Alignas(32) uint8_t xd[FEW_MAX][PI_Q8_0_GROUP_BYTES];
    int64_t r = 0;
    if (nb <= 2) { /* 4 or 8 rows to a group */
        for (int64_t t = 0; t < nt; t++)
            repeat_blocks(x + (size_t)t * vb, (int)nb, xd[t]);
        r = few_packed(type, w, rb, nr, (const uint8_t (*)[PI_Q8_0_GROUP_BYTES])xd, nt, Y, ldy,
                       (int)nb);
    }
    for (int64_t t = 0; merge && t < nt; t++)
        dup_low_half(x + (size_t)t * vb + tail, xd[t]);
    for (; r + 2 <= nr; r += 2) {
        const uint8_t *r0 = w + (size_t)r * rb, *r1 = r0 + rb;
        __m256 acc[FEW_MAX][2];
        for (int64_t t = 0; t < nt; t++)
            acc[t][0] = acc[t][1] = _mm256_setzero_ps();
        for (int64_t g = 0; g < gf; g++) {
            struct wgroup w0, w1;
            load_group_at(type, r0 + (size_t)g * gb, 8, &w0);
            load_group_at(type, r1 + (size_t)g * gb, 8, &w1);
            for (int64_t t = 0; t < nt; t++) {
                const uint8_t *xg = x + (size_t)t * vb + (size_t)g * PI_Q8_0_GROUP_BYTES;
                acc[t][0] = group_dot(type, &w0, xg, acc[t][0]);
                acc[t][1] = group_dot(type, &w1, xg, acc[t][1]);
            }
        }
        if (merge) { /* both rows' partial groups in one, as rows_ptr_to_y merges them */
            struct wgroup wg;
            const struct gsrc src = {r0 + (size_t)gf * gb, r1 + (size_t)gf * gb, block_bytes(type),
                                     rt, rt};
            load_partial(type, &src, &wg);
            for (int64_t t = 0; t < nt; t++) {
                const struct gterms tm = group_terms(type, &wg, xd[t]);
                acc[t][0] = apply_terms(type, tm, acc[t][0], 1);
                acc[t][1] = apply_terms(type, high_terms(tm), acc[t][1], 1);
            }
        } else if (rt > 0) {
            struct wgroup w0, w1;
            load_group_at(type, r0 + (size_t)gf * gb, rt, &w0);
            load_group_at(type, r1 + (size_t)gf * gb, rt, &w1);
            for (int64_t t = 0; t < nt; t++) {
                const uint8_t *xl = x + (size_t)t * vb + tail;
                acc[t][0] = group_dot(type, &w0, xl, acc[t][0]);
                acc[t][1] = group_dot(type, &w1, xl, acc[t][1]);
            }
        }
        for (int64_t t = 0; t < nt; t++) {
            float a, b;
            hsum2_ps(acc[t][0], acc[t][1], &a, &b);
            Y[t * ldy + r] = 0.0f + a;
            Y[t * ldy + r + 1] = 0.0f + b;
        }
    }
    for (; r < nr; r++)
        for (int64_t t = 0; t < nt; t++)
            Y[t * ldy + r] = dot_units(type, w + (size_t)r * rb, x + (size_t)t * vb, n);
}

/* clang-format off */
#define UNIT_KERNELS(name, TYPE)                                                                   \
    static float NAME(dot_##name)(const void *w, const void *x, int64_t n) {                       \
        return dot_units(TYPE, w, x, n);                                                           \
    }                                                                                              \
    static void NAME(gemm_##name)(const void *W, size_t rb, int64_t nr, const void *X,             \
                                  size_t vb, int64_t nt, float *Y, int64_t ldy, int64_t n) {       \
        gemm_units(TYPE, W, rb, NULL, nr, X, vb, nt, Y, ldy, n);                                   \
    }                                                                                              \
    static void NAME(gemm_idx_##name)(const void *W, size_t rb, const int32_t *idx, int64_t ni,    \
                                      const void *X, size_t vb, int64_t nt, float *Y, int64_t ldy, \
                                      int64_t n) {                                                 \
        gemm_units(TYPE, W, rb, idx, ni, X, vb, nt, Y, ldy, n);                                    \
    }                                                                                              \
    static void NAME(gemv_idx_##name)(const void *W, size_t rb, const int32_t *idx, int64_t ni,    \
                                      const void *X, float *Y, int64_t n) {                        \
        gemv_idx_units(TYPE, W, rb, idx, ni, X, Y, n);                                             \
    }                                                                                              \
    static void NAME(gemm_few_##name)(const void *W, size_t rb, int64_t nr, const void *X,         \
                                      size_t vb, int64_t nt, float *Y, int64_t ldy, int64_t n) {   \
        gemm_few_units(TYPE, W, rb, nr, X, vb, nt, Y, ldy, n);                                     \
    }
#if defined(PI_VNNI)
#  define PACKED_KERNELS(name, TYPE)                                                               \
    static void NAME(pack_x_##name)(const void *X, size_t vb, int64_t nt, int64_t n,              \
                                    int64_t tile0, int64_t tile1, void *XP) {                     \
        pack_x_units(TYPE, X, vb, nt, n, tile0, tile1, XP);                                        \
    }                                                                                              \
    static void NAME(gemm_packed_##name)(const void *W, size_t rb, int64_t nr, const void *XP,     \
                                         int64_t nt, float *Y, int64_t ldy, int64_t n,             \
                                         void *scratch) {                                          \
        gemm_packed_units(TYPE, W, rb, nr, XP, nt, Y, ldy, n, scratch);                            \
    }
PACKED_KERNELS(q4_0, PI_TYPE_Q4_0)
PACKED_KERNELS(q4_1, PI_TYPE_Q4_1)
PACKED_KERNELS(q5_0, PI_TYPE_Q5_0)
PACKED_KERNELS(q5_1, PI_TYPE_Q5_1)
PACKED_KERNELS(q8_0, PI_TYPE_Q8_0)
PACKED_KERNELS(iq4_nl, PI_TYPE_ID_IQ4_NL)
PACKED_KERNELS(mxfp4, PI_TYPE_MXFP4)
PACKED_KERNELS(q4_k, PI_TYPE_Q4_K)
PACKED_KERNELS(q5_k, PI_TYPE_Q5_K)
PACKED_KERNELS(iq4_xs, PI_TYPE_ID_IQ4_XS)
PACKED_KERNELS(q6_k, PI_TYPE_Q6_K)
PACKED_KERNELS(q3_k, PI_TYPE_Q3_K)
#  undef PACKED_KERNELS
#endif
UNIT_KERNELS(q4_0, PI_TYPE_Q4_0)
UNIT_KERNELS(q4_1, PI_TYPE_Q4_1)
UNIT_KERNELS(q5_0, PI_TYPE_Q5_0)
UNIT_KERNELS(q5_1, PI_TYPE_Q5_1)
UNIT_KERNELS(q8_0, PI_TYPE_Q8_0)
UNIT_KERNELS(q4_k, PI_TYPE_Q4_K)
UNIT_KERNELS(q5_k, PI_TYPE_Q5_K)
UNIT_KERNELS(q6_k, PI_TYPE_Q6_K)
UNIT_KERNELS(iq4_nl, PI_TYPE_ID_IQ4_NL)
UNIT_KERNELS(q2_k, PI_TYPE_Q2_K)
UNIT_KERNELS(q3_k, PI_TYPE_Q3_K)
UNIT_KERNELS(iq4_xs, PI_TYPE_ID_IQ4_XS)
UNIT_KERNELS(mxfp4, PI_TYPE_MXFP4)
/* clang-format on */
#undef UNIT_KERNELS

/* ---- float weights -------------------------------------------------------------------- */

/* 8 weights of a float type at element i as floats. */
INLINE __m256 load8(int type, const uint8_t *w, int64_t i) {
    switch (type) {
    case PI_TYPE_F32:
        return _mm256_loadu_ps((const float *)(const void *)(w + 4 * i));
    case PI_TYPE_F16:
        return _mm256_cvtph_ps(loadu128(w + 2 * i));
    default: /* BF16: the top half of a float */
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(w + 2 * i)), 16));
    }
}

INLINE float load1(int type, const uint8_t *w, int64_t i) {
    uint16_t h;
    float f;
    switch (type) {
    case PI_TYPE_F32:
        memcpy(&f, w + 4 * i, 4);
        return f;
    case PI_TYPE_F16:
        memcpy(&h, w + 2 * i, 2);
        return _cvtsh_ss(h);
    default: {
        uint32_t u;
        memcpy(&h, w + 2 * i, 2);
        u = (uint32_t)h << 16;
        memcpy(&f, &u, 4);
        return f;
    }
    }
}

/* 4 independent accumulators hide the FMA latency; the tail is scalar. */
INLINE float dot_float(int type, const void *wv, const void *xv, int64_t n) {
    const uint8_t *w = wv;
    const float *x = xv;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    float tail = 0.0f;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load8(type, w, i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(load8(type, w, i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(load8(type, w, i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(load8(type, w, i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(load8(type, w, i), _mm256_loadu_ps(x + i), a0);
    for (; i < n; i++)
        tail += load1(type, w, i) * x[i];
    return hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) + tail;
}

/* Register tile of float gemm: FT_ROWS rows x FT_TOKS tokens of 8-lane accumulators;
 * each converted weight vector feeds FT_TOKS FMAs and each activation load FT_ROWS.
 * With 32 vector registers (the AVX-512 build) the tile is twice as tall. */
#if defined(PI_VNNI)
#  define FT_ROWS 4
#else
#  define FT_ROWS 2
#endif
#define FT_TOKS   4
#define FT_KBLOCK 1024 /* values per K-block: FT_TOKS activations of it (16 KB) stay in L1 */

/* Y[t][r] (+)= the tile's dot products over values [k0, k1) (k1 - k0 a multiple of 8, or
 * the row's end with a scalar tail). */
INLINE void float_tile(int type, const uint8_t *w, size_t rb, const float *const x[FT_TOKS],
                       int64_t k0, int64_t k1, float *y, int64_t ldy) {
    __m256 acc[FT_ROWS][FT_TOKS];
    const int64_t k8 = k0 + (k1 - k0) / 8 * 8;
    UNROLL
    for (int i = 0; i < FT_ROWS; i++) {
        UNROLL
        for (int t = 0; t < FT_TOKS; t++)
            acc[i][t] = _mm256_setzero_ps();
    }
    for (int64_t k = k0; k < k8; k += 8) {
        __m256 v[FT_ROWS];
        UNROLL
        for (int i = 0; i < FT_ROWS; i++)
            v[i] = load8(type, w + (size_t)i * rb, k);
        UNROLL
        for (int t = 0; t < FT_TOKS; t++) {
            __m256 xv = _mm256_loadu_ps(x[t] + k);
            UNROLL
            for (int i = 0; i < FT_ROWS; i++)
                acc[i][t] = _mm256_fmadd_ps(v[i], xv, acc[i][t]);
        }
    }
    for (int i = 0; i < FT_ROWS; i++) {
        for (int t = 0; t < FT_TOKS; t++) {
            float sum = hsum_ps(acc[i][t]);
            for (int64_t k = k8; k < k1; k++)
                sum += load1(type, w + (size_t)i * rb, k) * x[t][k];
            y[t * ldy + i] = k0 == 0 ? sum : y[t * ldy + i] + sum;
        }
    }
}

/* Blocks of rows that fit in L2, inside them tiles of FT_TOKS tokens, inside them
 * K-blocks, inside them tiles of FT_ROWS rows. Rows and tokens left over by the tiles
 * use dot. */
INLINE void gemm_float(int type, const void *W, size_t rb, int64_t nr, const void *X, size_t vb,
                       int64_t nt, float *Y, int64_t ldy, int64_t n, pi_dot_fn dot) {
    const int64_t ntt = nt / FT_TOKS * FT_TOKS;
    int64_t rows = rb < GEMM_L2_BYTES ? (int64_t)(GEMM_L2_BYTES / rb) : 1;
    rows = rows < FT_ROWS ? FT_ROWS : rows / FT_ROWS * FT_ROWS;
    for (int64_t r0 = 0; r0 < nr; r0 += rows) {
        const int64_t r1 = r0 + rows < nr ? r0 + rows : nr;
        const int64_t rt = r0 + (r1 - r0) / FT_ROWS * FT_ROWS; /* end of whole row tiles */
        for (int64_t t0 = 0; t0 < ntt; t0 += FT_TOKS) {
            const float *x[FT_TOKS];
            for (int t = 0; t < FT_TOKS; t++)
                x[t] = (const float *)(const void *)((const uint8_t *)X + (size_t)(t0 + t) * vb);
            for (int64_t k0 = 0; k0 < n; k0 += FT_KBLOCK)
                for (int64_t r = r0; r < rt; r += FT_ROWS)
                    float_tile(type, (const uint8_t *)W + (size_t)r * rb, rb, x, k0,
                               k0 + FT_KBLOCK < n ? k0 + FT_KBLOCK : n, Y + t0 * ldy + r, ldy);
        }
        for (int64_t r = r0; r < r1; r++)
            for (int64_t t = r < rt ? ntt : 0; t < nt; t++)
                Y[t * ldy + r] = dot((const uint8_t *)W + (size_t)r * rb,
                                     (const uint8_t *)X + (size_t)t * vb, n);
    }
}

static void NAME(dot_f16_rows)(float *s, const void *x, size_t stride, int64_t nrows,
                               const float *q, int64_t n) {
    for (int64_t r = 0; r < nrows; r++)
        s[r] = dot_float(PI_TYPE_F16, (const uint8_t *)x + (size_t)r * stride, q, n);
}

/* y += a[r] * x_r (F16) over the rows, product and sum rounded apart as in the
 * reference. y is kept in registers across the rows, NV vectors (8 NV values) at a
 * time. */
INLINE void axpy_cols(float *y, const float *a, const uint8_t *x, size_t stride, int64_t nrows,
                      int64_t i, int nv) {
    __m256 acc[8];
    UNROLL
    for (int v = 0; v < nv; v++)
        acc[v] = _mm256_loadu_ps(y + i + 8 * v);
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *xr = x + (size_t)r * stride;
        const __m256 va = _mm256_broadcast_ss(a + r);
        UNROLL
        for (int v = 0; v < nv; v++)
            acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(va, load8(PI_TYPE_F16, xr, i + 8 * v)));
    }
    UNROLL
    for (int v = 0; v < nv; v++)
        _mm256_storeu_ps(y + i + 8 * v, acc[v]);
}

static void NAME(axpy_f16)(float *y, const float *a, const void *xv, size_t stride, int64_t nrows,
                           int64_t n);

/* attn_scores: 8 rows at a time; each query keeps one accumulator per row (lanes as
 * pi_attn_score_ref's) and the 8 are reduced together by hsum8, hsum_ps's tree for
 * each. With one or two queries the rows are converted as they are used; with more,
 * converted once into kf and reloaded for each query. */
#define ATT_ROWS 8
#define ATT_MAXD 256 /* the widest head converted in one piece */
INLINE float att_tail(float v, const float *q, const uint8_t *x, int64_t n8, int64_t n) {
    for (int64_t i = n8; i < n; i++) {
        const float prod = q[i] * load1(PI_TYPE_F16, x, i);
        v = v + prod;
    }
    return v;
}

/* hsum_ps of a[0..7] in one vector, lane k = row k: the same adds in the same order
 * (lo + hi halves, then lanes 0+2 and 1+3, then their sum), 8 rows at a time. */
INLINE __m256 hsum8(const __m256 a[8]) {
    __m256 s[4];
    UNROLL
    for (int k = 0; k < 4; k++)
        s[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x31));
    const __m256 u0 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], 0x44),
                                    _mm256_shuffle_ps(s[0], s[1], 0xee));
    const __m256 u1 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], 0x44),
                                    _mm256_shuffle_ps(s[2], s[3], 0xee));
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, 0x88), _mm256_shuffle_ps(u0, u1, 0xdd));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The nk (<= 8) scores of rows r0.. for query j out of its 8 accumulators. */
INLINE void att_store(float *s, const __m256 acc[8], int nk, const float *qj, const uint8_t *x,
                      size_t stride, int64_t n8, int64_t n) {
    const __m256 v = hsum8(acc);
    if (nk == ATT_ROWS && n8 == n) {
        _mm256_storeu_ps(s, v);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, v);
    for (int k = 0; k < nk; k++)
        s[k] = att_tail(t[k], qj, x + (size_t)k * stride, n8, n);
}

static void NAME(attn_scores)(float *s, int64_t lds, const void *xv, size_t stride, int64_t nrows,
                              const float *q, int64_t ldq, int64_t nq, int64_t n) {
    const uint8_t *x = xv;
    const int64_t n8 = n / 8 * 8;
    _Alignas(32) float kf[ATT_ROWS * ATT_MAXD];
    for (int64_t r0 = 0; r0 < nrows; r0 += ATT_ROWS) {
        const int nk = nrows - r0 < ATT_ROWS ? (int)(nrows - r0) : ATT_ROWS;
        const uint8_t *xr = x + (size_t)r0 * stride;
        const uint8_t *rp[ATT_ROWS]; /* rows past nrows read the last one again */
        UNROLL
        for (int k = 0; k < ATT_ROWS; k++)
            rp[k] = xr + (size_t)(k < nk ? k : nk - 1) * stride;
        if (nq <= 2 || n8 > ATT_MAXD) {
            for (int64_t j = 0; j < nq; j += 2) {
                const int two = j + 1 < nq;
                const float *q0 = q + j * ldq, *q1 = q + (j + two) * ldq;
                __m256 a0[ATT_ROWS], a1[ATT_ROWS];
                UNROLL
                for (int k = 0; k < ATT_ROWS; k++)
                    a0[k] = a1[k] = _mm256_setzero_ps();
                if (two)
                    for (int64_t c = 0; c < n8; c += 8) {
                        const __m256 qa = _mm256_loadu_ps(q0 + c), qb = _mm256_loadu_ps(q1 + c);
                        UNROLL
                        for (int k = 0; k < ATT_ROWS; k++) {
                            const __m256 v = _mm256_cvtph_ps(loadu128(rp[k] + 2 * c));
                            a0[k] = _mm256_fmadd_ps(qa, v, a0[k]);
                            a1[k] = _mm256_fmadd_ps(qb, v, a1[k]);
                        }
                    }
                else
                    for (int64_t c = 0; c < n8; c += 8) {
                        const __m256 qa = _mm256_loadu_ps(q0 + c);
                        UNROLL
                        for (int k = 0; k < ATT_ROWS; k++)
                            a0[k] = _mm256_fmadd_ps(qa, _mm256_cvtph_ps(loadu128(rp[k] + 2 * c)),
                                                    a0[k]);
                    }
                att_store(s + j * lds + r0, a0, nk, q0, xr, stride, n8, n);
                if (two)
                    att_store(s + (j + 1) * lds + r0, a1, nk, q1, xr, stride, n8, n);
            }
            continue;
        }
        UNROLL
        for (int k = 0; k < ATT_ROWS; k++)
            for (int64_t c = 0; c < n8; c += 8)
                _mm256_store_ps(kf + k * n8 + c, _mm256_cvtph_ps(loadu128(rp[k] + 2 * c)));
        for (int64_t j = 0; j < nq; j++) {
            const float *qj = q + j * ldq;
            __m256 acc[ATT_ROWS];
            UNROLL
            for (int k = 0; k < ATT_ROWS; k++)
                acc[k] = _mm256_setzero_ps();
            for (int64_t c = 0; c < n8; c += 8) {
                const __m256 qc = _mm256_loadu_ps(qj + c);
                UNROLL
                for (int k = 0; k < ATT_ROWS; k++)
                    acc[k] = _mm256_fmadd_ps(qc, _mm256_load_ps(kf + k * n8 + c), acc[k]);
            }
            att_store(s + j * lds + r0, acc, nk, qj, xr, stride, n8, n);
        }
    }
}

/* axpy_f16_q: NV vectors of columns and up to NQ queries in registers per pass over the
 * rows, each row's columns converted once for them: the per-value arithmetic of
 * axpy_f16. One query takes 64 columns a pass, two 32, more 16 (6 at a time). */
INLINE void axq_cols(float *y, int64_t ldy, const float *a, int64_t lda, const uint8_t *x,
                     size_t stride, int64_t nrows, int m, int64_t i, int NV, int NQ) {
    __m256 acc[6][8];
    UNROLL
    for (int j = 0; j < NQ; j++)
        UNROLL
        for (int v = 0; v < NV; v++)
            acc[j][v] = j < m ? _mm256_loadu_ps(y + j * ldy + i + 8 * v) : _mm256_setzero_ps();
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *xr = x + (size_t)r * stride + 2 * i;
        __m256 v8[8];
        UNROLL
        for (int v = 0; v < NV; v++)
            v8[v] = _mm256_cvtph_ps(loadu128(xr + 16 * v));
        UNROLL
        for (int j = 0; j < NQ; j++)
            if (j < m) {
                const __m256 va = _mm256_broadcast_ss(a + j * lda + r);
                UNROLL
                for (int v = 0; v < NV; v++)
                    acc[j][v] = _mm256_add_ps(acc[j][v], _mm256_mul_ps(va, v8[v]));
            }
    }
    UNROLL
    for (int j = 0; j < NQ; j++)
        if (j < m)
            UNROLL
            for (int v = 0; v < NV; v++)
                _mm256_storeu_ps(y + j * ldy + i + 8 * v, acc[j][v]);
}

static void NAME(axpy_f16)(float *y, const float *a, const void *xv, size_t stride, int64_t nrows,
                           int64_t n);

static void NAME(axpy_f16_q)(float *y, int64_t ldy, const float *a, int64_t lda, const void *xv,
                             size_t stride, int64_t nrows, int64_t nq, int64_t n) {
    const uint8_t *x = xv;
    const int w = nq == 1 ? 64 : nq == 2 ? 32 : 16; /* columns per pass */
    int64_t i = 0;
    for (; i + w <= n; i += w)
        for (int64_t j0 = 0; j0 < nq; j0 += 6) {
            const int m = nq - j0 < 6 ? (int)(nq - j0) : 6;
            float *yj = y + j0 * ldy;
            const float *aj = a + j0 * lda;
            if (w == 64)
                axq_cols(yj, ldy, aj, lda, x, stride, nrows, m, i, 8, 1);
            else if (w == 32)
                axq_cols(yj, ldy, aj, lda, x, stride, nrows, m, i, 4, 2);
            else
                axq_cols(yj, ldy, aj, lda, x, stride, nrows, m, i, 2, 6);
        }
    if (i < n) /* the last columns, query by query, as axpy_f16 does them */
        for (int64_t j = 0; j < nq; j++)
            NAME(axpy_f16)(y + j * ldy + i, a + j * lda, x + 2 * i, stride, nrows, n - i);
}

static void NAME(axpy_f16)(float *y, const float *a, const void *xv, size_t stride, int64_t nrows,
                           int64_t n) {
    const uint8_t *x = xv;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        axpy_cols(y, a, x, stride, nrows, i, 8);
    for (; i + 8 <= n; i += 8)
        axpy_cols(y, a, x, stride, nrows, i, 1);
    for (; i < n; i++) {
        float s = y[i];
        for (int64_t r = 0; r < nrows; r++)
            s = s + a[r] * load1(PI_TYPE_F16, x + (size_t)r * stride, i);
        y[i] = s;
    }
}

/* clang-format off */
#define FLOAT_KERNELS(name, TYPE)                                                                  \
    static float NAME(dot_##name)(const void *w, const void *x, int64_t n) {                       \
        return dot_float(TYPE, w, x, n);                                                           \
    }                                                                                              \
    static void NAME(gemm_##name)(const void *W, size_t rb, int64_t nr, const void *X,             \
                                  size_t vb, int64_t nt, float *Y, int64_t ldy, int64_t n) {       \
        gemm_float(TYPE, W, rb, nr, X, vb, nt, Y, ldy, n, NAME(dot_##name));                       \
    }
FLOAT_KERNELS(f32, PI_TYPE_F32)
FLOAT_KERNELS(f16, PI_TYPE_F16)
FLOAT_KERNELS(bf16, PI_TYPE_BF16)
/* clang-format on */
#undef FLOAT_KERNELS

/* ---- dequantization (bit-exact with runtime/dequant.c: same products, no FMA) ---------- */

static void NAME(to_float_f16)(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(loadu128(p + 2 * i)));
    for (; i < n; i++)
        dst[i] = load1(PI_TYPE_F16, p, i);
}

/* vcvtps2ph rounds to nearest even as pi_fp32_to_fp16 does; only a NaN may come out
 * otherwise (it sets the quiet bit), so a vector holding one is done one value at a
 * time. */
static void NAME(from_float_f16)(const float *x, void *y, int64_t n) {
    uint8_t *o = y;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
            break;
        _mm_storeu_si128((__m128i *)(void *)(o + 2 * i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) {
        const uint16_t h = pi_fp32_to_fp16(x[i]);
        memcpy(o + 2 * i, &h, 2);
    }
}

static void NAME(to_float_bf16)(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load8(PI_TYPE_BF16, p, i));
    for (; i < n; i++)
        dst[i] = load1(PI_TYPE_BF16, p, i);
}

/* 32 int8 quants in order -> d * q as 32 floats. */
INLINE void store_scaled32(__m256i q, __m256 d, float *dst) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(dst, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(
        dst + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(
                                                    _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

INLINE void to_float_sym(int type, const uint8_t *b, float *dst, int64_t n) {
    const size_t bb = type == PI_TYPE_Q4_0 ? 18 : type == PI_TYPE_Q5_0 ? 22 : 34;
    for (int64_t i = 0; i < n / 32; i++, b += bb, dst += 32)
        store_scaled32(sym_quants(type, b), _mm256_set1_ps(f16_at(b)), dst);
}

static void NAME(to_float_q4_0)(const void *src, float *dst, int64_t n) {
    to_float_sym(PI_TYPE_Q4_0, src, dst, n);
}

static void NAME(to_float_q5_0)(const void *src, float *dst, int64_t n) {
    to_float_sym(PI_TYPE_Q5_0, src, dst, n);
}

static void NAME(to_float_q8_0)(const void *src, float *dst, int64_t n) {
    to_float_sym(PI_TYPE_Q8_0, src, dst, n);
}

static void NAME(to_float_q4_1)(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 20, dst += 32) {
        __m256 m = _mm256_set1_ps(f16_at(b + 2));
        store_scaled32(unpack_nibbles(b + 4), _mm256_set1_ps(f16_at(b)), dst);
        for (int k = 0; k < 32; k += 8)
            _mm256_storeu_ps(dst + k, _mm256_add_ps(_mm256_loadu_ps(dst + k), m));
    }
}

/* Q4_K: x = (d*sc)*q - (dmin*mn) per sub-block of 32. */
static void NAME(to_float_q4_k)(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 144, dst += 256) {
        uint8_t scm[16];
        float d = f16_at(b), dmin = f16_at(b + 2);
        _mm_storeu_si128((__m128i *)(void *)scm, k4_scales(b + 4));
        for (int s = 0; s < 8; s++) {
            __m256i q = loadu256(b + 16 + 32 * (s / 2));
            __m256 dm = _mm256_set1_ps(dmin * (float)scm[8 + s]);
            if (s & 1)
                q = _mm256_srli_epi16(q, 4);
            q = _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
            store_scaled32(q, _mm256_set1_ps(d * (float)scm[s]), dst + 32 * s);
            for (int k = 0; k < 32; k += 8)
                _mm256_storeu_ps(dst + 32 * s + k,
                                 _mm256_sub_ps(_mm256_loadu_ps(dst + 32 * s + k), dm));
        }
    }
}

/* Q6_K: x = (d*scale[e/16]) * (q - 32), quants as in dot_q6_k_avx2. */
static void NAME(to_float_q6_k)(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    for (int64_t i = 0; i < n / 256; i++, b += 210, dst += 256) {
        float d = f16_at(b + 208);
        UNROLL
        for (int hh = 0; hh < 2; hh++) {
            __m256i l0 = loadu256(b + 64 * hh), l1 = loadu256(b + 64 * hh + 32);
            __m256i qh = loadu256(b + 128 + 32 * hh);
            __m256i c[4];
            c[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            c[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            c[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_and_si256(qh, m30));
            c[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            for (int k = 0; k < 4; k++) {
                const int e = 128 * hh + 32 * k;
                __m256i q = _mm256_sub_epi8(c[k], _mm256_set1_epi8(32));
                __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
                __m128i half[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
                for (int j = 0; j < 4; j++) {
                    const int8_t sc = (int8_t)b[192 + (e + 8 * j) / 16];
                    __m256 ds = _mm256_set1_ps(d * (float)sc);
                    __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(half[j]));
                    _mm256_storeu_ps(dst + e + 8 * j, _mm256_mul_ps(ds, v));
                }
            }
        }
    }
}

/* 16 int8 quants in order -> dl * q - ml as 16 floats (Q2_K; Q3_K with ml = 0, which
 * leaves every product as it is). */
INLINE void store_scaled16(__m128i q, float dl, float ml, float *dst) {
    const __m256 d = _mm256_set1_ps(dl), m = _mm256_set1_ps(ml);
    _mm256_storeu_ps(dst, _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))), m));
    _mm256_storeu_ps(dst + 8, _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                             _mm_srli_si128(q, 8)))),
                                            m));
}

/* Q2_K, Q3_K: x = (d*scale)*q (- dmin*min for Q2_K) per 16 values, quants as in their
 * k_decode (Q3_K's without the +4). */
INLINE void to_float_k2_k3(int type, const uint8_t *b, float *dst) {
    struct kblock kb;
    uint8_t scm[16];
    k_decode(type, b, &kb);
    if (type == PI_TYPE_Q3_K)
        _mm_storeu_si128((__m128i *)(void *)scm, q3_k_scales(b + 96));
    else
        _mm_storeu_si128((__m128i *)(void *)scm, loadu128(b));
    for (int c = 0; c < 8; c++) {
        __m256i q = kb.q[c];
        if (type == PI_TYPE_Q3_K)
            q = _mm256_sub_epi8(q, _mm256_set1_epi8(4));
        for (int half = 0; half < 2; half++) {
            const int g = 2 * c + half;
            const __m128i qh = half ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
            if (type == PI_TYPE_Q3_K)
                store_scaled16(qh, kb.d * (float)(int8_t)scm[g], 0.0f, dst + 16 * g);
            else
                store_scaled16(qh, kb.d * (float)(scm[g] & 15), kb.dmin * (float)(scm[g] >> 4),
                               dst + 16 * g);
        }
    }
}

static void NAME(to_float_q2_k)(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 84, dst += 256)
        to_float_k2_k3(PI_TYPE_Q2_K, b, dst);
}

static void NAME(to_float_q3_k)(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 110, dst += 256)
        to_float_k2_k3(PI_TYPE_Q3_K, b, dst);
}

static void NAME(to_float_iq4_nl)(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const __m256i grid = iq4_grid256();
    for (int64_t i = 0; i < n / 32; i++, b += 18, dst += 32)
        store_scaled32(_mm256_shuffle_epi8(grid, unpack_nibbles(b + 2)), _mm256_set1_ps(f16_at(b)),
                       dst);
}

static void NAME(to_float_mxfp4)(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const __m256i grid = mxfp4_grid256();
    for (int64_t i = 0; i < n / 32; i++, b += 17, dst += 32)
        store_scaled32(_mm256_shuffle_epi8(grid, unpack_nibbles(b + 1)), _mm256_set1_ps(e8m0_at(b)),
                       dst);
}

/* IQ4_XS: x = (d*ls)*grid[q] per sub-block of 32 (kb.sc[c] holds scale c in every word). */
static void NAME(to_float_iq4_xs)(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 256; i++, b += 136, dst += 256) {
        struct kblock kb;
        iq4_xs_decode(b, &kb);
        for (int c = 0; c < 8; c++) {
            const float ls = (float)(int16_t)_mm256_extract_epi16(kb.sc[c], 0);
            store_scaled32(kb.q[c], _mm256_set1_ps(kb.d * ls), dst + 32 * c);
        }
    }
}

/* ---- axpy over one weight row (sparse down projection) ---------------------------------
 * The same fused multiply-adds as the reference (fmaf), so the same bytes. */

/* y[0..32) += s * q (+ t when off): q 32 int8 quants in value order. */
INLINE void axpy32(float *y, __m256i q, __m256 s, __m256 t, int off) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int j = 0; j < 4; j++) {
        const __m256 q8 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[j]));
        const __m256 yv = _mm256_loadu_ps(y + 8 * j);
        _mm256_storeu_ps(y + 8 * j, off ? _mm256_add_ps(yv, _mm256_fmadd_ps(s, q8, t))
                                        : _mm256_fmadd_ps(s, q8, yv));
    }
}

INLINE void axpy_float(int type, float *y, float a, const uint8_t *w, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 32; j += 8)
            _mm256_storeu_ps(y + i + j,
                             _mm256_fmadd_ps(va, load8(type, w, i + j), _mm256_loadu_ps(y + i + j)));
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load8(type, w, i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] = fmaf(a, load1(type, w, i), y[i]);
}

static void NAME(axpy_f32)(float *y, float a, const void *w, int64_t n) {
    axpy_float(PI_TYPE_F32, y, a, w, n);
}

static void NAME(axpy_f16_row)(float *y, float a, const void *w, int64_t n) {
    axpy_float(PI_TYPE_F16, y, a, w, n);
}

INLINE void axpy_sym(int type, float *y, float a, const uint8_t *b, int64_t n) {
    const size_t bb = type == PI_TYPE_Q4_0 ? 18 : type == PI_TYPE_Q5_0 ? 22 : 34;
    for (int64_t i = 0; i < n / 32; i++, b += bb, y += 32)
        axpy32(y, sym_quants(type, b), _mm256_set1_ps(a * f16_at(b)), _mm256_setzero_ps(), 0);
}

static void NAME(axpy_q4_0)(float *y, float a, const void *w, int64_t n) {
    axpy_sym(PI_TYPE_Q4_0, y, a, w, n);
}

static void NAME(axpy_q4_1)(float *y, float a, const void *w, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 20, y += 32)
        axpy32(y, unpack_nibbles(b + 4), _mm256_set1_ps(a * f16_at(b)),
               _mm256_set1_ps(a * f16_at(b + 2)), 1);
}

static void NAME(axpy_q5_0)(float *y, float a, const void *w, int64_t n) {
    axpy_sym(PI_TYPE_Q5_0, y, a, w, n);
}

static void NAME(axpy_q8_0)(float *y, float a, const void *w, int64_t n) {
    axpy_sym(PI_TYPE_Q8_0, y, a, w, n);
}

/* Many rows into one y: per block of 32 columns, y is loaded once, every row's product
 * is added in row order (the same fused multiply-adds as row-by-row axpy), and y is
 * stored once. */
INLINE void axpy_rows_quant(int type, float *y, const float *a, const uint8_t *const *w,
                            int64_t nrows, int64_t n) {
    const size_t bb = type == PI_TYPE_Q4_0 ? 18 : type == PI_TYPE_Q4_1 ? 20 : type == PI_TYPE_Q5_0 ? 22 : 34;
    for (int64_t b = 0; b < n / 32; b++) {
        __m256 acc[4];
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_loadu_ps(y + 32 * b + 8 * j);
        for (int64_t r = 0; r < nrows; r++) {
            const uint8_t *p = w[r] + (size_t)b * bb;
            __m256i q;
            __m256 s = _mm256_set1_ps(a[r] * f16_at(p)), t = _mm256_setzero_ps();
            if (type == PI_TYPE_Q4_1) {
                q = unpack_nibbles(p + 4);
                t = _mm256_set1_ps(a[r] * f16_at(p + 2));
            } else {
                q = sym_quants(type, p);
            }
            __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
            __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            for (int j = 0; j < 4; j++) {
                const __m256 q8 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[j]));
                acc[j] = type == PI_TYPE_Q4_1 ? _mm256_add_ps(acc[j], _mm256_fmadd_ps(s, q8, t))
                                              : _mm256_fmadd_ps(s, q8, acc[j]);
            }
        }
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(y + 32 * b + 8 * j, acc[j]);
    }
}

INLINE void axpy_rows_float(int type, float *y, const float *a, const uint8_t *const *w,
                            int64_t nrows, int64_t n) {
    const size_t es = type == PI_TYPE_F32 ? 4 : 2;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 acc[4];
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_loadu_ps(y + i + 8 * j);
        for (int64_t r = 0; r < nrows; r++) {
            const __m256 va = _mm256_set1_ps(a[r]);
            for (int j = 0; j < 4; j++)
                acc[j] = _mm256_fmadd_ps(va, load8(type, w[r], i + 8 * j), acc[j]);
        }
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(y + i + 8 * j, acc[j]);
    }
    for (int64_t r = 0; r < nrows && i < n; r++) /* the tail, row by row */
        axpy_float(type, y + i, a[r], w[r] + (size_t)i * es, n - i);
}

#define AXPY_ROWS(name, TYPE, impl)                                                                \
    static void NAME(axpy_rows_##name)(float *y, const float *a, const uint8_t *const *w,          \
                                       int64_t nrows, int64_t n) {                                 \
        impl(TYPE, y, a, w, nrows, n);                                                             \
    }
AXPY_ROWS(f32, PI_TYPE_F32, axpy_rows_float)
AXPY_ROWS(f16, PI_TYPE_F16, axpy_rows_float)
AXPY_ROWS(q4_0, PI_TYPE_Q4_0, axpy_rows_quant)
AXPY_ROWS(q4_1, PI_TYPE_Q4_1, axpy_rows_quant)
AXPY_ROWS(q5_0, PI_TYPE_Q5_0, axpy_rows_quant)
AXPY_ROWS(q8_0, PI_TYPE_Q8_0, axpy_rows_quant)
#undef AXPY_ROWS

/* ---- the fast mode's down projection: coefficients in 8 bits, sums in integers ----------
 * (kernels.h, axpy_rows_i8). Per group of 16 rows and 8 blocks at a time, first the
 * coefficients of all 8 blocks (a vector per row, a lane per block: the rows' scales,
 * times a[r], their largest |c| per block, the 8-bit q and their sums), then per block
 * four rows at a time: rows r, r+2 in one register's lanes and r+1, r+3 in another,
 * interleaved bytewise (unpacklo/hi) so that each 16-bit lane holds one column's nibbles
 * of two rows; masked, one maddubs with the pairs' 8-bit coefficients adds both rows'
 * products (columns 0-7 and 8-15, and shifted 16-23 and 24-31). The two lanes sum at
 * the end; 16 rows of nibbles (0..15) times |q| <= 127 stay within int16 (30480), and
 * the nibbles' offset of 8 comes off once per block as 8 * sum(q). */
INLINE __m128i scales8(const uint8_t *p, size_t bb, int64_t b0, int64_t nb) {
    uint16_t h[8];
    for (int i = 0; i < 8; i++)
        if (b0 + i < nb)
            memcpy(&h[i], p + (size_t)(b0 + i) * bb, 2);
        else
            h[i] = 0;
    return _mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3], (short)h[4],
                          (short)h[5], (short)h[6], (short)h[7]);
}

/* Four rows' 32 bytes of one block interleaved so that each 32-bit lane holds one
 * column of the four rows: u0 columns 0-3 | 16-19, u1 4-7 | 20-23, u2 8-11 | 24-27,
 * u3 12-15 | 28-31 (unpack 8 then 16 bits). */
INLINE void interleave4(__m256i A, __m256i B, __m256i C, __m256i D, __m256i *u) {
    const __m256i ab0 = _mm256_unpacklo_epi8(A, B), ab1 = _mm256_unpackhi_epi8(A, B);
    const __m256i cd0 = _mm256_unpacklo_epi8(C, D), cd1 = _mm256_unpackhi_epi8(C, D);
    u[0] = _mm256_unpacklo_epi16(ab0, cd0);
    u[1] = _mm256_unpackhi_epi16(ab0, cd0);
    u[2] = _mm256_unpacklo_epi16(ab1, cd1);
    u[3] = _mm256_unpackhi_epi16(ab1, cd1);
}

/* One group's 8-bit coefficients for blocks b0 .. b0+7 (kernels.h, axpy_rows_i8): scl[r]
 * holds row r's 8 block scales (rows k .. 15 unused), a the group's k activations. Out:
 * sc the blocks' steps m / 127, sq the sums of their 8-bit q, quad[j] rows 4j .. 4j+3's
 * q as the four bytes of each block's lane (rows past k: 0); returns the mask of the
 * blocks that take the 8-bit path (finite, m >= 1e-30). */
INLINE int i8_coefs(const __m256 *scl, const float *a, int k, float *sc, int32_t *sq,
                    int32_t (*quad)[8]) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(INFINITY), tiny = _mm256_set1_ps(1e-30f);
    const __m256 c127 = _mm256_set1_ps(127.0f);
    const __m256i ff = _mm256_set1_epi32(0xff);
    __m256 c[16];
    __m256 m = _mm256_setzero_ps(), fin = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    UNROLL
    for (int r = 0; r < 16; r++) {
        if (r >= k) {
            c[r] = _mm256_setzero_ps();
            continue;
        }
        c[r] = _mm256_mul_ps(scl[r], _mm256_set1_ps(a[r]));
        const __m256 ab = _mm256_and_ps(c[r], absm);
        fin = _mm256_and_ps(fin, _mm256_cmp_ps(ab, inf, _CMP_LT_OQ));
        m = _mm256_max_ps(m, ab);
    }
    const int ok = _mm256_movemask_ps(_mm256_and_ps(fin, _mm256_cmp_ps(m, tiny, _CMP_GE_OQ)));
    const __m256 inv = _mm256_div_ps(c127, m);
    _mm256_storeu_ps(sc, _mm256_div_ps(m, c127));
    __m256i sum = _mm256_setzero_si256();
    UNROLL
    for (int j = 0; j < 4; j++) {
        __m256i qd = _mm256_setzero_si256();
        for (int i = 0; i < 4; i++) {
            const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(c[4 * j + i], inv));
            sum = _mm256_add_epi32(sum, q);
            qd = _mm256_or_si256(qd, _mm256_slli_epi32(_mm256_and_si256(q, ff), 8 * i));
        }
        _mm256_storeu_si256((__m256i *)quad[j], qd);
    }
    _mm256_storeu_si256((__m256i *)sq, sum);
    return ok;
}

INLINE void axpy_rows_i8(int type, float *y, const float *a, const uint8_t *const *w,
                         int64_t nrows, int64_t n) {
    const size_t bb = type == PI_TYPE_Q4_0 ? 18 : type == PI_TYPE_Q5_0 ? 22 : 34;
    const int64_t nb = n / 32;
    const __m256i m0f = _mm256_set1_epi8(0x0f);
    /* lane 0: bytes 0, 1 (rows r, r+1) of each 32-bit quad; lane 1: bytes 2, 3 */
    const __m256i pat = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2,
                                         3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    for (int64_t g = 0; g < nrows; g += 16) {
        const int k = nrows - g < 16 ? (int)(nrows - g) : 16;
        const int k4 = (k + 3) & ~3;
        const uint8_t *p[16];
        for (int r = 0; r < 16; r++)
            p[r] = w[g + (r < k ? r : 0)];
        for (int64_t b0 = 0; b0 < nb; b0 += 8) {
            __m256 scl[16];
            for (int r = 0; r < k; r++)
                scl[r] = _mm256_cvtph_ps(scales8(p[r], bb, b0, nb));
            _Alignas(32) float sc[8];
            _Alignas(32) int32_t sq[8], quad[4][8];
            const int ok = i8_coefs(scl, a + g, k, sc, sq, quad);
            const int64_t be = b0 + 8 < nb ? b0 + 8 : nb;
            for (int64_t b = b0; b < be; b++) {
                const int l = (int)(b - b0);
                const size_t off = (size_t)b * bb;
                float *yb = y + 32 * b;
                if (!(ok >> l & 1)) { /* the exact path */
                    for (int r = 0; r < k; r++)
                        axpy32(yb, sym_quants(type, p[r] + off),
                               _mm256_set1_ps(a[g + r] * f16_at(p[r] + off)), _mm256_setzero_ps(), 0);
                    continue;
                }
                if (type == PI_TYPE_Q8_0 || type == PI_TYPE_Q5_0) {
                    /* four rows a step: their bytes interleaved (unpack 8 then 16 bits) so
                     * that each 32-bit lane holds one column of the four rows; maddubs
                     * of unsigned bytes with signed coefficients (Q8_0: the magnitudes
                     * with the coefficients carrying the bytes' signs, at most
                     * 2 * 128 * 127 per 16-bit lane; Q5_0: the quants 0..31, whose
                     * offset of 16 comes off once per block as 16 * sum(q)), madd with
                     * ones sums the two pairs into int32. Lanes: x0 columns 0-3 |
                     * 16-19, x1 4-7 | 20-23, x2 8-11 | 24-27, x3 12-15 | 28-31. */
                    const __m256i ones = _mm256_set1_epi16(1);
#if defined(PI_VNNI)
                    const __m256i flip = _mm256_set1_epi8((char)0x80);
#endif
                    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                                      _mm256_setzero_si256(), _mm256_setzero_si256()};
                    for (int j = 0; j < k4 / 4; j++) {
                        const __m256i cp = _mm256_set1_epi32(quad[j][l]);
                        __m256i A, B, C, D;
                        if (type == PI_TYPE_Q5_0) {
                            A = unpack_q5(p[4 * j] + off + 2), B = unpack_q5(p[4 * j + 1] + off + 2);
                            C = unpack_q5(p[4 * j + 2] + off + 2), D = unpack_q5(p[4 * j + 3] + off + 2);
                        } else {
                            A = loadu256(p[4 * j] + off + 2), B = loadu256(p[4 * j + 1] + off + 2);
                            C = loadu256(p[4 * j + 2] + off + 2), D = loadu256(p[4 * j + 3] + off + 2);
                        }
                        __m256i x[4];
                        interleave4(A, B, C, D, x);
#if defined(PI_VNNI)
                        /* vpdpbusd of unsigned bytes: Q8_0's signed ones + 128 (the
                         * offset comes off as 128 * sum(q), like Q5_0's 16) */
                        (void)ones;
                        for (int i = 0; i < 4; i++)
                            acc[i] = _mm256_dpbusd_epi32(
                                acc[i], type == PI_TYPE_Q5_0 ? x[i] : _mm256_xor_si256(x[i], flip),
                                cp);
#else
                        for (int i = 0; i < 4; i++)
                            acc[i] = _mm256_add_epi32(
                                acc[i],
                                _mm256_madd_epi16(type == PI_TYPE_Q5_0
                                                      ? _mm256_maddubs_epi16(x[i], cp)
                                                      : _mm256_maddubs_epi16(_mm256_abs_epi8(x[i]),
                                                                             _mm256_sign_epi8(cp, x[i])),
                                                  ones));
#endif
                    }
                    const __m256 sv = _mm256_set1_ps(sc[l]);
#if defined(PI_VNNI)
                    const __m256i o = _mm256_set1_epi32((type == PI_TYPE_Q5_0 ? 16 : 128) * sq[l]);
#else
                    const __m256i o = _mm256_set1_epi32(type == PI_TYPE_Q5_0 ? 16 * sq[l] : 0);
#endif
                    const __m256i col[4] = {_mm256_permute2x128_si256(acc[0], acc[1], 0x20),
                                            _mm256_permute2x128_si256(acc[2], acc[3], 0x20),
                                            _mm256_permute2x128_si256(acc[0], acc[1], 0x31),
                                            _mm256_permute2x128_si256(acc[2], acc[3], 0x31)};
                    for (int i = 0; i < 4; i++)
                        _mm256_storeu_ps(yb + 8 * i,
                                         _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(_mm256_sub_epi32(col[i], o)),
                                                         _mm256_loadu_ps(yb + 8 * i)));
                    continue;
                }
                __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                                  _mm256_setzero_si256(), _mm256_setzero_si256()};
                for (int j = 0; j < k4 / 4; j++) {
                    const __m256i cp = _mm256_shuffle_epi8(_mm256_set1_epi32(quad[j][l]), pat);
                    const __m256i x = load2x128(p[4 * j] + off + 2, p[4 * j + 2] + off + 2);
                    const __m256i z = load2x128(p[4 * j + 1] + off + 2, p[4 * j + 3] + off + 2);
                    const __m256i u0 = _mm256_unpacklo_epi8(x, z), u1 = _mm256_unpackhi_epi8(x, z);
                    acc[0] = _mm256_add_epi16(acc[0], _mm256_maddubs_epi16(_mm256_and_si256(u0, m0f), cp));
                    acc[1] = _mm256_add_epi16(acc[1], _mm256_maddubs_epi16(_mm256_and_si256(u1, m0f), cp));
                    acc[2] = _mm256_add_epi16(
                        acc[2], _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(u0, 4), m0f), cp));
                    acc[3] = _mm256_add_epi16(
                        acc[3], _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(u1, 4), m0f), cp));
                }
                const __m128i o = _mm_set1_epi16((short)(8 * sq[l]));
                const __m256 sv = _mm256_set1_ps(sc[l]);
                for (int i = 0; i < 4; i++) {
                    const __m128i v = _mm_sub_epi16(_mm_add_epi16(_mm256_castsi256_si128(acc[i]),
                                                                  _mm256_extracti128_si256(acc[i], 1)), o);
                    _mm256_storeu_ps(yb + 8 * i, _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(v)),
                                                                 _mm256_loadu_ps(yb + 8 * i)));
                }
            }
        }
    }
}

/* axpy_rows_i8 for several tokens (kernels.h, axpy_rows_i8_tok). Per 64 rows (four
 * groups of 16) and 8 blocks, once for all tokens: the rows' quants as unsigned bytes
 * (Q4_0 nibbles 0..15, Q5_0 0..31; Q8_0's signed bytes, + 128 in the VNNI build), four
 * rows interleaved per 32-bit lane and the lanes ordered so that accumulator i holds
 * columns 8i .. 8i+7, and the rows' scales as floats. Then per token each group's
 * coefficients (i8_coefs) and per block y in registers across the groups: per four rows
 * one vpdpbusd per 8 columns (AVX2: maddubs + madd; Q8_0 with the sign trick), the
 * quants' offset off as off * sum(q), one FMA per group. The integer sums are exact and
 * the groups go in order, so the bytes are axpy_rows_i8's. */
enum { I8T_GROUPS = 4 };

INLINE void axpy_rows_i8_tok(int type, float *y, int64_t ldy, const float *a, int64_t lda,
                             int64_t ntok, const uint8_t *const *w, int64_t nrows, int64_t n) {
    const size_t bb = type == PI_TYPE_Q4_0 ? 18 : type == PI_TYPE_Q5_0 ? 22 : 34;
    const int64_t nb = n / 32;
#if defined(PI_VNNI)
    const int off = type == PI_TYPE_Q4_0 ? 8 : type == PI_TYPE_Q5_0 ? 16 : 128;
#else
    const int off = type == PI_TYPE_Q4_0 ? 8 : type == PI_TYPE_Q5_0 ? 16 : 0;
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    for (int64_t G = 0; G < nrows; G += 16 * I8T_GROUPS) {
        const int64_t rows = nrows - G < 16 * I8T_GROUPS ? nrows - G : 16 * I8T_GROUPS;
        const int ng = (int)((rows + 15) / 16);
        int kg[I8T_GROUPS];
        const uint8_t *p[I8T_GROUPS][16];
        for (int gi = 0; gi < ng; gi++) {
            const int64_t g = G + 16 * gi;
            kg[gi] = nrows - g < 16 ? (int)(nrows - g) : 16;
            for (int r = 0; r < 16; r++)
                p[gi][r] = w[g + (r < kg[gi] ? r : 0)];
        }
        for (int64_t b0 = 0; b0 < nb; b0 += 8) {
            const int64_t be = b0 + 8 < nb ? b0 + 8 : nb;
            __m256 scl[I8T_GROUPS][16];
            __m256i x[I8T_GROUPS][8][4][4]; /* [group][block][four rows j][8 columns] */
            for (int gi = 0; gi < ng; gi++) {
                const int k = kg[gi];
                for (int r = 0; r < k; r++)
                    scl[gi][r] = _mm256_cvtph_ps(scales8(p[gi][r], bb, b0, nb));
                for (int64_t b = b0; b < be; b++) {
                    const size_t o = (size_t)b * bb + 2;
                    for (int j = 0; j < (k + 3) / 4; j++) {
                        __m256i q[4];
                        for (int i = 0; i < 4; i++) {
                            const uint8_t *blk = p[gi][4 * j + i] + o;
                            if (type == PI_TYPE_Q4_0)
                                q[i] = unpack_nibbles(blk);
                            else if (type == PI_TYPE_Q5_0)
                                q[i] = unpack_q5(blk);
                            else
#if defined(PI_VNNI)
                                q[i] = _mm256_xor_si256(loadu256(blk), _mm256_set1_epi8((char)0x80));
#else
                                q[i] = loadu256(blk);
#endif
                        }
                        __m256i u[4];
                        interleave4(q[0], q[1], q[2], q[3], u);
                        __m256i *xb = x[gi][b - b0][j]; /* columns 0-7, 8-15, 16-23, 24-31 */
                        xb[0] = _mm256_permute2x128_si256(u[0], u[1], 0x20);
                        xb[1] = _mm256_permute2x128_si256(u[2], u[3], 0x20);
                        xb[2] = _mm256_permute2x128_si256(u[0], u[1], 0x31);
                        xb[3] = _mm256_permute2x128_si256(u[2], u[3], 0x31);
                    }
                }
            }
            for (int64_t t = 0; t < ntok; t++) {
                _Alignas(32) float sc[I8T_GROUPS][8];
                _Alignas(32) int32_t sq[I8T_GROUPS][8], quad[I8T_GROUPS][4][8];
                int ok[I8T_GROUPS], any = 0;
                const float *at = a + t * lda + G;
                for (int gi = 0; gi < ng; gi++) {
                    int nz = 0;
                    for (int r = 0; r < kg[gi]; r++)
                        nz |= at[16 * gi + r] != 0.0f;
                    ok[gi] = nz ? i8_coefs(scl[gi], at + 16 * gi, kg[gi], sc[gi], sq[gi], quad[gi]) : 0;
                    any |= nz << gi;
                }
                if (!any)
                    continue;
                float *yt = y + t * ldy;
#if defined(PI_VNNI)
                /* 512-bit: each four rows' 32 columns in two vpdpbusd (columns 0-15 and
                 * 16-31: the pack's xb[0], xb[1] and xb[2], xb[3] side by side), the
                 * group's sum and FMA on two registers; Zen 4 splits them in halves, but
                 * the instructions to issue halve */
                for (int64_t b = b0; b < be; b++) {
                    const int l = (int)(b - b0);
                    float *yb = yt + 32 * b;
                    __m512 yv[2] = {_mm512_loadu_ps(yb), _mm512_loadu_ps(yb + 16)};
                    for (int gi = 0; gi < ng; gi++) {
                        if (!(any >> gi & 1))
                            continue;
                        if (!(ok[gi] >> l & 1)) { /* the exact path */
                            const size_t o = (size_t)b * bb;
                            _mm512_storeu_ps(yb, yv[0]);
                            _mm512_storeu_ps(yb + 16, yv[1]);
                            for (int r = 0; r < kg[gi]; r++)
                                axpy32(yb, sym_quants(type, p[gi][r] + o),
                                       _mm256_set1_ps(at[16 * gi + r] * f16_at(p[gi][r] + o)),
                                       _mm256_setzero_ps(), 0);
                            yv[0] = _mm512_loadu_ps(yb);
                            yv[1] = _mm512_loadu_ps(yb + 16);
                            continue;
                        }
                        __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
                        for (int j = 0; j < (kg[gi] + 3) / 4; j++) {
                            const __m512i cp = _mm512_set1_epi32(quad[gi][j][l]);
                            const __m256i *xb = x[gi][l][j];
                            acc0 = _mm512_dpbusd_epi32(acc0, _mm512_loadu_si512(xb), cp);
                            acc1 = _mm512_dpbusd_epi32(acc1, _mm512_loadu_si512(xb + 2), cp);
                        }
                        const __m512 sv = _mm512_set1_ps(sc[gi][l]);
                        const __m512i oq = _mm512_set1_epi32(off * sq[gi][l]);
                        yv[0] = _mm512_fmadd_ps(sv, _mm512_cvtepi32_ps(_mm512_sub_epi32(acc0, oq)), yv[0]);
                        yv[1] = _mm512_fmadd_ps(sv, _mm512_cvtepi32_ps(_mm512_sub_epi32(acc1, oq)), yv[1]);
                    }
                    _mm512_storeu_ps(yb, yv[0]);
                    _mm512_storeu_ps(yb + 16, yv[1]);
                }
#else
                for (int64_t b = b0; b < be; b++) {
                    const int l = (int)(b - b0);
                    float *yb = yt + 32 * b;
                    __m256 yv[4];
                    UNROLL
                    for (int i = 0; i < 4; i++)
                        yv[i] = _mm256_loadu_ps(yb + 8 * i);
                    for (int gi = 0; gi < ng; gi++) {
                        if (!(any >> gi & 1))
                            continue;
                        if (!(ok[gi] >> l & 1)) { /* the exact path */
                            const size_t o = (size_t)b * bb;
                            for (int i = 0; i < 4; i++)
                                _mm256_storeu_ps(yb + 8 * i, yv[i]);
                            for (int r = 0; r < kg[gi]; r++)
                                axpy32(yb, sym_quants(type, p[gi][r] + o),
                                       _mm256_set1_ps(at[16 * gi + r] * f16_at(p[gi][r] + o)),
                                       _mm256_setzero_ps(), 0);
                            for (int i = 0; i < 4; i++)
                                yv[i] = _mm256_loadu_ps(yb + 8 * i);
                            continue;
                        }
                        __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                                          _mm256_setzero_si256(), _mm256_setzero_si256()};
                        for (int j = 0; j < (kg[gi] + 3) / 4; j++) {
                            const __m256i cp = _mm256_set1_epi32(quad[gi][j][l]);
                            const __m256i *xb = x[gi][l][j];
                            UNROLL
                            for (int i = 0; i < 4; i++)
                                acc[i] = _mm256_add_epi32(
                                    acc[i], _mm256_madd_epi16(
                                                type == PI_TYPE_Q8_0
                                                    ? _mm256_maddubs_epi16(_mm256_abs_epi8(xb[i]),
                                                                           _mm256_sign_epi8(cp, xb[i]))
                                                    : _mm256_maddubs_epi16(xb[i], cp),
                                                ones));
                        }
                        const __m256 sv = _mm256_set1_ps(sc[gi][l]);
                        const __m256i oq = _mm256_set1_epi32(off * sq[gi][l]);
                        UNROLL
                        for (int i = 0; i < 4; i++)
                            yv[i] = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i], oq)), yv[i]);
                    }
                    UNROLL
                    for (int i = 0; i < 4; i++)
                        _mm256_storeu_ps(yb + 8 * i, yv[i]);
                }
#endif
            }
        }
    }
}

#define AXPY_ROWS_TOK(name, TYPE)                                                                  \
    static void NAME(axpy_rows_i8_tok_##name)(float *y, int64_t ldy, const float *a, int64_t lda, \
                                              int64_t ntok, const uint8_t *const *w,              \
                                              int64_t nrows, int64_t n) {                         \
        axpy_rows_i8_tok(TYPE, y, ldy, a, lda, ntok, w, nrows, n);                                \
    }
AXPY_ROWS_TOK(q4_0, PI_TYPE_Q4_0)
AXPY_ROWS_TOK(q5_0, PI_TYPE_Q5_0)
AXPY_ROWS_TOK(q8_0, PI_TYPE_Q8_0)
#undef AXPY_ROWS_TOK

static void NAME(axpy_rows_i8_q4_0)(float *y, const float *a, const uint8_t *const *w,
                                    int64_t nrows, int64_t n) {
    axpy_rows_i8(PI_TYPE_Q4_0, y, a, w, nrows, n);
}

static void NAME(axpy_rows_i8_q5_0)(float *y, const float *a, const uint8_t *const *w,
                                    int64_t nrows, int64_t n) {
    axpy_rows_i8(PI_TYPE_Q5_0, y, a, w, nrows, n);
}

static void NAME(axpy_rows_i8_q8_0)(float *y, const float *a, const uint8_t *const *w,
                                    int64_t nrows, int64_t n) {
    axpy_rows_i8(PI_TYPE_Q8_0, y, a, w, nrows, n);
}

/* ---- table ---------------------------------------------------------------------------- */

static void set(struct pi_cpu_kernels *k, int type, pi_dot_fn dot, pi_gemm_fn gemm) {
    k->dot[type].dot = dot;
    k->dot[type].gemm = gemm;
}

#if defined(PI_VNNI)
void pi_cpu_kernels_avx512(struct pi_cpu_kernels *k) {
#else
void pi_cpu_kernels_avx2(struct pi_cpu_kernels *k) {
#endif
    set(k, PI_TYPE_F32, NAME(dot_f32), NAME(gemm_f32));
    set(k, PI_TYPE_F16, NAME(dot_f16), NAME(gemm_f16));
    set(k, PI_TYPE_BF16, NAME(dot_bf16), NAME(gemm_bf16));
    set(k, PI_TYPE_Q4_0, NAME(dot_q4_0), NAME(gemm_q4_0));
    set(k, PI_TYPE_Q4_1, NAME(dot_q4_1), NAME(gemm_q4_1));
    set(k, PI_TYPE_Q5_0, NAME(dot_q5_0), NAME(gemm_q5_0));
    set(k, PI_TYPE_Q5_1, NAME(dot_q5_1), NAME(gemm_q5_1));
    set(k, PI_TYPE_Q8_0, NAME(dot_q8_0), NAME(gemm_q8_0));
    set(k, PI_TYPE_Q4_K, NAME(dot_q4_k), NAME(gemm_q4_k));
    set(k, PI_TYPE_Q5_K, NAME(dot_q5_k), NAME(gemm_q5_k));
    set(k, PI_TYPE_Q6_K, NAME(dot_q6_k), NAME(gemm_q6_k));
    set(k, PI_TYPE_ID_IQ4_NL, NAME(dot_iq4_nl), NAME(gemm_iq4_nl));
    set(k, PI_TYPE_Q2_K, NAME(dot_q2_k), NAME(gemm_q2_k));
    set(k, PI_TYPE_Q3_K, NAME(dot_q3_k), NAME(gemm_q3_k));
    set(k, PI_TYPE_ID_IQ4_XS, NAME(dot_iq4_xs), NAME(gemm_iq4_xs));
    set(k, PI_TYPE_MXFP4, NAME(dot_mxfp4), NAME(gemm_mxfp4));
    k->gemv_idx[PI_TYPE_Q4_0] = NAME(gemv_idx_q4_0);
    k->gemv_idx[PI_TYPE_Q4_1] = NAME(gemv_idx_q4_1);
    k->gemv_idx[PI_TYPE_Q5_0] = NAME(gemv_idx_q5_0);
    k->gemv_idx[PI_TYPE_Q5_1] = NAME(gemv_idx_q5_1);
    k->gemv_idx[PI_TYPE_Q8_0] = NAME(gemv_idx_q8_0);
    k->gemv_idx[PI_TYPE_Q4_K] = NAME(gemv_idx_q4_k);
    k->gemv_idx[PI_TYPE_Q5_K] = NAME(gemv_idx_q5_k);
    k->gemv_idx[PI_TYPE_Q6_K] = NAME(gemv_idx_q6_k);
    k->gemv_idx[PI_TYPE_ID_IQ4_NL] = NAME(gemv_idx_iq4_nl);
    k->gemv_idx[PI_TYPE_Q2_K] = NAME(gemv_idx_q2_k);
    k->gemv_idx[PI_TYPE_Q3_K] = NAME(gemv_idx_q3_k);
    k->gemv_idx[PI_TYPE_ID_IQ4_XS] = NAME(gemv_idx_iq4_xs);
    k->gemv_idx[PI_TYPE_MXFP4] = NAME(gemv_idx_mxfp4);
    k->gemm_few[PI_TYPE_Q4_0] = NAME(gemm_few_q4_0);
    k->gemm_few[PI_TYPE_Q4_1] = NAME(gemm_few_q4_1);
    k->gemm_few[PI_TYPE_Q5_0] = NAME(gemm_few_q5_0);
    k->gemm_few[PI_TYPE_Q5_1] = NAME(gemm_few_q5_1);
    k->gemm_few[PI_TYPE_Q8_0] = NAME(gemm_few_q8_0);
    k->gemm_few[PI_TYPE_ID_IQ4_NL] = NAME(gemm_few_iq4_nl);
    k->gemm_few[PI_TYPE_MXFP4] = NAME(gemm_few_mxfp4);
    k->gemm_few[PI_TYPE_Q4_K] = NAME(gemm_few_q4_k); /* these: gemm_units */
    k->gemm_few[PI_TYPE_Q5_K] = NAME(gemm_few_q5_k);
    k->gemm_few[PI_TYPE_Q6_K] = NAME(gemm_few_q6_k);
    k->gemm_few[PI_TYPE_Q2_K] = NAME(gemm_few_q2_k);
    k->gemm_few[PI_TYPE_Q3_K] = NAME(gemm_few_q3_k);
    k->gemm_few[PI_TYPE_ID_IQ4_XS] = NAME(gemm_few_iq4_xs);
    k->gemm_idx[PI_TYPE_Q4_0] = NAME(gemm_idx_q4_0);
    k->gemm_idx[PI_TYPE_Q4_1] = NAME(gemm_idx_q4_1);
    k->gemm_idx[PI_TYPE_Q5_0] = NAME(gemm_idx_q5_0);
    k->gemm_idx[PI_TYPE_Q5_1] = NAME(gemm_idx_q5_1);
    k->gemm_idx[PI_TYPE_Q8_0] = NAME(gemm_idx_q8_0);
    k->gemm_idx[PI_TYPE_Q4_K] = NAME(gemm_idx_q4_k);
    k->gemm_idx[PI_TYPE_Q5_K] = NAME(gemm_idx_q5_k);
    k->gemm_idx[PI_TYPE_Q6_K] = NAME(gemm_idx_q6_k);
    k->gemm_idx[PI_TYPE_ID_IQ4_NL] = NAME(gemm_idx_iq4_nl);
    k->gemm_idx[PI_TYPE_Q2_K] = NAME(gemm_idx_q2_k);
    k->gemm_idx[PI_TYPE_Q3_K] = NAME(gemm_idx_q3_k);
    k->gemm_idx[PI_TYPE_ID_IQ4_XS] = NAME(gemm_idx_iq4_xs);
    k->gemm_idx[PI_TYPE_MXFP4] = NAME(gemm_idx_mxfp4);
#if defined(PI_VNNI)
#  define SET_PACKED(TYPE, name)                                                                   \
      k->dot[TYPE].pack_x = NAME(pack_x_##name);                                                   \
      k->dot[TYPE].gemm_packed = NAME(gemm_packed_##name)
    SET_PACKED(PI_TYPE_Q4_0, q4_0);
    SET_PACKED(PI_TYPE_Q4_1, q4_1);
    SET_PACKED(PI_TYPE_Q5_0, q5_0);
    SET_PACKED(PI_TYPE_Q5_1, q5_1);
    SET_PACKED(PI_TYPE_Q8_0, q8_0);
    SET_PACKED(PI_TYPE_ID_IQ4_NL, iq4_nl);
    SET_PACKED(PI_TYPE_MXFP4, mxfp4);
    SET_PACKED(PI_TYPE_Q4_K, q4_k);
    SET_PACKED(PI_TYPE_Q5_K, q5_k);
    SET_PACKED(PI_TYPE_ID_IQ4_XS, iq4_xs);
    SET_PACKED(PI_TYPE_Q6_K, q6_k);
    SET_PACKED(PI_TYPE_Q3_K, q3_k);
    /* the K super-blocks computed as groups take the 32-block types' activations */
    k->dot[PI_TYPE_Q4_K].fmt = PI_VEC_Q8_0;
    k->dot[PI_TYPE_Q5_K].fmt = PI_VEC_Q8_0;
    k->dot[PI_TYPE_ID_IQ4_XS].fmt = PI_VEC_Q8_0;
    k->dot[PI_TYPE_Q6_K].fmt = PI_VEC_Q8_0;
    k->dot[PI_TYPE_Q3_K].fmt = PI_VEC_Q8_0;
#  undef SET_PACKED
#endif
    k->quantize_q8_0 = NAME(quantize_q8_0);
    k->quantize_q8_k = NAME(quantize_q8_k);
    k->axpy_f16 = NAME(axpy_f16);
    k->attn_scores = NAME(attn_scores);
    k->axpy_f16_q = NAME(axpy_f16_q);
    k->from_float_f16 = NAME(from_float_f16);
    k->dot_f16_rows = NAME(dot_f16_rows);
    k->to_float[PI_TYPE_F16] = NAME(to_float_f16);
    k->axpy[PI_TYPE_F32] = NAME(axpy_f32);
    k->axpy[PI_TYPE_F16] = NAME(axpy_f16_row);
    k->axpy[PI_TYPE_Q4_0] = NAME(axpy_q4_0);
    k->axpy[PI_TYPE_Q4_1] = NAME(axpy_q4_1);
    k->axpy[PI_TYPE_Q5_0] = NAME(axpy_q5_0);
    k->axpy[PI_TYPE_Q8_0] = NAME(axpy_q8_0);
    k->axpy_rows[PI_TYPE_F32] = NAME(axpy_rows_f32);
    k->axpy_rows[PI_TYPE_F16] = NAME(axpy_rows_f16);
    k->axpy_rows[PI_TYPE_Q4_0] = NAME(axpy_rows_q4_0);
    k->axpy_rows[PI_TYPE_Q4_1] = NAME(axpy_rows_q4_1);
    k->axpy_rows[PI_TYPE_Q5_0] = NAME(axpy_rows_q5_0);
    k->axpy_rows[PI_TYPE_Q8_0] = NAME(axpy_rows_q8_0);
    k->axpy_rows_i8[PI_TYPE_Q4_0] = NAME(axpy_rows_i8_q4_0);
    k->axpy_rows_i8[PI_TYPE_Q5_0] = NAME(axpy_rows_i8_q5_0);
    k->axpy_rows_i8[PI_TYPE_Q8_0] = NAME(axpy_rows_i8_q8_0);
    k->axpy_rows_i8_tok[PI_TYPE_Q4_0] = NAME(axpy_rows_i8_tok_q4_0);
    k->axpy_rows_i8_tok[PI_TYPE_Q5_0] = NAME(axpy_rows_i8_tok_q5_0);
    k->axpy_rows_i8_tok[PI_TYPE_Q8_0] = NAME(axpy_rows_i8_tok_q8_0);
    k->to_float[PI_TYPE_BF16] = NAME(to_float_bf16);
    k->to_float[PI_TYPE_Q4_0] = NAME(to_float_q4_0);
    k->to_float[PI_TYPE_Q4_1] = NAME(to_float_q4_1);
    k->to_float[PI_TYPE_Q5_0] = NAME(to_float_q5_0);
    k->to_float[PI_TYPE_Q8_0] = NAME(to_float_q8_0);
    k->to_float[PI_TYPE_Q4_K] = NAME(to_float_q4_k);
    k->to_float[PI_TYPE_Q6_K] = NAME(to_float_q6_k);
    k->to_float[PI_TYPE_Q2_K] = NAME(to_float_q2_k);
    k->to_float[PI_TYPE_Q3_K] = NAME(to_float_q3_k);
    k->to_float[PI_TYPE_ID_IQ4_NL] = NAME(to_float_iq4_nl);
    k->to_float[PI_TYPE_ID_IQ4_XS] = NAME(to_float_iq4_xs);
    k->to_float[PI_TYPE_MXFP4] = NAME(to_float_mxfp4);
}
