/* quantize.h -- scalar reference quantizers: float rows into GGUF blocks.
 *
 * Each quantizer gives, bit for bit, the bytes of the gguf Python package's
 * reference quantizer (gguf.quants.quantize, gguf 0.19) for the same float32 input:
 * the same choice of scale (the first element of largest magnitude for Q4_0 / Q5_0;
 * for Q4_1 / Q5_1 the min and max, the later of equal zeros winning as numpy's
 * reductions do), the same float32 operations in the same order (no FMA
 * contraction), the same rounding (trunc(x + 8.5) for Q4_0, round half away from
 * zero for Q8_0, the nearest grid value, the first of equals, for MXFP4), scales
 * rounded to f16 to nearest even, and the same conversion of
 * out-of-range values to bytes (the low byte of a truncating conversion to int32,
 * 0 for NaN, infinities and values beyond int32, which is what numpy does on
 * x86-64). tests/format/test_quantize.c checks them against a fixture made by
 * tests/fixtures/gen_quantize_fixtures.py; tests/format/test_quantize.py checks
 * whole files against the package. */
#ifndef PI_RUNTIME_QUANTIZE_H
#define PI_RUNTIME_QUANTIZE_H

#include <stdint.h>

/* 1 if pi_quantize_row can produce `type`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, MXFP4. */
int pi_quantize_supported(uint32_t type);

/* Quantize the n floats at src (n a multiple of the type's block size) into dst,
 * pi_type_row_bytes(type, n) bytes. `type` must be supported. */
void pi_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* The same block layouts with the scale (and min) chosen by least squares per block
 * (quantize.c says how): a smaller error than pi_quantize_row's, not gguf's bytes.
 * Q4_0, Q5_0, Q8_0, Q4_1, Q5_1; other supported types as pi_quantize_row. For
 * requantizing already-quantized weights along another axis (pi-sparsify's
 * ffn_down_t). */
void pi_quantize_row_mse(uint32_t type, const float *src, void *dst, int64_t n);

void pi_quantize_f32(const float *src, void *dst, int64_t n);
void pi_quantize_f16(const float *src, void *dst, int64_t n);
void pi_quantize_bf16(const float *src, void *dst, int64_t n);
void pi_quantize_q4_0(const float *src, void *dst, int64_t n);
void pi_quantize_q4_1(const float *src, void *dst, int64_t n);
void pi_quantize_q5_0(const float *src, void *dst, int64_t n);
void pi_quantize_q5_1(const float *src, void *dst, int64_t n);
void pi_quantize_q8_0(const float *src, void *dst, int64_t n);
void pi_quantize_mxfp4(const float *src, void *dst, int64_t n);

#endif
