/* telemetry.c -- see telemetry.h. */
#include "telemetry.h"

#include <string.h>

static int is_sparse_part(const char *name) {
    /* the FFN's tensors, whose reads the statistics count (experts: only those run) */
    static const char *const parts[] = {".ffn_gate.", ".ffn_up.", ".ffn_down.", ".ffn_down_t.",
                                        ".fc1.", ".fc2.", "_exps.", "_exps_t.", "_shexp.",
                                        ".ffn_gate_inp."};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (strstr(name, parts[i]))
            return 1;
    return 0;
}

uint64_t tele_dense_bytes(const pi_model *m) {
    uint64_t sum = 0;
    int64_t idx;
    for (int64_t i = 0; i < pi_model_n_tensors(m); i++) {
        const char *name = pi_model_tensor_name(m, i);
        if (!name || is_sparse_part(name) || !strcmp(name, "token_embd.weight"))
            continue;
        sum += pi_model_tensor_nbytes(m, i);
    }
    if (pi_model_tensor_find(m, "output.weight", &idx) != PI_OK &&
        pi_model_tensor_find(m, "token_embd.weight", &idx) == PI_OK)
        sum += pi_model_tensor_nbytes(m, idx); /* tied output */
    return sum;
}

/* Bytes of `f16` bytes of binary16 cache stored as kv_type: 34 (Q8_0) or 18 (Q4_0)
 * bytes per 32 values. */
static uint64_t kv_scaled(uint64_t f16, uint32_t kv_type) {
    return kv_type == PI_KV_TYPE_Q8_0   ? f16 / 64 * 34
           : kv_type == PI_KV_TYPE_Q4_0 ? f16 / 64 * 18
                                        : f16;
}

uint64_t tele_kv_bytes(const pi_model *m, int64_t pos, uint32_t kv_type, uint32_t kv_type_v) {
    const int64_t nh = pi_model_n_head(m), nkv = pi_model_n_head_kv(m);
    if (nh <= 0)
        return 0;
    const int64_t hd = pi_model_n_embd(m) / nh;
    const uint64_t half = (uint64_t)(pi_model_n_layer(m) * pos * nkv * hd * 2); /* K or V */
    return kv_scaled(half, kv_type) + kv_scaled(half, kv_type_v ? kv_type_v : kv_type);
}

static double div0(double a, double b) {
    return b > 0 ? a / b : -1.0;
}

static uint64_t layer_tokens(const pi_layer_stats *ls) {
    return ls->tokens_predicted > ls->tokens_observed ? ls->tokens_predicted : ls->tokens_observed;
}

/* Whether layer l routed tokens to experts (a mixture-of-experts layer: its statistics
 * count no neurons). */
static int routed(const pi_stats *s, int64_t l) {
    const int64_t n = pi_stats_n_expert(s);
    double v[4096];
    if (n <= 0 || n > 4096 || pi_stats_experts(s, l, PI_EXPERT_SELECTED, v, 4096) != PI_OK)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (v[i] > 0)
            return 1;
    return 0;
}

int tele_sum(const pi_stats *s, struct tele_sum *o) {
    memset(o, 0, sizeof *o);
    if (!s)
        return -1;
    const int64_t nl = pi_stats_n_layer(s), nf = pi_stats_n_ff(s);
    double pred = 0, act = 0, both = 0, tp = 0, to = 0;
    for (int64_t l = 0; l < nl; l++) {
        pi_layer_stats ls = {.struct_size = sizeof ls};
        pi_stats_layer(s, l, &ls);
        const double t = (double)layer_tokens(&ls);
        if (l == 0)
            o->tokens = layer_tokens(&ls);
        pred += ls.predicted;
        both += ls.both;
        tp += (double)ls.tokens_predicted;
        if (!routed(s, l)) { /* the active share: of the layers that count neurons */
            act += ls.active;
            to += (double)ls.tokens_observed;
        }
        if (t > 0) {
            o->ffn_bytes += (double)ls.bytes_ffn / t;
            o->pred_bytes += (double)ls.bytes_predictor / t;
            o->ns_attn += (double)ls.ns_attention / t;
            o->ns_pred += (double)ls.ns_predictor / t;
            o->ns_ffn += (double)ls.ns_ffn / t;
        }
    }
    o->pred_frac = div0(pred, tp * (double)nf);
    o->active_frac = div0(act, to * (double)nf);
    o->recall = tp > 0 && to > 0 ? div0(both, act) : -1.0;
    o->precision = tp > 0 && to > 0 ? div0(both, pred) : -1.0;
    return o->tokens ? 0 : -1;
}

static void pct(FILE *out, double v) {
    if (v < 0)
        fprintf(out, "      -");
    else
        fprintf(out, " %5.1f%%", 100.0 * v);
}

/* The share of layer l's expert selections that went to its most selected quarter of
 * experts (how skewed routing is: 0.25 is uniform), or -1 for a layer without any. */
static double hot_quarter(const pi_stats *s, int64_t l) {
    const int64_t n = pi_stats_n_expert(s);
    double v[4096];
    if (n <= 0 || n > 4096 || pi_stats_experts(s, l, PI_EXPERT_SELECTED, v, 4096) != PI_OK)
        return -1.0;
    double total = 0.0;
    for (int64_t i = 0; i < n; i++)
        total += v[i];
    /* the quarter's sum: the (n + 3) / 4 largest, by repeated selection */
    double top = 0.0;
    for (int64_t k = 0; k < (n + 3) / 4; k++) {
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            best = v[i] > v[best] ? i : best;
        top += v[best];
        v[best] = -1.0;
    }
    return div0(top, total);
}

/* Mixture-of-experts models: per layer the FFN bytes per token, how skewed routing is,
 * and the times; then the totals. */
static void tele_print_moe(FILE *out, const pi_stats *s, uint64_t dense_bytes) {
    const int64_t nl = pi_stats_n_layer(s);
    fprintf(out, "layer  hot 25%% of experts  FFN KiB/t  attn us   ffn us\n");
    for (int64_t l = 0; l < nl; l++) {
        pi_layer_stats ls = {.struct_size = sizeof ls};
        pi_stats_layer(s, l, &ls);
        const double t = (double)layer_tokens(&ls);
        fprintf(out, "%5lld      ", (long long)l);
        pct(out, hot_quarter(s, l));
        fprintf(out, "      %10.1f %8.1f %8.1f\n", div0((double)ls.bytes_ffn, t) / 1024.0,
                div0((double)ls.ns_attention, t) / 1e3, div0((double)ls.ns_ffn, t) / 1e3);
    }
    struct tele_sum sum;
    if (tele_sum(s, &sum) != 0)
        return;
    fprintf(out, "weights read per token: %.2f MiB = FFN (routers, the chosen experts, shared "
                 "experts) %.2f + attention/norms/output %.2f\n",
            (sum.ffn_bytes + (double)dense_bytes) / 1048576.0, sum.ffn_bytes / 1048576.0,
            (double)dense_bytes / 1048576.0);
}

void tele_print(FILE *out, const pi_stats *s, uint64_t dense_bytes) {
    if (!s)
        return;
    if (pi_stats_n_expert(s) > 0) {
        tele_print_moe(out, s, dense_bytes);
        return;
    }
    const int64_t nl = pi_stats_n_layer(s), nf = pi_stats_n_ff(s);
    fprintf(out, "layer   pred%%   act%% recall  prec.  FFN KiB/t pred KiB/t  attn us  pred us   ffn us\n");
    for (int64_t l = 0; l < nl; l++) {
        pi_layer_stats ls = {.struct_size = sizeof ls};
        pi_stats_layer(s, l, &ls);
        const double t = (double)layer_tokens(&ls);
        const int both_known = ls.tokens_predicted > 0 && ls.tokens_observed > 0;
        fprintf(out, "%5lld ", (long long)l);
        pct(out, div0(ls.predicted, (double)ls.tokens_predicted * (double)nf));
        pct(out, div0(ls.active, (double)ls.tokens_observed * (double)nf));
        pct(out, both_known ? div0(ls.both, ls.active) : -1.0);
        pct(out, both_known ? div0(ls.both, ls.predicted) : -1.0);
        fprintf(out, " %10.1f %10.1f %8.1f %8.1f %8.1f\n", div0((double)ls.bytes_ffn, t) / 1024.0,
                div0((double)ls.bytes_predictor, t) / 1024.0, div0((double)ls.ns_attention, t) / 1e3,
                div0((double)ls.ns_predictor, t) / 1e3, div0((double)ls.ns_ffn, t) / 1e3);
    }
    struct tele_sum sum;
    if (tele_sum(s, &sum) != 0)
        return;
    const double total = sum.ffn_bytes + sum.pred_bytes + (double)dense_bytes;
    const double ns = sum.ns_attn + sum.ns_pred + sum.ns_ffn;
    fprintf(out, "all   ");
    pct(out, sum.pred_frac);
    pct(out, sum.active_frac);
    pct(out, sum.recall);
    pct(out, sum.precision);
    fprintf(out, "\nweights read per token: %.2f MiB = FFN %.2f + predictors %.2f + attention/"
                 "norms/output %.2f\n",
            total / 1048576.0, sum.ffn_bytes / 1048576.0, sum.pred_bytes / 1048576.0,
            (double)dense_bytes / 1048576.0);
    if (ns > 0)
        fprintf(out, "time per token in layers: %.2f ms = attention %.0f%% + predictor %.0f%% + "
                     "FFN %.0f%% (over %llu tokens)\n",
                ns / 1e6, 100.0 * sum.ns_attn / ns, 100.0 * sum.ns_pred / ns,
                100.0 * sum.ns_ffn / ns, (unsigned long long)sum.tokens);
}
