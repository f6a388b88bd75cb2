#define _POSIX_C_SOURCE 200809L
/* Several sequences in one context, and state save/restore (random test models):
 *  - a batch interleaving three sequences gives each the logits it gets alone, for a
 *    dense and a PowerInfer model, on the CPU and split with a CPU device;
 *  - seq_copy continues identically; seq_remove of a tail exactly, of a middle range
 *    close to a context that never saw the range (random weights barely attend: a real
 *    model differs more, see the header); keep, clear, truncate; bad sequence ids
 *    are refused with a message naming the call;
 *  - every bad batch fails with a message and changes nothing (lengths, logits, the
 *    next logits), also an aborted one and every allocation failure;
 *  - a state round trip (whole context, one sequence into another, memory and file)
 *    reproduces the next logits bit for bit; truncated, corrupted, other-model and
 *    misplaced states are refused and leave the context as it was. */
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

#include "failalloc.h"
#include "model/model.h"
#include "powerinfer.h"
#include "testmodel.h"
#include "portable.h" /* last: Windows shims of mkdir, mkdtemp */

enum { MAXV = 64 };
static char g_dir[256];
static int g_gpu; /* --gpu: the device of split contexts is the GPU (tests/gpu/run.sh) */

static pi_model *make_model(const char *name, const char *arch, int sparse, uint32_t wtype) {
    char p[300];
    snprintf(p, sizeof p, "%s/%s.gguf", g_dir, name);
    assert_int_equal(tm_write_split(p, arch, sparse, wtype, 5), PI_OK);
    pi_model *m;
    assert_int_equal(pi_model_open(p, NULL, &m), PI_OK);
    return m;
}

static pi_ctx *make_ctx(pi_model *m, uint32_t n_seq, int device, uint32_t n_batch) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 40;
    cp.n_threads = 2;
    cp.n_batch = n_batch;
    cp.n_seq_max = n_seq;
    cp.f32_activations = (uint32_t)g_gpu; /* a GPU computes with float activations */
    char err[256] = "";
    cp.errbuf = err;
    cp.errbuf_cap = sizeof err;
    if (device) {
        cp.device = g_gpu ? PI_DEVICE_GPU : PI_DEVICE_CPU;
        pi_plan *all;
        if (pi_model_plan(m, &cp, &all) != PI_OK)
            exit(g_gpu ? 77 : 1);
        cp.device_budget = pi_plan_bytes(all, PI_PLAN_N_PARTS) -
                           pi_plan_bytes(all, PI_PLAN_NEURONS) / 2;
        pi_plan_free(all);
    }
    pi_ctx *c;
    if (pi_ctx_create(m, &cp, &c) != PI_OK) {
        if (g_gpu && device)
            exit(77); /* no GPU */
        fail_msg("pi_ctx_create: %s", err);
    }
    if (device) { /* some neurons on the device, some on the host */
        const pi_plan *p = pi_ctx_plan(c);
        int64_t on = 0;
        for (int64_t l = 0; l < pi_plan_n_layer(p); l++)
            on += pi_plan_layer_neurons(p, l, NULL, 0);
        assert_true(on > 0 && on < pi_plan_n_layer(p) * pi_plan_n_ff(p));
    }
    return c;
}

static double rel(const float *a, const float *b, int64_t n) {
    double mx = 1e-6, d = 0.0;
    for (int64_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(a[i]));
        d = fmax(d, fabs((double)a[i] - b[i]));
    }
    return d / mx;
}

static const int32_t P[3][6] = {{1, 5, 9, 2, 7, 3}, {4, 4, 8, 1}, {11, 2, 30, 6, 6}};
static const int PN[3] = {6, 4, 5};

/* Logits of every prompt token of sequence s decoded alone (one token at a time). */
static void alone(pi_model *m, int s, float out[6][MAXV]) {
    pi_ctx *c = make_ctx(m, 1, 0, 8);
    const int64_t V = pi_model_n_vocab(m);
    for (int i = 0; i < PN[s]; i++) {
        assert_int_equal(pi_ctx_decode(c, &P[s][i], 1), PI_OK);
        memcpy(out[i], pi_ctx_logits(c), (size_t)V * sizeof(float));
    }
    pi_ctx_destroy(c);
}

static void interleaved(pi_model *m, int device, uint32_t n_batch) {
    const int64_t V = pi_model_n_vocab(m);
    float ref[3][6][MAXV];
    for (int s = 0; s < 3; s++)
        alone(m, s, ref[s]);
    pi_ctx *c = make_ctx(m, 3, device, n_batch);
    /* round-robin: seq 0 tok 0, seq 1 tok 0, seq 2 tok 0, seq 0 tok 1, ... with runs of
     * two tokens of seq 0 to mix run lengths */
    pi_batch_entry e[32];
    int at[32][2], n = 0;
    int next[3] = {0, 0, 0};
    while (next[0] < PN[0] || next[1] < PN[1] || next[2] < PN[2]) {
        for (int s = 0; s < 3; s++)
            for (int k = 0; k < (s == 0 ? 2 : 1) && next[s] < PN[s]; k++) {
                e[n] = (pi_batch_entry){P[s][next[s]], s, k ? -1 : next[s], 1};
                at[n][0] = s;
                at[n][1] = next[s]++;
                n++;
            }
    }
    assert_int_equal(pi_ctx_decode_batch(c, e, (size_t)n), PI_OK);
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        const float *l = pi_ctx_batch_logits(c, (size_t)i);
        assert_non_null(l);
        worst = fmax(worst, rel(ref[at[i][0]][at[i][1]], l, V));
    }
    print_message("# interleaved (device %d, n_batch %u): worst %.2g\n", device, n_batch, worst);
    assert_true(worst < 1e-4);
    for (int s = 0; s < 3; s++)
        assert_int_equal(pi_ctx_seq_len(c, s), PN[s]);
    assert_null(pi_ctx_batch_logits(c, (size_t)n));
    pi_ctx_destroy(c);
}

static void test_interleaved(void **state) {
    (void)state;
    pi_model *d = make_model("b-dense", "llama", 0, PI_TYPE_Q8_0);
    pi_model *s = make_model("b-sparse", "llama", 1, PI_TYPE_Q4_0);
    for (int dev = 0; dev <= 1; dev++)
        for (uint32_t nb = 4; nb <= 32; nb *= 8) {
            interleaved(d, dev, nb);
            interleaved(s, dev, nb);
        }
    pi_model_close(d);
    pi_model_close(s);
}

/* Decode `tok` into seq and return its logits in out. */
static void step1(pi_ctx *c, int32_t seq, int32_t tok, float *out, int64_t V) {
    pi_batch_entry e = {tok, seq, -1, 1};
    assert_int_equal(pi_ctx_decode_batch(c, &e, 1), PI_OK);
    memcpy(out, pi_ctx_batch_logits(c, 0), (size_t)V * sizeof(float));
}

static void test_seq_ops(void **state) {
    (void)state;
    pi_model *m = make_model("b-ops", "llama", 1, PI_TYPE_F16);
    const int64_t V = pi_model_n_vocab(m);
    pi_ctx *c = make_ctx(m, 4, 0, 16);
    float a[MAXV], b[MAXV];
    /* copy: a shared prompt continued two ways */
    pi_batch_entry e[6];
    for (int i = 0; i < 6; i++)
        e[i] = (pi_batch_entry){P[0][i], 0, i, i == 5};
    assert_int_equal(pi_ctx_decode_batch(c, e, 6), PI_OK);
    assert_int_equal(pi_ctx_seq_copy(c, 0, 2), PI_OK);
    assert_int_equal(pi_ctx_seq_len(c, 2), 6);
    step1(c, 0, 13, a, V);
    step1(c, 2, 13, b, V);
    assert_memory_equal(a, b, (size_t)V * sizeof(float));
    /* remove a middle range: close to never having seen it */
    pi_ctx *f = make_ctx(m, 1, 0, 16);
    const int32_t fresh[] = {P[0][0], P[0][1], P[0][4], P[0][5], 13, 17};
    assert_int_equal(pi_ctx_decode(f, fresh, 6), PI_OK);
    assert_int_equal(pi_ctx_seq_remove(c, 0, 2, 4), PI_OK); /* 1 5 [9 2] 7 3 13 */
    assert_int_equal(pi_ctx_seq_len(c, 0), 5);
    step1(c, 0, 17, a, V);
    const double d = rel(pi_ctx_logits(f), a, V);
    print_message("# seq_remove of a middle range: %.2g of max |logit| from a fresh context\n", d);
    assert_true(d < 2e-2);
    /* a suffix, and the bad ranges */
    assert_int_equal(pi_ctx_seq_remove(c, 0, 3, -1), PI_OK);
    assert_int_equal(pi_ctx_seq_len(c, 0), 3);
    assert_int_equal(pi_ctx_seq_remove(c, 0, 2, 9), PI_ERR_RANGE);
    assert_int_equal(pi_ctx_seq_remove(c, 0, 3, 2), PI_ERR_RANGE);
    assert_int_equal(pi_ctx_seq_remove(c, 9, 0, 1), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(pi_ctx_errmsg(c), "pi_ctx_seq_remove: sequence 9 is outside"));
    assert_int_equal(pi_ctx_seq_copy(c, 0, -2), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(pi_ctx_errmsg(c), "pi_ctx_seq_copy: sequence -2 is outside"));
    assert_int_equal(pi_ctx_seq_keep(c, 99), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(pi_ctx_errmsg(c), "pi_ctx_seq_keep: sequence 99"));
    assert_int_equal(pi_ctx_seq_clear(c, -3), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(pi_ctx_errmsg(c), "pi_ctx_seq_clear: sequence -3"));
    size_t ssz;
    assert_int_equal(pi_ctx_state_save(c, 7, NULL, 0, &ssz), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(pi_ctx_errmsg(c), "pi_ctx_state_save: sequence 7"));
    assert_int_equal(pi_ctx_truncate(c, -1), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(pi_ctx_errmsg(c), "negative"));
    assert_int_equal(pi_ctx_seq_len(c, 0), 3);
    /* keep and clear */
    assert_int_equal(pi_ctx_seq_keep(c, 2), PI_OK);
    assert_int_equal(pi_ctx_seq_len(c, 0), 0);
    assert_int_equal(pi_ctx_seq_len(c, 2), 7);
    assert_int_equal(pi_ctx_seq_clear(c, 2), PI_OK);
    assert_int_equal(pi_ctx_seq_len(c, 2), 0);
    assert_int_equal(pi_ctx_seq_clear(c, 4), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_seq_copy(c, 0, 4), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_seq_len(c, -1), -1);
    assert_int_equal(pi_ctx_n_seq_max(c), 4);
    pi_ctx_destroy(f);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

/* pi_sample_logits: each entry of a batch sampled with its own sampler; greedy picks
 * the arg max, as pi_sample does on the context's logits. */
static void test_sample_logits(void **state) {
    (void)state;
    pi_model *m = make_model("b-sample", "llama", 0, PI_TYPE_F16);
    const int64_t V = pi_model_n_vocab(m);
    pi_ctx *c = make_ctx(m, 2, 0, 8);
    pi_batch_entry e[2] = {{3, 0, -1, 1}, {9, 1, -1, 1}};
    assert_int_equal(pi_ctx_decode_batch(c, e, 2), PI_OK);
    pi_sampler_params sp;
    pi_sampler_default_params(&sp);
    sp.temperature = 0.0f;
    pi_sampler *s;
    assert_int_equal(pi_sampler_create(m, &sp, &s), PI_OK);
    for (int i = 0; i < 2; i++) {
        const float *l = pi_ctx_batch_logits(c, (size_t)i);
        int32_t t = -1, best = 0;
        for (int64_t k = 1; k < V; k++)
            if (l[k] > l[best])
                best = (int32_t)k;
        assert_int_equal(pi_sample_logits(s, l, V, &t), PI_OK);
        assert_int_equal(t, best);
    }
    int32_t t0, t1;
    assert_int_equal(pi_sample(s, c, &t0), PI_OK); /* the last entry's logits */
    assert_int_equal(pi_sample_logits(s, pi_ctx_batch_logits(c, 1), V, &t1), PI_OK);
    assert_int_equal(t0, t1);
    assert_int_equal(pi_sample_logits(s, pi_ctx_batch_logits(c, 0), V - 1, &t0),
                     PI_ERR_INVALID_ARG);
    assert_int_equal(pi_sample_logits(s, NULL, V, &t0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_sample_logits(NULL, pi_ctx_batch_logits(c, 0), V, &t0),
                     PI_ERR_INVALID_ARG);
    pi_sampler_destroy(s);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

static int abort_now(void *user) {
    int *n = user;
    return ++*n > 1; /* after the first layer */
}

static void test_bad_batches(void **state) {
    (void)state;
    pi_model *m = make_model("b-bad", "llama", 0, PI_TYPE_F32);
    const int64_t V = pi_model_n_vocab(m);
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 8;
    cp.n_seq_max = 2;
    int calls = 0;
    cp.abort_user = &calls;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    pi_batch_entry ok[2] = {{3, 0, 0, 1}, {4, 1, 0, 1}};
    assert_int_equal(pi_ctx_decode_batch(c, ok, 2), PI_OK);
    float before[MAXV];
    memcpy(before, pi_ctx_batch_logits(c, 1), (size_t)V * sizeof(float));
    const pi_batch_entry bad[][2] = {
        {{3, 0, -1, 1}, {V, 1, -1, 1}},     /* token outside the vocabulary */
        {{3, 0, -1, 1}, {3, 2, -1, 1}},     /* sequence outside 0..1 */
        {{3, 0, 5, 1}, {3, 1, -1, 1}},      /* not the next position */
        {{3, 0, 1, 1}, {3, 0, 1, 1}},       /* a position twice */
        {{-1, 0, -1, 1}, {3, 1, -1, 1}},    /* negative token */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(pi_ctx_decode_batch(c, bad[i], 2), PI_ERR_INVALID_ARG);
        assert_true(strlen(pi_ctx_errmsg(c)) > 0);
    }
    assert_int_equal(pi_ctx_decode_batch(c, NULL, 2), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_decode_batch(c, ok, 0), PI_ERR_INVALID_ARG);
    pi_batch_entry many[8];
    for (int i = 0; i < 8; i++)
        many[i] = (pi_batch_entry){1, 0, -1, 0};
    assert_int_equal(pi_ctx_decode_batch(c, many, 8), PI_ERR_RANGE); /* 1 + 8 > 8 */
    /* aborted half-way: nothing changes */
    cp.abort_fn = abort_now;
    pi_ctx *c2;
    assert_int_equal(pi_ctx_create(m, &cp, &c2), PI_OK);
    calls = -1000;
    assert_int_equal(pi_ctx_decode_batch(c2, ok, 2), PI_OK);
    calls = 0;
    pi_batch_entry more[2] = {{9, 0, -1, 1}, {9, 1, -1, 1}};
    assert_int_equal(pi_ctx_decode_batch(c2, more, 2), PI_ERR_ABORTED);
    assert_int_equal(pi_ctx_seq_len(c2, 0), 1);
    assert_int_equal(pi_ctx_seq_len(c2, 1), 1);
    assert_memory_equal(pi_ctx_batch_logits(c2, 1), before, (size_t)V * sizeof(float));
    /* the failures left c as it was: the same next logits as the aborted context's */
    calls = -1000;
    assert_int_equal(pi_ctx_decode_batch(c, more, 2), PI_OK);
    assert_int_equal(pi_ctx_decode_batch(c2, more, 2), PI_OK);
    assert_memory_equal(pi_ctx_batch_logits(c, 1), pi_ctx_batch_logits(c2, 1),
                        (size_t)V * sizeof(float));
    pi_ctx_destroy(c2);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

/* Every allocation of a batch decode failing in turn: NOMEM, nothing changed. */
static void test_batch_alloc_failure(void **state) {
    (void)state;
    char p[300];
    snprintf(p, sizeof p, "%s/b-alloc.gguf", g_dir);
    struct tm_spec s;
    tm_default(&s);
    s.sparse = 1;
    assert_int_equal(tm_write(&s, p), PI_OK);
    struct failalloc fa;
    struct pi_allocator a = failalloc_make(&fa, 0);
    pi_model *m;
    assert_int_equal(pi_model_open_with(p, NULL, &a, &m), PI_OK);
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 16;
    cp.n_seq_max = 3;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    const long base = fa.live;
    pi_batch_entry e[5] = {{1, 0, -1, 1}, {2, 1, -1, 1}, {3, 2, -1, 1}, {4, 0, -1, 1},
                           {5, 1, -1, 1}};
    long n;
    for (n = 1; n < 1000; n++) {
        fa.fail_at = fa.count + n;
        int st = pi_ctx_decode_batch(c, e, 5);
        fa.fail_at = 0;
        if (st == PI_OK)
            break;
        assert_int_equal(st, PI_ERR_NOMEM);
        assert_int_equal(pi_ctx_seq_len(c, 0), 0);
        assert_true(fa.live <= base + 2); /* at most the batch's logit buffers, kept */
    }
    assert_true(n > 1);
    assert_int_equal(pi_ctx_seq_len(c, 0), 2);
    for (n = 1; n < 1000; n++) { /* a state save to a file, then its load */
        char sp[320];
        snprintf(sp, sizeof sp, "%s/alloc.state", g_dir);
        fa.fail_at = fa.count + n;
        int st = pi_ctx_state_save_file(c, -1, sp);
        if (st == PI_OK)
            st = pi_ctx_state_load_file(c, -1, sp);
        fa.fail_at = 0;
        if (st == PI_OK)
            break;
        assert_int_equal(st, PI_ERR_NOMEM);
        assert_int_equal(pi_ctx_seq_len(c, 0), 2);
    }
    pi_ctx_destroy(c);
    pi_model_close(m);
    assert_int_equal(fa.live, 0);
}

/* The logits after decoding `tok` into each sequence listed. */
static void next_logits(pi_ctx *c, const int32_t *seqs, int n, float out[][MAXV], int64_t V) {
    pi_batch_entry e[4];
    for (int i = 0; i < n; i++)
        e[i] = (pi_batch_entry){21, seqs[i], -1, 1};
    assert_int_equal(pi_ctx_decode_batch(c, e, (size_t)n), PI_OK);
    for (int i = 0; i < n; i++)
        memcpy(out[i], pi_ctx_batch_logits(c, (size_t)i), (size_t)V * sizeof(float));
}

static void state_round_trip(pi_model *m, pi_model *other, int device) {
    const int64_t V = pi_model_n_vocab(m);
    pi_ctx *c = make_ctx(m, 3, device, 8);
    pi_batch_entry e[16];
    int n = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < PN[s]; i++)
            e[n++] = (pi_batch_entry){P[s][i], s, -1, i == PN[s] - 1};
    assert_int_equal(pi_ctx_decode_batch(c, e, (size_t)n), PI_OK);
    size_t size = 0;
    assert_int_equal(pi_ctx_state_save(c, -1, NULL, 0, &size), PI_ERR_RANGE);
    uint8_t *whole = malloc(size), *one = NULL;
    assert_int_equal(pi_ctx_state_save(c, -1, whole, size, &size), PI_OK);
    size_t one_size = 0;
    pi_ctx_state_save(c, 1, NULL, 0, &one_size);
    one = malloc(one_size);
    assert_int_equal(pi_ctx_state_save(c, 1, one, one_size, &one_size), PI_OK);
    char path[320];
    snprintf(path, sizeof path, "%s/ctx.state", g_dir);
    assert_int_equal(pi_ctx_state_save_file(c, -1, path), PI_OK);
    float last[MAXV];
    memcpy(last, pi_ctx_logits(c), (size_t)V * sizeof(float));
    const int32_t both[2] = {0, 1};
    float want[2][MAXV] = {{0}}, got[2][MAXV] = {{0}};
    next_logits(c, both, 2, want, V);

    /* whole context, from memory and from the file, into fresh contexts */
    for (int from_file = 0; from_file <= 1; from_file++) {
        pi_ctx *r = make_ctx(m, 3, device, 8);
        assert_int_equal(from_file ? pi_ctx_state_load_file(r, -1, path)
                                   : pi_ctx_state_load(r, -1, whole, size),
                         PI_OK);
        assert_int_equal(pi_ctx_seq_len(r, 0), PN[0]);
        assert_int_equal(pi_ctx_seq_len(r, 1), PN[1]);
        assert_memory_equal(pi_ctx_logits(r), last, (size_t)V * sizeof(float));
        next_logits(r, both, 2, got, V);
        assert_memory_equal(got, want, sizeof got);
        pi_ctx_destroy(r);
    }
    /* one sequence into another sequence of another context */
    pi_ctx *r = make_ctx(m, 3, device, 8);
    assert_int_equal(pi_ctx_state_load(r, 2, one, one_size), PI_OK);
    assert_int_equal(pi_ctx_seq_len(r, 2), PN[1]);
    const int32_t two[1] = {2};
    next_logits(r, two, 1, got, V);
    assert_memory_equal(got[0], want[1], (size_t)V * sizeof(float));

    /* refusals leave r as it was */
    const int64_t len2 = pi_ctx_seq_len(r, 2);
    uint8_t *bad = malloc(size);
    memcpy(bad, whole, size);
    bad[size / 2] ^= 1;
    assert_int_equal(pi_ctx_state_load(r, -1, bad, size), PI_ERR_FORMAT);
    assert_non_null(strstr(pi_ctx_errmsg(r), "checksum"));
    assert_int_equal(pi_ctx_state_load(r, -1, whole, size - 1), PI_ERR_FORMAT);
    assert_int_equal(pi_ctx_state_load(r, -1, whole, 10), PI_ERR_FORMAT);
    assert_int_equal(pi_ctx_state_load(r, -1, one, one_size), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_state_load(r, 1, whole, size), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_state_load(r, 7, one, one_size), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_state_load_file(r, -1, "/nonexistent/x.state"), PI_ERR_IO);
    pi_ctx *o = make_ctx(other, 3, 0, 8);
    assert_int_equal(pi_ctx_state_load(o, -1, whole, size), PI_ERR_FORMAT);
    assert_non_null(strstr(pi_ctx_errmsg(o), "another model"));
    pi_ctx_destroy(o);
    pi_ctx *small = make_ctx(m, 1, 0, 8);
    assert_int_equal(pi_ctx_state_load(small, -1, whole, size), PI_ERR_RANGE);
    pi_ctx_destroy(small);
    assert_int_equal(pi_ctx_seq_len(r, 2), len2);
    next_logits(r, two, 1, got, V); /* still continues where it was */
    pi_ctx *r2 = make_ctx(m, 3, device, 8);
    assert_int_equal(pi_ctx_state_load(r2, 2, one, one_size), PI_OK);
    next_logits(r2, two, 1, want, V);
    next_logits(r2, two, 1, want, V);
    assert_memory_equal(got[0], want[0], (size_t)V * sizeof(float));
    pi_ctx_destroy(r2);
    pi_ctx_destroy(r);
    free(bad);
    free(whole);
    free(one);
    pi_ctx_destroy(c);
}

static void test_state(void **state) {
    (void)state;
    pi_model *m = make_model("b-state", "llama", 1, PI_TYPE_Q4_0);
    pi_model *o = make_model("b-state-other", "bamboo", 1, PI_TYPE_Q4_0);
    state_round_trip(m, o, 0);
    state_round_trip(m, o, 1);
    pi_model_close(m);
    pi_model_close(o);
}

int main(int argc, char **argv) {
    g_gpu = argc > 1 && !strcmp(argv[1], "--gpu");
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/pi-batch-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(g_dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interleaved), cmocka_unit_test(test_seq_ops),
        cmocka_unit_test(test_bad_batches), cmocka_unit_test(test_batch_alloc_failure),
        cmocka_unit_test(test_state),        cmocka_unit_test(test_sample_logits),
    };
    const struct CMUnitTest gpu[] = {cmocka_unit_test(test_interleaved),
                                     cmocka_unit_test(test_state)};
    int rc = g_gpu ? cmocka_run_group_tests(gpu, NULL, NULL)
                   : cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
