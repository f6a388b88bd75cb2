/* weights.h -- a layer's weights as backend views (ctx.h, hybrid.h). */
#ifndef PI_INFER_WEIGHTS_H
#define PI_INFER_WEIGHTS_H

#include "backend.h"

/* A norm's weight and (LayerNorm) bias; data NULL where absent. */
struct pi_norm_w {
    struct pi_vector w, b;
};

/* A layer's weights as backend views (the host's: the mapped file; a device's: its
 * copies). Optional parts have data NULL. Fused tensors of the file (attn_qkv, Phi-3's
 * gate+up) appear here as views of their row ranges. */
struct pi_layer_w {
    struct pi_norm_w norm_attn;           /* [n_embd] */
    struct pi_norm_w norm_ffn;            /* [n_embd]; w.data NULL: a parallel block's FFN
                                           * reads the attention's normed input */
    struct pi_weight wq, wk, wv, wo;      /* {n_embd, q_dim}, {n_embd, kv_dim} x2, {q_dim_v, n_embd} */
    struct pi_vector bq, bk, bv, bo;      /* biases */
    struct pi_vector q_norm, k_norm;      /* [head_dim_k] per-head RMSNorm */
    struct pi_vector attn_post_norm, ffn_post_norm; /* [n_embd] RMSNorm of a block's output */
    struct pi_weight gate, up;            /* {n_embd, n_ff}: row r = neuron r; gate.data
                                           * NULL: a plain FFN */
    struct pi_vector b_gate, b_up, b_down;
    struct pi_weight down;                /* {n_ff, n_embd} (dense files) */
    struct pi_weight down_t;              /* {n_embd, n_ff} (PowerInfer files) */
    int has_down; /* 1: a dense file's down; 0: down_t (and with a sparsified file of
                   * keep_down, down beside it, down.data set) */
    struct pi_weight fc1, fc2;            /* predictor {n_embd, rank}, {rank, n_ff} */
    /* Mixture of experts (router.data NULL: a dense layer). */
    struct pi_weight router;              /* {n_embd, n_expert} */
    struct pi_experts {
        /* expert 0's gate and up {n_embd, n_ff_exp} and down {n_ff_exp, n_embd}; expert
         * e's are these views moved by e times the stride (bytes), so a file's fused
         * gate_up tensor is two views with a stride of both halves */
        struct pi_weight gate, up, down;
        size_t gate_stride, up_stride, down_stride;
        /* a sparsified file's: expert 0's down transposed {n_embd, n_ff_exp} (row r =
         * neuron r; down.data is then NULL), expert e's moved by e times down_t_stride */
        struct pi_weight down_t;
        size_t down_t_stride;
        /* gpt-oss: expert 0's biases [n_ff_exp], [n_ff_exp], [n_embd] (expert e's are the
         * e-th rows of their tensors); data NULL: none */
        struct pi_vector b_gate, b_up, b_down;
    } exps;
    struct pi_vector router_b;                /* [n_expert] router bias; data NULL: none */
    struct pi_weight sh_gate, sh_up, sh_down; /* shared expert; data NULL: none */
    struct pi_weight sh_gate_inp;         /* {n_embd, 1}: its sigmoid gate; NULL: none */
};

#endif
