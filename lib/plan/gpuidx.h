/* gpuidx.h -- PowerInfer's GPU index file, `<model>.generated.gpuidx`: which FFN neurons
 * of each layer live on the device. docs/formats.md ("GPU index") describes the format.
 *
 * The file is GGUF v3 with the magic rewritten to "PWRI", three keys
 * (general.architecture = "generic.gpu_index", generic.gpu_index.block_count u32,
 * split.vram_capacity u64) and two I32 tensors per layer in this order:
 *   blk.L.gpu_idx    [n_ff]  1 if neuron r is on the device, else 0
 *   blk.L.gpu_bucket [k_L]   the ids r with gpu_idx[r] == 1, ascending (k_L may be 0)
 * PowerInfer's runtime reads the tensors by position (2L, 2L+1), not by name.
 *
 * PowerInfer's bundled gguf-py numbers I32 as ggml type 18 (today's IQ3_XXS); today's
 * numbering, and the pip `gguf` package, use 26. The reader takes both for this file
 * only; the writer writes 18, so that PowerInfer's own ggml can load the file.
 *
 * Our three optional keys (written always, read when present) record what the index was
 * made for, so that a cached file can be recognised as stale:
 *   powerinfer.plan.model_id  u64  identity of the model
 *   powerinfer.plan.stats_id  u64  identity of the activation statistics
 *   powerinfer.plan.budget    u64  the whole device budget in bytes (split.vram_capacity
 *                                  is only what was left for FFN neurons after the dense
 *                                  parts, PowerInfer's meaning) */
#ifndef PI_PLAN_GPUIDX_H
#define PI_PLAN_GPUIDX_H

#include <stdint.h>

#include "util/alloc.h"
#include "util/error.h"

#define PI_GPUIDX_ARCH         "generic.gpu_index"
#define PI_GPUIDX_TYPE_I32_OLD 18u /* I32 in PowerInfer's ggml */

/* Shapes the reader and writer take: n_ff is bounded by the i32 neuron ids. */
#define PI_GPUIDX_MAX_LAYER (1 << 20)
#define PI_GPUIDX_MAX_FF    INT32_MAX

struct pi_gpuidx {
    int64_t n_layer, n_ff;
    uint8_t *neuron;   /* [n_layer][n_ff]: 1 = on the device, 0 = on the host */
    uint64_t capacity; /* split.vram_capacity: bytes left for FFN neurons */
    int has_key;       /* 1 when the three powerinfer.plan.* keys below were present */
    uint64_t model_id; /* powerinfer.plan.model_id: the model it was made for */
    uint64_t stats_id; /* powerinfer.plan.stats_id: the activation statistics */
    uint64_t budget;   /* powerinfer.plan.budget: the whole device budget in bytes */
    /* Owns `neuron`. A struct filled by hand for pi_gpuidx_write may leave it zeroed:
     * the default allocator is then used for the writer's scratch memory. */
    struct pi_allocator alloc;
};

/* Read and validate the index at `path` (borrowed for the call) for a model with n_layer
 * layers of n_ff neurons; `a` (NULL: the default allocator) is copied into out->alloc.
 * The file is never trusted: magic GGUF or PWRI; split.vram_capacity present and u64;
 * general.architecture, when present, "generic.gpu_index"; block_count, when present,
 * n_layer; the powerinfer.plan.* keys all three or none, each u64; exactly 2 * n_layer
 * tensors, by position blk.L.gpu_idx I32 [n_ff] holding only 0 and 1, and
 * blk.L.gpu_bucket I32 [k] strictly ascending, in range and equal to the ids where
 * gpu_idx is 1.
 * Returns PI_OK; PI_ERR_INVALID_ARG (NULL path or out, shape out of range); PI_ERR_IO
 * (cannot open or map, with the OS reason); PI_ERR_FORMAT (anything wrong in the file,
 * named in err, including a truncated file); PI_ERR_UNSUPPORTED (a big-endian GGUF);
 * PI_ERR_NOMEM. On failure *out is zeroed and nothing is held. */
int pi_gpuidx_read(const char *path, int64_t n_layer, int64_t n_ff, const struct pi_allocator *a,
                   struct pi_gpuidx *out, struct pi_error *err);

/* Write `g` (borrowed for the call) to `path` as PowerInfer writes it (magic PWRI,
 * version 3, alignment 32, the three PowerInfer keys, then our three powerinfer.plan.*
 * keys, tensors in PowerInfer's order, names and type id) under a temporary name in the
 * same directory, renamed over `path` on success; on failure the temporary file is
 * removed and `path` is left as it was. has_key is ignored: the plan keys are always
 * written. Returns PI_OK; PI_ERR_INVALID_ARG (NULL argument, shape out of range, a
 * neuron value other than 0 or 1); PI_ERR_NOMEM; PI_ERR_IO (with the path and the OS
 * reason). */
int pi_gpuidx_write(const char *path, const struct pi_gpuidx *g, struct pi_error *err);

/* Release what pi_gpuidx_read allocated and zero *g. Accepts NULL and a zeroed struct. */
void pi_gpuidx_free(struct pi_gpuidx *g);

#endif
