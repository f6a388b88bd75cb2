/* The chat-template interpreter (lib/chat): real templates against transformers + jinja2
 * (tests/fixtures/jinja/conformance.json, made by fixtures/gen_jinja_fixtures.py), the
 * language construct by construct against what jinja2 renders, errors and their
 * messages, the limits, the JSON reader and writer, and failing allocations.
 *
 * Usage: test_jinja FIXTURE_DIR (tests/fixtures/jinja). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <pthread.h>

#include "chat/jinja.h"
#include "failalloc.h"
#include "chat/json.h"
#include "powerinfer.h"

static const char *g_dir;

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)len + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)len, f), (size_t)len);
    s[len] = '\0';
    fclose(f);
    if (n)
        *n = (size_t)len;
    return s;
}

static const jv *member(jv obj, const char *name) {
    assert_int_equal(obj.kind, JV_DICT);
    return jd_get_str(obj.u.dict, name, strlen(name));
}

/* A NUL-terminated copy of a string value. */
static char *cstr(jv v) {
    assert_int_equal(v.kind, JV_STR);
    char *s = malloc(v.u.str.n + 1);
    assert_non_null(s);
    memcpy(s, v.u.str.s, v.u.str.n);
    s[v.u.str.n] = '\0';
    return s;
}

/* Render `src` with data_json; returns the text (malloc) or NULL with *status / errbuf. */
static char *render(const char *src, const char *data, int64_t now, int *status, char *errbuf,
                    size_t errcap) {
    pi_chat_template *t;
    *status = pi_chat_template_create(NULL, src, &t, errbuf, errcap);
    if (*status != PI_OK) {
        assert_null(t);
        return NULL;
    }
    int64_t n = pi_chat_template_render(t, data, now, NULL, 0, errbuf, errcap);
    if (n < 0) {
        *status = (int)n;
        pi_chat_template_destroy(t);
        return NULL;
    }
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(pi_chat_template_render(t, data, now, buf, (size_t)n + 1, NULL, 0), n);
    pi_chat_template_destroy(t);
    return buf;
}

/* ---- conformance on real templates -------------------------------------------------- */

static void test_real_templates(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/conformance.json", g_dir);
    size_t n = 0;
    char *text = slurp(path, &n);
    assert_non_null(text);
    struct pi_error err = {PI_OK, ""};
    struct jarena a;
    ja_init(&a, &pi_default_allocator, (size_t)1 << 30, &err);
    jv fx;
    assert_int_equal(json_parse(&a, text, n, &fx, &err), PI_OK);
    const jv *convs = member(fx, "conversations"), *tmpls = member(fx, "templates");
    assert_non_null(convs);
    assert_non_null(tmpls);
    int cases = 0, same = 0, texts = 0, raised = 0, errors = 0, shown = 0;
    for (size_t k = 0; k < tmpls->u.list->n; k++) {
        jv t = tmpls->u.list->v[k];
        char *file = cstr(*member(t, "file"));
        snprintf(path, sizeof path, "%s/templates/%s", g_dir, file);
        char *src = slurp(path, NULL);
        assert_non_null(src);
        pi_chat_template *tp;
        char msg[512];
        int st = pi_chat_template_create(NULL, src, &tp, msg, sizeof msg);
        const jv *compile_error = member(t, "compile_error");
        if (compile_error) {
            cases++;
            if (st < 0)
                same++;
            else
                fprintf(stderr, "# %s: jinja2 cannot compile it (%.*s), we can\n", file,
                        (int)compile_error->u.str.n, compile_error->u.str.s);
            pi_chat_template_destroy(tp);
            free(file);
            free(src);
            continue;
        }
        if (st < 0) {
            fprintf(stderr, "# %s: does not parse: %s\n", file, msg);
            cases += (int)member(t, "cases")->u.list->n;
            free(file);
            free(src);
            continue;
        }
        const struct jlist *cl = member(t, "cases")->u.list;
        for (size_t c = 0; c < cl->n; c++) {
            jv cs = cl->v[c];
            int64_t conv = member(cs, "conv")->u.i, now = member(cs, "now")->u.i;
            char *data = cstr(convs->u.list->v[conv]);
            const jv *want = member(cs, "text"), *want_raise = member(cs, "raise");
            int64_t len = pi_chat_template_render(tp, data, now, NULL, 0, msg, sizeof msg);
            cases++;
            int ok = 0;
            char *got = NULL;
            if (len >= 0) {
                got = malloc((size_t)len + 1);
                assert_non_null(got);
                assert_int_equal(
                    pi_chat_template_render(tp, data, now, got, (size_t)len + 1, NULL, 0), len);
            }
            if (want) {
                texts++;
                ok = got && (size_t)len == want->u.str.n &&
                     memcmp(got, want->u.str.s, (size_t)len) == 0;
            } else if (want_raise) {
                raised++;
                ok = len == PI_ERR_FORMAT && strlen(msg) == want_raise->u.str.n &&
                     memcmp(msg, want_raise->u.str.s, want_raise->u.str.n) == 0;
            } else {
                errors++;
                ok = len < 0 && len != PI_ERR_NOMEM && len != PI_ERR_INTERNAL;
            }
            same += ok;
            if (!ok && shown++ < 40) {
                fprintf(stderr, "# %s, conversation %lld, now %lld: ", file, (long long)conv,
                        (long long)now);
                if (want && got) {
                    size_t i = 0;
                    while (i < (size_t)len && i < want->u.str.n && got[i] == want->u.str.s[i])
                        i++;
                    size_t from = i > 40 ? i - 40 : 0;
                    fprintf(stderr, "differs at byte %zu\n#   ours   [%.*s]\n#   jinja2 [%.*s]\n",
                            i, (int)((size_t)len - from < 120 ? (size_t)len - from : 120),
                            got + from,
                            (int)(want->u.str.n - from < 120 ? want->u.str.n - from : 120),
                            want->u.str.s + from);
                } else if (want) {
                    fprintf(stderr, "we fail (%lld: %s), jinja2 renders\n", (long long)len, msg);
                } else if (want_raise) {
                    fprintf(stderr, "jinja2 raises [%.*s], we give %lld [%s]\n",
                            (int)want_raise->u.str.n, want_raise->u.str.s, (long long)len,
                            len < 0 ? msg : "(text)");
                } else {
                    fprintf(stderr, "jinja2 fails (%.*s), we %s\n",
                            (int)member(cs, "error")->u.str.n, member(cs, "error")->u.str.s,
                            len >= 0 ? "render" : msg);
                }
            }
            free(got);
            free(data);
        }
        pi_chat_template_destroy(tp);
        free(file);
        free(src);
    }
    fprintf(stderr,
            "# real templates: %zu templates, %d of %d (template, conversation) cases as "
            "jinja2 (%d texts byte for byte, %d raise_exception messages, %d other errors)\n",
            tmpls->u.list->n, same, cases, texts, raised, errors);
    size_t ntemplates = tmpls->u.list->n;
    ja_free(&a);
    free(text);
    assert_true(ntemplates >= 60);
    assert_int_equal(same, cases);
}

/* ---- the language, snippet by snippet (the fixture's "language" list) ----------------- */

static void test_language(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/conformance.json", g_dir);
    size_t n = 0;
    char *text = slurp(path, &n);
    assert_non_null(text);
    struct pi_error err = {PI_OK, ""};
    struct jarena a;
    ja_init(&a, &pi_default_allocator, (size_t)1 << 30, &err);
    jv fx;
    assert_int_equal(json_parse(&a, text, n, &fx, &err), PI_OK);
    const struct jlist *cases = member(fx, "language")->u.list;
    int same = 0;
    for (size_t k = 0; k < cases->n; k++) {
        jv c = cases->v[k];
        char *src = cstr(*member(c, "template")), *data = cstr(*member(c, "data"));
        int64_t now = member(c, "now")->u.i;
        const jv *want = member(c, "text"), *want_raise = member(c, "raise"),
                 *compile = member(c, "compile_error");
        int st;
        char msg[512] = "";
        char *got = render(src, data, now, &st, msg, sizeof msg);
        int ok;
        if (want)
            ok = got && strlen(got) == want->u.str.n &&
                 memcmp(got, want->u.str.s, want->u.str.n) == 0;
        else if (want_raise)
            ok = !got && st == PI_ERR_FORMAT && strlen(msg) == want_raise->u.str.n &&
                 memcmp(msg, want_raise->u.str.s, want_raise->u.str.n) == 0;
        else if (compile) {
            /* jinja2 refuses it when compiling: we must refuse it when parsing */
            pi_chat_template *t;
            ok = pi_chat_template_create(NULL, src, &t, NULL, 0) < 0;
            pi_chat_template_destroy(t);
        } else
            ok = !got && st < 0 && st != PI_ERR_NOMEM && st != PI_ERR_INTERNAL && msg[0];
        same += ok;
        if (!ok)
            fprintf(stderr, "# snippet %zu [%s]\n#   ours   [%s] (%d: %s)\n#   jinja2 [%.*s]\n", k,
                    src, got ? got : "(error)", got ? 0 : st, msg,
                    want         ? (int)want->u.str.n
                    : want_raise ? (int)want_raise->u.str.n
                                 : 5,
                    want         ? want->u.str.s
                    : want_raise ? want_raise->u.str.s
                                 : "error");
        free(got);
        free(src);
        free(data);
    }
    fprintf(stderr, "# language: %d of %zu snippets as jinja2\n", same, cases->n);
    size_t total = cases->n;
    ja_free(&a);
    free(text);
    assert_true(total >= 80);
    assert_int_equal(same, (int)total);
}

/* ---- errors ------------------------------------------------------------------------- */

static void expect_error(const char *src, const char *data, int status, const char *want) {
    int st;
    char msg[512] = "";
    char *got = render(src, data, -1, &st, msg, sizeof msg);
    if (got || st != status || !strstr(msg, want))
        fprintf(stderr, "# [%s]: %d [%s], want %d [%s]\n", src, got ? 0 : st, got ? got : msg,
                status, want);
    assert_null(got);
    assert_int_equal(st, status);
    assert_non_null(strstr(msg, want));
}

static void test_parse_errors(void **state) {
    (void)state;
    expect_error("{% if x %}\nabc", NULL, PI_ERR_FORMAT,
                 "line 2, column 4: unexpected end of template, expected 'elif' or 'else' or "
                 "'endif'");
    expect_error("{{ 1 + }}", NULL, PI_ERR_FORMAT,
                 "line 1, column 8: expected an expression, found end of print statement");
    expect_error("a\n  {{ x|nosuch }}", NULL, PI_ERR_FORMAT,
                 "line 2, column 8: no filter named 'nosuch'");
    expect_error("{{ x is nosuch }}", NULL, PI_ERR_FORMAT, "column 6: no test named 'nosuch'");
    expect_error("{% for x in l %}{% endif %}", NULL, PI_ERR_FORMAT,
                 "column 20: unknown or unexpected tag 'endif'");
    expect_error("{% frobnicate %}", NULL, PI_ERR_FORMAT, "unknown or unexpected tag 'frobnicate'");
    expect_error("x\n\n  {{ 'abc }}", NULL, PI_ERR_FORMAT,
                 "line 3, column 6: unexpected end of string literal");
    expect_error("{% for x in l %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", NULL,
                 PI_ERR_FORMAT, "'break' outside a loop");
    expect_error("{{ (1, 2 }}", NULL, PI_ERR_FORMAT, "column 11: unexpected '}'");
    expect_error("{% set x %}", NULL, PI_ERR_FORMAT, "expected 'endset'");
    expect_error("{% for x y %}", NULL, PI_ERR_FORMAT, "expected 'in', found 'y'");
    expect_error("{{ x ", NULL, PI_ERR_FORMAT, "unexpected end of template, expected '}}'");
    expect_error("{# open comment", NULL, PI_ERR_FORMAT, "missing end of comment tag");
    expect_error("{{ '\\x4' }}", NULL, PI_ERR_FORMAT, "truncated \\x escape");
    expect_error("{{ 99999999999999999999 }}", NULL, PI_ERR_FORMAT, "past 64 bits");
    expect_error("{{ f(*a) }}", NULL, PI_ERR_FORMAT, "*args and **kwargs are not supported");
    expect_error("{% for x in l recursive %}{% endfor %}", NULL, PI_ERR_FORMAT,
                 "recursive for loops are not supported");
    expect_error("\xff{{ 1 }}", NULL, PI_ERR_FORMAT, "not valid UTF-8");
}

static void test_render_errors(void **state) {
    (void)state;
    /* raise_exception's message is the template's, with nothing added */
    expect_error("{{ raise_exception('Roles must alternate') }}", NULL, PI_ERR_FORMAT,
                 "Roles must alternate");
    int st;
    char msg[512];
    assert_null(render("x{{ raise_exception('only this') }}", NULL, -1, &st, msg, sizeof msg));
    assert_string_equal(msg, "only this");
    expect_error("a\n\n{{ x.y }}", NULL, PI_ERR_FORMAT, "line 3: 'x' is undefined");
    expect_error("{{ 1 // 0 }}", NULL, PI_ERR_FORMAT, "line 1: integer division or modulo by zero");
    expect_error("{{ 'a' - 1 }}", NULL, PI_ERR_FORMAT,
                 "unsupported operand type(s) for -: 'str' and 'int'");
    expect_error("{{ l.append(1) }}", "{\"l\": []}", PI_ERR_FORMAT,
                 "access to attribute 'append' is unsafe");
    expect_error("{{ m|tojson }}", NULL, PI_ERR_FORMAT, "Undefined is not JSON serializable");
    expect_error("{% set ns = namespace() %}{% set ns._x = 1 %}", NULL, PI_ERR_FORMAT,
                 "may not start with '_'");
    expect_error("{{ namespace(_x=1) }}", NULL, PI_ERR_FORMAT, "underscore-prefixed");
    expect_error("{% if 1 %}{{ x|nosuch }}{% endif %}", NULL, PI_ERR_FORMAT,
                 "No filter named 'nosuch' found.");
    expect_error("{{ strftime_now('%Y') }}", NULL, PI_ERR_FORMAT, "'strftime_now' is undefined");
    expect_error("{{ 2 ** 64 }}", NULL, PI_ERR_FORMAT, "outside 64 bits");
    expect_error("{{ 9223372036854775807 + 1 }}", NULL, PI_ERR_FORMAT, "outside 64 bits");
}

static void test_limits(void **state) {
    (void)state;
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                 "{% endfor %}",
                 NULL, PI_ERR_RANGE, "steps");
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, PI_ERR_RANGE,
                 "macros nested more than");
    expect_error("{{ 'x' * 100000000000 }}", NULL, PI_ERR_RANGE, "bytes");
    expect_error("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", NULL,
                 PI_ERR_RANGE, "more than");
    expect_error("{% set ns = namespace(s='x' * 100000) %}{% for i in range(10000) %}"
                 "{% set ns.s = ns.s ~ 'y' %}{% endfor %}",
                 NULL, PI_ERR_RANGE, "memory");
    expect_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL, PI_ERR_RANGE,
                 "nested");
    expect_error("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns|tojson }}", NULL,
                 PI_ERR_FORMAT, "Namespace is not JSON serializable");
    /* deep statements and expressions: refused while parsing */
    char *src = malloc(20000);
    assert_non_null(src);
    src[0] = '\0';
    for (int i = 0; i < 500; i++)
        strcat(src, "{% if 1 %}");
    expect_error(src, NULL, PI_ERR_RANGE, "nested more than");
    memset(src, '(', 2000);
    src[2000] = '1';
    memset(src + 2001, ')', 2000);
    src[4001] = '\0';
    char *e = malloc(10020);
    assert_non_null(e);
    snprintf(e, 10020, "{{ %s }}", src);
    expect_error(e, NULL, PI_ERR_RANGE, "nested more than");
    memset(src, '-', 5000);
    memcpy(src + 5000, "1", 2);
    snprintf(e, 10020, "{{ %s }}", src);
    expect_error(e, NULL, PI_ERR_RANGE, "nested more than");
    free(e);
    free(src);
    /* nested JSON data */
    char *deep = malloc(1000);
    assert_non_null(deep);
    strcpy(deep, "{\"a\": ");
    for (int i = 0; i < 300; i++)
        strcat(deep, "[");
    expect_error("{{ a }}", deep, PI_ERR_INVALID_ARG, "nested too deep");
    free(deep);
}

/* ---- the API contract and JSON data -------------------------------------------------- */

static void test_api(void **state) {
    (void)state;
    pi_chat_template *t = (pi_chat_template *)1;
    char msg[64];
    assert_int_equal(pi_chat_template_create(NULL, NULL, &t, msg, sizeof msg), PI_ERR_INVALID_ARG);
    assert_null(t);
    assert_true(msg[0]);
    assert_int_equal(pi_chat_template_create(NULL, "x", NULL, NULL, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_chat_template_render(NULL, NULL, -1, NULL, 0, NULL, 0), PI_ERR_INVALID_ARG);
    pi_chat_template_destroy(NULL);
    assert_int_equal(pi_chat_template_create(NULL, "{{ a }}-{{ bos_token }}", &t, NULL, 0), PI_OK);
    char buf[8];
    assert_int_equal(pi_chat_template_render(t, "{}", -1, NULL, 4, NULL, 0), PI_ERR_INVALID_ARG);
    /* a short buffer: the full length, the text cut and terminated */
    assert_int_equal(
        pi_chat_template_render(t, "{\"a\": \"abcdefghij\"}", -1, buf, sizeof buf, NULL, 0), 11);
    assert_string_equal(buf, "abcdefg");
    assert_int_equal(pi_chat_template_render(t, NULL, -1, buf, sizeof buf, NULL, 0), 1);
    assert_string_equal(buf, "-");
    /* data that is not a JSON object */
    static const char *const bad[] = {"[1]",
                                      "",
                                      "{",
                                      "{\"a\" 1}",
                                      "{\"a\": 01}",
                                      "[1,]",
                                      "{\"a\": 1,}",
                                      "{\"a\": .5}",
                                      "{\"a\": 1.}",
                                      "{\"a\": -}",
                                      "{\"a\": tru}",
                                      "{\"a\": \"\\x\"}",
                                      "{\"a\": \"\t\"}",
                                      "{\"a\": \"\\u12\"}",
                                      "{\"a\": \"\\ud800\"}",
                                      "{\"a\": \"\\udc00\\ud800\"}",
                                      "{\"a\": \"\xc3\"}",
                                      "{\"a\": \"\xed\xa0\x80\"}",
                                      "{} {}",
                                      "{\"a\": nul}",
                                      "'a'"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg[0] = '\0';
        int64_t r = pi_chat_template_render(t, bad[i], -1, buf, sizeof buf, msg, sizeof msg);
        if (r != PI_ERR_INVALID_ARG)
            fprintf(stderr, "# data [%s]: %lld\n", bad[i], (long long)r);
        assert_int_equal(r, PI_ERR_INVALID_ARG);
        assert_true(msg[0]);
    }
    assert_int_equal(
        pi_chat_template_render(t, "{\"a\": 18446744073709551616}", -1, buf, sizeof buf, NULL, 0),
        PI_ERR_RANGE);
    /* escapes, surrogate pairs, numbers, a repeated member (last value, first place) */
    char out[256];
    pi_chat_template *u;
    assert_int_equal(pi_chat_template_create(NULL, "{{ a }}|{{ a|length }}|{{ b }}|{{ c }}|{{ d }}",
                                             &u, NULL, 0),
                     PI_OK);
    assert_int_equal(pi_chat_template_render(u,
                                             " {\"a\": \"\\u00e9\\ud83d\\ude00\\n\\/\\\"\", "
                                             "\"b\": [1, -0.5e-3, 1E2, true, false, null], "
                                             "\"c\": {\"x\": 1, \"y\": 2, \"x\": 3}, \"d\": -0} ",
                                             -1, out, sizeof out, NULL, 0),
                     (int64_t)strlen("\xc3\xa9\xf0\x9f\x98\x80\n/\"|5|[1, -0.0005, 100.0, True, "
                                     "False, None]|{'x': 3, 'y': 2}|0"));
    assert_string_equal(out, "\xc3\xa9\xf0\x9f\x98\x80\n/\"|5|[1, -0.0005, 100.0, True, False, "
                             "None]|{'x': 3, 'y': 2}|0");
    pi_chat_template_destroy(u);
    pi_chat_template_destroy(t);
}

/* ---- failing allocations -------------------------------------------------------------- */

static void test_alloc_failure(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/templates/Qwen-Qwen3-0.6B.jinja", g_dir);
    size_t n = 0;
    char *src = slurp(path, &n);
    assert_non_null(src);
    const char *data = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                       "\"add_generation_prompt\": true}";
    struct jinja_limits lim;
    jinja_default_limits(&lim);
    int failures = 0;
    for (long k = 1;; k++) {
        struct failalloc fa;
        struct pi_allocator al = failalloc_make(&fa, k);
        struct pi_error err = {PI_OK, ""};
        struct jtemplate t;
        int st = jinja_parse(&t, src, n, &lim, &al, &err);
        if (st == PI_OK) {
            struct jarena a;
            ja_init(&a, &al, lim.max_memory, &err);
            jv v, out;
            st = json_parse(&a, data, strlen(data), &v, &err);
            if (st == PI_OK)
                st = jinja_render(&t, &a, v.u.dict, -1, &out, &err);
            ja_free(&a);
            jinja_free(&t);
        }
        assert_int_equal(fa.live, 0);
        if (st == PI_OK && fa.count < k)
            break;
        assert_int_equal(st, PI_ERR_NOMEM);
        assert_true(err.msg[0]);
        failures++;
    }
    assert_true(failures >= 3);
    free(src);
}

/* ---- threads: one template rendered by several at once ------------------------------- */

struct job {
    const pi_chat_template *t;
    const char *data;
    char out[4096];
    int64_t n;
};

static void *render_job(void *arg) {
    struct job *j = arg;
    for (int i = 0; i < 50; i++)
        j->n = pi_chat_template_render(j->t, j->data, 1735732800, j->out, sizeof j->out, NULL, 0);
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/templates/meta-llama-Llama-3.2-3B-Instruct.jinja", g_dir);
    char *src = slurp(path, NULL);
    assert_non_null(src);
    pi_chat_template *t;
    assert_int_equal(pi_chat_template_create(NULL, src, &t, NULL, 0), PI_OK);
    static const char *const datas[2] = {
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"bos_token\": \"<s>\"}",
        "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
        "\"content\": \"q\"}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\"}"};
    struct job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].t = t;
        jobs[i].data = datas[i % 2];
        assert_int_equal(pthread_create(&th[i], NULL, render_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 4; i++) {
        char want[4096];
        int64_t n =
            pi_chat_template_render(t, datas[i % 2], 1735732800, want, sizeof want, NULL, 0);
        assert_true(n > 0);
        assert_int_equal(jobs[i].n, n);
        assert_string_equal(jobs[i].out, want);
        assert_non_null(strstr(want, "01 Jan 2025"));
    }
    pi_chat_template_destroy(t);
    free(src);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_jinja FIXTURE_DIR\n");
        return 2;
    }
    g_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_templates), cmocka_unit_test(test_language),
        cmocka_unit_test(test_parse_errors),   cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_limits),         cmocka_unit_test(test_api),
        cmocka_unit_test(test_alloc_failure),  cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
