/* pi-server's JSON-object recogniser (tools/pi-server/jsonmode.c):
 *  - every prefix of valid JSON objects (RFC 8259 examples: nesting, escapes, \u,
 *    numbers of every form, literals, empty containers, whitespace) is accepted, and
 *    only the whole text is "done";
 *  - texts that no continuation can make valid are refused at the byte where they go
 *    wrong: a top level other than an object, trailing commas, bad escapes, leading
 *    zeros, bare words, control bytes in strings, unbalanced closers, anything after the
 *    object, too much whitespace, too deep nesting;
 *  - feeding in pieces of any size gives what feeding byte by byte gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "server.h"

static const char *const VALID[] = {
    "{}",
    " {\"a\":1}",
    "{\"a\": [1, 2.5, -3e10, 0, -0.0, 1E+2, 2e-3], \"b\": {\"c\": null}}",
    "{\"s\": \"quote \\\" backslash \\\\ slash \\/ \\b\\f\\n\\r\\t \\u00e9\\uD83D\\uDE00\"}",
    "{\"utf8\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\"}",
    "{\"t\": true, \"f\": false, \"n\": null}",
    "{\"empty\": [], \"obj\": {}, \"nested\": [[[]], [{}], {\"x\": [1]}]}",
    "{\n  \"pretty\": [\n    1,\n    2\n  ]\n}\n",
    "{\"k\":\"\"}",
    "{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":[0]}}}}}",
};

/* text, and the byte index where it must be refused */
static const struct {
    const char *text;
    size_t at;
} INVALID[] = {
    {"[1]", 0},             /* json_object: the top is an object */
    {"\"s\"", 0},
    {"x", 0},
    {"{\"a\":1,}", 7},      /* trailing comma */
    {"{\"a\":[1,]}", 8},
    {"{a:1}", 1},           /* unquoted key */
    {"{\"a\" 1}", 5},       /* missing colon */
    {"{\"a\":01}", 6},      /* leading zero */
    {"{\"a\":-}", 6},
    {"{\"a\":1.}", 7},
    {"{\"a\":1e}", 7},
    {"{\"a\":.5}", 5},
    {"{\"a\":+1}", 5},
    {"{\"a\":tru}", 8},
    {"{\"a\":nul1}", 8},
    {"{\"a\":\"\\x\"}", 7},    /* bad escape */
    {"{\"a\":\"\\u12G4\"}", 10},
    {"{\"a\":\"tab\there\"}", 9},  /* raw control byte */
    {"{\"a\":1]", 6},       /* wrong closer */
    {"{\"a\":[1}", 7},
    {"{}}", 2},             /* after the object */
    {"{} x", 3},
    {"{\"a\":1 2}", 7},
    {"{\"a\":[1 2]}", 8},
    {"{,}", 1},
    {"{\"a\":1,,\"b\":2}", 7},
    {"{\"a\"::1}", 5},
    {"{\"a\":'s'}", 5},
};

static size_t refused_at(const char *text, size_t n) {
    struct jm_state s;
    jm_init(&s);
    for (size_t i = 0; i < n; i++)
        if (!jm_feed(&s, text + i, 1))
            return i;
    return n;
}

static void test_valid_prefixes(void **state) {
    (void)state;
    for (size_t v = 0; v < sizeof VALID / sizeof *VALID; v++) {
        const char *t = VALID[v];
        const size_t n = strlen(t);
        struct jm_state s;
        jm_init(&s);
        size_t end = n; /* where the object closes (trailing whitespace after) */
        while (end > 0 && strchr(" \n\t\r", t[end - 1]))
            end--;
        for (size_t i = 0; i < n; i++) {
            if (!jm_feed(&s, t + i, 1))
                fail_msg("valid text %zu refused at byte %zu: %s", v, i, t);
            assert_int_equal(jm_done(&s), i + 1 >= end);
        }
        /* in pieces of every size: the same */
        for (size_t k = 2; k <= 9; k++) {
            struct jm_state p;
            jm_init(&p);
            for (size_t i = 0; i < n; i += k)
                assert_true(jm_feed(&p, t + i, i + k <= n ? k : n - i));
            assert_true(jm_done(&p));
        }
    }
}

static void test_invalid_refused_where_they_go_wrong(void **state) {
    (void)state;
    for (size_t v = 0; v < sizeof INVALID / sizeof *INVALID; v++) {
        const char *t = INVALID[v].text;
        size_t at = refused_at(t, strlen(t));
        if (at != INVALID[v].at)
            fail_msg("'%s': refused at %zu, want %zu", t, at, INVALID[v].at);
        /* a piece containing the bad byte is refused as a whole */
        struct jm_state s;
        jm_init(&s);
        assert_false(jm_feed(&s, t, strlen(t)));
    }
}

static void test_limits(void **state) {
    (void)state;
    char buf[512];
    /* whitespace: JM_MAX_SPACE in a row is fine, one more is not */
    size_t n = 0;
    buf[n++] = '{';
    for (int i = 0; i < JM_MAX_SPACE; i++)
        buf[n++] = ' ';
    assert_int_equal(refused_at(buf, n), n);
    buf[n++] = ' ';
    assert_int_equal(refused_at(buf, n), n - 1);
    /* nesting: JM_MAX_DEPTH containers open is fine, one more is not */
    n = 0;
    buf[n++] = '{';
    memcpy(buf + n, "\"a\":", 4);
    n += 4;
    for (int i = 1; i < JM_MAX_DEPTH; i++)
        buf[n++] = '[';
    assert_int_equal(refused_at(buf, n), n);
    buf[n++] = '[';
    assert_int_equal(refused_at(buf, n), n - 1);
    /* done only at the closing brace; spaces may follow, nothing else */
    struct jm_state s;
    jm_init(&s);
    assert_true(jm_feed(&s, "{\"a\":[1,{\"b\":2}]", 16));
    assert_false(jm_done(&s));
    assert_true(jm_feed(&s, "}", 1));
    assert_true(jm_done(&s));
    assert_true(jm_feed(&s, " \n", 2));
    assert_true(jm_done(&s));
    struct jm_state t = s;
    assert_false(jm_feed(&t, "{", 1));
    /* an empty piece changes nothing */
    jm_init(&s);
    assert_true(jm_feed(&s, "", 0));
    assert_false(jm_done(&s));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_prefixes),
        cmocka_unit_test(test_invalid_refused_where_they_go_wrong),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
