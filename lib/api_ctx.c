/* api_ctx.c -- public context functions: argument checks, weight views, scratch and
 * KV cache set-up, then delegation to infer/forward.c. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "infer/ctx.h"
#include "runtime/fp16.h"
#include "runtime/hadamard.h"
#include "runtime/quantize.h"
#include "runtime/types.h"
#include "util/os.h"
#include "util/params.h"

/* The first published pi_ctx_params ended after f32_activations (40 bytes with its
 * padding on 64-bit targets); later fields are read only when struct_size covers them. */
#define CTX_PARAMS_MIN_SIZE (offsetof(pi_ctx_params, f32_activations) + sizeof(uint32_t))
#define MAX_CTX (1 << 20)
#define DEFAULT_BATCH 256
#define MAX_THREADS 512
#define MAX_SEQ 256

int pi_ctx_default_params(pi_ctx_params *p) {
    if (!p)
        return PI_ERR_INVALID_ARG;
    memset(p, 0, sizeof *p);
    p->struct_size = (uint32_t)sizeof *p;
    p->device_budget = PI_DEVICE_BUDGET_AUTO;
    p->sparse_threshold_scale = 1.0f;
    return PI_OK;
}

static int take_params(const pi_ctx_params *in, pi_ctx_params *out, struct pi_error *err) {
    pi_ctx_default_params(out);
    return pi_params_take(in, out, sizeof *out, CTX_PARAMS_MIN_SIZE, "pi_ctx_params", err);
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

void pi_ctx_destroy(pi_ctx *c) {
    if (!c)
        return;
    struct pi_allocator a = c->alloc;
    pi_hybrid_destroy(c->hy);
    if (c->b) {
        if (c->kv)
            c->be->kv_destroy(c->b, c->kv);
        c->be->destroy(c->b);
    }
    float *bufs[] = {c->x,      c->xn,    c->q,   c->k,     c->v,     c->att, c->g,
                     c->u,      c->logits, c->score, c->hid, c->gfull, c->ufull, c->ya};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        pi_free(&a, bufs[i]);
    pi_free(&a, c->idx);
    pi_free(&a, c->mark);
    pi_free(&a, c->probe_act);
    for (int i = 0; i < 2; i++) {
        pi_free(&a, c->rows[i]);
        pi_free(&a, c->row_of[i]);
        pi_free(&a, c->hs[i]);
    }
    pi_free(&a, c->pool_sum);
    pi_free(&a, c->pool_first);
    pi_free(&a, c->pool_last);
    pi_free(&a, c->pool_n);
    pi_free(&a, c->seq_len);
    pi_free(&a, c->next_pos);
    pi_free(&a, c->step_tok);
    pi_free(&a, c->moe_prob);
    pi_free(&a, c->moe_wt);
    pi_free(&a, c->moe_sel);
    pi_free(&a, c->moe_list);
    pi_free(&a, c->moe_start);
    pi_free(&a, c->moe_fill);
    pi_free(&a, c->moe_xg);
    pi_free(&a, c->moe_yg);
    pi_free(&a, c->moe_acc);
    pi_free(&a, c->moe_ye);
    pi_free(&a, c->layer_thr);
    pi_stats_destroy(c->stats);
    pi_free(&a, c->layers);
    pi_free(&a, c->exec);
    pi_free(&a, c->rope_factors);
    pi_free(&a, c->sinks);
    pi_free(&a, c);
}

/* THRESHOLD mode's per-layer thresholds (the override, the file's, or zeros) times
 * the scale, and whether gate histograms are collected. */
static int setup_thresholds(struct pi_ctx *c, const pi_ctx_params *p) {
    const struct pi_hparams *hp = c->hp;
    const int64_t L = hp->n_layer;
    c->layer_thr = pi_calloc(&c->alloc, (size_t)L, sizeof *c->layer_thr);
    if (!c->layer_thr)
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory");
    c->gate_hist = p->stats == PI_STATS_OFF ? 0
                   : p->gate_histogram == PI_HIST_INTER ? PI_HIST_INTER
                   : p->gate_histogram                  ? PI_HIST_GATE
                                                        : 0;
    if (c->gate_hist && p->device != PI_DEVICE_NONE)
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "gate_histogram needs a CPU-only context");
    if (c->gate_hist && c->model->desc.n_moe_layers && !pi_ffn_act_thresholdable(hp->ffn_act))
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "gate_histogram of experts needs a SiLU, GELU "
                "or ReLU gate (this model's experts have no act(gate) of their own)");
    if (c->gate_hist && (hp->info->flags & PI_AF_GATED))
        for (int64_t l = 0; l < L; l++)
            if (!c->model->desc.layers[l].router && !c->model->desc.layers[l].ffn_gate &&
                !c->model->desc.layers[l].up_fused)
                PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "gate_histogram: layer %lld has no "
                        "ffn_gate (separate or fused with ffn_up)", (long long)l);
    if (p->sparse_thresholds && p->n_sparse_thresholds != (uint64_t)L)
        PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "pi_ctx_params: %llu sparse_thresholds for a "
                "model of %lld layers", (unsigned long long)p->n_sparse_thresholds,
                (long long)L);
    /* THRESHOLD mode applies them; PREDICTOR mode of a sparsified file counts the
     * neurons above them as truly active (diagnostic statistics) */
    if (c->mode != PI_SPARSE_THRESHOLD && !(c->mode == PI_SPARSE_PREDICTOR && hp->sparsified)) {
        c->thr_source = PI_THRESHOLDS_NONE;
        return PI_OK;
    }
    const struct gguf_kv *kv = c->model->desc.sparsify_thresholds;
    c->thr_source = p->sparse_thresholds ? PI_THRESHOLDS_PARAMS
                    : kv                 ? PI_THRESHOLDS_FILE
                                         : PI_THRESHOLDS_ZERO;
    for (int64_t l = 0; l < L; l++) {
        double v = 0.0;
        if (p->sparse_thresholds)
            v = p->sparse_thresholds[l];
        else if (kv && gguf_kv_float(&c->model->gguf, kv, (uint64_t)l, &v) < 0)
            PI_FAIL(&c->err, PI_ERR_INTERNAL, "cannot read the file's thresholds");
        if (!isfinite(v))
            PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "pi_ctx_params: sparse_thresholds[%lld] is "
                    "not finite", (long long)l);
        c->layer_thr[l] = (float)(v * (double)p->sparse_threshold_scale);
    }
    return PI_OK;
}

/* Mode, threshold, statistics and the sparse path's scratch. */
static int setup_sparse(struct pi_ctx *c, const pi_ctx_params *p) {
    const struct pi_hparams *hp = c->hp;
    const struct pi_allocator *a = &c->alloc;
    const int64_t F = hp->n_ff, B = c->n_batch;
    c->mode = (int)p->sparse_mode;
    if (c->mode == PI_SPARSE_AUTO)
        c->mode = hp->predictors   ? PI_SPARSE_PREDICTOR
                  : hp->sparsified ? PI_SPARSE_THRESHOLD
                                   : PI_SPARSE_DENSE;
    if (c->mode == PI_SPARSE_THRESHOLD && !hp->sparse && !hp->sparsified)
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "sparse mode threshold needs a file with "
                "ffn_down_t (made by pi_model_sparsify / pi-sparsify, or a PowerInfer file); "
                "this file is dense: use PI_SPARSE_DENSE");
    if (hp->sparsified && c->mode == PI_SPARSE_ORACLE)
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "oracle mode keeps the neurons whose gate is "
                "above 0, which is not what a sparsified file's threshold keeps: use "
                "PI_SPARSE_THRESHOLD (the same neurons as its definition), or PI_SPARSE_DENSE");
    if (hp->sparsified && c->mode == PI_SPARSE_PREDICTOR && !hp->predictors)
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "this sparsified file has no predictors "
                "(tools/train_predictor.py adds them): use PI_SPARSE_THRESHOLD or "
                "PI_SPARSE_DENSE");
    if (c->mode == PI_SPARSE_THRESHOLD && !pi_ffn_act_thresholdable(hp->ffn_act))
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "sparse mode threshold runs FFNs with SiLU, "
                "GELU or ReLU (on the gate of a gated one)");
    for (int64_t l = 0; c->mode == PI_SPARSE_THRESHOLD && (hp->info->flags & PI_AF_GATED) &&
                        l < hp->n_layer; l++)
        if (!c->model->desc.layers[l].ffn_gate && !c->model->desc.layers[l].router)
            PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "sparse mode threshold needs a gated FFN; "
                    "layer %lld has no ffn_gate", (long long)l);
    if (c->mode != PI_SPARSE_DENSE && c->mode != PI_SPARSE_THRESHOLD && !hp->sparse &&
        !hp->sparsified)
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "sparse mode %s needs a PowerInfer model (magic "
                "PWRI, with predictors and ffn_down_t); this file is dense: use "
                "PI_SPARSE_DENSE", c->mode == PI_SPARSE_ORACLE ? "oracle" : "predictor");
    c->threshold = p->sparse_threshold_set ? p->sparse_threshold : hp->sparse_threshold;
    c->stats_level = (int)p->stats;
    c->check_layers = p->check_numerics == PI_CHECK_LAYERS;
    c->graphs = p->device_graphs == PI_GRAPHS_AUTO;
    c->kv_type = (int)p->kv_type; /* PI_KV_TYPE_* and enum pi_kv_type share their values */
    c->kv_type_v = p->kv_type_v ? (int)p->kv_type_v : c->kv_type;
    const int kq = c->kv_type != PI_KV_F16, vq = c->kv_type_v != PI_KV_F16;
    const char *kv_name = (kq ? c->kv_type : c->kv_type_v) == PI_KV_Q4_0 ? "Q4_0" : "Q8_0";
    if ((kq || vq) && p->device != PI_DEVICE_NONE)
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "a %s KV cache is CPU-only (the device "
                "backends store F16): use no device, or PI_KV_TYPE_F16 for keys and values",
                kv_name);
    if ((kq && hp->head_dim_k % 32) || (vq && hp->head_dim_v % 32))
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "a %s KV cache needs head dimensions that are "
                "multiples of 32; this model's are %lld (K) and %lld (V)", kv_name,
                (long long)hp->head_dim_k, (long long)hp->head_dim_v);
    PI_TRY(setup_thresholds(c, p));
    if (hp->sparse || hp->sparsified) {
        const int64_t rmax = max64(c->model->desc.max_rank, 1);
        c->score = pi_calloc(a, (size_t)(B * F), sizeof(float));
        c->hid = pi_calloc(a, (size_t)(B * rmax), sizeof(float));
        const int64_t Fx = max64(F, hp->n_ff_exp); /* a layer's neurons, or an expert's */
        c->idx = pi_calloc(a, (size_t)Fx, sizeof *c->idx);
        c->mark = pi_calloc(a, (size_t)Fx, 1);
        if (!c->score || !c->hid || !c->idx || !c->mark)
            PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory for the sparse FFN's scratch");
        if (c->mode == PI_SPARSE_PREDICTOR && c->stats_level == PI_STATS_DIAGNOSTIC) {
            c->gfull = pi_calloc(a, (size_t)(B * F), sizeof(float));
            c->ufull = pi_calloc(a, (size_t)(B * F), sizeof(float));
            if (!c->gfull || !c->ufull)
                PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory for diagnostic statistics");
        }
    }
    if (c->stats_level != PI_STATS_OFF) {
        int st = pi_stats_create(a, hp->n_layer, F,
                                 c->model->desc.n_moe_layers ? hp->n_expert : 0, &c->stats);
        if (st < 0)
            PI_FAIL(&c->err, st, "out of memory for activation statistics");
        if (pi_model_meta_str(c->model, "general.name", c->stats->name,
                              sizeof c->stats->name) < 0)
            c->stats->name[0] = '\0';
        snprintf(c->stats->source, sizeof c->stats->source, "libpowerinfer %s, %s mode",
                 pi_version_string(), c->mode == PI_SPARSE_DENSE       ? "dense"
                                   : c->mode == PI_SPARSE_ORACLE    ? "oracle"
                                   : c->mode == PI_SPARSE_THRESHOLD ? "threshold"
                                                                    : "predictor");
        if (c->gate_hist) {
            c->stats->gate_hist = pi_calloc(a, (size_t)hp->n_layer * PI_GATE_HIST_BINS,
                                            sizeof *c->stats->gate_hist);
            if (!c->stats->gate_hist)
                PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory for the gate histograms");
        }
    }
    return PI_OK;
}

static int setup(struct pi_ctx *c, const pi_ctx_params *p) {
    const struct pi_model *m = c->model;
    const struct pi_hparams *hp = c->hp;
    const struct pi_model_desc *d = &m->desc;
    const struct pi_allocator *a = &c->alloc;

    c->n_ctx = p->n_ctx ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    c->n_batch = p->n_batch ? p->n_batch : DEFAULT_BATCH;
    if (c->n_batch > c->n_ctx)
        c->n_batch = c->n_ctx;
    if (d->pos_embd && c->n_ctx > hp->n_ctx_train) /* learned positions end there */
        PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "n_ctx %lld is above the %lld positions this %s "
                "model has learned embeddings for", (long long)c->n_ctx,
                (long long)hp->n_ctx_train, hp->info->name);
    int n_threads = p->n_threads ? (int)p->n_threads : pi_os_n_cpus();

    c->layers = pi_calloc(a, (size_t)hp->n_layer, sizeof *c->layers);
    c->exec = pi_calloc(a, (size_t)hp->n_layer, sizeof *c->exec);
    if (!c->layers || !c->exec)
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory");
    PI_TRY(pi_exec_weights(c));

    const int64_t E = hp->n_embd, F = d->max_ff, B = c->n_batch;
    const int64_t qd = hp->n_head * hp->head_dim_k, kd = hp->n_head_kv * hp->head_dim_k;
    const int64_t vd = hp->n_head_kv * hp->head_dim_v, ad = hp->n_head * hp->head_dim_v;
    struct {
        float **p;
        int64_t w;
    } bufs[] = {{&c->x, E},   {&c->xn, E}, {&c->q, qd}, {&c->k, kd}, {&c->v, vd},
                {&c->att, ad}, {&c->g, F},  {&c->u, F},  {&c->ya, E}};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        if (bufs[i].p == &c->ya && !(hp->info->flags & PI_AF_PARALLEL))
            continue;
        *bufs[i].p = pi_calloc(a, (size_t)(B * bufs[i].w), sizeof(float));
        if (!*bufs[i].p)
            PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory for %lld-token scratch",
                    (long long)B);
    }
    if (d->n_moe_layers) {
        const int64_t X = hp->n_expert, K = hp->n_expert_used;
        c->moe_prob = pi_calloc(a, (size_t)(B * X), sizeof(float));
        c->moe_wt = pi_calloc(a, (size_t)(B * K), sizeof(float));
        c->moe_sel = pi_calloc(a, (size_t)(B * K), sizeof(int32_t));
        c->moe_list = pi_calloc(a, (size_t)(B * K), sizeof(int32_t));
        c->moe_start = pi_calloc(a, (size_t)X + 1, sizeof(int64_t));
        c->moe_fill = pi_calloc(a, (size_t)X, sizeof(int64_t));
        c->moe_xg = pi_calloc(a, (size_t)(B * E), sizeof(float));
        c->moe_yg = pi_calloc(a, (size_t)(B * E), sizeof(float));
        c->moe_acc = pi_calloc(a, (size_t)(B * E), sizeof(float));
        c->moe_ye = pi_calloc(a, (size_t)(B * K * E), sizeof(float));
        if (!c->moe_prob || !c->moe_wt || !c->moe_sel || !c->moe_list || !c->moe_start ||
            !c->moe_fill || !c->moe_xg || !c->moe_yg || !c->moe_acc || !c->moe_ye)
            PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory for the experts' %lld-token scratch",
                    (long long)B);
    }
    c->n_seq = p->n_seq_max ? p->n_seq_max : 1;
    c->logits = pi_calloc(a, (size_t)hp->n_vocab, sizeof(float));
    c->seq_len = pi_calloc(a, (size_t)c->n_seq, sizeof *c->seq_len);
    c->next_pos = pi_calloc(a, (size_t)c->n_seq, sizeof *c->next_pos);
    c->step_tok = pi_calloc(a, (size_t)B, sizeof *c->step_tok);
    if (!c->logits || !c->seq_len || !c->next_pos || !c->step_tok)
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory");
    c->embd_mode = (int)p->embeddings;
    if (c->embd_mode != PI_EMBD_OFF) {
        const size_t se = (size_t)(c->n_seq * E);
        c->pool_sum = pi_calloc(a, se, sizeof *c->pool_sum);
        c->pool_first = pi_calloc(a, se, sizeof *c->pool_first);
        c->pool_last = pi_calloc(a, se, sizeof *c->pool_last);
        c->pool_n = pi_calloc(a, (size_t)c->n_seq, sizeof *c->pool_n);
        if (!c->pool_sum || !c->pool_first || !c->pool_last || !c->pool_n)
            PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory for the pooled embeddings of %lld "
                    "sequences", (long long)c->n_seq);
    }
    PI_TRY(setup_sparse(c, p));

    /* every width an op sees: the file's (predictor ranks included) and the attention
     * scores' row of up to n_ctx positions and a sink; the device backend gets the same */
    struct pi_backend_config cfg = {a, n_threads, B, max64(d->max_width, c->n_ctx + 1),
                                    p->f32_activations != 0, 0};
    c->be = pi_backend_cpu();
    int st = c->be->create(&c->b, &cfg);
    if (st < 0)
        PI_FAIL(&c->err, st, "cannot start the CPU backend with %d threads", n_threads);
    if (p->device != PI_DEVICE_NONE) {
        const struct pi_backend_vtable *dbe;
        struct pi_backend *db;
        struct pi_plan *plan;
        struct pi_plan_shape shape = {c->n_ctx, c->n_batch, c->n_seq};
        cfg.device = (int)p->device_index;
        PI_TRY(pi_hybrid_backend(p, &cfg, &dbe, &db, &c->err));
        st = pi_hybrid_plan(m, p, &shape, pi_hybrid_budget(m, p, &shape, dbe, db), &plan, &c->err);
        if (st < 0) {
            dbe->destroy(db);
            return st;
        }
        PI_TRY(pi_hybrid_create(c, dbe, db, plan));
        if (plan->pl.kv)
            return pi_exec_resolve(c); /* the KV cache lives on the device */
    }
    struct pi_kv_desc kvd = {hp->n_layer * c->n_seq, c->n_ctx, hp->n_head, hp->n_head_kv,
                             hp->head_dim_k, hp->head_dim_v, c->kv_type, c->kv_type_v};
    st = c->be->kv_create(c->b, &kvd, &c->kv);
    if (st < 0)
        PI_FAIL(&c->err, st, "out of memory for a KV cache of %lld positions",
                (long long)c->n_ctx);
    return pi_exec_resolve(c);
}

/* What is wrong with params, or NULL. */
static const char *bad_params(const pi_ctx_params *pp) {
    const pi_ctx_params p = *pp;
    return p.n_ctx > MAX_CTX           ? "n_ctx is above 1<<20"
           : p.n_threads > MAX_THREADS  ? "n_threads is above 512"
           : p.n_batch > MAX_CTX        ? "n_batch is above 1<<20"
           : p.sparse_mode > PI_SPARSE_THRESHOLD ? "sparse_mode is not a PI_SPARSE_* value"
           : !isfinite(p.sparse_threshold_scale) || p.sparse_threshold_scale < 0.0f
               ? "sparse_threshold_scale is not a finite number >= 0"
           : p.stats > PI_STATS_DIAGNOSTIC    ? "stats is not a PI_STATS_* value"
           : p.sparse_threshold_set && !isfinite(p.sparse_threshold)
               ? "sparse_threshold is not finite"
           : p.device > PI_DEVICE_CPU ? "device is not a PI_DEVICE_* value"
           : p.device_index > 1024   ? "device_index is above 1024"
           : p.plan_file > PI_PLAN_FILE_WRITE ? "plan_file is not a PI_PLAN_FILE_* value"
           : p.plan_file && !p.plan_path ? "plan_file is set but plan_path is NULL"
           : p.n_seq_max > MAX_SEQ ? "n_seq_max is above 256"
           : p.check_numerics > PI_CHECK_LAYERS ? "check_numerics is not a PI_CHECK_* value"
           : p.embeddings > PI_EMBD_ONLY ? "embeddings is not a PI_EMBD_* value"
           : p.device_graphs > PI_GRAPHS_OFF ? "device_graphs is not a PI_GRAPHS_* value"
           : p.kv_type > PI_KV_TYPE_Q4_0 ? "kv_type is not a PI_KV_TYPE_* value"
           : p.kv_type_v > PI_KV_TYPE_Q4_0 ? "kv_type_v is not 0 or a quantized PI_KV_TYPE_* value"
           : p.reserved0 || p.reserved2 || p.reserved3 ? "reserved fields are not zero"
           : NULL;
}

int pi_ctx_create(const pi_model *model, const pi_ctx_params *params, pi_ctx **out) {
    if (out)
        *out = NULL;
    if (!model || !out)
        return PI_ERR_INVALID_ARG;
    if (!model->has_desc)
        return PI_ERR_INVALID_ARG; /* metadata_only */
    struct pi_error err;
    pi_ctx_params p;
    PI_TRY(take_params(params, &p, &err));
    const char *bad = bad_params(&p);
    if (bad) {
        if (p.errbuf && p.errbuf_cap > 0)
            snprintf(p.errbuf, p.errbuf_cap, "pi_ctx_params: %s", bad);
        return PI_ERR_INVALID_ARG;
    }
    struct pi_ctx *c = pi_calloc(&model->alloc, 1, sizeof *c);
    if (!c)
        return PI_ERR_NOMEM;
    c->model = model;
    c->hp = &model->desc.hp;
    c->alloc = model->alloc;
    c->abort_fn = p.abort_fn;
    c->abort_user = p.abort_user;
    int st = setup(c, &p);
    if (st < 0) {
        pi_log(&model->log, PI_LOG_ERROR, "pi_ctx_create: %s", c->err.msg);
        if (p.errbuf && p.errbuf_cap > 0)
            snprintf(p.errbuf, p.errbuf_cap, "%s", c->err.msg);
        pi_ctx_destroy(c);
        return st;
    }
    pi_log(&model->log, PI_LOG_INFO, "context: %lld positions, batch %lld, %d threads",
           (long long)c->n_ctx, (long long)c->n_batch, c->be->n_threads(c->b));
    *out = c;
    return PI_OK;
}

const char *pi_ctx_errmsg(const pi_ctx *c) {
    return c ? c->err.msg : "no context (NULL handle)";
}

const pi_model *pi_ctx_model(const pi_ctx *c) {
    return c ? c->model : NULL;
}

/* Room for the logits rows and row map of a batch of n entries, k of them asking
 * for logits, and for their hidden states (embeddings), in the spare set. */
static int batch_room(struct pi_ctx *c, size_t n, size_t k) {
    const int s = !c->cur;
    const size_t V = (size_t)c->hp->n_vocab, E = (size_t)c->hp->n_embd;
    if (c->embd_mode != PI_EMBD_OFF && n > c->hs_cap[s]) {
        float *h = pi_malloc(&c->alloc, n * E * sizeof *h); /* n <= 2^28, E < 2^31 */
        if (!h)
            return PI_ERR_NOMEM;
        pi_free(&c->alloc, c->hs[s]);
        c->hs[s] = h;
        c->hs_cap[s] = n;
    }
    if (n > c->row_of_cap[s]) {
        int32_t *r = pi_malloc(&c->alloc, n * sizeof *r);
        if (!r)
            return PI_ERR_NOMEM;
        pi_free(&c->alloc, c->row_of[s]);
        c->row_of[s] = r;
        c->row_of_cap[s] = n;
    }
    if (k > c->rows_cap[s]) {
        if (k > SIZE_MAX / sizeof(float) / V)
            return PI_ERR_NOMEM;
        float *r = pi_malloc(&c->alloc, k * V * sizeof *r);
        if (!r)
            return PI_ERR_NOMEM;
        pi_free(&c->alloc, c->rows[s]);
        c->rows[s] = r;
        c->rows_cap[s] = k;
    }
    return PI_OK;
}

/* Check the entries, resolve their positions into pos, and run them. */
static int decode_entries(struct pi_ctx *c, const pi_batch_entry *e, size_t n, int32_t *pos) {
    size_t k = 0;
    for (int64_t s = 0; s < c->n_seq; s++)
        c->next_pos[s] = c->seq_len[s];
    for (size_t i = 0; i < n; i++) {
        if (e[i].token < 0 || e[i].token >= c->hp->n_vocab)
            PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "entry %zu: token id %d is outside the "
                    "vocabulary of %lld", i, (int)e[i].token, (long long)c->hp->n_vocab);
        if (e[i].seq < 0 || e[i].seq >= c->n_seq)
            PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "entry %zu: sequence %d is outside 0..%lld", i,
                    (int)e[i].seq, (long long)c->n_seq - 1);
        const int64_t want = c->next_pos[e[i].seq];
        if (e[i].pos != -1 && e[i].pos != want)
            PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "entry %zu: position %d, but sequence %d "
                    "continues at %lld", i, (int)e[i].pos, (int)e[i].seq, (long long)want);
        if (want >= c->n_ctx)
            PI_FAIL(&c->err, PI_ERR_RANGE, "entry %zu: sequence %d would exceed the context "
                    "of %lld positions", i, (int)e[i].seq, (long long)c->n_ctx);
        pos[i] = (int32_t)want;
        c->next_pos[e[i].seq] = want + 1;
        k += e[i].logits != 0 && c->embd_mode != PI_EMBD_ONLY;
    }
    if (batch_room(c, n, k) < 0)
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory for the logits of %zu entries", k);
    return pi_forward(c, e, pos, (int64_t)n);
}

int pi_ctx_decode(pi_ctx *c, const int32_t *tokens, size_t n) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    pi_error_clear(&c->err);
    if (!tokens || n == 0)
        PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "pi_ctx_decode: no tokens");
    /* compared as size_t: a cast of n to int64_t would turn n >= 2^63 negative and pass;
     * past this check n <= n_ctx <= 2^20, so n * sizeof *e cannot wrap */
    if (n > (size_t)(c->n_ctx - c->seq_len[0]))
        PI_FAIL(&c->err, PI_ERR_RANGE, "%zu tokens at position %lld exceed the context of %lld",
                n, (long long)c->seq_len[0], (long long)c->n_ctx);
    pi_batch_entry *e = pi_malloc(&c->alloc, n * sizeof *e);
    int32_t *pos = pi_malloc(&c->alloc, n * sizeof *pos);
    int st;
    if (e && pos) {
        for (size_t i = 0; i < n; i++)
            e[i] = (pi_batch_entry){tokens[i], 0, -1, i + 1 == n};
        st = decode_entries(c, e, n, pos);
    } else {
        st = pi_error_set(&c->err, PI_ERR_NOMEM, "out of memory for %zu tokens", n);
    }
    pi_free(&c->alloc, e);
    pi_free(&c->alloc, pos);
    return st;
}

int pi_ctx_decode_batch(pi_ctx *c, const pi_batch_entry *e, size_t n) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    pi_error_clear(&c->err);
    if (!e || n == 0)
        PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "pi_ctx_decode_batch: no entries");
    /* n_ctx * n_seq <= 2^28: past this check n * sizeof *pos cannot wrap */
    if (n > (size_t)c->n_ctx * (size_t)c->n_seq)
        PI_FAIL(&c->err, PI_ERR_RANGE, "%zu entries exceed the context's capacity of %lld "
                "positions x %lld sequences", n, (long long)c->n_ctx, (long long)c->n_seq);
    int32_t *pos = pi_malloc(&c->alloc, n * sizeof *pos);
    if (!pos)
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory for %zu entries", n);
    const int st = decode_entries(c, e, n, pos);
    pi_free(&c->alloc, pos);
    return st;
}

const float *pi_ctx_batch_logits(const pi_ctx *c, size_t i) {
    if (!c || i >= c->n_entries || c->row_of[c->cur][i] < 0)
        return NULL;
    return c->rows[c->cur] + (size_t)c->row_of[c->cur][i] * (size_t)c->hp->n_vocab;
}

const float *pi_ctx_logits(const pi_ctx *c) {
    return c && c->has_logits ? c->logits : NULL;
}

int64_t pi_ctx_pos(const pi_ctx *c) {
    return c ? c->seq_len[0] : 0;
}

int64_t pi_ctx_n_ctx(const pi_ctx *c) {
    return c ? c->n_ctx : 0;
}

uint32_t pi_ctx_n_seq_max(const pi_ctx *c) {
    return c ? (uint32_t)c->n_seq : 0;
}

int64_t pi_ctx_seq_len(const pi_ctx *c, int32_t seq) {
    return c && seq >= 0 && seq < c->n_seq ? c->seq_len[seq] : -1;
}

const float *pi_ctx_embedding(const pi_ctx *c, size_t i) {
    if (!c || c->embd_mode == PI_EMBD_OFF || i >= c->n_entries)
        return NULL;
    return c->hs[c->cur] + i * (size_t)c->hp->n_embd;
}

int pi_ctx_embedding_pooled(const pi_ctx *c, int32_t seq, int pooling, uint32_t normalize,
                            float *out, size_t n) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    struct pi_error *err = (struct pi_error *)&c->err; /* the error record only */
    pi_error_clear(err);
    if (!out)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "pi_ctx_embedding_pooled: out is NULL");
    if (c->embd_mode == PI_EMBD_OFF)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "pi_ctx_embedding_pooled: the context was created "
                "with embeddings PI_EMBD_OFF (set pi_ctx_params.embeddings)");
    PI_TRY(pi_ctx_check_seq(c, seq, 0, "pi_ctx_embedding_pooled"));
    if (pooling != PI_POOL_MEAN && pooling != PI_POOL_CLS && pooling != PI_POOL_LAST)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "pi_ctx_embedding_pooled: pooling %d is not "
                "PI_POOL_MEAN, _CLS or _LAST", pooling);
    const int64_t E = c->hp->n_embd, got = c->pool_n[seq], len = c->seq_len[seq];
    if (n < (size_t)E)
        PI_FAIL(err, PI_ERR_RANGE, "pi_ctx_embedding_pooled: room for %zu floats, the "
                "model's n_embd is %lld", n, (long long)E);
    if (len == 0 || got != len)
        PI_FAIL(err, PI_ERR_RANGE, "pi_ctx_embedding_pooled: sequence %d %s; decode it "
                "from position 0", (int)seq, len == 0 ? "is empty"
                : "changed since its tokens were decoded (shortened or loaded from a state)");
    const size_t at = (size_t)seq * (size_t)E;
    double ss = 0.0;
    for (int64_t j = 0; j < E; j++) {
        const double v = pooling == PI_POOL_MEAN  ? c->pool_sum[at + j] / (double)got
                         : pooling == PI_POOL_CLS ? c->pool_first[at + j]
                                                  : c->pool_last[at + j];
        out[j] = (float)v;
        ss += (double)out[j] * (double)out[j];
    }
    if (normalize && ss > 0.0) {
        const double k = 1.0 / sqrt(ss);
        for (int64_t j = 0; j < E; j++)
            out[j] = (float)((double)out[j] * k);
    }
    return PI_OK;
}

void pi_embd_copy(struct pi_ctx *c, int32_t src, int32_t dst) {
    if (c->embd_mode == PI_EMBD_OFF || src == dst)
        return;
    const size_t E = (size_t)c->hp->n_embd, s = (size_t)src * E, d = (size_t)dst * E;
    memcpy(c->pool_sum + d, c->pool_sum + s, E * sizeof *c->pool_sum);
    memcpy(c->pool_first + d, c->pool_first + s, E * sizeof *c->pool_first);
    memcpy(c->pool_last + d, c->pool_last + s, E * sizeof *c->pool_last);
    c->pool_n[dst] = c->pool_n[src];
}

void pi_embd_forget(struct pi_ctx *c, int32_t seq) {
    if (c->embd_mode == PI_EMBD_OFF)
        return;
    for (int64_t s = 0; s < c->n_seq; s++)
        if (seq == -1 || s == seq)
            c->pool_n[s] = -1;
}

/* Forget the batch logits (after the cache changed under them). */
static void drop_logits(struct pi_ctx *c) {
    c->has_logits = 0;
    c->n_entries = 0;
}

int pi_ctx_reset(pi_ctx *c) {
    return pi_ctx_seq_clear(c, -1);
}

int pi_ctx_check_seq(const struct pi_ctx *c, int32_t seq, int all_ok, const char *fn) {
    if ((seq >= 0 && seq < c->n_seq) || (seq == -1 && all_ok))
        return PI_OK;
    struct pi_error *err = (struct pi_error *)&c->err;
    PI_FAIL(err, PI_ERR_INVALID_ARG, "%s: sequence %d is outside 0..%lld%s", fn, (int)seq,
            (long long)c->n_seq - 1, all_ok ? " (or -1: all)" : "");
}

int pi_ctx_truncate(pi_ctx *c, int64_t n_keep) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    if (n_keep < 0)
        PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "pi_ctx_truncate: n_keep %lld is negative",
                (long long)n_keep);
    if (n_keep > c->seq_len[0])
        PI_FAIL(&c->err, PI_ERR_RANGE, "cannot keep %lld positions of %lld", (long long)n_keep,
                (long long)c->seq_len[0]);
    c->seq_len[0] = n_keep;
    drop_logits(c);
    return PI_OK;
}

int pi_ctx_seq_clear(pi_ctx *c, int32_t seq) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    PI_TRY(pi_ctx_check_seq(c, seq, 1, "pi_ctx_seq_clear"));
    for (int64_t s = 0; s < c->n_seq; s++)
        if (seq == -1 || s == seq)
            c->seq_len[s] = 0;
    if (seq == -1)
        drop_logits(c);
    return PI_OK;
}

int pi_ctx_seq_keep(pi_ctx *c, int32_t seq) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    PI_TRY(pi_ctx_check_seq(c, seq, 0, "pi_ctx_seq_keep"));
    for (int64_t s = 0; s < c->n_seq; s++)
        if (s != seq)
            c->seq_len[s] = 0;
    return PI_OK;
}

/* The backend that holds the KV cache, and the cache. */
static void kv_home(const struct pi_ctx *c, const struct pi_backend_vtable **be,
                    struct pi_backend **b, struct pi_kv **kv) {
    if (c->hy && c->hy->kv) {
        *be = c->hy->be;
        *b = c->hy->b;
        *kv = c->hy->kv;
    } else {
        *be = c->be;
        *b = c->b;
        *kv = c->kv;
    }
}

int pi_ctx_seq_copy(pi_ctx *c, int32_t src, int32_t dst) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    PI_TRY(pi_ctx_check_seq(c, src, 0, "pi_ctx_seq_copy"));
    PI_TRY(pi_ctx_check_seq(c, dst, 0, "pi_ctx_seq_copy"));
    const int64_t n = c->seq_len[src];
    if (src == dst || n == 0) {
        c->seq_len[dst] = n;
        pi_embd_copy(c, src, dst);
        return PI_OK;
    }
    const struct pi_hparams *hp = c->hp;
    const size_t kb = pi_kv_row_bytes(c->kv_type, hp->n_head_kv * hp->head_dim_k);
    const size_t vb = pi_kv_row_bytes(c->kv_type_v, hp->n_head_kv * hp->head_dim_v);
    uint8_t *buf = pi_malloc(&c->alloc, (size_t)n * (kb + vb));
    if (!buf)
        PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory copying %lld positions", (long long)n);
    const struct pi_backend_vtable *be;
    struct pi_backend *b;
    struct pi_kv *kv;
    kv_home(c, &be, &b, &kv);
    uint8_t *k = buf, *v = buf + (size_t)n * kb;
    int st = PI_OK;
    for (int64_t l = 0; st >= 0 && l < hp->n_layer; l++) {
        st = be->kv_get(b, kv, l * c->n_seq + src, 0, n, k, v);
        if (st >= 0)
            st = be->kv_set(b, kv, l * c->n_seq + dst, 0, n, k, v);
    }
    pi_free(&c->alloc, buf);
    if (st < 0) { /* dst's cells may be half written: dst is cleared, src is intact */
        c->seq_len[dst] = 0;
        PI_FAIL(&c->err, st, "copying sequence %d to %d failed", (int)src, (int)dst);
    }
    c->seq_len[dst] = n;
    pi_embd_copy(c, src, dst);
    return PI_OK;
}

/* n cache values (whole rows) as stored <-> float, for the keys a removal re-rotates. */
static void kv_to_float(int type, const uint8_t *src, float *dst, int64_t n) {
    if (type == PI_KV_Q8_0 || type == PI_KV_Q4_0) {
        if (type == PI_KV_Q8_0)
            pi_dequant_q8_0(src, dst, n);
        else
            pi_dequant_q4_0(src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = pi_fp16_to_fp32(h);
    }
}

static void kv_from_float(int type, const float *src, uint8_t *dst, int64_t n) {
    if (type == PI_KV_Q8_0 || type == PI_KV_Q4_0) {
        if (type == PI_KV_Q8_0)
            pi_quantize_q8_0(src, dst, n);
        else
            pi_quantize_q4_0(src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = pi_fp32_to_fp16(src[i]);
        memcpy(dst + 2 * i, &h, 2);
    }
}

int pi_ctx_seq_remove(pi_ctx *c, int32_t seq, int64_t p0, int64_t p1) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    PI_TRY(pi_ctx_check_seq(c, seq, 0, "pi_ctx_seq_remove"));
    const int64_t len = c->seq_len[seq];
    if (p1 == -1)
        p1 = len;
    if (p0 < 0 || p0 > p1 || p1 > len)
        PI_FAIL(&c->err, PI_ERR_RANGE, "cannot remove positions %lld..%lld of a sequence of "
                "%lld", (long long)p0, (long long)p1, (long long)len);
    const int64_t d = p1 - p0, m = len - p1; /* removed, moved */
    if (d == 0)
        return PI_OK;
    if (m > 0) { /* move p1.. down to p0.., keys rotated back by d positions */
        const struct pi_hparams *hp = c->hp;
        const int64_t nk = hp->n_head_kv * hp->head_dim_k, nv = hp->n_head_kv * hp->head_dim_v;
        const size_t kb = pi_kv_row_bytes(c->kv_type, nk), vb = pi_kv_row_bytes(c->kv_type_v, nv);
        uint8_t *k = pi_malloc(&c->alloc, (size_t)m * (kb + vb));
        float *kf = pi_malloc(&c->alloc, (size_t)(m * nk) * sizeof *kf);
        if (!k || !kf) {
            pi_free(&c->alloc, k);
            pi_free(&c->alloc, kf);
            PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory moving %lld positions", (long long)m);
        }
        uint8_t *v = k + (size_t)m * kb;
        const struct pi_backend_vtable *be;
        struct pi_backend *b;
        struct pi_kv *kv;
        kv_home(c, &be, &b, &kv);
        int st = PI_OK;
        for (int64_t l = 0; st >= 0 && l < hp->n_layer; l++) {
            const int64_t slot = l * c->n_seq + seq;
            st = be->kv_get(b, kv, slot, p1, m, k, v);
            if (st < 0)
                break;
            kv_to_float(c->kv_type, k, kf, m * nk);
            /* a Q4_0 cache's keys are stored rotated (runtime/hadamard.h): back first */
            const int64_t rot = c->kv_type == PI_KV_Q4_0 ? pi_hadamard_block(hp->head_dim_k) : 0;
            if (rot)
                pi_hadamard(kf, m * nk, rot);
            /* every head of every moved position turns by the angle of position -d: the
             * layer's RoPE with its magnitude scale undone (angles add, scales would
             * multiply), the host's copy of the factors */
            struct pi_rope rr = c->exec[l].rope;
            rr.factors = c->rope_factors;
            rr.attn_factor = rr.ext_factor != 0.0f
                                 ? 1.0f / (1.0f + 0.1f * logf(1.0f / rr.freq_scale))
                                 : 1.0f;
            c->be->rope(c->b, kf, 1, m * hp->n_head_kv, hp->head_dim_k, -d, &rr);
            c->be->sync(c->b);
            if (rot)
                pi_hadamard(kf, m * nk, rot);
            kv_from_float(c->kv_type, kf, k, m * nk);
            st = be->kv_set(b, kv, slot, p0, m, k, v);
        }
        pi_free(&c->alloc, k);
        pi_free(&c->alloc, kf);
        if (st < 0) { /* some layers moved, some not: the sequence keeps only p0 */
            c->seq_len[seq] = p0;
            PI_FAIL(&c->err, st, "moving positions of sequence %d failed; it now ends at %lld",
                    (int)seq, (long long)p0);
        }
    }
    c->seq_len[seq] = len - d;
    return PI_OK;
}

int pi_ctx_set_threads(pi_ctx *c, uint32_t n) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    pi_error_clear(&c->err);
    if (n > MAX_THREADS)
        PI_FAIL(&c->err, PI_ERR_INVALID_ARG, "pi_ctx_set_threads: %u threads is above %d", n,
                MAX_THREADS);
    const int want = n ? (int)n : pi_os_n_cpus();
    int st = c->be->set_threads(c->b, want);
    if (st < 0)
        PI_FAIL(&c->err, st, "pi_ctx_set_threads: cannot start %d threads", want);
    return PI_OK;
}

int pi_ctx_set_ffn_probe(pi_ctx *c, pi_ffn_probe_fn fn, void *user) {
    if (!c)
        return PI_ERR_INVALID_ARG;
    pi_error_clear(&c->err);
    if (fn && (c->mode != PI_SPARSE_DENSE || c->hy || c->model->desc.n_moe_layers))
        PI_FAIL(&c->err, PI_ERR_UNSUPPORTED, "pi_ctx_set_ffn_probe: the probe needs the "
                "whole FFN computed on the CPU: a CPU-only context in PI_SPARSE_DENSE mode, "
                "without experts");
    if (fn && !c->probe_act) {
        c->probe_act = pi_calloc(&c->alloc, (size_t)(c->n_batch * c->hp->n_ff), sizeof(float));
        if (!c->probe_act)
            PI_FAIL(&c->err, PI_ERR_NOMEM, "out of memory for the FFN probe's activations");
    }
    c->probe_fn = fn;
    c->probe_user = fn ? user : NULL;
    return PI_OK;
}

uint32_t pi_ctx_n_threads(const pi_ctx *c) {
    return c ? (uint32_t)c->be->n_threads(c->b) : 0;
}

int pi_ctx_sparse_mode(const pi_ctx *c) {
    return c ? c->mode : PI_ERR_INVALID_ARG;
}

float pi_ctx_sparse_threshold(const pi_ctx *c) {
    return c ? c->threshold : 0.0f;
}

int pi_ctx_sparse_threshold_source(const pi_ctx *c) {
    return c ? c->thr_source : PI_ERR_INVALID_ARG;
}

int64_t pi_ctx_sparse_thresholds(const pi_ctx *c, float *out, size_t cap) {
    if (!c || (!out && cap))
        return PI_ERR_INVALID_ARG;
    const int64_t L = c->hp->n_layer;
    for (int64_t l = 0; l < L && (size_t)l < cap; l++)
        out[l] = c->layer_thr[l];
    return L;
}

const pi_stats *pi_ctx_stats(const pi_ctx *c) {
    return c ? c->stats : NULL;
}

int pi_ctx_stats_reset(pi_ctx *c) {
    if (!c || !c->stats)
        return PI_ERR_INVALID_ARG;
    pi_stats_clear(c->stats);
    return PI_OK;
}

const pi_plan *pi_ctx_plan(const pi_ctx *c) {
    return c && c->hy ? c->hy->plan : NULL;
}

int pi_model_plan(const pi_model *model, const pi_ctx_params *params, pi_plan **out) {
    if (out)
        *out = NULL;
    if (!model || !out || !model->has_desc)
        return PI_ERR_INVALID_ARG;
    struct pi_error err = {0};
    pi_ctx_params p;
    PI_TRY(take_params(params, &p, &err));
    const char *bad = bad_params(&p);
    if (!bad && p.device == PI_DEVICE_NONE)
        bad = "device is PI_DEVICE_NONE: there is nothing to plan";
    if (bad) {
        if (p.errbuf && p.errbuf_cap > 0)
            snprintf(p.errbuf, p.errbuf_cap, "pi_ctx_params: %s", bad);
        return PI_ERR_INVALID_ARG;
    }
    const struct pi_hparams *hp = &model->desc.hp;
    struct pi_plan_shape shape;
    shape.n_ctx = p.n_ctx ? p.n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    shape.n_batch = p.n_batch ? p.n_batch : DEFAULT_BATCH;
    shape.n_seq = p.n_seq_max ? p.n_seq_max : 1;
    if (shape.n_batch > shape.n_ctx)
        shape.n_batch = shape.n_ctx;
    const struct pi_backend_vtable *be = pi_backend_cpu();
    struct pi_backend *b = NULL;
    int st = PI_OK;
    if (p.device == PI_DEVICE_GPU && p.device_budget == PI_DEVICE_BUDGET_AUTO) {
        /* ask the device for its free memory */
        struct pi_backend_config cfg = {&model->alloc, 1, 1, 1, 0, (int)p.device_index};
        st = pi_hybrid_backend(&p, &cfg, &be, &b, &err);
    }
    if (st >= 0) {
        const uint64_t budget = pi_hybrid_budget(model, &p, &shape, be, b);
        if (b)
            be->destroy(b);
        st = pi_hybrid_plan(model, &p, &shape, budget, out, &err);
    }
    if (st < 0 && p.errbuf && p.errbuf_cap > 0)
        snprintf(p.errbuf, p.errbuf_cap, "%s", err.msg);
    return st;
}
