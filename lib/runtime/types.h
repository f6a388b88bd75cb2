/* types.h -- tensor element types: traits table and scalar dequantizers.
 *
 * Type ids are GGUF's (ggml_type). The traits table knows the block geometry of
 * every id a GGUF file may carry, so any file can be validated and described; the
 * dequantizers exist for the types the engine computes with (pi_type_is_computable). */
#ifndef PI_RUNTIME_TYPES_H
#define PI_RUNTIME_TYPES_H

#include <stdint.h>

#define PI_TYPE_ID_LIMIT 64 /* every known id is below this */

/* GGUF ids of computable types that include/powerinfer.h does not name. */
enum {
    PI_TYPE_ID_IQ4_NL = 20,
    PI_TYPE_ID_IQ4_XS = 23,
};

struct pi_type_traits {
    const char *name;     /* GGUF name; NULL: id unknown */
    uint32_t block_size;  /* elements per block */
    uint32_t block_bytes; /* bytes per block */
    /* Scalar reference: dequantize n elements (n a multiple of block_size) from the
     * blocks at src into dst. NULL if the engine cannot compute with the type. */
    void (*to_float)(const void *src, float *dst, int64_t n);
};

/* Traits of `type`, or NULL if the id is unknown. */
const struct pi_type_traits *pi_type_traits(uint32_t type);

/* 1 if weights of this type can be used in computation (a dequantizer exists). */
int pi_type_is_computable(uint32_t type);

/* Bytes of one row of `n` elements; 0 if the type is unknown or n is not a multiple
 * of the block size. */
uint64_t pi_type_row_bytes(uint32_t type, int64_t n);

/* Scalar dequantizers (reference kernels), dequant.c. n is a multiple of the type's
 * block size. */
void pi_dequant_f32(const void *src, float *dst, int64_t n);
void pi_dequant_f16(const void *src, float *dst, int64_t n);
void pi_dequant_bf16(const void *src, float *dst, int64_t n);
void pi_dequant_q4_0(const void *src, float *dst, int64_t n);
void pi_dequant_q4_1(const void *src, float *dst, int64_t n);
void pi_dequant_q5_0(const void *src, float *dst, int64_t n);
void pi_dequant_q5_1(const void *src, float *dst, int64_t n);
void pi_dequant_q8_0(const void *src, float *dst, int64_t n);
void pi_dequant_q2_k(const void *src, float *dst, int64_t n);
void pi_dequant_q3_k(const void *src, float *dst, int64_t n);
void pi_dequant_q4_k(const void *src, float *dst, int64_t n);
void pi_dequant_q5_k(const void *src, float *dst, int64_t n);
void pi_dequant_q6_k(const void *src, float *dst, int64_t n);
void pi_dequant_iq4_nl(const void *src, float *dst, int64_t n);
void pi_dequant_iq4_xs(const void *src, float *dst, int64_t n);
void pi_dequant_mxfp4(const void *src, float *dst, int64_t n);

/* The 16 values of the non-linear 4-bit grid of IQ4_NL and IQ4_XS: a weight's 4-bit
 * quant q stands for pi_iq4_grid[q] times its block scale. */
extern const int8_t pi_iq4_grid[16];

/* MXFP4's 16 codes as twice their E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
 * negatives, bit 3 the sign): a weight is pi_mxfp4_grid[q] times
 * pi_e8m0_half_to_fp32(e) (runtime/fp16.h), e the block's exponent byte. */
extern const int8_t pi_mxfp4_grid[16];

#endif
