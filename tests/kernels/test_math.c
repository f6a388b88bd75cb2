/* test_math.c -- the exponential-based kernels of the CPU table (silu, gelu, gelu_erf,
 * softmax_exp, softcap; kernels.h): the scalar reference against double-precision math,
 * and every SIMD table this CPU can run against the reference, on random lengths (every
 * tail length of an 8-lane vector), gated and not, over the whole float range that
 * matters: |x| up to 120 (past exp's overflow and underflow), the clamp edges, signed
 * zeros, infinities and NaN.
 *
 * Tolerances: the reference (libm expf) within 2e-6 relative + 2e-7 absolute of the
 * formulas in double, plus what rounding the exponential's float argument costs
 * (|arg| / 2^23 relative) and, for gelu_erf, the 1.5e-7 of Abramowitz-Stegun 7.1.26
 * scaled by |x|; a SIMD table within 1e-6 relative + 1e-37 absolute of the reference
 * (its exp is within about 2 ulp of expf and rounds the same arguments; below e^-86.5
 * it gives 0 where expf may give a subnormal), the soft-capped scores within another
 * 8e-7 * cap relative (three ulps of tanh near -1, times the cap). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static uint64_t rng = 0x2545f4914f6cdd1du;

static double urand(void) { /* [0, 1) */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 0x2545f4914f6cdd1du) >> 11) / 9007199254740992.0;
}

/* Mostly the range activations live in, some far out, some special values. */
static float value(void) {
    const double r = urand();
    if (r < 0.6)
        return (float)(urand() * 16.0 - 8.0);
    if (r < 0.9)
        return (float)(urand() * 240.0 - 120.0);
    static const float special[] = {0.0f, -0.0f, 86.5f, -86.5f, 88.72283f, -88.72283f,
                                    87.33f, -87.33f, 44.36f, -44.36f, 13.2f, -13.2f,
                                    1e-30f, -1e-30f, 1e30f, -1e30f};
    return special[(size_t)(urand() * (sizeof special / sizeof special[0]))];
}

static double silu64(double x) {
    return x / (1.0 + exp(-x));
}
static double gelu64(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static double gelu_erf64(double x) {
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

/* |argument| of the exponential each computes: a float argument carries a rounding
 * error of half an ulp, which moves e^arg by |arg| / 2^24 relative. */
static double silu_arg(double x) {
    return fabs(x);
}
static double gelu_arg(double x) {
    return fabs(1.5957691216057308 * (x + 0.044715 * x * x * x));
}
static double gelu_erf_arg(double x) {
    return x * x / 2.0;
}

struct act {
    const char *name;
    size_t off; /* of the entry in struct pi_cpu_kernels */
    double (*exact)(double);
    double (*arg)(double);
    double tol_abs_per_x; /* the reference's approximation error, times |x| */
};
static const struct act acts[] = {
    {"silu", offsetof(struct pi_cpu_kernels, silu), silu64, silu_arg, 0.0},
    {"gelu", offsetof(struct pi_cpu_kernels, gelu), gelu64, gelu_arg, 0.0},
    {"gelu_erf", offsetof(struct pi_cpu_kernels, gelu_erf), gelu_erf64, gelu_erf_arg, 1.5e-7},
};

typedef void (*act_fn)(float *g, const float *u, int64_t n);
static act_fn entry(const struct pi_cpu_kernels *k, const struct act *a) {
    act_fn f;
    memcpy(&f, (const char *)k + a->off, sizeof f);
    return f;
}

static int same_nan_or_close(float got, float want, double rel, double abs_tol) {
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got))
        return got == want;
    return fabs((double)got - (double)want) <= rel * fabs((double)want) + abs_tol;
}

static void test_ref_vs_double(void **state) {
    struct pi_cpu_kernels ref;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        enum { N = 4096 };
        static float g[N];
        for (int i = 0; i < N; i++)
            g[i] = (float)(urand() * 40.0 - 20.0);
        float x[N];
        memcpy(x, g, sizeof x);
        entry(&ref, &acts[a])(g, NULL, N);
        for (int i = 0; i < N; i++) {
            const double want = acts[a].exact(x[i]);
            const double tol = (2e-6 + 1.2e-7 * acts[a].arg(x[i])) * fabs(want) + 2e-7 +
                               acts[a].tol_abs_per_x * fabs(x[i]);
            if (!(fabs(g[i] - want) <= tol)) {
                print_error("ref %s(%.9g) = %.9g, exact %.9g\n", acts[a].name, x[i], g[i], want);
                fail();
            }
        }
    }
    /* softmax_exp and softcap against double math */
    for (int trial = 0; trial < 50; trial++) {
        const int64_t n = 1 + (int64_t)(urand() * 300);
        const float scale = (float)(0.05 + urand()), cap = trial % 2 ? 0.0f : (float)(5.0 + urand() * 50.0);
        float s[300], x[300];
        for (int64_t p = 0; p < n; p++)
            x[p] = s[p] = (float)(urand() * 200.0 - 100.0);
        const float sum = ref.softmax_exp(s, n, scale, cap);
        double v[300], mx = -INFINITY, want_sum = 0.0;
        for (int64_t p = 0; p < n; p++) {
            v[p] = (double)x[p] * scale;
            if (cap > 0.0f)
                v[p] = cap * tanh(v[p] / cap);
            mx = v[p] > mx ? v[p] : mx;
        }
        for (int64_t p = 0; p < n; p++)
            want_sum += exp(v[p] - mx);
        /* the float v carries half an ulp of |v| and max v, the cap's tanh ~1.2e-7 * cap */
        double tol = 0.0;
        for (int64_t p = 0; p < n; p++) {
            const double e = exp(v[p] - mx);
            const double t = e * (2e-6 + 1.2e-7 * (fabs(v[p]) + fabs(mx)) + 4.8e-7 * cap) + 1e-7;
            tol = t > tol ? t : tol;
            if (!(fabs(s[p] - e) <= t)) {
                print_error("ref softmax_exp n=%lld p=%lld: %.9g, exact %.9g\n", (long long)n,
                            (long long)p, s[p], e);
                fail();
            }
        }
        assert_true(fabs(sum - want_sum) <= tol * (double)n + 1e-6 * want_sum);
        if (cap > 0.0f) {
            float y[300];
            memcpy(y, x, sizeof y);
            ref.softcap(y, n, cap);
            for (int64_t p = 0; p < n; p++)
                if (!(fabs(y[p] - cap * tanh((double)x[p] / cap)) <= 2.4e-7 * cap)) {
                    print_error("ref softcap(%.9g, cap %g) = %.9g\n", x[p], cap, y[p]);
                    fail();
                }
        }
    }
}

/* Every SIMD table against the reference, bit patterns compared with tolerances. */
static void test_simd_vs_ref(void **state) {
    static const unsigned tables[] = {
#if defined(__aarch64__)
        PI_CPU_NEON, PI_CPU_NEON | PI_CPU_DOTPROD,
#else
        PI_CPU_AVX2, PI_CPU_AVX2 | PI_CPU_AVX512 | PI_CPU_AVX512_VNNI,
#endif
    };
    struct pi_cpu_kernels ref, k;
    int ran = 0;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    const unsigned have = pi_cpu_detect();
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        if ((have & tables[t]) != tables[t])
            continue;
        pi_cpu_kernels_init(&k, tables[t]);
        if (k.flags != tables[t] || k.silu == ref.silu)
            continue;
        ran++;
        for (int trial = 0; trial < 400; trial++) {
            const int64_t n = 1 + trial % 37 + (trial % 5 == 0 ? 1000 : 0);
            float *g = malloc((size_t)(n + 8) * sizeof *g), *h = malloc((size_t)(n + 8) * sizeof *h);
            float *u = malloc((size_t)n * sizeof *u);
            assert_true(g && h && u);
            for (int64_t i = 0; i < n; i++) {
                g[i] = h[i] = value();
                u[i] = (float)(urand() * 4.0 - 2.0);
            }
            if (trial % 7 == 0) {
                g[trial % n] = h[trial % n] = NAN;
                g[(trial + 3) % n] = h[(trial + 3) % n] = trial % 2 ? INFINITY : -INFINITY;
            }
            for (int i = 0; i < 8; i++) /* sentinels past n: never written */
                g[n + i] = h[n + i] = 12345.0f;
            const struct act *a = &acts[trial % 3];
            const float *uu = trial % 2 ? u : NULL;
            entry(&ref, a)(h, uu, n);
            entry(&k, a)(g, uu, n);
            for (int64_t i = 0; i < n; i++)
                if (!same_nan_or_close(g[i], h[i], 1e-6, 1e-37)) {
                    print_error("table %#x %s n=%lld i=%lld: %.9g, ref %.9g\n", tables[t], a->name,
                                (long long)n, (long long)i, g[i], h[i]);
                    fail();
                }
            for (int i = 0; i < 8; i++)
                assert_true(g[n + i] == 12345.0f);

            /* softmax_exp: finite scores, capped or not */
            const float scale = (float)(0.01 + urand()), cap = trial % 3 ? 0.0f : (float)(1.0 + urand() * 50.0);
            for (int64_t i = 0; i < n; i++)
                g[i] = h[i] = (float)(urand() * 400.0 - 200.0);
            const float sr = ref.softmax_exp(h, n, scale, cap), sk = k.softmax_exp(g, n, scale, cap);
            for (int64_t i = 0; i < n; i++)
                if (!same_nan_or_close(g[i], h[i], 1e-6 + (cap > 0.0f ? 8e-7 * cap : 0.0), 1e-37)) {
                    print_error("table %#x softmax_exp n=%lld cap %g i=%lld: %.9g, ref %.9g\n",
                                tables[t], (long long)n, cap, (long long)i, g[i], h[i]);
                    fail();
                }
            /* a capped score an ulp of tanh (2.4e-7 near -1) off moves its e^ by cap * 2.4e-7 relative; allow three */
            assert_true(fabs(sr - sk) <= sr * (1e-6 * (1.0 + (double)n / 64.0) +
                                               (cap > 0.0f ? 8e-7 * cap : 0.0)));
            for (int i = 0; i < 8; i++)
                assert_true(g[n + i] == 12345.0f);

            /* softcap */
            if (cap > 0.0f) {
                for (int64_t i = 0; i < n; i++)
                    g[i] = h[i] = value();
                ref.softcap(h, n, cap);
                k.softcap(g, n, cap);
                for (int64_t i = 0; i < n; i++)
                    if (!same_nan_or_close(g[i], h[i], 1e-6, 2e-7 * cap)) {
                        print_error("table %#x softcap n=%lld cap %g i=%lld: %.9g, ref %.9g\n",
                                    tables[t], (long long)n, cap, (long long)i, g[i], h[i]);
                        fail();
                    }
                for (int i = 0; i < 8; i++)
                    assert_true(g[n + i] == 12345.0f);
            }
            free(g);
            free(h);
            free(u);
        }
    }
    if (!ran)
        print_message("# no SIMD table on this CPU or in this build: reference only\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_vs_double),
        cmocka_unit_test(test_simd_vs_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
