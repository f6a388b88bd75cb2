#define _POSIX_C_SOURCE 200809L
/* Graph regions (backend.h graph_begin/graph_end, pi_ctx_params.device_graphs) as the
 * forward pass uses them, with a CPU device whose vtable is wrapped to watch them:
 *  - a step whose layers all run on the device (or all on the host) opens one region
 *    per step of up to PI_GRAPHS_MAX_TOKENS tokens, closes it before the step ends,
 *    with the device's ops inside, keyed by the step's shape; the logits are the
 *    CPU-only run's bit for bit;
 *  - a lost region (the wrapper drops every op in it and reports the loss, as a CUDA
 *    device does when a graph cannot run) is run again op by op: the logits are still
 *    the CPU-only run's bit for bit, and the context opens no region after it;
 *  - no region with PI_GRAPHS_OFF, with statistics, with layer checks, for steps
 *    wider than PI_GRAPHS_MAX_TOKENS, or when a layer splits its FFN between the
 *    host and the device; device_graphs out of range is refused.
 * With --gpu (tests/gpu/run.sh): on the GPU, every step with graphs gives the same
 * logits bit for bit as op by op, and the context still has graphs on at the end (no
 * segment failed); exits 77 without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "infer/ctx.h"
#include "infer/hybrid.h"
#include "powerinfer.h"
#include "testmodel.h"
#include "portable.h" /* last: Windows shims of mkdtemp */

enum { NPROMPT = 5, NDECODE = 4, NSTEP = NDECODE + 1, MAXV = 64 };
static const int32_t TOKS[NPROMPT + NDECODE] = {1, 7, 3, 22, 9, 31, 5, 12, 2};

static int g_gpu;
static char g_dir[256];

/* ---- the watching wrapper -------------------------------------------------------- */

static struct {
    const struct pi_backend_vtable *real;
    struct pi_backend_vtable vt;
    int region, lose, off;   /* in a region; drop its ops and report a loss; no more */
    int begins, ends, lost;  /* regions opened, closed, reported lost */
    long ops, dropped;       /* device ops inside regions; of them not run */
    long outside;            /* device ops outside any region */
    uint64_t key;
} W;

static int w_skip(void) {
    if (!W.region) {
        W.outside++;
        return 0;
    }
    W.ops++;
    if (W.lose)
        W.dropped++;
    return W.lose;
}

static void w_matmul(struct pi_backend *b, const struct pi_weight *w, const float *x,
                     int64_t n_tok, float *y) {
    if (!w_skip())
        W.real->matmul(b, w, x, n_tok, y);
}
static void w_matmul_n(struct pi_backend *b, int nw, const struct pi_weight *const *ws,
                       const float *x, int64_t n_tok, float *const *ys) {
    if (!w_skip())
        W.real->matmul_n(b, nw, ws, x, n_tok, ys);
}
static void w_matmul_t(struct pi_backend *b, const struct pi_weight *w, const float *x,
                       int64_t n_tok, float *y) {
    if (!w_skip())
        W.real->matmul_t(b, w, x, n_tok, y);
}
static void w_rmsnorm(struct pi_backend *b, const float *x, const struct pi_vector *g, float eps,
                      int64_t n_tok, float *y) {
    if (!w_skip())
        W.real->rmsnorm(b, x, g, eps, n_tok, y);
}
static void w_layernorm(struct pi_backend *b, const float *x, const struct pi_vector *g,
                        const struct pi_vector *bias, int64_t n, float eps, int64_t n_tok,
                        float *y) {
    if (!w_skip())
        W.real->layernorm(b, x, g, bias, n, eps, n_tok, y);
}
static void w_rope(struct pi_backend *b, float *x, int64_t n_tok, int64_t n_head, int64_t hd,
                   int64_t pos0, const struct pi_rope *r) {
    if (!w_skip())
        W.real->rope(b, x, n_tok, n_head, hd, pos0, r);
}
static void w_kv_store(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                       int64_t n_tok, const float *k, const float *v) {
    if (!w_skip())
        W.real->kv_store(b, kv, layer, pos0, n_tok, k, v);
}
static void w_attention(struct pi_backend *b, struct pi_kv *kv, int64_t layer, const float *q,
                        int64_t n_tok, int64_t pos0, const struct pi_attn *a, float *out) {
    if (!w_skip())
        W.real->attention(b, kv, layer, q, n_tok, pos0, a, out);
}
static void w_ffn_act(struct pi_backend *b, enum pi_act act, float *g, const float *u, int64_t n) {
    if (!w_skip())
        W.real->ffn_act(b, act, g, u, n);
}
static void w_ffn_act_masked(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                             int64_t n_tok, int64_t n, const float *score, int64_t stride,
                             const int32_t *map, float thr) {
    if (!w_skip())
        W.real->ffn_act_masked(b, act, g, u, n_tok, n, score, stride, map, thr);
}
static void w_add(struct pi_backend *b, float *y, const float *x, int64_t n) {
    if (!w_skip())
        W.real->add(b, y, x, n);
}
static void w_add_rows(struct pi_backend *b, float *y, const struct pi_vector *v, int64_t n_tok) {
    if (!w_skip())
        W.real->add_rows(b, y, v, n_tok);
}
static int w_graph_begin(struct pi_backend *b, uint64_t key) {
    (void)b;
    assert_false(W.region); /* never nested */
    if (W.off)
        return 0;
    W.region = 1;
    W.begins++;
    W.key = key;
    return 1;
}
static int w_graph_end(struct pi_backend *b) {
    (void)b;
    assert_true(W.region);
    W.region = 0;
    W.ends++;
    if (!W.lose)
        return 0;
    W.lose = 0;
    W.off = 1;
    W.lost++;
    return 1;
}

/* Put the wrapper between a CPU-device context and its device. */
static void wrap(pi_ctx *ctx, int lose_first) {
    struct pi_ctx *c = (struct pi_ctx *)ctx;
    assert_non_null(c->hy);
    memset(&W, 0, sizeof W);
    W.real = c->hy->be;
    W.vt = *W.real;
    W.vt.matmul = w_matmul;
    W.vt.matmul_t = w_matmul_t;
    W.vt.matmul_n = W.real->matmul_n ? w_matmul_n : NULL;
    W.vt.rmsnorm = w_rmsnorm;
    W.vt.layernorm = w_layernorm;
    W.vt.rope = w_rope;
    W.vt.kv_store = w_kv_store;
    W.vt.attention = w_attention;
    W.vt.ffn_act = w_ffn_act;
    W.vt.ffn_act_masked = w_ffn_act_masked;
    W.vt.add = w_add;
    W.vt.add_rows = w_add_rows;
    W.vt.graph_begin = w_graph_begin;
    W.vt.graph_end = w_graph_end;
    W.lose = lose_first;
    c->hy->be = &W.vt;
    assert_int_equal(pi_exec_resolve(c), PI_OK); /* sees the vtable's graph members */
}

/* ---- runs ------------------------------------------------------------------------ */

static void params(pi_ctx_params *cp, uint32_t device, uint32_t mode) {
    pi_ctx_default_params(cp);
    cp->n_ctx = 32;
    cp->n_threads = 2;
    cp->n_batch = 8;
    cp->sparse_mode = mode;
    cp->device = device;
    cp->f32_activations = (uint32_t)g_gpu;
}

/* The prompt in one step (n_batch permitting), then NDECODE single tokens: the logits
 * after each. wrap_mode: -1 no wrapper, else wrap (1: the first region is lost). */
static void run(pi_model *m, const pi_ctx_params *cp, int wrap_mode, float out[NSTEP][MAXV],
                pi_ctx **keep) {
    pi_ctx *c;
    char err[512] = "";
    pi_ctx_params p = *cp;
    p.errbuf = err;
    p.errbuf_cap = sizeof err;
    if (pi_ctx_create(m, &p, &c) != PI_OK) {
        if (g_gpu)
            exit(77);
        fail_msg("pi_ctx_create: %s", err);
    }
    if (wrap_mode >= 0)
        wrap(c, wrap_mode);
    const int64_t nv = pi_model_n_vocab(m);
    assert_true(nv <= MAXV);
    memset(out, 0, sizeof(float) * NSTEP * MAXV);
    assert_int_equal(pi_ctx_decode(c, TOKS, NPROMPT), PI_OK);
    memcpy(out[0], pi_ctx_logits(c), (size_t)nv * sizeof(float));
    for (int s = 1; s < NSTEP; s++) {
        assert_int_equal(pi_ctx_decode(c, TOKS + NPROMPT + s - 1, 1), PI_OK);
        memcpy(out[s], pi_ctx_logits(c), (size_t)nv * sizeof(float));
    }
    if (keep)
        *keep = c;
    else
        pi_ctx_destroy(c);
}

static pi_model *model(const char *name, int sparse, uint32_t wtype) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s.gguf", g_dir, name);
    assert_int_equal(tm_write_split(path, "llama", sparse, wtype, 5), PI_OK);
    pi_model *m;
    assert_int_equal(pi_model_open(path, NULL, &m), PI_OK);
    return m;
}

static void expect_same(float a[NSTEP][MAXV], float b[NSTEP][MAXV], const char *what) {
    if (memcmp(a, b, sizeof(float) * NSTEP * MAXV) != 0)
        fail_msg("%s: the logits differ from the reference", what);
}

/* Everything on the device: a region per step, closed before it returns, holding the
 * device's ops; the CPU-only logits bit for bit. The same with a PowerInfer file in
 * predictor mode (all neurons on the device). */
static void test_regions(void **state) {
    (void)state;
    const struct {
        const char *name;
        int sparse;
        uint32_t mode;
    } cases[] = {{"dense", 0, PI_SPARSE_DENSE}, {"sparse", 1, PI_SPARSE_PREDICTOR}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        pi_model *m = model(cases[k].name, cases[k].sparse, PI_TYPE_F16);
        pi_ctx_params cp;
        float ref[NSTEP][MAXV], got[NSTEP][MAXV];
        params(&cp, PI_DEVICE_NONE, cases[k].mode);
        run(m, &cp, -1, ref, NULL);
        params(&cp, PI_DEVICE_CPU, cases[k].mode);
        run(m, &cp, 0, got, NULL);
        expect_same(ref, got, cases[k].name);
        assert_int_equal(W.begins, NSTEP); /* the 5-token prompt is a region too */
        assert_int_equal(W.ends, NSTEP);
        assert_int_equal(W.lost, 0);
        assert_true(W.ops > 0);
        assert_int_equal(W.key & 0xffff, 1); /* the last step: one token, one logit row */
        assert_int_equal(W.key >> 16 & 0xffff, 1);
        print_message("# %s: %d regions, %ld device ops in them, %ld outside\n",
                      cases[k].name, W.begins, W.ops, W.outside);
        pi_model_close(m);
    }
}

/* The first region is lost (its ops never ran): the step is run again op by op with the
 * same logits, and no region is opened after it. */
static void test_lost_region(void **state) {
    (void)state;
    pi_model *m = model("lost", 0, PI_TYPE_F32);
    pi_ctx_params cp;
    float ref[NSTEP][MAXV], got[NSTEP][MAXV];
    params(&cp, PI_DEVICE_NONE, PI_SPARSE_DENSE);
    run(m, &cp, -1, ref, NULL);
    params(&cp, PI_DEVICE_CPU, PI_SPARSE_DENSE);
    pi_ctx *c;
    run(m, &cp, 1, got, &c);
    expect_same(ref, got, "after a lost region");
    assert_int_equal(W.begins, 1);
    assert_int_equal(W.lost, 1);
    assert_true(W.dropped > 0);
    assert_true(W.outside > W.dropped); /* the rerun, and every later step, op by op */
    assert_int_equal(((struct pi_ctx *)c)->graphs, 0);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

/* No region where one must not be opened. */
static void test_no_region(void **state) {
    (void)state;
    pi_model *m = model("none", 1, PI_TYPE_F16);
    pi_ctx_params cp;
    float ref[NSTEP][MAXV], got[NSTEP][MAXV];
    params(&cp, PI_DEVICE_NONE, PI_SPARSE_PREDICTOR);
    run(m, &cp, -1, ref, NULL);

    params(&cp, PI_DEVICE_CPU, PI_SPARSE_PREDICTOR);
    cp.device_graphs = PI_GRAPHS_OFF;
    run(m, &cp, 0, got, NULL);
    expect_same(ref, got, "PI_GRAPHS_OFF");
    assert_int_equal(W.begins, 0);

    params(&cp, PI_DEVICE_CPU, PI_SPARSE_PREDICTOR);
    cp.stats = PI_STATS_ON;
    run(m, &cp, 0, got, NULL);
    assert_int_equal(W.begins, 0);

    params(&cp, PI_DEVICE_CPU, PI_SPARSE_PREDICTOR);
    cp.check_numerics = PI_CHECK_LAYERS;
    run(m, &cp, 0, got, NULL);
    expect_same(ref, got, "PI_CHECK_LAYERS");
    assert_int_equal(W.begins, 0);

    /* budgets from nothing to everything: a region per step unless some layer splits
     * its neurons between the two (overlapped); both kinds seen */
    params(&cp, PI_DEVICE_CPU, PI_SPARSE_PREDICTOR);
    pi_plan *all;
    assert_int_equal(pi_model_plan(m, &cp, &all), PI_OK);
    const uint64_t everything = pi_plan_bytes(all, PI_PLAN_N_PARTS);
    const int64_t F = pi_plan_n_ff(all);
    pi_plan_free(all);
    int seen_split = 0, seen_regions = 0;
    for (int k = 0; k <= 16; k++) {
        cp.device_budget = everything / 16 * (uint64_t)k + (k == 16 ? 64 : 0);
        pi_ctx *sc;
        run(m, &cp, 0, got, &sc);
        const pi_plan *pp = pi_ctx_plan(sc);
        int split = 0;
        for (int64_t l = 0; l < pi_plan_n_layer(pp); l++) {
            const int64_t n = pi_plan_layer_neurons(pp, l, NULL, 0);
            split |= n > 0 && n < F;
        }
        pi_ctx_destroy(sc);
        assert_int_equal(W.begins, split ? 0 : NSTEP);
        if (!split)
            expect_same(ref, got, "a budget without split layers");
        seen_split |= split;
        seen_regions |= !split && W.ops > 0;
    }
    assert_true(seen_split && seen_regions);
    pi_model_close(m);

    /* a prompt wider than PI_GRAPHS_MAX_TOKENS: no region for it, one per decode step */
    m = model("wide", 0, PI_TYPE_F16);
    params(&cp, PI_DEVICE_CPU, PI_SPARSE_DENSE);
    cp.n_batch = 16;
    pi_ctx *c;
    char err[256] = "";
    cp.errbuf = err;
    cp.errbuf_cap = sizeof err;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    wrap(c, 0);
    int32_t wide[PI_GRAPHS_MAX_TOKENS + 3];
    for (int i = 0; i < PI_GRAPHS_MAX_TOKENS + 3; i++)
        wide[i] = TOKS[i % (NPROMPT + NDECODE)];
    assert_int_equal(pi_ctx_decode(c, wide, PI_GRAPHS_MAX_TOKENS + 3), PI_OK);
    assert_int_equal(W.begins, 0);
    assert_int_equal(pi_ctx_decode(c, TOKS, 1), PI_OK);
    assert_int_equal(W.begins, 1);
    pi_ctx_destroy(c);

    /* out of range */
    params(&cp, PI_DEVICE_CPU, PI_SPARSE_DENSE);
    cp.device_graphs = PI_GRAPHS_OFF + 1;
    cp.errbuf = err;
    cp.errbuf_cap = sizeof err;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "device_graphs"));
    pi_model_close(m);
}

/* On the GPU: graphs give the op-by-op logits bit for bit, and none failed. */
static void test_gpu(void **state) {
    (void)state;
    const struct {
        const char *name;
        int sparse;
        uint32_t wtype, mode;
    } cases[] = {{"gpu-dense-q4", 0, PI_TYPE_Q4_0, PI_SPARSE_DENSE},
                 {"gpu-dense-f16", 0, PI_TYPE_F16, PI_SPARSE_DENSE},
                 {"gpu-sparse", 1, PI_TYPE_Q8_0, PI_SPARSE_PREDICTOR}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        pi_model *m = model(cases[k].name, cases[k].sparse, cases[k].wtype);
        pi_ctx_params cp;
        float ops[NSTEP][MAXV], graphs[NSTEP][MAXV];
        params(&cp, PI_DEVICE_GPU, cases[k].mode);
        cp.device_graphs = PI_GRAPHS_OFF;
        run(m, &cp, -1, ops, NULL);
        cp.device_graphs = PI_GRAPHS_AUTO;
        pi_ctx *c;
        run(m, &cp, -1, graphs, &c);
        const struct pi_ctx *ci = (const struct pi_ctx *)c;
        print_message("# %s: graph regions %s, graphs %s at the end\n", cases[k].name,
                      ci->graph_layers ? "allowed" : "not allowed",
                      ci->graphs ? "still on" : "turned off by a failure");
        assert_true(ci->graph_layers);
        assert_true(ci->graphs);
        expect_same(ops, graphs, cases[k].name);
        pi_ctx_destroy(c);
        pi_model_close(m);
    }
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--gpu"))
            g_gpu = 1;
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/pi-graphs-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest cpu[] = {
        cmocka_unit_test(test_regions),
        cmocka_unit_test(test_lost_region),
        cmocka_unit_test(test_no_region),
    };
    const struct CMUnitTest gpu[] = {cmocka_unit_test(test_gpu)};
    int rc = g_gpu ? cmocka_run_group_tests(gpu, NULL, NULL)
                   : cmocka_run_group_tests(cpu, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
