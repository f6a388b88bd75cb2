/* gemm_packed_avx512.h -- the prompt gemm of the AVX-512 table on packed operands, for
 * the 32-block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4). Included by
 * kernels_avx2.c in its AVX-512 build only (PI_VNNI); it uses that file's helpers.
 *
 * Why: the pairs gemm (gemm_pairs_avx512.h) decodes every weight group again for each
 * tile of 8 tokens and loads each activation step once per row, so on Zen 4 it spends
 * about half its cycles on the weight decode's shuffles and on loads: 104 GMAC/s on one
 * core where vpdpbusd zmm alone would do 232. Here both operands are laid out once:
 *
 * - the activations of the whole matmul by pack_x (once per matmul, split over the
 *   threads by the caller): tiles of PI_GEMM_PACK_TOKENS tokens, per tile and group the
 *   4 token pairs' steps side by side (XP_PAIR_BYTES each, as the pairs gemm gathers
 *   them), flipped to x + 128 for the signed weight types;
 * - a thread's weight rows, per K-block, into a panel in its scratch (decoded groups of
 *   PANEL_GROUP_BYTES: the 8 steps in both halves of a zmm, d, and the offset data), so
 *   each group is decoded once for all the tiles instead of once per tile.
 *
 * The register tile is 3 rows x 4 token pairs: per step 3 weight and 4 activation loads
 * feed 12 vpdpbusd, and per group and (row, pair) one mul, one cvt and one fma apply the
 * scales (Q4_1/Q5_1: one more fma for the offset). A stand-alone model of this loop ran
 * at 171 GMAC/s on one Zen 4 core (74 % of vpdpbusd's peak); see docs/performance.md.
 *
 * Bit for bit with dot: per (row, token) the same exact integer block sums (signed
 * types: sum((x + 128) w) - 128 sum(w), which is sum(x w), as the pairs gemm computes
 * it), the same fma(d * dx, isum, acc) (+ fma(m, s, acc)) into the same 8 lanes in the
 * same group order, tails as blk, the K-block sums reduced by hsum_ps and
 * added to Y in K-block order. test_kernels checks gemm_packed = dot on random shapes. */

#define XP_PAIR_BYTES     PAIR_GROUP_BYTES /* as pair_put writes it */
#define XP_PAIRS          (PI_GEMM_PACK_TOKENS / 2)
#define PANEL_GROUP_BYTES 384 /* q [8][32], d [8], extra [8], split: m [8], extra 2 [8] */
#define PACK_R            3   /* rows of the register tile */

_Static_assert(PI_GEMM_PACK_TOKENS == 8, "the register tile is 4 token pairs");
/* Rows of a panel: as many as the scratch holds, in multiples of 6 (of the 3-row and
 * the split types' 2-row register tiles); the split types use the whole group, the
 * others its first 320 bytes. */
INLINE size_t panel_gb(int type) {
    return is_split(type) ? PANEL_GROUP_BYTES : 320;
}
INLINE int64_t panel_rows(int type) {
    return (int64_t)(PI_GEMM_PACKED_SCRATCH / (KB_UNITS * panel_gb(type))) / 6 * 6;
}

_Static_assert(6 * KB_UNITS * PANEL_GROUP_BYTES <= PI_GEMM_PACKED_SCRATCH,
               "the panel fits the caller's scratch");
_Static_assert(XP_PAIRS *XP_PAIR_BYTES == PI_GEMM_PACK_TOKENS * PI_GEMM_PACK_UNIT_BYTES,
               "pi_gemm_pack_bytes counts the pairs' bytes");

/* A 256-bit panel row part in both halves of a zmm: one broadcast load. */
INLINE __m512i bcast256(const uint8_t *p) {
    return _mm512_broadcast_i64x4(loadu256(p));
}
INLINE __m512 bcast256_ps(const uint8_t *p) {
    return _mm512_broadcast_f32x8(_mm256_loadu_ps((const float *)(const void *)p));
}

/* Tiles [tile0, tile1) of the packed activations of nt vectors (vb bytes apart) of n
 * values: XP + tile * ng * XP_PAIRS * XP_PAIR_BYTES, group-major, pairs inside (as
 * pair_put lays them out); tokens past nt are zero. */
INLINE void pack_x_units(int type, const void *X, size_t vb, int64_t nt, int64_t n, int64_t tile0,
                         int64_t tile1, void *XP) {
    const int64_t ng = (n + 255) / 256;
    for (int64_t tile = tile0; tile < tile1; tile++)
        for (int64_t g = 0; g < ng; g++)
            for (int p = 0; p < XP_PAIRS; p++) {
                const int64_t t = tile * PI_GEMM_PACK_TOKENS + 2 * p;
                const uint8_t *a =
                    (const uint8_t *)X + (size_t)t * vb + (size_t)g * PI_Q8_0_GROUP_BYTES;
                pair_put(type, t < nt ? a : NULL, t + 1 < nt ? a + vb : NULL,
                         (uint8_t *)XP +
                             ((size_t)(tile * ng + g) * XP_PAIRS + (size_t)p) * XP_PAIR_BYTES);
            }
}

/* Groups [g0, g1) of one row (nb blocks) decoded into the panel at o, PANEL_GROUP_BYTES
 * per group: the steps the microkernel multiplies (signed types: the signed quants; the
 * others the unsigned ones, Q4's high nibbles at their value), d, and 128 times each
 * block's weight sum (signed types) or m (has_offset types). */
INLINE void pack_panel_row(int type, const uint8_t *row, int64_t nb, int64_t g0, int64_t g1,
                           uint8_t *o) {
    const size_t gb = group_bytes(type);
    for (int64_t g = g0; g < g1; g++, o += panel_gb(type)) {
        struct wgroup wg;
        load_group_at(type, row + (size_t)g * gb, group_r(nb, g), &wg);
        if (signed_type(type)) {
            __m256i ws[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            UNROLL
            for (int u = 0; u < 8; u++) {
                _mm256_storeu_si256((__m256i *)(void *)(o + 32 * u), wg.s[u]);
                ws[u / 4] = _mm256_dpbusd_epi32(ws[u / 4], _mm256_set1_epi8(1), wg.s[u]);
            }
            if (is_split(type)) { /* each half's own scale and weight sum */
                _mm256_storeu_si256((__m256i *)(void *)(o + 288), _mm256_slli_epi32(ws[0], 7));
                _mm256_storeu_ps((float *)(void *)(o + 320), wg.m);
                _mm256_storeu_si256((__m256i *)(void *)(o + 352), _mm256_slli_epi32(ws[1], 7));
            } else {
                _mm256_storeu_si256((__m256i *)(void *)(o + 288),
                                    _mm256_slli_epi32(_mm256_add_epi32(ws[0], ws[1]), 7));
            }
        } else {
            UNROLL
            for (int u = 0; u < 8; u++) {
                __m256i q = wg.q[u];
                if ((type == PI_TYPE_Q4_0 || type == PI_TYPE_Q4_1) && u >= 4) /* nibbles_x16 */
                    q = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0f));
                _mm256_storeu_si256((__m256i *)(void *)(o + 32 * u), q);
            }
            if (has_offset(type))
                _mm256_storeu_ps((float *)(void *)(o + 288), wg.m);
        }
        _mm256_storeu_ps((float *)(void *)(o + 256), wg.d);
    }
}

/* acc[r][p] over groups [0, ng) of the panel rows pr[r] (r < R) and the tile's K-block
 * xg: R rows x 4 pairs, exactly group_dot per half. */
INLINE void packed_micro(int type, int R, const uint8_t *const *pr, int64_t ng, const uint8_t *xg,
                         __m512 acc[PACK_R][XP_PAIRS]) {
    const int sgn = signed_type(type);
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
    for (int p = 0; p < XP_PAIRS; p++)
        acc[r][p] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *xgg = xg + (size_t)g * XP_PAIRS * XP_PAIR_BYTES;
        __m512i s[PACK_R][XP_PAIRS];
        UNROLL
        for (int r = 0; r < R; r++)
            UNROLL
        for (int p = 0; p < XP_PAIRS; p++)
            s[r][p] = _mm512_setzero_si512();
        UNROLL
        for (int u = 0; u < 8; u++) {
            __m512i w[PACK_R];
            UNROLL
            for (int r = 0; r < R; r++)
                w[r] = bcast256(pr[r] + (size_t)g * panel_gb(type) + 32 * u);
            UNROLL
            for (int p = 0; p < XP_PAIRS; p++) {
                __m512i x = loadu512(xgg + (size_t)p * XP_PAIR_BYTES + 64 * u);
                /* one load for all rows: without this the compiler folds a load of x
                 * into each vpdpbusd, and loads are what limits this loop */
                __asm__("" : "+v"(x));
                UNROLL
                for (int r = 0; r < R; r++)
                    s[r][p] = sgn ? _mm512_dpbusd_epi32(s[r][p], x, w[r])
                                  : _mm512_dpbusd_epi32(s[r][p], w[r], x);
            }
        }
        __m512 d[PACK_R], m[PACK_R];
        __m512i ws[PACK_R];
        UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t *o = pr[r] + (size_t)g * panel_gb(type);
            d[r] = bcast256_ps(o + 256);
            if (sgn)
                ws[r] = bcast256(o + 288);
            else if (has_offset(type))
                m[r] = bcast256_ps(o + 288);
        }
        UNROLL
        for (int p = 0; p < XP_PAIRS; p++) {
            const uint8_t *o = xgg + (size_t)p * XP_PAIR_BYTES;
            const __m512 dx = _mm512_loadu_ps(o + 512);
            const __m512i xo = loadu512(o + 576); /* offset * sum (int_offset types) */
            UNROLL
            for (int r = 0; r < R; r++) {
                __m512i isum = s[r][p];
                if (sgn)
                    isum = _mm512_sub_epi32(isum, ws[r]);
                if (int_offset(type))
                    isum = _mm512_sub_epi32(isum, xo);
                acc[r][p] =
                    _mm512_fmadd_ps(_mm512_mul_ps(d[r], dx), _mm512_cvtepi32_ps(isum), acc[r][p]);
                if (has_offset(type))
                    acc[r][p] = _mm512_fmadd_ps(m[r], _mm512_loadu_ps(o + 576), acc[r][p]);
            }
        }
    }
}

/* packed_micro for the split types (is_split): per (row, pair) the two halves of each
 * block summed apart and scaled by two fmas, as group_terms does; R <= 2 (two
 * accumulators per pair). */
INLINE void packed_micro_split(int R, const uint8_t *const *pr, int64_t ng, const uint8_t *xg,
                               __m512 acc[PACK_R][XP_PAIRS]) {
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
    for (int p = 0; p < XP_PAIRS; p++)
        acc[r][p] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *xgg = xg + (size_t)g * XP_PAIRS * XP_PAIR_BYTES;
        __m512i s[2][2][XP_PAIRS]; /* [row][half][pair] */
        UNROLL
        for (int r = 0; r < R; r++)
            UNROLL
        for (int h = 0; h < 2; h++)
            UNROLL
        for (int p = 0; p < XP_PAIRS; p++)
            s[r][h][p] = _mm512_setzero_si512();
        UNROLL
        for (int u = 0; u < 8; u++) {
            __m512i w[2];
            UNROLL
            for (int r = 0; r < R; r++)
                w[r] = bcast256(pr[r] + (size_t)g * PANEL_GROUP_BYTES + 32 * u);
            UNROLL
            for (int p = 0; p < XP_PAIRS; p++) {
                __m512i x = loadu512(xgg + (size_t)p * XP_PAIR_BYTES + 64 * u);
                __asm__("" : "+v"(x)); /* one load for both rows (see packed_micro) */
                UNROLL
                for (int r = 0; r < R; r++)
                    s[r][u / 4][p] = _mm512_dpbusd_epi32(s[r][u / 4][p], x, w[r]);
            }
        }
        UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t *o = pr[r] + (size_t)g * PANEL_GROUP_BYTES;
            const __m512 dl = bcast256_ps(o + 256), dh = bcast256_ps(o + 320);
            const __m512i wl = bcast256(o + 288), wh = bcast256(o + 352);
            UNROLL
            for (int p = 0; p < XP_PAIRS; p++) {
                const __m512 dx = _mm512_loadu_ps(xgg + (size_t)p * XP_PAIR_BYTES + 512);
                acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dl, dx),
                                            _mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][0][p], wl)),
                                            acc[r][p]);
                acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dh, dx),
                                            _mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][1][p], wh)),
                                            acc[r][p]);
            }
        }
    }
}

/* hsum_ps of both 256-bit halves of v at once, in its order of adds: lane 0 holds the
 * low half's sum, lane 8 the high half's. */
INLINE __m512 hsum_halves(__m512 v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1)); /* l_i + l_(i+4) */
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));       /* (s0 + s2), (s1 + s3) */
    return _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));    /* their sum */
}

/* Y for rows [0, R) of the register tile at row `row`, the tile's tokens from t0 (< nt),
 * after K-block k: each half reduced as hsum_ps does, added in K-block order as
 * kblock_to_y does. */
INLINE void packed_to_y(int R, __m512 acc[PACK_R][XP_PAIRS], int64_t k, int64_t t0, int64_t nt,
                        float *Y, int64_t ldy) {
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
    for (int p = 0; p < XP_PAIRS; p++) {
        const __m512 v = hsum_halves(acc[r][p]);
        UNROLL
        for (int h = 0; h < 2; h++) {
            const int64_t t = t0 + 2 * p + h;
            if (t >= nt)
                continue;
            /* (immediates only: -O0 and clang do not unroll h into a constant) */
            const float part = _mm_cvtss_f32(h ? _mm512_extractf32x4_ps(v, 2)
                                               : _mm512_extractf32x4_ps(v, 0));
            float *y = Y + t * ldy + r;
            *y = k == 0 ? 0.0f + part : *y + part;
        }
    }
}

INLINE void gemm_packed_units(int type, const void *W, size_t rb, int64_t nr, const void *XP,
                              int64_t nt, float *Y, int64_t ldy, int64_t n, void *scratch) {
    const int64_t nb = n / 32, ng = (nb + 7) / 8, nk = (ng + KB_UNITS - 1) / KB_UNITS;
    const int64_t ntile = (nt + PI_GEMM_PACK_TOKENS - 1) / PI_GEMM_PACK_TOKENS;
    const size_t tile_bytes = (size_t)ng * XP_PAIRS * XP_PAIR_BYTES;
    const size_t prow = (size_t)KB_UNITS * panel_gb(type); /* panel bytes per row */
    const int64_t prows = panel_rows(type);
    uint8_t *panel = scratch;
    for (int64_t r0 = 0; r0 < nr; r0 += prows) {
        const int64_t r1 = r0 + prows < nr ? r0 + prows : nr;
        for (int64_t k = 0; k < nk; k++) {
            const int64_t g0 = k * KB_UNITS, g1 = g0 + KB_UNITS < ng ? g0 + KB_UNITS : ng;
            for (int64_t r = r0; r < r1; r++)
                pack_panel_row(type, (const uint8_t *)W + (size_t)r * rb, nb, g0, g1,
                               panel + (size_t)(r - r0) * prow);
            for (int64_t tile = 0; tile < ntile; tile++) {
                const uint8_t *xg = (const uint8_t *)XP + (size_t)tile * tile_bytes +
                                    (size_t)g0 * XP_PAIRS * XP_PAIR_BYTES;
                const int64_t t0 = tile * PI_GEMM_PACK_TOKENS;
                int64_t r = r0;
                if (is_split(type)) {
                    for (; r + 2 <= r1; r += 2) {
                        __m512 acc[PACK_R][XP_PAIRS];
                        const uint8_t *pr[PACK_R] = {panel + (size_t)(r - r0) * prow,
                                                     panel + (size_t)(r - r0 + 1) * prow};
                        packed_micro_split(2, pr, g1 - g0, xg, acc);
                        packed_to_y(2, acc, k, t0, nt, Y + r, ldy);
                    }
                    if (r < r1) {
                        __m512 acc[PACK_R][XP_PAIRS];
                        const uint8_t *pr[PACK_R] = {panel + (size_t)(r - r0) * prow};
                        packed_micro_split(1, pr, g1 - g0, xg, acc);
                        packed_to_y(1, acc, k, t0, nt, Y + r, ldy);
                    }
                    continue;
                }
                for (; r + PACK_R <= r1; r += PACK_R) {
                    __m512 acc[PACK_R][XP_PAIRS];
                    const uint8_t *pr[PACK_R];
                    UNROLL
                    for (int i = 0; i < PACK_R; i++)
                        pr[i] = panel + (size_t)(r - r0 + i) * prow;
                    packed_micro(type, PACK_R, pr, g1 - g0, xg, acc);
                    packed_to_y(PACK_R, acc, k, t0, nt, Y + r, ldy);
                }
                for (; r < r1; r++) {
                    __m512 acc[PACK_R][XP_PAIRS];
                    const uint8_t *pr[PACK_R] = {panel + (size_t)(r - r0) * prow};
                    packed_micro(type, 1, pr, g1 - g0, xg, acc);
                    packed_to_y(1, acc, k, t0, nt, Y + r, ldy);
                }
            }
        }
    }
}
