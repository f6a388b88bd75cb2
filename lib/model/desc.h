/* desc.h -- the internal description of a model: hyper-parameters and the tensors
 * of each layer, built from a parsed GGUF file and checked for presence, shape and
 * type. Shapes below are in GGUF order {ne0, ne1}: ne0 is the contiguous row. */
#ifndef PI_MODEL_DESC_H
#define PI_MODEL_DESC_H

#include <stdint.h>

#include "model/gguf.h"
#include "util/log.h"

enum pi_arch {
    PI_ARCH_LLAMA,  /* Llama 2/3, Mistral, SmolLM, ReLU-Llama (PowerInfer) */
    PI_ARCH_BAMBOO, /* PowerInfer's Bamboo: relu(gate) * relu(up) */
};

enum pi_ffn_act {
    PI_ACT_SILU, /* silu(gate) * up */
    PI_ACT_RELU, /* relu(gate) * up */
    PI_ACT_RELU_BOTH, /* relu(gate) * relu(up) */
};

struct pi_hparams {
    enum pi_arch arch;
    int sparse;           /* PowerInfer file: predictors and ffn_down_t */
    int64_t n_layer;
    int64_t n_embd;
    int64_t n_ff;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim_k;   /* attention.key_length, default n_embd / n_head */
    int64_t head_dim_v;   /* attention.value_length, default head_dim_k */
    int64_t n_vocab;
    int64_t n_ctx_train;
    int64_t n_rot;        /* rope.dimension_count, default head_dim_k */
    float rope_freq_base; /* default 10000 */
    float rope_scale;     /* linear scaling factor: positions are divided by it */
    float rms_eps;
    float sparse_threshold; /* powerinfer.sparse_threshold, default 0 */
    enum pi_ffn_act ffn_act;
};

struct pi_layer_desc {
    const struct gguf_tensor *attn_norm;  /* [n_embd] */
    const struct gguf_tensor *wq;         /* {n_embd, n_head*head_dim_k} */
    const struct gguf_tensor *wk;         /* {n_embd, n_head_kv*head_dim_k} */
    const struct gguf_tensor *wv;         /* {n_embd, n_head_kv*head_dim_v} */
    const struct gguf_tensor *wo;         /* {n_head*head_dim_v, n_embd} */
    const struct gguf_tensor *ffn_norm;   /* [n_embd] */
    const struct gguf_tensor *ffn_gate;   /* {n_embd, n_ff}: row r = neuron r */
    const struct gguf_tensor *ffn_up;     /* {n_embd, n_ff}: row r = neuron r */
    const struct gguf_tensor *ffn_down;   /* {n_ff, n_embd}, dense files; else NULL */
    const struct gguf_tensor *ffn_down_t; /* {n_embd, n_ff}, sparse files; else NULL */
    const struct gguf_tensor *fc1;        /* {n_embd, rank}: predictor, sparse files */
    const struct gguf_tensor *fc2;        /* {rank, n_ff} */
    int64_t pred_rank;                    /* 0 for dense files */
};

struct pi_model_desc {
    struct pi_hparams hp;
    const struct gguf_tensor *token_embd;  /* {n_embd, n_vocab} */
    const struct gguf_tensor *output_norm; /* [n_embd] */
    const struct gguf_tensor *output;      /* {n_embd, n_vocab}; == token_embd if tied */
    struct pi_layer_desc *layers;          /* [n_layer] */
    int64_t max_rank;  /* the largest pred_rank (0: dense file) */
    /* The widest activation row the forward pass hands an op: the largest of n_embd,
     * n_ff, the q/k/v/attention-output widths and max_rank. Scratch that an op sizes by
     * its input width is sized by this (and by n_ctx for attention scores, a context's
     * choice). */
    int64_t max_width;
};

#define PI_MAX_LAYERS 512
/* The largest width a file may give anything that becomes an activation row (n_embd,
 * n_ff, n_head * head_dim, a predictor rank): [n_batch][width] scratch then stays far
 * from overflowing an int64_t or size_t. Larger: PI_ERR_FORMAT. */
#define PI_MAX_WIDTH ((int64_t)1 << 24)

/* Build and check the description. PI_ERR_UNSUPPORTED for an architecture, a tensor
 * type or a feature this build cannot run (mixture-of-experts, and every tensor the
 * forward pass would not read unless docs/formats.md lists it as harmless: RoPE
 * frequency factors, biases, ...), PI_ERR_FORMAT for a missing or misshaped tensor or a
 * bad hyper-parameter; the message names the tensor or key and what was expected. `progress` (may be NULL) is polled per layer; non-zero aborts. */
int pi_model_desc_build(struct pi_model_desc *d, const struct gguf_file *f,
                        const struct pi_allocator *a, const struct pi_logger *lg,
                        int (*progress)(void *user, float frac), void *progress_user,
                        struct pi_error *err);
void pi_model_desc_free(struct pi_model_desc *d, const struct pi_allocator *a);

const char *pi_arch_name(enum pi_arch arch);

#endif
