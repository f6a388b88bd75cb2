/* tok_bpe.c -- byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * A fragment of raw text is split into pre-tokens by the regexes of the model's
 * pre-tokenizer (tokenizer.ggml.pre), applied in sequence: each regex splits every
 * piece the previous one produced, keeping both the matches and the text between them
 * as pieces (Hugging Face's "Isolated" split behaviour). Each pre-token's bytes are
 * mapped to the GPT-2 byte-level characters and start as one symbol each; then the
 * adjacent pair with the lowest merge rank (the leftmost on a tie) is merged until no
 * pair has a merge. A byte whose character is not a token is dropped (as Hugging
 * Face's BPE does without an unknown token).
 *
 * Pre-tokenizers, by the names llama.cpp's converter writes (the regexes are those of
 * each family's tokenizer.json; \s is spelled out as the Unicode White_Space set so
 * that the result does not depend on the PCRE2 version's idea of \s, and the letter,
 * mark, number and punctuation classes take Unicode 15's additions, which PCRE2
 * versions before 10.43 lack):
 *   default, gpt2, gpt-2, phi-2, mpt, olmo:  the GPT-2 regex (also when the key is
 *                                absent, as old files have it)
 *   smollm, starcoder, refact, codeshell, command-r, exaone, minerva-7b:  \p{N} (each
 *                                digit alone), then the GPT-2 regex (StarCoder 2)
 *   llama3, llama-v3, llama-bpe, falcon3, falcon-h1, pixtral:  the Llama 3 regex; a
 *                                pre-token that is a whole token is emitted without
 *                                merging (ignore_merges)
 *   smaug-bpe, dbrx:             the Llama 3 regex, merging always (Phi-4 files)
 *   qwen2, deepseek-r1-qwen:     NFC (Qwen's normalizer, with the Unicode data Hugging
 *                                Face's tokenizers applies: nfc_table.h), then the
 *                                Llama 3 regex with single digits (Qwen 2, 2.5, 3)
 *   megrez, stablelm2:           the same regex, no NFC
 *   qwen35:                      as qwen2, with combining marks (\p{M}) inside words
 *   tekken:                      Mistral's Tekken regex (case-aware words), single
 *                                digits, ignore_merges
 *   gpt-4o:                      OpenAI's o200k regex (GPT-4o, gpt-oss):
 *                                Tekken's words, each with an optional contraction
 *                                ('s 't 're 've 'm 'll 'd, any case), numbers in runs
 *                                of up to three digits
 *   falcon:                      Falcon's sequence: runs of punctuation (Unicode P and
 *                                ASCII punctuation), the GPT-2 regex, then two steps on
 *                                the byte-level text: runs of "numeric" byte-level
 *                                characters (0-9 and the bytes B2 B3 B9 BC BD BE, whose
 *                                Latin-1 characters are numeric: Hugging Face's Digits
 *                                sees the mapped text, so even the second byte of a
 *                                Cyrillic letter can split), and each leftmost run of
 *                                three ASCII digits
 * Another name is PI_ERR_UNSUPPORTED: tokens would differ from the model's own.
 * The regexes run over the well-formed UTF-8 runs of the text only; each run of bytes
 * that are not well-formed UTF-8 is a pre-token of its own. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#include "model/nfc_table.h"
#include "model/vocab.h"

/* Unicode White_Space, and its complement, inside a character class. */
#define WS                                                                                         \
  "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"                  \
  "\\x{205f}\\x{3000}"
#define CONTRACTIONS "'s|'t|'re|'ve|'m|'ll|'d"

/* The letters, marks, numbers and punctuation that Unicode 15.0 added, for PCRE2
 * versions whose tables are older (10.42 has Unicode 14; Hugging Face's Oniguruma knows
 * 15): without them a Kawi or Nag Mundari letter, a CJK Extension H ideograph or the
 * Kannada sign U+0CF3 would split words where the models' own tokenizers do not. */
#define U15_LL "\\x{1df25}-\\x{1df2a}"
#define U15_LM "\\x{1e030}-\\x{1e06d}\\x{1e4eb}"
#define U15_LO                                                                                     \
  "\\x{1123f}-\\x{11240}\\x{11f02}\\x{11f04}-\\x{11f10}\\x{11f12}-\\x{11f33}\\x{1342f}"            \
  "\\x{13441}-\\x{13446}\\x{1b132}\\x{1b155}\\x{1e4d0}-\\x{1e4ea}\\x{2b739}\\x{31350}-\\x{323af}"
#define U15_M                                                                                      \
  "\\x{cf3}\\x{ece}\\x{10efd}-\\x{10eff}\\x{11241}\\x{11f00}-\\x{11f01}\\x{11f03}"                 \
  "\\x{11f34}-\\x{11f3a}\\x{11f3e}-\\x{11f42}\\x{13440}\\x{13447}-\\x{13455}\\x{1e08f}"            \
  "\\x{1e4ec}-\\x{1e4ef}"
#define U15_N "\\x{11f50}-\\x{11f59}\\x{1e4f0}-\\x{1e4f9}\\x{1d2c0}-\\x{1d2d3}"
#define U15_P "\\x{11b00}-\\x{11b09}\\x{11f43}-\\x{11f4f}"
/* \p{L}, \p{M}, \p{N}, \p{P} with those, inside a character class. */
#define L_ "\\p{L}" U15_LL U15_LM U15_LO
#define M_ "\\p{M}" U15_M
#define N_ "\\p{N}" U15_N
#define P_ "\\p{P}" U15_P

static const char PAT_GPT2[] = CONTRACTIONS "| ?[" L_ "]+| ?[" N_ "]+| ?[^" WS L_ N_ "]+|[" WS
                                            "]+(?![^" WS "])|[" WS "]+";
static const char PAT_DIGIT[] = "[" N_ "]";
static const char PAT_LLAMA3[] = "(?i:" CONTRACTIONS ")|[^\\r\\n" L_ N_ "]?[" L_ "]+|[" N_
                                 "]{1,3}| ?[^" WS L_ N_ "]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS
                                 "]+(?![^" WS "])|[" WS "]+";
static const char PAT_QWEN2[] = "(?i:" CONTRACTIONS ")|[^\\r\\n" L_ N_ "]?[" L_ "]+|[" N_
                                "]| ?[^" WS L_ N_ "]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS
                                "]+(?![^" WS "])|[" WS "]+";
static const char PAT_QWEN35[] = "(?i:" CONTRACTIONS ")|[^\\r\\n" L_ N_ "]?[" L_ M_ "]+|[" N_
                                 "]| ?[^" WS L_ M_ N_ "]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS
                                 "]+(?![^" WS "])|[" WS "]+";
/* Words: an optional non-letter, then upper/title/modifier/other letters and marks
 * followed by lower ones, or the reverse order; "/" may trail punctuation. */
#define TEK_UP "\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}" U15_LM U15_LO U15_M
#define TEK_LO "\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}" U15_LL U15_LM U15_LO U15_M
static const char PAT_TEKKEN[] = "[^\\r\\n" L_ N_ "]?[" TEK_UP "]*[" TEK_LO "]+|[^\\r\\n" L_ N_
                                 "]?[" TEK_UP "]+[" TEK_LO "]*|[" N_ "]| ?[^" WS L_ N_
                                 "]+[\\r\\n/]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS
                                 "]+";
/* OpenAI's o200k (GPT-4o, gpt-oss): Tekken's words with an optional contraction
 * (any case) after each, numbers in runs of up to three digits. */
static const char PAT_GPT4O[] = "[^\\r\\n" L_ N_ "]?[" TEK_UP "]*[" TEK_LO "]+(?i:" CONTRACTIONS
                                ")?|[^\\r\\n" L_ N_ "]?[" TEK_UP "]+[" TEK_LO "]*(?i:"
                                CONTRACTIONS ")?|[" N_ "]{1,3}| ?[^" WS L_ N_ "]+[\\r\\n/]*|["
                                WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
/* Hugging Face's Punctuation: Unicode P, and the ASCII punctuation that is S there. */
static const char PAT_PUNCT[] = "[" P_ "$+<=>^`|~]+";

struct pre_def {
    const char *names; /* space-separated */
    const char *canonical;
    const char *patterns[PI_VOCAB_MAX_PATTERNS];
    int ignore_merges;
    int falcon_digits; /* Falcon's two digit steps on the byte-level text */
    int adds_bos;      /* add_bos_token's default when the file has no such key */
    int nfc;           /* the tokenizer.json has an NFC normalizer */
};

static const struct pre_def pre_defs[] = {
    {"default gpt2 gpt-2 phi-2 mpt olmo", "gpt2", {PAT_GPT2}, 0, 0, 0, 0},
    {"smollm starcoder refact codeshell command-r exaone minerva-7b", "smollm",
     {PAT_DIGIT, PAT_GPT2}, 0, 0, 0, 0},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral", "llama3", {PAT_LLAMA3}, 1, 0, 1, 0},
    {"smaug-bpe dbrx", "dbrx", {PAT_LLAMA3}, 0, 0, 0, 0},
    {"qwen2 deepseek-r1-qwen", "qwen2", {PAT_QWEN2}, 0, 0, 0, 1},
    {"megrez stablelm2", "stablelm2", {PAT_QWEN2}, 0, 0, 0, 0},
    {"qwen35", "qwen35", {PAT_QWEN35}, 0, 0, 0, 1},
    {"tekken", "tekken", {PAT_TEKKEN}, 1, 0, 1, 0},
    {"gpt-4o", "gpt-4o", {PAT_GPT4O}, 0, 0, 0, 0},
    {"falcon", "falcon", {PAT_PUNCT, PAT_GPT2}, 0, 1, 0, 0},
};

static int name_in(const char *names, const char *s, size_t len) {
    for (const char *p = names; *p;) {
        size_t n = strcspn(p, " ");
        if (n == len && memcmp(p, s, len) == 0)
            return 1;
        p += n;
        while (*p == ' ')
            p++;
    }
    return 0;
}

static void *pcre_alloc(PCRE2_SIZE size, void *user) {
    return pi_malloc(user, size);
}

static void pcre_free(void *ptr, void *user) {
    pi_free(user, ptr);
}

int tok_bpe_init(struct pi_vocab *v, const char *pre, size_t pre_len, const struct pi_logger *lg,
                 struct pi_error *err) {
    const struct pre_def *def = NULL;
    for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0] && !def; i++)
        if (!pre || name_in(pre_defs[i].names, pre, pre_len))
            def = &pre_defs[i];
    (void)lg;
    if (!def)
        PI_FAIL(err, PI_ERR_UNSUPPORTED,
                "metadata 'tokenizer.ggml.pre' is '%.*s': this pre-tokenizer is not "
                "supported (docs/formats.md lists those that are)",
                (int)(pre_len > 40 ? 40 : pre_len), pre);
    v->pre_name = def->canonical;
    v->ignore_merges = def->ignore_merges;
    v->falcon_digits = def->falcon_digits;
    v->pre_adds_bos = def->adds_bos;
    v->nfc = def->nfc;
    pcre2_general_context *g = pcre2_general_context_create(pcre_alloc, pcre_free, &v->alloc);
    if (!g)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory for the pre-tokenizer");
    v->pcre_gctx = g;
    pcre2_compile_context *cc = pcre2_compile_context_create(g);
    if (!cc)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory for the pre-tokenizer");
    int status = PI_OK;
    for (int i = 0; i < PI_VOCAB_MAX_PATTERNS && def->patterns[i] && status == PI_OK; i++) {
        int code;
        PCRE2_SIZE where;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)def->patterns[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &code, &where, cc);
        if (!re) {
            status = code == PCRE2_ERROR_HEAP_FAILED || code == PCRE2_ERROR_NOMEMORY
                         ? pi_error_set(err, PI_ERR_NOMEM, "out of memory for the pre-tokenizer")
                         : pi_error_set(err, PI_ERR_INTERNAL,
                                        "pre-tokenizer %s: regex %d does not "
                                        "compile (PCRE2 error %d at %zu)",
                                        def->canonical, i, code, (size_t)where);
            break;
        }
        v->patterns[v->n_patterns++] = re;
    }
    pcre2_compile_context_free(cc);
    return status;
}

int tok_bpe_set_match_limit(struct pi_vocab *v, uint32_t limit) {
    if (!v->pcre_mctx) {
        v->pcre_mctx = pcre2_match_context_create(v->pcre_gctx);
        if (!v->pcre_mctx)
            return PI_ERR_NOMEM;
    }
    pcre2_set_match_limit(v->pcre_mctx, limit);
    return PI_OK;
}

void tok_bpe_free(struct pi_vocab *v) {
    for (int i = 0; i < v->n_patterns; i++)
        pcre2_code_free(v->patterns[i]);
    v->n_patterns = 0;
    pcre2_match_context_free(v->pcre_mctx);
    v->pcre_mctx = NULL;
    pcre2_general_context_free(v->pcre_gctx);
    v->pcre_gctx = NULL;
}

void tok_scratch_free(struct tok_scratch *s) {
    for (int i = 0; i < TOK_SCRATCH_BUFS; i++) {
        pi_free(s->alloc, s->buf[i]);
        s->buf[i] = NULL;
        s->cap[i] = 0;
    }
    pcre2_match_data_free(s->match_data);
    s->match_data = NULL;
}

/* ---- merging one pre-token ----------------------------------------------------------- */

struct cand {
    int32_t rank, pos; /* the pair (pos, next[pos]) */
    int32_t left, right;
};

static int cand_before(const struct cand *a, const struct cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct cand *h, int32_t *n, struct cand c) {
    int32_t i = (*n)++;
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!cand_before(&c, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = c;
}

static struct cand heap_pop(struct cand *h, int32_t *n) {
    struct cand top = h[0], last = h[--*n];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_before(&h[c + 1], &h[c]))
            c++;
        if (!cand_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

static void try_pair(const struct pi_vocab *v, const int32_t *ids, int32_t pos, int32_t next,
                     struct cand *heap, int32_t *nheap) {
    if (pos < 0 || next < 0)
        return;
    const struct pi_merge *m = vocab_find_merge(v, ids[pos], ids[next]);
    if (m)
        heap_push(heap, nheap, (struct cand){m->rank, pos, ids[pos], ids[next]});
}

static int bpe_word(const struct pi_vocab *v, const unsigned char *p, size_t n,
                    struct tok_scratch *s, struct tok_out *o) {
    if (n == 0)
        return PI_OK;
    if (v->ignore_merges) {
        PI_TRY(tok_scratch_reserve(s, 2, 2 * n));
        char *u = s->buf[2];
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t cp = v->byte_cp[p[i]];
            if (cp < 0x80) {
                u[k++] = (char)cp;
            } else {
                u[k++] = (char)(0xc0 | (cp >> 6));
                u[k++] = (char)(0x80 | (cp & 0x3f));
            }
        }
        int32_t id = vocab_find(v, u, k);
        if (id >= 0) {
            tok_out_push(o, id);
            return PI_OK;
        }
    }
    PI_TRY(tok_scratch_reserve(s, 0, 3 * n * sizeof(int32_t)));
    PI_TRY(tok_scratch_reserve(s, 1, 3 * n * sizeof(struct cand)));
    int32_t *ids = s->buf[0], *prev = ids + n, *next = prev + n;
    struct cand *heap = s->buf[1];
    int32_t k = 0, nheap = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->byte_char_token[p[i]];
        if (id >= 0)
            ids[k++] = id;
    }
    for (int32_t i = 0; i < k; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < k ? i + 1 : -1;
    }
    for (int32_t i = 0; i + 1 < k; i++)
        try_pair(v, ids, i, i + 1, heap, &nheap);
    while (nheap > 0) {
        struct cand c = heap_pop(heap, &nheap);
        int32_t r = next[c.pos];
        if (ids[c.pos] != c.left || r < 0 || ids[r] != c.right)
            continue; /* stale: one side has been merged since */
        const struct pi_merge *m = vocab_find_merge(v, c.left, c.right);
        ids[c.pos] = m->result;
        ids[r] = -1;
        next[c.pos] = next[r];
        if (next[r] >= 0)
            prev[next[r]] = c.pos;
        try_pair(v, ids, prev[c.pos], c.pos, heap, &nheap);
        try_pair(v, ids, c.pos, next[c.pos], heap, &nheap);
    }
    for (int32_t i = k > 0 ? 0 : -1; i >= 0; i = next[i])
        tok_out_push(o, ids[i]);
    return PI_OK;
}

/* ---- pre-tokenizing ------------------------------------------------------------------- */

/* Falcon: runs of the bytes whose byte-level character is numeric (Rust's is_numeric
 * on the GPT-2 mapped text: 0-9, and B2 B3 B9 BC BD BE, the Latin-1 superscripts and
 * fractions, whatever the UTF-8 character they are part of), each a piece of its own;
 * within a run, every leftmost three ASCII digits are a piece too. */
static int is_numeric_byte(unsigned char c) {
    return (c >= '0' && c <= '9') || c == 0xb2 || c == 0xb3 || c == 0xb9 ||
           (c >= 0xbc && c <= 0xbe);
}

static int falcon_digit_split(const struct pi_vocab *v, const unsigned char *p, size_t n,
                              struct tok_scratch *s, struct tok_out *o) {
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        int num = is_numeric_byte(p[i]);
        while (i < n && is_numeric_byte(p[i]) == num)
            i++;
        if (!num) {
            PI_TRY(bpe_word(v, p + start, i - start, s, o));
            continue;
        }
        size_t run = start; /* pending bytes of the run before the next triple */
        for (size_t k = start; k + 3 <= i;) {
            if (p[k] >= '0' && p[k] <= '9' && p[k + 1] >= '0' && p[k + 1] <= '9' &&
                p[k + 2] >= '0' && p[k + 2] <= '9') {
                PI_TRY(bpe_word(v, p + run, k - run, s, o));
                PI_TRY(bpe_word(v, p + k, 3, s, o));
                k += 3;
                run = k;
            } else {
                k++;
            }
        }
        PI_TRY(bpe_word(v, p + run, i - run, s, o));
    }
    return PI_OK;
}

static int split(const struct pi_vocab *v, int level, const char *p, size_t n,
                 struct tok_scratch *s, struct tok_out *o) {
    if (n == 0)
        return PI_OK;
    if (level == v->n_patterns)
        return v->falcon_digits ? falcon_digit_split(v, (const unsigned char *)p, n, s, o)
                                : bpe_word(v, (const unsigned char *)p, n, s, o);
    const pcre2_code *re = v->patterns[level];
    size_t off = 0;
    while (off < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)p, n, off, PCRE2_NO_UTF_CHECK, s->match_data,
                             v->pcre_mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc == PCRE2_ERROR_NOMEMORY)
            return PI_ERR_NOMEM;
        /* the text, not the library, is at fault: it needs more backtracking, depth or
         * heap than PCRE2 allows one match */
        if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
            rc == PCRE2_ERROR_HEAPLIMIT)
            return PI_ERR_RANGE;
        if (rc < 0)
            return PI_ERR_INTERNAL;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->match_data);
        size_t ms = ov[0], me = ov[1];
        if (ms < off || me < ms || me > n)
            return PI_ERR_INTERNAL;
        PI_TRY(split(v, level + 1, p + off, ms - off, s, o));
        if (me == ms) { /* no pattern matches empty; step over one character anyway */
            me = ms + 1;
            while (me < n && ((unsigned char)p[me] & 0xc0) == 0x80)
                me++;
        }
        PI_TRY(split(v, level + 1, p + ms, me - ms, s, o));
        off = me;
    }
    return split(v, level + 1, p + off, n - off, s, o);
}

/* ---- NFC (Qwen's normalizer) ----------------------------------------------------------- */

/* Unicode's canonical composition over the tables of nfc_table.h: decompose each code
 * point canonically (recursively; Hangul syllables by arithmetic), put each run of
 * combining marks in the order of their classes (stable), then compose: a mark joins
 * the last starter when that pair is a primary composite and no mark of the same or a
 * higher class came between them. */
enum { HANGUL_S = 0xac00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11a7,
       HANGUL_NL = 19, HANGUL_NV = 21, HANGUL_NT = 28, HANGUL_NS = 11172 };

static int ccc_of(uint32_t cp) {
    size_t lo = 0, hi = sizeof nfc_ccc / sizeof nfc_ccc[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t c = nfc_ccc[mid] >> 8;
        if (c == cp)
            return (int)(nfc_ccc[mid] & 0xff);
        if (c < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

static const uint32_t *decomp_of(uint32_t cp) {
    size_t lo = 0, hi = sizeof nfc_decomp / sizeof nfc_decomp[0] / 3;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t c = nfc_decomp[3 * mid];
        if (c == cp)
            return &nfc_decomp[3 * mid + 1];
        if (c < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_NL && b >= HANGUL_V && b < HANGUL_V + HANGUL_NV)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_NV + (b - HANGUL_V)) * HANGUL_NT;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_NS && (a - HANGUL_S) % HANGUL_NT == 0 &&
        b > HANGUL_T && b < HANGUL_T + HANGUL_NT)
        return a + (b - HANGUL_T);
    size_t lo = 0, hi = sizeof nfc_comp / sizeof nfc_comp[0] / 3;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *e = &nfc_comp[3 * mid];
        if (e[0] == a && e[1] == b)
            return e[2];
        if (e[0] < a || (e[0] == a && e[1] < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* Append the full canonical decomposition of cp to out[*n] (room for 4 more). */
static void decompose(uint32_t cp, uint32_t *out, size_t *n) {
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_NS) {
        uint32_t i = cp - HANGUL_S;
        out[(*n)++] = HANGUL_L + i / (HANGUL_NV * HANGUL_NT);
        out[(*n)++] = HANGUL_V + (i % (HANGUL_NV * HANGUL_NT)) / HANGUL_NT;
        if (i % HANGUL_NT)
            out[(*n)++] = HANGUL_T + i % HANGUL_NT;
        return;
    }
    const uint32_t *d = decomp_of(cp);
    if (!d) {
        out[(*n)++] = cp;
        return;
    }
    decompose(d[0], out, n);
    if (d[1])
        decompose(d[1], out, n);
}

static uint32_t utf8_decode(const unsigned char *p, int32_t len) {
    if (len == 1)
        return p[0];
    uint32_t cp = p[0] & (0x7f >> len);
    for (int32_t i = 1; i < len; i++)
        cp = cp << 6 | (p[i] & 0x3f);
    return cp;
}

static size_t utf8_encode(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* NFC of n bytes of well-formed UTF-8 into s->buf[4] (*out, *out_len). Text with no
 * code point from U+0300 on is its own NFC (nothing below it decomposes into or
 * composes with anything). */
static int nfc(const char *p, size_t n, struct tok_scratch *s, const char **out,
               size_t *out_len) {
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0;
    while (i < n && u[i] < 0xcc) /* 0xcc 0x80 is U+0300 */
        i++;
    if (i == n) {
        *out = p;
        *out_len = n;
        return PI_OK;
    }
    if (n > ((size_t)-1) / 16)
        return PI_ERR_NOMEM;
    PI_TRY(tok_scratch_reserve(s, 3, 4 * n * sizeof(uint32_t)));
    PI_TRY(tok_scratch_reserve(s, 4, 16 * n));
    uint32_t *cps = s->buf[3];
    size_t k = 0;
    for (i = 0; i < n;) {
        int32_t cl = utf8_char_len(u + i, n - i);
        decompose(utf8_decode(u + i, cl), cps, &k);
        i += (size_t)cl;
    }
    /* canonical order: a stable insertion sort of each run of non-starters */
    for (size_t a = 1; a < k; a++) {
        int c = ccc_of(cps[a]);
        if (c == 0)
            continue;
        uint32_t x = cps[a];
        size_t b = a;
        while (b > 0 && ccc_of(cps[b - 1]) > c) {
            cps[b] = cps[b - 1];
            b--;
        }
        cps[b] = x;
    }
    /* compose: last is the class of the last mark kept after the starter, -1 when the
     * code point is right after it */
    size_t w = 0, starter = 0;
    int have_starter = 0, last = -1;
    for (size_t a = 0; a < k; a++) {
        uint32_t cp = cps[a];
        int c = ccc_of(cp);
        if (have_starter && (last == -1 || (last != 0 && last < c))) {
            uint32_t comp = compose_pair(cps[starter], cp);
            if (comp) {
                cps[starter] = comp;
                continue;
            }
        }
        if (c == 0) {
            starter = w;
            have_starter = 1;
            last = -1;
        } else {
            last = c;
        }
        cps[w++] = cp;
    }
    char *o = s->buf[4];
    size_t m = 0;
    for (size_t a = 0; a < w; a++)
        m += utf8_encode(cps[a], o + m);
    *out = o;
    *out_len = m;
    return PI_OK;
}

int tok_bpe_fragment(const struct pi_vocab *v, const char *text, size_t len, struct tok_scratch *s,
                     struct tok_out *o) {
    if (len == 0)
        return PI_OK;
    if (!s->match_data) {
        s->match_data = pcre2_match_data_create(1, v->pcre_gctx);
        if (!s->match_data)
            return PI_ERR_NOMEM;
    }
    /* The regexes see only well-formed UTF-8 (checked here once, so that PCRE2 need not
     * check the rest of the subject at every match); a run of invalid bytes is a
     * pre-token of its own. */
    const unsigned char *u = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        size_t start = i;
        while (i < len && (u[i] < 0x80 || utf8_char_len(u + i, len - i) > 1))
            i += (size_t)utf8_char_len(u + i, len - i);
        if (v->nfc) {
            const char *t;
            size_t tl;
            PI_TRY(nfc(text + start, i - start, s, &t, &tl));
            PI_TRY(split(v, 0, t, tl, s, o));
        } else {
            PI_TRY(split(v, 0, text + start, i - start, s, o));
        }
        start = i;
        while (i < len && u[i] >= 0x80 && utf8_char_len(u + i, len - i) == 1)
            i++;
        PI_TRY(bpe_word(v, u + start, i - start, s, o));
    }
    return PI_OK;
}
