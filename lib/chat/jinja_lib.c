/* jinja_lib.c -- the filters, tests, global functions and methods of chat templates,
 * each as jinja2 3.1 (filters, tests, globals) or Python 3 (methods of str, dict and
 * list) defines it; transformers' overrides: |tojson is json.dumps(ensure_ascii=False),
 * dict() and namespace() refuse names starting with '_'. Text case and whitespace
 * follow Python for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jlib.h"
#include "chat/json.h"

/* ---- names -------------------------------------------------------------------------- */

enum {
    F_ABS,
    F_ATTR,
    F_CAPITALIZE,
    F_CENTER,
    F_DEFAULT,
    F_DICTSORT,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORCEESCAPE,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT
};

static const struct {
    const char *name;
    int id;
} filters[] = {
    {"abs", F_ABS},
    {"attr", F_ATTR},
    {"capitalize", F_CAPITALIZE},
    {"center", F_CENTER},
    {"count", F_LENGTH},
    {"d", F_DEFAULT},
    {"default", F_DEFAULT},
    {"dictsort", F_DICTSORT},
    {"e", F_ESCAPE},
    {"escape", F_ESCAPE},
    {"first", F_FIRST},
    {"float", F_FLOAT},
    {"forceescape", F_FORCEESCAPE},
    {"indent", F_INDENT},
    {"int", F_INT},
    {"items", F_ITEMS},
    {"join", F_JOIN},
    {"last", F_LAST},
    {"length", F_LENGTH},
    {"list", F_LIST},
    {"lower", F_LOWER},
    {"map", F_MAP},
    {"max", F_MAX},
    {"min", F_MIN},
    {"reject", F_REJECT},
    {"rejectattr", F_REJECTATTR},
    {"replace", F_REPLACE},
    {"reverse", F_REVERSE},
    {"round", F_ROUND},
    {"safe", F_SAFE},
    {"select", F_SELECT},
    {"selectattr", F_SELECTATTR},
    {"sort", F_SORT},
    {"string", F_STRING},
    {"sum", F_SUM},
    {"title", F_TITLE},
    {"tojson", F_TOJSON},
    {"trim", F_TRIM},
    {"unique", F_UNIQUE},
    {"upper", F_UPPER},
    {"wordcount", F_WORDCOUNT},
};

enum {
    T_BOOLEAN,
    T_CALLABLE,
    T_DEFINED,
    T_DIVISIBLEBY,
    T_EQ,
    T_ESCAPED,
    T_EVEN,
    T_FALSE,
    T_FILTER,
    T_FLOAT,
    T_GE,
    T_GT,
    T_IN,
    T_INTEGER,
    T_ITERABLE,
    T_LE,
    T_LOWER,
    T_LT,
    T_MAPPING,
    T_NE,
    T_NONE,
    T_NUMBER,
    T_ODD,
    T_SAMEAS,
    T_SEQUENCE,
    T_STRING,
    T_TEST,
    T_TRUE,
    T_UNDEFINED,
    T_UPPER
};

static const struct {
    const char *name;
    int id;
} tests[] = {
    {"!=", T_NE},
    {"<", T_LT},
    {"<=", T_LE},
    {"==", T_EQ},
    {">", T_GT},
    {">=", T_GE},
    {"boolean", T_BOOLEAN},
    {"callable", T_CALLABLE},
    {"defined", T_DEFINED},
    {"divisibleby", T_DIVISIBLEBY},
    {"eq", T_EQ},
    {"equalto", T_EQ},
    {"escaped", T_ESCAPED},
    {"even", T_EVEN},
    {"false", T_FALSE},
    {"filter", T_FILTER},
    {"float", T_FLOAT},
    {"ge", T_GE},
    {"greaterthan", T_GT},
    {"gt", T_GT},
    {"in", T_IN},
    {"integer", T_INTEGER},
    {"iterable", T_ITERABLE},
    {"le", T_LE},
    {"lessthan", T_LT},
    {"lower", T_LOWER},
    {"lt", T_LT},
    {"mapping", T_MAPPING},
    {"ne", T_NE},
    {"none", T_NONE},
    {"number", T_NUMBER},
    {"odd", T_ODD},
    {"sameas", T_SAMEAS},
    {"sequence", T_SEQUENCE},
    {"string", T_STRING},
    {"test", T_TEST},
    {"true", T_TRUE},
    {"undefined", T_UNDEFINED},
    {"upper", T_UPPER},
};

enum { G_DICT, G_NAMESPACE, G_RAISE, G_RANGE, G_STRFTIME };

static const char *const globals[] = {"dict", "namespace", "raise_exception", "range",
                                      "strftime_now"};

int jlib_filter_id(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (lib_name_eq(filters[i].name, name, n))
            return filters[i].id;
    return -1;
}

int jlib_test_id(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (lib_name_eq(tests[i].name, name, n))
            return tests[i].id;
    return -1;
}

int jlib_global_id(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (lib_name_eq(globals[i], name, n))
            return (int)i;
    return -1;
}

const char *jlib_global_name(int id) {
    return globals[id];
}

/* ---- helpers ------------------------------------------------------------------------ */

static int put_escaped(struct jbuf *b, jv s) {
    for (size_t i = 0; i < s.u.str.n; i++) {
        char c = s.u.str.s[i];
        const char *e = c == '&'    ? "&amp;"
                        : c == '<'  ? "&lt;"
                        : c == '>'  ? "&gt;"
                        : c == '\'' ? "&#39;"
                        : c == '"'  ? "&#34;"
                                    : NULL;
        PI_TRY(e ? jb_puts(b, e) : jb_putc(b, c));
    }
    return PI_OK;
}

/* jinja2's attribute getter for map/selectattr/sort/...: "a.b.0" item by item. */
static int get_path(struct jrender *r, jv item, jv path, jv *out) {
    if (path.kind == JV_INT) {
        return jr_getitem(r, item, path, out);
    }
    if (path.kind != JV_STR)
        return jr_fail(r, "an attribute must be a string or an integer");
    const char *s = path.u.str.s, *end = s + path.u.str.n;
    jv v = item;
    while (s <= end) {
        const char *dot = memchr(s, '.', (size_t)(end - s));
        const char *e = dot ? dot : end;
        jv key = jv_str(s, (size_t)(e - s));
        int digits = e > s;
        for (const char *q = s; q < e; q++)
            digits &= *q >= '0' && *q <= '9';
        if (digits && e - s < 18)
            key = jv_int(strtoll(s, NULL, 10));
        if (v.kind == JV_UNDEF) {
            *out = v;
            return PI_OK;
        }
        PI_TRY(jr_getitem(r, v, key, &v));
        if (!dot)
            break;
        s = dot + 1;
    }
    *out = v;
    return PI_OK;
}

/* Sort keys as jinja2's ignore_case makes them: strings lower-cased. */
static int sort_key(struct jrender *r, jv v, int case_sensitive, jv *out) {
    if (!case_sensitive && v.kind == JV_STR)
        return jstr_case(r, v, 0, out);
    *out = v;
    return PI_OK;
}

/* A stable merge sort of idx[0..n) by keys[idx], descending when rev. */
static int merge_sort(struct jrender *r, size_t *idx, size_t *tmp, size_t n, const jv *keys,
                      int rev) {
    if (n < 2)
        return PI_OK;
    size_t h = n / 2;
    PI_TRY(merge_sort(r, idx, tmp, h, keys, rev));
    PI_TRY(merge_sort(r, idx + h, tmp, n - h, keys, rev));
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c;
        if (jv_cmp(keys[idx[j]], keys[idx[i]], &c) < 0)
            return jr_fail(r, "'<' not supported between instances of '%s' and '%s'",
                           jv_type_name(keys[idx[j]]), jv_type_name(keys[idx[i]]));
        if (rev)
            c = -c;
        tmp[k++] = c < 0 ? idx[j++] : idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return PI_OK;
}

static int sorted(struct jrender *r, const struct jlist *items, const jv *keys, int rev, jv *out) {
    size_t n = items->n;
    PI_TRY(jr_step(r, n));
    size_t *idx = ja_alloc(jr_arena(r), 2 * (n ? n : 1) * sizeof *idx);
    if (!idx)
        return ja_status(jr_arena(r));
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    PI_TRY(merge_sort(r, idx, idx + n, n, keys, rev));
    struct jlist *l;
    PI_TRY(lib_new_list(r, n, &l));
    for (size_t i = 0; i < n; i++)
        l->v[i] = items->v[idx[i]];
    *out = lib_list(l, 0);
    return PI_OK;
}

/* Keys for sort / unique / min / max: the attribute when given, case folded. */
static int keys_of(struct jrender *r, const struct jlist *items, jv attribute, int case_sensitive,
                   jv **out) {
    jv *keys = ja_alloc(jr_arena(r), (items->n ? items->n : 1) * sizeof *keys);
    if (!keys)
        return ja_status(jr_arena(r));
    for (size_t i = 0; i < items->n; i++) {
        jv v = items->v[i];
        if (attribute.kind != JV_UNDEF && attribute.kind != JV_NONE)
            PI_TRY(get_path(r, v, attribute, &v));
        PI_TRY(sort_key(r, v, case_sensitive, &keys[i]));
    }
    *out = keys;
    return PI_OK;
}

static int float_of_str(jv s, double *out) {
    char tmp[128];
    size_t b = 0, e = s.u.str.n;
    while (b < e && cp_is_space((unsigned char)s.u.str.s[b]))
        b++;
    while (e > b && cp_is_space((unsigned char)s.u.str.s[e - 1]))
        e--;
    size_t m = 0;
    for (size_t i = b; i < e; i++) {
        char c = s.u.str.s[i];
        if (c == '_')
            continue;
        if (m + 1 >= sizeof tmp || !(strchr("0123456789+-.eEinfatyINFATY", c) && c))
            return 0;
        tmp[m++] = c;
    }
    if (m == 0)
        return 0;
    tmp[m] = '\0';
    size_t used;
    double v = jv_strtod(tmp, &used);
    if (used != m)
        return 0;
    if ((tmp[0] == '0' && (tmp[1] == 'x' || tmp[1] == 'X')))
        return 0;
    *out = v;
    return 1;
}

/* Python's int(s, base) for base 10 and 0/2/8/16. */
static int int_of_str(jv s, int base, int64_t *out) {
    size_t b = 0, e = s.u.str.n;
    const char *p = s.u.str.s;
    while (b < e && cp_is_space((unsigned char)p[b]))
        b++;
    while (e > b && cp_is_space((unsigned char)p[e - 1]))
        e--;
    int neg = 0;
    if (b < e && (p[b] == '+' || p[b] == '-'))
        neg = p[b++] == '-';
    if (e - b >= 2 && p[b] == '0' && strchr("xXoObB", p[b + 1]) && p[b + 1]) {
        int pb = p[b + 1] == 'x' || p[b + 1] == 'X'   ? 16
                 : p[b + 1] == 'o' || p[b + 1] == 'O' ? 8
                                                      : 2;
        if (base == 0 || base == pb) {
            base = pb;
            b += 2;
            if (b < e && p[b] == '_')
                b++;
        }
    }
    if (base == 0)
        base = 10;
    if (b >= e)
        return 0;
    uint64_t v = 0;
    int prev_us = 1;
    for (size_t i = b; i < e; i++) {
        char c = p[i];
        if (c == '_') {
            if (prev_us)
                return 0;
            prev_us = 1;
            continue;
        }
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'z' ? c - 'a' + 10
                : c >= 'A' && c <= 'Z' ? c - 'A' + 10
                                       : 99;
        if (d >= base)
            return 0;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return 0;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_us = 0;
    }
    if (prev_us)
        return 0;
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg)
        return 0;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* ---- tests -------------------------------------------------------------------------- */

static int cmp_test(struct jrender *r, int op, jv a, jv b, int *res);

int jlib_test(struct jrender *r, int id, jv in, const struct jargs *args, int *res) {
    jv a0 = lib_arg(args, 0, "value", jv_undef());
    switch (id) {
    case T_BOOLEAN:
        *res = in.kind == JV_BOOL;
        return PI_OK;
    case T_CALLABLE:
        *res = in.kind == JV_FUNC || in.kind == JV_UNDEF || in.kind == JV_LOOP;
        return PI_OK;
    case T_DEFINED:
        *res = in.kind != JV_UNDEF;
        return PI_OK;
    case T_UNDEFINED:
        *res = in.kind == JV_UNDEF;
        return PI_OK;
    case T_NONE:
        *res = in.kind == JV_NONE;
        return PI_OK;
    case T_TRUE:
        *res = in.kind == JV_BOOL && in.u.b;
        return PI_OK;
    case T_FALSE:
        *res = in.kind == JV_BOOL && !in.u.b;
        return PI_OK;
    case T_INTEGER:
        *res = in.kind == JV_INT;
        return PI_OK;
    case T_FLOAT:
        *res = in.kind == JV_FLOAT;
        return PI_OK;
    case T_NUMBER:
        *res = jv_is_num(in);
        return PI_OK;
    case T_STRING:
        *res = in.kind == JV_STR;
        return PI_OK;
    case T_MAPPING:
        *res = in.kind == JV_DICT;
        return PI_OK;
    case T_ITERABLE:
        *res = in.kind == JV_STR || in.kind == JV_LIST || in.kind == JV_DICT ||
               in.kind == JV_UNDEF || in.kind == JV_LOOP;
        return PI_OK;
    case T_SEQUENCE:
        *res = in.kind == JV_STR || (in.kind == JV_LIST && !(in.flags & (JV_GEN | JV_VIEW))) ||
               in.kind == JV_DICT || in.kind == JV_UNDEF;
        return PI_OK;
    case T_ESCAPED:
        *res = in.kind == JV_STR && (in.flags & JV_MARKUP);
        return PI_OK;
    case T_LOWER:
    case T_UPPER: {
        jv s;
        PI_TRY(lib_str(r, in, &s));
        *res = jstr_is_case(s, id == T_UPPER);
        return PI_OK;
    }
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: {
        if (in.kind == JV_UNDEF)
            return jr_undefined_error(r, in);
        jv d = id == T_DIVISIBLEBY ? lib_arg(args, 0, "num", jv_undef()) : jv_int(2);
        if (!jv_is_num(in) || !jv_is_num(d))
            return jr_fail(r, "unsupported operand type(s) for %%: '%s' and '%s'", jv_type_name(in),
                           jv_type_name(d));
        double x = in.kind == JV_FLOAT ? in.u.f : in.kind == JV_INT ? (double)in.u.i : in.u.b;
        double y = d.kind == JV_FLOAT ? d.u.f : d.kind == JV_INT ? (double)d.u.i : d.u.b;
        if (y == 0)
            return jr_fail(r, "integer division or modulo by zero");
        double m;
        if (in.kind != JV_FLOAT && d.kind != JV_FLOAT) {
            int64_t xi = in.kind == JV_INT ? in.u.i : in.u.b, yi = d.kind == JV_INT ? d.u.i : d.u.b;
            int64_t mi = yi == -1 ? 0 : xi % yi;
            if (mi != 0 && ((mi < 0) != (yi < 0)))
                mi += yi;
            m = (double)mi;
        } else {
            m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
        }
        *res = id == T_ODD ? m == 1 : m == 0;
        return PI_OK;
    }
    case T_EQ:
    case T_NE:
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE:
        return cmp_test(r, id, in, lib_arg(args, 0, "other", jv_undef()), res);
    case T_IN: {
        jv seq = lib_arg(args, 0, "seq", jv_undef());
        switch (seq.kind) {
        case JV_STR:
            if (in.kind != JV_STR)
                return jr_fail(r, "'in <string>' requires string as left operand");
            *res = jstr_find(seq.u.str.s, seq.u.str.n, in.u.str.s, in.u.str.n) != NULL;
            return PI_OK;
        case JV_LIST:
            *res = 0;
            for (size_t i = 0; i < seq.u.list->n && !*res; i++)
                *res = jv_eq(seq.u.list->v[i], in);
            return PI_OK;
        case JV_DICT:
            *res = jd_get(seq.u.dict, in) != NULL;
            return PI_OK;
        case JV_UNDEF:
            *res = 0;
            return PI_OK;
        default:
            return jr_fail(r, "argument of type '%s' is not iterable", jv_type_name(seq));
        }
    }
    case T_SAMEAS:
        if (in.kind != a0.kind)
            *res = 0;
        else if (in.kind == JV_NONE || in.kind == JV_UNDEF)
            *res = 1;
        else if (in.kind == JV_BOOL)
            *res = in.u.b == a0.u.b;
        else if (in.kind == JV_INT)
            *res = in.u.i == a0.u.i && in.u.i >= -5 && in.u.i <= 256;
        else if (in.kind == JV_STR)
            *res = in.u.str.s == a0.u.str.s && in.u.str.n == a0.u.str.n;
        else
            *res = in.kind == JV_FLOAT ? 0 : in.u.list == a0.u.list;
        return PI_OK;
    case T_FILTER:
    case T_TEST:
        *res = in.kind == JV_STR && (id == T_FILTER ? jlib_filter_id(in.u.str.s, in.u.str.n)
                                                    : jlib_test_id(in.u.str.s, in.u.str.n)) >= 0;
        return PI_OK;
    default:
        return pi_error_set(jr_arena(r)->err, PI_ERR_INTERNAL, "jinja: test %d", id);
    }
}

static int cmp_test(struct jrender *r, int id, jv a, jv b, int *res) {
    if (id == T_EQ || id == T_NE) {
        *res = jv_eq(a, b) == (id == T_EQ);
        return PI_OK;
    }
    if (a.kind == JV_UNDEF)
        return jr_undefined_error(r, a);
    if (b.kind == JV_UNDEF)
        return jr_undefined_error(r, b);
    int c;
    if (jv_cmp(a, b, &c) < 0)
        return jr_fail(r, "comparison not supported between instances of '%s' and '%s'",
                       jv_type_name(a), jv_type_name(b));
    *res = id == T_LT ? c < 0 : id == T_LE ? c <= 0 : id == T_GT ? c > 0 : c >= 0;
    return PI_OK;
}

/* ---- filters ------------------------------------------------------------------------ */

/* select / reject / selectattr / rejectattr */
static int select_items(struct jrender *r, jv in, const struct jargs *args, int attr, int keep,
                        jv *out) {
    static const struct jlist none = {0, NULL, 0};
    const struct jlist *items = &none;
    if (jv_truthy(in)) /* jinja2 iterates only a true value */
        PI_TRY(jr_iterate(r, in, &items));
    size_t first = attr ? 1 : 0;
    jv path = attr ? lib_arg(args, 0, "attribute", jv_undef()) : jv_undef();
    jv test = args->npos > first ? args->pos[first] : jv_undef();
    int tid = -1;
    if (test.kind == JV_STR) {
        tid = jlib_test_id(test.u.str.s, test.u.str.n);
        if (tid < 0)
            return jr_fail(r, "no test named '%.*s'", (int)test.u.str.n, test.u.str.s);
    } else if (test.kind != JV_UNDEF) {
        return jr_fail(r, "a test name must be a string");
    }
    struct jargs targs = {NULL, 0, NULL, NULL, 0};
    if (args->npos > first + 1) {
        targs.pos = args->pos + first + 1;
        targs.npos = args->npos - first - 1;
    }
    struct jlist *l;
    PI_TRY(lib_new_list(r, items->n, &l));
    size_t k = 0;
    for (size_t i = 0; i < items->n; i++) {
        jv v = items->v[i];
        if (attr)
            PI_TRY(get_path(r, v, path, &v));
        int ok;
        if (tid >= 0)
            PI_TRY(jlib_test(r, tid, v, &targs, &ok));
        else
            ok = jv_truthy(v);
        if (ok == keep)
            l->v[k++] = items->v[i];
    }
    l->n = k;
    *out = lib_gen(l);
    return PI_OK;
}

static int indent(struct jrender *r, jv s, const struct jargs *args, jv *out) {
    jv width = lib_arg(args, 0, "width", jv_int(4));
    int first = jv_truthy(lib_arg(args, 1, "first", jv_bool(0)));
    int blank = jv_truthy(lib_arg(args, 2, "blank", jv_bool(0)));
    struct jbuf ind;
    lib_buf(r, &ind);
    if (width.kind == JV_STR) {
        PI_TRY(jb_put(&ind, width.u.str.s, width.u.str.n));
    } else {
        int64_t w = 0;
        PI_TRY(lib_int(r, width, "indent width", &w));
        if (w > 4096)
            return jr_fail(r, "indent width %lld is too large", (long long)w);
        for (int64_t i = 0; i < w; i++)
            PI_TRY(jb_putc(&ind, ' '));
    }
    jv in = jb_value(&ind);
    /* s + "\n", split into lines as str.splitlines() does */
    struct jbuf t;
    lib_buf(r, &t);
    PI_TRY(jb_put(&t, s.u.str.s, s.u.str.n));
    PI_TRY(jb_putc(&t, '\n'));
    jv lines;
    PI_TRY(jstr_splitlines(r, jb_value(&t), 0, &lines));
    const struct jlist *L = lines.u.list;
    struct jbuf b;
    lib_buf(r, &b);
    if (first)
        PI_TRY(jb_put(&b, in.u.str.s, in.u.str.n));
    for (size_t i = 0; i < L->n; i++) {
        jv line = L->v[i];
        if (i > 0) {
            PI_TRY(jb_putc(&b, '\n'));
            if (blank || line.u.str.n)
                PI_TRY(jb_put(&b, in.u.str.s, in.u.str.n));
        }
        PI_TRY(jb_put(&b, line.u.str.s, line.u.str.n));
    }
    *out = jb_value(&b);
    out->flags = s.flags & JV_MARKUP;
    return PI_OK;
}

/* jinja2's do_title: words start after runs of whitespace, '-', '(', '{', '[', '<'. */
static int title_filter(struct jrender *r, jv s, jv *out) {
    struct jbuf b;
    lib_buf(r, &b);
    int start = 1;
    for (size_t i = 0; i < s.u.str.n;) {
        uint32_t c = u8_next(s.u.str.s, s.u.str.n, &i);
        int sep = cp_is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        if (sep) {
            PI_TRY(jb_put_cp(&b, c));
            start = 1;
        } else if (start) {
            if (c == 0xdf)
                PI_TRY(jb_put(&b, "Ss", 2));
            else
                PI_TRY(jb_put_cp(&b, cp_upper(c)));
            start = 0;
        } else {
            PI_TRY(jb_put_cp(&b, cp_lower(c)));
        }
    }
    *out = jb_value(&b);
    return PI_OK;
}

static int tojson(struct jrender *r, jv in, const struct jargs *args, jv *out) {
    struct json_opts o;
    json_opts_default(&o);
    o.ensure_ascii = jv_truthy(lib_arg(args, 0, "ensure_ascii", jv_bool(0)));
    jv ind = lib_arg(args, 1, "indent", jv_none());
    if (ind.kind == JV_STR) {
        o.pretty = 1;
        o.indent_str = ind;
    } else if (ind.kind == JV_INT || ind.kind == JV_BOOL) {
        o.pretty = 1;
        int64_t w = ind.kind == JV_INT ? ind.u.i : ind.u.b;
        if (w > 1024)
            return jr_fail(r, "tojson indent %lld is too large", (long long)w);
        o.indent = w < 0 ? 0 : (int)w;
    } else if (ind.kind != JV_NONE && ind.kind != JV_UNDEF) {
        return jr_fail(r, "tojson: indent must be an integer, a string or None");
    }
    jv seps = lib_arg(args, 2, "separators", jv_none());
    if (seps.kind == JV_LIST) {
        if (seps.u.list->n != 2 || seps.u.list->v[0].kind != JV_STR ||
            seps.u.list->v[1].kind != JV_STR)
            return jr_fail(r, "tojson: separators must be two strings");
        o.item_sep = seps.u.list->v[0];
        o.key_sep = seps.u.list->v[1];
    }
    o.sort_keys = jv_truthy(lib_arg(args, 3, "sort_keys", jv_bool(0)));
    struct jbuf b;
    lib_buf(r, &b);
    struct pi_error *err = jr_arena(r)->err;
    int st = json_dump(&b, in, &o, err);
    if (st == PI_ERR_TYPE)
        return jr_fail(r, "%s", err->msg);
    PI_TRY(st);
    *out = jb_value(&b);
    return PI_OK;
}

static int round_filter(struct jrender *r, jv in, const struct jargs *args, jv *out) {
    int64_t prec = 0;
    PI_TRY(lib_int(r, lib_arg(args, 0, "precision", jv_int(0)), "precision", &prec));
    jv method = lib_arg(args, 1, "method", jv_cstr("common"));
    if (!jv_str_is(method, "common") && !jv_str_is(method, "ceil") && !jv_str_is(method, "floor"))
        return jr_fail(r, "method must be 'common', 'ceil' or 'floor'");
    if (!jv_is_num(in))
        return jr_fail(r, "type %s doesn't define __round__ method", jv_type_name(in));
    double x = in.kind == JV_FLOAT ? in.u.f : in.kind == JV_INT ? (double)in.u.i : in.u.b;
    if (prec > 300)
        prec = 300;
    if (prec < -300)
        prec = -300;
    if (jv_str_is(method, "common")) {
        if (in.kind != JV_FLOAT && prec >= 0) {
            *out = jv_int(in.kind == JV_INT ? in.u.i : in.u.b);
            return PI_OK;
        }
        if (!isfinite(x)) {
            *out = jv_float(x);
            return PI_OK;
        }
        if (prec >= 0) {
            /* correctly rounded to prec decimals, ties to even, as Python's round() */
            char t[400];
            snprintf(t, sizeof t, "%.*f", (int)prec, x);
            *out = jv_float(strtod(t, NULL));
        } else {
            double p = pow(10.0, (double)-prec);
            *out = jv_float(nearbyint(x / p) * p);
        }
        return PI_OK;
    }
    double p = pow(10.0, (double)prec);
    *out = jv_float((jv_str_is(method, "ceil") ? ceil(x * p) : floor(x * p)) / p);
    return PI_OK;
}

int jlib_filter(struct jrender *r, int id, jv in, const struct jargs *args, jv *out) {
    struct jarena *a = jr_arena(r);
    switch (id) {
    case F_ABS: {
        if (in.kind == JV_INT) {
            if (in.u.i == INT64_MIN)
                return jr_fail(r, "an integer result outside 64 bits");
            *out = jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
        } else if (in.kind == JV_BOOL) {
            *out = jv_int(in.u.b);
        } else if (in.kind == JV_FLOAT) {
            *out = jv_float(fabs(in.u.f));
        } else {
            return jr_fail(r, "bad operand type for abs(): '%s'", jv_type_name(in));
        }
        return PI_OK;
    }
    case F_ATTR: { /* Python's getattr only: no item lookup */
        jv name = lib_arg(args, 0, "name", jv_undef());
        if (in.kind == JV_NS || in.kind == JV_LOOP || in.kind == JV_UNDEF)
            return jr_getattr(r, in, name, out);
        int st = jlib_method(r, in, name, out);
        if (st == 0)
            *out = jv_undef();
        return st < 0 ? st : PI_OK;
    }
    case F_CAPITALIZE: {
        jv s;
        PI_TRY(lib_str(r, in, &s));
        return jstr_capitalize(r, s, out);
    }
    case F_CENTER: {
        jv s;
        int64_t w = 0;
        PI_TRY(lib_str(r, in, &s));
        PI_TRY(lib_int(r, lib_arg(args, 0, "width", jv_int(80)), "width", &w));
        int64_t len = (int64_t)u8_count(s.u.str.s, s.u.str.n);
        if (w <= len || w > 65536) {
            *out = s;
            return PI_OK;
        }
        int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
        struct jbuf b;
        lib_buf(r, &b);
        for (int64_t i = 0; i < left; i++)
            PI_TRY(jb_putc(&b, ' '));
        PI_TRY(jb_put(&b, s.u.str.s, s.u.str.n));
        for (int64_t i = 0; i < pad - left; i++)
            PI_TRY(jb_putc(&b, ' '));
        *out = jb_value(&b);
        return PI_OK;
    }
    case F_DEFAULT: {
        jv def = lib_arg(args, 0, "default_value", jv_str("", 0));
        int boolean = jv_truthy(lib_arg(args, 1, "boolean", jv_bool(0)));
        *out = in.kind == JV_UNDEF || (boolean && !jv_truthy(in)) ? def : in;
        return PI_OK;
    }
    case F_DICTSORT: {
        if (in.kind != JV_DICT)
            return jr_fail(r, "dictsort: '%s' object has no attribute 'items'", jv_type_name(in));
        int cs = jv_truthy(lib_arg(args, 0, "case_sensitive", jv_bool(0)));
        jv by = lib_arg(args, 1, "by", jv_cstr("key"));
        int rev = jv_truthy(lib_arg(args, 2, "reverse", jv_bool(0)));
        int pos = jv_str_is(by, "key") ? 0 : jv_str_is(by, "value") ? 1 : -1;
        if (pos < 0)
            return jr_fail(r, "You can only sort by either \"key\" or \"value\"");
        const struct jdict *d = in.u.dict;
        struct jlist *items;
        PI_TRY(lib_new_list(r, d->n, &items));
        jv *keys = ja_alloc(a, (d->n ? d->n : 1) * sizeof *keys);
        if (!keys)
            return ja_status(a);
        for (size_t i = 0; i < d->n; i++) {
            PI_TRY(lib_pair(r, d->k[i], d->v[i], &items->v[i]));
            PI_TRY(sort_key(r, pos ? d->v[i] : d->k[i], cs, &keys[i]));
        }
        return sorted(r, items, keys, rev, out);
    }
    case F_ESCAPE:
    case F_FORCEESCAPE: {
        if (id == F_ESCAPE && in.kind == JV_STR && (in.flags & JV_MARKUP)) {
            *out = in;
            return PI_OK;
        }
        jv s;
        PI_TRY(lib_str(r, in, &s));
        struct jbuf b;
        lib_buf(r, &b);
        PI_TRY(put_escaped(&b, s));
        *out = jb_value(&b);
        out->flags = JV_MARKUP;
        return PI_OK;
    }
    case F_FIRST:
    case F_LAST: {
        if (id == F_LAST && in.kind == JV_LIST && (in.flags & JV_GEN))
            return jr_fail(r, "'generator' object is not reversible");
        const struct jlist *items;
        PI_TRY(jr_iterate(r, in, &items));
        if (items->n == 0)
            *out = jv_undef();
        else
            *out = items->v[id == F_FIRST ? 0 : items->n - 1];
        return PI_OK;
    }
    case F_FLOAT: {
        jv def = lib_arg(args, 0, "default", jv_float(0.0));
        double f;
        if (in.kind == JV_FLOAT)
            *out = in;
        else if (in.kind == JV_INT)
            *out = jv_float((double)in.u.i);
        else if (in.kind == JV_BOOL)
            *out = jv_float(in.u.b);
        else if (in.kind == JV_STR && float_of_str(in, &f))
            *out = jv_float(f);
        else
            *out = def;
        return PI_OK;
    }
    case F_INDENT: {
        jv s;
        PI_TRY(lib_str(r, in, &s));
        return indent(r, s, args, out);
    }
    case F_INT: {
        jv def = lib_arg(args, 0, "default", jv_int(0));
        int64_t base = 10, v;
        PI_TRY(lib_int(r, lib_arg(args, 1, "base", jv_int(10)), "base", &base));
        double f;
        if (in.kind == JV_INT)
            *out = in;
        else if (in.kind == JV_BOOL)
            *out = jv_int(in.u.b);
        else if (in.kind == JV_FLOAT && isfinite(in.u.f) && fabs(in.u.f) < 9.2e18)
            *out = jv_int((int64_t)in.u.f);
        else if (in.kind == JV_STR && int_of_str(in, (int)base, &v))
            *out = jv_int(v);
        else if (in.kind == JV_STR && float_of_str(in, &f) && isfinite(f) && fabs(f) < 9.2e18)
            *out = jv_int((int64_t)f);
        else
            *out = def;
        return PI_OK;
    }
    case F_ITEMS: {
        if (in.kind == JV_UNDEF) {
            struct jlist *l;
            PI_TRY(lib_new_list(r, 0, &l));
            *out = lib_gen(l);
            return PI_OK;
        }
        if (in.kind != JV_DICT)
            return jr_fail(r, "Can only get item pairs from a mapping.");
        struct jlist *l;
        PI_TRY(lib_new_list(r, in.u.dict->n, &l));
        for (size_t i = 0; i < in.u.dict->n; i++)
            PI_TRY(lib_pair(r, in.u.dict->k[i], in.u.dict->v[i], &l->v[i]));
        *out = lib_gen(l);
        return PI_OK;
    }
    case F_JOIN: {
        jv sep = lib_arg(args, 0, "d", jv_str("", 0));
        jv attribute = lib_arg(args, 1, "attribute", jv_none());
        const struct jlist *items;
        PI_TRY(jr_iterate(r, in, &items));
        struct jbuf b;
        lib_buf(r, &b);
        for (size_t i = 0; i < items->n; i++) {
            if (i)
                PI_TRY(jv_put_str(&b, sep));
            jv v = items->v[i];
            if (attribute.kind != JV_NONE)
                PI_TRY(get_path(r, v, attribute, &v));
            PI_TRY(jv_put_str(&b, v));
        }
        *out = jb_value(&b);
        return PI_OK;
    }
    case F_LENGTH: {
        int64_t n = in.kind == JV_UNDEF ? 0 : jv_len(in);
        if (n < 0)
            return jr_fail(r, "object of type '%s' has no len()", jv_type_name(in));
        *out = jv_int(n);
        return PI_OK;
    }
    case F_LIST: {
        const struct jlist *items;
        PI_TRY(jr_iterate(r, in, &items));
        struct jlist *l;
        PI_TRY(lib_new_list(r, items->n, &l));
        if (items->n)
            memcpy(l->v, items->v, items->n * sizeof(jv));
        *out = lib_list(l, 0);
        return PI_OK;
    }
    case F_LOWER:
    case F_UPPER: {
        jv s;
        PI_TRY(lib_str(r, in, &s));
        PI_TRY(jstr_case(r, s, id == F_UPPER, out));
        out->flags = s.flags & JV_MARKUP;
        return PI_OK;
    }
    case F_MAP: {
        static const struct jlist none = {0, NULL, 0};
        const struct jlist *items = &none;
        if (jv_truthy(in))
            PI_TRY(jr_iterate(r, in, &items));
        struct jlist *l;
        PI_TRY(lib_new_list(r, items->n, &l));
        jv attribute = lib_arg(args, (size_t)-1, "attribute", jv_undef());
        if (attribute.kind != JV_UNDEF) {
            jv def = lib_arg(args, (size_t)-1, "default", jv_undef());
            for (size_t i = 0; i < items->n; i++) {
                PI_TRY(get_path(r, items->v[i], attribute, &l->v[i]));
                if (l->v[i].kind == JV_UNDEF && def.kind != JV_UNDEF)
                    l->v[i] = def;
            }
        } else {
            if (args->npos == 0 || args->pos[0].kind != JV_STR)
                return jr_fail(r, "map requires a filter argument");
            jv name = args->pos[0];
            int fid = jlib_filter_id(name.u.str.s, name.u.str.n);
            if (fid < 0)
                return jr_fail(r, "no filter named '%.*s'", (int)name.u.str.n, name.u.str.s);
            struct jargs rest = {args->pos + 1, args->npos - 1, args->kwn, args->kwv, args->nkw};
            for (size_t i = 0; i < items->n; i++)
                PI_TRY(jlib_filter(r, fid, items->v[i], &rest, &l->v[i]));
        }
        *out = lib_gen(l);
        return PI_OK;
    }
    case F_MAX:
    case F_MIN: {
        const struct jlist *items;
        PI_TRY(jr_iterate(r, in, &items));
        int cs = jv_truthy(lib_arg(args, 0, "case_sensitive", jv_bool(0)));
        jv *keys;
        PI_TRY(keys_of(r, items, lib_arg(args, 1, "attribute", jv_none()), cs, &keys));
        if (items->n == 0) {
            *out = jv_undef();
            return PI_OK;
        }
        size_t best = 0;
        for (size_t i = 1; i < items->n; i++) {
            int c;
            if (jv_cmp(keys[i], keys[best], &c) < 0)
                return jr_fail(r, "'<' not supported between instances of '%s' and '%s'",
                               jv_type_name(keys[i]), jv_type_name(keys[best]));
            if (id == F_MAX ? c > 0 : c < 0)
                best = i;
        }
        *out = items->v[best];
        return PI_OK;
    }
    case F_REJECT:
    case F_SELECT:
        return select_items(r, in, args, 0, id == F_SELECT, out);
    case F_REJECTATTR:
    case F_SELECTATTR:
        return select_items(r, in, args, 1, id == F_SELECTATTR, out);
    case F_REPLACE: {
        jv s, old, rep;
        PI_TRY(lib_str(r, in, &s));
        PI_TRY(lib_str(r, lib_arg(args, 0, "old", jv_undef()), &old));
        PI_TRY(lib_str(r, lib_arg(args, 1, "new", jv_undef()), &rep));
        jv cnt = lib_arg(args, 2, "count", jv_none());
        int64_t count = -1;
        if (cnt.kind != JV_NONE)
            PI_TRY(lib_int(r, cnt, "count", &count));
        return jstr_replace(r, s, old, rep, count, out);
    }
    case F_REVERSE: {
        if (in.kind == JV_STR) {
            struct jbuf b;
            lib_buf(r, &b);
            size_t e = in.u.str.n;
            while (e > 0) {
                size_t k = e - 1;
                while (k > 0 && ((unsigned char)in.u.str.s[k] & 0xc0) == 0x80)
                    k--;
                PI_TRY(jb_put(&b, in.u.str.s + k, e - k));
                e = k;
            }
            *out = jb_value(&b);
            return PI_OK;
        }
        const struct jlist *items;
        PI_TRY(jr_iterate(r, in, &items));
        struct jlist *l;
        PI_TRY(lib_new_list(r, items->n, &l));
        for (size_t i = 0; i < items->n; i++)
            l->v[i] = items->v[items->n - 1 - i];
        *out = lib_gen(l);
        return PI_OK;
    }
    case F_ROUND:
        return round_filter(r, in, args, out);
    case F_SAFE: {
        PI_TRY(lib_str(r, in, out));
        out->flags |= JV_MARKUP;
        return PI_OK;
    }
    case F_SORT: {
        const struct jlist *items;
        PI_TRY(jr_iterate(r, in, &items));
        int rev = jv_truthy(lib_arg(args, 0, "reverse", jv_bool(0)));
        int cs = jv_truthy(lib_arg(args, 1, "case_sensitive", jv_bool(0)));
        jv *keys;
        PI_TRY(keys_of(r, items, lib_arg(args, 2, "attribute", jv_none()), cs, &keys));
        return sorted(r, items, keys, rev, out);
    }
    case F_STRING:
        return lib_str(r, in, out);
    case F_SUM: {
        const struct jlist *items;
        PI_TRY(jr_iterate(r, in, &items));
        jv attribute = lib_arg(args, 0, "attribute", jv_none());
        jv acc = lib_arg(args, 1, "start", jv_int(0));
        for (size_t i = 0; i < items->n; i++) {
            jv v = items->v[i];
            if (attribute.kind != JV_NONE)
                PI_TRY(get_path(r, v, attribute, &v));
            if (!jv_is_num(acc) || !jv_is_num(v))
                return jr_fail(r, "unsupported operand type(s) for +: '%s' and '%s'",
                               jv_type_name(acc), jv_type_name(v));
            if (acc.kind == JV_FLOAT || v.kind == JV_FLOAT) {
                double x = acc.kind == JV_FLOAT ? acc.u.f
                           : acc.kind == JV_INT ? (double)acc.u.i
                                                : acc.u.b;
                double y = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b;
                acc = jv_float(x + y);
            } else {
                int64_t x = acc.kind == JV_INT ? acc.u.i : acc.u.b;
                int64_t y = v.kind == JV_INT ? v.u.i : v.u.b;
                if ((y > 0 && x > INT64_MAX - y) || (y < 0 && x < INT64_MIN - y))
                    return jr_fail(r, "an integer result outside 64 bits");
                acc = jv_int(x + y);
            }
        }
        *out = acc;
        return PI_OK;
    }
    case F_TITLE: {
        jv s;
        PI_TRY(lib_str(r, in, &s));
        return title_filter(r, s, out);
    }
    case F_TOJSON:
        return tojson(r, in, args, out);
    case F_TRIM: {
        jv s;
        PI_TRY(lib_str(r, in, &s));
        return jstr_strip(r, s, lib_arg(args, 0, "chars", jv_none()), 1, 1, out);
    }
    case F_UNIQUE: {
        const struct jlist *items;
        PI_TRY(jr_iterate(r, in, &items));
        int cs = jv_truthy(lib_arg(args, 0, "case_sensitive", jv_bool(0)));
        jv *keys;
        PI_TRY(keys_of(r, items, lib_arg(args, 1, "attribute", jv_none()), cs, &keys));
        struct jlist *l;
        PI_TRY(lib_new_list(r, items->n, &l));
        size_t k = 0;
        PI_TRY(jr_step(r, (uint64_t)items->n * items->n / 16));
        for (size_t i = 0; i < items->n; i++) {
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++)
                seen = jv_eq(keys[i], keys[j]);
            if (!seen)
                l->v[k++] = items->v[i];
        }
        l->n = k;
        *out = lib_gen(l);
        return PI_OK;
    }
    case F_WORDCOUNT: {
        jv s;
        PI_TRY(lib_str(r, in, &s));
        int64_t n = 0;
        int inword = 0;
        for (size_t i = 0; i < s.u.str.n;) {
            int w = cp_is_word(u8_next(s.u.str.s, s.u.str.n, &i));
            n += w && !inword;
            inword = w;
        }
        *out = jv_int(n);
        return PI_OK;
    }
    default:
        return pi_error_set(a->err, PI_ERR_INTERNAL, "jinja: filter %d", id);
    }
}

/* ---- global functions --------------------------------------------------------------- */

/* Members for dict(...) and namespace(...): a mapping or pairs, then keywords. */
static int members(struct jrender *r, const struct jargs *args, int check_names, struct jdict *d) {
    struct jarena *a = jr_arena(r);
    if (args->npos > 1)
        return jr_fail(r, "expected at most 1 argument, got %zu", args->npos);
    if (args->npos == 1) {
        jv src = args->pos[0];
        if (src.kind == JV_DICT || src.kind == JV_NS) {
            for (size_t i = 0; i < src.u.dict->n; i++)
                PI_TRY(jd_set(a, d, src.u.dict->k[i], src.u.dict->v[i]));
        } else {
            const struct jlist *items;
            PI_TRY(jr_iterate(r, src, &items));
            for (size_t i = 0; i < items->n; i++) {
                jv p = items->v[i];
                if (p.kind != JV_LIST || p.u.list->n != 2)
                    return jr_fail(r,
                                   "dictionary update sequence element #%zu has the wrong "
                                   "length",
                                   i);
                PI_TRY(jd_set(a, d, p.u.list->v[0], p.u.list->v[1]));
            }
        }
    }
    for (size_t k = 0; k < args->nkw; k++)
        PI_TRY(jd_set(a, d, args->kwn[k], args->kwv[k]));
    if (check_names)
        for (size_t i = 0; i < d->n; i++)
            if (d->k[i].kind == JV_STR && d->k[i].u.str.n && d->k[i].u.str.s[0] == '_')
                return jr_fail(r,
                               "Chat templates cannot store underscore-prefixed attributes "
                               "on a namespace, but got '%.*s'",
                               (int)d->k[i].u.str.n, d->k[i].u.str.s);
    return PI_OK;
}

static int range(struct jrender *r, const struct jargs *args, jv *out) {
    int64_t start = 0, stop, step = 1;
    if (args->npos < 1 || args->npos > 3 || args->nkw)
        return jr_fail(r, "range expected 1 to 3 integer arguments");
    int64_t v[3];
    for (size_t i = 0; i < args->npos; i++)
        PI_TRY(lib_int(r, args->pos[i], "a range argument", &v[i]));
    if (args->npos == 1) {
        stop = v[0];
    } else {
        start = v[0];
        stop = v[1];
        if (args->npos == 3)
            step = v[2];
    }
    if (step == 0)
        return jr_fail(r, "range() arg 3 must not be zero");
    double count = step > 0
                       ? (stop > start ? ceil(((double)stop - (double)start) / (double)step) : 0)
                       : (start > stop ? ceil(((double)start - (double)stop) / (double)-step) : 0);
    if (count > 100000)
        return jr_fail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE "
                          "(100000).");
    struct jlist *l;
    PI_TRY(lib_new_list(r, (size_t)count, &l));
    for (size_t i = 0; i < l->n; i++)
        l->v[i] = jv_int(start + (int64_t)i * step);
    *out = lib_list(l, 0);
    return PI_OK;
}

/* UTC calendar fields of t without the C library's time zone state (days to civil date:
 * the proleptic Gregorian calendar in 400-year eras). */
static void utc_tm(int64_t t, struct tm *tm) {
    int64_t days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
    int64_t secs = t - days * 86400;
    memset(tm, 0, sizeof *tm);
    tm->tm_hour = (int)(secs / 3600);
    tm->tm_min = (int)(secs / 60 % 60);
    tm->tm_sec = (int)(secs % 60);
    tm->tm_wday = (int)(((days % 7) + 11) % 7); /* 1970-01-01 was a Thursday */
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400, doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    y += m <= 2;
    tm->tm_year = (int)(y - 1900);
    tm->tm_mon = (int)(m - 1);
    tm->tm_mday = (int)d;
    static const int before[12] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    tm->tm_yday = before[m - 1] + (int)d - 1 + (leap && m > 2);
}

/* strftime in the C locale (what Python prints with the default locale), without the
 * C library's locale and time zone state: %a %A %b %B %c %d %e %H %I %j %m %M %p %S %u
 * %w %y %Y %F %T %D %R %Z (UTC) %z (+0000) %%; any other directive stays as written. */
static int put_strftime(struct jbuf *b, jv fmt, const struct tm *tm) {
    static const char *const days[7] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                        "Thursday", "Friday", "Saturday"};
    static const char *const months[12] = {"January",   "February", "March",    "April",
                                           "May",       "June",     "July",     "August",
                                           "September", "October",  "November", "December"};
    const char *s = fmt.u.str.s;
    size_t n = fmt.u.str.n;
    char t[64];
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%' || i + 1 >= n) {
            PI_TRY(jb_putc(b, s[i]));
            continue;
        }
        char c = s[++i];
        int hour12 = tm->tm_hour % 12 ? tm->tm_hour % 12 : 12;
        t[0] = '\0';
        switch (c) {
        case 'a':
            snprintf(t, sizeof t, "%.3s", days[tm->tm_wday]);
            break;
        case 'A':
            snprintf(t, sizeof t, "%s", days[tm->tm_wday]);
            break;
        case 'b':
        case 'h':
            snprintf(t, sizeof t, "%.3s", months[tm->tm_mon]);
            break;
        case 'B':
            snprintf(t, sizeof t, "%s", months[tm->tm_mon]);
            break;
        case 'c':
            snprintf(t, sizeof t, "%.3s %.3s %2d %02d:%02d:%02d %d", days[tm->tm_wday],
                     months[tm->tm_mon], tm->tm_mday, tm->tm_hour, tm->tm_min, tm->tm_sec,
                     tm->tm_year + 1900);
            break;
        case 'd':
            snprintf(t, sizeof t, "%02d", tm->tm_mday);
            break;
        case 'e':
            snprintf(t, sizeof t, "%2d", tm->tm_mday);
            break;
        case 'H':
            snprintf(t, sizeof t, "%02d", tm->tm_hour);
            break;
        case 'I':
            snprintf(t, sizeof t, "%02d", hour12);
            break;
        case 'j':
            snprintf(t, sizeof t, "%03d", tm->tm_yday + 1);
            break;
        case 'm':
            snprintf(t, sizeof t, "%02d", tm->tm_mon + 1);
            break;
        case 'M':
            snprintf(t, sizeof t, "%02d", tm->tm_min);
            break;
        case 'p':
            snprintf(t, sizeof t, "%s", tm->tm_hour < 12 ? "AM" : "PM");
            break;
        case 'S':
            snprintf(t, sizeof t, "%02d", tm->tm_sec);
            break;
        case 'u':
            snprintf(t, sizeof t, "%d", tm->tm_wday ? tm->tm_wday : 7);
            break;
        case 'w':
            snprintf(t, sizeof t, "%d", tm->tm_wday);
            break;
        case 'y':
            snprintf(t, sizeof t, "%02d", (tm->tm_year + 1900) % 100);
            break;
        case 'Y':
            snprintf(t, sizeof t, "%d", tm->tm_year + 1900);
            break;
        case 'F':
            snprintf(t, sizeof t, "%d-%02d-%02d", tm->tm_year + 1900, tm->tm_mon + 1, tm->tm_mday);
            break;
        case 'T':
            snprintf(t, sizeof t, "%02d:%02d:%02d", tm->tm_hour, tm->tm_min, tm->tm_sec);
            break;
        case 'R':
            snprintf(t, sizeof t, "%02d:%02d", tm->tm_hour, tm->tm_min);
            break;
        case 'D':
            snprintf(t, sizeof t, "%02d/%02d/%02d", tm->tm_mon + 1, tm->tm_mday,
                     (tm->tm_year + 1900) % 100);
            break;
        case 'Z':
            snprintf(t, sizeof t, "UTC");
            break;
        case 'z':
            snprintf(t, sizeof t, "+0000");
            break;
        case '%':
            snprintf(t, sizeof t, "%%");
            break;
        default:
            t[0] = '%';
            t[1] = c;
            t[2] = '\0';
        }
        PI_TRY(jb_puts(b, t));
    }
    return PI_OK;
}

static int strftime_now(struct jrender *r, const struct jargs *args, jv *out) {
    jv fmt = lib_arg(args, 0, "format", jv_undef());
    if (fmt.kind != JV_STR)
        return jr_fail(r, "strftime_now() argument must be str, not %s", jv_type_name(fmt));
    if (jr_now(r) > (int64_t)1 << 40)
        return jr_fail(r, "strftime_now: the time is out of range");
    struct tm tm;
    utc_tm(jr_now(r), &tm);
    struct jbuf b;
    lib_buf(r, &b);
    PI_TRY(put_strftime(&b, fmt, &tm));
    *out = jb_value(&b);
    return PI_OK;
}

int jlib_call_global(struct jrender *r, int id, const struct jargs *args, jv *out) {
    switch (id) {
    case G_DICT:
    case G_NAMESPACE: {
        struct jdict *d = jd_new(jr_arena(r), 0);
        if (!d)
            return ja_status(jr_arena(r));
        PI_TRY(members(r, args, id == G_NAMESPACE, d));
        out->kind = id == G_DICT ? JV_DICT : JV_NS;
        out->flags = 0;
        out->u.dict = d;
        return PI_OK;
    }
    case G_RAISE:
        return jr_raise(r, lib_arg(args, 0, "message", jv_str("", 0)));
    case G_RANGE:
        return range(r, args, out);
    default:
        return strftime_now(r, args, out);
    }
}
