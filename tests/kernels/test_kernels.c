/* test_kernels.c -- CPU kernel conformance (dav1d checkasm style) and benchmark.
 *
 *   test_kernels          cmocka tests, TAP output
 *   test_kernels --bench  GB/s of weight streamed by dot() over a 4096 x 4096 matrix per
 *                         type, reference vs every SIMD table this CPU can run, plus the
 *                         gemm throughput (64 tokens) of the SIMD tables; single thread,
 *                         timed in thread CPU time (best of several runs)
 *   test_kernels --bench-decode  one-token gemm on small-model shapes, weights streamed,
 *                         then the sparse decode kernels (bench_sparse_decode)
 *   test_kernels --bench-sparse  only the sparse decode kernels, then the prompt down
 *                         projection (PI_BENCH_POOL=1: decode weights
 *                         from the last-level cache, the kernels' compute rate)
 *
 * Every SIMD table this CPU supports is compared with the scalar reference on random
 * weights (valid scales, random quants) and random activations, with odd shapes: n of
 * 1..18, 33, 48, 128 blocks for the 32-block types (every length of a partial last group
 * of 8), 1..9, 18, 33, 128 for the others, nr and nt of 1, 3, 7, 17, 33.
 *  - quantize_q8_0, quantize_q8_k, to_float, axpy_f16 and axpy[type]: bit-exact.
 *  - dot and gemm: |simd - ref| <= tol_dot(type) * sum|w_i * x_i| (w, x the dequantized
 *    values); the SIMD gemm equals the SIMD dot exactly for quantized types.
 *  - the reference itself against double-precision float math on the unquantized
 *    activations: |ref - exact| <= sum_i |w_i| * d_x(i) / 2 * 1.001 + 1e-5 * sum|w_i x_i|,
 *    where d_x(i) is the scale of the activation block of value i (a rounding error of
 *    at most half a step per activation value). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "runtime/fp16.h"
#include "runtime/types.h"

#define TOL_REF_FLOAT 1e-5

/* |simd - ref| / sum|w_i x_i| allowed for dot and gemm, per weight type. Integer parts
 * are exact; what differs is the order of float additions (and FMA). Float types add
 * up to 4736 products in float (ref: one by one); the quantized types add one float per
 * block. Observed maxima (one seed, AVX2 and AVX-512 tables): 2.8e-7 for the float
 * types, 2.3e-7 for Q4_0, at most 1.3e-7 for the other quantized types. */
static double tol_dot(int type) {
    switch (type) {
    case PI_TYPE_F32:
    case PI_TYPE_F16:
    case PI_TYPE_BF16:
        return 5e-6;
    default:
        return 2e-6;
    }
}

/* 64-byte aligned memory (aligned_alloc wants a size that is a multiple of it). */
#ifdef _WIN32 /* no aligned_alloc in the Windows C runtime: its own pair */
#  include <malloc.h>
static void *amalloc(size_t size) {
    return _aligned_malloc((size + 63) / 64 * 64, 64);
}
static void afree(void *p) {
    _aligned_free(p);
}
#else
static void *amalloc(size_t size) {
    return aligned_alloc(64, (size + 63) / 64 * 64);
}
static void afree(void *p) {
    free(p);
}
#endif

/* ---- random data ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}

static float frand(float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd() >> 40) / (float)(1u << 24);
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_f16(uint8_t *p, float f) {
    put16(p, pi_fp32_to_fp16(f));
}

/* A random fp16 scale: magnitude 1e-3..3e-2, either sign (offsets and Q6_K-style
 * signed scales are realistic either way). */
static void put_scale(uint8_t *p) {
    float m = frand(1e-3f, 3e-2f);
    put_f16(p, (rnd() & 1) ? -m : m);
}

/* MXFP4 weights get the subnormal scales of E8M0 0 and 1 now and then, for the
 * conformance tests; the benchmarks turn them off (real models have none, and products
 * with subnormals take microcode assists on Intel cores: 3x slower at 1 block in 64). */
static int mxfp4_tiny_scales = 1;

/* The weight types under test with their traits. */
static const int test_types[] = {PI_TYPE_F32,       PI_TYPE_F16,       PI_TYPE_BF16, PI_TYPE_Q4_0,
                                 PI_TYPE_Q4_1,      PI_TYPE_Q5_0,      PI_TYPE_Q5_1, PI_TYPE_Q8_0,
                                 PI_TYPE_ID_IQ4_NL, PI_TYPE_Q2_K,      PI_TYPE_Q3_K, PI_TYPE_Q4_K,
                                 PI_TYPE_Q5_K,      PI_TYPE_Q6_K,      PI_TYPE_ID_IQ4_XS,
                                 PI_TYPE_MXFP4};
#define N_TYPES (sizeof test_types / sizeof test_types[0])

/* Fill `bytes` bytes of rows of `type` with random quants and valid random scales. */
static void random_weights(int type, uint8_t *p, size_t bytes) {
    const struct pi_type_traits *tt = pi_type_traits((uint32_t)type);
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)rnd();
    for (size_t off = 0; off < bytes; off += tt->block_bytes) {
        uint8_t *b = p + off;
        switch (type) {
        case PI_TYPE_F32: {
            uint32_t u = pi_fp32_to_bits(frand(-1.0f, 1.0f));
            memcpy(b, &u, 4);
            break;
        }
        case PI_TYPE_F16:
            put_f16(b, frand(-1.0f, 1.0f));
            break;
        case PI_TYPE_BF16:
            put16(b, pi_fp32_to_bf16(frand(-1.0f, 1.0f)));
            break;
        case PI_TYPE_Q4_0:
        case PI_TYPE_Q5_0:
        case PI_TYPE_Q8_0:
        case PI_TYPE_ID_IQ4_NL:
        case PI_TYPE_ID_IQ4_XS:
            put_scale(b);
            break;
        case PI_TYPE_Q2_K:
            put_scale(b + 80);
            put_scale(b + 82);
            break;
        case PI_TYPE_Q3_K:
            put_scale(b + 108);
            break;
        case PI_TYPE_Q4_1:
        case PI_TYPE_Q5_1:
        case PI_TYPE_Q4_K:
        case PI_TYPE_Q5_K:
            put_scale(b);
            put_scale(b + 2);
            break;
        case PI_TYPE_Q6_K:
            put_scale(b + 208);
            break;
        case PI_TYPE_MXFP4: /* E8M0 2^(e-127): 2^-10 .. 2^-3, now and then the smallest */
            b[0] = mxfp4_tiny_scales && (rnd() % 64) == 0 ? (uint8_t)(rnd() % 2)
                                                           : (uint8_t)(117 + rnd() % 8);
            break;
        }
    }
}

/* Random activations: mostly uniform, a few outliers, now and then a zero block and a
 * tiny block (below the d >= FLT_MIN threshold). */
static void random_acts(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = frand(-1.0f, 1.0f) * ((rnd() % 17) == 0 ? 8.0f : 1.0f);
    if (n >= 64 && (rnd() & 1))
        memset(x + 32, 0, 32 * sizeof *x);
    if (n >= 96 && (rnd() & 1))
        for (int i = 64; i < 96; i++)
            x[i] = 1e-38f * frand(-1.0f, 1.0f);
}

/* ---- implementations ------------------------------------------------------------------ */

struct impl {
    const char *name;
    unsigned flags;
};

static const struct impl impls[] = {
#if defined(__aarch64__)
    {"neon", PI_CPU_NEON},
    {"dotprod", PI_CPU_NEON | PI_CPU_DOTPROD},
#else
    {"avx2", PI_CPU_AVX2},
    {"avx512", PI_CPU_AVX2 | PI_CPU_AVX512 | PI_CPU_AVX512_VNNI},
#endif
};
#define N_IMPLS (sizeof impls / sizeof impls[0])

/* Fill k for impl i; 0 when this CPU (or this build) cannot run it, with a TAP
 * diagnostic naming the table the first time, so that a skipped table leaves a trace
 * in the log (test_required_tables lists every table's state). */
static int impl_table(size_t i, struct pi_cpu_kernels *k) {
    static int reported[N_IMPLS];
    unsigned have = pi_cpu_detect();
    int ok = (impls[i].flags & have) == impls[i].flags;
    if (ok) {
        pi_cpu_kernels_init(k, impls[i].flags);
        ok = k->flags == impls[i].flags;
    }
    if (!ok && !reported[i]) {
        reported[i] = 1;
        if ((impls[i].flags & have) != impls[i].flags)
            print_message("# skipping the %s table: this CPU lacks it (cpu flags %#x, needs "
                          "%#x)\n", impls[i].name, have, impls[i].flags);
        else
            print_message("# skipping the %s table: not in this build (table flags %#x)\n",
                          impls[i].name, k->flags);
    }
    return ok;
}

/* PI_REQUIRE_SIMD=avx2,avx512 (tools/test.sh, from /proc/cpuinfo; neon,dotprod on ARM64
 * under qemu, tools/cross/test_arm64.sh): each named table must
 * be usable here, so that a detection or build regression cannot quietly turn every
 * SIMD comparison below into a skip. */
static void test_required_tables(void **state) {
    (void)state;
    const char *req = getenv("PI_REQUIRE_SIMD");
    char names[128];
    snprintf(names, sizeof names, "%s", req ? req : "");
    int n_req = 0;
    for (char *tok = strtok(names, ", "); tok; tok = strtok(NULL, ", ")) {
        size_t i = 0;
        while (i < N_IMPLS && strcmp(impls[i].name, tok) != 0)
            i++;
        if (i == N_IMPLS)
            fail_msg("PI_REQUIRE_SIMD names %s, which is no table here", tok);
        struct pi_cpu_kernels k;
        if (!impl_table(i, &k))
            fail_msg("PI_REQUIRE_SIMD=%s: the %s table cannot run here", req, tok);
        n_req++;
    }
    for (size_t i = 0; i < N_IMPLS; i++) {
        struct pi_cpu_kernels k;
        print_message("# the %s table %s\n", impls[i].name,
                      impl_table(i, &k) ? "runs" : "is skipped in every test below");
    }
    print_message("# %d table(s) required by PI_REQUIRE_SIMD\n", n_req);
}

static int block_of(int type) {
    return (int)pi_type_traits((uint32_t)type)->block_size;
}

static enum pi_vec_fmt fmt_of(const struct pi_cpu_kernels *k, int type) {
    return k->dot[type].fmt;
}

static void quantize(const struct pi_cpu_kernels *k, enum pi_vec_fmt f, const float *x, void *y,
                     int64_t n) {
    if (f == PI_VEC_F32)
        memcpy(y, x, (size_t)n * sizeof *x);
    else if (f == PI_VEC_Q8_0)
        k->quantize_q8_0(x, y, n);
    else
        k->quantize_q8_k(x, y, n);
}

/* Dequantized activation value i of a vector in format f (what the dot computes with). */
static float act_value(enum pi_vec_fmt f, const void *v, int64_t n, int64_t i) {
    const uint8_t *p = v;
    float d;
    if (f == PI_VEC_F32)
        return ((const float *)v)[i];
    if (f == PI_VEC_Q8_0) {
        memcpy(&d, p + pi_q8_0_d_offset(i / 32), 4);
        return d * (float)(int8_t)p[pi_q8_0_q_offset(i / 32, (int)(i % 32))];
    }
    memcpy(&d, p + 288 * (n / 256) + 4 * (i / 256), 4);
    return d * (float)(int8_t)p[i];
}

/* ---- tests: quantize, to_float -------------------------------------------------------- */

static void check_quantize(const struct pi_cpu_kernels *ref, const struct pi_cpu_kernels *k,
                           const char *name, enum pi_vec_fmt f, int64_t n) {
    size_t bytes = pi_vec_bytes(f, n);
    float *x = malloc((size_t)n * sizeof *x);
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    assert_non_null(x);
    assert_non_null(a);
    assert_non_null(b);
    random_acts(x, n);
    /* exact ties: with max 127 the scale is 1, so x*id = x */
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -3.5f;
    x[3] = 0.5f;
    x[4] = -0.5f;
    x[5] = 126.49999f;
    memset(a, 0xa5, bytes);
    memset(b, 0x5a, bytes);
    quantize(ref, f, x, a, n);
    quantize(k, f, x, b, n);
    if (memcmp(a, b, bytes) != 0) {
        print_error("%s: quantize fmt %d n=%lld differs from the reference\n", name, (int)f,
                    (long long)n);
        fail();
    }
    assert_int_equal((int8_t)a[0], 127);
    assert_int_equal((int8_t)a[f == PI_VEC_Q8_0 ? pi_q8_0_q_offset(0, 1) : 1], 3);
    assert_int_equal((int8_t)a[f == PI_VEC_Q8_0 ? pi_q8_0_q_offset(0, 2) : 2], -4);
    free(x);
    free(a);
    free(b);
}

static void test_quantize(void **state) {
    struct pi_cpu_kernels ref, k;
    static const int64_t n32[] = {32, 64, 96, 224, 256, 288, 576, 1056, 4096};
    static const int64_t n256[] = {256, 512, 768, 1792, 4096};
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (size_t i = 0; i < N_IMPLS; i++) {
        if (!impl_table(i, &k))
            continue;
        for (size_t j = 0; j < sizeof n32 / sizeof n32[0]; j++)
            check_quantize(&ref, &k, impls[i].name, PI_VEC_Q8_0, n32[j]);
        for (size_t j = 0; j < sizeof n256 / sizeof n256[0]; j++)
            check_quantize(&ref, &k, impls[i].name, PI_VEC_Q8_K, n256[j]);
    }
}

static void test_to_float(void **state) {
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (size_t i = 0; i < N_IMPLS; i++) {
        if (!impl_table(i, &k))
            continue;
        for (size_t t = 0; t < N_TYPES; t++) {
            const int type = test_types[t], bs = block_of(type);
            static const int nblk[] = {1, 3, 7, 8, 33};
            for (size_t j = 0; j < sizeof nblk / sizeof nblk[0]; j++) {
                int64_t n = (int64_t)nblk[j] * (bs == 1 ? 37 : bs);
                size_t bytes = pi_type_row_bytes((uint32_t)type, n);
                uint8_t *w = malloc(bytes);
                float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
                assert_non_null(w);
                assert_non_null(a);
                assert_non_null(b);
                random_weights(type, w, bytes);
                ref.to_float[type](w, a, n);
                k.to_float[type](w, b, n);
                if (memcmp(a, b, (size_t)n * sizeof *a) != 0) {
                    print_error("%s: to_float %s n=%lld differs from the reference\n",
                                impls[i].name, pi_type_traits((uint32_t)type)->name, (long long)n);
                    fail();
                }
                free(w);
                free(a);
                free(b);
            }
        }
    }
}

/* axpy_f16: bit-exact with the reference, on odd lengths and row counts. */
/* from_float_f16 (the F16 KV cache's store): every table writes the reference's bits,
 * for random bit patterns (every class: NaNs quiet and signalling, infinities,
 * subnormals, values that round up into the next binade or overflow) at every length
 * and alignment of the vector loop. */
static void test_from_float_f16(void **state) {
    enum { N = 4099 };
    struct pi_cpu_kernels ref, k;
    uint32_t *bits = malloc(N * sizeof *bits);
    uint16_t *want = malloc(N * sizeof *want), *got = malloc((N + 1) * sizeof *got);
    (void)state;
    assert_non_null(bits);
    assert_non_null(want);
    assert_non_null(got);
    pi_cpu_kernels_ref(&ref);
    for (int i = 0; i < N; i++) {
        const uint32_t r = (uint32_t)rnd();
        switch (i % 5) {
        case 0: /* anything */
            bits[i] = r;
            break;
        case 1: /* around F16's range: exponents 100..150 */
            bits[i] = (r & 0x807fffffu) | ((100u + r % 51u) << 23);
            break;
        case 2: /* ties and near-ties of the rounding */
            bits[i] = (r & 0xff800000u) | ((r >> 9) & 0x7fe000u) | 0x1000u | (r & 1u);
            break;
        case 3: /* NaN (quiet or not) and infinity */
            bits[i] = (r & 0x80000000u) | 0x7f800000u | (r % 3 == 0 ? 0u : (r >> 9) & 0x7fffffu);
            break;
        default: /* in the normal range */
            bits[i] = (r & 0x807fffffu) | ((113u + r % 30u) << 23);
            break;
        }
    }
    float *x = malloc(N * sizeof *x);
    assert_non_null(x);
    memcpy(x, bits, N * sizeof *x);
    ref.from_float_f16(x, want, N);
    for (int i = 0; i < N; i++) /* the reference is pi_fp32_to_fp16 */
        if (want[i] != pi_fp32_to_fp16(x[i]))
            fail_msg("ref from_float_f16 of %08x", (unsigned)bits[i]);
    for (size_t i = 0; i < N_IMPLS; i++) {
        if (!impl_table(i, &k))
            continue;
        for (int64_t off = 0; off < 9; off++)
            for (int64_t n = 0; n < 40; n += 3) {
                memset(got, 0xa5, (N + 1) * sizeof *got);
                k.from_float_f16(x + off, got, n);
                assert_memory_equal(got, want + off, (size_t)n * sizeof *got);
                assert_int_equal(got[n], 0xa5a5); /* nothing past n */
            }
        k.from_float_f16(x, got, N);
        for (int j = 0; j < N; j++)
            if (got[j] != want[j])
                fail_msg("%s: from_float_f16 of %08x: %04x, reference %04x", impls[i].name,
                         (unsigned)bits[j], got[j], want[j]);
    }
    free(bits);
    free(want);
    free(got);
    free(x);
}

static void test_axpy_f16(void **state) {
    static const int64_t lens[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 72, 80, 128, 129, 259};
    static const int64_t rows[] = {1, 2, 5, 33};
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    assert_non_null(ref.axpy_f16);
    for (size_t i = 0; i < N_IMPLS; i++) {
        if (!impl_table(i, &k))
            continue;
        for (size_t j = 0; j < sizeof lens / sizeof lens[0]; j++) {
            for (size_t m = 0; m < sizeof rows / sizeof rows[0]; m++) {
                const int64_t n = lens[j], nr = rows[m];
                const size_t stride = (size_t)n * 2 + 6; /* rows need not be packed */
                uint8_t *x = malloc(stride * (size_t)nr);
                float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
                float *s = malloc((size_t)nr * sizeof *s);
                assert_true(x && a && b && s);
                random_weights(PI_TYPE_F16, x, stride * (size_t)nr);
                for (int64_t e = 0; e < n; e++)
                    a[e] = b[e] = frand(-1.0f, 1.0f);
                for (int64_t r = 0; r < nr; r++)
                    s[r] = frand(-2.0f, 2.0f);
                ref.axpy_f16(a, s, x, stride, nr, n);
                k.axpy_f16(b, s, x, stride, nr, n);
                if (memcmp(a, b, (size_t)n * sizeof *a) != 0) {
                    print_error("%s: axpy_f16 n=%lld rows=%lld differs from the reference\n",
                                impls[i].name, (long long)n, (long long)nr);
                    fail();
                }
                free(x);
                free(a);
                free(b);
                free(s);
            }
        }
    }
}

/* axpy[type]: every SIMD entry bit-exact with the reference; the reference within float
 * rounding of y + a * w computed in double from the dequantized row. */
static void test_axpy_rows(void **state) {
    static const int64_t blocks[] = {1, 2, 3, 7, 8, 9, 33, 128};
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (int type = 0; type < PI_TYPE_ID_LIMIT; type++) {
        if (!ref.axpy[type])
            continue;
        const struct pi_type_traits *tt = pi_type_traits((uint32_t)type);
        assert_non_null(ref.to_float[type]);
        for (size_t j = 0; j < sizeof blocks / sizeof blocks[0]; j++) {
            const int64_t n = blocks[j] * tt->block_size + (tt->block_size == 1 ? 5 : 0);
            const size_t wb = (size_t)(n / tt->block_size) * tt->block_bytes;
            uint8_t *w = malloc(wb);
            float *y0 = malloc((size_t)n * sizeof *y0), *y1 = malloc((size_t)n * sizeof *y1);
            float *wf = malloc((size_t)n * sizeof *wf);
            assert_true(w && y0 && y1 && wf);
            random_weights(type, w, wb);
            ref.to_float[type](w, wf, n);
            const float a = frand(-2.0f, 2.0f);
            for (int64_t e = 0; e < n; e++)
                y0[e] = frand(-1.0f, 1.0f);
            memcpy(y1, y0, (size_t)n * sizeof *y0);
            ref.axpy[type](y1, a, w, n);
            for (int64_t e = 0; e < n; e++) {
                const double want = (double)y0[e] + (double)a * (double)wf[e];
                /* Q4_1/Q5_1 add a * m to a * d * q: each rounded on its own, so their
                 * magnitudes (|d q| <= |w| + |m|), not only |a w|, bound the error */
                double m = 0.0;
                if (type == PI_TYPE_Q4_1 || type == PI_TYPE_Q5_1) {
                    uint16_t h;
                    memcpy(&h, w + (size_t)(e / 32) * tt->block_bytes + 2, 2);
                    m = fabs((double)pi_fp16_to_fp32(h));
                }
                const double tol =
                    4e-7 * (fabs((double)y0[e]) + fabs((double)a) * (fabs((double)wf[e]) + 2 * m)) +
                    1e-30;
                if (!(fabs((double)y1[e] - want) <= tol)) { /* NaN fails too */
                    print_error("%s: reference axpy n=%lld value %lld: %.9g, want %.9g\n",
                                tt->name, (long long)n, (long long)e, y1[e], want);
                    fail();
                }
            }
            for (size_t i = 0; i < N_IMPLS; i++) {
                if (!impl_table(i, &k) || !k.axpy[type])
                    continue;
                float *y2 = malloc((size_t)n * sizeof *y2);
                assert_non_null(y2);
                memcpy(y2, y0, (size_t)n * sizeof *y0);
                k.axpy[type](y2, a, w, n);
                if (memcmp(y1, y2, (size_t)n * sizeof *y1) != 0) {
                    print_error("%s: %s axpy n=%lld differs from the reference\n", impls[i].name,
                                tt->name, (long long)n);
                    fail();
                }
                /* axpy_rows: the same as axpy row by row, for 1..19 rows */
                assert_non_null(k.axpy_rows[type]);
                enum { MR = 19 };
                uint8_t *wr = malloc(wb * MR);
                const uint8_t *ptr[MR];
                float ar[MR];
                assert_non_null(wr);
                random_weights(type, wr, wb * MR);
                for (int r = 0; r < MR; r++) {
                    ptr[r] = wr + (size_t)(MR - 1 - r) * wb; /* any addresses, any order */
                    ar[r] = r % 5 == 2 ? 0.0f : frand(-2.0f, 2.0f);
                }
                for (int nr = 1; nr <= MR; nr += 6) {
                    memcpy(y2, y0, (size_t)n * sizeof *y0);
                    float *y3 = malloc((size_t)n * sizeof *y3);
                    assert_non_null(y3);
                    memcpy(y3, y0, (size_t)n * sizeof *y0);
                    for (int r = 0; r < nr; r++)
                        ref.axpy[type](y2, ar[r], ptr[r], n);
                    k.axpy_rows[type](y3, ar, ptr, nr, n);
                    if (memcmp(y2, y3, (size_t)n * sizeof *y2) != 0) {
                        print_error("%s: %s axpy_rows n=%lld rows=%d differs from row-by-row "
                                    "axpy\n", impls[i].name, tt->name, (long long)n, nr);
                        fail();
                    }
                    free(y3);
                }
                free(wr);
                free(y2);
            }
            free(w);
            free(y0);
            free(y1);
            free(wf);
        }
    }
}

/* dot_f16_rows: bit for bit the same table's F16 dot, row by row. */
static void test_dot_f16_rows(void **state) {
    static const int64_t lens[] = {1, 7, 8, 17, 32, 64, 100, 128, 259};
    struct pi_cpu_kernels k;
    (void)state;
    for (size_t i = 0; i <= N_IMPLS; i++) { /* every SIMD table, then the reference */
        const char *name = i < N_IMPLS ? impls[i].name : "ref";
        if (i == N_IMPLS)
            pi_cpu_kernels_ref(&k);
        else if (!impl_table(i, &k))
            continue;
        for (size_t j = 0; j < sizeof lens / sizeof lens[0]; j++) {
            const int64_t n = lens[j], nr = 13;
            const size_t stride = (size_t)n * 2 + 10;
            uint8_t *x = malloc(stride * (size_t)nr);
            float *q = malloc((size_t)n * sizeof *q), s[13];
            assert_true(x && q);
            random_weights(PI_TYPE_F16, x, stride * (size_t)nr);
            random_acts(q, n);
            k.dot_f16_rows(s, x, stride, nr, q, n);
            for (int64_t r = 0; r < nr; r++) {
                float want = k.dot[PI_TYPE_F16].dot(x + (size_t)r * stride, q, n);
                if (memcmp(&want, &s[r], sizeof want) != 0) {
                    print_error("%s: dot_f16_rows n=%lld row %lld: %.9g != dot %.9g\n", name,
                                (long long)n, (long long)r, s[r], want);
                    fail();
                }
            }
            free(x);
            free(q);
        }
    }
}

/* attn_scores: for every table that has it, each score is pi_attn_score_ref's bit for
 * bit (head dims with and without a tail of n % 8, wider than one converted piece,
 * row counts around its 8 rows, several queries); nothing else of s is written.
 * axpy_f16_q: bit for bit one axpy_f16 per query. */
static void test_attn_scores(void **state) {
    static const int64_t lens[] = {1, 7, 8, 17, 64, 100, 128, 264, 300};
    static const int64_t rows[] = {1, 5, 8, 13, 33};
    const float sentinel = -777.0f;
    struct pi_cpu_kernels k;
    (void)state;
    for (size_t i = 0; i < N_IMPLS; i++) {
        if (!impl_table(i, &k))
            continue;
        for (size_t a = 0; a < sizeof lens / sizeof lens[0]; a++)
            for (size_t b = 0; b < sizeof rows / sizeof rows[0]; b++) {
                const int64_t n = lens[a], nr = rows[b], nq = 1 + (int64_t)((a + b) % 7);
                const int64_t ldq = n + 3, lds = nr + 2, ldy = n + 5;
                const size_t stride = (size_t)n * 2 + 6;
                uint8_t *x = malloc(stride * (size_t)nr);
                float *q = malloc((size_t)(nq * ldq) * sizeof *q);
                float *sc = malloc((size_t)(nq * lds) * sizeof *sc);
                float *w = malloc((size_t)(nq * nr) * sizeof *w);
                float *y1 = malloc((size_t)(nq * ldy) * sizeof *y1);
                float *y2 = malloc((size_t)(nq * ldy) * sizeof *y2);
                assert_true(x && q && sc && w && y1 && y2);
                random_weights(PI_TYPE_F16, x, stride * (size_t)nr);
                random_acts(q, nq * ldq);
                random_acts(w, nq * nr);
                random_acts(y1, nq * ldy);
                memcpy(y2, y1, (size_t)(nq * ldy) * sizeof *y1);
                for (int64_t e = 0; e < nq * lds; e++)
                    sc[e] = sentinel;
                if (k.attn_scores) {
                    k.attn_scores(sc, lds, x, stride, nr, q, ldq, nq, n);
                    for (int64_t j = 0; j < nq; j++)
                        for (int64_t r = 0; r < lds; r++) {
                            const float got = sc[j * lds + r];
                            const float want =
                                r < nr ? pi_attn_score_ref(q + j * ldq, x + (size_t)r * stride, n)
                                       : sentinel;
                            if (memcmp(&got, &want, sizeof got) != 0)
                                fail_msg("%s: attn_scores n=%lld rows=%lld query %lld row %lld: "
                                         "%.9g != %.9g", impls[i].name, (long long)n, (long long)nr,
                                         (long long)j, (long long)r, got, want);
                        }
                }
                if (k.axpy_f16_q) {
                    k.axpy_f16_q(y1, ldy, w, nr, x, stride, nr, nq, n);
                    for (int64_t j = 0; j < nq; j++)
                        k.axpy_f16(y2 + j * ldy, w + j * nr, x, stride, nr, n);
                    assert_memory_equal(y1, y2, (size_t)(nq * ldy) * sizeof *y1);
                }
                free(x);
                free(q);
                free(sc);
                free(w);
                free(y1);
                free(y2);
            }
    }
}

/* ---- tests: dot and gemm -------------------------------------------------------------- */

struct problem {
    int type;
    enum pi_vec_fmt fmt;
    int64_t n, nr, nt, ldy;
    size_t rb, vb;
    uint8_t *w;  /* [nr] rows of rb bytes */
    uint8_t *x;  /* [nt] vectors of vb bytes */
    double *mag; /* [nt][nr] sum |w_i x_i| */
    /* [nt][nr] sum w_i x_i in double, of the dequantized weights and activations: the
     * reference for a table whose activation format for the type is not the scalar
     * reference's (the AVX-512 table takes PI_VEC_Q8_0 for some K-quants) */
    double *exact;
};

/* A problem whose activations are in format fmt (quantized by the reference). */
static void problem_make_fmt(struct problem *p, const struct pi_cpu_kernels *ref, int type,
                             enum pi_vec_fmt fmt, int64_t n, int64_t nr, int64_t nt) {
    float *xf = malloc((size_t)n * sizeof *xf), *wf = malloc((size_t)n * sizeof *wf);
    assert_non_null(xf);
    assert_non_null(wf);
    p->type = type;
    p->fmt = fmt;
    p->n = n;
    p->nr = nr;
    p->nt = nt;
    p->ldy = nr + 3;
    p->rb = (size_t)pi_type_row_bytes((uint32_t)type, n);
    p->vb = pi_vec_bytes(p->fmt, n) + 64; /* vectors need not be packed */
    p->w = malloc(p->rb * (size_t)nr);
    p->x = amalloc(p->vb * (size_t)nt);
    p->mag = calloc((size_t)(nr * nt), sizeof *p->mag);
    p->exact = calloc((size_t)(nr * nt), sizeof *p->exact);
    assert_non_null(p->w);
    assert_non_null(p->x);
    assert_non_null(p->mag);
    assert_non_null(p->exact);
    random_weights(type, p->w, p->rb * (size_t)nr);
    for (int64_t t = 0; t < nt; t++) {
        random_acts(xf, n);
        quantize(ref, p->fmt, xf, p->x + (size_t)t * p->vb, n);
    }
    for (int64_t r = 0; r < nr; r++) {
        ref->to_float[type](p->w + (size_t)r * p->rb, wf, n);
        for (int64_t t = 0; t < nt; t++) {
            double m = 0.0, e = 0.0;
            for (int64_t i = 0; i < n; i++) {
                const double v = (double)wf[i] * act_value(p->fmt, p->x + (size_t)t * p->vb, n, i);
                m += fabs(v);
                e += v;
            }
            p->mag[t * nr + r] = m;
            p->exact[t * nr + r] = e;
        }
    }
    free(xf);
    free(wf);
}

/* A problem in the reference table's activation format for the type. */
static void problem_make(struct problem *p, const struct pi_cpu_kernels *ref, int type, int64_t n,
                         int64_t nr, int64_t nt) {
    problem_make_fmt(p, ref, type, fmt_of(ref, type), n, nr, nt);
}

static void problem_free(struct problem *p) {
    free(p->w);
    afree(p->x);
    free(p->mag);
    free(p->exact);
}

/* What table k's value for (row r, token t) of p is checked against: the reference
 * table's own value where k takes the same activation format, else the exact sum. */
static float ref_value(const struct problem *p, const struct pi_cpu_kernels *ref, int64_t r,
                       int64_t t) {
    if (fmt_of(ref, p->type) != p->fmt)
        return (float)p->exact[t * p->nr + r];
    return ref->dot[p->type].dot(p->w + (size_t)r * p->rb, p->x + (size_t)t * p->vb, p->n);
}

static double max_ratio_seen[PI_TYPE_ID_LIMIT];

static void check_value(const struct problem *p, const char *name, const char *what, int64_t r,
                        int64_t t, float got, float want) {
    double err = fabs((double)got - (double)want), lim = tol_dot(p->type) * p->mag[t * p->nr + r];
    if (p->mag[t * p->nr + r] > 0 && err / p->mag[t * p->nr + r] > max_ratio_seen[p->type])
        max_ratio_seen[p->type] = err / p->mag[t * p->nr + r];
    if (!(err <= lim)) {
        print_error("%s: %s %s n=%lld nr=%lld nt=%lld row %lld token %lld: %.9g vs ref %.9g "
                    "(err %.3g, limit %.3g)\n",
                    name, pi_type_traits((uint32_t)p->type)->name, what, (long long)p->n,
                    (long long)p->nr, (long long)p->nt, (long long)r, (long long)t, got, want, err,
                    lim);
        fail();
    }
}

static void check_problem_own(const struct problem *p, const struct pi_cpu_kernels *ref,
                              const struct pi_cpu_kernels *k, const char *name);

static void check_problem(const struct problem *p, const struct pi_cpu_kernels *ref,
                          const struct pi_cpu_kernels *k, const char *name) {
    if (fmt_of(k, p->type) != p->fmt) { /* the same shape in k's own activation format */
        struct problem q;
        problem_make_fmt(&q, ref, p->type, fmt_of(k, p->type), p->n, p->nr, p->nt);
        check_problem_own(&q, ref, k, name);
        problem_free(&q);
        return;
    }
    check_problem_own(p, ref, k, name);
}

/* check_problem for a problem in k's activation format for the type. */
static void check_problem_own(const struct problem *p, const struct pi_cpu_kernels *ref,
                              const struct pi_cpu_kernels *k, const char *name) {
    const struct pi_dot_kernel *rk = &ref->dot[p->type], *sk = &k->dot[p->type];
    const int same = rk->fmt == p->fmt;
    size_t ny = (size_t)(p->nt * p->ldy);
    float *yr = malloc(ny * sizeof *yr), *ys = malloc(ny * sizeof *ys);
    assert_non_null(yr);
    assert_non_null(ys);
    assert_int_equal(sk->fmt, p->fmt);
    for (size_t i = 0; i < ny; i++)
        yr[i] = ys[i] = -12345.0f;
    if (same)
        rk->gemm(p->w, p->rb, p->nr, p->x, p->vb, p->nt, yr, p->ldy, p->n);
    else
        for (int64_t t = 0; t < p->nt; t++)
            for (int64_t r = 0; r < p->nr; r++)
                yr[t * p->ldy + r] = (float)p->exact[t * p->nr + r];
    sk->gemm(p->w, p->rb, p->nr, p->x, p->vb, p->nt, ys, p->ldy, p->n);
    for (int64_t t = 0; t < p->nt; t++) {
        for (int64_t r = 0; r < p->ldy; r++) {
            float want = yr[t * p->ldy + r], got = ys[t * p->ldy + r];
            if (r >= p->nr) { /* the gap between rows of Y is not touched */
                assert_true(got == -12345.0f);
                continue;
            }
            check_value(p, name, "gemm", r, t, got, want);
            /* dot of the same pair, against the reference dot; for quantized types the
             * implementation's dot and gemm agree exactly (kernels.h) */
            if (t % 3 == 0 || r % 5 == 0) {
                const uint8_t *w = p->w + (size_t)r * p->rb, *x = p->x + (size_t)t * p->vb;
                float d = sk->dot(w, x, p->n);
                check_value(p, name, "dot", r, t, d, ref_value(p, ref, r, t));
                if (p->fmt != PI_VEC_F32 && d != got) {
                    print_error("%s: %s n=%lld: gemm %.9g != dot %.9g\n", name,
                                pi_type_traits((uint32_t)p->type)->name, (long long)p->n, got, d);
                    fail();
                }
            }
        }
    }
    free(yr);
    free(ys);
}

static void test_dot_gemm(void **state) {
    /* 32-block types: every tail length (rows of nb % 8 != 0 blocks end in a partial
     * group) alone and after full groups */
    static const int nblk[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,
                               13, 14, 15, 16, 17, 18, 33, 48, 128};
    static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {7, 3}, {17, 1}, {33, 17}, {1, 33}};
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (size_t t = 0; t < N_TYPES; t++) {
        const int type = test_types[t], bs = block_of(type);
        for (size_t j = 0; j < sizeof nblk / sizeof nblk[0]; j++) {
            if (bs != 32 && nblk[j] > 9 && nblk[j] != 18 && nblk[j] != 33 && nblk[j] != 128)
                continue; /* the other types keep their shorter list */
            /* float types: odd lengths too (block 1), e.g. 37, 259, 4736 */
            const int64_t n = bs == 1 ? (int64_t)nblk[j] * 37 : (int64_t)nblk[j] * bs;
            if (bs == 256 && nblk[j] > 18)
                continue; /* long enough */
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                struct problem p;
                if (n > 2000 && shapes[s][0] * shapes[s][1] > 40)
                    continue;
                problem_make(&p, &ref, type, n, shapes[s][0], shapes[s][1]);
                for (size_t i = 0; i < N_IMPLS; i++)
                    if (impl_table(i, &k))
                        check_problem(&p, &ref, &k, impls[i].name);
                problem_free(&p);
            }
        }
    }
    for (size_t t = 0; t < N_TYPES; t++)
        print_message("# %-5s largest |simd - ref| / sum|w*x|: %.3g (limit %.3g)\n",
                      pi_type_traits((uint32_t)test_types[t])->name, max_ratio_seen[test_types[t]],
                      tol_dot(test_types[t]));
}

/* Table `name`'s entry `what` for `type` is checked against that table's dot on rows
 * random_weights makes: the type must be one of test_types and have a dot. */
static void require_testable(const struct pi_cpu_kernels *k, int type, const char *name,
                             const char *what) {
    size_t t = 0;
    while (t < N_TYPES && test_types[t] != type)
        t++;
    if (t == N_TYPES || !k->dot[type].dot)
        fail_msg("%s: %s for %s, which is not under test or has no dot", name, what,
                 pi_type_traits((uint32_t)type)->name);
}

/* gemv_idx[type] (one token of a sparse matmul): for every table, the reference included,
 * and every type where the entry is non-NULL, on a matrix of 37 rows and idx the first ni
 * entries of a random permutation of them (scattered rows, no repeats, any order):
 *  - y[idx[i]] is bit for bit the same table's dot of that row (kernels.h promises it);
 *  - every other entry of y keeps its sentinel (the rest of the permutation stays in the
 *    idx buffer, so a kernel that reads past ni writes a row it must not);
 *  - the value is within tol_dot of the reference's dot.
 * n covers, for the 32-block types, rows within one AVX2 K-block of 2048 values (the
 * paired-row decode path) and past it; ni of 0, 1, a few (odd, for the pair's tail) and
 * all rows. */
static void test_gemv_idx(void **state) {
    static const int nblk32[] = {1, 3, 7, 8, 9, 14, 17, 64, 65, 128};
    static const int nblk_other[] = {1, 2, 3, 8, 9};
    static const int64_t nis[] = {0, 1, 2, 3, 7, 20, 37};
    enum { NR = 37, NY = NR + 3 }; /* y has 3 entries past the last row, never written */
    const float sentinel = -12345.0f;
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (size_t i = 0; i <= N_IMPLS; i++) { /* every SIMD table, then the reference */
        const char *name = i < N_IMPLS ? impls[i].name : "ref";
        int n_checked = 0;
        if (i == N_IMPLS)
            pi_cpu_kernels_ref(&k);
        else if (!impl_table(i, &k))
            continue;
        for (int type = 0; type < PI_TYPE_ID_LIMIT; type++) {
            if (!k.gemv_idx[type])
                continue;
            const struct pi_type_traits *tt = pi_type_traits((uint32_t)type);
            require_testable(&k, type, name, "gemv_idx");
            const int bs = block_of(type);
            const int *nblk = bs == 32 ? nblk32 : nblk_other;
            const size_t nn = bs == 32 ? sizeof nblk32 / sizeof nblk32[0]
                                       : sizeof nblk_other / sizeof nblk_other[0];
            for (size_t j = 0; j < nn; j++) {
                const int64_t n = (int64_t)nblk[j] * (bs == 1 ? 37 : bs);
                struct problem p;
                int32_t idx[NR];
                float y[NY];
                problem_make_fmt(&p, &ref, type, fmt_of(&k, type), n, NR, 1);
                for (size_t m = 0; m < sizeof nis / sizeof nis[0]; m++) {
                    const int64_t ni = nis[m];
                    int written[NR] = {0};
                    for (int r = 0; r < NR; r++) /* Fisher-Yates: a fresh random order */
                        idx[r] = r;
                    for (int r = NR - 1; r > 0; r--) {
                        const int s = (int)(rnd() % (uint64_t)(r + 1));
                        const int32_t tmp = idx[r];
                        idx[r] = idx[s];
                        idx[s] = tmp;
                    }
                    for (int e = 0; e < NY; e++)
                        y[e] = sentinel;
                    k.gemv_idx[type](p.w, p.rb, idx, ni, p.x, y, n);
                    for (int64_t e = 0; e < ni; e++) {
                        const int r = idx[e];
                        const uint8_t *w = p.w + (size_t)r * p.rb;
                        const float want = k.dot[type].dot(w, p.x, n);
                        written[r] = 1;
                        if (memcmp(&y[r], &want, sizeof want) != 0) {
                            print_error("%s: %s gemv_idx n=%lld ni=%lld row %d (idx[%lld]): "
                                        "%.9g != dot %.9g\n",
                                        name, tt->name, (long long)n, (long long)ni, r,
                                        (long long)e, y[r], want);
                            fail();
                        }
                        check_value(&p, name, "gemv_idx", r, 0, y[r], ref_value(&p, &ref, r, 0));
                    }
                    for (int e = 0; e < NY; e++) {
                        if ((e < NR && written[e]) || memcmp(&y[e], &sentinel, sizeof y[e]) == 0)
                            continue;
                        print_error("%s: %s gemv_idx n=%lld ni=%lld wrote y[%d] = %.9g, which "
                                    "is not in idx\n",
                                    name, tt->name, (long long)n, (long long)ni, e, y[e]);
                        fail();
                    }
                }
                problem_free(&p);
            }
            n_checked++;
        }
        print_message("# gemv_idx: the %s table has it for %d type(s), all checked\n", name,
                      n_checked);
    }
}

/* gemm_few[type] (a decode step's GQA group of queries against a quantized K cache): for
 * every table that has it and every type, 1..16 vectors against 1..37 rows (odd counts
 * for the row pairs' tail), lengths of 1..9 blocks (the merged partial groups of head
 * dims 64 and 128 among them) and past one K-block: Y[t * ldy + r] is the table's dot
 * bit for bit (kernels.h), and the padding between Y's rows keeps its sentinel. */
static void test_gemm_few(void **state) {
    static const int nblk32[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 17, 65};
    static const int nblk_other[] = {1, 2, 3};
    static const int64_t nrs[] = {1, 2, 5, 37}, nts[] = {1, 2, 3, 4, 8, 16};
    enum { NR = 37, LDY = NR + 3, NT = 16 };
    const float sentinel = -12345.0f;
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (size_t i = 0; i < N_IMPLS; i++) {
        int n_checked = 0;
        if (!impl_table(i, &k))
            continue;
        for (int type = 0; type < PI_TYPE_ID_LIMIT; type++) {
            if (!k.gemm_few[type])
                continue;
            const struct pi_type_traits *tt = pi_type_traits((uint32_t)type);
            require_testable(&k, type, impls[i].name, "gemm_few");
            const int bs = block_of(type);
            const int *nblk = bs == 32 ? nblk32 : nblk_other;
            const size_t nn = bs == 32 ? sizeof nblk32 / sizeof nblk32[0]
                                       : sizeof nblk_other / sizeof nblk_other[0];
            for (size_t j = 0; j < nn; j++) {
                const int64_t n = (int64_t)nblk[j] * (bs == 1 ? 37 : bs);
                struct problem p;
                static float y[NT * LDY];
                problem_make_fmt(&p, &ref, type, fmt_of(&k, type), n, NR, NT);
                for (size_t a = 0; a < sizeof nrs / sizeof nrs[0]; a++)
                    for (size_t b = 0; b < sizeof nts / sizeof nts[0]; b++) {
                        const int64_t nr = nrs[a], nt = nts[b];
                        for (int e = 0; e < NT * LDY; e++)
                            y[e] = sentinel;
                        k.gemm_few[type](p.w, p.rb, nr, p.x, p.vb, nt, y, LDY, n);
                        for (int64_t tk = 0; tk < NT; tk++)
                            for (int64_t r = 0; r < LDY; r++) {
                                const float got = y[tk * LDY + r];
                                if (tk < nt && r < nr) {
                                    const float want = k.dot[type].dot(
                                        p.w + (size_t)r * p.rb, p.x + (size_t)tk * p.vb, n);
                                    if (memcmp(&got, &want, sizeof got) == 0)
                                        continue;
                                    print_error("%s: %s gemm_few n=%lld nr=%lld nt=%lld "
                                                "y[%lld][%lld] = %.9g != dot %.9g\n",
                                                impls[i].name, tt->name, (long long)n,
                                                (long long)nr, (long long)nt, (long long)tk,
                                                (long long)r, got, want);
                                    fail();
                                } else if (memcmp(&got, &sentinel, sizeof got) != 0) {
                                    print_error("%s: %s gemm_few n=%lld nr=%lld nt=%lld wrote "
                                                "y[%lld][%lld] outside its nt x nr\n",
                                                impls[i].name, tt->name, (long long)n,
                                                (long long)nr, (long long)nt, (long long)tk,
                                                (long long)r);
                                    fail();
                                }
                            }
                    }
                problem_free(&p);
            }
            n_checked++;
        }
        print_message("# gemm_few: the %s table has it for %d type(s), all checked\n",
                      impls[i].name, n_checked);
    }
}

/* gemm_idx[type] (a sparse prompt's gate and up): for every table that has it, rows in
 * a random order (a subset of them), token counts across the full-tile and tail paths
 * (1, 3, 8, 9, 16, 19), odd lengths: each value is the table's dot bit for bit, and
 * nothing outside the listed rows is written. */
static void test_gemm_idx(void **state) {
    static const int nblk32[] = {1, 3, 6, 9, 17, 65};
    static const int nblk_other[] = {1, 2, 3};
    static const int64_t nts[] = {1, 3, 8, 9, 16, 19};
    enum { NR = 29 };
    const float sentinel = -12345.0f;
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (size_t i = 0; i < N_IMPLS; i++) {
        int n_checked = 0;
        if (!impl_table(i, &k))
            continue;
        for (int type = 0; type < PI_TYPE_ID_LIMIT; type++) {
            if (!k.gemm_idx[type])
                continue;
            const struct pi_type_traits *tt = pi_type_traits((uint32_t)type);
            require_testable(&k, type, impls[i].name, "gemm_idx");
            const int bs = block_of(type);
            const int *nblk = bs == 32 ? nblk32 : nblk_other;
            const size_t nn = bs == 32 ? sizeof nblk32 / sizeof nblk32[0]
                                       : sizeof nblk_other / sizeof nblk_other[0];
            for (size_t j = 0; j < nn; j++)
                for (size_t m = 0; m < sizeof nts / sizeof nts[0]; m++) {
                    const int64_t n = (int64_t)nblk[j] * bs, nt = nts[m];
                    struct problem p;
                    problem_make_fmt(&p, &ref, type, fmt_of(&k, type), n, NR, nt);
                    int32_t idx[NR];
                    for (int r = 0; r < NR; r++)
                        idx[r] = r;
                    for (int r = NR - 1; r > 0; r--) {
                        const int sw = (int)(rnd() % (uint64_t)(r + 1));
                        const int32_t tmp = idx[r];
                        idx[r] = idx[sw];
                        idx[sw] = tmp;
                    }
                    const int64_t ni = NR - 1 - (int64_t)(m % 3) * 5; /* leave some out */
                    float *y = malloc((size_t)(nt * p.ldy) * sizeof *y);
                    assert_non_null(y);
                    for (int64_t e = 0; e < nt * p.ldy; e++)
                        y[e] = sentinel;
                    k.gemm_idx[type](p.w, p.rb, idx, ni, p.x, p.vb, nt, y, p.ldy, n);
                    int listed[NR] = {0};
                    for (int64_t e = 0; e < ni; e++)
                        listed[idx[e]] = 1;
                    for (int64_t tk = 0; tk < nt; tk++)
                        for (int r = 0; r < p.ldy; r++) {
                            const float got = y[tk * p.ldy + r];
                            if (r < NR && listed[r]) {
                                const float want = k.dot[type].dot(p.w + (size_t)r * p.rb,
                                                                   p.x + (size_t)tk * p.vb, n);
                                if (memcmp(&got, &want, sizeof got) != 0) {
                                    print_error("%s: %s gemm_idx n=%lld nt=%lld row %d token "
                                                "%lld: %.9g != dot %.9g\n", impls[i].name,
                                                tt->name, (long long)n, (long long)nt, r,
                                                (long long)tk, got, want);
                                    fail();
                                }
                            } else if (memcmp(&got, &sentinel, sizeof got) != 0) {
                                print_error("%s: %s gemm_idx wrote row %d, not listed\n",
                                            impls[i].name, tt->name, r);
                                fail();
                            }
                        }
                    free(y);
                    problem_free(&p);
                }
            n_checked++;
        }
        print_message("# gemm_idx: the %s table has it for %d type(s), all checked\n",
                      impls[i].name, n_checked);
    }
}

/* pack_x + gemm_packed (the packed prompt gemm): for every table that has them, row
 * counts around the register tile (3) and the panel (36 rows), token counts around the
 * tile of 8 (a partial last tile), lengths with a partial last group and over one
 * K-block, the activations packed in two calls over the tiles: every value is the
 * table's dot bit for bit and nothing outside Y's rows is written. */
static void test_gemm_packed(void **state) {
    static const int nblk[] = {1, 3, 7, 9, 14, 17, 65, 72};
    static const int64_t nts[] = {1, 3, 8, 9, 16, 19, 33};
    static const int64_t nrs[] = {1, 2, 5, 40, 77};
    const float sentinel = -12345.0f;
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    void *scratch = amalloc(PI_GEMM_PACKED_SCRATCH);
    assert_non_null(scratch);
    for (size_t i = 0; i < N_IMPLS; i++) {
        int n_checked = 0;
        if (!impl_table(i, &k))
            continue;
        for (int type = 0; type < PI_TYPE_ID_LIMIT; type++) {
            const struct pi_dot_kernel *dk = &k.dot[type];
            if (!dk->gemm_packed && !dk->pack_x)
                continue;
            const struct pi_type_traits *tt = pi_type_traits((uint32_t)type);
            if (!dk->gemm_packed || !dk->pack_x || !dk->dot)
                fail_msg("%s: %s has half of the packed gemm", impls[i].name, tt->name);
            for (size_t j = 0; j < sizeof nblk / sizeof nblk[0]; j++)
                for (size_t m = 0; m < sizeof nts / sizeof nts[0]; m++) {
                    const int64_t n = (int64_t)nblk[j] * block_of(type), nt = nts[m];
                    const int64_t nr = nrs[(j + m) % (sizeof nrs / sizeof nrs[0])];
                    const int64_t tiles = (nt + PI_GEMM_PACK_TOKENS - 1) / PI_GEMM_PACK_TOKENS;
                    struct problem p;
                    problem_make_fmt(&p, &ref, type, fmt_of(&k, type), n, nr, nt);
                    uint8_t *xp = amalloc(pi_gemm_pack_bytes(n, nt));
                    float *y = malloc((size_t)(nt * p.ldy) * sizeof *y);
                    assert_non_null(xp);
                    assert_non_null(y);
                    for (int64_t e = 0; e < nt * p.ldy; e++)
                        y[e] = sentinel;
                    dk->pack_x(p.x, p.vb, nt, n, tiles / 2, tiles, xp);
                    dk->pack_x(p.x, p.vb, nt, n, 0, tiles / 2, xp);
                    dk->gemm_packed(p.w, p.rb, nr, xp, nt, y, p.ldy, n, scratch);
                    for (int64_t tk = 0; tk < nt; tk++)
                        for (int64_t r = 0; r < p.ldy; r++) {
                            const float got = y[tk * p.ldy + r];
                            if (r >= nr) {
                                if (memcmp(&got, &sentinel, sizeof got) != 0) {
                                    print_error("%s: %s gemm_packed wrote y[%lld][%lld]\n",
                                                impls[i].name, tt->name, (long long)tk,
                                                (long long)r);
                                    fail();
                                }
                                continue;
                            }
                            const float want =
                                dk->dot(p.w + (size_t)r * p.rb, p.x + (size_t)tk * p.vb, n);
                            if (memcmp(&got, &want, sizeof got) != 0) {
                                print_error("%s: %s gemm_packed n=%lld nr=%lld nt=%lld row %lld "
                                            "token %lld: %.9g != dot %.9g\n",
                                            impls[i].name, tt->name, (long long)n,
                                            (long long)nr, (long long)nt, (long long)r,
                                            (long long)tk, got, want);
                                fail();
                            }
                        }
                    free(y);
                    afree(xp);
                    problem_free(&p);
                }
            n_checked++;
        }
        print_message("# gemm_packed: the %s table has it for %d type(s), all checked\n",
                      impls[i].name, n_checked);
    }
    afree(scratch);
}

/* A NaN or an infinity among the activations makes every product with the block that
 * holds it NaN, for every weight type and table: quantizing to int8 must not turn it into
 * finite numbers (a NaN block became a zero block; an infinity rounded to -128). The
 * quantized vectors of every table equal the reference's bit for bit. */
/* axpy_rows_i8 (Q4_0, Q5_0, Q8_0): the reference within the bound that 8-bit coefficients allow of
 * the exact sum, every table's version equal to the reference bit for bit (NaN for NaN),
 * over 1..40 rows (groups of 16 and a short one), with zero, tiny, dominant and
 * non-finite coefficients and an infinite block scale (those blocks take the exact
 * path). */
static int same_floats(const float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!(isnan(x[i]) && isnan(y[i])) && memcmp(x + i, y + i, sizeof *x) != 0)
            return 0;
    return 1;
}

static void test_axpy_rows_i8(void **state) {
    static const int64_t blocks[] = {1, 3, 8, 9};
    enum { MR = 40 };
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    int checked = 0;
    static const int types[] = {PI_TYPE_Q4_0, PI_TYPE_Q5_0, PI_TYPE_Q8_0};
    static const char *const tnames[] = {"Q4_0", "Q5_0", "Q8_0"};
    static const pi_axpy_rows_fn want_fns[] = {pi_axpy_rows_i8_q4_0_ref, pi_axpy_rows_i8_q5_0_ref,
                                               pi_axpy_rows_i8_q8_0_ref};
    for (int ti = 0; ti < 3; ti++)
    for (size_t j = 0; j < sizeof blocks / sizeof blocks[0]; j++) {
        const int type = types[ti];
        const size_t bb = pi_type_traits((uint32_t)type)->block_bytes;
        pi_axpy_rows_fn want_fn = want_fns[ti];
        assert_null(ref.axpy_rows_i8[type]); /* not in the reference table */
        const int64_t nb = blocks[j], n = nb * 32;
        const size_t wb = (size_t)nb * bb;
        uint8_t *wr = malloc(wb * MR);
        float *y0 = malloc((size_t)n * sizeof *y0), *y1 = malloc((size_t)n * sizeof *y1);
        float *y2 = malloc((size_t)n * sizeof *y2), *wf = malloc((size_t)n * MR * sizeof *wf);
        assert_true(wr && y0 && y1 && y2 && wf);
        const uint8_t *ptr[MR];
        float ar[MR];
        for (int pattern = 0; pattern < 6; pattern++) {
            random_weights(type, wr, wb * MR);
            for (int r = 0; r < MR; r++) {
                ptr[r] = wr + (size_t)((r * 7) % MR) * wb; /* any addresses, any order */
                ar[r] = r % 5 == 2 ? 0.0f : frand(-2.0f, 2.0f);
                if (pattern == 1 && r % 16 == 3) /* one row dominating its group */
                    ar[r] = 300.0f;
                if (pattern == 2) /* tiny: the exact path (m < 1e-30) */
                    ar[r] = r % 16 < 8 ? 0.0f : 1e-34f;
                if (pattern == 3 && (r == 1 || r == 17)) /* non-finite: the exact path */
                    ar[r] = NAN;
                if (pattern == 5 && r % 9 == 0) /* a row with no weight: skipped */
                    ar[r] = 0.0f;
            }
            if (pattern == 4) /* an infinite block scale in row 5, block 0 */
                put16(wr + (size_t)((5 * 7) % MR) * wb, 0x7c00);
            for (int r = 0; r < MR; r++)
                ref.to_float[type](ptr[r], wf + (size_t)r * n, n);
            for (int64_t e = 0; e < n; e++)
                y0[e] = frand(-1.0f, 1.0f);
            for (int nr = 1; nr <= MR; nr += nr < 16 ? 5 : 3) {
                memcpy(y1, y0, (size_t)n * sizeof *y0);
                want_fn(y1, ar, ptr, nr, n);
                /* the reference against the exact sum */
                for (int64_t e = 0; e < n && pattern != 3 && pattern != 4; e++) {
                    const int64_t b = e / 32;
                    double want = (double)y0[e], tol = 1e-6 * fabs((double)y0[e]) + 1e-30;
                    for (int g = 0; g < nr; g += 16) {
                        double m = 0.0;
                        for (int r = g; r < nr && r < g + 16; r++) {
                            uint16_t h;
                            memcpy(&h, ptr[r] + (size_t)b * bb, 2);
                            const double c = fabs((double)ar[r] * pi_fp16_to_fp32(h));
                            m = c > m ? c : m;
                        }
                        for (int r = g; r < nr && r < g + 16; r++) {
                            const double t = (double)ar[r] * wf[(size_t)r * n + e];
                            uint16_t h;
                            memcpy(&h, ptr[r] + (size_t)b * bb, 2);
                            const double d = fabs((double)pi_fp16_to_fp32(h));
                            const double nib = d > 0 ? fabs((double)wf[(size_t)r * n + e]) / d : 0;
                            want += t;
                            /* rounding q to an integer: half a step of m / 127 per row */
                            tol += (m >= 1e-30 ? 0.5 * m / 127.0 * nib : 0.0) + 1e-6 * fabs(t);
                        }
                    }
                    if (!(fabs((double)y1[e] - want) <= tol)) {
                        print_error("%s axpy_rows_i8 reference: pattern %d n=%lld rows=%d "
                                    "value %lld: %.9g, want %.9g (tolerance %.3g)\n",
                                    tnames[ti], pattern,
                                    (long long)n, nr, (long long)e, y1[e], want, tol);
                        fail();
                    }
                }
                if (pattern == 2 || pattern == 3 || pattern == 4) {
                    /* the exact path's blocks: the exact kernel's bytes */
                    memcpy(y2, y0, (size_t)n * sizeof *y0);
                    ref.axpy_rows[type](y2, ar, ptr, nr < 16 ? nr : 16, 32);
                    if (nr <= 16 && (pattern != 4 || nr > 5) && (pattern != 3 || nr > 1) &&
                        !same_floats(y1, y2, 32)) {
                        print_error("axpy_rows_i8 reference: pattern %d rows=%d: the first "
                                    "block is not the exact path's\n", pattern, nr);
                        fail();
                    }
                }
                for (size_t i = 0; i < N_IMPLS; i++) {
                    if (!impl_table(i, &k) || !k.axpy_rows_i8[type])
                        continue;
                    memcpy(y2, y0, (size_t)n * sizeof *y0);
                    k.axpy_rows_i8[type](y2, ar, ptr, nr, n);
                    checked++;
                    if (!same_floats(y1, y2, n)) {
                        print_error("%s: %s axpy_rows_i8 pattern %d n=%lld rows=%d differs "
                                    "from the reference\n", impls[i].name, tnames[ti],
                                    pattern, (long long)n, nr);
                        fail();
                    }
                }
            }
        }
        free(wr);
        free(y0);
        free(y1);
        free(y2);
        free(wf);
    }
    print_message("# axpy_rows_i8: %d table calls equal to the reference\n", checked);
}

/* axpy_rows_i8_tok (Q4_0, Q5_0, Q8_0): every table's version equal to the reference bit
 * for bit (NaN for NaN) for 1..9 tokens over 1..40 rows, with tokens whose group is all
 * zero (skipped), a dominant row, non-finite and tiny coefficients (the exact path); the
 * reference is per token axpy_rows_i8 where no group is all zero; the table has it exactly
 * where it has axpy_rows_i8. */
static void test_axpy_rows_i8_tok(void **state) {
    enum { MR = 40, MT = 9 };
    static const int types[] = {PI_TYPE_Q4_0, PI_TYPE_Q5_0, PI_TYPE_Q8_0};
    static const pi_axpy_rows_fn one_fns[] = {pi_axpy_rows_i8_q4_0_ref, pi_axpy_rows_i8_q5_0_ref,
                                              pi_axpy_rows_i8_q8_0_ref};
    static const int64_t blocks[] = {1, 8, 11};
    struct pi_cpu_kernels k;
    (void)state;
    int checked = 0;
    for (size_t i = 0; i < N_IMPLS; i++)
        if (impl_table(i, &k))
            for (int t = 0; t < PI_TYPE_ID_LIMIT; t++)
                assert_true(!k.axpy_rows_i8_tok[t] == !k.axpy_rows_i8[t]);
    for (int ti = 0; ti < 3; ti++)
        for (size_t j = 0; j < sizeof blocks / sizeof blocks[0]; j++) {
            const int type = types[ti];
            const size_t bb = pi_type_traits((uint32_t)type)->block_bytes;
            const int64_t nb = blocks[j], n = nb * 32, ldy = n + 5, lda = MR + 3;
            const size_t wb = (size_t)nb * bb;
            uint8_t *wr = malloc(wb * MR);
            float *y0 = malloc((size_t)(MT * ldy) * sizeof *y0);
            float *y1 = malloc((size_t)(MT * ldy) * sizeof *y1);
            float *y2 = malloc((size_t)(MT * ldy) * sizeof *y2);
            float *ar = malloc((size_t)(MT * lda) * sizeof *ar);
            assert_true(wr && y0 && y1 && y2 && ar);
            const uint8_t *ptr[MR];
            for (int pattern = 0; pattern < 5; pattern++) {
                random_weights(type, wr, wb * MR);
                for (int r = 0; r < MR; r++)
                    ptr[r] = wr + (size_t)((r * 7) % MR) * wb;
                for (int t = 0; t < MT; t++)
                    for (int r = 0; r < lda; r++) {
                        float v = frand(-2.0f, 2.0f);
                        if (pattern == 1 && (r * 3 + t) % 4 != 0) /* a sparse prompt */
                            v = 0.0f;
                        if (pattern == 2 && t % 3 == 1 && r >= 16 && r < 32) /* a zero group */
                            v = 0.0f;
                        if (pattern == 3 && t == 2 && r == 20)
                            v = NAN;
                        if (pattern == 3 && t == 4 && r < 16)
                            v = r == 3 ? 1e-34f : 0.0f;
                        if (pattern == 4 && r % 16 == 5)
                            v = 300.0f;
                        ar[t * lda + r] = v;
                    }
                for (int64_t e = 0; e < MT * ldy; e++)
                    y0[e] = frand(-1.0f, 1.0f);
                for (int nt = 1; nt <= MT; nt += 2)
                    for (int nr = 1; nr <= MR; nr += nr < 16 ? 5 : 3) {
                        memcpy(y1, y0, (size_t)(MT * ldy) * sizeof *y0);
                        pi_axpy_rows_i8_tok_ref(type, y1, ldy, ar, lda, nt, ptr, nr, n);
                        if (pattern == 0 || pattern == 4) { /* no zero group: axpy_rows_i8 */
                            memcpy(y2, y0, (size_t)(MT * ldy) * sizeof *y0);
                            for (int t = 0; t < nt; t++)
                                one_fns[ti](y2 + t * ldy, ar + t * lda, ptr, nr, n);
                            assert_true(same_floats(y1, y2, MT * ldy));
                        }
                        for (size_t i = 0; i < N_IMPLS; i++) {
                            if (!impl_table(i, &k) || !k.axpy_rows_i8_tok[type])
                                continue;
                            memcpy(y2, y0, (size_t)(MT * ldy) * sizeof *y0);
                            k.axpy_rows_i8_tok[type](y2, ldy, ar, lda, nt, ptr, nr, n);
                            checked++;
                            if (!same_floats(y1, y2, MT * ldy)) {
                                print_error("%s: type %d axpy_rows_i8_tok pattern %d n=%lld "
                                            "tokens=%d rows=%d differs from the reference\n",
                                            impls[i].name, type, pattern, (long long)n, nt, nr);
                                fail();
                            }
                        }
                    }
            }
            free(wr);
            free(y0);
            free(y1);
            free(y2);
            free(ar);
        }
    print_message("# axpy_rows_i8_tok: %d table calls equal to the reference\n", checked);
}

static void test_non_finite_activations(void **state) {
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    struct pi_cpu_kernels ref, k;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (size_t t = 0; t < N_TYPES; t++) {
        const int type = test_types[t];
        const enum pi_vec_fmt f = fmt_of(&ref, type);
        const int64_t n = 512;
        const size_t rb = (size_t)pi_type_row_bytes((uint32_t)type, n), vb = pi_vec_bytes(f, n);
        /* room for any format: a table may take another one for the type */
        const size_t cap = pi_vec_bytes(PI_VEC_F32, n) + 64;
        uint8_t *w = malloc(rb), *a = amalloc(cap), *b = amalloc(cap);
        float *x = malloc((size_t)n * sizeof *x);
        assert_non_null(w);
        assert_non_null(a);
        assert_non_null(b);
        assert_non_null(x);
        assert_true(pi_vec_bytes(PI_VEC_Q8_0, n) < cap && pi_vec_bytes(PI_VEC_Q8_K, n) < cap);
        random_weights(type, w, rb);
        for (size_t v = 0; v < sizeof bad / sizeof bad[0]; v++) {
            for (int pos = 0; pos < n; pos += 97) {
                random_acts(x, n);
                x[pos] = bad[v];
                if (f == PI_VEC_F32)
                    memcpy(a, x, (size_t)n * sizeof *x);
                else
                    quantize(&ref, f, x, a, n);
                const float want = ref.dot[type].dot(w, a, n);
                if (!isnan(want) && !isinf(want)) {
                    print_error("ref: %s dot with %g at %d gave %g\n",
                                pi_type_traits((uint32_t)type)->name, (double)bad[v], pos,
                                (double)want);
                    fail();
                }
                for (size_t i = 0; i < N_IMPLS; i++) {
                    if (!impl_table(i, &k))
                        continue;
                    const enum pi_vec_fmt kf = fmt_of(&k, type);
                    const uint8_t *xa = a;
                    if (kf != f) { /* the table's own format */
                        quantize(&ref, kf, x, b, n);
                        xa = b;
                    } else if (f != PI_VEC_F32) {
                        quantize(&k, f, x, b, n);
                        assert_memory_equal(a, b, vb);
                    }
                    const float got = k.dot[type].dot(w, xa, n);
                    if (!isnan(got) && !isinf(got)) {
                        print_error("%s: %s dot with %g at %d gave %g\n", impls[i].name,
                                    pi_type_traits((uint32_t)type)->name, (double)bad[v], pos,
                                    (double)got);
                        fail();
                    }
                }
            }
        }
        free(w);
        afree(a);
        afree(b);
        free(x);
    }
}

/* The reference against float math on the unquantized activations. */
static void test_ref_vs_float(void **state) {
    struct pi_cpu_kernels ref;
    (void)state;
    pi_cpu_kernels_ref(&ref);
    for (size_t t = 0; t < N_TYPES; t++) {
        const int type = test_types[t], bs = block_of(type);
        const enum pi_vec_fmt f = fmt_of(&ref, type);
        const int xb = f == PI_VEC_Q8_0 ? 32 : 256; /* activation block */
        static const int nblk[] = {1, 3, 9, 16};
        for (size_t j = 0; j < sizeof nblk / sizeof nblk[0]; j++) {
            const int64_t n = (int64_t)nblk[j] * (bs == 1 ? 37 : bs);
            size_t rb = (size_t)pi_type_row_bytes((uint32_t)type, n);
            uint8_t *w = malloc(rb), *xq = amalloc(pi_vec_bytes(f, n) + 64);
            float *x = malloc((size_t)n * sizeof *x), *wf = malloc((size_t)n * sizeof *wf);
            double exact = 0.0, mag = 0.0, qerr = 0.0;
            float got;
            assert_true(w && xq && x && wf);
            for (int rep = 0; rep < 4; rep++) {
                random_weights(type, w, rb);
                random_acts(x, n);
                quantize(&ref, f, x, xq, n);
                ref.to_float[type](w, wf, n);
                exact = mag = qerr = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    exact += (double)wf[i] * x[i];
                    mag += fabs((double)wf[i] * x[i]);
                    if (f != PI_VEC_F32) {
                        double amax = 0.0;
                        int64_t b0 = i / xb * xb;
                        for (int64_t e = b0; e < b0 + xb; e++)
                            amax = fmax(amax, fabs(x[e]));
                        qerr += fabs(wf[i]) * (amax / 127.0) / 2.0;
                    }
                }
                got = ref.dot[type].dot(w, xq, n);
                if (!(fabs(got - exact) <= qerr * 1.001 + TOL_REF_FLOAT * mag)) {
                    print_error("ref %s n=%lld: %.9g vs exact %.9g (bound %.3g)\n",
                                pi_type_traits((uint32_t)type)->name, (long long)n, got, exact,
                                qerr * 1.001 + TOL_REF_FLOAT * mag);
                    fail();
                }
            }
            free(w);
            afree(xq);
            free(x);
            free(wf);
        }
    }
}

static void test_vec_bytes(void **state) {
    (void)state;
    assert_int_equal(pi_vec_bytes(PI_VEC_F32, 10), 40);
    assert_int_equal(pi_vec_bytes(PI_VEC_Q8_0, 32), 352);
    assert_int_equal(pi_vec_bytes(PI_VEC_Q8_0, 256), 352);
    assert_int_equal(pi_vec_bytes(PI_VEC_Q8_0, 288), 704);
    assert_int_equal(pi_vec_bytes(PI_VEC_Q8_0, 33), 0);
    assert_int_equal(pi_vec_bytes(PI_VEC_Q8_K, 512), 584);
    assert_int_equal(pi_vec_bytes(PI_VEC_Q8_K, 300), 0);
    assert_int_equal(pi_vec_bytes(PI_VEC_F32, 0), 0);
    /* the packed gemm's activations: whole tiles of 8 tokens, 320 bytes per 256 values */
    assert_int_equal(pi_gemm_pack_bytes(576, 1), 8 * 3 * 320);
    assert_int_equal(pi_gemm_pack_bytes(2048, 17), 24 * 8 * 320);
    assert_int_equal(pi_gemm_pack_bytes(0, 17), 0);
    assert_int_equal(pi_gemm_pack_bytes(256, 0), 0);
    /* no format needs more than F32's 4 bytes per value */
    for (int64_t n = 256; n <= 8192; n += 256) {
        assert_true(pi_vec_bytes(PI_VEC_Q8_0, n) <= pi_vec_bytes(PI_VEC_F32, n));
        assert_true(pi_vec_bytes(PI_VEC_Q8_K, n) <= pi_vec_bytes(PI_VEC_F32, n));
    }
}

static void test_tables(void **state) {
    struct pi_cpu_kernels k;
    (void)state;
    pi_cpu_kernels_init(&k, pi_cpu_detect());
    print_message("# cpu flags %#x, table flags %#x\n", pi_cpu_detect(), k.flags);
    for (size_t t = 0; t < N_TYPES; t++) {
        assert_non_null(k.dot[test_types[t]].dot);
        assert_non_null(k.dot[test_types[t]].gemm);
        assert_non_null(k.to_float[test_types[t]]);
    }
    assert_non_null(k.quantize_q8_0);
    assert_non_null(k.quantize_q8_k);
    assert_non_null(k.axpy_f16);
    assert_non_null(k.dot_f16_rows);
    pi_cpu_kernels_init(&k, 0);
    assert_int_equal(k.flags, 0);
}

/* ---- benchmark ------------------------------------------------------------------------ */

/* CPU time of this thread: on a shared machine, time spent descheduled does not count. */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile float bench_sink;

/* GB/s of weight bytes for dot over all rows: the best of many short timed runs, which
 * filters out other processes on a shared machine. */
static double bench_dot(const struct pi_dot_kernel *dk, const uint8_t *w, size_t rb, int64_t nr,
                        const void *x, int64_t n) {
    double best = 0.0;
    for (int rep = 0; rep < 15; rep++) {
        double t0 = now(), dt;
        int passes = 0;
        float s = 0.0f;
        do {
            for (int64_t r = 0; r < nr; r++)
                s += dk->dot(w + (size_t)r * rb, x, n);
            passes++;
            dt = now() - t0;
        } while (dt < 0.05);
        bench_sink = s;
        if ((double)rb * (double)nr * passes / dt / 1e9 > best)
            best = (double)rb * (double)nr * passes / dt / 1e9;
    }
    return best;
}

/* Multiply-accumulates per second (G) of gemm with nt tokens. */
static double bench_gemm(const struct pi_dot_kernel *dk, const uint8_t *w, size_t rb, int64_t nr,
                         const void *x, size_t vb, int64_t nt, float *y, int64_t n) {
    double best = 0.0;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now(), dt;
        int passes = 0;
        do {
            dk->gemm(w, rb, nr, x, vb, nt, y, nr, n);
            passes++;
            dt = now() - t0;
        } while (dt < 0.1);
        if ((double)n * (double)nr * (double)nt * passes / dt / 1e9 > best)
            best = (double)n * (double)nr * (double)nt * passes / dt / 1e9;
    }
    return best;
}

static int run_bench(void) {
    const int64_t n = 4096, nr = 4096, nt = 64;
    mxfp4_tiny_scales = 0;
    struct pi_cpu_kernels ref, k;
    float *xf = malloc((size_t)(n * nt) * sizeof *xf), *y = malloc((size_t)(nr * nt) * sizeof *y);
    uint8_t *x = amalloc((size_t)nt * pi_vec_bytes(PI_VEC_F32, n));
    if (!xf || !y || !x)
        return 1;
    pi_cpu_kernels_ref(&ref);
    random_acts(xf, n * nt);
    printf("dot over a %lldx%lld matrix, GB/s of weights (single thread); gemm with %lld "
           "tokens, GMAC/s\n",
           (long long)nr, (long long)n, (long long)nt);
    printf("%-6s %8s", "type", "ref");
    for (size_t i = 0; i < N_IMPLS; i++)
        printf(" %8s", impls[i].name);
    for (size_t i = 0; i < N_IMPLS; i++)
        printf("  gemm-%-6s", impls[i].name);
    printf("\n");
    for (size_t t = 0; t < N_TYPES; t++) {
        const int type = test_types[t];
        const enum pi_vec_fmt f = fmt_of(&ref, type);
        size_t rb = (size_t)pi_type_row_bytes((uint32_t)type, n), vb = pi_vec_bytes(f, n);
        uint8_t *w = amalloc(rb * (size_t)nr);
        double gemm_rate[N_IMPLS] = {0};
        if (!w)
            return 1;
        random_weights(type, w, rb * (size_t)nr);
        for (int64_t i = 0; i < nt; i++)
            quantize(&ref, f, xf + i * n, x + (size_t)i * vb, n);
        printf("%-6s %8.2f", pi_type_traits((uint32_t)type)->name,
               bench_dot(&ref.dot[type], w, rb, nr, x, n));
        for (size_t i = 0; i < N_IMPLS; i++) {
            if (!impl_table(i, &k)) {
                printf(" %8s", "-");
                continue;
            }
            printf(" %8.2f", bench_dot(&k.dot[type], w, rb, nr, x, n));
            gemm_rate[i] = bench_gemm(&k.dot[type], w, rb, nr, x, vb, nt, y, n);
        }
        for (size_t i = 0; i < N_IMPLS; i++)
            printf("  %11.2f", gemm_rate[i]);
        printf("\n");
        fflush(stdout);
        afree(w);
    }
    free(xf);
    free(y);
    afree(x);
    return 0;
}

/* The threshold path's decode kernels on the 1B shape (n_embd 2048, n_ff 5632),
 * a random fraction of the rows kept (in id order, as the engine lists them): gemv_idx
 * for up and the 8-bit axpy over rows of the transposed down (groups of 16 rows, chunks
 * of 256 columns, the next group's chunk prefetched: axpy_cols_job on one thread). GB/s
 * of the kept rows' bytes, weights cycled through the pool as in bench-decode. */
/* A prompt's transposed down projection of 64 tokens over one thread's 1024 columns and
 * 5632 rows, every activation non-zero (dense mode of a sparsified file): axpy_rows_i8_tok
 * in the caller's 64-row groups, against the table's gemm over the same multiply-adds
 * (1024 rows of 5632, 64 tokens), in G multiply-adds per second, one thread. */
static void bench_prompt_down(const struct pi_cpu_kernels *k, int type, uint8_t *w,
                              const float *xf, size_t wbytes) {
    enum { T = 64, NC = 1024, NR = 5632, RG = 64 };
    const pi_axpy_rows_tok_fn tok = k->axpy_rows_i8_tok[type];
    const size_t rb = (size_t)pi_type_row_bytes((uint32_t)type, NC);
    const size_t gb = (size_t)pi_type_row_bytes((uint32_t)type, NR);
    const size_t vb = pi_vec_bytes(PI_VEC_Q8_0, NR);
    float *yo = malloc((size_t)T * NC * sizeof *yo), *av = malloc((size_t)T * RG * sizeof *av);
    float *yg = malloc((size_t)T * NC * sizeof *yg);
    uint8_t *x = amalloc(vb * T);
    if (!tok || !yo || !av || !yg || !x || rb * NR > wbytes || gb * NC > wbytes)
        goto done;
    random_weights(type, w, rb * NR);
    for (int64_t i = 0; i < T * RG; i++)
        av[i] = xf[i % 2048] + 0.5f;
    double best_t = 0.0, best_g = 0.0;
    const double macs = (double)T * NC * NR;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now(), dt;
        size_t passes = 0;
        do {
            memset(yo, 0, (size_t)T * NC * sizeof *yo);
            for (int64_t g = 0; g < NR; g += RG) {
                const uint8_t *pc[RG];
                for (int64_t i = 0; i < RG; i++)
                    pc[i] = w + (size_t)(g + i) * rb;
                tok(yo, NC, av, RG, T, pc, RG, NC);
            }
            passes++;
            dt = now() - t0;
        } while (dt < 0.3);
        best_t = macs * (double)passes / dt / 1e9 > best_t ? macs * (double)passes / dt / 1e9 : best_t;
    }
    random_weights(type, w, gb * NC);
    for (int t = 0; t < T; t++)
        k->quantize_q8_0(xf + (t * 7) % 64, x + (size_t)t * vb, NR);
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now(), dt;
        size_t passes = 0;
        do {
            k->dot[type].gemm(w, gb, NC, x, vb, T, yg, NC, NR);
            passes++;
            dt = now() - t0;
        } while (dt < 0.3);
        best_g = macs * (double)passes / dt / 1e9 > best_g ? macs * (double)passes / dt / 1e9 : best_g;
    }
    printf("%-5s prompt down, 64 tokens x 1024 columns x 5632 rows: axpy_rows_i8_tok %6.1f, "
           "gemm %6.1f G multiply-adds/s\n",
           pi_type_traits((uint32_t)type)->name, best_t, best_g);
done:
    free(yo);
    free(av);
    free(yg);
    afree(x);
}

static void bench_sparse_decode(const struct pi_cpu_kernels *k, int type, uint8_t *w, uint8_t *x,
                                const float *xf, float *y, size_t pool) {
    const int64_t n = 2048, nr = 5632;
    const size_t bb = pi_type_traits((uint32_t)type)->block_bytes;
    const size_t rb = (size_t)pi_type_row_bytes((uint32_t)type, n), mb = rb * (size_t)nr;
    const size_t nm = pool / mb > 0 && pool <= (size_t)64 << 20 ? pool / mb : 1;
    int32_t *idx = malloc((size_t)nr * sizeof *idx);
    float *a = malloc((size_t)nr * sizeof *a), *yo = malloc((size_t)nr * sizeof *yo);
    if (!idx || !a || !yo)
        goto done;
    random_weights(type, w, nm * mb);
    k->quantize_q8_0(xf, x, n);
    for (int64_t i = 0; i < nr; i++)
        a[i] = xf[i % 2048] + 0.5f;
    static const double keep[] = {1.0, 0.5, 0.3};
    uint64_t s = 88172645463325252ull;
    for (size_t f = 0; f < sizeof keep / sizeof keep[0]; f++) {
        int64_t ni = 0;
        for (int64_t i = 0; i < nr; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            if ((double)(s >> 11) / 9007199254740992.0 < keep[f])
                idx[ni++] = (int32_t)i;
        }
        double best_g = 0.0, best_a[2] = {0.0, 0.0};
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now(), dt;
            size_t passes = 0;
            do {
                k->gemv_idx[type](w + (passes % nm) * mb, rb, idx, ni, x, y, n);
                passes++;
                dt = now() - t0;
            } while (dt < 0.2);
            if ((double)rb * (double)ni * (double)passes / dt / 1e9 > best_g)
                best_g = (double)rb * (double)ni * (double)passes / dt / 1e9;
            for (int m = 0; m < 2; m++) {
                const pi_axpy_rows_fn ax = m ? k->axpy_rows[type] : k->axpy_rows_i8[type];
                if (!ax)
                    continue;
                t0 = now();
                passes = 0;
                do {
                    const uint8_t *base = w + (passes % nm) * mb;
                    memset(yo, 0, (size_t)n * sizeof *yo);
                    for (int64_t g = 0; g < ni; g += 16) {
                        const int64_t ge = g + 16 < ni ? g + 16 : ni, ne = ge + 16 < ni ? ge + 16 : ni;
                        const uint8_t *pc[16];
                        float ag[16];
                        for (int64_t c0 = 0; c0 < n; c0 += 256) {
                            const size_t co = (size_t)(c0 / 32) * bb;
                            for (int64_t i = ge; i < ne; i++)
                                for (size_t o = 0; o < 8 * bb; o += 64)
                                    __builtin_prefetch(base + (size_t)idx[i] * rb + co + o, 0, 3);
                            for (int64_t i = g; i < ge; i++) {
                                pc[i - g] = base + (size_t)idx[i] * rb + co;
                                ag[i - g] = a[idx[i]];
                            }
                            ax(yo + c0, ag, pc, ge - g, 256);
                        }
                    }
                    passes++;
                    dt = now() - t0;
                } while (dt < 0.2);
                if ((double)rb * (double)ni * (double)passes / dt / 1e9 > best_a[m])
                    best_a[m] = (double)rb * (double)ni * (double)passes / dt / 1e9;
            }
        }
        printf("%-5s n=2048 rows=5632 kept %3.0f %%: gemv_idx %6.2f, axpy_rows_i8 %6.2f, axpy_rows "
               "%6.2f GB/s\n",
               pi_type_traits((uint32_t)type)->name, 100.0 * (double)ni / (double)nr, best_g, best_a[0],
               best_a[1]);
    }
done:
    free(idx);
    free(a);
    free(yo);
}

/* Decode-shaped gemm (one token) over matrices of small models, cycling through 64 MB
 * of weights so that they stream from memory as in a real decode: GB/s of weights. */
static int run_bench_decode(int sparse_only) {
    static const struct {
        int type;
        int64_t n, nr;
    } shapes[] = {
        {PI_TYPE_Q4_1, 576, 576},   {PI_TYPE_Q4_1, 576, 1536},  {PI_TYPE_Q4_1, 1536, 576},
        {PI_TYPE_Q8_0, 576, 49152}, {PI_TYPE_Q4_0, 2048, 2048}, {PI_TYPE_Q4_0, 2048, 5632},
        {PI_TYPE_Q4_0, 5632, 2048}, {PI_TYPE_Q4_0, 896, 896},   {PI_TYPE_Q8_0, 2048, 2048},
        /* MXFP4 against Q4_0 on the same shapes; 2880: gpt-oss-20b's n_embd and expert n_ff */
        {PI_TYPE_Q4_0, 768, 2048},  {PI_TYPE_MXFP4, 768, 2048}, {PI_TYPE_Q4_0, 2048, 768},
        {PI_TYPE_MXFP4, 2048, 768}, {PI_TYPE_Q4_0, 2880, 2880}, {PI_TYPE_MXFP4, 2880, 2880},
    };
    mxfp4_tiny_scales = 0;
    const size_t pool = getenv("PI_BENCH_POOL") ? (size_t)atol(getenv("PI_BENCH_POOL")) : (size_t)64 << 20;
    struct pi_cpu_kernels k;
    uint8_t *w = amalloc((size_t)64 << 20), *x = amalloc(pi_vec_bytes(PI_VEC_F32, 8192));
    float *xf = malloc(8192 * sizeof *xf), *y = malloc(65536 * sizeof *y);
    if (!w || !x || !xf || !y)
        return 1;
    pi_cpu_kernels_init(&k, pi_cpu_detect());
    random_acts(xf, 8192);
    for (size_t i = 0; i < (sparse_only ? 0 : sizeof shapes / sizeof shapes[0]); i++) {
        const int type = shapes[i].type;
        const int64_t n = shapes[i].n, nr = shapes[i].nr;
        const size_t rb = (size_t)pi_type_row_bytes((uint32_t)type, n), mb = rb * (size_t)nr;
        const size_t nm = pool / mb > 0 && pool <= (size_t)64 << 20 ? pool / mb : 1;
        double best = 0.0;
        random_weights(type, w, nm * mb);
        k.quantize_q8_0(xf, x, n);
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now(), dt;
            size_t passes = 0;
            do {
                k.dot[type].gemm(w + (passes % nm) * mb, rb, nr, x, 0, 1, y, nr, n);
                passes++;
                dt = now() - t0;
            } while (dt < 0.2);
            if ((double)mb * (double)passes / dt / 1e9 > best)
                best = (double)mb * (double)passes / dt / 1e9;
        }
        printf("%-5s n=%-5lld rows=%-6lld %7.2f GB/s\n", pi_type_traits((uint32_t)type)->name,
               (long long)n, (long long)nr, best);
    }
    bench_sparse_decode(&k, PI_TYPE_Q4_0, w, x, xf, y, pool);
    bench_sparse_decode(&k, PI_TYPE_Q5_0, w, x, xf, y, pool);
    bench_sparse_decode(&k, PI_TYPE_Q8_0, w, x, xf, y, pool);
    if (sparse_only)
        for (int t = 0; t < 3; t++)
            bench_prompt_down(&k, t == 0 ? PI_TYPE_Q4_0 : t == 1 ? PI_TYPE_Q5_0 : PI_TYPE_Q8_0, w,
                              xf, (size_t)64 << 20);
    afree(w);
    afree(x);
    free(xf);
    free(y);
    return 0;
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vec_bytes),    cmocka_unit_test(test_tables),
        cmocka_unit_test(test_required_tables),
        cmocka_unit_test(test_quantize),     cmocka_unit_test(test_to_float),
        cmocka_unit_test(test_ref_vs_float), cmocka_unit_test(test_dot_gemm),
        cmocka_unit_test(test_axpy_f16),     cmocka_unit_test(test_from_float_f16),     cmocka_unit_test(test_dot_f16_rows),
        cmocka_unit_test(test_axpy_rows),    cmocka_unit_test(test_axpy_rows_i8),
        cmocka_unit_test(test_axpy_rows_i8_tok),
        cmocka_unit_test(test_non_finite_activations),
        cmocka_unit_test(test_gemv_idx), cmocka_unit_test(test_gemm_few),
        cmocka_unit_test(test_gemm_idx),
        cmocka_unit_test(test_gemm_packed),  cmocka_unit_test(test_attn_scores),
    };
    if (argc > 1 && strcmp(argv[1], "--bench") == 0)
        return run_bench();
    if (argc > 1 && strcmp(argv[1], "--bench-decode") == 0)
        return run_bench_decode(0);
    if (argc > 1 && strcmp(argv[1], "--bench-sparse") == 0)
        return run_bench_decode(1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
