/* sampler_bench.c -- time pi_sample_logits on a model's own logits, for several sampler
 * settings: what one token's sampling costs next to its decode.
 *
 *     build/tools/pi-bench-sampler MODEL.gguf [REPS]
 *
 * Prints, per setting, the median over 5 rounds of REPS draws (default 200) in ms per
 * token. Not installed; figures in docs/performance.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char cli_prog[] = "pi-bench-sampler";

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || argv[1][0] == '-') {
        fprintf(stderr, "usage: pi-bench-sampler MODEL.gguf [REPS]\n");
        return 2;
    }
    long reps = 200;
    if (argc == 3 && cli_parse_long("REPS", argv[2], 10, 1, 1000000, &reps))
        return 2;
    pi_model *m;
    if (cli_model_open(argv[1], 0, &m))
        return 1;
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 64;
    pi_ctx *c;
    if (cli_ctx_create(m, &cp, &c)) {
        pi_model_close(m);
        return 1;
    }
    /* logits of a real shape: the model's own after a short prompt */
    const char *prompt = "Once upon a time, in a small village,";
    int32_t toks[64];
    int64_t nt = pi_tokenize(m, prompt, strlen(prompt), toks, 64, 0);
    int rc = 1;
    const int64_t nv = pi_model_n_vocab(m);
    float *logits = malloc((size_t)nv * sizeof *logits);
    if (nt <= 0 || !logits || pi_ctx_decode(c, toks, nt) != PI_OK) {
        fprintf(stderr, "pi-bench-sampler: cannot decode the prompt: %s\n", pi_ctx_errmsg(c));
        goto done;
    }
    memcpy(logits, pi_ctx_logits(c), (size_t)nv * sizeof *logits);
    static const struct {
        int32_t top_k;
        float top_p, min_p, temp;
    } cfg[] = {
        {0, 1.0f, 0.0f, 0.0f},    {40, 0.95f, 0.05f, 0.8f}, {0, 1.0f, 0.0f, 1.0f},
        {0, 0.95f, 0.0f, 1.0f},   {0, 1.0f, 0.05f, 1.0f},   {0, 0.95f, 0.05f, 1.0f},
    };
    printf("vocabulary %lld, %ld draws per round, median of 5 rounds\n", (long long)nv, reps);
    printf("| top_k | top_p | min_p | temperature | ms/token |\n|--:|--:|--:|--:|--:|\n");
    for (size_t j = 0; j < sizeof cfg / sizeof *cfg; j++) {
        pi_sampler_params sp;
        pi_sampler_default_params(&sp);
        sp.top_k = cfg[j].top_k;
        sp.top_p = cfg[j].top_p;
        sp.min_p = cfg[j].min_p;
        sp.temperature = cfg[j].temp;
        pi_sampler *s;
        int st = pi_sampler_create(m, &sp, &s);
        if (st != PI_OK) {
            cli_fail("pi_sampler_create", st, NULL);
            goto done;
        }
        double round_ms[5];
        for (int r = 0; r < 5; r++) {
            double t0 = cli_now_s();
            int32_t tok;
            for (long i = 0; i < reps; i++)
                pi_sample_logits(s, logits, nv, &tok);
            round_ms[r] = (cli_now_s() - t0) / (double)reps * 1e3;
        }
        pi_sampler_destroy(s);
        qsort(round_ms, 5, sizeof *round_ms, cmp_double);
        printf("| %d | %.2f | %.2f | %.1f | %.3f |\n", cfg[j].top_k, cfg[j].top_p, cfg[j].min_p,
               cfg[j].temp, round_ms[2]);
    }
    rc = 0;
done:
    free(logits);
    pi_ctx_destroy(c);
    pi_model_close(m);
    return rc;
}
