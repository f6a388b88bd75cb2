/* The CPU backend's ops against direct double-precision formulas: RMSNorm, RoPE in
 * both pairings with scaling, causal grouped-query attention over the F16 KV cache,
 * matmul and matmul_t, FFN activations; on odd sizes and 1 and 3 threads. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend.h"
#include "kernels.h"
#include "powerinfer.h"
#include "runtime/fp16.h"
#include "runtime/types.h"
#include "runtime/hadamard.h"
#include "runtime/quantize.h"

static uint32_t g_rng = 1;

static float rnd(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static struct pi_backend *make(int threads, int64_t width) {
    struct pi_backend_config cfg = {&pi_default_allocator, threads, 8, width, 0, 0};
    struct pi_backend *b;
    assert_int_equal(pi_backend_cpu()->create(&b, &cfg), PI_OK);
    return b;
}

static void near(double got, double want, double tol, const char *what, int i) {
    if (!(fabs(got - want) <= tol * (1.0 + fabs(want)))) /* NaN fails too */
        fail_msg("%s[%d]: got %.9g, want %.9g", what, i, got, want);
}

static void test_rmsnorm(void **state) {
    (void)state;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    struct pi_backend *b = make(1, 64);
    enum { N = 37, T = 3 };
    float x[T * N], y[T * N], g[N];
    for (int i = 0; i < T * N; i++)
        x[i] = rnd() * 3;
    for (int i = 0; i < N; i++)
        g[i] = rnd();
    struct pi_vector gv = {g, PI_TYPE_F32, N};
    be->rmsnorm(b, x, &gv, 1e-5f, T, y);
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < N; i++)
            ss += (double)x[t * N + i] * x[t * N + i];
        double s = 1.0 / sqrt(ss / N + 1e-5);
        for (int i = 0; i < N; i++)
            near(y[t * N + i], x[t * N + i] * s * g[i], 1e-6, "rmsnorm", i);
    }
    be->destroy(b);
}

/* The rotation angle of pair i at position pos for RoPE parameters r, computed the way
 * the documentation in backend.h (struct pi_rope) states it, in double. */
static double rope_angle(const struct pi_rope *r, double pos, int i, double *mscale) {
    double theta = pos * pow(r->base, -2.0 * i / (double)r->n_rot);
    if (r->factors)
        theta /= r->factors[i];
    double t_s = theta * r->freq_scale, m = r->attn_factor;
    if (r->ext_factor != 0.0f) {
        const double two_pi = 6.283185307179586;
        double lo = r->n_rot * log(r->n_ctx_orig / (two_pi * r->beta_fast)) / (2 * log(r->base));
        double hi = r->n_rot * log(r->n_ctx_orig / (two_pi * r->beta_slow)) / (2 * log(r->base));
        if (!r->yarn_exact) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        lo = lo < 0 ? 0 : lo;
        hi = hi > r->n_rot - 1 ? r->n_rot - 1 : hi;
        double y = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
        y = y < 0 ? 0 : y > 1 ? 1 : y;
        const double mix = (1 - y) * r->ext_factor;
        t_s = t_s * (1 - mix) + theta * mix;
        m *= 1 + 0.1 * log(1 / r->freq_scale);
    }
    *mscale = m;
    return t_s;
}

/* RoPE, both pair layouts, against the formulas: plain with linear scaling, with
 * per-pair frequency factors (Llama 3.1, LongRoPE) and an attention factor, and YaRN
 * (the ramp has pairs on both sides of it for these corrections). */
static void test_rope(void **state) {
    (void)state;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    struct pi_backend *b = make(1, 64);
    enum { T = 3, H = 2, D = 20, R = 16 }; /* rotate 16 of 20 values per head */
    static const float factors[R / 2] = {1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 1.25f, 3.0f, 0.5f};
    const struct pi_rope cases[] = {
        {.n_rot = R, .base = 500.0f, .freq_scale = 0.5f, .attn_factor = 1.0f},
        {.n_rot = R, .base = 10000.0f, .freq_scale = 1.0f, .factors = factors,
         .attn_factor = 1.19f},
        {.n_rot = R, .base = 10000.0f, .freq_scale = 0.25f, .attn_factor = 1.0f,
         .ext_factor = 1.0f, .beta_fast = 32.0f, .beta_slow = 1.0f, .n_ctx_orig = 4096},
        /* gpt-oss: the correction range unrounded (2.2 .. 5.6 here) */
        {.n_rot = R, .base = 150000.0f, .freq_scale = 1.0f / 32, .attn_factor = 1.0f,
         .ext_factor = 1.0f, .beta_fast = 32.0f, .beta_slow = 1.0f, .n_ctx_orig = 4096,
         .yarn_exact = 1},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int neox = 0; neox <= 1; neox++) {
            struct pi_rope rp = cases[ci];
            rp.neox = neox;
            float x[T * H * D], y[T * H * D];
            for (int i = 0; i < T * H * D; i++)
                x[i] = y[i] = rnd();
            const int64_t pos0 = 1000;
            be->rope(b, y, T, H, D, pos0, &rp);
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++) {
                    const float *in = x + (t * H + h) * D;
                    const float *out = y + (t * H + h) * D;
                    for (int i = 0; i < R / 2; i++) {
                        double m, th = rope_angle(&rp, (double)(pos0 + t), i, &m);
                        int a = neox ? i : 2 * i, c = neox ? i + R / 2 : 2 * i + 1;
                        near(out[a], m * (in[a] * cos(th) - in[c] * sin(th)), 2e-5, "rope", a);
                        near(out[c], m * (in[a] * sin(th) + in[c] * cos(th)), 2e-5, "rope", c);
                    }
                    for (int i = R; i < D; i++) /* the rest is untouched */
                        assert_true(out[i] == in[i]);
                }
        }
    be->destroy(b);
}

/* Attention for T new tokens at positions P..P+T-1 after P cached ones, 4 query heads
 * sharing 2 KV heads, head dims 6 (K) and 5 (V); with the standard scale, with another
 * scale and soft-capping (Gemma 2), within a sliding window of 3 positions, and with
 * attention sinks (gpt-oss; one far above the scores, one far below), also windowed. */
static void test_attention(void **state) {
    (void)state;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    enum { L = 2, CTX = 16, HQ = 4, HKV = 2, DK = 6, DV = 5, P = 4, T = 3 };
    static const float sinks[HQ] = {0.7f, -1.3f, 40.0f, -40.0f};
    const struct pi_attn opts[] = {
        {1.0f / sqrtf((float)DK), 0.0f, 0, NULL},
        {0.9f, 1.5f, 0, NULL},
        {1.0f / sqrtf((float)DK), 0.0f, 3, NULL},
        {1.0f / sqrtf((float)DK), 0.0f, 0, sinks},
        {0.45f, 0.0f, 3, sinks},
    };
    for (size_t oi = 0; oi < sizeof opts / sizeof *opts; oi++)
        for (int threads = 1; threads <= 3; threads += 2) {
            const struct pi_attn *ao = &opts[oi];
            struct pi_backend *b = make(threads, 64);
            struct pi_kv_desc d = {L, CTX, HQ, HKV, DK, DV, PI_KV_F16, PI_KV_F16};
            struct pi_kv *kv;
            assert_int_equal(be->kv_create(b, &d, &kv), PI_OK);
            static float k[(P + T) * HKV * DK], v[(P + T) * HKV * DV], q[T * HQ * DK];
            for (int i = 0; i < (P + T) * HKV * DK; i++)
                k[i] = rnd() * 3;
            for (int i = 0; i < (P + T) * HKV * DV; i++)
                v[i] = rnd();
            for (int i = 0; i < T * HQ * DK; i++)
                q[i] = rnd() * 3;
            be->kv_store(b, kv, 1, 0, P, k, v);
            be->kv_store(b, kv, 1, P, T, k + P * HKV * DK, v + P * HKV * DV);
            float out[T * HQ * DV];
            be->attention(b, kv, 1, q, T, P, ao, out);
            for (int t = 0; t < T; t++)
                for (int h = 0; h < HQ; h++) {
                    int hk = h / (HQ / HKV), n = P + t + 1;
                    int p0 = ao->window > 0 && n > ao->window ? n - (int)ao->window : 0;
                    double s[P + T], mx = -1e300, sum = 0;
                    for (int p = p0; p < n; p++) {
                        double dot = 0;
                        for (int i = 0; i < DK; i++) /* the cache holds F16 */
                            dot += q[(t * HQ + h) * DK + i] *
                                   pi_fp16_to_fp32(pi_fp32_to_fp16(k[(p * HKV + hk) * DK + i]));
                        s[p] = dot * ao->scale;
                        if (ao->softcap > 0)
                            s[p] = ao->softcap * tanh(s[p] / ao->softcap);
                        mx = s[p] > mx ? s[p] : mx;
                    }
                    const double sk = ao->sinks ? ao->sinks[h] : -1e300;
                    mx = sk > mx ? sk : mx;
                    for (int p = p0; p < n; p++)
                        sum += (s[p] = exp(s[p] - mx));
                    if (ao->sinks) /* in the sum, with no value */
                        sum += exp(sk - mx);
                    for (int i = 0; i < DV; i++) {
                        double o = 0;
                        for (int p = p0; p < n; p++)
                            o += s[p] / sum *
                                 pi_fp16_to_fp32(pi_fp32_to_fp16(v[(p * HKV + hk) * DV + i]));
                        near(out[(t * HQ + h) * DV + i], o, 1e-5, "attention", i);
                    }
                }
            be->kv_destroy(b, kv);
            be->destroy(b);
        }
}

/* pi_hadamard against the Sylvester matrix H_ij = (-1)^popcount(i & j) / sqrt(n) in double
 * (blocks 1..256, three blocks in a row), twice is the identity, and the block sizes
 * heads get. */
static void test_hadamard(void **state) {
    (void)state;
    enum { NB = 3 };
    static float x[NB * 256], y[NB * 256];
    for (int64_t blk = 1; blk <= 256; blk *= 2) {
        for (int64_t i = 0; i < NB * blk; i++)
            x[i] = y[i] = rnd() * 4;
        x[1] = y[1] = 300.0f; /* an outlier */
        pi_hadamard(y, NB * blk, blk);
        for (int64_t o = 0; o < NB * blk; o += blk)
            for (int64_t i = 0; i < blk; i++) {
                double want = 0;
                for (int64_t j = 0; j < blk; j++)
                    want += (__builtin_popcountll((unsigned long long)(i & j)) & 1 ? -1.0 : 1.0) *
                            x[o + j];
                near(y[o + i], want / sqrt((double)blk), 1e-5, "hadamard", (int)i);
            }
        pi_hadamard(y, NB * blk, blk);
        for (int64_t i = 0; i < NB * blk; i++)
            near(y[i], x[i], 1e-5, "hadamard twice", (int)i);
    }
    assert_int_equal(pi_hadamard_block(64), 64);
    assert_int_equal(pi_hadamard_block(96), 32);
    assert_int_equal(pi_hadamard_block(128), 128);
    assert_int_equal(pi_hadamard_block(160), 32);
    assert_int_equal(pi_hadamard_block(512), 256);
}

/* Binary16 rows as the cache stores them, for the pairs below. */
static void f16_store(const float *x, void *q, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = pi_fp32_to_fp16(x[i]);
        memcpy((uint8_t *)q + 2 * i, &h, 2);
    }
}

static void f16_load(const void *q, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)q + 2 * i, 2);
        x[i] = pi_fp16_to_fp32(h);
    }
}

/* Quantized caches, keys and values each F16, Q8_0 or Q4_0 (both the same, or values
 * smaller than keys, or the other way): attention against the exact softmax of the
 * dequantized GGUF blocks of K and V (pi_quantize_q8_0 / _q4_0, bit-exact with the gguf
 * package's quantizer in the quantize tests): with float activations within float
 * rounding, with 8-bit ones (the query quantized too) within the query's rounding;
 * kv_get returns the rows as stored and kv_set puts them back; non-finite keys give a
 * NaN output, as F16 would; head dims that are not multiples of 32 are refused for a
 * quantized half, and unknown types for either. */
static void test_attention_quantized(void **state) {
    (void)state;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    static const int pairs[][2] = {{PI_KV_Q8_0, PI_KV_Q8_0}, {PI_KV_Q4_0, PI_KV_Q4_0},
                                   {PI_KV_Q8_0, PI_KV_Q4_0}, {PI_KV_F16, PI_KV_Q8_0},
                                   {PI_KV_F16, PI_KV_Q4_0},  {PI_KV_Q4_0, PI_KV_Q8_0}};
    for (size_t pr = 0; pr < sizeof pairs / sizeof pairs[0]; pr++) {
    const int kt = pairs[pr][0], vt = pairs[pr][1];
    void (*const quant[3])(const float *, void *, int64_t) = {f16_store, pi_quantize_q8_0,
                                                              pi_quantize_q4_0};
    void (*const dequant[3])(const void *, float *, int64_t) = {f16_load, pi_dequant_q8_0,
                                                                pi_dequant_q4_0};
    const char *what = pr == 0 ? "attention q8_0" : pr == 1 ? "attention q4_0"
                       : pr == 2 ? "attention q8_0 keys, q4_0 values"
                       : pr == 3 ? "attention f16 keys, q8_0 values"
                       : pr == 4 ? "attention f16 keys, q4_0 values"
                                 : "attention q4_0 keys, q8_0 values";
    /* T = 16 one-head units: the prompt's scores through the Q8_0 gemm's panel path, a
     * decode step's through gemm_few; both must give the dot's bits */
    enum { L = 1, CTX = 64, HQ = 4, HKV = 2, D = 64, P = 30, T = 16 };
    static float k[(P + T) * HKV * D], v[(P + T) * HKV * D], q[T * HQ * D];
    static float kd[(P + T) * HKV * D], vd[(P + T) * HKV * D];
    for (int i = 0; i < (P + T) * HKV * D; i++) {
        k[i] = rnd() * 3;
        v[i] = rnd();
    }
    for (int i = 0; i < T * HQ * D; i++)
        q[i] = rnd() * 3;
    static uint8_t kblocks[(P + T) * HKV * D * 2], vblocks[(P + T) * HKV * D * 2];
    const size_t kbytes = pi_kv_row_bytes(kt, (P + T) * HKV * D);
    const size_t vbytes = pi_kv_row_bytes(vt, (P + T) * HKV * D);
    /* Q4_0 keys are stored rotated per head (runtime/hadamard.h): the keys the scores
     * see are H dequant(quant(H k)) */
    static float kr[(P + T) * HKV * D];
    memcpy(kr, k, sizeof kr);
    if (kt == PI_KV_Q4_0)
        pi_hadamard(kr, (P + T) * HKV * D, pi_hadamard_block(D));
    quant[kt](kr, kblocks, (P + T) * HKV * D);
    dequant[kt](kblocks, kd, (P + T) * HKV * D);
    if (kt == PI_KV_Q4_0)
        pi_hadamard(kd, (P + T) * HKV * D, pi_hadamard_block(D));
    quant[vt](v, vblocks, (P + T) * HKV * D);
    dequant[vt](vblocks, vd, (P + T) * HKV * D);
    for (int f32 = 0; f32 <= 1; f32++) {
        struct pi_backend_config cfg = {&pi_default_allocator, 2, T, 256, f32, 0};
        struct pi_backend *b;
        assert_int_equal(be->create(&b, &cfg), PI_OK);
        struct pi_kv_desc d = {L, CTX, HQ, HKV, D, D, kt, vt};
        struct pi_kv *kv;
        assert_int_equal(be->kv_create(b, &d, &kv), PI_OK);
        be->kv_store(b, kv, 0, 0, P, k, v);
        be->kv_store(b, kv, 0, P, T, k + P * HKV * D, v + P * HKV * D);
        float out[T * HQ * D];
        const struct pi_attn ao = {1.0f / sqrtf((float)D), 0.0f, 0, NULL};
        be->attention(b, kv, 0, q, T, P, &ao, out);
        assert_int_equal(be->sync(b), PI_OK);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < HQ; h++) {
                const int hk = h / (HQ / HKV), n = P + t + 1;
                double s[P + T], mx = -1e300, sum = 0;
                for (int p = 0; p < n; p++) {
                    double dot = 0;
                    for (int i = 0; i < D; i++)
                        dot += (double)q[(t * HQ + h) * D + i] * kd[(p * HKV + hk) * D + i];
                    s[p] = dot * ao.scale;
                    mx = s[p] > mx ? s[p] : mx;
                }
                for (int p = 0; p < n; p++)
                    sum += (s[p] = exp(s[p] - mx));
                for (int i = 0; i < D; i++) {
                    double o = 0;
                    for (int p = 0; p < n; p++)
                        o += s[p] / sum * vd[(p * HKV + hk) * D + i];
                    near(out[(t * HQ + h) * D + i], o, f32 ? 1e-5 : 2e-2, what, i);
                }
            }
        /* each token alone (a decode step at its position) gives the batch's bits */
        for (int t = 0; t < T; t++) {
            float one[HQ * D];
            be->attention(b, kv, 0, q + t * HQ * D, 1, P + t, &ao, one);
            assert_memory_equal(one, out + t * HQ * D, sizeof one);
        }
        /* kv_get: the stored rows; kv_set of other rows, then back */
        static uint8_t kb[(P + T) * HKV * D * 2], vb[(P + T) * HKV * D * 2];
        assert_int_equal(be->kv_get(b, kv, 0, 0, P + T, kb, vb), PI_OK);
        assert_memory_equal(kb, kblocks, kbytes);
        assert_memory_equal(vb, vblocks, vbytes);
        float out2[T * HQ * D];
        be->kv_store(b, kv, 0, 0, 2, v, k); /* overwrite two positions */
        assert_int_equal(be->kv_set(b, kv, 0, 0, P + T, kb, vb), PI_OK);
        be->attention(b, kv, 0, q, T, P, &ao, out2);
        assert_memory_equal(out, out2, sizeof out);
        /* a non-finite key: NaN out */
        float bad[HKV * D];
        memcpy(bad, k, sizeof bad);
        bad[3] = INFINITY;
        be->kv_store(b, kv, 0, 0, 1, bad, v);
        be->attention(b, kv, 0, q, T, P, &ao, out2);
        assert_true(isnan(out2[0]));
        be->kv_destroy(b, kv);
        /* the quantized half's heads 48 wide */
        struct pi_kv_desc odd = {L, CTX, HQ, HKV, kt ? 48 : 64, kt ? 64 : 48, kt, vt};
        assert_int_equal(be->kv_create(b, &odd, &kv), PI_ERR_UNSUPPORTED);
        struct pi_kv_desc unknown = {L, CTX, HQ, HKV, D, D, 7, vt};
        assert_int_equal(be->kv_create(b, &unknown, &kv), PI_ERR_UNSUPPORTED);
        struct pi_kv_desc unknown_v = {L, CTX, HQ, HKV, D, D, kt, 7};
        assert_int_equal(be->kv_create(b, &unknown_v, &kv), PI_ERR_UNSUPPORTED);
        be->destroy(b);
    }
    }
}

/* LayerNorm with and without weight and bias, biases added per row, scale and
 * soft-capping, against the formulas. */
static void test_norms_and_elementwise(void **state) {
    (void)state;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    struct pi_backend *b = make(1, 64);
    enum { T = 3, N = 37 };
    float x[T * N], y[T * N], w[N], bb[N];
    for (int i = 0; i < T * N; i++)
        x[i] = rnd() * 3 + 0.5f;
    for (int i = 0; i < N; i++) {
        w[i] = 1 + rnd();
        bb[i] = rnd();
    }
    const struct pi_vector g = {w, PI_TYPE_F32, N}, bv = {bb, PI_TYPE_F32, N};
    for (int mode = 0; mode < 3; mode++) {
        be->layernorm(b, x, mode ? &g : NULL, mode == 2 ? &bv : NULL, N, 1e-5f, T, y);
        for (int t = 0; t < T; t++) {
            double m = 0, var = 0;
            for (int i = 0; i < N; i++)
                m += x[t * N + i];
            m /= N;
            for (int i = 0; i < N; i++)
                var += (x[t * N + i] - m) * (x[t * N + i] - m);
            var /= N;
            for (int i = 0; i < N; i++) {
                double want = (x[t * N + i] - m) / sqrt(var + 1e-5);
                want = want * (mode ? w[i] : 1) + (mode == 2 ? bb[i] : 0);
                near(y[t * N + i], want, 1e-5, "layernorm", i);
            }
        }
    }
    memcpy(y, x, sizeof y);
    be->add_rows(b, y, &bv, T);
    for (int i = 0; i < T * N; i++)
        assert_true(y[i] == x[i] + bb[i % N]);
    memcpy(y, x, sizeof y);
    be->scale(b, y, 3.5f, T * N);
    for (int i = 0; i < T * N; i++)
        assert_true(y[i] == x[i] * 3.5f);
    memcpy(y, x, sizeof y);
    be->softcap(b, y, 2.0f, T * N);
    for (int i = 0; i < T * N; i++)
        near(y[i], 2.0 * tanh(x[i] / 2.0), 1e-6, "softcap", i);
    be->destroy(b);
    /* a vocabulary row goes over the threads: the same values */
    enum { V = 20000 };
    static float big[V], ref[V];
    for (int i = 0; i < V; i++)
        big[i] = ref[i] = rnd() * 40;
    struct pi_backend *b1 = make(1, 64), *b3 = make(3, 64);
    be->softcap(b1, ref, 30.0f, V);
    be->softcap(b3, big, 30.0f, V);
    assert_memory_equal(big, ref, sizeof big);
    for (int i = 0; i < V; i += 97)
        assert_true(fabsf(big[i]) < 30.0f);
    be->destroy(b1);
    be->destroy(b3);
}

static void test_matmul_and_transpose(void **state) {
    (void)state;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    enum { IN = 35, OUT = 19, T = 3 };
    static float w[OUT * IN], x[T * IN], xt[T * OUT], y[T * OUT], yt[T * IN];
    for (int i = 0; i < OUT * IN; i++)
        w[i] = rnd();
    for (int i = 0; i < T * IN; i++)
        x[i] = rnd();
    for (int i = 0; i < T * OUT; i++)
        xt[i] = i % 4 == 0 ? 0.0f : rnd(); /* zeros are skipped: must not matter */
    struct pi_weight wv = {w, PI_TYPE_F32, IN, OUT, IN * sizeof(float)};
    for (int threads = 1; threads <= 3; threads += 2) {
        struct pi_backend *b = make(threads, 64);
        be->matmul(b, &wv, x, T, y);
        be->matmul_t(b, &wv, xt, T, yt);
        for (int t = 0; t < T; t++) {
            for (int r = 0; r < OUT; r++) {
                double s = 0;
                for (int i = 0; i < IN; i++)
                    s += (double)w[r * IN + i] * x[t * IN + i];
                near(y[t * OUT + r], s, 1e-5, "matmul", r);
            }
            for (int i = 0; i < IN; i++) {
                double s = 0;
                for (int r = 0; r < OUT; r++)
                    s += (double)xt[t * OUT + r] * w[r * IN + i];
                near(yt[t * IN + i], s, 1e-5, "matmul_t", i);
            }
        }
        be->destroy(b);
    }
}

/* Sparse ops: matmul_rows equals matmul on the listed rows (bit for bit: the same
 * kernels) and writes nothing else; matmul_t_rows (3 and 6 tokens, dense and sparse
 * activations: each of its paths) equals a double-precision sum over
 * the listed rows, skips rows with zero activations, reports the rows it read, and
 * gives the same bytes for 1, 2 and 3 threads. Float and quantized weights. */
static void test_sparse_ops(void **state) {
    (void)state;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    /* TR: tokens of the row ops; OUT: more than two of the prompt path's 128-row groups */
    enum { IN = 96, OUT = 300, T = 6, TR = 3 };
    static const uint32_t types[] = {PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_Q4_0, PI_TYPE_Q8_0};
    static uint8_t wq[OUT * IN * 4];
    static float wf[OUT * IN], x[T * IN], xt[T * OUT], y[T * OUT], ys[T * OUT];
    static float yt[3][T * IN];
    int32_t idx[OUT];
    int64_t n = 0;
    for (int r = 0; r < OUT; r++)
        if (r % 3 != 1 && r != 40)
            idx[n++] = r; /* runs and gaps */
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        const uint32_t type = types[k];
        const struct pi_type_traits *tt = pi_type_traits(type);
        const size_t rb = (size_t)(IN / tt->block_size) * tt->block_bytes;
        for (size_t i = 0; i < rb * OUT; i++)
            wq[i] = (uint8_t)(rnd() * 127 + 128);
        for (int r = 0; r < OUT; r++) { /* sane scales */
            for (int b0 = 0; b0 < IN / (int)tt->block_size; b0++) {
                uint8_t *blk = wq + r * rb + (size_t)b0 * tt->block_bytes;
                if (type == PI_TYPE_F32) { /* blocks of one value */
                    const float f = rnd();
                    memcpy(blk, &f, 4);
                } else if (type == PI_TYPE_F16) {
                    const uint16_t h = pi_fp32_to_fp16(rnd());
                    memcpy(blk, &h, 2);
                } else {
                    uint16_t d = pi_fp32_to_fp16(0.01f + 0.05f * fabsf(rnd()));
                    memcpy(blk, &d, 2);
                }
            }
            pi_type_traits(type)->to_float(wq + r * rb, wf + r * IN, IN);
        }
        for (int i = 0; i < T * IN; i++)
            x[i] = rnd();
        for (int i = 0; i < T * OUT; i++)
            xt[i] = i % 5 == 0 ? 0.0f : rnd();
        for (int t = 0; t < T; t++) /* a listed row no token needs */
            xt[t * OUT + idx[3]] = 0.0f;
        struct pi_weight wv = {wq, type, IN, OUT, rb};
        for (int threads = 1; threads <= 3; threads++) {
            struct pi_backend *b = make(threads, 512);
            be->matmul(b, &wv, x, TR, y);
            for (int i = 0; i < TR * OUT; i++)
                ys[i] = -7.0f;
            be->matmul_rows(b, &wv, x, TR, idx, n, ys);
            for (int t = 0; t < TR; t++)
                for (int r = 0, i = 0; r < OUT; r++) {
                    const int listed = i < n && idx[i] == r;
                    i += listed;
                    if (listed && ys[t * OUT + r] != y[t * OUT + r])
                        fail_msg("%s matmul_rows row %d differs from matmul", tt->name, r);
                    if (!listed && ys[t * OUT + r] != -7.0f)
                        fail_msg("%s matmul_rows wrote unlisted row %d", tt->name, r);
                }
            /* both matrices in one pass: the same values as matmul_rows */
            static float y1[T * OUT], y2[T * OUT];
            memcpy(y1, ys, sizeof y1);
            memcpy(y2, ys, sizeof y2);
            be->matmul_rows2(b, &wv, &wv, x, TR, idx, n, y1, y2);
            assert_memory_equal(y1, ys, sizeof y1);
            assert_memory_equal(y2, ys, sizeof y2);
            /* 3 tokens: each adds the quantized rows itself; 6: the rows are converted
             * to floats once and every token adds those */
            for (int nt = 3; nt <= T; nt += 3) {
                float *yo = yt[threads - 1];
                const int64_t got = be->matmul_t_rows(b, &wv, xt, nt, idx, n, yo);
                int64_t want_rows = 0;
                for (int64_t i = 0; i < n; i++) {
                    int any = 0;
                    for (int t = 0; t < nt; t++)
                        any |= xt[t * OUT + idx[i]] != 0.0f;
                    want_rows += any;
                }
                assert_int_equal(got, want_rows);
                /* Q4_0 and Q8_0: the fast mode's 8-bit coefficients (kernels.h,
                 * axpy_rows_i8; 6 tokens using 80 % of the rows: axpy_rows_i8_tok), each
                 * row off by at most half a step of its group's largest |x d| / 127 times
                 * |quant| (8 or 128) */
                const int i8 = type == PI_TYPE_Q4_0 || type == PI_TYPE_Q8_0;
                const size_t qbb = type == PI_TYPE_Q4_0 ? 18 : 34; /* block bytes */
                const double vmax = type == PI_TYPE_Q4_0 ? 8.0 : 128.0; /* |quant| */
                for (int t = 0; t < nt; t++) {
                    double cmax = 0;
                    for (int64_t j = 0; j < n && i8; j++)
                        for (int b0 = 0; b0 < IN / 32; b0++) {
                            uint16_t h;
                            memcpy(&h, wq + idx[j] * rb + (size_t)b0 * qbb, 2);
                            const double c = fabs((double)xt[t * OUT + idx[j]] * pi_fp16_to_fp32(h));
                            cmax = c > cmax ? c : cmax;
                        }
                    for (int i = 0; i < IN; i++) {
                        double sum = 0;
                        for (int64_t j = 0; j < n; j++)
                            sum += (double)xt[t * OUT + idx[j]] * wf[idx[j] * IN + i];
                        if (i8 && fabs(yo[t * IN + i] - sum) >
                                      2e-5 + (double)n * 0.5 * vmax * cmax / 127.0)
                            fail_msg("%s matmul_t_rows (8-bit)[%d]: got %.9g, want %.9g",
                                     tt->name, i, yo[t * IN + i], sum);
                        if (!i8)
                            near(yo[t * IN + i], sum, 2e-5, "matmul_t_rows", i);
                    }
                }
                if (i8 && threads == 1) { /* float activations: the exact path */
                    struct pi_backend_config cfg = {&pi_default_allocator, 1, 8, 512, 1, 0};
                    struct pi_backend *bf;
                    static float yx[T * IN];
                    assert_int_equal(be->create(&bf, &cfg), PI_OK);
                    assert_int_equal(be->matmul_t_rows(bf, &wv, xt, nt, idx, n, yx), want_rows);
                    for (int t = 0; t < nt; t++)
                        for (int i = 0; i < IN; i++) {
                            double sum = 0;
                            for (int64_t j = 0; j < n; j++)
                                sum += (double)xt[t * OUT + idx[j]] * wf[idx[j] * IN + i];
                            near(yx[t * IN + i], sum, 2e-5, "matmul_t_rows (float activations)", i);
                        }
                    /* where the table has the 8-bit kernel, fast mode uses it */
                    struct pi_cpu_kernels kt;
                    pi_cpu_kernels_init(&kt, pi_cpu_detect());
                    if (kt.axpy_rows_i8[type] && !memcmp(yx, yo, (size_t)nt * IN * sizeof *yx))
                        fail_msg("%s matmul_t_rows: fast mode gave the exact path's bytes",
                                 tt->name);
                    be->destroy(bf);
                }
            }
            { /* a sparse prompt: 8 tokens, each with its own eighth of the rows
               * (below AXPY_I8_TOK_DENSITY): the float tile, exact */
                enum { TS = 8 };
                static float xs[TS * OUT], ysp[TS * IN];
                for (int t = 0; t < TS; t++)
                    for (int r = 0; r < OUT; r++)
                        xs[t * OUT + r] = r % TS == t ? xt[(t % T) * OUT + r] : 0.0f;
                be->matmul_t_rows(b, &wv, xs, TS, idx, n, ysp);
                for (int t = 0; t < TS; t++)
                    for (int i = 0; i < IN; i++) {
                        double sum = 0;
                        for (int64_t j = 0; j < n; j++)
                            sum += (double)xs[t * OUT + idx[j]] * wf[idx[j] * IN + i];
                        near(ysp[t * IN + i], sum, 2e-5, "matmul_t_rows (sparse prompt)", i);
                    }
            }
            if (threads > 1 && memcmp(yt[0], yt[threads - 1], sizeof yt[0]) != 0)
                fail_msg("%s matmul_t_rows depends on the thread count", tt->name);
            be->destroy(b);
        }
    }
}

static void test_ffn_act(void **state) {
    (void)state;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    struct pi_backend *b = make(2, 64);
    enum { N = 5000 }; /* above the threshold where the op goes parallel */
    static float g0[N], g[N], u[N];
    for (int i = 0; i < N; i++) {
        g0[i] = rnd() * 4;
        u[i] = rnd() * 4;
    }
    g0[0] = 9.0f; /* past the SwiGLU-OAI clamps, above and below */
    u[0] = 8.5f;
    g0[1] = -9.0f;
    u[1] = -9.5f;
    for (int a = 0; a < PI_ACT_COUNT; a++) {
        memcpy(g, g0, sizeof g);
        /* a plain activation must not read u: pass none */
        be->ffn_act(b, (enum pi_act)a, g, pi_act_gated((enum pi_act)a) ? u : NULL, N);
        for (int i = 0; i < N; i++) {
            const double x = g0[i], k = sqrt(2 / 3.141592653589793);
            const double silu = x / (1 + exp(-x)), relu = x > 0 ? x : 0;
            const double gelu = 0.5 * x * (1 + tanh(k * (x + 0.044715 * x * x * x)));
            const double gelu_erf = 0.5 * x * (1 + erf(x / sqrt(2.0)));
            double want = 0;
            switch ((enum pi_act)a) {
            case PI_ACT_SILU_MUL: want = silu * u[i]; break;
            case PI_ACT_RELU_MUL: want = relu * u[i]; break;
            case PI_ACT_RELU_RELU_MUL: want = x > 0 && u[i] > 0 ? x * u[i] : 0; break;
            case PI_ACT_GELU_MUL: want = gelu * u[i]; break;
            case PI_ACT_GELU_ERF_MUL: want = gelu_erf * u[i]; break;
            case PI_ACT_SWIGLU_OAI: { /* gpt-oss: gate clamped above, up both ways, at 7 */
                const double xc = x > 7 ? 7 : x, uc = u[i] > 7 ? 7 : u[i] < -7 ? -7 : u[i];
                want = xc / (1 + exp(-1.702 * xc)) * (uc + 1);
                break;
            }
            case PI_ACT_SILU: want = silu; break;
            case PI_ACT_GELU: want = gelu; break;
            case PI_ACT_GELU_ERF: want = gelu_erf; break;
            case PI_ACT_RELU: want = relu; break;
            case PI_ACT_RELU_SQR: want = relu * relu; break;
            case PI_ACT_COUNT: break;
            }
            near(g[i], want, 1e-6 * (1 + fabs(want)), "ffn_act", i);
        }
    }
    be->destroy(b);
}

/* An op wider than the backend's max_width, or over more than max_tokens tokens, is
 * refused rather than run past its scratch (issue 12: a predictor rank the context did
 * not count overran it): its output is left alone and sync reports PI_ERR_INTERNAL from
 * then on. Within the limits the same ops run and sync is PI_OK. */
static void test_refuses_wider_than_configured(void **state) {
    (void)state;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    enum { W = 64, IN = 2 * W, T = 2 };
    static float w[W * IN], x[9 * IN], y[9 * IN];
    for (int i = 0; i < W * IN; i++)
        w[i] = rnd();
    for (int i = 0; i < 9 * IN; i++)
        x[i] = rnd();
    const struct pi_weight narrow = {w, PI_TYPE_F32, W, IN, W * sizeof(float)};
    const struct pi_weight wide = {w, PI_TYPE_F32, IN, W, IN * sizeof(float)};
    const int32_t idx[2] = {0, 5};
    for (int op = 0; op < 6; op++) {
        struct pi_backend *b = make(2, W); /* max_tokens 8 */
        be->matmul(b, &narrow, x, T, y);   /* n_in == max_width: fine */
        assert_int_equal(be->sync(b), PI_OK);
        for (int i = 0; i < 9 * IN; i++)
            y[i] = 7.0f;
        if (op == 0)
            be->matmul(b, &wide, x, T, y); /* n_in 128 */
        else if (op == 1)
            be->matmul(b, &narrow, x, 9, y); /* 9 tokens */
        else if (op == 2)
            be->matmul_rows(b, &wide, x, T, idx, 2, y);
        else if (op == 3)
            be->matmul_rows2(b, &wide, &wide, x, T, idx, 2, y, y);
        else if (op == 4)
            be->matmul_t(b, &narrow, x, T, y); /* n_out 128 */
        else
            be->matmul_t_rows(b, &narrow, x, T, idx, 2, y);
        if (be->sync(b) != PI_ERR_INTERNAL)
            fail_msg("op %d was not refused", op);
        for (int i = 0; i < 9 * IN; i++)
            if (y[i] != 7.0f)
                fail_msg("op %d wrote y[%d]", op, i);
        be->matmul(b, &narrow, x, T, y);
        assert_int_equal(be->sync(b), PI_ERR_INTERNAL); /* it stays */
        be->destroy(b);
    }
    /* attention over more positions than the scores row holds */
    struct pi_backend *b = make(1, 8);
    struct pi_kv_desc d = {1, 16, 1, 1, 4, 4, PI_KV_F16, PI_KV_F16};
    const struct pi_attn std = {0.5f, 0.0f, 0, NULL};
    struct pi_kv *kv;
    assert_int_equal(be->kv_create(b, &d, &kv), PI_OK);
    be->kv_store(b, kv, 0, 0, 8, x, x);
    be->attention(b, kv, 0, x, 2, 6, &std, y); /* positions 0..7: 8 scores */
    assert_int_equal(be->sync(b), PI_OK);
    be->kv_store(b, kv, 0, 8, 2, x, x);
    be->attention(b, kv, 0, x, 2, 8, &std, y); /* 10 scores */
    assert_int_equal(be->sync(b), PI_ERR_INTERNAL);
    be->kv_destroy(b, kv);
    be->destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refuses_wider_than_configured),
        cmocka_unit_test(test_rmsnorm),   cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attention), cmocka_unit_test(test_attention_quantized),
        cmocka_unit_test(test_hadamard),
        cmocka_unit_test(test_matmul_and_transpose),
        cmocka_unit_test(test_norms_and_elementwise), cmocka_unit_test(test_ffn_act),   cmocka_unit_test(test_sparse_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
