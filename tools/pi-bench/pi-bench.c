/* pi-bench -- prompt-processing and decode speed of a model, the machine's memory read
 * bandwidth, and the decode efficiency
 *     eta = (weight bytes read per token) x (tokens/s) / (measured read bandwidth).
 * Uses only the public API. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "powerinfer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct stats {
    double median, min, max;
};

static struct stats summarize(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    struct stats s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
    return s;
}

/* ---- memory bandwidth: each thread sums its slice of a large buffer ---------------- */

struct bw_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
};

static void *bw_thread(void *arg) {
    struct bw_job *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static double read_bandwidth(int threads, size_t bytes, int reps) {
    uint64_t *buf = malloc(bytes);
    if (!buf)
        return 0.0;
    size_t n = bytes / 8;
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    double best = 0.0;
    uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        pthread_t th[64];
        struct bw_job jobs[64];
        int nt = threads < 64 ? threads : 64;
        double t0 = now_s();
        for (int t = 0; t < nt; t++) {
            size_t lo = n / (size_t)nt * (size_t)t, hi = t == nt - 1 ? n : n / (size_t)nt * (size_t)(t + 1);
            jobs[t] = (struct bw_job){buf + lo, hi - lo, 0};
            pthread_create(&th[t], NULL, bw_thread, &jobs[t]);
        }
        for (int t = 0; t < nt; t++) {
            pthread_join(th[t], NULL);
            sink += jobs[t].sum;
        }
        double gbs = (double)bytes / (now_s() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    free(buf);
    return sink == 1 ? 0.0 : best; /* use the sums so they are not optimised away */
}

/* Weight bytes a decode step reads: every tensor once, except that the embedding
 * table contributes one row (or all of it when it doubles as the output matrix). */
static uint64_t bytes_per_token(const pi_model *m) {
    uint64_t total = pi_model_size_bytes(m);
    int64_t emb, out;
    if (pi_model_tensor_find(m, "token_embd.weight", &emb) == PI_OK &&
        pi_model_tensor_find(m, "output.weight", &out) == PI_OK) {
        uint64_t eb = pi_model_tensor_nbytes(m, emb);
        total -= eb - eb / (uint64_t)pi_model_n_vocab(m);
    }
    return total;
}

static void usage(void) {
    fprintf(stderr,
            "usage: pi-bench -m MODEL.gguf [-t THREADS] [-p PROMPT_TOKENS] [-n GEN_TOKENS]\n"
            "                [-r REPETITIONS] [--no-bandwidth]\n"
            "  Defaults: -p 128 -n 64 -r 5, threads = all processors.\n");
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int threads = 0, n_prompt = 128, n_gen = 64, reps = 5, probe_bw = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--no-bandwidth")) {
            probe_bw = 0;
        } else if (i + 1 < argc && (!strcmp(a, "-m") || !strcmp(a, "--model"))) {
            path = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "-t")) {
            threads = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(a, "-p")) {
            n_prompt = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(a, "-n")) {
            n_gen = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(a, "-r")) {
            reps = atoi(argv[++i]);
        } else {
            usage();
            return 2;
        }
    }
    if (!path || threads < 0 || n_prompt < 1 || n_gen < 1 || reps < 1 || reps > 1000) {
        usage();
        return 2;
    }
    char err[512] = "";
    pi_model_params mp;
    pi_model_default_params(&mp);
    mp.errbuf = err;
    mp.errbuf_cap = sizeof err;
    pi_model *m;
    double t0 = now_s();
    int st = pi_model_open(path, &mp, &m);
    if (st != PI_OK) {
        fprintf(stderr, "pi-bench: %s\n", err);
        return 1;
    }
    double load_ms = (now_s() - t0) * 1e3;
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_threads = (uint32_t)threads;
    cp.n_ctx = (uint32_t)(n_prompt + n_gen + 8);
    cp.n_batch = (uint32_t)n_prompt;
    pi_ctx *c;
    if ((st = pi_ctx_create(m, &cp, &c)) != PI_OK) {
        fprintf(stderr, "pi-bench: cannot create a context: %s\n", pi_status_str(st));
        pi_model_close(m);
        return 1;
    }
    const int64_t n_vocab = pi_model_n_vocab(m);
    int32_t *toks = malloc(sizeof *toks * (size_t)(n_prompt + n_gen));
    double *pp = malloc(sizeof *pp * (size_t)reps), *tg = malloc(sizeof *tg * (size_t)reps);
    if (!toks || !pp || !tg)
        return 1;
    uint32_t rng = 12345;
    for (int i = 0; i < n_prompt + n_gen; i++) {
        rng = rng * 1664525u + 1013904223u;
        toks[i] = (int32_t)((rng >> 8) % (uint32_t)n_vocab);
    }
    /* warm-up: touch every weight once */
    pi_ctx_decode(c, toks, (size_t)n_prompt);
    for (int r = 0; r < reps; r++) {
        pi_ctx_reset(c);
        double s = now_s();
        if ((st = pi_ctx_decode(c, toks, (size_t)n_prompt)) != PI_OK)
            break;
        pp[r] = n_prompt / (now_s() - s);
        s = now_s();
        for (int i = 0; i < n_gen && st == PI_OK; i++)
            st = pi_ctx_decode(c, &toks[n_prompt + i], 1);
        tg[r] = n_gen / (now_s() - s);
    }
    if (st != PI_OK) {
        fprintf(stderr, "pi-bench: decode failed: %s\n", pi_ctx_errmsg(c));
        return 1;
    }
    struct stats sp = summarize(pp, reps), sg = summarize(tg, reps);
    uint32_t nt = pi_ctx_n_threads(c);
    uint64_t bpt = bytes_per_token(m);
    double bw = probe_bw ? read_bandwidth((int)nt, (size_t)1 << 30, 5) : 0.0;

    printf("model:       %s\n", path);
    printf("arch:        %s, %s, %" PRId64 " layers, n_embd %" PRId64 ", %.1f MiB of weights\n",
           pi_model_arch(m), pi_model_is_sparse(m) ? "sparse" : "dense", pi_model_n_layer(m),
           pi_model_n_embd(m), (double)pi_model_size_bytes(m) / 1048576.0);
    printf("threads:     %u, load %.1f ms\n", nt, load_ms);
    printf("| test   | tokens | t/s median | t/s min | t/s max |\n");
    printf("|--------|-------:|-----------:|--------:|--------:|\n");
    printf("| pp%-4d | %6d | %10.2f | %7.2f | %7.2f |\n", n_prompt, n_prompt, sp.median, sp.min,
           sp.max);
    printf("| tg%-4d | %6d | %10.2f | %7.2f | %7.2f |\n", n_gen, n_gen, sg.median, sg.min, sg.max);
    printf("weights read per decoded token: %.1f MiB\n", (double)bpt / 1048576.0);
    if (bw > 0) {
        double eta = (double)bpt * sg.median / (bw * 1e9);
        printf("read bandwidth (%u threads): %.2f GB/s -> decode ceiling %.2f t/s, eta %.3f\n", nt,
               bw, bw * 1e9 / (double)bpt, eta);
    }
    free(toks);
    free(pp);
    free(tg);
    pi_ctx_destroy(c);
    pi_model_close(m);
    return 0;
}
