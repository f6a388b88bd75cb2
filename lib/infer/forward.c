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
#include <math.h>
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

/* idx = the neurons some token selects: src[t][r] >= thr (strict: > thr), except those
 * marked in skip (NULL: none). */
static int64_t select_union(struct pi_ctx *c, const float *src, int64_t T, float thr,
                            int strict, const uint8_t *skip) {
    const int64_t F = c->hp->n_ff;
    memset(c->mark, 0, (size_t)F);
    for (int64_t t = 0; t < T; t++) {
        const float *s = src + t * F;
        for (int64_t r = 0; r < F; r++)
            c->mark[r] |= strict ? s[r] > thr : s[r] >= thr;
    }
    int64_t n = 0;
    for (int64_t r = 0; r < F; r++)
        if (c->mark[r] && !(skip && skip[r]))
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

/* y [T][E] = the FFN block of layer l on xn = ffn_norm(x) (sparse modes), over the
 * neurons not marked in `skip` (the device's, or NULL for none); with a skip mask,
 * dense mode computes every neuron not skipped. y may be c->xn. */
static int64_t ffn_sparse(struct pi_ctx *c, int64_t l, int64_t T, const uint8_t *skip, float *y) {
    const struct pi_hparams *hp = c->hp;
    const struct pi_backend_vtable *be = c->be;
    struct pi_backend *b = c->b;
    const struct pi_layer_w *L = &c->layers[l];
    const int64_t F = hp->n_ff;
    const int predictor = c->mode == PI_SPARSE_PREDICTOR;
    const int64_t dense_above = (int64_t)(PI_SPARSE_DENSE_UNION * (double)F);
    int64_t n, rows_gate;

    if (predictor || c->mode == PI_SPARSE_DENSE) {
        if (predictor) {
            n = select_union(c, c->score, T, c->threshold, 0, skip);
        } else { /* dense mode, the host's share of a split layer */
            n = 0;
            for (int64_t r = 0; r < F; r++)
                if (!skip[r])
                    c->idx[n++] = (int32_t)r;
        }
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
        n = select_union(c, c->g, T, 0.0f, 1, skip);
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
    const int64_t rows_down = be->matmul_t_rows(b, &L->down_t, c->g, T, c->idx, n, y);
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

/* y [T][E] = the dense FFN block of layer l on xn = ffn_norm(x); y may be c->xn. */
static void ffn_dense(struct pi_ctx *c, int64_t l, int64_t T, float *y) {
    const struct pi_hparams *hp = c->hp;
    const struct pi_backend_vtable *be = c->be;
    struct pi_backend *b = c->b;
    const struct pi_layer_w *L = &c->layers[l];
    be->matmul(b, &L->gate, c->xn, T, c->g);                       /* g [T][F] */
    be->matmul(b, &L->up, c->xn, T, c->u);                         /* u [T][F] */
    be->ffn_act(b, act_of(hp->ffn_act), c->g, c->u, T * hp->n_ff);
    if (L->has_down)
        be->matmul(b, &L->down, c->g, T, y);                       /* y [T][E] */
    else
        be->matmul_t(b, &L->down_t, c->g, T, y);
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

/* ---- hybrid execution --------------------------------------------------------------
 *
 * Each op runs on the "unit" that holds its weights: the host (the context's CPU
 * backend) or the device (c->hy). Activations live in slots with a copy on each side
 * and a record of where they are current; an op asks for its inputs where it runs
 * (copied over when stale: an upload is queued, a download waits for the device) and
 * marks its outputs current there only. With no device every slot stays on the host
 * and no copy is ever made. A layer split between the two computes its device
 * neurons on the device while the host computes the others; the device's work is
 * queued first and its result fetched last, the one wait of the layer in decode when
 * attention and predictor live on the device as well. */
enum { HOST = 1, DEV = 2 };

struct unit {
    const struct pi_backend_vtable *be;
    struct pi_backend *b;
    int at;
};

struct slot {
    float *p[3]; /* p[HOST], p[DEV] */
    int64_t width;
    int valid;
};

struct run {
    struct pi_ctx *c;
    int64_t T;
    struct unit host, dev;
    struct slot x, xn, q, k, v, att, score, hid;
    int st; /* first copy failure */
};

/* The slot's values on side `at`, copied there if stale. */
static float *in(struct run *r, struct slot *s, int at) {
    if (!(s->valid & at)) {
        const size_t bytes = (size_t)(r->T * s->width) * sizeof(float);
        const int st = at == DEV ? r->dev.be->upload(r->dev.b, s->p[DEV], s->p[HOST], bytes)
                                 : r->dev.be->download(r->dev.b, s->p[HOST], s->p[DEV], bytes);
        if (st < 0 && r->st >= 0)
            r->st = st;
        s->valid |= at;
    }
    return s->p[at];
}

/* The slot as an op's output on side `at` (the other side's copy becomes stale). */
static float *out(struct slot *s, int at) {
    s->valid = at;
    return s->p[at];
}

/* Read, then written in place. */
static float *inout(struct run *r, struct slot *s, int at) {
    float *p = in(r, s, at);
    s->valid = at;
    return p;
}

static const struct unit *unit(const struct run *r, int on_dev) {
    return on_dev ? &r->dev : &r->host;
}

static void slot_init(struct slot *s, float *h, float *d, int64_t width) {
    s->p[HOST] = h;
    s->p[DEV] = d;
    s->width = width;
    s->valid = HOST;
}

/* s [T][F] = fc2 . relu(fc1 . x): the predictor scores of layer l, on unit u with its
 * weights L. relu on a device is ffn_act's relu(g) * 1 against a vector of ones. */
static void predict(struct run *r, const struct unit *u, const struct pi_layer_w *L,
                    const struct pi_dev_layer *D) {
    const int64_t T = r->T, R = L->fc1.n_out;
    const struct pi_weight *fc1 = u->at == DEV ? &D->fc1 : &L->fc1;
    const struct pi_weight *fc2 = u->at == DEV ? &D->fc2 : &L->fc2;
    u->be->matmul(u->b, fc1, in(r, &r->x, u->at), T, out(&r->hid, u->at)); /* hid [T][R] */
    float *h = r->hid.p[u->at];
    if (u->at == DEV) {
        u->be->ffn_act(u->b, PI_ACT_RELU_MUL, h, r->c->hy->ones, T * R);
    } else {
        for (int64_t i = 0; i < T * R; i++)
            h[i] = h[i] > 0.0f ? h[i] : 0.0f;
    }
    u->be->matmul(u->b, fc2, h, T, out(&r->score, u->at));              /* s [T][F] */
}

/* The device's share of layer l's FFN: yd [T][E] over its n_dev neurons, queued. */
static void ffn_device(struct run *r, const struct pi_dev_layer *D) {
    struct pi_ctx *c = r->c;
    struct pi_hybrid *h = c->hy;
    const struct unit *u = &r->dev;
    const int64_t T = r->T, n = D->n_dev;
    const float *xn = in(r, &r->xn, DEV);
    const float *score = c->mode == PI_SPARSE_PREDICTOR ? in(r, &r->score, DEV) : NULL;
    u->be->matmul(u->b, &D->gate, xn, T, h->gd);                       /* gd [T][n] */
    u->be->matmul(u->b, &D->up, xn, T, h->ud);                         /* ud [T][n] */
    if (D->down_is_t) {
        /* oracle and dense need no mask: relu zeroes the inactive neurons */
        u->be->ffn_act_masked(u->b, act_of(c->hp->ffn_act), h->gd, h->ud, T, n, score,
                              c->hp->n_ff, D->map, c->threshold);
        u->be->matmul_t(u->b, &D->down, h->gd, T, h->yd);              /* yd [T][E] */
    } else {
        u->be->ffn_act(u->b, act_of(c->hp->ffn_act), h->gd, h->ud, T * n);
        u->be->matmul(u->b, &D->down, h->gd, T, h->yd);
    }
}

/* The first non-finite value of v[0..n), or -1. */
static int64_t first_nonfinite(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return i;
    return -1;
}

/* PI_CHECK_LAYERS: PI_ERR_NUMERIC if slot s [T][width] (the residual stream, or the
 * predictor's scores) holds a NaN or an infinity after `part` of layer l (its host
 * copy, fetched from the device if stale). */
static int check_block(struct run *r, struct slot *s, const pi_batch_entry *e,
                       const int32_t *pos, int64_t l, const char *part) {
    struct pi_ctx *c = r->c;
    const int64_t E = s->width;
    const float *x = in(r, s, HOST);
    if (r->c->hy)
        r->c->hy->be->sync(r->c->hy->b);
    c->be->sync(c->b);
    const int64_t i = r->st < 0 ? -1 : first_nonfinite(x, r->T * E);
    if (i < 0)
        return PI_OK;
    const int64_t t = i / E;
    PI_FAIL(&c->err, PI_ERR_NUMERIC, "layer %lld, after the %s block: %s in the %s of "
            "entry %lld (sequence %d, position %d), element %lld",
            (long long)l, part, isnan(x[i]) ? "NaN" : "infinity",
            s == &r->x ? "residual stream" : "scores", (long long)t, (int)e[t].seq,
            (int)pos[t], (long long)(i % E));
}

/* One step of T <= n_batch entries at positions pos[0..T). The logits of the entries
 * that ask for them go to consecutive rows of `rows` [..][n_vocab] (host memory). */
static int step(struct pi_ctx *c, const pi_batch_entry *e, const int32_t *pos, int64_t T,
                float *rows) {
    const struct pi_hparams *hp = c->hp;
    struct pi_hybrid *hy = c->hy;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    const int64_t qd = hp->n_head * hp->head_dim_k, kd = hp->n_head_kv * hp->head_dim_k;
    const int64_t vd = hp->n_head_kv * hp->head_dim_v, ad = hp->n_head * hp->head_dim_v;
    struct run r = {.c = c, .T = T, .host = {c->be, c->b, HOST}};
    if (hy)
        r.dev = (struct unit){hy->be, hy->b, DEV};
    slot_init(&r.x, c->x, hy ? hy->x : NULL, E);
    slot_init(&r.xn, c->xn, hy ? hy->xn : NULL, E);
    slot_init(&r.q, c->q, hy ? hy->q : NULL, qd);
    slot_init(&r.k, c->k, hy ? hy->k : NULL, kd);
    slot_init(&r.v, c->v, hy ? hy->v : NULL, vd);
    slot_init(&r.att, c->att, hy ? hy->att : NULL, ad);
    slot_init(&r.score, c->score, hy ? hy->score : NULL, F);
    slot_init(&r.hid, c->hid, hy ? hy->hid : NULL, c->model->desc.max_rank);
    const struct unit *kvu = unit(&r, hy && hy->kv);
    struct pi_kv *kv = hy && hy->kv ? hy->kv : c->kv;

    for (int64_t i = 0; i < T; i++)
        c->step_tok[i] = e[i].token;
    c->be->get_rows(c->b, &c->tok_embd, c->step_tok, T, out(&r.x, HOST));  /* x [T][E] */
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer_w *L = &c->layers[l];
        const struct pi_dev_layer *D = hy ? &hy->layers[l] : NULL;
        const uint64_t t0 = now(c);
        /* attention block, where its weights are; rope, cache and scores where the KV
         * cache is */
        const struct unit *a = unit(&r, D && D->attn);
        const struct pi_layer_w *W = a->at == DEV ? NULL : L;
        const struct pi_vector *attn_norm = W ? &L->attn_norm : &D->attn_norm;
        a->be->rmsnorm(a->b, in(&r, &r.x, a->at), attn_norm, hp->rms_eps, T,
                       out(&r.xn, a->at));                                  /* xn [T][E] */
        const float *xn = r.xn.p[a->at];
        a->be->matmul(a->b, W ? &L->wq : &D->wq, xn, T, out(&r.q, a->at));  /* q [T][Hq*D] */
        a->be->matmul(a->b, W ? &L->wk : &D->wk, xn, T, out(&r.k, a->at));  /* k [T][Hkv*D] */
        a->be->matmul(a->b, W ? &L->wv : &D->wv, xn, T, out(&r.v, a->at));  /* v [T][Hkv*Dv] */
        float *q = inout(&r, &r.q, kvu->at), *k = inout(&r, &r.k, kvu->at);
        const float *v = in(&r, &r.v, kvu->at);
        float *att = out(&r.att, kvu->at);
        /* per run of one sequence's consecutive positions: its own cache slot */
        for (int64_t i0 = 0, i1; i0 < T; i0 = i1) {
            for (i1 = i0 + 1; i1 < T && e[i1].seq == e[i0].seq && pos[i1] == pos[i1 - 1] + 1;)
                i1++;
            const int64_t n = i1 - i0, p0 = pos[i0], slot = l * c->n_seq + e[i0].seq;
            kvu->be->rope(kvu->b, q + i0 * qd, n, hp->n_head, hp->head_dim_k, hp->n_rot, p0,
                          hp->rope_freq_base, hp->rope_scale, 0);
            kvu->be->rope(kvu->b, k + i0 * kd, n, hp->n_head_kv, hp->head_dim_k, hp->n_rot, p0,
                          hp->rope_freq_base, hp->rope_scale, 0);
            kvu->be->kv_store(kvu->b, kv, slot, p0, n, k + i0 * kd, v + i0 * vd);
            kvu->be->attention(kvu->b, kv, slot, q + i0 * qd, n, p0,
                               att + i0 * ad);                              /* att [T][Hq*Dv] */
        }
        a->be->matmul(a->b, W ? &L->wo : &D->wo, in(&r, &r.att, a->at), T,
                      out(&r.xn, a->at));                                   /* xn [T][E] */
        a->be->add(a->b, inout(&r, &r.x, a->at), r.xn.p[a->at], T * E);    /* x += attn */
        if (c->check_layers)
            PI_TRY(check_block(&r, &r.x, e, pos, l, "attention"));
        const uint64_t t1 = now(c);
        /* predictor: s [T][F] from the residual x, before ffn_norm */
        const int diag = c->stats_level == PI_STATS_DIAGNOSTIC;
        const int have_pred = hp->sparse && (c->mode == PI_SPARSE_PREDICTOR || diag);
        if (have_pred) {
            predict(&r, unit(&r, D && D->pred), L, D);
            if (c->check_layers)
                PI_TRY(check_block(&r, &r.score, e, pos, l, "predictor"));
            if (c->stats)
                c->stats->layer[l].bytes_predictor +=
                    (uint64_t)(L->fc1.n_out * L->fc1.row_bytes + L->fc2.n_out * L->fc2.row_bytes);
        }
        const uint64_t t2 = now(c);
        /* feed-forward block: xn = ffn_norm(x), then the device's neurons (queued) and
         * the host's */
        const struct unit *nu = unit(&r, D && D->norm);
        nu->be->rmsnorm(nu->b, in(&r, &r.x, nu->at), nu->at == DEV ? &D->ffn_norm : &L->ffn_norm,
                        hp->rms_eps, T, out(&r.xn, nu->at));
        const int64_t n_dev = D ? D->n_dev : 0;
        const int host_part = n_dev < F;
        if (host_part || c->stats) { /* the host's inputs, fetched before the device is busy */
            in(&r, &r.xn, HOST);
            if (have_pred)
                in(&r, &r.score, HOST);
        }
        if (n_dev)
            ffn_device(&r, D);
        const float *truth = NULL;
        const int32_t *tidx = NULL;
        int64_t tn = 0;
        float *y = n_dev ? hy->yc_host : c->xn; /* the host's FFN output */
        if (host_part) {
            if (c->mode == PI_SPARSE_PREDICTOR && diag) {
                true_activations(c, L, T);
                truth = c->gfull;
            }
            if (c->mode == PI_SPARSE_DENSE && !n_dev) {
                ffn_dense(c, l, T, y);
                truth = c->g;
            } else {
                const int64_t n = ffn_sparse(c, l, T, n_dev ? D->on_dev : NULL, y);
                if (c->mode == PI_SPARSE_ORACLE && !n_dev) { /* g valid on the selected rows */
                    truth = c->g;
                    tidx = c->idx;
                    tn = n;
                }
            }
            c->be->sync(c->b);
        }
        if (!n_dev) { /* x += ffn, on the host */
            if (c->trace_fn)
                c->trace_fn(c->trace_user, l, T, y, have_pred ? c->score : NULL);
            out(&r.xn, HOST);
            c->be->add(c->b, inout(&r, &r.x, HOST), y, T * E);
        } else { /* x += device part + host part, where the next layer wants x */
            const int next_dev = l + 1 < hp->n_layer ? hy->layers[l + 1].attn : hy->plan->pl.output;
            if (next_dev) {
                float *x = inout(&r, &r.x, DEV);
                hy->be->add(hy->b, x, hy->yd, T * E);
                if (host_part) {
                    int st = hy->be->upload(hy->b, hy->yc, y, (size_t)(T * E) * sizeof(float));
                    r.st = r.st < 0 ? r.st : st;
                    hy->be->add(hy->b, x, hy->yc, T * E);
                }
            } else {
                int st = hy->be->download(hy->b, hy->yd_host, hy->yd,
                                          (size_t)(T * E) * sizeof(float));
                r.st = r.st < 0 ? r.st : st;
                float *x = inout(&r, &r.x, HOST);
                c->be->add(c->b, x, hy->yd_host, T * E);
                if (host_part)
                    c->be->add(c->b, x, y, T * E);
            }
        }
        if (c->stats) {
            const uint64_t t3 = now(c);
            pi_layer_stats *ls = &c->stats->layer[l];
            ls->ns_attention += t1 - t0;
            ls->ns_predictor += t2 - t1;
            ls->ns_ffn += t3 - t2;
            count(c, l, T, have_pred, truth, tidx, tn);
        }
        if (r.st < 0)
            break;
        if (c->check_layers)
            PI_TRY(check_block(&r, &r.x, e, pos, l, "FFN"));
        if (c->abort_fn && c->abort_fn(c->abort_user)) {
            if (hy)
                hy->be->sync(hy->b);
            PI_FAIL(&c->err, PI_ERR_ABORTED, "decode aborted by the caller");
        }
    }
    /* logits of the entries that ask, PI_LOGIT_CHUNK rows at a time: the rows of x
     * normalized into consecutive rows of xn, then one product */
    const struct unit *o = unit(&r, hy && hy->plan->pl.output);
    const float *x = r.st >= 0 ? in(&r, &r.x, o->at) : NULL;
    float *xn = out(&r.xn, o->at);
    const int64_t V = hp->n_vocab;
    for (int64_t i = 0, n = 0; x && i <= T; i++) {
        if (i < T && e[i].logits) {
            o->be->rmsnorm(o->b, x + i * E, o->at == DEV ? &hy->output_norm : &c->output_norm,
                           hp->rms_eps, 1, xn + n * E);
            n++;
        }
        if (n == PI_LOGIT_CHUNK || (i == T && n)) {
            if (o->at == DEV) {
                o->be->matmul(o->b, &hy->output, xn, n, hy->logits);
                int st = o->be->download(o->b, rows, hy->logits, (size_t)(n * V) * sizeof(float));
                r.st = r.st < 0 ? r.st : st;
            } else {
                o->be->matmul(o->b, &c->output, xn, n, rows);           /* [n][n_vocab] */
            }
            rows += n * V;
            n = 0;
        }
    }
    int st = hy ? hy->be->sync(hy->b) : PI_OK;
    if (r.st >= 0 && st < 0)
        r.st = st;
    if (r.st < 0)
        PI_FAIL(&c->err, r.st, "the %s device failed", hy->be->name);
    st = c->be->sync(c->b);
    if (st < 0)
        PI_FAIL(&c->err, st, "the CPU backend refused an op wider than the scratch it was "
                "sized for");
    return PI_OK;
}

int pi_forward(struct pi_ctx *c, const pi_batch_entry *e, const int32_t *pos, int64_t n) {
    const int spare = !c->cur;
    const int64_t V = c->hp->n_vocab;
    float *rows = c->rows[spare];
    int32_t *row_of = c->row_of[spare];
    int64_t n_rows = 0;
    for (int64_t i = 0; i < n; i++)
        row_of[i] = e[i].logits ? (int32_t)n_rows++ : -1;
    for (int64_t done = 0; done < n;) {
        const int64_t T = n - done < c->n_batch ? n - done : c->n_batch;
        int64_t first = 0;
        while (first < T && row_of[done + first] < 0)
            first++;
        /* no row asked in this step: rows may be NULL (a batch without logits) */
        float *dst = first < T ? rows + (size_t)row_of[done + first] * (size_t)V : rows;
        PI_TRY(step(c, e + done, pos + done, T, dst));
        done += T;
    }
    /* NaN or infinity in a logit (an overflowing layer, a broken file) would reach the
     * sampler as garbage: the decode fails instead, and the context stays as it was. */
    for (int64_t i = 0; i < n; i++) {
        if (row_of[i] < 0)
            continue;
        const float *row = rows + (size_t)row_of[i] * (size_t)V;
        const int64_t j = first_nonfinite(row, V);
        if (j >= 0)
            PI_FAIL(&c->err, PI_ERR_NUMERIC, "the logits of entry %lld (sequence %d, "
                    "position %d) hold %s (token %lld); checking every layer (check_numerics) "
                    "finds where", (long long)i, (int)e[i].seq, (int)pos[i],
                    isnan(row[j]) ? "NaN" : "infinity", (long long)j);
    }
    /* success: the sequences advance, the batch's logits become the current ones */
    for (int64_t i = 0; i < n; i++)
        c->seq_len[e[i].seq] = pos[i] + 1;
    c->cur = spare;
    c->n_entries = (size_t)n;
    c->has_logits = n_rows > 0; /* a batch asking for none leaves none readable */
    if (n_rows)
        memcpy(c->logits, rows + (size_t)(n_rows - 1) * (size_t)V, (size_t)V * sizeof(float));
    return PI_OK;
}
