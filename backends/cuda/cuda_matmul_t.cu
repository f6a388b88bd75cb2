/* cuda_matmul_t.cu -- matmul_t and get_rows of the GPU backend, for every type of
 * cuda_quant.cuh (apart from matmul, so the two files compile in parallel).
 *
 * matmul_t, y[t][i] = sum_r x[t][r] W[r][i] over neuron-major rows (the FFN down
 * projection): each thread owns one 8-value piece of the output columns and loops
 * over rows; a block's 8 row groups split its rows and add their sums in shared
 * memory, and when there are few columns and tokens the rows are also split across
 * blocks (split-K), whose partial sums go to the backend's scratch and are added in
 * split order by a second kernel: the result never depends on timing. A row whose
 * activation is zero for every token of the tile is not read (the sparse FFN skips
 * most rows this way; the rows need not even hold valid data). */
#include "cuda_quant.cuh"

/* A block: MT_COLS threads over adjacent pieces of the output columns (x) times
 * MT_RG row groups (y) that split the block's rows and are summed in shared memory. */
#define MT_COLS      32
#define MT_RG        8
#define MT_RB        4 /* rows per group per step: their loads are in flight together */
#define MT_TT        4 /* tokens per tile when n_tok > 1 */
#define MT_MAX_SPLIT 1024
#define MT_MIN_ROWS  (MT_RG * MT_RB * 2) /* rows per split at least */

/* Rows [split * rows_per_split, ...) of w [n_out][n_in] times x [n_tok][n_out]:
 * dst [split][n_tok][n_in] (dst = y when there is one split). Row group g takes the
 * steps of MT_RB rows g, g + MT_RG, ... of the split; each step loads the activations
 * of its rows, then the pieces of the rows whose activations are not all zero, then
 * adds them. The groups' sums are then added in group order. */
template <uint32_t T, int TT>
__global__ void __launch_bounds__(MT_COLS *MT_RG)
    k_matmul_t(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
               const float *__restrict__ x, int64_t n_tok, float *__restrict__ dst,
               int64_t rows_per_split, unsigned col_blocks) {
    __shared__ float sh[MT_RG][TT * 8][MT_COLS];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const int64_t split = blockIdx.x / col_blocks;
    const int64_t q = (int64_t)(blockIdx.x % col_blocks) * MT_COLS + tx;
    const bool live = q < qpieces<T>(n_in); /* no early exit: the block meets barriers */
    const int64_t r0 = split * rows_per_split;
    const int64_t r1 = r0 + rows_per_split < n_out ? r0 + rows_per_split : n_out;
    float *out = dst + split * n_tok * n_in;
    for (int64_t t0 = (int64_t)blockIdx.y * TT; t0 < n_tok; t0 += (int64_t)gridDim.y * TT) {
        float acc[TT][8];
#pragma unroll
        for (int j = 0; j < TT; j++)
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[j][k] = 0.0f;
        for (int64_t rb = r0 + ty * MT_RB; live && rb < r1; rb += MT_RG * MT_RB) {
            float a[MT_RB][TT];
            bool any[MT_RB];
#pragma unroll
            for (int u = 0; u < MT_RB; u++) {
                any[u] = false;
#pragma unroll
                for (int j = 0; j < TT; j++) {
                    a[u][j] = rb + u < r1 && t0 + j < n_tok ? x[(t0 + j) * n_out + rb + u] : 0.0f;
                    any[u] |= a[u][j] != 0.0f;
                }
            }
            qpiece<T> pc[MT_RB];
#pragma unroll
            for (int u = 0; u < MT_RB; u++)
                if (any[u])
                    pc[u] = qload<T>(w + (size_t)(rb + u) * row_bytes, q, n_in);
#pragma unroll
            for (int u = 0; u < MT_RB; u++) {
                if (!any[u])
                    continue;
                float v[8];
                qdecode<T>(pc[u], v);
#pragma unroll
                for (int j = 0; j < TT; j++)
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        acc[j][k] = fmaf(a[u][j], v[k], acc[j][k]);
            }
        }
#pragma unroll
        for (int j = 0; j < TT; j++)
#pragma unroll
            for (int k = 0; k < 8; k++)
                sh[ty][j * 8 + k][tx] = acc[j][k];
        __syncthreads();
        if (live) {
            qpiece<T> pc;
            qwhere<T>(q, &pc);
            for (int jk = ty; jk < TT * 8; jk += MT_RG) {
                const int j = jk / 8, i = qpos<T>(pc.p, jk % 8);
                if (t0 + j >= n_tok || (qtype<T>::FLOAT && pc.base + i >= n_in))
                    continue;
                float s = 0.0f;
                for (int g = 0; g < MT_RG; g++)
                    s += sh[g][jk][tx];
                out[(t0 + j) * n_in + pc.base + i] = s;
            }
        }
        __syncthreads(); /* sh is rewritten by the next tile */
    }
}

/* y[i] = sum over s < n_split of part[s][i], i < n, in split order. */
__global__ void k_sum_splits(const float *__restrict__ part, int64_t n, int64_t n_split,
                             float *__restrict__ y) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int64_t k = 0; k < n_split; k++)
            s += part[k * n + i];
        y[i] = s;
    }
}

/* y [n_tok][n_in]: rows ids[t] of w, dequantized; an id outside [0, n_out) gives 0s. */
template <uint32_t T>
__global__ void k_get_rows(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in,
                           int64_t n_out, const int32_t *__restrict__ ids, int64_t n_tok,
                           float *__restrict__ y) {
    const int64_t np = qpieces<T>(n_in);
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < n_tok * np;
         g += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = g / np, q = g % np;
        const int64_t id = ids[t];
        float v[8];
        qpiece<T> pc;
        if (id >= 0 && id < n_out) {
            pc = qload<T>(w + (size_t)id * row_bytes, q, n_in);
            qdecode<T>(pc, v);
        } else {
            qwhere<T>(q, &pc);
#pragma unroll
            for (int k = 0; k < 8; k++)
                v[k] = 0.0f;
        }
        float *yt = y + t * n_in + pc.base;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int i = qpos<T>(pc.p, k);
            if (!qtype<T>::FLOAT || pc.base + i < n_in)
                yt[i] = v[k];
        }
    }
}

/* ---- launchers ------------------------------------------------------------------- */

template <uint32_t T>
static void matmul_t_type(struct pi_backend *b, const struct pi_weight *w, const float *x,
                          int64_t n_tok, float *y) {
    const int tt = n_tok == 1 ? 1 : MT_TT;
    const dim3 g = pi_cuda_grid_tiles(qpieces<T>(w->n_in), MT_COLS, n_tok, tt);
    const unsigned col_blocks = g.x, gy = g.y;
    /* Splits of the rows: about 8 blocks per multiprocessor in all, at least
     * MT_MIN_ROWS rows each, and partial sums that fit the scratch. */
    const int64_t want = (int64_t)b->n_sm * 8;
    int64_t split = (want + (int64_t)col_blocks * gy - 1) / ((int64_t)col_blocks * gy);
    const int64_t by_rows = (w->n_out + MT_MIN_ROWS - 1) / MT_MIN_ROWS;
    const int64_t by_scratch = (int64_t)(b->scratch_floats / (size_t)(n_tok * w->n_in));
    split = split < by_rows ? split : by_rows;
    split = split < by_scratch ? split : by_scratch;
    split = split < MT_MAX_SPLIT ? split : MT_MAX_SPLIT;
    if (split < 1)
        split = 1;
    const int64_t rows = (w->n_out + split - 1) / split;
    split = (w->n_out + rows - 1) / rows; /* no empty split */
    float *dst = split > 1 ? b->scratch : y;
    const dim3 grid((unsigned)(col_blocks * split), gy), block(MT_COLS, MT_RG);
    if (tt == 1)
        k_matmul_t<T, 1><<<grid, block, 0, b->stream>>>((const uint8_t *)w->data, w->row_bytes,
                                                        w->n_in, w->n_out, x, n_tok, dst, rows,
                                                        col_blocks);
    else
        k_matmul_t<T, MT_TT><<<grid, block, 0, b->stream>>>((const uint8_t *)w->data, w->row_bytes,
                                                            w->n_in, w->n_out, x, n_tok, dst, rows,
                                                            col_blocks);
    pi_cuda_launched(b);
    if (split > 1) {
        const int64_t n = n_tok * w->n_in;
        k_sum_splits<<<pi_cuda_grid(b, n, 256), 256, 0, b->stream>>>(b->scratch, n, split, y);
        pi_cuda_launched(b);
    }
}

template <uint32_t T>
static void get_rows_type(struct pi_backend *b, const struct pi_weight *w, const int32_t *ids,
                          int64_t n_tok, float *y) {
    const int64_t n = n_tok * qpieces<T>(w->n_in);
    k_get_rows<T><<<pi_cuda_grid(b, n, 256), 256, 0, b->stream>>>(
        (const uint8_t *)w->data, w->row_bytes, w->n_in, w->n_out, ids, n_tok, y);
    pi_cuda_launched(b);
}

void pi_cuda_matmul_t(struct pi_backend *b, const struct pi_weight *w, const float *x,
                      int64_t n_tok, float *y) {
    const int st = pi_cuda_check_weight(w);
    if (st != PI_OK || !x || !y || n_tok < 0) {
        pi_cuda_fail(b, st != PI_OK ? st : PI_ERR_INVALID_ARG);
        return;
    }
    if (n_tok == 0)
        return;
    pi_cuda_dispatch(b, w->type,
                     [&](auto t) { matmul_t_type<decltype(t)::value>(b, w, x, n_tok, y); });
}

void pi_cuda_get_rows(struct pi_backend *b, const struct pi_weight *w, const int32_t *ids,
                      int64_t n_tok, float *y) {
    const int st = pi_cuda_check_weight(w);
    if (st != PI_OK || !ids || !y || n_tok < 0) {
        pi_cuda_fail(b, st != PI_OK ? st : PI_ERR_INVALID_ARG);
        return;
    }
    if (n_tok == 0)
        return;
    pi_cuda_dispatch(b, w->type,
                     [&](auto t) { get_rows_type<decltype(t)::value>(b, w, ids, n_tok, y); });
}
