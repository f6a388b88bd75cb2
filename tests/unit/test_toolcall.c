/* pi-server's tool-call parser (tools/pi-server/toolcall.c) on its own: each syntax on
 * answers written the way its family's template writes an assistant's calls, content
 * before a call, several calls, answers that are not calls (kept as content), the
 * stream hold-back, and every truncation of every answer (never a crash; a call found in
 * a cut call answer is one of its own calls). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>

#include "server.h"

struct want {
    int syntax;
    const char *text;
    const char *content; /* NULL: not a call answer */
    size_t n;
    const char *name[3], *args[3];
};

static const struct want cases[] = {
    {TC_HERMES,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "", 1, {"get_weather"}, {"{\"city\":\"Paris\"}"}},
    {TC_HERMES,
     "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2.5, true, null]}}\n</tool_call>",
     "Let me check.", 2, {"a", "b"}, {"{}", "{\"x\":[1,2.5,true,null]}"}},
    /* an unclosed last call (the model stopped at its end-of-turn) still counts */
    {TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"\\u00e9t\\u00e9\"}}",
     "", 1, {"f"}, {"{\"q\":\"\xc3\xa9t\xc3\xa9\"}"}},
    /* arguments given as a JSON string stay that text */
    {TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "",
     1, {"f"}, {"{\"a\": 1}"}},
    {TC_HERMES, "Paris is sunny today.", NULL, 0, {0}, {0}},
    {TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call> and more text",
     NULL, 0, {0}, {0}},
    {TC_HERMES, "<tool_call>\nnot json\n</tool_call>", NULL, 0, {0}, {0}},
    {TC_HERMES, "<tool_call>\n{\"arguments\": {}}\n</tool_call>", NULL, 0, {0}, {0}},
    {TC_GENERIC, "<tool_call>{\"name\": \"g\", \"arguments\": {\"n\": 3}}</tool_call>", "", 1,
     {"g"}, {"{\"n\":3}"}},
    {TC_QWEN_XML,
     "I will look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"unit\": \"C\"}\n</parameter>\n"
     "</function>\n</tool_call>",
     "I will look.", 1, {"get_weather"},
     {"{\"city\":\"Paris\",\"days\":3,\"opts\":{\"unit\":\"C\"}}"}},
    {TC_QWEN_XML, "<tool_call>\n<function=f>\n<parameter=s>\nline 1\nline 2\n</parameter>\n</function>\n"
                  "</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call>",
     "", 2, {"f", "g"}, {"{\"s\":\"line 1\\nline 2\"}", "{}"}},
    {TC_QWEN_XML, "<tool_call>\n<function=f>\n<parameter=s>\nunclosed", NULL, 0, {0}, {0}},
    {TC_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", 1,
     {"get_weather"}, {"{\"city\":\"Paris\"}"}},
    {TC_LLAMA3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
                "\"parameters\": {\"k\": \"v\"}}",
     "", 2, {"a", "b"}, {"{}", "{\"k\":\"v\"}"}},
    {TC_LLAMA3, "The answer is {\"name\": \"x\"}", NULL, 0, {0}, {0}},
    {TC_LLAMA3, "{\"city\": \"Paris\"}", NULL, 0, {0}, {0}},
    {TC_MISTRAL,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
     "\"abcDEF123\"}, {\"name\": \"b\", \"arguments\": {}}]",
     "", 2, {"get_weather", "b"}, {"{\"city\":\"Paris\"}", "{}"}},
    {TC_MISTRAL, "[TOOL_CALLS][]", NULL, 0, {0}, {0}},
    {TC_MISTRAL_ARGS, "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"
                      "[TOOL_CALLS]b[CALL_ID]abcDEF123[ARGS]{}",
     "Sure.", 2, {"get_weather", "b"}, {"{\"city\":\"Paris\"}", "{}"}},
    {TC_MISTRAL_ARGS, "[TOOL_CALLS]f[ARGS]not json", NULL, 0, {0}, {0}},
    {TC_GRANITE, "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]", "", 1, {"f"},
     {"{\"a\":1}"}},
};

static void test_cases(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const struct want *w = &cases[c];
        struct tc_result r;
        int got = tc_parse(w->syntax, w->text, strlen(w->text), &r);
        if (got != (w->content != NULL))
            fail_msg("case %zu: %s: parsed %d", c, w->text, got);
        if (!got)
            continue;
        assert_int_equal(r.n, w->n);
        assert_int_equal(r.content_len, strlen(w->content));
        assert_memory_equal(w->text, w->content, r.content_len);
        for (size_t i = 0; i < r.n; i++) {
            assert_string_equal(r.calls[i].name, w->name[i]);
            assert_string_equal(r.calls[i].arguments, w->args[i]);
        }
        tc_result_free(&r);
    }
}

/* Every prefix of every call answer: no crash, and a call found in a prefix is one of
 * the answer's own calls (a cut JSON value never parses as another one). */
static void test_prefixes(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const struct want *w = &cases[c];
        size_t n = strlen(w->text);
        for (size_t k = 0; k < n; k++) {
            char *t = malloc(k + 1); /* exactly k bytes: ASan sees any read past them */
            memcpy(t, w->text, k);
            struct tc_result r;
            if (tc_parse(w->syntax, t, k, &r)) {
                /* (a prefix of a refused answer may be a whole call: "<call/> and text") */
                if (w->content) {
                    assert_true(r.n <= w->n);
                    for (size_t i = 0; i < r.n; i++)
                        assert_string_equal(r.calls[i].name, w->name[i]);
                }
                tc_result_free(&r);
            }
            free(t);
        }
    }
}

static void test_syntax_of_template(void **state) {
    (void)state;
    assert_int_equal(tc_syntax_of_template("... <tool_call>\\n{\"name\": ..."), TC_HERMES);
    assert_int_equal(tc_syntax_of_template("<tool_call>\\n<function=example>"), TC_QWEN_XML);
    assert_int_equal(tc_syntax_of_template("[TOOL_CALLS] [AVAILABLE_TOOLS]"), TC_MISTRAL);
    assert_int_equal(tc_syntax_of_template("[TOOL_CALLS]' + name + '[ARGS]"), TC_MISTRAL_ARGS);
    assert_int_equal(tc_syntax_of_template("<|tool_call|>"), TC_GRANITE);
    assert_int_equal(tc_syntax_of_template("<|python_tag|>"), TC_LLAMA3);
    assert_int_equal(tc_syntax_of_template("{{ message.content }}"), TC_GENERIC);
    assert_int_equal(tc_syntax_of_template(NULL), TC_GENERIC);
}

static void test_hold(void **state) {
    (void)state;
    const char *t = "Let me look <tool";
    assert_int_equal(tc_hold(TC_HERMES, t, strlen(t)), strlen("Let me look "));
    t = "Let me look <tool_call>{";
    assert_int_equal(tc_hold(TC_HERMES, t, strlen(t)), strlen("Let me look "));
    t = "No call here.";
    assert_int_equal(tc_hold(TC_HERMES, t, strlen(t)), strlen(t));
    assert_int_equal(tc_hold(TC_NONE, "<tool_call>", 11), 11);
    t = "  {\"name\"";
    assert_int_equal(tc_hold(TC_LLAMA3, t, strlen(t)), 0);
    assert_int_equal(tc_hold(TC_LLAMA3, "  ", 2), 0);
    t = "Paris [TOOL_CA";
    assert_int_equal(tc_hold(TC_MISTRAL, t, strlen(t)), strlen("Paris "));
    t = "Hello";
    assert_int_equal(tc_hold(TC_LLAMA3, t, strlen(t)), strlen(t));
}

static int request(const char *json, struct tc_request *r, const char **param) {
    cJSON *req = cJSON_Parse(json);
    assert_non_null(req);
    char why[256] = "";
    int st = tc_request(req, r, param, why, sizeof why);
    assert_true(st == 0 || why[0]);
    cJSON_Delete(req);
    return st;
}

static void test_request(void **state) {
    (void)state;
    struct tc_request r;
    const char *param = NULL;
    const char *tool = "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                       "\"parameters\": {\"type\": \"object\"}}}";
    char buf[1024];
    assert_int_equal(request("{}", &r, &param), 0);
    assert_int_equal(r.n_tools, 0);
    snprintf(buf, sizeof buf, "{\"tools\": [%s, %s]}", tool, tool);
    assert_int_equal(request(buf, &r, &param), 0);
    assert_int_equal(r.n_tools, 2);
    assert_int_equal(r.choice, TC_CHOICE_AUTO);
    assert_true(r.parallel);
    snprintf(buf, sizeof buf, "{\"tools\": [%s], \"tool_choice\": \"none\"}", tool);
    assert_int_equal(request(buf, &r, &param), 0);
    assert_int_equal(r.n_tools, 0);
    snprintf(buf, sizeof buf,
             "{\"tools\": [%s], \"tool_choice\": {\"type\": \"function\", \"function\": "
             "{\"name\": \"get_weather\"}}, \"parallel_tool_calls\": false}",
             tool);
    assert_int_equal(request(buf, &r, &param), 0);
    assert_int_equal(r.choice, TC_CHOICE_REQUIRED);
    assert_false(r.parallel);
    static const char *const bad[] = {
        "{\"tools\": {}}",
        "{\"tools\": [{\"type\": \"function\"}]}",
        "{\"tools\": [{\"type\": \"code\", \"function\": {\"name\": \"f\"}}]}",
        "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}",
        "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
        "\"parameters\": 3}}]}",
        "{\"tool_choice\": \"required\"}",
        "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
        "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}",
        "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
        "\"tool_choice\": \"sometimes\"}",
        "{\"parallel_tool_calls\": 1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (request(bad[i], &r, &param) != -1 || !param)
            fail_msg("accepted: %s", bad[i]);
}

static void test_messages_for_template(void **state) {
    (void)state;
    cJSON *m = cJSON_Parse(
        "[{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", "
        "\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
        "\"{\\\"city\\\": \\\"Paris\\\"}\"}}, {\"id\": \"c2\", \"type\": \"function\", "
        "\"function\": {\"name\": \"g\", \"arguments\": \"not json\"}}]}, "
        "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"sunny\"}]");
    assert_non_null(m);
    cJSON *t = tc_messages_for_template(m);
    char *s = cJSON_PrintUnformatted(t);
    assert_string_equal(
        s, "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
           "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"city\":"
           "\"Paris\"}}},{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"g\","
           "\"arguments\":\"not json\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
           "\"content\":\"sunny\"}]");
    free(s);
    cJSON_Delete(t);
    cJSON_Delete(m);
    cJSON *tools = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
    char *p = tc_generic_prompt(tools);
    assert_non_null(strstr(p, "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}\n"));
    assert_non_null(strstr(p, "<tool_call>"));
    free(p);
    cJSON_Delete(tools);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_prefixes),
        cmocka_unit_test(test_syntax_of_template),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_request),
        cmocka_unit_test(test_messages_for_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
