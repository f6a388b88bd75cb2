/* Embeddings against Hugging Face transformers: the final hidden states
 * (last_hidden_state: after the output norm, before the LM head) of tiny random models
 * converted by llama.cpp's own converter, and their mean / first / last pooling, made
 * by tests/fixtures/make_embed_refs.py; the same states through pi_ctx_decode in one
 * call or in chunks, through pi_ctx_decode_batch with the sequences interleaved, with
 * PI_EMBD_ONLY (no LM head), and on a CPU device; the pooling type a file declares; the
 * API contract (arguments, states that no longer cover a sequence, params).
 *
 * Usage: test_embed MODEL.gguf HIDDEN.bin TOLERANCE POOLING [MODEL HIDDEN TOL POOLING ...]
 * HIDDEN.bin (little-endian): u32 n_seq, u32 n_embd, then per sequence u32 n_tok,
 *   i32 tokens[n_tok], f32 hidden[n_tok][n_embd], f32 mean[n_embd], f32 last[n_embd]
 *   (transformers in float64; mean and last pooled in float64 by numpy).
 * TOLERANCE: the largest |ours - reference| allowed, relative to max |reference| over
 *   the sequence (as test_forward's logits; contexts use f32_activations).
 * POOLING: the PI_POOL_* value pi_model_pooling must return, or -1 for none
 *   (PI_ERR_NOT_FOUND). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "powerinfer.h"

#define MAX_SEQ 8

struct seqref {
    uint32_t n_tok;
    int32_t *tokens;
    float *hidden; /* [n_tok][n_embd] */
    float *mean, *last;
};

struct ref {
    const char *model_path;
    double tol;
    int pooling;
    uint32_t n_seq, n_embd;
    struct seqref s[MAX_SEQ];
};

static struct ref g_refs[16];
static int g_n_refs;

static int read_all(FILE *fp, void *dst, size_t n) {
    return fread(dst, 4, n, fp) == n;
}

static int load_ref(struct ref *r, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -1;
    uint32_t hdr[2];
    int ok = fread(hdr, 4, 2, fp) == 2 && hdr[0] > 0 && hdr[0] <= MAX_SEQ && hdr[1] > 0 &&
             hdr[1] < (1u << 16);
    if (ok) {
        r->n_seq = hdr[0];
        r->n_embd = hdr[1];
    }
    const size_t E = ok ? r->n_embd : 0;
    for (uint32_t i = 0; ok && i < r->n_seq; i++) {
        struct seqref *s = &r->s[i];
        ok = fread(&s->n_tok, 4, 1, fp) == 1 && s->n_tok > 0 && s->n_tok < 4096;
        if (!ok)
            break;
        s->tokens = malloc(4 * (size_t)s->n_tok);
        s->hidden = malloc(4 * (size_t)s->n_tok * E);
        s->mean = malloc(4 * E);
        s->last = malloc(4 * E);
        ok = s->tokens && s->hidden && s->mean && s->last &&
             read_all(fp, s->tokens, s->n_tok) && read_all(fp, s->hidden, s->n_tok * E) &&
             read_all(fp, s->mean, E) && read_all(fp, s->last, E);
    }
    ok = ok && fgetc(fp) == EOF;
    fclose(fp);
    return ok ? 0 : -1;
}

/* max |a - b| / max |b| over n values */
static double rel_err(const float *a, const float *b, size_t n) {
    double md = 0.0, mb = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        md = d > md ? d : md;
        mb = fabs((double)b[i]) > mb ? fabs((double)b[i]) : mb;
    }
    return md / (mb > 0 ? mb : 1.0);
}

/* v scaled to unit L2 norm, into out (float64 arithmetic) */
static void unit(const float *v, size_t n, float *out) {
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (double)v[i] * (double)v[i];
    for (size_t i = 0; i < n; i++)
        out[i] = (float)((double)v[i] / sqrt(ss));
}

static pi_model *open_model(const struct ref *r) {
    pi_model *m = NULL;
    char err[256] = "";
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = err;
    p.errbuf_cap = sizeof err;
    if (pi_model_open(r->model_path, &p, &m) != PI_OK)
        fail_msg("%s: %s", r->model_path, err);
    assert_int_equal(pi_model_n_embd(m), r->n_embd);
    return m;
}

static pi_ctx *new_ctx(pi_model *m, uint32_t mode, uint32_t n_seq, uint32_t batch,
                       uint32_t device) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.f32_activations = 1;
    cp.n_ctx = 64;
    cp.n_batch = batch;
    cp.n_seq_max = n_seq;
    cp.embeddings = mode;
    cp.device = device;
    char err[256] = "";
    cp.errbuf = err;
    cp.errbuf_cap = sizeof err;
    pi_ctx *c = NULL;
    if (pi_ctx_create(m, &cp, &c) != PI_OK)
        fail_msg("pi_ctx_create: %s", err);
    return c;
}

static void check(const struct ref *r, const float *got, const float *want, size_t n,
                  const char *what, uint32_t seq, double *worst) {
    double e = rel_err(got, want, n);
    *worst = e > *worst ? e : *worst;
    if (e > r->tol)
        fail_msg("%s sequence %u: %s: relative error %.3g > %.3g", r->model_path, seq, what, e,
                 r->tol);
}

/* The pooled states of sequence `seq` of c against reference sequence s: mean, first
 * (CLS), last, raw and normalized. */
static void check_pooled(const struct ref *r, pi_ctx *c, int32_t seq, const struct seqref *s,
                         uint32_t si, double *worst) {
    const size_t E = r->n_embd;
    float *got = malloc(4 * E), *want = malloc(4 * E);
    const struct {
        int pool;
        const float *ref;
        const char *name;
    } k[] = {{PI_POOL_MEAN, s->mean, "mean"}, {PI_POOL_CLS, s->hidden, "cls"},
             {PI_POOL_LAST, s->last, "last"}};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        assert_int_equal(pi_ctx_embedding_pooled(c, seq, k[i].pool, 0, got, E), PI_OK);
        check(r, got, k[i].ref, E, k[i].name, si, worst);
        assert_int_equal(pi_ctx_embedding_pooled(c, seq, k[i].pool, 1, got, E), PI_OK);
        double ss = 0.0;
        for (size_t j = 0; j < E; j++)
            ss += (double)got[j] * (double)got[j];
        assert_true(fabs(sqrt(ss) - 1.0) < 1e-5);
        unit(k[i].ref, E, want);
        check(r, got, want, E, k[i].name, si, worst);
    }
    free(got);
    free(want);
}

/* One pi_ctx_decode per sequence: every token's state and the pooled ones. */
static void test_hidden_states(void **state) {
    (void)state;
    for (int i = 0; i < g_n_refs; i++) {
        const struct ref *r = &g_refs[i];
        pi_model *m = open_model(r);
        pi_ctx *c = new_ctx(m, PI_EMBD_ON, 1, 0, PI_DEVICE_NONE);
        const size_t E = r->n_embd;
        double worst = 0.0, worst_pool = 0.0;
        for (uint32_t q = 0; q < r->n_seq; q++) {
            const struct seqref *s = &r->s[q];
            assert_int_equal(pi_ctx_reset(c), PI_OK);
            assert_int_equal(pi_ctx_decode(c, s->tokens, s->n_tok), PI_OK);
            assert_non_null(pi_ctx_logits(c));
            float *all = malloc(4 * E * s->n_tok);
            for (uint32_t t = 0; t < s->n_tok; t++) {
                const float *h = pi_ctx_embedding(c, t);
                assert_non_null(h);
                memcpy(all + t * E, h, 4 * E);
            }
            assert_null(pi_ctx_embedding(c, s->n_tok));
            check(r, all, s->hidden, E * s->n_tok, "per-token states", q, &worst);
            free(all);
            check_pooled(r, c, 0, s, q, &worst_pool);
        }
        printf("# %s: %u sequences, per-token states worst relative error %.3g, pooled %.3g "
               "(tolerance %.3g)\n", r->model_path, r->n_seq, worst, worst_pool, r->tol);
        pi_ctx_destroy(c);
        pi_model_close(m);
    }
}

/* Each sequence in three pi_ctx_decode calls (steps of 5 tokens), then all of them
 * interleaved in one pi_ctx_decode_batch with an entry asking for logits here and
 * there: the pooled sums cover every call, and each sequence pools only its own. */
static void test_chunked_and_batched(void **state) {
    (void)state;
    for (int i = 0; i < g_n_refs; i++) {
        const struct ref *r = &g_refs[i];
        pi_model *m = open_model(r);
        const size_t E = r->n_embd;
        double worst = 0.0;
        pi_ctx *c = new_ctx(m, PI_EMBD_ON, 1, 5, PI_DEVICE_NONE);
        for (uint32_t q = 0; q < r->n_seq; q++) {
            const struct seqref *s = &r->s[q];
            assert_int_equal(pi_ctx_reset(c), PI_OK);
            uint32_t a = s->n_tok / 3, b = 2 * s->n_tok / 3;
            if (a > 0)
                assert_int_equal(pi_ctx_decode(c, s->tokens, a), PI_OK);
            if (b > a)
                assert_int_equal(pi_ctx_decode(c, s->tokens + a, b - a), PI_OK);
            assert_int_equal(pi_ctx_decode(c, s->tokens + b, s->n_tok - b), PI_OK);
            /* the last call's tokens */
            for (uint32_t t = b; t < s->n_tok; t++)
                check(r, pi_ctx_embedding(c, t - b), s->hidden + t * E, E, "chunked state", q,
                      &worst);
            check_pooled(r, c, 0, s, q, &worst);
        }
        pi_ctx_destroy(c);

        c = new_ctx(m, PI_EMBD_ON, r->n_seq, 7, PI_DEVICE_NONE);
        size_t n = 0;
        for (uint32_t q = 0; q < r->n_seq; q++)
            n += r->s[q].n_tok;
        pi_batch_entry *e = malloc(n * sizeof *e);
        uint32_t *at = calloc(r->n_seq, sizeof *at);
        size_t k = 0;
        while (k < n)
            for (uint32_t q = 0; q < r->n_seq; q++)
                if (at[q] < r->s[q].n_tok) {
                    e[k] = (pi_batch_entry){r->s[q].tokens[at[q]], (int32_t)q, -1, k % 3 == 0};
                    at[q]++;
                    k++;
                }
        assert_int_equal(pi_ctx_decode_batch(c, e, n), PI_OK);
        memset(at, 0, r->n_seq * sizeof *at);
        for (k = 0; k < n; k++) {
            const uint32_t q = (uint32_t)e[k].seq;
            check(r, pi_ctx_embedding(c, k), r->s[q].hidden + (size_t)at[q]++ * E, E,
                  "batched state", q, &worst);
        }
        for (uint32_t q = 0; q < r->n_seq; q++)
            check_pooled(r, c, (int32_t)q, &r->s[q], q, &worst);
        printf("# %s: chunked and batched, worst relative error %.3g\n", r->model_path, worst);
        free(e);
        free(at);
        pi_ctx_destroy(c);
        pi_model_close(m);
    }
}

/* PI_EMBD_ONLY computes no logits and the same states bit for bit; so does a CPU
 * device holding everything (the states come back from the device). */
static void test_only_and_device(void **state) {
    (void)state;
    for (int i = 0; i < g_n_refs; i++) {
        const struct ref *r = &g_refs[i];
        const struct seqref *s = &r->s[0];
        const size_t E = r->n_embd;
        pi_model *m = open_model(r);
        float *want = malloc(4 * E * s->n_tok), *pool = malloc(4 * E), *got = malloc(4 * E);
        pi_ctx *c = new_ctx(m, PI_EMBD_ON, 1, 0, PI_DEVICE_NONE);
        assert_int_equal(pi_ctx_decode(c, s->tokens, s->n_tok), PI_OK);
        for (uint32_t t = 0; t < s->n_tok; t++)
            memcpy(want + t * E, pi_ctx_embedding(c, t), 4 * E);
        assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_MEAN, 1, pool, E), PI_OK);
        pi_ctx_destroy(c);
        const struct {
            uint32_t mode, device;
            const char *name;
        } v[] = {{PI_EMBD_ONLY, PI_DEVICE_NONE, "PI_EMBD_ONLY"},
                 {PI_EMBD_ON, PI_DEVICE_CPU, "a CPU device"},
                 {PI_EMBD_ONLY, PI_DEVICE_CPU, "PI_EMBD_ONLY on a CPU device"}};
        for (size_t j = 0; j < sizeof v / sizeof *v; j++) {
            c = new_ctx(m, v[j].mode, 1, 0, v[j].device);
            assert_int_equal(pi_ctx_decode(c, s->tokens, s->n_tok), PI_OK);
            if (v[j].mode == PI_EMBD_ONLY) {
                assert_null(pi_ctx_logits(c));
                assert_null(pi_ctx_batch_logits(c, s->n_tok - 1));
            } else {
                assert_non_null(pi_ctx_logits(c));
            }
            for (uint32_t t = 0; t < s->n_tok; t++)
                if (memcmp(want + t * E, pi_ctx_embedding(c, t), 4 * E) != 0)
                    fail_msg("%s: %s: token %u's state differs", r->model_path, v[j].name, t);
            assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_MEAN, 1, got, E), PI_OK);
            assert_memory_equal(got, pool, 4 * E);
            pi_ctx_destroy(c);
        }
        free(want);
        free(pool);
        free(got);
        pi_model_close(m);
    }
}

static void test_pooling_type(void **state) {
    (void)state;
    for (int i = 0; i < g_n_refs; i++) {
        const struct ref *r = &g_refs[i];
        pi_model *m = open_model(r);
        assert_int_equal(pi_model_pooling(m), r->pooling < 0 ? PI_ERR_NOT_FOUND : r->pooling);
        pi_model_close(m);
    }
    assert_int_equal(pi_model_pooling(NULL), PI_ERR_INVALID_ARG);
}

/* Arguments, and pooled sums that no longer cover their sequence. */
static void test_contract(void **state) {
    (void)state;
    const struct ref *r = &g_refs[0];
    const struct seqref *s = &r->s[0];
    const size_t E = r->n_embd;
    pi_model *m = open_model(r);
    float *out = malloc(4 * E), *b = malloc(4 * E);

    pi_ctx *c = new_ctx(m, PI_EMBD_OFF, 1, 0, PI_DEVICE_NONE);
    assert_int_equal(pi_ctx_decode(c, s->tokens, s->n_tok), PI_OK);
    assert_null(pi_ctx_embedding(c, 0));
    assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_MEAN, 1, out, E), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(pi_ctx_errmsg(c), "PI_EMBD_OFF"));
    pi_ctx_destroy(c);

    assert_null(pi_ctx_embedding(NULL, 0));
    assert_int_equal(pi_ctx_embedding_pooled(NULL, 0, PI_POOL_MEAN, 1, out, E),
                     PI_ERR_INVALID_ARG);
    c = new_ctx(m, PI_EMBD_ON, 2, 0, PI_DEVICE_NONE);
    assert_null(pi_ctx_embedding(c, 0));
    assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_MEAN, 1, out, E), PI_ERR_RANGE);
    assert_non_null(strstr(pi_ctx_errmsg(c), "empty"));
    assert_int_equal(pi_ctx_decode(c, s->tokens, s->n_tok), PI_OK);
    assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_MEAN, 1, NULL, E), PI_ERR_INVALID_ARG);
    const int bad_pool[] = {PI_POOL_NONE, PI_POOL_RANK, -1, 99};
    for (size_t i = 0; i < sizeof bad_pool / sizeof *bad_pool; i++)
        assert_int_equal(pi_ctx_embedding_pooled(c, 0, bad_pool[i], 1, out, E),
                         PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_embedding_pooled(c, 2, PI_POOL_MEAN, 1, out, E), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_embedding_pooled(c, -1, PI_POOL_MEAN, 1, out, E), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_MEAN, 1, out, E - 1), PI_ERR_RANGE);
    assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_MEAN, 1, out, E), PI_OK);

    /* a copy pools the same; the state of a shortened or loaded sequence is refused */
    assert_int_equal(pi_ctx_seq_copy(c, 0, 1), PI_OK);
    assert_int_equal(pi_ctx_embedding_pooled(c, 1, PI_POOL_MEAN, 1, b, E), PI_OK);
    assert_memory_equal(out, b, 4 * E);
    size_t size = 0;
    assert_int_equal(pi_ctx_state_save(c, 0, NULL, 0, &size), PI_ERR_RANGE);
    void *st = malloc(size);
    assert_int_equal(pi_ctx_state_save(c, 0, st, size, &size), PI_OK);
    assert_int_equal(pi_ctx_state_load(c, 1, st, size), PI_OK);
    assert_int_equal(pi_ctx_embedding_pooled(c, 1, PI_POOL_MEAN, 1, b, E), PI_ERR_RANGE);
    assert_non_null(strstr(pi_ctx_errmsg(c), "position 0"));
    assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_MEAN, 1, b, E), PI_OK);
    free(st);
    assert_int_equal(pi_ctx_truncate(c, s->n_tok - 1), PI_OK);
    assert_null(pi_ctx_embedding(c, 0));
    assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_LAST, 1, b, E), PI_ERR_RANGE);
    assert_int_equal(pi_ctx_decode(c, s->tokens + s->n_tok - 1, 1), PI_OK);
    assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_LAST, 1, b, E), PI_ERR_RANGE);
    /* starting again from position 0 pools afresh */
    assert_int_equal(pi_ctx_seq_clear(c, 0), PI_OK);
    assert_int_equal(pi_ctx_decode(c, s->tokens, s->n_tok), PI_OK);
    assert_int_equal(pi_ctx_embedding_pooled(c, 0, PI_POOL_MEAN, 1, b, E), PI_OK);
    assert_memory_equal(out, b, 4 * E);
    pi_ctx_destroy(c);

    /* params: bad values refused; a caller built before the field reads as PI_EMBD_OFF */
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    assert_int_equal(cp.embeddings, PI_EMBD_OFF);
    cp.embeddings = PI_EMBD_ONLY + 1;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    cp.embeddings = PI_EMBD_ON;
    cp.reserved2 = 1;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_ERR_INVALID_ARG);
    cp.reserved2 = 0;
    cp.struct_size = (uint32_t)offsetof(pi_ctx_params, embeddings);
    cp.n_ctx = 64;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    assert_int_equal(pi_ctx_decode(c, s->tokens, 2), PI_OK);
    assert_null(pi_ctx_embedding(c, 0));
    pi_ctx_destroy(c);
    free(out);
    free(b);
    pi_model_close(m);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i += 4) {
        if (i + 3 >= argc || g_n_refs == 16) {
            fprintf(stderr, "bad arguments at %s (MODEL HIDDEN TOL POOLING, at most 16)\n",
                    argv[i]);
            return 99;
        }
        struct ref *r = &g_refs[g_n_refs];
        r->model_path = argv[i];
        r->tol = atof(argv[i + 2]);
        r->pooling = atoi(argv[i + 3]);
        if (load_ref(r, argv[i + 1]) != 0) {
            fprintf(stderr, "cannot read %s\n", argv[i + 1]);
            return 99;
        }
        g_n_refs++;
    }
    if (g_n_refs == 0) {
        fprintf(stderr, "usage: %s MODEL HIDDEN TOL POOLING [...]\n", argv[0]);
        return 99;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hidden_states),
        cmocka_unit_test(test_chunked_and_batched),
        cmocka_unit_test(test_only_and_device),
        cmocka_unit_test(test_pooling_type),
        cmocka_unit_test(test_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
