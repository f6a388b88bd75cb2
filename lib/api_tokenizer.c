/* api_tokenizer.c -- public tokenizer functions: argument checks, then delegation to
 * model/vocab.h. None of them writes to the model, so a model can be shared by
 * threads; per-call memory comes from the model's allocator. */
#include <string.h>

#include "model/model.h"
#include "model/vocab.h"

/* Longest text pi_tokenize takes: keeps every index of the tokenizers in int32. */
#define TOKENIZE_MAX_LEN ((size_t)1 << 28)

struct pi_detok {
    const struct pi_model *model;
    uint32_t flags;
    struct pi_detok_state st;
};

int64_t pi_tokenize(const pi_model *m, const char *text, size_t len, int32_t *tokens, size_t cap,
                    uint32_t flags) {
    if (!m || (!text && len) || (!tokens && cap) ||
        (flags & ~(uint32_t)(PI_TOKENIZE_ADD_SPECIAL | PI_TOKENIZE_PARSE_SPECIAL)) ||
        len > TOKENIZE_MAX_LEN)
        return PI_ERR_INVALID_ARG;
    if (!m->vocab)
        return PI_ERR_UNSUPPORTED;
    struct tok_out o = {tokens, cap, 0};
    PI_TRY(vocab_tokenize(m->vocab, text ? text : "", len, (flags & PI_TOKENIZE_PARSE_SPECIAL) != 0,
                          (flags & PI_TOKENIZE_ADD_SPECIAL) != 0, &o));
    return o.n;
}

struct piece_buf {
    char *buf;
    size_t cap;
    uint64_t len;
};

static void piece_to_buf(void *ctx, const char *bytes, size_t n) {
    struct piece_buf *p = ctx;
    if (p->cap > 0 && p->len < p->cap - 1) {
        uint64_t room = p->cap - 1 - p->len;
        memcpy(p->buf + p->len, bytes, (size_t)(n < room ? n : room));
    }
    p->len += n;
}

int64_t pi_token_to_piece(const pi_model *m, int32_t token, char *buf, size_t cap, uint32_t flags) {
    if (!m || (!buf && cap) || (flags & ~(uint32_t)PI_PIECE_SPECIAL))
        return PI_ERR_INVALID_ARG;
    if (!m->vocab)
        return PI_ERR_UNSUPPORTED;
    if (token < 0 || token >= m->vocab->n_tokens)
        return PI_ERR_RANGE;
    struct piece_buf p = {buf, cap, 0};
    vocab_piece(m->vocab, token, flags, piece_to_buf, &p);
    if (cap > 0)
        buf[p.len < cap ? p.len : cap - 1] = '\0';
    return (int64_t)p.len;
}

int32_t pi_model_token_bos(const pi_model *m) {
    return m && m->vocab ? m->vocab->bos : -1;
}

int32_t pi_model_token_eos(const pi_model *m) {
    return m && m->vocab ? m->vocab->eos : -1;
}

int pi_model_token_is_eog(const pi_model *m, int32_t token) {
    if (!m || !m->vocab || token < 0 || token >= m->vocab->n_tokens)
        return 0;
    return vocab_is_eog(m->vocab, token);
}

int64_t pi_model_chat_template(const pi_model *m, char *buf, size_t cap) {
    if (!m || (!buf && cap))
        return PI_ERR_INVALID_ARG;
    const struct gguf_kv *kv = gguf_find_kv(&m->gguf, "tokenizer.chat_template");
    if (!kv)
        return PI_ERR_NOT_FOUND;
    if (kv->type != PI_META_STRING)
        return PI_ERR_TYPE;
    const char *s;
    uint64_t len;
    PI_TRY(gguf_kv_str(&m->gguf, kv, 0, &s, &len));
    if (cap > 0) {
        size_t n = len < cap - 1 ? (size_t)len : cap - 1;
        memcpy(buf, s, n);
        buf[n] = '\0';
    }
    return (int64_t)len;
}

int pi_detok_create(const pi_model *m, uint32_t flags, pi_detok **out) {
    if (out)
        *out = NULL;
    if (!m || !out || (flags & ~(uint32_t)PI_PIECE_SPECIAL))
        return PI_ERR_INVALID_ARG;
    if (!m->vocab)
        return PI_ERR_UNSUPPORTED;
    struct pi_detok *d = pi_calloc(&m->alloc, 1, sizeof *d);
    if (!d)
        return PI_ERR_NOMEM;
    d->model = m;
    d->flags = flags;
    *out = d;
    return PI_OK;
}

int pi_detok_push(pi_detok *d, int32_t token, pi_text_fn fn, void *user) {
    if (!d || !fn)
        return PI_ERR_INVALID_ARG;
    const struct pi_vocab *v = d->model->vocab;
    if (token < 0 || token >= v->n_tokens)
        return PI_ERR_RANGE;
    return detok_push(v, &d->st, d->flags, token, fn, user);
}

int pi_detok_flush(pi_detok *d, pi_text_fn fn, void *user) {
    if (!d || !fn)
        return PI_ERR_INVALID_ARG;
    return detok_flush(&d->st, fn, user);
}

void pi_detok_destroy(pi_detok *d) {
    if (d)
        pi_free(&d->model->alloc, d);
}
