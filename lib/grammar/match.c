/* match.c -- the grammar recogniser and the vocabulary mask.
 *
 * The state is a set of parse stacks whose tops are character classes, plus the UTF-8
 * bytes of a code point begun (all stacks read the same bytes, so that part is shared).
 * Reading a code point replaces every stack whose top class holds it by the closure of
 * the element after that class: rule references are expanded into their alternatives,
 * finished alternatives pop to their parent frame, until each stack again has a class
 * on top (or is empty: the text may end). A reference that is the last element of its
 * alternative is a tail call (the new alternatives go on with the caller's parent), so
 * repetitions x* run in constant stack depth. The frames one closure visits are marked
 * (an epoch per step), so a frame reached twice is expanded once.
 *
 * Frames are interned in a hash table with chaining; a new frame goes to the head of its
 * chain, so frames made after some point can be dropped again in reverse order (the mask
 * does, after each branch of its walk). After a committed step the frames still in use
 * are compacted (ids are in topological order: parents before children).
 *
 * Within a code point, a byte keeps the stacks whose class meets the range of code points
 * the bytes so far can still become (overlongs, surrogates and values above U+10FFFF are
 * refused at the byte that makes them so), so the mask prunes inside multi-byte
 * characters too.
 *
 * The mask: a depth-first walk of the trie of all token pieces from the current state;
 * an edge is one byte step, a dead state cuts the whole subtree, and every token at a
 * node reached alive may come next. Shared prefixes are read once. */
#include <string.h>

#include "grammar/grammar.h"

enum { ST_DEAD = 0, ST_ALIVE = 1 };

static uint32_t hash2(uint32_t pos, uint32_t parent) {
    uint32_t h = pos * 0x9E3779B1u ^ (parent + 0x7F4A7C15u) * 0x85EBCA77u;
    return h ^ (h >> 15);
}

static int grow(const struct pi_allocator *a, void **p, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap)
        return PI_OK;
    uint32_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *np = pi_malloc(a, (size_t)nc * elem);
    if (!np)
        return PI_ERR_NOMEM;
    if (*cap)
        memcpy(np, *p, (size_t)*cap * elem);
    pi_free(a, *p);
    *p = np;
    *cap = nc;
    return PI_OK;
}

static void rehash(struct gmatch *m) {
    memset(m->bucket, 0xFF, (size_t)m->n_bucket * sizeof *m->bucket);
    for (uint32_t i = 0; i < m->n_nodes; i++) {
        uint32_t h = hash2(m->nodes[i].pos, m->nodes[i].parent) & (m->n_bucket - 1);
        m->nodes[i].next = m->bucket[h];
        m->bucket[h] = i;
    }
}

/* The id of frame (pos, parent), made if new; GN_NONE when out of memory or past a
 * limit (*st says which). */
static uint32_t intern(struct gmatch *m, uint32_t pos, uint32_t parent, int *st) {
    uint32_t h = hash2(pos, parent);
    for (uint32_t i = m->bucket[h & (m->n_bucket - 1)]; i != GN_NONE; i = m->nodes[i].next)
        if (m->nodes[i].pos == pos && m->nodes[i].parent == parent)
            return i;
    uint32_t depth = parent == GN_NONE ? 1 : m->nodes[parent].depth + 1;
    if (depth > GRAM_MAX_DEPTH || m->n_nodes >= GRAM_MAX_NODES) {
        *st = PI_ERR_UNSUPPORTED;
        return GN_NONE;
    }
    if (m->n_nodes == m->cap_nodes) {
        uint32_t cap = m->cap_nodes, cap2 = cap, cap3 = cap;
        if (grow(m->a, (void **)&m->nodes, &cap, m->n_nodes + 1, sizeof *m->nodes) ||
            grow(m->a, (void **)&m->mark, &cap2, cap, sizeof *m->mark) ||
            grow(m->a, (void **)&m->remap, &cap3, cap, sizeof *m->remap)) {
            *st = PI_ERR_NOMEM;
            return GN_NONE;
        }
        for (uint32_t i = m->cap_nodes; i < cap2; i++)
            m->mark[i] = 0;
        m->cap_nodes = cap;
        if (cap > 2 * m->n_bucket) {
            uint32_t *nb = pi_malloc(m->a, (size_t)cap * sizeof *nb);
            if (!nb) {
                *st = PI_ERR_NOMEM;
                return GN_NONE;
            }
            pi_free(m->a, m->bucket);
            m->bucket = nb;
            m->n_bucket = cap;
            rehash(m);
        }
    }
    uint32_t id = m->n_nodes++;
    uint32_t b = h & (m->n_bucket - 1);
    m->nodes[id] = (struct gnode){pos, parent, m->bucket[b], depth};
    m->bucket[b] = id;
    return id;
}

/* Drop the frames made since there were n of them (newest first: each is then the
 * head of its chain). */
static void rollback(struct gmatch *m, uint32_t n) {
    while (m->n_nodes > n) {
        const struct gnode *d = &m->nodes[--m->n_nodes];
        m->bucket[hash2(d->pos, d->parent) & (m->n_bucket - 1)] = d->next;
    }
}

static int set_push(struct gmatch *m, uint32_t id) {
    PI_TRY(grow(m->a, (void **)&m->sets, &m->cap_sets, m->n_sets + 1, sizeof *m->sets));
    m->sets[m->n_sets++] = id;
    return PI_OK;
}

static int work_push(struct gmatch *m, uint32_t *n, uint32_t pos, uint32_t parent) {
    PI_TRY(grow(m->a, (void **)&m->work, &m->cap_work, *n + 2, sizeof *m->work));
    m->work[(*n)++] = pos;
    m->work[(*n)++] = parent;
    return PI_OK;
}

static void new_epoch(struct gmatch *m) {
    if (++m->epoch == 0) {
        if (m->cap_nodes)
            memset(m->mark, 0, (size_t)m->cap_nodes * sizeof *m->mark);
        m->epoch = 1;
    }
}

/* Add to `out` (whose tops are the last out->n entries of the set arena) the stacks that
 * frame (pos, parent) expands to. */
static int closure(struct gmatch *m, uint32_t pos, uint32_t parent, struct gset *out) {
    const struct gram *g = m->g;
    uint32_t n = 0;
    int st = PI_OK;
    PI_TRY(work_push(m, &n, pos, parent));
    while (n) {
        parent = m->work[--n];
        pos = m->work[--n];
        if (++m->step_work > GRAM_MAX_WORK)
            return PI_ERR_UNSUPPORTED;
        if (m->mask_left && --m->mask_left == 0)
            return PI_ERR_ABORTED; /* the mask's whole budget: see gm_mask */
        uint32_t op = g->code[pos];
        if (op <= G_ALT) { /* the alternative is done */
            if (parent == GN_NONE)
                out->can_end = 1;
            else
                PI_TRY(work_push(m, &n, m->nodes[parent].pos, m->nodes[parent].parent));
            continue;
        }
        uint32_t id = intern(m, pos, parent, &st);
        if (id == GN_NONE)
            return st;
        if (m->mark[id] == m->epoch)
            continue;
        m->mark[id] = m->epoch;
        if (op == G_CLASS) {
            if (out->n >= GRAM_MAX_STACKS)
                return PI_ERR_UNSUPPORTED;
            PI_TRY(set_push(m, id));
            out->n++;
            continue;
        }
        const uint32_t r = g->code[pos + 1], next = pos + 2;
        uint32_t cont = parent;
        if (g->code[next] > G_ALT && (cont = intern(m, next, parent, &st)) == GN_NONE)
            return st;
        for (uint32_t k = g->alt_at[r + 1]; k-- > g->alt_at[r];) /* first alternative first */
            PI_TRY(work_push(m, &n, g->alts[k], cont));
    }
    return PI_OK;
}

static int class_has(const struct gram *g, uint32_t pos, uint32_t cp) {
    const uint32_t n = g->code[pos + 1], *r = g->code + pos + 2;
    for (uint32_t i = 0; i < n; i++) {
        if (cp < r[2 * i])
            return 0;
        if (cp <= r[2 * i + 1])
            return 1;
    }
    return 0;
}

static int class_meets(const struct gram *g, uint32_t pos, uint32_t lo, uint32_t hi) {
    const uint32_t n = g->code[pos + 1], *r = g->code + pos + 2;
    for (uint32_t i = 0; i < n; i++)
        if (r[2 * i] <= hi && r[2 * i + 1] >= lo)
            return 1;
    return 0;
}

/* State `in` reads code point cp: `out` (appended to the set arena). */
static int step_cp(struct gmatch *m, const struct gset *in, uint32_t cp, struct gset *out) {
    const struct gram *g = m->g;
    *out = (struct gset){.off = m->n_sets};
    new_epoch(m);
    m->step_work = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        const struct gnode nd = m->nodes[m->sets[in->off + i]];
        if (class_has(g, nd.pos, cp))
            PI_TRY(closure(m, nd.pos + gram_class_len(g, nd.pos), nd.parent, out));
    }
    return out->n || out->can_end ? ST_ALIVE : ST_DEAD;
}

/* State `in` reads byte b: ST_ALIVE with `out` appended to the set arena, ST_DEAD, or
 * a negative status. */
static int step_byte(struct gmatch *m, const struct gset *in, uint8_t b, struct gset *out) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    struct gset t = *in;
    if (in->need == 0) {
        if (b < 0x80)
            return step_cp(m, in, b, out);
        if (b >= 0xC2 && b <= 0xDF)
            t.len = 2, t.acc = b & 0x1Fu;
        else if (b >= 0xE0 && b <= 0xEF)
            t.len = 3, t.acc = b & 0x0Fu;
        else if (b >= 0xF0 && b <= 0xF4)
            t.len = 4, t.acc = b & 0x07u;
        else
            return ST_DEAD;
        t.need = (uint8_t)(t.len - 1);
    } else {
        if ((b & 0xC0) != 0x80)
            return ST_DEAD;
        if (in->need == in->len - 1) { /* the second byte: no overlong, surrogate, > 10FFFF */
            if ((in->len == 3 && in->acc == 0x0 && b < 0xA0) ||
                (in->len == 3 && in->acc == 0xD && b > 0x9F) ||
                (in->len == 4 && in->acc == 0x0 && b < 0x90) ||
                (in->len == 4 && in->acc == 0x4 && b > 0x8F))
                return ST_DEAD;
        }
        t.acc = (in->acc << 6) | (b & 0x3Fu);
        t.need = (uint8_t)(in->need - 1);
        if (t.need == 0)
            return step_cp(m, in, t.acc, out);
    }
    /* inside a code point: keep the stacks whose class meets what it can become */
    uint32_t lo = t.acc << (6 * t.need), hi = lo | ((1u << (6 * t.need)) - 1);
    if (lo < min_cp[t.len])
        lo = min_cp[t.len];
    if (hi > 0x10FFFF)
        hi = 0x10FFFF;
    if (t.len == 3 && t.need == 2 && t.acc == 0xD)
        hi = 0xD7FF;
    t.off = m->n_sets;
    t.n = 0;
    t.can_end = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        uint32_t id = m->sets[in->off + i];
        if (class_meets(m->g, m->nodes[id].pos, lo, hi)) {
            PI_TRY(set_push(m, id));
            t.n++;
        }
    }
    *out = t;
    return t.n ? ST_ALIVE : ST_DEAD;
}

/* Make `s` (at the end of the set arena) the current state: its tops move to the start
 * of the arena and only the frames they reach are kept, renumbered in order. */
static void commit(struct gmatch *m, const struct gset *s) {
    if (s->n)
        memmove(m->sets, m->sets + s->off, (size_t)s->n * sizeof *m->sets);
    m->cur = *s;
    m->cur.off = 0;
    m->n_sets = s->n;
    new_epoch(m);
    for (uint32_t i = 0; i < s->n; i++)
        for (uint32_t id = m->sets[i]; id != GN_NONE && m->mark[id] != m->epoch;
             id = m->nodes[id].parent)
            m->mark[id] = m->epoch;
    uint32_t k = 0;
    for (uint32_t id = 0; id < m->n_nodes; id++) {
        if (m->mark[id] != m->epoch)
            continue;
        struct gnode nd = m->nodes[id];
        nd.parent = nd.parent == GN_NONE ? GN_NONE : m->remap[nd.parent];
        m->remap[id] = k;
        m->nodes[k++] = nd;
    }
    for (uint32_t i = 0; i < s->n; i++)
        m->sets[i] = m->remap[m->sets[i]];
    m->n_nodes = k;
    rehash(m);
    new_epoch(m); /* the marks above must not look like a closure's */
}

int gm_reset(struct gmatch *m) {
    m->n_nodes = 0;
    m->n_sets = 0;
    rehash(m);
    struct gset s = {.off = 0};
    new_epoch(m);
    const struct gram *g = m->g;
    for (uint32_t k = g->alt_at[g->root]; k < g->alt_at[g->root + 1]; k++) {
        int st = closure(m, g->alts[k], GN_NONE, &s);
        if (st != PI_OK)
            return st;
    }
    commit(m, &s);
    return PI_OK;
}

int gm_init(struct gmatch *m, const struct gram *g, const struct pi_allocator *a) {
    memset(m, 0, sizeof *m);
    m->g = g;
    m->a = a;
    m->n_bucket = 256;
    m->bucket = pi_malloc(a, (size_t)m->n_bucket * sizeof *m->bucket);
    if (!m->bucket)
        return PI_ERR_NOMEM;
    return gm_reset(m);
}

void gm_free(struct gmatch *m) {
    if (!m)
        return;
    pi_free(m->a, m->nodes);
    pi_free(m->a, m->bucket);
    pi_free(m->a, m->mark);
    pi_free(m->a, m->remap);
    pi_free(m->a, m->sets);
    pi_free(m->a, m->work);
    pi_free(m->a, m->frames);
    memset(m, 0, sizeof *m);
}

int gm_copy(struct gmatch *d, const struct gmatch *s) {
    memset(d, 0, sizeof *d);
    d->g = s->g;
    d->a = s->a;
    d->n_bucket = s->n_bucket;
    d->bucket = pi_malloc(d->a, (size_t)d->n_bucket * sizeof *d->bucket);
    uint32_t cap = 0, cap2 = 0, cap3 = 0;
    if (!d->bucket || grow(d->a, (void **)&d->nodes, &cap, s->n_nodes + 1, sizeof *d->nodes) ||
        grow(d->a, (void **)&d->mark, &cap2, cap, sizeof *d->mark) ||
        grow(d->a, (void **)&d->remap, &cap3, cap, sizeof *d->remap) ||
        grow(d->a, (void **)&d->sets, &d->cap_sets, s->n_sets + 1, sizeof *d->sets)) {
        gm_free(d);
        return PI_ERR_NOMEM;
    }
    d->cap_nodes = cap;
    memset(d->mark, 0, (size_t)cap * sizeof *d->mark);
    if (s->n_nodes)
        memcpy(d->nodes, s->nodes, (size_t)s->n_nodes * sizeof *d->nodes);
    d->n_nodes = s->n_nodes;
    if (s->n_sets)
        memcpy(d->sets, s->sets, (size_t)s->n_sets * sizeof *d->sets);
    d->n_sets = s->n_sets;
    d->cur = s->cur;
    d->epoch = 1;
    rehash(d);
    return PI_OK;
}

int gm_complete(const struct gmatch *m) {
    return m->cur.can_end && m->cur.need == 0;
}

int gm_feed(struct gmatch *m, const uint8_t *bytes, size_t n, size_t *at) {
    /* Short texts (a token's piece) step in the arenas and commit once; on a refusal
     * the frames and sets made are dropped. A long text commits every 64 bytes, so
     * the arenas stay small, and restores a copy made first when refused. */
    enum { CHUNK = 64 };
    struct gmatch save;
    const int long_text = n > CHUNK;
    if (long_text && gm_copy(&save, m) != PI_OK)
        return PI_ERR_NOMEM;
    struct gset s = m->cur;
    uint32_t keep_nodes = m->n_nodes, keep_sets = m->n_sets;
    int st = PI_OK;
    size_t i;
    for (i = 0; i < n; i++) {
        struct gset t;
        st = step_byte(m, &s, bytes[i], &t);
        if (st <= 0)
            break;
        s = t;
        if (long_text && (i + 1) % CHUNK == 0) {
            commit(m, &s);
            s = m->cur;
        }
    }
    if (st > 0 || n == 0) {
        if (n)
            commit(m, &s);
        if (long_text)
            gm_free(&save);
        return PI_OK;
    }
    if (at)
        *at = i;
    if (long_text) {
        gm_free(m);
        *m = save;
    } else {
        rollback(m, keep_nodes);
        m->n_sets = keep_sets;
    }
    return st == ST_DEAD ? PI_ERR_RANGE : st;
}

struct frame {
    uint32_t tnode, child;
    uint32_t node_mark, set_mark;
    struct gset st;
};

int64_t gm_mask(struct gmatch *m, const struct gtrie *t, uint8_t *ok) {
    if (t->n == 0)
        return 0;
    int st = grow(m->a, &m->frames, &m->cap_frames, t->max_depth + 2, sizeof(struct frame));
    if (st != PI_OK)
        return st;
    struct frame *f = m->frames;
    const uint32_t base_nodes = m->n_nodes, base_sets = m->n_sets;
    int64_t count = 0;
    uint32_t d = 0;
    f[0] = (struct frame){0, t->first[0], base_nodes, base_sets, m->cur};
    m->mask_left = GRAM_MAX_MASK_WORK;
    for (;;) {
        struct frame *top = &f[d];
        uint32_t c = top->child;
        if (c == GN_NONE) {
            if (d == 0)
                break;
            d--;
            rollback(m, f[d].node_mark);
            m->n_sets = f[d].set_mark;
            continue;
        }
        top->child = t->sibling[c];
        struct gset next;
        st = step_byte(m, &top->st, t->byte[c], &next);
        if (st == PI_ERR_NOMEM || st == PI_ERR_ABORTED) {
            rollback(m, base_nodes);
            m->n_sets = base_sets;
            m->mask_left = 0;
            return st == PI_ERR_ABORTED ? PI_ERR_UNSUPPORTED : st;
        }
        if (st == ST_ALIVE) {
            for (uint32_t tok = t->tok_head[c]; tok != GN_NONE; tok = t->tok_next[tok]) {
                count += !ok[tok];
                ok[tok] = 1;
            }
            if (t->first[c] != GN_NONE && (next.n || next.need)) {
                f[++d] = (struct frame){c, t->first[c], m->n_nodes, m->n_sets, next};
                continue;
            }
        }
        rollback(m, top->node_mark);
        m->n_sets = top->set_mark;
    }
    rollback(m, base_nodes);
    m->n_sets = base_sets;
    m->mask_left = 0;
    return count;
}
