/* pi-run -- the bundled command-line tool. Uses only the public header.
 *
 * Today: model inspection (--info). Text generation arrives with the [dense] issue. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "powerinfer.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: pi-run --info [options] MODEL.gguf\n"
            "       pi-run -m MODEL.gguf --info [options]\n"
            "\n"
            "  -m, --model FILE   model file (GGUF, or PowerInfer GGUF with magic PWRI)\n"
            "  --info             print the architecture, hyper-parameters, sparse or dense,\n"
            "                     metadata and a summary of the tensor table\n"
            "  --tensors          with --info: list every tensor\n"
            "  -v, --verbose      log what the library does to stderr\n"
            "  --version          print the library version\n"
            "  -h, --help         this text\n");
}

static void log_stderr(void *user, int level, const char *msg) {
    (void)user;
    static const char *const names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "pi-run: [%s] %s\n", level >= 0 && level <= 3 ? names[level] : "?", msg);
}

static void human_bytes(uint64_t b, char *buf, size_t cap) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", v, units[u]);
}

static int is_long_array(const pi_model *m, const char *key) {
    int type, et;
    uint64_t n;
    if (pi_model_meta_type(m, key, &type, &et, &n) != PI_OK)
        return 0;
    return type == PI_META_ARRAY && n > 8;
}

static void print_meta(const pi_model *m) {
    int64_t n = pi_model_meta_count(m);
    printf("metadata (%" PRId64 " keys):\n", n);
    for (int64_t i = 0; i < n; i++) {
        const char *key = pi_model_meta_key(m, i);
        char small[160];
        uint32_t items = is_long_array(m, key) ? 4 : 8;
        int64_t len = pi_model_meta_to_string(m, key, items, small, sizeof small);
        if (len < 0)
            continue;
        /* Keep one line per key: cut long values, and show line breaks as "\n". */
        for (char *p = small; *p; p++)
            if (*p == '\n' || *p == '\r' || *p == '\t')
                *p = ' ';
        printf("  %-44s %s%s\n", key, small, (size_t)len >= sizeof small ? " ..." : "");
    }
}

struct type_sum {
    uint64_t count, bytes, elems;
};

static void print_tensors(const pi_model *m, int list_all) {
    struct type_sum sums[64];
    memset(sums, 0, sizeof sums);
    int64_t n = pi_model_n_tensors(m);
    if (list_all)
        printf("tensors:\n");
    for (int64_t i = 0; i < n; i++) {
        int type = pi_model_tensor_type(m, i);
        int nd;
        int64_t d[4];
        pi_model_tensor_shape(m, i, &nd, d);
        uint64_t bytes = pi_model_tensor_nbytes(m, i);
        if (type >= 0 && type < 64) {
            sums[type].count++;
            sums[type].bytes += bytes;
            sums[type].elems += (uint64_t)(d[0] * d[1] * d[2] * d[3]);
        }
        if (list_all) {
            char shape[96];
            int at = snprintf(shape, sizeof shape, "{%" PRId64, d[0]);
            for (int k = 1; k < nd; k++)
                at += snprintf(shape + at, sizeof shape - (size_t)at, ", %" PRId64, d[k]);
            snprintf(shape + at, sizeof shape - (size_t)at, "}");
            const char *tn = pi_type_name(type);
            printf("  %-36s %-8s %-22s %12" PRIu64 " B\n", pi_model_tensor_name(m, i),
                   tn ? tn : "?", shape, bytes);
        }
    }
    char hb[32];
    human_bytes(pi_model_size_bytes(m), hb, sizeof hb);
    printf("tensor types (%" PRId64 " tensors, %s, %" PRIu64 " weights):\n", n, hb,
           pi_model_n_params(m));
    for (int t = 0; t < 64; t++) {
        if (!sums[t].count)
            continue;
        human_bytes(sums[t].bytes, hb, sizeof hb);
        printf("  %-8s %5" PRIu64 " tensors  %12s  %6.3f bits/weight\n", pi_type_name(t),
               sums[t].count, hb,
               sums[t].elems ? 8.0 * (double)sums[t].bytes / (double)sums[t].elems : 0.0);
    }
}

static void print_hparams(const pi_model *m) {
    printf("kind:           %s\n", pi_model_is_sparse(m)
                                       ? "sparse (PowerInfer GGUF, magic PWRI, with predictors)"
                                       : "dense (GGUF)");
    printf("n_layer:        %" PRId64 "\n", pi_model_n_layer(m));
    printf("n_embd:         %" PRId64 "\n", pi_model_n_embd(m));
    printf("n_ff:           %" PRId64 "\n", pi_model_n_ff(m));
    printf("n_head:         %" PRId64 "\n", pi_model_n_head(m));
    printf("n_head_kv:      %" PRId64 "\n", pi_model_n_head_kv(m));
    printf("n_vocab:        %" PRId64 "\n", pi_model_n_vocab(m));
    printf("n_ctx_train:    %" PRId64 "\n", pi_model_n_ctx_train(m));
    if (pi_model_is_sparse(m)) {
        int64_t lo = INT64_MAX, hi = 0;
        for (int64_t l = 0; l < pi_model_n_layer(m); l++) {
            int64_t r = pi_model_predictor_rank(m, l);
            lo = r < lo ? r : lo;
            hi = r > hi ? r : hi;
        }
        printf("predictor rank: %" PRId64 "..%" PRId64 "\n", lo, hi);
        printf("threshold:      %g\n", (double)pi_model_sparse_threshold(m));
    }
}

static int info(const char *path, int list_tensors, int verbose) {
    char errbuf[512] = "";
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = errbuf;
    p.errbuf_cap = sizeof errbuf;
    if (verbose) {
        p.log_fn = log_stderr;
        p.log_level = PI_LOG_DEBUG;
    }
    pi_model *m = NULL;
    int st = pi_model_open(path, &p, &m);
    int runnable = st == PI_OK;
    char why[512] = "";
    if (st == PI_ERR_UNSUPPORTED) {
        /* Still describe what the file holds. */
        snprintf(why, sizeof why, "%s", errbuf);
        p.metadata_only = 1;
        st = pi_model_open(path, &p, &m);
    }
    if (st != PI_OK) {
        fprintf(stderr, "pi-run: %s (%s)\n", errbuf, pi_status_str(st));
        return 1;
    }
    char name[128] = "";
    pi_model_meta_str(m, "general.name", name, sizeof name);
    printf("file:           %s\n", path);
    printf("name:           %s\n", name[0] ? name : "(none)");
    printf("architecture:   %s\n", pi_model_arch(m)[0] ? pi_model_arch(m) : "(none)");
    if (runnable)
        print_hparams(m);
    else
        printf("runnable:       no: %s\n", why);
    print_tensors(m, list_tensors);
    print_meta(m);
    pi_model_close(m);
    return 0;
}

int main(int argc, char **argv) {
    const char *model = NULL;
    int do_info = 0, tensors = 0, verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            printf("pi-run (libpowerinfer %s, ABI %u)\n",
                   pi_version_string(), pi_abi_version());
            return 0;
        } else if (!strcmp(a, "--info")) {
            do_info = 1;
        } else if (!strcmp(a, "--tensors")) {
            tensors = 1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) {
                fprintf(stderr, "pi-run: %s needs a file name\n", a);
                return 2;
            }
            model = argv[i];
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "pi-run: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!model) {
            model = a;
        } else {
            fprintf(stderr, "pi-run: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!model) {
        usage(stderr);
        return 2;
    }
    if (!do_info) {
        fprintf(stderr, "pi-run: text generation is not available yet in this version; "
                        "use --info to inspect a model\n");
        return 2;
    }
    return info(model, tensors, verbose);
}
