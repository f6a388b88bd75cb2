/* jinja_eval.c -- rendering a parsed template: a walk over the tree with jinja2's
 * scoping (a for loop and a macro call open a scope; if and set do not: `set` inside
 * a loop stays in the loop, which is why templates carry state in namespaces),
 * Python's operators, and jinja2's sandboxed attribute and item lookup. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chat/jinja.h"

enum { EX_BREAK = 1, EX_CONTINUE = 2 }; /* positive: not errors, unwind to the loop */

struct jscope {
    struct jscope *parent;
    struct jdict *vars;
};

struct jrender {
    const struct jtemplate *t;
    struct jarena *a;
    struct pi_error *err;
    struct jbuf *out;
    struct jscope *scope;
    const struct jdict *vars;
    int64_t now;
    uint64_t steps;
    int calls, depth;
    jv blockval;
    size_t pos;
};

/* ---- services for the library ------------------------------------------------------- */

struct jarena *jr_arena(struct jrender *r) {
    return r->a;
}

size_t jr_max_output(const struct jrender *r) {
    return r->t->lim.max_output;
}

int64_t jr_now(const struct jrender *r) {
    return r->now;
}

int jr_fail(struct jrender *r, const char *fmt, ...) {
    char msg[PI_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned line, col;
    jinja_line_col(r->t->src, r->t->n, r->pos, &line, &col);
    return pi_error_set(r->err, PI_ERR_FORMAT, "line %u: %s", line, msg);
}

int jr_raise(struct jrender *r, jv msg) {
    if (msg.kind != JV_STR) {
        struct jbuf b;
        jb_init(&b, r->a, PI_ERRMSG_CAP);
        if (jv_put_str(&b, msg) < 0 && b.n == 0)
            return pi_error_set(r->err, PI_ERR_FORMAT, "raise_exception");
        msg = jb_value(&b);
    }
    return pi_error_set(r->err, PI_ERR_FORMAT, "%.*s",
                        (int)(msg.u.str.n < PI_ERRMSG_CAP ? msg.u.str.n : PI_ERRMSG_CAP),
                        msg.u.str.s);
}

int jr_step(struct jrender *r, uint64_t n) {
    r->steps += n;
    if (r->steps > r->t->lim.max_steps)
        return pi_error_set(r->err, PI_ERR_RANGE,
                            "the template ran more than %llu steps (loop iterations, calls, "
                            "items)",
                            (unsigned long long)r->t->lim.max_steps);
    return PI_OK;
}

int jr_undefined_error(struct jrender *r, jv v) {
    if (v.flags & JV_UNSAFE)
        return jr_fail(r, "access to attribute '%.*s' is unsafe (the sandbox refuses it)",
                       (int)v.u.str.n, v.u.str.s ? v.u.str.s : "");
    if (v.u.str.s)
        return jr_fail(r, "'%.*s' is undefined", (int)(v.u.str.n < 100 ? v.u.str.n : 100),
                       v.u.str.s);
    return jr_fail(r, "an undefined value was used");
}

static jv undef_named(jv name) {
    jv v = jv_undef();
    if (name.kind == JV_STR) {
        v.u.str.s = name.u.str.s;
        v.u.str.n = name.u.str.n;
    }
    return v;
}

/* ---- scopes ------------------------------------------------------------------------- */

static int scope_push(struct jrender *r, struct jscope *parent, struct jscope **out) {
    struct jscope *s = ja_alloc(r->a, sizeof *s);
    if (!s)
        return ja_status(r->a);
    s->parent = parent;
    s->vars = jd_new(r->a, 0);
    if (!s->vars)
        return ja_status(r->a);
    *out = s;
    return PI_OK;
}

static int assign(struct jrender *r, jv name, jv val) {
    return jd_set(r->a, r->scope->vars, name, val);
}

static int lookup(struct jrender *r, jv name, jv *out) {
    for (struct jscope *s = r->scope; s; s = s->parent) {
        jv *v = jd_get_str(s->vars, name.u.str.s, name.u.str.n);
        if (v) {
            *out = *v;
            return PI_OK;
        }
    }
    jv *v = r->vars ? jd_get_str(r->vars, name.u.str.s, name.u.str.n) : NULL;
    if (v) {
        *out = *v;
        return PI_OK;
    }
    int id = jlib_global_id(name.u.str.s, name.u.str.n);
    if (id >= 0 && !(r->now < 0 && !strcmp(jlib_global_name(id), "strftime_now"))) {
        struct jfunc *f = ja_alloc(r->a, sizeof *f);
        if (!f)
            return ja_status(r->a);
        memset(f, 0, sizeof *f);
        f->kind = JF_GLOBAL;
        f->id = id;
        f->name = jlib_global_name(id);
        f->name_n = strlen(f->name);
        out->kind = JV_FUNC;
        out->flags = 0;
        out->u.fn = f;
        return PI_OK;
    }
    *out = undef_named(name);
    return PI_OK;
}

/* ---- lookups ------------------------------------------------------------------------ */

static int loop_attr(struct jrender *r, const struct jloop *l, jv name, jv *out) {
    size_t i = l->index0, n = l->items->n;
    if (jv_str_is(name, "index"))
        *out = jv_int((int64_t)i + 1);
    else if (jv_str_is(name, "index0"))
        *out = jv_int((int64_t)i);
    else if (jv_str_is(name, "revindex"))
        *out = jv_int((int64_t)(n - i));
    else if (jv_str_is(name, "revindex0"))
        *out = jv_int((int64_t)(n - i - 1));
    else if (jv_str_is(name, "first"))
        *out = jv_bool(i == 0);
    else if (jv_str_is(name, "last"))
        *out = jv_bool(i + 1 == n);
    else if (jv_str_is(name, "length"))
        *out = jv_int((int64_t)n);
    else if (jv_str_is(name, "depth"))
        *out = jv_int(l->depth);
    else if (jv_str_is(name, "depth0"))
        *out = jv_int(l->depth - 1);
    else if (jv_str_is(name, "previtem"))
        *out = i > 0 ? l->items->v[i - 1] : undef_named(name);
    else if (jv_str_is(name, "nextitem"))
        *out = i + 1 < n ? l->items->v[i + 1] : undef_named(name);
    else if (jv_str_is(name, "cycle")) {
        struct jfunc *f = ja_alloc(r->a, sizeof *f);
        if (!f)
            return ja_status(r->a);
        memset(f, 0, sizeof *f);
        f->kind = JF_LOOP_CYCLE;
        f->self.kind = JV_LOOP;
        f->self.u.loop = (struct jloop *)l;
        f->name = "cycle";
        f->name_n = 5;
        out->kind = JV_FUNC;
        out->flags = 0;
        out->u.fn = f;
    } else
        *out = undef_named(name);
    return PI_OK;
}

int jr_getattr(struct jrender *r, jv obj, jv name, jv *out) {
    switch (obj.kind) {
    case JV_UNDEF:
        return jr_undefined_error(r, obj);
    case JV_NS: {
        jv *v = jd_get(obj.u.dict, name);
        *out = v ? *v : undef_named(name);
        return PI_OK;
    }
    case JV_LOOP:
        return loop_attr(r, obj.u.loop, name, out);
    case JV_DICT:
    case JV_STR:
    case JV_LIST: {
        int st = jlib_method(r, obj, name, out);
        if (st != 0)
            return st < 0 ? st : PI_OK;
        if (obj.kind == JV_DICT) {
            jv *v = jd_get(obj.u.dict, name);
            if (v) {
                *out = *v;
                return PI_OK;
            }
        }
        *out = undef_named(name);
        return PI_OK;
    }
    default:
        *out = undef_named(name);
        return PI_OK;
    }
}

int jr_getitem(struct jrender *r, jv obj, jv key, jv *out) {
    switch (obj.kind) {
    case JV_UNDEF:
        return jr_undefined_error(r, obj);
    case JV_DICT: {
        if (key.kind == JV_LIST && !(key.flags & JV_TUPLE))
            return jr_fail(r, "unhashable type: 'list'");
        jv *v = jd_get(obj.u.dict, key);
        if (v) {
            *out = *v;
            return PI_OK;
        }
        break;
    }
    case JV_LIST:
    case JV_STR:
        if (obj.flags & (JV_GEN | JV_VIEW)) /* not subscriptable */
            break;
        if (key.kind == JV_INT || key.kind == JV_BOOL) {
            int64_t i = key.kind == JV_INT ? key.u.i : key.u.b;
            int64_t n = jv_len(obj);
            if (i < 0)
                i += n;
            if (i < 0 || i >= n) {
                *out = jv_undef();
                return PI_OK;
            }
            if (obj.kind == JV_LIST) {
                *out = obj.u.list->v[i];
            } else {
                size_t b = u8_offset(obj.u.str.s, obj.u.str.n, (size_t)i);
                size_t e = u8_offset(obj.u.str.s, obj.u.str.n, (size_t)i + 1);
                *out = jv_str(obj.u.str.s + b, e - b);
            }
            return PI_OK;
        }
        break;
    default:
        break;
    }
    if (key.kind == JV_STR)
        return jr_getattr(r, obj, key, out);
    *out = jv_undef();
    return PI_OK;
}

int jr_iterate(struct jrender *r, jv v, const struct jlist **out) {
    static const struct jlist empty = {0, NULL, 0};
    switch (v.kind) {
    case JV_UNDEF:
        *out = &empty;
        return PI_OK;
    case JV_LIST:
        if (v.flags & JV_GEN) { /* a generator runs once */
            if (v.u.list->consumed) {
                *out = &empty;
                return PI_OK;
            }
            v.u.list->consumed = 1;
        }
        *out = v.u.list;
        return PI_OK;
    case JV_DICT: {
        struct jlist *l = jl_new(r->a, v.u.dict->n, v.u.dict->k);
        if (!l)
            return ja_status(r->a);
        *out = l;
        return PI_OK;
    }
    case JV_STR: {
        size_t n = u8_count(v.u.str.s, v.u.str.n);
        struct jlist *l = jl_new(r->a, n, NULL);
        if (!l)
            return ja_status(r->a);
        size_t i = 0;
        for (size_t k = 0; k < n; k++) {
            size_t at = i;
            u8_next(v.u.str.s, v.u.str.n, &i);
            l->v[k] = jv_str(v.u.str.s + at, i - at);
        }
        *out = l;
        return PI_OK;
    }
    default:
        return jr_fail(r, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- evaluation --------------------------------------------------------------------- */

static int eval(struct jrender *r, const struct jnode *x, jv *out);
static int exec_body(struct jrender *r, struct jnode *const *kids, uint32_t n);

static int num_of(jv v, int *is_float, int64_t *i, double *f) {
    switch (v.kind) {
    case JV_BOOL:
        *is_float = 0;
        *i = v.u.b;
        *f = v.u.b;
        return 1;
    case JV_INT:
        *is_float = 0;
        *i = v.u.i;
        *f = (double)v.u.i;
        return 1;
    case JV_FLOAT:
        *is_float = 1;
        *f = v.u.f;
        return 1;
    default:
        return 0;
    }
}

static const char *op_text(int op) {
    static const char *const t[] = {"?",  "+",  "-", "*",  "/", "//", "%",  "**",    "~",
                                    "==", "!=", "<", "<=", ">", ">=", "in", "not in"};
    return op > 0 && op < (int)(sizeof t / sizeof t[0]) ? t[op] : "?";
}

/* a * b when it fits in 64 bits */
static int mul_ok(int64_t a, int64_t b, int64_t *res) {
    if (a == 0 || b == 0) {
        *res = 0;
        return 1;
    }
    if ((a == -1 && b == INT64_MIN) || (b == -1 && a == INT64_MIN))
        return 0;
    if (a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
              : (b > 0 ? a < INT64_MIN / b : a < INT64_MAX / b))
        return 0;
    *res = a * b;
    return 1;
}

static int overflow(struct jrender *r) {
    return jr_fail(r, "an integer result outside 64 bits");
}

/* HTML-escape s into b, as markupsafe does. */
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

static int repeat(struct jrender *r, jv seq, int64_t k, jv *out) {
    if (k < 0)
        k = 0;
    if (seq.kind == JV_STR) {
        if (seq.u.str.n && (uint64_t)k > r->t->lim.max_output / seq.u.str.n)
            return pi_error_set(r->err, PI_ERR_RANGE, "a string past %zu bytes",
                                r->t->lim.max_output);
        struct jbuf b;
        jb_init(&b, r->a, r->t->lim.max_output);
        for (int64_t j = 0; j < k; j++)
            PI_TRY(jb_put(&b, seq.u.str.s, seq.u.str.n));
        *out = jb_value(&b);
        out->flags = seq.flags & JV_MARKUP;
        return PI_OK;
    }
    size_t n = seq.u.list->n;
    if (n && (uint64_t)k > r->t->lim.max_steps / n)
        return jr_step(r, r->t->lim.max_steps + 1);
    PI_TRY(jr_step(r, n * (uint64_t)k));
    struct jlist *l = jl_new(r->a, n * (size_t)k, NULL);
    if (!l)
        return ja_status(r->a);
    for (int64_t j = 0; j < k; j++)
        if (n)
            memcpy(l->v + (size_t)j * n, seq.u.list->v, n * sizeof(jv));
    out->kind = JV_LIST;
    out->flags = seq.flags & JV_TUPLE;
    out->u.list = l;
    return PI_OK;
}

static int arith(struct jrender *r, int op, jv a, jv b, jv *out) {
    if (op == JOP_CONCAT) {
        struct jbuf s;
        jb_init(&s, r->a, r->t->lim.max_output);
        PI_TRY(jv_put_str(&s, a));
        PI_TRY(jv_put_str(&s, b));
        *out = jb_value(&s);
        return PI_OK;
    }
    if (a.kind == JV_UNDEF)
        return jr_undefined_error(r, a);
    if (b.kind == JV_UNDEF)
        return jr_undefined_error(r, b);
    int fa = 0, fb = 0;
    int64_t ia = 0, ib = 0;
    double da = 0, db = 0;
    int na = num_of(a, &fa, &ia, &da), nb = num_of(b, &fb, &ib, &db);
    if (na && nb) {
        int fl = fa || fb;
        switch (op) {
        case JOP_ADD:
            if (fl) {
                *out = jv_float(da + db);
            } else {
                if ((ib > 0 && ia > INT64_MAX - ib) || (ib < 0 && ia < INT64_MIN - ib))
                    return overflow(r);
                *out = jv_int(ia + ib);
            }
            return PI_OK;
        case JOP_SUB:
            if (fl) {
                *out = jv_float(da - db);
            } else {
                if ((ib < 0 && ia > INT64_MAX + ib) || (ib > 0 && ia < INT64_MIN + ib))
                    return overflow(r);
                *out = jv_int(ia - ib);
            }
            return PI_OK;
        case JOP_MUL:
            if (fl) {
                *out = jv_float(da * db);
            } else {
                int64_t m;
                if (!mul_ok(ia, ib, &m))
                    return overflow(r);
                *out = jv_int(m);
            }
            return PI_OK;
        case JOP_DIV:
            if (db == 0.0)
                return jr_fail(r, "division by zero");
            *out = jv_float(da / db);
            return PI_OK;
        case JOP_FLOORDIV:
        case JOP_MOD:
            if (fl) {
                if (db == 0.0)
                    return jr_fail(r, "float division by zero");
                /* Python's float // and %: the remainder takes the divisor's sign */
                double m = fmod(da, db);
                if (m != 0.0 && ((m < 0) != (db < 0)))
                    m += db;
                if (op == JOP_MOD) {
                    *out = jv_float(m);
                } else {
                    double q = (da - m) / db, fq = floor(q);
                    if (q - fq > 0.5)
                        fq += 1.0;
                    *out = jv_float(fq);
                }
                return PI_OK;
            }
            if (ib == 0)
                return jr_fail(r, "integer division or modulo by zero");
            if (ia == INT64_MIN && ib == -1)
                return overflow(r);
            {
                int64_t q = ia / ib, m = ia % ib;
                if (m != 0 && ((m < 0) != (ib < 0))) {
                    q--;
                    m += ib;
                }
                *out = jv_int(op == JOP_MOD ? m : q);
            }
            return PI_OK;
        case JOP_POW:
            if (!fl && ib >= 0) {
                int64_t res = 1;
                if (ia == 0 || ia == 1) {
                    res = ib == 0 ? 1 : ia;
                } else if (ia == -1) {
                    res = ib % 2 ? -1 : 1;
                } else {
                    for (int64_t e = 0; e < ib; e++)
                        if (!mul_ok(res, ia, &res))
                            return overflow(r);
                }
                *out = jv_int(res);
                return PI_OK;
            }
            if (da == 0.0 && db < 0)
                return jr_fail(r, "0.0 cannot be raised to a negative power");
            *out = jv_float(pow(da, db));
            return PI_OK;
        default:
            break;
        }
    }
    if (op == JOP_ADD && a.kind == JV_STR && b.kind == JV_STR) {
        struct jbuf s;
        jb_init(&s, r->a, r->t->lim.max_output);
        int markup = (a.flags | b.flags) & JV_MARKUP;
        if (markup && !(a.flags & JV_MARKUP))
            PI_TRY(put_escaped(&s, a));
        else
            PI_TRY(jb_put(&s, a.u.str.s, a.u.str.n));
        if (markup && !(b.flags & JV_MARKUP))
            PI_TRY(put_escaped(&s, b));
        else
            PI_TRY(jb_put(&s, b.u.str.s, b.u.str.n));
        *out = jb_value(&s);
        out->flags = (uint8_t)markup;
        return PI_OK;
    }
    if (op == JOP_ADD && a.kind == JV_LIST && b.kind == JV_LIST && a.flags == b.flags &&
        !(a.flags & (JV_GEN | JV_VIEW))) {
        size_t n = a.u.list->n + b.u.list->n;
        PI_TRY(jr_step(r, n));
        struct jlist *l = jl_new(r->a, n, NULL);
        if (!l)
            return ja_status(r->a);
        if (a.u.list->n)
            memcpy(l->v, a.u.list->v, a.u.list->n * sizeof(jv));
        if (b.u.list->n)
            memcpy(l->v + a.u.list->n, b.u.list->v, b.u.list->n * sizeof(jv));
        out->kind = JV_LIST;
        out->flags = a.flags & JV_TUPLE;
        out->u.list = l;
        return PI_OK;
    }
    int seq_a = a.kind == JV_STR || (a.kind == JV_LIST && !(a.flags & (JV_GEN | JV_VIEW)));
    int seq_b = b.kind == JV_STR || (b.kind == JV_LIST && !(b.flags & (JV_GEN | JV_VIEW)));
    if (op == JOP_MUL && seq_a && nb && !fb)
        return repeat(r, a, ib, out);
    if (op == JOP_MUL && seq_b && na && !fa)
        return repeat(r, b, ia, out);
    if (op == JOP_MOD && a.kind == JV_STR)
        return jr_fail(r, "string formatting with %% is not supported");
    return jr_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
                   jv_type_name(a), jv_type_name(b));
}

static int contains(struct jrender *r, jv item, jv seq, int *res) {
    switch (seq.kind) {
    case JV_UNDEF:
        *res = 0;
        return PI_OK;
    case JV_STR:
        if (item.kind != JV_STR)
            return jr_fail(r, "'in <string>' requires string as left operand, not %s",
                           jv_type_name(item));
        *res = 0;
        if (item.u.str.n == 0) {
            *res = 1;
        } else {
            for (size_t i = 0; i + item.u.str.n <= seq.u.str.n; i++)
                if (memcmp(seq.u.str.s + i, item.u.str.s, item.u.str.n) == 0) {
                    *res = 1;
                    break;
                }
        }
        return PI_OK;
    case JV_LIST:
        *res = 0;
        for (size_t i = 0; i < seq.u.list->n && !*res; i++)
            *res = jv_eq(seq.u.list->v[i], item);
        return PI_OK;
    case JV_DICT:
        *res = jd_get(seq.u.dict, item) != NULL;
        return PI_OK;
    default:
        return jr_fail(r, "argument of type '%s' is not iterable", jv_type_name(seq));
    }
}

static int compare(struct jrender *r, int op, jv a, jv b, int *res) {
    switch (op) {
    case JOP_EQ:
        *res = jv_eq(a, b);
        return PI_OK;
    case JOP_NE:
        *res = !jv_eq(a, b);
        return PI_OK;
    case JOP_IN:
        return contains(r, a, b, res);
    case JOP_NOTIN:
        PI_TRY(contains(r, a, b, res));
        *res = !*res;
        return PI_OK;
    default: {
        if (a.kind == JV_UNDEF)
            return jr_undefined_error(r, a);
        if (b.kind == JV_UNDEF)
            return jr_undefined_error(r, b);
        int c;
        if (jv_cmp(a, b, &c) < 0)
            return jr_fail(r, "'%s' not supported between instances of '%s' and '%s'", op_text(op),
                           jv_type_name(a), jv_type_name(b));
        int nan = (a.kind == JV_FLOAT && isnan(a.u.f)) || (b.kind == JV_FLOAT && isnan(b.u.f));
        *res = nan            ? 0
               : op == JOP_LT ? c < 0
               : op == JOP_LE ? c <= 0
               : op == JOP_GT ? c > 0
                              : c >= 0;
        return PI_OK;
    }
    }
}

/* Python's slice indices for a sequence of n items. */
static int slice_of(struct jrender *r, jv seq, jv start, jv stop, jv step, jv *out) {
    int64_t n = jv_len(seq), st = 1, lo, hi;
    if (step.kind != JV_NONE && step.kind != JV_UNDEF) {
        if (step.kind != JV_INT && step.kind != JV_BOOL)
            return jr_fail(r, "slice indices must be integers or None");
        st = step.kind == JV_INT ? step.u.i : step.u.b;
        if (st == 0)
            return jr_fail(r, "slice step cannot be zero");
    }
    int64_t *ends[2] = {&lo, &hi};
    jv vals[2] = {start, stop};
    for (int k = 0; k < 2; k++) {
        jv v = vals[k];
        if (v.kind == JV_NONE || v.kind == JV_UNDEF) {
            *ends[k] = st > 0 ? (k ? n : 0) : (k ? -1 : n - 1);
            continue;
        }
        if (v.kind != JV_INT && v.kind != JV_BOOL)
            return jr_fail(r, "slice indices must be integers or None");
        int64_t i = v.kind == JV_INT ? v.u.i : v.u.b;
        if (i < 0) {
            i += n;
            if (i < 0)
                i = st > 0 ? 0 : -1;
        } else if (i >= n) {
            i = st > 0 ? n : n - 1;
        }
        *ends[k] = i;
    }
    size_t count = 0;
    if (st > 0 && hi > lo)
        count = (size_t)((hi - lo + st - 1) / st);
    else if (st < 0 && lo > hi)
        count = (size_t)((lo - hi + (-st) - 1) / (-st));
    if (seq.kind == JV_STR) {
        struct jbuf b;
        jb_init(&b, r->a, r->t->lim.max_output);
        if (st == 1) {
            size_t bo = u8_offset(seq.u.str.s, seq.u.str.n, (size_t)lo);
            size_t eo = count ? u8_offset(seq.u.str.s, seq.u.str.n, (size_t)hi) : bo;
            *out = jv_str(seq.u.str.s + bo, eo - bo);
            out->flags = seq.flags & JV_MARKUP;
            return PI_OK;
        }
        for (size_t k = 0; k < count; k++) {
            size_t i = (size_t)(lo + (int64_t)k * st);
            size_t bo = u8_offset(seq.u.str.s, seq.u.str.n, i);
            size_t eo = u8_offset(seq.u.str.s, seq.u.str.n, i + 1);
            PI_TRY(jb_put(&b, seq.u.str.s + bo, eo - bo));
        }
        *out = jb_value(&b);
        return PI_OK;
    }
    struct jlist *l = jl_new(r->a, count, NULL);
    if (!l)
        return ja_status(r->a);
    for (size_t k = 0; k < count; k++)
        l->v[k] = seq.u.list->v[lo + (int64_t)k * st];
    out->kind = JV_LIST;
    out->flags = seq.flags & JV_TUPLE;
    out->u.list = l;
    return PI_OK;
}

/* Arguments of a call node, evaluated. */
static int eval_args(struct jrender *r, const struct jnode *x, struct jargs *args) {
    jv *v = NULL;
    size_t total = (size_t)x->nkids + x->nkids2;
    if (total) {
        v = ja_alloc(r->a, total * sizeof *v);
        if (!v)
            return ja_status(r->a);
    }
    for (uint32_t i = 0; i < x->nkids; i++)
        PI_TRY(eval(r, x->kids[i], &v[i]));
    for (uint32_t i = 0; i < x->nkids2; i++)
        PI_TRY(eval(r, x->kids2[i], &v[x->nkids + i]));
    args->pos = v;
    args->npos = x->nkids;
    args->kwn = x->names;
    args->kwv = v ? v + x->nkids : NULL;
    args->nkw = x->nkids2;
    return PI_OK;
}

/* Render kids into a new text with the output swapped. */
static int capture(struct jrender *r, struct jnode *const *kids, uint32_t n, jv *out) {
    struct jbuf b, *saved = r->out;
    jb_init(&b, r->a, r->t->lim.max_output);
    r->out = &b;
    int st = exec_body(r, kids, n);
    r->out = saved;
    if (st < 0)
        return st;
    *out = jb_value(&b);
    return st; /* EX_BREAK / EX_CONTINUE pass through */
}

static int call_macro(struct jrender *r, const struct jfunc *f, const struct jargs *args, jv *out) {
    const struct jnode *m = f->macro;
    if (r->calls >= r->t->lim.max_calls)
        return pi_error_set(r->err, PI_ERR_RANGE, "macros nested more than %d calls deep",
                            r->t->lim.max_calls);
    PI_TRY(jr_step(r, 1));
    if (args->npos > m->nnames)
        return jr_fail(r, "macro '%.*s' takes not more than %u argument(s)", (int)m->val.u.str.n,
                       m->val.u.str.s, m->nnames);
    struct jscope *scope = NULL, *saved = r->scope;
    PI_TRY(scope_push(r, f->closure, &scope));
    r->scope = scope;
    int st = PI_OK;
    char *given = ja_alloc(r->a, m->nnames + 1);
    if (!given) {
        r->scope = saved;
        return ja_status(r->a);
    }
    memset(given, 0, m->nnames + 1);
    for (size_t i = 0; i < args->npos && st == PI_OK; i++) {
        st = assign(r, m->names[i], args->pos[i]);
        given[i] = 1;
    }
    for (size_t k = 0; k < args->nkw && st == PI_OK; k++) {
        uint32_t i = 0;
        while (i < m->nnames && !jv_eq(m->names[i], args->kwn[k]))
            i++;
        if (i == m->nnames)
            st = jr_fail(r, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->val.u.str.n,
                         m->val.u.str.s, (int)args->kwn[k].u.str.n, args->kwn[k].u.str.s);
        else if (given[i])
            st = jr_fail(r, "macro '%.*s' got multiple values for argument '%.*s'",
                         (int)m->val.u.str.n, m->val.u.str.s, (int)args->kwn[k].u.str.n,
                         args->kwn[k].u.str.s);
        else {
            st = assign(r, m->names[i], args->kwv[k]);
            given[i] = 1;
        }
    }
    for (uint32_t i = 0; i < m->nnames && st == PI_OK; i++) {
        if (given[i])
            continue;
        jv v = undef_named(m->names[i]);
        if (m->kids2[i])
            st = eval(r, m->kids2[i], &v);
        if (st == PI_OK)
            st = assign(r, m->names[i], v);
    }
    if (st == PI_OK) {
        r->calls++;
        st = capture(r, m->kids, m->nkids, out);
        r->calls--;
    }
    r->scope = saved;
    return st;
}

int jr_call(struct jrender *r, jv fn, const struct jargs *args, jv *out) {
    if (fn.kind == JV_UNDEF)
        return jr_undefined_error(r, fn);
    if (fn.kind != JV_FUNC)
        return jr_fail(r, "'%s' object is not callable", jv_type_name(fn));
    const struct jfunc *f = fn.u.fn;
    switch (f->kind) {
    case JF_MACRO:
        return call_macro(r, f, args, out);
    case JF_GLOBAL:
        return jlib_call_global(r, f->id, args, out);
    case JF_METHOD:
        return jlib_call_method(r, f, args, out);
    default: /* loop.cycle */
        if (args->npos == 0)
            return jr_fail(r, "no items for cycling given");
        *out = args->pos[f->self.u.loop->index0 % args->npos];
        return PI_OK;
    }
}

static int eval_inner(struct jrender *r, const struct jnode *x, jv *out) {
    switch (x->kind) {
    case E_CONST:
        *out = x->val;
        return PI_OK;
    case E_NAME:
        return lookup(r, x->val, out);
    case E_BLOCKVAL:
        *out = r->blockval;
        return PI_OK;
    case E_ATTR: {
        jv obj;
        PI_TRY(eval(r, x->a, &obj));
        r->pos = x->pos;
        return jr_getattr(r, obj, x->val, out);
    }
    case E_ITEM: {
        jv obj, key;
        PI_TRY(eval(r, x->a, &obj));
        PI_TRY(eval(r, x->b, &key));
        r->pos = x->pos;
        return jr_getitem(r, obj, key, out);
    }
    case E_SLICE: {
        jv obj, parts[3];
        PI_TRY(eval(r, x->a, &obj));
        for (int k = 0; k < 3; k++) {
            parts[k] = jv_none();
            if (x->kids[k])
                PI_TRY(eval(r, x->kids[k], &parts[k]));
        }
        r->pos = x->pos;
        if (obj.kind == JV_UNDEF)
            return jr_undefined_error(r, obj);
        if ((obj.kind != JV_STR && obj.kind != JV_LIST) ||
            (obj.kind == JV_LIST && (obj.flags & (JV_GEN | JV_VIEW)))) {
            *out = jv_undef();
            return PI_OK;
        }
        return slice_of(r, obj, parts[0], parts[1], parts[2], out);
    }
    case E_CALL: {
        jv fn;
        struct jargs args;
        PI_TRY(eval(r, x->a, &fn));
        PI_TRY(eval_args(r, x, &args));
        r->pos = x->pos;
        return jr_call(r, fn, &args, out);
    }
    case E_FILTER: {
        jv in;
        struct jargs args;
        if (x->op == JINJA_UNKNOWN)
            return jr_fail(r, "No filter named '%.*s' found.", (int)x->val.u.str.n, x->val.u.str.s);
        PI_TRY(eval(r, x->a, &in));
        PI_TRY(eval_args(r, x, &args));
        r->pos = x->pos;
        return jlib_filter(r, x->op, in, &args, out);
    }
    case E_TEST: {
        jv in;
        struct jargs args;
        int res;
        if (x->op == JINJA_UNKNOWN)
            return jr_fail(r, "No test named '%.*s' found.", (int)x->val.u.str.n, x->val.u.str.s);
        PI_TRY(eval(r, x->a, &in));
        PI_TRY(eval_args(r, x, &args));
        r->pos = x->pos;
        PI_TRY(jlib_test(r, x->op, in, &args, &res));
        *out = jv_bool(x->flag ? !res : res);
        return PI_OK;
    }
    case E_UNARY: {
        jv v;
        PI_TRY(eval(r, x->a, &v));
        r->pos = x->pos;
        if (x->op == 'n') {
            *out = jv_bool(!jv_truthy(v));
            return PI_OK;
        }
        if (v.kind == JV_UNDEF)
            return jr_undefined_error(r, v);
        int fl;
        int64_t i;
        double f;
        if (!num_of(v, &fl, &i, &f))
            return jr_fail(r, "bad operand type for unary %c: '%s'", x->op, jv_type_name(v));
        if (x->op == '+')
            *out = fl ? jv_float(f) : jv_int(i);
        else if (fl)
            *out = jv_float(-f);
        else if (i == INT64_MIN)
            return overflow(r);
        else
            *out = jv_int(-i);
        return PI_OK;
    }
    case E_BINARY: {
        jv a, b;
        PI_TRY(eval(r, x->a, &a));
        PI_TRY(eval(r, x->b, &b));
        r->pos = x->pos;
        return arith(r, x->op, a, b, out);
    }
    case E_AND:
    case E_OR: {
        jv a;
        PI_TRY(eval(r, x->a, &a));
        if (jv_truthy(a) == (x->kind == E_OR)) {
            *out = a;
            return PI_OK;
        }
        return eval(r, x->b, out);
    }
    case E_COMPARE: {
        jv a, b;
        PI_TRY(eval(r, x->kids[0], &a));
        for (uint32_t i = 1; i < x->nkids; i++) {
            PI_TRY(eval(r, x->kids[i], &b));
            r->pos = x->kids[i]->pos;
            int res;
            PI_TRY(compare(r, x->ops[i - 1], a, b, &res));
            if (!res) {
                *out = jv_bool(0);
                return PI_OK;
            }
            a = b;
        }
        *out = jv_bool(1);
        return PI_OK;
    }
    case E_COND: {
        jv c;
        PI_TRY(eval(r, x->a, &c));
        if (jv_truthy(c))
            return eval(r, x->b, out);
        if (x->c)
            return eval(r, x->c, out);
        *out = jv_undef();
        return PI_OK;
    }
    case E_LIST:
    case E_TUPLE: {
        PI_TRY(jr_step(r, x->nkids));
        struct jlist *l = jl_new(r->a, x->nkids, NULL);
        if (!l)
            return ja_status(r->a);
        for (uint32_t i = 0; i < x->nkids; i++)
            PI_TRY(eval(r, x->kids[i], &l->v[i]));
        out->kind = JV_LIST;
        out->flags = x->kind == E_TUPLE ? JV_TUPLE : 0;
        out->u.list = l;
        return PI_OK;
    }
    case E_DICT: {
        PI_TRY(jr_step(r, x->nkids));
        struct jdict *d = jd_new(r->a, x->nkids);
        if (!d)
            return ja_status(r->a);
        for (uint32_t i = 0; i < x->nkids; i++) {
            jv k, v;
            PI_TRY(eval(r, x->kids[i], &k));
            PI_TRY(eval(r, x->kids2[i], &v));
            if ((k.kind == JV_LIST && !(k.flags & JV_TUPLE)) || k.kind == JV_DICT ||
                k.kind == JV_NS) {
                r->pos = x->kids[i]->pos;
                return jr_fail(r, "unhashable type: '%s'", jv_type_name(k));
            }
            PI_TRY(jd_set(r->a, d, k, v));
        }
        out->kind = JV_DICT;
        out->flags = 0;
        out->u.dict = d;
        return PI_OK;
    }
    default:
        return pi_error_set(r->err, PI_ERR_INTERNAL, "jinja: node %d is not an expression",
                            x->kind);
    }
}

static int enter(struct jrender *r, const struct jnode *x) {
    r->pos = x->pos;
    if (++r->depth > r->t->lim.max_depth)
        return pi_error_set(r->err, PI_ERR_RANGE,
                            "the template nests evaluation more than %d frames deep",
                            r->t->lim.max_depth);
    return PI_OK;
}

static int eval(struct jrender *r, const struct jnode *x, jv *out) {
    int st = enter(r, x);
    if (st == PI_OK)
        st = eval_inner(r, x, out);
    r->depth--;
    return st;
}

/* Bind for / set targets to v (unpacked when there are several). */
static int bind(struct jrender *r, const jv *names, uint32_t n, jv v) {
    if (n == 1)
        return assign(r, names[0], v);
    const struct jlist *items;
    if (v.kind == JV_UNDEF)
        return jr_undefined_error(r, v);
    PI_TRY(jr_iterate(r, v, &items));
    if (items->n != n)
        return jr_fail(r,
                       items->n > n ? "too many values to unpack (expected %u)"
                                    : "not enough values to unpack (expected %u)",
                       n);
    for (uint32_t i = 0; i < n; i++)
        PI_TRY(assign(r, names[i], items->v[i]));
    return PI_OK;
}

static int exec_for(struct jrender *r, const struct jnode *x) {
    jv seq;
    PI_TRY(eval(r, x->a, &seq));
    r->pos = x->pos;
    const struct jlist *items;
    PI_TRY(jr_iterate(r, seq, &items));
    struct jscope *scope = NULL, *saved = r->scope;
    PI_TRY(scope_push(r, saved, &scope));
    r->scope = scope;
    int st = PI_OK;
    if (x->b) { /* {% for x in xs if cond %}: loop over the items that pass */
        struct jlist *kept = jl_new(r->a, items->n, NULL);
        if (!kept)
            st = ja_status(r->a);
        size_t k = 0;
        for (size_t i = 0; st == PI_OK && i < items->n; i++) {
            jv c;
            st = jr_step(r, 1);
            if (st == PI_OK)
                st = bind(r, x->names, x->nnames, items->v[i]);
            if (st == PI_OK)
                st = eval(r, x->b, &c);
            if (st == PI_OK && jv_truthy(c))
                kept->v[k++] = items->v[i];
        }
        if (st == PI_OK) {
            kept->n = k;
            items = kept;
        }
    }
    struct jloop *loop = ja_alloc(r->a, sizeof *loop);
    if (!loop && st == PI_OK)
        st = ja_status(r->a);
    if (st == PI_OK) {
        loop->items = items;
        loop->index0 = 0;
        loop->depth = 1; /* loops are not recursive: depth is always 1 */
        jv lv = {JV_LOOP, 0, {0}};
        lv.u.loop = loop;
        for (size_t i = 0; i < items->n; i++) {
            loop->index0 = i;
            st = jr_step(r, 1);
            if (st == PI_OK)
                st = bind(r, x->names, x->nnames, items->v[i]);
            if (st == PI_OK)
                st = assign(r, jv_cstr("loop"), lv);
            if (st == PI_OK)
                st = exec_body(r, x->kids, x->nkids);
            if (st == EX_CONTINUE)
                st = PI_OK;
            if (st == EX_BREAK) {
                st = PI_OK;
                break;
            }
            if (st < 0)
                break;
        }
        if (st == PI_OK && items->n == 0)
            st = exec_body(r, x->kids2, x->nkids2);
    }
    r->scope = saved;
    return st;
}

static int exec_stmt(struct jrender *r, const struct jnode *x) {
    switch (x->kind) {
    case S_TEXT:
        return jb_put(r->out, x->val.u.str.s, x->val.u.str.n);
    case S_OUT: {
        jv v;
        PI_TRY(eval(r, x->a, &v));
        return jv_put_str(r->out, v);
    }
    case S_IF: {
        jv c;
        PI_TRY(eval(r, x->a, &c));
        if (jv_truthy(c))
            return exec_body(r, x->kids, x->nkids);
        return exec_body(r, x->kids2, x->nkids2);
    }
    case S_FOR:
        return exec_for(r, x);
    case S_SET: {
        jv v;
        PI_TRY(eval(r, x->b, &v));
        r->pos = x->pos;
        if (!x->flag)
            return bind(r, x->names, x->nnames, v);
        jv ns;
        PI_TRY(lookup(r, x->names[0], &ns));
        if (ns.kind != JV_NS)
            return jr_fail(r, "cannot assign attribute on non-namespace object");
        if (x->val.u.str.n && x->val.u.str.s[0] == '_')
            return jr_fail(r, "a namespace attribute may not start with '_': '%.*s'",
                           (int)x->val.u.str.n, x->val.u.str.s);
        return jd_set(r->a, ns.u.dict, x->val, v);
    }
    case S_SETBLOCK:
    case S_FILTER: {
        jv v;
        int st = capture(r, x->kids, x->nkids, &v);
        if (st != PI_OK)
            return st;
        if (x->a) {
            jv saved = r->blockval;
            r->blockval = v;
            st = eval(r, x->a, &v);
            r->blockval = saved;
            PI_TRY(st);
        }
        if (x->kind == S_FILTER)
            return jv_put_str(r->out, v);
        return assign(r, x->names[0], v);
    }
    case S_MACRO: {
        struct jfunc *f = ja_alloc(r->a, sizeof *f);
        if (!f)
            return ja_status(r->a);
        memset(f, 0, sizeof *f);
        f->kind = JF_MACRO;
        f->macro = x;
        f->closure = r->scope;
        f->name = x->val.u.str.s;
        f->name_n = x->val.u.str.n;
        jv v = {JV_FUNC, 0, {0}};
        v.u.fn = f;
        return assign(r, x->val, v);
    }
    case S_BREAK:
        return EX_BREAK;
    case S_CONTINUE:
        return EX_CONTINUE;
    case S_BLOCK:
        return exec_body(r, x->kids, x->nkids);
    default:
        return pi_error_set(r->err, PI_ERR_INTERNAL, "jinja: node %d is not a statement", x->kind);
    }
}

static int exec_body(struct jrender *r, struct jnode *const *kids, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        int st = enter(r, kids[i]);
        if (st == PI_OK)
            st = exec_stmt(r, kids[i]);
        r->depth--;
        if (st != PI_OK)
            return st;
    }
    return PI_OK;
}

int jinja_render(const struct jtemplate *t, struct jarena *arena, const struct jdict *vars,
                 int64_t now, jv *out, struct pi_error *err) {
    struct jrender r;
    memset(&r, 0, sizeof r);
    r.t = t;
    r.a = arena;
    r.err = err;
    r.vars = vars;
    r.now = now;
    r.blockval = jv_undef();
    struct jbuf b;
    jb_init(&b, arena, t->lim.max_output);
    r.out = &b;
    PI_TRY(scope_push(&r, NULL, &r.scope));
    int st = exec_body(&r, t->root->kids, t->root->nkids);
    if (st > 0)
        return pi_error_set(err, PI_ERR_INTERNAL, "jinja: a loop control outside a loop");
    PI_TRY(st);
    *out = jb_value(&b);
    return PI_OK;
}
