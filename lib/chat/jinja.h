/* jinja.h -- a Jinja interpreter for chat templates: the subset of jinja2 that model
 * chat templates use, with jinja2's semantics as Hugging Face transformers configures
 * it for apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
 * loop controls, json.dumps as |tojson, raise_exception / strftime_now / namespace /
 * dict as globals).
 *
 * jinja_parse.c turns the source into a tree once (syntax errors and unknown filter /
 * test names are found there, as jinja2 finds them when it compiles); jinja_eval.c
 * walks the tree for each render with its own arena, so a parsed template is read-only
 * and may be rendered by many threads at once; jinja_lib.c holds the filters, tests and
 * global functions, jinja_str.c Python's str operations and the methods. Everything
 * is bounded (jinja_limits) because templates come from model files. */
#ifndef PI_CHAT_JINJA_H
#define PI_CHAT_JINJA_H

#include "chat/value.h"

/* ---- the tree ------------------------------------------------------------------------ */

enum jnode_kind {
    /* statements */
    S_TEXT,     /* val: the text */
    S_OUT,      /* {{ a }} */
    S_IF,       /* a: condition, kids: body, kids2: else body (an elif is an S_IF there) */
    S_FOR,      /* names: targets, a: iterable, b: filter condition or NULL, kids: body,
                   kids2: else body */
    S_SET,      /* names: targets (or names[0] the namespace and val the attribute when
                   flag is 1), b: value */
    S_SETBLOCK, /* names[0]: target, kids: body, a: filters over E_BLOCKVAL or NULL */
    S_MACRO,    /* val: name, names: parameters, kids2: their defaults (NULL: none),
                   kids: body */
    S_FILTER,   /* kids: body, a: filters over E_BLOCKVAL */
    S_BREAK,
    S_CONTINUE,
    S_BLOCK, /* kids: body ({% generation %}, rendered as it is) */
    /* expressions */
    E_CONST,  /* val */
    E_NAME,   /* val: the name */
    E_ATTR,   /* a.val */
    E_ITEM,   /* a[b] */
    E_SLICE,  /* a[kids[0]:kids[1]:kids[2]], each may be NULL */
    E_CALL,   /* a(kids..., names[i]=kids2[i]...) */
    E_FILTER, /* a|val(kids..., names=kids2...), op: filter id */
    E_TEST,   /* a is [not] val(kids...), op: test id, flag: negated */
    E_UNARY,  /* op: '-', '+' or 'n' (not) */
    E_BINARY, /* op: a JOP_* */
    E_AND,
    E_OR,
    E_COMPARE, /* kids: n+1 operands, ops: n JOP_* comparisons (chained as Python) */
    E_COND,    /* b if a else c (c may be NULL: undefined) */
    E_LIST,    /* kids */
    E_TUPLE,   /* kids */
    E_DICT,    /* kids: keys, kids2: values */
    E_BLOCKVAL /* the rendered body of a filter block or block set */
};

enum jop {
    JOP_ADD = 1,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN
};

struct jnode {
    uint8_t kind;
    uint8_t op;
    uint8_t flag;
    uint32_t pos; /* byte offset in the (newline-normalised) source */
    struct jnode *a, *b, *c;
    struct jnode **kids, **kids2;
    uint32_t nkids, nkids2;
    jv *names;
    uint32_t nnames;
    uint8_t *ops;
    jv val;
};

/* ---- limits ------------------------------------------------------------------------- */

struct jinja_limits {
    size_t max_source;  /* template source bytes */
    int max_nesting;    /* statements inside statements, and expression depth */
    size_t max_memory;  /* arena bytes of one render (every value and text) */
    size_t max_output;  /* bytes of the rendered text (and of any one string) */
    uint64_t max_steps; /* loop iterations, macro calls and list items made, in all */
    int max_calls;      /* macro calls active at once (recursion) */
    int max_depth;      /* evaluation frames active at once */
};

void jinja_default_limits(struct jinja_limits *l);

/* ---- parsing ------------------------------------------------------------------------ */

struct jtemplate {
    struct jarena arena; /* the tree, its constants and the source */
    const char *src;     /* normalised: \r\n and \r read as \n, one final \n dropped */
    size_t n;
    struct jnode *root; /* an S_BLOCK */
    struct jinja_limits lim;
};

/* Parse `n` bytes of template source (borrowed for the call; the template keeps a
 * copy). PI_OK with *t filled; PI_ERR_FORMAT with "line L, column C: ..." in err (what
 * was expected, or the unknown filter / test / tag); PI_ERR_RANGE past the limits (err
 * says which); PI_ERR_NOMEM. On failure nothing is left allocated. */
int jinja_parse(struct jtemplate *t, const char *src, size_t n, const struct jinja_limits *lim,
                const struct pi_allocator *al, struct pi_error *err);
void jinja_free(struct jtemplate *t);

/* 1-based line and column (in code points) of byte offset pos of the source. */
void jinja_line_col(const char *src, size_t n, size_t pos, unsigned *line, unsigned *col);

/* ---- rendering ---------------------------------------------------------------------- */

/* Render with `vars` (a dict whose members are the template's variables; the global
 * functions are added beneath them; strftime_now only when now >= 0, seconds since the
 * Unix epoch in UTC). The text goes to out (in `arena`, which the caller frees). Errors:
 * PI_ERR_FORMAT for what jinja2 raises while rendering (raise_exception's message as the
 * template gave it; type errors, undefined values used, unsafe calls with "line L: "
 * first), PI_ERR_RANGE past a limit, PI_ERR_NOMEM. */
int jinja_render(const struct jtemplate *t, struct jarena *arena, const struct jdict *vars,
                 int64_t now, jv *out, struct pi_error *err);

/* ---- the library (jinja_lib.c), used by the evaluator -------------------------------- */

/* Callable kinds (struct jfunc.kind). */
enum { JF_MACRO = 1, JF_GLOBAL, JF_METHOD, JF_LOOP_CYCLE };

struct jrender; /* the evaluator's state (jinja_eval.c) */

/* Arguments of a call: positional values, then keyword names and values. */
struct jargs {
    const jv *pos;
    size_t npos;
    const jv *kwn, *kwv;
    size_t nkw;
};

/* Filter and test ids by name, or -1: the parser resolves names once. A name unknown
 * where jinja2 defers the error to run time gets JINJA_UNKNOWN. */
#define JINJA_UNKNOWN 255
int jlib_filter_id(const char *name, size_t n);
int jlib_test_id(const char *name, size_t n);
int jlib_global_id(const char *name, size_t n); /* -1 also for strftime_now when unset */
const char *jlib_global_name(int id);

int jlib_filter(struct jrender *r, int id, jv in, const struct jargs *args, jv *out);
int jlib_test(struct jrender *r, int id, jv in, const struct jargs *args, int *res);
int jlib_call_global(struct jrender *r, int id, const struct jargs *args, jv *out);
/* The method `name` of self's type (str, dict, list) as a bound callable: 1 and *out
 * set; 0 when the type has no such method; a negative status on failure. Methods that
 * would change the value (list.append, dict.pop, ...) are undefined values marked
 * unsafe, as the immutable sandbox refuses them. */
int jlib_method(struct jrender *r, jv self, jv name, jv *out);
int jlib_call_method(struct jrender *r, const struct jfunc *f, const struct jargs *args, jv *out);

/* Evaluator services the library uses (jinja_eval.c). */
struct jarena *jr_arena(struct jrender *r);
size_t jr_max_output(const struct jrender *r);
int64_t jr_now(const struct jrender *r);
/* Record a rendering error ("line L: " + text; PI_ERR_FORMAT) and return it. */
int jr_fail(struct jrender *r, const char *fmt, ...) PI_PRINTF(2, 3);
/* Record raise_exception's message as it is (PI_ERR_FORMAT). */
int jr_raise(struct jrender *r, jv msg);
/* Count work against max_steps. */
int jr_step(struct jrender *r, uint64_t n);
/* Call any callable value. */
int jr_call(struct jrender *r, jv fn, const struct jargs *args, jv *out);
/* jinja2's getattr (attribute first, then item) and getitem (item first, then
 * attribute), as the sandbox does them. */
int jr_getattr(struct jrender *r, jv obj, jv name, jv *out);
int jr_getitem(struct jrender *r, jv obj, jv key, jv *out);
/* Values as lists for iteration (str: its characters, dict: its keys, undefined: empty;
 * PI_ERR_FORMAT for values that are not iterable). */
int jr_iterate(struct jrender *r, jv v, const struct jlist **out);
/* An undefined value used where jinja2's Undefined raises. */
int jr_undefined_error(struct jrender *r, jv v);

#endif
