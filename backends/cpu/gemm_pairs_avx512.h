/* gemm_pairs_avx512.h -- the prompt gemm on 512-bit vectors, two tokens per register:
 * the 32-block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4) and the K-quants but
 * IQ4_XS (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), for full tiles of GEMM_TILE tokens. Included
 * by kernels_avx2.c in its AVX-512 build only (PI_VNNI); it uses that file's helpers.
 *
 * Why: on Intel cores with two 512-bit ports a zmm vpdpbusd does twice the work of a ymm
 * one at nearly the same rate (measured here on a Xeon: 1.7x the multiply-adds per
 * second), while on Zen 4 it splits into two halves and should cost what two ymm ones
 * do (not measured there), the loads and scale FMAs halving either way. The
 * 256-bit code's block-transposed layout (kernels.h, PI_VEC_Q8_0) already gives each
 * 32-bit lane 4 values of one block, so a zmm holding the same 32-byte step of two
 * tokens, times the decoded weight step in both halves, computes the two tokens' block
 * sums with no horizontal work. The two tokens' steps sit in different vectors, so a
 * full tile's activations for one K-block are first interleaved into pairs on the stack
 * (pairs_gather: 20 KB, once per tile and K-block, reused by every row of the L2 block).
 *
 * Signed weights (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4): AVX-512 has no vpsignb for the 256-bit code's sign
 * trick, so the roles turn round: the activations, made unsigned (x + 128, an xor of
 * 0x80 when they are gathered), times the signed weights, minus 128 times each block's
 * weight sum (computed once per group with vpdpbusd of ones). The block sums are exact
 * integers either way, so the result is the ymm code's.
 *
 * Bit for bit: each half performs the ymm code's operations on the same values in the
 * same order (exact integer block sums, then fma(d * dx, sum, acc), then the offset
 * fma), the partial last group is done as there (blk) and the reduction is the
 * ymm code's own (hsum_ps on the extracted halves), so gemm still equals dot exactly. */

#define PAIR_GROUP_BYTES 640 /* steps [8][t0 32 B | t1 32 B], d [16], offset data [16] */
#define PAIRS (GEMM_TILE / 2)

INLINE int pairs_type(int type) {
    return type == PI_TYPE_Q4_0 || type == PI_TYPE_Q4_1 || type == PI_TYPE_Q5_0 ||
           type == PI_TYPE_Q5_1 || type == PI_TYPE_Q8_0 || type == PI_TYPE_ID_IQ4_NL ||
           type == PI_TYPE_MXFP4 || is_kgroup(type);
}

/* One pair's group at o (PAIR_GROUP_BYTES) from the PI_VEC_Q8_0 groups of two tokens
 * (NULL: a zero token): the steps side by side, xor-ed with 0x80 for the signed weight
 * types (x + 128 as unsigned bytes), the d, then the offset data: s for has_offset
 * types, offset * sum for int_offset ones. */
INLINE void pair_put(int type, const uint8_t *a, const uint8_t *b, uint8_t *o) {
    const __m256i f = _mm256_set1_epi8(signed_type(type) ? (char)0x80 : 0);
    const int sh = int_offset(type);
    for (int h = 0; h < 2; h++, o += 32) {
        const uint8_t *x = h ? b : a;
        if (!x) {
            UNROLL
            for (int u = 0; u < 8; u++)
                _mm256_storeu_si256((__m256i *)(void *)(o + 64 * u), f);
            memset(o + 512, 0, 32);
            memset(o + 576, 0, 32);
            continue;
        }
        UNROLL
        for (int u = 0; u < 8; u++)
            _mm256_storeu_si256((__m256i *)(void *)(o + 64 * u),
                                _mm256_xor_si256(loadu256(x + 32 * u), f));
        _mm256_storeu_si256((__m256i *)(void *)(o + 512), loadu256(x + 256));
        _mm256_storeu_si256((__m256i *)(void *)(o + 576),
                            sh ? _mm256_slli_epi32(loadu256(x + 320), sh) : loadu256(x + 288));
    }
}

/* Groups g0 .. g0+ng-1 of the tile's GEMM_TILE vectors (vb bytes apart) into
 * xp[pair][group] blocks of PAIR_GROUP_BYTES. */
INLINE void pairs_gather(int type, const uint8_t *x, size_t vb, int64_t g0, int64_t ng,
                         uint8_t *xp) {
    for (int p = 0; p < PAIRS; p++)
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *a = x + (size_t)(2 * p) * vb + (size_t)(g0 + g) * PI_Q8_0_GROUP_BYTES;
            pair_put(type, a, a + vb,
                     xp + ((size_t)p * (size_t)KB_UNITS + (size_t)g) * PAIR_GROUP_BYTES);
        }
}

INLINE __m512i both_halves(__m256i v) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1);
}

INLINE __m512 both_halves_ps(__m256 v) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(v), v, 1);
}

INLINE __m512i loadu512(const void *p) {
    return _mm512_loadu_si512(p);
}

/* dot8_u4 / dot8_u8 / dot8_s8 for a pair: per 32-bit lane, one block of one token.
 * Signed types: q holds the signed weights, xg the flipped activations, wsum128 128
 * times each block's weight sum. */
INLINE __m512i pair_isum(int type, const __m512i q[8], const uint8_t *xg, __m512i wsum128) {
    __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
    if (type == PI_TYPE_Q4_0 || type == PI_TYPE_Q4_1) {
        UNROLL
        for (int u = 0; u < 4; u++) {
            a = _mm512_dpbusd_epi32(a, q[u], loadu512(xg + 64 * u));
            b = _mm512_dpbusd_epi32(b, q[u + 4], loadu512(xg + 64 * (u + 4)));
        }
        return _mm512_add_epi32(a, _mm512_srai_epi32(b, 4));
    }
    if (signed_type(type)) {
        UNROLL
        for (int u = 0; u < 8; u += 2) {
            a = _mm512_dpbusd_epi32(a, loadu512(xg + 64 * u), q[u]);
            b = _mm512_dpbusd_epi32(b, loadu512(xg + 64 * (u + 1)), q[u + 1]);
        }
        return _mm512_sub_epi32(_mm512_add_epi32(a, b), wsum128);
    }
    UNROLL
    for (int u = 0; u < 8; u += 2) {
        a = _mm512_dpbusd_epi32(a, q[u], loadu512(xg + 64 * u));
        b = _mm512_dpbusd_epi32(b, q[u + 1], loadu512(xg + 64 * (u + 1)));
    }
    return _mm512_add_epi32(a, b);
}

/* pair_isum of a split type's halves: steps 0-3 (returned, less ws[0]) and 4-7 (*hi,
 * less ws[1]); ws: 128 times each half's weight sums. */
INLINE __m512i pair_isum_halves(const __m512i q[8], const uint8_t *xg, const __m512i ws[2],
                                __m512i *hi) {
    __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
    UNROLL
    for (int u = 0; u < 4; u++) {
        a = _mm512_dpbusd_epi32(a, loadu512(xg + 64 * u), q[u]);
        b = _mm512_dpbusd_epi32(b, loadu512(xg + 64 * (u + 4)), q[u + 4]);
    }
    *hi = _mm512_sub_epi32(b, ws[1]);
    return _mm512_sub_epi32(a, ws[0]);
}

/* out[t] for the GEMM_TILE tokens over the groups [g0, g1) of one row (nb blocks, the
 * last group possibly partial), as row_kblock_n computes it; xp: the tile's pairs for
 * these groups (pairs_gather from g0). */
INLINE void row_kblock_pairs(int type, const uint8_t *row, int64_t nb, int64_t g0, int64_t g1,
                             const uint8_t *xp, float *out) {
    const size_t gb = group_bytes(type);
    __m512 acc[PAIRS];
    UNROLL
    for (int p = 0; p < PAIRS; p++)
        acc[p] = _mm512_setzero_ps();
    for (int64_t g = g0; g < g1; g++) {
        struct wgroup wg;
        __m512i q[8];
        load_group_at(type, row + (size_t)g * gb, group_r(nb, g), &wg);
        __m512i wsum128 = _mm512_setzero_si512(), wsh[2];
        if (signed_type(type)) {
            __m256i ws[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            UNROLL
            for (int u = 0; u < 8; u++) {
                q[u] = both_halves(wg.s[u]);
                ws[u / 4] = _mm256_dpbusd_epi32(ws[u / 4], _mm256_set1_epi8(1), wg.s[u]);
            }
            wsh[0] = both_halves(_mm256_slli_epi32(ws[0], 7));
            wsh[1] = both_halves(_mm256_slli_epi32(ws[1], 7));
            wsum128 = _mm512_add_epi32(wsh[0], wsh[1]);
        } else {
            UNROLL
            for (int u = 0; u < 8; u++)
                q[u] = both_halves(wg.q[u]);
        }
        const __m512 d = both_halves_ps(wg.d);
        const __m512 m = has_offset(type) || is_split(type) ? both_halves_ps(wg.m) : d;
        UNROLL
        for (int p = 0; p < PAIRS; p++) {
            const uint8_t *xg = xp + ((size_t)p * (size_t)KB_UNITS + (size_t)(g - g0)) * PAIR_GROUP_BYTES;
            if (is_split(type)) { /* as group_terms: the halves' scales in two fmas */
                __m512i hi;
                const __m512i lo = pair_isum_halves(q, xg, wsh, &hi);
                const __m512 dx = _mm512_loadu_ps(xg + 512);
                acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(lo), acc[p]);
                acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(m, dx), _mm512_cvtepi32_ps(hi), acc[p]);
                continue;
            }
            __m512i isum = pair_isum(type, q, xg, wsum128);
            if (int_offset(type))
                isum = _mm512_sub_epi32(isum, loadu512(xg + 576));
            acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_loadu_ps(xg + 512)),
                                     _mm512_cvtepi32_ps(isum), acc[p]);
            if (has_offset(type))
                acc[p] = _mm512_fmadd_ps(m, _mm512_loadu_ps(xg + 576), acc[p]);
        }
    }
    UNROLL
    for (int p = 0; p < PAIRS; p++) {
        out[2 * p] = hsum_ps(_mm512_castps512_ps256(acc[p]));
        out[2 * p + 1] = hsum_ps(_mm512_extractf32x8_ps(acc[p], 1));
    }
}

/* ---- K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) ---------------------------------------------
 *
 * The same pairing on PI_VEC_Q8_K: per pair and super-block, the 8 chunks of 32 quants as
 * [t0 | t1] (512 B), the 16-value sums [t0 | t1] (64 B) and the two scales. k_token's
 * operations then run on both halves; its scalar products d * dx are formed per token
 * as there. IQ4_XS stays on the 256-bit code: its signed grid values need vpsignb, and
 * the flipped form would saturate vpmaddubsw (255 * 127 * 2 > 32767). */

#define KPAIR_BYTES 640 /* q [8][64], bsum [2][16] int16, dx [2] float, padding */

INLINE int kpairs_type(int type) {
    return is_k_quant(type) && type != PI_TYPE_ID_IQ4_XS;
}

/* Super-blocks b0 .. b0+n-1 of the tile's vectors (nb each) into xp[pair][block]. */
INLINE void kpairs_gather(const uint8_t *x, size_t vb, int64_t nb, int64_t b0, int64_t n,
                          uint8_t *xp) {
    for (int p = 0; p < PAIRS; p++)
        for (int64_t b = 0; b < n; b++) {
            const uint8_t *xa = x + (size_t)(2 * p) * vb, *xb = xa + vb;
            uint8_t *o = xp + ((size_t)p * (size_t)KB_UNITS + (size_t)b) * KPAIR_BYTES;
            const int8_t *qa = xk_q(xa, b0 + b), *qb = xk_q(xb, b0 + b);
            UNROLL
            for (int c = 0; c < 8; c++) {
                _mm256_storeu_si256((__m256i *)(void *)(o + 64 * c), loadu256(qa + 32 * c));
                _mm256_storeu_si256((__m256i *)(void *)(o + 64 * c + 32), loadu256(qb + 32 * c));
            }
            _mm256_storeu_si256((__m256i *)(void *)(o + 512), loadu256(xk_bsum(xa, nb, b0 + b)));
            _mm256_storeu_si256((__m256i *)(void *)(o + 544), loadu256(xk_bsum(xb, nb, b0 + b)));
            const float d2[2] = {xk_d(xa, nb, b0 + b), xk_d(xb, nb, b0 + b)};
            memcpy(o + 576, d2, sizeof d2);
        }
}

INLINE __m512 halves_ps(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi), 1);
}

/* k_token for a pair: acc (both halves) + the super-block's contribution. */
INLINE __m512 k_pair(int type, const struct kblock *kb, const __m512i q[8], const __m512i sc[8],
                     const uint8_t *xg, __m512 acc) {
    const int has_min = type == PI_TYPE_Q2_K || type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K;
    float dx[2];
    memcpy(dx, xg + 576, sizeof dx);
    const __m512i aux = _mm512_madd_epi16(both_halves(kb->aux), loadu512(xg + 512));
    __m512i isum = _mm512_setzero_si512();
    UNROLL
    for (int c = 0; c < 8; c++)
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q[c], loadu512(xg + 64 * c)), sc[c]);
    if (type == PI_TYPE_Q6_K)
        isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(aux, 5));
    if (type == PI_TYPE_Q3_K)
        isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(aux, 2));
    acc = _mm512_fmadd_ps(halves_ps(kb->d * dx[0], kb->d * dx[1]), _mm512_cvtepi32_ps(isum), acc);
    if (has_min)
        acc = _mm512_fnmadd_ps(halves_ps(kb->dmin * dx[0], kb->dmin * dx[1]),
                               _mm512_cvtepi32_ps(aux), acc);
    return acc;
}

/* row_kblock_kn for a full tile: super-blocks [b0, b1) of one row, xp from b0. */
INLINE void row_kblock_kpairs(int type, const uint8_t *row, int64_t b0, int64_t b1,
                              const uint8_t *xp, float *out) {
    __m512 acc[PAIRS];
    UNROLL
    for (int p = 0; p < PAIRS; p++)
        acc[p] = _mm512_setzero_ps();
    for (int64_t b = b0; b < b1; b++) {
        struct kblock kb;
        __m512i q[8], sc[8];
        k_decode(type, row + (size_t)b * k_block_bytes(type), &kb);
        UNROLL
        for (int c = 0; c < 8; c++) {
            q[c] = both_halves(kb.q[c]);
            sc[c] = both_halves(kb.sc[c]);
        }
        UNROLL
        for (int p = 0; p < PAIRS; p++)
            acc[p] = k_pair(type, &kb, q, sc,
                            xp + ((size_t)p * (size_t)KB_UNITS + (size_t)(b - b0)) * KPAIR_BYTES, acc[p]);
    }
    UNROLL
    for (int p = 0; p < PAIRS; p++) {
        out[2 * p] = hsum_ps(_mm512_castps512_ps256(acc[p]));
        out[2 * p + 1] = hsum_ps(_mm512_extractf32x8_ps(acc[p], 1));
    }
}

/* A full tile (GEMM_TILE tokens at x) over rows [r0, r1) of W (idx non-NULL: rows
 * idx[r0 .. r1)), K-blocks outer: each
 * K-block's pairs are gathered once and serve every row. Y as gemm_units writes it. */
INLINE void gemm_tile_pairs(int type, const uint8_t *w, size_t rb, const int32_t *idx,
                            int64_t r0, int64_t r1, const uint8_t *x, size_t vb,
                            float *y, int64_t ldy, int64_t n) {
    const int64_t nb = n / 32, nu = (n + 255) / 256, nk = (nu + KB_UNITS - 1) / KB_UNITS;
    const int kq = kpairs_type(type);
    _Alignas(64) uint8_t xp[PAIRS * KB_UNITS * PAIR_GROUP_BYTES];
    for (int64_t k = 0; k < nk; k++) {
        const int64_t g0 = k * KB_UNITS, g1 = g0 + KB_UNITS < nu ? g0 + KB_UNITS : nu;
        if (kq)
            kpairs_gather(x, vb, nu, g0, g1 - g0, xp);
        else
            pairs_gather(type, x, vb, g0, g1 - g0, xp);
        for (int64_t i = r0; i < r1; i++) {
            const int64_t r = idx ? idx[i] : i;
            float part[GEMM_TILE];
            if (kq)
                row_kblock_kpairs(type, w + (size_t)r * rb, g0, g1, xp, part);
            else
                row_kblock_pairs(type, w + (size_t)r * rb, nb, g0, g1, xp, part);
            for (int t = 0; t < GEMM_TILE; t++)
                y[t * ldy + r] = k == 0 ? 0.0f + part[t] : y[t * ldy + r] + part[t];
        }
    }
}
