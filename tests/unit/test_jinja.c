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

#include "chat/jinja.h"
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
                assert_int_equal(pi_chat_template_render(tp, data, now, got, (size_t)len + 1,
                                                         NULL, 0),
                                 len);
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
            fprintf(stderr, "# snippet %zu [%s]\n#   ours   [%s] (%d: %s)\n#   jinja2 [%.*s]\n",
                    k, src, got ? got : "(error)", got ? 0 : st, msg,
                    want ? (int)want->u.str.n : want_raise ? (int)want_raise->u.str.n : 5,
                    want ? want->u.str.s : want_raise ? want_raise->u.str.s : "error");
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

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_jinja FIXTURE_DIR\n");
        return 2;
    }
    g_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_templates),
        cmocka_unit_test(test_language),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
