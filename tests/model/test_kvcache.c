#define _POSIX_C_SOURCE 200809L
/* The Q8_0 and Q4_0 KV caches (pi_ctx_params.kv_type) through the public API, on a
 * small llama model with 32-wide heads:
 *  - the logits of a prompt and decode steps stay within the blocks' rounding of the
 *    F16 cache's (8-bit and float activations; Q4_0 further than Q8_0), and are not the
 *    same bits (the cache really is another one);
 *  - a saved state restores bit for bit (the blocks as stored), and loads only into a
 *    context with the same kv_type; a sequence copy decodes exactly as its source;
 *    removing positions (the keys re-rotated through floats) stays within rounding of
 *    the F16 cache doing the same;
 *  - refused: kv_type out of range, a device, heads that are not multiples of 32. */
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
#include "testmodel.h"
#include "portable.h" /* last: Windows shims of mkdtemp */

enum { NTOK = 10, MAXV = 64 };
static const int32_t TOKS[NTOK] = {1, 7, 3, 22, 9, 31, 5, 12, 2, 17};

static char g_dir[256];
static pi_model *g_model; /* 32-wide heads */

/* kv_type_v: 0 for values as keys */
static pi_ctx *make2(uint32_t kv_type, uint32_t kv_type_v, int f32, uint32_t n_seq) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 32;
    cp.n_threads = 2;
    cp.kv_type = kv_type;
    cp.kv_type_v = kv_type_v;
    cp.f32_activations = (uint32_t)f32;
    cp.n_seq_max = n_seq;
    pi_ctx *c;
    char err[256] = "";
    cp.errbuf = err;
    cp.errbuf_cap = sizeof err;
    if (pi_ctx_create(g_model, &cp, &c) != PI_OK)
        fail_msg("pi_ctx_create: %s", err);
    return c;
}

static pi_ctx *make(uint32_t kv_type, int f32, uint32_t n_seq) {
    return make2(kv_type, 0, f32, n_seq);
}

static double rel_diff(const float *a, const float *b, int64_t n) {
    double mx = 1e-6, d = 0;
    for (int64_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(a[i]));
        const double e = fabs((double)a[i] - b[i]);
        d = e != e ? INFINITY : fmax(d, e); /* fmax would drop a NaN */
    }
    return d / mx;
}

/* Logits after a 6-token prompt and after each of 4 single tokens. */
static void run(pi_ctx *c, float out[5][MAXV]) {
    const int64_t nv = pi_model_n_vocab(g_model);
    assert_int_equal(pi_ctx_decode(c, TOKS, 6), PI_OK);
    memcpy(out[0], pi_ctx_logits(c), (size_t)nv * sizeof(float));
    for (int s = 1; s < 5; s++) {
        assert_int_equal(pi_ctx_decode(c, TOKS + 5 + s, 1), PI_OK);
        memcpy(out[s], pi_ctx_logits(c), (size_t)nv * sizeof(float));
    }
}

static void test_logits(void **state) {
    (void)state;
    const int64_t nv = pi_model_n_vocab(g_model);
    for (int f32 = 0; f32 <= 1; f32++) {
        float ref[5][MAXV], got[5][MAXV];
        pi_ctx *c = make(PI_KV_TYPE_F16, f32, 1);
        run(c, ref);
        pi_ctx_destroy(c);
        double worst[2] = {0, 0};
        for (int q4 = 0; q4 <= 1; q4++) {
            c = make(q4 ? PI_KV_TYPE_Q4_0 : PI_KV_TYPE_Q8_0, f32, 1);
            run(c, got);
            pi_ctx_destroy(c);
            for (int s = 0; s < 5; s++)
                worst[q4] = fmax(worst[q4], rel_diff(ref[s], got[s], nv));
            print_message("# %s activations: %s cache vs F16: %.4e of max |logit|\n",
                          f32 ? "float" : "8-bit", q4 ? "Q4_0" : "Q8_0", worst[q4]);
        }
        assert_true(worst[0] > 0.0 && worst[0] < 2e-2);
        /* 4-bit blocks: 16 steps instead of 256, so more rounding, and still close */
        assert_true(worst[1] > worst[0] && worst[1] < 1e-1);
        /* keys and values apart: Q8_0 keys with Q4_0 values, F16 keys with Q8_0 or
         * Q4_0 values; each differs from the F16 cache and from the Q8_0 one (so the
         * values took their own type), and stays as close as the Q4_0 cache */
        float q8[5][MAXV];
        c = make(PI_KV_TYPE_Q8_0, f32, 1);
        run(c, q8);
        pi_ctx_destroy(c);
        static const uint32_t split[3][2] = {{PI_KV_TYPE_Q8_0, PI_KV_TYPE_Q4_0},
                                             {PI_KV_TYPE_F16, PI_KV_TYPE_Q8_0},
                                             {PI_KV_TYPE_F16, PI_KV_TYPE_Q4_0}};
        for (int i = 0; i < 3; i++) {
            c = make2(split[i][0], split[i][1], f32, 1);
            run(c, got);
            pi_ctx_destroy(c);
            double w = 0, wq8 = 0;
            for (int s = 0; s < 5; s++) {
                w = fmax(w, rel_diff(ref[s], got[s], nv));
                wq8 = fmax(wq8, rel_diff(q8[s], got[s], nv));
            }
            print_message("# %s activations: keys %u, values %u vs F16: %.4e, vs Q8_0: %.4e\n",
                          f32 ? "float" : "8-bit", split[i][0], split[i][1], w, wq8);
            assert_true(w > 0.0 && w < 1e-1 && wq8 > 0.0);
        }
    }
}

static void state_and_sequences(uint32_t kv_type, const char *name) {
    const int64_t nv = pi_model_n_vocab(g_model);
    pi_ctx *c = make(kv_type, 0, 2);
    assert_int_equal(pi_ctx_decode(c, TOKS, 6), PI_OK);
    size_t size = 0;
    assert_int_equal(pi_ctx_state_save(c, -1, NULL, 0, &size), PI_ERR_RANGE);
    void *buf = malloc(size);
    assert_non_null(buf);
    assert_int_equal(pi_ctx_state_save(c, -1, buf, size, &size), PI_OK);
    float a[3][MAXV] = {{0}}, b[3][MAXV] = {{0}};
    for (int s = 0; s < 3; s++) {
        assert_int_equal(pi_ctx_decode(c, TOKS + 6 + s, 1), PI_OK);
        memcpy(a[s], pi_ctx_logits(c), (size_t)nv * sizeof(float));
    }
    assert_int_equal(pi_ctx_state_load(c, -1, buf, size), PI_OK);
    for (int s = 0; s < 3; s++) {
        assert_int_equal(pi_ctx_decode(c, TOKS + 6 + s, 1), PI_OK);
        memcpy(b[s], pi_ctx_logits(c), (size_t)nv * sizeof(float));
    }
    assert_memory_equal(a, b, sizeof a);
    /* into an F16 context: refused, naming the types */
    pi_ctx *f = make(PI_KV_TYPE_F16, 0, 2);
    assert_int_equal(pi_ctx_state_load(f, -1, buf, size), PI_ERR_FORMAT);
    assert_non_null(strstr(pi_ctx_errmsg(f), name));
    free(buf);

    /* a copy of sequence 0 decodes exactly as sequence 0 */
    assert_int_equal(pi_ctx_seq_copy(c, 0, 1), PI_OK);
    const pi_batch_entry e0 = {TOKS[9], 0, pi_ctx_seq_len(c, 0), 1};
    const pi_batch_entry e1 = {TOKS[9], 1, pi_ctx_seq_len(c, 1), 1};
    assert_int_equal(pi_ctx_decode_batch(c, &e0, 1), PI_OK);
    memcpy(a[0], pi_ctx_logits(c), (size_t)nv * sizeof(float));
    assert_int_equal(pi_ctx_decode_batch(c, &e1, 1), PI_OK);
    assert_memory_equal(a[0], pi_ctx_logits(c), (size_t)nv * sizeof(float));

    /* removing positions 1..4 of both caches, then one more token: within rounding */
    for (int k = 0; k < 2; k++) {
        pi_ctx *x = k ? c : f;
        if (!k)
            assert_int_equal(pi_ctx_decode(x, TOKS, 10), PI_OK);
        else {
            pi_ctx_seq_clear(x, -1);
            assert_int_equal(pi_ctx_decode(x, TOKS, 10), PI_OK);
        }
        assert_int_equal(pi_ctx_seq_remove(x, 0, 1, 5), PI_OK);
        assert_int_equal(pi_ctx_seq_len(x, 0), 6);
        assert_int_equal(pi_ctx_decode(x, TOKS + 3, 1), PI_OK);
        memcpy(k ? b[0] : a[0], pi_ctx_logits(x), (size_t)nv * sizeof(float));
    }
    const double d = rel_diff(a[0], b[0], nv);
    print_message("# after removing positions: %s vs F16 %.2e of max |logit|\n", name, d);
    assert_true(d < (kv_type == PI_KV_TYPE_Q4_0 ? 1e-1 : 2e-2));
    pi_ctx_destroy(f);
    pi_ctx_destroy(c);
}

static void test_state_and_sequences(void **state) {
    (void)state;
    state_and_sequences(PI_KV_TYPE_Q8_0, "Q8_0");
    state_and_sequences(PI_KV_TYPE_Q4_0, "Q4_0");
    /* Q8_0 keys with Q4_0 values: saved and loaded, refused by a Q8_0 context and a
     * Q8_0 one is refused by it (the values' type is in the state) */
    const int64_t nv = pi_model_n_vocab(g_model);
    pi_ctx *c = make2(PI_KV_TYPE_Q8_0, PI_KV_TYPE_Q4_0, 0, 1);
    pi_ctx *q8 = make(PI_KV_TYPE_Q8_0, 0, 1);
    assert_int_equal(pi_ctx_decode(c, TOKS, 6), PI_OK);
    assert_int_equal(pi_ctx_decode(q8, TOKS, 6), PI_OK);
    size_t size = 0, size8 = 0;
    assert_int_equal(pi_ctx_state_save(c, -1, NULL, 0, &size), PI_ERR_RANGE);
    assert_int_equal(pi_ctx_state_save(q8, -1, NULL, 0, &size8), PI_ERR_RANGE);
    assert_true(size < size8); /* 18 bytes per 32 values instead of 34 */
    void *buf = malloc(size), *buf8 = malloc(size8);
    assert_true(buf && buf8);
    assert_int_equal(pi_ctx_state_save(c, -1, buf, size, &size), PI_OK);
    assert_int_equal(pi_ctx_state_save(q8, -1, buf8, size8, &size8), PI_OK);
    float a[MAXV], b[MAXV];
    assert_int_equal(pi_ctx_decode(c, TOKS + 6, 1), PI_OK);
    memcpy(a, pi_ctx_logits(c), (size_t)nv * sizeof(float));
    pi_ctx_seq_clear(c, -1);
    assert_int_equal(pi_ctx_state_load(c, -1, buf, size), PI_OK);
    assert_int_equal(pi_ctx_decode(c, TOKS + 6, 1), PI_OK);
    memcpy(b, pi_ctx_logits(c), (size_t)nv * sizeof(float));
    assert_memory_equal(a, b, (size_t)nv * sizeof(float));
    assert_int_equal(pi_ctx_state_load(q8, -1, buf, size), PI_ERR_FORMAT);
    assert_non_null(strstr(pi_ctx_errmsg(q8), "Q4_0 values"));
    assert_int_equal(pi_ctx_state_load(c, -1, buf8, size8), PI_ERR_FORMAT);
    assert_non_null(strstr(pi_ctx_errmsg(c), "Q8_0 values"));
    /* a removal re-rotates the keys only: within the Q4_0 cache's bound of F16 */
    assert_int_equal(pi_ctx_decode(q8, TOKS + 6, 4), PI_OK);
    pi_ctx_seq_clear(c, -1);
    assert_int_equal(pi_ctx_decode(c, TOKS, 10), PI_OK);
    assert_int_equal(pi_ctx_seq_remove(c, 0, 1, 5), PI_OK);
    assert_int_equal(pi_ctx_seq_remove(q8, 0, 1, 5), PI_OK);
    assert_int_equal(pi_ctx_decode(c, TOKS + 3, 1), PI_OK);
    assert_int_equal(pi_ctx_decode(q8, TOKS + 3, 1), PI_OK);
    const double d = rel_diff(pi_ctx_logits(q8), pi_ctx_logits(c), nv);
    print_message("# after removing positions: Q8_0/Q4_0 vs Q8_0 %.2e of max |logit|\n", d);
    assert_true(d > 0.0 && d < 1e-1);
    free(buf);
    free(buf8);
    pi_ctx_destroy(q8);
    pi_ctx_destroy(c);
}

static void test_refused(void **state) {
    (void)state;
    pi_ctx_params cp;
    pi_ctx *c;
    char err[256];
    pi_ctx_default_params(&cp);
    cp.n_ctx = 32;
    cp.errbuf = err;
    cp.errbuf_cap = sizeof err;
    cp.kv_type = PI_KV_TYPE_Q4_0 + 1;
    assert_int_equal(pi_ctx_create(g_model, &cp, &c), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "kv_type"));
    cp.kv_type = PI_KV_TYPE_F16;
    cp.kv_type_v = PI_KV_TYPE_Q4_0 + 1;
    assert_int_equal(pi_ctx_create(g_model, &cp, &c), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "kv_type_v"));
    cp.kv_type_v = PI_KV_TYPE_Q8_0; /* F16 keys, Q8_0 values: still CPU-only */
    cp.device = PI_DEVICE_CPU;
    assert_int_equal(pi_ctx_create(g_model, &cp, &c), PI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "CPU-only"));
    cp.device = PI_DEVICE_NONE;
    cp.kv_type_v = 0;
    cp.reserved3 = 1;
    assert_int_equal(pi_ctx_create(g_model, &cp, &c), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "reserved"));
    cp.reserved3 = 0;
    cp.kv_type = PI_KV_TYPE_Q4_0;
    cp.device = PI_DEVICE_CPU;
    assert_int_equal(pi_ctx_create(g_model, &cp, &c), PI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "CPU-only"));
    assert_non_null(strstr(err, "Q4_0"));
    cp.kv_type = PI_KV_TYPE_Q8_0;
    assert_int_equal(pi_ctx_create(g_model, &cp, &c), PI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "CPU-only"));
    /* 16-wide heads */
    char path[300];
    snprintf(path, sizeof path, "%s/narrow.gguf", g_dir);
    assert_int_equal(tm_write_split(path, "llama", 0, PI_TYPE_F32, 3), PI_OK);
    pi_model *m;
    assert_int_equal(pi_model_open(path, NULL, &m), PI_OK);
    cp.device = PI_DEVICE_NONE;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "multiples of 32"));
    cp.kv_type = PI_KV_TYPE_Q4_0;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "multiples of 32"));
    cp.kv_type = PI_KV_TYPE_F16;
    cp.kv_type_v = PI_KV_TYPE_Q8_0; /* the values' heads too */
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "multiples of 32"));
    cp.kv_type_v = 0;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/pi-kvcache-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[300];
    snprintf(path, sizeof path, "%s/wide.gguf", g_dir);
    struct tm_spec s;
    tm_default(&s);
    s.n_embd = 128; /* 4 heads of 32 */
    s.n_ff = 192;
    s.wtype = PI_TYPE_F16;
    s.seed = 9;
    if (tm_write(&s, path) != PI_OK || pi_model_open(path, NULL, &g_model) != PI_OK) {
        fprintf(stderr, "cannot write or open %s\n", path);
        return 1;
    }
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_logits),
        cmocka_unit_test(test_state_and_sequences),
        cmocka_unit_test(test_refused),
    };
    int rc = cmocka_run_group_tests(all, NULL, NULL);
    pi_model_close(g_model);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
