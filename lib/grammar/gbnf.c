/* gbnf.c -- the GBNF parser: text -> struct gram.
 *
 * The notation (llama.cpp's grammar format): rules `name ::= alternatives`, one per line
 * (a rule may continue on the next lines inside parentheses, after `::=` or `|`, or on a
 * line that starts with `|`); alternatives separated by `|`; elements are rule names,
 * string literals "..." (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), character
 * classes [a-z0-9_] and [^...], `.` (any code point), groups ( ... ), and the postfixes
 * `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`; `#` starts a comment.
 *
 * Groups and repetitions become generated rules, so the compiled form has only rule
 * references and character classes: x* is R ::= x R | (empty), a tail call that the
 * recogniser runs without growing its stacks; x+ is x x*; x? is R ::= x | (empty);
 * x{m,n} is m copies of x then a chain of n-m nested optional rules.
 *
 * Checks after parsing: every referenced rule is defined (once), the root exists, and no
 * rule can derive itself at its left edge (left recursion would make the recogniser's
 * stacks grow without reading anything): found with the nullable rules (a worklist
 * fixpoint, linear in the code) and a depth-first search of the "can start with" graph. */
#include <stdio.h>
#include <string.h>

#include "grammar/grammar.h"

struct vec {
    uint32_t *v;
    size_t n, cap;
};

struct prule {
    const char *name; /* into the text; NULL for a generated rule */
    size_t name_len;
    uint32_t owner; /* generated: the named rule it was made for */
    struct vec code;
    int defined;
    const char *used_at; /* first reference, for "undefined rule" */
    const char *def_at;  /* its definition */
};

struct parser {
    const struct pi_allocator *a;
    const char *start, *s, *end;
    struct pi_error *err;
    struct prule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t cur;  /* the named rule being defined */
    size_t n_code; /* code words in all rules so far */
    int nest;
};

static void where(const struct parser *p, const char *at, unsigned *line, unsigned *col) {
    *line = 1;
    *col = 1;
    for (const char *c = p->start; c < at && c < p->end; c++) {
        if (*c == '\n') {
            ++*line;
            *col = 1;
        } else if (((unsigned char)*c & 0xC0) != 0x80) {
            ++*col;
        }
    }
}

static int fail_at(struct parser *p, const char *at, int status, const char *what) {
    unsigned line, col;
    where(p, at, &line, &col);
    return pi_error_set(p->err, status, "%u:%u: %s", line, col, what);
}

static int vec_push(struct parser *p, struct vec *v, uint32_t x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        uint32_t *nv = pi_malloc(p->a, cap * sizeof *nv);
        if (!nv)
            return pi_error_set(p->err, PI_ERR_NOMEM, "out of memory");
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof *nv);
        pi_free(p->a, v->v);
        v->v = nv;
        v->cap = cap;
    }
    if (++p->n_code > GRAM_MAX_CODE)
        return fail_at(p, p->s, PI_ERR_RANGE,
                       "the grammar is too large once repetitions are expanded");
    v->v[v->n++] = x;
    return PI_OK;
}

static int vec_append(struct parser *p, struct vec *v, const uint32_t *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        PI_TRY(vec_push(p, v, x[i]));
    return PI_OK;
}

static int new_rule(struct parser *p, const char *name, size_t len, uint32_t *id) {
    if (p->n_rules >= GRAM_MAX_RULES)
        return fail_at(p, p->s, PI_ERR_RANGE, "too many rules (groups and repetitions count)");
    if (p->n_rules == p->cap_rules) {
        uint32_t cap = p->cap_rules ? p->cap_rules * 2 : 32;
        struct prule *nr = pi_calloc(p->a, cap, sizeof *nr);
        if (!nr)
            return pi_error_set(p->err, PI_ERR_NOMEM, "out of memory");
        if (p->n_rules)
            memcpy(nr, p->rules, p->n_rules * sizeof *nr);
        pi_free(p->a, p->rules);
        p->rules = nr;
        p->cap_rules = cap;
    }
    struct prule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->name_len = len;
    r->owner = name ? p->n_rules : p->cur;
    *id = p->n_rules++;
    return PI_OK;
}

static int lookup(struct parser *p, const char *name, size_t len, uint32_t *id) {
    for (uint32_t i = 0; i < p->n_rules; i++) {
        const struct prule *r = &p->rules[i];
        if (r->name && r->name_len == len && !memcmp(r->name, name, len)) {
            *id = i;
            return PI_OK;
        }
    }
    return new_rule(p, name, len, id);
}

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Spaces, tabs, comments; newlines too when newline_ok. */
static void skip_space(struct parser *p, int newline_ok) {
    while (p->s < p->end) {
        char c = *p->s;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            p->s++;
        } else if (c == '#') {
            while (p->s < p->end && *p->s != '\n')
                p->s++;
        } else {
            break;
        }
    }
}

/* One UTF-8 code point of the grammar text. */
static int utf8_char(struct parser *p, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)p->s;
    size_t left = (size_t)(p->end - p->s);
    unsigned c = s[0], need;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        p->s++;
        return PI_OK;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, v = c & 0x07, min = 0x10000;
    } else {
        return fail_at(p, p->s, PI_ERR_FORMAT, "invalid UTF-8");
    }
    if (left <= need)
        return fail_at(p, p->s, PI_ERR_FORMAT, "invalid UTF-8");
    for (unsigned i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return fail_at(p, p->s, PI_ERR_FORMAT, "invalid UTF-8");
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return fail_at(p, p->s, PI_ERR_FORMAT, "invalid UTF-8");
    *cp = v;
    p->s += need + 1;
    return PI_OK;
}

static int hex_digits(struct parser *p, int n, uint32_t *cp) {
    const char *at = p->s - 2;
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (p->s >= p->end)
            return fail_at(p, at, PI_ERR_FORMAT, "truncated \\x, \\u or \\U escape");
        char c = *p->s++;
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return fail_at(p, p->s - 1, PI_ERR_FORMAT, "expected a hex digit");
        v = v * 16 + d;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return fail_at(p, at, PI_ERR_FORMAT, "escape is not a Unicode scalar value");
    *cp = v;
    return PI_OK;
}

/* A character of a literal or class: an escape or a code point. */
static int one_char(struct parser *p, uint32_t *cp) {
    if (*p->s != '\\')
        return utf8_char(p, cp);
    if (p->end - p->s < 2)
        return fail_at(p, p->s, PI_ERR_FORMAT, "unterminated escape");
    char c = p->s[1];
    p->s += 2;
    switch (c) {
    case 'n':
        *cp = '\n';
        return PI_OK;
    case 'r':
        *cp = '\r';
        return PI_OK;
    case 't':
        *cp = '\t';
        return PI_OK;
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/':
        *cp = (unsigned char)c;
        return PI_OK;
    case 'x':
        return hex_digits(p, 2, cp);
    case 'u':
        return hex_digits(p, 4, cp);
    case 'U':
        return hex_digits(p, 8, cp);
    default:
        return fail_at(p, p->s - 2, PI_ERR_FORMAT, "unknown escape");
    }
}

static int emit_class(struct parser *p, struct vec *out, const uint32_t *rng, uint32_t n) {
    PI_TRY(vec_push(p, out, G_CLASS));
    PI_TRY(vec_push(p, out, n));
    return vec_append(p, out, rng, 2 * (size_t)n);
}

/* [ ... ]: ranges sorted and merged; a negated class stored as its complement. */
static int parse_class(struct parser *p, struct vec *out) {
    const char *open = p->s++;
    int neg = p->s < p->end && *p->s == '^';
    p->s += neg;
    struct vec r = {0};
    int st = PI_OK;
    while (st == PI_OK) {
        if (p->s >= p->end || *p->s == '\n') {
            st = fail_at(p, open, PI_ERR_FORMAT, "unterminated character class");
            break;
        }
        if (*p->s == ']') {
            p->s++;
            break;
        }
        uint32_t lo, hi;
        if ((st = one_char(p, &lo)) != PI_OK)
            break;
        hi = lo;
        if (p->end - p->s >= 2 && p->s[0] == '-' && p->s[1] != ']') {
            p->s++;
            const char *at = p->s;
            if ((st = one_char(p, &hi)) != PI_OK)
                break;
            if (hi < lo) {
                st = fail_at(p, at, PI_ERR_FORMAT, "range end is below its start");
                break;
            }
        }
        /* insertion sort by start; classes are short */
        if ((st = vec_push(p, &r, lo)) != PI_OK || (st = vec_push(p, &r, hi)) != PI_OK)
            break;
        for (size_t i = r.n - 2; i >= 2 && r.v[i - 2] > r.v[i]; i -= 2) {
            uint32_t t0 = r.v[i - 2], t1 = r.v[i - 1];
            r.v[i - 2] = r.v[i], r.v[i - 1] = r.v[i + 1];
            r.v[i] = t0, r.v[i + 1] = t1;
        }
    }
    if (st == PI_OK) {
        size_t m = 0; /* merge overlapping and adjacent ranges in place */
        for (size_t i = 0; i < r.n; i += 2) {
            if (m && r.v[i] <= r.v[m - 1] + 1) {
                if (r.v[i + 1] > r.v[m - 1])
                    r.v[m - 1] = r.v[i + 1];
            } else {
                r.v[m++] = r.v[i], r.v[m++] = r.v[i + 1];
            }
        }
        r.n = m;
        if (neg) {
            struct vec c = {0};
            uint32_t next = 0;
            for (size_t i = 0; i < r.n && st == PI_OK; i += 2) {
                if (r.v[i] > next)
                    st =
                        vec_push(p, &c, next) || vec_push(p, &c, r.v[i] - 1) ? PI_ERR_NOMEM : PI_OK;
                next = r.v[i + 1] + 1;
            }
            if (st == PI_OK && next <= 0x10FFFF)
                st = vec_push(p, &c, next) || vec_push(p, &c, 0x10FFFF) ? PI_ERR_NOMEM : PI_OK;
            if (st == PI_OK)
                st = emit_class(p, out, c.v, (uint32_t)(c.n / 2));
            pi_free(p->a, c.v);
        } else {
            st = emit_class(p, out, r.v, (uint32_t)(r.n / 2));
        }
    }
    pi_free(p->a, r.v);
    return st;
}

static int parse_literal(struct parser *p, struct vec *out) {
    const char *open = p->s++;
    for (;;) {
        if (p->s >= p->end || *p->s == '\n')
            return fail_at(p, open, PI_ERR_FORMAT, "unterminated string literal");
        if (*p->s == '"') {
            p->s++;
            return PI_OK;
        }
        uint32_t cp;
        PI_TRY(one_char(p, &cp));
        uint32_t rng[2] = {cp, cp};
        PI_TRY(emit_class(p, out, rng, 1));
    }
}

static int parse_alternatives(struct parser *p, struct vec *out, int nested);

/* Make rule `id`'s code: `x` then, when `self`, a reference to itself, as alternative one;
 * the empty alternative two. */
static int make_optional(struct parser *p, uint32_t id, const struct vec *x, int self,
                         uint32_t tail) {
    struct vec *c = &p->rules[id].code;
    PI_TRY(vec_append(p, c, x->v, x->n));
    if (self || tail != UINT32_MAX) {
        PI_TRY(vec_push(p, c, G_RULE));
        PI_TRY(vec_push(p, c, self ? id : tail));
    }
    PI_TRY(vec_push(p, c, G_ALT));
    PI_TRY(vec_push(p, c, G_END));
    p->rules[id].defined = 1;
    return PI_OK;
}

static int parse_count(struct parser *p, uint32_t *v) {
    const char *at = p->s;
    uint32_t n = 0;
    if (p->s >= p->end || *p->s < '0' || *p->s > '9')
        return fail_at(p, at, PI_ERR_FORMAT, "expected a repetition count");
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        n = n * 10 + (uint32_t)(*p->s++ - '0');
        if (n > GRAM_MAX_REPEAT)
            return fail_at(p, at, PI_ERR_RANGE, "repetition count above 1000");
    }
    *v = n;
    return PI_OK;
}

/* The postfix at p->s applied to x = out[from..): out is cut back to `from` and gets
 * the expansion. */
static int apply_postfix(struct parser *p, struct vec *out, size_t from) {
    const char *at = p->s;
    char op = *p->s++;
    uint32_t lo, hi; /* hi UINT32_MAX: unbounded */
    if (op == '*')
        lo = 0, hi = UINT32_MAX;
    else if (op == '+')
        lo = 1, hi = UINT32_MAX;
    else if (op == '?')
        lo = 0, hi = 1;
    else { /* { m } { m , } { m , n } */
        skip_space(p, 0);
        PI_TRY(parse_count(p, &lo));
        skip_space(p, 0);
        hi = lo;
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            skip_space(p, 0);
            hi = UINT32_MAX;
            if (p->s < p->end && *p->s != '}')
                PI_TRY(parse_count(p, &hi));
            skip_space(p, 0);
        }
        if (p->s >= p->end || *p->s != '}')
            return fail_at(p, p->s, PI_ERR_FORMAT, "expected '}'");
        p->s++;
        if (hi < lo)
            return fail_at(p, at, PI_ERR_FORMAT, "repetition {m,n} with n below m");
    }
    struct vec x = {0};
    int st = out->n > from ? vec_append(p, &x, out->v + from, out->n - from) : PI_OK;
    p->n_code -= out->n - from;
    out->n = from;
    if (st == PI_OK && x.n) {
        for (uint32_t i = 0; i < lo && st == PI_OK; i++)
            st = vec_append(p, out, x.v, x.n);
        uint32_t id = UINT32_MAX;
        if (st == PI_OK && hi == UINT32_MAX) {
            st = new_rule(p, NULL, 0, &id);
            if (st == PI_OK)
                st = make_optional(p, id, &x, 1, UINT32_MAX);
        } else {
            for (uint32_t i = lo; i < hi && st == PI_OK; i++) { /* innermost first */
                uint32_t tail = id;
                st = new_rule(p, NULL, 0, &id);
                if (st == PI_OK)
                    st = make_optional(p, id, &x, 0, tail);
            }
        }
        if (st == PI_OK && id != UINT32_MAX)
            st = vec_push(p, out, G_RULE) || vec_push(p, out, id) ? PI_ERR_NOMEM : PI_OK;
    }
    p->n_code -= x.n; /* the copy x is gone; its expansion stays */
    pi_free(p->a, x.v);
    return st;
}

static int parse_sequence(struct parser *p, struct vec *out, int nested) {
    for (;;) {
        skip_space(p, nested);
        if (p->s >= p->end)
            return PI_OK;
        char c = *p->s;
        if (c == '|' || c == ')' || c == '\n' || c == '\r')
            return PI_OK;
        size_t from = out->n;
        if (c == '"') {
            PI_TRY(parse_literal(p, out));
        } else if (c == '[') {
            PI_TRY(parse_class(p, out));
        } else if (c == '.') {
            p->s++;
            uint32_t any[2] = {0, 0x10FFFF};
            PI_TRY(emit_class(p, out, any, 1));
        } else if (c == '(') {
            const char *open = p->s++;
            if (++p->nest > GRAM_MAX_NEST)
                return fail_at(p, open, PI_ERR_RANGE, "parentheses nested deeper than 64");
            uint32_t id;
            PI_TRY(new_rule(p, NULL, 0, &id));
            struct vec body = {0};
            int st = parse_alternatives(p, &body, 1);
            if (st == PI_OK && (p->s >= p->end || *p->s != ')'))
                st = fail_at(p, open, PI_ERR_FORMAT, "unclosed '('");
            if (st != PI_OK) {
                pi_free(p->a, body.v);
                return st;
            }
            p->s++;
            p->nest--;
            p->rules[id].code = body;
            p->rules[id].defined = 1;
            PI_TRY(vec_push(p, out, G_RULE));
            PI_TRY(vec_push(p, out, id));
        } else if (is_name_char(c)) {
            const char *name = p->s;
            while (p->s < p->end && is_name_char(*p->s))
                p->s++;
            uint32_t id;
            PI_TRY(lookup(p, name, (size_t)(p->s - name), &id));
            if (!p->rules[id].used_at)
                p->rules[id].used_at = name;
            PI_TRY(vec_push(p, out, G_RULE));
            PI_TRY(vec_push(p, out, id));
        } else {
            return fail_at(p, p->s, PI_ERR_FORMAT,
                           "expected a rule name, a \"literal\", a [class], '.' or '('");
        }
        for (;;) {
            if (p->s < p->end && (*p->s == '*' || *p->s == '+' || *p->s == '?' || *p->s == '{'))
                PI_TRY(apply_postfix(p, out, from));
            else
                break;
        }
    }
}

/* Does a line further down start with '|' (blank lines and comments skipped)? */
static int continues(struct parser *p) {
    const char *save = p->s;
    skip_space(p, 1);
    if (p->s < p->end && *p->s == '|')
        return 1;
    p->s = save;
    return 0;
}

static int parse_alternatives(struct parser *p, struct vec *out, int nested) {
    PI_TRY(parse_sequence(p, out, nested));
    while (p->s < p->end && (*p->s == '|' || (!nested && continues(p)))) {
        p->s++;
        skip_space(p, 1);
        PI_TRY(vec_push(p, out, G_ALT));
        PI_TRY(parse_sequence(p, out, nested));
    }
    return vec_push(p, out, G_END);
}

static int parse_rules(struct parser *p) {
    for (;;) {
        skip_space(p, 1);
        if (p->s >= p->end)
            return PI_OK;
        const char *name = p->s;
        while (p->s < p->end && is_name_char(*p->s))
            p->s++;
        if (p->s == name)
            return fail_at(p, p->s, PI_ERR_FORMAT, "expected a rule name");
        uint32_t id;
        PI_TRY(lookup(p, name, (size_t)(p->s - name), &id));
        if (p->rules[id].defined)
            return fail_at(p, name, PI_ERR_FORMAT, "rule defined twice");
        p->rules[id].defined = 1;
        p->rules[id].def_at = name;
        p->cur = id;
        skip_space(p, 0);
        if (p->end - p->s < 3 || memcmp(p->s, "::=", 3) != 0)
            return fail_at(p, p->s, PI_ERR_FORMAT, "expected '::='");
        p->s += 3;
        skip_space(p, 1);
        struct vec body = {0};
        int st = parse_alternatives(p, &body, 0);
        if (st == PI_OK && p->s < p->end && *p->s == ')')
            st = fail_at(p, p->s, PI_ERR_FORMAT, "unexpected ')'");
        p->rules[id].code = body; /* freed with the rules on failure */
        PI_TRY(st);
    }
}

/* ---- checks ------------------------------------------------------------------------- */

static uint32_t elem_len(const uint32_t *code, uint32_t pos) {
    return code[pos] == G_CLASS ? 2 + 2 * code[pos + 1] : code[pos] == G_RULE ? 2 : 1;
}

static void rule_label(const struct parser *p, uint32_t r, char *buf, size_t cap) {
    const struct prule *o = &p->rules[p->rules[r].owner];
    size_t n = o->name_len < 64 ? o->name_len : 64;
    if (r == p->rules[r].owner)
        snprintf(buf, cap, "'%.*s'", (int)n, o->name);
    else
        snprintf(buf, cap, "a group or repetition in '%.*s'", (int)n, o->name);
}

/* Nullable rules (worklist), then left recursion (DFS of the "can start with" graph). */
static int check_left_recursion(struct parser *p, struct gram *g) {
    const uint32_t nr = g->n_rules, na = g->alt_at[nr];
    int st = PI_OK;
    uint8_t *nullable = pi_calloc(p->a, nr, 1);
    uint32_t *pending = pi_calloc(p->a, na ? na : 1, sizeof *pending); /* per alt */
    uint32_t *alt_rule = pi_calloc(p->a, na ? na : 1, sizeof *alt_rule);
    uint32_t *work = pi_calloc(p->a, nr, sizeof *work);
    /* reverse edges: refs[ref_at[s] .. ref_at[s+1]) = alternatives that mention s */
    uint32_t *ref_at = pi_calloc(p->a, (size_t)nr + 1, sizeof *ref_at);
    uint32_t n_refs = 0;
    for (uint32_t pos = 0; pos < g->n_code; pos += elem_len(g->code, pos))
        n_refs += g->code[pos] == G_RULE;
    uint32_t *refs = pi_calloc(p->a, n_refs ? n_refs : 1, sizeof *refs);
    uint32_t *fill = pi_calloc(p->a, (size_t)nr + 1, sizeof *fill);
    uint8_t *color = pi_calloc(p->a, nr, 1);
    uint32_t *dfs = pi_calloc(p->a, nr, sizeof *dfs),
             *dfs_pos = pi_calloc(p->a, nr, sizeof *dfs_pos);
    if (!nullable || !pending || !alt_rule || !work || !ref_at || !refs || !fill || !color ||
        !dfs || !dfs_pos) {
        st = pi_error_set(p->err, PI_ERR_NOMEM, "out of memory");
        goto done;
    }
    uint32_t n_work = 0;
    for (uint32_t r = 0; r < nr; r++) {
        for (uint32_t k = g->alt_at[r]; k < g->alt_at[r + 1]; k++) {
            alt_rule[k] = r;
            int has_class = 0;
            for (uint32_t pos = g->alts[k]; g->code[pos] > G_ALT; pos += elem_len(g->code, pos)) {
                if (g->code[pos] == G_CLASS)
                    has_class = 1;
                else
                    pending[k]++, ref_at[g->code[pos + 1] + 1]++;
            }
            if (has_class)
                pending[k] = UINT32_MAX;
            else if (pending[k] == 0 && !nullable[r])
                nullable[r] = 1, work[n_work++] = r;
        }
    }
    for (uint32_t r = 0; r < nr; r++)
        ref_at[r + 1] += ref_at[r];
    for (uint32_t k = 0; k < na; k++)
        for (uint32_t pos = g->alts[k]; g->code[pos] > G_ALT; pos += elem_len(g->code, pos))
            if (g->code[pos] == G_RULE) {
                uint32_t s = g->code[pos + 1];
                refs[ref_at[s] + fill[s]++] = k;
            }
    while (n_work) {
        uint32_t s = work[--n_work];
        for (uint32_t i = ref_at[s]; i < ref_at[s + 1]; i++) {
            uint32_t k = refs[i];
            if (pending[k] != UINT32_MAX && pending[k] && --pending[k] == 0 &&
                !nullable[alt_rule[k]]) {
                nullable[alt_rule[k]] = 1;
                work[n_work++] = alt_rule[k];
            }
        }
    }
    /* DFS: color 1 on the path, 2 done. dfs_pos[d]: the next (alt, element) to look at,
     * encoded as a code position; UINT32_MAX moves to the next alternative. */
    for (uint32_t r0 = 0; r0 < nr && st == PI_OK; r0++) {
        if (color[r0])
            continue;
        uint32_t d = 0;
        dfs[0] = r0, color[r0] = 1;
        uint32_t *alt_i = work; /* reuse: the alternative each level is in */
        alt_i[0] = g->alt_at[r0], dfs_pos[0] = g->alts[alt_i[0]];
        for (;;) {
            uint32_t r = dfs[d];
            if (alt_i[d] >= g->alt_at[r + 1]) {
                color[r] = 2;
                if (d-- == 0)
                    break;
                continue;
            }
            uint32_t pos = dfs_pos[d];
            if (g->code[pos] <= G_ALT || g->code[pos] == G_CLASS) { /* alternative done */
                if (++alt_i[d] < g->alt_at[r + 1])
                    dfs_pos[d] = g->alts[alt_i[d]];
                continue;
            }
            uint32_t s = g->code[pos + 1];
            /* after s, go on along this alternative only when s can be empty */
            dfs_pos[d] = nullable[s] ? pos + 2 : g->n_code - 1;
            if (color[s] == 1) {
                char label[160];
                rule_label(p, s, label, sizeof label);
                unsigned line = 0, col = 0;
                const struct prule *o = &p->rules[p->rules[s].owner];
                where(p, o->def_at ? o->def_at : p->start, &line, &col);
                st = pi_error_set(p->err, PI_ERR_FORMAT,
                                  "%u:%u: left recursion: rule %s can derive itself before "
                                  "reading anything",
                                  line, col, label);
                break;
            }
            if (color[s] == 0) {
                color[s] = 1;
                dfs[++d] = s;
                alt_i[d] = g->alt_at[s];
                dfs_pos[d] = g->alts[alt_i[d]];
            }
        }
    }
done:
    pi_free(p->a, nullable);
    pi_free(p->a, pending);
    pi_free(p->a, alt_rule);
    pi_free(p->a, work);
    pi_free(p->a, ref_at);
    pi_free(p->a, refs);
    pi_free(p->a, fill);
    pi_free(p->a, color);
    pi_free(p->a, dfs);
    pi_free(p->a, dfs_pos);
    return st;
}

void gram_free(const struct pi_allocator *a, struct gram *g) {
    if (!g)
        return;
    pi_free(a, g->code);
    pi_free(a, g->alt_at);
    pi_free(a, g->alts);
    memset(g, 0, sizeof *g);
}

/* Lay the rules out in one code array; alternatives indexed. */
static int link(struct parser *p, const char *root, struct gram *g) {
    size_t root_len = strlen(root);
    uint32_t rid = UINT32_MAX;
    for (uint32_t i = 0; i < p->n_rules; i++) {
        const struct prule *r = &p->rules[i];
        if (!r->defined) {
            char msg[160];
            snprintf(msg, sizeof msg, "undefined rule '%.*s'",
                     (int)(r->name_len < 64 ? r->name_len : 64), r->name);
            return fail_at(p, r->used_at ? r->used_at : p->start, PI_ERR_FORMAT, msg);
        }
        if (r->name && r->name_len == root_len && !memcmp(r->name, root, root_len))
            rid = i;
    }
    if (rid == UINT32_MAX)
        return pi_error_set(p->err, PI_ERR_FORMAT, "no rule '%.64s' (the start rule)", root);
    size_t n_code = 0, n_alts = 0;
    for (uint32_t i = 0; i < p->n_rules; i++) {
        n_code += p->rules[i].code.n;
        for (size_t k = 0; k < p->rules[i].code.n; k += elem_len(p->rules[i].code.v, (uint32_t)k))
            n_alts += p->rules[i].code.v[k] <= G_ALT;
    }
    g->code = pi_malloc(p->a, (n_code + 1) * sizeof *g->code);
    g->alt_at = pi_calloc(p->a, (size_t)p->n_rules + 1, sizeof *g->alt_at);
    g->alts = pi_malloc(p->a, (n_alts + 1) * sizeof *g->alts);
    if (!g->code || !g->alt_at || !g->alts)
        return pi_error_set(p->err, PI_ERR_NOMEM, "out of memory");
    g->n_rules = p->n_rules;
    g->root = rid;
    uint32_t at = 0, na = 0;
    for (uint32_t i = 0; i < p->n_rules; i++) {
        const struct vec *c = &p->rules[i].code;
        memcpy(g->code + at, c->v, c->n * sizeof *c->v);
        g->alt_at[i] = na;
        g->alts[na++] = at;
        for (uint32_t k = 0; k < c->n; k += elem_len(c->v, k))
            if (c->v[k] == G_ALT)
                g->alts[na++] = at + k + 1;
        at += (uint32_t)c->n;
    }
    g->alt_at[p->n_rules] = na;
    g->code[at] = G_END; /* a sentinel: check_left_recursion's "stop here" */
    g->n_code = at + 1;
    return PI_OK;
}

int gram_parse(const struct pi_allocator *a, const char *text, size_t len, const char *root,
               struct gram *out, struct pi_error *err) {
    memset(out, 0, sizeof *out);
    if (len > GRAM_MAX_TEXT)
        return pi_error_set(err, PI_ERR_RANGE, "grammar text above 1 MiB");
    struct parser p = {.a = a, .start = text, .s = text, .end = text + len, .err = err};
    int st = parse_rules(&p);
    if (st == PI_OK)
        st = link(&p, root ? root : "root", out);
    if (st == PI_OK)
        st = check_left_recursion(&p, out);
    for (uint32_t i = 0; i < p.n_rules; i++)
        pi_free(a, p.rules[i].code.v);
    pi_free(a, p.rules);
    if (st != PI_OK)
        gram_free(a, out);
    return st;
}
