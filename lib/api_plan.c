/* api_plan.c -- the public pi_plan functions: what a placement puts where, its
 * description and its file (lib/infer/hybrid.c makes plans). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "infer/hybrid.h"
#include "util/error.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * 1024.0 * 1024.0)

void pi_plan_free(pi_plan *pl) {
    if (!pl)
        return;
    struct pi_allocator a = pl->alloc;
    pi_placement_free(&pl->pl);
    pi_free(&a, pl);
}

uint64_t pi_plan_budget(const pi_plan *pl) {
    return pl ? pl->budget : 0;
}

uint64_t pi_plan_bytes(const pi_plan *pl, int part) {
    if (!pl)
        return 0;
    if (part == PI_PLAN_SCRATCH)
        return pl->scratch;
    if (part == PI_PLAN_N_PARTS)
        return pl->pl.total + pl->scratch;
    if (part < 0 || part > PI_PLAN_NEURONS)
        return 0;
    /* PI_PLAN_ATTENTION ... PI_PLAN_NEURONS are PI_PART_ATTN ... PI_PART_FFN; experts
     * count as the FFN's units */
    if (part == PI_PLAN_NEURONS)
        return pl->pl.bytes[PI_PART_FFN] + pl->pl.bytes[PI_PART_EXPERTS];
    return pl->pl.bytes[part];
}

int64_t pi_plan_n_layer(const pi_plan *pl) {
    return pl ? pl->pl.n_layer : 0;
}

int64_t pi_plan_n_ff(const pi_plan *pl) {
    return pl ? pl->pl.n_ff : 0;
}

uint32_t pi_plan_layer_parts(const pi_plan *pl, int64_t l) {
    if (!pl || l < 0 || l >= pl->pl.n_layer)
        return 0;
    return (uint32_t)pl->pl.attn[l] << PI_PLAN_ATTENTION |
           (uint32_t)(pl->pl.pred[l] && !pl->whole_layers) << PI_PLAN_PREDICTOR |
           (uint32_t)pl->pl.norm[l] << PI_PLAN_FFN_NORM;
}

int64_t pi_plan_layer_neurons(const pi_plan *pl, int64_t l, uint8_t *mask, size_t cap) {
    if (!pl || l < 0 || l >= pl->pl.n_layer)
        return -1;
    if (mask && cap >= (size_t)pl->pl.n_ff)
        memcpy(mask, pl->pl.neuron + l * pl->pl.n_ff, (size_t)pl->pl.n_ff);
    return pl->pl.n_neurons[l];
}

int64_t pi_plan_layer_experts(const pi_plan *pl, int64_t l, uint8_t *mask, size_t cap) {
    if (!pl || l < 0 || l >= pl->pl.n_layer)
        return -1;
    const int64_t X = pl->pl.n_expert;
    if (mask && X && cap >= (size_t)X) {
        if (pl->pl.moe[l])
            memcpy(mask, pl->pl.expert + l * X, (size_t)X);
        else
            memset(mask, 0, (size_t)X);
    }
    return pl->pl.n_experts[l];
}

int pi_plan_output_on_device(const pi_plan *pl) {
    return pl ? pl->pl.output : 0;
}

int pi_plan_kv_on_device(const pi_plan *pl) {
    return pl ? pl->pl.kv : 0;
}

int pi_plan_source(const pi_plan *pl) {
    return pl ? pl->source : -1;
}

/* snprintf into buf at *len, counting what would be written. */
PI_PRINTF(4, 5)
static void put(char *buf, size_t cap, int64_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t at = (size_t)*len < cap ? (size_t)*len : cap;
    int n = vsnprintf(buf ? buf + at : NULL, buf ? cap - at : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len += n;
}

static int64_t count_parts(const uint8_t *v, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += v[i];
    return k;
}

int64_t pi_plan_describe(const pi_plan *pl, char *buf, size_t cap) {
    if (!pl || (!buf && cap))
        return PI_ERR_INVALID_ARG;
    if (cap)
        buf[0] = '\0';
    const struct pi_placement *p = &pl->pl;
    const int64_t L = p->n_layer, F = p->n_ff;
    int64_t len = 0, neurons = 0;
    for (int64_t l = 0; l < L; l++)
        neurons += p->n_neurons[l];
    static const char *const src[] = {"computed", "read from a file", "computed, cache written",
                                      "computed, cache not written"};
    const uint64_t used = p->total + pl->scratch;
    const int gb = pl->budget >= (1ull << 30), gu = used >= (1ull << 30);
    put(buf, cap, &len, "plan: budget %.2f %s, %.2f %s on the device (%s)\n",
        (double)pl->budget / (gb ? GIB : MIB), gb ? "GiB" : "MiB",
        (double)used / (gu ? GIB : MIB), gu ? "GiB" : "MiB",
        src[pl->source >= 0 && pl->source < 4 ? pl->source : 0]);
    put(buf, cap, &len, "  %-10s %10.1f MiB\n", "scratch", (double)pl->scratch / MIB);
    put(buf, cap, &len, "  %-10s %10.1f MiB  %lld/%lld layers\n", "attention",
        (double)p->bytes[PI_PART_ATTN] / MIB, (long long)count_parts(p->attn, L), (long long)L);
    put(buf, cap, &len, "  %-10s %10.1f MiB  %lld/%lld layers\n", "predictor",
        (double)p->bytes[PI_PART_PRED] / MIB, (long long)count_parts(p->pred, L), (long long)L);
    put(buf, cap, &len, "  %-10s %10.1f MiB  %lld/%lld layers\n", "ffn_norm",
        (double)p->bytes[PI_PART_NORM] / MIB, (long long)count_parts(p->norm, L), (long long)L);
    put(buf, cap, &len, "  %-10s %10.1f MiB  %s\n", "output", (double)p->bytes[PI_PART_OUTPUT] / MIB,
        p->output ? "on the device" : "on the host");
    put(buf, cap, &len, "  %-10s %10.1f MiB  %s\n", "kv cache", (double)p->bytes[PI_PART_KV] / MIB,
        p->kv ? "on the device" : "on the host");
    int64_t n_moe = 0, experts = 0;
    for (int64_t l = 0; l < L; l++) {
        n_moe += p->moe[l];
        experts += p->n_experts[l];
    }
    const int64_t X = p->n_expert, Ld = L - n_moe; /* Ld: layers with neurons */
    if (Ld)
        put(buf, cap, &len, "  %-10s %10.1f MiB  %lld/%lld neurons (%.1f%%)%s\n", "ffn",
            (double)p->bytes[PI_PART_FFN] / MIB, (long long)neurons, (long long)(Ld * F),
            100.0 * (double)neurons / (double)(Ld * F), pl->whole_layers ? ", whole layers" : "");
    if (n_moe)
        put(buf, cap, &len, "  %-10s %10.1f MiB  %lld/%lld experts (%.1f%%)\n", "experts",
            (double)p->bytes[PI_PART_EXPERTS] / MIB, (long long)experts, (long long)(n_moe * X),
            100.0 * (double)experts / (double)(n_moe * X));
    put(buf, cap, &len, "  layer  attn  pred  norm  %s on the device%s\n",
        n_moe == L ? "experts" : n_moe ? "neurons or experts" : "neurons",
        n_moe ? " (norm: with the router and shared expert)" : "");
    for (int64_t l = 0; l < L; l++) {
        put(buf, cap, &len, "  %5lld  %-4s  %-4s  %-4s  ", (long long)l,
            p->attn[l] ? "dev" : "host",
            pl->whole_layers ? "-" : p->pred[l] ? "dev" : "host", p->norm[l] ? "dev" : "host");
        if (!p->moe[l]) {
            put(buf, cap, &len, "%lld (%.1f%%)\n", (long long)p->n_neurons[l],
                100.0 * (double)p->n_neurons[l] / (double)F);
            continue;
        }
        put(buf, cap, &len, "%lld/%lld experts", (long long)p->n_experts[l], (long long)X);
        const char *sep = ": ";
        for (int64_t e = 0; e < X; e++)
            if (p->expert[l * X + e]) {
                put(buf, cap, &len, "%s%lld", sep, (long long)e);
                sep = " ";
            }
        put(buf, cap, &len, "\n");
    }
    return len;
}

int pi_plan_save(const pi_plan *pl, const char *path) {
    if (!pl || !path)
        return PI_ERR_INVALID_ARG;
    struct pi_error err;
    return pi_hybrid_plan_save(pl, path, &err);
}

/* ---- the device side of a context --------------------------------------------------- */

