/* hybrid.c -- plans for hybrid execution and the device side of a context (see
 * hybrid.h). */
#include "infer/hybrid.h"

#include <stdio.h>
#include <string.h>

#include "infer/ctx.h"
#include "plan/gpuidx.h"
#include "runtime/fp16.h"
#include "runtime/types.h"
#include "util/hash.h"

#define MIB (1024.0 * 1024.0)
#define AUTO_RESERVE (256ull << 20) /* left free on a GPU with PI_DEVICE_BUDGET_AUTO */
#define NEURON_GROUP 32             /* neurons per planner group (PowerInfer rounds too) */

/* ---- identities (FNV-1a, 64-bit) --------------------------------------------------- */


/* The file's size and everything before its tensor data: metadata and tensor table;
 * for a split model, the same of every later part too (a single file's identity is
 * unchanged). */
uint64_t pi_model_identity(const struct pi_model *m) {
    uint64_t h = pi_fnv1a(PI_FNV1A_INIT, &m->gguf.size, sizeof m->gguf.size);
    h = pi_fnv1a(h, m->gguf.base, (size_t)m->gguf.data_off);
    for (uint32_t k = 1; k < m->n_parts; k++) {
        const struct pi_model_part *p = &m->parts[k - 1];
        h = pi_fnv1a(h, &p->map.size, sizeof p->map.size);
        h = pi_fnv1a(h, p->map.data, (size_t)p->header_size);
    }
    return h;
}

/* The frequencies the planner ranks by (0: none): per layer n_ff neuron counts, or
 * n_expert selection counts in a mixture-of-experts layer. */
static uint64_t stats_id(const struct pi_model *m, const double *const *freq) {
    if (!freq)
        return 0;
    const struct pi_hparams *hp = &m->desc.hp;
    uint64_t h = PI_FNV1A_INIT;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const int64_t n = m->desc.layers[l].router ? hp->n_expert : hp->n_ff;
        h = pi_fnv1a(h, freq[l], (size_t)n * sizeof(double));
    }
    return h ? h : 1;
}

/* ---- sizes -------------------------------------------------------------------------- */

static uint64_t nb(const struct gguf_tensor *t) {
    return t ? t->nbytes : 0;
}

/* Bytes of a layer's attention part (norm, q/k/v fused or not, biases, q/k norms,
 * output projection, post-norm) and of its FFN's norm, biases and post-norm. */
static uint64_t attn_part_bytes(const struct pi_layer_desc *L) {
    return nb(L->norm_attn.w) + nb(L->norm_attn.b) + nb(L->wq) + nb(L->wk) + nb(L->wv) +
           nb(L->wqkv) + nb(L->bq) + nb(L->bk) + nb(L->bv) + nb(L->bqkv) + nb(L->q_norm) +
           nb(L->k_norm) + nb(L->wo) + nb(L->bo) + nb(L->attn_post_norm) + nb(L->attn_sinks);
}

static uint64_t ffn_small_bytes(const struct pi_layer_desc *L) {
    return nb(L->b_gate) + nb(L->b_up) + nb(L->b_down) + nb(L->ffn_post_norm);
}

/* Bytes one neuron of a sparse layer takes on the device: its rows of gate (none in
 * Falcon and OPT), up and down_t, its gate and up biases (OPT's up, a biased Llama's
 * both) and its id. */
static uint64_t sparse_neuron_bytes(const struct pi_layer_desc *L, int64_t n_embd) {
    return (L->ffn_gate ? pi_type_row_bytes(L->ffn_gate->type, n_embd) : 0) +
           pi_type_row_bytes(L->ffn_up->type, n_embd) +
           pi_type_row_bytes(L->ffn_down_t->type, n_embd) + (L->b_gate ? 4 : 0) +
           (L->b_up ? 4 : 0) + 4;
}

/* A mixture-of-experts layer's part that every token runs: router and shared expert
 * (with its gate). The planner places it with the FFN's norm. */
static uint64_t moe_dense_bytes(const struct pi_layer_desc *L) {
    return nb(L->router) + nb(L->router_b) + nb(L->gate_shexp) + nb(L->up_shexp) +
           nb(L->down_shexp) + nb(L->gate_inp_shexp);
}

/* All experts of a mixture-of-experts layer (3-D tensors of n_expert equal slices). */
static uint64_t experts_bytes(const struct pi_layer_desc *L) {
    return nb(L->gate_exps) + nb(L->up_exps) + nb(L->gate_up_exps) + nb(L->down_exps) +
           nb(L->down_exps_t) + /* a sparsified file's, instead of down_exps */
           nb(L->b_gate_exps) + nb(L->b_up_exps) + nb(L->b_down_exps); /* gpt-oss's biases */
}

static int64_t max_rank(const struct pi_model *m) {
    return m->desc.max_rank > 1 ? m->desc.max_rank : 1;
}

/* A mixture-of-experts model's device scratch (struct pi_hybrid, moe_*): the router's
 * logits [B][X], the gathered rows [B*K][E] and outputs [B*K][E] of the device's
 * experts, their hidden rows gate and up [max(B*K*Fe, B*Fs)], the shared expert's
 * output [B][E]. */
static uint64_t moe_hidden(const struct pi_hparams *hp, uint64_t B) {
    const uint64_t BK = B * (uint64_t)hp->n_expert_used, a = BK * (uint64_t)hp->n_ff_exp;
    const uint64_t b = B * (uint64_t)hp->n_ff_shexp;
    return a > b ? a : b;
}

static uint64_t moe_scratch_bytes(const struct pi_model *m, const struct pi_plan_shape *s) {
    const struct pi_hparams *hp = &m->desc.hp;
    if (!m->desc.n_moe_layers)
        return 0;
    const uint64_t B = (uint64_t)s->n_batch, E = (uint64_t)hp->n_embd;
    const uint64_t BK = B * (uint64_t)hp->n_expert_used;
    return 4 * (B * (uint64_t)hp->n_expert + 2 * BK * E + 2 * moe_hidden(hp, B) + B * E);
}

uint64_t pi_hybrid_scratch_bytes(const struct pi_model *m, const struct pi_plan_shape *s) {
    const struct pi_hparams *hp = &m->desc.hp;
    const uint64_t E = (uint64_t)hp->n_embd, F = (uint64_t)hp->n_ff, B = (uint64_t)s->n_batch;
    const uint64_t qd = (uint64_t)(hp->n_head * hp->head_dim_k);
    const uint64_t kd = (uint64_t)(hp->n_head_kv * hp->head_dim_k);
    const uint64_t vd = (uint64_t)(hp->n_head_kv * hp->head_dim_v);
    const uint64_t ad = (uint64_t)(hp->n_head * hp->head_dim_v);
    const uint64_t R = hp->predictors ? (uint64_t)max_rank(m) : 0;
    /* x xn yd yc (ya) | q k v att | score gd ud | hid ones, and the logits */
    const uint64_t ya = hp->info->flags & PI_AF_PARALLEL ? E : 0;
    const uint64_t per_tok = 4 * E + ya + qd + kd + vd + ad + (hp->predictors ? 3 : 2) * F + 2 * R;
    return 4 * (B * per_tok + PI_LOGIT_CHUNK * (uint64_t)hp->n_vocab + (uint64_t)hp->n_rot) +
           moe_scratch_bytes(m, s);
}

static uint64_t kv_bytes(const struct pi_model *m, const struct pi_plan_shape *s) {
    const struct pi_hparams *hp = &m->desc.hp;
    return 2ull * (uint64_t)hp->n_layer * (uint64_t)s->n_seq * (uint64_t)s->n_ctx *
           (uint64_t)(hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v));
}

/* ---- planning ----------------------------------------------------------------------- */

/* The frequencies of plan_stats per layer (active counts; predicted counts where a
 * layer observed none; in a mixture-of-experts layer how often each expert was
 * chosen), or NULL for uniform. */
static int stats_freq(const struct pi_model *m, const pi_ctx_params *p, const double **freq,
                      struct pi_error *err) {
    const struct pi_hparams *hp = &m->desc.hp;
    struct pi_stats *st = (struct pi_stats *)p->plan_stats;
    if (!st)
        return 0;
    if (st->n_layer != hp->n_layer || st->n_ff != hp->n_ff)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "plan_stats has %lld layers of %lld neurons; the model "
                "has %lld of %lld", (long long)st->n_layer, (long long)st->n_ff,
                (long long)hp->n_layer, (long long)hp->n_ff);
    if (m->desc.n_moe_layers && st->n_expert != hp->n_expert)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "plan_stats has %lld experts per layer; the model has "
                "%lld", (long long)st->n_expert, (long long)hp->n_expert);
    for (int64_t l = 0; l < hp->n_layer; l++)
        freq[l] = m->desc.layers[l].router
                      ? pi_stats_expert_row(st, l, PI_EXPERT_SELECTED)
                      : pi_stats_row(st, l, st->layer[l].tokens_observed ? PI_NEURON_ACTIVE
                                                                         : PI_NEURON_PREDICTED);
    return 1;
}

static int plan_compute(const struct pi_model *m, const struct pi_plan_shape *s,
                        uint64_t budget, const double *const *freq, struct pi_plan *pl,
                        struct pi_error *err) {
    const struct pi_model_desc *d = &m->desc;
    const struct pi_hparams *hp = &d->hp;
    const struct pi_allocator *a = &pl->alloc;
    const int64_t L = hp->n_layer, F = hp->n_ff;
    /* PowerInfer and pi-sparsify files store ffn_down_t: neuron by neuron */
    const int by_neuron = hp->sparse || hp->sparsified;
    struct pi_plan_layer *ls = pi_calloc(a, (size_t)L, sizeof *ls);
    if (!ls)
        PI_FAIL(err, PI_ERR_NOMEM, "plan: out of memory");
    for (int64_t l = 0; l < L; l++) {
        const struct pi_layer_desc *ld = &d->layers[l];
        ls[l].attn_bytes = attn_part_bytes(ld);
        ls[l].pred_bytes = nb(ld->fc1) + nb(ld->fc2);
        /* with the norm: OPT's down bias, which a layer with device neurons holds */
        ls[l].norm_bytes = nb(ld->norm_ffn.w) + nb(ld->norm_ffn.b) +
                           (hp->sparse ? nb(ld->b_down) : 0);
        if (ld->router) { /* units: experts, each its slice of the 3-D tensors */
            ls[l].norm_bytes += moe_dense_bytes(ld);
            ls[l].neuron_bytes = experts_bytes(ld) / (uint64_t)hp->n_expert;
            ls[l].experts = 1;
        } else if (by_neuron) {
            ls[l].neuron_bytes = sparse_neuron_bytes(ld, hp->n_embd);
        } else { /* whole layers: the matrices and biases, spread over the neurons */
            ls[l].neuron_bytes = (nb(ld->ffn_gate) + nb(ld->ffn_up) + nb(ld->ffn_down) +
                                  ffn_small_bytes(ld) + (uint64_t)F - 1) / (uint64_t)F;
        }
        ls[l].freq = freq ? freq[l] : NULL;
    }
    pl->scratch = pi_hybrid_scratch_bytes(m, s);
    pl->whole_layers = !by_neuron;
    struct pi_plan_input in = {L,
                               F,
                               ls,
                               nb(d->output) + nb(d->output_norm.w) + nb(d->output_norm.b),
                               kv_bytes(m, s),
                               budget > pl->scratch ? budget - pl->scratch : 0,
                               by_neuron ? (F < NEURON_GROUP ? F : NEURON_GROUP) : F,
                               d->n_moe_layers ? hp->n_expert : 0};
    int st = pi_placement_make(&in, a, &pl->pl, err);
    pi_free(a, ls);
    if (budget < pl->scratch) { /* nothing fits: not even the scratch */
        pl->scratch = 0;
    }
    return st;
}

/* Bytes the dense parts (and experts) of pl leave for neurons under its budget. */
static uint64_t neuron_room(const struct pi_plan *pl) {
    const uint64_t dense = pl->pl.total - pl->pl.bytes[PI_PART_FFN] + pl->scratch;
    return pl->budget > dense ? pl->budget - dense : 0;
}

/* Replace pl's neurons by those of the index file g. */
static int take_index(const struct pi_model *m, struct pi_plan *pl, const struct pi_gpuidx *g,
                      const char *path, struct pi_error *err) {
    const struct pi_model_desc *d = &m->desc;
    const int64_t L = pl->pl.n_layer, F = pl->pl.n_ff;
    const uint64_t room = neuron_room(pl);
    uint64_t bytes = 0;
    for (int64_t l = 0; l < L; l++) {
        int64_t n = 0;
        for (int64_t r = 0; r < F; r++)
            n += g->neuron[l * F + r];
        if (pl->whole_layers && n != 0 && n != F)
            PI_FAIL(err, PI_ERR_RANGE, "%s: layer %lld places %lld of %lld neurons, but this "
                    "model is a dense file, whose FFN moves in whole layers", path,
                    (long long)l, (long long)n, (long long)F);
        const struct pi_layer_desc *ld = &d->layers[l];
        if (n && ld->router)
            PI_FAIL(err, PI_ERR_RANGE, "%s: layer %lld places %lld FFN neurons, but it is a "
                    "mixture-of-experts layer, placed by whole experts", path,
                    (long long)l, (long long)n);
        const uint64_t per = pl->whole_layers
                                 ? (nb(ld->ffn_gate) + nb(ld->ffn_up) + nb(ld->ffn_down) +
                                    (uint64_t)F - 1) / (uint64_t)F
                                 : sparse_neuron_bytes(ld, m->desc.hp.n_embd);
        bytes += (uint64_t)n * per;
    }
    if (g->capacity > room || bytes > room)
        PI_FAIL(err, PI_ERR_RANGE, "%s: made for %.1f MiB of neurons (its neurons take %.1f "
                "MiB), but this budget leaves %.1f MiB after the dense parts", path,
                (double)g->capacity / MIB, (double)bytes / MIB, (double)room / MIB);
    memcpy(pl->pl.neuron, g->neuron, (size_t)(L * F));
    for (int64_t l = 0; l < L; l++) {
        int64_t n = 0;
        for (int64_t r = 0; r < F; r++)
            n += g->neuron[l * F + r];
        pl->pl.n_neurons[l] = n;
    }
    pl->pl.total = pl->pl.total - pl->pl.bytes[PI_PART_FFN] + bytes;
    pl->pl.bytes[PI_PART_FFN] = bytes;
    return PI_OK;
}

int pi_hybrid_plan_save(const struct pi_plan *pl, const char *path, struct pi_error *err) {
    struct pi_gpuidx g = {pl->pl.n_layer, pl->pl.n_ff, pl->pl.neuron, neuron_room(pl), 1,
                          pl->model_id, pl->stats_id, pl->budget, pl->alloc};
    return pi_gpuidx_write(path, &g, err);
}

int pi_hybrid_plan(const struct pi_model *m, const pi_ctx_params *p,
                   const struct pi_plan_shape *s, uint64_t budget, struct pi_plan **out,
                   struct pi_error *err) {
    *out = NULL;
    const struct pi_allocator *a = &m->alloc;
    const struct pi_hparams *hp = &m->desc.hp;
    const double **freq = pi_calloc(a, (size_t)hp->n_layer, sizeof *freq);
    struct pi_plan *pl = pi_calloc(a, 1, sizeof *pl);
    if (!freq || !pl) {
        pi_free(a, freq);
        pi_free(a, pl);
        PI_FAIL(err, PI_ERR_NOMEM, "plan: out of memory");
    }
    pl->alloc = *a;
    pl->budget = budget;
    pl->model_id = pi_model_identity(m);
    int st = stats_freq(m, p, freq, err);
    const int have = st == 1;
    if (st >= 0) {
        pl->stats_id = stats_id(m, have ? freq : NULL);
        st = plan_compute(m, s, budget, have ? freq : NULL, pl, err);
    }
    pi_free(a, freq);
    if (st >= 0 && p->plan_path && p->plan_file) {
        struct pi_gpuidx g;
        struct pi_error ferr = {0};
        switch (p->plan_file) {
        case PI_PLAN_FILE_READ:
            st = pi_gpuidx_read(p->plan_path, hp->n_layer, hp->n_ff, a, &g, err);
            if (st >= 0) {
                if (g.has_key && g.model_id != pl->model_id)
                    st = pi_error_set(err, PI_ERR_RANGE, "%s was made for another model",
                                      p->plan_path);
                else
                    st = take_index(m, pl, &g, p->plan_path, err);
                pi_gpuidx_free(&g);
            }
            if (st >= 0)
                pl->source = PI_PLAN_FROM_FILE;
            break;
        case PI_PLAN_FILE_CACHE:
            if (pi_gpuidx_read(p->plan_path, hp->n_layer, hp->n_ff, a, &g, &ferr) >= 0) {
                const int same = g.has_key && g.model_id == pl->model_id &&
                                 g.stats_id == pl->stats_id && g.budget == budget &&
                                 take_index(m, pl, &g, p->plan_path, &ferr) >= 0;
                pi_gpuidx_free(&g);
                if (same) {
                    pl->source = PI_PLAN_FROM_FILE;
                    break;
                }
            }
            pl->source = pi_hybrid_plan_save(pl, p->plan_path, &ferr) >= 0 ? PI_PLAN_CACHE_WRITTEN
                                                             : PI_PLAN_CACHE_UNWRITTEN;
            break;
        case PI_PLAN_FILE_WRITE:
            st = pi_hybrid_plan_save(pl, p->plan_path, err);
            if (st >= 0)
                pl->source = PI_PLAN_CACHE_WRITTEN;
            break;
        default:
            st = pi_error_set(err, PI_ERR_INVALID_ARG, "plan_file is not a PI_PLAN_FILE_* value");
        }
    }
    if (st < 0) {
        pi_plan_free(pl);
        return st;
    }
    *out = pl;
    return PI_OK;
}

int pi_hybrid_backend(const pi_ctx_params *p, const struct pi_backend_config *cfg,
                      const struct pi_backend_vtable **be, struct pi_backend **b,
                      struct pi_error *err) {
    *b = NULL;
    *be = p->device == PI_DEVICE_CPU ? pi_backend_cpu() : pi_backend_gpu();
    if (!*be)
        PI_FAIL(err, PI_ERR_UNSUPPORTED, "this libpowerinfer was built without a GPU backend "
                "(meson setup -Dcuda=enabled or -Dhip=enabled)");
    int st = (*be)->create(b, cfg);
    if (st < 0)
        PI_FAIL(err, st, "cannot start the %s backend on device %d%s", (*be)->name, cfg->device,
                st == PI_ERR_UNSUPPORTED ? ": no such device (or no driver)" : "");
    return PI_OK;
}

uint64_t pi_hybrid_budget(const struct pi_model *m, const pi_ctx_params *p,
                          const struct pi_plan_shape *s, const struct pi_backend_vtable *be,
                          struct pi_backend *b) {
    if (p->device_budget != PI_DEVICE_BUDGET_AUTO)
        return p->device_budget;
    struct pi_device_info info;
    if (be->device_info && be->device_info(b, &info) >= 0)
        return info.mem_free > AUTO_RESERVE ? info.mem_free - AUTO_RESERVE : 0;
    /* no memory figure (a CPU device): room for everything */
    const struct pi_model_desc *d = &m->desc;
    uint64_t all = pi_hybrid_scratch_bytes(m, s) + kv_bytes(m, s) + nb(d->output) +
                   nb(d->output_norm.w) + nb(d->output_norm.b) +
                   4ull * (uint64_t)d->hp.n_ff * (uint64_t)d->hp.n_layer;
    for (int64_t l = 0; l < d->hp.n_layer; l++) {
        const struct pi_layer_desc *ld = &d->layers[l];
        all += attn_part_bytes(ld) + ffn_small_bytes(ld) + nb(ld->fc1) + nb(ld->fc2) +
               nb(ld->norm_ffn.w) + nb(ld->norm_ffn.b) + nb(ld->ffn_gate) + nb(ld->ffn_up) +
               nb(ld->ffn_down) + nb(ld->ffn_down_t) + (uint64_t)d->hp.n_ff +
               moe_dense_bytes(ld) + experts_bytes(ld);
    }
    return all;
}

void pi_hybrid_destroy(struct pi_hybrid *h) {
    if (!h)
        return;
    struct pi_allocator a = h->alloc;
    if (h->b) {
        h->be->sync(h->b);
        for (size_t i = 0; i < h->n_bufs; i++)
            h->be->buf_free(h->b, h->bufs[i]);
        if (h->kv)
            h->be->kv_destroy(h->b, h->kv);
        h->be->destroy(h->b);
    }
    pi_free(&a, h->bufs);
    for (int64_t l = 0; h->layers && l < h->plan->pl.n_layer; l++)
        pi_free(&a, h->layers[l].exp_slot);
    pi_free(&a, h->layers);
    pi_free(&a, h->moe_ydev);
    pi_free(&a, h->yc_host);
    pi_free(&a, h->yd_host);
    pi_plan_free(h->plan);
    pi_free(&a, h);
}

/* A device buffer of `size` bytes, filled from src when non-NULL. */
static int dev_alloc(struct pi_hybrid *h, size_t size, const void *src, void **out) {
    *out = NULL;
    if (h->n_bufs == h->cap_bufs) {
        size_t cap = h->cap_bufs ? 2 * h->cap_bufs : 64;
        void **nb2 = pi_malloc(&h->alloc, cap * sizeof *nb2);
        if (!nb2)
            return PI_ERR_NOMEM;
        if (h->n_bufs)
            memcpy(nb2, h->bufs, h->n_bufs * sizeof *nb2);
        pi_free(&h->alloc, h->bufs);
        h->bufs = nb2;
        h->cap_bufs = cap;
    }
    PI_TRY(h->be->buf_alloc(h->b, size ? size : 1, out));
    h->bufs[h->n_bufs++] = *out;
    if (src && size)
        return h->be->upload(h->b, *out, src, size);
    return PI_OK;
}

static int up_weight(struct pi_hybrid *h, const struct pi_weight *w, struct pi_weight *out) {
    void *d;
    *out = *w;
    if (!w->data)
        return PI_OK; /* absent: stays absent */
    PI_TRY(dev_alloc(h, w->row_bytes * (size_t)w->n_out, w->data, &d));
    out->data = d;
    return PI_OK;
}

static int up_vector(struct pi_hybrid *h, const struct pi_vector *v, struct pi_vector *out) {
    void *d;
    *out = *v;
    if (!v->data)
        return PI_OK;
    const struct pi_type_traits *tr = pi_type_traits(v->type);
    PI_TRY(dev_alloc(h, (size_t)(v->n / tr->block_size * tr->block_bytes), v->data, &d));
    out->data = d;
    return PI_OK;
}

static int up_norm(struct pi_hybrid *h, const struct pi_norm_w *n, struct pi_norm_w *out) {
    PI_TRY(up_vector(h, &n->w, &out->w));
    return up_vector(h, &n->b, &out->b);
}

/* The rows `ids[0..n)` of w as a device matrix of n rows. */
static int up_rows(struct pi_hybrid *h, const struct pi_weight *w, const int32_t *ids, int64_t n,
                   uint8_t *stage, struct pi_weight *out) {
    void *d;
    *out = *w;
    out->n_out = n;
    for (int64_t i = 0; i < n; i++)
        memcpy(stage + (size_t)i * w->row_bytes,
               (const uint8_t *)w->data + (size_t)ids[i] * w->row_bytes, w->row_bytes);
    PI_TRY(dev_alloc(h, w->row_bytes * (size_t)n, stage, &d));
    /* upload may return before the copy is made only from a buffer it no longer needs */
    PI_TRY(h->be->sync(h->b));
    out->data = d;
    return PI_OK;
}

/* Value i of a host vector (F32, F16 or BF16). */
static float vec_value(const struct pi_vector *v, int64_t i) {
    if (v->type == PI_TYPE_F32) {
        float f;
        memcpy(&f, (const uint8_t *)v->data + 4 * i, 4);
        return f;
    }
    uint16_t u;
    memcpy(&u, (const uint8_t *)v->data + 2 * i, 2);
    return v->type == PI_TYPE_F16 ? pi_fp16_to_fp32(u) : pi_bf16_to_fp32(u);
}

/* A bias's values at the neurons ids[0..n) as a device F32 vector of n (v->data NULL:
 * none, out stays absent); staged in `stage` (n floats at least). */
static int up_bias_at(struct pi_hybrid *h, const struct pi_vector *v, const int32_t *ids,
                      int64_t n, uint8_t *stage, struct pi_vector *out) {
    *out = (struct pi_vector){0};
    if (!v->data)
        return PI_OK;
    float *bv = (float *)(void *)stage;
    for (int64_t i = 0; i < n; i++)
        bv[i] = vec_value(v, ids[i]);
    void *d;
    PI_TRY(dev_alloc(h, (size_t)n * sizeof(float), bv, &d));
    /* upload may return before the copy is made only from a buffer it no longer needs */
    PI_TRY(h->be->sync(h->b));
    *out = (struct pi_vector){d, PI_TYPE_F32, n};
    return PI_OK;
}

static int supported(const struct pi_hybrid *h, uint32_t type) {
    return !h->be->supports || h->be->supports(h->b, type);
}

/* One expert tensor's slices of the experts marked in on_dev, packed into a device
 * buffer: out = expert 0's view there, stride = one slice (w->data NULL: none). */
static int up_experts(struct pi_hybrid *h, const struct pi_weight *w, size_t stride,
                      const uint8_t *on_dev, int64_t n_expert, int64_t n, struct pi_weight *out,
                      size_t *out_stride) {
    *out = *w;
    *out_stride = 0;
    if (!w->data)
        return PI_OK;
    void *d;
    const size_t slice = w->row_bytes * (size_t)w->n_out;
    PI_TRY(dev_alloc(h, slice * (size_t)n, NULL, &d));
    for (int64_t e = 0, s = 0; e < n_expert; e++)
        if (on_dev[e])
            PI_TRY(h->be->upload(h->b, (uint8_t *)d + slice * (size_t)s++,
                                 (const uint8_t *)w->data + stride * (size_t)e, slice));
    *out = *w;
    out->data = d;
    *out_stride = slice;
    return PI_OK;
}

/* The placed experts' rows of an expert bias tensor (v: expert 0's row of v->n values,
 * the others following; data NULL: none), packed in slot order like up_experts. */
static int up_expert_bias(struct pi_hybrid *h, const struct pi_vector *v, const uint8_t *on_dev,
                          int64_t n_expert, int64_t n, struct pi_vector *out) {
    *out = *v;
    if (!v->data)
        return PI_OK;
    const struct pi_type_traits *tr = pi_type_traits(v->type);
    const size_t row = (size_t)(v->n / tr->block_size * tr->block_bytes);
    void *d;
    PI_TRY(dev_alloc(h, row * (size_t)n, NULL, &d));
    for (int64_t e = 0, s = 0; e < n_expert; e++)
        if (on_dev[e])
            PI_TRY(h->be->upload(h->b, (uint8_t *)d + row * (size_t)s++,
                                 (const uint8_t *)v->data + row * (size_t)e, row));
    out->data = d;
    return PI_OK;
}

/* A mixture-of-experts layer's device part: router and shared expert with the FFN
 * norm, and the placed experts. */
static int setup_experts(struct pi_ctx *c, struct pi_hybrid *h, int64_t l) {
    const struct pi_placement *p = &h->plan->pl;
    const struct pi_layer_w *L = &c->layers[l];
    struct pi_dev_layer *D = &h->layers[l];
    struct pi_layer_w *W = &D->w;
    const int64_t X = c->hp->n_expert, n = p->n_experts[l];
    const struct pi_weight *ws[] = {&L->router, &L->sh_gate, &L->sh_up, &L->sh_down,
                                    &L->sh_gate_inp, &L->exps.gate, &L->exps.up,
                                    &L->exps.down, &L->exps.down_t};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
        if ((i < 5 ? D->norm : n > 0) && ws[i]->data && !supported(h, ws[i]->type))
            PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "the %s backend cannot compute %s weights "
                    "(layer %lld's experts)", h->be->name, pi_type_traits(ws[i]->type)->name,
                    (long long)l);
    D->moe_dense = D->norm;
    if (D->moe_dense) {
        const struct pi_weight *hw[] = {&L->router, &L->sh_gate, &L->sh_up, &L->sh_down,
                                        &L->sh_gate_inp};
        struct pi_weight *dw[] = {&W->router, &W->sh_gate, &W->sh_up, &W->sh_down,
                                  &W->sh_gate_inp};
        for (size_t i = 0; i < sizeof hw / sizeof *hw; i++)
            PI_TRY(up_weight(h, hw[i], dw[i]));
        PI_TRY(up_vector(h, &L->router_b, &W->router_b)); /* gpt-oss */
    }
    if (!n)
        return PI_OK;
    const uint8_t *on_dev = p->expert + l * X;
    D->exp_slot = pi_malloc(&c->alloc, (size_t)X * sizeof *D->exp_slot);
    if (!D->exp_slot)
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory");
    for (int64_t e = 0, s = 0; e < X; e++)
        D->exp_slot[e] = on_dev[e] ? (int32_t)s++ : -1;
    const struct pi_experts *x = &L->exps;
    struct pi_experts *dx = &W->exps;
    PI_TRY(up_experts(h, &x->gate, x->gate_stride, on_dev, X, n, &dx->gate, &dx->gate_stride));
    PI_TRY(up_experts(h, &x->up, x->up_stride, on_dev, X, n, &dx->up, &dx->up_stride));
    PI_TRY(up_experts(h, &x->down, x->down_stride, on_dev, X, n, &dx->down, &dx->down_stride));
    PI_TRY(up_experts(h, &x->down_t, x->down_t_stride, on_dev, X, n, &dx->down_t,
                      &dx->down_t_stride));
    PI_TRY(up_expert_bias(h, &x->b_gate, on_dev, X, n, &dx->b_gate)); /* gpt-oss */
    PI_TRY(up_expert_bias(h, &x->b_up, on_dev, X, n, &dx->b_up));
    PI_TRY(up_expert_bias(h, &x->b_down, on_dev, X, n, &dx->b_down));
    D->n_dev_exp = n;
    return PI_OK;
}

static int setup_layer(struct pi_ctx *c, struct pi_hybrid *h, int64_t l, int32_t *ids,
                       uint8_t **stage, size_t *stage_cap) {
    const struct pi_placement *p = &h->plan->pl;
    const struct pi_layer_w *L = &c->layers[l];
    struct pi_dev_layer *D = &h->layers[l];
    const int64_t F = p->n_ff;
    struct pi_layer_w *W = &D->w;
    D->attn = p->attn[l];
    D->pred = p->pred[l] && c->hp->predictors;
    D->norm = p->norm[l];
    D->on_dev = p->neuron + l * F;
    D->n_dev = p->n_neurons[l];
    const struct pi_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->fc1, &L->fc2,
                                    &L->gate, &L->up, L->has_down ? &L->down : &L->down_t};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
        if (ws[i]->data && !supported(h, ws[i]->type))
            PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "the %s backend cannot compute %s weights",
                    h->be->name, pi_type_traits(ws[i]->type)->name);
    if (D->attn) {
        PI_TRY(up_norm(h, &L->norm_attn, &W->norm_attn));
        const struct pi_weight *aw[] = {&L->wq, &L->wk, &L->wv, &L->wo};
        struct pi_weight *dw[] = {&W->wq, &W->wk, &W->wv, &W->wo};
        const struct pi_vector *av[] = {&L->bq, &L->bk, &L->bv, &L->bo, &L->q_norm, &L->k_norm,
                                        &L->attn_post_norm};
        struct pi_vector *dv[] = {&W->bq, &W->bk, &W->bv, &W->bo, &W->q_norm, &W->k_norm,
                                  &W->attn_post_norm};
        for (size_t i = 0; i < sizeof aw / sizeof *aw; i++)
            PI_TRY(up_weight(h, aw[i], dw[i]));
        for (size_t i = 0; i < sizeof av / sizeof *av; i++)
            PI_TRY(up_vector(h, av[i], dv[i]));
    }
    if (D->pred) {
        PI_TRY(up_weight(h, &L->fc1, &W->fc1));
        PI_TRY(up_weight(h, &L->fc2, &W->fc2));
    }
    if (D->norm)
        PI_TRY(up_norm(h, &L->norm_ffn, &W->norm_ffn));
    if (L->router.data)
        return setup_experts(c, h, l);
    if (D->n_dev == 0)
        return PI_OK;
    if (L->has_down) { /* dense file: the whole layer */
        if (D->n_dev != F)
            PI_FAIL(&c->err, PI_ERR_INTERNAL, "a dense layer split between devices");
        PI_TRY(up_weight(h, &L->gate, &W->gate));
        PI_TRY(up_weight(h, &L->up, &W->up));
        PI_TRY(up_weight(h, &L->down, &W->down));
        W->has_down = 1;
        const struct pi_vector *fv[] = {&L->b_gate, &L->b_up, &L->b_down, &L->ffn_post_norm};
        struct pi_vector *dv[] = {&W->b_gate, &W->b_up, &W->b_down, &W->ffn_post_norm};
        for (size_t i = 0; i < sizeof fv / sizeof *fv; i++)
            PI_TRY(up_vector(h, fv[i], dv[i]));
        D->ffn_whole = 1;
        return PI_OK;
    }
    int64_t n = 0;
    for (int64_t r = 0; r < F; r++)
        if (D->on_dev[r])
            ids[n++] = (int32_t)r;
    size_t need = (size_t)n * L->gate.row_bytes;
    need = need > (size_t)n * L->up.row_bytes ? need : (size_t)n * L->up.row_bytes;
    need = need > (size_t)n * L->down_t.row_bytes ? need : (size_t)n * L->down_t.row_bytes;
    need = need > (size_t)n * sizeof(float) ? need : (size_t)n * sizeof(float);
    if (need > *stage_cap) {
        pi_free(&c->alloc, *stage);
        *stage = pi_malloc(&c->alloc, need);
        *stage_cap = *stage ? need : 0;
        if (!*stage)
            PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory staging layer %lld's rows",
                    (long long)l);
    }
    if (L->gate.data)
        PI_TRY(up_rows(h, &L->gate, ids, n, *stage, &D->gate));
    PI_TRY(up_rows(h, &L->up, ids, n, *stage, &D->up));
    PI_TRY(up_rows(h, &L->down_t, ids, n, *stage, &D->down));
    PI_TRY(up_bias_at(h, &L->b_gate, ids, n, *stage, &D->b_gate));
    PI_TRY(up_bias_at(h, &L->b_up, ids, n, *stage, &D->b_up));
    PI_TRY(up_vector(h, &L->b_down, &D->b_down));
    void *map;
    PI_TRY(dev_alloc(h, (size_t)n * sizeof(int32_t), ids, &map));
    PI_TRY(h->be->sync(h->b));
    D->map = map;
    return PI_OK;
}

static int setup_device(struct pi_ctx *c, struct pi_hybrid *h) {
    const struct pi_hparams *hp = c->hp;
    const struct pi_placement *p = &h->plan->pl;
    const int64_t E = hp->n_embd, F = hp->n_ff, B = c->n_batch;
    const int64_t qd = hp->n_head * hp->head_dim_k, kd = hp->n_head_kv * hp->head_dim_k;
    const int64_t vd = hp->n_head_kv * hp->head_dim_v, ad = hp->n_head * hp->head_dim_v;
    const int64_t R = hp->predictors ? max_rank(c->model) : 0;
    struct {
        float **p;
        int64_t n;
    } bufs[] = {{&h->x, B * E},       {&h->xn, B * E},     {&h->yd, B * E},  {&h->yc, B * E},
                {&h->q, B * qd},      {&h->k, B * kd},     {&h->v, B * vd},  {&h->att, B * ad},
                {&h->score, B * F},   {&h->gd, B * F},     {&h->ud, B * F},  {&h->hid, B * R},
                {&h->ones, B * R},    {&h->logits, PI_LOGIT_CHUNK * hp->n_vocab},
                {&h->ya, B * E}};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        if ((!hp->predictors && bufs[i].p == &h->score) ||
            (!(hp->info->flags & PI_AF_PARALLEL) && bufs[i].p == &h->ya))
            continue;
        void *d;
        int st = dev_alloc(h, (size_t)bufs[i].n * sizeof(float), NULL, &d);
        if (st < 0)
            PI_FAIL(&c->err, st, "out of device memory for scratch");
        *bufs[i].p = d;
    }
    if (c->model->desc.n_moe_layers) {
        const int64_t BK = B * hp->n_expert_used, HF = (int64_t)moe_hidden(hp, (uint64_t)B);
        struct {
            float **p;
            int64_t n;
        } mb[] = {{&h->moe_prob, B * hp->n_expert}, {&h->moe_xg, BK * E}, {&h->moe_ye, BK * E},
                  {&h->moe_g, HF}, {&h->moe_u, HF}, {&h->moe_ysh, B * E}};
        for (size_t i = 0; i < sizeof mb / sizeof *mb; i++) {
            void *d;
            int st = dev_alloc(h, (size_t)mb[i].n * sizeof(float), NULL, &d);
            if (st < 0)
                PI_FAIL(&c->err, st, "out of device memory for scratch");
            *mb[i].p = d;
        }
        h->moe_ydev = pi_malloc(&c->alloc, (size_t)(BK * E) * sizeof(float));
        if (!h->moe_ydev)
            PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory");
    }
    h->yc_host = pi_malloc(&c->alloc, (size_t)(B * E) * sizeof(float));
    h->yd_host = pi_malloc(&c->alloc, (size_t)(B * E) * sizeof(float));
    h->layers = pi_calloc(&c->alloc, (size_t)hp->n_layer, sizeof *h->layers);
    int32_t *ids = pi_malloc(&c->alloc, (size_t)F * sizeof *ids);
    float *ones = pi_malloc(&c->alloc, (size_t)(B * R + 1) * sizeof *ones);
    uint8_t *stage = NULL;
    size_t stage_cap = 0;
    int st = h->yc_host && h->yd_host && h->layers && ids && ones ? PI_OK : PI_ERR_NOMEM;
    if (st < 0)
        pi_error_set(&c->err, st, "out of memory");
    if (st >= 0 && R) {
        for (int64_t i = 0; i < B * R; i++)
            ones[i] = 1.0f;
        st = h->be->upload(h->b, h->ones, ones, (size_t)(B * R) * sizeof *ones);
        if (st >= 0)
            st = h->be->sync(h->b);
    }
    for (int64_t l = 0; st >= 0 && l < hp->n_layer; l++) {
        st = setup_layer(c, h, l, ids, &stage, &stage_cap);
        if (st < 0 && c->err.status >= 0)
            pi_error_set(&c->err, st, "cannot place layer %lld on the device", (long long)l);
    }
    if (st >= 0 && p->output && !supported(h, c->output.type))
        st = pi_error_set(&c->err, PI_ERR_UNSUPPORTED, "the %s backend cannot compute %s weights",
                          h->be->name, pi_type_traits(c->output.type)->name);
    if (st >= 0 && p->output) {
        st = up_weight(h, &c->output, &h->output);
        if (st >= 0)
            st = up_norm(h, &c->output_norm, &h->output_norm);
        if (st < 0)
            pi_error_set(&c->err, st, "cannot place the output projection on the device");
    }
    if (st >= 0 && p->kv && c->rope_factors) {
        void *f;
        st = dev_alloc(h, (size_t)(hp->n_rot / 2) * sizeof(float), c->rope_factors, &f);
        h->rope_factors = f;
        if (st < 0)
            pi_error_set(&c->err, st, "cannot place the RoPE factors on the device");
    }
    if (st >= 0 && p->kv && c->sinks) { /* the attention runs where the cache is */
        void *f;
        st = dev_alloc(h, (size_t)(hp->n_layer * hp->n_head) * sizeof(float), c->sinks, &f);
        h->sinks = f;
        if (st < 0)
            pi_error_set(&c->err, st, "cannot place the attention sinks on the device");
    }
    if (st >= 0 && p->kv) {
        struct pi_kv_desc kvd = {hp->n_layer * c->n_seq, c->n_ctx, hp->n_head, hp->n_head_kv,
                                 hp->head_dim_k, hp->head_dim_v, PI_KV_F16, PI_KV_F16};
        st = h->be->kv_create(h->b, &kvd, &h->kv);
        if (st < 0)
            pi_error_set(&c->err, st, "out of device memory for the KV cache");
    }
    if (st >= 0)
        st = h->be->sync(h->b);
    pi_free(&c->alloc, ids);
    pi_free(&c->alloc, ones);
    pi_free(&c->alloc, stage);
    return st;
}

int pi_hybrid_create(struct pi_ctx *c, const struct pi_backend_vtable *be, struct pi_backend *b,
                     struct pi_plan *plan) {
    struct pi_hybrid *h = pi_calloc(&c->alloc, 1, sizeof *h);
    if (!h) {
        be->destroy(b);
        pi_plan_free(plan);
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory");
    }
    h->alloc = c->alloc;
    h->be = be;
    h->b = b;
    h->plan = plan;
    c->hy = h;
    int st = setup_device(c, h);
    if (st < 0 && c->err.status >= 0)
        pi_error_set(&c->err, st, "cannot set up the device");
    return st;
}
