/* The tokenizer against references: every string of the committed corpus tokenized
 * as Hugging Face `tokenizers` does with SmolLM2's vocabulary (and with the same
 * vocabulary under the gpt2 / llama3 / qwen2 pre-tokenizers), and as the
 * sentencepiece package does with a small SentencePiece BPE vocabulary; detokenizing
 * back; the streaming detokenizer never splitting a UTF-8 sequence; hostile
 * tokenizer metadata failing the open with PI_ERR_FORMAT naming the key; argument
 * checks; allocation failure at every step; several threads at once.
 *
 * Usage: test_tokenizer FIXTURE_DIR [SMOLLM2_GGUF]
 *   FIXTURE_DIR  tests/fixtures/tokenizer (smollm2.json, spm.json, spm_tiny.gguf)
 *   SMOLLM2_GGUF the real model; without it (or "") the tests that need it are
 *                skipped, unless PI_REQUIRE_SMOLLM2=1 makes that a failure. */
#include <math.h>
#include <pthread.h>
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
#include "model/gguf.h"
#include "model/model.h"
#include "model/vocab.h"
#include "powerinfer.h"
#include "runtime/fp16.h"

static const char *g_fixtures;
static const char *g_smollm2; /* NULL when not available */

/* ---- a small JSON reader for the fixture files ------------------------------------ */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
    enum jtype t;
    int64_t num;
    char *s; /* J_STR: bytes (may contain NUL), len */
    size_t len;
    struct jv *items; /* J_ARR / J_OBJ values */
    char **keys;      /* J_OBJ */
    size_t n;
};

struct jp {
    const char *p, *end;
};

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    assert_non_null(q);
    return q;
}

static void jskip(struct jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

static void put_utf8(char **buf, size_t *len, size_t *cap, uint32_t cp) {
    if (*len + 4 > *cap) {
        *cap = *cap * 2 + 8;
        *buf = xrealloc(*buf, *cap);
    }
    char *o = *buf + *len;
    if (cp < 0x80) {
        o[0] = (char)cp;
        *len += 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        *len += 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        *len += 3;
    } else {
        o[0] = (char)(0xf0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[3] = (char)(0x80 | (cp & 0x3f));
        *len += 4;
    }
}

static uint32_t hex4(struct jp *j) {
    assert_true(j->end - j->p >= 4);
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        v = v * 16 + (uint32_t)(c >= '0' && c <= '9' ? c - '0' : (c | 32) - 'a' + 10);
    }
    return v;
}

static void jstring(struct jp *j, char **out, size_t *outlen) {
    assert_true(*j->p == '"');
    j->p++;
    size_t cap = 16, len = 0;
    char *buf = xrealloc(NULL, cap);
    while (j->p < j->end && *j->p != '"') {
        uint32_t cp;
        if (*j->p == '\\') {
            j->p++;
            char e = *j->p++;
            switch (e) {
            case 'n':
                cp = '\n';
                break;
            case 't':
                cp = '\t';
                break;
            case 'r':
                cp = '\r';
                break;
            case 'b':
                cp = '\b';
                break;
            case 'f':
                cp = '\f';
                break;
            case 'u':
                cp = hex4(j);
                if (cp >= 0xd800 && cp < 0xdc00 && j->p[0] == '\\' && j->p[1] == 'u') {
                    j->p += 2;
                    uint32_t lo = hex4(j);
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                break;
            default:
                cp = (uint32_t)(unsigned char)e;
                break;
            }
            put_utf8(&buf, &len, &cap, cp);
        } else {
            if (len + 1 > cap) {
                cap *= 2;
                buf = xrealloc(buf, cap);
            }
            buf[len++] = *j->p++;
        }
    }
    assert_true(j->p < j->end);
    j->p++;
    buf = xrealloc(buf, len + 1);
    buf[len] = '\0';
    *out = buf;
    *outlen = len;
}

static void jvalue(struct jp *j, struct jv *v) {
    jskip(j);
    memset(v, 0, sizeof *v);
    assert_true(j->p < j->end);
    char c = *j->p;
    if (c == '"') {
        v->t = J_STR;
        jstring(j, &v->s, &v->len);
    } else if (c == '[' || c == '{') {
        int obj = c == '{';
        v->t = obj ? J_OBJ : J_ARR;
        j->p++;
        size_t cap = 0;
        for (;;) {
            jskip(j);
            if (*j->p == (obj ? '}' : ']')) {
                j->p++;
                break;
            }
            if (v->n == cap) {
                cap = cap * 2 + 4;
                v->items = xrealloc(v->items, cap * sizeof *v->items);
                if (obj)
                    v->keys = xrealloc(v->keys, cap * sizeof *v->keys);
            }
            if (obj) {
                size_t kl;
                jstring(j, &v->keys[v->n], &kl);
                jskip(j);
                assert_true(*j->p == ':');
                j->p++;
            }
            jvalue(j, &v->items[v->n++]);
            jskip(j);
            if (*j->p == ',')
                j->p++;
        }
    } else if (c == 't' || c == 'f') {
        v->t = J_BOOL;
        v->num = c == 't';
        j->p += c == 't' ? 4 : 5;
    } else if (c == 'n') {
        v->t = J_NULL;
        j->p += 4;
    } else {
        v->t = J_NUM;
        char *e;
        v->num = strtoll(j->p, &e, 10);
        assert_true(e > j->p);
        j->p = e;
    }
}

static void jfree(struct jv *v) {
    for (size_t i = 0; i < v->n; i++) {
        jfree(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->s);
}

static const struct jv *jfind(const struct jv *o, const char *key) {
    for (size_t i = 0; o->t == J_OBJ && i < o->n; i++)
        if (!strcmp(o->keys[i], key))
            return &o->items[i];
    return NULL;
}

static const struct jv *jget(const struct jv *o, const char *key) {
    for (size_t i = 0; o->t == J_OBJ && i < o->n; i++)
        if (!strcmp(o->keys[i], key))
            return &o->items[i];
    fail_msg("fixture key '%s' missing", key);
    return NULL;
}

static struct jv *load_json(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_fixtures, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = xrealloc(NULL, (size_t)n);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    struct jv *v = xrealloc(NULL, sizeof *v);
    struct jp j = {buf, buf + n};
    jvalue(&j, v);
    free(buf);
    return v;
}

static void free_json(struct jv *v) {
    jfree(v);
    free(v);
}

/* ---- helpers ---------------------------------------------------------------------- */

struct logcap {
    int warnings;
    char last[512];
};

static void log_fn(void *user, int level, const char *msg) {
    struct logcap *c = user;
    if (c && level == PI_LOG_WARN) {
        c->warnings++;
        snprintf(c->last, sizeof c->last, "%s", msg);
    }
}

static int open_model(const char *path, pi_model **m, char *msg, size_t cap, struct logcap *lc) {
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = msg;
    p.errbuf_cap = cap;
    p.log_fn = log_fn;
    p.log_user = lc;
    p.log_level = PI_LOG_WARN;
    msg[0] = '\0';
    return pi_model_open(path, &p, m);
}

static pi_model *must_open(const char *path) {
    pi_model *m = NULL;
    char msg[512];
    int st = open_model(path, &m, msg, sizeof msg, NULL);
    if (st != PI_OK)
        fail_msg("cannot open %s: %d %s", path, st, msg);
    return m;
}

static void need_smollm2(void) {
    if (!g_smollm2) {
        const char *req = getenv("PI_REQUIRE_SMOLLM2");
        if (req && !strcmp(req, "1"))
            fail_msg("SmolLM2 model not available but PI_REQUIRE_SMOLLM2=1");
        skip();
    }
}

static char *spm_path(void) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/spm_tiny.gguf", g_fixtures);
    return path;
}

/* Tokenize into a new array (sized by a first call with cap 0). */
static int32_t *tokenize(const pi_model *m, const char *s, size_t len, uint32_t flags, int64_t *n) {
    *n = pi_tokenize(m, s, len, NULL, 0, flags);
    assert_true(*n >= 0);
    int32_t *ids = xrealloc(NULL, (size_t)(*n + 1) * sizeof *ids);
    ids[*n] = 0x7eadbeef;
    assert_int_equal(pi_tokenize(m, s, len, ids, (size_t)*n, flags), *n);
    assert_int_equal(ids[*n], 0x7eadbeef);
    return ids;
}

static int ids_equal(const int32_t *a, int64_t na, const struct jv *ref) {
    if (ref->t != J_ARR || (size_t)na != ref->n)
        return 0;
    for (int64_t i = 0; i < na; i++)
        if (a[i] != ref->items[i].num)
            return 0;
    return 1;
}

static void print_ids(const char *what, const int32_t *a, int64_t na, const struct jv *ref) {
    fprintf(stderr, "#   %s: ours [", what);
    for (int64_t i = 0; i < na && i < 40; i++)
        fprintf(stderr, "%s%d", i ? " " : "", a[i]);
    fprintf(stderr, "] reference [");
    for (size_t i = 0; i < ref->n && i < 40; i++)
        fprintf(stderr, "%s%lld", i ? " " : "", (long long)ref->items[i].num);
    fprintf(stderr, "]\n");
}

/* Concatenated pieces of ids. */
static char *detokenize(const pi_model *m, const int32_t *ids, int64_t n, uint32_t flags,
                        size_t *len) {
    size_t cap = 64, l = 0;
    char *out = xrealloc(NULL, cap);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = pi_token_to_piece(m, ids[i], NULL, 0, flags);
        assert_true(k >= 0);
        if (l + (size_t)k + 1 > cap) {
            cap = (l + (size_t)k + 1) * 2;
            out = xrealloc(out, cap);
        }
        assert_int_equal(pi_token_to_piece(m, ids[i], out + l, (size_t)k + 1, flags), k);
        l += (size_t)k;
    }
    out[l] = '\0';
    *len = l;
    return out;
}

/* Well-formed UTF-8 (Unicode table 3-7), complete. */
static int utf8_ok(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xbf;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            need = 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 3;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 4;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        } else {
            return 0;
        }
        if (i + need > n || p[i + 1] < lo || p[i + 1] > hi)
            return 0;
        for (size_t k = 2; k < need; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xbf)
                return 0;
        i += need;
    }
    return 1;
}

struct sink {
    char *buf;
    size_t len, cap;
    int calls;
    int bad_chunks; /* chunks that were not well-formed, complete UTF-8 */
    int stop_after; /* return non-zero on this call (1-based); 0 never */
};

static int sink_fn(void *user, const char *text, size_t len) {
    struct sink *s = user;
    s->calls++;
    assert_true(len > 0);
    if (!utf8_ok((const unsigned char *)text, len))
        s->bad_chunks++;
    if (s->len + len + 1 > s->cap) {
        s->cap = (s->len + len + 1) * 2;
        s->buf = xrealloc(s->buf, s->cap);
    }
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    s->buf[s->len] = '\0';
    return s->stop_after && s->calls == s->stop_after;
}

/* Stream ids through a pi_detok; returns the text (in s). */
static void stream(const pi_model *m, const int32_t *ids, int64_t n, uint32_t flags,
                   struct sink *s) {
    memset(s, 0, sizeof *s);
    pi_detok *d = NULL;
    assert_int_equal(pi_detok_create(m, flags, &d), PI_OK);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(pi_detok_push(d, ids[i], sink_fn, s), PI_OK);
    assert_int_equal(pi_detok_flush(d, sink_fn, s), PI_OK);
    pi_detok_destroy(d);
    if (!s->buf)
        s->buf = xrealloc(NULL, 1), s->buf[0] = '\0';
}

/* ---- SmolLM2 against Hugging Face ---------------------------------------------------- */

/* The number of strings whose ids differ from the reference (all reported); round
 * trips (variant NULL) must all hold. */
static int count_corpus_bpe(const pi_model *m, const struct jv *cases, const struct jv *variant,
                            const char *label) {
    int bad = 0, bad_rt = 0, checked_rt = 0;
    for (size_t i = 0; i < cases->n; i++) {
        const struct jv *c = &cases->items[i];
        const struct jv *ref = variant ? &variant->items[i] : c;
        const struct jv *text = jget(c, "text");
        int64_t n, ns;
        int32_t *ids = tokenize(m, text->s, text->len, 0, &n);
        int32_t *ids_sp = tokenize(m, text->s, text->len, PI_TOKENIZE_PARSE_SPECIAL, &ns);
        int ok = ids_equal(ids, n, jget(ref, "ids"));
        int ok_sp = ids_equal(ids_sp, ns, jget(ref, "ids_special"));
        if (!ok || !ok_sp) {
            bad++;
            fprintf(stderr, "# %s: mismatch on case %zu \"%.60s\"\n", label, i, text->s);
            if (!ok)
                print_ids("plain", ids, n, jget(ref, "ids"));
            if (!ok_sp)
                print_ids("special", ids_sp, ns, jget(ref, "ids_special"));
        }
        if (!variant) {
            /* ADD_SPECIAL changes nothing for SmolLM2: add_bos_token is false. */
            int64_t na;
            int32_t *ids_add = tokenize(m, text->s, text->len, PI_TOKENIZE_ADD_SPECIAL, &na);
            assert_int_equal(na, n);
            assert_memory_equal(ids_add, ids, (size_t)n * sizeof *ids);
            free(ids_add);
            if (jget(c, "roundtrip")->num) {
                checked_rt++;
                size_t l1, l2;
                char *t1 = detokenize(m, ids, n, 0, &l1);
                char *t2 = detokenize(m, ids_sp, ns, PI_PIECE_SPECIAL, &l2);
                struct sink s;
                stream(m, ids_sp, ns, PI_PIECE_SPECIAL, &s);
                int rt = l1 == text->len && !memcmp(t1, text->s, l1) && l2 == text->len &&
                         !memcmp(t2, text->s, l2) && s.len == text->len &&
                         !memcmp(s.buf, text->s, s.len) && s.bad_chunks == 0;
                if (!rt) {
                    bad_rt++;
                    fprintf(stderr,
                            "# %s: detokenizing case %zu \"%.60s\" does not give it "
                            "back\n",
                            label, i, text->s);
                }
                free(t1);
                free(t2);
                free(s.buf);
            }
        }
        free(ids);
        free(ids_sp);
    }
    size_t same = cases->n - (size_t)bad;
    fprintf(stderr, "# %s: %zu strings, %zu matching Hugging Face (%.1f%%)", label, cases->n, same,
            100.0 * (double)same / (double)cases->n);
    if (!variant)
        fprintf(stderr, "; %d of %d round trips ok", checked_rt - bad_rt, checked_rt);
    fprintf(stderr, "\n");
    assert_int_equal(bad_rt, 0);
    return bad;
}

static void check_corpus_bpe(const pi_model *m, const struct jv *cases, const struct jv *variant,
                             const char *label) {
    assert_int_equal(count_corpus_bpe(m, cases, variant, label), 0);
}

static void test_smollm2_corpus(void **state) {
    (void)state;
    need_smollm2();
    struct jv *fx = load_json("smollm2.json");
    pi_model *m = must_open(g_smollm2);
    assert_int_equal(jget(fx, "n_vocab")->num, pi_model_n_vocab(m));
    const struct jv *cases = jget(fx, "cases");
    assert_true(cases->n >= 250);
    check_corpus_bpe(m, cases, NULL, "smollm2");
    pi_model_close(m);
    free_json(fx);
}

/* ---- the same vocabulary under other pre-tokenizers ---------------------------------- */

/* A one-layer llama model with tiny F16 weights, n_vocab rows. */
static int add_tiny_llama(struct gguf_writer *w, int64_t n_vocab) {
    const int64_t E = 16, F = 32;
    uint32_t u;
    float eps = 1e-5f;
    int st = gguf_writer_add_string(w, "general.architecture", "llama");
#define U32(k, v) (u = (v), st = st < 0 ? st : gguf_writer_add_scalar(w, k, PI_META_U32, &u))
    U32("llama.context_length", 64);
    U32("llama.embedding_length", (uint32_t)E);
    U32("llama.block_count", 1);
    U32("llama.feed_forward_length", (uint32_t)F);
    U32("llama.attention.head_count", 2);
    U32("llama.attention.head_count_kv", 2);
#undef U32
    if (st == PI_OK)
        st = gguf_writer_add_scalar(w, "llama.attention.layer_norm_rms_epsilon", PI_META_F32, &eps);
    uint16_t *buf = calloc((size_t)(E * (n_vocab > F ? n_vocab : F)), 2);
    float *norm = calloc((size_t)E, sizeof *norm);
    assert_non_null(buf);
    assert_non_null(norm);
    for (int64_t i = 0; i < E * (n_vocab > F ? n_vocab : F); i++)
        buf[i] = pi_fp32_to_fp16((float)((i * 7919) % 101 - 50) * 1e-3f);
    for (int64_t i = 0; i < E; i++)
        norm[i] = 1.0f;
    struct {
        const char *name;
        int64_t ne0, ne1;
    } t[] = {{"token_embd.weight", E, n_vocab},  {"blk.0.attn_q.weight", E, E},
             {"blk.0.attn_k.weight", E, E},      {"blk.0.attn_v.weight", E, E},
             {"blk.0.attn_output.weight", E, E}, {"blk.0.ffn_gate.weight", E, F},
             {"blk.0.ffn_up.weight", E, F},      {"blk.0.ffn_down.weight", F, E}};
    for (size_t i = 0; i < sizeof t / sizeof t[0] && st == PI_OK; i++) {
        int64_t ne[2] = {t[i].ne0, t[i].ne1};
        st = gguf_writer_add_tensor(w, t[i].name, PI_TYPE_F16, 2, ne, buf);
    }
    const char *norms[] = {"output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"};
    for (size_t i = 0; i < 3 && st == PI_OK; i++) {
        int64_t ne[1] = {E};
        st = gguf_writer_add_tensor(w, norms[i], PI_TYPE_F32, 1, ne, norm);
    }
    free(buf);
    free(norm);
    return st;
}

static char g_tmp[512];

static const char *tmp_path(const char *tag) {
    snprintf(g_tmp, sizeof g_tmp, "%s/pi_test_tok_%s_%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", tag, (int)getpid());
    return g_tmp;
}

/* Copy a string array of the model into a writer. */
static void copy_str_array(struct gguf_writer *w, const pi_model *m, const char *key) {
    uint64_t n;
    int type, et;
    assert_int_equal(pi_model_meta_type(m, key, &type, &et, &n), PI_OK);
    char **v = calloc((size_t)n, sizeof *v);
    assert_non_null(v);
    for (uint64_t i = 0; i < n; i++) {
        int64_t len = pi_model_meta_arr_str(m, key, i, NULL, 0);
        assert_true(len >= 0);
        v[i] = malloc((size_t)len + 1);
        assert_non_null(v[i]);
        assert_int_equal(pi_model_meta_arr_str(m, key, i, v[i], (size_t)len + 1), len);
    }
    assert_int_equal(gguf_writer_add_string_array(w, key, (const char *const *)v, n), PI_OK);
    for (uint64_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* SmolLM2's tokenizer metadata with tokenizer.ggml.pre = pre, in a tiny model. */
static void write_smollm2_variant(const pi_model *src, const char *pre, const char *path) {
    struct gguf_writer *w;
    assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
    assert_int_equal(add_tiny_llama(w, pi_model_n_vocab(src)), PI_OK);
    assert_int_equal(gguf_writer_add_string(w, "tokenizer.ggml.model", "gpt2"), PI_OK);
    assert_int_equal(gguf_writer_add_string(w, "tokenizer.ggml.pre", pre), PI_OK);
    copy_str_array(w, src, "tokenizer.ggml.tokens");
    copy_str_array(w, src, "tokenizer.ggml.merges");
    uint64_t n = (uint64_t)pi_model_n_vocab(src);
    int32_t *types = calloc((size_t)n, sizeof *types);
    assert_non_null(types);
    for (uint64_t i = 0; i < n; i++) {
        int64_t t;
        assert_int_equal(pi_model_meta_arr_int(src, "tokenizer.ggml.token_type", i, &t), PI_OK);
        types[i] = (int32_t)t;
    }
    assert_int_equal(gguf_writer_add_array(w, "tokenizer.ggml.token_type", PI_META_I32, types, n),
                     PI_OK);
    free(types);
    uint32_t eos = 2;
    assert_int_equal(gguf_writer_add_scalar(w, "tokenizer.ggml.eos_token_id", PI_META_U32, &eos),
                     PI_OK);
    assert_int_equal(gguf_writer_write_file(w, path, GGUF_MAGIC_GGUF, NULL), PI_OK);
    gguf_writer_destroy(w);
}

static void test_pre_tokenizer_variants(void **state) {
    (void)state;
    need_smollm2();
    struct jv *fx = load_json("smollm2.json");
    pi_model *src = must_open(g_smollm2);
    const struct jv *cases = jget(fx, "cases"), *variants = jget(fx, "variants");
    const char *names[][2] = {
        {"gpt2", "gpt2"}, {"llama-bpe", "llama3"}, {"qwen2", "qwen2"}, {"no-such-pre", "gpt2"}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const char *path = tmp_path("variant");
        write_smollm2_variant(src, names[k][0], path);
        pi_model *m = NULL;
        char msg[512];
        struct logcap lc = {0, ""};
        int st = open_model(path, &m, msg, sizeof msg, &lc);
        remove(path);
        /* An unknown pre-tokenizer is refused, naming it: its tokens would differ. */
        if (!strcmp(names[k][0], "no-such-pre")) {
            assert_int_equal(st, PI_ERR_UNSUPPORTED);
            assert_null(m);
            assert_non_null(strstr(msg, "tokenizer.ggml.pre"));
            assert_non_null(strstr(msg, "no-such-pre"));
            continue;
        }
        if (st != PI_OK)
            fail_msg("variant %s: %d %s", names[k][0], st, msg);
        assert_int_equal(lc.warnings, 0);
        char label[64];
        snprintf(label, sizeof label, "pre=%s", names[k][0]);
        check_corpus_bpe(m, cases, jget(variants, names[k][1]), label);
        pi_model_close(m);
    }
    pi_model_close(src);
    free_json(fx);
}

/* ---- one trained tokenizer per pre-tokenizer name, against Hugging Face -------------- */

/* bpe_families.json: for each tokenizer.ggml.pre name of the families we open, a
 * tokenizer trained with that family's pre-tokenizer (bpe_<pre>.gguf) and the corpus
 * tokenized by Hugging Face. Needs no downloaded model. */
static void test_bpe_families(void **state) {
    (void)state;
    struct jv *fx = load_json("bpe_families.json");
    const struct jv *texts = jget(fx, "texts"), *fams = jget(fx, "families");
    assert_true(texts->n >= 250);
    assert_true(fams->n >= 8);
    int bad = 0;
    /* check_corpus_bpe reads the texts from objects with a "text" key */
    struct jv cases = {J_ARR, 0, NULL, 0, NULL, NULL, texts->n};
    cases.items = xrealloc(NULL, texts->n * sizeof *cases.items);
    char *key = "text";
    for (size_t i = 0; i < texts->n; i++) {
        struct jv *c = &cases.items[i];
        memset(c, 0, sizeof *c);
        c->t = J_OBJ;
        c->n = 1;
        c->keys = &key;
        c->items = (struct jv *)&texts->items[i];
    }
    for (size_t f = 0; f < fams->n; f++) {
        const struct jv *fam = &fams->items[f];
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", g_fixtures, jget(fam, "gguf")->s);
        pi_model *m = NULL;
        char msg[512];
        struct logcap lc = {0, ""};
        int st = open_model(path, &m, msg, sizeof msg, &lc);
        if (st != PI_OK)
            fail_msg("pre=%s: %d %s", fams->keys[f], st, msg);
        assert_int_equal(lc.warnings, 0);
        assert_int_equal(pi_model_n_vocab(m), jget(fam, "n_vocab")->num);
        char label[64];
        snprintf(label, sizeof label, "trained pre=%s", fams->keys[f]);
        const struct jv *ref = jget(fam, "cases");
        assert_int_equal(ref->n, texts->n);
        bad += count_corpus_bpe(m, &cases, ref, label);
        /* Qwen's NFC: strings that normalising changes, against Hugging Face's NFC. */
        const struct jv *nfc = jfind(fam, "nfc_cases");
        for (size_t i = 0; nfc && i < nfc->n; i++) {
            const struct jv *c = &nfc->items[i], *text = jget(c, "text");
            int64_t nn;
            int32_t *ids = tokenize(m, text->s, text->len, 0, &nn);
            if (!ids_equal(ids, nn, jget(c, "ids"))) {
                bad++;
                fprintf(stderr, "# %s: NFC case %zu \"%.60s\" differs\n", label, i, text->s);
                print_ids("nfc", ids, nn, jget(c, "ids"));
            }
            free(ids);
        }
        if (nfc)
            fprintf(stderr, "# %s: %zu NFC strings checked\n", label, nfc->n);
        /* ADD_SPECIAL puts BOS in front where the family adds one, nothing else. */
        int32_t bos = (int32_t)jget(fam, "bos")->num;
        int add_bos = (int)jget(fam, "add_bos")->num;
        int64_t n, na;
        int32_t *ids = tokenize(m, "Hello world", 11, 0, &n);
        int32_t *ida = tokenize(m, "Hello world", 11, PI_TOKENIZE_ADD_SPECIAL, &na);
        assert_int_equal(na, n + (add_bos ? 1 : 0));
        if (add_bos) {
            assert_int_equal(pi_model_token_bos(m), bos);
            assert_int_equal(ida[0], bos);
        }
        assert_memory_equal(ida + (add_bos ? 1 : 0), ids, (size_t)n * sizeof *ids);
        free(ids);
        free(ida);
        pi_model_close(m);
    }
    for (size_t i = 0; i < texts->n; i++)
        cases.items[i].items = NULL; /* borrowed */
    free(cases.items);
    free_json(fx);
    assert_int_equal(bad, 0);
}

/* ---- chat templates against jinja2 --------------------------------------------------- */

/* chat_templates.json (tests/fixtures/gen_chat_fixtures.py): the published templates of
 * the families, each in a model's tokenizer.chat_template: the format is recognised
 * from it, and pi_chat_apply(PI_CHAT_AUTO) gives what jinja2 renders from it. */
static void test_chat_templates(void **state) {
    (void)state;
    struct jv *fx = load_json("chat_templates.json");
    assert_true(fx->n >= 10);
    int bad = 0, checked = 0;
    for (size_t k = 0; k < fx->n; k++) {
        const struct jv *t = &fx->items[k];
        const char *name = jget(t, "name")->s;
        const char *path = tmp_path("chat");
        struct gguf_writer *w;
        assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
        assert_int_equal(add_tiny_llama(w, 4), PI_OK);
        const char *toks[4] = {"<unk>", "<s>", jget(t, "eos")->s, "a"};
        int32_t types[4] = {2, 3, 3, 1};
        uint32_t eos = 2;
        assert_int_equal(gguf_writer_add_string(w, "tokenizer.ggml.model", "llama"), PI_OK);
        assert_int_equal(gguf_writer_add_string_array(w, "tokenizer.ggml.tokens", toks, 4), PI_OK);
        assert_int_equal(
            gguf_writer_add_array(w, "tokenizer.ggml.token_type", PI_META_I32, types, 4), PI_OK);
        assert_int_equal(
            gguf_writer_add_scalar(w, "tokenizer.ggml.eos_token_id", PI_META_U32, &eos), PI_OK);
        assert_int_equal(
            gguf_writer_add_string(w, "tokenizer.chat_template", jget(t, "template")->s), PI_OK);
        assert_int_equal(gguf_writer_write_file(w, path, GGUF_MAGIC_GGUF, NULL), PI_OK);
        gguf_writer_destroy(w);
        pi_model *m = must_open(path);
        remove(path);
        int fmt = pi_model_chat_format(m);
        if (fmt != (int)jget(t, "format")->num) {
            fprintf(stderr, "# chat %s: recognised as %d, not %lld\n", name, fmt,
                    (long long)jget(t, "format")->num);
            bad++;
        }
        const struct jv *renders = jget(t, "renders");
        for (size_t r = 0; r < renders->n; r++) {
            const struct jv *c = &renders->items[r], *msgs = jget(c, "messages");
            pi_chat_message mm[8];
            assert_true(msgs->n <= 8);
            for (size_t i = 0; i < msgs->n; i++) {
                mm[i].role = jget(&msgs->items[i], "role")->s;
                mm[i].content = jget(&msgs->items[i], "content")->s;
            }
            const struct jv *want = jget(c, "text");
            int gen = (int)jget(c, "add_generation_prompt")->num;
            char buf[2048];
            int64_t n = pi_chat_apply(m, PI_CHAT_AUTO, mm, msgs->n, gen, buf, sizeof buf);
            checked++;
            if (n != (int64_t)want->len || memcmp(buf, want->s, want->len) != 0) {
                bad++;
                fprintf(stderr, "# chat %s, conversation %zu:\n#   ours   [%s]\n#   jinja2 [%s]\n",
                        name, r, n >= 0 ? buf : "(error)", want->s);
            }
        }
        pi_model_close(m);
    }
    fprintf(stderr, "# chat: %zu templates, %d of %d renderings equal jinja2's\n", fx->n,
            checked - bad, checked);
    free_json(fx);
    assert_int_equal(bad, 0);
}

/* A tiny llama model with the given chat template, BOS "<s>" (added by the tokenizer)
 * and EOS "</s>". */
static pi_model *model_with_template(const char *tmpl) {
    const char *path = tmp_path("chatjinja");
    struct gguf_writer *w;
    assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
    assert_int_equal(add_tiny_llama(w, 4), PI_OK);
    const char *toks[4] = {"<unk>", "<s>", "</s>", "a"};
    int32_t types[4] = {2, 3, 3, 1};
    uint32_t bos = 1, eos = 2;
    assert_int_equal(gguf_writer_add_string(w, "tokenizer.ggml.model", "llama"), PI_OK);
    assert_int_equal(gguf_writer_add_string_array(w, "tokenizer.ggml.tokens", toks, 4), PI_OK);
    assert_int_equal(gguf_writer_add_array(w, "tokenizer.ggml.token_type", PI_META_I32, types, 4),
                     PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "tokenizer.ggml.bos_token_id", PI_META_U32, &bos),
                     PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "tokenizer.ggml.eos_token_id", PI_META_U32, &eos),
                     PI_OK);
    assert_int_equal(gguf_writer_add_string(w, "tokenizer.chat_template", tmpl), PI_OK);
    assert_int_equal(gguf_writer_write_file(w, path, GGUF_MAGIC_GGUF, NULL), PI_OK);
    gguf_writer_destroy(w);
    pi_model *m = must_open(path);
    remove(path);
    return m;
}

/* A template of no built-in family is executed: PI_CHAT_JINJA, pi_chat_apply equal to
 * pi_chat_template_render with the model's bos_token / eos_token (the leading BOS text
 * left out: the tokenizer adds it), the template's refusal a PI_ERR_FORMAT, a template
 * that does not parse PI_ERR_UNSUPPORTED. */
static void test_chat_jinja(void **state) {
    (void)state;
    static const char tmpl[] =
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
        "{{ raise_exception('system first') }}{% endif %}### {{ m.role|title }}: "
        "{{ m.content|trim }}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}\n"
        "{% endfor %}{% if add_generation_prompt %}### Assistant:{% endif %}";
    pi_model *m = model_with_template(tmpl);
    assert_int_equal(pi_model_chat_format(m), PI_CHAT_JINJA);
    pi_chat_message msgs[3] = {{"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello"}};
    char buf[512], want[512];
    int64_t n = pi_chat_apply(m, PI_CHAT_AUTO, msgs, 3, 1, buf, sizeof buf);
    assert_int_equal(pi_chat_apply(m, PI_CHAT_JINJA, msgs, 3, 1, want, sizeof want), n);
    assert_string_equal(buf, want);
    pi_chat_template *t;
    assert_int_equal(pi_chat_template_create(m, NULL, &t, NULL, 0), PI_OK);
    char full[512];
    int64_t fn = pi_chat_template_render(
        t,
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": "
        "\"user\", \"content\": \" Hi \"}, {\"role\": \"assistant\", \"content\": "
        "\"Hello\"}], \"add_generation_prompt\": true}",
        -1, full, sizeof full, NULL, 0);
    assert_int_equal(fn, n + 3);
    assert_memory_equal(full, "<s>", 3);
    assert_string_equal(full + 3, buf);
    /* as jinja2 renders it (trim_blocks takes the newline after each endif) */
    assert_string_equal(buf, "### System: Be brief.### User: Hi### Assistant: Hello</s>"
                             "### Assistant:");
    pi_chat_template_destroy(t);
    /* the template refuses the conversation */
    pi_chat_message late[2] = {{"user", "Hi"}, {"system", "late"}};
    assert_int_equal(pi_chat_apply(m, PI_CHAT_AUTO, late, 2, 1, buf, sizeof buf), PI_ERR_FORMAT);
    pi_model_close(m);
    /* one that does not parse, of no family */
    m = model_with_template("{% if messages %}unclosed");
    assert_int_equal(pi_model_chat_format(m), PI_ERR_UNSUPPORTED);
    assert_int_equal(pi_chat_apply(m, PI_CHAT_AUTO, msgs, 1, 1, buf, sizeof buf),
                     PI_ERR_UNSUPPORTED);
    assert_int_equal(pi_chat_apply(m, PI_CHAT_JINJA, msgs, 1, 1, buf, sizeof buf),
                     PI_ERR_UNSUPPORTED);
    char msg[256];
    assert_int_equal(pi_chat_template_create(m, NULL, &t, msg, sizeof msg), PI_ERR_FORMAT);
    assert_non_null(strstr(msg, "line 1, column 26: unexpected end of template"));
    pi_model_close(m);
    /* a recognised family whose template does not parse still renders, built in */
    m = model_with_template("{% for %}<|im_start|>");
    assert_int_equal(pi_model_chat_format(m), PI_CHAT_CHATML);
    assert_true(pi_chat_apply(m, PI_CHAT_AUTO, msgs + 1, 1, 1, buf, sizeof buf) > 0);
    assert_string_equal(buf, "<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n");
    pi_model_close(m);
}

/* ---- the SentencePiece vocabulary against sentencepiece ----------------------------- */

static int64_t tok1(const pi_model *m, const char *s, uint32_t flags, int32_t *ids, size_t cap) {
    return pi_tokenize(m, s, strlen(s), ids, cap, flags);
}

/* A SentencePiece vocabulary against the sentencepiece package: json and gguf are the
 * fixture files; dummy_prefix tells whether the model adds a space in front (its
 * pieces then give it back). */
static void check_spm_corpus(const char *json, const char *gguf, int dummy_prefix,
                             const char *label) {
    struct jv *fx = load_json(json);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_fixtures, gguf);
    pi_model *m = must_open(path);
    assert_int_equal(jget(fx, "n_vocab")->num, pi_model_n_vocab(m));
    int32_t bos = (int32_t)jget(fx, "bos")->num;
    assert_int_equal(pi_model_token_bos(m), bos);
    const struct jv *cases = jget(fx, "cases");
    int bad = 0, bad_rt = 0, literal_u2581 = 0;
    for (size_t i = 0; i < cases->n; i++) {
        const struct jv *c = &cases->items[i], *text = jget(c, "text"), *ref = jget(c, "ids");
        int64_t n, nb, ns;
        int32_t *ids = tokenize(m, text->s, text->len, 0, &n);
        int32_t *ids_bos = tokenize(m, text->s, text->len, PI_TOKENIZE_ADD_SPECIAL, &nb);
        /* No control token text in the corpus reads as one of this vocabulary's
         * ("<s>" does: the case list checks it below), so PARSE_SPECIAL agrees. */
        int32_t *ids_sp = tokenize(m, text->s, text->len, PI_TOKENIZE_PARSE_SPECIAL, &ns);
        int has_ctl = strstr(text->s, "<s>") || strstr(text->s, "</s>") ||
                      strstr(text->s, "<unk>") || strstr(text->s, "<pad>");
        /* Gemma's files carry its user-defined whitespace pieces with spaces (the
         * converter turns U+2581 into spaces), so a U+2581 typed in the text is not
         * one of them, where sentencepiece (which writes spaces as U+2581) sees one. */
        if (!ids_equal(ids, n, ref) && !dummy_prefix && strstr(text->s, "\xe2\x96\x81")) {
            literal_u2581++;
            fprintf(stderr, "# %s: case %zu \"%.60s\" differs: a literal U+2581\n", label, i,
                    text->s);
        } else if (!ids_equal(ids, n, ref)) {
            bad++;
            fprintf(stderr, "# %s: mismatch on case %zu \"%.60s\"\n", label, i, text->s);
            print_ids("plain", ids, n, ref);
        }
        assert_int_equal(nb, n + 1);
        assert_int_equal(ids_bos[0], bos);
        assert_memory_equal(ids_bos + 1, ids, (size_t)n * sizeof *ids);
        if (!has_ctl) {
            assert_int_equal(ns, n);
            assert_memory_equal(ids_sp, ids, (size_t)n * sizeof *ids);
        }
        /* Pieces give the text back with the dummy-prefix space in front, as
         * sentencepiece's decode does without it. */
        size_t l;
        char *t = detokenize(m, ids, n, 0, &l);
        const struct jv *dec = jget(c, "decoded");
        size_t skip = dummy_prefix && l > 0 && t[0] == ' ';
        struct sink s;
        stream(m, ids, n, 0, &s);
        if (l - skip != dec->len || memcmp(t + skip, dec->s, dec->len) || s.len != l ||
            memcmp(s.buf, t, l) || s.bad_chunks) {
            bad_rt++;
            fprintf(stderr, "# %s: detokenizing case %zu \"%.60s\" gives \"%.60s\"\n", label, i,
                    text->s, t);
        }
        free(s.buf);
        free(t);
        free(ids);
        free(ids_bos);
        free(ids_sp);
    }
    size_t same = cases->n - (size_t)bad - (size_t)literal_u2581;
    fprintf(stderr, "# %s: %zu strings, %zu matching sentencepiece (%.1f%%)\n", label, cases->n,
            same, 100.0 * (double)same / (double)cases->n);
    assert_int_equal(bad, 0);
    assert_int_equal(bad_rt, 0);
    pi_model_close(m);
    free_json(fx);
}

static void test_spm_corpus(void **state) {
    (void)state;
    check_spm_corpus("spm.json", "spm_tiny.gguf", 1, "spm");
}

/* Gemma's settings, as its converted files carry them: no dummy prefix
 * (add_space_prefix false), BOS added, byte fallback, and user-defined pieces (runs of
 * spaces, newlines, tabs, HTML tags) that the converter writes with spaces for U+2581:
 * they are matched in the raw text, with or without PARSE_SPECIAL, as sentencepiece
 * matches them; <start_of_turn> and <end_of_turn> are control tokens. */
static void test_spm_gemma(void **state) {
    (void)state;
    check_spm_corpus("spm_gemma.json", "spm_gemma.gguf", 0, "spm gemma");
    struct jv *fx = load_json("spm_gemma.json");
    char path[1024];
    snprintf(path, sizeof path, "%s/spm_gemma.gguf", g_fixtures);
    pi_model *m = must_open(path);
    int32_t sot = (int32_t)jget(fx, "start_of_turn")->num,
            eot = (int32_t)jget(fx, "end_of_turn")->num;
    int32_t a[64], b[64];
    const char *turn = "<start_of_turn>user\nHi  there<end_of_turn>\n";
    int64_t n = tok1(m, turn, PI_TOKENIZE_PARSE_SPECIAL | PI_TOKENIZE_ADD_SPECIAL, a, 64);
    int64_t nu = tok1(m, "user\nHi  there", 0, b, 64);
    assert_true(n == nu + 4 && n < 64);
    assert_int_equal(a[0], pi_model_token_bos(m));
    assert_int_equal(a[1], sot);
    assert_memory_equal(a + 2, b, (size_t)nu * sizeof *b);
    assert_int_equal(a[nu + 2], eot);
    assert_true(pi_model_token_is_eog(m, eot));
    /* Without PARSE_SPECIAL the markers are text, and no control id appears. */
    n = tok1(m, turn, 0, a, 64);
    for (int64_t i = 0; i < n && i < 64; i++)
        assert_true(a[i] != sot && a[i] != eot);
    pi_model_close(m);
    free_json(fx);
}

static void test_spm_special_and_bytes(void **state) {
    (void)state;
    pi_model *m = must_open(spm_path());
    int32_t a[64], b[64];
    /* Control tokens are recognised only with PARSE_SPECIAL; the text after one gets
     * the space prefix again (a fragment after a special token starts a "word"). */
    int64_t n = tok1(m, "<s>hello</s>", PI_TOKENIZE_PARSE_SPECIAL, a, 64);
    int64_t nh = tok1(m, "hello", 0, b, 64);
    assert_int_equal(n, nh + 2);
    assert_int_equal(a[0], pi_model_token_bos(m));
    assert_memory_equal(a + 1, b, (size_t)nh * sizeof *b);
    assert_int_equal(a[n - 1], pi_model_token_eos(m));
    n = tok1(m, "<s>hello</s>", 0, a, 64);
    assert_true(n > nh + 2);
    for (int64_t i = 0; i < n; i++)
        assert_int_not_equal(a[i], pi_model_token_bos(m));
    /* A character outside the vocabulary falls back to its UTF-8 bytes. */
    n = tok1(m, "\xf0\x9f\x8e\x89", 0, a, 64); /* U+1F389 */
    char piece[16];
    int64_t bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = pi_token_to_piece(m, a[i], piece, sizeof piece, 0);
        if (k == 1 && (unsigned char)piece[0] >= 0x80)
            bytes++;
    }
    assert_int_equal(bytes, 4);
    /* Invalid UTF-8 goes byte by byte. */
    n = tok1(m, "a\xff\xc3", 0, a, 64);
    assert_true(n >= 3);
    assert_int_equal(pi_token_to_piece(m, a[n - 1], piece, sizeof piece, 0), 1);
    assert_int_equal((unsigned char)piece[0], 0xc3);
    assert_int_equal(pi_token_to_piece(m, a[n - 2], piece, sizeof piece, 0), 1);
    assert_int_equal((unsigned char)piece[0], 0xff);
    /* Control pieces are empty unless asked for. */
    assert_int_equal(pi_token_to_piece(m, pi_model_token_bos(m), piece, sizeof piece, 0), 0);
    assert_string_equal(piece, "");
    assert_int_equal(
        pi_token_to_piece(m, pi_model_token_bos(m), piece, sizeof piece, PI_PIECE_SPECIAL), 3);
    assert_string_equal(piece, "<s>");
    assert_true(pi_model_token_is_eog(m, pi_model_token_eos(m)));
    assert_false(pi_model_token_is_eog(m, pi_model_token_bos(m)));
    assert_int_equal(pi_model_chat_template(m, piece, sizeof piece), PI_ERR_NOT_FOUND);
    pi_model_close(m);
}

/* ---- streaming ---------------------------------------------------------------------- */

static void test_stream_utf8(void **state) {
    (void)state;
    /* SPM byte tokens: a 4-byte emoji arrives byte by byte and leaves in one piece. */
    pi_model *m = must_open(spm_path());
    int32_t ids[64];
    const char *emoji = "\xf0\x9f\x8e\x89"; /* U+1F389 */
    int64_t n = tok1(m, emoji, 0, ids, 64);
    assert_true(n >= 4);
    pi_detok *d;
    assert_int_equal(pi_detok_create(m, 0, &d), PI_OK);
    struct sink s;
    memset(&s, 0, sizeof s);
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(pi_detok_push(d, ids[i], sink_fn, &s), PI_OK);
        if (i < n - 1)
            assert_true(s.len <= 1); /* at most the prefix space */
    }
    assert_int_equal(s.bad_chunks, 0);
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.buf, " \xf0\x9f\x8e\x89", 5);
    /* An unfinished sequence is held, then flushed as one U+FFFD. */
    int32_t f0 = -1, ff = -1;
    char pc[8];
    for (int32_t t = 0; t < pi_model_n_vocab(m); t++) {
        if (pi_token_to_piece(m, t, pc, sizeof pc, 0) == 1) {
            if ((unsigned char)pc[0] == 0xf0)
                f0 = t;
            if ((unsigned char)pc[0] == 0xff)
                ff = t;
        }
    }
    assert_true(f0 >= 0 && ff >= 0);
    s.len = 0;
    int calls = s.calls;
    assert_int_equal(pi_detok_push(d, f0, sink_fn, &s), PI_OK);
    assert_int_equal(s.calls, calls);
    assert_int_equal(pi_detok_flush(d, sink_fn, &s), PI_OK);
    assert_int_equal(s.len, 3);
    assert_memory_equal(s.buf, "\xef\xbf\xbd", 3);
    /* A byte that can never start a sequence is replaced at once, and a held prefix
     * followed by a byte that cannot continue it is replaced, then the byte read. */
    s.len = 0;
    assert_int_equal(pi_detok_push(d, ff, sink_fn, &s), PI_OK);
    assert_int_equal(pi_detok_push(d, f0, sink_fn, &s), PI_OK);
    int32_t a_tok[8];
    assert_int_equal(pi_tokenize(m, "a", 1, a_tok, 8, 0), 1);
    assert_int_equal(pi_detok_push(d, a_tok[0], sink_fn, &s), PI_OK); /* " a" */
    assert_int_equal(s.len, 3 + 3 + 2);
    assert_memory_equal(s.buf, "\xef\xbf\xbd\xef\xbf\xbd a", 8);
    assert_int_equal(s.bad_chunks, 0);
    /* Abort: the sink's non-zero return comes back as PI_ERR_ABORTED. */
    s.stop_after = s.calls + 1;
    assert_int_equal(pi_detok_push(d, a_tok[0], sink_fn, &s), PI_ERR_ABORTED);
    assert_int_equal(pi_detok_push(d, f0, sink_fn, &s), PI_OK);
    s.stop_after = s.calls + 1;
    assert_int_equal(pi_detok_flush(d, sink_fn, &s), PI_ERR_ABORTED);
    assert_int_equal(pi_detok_flush(d, sink_fn, &s), PI_OK); /* nothing left */
    pi_detok_destroy(d);
    free(s.buf);
    pi_model_close(m);
}

static void test_stream_bpe_emoji(void **state) {
    (void)state;
    need_smollm2();
    pi_model *m = must_open(g_smollm2);
    const char *text = "Emoji: \xf0\x9f\x8e\x89\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9"
                       "\xe2\x80\x8d\xf0\x9f\x91\xa7 \xf0\x9f\x87\xba\xf0\x9f\x87\xb8 "
                       "\xe4\xb8\x96\xe7\x95\x8c done";
    int64_t n;
    int32_t *ids = tokenize(m, text, strlen(text), 0, &n);
    /* Several tokens are partial sequences (byte-level BPE splits emoji). */
    int partial = 0;
    for (int64_t i = 0; i < n; i++) {
        char piece[64];
        int64_t k = pi_token_to_piece(m, ids[i], piece, sizeof piece, 0);
        assert_true(k >= 0 && k < (int64_t)sizeof piece);
        partial += !utf8_ok((const unsigned char *)piece, (size_t)k);
    }
    assert_true(partial > 0);
    struct sink s;
    stream(m, ids, n, 0, &s);
    assert_int_equal(s.bad_chunks, 0);
    assert_int_equal(s.len, strlen(text));
    assert_memory_equal(s.buf, text, s.len);
    free(s.buf);
    free(ids);
    pi_model_close(m);
}

/* ---- SmolLM2 specifics, pieces, argument checks ------------------------------------- */

static void test_smollm2_api(void **state) {
    (void)state;
    need_smollm2();
    pi_model *m = must_open(g_smollm2);
    assert_int_equal(pi_model_token_bos(m), 1);
    assert_int_equal(pi_model_token_eos(m), 2);
    assert_true(pi_model_token_is_eog(m, 2));  /* <|im_end|>, eos */
    assert_true(pi_model_token_is_eog(m, 0));  /* <|endoftext|> */
    assert_false(pi_model_token_is_eog(m, 1)); /* <|im_start|> */
    assert_false(pi_model_token_is_eog(m, 100));
    assert_false(pi_model_token_is_eog(m, -1));
    assert_false(pi_model_token_is_eog(m, 49152));
    char buf[64];
    assert_int_equal(pi_token_to_piece(m, 2, buf, sizeof buf, 0), 0);
    assert_int_equal(pi_token_to_piece(m, 2, buf, sizeof buf, PI_PIECE_SPECIAL), 10);
    assert_string_equal(buf, "<|im_end|>");
    assert_int_equal(pi_token_to_piece(m, 2, buf, 4, PI_PIECE_SPECIAL), 10);
    assert_string_equal(buf, "<|i");
    assert_int_equal(pi_token_to_piece(m, 2, NULL, 0, PI_PIECE_SPECIAL), 10);
    assert_int_equal(pi_token_to_piece(m, 49152, buf, sizeof buf, 0), PI_ERR_RANGE);
    assert_int_equal(pi_token_to_piece(m, -1, buf, sizeof buf, 0), PI_ERR_RANGE);
    assert_int_equal(pi_token_to_piece(m, 0, NULL, 5, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_token_to_piece(m, 0, buf, sizeof buf, 0x100), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_token_to_piece(NULL, 0, buf, sizeof buf, 0), PI_ERR_INVALID_ARG);

    int32_t ids[8] = {0};
    const char *s = "Hello world, hello world";
    int64_t n = pi_tokenize(m, s, strlen(s), ids, 2, 0);
    assert_true(n > 2);
    int32_t all[16];
    assert_int_equal(pi_tokenize(m, s, strlen(s), all, 16, 0), n);
    assert_int_equal(ids[0], all[0]);
    assert_int_equal(ids[1], all[1]);
    assert_int_equal(ids[2], 0); /* untouched past cap */
    assert_int_equal(pi_tokenize(m, NULL, 0, NULL, 0, 0), 0);
    assert_int_equal(pi_tokenize(m, "", 0, ids, 8, PI_TOKENIZE_ADD_SPECIAL), 0);
    assert_int_equal(pi_tokenize(NULL, s, 1, ids, 8, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_tokenize(m, NULL, 1, ids, 8, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_tokenize(m, s, 1, NULL, 8, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_tokenize(m, s, 1, ids, 8, 0x80), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_tokenize(m, s, (size_t)1 << 40, ids, 8, 0), PI_ERR_INVALID_ARG);
    /* Invalid UTF-8 still tokenizes, byte by byte, and comes back byte for byte,
     * except the 21 bytes whose byte-level character SmolLM2's vocabulary lacks
     * (0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1, 0xf1, 0xf2, 0xf5..0xff): those
     * are dropped, as Hugging Face's BPE drops them. */
    const char bad[] = "ok \xff\xfe\xc3 \xe2\x82 end\x80\x04";
    const char kept[] = "ok \xc3 \xe2\x82 end\x80";
    int64_t nb = pi_tokenize(m, bad, sizeof bad - 1, all, 16, 0);
    assert_true(nb > 0 && nb <= 16);
    size_t l;
    char *back = detokenize(m, all, nb, 0, &l);
    assert_int_equal(l, sizeof kept - 1);
    assert_memory_equal(back, kept, l);
    free(back);

    char tmpl[32];
    int64_t tl = pi_model_chat_template(m, tmpl, sizeof tmpl);
    assert_true(tl > 100);
    assert_int_equal(strlen(tmpl), sizeof tmpl - 1);
    assert_int_equal(strncmp(tmpl, "{% for message in messages %}", 29), 0);
    assert_int_equal(pi_model_chat_template(m, NULL, 0), tl);
    assert_int_equal(pi_model_chat_template(m, NULL, 4), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_chat_template(NULL, tmpl, 4), PI_ERR_INVALID_ARG);

    pi_detok *d = (pi_detok *)1;
    assert_int_equal(pi_detok_create(m, 0x10, &d), PI_ERR_INVALID_ARG);
    assert_null(d);
    assert_int_equal(pi_detok_create(NULL, 0, &d), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_detok_create(m, 0, NULL), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_detok_create(m, 0, &d), PI_OK);
    struct sink sk;
    memset(&sk, 0, sizeof sk);
    assert_int_equal(pi_detok_push(d, 49152, sink_fn, &sk), PI_ERR_RANGE);
    assert_int_equal(pi_detok_push(d, -5, sink_fn, &sk), PI_ERR_RANGE);
    assert_int_equal(pi_detok_push(d, 0, NULL, &sk), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_detok_push(NULL, 0, sink_fn, &sk), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_detok_flush(NULL, sink_fn, &sk), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_detok_flush(d, NULL, &sk), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_detok_push(d, 2, sink_fn, &sk), PI_OK); /* control: nothing */
    assert_int_equal(sk.calls, 0);
    pi_detok_destroy(d);
    pi_detok_destroy(NULL);
    free(sk.buf);
    pi_model_close(m);

    /* metadata_only does not load the tokenizer. */
    pi_model_params p;
    pi_model_default_params(&p);
    p.metadata_only = 1;
    assert_int_equal(pi_model_open(g_smollm2, &p, &m), PI_OK);
    assert_int_equal(pi_tokenize(m, "a", 1, ids, 8, 0), PI_ERR_UNSUPPORTED);
    assert_true(pi_model_chat_template(m, NULL, 0) > 0);
    pi_model_close(m);
}

static void test_null_and_no_tokenizer(void **state) {
    (void)state;
    assert_int_equal(pi_model_token_bos(NULL), -1);
    assert_int_equal(pi_model_token_eos(NULL), -1);
    assert_int_equal(pi_model_token_is_eog(NULL, 0), 0);
    /* A model whose file has tokens but no tokenizer.ggml.model: no tokenizer. */
    const char *path = tmp_path("notok");
    struct gguf_writer *w;
    assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
    assert_int_equal(add_tiny_llama(w, 3), PI_OK);
    const char *toks[] = {"a", "b", "c"};
    assert_int_equal(gguf_writer_add_string_array(w, "tokenizer.ggml.tokens", toks, 3), PI_OK);
    assert_int_equal(gguf_writer_write_file(w, path, GGUF_MAGIC_GGUF, NULL), PI_OK);
    gguf_writer_destroy(w);
    pi_model *m = must_open(path);
    remove(path);
    int32_t ids[4];
    char buf[8];
    pi_detok *d = (pi_detok *)1;
    assert_int_equal(pi_tokenize(m, "a", 1, ids, 4, 0), PI_ERR_UNSUPPORTED);
    assert_int_equal(pi_token_to_piece(m, 0, buf, sizeof buf, 0), PI_ERR_UNSUPPORTED);
    assert_int_equal(pi_detok_create(m, 0, &d), PI_ERR_UNSUPPORTED);
    assert_null(d);
    assert_int_equal(pi_model_token_bos(m), -1);
    assert_int_equal(pi_model_token_eos(m), -1);
    assert_int_equal(pi_model_token_is_eog(m, 0), 0);
    assert_int_equal(pi_model_chat_template(m, buf, sizeof buf), PI_ERR_NOT_FOUND);
    pi_model_close(m);
}

/* ---- hostile metadata --------------------------------------------------------------- */

/* A small valid "llama" (SPM) or "gpt2" (BPE) vocabulary; each case then spoils one
 * thing. */
enum { N_TOK = 10 };
static const char *const spm_tokens[N_TOK] = {
    "<unk>", "<s>", "</s>", "<0x41>", "\xe2\x96\x81", "a", "b", "ab", "\342\226\201ab", "c"};
static const int32_t spm_types[N_TOK] = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1};
static const char *const bpe_tokens[N_TOK] = {"<|endoftext|>", "a", "b",   "ab", "\xc4\xa0",
                                              "\304\240a",     "c", "abc", "d",  "e"};
static const int32_t bpe_types[N_TOK] = {3, 1, 1, 1, 1, 1, 1, 1, 1, 1};

struct hostile {
    const char *name;
    int bpe;
    int status;         /* expected from pi_model_open */
    const char *in_msg; /* expected in the message */
    void (*spoil)(struct gguf_writer *w, const char **toks, float *scores, int32_t *types,
                  const char **merges, uint64_t *n_merges, int *skip);
};

enum {
    SKIP_SCORES = 1,
    SKIP_TYPES = 2,
    SKIP_TOKENS = 4,
    SKIP_MERGES = 8,
    SKIP_MODEL = 16,
    SKIP_IDS = 32
};

#define SPOIL(fn)                                                                                  \
  static void fn(struct gguf_writer *w, const char **toks, float *scores, int32_t *types,          \
                 const char **merges, uint64_t *n_merges, int *skip)
SPOIL(sp_none) {
}
SPOIL(sp_model_u32) {
    uint32_t v = 1;
    *skip |= SKIP_MODEL;
    assert_int_equal(gguf_writer_add_scalar(w, "tokenizer.ggml.model", PI_META_U32, &v), PI_OK);
}
SPOIL(sp_model_bert) {
    *skip |= SKIP_MODEL;
    assert_int_equal(gguf_writer_add_string(w, "tokenizer.ggml.model", "bert"), PI_OK);
}
SPOIL(sp_no_tokens) {
    *skip |= SKIP_TOKENS;
}
SPOIL(sp_tokens_u32) {
    uint32_t v[N_TOK] = {0};
    *skip |= SKIP_TOKENS;
    assert_int_equal(gguf_writer_add_array(w, "tokenizer.ggml.tokens", PI_META_U32, v, N_TOK),
                     PI_OK);
}
SPOIL(sp_tokens_empty) {
    *skip |= SKIP_TOKENS | SKIP_SCORES | SKIP_TYPES;
    assert_int_equal(gguf_writer_add_string_array(w, "tokenizer.ggml.tokens", toks, 0), PI_OK);
}
SPOIL(sp_scores_short) {
    *skip |= SKIP_SCORES;
    assert_int_equal(
        gguf_writer_add_array(w, "tokenizer.ggml.scores", PI_META_F32, scores, N_TOK - 1), PI_OK);
}
SPOIL(sp_scores_i32) {
    *skip |= SKIP_SCORES;
    assert_int_equal(gguf_writer_add_array(w, "tokenizer.ggml.scores", PI_META_I32, types, N_TOK),
                     PI_OK);
}
SPOIL(sp_scores_nan) {
    scores[5] = (float)NAN;
}
SPOIL(sp_types_f32) {
    *skip |= SKIP_TYPES;
    assert_int_equal(
        gguf_writer_add_array(w, "tokenizer.ggml.token_type", PI_META_F32, scores, N_TOK), PI_OK);
}
SPOIL(sp_types_long) {
    int32_t t[N_TOK + 1] = {0};
    memcpy(t, types, sizeof(int32_t) * N_TOK);
    *skip |= SKIP_TYPES;
    assert_int_equal(
        gguf_writer_add_array(w, "tokenizer.ggml.token_type", PI_META_I32, t, N_TOK + 1), PI_OK);
}
SPOIL(sp_types_value) {
    types[6] = 9;
}
#define U32KV(fn, key, val)                                                                        \
  SPOIL(fn) {                                                                                      \
    *skip |= SKIP_IDS;                                                                             \
    uint32_t v = (val);                                                                            \
    assert_int_equal(gguf_writer_add_scalar(w, key, PI_META_U32, &v), PI_OK);                      \
  }
U32KV(sp_bos_range, "tokenizer.ggml.bos_token_id", N_TOK)
U32KV(sp_eos_range, "tokenizer.ggml.eos_token_id", 1000000)
U32KV(sp_unk_range, "tokenizer.ggml.unknown_token_id", N_TOK + 5)
U32KV(sp_pad_range, "tokenizer.ggml.padding_token_id", 0xfffffffeu)
U32KV(sp_eot_range, "tokenizer.ggml.eot_token_id", N_TOK)
U32KV(sp_add_bos_u32, "tokenizer.ggml.add_bos_token", 1)
U32KV(sp_pre_u32, "tokenizer.ggml.pre", 1)
SPOIL(sp_bos_string) {
    *skip |= SKIP_IDS;
    assert_int_equal(gguf_writer_add_string(w, "tokenizer.ggml.bos_token_id", "1"), PI_OK);
}
SPOIL(sp_byte_neg) {
    toks[3] = "<0x-1>";
}
SPOIL(sp_byte_zz) {
    toks[3] = "<0xZZ>";
}
SPOIL(sp_byte_100) {
    toks[3] = "<0x100>";
}
SPOIL(sp_byte_short) {
    toks[3] = "<0x4>";
}
SPOIL(sp_byte_word) {
    types[5] = 6;
}
SPOIL(sp_no_merges) {
    *skip |= SKIP_MERGES;
}
SPOIL(sp_merge_nospace) {
    merges[1] = "abc";
}
SPOIL(sp_merge_trailing) {
    merges[1] = "ab ";
}
SPOIL(sp_merge_unknown) {
    merges[1] = "a zz";
}
SPOIL(sp_merge_noresult) {
    merges[1] = "b a";
}
SPOIL(sp_merges_u32) {
    uint32_t v[2] = {0, 0};
    *skip |= SKIP_MERGES;
    assert_int_equal(gguf_writer_add_array(w, "tokenizer.ggml.merges", PI_META_U32, v, 2), PI_OK);
}
SPOIL(sp_no_model) {
    *skip |= SKIP_MODEL;
}

static const struct hostile hostile_cases[] = {
    {"valid spm", 0, PI_OK, NULL, sp_none},
    {"valid bpe", 1, PI_OK, NULL, sp_none},
    {"no model key", 0, PI_OK, NULL, sp_no_model},
    {"model not a string", 0, PI_ERR_FORMAT, "tokenizer.ggml.model", sp_model_u32},
    {"unknown model", 0, PI_ERR_UNSUPPORTED, "tokenizer.ggml.model", sp_model_bert},
    {"tokens missing", 0, PI_ERR_FORMAT, "tokenizer.ggml.tokens", sp_no_tokens},
    {"tokens not strings", 0, PI_ERR_FORMAT, "tokenizer.ggml.tokens", sp_tokens_u32},
    {"empty vocab", 0, PI_ERR_FORMAT, "tokenizer", sp_tokens_empty},
    {"scores short", 0, PI_ERR_FORMAT, "tokenizer.ggml.scores", sp_scores_short},
    {"scores i32", 0, PI_ERR_FORMAT, "tokenizer.ggml.scores", sp_scores_i32},
    {"score NaN", 0, PI_ERR_FORMAT, "tokenizer.ggml.scores", sp_scores_nan},
    {"token_type f32", 0, PI_ERR_FORMAT, "tokenizer.ggml.token_type", sp_types_f32},
    {"token_type long", 0, PI_ERR_FORMAT, "tokenizer.ggml.token_type", sp_types_long},
    {"token_type 9", 0, PI_ERR_FORMAT, "tokenizer.ggml.token_type", sp_types_value},
    {"bos out of range", 0, PI_ERR_FORMAT, "tokenizer.ggml.bos_token_id", sp_bos_range},
    {"eos out of range", 1, PI_ERR_FORMAT, "tokenizer.ggml.eos_token_id", sp_eos_range},
    {"unk out of range", 0, PI_ERR_FORMAT, "tokenizer.ggml.unknown_token_id", sp_unk_range},
    {"pad out of range", 0, PI_ERR_FORMAT, "tokenizer.ggml.padding_token_id", sp_pad_range},
    {"eot out of range", 1, PI_ERR_FORMAT, "tokenizer.ggml.eot_token_id", sp_eot_range},
    {"bos a string", 0, PI_ERR_FORMAT, "tokenizer.ggml.bos_token_id", sp_bos_string},
    {"add_bos not bool", 0, PI_ERR_FORMAT, "tokenizer.ggml.add_bos_token", sp_add_bos_u32},
    {"pre not a string", 1, PI_ERR_FORMAT, "tokenizer.ggml.pre", sp_pre_u32},
    {"byte token <0x-1>", 0, PI_ERR_FORMAT, "tokenizer.ggml.tokens", sp_byte_neg},
    {"byte token <0xZZ>", 0, PI_ERR_FORMAT, "tokenizer.ggml.tokens", sp_byte_zz},
    {"byte token <0x100>", 0, PI_ERR_FORMAT, "tokenizer.ggml.tokens", sp_byte_100},
    {"byte token <0x4>", 0, PI_ERR_FORMAT, "tokenizer.ggml.tokens", sp_byte_short},
    {"byte type on 'a'", 0, PI_ERR_FORMAT, "tokenizer.ggml.tokens", sp_byte_word},
    {"byte token in bpe", 1, PI_ERR_FORMAT, "tokenizer.ggml.tokens", sp_byte_word},
    {"merges missing", 1, PI_ERR_FORMAT, "tokenizer.ggml.merges", sp_no_merges},
    {"merges not strings", 1, PI_ERR_FORMAT, "tokenizer.ggml.merges", sp_merges_u32},
    {"merge without space", 1, PI_ERR_FORMAT, "tokenizer.ggml.merges", sp_merge_nospace},
    {"merge with empty right", 1, PI_ERR_FORMAT, "tokenizer.ggml.merges", sp_merge_trailing},
    {"merge of unknown token", 1, PI_ERR_FORMAT, "tokenizer.ggml.merges", sp_merge_unknown},
    {"merge result unknown", 1, PI_ERR_FORMAT, "tokenizer.ggml.merges", sp_merge_noresult},
};

static int write_hostile(const struct hostile *h, const char *path) {
    const char *toks[N_TOK];
    float scores[N_TOK];
    int32_t types[N_TOK];
    const char *merges[3] = {"a b", "\xc4\xa0 a", "ab c"};
    uint64_t n_merges = 3;
    memcpy(toks, h->bpe ? bpe_tokens : spm_tokens, sizeof toks);
    memcpy(types, h->bpe ? bpe_types : spm_types, sizeof types);
    for (int i = 0; i < N_TOK; i++)
        scores[i] = -(float)i;
    int skip = 0;
    struct gguf_writer *w;
    assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
    h->spoil(w, toks, scores, types, merges, &n_merges, &skip);
    if (!(skip & SKIP_MODEL))
        assert_int_equal(
            gguf_writer_add_string(w, "tokenizer.ggml.model", h->bpe ? "gpt2" : "llama"), PI_OK);
    if (!(skip & SKIP_TOKENS))
        assert_int_equal(gguf_writer_add_string_array(w, "tokenizer.ggml.tokens", toks, N_TOK),
                         PI_OK);
    if (!(skip & SKIP_SCORES))
        assert_int_equal(
            gguf_writer_add_array(w, "tokenizer.ggml.scores", PI_META_F32, scores, N_TOK), PI_OK);
    if (!(skip & SKIP_TYPES))
        assert_int_equal(
            gguf_writer_add_array(w, "tokenizer.ggml.token_type", PI_META_I32, types, N_TOK),
            PI_OK);
    if (!h->bpe && !(skip & SKIP_IDS)) {
        const char *keys[3] = {"tokenizer.ggml.unknown_token_id", "tokenizer.ggml.bos_token_id",
                               "tokenizer.ggml.eos_token_id"};
        for (uint32_t k = 0; k < 3; k++)
            assert_int_equal(gguf_writer_add_scalar(w, keys[k], PI_META_U32, &k), PI_OK);
    }
    if (h->bpe && !(skip & SKIP_MERGES))
        assert_int_equal(gguf_writer_add_string_array(w, "tokenizer.ggml.merges", merges, n_merges),
                         PI_OK);
    assert_int_equal(add_tiny_llama(w, N_TOK), PI_OK);
    int st = gguf_writer_write_file(w, path, GGUF_MAGIC_GGUF, NULL);
    gguf_writer_destroy(w);
    return st;
}

static void test_hostile_metadata(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof hostile_cases / sizeof hostile_cases[0]; i++) {
        const struct hostile *h = &hostile_cases[i];
        const char *path = tmp_path("hostile");
        assert_int_equal(write_hostile(h, path), PI_OK);
        pi_model *m = (pi_model *)1;
        char msg[512];
        int st = open_model(path, &m, msg, sizeof msg, NULL);
        if (st != h->status || (h->in_msg && !strstr(msg, h->in_msg)))
            fail_msg("case '%s': status %d (want %d), message '%s' (want '%s' in it)", h->name, st,
                     h->status, msg, h->in_msg ? h->in_msg : "");
        if (st == PI_OK) {
            /* The valid vocabularies tokenize; "ab" merges in both. */
            int32_t ids[8];
            int64_t n = pi_tokenize(m, "ab", 2, ids, 8, 0);
            if (h->spoil == sp_no_model) {
                assert_int_equal(n, PI_ERR_UNSUPPORTED);
            } else if (h->bpe) {
                assert_int_equal(n, 1);
                assert_int_equal(ids[0], 3);
                n = pi_tokenize(m, " abc a\x01", 7, ids, 8, 0);
                /* Pre-tokens " abc", " a", "\x01". In the first, "a b" (rank 0) merges
                 * before "Ġ a" (rank 1), then "ab c": Ġ abc. The second is Ġa. \x01 has
                 * no token and is dropped. */
                assert_int_equal(n, 3);
                assert_int_equal(ids[0], 4);
                assert_int_equal(ids[1], 7);
                assert_int_equal(ids[2], 5);
                assert_int_equal(
                    pi_tokenize(m, "<|endoftext|>", 13, ids, 8, PI_TOKENIZE_PARSE_SPECIAL), 1);
                assert_int_equal(ids[0], 0);
                assert_true(pi_model_token_is_eog(m, 0));
            } else {
                assert_int_equal(n, 1);
                assert_int_equal(ids[0], 8); /* "▁ab" */
                /* "A" is only a byte token; "z" has none and becomes <unk>. */
                n = pi_tokenize(m, "Az", 2, ids, 8, PI_TOKENIZE_ADD_SPECIAL);
                assert_int_equal(n, 4);
                assert_int_equal(ids[0], 1);
                assert_int_equal(ids[1], 4);
                assert_int_equal(ids[2], 3);
                assert_int_equal(ids[3], 0);
            }
            pi_model_close(m);
        } else {
            assert_null(m);
            /* The same file opens with metadata_only: the tokenizer is not read. */
            pi_model_params p;
            pi_model_default_params(&p);
            p.metadata_only = 1;
            if (h->spoil != sp_tokens_u32 && h->spoil != sp_tokens_empty) {
                assert_int_equal(pi_model_open(path, &p, &m), PI_OK);
                pi_model_close(m);
            }
        }
        remove(path);
    }
}

/* ---- allocation failure ------------------------------------------------------------- */

static void alloc_failure(const char *path, const char *text) {
    long total = -1;
    for (long n = 1; n < 100000; n++) {
        struct failalloc fa;
        struct pi_allocator a = failalloc_make(&fa, n);
        pi_model *m = NULL;
        int st = pi_model_open_with(path, NULL, &a, &m);
        if (st == PI_OK) {
            total = n;
            /* Now fail each allocation of a tokenize and of a detok in turn. */
            long base = fa.count;
            for (long k = 1;; k++) {
                fa.fail_at = base + k;
                fa.count = base;
                int32_t ids[256];
                int64_t r = pi_tokenize(m, text, strlen(text), ids, 256,
                                        PI_TOKENIZE_PARSE_SPECIAL | PI_TOKENIZE_ADD_SPECIAL);
                if (r >= 0)
                    break;
                assert_int_equal(r, PI_ERR_NOMEM);
                assert_true(k < 1000);
            }
            fa.fail_at = fa.count + 1;
            pi_detok *d = (pi_detok *)1;
            assert_int_equal(pi_detok_create(m, 0, &d), PI_ERR_NOMEM);
            assert_null(d);
            fa.fail_at = 0;
            pi_model_close(m);
            assert_int_equal(fa.live, 0);
            break;
        }
        assert_int_equal(st, PI_ERR_NOMEM);
        assert_null(m);
        assert_int_equal(fa.live, 0);
    }
    assert_true(total > 0);
}

static void test_alloc_failure_spm(void **state) {
    (void)state;
    alloc_failure(spm_path(), "<s>Hello world \xf0\x9f\x8e\x89 and 123 ab");
}

/* Qwen's NFC takes scratch memory of its own. */
static void test_alloc_failure_nfc(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/bpe_qwen2.gguf", g_fixtures);
    alloc_failure(path, "<|im_start|>cafe\xcc\x81 \xe1\x84\x80\xe1\x85\xa1 a\xcc\xa3\xcc\x82 123");
}

static void test_alloc_failure_bpe(void **state) {
    (void)state;
    need_smollm2();
    alloc_failure(g_smollm2, "<|im_start|>user\nHello world \xf0\x9f\x8e\x89 and 12345!");
}

/* A text that defeats PCRE2's limits is the caller's problem, not a library bug: with the
 * match limit lowered so that every match hits it, tokenizing is PI_ERR_RANGE (it was
 * PI_ERR_INTERNAL), and the model still tokenizes once the limit is back. */
static void test_bpe_match_limit(void **state) {
    (void)state;
    need_smollm2();
    pi_model *m = must_open(g_smollm2);
    const char *text = "Hello world, and 12345 more words";
    int32_t ids[64];
    const int64_t n = pi_tokenize(m, text, strlen(text), ids, 64, 0);
    assert_true(n > 0);
    struct pi_vocab *v = m->vocab;
    assert_int_equal(tok_bpe_set_match_limit(v, 1), PI_OK);
    assert_int_equal(pi_tokenize(m, text, strlen(text), ids, 64, 0), PI_ERR_RANGE);
    assert_int_equal(pi_tokenize(m, "", 0, ids, 64, 0), 0);
    assert_int_equal(tok_bpe_set_match_limit(v, 10000000), PI_OK);
    assert_int_equal(pi_tokenize(m, text, strlen(text), ids, 64, 0), n);
    pi_model_close(m);
}

/* ---- threads ------------------------------------------------------------------------ */

struct thread_job {
    const pi_model *m;
    const struct jv *cases;
    int mismatches;
};

static void *thread_main(void *arg) {
    struct thread_job *j = arg;
    for (int rep = 0; rep < 3; rep++) {
        for (size_t i = 0; i < j->cases->n; i++) {
            const struct jv *c = &j->cases->items[i], *text = jget(c, "text");
            int32_t ids[4096];
            int64_t n = pi_tokenize(j->m, text->s, text->len, ids, 4096, PI_TOKENIZE_PARSE_SPECIAL);
            if (n < 0 || n > 4096 || !ids_equal(ids, n, jget(c, "ids_special")))
                j->mismatches++;
        }
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    need_smollm2();
    struct jv *fx = load_json("smollm2.json");
    pi_model *m = must_open(g_smollm2);
    pthread_t th[4];
    struct thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct thread_job){m, jget(fx, "cases"), 0};
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].mismatches, 0);
    }
    pi_model_close(m);
    free_json(fx);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR [SMOLLM2_GGUF]\n", argv[0]);
        return 2;
    }
    g_fixtures = argv[1];
    g_smollm2 = argc > 2 && argv[2][0] && access(argv[2], R_OK) == 0 ? argv[2] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_corpus),
        cmocka_unit_test(test_pre_tokenizer_variants),
        cmocka_unit_test(test_bpe_families),
        cmocka_unit_test(test_chat_templates),
        cmocka_unit_test(test_chat_jinja),
        cmocka_unit_test(test_spm_corpus),
        cmocka_unit_test(test_spm_gemma),
        cmocka_unit_test(test_spm_special_and_bytes),
        cmocka_unit_test(test_stream_utf8),
        cmocka_unit_test(test_stream_bpe_emoji),
        cmocka_unit_test(test_smollm2_api),
        cmocka_unit_test(test_null_and_no_tokenizer),
        cmocka_unit_test(test_hostile_metadata),
        cmocka_unit_test(test_alloc_failure_spm),
        cmocka_unit_test(test_alloc_failure_bpe),
        cmocka_unit_test(test_alloc_failure_nfc),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_bpe_match_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
