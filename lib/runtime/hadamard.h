/* hadamard.h -- the normalized Walsh-Hadamard transform that a Q4_0 KV cache applies to
 * its keys (and attention to the queries scored against them).
 *
 * H (size n, a power of two) is symmetric and orthogonal once scaled by 1/sqrt(n), so
 * (H q) . (H k) = q . k and H (H k) = k. Rotating a key spreads a few large channels
 * (outliers) over the whole block, so its 4-bit blocks round all values with a step
 * set by the rotated vector's typical size instead of its outlier's: SmolLM2's
 * perplexity with a Q4_0 cache rose by 19 % without it (docs/performance.md). */
#ifndef PI_RUNTIME_HADAMARD_H
#define PI_RUNTIME_HADAMARD_H

#include <math.h>
#include <stdint.h>

/* The block a head of `head_dim` values is rotated in: the largest power of two that
 * divides it, at most 256 (head dims multiples of 32 give at least 32). */
static inline int64_t pi_hadamard_block(int64_t head_dim) {
    int64_t b = 1;
    while (b < 256 && head_dim % (2 * b) == 0)
        b *= 2;
    return b;
}

/* x[0..n) = H x in each consecutive block of `block` values (n a multiple of it), in
 * place: log2(block) butterfly passes, then the scale 1/sqrt(block). */
static inline void pi_hadamard(float *x, int64_t n, int64_t block) {
    const float s = 1.0f / sqrtf((float)block);
    for (int64_t o = 0; o < n; o += block) {
        float *v = x + o;
        for (int64_t h = 1; h < block; h *= 2)
            for (int64_t i = 0; i < block; i += 2 * h)
                for (int64_t j = i; j < i + h; j++) {
                    const float a = v[j], b = v[j + h];
                    v[j] = a + b;
                    v[j + h] = a - b;
                }
        for (int64_t i = 0; i < block; i++)
            v[i] *= s;
    }
}

#endif
