/* detok.c -- the bytes a token stands for, and streaming assembly of those bytes into
 * whole UTF-8 characters.
 *
 * Pieces:
 *   normal, unused   SPM: the text with U+2581 read as a space. BPE: each GPT-2
 *                    byte-level character read back as its byte (a character outside
 *                    the mapping is kept as it is)
 *   byte (<0xNN>)    the byte
 *   user-defined     the text as it is
 *   control, unknown the text with PI_PIECE_SPECIAL, else nothing
 *
 * The stream (pi_detok) passes on only well-formed UTF-8 (Unicode's table 3-7: no
 * overlong forms, no surrogates, nothing above U+10FFFF). It holds back a proper
 * prefix of a well-formed sequence until the sequence completes; a byte that cannot
 * continue or start one becomes U+FFFD, one per maximal ill-formed subpart (as
 * Unicode recommends and Python's decoder does). */
#include <string.h>

#include "model/vocab.h"

#define CHUNK 256

struct chunker {
    piece_sink_fn sink;
    void *ctx;
    char buf[CHUNK];
    size_t n;
};

static void ch_put(struct chunker *c, const char *p, size_t n) {
    if (c->n + n > CHUNK) {
        c->sink(c->ctx, c->buf, c->n);
        c->n = 0;
    }
    if (n > CHUNK) { /* only whole texts of huge tokens come here */
        c->sink(c->ctx, p, n);
        return;
    }
    memcpy(c->buf + c->n, p, n);
    c->n += n;
}

static void ch_end(struct chunker *c) {
    if (c->n)
        c->sink(c->ctx, c->buf, c->n);
    c->n = 0;
}

static void piece_spm(const struct pi_token *t, struct chunker *c) {
    const char *p = t->text, *end = t->text + t->len;
    while (p < end) {
        const char *u = NULL;
        for (const char *q = p; q + 3 <= end; q++)
            if (memcmp(q, "\xe2\x96\x81", 3) == 0) {
                u = q;
                break;
            }
        if (!u) {
            ch_put(c, p, (size_t)(end - p));
            break;
        }
        if (u > p)
            ch_put(c, p, (size_t)(u - p));
        ch_put(c, " ", 1);
        p = u + 3;
    }
}

static void piece_bpe(const struct pi_vocab *v, const struct pi_token *t, struct chunker *c) {
    const unsigned char *p = (const unsigned char *)t->text;
    size_t n = t->len;
    for (size_t i = 0; i < n;) {
        unsigned cp = p[i];
        size_t cl = 1;
        if (cp >= 0xc2 && cp <= 0xdf && i + 1 < n && (p[i + 1] & 0xc0) == 0x80) {
            cp = ((cp & 0x1fu) << 6) | (p[i + 1] & 0x3fu);
            cl = 2;
        } else if (cp >= 0x80) {
            cp = 0xffff; /* not a mapped character: copy its bytes as they are */
            while (i + cl < n && (p[i + cl] & 0xc0) == 0x80 && cl < 4)
                cl++;
        }
        if (cp < sizeof v->cp_byte / sizeof v->cp_byte[0] && v->cp_byte[cp] >= 0) {
            char b = (char)v->cp_byte[cp];
            ch_put(c, &b, 1);
        } else {
            ch_put(c, (const char *)p + i, cl);
        }
        i += cl;
    }
}

void vocab_piece(const struct pi_vocab *v, int32_t id, uint32_t flags, piece_sink_fn sink,
                 void *ctx) {
    const struct pi_token *t = &v->tokens[id];
    struct chunker c;
    c.sink = sink;
    c.ctx = ctx;
    c.n = 0;
    switch (t->type) {
    case PI_TOK_CONTROL:
    case PI_TOK_UNKNOWN:
        if (flags & PI_PIECE_SPECIAL)
            ch_put(&c, t->text, t->len);
        break;
    case PI_TOK_USER:
        ch_put(&c, t->text, t->len);
        break;
    case PI_TOK_BYTE: {
        char b = (char)t->byte;
        ch_put(&c, &b, 1);
        break;
    }
    default:
        if (v->kind == PI_VOCAB_SPM)
            piece_spm(t, &c);
        else
            piece_bpe(v, t, &c);
        break;
    }
    ch_end(&c);
}

/* ---- streaming ---------------------------------------------------------------------- */

struct stream {
    struct pi_detok_state *st;
    pi_text_fn fn;
    void *user;
    char out[CHUNK];
    size_t n;
    int aborted;
};

static void deliver(struct stream *s) {
    if (s->n && !s->aborted && s->fn(s->user, s->out, s->n))
        s->aborted = 1;
    s->n = 0;
}

/* Append one complete character (or U+FFFD). */
static void put_char(struct stream *s, const void *p, size_t n) {
    if (s->n + n > sizeof s->out)
        deliver(s);
    memcpy(s->out + s->n, p, n);
    s->n += n;
}

static void put_bad(struct stream *s) {
    put_char(s, "\xef\xbf\xbd", 3);
}

static void feed(struct stream *s, unsigned char b) {
    struct pi_detok_state *st = s->st;
    if (st->npend > 0) {
        unsigned char lo = 0x80, hi = 0xbf;
        if (st->npend == 1) {
            unsigned char lead = st->pend[0];
            if (lead == 0xe0)
                lo = 0xa0;
            else if (lead == 0xed)
                hi = 0x9f;
            else if (lead == 0xf0)
                lo = 0x90;
            else if (lead == 0xf4)
                hi = 0x8f;
        }
        if (b >= lo && b <= hi) {
            st->pend[st->npend++] = b;
            if (st->npend == st->need) {
                put_char(s, st->pend, (size_t)st->need);
                st->npend = 0;
            }
            return;
        }
        put_bad(s); /* the held prefix can never complete */
        st->npend = 0;
    }
    if (b < 0x80) {
        put_char(s, &b, 1);
        return;
    }
    int need = b >= 0xc2 && b <= 0xdf   ? 2
               : b >= 0xe0 && b <= 0xef ? 3
               : b >= 0xf0 && b <= 0xf4 ? 4
                                        : 0;
    if (!need) {
        put_bad(s);
        return;
    }
    st->pend[0] = b;
    st->npend = 1;
    st->need = need;
}

static void stream_sink(void *ctx, const char *bytes, size_t n) {
    struct stream *s = ctx;
    for (size_t i = 0; i < n && !s->aborted; i++)
        feed(s, (unsigned char)bytes[i]);
}

int detok_push(const struct pi_vocab *v, struct pi_detok_state *st, uint32_t flags, int32_t id,
               pi_text_fn fn, void *user) {
    struct stream s;
    s.st = st;
    s.fn = fn;
    s.user = user;
    s.n = 0;
    s.aborted = 0;
    vocab_piece(v, id, flags, stream_sink, &s);
    if (s.aborted)
        st->npend = 0; /* stopped inside a long piece: the rest of it is dropped */
    deliver(&s);
    return s.aborted ? PI_ERR_ABORTED : PI_OK;
}

int detok_flush(struct pi_detok_state *st, pi_text_fn fn, void *user) {
    struct stream s;
    s.st = st;
    s.fn = fn;
    s.user = user;
    s.n = 0;
    s.aborted = 0;
    if (st->npend > 0)
        put_bad(&s);
    st->npend = 0;
    deliver(&s);
    return s.aborted ? PI_ERR_ABORTED : PI_OK;
}
