/* cpu_backend.c -- the CPU backend: ops of backend.h on host memory, run on the
 * context's worker threads. Every op splits its output between threads in fixed
 * ranges and each output value is computed by one thread in a fixed order, so the
 * results do not depend on the number of threads. */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "cpu/kernels.h"
#include "powerinfer.h"
#include "runtime/fp16.h"
#include "runtime/hadamard.h"
#include "runtime/quantize.h"
#include "runtime/pool.h"
#include "util/error.h"
#include "runtime/types.h"

struct pi_backend {
    const struct pi_allocator *alloc;
    struct pi_pool *pool;
    struct pi_cpu_kernels k;
    int64_t max_tokens, max_width;
    int f32_activations;
    uint8_t *xq;    /* activations in a dot-product vector format [max_tokens][..] */
    size_t xq_cap;
    float *scratch; /* per thread: max_width floats */
    int scratch_threads;
    /* per thread, where the table has attn_scores: ATT_UNIT_ROWS rows of scores
     * (max_width + 1 floats each) and their queries (max_width each) */
    float *att;
    /* The packed prompt gemm (kernels.h), where the table has one: the activations of a
     * matmul packed for it [pi_gemm_pack_bytes(max_width, max_tokens)], and per thread
     * PI_GEMM_PACKED_SCRATCH bytes of panel; both 64-byte aligned inside their blocks. */
    int packed;
    void *xp_block, *panel_block;
    uint8_t *xp, *panel;
    int32_t *rows;  /* max_width row ids (matmul_t_rows) */
    /* The 8-bit down projection of 1 .. AXPY_DEQ_TOKENS - 1 tokens (accumulate_rows_i8):
     * each token's non-zero rows [AXPY_DEQ_TOKENS - 1][max_width] and the partial sums
     * of its row chunks [AXPY_DEQ_TOKENS - 1][AXPY_RCHUNKS][max_width]; NULL with
     * f32_activations. */
    int32_t *own;
    float *tpart;
    float *deq;     /* per thread: a tile of weight rows as floats (axpy_cols_job),
                     * deq_floats() */
    /* RoPE's rotations of the last step, cos and sin per (token, pair) [max_tokens][2][..]
     * (max_width / 2 pairs at most): Q, K and every layer with the same parameters
     * reuse them (rope_table). rope_key says what they were made for. */
    float *rope_cs;
    struct pi_rope rope_key;
    int64_t rope_pos0, rope_ntok;
    int rope_valid;
    int fault;      /* PI_ERR_INTERNAL once an op was refused (refuse()); sync returns it */
};

/* Steps of at least this many tokens use the packed gemm where the table has one: with
 * fewer, packing costs what it saves (one tile decodes each weight group once either
 * way). */
#define PACKED_MIN_TOKENS 16

/* matmul_t / matmul_t_rows (axpy_cols_job): rows added per group, columns per chunk */
#define AXPY_GROUP 16
#define AXPY_CHUNK 256
/* From this many tokens on, a group's rows are converted to floats once per chunk and
 * every token adds them from there (one conversion instead of one per token). */
#define AXPY_DEQ_TOKENS 4
/* Fewer tokens take the 8-bit path (accumulate_rows_i8): each token's non-zero rows in
 * at most AXPY_RCHUNKS chunks of whole rows (at least AXPY_RCHUNK_MIN rows, a multiple
 * of AXPY_GROUP; sizes from the row count alone), a partial sum per chunk, then the
 * chunks' sums added in order: whole rows per thread, the same sums for any number of
 * threads. */
#define AXPY_RCHUNKS    16
#define AXPY_RCHUNK_MIN 64
/* That prompt path's groups and chunks: a token needs few of a group's rows (a sparse
 * prompt's down projection: one row in ten), so groups are long, for each token's call
 * to add several rows per load and store of its outputs; chunks are narrow, for the
 * group's tile (AXPY_PGROUP x chunk floats) to stay in L1 (wider where a block is: the
 * K-quants' 256). */
#define AXPY_PGROUP 128
#define AXPY_PCHUNK 64
#define AXPY_PTILE 256 /* the widest chunk: floats per tile row allocated */
/* A prompt in fast mode whose tokens use at least this share of the union rows (non-zero
 * activations over tokens x rows) takes the 8-bit path (axpy_rows_i8_tok: each token adds
 * every row of a group, zero or not, in integers); sparser ones the float tile above,
 * which adds only the non-zero (token, row) pairs. Measured (Zen 4, 2 threads, 128-token
 * prompts of 1B-shape sparsified files, Q5_0 down): the two break even at a share of
 * 0.115 (CATS 90 %); at 0.30 (CATS 70 %) the 8-bit path is 1.1x, at 1.0 (dense mode) 1.9x.
 * Rows go to it AXPY_TGROUP at a time (a multiple of 16, at most AXPY_PGROUP: its
 * activations use the tile's space). */
#define AXPY_I8_TOK_DENSITY 0.15
#define AXPY_TGROUP 64
_Static_assert(AXPY_TGROUP % 16 == 0 && AXPY_TGROUP <= AXPY_PGROUP, "AXPY_TGROUP");

/* The widest K head a quantized cache takes (attention quantizes a query head on the
 * stack). */
#define KV_Q8_MAX_DIM 1024

struct pi_kv {
    struct pi_kv_desc d;
    int64_t nk, nv;  /* values per position: n_head_kv * head_dim_{k,v} */
    size_t kb, vb;   /* bytes per position (pi_kv_row_bytes) */
    uint8_t *k, *v;  /* [n_layer][n_ctx][kb], [..][vb]: F16, Q8_0 or Q4_0 (d.type, d.type_v) */
    int32_t *iota;   /* quantized keys: 0 .. n_ctx - 1 (the positions' rows for gemv_idx) */
    int64_t rot;     /* Q4_0: keys stored Hadamard-rotated in blocks of this many values
                      * per head (runtime/hadamard.h), queries rotated alike; else 0 */
};

/* The weight type of a quantized cache type's rows (PI_TYPE_Q8_0 or PI_TYPE_Q4_0): its
 * kernels score a query against K rows (kv_ktype) and convert V rows (kv_vtype), as
 * for weights. */
static int kv_wtype(int type) {
    return type == PI_KV_Q4_0 ? PI_TYPE_Q4_0 : PI_TYPE_Q8_0;
}

static int kv_ktype(const struct pi_kv *kv) {
    return kv_wtype(kv->d.type);
}

static int kv_vtype(const struct pi_kv *kv) {
    return kv_wtype(kv->d.type_v);
}

/* A cache type this backend stores: F16, Q8_0, Q4_0. */
static int kv_type_known(int type) {
    return type == PI_KV_F16 || type == PI_KV_Q8_0 || type == PI_KV_Q4_0;
}

/* ---- life cycle ------------------------------------------------------------------ */

static void cpu_destroy(struct pi_backend *b) {
    if (!b)
        return;
    pi_pool_destroy(b->pool);
    pi_free(b->alloc, b->xq);
    pi_free(b->alloc, b->scratch);
    pi_free(b->alloc, b->deq);
    pi_free(b->alloc, b->att);
    pi_free(b->alloc, b->xp_block);
    pi_free(b->alloc, b->panel_block);
    pi_free(b->alloc, b->rows);
    pi_free(b->alloc, b->own);
    pi_free(b->alloc, b->tpart);
    pi_free(b->alloc, b->rope_cs);
    pi_free(b->alloc, b);
}

static uint8_t *align64(void *p) {
    return (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* Query rows of one attention unit (attn_units): a tile of tokens times a GQA group's
 * heads, their scores computed in one attn_scores call. */
#define ATT_UNIT_ROWS 16

static size_t att_floats(const struct pi_backend *b) {
    return (size_t)ATT_UNIT_ROWS * (2 * (size_t)b->max_width + 1);
}

/* Per thread for axpy_cols_job's prompt path: the tile (AXPY_PGROUP x AXPY_PTILE floats),
 * then per token of a group its non-zero activations (AXPY_PGROUP floats), their rows'
 * places in the tile (AXPY_PGROUP bytes, as AXPY_PGROUP / 4 floats) and their count
 * (one). */
static size_t deq_floats(const struct pi_backend *b) {
    return (size_t)AXPY_PGROUP * AXPY_PTILE +
           (size_t)b->max_tokens * (AXPY_PGROUP + AXPY_PGROUP / 4 + 1);
}

static int alloc_scratch(struct pi_backend *b, int n_threads) {
    float *s = pi_calloc(b->alloc, (size_t)n_threads * (size_t)b->max_width, sizeof *s);
    void *panel = NULL;
    float *att = NULL;
    float *deq = s ? pi_malloc(b->alloc, (size_t)n_threads * deq_floats(b) * sizeof *deq) : NULL;
    if (s && b->packed)
        panel = pi_malloc(b->alloc, (size_t)n_threads * PI_GEMM_PACKED_SCRATCH + 64);
    if (s && b->k.attn_scores)
        att = pi_malloc(b->alloc, (size_t)n_threads * att_floats(b) * sizeof *att);
    if (!s || !deq || (b->packed && !panel) || (b->k.attn_scores && !att)) {
        pi_free(b->alloc, s);
        pi_free(b->alloc, deq);
        pi_free(b->alloc, panel);
        pi_free(b->alloc, att);
        return PI_ERR_NOMEM;
    }
    pi_free(b->alloc, b->scratch);
    pi_free(b->alloc, b->deq);
    pi_free(b->alloc, b->panel_block);
    pi_free(b->alloc, b->att);
    b->att = att;
    b->deq = deq;
    b->scratch = s;
    b->panel_block = panel;
    b->panel = panel ? align64(panel) : NULL;
    b->scratch_threads = n_threads;
    return PI_OK;
}

static int cpu_create(struct pi_backend **out, const struct pi_backend_config *cfg) {
    *out = NULL;
    struct pi_backend *b = pi_calloc(cfg->alloc, 1, sizeof *b);
    if (!b)
        return PI_ERR_NOMEM;
    b->alloc = cfg->alloc;
    b->max_tokens = cfg->max_tokens;
    b->max_width = cfg->max_width;
    b->f32_activations = cfg->f32_activations;
    pi_cpu_kernels_init(&b->k, pi_cpu_detect());
    /* The largest vector format is Q8_K (292 bytes per 256 values) or F32; round the
     * width up to whole 256-blocks. */
    int64_t w = (cfg->max_width + 255) / 256 * 256;
    size_t per = pi_vec_bytes(PI_VEC_F32, w);
    size_t q8k = pi_vec_bytes(PI_VEC_Q8_K, w);
    per = per > q8k ? per : q8k;
    b->xq_cap = per * (size_t)cfg->max_tokens;
    b->xq = pi_malloc(b->alloc, b->xq_cap);
    b->rows = pi_malloc(b->alloc, (size_t)cfg->max_width * sizeof *b->rows);
    b->rope_cs = pi_malloc(b->alloc, (size_t)cfg->max_tokens * (size_t)(cfg->max_width / 2 + 1) *
                                         2 * sizeof *b->rope_cs);
    for (int t = 0; t < PI_TYPE_ID_LIMIT; t++)
        b->packed |= b->k.dot[t].gemm_packed != NULL;
    b->packed &= cfg->max_tokens >= PACKED_MIN_TOKENS && !cfg->f32_activations;
    if (b->packed) {
        b->xp_block = pi_malloc(b->alloc, pi_gemm_pack_bytes(w, cfg->max_tokens) + 64);
        b->xp = b->xp_block ? align64(b->xp_block) : NULL;
    }
    if (!cfg->f32_activations) {
        const size_t nt = (size_t)(AXPY_DEQ_TOKENS - 1), wd = (size_t)cfg->max_width;
        b->own = pi_malloc(b->alloc, nt * wd * sizeof *b->own);
        b->tpart = pi_malloc(b->alloc, nt * AXPY_RCHUNKS * wd * sizeof *b->tpart);
    }
    int st = b->xq && b->rows && b->rope_cs && (!b->packed || b->xp) &&
                     (cfg->f32_activations || (b->own && b->tpart))
                 ? PI_OK
                 : PI_ERR_NOMEM;
    if (st == PI_OK)
        st = pi_pool_create(&b->pool, cfg->n_threads, b->alloc);
    if (st == PI_OK)
        st = alloc_scratch(b, cfg->n_threads);
    if (st != PI_OK) {
        cpu_destroy(b);
        return st;
    }
    *out = b;
    return PI_OK;
}

static int cpu_set_threads(struct pi_backend *b, int n) {
    struct pi_pool *p;
    PI_TRY(pi_pool_create(&p, n, b->alloc));
    if (n > b->scratch_threads && alloc_scratch(b, n) != PI_OK) {
        pi_pool_destroy(p);
        return PI_ERR_NOMEM;
    }
    pi_pool_destroy(b->pool);
    b->pool = p;
    return PI_OK;
}

static int cpu_n_threads(const struct pi_backend *b) {
    return pi_pool_n_threads(b->pool);
}

static int cpu_buf_alloc(struct pi_backend *b, size_t size, void **out) {
    *out = pi_malloc(b->alloc, size);
    return *out ? PI_OK : PI_ERR_NOMEM;
}

static void cpu_buf_free(struct pi_backend *b, void *buf) {
    pi_free(b->alloc, buf);
}

static int cpu_copy(struct pi_backend *b, void *dst, const void *src, size_t size) {
    (void)b;
    memcpy(dst, src, size);
    return PI_OK;
}

/* Ops run before they return; the only error is a refused op, and it stays: the
 * caller's buffers and the cache may hold anything after it. */
static int cpu_sync(struct pi_backend *b) {
    return b->fault;
}

/* 1 (and the backend faults) if an op would run past the buffers create() sized: rows
 * of more than max_width values (xq, the per-thread scratch, the row list) or more
 * than max_tokens tokens. The context sizes both from every width its model has, so
 * this is a bug caught before it writes out of bounds, not a case to handle. */
static int refuse(struct pi_backend *b, int64_t width, int64_t n_tok) {
    if (width >= 0 && width <= b->max_width && n_tok >= 0 && n_tok <= b->max_tokens)
        return 0;
    b->fault = PI_ERR_INTERNAL;
    return 1;
}

static int cpu_kv_create(struct pi_backend *b, const struct pi_kv_desc *d, struct pi_kv **out) {
    *out = NULL;
    /* Q8_0, Q4_0 (keys, values or both): each head's slice whole blocks, and a query
     * head fits the stack buffer of its quantized copy (attn_pairs) */
    if (!kv_type_known(d->type) || !kv_type_known(d->type_v) ||
        (d->type != PI_KV_F16 && (d->head_dim_k % 32 || d->head_dim_k > KV_Q8_MAX_DIM)) ||
        (d->type_v != PI_KV_F16 && d->head_dim_v % 32))
        return PI_ERR_UNSUPPORTED;
    struct pi_kv *kv = pi_calloc(b->alloc, 1, sizeof *kv);
    if (!kv)
        return PI_ERR_NOMEM;
    kv->d = *d;
    kv->nk = d->n_head_kv * d->head_dim_k;
    kv->nv = d->n_head_kv * d->head_dim_v;
    kv->kb = pi_kv_row_bytes(d->type, kv->nk);
    kv->vb = pi_kv_row_bytes(d->type_v, kv->nv);
    kv->rot = d->type == PI_KV_Q4_0 ? pi_hadamard_block(d->head_dim_k) : 0;
    /* Not zeroed: a position is always written before it is read, and untouched pages
     * of a large allocation cost no resident memory. */
    size_t cells = (size_t)d->n_ctx * (size_t)d->n_layer;
    if (kv->kb > SIZE_MAX / cells || kv->vb > SIZE_MAX / cells) {
        pi_free(b->alloc, kv);
        return PI_ERR_NOMEM;
    }
    kv->k = pi_malloc(b->alloc, cells * kv->kb);
    kv->v = pi_malloc(b->alloc, cells * kv->vb);
    if (d->type != PI_KV_F16) {
        kv->iota = pi_malloc(b->alloc, (size_t)d->n_ctx * sizeof *kv->iota);
        for (int64_t i = 0; kv->iota && i < d->n_ctx; i++)
            kv->iota[i] = (int32_t)i;
    }
    if (!kv->k || !kv->v || (d->type != PI_KV_F16 && !kv->iota)) {
        pi_free(b->alloc, kv->k);
        pi_free(b->alloc, kv->v);
        pi_free(b->alloc, kv->iota);
        pi_free(b->alloc, kv);
        return PI_ERR_NOMEM;
    }
    *out = kv;
    return PI_OK;
}

static int kv_range_ok(const struct pi_kv *kv, int64_t layer, int64_t pos0, int64_t n) {
    return kv && layer >= 0 && layer < kv->d.n_layer && pos0 >= 0 && n >= 0 &&
           pos0 + n <= kv->d.n_ctx;
}

static int cpu_kv_get(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                      int64_t n, void *k, void *v) {
    (void)b;
    if (!kv_range_ok(kv, layer, pos0, n))
        return PI_ERR_INVALID_ARG;
    const size_t cell = (size_t)layer * (size_t)kv->d.n_ctx + (size_t)pos0;
    memcpy(k, kv->k + cell * kv->kb, (size_t)n * kv->kb);
    memcpy(v, kv->v + cell * kv->vb, (size_t)n * kv->vb);
    return PI_OK;
}

static int cpu_kv_set(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                      int64_t n, const void *k, const void *v) {
    (void)b;
    if (!kv_range_ok(kv, layer, pos0, n))
        return PI_ERR_INVALID_ARG;
    const size_t cell = (size_t)layer * (size_t)kv->d.n_ctx + (size_t)pos0;
    memcpy(kv->k + cell * kv->kb, k, (size_t)n * kv->kb);
    memcpy(kv->v + cell * kv->vb, v, (size_t)n * kv->vb);
    return PI_OK;
}

static void cpu_kv_destroy(struct pi_backend *b, struct pi_kv *kv) {
    if (!kv)
        return;
    pi_free(b->alloc, kv->k);
    pi_free(b->alloc, kv->v);
    pi_free(b->alloc, kv->iota);
    pi_free(b->alloc, kv);
}

/* ---- matmul ------------------------------------------------------------------------ */

struct matmul_job {
    struct pi_backend *b;
    const struct pi_weight *w;
    const struct pi_dot_kernel *dk;
    const float *x;
    float *y;
    int64_t n_tok;
    size_t vb; /* bytes of one quantized activation vector */
};

static void quantize_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    struct matmul_job *j = arg;
    (void)ith;
    const int64_t n = j->w->n_in;
    for (int64_t t = lo; t < hi; t++) {
        const float *x = j->x + t * n;
        uint8_t *q = j->b->xq + (size_t)t * j->vb;
        switch (j->dk->fmt) {
        case PI_VEC_F32:
            memcpy(q, x, (size_t)n * sizeof *x);
            break;
        case PI_VEC_Q8_0:
            j->b->k.quantize_q8_0(x, q, n);
            break;
        case PI_VEC_Q8_K:
        default:
            j->b->k.quantize_q8_k(x, q, n);
            break;
        }
    }
}

/* Tiles of the packed activations (kernels.h), from xq. */
static void pack_tiles(void *arg, int64_t lo, int64_t hi, int ith) {
    struct matmul_job *j = arg;
    (void)ith;
    j->dk->pack_x(j->b->xq, j->vb, j->n_tok, j->w->n_in, lo, hi, j->b->xp);
}

static void gemm_packed_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    struct matmul_job *j = arg;
    const struct pi_weight *w = j->w;
    j->dk->gemm_packed((const uint8_t *)w->data + (size_t)lo * w->row_bytes, w->row_bytes,
                       hi - lo, j->b->xp, j->n_tok, j->y + lo, w->n_out, w->n_in,
                       j->b->panel + (size_t)ith * PI_GEMM_PACKED_SCRATCH);
}

static void gemm_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    struct matmul_job *j = arg;
    const struct pi_weight *w = j->w;
    (void)ith;
    j->dk->gemm((const uint8_t *)w->data + (size_t)lo * w->row_bytes, w->row_bytes, hi - lo,
                j->b->xq, j->vb, j->n_tok, j->y + lo, w->n_out, w->n_in);
}

/* Rows per chunk: about 2 chunks per thread, in multiples of 16 rows, so each thread
 * streams long contiguous runs of rows (the hardware prefetcher needs them) while a
 * descheduled thread's second chunk can still be taken over. Every row's result is
 * computed the same way whatever the chunking, so logits do not depend on it. */
static int64_t row_grain(int64_t n_out, int n_threads) {
    int64_t g = (n_out / (2 * n_threads) + 15) / 16 * 16;
    return g < 16 ? 16 : g;
}

/* Float-activation path for quantized weights: dequantize each row once into the
 * thread's scratch, then float dot products with every token. */
static void float_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    struct matmul_job *j = arg;
    const struct pi_weight *w = j->w;
    const struct pi_dot_kernel *f32 = &j->b->k.dot[PI_TYPE_F32];
    float *row = j->b->scratch + (size_t)ith * (size_t)j->b->max_width;
    for (int64_t r = lo; r < hi; r++) {
        j->b->k.to_float[w->type]((const uint8_t *)w->data + (size_t)r * w->row_bytes, row,
                                  w->n_in);
        for (int64_t t = 0; t < j->n_tok; t++)
            j->y[t * w->n_out + r] = f32->dot(row, j->x + t * w->n_in, w->n_in);
    }
}

static void cpu_matmul(struct pi_backend *b, const struct pi_weight *w, const float *x,
                       int64_t n_tok, float *y) {
    struct matmul_job j = {b, w, &b->k.dot[w->type], x, y, n_tok, 0};
    if (refuse(b, w->n_in, n_tok))
        return;
    const int64_t grain = row_grain(w->n_out, pi_pool_n_threads(b->pool));
    if (b->f32_activations && j.dk->fmt != PI_VEC_F32) {
        pi_pool_for(b->pool, w->n_out, grain, float_rows, &j);
        return;
    }
    j.vb = pi_vec_bytes(j.dk->fmt, w->n_in);
    /* Quantizing a few rows costs less than waking the workers for it. */
    if (n_tok <= 4)
        quantize_rows(&j, 0, n_tok, 0);
    else
        pi_pool_for(b->pool, n_tok, 1, quantize_rows, &j);
    if (b->packed && j.dk->gemm_packed && n_tok >= PACKED_MIN_TOKENS) {
        pi_pool_for(b->pool, (n_tok + PI_GEMM_PACK_TOKENS - 1) / PI_GEMM_PACK_TOKENS, 1,
                    pack_tiles, &j);
        pi_pool_for(b->pool, w->n_out, grain, gemm_packed_rows, &j);
        return;
    }
    pi_pool_for(b->pool, w->n_out, grain, gemm_rows, &j);
}

/* The rows of several weights on the same activations as one row space for the pool:
 * each range is cut at the weights' boundaries, each piece a gemm of its weight. */
#define MATMUL_N_MAX 4
struct multi_job {
    struct matmul_job m[MATMUL_N_MAX];
    int64_t start[MATMUL_N_MAX + 1]; /* first row of each weight in the row space */
    int nw, packed;
};

static void multi_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    struct multi_job *mj = arg;
    for (int i = 0; i < mj->nw && lo < hi; i++) {
        const int64_t a = lo > mj->start[i] ? lo : mj->start[i];
        const int64_t e = hi < mj->start[i + 1] ? hi : mj->start[i + 1];
        if (a >= e)
            continue;
        (mj->packed ? gemm_packed_rows : gemm_rows)(&mj->m[i], a - mj->start[i],
                                                     e - mj->start[i], ith);
    }
}

/* Quantized once for all the weights (and packed once where they share a packed
 * layout), then one pass of the pool over all their rows: fewer waits for the slowest
 * thread, and no activations prepared twice. Weights whose activation formats differ,
 * or float activations, take the matmul path one by one. */
static void cpu_matmul_n(struct pi_backend *b, int nw, const struct pi_weight *const *ws,
                         const float *x, int64_t n_tok, float *const *ys) {
    int same = nw >= 2 && nw <= MATMUL_N_MAX && !b->f32_activations;
    for (int i = 1; same && i < nw; i++)
        same = ws[i]->n_in == ws[0]->n_in &&
               b->k.dot[ws[i]->type].fmt == b->k.dot[ws[0]->type].fmt;
    /* weights that would each take the packed gemm but in different layouts: each its own */
    int packs = 0, samepack = 1;
    for (int i = 0; same && i < nw; i++) {
        packs += b->packed && b->k.dot[ws[i]->type].gemm_packed != NULL;
        samepack &= b->k.dot[ws[i]->type].pack_x == b->k.dot[ws[0]->type].pack_x;
    }
    if (same && n_tok >= PACKED_MIN_TOKENS && packs == nw && !samepack)
        same = 0;
    if (!same || b->k.dot[ws[0]->type].fmt == PI_VEC_F32) {
        for (int i = 0; i < nw; i++)
            cpu_matmul(b, ws[i], x, n_tok, ys[i]);
        return;
    }
    if (refuse(b, ws[0]->n_in, n_tok))
        return;
    struct multi_job mj;
    mj.nw = nw;
    mj.packed = b->packed && n_tok >= PACKED_MIN_TOKENS;
    mj.start[0] = 0;
    for (int i = 0; i < nw; i++) {
        const struct pi_dot_kernel *dk = &b->k.dot[ws[i]->type];
        const struct matmul_job m = {b, ws[i], dk, x, ys[i], n_tok,
                                     pi_vec_bytes(dk->fmt, ws[i]->n_in)};
        mj.m[i] = m;
        mj.start[i + 1] = mj.start[i] + ws[i]->n_out;
        mj.packed = mj.packed && dk->gemm_packed && dk->pack_x == b->k.dot[ws[0]->type].pack_x;
    }
    if (n_tok <= 4)
        quantize_rows(&mj.m[0], 0, n_tok, 0);
    else
        pi_pool_for(b->pool, n_tok, 1, quantize_rows, &mj.m[0]);
    if (mj.packed)
        pi_pool_for(b->pool, (n_tok + PI_GEMM_PACK_TOKENS - 1) / PI_GEMM_PACK_TOKENS, 1,
                    pack_tiles, &mj.m[0]);
    pi_pool_for(b->pool, mj.start[nw], row_grain(mj.start[nw], pi_pool_n_threads(b->pool)),
                multi_rows, &mj);
}

/* ---- sparse ops -------------------------------------------------------------------- */

/* Scattered rows defeat the hardware prefetcher at every row start; the sparse ops ask
 * for rows a few positions ahead in their list. `all`: the whole row, else its first
 * cache lines (the rest was requested when the row was `all` ahead earlier). */
#define PREFETCH_ROWS 4
/* Into L2 only: a sparse kernel's rows further down its list (prefetches into L1 of
 * whole groups of scattered rows filled its miss buffers and stalled the kernel). */
static inline void prefetch_l2(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64)
        __builtin_prefetch(p + o, 0, 2);
}

static inline void prefetch_bytes(const uint8_t *p, size_t n, int all) {
    (void)all; /* whole rows for now */
    for (size_t o = 0; o < n; o += 64)
        __builtin_prefetch(p + o, 0, 3);
}

struct rows_job {
    struct matmul_job m;
    const int32_t *idx;
    /* a second matrix over the same rows (gate and up in one pass), or NULL */
    const struct pi_weight *w2;
    const struct pi_dot_kernel *dk2;
    float *y2;
};

/* Rows idx[lo..hi): one gemm per run of consecutive ids, so a dense run streams like
 * the dense matmul and each row's result is exactly the dense one. */
static void gemm_idx_one(struct rows_job *rj, const struct pi_weight *w,
                         const struct pi_dot_kernel *dk, float *y, int64_t lo, int64_t hi) {
    struct matmul_job *j = &rj->m;
    const pi_gemm_idx_fn gi = j->b->k.gemm_idx[w->type];
    if (gi && j->n_tok > 1) { /* the whole list in one call */
        gi(w->data, w->row_bytes, rj->idx + lo, hi - lo, j->b->xq, j->vb, j->n_tok, y, w->n_out,
           w->n_in);
        return;
    }
    for (int64_t k = lo; k < lo + PREFETCH_ROWS && k < hi; k++)
        prefetch_bytes((const uint8_t *)w->data + (size_t)rj->idx[k] * w->row_bytes,
                       w->row_bytes, 1);
    for (int64_t i = lo; i < hi;) {
        int64_t e = i + 1;
        while (e < hi && rj->idx[e] == rj->idx[e - 1] + 1)
            e++;
        const int64_t r0 = rj->idx[i];
        /* rows PREFETCH_ROWS further down the list, each requested once */
        for (int64_t k = i + PREFETCH_ROWS; k < e + PREFETCH_ROWS && k < hi; k++)
            if (rj->idx[k] != rj->idx[k - 1] + 1 || k == i + PREFETCH_ROWS)
                prefetch_bytes((const uint8_t *)w->data + (size_t)rj->idx[k] * w->row_bytes,
                               w->row_bytes, 1);
        dk->gemm((const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, e - i,
                 j->b->xq, j->vb, j->n_tok, y + r0, w->n_out, w->n_in);
        i = e;
    }
}

static void gemm_idx(void *arg, int64_t lo, int64_t hi, int ith) {
    struct rows_job *rj = arg;
    (void)ith;
    gemm_idx_one(rj, rj->m.w, rj->m.dk, rj->m.y, lo, hi);
    if (rj->w2)
        gemm_idx_one(rj, rj->w2, rj->dk2, rj->y2, lo, hi);
}

static void gemv_idx(void *arg, int64_t lo, int64_t hi, int ith) {
    struct rows_job *rj = arg;
    const struct pi_weight *w = rj->m.w, *w2 = rj->w2;
    (void)ith;
    rj->m.b->k.gemv_idx[w->type](w->data, w->row_bytes, rj->idx + lo, hi - lo, rj->m.b->xq, rj->m.y,
                                 w->n_in);
    if (w2)
        rj->m.b->k.gemv_idx[w2->type](w2->data, w2->row_bytes, rj->idx + lo, hi - lo, rj->m.b->xq,
                                      rj->y2, w2->n_in);
}

static void float_idx(void *arg, int64_t lo, int64_t hi, int ith) {
    struct rows_job *rj = arg;
    struct matmul_job *j = &rj->m;
    const struct pi_dot_kernel *f32 = &j->b->k.dot[PI_TYPE_F32];
    float *row = j->b->scratch + (size_t)ith * (size_t)j->b->max_width;
    for (int k = 0; k < (rj->w2 ? 2 : 1); k++) {
        const struct pi_weight *w = k ? rj->w2 : j->w;
        float *y = k ? rj->y2 : j->y;
        for (int64_t i = lo; i < hi; i++) {
            const int64_t r = rj->idx[i];
            j->b->k.to_float[w->type]((const uint8_t *)w->data + (size_t)r * w->row_bytes, row,
                                      w->n_in);
            for (int64_t t = 0; t < j->n_tok; t++)
                y[t * w->n_out + r] = f32->dot(row, j->x + t * w->n_in, w->n_in);
        }
    }
}

static void matmul_rows_job(struct pi_backend *b, const struct pi_weight *w,
                            const struct pi_weight *w2, const float *x, int64_t n_tok,
                            const int32_t *idx, int64_t n_idx, float *y, float *y2) {
    struct rows_job rj = {{b, w, &b->k.dot[w->type], x, y, n_tok, 0}, idx, w2,
                          w2 ? &b->k.dot[w2->type] : NULL, y2};
    if (n_idx <= 0 || refuse(b, w->n_in, n_tok) || (w2 && refuse(b, w2->n_in, n_tok)))
        return;
    const int64_t grain = row_grain(n_idx, pi_pool_n_threads(b->pool));
    if (b->f32_activations && rj.m.dk->fmt != PI_VEC_F32) {
        pi_pool_for(b->pool, n_idx, grain, float_idx, &rj);
        return;
    }
    rj.m.vb = pi_vec_bytes(rj.m.dk->fmt, w->n_in);
    if (n_tok <= 4)
        quantize_rows(&rj.m, 0, n_tok, 0);
    else
        pi_pool_for(b->pool, n_tok, 1, quantize_rows, &rj.m);
    const int gemv = n_tok == 1 && b->k.gemv_idx[w->type] && (!w2 || b->k.gemv_idx[w2->type]);
    pi_pool_for(b->pool, n_idx, grain, gemv ? gemv_idx : gemm_idx, &rj);
}

static void cpu_matmul_rows(struct pi_backend *b, const struct pi_weight *w, const float *x,
                            int64_t n_tok, const int32_t *idx, int64_t n_idx, float *y) {
    matmul_rows_job(b, w, NULL, x, n_tok, idx, n_idx, y, NULL);
}

/* Both matrices in one pass over the list (one dispatch, the threads stay busy across
 * the two); they share the quantized activation when their vector formats agree. */
static void cpu_matmul_rows2(struct pi_backend *b, const struct pi_weight *w1,
                             const struct pi_weight *w2, const float *x, int64_t n_tok,
                             const int32_t *idx, int64_t n_idx, float *y1, float *y2) {
    if (b->k.dot[w1->type].fmt != b->k.dot[w2->type].fmt || w1->n_in != w2->n_in) {
        matmul_rows_job(b, w1, NULL, x, n_tok, idx, n_idx, y1, NULL);
        matmul_rows_job(b, w2, NULL, x, n_tok, idx, n_idx, y2, NULL);
        return;
    }
    matmul_rows_job(b, w1, w2, x, n_tok, idx, n_idx, y1, y2);
}

struct trows_job {
    struct pi_backend *b;
    const struct pi_weight *w;
    const float *x;
    float *y;
    int64_t n_tok, n_rows;
    int i8; /* the 8-bit prompt path (axpy_rows_i8_tok) */
};

/* Columns [lo, hi) of every token's output: each thread owns whole blocks of columns
 * and adds the rows in list order, so every output value has one fixed summation
 * order whatever the number of threads. Rows go to the kernel in groups (y stays in
 * registers across a group); the next group's slices are prefetched meanwhile. */
static void axpy_cols_job(void *arg, int64_t lo, int64_t hi, int ith) {
    struct trows_job *j = arg;
    const struct pi_weight *w = j->w;
    const struct pi_type_traits *tt = pi_type_traits(w->type);
    const size_t off = (size_t)(lo / tt->block_size) * tt->block_bytes;
    const size_t slice = (size_t)((hi - lo) / tt->block_size) * tt->block_bytes;
    pi_axpy_rows_fn axpy_rows = j->b->k.axpy_rows[w->type];
    float *tmp = j->b->scratch + (size_t)ith * (size_t)j->b->max_width;
    const uint8_t *base = (const uint8_t *)w->data + off;
    for (int64_t t = 0; t < j->n_tok; t++)
        memset(j->y + t * w->n_in + lo, 0, (size_t)(hi - lo) * sizeof(float));
    /* the first group's slices */
    for (int64_t i = 0; i < AXPY_GROUP && i < j->n_rows; i++)
        prefetch_bytes(base + (size_t)j->b->rows[i] * w->row_bytes, slice, 1);
    /* Column chunks of whole blocks: while one chunk of a group is added, the same chunk
     * of the next group's rows is requested, spreading the prefetches over the work. */
    const int64_t cb = AXPY_CHUNK / tt->block_size > 0 ? AXPY_CHUNK / tt->block_size : 1;
    const int64_t chunk = cb * tt->block_size;
    const size_t chunk_bytes = (size_t)cb * tt->block_bytes;
    pi_to_float_fn to_float = j->b->k.to_float[w->type];
    pi_axpy_rows_fn add_f32 = j->b->k.axpy_rows[PI_TYPE_F32];
    const int64_t pcb = AXPY_PCHUNK / tt->block_size > 0 ? AXPY_PCHUNK / tt->block_size : 1;
    const int64_t pchunk = pcb * tt->block_size;
    if (j->i8) {
        /* each group's activations [n_tok][AXPY_TGROUP], then every token's sum over the
         * group's rows in this thread's columns; the next group's slices fetched ahead */
        const pi_axpy_rows_tok_fn tok = j->b->k.axpy_rows_i8_tok[w->type];
        float *av = j->b->deq + (size_t)ith * deq_floats(j->b) + AXPY_PGROUP * AXPY_PTILE;
        for (int64_t g = 0; g < j->n_rows; g += AXPY_TGROUP) {
            const int64_t ge = g + AXPY_TGROUP < j->n_rows ? g + AXPY_TGROUP : j->n_rows;
            const int64_t ne = ge + AXPY_TGROUP < j->n_rows ? ge + AXPY_TGROUP : j->n_rows;
            for (int64_t i = ge; i < ne; i++)
                prefetch_bytes(base + (size_t)j->b->rows[i] * w->row_bytes, slice, 1);
            const uint8_t *ptr[AXPY_TGROUP];
            for (int64_t i = g; i < ge; i++)
                ptr[i - g] = base + (size_t)j->b->rows[i] * w->row_bytes;
            for (int64_t t = 0; t < j->n_tok; t++)
                for (int64_t i = g; i < ge; i++)
                    av[t * AXPY_TGROUP + (i - g)] = j->x[t * w->n_out + j->b->rows[i]];
            tok(j->y + lo, w->n_in, av, AXPY_TGROUP, j->n_tok, ptr, ge - g, hi - lo);
        }
        return;
    }
    if (j->n_tok >= AXPY_DEQ_TOKENS && w->type != PI_TYPE_F32 && to_float && add_f32 &&
        pchunk <= AXPY_PTILE) {
        /* A prompt: each chunk of a group's rows becomes floats once (tile, in L1), then
         * every token adds the rows it needs from there, in the same row order. */
        const size_t pchunk_bytes = (size_t)pcb * tt->block_bytes;
        float *tile = j->b->deq + (size_t)ith * deq_floats(j->b);
        float *av = tile + AXPY_PGROUP * AXPY_PTILE;                /* [n_tok][AXPY_PGROUP] */
        uint8_t *qv = (uint8_t *)(av + j->n_tok * AXPY_PGROUP);     /* [n_tok][AXPY_PGROUP] */
        int32_t *kv = (int32_t *)(qv + j->n_tok * AXPY_PGROUP);     /* [n_tok] */
        for (int64_t g = 0; g < j->n_rows; g += AXPY_PGROUP) {
            const int64_t ge = g + AXPY_PGROUP < j->n_rows ? g + AXPY_PGROUP : j->n_rows;
            const int64_t ne = ge + AXPY_PGROUP < j->n_rows ? ge + AXPY_PGROUP : j->n_rows;
            for (int64_t t = 0; t < j->n_tok; t++) { /* each token's rows of the group */
                const float *xt = j->x + t * w->n_out;
                float *at = av + t * AXPY_PGROUP;
                uint8_t *qt = qv + t * AXPY_PGROUP;
                int32_t k = 0;
                for (int64_t i = g; i < ge; i++) {
                    at[k] = xt[j->b->rows[i]];
                    qt[k] = (uint8_t)(i - g);
                    k += at[k] != 0.0f;
                }
                kv[t] = k;
            }
            for (int64_t c0 = 0; c0 < hi - lo; c0 += pchunk) {
                const int64_t cn = hi - lo - c0 < pchunk ? hi - lo - c0 : pchunk;
                const size_t co = (size_t)(c0 / tt->block_size) * tt->block_bytes;
                for (int64_t i = ge; i < ne; i++)
                    prefetch_bytes(base + (size_t)j->b->rows[i] * w->row_bytes + co, pchunk_bytes, 1);
                for (int64_t i = g; i < ge; i++)
                    to_float(base + (size_t)j->b->rows[i] * w->row_bytes + co,
                             tile + (size_t)(i - g) * (size_t)pchunk, cn);
                for (int64_t t = 0; t < j->n_tok; t++) {
                    const int32_t k = kv[t];
                    if (!k)
                        continue;
                    const uint8_t *ptr[AXPY_PGROUP];
                    for (int32_t q = 0; q < k; q++)
                        ptr[q] = (const uint8_t *)(tile + (size_t)qv[t * AXPY_PGROUP + q] * (size_t)pchunk);
                    add_f32(j->y + t * w->n_in + lo + c0, av + t * AXPY_PGROUP, ptr, k, cn);
                }
            }
        }
        return;
    }
    for (int64_t g = 0; g < j->n_rows; g += AXPY_GROUP) {
        const int64_t ge = g + AXPY_GROUP < j->n_rows ? g + AXPY_GROUP : j->n_rows;
        const int64_t ne = ge + AXPY_GROUP < j->n_rows ? ge + AXPY_GROUP : j->n_rows;
        if (!axpy_rows) {
            for (int64_t i = ge; i < ne; i++)
                prefetch_bytes(base + (size_t)j->b->rows[i] * w->row_bytes, slice, 1); /* K-quants: dequantize each slice, then float axpys */
            for (int64_t i = g; i < ge; i++) {
                const int64_t r = j->b->rows[i];
                j->b->k.to_float[w->type](base + (size_t)r * w->row_bytes, tmp, hi - lo);
                for (int64_t t = 0; t < j->n_tok; t++) {
                    const float a = j->x[t * w->n_out + r];
                    if (a != 0.0f)
                        j->b->k.axpy[PI_TYPE_F32](j->y + t * w->n_in + lo, a, tmp, hi - lo);
                }
            }
            continue;
        }
        for (int64_t t = 0; t < j->n_tok; t++) {
            const uint8_t *ptr[AXPY_GROUP];
            float a[AXPY_GROUP];
            int64_t k = 0;
            for (int64_t i = g; i < ge; i++) {
                const int64_t r = j->b->rows[i];
                a[k] = j->x[t * w->n_out + r];
                ptr[k] = base + (size_t)r * w->row_bytes;
                k += a[k] != 0.0f;
            }
            float *yt = j->y + t * w->n_in + lo;
            for (int64_t c0 = 0; c0 < hi - lo; c0 += chunk) {
                const int64_t cn = hi - lo - c0 < chunk ? hi - lo - c0 : chunk;
                const size_t co = (size_t)(c0 / tt->block_size) * tt->block_bytes;
                if (t == 0)
                    for (int64_t i = ge; i < ne; i++)
                        prefetch_bytes(base + (size_t)j->b->rows[i] * w->row_bytes + co,
                                       chunk_bytes, 1);
                if (k) {
                    const uint8_t *pc[AXPY_GROUP];
                    for (int64_t q = 0; q < k; q++)
                        pc[q] = ptr[q] + co;
                    axpy_rows(yt + c0, a, pc, k, cn);
                }
            }
        }
    }
}

/* accumulate_rows_i8: job j = chunk c of token t (the tokens' chunks one after another),
 * its partial sum over whole rows, all columns, in groups of AXPY_GROUP rows (8-bit
 * coefficients, kernels.h axpy_rows_i8); the next group's column chunk is prefetched
 * while one is added. */
struct rchunk_job {
    struct pi_backend *b;
    const struct pi_weight *w;
    const float *x;
    int64_t n_tok;
    int64_t per[AXPY_DEQ_TOKENS], k[AXPY_DEQ_TOKENS], first[AXPY_DEQ_TOKENS + 1];
};

static void rchunk_job(void *arg, int64_t lo, int64_t hi, int ith) {
    const struct rchunk_job *j = arg;
    const struct pi_weight *w = j->w;
    const struct pi_type_traits *tt = pi_type_traits(w->type);
    const pi_axpy_rows_fn axpy_i8 = j->b->k.axpy_rows_i8[w->type];
    const int64_t cb = AXPY_CHUNK / tt->block_size > 0 ? AXPY_CHUNK / tt->block_size : 1;
    const int64_t chunk = cb * tt->block_size, E = w->n_in;
    const uint8_t *base = (const uint8_t *)w->data;
    const int64_t steps = (E + chunk - 1) / chunk;
    const int64_t per_step = (AXPY_GROUP + steps - 1) / steps;
    (void)ith;
    for (int64_t job = lo; job < hi; job++) {
        int64_t t = 0;
        while (job >= j->first[t + 1])
            t++;
        const int64_t c = job - j->first[t];
        const int32_t *own = j->b->own + (size_t)t * (size_t)j->b->max_width;
        const float *xt = j->x + t * w->n_out;
        float *part = j->b->tpart + ((size_t)t * AXPY_RCHUNKS + (size_t)c) * (size_t)j->b->max_width;
        const int64_t r0 = c * j->per[t];
        const int64_t r1 = r0 + j->per[t] < j->k[t] ? r0 + j->per[t] : j->k[t];
        memset(part, 0, (size_t)E * sizeof *part);
        for (int64_t i = r0; i < r1 && i < r0 + AXPY_GROUP; i++)
            prefetch_l2(base + (size_t)own[i] * w->row_bytes, w->row_bytes);
        for (int64_t g = r0; g < r1; g += AXPY_GROUP) {
            const int64_t ge = g + AXPY_GROUP < r1 ? g + AXPY_GROUP : r1;
            const int64_t ne = ge + AXPY_GROUP < r1 ? ge + AXPY_GROUP : r1;
            const uint8_t *ptr[AXPY_GROUP], *pc[AXPY_GROUP];
            float a[AXPY_GROUP];
            for (int64_t i = g; i < ge; i++) {
                ptr[i - g] = base + (size_t)own[i] * w->row_bytes;
                a[i - g] = xt[own[i]];
            }
            for (int64_t c0 = 0, step = 0; c0 < E; c0 += chunk, step++) {
                const int64_t cn = E - c0 < chunk ? E - c0 : chunk;
                const size_t co = (size_t)(c0 / tt->block_size) * tt->block_bytes;
                /* the next group's whole rows into L2, a share of them per chunk step */
                for (int64_t i = ge + step * per_step; i < ge + (step + 1) * per_step && i < ne; i++)
                    prefetch_l2(base + (size_t)own[i] * w->row_bytes, w->row_bytes);
                for (int64_t q = 0; q < ge - g; q++)
                    pc[q] = ptr[q] + co;
                axpy_i8(part + c0, a, pc, ge - g, cn);
            }
        }
    }
}

/* y[t] = the sum of token t's chunk sums, in chunk order, over columns [lo, hi). */
struct rsum_job {
    const struct rchunk_job *r;
    float *y;
};

static void rsum_job(void *arg, int64_t lo, int64_t hi, int ith) {
    const struct rsum_job *s = arg;
    const struct rchunk_job *j = s->r;
    const size_t mw = (size_t)j->b->max_width;
    (void)ith;
    for (int64_t t = 0; t < j->n_tok; t++) {
        float *yt = s->y + t * j->w->n_in;
        const int64_t nc = j->first[t + 1] - j->first[t];
        if (!nc) {
            memset(yt + lo, 0, (size_t)(hi - lo) * sizeof *yt);
            continue;
        }
        const float *p0 = j->b->tpart + (size_t)t * AXPY_RCHUNKS * mw;
        memcpy(yt + lo, p0 + lo, (size_t)(hi - lo) * sizeof *yt);
        for (int64_t c = 1; c < nc; c++)
            j->b->k.axpy[PI_TYPE_F32](yt + lo, 1.0f, (const uint8_t *)(p0 + (size_t)c * mw + lo),
                                      hi - lo);
    }
}

/* The 8-bit path of accumulate_rows for 1 .. AXPY_DEQ_TOKENS - 1 tokens over the union
 * rows b->rows[0..n): per token its non-zero rows in list order, cut into chunks whose
 * size depends only on their count, each chunk's sum by one thread over whole rows (a
 * thread owning a slice of columns read a part of every row: strided, the hardware
 * prefetcher's worst case), then the chunk sums added in order. */
static void accumulate_rows_i8(struct pi_backend *b, const struct pi_weight *w, const float *x,
                               int64_t n_tok, int64_t n, float *y) {
    struct rchunk_job j = {b, w, x, n_tok, {0}, {0}, {0}};
    for (int64_t t = 0; t < n_tok; t++) {
        int32_t *own = b->own + (size_t)t * (size_t)b->max_width;
        const float *xt = x + t * w->n_out;
        int64_t k = 0;
        for (int64_t i = 0; i < n; i++)
            if (xt[b->rows[i]] != 0.0f)
                own[k++] = b->rows[i];
        int64_t per = (k + AXPY_RCHUNKS - 1) / AXPY_RCHUNKS;
        per = (per + AXPY_GROUP - 1) / AXPY_GROUP * AXPY_GROUP;
        per = per < AXPY_RCHUNK_MIN ? AXPY_RCHUNK_MIN : per;
        j.k[t] = k;
        j.per[t] = per;
        j.first[t + 1] = j.first[t] + (k + per - 1) / per;
    }
    if (j.first[n_tok])
        pi_pool_for(b->pool, j.first[n_tok], 1, rchunk_job, &j);
    struct rsum_job s = {&j, y};
    const int64_t bs = pi_type_traits(w->type)->block_size;
    const int nt = pi_pool_n_threads(b->pool);
    int64_t grain = (w->n_in / bs + nt - 1) / nt * bs;
    pi_pool_for(b->pool, w->n_in, grain < bs ? bs : grain, rsum_job, &s);
}

/* The accumulation over rows idx[0..n_idx) (all rows when idx is NULL) that some token
 * needs (activation non-zero). The 8-bit path of 1-3 tokens goes by row chunks
 * (accumulate_rows_i8); otherwise each thread owns one slice of the output columns and
 * streams its part of every row once. Returns the rows read. */
static int64_t accumulate_rows(struct pi_backend *b, const struct pi_weight *w, const float *x,
                               int64_t n_tok, const int32_t *idx, int64_t n_idx, float *y) {
    if (refuse(b, w->n_out, n_tok) || refuse(b, w->n_in, n_tok) || n_idx > w->n_out) {
        b->fault = PI_ERR_INTERNAL;
        return 0;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < n_idx; i++) {
        const int64_t r = idx ? idx[i] : i;
        for (int64_t t = 0; t < n_tok; t++)
            if (x[t * w->n_out + r] != 0.0f) {
                b->rows[n++] = (int32_t)r;
                break;
            }
    }
    if (n_tok < AXPY_DEQ_TOKENS && b->tpart && b->k.axpy_rows_i8[w->type] &&
        b->k.axpy_rows[w->type] && w->n_in <= b->max_width) {
        accumulate_rows_i8(b, w, x, n_tok, n, y);
        return n;
    }
    struct trows_job j = {b, w, x, y, n_tok, n, 0};
    if (n_tok >= AXPY_DEQ_TOKENS && b->tpart && b->k.axpy_rows_i8_tok[w->type]) {
        int64_t nz = 0;
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t i = 0; i < n; i++)
                nz += x[t * w->n_out + b->rows[i]] != 0.0f;
        j.i8 = (double)nz >= AXPY_I8_TOK_DENSITY * (double)n * (double)n_tok;
    }
    const int64_t bs = pi_type_traits(w->type)->block_size;
    const int nt = pi_pool_n_threads(b->pool);
    int64_t grain = (w->n_in / bs + nt - 1) / nt * bs;
    pi_pool_for(b->pool, w->n_in, grain < bs ? bs : grain, axpy_cols_job, &j);
    return n;
}

static int64_t cpu_matmul_t_rows(struct pi_backend *b, const struct pi_weight *w, const float *x,
                                 int64_t n_tok, const int32_t *idx, int64_t n_idx, float *y) {
    return accumulate_rows(b, w, x, n_tok, idx, n_idx, y);
}

/* y = x W (W neuron-major): the sparse accumulation over every row. */
static void cpu_matmul_t(struct pi_backend *b, const struct pi_weight *w, const float *x,
                         int64_t n_tok, float *y) {
    accumulate_rows(b, w, x, n_tok, NULL, w->n_out, y);
}

static void cpu_get_rows(struct pi_backend *b, const struct pi_weight *w, const int32_t *ids,
                         int64_t n_tok, float *y) {
    for (int64_t t = 0; t < n_tok; t++)
        b->k.to_float[w->type]((const uint8_t *)w->data + (size_t)ids[t] * w->row_bytes,
                               y + t * w->n_in, w->n_in);
}

/* ---- element-wise ------------------------------------------------------------------- */

static float vec_value(const struct pi_vector *v, int64_t i) {
    uint16_t h;
    switch (v->type) {
    case PI_TYPE_F16:
        memcpy(&h, (const uint8_t *)v->data + 2 * i, 2);
        return pi_fp16_to_fp32(h);
    case PI_TYPE_BF16:
        memcpy(&h, (const uint8_t *)v->data + 2 * i, 2);
        return pi_bf16_to_fp32(h);
    default: {
        float f;
        memcpy(&f, (const uint8_t *)v->data + 4 * i, 4);
        return f;
    }
    }
}

struct norm_job {
    const float *x;
    const struct pi_vector *g, *bias;
    float eps;
    int64_t n;
    float *y;
};

/* Sums in double, in four interleaved partial sums (one chain of dependent double adds
 * was most of a norm's time); float products and sums of them are exact in double up to
 * the last few bits, so the order does not matter at float precision. */
static double sum_sq(const float *x, int64_t n, double mean) {
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            s[k] += ((double)x[i + k] - mean) * ((double)x[i + k] - mean);
    for (; i < n; i++)
        s[0] += ((double)x[i] - mean) * ((double)x[i] - mean);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static double sum_of(const float *x, int64_t n) {
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            s[k] += (double)x[i + k];
    for (; i < n; i++)
        s[0] += (double)x[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* y = x * scale * g (+ bias), g and bias F32 (the usual case: a plain loop) or any
 * vector type; mean is subtracted first (LayerNorm; 0 for RMSNorm). */
static void norm_out(const float *x, float mean, float scale, const struct pi_vector *g,
                     const struct pi_vector *bias, int64_t n, float *y) {
    if ((!g || g->type == PI_TYPE_F32) && (!bias || bias->type == PI_TYPE_F32)) {
        const uint8_t *gp = g ? g->data : NULL, *bp = bias ? bias->data : NULL;
        for (int64_t i = 0; i < n; i++) {
            float v = (x[i] - mean) * scale, w, c;
            if (gp) {
                memcpy(&w, gp + 4 * i, 4);
                v *= w;
            }
            if (bp) {
                memcpy(&c, bp + 4 * i, 4);
                v += c;
            }
            y[i] = v;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - mean) * scale;
        if (g)
            v *= vec_value(g, i);
        if (bias)
            v += vec_value(bias, i);
        y[i] = v;
    }
}

static void rmsnorm_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    const struct norm_job *j = arg;
    const int64_t n = j->n;
    (void)ith;
    for (int64_t t = lo; t < hi; t++) {
        const float *xt = j->x + t * n;
        const float scale = (float)(1.0 / sqrt(sum_sq(xt, n, 0.0) / (double)n + (double)j->eps));
        norm_out(xt, 0.0f, scale, j->g, NULL, n, j->y + t * n);
    }
}

/* y[t] = (x[t] - mean) / sqrt(var + eps) * g + bias */
static void layernorm_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    const struct norm_job *j = arg;
    const int64_t n = j->n;
    const struct pi_vector *g = j->g && j->g->data ? j->g : NULL;
    const struct pi_vector *bias = j->bias && j->bias->data ? j->bias : NULL;
    (void)ith;
    for (int64_t t = lo; t < hi; t++) {
        const float *xt = j->x + t * n;
        const double mean = sum_of(xt, n) / (double)n;
        const float inv = (float)(1.0 / sqrt(sum_sq(xt, n, mean) / (double)n + (double)j->eps));
        norm_out(xt, (float)mean, inv, g, bias, n, j->y + t * n);
    }
}

/* Tokens over the threads (a Gemma 2 prompt has four norms a layer; one thread doing
 * them was 1.9% of its time with the other waiting); a decode step's one row stays on
 * the calling thread. Each row is computed the same way wherever it runs. */
static void norm_tokens(struct pi_backend *b, int64_t n_tok, pi_pool_fn fn, struct norm_job *j) {
    if (n_tok < 2)
        fn(j, 0, n_tok, 0);
    else
        pi_pool_for(b->pool, n_tok, 1, fn, j);
}

static void cpu_rmsnorm(struct pi_backend *b, const float *x, const struct pi_vector *g,
                        float eps, int64_t n_tok, float *y) {
    struct norm_job j = {x, g, NULL, eps, g->n, y};
    norm_tokens(b, n_tok, rmsnorm_rows, &j);
}

static void cpu_layernorm(struct pi_backend *b, const float *x, const struct pi_vector *g,
                          const struct pi_vector *bias, int64_t n, float eps, int64_t n_tok,
                          float *y) {
    struct norm_job j = {x, g, bias, eps, n, y};
    norm_tokens(b, n_tok, layernorm_rows, &j);
}

/* YaRN's ramp between the corrected dimensions lo and hi (backend.h, struct pi_rope). */
static double yarn_ramp(double lo, double hi, int64_t i) {
    const double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
    return 1.0 - (y < 0.0 ? 0.0 : y > 1.0 ? 1.0 : y);
}

static double yarn_corr(const struct pi_rope *r, float beta) {
    return (double)r->n_rot * log((double)r->n_ctx_orig / (2.0 * 3.14159265358979323846 * (double)beta)) /
           (2.0 * log((double)r->base));
}

struct rope_job {
    float *x;
    int64_t n_head, head_dim, pos0;
    const struct pi_rope *r;
    double lo, hi, mscale; /* YaRN's ramp ends and the magnitude scale */
    float *cs;             /* [n_tok][2][n_rot / 2]: cos, then sin, per token */
};

/* The rotation of each pair i of tokens [t0, t1): cos and sin of the angle, scaled. */
static void rope_angles(void *arg, int64_t t0, int64_t t1, int ith) {
    const struct rope_job *j = arg;
    const struct pi_rope *r = j->r;
    const int64_t n_rot = r->n_rot, half = n_rot / 2;
    (void)ith;
    for (int64_t t = t0; t < t1; t++) {
        const double pos = (double)(j->pos0 + t);
        float *cs = j->cs + t * 2 * half;
        for (int64_t i = 0; i < half; i++) {
            double theta = pos * pow((double)r->base, -2.0 * (double)i / (double)n_rot);
            if (r->factors)
                theta /= (double)r->factors[i];
            const double interp = theta * (double)r->freq_scale;
            if (r->ext_factor != 0.0f) {
                const double mix = yarn_ramp(j->lo, j->hi, i) * (double)r->ext_factor;
                theta = interp * (1.0 - mix) + theta * mix;
            } else {
                theta = interp;
            }
            cs[i] = (float)(cos(theta) * j->mscale);
            cs[half + i] = (float)(sin(theta) * j->mscale);
        }
    }
}

static void rope_tokens(void *arg, int64_t t0, int64_t t1, int ith) {
    const struct rope_job *j = arg;
    const struct pi_rope *r = j->r;
    const int64_t half = r->n_rot / 2;
    (void)ith;
    for (int64_t t = t0; t < t1; t++) {
        const float *cs = j->cs + t * 2 * half;
        for (int64_t h = 0; h < j->n_head; h++) {
            float *v = j->x + (t * j->n_head + h) * j->head_dim;
            for (int64_t i = 0; i < half; i++) {
                const float c = cs[i], s = cs[half + i];
                const int64_t a = r->neox ? i : 2 * i, bb = r->neox ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[bb];
                v[a] = x0 * c - x1 * s;
                v[bb] = x0 * s + x1 * c;
            }
        }
    }
}

static int rope_same(const struct pi_rope *a, const struct pi_rope *b) {
    return a->n_rot == b->n_rot && a->neox == b->neox && a->base == b->base &&
           a->freq_scale == b->freq_scale && a->factors == b->factors &&
           a->attn_factor == b->attn_factor && a->ext_factor == b->ext_factor &&
           a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow &&
           a->n_ctx_orig == b->n_ctx_orig && a->yarn_exact == b->yarn_exact;
}

/* Tokens over the threads when there are several (each token's rotation is computed
 * the same way wherever it runs). The angles of a step are computed once and kept
 * while the parameters and positions stay the same: Q and K of every layer of a
 * family with one RoPE use the same ones (the factors are compared by address: they
 * live in the model for its lifetime). */
static void cpu_rope(struct pi_backend *b, float *x, int64_t n_tok, int64_t n_head,
                     int64_t head_dim, int64_t pos0, const struct pi_rope *r) {
    struct rope_job j = {x, n_head, head_dim, pos0, r, 0.0, 0.0, (double)r->attn_factor,
                         b->rope_cs};
    if (refuse(b, r->n_rot, n_tok))
        return;
    if (r->ext_factor != 0.0f) {
        const int64_t n_rot = r->n_rot;
        j.lo = yarn_corr(r, r->beta_fast);
        j.hi = yarn_corr(r, r->beta_slow);
        if (!r->yarn_exact) {
            j.lo = floor(j.lo);
            j.hi = ceil(j.hi);
        }
        j.lo = j.lo > 0.0 ? j.lo : 0.0;
        j.hi = j.hi < (double)(n_rot - 1) ? j.hi : (double)(n_rot - 1);
        j.mscale *= 1.0 + 0.1 * log(1.0 / (double)r->freq_scale);
    }
    if (!b->rope_valid || !rope_same(&b->rope_key, r) || b->rope_pos0 != pos0 ||
        b->rope_ntok != n_tok) {
        if (n_tok < 2)
            rope_angles(&j, 0, n_tok, 0);
        else
            pi_pool_for(b->pool, n_tok, 1, rope_angles, &j);
        b->rope_key = *r;
        b->rope_pos0 = pos0;
        b->rope_ntok = n_tok;
        b->rope_valid = 1;
    }
    if (n_tok < 2)
        rope_tokens(&j, 0, n_tok, 0);
    else
        pi_pool_for(b->pool, n_tok, 1, rope_tokens, &j);
}

struct kv_store_job {
    const struct pi_backend *b;
    const struct pi_kv *kv;
    uint8_t *kd, *vd;
    const float *k, *v;
};

/* One position's n values into a Q8_0 or Q4_0 row (GGUF's blocks, not the kernels'
 * vector format); a row holding NaN or infinity gets NaN scales and zero quants, so the
 * attention's output (and the logits' check) sees it, as with F16. */
static void q8_row(int type, const float *x, uint8_t *q, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * 0.0f;
    if (s == 0.0f) {
        if (type == PI_KV_Q4_0)
            pi_quantize_q4_0(x, q, n);
        else
            pi_quantize_q8_0(x, q, n);
        return;
    }
    const size_t bb = pi_kv_row_bytes(type, 32);
    for (int64_t i = 0; i < n / 32; i++) {
        const uint16_t nan = 0x7e00;
        memcpy(q + bb * (size_t)i, &nan, 2);
        memset(q + bb * (size_t)i + 2, type == PI_KV_Q4_0 ? 0x88 : 0, bb - 2);
    }
}

static void kv_store_tokens(void *arg, int64_t t0, int64_t t1, int ith) {
    const struct kv_store_job *j = arg;
    const struct pi_kv *kv = j->kv;
    (void)ith;
    if (kv->d.type != PI_KV_F16) {
        const int64_t D = kv->d.head_dim_k;
        for (int64_t t = t0; t < t1; t++) {
            const float *k = j->k + t * kv->nk;
            uint8_t *kd = j->kd + (size_t)t * kv->kb;
            if (kv->rot) { /* each key head rotated, then its blocks */
                float head[KV_Q8_MAX_DIM];
                for (int64_t h = 0; h < kv->d.n_head_kv; h++) {
                    memcpy(head, k + h * D, (size_t)D * sizeof *head);
                    pi_hadamard(head, D, kv->rot);
                    q8_row(kv->d.type, head, kd + pi_kv_row_bytes(kv->d.type, h * D), D);
                }
            } else {
                q8_row(kv->d.type, k, kd, kv->nk);
            }
        }
    } else {
        j->b->k.from_float_f16(j->k + t0 * kv->nk, j->kd + 2 * (size_t)(t0 * kv->nk),
                               (t1 - t0) * kv->nk);
    }
    if (kv->d.type_v != PI_KV_F16) {
        for (int64_t t = t0; t < t1; t++)
            q8_row(kv->d.type_v, j->v + t * kv->nv, j->vd + (size_t)t * kv->vb, kv->nv);
    } else {
        j->b->k.from_float_f16(j->v + t0 * kv->nv, j->vd + 2 * (size_t)(t0 * kv->nv),
                               (t1 - t0) * kv->nv);
    }
}

static void cpu_kv_store(struct pi_backend *b, struct pi_kv *kv, int64_t layer, int64_t pos0,
                         int64_t n_tok, const float *k, const float *v) {
    if (!kv_range_ok(kv, layer, pos0, n_tok)) {
        b->fault = PI_ERR_INTERNAL;
        return;
    }
    const size_t cell = (size_t)layer * (size_t)kv->d.n_ctx + (size_t)pos0;
    struct kv_store_job j = {b, kv, kv->k + cell * kv->kb, kv->v + cell * kv->vb, k, v};
    if (n_tok < 8)
        kv_store_tokens(&j, 0, n_tok, 0);
    else
        pi_pool_for(b->pool, n_tok, 4, kv_store_tokens, &j);
}

struct attn_job {
    struct pi_backend *b;
    struct pi_kv *kv;
    int64_t layer, n_tok, pos0;
    const float *q;
    const struct pi_attn *a;
    float *out;
};

/* No NaN or infinity in q[0..n) (then every q[i] * 0 is 0). */
static int all_finite(const float *q, int64_t n) {
    float z = 0.0f;
    for (int64_t i = 0; i < n; i++)
        z += q[i] * 0.0f;
    return z == 0.0f;
}

/* A quantized cache (Q8_0, Q4_0), the scores of one query head q [head_dim_k] against
 * n_pos positions' rows of its K head (kh, kv->kb bytes apart): q quantized to Q8_0 once
 * and the rows dotted with it by the table's kernels of the cache's type (as a weight
 * row with an activation; llama.cpp's q8_0 / q4_0 caches do the same); with float
 * activations (or a query that is not finite) each row dequantized and dotted in
 * float. */
static void q8_scores(const struct pi_backend *b, const struct pi_kv *kv, float *scores,
                      const uint8_t *kh, int64_t n_pos, const float *q) {
    const int64_t n = kv->d.head_dim_k;
    float qrot[KV_Q8_MAX_DIM];
    if (kv->rot) { /* rotated keys: the query rotated alike, the same dot products */
        memcpy(qrot, q, (size_t)n * sizeof *qrot);
        pi_hadamard(qrot, n, kv->rot);
        q = qrot;
    }
    const int wt = kv_ktype(kv);
    const struct pi_dot_kernel *dk = &b->k.dot[wt];
    if (!b->f32_activations && all_finite(q, n) && dk->fmt == PI_VEC_Q8_0) {
        _Alignas(64) uint8_t qq[KV_Q8_MAX_DIM / 256 * PI_Q8_0_GROUP_BYTES];
        b->k.quantize_q8_0(q, qq, n); /* the Q8_0 / Q4_0 dot's vector format */
        if (b->k.gemv_idx[wt]) {
            b->k.gemv_idx[wt](kh, kv->kb, kv->iota, n_pos, qq, scores, n);
        } else {
            for (int64_t p = 0; p < n_pos; p++)
                scores[p] = dk->dot(kh + (size_t)p * kv->kb, qq, n);
        }
        return;
    }
    float row[KV_Q8_MAX_DIM];
    for (int64_t p = 0; p < n_pos; p++) {
        b->k.to_float[wt](kh + (size_t)p * kv->kb, row, n);
        scores[p] = b->k.dot[PI_TYPE_F32].dot(row, q, n);
    }
}

/* A quantized cache, the scores of a unit's query rows q[0..rows) against n_pos positions'
 * rows of their K head: each query quantized (as q8_scores does, into qq) and all of
 * them dotted with each K row in one pass, by the Q8_0 gemm for a full unit
 * (ATT_UNIT_ROWS rows, its panel path) or by gemm_few for fewer (a decode step's heads
 * of one GQA group: each K row decoded once for all of them, where the gemm's tile path
 * with a run-time count is slower than a gemv_idx per head); both give the dot's bits
 * (kernels.h), so a score is what q8_scores gives. Rows of sc are lds floats apart.
 * Float activations, a query that is not finite, or a table with neither kernel:
 * q8_scores row by row. */
static void q8_unit_scores(const struct pi_backend *b, const struct pi_kv *kv, float *sc,
                           int64_t lds, const uint8_t *kh, int64_t n_pos, const float *const *q,
                           int64_t rows, uint8_t *qq) {
    const int64_t n = kv->d.head_dim_k;
    const struct pi_dot_kernel *dk = &b->k.dot[kv_ktype(kv)];
    const size_t vb = pi_vec_bytes(PI_VEC_Q8_0, n);
    const pi_gemm_fn few = b->k.gemm_few[kv_ktype(kv)];
    const pi_gemm_fn gemm = rows == ATT_UNIT_ROWS ? dk->gemm : few;
    int ok = rows <= ATT_UNIT_ROWS && !b->f32_activations && dk->fmt == PI_VEC_Q8_0 && gemm &&
             vb > 0;
    for (int64_t r = 0; ok && r < rows; r++)
        ok = all_finite(q[r], n);
    if (!ok) {
        for (int64_t r = 0; r < rows; r++)
            q8_scores(b, kv, sc + r * lds, kh, n_pos, q[r]);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        float qrot[KV_Q8_MAX_DIM];
        const float *qr = q[r];
        if (kv->rot) { /* as q8_scores */
            memcpy(qrot, qr, (size_t)n * sizeof *qrot);
            pi_hadamard(qrot, n, kv->rot);
            qr = qrot;
        }
        b->k.quantize_q8_0(qr, qq + (size_t)r * vb, n);
    }
    gemm(kh, kv->kb, n_pos, qq, vb, rows, sc, lds, n);
}

/* A quantized cache, the weighted sums of V of hg heads of one token: o + h * Dv gets
 * sum_p a[h * lda + p] * V_p over n_pos rows of their V head (vh, kv->vb bytes apart).
 * Per group of 16 positions the rows are converted to floats once (into tile, 16 x Dv;
 * d * q is exact in a float) and every head adds them with axpy_rows[F32], in position
 * order, where a Q8_0 axpy_rows per head would convert each row hg times. */
static void q8_unit_values(const struct pi_backend *b, const struct pi_kv *kv, float *o,
                           const float *a, int64_t lda, const uint8_t *vh, int64_t n_pos,
                           int64_t hg, float *tile) {
    enum { G = 16 };
    const int64_t n = kv->d.head_dim_v;
    for (int64_t p = 0; p < n_pos; p += G) {
        const int64_t m = n_pos - p < G ? n_pos - p : G;
        const uint8_t *rows[G];
        for (int64_t i = 0; i < m; i++) {
            b->k.to_float[kv_vtype(kv)](vh + (size_t)(p + i) * kv->vb, tile + i * n, n);
            rows[i] = (const uint8_t *)(tile + i * n);
        }
        for (int64_t h = 0; h < hg; h++)
            b->k.axpy_rows[PI_TYPE_F32](o + h * n, a + h * lda + p, rows, m, n);
    }
}

/* One (token, head) pair: scores against every visible position (dot_f16_rows), then
 * softmax and the weighted sum of V (axpy_f16), in the thread's scratch row. A sink
 * (struct pi_attn) is one more score after the positions, with no value: it takes
 * part in the softmax's max and sum and is then dropped. It is stored divided by the
 * scale that softmax_exp multiplies every score by (no soft-cap goes with sinks). */
static void attn_pairs(void *arg, int64_t lo, int64_t hi, int ith) {
    struct attn_job *j = arg;
    const struct pi_kv *kv = j->kv;
    const struct pi_kv_desc *d = &kv->d;
    const int64_t group = d->n_head / d->n_head_kv;
    const float inv = j->a->scale, cap = j->a->softcap;
    float *scores = j->b->scratch + (size_t)ith * (size_t)j->b->max_width;
    const uint8_t *kl = kv->k + (size_t)j->layer * (size_t)d->n_ctx * kv->kb;
    const uint8_t *vl = kv->v + (size_t)j->layer * (size_t)d->n_ctx * kv->vb;
    /* quantized keys, values (Q8_0, Q4_0) */
    const int qk = d->type != PI_KV_F16, qv = d->type_v != PI_KV_F16;
    for (int64_t pair = lo; pair < hi; pair++) {
        const int64_t t = pair / d->n_head, h = pair % d->n_head, hk = h / group;
        /* positions p0 .. pos0 + t: all of them, or the last `window` */
        const int64_t last = j->pos0 + t, w = j->a->window;
        const int64_t p0 = w > 0 && last + 1 > w ? last + 1 - w : 0, n_pos = last + 1 - p0;
        const float *q = j->q + (t * d->n_head + h) * d->head_dim_k;
        const uint8_t *kh = kl + (size_t)p0 * kv->kb + pi_kv_row_bytes(d->type, hk * d->head_dim_k);
        if (qk)
            q8_scores(j->b, kv, scores, kh, n_pos, q);
        else
            j->b->k.dot_f16_rows(scores, kh, kv->kb, n_pos, q, d->head_dim_k);
        const int sink = j->a->sinks != NULL;
        if (sink)
            scores[n_pos] = j->a->sinks[h] / inv;
        const float sum = j->b->k.softmax_exp(scores, n_pos + sink, inv, cap);
        const float norm = 1.0f / sum;
        float *o = j->out + (t * d->n_head + h) * d->head_dim_v;
        for (int64_t p = 0; p < n_pos; p++)
            scores[p] *= norm;
        for (int64_t i = 0; i < d->head_dim_v; i++)
            o[i] = 0.0f;
        const uint8_t *vh =
            vl + (size_t)p0 * kv->vb + pi_kv_row_bytes(d->type_v, hk * d->head_dim_v);
        if (qv)
            q8_unit_values(j->b, kv, o, scores, 0, vh, n_pos, 1,
                           j->b->deq + (size_t)ith * deq_floats(j->b));
        else
            j->b->k.axpy_f16(o, scores, vh, kv->vb, n_pos, d->head_dim_v);
    }
}

/* A unit is up to tq consecutive tokens times hg query heads of one KV head. Their
 * queries are scored against the union of their visible positions in one pass over the
 * K rows: with the F16 cache gathered into one block for the table's attn_scores (each
 * K row converted once for all of them), with a quantized cache quantized for its
 * gemm (q8_unit_scores); then each row's softmax over its own positions (as
 * attn_pairs), and per token the weighted sums of V of its hg heads (F16: one
 * axpy_f16_q call; Q8_0, Q4_0: q8_unit_values). Every score and sum is computed as it
 * would be alone, so neither the grouping nor the batch changes a bit. */
struct attn_units_job {
    struct attn_job j;
    int64_t tq, hg; /* tokens and heads per unit */
};

static void attn_units(void *arg, int64_t lo, int64_t hi, int ith) {
    const struct attn_units_job *uj = arg;
    const struct attn_job *j = &uj->j;
    const struct pi_kv *kv = j->kv;
    const struct pi_kv_desc *d = &kv->d;
    const int64_t D = d->head_dim_k, Dv = d->head_dim_v, group = d->n_head / d->n_head_kv;
    const int64_t ngroups = d->n_head / uj->hg, lds = j->b->max_width + 1;
    const float inv = j->a->scale, cap = j->a->softcap;
    const int sink = j->a->sinks != NULL;
    float *sc = j->b->att + (size_t)ith * att_floats(j->b);
    float *qb = sc + (size_t)ATT_UNIT_ROWS * (size_t)lds;
    const uint8_t *kl = j->kv->k + (size_t)j->layer * (size_t)d->n_ctx * kv->kb;
    const uint8_t *vl = j->kv->v + (size_t)j->layer * (size_t)d->n_ctx * kv->vb;
    /* quantized keys, values (Q8_0, Q4_0) */
    const int qk = d->type != PI_KV_F16, qv = d->type_v != PI_KV_F16;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t t0 = u / ngroups * uj->tq, h0 = u % ngroups * uj->hg, hk = h0 / group;
        const int64_t t1 = t0 + uj->tq < j->n_tok ? t0 + uj->tq : j->n_tok;
        const int64_t w = j->a->window, last1 = j->pos0 + t1 - 1;
        /* the union of the tokens' positions: from the first token's start to the last's end */
        const int64_t plo = w > 0 && j->pos0 + t0 + 1 > w ? j->pos0 + t0 + 1 - w : 0;
        const uint8_t *kh = kl + (size_t)plo * kv->kb + pi_kv_row_bytes(d->type, hk * D);
        int64_t rows = 0;
        if (qk) {
            const float *qr[ATT_UNIT_ROWS];
            for (int64_t t = t0; t < t1; t++)
                for (int64_t h = h0; h < h0 + uj->hg; h++, rows++)
                    qr[rows] = j->q + (t * d->n_head + h) * D;
            q8_unit_scores(j->b, kv, sc, lds, kh, last1 + 1 - plo, qr, rows, align64(qb));
        } else {
            for (int64_t t = t0; t < t1; t++)
                for (int64_t h = h0; h < h0 + uj->hg; h++, rows++)
                    memcpy(qb + rows * D, j->q + (t * d->n_head + h) * D, (size_t)D * sizeof *qb);
            j->b->k.attn_scores(sc, lds, kh, kv->kb, last1 + 1 - plo, qb, D, rows, D);
        }
        rows = 0;
        for (int64_t t = t0; t < t1; t++) {
            const int64_t last = j->pos0 + t, p0 = w > 0 && last + 1 > w ? last + 1 - w : 0;
            const int64_t n_pos = last + 1 - p0;
            float *s0 = sc + rows * lds + (p0 - plo);
            for (int64_t h = h0; h < h0 + uj->hg; h++, rows++) {
                float *s = sc + rows * lds + (p0 - plo);
                if (sink)
                    s[n_pos] = j->a->sinks[h] / inv;
                const float norm = 1.0f / j->b->k.softmax_exp(s, n_pos + sink, inv, cap);
                for (int64_t p = 0; p < n_pos; p++)
                    s[p] *= norm;
                float *o = j->out + (t * d->n_head + h) * Dv;
                for (int64_t i = 0; i < Dv; i++)
                    o[i] = 0.0f;
            }
            const uint8_t *vh = vl + (size_t)p0 * kv->vb + pi_kv_row_bytes(d->type_v, hk * Dv);
            float *o = j->out + (t * d->n_head + h0) * Dv;
            if (qv)
                q8_unit_values(j->b, kv, o, s0, lds, vh, n_pos, uj->hg,
                               j->b->deq + (size_t)ith * deq_floats(j->b));
            else if (j->b->k.axpy_f16_q)
                j->b->k.axpy_f16_q(o, Dv, s0, lds, vh, kv->vb, n_pos, uj->hg, Dv);
            else
                for (int64_t h = 0; h < uj->hg; h++)
                    j->b->k.axpy_f16(o + h * Dv, s0 + h * lds, vh, kv->vb, n_pos, Dv);
        }
    }
}

static void cpu_attention(struct pi_backend *b, struct pi_kv *kv, int64_t layer, const float *q,
                          int64_t n_tok, int64_t pos0, const struct pi_attn *a, float *out) {
    struct attn_job j = {b, kv, layer, n_tok, pos0, q, a, out};
    /* the scores of a pair span positions 0 .. pos0 + t in the thread's scratch row,
     * and a sink one more */
    if (!kv_range_ok(kv, layer, pos0, n_tok) ||
        refuse(b, pos0 + n_tok + (a->sinks != NULL), n_tok) ||
        (a->sinks && (a->softcap > 0.0f || !(a->scale > 0.0f)))) {
        b->fault = PI_ERR_INTERNAL;
        return;
    }
    const struct pi_kv_desc *d = &kv->d;
    /* A quantized cache in units too: their quantized queries (q8_unit_scores) go in the
     * block of float queries, their V rows as floats (q8_unit_values, 16 x head_dim_v)
     * in the thread's deq block. */
    const size_t q8_bytes = ATT_UNIT_ROWS * pi_vec_bytes(PI_VEC_Q8_0, d->head_dim_k) + 64;
    if (b->k.attn_scores &&
        (d->type == PI_KV_F16 ||
         q8_bytes <= (size_t)ATT_UNIT_ROWS * (size_t)b->max_width * sizeof(float)) &&
        (d->type_v == PI_KV_F16 || (size_t)16 * (size_t)d->head_dim_v <= deq_floats(b))) {
        /* a whole GQA group per unit, tokens as many as fit; fewer heads per unit when
         * that leaves too few units for the threads (4 per thread for a prompt; a decode
         * step's units are alike, so one per thread will do, and whole groups read each
         * K and V row once for all their heads) */
        const int64_t G = d->n_head / d->n_head_kv, nth = pi_pool_n_threads(b->pool);
        struct attn_units_job uj = {j, 1, 1};
        for (int64_t hg = G; hg >= 1; hg--) {
            if (G % hg || hg > ATT_UNIT_ROWS)
                continue;
            uj.hg = hg;
            uj.tq = ATT_UNIT_ROWS / hg;
            const int64_t units = (n_tok + uj.tq - 1) / uj.tq * (d->n_head / hg);
            if (units >= (n_tok == 1 ? 1 : 4) * nth)
                break;
        }
        pi_pool_for(b->pool, (n_tok + uj.tq - 1) / uj.tq * (d->n_head / uj.hg), 1, attn_units,
                    &uj);
        return;
    }
    pi_pool_for(b->pool, n_tok * kv->d.n_head, 1, attn_pairs, &j);
}

struct act_job {
    const struct pi_backend *b;
    enum pi_act act;
    float *g;
    const float *u;
    int64_t n;
};

static void act_range(void *arg, int64_t lo, int64_t hi, int ith) {
    struct act_job *j = arg;
    const struct pi_cpu_kernels *k = &j->b->k;
    float *g = j->g + lo;
    const float *u = j->u ? j->u + lo : NULL;
    const int64_t n = hi - lo;
    (void)ith;
    switch (j->act) {
    case PI_ACT_SILU_MUL:
    case PI_ACT_SILU:
        k->silu(g, u, n);
        return;
    case PI_ACT_GELU_MUL:
    case PI_ACT_GELU:
        k->gelu(g, u, n);
        return;
    case PI_ACT_GELU_ERF_MUL:
    case PI_ACT_GELU_ERF:
        k->gelu_erf(g, u, n);
        return;
    case PI_ACT_RELU_MUL:
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] > 0.0f ? g[i] * u[i] : 0.0f;
        return;
    case PI_ACT_RELU_RELU_MUL:
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] > 0.0f && u[i] > 0.0f ? g[i] * u[i] : 0.0f;
        return;
    case PI_ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] > 0.0f ? g[i] : 0.0f;
        return;
    case PI_ACT_RELU_SQR:
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] > 0.0f ? g[i] * g[i] : 0.0f;
        return;
    case PI_ACT_SWIGLU_OAI: /* scalar only: gpt-oss's experts, a few rows per token */
        for (int64_t i = 0; i < n; i++) {
            /* written so that a NaN stays NaN (as torch.clamp keeps it) */
            const float x = g[i] > 7.0f ? 7.0f : g[i];
            const float y = u[i] > 7.0f ? 7.0f : u[i] < -7.0f ? -7.0f : u[i];
            g[i] = x / (1.0f + expf(-1.702f * x)) * (y + 1.0f);
        }
        return;
    case PI_ACT_COUNT:
        return;
    }
}

/* Chunks of an element-wise op over the threads: about four per thread, at least 512
 * values (a decode step's 4928 Gemma neurons in chunks of 4096 left one thread 83% of
 * the work). The values do not depend on it. */
static int64_t ew_grain(const struct pi_backend *b, int64_t n) {
    const int64_t per = n / (4 * (int64_t)pi_pool_n_threads(b->pool));
    return per > 512 ? per : 512;
}

static void cpu_ffn_act(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                        int64_t n) {
    struct act_job j = {b, act, g, pi_act_gated(act) ? u : NULL, n};
    if (n < 1024)
        act_range(&j, 0, n, 0);
    else
        pi_pool_for(b->pool, n, ew_grain(b, n), act_range, &j);
}

static void cpu_ffn_act_masked(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                               int64_t n_tok, int64_t n, const float *score,
                               int64_t score_stride, const int32_t *map, float thr) {
    cpu_ffn_act(b, act, g, u, n_tok * n);
    if (!score)
        return;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < n; i++)
            if (!(score[t * score_stride + map[i]] >= thr))
                g[t * n + i] = 0.0f;
}

static void cpu_ffn_act_thr(struct pi_backend *b, enum pi_act act, float *g, const float *u,
                            int64_t n, float thr, int teal) {
    cpu_ffn_act(b, act, g, NULL, n);
    for (int64_t i = 0; i < n; i++) {
        const float v = u ? g[i] * u[i] : g[i];
        g[i] = fabsf(teal ? v : g[i]) > thr ? v : 0.0f;
    }
}

struct add_job {
    float *y;
    const float *x;
};

static void add_range(void *arg, int64_t lo, int64_t hi, int ith) {
    const struct add_job *j = arg;
    (void)ith;
    for (int64_t i = lo; i < hi; i++)
        j->y[i] += j->x[i];
}

/* The residual adds: a prompt's are n_tok * n_embd values, over the threads. */
static void cpu_add(struct pi_backend *b, float *y, const float *x, int64_t n) {
    struct add_job j = {y, x};
    if (n < 16384)
        add_range(&j, 0, n, 0);
    else
        pi_pool_for(b->pool, n, ew_grain(b, n), add_range, &j);
}

static void cpu_add_rows(struct pi_backend *b, float *y, const struct pi_vector *v, int64_t n_tok) {
    (void)b;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < v->n; i++)
            y[t * v->n + i] += vec_value(v, i);
}

static void cpu_scale(struct pi_backend *b, float *x, float s, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

struct softcap_job {
    const struct pi_backend *b;
    float *x;
    float cap;
};

static void softcap_range(void *arg, int64_t lo, int64_t hi, int ith) {
    const struct softcap_job *j = arg;
    (void)ith;
    j->b->k.softcap(j->x + lo, hi - lo, j->cap);
}

/* Over the threads: a decode step caps a whole vocabulary row (256k for Gemma). */
static void cpu_softcap(struct pi_backend *b, float *x, float cap, int64_t n) {
    struct softcap_job j = {b, x, cap};
    if (n < 1024)
        softcap_range(&j, 0, n, 0);
    else
        pi_pool_for(b->pool, n, ew_grain(b, n), softcap_range, &j);
}

static const struct pi_backend_vtable cpu_vtable = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .set_threads = cpu_set_threads,
    .n_threads = cpu_n_threads,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .sync = cpu_sync,
    .kv_create = cpu_kv_create,
    .kv_destroy = cpu_kv_destroy,
    .kv_get = cpu_kv_get,
    .kv_set = cpu_kv_set,
    .matmul = cpu_matmul,
    .matmul_n = cpu_matmul_n,
    .matmul_t = cpu_matmul_t,
    .matmul_rows = cpu_matmul_rows,
    .matmul_rows2 = cpu_matmul_rows2,
    .matmul_t_rows = cpu_matmul_t_rows,
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .layernorm = cpu_layernorm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .ffn_act = cpu_ffn_act,
    .ffn_act_masked = cpu_ffn_act_masked,
    .ffn_act_thr = cpu_ffn_act_thr,
    .add = cpu_add,
    .add_rows = cpu_add_rows,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
};

const struct pi_backend_vtable *pi_backend_cpu(void) {
    return &cpu_vtable;
}
