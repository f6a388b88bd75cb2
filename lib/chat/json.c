/* json.c -- a depth-bounded RFC 8259 parser into template values and a writer with
 * Python json.dumps's output. */
#include "chat/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parser ------------------------------------------------------------------------- */

struct jp {
    struct jarena *a;
    struct pi_error *err;
    const char *s;
    size_t n, i;
};

static int jp_fail(struct jp *p, const char *what) {
    return pi_error_set(p->err, PI_ERR_INVALID_ARG, "JSON data, offset %zu: %s", p->i, what);
}

static void jp_ws(struct jp *p) {
    while (p->i < p->n &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(struct jp *p, uint32_t *out) {
    if (p->n - p->i < 4)
        return jp_fail(p, "a \\u escape needs four hex digits");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i + (size_t)k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return jp_fail(p, "a \\u escape needs four hex digits");
        v = v << 4 | (uint32_t)d;
    }
    p->i += 4;
    *out = v;
    return PI_OK;
}

static int jp_string(struct jp *p, jv *out) {
    p->i++; /* the opening quote */
    size_t start = p->i;
    /* fast path: no escapes */
    while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' &&
           (unsigned char)p->s[p->i] >= 0x20)
        p->i++;
    if (p->i < p->n && p->s[p->i] == '"') {
        if (!u8_valid(p->s + start, p->i - start))
            return jp_fail(p, "a string is not valid UTF-8");
        *out = jv_str(p->s + start, p->i - start);
        p->i++;
        return PI_OK;
    }
    struct jbuf b;
    jb_init(&b, p->a, (size_t)-1 / 2);
    PI_TRY(jb_put(&b, p->s + start, p->i - start));
    for (;;) {
        if (p->i >= p->n)
            return jp_fail(p, "a string is not closed");
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"')
            break;
        if (c < 0x20)
            return jp_fail(p, "a control character in a string");
        if (c != '\\') {
            size_t run = p->i;
            while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' &&
                   (unsigned char)p->s[p->i] >= 0x20)
                p->i++;
            PI_TRY(jb_put(&b, p->s + run, p->i - run));
            continue;
        }
        p->i++;
        if (p->i >= p->n)
            return jp_fail(p, "a string is not closed");
        char e = p->s[p->i++];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (simple && e) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            PI_TRY(jb_putc(&b, map[simple - "\"\\/bfnrt"]));
            continue;
        }
        if (e != 'u') {
            p->i--;
            return jp_fail(p, "an unknown escape in a string");
        }
        uint32_t cp;
        PI_TRY(hex4(p, &cp));
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return jp_fail(p, "a lone low surrogate escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
            uint32_t lo;
            if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
                return jp_fail(p, "a high surrogate escape without its low half");
            p->i += 2;
            PI_TRY(hex4(p, &lo));
            if (lo < 0xdc00 || lo > 0xdfff)
                return jp_fail(p, "a high surrogate escape without its low half");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        PI_TRY(jb_put_cp(&b, cp));
    }
    p->i++;
    if (!u8_valid(b.p ? b.p : "", b.n))
        return jp_fail(p, "a string is not valid UTF-8");
    *out = jb_value(&b);
    return PI_OK;
}

static int jp_number(struct jp *p, jv *out) {
    size_t start = p->i;
    int is_float = 0;
    if (p->s[p->i] == '-')
        p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
        return jp_fail(p, "a number needs a digit");
    if (p->s[p->i] == '0')
        p->i++;
    else
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        is_float = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return jp_fail(p, "a fraction needs a digit");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_float = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return jp_fail(p, "an exponent needs a digit");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
    }
    char tmp[64];
    size_t len = p->i - start;
    char *text = tmp;
    if (len >= sizeof tmp) {
        text = ja_alloc(p->a, len + 1);
        if (!text)
            return ja_status(p->a);
    }
    memcpy(text, p->s + start, len);
    text[len] = '\0';
    errno = 0;
    if (is_float) {
        size_t used; /* overflow gives inf, as Python's float() */
        *out = jv_float(jv_strtod(text, &used));
        return PI_OK;
    }
    long long v = strtoll(text, NULL, 10);
    if (errno == ERANGE)
        return pi_error_set(p->err, PI_ERR_RANGE,
                            "JSON data, offset %zu: an integer outside 64 bits", start);
    *out = jv_int(v);
    return PI_OK;
}

static int jp_value(struct jp *p, jv *out, int depth);

static int jp_array(struct jp *p, jv *out, int depth) {
    p->i++;
    struct jbuf items; /* jv values, as bytes */
    jb_init(&items, p->a, (size_t)-1 / 2);
    jp_ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
    } else {
        for (;;) {
            jv v;
            PI_TRY(jp_value(p, &v, depth + 1));
            PI_TRY(jb_put(&items, (const char *)&v, sizeof v));
            jp_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == ']') {
                p->i++;
                break;
            }
            return jp_fail(p, "expected ',' or ']'");
        }
    }
    struct jlist *l = jl_new(p->a, items.n / sizeof(jv), (const jv *)items.p);
    if (!l)
        return ja_status(p->a);
    out->kind = JV_LIST;
    out->flags = 0;
    out->u.list = l;
    return PI_OK;
}

static int jp_object(struct jp *p, jv *out, int depth) {
    p->i++;
    struct jdict *d = jd_new(p->a, 0);
    if (!d)
        return ja_status(p->a);
    jp_ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
    } else {
        for (;;) {
            jp_ws(p);
            if (p->i >= p->n || p->s[p->i] != '"')
                return jp_fail(p, "expected a member name");
            jv k, v;
            PI_TRY(jp_string(p, &k));
            jp_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':')
                return jp_fail(p, "expected ':'");
            p->i++;
            PI_TRY(jp_value(p, &v, depth + 1));
            PI_TRY(jd_set(p->a, d, k, v));
            jp_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == '}') {
                p->i++;
                break;
            }
            return jp_fail(p, "expected ',' or '}'");
        }
    }
    out->kind = JV_DICT;
    out->flags = 0;
    out->u.dict = d;
    return PI_OK;
}

static int word(struct jp *p, const char *w) {
    size_t k = strlen(w);
    if (p->n - p->i >= k && memcmp(p->s + p->i, w, k) == 0) {
        p->i += k;
        return 1;
    }
    return 0;
}

static int jp_value(struct jp *p, jv *out, int depth) {
    if (depth > JSON_MAX_DEPTH)
        return jp_fail(p, "nested too deep");
    jp_ws(p);
    if (p->i >= p->n)
        return jp_fail(p, "expected a value");
    char c = p->s[p->i];
    if (c == '{')
        return jp_object(p, out, depth);
    if (c == '[')
        return jp_array(p, out, depth);
    if (c == '"')
        return jp_string(p, out);
    if (c == '-' || (c >= '0' && c <= '9'))
        return jp_number(p, out);
    if (word(p, "true")) {
        *out = jv_bool(1);
        return PI_OK;
    }
    if (word(p, "false")) {
        *out = jv_bool(0);
        return PI_OK;
    }
    if (word(p, "null")) {
        *out = jv_none();
        return PI_OK;
    }
    return jp_fail(p, "expected a value");
}

int json_parse(struct jarena *a, const char *s, size_t n, jv *out, struct pi_error *err) {
    struct jp p = {a, err, s, n, 0};
    PI_TRY(jp_value(&p, out, 0));
    jp_ws(&p);
    if (p.i != n)
        return jp_fail(&p, "text after the value");
    return PI_OK;
}

/* ---- writer ------------------------------------------------------------------------- */

void json_opts_default(struct json_opts *o) {
    o->ensure_ascii = 0;
    o->pretty = 0;
    o->indent = 0;
    o->indent_str = jv_undef();
    o->item_sep = o->key_sep = jv_undef();
    o->sort_keys = 0;
}

static int put_json_str(struct jbuf *b, const char *s, size_t n, int ascii) {
    PI_TRY(jb_putc(b, '"'));
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\' && (c < 0x80 || !ascii)) {
            i++;
            continue;
        }
        PI_TRY(jb_put(b, s + run, i - run));
        char t[16];
        if (c >= 0x80) {
            uint32_t cp = u8_next(s, n, &i);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(t, sizeof t, "\\u%04x\\u%04x", 0xd800 + (unsigned)(cp >> 10),
                         0xdc00 + (unsigned)(cp & 0x3ff));
            } else {
                snprintf(t, sizeof t, "\\u%04x", (unsigned)cp);
            }
            PI_TRY(jb_puts(b, t));
            run = i;
            continue;
        }
        switch (c) {
        case '"':
            PI_TRY(jb_put(b, "\\\"", 2));
            break;
        case '\\':
            PI_TRY(jb_put(b, "\\\\", 2));
            break;
        case '\n':
            PI_TRY(jb_put(b, "\\n", 2));
            break;
        case '\r':
            PI_TRY(jb_put(b, "\\r", 2));
            break;
        case '\t':
            PI_TRY(jb_put(b, "\\t", 2));
            break;
        case '\b':
            PI_TRY(jb_put(b, "\\b", 2));
            break;
        case '\f':
            PI_TRY(jb_put(b, "\\f", 2));
            break;
        default:
            snprintf(t, sizeof t, "\\u%04x", c);
            PI_TRY(jb_puts(b, t));
        }
        i++;
        run = i;
    }
    PI_TRY(jb_put(b, s + run, n - run));
    return jb_putc(b, '"');
}

static int put_float(struct jbuf *b, double f) {
    if (isnan(f))
        return jb_puts(b, "NaN");
    if (isinf(f))
        return jb_puts(b, f < 0 ? "-Infinity" : "Infinity");
    char t[40];
    jv_format_float(f, t);
    return jb_puts(b, t);
}

struct jw {
    struct jbuf *b;
    const struct json_opts *o;
    struct pi_error *err;
    jv item_sep, key_sep;
    int pretty;
};

static int newline(struct jw *w, int level) {
    PI_TRY(jb_putc(w->b, '\n'));
    for (int l = 0; l < level; l++) {
        if (w->o->indent_str.kind == JV_STR)
            PI_TRY(jb_put(w->b, w->o->indent_str.u.str.s, w->o->indent_str.u.str.n));
        else
            for (int k = 0; k < w->o->indent; k++)
                PI_TRY(jb_putc(w->b, ' '));
    }
    return PI_OK;
}

static int not_serialisable(struct jw *w, jv v) {
    return pi_error_set(w->err, PI_ERR_TYPE, "Object of type %s is not JSON serializable",
                        jv_type_name(v));
}

/* Python's json.dumps turns keys that are not strings into strings. */
static int put_key(struct jw *w, jv k) {
    switch (k.kind) {
    case JV_STR:
        return put_json_str(w->b, k.u.str.s, k.u.str.n, w->o->ensure_ascii);
    case JV_INT: {
        char t[32];
        snprintf(t, sizeof t, "\"%lld\"", (long long)k.u.i);
        return jb_puts(w->b, t);
    }
    case JV_FLOAT:
        PI_TRY(jb_putc(w->b, '"'));
        PI_TRY(put_float(w->b, k.u.f));
        return jb_putc(w->b, '"');
    case JV_BOOL:
        return jb_puts(w->b, k.u.b ? "\"true\"" : "\"false\"");
    case JV_NONE:
        return jb_puts(w->b, "\"null\"");
    default:
        return pi_error_set(w->err, PI_ERR_TYPE,
                            "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static int dump(struct jw *w, jv v, int level) {
    if (level > JSON_MAX_DEPTH)
        return pi_error_set(w->err, PI_ERR_RANGE, "tojson: a value nested more than %d deep",
                            JSON_MAX_DEPTH);
    char t[32];
    switch (v.kind) {
    case JV_NONE:
        return jb_puts(w->b, "null");
    case JV_BOOL:
        return jb_puts(w->b, v.u.b ? "true" : "false");
    case JV_INT:
        snprintf(t, sizeof t, "%lld", (long long)v.u.i);
        return jb_puts(w->b, t);
    case JV_FLOAT:
        return put_float(w->b, v.u.f);
    case JV_STR:
        return put_json_str(w->b, v.u.str.s, v.u.str.n, w->o->ensure_ascii);
    case JV_LIST: {
        const struct jlist *l = v.u.list;
        if (v.flags & (JV_GEN | JV_VIEW))
            return not_serialisable(w, v);
        if (l->n == 0)
            return jb_puts(w->b, "[]");
        PI_TRY(jb_putc(w->b, '['));
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                PI_TRY(jb_put(w->b, w->item_sep.u.str.s, w->item_sep.u.str.n));
            if (w->pretty)
                PI_TRY(newline(w, level + 1));
            PI_TRY(dump(w, l->v[i], level + 1));
        }
        if (w->pretty)
            PI_TRY(newline(w, level));
        return jb_putc(w->b, ']');
    }
    case JV_DICT: {
        const struct jdict *d = v.u.dict;
        if (d->n == 0)
            return jb_puts(w->b, "{}");
        size_t *order = ja_alloc(w->b->a, d->n * sizeof *order);
        if (!order)
            return ja_status(w->b->a);
        for (size_t i = 0; i < d->n; i++)
            order[i] = i;
        if (w->o->sort_keys) {
            /* insertion sort: stable, and dicts in templates are small */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                for (; j > 0; j--) {
                    int c;
                    if (jv_cmp(d->k[order[j - 1]], d->k[x], &c) < 0)
                        return pi_error_set(w->err, PI_ERR_TYPE,
                                            "tojson: sort_keys with keys of unlike types");
                    if (c <= 0)
                        break;
                    order[j] = order[j - 1];
                }
                order[j] = x;
            }
        }
        PI_TRY(jb_putc(w->b, '{'));
        for (size_t i = 0; i < d->n; i++) {
            if (i)
                PI_TRY(jb_put(w->b, w->item_sep.u.str.s, w->item_sep.u.str.n));
            if (w->pretty)
                PI_TRY(newline(w, level + 1));
            PI_TRY(put_key(w, d->k[order[i]]));
            PI_TRY(jb_put(w->b, w->key_sep.u.str.s, w->key_sep.u.str.n));
            PI_TRY(dump(w, d->v[order[i]], level + 1));
        }
        if (w->pretty)
            PI_TRY(newline(w, level));
        return jb_putc(w->b, '}');
    }
    default:
        return not_serialisable(w, v);
    }
}

int json_dump(struct jbuf *b, jv v, const struct json_opts *o, struct pi_error *err) {
    struct jw w = {b, o, err, o->item_sep, o->key_sep, 0};
    w.pretty = o->pretty;
    if (w.item_sep.kind != JV_STR)
        w.item_sep = jv_cstr(w.pretty ? "," : ", ");
    if (w.key_sep.kind != JV_STR)
        w.key_sep = jv_cstr(": ");
    return dump(&w, v, 0);
}
