/* pi-sparsify -- training-free activation sparsity (CATS- or TEAL-style) for an ordinary GGUF
 * model with a gated FFN. Uses only the public header:
 *   1. calibration: the model runs densely over the calibration text in windows of
 *      -c tokens with gate histograms on (pi_ctx_params.gate_histogram), and each
 *      layer's threshold t_l is the S-quantile of |act(gate . x)| (--method teal: of
 *      |act(gate . x) * (up . x)|, PI_HIST_INTER) (pi_stats_gate_quantile), so that
 *      about a fraction S of the neurons fall below it;
 *   2. pi_model_sparsify writes OUT with ffn_down_t and the thresholds.
 * OUT then runs thresholded by default in every tool (--sparse-mode threshold), and
 * exactly dense with --sparse-mode dense. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "powerinfer.h"

const char cli_prog[] = "pi-sparsify";

static void usage(FILE *out) {
    fprintf(out, "usage: pi-sparsify -m IN.gguf -o OUT.gguf --sparsity S --calib TEXT [options]\n"
                 "\n"
                 "Makes a sparse-capable copy of IN (a dense GGUF model whose FFN is gated:\n"
                 "ffn_gate and ffn_up, or Phi-3's fused gate_up, and ffn_down; SiLU or GELU;\n"
                 "a post-FFN norm as Gemma's is applied; or plain, act(up . x + b), as\n"
                 "Falcon's and StarCoder2's, thresholded on that activation; gate and up\n"
                 "biases are applied; or mixture-of-experts layers, each expert's FFN\n"
                 "thresholded alike): per layer a threshold t_l on |act(gate . x)|\n"
                 "calibrated on TEXT so that a fraction S of the FFN neurons fall below it,\n"
                 "and the down projection stored transposed (ffn_down_t; experts:\n"
                 "ffn_down_exps_t), so that only the neurons above t_l are read for up and\n"
                 "down (an expert placed on a GPU reads its up whole). OUT runs that way\n"
                 "by default in pi-run, pi-bench, pi-perplexity and pi-server\n"
                 "(--sparse-mode threshold), and exactly dense with --sparse-mode dense.\n"
                 "\n"
                 "  -m, --model IN          the dense model\n"
                 "  -o, --output OUT        the file to write\n"
                 "  --sparsity S            target FFN sparsity per layer, in [0, 1)\n"
                 "  --calib TEXT            calibration text file (use different text from\n"
                 "                          the one you evaluate on)\n"
                 "  --method M              cats (default): thresholds on |act(gate . x)|, up\n"
                 "                          and down only above them; teal: thresholds on the\n"
                 "                          intermediate |act(gate . x) * (up . x)|, the whole\n"
                 "                          gate and up, down only above them\n"
                 "  -c, --ctx-size N        calibration window in tokens (default 512)\n"
                 "  --calib-tokens N        use at most N tokens of TEXT (default: all)\n"
                 "  --order-stats FILE      store each layer's neurons hottest first, by the\n"
                 "                          active counts of a statistics side file of IN\n"
                 "                          (pi-run --profile, pi_stats_save); recorded as\n"
                 "                          powerinfer.sparsify.neuron_order\n"
                 "  --down-type T           type of ffn_down_t: f16, bf16, q4_0, q4_1, q5_0,\n"
                 "                          q5_1, q8_0 (default: ffn_down's type if F16, BF16,\n"
                 "                          F32 or Q8_0; q5_0 from 4-bit types, q8_0 from\n"
                 "                          5- and 6-bit ones)\n"
                 "  --keep-down             keep ffn_down too (the file grows by its bytes):\n"
                 "                          prompts run the down projection as the original\n"
                 "                          does; not with --order-stats or experts\n"
                 "  -t, --threads N         threads (default: all processors)\n"
                 "  -q, --quiet             print only errors\n"
                 "  -h, --help              this text\n");
}

static int parse_type(const char *s) {
    static const struct {
        const char *name;
        int type;
    } types[] = {
        {"q4_0", PI_TYPE_Q4_0}, {"q4_1", PI_TYPE_Q4_1}, {"q5_0", PI_TYPE_Q5_0},
        {"q5_1", PI_TYPE_Q5_1}, {"q8_0", PI_TYPE_Q8_0}, {"f16", PI_TYPE_F16},
        {"bf16", PI_TYPE_BF16},
    };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(s, types[i].name))
            return types[i].type;
    return -1;
}

struct opts {
    const char *in, *out, *calib, *order_stats;
    float sparsity;
    int have_sparsity;
    long n_ctx, max_tokens, n_threads;
    int down_type, quiet, verbose, teal, keep_down;
};

static int parse(int argc, char **argv, struct opts *o) {
    o->n_ctx = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define IS(s) (!strcmp(a, s))
        if (IS("-q") || IS("--quiet")) {
            o->quiet = 1;
            continue;
        }
        if (IS("--keep-down")) {
            o->keep_down = 1;
            continue;
        }
        int r = cli_common_option(a, v, usage, &o->verbose);
        if (r == CLI_OPT_TAKEN)
            continue;
        if (r >= 0)
            return r;
        if (!v) {
            fprintf(stderr, "pi-sparsify: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
        i++;
        if (IS("-m") || IS("--model")) {
            o->in = v;
        } else if (IS("-o") || IS("--output")) {
            o->out = v;
        } else if (IS("--calib")) {
            o->calib = v;
        } else if (IS("--sparsity")) {
            if (cli_parse_float(a, v, 0.0f, 0.999f, &o->sparsity))
                return 2;
            o->have_sparsity = 1;
        } else if (IS("-c") || IS("--ctx-size")) {
            if (cli_parse_long(a, v, 10, 8, 1 << 16, &o->n_ctx))
                return 2;
        } else if (IS("--calib-tokens")) {
            if (cli_parse_long(a, v, 10, 1, 1L << 30, &o->max_tokens))
                return 2;
        } else if (IS("-t") || IS("--threads")) {
            if (cli_parse_long(a, v, 10, 0, 512, &o->n_threads))
                return 2;
        } else if (IS("--order-stats")) {
            o->order_stats = v;
        } else if (IS("--method")) {
            if (strcmp(v, "cats") && strcmp(v, "teal")) {
                fprintf(stderr, "pi-sparsify: --method wants cats or teal, not '%s'\n", v);
                return 2;
            }
            o->teal = !strcmp(v, "teal");
        } else if (IS("--down-type")) {
            if ((o->down_type = parse_type(v)) < 0) {
                fprintf(stderr,
                        "pi-sparsify: --down-type wants f16, bf16, q4_0, q4_1, q5_0, "
                        "q5_1 or q8_0, not '%s'\n",
                        v);
                return 2;
            }
        } else {
            fprintf(stderr, "pi-sparsify: unknown option '%s' (see --help)\n", a);
            return 2;
        }
#undef IS
    }
    if (!o->in || !o->out || !o->calib || !o->have_sparsity) {
        fprintf(stderr, "pi-sparsify: -m IN, -o OUT, --sparsity S and --calib TEXT are "
                        "required (see --help)\n");
        return 2;
    }
    return -1;
}

/* Decode toks[0..n) in windows of n_ctx (each from position 0), so every layer's gate
 * histogram counts each token once. */
static int calibrate(pi_ctx *ctx, const int32_t *toks, int64_t n, int64_t n_ctx, int quiet) {
    for (int64_t at = 0; at < n; at += n_ctx) {
        const int64_t k = n - at < n_ctx ? n - at : n_ctx;
        int st = pi_ctx_reset(ctx);
        if (st == PI_OK)
            st = pi_ctx_decode(ctx, toks + at, (size_t)k);
        if (st < 0)
            return cli_fail("calibration decode", st, pi_ctx_errmsg(ctx));
        if (!quiet)
            fprintf(stderr, "\rpi-sparsify: calibration %" PRId64 "/%" PRId64 " tokens", at + k, n);
    }
    if (!quiet)
        fprintf(stderr, "\n");
    return 0;
}

struct hot {
    double count;
    int32_t id;
};

static int hotter(const void *a, const void *b) {
    const struct hot *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Per layer the neuron ids by descending active count (ties: lower id first) from the
 * statistics side file `path`, [L][F]; NULL (after a message) on failure. */
static int32_t *hot_order(const char *path, int64_t L, int64_t F) {
    char errbuf[512] = "";
    pi_stats *st = NULL;
    int s = pi_stats_load(path, &st, errbuf, sizeof errbuf);
    if (s < 0) {
        cli_fail("cannot read the --order-stats file", s, errbuf);
        return NULL;
    }
    int32_t *order = NULL;
    double *cnt = malloc((size_t)F * sizeof *cnt);
    struct hot *h = malloc((size_t)F * sizeof *h);
    if (pi_stats_n_layer(st) != L || pi_stats_n_ff(st) != F) {
        fprintf(stderr,
                "pi-sparsify: '%s' holds statistics of %" PRId64 " layers of %" PRId64
                " neurons; the model has %" PRId64 " of %" PRId64 "\n",
                path, pi_stats_n_layer(st), pi_stats_n_ff(st), L, F);
    } else if (!cnt || !h || !(order = malloc((size_t)(L * F) * sizeof *order))) {
        fprintf(stderr, "pi-sparsify: out of memory\n");
    } else {
        for (int64_t l = 0; l < L; l++) {
            pi_stats_neurons(st, l, PI_NEURON_ACTIVE, cnt, (size_t)F);
            for (int64_t i = 0; i < F; i++)
                h[i] = (struct hot){cnt[i], (int32_t)i};
            qsort(h, (size_t)F, sizeof *h, hotter);
            for (int64_t i = 0; i < F; i++)
                order[l * F + i] = h[i].id;
        }
    }
    free(cnt);
    free(h);
    pi_stats_free(st);
    return order;
}

static int run(const struct opts *o) {
    int rc = 1;
    size_t len = 0;
    char *text = cli_read_file(o->calib, &len);
    if (!text) {
        fprintf(stderr, "pi-sparsify: cannot read '%s': %s\n", o->calib, strerror(errno));
        return 1;
    }
    pi_model *m = NULL;
    pi_ctx *ctx = NULL;
    int32_t *toks = NULL;
    float *thr = NULL;
    double *derr = NULL;
    int32_t *order = NULL;
    if (cli_model_open(o->in, o->verbose, &m))
        goto done;
    if (pi_model_is_sparse(m)) {
        fprintf(stderr,
                "pi-sparsify: '%s' is a PowerInfer (PWRI) file; it already runs "
                "sparse\n",
                o->in);
        goto done;
    }
    const int64_t all = pi_tokenize(m, text, len, NULL, 0, PI_TOKENIZE_ADD_SPECIAL);
    if (all < 0) {
        cli_fail("cannot tokenize the calibration text", (int)all, NULL);
        goto done;
    }
    const int64_t n = o->max_tokens && all > o->max_tokens ? o->max_tokens : all;
    if (n < 1) {
        fprintf(stderr, "pi-sparsify: '%s' holds no tokens\n", o->calib);
        goto done;
    }
    if (!(toks = malloc((size_t)all * sizeof *toks))) {
        fprintf(stderr, "pi-sparsify: out of memory\n");
        goto done;
    }
    pi_tokenize(m, text, len, toks, (size_t)all, PI_TOKENIZE_ADD_SPECIAL);
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = (uint32_t)o->n_ctx;
    cp.n_threads = (uint32_t)o->n_threads;
    cp.sparse_mode = PI_SPARSE_DENSE;
    cp.stats = PI_STATS_ON;
    cp.gate_histogram = o->teal ? PI_HIST_INTER : PI_HIST_GATE;
    if (cli_ctx_create(m, &cp, &ctx))
        goto done;
    if (calibrate(ctx, toks, n, o->n_ctx, o->quiet))
        goto done;
    const pi_stats *st = pi_ctx_stats(ctx);
    const int64_t L = pi_model_n_layer(m);
    thr = calloc((size_t)L, sizeof *thr);
    derr = calloc((size_t)L, sizeof *derr);
    if (!thr || !derr) {
        fprintf(stderr, "pi-sparsify: out of memory\n");
        goto done;
    }
    for (int64_t l = 0; l < L; l++) {
        int s = pi_stats_gate_quantile(st, l, (double)o->sparsity, &thr[l]);
        if (s < 0) {
            cli_fail("no gate activations were counted", s, NULL);
            goto done;
        }
    }
    if (o->order_stats && !(order = hot_order(o->order_stats, L, pi_model_n_ff(m))))
        goto done;
    pi_ctx_destroy(ctx);
    ctx = NULL;
    pi_model_close(m);
    m = NULL;

    char errbuf[512] = "", calib[256];
    const char *base = strrchr(o->calib, '/');
    snprintf(calib, sizeof calib, "%s", base ? base + 1 : o->calib);
    pi_sparsify_params sp;
    pi_sparsify_default_params(&sp);
    sp.down_type = (uint32_t)o->down_type;
    sp.thresholds = thr;
    sp.n_thresholds = (uint64_t)L;
    sp.sparsity = o->sparsity;
    sp.n_threads = (uint32_t)o->n_threads;
    sp.calibration = calib;
    sp.calibration_tokens = (uint64_t)n;
    sp.errbuf = errbuf;
    sp.errbuf_cap = sizeof errbuf;
    sp.down_error = derr;
    sp.method = o->teal ? PI_SPARSIFY_TEAL : PI_SPARSIFY_CATS;
    sp.neuron_order = order;
    sp.keep_down = (uint32_t)o->keep_down;
    int s = pi_model_sparsify(o->in, o->out, &sp);
    if (s < 0) {
        cli_fail("cannot write the sparsified file", s, errbuf);
        goto done;
    }
    if (!o->quiet) {
        double emax = 0.0;
        for (int64_t l = 0; l < L; l++)
            emax = derr[l] > emax ? derr[l] : emax;
        printf("pi-sparsify: %s: sparsity %.2f, calibrated on %" PRId64 " tokens of %s\n", o->out,
               (double)o->sparsity, n, calib);
        printf("pi-sparsify: ffn_down_t relative RMS error against the dequantized "
               "ffn_down: max %.3g over layers\n",
               emax);
        for (int64_t l = 0; l < L; l++)
            printf("  layer %3" PRId64 "  threshold %.5g  down_t error %.3g\n", l, (double)thr[l],
                   derr[l]);
    }
    rc = 0;
done:
    pi_ctx_destroy(ctx);
    pi_model_close(m);
    free(toks);
    free(thr);
    free(derr);
    free(order);
    free(text);
    return rc;
}

int main(int argc, char **argv) {
    cli_init(&argc, &argv);
    struct opts o = {0};
    int r = parse(argc, argv, &o);
    if (r >= 0)
        return r;
    return run(&o);
}
