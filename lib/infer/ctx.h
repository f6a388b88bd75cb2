/* ctx.h -- the pi_ctx object: a model's weights as backend views, the KV cache, the
 * scratch activations, and the position. */
#ifndef PI_INFER_CTX_H
#define PI_INFER_CTX_H

#include "backend.h"
#include "infer/hybrid.h"
#include "infer/weights.h"
#include "infer/stats.h"
#include "model/model.h"

/* How layer l runs, resolved when the context is made (lib/infer/exec.c): which unit
 * runs each part and with what options. The forward pass reads only this and the
 * weights. */
struct pi_layer_exec {
    int attn_dev;          /* attention weights and their ops on the device */
    int kv_dev;            /* RoPE, the cache and the scores on the device */
    int pred_dev;          /* the predictor on the device */
    int norm_dev;          /* the FFN's input norm on the device */
    int ffn_whole_dev;     /* the whole (dense) FFN on the device */
    int64_t n_dev;         /* sparse files: neurons computed on the device */
    struct pi_rope rope;   /* factors in the KV unit's memory */
    struct pi_attn attn;
};

/* Called after each layer's FFN block with its output [n_tok][n_embd] (before the
 * residual add) and the predictor scores [n_tok][n_ff] (NULL when the predictor did
 * not run); tests use it to compare layers with a reference. */
typedef void (*pi_trace_fn)(void *user, int64_t layer, int64_t n_tok, const float *ffn_out,
                            const float *scores);

struct pi_ctx {
    const struct pi_model *model;
    const struct pi_hparams *hp;
    struct pi_allocator alloc;
    const struct pi_backend_vtable *be;
    struct pi_backend *b;
    struct pi_kv *kv;
    pi_abort_fn abort_fn;
    void *abort_user;
    int64_t n_ctx, n_batch;
    int64_t n_seq;      /* sequences; KV slot of (layer, seq) = layer * n_seq + seq */
    int64_t *seq_len;   /* [n_seq] positions decoded per sequence */
    int has_logits;     /* logits holds the last requested entry's logits */
    struct pi_weight tok_embd, output; /* {n_embd, n_vocab} */
    struct pi_weight pos_embd;         /* {n_embd, n_pos} learned positions; data NULL: none */
    struct pi_norm_w output_norm;
    struct pi_layer_w *layers;         /* [n_layer] */
    struct pi_layer_exec *exec;        /* [n_layer] */
    float *rope_factors;               /* host [n_rot/2], owned: rope_freqs or LongRoPE's, or NULL */
    int rope_set;                      /* PI_ROPE_SET_*: which factors the cache was rotated with */
    float *sinks;                      /* host [n_layer][n_head], owned: attention sinks as
                                        * F32 (layers without: unused), or NULL */
    /* Scratch activations, [n_batch][width]; ya: a parallel block's attention output. */
    float *x, *xn, *q, *k, *v, *att, *g, *u, *ya;
    float *logits;                     /* [n_vocab] */
    /* Logits of the last batch: rows [n_rows][n_vocab] for the entries that asked,
     * row_of[i] = entry i's row or -1; a call fills the spare set and swaps on success. */
    float *rows[2];
    int32_t *row_of[2];
    size_t rows_cap[2], row_of_cap[2];
    size_t n_entries;                  /* entries of the last batch */
    int cur;                           /* the set holding the last batch */
    /* Embeddings (PI_EMBD_*): the final hidden states of the last batch, [n][n_embd],
     * in the set `cur` (filled in the spare set, swapped with rows); per sequence the
     * pooled state of its tokens since position 0: their sum (double), first and last
     * state, [n_seq][n_embd], and how many tokens it covers (valid when it equals
     * seq_len; -1: invalidated). */
    int embd_mode;
    float *hs[2];
    size_t hs_cap[2];
    double *pool_sum;
    float *pool_first, *pool_last;
    int64_t *pool_n;
    int32_t *step_tok;                 /* [n_batch] tokens of a step */
    int64_t *next_pos;                 /* [n_seq] scratch: next position per sequence */
    /* Sparse FFN (PowerInfer files). */
    int mode;                          /* PI_SPARSE_DENSE, _PREDICTOR, _ORACLE, _THRESHOLD */
    float threshold;
    float *layer_thr;                  /* [n_layer] THRESHOLD mode's t_l (else 0) */
    int thr_source;                    /* PI_THRESHOLDS_* */
    int gate_hist;                     /* collect stats->gate_hist */
    float *score;                      /* [n_batch][n_ff] predictor scores */
    float *hid;                        /* [n_batch][max rank] predictor hidden layer */
    float *gfull, *ufull;              /* [n_batch][n_ff] diagnostic full projections */
    int32_t *idx;                      /* [n_ff] neurons computed in this step */
    uint8_t *mark;                     /* [n_ff] */
    /* Mixture of experts (models with expert layers; else NULL): the router's logits
     * and then probabilities [n_batch][n_expert]; per token its chosen experts and
     * their weights [n_batch][n_expert_used]; the (token, choice) pairs bucketed by
     * expert: moe_start [n_expert + 1] offsets into moe_list [n_batch * n_expert_used]
     * (entries t * n_expert_used + j), moe_fill [n_expert] scratch; an expert's tokens
     * gathered, the shared expert's output, and the layer's sum [n_batch][n_embd];
     * every expert's output, by bucket [n_batch * n_expert_used][n_embd]. */
    float *moe_prob, *moe_wt;
    int32_t *moe_sel, *moe_list;
    int64_t *moe_start, *moe_fill;
    float *moe_xg, *moe_yg, *moe_acc, *moe_ye;
    int stats_level;                   /* PI_STATS_* */
    int check_layers;                  /* PI_CHECK_LAYERS: NaN/Inf after each block */
    int graphs;                        /* PI_GRAPHS_AUTO, and no device failed one */
    int kv_type, kv_type_v;            /* keys', values' PI_KV_TYPE_* = enum pi_kv_type
                                        * (backend.h); kv_type_v never 0 for "as keys" */
    int graph_layers;                  /* pi_exec_resolve: no layer overlaps host and
                                        * device work (graph regions allowed) */
    struct pi_stats *stats;            /* NULL when off */
    struct pi_hybrid *hy;              /* device side; NULL: CPU only */
    pi_trace_fn trace_fn;              /* internal (tests); not called for layers split
                                        * between devices */
    void *trace_user;
    pi_ffn_probe_fn probe_fn;          /* pi_ctx_set_ffn_probe (dense, CPU-only), or NULL */
    void *probe_user;
    float *probe_act;                  /* [n_batch][n_ff] the probe's act(gate xn) */
    struct pi_error err;
};

/* The fraction of a layer's neurons above which a step computes gate/up densely
 * (and masks per token) instead of row by row: a large union reads most rows anyway,
 * and the dense kernels stream them faster. */
#define PI_SPARSE_DENSE_UNION 0.6
/* Prompt steps of a predictor-mode PowerInfer file compute gate and up per tile of this
 * many tokens, over the tile's union (forward.c, ffn_sparse): the CPU gemm's token tile. */
#define PI_SPARSE_TILE 8
/* ... unless its tiles' unions average more than this fraction of the layer: then gate
 * and up run densely over the whole step (each weight row read once for the step, and
 * the AVX-512 table's packed gemm from 16 tokens on), masked per token. */
#define PI_SPARSE_PROMPT_DENSE 0.6
/* A sparsified file that keeps ffn_down beside ffn_down_t (pi_sparsify_params.keep_down)
 * runs a threshold-mode step's down projection through the dense gemm over the masked
 * activations when the rows its tokens need are more than this fraction of the layer
 * (a row of ffn_down_t costs about twice a dense row's share per byte, and is often
 * in a wider type). */
#define PI_SPARSE_DOWN_DENSE 0.4

/* Rows of the output projection computed at once (a device holds this many rows of
 * logits). */
#define PI_LOGIT_CHUNK 16

/* The RoPE factor set a context rotates keys with (its states record it). */
enum { PI_ROPE_SET_FILE = 0, PI_ROPE_SET_SHORT = 1, PI_ROPE_SET_LONG = 2 };

/* Fill c's weight views (tok_embd, output, layers) and its copy of the RoPE factors from
 * its model; c->n_ctx and c->layers must be set (exec.c). PI_ERR_NOMEM. */
int pi_exec_weights(struct pi_ctx *c);

/* Fill c->exec from the weights, the plan (c->hy) and the model; PI_ERR_UNSUPPORTED
 * when the device lacks an op a part placed on it needs. */
int pi_exec_resolve(struct pi_ctx *c);

/* Run the model over a batch (entries validated by the caller, positions resolved in
 * pos[i]); on success advances each sequence, swaps in the batch's logits and copies
 * the last requested row to ctx->logits. On failure nothing visible changes. */
int pi_forward(struct pi_ctx *ctx, const pi_batch_entry *e, const int32_t *pos, int64_t n);

/* PI_OK when seq names a sequence of c (or is -1 and all_ok: every sequence); else
 * PI_ERR_INVALID_ARG with "FN: sequence S is outside 0..N-1" as c's message (the error
 * record is written even through a const handle: it is not the context's state). */
/* Embeddings (PI_EMBD_ON/_ONLY; no-ops when off): sequence dst takes src's pooled state
 * (pi_ctx_seq_copy); sequence seq's (-1: every one's) stops covering it until it is
 * decoded again from position 0 (a state was loaded into it). */
void pi_embd_copy(struct pi_ctx *c, int32_t src, int32_t dst);
void pi_embd_forget(struct pi_ctx *c, int32_t seq);

int pi_ctx_check_seq(const struct pi_ctx *c, int32_t seq, int all_ok, const char *fn);

#endif
