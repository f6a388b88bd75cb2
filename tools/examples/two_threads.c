/*
 * two_threads.c -- one model, two contexts, two threads.
 *
 *   cc -std=c11 two_threads.c $(pkg-config --cflags --libs powerinfer) -lpthread -o two
 *   ./two MODEL.gguf "The sky is" "My favourite food is" [N_TOKENS]
 *
 * The threading contract in powerinfer.h: a model is immutable once opened and may be
 * shared by any number of contexts on any threads; each context is used by one thread
 * at a time. So the model is opened once, and each thread creates, uses and destroys
 * its own context, sampler and detokenizer. Each thread collects its text in its own
 * buffer; main prints both once the threads have joined.
 *
 * SPDX-License-Identifier: MIT
 */
#include <powerinfer.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct job {
    const pi_model *model; /* shared, read-only */
    const char *prompt;
    int n_predict;
    /* results, written by the job's thread only */
    int status;
    char err[256];
    char text[4096];
    size_t len;
};

static int append_text(void *user, const char *text, size_t len)
{
    struct job *j = user;
    size_t room = sizeof j->text - 1 - j->len;
    if (len > room)
        len = room; /* a UTF-8 sequence may be cut here; fine for a demo */
    memcpy(j->text + j->len, text, len);
    j->len += len;
    j->text[j->len] = '\0';
    return 0;
}

static void *run_job(void *arg)
{
    struct job *j = arg;
    const pi_model *model = j->model;
    pi_ctx *ctx = NULL;
    pi_sampler *sampler = NULL;
    pi_detok *detok = NULL;
    int32_t tokens[512];
    int st;

    int64_t n = pi_tokenize(model, j->prompt, strlen(j->prompt), tokens, 512,
                            PI_TOKENIZE_ADD_SPECIAL);
    if (n <= 0 || n > 512) {
        st = n < 0 ? (int)n : PI_ERR_RANGE;
        snprintf(j->err, sizeof j->err, "tokenize: %lld tokens", (long long)n);
        goto done;
    }

    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = (uint32_t)n + (uint32_t)j->n_predict + 1;
    cp.n_threads = 1; /* the two contexts already keep two cores busy */
    cp.errbuf = j->err;
    cp.errbuf_cap = sizeof j->err;
    if ((st = pi_ctx_create(model, &cp, &ctx)) != PI_OK)
        goto done;

    pi_sampler_params sp;
    pi_sampler_default_params(&sp);
    sp.temperature = 0.0f; /* greedy: the same text on every run */
    if ((st = pi_sampler_create(model, &sp, &sampler)) != PI_OK ||
        (st = pi_detok_create(model, 0, &detok)) != PI_OK) {
        snprintf(j->err, sizeof j->err, "sampler: %s", pi_status_str(st));
        goto done;
    }
    if ((st = pi_ctx_decode(ctx, tokens, (size_t)n)) != PI_OK) {
        snprintf(j->err, sizeof j->err, "%s", pi_ctx_errmsg(ctx));
        goto done;
    }
    for (int i = 0; i < j->n_predict; i++) {
        int32_t tok;
        if ((st = pi_sample(sampler, ctx, &tok)) != PI_OK) {
            snprintf(j->err, sizeof j->err, "sample: %s", pi_status_str(st));
            goto done;
        }
        if (pi_model_token_is_eog(model, tok))
            break;
        pi_detok_push(detok, tok, append_text, j);
        if ((st = pi_ctx_decode(ctx, &tok, 1)) != PI_OK) {
            snprintf(j->err, sizeof j->err, "%s", pi_ctx_errmsg(ctx));
            goto done;
        }
    }
    st = pi_detok_flush(detok, append_text, j);

done:
    pi_detok_destroy(detok);
    pi_sampler_destroy(sampler);
    pi_ctx_destroy(ctx);
    j->status = st;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL PROMPT1 PROMPT2 [N_TOKENS]\n", argv[0]);
        return 2;
    }
    int n_predict = argc > 4 ? atoi(argv[4]) : 24;

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

    static struct job jobs[2]; /* static: 8 KiB of results stay off the stack */
    pthread_t threads[2];
    int started[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        jobs[i].model = model;
        jobs[i].prompt = argv[2 + i];
        jobs[i].n_predict = n_predict;
        jobs[i].status = PI_ERR_INTERNAL;
        started[i] = pthread_create(&threads[i], NULL, run_job, &jobs[i]) == 0;
        if (!started[i])
            snprintf(jobs[i].err, sizeof jobs[i].err, "pthread_create failed");
    }
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        if (jobs[i].status != PI_OK) {
            fprintf(stderr, "thread %d: %s: %s\n", i + 1, pi_status_str(jobs[i].status),
                    jobs[i].err);
            rc = 1;
        } else {
            printf("[thread %d] %s%s\n", i + 1, jobs[i].prompt, jobs[i].text);
        }
    }
    /* Only after both threads are done with it. */
    pi_model_close(model);
    return rc;
}
