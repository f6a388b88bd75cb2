/* plan.h -- the neuron-placement planner: which dense tensors and which FFN neurons (or,
 * in a mixture-of-experts layer, which experts) of each layer go to a device with a
 * memory budget. Pure, deterministic, no I/O; the hybrid executor (lib/infer/hybrid.c)
 * and pi-run --print-plan use it.
 *
 * Rule (docs/design.md, "Placement"):
 *  1. Dense parts in priority order: every layer's attention (layer 0 first), then every
 *     layer's predictor, then every layer's FFN norm, then the output projection, then
 *     the KV cache. Placement stops at the first part that does not fit (PowerInfer's
 *     order; later, smaller parts are not squeezed in ahead of earlier ones). A
 *     mixture-of-experts layer's "FFN norm" part also holds its router and shared
 *     expert (everything of its FFN that every token runs).
 *  2. FFN units with what is left. A layer's units are its neurons, or its experts in
 *     a mixture-of-experts layer (`experts`: n_expert units, groups of one, each the
 *     expert's gate + up + down bytes, frequency = how often the router chose it).
 *     Units are placed as neurons are: each layer's neurons are sorted by activation
 *     frequency (descending; ties by index) and cut into groups of `group` neurons (the
 *     device kernels' granularity; a layer's last group may be short); groups of all
 *     layers are taken by descending summed frequency (ties: lower layer, then earlier
 *     group) while their bytes fit. Within a layer groups are taken in order, so each
 *     layer gets its hottest neurons. With equal group sizes and costs this is the
 *     optimum (the knapsack has equal weights); tests check it against brute force. So
 *     in a model whose layers are all mixture-of-experts layers of one shape, the
 *     device gets the most frequently chosen experts of all layers (ties: lower layer,
 *     then lower expert); a mixed model ranks expert counts and neuron-group sums on
 *     one scale, greedily.
 * Monotone: more budget never removes a dense part, and with the same dense parts never
 * removes a neuron; a dense part that starts to fit (the KV cache, say) may displace
 * neurons, having priority over them.
 */
#ifndef PI_PLAN_PLAN_H
#define PI_PLAN_PLAN_H

#include <stdint.h>

#include "util/alloc.h"
#include "util/error.h"

struct pi_plan_layer {
    uint64_t attn_bytes;   /* attention weights (q, k, v, o, attn_norm) */
    uint64_t pred_bytes;   /* predictor fc1 + fc2 */
    uint64_t norm_bytes;   /* ffn_norm */
    uint64_t neuron_bytes; /* one unit's bytes: a neuron's gate + up + down rows, or
                            * with `experts` one expert's gate + up + down */
    const double *freq;    /* [n_ff] activation counts or frequencies ([n_expert] selection
                            * counts with `experts`); NULL: uniform */
    int host_ffn;          /* the layer's FFN never moves */
    int experts;           /* the units are the input's n_expert experts, groups of 1 */
};

struct pi_plan_input {
    int64_t n_layer, n_ff;
    const struct pi_plan_layer *layers; /* [n_layer] */
    uint64_t output_bytes;              /* output projection and output_norm */
    uint64_t kv_bytes;                  /* the whole KV cache */
    uint64_t budget;                    /* device bytes */
    int64_t group;                      /* neurons per group, >= 1 */
    int64_t n_expert;                   /* experts of an `experts` layer; 0: none */
};

enum { PI_PART_ATTN, PI_PART_PRED, PI_PART_NORM, PI_PART_OUTPUT, PI_PART_KV, PI_PART_FFN,
       PI_PART_EXPERTS, PI_PART_PARTS };

struct pi_placement {
    int64_t n_layer, n_ff;
    uint8_t *attn, *pred, *norm; /* [n_layer]: 1 if on the device */
    int output, kv;
    uint8_t *neuron;             /* [n_layer][n_ff]: 1 if the neuron is on the device */
    int64_t *n_neurons;          /* [n_layer]; 0 in `experts` layers */
    int64_t n_expert;
    uint8_t *expert;             /* [n_layer][n_expert]: 1 if the expert is on the device
                                  * (NULL when n_expert is 0) */
    int64_t *n_experts;          /* [n_layer] experts on the device */
    uint8_t *moe;                /* [n_layer] 1: an `experts` layer */
    uint64_t bytes[PI_PART_PARTS]; /* device bytes per part */
    uint64_t total;              /* sum of bytes; <= budget */
    struct pi_allocator alloc;
};

/* Make the plan. PI_OK, PI_ERR_INVALID_ARG (bad shape, group < 1, an `experts` layer
 * without n_expert, a negative or NaN frequency), PI_ERR_NOMEM. */
int pi_placement_make(const struct pi_plan_input *in, const struct pi_allocator *a,
                 struct pi_placement *out, struct pi_error *err);
void pi_placement_free(struct pi_placement *p);

#endif
