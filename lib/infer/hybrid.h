/* hybrid.h -- hybrid CPU/device execution: the public pi_plan (a placement with what
 * it was made for), building it from a model, and the device side of a context (the
 * placed weights uploaded to the device backend, its scratch, its KV cache).
 * forward.c runs the layers; docs/design.md ("Hybrid execution") explains the split. */
#ifndef PI_INFER_HYBRID_H
#define PI_INFER_HYBRID_H

#include "backend.h"
#include "infer/weights.h"
#include "util/error.h"
#include "plan/plan.h"
#include "powerinfer.h"

struct pi_model;
struct pi_ctx;

struct pi_plan {
    struct pi_placement pl;   /* what goes where; pl.bytes[] by PI_PART_* */
    struct pi_allocator alloc;
    uint64_t budget;          /* the whole budget, bytes */
    uint64_t scratch;         /* device scratch taken from it first */
    int source;               /* PI_PLAN_COMPUTED, ... */
    int whole_layers;         /* dense file: a layer's FFN is all on the device or none */
    uint64_t model_id, stats_id;
};

/* How the planner sees a model for a context of n_ctx positions and n_batch tokens
 * per step. */
struct pi_plan_shape {
    int64_t n_ctx, n_batch, n_seq;
};

/* A model's identity: FNV-1a of the file's size and everything before its tensor data
 * (metadata and tensor table). Plans and context states carry it. */
uint64_t pi_model_identity(const struct pi_model *m);

/* Device scratch bytes a hybrid context of this shape allocates (see
 * pi_hybrid_create). */
uint64_t pi_hybrid_scratch_bytes(const struct pi_model *m, const struct pi_plan_shape *s);

/* Make the plan for `budget` bytes (already resolved: not PI_DEVICE_BUDGET_AUTO) with
 * the statistics, plan file and mode of `p`. */
int pi_hybrid_plan(const struct pi_model *m, const pi_ctx_params *p,
                   const struct pi_plan_shape *s, uint64_t budget, struct pi_plan **out,
                   struct pi_error *err);

/* Write pl's placement as a PowerInfer .gpuidx file (api_plan.c's pi_plan_save). */
int pi_hybrid_plan_save(const struct pi_plan *pl, const char *path, struct pi_error *err);

/* A device backend for p->device (PI_DEVICE_GPU or PI_DEVICE_CPU). */
int pi_hybrid_backend(const pi_ctx_params *p, const struct pi_backend_config *cfg,
                      const struct pi_backend_vtable **be, struct pi_backend **b,
                      struct pi_error *err);

/* The budget p asks for, resolved against the device b (PI_DEVICE_BUDGET_AUTO: free
 * memory minus 256 MiB, or everything for PI_DEVICE_CPU). */
uint64_t pi_hybrid_budget(const struct pi_model *m, const pi_ctx_params *p,
                          const struct pi_plan_shape *s, const struct pi_backend_vtable *be,
                          struct pi_backend *b);

/* A layer's device part. w holds device views (data in device memory) of the parts
 * on the device: attention (attn), predictor (pred), the FFN's input norm (norm) and,
 * for dense files (whole layers), the whole FFN (ffn_whole). For sparse files the
 * subset holds the layer's device neurons in ascending id order: gate, up and down
 * have n_dev rows (down: rows of ffn_down_t). */
struct pi_dev_layer {
    int attn, pred, norm, ffn_whole;    /* parts on the device */
    struct pi_layer_w w;
    struct pi_weight gate, up, down;    /* sparse files: the device's neurons (gate
                                         * data NULL: no gate, Falcon and OPT) */
    struct pi_vector b_gate, b_up;      /* gate's and up's biases at those neurons
                                         * [n_dev] (F32; OPT's up, a biased Llama's
                                         * both); data NULL: none */
    struct pi_vector b_down;            /* down's [n_embd]; data NULL: none */
    int32_t *map;                       /* device [n_dev]: neuron ids */
    int64_t n_dev;
    const uint8_t *on_dev;              /* host [n_ff]: 1 = computed on the device */
    /* Mixture-of-experts layers: moe_dense, the router and shared expert in w (placed
     * with the FFN norm); the device's experts in w.exps, packed (index s = the s-th
     * device expert in ascending id order); exp_slot [n_expert] host: an expert's index
     * on the device, or -1 (NULL when none is there). */
    int moe_dense;
    int32_t *exp_slot;
    int64_t n_dev_exp;
};

struct pi_hybrid {
    const struct pi_backend_vtable *be;
    struct pi_backend *b;
    struct pi_plan *plan;
    struct pi_kv *kv;                   /* the device's KV cache when plan->pl.kv */
    struct pi_dev_layer *layers;        /* [n_layer] */
    struct pi_weight output;
    struct pi_norm_w output_norm;
    float *rope_factors;                /* device copy of the context's, or NULL */
    float *sinks;                       /* device copy of the context's, or NULL */
    /* Device scratch, [n_batch][width] like the context's own. */
    float *x, *xn, *q, *k, *v, *att, *score, *hid, *gd, *ud, *yd, *yc, *ones, *logits, *ya;
    /* Mixture-of-experts models (else NULL): the router's logits [n_batch][n_expert],
     * the device experts' gathered rows and outputs [n_batch * n_expert_used][n_embd],
     * their hidden rows moe_g, moe_u, the shared expert's output [n_batch][n_embd]. */
    float *moe_prob, *moe_xg, *moe_ye, *moe_g, *moe_u, *moe_ysh;
    /* Host scratch: the CPU part's FFN output and the device's, downloaded; the device
     * experts' outputs, downloaded [n_batch * n_expert_used][n_embd]. */
    float *yc_host, *yd_host, *moe_ydev;
    void **bufs;                        /* every device allocation, freed at the end */
    size_t n_bufs, cap_bufs;
    struct pi_allocator alloc;
};

/* Build the device side of context c from its plan (uploads the placed weights).
 * Takes ownership of be/b and plan, also on failure. */
int pi_hybrid_create(struct pi_ctx *c, const struct pi_backend_vtable *be, struct pi_backend *b,
                     struct pi_plan *plan);
void pi_hybrid_destroy(struct pi_hybrid *h);

#endif
