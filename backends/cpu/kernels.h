/* kernels.h -- CPU compute kernels: a table filled with the scalar reference and then
 * overridden per CPU feature ("reference first, then override", as dav1d does).
 *
 * Dot products: a weight row of type T is multiplied with an activation vector that was
 * first converted to T's "vector format" (F32: a copy; Q8_0, Q8_K: k->quantize_q8_0, _q8_k):
 *   F32, F16, BF16             -> PI_VEC_F32  (the floats themselves)
 *   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4 -> PI_VEC_Q8_0 (int8 per 32 values,
 *                                 scale and block sum)
 *   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS -> PI_VEC_Q8_K (int8 per 256 values, scale,
 *                                 16-value sums)
 * Integer dot products then do the work; one activation vector serves every row of a
 * matrix, so its layout is chosen for the kernels (see "Vector formats" below) and is
 * private to this module: callers size buffers with pi_vec_bytes() and never look inside
 * (every format takes at most 4 bytes per value, as F32 does).
 *
 * Every entry has a scalar reference in kernels_ref.c; tests/kernels/ checks every
 * override against it on random odd shapes.
 *
 * Alignment: activation vectors must be 4-byte aligned (64 is best); weight rows may
 * have any alignment. Kernels never allocate, never create threads and never write
 * outside their outputs; callers split rows between threads. */
#ifndef PI_CPU_KERNELS_H
#define PI_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "powerinfer.h" /* PI_TYPE_* ids */
#include "runtime/types.h"

/* CPU features, detected at run time (cpu_detect.c). */
enum {
    PI_CPU_AVX2 = 1u << 0,        /* AVX2 + FMA + F16C, OS saves YMM state */
    PI_CPU_AVX512 = 1u << 1,      /* AVX512 F + BW + VL + DQ, OS saves ZMM state */
    PI_CPU_AVX512_VNNI = 1u << 2, /* AVX512_VNNI (vpdpbusd, vpdpwssd) */
    PI_CPU_NEON = 1u << 3,        /* ARM64 Advanced SIMD (every AArch64 CPU has it) */
    PI_CPU_DOTPROD = 1u << 4,     /* ARMv8.2 SDOT/UDOT (FEAT_DotProd) */
};
/* The AVX-512 table needs all three flags; it is the AVX2 code with 256-bit VNNI dot
 * products and 32 registers (kernels_avx512.c says why not 512-bit vectors). */
unsigned pi_cpu_detect(void);

/* ---- Vector formats -------------------------------------------------------------------
 *
 * PI_VEC_F32: n floats.
 *
 * PI_VEC_Q8_0 (n a multiple of 32): blocks of 32 values, each quantized as
 *   d = max|x| / 127 (f32; 0 when that is below FLT_MIN), q = roundf(x / d) computed as
 *   roundf(x * (1/d)) -- round half away from zero -- s = d * sum(q) (f32) and
 *   sum(q) itself (int32). Blocks are stored in groups of 8 ("block-transposed"), 352
 *   bytes per group:
 *     int8  q[8 steps][8 blocks][4]   value v of block j at 32*(v/4) + 4*j + v%4
 *     float d[8], float s[8]          at bytes 256 and 288 of the group
 *     int32 sum[8]                    at byte 320 (the integer offsets of Q4_0/Q5_0 in
 *                                     the AVX-512 table)
 *   so that each 32-bit lane of a 256-bit load holds 4 values of one block: integer dot
 *   products then accumulate per block with no horizontal sums. The last group is
 *   padded with zero blocks (q = 0, d = 0, s = 0, sum = 0).
 *
 * PI_VEC_Q8_K (n a multiple of 256): super-blocks of 256 values, quantized by the same
 *   rule with one d = max|x| / 127 per 256 values. Planar, nb = n/256:
 *     int8  q[nb][256]   in order
 *     int16 bsum[nb][16] sum of the q of each 16 values (Q2_K/Q4_K/Q5_K mins, Q3_K/Q6_K
 *                        offsets)
 *     float d[nb]
 */
enum pi_vec_fmt {
    PI_VEC_F32 = 0,
    PI_VEC_Q8_0 = 1,
    PI_VEC_Q8_K = 2,
    PI_VEC_FMT_COUNT = 3,
};

#define PI_Q8_0_GROUP_BYTES 352 /* one group of 8 blocks of PI_VEC_Q8_0 */
#define PI_Q8_K_BLOCK_BYTES 292 /* q[256] + bsum[16] + d, per super-block */

/* Bytes of an activation vector of n values in format f; 0 if n is not a positive
 * multiple of the format's block (32 for Q8_0, 256 for Q8_K). */
size_t pi_vec_bytes(enum pi_vec_fmt f, int64_t n);

/* Byte offset of value v (0..31) of block b within a PI_VEC_Q8_0 vector, and of that
 * block's d (its s follows 32 bytes later, its sum 64 bytes later). */
static inline size_t pi_q8_0_q_offset(int64_t b, int v) {
    return (size_t)(b / 8) * PI_Q8_0_GROUP_BYTES + 32u * (size_t)(v / 4) + 4u * (size_t)(b % 8) +
           (size_t)(v % 4);
}
static inline size_t pi_q8_0_d_offset(int64_t b) {
    return (size_t)(b / 8) * PI_Q8_0_GROUP_BYTES + 256u + 4u * (size_t)(b % 8);
}

/* ---- The packed prompt gemm -------------------------------------------------------------
 *
 * Optional per weight type (pi_dot_kernel.pack_x and .gemm_packed, both NULL where a
 * table has none; callers then use gemm). For prompts the activations of one matmul
 * are laid out once for the gemm's register tiles (pack_x: whole tiles of
 * PI_GEMM_PACK_TOKENS tokens, the tokens past nt zero), and gemm_packed decodes each
 * thread's weight rows once per K-block into a panel in its scratch, which then serves
 * every tile. The layout is private to the table that packed it. */
#define PI_GEMM_PACK_TOKENS    8
#define PI_GEMM_PACK_UNIT_BYTES 320 /* packed bytes per token and 256 values */
#define PI_GEMM_PACKED_SCRATCH (192 * 1024) /* bytes of scratch per gemm_packed call */

/* Bytes of nt packed vectors of n values (n a multiple of 32): whole tiles,
 * PI_GEMM_PACK_UNIT_BYTES per token and 256 values (rounded up). */
size_t pi_gemm_pack_bytes(int64_t n, int64_t nt);

/* ---- The table ------------------------------------------------------------------------ */

typedef float (*pi_dot_fn)(const void *w, const void *x, int64_t n);
typedef void (*pi_gemm_fn)(const void *W, size_t row_bytes, int64_t nr, const void *X,
                           size_t vec_bytes, int64_t nt, float *Y, int64_t ldy, int64_t n);
typedef void (*pi_quantize_fn)(const float *x, void *y, int64_t n);
typedef void (*pi_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*pi_axpy_fn)(float *y, float a, const void *w, int64_t n);
typedef void (*pi_gemv_idx_fn)(const void *W, size_t row_bytes, const int32_t *idx, int64_t ni,
                               const void *x, float *y, int64_t n);
typedef void (*pi_gemm_idx_fn)(const void *W, size_t row_bytes, const int32_t *idx, int64_t ni,
                               const void *X, size_t vec_bytes, int64_t nt, float *Y, int64_t ldy,
                               int64_t n);
typedef void (*pi_axpy_rows_fn)(float *y, const float *a, const uint8_t *const *w, int64_t nrows,
                                int64_t n);
typedef void (*pi_axpy_rows_tok_fn)(float *y, int64_t ldy, const float *a, int64_t lda,
                                    int64_t ntok, const uint8_t *const *w, int64_t nrows,
                                    int64_t n);
/* Tiles [tile0, tile1) of the packed form XP (pi_gemm_pack_bytes(n, nt) bytes, 64-byte
 * aligned) of nt activation vectors of the type's format, vb bytes apart in X. */
typedef void (*pi_pack_x_fn)(const void *X, size_t vb, int64_t nt, int64_t n, int64_t tile0,
                             int64_t tile1, void *XP);
/* Y[t * ldy + r] = dot(W row r, X vector t), r < nr, t < nt, bit for bit, from the packed
 * XP of all tiles; scratch: PI_GEMM_PACKED_SCRATCH bytes, 64-byte aligned, this call's
 * alone. */
typedef void (*pi_gemm_packed_fn)(const void *W, size_t row_bytes, int64_t nr, const void *XP,
                                  int64_t nt, float *Y, int64_t ldy, int64_t n, void *scratch);

struct pi_dot_kernel {
    enum pi_vec_fmt fmt; /* activation format this weight type is dotted with */
    /* s = dot(w, x) over n values; w: one row of the weight type [n], x: n values in fmt. */
    pi_dot_fn dot;
    /* Y[t * ldy + r] = dot(W row r, X vector t), r < nr, t < nt. W: [nr][n] rows
     * row_bytes apart; X: [nt] vectors vec_bytes apart (vec_bytes >= pi_vec_bytes(fmt, n));
     * Y: [nt][ldy]. Reuses each loaded weight block for several tokens (prefill).
     * For the quantized types every implementation's gemm gives exactly its dot. */
    pi_gemm_fn gemm;
    /* The packed prompt gemm (see above), or both NULL. */
    pi_pack_x_fn pack_x;
    pi_gemm_packed_fn gemm_packed;
};

struct pi_cpu_kernels {
    unsigned flags; /* PI_CPU_* that were used to fill the table */
    /* Indexed by weight type id; entries are zero for types that cannot be computed. */
    struct pi_dot_kernel dot[PI_TYPE_ID_LIMIT];
    /* Convert n float values x [n] to the vector format y [pi_vec_bytes(fmt, n) bytes].
     * x must be finite. Every implementation writes the same bytes. */
    pi_quantize_fn quantize_q8_0;
    pi_quantize_fn quantize_q8_k;
    /* Dequantize one row of a weight type (embeddings lookup): bit-exact with the
     * type traits' to_float for finite values, possibly vectorised. */
    pi_to_float_fn to_float[PI_TYPE_ID_LIMIT];
    /* y[i] = y[i] + a * w[i], i < n: one weight row (or a block-aligned slice of one)
     * scaled and added: the sparse down projection over the rows of ffn_down_t. n is a
     * multiple of the type's block. Per block of a quantized type the scale is folded
     * first: s = a * d (and t = a * m for types with an offset), then
     * y[i] = fmaf(s, q[i], y[i]) (Q4_1/Q5_1: y[i] + fmaf(s, q[i], t)), q the block's
     * integer quant with its offset removed (Q4_0: nibble - 8, Q5_0: value - 16); float
     * types y[i] = fmaf(a, w[i], y[i]). Fused multiply-adds (one rounding) everywhere,
     * so every implementation gives the reference's bytes; the float axpy is
     * compute-bound and the FMA saves a quarter of its vector operations. NULL for the
     * K-quants, the IQ4 types and MXFP4 (callers dequantize with to_float and use
     * axpy[PI_TYPE_F32]). */
    pi_axpy_fn axpy[PI_TYPE_ID_LIMIT];
    /* axpy(y, a[r], w[r], n) for r = 0 .. nrows-1 in that order, exactly (each value of
     * y sees the same adds in the same order), with y kept in registers across rows:
     * the down projection over many active rows. Where axpy is non-NULL, so is this. */
    pi_axpy_rows_fn axpy_rows[PI_TYPE_ID_LIMIT];
    /* The fast mode's down projection (8-bit activations, like the dense path's dots):
     * axpy_rows in integers, not exactly. Rows go in groups of 16 (g .. g+15, the last
     * one shorter); per group and block of 32 columns the coefficients c_r = a[r] d_r
     * (d_r the row's block scale) become 8-bit, q_r = rint(c_r * (127 / m)) with m the
     * largest |c_r|, and y[i] = fmaf(m / 127, sum_r q_r v_r[i], y[i]), v the block's
     * integer quant (Q4_0: nibble - 8, Q5_0: value - 16, Q8_0: the signed byte), the
     * sum in integers: a third to a quarter of the float version's vector operations.
     * A block whose c_r are not all finite, or whose m is below 1e-30, takes the exact
     * path (axpy_rows for that block and group). Every implementation gives the bytes
     * of pi_axpy_rows_i8_q4_0_ref / _q5_0_ref / _q8_0_ref. Q4_0, Q5_0 and Q8_0; NULL
     * elsewhere, and in the reference and NEON tables (callers then use axpy_rows). */
    pi_axpy_rows_fn axpy_rows_i8[PI_TYPE_ID_LIMIT];
    /* axpy_rows_i8 for ntok tokens over the same rows (a prompt's down projection):
     * for each token t and group of 16 rows g .. g+15 (the last one shorter), in group
     * order: nothing when a[t * lda + r] is 0 for every r of the group, else
     * axpy_rows_i8(y + t * ldy, a + t * lda + g, w + g, rows of the group, n). Each
     * group's rows are decoded and interleaved once for all tokens. Every implementation
     * gives the bytes of pi_axpy_rows_i8_tok_ref; set exactly where axpy_rows_i8 is. */
    pi_axpy_rows_tok_fn axpy_rows_i8_tok[PI_TYPE_ID_LIMIT];
    /* y[idx[i]] = dot[type].dot(W row idx[i], x, n) for i < ni, bit for bit (one token of
     * a sparse matmul: rows scattered, fetched ahead). May be NULL: callers then use
     * dot row by row. */
    pi_gemv_idx_fn gemv_idx[PI_TYPE_ID_LIMIT];
    /* Y[t * ldy + idx[i]] = dot[type].dot(W row idx[i], X vector t) for i < ni, t < nt,
     * bit for bit: gemm over a list of scattered rows (a sparse prompt's gate and up),
     * the tile's activations prepared once for the whole list rather than once per run
     * of consecutive rows. May be NULL: callers then call gemm per run. */
    pi_gemm_idx_fn gemm_idx[PI_TYPE_ID_LIMIT];
    /* gemm for a few vectors (nt <= 16: a decode step's GQA group of queries against the
     * rows of a Q8_0 K cache), each row decoded once for all of them: Y[t * ldy + r] =
     * dot[type].dot(W row r, X vector t), bit for bit. May be NULL (the reference and
     * NEON tables): callers then use gemv_idx or dot per vector. */
    pi_gemm_fn gemm_few[PI_TYPE_ID_LIMIT];
    /* For r = 0 .. nrows-1 in order: y[i] = y[i] + a[r] * x_r[i], i < n, x_r the F16 row
     * at x + r * stride bytes (attention's weighted sum of V; nrows = 1 is a plain
     * axpy). Each product is rounded to float, then added (no FMA): every
     * implementation gives the reference's bytes. */
    /* y[i] = x[i] as binary16 (pi_fp32_to_fp16: round to nearest even, NaN kept as a NaN
     * with its payload's top bits), i < n: the F16 KV cache's store. Every
     * implementation writes the reference's bits. */
    void (*from_float_f16)(const float *x, void *y, int64_t n);
    void (*axpy_f16)(float *y, const float *a, const void *x, size_t stride, int64_t nrows,
                     int64_t n);
    /* s[r] = dot[PI_TYPE_F16].dot(x_r, q, n) for r < nrows, x_r the F16 row at
     * x + r * stride bytes, q n floats (attention's scores): bit for bit the table's
     * F16 dot, without a call per row. */
    void (*dot_f16_rows)(float *s, const void *x, size_t stride, int64_t nrows, const float *q,
                         int64_t n);
    /* Attention's scores of nq queries (q + j * ldq, n floats each) against nrows F16
     * rows (x + r * stride bytes): s[j * lds + r], j < nq, r < nrows. Each score is
     * defined as pi_attn_score_ref computes it (8 lanes, lane l accumulating
     * q[8c + l] * x[8c + l] by fused multiply-adds in order of c, the lanes summed as
     * ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), then the n % 8 last products,
     * each rounded, added in order), so it does not depend on which rows or queries a
     * call holds: prompt and decode agree bit for bit. Each row is converted once for
     * all the queries (a GQA group, a tile of tokens). NULL where a table has no fast
     * version (the reference and NEON tables): callers use dot_f16_rows per query. */
    void (*attn_scores)(float *s, int64_t lds, const void *x, size_t stride, int64_t nrows,
                        const float *q, int64_t ldq, int64_t nq, int64_t n);
    /* axpy_f16 for nq queries over the same rows: y + j * ldy with the weights
     * a + j * lda, bit for bit nq axpy_f16 calls, each row converted once. NULL: nq
     * axpy_f16 calls. */
    void (*axpy_f16_q)(float *y, int64_t ldy, const float *a, int64_t lda, const void *x,
                       size_t stride, int64_t nrows, int64_t nq, int64_t n);
    /* The activations that need an exponential, g[i] = f(g[i]) * u[i] for i < n (u NULL:
     * f(g[i]) alone), in place (g may not overlap u otherwise):
     *   silu(x)     = x / (1 + e^-x)
     *   gelu(x)     = x / (1 + e^-2v), v = sqrt(2/pi) (x + 0.044715 x^3): x/2 (1 + tanh v)
     *   gelu_erf(x) = x/2 (1 + erf(x / sqrt 2)), erfc by Abramowitz-Stegun 7.1.26
     *                 (|error| <= 1.5e-7) with one exponential
     * The reference calls libm's expf; the overrides use a polynomial exp (relative error
     * below 2e-7 where the result is a normal float; 0 below e^-86.5, where the reference
     * may give a subnormal), so implementations agree to a few ulp, not bit for bit. NaN
     * in gives NaN out. */
    void (*silu)(float *g, const float *u, int64_t n);
    void (*gelu)(float *g, const float *u, int64_t n);
    void (*gelu_erf)(float *g, const float *u, int64_t n);
    /* Attention's softmax numerators over one row of n >= 1 scores, in place:
     *   v_p = scale * s[p], soft-capped to cap * tanh(v_p / cap) when cap > 0,
     *   s[p] = e^(v_p - max_q v_q)
     * and returns the sum of the new s[p] (>= 1). tanh(u) is 1 - 2 / (e^2u + 1) (one
     * exponential; absolute error ~1.2e-7, which the cap scales). Same agreement as the
     * activations; the sum's order differs too (the reference adds in double). */
    float (*softmax_exp)(float *s, int64_t n, float scale, float cap);
    /* x[i] = cap * tanh(x[i] / cap), i < n, cap > 0 (the final logit soft-cap), tanh as
     * in softmax_exp. */
    void (*softcap)(float *x, int64_t n, float cap);
};

/* Fill k with the scalar reference kernels, then override with the versions that the
 * CPU features in `flags` allow (pass pi_cpu_detect(), or 0 for reference only). */
void pi_cpu_kernels_init(struct pi_cpu_kernels *k, unsigned flags);

/* The scalar references, exported for the conformance tests. */
void pi_cpu_kernels_ref(struct pi_cpu_kernels *k);
/* One attention score as attn_scores defines it: q [n] floats, x [n] F16. */
float pi_attn_score_ref(const float *q, const void *x, int64_t n);
/* axpy_rows_i8 for Q4_0, Q5_0 and Q8_0 as defined above (not in the reference table:
 * scalar integer code is no faster than the exact float path there). */
void pi_axpy_rows_i8_q4_0_ref(float *y, const float *a, const uint8_t *const *w,
                              int64_t nrows, int64_t n);
void pi_axpy_rows_i8_q5_0_ref(float *y, const float *a, const uint8_t *const *w,
                              int64_t nrows, int64_t n);
/* axpy_rows_i8_tok as defined above, for type Q4_0, Q5_0 or Q8_0. */
void pi_axpy_rows_i8_tok_ref(int type, float *y, int64_t ldy, const float *a, int64_t lda,
                             int64_t ntok, const uint8_t *const *w, int64_t nrows, int64_t n);
void pi_axpy_rows_i8_q8_0_ref(float *y, const float *a, const uint8_t *const *w,
                              int64_t nrows, int64_t n);

/* Overrides, each defined in its own file compiled with its own ISA flags; they only
 * replace entries and must be called on a table already filled by the reference. */
void pi_cpu_kernels_avx2(struct pi_cpu_kernels *k);
void pi_cpu_kernels_avx2_math(struct pi_cpu_kernels *k); /* kernels_math_avx2.c */
void pi_cpu_kernels_avx512(struct pi_cpu_kernels *k);
/* ARM64: kernels_neon.c (float, Q4_0..Q8_0, IQ4_NL, quantize, axpy, attention, math) and
 * kernels_neon_k.c (the K-quants, IQ4_XS) are each compiled twice, for plain ARMv8-A
 * NEON and with +dotprod (SDOT for the integer dot products); the _dotprod table is
 * applied on top of the NEON one. */
void pi_cpu_kernels_neon(struct pi_cpu_kernels *k);
void pi_cpu_kernels_neon_k(struct pi_cpu_kernels *k);
void pi_cpu_kernels_neon_dotprod(struct pi_cpu_kernels *k);
void pi_cpu_kernels_neon_k_dotprod(struct pi_cpu_kernels *k);

#endif
