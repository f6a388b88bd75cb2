/* value.h -- the values of the chat-template interpreter (chat/jinja*.c) and of the JSON
 * data it renders (chat/json.c), with Python's semantics, since templates are written
 * for jinja2: truthiness, ==, ordering, str() and repr().
 *
 * Every value of one render (and every constant of one parsed template) lives in an
 * arena that is freed as a whole: values are immutable once made, except a namespace's
 * attributes and a loop's position, so they are shared freely and never freed one by
 * one. The arena bounds the memory a template may use; a failing allocation records why
 * in the arena's pi_error. Strings are UTF-8 (checked where they enter: template source,
 * JSON data) with a length, so they may hold NUL. */
#ifndef PI_CHAT_VALUE_H
#define PI_CHAT_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include "util/alloc.h"
#include "util/error.h"

/* ---- arena -------------------------------------------------------------------------- */

struct jchunk;

struct jarena {
    const struct pi_allocator *al;
    struct pi_error *err; /* receives the reason of a failed allocation */
    struct jchunk *head;
    size_t used, limit; /* bytes taken from the allocator, and the most allowed */
};

void ja_init(struct jarena *a, const struct pi_allocator *al, size_t limit, struct pi_error *err);
/* n bytes aligned for any value; NULL (reason in a->err: PI_ERR_NOMEM, or PI_ERR_RANGE
 * past the limit) on failure. */
void *ja_alloc(struct jarena *a, size_t n);
/* The status of the last failure: PI_ERR_RANGE past the limit, else PI_ERR_NOMEM. */
int ja_status(const struct jarena *a);
void ja_free(struct jarena *a);

/* ---- values ------------------------------------------------------------------------- */

enum jv_kind {
    JV_UNDEF, /* jinja2's Undefined: falsy, prints "", iterates empty */
    JV_NONE,
    JV_BOOL,
    JV_INT, /* Python int within int64; arithmetic that leaves it is an error */
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* also tuples (JV_TUPLE) */
    JV_DICT, /* insertion-ordered */
    JV_NS,   /* namespace(): a dict whose members `set ns.x = ...` may change */
    JV_LOOP, /* a for loop's `loop` */
    JV_FUNC  /* macro, global function or bound method */
};

enum {
    JV_MARKUP = 1, /* a string made by |safe or |escape: `+` escapes the other side */
    JV_TUPLE = 2,  /* a list written (and printed) as a tuple */
    JV_UNSAFE = 4, /* an undefined that stands for an attribute the sandbox refuses */
    /* Lists that are Python iterators or views, not lists: what jinja2's map, select,
     * reject, selectattr, rejectattr, unique, items and reverse return (generators:
     * always true, no len(), not subscriptable, not JSON, exhausted once iterated), and
     * dict.items() / keys() / values() (views: len() but not subscriptable, not JSON). */
    JV_GEN = 8,
    JV_VIEW_ITEMS = 16,
    JV_VIEW_KEYS = 32,
    JV_VIEW_VALUES = 48,
    JV_VIEW = 48
};

struct jlist;
struct jdict;
struct jloop;
struct jfunc;

typedef struct jv {
    uint8_t kind;
    uint8_t flags;
    union {
        int b;
        int64_t i;
        double f;
        /* strings; for JV_UNDEF the name it stands for (s may be NULL) */
        struct {
            const char *s;
            size_t n;
        } str;
        struct jlist *list;
        struct jdict *dict; /* JV_DICT and JV_NS */
        struct jloop *loop;
        struct jfunc *fn;
    } u;
} jv;

struct jlist {
    size_t n;
    jv *v;
    int consumed; /* a generator that has been iterated */
};

struct jdict {
    size_t n, cap;
    jv *k, *v;
};

/* A callable: a macro (node and the scope it was defined in), a global function or a
 * method bound to `self`; id is the interpreter's number for the builtin. */
struct jfunc {
    int kind; /* JF_* of chat/jinja.h */
    int id;
    const void *macro;
    void *closure;
    jv self;
    const char *name;
    size_t name_n;
};

/* What a for loop exposes as `loop`; updated in place as the loop advances, as
 * jinja2's LoopContext is. */
struct jloop {
    const struct jlist *items;
    size_t index0;
    int depth;
};

static inline jv jv_undef(void) {
    jv v = {JV_UNDEF, 0, {0}};
    return v;
}
static inline jv jv_none(void) {
    jv v = {JV_NONE, 0, {0}};
    return v;
}
static inline jv jv_bool(int b) {
    jv v = {JV_BOOL, 0, {0}};
    v.u.b = b != 0;
    return v;
}
static inline jv jv_int(int64_t i) {
    jv v = {JV_INT, 0, {0}};
    v.u.i = i;
    return v;
}
static inline jv jv_float(double f) {
    jv v = {JV_FLOAT, 0, {0}};
    v.u.f = f;
    return v;
}
static inline jv jv_str(const char *s, size_t n) {
    jv v = {JV_STR, 0, {0}};
    v.u.str.s = s;
    v.u.str.n = n;
    return v;
}
jv jv_cstr(const char *s);
static inline int jv_is_num(jv v) {
    return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT;
}
static inline int jv_is_str(jv v) {
    return v.kind == JV_STR;
}
/* True when v is the string s. */
int jv_str_is(jv v, const char *s);

/* A new list of n values (uninitialised when items is NULL); a string copied into the
 * arena; a dict with room for cap entries. NULL/-1 with the reason in the arena. */
struct jlist *jl_new(struct jarena *a, size_t n, const jv *items);
int jv_strdup(struct jarena *a, const char *s, size_t n, jv *out);
struct jdict *jd_new(struct jarena *a, size_t cap);
/* The value under key, or NULL. */
jv *jd_get(const struct jdict *d, jv key);
jv *jd_get_str(const struct jdict *d, const char *key, size_t n);
/* Set key (replacing its value in place, as Python keeps the first position). */
int jd_set(struct jarena *a, struct jdict *d, jv key, jv val);

/* Python's bool(v). */
int jv_truthy(jv v);
/* Python's ==, deep (depth-bounded: a namespace may hold itself; too deep is unequal). */
int jv_eq(jv a, jv b);
/* Python's ordering for <, <=, >, >=: *res is <0, 0, >0. PI_ERR_TYPE (no message) for
 * values Python cannot order (str against int, ...). */
int jv_cmp(jv a, jv b, int *res);
/* Python's type name of v ("str", "int", "dict", "Undefined", ...). */
const char *jv_type_name(jv v);
/* Python's len(v) for str (code points), list, dict; -1 for other kinds. */
int64_t jv_len(jv v);

/* ---- text building ------------------------------------------------------------------ */

struct jbuf {
    struct jarena *a;
    char *p;
    size_t n, cap;
    size_t limit; /* the longest string allowed (PI_ERR_RANGE past it) */
};

void jb_init(struct jbuf *b, struct jarena *a, size_t limit);
int jb_put(struct jbuf *b, const char *s, size_t n);
int jb_putc(struct jbuf *b, char c);
int jb_puts(struct jbuf *b, const char *s);
/* Append code point cp as UTF-8. */
int jb_put_cp(struct jbuf *b, uint32_t cp);
/* The text so far as a string value (the buffer stays usable: later puts copy). */
jv jb_value(struct jbuf *b);

/* Python's str(v) and repr(v), appended. */
int jv_put_str(struct jbuf *b, jv v);
int jv_put_repr(struct jbuf *b, jv v);
/* Python's repr(float): the shortest text that reads back as f. buf: 32 bytes. */
void jv_format_float(double f, char *buf);
/* strtod with '.' as the decimal point whatever the locale; *used: bytes read. */
double jv_strtod(const char *s, size_t *used);
/* v as a string value: itself for strings, else str(v) in the arena. */
int jv_to_str(struct jarena *a, size_t limit, jv v, jv *out);

/* ---- UTF-8 and characters ----------------------------------------------------------- */

/* 1 when the n bytes at s are well-formed UTF-8. */
int u8_valid(const char *s, size_t n);
/* The code point at s[*i] (well-formed input), advancing *i. */
uint32_t u8_next(const char *s, size_t n, size_t *i);
/* Byte offset of code point k (or n when k is past the end). */
size_t u8_offset(const char *s, size_t n, size_t k);
/* Code points in s. */
size_t u8_count(const char *s, size_t n);
/* Python's str.isspace() for one code point. */
int cp_is_space(uint32_t c);
/* Python's upper/lower for one code point (ASCII, Latin-1, Latin Extended-A, Greek,
 * Cyrillic; others unchanged). */
uint32_t cp_upper(uint32_t c);
uint32_t cp_lower(uint32_t c);
/* Has case (upper or lower differs), and Python's \w (letters, digits, _) roughly:
 * ASCII exactly, every code point past U+00BF that is not space or punctuation. */
int cp_is_cased(uint32_t c);
int cp_is_word(uint32_t c);

#endif
