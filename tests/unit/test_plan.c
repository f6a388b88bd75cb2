/* The neuron-placement planner (lib/plan): budget never exceeded, the optimum against
 * brute force on small instances, monotone in the budget, deterministic under ties,
 * PowerInfer's dense priority order, experts of mixture-of-experts layers as units,
 * bad input, allocation failures. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "failalloc.h"
#include "plan/plan.h"

static uint32_t g_rng = 7;
static double rnd(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (double)(g_rng >> 8) / 16777216.0;
}

/* Power-law-ish random frequencies. */
static void fill_freq(double *f, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        f[i] = floor(1000.0 * pow(rnd(), 4.0));
}

static double plan_value(const struct pi_placement *p, const struct pi_plan_layer *ls) {
    double v = 0;
    for (int64_t l = 0; l < p->n_layer; l++)
        for (int64_t r = 0; r < p->n_ff; r++)
            if (p->neuron[l * p->n_ff + r])
                v += ls[l].freq ? ls[l].freq[r] : 1.0;
    return v;
}

static void check_consistent(const struct pi_placement *p, const struct pi_plan_input *in) {
    uint64_t sum = 0;
    for (int k = 0; k < PI_PART_PARTS; k++)
        sum += p->bytes[k];
    assert_true(sum == p->total);
    assert_true(p->total <= in->budget);
    uint64_t ffn = 0;
    for (int64_t l = 0; l < p->n_layer; l++) {
        int64_t n = 0;
        for (int64_t r = 0; r < p->n_ff; r++)
            n += p->neuron[l * p->n_ff + r];
        assert_int_equal(n, p->n_neurons[l]);
        ffn += (uint64_t)n * in->layers[l].neuron_bytes;
    }
    assert_true(ffn == p->bytes[PI_PART_FFN]);
}

static void test_budget_and_order(void **state) {
    (void)state;
    enum { L = 4, F = 64 };
    static double freq[L][F];
    struct pi_plan_layer ls[L];
    for (int l = 0; l < L; l++) {
        fill_freq(freq[l], F);
        ls[l] = (struct pi_plan_layer){1000, 300, 10, 7, freq[l], 0, 0};
    }
    struct pi_plan_input in = {L, F, ls, 500, 800, 0, 8, 0};
    struct pi_error err;
    for (uint64_t budget = 0; budget <= 8000; budget += 97) {
        in.budget = budget;
        struct pi_placement p;
        assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_OK);
        check_consistent(&p, &in);
        /* dense parts form a prefix of the priority order */
        int seen_gap = 0;
        for (int l = 0; l < L; l++) {
            if (!p.attn[l])
                seen_gap = 1;
            else
                assert_false(seen_gap);
        }
        for (int l = 0; l < L; l++) {
            if (p.pred[l])
                assert_false(seen_gap);
            if (!p.pred[l])
                seen_gap = 1;
        }
        if (p.output)
            for (int l = 0; l < L; l++)
                assert_true(p.attn[l] && p.pred[l] && p.norm[l]);
        if (p.kv)
            assert_true(p.output);
        /* each layer holds its hottest neurons: no device neuron is colder than a
         * host neuron of the same layer, except across a group boundary tie */
        for (int l = 0; l < L; l++) {
            double cold_max = -1, dev_min = 1e300;
            for (int r = 0; r < F; r++) {
                if (p.neuron[l * F + r])
                    dev_min = fmin(dev_min, freq[l][r]);
                else
                    cold_max = fmax(cold_max, freq[l][r]);
            }
            if (p.n_neurons[l] > 0 && p.n_neurons[l] < F)
                assert_true(dev_min >= cold_max);
        }
        pi_placement_free(&p);
    }
}

/* Brute force: every subset of groups (each group = G consecutive neurons of a layer's
 * sorted order), all costs equal, no dense parts. */
static void test_optimal(void **state) {
    (void)state;
    enum { L = 3, F = 8, G = 2, NG = L * F / G };
    for (int trial = 0; trial < 40; trial++) {
        static double freq[L][F];
        struct pi_plan_layer ls[L];
        for (int l = 0; l < L; l++) {
            fill_freq(freq[l], F);
            ls[l] = (struct pi_plan_layer){0, 0, 0, 5, freq[l], 0, 0};
        }
        /* group values from each layer's sorted frequencies */
        double gv[NG];
        for (int l = 0; l < L; l++) {
            double s[F];
            memcpy(s, freq[l], sizeof s);
            for (int i = 0; i < F; i++)
                for (int j = i + 1; j < F; j++)
                    if (s[j] > s[i]) {
                        double t = s[i];
                        s[i] = s[j];
                        s[j] = t;
                    }
            for (int g = 0; g < F / G; g++)
                gv[l * (F / G) + g] = s[2 * g] + s[2 * g + 1];
        }
        for (uint64_t budget = 0; budget <= (uint64_t)(L * F * 5); budget += 7) {
            double best = 0;
            for (unsigned m = 0; m < (1u << NG); m++) {
                if ((uint64_t)__builtin_popcount(m) * G * 5 > budget)
                    continue;
                double v = 0;
                for (int g = 0; g < NG; g++)
                    if (m >> g & 1)
                        v += gv[g];
                best = fmax(best, v);
            }
            struct pi_plan_input in = {L, F, ls, 0, 0, budget, G, 0};
            struct pi_placement p;
            struct pi_error err;
            assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_OK);
            check_consistent(&p, &in);
            const double got = plan_value(&p, ls);
            if (fabs(got - best) > 1e-9)
                fail_msg("trial %d budget %llu: plan value %g, optimum %g", trial,
                         (unsigned long long)budget, got, best);
            pi_placement_free(&p);
        }
    }
}

static void test_monotone_and_ties(void **state) {
    (void)state;
    enum { L = 3, F = 40 };
    static double freq[L][F];
    struct pi_plan_layer ls[L];
    for (int l = 0; l < L; l++) {
        fill_freq(freq[l], F);
        for (int r = 0; r < F; r += 3)
            freq[l][r] = 5; /* many ties */
        ls[l] = (struct pi_plan_layer){50, 20, 2, 3, freq[l], 0, 0};
    }
    struct pi_plan_input in = {L, F, ls, 40, 60, 0, 4, 0};
    struct pi_placement prev;
    struct pi_error err;
    memset(&prev, 0, sizeof prev);
    for (uint64_t budget = 0; budget <= 800; budget += 12) {
        in.budget = budget;
        struct pi_placement p, again;
        assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_OK);
        assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &again, &err), PI_OK);
        assert_memory_equal(p.neuron, again.neuron, L * F); /* deterministic */
        pi_placement_free(&again);
        if (prev.neuron) {
            /* more budget never removes a dense part ... */
            int same_dense = p.kv == prev.kv && p.output == prev.output;
            for (int l = 0; l < L; l++) {
                assert_true(p.attn[l] >= prev.attn[l] && p.pred[l] >= prev.pred[l] &&
                            p.norm[l] >= prev.norm[l]);
                same_dense &= p.attn[l] == prev.attn[l] && p.pred[l] == prev.pred[l] &&
                              p.norm[l] == prev.norm[l];
            }
            assert_true(p.kv >= prev.kv && p.output >= prev.output);
            /* ... nor, with the same dense parts, a neuron (a dense part that enters, the
             * KV cache say, may displace neurons: it has priority) */
            if (same_dense)
                for (int i = 0; i < L * F; i++)
                    assert_true(p.neuron[i] >= prev.neuron[i]);
            assert_true(p.total + 4 * 3 >= prev.total); /* placed bytes grow, to a group */
        }
        pi_placement_free(&prev);
        prev = p;
    }
    pi_placement_free(&prev);
    /* uniform frequencies (no statistics): earlier layers first, lower indices first */
    for (int l = 0; l < L; l++)
        ls[l].freq = NULL;
    struct pi_plan_input u = {L, F, ls, 0, 0, 0, 4, 0};
    for (int l = 0; l < L; l++)
        ls[l].attn_bytes = ls[l].pred_bytes = ls[l].norm_bytes = 0;
    u.budget = (uint64_t)(F + 8) * 3;
    struct pi_placement p;
    assert_int_equal(pi_placement_make(&u, &pi_default_allocator, &p, &err), PI_OK);
    assert_int_equal(p.n_neurons[0], F);
    assert_int_equal(p.n_neurons[1], 8);
    for (int r = 0; r < 8; r++)
        assert_int_equal(p.neuron[F + r], 1);
    assert_int_equal(p.n_neurons[2], 0);
    pi_placement_free(&p);
}

/* A layer whose FFN stays on the host (host_ffn) gets no neuron
 * however large the budget, its dense parts still move, and the other layers' neurons
 * are placed as if it had none. */
static void test_host_ffn_layers(void **state) {
    (void)state;
    enum { L = 3, F = 16 };
    static double freq[L][F];
    struct pi_plan_layer ls[L];
    for (int l = 0; l < L; l++) {
        fill_freq(freq[l], F);
        ls[l] = (struct pi_plan_layer){100, 0, 4, 2, freq[l], l == 1, 0};
    }
    struct pi_plan_input in = {L, F, ls, 10, 20, 1u << 20, 4, 0};
    struct pi_placement p;
    struct pi_error err;
    assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_OK);
    assert_int_equal(p.n_neurons[0], F);
    assert_int_equal(p.n_neurons[1], 0);
    assert_int_equal(p.n_neurons[2], F);
    for (int r = 0; r < F; r++)
        assert_int_equal(p.neuron[1 * F + r], 0);
    assert_true(p.attn[1] && p.norm[1] && p.output && p.kv);
    assert_int_equal(p.bytes[PI_PART_FFN], 2 * F * 2);
    pi_placement_free(&p);
}

/* Mixture-of-experts layers: experts are the units (groups of one). Dense parts come
 * first; then experts by descending selection count across all layers (ties: lower
 * layer, lower expert), so with equal costs the chosen set is the top-k of all counts,
 * which brute force over every subset confirms; more budget never removes an expert
 * once the dense parts are fixed; a dense layer of the same model keeps its neurons. */
static void test_experts(void **state) {
    (void)state;
    enum { L = 3, F = 16, X = 4, COST = 100 };
    static double freq[L][X];
    struct pi_plan_layer ls[L];
    struct pi_error err;
    for (int trial = 0; trial < 30; trial++) {
        for (int l = 0; l < L; l++) {
            for (int e = 0; e < X; e++)
                freq[l][e] = floor(20.0 * rnd()); /* many ties */
            ls[l] = (struct pi_plan_layer){7, 0, 3, COST, freq[l], 0, 1};
        }
        struct pi_plan_input in = {L, F, ls, 11, 13, 0, 4, X};
        const uint64_t dense = L * 7 + L * 3 + 11 + 13;
        struct pi_placement prev;
        memset(&prev, 0, sizeof prev);
        for (uint64_t budget = 0; budget <= dense + L * X * COST + 50; budget += 37) {
            in.budget = budget;
            struct pi_placement p;
            assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_OK);
            check_consistent(&p, &in);
            uint64_t ex = 0;
            int64_t k = 0;
            for (int l = 0; l < L; l++) {
                int64_t n = 0;
                for (int e = 0; e < X; e++)
                    n += p.expert[l * X + e];
                assert_int_equal(n, p.n_experts[l]);
                assert_int_equal(p.n_neurons[l], 0);
                assert_true(p.moe[l]);
                k += n;
                ex += (uint64_t)n * COST;
            }
            assert_true(ex == p.bytes[PI_PART_EXPERTS]);
            assert_true(p.bytes[PI_PART_FFN] == 0);
            if (budget < dense) {
                assert_int_equal(k, 0); /* the dense parts come first */
            } else {
                assert_true(p.kv && p.output);
                /* as many as fit, and their value is the best over every subset of k */
                const int64_t fit = (int64_t)((budget - dense) / COST);
                assert_int_equal(k, fit < L * X ? fit : L * X);
                double got = 0.0, best = 0.0;
                for (int l = 0; l < L; l++)
                    for (int e = 0; e < X; e++)
                        got += p.expert[l * X + e] ? freq[l][e] : 0.0;
                for (uint32_t m = 0; m < (1u << (L * X)); m++) {
                    if (__builtin_popcount(m) != k)
                        continue;
                    double v = 0.0;
                    for (int i = 0; i < L * X; i++)
                        v += (m >> i) & 1u ? freq[i / X][i % X] : 0.0;
                    best = v > best ? v : best;
                }
                assert_true(fabs(got - best) < 1e-9);
                /* ties: a device expert is never colder than a host one, and among
                 * equal counts the earlier (layer, expert) is on the device */
                for (int i = 0; i < L * X; i++)
                    for (int j = 0; j < L * X; j++)
                        if (p.expert[i] && !p.expert[j]) {
                            const double fi = freq[i / X][i % X], fj = freq[j / X][j % X];
                            assert_true(fi > fj || (fi == fj && i < j));
                        }
                if (prev.expert && prev.kv)
                    for (int i = 0; i < L * X; i++)
                        assert_true(p.expert[i] >= prev.expert[i]); /* monotone */
            }
            pi_placement_free(&prev);
            prev = p;
        }
        pi_placement_free(&prev);
    }
    /* no statistics: uniform, so lower layers' lower experts first */
    for (int l = 0; l < L; l++)
        ls[l] = (struct pi_plan_layer){0, 0, 0, COST, NULL, 0, 1};
    /* a dense layer in the same model keeps placing neurons (in groups of 4) */
    static double nf[F];
    fill_freq(nf, F);
    ls[1] = (struct pi_plan_layer){0, 0, 0, 2, nf, 0, 0};
    struct pi_plan_input in = {L, F, ls, 0, 0, 6 * COST + F * 2, 4, X};
    struct pi_placement p;
    assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_OK);
    check_consistent(&p, &in);
    assert_int_equal(p.n_neurons[1], F);
    assert_int_equal(p.n_experts[0], X); /* uniform: layer 0's, then layer 2's first */
    assert_int_equal(p.n_experts[2], 2);
    assert_false(p.moe[1]);
    for (int e = 0; e < X; e++)
        assert_int_equal(p.expert[2 * X + e], e < 2);
    assert_true(p.bytes[PI_PART_EXPERTS] == 6 * COST && p.bytes[PI_PART_FFN] == F * 2);
    pi_placement_free(&p);
    /* experts without n_expert, a NaN expert count */
    in.n_expert = 0;
    assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_ERR_INVALID_ARG);
    in.n_expert = X;
    double bad[X] = {1, 2, NAN, 0};
    ls[0].freq = bad;
    assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_ERR_INVALID_ARG);
}

static void test_bad_input_and_alloc(void **state) {
    (void)state;
    double f[4] = {1, NAN, 2, 3};
    struct pi_plan_layer ls[1] = {{0, 0, 0, 1, f, 0, 0}};
    struct pi_plan_input in = {1, 4, ls, 0, 0, 100, 2, 0};
    struct pi_placement p;
    struct pi_error err;
    assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_ERR_INVALID_ARG);
    f[1] = -1;
    assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_ERR_INVALID_ARG);
    f[1] = 1;
    in.group = 0;
    assert_int_equal(pi_placement_make(&in, &pi_default_allocator, &p, &err), PI_ERR_INVALID_ARG);
    in.group = 2;
    assert_int_equal(pi_placement_make(NULL, &pi_default_allocator, &p, &err), PI_ERR_INVALID_ARG);
    long n;
    for (n = 1; n < 100; n++) {
        struct failalloc fa;
        struct pi_allocator a = failalloc_make(&fa, n);
        int st = pi_placement_make(&in, &a, &p, &err);
        if (st == PI_OK) {
            pi_placement_free(&p);
            assert_int_equal(fa.live, 0);
            break;
        }
        assert_int_equal(st, PI_ERR_NOMEM);
        assert_int_equal(fa.live, 0);
    }
    assert_true(n > 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_and_order), cmocka_unit_test(test_optimal),
        cmocka_unit_test(test_monotone_and_ties), cmocka_unit_test(test_host_ffn_layers),
        cmocka_unit_test(test_experts), cmocka_unit_test(test_bad_input_and_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
