/* testmodel.h -- writes small llama/bamboo models (dense GGUF or PowerInfer PWRI)
 * with random weights, and deliberately broken variants, for tests. */
#ifndef PI_TESTS_TESTMODEL_H
#define PI_TESTS_TESTMODEL_H

#include <stdint.h>

struct tm_spec {
    const char *arch;          /* general.architecture */
    int sparse;                /* 1: PWRI magic, ffn_down_t + fc1/fc2 */
    int n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx;
    uint32_t wtype;            /* type of 2-D weights: F32, F16, Q8_0, Q4_0 */
    int tied;                  /* no output.weight */
    int pred_rank;             /* predictor rank of layer 0; layer l has rank + l */
    int with_tokens;           /* write tokenizer.ggml.tokens (n_vocab strings) */
    const char *omit;          /* tensor not to write */
    const char *misshape;      /* tensor written with ne[1] + 1 (ne[0] + 1 for 1-D) */
    const char *extra;         /* an extra F32 tensor {n_embd, n_ff} to add */
    const char *skip_key;      /* metadata key not to write (suffix after "<arch>.") */
    float threshold;           /* powerinfer.sparse_threshold when sparse */
    uint32_t seed;
    const char *poison;        /* F32/F16 tensor whose first element is poison_value */
    float poison_value;
    const char *extra_key;     /* a u32 metadata key "<arch>.<extra_key>" to add */
    uint32_t extra_key_value;
    const char *extra_f32_key; /* an f32 metadata key "<arch>.<extra_f32_key>" to add */
    float extra_f32_value;
};

void tm_default(struct tm_spec *s);
/* Returns 0 (PI_OK) or a negative status. */
int tm_write(const struct tm_spec *s, const char *path);
/* tm_default with arch, sparse, wtype and seed, n_ff 128 and predictor rank 32 (room for
 * interesting neuron splits): the model of the batch and hybrid tests. */
int tm_write_split(const char *path, const char *arch, int sparse, uint32_t wtype,
                   uint32_t seed);

#endif
