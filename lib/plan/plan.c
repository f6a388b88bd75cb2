/* plan.c -- see plan.h. */
#include "plan/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A layer's neuron order: descending frequency, ties by index. qsort's comparator
 * reads the frequencies through this context (no globals: a sort key array). */
struct key {
    double f;
    int64_t i;
};

static int by_freq(const void *a, const void *b) {
    const struct key *x = a, *y = b;
    if (x->f != y->f)
        return x->f > y->f ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

struct group {
    double value;
    int64_t layer, index; /* group index within the layer */
};

static int by_value(const void *a, const void *b) {
    const struct group *x = a, *y = b;
    if (x->value != y->value)
        return x->value > y->value ? -1 : 1;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

void pi_placement_free(struct pi_placement *p) {
    if (!p)
        return;
    pi_free(&p->alloc, p->attn);
    pi_free(&p->alloc, p->pred);
    pi_free(&p->alloc, p->norm);
    pi_free(&p->alloc, p->neuron);
    pi_free(&p->alloc, p->n_neurons);
    pi_free(&p->alloc, p->expert);
    pi_free(&p->alloc, p->n_experts);
    pi_free(&p->alloc, p->moe);
    memset(p, 0, sizeof *p);
}

/* Place `bytes` if it fits; returns 1 if placed. */
static int take(struct pi_placement *p, const struct pi_plan_input *in, int part, uint64_t bytes,
                int *stopped) {
    if (*stopped || bytes > in->budget - p->total) {
        *stopped = 1;
        return 0;
    }
    p->total += bytes;
    p->bytes[part] += bytes;
    return 1;
}

/* Layer l's FFN units: how many, per group, and the mask they are marked in. */
static int64_t units_of(const struct pi_plan_input *in, int64_t l) {
    return in->layers[l].experts ? in->n_expert : in->n_ff;
}

static int64_t group_of(const struct pi_plan_input *in, int64_t l) {
    return in->layers[l].experts ? 1 : in->group;
}

static uint8_t *mask_of(struct pi_placement *p, const struct pi_plan_input *in, int64_t l) {
    return in->layers[l].experts ? p->expert + l * in->n_expert : p->neuron + l * in->n_ff;
}

int pi_placement_make(const struct pi_plan_input *in, const struct pi_allocator *a,
                 struct pi_placement *out, struct pi_error *err) {
    memset(out, 0, sizeof *out);
    if (!in || in->n_layer < 1 || in->n_ff < 1 || in->group < 1 || !in->layers ||
        in->n_layer > (1 << 16) || in->n_ff > (1 << 24) || in->n_expert < 0 ||
        in->n_expert > (1 << 16))
        PI_FAIL(err, PI_ERR_INVALID_ARG, "plan: bad shape (layers, neurons or group size)");
    const int64_t L = in->n_layer, F = in->n_ff, X = in->n_expert;
    int64_t n_keys = 0, n_groups = 0;
    for (int64_t l = 0; l < L; l++) {
        if (in->layers[l].experts && X < 1)
            PI_FAIL(err, PI_ERR_INVALID_ARG, "plan: layer %lld places experts, but the model "
                    "has none", (long long)l);
        const int64_t U = units_of(in, l), G = group_of(in, l);
        for (int64_t r = 0; in->layers[l].freq && r < U; r++)
            if (!(in->layers[l].freq[r] >= 0.0) || isinf(in->layers[l].freq[r]))
                PI_FAIL(err, PI_ERR_INVALID_ARG, "plan: layer %lld unit %lld has a negative "
                        "or non-finite frequency", (long long)l, (long long)r);
        n_keys += U;
        n_groups += (U + G - 1) / G;
    }
    out->alloc = *a;
    out->n_layer = L;
    out->n_ff = F;
    out->n_expert = X;
    out->attn = pi_calloc(a, (size_t)L, 1);
    out->pred = pi_calloc(a, (size_t)L, 1);
    out->norm = pi_calloc(a, (size_t)L, 1);
    out->neuron = pi_calloc(a, (size_t)(L * F), 1);
    out->n_neurons = pi_calloc(a, (size_t)L, sizeof *out->n_neurons);
    out->expert = X ? pi_calloc(a, (size_t)(L * X), 1) : NULL;
    out->n_experts = pi_calloc(a, (size_t)L, sizeof *out->n_experts);
    out->moe = pi_calloc(a, (size_t)L, 1);
    struct key *keys = pi_malloc(a, (size_t)n_keys * sizeof *keys);
    struct group *groups = pi_malloc(a, (size_t)n_groups * sizeof *groups);
    int64_t *koff = pi_malloc(a, (size_t)L * sizeof *koff);
    int64_t *next = pi_calloc(a, (size_t)L, sizeof *next); /* groups taken per layer */
    int st = PI_OK;
    if (!out->attn || !out->pred || !out->norm || !out->neuron || !out->n_neurons ||
        (X && !out->expert) || !out->n_experts || !out->moe || !keys || !groups || !koff || !next) {
        st = pi_error_set(err, PI_ERR_NOMEM, "plan: out of memory");
        goto done;
    }
    /* 1. dense parts, in priority order, until the first that does not fit */
    int stopped = 0;
    for (int64_t l = 0; l < L; l++)
        out->attn[l] = (uint8_t)take(out, in, PI_PART_ATTN, in->layers[l].attn_bytes, &stopped);
    for (int64_t l = 0; l < L; l++)
        out->pred[l] = (uint8_t)take(out, in, PI_PART_PRED, in->layers[l].pred_bytes, &stopped);
    for (int64_t l = 0; l < L; l++)
        out->norm[l] = (uint8_t)take(out, in, PI_PART_NORM, in->layers[l].norm_bytes, &stopped);
    out->output = take(out, in, PI_PART_OUTPUT, in->output_bytes, &stopped);
    out->kv = take(out, in, PI_PART_KV, in->kv_bytes, &stopped);
    /* 2. unit groups by descending summed frequency */
    int64_t ng_all = 0;
    for (int64_t l = 0, k0 = 0; l < L; l++) {
        const int64_t U = units_of(in, l), G = group_of(in, l), ng = (U + G - 1) / G;
        struct key *k = keys + k0;
        koff[l] = k0;
        k0 += U;
        for (int64_t r = 0; r < U; r++)
            k[r] = (struct key){in->layers[l].freq ? in->layers[l].freq[r] : 1.0, r};
        qsort(k, (size_t)U, sizeof *k, by_freq);
        for (int64_t g = 0; g < ng; g++) {
            double v = 0.0;
            for (int64_t r = g * G; r < U && r < (g + 1) * G; r++)
                v += k[r].f;
            groups[ng_all++] = (struct group){v, l, g};
        }
    }
    qsort(groups, (size_t)ng_all, sizeof *groups, by_value);
    /* Within a layer the groups' values are non-increasing, so the order above takes a
     * layer's groups in order, except among equal values, where `index` breaks the tie
     * the same way. A group that does not fit is skipped (a smaller last group of
     * another layer still may); a layer never skips one of its own groups. */
    for (int64_t i = 0; i < ng_all; i++) {
        const struct group *g = &groups[i];
        const int64_t l = g->layer, U = units_of(in, l), G = group_of(in, l);
        if (next[l] != g->index || in->layers[l].host_ffn)
            continue; /* an earlier group of this layer did not fit, or none may */
        const int64_t lo = g->index * G, hi = lo + G < U ? lo + G : U;
        const uint64_t cost = (uint64_t)(hi - lo) * in->layers[l].neuron_bytes;
        if (cost > in->budget - out->total)
            continue;
        out->total += cost;
        out->bytes[in->layers[l].experts ? PI_PART_EXPERTS : PI_PART_FFN] += cost;
        uint8_t *mask = mask_of(out, in, l);
        for (int64_t r = lo; r < hi; r++)
            mask[keys[koff[l] + r].i] = 1;
        next[l]++;
    }
    for (int64_t l = 0; l < L; l++) {
        const int64_t U = units_of(in, l), G = group_of(in, l);
        const int64_t n = next[l] * G < U ? next[l] * G : U;
        out->moe[l] = (uint8_t)(in->layers[l].experts != 0);
        if (in->layers[l].experts)
            out->n_experts[l] = n;
        else
            out->n_neurons[l] = n;
    }
done:
    pi_free(a, keys);
    pi_free(a, groups);
    pi_free(a, koff);
    pi_free(a, next);
    if (st < 0)
        pi_placement_free(out);
    return st;
}
