/* The architecture fixtures (tests/fixtures/archs: Llama 3.1 rope_freqs, biases, YaRN,
 * Qwen2/3, Gemma 2/3 with soft-caps and sliding windows, Phi-3 with LongRoPE, StarCoder2,
 * Falcon) run as hybrid contexts on the GPU give the CPU-only context's logits: a prompt
 * in steps of 16 tokens (steps cross the 8-token sliding windows of the Gemma files),
 * then single-token decode steps, at budgets of a quarter, a half and three quarters of
 * what the dry run places, and with the automatic budget (everything on the GPU for
 * these tiny models), so the device runs whole models and parts of them next to the CPU.
 *
 * Usage: test_gpu_archs [--cpu-device] MODEL.gguf REF.bin [MODEL REF ...]
 * REF.bin (as tests/model/test_forward.c reads it) only gives the tokens.
 * --cpu-device: a second CPU backend as the device (PI_DEVICE_CPU), to check this
 * program where no GPU is. Exits 77 (skip) when the library has no GPU backend or no
 * device answers. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "powerinfer.h"

/* Largest |GPU - CPU| of a step's logits relative to the CPU's max |logit|. Both runs
 * use float activations and the same F16 KV cache (the same rounding to nearest even);
 * they differ in the order of their fp32 sums, which moves a K or V value across an
 * F16 rounding boundary now and then (2^-11 of that value). The F16 cache as a whole
 * moves these logits by up to ~1e-3 of max |logit| against float64 transformers
 * (tests/meson.build, 'archs'), so single flips stay well below that; the same bound
 * as test_hybrid --gpu, whose synthetic models see the same two effects. A wrong
 * window, cap, scale or RoPE angle moves the logits by 1e-2 and more. */
#define TOL 2e-3

enum { MAX_MODELS = 32, N_DECODE = 4, N_BATCH = 16, N_CTX = 64 };

struct fixture {
    const char *model_path;
    uint32_t n_tok;
    int32_t *tokens;
};

static struct fixture g_fix[MAX_MODELS];
static int g_n_fix;
static uint32_t g_device = PI_DEVICE_GPU;

static int load_tokens(struct fixture *f, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -1;
    uint32_t hdr[2];
    int ok = fread(hdr, 4, 2, fp) == 2 && hdr[0] > N_DECODE + 1 && hdr[0] <= N_CTX;
    if (ok) {
        f->n_tok = hdr[0];
        f->tokens = malloc(4 * (size_t)f->n_tok);
        ok = f->tokens && fread(f->tokens, 4, f->n_tok, fp) == f->n_tok;
    }
    fclose(fp);
    return ok ? 0 : -1;
}

static void ctx_params(pi_ctx_params *cp, char *err, size_t cap) {
    pi_ctx_default_params(cp);
    cp->n_ctx = N_CTX;
    cp->n_batch = N_BATCH;
    cp->n_threads = 2;
    cp->f32_activations = 1; /* a GPU computes with float activations */
    cp->errbuf = err;
    cp->errbuf_cap = cap;
}

/* Logits after the prompt (all but the last N_DECODE tokens) and after each decode
 * step: out [1 + N_DECODE][n_vocab]. */
static void run(const pi_model *m, const struct fixture *f, const pi_ctx_params *cp,
                float *out, const char *what) {
    const int64_t nv = pi_model_n_vocab(m);
    const uint32_t n_prompt = f->n_tok - N_DECODE;
    pi_ctx *c = NULL;
    if (pi_ctx_create(m, cp, &c) != PI_OK)
        fail_msg("%s (%s): pi_ctx_create: %s", f->model_path, what, cp->errbuf);
    if (pi_ctx_decode(c, f->tokens, n_prompt) != PI_OK)
        fail_msg("%s (%s): prompt: %s", f->model_path, what, pi_ctx_errmsg(c));
    memcpy(out, pi_ctx_logits(c), (size_t)nv * sizeof *out);
    for (int s = 0; s < N_DECODE; s++) {
        if (pi_ctx_decode(c, f->tokens + n_prompt + s, 1) != PI_OK)
            fail_msg("%s (%s): decode: %s", f->model_path, what, pi_ctx_errmsg(c));
        memcpy(out + (size_t)(s + 1) * (size_t)nv, pi_ctx_logits(c), (size_t)nv * sizeof *out);
    }
    const pi_plan *p = pi_ctx_plan(c);
    if (p) { /* what ran on the device */
        int64_t attn = 0, ffn = 0, ex = 0;
        for (int64_t l = 0; l < pi_plan_n_layer(p); l++) {
            attn += (pi_plan_layer_parts(p, l) >> PI_PLAN_ATTENTION) & 1;
            ffn += pi_plan_layer_neurons(p, l, NULL, 0) > 0;
            ex += pi_plan_layer_experts(p, l, NULL, 0);
        }
        printf("#   %s: attention of %lld and FFN of %lld of %lld layers on the device, KV cache "
               "%s, output %s, %lld experts\n", what, (long long)attn, (long long)ffn,
               (long long)pi_plan_n_layer(p), pi_plan_kv_on_device(p) ? "there" : "on the host",
               pi_plan_output_on_device(p) ? "there" : "on the host", (long long)ex);
    }
    pi_ctx_destroy(c);
}

static double rel_err(const float *got, const float *want, int64_t n) {
    double d = 0.0, mx = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)got[i] - (double)want[i]));
        mx = fmax(mx, fabs((double)want[i]));
    }
    return d / mx;
}

static void test_gpu_equals_cpu(void **state) {
    (void)state;
    for (int i = 0; i < g_n_fix; i++) {
        const struct fixture *f = &g_fix[i];
        pi_model *m = NULL;
        char err[512] = "";
        pi_model_params mp;
        pi_model_default_params(&mp);
        mp.errbuf = err;
        mp.errbuf_cap = sizeof err;
        if (pi_model_open(f->model_path, &mp, &m) != PI_OK)
            fail_msg("%s: %s", f->model_path, err);
        printf("# %s\n", f->model_path);
        const int64_t nv = pi_model_n_vocab(m);
        const size_t n_out = (size_t)(1 + N_DECODE) * (size_t)nv;
        float *want = malloc(n_out * sizeof *want), *got = malloc(n_out * sizeof *got);
        assert_non_null(want);
        assert_non_null(got);
        pi_ctx_params cp;
        ctx_params(&cp, err, sizeof err);
        run(m, f, &cp, want, "CPU only");

        /* what the GPU would hold with the automatic budget */
        cp.device = g_device;
        pi_plan *all = NULL;
        if (pi_model_plan(m, &cp, &all) != PI_OK)
            fail_msg("%s: pi_model_plan: %s", f->model_path, err);
        const uint64_t everything = pi_plan_bytes(all, PI_PLAN_N_PARTS);
        pi_plan_free(all);
        assert_true(everything > 0);

        const uint64_t budgets[] = {everything / 4, everything / 2, everything / 4 * 3,
                                    PI_DEVICE_BUDGET_AUTO};
        double worst = 0.0;
        for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
            char what[64];
            snprintf(what, sizeof what, "%s, budget %llu%s",
                     g_device == PI_DEVICE_GPU ? "GPU" : "CPU device",
                     (unsigned long long)(b == 3 ? everything : budgets[b]),
                     b == 3 ? " (auto)" : "");
            cp.device_budget = budgets[b];
            run(m, f, &cp, got, what);
            for (int s = 0; s <= N_DECODE; s++) {
                const double e = rel_err(got + (size_t)s * (size_t)nv,
                                         want + (size_t)s * (size_t)nv, nv);
                worst = fmax(worst, e);
                if (e > TOL)
                    fail_msg("%s (%s), %s %d: logits differ from CPU only by %.3g of max "
                             "|logit| (tolerance %.3g)", f->model_path, what,
                             s ? "decode step" : "prompt", s, e, TOL);
            }
        }
        printf("#   %s hybrid vs CPU only: worst %.3g of max |logit| (tolerance %.3g)\n",
               g_device == PI_DEVICE_GPU ? "GPU" : "CPU device", worst, (double)TOL);
        free(want);
        free(got);
        pi_model_close(m);
    }
}

int main(int argc, char **argv) {
    int i0 = 1;
    if (argc > 1 && strcmp(argv[1], "--cpu-device") == 0) {
        g_device = PI_DEVICE_CPU;
        i0 = 2;
    }
    for (int i = i0; i < argc; i += 2) {
        if (i + 1 >= argc || g_n_fix == MAX_MODELS) {
            fprintf(stderr, "bad arguments at %s (MODEL REF pairs, at most %d)\n", argv[i],
                    MAX_MODELS);
            return 99;
        }
        struct fixture *f = &g_fix[g_n_fix];
        f->model_path = argv[i];
        if (load_tokens(f, argv[i + 1]) != 0) {
            fprintf(stderr, "cannot read tokens from %s\n", argv[i + 1]);
            return 99;
        }
        g_n_fix++;
    }
    if (g_n_fix == 0) {
        fprintf(stderr, "usage: %s MODEL REF [MODEL REF ...]\n", argv[0]);
        return 99;
    }
    /* no GPU backend, or no device: a dry run on the GPU says so */
    pi_model *m = NULL;
    if (pi_model_open(g_fix[0].model_path, NULL, &m) != PI_OK) {
        fprintf(stderr, "cannot open %s\n", g_fix[0].model_path);
        return 99;
    }
    char err[512] = "";
    pi_ctx_params cp;
    ctx_params(&cp, err, sizeof err);
    cp.device = g_device;
    pi_plan *p = NULL;
    const int st = pi_model_plan(m, &cp, &p);
    pi_plan_free(p);
    pi_model_close(m);
    if (st == PI_ERR_UNSUPPORTED) {
        printf("SKIP: no usable GPU (%s)\n", err);
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpu_equals_cpu)};
    const int failed = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < g_n_fix; i++)
        free(g_fix[i].tokens);
    return failed ? 1 : 0;
}
