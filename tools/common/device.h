/* device.h -- the hybrid CPU/device options every tool that makes a context shares
 * (pi-run, pi-server, pi-batched, pi-perplexity): --vram-budget, --device,
 * --device-index, --plan-stats, --plan, --reset-plan, --no-plan-cache, --no-graphs,
 * --print-plan, --dry-run, and the KV cache's types (--kv-type, --kv-type-v: CPU-only
 * options); turning them into pi_ctx_params; the one-line summary of a plan, its full
 * description and a summary for /health and /metrics. Public API only; messages go to
 * stderr and start with cli_prog. */
#ifndef PI_TOOLS_DEVICE_H
#define PI_TOOLS_DEVICE_H

#include <stdint.h>
#include <stdio.h>

#include "powerinfer.h"

struct cli_device {
    uint32_t device;   /* PI_DEVICE_*: NONE unless --device or --vram-budget */
    uint32_t index;    /* --device-index */
    uint64_t budget;   /* --vram-budget in bytes, PI_DEVICE_BUDGET_AUTO by default */
    int device_set, budget_set, index_set, print_plan, dry_run, reset_plan, no_plan_cache;
    int no_graphs;      /* --no-graphs: PI_GRAPHS_OFF */
    uint32_t kv_type;   /* --kv-type: PI_KV_TYPE_* */
    uint32_t kv_type_v; /* --kv-type-v: PI_KV_TYPE_Q8_0/_Q4_0, or 0: values as keys */
    const char *plan_stats, *plan_file;
    char *plan_default; /* MODEL.generated.gpuidx, malloc'd by cli_device_params */
    pi_stats *stats;    /* loaded by cli_device_params, freed by cli_device_release */
};

/* Zero options: no device, budget auto. */
void cli_device_init(struct cli_device *d);

/* Argument a (with its value v, NULL when a is the last argument) when it is one of the
 * options above: records it and returns 0 with *takes = how many values it used (0 or 1);
 * 2 after printing why on a bad or missing value; -1 when a is not one of them. */
int cli_device_option(struct cli_device *d, const char *a, const char *v, int *takes);

/* --kv-type-v's value v ("q8_0", "q4_0") into *out (PI_KV_TYPE_*): 0, or 2 after
 * printing why it is not one of them. */
int cli_kv_type_v(const char *v, uint32_t *out);

/* Check the options against each other once all are parsed (--vram-budget alone means
 * --device gpu; the other options need a device; --no-plan-cache contradicts --plan and
 * --reset-plan). 0, or 2 after printing why. */
int cli_device_check(struct cli_device *d);

/* Fill the device fields of *cp for the model at `model` (the default plan cache is
 * MODEL.generated.gpuidx): device, index, budget, the loaded statistics and the plan
 * file. The statistics stay loaded until cli_device_release (the context borrows them
 * only during pi_ctx_create/pi_model_plan). 0, or 1 after printing why. */
int cli_device_params(struct cli_device *d, const char *model, pi_ctx_params *cp);

/* Free what cli_device_params loaded (statistics; the default path stays until
 * cli_device_free). */
void cli_device_release(struct cli_device *d);
void cli_device_free(struct cli_device *d);

/* "gpu", "cpu" or "none". */
const char *cli_device_name(uint32_t device);

/* b as "1.50 GiB", "12 B", ... */
void cli_human_bytes(uint64_t b, char *buf, size_t cap);

/* What a plan puts on the device, for summaries. */
struct cli_placement {
    uint32_t device, index;
    uint64_t budget;    /* UINT64_MAX: unlimited */
    uint64_t bytes;     /* on the device, all parts and scratch */
    int64_t n_layer, attn_layers;
    double neurons_on, neurons_total; /* FFN neurons on the device / of the model */
    int output, kv;
    int64_t experts_on; /* mixture-of-experts layers: experts on the device */
};
void cli_placement_of(const pi_plan *pl, const pi_ctx_params *cp, struct cli_placement *out);

/* "PROG: plan (device D I): SOURCE | on device X of Y budget | FFN neurons a/b (p%) |
 * attention l/L layers, output yes|no, KV cache yes|no[ | experts E on the device]"
 * to out. */
void cli_plan_line(FILE *out, const pi_plan *pl, const pi_ctx_params *cp);

/* pi_plan_describe's text to out. 0, or 1 after printing why. */
int cli_plan_print(FILE *out, const pi_plan *pl);

/* After pi_ctx_create: the summary line of the context's plan (when it has one) and,
 * with --print-plan, its description, to stderr. 0, or 1 after printing why. */
int cli_device_report(const struct cli_device *d, const pi_ctx *ctx, const pi_ctx_params *cp);

/* --dry-run: open the model, plan as a context with *cp (its device fields filled by
 * cli_device_params) would, print the summary to stderr and the description to stdout.
 * The tool's exit status (0 or 1). */
int cli_device_dry_run(struct cli_device *d, const char *model, const pi_ctx_params *cp,
                       int verbose);
/* The same with the model already open (m, opened from the file `model`). */
int cli_device_dry_run_model(struct cli_device *d, const pi_model *m, const char *model,
                             const pi_ctx_params *cp);

/* The lines of --help for these options, in the tools' column layout. */
#define CLI_DEVICE_USAGE                                                                   \
    "hybrid CPU/GPU execution (attention, predictors, the KV cache and the hottest\n"     \
    "FFN neurons on the device, the rest on the CPU):\n"                                  \
    "  --vram-budget GB        device memory the plan may use, in GiB (1.5, 0.25, ...;\n" \
    "                          'auto' or negative: the device's free memory minus\n"     \
    "                          256 MiB); implies --device gpu. The plan counts the\n"    \
    "                          whole KV cache (every sequence or slot) and the batch's\n" \
    "                          device scratch\n"                                          \
    "  --device D              gpu (the CUDA or HIP backend built in), cpu (a second\n"   \
    "                          CPU backend acting as the device: checks a plan\n"        \
    "                          without a GPU) or none (default without --vram-budget)\n" \
    "  --device-index N        which GPU (default 0)\n"                                   \
    "  --plan-stats FILE       activation statistics (pi-run --profile, or\n"             \
    "                          tools/convert_activation_stats.py) ranking the neurons\n" \
    "                          (and experts: how often each was chosen; default: all\n"  \
    "                          equally hot)\n"                                            \
    "  --plan FILE             take the FFN neurons from a GPU index file\n"              \
    "                          (PowerInfer's .gpuidx, or one these tools wrote)\n"       \
    "  --reset-plan            plan again and rewrite the plan file\n"                    \
    "  --no-plan-cache         plan in memory only; by default the plan is cached in\n"   \
    "                          MODEL.generated.gpuidx and reused while the model,\n"     \
    "                          statistics and budget are the same\n"                      \
    "  --kv-type T             the KV cache's type: f16 (default), q8_0 (about half\n"   \
    "                          the memory) or q4_0 (28 %); CPU-only contexts\n"          \
    "  --kv-type-v T           the values' type where it differs from the keys': q8_0\n"  \
    "                          or q4_0 (e.g. --kv-type q8_0 --kv-type-v q4_0: 41 %)\n"   \
    "  --no-graphs             submit the device's work op by op (default: decode\n"    \
    "                          steps as CUDA graphs where nothing overlaps them)\n"      \
    "  --print-plan            print the plan (budget, bytes per part, each layer's\n"    \
    "                          parts and neurons or experts) to stderr before starting\n" \
    "  --dry-run               print the plan to stdout and exit: nothing is loaded\n"    \
    "                          onto the device\n"

#endif
