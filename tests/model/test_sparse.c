#define _POSIX_C_SOURCE 200809L
/* The sparse FFN of PowerInfer (PWRI) models on random test models (tests/common):
 *  - oracle mode gives dense mode's logits (prefill and decode, llama and bamboo, float
 *    and quantized weights, float and 8-bit activations);
 *  - a predictor that marks every neuron gives dense mode's logits, one that marks
 *    none removes the FFN;
 *  - logits do not depend on the thread count (bit for bit) and a prompt step equals
 *    one-token steps up to rounding, also when the union path goes dense;
 *  - bad parameters and sparse modes on dense files fail with a clear message;
 *  - activation statistics are consistent and survive a save/load round trip, and bad
 *    statistics files are refused.
 * Logits are compared relative to max |logit|. */
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

#include "model/gguf.h"
#include "powerinfer.h"
#include "runtime/types.h"
#include "testfile.h"
#include "testmodel.h"

enum { NTOK = 9, MAXV = 64 };
static const int32_t TOKS[NTOK] = {1, 7, 3, 22, 9, 31, 5, 18, 2};

static char g_tmp[256];

static const char *tmpdir(void) {
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

static void write_model(const char *arch, uint32_t wtype, int sparse, const char *path) {
    struct tm_spec s;
    tm_default(&s);
    s.arch = arch;
    s.sparse = sparse;
    s.wtype = wtype;
    s.n_ff = 128; /* whole Q4_0/Q8_0 blocks for ffn_down_t's neuron rows too */
    s.pred_rank = 32;
    s.seed = 7;
    assert_int_equal(tm_write(&s, path), PI_OK);
}

struct run {
    int mode, threads, batch, f32, stats, one_by_one;
    float thr;
    int thr_set;
};

/* Logits after every token (one-by-one) or after the prompt of NTOK-1 tokens and one
 * more token (prefill + decode): out[2][n_vocab]. */
static pi_ctx *run_model(pi_model *m, const struct run *r, float out[2][MAXV]) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 32;
    cp.n_threads = (uint32_t)r->threads;
    cp.n_batch = (uint32_t)r->batch;
    cp.f32_activations = (uint32_t)r->f32;
    cp.sparse_mode = (uint32_t)r->mode;
    cp.stats = (uint32_t)r->stats;
    cp.sparse_threshold = r->thr;
    cp.sparse_threshold_set = (uint32_t)r->thr_set;
    char err[256] = "";
    cp.errbuf = err;
    cp.errbuf_cap = sizeof err;
    pi_ctx *c;
    if (pi_ctx_create(m, &cp, &c) != PI_OK)
        fail_msg("pi_ctx_create: %s", err);
    const int64_t nv = pi_model_n_vocab(m);
    if (r->one_by_one) {
        for (int i = 0; i < NTOK - 1; i++)
            assert_int_equal(pi_ctx_decode(c, TOKS + i, 1), PI_OK);
    } else {
        assert_int_equal(pi_ctx_decode(c, TOKS, NTOK - 1), PI_OK);
    }
    memcpy(out[0], pi_ctx_logits(c), sizeof(float) * (size_t)nv);
    assert_int_equal(pi_ctx_decode(c, TOKS + NTOK - 1, 1), PI_OK);
    memcpy(out[1], pi_ctx_logits(c), sizeof(float) * (size_t)nv);
    return c;
}

static void run_and_close(pi_model *m, const struct run *r, float out[2][MAXV]) {
    pi_ctx_destroy(run_model(m, r, out));
}

static double rel_diff(float a[2][MAXV], float b[2][MAXV], int64_t nv) {
    double md = 0, mx = 1e-6;
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < nv; i++) {
            md = fmax(md, fabs((double)a[k][i] - b[k][i]));
            mx = fmax(mx, fabs((double)b[k][i]));
        }
    return md / mx;
}

static void test_oracle_equals_dense(void **state) {
    (void)state;
    static const uint32_t types[] = {PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_Q8_0, PI_TYPE_Q4_0};
    static const char *const archs[] = {"llama", "bamboo"};
    for (size_t a = 0; a < 2; a++)
        for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
            write_model(archs[a], types[t], 1, g_tmp);
            pi_model *m = tf_open_model(g_tmp);
            const int64_t nv = pi_model_n_vocab(m);
            for (int f32 = 0; f32 <= 1; f32++) {
                float d[2][MAXV], o[2][MAXV];
                struct run rd = {PI_SPARSE_DENSE, 2, 16, f32, 0, 0, 0, 0};
                struct run ro = rd;
                ro.mode = PI_SPARSE_ORACLE;
                run_and_close(m, &rd, d);
                run_and_close(m, &ro, o);
                double e = rel_diff(o, d, nv);
                print_message("# %s %s f32_act=%d: oracle vs dense %.2e\n", archs[a],
                              pi_type_name((int)types[t]), f32, e);
                assert_true(e < 1e-5);
            }
            pi_model_close(m);
        }
}

static void test_predictor_extremes(void **state) {
    (void)state;
    write_model("llama", PI_TYPE_Q4_0, 1, g_tmp);
    pi_model *m = tf_open_model(g_tmp);
    const int64_t nv = pi_model_n_vocab(m), F = pi_model_n_ff(m);
    float d[2][MAXV], all[2][MAXV], none[2][MAXV];
    struct run r = {PI_SPARSE_DENSE, 2, 16, 0, 0, 0, 0, 0};
    run_and_close(m, &r, d);
    r.mode = PI_SPARSE_PREDICTOR;
    r.thr = -1e30f;
    r.thr_set = 1;
    r.stats = PI_STATS_ON;
    pi_ctx *c = run_model(m, &r, all);
    assert_true(rel_diff(all, d, nv) < 1e-5);
    pi_layer_stats ls = {.struct_size = sizeof ls};
    assert_int_equal(pi_stats_layer(pi_ctx_stats(c), 1, &ls), PI_OK);
    assert_int_equal(ls.tokens_predicted, NTOK);
    assert_true(ls.predicted == (double)(NTOK * F));
    pi_ctx_destroy(c);
    r.thr = 1e30f;
    c = run_model(m, &r, none);
    assert_int_equal(pi_stats_layer(pi_ctx_stats(c), 0, &ls), PI_OK);
    assert_true(ls.predicted == 0.0 && ls.rows_down == 0 && ls.rows_gate_up == 0);
    assert_true(rel_diff(none, d, nv) > 1e-3); /* the FFN mattered */
    for (int64_t i = 0; i < nv; i++)
        assert_true(isfinite(none[1][i]));
    pi_ctx_destroy(c);
    pi_model_close(m);
}

/* Copy the PWRI file `src` to `dst` with every predictor widened by `extra` hidden
 * units whose fc1 rows and fc2 columns are zero (all-zero bytes are 0.0 in F32 and in
 * Q4_0, whose scale is then 0): relu(0) = 0 adds nothing, so the scores, and the
 * logits, must stay those of `src`. */
static void pad_predictor(const char *src, const char *dst, int64_t extra) {
    size_t size;
    uint8_t *buf = tf_slurp(src, &size);
    struct gguf_file f;
    struct pi_error err;
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &err), PI_OK);
    struct gguf_writer *w;
    assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
    for (uint64_t i = 0; i < f.n_kv; i++) {
        const struct gguf_kv *kv = &f.kv[i];
        if (kv->type == PI_META_STRING) {
            const char *str;
            uint64_t len;
            assert_int_equal(gguf_kv_str(&f, kv, 0, &str, &len), PI_OK);
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%.*s", (int)len, str);
            assert_int_equal(gguf_writer_add_string(w, kv->key, tmp), PI_OK);
        } else if (kv->type != PI_META_ARRAY) { /* the tokens are not needed */
            assert_int_equal(gguf_writer_add_scalar(w, kv->key, kv->type, f.base + kv->off),
                             PI_OK);
        }
    }
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const struct gguf_tensor *t = &f.tensors[i];
        const int fc1 = strstr(t->name, ".fc1.") != NULL, fc2 = strstr(t->name, ".fc2.") != NULL;
        if (!fc1 && !fc2) {
            assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne,
                                                    t->data),
                             PI_OK);
            continue;
        }
        /* fc1 {E, R}: zero rows appended; fc2 {R, F}: each row gets zero values */
        int64_t ne[2] = {t->ne[0] + (fc2 ? extra : 0), t->ne[1] + (fc1 ? extra : 0)};
        const size_t old_row = (size_t)pi_type_row_bytes(t->type, t->ne[0]);
        const size_t new_row = (size_t)pi_type_row_bytes(t->type, ne[0]);
        assert_true(old_row > 0 && new_row > 0);
        uint8_t *data = calloc((size_t)ne[1], new_row);
        assert_non_null(data);
        for (int64_t r = 0; r < t->ne[1]; r++)
            memcpy(data + (size_t)r * new_row, t->data + (size_t)r * old_row, old_row);
        assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, 2, ne, data), PI_OK);
        free(data);
    }
    assert_int_equal(gguf_writer_write_file(w, dst, GGUF_MAGIC_PWRI, NULL), PI_OK);
    gguf_writer_destroy(w);
    gguf_close(&f);
    free(buf);
}

/* The logits of a prompt of n tokens, decoded in one step; device: PI_DEVICE_CPU puts
 * everything on a second CPU backend acting as the device (the hybrid executor). */
static void prompt_logits(pi_model *m, int f32, int device, const int32_t *toks, size_t n,
                          float *out) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.device = (uint32_t)device;
    cp.n_ctx = 64;
    cp.n_batch = 64;
    cp.n_threads = 2;
    cp.f32_activations = (uint32_t)f32;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    if (pi_ctx_decode(c, toks, n) != PI_OK)
        fail_msg("decode: %s", pi_ctx_errmsg(c));
    memcpy(out, pi_ctx_logits(c), sizeof(float) * (size_t)pi_model_n_vocab(m));
    pi_ctx_destroy(c);
}

/* A predictor rank far above every other width of the model (issue 12: the CPU
 * backend's scratch was sized without it, and a 60-token prompt made predict() write
 * past the quantized activations, and with f32_activations past the per-thread float
 * row: "double free or corruption"). Rank 32 + 4064 (n_embd 64, n_ff 128) in F32 and
 * Q4_0 runs and gives the logits of the same predictor unpadded, also with every part
 * on a device (whose backend gets the same widths). */
static void test_wide_predictor_rank(void **state) {
    (void)state;
    enum { NP = 60, PAD = 4064 };
    char wide[300];
    snprintf(wide, sizeof wide, "%s.wide", g_tmp);
    int32_t toks[NP];
    for (int i = 0; i < NP; i++)
        toks[i] = (int32_t)((i * 7 + 3) % 40);
    static const uint32_t types[] = {PI_TYPE_F32, PI_TYPE_Q4_0};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        write_model("llama", types[t], 1, g_tmp);
        pad_predictor(g_tmp, wide, PAD);
        pi_model *m = tf_open_model(g_tmp), *mw = tf_open_model(wide);
        assert_int_equal(pi_model_predictor_rank(mw, 0), 32 + PAD);
        assert_int_equal(pi_model_predictor_rank(mw, 1), 33 + PAD);
        const int64_t nv = pi_model_n_vocab(m);
        for (int f32 = 0; f32 <= 1; f32++) {
            float a[2][MAXV] = {{0}}, b[2][MAXV] = {{0}};
            prompt_logits(m, f32, PI_DEVICE_NONE, toks, NP, a[0]);
            prompt_logits(mw, f32, PI_DEVICE_NONE, toks, NP, b[0]);
            prompt_logits(mw, f32, PI_DEVICE_CPU, toks, NP, b[1]);
            memcpy(a[1], a[0], sizeof a[0]);
            for (int64_t i = 0; i < nv; i++)
                assert_true(isfinite(b[0][i]) && isfinite(b[1][i]));
            const double e = rel_diff(b, a, nv);
            print_message("# %s f32_act=%d: rank %d vs %d (host, and all on a device): %.2e\n",
                          pi_type_name((int)types[t]), f32, 32 + PAD, 32, e);
            assert_true(e < 1e-5);
        }
        pi_model_close(m);
        pi_model_close(mw);
    }
    remove(wide);
}

static void test_threads_and_batching(void **state) {
    (void)state;
    static const uint32_t types[] = {PI_TYPE_F16, PI_TYPE_Q4_0};
    for (size_t t = 0; t < 2; t++) {
        write_model("bamboo", types[t], 1, g_tmp);
        pi_model *m = tf_open_model(g_tmp);
        const int64_t nv = pi_model_n_vocab(m);
        float ref[2][MAXV], x[2][MAXV];
        struct run r = {PI_SPARSE_PREDICTOR, 1, 16, 0, 0, 0, 0, 0};
        run_and_close(m, &r, ref);
        for (int th = 2; th <= 3; th++) {
            r.threads = th;
            run_and_close(m, &r, x);
            for (int k = 0; k < 2; k++)
                assert_memory_equal(x[k], ref[k], sizeof(float) * (size_t)nv);
        }
        /* one token per step (row-by-row path) vs prompt steps of 3 and 16 tokens (the
         * union of 8 tokens' random predictions exceeds 60%: the dense-masked path) */
        r.threads = 2;
        r.one_by_one = 1;
        run_and_close(m, &r, x);
        assert_true(rel_diff(x, ref, nv) < 1e-5);
        r.one_by_one = 0;
        r.batch = 3;
        run_and_close(m, &r, x);
        assert_true(rel_diff(x, ref, nv) < 1e-5);
        pi_model_close(m);
    }
}

static void test_bad_params(void **state) {
    (void)state;
    write_model("llama", PI_TYPE_F32, 0, g_tmp); /* dense file */
    pi_model *m = tf_open_model(g_tmp);
    pi_ctx *c = (pi_ctx *)1;
    pi_ctx_params cp;
    char err[256];
    for (int mode = PI_SPARSE_PREDICTOR; mode <= PI_SPARSE_ORACLE; mode++) {
        pi_ctx_default_params(&cp);
        cp.sparse_mode = (uint32_t)mode;
        cp.errbuf = err;
        cp.errbuf_cap = sizeof err;
        err[0] = '\0';
        assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_UNSUPPORTED);
        assert_null(c);
        assert_non_null(strstr(err, "PWRI"));
    }
    pi_ctx_default_params(&cp);
    cp.sparse_mode = 9;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    pi_ctx_default_params(&cp);
    cp.stats = 3;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    pi_ctx_default_params(&cp);
    cp.sparse_threshold_set = 1;
    cp.sparse_threshold = NAN;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    /* an old caller: the first published pi_ctx_params (40 bytes) */
    unsigned char old[40];
    pi_ctx_default_params(&cp);
    cp.n_ctx = 16;
    memcpy(old, &cp, sizeof old);
    const uint32_t old_size = 40;
    memcpy(old, &old_size, 4);
    assert_int_equal(pi_ctx_create(m, (const pi_ctx_params *)(void *)old, &c), PI_OK);
    assert_int_equal(pi_ctx_n_ctx(c), 16);
    assert_int_equal(pi_ctx_sparse_mode(c), PI_SPARSE_DENSE);
    pi_ctx_destroy(c);
    /* dense files run dense, AUTO included, and have no statistics unless asked */
    pi_ctx_default_params(&cp);
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    assert_int_equal(pi_ctx_sparse_mode(c), PI_SPARSE_DENSE);
    assert_null(pi_ctx_stats(c));
    assert_int_equal(pi_ctx_stats_reset(c), PI_ERR_INVALID_ARG);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

/* A statistics file claiming n_layer x n_ff whose 3 * n_layer tensors are F64 {1}. */
static void write_stats_shape(const char *path, uint64_t n_layer, uint64_t n_ff) {
    struct gguf_writer *w;
    assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
    assert_int_equal(gguf_writer_add_string(w, "general.architecture", "activation_stats"),
                     PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "activation_stats.block_count", PI_META_U64,
                                            &n_layer), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "activation_stats.feed_forward_length",
                                            PI_META_U64, &n_ff), PI_OK);
    static const char *const kind[3] = {"predicted", "active", "both"};
    const double one = 1.0;
    const int64_t ne[1] = {1};
    for (uint64_t l = 0; l < n_layer; l++)
        for (int k = 0; k < 3; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%llu.%s", (unsigned long long)l, kind[k]);
            assert_int_equal(gguf_writer_add_tensor(w, name, PI_TYPE_F64, 1, ne, &one), PI_OK);
        }
    struct pi_error err = {0};
    assert_int_equal(gguf_writer_write_file(w, path, GGUF_MAGIC_GGUF, &err), PI_OK);
    gguf_writer_destroy(w);
}

static void test_stats(void **state) {
    (void)state;
    write_model("llama", PI_TYPE_Q8_0, 1, g_tmp);
    pi_model *m = tf_open_model(g_tmp);
    const int64_t nl = pi_model_n_layer(m), F = pi_model_n_ff(m);
    float x[2][MAXV];
    /* dense and oracle see the same true activations */
    struct run r = {PI_SPARSE_DENSE, 2, 16, 0, PI_STATS_ON, 0, 0, 0};
    pi_ctx *cd = run_model(m, &r, x);
    r.mode = PI_SPARSE_ORACLE;
    pi_ctx *co = run_model(m, &r, x);
    r.mode = PI_SPARSE_PREDICTOR;
    r.stats = PI_STATS_DIAGNOSTIC;
    pi_ctx *cp = run_model(m, &r, x);
    double *a = malloc(sizeof(double) * (size_t)F), *b = malloc(sizeof(double) * (size_t)F);
    double *p = malloc(sizeof(double) * (size_t)F), *bo = malloc(sizeof(double) * (size_t)F);
    assert_true(a && b && p && bo);
    const pi_stats *sd = pi_ctx_stats(cd), *so = pi_ctx_stats(co), *sp = pi_ctx_stats(cp);
    assert_int_equal(pi_stats_n_layer(sp), nl);
    assert_int_equal(pi_stats_n_ff(sp), F);
    for (int64_t l = 0; l < nl; l++) {
        assert_int_equal(pi_stats_neurons(sd, l, PI_NEURON_ACTIVE, a, (size_t)F), PI_OK);
        assert_int_equal(pi_stats_neurons(so, l, PI_NEURON_ACTIVE, b, (size_t)F), PI_OK);
        assert_memory_equal(a, b, sizeof(double) * (size_t)F);
        /* the diagnostic run of the predictor mode sees the same truth too in layer 0
         * (later layers see the residual stream of the predicted FFN) */
        assert_int_equal(pi_stats_neurons(sp, l, PI_NEURON_ACTIVE, b, (size_t)F), PI_OK);
        if (l == 0)
            assert_memory_equal(a, b, sizeof(double) * (size_t)F);
        assert_int_equal(pi_stats_neurons(sp, l, PI_NEURON_PREDICTED, p, (size_t)F), PI_OK);
        assert_int_equal(pi_stats_neurons(sp, l, PI_NEURON_BOTH, bo, (size_t)F), PI_OK);
        double sum_p = 0, sum_b = 0;
        for (int64_t i = 0; i < F; i++) {
            assert_true(bo[i] <= p[i] && bo[i] <= b[i] && p[i] <= NTOK);
            sum_p += p[i];
            sum_b += bo[i];
        }
        pi_layer_stats ls = {.struct_size = sizeof ls};
        assert_int_equal(pi_stats_layer(sp, l, &ls), PI_OK);
        assert_true(ls.predicted == sum_p && ls.both == sum_b);
        assert_int_equal(ls.tokens_predicted, NTOK);
        assert_int_equal(ls.tokens_observed, NTOK);
        assert_true(ls.bytes_predictor > 0 && ls.bytes_ffn > 0);
        assert_true(sum_p > 0 && sum_p < NTOK * F); /* a random predictor: some, not all */
    }
    /* an old caller's smaller pi_layer_stats is written only as far as it reaches */
    struct {
        pi_layer_stats s;
        uint32_t canary;
    } small;
    memset(&small, 0x5a, sizeof small);
    small.s.struct_size = (uint32_t)offsetof(pi_layer_stats, rows_gate_up);
    assert_int_equal(pi_stats_layer(sp, 0, &small.s), PI_OK);
    assert_int_equal(small.s.tokens_predicted, NTOK);
    assert_int_equal(small.s.rows_gate_up, 0x5a5a5a5a5a5a5a5aull);
    assert_int_equal(pi_stats_layer(sp, nl, &small.s), PI_ERR_RANGE);
    assert_int_equal(pi_stats_neurons(sp, 0, 3, p, (size_t)F), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_stats_neurons(sp, 0, 0, p, (size_t)F - 1), PI_ERR_INVALID_ARG);

    /* save / load */
    char path[300], err[256];
    snprintf(path, sizeof path, "%s.stats.gguf", g_tmp);
    assert_int_equal(pi_stats_save(sp, path, err, sizeof err), PI_OK);
    pi_stats *ld;
    assert_int_equal(pi_stats_load(path, &ld, err, sizeof err), PI_OK);
    for (int64_t l = 0; l < nl; l++)
        for (int k = 0; k < 3; k++) {
            assert_int_equal(pi_stats_neurons(sp, l, k, a, (size_t)F), PI_OK);
            assert_int_equal(pi_stats_neurons(ld, l, k, b, (size_t)F), PI_OK);
            assert_memory_equal(a, b, sizeof(double) * (size_t)F);
        }
    pi_layer_stats l0 = {.struct_size = sizeof l0}, l1 = {.struct_size = sizeof l1};
    pi_stats_layer(sp, 1, &l0);
    pi_stats_layer(ld, 1, &l1);
    assert_true(l0.predicted == l1.predicted && l0.active == l1.active && l0.both == l1.both);
    assert_int_equal(l1.tokens_observed, NTOK);
    pi_stats_free(ld);
    /* a model file, a missing file, a truncated file */
    assert_int_equal(pi_stats_load(g_tmp, &ld, err, sizeof err), PI_ERR_FORMAT);
    assert_null(ld);
    assert_non_null(strstr(err, "activation_stats"));
    assert_int_equal(pi_stats_load("/nonexistent/x.gguf", &ld, err, sizeof err), PI_ERR_IO);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fclose(fp);
    assert_int_equal(truncate(path, size - 9), 0);
    assert_int_equal(pi_stats_load(path, &ld, err, sizeof err), PI_ERR_FORMAT);
    /* a shape whose neuron count wraps around 2^64 (4 x 2^62) is out of range; it used
     * to pass the shape check and overflow in pi_stats_create */
    write_stats_shape(path, 4, 1ull << 62);
    err[0] = '\0';
    assert_int_equal(pi_stats_load(path, &ld, err, sizeof err), PI_ERR_FORMAT);
    assert_null(ld);
    assert_non_null(strstr(err, "out of range"));
    write_stats_shape(path, 4, 1); /* the same file with a sane shape loads */
    assert_int_equal(pi_stats_load(path, &ld, err, sizeof err), PI_OK);
    assert_int_equal(pi_stats_n_layer(ld), 4);
    assert_int_equal(pi_stats_n_ff(ld), 1);
    pi_stats_free(ld);
    /* saving to an unwritable place fails and leaves nothing */
    assert_int_equal(pi_stats_save(sp, "/nonexistent/dir/s.gguf", err, sizeof err), PI_ERR_IO);
    assert_int_equal(pi_stats_save(NULL, path, err, sizeof err), PI_ERR_INVALID_ARG);
    remove(path);
    /* reset */
    assert_int_equal(pi_ctx_stats_reset(cp), PI_OK);
    pi_layer_stats z = {.struct_size = sizeof z};
    pi_stats_layer(sp, 0, &z);
    assert_true(z.predicted == 0 && z.tokens_predicted == 0 && z.ns_ffn == 0);
    free(a);
    free(b);
    free(p);
    free(bo);
    pi_ctx_destroy(cd);
    pi_ctx_destroy(co);
    pi_ctx_destroy(cp);
    pi_model_close(m);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "%s/pi_sparse_%d.gguf", tmpdir(), (int)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_equals_dense), cmocka_unit_test(test_predictor_extremes),
        cmocka_unit_test(test_wide_predictor_rank),
        cmocka_unit_test(test_threads_and_batching), cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_stats),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    remove(g_tmp);
    return rc;
}
