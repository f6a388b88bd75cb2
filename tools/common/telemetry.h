/* telemetry.h -- per-layer sparse-inference telemetry for pi-run and pi-bench, from a
 * context's activation statistics (public API only). */
#ifndef PI_TOOLS_TELEMETRY_H
#define PI_TOOLS_TELEMETRY_H

#include <stdint.h>
#include <stdio.h>

#include "powerinfer.h"

/* Bytes of weights one decoded token reads outside the FFN and predictors:
 * attention, norms and the output projection (token_embd when tied). */
uint64_t tele_dense_bytes(const pi_model *m);

/* Bytes of KV cache one token reads at position `pos` (K and V of every layer, keys
 * stored as kv_type and values as kv_type_v: PI_KV_TYPE_*, kv_type_v 0 for as keys). */
uint64_t tele_kv_bytes(const pi_model *m, int64_t pos, uint32_t kv_type, uint32_t kv_type_v);

/* Totals over layers. */
struct tele_sum {
    uint64_t tokens;          /* tokens counted (per layer) */
    double pred_frac;         /* predicted-active fraction, -1 if unknown */
    double active_frac;       /* truly active fraction of the layers that count neurons
                               * (not mixture-of-experts ones), -1 if unknown */
    double recall, precision; /* -1 if unknown */
    double ffn_bytes, pred_bytes; /* per token, all layers */
    double ns_attn, ns_pred, ns_ffn; /* per token, all layers */
};

/* Sum the statistics; returns 0, or -1 when there are none. */
int tele_sum(const pi_stats *s, struct tele_sum *out);

/* Print the per-layer table and the totals (dense_bytes: tele_dense_bytes). */
void tele_print(FILE *out, const pi_stats *s, uint64_t dense_bytes);

#endif
