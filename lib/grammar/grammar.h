/* grammar.h -- constrained decoding: a GBNF grammar compiled into a pushdown recogniser
 * over bytes, and the vocabulary mask.
 *
 * gbnf.c parses GBNF text into `struct gram` (flat code, below) and checks it: every
 * rule defined, no left recursion, bounded sizes. match.c runs it: the state is a set of
 * parse stacks, each a chain of interned frames, plus the UTF-8 bytes of a code point
 * read so far; the mask walks a trie of the vocabulary's pieces. Depends on util/ only. */
#ifndef PI_GRAMMAR_GRAMMAR_H
#define PI_GRAMMAR_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "util/alloc.h"
#include "util/error.h"

/* Limits that bound a hostile grammar's cost. */
#define GRAM_MAX_TEXT      (1u << 20) /* grammar text bytes */
#define GRAM_MAX_RULES     8192       /* rules, the generated ones (groups, repeats) included */
#define GRAM_MAX_CODE      (1u << 21) /* code words of the compiled grammar */
#define GRAM_MAX_REPEAT    1000       /* m and n of x{m,n} */
#define GRAM_MAX_NEST      64         /* nested parentheses */
#define GRAM_MAX_STACKS    1024       /* parse stacks alive at once */
#define GRAM_MAX_DEPTH     512        /* frames of one parse stack */
#define GRAM_MAX_NODES     (1u << 22) /* interned frames */
#define GRAM_MAX_WORK      (1u << 16) /* expansion steps of one code point's step */
#define GRAM_MAX_MASK_WORK (1u << 21) /* expansion steps of one mask, all branches */

/* Code words. A rule's code is its alternatives, each a run of elements, separated by
 * G_ALT and ended by G_END. Elements: G_RULE r (a rule reference), G_CLASS n lo0 hi0 ..
 * (a code point in one of n sorted, disjoint, inclusive ranges; negated classes and "."
 * are stored as their complement over 0..0x10FFFF). */
enum { G_END = 0, G_ALT = 1, G_RULE = 2, G_CLASS = 3 };

struct gram {
    uint32_t *code; /* [n_code] */
    uint32_t n_code;
    uint32_t n_rules;
    uint32_t *alt_at; /* [n_rules + 1]: alts[alt_at[r] .. alt_at[r + 1]) are rule r's */
    uint32_t *alts;   /* code positions of each alternative's first element */
    uint32_t root;
};

/* Parse and check `len` bytes of GBNF; `root` names the start rule. On failure err holds
 * "line:col: reason" (or a reason without a place) and the status is PI_ERR_FORMAT
 * (syntax, undefined rule, left recursion), PI_ERR_RANGE (a limit) or PI_ERR_NOMEM. */
int gram_parse(const struct pi_allocator *a, const char *text, size_t len, const char *root,
               struct gram *out, struct pi_error *err);
void gram_free(const struct pi_allocator *a, struct gram *g);

/* ---- match.c: the recogniser -------------------------------------------------------- */

/* A frame of a parse stack: `pos` is the next element to match in some alternative,
 * `parent` the frame to go on with once that alternative is done (GN_NONE: the end of
 * the text). Frames are interned (one id per (pos, parent)), so a stack is the id of its
 * top and equal stacks have equal ids; a parent's id is always below its children's. */
#define GN_NONE UINT32_MAX

struct gnode {
    uint32_t pos, parent;
    uint32_t next;  /* hash chain */
    uint32_t depth; /* frames in the chain */
};

/* A state: the stacks (ids of their tops, each at a G_CLASS) in the set arena at
 * [off, off + n); can_end: the text may end here; need/len/acc: a UTF-8 sequence of len
 * bytes begun, `need` continuation bytes still to come, acc the bits so far. */
struct gset {
    uint32_t off, n;
    uint32_t acc;
    uint8_t need, len, can_end;
};

/* The vocabulary's pieces as a trie: node 0 is the root; children in sibling lists;
 * tokens whose piece ends at a node in a list through tok_next. */
struct gtrie {
    uint32_t n, max_depth;
    uint32_t *first, *sibling, *tok_head; /* [n]; GN_NONE: none */
    uint8_t *byte;                        /* [n]: the edge into the node */
    uint32_t *tok_next;                   /* [n_vocab] */
};

struct gmatch {
    const struct gram *g;
    const struct pi_allocator *a;
    struct gnode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *bucket, n_bucket; /* power of two */
    uint32_t *mark, *remap;     /* [cap_nodes] */
    uint32_t epoch;
    uint32_t *sets; /* the set arena */
    uint32_t n_sets, cap_sets;
    uint32_t *work; /* closure work: (pos, parent) pairs */
    uint32_t cap_work;
    void *frames; /* the mask's walk, [trie max_depth + 1] */
    uint32_t cap_frames;
    uint32_t step_work; /* expansions in this step */
    uint32_t mask_left; /* expansions the mask may still make; 0: not masking */
    struct gset cur;
};

/* Start (or restart) at the grammar's root. PI_OK, PI_ERR_NOMEM, PI_ERR_UNSUPPORTED (a
 * limit: the stacks would be too many or too deep). */
int gm_init(struct gmatch *m, const struct gram *g, const struct pi_allocator *a);
int gm_reset(struct gmatch *m);
int gm_copy(struct gmatch *dst, const struct gmatch *src);
void gm_free(struct gmatch *m);
/* Read bytes: PI_OK (the text so far is a prefix of the language; the state moved on),
 * PI_ERR_RANGE (byte *at cannot follow; nothing changed), PI_ERR_UNSUPPORTED (a limit;
 * nothing changed), PI_ERR_NOMEM. */
int gm_feed(struct gmatch *m, const uint8_t *bytes, size_t n, size_t *at);
/* 1 if the text so far is a whole sentence of the language. */
int gm_complete(const struct gmatch *m);
/* ok[t] = 1 for each token of the trie whose piece can be read next (others untouched);
 * returns how many, PI_ERR_NOMEM, or PI_ERR_UNSUPPORTED when the whole walk needs more
 * than GRAM_MAX_MASK_WORK expansions. A branch whose step hits a limit counts as refused
 * (as gm_feed refuses it). */
int64_t gm_mask(struct gmatch *m, const struct gtrie *t, uint8_t *ok);

/* Words a G_CLASS element at code[pos] takes. */
static inline uint32_t gram_class_len(const struct gram *g, uint32_t pos) {
    return 2 + 2 * g->code[pos + 1];
}

#endif
