/* kernels_math_avx2.c -- the element-wise kernels that need an exponential (SiLU, the two
 * GELUs, attention's softmax with its soft-cap), 8 lanes of AVX2 + FMA. Compiled with
 * -mavx2 -mfma -mf16c into the AVX2 kernel library; pi_cpu_kernels_init installs these
 * only when the CPU has them. What each entry computes is in kernels.h; the scalar
 * references (libm's expf) are in kernels_ref.c.
 *
 * Tails (n not a multiple of 8) go through masked loads and stores, so no entry reads
 * or writes past n values. */
#include "kernels.h"

#include <immintrin.h>

/* Lanes i < r on (r in 1..7). */
static inline __m256i tail_mask(int64_t r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* e^x, 8 lanes. x = n ln2 + r with n = round(x log2 e) and |r| <= ln2/2 (ln2 in two parts,
 * Cody-Waite, so r is exact to a few ulp); e^r = 1 + r + r^2 P(r), P Cephes' degree-5
 * minimax polynomial for expf; then 2^n enters through the exponent bits as
 * (2 e^r) * 2^(n-1), which keeps n = 128 (x up to 88.72) finite and every product normal.
 * x is clamped to [-86.5, 88.72283] for that; below -86.5 the result is 0 (e^-86.5 is
 * 2.6e-38), above 88.72283 +inf (the largest float is e^88.7228), NaN stays NaN. */
static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-86.5f), hi = _mm256_set1_ps(88.72283f);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi); /* NaN -> lo, fixed below */
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* n in -125 .. 128, so n - 1 + 127 is a valid biased exponent (1 .. 254) */
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
    __m256 y = _mm256_mul_ps(_mm256_add_ps(p, p), _mm256_castsi256_ps(e));
    y = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static inline __m256 silu8(__m256 x) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* The exponentials' arguments are rounded as the reference rounds them (no FMA, the
 * same order): an argument one ulp off moves e^arg by |arg| ulp, which for gelu's
 * arguments (up to 88) would be the largest difference between the tables. */
static inline __m256 gelu8(__m256 x) {
    const __m256 c3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x), x), x);
    const __m256 v = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_add_ps(x, c3));
    const __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), v));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 gelu_erf8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 a = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x),
                                   _mm256_set1_ps(0.7071067811865476f));
    const __m256 t = _mm256_div_ps(one, _mm256_add_ps(one, _mm256_mul_ps(_mm256_set1_ps(0.3275911f), a)));
    __m256 poly = _mm256_fmadd_ps(_mm256_set1_ps(1.061405429f), t, _mm256_set1_ps(-1.453152027f));
    poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(1.421413741f));
    poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-0.284496736f));
    poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(0.254829592f));
    poly = _mm256_mul_ps(poly, t);
    const __m256 erfc_a = _mm256_mul_ps(poly, exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), a), a)));
    const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 c = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), erfc_a), erfc_a, neg);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), c);
}

#define ACT_AVX2(name)                                                                        \
    static void name##_avx2(float *g, const float *u, int64_t n) {                            \
        int64_t i = 0;                                                                        \
        for (; i + 8 <= n; i += 8) {                                                          \
            __m256 y = name##8(_mm256_loadu_ps(g + i));                                       \
            if (u)                                                                            \
                y = _mm256_mul_ps(y, _mm256_loadu_ps(u + i));                                 \
            _mm256_storeu_ps(g + i, y);                                                       \
        }                                                                                     \
        if (i < n) {                                                                          \
            const __m256i m = tail_mask(n - i);                                               \
            __m256 y = name##8(_mm256_maskload_ps(g + i, m));                                 \
            if (u)                                                                            \
                y = _mm256_mul_ps(y, _mm256_maskload_ps(u + i, m));                           \
            _mm256_maskstore_ps(g + i, m, y);                                                 \
        }                                                                                     \
    }
ACT_AVX2(silu)
ACT_AVX2(gelu)
ACT_AVX2(gelu_erf)
#undef ACT_AVX2

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* scale, then cap * tanh(v / cap) = cap * (1 - 2 / (e^(2v/cap) + 1)) when capped, rounded
 * as the reference does */
static inline __m256 capped(__m256 s, __m256 scale, float cap) {
    const __m256 v = _mm256_mul_ps(s, scale);
    if (!(cap > 0.0f))
        return v;
    const __m256 u = _mm256_div_ps(v, _mm256_set1_ps(cap));
    const __m256 e = exp8(_mm256_add_ps(u, u));
    const __m256 th = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                                    _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    return _mm256_mul_ps(_mm256_set1_ps(cap), th);
}

static float softmax_exp_avx2(float *s, int64_t n, float scale, float cap) {
    const __m256 sc = _mm256_set1_ps(scale);
    __m256 mx = _mm256_set1_ps(-__builtin_inff());
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = capped(_mm256_loadu_ps(s + i), sc, cap);
        _mm256_storeu_ps(s + i, v);
        mx = _mm256_max_ps(mx, v);
    }
    const __m256i m = tail_mask(n - i);
    if (i < n) {
        const __m256 v = capped(_mm256_maskload_ps(s + i, m), sc, cap);
        _mm256_maskstore_ps(s + i, m, v);
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()), v, _mm256_castsi256_ps(m)));
    }
    const __m256 vmax = _mm256_set1_ps(hmax8(mx));
    __m256 sum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), vmax));
        _mm256_storeu_ps(s + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(s + i, m), vmax)),
                                       _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(s + i, m, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum8(sum);
}

static void softcap_avx2(float *x, int64_t n, float cap) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, capped(_mm256_loadu_ps(x + i), one, cap));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(x + i, m, capped(_mm256_maskload_ps(x + i, m), one, cap));
    }
}

void pi_cpu_kernels_avx2_math(struct pi_cpu_kernels *k) {
    k->silu = silu_avx2;
    k->gelu = gelu_avx2;
    k->gelu_erf = gelu_erf_avx2;
    k->softmax_exp = softmax_exp_avx2;
    k->softcap = softcap_avx2;
}
