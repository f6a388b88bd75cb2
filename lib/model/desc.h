/* desc.h -- the internal description of a model: hyper-parameters and the tensors
 * of each layer, built from a parsed GGUF file and checked for presence, shape and
 * type. Shapes below are in GGUF order {ne0, ne1}: ne0 is the contiguous row. */
#ifndef PI_MODEL_DESC_H
#define PI_MODEL_DESC_H

#include <stdint.h>

#include "model/gguf.h"
#include "util/log.h"

enum pi_arch {
    PI_ARCH_LLAMA,      /* Llama 2/3/3.1, Mistral, SmolLM, ReLU-Llama (PowerInfer) */
    PI_ARCH_BAMBOO,     /* PowerInfer's Bamboo: relu(gate) * relu(up) */
    PI_ARCH_QWEN2,      /* Qwen2, Qwen2.5: QKV biases */
    PI_ARCH_QWEN3,      /* Qwen3 (dense): per-head q/k RMSNorm */
    PI_ARCH_GEMMA2,     /* post-norms, soft-capping, local/global layers */
    PI_ARCH_GEMMA3,     /* q/k norms, 5 local : 1 global layers, two RoPE bases */
    PI_ARCH_PHI3,       /* fused QKV and gate/up, LongRoPE */
    PI_ARCH_STARCODER2, /* LayerNorm with bias, plain GELU FFN, biases */
    PI_ARCH_FALCON,     /* parallel attention and FFN, LayerNorm, fused QKV */
    PI_ARCH_QWEN2MOE,   /* Qwen1.5-MoE, Qwen2-MoE: experts + a gated shared expert */
    PI_ARCH_QWEN3MOE,   /* Qwen3-30B-A3B, 235B-A22B: experts, per-head q/k norms */
    PI_ARCH_OLMOE,      /* OLMoE: experts, q/k norms over the whole q/k row */
    PI_ARCH_OPT,        /* OPT: learned positions, LayerNorm, biases, relu(up) FFN */
    PI_ARCH_GPT_OSS,    /* OpenAI gpt-oss: sinks, biased router and experts, clamped SwiGLU */
    PI_ARCH_COUNT
};

/* The FFN activation of a model (a gated FFN multiplies it with up). */
enum pi_ffn_act {
    PI_FFN_SILU,      /* silu(gate) */
    PI_FFN_RELU,      /* relu(gate) */
    PI_FFN_RELU_BOTH, /* relu(gate) * relu(up): Bamboo */
    PI_FFN_GELU,      /* gelu, tanh approximation */
    PI_FFN_GELU_ERF,  /* gelu, exact (erf) */
    PI_FFN_RELU_SQR,  /* relu(x)^2 */
    PI_FFN_SWIGLU_OAI, /* gpt-oss: (clamp(u, -7, 7) + 1) * g' * sigmoid(1.702 g'),
                        * g' = min(g, 7) */
};

/* Whether the thresholded FFN (a sparsified file, gate_histogram of experts) runs this
 * activation: one of its own, act(gate), to threshold. */
static inline int pi_ffn_act_thresholdable(enum pi_ffn_act a) {
    return a == PI_FFN_SILU || a == PI_FFN_GELU || a == PI_FFN_GELU_ERF || a == PI_FFN_RELU;
}

enum pi_norm_kind {
    PI_NORM_RMS,   /* x / rms(x) * w */
    PI_NORM_LAYER, /* (x - mean) / std(x) * w + b */
};

/* What an architecture is, as data (arch.c): the forward pass reads these flags and the
 * per-layer description below, never the architecture's name. */
enum {
    PI_AF_NEOX = 1u << 0,       /* RoPE pairs (i, i + n_rot/2) */
    PI_AF_GATED = 1u << 1,      /* FFN down(act(gate x) * up x); else down(act(up x)) */
    PI_AF_PARALLEL = 1u << 2,   /* attention and FFN read the same input, x += both */
    PI_AF_EMBD_SCALE = 1u << 3, /* embeddings multiplied by sqrt(n_embd) */
    PI_AF_SPARSE = 1u << 4,     /* PowerInfer (PWRI) files of it run */
    PI_AF_MOE = 1u << 5,        /* its files may have mixture-of-experts layers */
    PI_AF_POS_EMBD = 1u << 6,   /* learned absolute positions (position_embd), no RoPE */
    /* gpt-oss: every layer has attention sinks (attn_sinks, [n_head]: a learned logit
     * per head that joins the softmax's denominator only), its FFN input norm is the
     * file's post_attention_norm (HF post_attention_layernorm), the router and the
     * experts have biases, local layers keep the global RoPE scaling, and YaRN's
     * correction range is not rounded to whole dimensions (HF "truncate": false) */
    PI_AF_SINKS = 1u << 7,
    PI_AF_FFN_NORM_POST_ATTN = 1u << 8,
    PI_AF_MOE_BIASES = 1u << 9,
    PI_AF_SWA_KEEP_SCALE = 1u << 10,
    PI_AF_YARN_EXACT = 1u << 11,
};

/* How a mixture-of-experts router turns its logits into expert weights. */
enum pi_moe_gating {
    PI_GATING_SOFTMAX = 1, /* softmax over all experts, then the top k (llama.cpp's 1) */
    PI_GATING_SIGMOID = 2, /* sigmoid per expert, then the top k (llama.cpp's 2) */
    PI_GATING_SOFTMAX_WEIGHT = 3, /* the top k of the logits, then softmax over those k
                                   * (llama.cpp's 3; gpt-oss) */
    PI_GATING_SQRT_SOFTPLUS = 4, /* sqrt(softplus(x)) per expert, then the top k (4) */
};

struct pi_arch_info {
    const char *name;          /* general.architecture */
    enum pi_arch arch;
    enum pi_norm_kind norm;
    enum pi_ffn_act act;
    unsigned flags;            /* PI_AF_* */
    /* Interleaved local/global attention when the file sets attention.sliding_window:
     * layer il is global when (il + 1) % swa_period == 0, local otherwise; 0: every
     * layer local (the window applies everywhere). */
    int swa_period;
    float swa_rope_base;       /* RoPE base of local layers when the file gives none; 0: the global one */
    /* Mixture-of-experts files: whether the top-k weights are renormalised to sum to 1
     * when the file has no <arch>.expert_weights_norm (llama.cpp's choice per
     * architecture: Mixtral and Qwen3-MoE do, Qwen2-MoE and OLMoE do not). */
    int moe_norm_default;
    /* The gating an architecture's routers use whatever the file says (llama.cpp
     * hard-codes it; a file's expert_gating_func that differs is refused); 0: the
     * file's key, default softmax. */
    enum pi_moe_gating moe_gating_fixed;
};

/* The table entry for general.architecture = name[0..len), or NULL. */
const struct pi_arch_info *pi_arch_find(const char *name, uint64_t len);
const struct pi_arch_info *pi_arch_info(enum pi_arch arch);

enum pi_rope_scaling {
    PI_ROPE_NONE,
    PI_ROPE_LINEAR,   /* positions divided by rope.scaling.factor */
    PI_ROPE_YARN,     /* YaRN ramp between interpolation and extrapolation */
    PI_ROPE_LONGROPE, /* per-pair factors, long or short by context length (Phi-3) */
};

struct pi_hparams {
    enum pi_arch arch;
    const struct pi_arch_info *info;
    int sparse;           /* PowerInfer file: predictors and ffn_down_t */
    int sparsified;       /* pi_model_sparsify's file: ffn_down_t and thresholds */
    int teal;             /* sparsified, method "teal": thresholds on act(gate) * up */
    int predictors;       /* fc1/fc2 in every layer: PowerInfer files, and sparsified
                           * files with trained predictors (tools/train_predictor.py) */
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
    float rope_scale;     /* linear or YaRN factor: positions are divided by it */
    enum pi_rope_scaling rope_scaling;
    int64_t rope_ctx_orig; /* rope.scaling.original_context_length (YaRN, LongRoPE) */
    float rope_attn_factor; /* rope.scaling.attn_factor, default 1 */
    float yarn_beta_fast, yarn_beta_slow;
    float norm_eps;       /* RMSNorm or LayerNorm epsilon, as the architecture's norm */
    float attn_scale;     /* scores = q.k * attn_scale */
    float attn_softcap;   /* attn_logit_softcapping; 0: none */
    float final_softcap;  /* final_logit_softcapping; 0: none */
    float embd_scale;     /* 1, or sqrt(n_embd) (PI_AF_EMBD_SCALE) */
    int64_t n_swa;        /* attention.sliding_window; 0: none */
    float sparse_threshold; /* powerinfer.sparse_threshold, default 0 */
    enum pi_ffn_act ffn_act;
    /* Mixture of experts (n_expert > 0): <arch>.expert_count experts per MoE layer, of
     * which expert_used_count run per token; each expert a gated FFN of n_ff_exp
     * neurons (expert_feed_forward_length, default n_ff); a shared expert of n_ff_shexp
     * (expert_shared_feed_forward_length, default n_ff_exp) where the file has one.
     * Weights: gating of the router logits, top k, renormalised when moe_norm, times
     * moe_scale (expert_weights_scale, default 1). */
    int64_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    enum pi_moe_gating moe_gating;
    int moe_norm;
    float moe_scale;
};

/* A norm: weight, and a bias for LayerNorm when the file has one. */
struct pi_norm_desc {
    const struct gguf_tensor *w, *b;
};

struct pi_layer_desc {
    /* attention: norm_attn(x), then q/k/v, per-head q/k norms, RoPE, attention, wo */
    struct pi_norm_desc norm_attn;        /* attn_norm, or Falcon 40B's attn_norm_2 */
    const struct gguf_tensor *wq;         /* {n_embd, n_head*head_dim_k}; NULL when fused */
    const struct gguf_tensor *wk;         /* {n_embd, n_head_kv*head_dim_k} */
    const struct gguf_tensor *wv;         /* {n_embd, n_head_kv*head_dim_v} */
    const struct gguf_tensor *wqkv;       /* fused {n_embd, q + k + v}: rows of q, k, v */
    const struct gguf_tensor *bq, *bk, *bv, *bqkv; /* biases, NULL when absent */
    const struct gguf_tensor *q_norm, *k_norm; /* [head_dim_k] per-head RMSNorm */
    const struct gguf_tensor *wo;         /* {n_head*head_dim_v, n_embd} */
    const struct gguf_tensor *bo;
    const struct gguf_tensor *attn_post_norm; /* RMSNorm of the attention output (Gemma) */
    const struct gguf_tensor *attn_sinks; /* [n_head] F32/F16/BF16 sink logits, or NULL */
    /* FFN: norm_ffn(x) (parallel blocks: NULL = the attention's normed input) */
    struct pi_norm_desc norm_ffn;
    const struct gguf_tensor *ffn_gate;   /* {n_embd, n_ff}: row r = neuron r; NULL: plain
                                           * FFN, or fused into ffn_up */
    const struct gguf_tensor *ffn_up;     /* {n_embd, n_ff}, or {n_embd, 2 n_ff} fused */
    int up_fused;                         /* ffn_up holds gate rows, then up rows */
    const struct gguf_tensor *ffn_down;   /* {n_ff, n_embd}, dense files; else NULL */
    const struct gguf_tensor *ffn_down_t; /* {n_embd, n_ff}, sparse files; else NULL */
    /* biases; in sparse files (OPT) b_up [n_ff] is added on the active rows and b_down
     * [n_embd] (PowerInfer's ffn_down_t.bias) once */
    const struct gguf_tensor *b_gate, *b_up, *b_down;
    const struct gguf_tensor *ffn_post_norm; /* RMSNorm of the FFN output (Gemma) */
    const struct gguf_tensor *fc1;        /* {n_embd, rank}: predictor, sparse files */
    const struct gguf_tensor *fc2;        /* {rank, n_ff} */
    int64_t pred_rank;                    /* 0 for dense files */
    /* A mixture-of-experts layer (ffn_gate_inp present; the dense FFN tensors above
     * are then NULL): the router {n_embd, n_expert}; the experts as 3-D tensors, gate
     * and up {n_embd, n_ff_exp, n_expert} (or fused: gate_up {n_embd, 2 n_ff_exp,
     * n_expert}, each expert's gate rows then its up rows), down {n_ff_exp, n_embd,
     * n_expert}; a shared expert {n_embd, n_ff_shexp} x2 and {n_ff_shexp, n_embd}, with
     * an optional sigmoid gate {n_embd} or {n_embd, 1}. */
    const struct gguf_tensor *router;
    const struct gguf_tensor *router_b;   /* [n_expert] router bias (gpt-oss), or NULL */
    /* expert biases (gpt-oss), or NULL: gate and up {n_ff_exp, n_expert}, down
     * {n_embd, n_expert}, row e = expert e's */
    const struct gguf_tensor *b_gate_exps, *b_up_exps, *b_down_exps;
    const struct gguf_tensor *gate_exps, *up_exps, *gate_up_exps, *down_exps;
    /* a sparsified file's experts' down projections transposed, {n_embd, n_ff_exp,
     * n_expert} (expert e: n_ff_exp rows of n_embd, row r = neuron r), instead of
     * down_exps */
    const struct gguf_tensor *down_exps_t;
    const struct gguf_tensor *gate_shexp, *up_shexp, *down_shexp, *gate_inp_shexp;
    /* resolved per layer */
    int64_t window;                       /* sliding window; 0: the whole context */
    float rope_base, rope_scale;          /* this layer's RoPE base and linear factor */
};

struct pi_model_desc {
    struct pi_hparams hp;
    const struct gguf_tensor *token_embd;  /* {n_embd, n_vocab} */
    struct pi_norm_desc output_norm;       /* [n_embd] */
    const struct gguf_tensor *output;      /* {n_embd, n_vocab}; == token_embd if tied */
    const struct gguf_tensor *rope_freqs;  /* [n_rot/2] Llama 3 frequency factors, or NULL */
    const struct gguf_tensor *rope_long, *rope_short; /* [n_rot/2] LongRoPE, or NULL */
    /* {n_embd, n_pos}: learned positions (PI_AF_POS_EMBD), position p at row p +
     * PI_POS_EMBD_OFFSET (OPT's offset of 2); NULL for the others */
    const struct gguf_tensor *pos_embd;
    struct pi_layer_desc *layers;          /* [n_layer] */
    int64_t max_rank;  /* the largest pred_rank (0: dense file) */
    /* powerinfer.sparsify.thresholds (sparsified files; checked: F32[n_layer], each
     * finite), else NULL */
    const struct gguf_kv *sparsify_thresholds;
    int64_t n_moe_layers; /* layers with experts (0: not a mixture-of-experts model) */
    int64_t max_ff;    /* the widest FFN hidden row: n_ff, n_ff_exp, n_ff_shexp */
    /* The widest activation row the forward pass hands an op: the largest of n_embd,
     * n_ff, the q/k/v/attention-output widths and max_rank. Scratch that an op sizes by
     * its input width is sized by this (and by n_ctx for attention scores, a context's
     * choice). */
    int64_t max_width;
};

#define PI_MAX_LAYERS 512
/* OPT's learned position table starts at row 2 (OPTLearnedPositionalEmbedding). */
#define PI_POS_EMBD_OFFSET 2
/* The most experts a mixture-of-experts layer may have. */
#define PI_MAX_EXPERTS 4096
/* The largest width a file may give anything that becomes an activation row (n_embd,
 * n_ff, n_head * head_dim, a predictor rank): [n_batch][width] scratch then stays far
 * from overflowing an int64_t or size_t. Larger: PI_ERR_FORMAT. */
#define PI_MAX_WIDTH ((int64_t)1 << 24)

/* Build and check the description. PI_ERR_UNSUPPORTED for an architecture, a tensor
 * type or a feature this build cannot run (every tensor the
 * forward pass would not read unless docs/formats.md lists it as harmless), PI_ERR_FORMAT for a missing or misshaped tensor or a
 * bad hyper-parameter; the message names the tensor or key and what was expected. `progress` (may be NULL) is polled per layer; non-zero aborts. */
int pi_model_desc_build(struct pi_model_desc *d, const struct gguf_file *f,
                        const struct pi_allocator *a, const struct pi_logger *lg,
                        int (*progress)(void *user, float frac), void *progress_user,
                        struct pi_error *err);
void pi_model_desc_free(struct pi_model_desc *d, const struct pi_allocator *a);

const char *pi_arch_name(enum pi_arch arch);

#endif
