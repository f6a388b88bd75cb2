/* cuda_ops.cu -- the GPU backend's other ops: RMSNorm, LayerNorm, RoPE, the F16 KV
 * cache (store and causal grouped-query attention), FFN activations, add, biases,
 * scale and soft-capping. Each follows the
 * CPU backend's op (backends/cpu/cpu_backend.c) formula for formula. */
#include <math.h>

#include "cuda_common.cuh"

#define EW_THREADS     256 /* element-wise kernels */
#define NORM_THREADS   256
#define ATTN_THREADS   128
#define ATTN_MAX_SPLIT 128
#define ATTN_MIN_POS   32 /* positions per split at least */
#define ATTN_MAX_DPL   8  /* head dims per lane at most: 256 (warp 32) or 512 (warp 64) */

__global__ void k_probe(int *out) {
    *out = PI_WARP;
}

void pi_cuda_probe(struct pi_backend *b, int *out) {
    k_probe<<<1, 1, 0, b->stream>>>(out);
    pi_cuda_launched(b);
}

/* ---- RMSNorm ----------------------------------------------------------------------- */

static __device__ __forceinline__ float vec_value(const uint8_t *g, uint32_t type, int64_t i) {
    switch (type) {
    case PI_TYPE_F16:
        return pi_h2f((uint32_t)g[2 * i] | ((uint32_t)g[2 * i + 1] << 8));
    case PI_TYPE_BF16:
        return __uint_as_float(((uint32_t)g[2 * i] | ((uint32_t)g[2 * i + 1] << 8)) << 16);
    default: /* F32, read by bytes like the others: no alignment is promised */
        return __uint_as_float((uint32_t)g[4 * i] | ((uint32_t)g[4 * i + 1] << 8) |
                               ((uint32_t)g[4 * i + 2] << 16) | ((uint32_t)g[4 * i + 3] << 24));
    }
}

/* One block of NORM_THREADS per token: y = x * (1 / sqrt(mean(x^2) + eps)) * g, the
 * sum of squares in double (a fixed tree over the threads' partial sums), as the CPU
 * computes it. x and y may alias: every read of the row for the sum happens before
 * the tree's barriers, and each element is then rewritten by the thread that reads it. */
__global__ void k_rmsnorm(const float *x, const uint8_t *__restrict__ g, uint32_t gtype, int64_t n,
                          float eps, float *y) {
    __shared__ double sh[NORM_THREADS];
    const float *xt = x + (int64_t)blockIdx.x * n;
    float *yt = y + (int64_t)blockIdx.x * n;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS)
        ss += (double)xt[i] * (double)xt[i];
    sh[threadIdx.x] = ss;
    __syncthreads();
    for (int s = NORM_THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const float scale = (float)(1.0 / sqrt(sh[0] / (double)n + (double)eps));
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS)
        yt[i] = xt[i] * scale * vec_value(g, gtype, i);
}

void pi_cuda_rmsnorm(struct pi_backend *b, const float *x, const struct pi_vector *g, float eps,
                     int64_t n_tok, float *y) {
    if (!x || !y || !g || !g->data || g->n <= 0 || n_tok < 0 ||
        (g->type != PI_TYPE_F32 && g->type != PI_TYPE_F16 && g->type != PI_TYPE_BF16)) {
        pi_cuda_fail(b, PI_ERR_INVALID_ARG);
        return;
    }
    if (n_tok == 0)
        return;
    if (n_tok > 0x7fffffff) {
        pi_cuda_fail(b, PI_ERR_RANGE);
        return;
    }
    k_rmsnorm<<<(unsigned)n_tok, NORM_THREADS, 0, b->stream>>>(x, (const uint8_t *)g->data, g->type,
                                                               g->n, eps, y);
    pi_cuda_launched(b);
}

/* ---- RoPE -------------------------------------------------------------------------- */

/* One block per token; thread pairs (h, i). The angle is computed in double from the
 * same expression as the CPU's and rounded to float cos and sin, so both backends
 * rotate by the same floats. */
__global__ void k_rope(float *x, int64_t n_head, int64_t head_dim, int64_t pos0, int64_t n_rot,
                       int neox, float base, float freq_scale, const float *factors,
                       float ext_factor, double lo, double hi, double mscale) {
    const int64_t t = blockIdx.x, half = n_rot / 2;
    const double pos = (double)(pos0 + t);
    for (int64_t k = threadIdx.x; k < n_head * half; k += blockDim.x) {
        const int64_t h = k / half, i = k % half;
        double theta = pos * pow((double)base, -2.0 * (double)i / (double)n_rot);
        if (factors)
            theta /= (double)factors[i];
        const double interp = theta * (double)freq_scale;
        if (ext_factor != 0.0f) {
            double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
            y = y < 0.0 ? 0.0 : y > 1.0 ? 1.0 : y;
            const double mix = (1.0 - y) * (double)ext_factor;
            theta = interp * (1.0 - mix) + theta * mix;
        } else {
            theta = interp;
        }
        const float c = (float)(cos(theta) * mscale), s = (float)(sin(theta) * mscale);
        float *v = x + (t * n_head + h) * head_dim;
        const int64_t a = neox ? i : 2 * i, bb = neox ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[bb];
        v[a] = x0 * c - x1 * s;
        v[bb] = x0 * s + x1 * c;
    }
}

static double yarn_corr(const struct pi_rope *r, float beta) {
    return (double)r->n_rot * log((double)r->n_ctx_orig / (2.0 * 3.14159265358979323846 *
                                                            (double)beta)) /
           (2.0 * log((double)r->base));
}

void pi_cuda_rope(struct pi_backend *b, float *x, int64_t n_tok, int64_t n_head, int64_t head_dim,
                  int64_t pos0, const struct pi_rope *r) {
    if (!x || !r || n_tok < 0 || n_head < 0 || r->n_rot < 0 || r->n_rot > head_dim || pos0 < 0) {
        pi_cuda_fail(b, PI_ERR_INVALID_ARG);
        return;
    }
    if (n_tok == 0 || n_head == 0 || r->n_rot < 2)
        return;
    if (n_tok > 0x7fffffff) {
        pi_cuda_fail(b, PI_ERR_RANGE);
        return;
    }
    /* the YaRN corrections on the host, in double, as the CPU computes them */
    double lo = 0.0, hi = 0.0, mscale = (double)r->attn_factor;
    if (r->ext_factor != 0.0f) {
        lo = yarn_corr(r, r->beta_fast);
        hi = yarn_corr(r, r->beta_slow);
        if (!r->yarn_exact) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        lo = lo > 0.0 ? lo : 0.0;
        hi = hi < (double)(r->n_rot - 1) ? hi : (double)(r->n_rot - 1);
        mscale *= 1.0 + 0.1 * log(1.0 / (double)r->freq_scale);
    }
    k_rope<<<(unsigned)n_tok, 128, 0, b->stream>>>(x, n_head, head_dim, pos0, r->n_rot, r->neox,
                                                   r->base, r->freq_scale, r->factors,
                                                   r->ext_factor, lo, hi, mscale);
    pi_cuda_launched(b);
}

/* ---- KV cache ---------------------------------------------------------------------- */

__global__ void k_to_f16(const float *__restrict__ src, int64_t n, uint16_t *__restrict__ dst) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = pi_f2h(src[i]);
}

void pi_cuda_kv_store(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                      int64_t n_tok, const float *k, const float *v) {
    if (!kv || !k || !v || n_tok < 0 || layer < 0 || layer >= kv->d.n_layer || pos0 < 0 ||
        pos0 + n_tok > kv->d.n_ctx) {
        pi_cuda_fail(b, PI_ERR_RANGE);
        return;
    }
    if (n_tok == 0)
        return;
    const size_t cell = (size_t)layer * (size_t)kv->d.n_ctx + (size_t)pos0;
    const int64_t nk = n_tok * kv->nk, nv = n_tok * kv->nv;
    k_to_f16<<<pi_cuda_grid(b, nk, EW_THREADS), EW_THREADS, 0, b->stream>>>(
        k, nk, kv->k + cell * (size_t)kv->nk);
    pi_cuda_launched(b);
    k_to_f16<<<pi_cuda_grid(b, nv, EW_THREADS), EW_THREADS, 0, b->stream>>>(
        v, nv, kv->v + cell * (size_t)kv->nv);
    pi_cuda_launched(b);
}

/* Head dims per lane for this cache on this device: 1, 2, 4 or 8; 0 if too wide. */
static int attn_dpl(const struct pi_backend *b, const struct pi_kv_desc *d) {
    const int64_t dmax = d->head_dim_k > d->head_dim_v ? d->head_dim_k : d->head_dim_v;
    for (int dpl = 1; dpl <= ATTN_MAX_DPL; dpl *= 2)
        if (dmax <= (int64_t)dpl * b->warp)
            return dpl;
    return 0;
}

int pi_cuda_attention_ok(const struct pi_backend *b, const struct pi_kv_desc *d) {
    return attn_dpl(b, d) != 0;
}

/* Causal attention, one block per (token, head) pair and split of the positions
 * (gridDim.y splits of `chunk` positions). Each warp takes every nw-th position of
 * the split with an online softmax (running max m, sum l, unnormalised output o in
 * DPL registers per lane), then the warps are merged in shared memory. One split:
 * out = o / l. Several: part [pair][split][2 + dv] = (m, l, o) for k_attn_merge.
 * K, V: the layer's [n_ctx][nk] and [n_ctx][nv] F16; q [n_tok][n_head][dk]. sinks
 * [n_head] or NULL: where out is written, head h's sink joins the sum (sink_div). */
/* The softmax's denominator for values O summed relative to the max M with sum L:
 * out = O * rel / divisor. Without a sink rel = 1, divisor = L; with sink logit s both
 * are taken relative to max(M, s): rel = e^(M - Mx), divisor = L rel + e^(s - Mx). */
static __device__ __forceinline__ float sink_div(float M, float L, const float *sinks,
                                                 int64_t h, float *rel) {
    if (!sinks) {
        *rel = 1.0f;
        return L;
    }
    const float s = sinks[h], Mx = fmaxf(M, s);
    *rel = expf(M - Mx);
    return L * *rel + expf(s - Mx);
}

template <int DPL>
__global__ void k_attention(const uint16_t *__restrict__ K, const uint16_t *__restrict__ V,
                            int64_t nk, int64_t nv, int64_t n_head, int64_t group, int64_t dk,
                            int64_t dv, const float *__restrict__ q, int64_t pos0, float inv,
                            float cap, int64_t window, int64_t chunk,
                            const float *__restrict__ sinks, float *__restrict__ out,
                            float *__restrict__ part) {
    extern __shared__ float sm[]; /* m[nw] | l[nw] | o[nw][dv] */
    const int64_t pair = blockIdx.x, t = pair / n_head, h = pair % n_head, hk = h / group;
    const int64_t n_pos = pos0 + t + 1; /* positions first .. n_pos - 1 */
    const int64_t first = window > 0 && n_pos > window ? n_pos - window : 0;
    const int64_t p_lo = first + (int64_t)blockIdx.y * chunk;
    const int64_t p_hi = p_lo + chunk < n_pos ? p_lo + chunk : n_pos;
    const int lane = (int)(threadIdx.x % PI_WARP), wid = (int)(threadIdx.x / PI_WARP);
    const int nw = (int)(blockDim.x / PI_WARP);

    float qv[DPL], o[DPL];
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int64_t d = lane + (int64_t)j * PI_WARP;
        qv[j] = d < dk ? q[pair * dk + d] : 0.0f;
        o[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const uint16_t *kh = K + hk * dk, *vh = V + hk * dv;
    /* two positions per step, p and p + nw, so their loads and reductions overlap */
    for (int64_t p = p_lo + wid; p < p_hi; p += 2 * nw) {
        const bool two = p + nw < p_hi; /* the same for the whole warp */
        const uint16_t *kp = kh + p * nk, *kp2 = kh + (two ? p + nw : p) * nk;
        float s = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            const int64_t d = lane + (int64_t)j * PI_WARP;
            if (d < dk) {
                s = fmaf(qv[j], pi_h2f(kp[d]), s);
                s2 = fmaf(qv[j], pi_h2f(kp2[d]), s2);
            }
        }
        s = pi_warp_sum(s) * inv;
        s2 = pi_warp_sum(s2) * inv;
        if (cap > 0.0f) {
            s = cap * tanhf(s / cap);
            s2 = cap * tanhf(s2 / cap);
        }
        /* online softmax: fold in position p, then p + nw */
        for (int i = 0; i < (two ? 2 : 1); i++) {
            const float si = i ? s2 : s;
            const float mn = fmaxf(m, si);
            const float corr = expf(m - mn), e = expf(si - mn);
            l = l * corr + e;
            const uint16_t *vp = vh + (p + i * nw) * nv;
#pragma unroll
            for (int j = 0; j < DPL; j++) {
                const int64_t d = lane + (int64_t)j * PI_WARP;
                if (d < dv)
                    o[j] = fmaf(e, pi_h2f(vp[d]), o[j] * corr);
            }
            m = mn;
        }
    }

    float *sm_m = sm, *sm_l = sm + nw, *sm_o = sm + 2 * nw;
    if (lane == 0) {
        sm_m[wid] = m;
        sm_l[wid] = l;
    }
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int64_t d = lane + (int64_t)j * PI_WARP;
        if (d < dv)
            sm_o[wid * dv + d] = o[j];
    }
    __syncthreads();
    /* merge the warps; a warp that saw no position has l = 0 and is skipped */
    float M = -INFINITY;
    for (int w = 0; w < nw; w++)
        if (sm_l[w] > 0.0f)
            M = fmaxf(M, sm_m[w]);
    float L = 0.0f;
    for (int w = 0; w < nw; w++)
        if (sm_l[w] > 0.0f)
            L += sm_l[w] * expf(sm_m[w] - M);
    float rel = 1.0f;
    const float div = part ? 1.0f : sink_div(M, L, sinks, h, &rel);
    for (int64_t d = threadIdx.x; d < dv; d += blockDim.x) {
        float O = 0.0f;
        for (int w = 0; w < nw; w++)
            if (sm_l[w] > 0.0f)
                O = fmaf(sm_o[w * dv + d], expf(sm_m[w] - M), O);
        if (part)
            part[(pair * gridDim.y + blockIdx.y) * (2 + dv) + 2 + d] = O;
        else
            out[pair * dv + d] = O * rel / div;
    }
    if (part && threadIdx.x == 0) {
        float *ps = part + (pair * gridDim.y + blockIdx.y) * (2 + dv);
        ps[0] = M;
        ps[1] = L;
    }
}

/* out [pair][dv] from the splits' (m, l, o): the same merge across splits. */
__global__ void k_attn_merge(const float *__restrict__ part, int64_t n_split, int64_t dv,
                             int64_t n_head, const float *__restrict__ sinks,
                             float *__restrict__ out) {
    const int64_t pair = blockIdx.x;
    const float *pp = part + pair * n_split * (2 + dv);
    float M = -INFINITY, L = 0.0f;
    for (int64_t s = 0; s < n_split; s++)
        if (pp[s * (2 + dv) + 1] > 0.0f)
            M = fmaxf(M, pp[s * (2 + dv)]);
    for (int64_t s = 0; s < n_split; s++)
        if (pp[s * (2 + dv) + 1] > 0.0f)
            L += pp[s * (2 + dv) + 1] * expf(pp[s * (2 + dv)] - M);
    float rel;
    const float div = sink_div(M, L, sinks, pair % n_head, &rel);
    for (int64_t d = threadIdx.x; d < dv; d += blockDim.x) {
        float O = 0.0f;
        for (int64_t s = 0; s < n_split; s++)
            if (pp[s * (2 + dv) + 1] > 0.0f)
                O = fmaf(pp[s * (2 + dv) + 2 + d], expf(pp[s * (2 + dv)] - M), O);
        out[pair * dv + d] = O * rel / div;
    }
}

template <int DPL>
static void attention_dpl(struct pi_backend *b, struct pi_kv *kv, int64_t layer, const float *q,
                          int64_t n_tok, int64_t pos0, const struct pi_attn *a, float *out) {
    const struct pi_kv_desc *d = &kv->d;
    const int64_t pairs = n_tok * d->n_head;
    /* the most positions one query sees */
    const int64_t n_pos_max = a->window > 0 && pos0 + n_tok > a->window ? a->window : pos0 + n_tok;
    /* splits of the positions when there are too few pairs to fill the device */
    const int64_t want = (int64_t)b->n_sm * 16;
    int64_t split = (want + pairs - 1) / pairs;
    const int64_t by_pos = (n_pos_max + ATTN_MIN_POS - 1) / ATTN_MIN_POS;
    const int64_t by_scratch = (int64_t)(b->scratch_floats / (size_t)(pairs * (2 + d->head_dim_v)));
    split = split < by_pos ? split : by_pos;
    split = split < by_scratch ? split : by_scratch;
    split = split < ATTN_MAX_SPLIT ? split : ATTN_MAX_SPLIT;
    if (split < 1)
        split = 1;
    const int64_t chunk = (n_pos_max + split - 1) / split;
    split = (n_pos_max + chunk - 1) / chunk;
    const int nw = ATTN_THREADS / b->warp;
    const size_t shmem = (size_t)nw * (size_t)(2 + d->head_dim_v) * sizeof(float);
    const size_t cells = (size_t)layer * (size_t)d->n_ctx;
    float *part = split > 1 ? b->scratch : NULL;
    k_attention<DPL><<<dim3((unsigned)pairs, (unsigned)split), ATTN_THREADS, shmem, b->stream>>>(
        kv->k + cells * (size_t)kv->nk, kv->v + cells * (size_t)kv->nv, kv->nk, kv->nv, d->n_head,
        d->n_head / d->n_head_kv, d->head_dim_k, d->head_dim_v, q, pos0, a->scale, a->softcap,
        a->window, chunk, a->sinks, out, part);
    pi_cuda_launched(b);
    if (part) {
        k_attn_merge<<<(unsigned)pairs, 128, 0, b->stream>>>(part, split, d->head_dim_v,
                                                              d->n_head, a->sinks, out);
        pi_cuda_launched(b);
    }
}

void pi_cuda_attention(struct pi_backend *b, struct pi_kv *kv, int64_t layer, const float *q,
                       int64_t n_tok, int64_t pos0, const struct pi_attn *a, float *out) {
    if (!kv || !q || !out || !a || n_tok < 0 || layer < 0 || layer >= kv->d.n_layer || pos0 < 0 ||
        pos0 + n_tok > kv->d.n_ctx) {
        pi_cuda_fail(b, PI_ERR_RANGE);
        return;
    }
    if (n_tok == 0)
        return;
    if (n_tok * kv->d.n_head > 0x7fffffff) {
        pi_cuda_fail(b, PI_ERR_RANGE);
        return;
    }
    switch (attn_dpl(b, &kv->d)) {
    case 1:
        attention_dpl<1>(b, kv, layer, q, n_tok, pos0, a, out);
        break;
    case 2:
        attention_dpl<2>(b, kv, layer, q, n_tok, pos0, a, out);
        break;
    case 4:
        attention_dpl<4>(b, kv, layer, q, n_tok, pos0, a, out);
        break;
    case 8:
        attention_dpl<8>(b, kv, layer, q, n_tok, pos0, a, out);
        break;
    default:
        pi_cuda_fail(b, PI_ERR_UNSUPPORTED);
        break; /* kv_create refuses these */
    }
}

/* ---- FFN activations, add ---------------------------------------------------------- */

static __device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

static __device__ __forceinline__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

static __device__ __forceinline__ float act(int a, float g, const float *u, int64_t k) {
    switch (a) {
    case PI_ACT_SILU_MUL:
        return g / (1.0f + expf(-g)) * u[k];
    case PI_ACT_RELU_MUL:
        return g > 0.0f ? g * u[k] : 0.0f;
    case PI_ACT_RELU_RELU_MUL:
        return g > 0.0f && u[k] > 0.0f ? g * u[k] : 0.0f;
    case PI_ACT_GELU_MUL:
        return gelu_tanh(g) * u[k];
    case PI_ACT_GELU_ERF_MUL:
        return gelu_erf(g) * u[k];
    case PI_ACT_SWIGLU_OAI: { /* NaN stays NaN, as on the CPU */
        const float x = g > 7.0f ? 7.0f : g;
        const float y = u[k] > 7.0f ? 7.0f : u[k] < -7.0f ? -7.0f : u[k];
        return x / (1.0f + expf(-1.702f * x)) * (y + 1.0f);
    }
    case PI_ACT_SILU:
        return g / (1.0f + expf(-g));
    case PI_ACT_GELU:
        return gelu_tanh(g);
    case PI_ACT_GELU_ERF:
        return gelu_erf(g);
    case PI_ACT_RELU:
        return g > 0.0f ? g : 0.0f;
    default: /* PI_ACT_RELU_SQR */
        return g > 0.0f ? g * g : 0.0f;
    }
}

/* g [n_tok][n] = act(g, u), or 0 where score [n_tok][stride] at map[i] is below thr
 * (or NaN, or map[i] outside the score row); score NULL: no mask. */
__global__ void k_ffn_act(int a, float *g, const float *u, int64_t n_tok, int64_t n,
                          const float *__restrict__ score, int64_t stride,
                          const int32_t *__restrict__ map, float thr) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n_tok * n;
         k += (int64_t)gridDim.x * blockDim.x) {
        int on = 1;
        if (score) {
            const int64_t t = k / n, i = k % n, m = map[i];
            on = m >= 0 && m < stride && score[t * stride + m] >= thr;
        }
        g[k] = on ? act(a, g[k], u, k) : 0.0f;
    }
}

void pi_cuda_ffn_act(struct pi_backend *b, enum pi_act a, float *g, const float *u, int64_t n) {
    pi_cuda_ffn_act_masked(b, a, g, u, 1, n, NULL, 0, NULL, 0.0f);
}

void pi_cuda_ffn_act_masked(struct pi_backend *b, enum pi_act a, float *g, const float *u,
                            int64_t n_tok, int64_t n, const float *score, int64_t score_stride,
                            const int32_t *map, float thr) {
    if (!g || (!u && pi_act_gated(a)) || n_tok < 0 || n < 0 ||
        (score && (!map || score_stride <= 0)) || (int)a < 0 || a >= PI_ACT_COUNT) {
        pi_cuda_fail(b, PI_ERR_INVALID_ARG);
        return;
    }
    if (n_tok == 0 || n == 0)
        return;
    k_ffn_act<<<pi_cuda_grid(b, n_tok * n, EW_THREADS), EW_THREADS, 0, b->stream>>>(
        (int)a, g, u, n_tok, n, score, score_stride, map, thr);
    pi_cuda_launched(b);
}

/* g [n] = v = act(g) * u (act(g) when u is NULL) where |teal ? v : act(g)| > thr, else 0
 * (a sparsified file's threshold mode; act non-gated). */
__global__ void k_ffn_act_thr(int a, float *g, const float *__restrict__ u, int64_t n, float thr,
                              int teal) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        const float x = act(a, g[k], u, k), v = u ? x * u[k] : x; /* u NULL: a plain FFN */
        g[k] = fabsf(teal ? v : x) > thr ? v : 0.0f;
    }
}

void pi_cuda_ffn_act_thr(struct pi_backend *b, enum pi_act a, float *g, const float *u, int64_t n,
                         float thr, int teal) {
    if (!g || n < 0 || (int)a < 0 || a >= PI_ACT_COUNT || pi_act_gated(a)) {
        pi_cuda_fail(b, PI_ERR_INVALID_ARG);
        return;
    }
    if (n == 0)
        return;
    k_ffn_act_thr<<<pi_cuda_grid(b, n, EW_THREADS), EW_THREADS, 0, b->stream>>>((int)a, g, u, n,
                                                                                thr, teal);
    pi_cuda_launched(b);
}

__global__ void k_add(float *y, const float *x, int64_t n) { /* y may be x */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

void pi_cuda_add(struct pi_backend *b, float *y, const float *x, int64_t n) {
    if (!y || !x || n < 0) {
        pi_cuda_fail(b, PI_ERR_INVALID_ARG);
        return;
    }
    if (n == 0)
        return;
    k_add<<<pi_cuda_grid(b, n, EW_THREADS), EW_THREADS, 0, b->stream>>>(y, x, n);
    pi_cuda_launched(b);
}

/* ---- LayerNorm, biases, scale, soft-capping ----------------------------------------- */

/* One block per token: mean, then the biased variance around it, each summed in
 * double over a fixed tree as the CPU sums them in order (rounding may differ in the
 * last bits; tests/gpu compares within a tolerance). */
__global__ void k_layernorm(const float *x, const uint8_t *__restrict__ g, uint32_t gtype,
                            const uint8_t *__restrict__ bias, uint32_t btype, int64_t n, float eps,
                            float *y) {
    __shared__ double sh[NORM_THREADS];
    const float *xt = x + (int64_t)blockIdx.x * n;
    float *yt = y + (int64_t)blockIdx.x * n;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS)
        sum += (double)xt[i];
    sh[threadIdx.x] = sum;
    __syncthreads();
    for (int s = NORM_THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const double mean = sh[0] / (double)n;
    __syncthreads();
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS)
        ss += ((double)xt[i] - mean) * ((double)xt[i] - mean);
    sh[threadIdx.x] = ss;
    __syncthreads();
    for (int s = NORM_THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = (float)(1.0 / sqrt(sh[0] / (double)n + (double)eps)), m = (float)mean;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) {
        float v = (xt[i] - m) * inv;
        if (g)
            v *= vec_value(g, gtype, i);
        if (bias)
            v += vec_value(bias, btype, i);
        yt[i] = v;
    }
}

static int vec_ok(const struct pi_vector *v, int64_t n) {
    return !v || !v->data ||
           (v->n == n && (v->type == PI_TYPE_F32 || v->type == PI_TYPE_F16 ||
                          v->type == PI_TYPE_BF16));
}

void pi_cuda_layernorm(struct pi_backend *b, const float *x, const struct pi_vector *g,
                       const struct pi_vector *bias, int64_t n, float eps, int64_t n_tok,
                       float *y) {
    if (!x || !y || n <= 0 || n_tok < 0 || !vec_ok(g, n) || !vec_ok(bias, n)) {
        pi_cuda_fail(b, PI_ERR_INVALID_ARG);
        return;
    }
    if (n_tok == 0)
        return;
    if (n_tok > 0x7fffffff) {
        pi_cuda_fail(b, PI_ERR_RANGE);
        return;
    }
    const int hg = g && g->data, hb = bias && bias->data;
    k_layernorm<<<(unsigned)n_tok, NORM_THREADS, 0, b->stream>>>(
        x, hg ? (const uint8_t *)g->data : NULL, hg ? g->type : 0,
        hb ? (const uint8_t *)bias->data : NULL, hb ? bias->type : 0, n, eps, y);
    pi_cuda_launched(b);
}

__global__ void k_add_rows(float *y, const uint8_t *__restrict__ v, uint32_t vtype, int64_t n,
                           int64_t total) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (int64_t)gridDim.x * blockDim.x)
        y[k] += vec_value(v, vtype, k % n);
}

void pi_cuda_add_rows(struct pi_backend *b, float *y, const struct pi_vector *v, int64_t n_tok) {
    if (!y || !v || !v->data || v->n <= 0 || n_tok < 0 || !vec_ok(v, v->n)) {
        pi_cuda_fail(b, PI_ERR_INVALID_ARG);
        return;
    }
    if (n_tok == 0)
        return;
    const int64_t total = n_tok * v->n;
    k_add_rows<<<pi_cuda_grid(b, total, EW_THREADS), EW_THREADS, 0, b->stream>>>(
        y, (const uint8_t *)v->data, v->type, v->n, total);
    pi_cuda_launched(b);
}

__global__ void k_scale(float *x, float s, float cap, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = cap > 0.0f ? cap * tanhf(x[i] / cap) : x[i] * s;
}

void pi_cuda_scale(struct pi_backend *b, float *x, float s, int64_t n) {
    if (!x || n < 0) {
        pi_cuda_fail(b, PI_ERR_INVALID_ARG);
        return;
    }
    if (n == 0)
        return;
    k_scale<<<pi_cuda_grid(b, n, EW_THREADS), EW_THREADS, 0, b->stream>>>(x, s, 0.0f, n);
    pi_cuda_launched(b);
}

void pi_cuda_softcap(struct pi_backend *b, float *x, float cap, int64_t n) {
    if (!x || n < 0 || !(cap > 0.0f)) {
        pi_cuda_fail(b, PI_ERR_INVALID_ARG);
        return;
    }
    if (n == 0)
        return;
    k_scale<<<pi_cuda_grid(b, n, EW_THREADS), EW_THREADS, 0, b->stream>>>(x, 1.0f, cap, n);
    pi_cuda_launched(b);
}
