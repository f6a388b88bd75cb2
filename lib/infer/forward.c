/* forward.c -- the llama-family forward pass (llama, bamboo), written as the
 * equations. Shapes: E = n_embd, F = n_ff, T = tokens in this step, Hq/Hkv = heads,
 * D = head dim, R = predictor rank. Every op goes through the backend vtable.
 *
 * The FFN block runs in one of three modes (pi_ctx_params.sparse_mode):
 *   dense      g = act(gate xn, up xn) for every neuron, y = down g
 *   predictor  s = fc2 relu(fc1 x) (x: the residual after attention, before ffn_norm);
 *              token t uses the neurons with s[t][r] >= threshold
 *   oracle     g0 = gate xn for every neuron; token t uses the neurons with g0 > 0
 * A step of T tokens computes gate/up rows for the union U of its tokens' sets (all
 * rows, densely, when |U| > PI_SPARSE_DENSE_UNION * F) and masks each token to its own
 * set, so a prompt gives what T one-token steps would give (up to rounding order). */
#include <string.h>

#include "infer/ctx.h"
#include "util/os.h"

static enum pi_act act_of(enum pi_ffn_act a) {
    switch (a) {
    case PI_ACT_RELU:
        return PI_ACT_RELU_MUL;
    case PI_ACT_RELU_BOTH:
        return PI_ACT_RELU_RELU_MUL;
    case PI_ACT_SILU:
        break;
    }
    return PI_ACT_SILU_MUL;
}

/* The ReLU activations of the sparse path (the same formulas as the backend's). */
static float relu_act(enum pi_ffn_act a, float g, float u) {
    if (a == PI_ACT_RELU_BOTH)
        return g > 0.0f && u > 0.0f ? g * u : 0.0f;
    return g > 0.0f ? g * u : 0.0f;
}

static uint64_t now(const struct pi_ctx *c) {
    return c->stats ? pi_os_time_ns() : 0;
}

/* s [T][F] = fc2 . relu(fc1 . x): the predictor scores of layer L. */
static void predict(struct pi_ctx *c, const struct pi_layer_w *L, int64_t T) {
    const struct pi_backend_vtable *be = c->be;
    const int64_t R = L->fc1.n_out;
    be->matmul(c->b, &L->fc1, c->x, T, c->hid);                  /* hid [T][R] */
    for (int64_t i = 0; i < T * R; i++)
        c->hid[i] = c->hid[i] > 0.0f ? c->hid[i] : 0.0f;
    be->matmul(c->b, &L->fc2, c->hid, T, c->score);              /* s [T][F] */
}

/* idx = the neurons some token selects: src[t][r] >= thr (strict: > thr). */
static int64_t select_union(struct pi_ctx *c, const float *src, int64_t T, float thr,
                            int strict) {
    const int64_t F = c->hp->n_ff;
    memset(c->mark, 0, (size_t)F);
    for (int64_t t = 0; t < T; t++) {
        const float *s = src + t * F;
        for (int64_t r = 0; r < F; r++)
            c->mark[r] |= strict ? s[r] > thr : s[r] >= thr;
    }
    int64_t n = 0;
    for (int64_t r = 0; r < F; r++)
        if (c->mark[r])
            c->idx[n++] = (int32_t)r;
    return n;
}

/* Per-layer counters (PI_STATS_ON and up). truth: [T][F] activations, non-zero where a
 * neuron truly fired, or NULL; valid: only the rows idx[0..n) of truth are valid (the
 * others are known to be inactive), or all rows when idx is NULL. */
static void count(struct pi_ctx *c, int64_t l, int64_t T, int have_pred, const float *truth,
                  const int32_t *idx, int64_t n) {
    struct pi_stats *st = c->stats;
    const int64_t F = c->hp->n_ff;
    pi_layer_stats *ls = &st->layer[l];
    double *pred = pi_stats_row(st, l, PI_NEURON_PREDICTED);
    double *act = pi_stats_row(st, l, PI_NEURON_ACTIVE);
    double *both = pi_stats_row(st, l, PI_NEURON_BOTH);
    for (int64_t t = 0; t < T; t++) {
        const float *s = have_pred ? c->score + t * F : NULL;
        const float *g = truth ? truth + t * F : NULL;
        if (have_pred)
            for (int64_t r = 0; r < F; r++)
                if (s[r] >= c->threshold) {
                    pred[r] += 1.0;
                    ls->predicted += 1.0;
                }
        if (!g)
            continue;
        const int64_t m = idx ? n : F;
        for (int64_t i = 0; i < m; i++) {
            const int64_t r = idx ? idx[i] : i;
            if (g[r] == 0.0f)
                continue;
            act[r] += 1.0;
            ls->active += 1.0;
            if (have_pred && s[r] >= c->threshold) {
                both[r] += 1.0;
                ls->both += 1.0;
            }
        }
    }
    if (have_pred)
        ls->tokens_predicted += (uint64_t)T;
    if (truth)
        ls->tokens_observed += (uint64_t)T;
}

/* xn [T][E] = the FFN block of layer l on xn = ffn_norm(x) (sparse modes). */
static int64_t ffn_sparse(struct pi_ctx *c, int64_t l, int64_t T) {
    const struct pi_hparams *hp = c->hp;
    const struct pi_backend_vtable *be = c->be;
    struct pi_backend *b = c->b;
    const struct pi_layer_w *L = &c->layers[l];
    const int64_t F = hp->n_ff;
    const int predictor = c->mode == PI_SPARSE_PREDICTOR;
    const int64_t dense_above = (int64_t)(PI_SPARSE_DENSE_UNION * (double)F);
    int64_t n, rows_gate;

    if (predictor) {
        n = select_union(c, c->score, T, c->threshold, 0);
        rows_gate = n;
        if (n > dense_above) {
            be->matmul(b, &L->gate, c->xn, T, c->g);
            be->matmul(b, &L->up, c->xn, T, c->u);
            rows_gate = F;
        } else if (be->matmul_rows2) {
            be->matmul_rows2(b, &L->gate, &L->up, c->xn, T, c->idx, n, c->g, c->u);
        } else {
            be->matmul_rows(b, &L->gate, c->xn, T, c->idx, n, c->g);
            be->matmul_rows(b, &L->up, c->xn, T, c->idx, n, c->u);
        }
    } else { /* oracle: the whole gate, then up where it fired */
        be->matmul(b, &L->gate, c->xn, T, c->g);
        n = select_union(c, c->g, T, 0.0f, 1);
        rows_gate = F;
        if (n > dense_above)
            be->matmul(b, &L->up, c->xn, T, c->u);
        else
            be->matmul_rows(b, &L->up, c->xn, T, c->idx, n, c->u);
    }
    be->sync(b);
    /* Activations of the union's neurons, each token masked to its own set. */
    for (int64_t t = 0; t < T; t++) {
        float *g = c->g + t * F;
        const float *u = c->u + t * F, *s = c->score + t * F;
        for (int64_t i = 0; i < n; i++) {
            const int64_t r = c->idx[i];
            g[r] = predictor && s[r] < c->threshold ? 0.0f : relu_act(hp->ffn_act, g[r], u[r]);
        }
    }
    const int64_t rows_down = be->matmul_t_rows(b, &L->down_t, c->g, T, c->idx, n, c->xn);
    if (c->stats) {
        pi_layer_stats *ls = &c->stats->layer[l];
        const int64_t rows_up = n > dense_above ? F : n;
        ls->rows_gate_up += (uint64_t)rows_gate;
        ls->rows_down += (uint64_t)rows_down;
        ls->bytes_ffn += (uint64_t)rows_gate * L->gate.row_bytes +
                         (uint64_t)rows_up * L->up.row_bytes +
                         (uint64_t)rows_down * L->down_t.row_bytes;
    }
    return n;
}

/* xn [T][E] = the dense FFN block of layer l on xn = ffn_norm(x). */
static void ffn_dense(struct pi_ctx *c, int64_t l, int64_t T) {
    const struct pi_hparams *hp = c->hp;
    const struct pi_backend_vtable *be = c->be;
    struct pi_backend *b = c->b;
    const struct pi_layer_w *L = &c->layers[l];
    be->matmul(b, &L->gate, c->xn, T, c->g);                       /* g [T][F] */
    be->matmul(b, &L->up, c->xn, T, c->u);                         /* u [T][F] */
    be->ffn_act(b, act_of(hp->ffn_act), c->g, c->u, T * hp->n_ff);
    if (L->has_down)
        be->matmul(b, &L->down, c->g, T, c->xn);                   /* xn [T][E] */
    else
        be->matmul_t(b, &L->down_t, c->g, T, c->xn);
    if (c->stats) {
        pi_layer_stats *ls = &c->stats->layer[l];
        const int64_t F = hp->n_ff;
        uint64_t down_bytes = (uint64_t)L->down.n_out * L->down.row_bytes, rows = (uint64_t)F;
        if (!L->has_down) { /* matmul_t reads only rows some token needs */
            rows = 0;
            for (int64_t r = 0; r < F; r++) {
                int any = 0;
                for (int64_t t = 0; t < T && !any; t++)
                    any = c->g[t * F + r] != 0.0f;
                rows += (uint64_t)any;
            }
            down_bytes = rows * L->down_t.row_bytes;
        }
        ls->rows_gate_up += (uint64_t)F;
        ls->rows_down += rows;
        ls->bytes_ffn += (uint64_t)F * (L->gate.row_bytes + L->up.row_bytes) + down_bytes;
    }
}

/* Diagnostic (PI_STATS_DIAGNOSTIC in predictor mode): the true activations of every
 * neuron, in gfull, without touching the step's own buffers. */
static void true_activations(struct pi_ctx *c, const struct pi_layer_w *L, int64_t T) {
    const int64_t F = c->hp->n_ff;
    c->be->matmul(c->b, &L->gate, c->xn, T, c->gfull);
    c->be->matmul(c->b, &L->up, c->xn, T, c->ufull);
    c->be->sync(c->b);
    for (int64_t i = 0; i < T * F; i++)
        c->gfull[i] = relu_act(c->hp->ffn_act, c->gfull[i], c->ufull[i]);
}

/* One step of at most n_batch tokens at positions pos0 ... pos0 + T - 1. When
 * `logits` is non-NULL, the last token's logits are written there. */
static int step(struct pi_ctx *c, const int32_t *tokens, int64_t T, int64_t pos0, float *logits) {
    const struct pi_hparams *hp = c->hp;
    const struct pi_backend_vtable *be = c->be;
    struct pi_backend *b = c->b;
    const int64_t E = hp->n_embd;

    be->get_rows(b, &c->tok_embd, tokens, T, c->x);                /* x [T][E] */
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer_w *L = &c->layers[l];
        const uint64_t t0 = now(c);
        /* attention block */
        be->rmsnorm(b, c->x, &L->attn_norm, hp->rms_eps, T, c->xn); /* xn [T][E] */
        be->matmul(b, &L->wq, c->xn, T, c->q);                     /* q [T][Hq*D] */
        be->matmul(b, &L->wk, c->xn, T, c->k);                     /* k [T][Hkv*D] */
        be->matmul(b, &L->wv, c->xn, T, c->v);                     /* v [T][Hkv*Dv] */
        be->rope(b, c->q, T, hp->n_head, hp->head_dim_k, hp->n_rot, pos0, hp->rope_freq_base,
                 hp->rope_scale, 0);
        be->rope(b, c->k, T, hp->n_head_kv, hp->head_dim_k, hp->n_rot, pos0,
                 hp->rope_freq_base, hp->rope_scale, 0);
        be->kv_store(b, c->kv, l, pos0, T, c->k, c->v);
        be->attention(b, c->kv, l, c->q, T, pos0, c->att);         /* att [T][Hq*Dv] */
        be->matmul(b, &L->wo, c->att, T, c->xn);                   /* xn [T][E] */
        be->add(b, c->x, c->xn, T * E);                            /* x += attn */
        const uint64_t t1 = now(c);
        /* predictor: s [T][F] from the residual x, before ffn_norm */
        const int diag = c->stats_level == PI_STATS_DIAGNOSTIC;
        const int have_pred = hp->sparse && (c->mode == PI_SPARSE_PREDICTOR || diag);
        if (have_pred) {
            predict(c, L, T);
            be->sync(b);
            if (c->stats)
                c->stats->layer[l].bytes_predictor +=
                    (uint64_t)(L->fc1.n_out * L->fc1.row_bytes + L->fc2.n_out * L->fc2.row_bytes);
        }
        const uint64_t t2 = now(c);
        /* feed-forward block */
        be->rmsnorm(b, c->x, &L->ffn_norm, hp->rms_eps, T, c->xn);
        const float *truth = NULL;
        const int32_t *tidx = NULL;
        int64_t tn = 0;
        if (c->mode == PI_SPARSE_PREDICTOR && diag) {
            true_activations(c, L, T);
            truth = c->gfull;
        }
        if (c->mode == PI_SPARSE_DENSE) {
            ffn_dense(c, l, T);
            truth = c->g;
        } else {
            const int64_t n = ffn_sparse(c, l, T);
            if (c->mode == PI_SPARSE_ORACLE) { /* g is valid on the selected rows only */
                truth = c->g;
                tidx = c->idx;
                tn = n;
            }
        }
        be->sync(b);
        if (c->trace_fn)
            c->trace_fn(c->trace_user, l, T, c->xn, have_pred ? c->score : NULL);
        be->add(b, c->x, c->xn, T * E);                            /* x += ffn */
        if (c->stats) {
            const uint64_t t3 = now(c);
            pi_layer_stats *ls = &c->stats->layer[l];
            ls->ns_attention += t1 - t0;
            ls->ns_predictor += t2 - t1;
            ls->ns_ffn += t3 - t2;
            count(c, l, T, have_pred, truth, tidx, tn);
        }
        if (c->abort_fn && c->abort_fn(c->abort_user))
            PI_FAIL(&c->err, PI_ERR_ABORTED, "decode aborted by the caller");
    }
    if (logits) {
        const float *last = c->x + (T - 1) * E;
        be->rmsnorm(b, last, &c->output_norm, hp->rms_eps, 1, c->xn);
        be->matmul(b, &c->output, c->xn, 1, logits);                /* [n_vocab] */
    }
    return be->sync(b);
}

int pi_forward(struct pi_ctx *c, const int32_t *tokens, int64_t n) {
    int64_t done = 0;
    while (done < n) {
        int64_t T = n - done < c->n_batch ? n - done : c->n_batch;
        int last = done + T == n;
        PI_TRY(step(c, tokens + done, T, c->pos + done, last ? c->logits : NULL));
        done += T;
    }
    c->pos += n;
    c->has_logits = 1;
    return PI_OK;
}
