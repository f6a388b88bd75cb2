/* A PowerInfer (PWRI) file runs dense too: its ffn_down_t is the transpose of
 * ffn_down. Build a dense bamboo model, rewrite it as a PWRI file with every down
 * projection transposed (plus predictors, which dense mode ignores), and check that
 * both give the same logits. This exercises the backend's matmul_t path. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "model/gguf.h"
#include "powerinfer.h"
#include "runtime/types.h"
#include "testfile.h"
#include "testmodel.h"

/* Copy `dense` to `sparse` as PWRI: F32 ffn_down {F, E} becomes ffn_down_t {E, F}. */
static void to_pwri(const char *dense, const char *sparse, int64_t rank) {
    size_t size;
    uint8_t *buf = tf_slurp(dense, &size);
    struct gguf_file f;
    struct pi_error err;
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &err), PI_OK);
    struct gguf_writer *w;
    assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
    for (uint64_t i = 0; i < f.n_kv; i++) {
        const struct gguf_kv *kv = &f.kv[i];
        if (kv->type == PI_META_STRING) {
            const char *s;
            uint64_t len;
            gguf_kv_str(&f, kv, 0, &s, &len);
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%.*s", (int)len, s);
            assert_int_equal(gguf_writer_add_string(w, kv->key, tmp), PI_OK);
        } else if (kv->type == PI_META_ARRAY) {
            continue; /* the tokens: not needed */
        } else {
            assert_int_equal(gguf_writer_add_scalar(w, kv->key, kv->type, f.base + kv->off),
                             PI_OK);
        }
    }
    uint32_t rng = 99;
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const struct gguf_tensor *t = &f.tensors[i];
        const char *dn = strstr(t->name, ".ffn_down.weight");
        if (!dn) {
            assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne,
                                                    t->data),
                             PI_OK);
            continue;
        }
        assert_int_equal(t->type, PI_TYPE_F32);
        const int64_t F = t->ne[0], E = t->ne[1];
        const float *src = (const float *)(const void *)t->data; /* [E][F] */
        float *tr = malloc(sizeof *tr * (size_t)(E * F));           /* [F][E] */
        for (int64_t e = 0; e < E; e++)
            for (int64_t r = 0; r < F; r++)
                tr[r * E + e] = src[e * F + r];
        char name[96];
        int layer = atoi(t->name + 4);
        snprintf(name, sizeof name, "blk.%d.ffn_down_t.weight", layer);
        int64_t ne[2] = {E, F};
        assert_int_equal(gguf_writer_add_tensor(w, name, PI_TYPE_F32, 2, ne, tr), PI_OK);
        free(tr);
        float *fc = malloc(sizeof *fc * (size_t)(rank * (E > F ? E : F)));
        for (int64_t k = 0; k < rank * (E > F ? E : F); k++) {
            rng = rng * 1664525u + 1013904223u;
            fc[k] = (float)(rng >> 8) / 16777216.0f - 0.5f;
        }
        int64_t ne1[2] = {E, rank}, ne2[2] = {rank, F};
        snprintf(name, sizeof name, "blk.%d.fc1.weight", layer);
        assert_int_equal(gguf_writer_add_tensor(w, name, PI_TYPE_F32, 2, ne1, fc), PI_OK);
        snprintf(name, sizeof name, "blk.%d.fc2.weight", layer);
        assert_int_equal(gguf_writer_add_tensor(w, name, PI_TYPE_F32, 2, ne2, fc), PI_OK);
        free(fc);
    }
    assert_int_equal(gguf_writer_write_file(w, sparse, GGUF_MAGIC_PWRI, NULL), PI_OK);
    gguf_writer_destroy(w);
    gguf_close(&f);
    free(buf);
}

static void logits_of(const char *path, const int32_t *toks, size_t n, float *out, int64_t nv,
                      int expect_sparse) {
    pi_model *m;
    char err[256] = "";
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = err;
    p.errbuf_cap = sizeof err;
    if (pi_model_open(path, &p, &m) != PI_OK)
        fail_msg("%s: %s", path, err);
    assert_int_equal(pi_model_is_sparse(m), expect_sparse);
    pi_ctx *c;
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 32;
    cp.n_threads = 2;
    cp.sparse_mode = PI_SPARSE_DENSE; /* PowerInfer files default to the predictor */
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    assert_int_equal(pi_ctx_sparse_mode(c), PI_SPARSE_DENSE);
    assert_int_equal(pi_ctx_decode(c, toks, n - 1), PI_OK); /* prefill path */
    assert_int_equal(pi_ctx_decode(c, toks + n - 1, 1), PI_OK); /* decode path */
    memcpy(out, pi_ctx_logits(c), sizeof *out * (size_t)nv);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

static void test_pwri_runs_dense(void **state) {
    (void)state;
    char dense[256], sparse[256];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dense, sizeof dense, "%s/pi_pwri_dense_%d.gguf", tmp, (int)getpid());
    snprintf(sparse, sizeof sparse, "%s/pi_pwri_sparse_%d.gguf", tmp, (int)getpid());
    struct tm_spec s;
    tm_default(&s);
    s.arch = "bamboo"; /* ReLU on gate and up, dense and sparse alike */
    s.with_tokens = 0;
    assert_int_equal(tm_write(&s, dense), PI_OK);
    to_pwri(dense, sparse, 8);
    const int32_t toks[7] = {1, 5, 9, 2, 33, 17, 4};
    float a[40], b[40];
    logits_of(dense, toks, 7, a, 40, 0);
    logits_of(sparse, toks, 7, b, 40, 1);
    double md = 0, mx = 0;
    for (int i = 0; i < 40; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)a[i]));
    }
    printf("# dense vs PWRI (ffn_down_t) logits: max diff %.3g, max |logit| %.3g\n", md, mx);
    assert_true(mx > 0.0);
    assert_true(md <= 1e-5 * (mx > 1 ? mx : 1));
    remove(dense);
    remove(sparse);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pwri_runs_dense)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
