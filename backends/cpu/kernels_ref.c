/* kernels_ref.c -- scalar reference kernels: the definition of what every SIMD version
 * computes. Written for clarity, not speed.
 *
 * Quantized dots: per block an exact integer sum of weight quants times activation
 * quants, then one float multiply-add by the product of the scales (and, for types with
 * an offset, the offset times the activation block's sum). Blocks are added in order in
 * a float accumulator. Float dots accumulate w[i] * x[i] in order in a float. */
#include "kernels.h"

#include "runtime/fp16.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "fmaf_exact.h" /* MinGW: a correctly rounded fmaf */

#if defined(__clang__)
#  pragma STDC FP_CONTRACT OFF
#endif

/* ---- byte access ---------------------------------------------------------------------- */

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static float rdf16(const uint8_t *p) {
    return pi_fp16_to_fp32(rd16(p));
}

static float rdf32(const uint8_t *p) {
    return pi_bits_to_fp32(rd32(p));
}

/* two's complement byte without implementation-defined conversion */
static int s8(uint8_t b) {
    return (int)b - ((int)(b & 0x80u) << 1);
}

/* ---- activation vectors ------------------------------------------------------------- */

/* Reads block b of a PI_VEC_Q8_0 vector: its 32 quants in value order, d and s. */
static void q8_0_block(const uint8_t *x, int64_t b, int q[32], float *d, float *s) {
    for (int v = 0; v < 32; v++)
        q[v] = s8(x[pi_q8_0_q_offset(b, v)]);
    *d = rdf32(x + pi_q8_0_d_offset(b));
    *s = rdf32(x + pi_q8_0_d_offset(b) + 32);
}

/* Quantizes m values (m = 32 or 256) as one block: d = max|x|/127, q = roundf(x/d).
 * Returns d; a block whose d would be below FLT_MIN is all zero (and so is d). A block
 * holding a NaN or an infinity gets d = NaN (and zero quants), so that every product
 * with it is NaN: rounded to int8 it would pass on as finite numbers (the zero-block
 * rule alone turned a NaN block into zeros). */
static float quantize_block(const float *x, int m, int8_t *q) {
    float amax = 0.0f, d, id;
    int finite = 1;
    for (int i = 0; i < m; i++) {
        finite &= fabsf(x[i]) <= FLT_MAX;
        amax = fmaxf(amax, fabsf(x[i]));
    }
    d = amax / 127.0f;
    if (!finite) {
        memset(q, 0, (size_t)m);
        return NAN;
    }
    if (!(d >= FLT_MIN)) {
        memset(q, 0, (size_t)m);
        return 0.0f;
    }
    id = 1.0f / d;
    for (int i = 0; i < m; i++)
        q[i] = (int8_t)roundf(x[i] * id); /* |x * id| <= 127 + tiny: no overflow */
    return d;
}

static void quantize_q8_0_ref(const float *x, void *y, int64_t n) {
    uint8_t *out = y;
    int64_t nb = n / 32;
    memset(y, 0, pi_vec_bytes(PI_VEC_Q8_0, n));
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[32];
        int sum = 0;
        float d = quantize_block(x + 32 * b, 32, q), s;
        for (int v = 0; v < 32; v++) {
            out[pi_q8_0_q_offset(b, v)] = (uint8_t)q[v];
            sum += q[v];
        }
        s = d * (float)sum;
        int32_t isum = sum;
        memcpy(out + pi_q8_0_d_offset(b), &d, 4);
        memcpy(out + pi_q8_0_d_offset(b) + 32, &s, 4);
        memcpy(out + pi_q8_0_d_offset(b) + 64, &isum, 4);
    }
}

static void quantize_q8_k_ref(const float *x, void *y, int64_t n) {
    int64_t nb = n / 256;
    int8_t *q = y;
    int16_t *bsum = (int16_t *)(q + 256 * nb);
    float *d = (float *)(bsum + 16 * nb);
    for (int64_t b = 0; b < nb; b++) {
        d[b] = quantize_block(x + 256 * b, 256, q + 256 * b);
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++)
                sum += q[256 * b + 16 * g + i];
            bsum[16 * b + g] = (int16_t)sum;
        }
    }
}

/* Views of super-block b of a PI_VEC_Q8_K vector of nb super-blocks. */
static const int8_t *q8_k_q(const void *x, int64_t b) {
    return (const int8_t *)x + 256 * b;
}
static const int16_t *q8_k_bsum(const void *x, int64_t nb, int64_t b) {
    return (const int16_t *)((const int8_t *)x + 256 * nb) + 16 * b;
}
static float q8_k_d(const void *x, int64_t nb, int64_t b) {
    return ((const float *)((const int8_t *)x + 288 * nb))[b];
}

/* ---- float weights -------------------------------------------------------------------- */

static float dot_f32_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *p = w;
    const float *xf = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += rdf32(p + 4 * i) * xf[i];
    return sum;
}

static float dot_f16_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *p = w;
    const float *xf = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += rdf16(p + 2 * i) * xf[i];
    return sum;
}

static float dot_bf16_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *p = w;
    const float *xf = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += pi_bf16_to_fp32(rd16(p + 2 * i)) * xf[i];
    return sum;
}

static void from_float_f16_ref(const float *x, void *y, int64_t n) {
    uint8_t *o = y;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = pi_fp32_to_fp16(x[i]);
        memcpy(o + 2 * i, &h, 2);
    }
}

static void axpy_f16_ref(float *y, const float *a, const void *x, size_t stride, int64_t nrows,
                         int64_t n) {
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *p = (const uint8_t *)x + (size_t)r * stride;
        for (int64_t i = 0; i < n; i++)
            y[i] = y[i] + a[r] * rdf16(p + 2 * i);
    }
}

/* ---- axpy over one weight row (sparse down projection) ------------------------------- */

static int q5_quant(const uint8_t *qs, uint32_t qh, int v);

static void axpy_f32_ref(float *y, float a, const void *w, int64_t n) {
    const uint8_t *p = w;
    for (int64_t i = 0; i < n; i++)
        y[i] = fmaf(a, rdf32(p + 4 * i), y[i]);
}

static void axpy_f16_row_ref(float *y, float a, const void *w, int64_t n) {
    const uint8_t *p = w;
    for (int64_t i = 0; i < n; i++)
        y[i] = fmaf(a, rdf16(p + 2 * i), y[i]);
}

static void axpy_bf16_ref(float *y, float a, const void *w, int64_t n) {
    const uint8_t *p = w;
    for (int64_t i = 0; i < n; i++)
        y[i] = fmaf(a, pi_bf16_to_fp32(rd16(p + 2 * i)), y[i]);
}

static void axpy_q4_0_ref(float *y, float a, const void *w, int64_t n) {
    const uint8_t *blk = w;
    for (int64_t b = 0; b < n / 32; b++, blk += 18, y += 32) {
        const float s = a * rdf16(blk);
        for (int v = 0; v < 16; v++) {
            y[v] = fmaf(s, (float)((blk[2 + v] & 15) - 8), y[v]);
            y[v + 16] = fmaf(s, (float)((blk[2 + v] >> 4) - 8), y[v + 16]);
        }
    }
}

static void axpy_q4_1_ref(float *y, float a, const void *w, int64_t n) {
    const uint8_t *blk = w;
    for (int64_t b = 0; b < n / 32; b++, blk += 20, y += 32) {
        const float s = a * rdf16(blk), t = a * rdf16(blk + 2);
        for (int v = 0; v < 16; v++) {
            y[v] = y[v] + fmaf(s, (float)(blk[4 + v] & 15), t);
            y[v + 16] = y[v + 16] + fmaf(s, (float)(blk[4 + v] >> 4), t);
        }
    }
}

static void axpy_q5_0_ref(float *y, float a, const void *w, int64_t n) {
    const uint8_t *blk = w;
    for (int64_t b = 0; b < n / 32; b++, blk += 22, y += 32) {
        const float s = a * rdf16(blk);
        const uint32_t qh = rd32(blk + 2);
        for (int v = 0; v < 32; v++)
            y[v] = fmaf(s, (float)(q5_quant(blk + 6, qh, v) - 16), y[v]);
    }
}

static void axpy_q5_1_ref(float *y, float a, const void *w, int64_t n) {
    const uint8_t *blk = w;
    for (int64_t b = 0; b < n / 32; b++, blk += 24, y += 32) {
        const float s = a * rdf16(blk), t = a * rdf16(blk + 2);
        const uint32_t qh = rd32(blk + 4);
        for (int v = 0; v < 32; v++)
            y[v] = y[v] + fmaf(s, (float)q5_quant(blk + 8, qh, v), t);
    }
}

static void axpy_q8_0_ref(float *y, float a, const void *w, int64_t n) {
    const uint8_t *blk = w;
    for (int64_t b = 0; b < n / 32; b++, blk += 34, y += 32) {
        const float s = a * rdf16(blk);
        for (int v = 0; v < 32; v++)
            y[v] = fmaf(s, (float)s8(blk[2 + v]), y[v]);
    }
}

/* The integer quant v of a row's block at blk (its scale first) for Q4_0, Q5_0, Q8_0. */
static int32_t i8_quant(int type, const uint8_t *blk, int v) {
    switch (type) {
    case PI_TYPE_Q8_0: return (int32_t)s8(blk[2 + v]);
    case PI_TYPE_Q5_0: return q5_quant(blk + 6, rd32(blk + 2), v) - 16;
    default: return v < 16 ? (blk[2 + v] & 15) - 8 : (blk[2 + v - 16] >> 4) - 8;
    }
}

static void axpy_rows_i8_ref(int type, float *y, const float *a, const uint8_t *const *w,
                             int64_t nrows, int64_t n) {
    const size_t bb = type == PI_TYPE_Q8_0 ? 34 : type == PI_TYPE_Q5_0 ? 22 : 18;
    for (int64_t g = 0; g < nrows; g += 16) {
        const int k = nrows - g < 16 ? (int)(nrows - g) : 16;
        for (int64_t b = 0; b < n / 32; b++) {
            const size_t off = (size_t)b * bb;
            float c[16], m = 0.0f;
            int finite = 1;
            for (int r = 0; r < k; r++) {
                c[r] = a[g + r] * rdf16(w[g + r] + off);
                finite &= isfinite(c[r]) != 0;
                m = fabsf(c[r]) > m ? fabsf(c[r]) : m;
            }
            float *yb = y + 32 * b;
            if (!finite || !(m >= 1e-30f)) { /* the exact path */
                for (int r = 0; r < k; r++)
                    if (type == PI_TYPE_Q8_0)
                        axpy_q8_0_ref(yb, a[g + r], w[g + r] + off, 32);
                    else if (type == PI_TYPE_Q5_0)
                        axpy_q5_0_ref(yb, a[g + r], w[g + r] + off, 32);
                    else
                        axpy_q4_0_ref(yb, a[g + r], w[g + r] + off, 32);
                continue;
            }
            const float inv = 127.0f / m, s = m / 127.0f;
            int32_t q[16];
            for (int r = 0; r < k; r++)
                q[r] = (int32_t)lrintf(c[r] * inv);
            for (int v = 0; v < 32; v++) {
                int32_t sum = 0;
                for (int r = 0; r < k; r++)
                    sum += q[r] * i8_quant(type, w[g + r] + off, v);
                yb[v] = fmaf(s, (float)sum, yb[v]);
            }
        }
    }
}

void pi_axpy_rows_i8_q4_0_ref(float *y, const float *a, const uint8_t *const *w,
                              int64_t nrows, int64_t n) {
    axpy_rows_i8_ref(PI_TYPE_Q4_0, y, a, w, nrows, n);
}

void pi_axpy_rows_i8_q5_0_ref(float *y, const float *a, const uint8_t *const *w,
                              int64_t nrows, int64_t n) {
    axpy_rows_i8_ref(PI_TYPE_Q5_0, y, a, w, nrows, n);
}

void pi_axpy_rows_i8_q8_0_ref(float *y, const float *a, const uint8_t *const *w,
                              int64_t nrows, int64_t n) {
    axpy_rows_i8_ref(PI_TYPE_Q8_0, y, a, w, nrows, n);
}

void pi_axpy_rows_i8_tok_ref(int type, float *y, int64_t ldy, const float *a, int64_t lda,
                             int64_t ntok, const uint8_t *const *w, int64_t nrows, int64_t n) {
    for (int64_t t = 0; t < ntok; t++)
        for (int64_t g = 0; g < nrows; g += 16) {
            const int64_t k = nrows - g < 16 ? nrows - g : 16;
            int any = 0;
            for (int64_t r = 0; r < k; r++)
                any |= a[t * lda + g + r] != 0.0f;
            if (any)
                axpy_rows_i8_ref(type, y + t * ldy, a + t * lda + g, w + g, k, n);
        }
}

#define AXPY_ROWS_REF(name)                                                                       \
    static void axpy_rows_##name##_ref(float *y, const float *a, const uint8_t *const *w,         \
                                       int64_t nrows, int64_t n) {                                 \
        for (int64_t r = 0; r < nrows; r++)                                                        \
            axpy_##name##_ref(y, a[r], w[r], n);                                                   \
    }
AXPY_ROWS_REF(f32)
AXPY_ROWS_REF(f16_row)
AXPY_ROWS_REF(bf16)
AXPY_ROWS_REF(q4_0)
AXPY_ROWS_REF(q4_1)
AXPY_ROWS_REF(q5_0)
AXPY_ROWS_REF(q5_1)
AXPY_ROWS_REF(q8_0)
#undef AXPY_ROWS_REF

float pi_attn_score_ref(const float *q, const void *x, int64_t n) {
    const uint8_t *p = x;
    const int64_t n8 = n / 8 * 8;
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t c = 0; c < n8; c += 8)
        for (int i = 0; i < 8; i++)
            l[i] = fmaf(q[c + i], rdf16(p + 2 * (c + i)), l[i]);
    float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    for (int64_t i = n8; i < n; i++) {
        const float prod = q[i] * rdf16(p + 2 * i);
        s = s + prod;
    }
    return s;
}

static void dot_f16_rows_ref(float *s, const void *x, size_t stride, int64_t nrows, const float *q,
                             int64_t n) {
    for (int64_t r = 0; r < nrows; r++)
        s[r] = dot_f16_ref((const uint8_t *)x + (size_t)r * stride, q, n);
}

/* ---- activations and softmax ---------------------------------------------------------- */

/* tanh(u) = 1 - 2 / (e^(2u) + 1): one expf, no cancellation trouble for the caps (e^(2u)
 * overflowing to infinity gives 1, underflowing to 0 gives -1); libm's tanhf costs
 * about ten (it was 14% of a Gemma 2 prompt). */
static float tanh_ref(float u) {
    return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f);
}

static float silu_ref1(float x) {
    return x / (1.0f + expf(-x));
}

/* x/2 (1 + tanh v) = x sigmoid(2v): one expf and no cancellation for either sign. */
static float gelu_ref1(float x) {
    const float v = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * v));
}

/* x/2 erfc(-x / sqrt 2): erfc(a), a >= 0, by Abramowitz-Stegun 7.1.26, 2 - erfc(a) for
 * the other sign (libm's erff was 5.5% of a Falcon prompt). */
static float gelu_erf_ref1(float x) {
    const float a = fabsf(x) * 0.7071067811865476f, t = 1.0f / (1.0f + 0.3275911f * a);
    const float poly = t * (0.254829592f +
                            t * (-0.284496736f +
                                 t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    const float erfc_a = poly * expf(-a * a);
    return 0.5f * x * (x < 0.0f ? erfc_a : 2.0f - erfc_a);
}

#define ACT_REF(name)                                                                      \
    static void name##_ref(float *g, const float *u, int64_t n) {                          \
        for (int64_t i = 0; i < n; i++)                                                    \
            g[i] = u ? name##_ref1(g[i]) * u[i] : name##_ref1(g[i]);                       \
    }
ACT_REF(silu)
ACT_REF(gelu)
ACT_REF(gelu_erf)
#undef ACT_REF

static float softmax_exp_ref(float *s, int64_t n, float scale, float cap) {
    float mx = -INFINITY;
    for (int64_t p = 0; p < n; p++) {
        float v = s[p] * scale;
        if (cap > 0.0f)
            v = cap * tanh_ref(v / cap);
        s[p] = v;
        mx = v > mx ? v : mx;
    }
    double sum = 0.0;
    for (int64_t p = 0; p < n; p++) {
        s[p] = expf(s[p] - mx);
        sum += s[p];
    }
    return (float)sum;
}

static void softcap_ref(float *x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; i++)
        x[i] = cap * tanh_ref(x[i] / cap);
}

/* ---- 32-blocks ------------------------------------------------------------------------ */

/* Q4_0, 18 B: d | qs[16]; quant v: nibble of qs[v%16] (low for v < 16), minus 8. */
static float dot_q4_0_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, blk += 18) {
        int q[32], isum = 0;
        float dx, sx;
        q8_0_block(x, b, q, &dx, &sx);
        for (int v = 0; v < 16; v++)
            isum += ((blk[2 + v] & 15) - 8) * q[v] + ((blk[2 + v] >> 4) - 8) * q[v + 16];
        sum += rdf16(blk) * dx * (float)isum;
    }
    return sum;
}

/* Q4_1, 20 B: d | m | qs[16]; w = d*q + m, so dot = d*dx*sum(q*x) + m*s. */
static float dot_q4_1_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, blk += 20) {
        int q[32], isum = 0;
        float dx, sx;
        q8_0_block(x, b, q, &dx, &sx);
        for (int v = 0; v < 16; v++)
            isum += (blk[4 + v] & 15) * q[v] + (blk[4 + v] >> 4) * q[v + 16];
        sum += rdf16(blk) * dx * (float)isum + rdf16(blk + 2) * sx;
    }
    return sum;
}

/* 5-bit quant v of a Q5 block: nibble as Q4, bit 4 from bit v of qh. */
static int q5_quant(const uint8_t *qs, uint32_t qh, int v) {
    int lo = v < 16 ? (qs[v] & 15) : (qs[v - 16] >> 4);
    return lo | (int)(((qh >> v) & 1u) << 4);
}

/* Q5_0, 22 B: d | qh u32 | qs[16]; w = d*(q - 16). */
static float dot_q5_0_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, blk += 22) {
        int q[32], isum = 0;
        float dx, sx;
        uint32_t qh = rd32(blk + 2);
        q8_0_block(x, b, q, &dx, &sx);
        for (int v = 0; v < 32; v++)
            isum += (q5_quant(blk + 6, qh, v) - 16) * q[v];
        sum += rdf16(blk) * dx * (float)isum;
    }
    return sum;
}

/* Q5_1, 24 B: d | m | qh u32 | qs[16]; w = d*q + m. */
static float dot_q5_1_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, blk += 24) {
        int q[32], isum = 0;
        float dx, sx;
        uint32_t qh = rd32(blk + 4);
        q8_0_block(x, b, q, &dx, &sx);
        for (int v = 0; v < 32; v++)
            isum += q5_quant(blk + 8, qh, v) * q[v];
        sum += rdf16(blk) * dx * (float)isum + rdf16(blk + 2) * sx;
    }
    return sum;
}

/* Q8_0, 34 B: d | int8 qs[32]. */
static float dot_q8_0_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, blk += 34) {
        int q[32], isum = 0;
        float dx, sx;
        q8_0_block(x, b, q, &dx, &sx);
        for (int v = 0; v < 32; v++)
            isum += s8(blk[2 + v]) * q[v];
        sum += rdf16(blk) * dx * (float)isum;
    }
    return sum;
}

/* ---- K-quants ------------------------------------------------------------------------- */

/* The eight 6-bit scales and mins of Q4_K/Q5_K (12 bytes), as in dequant.c. */
static void k4_scales(const uint8_t *s, int sc[8], int mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 15) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
}

/* Q4_K / Q5_K share everything but the quants: w = d*sc[s]*q - dmin*mn[s] per 32-value
 * sub-block s, so dot = d*dx*sum_s sc[s]*sum(q*x) - dmin*dx*sum_s mn[s]*sum(x). qh is
 * NULL for Q4_K. */
static float dot_k4_k5(const uint8_t *blk, const uint8_t *qh, const uint8_t *qs, const void *x,
                       int64_t nb, int64_t b) {
    const int8_t *q = q8_k_q(x, b);
    const int16_t *bsum = q8_k_bsum(x, nb, b);
    int sc[8], mn[8], isum = 0, msum = 0;
    float dx = q8_k_d(x, nb, b);
    k4_scales(blk + 4, sc, mn);
    for (int s = 0; s < 8; s++) {
        int ssum = 0;
        for (int l = 0; l < 32; l++) {
            int v = (qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 15;
            if (qh)
                v |= ((qh[l] >> s) & 1) << 4;
            ssum += v * q[32 * s + l];
        }
        isum += sc[s] * ssum;
        msum += mn[s] * (bsum[2 * s] + bsum[2 * s + 1]);
    }
    return rdf16(blk) * dx * (float)isum - rdf16(blk + 2) * dx * (float)msum;
}

/* Q4_K, 144 B: d | dmin | scales[12] | qs[128]. */
static float dot_q4_k_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 256; b++, blk += 144)
        sum += dot_k4_k5(blk, NULL, blk + 16, x, n / 256, b);
    return sum;
}

/* Q5_K, 176 B: d | dmin | scales[12] | qh[32] | qs[128]. */
static float dot_q5_k_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 256; b++, blk += 176)
        sum += dot_k4_k5(blk, blk + 16, blk + 48, x, n / 256, b);
    return sum;
}

/* Q6_K, 210 B: ql[128] | qh[64] | int8 scales[16] | d. w = d*scales[e/16]*(v - 32) with
 * v the 6-bit quant of dequant.c; dot = d*dx*sum_g scales[g]*sum(v*x - 32*x). */
static float dot_q6_k_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    int64_t nb = n / 256;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, blk += 210) {
        const int8_t *q = q8_k_q(x, b);
        const int16_t *bsum = q8_k_bsum(x, nb, b);
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int gsum = 0;
            for (int i = 0; i < 16; i++) {
                int e = 16 * g + i, h = e / 128, r = e % 128;
                int lo = (blk[64 * h + r % 64] >> (4 * (r / 64))) & 15;
                int hi = (blk[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
                gsum += (lo | (hi << 4)) * q[e];
            }
            isum += s8(blk[192 + g]) * (gsum - 32 * bsum[g]);
        }
        sum += rdf16(blk + 208) * q8_k_d(x, nb, b) * (float)isum;
    }
    return sum;
}

/* Q2_K, 84 B: scales[16] | qs[64] | d | dmin. w = d*sc[g]*q - dmin*mn[g] per 16-value
 * group g (sc, mn the low and high nibble of scales[g], q the 2-bit quant of dequant.c),
 * so dot = d*dx*sum_g sc[g]*sum(q*x) - dmin*dx*sum_g mn[g]*sum(x). */
static float dot_q2_k_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    int64_t nb = n / 256;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, blk += 84) {
        const int8_t *q = q8_k_q(x, b);
        const int16_t *bsum = q8_k_bsum(x, nb, b);
        int isum = 0, msum = 0;
        float dx = q8_k_d(x, nb, b);
        for (int g = 0; g < 16; g++) {
            int gsum = 0;
            for (int i = 0; i < 16; i++) {
                int e = 16 * g + i, h = e / 128, r = e % 128;
                gsum += ((blk[16 + 32 * h + r % 32] >> (2 * (r / 32))) & 3) * q[e];
            }
            isum += (blk[g] & 15) * gsum;
            msum += (blk[g] >> 4) * bsum[g];
        }
        sum += rdf16(blk + 80) * dx * (float)isum - rdf16(blk + 82) * dx * (float)msum;
    }
    return sum;
}

/* Q3_K, 110 B: hmask[32] | qs[64] | scales[12] | d. w = d*scale[g]*q per 16-value group,
 * q in -4..3 and the signed 6-bit scales as in dequant.c: dot = d*dx*sum_g
 * scale[g]*sum(q*x). */
static float dot_q3_k_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    int64_t nb = n / 256;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, blk += 110) {
        const int8_t *q = q8_k_q(x, b);
        const uint8_t *sc = blk + 96;
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int gsum = 0;
            for (int i = 0; i < 16; i++) {
                int e = 16 * g + i, h = e / 128, r = e % 128;
                int v = (blk[32 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
                v -= ((blk[e % 32] >> (e / 32)) & 1) ? 0 : 4;
                gsum += v * q[e];
            }
            int lo = (sc[g % 8] >> (4 * (g / 8))) & 15, hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
            isum += ((lo | (hi << 4)) - 32) * gsum;
        }
        sum += rdf16(blk + 108) * q8_k_d(x, nb, b) * (float)isum;
    }
    return sum;
}

/* IQ4_XS, 136 B: d | scales_h u16 | scales_l[4] | qs[128]. w = d*ls[s]*grid[q] per
 * 32-value sub-block s (ls and the quants as in dequant.c): dot = d*dx*sum_s
 * ls[s]*sum(grid[q]*x). */
static float dot_iq4_xs_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    int64_t nb = n / 256;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, blk += 136) {
        const int8_t *q = q8_k_q(x, b);
        const unsigned sh = rd16(blk + 2);
        int isum = 0;
        for (int s = 0; s < 8; s++) {
            const uint8_t *qs = blk + 8 + 16 * s;
            int ssum = 0;
            for (int j = 0; j < 16; j++)
                ssum += pi_iq4_grid[qs[j] & 15] * q[32 * s + j] +
                        pi_iq4_grid[qs[j] >> 4] * q[32 * s + j + 16];
            int ls = (((blk[4 + s / 2] >> (4 * (s % 2))) & 15) | (int)(((sh >> (2 * s)) & 3u) << 4));
            isum += (ls - 32) * ssum;
        }
        sum += rdf16(blk) * q8_k_d(x, nb, b) * (float)isum;
    }
    return sum;
}

/* IQ4_NL, 18 B: d | qs[16], nibbles as Q4_0, w = d*grid[q]. */
static float dot_iq4_nl_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, blk += 18) {
        int q[32], isum = 0;
        float dx, sx;
        q8_0_block(x, b, q, &dx, &sx);
        for (int v = 0; v < 16; v++)
            isum += pi_iq4_grid[blk[2 + v] & 15] * q[v] + pi_iq4_grid[blk[2 + v] >> 4] * q[v + 16];
        sum += rdf16(blk) * dx * (float)isum;
    }
    return sum;
}

/* MXFP4, 17 B: e | qs[16], nibbles as Q4_0, w = d*grid[q] with d = 2^(e-128) and the
 * grid twice the E2M1 values (integers): the block sum is exact in int, and d*dx is
 * exact too (a power of two times a float) unless it falls below FLT_MIN. */
static float dot_mxfp4_ref(const void *w, const void *x, int64_t n) {
    const uint8_t *blk = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / 32; b++, blk += 17) {
        int q[32], isum = 0;
        float dx, sx;
        q8_0_block(x, b, q, &dx, &sx);
        for (int v = 0; v < 16; v++)
            isum +=
                pi_mxfp4_grid[blk[1 + v] & 15] * q[v] + pi_mxfp4_grid[blk[1 + v] >> 4] * q[v + 16];
        sum += pi_e8m0_half_to_fp32(blk[0]) * dx * (float)isum;
    }
    return sum;
}

/* ---- gemm by dots --------------------------------------------------------------------- */

static void gemm_by_dot(pi_dot_fn dot, const void *W, size_t row_bytes, int64_t nr, const void *X,
                        size_t vec_bytes, int64_t nt, float *Y, int64_t ldy, int64_t n) {
    for (int64_t t = 0; t < nt; t++)
        for (int64_t r = 0; r < nr; r++)
            Y[t * ldy + r] = dot((const uint8_t *)W + (size_t)r * row_bytes,
                                 (const uint8_t *)X + (size_t)t * vec_bytes, n);
}

/* One wrapper per type: a function pointer cannot carry its dot. */
/* clang-format off */
#define GEMM_REF(name)                                                                             \
    static void gemm_##name##_ref(const void *W, size_t rb, int64_t nr, const void *X,             \
                                  size_t vb, int64_t nt, float *Y, int64_t ldy, int64_t n) {       \
        gemm_by_dot(dot_##name##_ref, W, rb, nr, X, vb, nt, Y, ldy, n);                            \
    }
GEMM_REF(f32)
GEMM_REF(f16)
GEMM_REF(bf16)
GEMM_REF(q4_0)
GEMM_REF(q4_1)
GEMM_REF(q5_0)
GEMM_REF(q5_1)
GEMM_REF(q8_0)
GEMM_REF(q4_k)
GEMM_REF(q5_k)
GEMM_REF(q6_k)
GEMM_REF(q2_k)
GEMM_REF(q3_k)
GEMM_REF(iq4_xs)
GEMM_REF(iq4_nl)
GEMM_REF(mxfp4)
/* clang-format on */
#undef GEMM_REF

/* ---- table ---------------------------------------------------------------------------- */

static void set(struct pi_cpu_kernels *k, int type, enum pi_vec_fmt fmt, pi_dot_fn dot,
                pi_gemm_fn gemm, pi_to_float_fn to_float) {
    k->dot[type].fmt = fmt;
    k->dot[type].dot = dot;
    k->dot[type].gemm = gemm;
    k->to_float[type] = to_float;
}

void pi_cpu_kernels_ref(struct pi_cpu_kernels *k) {
    memset(k, 0, sizeof *k);
    set(k, PI_TYPE_F32, PI_VEC_F32, dot_f32_ref, gemm_f32_ref, pi_dequant_f32);
    set(k, PI_TYPE_F16, PI_VEC_F32, dot_f16_ref, gemm_f16_ref, pi_dequant_f16);
    set(k, PI_TYPE_BF16, PI_VEC_F32, dot_bf16_ref, gemm_bf16_ref, pi_dequant_bf16);
    set(k, PI_TYPE_Q4_0, PI_VEC_Q8_0, dot_q4_0_ref, gemm_q4_0_ref, pi_dequant_q4_0);
    set(k, PI_TYPE_Q4_1, PI_VEC_Q8_0, dot_q4_1_ref, gemm_q4_1_ref, pi_dequant_q4_1);
    set(k, PI_TYPE_Q5_0, PI_VEC_Q8_0, dot_q5_0_ref, gemm_q5_0_ref, pi_dequant_q5_0);
    set(k, PI_TYPE_Q5_1, PI_VEC_Q8_0, dot_q5_1_ref, gemm_q5_1_ref, pi_dequant_q5_1);
    set(k, PI_TYPE_Q8_0, PI_VEC_Q8_0, dot_q8_0_ref, gemm_q8_0_ref, pi_dequant_q8_0);
    set(k, PI_TYPE_Q4_K, PI_VEC_Q8_K, dot_q4_k_ref, gemm_q4_k_ref, pi_dequant_q4_k);
    set(k, PI_TYPE_Q5_K, PI_VEC_Q8_K, dot_q5_k_ref, gemm_q5_k_ref, pi_dequant_q5_k);
    set(k, PI_TYPE_Q6_K, PI_VEC_Q8_K, dot_q6_k_ref, gemm_q6_k_ref, pi_dequant_q6_k);
    set(k, PI_TYPE_Q2_K, PI_VEC_Q8_K, dot_q2_k_ref, gemm_q2_k_ref, pi_dequant_q2_k);
    set(k, PI_TYPE_Q3_K, PI_VEC_Q8_K, dot_q3_k_ref, gemm_q3_k_ref, pi_dequant_q3_k);
    set(k, PI_TYPE_ID_IQ4_XS, PI_VEC_Q8_K, dot_iq4_xs_ref, gemm_iq4_xs_ref, pi_dequant_iq4_xs);
    set(k, PI_TYPE_ID_IQ4_NL, PI_VEC_Q8_0, dot_iq4_nl_ref, gemm_iq4_nl_ref, pi_dequant_iq4_nl);
    set(k, PI_TYPE_MXFP4, PI_VEC_Q8_0, dot_mxfp4_ref, gemm_mxfp4_ref, pi_dequant_mxfp4);
    k->quantize_q8_0 = quantize_q8_0_ref;
    k->quantize_q8_k = quantize_q8_k_ref;
    k->axpy_f16 = axpy_f16_ref;
    k->from_float_f16 = from_float_f16_ref;
    k->axpy[PI_TYPE_F32] = axpy_f32_ref;
    k->axpy[PI_TYPE_F16] = axpy_f16_row_ref;
    k->axpy[PI_TYPE_BF16] = axpy_bf16_ref;
    k->axpy[PI_TYPE_Q4_0] = axpy_q4_0_ref;
    k->axpy[PI_TYPE_Q4_1] = axpy_q4_1_ref;
    k->axpy[PI_TYPE_Q5_0] = axpy_q5_0_ref;
    k->axpy[PI_TYPE_Q5_1] = axpy_q5_1_ref;
    k->axpy[PI_TYPE_Q8_0] = axpy_q8_0_ref;
    k->axpy_rows[PI_TYPE_F32] = axpy_rows_f32_ref;
    k->axpy_rows[PI_TYPE_F16] = axpy_rows_f16_row_ref;
    k->axpy_rows[PI_TYPE_BF16] = axpy_rows_bf16_ref;
    k->axpy_rows[PI_TYPE_Q4_0] = axpy_rows_q4_0_ref;
    k->axpy_rows[PI_TYPE_Q4_1] = axpy_rows_q4_1_ref;
    k->axpy_rows[PI_TYPE_Q5_0] = axpy_rows_q5_0_ref;
    k->axpy_rows[PI_TYPE_Q5_1] = axpy_rows_q5_1_ref;
    k->axpy_rows[PI_TYPE_Q8_0] = axpy_rows_q8_0_ref;
    k->dot_f16_rows = dot_f16_rows_ref;
    k->silu = silu_ref;
    k->gelu = gelu_ref;
    k->gelu_erf = gelu_erf_ref;
    k->softmax_exp = softmax_exp_ref;
    k->softcap = softcap_ref;
}
