#define _POSIX_C_SOURCE 200809L
/* Hybrid execution: a second CPU backend acts as the device (PI_DEVICE_CPU), or the GPU
 * when run with --gpu (tests/gpu/run.sh; exits 77 when there is none).
 *  - for every budget from 0 to "everything fits", in steps that cross each placement
 *    boundary, the logits of a prompt step and of decode steps equal the CPU-only
 *    run's (bit for bit when no layer is split, else to rounding), in every FFN mode,
 *    for PowerInfer llama and bamboo files, pi_model_sparsify files (CATS and TEAL
 *    thresholds) and dense files, float and quantized;
 *  - the plan never exceeds its budget, grows with it, equals the dry run's;
 *  - plan files: save/read round trip, the cache is written then reused, stale and
 *    malformed files are refused (READ) or replaced (CACHE);
 *  - statistics put the hottest neurons on the device;
 *  - bad parameters fail with a message; every allocation failure of a hybrid
 *    pi_ctx_create gives PI_ERR_NOMEM and leaks nothing. */
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

#include "failalloc.h"
#include "model/model.h"
#include "powerinfer.h"
#include "testmodel.h"
#include "portable.h" /* last: Windows shims of mkdir, mkdtemp */

enum { NTOK = 7, MAXV = 64, NSTEP = 3 };
static const int32_t TOKS[NTOK] = {1, 7, 3, 22, 9, 31, 5};

static int g_gpu;        /* --gpu: the device is the GPU */
static const char *g_fix; /* --fixtures DIR: tests/fixtures/sparse (Falcon, OPT files) */
static char g_dir[256];  /* scratch directory */

static void model_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s.gguf", g_dir, name);
}

static void write_model(const char *arch, uint32_t wtype, int sparse, const char *path) {
    assert_int_equal(tm_write_split(path, arch, sparse, wtype, 11), PI_OK);
}

static pi_model *open_model(const char *path) {
    pi_model *m;
    assert_int_equal(pi_model_open(path, NULL, &m), PI_OK);
    return m;
}

static void base_params(pi_ctx_params *cp, int mode, char *err, size_t cap) {
    pi_ctx_default_params(cp);
    cp->n_ctx = 32;
    cp->n_threads = 2;
    cp->n_batch = 8;
    cp->sparse_mode = (uint32_t)mode;
    cp->f32_activations = 1; /* sweep_act sets it; a GPU computes with float activations */
    cp->errbuf = err;
    cp->errbuf_cap = cap;
}

/* Logits after the prompt (one step) and after each of NSTEP-1 single tokens. */
static void run(pi_model *m, const pi_ctx_params *cp, float out[NSTEP][MAXV], pi_plan **plan_out) {
    pi_ctx *c;
    if (pi_ctx_create(m, cp, &c) != PI_OK) {
        if (g_gpu && strstr(cp->errbuf, "device"))
            exit(77);
        fail_msg("pi_ctx_create: %s", cp->errbuf);
    }
    const int64_t nv = pi_model_n_vocab(m);
    assert_true(nv <= MAXV);
    memset(out, 0, sizeof(float) * NSTEP * MAXV);
    assert_int_equal(pi_ctx_decode(c, TOKS, NTOK - NSTEP + 1), PI_OK);
    memcpy(out[0], pi_ctx_logits(c), (size_t)nv * sizeof(float));
    for (int s = 1; s < NSTEP; s++) {
        assert_int_equal(pi_ctx_decode(c, TOKS + NTOK - NSTEP + s, 1), PI_OK);
        memcpy(out[s], pi_ctx_logits(c), (size_t)nv * sizeof(float));
    }
    if (plan_out) { /* the context's plan, copied through a dry run's equality */
        const pi_plan *p = pi_ctx_plan(c);
        *plan_out = NULL;
        if (p) {
            pi_plan *dry;
            assert_int_equal(pi_model_plan(m, cp, &dry), PI_OK);
            char a[8192], b[8192];
            pi_plan_describe(p, a, sizeof a);
            pi_plan_describe(dry, b, sizeof b);
            assert_string_equal(a, b);
            *plan_out = dry;
        }
    }
    pi_ctx_destroy(c);
}

static double max_rel(float a[NSTEP][MAXV], float b[NSTEP][MAXV], int64_t nv) {
    double worst = 0.0;
    for (int s = 0; s < NSTEP; s++) {
        double mx = 1e-6, d = 0.0;
        for (int64_t i = 0; i < nv; i++) {
            mx = fmax(mx, fabs(a[s][i]));
            const double e = fabs((double)a[s][i] - b[s][i]);
            d = e != e ? INFINITY : fmax(d, e); /* fmax would drop a NaN */
        }
        worst = fmax(worst, d / mx);
    }
    return worst;
}

/* Sweep budgets for one model and mode. With a CPU device each sweep runs with float
 * activations (every split within 1e-4 of max |logit|: the placement's own error) and
 * in the fast mode (bit for bit without neurons on the device; with some there, within
 * 4e-2: the sparse down projection's 8-bit coefficients, of decode steps and of dense
 * enough prompts, are grouped over the rows each side computes, kernels.h axpy_rows_i8
 * and axpy_rows_i8_tok, so moving rows moves that rounding; worst seen 2.5e-2, on the
 * tiny random ReLU model, whose logits amplify it). */
static void sweep_act(const char *path, int mode, int f32);
static void sweep(const char *path, int mode) {
    if (g_gpu) {
        sweep_act(path, mode, 1);
        return;
    }
    sweep_act(path, mode, 1);
    sweep_act(path, mode, 0);
}

static void sweep_act(const char *path, int mode, int f32) {
    pi_model *m = open_model(path);
    const int64_t nv = pi_model_n_vocab(m);
    char err[512] = "";
    pi_ctx_params cp;
    base_params(&cp, mode, err, sizeof err);
    cp.f32_activations = (uint32_t)f32;
    float ref[NSTEP][MAXV], got[NSTEP][MAXV];
    run(m, &cp, ref, NULL);

    /* "everything": the dry run's budget for a CPU device, or the GPU's answer */
    cp.device = g_gpu ? PI_DEVICE_GPU : PI_DEVICE_CPU;
    pi_plan *all;
    if (pi_model_plan(m, &cp, &all) != PI_OK) {
        if (g_gpu)
            exit(77);
        fail_msg("pi_model_plan: %s", err);
    }
    uint64_t everything = pi_plan_bytes(all, PI_PLAN_N_PARTS);
    const uint64_t scratch = pi_plan_bytes(all, PI_PLAN_SCRATCH);
    const int64_t L = pi_plan_n_layer(all), F = pi_plan_n_ff(all);
    if (!g_gpu) { /* a CPU device has room for the whole model */
        assert_int_equal(pi_plan_layer_parts(all, L - 1) & 5, 5); /* attention, ffn_norm */
        assert_true(pi_plan_kv_on_device(all) && pi_plan_output_on_device(all));
        for (int64_t l = 0; l < L; l++)
            assert_int_equal(pi_plan_layer_neurons(all, l, NULL, 0), F);
    }
    pi_plan_free(all);

    enum { N = 40 };
    uint64_t budgets[N + 3];
    int nb = 0;
    budgets[nb++] = 0;
    budgets[nb++] = scratch - 1;
    for (int k = 0; k <= N; k++)
        budgets[nb++] = scratch + (everything - scratch) / N * (uint64_t)k + (k == N ? 64 : 0);
    int64_t prev_neurons = -1, split_seen = 0;
    uint64_t prev_dense = 0;
    double worst = 0.0;
    for (int i = 0; i < nb; i++) {
        cp.device_budget = budgets[i];
        pi_plan *plan;
        run(m, &cp, got, &plan);
        assert_non_null(plan);
        assert_true(pi_plan_bytes(plan, PI_PLAN_N_PARTS) <= budgets[i]);
        int64_t neurons = 0, split = 0;
        for (int64_t l = 0; l < L; l++) {
            const int64_t n = pi_plan_layer_neurons(plan, l, NULL, 0);
            neurons += n;
            split += n > 0 && n < F;
        }
        split_seen += split;
        const double d = max_rel(ref, got, nv);
        if (neurons == 0 && !g_gpu) { /* same kernels, same order: bit for bit */
            if (memcmp(ref, got, sizeof ref) != 0)
                fail_msg("%s mode %d budget %llu: no neuron on the device, yet logits differ "
                         "by %g", path, mode, (unsigned long long)budgets[i], d);
        }
        if (d > (g_gpu ? 2e-3 : f32 ? 1e-4 : 4e-2))
            fail_msg("%s mode %d%s budget %llu (%lld neurons on the device): logits differ "
                     "by %g of max |logit|", path, mode, f32 ? "" : " (fast)",
                     (unsigned long long)budgets[i], (long long)neurons, d);
        worst = fmax(worst, d);
        /* monotone in the budget: dense parts never leave; with the same dense parts
         * no neuron leaves (a dense part that starts to fit may displace neurons) */
        const uint64_t dense = pi_plan_bytes(plan, PI_PLAN_N_PARTS) -
                               pi_plan_bytes(plan, PI_PLAN_NEURONS);
        if (i > 0 && dense < prev_dense)
            fail_msg("dense bytes on the device fell as the budget grew");
        if (i > 0 && dense == prev_dense && neurons < prev_neurons)
            fail_msg("neurons on the device fell from %lld to %lld as the budget grew",
                     (long long)prev_neurons, (long long)neurons);
        prev_neurons = neurons;
        prev_dense = dense;
        pi_plan_free(plan);
    }
    print_message("# %s mode %d%s: %d budgets, %lld split layers seen, worst %.2g\n", path,
                  mode, f32 ? "" : " (fast)", nb, (long long)split_seen, worst);
    if (!strstr(path, "dense")) /* the sweep crossed layers split between devices */
        assert_true(split_seen > 0);
    pi_model_close(m);
}

static void test_sweep_llama(void **state) {
    (void)state;
    char p[300];
    model_path(p, sizeof p, "hy-llama-q4");
    write_model("llama", PI_TYPE_Q4_0, 1, p);
    for (int mode = PI_SPARSE_DENSE; mode <= PI_SPARSE_ORACLE; mode++)
        sweep(p, mode);
    model_path(p, sizeof p, "hy-llama-f16");
    write_model("llama", PI_TYPE_F16, 1, p);
    sweep(p, PI_SPARSE_PREDICTOR);
}

static void test_sweep_bamboo(void **state) {
    (void)state;
    char p[300];
    model_path(p, sizeof p, "hy-bamboo-q8");
    write_model("bamboo", PI_TYPE_Q8_0, 1, p);
    sweep(p, PI_SPARSE_PREDICTOR);
    sweep(p, PI_SPARSE_ORACLE);
}

static void test_sweep_dense(void **state) {
    (void)state;
    char p[300];
    model_path(p, sizeof p, "hy-dense-q4");
    write_model("llama", PI_TYPE_Q4_0, 0, p);
    sweep(p, PI_SPARSE_DENSE);
    model_path(p, sizeof p, "hy-dense-f32");
    write_model("llama", PI_TYPE_F32, 0, p);
    sweep(p, PI_SPARSE_DENSE);
}

/* A pi_model_sparsify file of the dense model `dense`: thresholds (CATS: on |act(gate)|,
 * TEAL: on |act(gate) * up|) calibrated here on the test prompt to keep about half the
 * neurons (gate histograms, pi_stats_gate_quantile), as pi-sparsify does. */
static void sparsify_file(const char *dense, const char *out, uint32_t method) {
    pi_model *m = open_model(dense);
    char err[512] = "";
    pi_ctx_params cp;
    base_params(&cp, PI_SPARSE_DENSE, err, sizeof err);
    cp.stats = PI_STATS_ON;
    cp.gate_histogram = method == PI_SPARSIFY_TEAL ? PI_HIST_INTER : PI_HIST_GATE;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    assert_int_equal(pi_ctx_decode(c, TOKS, NTOK), PI_OK);
    const int64_t L = pi_model_n_layer(m);
    float thr[64];
    assert_true(L <= 64);
    for (int64_t l = 0; l < L; l++) {
        assert_int_equal(pi_stats_gate_quantile(pi_ctx_stats(c), l, 0.5, &thr[l]), PI_OK);
        assert_true(thr[l] > 0.0f);
    }
    pi_ctx_destroy(c);
    pi_model_close(m);
    pi_sparsify_params sp;
    pi_sparsify_default_params(&sp);
    sp.thresholds = thr;
    sp.n_thresholds = (uint64_t)L;
    sp.sparsity = 0.5f;
    sp.method = method;
    sp.n_threads = 2;
    sp.errbuf = err;
    sp.errbuf_cap = sizeof err;
    if (pi_model_sparsify(dense, out, &sp) != PI_OK)
        fail_msg("pi_model_sparsify: %s", err);
}

/* Sparsified files (CATS and TEAL, float and quantized sources) place neurons like
 * PowerInfer files: the device computes its neurons' thresholded activations
 * (ffn_act_thr), the host the rest; threshold and dense mode. */
static void test_sweep_sparsified(void **state) {
    (void)state;
    static const struct {
        uint32_t type, method;
        const char *name;
    } v[] = {{PI_TYPE_F16, PI_SPARSIFY_CATS, "hy-cats-f16"},
             {PI_TYPE_Q4_0, PI_SPARSIFY_CATS, "hy-cats-q4"},
             {PI_TYPE_F16, PI_SPARSIFY_TEAL, "hy-teal-f16"}};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        char src[300], p[300];
        snprintf(src, sizeof src, "%s/%s-src.gguf", g_dir, v[i].name);
        model_path(p, sizeof p, v[i].name);
        write_model("llama", v[i].type, 0, src);
        sparsify_file(src, p, v[i].method);
        sweep(p, PI_SPARSE_THRESHOLD);
        sweep(p, PI_SPARSE_DENSE);
    }
}

/* The committed PowerInfer files without a gate (tests/fixtures/make_sparse_models.py
 * --families): Falcon of both layouts and OPT (biases, learned positions), every mode. */
static void test_sweep_families(void **state) {
    (void)state;
    if (!g_fix)
        skip();
    static const char *const names[] = {"relu-falcon-7b.f16", "relu-falcon-40b.f16",
                                        "opt.f16"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s.gguf", g_fix, names[i]);
        for (int mode = PI_SPARSE_DENSE; mode <= PI_SPARSE_ORACLE; mode++)
            sweep(p, mode);
    }
}

/* A budget that holds the dense parts and about half the neurons. */
static uint64_t half_budget(pi_model *m, pi_ctx_params *cp) {
    pi_plan *all;
    assert_int_equal(pi_model_plan(m, cp, &all), PI_OK);
    const uint64_t b = pi_plan_bytes(all, PI_PLAN_N_PARTS) -
                       pi_plan_bytes(all, PI_PLAN_NEURONS) / 2;
    pi_plan_free(all);
    return b;
}

static void test_plan_files(void **state) {
    (void)state;
    char p[300], q[300], idx[320];
    model_path(p, sizeof p, "hy-files");
    write_model("llama", PI_TYPE_Q4_0, 1, p);
    model_path(q, sizeof q, "hy-files-other");
    write_model("bamboo", PI_TYPE_Q4_0, 1, q);
    snprintf(idx, sizeof idx, "%s.generated.gpuidx", p);
    remove(idx);
    pi_model *m = open_model(p), *o = open_model(q);
    char err[512] = "";
    pi_ctx_params cp;
    base_params(&cp, PI_SPARSE_PREDICTOR, err, sizeof err);
    cp.device = PI_DEVICE_CPU;
    cp.device_budget = half_budget(m, &cp);

    /* cache: written, then read back, identical */
    cp.plan_path = idx;
    cp.plan_file = PI_PLAN_FILE_CACHE;
    pi_plan *a, *b;
    assert_int_equal(pi_model_plan(m, &cp, &a), PI_OK);
    assert_int_equal(pi_plan_source(a), PI_PLAN_CACHE_WRITTEN);
    assert_int_equal(pi_model_plan(m, &cp, &b), PI_OK);
    assert_int_equal(pi_plan_source(b), PI_PLAN_FROM_FILE);
    const int64_t L = pi_plan_n_layer(a), F = pi_plan_n_ff(a);
    uint8_t ma[4096], mb[4096];
    assert_true(F <= 4096);
    for (int64_t l = 0; l < L; l++) {
        assert_int_equal(pi_plan_layer_neurons(a, l, ma, sizeof ma),
                         pi_plan_layer_neurons(b, l, mb, sizeof mb));
        assert_memory_equal(ma, mb, (size_t)F);
    }
    assert_int_equal(pi_plan_bytes(a, PI_PLAN_N_PARTS), pi_plan_bytes(b, PI_PLAN_N_PARTS));
    pi_plan_free(b);
    /* another budget: the cache is stale and rewritten */
    cp.device_budget -= 1000;
    assert_int_equal(pi_model_plan(m, &cp, &b), PI_OK);
    assert_int_equal(pi_plan_source(b), PI_PLAN_CACHE_WRITTEN);
    pi_plan_free(b);
    cp.device_budget += 1000;

    /* read: the saved file gives the same plan; a context runs with it */
    assert_int_equal(pi_plan_save(a, idx), PI_OK);
    cp.plan_file = PI_PLAN_FILE_READ;
    assert_int_equal(pi_model_plan(m, &cp, &b), PI_OK);
    assert_int_equal(pi_plan_source(b), PI_PLAN_FROM_FILE);
    assert_int_equal(pi_plan_bytes(a, PI_PLAN_NEURONS), pi_plan_bytes(b, PI_PLAN_NEURONS));
    pi_plan_free(b);
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    assert_int_equal(pi_plan_source(pi_ctx_plan(c)), PI_PLAN_FROM_FILE);
    pi_ctx_destroy(c);

    /* read: too small a budget for the file's neurons */
    const uint64_t keep = cp.device_budget;
    cp.device_budget = keep - pi_plan_bytes(a, PI_PLAN_NEURONS) / 2;
    err[0] = '\0';
    assert_int_equal(pi_model_plan(m, &cp, &b), PI_ERR_RANGE);
    assert_null(b);
    assert_non_null(strstr(err, "MiB"));
    cp.device_budget = keep;
    /* read: another model of the same shape */
    err[0] = '\0';
    assert_int_equal(pi_model_plan(o, &cp, &b), PI_ERR_RANGE);
    assert_non_null(strstr(err, "another model"));
    /* read: a malformed or missing file */
    FILE *fp = fopen(idx, "wb");
    assert_non_null(fp);
    fputs("GGUF garbage", fp);
    fclose(fp);
    assert_int_equal(pi_model_plan(m, &cp, &b), PI_ERR_FORMAT);
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_FORMAT);
    assert_null(c);
    assert_true(strlen(err) > 0);
    /* cache: a malformed file is replaced */
    cp.plan_file = PI_PLAN_FILE_CACHE;
    assert_int_equal(pi_model_plan(m, &cp, &b), PI_OK);
    assert_int_equal(pi_plan_source(b), PI_PLAN_CACHE_WRITTEN);
    pi_plan_free(b);
    remove(idx);
    cp.plan_file = PI_PLAN_FILE_READ;
    assert_int_equal(pi_model_plan(m, &cp, &b), PI_ERR_IO);
    /* cache: an unwritable path is not an error */
    cp.plan_path = "/nonexistent-dir/x.gpuidx";
    cp.plan_file = PI_PLAN_FILE_CACHE;
    assert_int_equal(pi_model_plan(m, &cp, &b), PI_OK);
    assert_int_equal(pi_plan_source(b), PI_PLAN_CACHE_UNWRITTEN);
    pi_plan_free(b);
    cp.plan_file = PI_PLAN_FILE_WRITE;
    assert_int_equal(pi_model_plan(m, &cp, &b), PI_ERR_IO);

    pi_plan_free(a);
    pi_model_close(m);
    pi_model_close(o);
}

/* A profiling run's statistics rank the neurons: each layer's device neurons are at
 * least as active as its host neurons. */
static void test_plan_stats(void **state) {
    (void)state;
    char p[300];
    model_path(p, sizeof p, "hy-stats");
    write_model("llama", PI_TYPE_F16, 1, p);
    pi_model *m = open_model(p);
    char err[512] = "";
    pi_ctx_params cp;
    base_params(&cp, PI_SPARSE_DENSE, err, sizeof err);
    cp.stats = PI_STATS_ON;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    assert_int_equal(pi_ctx_decode(c, TOKS, NTOK), PI_OK);
    const pi_stats *st = pi_ctx_stats(c);
    cp.stats = PI_STATS_OFF;
    cp.device = PI_DEVICE_CPU;
    cp.plan_stats = st;
    cp.device_budget = half_budget(m, &cp);
    pi_plan *plan;
    assert_int_equal(pi_model_plan(m, &cp, &plan), PI_OK);
    const int64_t L = pi_plan_n_layer(plan), F = pi_plan_n_ff(plan);
    uint8_t mask[4096];
    double act[4096];
    int64_t placed = 0;
    for (int64_t l = 0; l < L; l++) {
        placed += pi_plan_layer_neurons(plan, l, mask, sizeof mask);
        assert_int_equal(pi_stats_neurons(st, l, PI_NEURON_ACTIVE, act, (size_t)F), PI_OK);
        double lo_dev = INFINITY, hi_host = -INFINITY;
        for (int64_t r = 0; r < F; r++) {
            if (mask[r])
                lo_dev = fmin(lo_dev, act[r]);
            else
                hi_host = fmax(hi_host, act[r]);
        }
        assert_true(lo_dev >= hi_host || isinf(lo_dev) || isinf(hi_host));
    }
    assert_true(placed > 0 && placed < L * F);
    pi_plan_free(plan);
    /* statistics of another shape are refused */
    char q[300];
    model_path(q, sizeof q, "hy-stats-other");
    struct tm_spec s;
    tm_default(&s);
    s.sparse = 1;
    s.n_ff = 64;
    assert_int_equal(tm_write(&s, q), PI_OK);
    pi_model *o = open_model(q);
    assert_int_equal(pi_model_plan(o, &cp, &plan), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "plan_stats"));
    pi_model_close(o);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

static void test_bad_params(void **state) {
    (void)state;
    char p[300];
    model_path(p, sizeof p, "hy-bad");
    write_model("llama", PI_TYPE_F32, 1, p);
    pi_model *m = open_model(p);
    char err[512] = "";
    pi_ctx_params cp;
    base_params(&cp, PI_SPARSE_AUTO, err, sizeof err);
    pi_ctx *c;
    pi_plan *plan;
    cp.device = 7;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "device"));
    cp.device = PI_DEVICE_NONE;
    assert_int_equal(pi_model_plan(m, &cp, &plan), PI_ERR_INVALID_ARG);
    assert_null(plan);
    cp.device = PI_DEVICE_CPU;
    cp.plan_file = PI_PLAN_FILE_READ;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "plan_path"));
    cp.plan_file = 9;
    cp.plan_path = "x";
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    cp.plan_file = 0;
    if (!g_gpu) { /* a library without a GPU backend says so */
        cp.device = PI_DEVICE_GPU;
        int st = pi_ctx_create(m, &cp, &c);
        if (st != PI_OK) {
            assert_int_equal(st, PI_ERR_UNSUPPORTED);
            assert_true(strlen(err) > 10);
        } else {
            pi_ctx_destroy(c);
        }
    }
    /* the public plan accessors on NULL and out of range */
    assert_int_equal(pi_plan_bytes(NULL, 0), 0);
    assert_int_equal(pi_plan_layer_neurons(NULL, 0, NULL, 0), -1);
    assert_int_equal(pi_plan_source(NULL), -1);
    assert_null(pi_ctx_plan(NULL));
    assert_int_equal(pi_plan_describe(NULL, NULL, 0), PI_ERR_INVALID_ARG);
    cp.device = PI_DEVICE_CPU;
    assert_int_equal(pi_model_plan(m, &cp, &plan), PI_OK);
    assert_int_equal(pi_plan_layer_neurons(plan, -1, NULL, 0), -1);
    assert_int_equal(pi_plan_layer_neurons(plan, pi_plan_n_layer(plan), NULL, 0), -1);
    assert_int_equal(pi_plan_layer_parts(plan, 99999), 0);
    assert_int_equal(pi_plan_bytes(plan, 99), 0);
    const int64_t need = pi_plan_describe(plan, NULL, 0);
    char small[16];
    assert_int_equal(pi_plan_describe(plan, small, sizeof small), need);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_int_equal(pi_plan_save(plan, NULL), PI_ERR_INVALID_ARG);
    pi_plan_free(plan);
    pi_plan_free(NULL);
    pi_model_close(m);
}

/* Every allocation of a hybrid pi_ctx_create (half the neurons on the CPU device)
 * failing in turn: PI_ERR_NOMEM, nothing leaked. */
static void test_alloc_failure(void **state) {
    (void)state;
    char p[300];
    model_path(p, sizeof p, "hy-alloc");
    write_model("llama", PI_TYPE_Q4_0, 1, p);
    struct failalloc fa;
    struct pi_allocator a = failalloc_make(&fa, 0);
    pi_model *m;
    assert_int_equal(pi_model_open_with(p, NULL, &a, &m), PI_OK);
    const long base = fa.live;
    char err[512] = "";
    pi_ctx_params cp;
    base_params(&cp, PI_SPARSE_PREDICTOR, err, sizeof err);
    cp.device = PI_DEVICE_CPU;
    cp.device_budget = half_budget(m, &cp);
    long n;
    for (n = 1; n < 100000; n++) {
        fa.fail_at = fa.count + n;
        pi_ctx *c = (pi_ctx *)1;
        int st = pi_ctx_create(m, &cp, &c);
        fa.fail_at = 0;
        if (st == PI_OK) {
            assert_int_equal(pi_ctx_decode(c, TOKS, 3), PI_OK);
            pi_ctx_destroy(c);
            assert_int_equal(fa.live, base);
            break;
        }
        assert_int_equal(st, PI_ERR_NOMEM);
        assert_null(c);
        assert_int_equal(fa.live, base);
    }
    assert_true(n > 20);
    pi_model_close(m);
    assert_int_equal(fa.live, 0);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--gpu"))
            g_gpu = 1;
        else if (!strcmp(argv[i], "--fixtures") && i + 1 < argc)
            g_fix = argv[++i];
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/pi-hybrid-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_sweep_llama),      cmocka_unit_test(test_sweep_bamboo),
        cmocka_unit_test(test_sweep_dense),      cmocka_unit_test(test_plan_files),
        cmocka_unit_test(test_plan_stats),       cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_alloc_failure),    cmocka_unit_test(test_sweep_families),
        cmocka_unit_test(test_sweep_sparsified),
    };
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_sweep_llama),      cmocka_unit_test(test_sweep_bamboo),
        cmocka_unit_test(test_sweep_dense),      cmocka_unit_test(test_sweep_families),
        cmocka_unit_test(test_sweep_sparsified),
    };
    int rc = g_gpu ? cmocka_run_group_tests(gpu, NULL, NULL)
                   : cmocka_run_group_tests(all, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
