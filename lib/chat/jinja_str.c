/* jinja_str.c -- Python's str operations (case, strip, split, replace, find, title,
 * format, ...) for the filters and methods, and the methods of str, dict and list that
 * templates may call: the ones that do not change the value (the immutable sandbox
 * refuses the others). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jlib.h"

/* Python's str.lower / str.upper (ß upper-cases to "SS"). */
int jstr_case(struct jrender *r, jv s, int upper, jv *out) {
    struct jbuf b;
    lib_buf(r, &b);
    for (size_t i = 0; i < s.u.str.n;) {
        uint32_t c = u8_next(s.u.str.s, s.u.str.n, &i);
        if (upper && c == 0xdf)
            PI_TRY(jb_put(&b, "SS", 2));
        else
            PI_TRY(jb_put_cp(&b, upper ? cp_upper(c) : cp_lower(c)));
    }
    *out = jb_value(&b);
    return PI_OK;
}

/* Does code point c occur in the string set? */
static int in_set(jv set, uint32_t c) {
    for (size_t i = 0; i < set.u.str.n;)
        if (u8_next(set.u.str.s, set.u.str.n, &i) == c)
            return 1;
    return 0;
}

/* Python's str.strip/lstrip/rstrip: chars undefined/none means whitespace. */
int jstr_strip(struct jrender *r, jv s, jv chars, int left, int right, jv *out) {
    int ws = chars.kind == JV_UNDEF || chars.kind == JV_NONE;
    if (!ws && chars.kind != JV_STR)
        return jr_fail(r, "strip arg must be None or str");
    size_t b = 0, e = s.u.str.n;
    while (left && b < e) {
        size_t i = b;
        uint32_t c = u8_next(s.u.str.s, e, &i);
        if (ws ? !cp_is_space(c) : !in_set(chars, c))
            break;
        b = i;
    }
    while (right && e > b) {
        size_t k = e - 1;
        while (k > b && ((unsigned char)s.u.str.s[k] & 0xc0) == 0x80)
            k--;
        size_t i = k;
        uint32_t c = u8_next(s.u.str.s, e, &i);
        if (ws ? !cp_is_space(c) : !in_set(chars, c))
            break;
        e = k;
    }
    *out = jv_str(s.u.str.s + b, e - b);
    out->flags = s.flags & JV_MARKUP;
    return PI_OK;
}

const char *jstr_find(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0)
        return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && memcmp(h + i, nd, nn) == 0)
            return h + i;
    return NULL;
}

const char *jstr_rfind(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn > hn)
        return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (memcmp(h + i, nd, nn) == 0)
            return h + i;
    return NULL;
}

int jstr_replace(struct jrender *r, jv s, jv old, jv rep, int64_t count, jv *out) {
    struct jbuf b;
    lib_buf(r, &b);
    const char *p = s.u.str.s, *end = s.u.str.s + s.u.str.n;
    int64_t done = 0;
    if (old.u.str.n == 0) { /* between every character, and at both ends */
        size_t i = 0;
        for (;;) {
            if (count < 0 || done < count) {
                PI_TRY(jb_put(&b, rep.u.str.s, rep.u.str.n));
                done++;
            }
            if (i >= s.u.str.n)
                break;
            size_t at = i;
            u8_next(s.u.str.s, s.u.str.n, &i);
            PI_TRY(jb_put(&b, s.u.str.s + at, i - at));
        }
    } else {
        while (count < 0 || done < count) {
            const char *f = jstr_find(p, (size_t)(end - p), old.u.str.s, old.u.str.n);
            if (!f)
                break;
            PI_TRY(jb_put(&b, p, (size_t)(f - p)));
            PI_TRY(jb_put(&b, rep.u.str.s, rep.u.str.n));
            p = f + old.u.str.n;
            done++;
        }
        PI_TRY(jb_put(&b, p, (size_t)(end - p)));
    }
    *out = jb_value(&b);
    out->flags = s.flags & JV_MARKUP;
    return PI_OK;
}

/* Python's str.splitlines() boundaries: the length of the one at s[i], or 0. */
static size_t line_break(const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\r')
        return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e)
        return 1;
    if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85)
        return 2;
    if (c == 0xe2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
        ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9))
        return 3;
    return 0;
}

int jstr_splitlines(struct jrender *r, jv s, int keepends, jv *out) {
    struct jbuf items;
    lib_buf(r, &items);
    size_t start = 0, n = s.u.str.n;
    for (size_t i = 0; i < n;) {
        size_t k = line_break(s.u.str.s, n, i);
        if (!k) {
            i++;
            continue;
        }
        jv line = jv_str(s.u.str.s + start, (keepends ? i + k : i) - start);
        PI_TRY(jb_put(&items, (const char *)&line, sizeof line));
        i += k;
        start = i;
    }
    if (start < n) {
        jv line = jv_str(s.u.str.s + start, n - start);
        PI_TRY(jb_put(&items, (const char *)&line, sizeof line));
    }
    struct jlist *l;
    PI_TRY(lib_new_list(r, items.n / sizeof(jv), &l));
    if (items.n)
        memcpy(l->v, items.p, items.n);
    *out = lib_list(l, 0);
    return PI_OK;
}

/* Python's str.split / rsplit. */
int jstr_split(struct jrender *r, jv s, jv sep, int64_t maxsplit, int from_right, jv *out) {
    struct jbuf items;
    lib_buf(r, &items);
    const char *p = s.u.str.s;
    size_t n = s.u.str.n;
    int ws = sep.kind == JV_UNDEF || sep.kind == JV_NONE;
    if (!ws && sep.kind != JV_STR)
        return jr_fail(r, "must be str or None, not %s", jv_type_name(sep));
    if (!ws && sep.u.str.n == 0)
        return jr_fail(r, "empty separator");
    /* pieces as (start, end) offsets, collected left to right */
    size_t cap = 16, np = 0;
    size_t *pc = ja_alloc(jr_arena(r), 2 * cap * sizeof *pc);
    if (!pc)
        return ja_status(jr_arena(r));
#define ADD_PIECE(b, e)                                                                            \
  do {                                                                                             \
    if (np == cap) {                                                                               \
      size_t *g = ja_alloc(jr_arena(r), 4 * cap * sizeof *g);                                      \
      if (!g)                                                                                      \
        return ja_status(jr_arena(r));                                                             \
      memcpy(g, pc, 2 * cap * sizeof *g);                                                          \
      pc = g;                                                                                      \
      cap *= 2;                                                                                    \
    }                                                                                              \
    pc[2 * np] = (b);                                                                              \
    pc[2 * np + 1] = (e);                                                                          \
    np++;                                                                                          \
  } while (0)
    if (!from_right || maxsplit < 0) {
        size_t i = 0;
        int64_t done = 0;
        if (ws) {
            for (;;) {
                while (i < n) {
                    size_t j = i;
                    if (!cp_is_space(u8_next(p, n, &j)))
                        break;
                    i = j;
                }
                if (i >= n)
                    break;
                if (maxsplit >= 0 && done >= maxsplit) {
                    size_t e = n;
                    while (e > i) { /* the rest, less trailing whitespace */
                        size_t k = e - 1;
                        while (k > i && ((unsigned char)p[k] & 0xc0) == 0x80)
                            k--;
                        size_t j = k;
                        if (!cp_is_space(u8_next(p, n, &j)))
                            break;
                        e = k;
                    }
                    ADD_PIECE(i, e);
                    break;
                }
                size_t b = i;
                while (i < n) {
                    size_t j = i;
                    if (cp_is_space(u8_next(p, n, &j)))
                        break;
                    i = j;
                }
                ADD_PIECE(b, i);
                done++;
            }
        } else {
            for (;;) {
                const char *f = maxsplit >= 0 && done >= maxsplit
                                    ? NULL
                                    : jstr_find(p + i, n - i, sep.u.str.s, sep.u.str.n);
                if (!f) {
                    ADD_PIECE(i, n);
                    break;
                }
                ADD_PIECE(i, (size_t)(f - p));
                i = (size_t)(f - p) + sep.u.str.n;
                done++;
            }
        }
    } else {
        /* rsplit with a limit: split from the right, then reverse the pieces */
        size_t e = n;
        int64_t done = 0;
        if (ws) {
            for (;;) {
                while (e > 0) {
                    size_t k = e - 1;
                    while (k > 0 && ((unsigned char)p[k] & 0xc0) == 0x80)
                        k--;
                    size_t j = k;
                    if (!cp_is_space(u8_next(p, n, &j)))
                        break;
                    e = k;
                }
                if (e == 0)
                    break;
                if (done >= maxsplit) {
                    size_t b = 0;
                    while (b < e) {
                        size_t j = b;
                        if (!cp_is_space(u8_next(p, n, &j)))
                            break;
                        b = j;
                    }
                    ADD_PIECE(b, e);
                    break;
                }
                size_t b = e;
                while (b > 0) {
                    size_t k = b - 1;
                    while (k > 0 && ((unsigned char)p[k] & 0xc0) == 0x80)
                        k--;
                    size_t j = k;
                    if (cp_is_space(u8_next(p, n, &j)))
                        break;
                    b = k;
                }
                ADD_PIECE(b, e);
                e = b;
                done++;
            }
        } else {
            for (;;) {
                const char *f =
                    done >= maxsplit ? NULL : jstr_rfind(p, e, sep.u.str.s, sep.u.str.n);
                if (!f) {
                    ADD_PIECE(0, e);
                    break;
                }
                ADD_PIECE((size_t)(f - p) + sep.u.str.n, e);
                e = (size_t)(f - p);
                done++;
            }
        }
        for (size_t a = 0, b = np ? np - 1 : 0; a < b; a++, b--) {
            size_t t0 = pc[2 * a], t1 = pc[2 * a + 1];
            pc[2 * a] = pc[2 * b];
            pc[2 * a + 1] = pc[2 * b + 1];
            pc[2 * b] = t0;
            pc[2 * b + 1] = t1;
        }
    }
#undef ADD_PIECE
    (void)items;
    struct jlist *l;
    PI_TRY(lib_new_list(r, np, &l));
    for (size_t k = 0; k < np; k++)
        l->v[k] = jv_str(p + pc[2 * k], pc[2 * k + 1] - pc[2 * k]);
    *out = lib_list(l, 0);
    return PI_OK;
}

/* Python's str.isupper / islower: some cased character, and all of them in that case. */
int jstr_is_case(jv s, int upper) {
    int cased = 0;
    for (size_t i = 0; i < s.u.str.n;) {
        uint32_t c = u8_next(s.u.str.s, s.u.str.n, &i);
        if (!cp_is_cased(c))
            continue;
        cased = 1;
        int is_upper = cp_lower(c) != c;
        if (is_upper != upper)
            return 0;
    }
    return cased;
}

/* Python's str.title(). */
int jstr_title(struct jrender *r, jv s, jv *out) {
    struct jbuf b;
    lib_buf(r, &b);
    int prev_cased = 0;
    for (size_t i = 0; i < s.u.str.n;) {
        uint32_t c = u8_next(s.u.str.s, s.u.str.n, &i);
        int cased = cp_is_cased(c);
        if (cased && !prev_cased && c == 0xdf)
            PI_TRY(jb_put(&b, "Ss", 2));
        else
            PI_TRY(jb_put_cp(&b, cased ? (prev_cased ? cp_lower(c) : cp_upper(c)) : c));
        prev_cased = cased;
    }
    *out = jb_value(&b);
    return PI_OK;
}

int jstr_capitalize(struct jrender *r, jv s, jv *out) {
    struct jbuf b;
    lib_buf(r, &b);
    for (size_t i = 0; i < s.u.str.n;) {
        int first = i == 0;
        uint32_t c = u8_next(s.u.str.s, s.u.str.n, &i);
        if (first && c == 0xdf)
            PI_TRY(jb_put(&b, "Ss", 2));
        else
            PI_TRY(jb_put_cp(&b, first ? cp_upper(c) : cp_lower(c)));
    }
    *out = jb_value(&b);
    return PI_OK;
}

/* ---- methods ------------------------------------------------------------------------ */

enum {
    M_STRIP,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_RSPLIT,
    M_SPLITLINES,
    M_STARTSWITH,
    M_ENDSWITH,
    M_UPPER,
    M_LOWER,
    M_TITLE,
    M_CAPITALIZE,
    M_REPLACE,
    M_FIND,
    M_RFIND,
    M_COUNT,
    M_JOIN,
    M_FORMAT,
    M_ISDIGIT,
    M_ISALPHA,
    M_ISALNUM,
    M_ISSPACE,
    M_ISUPPER,
    M_ISLOWER,
    M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    M_INDEX,
    M_GET,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_COPY,
    M_LINDEX,
    M_LCOUNT
};

static const struct {
    uint8_t kind;
    const char *name;
    int id; /* -1: refused by the immutable sandbox */
} methods[] = {
    {JV_STR, "strip", M_STRIP},
    {JV_STR, "lstrip", M_LSTRIP},
    {JV_STR, "rstrip", M_RSTRIP},
    {JV_STR, "split", M_SPLIT},
    {JV_STR, "rsplit", M_RSPLIT},
    {JV_STR, "splitlines", M_SPLITLINES},
    {JV_STR, "startswith", M_STARTSWITH},
    {JV_STR, "endswith", M_ENDSWITH},
    {JV_STR, "upper", M_UPPER},
    {JV_STR, "lower", M_LOWER},
    {JV_STR, "title", M_TITLE},
    {JV_STR, "capitalize", M_CAPITALIZE},
    {JV_STR, "replace", M_REPLACE},
    {JV_STR, "find", M_FIND},
    {JV_STR, "rfind", M_RFIND},
    {JV_STR, "count", M_COUNT},
    {JV_STR, "join", M_JOIN},
    {JV_STR, "format", M_FORMAT},
    {JV_STR, "isdigit", M_ISDIGIT},
    {JV_STR, "isalpha", M_ISALPHA},
    {JV_STR, "isalnum", M_ISALNUM},
    {JV_STR, "isspace", M_ISSPACE},
    {JV_STR, "isupper", M_ISUPPER},
    {JV_STR, "islower", M_ISLOWER},
    {JV_STR, "removeprefix", M_REMOVEPREFIX},
    {JV_STR, "removesuffix", M_REMOVESUFFIX},
    {JV_STR, "index", M_INDEX},
    {JV_DICT, "get", M_GET},
    {JV_DICT, "items", M_ITEMS},
    {JV_DICT, "keys", M_KEYS},
    {JV_DICT, "values", M_VALUES},
    {JV_DICT, "copy", M_COPY},
    {JV_DICT, "pop", -1},
    {JV_DICT, "popitem", -1},
    {JV_DICT, "setdefault", -1},
    {JV_DICT, "update", -1},
    {JV_DICT, "clear", -1},
    {JV_LIST, "index", M_LINDEX},
    {JV_LIST, "count", M_LCOUNT},
    {JV_LIST, "append", -1},
    {JV_LIST, "extend", -1},
    {JV_LIST, "insert", -1},
    {JV_LIST, "pop", -1},
    {JV_LIST, "remove", -1},
    {JV_LIST, "reverse", -1},
    {JV_LIST, "sort", -1},
    {JV_LIST, "clear", -1},
};

int jlib_method(struct jrender *r, jv self, jv name, jv *out) {
    if (name.kind != JV_STR)
        return 0;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        if (methods[i].kind != self.kind || !lib_name_eq(methods[i].name, name.u.str.s, name.u.str.n))
            continue;
        if (methods[i].id < 0) {
            *out = jv_undef();
            out->flags = JV_UNSAFE;
            out->u.str.s = methods[i].name;
            out->u.str.n = strlen(methods[i].name);
            return 1;
        }
        struct jfunc *f = ja_alloc(jr_arena(r), sizeof *f);
        if (!f)
            return ja_status(jr_arena(r));
        memset(f, 0, sizeof *f);
        f->kind = JF_METHOD;
        f->id = methods[i].id;
        f->self = self;
        f->name = methods[i].name;
        f->name_n = strlen(f->name);
        out->kind = JV_FUNC;
        out->flags = 0;
        out->u.fn = f;
        return 1;
    }
    return 0;
}

/* Python's str.format with {}, {0}, {name}, {{, }} and !s / !r; no format specs. */
static int str_format(struct jrender *r, jv s, const struct jargs *args, jv *out) {
    struct jbuf b;
    lib_buf(r, &b);
    size_t auto_i = 0;
    const char *p = s.u.str.s, *end = p + s.u.str.n;
    while (p < end) {
        if (*p == '{' && p + 1 < end && p[1] == '{') {
            PI_TRY(jb_putc(&b, '{'));
            p += 2;
            continue;
        }
        if (*p == '}' && p + 1 < end && p[1] == '}') {
            PI_TRY(jb_putc(&b, '}'));
            p += 2;
            continue;
        }
        if (*p == '}')
            return jr_fail(r, "Single '}' encountered in format string");
        if (*p != '{') {
            PI_TRY(jb_putc(&b, *p++));
            continue;
        }
        const char *close = memchr(p, '}', (size_t)(end - p));
        if (!close)
            return jr_fail(r, "Single '{' encountered in format string");
        const char *f = p + 1, *fe = close;
        char conv = 0;
        for (const char *q = f; q < fe; q++) {
            if (*q == ':')
                return jr_fail(r, "format specifications are not supported in format()");
            if (*q == '!' && q + 2 == fe) {
                conv = q[1];
                fe = q;
                break;
            }
        }
        jv v;
        if (f == fe) {
            if (auto_i >= args->npos)
                return jr_fail(r,
                               "Replacement index %zu out of range for positional args "
                               "tuple",
                               auto_i);
            v = args->pos[auto_i++];
        } else if (*f >= '0' && *f <= '9') {
            size_t k = (size_t)strtoul(f, NULL, 10);
            if (k >= args->npos)
                return jr_fail(r,
                               "Replacement index %zu out of range for positional args "
                               "tuple",
                               k);
            v = args->pos[k];
        } else {
            v = lib_arg(args, (size_t)-1, "", jv_undef());
            size_t k = 0;
            while (k < args->nkw && !(args->kwn[k].u.str.n == (size_t)(fe - f) &&
                                      memcmp(args->kwn[k].u.str.s, f, (size_t)(fe - f)) == 0))
                k++;
            if (k == args->nkw)
                return jr_fail(r, "KeyError: '%.*s'", (int)(fe - f), f);
            v = args->kwv[k];
        }
        if (conv == 'r')
            PI_TRY(jv_put_repr(&b, v));
        else if (conv == 's' || conv == 0)
            PI_TRY(jv_put_str(&b, v));
        else
            return jr_fail(r, "Unknown conversion specifier %c", conv);
        p = close + 1;
    }
    *out = jb_value(&b);
    return PI_OK;
}

/* startswith / endswith with a string or a tuple of strings. */
static int affix(struct jrender *r, jv s, jv x, int end, int *res) {
    if (x.kind == JV_LIST && (x.flags & JV_TUPLE)) {
        *res = 0;
        for (size_t i = 0; i < x.u.list->n && !*res; i++)
            PI_TRY(affix(r, s, x.u.list->v[i], end, res));
        return PI_OK;
    }
    if (x.kind != JV_STR)
        return jr_fail(r, "%s first arg must be str or a tuple of str, not %s",
                       end ? "endswith" : "startswith", jv_type_name(x));
    size_t k = x.u.str.n;
    *res = k <= s.u.str.n && memcmp(s.u.str.s + (end ? s.u.str.n - k : 0), x.u.str.s, k) == 0;
    return PI_OK;
}

static int char_class(jv s, int id) {
    if (s.u.str.n == 0)
        return 0;
    if (id == M_ISUPPER || id == M_ISLOWER)
        return jstr_is_case(s, id == M_ISUPPER);
    for (size_t i = 0; i < s.u.str.n;) {
        uint32_t c = u8_next(s.u.str.s, s.u.str.n, &i);
        int digit = c >= '0' && c <= '9';
        int alpha = cp_is_word(c) && !digit && c != '_' && !(c >= 0xb2 && c <= 0xbe);
        int ok = id == M_ISDIGIT   ? digit
                 : id == M_ISALPHA ? alpha
                 : id == M_ISALNUM ? digit || alpha
                                   : cp_is_space(c);
        if (!ok)
            return 0;
    }
    return 1;
}

int jlib_call_method(struct jrender *r, const struct jfunc *f, const struct jargs *args, jv *out) {
    jv s = f->self;
    jv a0 = args->npos > 0 ? args->pos[0] : jv_undef();
    jv a1 = args->npos > 1 ? args->pos[1] : jv_undef();
    int res;
    switch (f->id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        PI_TRY(jstr_strip(r, s, lib_arg(args, 0, "chars", jv_none()), f->id != M_RSTRIP,
                          f->id != M_LSTRIP, out));
        out->flags = 0;
        return PI_OK;
    case M_SPLIT:
    case M_RSPLIT: {
        int64_t maxsplit = -1;
        jv ms = lib_arg(args, 1, "maxsplit", jv_int(-1));
        PI_TRY(lib_int(r, ms, "maxsplit", &maxsplit));
        return jstr_split(r, s, lib_arg(args, 0, "sep", jv_none()), maxsplit, f->id == M_RSPLIT,
                          out);
    }
    case M_SPLITLINES:
        return jstr_splitlines(r, s, jv_truthy(lib_arg(args, 0, "keepends", jv_bool(0))), out);
    case M_STARTSWITH:
    case M_ENDSWITH:
        PI_TRY(affix(r, s, a0, f->id == M_ENDSWITH, &res));
        *out = jv_bool(res);
        return PI_OK;
    case M_UPPER:
    case M_LOWER:
        return jstr_case(r, s, f->id == M_UPPER, out);
    case M_TITLE:
        return jstr_title(r, s, out);
    case M_CAPITALIZE:
        return jstr_capitalize(r, s, out);
    case M_REPLACE: {
        if (a0.kind != JV_STR || a1.kind != JV_STR)
            return jr_fail(r, "replace() arguments must be str");
        int64_t count = -1;
        if (args->npos > 2)
            PI_TRY(lib_int(r, args->pos[2], "count", &count));
        PI_TRY(jstr_replace(r, s, a0, a1, count, out));
        out->flags = 0;
        return PI_OK;
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_COUNT: {
        if (a0.kind != JV_STR)
            return jr_fail(r, "must be str, not %s", jv_type_name(a0));
        if (f->id == M_COUNT) {
            int64_t n = 0;
            if (a0.u.str.n == 0) {
                n = (int64_t)u8_count(s.u.str.s, s.u.str.n) + 1;
            } else {
                const char *p = s.u.str.s, *end = p + s.u.str.n, *hit;
                while ((hit = jstr_find(p, (size_t)(end - p), a0.u.str.s, a0.u.str.n))) {
                    n++;
                    p = hit + a0.u.str.n;
                }
            }
            *out = jv_int(n);
            return PI_OK;
        }
        const char *hit = f->id == M_RFIND
                              ? jstr_rfind(s.u.str.s, s.u.str.n, a0.u.str.s, a0.u.str.n)
                              : jstr_find(s.u.str.s, s.u.str.n, a0.u.str.s, a0.u.str.n);
        if (!hit && f->id == M_INDEX)
            return jr_fail(r, "substring not found");
        *out = jv_int(hit ? (int64_t)u8_count(s.u.str.s, (size_t)(hit - s.u.str.s)) : -1);
        return PI_OK;
    }
    case M_JOIN: {
        const struct jlist *items;
        PI_TRY(jr_iterate(r, a0, &items));
        struct jbuf b;
        lib_buf(r, &b);
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].kind != JV_STR)
                return jr_fail(r, "sequence item %zu: expected str instance, %s found", i,
                               jv_type_name(items->v[i]));
            if (i)
                PI_TRY(jb_put(&b, s.u.str.s, s.u.str.n));
            PI_TRY(jb_put(&b, items->v[i].u.str.s, items->v[i].u.str.n));
        }
        *out = jb_value(&b);
        return PI_OK;
    }
    case M_FORMAT:
        return str_format(r, s, args, out);
    case M_ISDIGIT:
    case M_ISALPHA:
    case M_ISALNUM:
    case M_ISSPACE:
    case M_ISUPPER:
    case M_ISLOWER:
        *out = jv_bool(char_class(s, f->id));
        return PI_OK;
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        if (a0.kind != JV_STR)
            return jr_fail(r, "must be str, not %s", jv_type_name(a0));
        PI_TRY(affix(r, s, a0, f->id == M_REMOVESUFFIX, &res));
        *out = s;
        out->flags = 0;
        if (res) {
            out->u.str.n -= a0.u.str.n;
            if (f->id == M_REMOVEPREFIX)
                out->u.str.s += a0.u.str.n;
        }
        return PI_OK;
    }
    case M_GET: {
        jv *v = jd_get(s.u.dict, a0);
        *out = v ? *v : lib_arg(args, 1, "default", jv_none());
        return PI_OK;
    }
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: {
        const struct jdict *d = s.u.dict;
        struct jlist *l;
        PI_TRY(lib_new_list(r, d->n, &l));
        for (size_t i = 0; i < d->n; i++) {
            if (f->id == M_ITEMS)
                PI_TRY(lib_pair(r, d->k[i], d->v[i], &l->v[i]));
            else
                l->v[i] = f->id == M_KEYS ? d->k[i] : d->v[i];
        }
        *out = lib_list(l, 0);
        out->flags = f->id == M_ITEMS  ? JV_VIEW_ITEMS
                     : f->id == M_KEYS ? JV_VIEW_KEYS
                                       : JV_VIEW_VALUES;
        return PI_OK;
    }
    case M_COPY: {
        struct jdict *d = jd_new(jr_arena(r), s.u.dict->n);
        if (!d)
            return ja_status(jr_arena(r));
        for (size_t i = 0; i < s.u.dict->n; i++)
            PI_TRY(jd_set(jr_arena(r), d, s.u.dict->k[i], s.u.dict->v[i]));
        out->kind = JV_DICT;
        out->flags = 0;
        out->u.dict = d;
        return PI_OK;
    }
    case M_LINDEX:
    case M_LCOUNT: {
        int64_t n = 0, at = -1;
        for (size_t i = 0; i < s.u.list->n; i++)
            if (jv_eq(s.u.list->v[i], a0)) {
                n++;
                if (at < 0)
                    at = (int64_t)i;
            }
        if (f->id == M_LINDEX && at < 0)
            return jr_fail(r, "value is not in list");
        *out = jv_int(f->id == M_LCOUNT ? n : at);
        return PI_OK;
    }
    default:
        return pi_error_set(jr_arena(r)->err, PI_ERR_INTERNAL, "jinja: method %d", f->id);
    }
}
