/*
 * simple.c -- the smallest complete generation loop with libpowerinfer.
 *
 *   cc -std=c11 simple.c $(pkg-config --cflags --libs powerinfer) -o simple
 *   ./simple MODEL.gguf "The capital of France is" [N_TOKENS] [TEMPERATURE]
 *
 * Open the model, tokenize the prompt, decode it, then pick one token at a time
 * (greedy when TEMPERATURE is 0, the default; sampled otherwise), decode it, and
 * stream its text through a detokenizer, which never splits a UTF-8 character.
 * Every failure prints the library's own message for the handle that failed.
 *
 * SPDX-License-Identifier: MIT
 */
#include <powerinfer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The detokenizer's text sink: the bytes are complete UTF-8, not NUL-terminated. */
static int print_text(void *user, const char *text, size_t len)
{
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL PROMPT [N_TOKENS] [TEMPERATURE]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    const char *prompt = argv[2];
    int n_predict = argc > 3 ? atoi(argv[3]) : 32;
    float temperature = argc > 4 ? (float)atof(argv[4]) : 0.0f;

    pi_model *model = NULL;
    pi_ctx *ctx = NULL;
    pi_sampler *sampler = NULL;
    pi_detok *detok = NULL;
    int32_t *tokens = NULL;
    int rc = 1;
    int st;

    /* 1. Open. There is no handle yet if this fails, so the message goes to a
     *    caller buffer. */
    char errbuf[256] = "";
    pi_model_params mp;
    pi_model_default_params(&mp);
    mp.errbuf = errbuf;
    mp.errbuf_cap = sizeof errbuf;
    if ((st = pi_model_open(path, &mp, &model)) != PI_OK) {
        fprintf(stderr, "open %s: %s: %s\n", path, pi_status_str(st), errbuf);
        return 1;
    }

    /* 2. Tokenize: ask for the length first, then fill an array of that size. */
    uint32_t tflags = PI_TOKENIZE_ADD_SPECIAL;
    int64_t n = pi_tokenize(model, prompt, strlen(prompt), NULL, 0, tflags);
    if (n < 0) {
        fprintf(stderr, "tokenize: %s: %s\n", pi_status_str((int)n), pi_model_errmsg(model));
        goto done;
    }
    if (n == 0) {
        fprintf(stderr, "tokenize: the prompt gave no tokens\n");
        goto done;
    }
    tokens = malloc((size_t)n * sizeof *tokens);
    if (tokens == NULL) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    pi_tokenize(model, prompt, strlen(prompt), tokens, (size_t)n, tflags);

    /* 3. A context (its KV cache and worker threads), a sampler and a detokenizer. */
    char cerr[256] = "";
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = (uint32_t)n + (uint32_t)(n_predict > 0 ? n_predict : 0) + 1;
    cp.errbuf = cerr;
    cp.errbuf_cap = sizeof cerr;
    if ((st = pi_ctx_create(model, &cp, &ctx)) != PI_OK) {
        fprintf(stderr, "context: %s: %s\n", pi_status_str(st), cerr);
        goto done;
    }
    pi_sampler_params sp;
    pi_sampler_default_params(&sp);
    sp.temperature = temperature; /* <= 0: greedy */
    if ((st = pi_sampler_create(model, &sp, &sampler)) != PI_OK ||
        (st = pi_detok_create(model, 0, &detok)) != PI_OK) {
        fprintf(stderr, "sampler/detokenizer: %s\n", pi_status_str(st));
        goto done;
    }

    /* 4. Decode the prompt in one call; the sampler's penalties see it too. */
    if ((st = pi_ctx_decode(ctx, tokens, (size_t)n)) != PI_OK) {
        fprintf(stderr, "decode: %s: %s\n", pi_status_str(st), pi_ctx_errmsg(ctx));
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        pi_sampler_accept(sampler, tokens[i]);

    /* 5. Generate: choose, stop at end-of-generation, print, decode the choice. */
    fputs(prompt, stdout);
    for (int i = 0; i < n_predict; i++) {
        int32_t tok;
        if ((st = pi_sample(sampler, ctx, &tok)) != PI_OK) {
            fprintf(stderr, "\nsample: %s\n", pi_status_str(st));
            goto done;
        }
        if (pi_model_token_is_eog(model, tok))
            break;
        pi_detok_push(detok, tok, print_text, NULL);
        if ((st = pi_ctx_decode(ctx, &tok, 1)) != PI_OK) {
            fprintf(stderr, "\ndecode: %s: %s\n", pi_status_str(st), pi_ctx_errmsg(ctx));
            goto done;
        }
    }
    pi_detok_flush(detok, print_text, NULL);
    putchar('\n');
    rc = 0;

done:
    /* 6. Clean up in reverse order; every destructor accepts NULL. The model goes
     *    last: the context, sampler and detokenizer borrow it. */
    pi_detok_destroy(detok);
    pi_sampler_destroy(sampler);
    pi_ctx_destroy(ctx);
    free(tokens);
    pi_model_close(model);
    return rc;
}
