/* pi-batched -- several continuations of one prompt decoded together. Uses only the
 * public header.
 *
 * The prompt is decoded once into sequence 0 and copied to sequences 1..P-1
 * (pi_ctx_seq_copy shares the cache of the prompt); then every step appends one token
 * to each unfinished sequence in a single pi_ctx_decode_batch call, so the weights are
 * read once per step for all P sequences. Each sequence samples from its own entry's
 * logits with its own generator (seed S + i). For comparison the same P continuations
 * are then generated one after another (each sequence cut back to the prompt with
 * pi_ctx_seq_remove, one-entry batches), which gives the speed-up of batching. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "device.h"
#include "powerinfer.h"

const char cli_prog[] = "pi-batched";

static void usage(FILE *out) {
    fprintf(out, "usage: pi-batched -m MODEL -p PROMPT -n N_TOKENS --parallel P [options]\n"
                 "\n"
                 "Decode PROMPT once, copy it to P sequences of one context, and generate P\n"
                 "continuations of up to N_TOKENS tokens together: one batched decode per step.\n"
                 "Then generate the same P continuations one after another and report both\n"
                 "speeds. Each continuation goes to stdout after a line\n"
                 "'--- sequence I (seed S) ---' as PROMPT followed by the generated text; the\n"
                 "timings go to stderr.\n"
                 "\n"
                 "  -m, --model FILE        model file (GGUF, or PowerInfer GGUF)\n"
                 "  -p, --prompt TEXT       the prompt (tokenized as pi-run does: with BOS when\n"
                 "                          the model adds one)\n"
                 "  -n, --n-predict N       tokens to generate per sequence (a sequence also\n"
                 "                          ends at an end-of-generation token)\n"
                 "  --parallel P            sequences (1 .. 256)\n"
                 "  --seed S                sequence i samples with seed S + i (default 0x5eed)\n"
                 "  --temp T                temperature (default 0.8; 0: greedy, the arg max,\n"
                 "                          ties to the lowest id, as pi-run --temp 0)\n"
                 "  --top-k K               keep the K most likely tokens (default 40; 0: all)\n"
                 "  --top-p P               then the smallest set with probability >= P\n"
                 "                          (default 0.95; 1: off)\n"
                 "  -t, --threads N         worker threads (default: all processors)\n"
                 "  --no-sequential         skip the one-after-another run\n"
                 "\n");
    fputs(CLI_DEVICE_USAGE "                          (with -p: the plan for its context)\n\n", out);
    fprintf(out, CLI_LOAD_USAGE
                 "  -v, --verbose           log what the library does to stderr\n"
                 "  --version               print the library version\n"
                 "  -h, --help              this text\n"
                 "\n"
                 "Exit status: 0, 1 (the model or a decode failed), 2 (bad options).\n");
}

/* ---- generation ----------------------------------------------------------------------- */

struct opts {
    const char *model, *prompt;
    long n_predict, parallel, n_threads;
    uint64_t seed;
    float temp, top_p;
    long top_k;
    int verbose, no_sequential;
    struct cli_device dev;
};

struct run {
    const pi_model *m;
    pi_ctx *ctx;
    int64_t n_vocab, n_prompt;
    int32_t n_seq, n_gen;
    const float *prompt_logits; /* [n_vocab], copied after the prompt */
    pi_sampler **smp;           /* [n_seq], sequence i seeded with seed + i */
    int32_t *toks;              /* [n_seq][n_gen] generated tokens */
    int32_t *len;               /* [n_seq] tokens generated */
    pi_batch_entry *entries;    /* [n_seq] */
    int32_t *entry_seq;         /* [n_seq] the sequence of each entry */
};

/* Sample the first token of sequence i (from the prompt's logits); 1 if it goes on. */
static int first_token(struct run *r, int32_t i, const struct opts *o) {
    (void)o;
    int32_t t;
    pi_sampler_reset(r->smp[i]); /* re-seeded: each run draws the same */
    if (pi_sample_logits(r->smp[i], r->prompt_logits, r->n_vocab, &t) != PI_OK)
        return 0;
    r->len[i] = 0;
    if (pi_model_token_is_eog(r->m, t))
        return 0;
    r->toks[(size_t)i * (size_t)r->n_gen] = t;
    r->len[i] = 1;
    return r->len[i] < r->n_gen;
}

/* Generate sequences [i0, i1) together, one decode per step: PI_OK or a status. */
static int generate(struct run *r, int32_t i0, int32_t i1, const struct opts *o) {
    int32_t n = 0;
    for (int32_t i = i0; i < i1; i++)
        if (first_token(r, i, o))
            r->entry_seq[n++] = i;
    while (n > 0) {
        for (int32_t j = 0; j < n; j++) {
            int32_t i = r->entry_seq[j];
            r->entries[j] = (pi_batch_entry){
                r->toks[(size_t)i * (size_t)r->n_gen + (size_t)r->len[i] - 1], i, -1, 1};
        }
        int st = pi_ctx_decode_batch(r->ctx, r->entries, (size_t)n);
        if (st != PI_OK)
            return st;
        int32_t still = 0;
        for (int32_t j = 0; j < n; j++) {
            int32_t i = r->entry_seq[j];
            const float *lg = pi_ctx_batch_logits(r->ctx, (size_t)j);
            if (!lg)
                return PI_ERR_INTERNAL;
            int32_t t;
            if (pi_sample_logits(r->smp[i], lg, r->n_vocab, &t) != PI_OK)
                return PI_ERR_INTERNAL;
            if (pi_model_token_is_eog(r->m, t))
                continue;
            r->toks[(size_t)i * (size_t)r->n_gen + (size_t)r->len[i]++] = t;
            if (r->len[i] < r->n_gen)
                r->entry_seq[still++] = i;
        }
        n = still;
    }
    return PI_OK;
}

static int emit(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    return 0;
}

static int print_sequences(const struct run *r, const struct opts *o) {
    pi_detok *dt = NULL;
    int st = pi_detok_create(r->m, 0, &dt);
    if (st != PI_OK)
        return cli_fail("cannot create the detokenizer", st, NULL);
    for (int32_t i = 0; i < r->n_seq; i++) {
        printf("--- sequence %d (seed %" PRIu64 ") ---\n%s", i, o->seed + (uint64_t)i, o->prompt);
        for (int32_t k = 0; k < r->len[i]; k++)
            pi_detok_push(dt, r->toks[(size_t)i * (size_t)r->n_gen + (size_t)k], emit, NULL);
        pi_detok_flush(dt, emit, NULL);
        printf("\n");
    }
    fflush(stdout);
    pi_detok_destroy(dt);
    return 0;
}

static int64_t total_tokens(const struct run *r) {
    int64_t t = 0;
    for (int32_t i = 0; i < r->n_seq; i++)
        t += r->len[i];
    return t;
}

static int run(struct opts *o) {
    pi_model *m = NULL;
    if (cli_model_open(o->model, o->verbose, &m))
        return 1;

    struct run r;
    memset(&r, 0, sizeof r);
    r.m = m;
    r.n_vocab = pi_model_n_vocab(m);
    r.n_seq = (int32_t)o->parallel;
    r.n_gen = (int32_t)o->n_predict;
    int rc = 1, st;
    int32_t *prompt = NULL, *batch_toks = NULL, *batch_len = NULL;
    float *plogits = NULL;
    size_t plen = strlen(o->prompt);
    r.n_prompt = pi_tokenize(m, o->prompt, plen, NULL, 0, PI_TOKENIZE_ADD_SPECIAL);
    if (r.n_prompt < 0) {
        cli_fail("cannot tokenize the prompt", (int)r.n_prompt, NULL);
        goto done;
    }
    if (r.n_prompt == 0) {
        fprintf(stderr, "pi-batched: the prompt is empty\n");
        goto done;
    }
    size_t ns = (size_t)r.n_seq;
    prompt = malloc((size_t)r.n_prompt * sizeof *prompt);
    plogits = malloc((size_t)r.n_vocab * sizeof *plogits);
    r.smp = calloc(ns, sizeof *r.smp);
    r.toks = malloc(ns * (size_t)r.n_gen * sizeof *r.toks);
    batch_toks = malloc(ns * (size_t)r.n_gen * sizeof *batch_toks);
    batch_len = malloc(ns * sizeof *batch_len);
    r.len = calloc(ns, sizeof *r.len);
    r.entries = malloc(ns * sizeof *r.entries);
    r.entry_seq = malloc(ns * sizeof *r.entry_seq);
    if (!prompt || !plogits || !r.smp || !r.toks || !batch_toks || !batch_len || !r.len ||
        !r.entries || !r.entry_seq) {
        fprintf(stderr, "pi-batched: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < ns; i++) {
        pi_sampler_params sp;
        pi_sampler_default_params(&sp);
        sp.temperature = o->temp;
        sp.top_p = o->top_p;
        sp.top_k = (int32_t)o->top_k;
        sp.min_p = 0.0f;
        sp.seed = o->seed + (uint64_t)i;
        if ((st = pi_sampler_create(m, &sp, &r.smp[i])) != PI_OK) {
            cli_fail("cannot create a sampler", st, NULL);
            goto done;
        }
    }
    pi_tokenize(m, o->prompt, plen, prompt, (size_t)r.n_prompt, PI_TOKENIZE_ADD_SPECIAL);

    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = (uint32_t)(r.n_prompt + r.n_gen);
    cp.n_seq_max = (uint32_t)r.n_seq;
    cp.n_threads = (uint32_t)o->n_threads;
    if (o->dev.dry_run) { /* the plan for this prompt's context of P sequences */
        rc = cli_device_dry_run_model(&o->dev, m, o->model, &cp);
        goto done;
    }
    if (cli_device_params(&o->dev, o->model, &cp) != 0)
        goto done;
    {
        const int failed = cli_ctx_create(m, &cp, &r.ctx);
        cli_device_release(&o->dev); /* the statistics: borrowed for the call only */
        cp.plan_stats = NULL;
        if (failed || cli_device_report(&o->dev, r.ctx, &cp) != 0)
            goto done;
    }

    double t0 = cli_now_s();
    if ((st = pi_ctx_decode(r.ctx, prompt, (size_t)r.n_prompt)) != PI_OK) {
        cli_fail("cannot process the prompt", st, pi_ctx_errmsg(r.ctx));
        goto done;
    }
    memcpy(plogits, pi_ctx_logits(r.ctx), (size_t)r.n_vocab * sizeof *plogits);
    r.prompt_logits = plogits;
    double t_prompt = cli_now_s() - t0;
    for (int32_t i = 1; i < r.n_seq; i++)
        if ((st = pi_ctx_seq_copy(r.ctx, 0, i)) != PI_OK) {
            cli_fail("cannot copy the prompt", st, pi_ctx_errmsg(r.ctx));
            goto done;
        }

    double t1 = cli_now_s();
    if ((st = generate(&r, 0, r.n_seq, o)) != PI_OK) {
        cli_fail("batched decode failed", st, pi_ctx_errmsg(r.ctx));
        goto done;
    }
    double t_batch = cli_now_s() - t1;
    int64_t n_batch_tok = total_tokens(&r);
    if (print_sequences(&r, o) != 0)
        goto done;
    fprintf(stderr,
            "pi-batched: prompt %" PRId64 " tokens in %.1f ms, copied to %d sequences | "
            "batched: %" PRId64 " tokens in %.2f s, %.2f tokens/s | %u threads\n",
            r.n_prompt, 1e3 * t_prompt, r.n_seq, n_batch_tok, t_batch,
            t_batch > 0 ? (double)n_batch_tok / t_batch : 0.0, pi_ctx_n_threads(r.ctx));

    if (!o->no_sequential) {
        /* The same continuations one sequence at a time, from the same prompt cache. */
        memcpy(batch_toks, r.toks, ns * (size_t)r.n_gen * sizeof *batch_toks);
        memcpy(batch_len, r.len, ns * sizeof *batch_len);
        double t2 = cli_now_s();
        for (int32_t i = 0; i < r.n_seq; i++) {
            if ((st = pi_ctx_seq_remove(r.ctx, i, r.n_prompt, -1)) != PI_OK ||
                (st = generate(&r, i, i + 1, o)) != PI_OK) {
                cli_fail("sequential decode failed", st, pi_ctx_errmsg(r.ctx));
                goto done;
            }
        }
        double t_seq = cli_now_s() - t2;
        int64_t n_seq_tok = total_tokens(&r);
        int same = 1;
        for (int32_t i = 0; same && i < r.n_seq; i++)
            same = batch_len[i] == r.len[i] &&
                   !memcmp(batch_toks + (size_t)i * (size_t)r.n_gen,
                           r.toks + (size_t)i * (size_t)r.n_gen, (size_t)r.len[i] * sizeof *r.toks);
        double batch_rate = t_batch > 0 ? (double)n_batch_tok / t_batch : 0.0;
        double seq_rate = t_seq > 0 ? (double)n_seq_tok / t_seq : 0.0;
        fprintf(stderr,
                "pi-batched: sequential: %" PRId64 " tokens in %.2f s, %.2f tokens/s | "
                "speed-up of batching: %.2fx | same tokens: %s\n",
                n_seq_tok, t_seq, seq_rate, seq_rate > 0 ? batch_rate / seq_rate : 0.0,
                same ? "yes" : "no");
    }
    rc = 0;
done:
    if (r.smp)
        for (size_t i = 0; i < (size_t)r.n_seq; i++)
            pi_sampler_destroy(r.smp[i]);
    free(r.smp);
    free(r.toks);
    free(batch_toks);
    free(batch_len);
    free(r.len);
    free(r.entries);
    free(r.entry_seq);
    free(plogits);
    free(prompt);
    pi_ctx_destroy(r.ctx);
    pi_model_close(m);
    return rc;
}

/* ---- options -------------------------------------------------------------------------- */

/* -1: run; otherwise the exit status: 0 (help, version) or 2 (a usage error, printed). */
static int parse_args(int argc, char **argv, struct opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1, r;
#define IS(s) (!strcmp(a, s))
        if (IS("--no-sequential")) {
            o->no_sequential = 1;
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
        } else if (IS("-p") || IS("--prompt")) {
            o->prompt = v;
        } else if (IS("-n") || IS("--n-predict")) {
            if (cli_parse_long(a, v, 10, 1, 1 << 20, &o->n_predict))
                return 2;
        } else if (IS("--parallel")) {
            if (cli_parse_long(a, v, 10, 1, 256, &o->parallel))
                return 2;
        } else if (IS("-t") || IS("--threads")) {
            if (cli_parse_long(a, v, 10, 0, 512, &o->n_threads))
                return 2;
        } else if (IS("--top-k")) {
            if (cli_parse_long(a, v, 10, 0, 1 << 30, &o->top_k))
                return 2;
        } else if (IS("--temp")) {
            if (cli_parse_float(a, v, -1e30f, 1e30f, &o->temp))
                return 2;
        } else if (IS("--top-p")) {
            if (cli_parse_float(a, v, 0.0f, 1.0f, &o->top_p))
                return 2;
        } else if (IS("--seed")) {
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 0);
            if (*v == '\0' || *v == '-' || *end != '\0' || errno) {
                fprintf(stderr, "pi-batched: --seed wants an integer, not '%s'\n", v);
                return 2;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "pi-batched: unknown option '%s' (see --help)\n", a);
            return 2;
        } else {
            fprintf(stderr, "pi-batched: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
#undef IS
        i += takes;
    }
    if (cli_device_check(&o->dev))
        return 2;
    if (!o->model || !o->prompt || !o->n_predict || !o->parallel) {
        fprintf(stderr, "pi-batched: give -m MODEL, -p PROMPT, -n N_TOKENS and --parallel P "
                        "(see --help)\n");
        return 2;
    }
    return -1;
}

int main(int argc, char **argv) {
    cli_init(&argc, &argv);
    struct opts o;
    memset(&o, 0, sizeof o);
    o.seed = 0x5eed;
    o.temp = 0.8f;
    o.top_k = 40;
    o.top_p = 0.95f;
    cli_device_init(&o.dev);
    int r = parse_args(argc, argv, &o);
    if (r < 0)
        r = run(&o);
    cli_device_free(&o.dev);
    return r;
}
