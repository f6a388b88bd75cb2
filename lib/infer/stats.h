/* stats.h -- activation statistics (public handle pi_stats): per layer and neuron the
 * tokens a neuron was predicted active, truly active, and both, plus per-layer
 * telemetry. Collected by a context (infer/forward.c) or loaded from a side file
 * (api_stats.c). */
#ifndef PI_INFER_STATS_H
#define PI_INFER_STATS_H

#include <stdint.h>

#include "powerinfer.h"
#include "util/alloc.h"
#include "util/error.h"

struct pi_stats {
    struct pi_allocator alloc;
    int64_t n_layer, n_ff;
    double *count;            /* [n_layer][3][n_ff]: PI_NEURON_PREDICTED, ACTIVE, BOTH */
    int64_t n_expert;         /* mixture-of-experts models; else 0 */
    double *expert;           /* [n_layer][2][n_expert]: PI_EXPERT_SELECTED, _WEIGHT */
    pi_layer_stats *layer;    /* [n_layer]; neuron sums are derived from count */
    uint64_t *gate_hist;      /* [n_layer][PI_GATE_HIST_BINS] |act(gate x)|, or NULL */
    char name[128];           /* model name (general.name), may be empty */
    char source[128];         /* what produced the counts */
};

/* Allocate zeroed statistics. PI_OK or PI_ERR_NOMEM. */
int pi_stats_create(const struct pi_allocator *a, int64_t n_layer, int64_t n_ff,
                    int64_t n_expert, struct pi_stats **out);
void pi_stats_destroy(struct pi_stats *s);
struct gguf_file;
/* Read statistics from a parsed side file (docs/formats.md); PI_ERR_FORMAT names what
 * is wrong. */
int pi_stats_from_gguf(const struct gguf_file *f, const struct pi_allocator *a,
                       struct pi_stats **out, struct pi_error *err);
void pi_stats_clear(struct pi_stats *s);

static inline double *pi_stats_row(struct pi_stats *s, int64_t layer, int kind) {
    return s->count + ((size_t)layer * 3 + (size_t)kind) * (size_t)s->n_ff;
}

/* The histogram bin of |a| (powerinfer.h, PI_GATE_HIST_BINS). */
int pi_stats_gate_bin(float a);

static inline double *pi_stats_expert_row(struct pi_stats *s, int64_t layer, int kind) {
    return s->expert + ((size_t)layer * 2 + (size_t)kind) * (size_t)s->n_expert;
}

#endif
