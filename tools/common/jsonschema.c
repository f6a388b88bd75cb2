/* jsonschema.c -- JSON Schema -> GBNF (see jsonschema.h for what is supported).
 *
 * Each schema node becomes a rule "rN" (N in order of creation); a $ref target gets one
 * rule however often it is referenced, made the first time (its number is known before
 * its body is written, so recursive schemas refer to themselves). The shared pieces of
 * JSON (ws, string, number, any value, ...) are written once at the end, those used.
 *
 * Object members follow the schema's order. For members p0..pn-1 the rules first(i)
 * ("the members from i on, none written yet") and after(i) ("from i on, one already
 * written: each starts with a comma") make optional members optional without any
 * ambiguity about commas:
 *     first(i) = kv(i) after(i+1) | first(i+1)      (p_i optional; without "| ..." if
 *     after(i) = "," kv(i) after(i+1) | after(i+1)   required)
 * and first(n), after(n) are empty (or the additional members, when allowed). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonschema.h"

struct sb {
    char *p;
    size_t n, cap;
    int oom;
};

static void sb_add(struct sb *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(struct sb *b, const char *s) {
    sb_add(b, s, strlen(s));
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
sb_printf(struct sb *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

enum {
    P_WS = 1 << 0,
    P_VALUE = 1 << 1,
    P_STRING = 1 << 2,
    P_NUMBER = 1 << 3,
    P_INTEGER = 1 << 4,
    P_BOOLEAN = 1 << 5,
    P_NULL = 1 << 6,
    P_CHAR = 1 << 7,
    P_DATE = 1 << 8,
    P_TIME = 1 << 9,
    P_UUID = 1 << 10
};

#define MAX_REFS 256

struct conv {
    const cJSON *root;
    struct sb out;
    char *err;
    size_t err_cap;
    int failed;
    int n_rules;
    unsigned prim;
    const cJSON *ref_node[MAX_REFS];
    int ref_id[MAX_REFS];
    int n_refs;
    cJSON *owned[MAX_REFS]; /* merged allOf schemas, freed at the end */
    int n_owned;
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
fail(struct conv *c, const char *path, const char *fmt, ...) {
    if (c->failed)
        return -1;
    c->failed = 1;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->err_cap, "%s (at %s)", msg, path[0] ? path : "#");
    return -1;
}

static const char *const ANNOTATIONS[] = {
    "title",    "description", "examples",   "default",  "$schema",   "$id",
    "$comment", "strict",      "deprecated", "readOnly", "writeOnly", NULL,
};
static const char *const KEYWORDS[] = {
    "type",   "properties",  "required",    "additionalProperties",
    "items",  "prefixItems", "minItems",    "maxItems",
    "enum",   "const",       "anyOf",       "oneOf",
    "allOf",  "$ref",        "minLength",   "maxLength",
    "format", "$defs",       "definitions", NULL,
};

static int in_list(const char *const *list, const char *k) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k))
            return 1;
    return 0;
}

/* A GBNF string literal of the bytes s[0..n). */
static void lit(struct sb *b, const char *s, size_t n) {
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            sb_add(b, e, 2);
        } else if (ch < 0x20 || ch == 0x7F) {
            sb_printf(b, "\\x%02X", ch);
        } else {
            sb_add(b, (const char *)&ch, 1);
        }
    }
    sb_add(b, "\"", 1);
}

/* Exactly the JSON value v: scalars as written compactly, arrays and objects (members in
 * their order) with whitespace allowed between tokens. */
static int lit_json(struct conv *c, struct sb *b, const cJSON *v, const char *path) {
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        const int obj = cJSON_IsObject(v);
        c->prim |= P_WS;
        sb_puts(b, obj ? "(\"{\" ws" : "(\"[\" ws");
        for (const cJSON *e = v->child; e; e = e->next) {
            if (e != v->child)
                sb_puts(b, " \",\" ws");
            if (obj) {
                cJSON *key = cJSON_CreateString(e->string);
                char *kt = key ? cJSON_PrintUnformatted(key) : NULL;
                cJSON_Delete(key);
                if (!kt)
                    return fail(c, path, "out of memory");
                sb_puts(b, " ");
                lit(b, kt, strlen(kt));
                free(kt);
                sb_puts(b, " ws \":\" ws");
            }
            sb_puts(b, " ");
            if (lit_json(c, b, e, path))
                return -1;
            sb_puts(b, " ws");
        }
        sb_puts(b, obj ? " \"}\")" : " \"]\")");
        return 0;
    }
    char *t = cJSON_PrintUnformatted(v);
    if (!t)
        return fail(c, path, "out of memory");
    lit(b, t, strlen(t));
    free(t);
    return 0;
}

static int gen(struct conv *c, const cJSON *node, int depth, const char *path);

static void child_path(char *dst, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(dst, cap, "%s/%s%s%s", path[0] ? path : "#", a, b ? "/" : "", b ? b : "");
}

static int get_count(struct conv *c, const cJSON *node, const char *key, int dflt, int *out,
                     const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != (double)(int)v->valuedouble)
        return fail(c, path, "'%s' must be a non-negative integer", key);
    if (v->valuedouble > 1000)
        return fail(c, path, "'%s' above 1000 is not supported", key);
    *out = (int)v->valuedouble;
    return 0;
}

/* `("," ws X ws){lo,hi}` (hi < 0: unbounded); nothing for {0,0}. */
static void repeat_tail(struct sb *b, const char *x, int lo, int hi) {
    if (hi == 0)
        return;
    sb_printf(b, " (\",\" ws %s ws)", x);
    if (hi < 0 && lo == 0)
        sb_puts(b, "*");
    else if (hi < 0)
        sb_printf(b, "{%d,}", lo);
    else
        sb_printf(b, "{%d,%d}", lo, hi);
}

static int array_body(struct conv *c, const cJSON *node, int depth, const char *path,
                      struct sb *b) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(node, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(node, "prefixItems");
    int lo = 0, hi = -1;
    if (get_count(c, node, "minItems", 0, &lo, path) ||
        get_count(c, node, "maxItems", -1, &hi, path))
        return -1;
    if (hi >= 0 && hi < lo)
        return fail(c, path, "maxItems below minItems");
    char item[32] = "value", cp[256];
    int no_items = cJSON_IsFalse(items);
    if (items && !cJSON_IsTrue(items) && !no_items) {
        child_path(cp, sizeof cp, path, "items", NULL);
        int id = gen(c, items, depth + 1, cp);
        if (id < 0)
            return -1;
        snprintf(item, sizeof item, "r%d", id);
    } else if (!no_items) {
        c->prim |= P_VALUE;
    }
    int k = 0, opens = 0;
    if (prefix && !cJSON_IsArray(prefix))
        return fail(c, path, "'prefixItems' must be an array");
    k = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (no_items) {
        if (lo > k)
            return fail(c, path, "minItems above the items allowed ('items': false)");
        hi = hi < 0 || hi > k ? k : hi;
    }
    sb_puts(b, "\"[\" ws");
    /* prefix items past minItems (and past maxItems: none) may be left out, from the end */
    int i = 0;
    for (const cJSON *p = prefix ? prefix->child : NULL; p && (hi < 0 || i < hi);
         p = p->next, i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        child_path(cp, sizeof cp, path, "prefixItems", idx);
        int id = gen(c, p, depth + 1, cp);
        if (id < 0)
            return -1;
        if (i >= lo)
            sb_puts(b, " ("), opens++;
        sb_printf(b, i ? " \",\" ws r%d ws" : " r%d ws", id);
    }
    if (k > 0) {
        if (i == k) /* then the items after them */
            repeat_tail(b, item, lo > k ? lo - k : 0, hi < 0 ? -1 : hi - k);
        for (; opens; opens--)
            sb_puts(b, ")?");
    } else if (hi != 0) {
        if (lo == 0)
            sb_printf(b, " (%s ws", item);
        else
            sb_printf(b, " %s ws", item);
        repeat_tail(b, item, lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
        if (lo == 0)
            sb_puts(b, ")?");
    }
    sb_puts(b, " \"]\"");
    return 0;
}

/* One rule of the first/after chain (see the top of the file). */
static int new_rule(struct conv *c) {
    return c->n_rules++;
}

static int object_body(struct conv *c, const cJSON *node, int depth, const char *path,
                       struct sb *b) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(node, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(node, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(node, "additionalProperties");
    char cp[256];
    if (props && !cJSON_IsObject(props))
        return fail(c, path, "'properties' must be an object");
    if (req && !cJSON_IsArray(req))
        return fail(c, path, "'required' must be an array");
    const int n = props ? cJSON_GetArraySize(props) : 0;
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r))
            return fail(c, path, "'required' must list strings");
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return fail(c, path, "required property '%.64s' is not in 'properties'",
                        r->valuestring);
    }
    /* additional members: none (false; or absent with properties), else of this value */
    char extra[32] = "";
    if (addl ? !cJSON_IsFalse(addl) : n == 0) {
        if (!addl || cJSON_IsTrue(addl)) {
            c->prim |= P_VALUE;
            snprintf(extra, sizeof extra, "value");
        } else {
            child_path(cp, sizeof cp, path, "additionalProperties", NULL);
            int id = gen(c, addl, depth + 1, cp);
            if (id < 0)
                return -1;
            snprintf(extra, sizeof extra, "r%d", id);
        }
        c->prim |= P_STRING;
    }
    c->prim |= P_WS;
    if (n == 0) {
        if (extra[0])
            sb_printf(
                b,
                "\"{\" ws (string ws \":\" ws %s ws (\",\" ws string ws \":\" ws %s ws)*)? \"}\"",
                extra, extra);
        else
            sb_puts(b, "\"{\" ws \"}\"");
        return 0;
    }
    /* kv(i): the members' rules, then first(i) / after(i) for i = n-1 .. 0 */
    int *kv = calloc((size_t)n, sizeof *kv);
    int *req_i = calloc((size_t)n, sizeof *req_i);
    struct sb rules = {0};
    if (!kv || !req_i) {
        free(kv);
        free(req_i);
        return fail(c, path, "out of memory");
    }
    int i = 0, st = 0;
    for (const cJSON *p = props->child; p && st == 0; p = p->next, i++) {
        child_path(cp, sizeof cp, path, "properties", p->string);
        int id = gen(c, p, depth + 1, cp);
        if (id < 0) {
            st = -1;
            break;
        }
        kv[i] = id;
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && !strcmp(r->valuestring, p->string))
                req_i[i] = 1;
    }
    int first_next = -1, after_next = -1; /* rules for i+1; -1: the end */
    for (i = n - 1; i >= 0 && st == 0; i--) {
        const cJSON *p = cJSON_GetArrayItem(props, i);
        cJSON *key = cJSON_CreateString(p->string);
        char *kt = key ? cJSON_PrintUnformatted(key) : NULL;
        cJSON_Delete(key);
        if (!kt) {
            st = fail(c, path, "out of memory");
            break;
        }
        struct sb kvs = {0};
        lit(&kvs, kt, strlen(kt));
        free(kt);
        sb_printf(&kvs, " ws \":\" ws r%d ws", kv[i]);
        char fn[48], an[48];
        if (first_next >= 0)
            snprintf(fn, sizeof fn, " r%d", first_next),
                snprintf(an, sizeof an, " r%d", after_next);
        else if (extra[0])
            snprintf(fn, sizeof fn, " r%d", first_next = new_rule(c)),
                snprintf(an, sizeof an, " r%d", after_next = new_rule(c)),
                sb_printf(
                    &rules,
                    "r%d ::= (string ws \":\" ws %s ws (\",\" ws string ws \":\" ws %s ws)*)?\n"
                    "r%d ::= (\",\" ws string ws \":\" ws %s ws)*\n",
                    first_next, extra, extra, after_next, extra);
        else
            fn[0] = an[0] = '\0';
        const int f = new_rule(c), a = new_rule(c);
        sb_printf(&rules, "r%d ::= %s%s", f, kvs.p ? kvs.p : "", an);
        if (!req_i[i])
            sb_printf(&rules, " | %s", fn[0] ? fn + 1 : "\"\"");
        sb_printf(&rules, "\nr%d ::= \",\" ws %s%s", a, kvs.p ? kvs.p : "", an);
        if (!req_i[i])
            sb_printf(&rules, " | %s", an[0] ? an + 1 : "\"\"");
        sb_puts(&rules, "\n");
        free(kvs.p);
        first_next = f;
        after_next = a;
    }
    if (st == 0) {
        sb_add(&c->out, rules.p ? rules.p : "", rules.n);
        sb_printf(b, "\"{\" ws r%d \"}\"", first_next);
    }
    free(rules.p);
    free(kv);
    free(req_i);
    return st;
}

static int string_body(struct conv *c, const cJSON *node, const char *path, struct sb *b) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(node, "format");
    int lo = 0, hi = -1;
    if (get_count(c, node, "minLength", 0, &lo, path) ||
        get_count(c, node, "maxLength", -1, &hi, path))
        return -1;
    if (hi >= 0 && hi < lo)
        return fail(c, path, "maxLength below minLength");
    if (fmt) {
        if (!cJSON_IsString(fmt))
            return fail(c, path, "'format' must be a string");
        if (lo || hi >= 0)
            return fail(c, path, "minLength / maxLength with a format are not supported");
        const char *f = fmt->valuestring;
        if (!strcmp(f, "date"))
            c->prim |= P_DATE, sb_puts(b, "\"\\\"\" date \"\\\"\"");
        else if (!strcmp(f, "time"))
            c->prim |= P_TIME, sb_puts(b, "\"\\\"\" time \"\\\"\"");
        else if (!strcmp(f, "date-time"))
            c->prim |= P_DATE | P_TIME, sb_puts(b, "\"\\\"\" date \"T\" time \"\\\"\"");
        else if (!strcmp(f, "uuid"))
            c->prim |= P_UUID, sb_puts(b, "\"\\\"\" uuid \"\\\"\"");
        else
            return fail(c, path, "format '%.64s' is not supported", f);
        return 0;
    }
    if (lo == 0 && hi < 0) {
        c->prim |= P_STRING;
        sb_puts(b, "string");
        return 0;
    }
    c->prim |= P_CHAR;
    if (hi < 0)
        sb_printf(b, "\"\\\"\" char{%d,} \"\\\"\"", lo);
    else
        sb_printf(b, "\"\\\"\" char{%d,%d} \"\\\"\"", lo, hi);
    return 0;
}

static const cJSON *resolve(struct conv *c, const cJSON *ref, const char *path) {
    if (!cJSON_IsString(ref))
        return fail(c, path, "'$ref' must be a string"), NULL;
    const char *r = ref->valuestring;
    if (!strcmp(r, "#"))
        return c->root;
    const char *name = NULL;
    const cJSON *defs = NULL;
    if (!strncmp(r, "#/$defs/", 8))
        name = r + 8, defs = cJSON_GetObjectItemCaseSensitive(c->root, "$defs");
    else if (!strncmp(r, "#/definitions/", 14))
        name = r + 14, defs = cJSON_GetObjectItemCaseSensitive(c->root, "definitions");
    else
        return fail(c, path,
                    "$ref '%.64s' is not supported (only #, #/$defs/NAME, "
                    "#/definitions/NAME)",
                    r),
               NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(defs, name);
    if (!t)
        return fail(c, path, "$ref '%.64s' names no definition", r), NULL;
    return t;
}

/* allOf of object schemas: one object schema with their properties and required. */
static const cJSON *merge_all_of(struct conv *c, const cJSON *all, const char *path) {
    if (c->n_owned >= MAX_REFS)
        return fail(c, path, "too many allOf"), NULL;
    cJSON *m = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    if (!m || !props || !req) {
        cJSON_Delete(m), cJSON_Delete(props), cJSON_Delete(req);
        return fail(c, path, "out of memory"), NULL;
    }
    c->owned[c->n_owned++] = m;
    cJSON_AddItemToObject(m, "type", cJSON_CreateString("object"));
    cJSON_AddItemToObject(m, "properties", props);
    cJSON_AddItemToObject(m, "required", req);
    cJSON_AddItemToObject(m, "additionalProperties", cJSON_CreateFalse());
    for (const cJSON *s = all->child; s; s = s->next) {
        const cJSON *t = s;
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (ref && !(t = resolve(c, ref, path)))
            return NULL;
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *tp = cJSON_GetObjectItemCaseSensitive(t, "properties");
        if (!cJSON_IsObject(t) ||
            (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "object"))) || !tp)
            return fail(c, path, "allOf is supported for object schemas with properties only"),
                   NULL;
        for (const cJSON *k = t->child; k; k = k->next)
            if (!in_list(ANNOTATIONS, k->string) && strcmp(k->string, "type") &&
                strcmp(k->string, "properties") && strcmp(k->string, "required") &&
                strcmp(k->string, "additionalProperties"))
                return fail(c, path, "keyword '%.64s' inside allOf is not supported", k->string),
                       NULL;
        for (const cJSON *p = tp->child; p; p = p->next) {
            cJSON_DeleteItemFromObjectCaseSensitive(props, p->string);
            cJSON_AddItemToObject(props, p->string, cJSON_Duplicate(p, 1));
        }
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(t, "required");
        for (const cJSON *r = tr ? tr->child : NULL; r; r = r->next)
            if (cJSON_IsString(r))
                cJSON_AddItemToArray(req, cJSON_CreateString(r->valuestring));
    }
    return m;
}

/* The alternatives of `node`'s rule into b. */
static int body(struct conv *c, const cJSON *node, int depth, const char *path, struct sb *b) {
    if (cJSON_IsTrue(node)) {
        c->prim |= P_VALUE;
        sb_puts(b, "value");
        return 0;
    }
    if (!cJSON_IsObject(node))
        return fail(c, path,
                    cJSON_IsFalse(node) ? "schema false allows nothing"
                                        : "a schema must be an object or a boolean");
    int n_kw = 0;
    for (const cJSON *k = node->child; k; k = k->next) {
        if (in_list(ANNOTATIONS, k->string))
            continue;
        if (!in_list(KEYWORDS, k->string))
            return fail(c, path, "keyword '%.64s' is not supported", k->string);
        if (strcmp(k->string, "$defs") && strcmp(k->string, "definitions"))
            n_kw++;
    }
    const cJSON *v;
    char cp[256];
    if ((v = cJSON_GetObjectItemCaseSensitive(node, "enum")) ||
        (v = cJSON_GetObjectItemCaseSensitive(node, "const"))) {
        int is_enum = !strcmp(v->string, "enum");
        if (is_enum && (!cJSON_IsArray(v) || !v->child))
            return fail(c, path, "'enum' must be a non-empty array");
        for (const cJSON *e = is_enum ? v->child : v; e; e = is_enum ? e->next : NULL) {
            if (e != (is_enum ? v->child : v))
                sb_puts(b, " | ");
            if (lit_json(c, b, e, path))
                return -1;
        }
        return 0;
    }
    const char *comb = cJSON_GetObjectItemCaseSensitive(node, "anyOf")   ? "anyOf"
                       : cJSON_GetObjectItemCaseSensitive(node, "oneOf") ? "oneOf"
                       : cJSON_GetObjectItemCaseSensitive(node, "allOf") ? "allOf"
                                                                         : NULL;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(node, "$ref");
    if ((comb || ref) && n_kw > 1)
        return fail(c, path, "'%s' with other keywords beside it is not supported",
                    comb ? comb : "$ref");
    if (ref) {
        const cJSON *t = resolve(c, ref, path);
        if (!t)
            return -1;
        int id = gen(c, t, depth + 1, ref->valuestring);
        if (id < 0)
            return -1;
        sb_printf(b, "r%d", id);
        return 0;
    }
    if (comb) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(node, comb);
        if (!cJSON_IsArray(list) || !list->child)
            return fail(c, path, "'%s' must be a non-empty array", comb);
        if (!strcmp(comb, "allOf")) {
            const cJSON *m = list->child->next ? merge_all_of(c, list, path) : list->child;
            if (!m)
                return -1;
            child_path(cp, sizeof cp, path, comb, NULL);
            int id = gen(c, m, depth + 1, cp);
            if (id < 0)
                return -1;
            sb_printf(b, "r%d", id);
            return 0;
        }
        int i = 0;
        for (const cJSON *s = list->child; s; s = s->next, i++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", i);
            child_path(cp, sizeof cp, path, comb, idx);
            int id = gen(c, s, depth + 1, cp);
            if (id < 0)
                return -1;
            sb_printf(b, i ? " | r%d" : "r%d", id);
        }
        return 0;
    }
    /* the types: named, or inferred from the keywords */
    const char *types[8];
    int n_types = 0;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (cJSON_IsString(ty)) {
        types[n_types++] = ty->valuestring;
    } else if (cJSON_IsArray(ty)) {
        for (const cJSON *t = ty->child; t; t = t->next) {
            if (!cJSON_IsString(t) || n_types == 7)
                return fail(c, path, "'type' must list type names");
            types[n_types++] = t->valuestring;
        }
    } else if (ty) {
        return fail(c, path, "'type' must be a string or an array of strings");
    } else if (cJSON_GetObjectItemCaseSensitive(node, "properties") ||
               cJSON_GetObjectItemCaseSensitive(node, "additionalProperties") ||
               cJSON_GetObjectItemCaseSensitive(node, "required")) {
        types[n_types++] = "object";
    } else if (cJSON_GetObjectItemCaseSensitive(node, "items") ||
               cJSON_GetObjectItemCaseSensitive(node, "prefixItems") ||
               cJSON_GetObjectItemCaseSensitive(node, "minItems") ||
               cJSON_GetObjectItemCaseSensitive(node, "maxItems")) {
        types[n_types++] = "array";
    } else if (cJSON_GetObjectItemCaseSensitive(node, "minLength") ||
               cJSON_GetObjectItemCaseSensitive(node, "maxLength") ||
               cJSON_GetObjectItemCaseSensitive(node, "format")) {
        types[n_types++] = "string";
    }
    if (n_types == 0) {
        c->prim |= P_VALUE;
        sb_puts(b, "value");
        return 0;
    }
    for (int i = 0; i < n_types; i++) {
        const char *t = types[i];
        if (i)
            sb_puts(b, " | ");
        int st = 0;
        if (!strcmp(t, "string"))
            st = string_body(c, node, path, b);
        else if (!strcmp(t, "object"))
            st = object_body(c, node, depth, path, b);
        else if (!strcmp(t, "array"))
            st = array_body(c, node, depth, path, b);
        else if (!strcmp(t, "number"))
            c->prim |= P_NUMBER, sb_puts(b, "number");
        else if (!strcmp(t, "integer"))
            c->prim |= P_INTEGER, sb_puts(b, "integer");
        else if (!strcmp(t, "boolean"))
            c->prim |= P_BOOLEAN, sb_puts(b, "boolean");
        else if (!strcmp(t, "null"))
            c->prim |= P_NULL, sb_puts(b, "null");
        else
            return fail(c, path, "unknown type '%.64s'", t);
        if (st)
            return -1;
    }
    return 0;
}

/* The rule number of `node` (made now, or earlier for a $ref target), or -1. */
static int gen(struct conv *c, const cJSON *node, int depth, const char *path) {
    if (c->failed)
        return -1;
    if (depth > JS_MAX_DEPTH)
        return fail(c, path, "schema nested deeper than %d", JS_MAX_DEPTH);
    const int is_target = cJSON_IsObject(node) && node->string && node != c->root;
    if (node == c->root || is_target) { /* a possible $ref target: once */
        for (int i = 0; i < c->n_refs; i++)
            if (c->ref_node[i] == node)
                return c->ref_id[i];
    }
    const int id = new_rule(c);
    if (node == c->root || is_target) {
        if (c->n_refs >= MAX_REFS)
            return fail(c, path, "schema too large");
        c->ref_node[c->n_refs] = node;
        c->ref_id[c->n_refs++] = id;
    }
    struct sb b = {0};
    int st = body(c, node, depth, path, &b);
    if (st == 0 && b.oom)
        st = fail(c, path, "out of memory");
    if (st == 0)
        sb_printf(&c->out, "r%d ::= %s\n", id, b.p);
    free(b.p);
    return st ? -1 : id;
}

static const char PRIMS[][400] = {
    "ws ::= [ \\t\\n\\r]{0,64}\n",
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? "
    "\"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n",
    "string ::= \"\\\"\" char* \"\\\"\"\n",
    "number ::= integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n",
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n",
    "boolean ::= \"true\" | \"false\"\n",
    "null ::= \"null\"\n",
    "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n",
    "date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" "
    "[01])\n",
    "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n",
    "uuid ::= [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} "
    "\"-\" [0-9a-fA-F]{12}\n",
};

char *json_schema_to_gbnf(const cJSON *schema, char *err, size_t err_cap) {
    char dummy[1];
    struct conv c = {
        .root = schema, .err = err_cap ? err : dummy, .err_cap = err_cap ? err_cap : 1};
    c.err[0] = '\0';
    if (!schema) {
        snprintf(c.err, c.err_cap, "no schema");
        return NULL;
    }
    /* leading whitespace, bounded; none after the value, so that once it is complete
     * only the end of generation can follow */
    sb_puts(&c.out, "root ::= ws r0\n");
    c.prim |= P_WS;
    int id = gen(&c, schema, 0, "#");
    for (int i = 0; i < c.n_owned; i++)
        cJSON_Delete(c.owned[i]);
    if (id < 0 || c.out.oom) {
        if (!c.failed)
            snprintf(c.err, c.err_cap, "out of memory");
        free(c.out.p);
        return NULL;
    }
    if (c.prim & P_VALUE)
        c.prim |= P_STRING | P_NUMBER;
    if (c.prim & (P_STRING))
        c.prim |= P_CHAR;
    if (c.prim & P_NUMBER)
        c.prim |= P_INTEGER;
    for (unsigned i = 0; i < sizeof PRIMS / sizeof *PRIMS; i++)
        if (c.prim & (1u << i))
            sb_puts(&c.out, PRIMS[i]);
    if (c.out.oom) {
        snprintf(c.err, c.err_cap, "out of memory");
        free(c.out.p);
        return NULL;
    }
    return c.out.p;
}
