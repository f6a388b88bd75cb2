/* api_sampler.c -- the sampler: penalties -> top-k -> top-p -> min-p -> temperature
 * -> seeded draw (or greedy). All buffers are allocated at creation; sampling a token
 * allocates nothing. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/ctx.h"
#include "infer/sample.h"
#include "util/params.h"

#define SAMPLER_PARAMS_MIN_SIZE sizeof(pi_sampler_params)

struct cand {
    float logit;
    int32_t id;
};

struct pi_sampler {
    const struct pi_model *model;
    struct pi_allocator alloc;
    pi_sampler_params p;
    int64_t n_vocab;
    struct cand *cand;  /* [n_vocab] */
    int32_t *history;   /* ring of the last penalty_last_n tokens */
    int64_t hist_len, hist_head;
    uint16_t *counts;   /* [n_vocab], scratch for penalties */
    uint64_t rng[4];    /* xoshiro256** state */
};

int pi_sampler_default_params(pi_sampler_params *p) {
    if (!p)
        return PI_ERR_INVALID_ARG;
    memset(p, 0, sizeof *p);
    p->struct_size = (uint32_t)sizeof *p;
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->penalty_last_n = 64;
    p->seed = 0x5eed;
    return PI_OK;
}

/* splitmix64 expands the seed into the xoshiro256** state. */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static double next_unit(uint64_t s[4]) {
    return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
}

int pi_sampler_reset(pi_sampler *s) {
    if (!s)
        return PI_ERR_INVALID_ARG;
    s->hist_len = s->hist_head = 0;
    uint64_t seed = s->p.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix(&seed);
    return PI_OK;
}

void pi_sampler_destroy(pi_sampler *s) {
    if (!s)
        return;
    struct pi_allocator a = s->alloc;
    pi_free(&a, s->cand);
    pi_free(&a, s->history);
    pi_free(&a, s->counts);
    pi_free(&a, s);
}

int pi_sampler_create(const pi_model *m, const pi_sampler_params *params, pi_sampler **out) {
    if (out)
        *out = NULL;
    if (!m || !out || !m->has_desc)
        return PI_ERR_INVALID_ARG;
    pi_sampler_params p;
    pi_sampler_default_params(&p);
    PI_TRY(pi_params_take(params, &p, sizeof p, SAMPLER_PARAMS_MIN_SIZE, "pi_sampler_params",
                          NULL));
    if (isnan(p.temperature) || !(p.top_p >= 0.0f) || !(p.min_p >= 0.0f) || p.min_p > 1.0f ||
        !(p.repeat_penalty > 0.0f) || !isfinite(p.frequency_penalty) ||
        !isfinite(p.presence_penalty) || p.penalty_last_n < 0)
        return PI_ERR_INVALID_ARG;
    struct pi_sampler *s = pi_calloc(&m->alloc, 1, sizeof *s);
    if (!s)
        return PI_ERR_NOMEM;
    s->model = m;
    s->alloc = m->alloc;
    s->p = p;
    s->n_vocab = m->desc.hp.n_vocab;
    s->cand = pi_calloc(&s->alloc, (size_t)s->n_vocab, sizeof *s->cand);
    s->counts = pi_calloc(&s->alloc, (size_t)s->n_vocab, sizeof *s->counts);
    if (p.penalty_last_n)
        s->history = pi_calloc(&s->alloc, (size_t)p.penalty_last_n, sizeof *s->history);
    if (!s->cand || !s->counts || (p.penalty_last_n && !s->history)) {
        pi_sampler_destroy(s);
        return PI_ERR_NOMEM;
    }
    pi_sampler_reset(s);
    *out = s;
    return PI_OK;
}

int pi_sampler_accept(pi_sampler *s, int32_t token) {
    if (!s || token < 0 || token >= s->n_vocab)
        return PI_ERR_INVALID_ARG;
    if (s->p.penalty_last_n == 0)
        return PI_OK;
    s->history[s->hist_head] = token;
    s->hist_head = (s->hist_head + 1) % s->p.penalty_last_n;
    if (s->hist_len < s->p.penalty_last_n)
        s->hist_len++;
    return PI_OK;
}

static int penalties_active(const pi_sampler_params *p) {
    return p->penalty_last_n > 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f ||
            p->presence_penalty != 0.0f);
}

static void apply_penalties(struct pi_sampler *s) {
    for (int64_t i = 0; i < s->hist_len; i++)
        if (s->counts[s->history[i]] < UINT16_MAX)
            s->counts[s->history[i]]++;
    for (int64_t i = 0; i < s->hist_len; i++) {
        int32_t t = s->history[i];
        if (!s->counts[t])
            continue; /* already applied for an earlier occurrence */
        float *l = &s->cand[t].logit;
        *l = *l > 0.0f ? *l / s->p.repeat_penalty : *l * s->p.repeat_penalty;
        *l -= (float)s->counts[t] * s->p.frequency_penalty + s->p.presence_penalty;
        s->counts[t] = 0;
    }
}

/* Larger logit first; equal logits by lower id, so results are deterministic. */
/* The logit as the sampler orders it: NaN as -infinity (never drawn while a number is
 * left, ties broken by id like any other) and +infinity as FLT_MAX, so that every
 * comparison is a total order and logit - max stays a number. */
static float orderable(float v) {
    return isnan(v) ? -INFINITY : v > FLT_MAX ? FLT_MAX : v;
}

static int cand_before(const struct cand *a, const struct cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *x, const void *y) {
    const struct cand *a = x, *b = y;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* Keep the worst of the best-k at the root of a heap of size k. */
static void sift_down(struct cand *h, int64_t k, int64_t i) {
    for (;;) {
        int64_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && cand_before(&h[w], &h[l]))
            w = l;
        if (r < k && cand_before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        struct cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Move the k best candidates to the front, sorted best first: a size-k heap over the
 * n candidates (O(n log k)), then a sort of the k. The rest stay behind them (a
 * permutation: a later call with a larger k finds them all). */
static void top_k(struct cand *c, int64_t n, int64_t k) {
    if (k < n) {
        for (int64_t i = k / 2; i-- > 0;)
            sift_down(c, k, i);
        for (int64_t i = k; i < n; i++) {
            if (cand_before(&c[i], &c[0])) {
                struct cand t = c[0];
                c[0] = c[i];
                c[i] = t;
                sift_down(c, k, 0);
            }
        }
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

int pi_sample(pi_sampler *s, const pi_ctx *ctx, int32_t *token) {
    if (!s || !ctx || !token || ctx->model != s->model)
        return PI_ERR_INVALID_ARG;
    return pi_sample_logits(s, pi_ctx_logits(ctx), s->n_vocab, token);
}

/* The top-p cut of the sorted c[0..k): the shortest prefix whose probability (over
 * `sum`, the normaliser at temperature 1) reaches top_p; -1 when c[0..k) does not. */
static int64_t top_p_cut(const struct cand *c, int64_t k, float top_p, float mx, double sum) {
    double cum = 0.0;
    for (int64_t i = 0; i < k; i++) {
        cum += exp((double)(c[i].logit - mx)) / sum;
        if (cum >= top_p)
            return i + 1;
    }
    return -1;
}

/* The min-p cut of the sorted c[0..k): p_i >= min_p * p_max, that is
 * logit_i - mx >= log(min_p); the first always stays. */
static int64_t min_p_cut(const struct cand *c, int64_t k, float min_p, float mx) {
    const double cut = log((double)min_p);
    int64_t keep = 1;
    while (keep < k && (double)(c[keep].logit - mx) >= cut)
        keep++;
    return keep;
}

int64_t pi_sampler_candidates(pi_sampler *s, const float *logits, float *mx_out, int *sorted) {
    const int64_t n = s->n_vocab;
    struct cand *c = s->cand;
    for (int64_t i = 0; i < n; i++)
        c[i] = (struct cand){orderable(logits[i]), (int32_t)i};
    if (penalties_active(&s->p))
        apply_penalties(s);
    const float top_p = s->p.top_p, min_p = s->p.min_p;
    *sorted = 1;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        int64_t k = s->p.top_k;
        top_k(c, n, k);
        const float mx = c[0].logit;
        *mx_out = mx;
        if (top_p < 1.0f) {
            double sum = 0.0;
            for (int64_t i = 0; i < k; i++)
                sum += exp((double)(c[i].logit - mx));
            int64_t keep = top_p_cut(c, k, top_p, mx, sum);
            if (keep > 0)
                k = keep;
        }
        return min_p > 0.0f ? min_p_cut(c, k, min_p, mx) : k;
    }
    /* The whole vocabulary: sort only as far as the cuts reach. */
    float mx = c[0].logit;
    for (int64_t i = 1; i < n; i++)
        if (c[i].logit > mx)
            mx = c[i].logit;
    *mx_out = mx;
    if (top_p >= 1.0f && min_p <= 0.0f) {
        *sorted = 0; /* nothing is cut: the draw needs no order */
        return n;
    }
    double sum = 0.0; /* over all of them, as with top_k: top-p comes before min-p */
    if (top_p < 1.0f)
        for (int64_t i = 0; i < n; i++)
            sum += exp((double)(c[i].logit - mx));
    int64_t m = n;
    if (min_p > 0.0f) { /* the min-p cut is a set: no order needed to take it */
        const double cut = log((double)min_p);
        m = 0;
        for (int64_t i = 0; i < n; i++)
            if ((double)(c[i].logit - mx) >= cut)
                c[m++] = c[i];
    }
    if (top_p >= 1.0f) {
        top_k(c, m, m);
        return m;
    }
    /* top-p: the best w in order, w growing until their probability reaches top_p */
    for (int64_t w = m < 64 ? m : 64;; w = w > m / 8 ? m : w * 8) {
        top_k(c, m, w);
        int64_t keep = top_p_cut(c, w, top_p, mx, sum);
        if (keep > 0)
            return keep;
        if (w == m)
            return m;
    }
}

int pi_sample_logits(pi_sampler *s, const float *logits, int64_t n_vocab, int32_t *token) {
    if (!s || !logits || !token || n_vocab != s->n_vocab)
        return PI_ERR_INVALID_ARG;
    int32_t chosen;
    if (s->p.temperature <= 0.0f) {
        const int64_t n = s->n_vocab;
        for (int64_t i = 0; i < n; i++)
            s->cand[i] = (struct cand){orderable(logits[i]), (int32_t)i};
        if (penalties_active(&s->p))
            apply_penalties(s);
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (cand_before(&s->cand[i], &s->cand[best]))
                best = i;
        if (s->cand[best].logit == -INFINITY)
            return PI_ERR_NUMERIC; /* every logit is NaN or -infinity */
        chosen = s->cand[best].id;
    } else {
        float mx;
        int sorted;
        const int64_t k = pi_sampler_candidates(s, logits, &mx, &sorted);
        if (mx == -INFINITY)
            return PI_ERR_NUMERIC; /* every logit is NaN or -infinity */
        const struct cand *c = s->cand;
        double total = 0.0;
        for (int64_t i = 0; i < k; i++)
            total += exp((double)(c[i].logit - mx) / s->p.temperature);
        double r = next_unit(s->rng) * total, acc = 0.0;
        chosen = c[k - 1].id;
        for (int64_t i = 0; i < k; i++) {
            acc += exp((double)(c[i].logit - mx) / s->p.temperature);
            if (r < acc) {
                chosen = c[i].id;
                break;
            }
        }
    }
    *token = chosen;
    return pi_sampler_accept(s, chosen);
}

void pi_sampler_candidate_ids(const pi_sampler *s, int64_t k, int32_t *ids) {
    for (int64_t i = 0; i < k; i++)
        ids[i] = s->cand[i].id;
}
