#include "runtime/types.h"

#include "powerinfer.h"

/* Block geometry from the GGUF specification (and the gguf package's
 * GGML_QUANT_SIZES, which tests/unit/test_types.c is checked against). */
static const struct pi_type_traits traits[PI_TYPE_ID_LIMIT] = {
    [0] = {"F32", 1, 4, pi_dequant_f32},
    [1] = {"F16", 1, 2, pi_dequant_f16},
    [2] = {"Q4_0", 32, 18, pi_dequant_q4_0},
    [3] = {"Q4_1", 32, 20, pi_dequant_q4_1},
    [6] = {"Q5_0", 32, 22, pi_dequant_q5_0},
    [7] = {"Q5_1", 32, 24, pi_dequant_q5_1},
    [8] = {"Q8_0", 32, 34, pi_dequant_q8_0},
    [9] = {"Q8_1", 32, 40, 0},
    [10] = {"Q2_K", 256, 84, pi_dequant_q2_k},
    [11] = {"Q3_K", 256, 110, pi_dequant_q3_k},
    [12] = {"Q4_K", 256, 144, pi_dequant_q4_k},
    [13] = {"Q5_K", 256, 176, pi_dequant_q5_k},
    [14] = {"Q6_K", 256, 210, pi_dequant_q6_k},
    [15] = {"Q8_K", 256, 292, 0},
    [16] = {"IQ2_XXS", 256, 66, 0},
    [17] = {"IQ2_XS", 256, 74, 0},
    [18] = {"IQ3_XXS", 256, 98, 0},
    [19] = {"IQ1_S", 256, 50, 0},
    [20] = {"IQ4_NL", 32, 18, pi_dequant_iq4_nl},
    [21] = {"IQ3_S", 256, 110, 0},
    [22] = {"IQ2_S", 256, 82, 0},
    [23] = {"IQ4_XS", 256, 136, pi_dequant_iq4_xs},
    [24] = {"I8", 1, 1, 0},
    [25] = {"I16", 1, 2, 0},
    [26] = {"I32", 1, 4, 0},
    [27] = {"I64", 1, 8, 0},
    [28] = {"F64", 1, 8, 0},
    [29] = {"IQ1_M", 256, 56, 0},
    [30] = {"BF16", 1, 2, pi_dequant_bf16},
    [34] = {"TQ1_0", 256, 54, 0},
    [35] = {"TQ2_0", 256, 66, 0},
    [39] = {"MXFP4", 32, 17, pi_dequant_mxfp4},
    [40] = {"NVFP4", 64, 36, 0},
    [41] = {"Q1_0", 128, 18, 0},
};

const struct pi_type_traits *pi_type_traits(uint32_t type) {
    if (type >= PI_TYPE_ID_LIMIT || !traits[type].name)
        return 0;
    return &traits[type];
}

int pi_type_is_computable(uint32_t type) {
    const struct pi_type_traits *t = pi_type_traits(type);
    return t && t->to_float;
}

uint64_t pi_type_row_bytes(uint32_t type, int64_t n) {
    const struct pi_type_traits *t = pi_type_traits(type);
    if (!t || n < 0 || n % t->block_size)
        return 0;
    return (uint64_t)(n / t->block_size) * t->block_bytes;
}
