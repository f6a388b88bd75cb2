/* cuda_matmul.cu -- the weight products of the GPU backend, for every type of
 * cuda_quant.cuh, in float with fp32 accumulation: matmul (y = x W^T) here, matmul_t
 * (y = x W over neuron-major rows) and get_rows in cuda_matmul_t.cu.
 *
 * matmul: a warp computes R rows (2 for one token, 4 for a tile of 8 tokens); its
 * lanes take the rows' 8-value pieces in turn, so adjacent lanes read adjacent bytes
 * and the warp streams its rows. Each x value read (as float4 where aligned) serves
 * the R rows and each decoded piece the TT tokens of the tile; the lanes' sums are
 * added with shuffles. Token tiles go to gridDim.y. No tensor cores: the weights are
 * decoded to float, for any type, and prefill is a secondary target. */
#include "cuda_quant.cuh"

#define MM_THREADS  256
#define MM_INFLIGHT 4 /* pieces loaded per lane before the first is decoded */

int pi_cuda_type_ok(uint32_t type) {
    switch (type) {
    case PI_TYPE_F32:
    case PI_TYPE_F16:
    case PI_TYPE_BF16:
    case PI_TYPE_Q4_0:
    case PI_TYPE_Q4_1:
    case PI_TYPE_Q5_0:
    case PI_TYPE_Q5_1:
    case PI_TYPE_Q8_0:
    case PI_TYPE_Q4_K:
    case PI_TYPE_Q5_K:
    case PI_TYPE_Q6_K:
    case PI_TYPE_Q2_K:
    case PI_TYPE_Q3_K:
    case PI_TYPE_ID_IQ4_NL:
    case PI_TYPE_ID_IQ4_XS:
    case PI_TYPE_MXFP4:
        return 1;
    default:
        return 0;
    }
}

/* ---- kernels ----------------------------------------------------------------------- */

/* acc[r][j] += the R rows' pieces (one column piece: all share p and base) times
 * token t0 + j's x [n_tok][n_in], j < TT. Each x value read serves R rows. VEC: x's
 * rows are 16-byte aligned, and the piece's two runs of 4 values (qpos(p, 0..3) and
 * qpos(p, 4..7)) are read as two float4: a quarter of the L1 transactions of scalar
 * loads, which otherwise bound this kernel. */
template <uint32_t T, int TT, int R, bool VEC>
static __device__ __forceinline__ void dot_rows(float acc[R][TT], const qpiece<T> pc[R],
                                                const float *__restrict__ x, int64_t t0,
                                                int64_t n_tok, int64_t n_in) {
    float v[R][8];
#pragma unroll
    for (int r = 0; r < R; r++)
        qdecode<T>(pc[r], v[r]);
#pragma unroll
    for (int j = 0; j < TT; j++) {
        if (TT > 1 && t0 + j >= n_tok)
            break;
        const float *xt = x + (t0 + j) * n_in + pc[0].base;
        if constexpr (VEC) {
            const float4 lo = *reinterpret_cast<const float4 *>(xt + qpos<T>(pc[0].p, 0));
            const float4 hi = *reinterpret_cast<const float4 *>(xt + qpos<T>(pc[0].p, 4));
#pragma unroll
            for (int r = 0; r < R; r++) {
                float a = acc[r][j];
                a = fmaf(v[r][0], lo.x, a);
                a = fmaf(v[r][1], lo.y, a);
                a = fmaf(v[r][2], lo.z, a);
                a = fmaf(v[r][3], lo.w, a);
                a = fmaf(v[r][4], hi.x, a);
                a = fmaf(v[r][5], hi.y, a);
                a = fmaf(v[r][6], hi.z, a);
                acc[r][j] = fmaf(v[r][7], hi.w, a);
            }
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const int i = qpos<T>(pc[0].p, k);
                if (qtype<T>::FLOAT && pc[0].base + i >= n_in)
                    continue;
                const float xv = xt[i];
#pragma unroll
                for (int r = 0; r < R; r++)
                    acc[r][j] = fmaf(v[r][k], xv, acc[r][j]);
            }
        }
    }
}

/* w [n_out] rows of row_bytes; x [n_tok][n_in]; y [n_tok][n_out]. A warp computes R
 * rows (the last warp's rows past n_out re-read row n_out - 1 and are not written)
 * for a tile of TT tokens; each lane loads MM_INFLIGHT pieces (MM_INFLIGHT / R
 * columns of R rows) before decoding the first, so their loads overlap. */
template <uint32_t T, int TT, int R, bool VEC>
__global__ void k_matmul(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in,
                         int64_t n_out, const float *__restrict__ x, int64_t n_tok,
                         float *__restrict__ y) {
    constexpr int U = MM_INFLIGHT / R;
    const int lane = (int)(threadIdx.x % PI_WARP);
    const int64_t row0 = ((int64_t)blockIdx.x * (blockDim.x / PI_WARP) + threadIdx.x / PI_WARP) * R;
    if (row0 >= n_out) /* the same for every lane of the warp */
        return;
    const uint8_t *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        wr[r] = w + (size_t)(row0 + r < n_out ? row0 + r : n_out - 1) * row_bytes;
    const int64_t np = qpieces<T>(n_in);
    for (int64_t t0 = (int64_t)blockIdx.y * TT; t0 < n_tok; t0 += (int64_t)gridDim.y * TT) {
        float acc[R][TT];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int j = 0; j < TT; j++)
                acc[r][j] = 0.0f;
        int64_t q = lane;
        for (; q + (U - 1) * PI_WARP < np; q += U * PI_WARP) {
            qpiece<T> pc[U][R];
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int r = 0; r < R; r++)
                    pc[u][r] = qload<T>(wr[r], q + u * PI_WARP, n_in);
#pragma unroll
            for (int u = 0; u < U; u++)
                dot_rows<T, TT, R, VEC>(acc, pc[u], x, t0, n_tok, n_in);
        }
        for (; q < np; q += PI_WARP) {
            qpiece<T> pc[R];
#pragma unroll
            for (int r = 0; r < R; r++)
                pc[r] = qload<T>(wr[r], q, n_in);
            dot_rows<T, TT, R, VEC>(acc, pc, x, t0, n_tok, n_in);
        }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int j = 0; j < TT; j++) {
                const float s = pi_warp_sum(acc[r][j]);
                if (lane == 0 && row0 + r < n_out && t0 + j < n_tok)
                    y[(t0 + j) * n_out + row0 + r] = s;
            }
    }
}

/* ---- launchers ------------------------------------------------------------------- */

/* Checks shared by the products: PI_OK, or the status to record. */
int pi_cuda_check_weight(const struct pi_weight *w) {
    if (!pi_cuda_type_ok(w->type))
        return PI_ERR_UNSUPPORTED;
    if (!w->data || w->n_in <= 0 || w->n_out <= 0)
        return PI_ERR_INVALID_ARG;
    /* whole blocks, and rows at least as long as their blocks */
    int64_t qk = 1, bytes = 0;
    switch (w->type) {
    case PI_TYPE_F32:
        bytes = 4;
        break;
    case PI_TYPE_F16:
    case PI_TYPE_BF16:
        bytes = 2;
        break;
    case PI_TYPE_Q4_0:
        qk = 32;
        bytes = 18;
        break;
    case PI_TYPE_Q4_1:
        qk = 32;
        bytes = 20;
        break;
    case PI_TYPE_Q5_0:
        qk = 32;
        bytes = 22;
        break;
    case PI_TYPE_Q5_1:
        qk = 32;
        bytes = 24;
        break;
    case PI_TYPE_Q8_0:
        qk = 32;
        bytes = 34;
        break;
    case PI_TYPE_Q4_K:
        qk = 256;
        bytes = 144;
        break;
    case PI_TYPE_Q5_K:
        qk = 256;
        bytes = 176;
        break;
    case PI_TYPE_Q2_K:
        qk = 256;
        bytes = 84;
        break;
    case PI_TYPE_Q3_K:
        qk = 256;
        bytes = 110;
        break;
    case PI_TYPE_ID_IQ4_NL:
        qk = 32;
        bytes = 18;
        break;
    case PI_TYPE_ID_IQ4_XS:
        qk = 256;
        bytes = 136;
        break;
    case PI_TYPE_MXFP4:
        qk = 32;
        bytes = 17;
        break;
    default:
        qk = 256;
        bytes = 210;
        break; /* Q6_K */
    }
    if (w->n_in % qk != 0 || w->row_bytes < (size_t)(w->n_in / qk * bytes))
        return PI_ERR_INVALID_ARG;
    /* the kernels read 16-bit words (F32: 32-bit; MXFP4: bytes) */
    const size_t align = w->type == PI_TYPE_F32 ? 4 : w->type == PI_TYPE_MXFP4 ? 1 : 2;
    if ((uintptr_t)w->data % align != 0 || w->row_bytes % align != 0)
        return PI_ERR_INVALID_ARG;
    return PI_OK;
}

/* Decode: 2 rows per warp; a token tile of 8: 4 rows per warp. */
template <uint32_t T, bool VEC>
static void matmul_launch(struct pi_backend *b, const struct pi_weight *w, const float *x,
                          int64_t n_tok, float *y) {
    const uint8_t *wd = (const uint8_t *)w->data;
    const int warps = MM_THREADS / b->warp;
    if (n_tok == 1) {
        const dim3 grid = pi_cuda_grid_tiles(w->n_out, (int64_t)warps * 2, n_tok, 1);
        k_matmul<T, 1, 2, VEC>
            <<<grid, MM_THREADS, 0, b->stream>>>(wd, w->row_bytes, w->n_in, w->n_out, x, n_tok, y);
    } else {
        const dim3 grid = pi_cuda_grid_tiles(w->n_out, (int64_t)warps * 4, n_tok, 8);
        k_matmul<T, 8, 4, VEC>
            <<<grid, MM_THREADS, 0, b->stream>>>(wd, w->row_bytes, w->n_in, w->n_out, x, n_tok, y);
    }
    pi_cuda_launched(b);
}

/* float4 reads of x when its rows are 16-byte aligned (quantized rows are whole
 * blocks of 32 or 256 values, so only x itself can be misaligned). */
template <uint32_t T>
static void matmul_type(struct pi_backend *b, const struct pi_weight *w, const float *x,
                        int64_t n_tok, float *y) {
    if constexpr (!qtype<T>::FLOAT) {
        if ((uintptr_t)x % 16 == 0) {
            matmul_launch<T, true>(b, w, x, n_tok, y);
            return;
        }
    }
    matmul_launch<T, false>(b, w, x, n_tok, y);
}

void pi_cuda_matmul(struct pi_backend *b, const struct pi_weight *w, const float *x, int64_t n_tok,
                    float *y) {
    const int st = pi_cuda_check_weight(w);
    if (st != PI_OK || !x || !y || n_tok < 0) {
        pi_cuda_fail(b, st != PI_OK ? st : PI_ERR_INVALID_ARG);
        return;
    }
    if (n_tok == 0)
        return;
    pi_cuda_dispatch(b, w->type,
                     [&](auto t) { matmul_type<decltype(t)::value>(b, w, x, n_tok, y); });
}
