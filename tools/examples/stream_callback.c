/*
 * stream_callback.c -- a one-call generation helper built on the public API.
 *
 *   cc -std=c11 stream_callback.c $(pkg-config --cflags --libs powerinfer) -o stream
 *   ./stream MODEL.gguf "Once upon a time" [N_TOKENS]
 *
 * generate() hides the context, sampler and detokenizer: it takes a model, a prompt
 * and a callback that receives each piece of text as soon as it is complete UTF-8.
 * The callback can stop generation early by returning non-zero. Errors come back as
 * a status plus a message in a caller buffer, the library's own convention.
 *
 * SPDX-License-Identifier: MIT
 */
#include <powerinfer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Receives `len` bytes of text (not NUL-terminated); return 0 to go on. */
typedef int (*text_callback)(void *user, const char *text, size_t len);

struct generate_opts {
    int n_predict;     /* most tokens to generate */
    float temperature; /* <= 0: greedy */
    uint64_t seed;
    uint32_t n_threads; /* 0: all processors */
};

/*
 * Decode `prompt` and stream up to opts->n_predict generated tokens' text to `cb`.
 * Returns PI_OK (also when the model ended the text or the callback stopped it), or a
 * negative PI_ERR_* status with a message in errbuf.
 */
static int generate(const pi_model *model, const char *prompt,
                    const struct generate_opts *opts, text_callback cb, void *user,
                    char *errbuf, size_t errbuf_cap)
{
    pi_ctx *ctx = NULL;
    pi_sampler *sampler = NULL;
    pi_detok *detok = NULL;
    int32_t *tokens = NULL;
    int st;

    int64_t n = pi_tokenize(model, prompt, strlen(prompt), NULL, 0, PI_TOKENIZE_ADD_SPECIAL);
    if (n <= 0) {
        st = n < 0 ? (int)n : PI_ERR_INVALID_ARG;
        snprintf(errbuf, errbuf_cap, "tokenize: %s", n < 0 ? pi_status_str(st) : "empty prompt");
        return st;
    }
    tokens = malloc((size_t)n * sizeof *tokens);
    if (tokens == NULL) {
        snprintf(errbuf, errbuf_cap, "out of memory");
        return PI_ERR_NOMEM;
    }
    pi_tokenize(model, prompt, strlen(prompt), tokens, (size_t)n, PI_TOKENIZE_ADD_SPECIAL);

    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = (uint32_t)n + (uint32_t)opts->n_predict + 1;
    cp.n_threads = opts->n_threads;
    cp.errbuf = errbuf;
    cp.errbuf_cap = errbuf_cap;
    if ((st = pi_ctx_create(model, &cp, &ctx)) != PI_OK)
        goto done;

    pi_sampler_params sp;
    pi_sampler_default_params(&sp);
    sp.temperature = opts->temperature;
    sp.seed = opts->seed;
    if ((st = pi_sampler_create(model, &sp, &sampler)) != PI_OK ||
        (st = pi_detok_create(model, 0, &detok)) != PI_OK) {
        snprintf(errbuf, errbuf_cap, "sampler: %s", pi_status_str(st));
        goto done;
    }

    if ((st = pi_ctx_decode(ctx, tokens, (size_t)n)) != PI_OK) {
        snprintf(errbuf, errbuf_cap, "%s", pi_ctx_errmsg(ctx));
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        pi_sampler_accept(sampler, tokens[i]);

    for (int i = 0; i < opts->n_predict; i++) {
        int32_t tok;
        if ((st = pi_sample(sampler, ctx, &tok)) != PI_OK) {
            snprintf(errbuf, errbuf_cap, "sample: %s", pi_status_str(st));
            goto done;
        }
        if (pi_model_token_is_eog(model, tok))
            break;
        st = pi_detok_push(detok, tok, cb, user);
        if (st == PI_ERR_ABORTED) { /* the callback asked to stop */
            st = PI_OK;
            goto done;
        }
        if (st != PI_OK) {
            snprintf(errbuf, errbuf_cap, "detokenize: %s", pi_status_str(st));
            goto done;
        }
        if ((st = pi_ctx_decode(ctx, &tok, 1)) != PI_OK) {
            snprintf(errbuf, errbuf_cap, "%s", pi_ctx_errmsg(ctx));
            goto done;
        }
    }
    st = pi_detok_flush(detok, cb, user);
    if (st == PI_ERR_ABORTED)
        st = PI_OK;

done:
    pi_detok_destroy(detok);
    pi_sampler_destroy(sampler);
    pi_ctx_destroy(ctx);
    free(tokens);
    return st;
}

/* ---- a user of the helper ------------------------------------------------------- */

struct printer {
    size_t bytes; /* text seen so far */
    size_t limit; /* stop once this much text has arrived (0: no limit) */
};

static int print_piece(void *user, const char *text, size_t len)
{
    struct printer *p = user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    p->bytes += len;
    return p->limit != 0 && p->bytes >= p->limit; /* non-zero stops generate() */
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL PROMPT [N_TOKENS]\n", argv[0]);
        return 2;
    }
    char err[256] = "";
    pi_model_params mp;
    pi_model_default_params(&mp);
    mp.errbuf = err;
    mp.errbuf_cap = sizeof err;
    pi_model *model = NULL;
    int st = pi_model_open(argv[1], &mp, &model);
    if (st != PI_OK) {
        fprintf(stderr, "open %s: %s: %s\n", argv[1], pi_status_str(st), err);
        return 1;
    }

    struct generate_opts opts = {argc > 3 ? atoi(argv[3]) : 32, 0.7f, 42, 0};
    struct printer pr = {0, 4096};
    st = generate(model, argv[2], &opts, print_piece, &pr, err, sizeof err);
    putchar('\n');
    if (st != PI_OK)
        fprintf(stderr, "generate: %s: %s\n", pi_status_str(st), err);
    else
        fprintf(stderr, "[%zu bytes of text]\n", pr.bytes);
    pi_model_close(model);
    return st == PI_OK ? 0 : 1;
}
