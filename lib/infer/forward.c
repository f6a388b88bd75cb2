/* forward.c -- the forward pass, written as blocks over the per-layer execution
 * record (ctx.h, struct pi_layer_exec) and the architecture's description
 * (lib/model/desc.h): embeddings, then per layer attention_block and ffn_block,
 * sequential (x += attn(norm(x)); x += ffn(norm(x))) or parallel (x += attn(n) +
 * ffn(n')), then logits. Shapes: E = n_embd, F = n_ff, T = tokens in this step,
 * Hq/Hkv = heads, D = head dim, R = predictor rank. Every op goes through the backend
 * vtable; slots.h moves activations between the host and a device.
 *
 * The FFN block runs in one of three modes (pi_ctx_params.sparse_mode):
 *   dense      g = act(gate xn, up xn) for every neuron, y = down g
 *   predictor  s = fc2 relu(fc1 x) (x: the residual after attention, before ffn_norm);
 *              token t uses the neurons with s[t][r] >= threshold
 *   oracle     g0 = gate xn for every neuron; token t uses the neurons with g0 > 0
 *   threshold  a = act(gate xn) for every neuron; token t uses the neurons with
 *              |a| > t_l (CATS-style, files with ffn_down_t); a "teal" file: gate and
 *              up for every neuron, down where |act(gate xn) * (up xn)| > t_l
 * A step of T tokens computes gate/up rows for the union U of its tokens' sets (all
 * rows, densely, when |U| > PI_SPARSE_DENSE_UNION * F) and masks each token to its own
 * set, so a prompt gives what T one-token steps would give (up to rounding order). A
 * predictor-mode prompt does that per tile of PI_SPARSE_TILE tokens, or densely for the
 * whole step when the tiles' unions average more than PI_SPARSE_PROMPT_DENSE * F. */
#include <math.h>
#include <string.h>

#include "infer/ctx.h"
#include "infer/slots.h"
#include "runtime/fp16.h"
#include "util/os.h"

/* The backend activation of the model's FFN, gated (times up) or plain. */
static enum pi_act act_of(enum pi_ffn_act a, int gated) {
    switch (a) {
    case PI_FFN_RELU:
        return gated ? PI_ACT_RELU_MUL : PI_ACT_RELU;
    case PI_FFN_RELU_BOTH:
        return gated ? PI_ACT_RELU_RELU_MUL : PI_ACT_RELU; /* the gate's own: relu */
    case PI_FFN_GELU:
        return gated ? PI_ACT_GELU_MUL : PI_ACT_GELU;
    case PI_FFN_GELU_ERF:
        return gated ? PI_ACT_GELU_ERF_MUL : PI_ACT_GELU_ERF;
    case PI_FFN_RELU_SQR:
        return PI_ACT_RELU_SQR; /* plain FFNs only (arch.c pairs it with no gate) */
    case PI_FFN_SWIGLU_OAI:
        return PI_ACT_SWIGLU_OAI; /* gated only (gpt-oss's experts) */
    case PI_FFN_SILU:
        break;
    }
    return gated ? PI_ACT_SILU_MUL : PI_ACT_SILU;
}

/* The ReLU activations of the sparse path (the same formulas as the backend's). */
static float relu_act(enum pi_ffn_act a, float g, float u) {
    if (a == PI_FFN_RELU_BOTH)
        return g > 0.0f && u > 0.0f ? g * u : 0.0f;
    return g > 0.0f ? g * u : 0.0f;
}

/* Value i of a host vector (F32, F16 or BF16: desc.c's norm and bias types). */
static float vec_at(const struct pi_vector *v, int64_t i) {
    if (v->type == PI_TYPE_F32) {
        float f;
        memcpy(&f, (const uint8_t *)v->data + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)v->data + 2 * i, 2);
    return v->type == PI_TYPE_F16 ? pi_fp16_to_fp32(h) : pi_bf16_to_fp32(h);
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

/* Gate histograms (pi_ctx_params.gate_histogram): a [n] = act(gate xn) (or the
 * intermediate) of layer l: T * n_ff values, or an expert's n * n_ff_exp. */
static void gate_hist(struct pi_ctx *c, int64_t l, const float *a, int64_t n) {
    uint64_t *h = c->stats->gate_hist + (size_t)l * PI_GATE_HIST_BINS;
    for (int64_t i = 0; i < n; i++)
        h[pi_stats_gate_bin(a[i])]++;
}

/* THRESHOLD mode: idx = the neurons whose |a| > thr for some token (a [T][F] =
 * act(gate xn); F: the layer's n_ff or an expert's n_ff_exp), except those marked in
 * skip (NULL: none). */
static int64_t select_abs(struct pi_ctx *c, const float *a, int64_t T, int64_t F, float thr,
                          const uint8_t *skip) {
    memset(c->mark, 0, (size_t)F);
    for (int64_t t = 0; t < T; t++) {
        const float *s = a + t * F;
        for (int64_t r = 0; r < F; r++)
            c->mark[r] |= fabsf(s[r]) > thr;
    }
    int64_t n = 0;
    for (int64_t r = 0; r < F; r++)
        if (c->mark[r] && !(skip && skip[r]))
            c->idx[n++] = (int32_t)r;
    return n;
}

/* idx = the neurons not marked in skip (the host's share of a split layer); their count.
 * The rows of the others in g and u stay as they were and are never selected. */
static int64_t host_rows(struct pi_ctx *c, const uint8_t *skip) {
    int64_t n = 0;
    for (int64_t r = 0; r < c->hp->n_ff; r++)
        if (!skip[r])
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

/* A gated layer's gate and up biases (a biased Llama's; data NULL: none) added to
 * c->g and c->u [T][F] on the host, before the activation: where `gate` / `up`. Rows
 * not computed get them too and stay unread. */
static void gated_bias(struct pi_ctx *c, const struct pi_layer_w *L, int64_t T, int gate, int up) {
    if (gate && L->b_gate.data)
        c->be->add_rows(c->b, c->g, &L->b_gate, T);
    if (up && L->b_up.data)
        c->be->add_rows(c->b, c->u, &L->b_up, T);
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
    /* without a gate (Falcon, OPT) the activation is relu(up xn + b_up), computed in g */
    const int gated = L->gate.data != NULL;
    float *up = gated ? c->u : c->g;
    int biased = 0; /* b_up already added (oracle mode without a gate) */
    int64_t n, rows_gate, rows_up;

    /* a prompt whose tiles' unions are most of the layer on average: gate and up
     * densely for all its tokens at once (the prompt gemm's widest tiles), masked per
     * token below, rather than tile by tile */
    int all_dense = 0;
    if (predictor && gated && T > PI_SPARSE_TILE && !skip) { /* (a split layer's host
                                                              * reads its share only) */
        int64_t sum = 0, tiles = 0;
        for (int64_t t0 = 0; t0 < T; t0 += PI_SPARSE_TILE, tiles++) {
            const int64_t nt = T - t0 < PI_SPARSE_TILE ? T - t0 : PI_SPARSE_TILE;
            sum += select_union(c, c->score + t0 * F, nt, c->threshold, 0, skip);
        }
        all_dense = (double)sum > PI_SPARSE_PROMPT_DENSE * (double)F * (double)tiles;
    }
    if (all_dense) {
        const struct pi_weight *ws[2] = {&L->gate, &L->up};
        float *ys[2] = {c->g, c->u};
        if (be->matmul_n) {
            be->matmul_n(b, 2, ws, c->xn, T, ys);
        } else {
            be->matmul(b, &L->gate, c->xn, T, c->g);
            be->matmul(b, &L->up, c->xn, T, c->u);
        }
        gated_bias(c, L, T, 1, 1);
        n = select_union(c, c->score, T, c->threshold, 0, skip);
        rows_gate = rows_up = F;
    } else if (predictor && gated && T > PI_SPARSE_TILE) {
        /* a prompt: gate and up per tile of PI_SPARSE_TILE tokens, over that tile's
         * union (the union of a whole prompt is most of the layer, a tile's far less),
         * or densely for a tile whose union is most of it; then the step's union for
         * the masks and the down projection. Each row's value is the gemm's, the same
         * whatever rows and tokens it is computed with. */
        rows_up = 0;
        for (int64_t t0 = 0; t0 < T; t0 += PI_SPARSE_TILE) {
            const int64_t nt = T - t0 < PI_SPARSE_TILE ? T - t0 : PI_SPARSE_TILE;
            const float *xt = c->xn + t0 * hp->n_embd;
            const int64_t m = select_union(c, c->score + t0 * F, nt, c->threshold, 0, skip);
            if (m > dense_above) {
                be->matmul(b, &L->gate, xt, nt, c->g + t0 * F);
                be->matmul(b, &L->up, xt, nt, c->u + t0 * F);
                rows_up += F;
            } else if (be->matmul_rows2) {
                be->matmul_rows2(b, &L->gate, &L->up, xt, nt, c->idx, m, c->g + t0 * F,
                                 c->u + t0 * F);
                rows_up += m;
            } else {
                be->matmul_rows(b, &L->gate, xt, nt, c->idx, m, c->g + t0 * F);
                be->matmul_rows(b, &L->up, xt, nt, c->idx, m, c->u + t0 * F);
                rows_up += m;
            }
        }
        gated_bias(c, L, T, 1, 1);
        n = select_union(c, c->score, T, c->threshold, 0, skip);
        rows_gate = rows_up;
    } else if (predictor || c->mode == PI_SPARSE_DENSE) {
        if (predictor) {
            n = select_union(c, c->score, T, c->threshold, 0, skip);
        } else { /* dense mode, the host's share of a split layer */
            n = 0;
            for (int64_t r = 0; r < F; r++)
                if (!skip[r])
                    c->idx[n++] = (int32_t)r;
        }
        rows_up = n;
        if (n > dense_above) {
            if (gated)
                be->matmul(b, &L->gate, c->xn, T, c->g);
            be->matmul(b, &L->up, c->xn, T, up);
            rows_up = F;
        } else if (gated && be->matmul_rows2) {
            be->matmul_rows2(b, &L->gate, &L->up, c->xn, T, c->idx, n, c->g, c->u);
        } else {
            if (gated)
                be->matmul_rows(b, &L->gate, c->xn, T, c->idx, n, c->g);
            be->matmul_rows(b, &L->up, c->xn, T, c->idx, n, up);
        }
        if (gated)
            gated_bias(c, L, T, 1, 1);
        rows_gate = gated ? rows_up : 0;
    } else if (c->mode == PI_SPARSE_THRESHOLD && !gated) {
        /* a plain FFN (Falcon, StarCoder2): a = act(up xn + b_up) for every neuron (of
         * the host's share), the down projection where |a| > t_l (both methods: the
         * activation is the FFN's intermediate) */
        rows_gate = 0;
        rows_up = skip ? host_rows(c, skip) : F;
        if (skip)
            be->matmul_rows(b, &L->up, c->xn, T, c->idx, rows_up, c->g);
        else
            be->matmul(b, &L->up, c->xn, T, c->g);                   /* g [T][F] */
        if (L->b_up.data)
            be->add_rows(b, c->g, &L->b_up, T);
        be->ffn_act(b, act_of(hp->ffn_act, 0), c->g, NULL, T * F);  /* a = act(g) */
        be->sync(b);
        biased = 1;
        if (c->gate_hist)
            gate_hist(c, l, c->g, T * F);
        n = select_abs(c, c->g, T, F, c->layer_thr[l], skip);
    } else if (c->mode == PI_SPARSE_THRESHOLD && hp->teal) {
        /* TEAL-style: gate and up for every neuron (of the host's share), m = act(gate
         * xn) * (up xn), the down projection where |m| > t_l (each token masked to its
         * own set below) */
        rows_gate = rows_up = skip ? host_rows(c, skip) : F;
        if (skip) { /* rows outside the host's share are not read below */
            be->matmul_rows(b, &L->gate, c->xn, T, c->idx, rows_gate, c->g);
            be->matmul_rows(b, &L->up, c->xn, T, c->idx, rows_gate, c->u);
        } else {
            be->matmul(b, &L->gate, c->xn, T, c->g);                 /* g [T][F] */
            be->matmul(b, &L->up, c->xn, T, c->u);                   /* u [T][F] */
        }
        gated_bias(c, L, T, 1, 1);
        be->ffn_act(b, act_of(hp->ffn_act, 1), c->g, c->u, T * F);   /* m = act(g) u */
        be->sync(b);
        if (c->gate_hist == PI_HIST_INTER)
            gate_hist(c, l, c->g, T * F);
        n = select_abs(c, c->g, T, F, c->layer_thr[l], skip);
    } else if (c->mode == PI_SPARSE_THRESHOLD) { /* gated (desc.c and api_ctx.c check) */
        /* the whole gate (of the host's share) and its activation, then up where |a| >
         * t_l (each token masked to its own set below) */
        rows_gate = skip ? host_rows(c, skip) : F;
        if (skip)
            be->matmul_rows(b, &L->gate, c->xn, T, c->idx, rows_gate, c->g);
        else
            be->matmul(b, &L->gate, c->xn, T, c->g);                 /* g [T][F] */
        gated_bias(c, L, T, 1, 0);
        be->ffn_act(b, act_of(hp->ffn_act, 0), c->g, NULL, T * F);   /* a = act(g) */
        be->sync(b);
        if (c->gate_hist == PI_HIST_GATE)
            gate_hist(c, l, c->g, T * F);
        n = select_abs(c, c->g, T, F, c->layer_thr[l], skip);
        rows_up = n > dense_above ? F : n;
        if (n > dense_above)
            be->matmul(b, &L->up, c->xn, T, c->u);
        else
            be->matmul_rows(b, &L->up, c->xn, T, c->idx, n, c->u);
        gated_bias(c, L, T, 0, 1);
    } else if (gated) { /* oracle: the whole gate, then up where it fired */
        be->matmul(b, &L->gate, c->xn, T, c->g);
        gated_bias(c, L, T, 1, 0);
        be->sync(b);
        n = select_union(c, c->g, T, 0.0f, 1, skip);
        rows_gate = F;
        rows_up = n > dense_above ? F : n;
        if (n > dense_above)
            be->matmul(b, &L->up, c->xn, T, c->u);
        else
            be->matmul_rows(b, &L->up, c->xn, T, c->idx, n, c->u);
        gated_bias(c, L, T, 0, 1);
    } else { /* oracle without a gate: the whole up (+ bias), the neurons above 0 */
        be->matmul(b, &L->up, c->xn, T, c->g);
        if (L->b_up.data)
            be->add_rows(b, c->g, &L->b_up, T);
        be->sync(b);
        biased = 1;
        n = select_union(c, c->g, T, 0.0f, 1, skip);
        rows_gate = 0;
        rows_up = F;
    }
    /* a sparsified file's smooth activation (SiLU, GELU) on every row at once, g = act(g)
     * * u, the rows outside the union unread; ReLU ones are applied row by row below */
    const int smooth = gated && hp->ffn_act != PI_FFN_RELU && hp->ffn_act != PI_FFN_RELU_BOTH;
    /* g = m (teal) or a (a plain FFN) already: kept as it is where above t_l */
    const int teal = c->mode == PI_SPARSE_THRESHOLD && (hp->teal || !gated);
    if (smooth && c->mode != PI_SPARSE_THRESHOLD)
        be->ffn_act(b, act_of(hp->ffn_act, 1), c->g, c->u, T * F);
    be->sync(b);
    /* Activations of the union's neurons, each token masked to its own set (THRESHOLD:
     * g holds a = act(gate xn), kept where |a| > t_l). */
    const int add_bias = !gated && !biased && L->b_up.data;
    const int thr_mode = c->mode == PI_SPARSE_THRESHOLD;
    int64_t n_tok_masked = 0;
    const float thr = c->layer_thr[l];
    if (thr_mode && !skip) {
        /* every row of every token in one vectorizable pass: a row outside the union has
         * |g| <= t_l for every token, so it becomes 0 whatever u holds there, and
         * matmul_t_rows reads only the union's rows anyway */
        float *g = c->g;
        const float *u = c->u;
        if (teal)
            for (int64_t i = 0; i < T * F; i++)
                g[i] = fabsf(g[i]) > thr ? g[i] : 0.0f;
        else
            for (int64_t i = 0; i < T * F; i++)
                g[i] = fabsf(g[i]) > thr ? g[i] * u[i] : 0.0f;
        n_tok_masked = T;
    }
    for (int64_t t = n_tok_masked; t < T; t++) {
        float *g = c->g + t * F;
        const float *u = c->u + t * F, *s = c->score + t * F;
        for (int64_t i = 0; i < n; i++) {
            const int64_t r = c->idx[i];
            if (teal) {
                g[r] = fabsf(g[r]) > thr ? g[r] : 0.0f;
            } else if (thr_mode) {
                g[r] = fabsf(g[r]) > thr ? g[r] * u[r] : 0.0f;
            } else if (predictor && !(s[r] >= c->threshold)) { /* NaN: not selected */
                g[r] = 0.0f;
            } else if (smooth) { /* act(g) * u already */
            } else if (gated) {
                g[r] = relu_act(hp->ffn_act, g[r], u[r]);
            } else {
                const float v = add_bias ? g[r] + vec_at(&L->b_up, r) : g[r];
                g[r] = v > 0.0f ? v : 0.0f;
            }
        }
    }
    /* the kept ffn_down (keep_down) for a wide union: its gemm over g, which holds every
     * row of every token (0 where dropped) once the whole-step mask above ran */
    const int down_gemm = L->down.data && n_tok_masked == T &&
                          (double)n > PI_SPARSE_DOWN_DENSE * (double)F;
    int64_t rows_down = F;
    if (down_gemm)
        be->matmul(b, &L->down, c->g, T, y);
    else
        rows_down = be->matmul_t_rows(b, &L->down_t, c->g, T, c->idx, n, y);
    if (!skip && L->b_down.data) /* a split layer's device part adds it (ffn_device) */
        be->add_rows(b, y, &L->b_down, T);
    if (c->stats) {
        pi_layer_stats *ls = &c->stats->layer[l];
        ls->rows_gate_up += (uint64_t)(gated ? rows_gate : rows_up);
        ls->rows_down += (uint64_t)rows_down;
        ls->bytes_ffn += (uint64_t)rows_gate * L->gate.row_bytes +
                         (uint64_t)rows_up * L->up.row_bytes +
                         (down_gemm ? (uint64_t)L->down.n_out * L->down.row_bytes
                                    : (uint64_t)rows_down * L->down_t.row_bytes);
    }
    return n;
}

/* Diagnostic (PI_STATS_DIAGNOSTIC in predictor mode): the true activations of every
 * neuron, in gfull, without touching the step's own buffers. */
static void true_activations(struct pi_ctx *c, int64_t l, const struct pi_layer_w *L, int64_t T) {
    const int64_t F = c->hp->n_ff;
    if (!L->gate.data) { /* relu(up xn + b_up) */
        c->be->matmul(c->b, &L->up, c->xn, T, c->gfull);
        if (L->b_up.data)
            c->be->add_rows(c->b, c->gfull, &L->b_up, T);
        c->be->sync(c->b);
        for (int64_t i = 0; i < T * F; i++)
            c->gfull[i] = c->gfull[i] > 0.0f ? c->gfull[i] : 0.0f;
        return;
    }
    c->be->matmul(c->b, &L->gate, c->xn, T, c->gfull);
    c->be->matmul(c->b, &L->up, c->xn, T, c->ufull);
    if (L->b_gate.data)
        c->be->add_rows(c->b, c->gfull, &L->b_gate, T);
    if (L->b_up.data)
        c->be->add_rows(c->b, c->ufull, &L->b_up, T);
    if (c->hp->sparsified) { /* active: |act(gate xn)| (teal: |act(gate xn) up xn|) above
                              * the layer's threshold */
        const float thr = c->layer_thr[l];
        const int teal = c->hp->teal;
        c->be->ffn_act(c->b, act_of(c->hp->ffn_act, 0), c->gfull, NULL, T * F);
        c->be->sync(c->b);
        for (int64_t i = 0; i < T * F; i++) {
            const float v = c->gfull[i] * c->ufull[i];
            c->gfull[i] = fabsf(teal ? v : c->gfull[i]) > thr ? v : 0.0f;
        }
        return;
    }
    c->be->sync(c->b);
    for (int64_t i = 0; i < T * F; i++)
        c->gfull[i] = relu_act(c->hp->ffn_act, c->gfull[i], c->ufull[i]);
}

/* s [T][F] = fc2 . relu(fc1 . x): the predictor scores of layer l, on unit u with its
 * weights L. relu on a device is ffn_act's relu(g) * 1 against a vector of ones. */
static void predict(struct run *r, const struct unit *u, const struct pi_layer_w *L,
                    const struct pi_dev_layer *D) {
    const int64_t T = r->T, R = L->fc1.n_out;
    const struct pi_weight *fc1 = u->at == DEV ? &D->w.fc1 : &L->fc1;
    const struct pi_weight *fc2 = u->at == DEV ? &D->w.fc2 : &L->fc2;
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

/* y [T][width] += bias, where the layer has one. */
static void bias(const struct unit *u, float *y, const struct pi_vector *b, int64_t T) {
    if (b->data)
        u->be->add_rows(u->b, y, b, T);
}

/* gd, ud [T][n] = gate xn + b_gate, up xn + b_up at the device's n neurons of a gated
 * layer (biases where the file has them), queued. */
static void gate_up_dev(const struct unit *u, const struct pi_dev_layer *D, const float *xn,
                        int64_t T, float *gd, float *ud) {
    u->be->matmul(u->b, &D->gate, xn, T, gd);
    u->be->matmul(u->b, &D->up, xn, T, ud);
    bias(u, gd, &D->b_gate, T);
    bias(u, ud, &D->b_up, T);
}

/* The device's share of layer l's sparse FFN: yd [T][E] over its n_dev neurons, queued. */
static void ffn_device(struct run *r, int64_t l, const struct pi_dev_layer *D) {
    struct pi_ctx *c = r->c;
    struct pi_hybrid *h = c->hy;
    const struct unit *u = &r->dev;
    const int64_t T = r->T, n = D->n_dev;
    const float *xn = in(r, &r->xn, DEV);
    const float *score = c->mode == PI_SPARSE_PREDICTOR ? in(r, &r->score, DEV) : NULL;
    /* oracle and dense need no mask: relu zeroes the inactive neurons */
    if (c->mode == PI_SPARSE_THRESHOLD && !D->gate.data) { /* plain: |act(up xn + b_up)| */
        u->be->matmul(u->b, &D->up, xn, T, h->gd);                     /* gd [T][n] */
        if (D->b_up.data)
            u->be->add_rows(u->b, h->gd, &D->b_up, T);
        u->be->ffn_act_thr(u->b, act_of(c->hp->ffn_act, 0), h->gd, NULL, T * n,
                           c->layer_thr[l], 0);
    } else if (c->mode == PI_SPARSE_THRESHOLD) { /* |act(g)| (teal: |act(g) u|) above t_l */
        gate_up_dev(u, D, xn, T, h->gd, h->ud);
        u->be->ffn_act_thr(u->b, act_of(c->hp->ffn_act, 0), h->gd, h->ud, T * n,
                           c->layer_thr[l], c->hp->teal);
    } else if (D->gate.data) {
        gate_up_dev(u, D, xn, T, h->gd, h->ud);
        u->be->ffn_act_masked(u->b, act_of(c->hp->ffn_act, 1), h->gd, h->ud, T, n, score,
                              c->hp->n_ff, D->map, c->threshold);
    } else { /* relu(up xn + b_up) */
        u->be->matmul(u->b, &D->up, xn, T, h->gd);                     /* gd [T][n] */
        if (D->b_up.data)
            u->be->add_rows(u->b, h->gd, &D->b_up, T);
        u->be->ffn_act_masked(u->b, PI_ACT_RELU, h->gd, NULL, T, n, score, c->hp->n_ff,
                              D->map, c->threshold);
    }
    u->be->matmul_t(u->b, &D->down, h->gd, T, h->yd);                  /* yd [T][E] */
    if (D->b_down.data)
        u->be->add_rows(u->b, h->yd, &D->b_down, T);
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

/* y [n][E] = norm(x) with the model's norm (RMSNorm or LayerNorm with its bias). */
static void norm_rows(const struct unit *u, const struct pi_hparams *hp, const struct pi_norm_w *n,
                      const float *x, int64_t rows, float *y) {
    if (hp->info->norm == PI_NORM_RMS)
        u->be->rmsnorm(u->b, x, &n->w, hp->norm_eps, rows, y);
    else
        u->be->layernorm(u->b, x, n->w.data ? &n->w : NULL, n->b.data ? &n->b : NULL,
                         hp->n_embd, hp->norm_eps, rows, y);
}

/* dst = norm(src) on unit u. */
static void norm(struct run *r, const struct unit *u, const struct pi_norm_w *n, struct slot *src,
                 struct slot *dst) {
    const float *x = in(r, src, u->at);
    norm_rows(u, r->c->hp, n, x, r->T, out(dst, u->at));
}

/* A per-head or whole-row RMSNorm in place (q/k norms, Gemma's post-norms). */
static void rms_inplace(const struct unit *u, float *y, const struct pi_vector *g, float eps,
                        int64_t rows) {
    if (g->data)
        u->be->rmsnorm(u->b, y, g, eps, rows, y);
}

/* ao [T][E] = the attention block of layer l on xn = norm_attn(x) (valid on the
 * attention's unit): q, k, v (+ biases, per-head norms), RoPE, the cache and the
 * scores where the KV cache is, then wo (+ bias, post-norm). */
/* ys[i] = xn times ws[i], i < n, on unit u: in one call where the backend can (the
 * activations prepared once), else one matmul each. */
static void matmul_same_x(const struct unit *u, const struct pi_weight *const *ws, int n,
                          const float *xn, int64_t T, float *const *ys) {
    if (u->be->matmul_n) {
        u->be->matmul_n(u->b, n, ws, xn, T, ys);
        return;
    }
    for (int i = 0; i < n; i++)
        u->be->matmul(u->b, ws[i], xn, T, ys[i]);
}

static void attention_block(struct run *r, int64_t l, struct slot *ao) {
    struct pi_ctx *c = r->c;
    const struct pi_hparams *hp = c->hp;
    const struct pi_layer_exec *X = &c->exec[l];
    const struct unit *a = unit(r, X->attn_dev), *kvu = unit(r, X->kv_dev);
    const struct pi_layer_w *W = a->at == DEV ? &c->hy->layers[l].w : &c->layers[l];
    struct pi_kv *kv = X->kv_dev ? c->hy->kv : c->kv;
    const int64_t T = r->T;
    const int64_t qd = hp->n_head * hp->head_dim_k, kd = hp->n_head_kv * hp->head_dim_k;
    const int64_t vd = hp->n_head_kv * hp->head_dim_v, ad = hp->n_head * hp->head_dim_v;
    const float *xn = in(r, &r->xn, a->at);
    float *q = out(&r->q, a->at), *k = out(&r->k, a->at), *v = out(&r->v, a->at);
    {
        const struct pi_weight *ws[3] = {&W->wq, &W->wk, &W->wv};
        float *ys[3] = {q, k, v};     /* q [T][Hq*D], k [T][Hkv*D], v [T][Hkv*Dv] */
        matmul_same_x(a, ws, 3, xn, T, ys);
    }
    bias(a, q, &W->bq, T);
    bias(a, k, &W->bk, T);
    bias(a, v, &W->bv, T);
    /* per head, or over the whole row (OLMoE): rows of the norm's width */
    rms_inplace(a, q, &W->q_norm, hp->norm_eps, W->q_norm.n ? T * qd / W->q_norm.n : 0);
    rms_inplace(a, k, &W->k_norm, hp->norm_eps, W->k_norm.n ? T * kd / W->k_norm.n : 0);
    q = inout(r, &r->q, kvu->at);
    k = inout(r, &r->k, kvu->at);
    v = in(r, &r->v, kvu->at);
    float *att = out(&r->att, kvu->at);
    /* per run of one sequence's consecutive positions: its own cache slot */
    const pi_batch_entry *e = r->e;
    for (int64_t i0 = 0, i1; i0 < T; i0 = i1) {
        for (i1 = i0 + 1; i1 < T && e[i1].seq == e[i0].seq && r->pos[i1] == r->pos[i1 - 1] + 1;)
            i1++;
        const int64_t n = i1 - i0, p0 = r->pos[i0], kslot = l * c->n_seq + e[i0].seq;
        if (X->rope.n_rot > 0) { /* none with learned positions */
            kvu->be->rope(kvu->b, q + i0 * qd, n, hp->n_head, hp->head_dim_k, p0, &X->rope);
            kvu->be->rope(kvu->b, k + i0 * kd, n, hp->n_head_kv, hp->head_dim_k, p0, &X->rope);
        }
        kvu->be->kv_store(kvu->b, kv, kslot, p0, n, k + i0 * kd, v + i0 * vd);
        kvu->be->attention(kvu->b, kv, kslot, q + i0 * qd, n, p0, &X->attn,
                           att + i0 * ad);                          /* att [T][Hq*Dv] */
    }
    const float *at = in(r, &r->att, a->at);
    float *y = out(ao, a->at);
    a->be->matmul(a->b, &W->wo, at, T, y);                          /* ao [T][E] */
    bias(a, y, &W->bo, T);
    rms_inplace(a, y, &W->attn_post_norm, hp->norm_eps, T);
}

/* The rows of a [n][F] that some token uses (not 0): the rows matmul_t reads. */
static uint64_t rows_used(const float *a, int64_t n, int64_t F) {
    uint64_t rows = 0;
    for (int64_t i = 0; i < F; i++) {
        int any = 0;
        for (int64_t t = 0; t < n && !any; t++)
            any = a[t * F + i] != 0.0f;
        rows += (uint64_t)any;
    }
    return rows;
}

/* y [T][E] = the dense FFN of layer l on unit u over xn (slot): gated
 * down(act(gate xn) * up xn) or plain down(act(up xn)), with biases and post-norm. y
 * may be xn. Returns the activations [T][F] on u (host: the statistics' truth). */
static const float *ffn_dense(struct run *r, int64_t l, const struct unit *u,
                              const struct pi_layer_w *W, struct slot *xn_s, struct slot *y_s) {
    struct pi_ctx *c = r->c;
    const struct pi_hparams *hp = c->hp;
    const int64_t T = r->T, F = hp->n_ff;
    const int gated = W->gate.data != NULL;
    const float *xn = in(r, xn_s, u->at);
    float *g = out(&r->g, u->at), *up = out(&r->u, u->at);
    if (gated) {
        const struct pi_weight *ws[2] = {&W->gate, &W->up};
        float *ys[2] = {g, up};                                     /* g, u [T][F] */
        matmul_same_x(u, ws, 2, xn, T, ys);
        bias(u, g, &W->b_gate, T);
        bias(u, up, &W->b_up, T);
    } else {
        u->be->matmul(u->b, &W->up, xn, T, g);
        bias(u, g, &W->b_up, T);
    }
    if ((c->gate_hist || c->probe_fn) && gated && u->at == HOST) {
        /* calibration and the probe: a = act(gate xn) on its own, then a * up (bamboo's
         * relu(up) as its activation does) */
        u->be->ffn_act(u->b, act_of(hp->ffn_act, 0), g, NULL, T * F);
        u->be->sync(u->b);
        if (c->gate_hist == PI_HIST_GATE)
            gate_hist(c, l, g, T * F);
        if (c->probe_fn)
            memcpy(c->probe_act, g, (size_t)(T * F) * sizeof(float));
        const int both = hp->ffn_act == PI_FFN_RELU_BOTH;
        for (int64_t i = 0; i < T * F; i++)
            g[i] *= both ? (up[i] > 0.0f ? up[i] : 0.0f) : up[i];
        if (c->gate_hist == PI_HIST_INTER)
            gate_hist(c, l, g, T * F);
    } else {
        u->be->ffn_act(u->b, act_of(hp->ffn_act, gated), g, gated ? up : NULL, T * F);
        if (c->gate_hist && !gated && u->at == HOST) { /* a plain FFN: its activation */
            u->be->sync(u->b);
            gate_hist(c, l, g, T * F);
        }
    }
    float *y = out(y_s, u->at);
    if (W->down.data) /* a dense file's, or a sparsified one's kept beside down_t */
        u->be->matmul(u->b, &W->down, g, T, y);                     /* y [T][E] */
    else
        u->be->matmul_t(u->b, &W->down_t, g, T, y);
    bias(u, y, &W->b_down, T);
    rms_inplace(u, y, &W->ffn_post_norm, hp->norm_eps, T);
    if (c->stats && u->at == HOST) {
        pi_layer_stats *ls = &c->stats->layer[l];
        uint64_t down_bytes = (uint64_t)W->down.n_out * W->down.row_bytes, rows = (uint64_t)F;
        if (!W->down.data) { /* matmul_t reads only rows some token needs */
            rows = rows_used(g, T, F);
            down_bytes = rows * W->down_t.row_bytes;
        }
        ls->rows_gate_up += (uint64_t)F;
        ls->rows_down += rows;
        ls->bytes_ffn += (uint64_t)F * (W->gate.row_bytes + W->up.row_bytes) + down_bytes;
    }
    return g;
}

/* The router's choice for each of T tokens: logits p [T][X] become the gating's
 * probabilities in place; sel/wt [T][K] the K largest (ties: the lower expert) and
 * their weights, renormalised to sum 1 (sum clamped to 2^-14, as llama.cpp) when
 * hp->moe_norm, times hp->moe_scale. Softmax-weight gating (gpt-oss) chooses by the
 * logits themselves and takes the softmax over the K chosen as their weights. A NaN
 * logit still selects K distinct experts; the NaN reaches the output, where the
 * step's checks report it. */
static void route(const struct pi_hparams *hp, float *p, int64_t T, int32_t *sel, float *wt) {
    const int64_t X = hp->n_expert, K = hp->n_expert_used;
    for (int64_t t = 0; t < T; t++) {
        float *z = p + t * X;
        if (hp->moe_gating == PI_GATING_SOFTMAX) {
            float mx = z[0];
            for (int64_t e = 1; e < X; e++)
                mx = z[e] > mx ? z[e] : mx;
            double sum = 0.0;
            for (int64_t e = 0; e < X; e++) {
                z[e] = expf(z[e] - mx);
                sum += z[e];
            }
            for (int64_t e = 0; e < X; e++)
                z[e] = (float)(z[e] / sum);
        } else if (hp->moe_gating == PI_GATING_SIGMOID) {
            for (int64_t e = 0; e < X; e++)
                z[e] = 1.0f / (1.0f + expf(-z[e]));
        } else if (hp->moe_gating == PI_GATING_SQRT_SOFTPLUS) {
            for (int64_t e = 0; e < X; e++)
                z[e] = sqrtf(z[e] > 20.0f ? z[e] : log1pf(expf(z[e])));
        } /* PI_GATING_SOFTMAX_WEIGHT: the logits as they are, softmax after the top k */
        int32_t *s = sel + t * K;
        float *w = wt + t * K;
        double sum = 0.0;
        for (int64_t j = 0; j < K; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < X; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j && !taken; i++)
                    taken = s[i] == e;
                if (!taken && (best < 0 || z[e] > z[best]))
                    best = e;
            }
            s[j] = (int32_t)best;
            w[j] = z[best];
            sum += w[j];
        }
        if (hp->moe_gating == PI_GATING_SOFTMAX_WEIGHT) { /* w[0] is the largest */
            sum = 0.0;
            for (int64_t j = 0; j < K; j++) {
                w[j] = expf(w[j] - z[s[0]]);
                sum += w[j];
            }
            for (int64_t j = 0; j < K; j++)
                w[j] = (float)(w[j] / sum);
            sum = 1.0;
        }
        const double div = hp->moe_norm ? (sum > 6.103515625e-5 ? sum : 6.103515625e-5) : 1.0;
        for (int64_t j = 0; j < K; j++)
            w[j] = (float)(w[j] / div * hp->moe_scale);
    }
}

/* Expert e's row of an expert bias tensor (struct pi_experts; data NULL: none): F32
 * (type 0), F16 or BF16, as desc.c admits. */
static struct pi_vector expert_bias(const struct pi_vector *v0, int64_t e) {
    struct pi_vector v = *v0;
    if (v.data)
        v.data = (const uint8_t *)v0->data + (size_t)(e * v0->n) * (v0->type == 0 ? 4u : 2u);
    return v;
}

/* Expert e's view of an expert tensor (struct pi_experts). */
static struct pi_weight expert(const struct pi_weight *w0, size_t stride, int64_t e) {
    struct pi_weight w = *w0;
    w.data = (const uint8_t *)w0->data + (size_t)e * stride;
    return w;
}

/* One expert on unit u: y [n][E] = down(act(gate xin, up xin)) for xin [n][E], with
 * scratch g, up [n][Fe] on u; queued (the caller syncs before reading y). x holds the
 * expert tensors in u's memory, `e` is the expert's index there. A sparsified file's
 * experts (x->down_t, transposed) in threshold mode: a = act(gate xin) and m = a *
 * (up xin) kept where |a| (teal: |m|) > t_l, the layer's threshold, and matmul_t reads
 * only the down rows of neurons some token kept; on the host a "cats" file's up is
 * computed only for those neurons too (on a device the whole up, then ffn_act_thr:
 * the same kept values). Dense mode: every neuron's m. Calibration (gate_histogram,
 * host): a and m counted like a dense layer's, one threshold per layer for all its
 * experts. Returns the rows of up read. */
static int64_t expert_ffn(struct pi_ctx *c, int64_t l, const struct unit *u,
                       const struct pi_experts *x, int64_t e, enum pi_act act, const float *xin,
                       int64_t n, int64_t Fe, float *g, float *up, float *y) {
    const struct pi_weight wg = expert(&x->gate, x->gate_stride, e);
    const struct pi_weight wu = expert(&x->up, x->up_stride, e);
    /* gpt-oss's expert biases, where the file has them (a device's: the placed
     * experts' rows, packed like their weights, hybrid.c) */
    const struct pi_vector bg = expert_bias(&x->b_gate, e), bu = expert_bias(&x->b_up, e);
    const struct pi_vector bd = expert_bias(&x->b_down, e);
    const enum pi_act act1 = act_of(c->hp->ffn_act, 0);
    const int thr_mode = x->down_t.data && c->mode == PI_SPARSE_THRESHOLD;
    const float thr = c->layer_thr[l];
    int64_t up_rows = Fe;
    u->be->matmul(u->b, &wg, xin, n, g);                             /* g [n][Fe] */
    if (bg.data)
        u->be->add_rows(u->b, g, &bg, n);
    if (thr_mode && !c->hp->teal && u->at == HOST) {
        u->be->ffn_act(u->b, act1, g, NULL, n * Fe);                 /* a = act(g) */
        u->be->sync(u->b);
        const int64_t k = select_abs(c, g, n, Fe, thr, NULL);
        /* up for the kept neurons only (other rows of up stay unread) */
        up_rows = k > (int64_t)(PI_SPARSE_DENSE_UNION * (double)Fe) ? Fe : k;
        if (up_rows == Fe)
            u->be->matmul(u->b, &wu, xin, n, up);
        else if (k)
            u->be->matmul_rows(u->b, &wu, xin, n, c->idx, k, up);
        if (bu.data)
            u->be->add_rows(u->b, up, &bu, n);
        u->be->sync(u->b);
        for (int64_t i = 0; i < n * Fe; i++)
            g[i] = fabsf(g[i]) > thr ? g[i] * up[i] : 0.0f;
    } else {
        u->be->matmul(u->b, &wu, xin, n, up);                        /* up [n][Fe] */
        if (bu.data)
            u->be->add_rows(u->b, up, &bu, n);
        if (thr_mode) {
            u->be->ffn_act_thr(u->b, act1, g, up, n * Fe, thr, c->hp->teal);
        } else if (c->gate_hist && u->at == HOST) { /* a, then m = a * up */
            u->be->ffn_act(u->b, act1, g, NULL, n * Fe);
            u->be->sync(u->b);
            if (c->gate_hist == PI_HIST_GATE)
                gate_hist(c, l, g, n * Fe);
            for (int64_t i = 0; i < n * Fe; i++)
                g[i] *= up[i];
            if (c->gate_hist == PI_HIST_INTER)
                gate_hist(c, l, g, n * Fe);
        } else {
            u->be->ffn_act(u->b, act, g, up, n * Fe);
        }
    }
    if (x->down_t.data) {
        const struct pi_weight wt = expert(&x->down_t, x->down_t_stride, e);
        u->be->matmul_t(u->b, &wt, g, n, y);                         /* y [n][E] */
    } else {
        const struct pi_weight wd = expert(&x->down, x->down_stride, e);
        u->be->matmul(u->b, &wd, g, n, y);                           /* y [n][E] */
    }
    if (bd.data)
        u->be->add_rows(u->b, y, &bd, n);
    return up_rows;
}

/* The shared expert of W on unit u: y [T][E] = down(act(gate xn, up xn)) and, where
 * it has a gate, that gate's logits p [T][1]; queued. */
static void shared_ffn(const struct unit *u, const struct pi_layer_w *W, enum pi_act act,
                       const float *xn, int64_t T, int64_t Fs, float *g, float *up, float *y,
                       float *p) {
    u->be->matmul(u->b, &W->sh_gate, xn, T, g);                      /* g [T][Fs] */
    u->be->matmul(u->b, &W->sh_up, xn, T, up);
    u->be->ffn_act(u->b, act, g, up, T * Fs);
    u->be->matmul(u->b, &W->sh_down, g, T, y);                       /* y [T][E] */
    if (W->sh_gate_inp.data)
        u->be->matmul(u->b, &W->sh_gate_inp, xn, T, p);              /* p [T][1] */
}

/* xn [T][E] (slot, host) = the mixture-of-experts FFN of layer l on xn = ffn_norm(x):
 * the router picks each token's experts; each expert that some token chose runs once,
 * as a matrix product over its tokens (gathered), so a decode step reads only the
 * chosen experts' weights; the outputs are summed with the router's weights; then the
 * shared expert (times its sigmoid gate) is added.
 * With a device (hybrid.h, pi_dev_layer): the router and shared expert run there when
 * the layer's FFN-norm part is placed, and the device's experts run there on their
 * gathered rows, queued before the host computes its own experts. Every expert output
 * is kept ([T*K][E], by bucket) and summed at the end per token in ascending expert
 * order, whichever unit computed it: with the same kernels on both units (the CPU as
 * the device) the result is the CPU-only one bit for bit, at any placement. */
static void ffn_moe(struct run *r, int64_t l) {
    struct pi_ctx *c = r->c;
    struct pi_hybrid *h = c->hy;
    const struct pi_hparams *hp = c->hp;
    const struct unit *host = &r->host, *dev = &r->dev;
    const struct pi_layer_w *W = &c->layers[l];
    const struct pi_dev_layer *D = h ? &h->layers[l] : NULL;
    const struct pi_experts *x = &W->exps;
    const int64_t T = r->T, E = hp->n_embd, X = hp->n_expert, K = hp->n_expert_used;
    const int64_t Fe = hp->n_ff_exp, Fs = hp->n_ff_shexp;
    const enum pi_act act = act_of(hp->ffn_act, 1);
    const int dense_dev = D && D->moe_dense;               /* router, shared expert */
    const int32_t *slot = D && D->n_dev_exp ? D->exp_slot : NULL; /* expert -> device */
    const float *xn = in(r, &r->xn, HOST);
    const float *xd = dense_dev ? in(r, &r->xn, DEV) : NULL;
    int st = PI_OK;
    if (dense_dev) {
        dev->be->matmul(dev->b, &D->w.router, xd, T, h->moe_prob);   /* [T][X] */
        if (D->w.router_b.data)
            dev->be->add_rows(dev->b, h->moe_prob, &D->w.router_b, T);
        st = dev->be->download(dev->b, c->moe_prob, h->moe_prob,
                               (size_t)(T * X) * sizeof(float));
    } else {
        host->be->matmul(host->b, &W->router, xn, T, c->moe_prob);   /* [T][X] */
        if (W->router_b.data)
            host->be->add_rows(host->b, c->moe_prob, &W->router_b, T);
        host->be->sync(host->b);
    }
    route(hp, c->moe_prob, T, c->moe_sel, c->moe_wt);
    /* bucket the (token, choice) pairs by expert, tokens ascending within one */
    int64_t *start = c->moe_start, *fill = c->moe_fill;
    memset(start, 0, (size_t)(X + 1) * sizeof *start);
    for (int64_t i = 0; i < T * K; i++)
        start[c->moe_sel[i] + 1]++;
    for (int64_t e = 0; e < X; e++) {
        start[e + 1] += start[e];
        fill[e] = start[e];
    }
    for (int64_t i = 0; i < T * K; i++)
        c->moe_list[fill[c->moe_sel[i]]++] = (int32_t)i;
    uint64_t experts_run = 0, up_rows = 0, down_rows = 0;
    /* the device's experts first: their rows gathered (staged in moe_ye, which upload
     * no longer needs when it returns), packed in ascending expert order */
    int64_t nd = 0;
    if (slot) {
        for (int64_t e = 0; e < X; e++)
            for (int64_t i = start[e]; slot[e] >= 0 && i < start[e + 1]; i++, nd++)
                memcpy(c->moe_ye + nd * E, xn + (c->moe_list[i] / K) * E,
                       (size_t)E * sizeof(float));
        if (nd) {
            int su = dev->be->upload(dev->b, h->moe_xg, c->moe_ye,
                                     (size_t)(nd * E) * sizeof(float));
            st = st < 0 ? st : su;
        }
        for (int64_t e = 0, at = 0; e < X; e++) {
            const int64_t n = start[e + 1] - start[e];
            if (!n || slot[e] < 0)
                continue;
            up_rows += (uint64_t)expert_ffn(c, l, dev, &D->w.exps, slot[e], act,
                                            h->moe_xg + at * E, n, Fe, h->moe_g + at * Fe,
                                            h->moe_u + at * Fe, h->moe_ye + at * E);
            at += n;
            experts_run++;
            down_rows += (uint64_t)Fe; /* not counted there: an upper bound */
        }
    }
    if (W->sh_up.data && dense_dev)
        shared_ffn(dev, &D->w, act, xd, T, Fs, h->moe_g, h->moe_u, h->moe_ysh, h->moe_prob);
    /* the host's experts, into their buckets' rows of moe_ye */
    for (int64_t e = 0; e < X; e++) {
        const int64_t n = start[e + 1] - start[e];
        if (!n || (slot && slot[e] >= 0))
            continue;
        const int32_t *list = c->moe_list + start[e];
        /* every token chose e (an expert is chosen at most once per token): xn as is */
        const float *xin = xn;
        if (n < T) {
            for (int64_t i = 0; i < n; i++)
                memcpy(c->moe_xg + i * E, xn + (list[i] / K) * E, (size_t)E * sizeof(float));
            xin = c->moe_xg;
        }
        up_rows += (uint64_t)expert_ffn(c, l, host, x, e, act, xin, n, Fe, c->g, c->u,
                                        c->moe_ye + start[e] * E);
        host->be->sync(host->b);
        experts_run++;
        /* the down rows read: a transposed down's, only those of kept neurons */
        down_rows += c->stats && x->down_t.data ? rows_used(c->g, n, Fe) : (uint64_t)Fe;
    }
    const float *ysh = c->moe_yg; /* the shared expert's output [T][E] */
    if (W->sh_up.data && !dense_dev) {
        shared_ffn(host, W, act, xn, T, Fs, c->g, c->u, c->moe_yg, c->moe_prob);
        host->be->sync(host->b);
    }
    /* the device's results (the layer's one wait for it) */
    if (nd) {
        int sd = dev->be->download(dev->b, h->moe_ydev, h->moe_ye,
                                   (size_t)(nd * E) * sizeof(float));
        st = st < 0 ? st : sd;
    }
    if (W->sh_up.data && dense_dev) {
        int sd = dev->be->download(dev->b, h->yd_host, h->moe_ysh, (size_t)(T * E) * sizeof(float));
        if (sd >= 0 && W->sh_gate_inp.data)
            sd = dev->be->download(dev->b, c->moe_prob, h->moe_prob, (size_t)T * sizeof(float));
        st = st < 0 ? st : sd;
        ysh = h->yd_host;
    }
    if (st < 0 && r->st >= 0)
        r->st = st;
    /* the sum, per token in ascending expert order */
    float *acc = c->moe_acc;
    memset(acc, 0, (size_t)(T * E) * sizeof *acc);
    for (int64_t e = 0, at = 0; e < X; e++) {
        const int64_t n = start[e + 1] - start[e];
        if (!n)
            continue;
        const int on_dev = slot && slot[e] >= 0;
        const float *ye = on_dev ? h->moe_ydev + at * E : c->moe_ye + start[e] * E;
        at += on_dev ? n : 0;
        const int32_t *list = c->moe_list + start[e];
        for (int64_t i = 0; i < n; i++) {
            const float w = c->moe_wt[list[i]];
            float *a = acc + (list[i] / K) * E;
            const float *v = ye + i * E;
            for (int64_t j = 0; j < E; j++)
                a[j] += w * v[j];
        }
    }
    if (W->sh_up.data) {
        for (int64_t t = 0; t < T; t++) {
            const float s = W->sh_gate_inp.data ? 1.0f / (1.0f + expf(-c->moe_prob[t])) : 1.0f;
            float *a = acc + t * E;
            const float *v = ysh + t * E;
            for (int64_t j = 0; j < E; j++)
                a[j] += s * v[j];
        }
    }
    memcpy(out(&r->xn, HOST), acc, (size_t)(T * E) * sizeof *acc);
    if (c->stats) {
        double *nsel = pi_stats_expert_row(c->stats, l, PI_EXPERT_SELECTED);
        double *mass = pi_stats_expert_row(c->stats, l, PI_EXPERT_WEIGHT);
        for (int64_t i = 0; i < T * K; i++) {
            nsel[c->moe_sel[i]] += 1.0;
            mass[c->moe_sel[i]] += (double)c->moe_wt[i];
        }
        pi_layer_stats *ls = &c->stats->layer[l];
        ls->tokens_observed += (uint64_t)T; /* a MoE layer: tokens routed */
        uint64_t bytes = (uint64_t)W->router.n_out * W->router.row_bytes +
                         experts_run * (uint64_t)Fe * x->gate.row_bytes +
                         up_rows * x->up.row_bytes +
                         (x->down_t.data ? down_rows * x->down_t.row_bytes
                                         : experts_run * (uint64_t)E * x->down.row_bytes);
        if (W->sh_up.data)
            bytes += (uint64_t)W->sh_gate.n_out * W->sh_gate.row_bytes +
                     (uint64_t)W->sh_up.n_out * W->sh_up.row_bytes +
                     (uint64_t)W->sh_down.n_out * W->sh_down.row_bytes +
                     W->sh_gate_inp.row_bytes;
        ls->bytes_ffn += bytes;
        ls->rows_gate_up += experts_run * (uint64_t)Fe;
        ls->rows_down += down_rows;
    }
}

/* The unit where layer l + 1 (or the output) reads the residual stream. */
static int next_at(const struct run *r, int64_t l) {
    const struct pi_ctx *c = r->c;
    if (!c->hy)
        return HOST;
    const int dev = l + 1 < c->hp->n_layer ? c->exec[l + 1].attn_dev : c->hy->plan->pl.output;
    return dev ? DEV : HOST;
}

/* Whether entry e's logits are computed (never for a context made for embeddings only). */
static int wants_logits(const struct pi_ctx *c, const pi_batch_entry *e) {
    return e->logits && c->embd_mode != PI_EMBD_ONLY;
}

/* One step of T <= n_batch entries at positions pos[0..T). The logits of the entries
 * that ask for them go to consecutive rows of `rows` [..][n_vocab] (host memory); with
 * embeddings, every entry's final hidden state to hs [T][n_embd] (host memory). */
static int step(struct pi_ctx *c, const pi_batch_entry *e, const int32_t *pos, int64_t T,
                float *rows, float *hs) {
    const struct pi_hparams *hp = c->hp;
    struct pi_hybrid *hy = c->hy;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    const int64_t qd = hp->n_head * hp->head_dim_k, kd = hp->n_head_kv * hp->head_dim_k;
    const int64_t vd = hp->n_head_kv * hp->head_dim_v, ad = hp->n_head * hp->head_dim_v;
    const int parallel = (hp->info->flags & PI_AF_PARALLEL) != 0;
    struct run r = {.c = c, .T = T, .e = e, .pos = pos, .host = {c->be, c->b, HOST}};
    if (hy)
        r.dev = (struct unit){hy->be, hy->b, DEV};
    slot_init(&r.x, c->x, hy ? hy->x : NULL, E);
    slot_init(&r.xn, c->xn, hy ? hy->xn : NULL, E);
    slot_init(&r.ya, c->ya, hy ? hy->ya : NULL, E);
    slot_init(&r.q, c->q, hy ? hy->q : NULL, qd);
    slot_init(&r.k, c->k, hy ? hy->k : NULL, kd);
    slot_init(&r.v, c->v, hy ? hy->v : NULL, vd);
    slot_init(&r.att, c->att, hy ? hy->att : NULL, ad);
    slot_init(&r.g, c->g, hy ? hy->gd : NULL, F);
    slot_init(&r.u, c->u, hy ? hy->ud : NULL, F);
    slot_init(&r.score, c->score, hy ? hy->score : NULL, F);
    slot_init(&r.hid, c->hid, hy ? hy->hid : NULL, c->model->desc.max_rank);

    for (int64_t i = 0; i < T; i++)
        c->step_tok[i] = e[i].token;
    float *x0 = out(&r.x, HOST);
    c->be->get_rows(c->b, &c->tok_embd, c->step_tok, T, x0);        /* x [T][E] */
    if (hp->embd_scale != 1.0f)
        c->be->scale(c->b, x0, hp->embd_scale, T * E);
    if (c->pos_embd.data) { /* learned positions: x[t] += pos_embd[pos[t] + offset] */
        for (int64_t i = 0; i < T; i++)
            c->step_tok[i] = pos[i] + PI_POS_EMBD_OFFSET;
        c->be->get_rows(c->b, &c->pos_embd, c->step_tok, T, c->xn); /* [T][E] */
        c->be->add(c->b, x0, c->xn, T * E);
    }
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer_w *L = &c->layers[l];
        const struct pi_layer_exec *X = &c->exec[l];
        const struct pi_dev_layer *D = hy ? &hy->layers[l] : NULL;
        const uint64_t t0 = now(c);
        /* attention: ao = attn(norm_attn(x)); sequential blocks add it at once */
        const struct unit *a = unit(&r, X->attn_dev);
        norm(&r, a, a->at == DEV ? &D->w.norm_attn : &L->norm_attn, &r.x, &r.xn);
        struct slot *ao = parallel ? &r.ya : &r.xn;
        attention_block(&r, l, ao);
        if (!parallel) {
            a->be->add(a->b, inout(&r, &r.x, a->at), in(&r, ao, a->at), T * E); /* x += attn */
            if (c->check_layers)
                PI_TRY(check_block(&r, &r.x, e, pos, l, "attention"));
        }
        const uint64_t t1 = now(c);
        /* predictor: s [T][F] from the residual x, before ffn_norm */
        const int diag = c->stats_level == PI_STATS_DIAGNOSTIC;
        const int have_pred = hp->predictors && (c->mode == PI_SPARSE_PREDICTOR || diag);
        if (have_pred) {
            predict(&r, unit(&r, X->pred_dev), L, D);
            if (c->check_layers)
                PI_TRY(check_block(&r, &r.score, e, pos, l, "predictor"));
            if (c->stats)
                c->stats->layer[l].bytes_predictor +=
                    (uint64_t)(L->fc1.n_out * L->fc1.row_bytes + L->fc2.n_out * L->fc2.row_bytes);
        }
        const uint64_t t2 = now(c);
        /* feed-forward: xn = norm_ffn(x) (a parallel block without one keeps the
         * attention's input), then y = ffn(xn) */
        if (L->norm_ffn.w.data) {
            const struct unit *nu = unit(&r, X->norm_dev);
            norm(&r, nu, nu->at == DEV ? &D->w.norm_ffn : &L->norm_ffn, &r.x, &r.xn);
        }
        const int64_t n_dev = X->ffn_whole_dev ? 0 : X->n_dev;
        const int host_part = !X->ffn_whole_dev && n_dev < F;
        if (host_part || c->stats) { /* the host's inputs, fetched before the device is busy */
            in(&r, &r.xn, HOST);
            if (have_pred)
                in(&r, &r.score, HOST);
        }
        if (n_dev)
            ffn_device(&r, l, D);
        const float *truth = NULL;
        const int32_t *tidx = NULL;
        int64_t tn = 0;
        if (X->ffn_whole_dev) {
            ffn_dense(&r, l, &r.dev, &D->w, &r.xn, &r.xn);
        } else if (host_part) {
            float *y = n_dev ? hy->yc_host : c->xn; /* the host's FFN output */
            if (c->mode == PI_SPARSE_PREDICTOR && diag) {
                true_activations(c, l, L, T);
                truth = c->gfull;
            }
            if (L->router.data) {
                ffn_moe(&r, l);
            } else if (c->mode == PI_SPARSE_DENSE && !n_dev) {
                truth = ffn_dense(&r, l, &r.host, L, &r.xn, &r.xn);
                if (c->probe_fn) /* x: the predictor input, before the residual add */
                    c->probe_fn(c->probe_user, l, T, c->x, L->gate.data ? c->probe_act : truth,
                                truth);
            } else {
                const int64_t n = ffn_sparse(c, l, T, n_dev ? D->on_dev : NULL, y);
                if (!n_dev) {
                    /* a post-FFN norm (Gemma 2/3) on the whole output; a split
                     * layer's, once its two parts are added (below) */
                    rms_inplace(&r.host, y, &L->ffn_post_norm, hp->norm_eps, T);
                    out(&r.xn, HOST);
                }
                if ((c->mode == PI_SPARSE_ORACLE || c->mode == PI_SPARSE_THRESHOLD) && !n_dev) {
                    /* g valid on the selected rows */
                    truth = c->g;
                    tidx = c->idx;
                    tn = n;
                }
            }
            c->be->sync(c->b);
        }
        /* x += ffn (+ a parallel block's attention), where the next layer wants x */
        const int at = next_at(&r, l);
        const struct unit *nx = unit(&r, at == DEV);
        if (!n_dev) {
            if (c->trace_fn && !X->ffn_whole_dev)
                c->trace_fn(c->trace_user, l, T, c->xn, have_pred ? c->score : NULL);
            float *x = inout(&r, &r.x, at);
            nx->be->add(nx->b, x, in(&r, &r.xn, at), T * E);
        } else if (L->ffn_post_norm.data) {
            /* a split layer with a post-FFN norm (a sparsified Gemma file): the device
             * part comes to the host, the host part is added, the sum is normed there,
             * then added to x where the next layer wants it */
            int st = hy->be->download(hy->b, hy->yd_host, hy->yd, (size_t)(T * E) * sizeof(float));
            r.st = r.st < 0 ? r.st : st;
            if (host_part)
                c->be->add(c->b, hy->yd_host, hy->yc_host, T * E);
            rms_inplace(&r.host, hy->yd_host, &L->ffn_post_norm, hp->norm_eps, T);
            c->be->sync(c->b);
            if (at == DEV) {
                st = hy->be->upload(hy->b, hy->yc, hy->yd_host, (size_t)(T * E) * sizeof(float));
                r.st = r.st < 0 ? r.st : st;
                hy->be->add(hy->b, inout(&r, &r.x, DEV), hy->yc, T * E);
            } else {
                c->be->add(c->b, inout(&r, &r.x, HOST), hy->yd_host, T * E);
            }
        } else if (at == DEV) { /* device part + host part */
            float *x = inout(&r, &r.x, DEV);
            hy->be->add(hy->b, x, hy->yd, T * E);
            if (host_part) {
                int st = hy->be->upload(hy->b, hy->yc, hy->yc_host, (size_t)(T * E) * sizeof(float));
                r.st = r.st < 0 ? r.st : st;
                hy->be->add(hy->b, x, hy->yc, T * E);
            }
        } else {
            int st = hy->be->download(hy->b, hy->yd_host, hy->yd, (size_t)(T * E) * sizeof(float));
            r.st = r.st < 0 ? r.st : st;
            float *x = inout(&r, &r.x, HOST);
            c->be->add(c->b, x, hy->yd_host, T * E);
            if (host_part)
                c->be->add(c->b, x, hy->yc_host, T * E);
        }
        if (parallel)
            nx->be->add(nx->b, inout(&r, &r.x, at), in(&r, &r.ya, at), T * E);
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
     * normalized into consecutive rows of xn, then one product (and the final
     * soft-cap) */
    const struct unit *o = unit(&r, hy && hy->plan->pl.output);
    const float *x = r.st >= 0 ? in(&r, &r.x, o->at) : NULL;
    float *xn = out(&r.xn, o->at);
    const struct pi_norm_w *onorm = o->at == DEV ? &hy->output_norm : &c->output_norm;
    const int64_t V = hp->n_vocab;
    /* embeddings: the hidden states hs [T][E] = output_norm(x), the LM head's input,
     * computed where the output is (the logits below normalize their rows again: the
     * same op on the same rows, so the same values) */
    if (hs && x && o->at == DEV) {
        norm_rows(o, hp, onorm, x, T, xn);
        int st = o->be->download(o->b, hs, xn, (size_t)(T * E) * sizeof(float));
        r.st = r.st < 0 ? r.st : st;
    } else if (hs && x) {
        norm_rows(o, hp, onorm, x, T, hs);
    }
    for (int64_t i = 0, n = 0; x && i <= T; i++) {
        if (i < T && wants_logits(c, &e[i])) {
            norm_rows(o, hp, onorm, x + i * E, 1, xn + n * E);
            n++;
        }
        if (n == PI_LOGIT_CHUNK || (i == T && n)) {
            float *lg = o->at == DEV ? hy->logits : rows;
            o->be->matmul(o->b, o->at == DEV ? &hy->output : &c->output, xn, n, lg);
            if (hp->final_softcap > 0.0f)
                o->be->softcap(o->b, lg, hp->final_softcap, n * V);
            if (o->at == DEV) {
                int st = o->be->download(o->b, rows, hy->logits, (size_t)(n * V) * sizeof(float));
                r.st = r.st < 0 ? r.st : st;
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

/* Add the hidden states hs [n][E] of a successful batch to their sequences' pooled
 * state; an entry at position 0 starts its sequence's afresh. */
static void pool_add(struct pi_ctx *c, const pi_batch_entry *e, const int32_t *pos, int64_t n,
                     const float *hs) {
    const int64_t E = c->hp->n_embd;
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = e[i].seq;
        const float *h = hs + i * E;
        double *sum = c->pool_sum + s * E;
        if (pos[i] == 0) {
            c->pool_n[s] = 0;
            memset(sum, 0, (size_t)E * sizeof *sum);
            memcpy(c->pool_first + s * E, h, (size_t)E * sizeof *h);
        }
        for (int64_t j = 0; j < E; j++)
            sum[j] += (double)h[j];
        memcpy(c->pool_last + s * E, h, (size_t)E * sizeof *h);
        if (c->pool_n[s] >= 0)
            c->pool_n[s]++;
    }
}

/* A step, its device ops in a graph region (backend.h) when the context allows: steps
 * of up to PI_GRAPHS_MAX_TOKENS tokens, no layer overlapping host and device work, and
 * nothing that reads the device between ops (statistics, layer checks, the trace).
 * The region's key is the step's shape: its tokens, the logit rows and whether hidden
 * states are kept. When the device could not run a segment as a graph, the step is run
 * again op by op (what it wrote, the KV cache at these positions included, is written
 * again from the same inputs) and the context submits op by op from then on. */
static int step_submit(struct pi_ctx *c, const pi_batch_entry *e, const int32_t *pos, int64_t T,
                       float *rows, float *hs) {
    struct pi_hybrid *hy = c->hy;
    int64_t n_rows = 0;
    for (int64_t i = 0; i < T; i++)
        n_rows += wants_logits(c, &e[i]);
    const uint64_t key = (uint64_t)T | (uint64_t)n_rows << 16 | (uint64_t)(hs != NULL) << 32;
    const int region = c->graphs && c->graph_layers && T <= PI_GRAPHS_MAX_TOKENS && !c->stats &&
                       !c->check_layers && !c->trace_fn && hy->be->graph_begin(hy->b, key);
    int st = step(c, e, pos, T, rows, hs);
    if (!region)
        return st;
    if (hy->be->graph_end(hy->b) == 0 || st == PI_ERR_ABORTED)
        return st;
    c->graphs = 0;
    pi_error_clear(&c->err);
    return step(c, e, pos, T, rows, hs);
}

int pi_forward(struct pi_ctx *c, const pi_batch_entry *e, const int32_t *pos, int64_t n) {
    const int spare = !c->cur;
    const int64_t V = c->hp->n_vocab, E = c->hp->n_embd;
    float *rows = c->rows[spare];
    float *hs = c->embd_mode != PI_EMBD_OFF ? c->hs[spare] : NULL;
    int32_t *row_of = c->row_of[spare];
    int64_t n_rows = 0;
    for (int64_t i = 0; i < n; i++)
        row_of[i] = wants_logits(c, &e[i]) ? (int32_t)n_rows++ : -1;
    for (int64_t done = 0; done < n;) {
        const int64_t T = n - done < c->n_batch ? n - done : c->n_batch;
        int64_t first = 0;
        while (first < T && row_of[done + first] < 0)
            first++;
        /* no row asked in this step: rows may be NULL (a batch without logits) */
        float *dst = first < T ? rows + (size_t)row_of[done + first] * (size_t)V : rows;
        PI_TRY(step_submit(c, e + done, pos + done, T, dst, hs ? hs + done * E : NULL));
        done += T;
    }
    /* the hidden states are checked too: without logits (PI_EMBD_ONLY, or entries that
     * ask for none) nothing else would catch a NaN */
    const int64_t bad = hs ? first_nonfinite(hs, n * E) : -1;
    if (bad >= 0)
        PI_FAIL(&c->err, PI_ERR_NUMERIC, "the final hidden state of entry %lld (sequence %d, "
                "position %d) holds %s; checking every layer (check_numerics) finds where",
                (long long)(bad / E), (int)e[bad / E].seq, (int)pos[bad / E],
                isnan(hs[bad]) ? "NaN" : "infinity");
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
    if (hs)
        pool_add(c, e, pos, n, hs);
    if (n_rows)
        memcpy(c->logits, rows + (size_t)(n_rows - 1) * (size_t)V, (size_t)V * sizeof(float));
    return PI_OK;
}
