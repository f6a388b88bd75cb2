/* vocab.c -- loading and checking the tokenizer metadata of a GGUF file, lookups,
 * and the top level of tokenizing (special-token splitting, BOS/EOS).
 *
 * Keys read (all under tokenizer.ggml.):
 *   model            string, "llama" or "gpt2" ("none"/"no_vocab" or absent: no
 *                    tokenizer); anything else is PI_ERR_UNSUPPORTED
 *   tokens           array of strings, at least one
 *   scores           optional array of f32, one per token, no NaN
 *   token_type       optional array of i32, one per token, values 0..6
 *   merges           array of strings "a b" (gpt2 only, required there); a, b and ab
 *                    must all be tokens
 *   bos_token_id, eos_token_id, unknown_token_id, padding_token_id, eot_token_id,
 *   eom_token_id     optional integers in [0, n_tokens); -1 means none
 *   add_bos_token, add_eos_token, add_space_prefix
 *                    optional bools. Defaults: llama adds BOS and a space prefix
 *                    (Gemma's files set add_space_prefix false), gpt2 neither, except
 *                    BOS for the Llama 3 and Tekken pre-tokenizers (as llama.cpp reads
 *                    files without the key); no EOS
 *   pre              optional string: the pre-tokenizer of gpt2 (tok_bpe.c lists the
 *                    names); an unknown one is PI_ERR_UNSUPPORTED
 * Byte tokens (type 6) must read exactly "<0xHH>" with two hex digits. Anything else
 * malformed is PI_ERR_FORMAT with a message naming the key. */
#include "model/vocab.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define KEY "tokenizer.ggml."

/* ---- sorting and searching ---------------------------------------------------------- */

typedef int (*cmp_fn)(const void *ctx, const void *a, const void *b);

static void swap_elems(unsigned char *a, unsigned char *b, size_t sz) {
    unsigned char tmp[16];
    assert(sz <= sizeof tmp);
    memcpy(tmp, a, sz);
    memcpy(a, b, sz);
    memcpy(b, tmp, sz);
}

static void sift_down(unsigned char *base, size_t root, size_t n, size_t sz, cmp_fn cmp,
                      const void *ctx) {
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && cmp(ctx, base + child * sz, base + (child + 1) * sz) < 0)
            child++;
        if (cmp(ctx, base + root * sz, base + child * sz) >= 0)
            return;
        swap_elems(base + root * sz, base + child * sz, sz);
        root = child;
    }
}

/* Heapsort: O(n log n) whatever the input, no extra memory, a context for cmp. */
static void heap_sort(void *vbase, size_t n, size_t sz, cmp_fn cmp, const void *ctx) {
    unsigned char *base = vbase;
    if (n < 2)
        return;
    for (size_t i = n / 2; i-- > 0;)
        sift_down(base, i, n, sz, cmp, ctx);
    for (size_t end = n - 1; end > 0; end--) {
        swap_elems(base, base + end * sz, sz);
        sift_down(base, 0, end, sz, cmp, ctx);
    }
}

static int cmp_text(const char *a, size_t alen, const char *b, size_t blen) {
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

static uint64_t text_prefix(const char *s, size_t len) {
    uint64_t k = 0;
    for (size_t i = 0; i < 8; i++)
        k = k << 8 | (i < len ? (unsigned char)s[i] : 0u);
    return k;
}

/* Orders as cmp_text does: a prefix that differs decides, as bytes would. */
static int cmp_keyed(const struct pi_token *tokens, const struct pi_text_key *k,
                     uint64_t prefix, const char *s, size_t len) {
    if (k->prefix != prefix)
        return k->prefix < prefix ? -1 : 1;
    const struct pi_token *t = &tokens[k->id];
    return cmp_text(t->text, t->len, s, len);
}

static int cmp_text_keys(const void *ctx, const void *a, const void *b) {
    const struct pi_token *t = ctx;
    const struct pi_text_key *x = a, *y = b;
    int c = cmp_keyed(t, x, y->prefix, t[y->id].text, t[y->id].len);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

static int cmp_merges(const void *ctx, const void *a, const void *b) {
    (void)ctx;
    const struct pi_merge *x = a, *y = b;
    if (x->left != y->left)
        return x->left < y->left ? -1 : 1;
    if (x->right != y->right)
        return x->right < y->right ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Control and user-defined tokens: longer first, then lower id. */
static int cmp_specials(const void *ctx, const void *a, const void *b) {
    const struct pi_token *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t[x].len != t[y].len)
        return t[x].len > t[y].len ? -1 : 1;
    return (x > y) - (x < y);
}

static int cmp_i32(const void *ctx, const void *a, const void *b) {
    (void)ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int32_t vocab_find(const struct pi_vocab *v, const char *s, size_t len) {
    uint64_t prefix = text_prefix(s, len);
    size_t lo = 0, hi = (size_t)v->n_tokens;
    while (lo < hi) { /* lower bound: the first (lowest id) of equal texts */
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_keyed(v->tokens, &v->by_text[mid], prefix, s, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < (size_t)v->n_tokens && v->by_text[lo].prefix == prefix) {
        const struct pi_token *t = &v->tokens[v->by_text[lo].id];
        if (t->len == len && (len == 0 || memcmp(t->text, s, len) == 0))
            return v->by_text[lo].id;
    }
    return -1;
}

const struct pi_merge *vocab_find_merge(const struct pi_vocab *v, int32_t left, int32_t right) {
    size_t lo = 0, hi = (size_t)v->n_merges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct pi_merge *m = &v->merges[mid];
        if (m->left < left || (m->left == left && m->right < right))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < (size_t)v->n_merges && v->merges[lo].left == left && v->merges[lo].right == right)
        return &v->merges[lo];
    return NULL;
}

int vocab_is_eog(const struct pi_vocab *v, int32_t id) {
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return 1;
    return 0;
}

/* ---- loading ------------------------------------------------------------------------ */

struct loader {
    const struct gguf_file *f;
    struct pi_vocab *v;
    const struct pi_logger *lg;
    struct pi_error *err;
};

/* The array `name` with n_tokens elements of elem_type, or NULL when absent. */
static int token_array(struct loader *L, const char *name, uint32_t elem_type, const char *what,
                       const struct gguf_kv **out) {
    *out = gguf_find_kv(L->f, name);
    if (!*out)
        return PI_OK;
    if ((*out)->type != PI_META_ARRAY || (*out)->elem_type != elem_type)
        PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '%s' must be an array of %s", name, what);
    if ((*out)->n != (uint64_t)L->v->n_tokens)
        PI_FAIL(L->err, PI_ERR_FORMAT,
                "metadata '%s' has %llu entries but there are %ld "
                "tokens",
                name, (unsigned long long)(*out)->n, (long)L->v->n_tokens);
    return PI_OK;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int read_tokens(struct loader *L) {
    struct pi_vocab *v = L->v;
    const struct gguf_kv *kv = gguf_find_kv(L->f, KEY "tokens");
    if (!kv)
        PI_FAIL(L->err, PI_ERR_FORMAT,
                "metadata '" KEY "tokens' is missing (the file names "
                "a tokenizer model)");
    if (kv->type != PI_META_ARRAY || kv->elem_type != PI_META_STRING)
        PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '" KEY "tokens' must be an array of strings");
    if (kv->n == 0)
        PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '" KEY "tokens' is empty");
    if (kv->n > (uint64_t)INT32_MAX / 2)
        PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '" KEY "tokens' has too many entries (%llu)",
                (unsigned long long)kv->n);
    v->n_tokens = (int32_t)kv->n;
    v->tokens = pi_calloc(&v->alloc, (size_t)kv->n, sizeof *v->tokens);
    if (!v->tokens)
        PI_FAIL(L->err, PI_ERR_NOMEM, "out of memory for %ld tokens", (long)v->n_tokens);
    for (int32_t i = 0; i < v->n_tokens; i++) {
        const char *s;
        uint64_t len;
        PI_TRY(gguf_kv_str(L->f, kv, (uint64_t)i, &s, &len));
        if (len > UINT32_MAX)
            PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '" KEY "tokens'[%ld] is too long", (long)i);
        v->tokens[i].text = s;
        v->tokens[i].len = (uint32_t)len;
        v->tokens[i].type = PI_TOK_NORMAL;
    }

    const struct gguf_kv *sc;
    PI_TRY(token_array(L, KEY "scores", PI_META_F32, "f32", &sc));
    for (int32_t i = 0; sc && i < v->n_tokens; i++) {
        double d;
        PI_TRY(gguf_kv_float(L->f, sc, (uint64_t)i, &d));
        if (isnan(d))
            PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '" KEY "scores'[%ld] is NaN", (long)i);
        v->tokens[i].score = (float)d;
    }

    const struct gguf_kv *tt;
    PI_TRY(token_array(L, KEY "token_type", PI_META_I32, "i32", &tt));
    for (int32_t i = 0; tt && i < v->n_tokens; i++) {
        int64_t t;
        PI_TRY(gguf_kv_int(L->f, tt, (uint64_t)i, &t));
        if (t < 0 || t > PI_TOK_BYTE)
            PI_FAIL(L->err, PI_ERR_FORMAT,
                    "metadata '" KEY "token_type'[%ld] is %lld (0..6 "
                    "are token types)",
                    (long)i, (long long)t);
        v->tokens[i].type = (uint8_t)(t == 0 ? PI_TOK_NORMAL : t);
    }

    for (int b = 0; b < 256; b++)
        v->byte_token[b] = -1;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        struct pi_token *t = &v->tokens[i];
        if (t->type != PI_TOK_BYTE)
            continue;
        int hi = t->len == 6 ? hexval(t->text[3]) : -1;
        int lo = t->len == 6 ? hexval(t->text[4]) : -1;
        if (t->len != 6 || memcmp(t->text, "<0x", 3) != 0 || t->text[5] != '>' || hi < 0 || lo < 0)
            PI_FAIL(L->err, PI_ERR_FORMAT,
                    "metadata '" KEY "tokens'[%ld] is a byte token "
                    "(" KEY "token_type 6) but reads '%.*s', not <0xHH>",
                    (long)i, (int)(t->len > 24 ? 24 : t->len), t->text);
        t->byte = (uint8_t)(hi * 16 + lo);
        if (v->byte_token[t->byte] < 0)
            v->byte_token[t->byte] = i;
    }

    v->by_text = pi_calloc(&v->alloc, (size_t)v->n_tokens, sizeof *v->by_text);
    if (!v->by_text)
        PI_FAIL(L->err, PI_ERR_NOMEM, "out of memory for the token index");
    for (int32_t i = 0; i < v->n_tokens; i++) {
        v->by_text[i].prefix = text_prefix(v->tokens[i].text, v->tokens[i].len);
        v->by_text[i].id = i;
    }
    heap_sort(v->by_text, (size_t)v->n_tokens, sizeof *v->by_text, cmp_text_keys, v->tokens);
    return PI_OK;
}

static int read_id(struct loader *L, const char *name, int32_t *out) {
    *out = -1;
    const struct gguf_kv *kv = gguf_find_kv(L->f, name);
    if (!kv)
        return PI_OK;
    int64_t id = 0;
    switch (kv->type) {
    case PI_META_U8:
    case PI_META_I8:
    case PI_META_U16:
    case PI_META_I16:
    case PI_META_U32:
    case PI_META_I32:
    case PI_META_U64:
    case PI_META_I64:
        break;
    default:
        PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '%s' must be an integer", name);
    }
    if (gguf_kv_int(L->f, kv, 0, &id) < 0 || id < -1 || id >= L->v->n_tokens)
        PI_FAIL(L->err, PI_ERR_FORMAT,
                "metadata '%s' is out of range: the vocabulary has "
                "%ld tokens",
                name, (long)L->v->n_tokens);
    *out = (int32_t)id;
    return PI_OK;
}

static int read_flag(struct loader *L, const char *name, int dflt, int *out) {
    *out = dflt;
    const struct gguf_kv *kv = gguf_find_kv(L->f, name);
    if (!kv)
        return PI_OK;
    if (kv->type != PI_META_BOOL)
        PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '%s' must be a bool", name);
    int64_t b = 0;
    PI_TRY(gguf_kv_int(L->f, kv, 0, &b));
    *out = b != 0;
    return PI_OK;
}

static int read_merges(struct loader *L) {
    struct pi_vocab *v = L->v;
    const struct gguf_kv *kv = gguf_find_kv(L->f, KEY "merges");
    if (!kv)
        PI_FAIL(L->err, PI_ERR_FORMAT,
                "metadata '" KEY "merges' is missing (a gpt2 "
                "tokenizer needs it)");
    if (kv->type != PI_META_ARRAY || kv->elem_type != PI_META_STRING)
        PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '" KEY "merges' must be an array of strings");
    if (kv->n > (uint64_t)INT32_MAX / 2)
        PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '" KEY "merges' has too many entries");
    v->n_merges = (int32_t)kv->n;
    v->merges = pi_calloc(&v->alloc, kv->n ? (size_t)kv->n : 1, sizeof *v->merges);
    if (!v->merges)
        PI_FAIL(L->err, PI_ERR_NOMEM, "out of memory for %ld merges", (long)v->n_merges);
    /* The merged text a+b is looked up in a buffer as long as the longest token. */
    uint32_t maxlen = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        maxlen = v->tokens[i].len > maxlen ? v->tokens[i].len : maxlen;
    char *cat = pi_malloc(&v->alloc, (size_t)maxlen + 1);
    if (!cat)
        PI_FAIL(L->err, PI_ERR_NOMEM, "out of memory");
    int status = PI_OK;
    for (int32_t i = 0; i < v->n_merges && status == PI_OK; i++) {
        const char *s;
        uint64_t len;
        status = gguf_kv_str(L->f, kv, (uint64_t)i, &s, &len);
        if (status < 0)
            break;
        /* Split at the first space after the first byte: a token may be a lone
         * space in principle, never an empty string. */
        const char *sp = len > 1 ? memchr(s + 1, ' ', (size_t)len - 1) : NULL;
        if (!sp || sp + 1 == s + len) {
            status = pi_error_set(L->err, PI_ERR_FORMAT,
                                  "metadata '" KEY "merges'[%ld] "
                                  "does not read 'a b': '%.*s'",
                                  (long)i, (int)(len > 40 ? 40 : len), s);
            break;
        }
        size_t la = (size_t)(sp - s), lb = (size_t)len - la - 1;
        struct pi_merge *m = &v->merges[i];
        m->left = vocab_find(v, s, la);
        m->right = vocab_find(v, sp + 1, lb);
        m->result = -1;
        if (m->left >= 0 && m->right >= 0 && la + lb <= maxlen) {
            memcpy(cat, s, la);
            memcpy(cat + la, sp + 1, lb);
            m->result = vocab_find(v, cat, la + lb);
        }
        m->rank = i;
        if (m->left < 0 || m->right < 0 || m->result < 0)
            status = pi_error_set(L->err, PI_ERR_FORMAT,
                                  "metadata '" KEY "merges'[%ld] "
                                  "'%.*s': %s is not a token",
                                  (long)i, (int)(len > 40 ? 40 : len), s,
                                  m->left < 0    ? "the left part"
                                  : m->right < 0 ? "the right part"
                                                 : "the merged text");
    }
    pi_free(&v->alloc, cat);
    PI_TRY(status);
    heap_sort(v->merges, (size_t)v->n_merges, sizeof *v->merges, cmp_merges, NULL);
    return PI_OK;
}

/* The GPT-2 byte-level mapping: printable bytes stand for themselves, the others
 * (control characters, space, DEL, NBSP, soft hyphen...) take code points 256, 257,
 * ... in byte order, so that every byte has a visible one-character text. */
static void build_byte_map(struct pi_vocab *v) {
    uint16_t next = 256;
    for (int i = 0; i < (int)(sizeof v->cp_byte / sizeof v->cp_byte[0]); i++)
        v->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        v->byte_cp[b] = printable ? (uint16_t)b : next++;
        v->cp_byte[v->byte_cp[b]] = (int16_t)b;
    }
    for (int b = 0; b < 256; b++) {
        char u[2];
        size_t n;
        uint16_t cp = v->byte_cp[b];
        if (cp < 0x80) {
            u[0] = (char)cp;
            n = 1;
        } else {
            u[0] = (char)(0xc0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3f));
            n = 2;
        }
        v->byte_char_token[b] = vocab_find(v, u, n);
    }
}

static int is_end_marker(const struct pi_token *t) {
    static const char *const markers[] = {
        "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>", "<end_of_turn>", "<|end|>", NULL};
    for (const char *const *m = markers; *m; m++)
        if (strlen(*m) == t->len && memcmp(*m, t->text, t->len) == 0)
            return 1;
    return 0;
}

static int build_lists(struct loader *L) {
    struct pi_vocab *v = L->v;
    int32_t n_special = 0, n_eog = 3;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        const struct pi_token *t = &v->tokens[i];
        if ((t->type == PI_TOK_CONTROL || t->type == PI_TOK_USER) && t->len > 0)
            n_special++;
        if (t->type == PI_TOK_CONTROL && is_end_marker(t))
            n_eog++;
    }
    v->specials = pi_calloc(&v->alloc, (size_t)n_special + 1, sizeof *v->specials);
    v->eog = pi_calloc(&v->alloc, (size_t)n_eog, sizeof *v->eog);
    if (!v->specials || !v->eog)
        PI_FAIL(L->err, PI_ERR_NOMEM, "out of memory");
    int32_t cand[3] = {v->eos, v->eot, v->eom};
    for (int k = 0; k < 3; k++)
        if (cand[k] >= 0)
            v->eog[v->n_eog++] = cand[k];
    for (int32_t i = 0; i < v->n_tokens; i++) {
        const struct pi_token *t = &v->tokens[i];
        if ((t->type == PI_TOK_CONTROL || t->type == PI_TOK_USER) && t->len > 0) {
            v->specials[v->n_specials++] = i;
            v->n_user += t->type == PI_TOK_USER;
        }
        if (t->type == PI_TOK_CONTROL && is_end_marker(t))
            v->eog[v->n_eog++] = i;
    }
    heap_sort(v->specials, (size_t)v->n_specials, sizeof *v->specials, cmp_specials, v->tokens);
    heap_sort(v->eog, (size_t)v->n_eog, sizeof *v->eog, cmp_i32, NULL);
    int32_t w = 0;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (w == 0 || v->eog[w - 1] != v->eog[i])
            v->eog[w++] = v->eog[i];
    v->n_eog = w;
    return PI_OK;
}

static int load(struct loader *L, enum pi_vocab_kind kind) {
    struct pi_vocab *v = L->v;
    v->kind = kind;
    PI_TRY(read_tokens(L));
    PI_TRY(read_id(L, KEY "bos_token_id", &v->bos));
    PI_TRY(read_id(L, KEY "eos_token_id", &v->eos));
    PI_TRY(read_id(L, KEY "unknown_token_id", &v->unk));
    PI_TRY(read_id(L, KEY "padding_token_id", &v->pad));
    PI_TRY(read_id(L, KEY "eot_token_id", &v->eot));
    PI_TRY(read_id(L, KEY "eom_token_id", &v->eom));
    int spm = kind == PI_VOCAB_SPM;
    PI_TRY(read_flag(L, KEY "add_eos_token", 0, &v->add_eos));
    PI_TRY(read_flag(L, KEY "add_space_prefix", spm, &v->add_space_prefix));
    PI_TRY(build_lists(L));
    if (kind == PI_VOCAB_SPM)
        PI_TRY(read_flag(L, KEY "add_bos_token", 1, &v->add_bos));
    if (kind == PI_VOCAB_BPE) {
        PI_TRY(read_merges(L));
        build_byte_map(v);
        const struct gguf_kv *pre = gguf_find_kv(L->f, KEY "pre");
        const char *name = NULL;
        uint64_t nlen = 0;
        if (pre) {
            if (pre->type != PI_META_STRING)
                PI_FAIL(L->err, PI_ERR_FORMAT, "metadata '" KEY "pre' must be a string");
            PI_TRY(gguf_kv_str(L->f, pre, 0, &name, &nlen));
        }
        PI_TRY(tok_bpe_init(v, name, (size_t)nlen, L->lg, L->err));
        PI_TRY(read_flag(L, KEY "add_bos_token", v->pre_adds_bos, &v->add_bos));
    }
    return PI_OK;
}

static int str_is(const char *s, uint64_t len, const char *lit) {
    return strlen(lit) == len && memcmp(s, lit, (size_t)len) == 0;
}

int vocab_load(struct pi_vocab **out, const struct gguf_file *f, const struct pi_allocator *a,
               const struct pi_logger *lg, struct pi_error *err) {
    *out = NULL;
    const struct gguf_kv *kv = gguf_find_kv(f, KEY "model");
    if (!kv)
        return PI_OK;
    if (kv->type != PI_META_STRING)
        PI_FAIL(err, PI_ERR_FORMAT, "metadata '" KEY "model' must be a string");
    const char *name;
    uint64_t len;
    PI_TRY(gguf_kv_str(f, kv, 0, &name, &len));
    enum pi_vocab_kind kind;
    if (str_is(name, len, "llama")) {
        kind = PI_VOCAB_SPM;
    } else if (str_is(name, len, "gpt2")) {
        kind = PI_VOCAB_BPE;
    } else if (str_is(name, len, "none") || str_is(name, len, "no_vocab")) {
        return PI_OK;
    } else {
        PI_FAIL(err, PI_ERR_UNSUPPORTED,
                "metadata '" KEY "model' is '%.*s': this tokenizer "
                "is not supported (llama, gpt2 are)",
                (int)(len > 40 ? 40 : len), name);
    }
    struct pi_vocab *v = pi_calloc(a, 1, sizeof *v);
    if (!v)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory");
    v->alloc = *a;
    struct loader L = {f, v, lg, err};
    int status = load(&L, kind);
    if (status < 0) {
        vocab_free(v);
        return status;
    }
    *out = v;
    return PI_OK;
}

void vocab_free(struct pi_vocab *v) {
    if (!v)
        return;
    struct pi_allocator a = v->alloc;
    tok_bpe_free(v);
    pi_free(&a, v->tokens);
    pi_free(&a, v->by_text);
    pi_free(&a, v->merges);
    pi_free(&a, v->eog);
    pi_free(&a, v->specials);
    pi_free(&a, v);
}

/* ---- tokenizing: scratch memory, special tokens, BOS/EOS ------------------------- */

int tok_scratch_reserve(struct tok_scratch *s, int which, size_t size) {
    if (s->cap[which] >= size)
        return PI_OK;
    size_t cap = s->cap[which] ? s->cap[which] : 256;
    while (cap < size)
        cap = cap > (size_t)-1 / 2 ? size : cap * 2;
    void *p = pi_malloc(s->alloc, cap);
    if (!p)
        return PI_ERR_NOMEM;
    pi_free(s->alloc, s->buf[which]);
    s->buf[which] = p;
    s->cap[which] = cap;
    return PI_OK;
}

static int fragment(const struct pi_vocab *v, const char *text, size_t len, int first,
                    struct tok_scratch *s, struct tok_out *o) {
    if (v->kind == PI_VOCAB_SPM)
        return tok_spm_fragment(v, text, len, first, s, o);
    return tok_bpe_fragment(v, text, len, s, o);
}

/* The longest control or user-defined token that starts at p, or -1; with
 * user_only, the longest user-defined one. */
static int32_t special_at(const struct pi_vocab *v, const char *p, size_t left, int user_only) {
    for (int32_t i = 0; i < v->n_specials; i++) {
        const struct pi_token *t = &v->tokens[v->specials[i]];
        if (user_only && t->type != PI_TOK_USER)
            continue;
        if (t->len <= left && t->text[0] == p[0] && memcmp(t->text, p, t->len) == 0)
            return v->specials[i];
    }
    return -1;
}

/* User-defined tokens are split out of the raw text always (as Hugging Face splits
 * its non-special added tokens, and sentencepiece its user-defined pieces: Gemma's runs
 * of spaces and newlines are such tokens); control tokens only with parse_special. */
int vocab_tokenize(const struct pi_vocab *v, const char *text, size_t len, int parse_special,
                   int add_special, struct tok_out *o) {
    struct tok_scratch s;
    memset(&s, 0, sizeof s);
    s.alloc = &v->alloc;
    if (add_special && v->add_bos && v->bos >= 0)
        tok_out_push(o, v->bos);
    int status = PI_OK;
    size_t start = 0; /* start of the pending raw text */
    int first = 1;
    if ((parse_special && v->n_specials > 0) || v->n_user > 0) {
        /* Which bytes can start a special token: most positions are skipped at once. */
        uint8_t starts[256] = {0};
        for (int32_t i = 0; i < v->n_specials; i++) {
            const struct pi_token *t = &v->tokens[v->specials[i]];
            if (parse_special || t->type == PI_TOK_USER)
                starts[(unsigned char)t->text[0]] = 1;
        }
        size_t i = 0;
        while (i < len && status == PI_OK) {
            int32_t id = starts[(unsigned char)text[i]]
                             ? special_at(v, text + i, len - i, !parse_special)
                             : -1;
            if (id < 0) {
                i++;
                continue;
            }
            if (i > start)
                status = fragment(v, text + start, i - start, first, &s, o);
            tok_out_push(o, id);
            /* The text after a control token starts anew (SPM: the space prefix
             * again); after a user-defined one it goes on, as in sentencepiece. */
            first = v->tokens[id].type == PI_TOK_CONTROL;
            i += v->tokens[id].len;
            start = i;
        }
    }
    if (status == PI_OK && len > start)
        status = fragment(v, text + start, len - start, first, &s, o);
    if (status == PI_OK && add_special && v->add_eos && v->eos >= 0)
        tok_out_push(o, v->eos);
    tok_scratch_free(&s);
    return status;
}
