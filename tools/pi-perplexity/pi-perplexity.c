/* pi-perplexity -- perplexity of a model on a text file. Uses only the public header.
 *
 * Two ways to cut the token stream into windows the context can hold:
 *  - chunks (the default), llama.cpp's `perplexity` example: non-overlapping chunks of
 *    n_ctx tokens, each decoded from an empty context; only the second half of each
 *    chunk is scored, so every scored token sees at least n_ctx/2 tokens of context.
 *    Exactly llama.cpp's positions: logits at chunk positions n_ctx/2 .. n_ctx-2
 *    predict the tokens at n_ctx/2+1 .. n_ctx-1 (n_ctx - 1 - n_ctx/2 per chunk); a
 *    tail shorter than a chunk is dropped; when the model's tokenizer adds BOS, the
 *    first token of every chunk is replaced by BOS.
 *  - --stride S, the sliding window of Hugging Face's perplexity guide: windows of
 *    n_ctx tokens starting at 0, S, 2S, ... (the last one cut at the end of the text),
 *    each scoring only the tokens the previous window did not reach (the last S
 *    tokens; the first window all of its tokens but the first, which has no
 *    prediction). Windows are plain slices of the token stream.
 *
 * NLL = -log softmax(logits)[next token] is accumulated in double; PPL = exp(mean NLL)
 * and its standard error is estimated as llama.cpp does: PPL * sd(NLL) / sqrt(N - 1). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "device.h"
#include "powerinfer.h"

const char cli_prog[] = "pi-perplexity";

static void usage(FILE *out) {
    fputs("usage: pi-perplexity -m MODEL -f TEXT [options]\n"
            "\n"
            "Perplexity of MODEL on the text file TEXT. The whole file is tokenized at once,\n"
            "with BOS in front when the model's tokenizer adds one to a fresh sequence\n"
            "(tokenizer.ggml.add_bos_token; SmolLM2 and other GPT-2-style vocabularies add\n"
            "none), then cut into windows of N_CTX tokens, each decoded from an empty context\n"
            "in calls of N_BATCH tokens with logits kept for every token:\n"
            "  default      llama.cpp's method (its perplexity example): non-overlapping\n"
            "               chunks of N_CTX tokens; in each, the logits at positions\n"
            "               N_CTX/2 .. N_CTX-2 score the tokens N_CTX/2+1 .. N_CTX-1, each\n"
            "               predicted from all earlier tokens of its chunk; the first token of\n"
            "               a chunk becomes BOS when the model adds BOS; a tail shorter than a\n"
            "               chunk is not scored\n"
            "  --stride S   Hugging Face's sliding window (transformers' perplexity guide):\n"
            "               windows of N_CTX tokens starting every S tokens, each scoring its\n"
            "               last S tokens (the first window: all but its first token; the last\n"
            "               window ends with the text and scores what is left)\n"
            "NLL = -log softmax(logits)[next token], summed in double; PPL = exp(mean NLL),\n"
            "+/- PPL * sd(NLL) / sqrt(N - 1) as llama.cpp prints it.\n"
            "\n"
            "  -m, --model FILE        model file (GGUF, or PowerInfer GGUF)\n"
            "  -f, --file FILE         the text (UTF-8; a file or a pipe, at most 64 MiB)\n"
            "  -c, --ctx-size N        window length in tokens (default 512)\n"
            "  --stride S              sliding windows advancing by S tokens (1 .. N_CTX)\n"
            "  -b, --batch-size N      tokens per decode call (it keeps N x n_vocab logits)\n"
            "                          (default: N_CTX, at most 256)\n"
            "  -t, --threads N         worker threads (default: all processors)\n"
            "  --chunks K              score only the first K chunks (windows)\n"
            "  --sparse-mode M         FFN mode: " CLI_SPARSE_MODE_NAMES "\n"
            "                          (default: the file's: sparse for PowerInfer files,\n"
            "                          threshold for pi-sparsify's, else dense)\n"
            "  --f32-activations       float activations in products with quantized weights\n"
            "                          (slower; closer to a float reference) instead of 8-bit\n"
            "\n", out);
    fputs(CLI_DEVICE_USAGE "\n", out);
    fputs(CLI_LOAD_USAGE
            "  -v, --verbose           log what the library does to stderr\n"
            "  --version               print the library version\n"
            "  -h, --help              this text\n"
            "\n"
            "Progress goes to stderr, one line per window; the result to stdout.\n"
            "Exit status: 0, 1 (a file, the model or the text cannot be used), 2 (bad options).\n",
          out);
}

/* ---- windows ------------------------------------------------------------------------ */

/* tokens[start .. start+len) decoded from an empty context; the logits at window
 * positions first .. len-2 are scored against the tokens that follow them. */
struct window {
    int64_t start;
    int32_t len, first;
};

/* The windows of either method over n tokens, at most max_windows (0: all). Returns
 * the count (0 when the text is shorter than one window) and *out (malloc'd), or -1
 * when out of memory. */
static int64_t plan_windows(int64_t n, int32_t n_ctx, int32_t stride, int64_t max_windows,
                            struct window **out) {
    *out = NULL;
    if (n < n_ctx)
        return 0;
    int64_t count = stride ? (n - n_ctx + stride - 1) / stride + 1 : n / n_ctx;
    if (max_windows > 0 && count > max_windows)
        count = max_windows;
    struct window *w = malloc((size_t)count * sizeof *w);
    if (!w)
        return -1;
    int64_t prev_end = 0;
    for (int64_t k = 0; k < count; k++) {
        if (!stride) {
            w[k] = (struct window){k * n_ctx, n_ctx, n_ctx / 2};
            continue;
        }
        /* transformers' loop: begin = k*S, end = min(begin + n_ctx, n), the targets
         * are the last end - prev_end tokens of the window (never its first token). */
        int64_t begin = k * stride, end = begin + n_ctx < n ? begin + n_ctx : n;
        int64_t len = end - begin, targets = end - prev_end;
        int64_t first_target = len - targets > 1 ? len - targets : 1;
        w[k] = (struct window){begin, (int32_t)len, (int32_t)(first_target - 1)};
        prev_end = end;
    }
    *out = w;
    return count;
}

/* ---- scoring ------------------------------------------------------------------------- */

struct nll_sum {
    double nll, nll2; /* sums of NLL and NLL^2 */
    int64_t count;
};

/* -log softmax(logits)[token], in double. */
static double token_nll(const float *logits, int64_t n_vocab, int32_t token) {
    float mx = logits[0];
    for (int64_t i = 1; i < n_vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - (double)mx);
    return (double)mx + log(sum) - (double)logits[token];
}

/* Decode window w of toks (token 0 replaced by `bos` when bos >= 0) from an empty
 * context in calls of n_batch entries, every entry keeping its logits, and add the
 * NLL of its scored tokens to *acc. entries: room for n_batch. PI_OK or a status. */
static int score_window(pi_ctx *ctx, const int32_t *toks, const struct window *w, int32_t bos,
                        int32_t n_batch, int64_t n_vocab, pi_batch_entry *entries,
                        struct nll_sum *acc) {
    const int32_t *t = toks + w->start;
    int st = pi_ctx_reset(ctx);
    for (int32_t p0 = 0; st == PI_OK && p0 < w->len; p0 += n_batch) {
        int32_t n = w->len - p0 < n_batch ? w->len - p0 : n_batch;
        for (int32_t i = 0; i < n; i++) {
            int32_t pos = p0 + i;
            entries[i] = (pi_batch_entry){pos == 0 && bos >= 0 ? bos : t[pos], 0, pos, 1};
        }
        if ((st = pi_ctx_decode_batch(ctx, entries, (size_t)n)) != PI_OK)
            break;
        for (int32_t i = 0; i < n; i++) {
            int32_t pos = p0 + i;
            if (pos < w->first || pos > w->len - 2)
                continue;
            const float *lg = pi_ctx_batch_logits(ctx, (size_t)i);
            if (!lg)
                return PI_ERR_INTERNAL;
            double v = token_nll(lg, n_vocab, t[pos + 1]);
            acc->nll += v;
            acc->nll2 += v * v;
            acc->count++;
        }
    }
    return st;
}

/* ---- options ------------------------------------------------------------------------- */

struct opts {
    const char *model, *text;
    long n_ctx, stride, n_batch, chunks;
    int verbose;
    pi_ctx_params cp;
    struct cli_device dev;
};

/* -1: run; otherwise the exit status: 0 (help, version) or 2 (a usage error, printed). */
static int parse_args(int argc, char **argv, struct opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1, r;
        long n;
#define IS(s) (!strcmp(a, s))
        if (IS("--f32-activations")) {
            o->cp.f32_activations = 1;
            takes = 0;
        } else if ((r = cli_device_option(&o->dev, a, v, &takes)) >= 0) {
            if (r)
                return r;
        } else if ((r = cli_common_option(a, v, usage, &o->verbose)) >= 0) {
            return r;
        } else if (r == CLI_OPT_TAKEN) {
            takes = 0;
        } else if (IS("-m") || IS("--model")) {
            o->model = v;
        } else if (IS("-f") || IS("--file")) {
            o->text = v;
        } else if (IS("-c") || IS("--ctx-size")) {
            if (cli_parse_long(a, v, 10, 4, 1 << 20, &o->n_ctx))
                return 2;
        } else if (IS("--stride")) {
            if (cli_parse_long(a, v, 10, 1, 1 << 20, &o->stride))
                return 2;
        } else if (IS("-b") || IS("--batch-size")) {
            if (cli_parse_long(a, v, 10, 1, 1 << 16, &o->n_batch))
                return 2;
        } else if (IS("-t") || IS("--threads")) {
            if (cli_parse_long(a, v, 10, 0, 512, &n))
                return 2;
            o->cp.n_threads = (uint32_t)n;
        } else if (IS("--sparse-mode")) {
            const int mode = cli_sparse_mode(a, v);
            if (mode < 0)
                return 2;
            o->cp.sparse_mode = (uint32_t)mode;
        } else if (IS("--chunks")) {
            if (cli_parse_long(a, v, 10, 1, INT32_MAX, &o->chunks))
                return 2;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "pi-perplexity: unknown option '%s' (see --help)\n", a);
            return 2;
        } else {
            fprintf(stderr, "pi-perplexity: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
#undef IS
        i += takes;
    }
    if (cli_device_check(&o->dev))
        return 2;
    if (!o->model || (!o->text && !o->dev.dry_run)) {
        fprintf(stderr, "pi-perplexity: give a model with -m and a text with -f (see --help)\n");
        return 2;
    }
    if (o->stride > o->n_ctx) {
        fprintf(stderr, "pi-perplexity: --stride %ld exceeds the window (-c %ld)\n", o->stride,
                o->n_ctx);
        return 2;
    }
    if (!o->n_batch)
        o->n_batch = o->n_ctx < 256 ? o->n_ctx : 256;
    if (o->n_batch > o->n_ctx)
        o->n_batch = o->n_ctx;
    return -1;
}

/* ---- the run ------------------------------------------------------------------------- */

/* Whether tokenizing a fresh sequence puts BOS in front: the token it adds. -1: none. */
static int32_t added_bos(const pi_model *m) {
    int32_t plain[8], special[8];
    int64_t np = pi_tokenize(m, "a", 1, plain, 8, 0);
    int64_t ns = pi_tokenize(m, "a", 1, special, 8, PI_TOKENIZE_ADD_SPECIAL);
    int32_t bos = pi_model_token_bos(m);
    return bos >= 0 && np >= 0 && ns == np + 1 && np < 8 && special[0] == bos ? bos : -1;
}

static int run(struct opts *o) {
    size_t text_len = 0;
    char *text = cli_read_file(o->text, &text_len);
    if (!text) {
        fprintf(stderr, "pi-perplexity: cannot read '%s': %s\n", o->text, strerror(errno));
        return 1;
    }
    int rc = 1;
    pi_model *m = NULL;
    pi_ctx *ctx = NULL;
    int32_t *toks = NULL;
    struct window *win = NULL;
    pi_batch_entry *entries = NULL;

    if (cli_model_open(o->model, o->verbose, &m))
        goto done;
    int64_t n_tok = pi_tokenize(m, text, text_len, NULL, 0, PI_TOKENIZE_ADD_SPECIAL);
    if (n_tok < 0) {
        cli_fail("cannot tokenize the text", (int)n_tok, NULL);
        goto done;
    }
    if (n_tok > 0 && !(toks = malloc((size_t)n_tok * sizeof *toks))) {
        fprintf(stderr, "pi-perplexity: out of memory\n");
        goto done;
    }
    if (n_tok > 0)
        pi_tokenize(m, text, text_len, toks, (size_t)n_tok, PI_TOKENIZE_ADD_SPECIAL);
    int32_t bos = added_bos(m);
    fprintf(stderr, "pi-perplexity: %s: %zu bytes, %" PRId64 " tokens (%s)\n", o->text, text_len,
            n_tok,
            bos >= 0 ? "BOS in front, as the model's tokenizer adds it"
                     : "no BOS: the model's tokenizer adds none");

    int32_t n_ctx = (int32_t)o->n_ctx, stride = (int32_t)o->stride;
    int64_t n_win = plan_windows(n_tok, n_ctx, stride, o->chunks, &win);
    if (n_win < 0) {
        fprintf(stderr, "pi-perplexity: out of memory\n");
        goto done;
    }
    if (n_win == 0) {
        fprintf(stderr,
                "pi-perplexity: '%s' is too short: %" PRId64 " tokens, one %s needs %d "
                "(-c)\n",
                o->text, n_tok, stride ? "window" : "chunk", n_ctx);
        goto done;
    }

    pi_ctx_params cp = o->cp;
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)o->n_batch;
    if (cli_device_params(&o->dev, o->model, &cp) != 0)
        goto done;
    {
        const int failed = cli_ctx_create(m, &cp, &ctx);
        cli_device_release(&o->dev); /* the statistics: borrowed for the call only */
        cp.plan_stats = NULL;
        if (failed || cli_device_report(&o->dev, ctx, &cp) != 0)
            goto done;
    }
    if (!(entries = malloc((size_t)o->n_batch * sizeof *entries))) {
        fprintf(stderr, "pi-perplexity: out of memory\n");
        goto done;
    }
    /* In chunk mode BOS replaces each chunk's first token (llama.cpp); the sliding
     * window scores plain slices (transformers), so its first window starts with
     * whatever tokenizing put there. */
    int32_t chunk_bos = stride ? -1 : bos;
    int64_t n_vocab = pi_model_n_vocab(m), decoded = 0;
    struct nll_sum acc = {0.0, 0.0, 0};
    double t0 = cli_now_s();
    for (int64_t k = 0; k < n_win; k++) {
        struct nll_sum before = acc;
        int st = score_window(ctx, toks, &win[k], chunk_bos, (int32_t)o->n_batch, n_vocab, entries,
                              &acc);
        if (st != PI_OK) {
            cli_fail("decode failed", st, pi_ctx_errmsg(ctx));
            goto done;
        }
        decoded += win[k].len;
        fprintf(stderr,
                "[%" PRId64 "/%" PRId64 "] %.4f   (window NLL %.6f over %" PRId64 " tokens)\n",
                k + 1, n_win, exp(acc.nll / (double)acc.count), acc.nll - before.nll,
                acc.count - before.count);
    }
    double secs = cli_now_s() - t0;

    double mean = acc.nll / (double)acc.count, ppl = exp(mean);
    double var = acc.nll2 / (double)acc.count - mean * mean;
    double se = acc.count > 1 && var > 0 ? ppl * sqrt(var / (double)(acc.count - 1)) : 0.0;
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, se);
    if (stride)
        printf("method: sliding windows of %d tokens, stride %d (transformers) | %" PRId64
               " windows, %" PRId64 " tokens scored\n",
               n_ctx, stride, n_win, acc.count);
    else
        printf("method: chunks of %d tokens, the last %d of each scored (llama.cpp) | %" PRId64
               " chunks, %" PRId64 " tokens scored\n",
               n_ctx, n_ctx - 1 - n_ctx / 2, n_win, acc.count);
    printf("speed: %" PRId64 " tokens decoded in %.2f s, %.1f tokens/s (%u threads%s)\n", decoded,
           secs, secs > 0 ? (double)decoded / secs : 0.0, pi_ctx_n_threads(ctx),
           cp.f32_activations ? ", f32 activations" : "");
    rc = 0;
done:
    free(entries);
    pi_ctx_destroy(ctx);
    free(win);
    free(toks);
    pi_model_close(m);
    free(text);
    return rc;
}

int main(int argc, char **argv) {
    cli_init(&argc, &argv);
    struct opts o;
    memset(&o, 0, sizeof o);
    o.n_ctx = 512;
    pi_ctx_default_params(&o.cp);
    cli_device_init(&o.dev);
    int r = parse_args(argc, argv, &o);
    if (r < 0 && o.dev.dry_run) { /* the plan for this window and batch; no text needed */
        pi_ctx_params cp = o.cp;
        cp.n_ctx = (uint32_t)o.n_ctx;
        cp.n_batch = (uint32_t)o.n_batch;
        r = cli_device_dry_run(&o.dev, o.model, &cp, o.verbose);
    } else if (r < 0) {
        r = run(&o);
    }
    cli_device_free(&o.dev);
    return r;
}
