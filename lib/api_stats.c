/* api_stats.c -- activation statistics: the pi_stats object a context fills
 * (infer/forward.c counts), its queries, and the GGUF side file (docs/formats.md,
 * "Activation statistics side file"). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "infer/stats.h"
#include "model/gguf.h"
#include "runtime/types.h"
#include "util/os.h"

#define STATS_ARCH "activation_stats"
#define MAX_STATS_NEURONS (1ll << 24)

static const char *const KIND_NAME[3] = {"predicted", "active", "both"};
static const char *const EXPERT_KIND_NAME[2] = {"expert_selected", "expert_weight"};
#define MAX_STATS_EXPERTS 4096

int pi_stats_create(const struct pi_allocator *a, int64_t n_layer, int64_t n_ff,
                    int64_t n_expert, struct pi_stats **out) {
    *out = NULL;
    struct pi_stats *s = pi_calloc(a, 1, sizeof *s);
    if (!s)
        return PI_ERR_NOMEM;
    s->alloc = *a;
    s->n_layer = n_layer;
    s->n_ff = n_ff;
    s->count = pi_calloc(a, (size_t)(n_layer * 3 * n_ff), sizeof *s->count);
    s->layer = pi_calloc(a, (size_t)n_layer, sizeof *s->layer);
    s->n_expert = n_expert;
    s->expert = n_expert ? pi_calloc(a, (size_t)(n_layer * 2 * n_expert), sizeof *s->expert)
                         : NULL;
    if (!s->count || !s->layer || (n_expert && !s->expert)) {
        pi_stats_destroy(s);
        return PI_ERR_NOMEM;
    }
    pi_stats_clear(s);
    *out = s;
    return PI_OK;
}

void pi_stats_destroy(struct pi_stats *s) {
    if (!s)
        return;
    struct pi_allocator a = s->alloc;
    pi_free(&a, s->count);
    pi_free(&a, s->layer);
    pi_free(&a, s->expert);
    pi_free(&a, s->gate_hist);
    pi_free(&a, s);
}

void pi_stats_clear(struct pi_stats *s) {
    memset(s->count, 0, (size_t)(s->n_layer * 3 * s->n_ff) * sizeof *s->count);
    memset(s->layer, 0, (size_t)s->n_layer * sizeof *s->layer);
    if (s->expert)
        memset(s->expert, 0, (size_t)(s->n_layer * 2 * s->n_expert) * sizeof *s->expert);
    if (s->gate_hist)
        memset(s->gate_hist, 0, (size_t)s->n_layer * PI_GATE_HIST_BINS * sizeof *s->gate_hist);
    for (int64_t l = 0; l < s->n_layer; l++)
        s->layer[l].struct_size = (uint32_t)sizeof(pi_layer_stats);
}

/* Bins of 2^(1/PER_OCTAVE): floor(PER_OCTAVE * (log2|a| - MIN_LOG2)) + 1, clamped. */
int pi_stats_gate_bin(float a) {
    const float v = fabsf(a);
    if (!(v < INFINITY))
        return PI_GATE_HIST_BINS - 1; /* infinity, NaN */
    if (v < ldexpf(1.0f, PI_GATE_HIST_MIN_LOG2))
        return 0;
    const double b = floor(PI_GATE_HIST_PER_OCTAVE * (log2((double)v) - PI_GATE_HIST_MIN_LOG2));
    return b >= PI_GATE_HIST_BINS - 2 ? PI_GATE_HIST_BINS - 1 : (int)b + 1;
}

int pi_stats_gate_histogram(const pi_stats *s, int64_t layer, uint64_t *out, size_t n) {
    if (!s || !out || n < PI_GATE_HIST_BINS)
        return PI_ERR_INVALID_ARG;
    if (layer < 0 || layer >= s->n_layer)
        return PI_ERR_RANGE;
    if (s->gate_hist)
        memcpy(out, s->gate_hist + (size_t)layer * PI_GATE_HIST_BINS,
               PI_GATE_HIST_BINS * sizeof *out);
    else
        memset(out, 0, PI_GATE_HIST_BINS * sizeof *out);
    return PI_OK;
}

int pi_stats_gate_quantile(const pi_stats *s, int64_t layer, double q, float *out) {
    if (!s || !out || !(q >= 0.0 && q <= 1.0))
        return PI_ERR_INVALID_ARG;
    if (layer < 0 || layer >= s->n_layer)
        return PI_ERR_RANGE;
    const uint64_t *h = s->gate_hist ? s->gate_hist + (size_t)layer * PI_GATE_HIST_BINS : NULL;
    double total = 0.0;
    for (int i = 0; h && i < PI_GATE_HIST_BINS; i++)
        total += (double)h[i];
    if (total == 0.0)
        return PI_ERR_NOT_FOUND;
    const double want = q * total;
    double below = 0.0;
    *out = 0.0f;
    if (want <= 0.0)
        return PI_OK;
    for (int i = 0; i < PI_GATE_HIST_BINS; i++) {
        const double c = (double)h[i];
        if (below + c < want && i < PI_GATE_HIST_BINS - 1) {
            below += c;
            continue;
        }
        if (i == 0)
            return PI_OK; /* inside the bin of (near) zeros */
        const int j = i < PI_GATE_HIST_BINS - 1 ? i : PI_GATE_HIST_BINS - 2;
        const double frac = c > 0.0 ? (want - below) / c : 1.0;
        const double e = PI_GATE_HIST_MIN_LOG2 + ((double)(j - 1) + (frac < 1.0 ? frac : 1.0)) /
                                                     PI_GATE_HIST_PER_OCTAVE;
        *out = (float)exp2(e);
        return PI_OK;
    }
    return PI_OK;
}

void pi_stats_free(pi_stats *s) {
    pi_stats_destroy(s);
}

int64_t pi_stats_n_layer(const pi_stats *s) {
    return s ? s->n_layer : 0;
}

int64_t pi_stats_n_ff(const pi_stats *s) {
    return s ? s->n_ff : 0;
}

int pi_stats_layer(const pi_stats *s, int64_t layer, pi_layer_stats *out) {
    if (!s || !out || out->struct_size < sizeof(uint32_t))
        return PI_ERR_INVALID_ARG;
    if (layer < 0 || layer >= s->n_layer)
        return PI_ERR_RANGE;
    pi_layer_stats v = s->layer[layer];
    size_t n = out->struct_size < sizeof v ? out->struct_size : sizeof v;
    uint32_t size = out->struct_size;
    memcpy(out, &v, n);
    out->struct_size = size;
    return PI_OK;
}

int pi_stats_neurons(const pi_stats *s, int64_t layer, int kind, double *out, size_t n) {
    if (!s || !out || kind < PI_NEURON_PREDICTED || kind > PI_NEURON_BOTH ||
        n < (size_t)s->n_ff)
        return PI_ERR_INVALID_ARG;
    if (layer < 0 || layer >= s->n_layer)
        return PI_ERR_RANGE;
    memcpy(out, pi_stats_row((struct pi_stats *)s, layer, kind), (size_t)s->n_ff * sizeof *out);
    return PI_OK;
}

int64_t pi_stats_n_expert(const pi_stats *s) {
    return s ? s->n_expert : 0;
}

int pi_stats_experts(const pi_stats *s, int64_t layer, int kind, double *out, size_t n) {
    if (!s || !out || !s->n_expert || kind < PI_EXPERT_SELECTED || kind > PI_EXPERT_WEIGHT ||
        n < (size_t)s->n_expert)
        return PI_ERR_INVALID_ARG;
    if (layer < 0 || layer >= s->n_layer)
        return PI_ERR_RANGE;
    memcpy(out, pi_stats_expert_row((struct pi_stats *)s, layer, kind),
           (size_t)s->n_expert * sizeof *out);
    return PI_OK;
}

static void errbuf_set(char *buf, size_t cap, const struct pi_error *err) {
    if (buf && cap > 0)
        snprintf(buf, cap, "%s", err->msg);
}

/* ---- side file ------------------------------------------------------------------- */

static int save(const pi_stats *s, const char *path, struct pi_error *err) {
    struct gguf_writer *w;
    int st = gguf_writer_create(&s->alloc, &w);
    if (st < 0)
        PI_FAIL(err, st, "out of memory");
    const uint32_t nl = (uint32_t)s->n_layer, nf = (uint32_t)s->n_ff;
    uint64_t tp = 0, to = 0;
    for (int64_t l = 0; l < s->n_layer; l++) {
        tp = s->layer[l].tokens_predicted > tp ? s->layer[l].tokens_predicted : tp;
        to = s->layer[l].tokens_observed > to ? s->layer[l].tokens_observed : to;
    }
    st = gguf_writer_add_string(w, "general.architecture", STATS_ARCH);
    if (st == PI_OK && s->name[0])
        st = gguf_writer_add_string(w, "general.name", s->name);
    if (st == PI_OK)
        st = gguf_writer_add_scalar(w, STATS_ARCH ".block_count", PI_META_U32, &nl);
    if (st == PI_OK)
        st = gguf_writer_add_scalar(w, STATS_ARCH ".feed_forward_length", PI_META_U32, &nf);
    if (st == PI_OK)
        st = gguf_writer_add_scalar(w, STATS_ARCH ".tokens_predicted", PI_META_U64, &tp);
    if (st == PI_OK)
        st = gguf_writer_add_scalar(w, STATS_ARCH ".tokens_observed", PI_META_U64, &to);
    if (st == PI_OK)
        st = gguf_writer_add_string(w, STATS_ARCH ".source", s->source);
    const uint32_t ne = (uint32_t)s->n_expert;
    if (st == PI_OK && ne)
        st = gguf_writer_add_scalar(w, STATS_ARCH ".expert_count", PI_META_U32, &ne);
    for (int64_t l = 0; l < s->n_layer && st == PI_OK; l++)
        for (int k = 0; k < 3 && st == PI_OK; k++) {
            char name[GGUF_MAX_NAME];
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, KIND_NAME[k]);
            const int64_t dims[1] = {s->n_ff};
            st = gguf_writer_add_tensor(w, name, PI_TYPE_F64, 1, dims,
                                        pi_stats_row((struct pi_stats *)s, l, k));
        }
    for (int64_t l = 0; ne && l < s->n_layer && st == PI_OK; l++)
        for (int k = 0; k < 2 && st == PI_OK; k++) {
            char name[GGUF_MAX_NAME];
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, EXPERT_KIND_NAME[k]);
            const int64_t dims[1] = {s->n_expert};
            st = gguf_writer_add_tensor(w, name, PI_TYPE_F64, 1, dims,
                                        pi_stats_expert_row((struct pi_stats *)s, l, k));
        }
    if (st < 0) {
        gguf_writer_destroy(w);
        PI_FAIL(err, st, "out of memory");
    }
    st = gguf_writer_replace_file(w, path, GGUF_MAGIC_GGUF, err);
    gguf_writer_destroy(w);
    return st;
}

int pi_stats_save(const pi_stats *s, const char *path, char *errbuf, size_t cap) {
    struct pi_error err;
    pi_error_clear(&err);
    if (!s || !path) {
        snprintf(err.msg, sizeof err.msg, "pi_stats_save: NULL argument");
        errbuf_set(errbuf, cap, &err);
        return PI_ERR_INVALID_ARG;
    }
    int st = save(s, path, &err);
    if (st < 0)
        errbuf_set(errbuf, cap, &err);
    return st;
}

static int get_u64(const struct gguf_file *f, const char *key, int required, uint64_t *out,
                   struct pi_error *err) {
    *out = 0;
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        if (required)
            PI_FAIL(err, PI_ERR_FORMAT, "statistics file lacks the key %s", key);
        return PI_OK;
    }
    int64_t v;
    if (kv->type == PI_META_ARRAY || kv->type == PI_META_STRING ||
        gguf_kv_int(f, kv, 0, &v) != PI_OK || v < 0)
        PI_FAIL(err, PI_ERR_FORMAT, "statistics key %s must be a non-negative integer", key);
    *out = (uint64_t)v;
    return PI_OK;
}

static void copy_str(const struct gguf_file *f, const char *key, char *dst, size_t cap) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    const char *s;
    uint64_t len;
    dst[0] = '\0';
    if (kv && kv->type == PI_META_STRING && gguf_kv_str(f, kv, 0, &s, &len) == PI_OK)
        snprintf(dst, cap, "%.*s", (int)(len < cap ? len : cap - 1), s);
}

int pi_stats_from_gguf(const struct gguf_file *f, const struct pi_allocator *a,
                       struct pi_stats **out, struct pi_error *err) {
    *out = NULL;
    char arch[64];
    copy_str(f, "general.architecture", arch, sizeof arch);
    if (strcmp(arch, STATS_ARCH) != 0)
        PI_FAIL(err, PI_ERR_FORMAT, "not an activation statistics file: general.architecture "
                "is '%s', expected '" STATS_ARCH "'", arch);
    uint64_t nl, nf, tp, to;
    PI_TRY(get_u64(f, STATS_ARCH ".block_count", 1, &nl, err));
    PI_TRY(get_u64(f, STATS_ARCH ".feed_forward_length", 1, &nf, err));
    PI_TRY(get_u64(f, STATS_ARCH ".tokens_predicted", 0, &tp, err));
    PI_TRY(get_u64(f, STATS_ARCH ".tokens_observed", 0, &to, err));
    /* nf is bounded by division: nl * nf could wrap (4 x 2^62 is 0 mod 2^64) */
    if (nl == 0 || nl > 4096 || nf == 0 || nf > (uint64_t)MAX_STATS_NEURONS / nl)
        PI_FAIL(err, PI_ERR_FORMAT, "statistics shape %llu layers x %llu neurons is out of "
                "range", (unsigned long long)nl, (unsigned long long)nf);
    uint64_t nx;
    PI_TRY(get_u64(f, STATS_ARCH ".expert_count", 0, &nx, err));
    if (nx > MAX_STATS_EXPERTS)
        PI_FAIL(err, PI_ERR_FORMAT, "statistics key " STATS_ARCH ".expert_count = %llu is above "
                "%d", (unsigned long long)nx, MAX_STATS_EXPERTS);
    const uint64_t per = nx ? 5 : 3;
    if (f->n_tensors != per * nl)
        PI_FAIL(err, PI_ERR_FORMAT, "statistics file has %llu tensors, expected %llu (%llu per "
                "layer)", (unsigned long long)f->n_tensors, (unsigned long long)(per * nl),
                (unsigned long long)per);
    struct pi_stats *s;
    int st = pi_stats_create(a, (int64_t)nl, (int64_t)nf, (int64_t)nx, &s);
    if (st < 0)
        PI_FAIL(err, st, "out of memory for %llu x %llu statistics", (unsigned long long)nl,
                (unsigned long long)nf);
    for (uint64_t l = 0; l < nl; l++) {
        for (int k = 0; k < 3; k++) {
            char name[GGUF_MAX_NAME];
            snprintf(name, sizeof name, "blk.%llu.%s", (unsigned long long)l, KIND_NAME[k]);
            int64_t i = gguf_find_tensor(f, name);
            const struct gguf_tensor *t = i >= 0 ? &f->tensors[i] : NULL;
            if (!t || t->type != PI_TYPE_F64 || t->n_dims != 1 || t->ne[0] != (int64_t)nf) {
                pi_stats_destroy(s);
                PI_FAIL(err, PI_ERR_FORMAT, "statistics tensor %s is %s; expected F64 {%llu}",
                        name, t ? "misshaped or not F64" : "missing", (unsigned long long)nf);
            }
            double *row = pi_stats_row(s, (int64_t)l, k);
            memcpy(row, t->data, (size_t)nf * sizeof *row);
            double sum = 0.0;
            for (uint64_t r = 0; r < nf; r++) {
                if (!(row[r] >= 0.0) || isinf(row[r])) {
                    pi_stats_destroy(s);
                    PI_FAIL(err, PI_ERR_FORMAT, "statistics tensor %s holds a negative or "
                            "non-finite count at %llu", name, (unsigned long long)r);
                }
                sum += row[r];
            }
            double *dst = k == 0 ? &s->layer[l].predicted
                          : k == 1 ? &s->layer[l].active
                                   : &s->layer[l].both;
            *dst = sum;
        }
        s->layer[l].tokens_predicted = tp;
        s->layer[l].tokens_observed = to;
        for (int k = 0; k < 2 && nx; k++) {
            char name[GGUF_MAX_NAME];
            snprintf(name, sizeof name, "blk.%llu.%s", (unsigned long long)l,
                     EXPERT_KIND_NAME[k]);
            int64_t i = gguf_find_tensor(f, name);
            const struct gguf_tensor *t = i >= 0 ? &f->tensors[i] : NULL;
            if (!t || t->type != PI_TYPE_F64 || t->n_dims != 1 || t->ne[0] != (int64_t)nx) {
                pi_stats_destroy(s);
                PI_FAIL(err, PI_ERR_FORMAT, "statistics tensor %s is %s; expected F64 {%llu}",
                        name, t ? "misshaped or not F64" : "missing", (unsigned long long)nx);
            }
            double *row = pi_stats_expert_row(s, (int64_t)l, k);
            memcpy(row, t->data, (size_t)nx * sizeof *row);
            for (uint64_t r = 0; r < nx; r++)
                if (!(row[r] >= 0.0) || isinf(row[r])) {
                    pi_stats_destroy(s);
                    PI_FAIL(err, PI_ERR_FORMAT, "statistics tensor %s holds a negative or "
                            "non-finite value at %llu", name, (unsigned long long)r);
                }
        }
    }
    copy_str(f, "general.name", s->name, sizeof s->name);
    copy_str(f, STATS_ARCH ".source", s->source, sizeof s->source);
    *out = s;
    return PI_OK;
}

int pi_stats_load(const char *path, pi_stats **out, char *errbuf, size_t cap) {
    struct pi_error err;
    pi_error_clear(&err);
    if (out)
        *out = NULL;
    if (!path || !out) {
        snprintf(err.msg, sizeof err.msg, "pi_stats_load: NULL argument");
        errbuf_set(errbuf, cap, &err);
        return PI_ERR_INVALID_ARG;
    }
    struct pi_file_map map;
    int st = pi_os_map_file(path, &map, &err);
    if (st == PI_OK) {
        struct gguf_file f;
        st = gguf_parse(&f, map.data, map.size, &pi_default_allocator, &err);
        if (st == PI_OK) {
            st = pi_stats_from_gguf(&f, &pi_default_allocator, out, &err);
            gguf_close(&f);
        }
        pi_os_unmap_file(&map);
    }
    if (st < 0) {
        pi_error_prefix(&err, "%s: ", path);
        errbuf_set(errbuf, cap, &err);
    }
    return st;
}
