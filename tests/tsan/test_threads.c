/*
 * test_threads.c -- the threading contract of powerinfer.h, checked under load.
 *
 *   test_threads MODEL...
 *
 * For each MODEL: open it once, compute reference logits on the main thread with one
 * context and one worker thread, then start N_DECODERS threads that each create their
 * own context on the shared model (alternately with 1 and 2 worker threads, so the
 * library's internal pool runs too; one of them also collects statistics) and decode
 * the same token sequence ROUNDS times, plus N_QUERIERS threads that hammer the model's
 * read-only queries (description, metadata, tensors, tokenizer, samplers and
 * detokenizers of their own) meanwhile. Every step's logits must equal the reference
 * bit for bit, and every query the answer the main thread got before the threads
 * started. A model without weights for the architecture (e.g. a tokenizer-only file)
 * gets the query threads only.
 *
 * Built normally it is a functional test; built with -fsanitize=thread
 * (tests/tsan/run.sh) ThreadSanitizer also reports any data race in the library.
 * Prints "N passed, M failed"; exit status 0 iff nothing failed.
 *
 * SPDX-License-Identifier: MIT
 */
#include <powerinfer.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_DECODERS = 4, N_QUERIERS = 2, ROUNDS = 4, SOLO_ROUNDS = 64, N_PROMPT = 7, N_GEN = 6, N_STEPS = 1 + N_GEN };

/* Fixed input: a prompt decoded in one call, then N_GEN single tokens. */
struct seq {
    int32_t prompt[N_PROMPT];
    int32_t gen[N_GEN];
};

struct reference {
    const pi_model *model;
    const char *path;
    int64_t n_vocab;
    int can_decode;
    struct seq seq;
    float *logits;      /* N_STEPS * n_vocab */
    int32_t greedy[N_STEPS]; /* greedy token after each step */
    /* query answers */
    char arch[64];
    int64_t meta_count, n_tensors, n_layer;
    uint64_t n_params;
    uint64_t meta_hash, tensor_hash;
    int64_t n_tok;       /* tokens of TEXT, or PI_ERR_UNSUPPORTED */
    int32_t tok[64];
    uint64_t piece_hash;
    uint64_t detok_hash; /* the text of tok[] through a pi_detok */
};

static const char TEXT[] = "Hello world, this is a thread-safety test: \xc3\xa9t\xc3\xa9 1234!";

struct worker {
    const struct reference *ref;
    int index;
    uint32_t n_threads;
    int rounds;
    int failures;
    char msg[256];
};

static pthread_mutex_t g_print_lock = PTHREAD_MUTEX_INITIALIZER;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void report(struct worker *w, const char *fmt, ...);
static void report(struct worker *w, const char *fmt, ...)
{
    va_list ap;
    w->failures++;
    if (w->failures > 3)
        return; /* the first few are enough */
    pthread_mutex_lock(&g_print_lock);
    fprintf(stderr, "FAIL %s worker %d: ", w->ref->path, w->index);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&g_print_lock);
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ul;
    return h;
}

/* Every metadata key and value as text. */
static uint64_t hash_meta(const pi_model *m)
{
    uint64_t h = 14695981039346656037ull;
    char buf[512];
    int64_t n = pi_model_meta_count(m);
    for (int64_t i = 0; i < n; i++) {
        const char *key = pi_model_meta_key(m, i);
        if (key == NULL)
            return 0;
        h = hash_bytes(h, key, strlen(key));
        int type = -1, elem = -1;
        uint64_t ne = 0;
        if (pi_model_meta_type(m, key, &type, &elem, &ne) != PI_OK)
            return 0;
        h = hash_bytes(h, &type, sizeof type);
        h = hash_bytes(h, &ne, sizeof ne);
        int64_t len = pi_model_meta_to_string(m, key, 8, buf, sizeof buf);
        if (len < 0)
            return 0;
        h = hash_bytes(h, buf, strlen(buf));
        int64_t iv;
        if (pi_model_meta_int(m, key, &iv) == PI_OK)
            h = hash_bytes(h, &iv, sizeof iv);
    }
    return h;
}

/* Every tensor's name, type, shape and size, and a lookup by name. */
static uint64_t hash_tensors(const pi_model *m)
{
    uint64_t h = 14695981039346656037ull;
    int64_t n = pi_model_n_tensors(m);
    for (int64_t i = 0; i < n; i++) {
        const char *name = pi_model_tensor_name(m, i);
        int64_t found = -1, dims[4];
        int nd = 0;
        if (name == NULL || pi_model_tensor_find(m, name, &found) != PI_OK || found != i ||
            pi_model_tensor_shape(m, i, &nd, dims) != PI_OK)
            return 0;
        int type = pi_model_tensor_type(m, i);
        uint64_t nb = pi_model_tensor_nbytes(m, i);
        h = hash_bytes(h, name, strlen(name));
        h = hash_bytes(h, &type, sizeof type);
        h = hash_bytes(h, dims, sizeof dims);
        h = hash_bytes(h, &nb, sizeof nb);
    }
    return h;
}

/* The pieces of every token of the vocabulary (at most the first 4096). */
static uint64_t hash_pieces(const pi_model *m, int64_t n_vocab)
{
    uint64_t h = 14695981039346656037ull;
    char buf[256];
    for (int32_t t = 0; t < n_vocab && t < 4096; t++) {
        int64_t len = pi_token_to_piece(m, t, buf, sizeof buf, PI_PIECE_SPECIAL);
        h = hash_bytes(h, &len, sizeof len);
        if (len > 0)
            h = hash_bytes(h, buf, strlen(buf));
    }
    return h;
}

static int hash_text(void *user, const char *text, size_t len)
{
    uint64_t *h = user;
    *h = hash_bytes(*h, text, len);
    return 0;
}

static uint64_t hash_detok(const pi_model *m, const int32_t *tok, int64_t n)
{
    uint64_t h = 14695981039346656037ull;
    pi_detok *dt = NULL;
    if (pi_detok_create(m, 0, &dt) != PI_OK)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (pi_detok_push(dt, tok[i], hash_text, &h) != PI_OK)
            h = 0;
    if (pi_detok_flush(dt, hash_text, &h) != PI_OK)
        h = 0;
    pi_detok_destroy(dt);
    return h;
}

static void query_all(const pi_model *m, struct reference *r)
{
    snprintf(r->arch, sizeof r->arch, "%s", pi_model_arch(m));
    r->meta_count = pi_model_meta_count(m);
    r->n_tensors = pi_model_n_tensors(m);
    r->n_layer = pi_model_n_layer(m);
    r->n_params = pi_model_n_params(m);
    r->meta_hash = hash_meta(m);
    r->tensor_hash = hash_tensors(m);
    r->n_tok = pi_tokenize(m, TEXT, sizeof TEXT - 1, r->tok, 64, PI_TOKENIZE_ADD_SPECIAL);
    r->piece_hash = r->n_tok >= 0 ? hash_pieces(m, r->n_vocab) : 0;
    r->detok_hash = r->n_tok >= 0 ? hash_detok(m, r->tok, r->n_tok < 64 ? r->n_tok : 64) : 0;
}

/* Decode the sequence on `ctx`, calling `check(step, logits, token)` after each step. */
static int run_sequence(pi_ctx *ctx, pi_sampler *smp, const struct seq *s, float *out,
                        int32_t *greedy, int64_t n_vocab)
{
    int st = pi_ctx_decode(ctx, s->prompt, N_PROMPT);
    for (int step = 0; st == PI_OK && step < N_STEPS; step++) {
        memcpy(out + (size_t)step * (size_t)n_vocab, pi_ctx_logits(ctx),
               sizeof(float) * (size_t)n_vocab);
        st = pi_sample(smp, ctx, &greedy[step]);
        if (st == PI_OK && step < N_GEN)
            st = pi_ctx_decode(ctx, &s->gen[step], 1);
    }
    return st;
}

static int new_ctx(const pi_model *m, uint32_t n_threads, uint32_t stats, pi_ctx **ctx,
                   char *err, size_t cap)
{
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 64;
    cp.n_threads = n_threads;
    cp.stats = stats;
    cp.errbuf = err;
    cp.errbuf_cap = cap;
    return pi_ctx_create(m, &cp, ctx);
}

static int new_greedy(const pi_model *m, pi_sampler **smp)
{
    pi_sampler_params sp;
    pi_sampler_default_params(&sp);
    sp.temperature = 0.0f;
    return pi_sampler_create(m, &sp, smp);
}

static void *decoder(void *arg)
{
    struct worker *w = arg;
    const struct reference *r = w->ref;
    size_t nl = (size_t)N_STEPS * (size_t)r->n_vocab;
    float *logits = malloc(sizeof(float) * nl);
    int32_t greedy[N_STEPS];
    pi_ctx *ctx = NULL;
    pi_sampler *smp = NULL;
    char err[256] = "";
    int st;

    if (logits == NULL) {
        report(w, "out of memory");
        return NULL;
    }
    uint32_t stats = w->index == N_DECODERS - 1 ? PI_STATS_ON : PI_STATS_OFF;
    if ((st = new_ctx(r->model, w->n_threads, stats, &ctx, err, sizeof err)) != PI_OK ||
        (st = new_greedy(r->model, &smp)) != PI_OK) {
        report(w, "setup: %s: %s", pi_status_str(st), err);
        goto done;
    }
    if (pi_ctx_n_threads(ctx) != w->n_threads)
        report(w, "n_threads %u, asked for %u", pi_ctx_n_threads(ctx), w->n_threads);
    for (int round = 0; round < w->rounds; round++) {
        memset(logits, 0xff, sizeof(float) * nl);
        if ((st = run_sequence(ctx, smp, &r->seq, logits, greedy, r->n_vocab)) != PI_OK) {
            report(w, "round %d: %s: %s", round, pi_status_str(st), pi_ctx_errmsg(ctx));
            break;
        }
        for (int step = 0; step < N_STEPS; step++) {
            size_t off = (size_t)step * (size_t)r->n_vocab;
            if (memcmp(logits + off, r->logits + off, sizeof(float) * (size_t)r->n_vocab))
                report(w, "round %d step %d (%u threads): logits differ from the reference",
                       round, step, w->n_threads);
            if (greedy[step] != r->greedy[step])
                report(w, "round %d step %d: greedy token %d, reference %d", round, step,
                       greedy[step], r->greedy[step]);
        }
        pi_ctx_reset(ctx);
        pi_sampler_reset(smp);
    }
done:
    pi_sampler_destroy(smp);
    pi_ctx_destroy(ctx);
    free(logits);
    return NULL;
}

static void *querier(void *arg)
{
    struct worker *w = arg;
    const struct reference *r = w->ref;
    const pi_model *m = r->model;
    for (int round = 0; round < 4 * ROUNDS; round++) {
        struct reference q;
        memset(&q, 0, sizeof q);
        q.n_vocab = r->n_vocab;
        query_all(m, &q);
        if (strcmp(q.arch, r->arch) || q.meta_count != r->meta_count ||
            q.n_tensors != r->n_tensors || q.n_layer != r->n_layer ||
            q.n_params != r->n_params)
            report(w, "description differs");
        if (q.meta_hash != r->meta_hash || q.meta_hash == 0)
            report(w, "metadata differs");
        if (q.tensor_hash != r->tensor_hash || q.tensor_hash == 0)
            report(w, "tensor table differs");
        if (q.n_tok != r->n_tok ||
            (q.n_tok > 0 && memcmp(q.tok, r->tok, sizeof(int32_t) * (size_t)(q.n_tok < 64 ? q.n_tok : 64))))
            report(w, "tokenization differs (%lld tokens, reference %lld)",
                   (long long)q.n_tok, (long long)r->n_tok);
        if (q.piece_hash != r->piece_hash)
            report(w, "token pieces differ");
        /* a detokenizer of its own on the shared model */
        if (q.detok_hash != r->detok_hash)
            report(w, "detokenized text differs");
    }
    return NULL;
}

static int test_model(const char *path, int *passed)
{
    struct reference r;
    memset(&r, 0, sizeof r);
    r.path = path;
    char err[256] = "";
    pi_model_params mp;
    pi_model_default_params(&mp);
    mp.errbuf = err;
    mp.errbuf_cap = sizeof err;
    pi_model *m = NULL;
    int st = pi_model_open(path, &mp, &m);
    if (st != PI_OK) {
        fprintf(stderr, "FAIL open %s: %s: %s\n", path, pi_status_str(st), err);
        return 1;
    }
    r.model = m;
    r.n_vocab = pi_model_n_vocab(m);

    /* The reference, single-threaded, before any other thread exists. */
    for (int i = 0; i < N_PROMPT; i++)
        r.seq.prompt[i] = (int32_t)((i * 7919 + 11) % r.n_vocab);
    for (int i = 0; i < N_GEN; i++)
        r.seq.gen[i] = (int32_t)((i * 104729 + 5) % r.n_vocab);
    query_all(m, &r);
    pi_ctx *ctx = NULL;
    pi_sampler *smp = NULL;
    r.can_decode = r.n_vocab > 0 && new_ctx(m, 1, PI_STATS_OFF, &ctx, err, sizeof err) == PI_OK;
    if (r.can_decode) {
        r.logits = malloc(sizeof(float) * (size_t)N_STEPS * (size_t)r.n_vocab);
        if (r.logits == NULL || new_greedy(m, &smp) != PI_OK ||
            (st = run_sequence(ctx, smp, &r.seq, r.logits, r.greedy, r.n_vocab)) != PI_OK) {
            fprintf(stderr, "FAIL reference run on %s: %s\n", path, pi_ctx_errmsg(ctx));
            pi_sampler_destroy(smp);
            pi_ctx_destroy(ctx);
            free(r.logits);
            pi_model_close(m);
            return 1;
        }
        pi_sampler_destroy(smp);
        pi_ctx_destroy(ctx);
    }

    struct worker w[N_DECODERS + N_QUERIERS];
    pthread_t th[N_DECODERS + N_QUERIERS];
    int started[N_DECODERS + N_QUERIERS];
    int nw = 0;
    for (int i = 0; i < N_DECODERS + N_QUERIERS; i++) {
        int dec = i < N_DECODERS;
        if (dec && !r.can_decode)
            continue;
        memset(&w[nw], 0, sizeof w[nw]);
        w[nw].ref = &r;
        w[nw].index = i;
        w[nw].n_threads = (uint32_t)(i % 2 + 1);
        w[nw].rounds = ROUNDS;
        started[nw] = pthread_create(&th[nw], NULL, dec ? decoder : querier, &w[nw]) == 0;
        if (!started[nw])
            report(&w[nw], "pthread_create failed");
        nw++;
    }
    int failures = 0;
    for (int i = 0; i < nw; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        failures += w[i].failures;
    }
    /* Then one context with two workers alone, so that both really run at once and
     * contend for the chunks of each job (the other threads above keep the cores
     * oversubscribed). */
    if (r.can_decode) {
        struct worker solo;
        memset(&solo, 0, sizeof solo);
        solo.ref = &r;
        solo.index = N_DECODERS + N_QUERIERS;
        solo.n_threads = 2;
        solo.rounds = SOLO_ROUNDS;
        decoder(&solo);
        failures += solo.failures;
    }
    printf("%s %s: %d decoder and %d query threads%s\n", failures ? "not ok" : "ok", path,
           r.can_decode ? N_DECODERS : 0, N_QUERIERS,
           r.can_decode ? "" : " (no weights to decode with)");
    free(r.logits);
    pi_model_close(m);
    if (!failures)
        ++*passed;
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL...\n", argv[0]);
        return 2;
    }
    int passed = 0, failed = 0;
    for (int i = 1; i < argc; i++)
        failed += test_model(argv[i], &passed);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
