/* device.c -- the hybrid CPU/device options of the tools (device.h). */
#include "device.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_device_init(struct cli_device *d) {
    memset(d, 0, sizeof *d);
    d->device = PI_DEVICE_NONE;
    d->budget = PI_DEVICE_BUDGET_AUTO;
}

const char *cli_device_name(uint32_t device) {
    return device == PI_DEVICE_GPU ? "gpu" : device == PI_DEVICE_CPU ? "cpu" : "none";
}

void cli_human_bytes(uint64_t b, char *buf, size_t cap) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", v, units[u]);
}

/* --vram-budget: GiB as a decimal number (PowerInfer's unit), 'auto' or a negative
 * number for PI_DEVICE_BUDGET_AUTO. */
static int parse_budget(const char *v, uint64_t *out) {
    if (!strcmp(v, "auto")) {
        *out = PI_DEVICE_BUDGET_AUTO;
        return 0;
    }
    char *end;
    double g = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || g != g) {
        fprintf(stderr, "%s: --vram-budget wants GiB (e.g. 1.5) or 'auto', not '%s'\n",
                cli_prog, v);
        return -1;
    }
    double b = g * 1073741824.0;
    if (g < 0)
        *out = PI_DEVICE_BUDGET_AUTO;
    else if (b >= 18446744073709549568.0) /* the largest double below 2^64 */
        *out = UINT64_MAX - 1;            /* everything, but not "auto" */
    else
        *out = (uint64_t)b;
    return 0;
}

int cli_kv_type_v(const char *v, uint32_t *out) {
    if (!strcmp(v, "q8_0")) {
        *out = PI_KV_TYPE_Q8_0;
    } else if (!strcmp(v, "q4_0")) {
        *out = PI_KV_TYPE_Q4_0;
    } else {
        fprintf(stderr, "%s: --kv-type-v wants q8_0 or q4_0, not '%s' (values are stored as "
                "the keys, --kv-type, unless it says otherwise)\n", cli_prog, v);
        return 2;
    }
    return 0;
}

int cli_device_option(struct cli_device *d, const char *a, const char *v, int *takes) {
    static const char *const flags[] = {"--print-plan", "--dry-run", "--reset-plan",
                                        "--no-plan-cache", "--no-graphs"};
    int *const flag_of[] = {&d->print_plan, &d->dry_run, &d->reset_plan, &d->no_plan_cache,
                            &d->no_graphs};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        if (!strcmp(a, flags[i])) {
            *flag_of[i] = 1;
            *takes = 0;
            return 0;
        }
    static const char *const valued[] = {"--vram-budget", "--device", "--device-index",
                                         "--plan-stats", "--plan", "--kv-type",
                                         "--kv-type-v"};
    size_t k = 0;
    while (k < sizeof valued / sizeof *valued && strcmp(a, valued[k]))
        k++;
    if (k == sizeof valued / sizeof *valued)
        return -1;
    if (!v) {
        fprintf(stderr, "%s: %s needs a value (see --help)\n", cli_prog, a);
        return 2;
    }
    *takes = 1;
    switch (k) {
    case 0:
        if (parse_budget(v, &d->budget))
            return 2;
        d->budget_set = 1;
        return 0;
    case 1:
        if (!strcmp(v, "gpu"))
            d->device = PI_DEVICE_GPU;
        else if (!strcmp(v, "cpu"))
            d->device = PI_DEVICE_CPU;
        else if (!strcmp(v, "none"))
            d->device = PI_DEVICE_NONE;
        else {
            fprintf(stderr, "%s: --device wants gpu, cpu or none, not '%s'\n", cli_prog, v);
            return 2;
        }
        d->device_set = 1;
        return 0;
    case 2: {
        long n;
        if (cli_parse_long(a, v, 0, 0, 1024, &n))
            return 2;
        d->index = (uint32_t)n;
        d->index_set = 1;
        return 0;
    }
    case 3:
        d->plan_stats = v;
        return 0;
    case 5:
        if (!strcmp(v, "f16")) {
            d->kv_type = PI_KV_TYPE_F16;
        } else if (!strcmp(v, "q8_0")) {
            d->kv_type = PI_KV_TYPE_Q8_0;
        } else if (!strcmp(v, "q4_0")) {
            d->kv_type = PI_KV_TYPE_Q4_0;
        } else {
            fprintf(stderr, "%s: --kv-type wants f16, q8_0 or q4_0, not '%s'\n", cli_prog, v);
            return 2;
        }
        return 0;
    case 6:
        return cli_kv_type_v(v, &d->kv_type_v);
    default:
        d->plan_file = v;
        return 0;
    }
}

int cli_device_check(struct cli_device *d) {
    if (d->budget_set && !d->device_set)
        d->device = PI_DEVICE_GPU;
    if (d->device == PI_DEVICE_NONE) {
        const char *opt = d->budget_set      ? "--vram-budget"
                          : d->print_plan    ? "--print-plan"
                          : d->dry_run       ? "--dry-run"
                          : d->plan_stats    ? "--plan-stats"
                          : d->plan_file     ? "--plan"
                          : d->reset_plan    ? "--reset-plan"
                          : d->no_plan_cache ? "--no-plan-cache"
                          : d->index_set     ? "--device-index"
                          : d->no_graphs     ? "--no-graphs"
                                             : NULL;
        if (opt) {
            fprintf(stderr, "%s: %s needs a device: give --vram-budget GB (a GPU) or "
                            "--device gpu|cpu\n", cli_prog, opt);
            return 2;
        }
    }
    if (d->no_plan_cache && (d->plan_file || d->reset_plan)) {
        fprintf(stderr, "%s: --no-plan-cache contradicts %s\n", cli_prog,
                d->plan_file ? "--plan" : "--reset-plan");
        return 2;
    }
    return 0;
}

int cli_device_params(struct cli_device *d, const char *model, pi_ctx_params *cp) {
    cp->device = d->device;
    cp->device_index = d->index;
    cp->device_budget = d->budget;
    cp->device_graphs = d->no_graphs ? PI_GRAPHS_OFF : PI_GRAPHS_AUTO;
    cp->kv_type = d->kv_type;
    cp->kv_type_v = d->kv_type_v;
    cp->plan_stats = NULL;
    cp->plan_path = NULL;
    if (d->device == PI_DEVICE_NONE)
        return 0;
    if (d->plan_stats && !d->stats) {
        char eb[512] = "";
        int st = pi_stats_load(d->plan_stats, &d->stats, eb, sizeof eb);
        if (st != PI_OK) {
            d->stats = NULL;
            return cli_fail("cannot read the activation statistics", st, eb);
        }
    }
    cp->plan_stats = d->stats;
    if (d->plan_file) {
        cp->plan_path = d->plan_file;
        cp->plan_file = d->reset_plan ? PI_PLAN_FILE_WRITE : PI_PLAN_FILE_READ;
    } else if (!d->no_plan_cache) {
        if (!d->plan_default) {
            static const char ext[] = ".generated.gpuidx";
            size_t n = strlen(model);
            d->plan_default = malloc(n + sizeof ext);
            if (!d->plan_default) {
                cli_device_release(d);
                cp->plan_stats = NULL;
                fprintf(stderr, "%s: out of memory\n", cli_prog);
                return 1;
            }
            memcpy(d->plan_default, model, n);
            memcpy(d->plan_default + n, ext, sizeof ext);
        }
        cp->plan_path = d->plan_default;
        cp->plan_file = d->reset_plan ? PI_PLAN_FILE_WRITE : PI_PLAN_FILE_CACHE;
    }
    return 0;
}

void cli_device_release(struct cli_device *d) {
    pi_stats_free(d->stats);
    d->stats = NULL;
}

void cli_device_free(struct cli_device *d) {
    cli_device_release(d);
    free(d->plan_default);
    d->plan_default = NULL;
}

void cli_placement_of(const pi_plan *pl, const pi_ctx_params *cp, struct cli_placement *out) {
    memset(out, 0, sizeof *out);
    out->device = cp->device;
    out->index = cp->device_index;
    if (!pl)
        return;
    out->budget = pi_plan_budget(pl);
    out->bytes = pi_plan_bytes(pl, PI_PLAN_N_PARTS);
    out->n_layer = pi_plan_n_layer(pl);
    for (int64_t l = 0; l < out->n_layer; l++) {
        int64_t k = pi_plan_layer_neurons(pl, l, NULL, 0);
        out->neurons_on += k > 0 ? (double)k : 0.0;
        out->attn_layers += (pi_plan_layer_parts(pl, l) >> PI_PLAN_ATTENTION) & 1u;
    }
    out->neurons_total = (double)out->n_layer * (double)pi_plan_n_ff(pl);
    out->output = pi_plan_output_on_device(pl);
    out->kv = pi_plan_kv_on_device(pl);
    out->experts_on = 0;
    for (int64_t l = 0; l < out->n_layer; l++) {
        const int64_t k = pi_plan_layer_experts(pl, l, NULL, 0);
        out->experts_on += k > 0 ? k : 0;
    }
}

void cli_plan_line(FILE *out, const pi_plan *pl, const pi_ctx_params *cp) {
    const char *path = cp->plan_path ? cp->plan_path : "";
    char src[1200];
    switch (pi_plan_source(pl)) {
    case PI_PLAN_FROM_FILE:
        snprintf(src, sizeof src, "neurons read from %s", path);
        break;
    case PI_PLAN_CACHE_WRITTEN:
        snprintf(src, sizeof src, "planned now, written to %s", path);
        break;
    case PI_PLAN_CACHE_UNWRITTEN:
        snprintf(src, sizeof src, "planned now; could not write %s", path);
        break;
    default: /* PI_PLAN_FILE_WRITE succeeds only once the file is written */
        if (cp->plan_path && cp->plan_file == PI_PLAN_FILE_WRITE)
            snprintf(src, sizeof src, "planned now, written to %s", path);
        else
            snprintf(src, sizeof src, "planned now%s", cp->plan_path ? "" : " (not cached)");
        break;
    }
    struct cli_placement p;
    cli_placement_of(pl, cp, &p);
    char used[32], budget[32];
    cli_human_bytes(p.bytes, used, sizeof used);
    if (p.budget == UINT64_MAX)
        snprintf(budget, sizeof budget, "unlimited");
    else
        cli_human_bytes(p.budget, budget, sizeof budget);
    fprintf(out,
            "%s: plan (device %s %u): %s | on device %s of %s budget | FFN neurons "
            "%.0f/%.0f (%.1f%%) | attention %" PRId64 "/%" PRId64
            " layers, output %s, KV cache %s",
            cli_prog, cli_device_name(cp->device), cp->device_index, src, used, budget,
            p.neurons_on, p.neurons_total,
            p.neurons_total > 0 ? 100.0 * p.neurons_on / p.neurons_total : 0.0, p.attn_layers,
            p.n_layer, p.output ? "yes" : "no", p.kv ? "yes" : "no");
    if (p.experts_on)
        fprintf(out, " | experts %" PRId64 " on the device", p.experts_on);
    fputc('\n', out);
}

int cli_plan_print(FILE *out, const pi_plan *pl) {
    char small[4096];
    int64_t n = pi_plan_describe(pl, small, sizeof small);
    if (n < 0)
        return cli_fail("cannot describe the plan", (int)n, NULL);
    char *text = small;
    if ((size_t)n >= sizeof small) {
        text = malloc((size_t)n + 1);
        if (!text) {
            fprintf(stderr, "%s: out of memory\n", cli_prog);
            return 1;
        }
        pi_plan_describe(pl, text, (size_t)n + 1);
    }
    fputs(text, out);
    if (n > 0 && text[n - 1] != '\n')
        fputc('\n', out);
    fflush(out);
    if (text != small)
        free(text);
    return 0;
}

int cli_device_report(const struct cli_device *d, const pi_ctx *ctx, const pi_ctx_params *cp) {
    const pi_plan *pl = pi_ctx_plan(ctx);
    if (!pl)
        return 0;
    cli_plan_line(stderr, pl, cp);
    return d->print_plan ? cli_plan_print(stderr, pl) : 0;
}

int cli_device_dry_run_model(struct cli_device *d, const pi_model *m, const char *model,
                             const pi_ctx_params *cp0) {
    pi_ctx_params cp = *cp0;
    char cerr[512] = "";
    cp.errbuf = cerr;
    cp.errbuf_cap = sizeof cerr;
    pi_plan *pl = NULL;
    int rc = cli_device_params(d, model, &cp);
    if (rc == 0) {
        int st = pi_model_plan(m, &cp, &pl);
        cli_device_release(d);
        if (st != PI_OK)
            rc = cli_fail("cannot plan", st, cerr);
    }
    if (rc == 0) {
        cli_plan_line(stderr, pl, &cp);
        rc = cli_plan_print(stdout, pl);
    }
    pi_plan_free(pl);
    return rc;
}

int cli_device_dry_run(struct cli_device *d, const char *model, const pi_ctx_params *cp,
                       int verbose) {
    pi_model *m = NULL;
    if (cli_model_open(model, verbose, &m))
        return 1;
    int rc = cli_device_dry_run_model(d, m, model, cp);
    pi_model_close(m);
    return rc;
}
