/* jlib.h -- what jinja_lib.c (filters, tests, globals) and jinja_str.c (Python's str
 * operations and the methods of str, dict and list) share. Private to lib/chat. */
#ifndef PI_CHAT_JLIB_H
#define PI_CHAT_JLIB_H

#include <string.h>

#include "chat/jinja.h"

/* s[0, n) is the C string a. */
static inline int lib_name_eq(const char *a, const char *s, size_t n) {
    return strlen(a) == n && memcmp(a, s, n) == 0;
}

/* Argument i (positional; (size_t)-1: keyword only) or `name`, else def. */
static inline jv lib_arg(const struct jargs *a, size_t i, const char *name, jv def) {
    if (i < a->npos)
        return a->pos[i];
    for (size_t k = 0; k < a->nkw; k++)
        if (jv_str_is(a->kwn[k], name))
            return a->kwv[k];
    return def;
}

static inline int lib_str(struct jrender *r, jv v, jv *out) {
    return jv_to_str(jr_arena(r), jr_max_output(r), v, out);
}

static inline void lib_buf(struct jrender *r, struct jbuf *b) {
    jb_init(b, jr_arena(r), jr_max_output(r));
}

static inline jv lib_list(struct jlist *l, int tuple) {
    jv v = {JV_LIST, (uint8_t)(tuple ? JV_TUPLE : 0), {0}};
    v.u.list = l;
    return v;
}

/* What jinja2's generator filters return. */
static inline jv lib_gen(struct jlist *l) {
    jv v = {JV_LIST, JV_GEN, {0}};
    v.u.list = l;
    return v;
}

static inline int lib_new_list(struct jrender *r, size_t n, struct jlist **out) {
    PI_TRY(jr_step(r, n));
    *out = jl_new(jr_arena(r), n, NULL);
    return *out ? PI_OK : ja_status(jr_arena(r));
}

static inline int lib_pair(struct jrender *r, jv a, jv b, jv *out) {
    struct jlist *l = jl_new(jr_arena(r), 2, NULL);
    if (!l)
        return ja_status(jr_arena(r));
    l->v[0] = a;
    l->v[1] = b;
    *out = lib_list(l, 1);
    return PI_OK;
}

static inline int lib_int(struct jrender *r, jv v, const char *what, int64_t *out) {
    if (v.kind == JV_INT)
        *out = v.u.i;
    else if (v.kind == JV_BOOL)
        *out = v.u.b;
    else
        return jr_fail(r, "%s must be an integer, not '%s'", what, jv_type_name(v));
    return PI_OK;
}

/* Python's str operations on string values (results in the render's arena). */
int jstr_case(struct jrender *r, jv s, int upper, jv *out); /* lower() / upper() */
int jstr_strip(struct jrender *r, jv s, jv chars, int left, int right, jv *out);
const char *jstr_find(const char *h, size_t hn, const char *nd, size_t nn);
const char *jstr_rfind(const char *h, size_t hn, const char *nd, size_t nn);
int jstr_replace(struct jrender *r, jv s, jv old, jv rep, int64_t count, jv *out);
int jstr_splitlines(struct jrender *r, jv s, int keepends, jv *out);
int jstr_split(struct jrender *r, jv s, jv sep, int64_t maxsplit, int from_right, jv *out);
int jstr_is_case(jv s, int upper); /* isupper() / islower() */
int jstr_title(struct jrender *r, jv s, jv *out);
int jstr_capitalize(struct jrender *r, jv s, jv *out);

#endif
