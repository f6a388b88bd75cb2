#define _POSIX_C_SOURCE 200809L
/* Non-finite values and the calls around them:
 *  - a model whose weights make layer 1's attention overflow fails pi_ctx_decode with
 *    PI_ERR_NUMERIC and leaves the context as it was (position, previous logits);
 *    with PI_CHECK_LAYERS the message names layer 1 and the attention block, and an
 *    overflowing FFN weight names the FFN block; on the CPU and with the layer on a
 *    CPU device;
 *  - a healthy model decodes identically with PI_CHECK_LAYERS;
 *  - a batch that asks for no logits leaves none readable;
 *  - the sampler orders NaN as -infinity and +infinity as the largest float, the same
 *    token for the same seed; all NaN is PI_ERR_NUMERIC;
 *  - pi_ctx_set_threads and bad check_numerics values set a message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "powerinfer.h"
#include "testmodel.h"
#include "portable.h" /* last: Windows shims of mkdir, mkdtemp */

static char g_dir[256];

static pi_model *open_poisoned(const char *name, const char *tensor, float value) {
    struct tm_spec s;
    tm_default(&s);
    s.n_layer = 3;
    s.poison = tensor;
    s.poison_value = value;
    char p[300];
    snprintf(p, sizeof p, "%s/%s.gguf", g_dir, name);
    assert_int_equal(tm_write(&s, p), PI_OK);
    pi_model *m;
    assert_int_equal(pi_model_open(p, NULL, &m), PI_OK);
    return m;
}

static pi_ctx *make_ctx(pi_model *m, uint32_t check, int device) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 32;
    cp.n_threads = 2;
    cp.check_numerics = check;
    if (device) { /* everything on a CPU device: x lives on the device side */
        cp.device = PI_DEVICE_CPU;
        cp.device_budget = PI_DEVICE_BUDGET_AUTO;
    }
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    return c;
}

static const int32_t toks[] = {1, 5, 9, 3};

static void test_overflow_fails_decode(void **state) {
    (void)state;
    /* inf in one weight of layer 1's output projection: from that layer on the
     * residual stream holds inf (and then NaN), so do the logits */
    pi_model *m = open_poisoned("att_inf", "blk.1.attn_output.weight", INFINITY);
    for (int device = 0; device <= 1; device++) {
        pi_ctx *c = make_ctx(m, PI_CHECK_LOGITS, device);
        assert_int_equal(pi_ctx_decode(c, toks, 4), PI_ERR_NUMERIC);
        const char *msg = pi_ctx_errmsg(c);
        assert_non_null(strstr(msg, "logits of entry 3"));
        assert_int_equal(pi_ctx_pos(c), 0);
        assert_null(pi_ctx_logits(c));
        pi_ctx_destroy(c);

        c = make_ctx(m, PI_CHECK_LAYERS, device);
        assert_int_equal(pi_ctx_decode(c, toks, 4), PI_ERR_NUMERIC);
        msg = pi_ctx_errmsg(c);
        assert_non_null(strstr(msg, "layer 1, after the attention block"));
        assert_int_equal(pi_ctx_pos(c), 0);
        pi_ctx_destroy(c);
    }
    pi_model_close(m);

    m = open_poisoned("ffn_nan", "blk.2.ffn_down.weight", NAN);
    pi_ctx *c = make_ctx(m, PI_CHECK_LAYERS, 0);
    assert_int_equal(pi_ctx_decode(c, toks, 2), PI_ERR_NUMERIC);
    assert_non_null(strstr(pi_ctx_errmsg(c), "layer 2, after the FFN block: NaN"));
    pi_ctx_destroy(c);
    pi_model_close(m);
}

/* A NaN in a PowerInfer predictor only changes which neurons are computed (the logits
 * stay finite), so it is found by PI_CHECK_LAYERS, which checks the scores too. */
static void test_predictor_nan(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.n_layer = 3;
    s.sparse = 1;
    s.poison = "blk.1.fc2.weight";
    s.poison_value = NAN;
    char p[300];
    snprintf(p, sizeof p, "%s/pred_nan.gguf", g_dir);
    assert_int_equal(tm_write(&s, p), PI_OK);
    pi_model *m;
    assert_int_equal(pi_model_open(p, NULL, &m), PI_OK);
    pi_ctx *c = make_ctx(m, PI_CHECK_LAYERS, 0);
    const int st = pi_ctx_decode(c, toks, 2);
    if (st != PI_ERR_NUMERIC)
        fail_msg("%d: %s", st, pi_ctx_errmsg(c));
    assert_non_null(strstr(pi_ctx_errmsg(c), "layer 1, after the predictor block: NaN in the "
                                            "scores"));
    pi_ctx_destroy(c);
    pi_model_close(m);
}

static void test_failure_keeps_previous_logits(void **state) {
    (void)state;
    /* an infinite element in the embedding row of token 0: only that token overflows */
    pi_model *m = open_poisoned("embd_inf", "token_embd.weight", INFINITY);
    pi_ctx *c = make_ctx(m, PI_CHECK_LOGITS, 0);
    const int32_t ok[] = {8, 9};
    assert_int_equal(pi_ctx_decode(c, ok, 2), PI_OK);
    const int64_t V = pi_model_n_vocab(m);
    float before[64];
    assert_true(V <= 64);
    memcpy(before, pi_ctx_logits(c), (size_t)V * sizeof(float));
    const int32_t bad = 0; /* row 0 holds the poisoned element */
    assert_int_equal(pi_ctx_decode(c, &bad, 1), PI_ERR_NUMERIC);
    assert_int_equal(pi_ctx_pos(c), 2);
    assert_memory_equal(pi_ctx_logits(c), before, (size_t)V * sizeof(float));
    /* and the context goes on as if the failed call never happened */
    const int32_t next = 4;
    assert_int_equal(pi_ctx_decode(c, &next, 1), PI_OK);
    assert_int_equal(pi_ctx_pos(c), 3);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

static void test_check_layers_same_logits(void **state) {
    (void)state;
    pi_model *m = open_poisoned("healthy", NULL, 0.0f);
    pi_ctx *a = make_ctx(m, PI_CHECK_LOGITS, 0), *b = make_ctx(m, PI_CHECK_LAYERS, 0);
    assert_int_equal(pi_ctx_decode(a, toks, 4), PI_OK);
    assert_int_equal(pi_ctx_decode(b, toks, 4), PI_OK);
    assert_memory_equal(pi_ctx_logits(a), pi_ctx_logits(b),
                        (size_t)pi_model_n_vocab(m) * sizeof(float));
    pi_ctx_destroy(a);
    pi_ctx_destroy(b);
    pi_model_close(m);
}

static void test_batch_without_logits(void **state) {
    (void)state;
    pi_model *m = open_poisoned("nologits", NULL, 0.0f);
    pi_ctx *c = make_ctx(m, PI_CHECK_LOGITS, 0);
    assert_int_equal(pi_ctx_decode(c, toks, 2), PI_OK);
    assert_non_null(pi_ctx_logits(c));
    pi_batch_entry e[2] = {{3, 0, -1, 0}, {4, 0, -1, 0}};
    assert_int_equal(pi_ctx_decode_batch(c, e, 2), PI_OK);
    assert_null(pi_ctx_logits(c)); /* not the logits of an earlier call */
    assert_null(pi_ctx_batch_logits(c, 0));
    e[1].token = 6;
    e[0].logits = 1;
    assert_int_equal(pi_ctx_decode_batch(c, e, 1), PI_OK);
    assert_non_null(pi_ctx_logits(c));
    pi_ctx_destroy(c);
    pi_model_close(m);
}

static void test_sampler_non_finite(void **state) {
    (void)state;
    pi_model *m = open_poisoned("sampler", NULL, 0.0f);
    const int64_t V = pi_model_n_vocab(m);
    float l[64];
    for (int64_t i = 0; i < V; i++)
        l[i] = (float)(i % 7) * 0.25f;
    l[0] = NAN;
    l[V - 1] = NAN;
    l[5] = 2.0f; /* the best number */
    pi_sampler_params sp;
    pi_sampler_default_params(&sp);
    sp.temperature = 0.0f;
    pi_sampler *s;
    assert_int_equal(pi_sampler_create(m, &sp, &s), PI_OK);
    int32_t t;
    assert_int_equal(pi_sample_logits(s, l, V, &t), PI_OK);
    assert_int_equal(t, 5);
    l[9] = INFINITY;
    assert_int_equal(pi_sample_logits(s, l, V, &t), PI_OK);
    assert_int_equal(t, 9);
    pi_sampler_destroy(s);

    /* drawn: NaN never comes out, and the same seed gives the same tokens, for top-k
     * and for the whole vocabulary */
    l[9] = 0.5f;
    for (int k = 0; k <= 40; k += 40) {
        int32_t first[200];
        for (int run = 0; run < 2; run++) {
            pi_sampler_default_params(&sp);
            sp.temperature = 1.5f;
            sp.top_k = k;
            sp.top_p = 1.0f;
            sp.min_p = 0.0f;
            assert_int_equal(pi_sampler_create(m, &sp, &s), PI_OK);
            for (int i = 0; i < 200; i++) {
                assert_int_equal(pi_sample_logits(s, l, V, &t), PI_OK);
                assert_true(t != 0 && t != V - 1);
                if (run == 0)
                    first[i] = t;
                else
                    assert_int_equal(t, first[i]);
            }
            pi_sampler_destroy(s);
        }
    }

    for (int64_t i = 0; i < V; i++)
        l[i] = i % 2 ? NAN : -INFINITY;
    for (int temp = 0; temp <= 1; temp++) {
        pi_sampler_default_params(&sp);
        sp.temperature = temp ? 0.8f : 0.0f;
        assert_int_equal(pi_sampler_create(m, &sp, &s), PI_OK);
        assert_int_equal(pi_sample_logits(s, l, V, &t), PI_ERR_NUMERIC);
        pi_sampler_destroy(s);
    }
    pi_model_close(m);
}

static void test_messages(void **state) {
    (void)state;
    pi_model *m = open_poisoned("msgs", NULL, 0.0f);
    pi_ctx *c = make_ctx(m, PI_CHECK_LOGITS, 0);
    assert_int_equal(pi_ctx_set_threads(c, 100000), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(pi_ctx_errmsg(c), "pi_ctx_set_threads"));
    assert_int_equal(pi_ctx_set_threads(c, 1), PI_OK);
    assert_string_equal(pi_ctx_errmsg(c), "");
    assert_int_equal(pi_ctx_n_threads(c), 1);
    pi_ctx_destroy(c);

    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.check_numerics = 2;
    char err[200] = "";
    cp.errbuf = err;
    cp.errbuf_cap = sizeof err;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "check_numerics"));
    assert_string_equal(pi_status_str(PI_ERR_NUMERIC), "non-finite result (NaN or infinity)");
    pi_model_close(m);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/pi_numerics_XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overflow_fails_decode),
        cmocka_unit_test(test_failure_keeps_previous_logits),
        cmocka_unit_test(test_predictor_nan),
        cmocka_unit_test(test_check_layers_same_logits),
        cmocka_unit_test(test_batch_without_logits),
        cmocka_unit_test(test_sampler_non_finite),
        cmocka_unit_test(test_messages),
    };
    const int r = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        return 1;
    return r;
}
