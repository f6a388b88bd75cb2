/* cuda_backend.cu -- the GPU backend's life cycle, memory, queue and vtable (CUDA,
 * and HIP through compat.h). The ops live in cuda_matmul.cu and cuda_ops.cu.
 *
 * One backend = one device and one stream: ops, uploads and downloads are queued on
 * the stream in call order. Ops return nothing; an op given bad arguments, or whose
 * launch fails, records its status in b->err (the first one is kept) and is skipped,
 * and sync and download return that status from then on: after a device fault the
 * results of the later ops are not to be trusted either. Every entry point makes the
 * backend's device current for the calling thread first (cudaSetDevice is per
 * thread, and a context may move between threads). */
#include <string.h>

#include "cuda_common.cuh"

/* Split-K partial sums (matmul_t, attention): 256 rows of the widest activation, at
 * least 4 MiB. */
#define SCRATCH_ROWS       256
#define SCRATCH_MIN_FLOATS ((size_t)1 << 20)

int pi_cuda_status(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return PI_OK;
    case cudaErrorMemoryAllocation:
        return PI_ERR_NOMEM;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
        return PI_ERR_UNSUPPORTED;
    default:
        return PI_ERR_INTERNAL;
    }
}

void pi_cuda_fail(struct pi_backend *b, int status) {
    if (b->err == PI_OK && status != PI_OK)
        b->err = status;
}

/* A runtime error met while a segment is being captured (a launch into a capture the
 * runtime gave up) loses the segment, not the backend: the caller runs the work again
 * op by op, where a real error is met again and kept. */
void pi_cuda_note(struct pi_backend *b, cudaError_t e) {
    if (e != cudaSuccess && b->capturing) {
        b->lost = 1;
        return;
    }
    pi_cuda_fail(b, pi_cuda_status(e));
}

/* Make the backend's device current; a failure is recorded. During a capture the
 * capturing thread made it current already (and a capture allows no other calls). */
static int use(struct pi_backend *b) {
    if (b->capturing)
        return 1;
    const cudaError_t e = cudaSetDevice(b->device);
    pi_cuda_note(b, e);
    return e == cudaSuccess;
}

/* ---- graph regions (backend.h: graph_begin, graph_end) -------------------------------
 *
 * Inside a region the first op after a host interaction opens segment `seg`: a stream
 * capture (cudaStreamCaptureModeThreadLocal, so a call that would make the recording
 * wrong invalidates it instead), unless direct[seg] says the segment is too short to
 * gain. The next host interaction ends it (flush): the recording updates graph[seg]
 * in place (cudaGraphExecUpdate: the same kernels, their new arguments; the decode
 * position changes every step) or is instantiated afresh when it cannot, then is
 * launched on the stream, so it runs in order with everything else queued there. Any
 * failure loses the segment (its ops did not run), which graph_end reports; graphs are
 * then off for good. HIP builds have no regions (ROCm's graph API is not tried). */
#if !PI_GPU_HIP
static void graph_drop(struct pi_backend *b) {
    for (int s = 0; s < PI_GRAPH_SEGS; s++) {
        if (b->graph[s])
            (void)cudaGraphExecDestroy(b->graph[s]);
        b->graph[s] = NULL;
        b->direct[s] = 0;
    }
}

/* Before an op: open its segment if it is the first since a host interaction. */
static void graph_op(struct pi_backend *b) {
    if (!b->region)
        return;
    if (b->in_seg) {
        b->seg_ops++;
        return;
    }
    b->in_seg = 1;
    b->seg_ops = 1;
    if (b->lost || b->seg >= PI_GRAPH_SEGS || b->direct[b->seg])
        return;
    if (cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        b->capturing = 1;
    } else { /* nothing recorded, nothing lost: this segment runs op by op */
        (void)cudaGetLastError();
        b->graphs_off = 1;
    }
}

/* A host interaction: end the open segment and run it. */
static void graph_flush(struct pi_backend *b) {
    if (!b->in_seg)
        return;
    b->in_seg = 0;
    const int s = b->seg++;
    if (!b->capturing)
        return; /* its ops ran as they were queued */
    b->capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(b->stream, &g);
    if (e == cudaSuccess && !g)
        e = cudaErrorStreamCaptureInvalidated;
    if (e == cudaSuccess && b->lost)
        e = cudaErrorStreamCaptureInvalidated; /* a launch inside it failed */
    if (e == cudaSuccess && b->graph[s]) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(b->graph[s], g, &info) != cudaSuccess) {
            (void)cudaGetLastError(); /* another shape: record it afresh */
            (void)cudaGraphExecDestroy(b->graph[s]);
            b->graph[s] = NULL;
        }
    }
    if (e == cudaSuccess && !b->graph[s])
        e = cudaGraphInstantiate(&b->graph[s], g, 0);
    if (e == cudaSuccess)
        e = cudaGraphLaunch(b->graph[s], b->stream);
    if (g)
        (void)cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        b->lost = 1;
    } else if (b->seg_ops < PI_GRAPH_MIN_OPS) {
        b->direct[s] = 1;
    }
}

static int cuda_graph_begin(struct pi_backend *b, uint64_t key) {
    if (b->graphs_off || b->region || b->err != PI_OK || cudaSetDevice(b->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (key != b->graph_key) {
        graph_drop(b);
        b->graph_key = key;
    }
    b->region = 1;
    b->seg = 0;
    b->in_seg = 0;
    b->lost = 0;
    return 1;
}

static int cuda_graph_end(struct pi_backend *b) {
    if (!b->region)
        return 0;
    graph_flush(b);
    b->region = 0;
    b->seg = 0;
    const int lost = b->lost;
    b->lost = 0;
    if (lost) {
        b->graphs_off = 1;
        graph_drop(b);
    }
    return lost;
}
#else
static void graph_op(struct pi_backend *b) {
    (void)b;
}

static void graph_flush(struct pi_backend *b) {
    (void)b;
}
#endif

/* Before an op: the device current and, inside a graph region, its segment open. */
static int op(struct pi_backend *b) {
    if (!use(b))
        return 0;
    graph_op(b);
    return 1;
}

/* Before a host interaction: make the device current, and end an open segment. */
static int host(struct pi_backend *b) {
    graph_flush(b);
    return use(b);
}

/* ---- life cycle ------------------------------------------------------------------ */

static void cuda_destroy(struct pi_backend *b) {
    if (!b)
        return;
    if (cudaSetDevice(b->device) == cudaSuccess) {
#if !PI_GPU_HIP
        if (b->capturing) { /* a region left open: discard what it recorded */
            cudaGraph_t g = NULL;
            if (cudaStreamEndCapture(b->stream, &g) == cudaSuccess && g)
                (void)cudaGraphDestroy(g);
            b->capturing = 0;
        }
        graph_drop(b);
#endif
        if (b->stream) {
            (void)cudaStreamSynchronize(b->stream);
            (void)cudaStreamDestroy(b->stream);
        }
        (void)cudaFree(b->scratch);
    }
    (void)cudaGetLastError();
    pi_free(b->alloc, b);
}

static int cuda_create(struct pi_backend **out, const struct pi_backend_config *cfg) {
    *out = NULL;
    if (!cfg || cfg->max_tokens < 1 || cfg->max_width < 1)
        return PI_ERR_INVALID_ARG;
    /* No driver, no device, or no such ordinal: this build cannot run here. */
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0 || cfg->device < 0 ||
        cfg->device >= count) {
        (void)cudaGetLastError();
        return PI_ERR_UNSUPPORTED;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, cfg->device) != cudaSuccess ||
        (prop.warpSize != 32 && prop.warpSize != 64)) {
        (void)cudaGetLastError();
        return PI_ERR_UNSUPPORTED;
    }
    const struct pi_allocator *alloc = cfg->alloc ? cfg->alloc : &pi_default_allocator;
    struct pi_backend *b = (struct pi_backend *)pi_calloc(alloc, 1, sizeof *b);
    if (!b)
        return PI_ERR_NOMEM;
    b->alloc = alloc;
    b->device = cfg->device;
    b->warp = prop.warpSize;
    b->n_sm = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    b->max_tokens = cfg->max_tokens;
    b->max_width = cfg->max_width;
    b->scratch_floats = (size_t)cfg->max_width * SCRATCH_ROWS;
    if (b->scratch_floats < SCRATCH_MIN_FLOATS)
        b->scratch_floats = SCRATCH_MIN_FLOATS;

    int st = pi_cuda_status(cudaSetDevice(b->device));
    if (st == PI_OK)
        st = pi_cuda_status(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
    if (st == PI_OK)
        st = pi_cuda_status(cudaMalloc((void **)&b->scratch, b->scratch_floats * sizeof(float)));
    /* One tiny kernel: proves that this binary has code for the device, and that the
     * warp width the code was compiled for is the device's. */
    if (st == PI_OK) {
        int warp = 0;
        pi_cuda_probe(b, (int *)b->scratch);
        st = b->err;
        if (st == PI_OK)
            st = pi_cuda_status(
                cudaMemcpyAsync(&warp, b->scratch, sizeof warp, cudaMemcpyDeviceToHost, b->stream));
        if (st == PI_OK)
            st = pi_cuda_status(cudaStreamSynchronize(b->stream));
        if (st == PI_OK && warp != b->warp)
            st = PI_ERR_UNSUPPORTED;
    }
    if (st != PI_OK) {
        (void)cudaGetLastError();
        cuda_destroy(b);
        return st;
    }
    *out = b;
    return PI_OK;
}

static int cuda_n_threads(const struct pi_backend *b) {
    (void)b;
    return 1;
}

/* ---- memory and queue ---------------------------------------------------------------- */

static int cuda_buf_alloc(struct pi_backend *b, size_t size, void **out) {
    *out = NULL;
    if (!host(b))
        return b->err;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, size ? size : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure leaves the device usable */
        return e == cudaErrorMemoryAllocation ? PI_ERR_NOMEM : pi_cuda_status(e);
    }
    *out = p;
    return PI_OK;
}

/* cudaFree waits for the device, so queued ops that still read the buffer finish. */
static void cuda_buf_free(struct pi_backend *b, void *buf) {
    if (!buf || !host(b))
        return;
    pi_cuda_note(b, cudaFree(buf));
}

/* The source may be reused as soon as this returns: from pageable memory (all that
 * the library passes) the runtime has staged it by then; otherwise
 * (pi_gpu_upload_needs_sync: page-locked memory, or any memory under HIP) the copy is
 * waited for. */
static int cuda_upload(struct pi_backend *b, void *dst, const void *src, size_t size) {
    if (!host(b))
        return b->err;
    if (size == 0)
        return b->err;
    cudaError_t e = cudaMemcpyAsync(dst, src, size, cudaMemcpyHostToDevice, b->stream);
    if (e == cudaSuccess && pi_gpu_upload_needs_sync(src))
        e = cudaStreamSynchronize(b->stream);
    pi_cuda_note(b, e);
    return e != cudaSuccess ? pi_cuda_status(e) : b->err;
}

static int cuda_download(struct pi_backend *b, void *dst, const void *src, size_t size) {
    if (!host(b))
        return b->err;
    cudaError_t e = cudaSuccess;
    if (size)
        e = cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToHost, b->stream);
    const cudaError_t e2 = cudaStreamSynchronize(b->stream);
    pi_cuda_note(b, e);
    pi_cuda_note(b, e2);
    return b->err;
}

static int cuda_sync(struct pi_backend *b) {
    if (!host(b))
        return b->err;
    pi_cuda_note(b, cudaStreamSynchronize(b->stream));
    pi_cuda_note(b, cudaGetLastError());
    return b->err;
}

static int cuda_device_info(struct pi_backend *b, struct pi_device_info *out) {
    memset(out, 0, sizeof *out);
    if (!host(b))
        return b->err;
    cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaGetDeviceProperties(&prop, b->device);
    if (e == cudaSuccess)
        e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pi_cuda_status(e);
    }
    size_t n = strnlen(prop.name, sizeof prop.name);
    if (n >= sizeof out->name)
        n = sizeof out->name - 1;
    memcpy(out->name, prop.name, n);
    out->name[n] = '\0';
    out->mem_total = total_b;
    out->mem_free = free_b;
    return PI_OK;
}

static int cuda_supports(const struct pi_backend *b, uint32_t type) {
    (void)b;
    return pi_cuda_type_ok(type);
}

/* ---- KV cache ---------------------------------------------------------------------- */

static int cuda_kv_create(struct pi_backend *b, const struct pi_kv_desc *d, struct pi_kv **out) {
    *out = NULL;
    if (d->n_layer <= 0 || d->n_ctx <= 0 || d->n_head <= 0 || d->n_head_kv <= 0 ||
        d->head_dim_k <= 0 || d->head_dim_v <= 0 || d->n_head % d->n_head_kv != 0)
        return PI_ERR_INVALID_ARG;
    if (d->type != PI_KV_F16 || d->type_v != PI_KV_F16)
        return PI_ERR_UNSUPPORTED; /* an F16 cache only */
    if (!pi_cuda_attention_ok(b, d))
        return PI_ERR_UNSUPPORTED; /* heads wider than the attention kernel takes */
    const int64_t nk = d->n_head_kv * d->head_dim_k, nv = d->n_head_kv * d->head_dim_v;
    const size_t cells = (size_t)d->n_ctx * (size_t)d->n_layer;
    if ((size_t)nk > SIZE_MAX / 2 / cells || (size_t)nv > SIZE_MAX / 2 / cells)
        return PI_ERR_NOMEM;
    if (!host(b))
        return b->err;
    struct pi_kv *kv = (struct pi_kv *)pi_calloc(b->alloc, 1, sizeof *kv);
    if (!kv)
        return PI_ERR_NOMEM;
    kv->d = *d;
    kv->nk = nk;
    kv->nv = nv;
    /* Not zeroed: a position is always written before it is read. */
    cudaError_t e = cudaMalloc((void **)&kv->k, cells * (size_t)nk * 2);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&kv->v, cells * (size_t)nv * 2);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaFree(kv->k);
        pi_free(b->alloc, kv);
        return e == cudaErrorMemoryAllocation ? PI_ERR_NOMEM : pi_cuda_status(e);
    }
    *out = kv;
    return PI_OK;
}

static void cuda_kv_destroy(struct pi_backend *b, struct pi_kv *kv) {
    if (!kv)
        return;
    if (host(b)) {
        pi_cuda_note(b, cudaFree(kv->k));
        pi_cuda_note(b, cudaFree(kv->v));
    }
    pi_free(b->alloc, kv);
}

static int kv_range_ok(const struct pi_kv *kv, int64_t layer, int64_t pos0, int64_t n) {
    return kv && layer >= 0 && layer < kv->d.n_layer && pos0 >= 0 && n >= 0 &&
           pos0 + n <= kv->d.n_ctx;
}

/* kv_get / kv_set: copies on the stream, then a wait (the host buffers are the
 * caller's once these return). */
static int cuda_kv_get(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                       int64_t n, void *k, void *v) {
    if (!kv_range_ok(kv, layer, pos0, n))
        return PI_ERR_INVALID_ARG;
    if (!host(b))
        return b->err;
    const size_t cell = (size_t)layer * (size_t)kv->d.n_ctx + (size_t)pos0;
    pi_cuda_note(b, cudaMemcpyAsync(k, kv->k + cell * (size_t)kv->nk, (size_t)(n * kv->nk) * 2,
                                    cudaMemcpyDeviceToHost, b->stream));
    pi_cuda_note(b, cudaMemcpyAsync(v, kv->v + cell * (size_t)kv->nv, (size_t)(n * kv->nv) * 2,
                                    cudaMemcpyDeviceToHost, b->stream));
    pi_cuda_note(b, cudaStreamSynchronize(b->stream));
    return b->err;
}

static int cuda_kv_set(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                       int64_t n, const void *k, const void *v) {
    if (!kv_range_ok(kv, layer, pos0, n))
        return PI_ERR_INVALID_ARG;
    if (!host(b))
        return b->err;
    const size_t cell = (size_t)layer * (size_t)kv->d.n_ctx + (size_t)pos0;
    pi_cuda_note(b, cudaMemcpyAsync(kv->k + cell * (size_t)kv->nk, k, (size_t)(n * kv->nk) * 2,
                                    cudaMemcpyHostToDevice, b->stream));
    pi_cuda_note(b, cudaMemcpyAsync(kv->v + cell * (size_t)kv->nv, v, (size_t)(n * kv->nv) * 2,
                                    cudaMemcpyHostToDevice, b->stream));
    pi_cuda_note(b, cudaStreamSynchronize(b->stream));
    return b->err;
}

/* ---- ops: make the device current, then queue -------------------------------------- */

static void cuda_matmul(struct pi_backend *b, const struct pi_weight *w, const float *x,
                        int64_t n_tok, float *y) {
    if (op(b))
        pi_cuda_matmul(b, w, x, n_tok, y);
}

static void cuda_matmul_t(struct pi_backend *b, const struct pi_weight *w, const float *x,
                          int64_t n_tok, float *y) {
    if (op(b))
        pi_cuda_matmul_t(b, w, x, n_tok, y);
}

static void cuda_get_rows(struct pi_backend *b, const struct pi_weight *w, const int32_t *ids,
                          int64_t n_tok, float *y) {
    if (op(b))
        pi_cuda_get_rows(b, w, ids, n_tok, y);
}

static void cuda_rmsnorm(struct pi_backend *b, const float *x, const struct pi_vector *g, float eps,
                         int64_t n_tok, float *y) {
    if (op(b))
        pi_cuda_rmsnorm(b, x, g, eps, n_tok, y);
}

static void cuda_layernorm(struct pi_backend *b, const float *x, const struct pi_vector *g,
                           const struct pi_vector *bias, int64_t n, float eps, int64_t n_tok,
                           float *y) {
    if (op(b))
        pi_cuda_layernorm(b, x, g, bias, n, eps, n_tok, y);
}

static void cuda_rope(struct pi_backend *b, float *x, int64_t n_tok, int64_t n_head,
                      int64_t head_dim, int64_t pos0, const struct pi_rope *r) {
    if (op(b))
        pi_cuda_rope(b, x, n_tok, n_head, head_dim, pos0, r);
}

static void cuda_kv_store(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                          int64_t n_tok, const float *k, const float *v) {
    if (op(b))
        pi_cuda_kv_store(b, kv, layer, pos0, n_tok, k, v);
}

static void cuda_attention(struct pi_backend *b, struct pi_kv *kv, int64_t layer, const float *q,
                           int64_t n_tok, int64_t pos0, const struct pi_attn *a, float *out) {
    if (op(b))
        pi_cuda_attention(b, kv, layer, q, n_tok, pos0, a, out);
}

static void cuda_ffn_act(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                         int64_t n) {
    if (op(b))
        pi_cuda_ffn_act(b, act, g, u, n);
}

static void cuda_ffn_act_masked(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                                int64_t n_tok, int64_t n, const float *score, int64_t score_stride,
                                const int32_t *map, float thr) {
    if (op(b))
        pi_cuda_ffn_act_masked(b, act, g, u, n_tok, n, score, score_stride, map, thr);
}

static void cuda_ffn_act_thr(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                             int64_t n, float thr, int teal) {
    if (op(b))
        pi_cuda_ffn_act_thr(b, act, g, u, n, thr, teal);
}

static void cuda_add(struct pi_backend *b, float *y, const float *x, int64_t n) {
    if (op(b))
        pi_cuda_add(b, y, x, n);
}

static void cuda_add_rows(struct pi_backend *b, float *y, const struct pi_vector *v,
                          int64_t n_tok) {
    if (op(b))
        pi_cuda_add_rows(b, y, v, n_tok);
}

static void cuda_scale(struct pi_backend *b, float *x, float s, int64_t n) {
    if (op(b))
        pi_cuda_scale(b, x, s, n);
}

static void cuda_softcap(struct pi_backend *b, float *x, float cap, int64_t n) {
    if (op(b))
        pi_cuda_softcap(b, x, cap, n);
}

/* Designated initialisers (C++20) must follow backend.h's member order, so a
 * reordered vtable fails to compile here rather than swapping two ops. */
static const struct pi_backend_vtable cuda_vtable = {
    .name = PI_GPU_HIP ? "hip" : "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .set_threads = NULL,
    .n_threads = cuda_n_threads,
    .buf_alloc = cuda_buf_alloc,
    .buf_free = cuda_buf_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .sync = cuda_sync,
    .device_info = cuda_device_info,
    .supports = cuda_supports,
    .kv_create = cuda_kv_create,
    .kv_destroy = cuda_kv_destroy,
    .kv_get = cuda_kv_get,
    .kv_set = cuda_kv_set,
    .matmul = cuda_matmul,
    .matmul_t = cuda_matmul_t,
    .matmul_rows = NULL,
    .matmul_rows2 = NULL,
    .matmul_t_rows = NULL,
    .get_rows = cuda_get_rows,
    .rmsnorm = cuda_rmsnorm,
    .layernorm = cuda_layernorm,
    .rope = cuda_rope,
    .kv_store = cuda_kv_store,
    .attention = cuda_attention,
    .ffn_act = cuda_ffn_act,
    .ffn_act_masked = cuda_ffn_act_masked,
    .ffn_act_thr = cuda_ffn_act_thr,
    .add = cuda_add,
    .add_rows = cuda_add_rows,
    .scale = cuda_scale,
    .softcap = cuda_softcap,
#if !PI_GPU_HIP
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
#else
    .graph_begin = NULL,
    .graph_end = NULL,
#endif
};

extern "C" const struct pi_backend_vtable *pi_backend_cuda_vtable(void) {
    return &cuda_vtable;
}
