/* libFuzzer harness: the two plan inputs a user hands the library as files, PowerInfer's
 * GPU index (`<model>.generated.gpuidx`, lib/plan/gpuidx.c) and the activation
 * statistics side file (pi_stats_load, lib/api_stats.c), each read from a file holding
 * the input less its first byte, which selects what is done with it:
 *
 *   bit 0     0: a GPU index, 1: statistics
 *   bit 1     the model: 0 a small PowerInfer (sparse) llama, 1 a dense llama (its FFN
 *             moves to the device in whole layers); both 2 layers x 96 neurons
 *   bit 2     GPU index: plan_file PI_PLAN_FILE_READ (0) or _CACHE (1)
 *   bits 3-4  the device budget: everything, about half the neurons, the dense parts
 *             only (no room for neurons), 0
 *   bit 5     sparse model: PI_SPARSE_DENSE (0) or PI_SPARSE_PREDICTOR (1)
 *   bit 6     GPU index: also pi_ctx_create when the file is refused
 *   bit 7     GPU index: pi_gpuidx_read alone, for the shape of tests/fixtures/gpuidx
 *             (3 x 40), so that those files serve as seeds
 *
 * A GPU index goes through pi_gpuidx_read, then pi_model_plan (the dry run) and, when the
 * plan takes it, pi_ctx_create with a second CPU backend as the device (PI_DEVICE_CPU,
 * as tests/model/test_hybrid.c) and one decode. Statistics go through pi_stats_load and
 * every pi_stats_* query, then, when they have the model's shape, serve as plan_stats
 * for a plan and a context.
 *
 * Checked (abort() on a violation, so that libFuzzer reports the input):
 *  - a refusal is a negative status with a message, leaves no object (*out NULL, the
 *    index struct zeroed) and leaks nothing (ASan's leak check);
 *  - an index that is read has the asked shape and only 0/1 neurons, and writes back
 *    (pi_gpuidx_write) to a file that reads the same; pi_model_plan with READ fails
 *    exactly when the reader does (same status), or with PI_ERR_RANGE (another model,
 *    too big for the budget, a dense model's layer split); a plan taken from the file
 *    places exactly its neurons, within the budget; CACHE never fails, and what it
 *    writes reads back and is then reused;
 *  - loaded statistics have a shape the file can hold, counts finite and >= 0, layer
 *    totals equal to the sums of the counts, out-of-range queries refused, and they
 *    save and load back bit for bit; a plan ranked by them puts each layer's hottest
 *    neurons on the device; statistics of another shape are refused;
 *  - a context made from an accepted plan has the dry run's plan and decodes a token
 *    to finite logits that match the CPU-only context's (to rounding; PREDICTOR mode
 *    only finiteness, as rounding may flip a neuron at the threshold).
 *
 * Seeds: with $PI_FUZZ_PLAN_SEEDS set, LLVMFuzzerInitialize writes valid inputs there
 * (indexes pi_model_plan writes for both models and several budgets, with and without
 * statistics; statistics of profiling runs in each stats mode) and copies the GPU index
 * fixtures ($PI_FUZZ_PLAN_FIXTURES, default tests/fixtures/gpuidx) behind a selector
 * byte of 0x80. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/gpuidx.h"
#include "powerinfer.h"
#include "testmodel.h"

enum { NL = 2, NF = 96, FIX_NL = 3, FIX_FF = 40, MAXV = 64, NTOK = 2, NBUDGET = 4 };
static const int32_t TOKS[NTOK] = {1, 7};

struct fmodel {
    pi_model *m;
    int64_t nv;
    uint64_t budget[NBUDGET]; /* PI_DEVICE_BUDGET_AUTO, half, dense parts only, 0 */
    float ref[2][MAXV];       /* CPU-only logits after TOKS: [0] DENSE, [1] PREDICTOR */
};

static struct fmodel g_models[2]; /* [0] sparse, [1] dense */
static char g_dir[64], g_in[96], g_rt[96];

/* What the inputs reached, printed at exit when $PI_FUZZ_PLAN_REPORT is set. */
static struct {
    long index_read, index_planned, cache_reused, cache_written, stats_loaded, stats_planned,
        contexts;
    double worst[2]; /* largest logit difference seen, of max |logit|: DENSE, PREDICTOR */
} g_seen;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz_plan: %s:%d: check failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                               \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

#define CHECK_MSG(cond, ...)                                                              \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz_plan: %s:%d: check failed: %s: ", __FILE__, __LINE__,   \
                    #cond);                                                               \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static void write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp);
    CHECK(n == 0 || fwrite(p, 1, n, fp) == n);
    CHECK(fclose(fp) == 0);
}

static void cleanup(void) {
    if (getenv("PI_FUZZ_PLAN_REPORT"))
        fprintf(stderr,
                "fuzz_plan: indexes read %ld, planned from %ld; cache reused %ld, written "
                "%ld; statistics loaded %ld, planned with %ld; contexts %ld; worst logit "
                "difference %.3g (dense), %.3g (predictor)\n",
                g_seen.index_read, g_seen.index_planned, g_seen.cache_reused,
                g_seen.cache_written, g_seen.stats_loaded, g_seen.stats_planned,
                g_seen.contexts, g_seen.worst[0], g_seen.worst[1]);
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[256];
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
                remove(p);
            }
        closedir(d);
    }
    rmdir(g_dir);
}

static int mode_of(int model, uint8_t sel) {
    return model == 0 && (sel & 0x20) ? PI_SPARSE_PREDICTOR : PI_SPARSE_DENSE;
}

static void base_params(pi_ctx_params *cp, int model, uint8_t sel, char *err, size_t cap) {
    pi_ctx_default_params(cp);
    cp->n_ctx = 8;
    cp->n_batch = 4;
    cp->n_threads = 1;
    cp->sparse_mode = (uint32_t)mode_of(model, sel);
    cp->errbuf = err;
    cp->errbuf_cap = cap;
    cp->device = PI_DEVICE_CPU;
    cp->device_budget = g_models[model].budget[(sel >> 3) & 3];
    err[0] = '\0';
}

/* Logits of TOKS in a context made with cp. */
static void decode(const struct fmodel *fm, const pi_ctx_params *cp, float out[MAXV]) {
    pi_ctx *c;
    CHECK_MSG(pi_ctx_create(fm->m, cp, &c) == PI_OK, "pi_ctx_create: %s", cp->errbuf);
    CHECK_MSG(pi_ctx_decode(c, TOKS, NTOK) == PI_OK, "decode: %s", pi_ctx_errmsg(c));
    const float *lg = pi_ctx_logits(c);
    CHECK(lg);
    memcpy(out, lg, (size_t)fm->nv * sizeof *out);
    pi_ctx_destroy(c);
}

/* The plan in the describe text, for comparing a context's plan with a dry run's. */
static void describe(const pi_plan *p, char *buf, size_t cap) {
    const int64_t n = pi_plan_describe(p, buf, cap);
    CHECK(n > 0 && (size_t)n < cap);
}

/* Make a context with cp (whose dry run gave `dry`), check it runs that plan, decode a
 * token and compare with the CPU-only logits. */
static void run_ctx(int model, uint8_t sel, const pi_ctx_params *cp, const pi_plan *dry) {
    const struct fmodel *fm = &g_models[model];
    pi_ctx *c;
    CHECK_MSG(pi_ctx_create(fm->m, cp, &c) == PI_OK, "pi_ctx_create after a dry run that "
              "planned: %s", cp->errbuf);
    const pi_plan *p = pi_ctx_plan(c);
    CHECK(p);
    static char a[8192], b[8192];
    describe(p, a, sizeof a);
    describe(dry, b, sizeof b);
    CHECK_MSG(strcmp(a, b) == 0, "the context's plan is not the dry run's:\n%s\n%s", a, b);
    CHECK_MSG(pi_ctx_decode(c, TOKS, NTOK) == PI_OK, "decode: %s", pi_ctx_errmsg(c));
    const float *lg = pi_ctx_logits(c);
    CHECK(lg);
    const int pred = mode_of(model, sel) == PI_SPARSE_PREDICTOR;
    const float *ref = fm->ref[pred];
    double mx = 1e-6, d = 0.0;
    for (int64_t i = 0; i < fm->nv; i++) {
        CHECK_MSG(isfinite(lg[i]), "logit %lld is %g", (long long)i, lg[i]);
        mx = fmax(mx, fabs(ref[i]));
        d = fmax(d, fabs((double)lg[i] - ref[i]));
    }
    g_seen.contexts++;
    g_seen.worst[pred] = fmax(g_seen.worst[pred], d / mx);
    CHECK_MSG(pred || d <= 1e-4 * mx, "logits differ from the CPU-only run's by %g of max "
              "|logit|", d / mx);
    pi_ctx_destroy(c);
}

/* ---- GPU index ------------------------------------------------------------------- */

static int gpuidx_zeroed(const struct pi_gpuidx *g) {
    static const struct pi_gpuidx zero;
    return memcmp(g, &zero, sizeof zero) == 0;
}

/* pi_gpuidx_read of g_in for (nl, nf) with the checks of an accepted or refused file;
 * returns its status (g filled on PI_OK). */
static int read_index(int64_t nl, int64_t nf, struct pi_gpuidx *g) {
    struct pi_error err = {0};
    memset(g, 0xa5, sizeof *g);
    const int st = pi_gpuidx_read(g_in, nl, nf, NULL, g, &err);
    if (st < 0) {
        CHECK(err.msg[0] != '\0');
        CHECK(gpuidx_zeroed(g));
        CHECK(st == PI_ERR_FORMAT || st == PI_ERR_IO || st == PI_ERR_UNSUPPORTED ||
              st == PI_ERR_NOMEM);
        return st;
    }
    CHECK(st == PI_OK);
    g_seen.index_read++;
    CHECK(g->n_layer == nl && g->n_ff == nf && g->neuron);
    CHECK(g->has_key == 0 || g->has_key == 1);
    if (!g->has_key)
        CHECK(g->model_id == 0 && g->stats_id == 0 && g->budget == 0);
    for (int64_t i = 0; i < nl * nf; i++)
        CHECK(g->neuron[i] <= 1);
    /* it writes back to a file that reads the same (the plan keys are always written) */
    struct pi_error werr = {0};
    CHECK_MSG(pi_gpuidx_write(g_rt, g, &werr) == PI_OK, "%s", werr.msg);
    struct pi_gpuidx h;
    struct pi_error rerr = {0};
    CHECK_MSG(pi_gpuidx_read(g_rt, nl, nf, NULL, &h, &rerr) == PI_OK, "%s", rerr.msg);
    CHECK(h.has_key == 1 && h.capacity == g->capacity && h.model_id == g->model_id &&
          h.stats_id == g->stats_id && h.budget == g->budget);
    CHECK(memcmp(h.neuron, g->neuron, (size_t)(nl * nf)) == 0);
    pi_gpuidx_free(&h);
    /* a model with one neuron more per layer refuses it */
    struct pi_gpuidx o;
    struct pi_error oerr = {0};
    CHECK(pi_gpuidx_read(g_in, nl, nf + 1, NULL, &o, &oerr) == PI_ERR_FORMAT);
    CHECK(oerr.msg[0] != '\0' && gpuidx_zeroed(&o));
    return st;
}

/* The plan's neurons are exactly the index's, within the budget. */
static void check_plan_is_index(const pi_plan *p, const struct pi_gpuidx *g, int model) {
    CHECK(pi_plan_n_layer(p) == NL && pi_plan_n_ff(p) == NF);
    CHECK(pi_plan_bytes(p, PI_PLAN_N_PARTS) <= pi_plan_budget(p));
    uint8_t mask[NF];
    for (int64_t l = 0; l < NL; l++) {
        const int64_t n = pi_plan_layer_neurons(p, l, mask, sizeof mask);
        int64_t k = 0;
        for (int64_t r = 0; r < NF; r++)
            k += mask[r];
        CHECK(n == k);
        CHECK(memcmp(mask, g->neuron + l * NF, NF) == 0);
        if (model == 1) /* a dense file's FFN moves in whole layers */
            CHECK(n == 0 || n == NF);
    }
}

static void fuzz_index(uint8_t sel) {
    struct pi_gpuidx g;
    if (sel & 0x80) { /* the fixtures' shape: the reader alone */
        if (read_index(FIX_NL, FIX_FF, &g) == PI_OK)
            pi_gpuidx_free(&g);
        return;
    }
    const int model = (sel >> 1) & 1;
    const struct fmodel *fm = &g_models[model];
    const int rst = read_index(NL, NF, &g);
    char err[512];
    pi_ctx_params cp;
    base_params(&cp, model, sel, err, sizeof err);
    cp.plan_path = g_in;
    pi_plan *p = NULL;
    if (!(sel & 4)) { /* READ: refused exactly when the reader refuses, or out of range */
        cp.plan_file = PI_PLAN_FILE_READ;
        const int st = pi_model_plan(fm->m, &cp, &p);
        if (st < 0) {
            CHECK(!p && err[0] != '\0');
            CHECK_MSG(rst < 0 ? st == rst : st == PI_ERR_RANGE,
                      "reader %d, plan %d: %s", rst, st, err);
            if (sel & 0x40) { /* a context refuses it the same way */
                pi_ctx *c;
                err[0] = '\0';
                CHECK(pi_ctx_create(fm->m, &cp, &c) == st);
                CHECK(!c && err[0] != '\0');
            }
        } else {
            CHECK_MSG(st == PI_OK && rst == PI_OK, "reader %d, plan %d", rst, st);
            CHECK(pi_plan_source(p) == PI_PLAN_FROM_FILE);
            g_seen.index_planned++;
            check_plan_is_index(p, &g, model);
            run_ctx(model, sel, &cp, p);
        }
    } else { /* CACHE: never fails; reuses the file only if it is ours and still fits */
        cp.plan_file = PI_PLAN_FILE_CACHE;
        CHECK_MSG(pi_model_plan(fm->m, &cp, &p) == PI_OK, "%s", err);
        const int src = pi_plan_source(p);
        if (src == PI_PLAN_FROM_FILE) {
            CHECK(rst == PI_OK && g.has_key);
            g_seen.cache_reused++;
            check_plan_is_index(p, &g, model);
            run_ctx(model, sel, &cp, p);
        } else { /* rewritten: it reads back as this plan, and is then reused */
            CHECK_MSG(src == PI_PLAN_CACHE_WRITTEN, "source %d", src);
            g_seen.cache_written++;
            struct pi_gpuidx w;
            CHECK(read_index(NL, NF, &w) == PI_OK && w.has_key);
            check_plan_is_index(p, &w, model);
            pi_gpuidx_free(&w);
            pi_plan *q;
            CHECK(pi_model_plan(fm->m, &cp, &q) == PI_OK);
            CHECK(pi_plan_source(q) == PI_PLAN_FROM_FILE);
            static char a[8192], b[8192];
            describe(p, a, sizeof a);
            describe(q, b, sizeof b);
            const char *nl_a = strchr(a, '\n'), *nl_b = strchr(b, '\n');
            CHECK(nl_a && nl_b && strcmp(nl_a, nl_b) == 0); /* all but the source line */
            pi_plan_free(q);
        }
    }
    pi_plan_free(p);
    if (rst == PI_OK)
        pi_gpuidx_free(&g);
}

/* ---- statistics ------------------------------------------------------------------ */

static void fuzz_stats(uint8_t sel, size_t file_size) {
    char err[512] = "";
    static char not_set;
    pi_stats *s = (pi_stats *)(void *)&not_set; /* pi_stats_load must overwrite it */
    const int st = pi_stats_load(g_in, &s, err, sizeof err);
    if (st < 0) {
        CHECK(!s && err[0] != '\0');
        CHECK(st == PI_ERR_FORMAT || st == PI_ERR_IO || st == PI_ERR_NOMEM ||
              st == PI_ERR_UNSUPPORTED);
        return;
    }
    CHECK(st == PI_OK && s);
    g_seen.stats_loaded++;
    const int64_t nl = pi_stats_n_layer(s), nf = pi_stats_n_ff(s);
    /* every count is an F64 in the file */
    CHECK_MSG(nl >= 1 && nf >= 1 && (uint64_t)nf <= file_size / 24 &&
              (uint64_t)nl <= file_size / 24 / (uint64_t)nf,
              "%lld layers x %lld neurons from a %zu-byte file", (long long)nl, (long long)nf,
              file_size);
    double *row = malloc((size_t)nf * sizeof *row), *back = malloc((size_t)nf * sizeof *back);
    CHECK(row && back);
    /* round trip */
    CHECK_MSG(pi_stats_save(s, g_rt, err, sizeof err) == PI_OK, "%s", err);
    pi_stats *t;
    CHECK_MSG(pi_stats_load(g_rt, &t, err, sizeof err) == PI_OK, "%s", err);
    CHECK(pi_stats_n_layer(t) == nl && pi_stats_n_ff(t) == nf);
    uint64_t tp = 0, to = 0;
    for (int64_t l = 0; l < nl; l++) {
        pi_layer_stats ls = {.struct_size = sizeof ls}, lt = {.struct_size = sizeof lt};
        CHECK(pi_stats_layer(s, l, &ls) == PI_OK && pi_stats_layer(t, l, &lt) == PI_OK);
        CHECK(ls.struct_size == sizeof ls);
        CHECK(memcmp(&ls, &lt, sizeof ls) == 0);
        if (l == 0) {
            tp = ls.tokens_predicted;
            to = ls.tokens_observed;
        }
        CHECK(ls.tokens_predicted == tp && ls.tokens_observed == to);
        CHECK(ls.rows_gate_up == 0 && ls.ns_ffn == 0);
        const double tot[3] = {ls.predicted, ls.active, ls.both};
        for (int k = PI_NEURON_PREDICTED; k <= PI_NEURON_BOTH; k++) {
            CHECK(pi_stats_neurons(s, l, k, row, (size_t)nf) == PI_OK);
            CHECK(pi_stats_neurons(t, l, k, back, (size_t)nf) == PI_OK);
            CHECK(memcmp(row, back, (size_t)nf * sizeof *row) == 0);
            double sum = 0.0;
            for (int64_t r = 0; r < nf; r++) {
                CHECK_MSG(row[r] >= 0.0 && isfinite(row[r]), "layer %lld kind %d neuron %lld: "
                          "%g", (long long)l, k, (long long)r, row[r]);
                sum += row[r];
            }
            CHECK(memcmp(&sum, &tot[k], sizeof sum) == 0);
        }
        CHECK(pi_stats_neurons(s, l, PI_NEURON_BOTH + 1, row, (size_t)nf) ==
              PI_ERR_INVALID_ARG);
        CHECK(pi_stats_neurons(s, l, PI_NEURON_ACTIVE, row, (size_t)nf - 1) ==
              PI_ERR_INVALID_ARG);
    }
    pi_layer_stats ls = {.struct_size = sizeof ls};
    CHECK(pi_stats_layer(s, nl, &ls) == PI_ERR_RANGE && pi_stats_layer(s, -1, &ls) == PI_ERR_RANGE);
    CHECK(pi_stats_neurons(s, nl, 0, row, (size_t)nf) == PI_ERR_RANGE);
    pi_stats_free(t);

    /* as plan_stats */
    const int model = (sel >> 1) & 1;
    const struct fmodel *fm = &g_models[model];
    pi_ctx_params cp;
    base_params(&cp, model, sel, err, sizeof err);
    cp.plan_stats = s;
    pi_plan *p;
    const int pst = pi_model_plan(fm->m, &cp, &p);
    if (nl != NL || nf != NF) {
        CHECK(pst == PI_ERR_INVALID_ARG && !p && strstr(err, "plan_stats"));
    } else {
        CHECK_MSG(pst == PI_OK, "%s", err);
        g_seen.stats_planned++;
        CHECK(pi_plan_bytes(p, PI_PLAN_N_PARTS) <= pi_plan_budget(p));
        /* each layer's device neurons are at least as hot as its host neurons */
        uint8_t mask[NF];
        for (int64_t l = 0; l < NL; l++) {
            pi_layer_stats lv = {.struct_size = sizeof lv};
            CHECK(pi_stats_layer(s, l, &lv) == PI_OK);
            const int kind = lv.tokens_observed ? PI_NEURON_ACTIVE : PI_NEURON_PREDICTED;
            CHECK(pi_stats_neurons(s, l, kind, row, (size_t)nf) == PI_OK);
            const int64_t n = pi_plan_layer_neurons(p, l, mask, sizeof mask);
            double lo_dev = INFINITY, hi_host = -INFINITY;
            int64_t k = 0;
            for (int64_t r = 0; r < NF; r++) {
                k += mask[r];
                if (mask[r])
                    lo_dev = fmin(lo_dev, row[r]);
                else
                    hi_host = fmax(hi_host, row[r]);
            }
            CHECK(n == k);
            CHECK_MSG(lo_dev >= hi_host, "layer %lld: a device neuron has %g, a host neuron %g",
                      (long long)l, lo_dev, hi_host);
        }
        run_ctx(model, sel, &cp, p);
        pi_plan_free(p);
    }
    free(row);
    free(back);
    pi_stats_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    write_file(g_in, data + 1, size - 1);
    if (data[0] & 1)
        fuzz_stats(data[0], size - 1);
    else
        fuzz_index(data[0]);
    return 0;
}

/* ---- start-up ---------------------------------------------------------------------- */

static void seed_file(const char *dir, const char *name, uint8_t sel, const char *from) {
    FILE *in = fopen(from, "rb");
    if (!in)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *out = fopen(path, "wb");
    if (out) {
        fputc(sel, out);
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            fwrite(buf, 1, n, out);
        fclose(out);
    }
    fclose(in);
}

/* Statistics of a profiling run of `model` (with its counts saved to g_rt), or NULL. */
static pi_ctx *profile(int model, int mode, int stats) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 16;
    cp.n_threads = 1;
    cp.sparse_mode = (uint32_t)mode;
    cp.stats = (uint32_t)stats;
    pi_ctx *c;
    if (pi_ctx_create(g_models[model].m, &cp, &c) != PI_OK)
        return NULL;
    static const int32_t toks[6] = {3, 9, 1, 22, 5, 31};
    if (pi_ctx_decode(c, toks, 6) != PI_OK || pi_ctx_decode(c, toks + 2, 1) != PI_OK ||
        pi_stats_save(pi_ctx_stats(c), g_rt, NULL, 0) != PI_OK) {
        pi_ctx_destroy(c);
        return NULL;
    }
    return c;
}

static void write_seeds(const char *dir) {
    char name[64];
    /* statistics of each model, mode and stats level */
    static const int modes[3] = {PI_SPARSE_DENSE, PI_SPARSE_PREDICTOR, PI_SPARSE_ORACLE};
    pi_ctx *keep = NULL;
    for (int model = 0; model < 2; model++)
        for (int i = 0; i < 3; i++)
            for (int stats = PI_STATS_ON; stats <= PI_STATS_DIAGNOSTIC; stats++) {
                if (model == 1 && i > 0)
                    continue;
                pi_ctx *c = profile(model, modes[i], stats);
                if (!c)
                    continue;
                const uint8_t sel = (uint8_t)(1 | model << 1 | 1 << 3 | (i == 1) << 5);
                snprintf(name, sizeof name, "stats-%d-%d-%d", model, i, stats);
                seed_file(dir, name, sel, g_rt);
                if (!keep && model == 0 && i == 1)
                    keep = c;
                else
                    pi_ctx_destroy(c);
            }
    /* statistics of another shape (3 x 64), which the models refuse as plan_stats */
    struct tm_spec ts;
    tm_default(&ts);
    ts.sparse = 1;
    ts.n_layer = 3;
    ts.n_ff = 64;
    char mpath[96];
    snprintf(mpath, sizeof mpath, "%s/other.gguf", g_dir);
    pi_model *other;
    if (tm_write(&ts, mpath) == PI_OK && pi_model_open(mpath, NULL, &other) == PI_OK) {
        pi_ctx_params cp;
        pi_ctx_default_params(&cp);
        cp.n_ctx = 16;
        cp.n_threads = 1;
        cp.stats = PI_STATS_DIAGNOSTIC;
        pi_ctx *c;
        static const int32_t toks[3] = {2, 4, 8};
        if (pi_ctx_create(other, &cp, &c) == PI_OK) {
            if (pi_ctx_decode(c, toks, 3) == PI_OK &&
                pi_stats_save(pi_ctx_stats(c), g_rt, NULL, 0) == PI_OK)
                seed_file(dir, "stats-other-shape", 1 | 1 << 3, g_rt);
            pi_ctx_destroy(c);
        }
        pi_model_close(other);
    }
    remove(mpath);
    /* indexes planned for each model and budget, uniform and ranked by statistics */
    for (int model = 0; model < 2; model++)
        for (int b = 0; b < NBUDGET; b++)
            for (int ranked = 0; ranked < 2; ranked++) {
                char err[512];
                pi_ctx_params cp;
                const uint8_t sel = (uint8_t)(model << 1 | b << 3);
                base_params(&cp, model, sel, err, sizeof err);
                cp.plan_path = g_rt;
                cp.plan_file = PI_PLAN_FILE_WRITE;
                cp.plan_stats = ranked && keep ? pi_ctx_stats(keep) : NULL;
                pi_plan *p;
                if (pi_model_plan(g_models[model].m, &cp, &p) != PI_OK)
                    continue;
                pi_plan_free(p);
                snprintf(name, sizeof name, "index-%d-%d-%d", model, b, ranked);
                seed_file(dir, name, sel, g_rt);
                snprintf(name, sizeof name, "index-%d-%d-%d-cache", model, b, ranked);
                seed_file(dir, name, (uint8_t)(sel | 4), g_rt);
            }
    pi_ctx_destroy(keep);
    /* PowerInfer's own files (tests/fixtures/gpuidx), for the reader alone */
    const char *fix = getenv("PI_FUZZ_PLAN_FIXTURES");
    if (!fix)
        fix = "tests/fixtures/gpuidx";
    DIR *d = opendir(fix);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            const size_t n = strlen(e->d_name);
            if (n < 7 || n > 48 || strcmp(e->d_name + n - 7, ".gpuidx") != 0)
                continue;
            char from[1024];
            snprintf(from, sizeof from, "%s/%s", fix, e->d_name);
            snprintf(name, sizeof name, "fixture-%s", e->d_name);
            seed_file(dir, name, 0x80, from);
        }
        closedir(d);
    }
}

static void open_model(int model, const char *path) {
    struct tm_spec s;
    tm_default(&s);
    s.sparse = model == 0;
    s.seed = 7;
    struct fmodel *fm = &g_models[model];
    if (tm_write(&s, path) != PI_OK || pi_model_open(path, NULL, &fm->m) != PI_OK)
        abort();
    fm->nv = pi_model_n_vocab(fm->m);
    fm->budget[0] = PI_DEVICE_BUDGET_AUTO; /* what base_params takes for selector 0 */
    CHECK(fm->nv <= MAXV && pi_model_n_layer(fm->m) == NL);
    /* CPU-only logits in each mode */
    char err[512];
    pi_ctx_params cp;
    for (int pred = 0; pred < 2; pred++) {
        base_params(&cp, model, (uint8_t)(pred << 5), err, sizeof err);
        cp.device = PI_DEVICE_NONE;
        decode(fm, &cp, fm->ref[pred]);
    }
    /* the budgets: everything (a CPU device's AUTO), the dense parts and half the
     * neurons, the dense parts alone, nothing */
    base_params(&cp, model, 0, err, sizeof err);
    pi_plan *all;
    CHECK_MSG(pi_model_plan(fm->m, &cp, &all) == PI_OK, "%s", err);
    const uint64_t total = pi_plan_bytes(all, PI_PLAN_N_PARTS),
                   neurons = pi_plan_bytes(all, PI_PLAN_NEURONS);
    CHECK_MSG(pi_plan_n_ff(all) == NF && neurons > 0, "model %d: n_ff %lld, %llu bytes of "
              "neurons", model, (long long)pi_plan_n_ff(all), (unsigned long long)neurons);
    pi_plan_free(all);
    fm->budget[1] = total - neurons / 2;
    fm->budget[2] = total - neurons;
    fm->budget[3] = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(g_dir, sizeof g_dir, "/tmp/pi-fuzz-plan-XXXXXX");
    if (!mkdtemp(g_dir))
        abort();
    atexit(cleanup);
    snprintf(g_in, sizeof g_in, "%s/input", g_dir);
    snprintf(g_rt, sizeof g_rt, "%s/back", g_dir);
    char path[96];
    snprintf(path, sizeof path, "%s/sparse.gguf", g_dir);
    open_model(0, path);
    remove(path);
    snprintf(path, sizeof path, "%s/dense.gguf", g_dir);
    open_model(1, path);
    remove(path);
    const char *dir = getenv("PI_FUZZ_PLAN_SEEDS");
    if (dir)
        write_seeds(dir);
    return 0;
}
