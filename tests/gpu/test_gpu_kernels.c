/* The GPU backend (CUDA or HIP, pi_backend_gpu) against references, op by op:
 *  - matmul, matmul_t, get_rows for every weight type against the scalar dequantizer
 *    (pi_type_traits()->to_float) and double-precision sums, on odd shapes, with a
 *    tolerance relative to the sum of |terms|; matmul_t also with rows of NaN weights
 *    whose activations are zero (they must not be read);
 *  - rmsnorm, layernorm, rope (factors, YaRN, attn_factor, partial rotary, both pair
 *    layouts), kv_store + attention (scale, soft-cap, sliding windows, split positions),
 *    all ten activations in ffn_act and ffn_act_masked, add, add_rows, scale and softcap
 *    against the CPU backend's own ops (f32 tolerances stated at each test; the ReLU
 *    activations, add, add_rows and scale exactly);
 *  - the contract: supports, device_info, allocation failure, upload's buffer reuse,
 *    bad ordinals, errors recorded by ops and reported by sync.
 * Exits 77 (skip) when the library has no GPU backend or no device is usable. Prints
 * the largest error of each op at the end; with --bench, then times the products and
 * attention at decode and prefill sizes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "backend.h"
#include "powerinfer.h"
#include "runtime/fp16.h"
#include "runtime/quantize.h"
#include "runtime/types.h"

#define MAX_TOK   64
#define MAX_WIDTH 8192

static const struct pi_backend_vtable *G; /* the GPU backend */
static struct pi_backend *gb;
static const struct pi_backend_vtable *C; /* the CPU backend, reference for some ops */
static struct pi_backend *cb;

/* ---- random numbers, error table -------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15u;

static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

static float rnd(void) { /* [-1, 1) */
    return (float)(rnd_u32() & 0xffffff) / 8388608.0f - 1.0f;
}

struct err_row {
    const char *op;
    long checks;
    double max_abs; /* largest |got - want| */
    double max_rel; /* largest |got - want| / tolerance: must stay <= 1 */
};
static struct err_row g_err[32];
static int g_n_err;

static struct err_row *err_row(const char *op) {
    for (int i = 0; i < g_n_err; i++)
        if (strcmp(g_err[i].op, op) == 0)
            return &g_err[i];
    assert_true(g_n_err < 32);
    g_err[g_n_err].op = op;
    return &g_err[g_n_err++];
}

/* Check |got - want| <= tol and keep the statistics; tol 0 means bit-exact. */
static void check(const char *op, double got, double want, double tol, const char *what, long i) {
    struct err_row *e = err_row(op);
    const double d = fabs(got - want);
    e->checks++;
    if (!(d <= tol) && !(tol == 0.0 && got == want))
        fail_msg("%s (%s) [%ld]: got %.9g, want %.9g, |diff| %.3g > tol %.3g", op, what, i, got,
                 want, d, tol);
    if (d > e->max_abs)
        e->max_abs = d;
    if (tol > 0.0 && d / tol > e->max_rel)
        e->max_rel = d / tol;
}

/* ---- device buffers ---------------------------------------------------------------- */

static void *dev_alloc(size_t size) {
    void *p;
    assert_int_equal(G->buf_alloc(gb, size, &p), PI_OK);
    assert_non_null(p);
    return p;
}

static void *dev_from(const void *host, size_t size) {
    void *p = dev_alloc(size);
    assert_int_equal(G->upload(gb, p, host, size), PI_OK);
    return p;
}

static void dev_to(void *host, const void *dev, size_t size) {
    assert_int_equal(G->download(gb, host, dev, size), PI_OK);
}

static float *rnd_floats(size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = rnd() * scale;
    return x;
}

/* ---- weights ------------------------------------------------------------------------- */

static const uint32_t k_types[] = {
    PI_TYPE_F32,  PI_TYPE_F16,  PI_TYPE_BF16, PI_TYPE_Q4_0, PI_TYPE_Q4_1, PI_TYPE_Q5_0,
    PI_TYPE_Q5_1, PI_TYPE_Q8_0, PI_TYPE_Q4_K, PI_TYPE_Q5_K, PI_TYPE_Q6_K, PI_TYPE_Q2_K,
    PI_TYPE_Q3_K, PI_TYPE_ID_IQ4_NL, PI_TYPE_ID_IQ4_XS, PI_TYPE_MXFP4,
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

/* n_out rows of n_in values of `type`: quantized random floats where a quantizer
 * exists; for the K-quants random block bytes with small positive f16 scales. */
static uint8_t *make_weights(uint32_t type, int64_t n_in, int64_t n_out, size_t *row_bytes) {
    const struct pi_type_traits *tt = pi_type_traits(type);
    *row_bytes = (size_t)pi_type_row_bytes(type, n_in);
    assert_true(*row_bytes > 0);
    uint8_t *w = malloc(*row_bytes * (size_t)n_out);
    assert_non_null(w);
    float *row = malloc((size_t)n_in * sizeof *row);
    assert_non_null(row);
    for (int64_t r = 0; r < n_out; r++) {
        uint8_t *dst = w + (size_t)r * *row_bytes;
        if (pi_quantize_supported(type)) {
            const float scale = 0.5f + (float)(r % 5);
            for (int64_t i = 0; i < n_in; i++)
                row[i] = rnd() * scale;
            pi_quantize_row(type, row, dst, n_in);
            continue;
        }
        for (size_t i = 0; i < *row_bytes; i++)
            dst[i] = (uint8_t)rnd_u32();
        for (int64_t b = 0; b < n_in / (int64_t)tt->block_size; b++) {
            uint8_t *blk = dst + (size_t)b * tt->block_bytes;
            const uint16_t d = pi_fp32_to_fp16(0.001f + 0.01f * (rnd() + 1.0f));
            const uint16_t dmin = pi_fp32_to_fp16(0.004f * (rnd() + 1.0f));
            /* where d (and dmin) sit: Q6_K, Q3_K and Q2_K keep them at the end */
            const size_t d_at = type == PI_TYPE_Q6_K   ? 208
                                : type == PI_TYPE_Q3_K ? 108
                                : type == PI_TYPE_Q2_K ? 80
                                                       : 0;
            memcpy(blk + d_at, &d, 2);
            if (type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K || type == PI_TYPE_Q2_K)
                memcpy(blk + d_at + 2, &dmin, 2);
        }
    }
    free(row);
    return w;
}

/* Rows dequantized by the scalar reference: [n_out][n_in]. */
static float *dequant(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_in,
                      int64_t n_out) {
    float *f = malloc((size_t)n_in * (size_t)n_out * sizeof *f);
    assert_non_null(f);
    for (int64_t r = 0; r < n_out; r++)
        pi_type_traits(type)->to_float(w + (size_t)r * row_bytes, f + r * n_in, n_in);
    return f;
}

/* Shapes: blocks per row (float types: a row length from it that is no multiple of
 * 8 where possible), rows, tokens. */
struct shape {
    int blocks, n_out, n_tok;
};
static const struct shape k_shapes[] = {
    {1, 1, 1},   {3, 3, 2},    {5, 37, 7},  {2, 4099, 1},
    {4, 37, 33}, {1, 4099, 7}, {7, 129, 1}, {2, 3, 64},
};
#define N_SHAPES (sizeof k_shapes / sizeof k_shapes[0])

static int64_t shape_n_in(uint32_t type, int blocks) {
    const uint32_t bs = pi_type_traits(type)->block_size;
    return bs == 1 ? (int64_t)blocks * 35 : (int64_t)blocks * bs;
}

/* A weight on the host and on the device, and the output of the op it is tested in. */
struct wcase {
    uint32_t type;
    int64_t n_in, n_out, n_tok;
    size_t rb;           /* bytes per row */
    uint8_t *w;          /* [n_out] rows of rb bytes */
    float *wf;           /* [n_out][n_in]: w dequantized by the scalar reference */
    void *dw;            /* w on the device */
    struct pi_weight wt; /* dw, as the ops take it */
    int64_t n_y;         /* output values per token */
    float *y, *dy;       /* [n_tok][n_y] on the host and on the device */
};

/* Random weights (make_weights) of `type` in shape sh, on the host only. */
static struct wcase wcase_make(uint32_t type, struct shape sh) {
    struct wcase c = {
        .type = type, .n_in = shape_n_in(type, sh.blocks), .n_out = sh.n_out, .n_tok = sh.n_tok};
    c.w = make_weights(type, c.n_in, c.n_out, &c.rb);
    return c;
}

/* The rows as they are now, dequantized (wf) and uploaded (dw, wt); room for an output
 * of n_y values per token (y, dy). */
static void wcase_upload(struct wcase *c, int64_t n_y) {
    c->wf = dequant(c->type, c->w, c->rb, c->n_in, c->n_out);
    c->dw = dev_from(c->w, c->rb * (size_t)c->n_out);
    c->wt = (struct pi_weight){c->dw, c->type, c->n_in, c->n_out, c->rb};
    c->n_y = n_y;
    c->y = malloc((size_t)(c->n_tok * n_y) * sizeof *c->y);
    c->dy = dev_alloc((size_t)(c->n_tok * n_y) * sizeof *c->y);
}

/* y from dy, once the op is queued. */
static void wcase_download(struct wcase *c) {
    dev_to(c->y, c->dy, (size_t)(c->n_tok * c->n_y) * sizeof *c->y);
}

static void wcase_free(struct wcase *c) {
    G->buf_free(gb, c->dw);
    G->buf_free(gb, c->dy);
    free(c->w);
    free(c->wf);
    free(c->y);
}

/* The output y[t][o] against double-precision sums over j < n_x of
 * x[t][j] * wf[o*o_step + j*j_step], with a tolerance relative to the sum of |terms|.
 * Zero activations add nothing and are skipped: their weights may be NaN (matmul_t). */
static void check_product(const char *op, const struct wcase *c, const float *x, int64_t n_x,
                          int64_t o_step, int64_t j_step) {
    for (int64_t t = 0; t < c->n_tok; t++)
        for (int64_t o = 0; o < c->n_y; o++) {
            double s = 0, a = 0;
            for (int64_t j = 0; j < n_x; j++) {
                const float xv = x[t * n_x + j];
                if (xv == 0.0f)
                    continue;
                const double p = (double)xv * c->wf[o * o_step + j * j_step];
                s += p;
                a += fabs(p);
            }
            check(op, c->y[t * c->n_y + o], s, 1e-5 * a + 1e-6, pi_type_traits(c->type)->name,
                  (long)(t * c->n_y + o));
        }
}

static void test_matmul(void **state) {
    (void)state;
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t si = 0; si < N_SHAPES; si++) {
            struct wcase c = wcase_make(k_types[ti], k_shapes[si]);
            wcase_upload(&c, c.n_out);
            const int64_t n_in = c.n_in, n_tok = c.n_tok;
            float *x = rnd_floats((size_t)(n_tok * n_in), 1.0f);
            for (int64_t i = 0; i < n_tok * n_in; i += 7)
                x[i] = 0.0f;
            /* odd shapes also see x 4 bytes past an aligned address (no float4 path) */
            const int64_t off = si % 2;
            float *dx = dev_alloc((size_t)(n_tok * n_in + off) * sizeof *x);
            assert_int_equal(G->upload(gb, dx + off, x, (size_t)(n_tok * n_in) * sizeof *x), PI_OK);
            G->matmul(gb, &c.wt, dx + off, n_tok, c.dy);
            wcase_download(&c);
            check_product("matmul", &c, x, n_in, n_in, 1);
            G->buf_free(gb, dx);
            wcase_free(&c);
            free(x);
        }
    assert_int_equal(G->sync(gb), PI_OK);
}

/* y [n_tok][n_in] = x [n_tok][n_out] W, W neuron-major; about half the activations
 * zero, as after a ReLU, and every 5th row zero for all tokens with NaN weights (all
 * bytes 0xff decode to NaN in every type): such rows must not be read. */
static void test_matmul_t(void **state) {
    (void)state;
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t si = 0; si < N_SHAPES; si++) {
            struct wcase c = wcase_make(k_types[ti], k_shapes[si]);
            const int64_t n_in = c.n_in, n_out = c.n_out, n_tok = c.n_tok;
            float *x = rnd_floats((size_t)(n_tok * n_out), 1.0f);
            for (int64_t i = 0; i < n_tok * n_out; i++)
                if (rnd() < 0.0f)
                    x[i] = 0.0f;
            for (int64_t r = 0; r < n_out; r += 5) {
                for (int64_t t = 0; t < n_tok; t++)
                    x[t * n_out + r] = 0.0f;
                memset(c.w + (size_t)r * c.rb, 0xff, c.rb);
            }
            wcase_upload(&c, n_in);
            float *dx = dev_from(x, (size_t)(n_tok * n_out) * sizeof *x);
            G->matmul_t(gb, &c.wt, dx, n_tok, c.dy);
            wcase_download(&c);
            check_product("matmul_t", &c, x, n_out, 1, n_in);
            G->buf_free(gb, dx);
            wcase_free(&c);
            free(x);
        }
    assert_int_equal(G->sync(gb), PI_OK);
}

/* Dequantized rows must equal the scalar reference bit for bit. */
static void test_get_rows(void **state) {
    (void)state;
    if (!G->get_rows)
        skip();
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        struct wcase c = wcase_make(k_types[ti], (struct shape){3, 37, 9});
        wcase_upload(&c, c.n_in);
        const int32_t ids[9] = {0, 36, 5, 5, 17, 1, 35, 20, 0};
        int32_t *dids = dev_from(ids, sizeof ids);
        G->get_rows(gb, &c.wt, dids, c.n_tok, c.dy);
        wcase_download(&c);
        for (int64_t t = 0; t < c.n_tok; t++)
            for (int64_t i = 0; i < c.n_in; i++)
                check("get_rows", c.y[t * c.n_in + i], c.wf[ids[t] * c.n_in + i], 0.0,
                      pi_type_traits(c.type)->name, (long)(t * c.n_in + i));
        G->buf_free(gb, dids);
        wcase_free(&c);
    }
}

/* Every binary16 pattern through an F16 get_rows: the device's conversion must give
 * the reference's float (a NaN, some NaN). */
static void test_f16_patterns(void **state) {
    (void)state;
    if (!G->get_rows)
        skip();
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof *h);
    float *y = malloc(N * sizeof *y);
    for (uint32_t i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    const int32_t id = 0;
    void *dw = dev_from(h, N * sizeof *h);
    int32_t *did = dev_from(&id, sizeof id);
    float *dy = dev_alloc(N * sizeof *y);
    struct pi_weight wt = {dw, PI_TYPE_F16, N, 1, N * sizeof *h};
    G->get_rows(gb, &wt, did, 1, dy);
    dev_to(y, dy, N * sizeof *y);
    for (uint32_t i = 0; i < N; i++) {
        const float want = pi_fp16_to_fp32((uint16_t)i);
        if (isnan(want))
            assert_true(isnan(y[i]));
        else
            check("f16 patterns", y[i], want, 0.0, "get_rows", (long)i);
    }
    G->buf_free(gb, dw);
    G->buf_free(gb, did);
    G->buf_free(gb, dy);
    free(h);
    free(y);
}

/* ---- element-wise ops against the CPU backend -------------------------------------- */

static void test_rmsnorm(void **state) {
    (void)state;
    static const int64_t ns[] = {1, 37, 4096, 5003};
    static const uint32_t gtypes[] = {PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_BF16};
    for (size_t ni = 0; ni < 4; ni++)
        for (size_t gi = 0; gi < 3; gi++)
            for (int alias = 0; alias <= 1; alias++) {
                const int64_t n = ns[ni], n_tok = ni % 2 ? 7 : 1;
                float *x = rnd_floats((size_t)(n * n_tok), 3.0f);
                float *gf = rnd_floats((size_t)n, 1.0f);
                uint8_t *g = malloc((size_t)n * 4);
                for (int64_t i = 0; i < n; i++) {
                    if (gtypes[gi] == PI_TYPE_F32) {
                        memcpy(g + 4 * i, &gf[i], 4);
                    } else {
                        const uint16_t h = gtypes[gi] == PI_TYPE_F16 ? pi_fp32_to_fp16(gf[i])
                                                                     : pi_fp32_to_bf16(gf[i]);
                        memcpy(g + 2 * i, &h, 2);
                    }
                }
                const size_t gbytes = (size_t)n * (gtypes[gi] == PI_TYPE_F32 ? 4 : 2);
                float *want = malloc((size_t)(n * n_tok) * sizeof *want);
                float *got = malloc((size_t)(n * n_tok) * sizeof *got);
                struct pi_vector gv = {g, gtypes[gi], n};
                C->rmsnorm(cb, x, &gv, 1e-5f, n_tok, want);
                float *dx = dev_from(x, (size_t)(n * n_tok) * sizeof *x);
                float *dy = alias ? dx : dev_alloc((size_t)(n * n_tok) * sizeof *x);
                struct pi_vector dgv = {dev_from(g, gbytes), gtypes[gi], n};
                G->rmsnorm(gb, dx, &dgv, 1e-5f, n_tok, dy);
                dev_to(got, dy, (size_t)(n * n_tok) * sizeof *got);
                for (int64_t i = 0; i < n * n_tok; i++)
                    check("rmsnorm", got[i], want[i], 2e-6 * fabs(want[i]) + 1e-7,
                          alias ? "in place" : "out of place", (long)i);
                G->buf_free(gb, dx);
                if (!alias)
                    G->buf_free(gb, dy);
                G->buf_free(gb, (void *)dgv.data);
                free(x);
                free(gf);
                free(g);
                free(want);
                free(got);
            }
}

/* RoPE against the CPU's, both pair layouts each: plain and linear scaling, partial
 * rotary (n_rot < head_dim: the rest must stay as it was), per-pair frequency factors
 * (rope_freqs / LongRoPE: on the device for the GPU, on the host for the CPU), YaRN
 * (ext_factor 1, freq_scale 0.25, trained context 4096, positions past it) and
 * attn_factor != 1. Both backends compute the angle in double from the same expression
 * and round cos and sin (times the scale) to float, then rotate with the same float
 * products (no contraction on the device): they differ only where the device's double
 * pow/cos/sin (within 2 ulp) tip a float rounding, one float ulp of cos or sin, so
 * 1e-6 * (1 + |x|) (about 8 ulp at |x| ~ 2) bounds it. */
static void test_rope(void **state) {
    (void)state;
    static const struct {
        int64_t n_tok, n_head, head_dim, n_rot, pos0;
        float base, scale, attn_factor, ext_factor;
        int64_t n_ctx_orig;
        int factors;
    } cases[] = {
        {7, 5, 64, 64, 0, 10000.0f, 1.0f, 1.0f, 0.0f, 0, 0},
        {1, 32, 128, 128, 4095, 500000.0f, 1.0f, 1.0f, 0.0f, 0, 0},
        {33, 3, 80, 32, 1000, 10000.0f, 4.0f, 1.0f, 0.0f, 0, 0},
        {2, 2, 12, 8, 5, 500.0f, 2.0f, 1.0f, 0.0f, 0, 0},
        /* Llama 3.1 rope_freqs / LongRoPE: factors, full and partial rotary */
        {9, 4, 64, 64, 3000, 500000.0f, 1.0f, 1.0f, 0.0f, 0, 1},
        {5, 3, 96, 48, 70, 10000.0f, 1.0f, 1.19f, 0.0f, 0, 1},
        /* YaRN: 4x beyond a 4096 context, full and partial rotary, with and without
         * attn_factor and factors */
        {17, 4, 128, 128, 8000, 10000.0f, 4.0f, 1.0f, 1.0f, 4096, 0},
        {3, 6, 64, 64, 16380, 1000000.0f, 4.0f, 0.8f, 1.0f, 4096, 0},
        {4, 2, 80, 40, 5000, 10000.0f, 4.0f, 1.0f, 1.0f, 4096, 1},
        /* attn_factor alone (Phi-3's LongRoPE scale), partial rotary, odd head count */
        {6, 7, 40, 24, 12, 10000.0f, 1.0f, 1.25f, 0.0f, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int neox = 0; neox <= 1; neox++) {
            const int64_t n = cases[c].n_tok * cases[c].n_head * cases[c].head_dim;
            const int64_t half = cases[c].n_rot / 2;
            float *x = rnd_floats((size_t)n, 2.0f);
            float *x0 = malloc((size_t)n * sizeof *x0);
            memcpy(x0, x, (size_t)n * sizeof *x0);
            float *got = malloc((size_t)n * sizeof *got);
            float *dx = dev_from(x, (size_t)n * sizeof *x);
            float *f = NULL, *df = NULL;
            if (cases[c].factors) { /* 1 .. 40, rising with the pair like Llama 3.1's */
                f = malloc((size_t)half * sizeof *f);
                for (int64_t i = 0; i < half; i++)
                    f[i] = 1.0f + 39.0f * (float)i / (float)half + 0.5f * (rnd() + 1.0f);
                df = dev_from(f, (size_t)half * sizeof *f);
            }
            struct pi_rope rp = {.n_rot = cases[c].n_rot, .neox = neox,
                                 .base = cases[c].base,
                                 .freq_scale = 1.0f / cases[c].scale,
                                 .factors = f,
                                 .attn_factor = cases[c].attn_factor,
                                 .ext_factor = cases[c].ext_factor,
                                 .beta_fast = 32.0f, .beta_slow = 1.0f,
                                 .n_ctx_orig = cases[c].n_ctx_orig};
            C->rope(cb, x, cases[c].n_tok, cases[c].n_head, cases[c].head_dim, cases[c].pos0,
                    &rp);
            rp.factors = df;
            G->rope(gb, dx, cases[c].n_tok, cases[c].n_head, cases[c].head_dim, cases[c].pos0,
                    &rp);
            dev_to(got, dx, (size_t)n * sizeof *got);
            const char *what = cases[c].ext_factor != 0.0f ? (neox ? "yarn neox" : "yarn pairs")
                               : cases[c].factors          ? (neox ? "factors neox"
                                                                   : "factors pairs")
                               : neox                      ? "neox"
                                                           : "pairs";
            for (int64_t i = 0; i < n; i++) {
                check("rope", got[i], x[i], 1e-6 * (1.0 + fabs(x[i])), what, (long)i);
                /* values past n_rot are not rotated, on either backend */
                if (i % cases[c].head_dim >= cases[c].n_rot)
                    check("rope", got[i], x0[i], 0.0, "unrotated", (long)i);
            }
            /* the rotation moved something: the case tests what it claims */
            assert_true(memcmp(x, x0, (size_t)n * sizeof *x) != 0 || cases[c].pos0 == 0);
            G->buf_free(gb, dx);
            if (df)
                G->buf_free(gb, df);
            free(f);
            free(x);
            free(x0);
            free(got);
        }
    assert_int_equal(G->sync(gb), PI_OK);
}

/* The same stores and attentions on both backends' caches, chunk by chunk: the last
 * token of each chunk sees every earlier position (or the last a->window of them).
 * Attention runs on the first chunk, every 5th and the last `n_last` (all when n_last
 * is 0; the CPU's attention is slow to check on every chunk of a long context).
 * a: the options (NULL: scale 1 / sqrt(head_dim_k), no cap, no window). */
static void attention_case(const struct pi_kv_desc *d, const int64_t *chunks, int n_chunks,
                           int64_t layer, int n_last, const struct pi_attn *a) {
    struct pi_kv *ckv, *gkv;
    assert_int_equal(C->kv_create(cb, d, &ckv), PI_OK);
    assert_int_equal(G->kv_create(gb, d, &gkv), PI_OK);
    const int64_t nq = d->n_head * d->head_dim_k, no = d->n_head * d->head_dim_v;
    const int64_t nk = d->n_head_kv * d->head_dim_k, nv = d->n_head_kv * d->head_dim_v;
    int64_t pos = 0;
    for (int c = 0; c < n_chunks; c++) {
        const int64_t n_tok = chunks[c];
        float *q = rnd_floats((size_t)(n_tok * nq), 2.0f);
        float *k = rnd_floats((size_t)(n_tok * nk), 1.0f);
        float *v = rnd_floats((size_t)(n_tok * nv), 1.0f);
        float *want = malloc((size_t)(n_tok * no) * sizeof *want);
        float *got = malloc((size_t)(n_tok * no) * sizeof *got);
        float *dq = dev_from(q, (size_t)(n_tok * nq) * sizeof *q);
        float *dk = dev_from(k, (size_t)(n_tok * nk) * sizeof *k);
        float *dv = dev_from(v, (size_t)(n_tok * nv) * sizeof *v);
        float *dout = dev_alloc((size_t)(n_tok * no) * sizeof *got);
        const int attend = n_last == 0 || c == 0 || c % 5 == 0 || c >= n_chunks - n_last;
        C->kv_store(cb, ckv, layer, pos, n_tok, k, v);
        G->kv_store(gb, gkv, layer, pos, n_tok, dk, dv);
        if (attend) {
            const struct pi_attn def = {1.0f / sqrtf((float)d->head_dim_k), 0.0f, 0, NULL};
            const struct pi_attn *ao = a ? a : &def;
            struct pi_attn go = *ao; /* the device's copy of the sinks */
            float *dsinks = NULL;
            if (ao->sinks) {
                dsinks = dev_from(ao->sinks, (size_t)d->n_head * sizeof(float));
                go.sinks = dsinks;
            }
            C->attention(cb, ckv, layer, q, n_tok, pos, ao, want);
            G->attention(gb, gkv, layer, dq, n_tok, pos, &go, dout);
            dev_to(got, dout, (size_t)(n_tok * no) * sizeof *got);
            if (dsinks)
                G->buf_free(gb, dsinks);
            const char *what = ao->sinks                             ? "sinks"
                               : ao->window > 0 && ao->softcap > 0.0f ? "window, softcap"
                               : ao->window > 0                      ? "window"
                               : ao->softcap > 0.0f                  ? "softcap"
                               : a                                   ? "scale"
                                                                     : "vs cpu";
            for (int64_t i = 0; i < n_tok * no; i++)
                check("attention", got[i], want[i], 1e-5 * (1.0 + fabs(want[i])), what,
                      (long)i);
        }
        G->buf_free(gb, dq);
        G->buf_free(gb, dk);
        G->buf_free(gb, dv);
        G->buf_free(gb, dout);
        free(q);
        free(k);
        free(v);
        free(want);
        free(got);
        pos += n_tok;
    }
    C->kv_destroy(cb, ckv);
    G->kv_destroy(gb, gkv);
    assert_int_equal(G->sync(gb), PI_OK);
}

static void test_attention(void **state) {
    (void)state;
    { /* grouped-query, prefill then decode steps */
        const struct pi_kv_desc d = {2, 160, 6, 2, 64, 64, PI_KV_F16, PI_KV_F16};
        const int64_t chunks[] = {7, 1, 33, 1, 64, 1};
        attention_case(&d, chunks, 6, 1, 0, NULL);
    }
    { /* multi-head, odd head dims, K wider than V */
        const struct pi_kv_desc d = {1, 64, 4, 4, 40, 24, PI_KV_F16, PI_KV_F16};
        const int64_t chunks[] = {1, 2, 3, 7, 1};
        attention_case(&d, chunks, 5, 0, 0, NULL);
    }
    { /* one K/V head for 8, wide heads, a long context (split positions) */
        const struct pi_kv_desc d = {1, 3000, 8, 1, 128, 128, PI_KV_F16, PI_KV_F16};
        int64_t chunks[64];
        int n = 0;
        for (int64_t p = 0; p < 2990; p += 64)
            chunks[n++] = 2990 - p < 64 ? 2990 - p : 64;
        chunks[n++] = 7;
        chunks[n++] = 1;
        attention_case(&d, chunks, n, 0, 3, NULL);
    }
    { /* the widest heads the kernel takes on every warp width */
        const struct pi_kv_desc d = {1, 300, 2, 2, 256, 256, PI_KV_F16, PI_KV_F16};
        const int64_t chunks[] = {33, 1, 64, 64, 64, 1};
        attention_case(&d, chunks, 6, 0, 0, NULL);
    }
    { /* wider heads: refused at creation, not failed later */
        const struct pi_kv_desc d = {1, 8, 2, 2, 1024, 1024, PI_KV_F16, PI_KV_F16};
        struct pi_kv *kv = (struct pi_kv *)1;
        assert_int_equal(G->kv_create(gb, &d, &kv), PI_ERR_UNSUPPORTED);
        assert_null(kv);
    }
}

/* Attention options against the CPU's: a scale other than 1 / sqrt(head_dim_k) (Gemma's
 * query_pre_attn_scalar), a soft-cap that bites (scores of about +-1.6 (q.k std ~5.3 at
 * head dim 64, times 0.3) capped at 1.5, so tanh is well off linear), and sliding
 * windows: 1 (only itself), 16 (smaller than the contexts), 107 (exactly the positions
 * the last token sees) and 1000 (larger than the cache); then long contexts with a
 * window, in 64-token prefill steps and decode, where the device splits the positions
 * (k_attn_merge) over windowed ranges and steps cross the point where the window starts
 * to cut (positions 700 and 40). Tolerance as above, 1e-5 * (1 + |want|): the cap adds
 * one tanhf per score (within 2 ulp on the device, 1 in glibc), far below the
 * summation-order differences the bound covers; a position wrongly in or out of the
 * window moves an output by ~1e-2. */
static void test_attention_options(void **state) {
    (void)state;
    {
        const struct pi_kv_desc d = {2, 160, 6, 2, 64, 64, PI_KV_F16, PI_KV_F16};
        const int64_t chunks[] = {7, 1, 33, 1, 64, 1}; /* 107 positions */
        /* gpt-oss's sinks: near the scores, far above and far below them */
        static const float sinks[6] = {0.5f, -2.0f, 3.0f, 60.0f, -60.0f, 0.0f};
        static const struct pi_attn opts[] = {
            {0.3f, 0.0f, 0, NULL},    {0.3f, 1.5f, 0, NULL},    {0.125f, 0.0f, 16, NULL},
            {0.125f, 0.0f, 107, NULL}, {0.125f, 0.0f, 1000, NULL}, {0.125f, 0.0f, 1, NULL},
            {0.3f, 1.5f, 8, NULL},    {0.125f, 0.0f, 0, sinks}, {0.125f, 0.0f, 16, sinks},
        };
        for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
            attention_case(&d, chunks, 6, 1, 0, &opts[i]);
    }
    { /* one K/V head for 8 over a long context: windows of 700 and of 40 (with a cap) */
        const struct pi_kv_desc d = {1, 3000, 8, 1, 128, 128, PI_KV_F16, PI_KV_F16};
        int64_t chunks[64];
        int n = 0;
        for (int64_t p = 0; p < 2990; p += 64)
            chunks[n++] = 2990 - p < 64 ? 2990 - p : 64;
        chunks[n++] = 7;
        chunks[n++] = 1;
        chunks[n++] = 1;
        const struct pi_attn wide = {0.0884f, 0.0f, 700, NULL}, narrow = {0.0884f, 2.0f, 40, NULL};
        attention_case(&d, chunks, n, 0, 4, &wide);
        attention_case(&d, chunks, n, 0, 0, &narrow);
    }
    { /* the widest heads, a window and a cap */
        const struct pi_kv_desc d = {1, 300, 2, 2, 256, 256, PI_KV_F16, PI_KV_F16};
        const int64_t chunks[] = {33, 1, 64, 64, 64, 1};
        const struct pi_attn o = {0.0625f, 1.0f, 100, NULL};
        attention_case(&d, chunks, 6, 0, 0, &o);
    }
}

static const char *const k_act_names[PI_ACT_COUNT] = {
    [PI_ACT_SILU_MUL] = "silu*u",       [PI_ACT_RELU_MUL] = "relu*u",
    [PI_ACT_RELU_RELU_MUL] = "relu*relu", [PI_ACT_GELU_MUL] = "gelu*u",
    [PI_ACT_GELU_ERF_MUL] = "gelu_erf*u", [PI_ACT_SILU] = "silu",
    [PI_ACT_GELU] = "gelu",             [PI_ACT_GELU_ERF] = "gelu_erf",
    [PI_ACT_RELU] = "relu",             [PI_ACT_RELU_SQR] = "relu^2",
    [PI_ACT_SWIGLU_OAI] = "swiglu_oai",
};

/* Tolerance of one activation against the CPU's, g and u the inputs. The ReLU family
 * is exact (a compare, then at most one product: g * u or g * g). SiLU: expf within
 * 2 ulp on the device (1 in glibc), then one add, one divide and one product, each
 * correctly rounded: 1e-6 relative. GELU (tanh or erf form): 0.5 g (1 + t) cancels
 * for negative g (t near -1), so a 2-ulp error of tanhf or erff (at most 1.2e-7
 * absolute for |t| < 1) is 6e-8 |g| absolute, not relative: 3e-7 |g| |u| bounds it with
 * a margin of 5, plus 1e-6 relative for the float operations around it. */
static double act_tol(enum pi_act act, float g, float u, double want) {
    const double uu = pi_act_gated(act) ? fabs(u) : 1.0;
    switch (act) {
    case PI_ACT_SILU_MUL:
    case PI_ACT_SILU:
        return 1e-6 * fabs(want) + 1e-30;
    case PI_ACT_SWIGLU_OAI: /* SiLU's operations and one more add and product */
        return 2e-6 * fabs(want) + 1e-30;
    case PI_ACT_GELU_MUL:
    case PI_ACT_GELU_ERF_MUL:
    case PI_ACT_GELU:
    case PI_ACT_GELU_ERF:
        return 1e-6 * fabs(want) + 3e-7 * fabs(g) * uu + 1e-30;
    default:
        return 0.0;
    }
}

/* One activation on both backends: ffn_act (masked 2) or ffn_act_masked without (0) or
 * with (1) a score mask. The plain activations get u NULL, as the executor passes it. */
static void act_case(enum pi_act act, int64_t n_tok, int64_t n, int masked) {
    const int64_t stride = n + 101, total = n_tok * n;
    const int gated = pi_act_gated(act);
    float *g = rnd_floats((size_t)total, 4.0f);
    float *u = rnd_floats((size_t)total, 4.0f);
    g[0] = 0.0f;
    g[1 % total] = -0.0f;
    u[2 % total] = -0.0f;
    float *score = rnd_floats((size_t)(n_tok * stride), 1.0f);
    int32_t *map = malloc((size_t)n * sizeof *map);
    for (int64_t i = 0; i < n; i++) /* distinct ids, some past n */
        map[i] = (int32_t)((i * 37 + 11) % stride);
    const float thr = 0.25f;
    score[map[0]] = thr;             /* equal: active */
    score[map[n > 1 ? 1 : 0]] = NAN; /* NaN: masked */
    float *want = malloc((size_t)total * sizeof *want);
    float *g0 = malloc((size_t)total * sizeof *g0);
    memcpy(want, g, (size_t)total * sizeof *want);
    memcpy(g0, g, (size_t)total * sizeof *g0);
    float *dg = dev_from(g, (size_t)total * sizeof *g);
    float *du = gated ? dev_from(u, (size_t)total * sizeof *u) : NULL;
    float *ds = dev_from(score, (size_t)(n_tok * stride) * sizeof *score);
    int32_t *dm = dev_from(map, (size_t)n * sizeof *map);
    const float *hu = gated ? u : NULL;
    if (masked == 2) {
        C->ffn_act(cb, act, want, hu, total);
        G->ffn_act(gb, act, dg, du, total);
    } else {
        C->ffn_act_masked(cb, act, want, hu, n_tok, n, masked ? score : NULL, stride, map, thr);
        G->ffn_act_masked(gb, act, dg, du, n_tok, n, masked ? ds : NULL, stride, dm, thr);
    }
    dev_to(g, dg, (size_t)total * sizeof *g);
    const char *op = masked == 2 ? "ffn_act" : "ffn_act_masked";
    for (int64_t i = 0; i < total; i++)
        check(op, g[i], want[i], act_tol(act, g0[i], u[i], want[i]), k_act_names[act],
              (long)i);
    G->buf_free(gb, dg);
    if (du)
        G->buf_free(gb, du);
    G->buf_free(gb, ds);
    G->buf_free(gb, dm);
    free(g);
    free(g0);
    free(u);
    free(score);
    free(map);
    free(want);
}

/* All ten activations, plain and under the predictor's mask. */
static void test_ffn_act(void **state) {
    (void)state;
    for (int a = 0; a < PI_ACT_COUNT; a++) {
        act_case((enum pi_act)a, 1, 10007, 2);
        act_case((enum pi_act)a, 1, 3, 2);
        for (int masked = 0; masked <= 1; masked++) {
            act_case((enum pi_act)a, 1, 333, masked);
            act_case((enum pi_act)a, 7, 333, masked);
            act_case((enum pi_act)a, 33, 4099, masked);
        }
    }
    assert_int_equal(G->sync(gb), PI_OK);
}

static void test_add(void **state) {
    (void)state;
    const int64_t n = 10007;
    float *y = rnd_floats((size_t)n, 1.0f), *x = rnd_floats((size_t)n, 1.0f);
    float *got = malloc((size_t)n * sizeof *got);
    float *dy = dev_from(y, (size_t)n * sizeof *y), *dx = dev_from(x, (size_t)n * sizeof *x);
    G->add(gb, dy, dx, n);
    C->add(cb, y, x, n);
    dev_to(got, dy, (size_t)n * sizeof *got);
    for (int64_t i = 0; i < n; i++)
        check("add", got[i], y[i], 0.0, "vs cpu", (long)i);
    G->buf_free(gb, dy);
    G->buf_free(gb, dx);
    free(y);
    free(x);
    free(got);
}

/* n values of `type` (F32, F16 or BF16) from f, rounded as stored: [n] bytes on the host. */
static uint8_t *vec_bytes(const float *f, int64_t n, uint32_t type, size_t *bytes) {
    const size_t w = type == PI_TYPE_F32 ? 4 : 2;
    uint8_t *v = malloc((size_t)n * w);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) {
        if (type == PI_TYPE_F32) {
            memcpy(v + 4 * i, &f[i], 4);
        } else {
            const uint16_t h = type == PI_TYPE_F16 ? pi_fp32_to_fp16(f[i]) : pi_fp32_to_bf16(f[i]);
            memcpy(v + 2 * i, &h, 2);
        }
    }
    *bytes = (size_t)n * w;
    return v;
}

/* LayerNorm against the CPU's: with and without weight and bias (F32, F16, BF16
 * vectors; F16 weight with F32 bias too), in place and not, rows of 1 (variance 0),
 * odd and long lengths; inputs off-centre (mean ~2) so the mean matters. Both take the
 * mean and the variance in double (the device over a fixed tree, the CPU in order), so
 * their float mean and 1/sqrt(var + eps) agree to about one float ulp; the result
 * (x - m) * inv * g + b is then the same float expression. 2e-6 relative to
 * |(x - m) * inv * g| + |b| (the bias may cancel the rest) plus 1e-6 absolute (one ulp
 * of the mean, times inv ~ 0.6) bounds that. */
static void test_layernorm(void **state) {
    (void)state;
    static const int64_t ns[] = {1, 37, 4096, 5003};
    static const struct {
        uint32_t gtype, btype; /* 0: NULL */
    } vecs[] = {
        {0, 0},
        {PI_TYPE_F32, 0},
        {0, PI_TYPE_F32},
        {PI_TYPE_F32, PI_TYPE_F32},
        {PI_TYPE_F16, PI_TYPE_F16},
        {PI_TYPE_BF16, PI_TYPE_BF16},
        {PI_TYPE_F16, PI_TYPE_F32},
    };
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t vi = 0; vi < sizeof vecs / sizeof vecs[0]; vi++)
            for (int alias = 0; alias <= 1; alias++) {
                const int64_t n = ns[ni], n_tok = ni % 2 ? 7 : 3;
                float *x = rnd_floats((size_t)(n * n_tok), 3.0f);
                for (int64_t i = 0; i < n * n_tok; i++)
                    x[i] += 2.0f;
                float *gf = rnd_floats((size_t)n, 1.5f), *bf = rnd_floats((size_t)n, 1.0f);
                size_t gbytes = 0, bbytes = 0;
                uint8_t *g = vecs[vi].gtype ? vec_bytes(gf, n, vecs[vi].gtype, &gbytes) : NULL;
                uint8_t *bi = vecs[vi].btype ? vec_bytes(bf, n, vecs[vi].btype, &bbytes) : NULL;
                const struct pi_vector gv = {g, vecs[vi].gtype, n}, bv = {bi, vecs[vi].btype, n};
                float *want = malloc((size_t)(n * n_tok) * sizeof *want);
                float *got = malloc((size_t)(n * n_tok) * sizeof *got);
                C->layernorm(cb, x, g ? &gv : NULL, bi ? &bv : NULL, n, 1e-5f, n_tok, want);
                /* the bias as the CPU read it, for the tolerance */
                float *bval = calloc((size_t)n, sizeof *bval);
                if (bi) {
                    float *zero = calloc((size_t)n, sizeof *zero);
                    C->add_rows(cb, zero, &bv, 1);
                    memcpy(bval, zero, (size_t)n * sizeof *bval);
                    free(zero);
                }
                float *dx = dev_from(x, (size_t)(n * n_tok) * sizeof *x);
                float *dy = alias ? dx : dev_alloc((size_t)(n * n_tok) * sizeof *x);
                void *dg = g ? dev_from(g, gbytes) : NULL, *db = bi ? dev_from(bi, bbytes) : NULL;
                const struct pi_vector dgv = {dg, vecs[vi].gtype, n}, dbv = {db, vecs[vi].btype, n};
                /* a vector with data NULL means none too (only the NULL vector here) */
                G->layernorm(gb, dx, g ? &dgv : NULL, bi ? &dbv : NULL, n, 1e-5f, n_tok, dy);
                dev_to(got, dy, (size_t)(n * n_tok) * sizeof *got);
                char what[48];
                snprintf(what, sizeof what, "g %s, bias %s%s",
                         g ? pi_type_traits(vecs[vi].gtype)->name : "none",
                         bi ? pi_type_traits(vecs[vi].btype)->name : "none",
                         alias ? ", in place" : "");
                for (int64_t i = 0; i < n * n_tok; i++) {
                    const double b = bval[i % n];
                    check("layernorm", got[i], want[i],
                          2e-6 * (fabs(want[i] - b) + fabs(b)) + 1e-6, what, (long)i);
                }
                G->buf_free(gb, dx);
                if (!alias)
                    G->buf_free(gb, dy);
                if (dg)
                    G->buf_free(gb, dg);
                if (db)
                    G->buf_free(gb, db);
                free(x);
                free(gf);
                free(bf);
                free(g);
                free(bi);
                free(bval);
                free(want);
                free(got);
            }
    /* a vector whose data is NULL is no vector, as on the CPU */
    {
        const int64_t n = 37;
        float *x = rnd_floats((size_t)n, 3.0f), *want = malloc((size_t)n * sizeof *want);
        float *got = malloc((size_t)n * sizeof *got);
        const struct pi_vector none = {NULL, PI_TYPE_F32, n};
        C->layernorm(cb, x, &none, &none, n, 1e-5f, 1, want);
        float *dx = dev_from(x, (size_t)n * sizeof *x);
        G->layernorm(gb, dx, &none, &none, n, 1e-5f, 1, dx);
        dev_to(got, dx, (size_t)n * sizeof *got);
        for (int64_t i = 0; i < n; i++)
            check("layernorm", got[i], want[i], 2e-6 * fabs(want[i]) + 1e-6, "data NULL",
                  (long)i);
        G->buf_free(gb, dx);
        free(x);
        free(want);
        free(got);
    }
    assert_int_equal(G->sync(gb), PI_OK);
}

/* Biases: y[t][i] += v[i] with F32, F16 and BF16 vectors; one float add of the same
 * decoded value on both backends (the device's F16/BF16 decoding is bit-exact, see
 * f16 patterns), so exact. */
static void test_add_rows(void **state) {
    (void)state;
    static const uint32_t types[] = {PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_BF16};
    static const struct {
        int64_t n, n_tok;
    } shapes[] = {{1, 1}, {37, 7}, {4099, 3}, {64, 33}};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t n = shapes[si].n, n_tok = shapes[si].n_tok, total = n * n_tok;
            float *y = rnd_floats((size_t)total, 2.0f), *vf = rnd_floats((size_t)n, 1.0f);
            float *got = malloc((size_t)total * sizeof *got);
            size_t bytes;
            uint8_t *v = vec_bytes(vf, n, types[ti], &bytes);
            const struct pi_vector hv = {v, types[ti], n};
            float *dy = dev_from(y, (size_t)total * sizeof *y);
            const struct pi_vector dv = {dev_from(v, bytes), types[ti], n};
            C->add_rows(cb, y, &hv, n_tok);
            G->add_rows(gb, dy, &dv, n_tok);
            dev_to(got, dy, (size_t)total * sizeof *got);
            for (int64_t i = 0; i < total; i++)
                check("add_rows", got[i], y[i], 0.0, pi_type_traits(types[ti])->name, (long)i);
            G->buf_free(gb, dy);
            G->buf_free(gb, (void *)dv.data);
            free(y);
            free(vf);
            free(v);
            free(got);
        }
    assert_int_equal(G->sync(gb), PI_OK);
}

/* scale (one float product: exact) and softcap (cap * tanhf(x / cap): tanhf within
 * 2 ulp on the device, 1 in glibc, then one product; 1e-6 relative is ~8 ulp), with
 * Gemma's caps (30 for logits, 50 for attention) and a small one, on values from far
 * inside the linear range to saturation (|x| up to 1e4: exactly +-cap). */
static void test_scale_softcap(void **state) {
    (void)state;
    const int64_t n = 10007;
    static const float scales[] = {45.254834f, 0.0625f, -1.5f, 1.0f};
    static const float caps[] = {30.0f, 50.0f, 0.5f};
    float *x = rnd_floats((size_t)n, 60.0f);
    x[0] = 1e4f;
    x[1] = -1e4f;
    x[2] = 0.0f;
    x[3] = -0.0f;
    x[4] = 1e-20f;
    float *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    float *dx = dev_alloc((size_t)n * sizeof *x);
    for (size_t k = 0; k < sizeof scales / sizeof scales[0] + sizeof caps / sizeof caps[0];
         k++) {
        const int is_cap = k >= sizeof scales / sizeof scales[0];
        memcpy(want, x, (size_t)n * sizeof *want);
        assert_int_equal(G->upload(gb, dx, x, (size_t)n * sizeof *x), PI_OK);
        if (is_cap) {
            const float cap = caps[k - sizeof scales / sizeof scales[0]];
            C->softcap(cb, want, cap, n);
            G->softcap(gb, dx, cap, n);
        } else {
            C->scale(cb, want, scales[k], n);
            G->scale(gb, dx, scales[k], n);
        }
        dev_to(got, dx, (size_t)n * sizeof *got);
        for (int64_t i = 0; i < n; i++)
            check(is_cap ? "softcap" : "scale", got[i], want[i],
                  is_cap ? 1e-6 * fabs(want[i]) + 1e-30 : 0.0, "vs cpu", (long)i);
    }
    G->buf_free(gb, dx);
    free(x);
    free(want);
    free(got);
    assert_int_equal(G->sync(gb), PI_OK);
}

/* ---- the contract -------------------------------------------------------------------- */

static void test_contract(void **state) {
    (void)state;
    assert_int_equal(G->n_threads(gb), 1);
    assert_non_null(G->sync);
    assert_non_null(G->device_info);
    for (size_t i = 0; i < N_TYPES; i++)
        assert_int_equal(G->supports(gb, k_types[i]), 1);
    assert_int_equal(G->supports(gb, PI_TYPE_Q8_1), 0);
    assert_int_equal(G->supports(gb, PI_TYPE_Q8_K), 0);
    assert_int_equal(G->supports(gb, 99), 0);

    struct pi_device_info info;
    assert_int_equal(G->device_info(gb, &info), PI_OK);
    assert_true(info.name[0] != '\0');
    assert_true(info.mem_total > 0 && info.mem_free <= info.mem_total);

    /* an allocation the device cannot hold fails cleanly and leaves it usable */
    void *p = (void *)1;
    assert_int_equal(G->buf_alloc(gb, (size_t)1 << 60, &p), PI_ERR_NOMEM);
    assert_null(p);
    assert_int_equal(G->sync(gb), PI_OK);

    /* upload's source may be overwritten as soon as upload returns */
    enum { N = 1 << 20 };
    uint32_t *h = malloc(N * sizeof *h), *back = malloc(N * sizeof *back);
    for (uint32_t i = 0; i < N; i++)
        h[i] = i * 2654435761u;
    void *d = dev_alloc(N * sizeof *h);
    assert_int_equal(G->upload(gb, d, h, N * sizeof *h), PI_OK);
    memset(h, 0, N * sizeof *h);
    dev_to(back, d, N * sizeof *back);
    for (uint32_t i = 0; i < N; i++)
        if (back[i] != i * 2654435761u)
            fail_msg("upload: word %u changed after the source was reused", i);
    G->buf_free(gb, d);
    free(h);
    free(back);

    /* no such device */
    struct pi_backend_config cfg = {&pi_default_allocator, 1, MAX_TOK, MAX_WIDTH, 1, 9999};
    struct pi_backend *b2 = (struct pi_backend *)1;
    assert_int_equal(G->create(&b2, &cfg), PI_ERR_UNSUPPORTED);
    assert_null(b2);
    cfg.device = -1;
    assert_int_equal(G->create(&b2, &cfg), PI_ERR_UNSUPPORTED);

    /* an op's error is recorded and reported by sync (and download), and kept */
    cfg.device = 0;
    assert_int_equal(G->create(&b2, &cfg), PI_OK);
    assert_int_equal(G->sync(b2), PI_OK);
    float one = 1.0f;
    float *dx;
    assert_int_equal(G->buf_alloc(b2, 64 * sizeof(float), (void **)&dx), PI_OK);
    struct pi_weight bad = {dx, PI_TYPE_Q8_1, 256, 1, 320};
    G->matmul(b2, &bad, dx, 1, dx);
    assert_int_equal(G->sync(b2), PI_ERR_UNSUPPORTED);
    assert_int_equal(G->download(b2, &one, dx, sizeof one), PI_ERR_UNSUPPORTED);
    G->buf_free(b2, dx);
    G->destroy(b2);
    G->destroy(NULL);
}

/* ---- --bench ----------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One queued op to time. */
struct bench_op {
    enum { B_MATMUL, B_MATMUL_T, B_ATTENTION } op;
    const struct pi_weight *w;
    struct pi_kv *kv;
    const float *x;
    int64_t n_tok, pos0;
    float *y;
};

static void bench_run(const struct bench_op *o) {
    switch (o->op) {
    case B_MATMUL:
        G->matmul(gb, o->w, o->x, o->n_tok, o->y);
        break;
    case B_MATMUL_T:
        G->matmul_t(gb, o->w, o->x, o->n_tok, o->y);
        break;
    case B_ATTENTION: {
        const struct pi_attn ao = {0.125f, 0.0f, 0, NULL};
        G->attention(gb, o->kv, 0, o->x, o->n_tok, o->pos0, &ao, o->y);
        break;
    }
    }
}

/* Seconds per call, after a warm-up, over at least 0.2 s of calls. */
static double bench_time(const struct bench_op *o) {
    bench_run(o);
    assert_int_equal(G->sync(gb), PI_OK);
    int reps = 0;
    const double t0 = now_s();
    do {
        for (int r = 0; r < 10; r++)
            bench_run(o);
        reps += 10;
        assert_int_equal(G->sync(gb), PI_OK);
    } while (now_s() - t0 < 0.2);
    return (now_s() - t0) / reps;
}

static void test_bench(void **state) {
    (void)state;
    static const uint32_t types[] = {PI_TYPE_F16,  PI_TYPE_Q8_0, PI_TYPE_Q4_0,      PI_TYPE_Q4_K,
                                     PI_TYPE_Q6_K, PI_TYPE_Q2_K, PI_TYPE_Q3_K,      PI_TYPE_ID_IQ4_NL,
                                     PI_TYPE_ID_IQ4_XS, PI_TYPE_MXFP4};
    const int64_t n_in = 4096, n_out = MAX_WIDTH;
    printf("\n%-6s %-9s %5s %10s %9s %9s\n", "type", "op", "n_tok", "us", "GB/s", "GFLOP/s");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        size_t rb;
        uint8_t *w = make_weights(types[ti], n_in, n_out, &rb);
        const double bytes = (double)rb * (double)n_out;
        void *dw = dev_from(w, rb * (size_t)n_out);
        float *x = rnd_floats((size_t)(MAX_TOK * n_out), 1.0f);
        float *dx = dev_from(x, (size_t)(MAX_TOK * n_out) * sizeof *x);
        float *dy = dev_alloc((size_t)(MAX_TOK * n_out) * sizeof *x);
        struct pi_weight wt = {dw, types[ti], n_in, n_out, rb};
        static const int64_t toks[] = {1, 8, MAX_TOK};
        for (int k = 0; k < 3; k++) {
            const int64_t n_tok = toks[k];
            const double flop = 2.0 * (double)n_in * (double)n_out * (double)n_tok;
            struct bench_op o = {B_MATMUL, &wt, NULL, dx, n_tok, 0, dy};
            double s = bench_time(&o);
            printf("%-6s %-9s %5lld %10.1f %9.0f %9.0f\n", pi_type_traits(types[ti])->name,
                   "matmul", (long long)n_tok, s * 1e6, bytes / s * 1e-9, flop / s * 1e-9);
            o.op = B_MATMUL_T;
            s = bench_time(&o);
            printf("%-6s %-9s %5lld %10.1f %9.0f %9.0f\n", pi_type_traits(types[ti])->name,
                   "matmul_t", (long long)n_tok, s * 1e6, bytes / s * 1e-9, flop / s * 1e-9);
        }
        G->buf_free(gb, dw);
        G->buf_free(gb, dx);
        G->buf_free(gb, dy);
        free(w);
        free(x);
    }
    /* attention: 32 heads over 8 K/V heads of 128, at the end of a 4096 context */
    const struct pi_kv_desc d = {1, 4096, 32, 8, 128, 128, PI_KV_F16, PI_KV_F16};
    struct pi_kv *kv;
    assert_int_equal(G->kv_create(gb, &d, &kv), PI_OK);
    float *kvh = rnd_floats((size_t)(MAX_TOK * 8 * 128), 1.0f);
    float *dkv = dev_from(kvh, (size_t)(MAX_TOK * 8 * 128) * sizeof *kvh);
    for (int64_t p = 0; p < d.n_ctx; p += MAX_TOK)
        G->kv_store(gb, kv, 0, p, MAX_TOK, dkv, dkv);
    float *q = rnd_floats((size_t)(MAX_TOK * 32 * 128), 1.0f);
    float *dq = dev_from(q, (size_t)(MAX_TOK * 32 * 128) * sizeof *q);
    float *dout = dev_alloc((size_t)(MAX_TOK * 32 * 128) * sizeof *q);
    static const int64_t toks[] = {1, MAX_TOK};
    for (int k = 0; k < 2; k++) {
        const int64_t n_tok = toks[k];
        const struct bench_op o = {B_ATTENTION, NULL, kv, dq, n_tok, d.n_ctx - n_tok, dout};
        const double s = bench_time(&o);
        const double bytes = (double)d.n_ctx * 8 * 128 * 2 * 2;
        printf("%-6s %-9s %5lld %10.1f %9.0f %9s  (ctx %lld)\n", "f16", "attention",
               (long long)n_tok, s * 1e6, bytes / s * 1e-9, "-", (long long)d.n_ctx);
    }
    G->kv_destroy(gb, kv);
    G->buf_free(gb, dkv);
    G->buf_free(gb, dq);
    G->buf_free(gb, dout);
    free(kvh);
    free(q);
}

/* ---- main ---------------------------------------------------------------------------- */

static void print_table(void) {
    printf("\n%-16s %8s %12s %12s\n", "op", "checks", "max |err|", "max err/tol");
    for (int i = 0; i < g_n_err; i++)
        printf("%-16s %8ld %12.3g %12.3g\n", g_err[i].op, g_err[i].checks, g_err[i].max_abs,
               g_err[i].max_rel);
}

int main(int argc, char **argv) {
    G = pi_backend_gpu();
    if (!G) {
        printf("SKIP: this library was built without a GPU backend\n");
        return 77;
    }
    struct pi_backend_config cfg = {&pi_default_allocator, 1, MAX_TOK, MAX_WIDTH, 1, 0};
    const int st = G->create(&gb, &cfg);
    if (st == PI_ERR_UNSUPPORTED) {
        printf("SKIP: the %s backend finds no usable device\n", G->name);
        return 77;
    }
    if (st != PI_OK) {
        printf("FAIL: %s backend create: %s\n", G->name, pi_status_str(st));
        return 1;
    }
    struct pi_device_info info;
    if (G->device_info(gb, &info) == PI_OK)
        printf("%s backend on %s, %.1f GiB (%.1f GiB free)\n", G->name, info.name,
               (double)info.mem_total / 1073741824.0, (double)info.mem_free / 1073741824.0);
    C = pi_backend_cpu();
    if (C->create(&cb, &cfg) != PI_OK) {
        printf("FAIL: cpu backend create\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contract),     cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_t),     cmocka_unit_test(test_get_rows),
        cmocka_unit_test(test_f16_patterns), cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),         cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_options),
        cmocka_unit_test(test_ffn_act),      cmocka_unit_test(test_add),
        cmocka_unit_test(test_layernorm),    cmocka_unit_test(test_add_rows),
        cmocka_unit_test(test_scale_softcap),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    print_table();
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        const struct CMUnitTest bench[] = {cmocka_unit_test(test_bench)};
        failed += cmocka_run_group_tests(bench, NULL, NULL);
    }
    C->destroy(cb);
    G->destroy(gb);
    return failed ? 1 : 0;
}
