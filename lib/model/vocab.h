/* vocab.h -- the tokenizer vocabulary of a model, read from GGUF metadata, and the
 * tokenizers over it.
 *
 * Two kinds, chosen by tokenizer.ggml.model:
 *   "llama"  SentencePiece-style BPE: pieces with scores, U+2581 for spaces, byte
 *            fallback through the <0xNN> tokens (tok_spm.c);
 *   "gpt2"   byte-level BPE: a pre-tokenizer regex chosen by tokenizer.ggml.pre (PCRE2),
 *            the GPT-2 byte-to-unicode mapping, merges by rank (tok_bpe.c).
 * Pieces and the streaming detokenizer are in detok.c.
 *
 * The vocabulary is immutable after vocab_load: every function taking a const vocab
 * may run on many threads at once (per-call work memory comes from the allocator).
 * Token texts point into the model's file bytes, which outlive the vocabulary. */
#ifndef PI_MODEL_VOCAB_H
#define PI_MODEL_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "util/alloc.h"
#include "util/error.h"
#include "util/log.h"

enum pi_vocab_kind {
    PI_VOCAB_SPM = 1, /* tokenizer.ggml.model = "llama" */
    PI_VOCAB_BPE = 2, /* tokenizer.ggml.model = "gpt2" */
};

/* tokenizer.ggml.token_type values. 0 (undefined) is read as normal. */
enum pi_token_type {
    PI_TOK_NORMAL = 1,
    PI_TOK_UNKNOWN = 2,
    PI_TOK_CONTROL = 3,
    PI_TOK_USER = 4,
    PI_TOK_UNUSED = 5,
    PI_TOK_BYTE = 6,
};

struct pi_token {
    const char *text; /* into the file; not NUL-terminated */
    uint32_t len;
    uint8_t type; /* enum pi_token_type */
    uint8_t byte; /* the byte of a PI_TOK_BYTE token */
    float score;  /* tokenizer.ggml.scores, 0 when absent */
};

struct pi_text_key {
    uint64_t prefix; /* the first 8 bytes of the text, big-endian, zero-padded */
    int32_t id;
    int32_t unused;
};

/* A merge "a b" of byte-level BPE: ids of a, b and of the token a+b. */
struct pi_merge {
    int32_t left, right, result;
    int32_t rank; /* its index in tokenizer.ggml.merges: lower merges first */
};

#define PI_VOCAB_MAX_PATTERNS 4

struct pi_vocab {
    struct pi_allocator alloc; /* copy; everything below was allocated with it */
    enum pi_vocab_kind kind;
    int32_t n_tokens;
    struct pi_token *tokens;

    /* Ids sorted by text (then id), for binary search: a hostile file cannot make
     * lookups slower than O(log n), whatever its texts. Each entry carries the first
     * 8 bytes of its text as a big-endian number, so most comparisons are one integer
     * comparison on this array instead of a memcmp in the file. */
    struct pi_text_key *by_text;

    /* Merges sorted by (left, right, rank), for binary search. */
    struct pi_merge *merges;
    int32_t n_merges;

    /* Special ids, -1 when absent. */
    int32_t bos, eos, unk, pad, eot, eom;
    int add_bos, add_eos, add_space_prefix;

    /* End-of-generation ids (eos, eot, eom and control tokens whose text is a known
     * end marker), sorted, without duplicates. */
    int32_t *eog;
    int32_t n_eog;

    /* Control and user-defined tokens with non-empty text, longest first (ties by
     * id): user-defined ones are split out of every text, control ones with
     * PI_TOKENIZE_PARSE_SPECIAL. */
    int32_t *specials;
    int32_t n_specials;
    int32_t n_user; /* of them user-defined: split out of the text always */

    /* SPM: the <0xNN> token of each byte, -1 if the vocabulary has none. */
    int32_t byte_token[256];

    /* BPE: the GPT-2 mapping of bytes to code points and back, and the token of each
     * byte's one-character text (-1 if missing). */
    uint16_t byte_cp[256];
    int16_t cp_byte[324];
    int32_t byte_char_token[256];
    int ignore_merges;    /* a pre-token that is a whole token skips the merges */
    int falcon_digits;    /* Falcon's digit splits on the byte-level text (tok_bpe.c) */
    int pre_adds_bos;     /* add_bos_token's default for this pre-tokenizer */
    int nfc;              /* NFC-normalise each fragment first (Qwen's tokenizer.json) */
    const char *pre_name; /* the pre-tokenizer in use (static string) */
    int n_patterns;       /* applied in order, each splitting the last one's pieces */
    void *patterns[PI_VOCAB_MAX_PATTERNS]; /* pcre2_code_8 * */
    void *pcre_gctx;                       /* pcre2_general_context_8 *: allocations via `alloc` */
    void *pcre_mctx; /* pcre2_match_context_8 * with lowered limits (tests), or NULL: PCRE2's */
};

/* Read the tokenizer metadata of `f`. With no tokenizer.ggml.model key (or "none" /
 * "no_vocab") *out is NULL and the result PI_OK. Malformed metadata: PI_ERR_FORMAT
 * naming the key; an unknown tokenizer.ggml.model: PI_ERR_UNSUPPORTED. `f` must stay
 * mapped while the vocabulary lives. */
int vocab_load(struct pi_vocab **out, const struct gguf_file *f, const struct pi_allocator *a,
               const struct pi_logger *lg, struct pi_error *err);
void vocab_free(struct pi_vocab *v);

/* The id of the token whose text is exactly s[0..len), or -1. */
int32_t vocab_find(const struct pi_vocab *v, const char *s, size_t len);
/* The merge of (left, right), or NULL. */
const struct pi_merge *vocab_find_merge(const struct pi_vocab *v, int32_t left, int32_t right);
int vocab_is_eog(const struct pi_vocab *v, int32_t id);

/* ---- tokenizing (vocab.c, tok_spm.c, tok_bpe.c) ----------------------------------- */

/* Length of the well-formed UTF-8 character at p (n bytes left), or 1 for a byte
 * that does not start one. */
static inline int32_t utf8_char_len(const unsigned char *p, size_t n) {
    unsigned char c = p[0];
    int32_t need;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        need = 2;
    else if (c >= 0xe0 && c <= 0xef)
        need = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        need = 4;
    else
        return 1;
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if ((size_t)need > n)
        return 1;
    for (int32_t i = 1; i < need; i++) {
        if (p[i] < lo || p[i] > hi)
            return 1;
        lo = 0x80;
        hi = 0xbf;
    }
    return need;
}

/* Output of a tokenizer: writes the first `cap` ids, counts all. */
struct tok_out {
    int32_t *ids;
    size_t cap;
    int64_t n;
};

static inline void tok_out_push(struct tok_out *o, int32_t id) {
    if ((uint64_t)o->n < o->cap)
        o->ids[o->n] = id;
    o->n++;
}

/* Per-call scratch memory, grown on demand through the vocabulary's allocator. */
#define TOK_SCRATCH_BUFS 5
struct tok_scratch {
    const struct pi_allocator *alloc;
    void *buf[TOK_SCRATCH_BUFS]; /* BPE: 0-2 merging, 3-4 NFC */
    size_t cap[TOK_SCRATCH_BUFS];
    void *match_data; /* pcre2_match_data_8 * (BPE), created on first use */
};

/* Make sure s->buf[which] (0..TOK_SCRATCH_BUFS-1) holds `size` bytes; its old contents
 * are lost. */
int tok_scratch_reserve(struct tok_scratch *s, int which, size_t size);
void tok_scratch_free(struct tok_scratch *s);

/* The whole of pi_tokenize: special-token splitting, BOS/EOS, the tokenizer of the
 * vocabulary's kind. Returns PI_OK or PI_ERR_NOMEM / PI_ERR_INTERNAL; o->n counts the
 * tokens. */
int vocab_tokenize(const struct pi_vocab *v, const char *text, size_t len, int parse_special,
                   int add_special, struct tok_out *o);

/* One fragment of raw text (no special tokens in it). `first` tells the SPM
 * tokenizer that the fragment starts the text or follows a special token. */
int tok_spm_fragment(const struct pi_vocab *v, const char *text, size_t len, int first,
                     struct tok_scratch *s, struct tok_out *o);
int tok_bpe_fragment(const struct pi_vocab *v, const char *text, size_t len, struct tok_scratch *s,
                     struct tok_out *o);
/* Lower PCRE2's match limit for the pre-tokenizer's regexes (tests: a text that hits the
 * limit is PI_ERR_RANGE). PI_OK, PI_ERR_NOMEM. */
int tok_bpe_set_match_limit(struct pi_vocab *v, uint32_t limit);
/* Compile the pre-tokenizer of `pre` (the value of tokenizer.ggml.pre, may be NULL)
 * into v->patterns. NULL (no key) is the GPT-2 pre-tokenizer; an unknown name is
 * PI_ERR_UNSUPPORTED naming it. */
int tok_bpe_init(struct pi_vocab *v, const char *pre, size_t pre_len, const struct pi_logger *lg,
                 struct pi_error *err);
void tok_bpe_free(struct pi_vocab *v);

/* ---- pieces and the detokenizer (detok.c) ------------------------------------------ */

/* Receives the bytes of a piece in one or more chunks. */
typedef void (*piece_sink_fn)(void *ctx, const char *bytes, size_t n);

/* Emit the bytes `id` stands for (PI_PIECE_* flags) into sink; id must be valid. */
void vocab_piece(const struct pi_vocab *v, int32_t id, uint32_t flags, piece_sink_fn sink,
                 void *ctx);

/* Streaming UTF-8 assembly of pieces. */
struct pi_detok_state {
    unsigned char pend[4];
    int npend; /* bytes held: a proper prefix of a well-formed sequence */
    int need;  /* length of that sequence */
};

/* Feed the piece of `id` to the state; complete text goes to fn. Returns PI_OK or
 * PI_ERR_ABORTED. */
int detok_push(const struct pi_vocab *v, struct pi_detok_state *st, uint32_t flags, int32_t id,
               pi_text_fn fn, void *user);
int detok_flush(struct pi_detok_state *st, pi_text_fn fn, void *user);

#endif
