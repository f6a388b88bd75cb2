/* The sparse FFN against a reference computed outside our engine: tiny ReLU models
 * built with transformers, predictors trained with torch and converted by
 * tools/convert_hf_to_powerinfer.py (tests/fixtures/make_sparse_models.py). For each
 * committed <variant>.<type>.gguf the .sref.bin holds, from torch in float64 on the
 * weights as stored in that file: the logits after every token of a 12-token sequence
 * with the predicted sparse FFN and with the dense FFN, every layer's sparse FFN output,
 * and the predicted sets (chosen with a margin so they are unambiguous).
 *
 * Checked, with float activations (pi_ctx_params.f32_activations):
 *   - predictor mode, one token per step: every layer's predicted set equals the
 *     reference exactly, every layer's FFN output and the logits within tolerance;
 *   - predictor mode, the whole sequence in one prompt step (the union path): the same
 *     per-token sets and FFN outputs, and the last logits;
 *   - dense and oracle modes against the dense reference.
 * And with 8-bit activations (the default fast mode): the logits of the predictor mode
 * stay within a stated tolerance of the file's own reference; against the F16 file's
 * reference (quantization of the weights included), within what quantizing the weights
 * alone moves the exact logits at that position (the distance between the two
 * references) plus the same tolerance.
 *
 * And a dense GGUF converted from the same weights (an OPT file, which llama.cpp's
 * converter does not make) against the dense reference.
 *
 * argv: triples GGUF SREF TOL (TOL relative to max |logit|), then optional triples
 * after "--fast": GGUF SREF TOL, then optional quadruples after "--fast-vs-f16":
 * GGUF SREF SREF_OF_F16 TOL, then optional triples after "--dense-file": GGUF SREF TOL. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "infer/ctx.h"
#include "powerinfer.h"
#include "testfile.h"

struct sref {
    uint32_t n_tokens, n_vocab, n_layer, n_embd, n_ff;
    float threshold;
    int32_t *tokens;
    float *logits_sparse, *logits_dense, *ffn_out;
    uint8_t *predicted;
    float min_margin;
};

/* Parse the .sref.bin layout (make_sparse_models.py); *raw must be freed. */
static void load_sref(const char *path, struct sref *r, uint8_t **raw) {
    size_t size;
    uint8_t *b = tf_slurp(path, &size);
    *raw = b;
    assert_true(size >= 32 && !memcmp(b, "PISR", 4));
    uint32_t v[7];
    memcpy(v, b + 4, sizeof v);
    assert_int_equal(v[0], 1);
    r->n_tokens = v[1];
    r->n_vocab = v[2];
    r->n_layer = v[3];
    r->n_embd = v[4];
    r->n_ff = v[5];
    memcpy(&r->threshold, &v[6], 4);
    size_t off = 32;
    const size_t T = r->n_tokens, V = r->n_vocab, L = r->n_layer, E = r->n_embd, F = r->n_ff;
    const size_t need = off + 4 * T + 8 * T * V + 4 * L * T * E + L * T * F + 4;
    assert_int_equal(size, need);
    r->tokens = (int32_t *)(void *)(b + off);
    off += 4 * T;
    r->logits_sparse = (float *)(void *)(b + off);
    off += 4 * T * V;
    r->logits_dense = (float *)(void *)(b + off);
    off += 4 * T * V;
    r->ffn_out = (float *)(void *)(b + off);
    off += 4 * L * T * E;
    r->predicted = b + off;
    off += L * T * F;
    memcpy(&r->min_margin, b + off, 4);
}

struct trace {
    const struct sref *r;
    int64_t pos0;     /* position of the step's first token */
    double ffn_err;   /* max |ffn_out - ref| / max |ref| of the layer, over the run */
    long set_errors;  /* predicted-set disagreements */
};

static void on_layer(void *user, int64_t layer, int64_t n_tok, const float *ffn_out,
                     const float *scores) {
    struct trace *tr = user;
    const struct sref *r = tr->r;
    const int64_t E = r->n_embd, F = r->n_ff;
    for (int64_t t = 0; t < n_tok; t++) {
        const int64_t p = tr->pos0 + t;
        const float *want = r->ffn_out + ((size_t)layer * r->n_tokens + (size_t)p) * (size_t)E;
        double md = 0, mx = 1e-6;
        for (int64_t i = 0; i < E; i++) {
            md = fmax(md, fabs((double)ffn_out[t * E + i] - want[i]));
            mx = fmax(mx, fabs((double)want[i]));
        }
        tr->ffn_err = fmax(tr->ffn_err, md / mx);
        if (!scores)
            continue;
        const uint8_t *pred = r->predicted + ((size_t)layer * r->n_tokens + (size_t)p) * (size_t)F;
        for (int64_t i = 0; i < F; i++)
            tr->set_errors += (scores[t * F + i] >= r->threshold) != (pred[i] != 0);
    }
}

static pi_model *open_model(const char *path) {
    pi_model *m = tf_open_model(path);
    assert_int_equal(pi_model_is_sparse(m), 1);
    return m;
}

static pi_ctx *make_ctx(pi_model *m, int mode, int f32) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cp.sparse_mode = (uint32_t)mode;
    cp.f32_activations = (uint32_t)f32;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    return c;
}

static double logit_err(const float *got, const float *want, int64_t nv) {
    double md = 0, mx = 1e-6;
    for (int64_t i = 0; i < nv; i++) {
        md = fmax(md, fabs((double)got[i] - want[i]));
        mx = fmax(mx, fabs((double)want[i]));
    }
    return md / mx;
}

struct case_ {
    const char *model, *ref, *ref_f16;
    double tol;
    char name[96];
};

static const char *g_model, *g_ref, *g_ref_f16;
static double g_tol;

static void use_case(void **state) {
    const struct case_ *c = *state;
    g_model = c->model;
    g_ref = c->ref;
    g_ref_f16 = c->ref_f16;
    g_tol = c->tol;
}

static void test_against_reference(void **state) {
    use_case(state);
    struct sref r;
    uint8_t *raw;
    load_sref(g_ref, &r, &raw);
    pi_model *m = open_model(g_model);
    assert_int_equal(pi_model_n_vocab(m), r.n_vocab);
    assert_int_equal(pi_model_n_ff(m), r.n_ff);
    assert_true(fabsf(pi_model_sparse_threshold(m) - r.threshold) < 1e-7f);
    const int64_t V = r.n_vocab, T = r.n_tokens;

    /* predictor mode, one token per step */
    struct trace tr = {&r, 0, 0, 0};
    pi_ctx *c = make_ctx(m, PI_SPARSE_PREDICTOR, 1);
    c->trace_fn = on_layer;
    c->trace_user = &tr;
    double lerr = 0;
    for (int64_t t = 0; t < T; t++) {
        tr.pos0 = t;
        assert_int_equal(pi_ctx_decode(c, r.tokens + t, 1), PI_OK);
        lerr = fmax(lerr, logit_err(pi_ctx_logits(c), r.logits_sparse + t * V, V));
    }
    print_message("# %s: one-token steps: logits %.2e, FFN outputs %.2e, set errors %ld "
                  "(margin %.2e)\n", g_model, lerr, tr.ffn_err, tr.set_errors, r.min_margin);
    assert_int_equal(tr.set_errors, 0);
    assert_true(lerr <= g_tol && tr.ffn_err <= g_tol);
    pi_ctx_destroy(c);

    /* predictor mode, one prompt step (union path) */
    struct trace tp = {&r, 0, 0, 0};
    c = make_ctx(m, PI_SPARSE_PREDICTOR, 1);
    c->trace_fn = on_layer;
    c->trace_user = &tp;
    assert_int_equal(pi_ctx_decode(c, r.tokens, (size_t)T), PI_OK);
    lerr = logit_err(pi_ctx_logits(c), r.logits_sparse + (T - 1) * V, V);
    print_message("# %s: one prompt step: logits %.2e, FFN outputs %.2e, set errors %ld\n",
                  g_model, lerr, tp.ffn_err, tp.set_errors);
    assert_int_equal(tp.set_errors, 0);
    assert_true(lerr <= g_tol && tp.ffn_err <= g_tol);
    pi_ctx_destroy(c);

    /* dense and oracle modes against the dense reference */
    for (int mode = PI_SPARSE_DENSE; mode <= PI_SPARSE_ORACLE; mode += 2) {
        c = make_ctx(m, mode, 1);
        double e = 0;
        for (int64_t t = 0; t < T; t++) {
            assert_int_equal(pi_ctx_decode(c, r.tokens + t, 1), PI_OK);
            e = fmax(e, logit_err(pi_ctx_logits(c), r.logits_dense + t * V, V));
        }
        print_message("# %s: %s mode vs dense reference: %.2e\n", g_model,
                      mode == PI_SPARSE_DENSE ? "dense" : "oracle", e);
        assert_true(e <= g_tol);
        pi_ctx_destroy(c);
    }
    /* statistics: in the diagnostic mode the predicted counts are the reference's sets,
     * and layer 0's truly active counts (the full FFN beside the sparse one) equal what
     * the oracle mode sees (later layers see the sparse or the dense model's inputs) */
    double act_diag[64] = {0};
    for (int pass = 0; pass < 2 && r.n_layer <= 64; pass++) {
        pi_ctx_params cp;
        pi_ctx_default_params(&cp);
        cp.n_ctx = 64;
        cp.n_threads = 2;
        cp.sparse_mode = pass ? PI_SPARSE_ORACLE : PI_SPARSE_PREDICTOR;
        cp.f32_activations = 1;
        cp.stats = pass ? PI_STATS_ON : PI_STATS_DIAGNOSTIC;
        assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
        for (int64_t t = 0; t < T; t++)
            assert_int_equal(pi_ctx_decode(c, r.tokens + t, 1), PI_OK);
        for (uint32_t l = 0; l < r.n_layer; l++) {
            pi_layer_stats ls = {.struct_size = sizeof ls};
            assert_int_equal(pi_stats_layer(pi_ctx_stats(c), l, &ls), PI_OK);
            if (pass == 0) {
                double want = 0;
                for (size_t i = 0; i < (size_t)T * r.n_ff; i++)
                    want += r.predicted[(size_t)l * T * r.n_ff + i];
                assert_true(ls.predicted == want);
                assert_true(ls.both <= ls.predicted && ls.both <= ls.active && ls.active > 0);
                act_diag[l] = ls.active;
            } else if (l == 0 && ls.active != act_diag[l]) {
                fail_msg("%s layer %u: oracle saw %g active neurons, the diagnostic %g",
                         g_model, l, ls.active, act_diag[l]);
            }
        }
        pi_ctx_destroy(c);
    }
    /* learned positions (OPT) end at the table: a longer context is refused */
    if (!strcmp(pi_model_arch(m), "opt")) {
        pi_ctx_params cp;
        pi_ctx_default_params(&cp);
        cp.n_ctx = (uint32_t)pi_model_n_ctx_train(m) + 1;
        char msg[256] = "";
        cp.errbuf = msg;
        cp.errbuf_cap = sizeof msg;
        assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
        assert_null(c);
        assert_non_null(strstr(msg, "learned"));
    }
    /* the predictor really is sparse and not exact: sparse and dense references differ */
    assert_true(logit_err(r.logits_sparse + (T - 1) * V, r.logits_dense + (T - 1) * V, V) > g_tol);
    pi_model_close(m);
    free(raw);
}

/* Fast mode (8-bit activations): logits of every position against a reference. */
static void test_fast_mode(void **state) {
    use_case(state);
    struct sref r;
    uint8_t *raw;
    load_sref(g_ref, &r, &raw);
    pi_model *m = open_model(g_model);
    const int64_t V = r.n_vocab, T = r.n_tokens;
    pi_ctx *c = make_ctx(m, PI_SPARSE_PREDICTOR, 0);
    double e = 0;
    for (int64_t t = 0; t < T; t++) {
        assert_int_equal(pi_ctx_decode(c, r.tokens + t, 1), PI_OK);
        e = fmax(e, logit_err(pi_ctx_logits(c), r.logits_sparse + t * V, V));
    }
    print_message("# %s (8-bit activations) vs %s: logits %.2e (tolerance %.1e)\n", g_model,
                  g_ref, e, g_tol);
    assert_true(e <= g_tol);
    pi_ctx_destroy(c);
    pi_model_close(m);
    free(raw);
}

/* Fast mode on a quantized file against the F16 file's reference. The exact logits of
 * the two files' weights differ by delta_t at position t (on these 64-wide rows Q4_0
 * moves them by 0.17..0.31 of max |logit|, with about 6% of the predicted neurons
 * changing); ours may add at most the fast-mode tolerance to that, position by
 * position (the triangle inequality through the file's own reference). A flat bound
 * would have to sit above the worst position's delta and hide errors elsewhere. */
static void test_fast_vs_f16(void **state) {
    use_case(state);
    struct sref r, rf;
    uint8_t *raw, *rawf;
    load_sref(g_ref, &r, &raw);
    load_sref(g_ref_f16, &rf, &rawf);
    assert_int_equal(r.n_tokens, rf.n_tokens);
    assert_int_equal(r.n_vocab, rf.n_vocab);
    assert_memory_equal(r.tokens, rf.tokens, 4 * (size_t)r.n_tokens);
    pi_model *m = open_model(g_model);
    const int64_t V = r.n_vocab, T = r.n_tokens;
    pi_ctx *c = make_ctx(m, PI_SPARSE_PREDICTOR, 0);
    double worst = 0, worst_delta = 0, slack = INFINITY;
    for (int64_t t = 0; t < T; t++) {
        assert_int_equal(pi_ctx_decode(c, r.tokens + t, 1), PI_OK);
        double e = logit_err(pi_ctx_logits(c), rf.logits_sparse + t * V, V);
        double delta = logit_err(r.logits_sparse + t * V, rf.logits_sparse + t * V, V);
        if (e > delta + g_tol)
            fail_msg("%s position %lld: %.3g from the F16 reference, more than the weights' "
                     "own %.3g + %.3g", g_model, (long long)t, e, delta, g_tol);
        worst = fmax(worst, e);
        worst_delta = fmax(worst_delta, delta);
        slack = fmin(slack, delta + g_tol - e);
    }
    print_message("# %s (8-bit activations) vs %s: logits %.2e, the weights alone up to %.2e, "
                  "smallest slack %.2e\n", g_model, g_ref_f16, worst, worst_delta, slack);
    pi_ctx_destroy(c);
    pi_model_close(m);
    free(raw);
    free(rawf);
}

/* A dense file of the reference's weights: its logits against the dense reference. */
static void test_dense_file(void **state) {
    use_case(state);
    struct sref r;
    uint8_t *raw;
    load_sref(g_ref, &r, &raw);
    pi_model *m = tf_open_model(g_model);
    assert_int_equal(pi_model_is_sparse(m), 0);
    const int64_t V = r.n_vocab, T = r.n_tokens;
    pi_ctx *c = make_ctx(m, PI_SPARSE_AUTO, 1);
    double e = 0;
    for (int64_t t = 0; t < T; t++) {
        assert_int_equal(pi_ctx_decode(c, r.tokens + t, 1), PI_OK);
        e = fmax(e, logit_err(pi_ctx_logits(c), r.logits_dense + t * V, V));
    }
    print_message("# %s (dense file) vs %s's dense logits: %.2e\n", g_model, g_ref, e);
    assert_true(e <= g_tol);
    pi_ctx_destroy(c);
    pi_model_close(m);
    free(raw);
}

int main(int argc, char **argv) {
    enum { MAX_CASES = 32 };
    static struct case_ cases[MAX_CASES];
    static struct CMUnitTest tests[MAX_CASES];
    int n = 0, fast = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fast") || !strcmp(argv[i], "--fast-vs-f16")) {
            fast = argv[i][6] == '-' ? 2 : 1;
            continue;
        }
        if (!strcmp(argv[i], "--dense-file")) {
            fast = 3;
            continue;
        }
        const int k = fast == 2 ? 4 : 3;
        if (i + k - 1 >= argc || n == MAX_CASES)
            return 2;
        struct case_ *c = &cases[n];
        c->model = argv[i];
        c->ref = argv[i + 1];
        c->ref_f16 = fast == 2 ? argv[i + 2] : NULL;
        c->tol = atof(argv[i + k - 1]);
        const char *base = strrchr(c->model, '/');
        static const char *const kind[] = {"reference", "fast", "fast-vs-f16", "dense-file"};
        snprintf(c->name, sizeof c->name, "%s %s", kind[fast], base ? base + 1 : c->model);
        static const CMUnitTestFunction fn[] = {test_against_reference, test_fast_mode,
                                                test_fast_vs_f16, test_dense_file};
        tests[n] = (struct CMUnitTest){c->name, fn[fast], NULL, NULL, c};
        n++;
        i += k - 1;
    }
    return _cmocka_run_group_tests("sparse-reference", tests, (size_t)n, NULL, NULL);
}
