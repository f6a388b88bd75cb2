/* tok_spm.c -- SentencePiece-style BPE over piece scores (tokenizer.ggml.model =
 * "llama"), as SentencePiece encodes with a BPE model:
 *
 *  - a fragment that starts the text or follows a special token gets a leading space
 *    when tokenizer.ggml.add_space_prefix is set (the default for this kind);
 *  - every space becomes U+2581 (LOWER ONE EIGHTH BLOCK);
 *  - the text starts as one symbol per UTF-8 character (a byte that is not part of a
 *    well-formed character is a symbol of its own);
 *  - repeatedly, of all adjacent pairs whose concatenation is a normal or
 *    user-defined token, the one with the highest score (the leftmost on a tie) is
 *    merged;
 *  - a remaining symbol that is not a token is written as its bytes' <0xNN> tokens
 *    (byte fallback); without byte tokens for all its bytes, as one unknown token;
 *    without an unknown token it is dropped. */
#include <string.h>

#include "model/vocab.h"

struct sym {
    int32_t off, len; /* bytes of the escaped text; len 0: merged away */
    int32_t prev, next;
};

struct pair {
    float score;
    int32_t left, right, size;
};

static int pair_before(const struct pair *a, const struct pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct pair *h, int32_t *n, struct pair c) {
    int32_t i = (*n)++;
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!pair_before(&c, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = c;
}

static struct pair heap_pop(struct pair *h, int32_t *n) {
    struct pair top = h[0], last = h[--*n];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && pair_before(&h[c + 1], &h[c]))
            c++;
        if (!pair_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

static void try_pair(const struct pi_vocab *v, const char *text, const struct sym *sy, int32_t left,
                     int32_t right, struct pair *heap, int32_t *nheap) {
    if (left < 0 || right < 0)
        return;
    int32_t size = sy[left].len + sy[right].len;
    int32_t id = vocab_find(v, text + sy[left].off, (size_t)size);
    if (id < 0)
        return;
    uint8_t t = v->tokens[id].type;
    if (t != PI_TOK_NORMAL && t != PI_TOK_USER)
        return;
    heap_push(heap, nheap, (struct pair){v->tokens[id].score, left, right, size});
}

static void emit_symbol(const struct pi_vocab *v, const char *p, int32_t len, struct tok_out *o) {
    int32_t id = vocab_find(v, p, (size_t)len);
    if (id >= 0 && v->tokens[id].type != PI_TOK_BYTE && v->tokens[id].type != PI_TOK_UNKNOWN) {
        tok_out_push(o, id);
        return;
    }
    int all_bytes = 1;
    for (int32_t i = 0; i < len; i++)
        all_bytes &= v->byte_token[(unsigned char)p[i]] >= 0;
    if (all_bytes) {
        for (int32_t i = 0; i < len; i++)
            tok_out_push(o, v->byte_token[(unsigned char)p[i]]);
    } else if (v->unk >= 0) {
        tok_out_push(o, v->unk);
    }
}

int tok_spm_fragment(const struct pi_vocab *v, const char *text, size_t len, int first,
                     struct tok_scratch *s, struct tok_out *o) {
    if (len == 0)
        return PI_OK;
    size_t n = 3 * (len + 1);
    PI_TRY(tok_scratch_reserve(s, 2, n));
    char *t = s->buf[2];
    size_t k = 0;
    if (first && v->add_space_prefix) {
        memcpy(t, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(t + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            t[k++] = text[i];
        }
    }
    PI_TRY(tok_scratch_reserve(s, 0, k * sizeof(struct sym)));
    PI_TRY(tok_scratch_reserve(s, 1, 3 * k * sizeof(struct pair)));
    struct sym *sy = s->buf[0];
    struct pair *heap = s->buf[1];
    int32_t ns = 0, nheap = 0;
    for (size_t i = 0; i < k;) {
        int32_t cl = utf8_char_len((const unsigned char *)t + i, k - i);
        sy[ns] = (struct sym){(int32_t)i, cl, ns - 1, -1};
        if (ns > 0)
            sy[ns - 1].next = ns;
        ns++;
        i += (size_t)cl;
    }
    for (int32_t i = 0; i + 1 < ns; i++)
        try_pair(v, t, sy, i, i + 1, heap, &nheap);
    while (nheap > 0) {
        struct pair c = heap_pop(heap, &nheap);
        struct sym *l = &sy[c.left], *r = &sy[c.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != c.size)
            continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            sy[r->next].prev = c.left;
        try_pair(v, t, sy, l->prev, c.left, heap, &nheap);
        try_pair(v, t, sy, c.left, l->next, heap, &nheap);
    }
    for (int32_t i = 0; i >= 0; i = sy[i].next)
        emit_symbol(v, t + sy[i].off, sy[i].len, o);
    return PI_OK;
}
