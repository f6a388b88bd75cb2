/* api_grammar.c -- public grammar functions: argument checks, the vocabulary's pieces
 * and trie (built once per pi_grammar_create and shared by its clones), then delegation
 * to grammar/ (gbnf.c parses, match.c recognises and masks). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "grammar/grammar.h"
#include "model/model.h"

/* What clones share: immutable after creation. */
struct gcore {
    atomic_int refs;
    struct pi_allocator alloc;
    struct gram g;
    const pi_model *model; /* NULL: text only */
    int64_t n_vocab;
    struct gtrie trie;
    uint8_t *eog;       /* [n_vocab] */
    char *pieces;       /* token t: pieces[piece_at[t] .. piece_at[t + 1]) */
    uint32_t *piece_at; /* [n_vocab + 1] */
};

struct pi_grammar {
    struct gcore *core;
    struct gmatch m;
    uint8_t *ok; /* [n_vocab]: the mask's scratch */
    struct pi_error err;
};

static void core_unref(struct gcore *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    const struct pi_allocator *a = &c->alloc;
    gram_free(a, &c->g);
    pi_free(a, c->trie.first);
    pi_free(a, c->trie.sibling);
    pi_free(a, c->trie.tok_head);
    pi_free(a, c->trie.byte);
    pi_free(a, c->trie.tok_next);
    pi_free(a, c->eog);
    pi_free(a, c->pieces);
    pi_free(a, c->piece_at);
    struct pi_allocator copy = *a;
    pi_free(&copy, c);
}

/* Every token's piece, its end-of-generation flag, and the trie of the non-empty pieces
 * of the tokens that do not end generation. */
static int build_vocab(struct gcore *c) {
    const struct pi_allocator *a = &c->alloc;
    const int64_t n = c->n_vocab;
    size_t cap = (size_t)n * 8 + 64, len = 0;
    c->piece_at = pi_malloc(a, ((size_t)n + 1) * sizeof *c->piece_at);
    c->eog = pi_calloc(a, (size_t)n, 1);
    c->pieces = pi_malloc(a, cap);
    c->trie.tok_next = pi_malloc(a, (size_t)n * sizeof *c->trie.tok_next);
    if (!c->piece_at || !c->eog || !c->pieces || !c->trie.tok_next)
        return PI_ERR_NOMEM;
    for (int64_t t = 0; t < n; t++) {
        char buf[1024];
        int64_t k = pi_token_to_piece(c->model, (int32_t)t, buf, sizeof buf, 0);
        if (k < 0 || k >= (int64_t)sizeof buf)
            k = 0; /* no piece, or one longer than any grammar token needs: never allowed */
        if (len + (size_t)k > cap || len + (size_t)k > UINT32_MAX) {
            size_t nc = cap * 2 + (size_t)k;
            char *np = len + (size_t)k > UINT32_MAX ? NULL : pi_malloc(a, nc);
            if (!np)
                return PI_ERR_NOMEM;
            memcpy(np, c->pieces, len);
            pi_free(a, c->pieces);
            c->pieces = np;
            cap = nc;
        }
        memcpy(c->pieces + len, buf, (size_t)k);
        c->piece_at[t] = (uint32_t)len;
        len += (size_t)k;
        c->eog[t] = (uint8_t)pi_model_token_is_eog(c->model, (int32_t)t);
    }
    c->piece_at[n] = (uint32_t)len;
    /* trie: at most 1 + total piece bytes nodes */
    struct gtrie *tr = &c->trie;
    const size_t max_nodes = len + 1;
    tr->first = pi_malloc(a, max_nodes * sizeof *tr->first);
    tr->sibling = pi_malloc(a, max_nodes * sizeof *tr->sibling);
    tr->tok_head = pi_malloc(a, max_nodes * sizeof *tr->tok_head);
    tr->byte = pi_calloc(a, max_nodes, 1);
    if (!tr->first || !tr->sibling || !tr->tok_head || !tr->byte)
        return PI_ERR_NOMEM;
    tr->n = 1;
    tr->first[0] = tr->sibling[0] = tr->tok_head[0] = GN_NONE;
    for (int64_t t = n; t-- > 0;) { /* backwards, so each node's list is in id order */
        const uint32_t from = c->piece_at[t], to = c->piece_at[t + 1];
        if (from == to || c->eog[t])
            continue;
        uint32_t node = 0;
        for (uint32_t i = from; i < to; i++) {
            const uint8_t b = (uint8_t)c->pieces[i];
            uint32_t ch = tr->first[node];
            while (ch != GN_NONE && tr->byte[ch] != b)
                ch = tr->sibling[ch];
            if (ch == GN_NONE) {
                ch = tr->n++;
                tr->byte[ch] = b;
                tr->first[ch] = tr->tok_head[ch] = GN_NONE;
                tr->sibling[ch] = tr->first[node];
                tr->first[node] = ch;
            }
            node = ch;
        }
        tr->tok_next[t] = tr->tok_head[node];
        tr->tok_head[node] = (uint32_t)t;
        if (to - from > tr->max_depth)
            tr->max_depth = to - from;
    }
    return PI_OK;
}

static void set_msg(char *err, size_t cap, const char *msg) {
    if (err && cap) {
        size_t n = strlen(msg);
        n = n < cap - 1 ? n : cap - 1;
        memcpy(err, msg, n);
        err[n] = '\0';
    }
}

int pi_grammar_create(const pi_model *model, const char *gbnf, size_t len, const char *root,
                      pi_grammar **out, char *err, size_t err_cap) {
    if (out)
        *out = NULL;
    if (!out || !gbnf || (!err && err_cap)) {
        set_msg(err, err_cap, "invalid argument");
        return PI_ERR_INVALID_ARG;
    }
    if (model && !model->vocab) {
        set_msg(err, err_cap, "the model has no tokenizer");
        return PI_ERR_UNSUPPORTED;
    }
    const struct pi_allocator *a = model ? &model->alloc : &pi_default_allocator;
    struct pi_error e = {0};
    struct gcore *c = pi_calloc(a, 1, sizeof *c);
    struct pi_grammar *g = pi_calloc(a, 1, sizeof *g);
    if (!c || !g) {
        pi_free(a, c);
        pi_free(a, g);
        set_msg(err, err_cap, "out of memory");
        return PI_ERR_NOMEM;
    }
    atomic_init(&c->refs, 1);
    c->alloc = *a;
    c->model = model;
    g->core = c;
    int st = gram_parse(a, gbnf, len, root, &c->g, &e);
    if (st == PI_OK && model) {
        c->n_vocab = pi_model_n_vocab(model);
        st = build_vocab(c);
        if (st == PI_OK && !(g->ok = pi_malloc(a, (size_t)c->n_vocab)))
            st = PI_ERR_NOMEM;
    }
    if (st == PI_OK) {
        st = gm_init(&g->m, &c->g, &c->alloc);
        if (st == PI_ERR_UNSUPPORTED)
            pi_error_set(&e, st,
                         "the grammar's start needs more parse stacks than the "
                         "limits allow (too ambiguous or nested too deep)");
    }
    if (st != PI_OK) {
        set_msg(err, err_cap, e.msg[0] ? e.msg : pi_status_str(st));
        pi_grammar_destroy(g);
        return st;
    }
    set_msg(err, err_cap, "");
    *out = g;
    return PI_OK;
}

void pi_grammar_destroy(pi_grammar *g) {
    if (!g)
        return;
    struct gcore *c = g->core;
    const struct pi_allocator a = c->alloc;
    gm_free(&g->m);
    pi_free(&a, g->ok);
    pi_free(&a, g);
    core_unref(c);
}

const char *pi_grammar_errmsg(const pi_grammar *g) {
    return g ? g->err.msg : "invalid argument";
}

int pi_grammar_clone(const pi_grammar *src, pi_grammar **out) {
    if (out)
        *out = NULL;
    if (!src || !out)
        return PI_ERR_INVALID_ARG;
    struct gcore *c = src->core;
    struct pi_grammar *g = pi_calloc(&c->alloc, 1, sizeof *g);
    if (!g)
        return PI_ERR_NOMEM;
    if ((c->n_vocab && !(g->ok = pi_malloc(&c->alloc, (size_t)c->n_vocab))) ||
        gm_copy(&g->m, &src->m) != PI_OK) {
        pi_free(&c->alloc, g->ok);
        pi_free(&c->alloc, g);
        return PI_ERR_NOMEM;
    }
    atomic_fetch_add(&c->refs, 1);
    g->core = c;
    *out = g;
    return PI_OK;
}

int pi_grammar_reset(pi_grammar *g) {
    if (!g)
        return PI_ERR_INVALID_ARG;
    pi_error_clear(&g->err);
    return gm_reset(&g->m); /* the start fitted the limits at creation */
}

int pi_grammar_complete(const pi_grammar *g) {
    return g ? gm_complete(&g->m) : 0;
}

static int feed(pi_grammar *g, const char *text, size_t len, const char *what) {
    size_t at = 0;
    int st = gm_feed(&g->m, (const uint8_t *)text, len, &at);
    if (st == PI_ERR_RANGE)
        return pi_error_set(&g->err, st, "%s: byte %zu (0x%02x) cannot continue the grammar", what,
                            at, (unsigned)(uint8_t)text[at]);
    if (st == PI_ERR_UNSUPPORTED)
        return pi_error_set(&g->err, st,
                            "%s: byte %zu needs more parse stacks than the "
                            "limits allow (too ambiguous or nested too deep)",
                            what, at);
    if (st != PI_OK)
        return pi_error_set(&g->err, st, "%s: out of memory", what);
    return PI_OK;
}

int pi_grammar_accept_text(pi_grammar *g, const char *text, size_t len) {
    if (!g || (!text && len))
        return PI_ERR_INVALID_ARG;
    return feed(g, text ? text : "", len, "text");
}

int pi_grammar_accept(pi_grammar *g, int32_t token) {
    if (!g)
        return PI_ERR_INVALID_ARG;
    const struct gcore *c = g->core;
    if (!c->model)
        return pi_error_set(&g->err, PI_ERR_INVALID_ARG,
                            "a grammar made without a model "
                            "takes text, not tokens");
    if (token < 0 || token >= c->n_vocab)
        return pi_error_set(&g->err, PI_ERR_INVALID_ARG, "token %d outside the vocabulary",
                            (int)token);
    if (c->eog[token]) {
        if (gm_complete(&g->m))
            return PI_OK;
        return pi_error_set(&g->err, PI_ERR_RANGE,
                            "end of generation before the grammar is complete");
    }
    const uint32_t from = c->piece_at[token], to = c->piece_at[token + 1];
    if (from == to)
        return pi_error_set(&g->err, PI_ERR_RANGE,
                            "token %d has no text, so it cannot continue the grammar", (int)token);
    return feed(g, c->pieces + from, to - from, "token");
}

int64_t pi_grammar_mask(pi_grammar *g, float *logits, int64_t n_vocab) {
    if (!g || !logits)
        return PI_ERR_INVALID_ARG;
    const struct gcore *c = g->core;
    if (!c->model || n_vocab != c->n_vocab)
        return pi_error_set(&g->err, PI_ERR_INVALID_ARG,
                            "n_vocab %lld is not the grammar's model's", (long long)n_vocab);
    memset(g->ok, 0, (size_t)n_vocab);
    int64_t n = gm_mask(&g->m, &c->trie, g->ok);
    if (n == PI_ERR_UNSUPPORTED)
        return pi_error_set(&g->err, (int)n,
                            "the mask needs more work than the limit "
                            "allows (the grammar is too ambiguous here)");
    if (n < 0)
        return pi_error_set(&g->err, (int)n, "out of memory");
    const int done = gm_complete(&g->m);
    for (int64_t t = 0; t < n_vocab; t++) {
        if (c->eog[t]) {
            g->ok[t] = (uint8_t)done;
            n += done;
        }
        if (!g->ok[t])
            logits[t] = -INFINITY;
    }
    return n;
}
