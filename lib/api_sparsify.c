/* api_sparsify.c -- pi_model_sparsify: turn a dense GGUF file with a gated FFN into a
 * sparse-capable one (docs/formats.md, "Sparsified files").
 *
 * The input is mapped, parsed and described (model/desc.c) so that only models this
 * library runs, with a gated FFN in every layer, are accepted. The output is streamed
 * like pi_model_quantize's: the metadata carried over as raw bytes plus the
 * powerinfer.sparsify.* keys, the header with every tensor's type and offset, then
 * the tensors in the input's order. A fused gate_up (Phi-3's blk.N.ffn_up.weight
 * {n_embd, 2 n_ff}) is written as blk.N.ffn_gate.weight and blk.N.ffn_up.weight, its
 * two halves. Each blk.N.ffn_down.weight {n_ff, n_embd} becomes
 * blk.N.ffn_down_t.weight {n_embd, n_ff}: dequantized to floats, transposed, and
 * quantized row by row (one row of n_embd per neuron) to the chosen type; the round
 * trip's error is measured against the dequantized source. Memory: the metadata and
 * one layer's down projection twice as floats, plus its output bytes. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "model/desc.h"
#include "model/gguf.h"
#include "runtime/pool.h"
#include "runtime/quantize.h"
#include "runtime/types.h"
#include "util/os.h"
#include "util/params.h"

/* The first published pi_sparsify_params ended after down_error; method and
 * neuron_order came later. */
#define SPARSIFY_PARAMS_MIN_SIZE (offsetof(pi_sparsify_params, down_error) + sizeof(double *))
#define COPY_CHUNK               ((uint64_t)16 << 20)
#define ROW_GRAIN                64

int pi_sparsify_default_params(pi_sparsify_params *params) {
    if (!params)
        return PI_ERR_INVALID_ARG;
    memset(params, 0, sizeof *params);
    params->struct_size = (uint32_t)sizeof *params;
    return PI_OK;
}

struct srun {
    pi_sparsify_params p;
    const char *in_path, *out_path;
    struct pi_error *err;
    struct pi_file_map map;
    struct gguf_file f;
    struct pi_model_desc d;
    int have_desc;
    struct gguf_writer *w;
    int64_t *layer_of; /* per input tensor: the layer whose ffn_down it is, or -1 */
    int64_t *perm_of;  /* per input tensor: the layer whose gate or up it is when
                        * neuron_order is given, or -1 */
    int64_t *fused_of; /* per input tensor: the layer whose fused gate_up {E, 2F} it is
                        * (written as ffn_gate, then ffn_up), or -1 */
    uint32_t *down_to; /* per layer: the type of ffn_down_t */
    struct pi_pool *pool;
    float *dq, *tr; /* [n_ff * n_embd] one layer's down, as stored and transposed */
    float *scratch; /* [n_threads][n_embd] */
    double *err2;   /* [n_ff][2]: per row sum (d' - d)^2, sum d^2 */
    uint8_t *obuf;
    uint8_t *seen; /* [n_ff] checking a neuron order */
    char *tmp;
    FILE *fp;
    uint64_t done, total;
};

static int progress(struct srun *r) {
    float frac = r->total ? (float)((double)r->done / (double)r->total) : 1.0f;
    if (r->p.progress_fn && r->p.progress_fn(r->p.progress_user, frac))
        PI_FAIL(r->err, PI_ERR_ABORTED, "sparsification aborted by the caller");
    return PI_OK;
}

static int write_failed(struct srun *r, int status) {
    if (status == PI_ERR_IO)
        PI_FAIL(r->err, PI_ERR_IO, "cannot write '%s': %s", r->tmp, strerror(errno));
    PI_FAIL(r->err, status == PI_ERR_NOMEM ? PI_ERR_NOMEM : PI_ERR_INTERNAL,
            "writing '%s' failed (%s)", r->tmp, pi_status_str(status));
}

static int put(struct srun *r, const void *data, uint64_t n) {
    errno = 0;
    int st = gguf_writer_write_data(r->w, r->fp, data, n);
    return st < 0 ? write_failed(r, st) : PI_OK;
}

static int is_target(uint32_t t) {
    return t == PI_TYPE_F32 || t == PI_TYPE_F16 || t == PI_TYPE_BF16 || t == PI_TYPE_Q4_0 ||
           t == PI_TYPE_Q4_1 || t == PI_TYPE_Q5_0 || t == PI_TYPE_Q5_1 || t == PI_TYPE_Q8_0;
}

/* ffn_down_t's type for a source of type `src` and rows of n_embd: a float type stays
 * (an exact transpose); Q8_0 stays Q8_0 (its rounding error is small); a source of at
 * most 4.5 bits per weight (Q4_0, Q4_1, IQ4_NL, IQ4_XS, MXFP4, Q4_K, Q3_K, Q2_K) becomes
 * Q5_0: 5.5 bits, an error about half the source's own, which on SmolLM2 costs no
 * measurable perplexity against Q8_0 (docs/formats.md) for 0.65x its bytes per kept
 * neuron; other quantized sources (Q5_0, Q5_1, Q5_K, Q6_K) become Q8_0. F16 where
 * n_embd is not a multiple of 32. */
static int down_type(struct srun *r, uint32_t src, int64_t E, uint32_t *to) {
    if (r->p.down_type) {
        if (!pi_type_row_bytes(r->p.down_type, E))
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                    "down_type %s: its block does not divide "
                    "n_embd %lld",
                    pi_type_name((int)r->p.down_type), (long long)E);
        *to = r->p.down_type;
    } else if ((src == PI_TYPE_F32 || src == PI_TYPE_F16 || src == PI_TYPE_BF16 ||
                src == PI_TYPE_Q8_0) &&
               pi_type_row_bytes(src, E)) {
        *to = src;
    } else if (!pi_type_row_bytes(PI_TYPE_Q8_0, E)) {
        *to = PI_TYPE_F16;
    } else {
        const int low = src == PI_TYPE_Q4_0 || src == PI_TYPE_Q4_1 || src == PI_TYPE_ID_IQ4_NL ||
                        src == PI_TYPE_ID_IQ4_XS || src == PI_TYPE_MXFP4 || src == PI_TYPE_Q4_K ||
                        src == PI_TYPE_Q3_K || src == PI_TYPE_Q2_K;
        *to = low ? PI_TYPE_Q5_0 : PI_TYPE_Q8_0;
    }
    return PI_OK;
}

/* Every layer a gated FFN this path can rewrite and run thresholded. */
static int check_model(struct srun *r) {
    const struct pi_hparams *hp = &r->d.hp;
    if (r->f.magic == GGUF_MAGIC_PWRI)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                "a PowerInfer (PWRI) file already stores "
                "ffn_down_t; it runs sparse as it is (PI_SPARSE_THRESHOLD included)");
    if (hp->sparsified)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                "the file is already sparsified "
                "(powerinfer.sparsify.method); sparsify the original");
    if (r->p.n_thresholds != (uint64_t)hp->n_layer)
        PI_FAIL(r->err, PI_ERR_INVALID_ARG,
                "pi_model_sparsify: %llu thresholds for a model "
                "of %lld layers",
                (unsigned long long)r->p.n_thresholds, (long long)hp->n_layer);
    if (!pi_ffn_act_thresholdable(hp->ffn_act))
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                "this model's FFN activation is not one the "
                "thresholded FFN runs (silu, gelu, relu)");
    const int64_t E = hp->n_embd;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer_desc *L = &r->d.layers[l];
        if (L->router && r->p.neuron_order)
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                    "layer %lld has experts: a neuron order (one permutation per layer) "
                    "does not apply to them",
                    (long long)l);
        if (L->router && (L->b_gate_exps || L->b_up_exps || L->b_down_exps))
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                    "layer %lld's experts have biases, which the thresholded experts do "
                    "not run", (long long)l);
        const int gated = (hp->info->flags & PI_AF_GATED) != 0;
        if (gated && !L->router && !L->ffn_gate && !L->up_fused)
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                    "layer %lld's gated FFN has no ffn_gate (separate or fused "
                    "with ffn_up): the thresholded FFN needs act(gate . x) per neuron",
                    (long long)l);
        if (L->up_fused && L->b_up)
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                    "layer %lld has a bias on its fused gate_up, which pi_model_sparsify "
                    "does not split",
                    (long long)l);
        if (L->router && r->p.keep_down)
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                    "layer %lld has experts: keep_down applies to dense FFN layers only",
                    (long long)l);
        const struct gguf_tensor *down = L->router ? L->down_exps : L->ffn_down;
        if (!down || !pi_type_traits(down->type)->to_float)
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "layer %lld: its down projection cannot be read",
                    (long long)l);
        PI_TRY(down_type(r, down->type, E, &r->down_to[l]));
        if (r->p.neuron_order) { /* a permutation of 0 .. F - 1 */
            const int32_t *o = r->p.neuron_order + l * hp->n_ff;
            memset(r->seen, 0, (size_t)hp->n_ff);
            for (int64_t i = 0; i < hp->n_ff; i++) {
                if (o[i] < 0 || o[i] >= hp->n_ff || r->seen[o[i]])
                    PI_FAIL(r->err, PI_ERR_INVALID_ARG, "pi_model_sparsify: neuron_order of "
                            "layer %lld is not a permutation of 0 .. %lld (entry %lld)",
                            (long long)l, (long long)hp->n_ff - 1, (long long)i);
                r->seen[o[i]] = 1;
            }
        }
        const double t = r->p.thresholds[l];
        if (!isfinite(t) || fabs(t) > 1e30)
            PI_FAIL(r->err, PI_ERR_INVALID_ARG,
                    "pi_model_sparsify: threshold %lld is not "
                    "finite",
                    (long long)l);
    }
    return PI_OK;
}

/* Writer: the input's metadata, the powerinfer.sparsify keys, the tensor infos. */
static int plan(struct srun *r) {
    const struct gguf_file *f = &r->f;
    const struct pi_hparams *hp = &r->d.hp;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    if (gguf_writer_create(&pi_default_allocator, &r->w) < 0)
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory");
    int st = gguf_writer_set_alignment(r->w, f->alignment);
    for (uint64_t i = 0; st == PI_OK && i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        st = gguf_writer_add_raw(r->w, kv->key, kv->type, kv->elem_type, kv->n, f->base + kv->off,
                                 kv->size);
    }
    const float sp = r->p.sparsity;
    const uint64_t ntok = r->p.calibration_tokens;
    if (st == PI_OK)
        st = gguf_writer_add_string(r->w, "powerinfer.sparsify.method",
                                    r->p.method == PI_SPARSIFY_TEAL ? "teal" : "cats");
    if (st == PI_OK)
        st = gguf_writer_add_scalar(r->w, "powerinfer.sparsify.sparsity", PI_META_F32, &sp);
    if (st == PI_OK)
        st = gguf_writer_add_array(r->w, "powerinfer.sparsify.thresholds", PI_META_F32,
                                   r->p.thresholds, r->p.n_thresholds);
    if (st == PI_OK)
        st = gguf_writer_add_string(r->w, "powerinfer.sparsify.calibration",
                                    r->p.calibration ? r->p.calibration : "");
    if (st == PI_OK)
        st = gguf_writer_add_scalar(r->w, "powerinfer.sparsify.calibration_tokens", PI_META_U64,
                                    &ntok);
    if (st == PI_OK && r->p.neuron_order)
        st = gguf_writer_add_array(r->w, "powerinfer.sparsify.neuron_order", PI_META_I32,
                                   r->p.neuron_order, (uint64_t)(hp->n_layer * F));
    for (uint64_t i = 0; st == PI_OK && i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const int64_t l = r->layer_of[i];
        char name[64];
        if (r->fused_of[i] >= 0) { /* Phi-3's gate_up: gate rows, then up rows */
            const int64_t ne[2] = {E, F};
            snprintf(name, sizeof name, "blk.%lld.ffn_gate.weight", (long long)r->fused_of[i]);
            st = gguf_writer_add_tensor_info(r->w, name, t->type, 2, ne);
            snprintf(name, sizeof name, "blk.%lld.ffn_up.weight", (long long)r->fused_of[i]);
            if (st == PI_OK)
                st = gguf_writer_add_tensor_info(r->w, name, t->type, 2, ne);
            continue;
        }
        if (l < 0) {
            st = gguf_writer_add_tensor_info(r->w, t->name, t->type, t->n_dims, t->ne);
            continue;
        }
        const int moe = r->d.layers[l].router != NULL; /* {E, Fe, X}: experts' down_t */
        if (r->p.keep_down) /* ffn_down as it is, then ffn_down_t */
            st = gguf_writer_add_tensor_info(r->w, t->name, t->type, t->n_dims, t->ne);
        if (st != PI_OK)
            break;
        snprintf(name, sizeof name, moe ? "blk.%lld.ffn_down_exps_t.weight"
                                        : "blk.%lld.ffn_down_t.weight", (long long)l);
        const int64_t ne[3] = {E, moe ? hp->n_ff_exp : F, hp->n_expert};
        st = gguf_writer_add_tensor_info(r->w, name, r->down_to[l], moe ? 3 : 2, ne);
    }
    if (st == PI_ERR_NOMEM)
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory");
    if (st < 0)
        PI_FAIL(r->err, PI_ERR_INTERNAL, "cannot carry the metadata over (%s)", pi_status_str(st));
    return PI_OK;
}

struct tr_job {
    struct srun *r;
    int64_t E;
    uint32_t to;
    uint64_t row_bytes;
};

/* Rows [lo, hi) of ffn_down_t: quantize tr's row, read it back, add up the error. */
static void down_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    const struct tr_job *j = arg;
    struct srun *r = j->r;
    const int64_t E = j->E;
    float *back = r->scratch + (size_t)ith * (size_t)E;
    for (int64_t row = lo; row < hi; row++) {
        const float *src = r->tr + (size_t)row * (size_t)E;
        uint8_t *dst = r->obuf + (uint64_t)row * j->row_bytes;
        pi_quantize_row_mse(j->to, src, dst, E);
        pi_type_traits(j->to)->to_float(dst, back, E);
        double e2 = 0.0, s2 = 0.0;
        for (int64_t k = 0; k < E; k++) {
            const double d = (double)back[k] - (double)src[k];
            e2 += d * d;
            s2 += (double)src[k] * (double)src[k];
        }
        r->err2[2 * row] = e2;
        r->err2[2 * row + 1] = s2;
    }
}

/* Layer l's down projection {F, E} (E rows of F: row e = output e over the neurons),
 * or its experts' {Fe, E, X}, written transposed: F rows of E per expert (row n =
 * neuron n, in neuron_order where given), in down_to[l]; down_error[l] = the relative
 * error of all of them together. */
static int transpose_down(struct srun *r, const struct gguf_tensor *t, int64_t l) {
    const int64_t E = r->d.hp.n_embd;
    const int moe = r->d.layers[l].router != NULL;
    const int64_t F = moe ? r->d.hp.n_ff_exp : r->d.hp.n_ff, X = moe ? r->d.hp.n_expert : 1;
    const int32_t *ord = r->p.neuron_order ? r->p.neuron_order + l * F : NULL;
    const uint64_t in_bytes = t->nbytes / (uint64_t)X; /* one expert's */
    struct tr_job job = {r, E, r->down_to[l], pi_type_row_bytes(r->down_to[l], E)};
    double e2 = 0.0, s2 = 0.0;
    for (int64_t x = 0; x < X; x++) {
        pi_type_traits(t->type)->to_float(t->data + (uint64_t)x * in_bytes, r->dq, F * E);
        for (int64_t e = 0; e < E; e++)
            for (int64_t n = 0; n < F; n++)
                r->tr[(size_t)n * (size_t)E + (size_t)e] =
                    r->dq[(size_t)e * (size_t)F + (size_t)(ord ? ord[n] : n)];
        if (r->pool)
            pi_pool_for(r->pool, F, ROW_GRAIN, down_rows, &job);
        else
            down_rows(&job, 0, F, 0);
        for (int64_t n = 0; n < F; n++) {
            e2 += r->err2[2 * n];
            s2 += r->err2[2 * n + 1];
        }
        PI_TRY(put(r, r->obuf, (uint64_t)F * job.row_bytes));
        r->done += in_bytes;
        PI_TRY(progress(r));
    }
    if (r->p.down_error)
        r->p.down_error[l] = s2 > 0.0 ? sqrt(e2 / s2) : 0.0;
    return PI_OK;
}

static int copy_tensor(struct srun *r, const struct gguf_tensor *t) {
    for (uint64_t at = 0; at < t->nbytes;) {
        uint64_t k = t->nbytes - at < COPY_CHUNK ? t->nbytes - at : COPY_CHUNK;
        PI_TRY(put(r, t->data + at, k));
        at += k;
        r->done += k;
        PI_TRY(progress(r));
    }
    return PI_OK;
}

/* Layer l's gate or up {E, F}, or its fused gate_up {E, 2F} (parts 2: the gate's F
 * rows, then the up's), or the gate's or up's bias {F} (a row: one value), with the
 * rows (neurons) of each part in neuron_order. */
static int copy_permuted(struct srun *r, const struct gguf_tensor *t, int64_t l, int parts) {
    const int64_t F = r->d.hp.n_ff;
    const int32_t *ord = r->p.neuron_order + l * F;
    const uint64_t rb = t->nbytes / (uint64_t)(F * parts);
    for (int p = 0; p < parts; p++)
        for (int64_t i = 0; i < F; i++)
            PI_TRY(put(r, t->data + ((uint64_t)p * (uint64_t)F + (uint64_t)ord[i]) * rb, rb));
    r->done += t->nbytes;
    return progress(r);
}

static int buffers(struct srun *r, int n_threads) {
    const struct pi_allocator *a = &pi_default_allocator;
    const int64_t E = r->d.hp.n_embd;
    int64_t F = 1; /* the widest FFN (or expert) */
    uint64_t ob = 0;
    for (int64_t l = 0; l < r->d.hp.n_layer; l++) {
        const int64_t Fl = r->d.layers[l].router ? r->d.hp.n_ff_exp : r->d.hp.n_ff;
        const uint64_t b = pi_type_row_bytes(r->down_to[l], E) * (uint64_t)Fl;
        ob = b > ob ? b : ob;
        F = Fl > F ? Fl : F;
    }
    if ((uint64_t)F * (uint64_t)E > SIZE_MAX / sizeof(float) / 2 || ob > SIZE_MAX)
        PI_FAIL(r->err, PI_ERR_NOMEM, "the down projection is too large for this system");
    r->dq = pi_malloc(a, (size_t)(F * E) * sizeof(float));
    r->tr = pi_malloc(a, (size_t)(F * E) * sizeof(float));
    r->scratch = pi_malloc(a, (size_t)n_threads * (size_t)E * sizeof(float));
    r->err2 = pi_malloc(a, (size_t)F * 2 * sizeof(double));
    r->obuf = pi_malloc(a, (size_t)ob);
    if (!r->dq || !r->tr || !r->scratch || !r->err2 || !r->obuf)
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory for one layer's down projection");
    if (n_threads > 1) {
        int st = pi_pool_create(&r->pool, n_threads, a);
        if (st < 0)
            PI_FAIL(r->err, st == PI_ERR_NOMEM ? PI_ERR_NOMEM : PI_ERR_INTERNAL,
                    "cannot start %d threads", n_threads);
    }
    return PI_OK;
}

static int open_tmp(struct srun *r) {
    size_t cap = strlen(r->out_path) + 48;
    r->tmp = pi_malloc(&pi_default_allocator, cap);
    if (!r->tmp)
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory");
    int st = pi_os_create_temp(r->out_path, r->tmp, cap, &r->fp, r->err);
    if (st < 0) {
        pi_free(&pi_default_allocator, r->tmp);
        r->tmp = NULL;
    }
    return st;
}

static int commit(struct srun *r) {
    FILE *fp = r->fp;
    r->fp = NULL;
    PI_TRY(pi_os_sync_close(fp, r->tmp, r->err));
    PI_TRY(pi_os_replace(r->tmp, r->out_path, r->err));
    pi_free(&pi_default_allocator, r->tmp);
    r->tmp = NULL;
    return PI_OK;
}

static int sparsify(struct srun *r, int n_threads) {
    if (pi_os_same_file(r->in_path, r->out_path))
        PI_FAIL(r->err, PI_ERR_INVALID_ARG,
                "'%s' is the input file; write the output to "
                "another path",
                r->out_path);
    PI_TRY(pi_os_map_file(r->in_path, &r->map, r->err));
    int st = gguf_parse(&r->f, r->map.data, r->map.size, &pi_default_allocator, r->err);
    struct gguf_split split;
    if (st == PI_OK)
        st = gguf_split_info(&r->f, &split, r->err);
    if (st == PI_OK && split.count > 1)
        st = pi_error_set(r->err, PI_ERR_UNSUPPORTED,
                          "part %u of %u of a split model: "
                          "pi_model_sparsify takes a whole model in one file",
                          split.no + 1, split.count);
    if (st == PI_OK) {
        st = pi_model_desc_build(&r->d, &r->f, &pi_default_allocator, NULL, NULL, NULL, r->err);
        r->have_desc = st == PI_OK;
    }
    if (st < 0) {
        pi_error_prefix(r->err, "%s", r->in_path);
        return st;
    }
    const struct pi_hparams *hp = &r->d.hp;
    r->layer_of = pi_malloc(&pi_default_allocator,
                            (size_t)(r->f.n_tensors ? r->f.n_tensors : 1) * sizeof *r->layer_of);
    r->perm_of = pi_malloc(&pi_default_allocator,
                           (size_t)(r->f.n_tensors ? r->f.n_tensors : 1) * sizeof *r->perm_of);
    r->fused_of = pi_malloc(&pi_default_allocator,
                            (size_t)(r->f.n_tensors ? r->f.n_tensors : 1) * sizeof *r->fused_of);
    r->down_to = pi_calloc(&pi_default_allocator, (size_t)hp->n_layer, sizeof *r->down_to);
    r->seen = pi_malloc(&pi_default_allocator, (size_t)hp->n_ff);
    if (!r->layer_of || !r->perm_of || !r->fused_of || !r->down_to || !r->seen)
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory");
    PI_TRY(check_model(r));
    for (uint64_t i = 0; i < r->f.n_tensors; i++) {
        r->layer_of[i] = -1;
        r->perm_of[i] = -1;
        r->fused_of[i] = -1;
        for (int64_t l = 0; l < hp->n_layer; l++) {
            const struct pi_layer_desc *L = &r->d.layers[l];
            if (L->ffn_down == &r->f.tensors[i] || L->down_exps == &r->f.tensors[i])
                r->layer_of[i] = l;
            if (L->up_fused && L->ffn_up == &r->f.tensors[i])
                r->fused_of[i] = l;
            if (r->p.neuron_order &&
                (L->ffn_gate == &r->f.tensors[i] || L->ffn_up == &r->f.tensors[i] ||
                 L->b_gate == &r->f.tensors[i] || L->b_up == &r->f.tensors[i]))
                r->perm_of[i] = l;
        }
        r->total += r->f.tensors[i].nbytes;
        if (r->layer_of[i] >= 0 && r->p.keep_down) /* copied, then transposed */
            r->total += r->f.tensors[i].nbytes;
    }
    PI_TRY(progress(r));
    PI_TRY(plan(r));
    PI_TRY(buffers(r, n_threads));
    PI_TRY(open_tmp(r));
    errno = 0;
    st = gguf_writer_write_header(r->w, r->fp, GGUF_MAGIC_GGUF);
    if (st < 0)
        return write_failed(r, st);
    for (uint64_t i = 0; i < r->f.n_tensors; i++) {
        const struct gguf_tensor *t = &r->f.tensors[i];
        if (r->layer_of[i] >= 0 && r->p.keep_down)
            PI_TRY(copy_tensor(r, t));
        if (r->layer_of[i] >= 0)
            PI_TRY(transpose_down(r, t, r->layer_of[i]));
        else if (r->perm_of[i] >= 0)
            PI_TRY(copy_permuted(r, t, r->perm_of[i], r->fused_of[i] >= 0 ? 2 : 1));
        else /* a fused gate_up unpermuted: its bytes are the gate's, then the up's */
            PI_TRY(copy_tensor(r, t));
    }
    st = gguf_writer_finish(r->w, r->fp);
    if (st < 0)
        return write_failed(r, st);
    return commit(r);
}

int pi_model_sparsify(const char *in_path, const char *out_path, const pi_sparsify_params *params) {
    struct pi_error err;
    pi_error_clear(&err);
    struct srun r;
    memset(&r, 0, sizeof r);
    r.in_path = in_path;
    r.out_path = out_path;
    r.err = &err;
    pi_sparsify_default_params(&r.p);
    int st = pi_params_take(params, &r.p, sizeof r.p, SPARSIFY_PARAMS_MIN_SIZE,
                            "pi_sparsify_params", &err);
    if (st == PI_OK && (!in_path || !out_path))
        st = pi_error_set(&err, PI_ERR_INVALID_ARG,
                          "pi_model_sparsify: in_path and out_path must not be NULL");
    if (st == PI_OK && (r.p.method > PI_SPARSIFY_TEAL || r.p.reserved0 || r.p.reserved1))
        st = pi_error_set(&err, PI_ERR_INVALID_ARG, "pi_model_sparsify: method %u is not a "
                          "PI_SPARSIFY_* value, or a reserved field is not zero", r.p.method);
    if (st == PI_OK && r.p.keep_down > 1)
        st = pi_error_set(&err, PI_ERR_INVALID_ARG, "pi_model_sparsify: keep_down is %u, "
                          "not 0 or 1", r.p.keep_down);
    if (st == PI_OK && r.p.keep_down && r.p.neuron_order)
        st = pi_error_set(&err, PI_ERR_UNSUPPORTED, "pi_model_sparsify: keep_down with a "
                          "neuron_order: ffn_down's columns would have to be requantized in "
                          "the new order; use one or the other");
    if (st == PI_OK && (!r.p.thresholds || !r.p.n_thresholds))
        st = pi_error_set(&err, PI_ERR_INVALID_ARG, "pi_model_sparsify: no thresholds");
    if (st == PI_OK && !(r.p.sparsity >= 0.0f && r.p.sparsity < 1.0f))
        st = pi_error_set(&err, PI_ERR_INVALID_ARG,
                          "pi_model_sparsify: sparsity %g is not "
                          "in [0, 1)",
                          (double)r.p.sparsity);
    if (st == PI_OK && r.p.down_type && !is_target(r.p.down_type))
        st = pi_error_set(&err, PI_ERR_INVALID_ARG,
                          "pi_model_sparsify: down_type %u is not "
                          "F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0",
                          r.p.down_type);
    if (st == PI_OK) {
        int n = r.p.n_threads ? (int)(r.p.n_threads > 1024 ? 1024 : r.p.n_threads) : pi_os_n_cpus();
        st = sparsify(&r, n < 1 ? 1 : n);
    }
    if (r.fp)
        fclose(r.fp);
    if (r.tmp)
        pi_os_remove(r.tmp);
    const struct pi_allocator *a = &pi_default_allocator;
    pi_free(a, r.tmp);
    pi_pool_destroy(r.pool);
    pi_free(a, r.dq);
    pi_free(a, r.tr);
    pi_free(a, r.scratch);
    pi_free(a, r.err2);
    pi_free(a, r.obuf);
    pi_free(a, r.layer_of);
    pi_free(a, r.perm_of);
    pi_free(a, r.fused_of);
    pi_free(a, r.seen);
    pi_free(a, r.down_to);
    gguf_writer_destroy(r.w);
    if (r.have_desc)
        pi_model_desc_free(&r.d, a);
    gguf_close(&r.f);
    pi_os_unmap_file(&r.map);
    if (st < 0 && r.p.errbuf && r.p.errbuf_cap > 0)
        snprintf(r.p.errbuf, r.p.errbuf_cap, "%s", err.msg);
    return st;
}
