/* JSON Schema -> GBNF (tools/common/jsonschema.c) through the grammar engine:
 *  - for every schema of tests/fixtures/jsonschema/cases.json (argv[1]; made by
 *    tests/fixtures/gen_jsonschema_fixtures.py), the grammar accepts as a whole (and
 *    finds complete) exactly the texts the `jsonschema` package labelled valid;
 *  - unsupported keywords, bad $refs and bad values are refused with a message that
 *    names them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "jsonschema.h"
#include "powerinfer.h"

static const char *g_fixture;

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = '\0';
    fclose(f);
    return s;
}

static void test_fixture(void **state) {
    (void)state;
    char *text = read_all(g_fixture);
    if (!text)
        fail_msg("cannot read %s", g_fixture);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    const cJSON *cases = cJSON_GetObjectItem(doc, "cases");
    int n_schema = 0, n_valid = 0, n_invalid = 0;
    for (const cJSON *c = cases->child; c; c = c->next, n_schema++) {
        const cJSON *schema = cJSON_GetObjectItem(c, "schema");
        char err[512];
        char *gbnf = json_schema_to_gbnf(schema, err, sizeof err);
        if (!gbnf)
            fail_msg("schema %d: %s", n_schema, err);
        pi_grammar *g;
        if (pi_grammar_create(NULL, gbnf, strlen(gbnf), NULL, &g, err, sizeof err) != PI_OK)
            fail_msg("schema %d: grammar: %s\n%s", n_schema, err, gbnf);
        for (const cJSON *in = cJSON_GetObjectItem(c, "instances")->child; in; in = in->next) {
            const char *t = cJSON_GetObjectItem(in, "text")->valuestring;
            const int want = cJSON_IsTrue(cJSON_GetObjectItem(in, "valid"));
            assert_int_equal(pi_grammar_reset(g), PI_OK);
            int st = pi_grammar_accept_text(g, t, strlen(t));
            const int got = st == PI_OK && pi_grammar_complete(g);
            if (got != want) {
                char *s = cJSON_PrintUnformatted(schema);
                fail_msg("schema %d %s\ntext %s\njsonschema: %s, grammar: %s (%s)\n%s", n_schema, s,
                         t, want ? "valid" : "invalid", got ? "accepted" : "refused",
                         st == PI_OK ? "incomplete" : pi_grammar_errmsg(g), gbnf);
            }
            n_valid += want;
            n_invalid += !want;
        }
        pi_grammar_destroy(g);
        free(gbnf);
    }
    print_message("# %d schemas: %d valid texts accepted, %d invalid refused\n", n_schema, n_valid,
                  n_invalid);
    assert_true(n_schema >= 20 && n_valid >= 500 && n_invalid >= 500);
    cJSON_Delete(doc);
}

static void test_refused(void **state) {
    (void)state;
    static const struct {
        const char *schema, *msg;
    } BAD[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a+$\"}", "keyword 'pattern' is not supported (at #)"},
        {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0}}}",
         "keyword 'minimum' is not supported (at #/properties/n)"},
        {"{\"$ref\":\"http://example.com/s.json\"}",
         "$ref 'http://example.com/s.json' is not supported"},
        {"{\"$ref\":\"#/$defs/missing\"}", "$ref '#/$defs/missing' names no definition"},
        {"{\"type\":\"uint\"}", "unknown type 'uint'"},
        {"{\"type\":\"string\",\"format\":\"email\"}", "format 'email' is not supported"},
        {"{\"type\":\"array\",\"maxItems\":5000}", "'maxItems' above 1000 is not supported"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "maxItems below minItems"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"a\"]}",
         "required property 'a' is not in 'properties'"},
        {"{\"enum\":[]}", "'enum' must be a non-empty array"},
        {"false", "schema false allows nothing"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"object\",\"properties\":{}}]}",
         "allOf is supported for object schemas with properties only"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        cJSON *s = cJSON_Parse(BAD[i].schema);
        assert_non_null(s);
        char err[512];
        char *gbnf = json_schema_to_gbnf(s, err, sizeof err);
        if (gbnf || strncmp(err, BAD[i].msg, strlen(BAD[i].msg)) != 0)
            fail_msg("schema %s: \"%s\", want \"%s\"", BAD[i].schema, gbnf ? gbnf : err,
                     BAD[i].msg);
        cJSON_Delete(s);
    }
    /* a schema nested deeper than the limit */
    char deep[2048] = "";
    for (int i = 0; i < 80; i++)
        strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 80; i++)
        strcat(deep, "}");
    cJSON *s = cJSON_Parse(deep);
    char err[512];
    assert_null(json_schema_to_gbnf(s, err, sizeof err));
    assert_non_null(strstr(err, "nested deeper"));
    cJSON_Delete(s);
}

int main(int argc, char **argv) {
    g_fixture = argc > 1 ? argv[1] : "tests/fixtures/jsonschema/cases.json";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
