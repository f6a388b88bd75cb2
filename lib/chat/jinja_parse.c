/* jinja_parse.c -- the template lexer and parser.
 *
 * The lexer follows jinja2's with trim_blocks and lstrip_blocks on: text runs between
 * {{ }}, {% %} and {# #} tags; a '-' inside a tag's brace strips the whitespace on that
 * side, a '+' keeps it; trim_blocks drops the first newline after a block or comment
 * tag; lstrip_blocks drops the spaces and tabs between the start of a line and a block
 * or comment tag; a tag's end is only recognised outside brackets. The parser is
 * recursive descent over jinja2's grammar, with its precedence (lowest first):
 * conditional expression, or, and, not, comparisons (in, not in, chained), + -, ~,
 * * / // %, **, unary - +, then primaries with .attr, [item], [a:b:c], calls, |filters
 * and `is` tests. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

enum {
    TK_EOF,
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP
};

/* two-character operators; single ones are their character */
enum { OP_FLOORDIV = 'F', OP_POW = 'P', OP_EQ = 'E', OP_NE = 'N', OP_GE = 'G', OP_LE = 'L' };

struct tok {
    uint8_t type;
    uint8_t op;
    uint32_t pos;
    jv val;
};

struct parser {
    struct jtemplate *t;
    struct pi_error *err;
    const char *s;
    size_t n;
    struct tok *toks;
    size_t ntok, at;
    int depth; /* expressions and statements being parsed */
    int loops; /* for loops around the statement, since the last macro */
};

void jinja_default_limits(struct jinja_limits *l) {
    l->max_source = (size_t)1 << 20;
    l->max_nesting = 100;
    l->max_memory = (size_t)256 << 20;
    l->max_output = (size_t)16 << 20;
    l->max_steps = 4000000;
    l->max_calls = 64;
    l->max_depth = 1500;
}

void jinja_line_col(const char *src, size_t n, size_t pos, unsigned *line, unsigned *col) {
    unsigned l = 1, c = 1;
    for (size_t i = 0; i < pos && i < n; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)src[i] & 0xc0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static int fail_pos(struct parser *p, size_t pos, const char *fmt, ...) PI_PRINTF(3, 4);

static int fail_pos(struct parser *p, size_t pos, const char *fmt, ...) {
    unsigned line, col;
    jinja_line_col(p->s, p->n, pos, &line, &col);
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pi_error_set(p->err, PI_ERR_FORMAT, "line %u, column %u: %s", line, col, what);
}

/* ---- lexer -------------------------------------------------------------------------- */

/* Python's \s at s[i]: the length of the whitespace character there, or 0. */
static size_t space_at(const char *s, size_t n, size_t i) {
    if (i >= n)
        return 0;
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80)
        return cp_is_space(c) ? 1 : 0;
    size_t j = i;
    uint32_t cp = u8_next(s, n, &j);
    return cp_is_space(cp) ? j - i : 0;
}

/* The start of the whitespace that ends s[from, to). */
static size_t rstrip_at(const char *s, size_t from, size_t to) {
    while (to > from) {
        size_t k = to - 1;
        while (k > from && ((unsigned char)s[k] & 0xc0) == 0x80)
            k--;
        if (!space_at(s, to, k))
            break;
        to = k;
    }
    return to;
}

struct lexer {
    struct parser *p;
    struct jbuf toks; /* struct tok, as bytes */
    int line_starting;
};

static int emit(struct lexer *lx, int type, int op, size_t pos, jv val) {
    struct tok t = {(uint8_t)type, (uint8_t)op, (uint32_t)pos, val};
    return jb_put(&lx->toks, (const char *)&t, sizeof t);
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A string literal at s[i] (the quote), decoded as Python's unicode-escape does. */
static int lex_string(struct lexer *lx, size_t *i) {
    struct parser *p = lx->p;
    const char *s = p->s;
    size_t start = *i;
    char q = s[(*i)++];
    struct jbuf b;
    jb_init(&b, &p->t->arena, p->n + 1);
    for (;;) {
        if (*i >= p->n)
            return fail_pos(p, start, "unexpected end of string literal");
        char c = s[*i];
        if (c == q) {
            (*i)++;
            break;
        }
        if (c != '\\') {
            PI_TRY(jb_putc(&b, c));
            (*i)++;
            continue;
        }
        if (*i + 1 >= p->n)
            return fail_pos(p, start, "unexpected end of string literal");
        char e = s[*i + 1];
        size_t at = *i;
        *i += 2;
        const char *simple = strchr("\\'\"abfnrtv", e);
        if (simple && e) {
            static const char map[] = "\\'\"\a\b\f\n\r\t\v";
            PI_TRY(jb_putc(&b, map[simple - "\\'\"abfnrtv"]));
        } else if (e == '\n') {
            /* a line continuation */
        } else if (e >= '0' && e <= '7') {
            uint32_t v = (uint32_t)(e - '0');
            for (int k = 0; k < 2 && *i < p->n && s[*i] >= '0' && s[*i] <= '7'; k++)
                v = v * 8 + (uint32_t)(s[(*i)++] - '0');
            PI_TRY(jb_put_cp(&b, v));
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                int d = *i < p->n ? hexval(s[*i]) : -1;
                if (d < 0)
                    return fail_pos(p, at, "truncated \\%c escape in a string", e);
                v = v * 16 + (uint32_t)d;
                (*i)++;
            }
            if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
                return fail_pos(p, at, "a string escape names no character");
            PI_TRY(jb_put_cp(&b, v));
        } else if (e == 'N') {
            return fail_pos(p, at, "\\N{...} escapes are not supported");
        } else {
            PI_TRY(jb_put(&b, s + at, 2)); /* unknown escapes stay as written */
        }
    }
    return emit(lx, TK_STRING, 0, start, jb_value(&b));
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* Digits with single underscores between them, from s[i]; the end, or i when none. */
static size_t digits_end(const char *s, size_t n, size_t i) {
    size_t j = i;
    while (j < n && is_digit(s[j])) {
        j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1]))
            j++;
    }
    return j;
}

static int lex_number(struct lexer *lx, size_t *i) {
    struct parser *p = lx->p;
    const char *s = p->s;
    size_t start = *i, j = digits_end(s, p->n, start);
    int is_float = 0;
    if (j + 1 < p->n && s[j] == '.' && is_digit(s[j + 1])) {
        j = digits_end(s, p->n, j + 1);
        is_float = 1;
    }
    if (j < p->n && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < p->n && (s[k] == '+' || s[k] == '-'))
            k++;
        if (k < p->n && is_digit(s[k])) {
            j = digits_end(s, p->n, k);
            is_float = 1;
        }
    }
    char tmp[80];
    size_t m = 0;
    for (size_t k = start; k < j; k++)
        if (s[k] != '_') {
            if (m + 1 >= sizeof tmp)
                return fail_pos(p, start, "a number literal is too long");
            tmp[m++] = s[k];
        }
    tmp[m] = '\0';
    *i = j;
    if (is_float)
        return emit(lx, TK_FLOAT, 0, start, jv_float(jv_strtod(tmp, &m)));
    errno = 0;
    long long v = strtoll(tmp, NULL, 10);
    if (errno == ERANGE)
        return fail_pos(p, start, "an integer literal past 64 bits");
    return emit(lx, TK_INT, 0, start, jv_int(v));
}

/* The tokens inside a tag from s[*i] up to its end (kind '{' or '%'); *close gets the
 * end's position and *sign its '-' or '+' (or 0). */
static int lex_tag(struct lexer *lx, size_t *i, char kind, size_t *close, char *sign) {
    struct parser *p = lx->p;
    const char *s = p->s;
    size_t n = p->n;
    int depth = 0;
    const char *end = kind == '{' ? "}}" : "%}";
    for (;;) {
        size_t sp;
        while ((sp = space_at(s, n, *i)) != 0)
            *i += sp;
        if (*i >= n)
            return fail_pos(p, *i, "unexpected end of template, expected '%s'", end);
        if (depth == 0) {
            char c = s[*i];
            if ((c == '-' || (c == '+' && kind == '%')) && *i + 2 < n &&
                memcmp(s + *i + 1, end, 2) == 0) {
                *close = *i;
                *sign = c;
                *i += 3;
                return PI_OK;
            }
            if (*i + 1 < n && memcmp(s + *i, end, 2) == 0) {
                *close = *i;
                *sign = 0;
                *i += 2;
                return PI_OK;
            }
        }
        char c = s[*i];
        if (c == '\'' || c == '"') {
            PI_TRY(lex_string(lx, i));
            continue;
        }
        if (is_digit(c)) {
            PI_TRY(lex_number(lx, i));
            continue;
        }
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t start = *i;
            while (*i < n && (s[*i] == '_' || (s[*i] >= 'a' && s[*i] <= 'z') ||
                              (s[*i] >= 'A' && s[*i] <= 'Z') || is_digit(s[*i])))
                (*i)++;
            PI_TRY(emit(lx, TK_NAME, 0, start, jv_str(s + start, *i - start)));
            continue;
        }
        static const struct {
            char a, b, op;
        } two[] = {{'/', '/', OP_FLOORDIV}, {'*', '*', OP_POW}, {'=', '=', OP_EQ},
                   {'!', '=', OP_NE},       {'>', '=', OP_GE},  {'<', '=', OP_LE}};
        int op = 0;
        for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
            if (c == two[k].a && *i + 1 < n && s[*i + 1] == two[k].b)
                op = two[k].op;
        if (op) {
            PI_TRY(emit(lx, TK_OP, op, *i, jv_undef()));
            *i += 2;
            continue;
        }
        if (c && strchr("+-/*%~[](){}><=.:|,;", c)) {
            if (c == '(' || c == '[' || c == '{')
                depth++;
            if (c == ')' || c == ']' || c == '}') {
                if (depth == 0)
                    return fail_pos(p, *i, "unexpected '%c'", c);
                depth--;
            }
            PI_TRY(emit(lx, TK_OP, c, *i, jv_undef()));
            (*i)++;
            continue;
        }
        return fail_pos(p, *i, "unexpected character '%c'",
                        (unsigned char)c < 0x80 && c >= 0x20 ? c : '?');
    }
}

/* After a tag's end at s[*i]: '-' strips all whitespace, '+' nothing, else trim_blocks
 * drops one newline after block and comment tags. */
static void after_tag(struct lexer *lx, size_t *i, char kind, char sign) {
    const char *s = lx->p->s;
    size_t n = lx->p->n, sp;
    if (sign == '-')
        while ((sp = space_at(s, n, *i)) != 0)
            *i += sp;
    else if (sign != '+' && kind != '{' && *i < n && s[*i] == '\n')
        (*i)++;
    lx->line_starting = s[*i - 1] == '\n';
}

/* Is s[i..] "{%[-+]? <word> [-+]?%}"? Then *end is past it and *sign its closing sign. */
static int word_tag(const char *s, size_t n, size_t i, const char *word, size_t *end,
                    char *open_sign, char *sign) {
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%')
        return 0;
    i += 2;
    *open_sign = 0;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        *open_sign = s[i++];
    while (i < n && space_at(s, n, i))
        i += space_at(s, n, i);
    size_t k = strlen(word);
    if (n - i < k || memcmp(s + i, word, k) != 0)
        return 0;
    i += k;
    while (i < n && space_at(s, n, i))
        i += space_at(s, n, i);
    *sign = 0;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        *sign = s[i++];
    if (n - i < 2 || s[i] != '%' || s[i + 1] != '}')
        return 0;
    *end = i + 2;
    return 1;
}

static int lex(struct parser *p) {
    struct lexer lx = {p, {0}, 1};
    jb_init(&lx.toks, &p->t->arena, (size_t)-1 / 2);
    const char *s = p->s;
    size_t n = p->n, i = 0;
    while (i < n) {
        /* the next tag opening */
        size_t t = i;
        while (t + 1 < n &&
               !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')))
            t++;
        if (t + 1 >= n) {
            PI_TRY(emit(&lx, TK_TEXT, 0, i, jv_str(s + i, n - i)));
            break;
        }
        char kind = s[t + 1];
        char open = t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        size_t text_end = t;
        if (open == '-') {
            text_end = rstrip_at(s, i, t);
        } else if (open != '+' && kind != '{') {
            /* lstrip_blocks: only whitespace between the line's start and the tag */
            size_t l = t;
            while (l > i && s[l - 1] != '\n')
                l--;
            if ((l > i || (l == i && lx.line_starting)) && l < t && rstrip_at(s, l, t) == l)
                text_end = l;
        }
        if (text_end > i)
            PI_TRY(emit(&lx, TK_TEXT, 0, i, jv_str(s + i, text_end - i)));
        size_t end, body;
        char osign, csign;
        if (kind == '%' && word_tag(s, n, t, "raw", &body, &osign, &csign)) {
            /* {% raw %}...{% endraw %}: the text as it is */
            size_t k = body, sp;
            if (csign == '-') /* {% raw -%} strips what follows */
                while ((sp = space_at(s, n, body)) != 0)
                    body += sp;
            k = body;
            while (k < n && !word_tag(s, n, k, "endraw", &end, &osign, &csign))
                k++;
            if (k >= n)
                return fail_pos(p, t, "missing {%% endraw %%} for this raw block");
            size_t raw_end = osign == '-' ? rstrip_at(s, body, k) : k;
            if (raw_end > body)
                PI_TRY(emit(&lx, TK_TEXT, 0, body, jv_str(s + body, raw_end - body)));
            i = end;
            after_tag(&lx, &i, '%', csign);
            continue;
        }
        i = t + 2 + (open ? 1 : 0);
        if (kind == '#') {
            size_t k = i;
            char sign = 0;
            for (; k + 1 < n; k++) {
                if ((s[k] == '-' || s[k] == '+') && k + 2 < n && s[k + 1] == '#' &&
                    s[k + 2] == '}') {
                    sign = s[k];
                    break;
                }
                if (s[k] == '#' && s[k + 1] == '}')
                    break;
            }
            if (k + 1 >= n)
                return fail_pos(p, t, "missing end of comment tag");
            i = k + (sign ? 3 : 2);
            after_tag(&lx, &i, '#', sign);
            continue;
        }
        PI_TRY(emit(&lx, kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, 0, t, jv_undef()));
        size_t close = 0;
        char sign = 0;
        PI_TRY(lex_tag(&lx, &i, kind, &close, &sign));
        PI_TRY(emit(&lx, kind == '{' ? TK_VAR_END : TK_BLOCK_END, 0, close, jv_undef()));
        after_tag(&lx, &i, kind, sign);
    }
    PI_TRY(emit(&lx, TK_EOF, 0, n, jv_undef()));
    p->toks = (struct tok *)lx.toks.p;
    p->ntok = lx.toks.n / sizeof(struct tok);
    return PI_OK;
}

/* ---- parser helpers ----------------------------------------------------------------- */

static const struct tok *cur(const struct parser *p) {
    return &p->toks[p->at];
}

static const struct tok *ahead(const struct parser *p, size_t k) {
    return p->at + k < p->ntok ? &p->toks[p->at + k] : &p->toks[p->ntok - 1];
}

static void advance(struct parser *p) {
    if (p->at + 1 < p->ntok)
        p->at++;
}

static int tok_is_name(const struct tok *t, const char *name) {
    return t->type == TK_NAME && jv_str_is(t->val, name);
}

static int tok_is_op(const struct tok *t, int op) {
    return t->type == TK_OP && t->op == op;
}

/* What a token is, for messages. */
static const char *describe(const struct tok *t, char *buf, size_t cap) {
    switch (t->type) {
    case TK_EOF:
        return "end of template";
    case TK_TEXT:
        return "template text";
    case TK_VAR_BEGIN:
        return "'{{'";
    case TK_VAR_END:
        return "end of print statement";
    case TK_BLOCK_BEGIN:
        return "'{%'";
    case TK_BLOCK_END:
        return "end of statement block";
    case TK_NAME:
        snprintf(buf, cap, "'%.*s'", (int)(t->val.u.str.n < 40 ? t->val.u.str.n : 40),
                 t->val.u.str.s);
        return buf;
    case TK_STRING:
        return "string";
    case TK_INT:
        return "integer";
    case TK_FLOAT:
        return "float";
    default: {
        static const struct {
            int op;
            const char *s;
        } two[] = {{OP_FLOORDIV, "//"}, {OP_POW, "**"}, {OP_EQ, "=="},
                   {OP_NE, "!="},       {OP_GE, ">="},  {OP_LE, "<="}};
        for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
            if (t->op == two[k].op) {
                snprintf(buf, cap, "'%s'", two[k].s);
                return buf;
            }
        snprintf(buf, cap, "'%c'", t->op);
        return buf;
    }
    }
}

static int expected(struct parser *p, const char *what) {
    char buf[64];
    return fail_pos(p, cur(p)->pos, "expected %s, found %s", what,
                    describe(cur(p), buf, sizeof buf));
}

static int expect_op(struct parser *p, int op, const char *what) {
    if (!tok_is_op(cur(p), op))
        return expected(p, what);
    advance(p);
    return PI_OK;
}

static int expect_type(struct parser *p, int type, const char *what) {
    if (cur(p)->type != type)
        return expected(p, what);
    advance(p);
    return PI_OK;
}

static struct jnode *node(struct parser *p, int kind, size_t pos) {
    struct jnode *x = ja_alloc(&p->t->arena, sizeof *x);
    if (!x)
        return NULL;
    memset(x, 0, sizeof *x);
    x->kind = (uint8_t)kind;
    x->pos = (uint32_t)pos;
    return x;
}

#define NEW(var, kind, pos)                                                                        \
  do {                                                                                             \
    (var) = node(p, (kind), (pos));                                                                \
    if (!(var))                                                                                    \
      return ja_status(&p->t->arena);                                                              \
  } while (0)

/* A growing array of node pointers, then of names. */
struct nodes {
    struct jbuf b;
};

static void nodes_init(struct parser *p, struct nodes *v) {
    jb_init(&v->b, &p->t->arena, (size_t)-1 / 2);
}

static int nodes_add(struct nodes *v, struct jnode *x) {
    return jb_put(&v->b, (const char *)&x, sizeof x);
}

static int names_add(struct nodes *v, jv name) {
    return jb_put(&v->b, (const char *)&name, sizeof name);
}

static struct jnode **nodes_take(struct nodes *v, uint32_t *n) {
    *n = (uint32_t)(v->b.n / sizeof(struct jnode *));
    return (struct jnode **)v->b.p;
}

static jv *names_take(struct nodes *v, uint32_t *n) {
    *n = (uint32_t)(v->b.n / sizeof(jv));
    return (jv *)v->b.p;
}

static int enter(struct parser *p) {
    if (++p->depth > p->t->lim.max_nesting) {
        unsigned line, col;
        jinja_line_col(p->s, p->n, cur(p)->pos, &line, &col);
        return pi_error_set(p->err, PI_ERR_RANGE,
                            "line %u, column %u: nested more than %d levels deep", line, col,
                            p->t->lim.max_nesting);
    }
    return PI_OK;
}

/* ---- expressions -------------------------------------------------------------------- */

static int parse_expression(struct parser *p, int with_condexpr, struct jnode **out);
static int parse_or(struct parser *p, struct jnode **out);
static int parse_unary(struct parser *p, int with_filter, struct jnode **out);
static int parse_primary(struct parser *p, struct jnode **out);
static int parse_postfix(struct parser *p, struct jnode *x, struct jnode **out);

static int is_tuple_end(struct parser *p, const char *extra) {
    const struct tok *t = cur(p);
    return t->type == TK_VAR_END || t->type == TK_BLOCK_END || tok_is_op(t, ')') ||
           (extra && tok_is_name(t, extra));
}

/* Expressions separated by commas: a tuple when there is a comma. */
static int parse_tuple(struct parser *p, int with_condexpr, const char *extra, int parens,
                       struct jnode **out) {
    size_t pos = cur(p)->pos;
    struct nodes items;
    nodes_init(p, &items);
    int is_tuple = 0, n = 0;
    for (;;) {
        if (n)
            PI_TRY(expect_op(p, ',', "','"));
        if (is_tuple_end(p, extra))
            break;
        struct jnode *x = NULL;
        if (with_condexpr)
            PI_TRY(parse_expression(p, 1, &x));
        else
            PI_TRY(parse_or(p, &x));
        PI_TRY(nodes_add(&items, x));
        n++;
        if (tok_is_op(cur(p), ','))
            is_tuple = 1;
        else
            break;
    }
    if (!is_tuple) {
        if (n) {
            *out = *(struct jnode **)items.b.p;
            return PI_OK;
        }
        if (!parens)
            return expected(p, "an expression");
    }
    struct jnode *x = NULL;
    NEW(x, E_TUPLE, pos);
    x->kids = nodes_take(&items, &x->nkids);
    *out = x;
    return PI_OK;
}

/* (args, name=value, ...) after a callee; the '(' is current. */
static int parse_call_args(struct parser *p, struct jnode *x) {
    PI_TRY(expect_op(p, '(', "'('"));
    struct nodes args, kwn, kwv;
    nodes_init(p, &args);
    nodes_init(p, &kwn);
    nodes_init(p, &kwv);
    int n = 0;
    while (!tok_is_op(cur(p), ')')) {
        if (n)
            PI_TRY(expect_op(p, ',', "',' or ')'"));
        if (tok_is_op(cur(p), ')'))
            break;
        if (tok_is_op(cur(p), '*') || tok_is_op(cur(p), OP_POW))
            return fail_pos(p, cur(p)->pos, "*args and **kwargs are not supported");
        if (cur(p)->type == TK_NAME && tok_is_op(ahead(p, 1), '=')) {
            PI_TRY(names_add(&kwn, cur(p)->val));
            advance(p);
            advance(p);
            struct jnode *v;
            PI_TRY(parse_expression(p, 1, &v));
            PI_TRY(nodes_add(&kwv, v));
        } else {
            if (kwn.b.n)
                return fail_pos(p, cur(p)->pos, "a positional argument after a keyword one");
            struct jnode *v;
            PI_TRY(parse_expression(p, 1, &v));
            PI_TRY(nodes_add(&args, v));
        }
        n++;
    }
    advance(p);
    x->kids = nodes_take(&args, &x->nkids);
    x->names = names_take(&kwn, &x->nnames);
    x->kids2 = nodes_take(&kwv, &x->nkids2);
    return PI_OK;
}

/* A (possibly dotted) filter or test name. */
static int parse_dotted(struct parser *p, jv *name) {
    if (cur(p)->type != TK_NAME)
        return expected(p, "a name");
    const char *start = cur(p)->val.u.str.s;
    size_t end = cur(p)->pos + cur(p)->val.u.str.n;
    advance(p);
    while (tok_is_op(cur(p), '.') && ahead(p, 1)->type == TK_NAME) {
        advance(p);
        end = cur(p)->pos + cur(p)->val.u.str.n;
        advance(p);
    }
    *name = jv_str(start, (size_t)(p->s + end - start));
    return PI_OK;
}

static int parse_filters(struct parser *p, struct jnode *x, int inline_first, struct jnode **out) {
    while (inline_first || tok_is_op(cur(p), '|')) {
        if (!inline_first)
            advance(p);
        inline_first = 0;
        size_t pos = cur(p)->pos;
        struct jnode *f;
        NEW(f, E_FILTER, pos);
        PI_TRY(parse_dotted(p, &f->val));
        /* an unknown name is an error unless it is inside an if (checked once the
         * tree is complete: see check_names) */
        int id = jlib_filter_id(f->val.u.str.s, f->val.u.str.n);
        if (id < 0)
            id = JINJA_UNKNOWN;
        f->op = (uint8_t)id;
        f->a = x;
        if (tok_is_op(cur(p), '('))
            PI_TRY(parse_call_args(p, f));
        x = f;
    }
    *out = x;
    return PI_OK;
}

static int parse_test(struct parser *p, struct jnode *x, struct jnode **out) {
    size_t pos = cur(p)->pos;
    advance(p); /* is */
    struct jnode *t;
    NEW(t, E_TEST, pos);
    if (tok_is_name(cur(p), "not")) {
        t->flag = 1;
        advance(p);
    }
    PI_TRY(parse_dotted(p, &t->val));
    int id = jlib_test_id(t->val.u.str.s, t->val.u.str.n);
    if (id < 0)
        id = JINJA_UNKNOWN;
    t->op = (uint8_t)id;
    t->a = x;
    const struct tok *c = cur(p);
    if (tok_is_op(c, '(')) {
        PI_TRY(parse_call_args(p, t));
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT ||
                c->type == TK_FLOAT || tok_is_op(c, '[') || tok_is_op(c, '{')) &&
               !tok_is_name(c, "else") && !tok_is_name(c, "or") && !tok_is_name(c, "and")) {
        if (tok_is_name(c, "is"))
            return fail_pos(p, c->pos, "tests cannot be chained with 'is'");
        struct jnode *arg;
        PI_TRY(parse_primary(p, &arg));
        PI_TRY(parse_postfix(p, arg, &arg));
        struct jnode **kids = ja_alloc(&p->t->arena, sizeof *kids);
        if (!kids)
            return ja_status(&p->t->arena);
        kids[0] = arg;
        t->kids = kids;
        t->nkids = 1;
    }
    *out = t;
    return PI_OK;
}

/* One subscript: an expression or a slice a:b:c. */
static int parse_subscribed(struct parser *p, struct jnode *obj, struct jnode **out) {
    size_t pos = cur(p)->pos;
    struct jnode *parts[3] = {NULL, NULL, NULL};
    if (!tok_is_op(cur(p), ':')) {
        PI_TRY(parse_expression(p, 1, &parts[0]));
        if (!tok_is_op(cur(p), ':')) {
            struct jnode *x = NULL;
            NEW(x, E_ITEM, pos);
            x->a = obj;
            x->b = parts[0];
            *out = x;
            return PI_OK;
        }
    }
    advance(p); /* : */
    if (!tok_is_op(cur(p), ']') && !tok_is_op(cur(p), ':'))
        PI_TRY(parse_expression(p, 1, &parts[1]));
    if (tok_is_op(cur(p), ':')) {
        advance(p);
        if (!tok_is_op(cur(p), ']'))
            PI_TRY(parse_expression(p, 1, &parts[2]));
    }
    struct jnode *x = NULL;
    NEW(x, E_SLICE, pos);
    x->a = obj;
    x->kids = ja_alloc(&p->t->arena, sizeof parts);
    if (!x->kids)
        return ja_status(&p->t->arena);
    memcpy(x->kids, parts, sizeof parts);
    x->nkids = 3;
    *out = x;
    return PI_OK;
}

static int parse_postfix(struct parser *p, struct jnode *x, struct jnode **out) {
    for (;;) {
        const struct tok *t = cur(p);
        if (tok_is_op(t, '.')) {
            advance(p);
            const struct tok *name = cur(p);
            struct jnode *y;
            if (name->type == TK_NAME) {
                NEW(y, E_ATTR, name->pos);
                y->a = x;
                y->val = name->val;
            } else if (name->type == TK_INT) {
                struct jnode *k;
                NEW(k, E_CONST, name->pos);
                k->val = name->val;
                NEW(y, E_ITEM, name->pos);
                y->a = x;
                y->b = k;
            } else {
                return expected(p, "an attribute name");
            }
            advance(p);
            x = y;
        } else if (tok_is_op(t, '[')) {
            advance(p);
            PI_TRY(parse_subscribed(p, x, &x));
            PI_TRY(expect_op(p, ']', "']'"));
        } else if (tok_is_op(t, '(')) {
            struct jnode *c;
            NEW(c, E_CALL, t->pos);
            c->a = x;
            PI_TRY(parse_call_args(p, c));
            x = c;
        } else {
            break;
        }
    }
    *out = x;
    return PI_OK;
}

static int parse_filter_expr(struct parser *p, struct jnode *x, struct jnode **out) {
    for (;;) {
        const struct tok *t = cur(p);
        if (tok_is_op(t, '|')) {
            PI_TRY(parse_filters(p, x, 0, &x));
        } else if (tok_is_name(t, "is")) {
            PI_TRY(parse_test(p, x, &x));
        } else if (tok_is_op(t, '(')) {
            struct jnode *c;
            NEW(c, E_CALL, t->pos);
            c->a = x;
            PI_TRY(parse_call_args(p, c));
            x = c;
        } else {
            break;
        }
    }
    *out = x;
    return PI_OK;
}

static int parse_primary(struct parser *p, struct jnode **out) {
    PI_TRY(enter(p));
    const struct tok *t = cur(p);
    struct jnode *x = NULL;
    switch (t->type) {
    case TK_NAME:
        NEW(x, E_CONST, t->pos);
        if (jv_str_is(t->val, "true") || jv_str_is(t->val, "True"))
            x->val = jv_bool(1);
        else if (jv_str_is(t->val, "false") || jv_str_is(t->val, "False"))
            x->val = jv_bool(0);
        else if (jv_str_is(t->val, "none") || jv_str_is(t->val, "None"))
            x->val = jv_none();
        else {
            x->kind = E_NAME;
            x->val = t->val;
        }
        advance(p);
        break;
    case TK_STRING: {
        NEW(x, E_CONST, t->pos);
        x->val = t->val;
        advance(p);
        if (cur(p)->type == TK_STRING) { /* adjacent literals are one string */
            struct jbuf b;
            jb_init(&b, &p->t->arena, (size_t)-1 / 2);
            PI_TRY(jb_put(&b, x->val.u.str.s, x->val.u.str.n));
            while (cur(p)->type == TK_STRING) {
                PI_TRY(jb_put(&b, cur(p)->val.u.str.s, cur(p)->val.u.str.n));
                advance(p);
            }
            x->val = jb_value(&b);
        }
        break;
    }
    case TK_INT:
    case TK_FLOAT:
        NEW(x, E_CONST, t->pos);
        x->val = t->val;
        advance(p);
        break;
    case TK_OP:
        if (t->op == '(') {
            advance(p);
            PI_TRY(parse_tuple(p, 1, NULL, 1, &x));
            PI_TRY(expect_op(p, ')', "')'"));
            break;
        }
        if (t->op == '[') {
            NEW(x, E_LIST, t->pos);
            advance(p);
            struct nodes items;
            nodes_init(p, &items);
            while (!tok_is_op(cur(p), ']')) {
                if (items.b.n)
                    PI_TRY(expect_op(p, ',', "',' or ']'"));
                if (tok_is_op(cur(p), ']'))
                    break;
                struct jnode *v;
                PI_TRY(parse_expression(p, 1, &v));
                PI_TRY(nodes_add(&items, v));
            }
            advance(p);
            x->kids = nodes_take(&items, &x->nkids);
            break;
        }
        if (t->op == '{') {
            NEW(x, E_DICT, t->pos);
            advance(p);
            struct nodes keys, vals;
            nodes_init(p, &keys);
            nodes_init(p, &vals);
            while (!tok_is_op(cur(p), '}')) {
                if (keys.b.n)
                    PI_TRY(expect_op(p, ',', "',' or '}'"));
                if (tok_is_op(cur(p), '}'))
                    break;
                struct jnode *k, *v;
                PI_TRY(parse_expression(p, 1, &k));
                PI_TRY(expect_op(p, ':', "':'"));
                PI_TRY(parse_expression(p, 1, &v));
                PI_TRY(nodes_add(&keys, k));
                PI_TRY(nodes_add(&vals, v));
            }
            advance(p);
            x->kids = nodes_take(&keys, &x->nkids);
            x->kids2 = nodes_take(&vals, &x->nkids2);
            break;
        }
        /* fall through */
    default:
        return expected(p, "an expression");
    }
    p->depth--;
    *out = x;
    return PI_OK;
}

static int parse_unary(struct parser *p, int with_filter, struct jnode **out) {
    PI_TRY(enter(p));
    const struct tok *t = cur(p);
    struct jnode *x = NULL;
    if (tok_is_op(t, '-') || tok_is_op(t, '+')) {
        NEW(x, E_UNARY, t->pos);
        x->op = t->op;
        advance(p);
        PI_TRY(parse_unary(p, 0, &x->a));
    } else {
        PI_TRY(parse_primary(p, &x));
    }
    PI_TRY(parse_postfix(p, x, &x));
    if (with_filter)
        PI_TRY(parse_filter_expr(p, x, &x));
    p->depth--;
    *out = x;
    return PI_OK;
}

static int binary(struct parser *p, int op, size_t pos, struct jnode *a, struct jnode *b,
                  struct jnode **out) {
    struct jnode *x = NULL;
    NEW(x, E_BINARY, pos);
    x->op = (uint8_t)op;
    x->a = a;
    x->b = b;
    *out = x;
    return PI_OK;
}

static int parse_pow(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL, *y = NULL;
    PI_TRY(parse_unary(p, 1, &x));
    while (tok_is_op(cur(p), OP_POW)) {
        size_t pos = cur(p)->pos;
        advance(p);
        PI_TRY(parse_unary(p, 1, &y));
        PI_TRY(binary(p, JOP_POW, pos, x, y, &x));
    }
    *out = x;
    return PI_OK;
}

static int parse_math2(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL, *y = NULL;
    PI_TRY(parse_pow(p, &x));
    for (;;) {
        const struct tok *t = cur(p);
        int op = tok_is_op(t, '*')           ? JOP_MUL
                 : tok_is_op(t, '/')         ? JOP_DIV
                 : tok_is_op(t, OP_FLOORDIV) ? JOP_FLOORDIV
                 : tok_is_op(t, '%')         ? JOP_MOD
                                             : 0;
        if (!op)
            break;
        advance(p);
        PI_TRY(parse_pow(p, &y));
        PI_TRY(binary(p, op, t->pos, x, y, &x));
    }
    *out = x;
    return PI_OK;
}

static int parse_concat(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL, *y = NULL;
    PI_TRY(parse_math2(p, &x));
    while (tok_is_op(cur(p), '~')) {
        size_t pos = cur(p)->pos;
        advance(p);
        PI_TRY(parse_math2(p, &y));
        PI_TRY(binary(p, JOP_CONCAT, pos, x, y, &x));
    }
    *out = x;
    return PI_OK;
}

static int parse_math1(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL, *y = NULL;
    PI_TRY(parse_concat(p, &x));
    for (;;) {
        const struct tok *t = cur(p);
        int op = tok_is_op(t, '+') ? JOP_ADD : tok_is_op(t, '-') ? JOP_SUB : 0;
        if (!op)
            break;
        advance(p);
        PI_TRY(parse_concat(p, &y));
        PI_TRY(binary(p, op, t->pos, x, y, &x));
    }
    *out = x;
    return PI_OK;
}

static int parse_compare(struct parser *p, struct jnode **out) {
    size_t pos = cur(p)->pos;
    struct jnode *x = NULL;
    PI_TRY(parse_math1(p, &x));
    struct nodes operands, ops;
    nodes_init(p, &operands);
    nodes_init(p, &ops);
    for (;;) {
        const struct tok *t = cur(p);
        int op = tok_is_op(t, OP_EQ)    ? JOP_EQ
                 : tok_is_op(t, OP_NE)  ? JOP_NE
                 : tok_is_op(t, '<')    ? JOP_LT
                 : tok_is_op(t, OP_LE)  ? JOP_LE
                 : tok_is_op(t, '>')    ? JOP_GT
                 : tok_is_op(t, OP_GE)  ? JOP_GE
                 : tok_is_name(t, "in") ? JOP_IN
                                        : 0;
        if (!op && tok_is_name(t, "not") && tok_is_name(ahead(p, 1), "in")) {
            op = JOP_NOTIN;
            advance(p);
        }
        if (!op)
            break;
        advance(p);
        if (!operands.b.n)
            PI_TRY(nodes_add(&operands, x));
        struct jnode *y;
        PI_TRY(parse_math1(p, &y));
        PI_TRY(nodes_add(&operands, y));
        uint8_t o = (uint8_t)op;
        PI_TRY(jb_put(&ops.b, (const char *)&o, 1));
    }
    if (operands.b.n) {
        struct jnode *c;
        NEW(c, E_COMPARE, pos);
        c->kids = nodes_take(&operands, &c->nkids);
        c->ops = (uint8_t *)ops.b.p;
        x = c;
    }
    *out = x;
    return PI_OK;
}

static int parse_not(struct parser *p, struct jnode **out) {
    if (tok_is_name(cur(p), "not")) {
        PI_TRY(enter(p));
        struct jnode *x = NULL;
        NEW(x, E_UNARY, cur(p)->pos);
        x->op = 'n';
        advance(p);
        PI_TRY(parse_not(p, &x->a));
        p->depth--;
        *out = x;
        return PI_OK;
    }
    return parse_compare(p, out);
}

static int parse_and(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL;
    PI_TRY(parse_not(p, &x));
    while (tok_is_name(cur(p), "and")) {
        struct jnode *y;
        NEW(y, E_AND, cur(p)->pos);
        advance(p);
        y->a = x;
        PI_TRY(parse_not(p, &y->b));
        x = y;
    }
    *out = x;
    return PI_OK;
}

static int parse_or(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL;
    PI_TRY(parse_and(p, &x));
    while (tok_is_name(cur(p), "or")) {
        struct jnode *y;
        NEW(y, E_OR, cur(p)->pos);
        advance(p);
        y->a = x;
        PI_TRY(parse_and(p, &y->b));
        x = y;
    }
    *out = x;
    return PI_OK;
}

static int parse_expression(struct parser *p, int with_condexpr, struct jnode **out) {
    PI_TRY(enter(p));
    struct jnode *x = NULL;
    PI_TRY(parse_or(p, &x));
    while (with_condexpr && tok_is_name(cur(p), "if")) {
        struct jnode *c;
        NEW(c, E_COND, cur(p)->pos);
        advance(p);
        c->b = x;
        PI_TRY(parse_or(p, &c->a));
        if (tok_is_name(cur(p), "else")) {
            advance(p);
            PI_TRY(parse_expression(p, 1, &c->c));
        }
        x = c;
    }
    p->depth--;
    *out = x;
    return PI_OK;
}

/* ---- statements --------------------------------------------------------------------- */

static int parse_body(struct parser *p, const char *const *ends, struct jnode ***kids,
                      uint32_t *nkids);

static int expect_block_end(struct parser *p) {
    return expect_type(p, TK_BLOCK_END, "end of statement block");
}

/* Assignment targets: a name, or names separated by commas, optionally in parentheses. */
static int parse_targets(struct parser *p, struct nodes *names) {
    int parens = tok_is_op(cur(p), '(');
    if (parens)
        advance(p);
    for (;;) {
        if (cur(p)->type != TK_NAME)
            return expected(p, "a variable name");
        PI_TRY(names_add(names, cur(p)->val));
        advance(p);
        if (!tok_is_op(cur(p), ','))
            break;
        advance(p);
        if (parens && tok_is_op(cur(p), ')'))
            break;
    }
    if (parens)
        PI_TRY(expect_op(p, ')', "')'"));
    return PI_OK;
}

static int parse_if(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL;
    NEW(x, S_IF, cur(p)->pos);
    advance(p); /* if / elif */
    PI_TRY(parse_tuple(p, 0, NULL, 0, &x->a));
    PI_TRY(expect_block_end(p));
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    PI_TRY(parse_body(p, ends, &x->kids, &x->nkids));
    if (tok_is_name(cur(p), "elif")) {
        struct jnode *e;
        PI_TRY(parse_if(p, &e));
        x->kids2 = ja_alloc(&p->t->arena, sizeof *x->kids2);
        if (!x->kids2)
            return ja_status(&p->t->arena);
        x->kids2[0] = e;
        x->nkids2 = 1;
        *out = x;
        return PI_OK; /* the innermost elif consumed endif */
    }
    if (tok_is_name(cur(p), "else")) {
        advance(p);
        PI_TRY(expect_block_end(p));
        static const char *const end_if[] = {"endif", NULL};
        PI_TRY(parse_body(p, end_if, &x->kids2, &x->nkids2));
    }
    advance(p); /* endif */
    *out = x;
    return PI_OK;
}

static int parse_for(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL;
    NEW(x, S_FOR, cur(p)->pos);
    advance(p);
    struct nodes names;
    nodes_init(p, &names);
    PI_TRY(parse_targets(p, &names));
    x->names = names_take(&names, &x->nnames);
    if (!tok_is_name(cur(p), "in"))
        return expected(p, "'in'");
    advance(p);
    PI_TRY(parse_tuple(p, 0, "recursive", 0, &x->a));
    if (tok_is_name(cur(p), "if")) {
        advance(p);
        PI_TRY(parse_expression(p, 1, &x->b));
    }
    if (tok_is_name(cur(p), "recursive"))
        return fail_pos(p, cur(p)->pos, "recursive for loops are not supported");
    PI_TRY(expect_block_end(p));
    static const char *const ends[] = {"endfor", "else", NULL};
    p->loops++;
    PI_TRY(parse_body(p, ends, &x->kids, &x->nkids));
    p->loops--;
    if (tok_is_name(cur(p), "else")) {
        advance(p);
        PI_TRY(expect_block_end(p));
        static const char *const end_for[] = {"endfor", NULL};
        PI_TRY(parse_body(p, end_for, &x->kids2, &x->nkids2));
    }
    advance(p); /* endfor */
    *out = x;
    return PI_OK;
}

static int parse_set(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL;
    NEW(x, S_SET, cur(p)->pos);
    advance(p);
    struct nodes names;
    nodes_init(p, &names);
    if (cur(p)->type == TK_NAME && tok_is_op(ahead(p, 1), '.')) {
        PI_TRY(names_add(&names, cur(p)->val));
        advance(p);
        advance(p);
        if (cur(p)->type != TK_NAME)
            return expected(p, "an attribute name");
        x->val = cur(p)->val;
        x->flag = 1;
        advance(p);
    } else {
        PI_TRY(parse_targets(p, &names));
    }
    x->names = names_take(&names, &x->nnames);
    if (tok_is_op(cur(p), '=')) {
        advance(p);
        PI_TRY(parse_tuple(p, 1, NULL, 0, &x->b));
        *out = x;
        return PI_OK;
    }
    if (x->flag || x->nnames != 1)
        return expected(p, "'='");
    x->kind = S_SETBLOCK;
    if (tok_is_op(cur(p), '|')) {
        struct jnode *v;
        NEW(v, E_BLOCKVAL, cur(p)->pos);
        PI_TRY(parse_filters(p, v, 0, &x->a));
    }
    PI_TRY(expect_block_end(p));
    static const char *const ends[] = {"endset", NULL};
    PI_TRY(parse_body(p, ends, &x->kids, &x->nkids));
    advance(p);
    *out = x;
    return PI_OK;
}

static int parse_macro(struct parser *p, struct jnode **out) {
    struct jnode *x = NULL;
    NEW(x, S_MACRO, cur(p)->pos);
    advance(p);
    if (cur(p)->type != TK_NAME)
        return expected(p, "a macro name");
    x->val = cur(p)->val;
    advance(p);
    PI_TRY(expect_op(p, '(', "'('"));
    struct nodes names, defs;
    nodes_init(p, &names);
    nodes_init(p, &defs);
    while (!tok_is_op(cur(p), ')')) {
        if (names.b.n)
            PI_TRY(expect_op(p, ',', "',' or ')'"));
        if (cur(p)->type != TK_NAME)
            return expected(p, "a parameter name");
        PI_TRY(names_add(&names, cur(p)->val));
        advance(p);
        struct jnode *d = NULL;
        if (tok_is_op(cur(p), '=')) {
            advance(p);
            PI_TRY(parse_expression(p, 1, &d));
        }
        PI_TRY(nodes_add(&defs, d));
    }
    advance(p);
    x->names = names_take(&names, &x->nnames);
    x->kids2 = nodes_take(&defs, &x->nkids2);
    PI_TRY(expect_block_end(p));
    static const char *const ends[] = {"endmacro", NULL};
    int loops = p->loops;
    p->loops = 0;
    PI_TRY(parse_body(p, ends, &x->kids, &x->nkids));
    p->loops = loops;
    advance(p);
    *out = x;
    return PI_OK;
}

static int parse_statement(struct parser *p, struct jnode **out) {
    const struct tok *t = cur(p);
    if (t->type != TK_NAME)
        return expected(p, "a tag name");
    PI_TRY(enter(p));
    struct jnode *x = NULL;
    if (tok_is_name(t, "if")) {
        PI_TRY(parse_if(p, &x));
    } else if (tok_is_name(t, "for")) {
        PI_TRY(parse_for(p, &x));
    } else if (tok_is_name(t, "set")) {
        PI_TRY(parse_set(p, &x));
    } else if (tok_is_name(t, "macro")) {
        PI_TRY(parse_macro(p, &x));
    } else if (tok_is_name(t, "break") || tok_is_name(t, "continue")) {
        if (!p->loops)
            return fail_pos(p, t->pos, "'%s' outside a loop",
                            tok_is_name(t, "break") ? "break" : "continue");
        NEW(x, tok_is_name(t, "break") ? S_BREAK : S_CONTINUE, t->pos);
        advance(p);
    } else if (tok_is_name(t, "filter")) {
        NEW(x, S_FILTER, t->pos);
        advance(p);
        struct jnode *v;
        NEW(v, E_BLOCKVAL, t->pos);
        PI_TRY(parse_filters(p, v, 1, &x->a));
        PI_TRY(expect_block_end(p));
        static const char *const ends[] = {"endfilter", NULL};
        PI_TRY(parse_body(p, ends, &x->kids, &x->nkids));
        advance(p);
    } else if (tok_is_name(t, "generation")) {
        NEW(x, S_BLOCK, t->pos);
        advance(p);
        PI_TRY(expect_block_end(p));
        static const char *const ends[] = {"endgeneration", NULL};
        PI_TRY(parse_body(p, ends, &x->kids, &x->nkids));
        advance(p);
    } else {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(t->val.u.str.n < 60 ? t->val.u.str.n : 60),
                 t->val.u.str.s);
        return fail_pos(p, t->pos, "unknown or unexpected tag '%s'", name);
    }
    PI_TRY(expect_block_end(p));
    p->depth--;
    *out = x;
    return PI_OK;
}

/* Statements up to a block tag named in ends (NULL-terminated; NULL ends: up to the end
 * of the template), which is left current. */
static int parse_body(struct parser *p, const char *const *ends, struct jnode ***kids,
                      uint32_t *nkids) {
    struct nodes body;
    nodes_init(p, &body);
    for (;;) {
        const struct tok *t = cur(p);
        struct jnode *x = NULL;
        if (t->type == TK_EOF) {
            if (ends) {
                char what[64];
                snprintf(what, sizeof what, "'%s'", ends[0]);
                for (int k = 1; ends[k]; k++)
                    if (strlen(what) + strlen(ends[k]) + 8 < sizeof what)
                        snprintf(what + strlen(what), sizeof what - strlen(what), " or '%s'",
                                 ends[k]);
                return fail_pos(p, t->pos, "unexpected end of template, expected %s", what);
            }
            break;
        }
        if (t->type == TK_TEXT) {
            NEW(x, S_TEXT, t->pos);
            x->val = t->val;
            advance(p);
        } else if (t->type == TK_VAR_BEGIN) {
            NEW(x, S_OUT, t->pos);
            advance(p);
            PI_TRY(parse_tuple(p, 1, NULL, 0, &x->a));
            PI_TRY(expect_type(p, TK_VAR_END, "end of print statement"));
        } else if (t->type == TK_BLOCK_BEGIN) {
            advance(p);
            int end = 0;
            for (int k = 0; ends && ends[k]; k++)
                end |= tok_is_name(cur(p), ends[k]);
            if (end)
                break;
            PI_TRY(parse_statement(p, &x));
        } else {
            return expected(p, "template text or a tag");
        }
        PI_TRY(nodes_add(&body, x));
    }
    *kids = nodes_take(&body, nkids);
    return PI_OK;
}

/* jinja2 refuses an unknown filter or test when it compiles the template, except inside
 * an if statement or a conditional expression (its "soft" frames: there the error is
 * raised only if that code runs); a for loop, macro or block set inside starts a frame
 * of its own. */
static int check_names(struct parser *p, const struct jnode *x, int soft, int depth) {
    if (!x)
        return PI_OK;
    if (depth > 4 * p->t->lim.max_nesting + 16)
        return pi_error_set(p->err, PI_ERR_RANGE, "the template is nested too deep");
    if ((x->kind == E_FILTER || x->kind == E_TEST) && x->op == JINJA_UNKNOWN && !soft) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(x->val.u.str.n < 60 ? x->val.u.str.n : 60),
                 x->val.u.str.s);
        return fail_pos(p, x->pos, "no %s named '%s'", x->kind == E_FILTER ? "filter" : "test",
                        name);
    }
    int in = soft, body = soft;
    if (x->kind == S_IF || x->kind == E_COND)
        in = body = 1;
    else if (x->kind == S_FOR || x->kind == S_MACRO || x->kind == S_SETBLOCK ||
             x->kind == S_FILTER || x->kind == S_BLOCK)
        body = 0;
    PI_TRY(check_names(p, x->a, in, depth + 1));
    PI_TRY(check_names(p, x->b, in, depth + 1));
    PI_TRY(check_names(p, x->c, in, depth + 1));
    int kids_soft = x->kind == E_SLICE || x->kind == E_CALL || x->kind == E_FILTER ||
                            x->kind == E_TEST || x->kind == E_COMPARE || x->kind == E_LIST ||
                            x->kind == E_TUPLE || x->kind == E_DICT
                        ? in
                        : body;
    for (uint32_t i = 0; i < x->nkids; i++)
        PI_TRY(check_names(p, x->kids[i], kids_soft, depth + 1));
    for (uint32_t i = 0; i < x->nkids2; i++)
        PI_TRY(check_names(p, x->kids2[i], x->kind == S_MACRO ? 0 : kids_soft, depth + 1));
    return PI_OK;
}

int jinja_parse(struct jtemplate *t, const char *src, size_t n, const struct jinja_limits *lim,
                const struct pi_allocator *al, struct pi_error *err) {
    memset(t, 0, sizeof *t);
    t->lim = *lim;
    if (n > lim->max_source)
        return pi_error_set(err, PI_ERR_RANGE, "a template of %zu bytes (limit %zu)", n,
                            lim->max_source);
    if (!u8_valid(src, n))
        return pi_error_set(err, PI_ERR_FORMAT, "the template is not valid UTF-8");
    ja_init(&t->arena, al, (size_t)64 * lim->max_source + ((size_t)1 << 20), err);
    /* newlines as jinja2 reads them: \r\n and \r are \n, and one final \n is dropped */
    char *s = ja_alloc(&t->arena, n + 1);
    if (!s) {
        ja_free(&t->arena);
        return pi_error_set(err, PI_ERR_NOMEM, "out of memory parsing the template");
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n')
                i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m > 0 && s[m - 1] == '\n')
        m--;
    s[m] = '\0';
    t->src = s;
    t->n = m;
    struct parser p = {t, err, s, m, NULL, 0, 0, 0, 0};
    int st = lex(&p);
    if (st == PI_OK) {
        struct jnode *root = node(&p, S_BLOCK, 0);
        st = root ? parse_body(&p, NULL, &root->kids, &root->nkids) : ja_status(&t->arena);
        if (st == PI_OK)
            st = check_names(&p, root, 0, 0);
        t->root = root;
    }
    if (st < 0) {
        ja_free(&t->arena);
        t->root = NULL;
        return st;
    }
    return PI_OK;
}

void jinja_free(struct jtemplate *t) {
    ja_free(&t->arena);
    t->root = NULL;
}
