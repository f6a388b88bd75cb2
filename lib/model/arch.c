/* arch.c -- the architecture table: what varies between the model families the forward
 * pass runs, as data. Adding a family is an entry here plus, where its file layout
 * differs, the tensor names desc.c reads (docs/design.md, "Adding an architecture"). */
#include <string.h>

#include "model/desc.h"

static const struct pi_arch_info arch_table[PI_ARCH_COUNT] = {
    /* llama: also Mixtral (experts, renormalised top-k weights) */
    [PI_ARCH_LLAMA] = {"llama", PI_ARCH_LLAMA, PI_NORM_RMS, PI_FFN_SILU,
                       PI_AF_GATED | PI_AF_SPARSE | PI_AF_MOE, 0, 0.0f, 1},
    [PI_ARCH_BAMBOO] = {"bamboo", PI_ARCH_BAMBOO, PI_NORM_RMS, PI_FFN_RELU_BOTH,
                        PI_AF_GATED | PI_AF_SPARSE, 0, 0.0f},
    [PI_ARCH_QWEN2] = {"qwen2", PI_ARCH_QWEN2, PI_NORM_RMS, PI_FFN_SILU,
                       PI_AF_GATED | PI_AF_NEOX, 0, 0.0f},
    [PI_ARCH_QWEN3] = {"qwen3", PI_ARCH_QWEN3, PI_NORM_RMS, PI_FFN_SILU,
                       PI_AF_GATED | PI_AF_NEOX, 0, 0.0f},
    /* Gemma 2: even layers local; Gemma 3: five local layers, then a global one, the
     * local ones with RoPE base 10000 */
    [PI_ARCH_GEMMA2] = {"gemma2", PI_ARCH_GEMMA2, PI_NORM_RMS, PI_FFN_GELU,
                        PI_AF_GATED | PI_AF_NEOX | PI_AF_EMBD_SCALE, 2, 0.0f},
    [PI_ARCH_GEMMA3] = {"gemma3", PI_ARCH_GEMMA3, PI_NORM_RMS, PI_FFN_GELU,
                        PI_AF_GATED | PI_AF_NEOX | PI_AF_EMBD_SCALE, 6, 10000.0f},
    [PI_ARCH_PHI3] = {"phi3", PI_ARCH_PHI3, PI_NORM_RMS, PI_FFN_SILU,
                      PI_AF_GATED | PI_AF_NEOX, 0, 0.0f},
    [PI_ARCH_STARCODER2] = {"starcoder2", PI_ARCH_STARCODER2, PI_NORM_LAYER, PI_FFN_GELU,
                            PI_AF_NEOX, 0, 0.0f},
    /* Falcon's FFN is nn.GELU(), the exact one; PowerInfer's sparse files (ReluFalcon)
     * run relu(up) */
    [PI_ARCH_FALCON] = {"falcon", PI_ARCH_FALCON, PI_NORM_LAYER, PI_FFN_GELU_ERF,
                        PI_AF_NEOX | PI_AF_PARALLEL | PI_AF_SPARSE, 0, 0.0f},
    [PI_ARCH_QWEN2MOE] = {"qwen2moe", PI_ARCH_QWEN2MOE, PI_NORM_RMS, PI_FFN_SILU,
                          PI_AF_GATED | PI_AF_NEOX | PI_AF_MOE, 0, 0.0f, 0},
    [PI_ARCH_QWEN3MOE] = {"qwen3moe", PI_ARCH_QWEN3MOE, PI_NORM_RMS, PI_FFN_SILU,
                          PI_AF_GATED | PI_AF_NEOX | PI_AF_MOE, 0, 0.0f, 1},
    [PI_ARCH_OLMOE] = {"olmoe", PI_ARCH_OLMOE, PI_NORM_RMS, PI_FFN_SILU,
                       PI_AF_GATED | PI_AF_NEOX | PI_AF_MOE, 0, 0.0f, 0},
    /* OPT (pre-LN, as PowerInfer's converter writes it): relu(up x + b) FFN */
    [PI_ARCH_OPT] = {"opt", PI_ARCH_OPT, PI_NORM_LAYER, PI_FFN_RELU,
                     PI_AF_POS_EMBD | PI_AF_SPARSE, 0, 0.0f},
    /* gpt-oss: even layers local (llama.cpp's swa pattern 2, HF layer_types), top-k of
     * the router logits then softmax over them, no renormalisation */
    [PI_ARCH_GPT_OSS] = {"gpt-oss", PI_ARCH_GPT_OSS, PI_NORM_RMS, PI_FFN_SWIGLU_OAI,
                         PI_AF_GATED | PI_AF_NEOX | PI_AF_MOE | PI_AF_SINKS |
                             PI_AF_FFN_NORM_POST_ATTN | PI_AF_MOE_BIASES |
                             PI_AF_SWA_KEEP_SCALE | PI_AF_YARN_EXACT,
                         2, 0.0f, 0, PI_GATING_SOFTMAX_WEIGHT},
};

const struct pi_arch_info *pi_arch_find(const char *name, uint64_t len) {
    for (int i = 0; i < PI_ARCH_COUNT; i++)
        if (strlen(arch_table[i].name) == len && memcmp(arch_table[i].name, name, len) == 0)
            return &arch_table[i];
    return NULL;
}

const struct pi_arch_info *pi_arch_info(enum pi_arch arch) {
    return (unsigned)arch < PI_ARCH_COUNT ? &arch_table[arch] : NULL;
}

const char *pi_arch_name(enum pi_arch arch) {
    const struct pi_arch_info *a = pi_arch_info(arch);
    return a ? a->name : "?";
}
