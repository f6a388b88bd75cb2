#define _POSIX_C_SOURCE 200809L
/* The sampler against a plain reference: the whole vocabulary sorted (larger logit first,
 * equal logits by lower id), then top-k, top-p, min-p as the header defines them.
 *  - the candidate set (ids, in order when sorted) equals the reference for random
 *    logits of several shapes (spread, peaked, flat, many ties) and every combination of
 *    top_k, top_p and min_p, including the edges (0, 1, n_vocab and beyond);
 *  - draws follow the reference distribution at temperature 0.7 (chi-square, fixed seed);
 *  - greedy is the reference argmax; pi_sample_logits rejects bad arguments. */
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

#include "infer/sample.h"
#include "powerinfer.h"
#include "testmodel.h"
#include "portable.h" /* last: Windows shims of mkdir, mkdtemp */

enum { NV = 3000 };
static char g_dir[] = "/tmp/pi-test-sampler-XXXXXX";
static char g_path[300];
static pi_model *g_model;

struct rc {
    float l;
    int32_t id;
};

static int rc_cmp(const void *x, const void *y) {
    const struct rc *a = x, *b = y;
    if (a->l != b->l)
        return a->l > b->l ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* The reference set: returns k, ids[] best first; *ambiguous when a top-p sum lands
 * within rounding of top_p (the cut may then move by one either way). */
static int64_t ref_candidates(const float *logits, int64_t n, int32_t top_k, float top_p,
                              float min_p, int32_t *ids, int *ambiguous) {
    struct rc *c = malloc((size_t)n * sizeof *c);
    assert_non_null(c);
    for (int64_t i = 0; i < n; i++)
        c[i] = (struct rc){logits[i], (int32_t)i};
    qsort(c, (size_t)n, sizeof *c, rc_cmp);
    int64_t k = top_k > 0 && top_k < n ? top_k : n;
    const double mx = c[0].l;
    *ambiguous = 0;
    if (top_p < 1.0f) {
        double sum = 0.0, cum = 0.0;
        for (int64_t i = 0; i < k; i++)
            sum += exp(c[i].l - mx);
        for (int64_t i = 0; i < k; i++) {
            cum += exp(c[i].l - mx) / sum;
            if (fabs(cum - top_p) < 1e-9)
                *ambiguous = 1;
            if (cum >= top_p) {
                k = i + 1;
                break;
            }
        }
    }
    if (min_p > 0.0f) {
        int64_t keep = 1;
        while (keep < k && c[keep].l - mx >= log((double)min_p))
            keep++;
        k = keep;
    }
    for (int64_t i = 0; i < k; i++)
        ids[i] = c[i].id;
    free(c);
    return k;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double unit(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}
static double gauss(void) {
    double u = unit() + 1e-12, v = unit();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Logits of shape `kind`: 0 spread (sd 3), 1 peaked (a few far above the rest), 2 flat
 * (sd 0.01), 3 many ties (integers 0..7), 4 mostly -inf-like (-1e30) with a few real. */
static void make_logits(float *l, int64_t n, int kind) {
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: l[i] = (float)(3.0 * gauss()); break;
        case 1: l[i] = (float)gauss() + (unit() < 0.003 ? 12.0f : 0.0f); break;
        case 2: l[i] = (float)(0.01 * gauss()); break;
        case 3: l[i] = (float)(int)(unit() * 8.0); break;
        default: l[i] = unit() < 0.01 ? (float)gauss() : -1e30f; break;
        }
    }
}

static pi_sampler *make(int32_t top_k, float top_p, float min_p, float temp, uint64_t seed) {
    pi_sampler_params sp;
    pi_sampler_default_params(&sp);
    sp.top_k = top_k;
    sp.top_p = top_p;
    sp.min_p = min_p;
    sp.temperature = temp;
    sp.seed = seed;
    pi_sampler *s;
    assert_int_equal(pi_sampler_create(g_model, &sp, &s), PI_OK);
    return s;
}

static void test_candidates_equal_reference(void **state) {
    (void)state;
    static const int32_t ks[] = {0, 1, 5, 40, 200, NV - 1, NV, NV + 10};
    static const float ps[] = {1.0f, 0.999f, 0.95f, 0.5f, 0.0f};
    static const float ms[] = {0.0f, 0.05f, 0.5f, 1.0f};
    float *l = malloc(NV * sizeof *l);
    int32_t *want = malloc(NV * sizeof *want), *got = malloc(NV * sizeof *got);
    assert_true(l && want && got);
    int checked = 0, unsorted = 0;
    for (int kind = 0; kind < 5; kind++) {
        for (int rep = 0; rep < 3; rep++) {
            make_logits(l, NV, kind);
            for (size_t a = 0; a < sizeof ks / sizeof *ks; a++)
                for (size_t b = 0; b < sizeof ps / sizeof *ps; b++)
                    for (size_t c = 0; c < sizeof ms / sizeof *ms; c++) {
                        int amb;
                        int64_t kw = ref_candidates(l, NV, ks[a], ps[b], ms[c], want, &amb);
                        if (amb)
                            continue;
                        pi_sampler *s = make(ks[a], ps[b], ms[c], 1.0f, 1);
                        float mx;
                        int sorted;
                        int64_t kg = pi_sampler_candidates(s, l, &mx, &sorted);
                        pi_sampler_candidate_ids(s, kg, got);
                        pi_sampler_destroy(s);
                        if (kg != kw)
                            fail_msg("kind %d top_k %d top_p %g min_p %g: %lld candidates, "
                                     "want %lld", kind, ks[a], ps[b], ms[c], (long long)kg,
                                     (long long)kw);
                        assert_float_equal(mx, l[want[0]], 0.0f);
                        if (sorted) {
                            for (int64_t i = 0; i < kw; i++)
                                if (got[i] != want[i])
                                    fail_msg("kind %d top_k %d top_p %g min_p %g: candidate "
                                             "%lld is %d, want %d", kind, ks[a], ps[b], ms[c],
                                             (long long)i, got[i], want[i]);
                        } else {
                            /* nothing cut: every id once, in id order */
                            assert_true(kg == NV && (ks[a] <= 0 || ks[a] >= NV) &&
                                        ps[b] >= 1.0f && ms[c] <= 0.0f);
                            for (int64_t i = 0; i < kg; i++)
                                assert_int_equal(got[i], i);
                            unsorted++;
                        }
                        checked++;
                    }
        }
    }
    assert_true(checked > 2000);
    assert_true(unsorted > 0);
    free(l);
    free(want);
    free(got);
}

/* Draws against the reference probabilities: softmax(l / T) over the candidates. */
static void check_distribution(int32_t top_k, float top_p, float min_p, int kind) {
    const float temp = 0.7f;
    const int draws = 40000;
    float *l = malloc(NV * sizeof *l);
    int32_t *ids = malloc(NV * sizeof *ids);
    double *p = calloc(NV, sizeof *p);
    int *count = calloc(NV, sizeof *count);
    assert_true(l && ids && p && count);
    make_logits(l, NV, kind);
    int amb;
    int64_t k = ref_candidates(l, NV, top_k, top_p, min_p, ids, &amb);
    double mx = l[ids[0]], tot = 0.0;
    for (int64_t i = 0; i < k; i++)
        tot += exp((l[ids[i]] - mx) / temp);
    for (int64_t i = 0; i < k; i++)
        p[ids[i]] = exp((l[ids[i]] - mx) / temp) / tot;
    pi_sampler *s = make(top_k, top_p, min_p, temp, 42);
    for (int d = 0; d < draws; d++) {
        int32_t t;
        assert_int_equal(pi_sample_logits(s, l, NV, &t), PI_OK);
        assert_true(t >= 0 && t < NV);
        if (p[t] == 0.0)
            fail_msg("top_k %d top_p %g min_p %g: drew %d, which is not a candidate", top_k,
                     top_p, min_p, t);
        count[t]++;
    }
    pi_sampler_destroy(s);
    /* chi-square over the candidates, those expected fewer than 5 times pooled */
    double chi = 0.0, pool_e = 0.0, pool_o = 0.0;
    int dof = 0;
    for (int64_t i = 0; i < k; i++) {
        double e = p[ids[i]] * draws, o = count[ids[i]];
        if (e < 5.0) {
            pool_e += e;
            pool_o += o;
            continue;
        }
        chi += (o - e) * (o - e) / e;
        dof++;
    }
    if (pool_e >= 5.0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        dof++;
    }
    dof = dof > 1 ? dof - 1 : 1;
    /* mean dof, sd sqrt(2 dof): 6 sd is far beyond chance for a fixed seed, and far
     * below what a wrong candidate set or weight gives */
    if (chi > dof + 6.0 * sqrt(2.0 * dof) + 10.0)
        fail_msg("top_k %d top_p %g min_p %g kind %d: chi-square %.1f with %d dof", top_k,
                 top_p, min_p, kind, chi, dof);
    free(l);
    free(ids);
    free(p);
    free(count);
}

static void test_draws_follow_reference(void **state) {
    (void)state;
    check_distribution(40, 0.95f, 0.05f, 0); /* the defaults */
    check_distribution(0, 1.0f, 0.0f, 1);    /* nothing cut */
    check_distribution(0, 0.9f, 0.0f, 0);    /* top-p over the whole vocabulary */
    check_distribution(0, 1.0f, 0.02f, 0);   /* min-p alone */
    check_distribution(0, 0.8f, 0.1f, 3);    /* ties */
    check_distribution(7, 1.0f, 0.0f, 2);    /* top-k of a flat distribution */
}

static void test_greedy_and_arguments(void **state) {
    (void)state;
    float *l = malloc(NV * sizeof *l);
    assert_non_null(l);
    for (int kind = 0; kind < 5; kind++) {
        make_logits(l, NV, kind);
        int32_t best = 0;
        for (int32_t i = 1; i < NV; i++)
            if (l[i] > l[best])
                best = i;
        pi_sampler *s = make(0, 1.0f, 0.0f, 0.0f, 1);
        int32_t t;
        assert_int_equal(pi_sample_logits(s, l, NV, &t), PI_OK);
        assert_int_equal(t, best);
        assert_int_equal(pi_sample_logits(s, l, NV - 1, &t), PI_ERR_INVALID_ARG);
        assert_int_equal(pi_sample_logits(s, NULL, NV, &t), PI_ERR_INVALID_ARG);
        assert_int_equal(pi_sample_logits(s, l, NV, NULL), PI_ERR_INVALID_ARG);
        assert_int_equal(pi_sample_logits(NULL, l, NV, &t), PI_ERR_INVALID_ARG);
        pi_sampler_destroy(s);
    }
    free(l);
}

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(g_path, sizeof g_path, "%s/m.gguf", g_dir);
    struct tm_spec s;
    tm_default(&s);
    s.n_vocab = NV;
    s.n_embd = 16;
    s.n_ff = 32;
    s.n_layer = 1;
    if (tm_write(&s, g_path) != PI_OK)
        return -1;
    return pi_model_open(g_path, NULL, &g_model) == PI_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    pi_model_close(g_model);
    unlink(g_path);
    rmdir(g_dir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_candidates_equal_reference),
        cmocka_unit_test(test_draws_follow_reference),
        cmocka_unit_test(test_greedy_and_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
