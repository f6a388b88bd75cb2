/* cuda_common.cuh -- the GPU backend's shared internals: the backend and KV objects,
 * error recording, launch geometry, fp16 conversions, and the ops each .cu file
 * implements for cuda_backend.cu's vtable. Included by the .cu files only. */
#ifndef PI_CUDA_COMMON_CUH
#define PI_CUDA_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

#include "compat.h"

extern "C" {
#include "backend.h"
#include "powerinfer.h"
}

/* Segments of a graph region a backend records (later ones run op by op), and the
 * fewest ops worth recording. */
#define PI_GRAPH_SEGS    8
#define PI_GRAPH_MIN_OPS 8

/* One device, one stream. Ops are queued on `stream` and return at once; a failed
 * launch or an invalid argument is recorded in `err` (the first one wins) and
 * reported by sync and download, since ops return nothing. */
struct pi_backend {
    const struct pi_allocator *alloc;
    int device; /* ordinal */
    int warp;   /* the device's warp width (32 or 64), for launch geometry */
    int n_sm;   /* multiprocessors, to size split-K grids */
    cudaStream_t stream;
    int64_t max_tokens, max_width;
    float *scratch; /* split-K partial sums (matmul_t, attention) */
    size_t scratch_floats;
    int err; /* PI_OK or the first error met */
    /* Graph regions (backend.h, graph_begin): segment s of a region is recorded by
     * stream capture and run as graph[s], updated in place while the region's key
     * stays the same; a segment of fewer than PI_GRAPH_MIN_OPS ops is run op by op
     * the next times (direct[s]), as recording it costs more than it saves. */
    int region;     /* between graph_begin and graph_end */
    int capturing;  /* a capture is open on the stream (this thread made the device current) */
    int in_seg;     /* ops were queued since the last host interaction */
    int seg;        /* the segment those ops belong to */
    int seg_ops;    /* how many */
    int lost;       /* a segment of this region did not run */
    int graphs_off; /* after a failure: no more regions */
    uint64_t graph_key;
    cudaGraphExec_t graph[PI_GRAPH_SEGS];
    unsigned char direct[PI_GRAPH_SEGS];
};

/* K and V: F16 [n_layer][n_ctx][n_head_kv * head_dim], the CPU backend's layout. */
struct pi_kv {
    struct pi_kv_desc d;
    int64_t nk, nv;  /* values per position */
    uint16_t *k, *v; /* device memory */
};

/* Map a runtime error to a status; no device or no code for it is UNSUPPORTED. */
int pi_cuda_status(cudaError_t e);

/* Record the first error: a runtime error (cudaSuccess is ignored) or a status. */
void pi_cuda_note(struct pi_backend *b, cudaError_t e);
void pi_cuda_fail(struct pi_backend *b, int status);

/* After a launch: record a launch failure (bad configuration, no kernel image). */
static inline void pi_cuda_launched(struct pi_backend *b) {
    pi_cuda_note(b, cudaGetLastError());
}

/* Blocks for a grid-stride loop over n items with `threads` per block: enough to
 * fill the device, never above the x-dimension limit. */
static inline unsigned pi_cuda_grid(const struct pi_backend *b, int64_t n, int threads) {
    int64_t g = (n + threads - 1) / threads;
    const int64_t cap = (int64_t)b->n_sm * 32;
    if (g > cap)
        g = cap;
    return (unsigned)(g < 1 ? 1 : g);
}

#define PI_GRID_Y_MAX 65535

/* The grid of a kernel over n_x items (output rows or columns), per_x per block in x,
 * and n_tok tokens in tiles of `tile` in y, at most PI_GRID_Y_MAX (the kernel strides
 * over the tiles beyond). */
static inline dim3 pi_cuda_grid_tiles(int64_t n_x, int64_t per_x, int64_t n_tok, int64_t tile) {
    const int64_t tiles = (n_tok + tile - 1) / tile;
    return dim3((unsigned)((n_x + per_x - 1) / per_x),
                (unsigned)(tiles < PI_GRID_Y_MAX ? tiles : PI_GRID_Y_MAX));
}

/* ---- device helpers ------------------------------------------------------------ */

/* binary32 -> binary16, round to nearest even; the same bits as pi_fp32_to_fp16. */
static __device__ __forceinline__ uint16_t pi_f2h(float f) {
    const uint32_t x = __float_as_uint(f);
    const uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (exp == 0xffu) {
        uint32_t q = man >> 13;
        if (man != 0 && q == 0)
            q = 0x200u;
        return (uint16_t)(sign | 0x7c00u | q);
    }
    const int32_t e = (int32_t)exp - 112;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e >= 1) {
        uint32_t q = ((uint32_t)e << 10) | (man >> 13);
        const uint32_t rem = man & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    if (exp == 0 || 14 - e > 24)
        return (uint16_t)sign;
    const uint32_t shift = (uint32_t)(14 - e), m = 0x800000u | man;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

/* ---- ops by file ----------------------------------------------------------------- */

/* cuda_matmul.cu */
int pi_cuda_type_ok(uint32_t type);
void pi_cuda_matmul(struct pi_backend *b, const struct pi_weight *w, const float *x, int64_t n_tok,
                    float *y);
/* cuda_matmul_t.cu */
void pi_cuda_matmul_t(struct pi_backend *b, const struct pi_weight *w, const float *x,
                      int64_t n_tok, float *y);
void pi_cuda_get_rows(struct pi_backend *b, const struct pi_weight *w, const int32_t *ids,
                      int64_t n_tok, float *y);

/* cuda_ops.cu */
void pi_cuda_rmsnorm(struct pi_backend *b, const float *x, const struct pi_vector *g, float eps,
                     int64_t n_tok, float *y);
void pi_cuda_layernorm(struct pi_backend *b, const float *x, const struct pi_vector *g,
                       const struct pi_vector *bias, int64_t n, float eps, int64_t n_tok,
                       float *y);
void pi_cuda_rope(struct pi_backend *b, float *x, int64_t n_tok, int64_t n_head, int64_t head_dim,
                  int64_t pos0, const struct pi_rope *r);
void pi_cuda_kv_store(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                      int64_t n_tok, const float *k, const float *v);
void pi_cuda_attention(struct pi_backend *b, struct pi_kv *kv, int64_t layer, const float *q,
                       int64_t n_tok, int64_t pos0, const struct pi_attn *a, float *out);
int pi_cuda_attention_ok(const struct pi_backend *b, const struct pi_kv_desc *d);
void pi_cuda_ffn_act(struct pi_backend *b, enum pi_act act, float *g, const float *u, int64_t n);
void pi_cuda_ffn_act_masked(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                            int64_t n_tok, int64_t n, const float *score, int64_t score_stride,
                            const int32_t *map, float thr);
void pi_cuda_ffn_act_thr(struct pi_backend *b, enum pi_act act, float *g, const float *u, int64_t n,
                         float thr, int teal);
void pi_cuda_add(struct pi_backend *b, float *y, const float *x, int64_t n);
void pi_cuda_add_rows(struct pi_backend *b, float *y, const struct pi_vector *v, int64_t n_tok);
void pi_cuda_scale(struct pi_backend *b, float *x, float s, int64_t n);
void pi_cuda_softcap(struct pi_backend *b, float *x, float cap, int64_t n);
/* Writes PI_WARP as compiled for the device into *out (device memory). */
void pi_cuda_probe(struct pi_backend *b, int *out);

#endif
