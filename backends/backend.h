/* backend.h -- the backend interface: one const struct of function pointers per
 * backend (CPU; CUDA and HIP in backends/cuda). The forward pass in lib/infer/ sees
 * only this vtable and the placement plan, never a backend's internals.
 *
 * Memory model: a backend owns its buffers (device memory for a GPU, host memory for
 * the CPU). Weights are described by pi_weight views whose data lies in that backend's
 * memory (the host's mapped file for the CPU, buf_alloc'd and uploaded for a device);
 * activations are float arrays in backend memory, row-major [n_tok][width].
 *
 * Queue: ops and upload are queued in order on the backend's one queue and may return
 * before they run (a GPU); a host buffer passed to upload may be reused as soon as
 * upload returns. download waits for every queued op, then copies; sync waits for
 * every queued op and returns the first error any of them met (a GPU reports kernel
 * failures there; ops themselves return nothing). So the host overlaps its own work
 * with a device's by queueing the device's ops first and downloading their result
 * last. The CPU backend runs each op before returning; its sync is a no-op.
 *
 * Optional members may be NULL; the fallback is stated next to each. A backend used
 * only as the hybrid executor's device (lib/infer/forward.c) needs: create, destroy,
 * n_threads, buf_*, upload, download, sync, kv_* (all of them), matmul, matmul_t, rmsnorm, rope,
 * kv_store, attention, ffn_act, ffn_act_masked, add, and for the architectures that use
 * them layernorm, add_rows, scale and softcap (lib/infer/exec.c refuses to place a part
 * that needs a missing one); matmul_rows, matmul_t_rows and get_rows are needed only by
 * the main (CPU) backend. */
#ifndef PI_BACKEND_H
#define PI_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "util/alloc.h"

/* A 2-D weight matrix: n_out rows of n_in values of `type`, row_bytes apart.
 * GGUF {ne0, ne1} = {n_in, n_out}. */
struct pi_weight {
    const void *data;
    uint32_t type;
    int64_t n_in;
    int64_t n_out;
    size_t row_bytes;
};

/* A 1-D vector of n values of `type` (norm weights). */
struct pi_vector {
    const void *data;
    uint32_t type;
    int64_t n;
};

/* FFN activations (ffn_act). The gated ones combine the gate g with the up
 * projection u; the plain ones (PI_ACT_SILU and after) transform g alone, u unused. */
enum pi_act {
    PI_ACT_SILU_MUL,      /* g = silu(g) * u */
    PI_ACT_RELU_MUL,      /* g = relu(g) * u */
    PI_ACT_RELU_RELU_MUL, /* g = relu(g) * relu(u) */
    PI_ACT_GELU_MUL,      /* g = gelu(g) * u  (tanh approximation) */
    PI_ACT_GELU_ERF_MUL,  /* g = gelu_erf(g) * u */
    PI_ACT_SWIGLU_OAI,    /* gpt-oss: g' = min(g, 7), g = g' sigmoid(1.702 g') *
                           * (clamp(u, -7, 7) + 1) */
    PI_ACT_SILU,          /* g = silu(g) */
    PI_ACT_GELU,          /* g = gelu(g) */
    PI_ACT_GELU_ERF,      /* g = gelu_erf(g) */
    PI_ACT_RELU,          /* g = relu(g) */
    PI_ACT_RELU_SQR,      /* g = relu(g)^2 */
    PI_ACT_COUNT
};

/* 1 for the activations that read u. */
static inline int pi_act_gated(enum pi_act a) {
    return a < PI_ACT_SILU;
}

/* Rotary embedding of one layer (rope). Pair i of a head (i < n_rot / 2) rotates by
 *   theta = pos * base^(-2i / n_rot) / factors[i]          (factors NULL: 1)
 * scaled for long contexts: plain and linear scaling use theta * freq_scale; YaRN
 * (ext_factor != 0) mixes the two per pair, theta_s = theta * freq_scale:
 *   lo = max(0, floor(c(beta_fast))), hi = min(n_rot - 1, ceil(c(beta_slow))),
 *   (yarn_exact: c(beta_fast) and c(beta_slow) as they are, not rounded outwards),
 *   c(b) = n_rot * ln(n_ctx_orig / (2 pi b)) / (2 ln base),
 *   ramp = (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)) * ext_factor,
 *   theta' = theta_s * (1 - ramp) + theta * ramp,
 * and multiplies cos and sin by attn_factor (times 1 + 0.1 ln(1 / freq_scale) under
 * YaRN): GGUF's meaning of these keys, the one Hugging Face's rope types share. */
struct pi_rope {
    int64_t n_rot;        /* rotated values per head: even, <= head_dim */
    int neox;             /* pairs (i, i + n_rot/2); 0: (2i, 2i+1) */
    float base;           /* rope.freq_base */
    float freq_scale;     /* 1 / the linear (or YaRN) factor */
    const float *factors; /* [n_rot / 2] in backend memory, or NULL */
    float attn_factor;    /* 1: none */
    float ext_factor;     /* 0: no YaRN ramp */
    float beta_fast, beta_slow;
    int64_t n_ctx_orig;   /* YaRN: the context length the model was trained with */
    int yarn_exact;       /* YaRN: 1 = the correction range unrounded (gpt-oss) */
};

/* Attention options of one layer (attention). */
struct pi_attn {
    float scale;    /* scores = q.k * scale; usually 1 / sqrt(head_dim_k) */
    float softcap;  /* > 0: scores = softcap * tanh(scores / softcap); 0: none */
    int64_t window; /* > 0: a query at position p sees only positions > p - window */
    /* [n_head] in backend memory, or NULL: head h's sink logit s_h joins the softmax's
     * denominator only, p_i = e^(x_i) / (e^(s_h) + sum_j e^(x_j)) (gpt-oss); never
     * combined with softcap */
    const float *sinks;
};

/* How a KV cache stores its values (pi_kv_desc.type). */
enum pi_kv_type {
    PI_KV_F16 = 0, /* binary16 */
    PI_KV_Q8_0 = 1, /* GGUF Q8_0 blocks (32 values: an F16 scale, 32 int8), each head's
                     * slice whole blocks (head dims multiples of 32); the CPU backend only */
    PI_KV_Q4_0 = 2  /* GGUF Q4_0 blocks (32 values: an F16 scale, 16 bytes of nibbles),
                     * the same conditions */
};

/* Bytes of n values (one position's K or V) in a cache of this type. */
static inline size_t pi_kv_row_bytes(int type, int64_t n) {
    return type == PI_KV_Q8_0   ? (size_t)(n / 32) * 34
           : type == PI_KV_Q4_0 ? (size_t)(n / 32) * 18
                                : (size_t)n * 2;
}

/* Geometry of a KV cache: n_layer x n_ctx positions of n_kv values (n_head_kv * head
 * dim) for K and for V, keys stored as `type` and values as `type_v` (zero: F16). */
struct pi_kv_desc {
    int64_t n_layer, n_ctx, n_head, n_head_kv, head_dim_k, head_dim_v;
    int type;   /* the keys' enum pi_kv_type; kv_create refuses one the backend does not store */
    int type_v; /* the values' (each of the two types may be any the backend stores) */
};

struct pi_backend_config {
    const struct pi_allocator *alloc;
    int n_threads;      /* CPU: worker threads including the caller */
    int64_t max_tokens; /* most tokens an op will see at once */
    int64_t max_width;  /* widest activation row an op will see */
    int f32_activations; /* 1: never quantize activations (see pi_ctx_params) */
    int device;          /* device ordinal (GPU backends); 0 for the CPU */
};

/* What a device is (device_info). */
struct pi_device_info {
    char name[128];     /* e.g. "NVIDIA H200" */
    uint64_t mem_total; /* bytes */
    uint64_t mem_free;  /* bytes free when asked */
};

struct pi_backend;
struct pi_kv;

struct pi_backend_vtable {
    const char *name;
    int (*create)(struct pi_backend **out, const struct pi_backend_config *cfg);
    void (*destroy)(struct pi_backend *b);
    /* Change the worker count; NULL: fixed. */
    int (*set_threads)(struct pi_backend *b, int n_threads);
    int (*n_threads)(const struct pi_backend *b);

    /* Buffers in backend memory. upload/download copy between host and backend. */
    int (*buf_alloc)(struct pi_backend *b, size_t size, void **out);
    void (*buf_free)(struct pi_backend *b, void *buf);
    int (*upload)(struct pi_backend *b, void *dst, const void *src, size_t size);
    int (*download)(struct pi_backend *b, void *dst, const void *src, size_t size);
    /* Wait for every queued op; PI_OK or the first error an op met. */
    int (*sync)(struct pi_backend *b);
    /* The device's name and memory; NULL: unknown (the CPU). */
    int (*device_info)(struct pi_backend *b, struct pi_device_info *out);
    /* 1 if matmul and matmul_t take weights of this type; NULL: every computable type
     * (pi_type_is_computable). The executor keeps other weights on the host. */
    int (*supports)(const struct pi_backend *b, uint32_t type);

    /* KV cache; entries beyond the positions written are never read. Its "layers" are
     * slots: a context with several sequences asks for n_layer * n_seq of them and
     * uses slot layer * n_seq + seq (kv_store and attention never mix slots). */
    int (*kv_create)(struct pi_backend *b, const struct pi_kv_desc *d, struct pi_kv **out);
    void (*kv_destroy)(struct pi_backend *b, struct pi_kv *kv);
    /* Copy positions pos0 .. pos0 + n - 1 of slot `layer` out of the cache (kv_get,
     * waits for queued ops) or into it (kv_set, done when it returns), as stored: k
     * [n][pi_kv_row_bytes(type, n_head_kv * head_dim_k)] and v likewise with head_dim_v
     * bytes, host memory. PI_OK or the first error. */
    int (*kv_get)(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0, int64_t n,
                  void *k, void *v);
    int (*kv_set)(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0, int64_t n,
                  const void *k, const void *v);

    /* ---- ops ---- */
    /* y[t][r] = sum_i W[r][i] * x[t][i]; x [n_tok][n_in], y [n_tok][n_out]. */
    void (*matmul)(struct pi_backend *b, const struct pi_weight *w, const float *x,
                   int64_t n_tok, float *y);
    /* matmul of nw weights of the same n_in on the same x, ys[i] as matmul would write
     * it (q, k and v; gate and up): the activations are prepared once. NULL: nw matmul
     * calls. */
    void (*matmul_n)(struct pi_backend *b, int nw, const struct pi_weight *const *ws,
                     const float *x, int64_t n_tok, float *const *ys);
    /* y[t][i] = sum_r x[t][r] * W[r][i]: the product with the transpose, for weights
     * stored neuron-major (PowerInfer's ffn_down_t {n_embd, n_ff}); x [n_tok][n_out],
     * y [n_tok][n_in]; rows whose x is zero for every token are not read. n_out is at
     * most the backend's max_width (also for matmul_t_rows). */
    void (*matmul_t)(struct pi_backend *b, const struct pi_weight *w, const float *x,
                     int64_t n_tok, float *y);
    /* Sparse row products: y[t][idx[i]] = sum_j W[idx[i]][j] * x[t][j] for i < n_idx
     * (idx ascending, distinct), the dense matmul restricted to those rows, computed
     * the same way row by row; other entries of y [n_tok][n_out] are not written. */
    void (*matmul_rows)(struct pi_backend *b, const struct pi_weight *w, const float *x,
                        int64_t n_tok, const int32_t *idx, int64_t n_idx, float *y);
    /* matmul_rows of two matrices of the same shape over the same rows (gate and up),
     * with the same results; NULL: two matmul_rows calls. */
    void (*matmul_rows2)(struct pi_backend *b, const struct pi_weight *w1,
                         const struct pi_weight *w2, const float *x, int64_t n_tok,
                         const int32_t *idx, int64_t n_idx, float *y1, float *y2);
    /* Sparse accumulation over neuron-major rows (ffn_down_t): y[t][j] =
     * sum over i < n_idx, in order, with x[t][idx[i]] != 0 of x[t][idx[i]] * W[idx[i]][j];
     * x [n_tok][n_out], y [n_tok][n_in] overwritten. Returns the number of rows read
     * (rows with a non-zero value for some token). */
    int64_t (*matmul_t_rows)(struct pi_backend *b, const struct pi_weight *w, const float *x,
                             int64_t n_tok, const int32_t *idx, int64_t n_idx, float *y);
    /* Rows ids[t] of W, dequantized: y [n_tok][n_in]. */
    void (*get_rows)(struct pi_backend *b, const struct pi_weight *w, const int32_t *ids,
                     int64_t n_tok, float *y);
    /* y[t] = x[t] / rms(x[t]) * g; x, y [n_tok][g->n] (may alias). Per-head norms
     * (q/k norms) pass n_tok * n_head rows of head_dim. */
    void (*rmsnorm)(struct pi_backend *b, const float *x, const struct pi_vector *g, float eps,
                    int64_t n_tok, float *y);
    /* y[t] = (x[t] - mean) / sqrt(var + eps) * g + bias (g NULL: 1, bias NULL: 0);
     * x, y [n_tok][n] (may alias); var is the biased variance. NULL: the backend runs no
     * architecture with LayerNorm (the executor then keeps such parts off it). */
    void (*layernorm)(struct pi_backend *b, const float *x, const struct pi_vector *g,
                      const struct pi_vector *bias, int64_t n, float eps, int64_t n_tok,
                      float *y);
    /* Rotary embedding in place on x [n_tok][n_head][head_dim] for positions
     * pos0 .. pos0 + n_tok - 1: the first r->n_rot values of each head rotate as
     * struct pi_rope says. */
    void (*rope)(struct pi_backend *b, float *x, int64_t n_tok, int64_t n_head,
                 int64_t head_dim, int64_t pos0, const struct pi_rope *r);
    /* Store k [n_tok][n_head_kv * head_dim_k] and v [...] of layer `layer` at positions
     * pos0 .. pos0 + n_tok - 1. */
    void (*kv_store)(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                     int64_t n_tok, const float *k, const float *v);
    /* Causal attention of q [n_tok][n_head * head_dim_k] (positions pos0 ...) over the
     * cached positions 0 .. pos0 + t of layer `layer` (within a->window of it);
     * grouped-query heads share K/V heads. out [n_tok][n_head * head_dim_v]. */
    void (*attention)(struct pi_backend *b, struct pi_kv *kv, int64_t layer, const float *q,
                      int64_t n_tok, int64_t pos0, const struct pi_attn *a, float *out);
    /* FFN activation in place: g [n] = act(g, u), with silu(g) = g / (1 + e^-g),
     * relu(g) = g > 0 ? g : 0, gelu(g) = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))),
     * gelu_erf(g) = g/2 (1 + erf(g / sqrt 2)); u is read only by gated activations. */
    void (*ffn_act)(struct pi_backend *b, enum pi_act act, float *g, const float *u, int64_t n);
    /* The activation of a subset of a layer's neurons under the predictor's mask (the
     * hybrid executor's device part): for t < n_tok, i < n,
     *   g[t*n + i] = act(g[t*n + i], u[t*n + i])  if score == NULL or
     *                                             score[t*score_stride + map[i]] >= thr,
     *   g[t*n + i] = 0                            otherwise.
     * map [n]: the subset's neuron ids (backend memory); score [n_tok][score_stride]. */
    void (*ffn_act_masked)(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                           int64_t n_tok, int64_t n, const float *score, int64_t score_stride,
                           const int32_t *map, float thr);
    /* The thresholded activation of a subset of a layer's neurons (a sparsified file's
     * PI_SPARSE_THRESHOLD mode, the device part): for i < n, a = act(g[i]) (act
     * non-gated: PI_ACT_SILU, _GELU, _GELU_ERF, _RELU), v = a * u[i] (v = a when u is
     * NULL: a plain FFN's activation, act(up . x + b_up)), and
     *   g[i] = v  if |teal ? v : a| > thr,   g[i] = 0  otherwise.
     * Optional: NULL refuses a context that places neurons of such a file on the
     * device in that mode (exec.c). */
    void (*ffn_act_thr)(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                        int64_t n, float thr, int teal);
    /* y[i] += x[i]. */
    void (*add)(struct pi_backend *b, float *y, const float *x, int64_t n);
    /* y[t][i] += v[i] for t < n_tok, i < v->n (biases); NULL: no biases. */
    void (*add_rows)(struct pi_backend *b, float *y, const struct pi_vector *v, int64_t n_tok);
    /* x[i] *= s (embedding scale); NULL: none. */
    void (*scale)(struct pi_backend *b, float *x, float s, int64_t n);
    /* x[i] = cap * tanh(x[i] / cap) (logit soft-capping); NULL: none. */
    void (*softcap)(struct pi_backend *b, float *x, float cap, int64_t n);

    /* Graph regions (optional, both or neither; NULL: ops are submitted one by one).
     * graph_begin opens a region: until graph_end, the ops queued between two host
     * interactions (upload, download, sync, kv_get, kv_set, buf_*, device_info, or
     * graph_end itself) form a segment that the backend may record and submit as one
     * graph, run when that interaction comes, not when the op is queued; so inside a
     * region the host must not count on queued ops running while it computes. key
     * names the region's shape (the same key: the same segments in the same order, so
     * the backend reuses what it recorded, updating only the ops' arguments); a new
     * key drops what was recorded. graph_begin returns 1 when the region is open, 0
     * when graphs are off (none compiled, or an earlier failure). graph_end closes the
     * region and returns 0, or 1 when a segment could not be submitted as a graph:
     * its ops did not run, the region's results are not to be used, graphs are off for
     * this backend from then on, and the caller runs the same work again op by op
     * (which reports any error the ops themselves meet). */
    int (*graph_begin)(struct pi_backend *b, uint64_t key);
    int (*graph_end)(struct pi_backend *b);
};

/* The backends compiled into this library (backends/registry.c, the only file with
 * build-conditional code). pi_backend_gpu: the CUDA or HIP backend, NULL when the
 * library was built without one. */
const struct pi_backend_vtable *pi_backend_cpu(void);
const struct pi_backend_vtable *pi_backend_gpu(void);

#endif
