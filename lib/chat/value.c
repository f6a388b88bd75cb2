/* value.c -- arena, text buffers and Python's value semantics for chat templates. */
#include "chat/value.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena -------------------------------------------------------------------------- */

struct jchunk {
    struct jchunk *next;
    size_t size, used;
    /* data follows, aligned as max_align_t */
};

#define JA_ALIGN 16
#define JA_HEAD  ((sizeof(struct jchunk) + JA_ALIGN - 1) / JA_ALIGN * JA_ALIGN)
#define JA_CHUNK ((size_t)64 << 10)

void ja_init(struct jarena *a, const struct pi_allocator *al, size_t limit, struct pi_error *err) {
    a->al = al;
    a->err = err;
    a->head = NULL;
    a->used = 0;
    a->limit = limit;
}

int ja_status(const struct jarena *a) {
    return a->err && a->err->status == PI_ERR_RANGE ? PI_ERR_RANGE : PI_ERR_NOMEM;
}

void *ja_alloc(struct jarena *a, size_t n) {
    if (n > a->limit) {
        pi_error_set(a->err, PI_ERR_RANGE, "the template needs more than %zu bytes of memory",
                     a->limit);
        return NULL;
    }
    n = (n + JA_ALIGN - 1) / JA_ALIGN * JA_ALIGN;
    struct jchunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > JA_CHUNK / 2 ? n : JA_CHUNK;
        if (a->used + size + JA_HEAD > a->limit) {
            pi_error_set(a->err, PI_ERR_RANGE, "the template needs more than %zu bytes of memory",
                         a->limit);
            return NULL;
        }
        struct jchunk *nc = pi_malloc(a->al, JA_HEAD + size);
        if (!nc) {
            pi_error_set(a->err, PI_ERR_NOMEM, "out of memory rendering the template");
            return NULL;
        }
        nc->size = size;
        nc->used = 0;
        a->used += JA_HEAD + size;
        if (c && size == n && c->size - c->used >= JA_CHUNK / 8) {
            /* a big block of its own: keep filling the current chunk */
            nc->next = c->next;
            c->next = nc;
            nc->used = n;
            return (char *)nc + JA_HEAD;
        }
        nc->next = c;
        a->head = c = nc;
    }
    void *p = (char *)c + JA_HEAD + c->used;
    c->used += n;
    return p;
}

void ja_free(struct jarena *a) {
    struct jchunk *c = a->head;
    while (c) {
        struct jchunk *next = c->next;
        pi_free(a->al, c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- values ------------------------------------------------------------------------- */

jv jv_cstr(const char *s) {
    return jv_str(s, strlen(s));
}

int jv_str_is(jv v, const char *s) {
    size_t n = strlen(s);
    return v.kind == JV_STR && v.u.str.n == n && memcmp(v.u.str.s, s, n) == 0;
}

struct jlist *jl_new(struct jarena *a, size_t n, const jv *items) {
    if (n > ((size_t)-1 - sizeof(struct jlist)) / sizeof(jv)) {
        pi_error_set(a->err, PI_ERR_RANGE, "a list of %zu items is too long", n);
        return NULL;
    }
    struct jlist *l = ja_alloc(a, sizeof *l + n * sizeof(jv));
    if (!l)
        return NULL;
    l->n = n;
    l->v = (jv *)(l + 1);
    l->consumed = 0;
    if (items && n)
        memcpy(l->v, items, n * sizeof(jv));
    return l;
}

int jv_strdup(struct jarena *a, const char *s, size_t n, jv *out) {
    char *p = ja_alloc(a, n + 1);
    if (!p)
        return ja_status(a);
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    *out = jv_str(p, n);
    return PI_OK;
}

struct jdict *jd_new(struct jarena *a, size_t cap) {
    struct jdict *d = ja_alloc(a, sizeof *d);
    if (!d)
        return NULL;
    d->n = 0;
    d->cap = cap;
    d->k = d->v = NULL;
    if (cap) {
        if (cap > ((size_t)-1) / (2 * sizeof(jv)))
            return NULL;
        d->k = ja_alloc(a, 2 * cap * sizeof(jv));
        if (!d->k)
            return NULL;
        d->v = d->k + cap;
    }
    return d;
}

jv *jd_get_str(const struct jdict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].kind == JV_STR && d->k[i].u.str.n == n && memcmp(d->k[i].u.str.s, key, n) == 0)
            return &d->v[i];
    return NULL;
}

jv *jd_get(const struct jdict *d, jv key) {
    if (key.kind == JV_STR)
        return jd_get_str(d, key.u.str.s, key.u.str.n);
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], key))
            return &d->v[i];
    return NULL;
}

int jd_set(struct jarena *a, struct jdict *d, jv key, jv val) {
    jv *slot = jd_get(d, key);
    if (slot) {
        *slot = val;
        return PI_OK;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        jv *k = ja_alloc(a, 2 * cap * sizeof(jv));
        if (!k)
            return ja_status(a);
        if (d->n) {
            memcpy(k, d->k, d->n * sizeof(jv));
            memcpy(k + cap, d->v, d->n * sizeof(jv));
        }
        d->k = k;
        d->v = k + cap;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
    return PI_OK;
}

int jv_truthy(jv v) {
    switch (v.kind) {
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0.0;
    case JV_STR:
        return v.u.str.n != 0;
    case JV_LIST:
        return (v.flags & JV_GEN) || v.u.list->n != 0;
    case JV_DICT:
        return v.u.dict->n != 0;
    case JV_NS:
    case JV_LOOP:
    case JV_FUNC:
        return 1;
    default:
        return 0;
    }
}

#define EQ_DEPTH 64

static int eq_depth(jv a, jv b, int depth) {
    if (depth > EQ_DEPTH)
        return 0;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.kind == JV_FLOAT || b.kind == JV_FLOAT) {
            double x = a.kind == JV_FLOAT ? a.u.f : a.kind == JV_INT ? (double)a.u.i : a.u.b;
            double y = b.kind == JV_FLOAT ? b.u.f : b.kind == JV_INT ? (double)b.u.i : b.u.b;
            return x == y;
        }
        int64_t x = a.kind == JV_INT ? a.u.i : a.u.b, y = b.kind == JV_INT ? b.u.i : b.u.b;
        return x == y;
    }
    if (a.kind != b.kind)
        return 0;
    switch (a.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return 1;
    case JV_STR:
        return a.u.str.n == b.u.str.n && memcmp(a.u.str.s, b.u.str.s, a.u.str.n) == 0;
    case JV_LIST:
        if ((a.flags | b.flags) & JV_GEN)
            return a.u.list == b.u.list;
        if ((a.flags & (JV_TUPLE | JV_VIEW)) != (b.flags & (JV_TUPLE | JV_VIEW)) ||
            a.u.list->n != b.u.list->n)
            return 0;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (!eq_depth(a.u.list->v[i], b.u.list->v[i], depth + 1))
                return 0;
        return 1;
    case JV_DICT:
        if (a.u.dict->n != b.u.dict->n)
            return 0;
        for (size_t i = 0; i < a.u.dict->n; i++) {
            jv *o = jd_get(b.u.dict, a.u.dict->k[i]);
            if (!o || !eq_depth(a.u.dict->v[i], *o, depth + 1))
                return 0;
        }
        return 1;
    case JV_NS:
        return a.u.dict == b.u.dict;
    case JV_LOOP:
        return a.u.loop == b.u.loop;
    case JV_FUNC:
        return a.u.fn == b.u.fn;
    default:
        return 0;
    }
}

int jv_eq(jv a, jv b) {
    return eq_depth(a, b, 0);
}

static int cmp_depth(jv a, jv b, int *res, int depth) {
    if (depth > EQ_DEPTH)
        return PI_ERR_TYPE;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.kind == JV_FLOAT || b.kind == JV_FLOAT) {
            double x = a.kind == JV_FLOAT ? a.u.f : a.kind == JV_INT ? (double)a.u.i : a.u.b;
            double y = b.kind == JV_FLOAT ? b.u.f : b.kind == JV_INT ? (double)b.u.i : b.u.b;
            *res = x < y ? -1 : x > y ? 1 : 0; /* NaN compares as equal: all false */
            return PI_OK;
        }
        int64_t x = a.kind == JV_INT ? a.u.i : a.u.b, y = b.kind == JV_INT ? b.u.i : b.u.b;
        *res = x < y ? -1 : x > y;
        return PI_OK;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        /* UTF-8 byte order is code point order */
        size_t n = a.u.str.n < b.u.str.n ? a.u.str.n : b.u.str.n;
        int c = n ? memcmp(a.u.str.s, b.u.str.s, n) : 0;
        *res = c ? c : a.u.str.n < b.u.str.n ? -1 : a.u.str.n > b.u.str.n;
        return PI_OK;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && a.flags == b.flags &&
        !(a.flags & (JV_GEN | JV_VIEW))) {
        size_t n = a.u.list->n < b.u.list->n ? a.u.list->n : b.u.list->n;
        for (size_t i = 0; i < n; i++) {
            if (eq_depth(a.u.list->v[i], b.u.list->v[i], depth + 1))
                continue;
            return cmp_depth(a.u.list->v[i], b.u.list->v[i], res, depth + 1);
        }
        *res = a.u.list->n < b.u.list->n ? -1 : a.u.list->n > b.u.list->n;
        return PI_OK;
    }
    return PI_ERR_TYPE;
}

int jv_cmp(jv a, jv b, int *res) {
    return cmp_depth(a, b, res, 0);
}

const char *jv_type_name(jv v) {
    switch (v.kind) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return v.flags & JV_MARKUP ? "Markup" : "str";
    case JV_LIST:
        if (v.flags & JV_GEN)
            return "generator";
        switch (v.flags & JV_VIEW) {
        case JV_VIEW_ITEMS:
            return "dict_items";
        case JV_VIEW_KEYS:
            return "dict_keys";
        case JV_VIEW_VALUES:
            return "dict_values";
        }
        return v.flags & JV_TUPLE ? "tuple" : "list";
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_LOOP:
        return "LoopContext";
    default:
        return "function";
    }
}

int64_t jv_len(jv v) {
    switch (v.kind) {
    case JV_STR:
        return (int64_t)u8_count(v.u.str.s, v.u.str.n);
    case JV_LIST:
        return v.flags & JV_GEN ? -1 : (int64_t)v.u.list->n;
    case JV_DICT:
        return (int64_t)v.u.dict->n;
    default:
        return -1;
    }
}

/* ---- text building ------------------------------------------------------------------ */

void jb_init(struct jbuf *b, struct jarena *a, size_t limit) {
    b->a = a;
    b->p = NULL;
    b->n = b->cap = 0;
    b->limit = limit;
}

int jb_put(struct jbuf *b, const char *s, size_t n) {
    if (n == 0)
        return PI_OK;
    if (n > b->limit - b->n)
        return pi_error_set(b->a->err, PI_ERR_RANGE, "a text of more than %zu bytes", b->limit);
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap = cap > b->limit / 2 ? b->limit : 2 * cap;
        char *p = ja_alloc(b->a, cap);
        if (!p)
            return ja_status(b->a);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return PI_OK;
}

int jb_putc(struct jbuf *b, char c) {
    return jb_put(b, &c, 1);
}

int jb_puts(struct jbuf *b, const char *s) {
    return jb_put(b, s, strlen(s));
}

int jb_put_cp(struct jbuf *b, uint32_t c) {
    char t[4];
    size_t n;
    if (c < 0x80) {
        t[0] = (char)c;
        n = 1;
    } else if (c < 0x800) {
        t[0] = (char)(0xc0 | c >> 6);
        t[1] = (char)(0x80 | (c & 0x3f));
        n = 2;
    } else if (c < 0x10000) {
        t[0] = (char)(0xe0 | c >> 12);
        t[1] = (char)(0x80 | (c >> 6 & 0x3f));
        t[2] = (char)(0x80 | (c & 0x3f));
        n = 3;
    } else {
        t[0] = (char)(0xf0 | c >> 18);
        t[1] = (char)(0x80 | (c >> 12 & 0x3f));
        t[2] = (char)(0x80 | (c >> 6 & 0x3f));
        t[3] = (char)(0x80 | (c & 0x3f));
        n = 4;
    }
    return jb_put(b, t, n);
}

jv jb_value(struct jbuf *b) {
    jv v = jv_str(b->p ? b->p : "", b->n);
    /* later puts must not write into the bytes this value shows */
    b->cap = b->n;
    return v;
}

void jv_format_float(double f, char *buf) {
    if (isnan(f)) {
        strcpy(buf, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(buf, f < 0 ? "-inf" : "inf");
        return;
    }
    /* the shortest %.*e that reads back exactly */
    char e[40];
    int p;
    for (p = 0; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e: [-]d[.ddd]e[+-]xx */
    const char *s = e;
    int neg = *s == '-';
    if (neg)
        s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9')
            digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *o = buf;
    if (neg)
        *o++ = '-';
    if (exp < -4 || exp >= 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        return;
    }
    if (exp < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -exp - 1; i++)
            *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else {
        for (int i = 0; i <= exp; i++)
            *o++ = i < nd ? digits[i] : '0';
        *o++ = '.';
        if (nd > exp + 1) {
            memcpy(o, digits + exp + 1, (size_t)(nd - exp - 1));
            o += nd - exp - 1;
        } else {
            *o++ = '0';
        }
    }
    *o = '\0';
}

/* Python's str.isprintable() for one code point, roughly (no Unicode tables): control
 * characters, the C1 range, separators other than the space, format characters and
 * noncharacters are not. */
static int cp_printable(uint32_t c) {
    if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad)
        return 0;
    if ((c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
        (c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff || c == 0x1680 ||
        (c >= 0xfff9 && c <= 0xfffb) || (c >= 0xd800 && c <= 0xdfff) ||
        (c >= 0xe000 && c <= 0xf8ff) || c >= 0xf0000 || (c & 0xfffe) == 0xfffe)
        return 0;
    return 1;
}

static int put_str_repr(struct jbuf *b, const char *s, size_t n) {
    int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    PI_TRY(jb_putc(b, q));
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t c = u8_next(s, n, &i);
        char t[12];
        if (c == (uint32_t)q || c == '\\') {
            t[0] = '\\';
            t[1] = (char)c;
            PI_TRY(jb_put(b, t, 2));
        } else if (c == '\n') {
            PI_TRY(jb_put(b, "\\n", 2));
        } else if (c == '\r') {
            PI_TRY(jb_put(b, "\\r", 2));
        } else if (c == '\t') {
            PI_TRY(jb_put(b, "\\t", 2));
        } else if (cp_printable(c)) {
            PI_TRY(jb_put(b, s + at, i - at));
        } else {
            if (c < 0x100)
                snprintf(t, sizeof t, "\\x%02x", (unsigned)c);
            else if (c < 0x10000)
                snprintf(t, sizeof t, "\\u%04x", (unsigned)c);
            else
                snprintf(t, sizeof t, "\\U%08x", (unsigned)c);
            PI_TRY(jb_puts(b, t));
        }
    }
    return jb_putc(b, q);
}

#define STR_DEPTH 64

static int put_value(struct jbuf *b, jv v, int repr, int depth) {
    char t[40];
    if (depth > STR_DEPTH)
        return pi_error_set(b->a->err, PI_ERR_RANGE, "a value nested more than %d deep", STR_DEPTH);
    switch (v.kind) {
    case JV_UNDEF:
        return repr ? jb_puts(b, "Undefined") : PI_OK;
    case JV_NONE:
        return jb_puts(b, "None");
    case JV_BOOL:
        return jb_puts(b, v.u.b ? "True" : "False");
    case JV_INT:
        snprintf(t, sizeof t, "%lld", (long long)v.u.i);
        return jb_puts(b, t);
    case JV_FLOAT:
        jv_format_float(v.u.f, t);
        return jb_puts(b, t);
    case JV_STR:
        if (!repr)
            return jb_put(b, v.u.str.s, v.u.str.n);
        if (v.flags & JV_MARKUP) {
            PI_TRY(jb_puts(b, "Markup("));
            PI_TRY(put_str_repr(b, v.u.str.s, v.u.str.n));
            return jb_putc(b, ')');
        }
        return put_str_repr(b, v.u.str.s, v.u.str.n);
    case JV_LIST: {
        if (v.flags & JV_GEN)
            return jb_puts(b, "<generator object>");
        int tuple = v.flags & JV_TUPLE, view = v.flags & JV_VIEW;
        if (view) {
            PI_TRY(jb_puts(b, jv_type_name(v)));
            PI_TRY(jb_putc(b, '('));
        }
        PI_TRY(jb_putc(b, tuple ? '(' : '['));
        for (size_t i = 0; i < v.u.list->n; i++) {
            if (i)
                PI_TRY(jb_put(b, ", ", 2));
            PI_TRY(put_value(b, v.u.list->v[i], 1, depth + 1));
        }
        if (tuple && v.u.list->n == 1)
            PI_TRY(jb_putc(b, ','));
        PI_TRY(jb_putc(b, tuple ? ')' : ']'));
        return view ? jb_putc(b, ')') : PI_OK;
    }
    case JV_DICT:
    case JV_NS:
        if (v.kind == JV_NS)
            PI_TRY(jb_puts(b, "<Namespace "));
        PI_TRY(jb_putc(b, '{'));
        for (size_t i = 0; i < v.u.dict->n; i++) {
            if (i)
                PI_TRY(jb_put(b, ", ", 2));
            PI_TRY(put_value(b, v.u.dict->k[i], 1, depth + 1));
            PI_TRY(jb_put(b, ": ", 2));
            PI_TRY(put_value(b, v.u.dict->v[i], 1, depth + 1));
        }
        PI_TRY(jb_putc(b, '}'));
        return v.kind == JV_NS ? jb_putc(b, '>') : PI_OK;
    case JV_LOOP:
        snprintf(t, sizeof t, "<LoopContext %zu/%zu>", v.u.loop->index0 + 1, v.u.loop->items->n);
        return jb_puts(b, t);
    default:
        PI_TRY(jb_puts(b, v.u.fn->macro ? "<Macro '" : "<built-in function "));
        PI_TRY(jb_put(b, v.u.fn->name, v.u.fn->name_n));
        return jb_puts(b, v.u.fn->macro ? "'>" : ">");
    }
}

int jv_put_str(struct jbuf *b, jv v) {
    return put_value(b, v, 0, 0);
}

int jv_put_repr(struct jbuf *b, jv v) {
    return put_value(b, v, 1, 0);
}

int jv_to_str(struct jarena *a, size_t limit, jv v, jv *out) {
    if (v.kind == JV_STR) {
        *out = v;
        return PI_OK;
    }
    struct jbuf b;
    jb_init(&b, a, limit);
    PI_TRY(jv_put_str(&b, v));
    *out = jb_value(&b);
    return PI_OK;
}

double jv_strtod(const char *s, size_t *used) {
    /* strtod reads the locale's decimal point; texts here always use '.' */
    const char *dp = localeconv()->decimal_point;
    char *end;
    if (!dp || !strcmp(dp, ".")) {
        double v = strtod(s, &end);
        *used = (size_t)(end - s);
        return v;
    }
    size_t n = strlen(s), dl = strlen(dp);
    char tmp[400];
    if (n >= sizeof tmp / 2 || dl > 8) {
        *used = 0;
        return 0.0;
    }
    size_t m = 0, dot = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '.' && dot == (size_t)-1) {
            dot = i;
            memcpy(tmp + m, dp, dl);
            m += dl;
        } else {
            tmp[m++] = s[i];
        }
    }
    tmp[m] = '\0';
    double v = strtod(tmp, &end);
    size_t u = (size_t)(end - tmp);
    *used = dot != (size_t)-1 && u > dot ? u - (dl - 1) : u;
    return v;
}

/* ---- UTF-8 and characters ----------------------------------------------------------- */

int u8_valid(const char *str, size_t n) {
    const unsigned char *p = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t need = c < 0x80                 ? 1
                      : c >= 0xc2 && c <= 0xdf ? 2
                      : c >= 0xe0 && c <= 0xef ? 3
                      : c >= 0xf0 && c <= 0xf4 ? 4
                                               : 0;
        if (!need || need > n - i)
            return 0;
        unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
        unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
        if (need > 1 && (p[i + 1] < lo || p[i + 1] > hi))
            return 0;
        for (size_t k = 2; k < need; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xbf)
                return 0;
        i += need;
    }
    return 1;
}

uint32_t u8_next(const char *str, size_t n, size_t *i) {
    const unsigned char *p = (const unsigned char *)str;
    uint32_t c = p[*i];
    size_t need = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (need > n - *i) { /* not reached on well-formed text */
        (*i)++;
        return 0xfffd;
    }
    if (need > 1)
        c &= 0x3fu >> (need - 1);
    for (size_t k = 1; k < need; k++)
        c = c << 6 | (p[*i + k] & 0x3fu);
    *i += need;
    return c;
}

size_t u8_offset(const char *s, size_t n, size_t k) {
    size_t i = 0;
    while (k > 0 && i < n) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80)
            i++;
        k--;
    }
    return i;
}

size_t u8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

int cp_is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

uint32_t cp_upper(uint32_t c) {
    if (c >= 'a' && c <= 'z')
        return c - 32;
    if (c < 0x80)
        return c;
    if (c == 0xb5)
        return 0x39c;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7))
        return c - 32;
    if (c == 0xff)
        return 0x178;
    if (c >= 0x100 && c <= 0x17f) {
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e))
            return (c & 1) ? c : c - 1;
        if (c == 0x131)
            return 'I';
        if (c == 0x17f)
            return 'S';
        if (c == 0x138 || c == 0x149)
            return c;
        return (c & 1) ? c - 1 : c;
    }
    if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2)
        return c - 32;
    if (c == 0x3c2)
        return 0x3a3;
    if (c >= 0x3ac && c <= 0x3af)
        return c == 0x3ac ? 0x386 : c - 37;
    if (c >= 0x430 && c <= 0x44f)
        return c - 32;
    if (c >= 0x450 && c <= 0x45f)
        return c - 80;
    return c;
}

uint32_t cp_lower(uint32_t c) {
    if (c >= 'A' && c <= 'Z')
        return c + 32;
    if (c < 0x80)
        return c;
    if (c >= 0xc0 && c <= 0xde && c != 0xd7)
        return c + 32;
    if (c == 0x178)
        return 0xff;
    if (c >= 0x100 && c <= 0x17f) {
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e))
            return (c & 1) ? c + 1 : c;
        if (c == 0x130)
            return 'i';
        if (c == 0x138 || c == 0x149 || c == 0x17f || c == 0x131)
            return c;
        return (c & 1) ? c : c + 1;
    }
    if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2)
        return c + 32;
    if (c == 0x386)
        return 0x3ac;
    if (c >= 0x388 && c <= 0x38a)
        return c + 37;
    if (c >= 0x410 && c <= 0x42f)
        return c + 32;
    if (c >= 0x400 && c <= 0x40f)
        return c + 80;
    return c;
}

int cp_is_cased(uint32_t c) {
    return cp_upper(c) != c || cp_lower(c) != c || c == 0xdf;
}

int cp_is_word(uint32_t c) {
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               c == '_';
    if (c < 0xc0)
        return c == 0xaa || c == 0xb5 || c == 0xba || (c >= 0xb2 && c <= 0xb3) || c == 0xb9 ||
               (c >= 0xbc && c <= 0xbe);
    if (c == 0xd7 || c == 0xf7 || cp_is_space(c))
        return 0;
    if ((c >= 0x2000 && c <= 0x206f) || (c >= 0x3000 && c <= 0x303f) ||
        (c >= 0xff00 && c <= 0xff0f) || (c >= 0xfe30 && c <= 0xfe4f))
        return 0;
    return 1;
}
