/* exec.c -- a context's weights as backend views and the per-layer execution record:
 * from the model description (lib/model/desc.h) to what forward.c runs, resolved once
 * when the context is made. */
#include <string.h>

#include "infer/ctx.h"
#include "runtime/types.h"
#include "util/alloc.h"

static struct pi_weight weight_rows(const struct gguf_tensor *t, int64_t row0, int64_t n) {
    struct pi_weight w = {0};
    if (t) {
        w.type = t->type;
        w.n_in = t->ne[0];
        w.row_bytes = (size_t)pi_type_row_bytes(t->type, t->ne[0]);
        w.n_out = n;
        w.data = (const uint8_t *)t->data + (size_t)row0 * w.row_bytes;
    }
    return w;
}

static struct pi_weight weight_of(const struct gguf_tensor *t) {
    return weight_rows(t, 0, t ? t->ne[1] : 0);
}

/* Values off .. off + n - 1 of a 1-D F32/F16/BF16 tensor (a fused bias's part). */
static struct pi_vector vector_part(const struct gguf_tensor *t, int64_t off, int64_t n) {
    struct pi_vector v = {0};
    if (t) {
        const size_t es = t->type == PI_TYPE_F32 ? 4 : 2;
        v.data = (const uint8_t *)t->data + (size_t)off * es;
        v.type = t->type;
        v.n = n;
    }
    return v;
}

static struct pi_vector vector_of(const struct gguf_tensor *t) {
    return vector_part(t, 0, t ? t->ne[0] : 0);
}

static struct pi_norm_w norm_of(const struct pi_norm_desc *d) {
    struct pi_norm_w n = {vector_of(d->w), vector_of(d->b)};
    return n;
}

/* A mixture-of-experts layer's router, experts (expert 0's views and the strides to
 * the next) and shared expert. */
static void experts_of(struct pi_layer_w *w, const struct pi_layer_desc *L,
                       const struct pi_hparams *hp) {
    const int64_t Fe = hp->n_ff_exp, E = hp->n_embd;
    w->router = weight_of(L->router);
    struct pi_experts *x = &w->exps;
    if (L->gate_up_exps) { /* expert e: gate rows 2e Fe .., then up rows (2e + 1) Fe .. */
        x->gate = weight_rows(L->gate_up_exps, 0, Fe);
        x->up = weight_rows(L->gate_up_exps, Fe, Fe);
        x->gate_stride = x->up_stride = 2 * (size_t)Fe * x->gate.row_bytes;
    } else {
        x->gate = weight_rows(L->gate_exps, 0, Fe);
        x->up = weight_rows(L->up_exps, 0, Fe);
        x->gate_stride = (size_t)Fe * x->gate.row_bytes;
        x->up_stride = (size_t)Fe * x->up.row_bytes;
    }
    if (L->down_exps_t) {
        x->down_t = weight_rows(L->down_exps_t, 0, Fe);
        x->down_t_stride = (size_t)Fe * x->down_t.row_bytes;
    } else {
        x->down = weight_rows(L->down_exps, 0, E);
        x->down_stride = (size_t)E * x->down.row_bytes;
    }
    w->sh_gate = weight_of(L->gate_shexp);
    w->sh_up = weight_of(L->up_shexp);
    w->sh_down = weight_of(L->down_shexp);
    w->sh_gate_inp = weight_rows(L->gate_inp_shexp, 0, 1);
    w->router_b = vector_of(L->router_b);
    x->b_gate = vector_part(L->b_gate_exps, 0, Fe);
    x->b_up = vector_part(L->b_up_exps, 0, Fe);
    x->b_down = vector_part(L->b_down_exps, 0, E);
}

/* The attention sinks of every layer that has them, as F32 (the file's may be F16 or
 * BF16, and its data may sit at any byte). */
static int copy_sinks(struct pi_ctx *c) {
    const struct pi_model_desc *d = &c->model->desc;
    const int64_t H = d->hp.n_head, L = d->hp.n_layer;
    int any = 0;
    for (int64_t l = 0; l < L; l++)
        any |= d->layers[l].attn_sinks != NULL;
    if (!any)
        return PI_OK;
    c->sinks = pi_calloc(&c->alloc, (size_t)(L * H), sizeof(float));
    if (!c->sinks)
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory");
    for (int64_t l = 0; l < L; l++) {
        const struct gguf_tensor *t = d->layers[l].attn_sinks;
        if (!t)
            continue;
        const struct pi_type_traits *tr = pi_type_traits(t->type);
        tr->to_float(t->data, c->sinks + l * H, H);
    }
    return PI_OK;
}

int pi_exec_weights(struct pi_ctx *c) {
    const struct pi_model_desc *d = &c->model->desc;
    const struct pi_hparams *hp = &d->hp;
    const int64_t F = hp->n_ff, qd = hp->n_head * hp->head_dim_k;
    const int64_t kd = hp->n_head_kv * hp->head_dim_k, vd = hp->n_head_kv * hp->head_dim_v;
    c->tok_embd = weight_of(d->token_embd);
    c->pos_embd = weight_of(d->pos_embd);
    c->output = weight_of(d->output);
    c->output_norm = norm_of(&d->output_norm);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer_desc *L = &d->layers[l];
        struct pi_layer_w *w = &c->layers[l];
        w->norm_attn = norm_of(&L->norm_attn);
        w->norm_ffn = norm_of(&L->norm_ffn);
        if (L->wqkv) { /* rows of q, then k, then v */
            w->wq = weight_rows(L->wqkv, 0, qd);
            w->wk = weight_rows(L->wqkv, qd, kd);
            w->wv = weight_rows(L->wqkv, qd + kd, vd);
            w->bq = vector_part(L->bqkv, 0, qd);
            w->bk = vector_part(L->bqkv, qd, kd);
            w->bv = vector_part(L->bqkv, qd + kd, vd);
        } else {
            w->wq = weight_of(L->wq);
            w->wk = weight_of(L->wk);
            w->wv = weight_of(L->wv);
            w->bq = vector_of(L->bq);
            w->bk = vector_of(L->bk);
            w->bv = vector_of(L->bv);
        }
        w->wo = weight_of(L->wo);
        w->bo = vector_of(L->bo);
        w->q_norm = vector_of(L->q_norm);
        w->k_norm = vector_of(L->k_norm);
        w->attn_post_norm = vector_of(L->attn_post_norm);
        w->ffn_post_norm = vector_of(L->ffn_post_norm);
        if (L->up_fused) { /* gate rows, then up rows */
            w->gate = weight_rows(L->ffn_up, 0, F);
            w->up = weight_rows(L->ffn_up, F, F);
            w->b_gate = vector_part(L->b_up, 0, F);
            w->b_up = vector_part(L->b_up, F, F);
        } else {
            w->gate = weight_of(L->ffn_gate);
            w->up = weight_of(L->ffn_up);
            w->b_gate = vector_of(L->b_gate);
            w->b_up = vector_of(L->b_up);
        }
        w->b_down = vector_of(L->b_down);
        w->has_down = L->ffn_down != NULL && L->ffn_down_t == NULL;
        w->down = weight_of(L->ffn_down);
        w->down_t = weight_of(L->ffn_down_t);
        w->fc1 = weight_of(L->fc1);
        w->fc2 = weight_of(L->fc2);
        if (L->router)
            experts_of(w, L, hp);
    }
    PI_TRY(copy_sinks(c));
    /* LongRoPE: the long factors when a sequence may grow past the trained context.
     * Copied: a file's data may sit at any byte (general.alignment 1), floats may not. */
    const struct gguf_tensor *f = d->rope_freqs;
    c->rope_set = PI_ROPE_SET_FILE;
    if (hp->rope_scaling == PI_ROPE_LONGROPE) {
        const int lng = c->n_ctx > hp->rope_ctx_orig;
        f = lng ? d->rope_long : d->rope_short;
        c->rope_set = lng ? PI_ROPE_SET_LONG : PI_ROPE_SET_SHORT;
    }
    if (!f)
        return PI_OK;
    const size_t n = (size_t)f->ne[0];
    c->rope_factors = pi_malloc(&c->alloc, n * sizeof(float));
    if (!c->rope_factors)
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory");
    memcpy(c->rope_factors, f->data, n * sizeof(float));
    return PI_OK;
}

/* The op a backend lacks for the parts of layer l it would run, or NULL. */
static const char *missing_op(const struct pi_backend_vtable *be, const struct pi_hparams *hp,
                              const struct pi_layer_w *L) {
    if (hp->info->norm == PI_NORM_LAYER && !be->layernorm)
        return "layernorm";
    if ((L->bq.data || L->bk.data || L->bv.data || L->bo.data || L->b_gate.data ||
         L->b_up.data || L->b_down.data) && !be->add_rows)
        return "add_rows";
    if ((hp->embd_scale != 1.0f) && !be->scale)
        return "scale";
    if (hp->final_softcap > 0.0f && !be->softcap)
        return "softcap";
    return NULL;
}

/* Whether a step overlaps host and device work in some layer: its FFN split between
 * the two (neurons, or a mixture-of-experts layer with anything on the device), or a
 * parallel block with its attention on one and its FFN on the other. Graph regions
 * (backend.h) run a segment only at the next transfer, so they would serialise the
 * overlap; everywhere else the host waits for the device's result anyway. */
static int overlapped(const struct pi_ctx *c) {
    const struct pi_hparams *hp = c->hp;
    const int parallel = (hp->info->flags & PI_AF_PARALLEL) != 0;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer_exec *x = &c->exec[l];
        const struct pi_dev_layer *D = &c->hy->layers[l];
        const int moe = c->layers[l].router.data != NULL;
        if (moe && (D->moe_dense || D->n_dev_exp))
            return 1;
        const int dev_ffn = x->ffn_whole_dev || x->n_dev > 0;
        const int host_ffn = moe || (!x->ffn_whole_dev && x->n_dev < hp->n_ff);
        if (dev_ffn && host_ffn)
            return 1;
        if (parallel && x->attn_dev != dev_ffn)
            return 1;
    }
    return 0;
}

int pi_exec_resolve(struct pi_ctx *c) {
    const struct pi_hparams *hp = c->hp;
    const struct pi_hybrid *hy = c->hy;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer_desc *Ld = &c->model->desc.layers[l];
        const struct pi_dev_layer *D = hy ? &hy->layers[l] : NULL;
        struct pi_layer_exec *x = &c->exec[l];
        memset(x, 0, sizeof *x);
        x->attn_dev = D && D->attn;
        x->kv_dev = hy && hy->kv;
        x->pred_dev = D && D->pred;
        x->norm_dev = D && D->norm;
        x->ffn_whole_dev = D && D->ffn_whole;
        x->n_dev = D ? D->n_dev : 0;
        /* thresholded on the device: some neurons of a split layer, or placed experts
         * of a sparsified file */
        const int dev_thr = (x->n_dev && !x->ffn_whole_dev) ||
                            (D && D->n_dev_exp && c->layers[l].exps.down_t.data);
        if (dev_thr && c->mode == PI_SPARSE_THRESHOLD && !hy->be->ffn_act_thr)
            PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "the %s backend has no thresholded "
                    "activation (ffn_act_thr) for PI_SPARSE_THRESHOLD: give its neurons (or "
                    "experts) no room (a budget for the dense parts only), or run dense or "
                    "predictor mode",
                    hy->be->name);
        if (D && (x->attn_dev || x->norm_dev || x->ffn_whole_dev || x->kv_dev)) {
            const char *op = missing_op(hy->be, hp, &c->layers[l]);
            if (op)
                PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "the %s backend has no %s op, which layer "
                        "%lld of this %s model needs on the device", hy->be->name, op,
                        (long long)l, hp->info->name);
        }
        x->rope = (struct pi_rope){
            .n_rot = hp->n_rot,
            .neox = (hp->info->flags & PI_AF_NEOX) != 0,
            .base = Ld->rope_base,
            .freq_scale = 1.0f / Ld->rope_scale,
            .factors = x->kv_dev ? hy->rope_factors : c->rope_factors,
            .attn_factor = hp->rope_attn_factor,
            .ext_factor = hp->rope_scaling == PI_ROPE_YARN ? 1.0f : 0.0f,
            .beta_fast = hp->yarn_beta_fast,
            .beta_slow = hp->yarn_beta_slow,
            .n_ctx_orig = hp->rope_ctx_orig,
            .yarn_exact = (hp->info->flags & PI_AF_YARN_EXACT) != 0,
        };
        const float *sinks = NULL;
        if (Ld->attn_sinks)
            sinks = (x->kv_dev ? hy->sinks : c->sinks) + l * hp->n_head;
        x->attn = (struct pi_attn){hp->attn_scale, hp->attn_softcap, Ld->window, sinks};
    }
    c->graph_layers = hy && hy->be->graph_begin && hy->be->graph_end && !overlapped(c);
    if (hy && hy->plan->pl.output &&
        ((hp->info->norm == PI_NORM_LAYER && !hy->be->layernorm) ||
         (hp->final_softcap > 0.0f && !hy->be->softcap)))
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "the %s backend lacks an op the output of this %s "
                "model needs on the device", hy->be->name, hp->info->name);
    return PI_OK;
}
