/* pi-bench -- prompt-processing and decode speed of a model, the machine's memory read
 * bandwidth, and the decode efficiency
 *     eta = (weight bytes read per token) x (tokens/s) / (measured read bandwidth).
 * Uses only the public API. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cli.h"
#include "device.h"
#include "powerinfer.h"
#include "telemetry.h"

const char cli_prog[] = "pi-bench";

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

/* ---- memory bandwidth: each thread sums its slice of a large buffer ----------------
 *
 * The threads are started once and meet at a barrier before and after every pass, so a
 * pass's time is the reading alone (thread start-up was inside it before, and made the
 * figure depend on the scheduler). The result is the median pass with the spread. */

struct bw_shared {
    pthread_barrier_t start, done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go; /* 0: wait; 1: every thread started, run; -1: one did not, return */
    int reps;
};

struct bw_job {
    struct bw_shared *sh;
    const uint64_t *p;
    size_t n;
    uint64_t sum;
};

static uint64_t bw_sum(const uint64_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

static void *bw_thread(void *arg) {
    struct bw_job *j = arg;
    pthread_mutex_lock(&j->sh->mu);
    while (j->sh->go == 0)
        pthread_cond_wait(&j->sh->cv, &j->sh->mu);
    const int go = j->sh->go;
    pthread_mutex_unlock(&j->sh->mu);
    if (go < 0)
        return NULL;
    for (int r = 0; r < j->sh->reps; r++) {
        pthread_barrier_wait(&j->sh->start);
        j->sum += bw_sum(j->p, j->n);
        pthread_barrier_wait(&j->sh->done);
    }
    return NULL;
}

struct bw_result {
    struct stats gbs; /* GB/s over the passes */
    int passes;
};

/* `reps` passes over `bytes` with `threads` threads (the calling one included); all
 * zero when the buffer or a thread cannot be had. */
static struct bw_result read_bandwidth(int threads, size_t bytes, int reps) {
    struct bw_result res = {{0.0, 0.0, 0.0}, 0};
    enum { MAX_T = 64, MAX_R = 32 };
    const int nt = threads < 1 ? 1 : threads < MAX_T ? threads : MAX_T;
    reps = reps < 1 ? 1 : reps < MAX_R ? reps : MAX_R;
    /* in 2 MiB pages where the system has them, as the library asks for the model's
     * bytes: with 4 KiB pages the probe measured the TLB too (26.5 GB/s where decode
     * read 31 on a Zen 4) */
    const size_t huge = (size_t)2 << 20;
    bytes = (bytes + huge - 1) / huge * huge;
    void *mem = malloc(bytes + huge); /* not aligned_alloc: MinGW's C library has none */
    if (!mem)
        return res;
    uint64_t *buf = (uint64_t *)(((uintptr_t)mem + huge - 1) & ~(uintptr_t)(huge - 1));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    const size_t n = bytes / 8;
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    struct bw_shared sh = {.reps = reps};
    pthread_t th[MAX_T];
    struct bw_job jobs[MAX_T];
    int started = 0;
    if (pthread_barrier_init(&sh.start, NULL, (unsigned)nt) != 0) {
        free(mem);
        return res;
    }
    if (pthread_barrier_init(&sh.done, NULL, (unsigned)nt) != 0) {
        pthread_barrier_destroy(&sh.start);
        free(mem);
        return res;
    }
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    for (int t = 0; t < nt; t++) {
        const size_t lo = n / (size_t)nt * (size_t)t;
        const size_t hi = t == nt - 1 ? n : n / (size_t)nt * (size_t)(t + 1);
        jobs[t] = (struct bw_job){&sh, buf + lo, hi - lo, 0};
    }
    for (int t = 1; t < nt; t++) {
        if (pthread_create(&th[t], NULL, bw_thread, &jobs[t]) != 0)
            break;
        started++;
    }
    /* the barriers need every thread: run only when all started, else let them go */
    pthread_mutex_lock(&sh.mu);
    sh.go = started == nt - 1 ? 1 : -1;
    pthread_cond_broadcast(&sh.cv);
    pthread_mutex_unlock(&sh.mu);
    double gbs[MAX_R];
    uint64_t sink = 0;
    if (sh.go > 0)
        for (int r = 0; r < reps; r++) {
            pthread_barrier_wait(&sh.start);
            const double t0 = cli_now_s();
            jobs[0].sum += bw_sum(jobs[0].p, jobs[0].n);
            pthread_barrier_wait(&sh.done);
            gbs[r] = (double)bytes / (cli_now_s() - t0) / 1e9;
        }
    for (int t = 1; t <= started; t++) {
        pthread_join(th[t], NULL);
        sink += jobs[t].sum;
    }
    if (sh.go > 0) {
        res.gbs = summarize(gbs, reps);
        res.passes = reps;
    }
    pthread_cond_destroy(&sh.cv);
    pthread_mutex_destroy(&sh.mu);
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.done);
    sink += jobs[0].sum;
    free(mem);
    if (sink == 1) /* use the sums so that they are not optimised away */
        res.gbs.median = 0.0;
    return res;
}

static void usage(void) {
    fprintf(stderr,
            "usage: pi-bench -m MODEL.gguf [-t THREADS] [-p PROMPT_TOKENS] [-n GEN_TOKENS]\n"
            "                [-r REPETITIONS] [--sparse-mode LIST] [--no-bandwidth]\n"
            "                [--telemetry] [--device gpu|cpu] [--vram-budget LIST]\n"
            "                [--device-index N] [--plan-stats FILE] [--no-graphs]\n"
            "                [--kv-type f16|q8_0|q4_0] [--kv-type-v q8_0|q4_0]\n"
            "                [--no-mmap] [--mlock]\n"
            "  Defaults: -p 128 -n 64 -r 5, threads = all processors, modes: the model's\n"
            "  default (sparse for PowerInfer files, threshold for pi-sparsify's, dense\n"
            "  otherwise), CPU only.\n"
            "  --sparse-mode LIST  comma-separated modes to run one after another on the\n"
            "                      same weights: sparse, dense, oracle, threshold\n"
            "  --telemetry         print the per-layer table of each mode's decode run\n"
            "  --vram-budget LIST  hybrid CPU/device runs: comma-separated device budgets in\n"
            "                      GiB ('auto' or negative: free memory minus 256 MiB); each\n"
            "                      mode runs once per budget (implies --device gpu)\n"
            "  --device D          gpu (the CUDA/HIP backend built in) or cpu (a second CPU\n"
            "                      backend acting as the device); alone: budget auto\n"
            "  --device-index N    which GPU (default 0)\n"
            "  --plan-stats FILE   activation statistics that rank neurons for the planner\n"
            "  --no-graphs         submit device steps op by op, not as CUDA graphs\n"
            "  --kv-type T         the KV cache's type: f16 (default), q8_0 or q4_0\n"
            "  --kv-type-v T       the values' type where it differs from the keys': q8_0\n"
            "                      or q4_0\n"
            "  --no-mmap           read the model into memory instead of mapping it\n"
            "  --mlock             lock the model in RAM; warns and goes on when refused\n");
}

struct mode_result {
    const char *name;
    char label[64]; /* name, and the budget when a device is used */
    struct stats pp, tg;
    struct tele_sum tele; /* from a separate decode run with statistics on */
    int have_tele;
    /* hybrid runs: the plan's device share */
    int have_plan;
    uint64_t budget;     /* as asked (PI_DEVICE_BUDGET_AUTO: auto) */
    double neuron_frac;  /* FFN neurons on the device / all */
    uint64_t dev_bytes;  /* bytes the plan puts on the device */
};

/* Device options shared by every run. */
struct device_opts {
    uint32_t device, index;
    const pi_stats *stats;
    uint32_t graphs;  /* PI_GRAPHS_* */
    uint32_t kv_type;   /* PI_KV_TYPE_* */
    uint32_t kv_type_v; /* the values': PI_KV_TYPE_Q8_0/_Q4_0, or 0 (as kv_type) */
};

#define MAX_MODES 8
#define MAX_BUDGETS 8

/* One --vram-budget item: GiB, 'auto' or negative (auto). 0 on success. */
static int parse_budget(const char *s, size_t n, uint64_t *out) {
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!strcmp(buf, "auto")) {
        *out = PI_DEVICE_BUDGET_AUTO;
        return 0;
    }
    char *end;
    double g = strtod(buf, &end);
    if (*end != '\0' || g != g)
        return -1;
    double b = g * 1073741824.0;
    *out = g < 0 ? PI_DEVICE_BUDGET_AUTO
           : b >= 18446744073709549568.0 ? UINT64_MAX - 1
                                         : (uint64_t)b;
    return 0;
}

static void budget_text(uint64_t b, char *buf, size_t cap) {
    if (b == PI_DEVICE_BUDGET_AUTO)
        snprintf(buf, cap, "auto");
    else
        snprintf(buf, cap, "%.2f GiB", (double)b / 1073741824.0);
}

static void record_plan(const pi_plan *pl, struct mode_result *out) {
    if (!pl)
        return;
    int64_t nl = pi_plan_n_layer(pl), nf = pi_plan_n_ff(pl), on = 0;
    for (int64_t l = 0; l < nl; l++) {
        int64_t k = pi_plan_layer_neurons(pl, l, NULL, 0);
        on += k > 0 ? k : 0;
    }
    out->have_plan = 1;
    out->neuron_frac = nl > 0 && nf > 0 ? (double)on / ((double)nl * (double)nf) : 0.0;
    out->dev_bytes = pi_plan_bytes(pl, PI_PLAN_N_PARTS);
}

static int parse_mode(const char *s, size_t n) {
    if ((n == 6 && !strncmp(s, "sparse", 6)) || (n == 9 && !strncmp(s, "predictor", 9)))
        return PI_SPARSE_PREDICTOR;
    if (n == 5 && !strncmp(s, "dense", 5))
        return PI_SPARSE_DENSE;
    if (n == 6 && !strncmp(s, "oracle", 6))
        return PI_SPARSE_ORACLE;
    if (n == 9 && !strncmp(s, "threshold", 9))
        return PI_SPARSE_THRESHOLD;
    if (n == 4 && !strncmp(s, "auto", 4))
        return PI_SPARSE_AUTO;
    return -1;
}

static const char *mode_name(int mode) {
    return mode == PI_SPARSE_PREDICTOR   ? "sparse"
           : mode == PI_SPARSE_ORACLE    ? "oracle"
           : mode == PI_SPARSE_THRESHOLD ? "threshold"
                                         : "dense";
}

/* Time prompt processing and decoding of one mode; then one more decode run with
 * statistics on for the telemetry (so the timed runs pay nothing for it). */
static int bench_mode(pi_model *m, int mode, const struct device_opts *dev, uint64_t budget,
                      int threads, int n_prompt, int n_gen, int reps, const int32_t *toks,
                      int print_tele, struct mode_result *out) {
    double *pp = malloc(sizeof *pp * (size_t)reps), *tg = malloc(sizeof *tg * (size_t)reps);
    if (!pp || !tg) {
        free(pp);
        free(tg);
        return 1;
    }
    int rc = 1;
    pi_ctx *c = NULL;
    for (int pass = 0; pass < 2; pass++) {
        pi_ctx_params cp;
        pi_ctx_default_params(&cp);
        cp.n_threads = (uint32_t)threads;
        cp.n_ctx = (uint32_t)(n_prompt + n_gen + 8);
        cp.n_batch = (uint32_t)n_prompt;
        cp.sparse_mode = (uint32_t)mode;
        cp.stats = pass ? PI_STATS_ON : PI_STATS_OFF;
        cp.device = dev->device;
        cp.device_index = dev->index;
        cp.device_budget = budget;
        cp.plan_stats = dev->stats;
        cp.device_graphs = dev->graphs;
        cp.kv_type = dev->kv_type;
        cp.kv_type_v = dev->kv_type_v;
        if (cli_ctx_create(m, &cp, &c))
            goto done;
        int st = PI_OK;
        out->name = mode_name(pi_ctx_sparse_mode(c));
        out->budget = budget;
        if (dev->device == PI_DEVICE_NONE) {
            snprintf(out->label, sizeof out->label, "%s", out->name);
        } else {
            char bt[32];
            budget_text(budget, bt, sizeof bt);
            snprintf(out->label, sizeof out->label, "%s, %s", out->name, bt);
        }
        if (pass == 0) {
            record_plan(pi_ctx_plan(c), out);
            pi_ctx_decode(c, toks, (size_t)n_prompt); /* warm-up: touch every weight */
            for (int r = 0; r < reps && st == PI_OK; r++) {
                pi_ctx_reset(c);
                double s = cli_now_s();
                if ((st = pi_ctx_decode(c, toks, (size_t)n_prompt)) != PI_OK)
                    break;
                pp[r] = n_prompt / (cli_now_s() - s);
                s = cli_now_s();
                for (int i = 0; i < n_gen && st == PI_OK; i++)
                    st = pi_ctx_decode(c, &toks[n_prompt + i], 1);
                tg[r] = n_gen / (cli_now_s() - s);
            }
            out->pp = summarize(pp, reps);
            out->tg = summarize(tg, reps);
        } else {
            st = pi_ctx_decode(c, toks, (size_t)n_prompt);
            if (st == PI_OK)
                pi_ctx_stats_reset(c); /* telemetry of the decode steps only */
            for (int i = 0; i < n_gen && st == PI_OK; i++)
                st = pi_ctx_decode(c, &toks[n_prompt + i], 1);
            if (st == PI_OK)
                out->have_tele = tele_sum(pi_ctx_stats(c), &out->tele) == 0;
            if (st == PI_OK && print_tele) {
                printf("\ntelemetry, %s mode, %d decoded tokens:\n", out->label, n_gen);
                tele_print(stdout, pi_ctx_stats(c), tele_dense_bytes(m));
            }
        }
        if (st != PI_OK) {
            fprintf(stderr, "pi-bench: decode failed: %s\n", pi_ctx_errmsg(c));
            goto done;
        }
        pi_ctx_destroy(c);
        c = NULL;
    }
    rc = 0;
done:
    pi_ctx_destroy(c);
    free(pp);
    free(tg);
    return rc;
}

int main(int argc, char **argv) {
    cli_init(&argc, &argv);
    const char *path = NULL, *modes = "auto", *budgets = NULL, *stats_path = NULL;
    struct device_opts dev = {PI_DEVICE_NONE, 0, NULL, PI_GRAPHS_AUTO, PI_KV_TYPE_F16, 0};
    int device_set = 0;
    int threads = 0, n_prompt = 128, n_gen = 64, reps = 5, probe_bw = 1, print_tele = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--no-bandwidth")) {
            probe_bw = 0;
        } else if (cli_load_option(a)) {
            /* --no-mmap, --mlock: applied by cli_model_params */
        } else if (!strcmp(a, "--telemetry")) {
            print_tele = 1;
        } else if (!strcmp(a, "--no-graphs")) {
            dev.graphs = PI_GRAPHS_OFF;
        } else if (i + 1 < argc && !strcmp(a, "--kv-type")) {
            const char *t = argv[++i];
            if (strcmp(t, "f16") && strcmp(t, "q8_0") && strcmp(t, "q4_0")) {
                fprintf(stderr, "pi-bench: --kv-type wants f16, q8_0 or q4_0, not '%s'\n", t);
                return 2;
            }
            dev.kv_type = !strcmp(t, "q8_0")   ? PI_KV_TYPE_Q8_0
                          : !strcmp(t, "q4_0") ? PI_KV_TYPE_Q4_0
                                               : PI_KV_TYPE_F16;
        } else if (i + 1 < argc && !strcmp(a, "--kv-type-v")) {
            if (cli_kv_type_v(argv[++i], &dev.kv_type_v))
                return 2;
        } else if (i + 1 < argc && (!strcmp(a, "-m") || !strcmp(a, "--model"))) {
            path = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--sparse-mode")) {
            modes = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--vram-budget")) {
            budgets = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--plan-stats")) {
            stats_path = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--device-index")) {
            dev.index = (uint32_t)atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(a, "--device")) {
            const char *d = argv[++i];
            device_set = 1;
            if (!strcmp(d, "gpu"))
                dev.device = PI_DEVICE_GPU;
            else if (!strcmp(d, "cpu"))
                dev.device = PI_DEVICE_CPU;
            else if (!strcmp(d, "none"))
                dev.device = PI_DEVICE_NONE;
            else {
                fprintf(stderr, "pi-bench: --device wants gpu, cpu or none, not '%s'\n", d);
                return 2;
            }
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
    int mode_list[MAX_MODES], n_modes = 0;
    for (const char *p = modes; *p && n_modes < MAX_MODES;) {
        size_t n = strcspn(p, ",");
        int md = parse_mode(p, n);
        if (md < 0) {
            fprintf(stderr, "pi-bench: unknown mode '%.*s'\n", (int)n, p);
            return 2;
        }
        mode_list[n_modes++] = md;
        p += n + (p[n] == ',');
    }
    if (!path || threads < 0 || n_prompt < 1 || n_gen < 1 || reps < 1 || reps > 1000 ||
        n_modes == 0) {
        usage();
        return 2;
    }
    /* Budgets: one CPU-only run per mode, or one run per mode and budget. */
    uint64_t budget_list[MAX_BUDGETS] = {PI_DEVICE_BUDGET_AUTO};
    int n_budgets = 1;
    if (budgets) {
        n_budgets = 0;
        for (const char *p = budgets; *p;) {
            size_t n = strcspn(p, ",");
            if (n_budgets == MAX_BUDGETS) {
                fprintf(stderr, "pi-bench: at most %d budgets\n", MAX_BUDGETS);
                return 2;
            }
            if (parse_budget(p, n, &budget_list[n_budgets]) != 0) {
                fprintf(stderr, "pi-bench: --vram-budget wants GiB or 'auto', not '%.*s'\n",
                        (int)n, p);
                return 2;
            }
            n_budgets++;
            p += n + (p[n] == ',');
        }
        if (n_budgets == 0) {
            usage();
            return 2;
        }
        if (!device_set)
            dev.device = PI_DEVICE_GPU;
    }
    if (dev.device == PI_DEVICE_NONE && (budgets || stats_path)) {
        fprintf(stderr, "pi-bench: %s needs a device (--device gpu|cpu)\n",
                budgets ? "--vram-budget" : "--plan-stats");
        return 2;
    }
    const int hybrid = dev.device != PI_DEVICE_NONE;
    char err[512] = "";
    pi_model_params mp;
    cli_model_params(&mp, err, sizeof err, 0);
    pi_model *m;
    double t0 = cli_now_s();
    int st = pi_model_open(path, &mp, &m);
    if (st != PI_OK) {
        fprintf(stderr, "pi-bench: %s\n", err);
        return 1;
    }
    double load_ms = (cli_now_s() - t0) * 1e3;
    pi_stats *plan_stats = NULL;
    if (stats_path) {
        st = pi_stats_load(stats_path, &plan_stats, err, sizeof err);
        if (st != PI_OK) {
            fprintf(stderr, "pi-bench: cannot read %s: %s: %s\n", stats_path, pi_status_str(st),
                    err);
            pi_model_close(m);
            return 1;
        }
        dev.stats = plan_stats;
    }
    const int64_t n_vocab = pi_model_n_vocab(m);
    int32_t *toks = malloc(sizeof *toks * (size_t)(n_prompt + n_gen));
    struct mode_result res[MAX_MODES * MAX_BUDGETS];
    memset(res, 0, sizeof res);
    if (!toks)
        return 1;
    uint32_t rng = 12345;
    for (int i = 0; i < n_prompt + n_gen; i++) {
        rng = rng * 1664525u + 1013904223u;
        toks[i] = (int32_t)((rng >> 8) % (uint32_t)n_vocab);
    }
    const int n_runs = n_modes * n_budgets;
    for (int k = 0; k < n_runs; k++)
        if (bench_mode(m, mode_list[k / n_budgets], &dev, budget_list[k % n_budgets], threads,
                       n_prompt, n_gen, reps, toks, print_tele, &res[k]) != 0)
            return 1;
    pi_stats_free(plan_stats);
    dev.stats = NULL;
    unsigned nt = threads ? (unsigned)threads : 0;
    {
        pi_ctx *c;
        pi_ctx_params cp;
        pi_ctx_default_params(&cp);
        cp.n_threads = (uint32_t)threads;
        cp.n_ctx = 8;
        cp.sparse_mode = PI_SPARSE_DENSE;
        if (pi_ctx_create(m, &cp, &c) == PI_OK) {
            nt = pi_ctx_n_threads(c);
            pi_ctx_destroy(c);
        }
    }
    const struct bw_result bwr = probe_bw ? read_bandwidth((int)nt, (size_t)1 << 30, 7)
                                          : (struct bw_result){{0.0, 0.0, 0.0}, 0};
    const double bw = bwr.gbs.median;
    const uint64_t dense_b = tele_dense_bytes(m);
    /* KV bytes a decode step reads, at the mean position of the timed decode steps */
    const uint64_t kv_b = tele_kv_bytes(m, n_prompt + n_gen / 2, dev.kv_type, dev.kv_type_v);

    printf("model:       %s\n", path);
    printf("arch:        %s, %s, %" PRId64 " layers, n_embd %" PRId64 ", n_ff %" PRId64
           ", %.1f MiB of weights\n",
           pi_model_arch(m), pi_model_is_sparse(m) ? "PowerInfer (sparse)"
           : pi_model_meta_str(m, "powerinfer.sparsify.method", NULL, 0) >= 0
               ? "sparsified (pi-sparsify, thresholded)"
               : "dense",
           pi_model_n_layer(m), pi_model_n_embd(m), pi_model_n_ff(m),
           (double)pi_model_size_bytes(m) / 1048576.0);
    printf("threads:     %u, load %.1f ms\n", nt, load_ms);
    if (bw > 0)
        printf("read bandwidth (%u threads): %.2f GB/s (median of %d passes, %.2f-%.2f)\n", nt,
               bw, bwr.passes, bwr.gbs.min, bwr.gbs.max);
    if (hybrid)
        printf("device:      %s %u (budget: bytes the plan may place there; neurons: FFN "
               "neurons on the device; GiB dev: what the plan puts there)\n",
               dev.device == PI_DEVICE_GPU ? "gpu" : "cpu", dev.index);
    /* With a device, three columns at the end: the budget and the plan's device share
     * (the first columns keep their place for scripts that read them). */
    printf("| mode   | test   | t/s median | t/s min | t/s max | MiB/token | active | eta  |%s\n",
           hybrid ? " budget   | neurons | GiB dev |" : "");
    printf("|--------|--------|-----------:|--------:|--------:|----------:|-------:|-----:|%s\n",
           hybrid ? "---------:|--------:|--------:|" : "");
    for (int k = 0; k < n_runs; k++) {
        const struct mode_result *r = &res[k];
        char dev_cols[96] = "";
        if (hybrid) {
            char bt[32];
            budget_text(r->budget, bt, sizeof bt);
            if (r->have_plan)
                snprintf(dev_cols, sizeof dev_cols, " %8s | %6.1f%% | %7.3f |", bt,
                         100.0 * r->neuron_frac, (double)r->dev_bytes / 1073741824.0);
            else
                snprintf(dev_cols, sizeof dev_cols, " %8s |       - |       - |", bt);
        }
        printf("| %-6s | pp%-4d | %10.2f | %7.2f | %7.2f |           |        |      |%s\n",
               r->name, n_prompt, r->pp.median, r->pp.min, r->pp.max, dev_cols);
        double bytes = 0, eta = 0, act = -1;
        if (r->have_tele) {
            bytes = (double)dense_b + r->tele.ffn_bytes + r->tele.pred_bytes + (double)kv_b;
            eta = bw > 0 ? bytes * r->tg.median / (bw * 1e9) : 0;
            act = r->tele.pred_frac >= 0 ? r->tele.pred_frac : r->tele.active_frac;
        }
        /* no telemetry: dense, every neuron; telemetry without neuron counts (a
         * mixture-of-experts model): unknown */
        char act_col[16];
        if (act >= 0 || !r->have_tele)
            snprintf(act_col, sizeof act_col, "%5.1f%%", act >= 0 ? 100 * act : 100.0);
        else
            snprintf(act_col, sizeof act_col, "%6s", "-");
        printf("| %-6s | tg%-4d | %10.2f | %7.2f | %7.2f | %9.1f | %s | %.2f |%s\n",
               r->name, n_gen, r->tg.median, r->tg.min, r->tg.max, bytes / 1048576.0,
               act_col, eta, dev_cols);
    }
    printf("MiB/token: weights and KV cache a decode step needs (attention, norms, output, "
           "the FFN rows computed, predictors, KV); eta = MiB/token x t/s / bandwidth\n");
    if (hybrid)
        printf("with a device, MiB/token and eta still count every byte against the CPU's "
               "bandwidth\n");
    for (int k = 0; k < n_runs; k++) {
        const struct mode_result *r = &res[k];
        if (!r->have_tele)
            continue;
        const double ns = r->tele.ns_attn + r->tele.ns_pred + r->tele.ns_ffn;
        printf("%s decode: %.2f ms/token in layers = attention %.0f%% + predictor %.0f%% + FFN "
               "%.0f%%; FFN %.1f MiB + predictors %.1f MiB + rest %.1f MiB + KV %.1f MiB\n",
               r->label, ns / 1e6, ns > 0 ? 100 * r->tele.ns_attn / ns : 0,
               ns > 0 ? 100 * r->tele.ns_pred / ns : 0, ns > 0 ? 100 * r->tele.ns_ffn / ns : 0,
               r->tele.ffn_bytes / 1048576.0, r->tele.pred_bytes / 1048576.0,
               (double)dense_b / 1048576.0, (double)kv_b / 1048576.0);
    }
    for (int k = 1; k < n_runs; k++)
        if (res[0].tg.median > 0)
            printf("decode speed-up %s / %s: %.2fx\n", res[k].label, res[0].label,
                   res[k].tg.median / res[0].tg.median);
    free(toks);
    pi_model_close(m);
    return 0;
}
