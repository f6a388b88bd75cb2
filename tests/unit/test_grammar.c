/* The grammar engine (pi_grammar_*, lib/grammar/):
 *  - malformed grammars are refused with the status and the line:col they should name:
 *    syntax errors, undefined and twice-defined rules, left recursion (direct, through
 *    other rules, through nullable prefixes, a repetition of the empty string), limits;
 *  - for a JSON grammar, arithmetic expressions, balanced brackets, UTF-8 classes and
 *    bounded repetitions: every prefix of each valid text is accepted byte by byte and
 *    the whole is complete; invalid texts are refused at the exact byte where no
 *    continuation can help;
 *  - on SmolLM2's vocabulary (argv[1]; skipped when absent): for states reached by
 *    random walks, pi_grammar_mask allows exactly the tokens that pi_grammar_accept
 *    takes one by one on a clone (a brute force that never uses the trie), and the
 *    end-of-generation tokens only when complete. The mask's cost per step is printed. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "powerinfer.h"

static const char *g_model_path;

static const char JSON_GBNF[] =
    "# JSON (RFC 8259), whitespace bounded\n"
    "root   ::= ws value ws\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
    "object ::=\n"
    "  \"{\" ws ( string ws \":\" ws value ws\n"
    "    (\",\" ws string ws \":\" ws value ws)* )? \"}\"\n"
    "array  ::= \"[\" ws ( value ws (\",\" ws value ws)* )? \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) "
    ")* \"\\\"\"\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"
    "ws     ::= [ \\t\\n]{0,8}\n";

static const char ARITH_GBNF[] = "root ::= expr\n"
                                 "expr ::= term ((\"+\" | \"-\") term)*\n"
                                 "term ::= factor ((\"*\" | \"/\") factor)*\n"
                                 "factor ::= [0-9]+ | \"(\" expr \")\" | \"-\" factor\n";

static const char PARENS_GBNF[] = "root ::= seq\n"
                                  "seq  ::= item*   # balanced brackets, recursive\n"
                                  "item ::= \"(\" seq \")\" | \"[\" seq \"]\"\n"
                                  "       | \"<\" seq \">\"\n";

static const char UTF8_GBNF[] = "root ::= word (\" \" word){0,3} \"!\"?\n"
                                "word ::= [a-zé-ü\\u4e00-\\u9fff\\U0001F600-\\U0001F64F]{1,5}\n";

struct gcase {
    const char *gbnf;
    const char *valid[12];
    struct {
        const char *text;
        size_t at;
    } invalid[12];
};

static const struct gcase CASES[] = {
    {JSON_GBNF,
     {"{}", "{\"a\": [1, 2.5, -3e10, 0, -0.0, 1E+2], \"b\": {\"c\": null}}", "[]", "\"s\\u00e9\"",
      "  true ", "{\"k\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\"}", "[[[[]]], {}, \"x\", false]", "-12",
      "{\n  \"pretty\": [\n    1\n  ]\n}\n", NULL},
     {{"{\"a\":1,}", 7},
      {"{a:1}", 1},
      {"01", 1},
      {"[1 2]", 3},
      {"\"\\x\"", 2},
      {"\"tab\there\"", 4},
      {"{}}", 2},
      {"         {}", 8},      /* ws is at most 8 bytes */
      {"\"\xc3\x28\"", 2},     /* bad continuation byte */
      {"\"\xed\xa0\x80\"", 2}, /* a surrogate: refused at its second byte */
      {"\"\xc0\xaf\"", 1},     /* overlong lead */
      {NULL, 0}}},
    {ARITH_GBNF,
     {"1", "1+2*3", "(1+2)*-3/4", "--5", "((((7))))-0", NULL},
     {{"+1", 0}, {"1++2", 2}, {"(1", 2}, {"1)", 1}, {"a", 0}, {"()", 1}, {NULL, 0}}},
    {PARENS_GBNF,
     {"", "()", "([])<>", "(((([<>]))))", "[()()()]", NULL},
     {{")", 0}, {"(]", 1}, {"([)]", 2}, {"<<>>>", 4}, {NULL, 0}}},
    {UTF8_GBNF,
     {"abc", "caf\xc3\xa9!", "\xe4\xb8\xad\xe6\x96\x87 ok", "a b c d",
      "\xf0\x9f\x98\x80\xf0\x9f\x98\x81", NULL},
     {{"", 0},
      {"abcdef", 5},
      {"a b c d e", 7},
      {"\xc3\xa4", 1}, /* U+00E4 is below é (U+00E9): refused once it is whole */
      {"A", 0},
      {"\xf0\x9f\x99\x90", 3}, /* U+1F650, just past the emoji range */
      {"\xe3\x80\x80", 0},     /* U+3000: no range has a code point starting E3 */
      {"\xe4\xb7\xbf", 1},     /* U+4DFF: E4 can start U+4E00, E4 B7 cannot */
      {NULL, 0}}},
};

/* Where feeding `text` byte by byte is refused (n if never). */
static size_t refused_at(pi_grammar *g, const char *text, size_t n) {
    assert_int_equal(pi_grammar_reset(g), PI_OK);
    for (size_t i = 0; i < n; i++)
        if (pi_grammar_accept_text(g, text + i, 1) != PI_OK)
            return i;
    return n;
}

static void test_texts(void **state) {
    (void)state;
    int n_checked = 0;
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        const struct gcase *k = &CASES[c];
        pi_grammar *g = NULL;
        char err[256];
        int st = pi_grammar_create(NULL, k->gbnf, strlen(k->gbnf), NULL, &g, err, sizeof err);
        if (st != PI_OK)
            fail_msg("case %zu: %s", c, err);
        for (size_t v = 0; k->valid[v]; v++) {
            const char *t = k->valid[v];
            const size_t n = strlen(t);
            if (refused_at(g, t, n) != n)
                fail_msg("case %zu: valid \"%s\" refused at %zu: %s", c, t, refused_at(g, t, n),
                         pi_grammar_errmsg(g));
            if (!pi_grammar_complete(g))
                fail_msg("case %zu: \"%s\" is not complete", c, t);
            /* all at once gives the same */
            assert_int_equal(pi_grammar_reset(g), PI_OK);
            assert_int_equal(pi_grammar_accept_text(g, t, n), PI_OK);
            assert_true(pi_grammar_complete(g));
            n_checked++;
        }
        for (size_t v = 0; k->invalid[v].text; v++) {
            const char *t = k->invalid[v].text;
            const size_t n = strlen(t), want = k->invalid[v].at;
            size_t got = refused_at(g, t, n);
            if (want == n) { /* a prefix, but not complete */
                if (got != n || pi_grammar_complete(g))
                    fail_msg("case %zu: \"%s\" should be an incomplete prefix", c, t);
                continue;
            }
            if (got != want)
                fail_msg("case %zu: invalid \"%s\" refused at %zu, not %zu", c, t, got, want);
            /* a refused text changes nothing */
            assert_int_equal(pi_grammar_reset(g), PI_OK);
            assert_int_equal(pi_grammar_accept_text(g, t, n), PI_ERR_RANGE);
            assert_non_null(strstr(pi_grammar_errmsg(g), "cannot continue"));
            if (pi_grammar_accept_text(g, t, want) != PI_OK)
                fail_msg("case %zu: \"%s\": its first %zu bytes refused after a refusal: %s", c, t,
                         want, pi_grammar_errmsg(g));
            n_checked++;
        }
        pi_grammar_destroy(g);
    }
    print_message("# %d texts checked byte by byte\n", n_checked);
}

static void test_errors(void **state) {
    (void)state;
    static const struct {
        const char *gbnf;
        int status;
        const char *msg; /* the start of the message */
    } BAD[] = {
        {"root ::= \"a\" | b\n", PI_ERR_FORMAT, "1:16: undefined rule 'b'"},
        {"root ::= x\nx ::= \"a\"\nx ::= \"b\"\n", PI_ERR_FORMAT, "3:1: rule defined twice"},
        {"root = \"a\"\n", PI_ERR_FORMAT, "1:6: expected '::='"},
        {"root ::= \"abc\n", PI_ERR_FORMAT, "1:10: unterminated string literal"},
        {"root ::= [ab\n", PI_ERR_FORMAT, "1:10: unterminated character class"},
        {"root ::= [z-a]\n", PI_ERR_FORMAT, "1:13: range end is below its start"},
        {"root ::= (\"a\" | \"b\"\n", PI_ERR_FORMAT, "1:10: unclosed '('"},
        {"root ::= \"a\")\n", PI_ERR_FORMAT, "1:13: unexpected ')'"},
        {"root ::= \"\\q\"\n", PI_ERR_FORMAT, "1:11: unknown escape"},
        {"root ::= \"a\"{3,2}\n", PI_ERR_FORMAT, "1:13: repetition {m,n} with n below m"},
        {"root ::= \"a\"{1001}\n", PI_ERR_RANGE, "1:14: repetition count above 1000"},
        {"root ::= ::=\n", PI_ERR_FORMAT, "1:10: expected a rule name"},
        {"x ::= \"a\"\n", PI_ERR_FORMAT, "no rule 'root'"},
        {"\n\nroot ::= root \"a\" | \"b\"\n", PI_ERR_FORMAT,
         "3:1: left recursion: rule 'root' can derive itself"},
        {"root ::= a\na ::= b \"x\"\nb ::= c? a\nc ::= \"c\"\n", PI_ERR_FORMAT,
         "2:1: left recursion: rule 'a'"},
        {"root ::= (\"\")*\n", PI_ERR_FORMAT,
         "1:1: left recursion: rule a group or repetition in 'root'"},
        {"root ::= \"\xff\"\n", PI_ERR_FORMAT, "1:11: invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        pi_grammar *g = (pi_grammar *)1;
        char err[256];
        int st =
            pi_grammar_create(NULL, BAD[i].gbnf, strlen(BAD[i].gbnf), NULL, &g, err, sizeof err);
        if (st != BAD[i].status || strncmp(err, BAD[i].msg, strlen(BAD[i].msg)) != 0)
            fail_msg("grammar %zu: status %d \"%s\", want %d \"%s...\"", i, st, err, BAD[i].status,
                     BAD[i].msg);
        assert_null(g);
    }
    /* nesting and size limits */
    char deep[200];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 70; i++)
        deep[n++] = '(';
    deep[n] = '\0';
    pi_grammar *g;
    char err[256];
    assert_int_equal(pi_grammar_create(NULL, deep, n, NULL, &g, err, sizeof err), PI_ERR_RANGE);
    assert_non_null(strstr(err, "nested deeper"));
    /* 100 rules of a 10-character literal repeated 1000 times: 4M code words, past the
     * limit of 2M */
    char *big = malloc(100 * 40);
    assert_non_null(big);
    n = (size_t)snprintf(big, 40, "root ::= r0\n");
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(big + n, 40, "r%d ::= \"abcdefghij\"{1000}\n", i);
    assert_int_equal(pi_grammar_create(NULL, big, n, NULL, &g, err, sizeof err), PI_ERR_RANGE);
    assert_non_null(strstr(err, "too large"));
    free(big);
    /* arguments */
    assert_int_equal(pi_grammar_create(NULL, NULL, 0, NULL, &g, NULL, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_grammar_create(NULL, "root ::= \"a\"", 12, NULL, NULL, NULL, 0),
                     PI_ERR_INVALID_ARG);
    assert_int_equal(pi_grammar_create(NULL, "r ::= \"a\"", 9, "r", &g, NULL, 0), PI_OK);
    float logit = 0;
    assert_int_equal(pi_grammar_mask(g, &logit, 1), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_grammar_accept(g, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_grammar_accept_text(g, "a", 1), PI_OK);
    assert_true(pi_grammar_complete(g));
    pi_grammar *c;
    assert_int_equal(pi_grammar_clone(g, &c), PI_OK);
    pi_grammar_destroy(g); /* the clone outlives its source */
    assert_true(pi_grammar_complete(c));
    assert_int_equal(pi_grammar_accept_text(c, "a", 1), PI_ERR_RANGE);
    pi_grammar_destroy(c);
    pi_grammar_destroy(NULL);
}

/* ---- the mask against the brute force, on a real vocabulary --------------------------- */

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A JSON schema's grammar, as tools/common/jsonschema.c writes them: an object with
 * required and optional properties, an enum, an array of numbers, a nested object. */
static const char SCHEMA_GBNF[] =
    "root ::= ( \"{\" ws \"\\\"name\\\"\" ws \":\" ws string ws \",\" ws \"\\\"age\\\"\" ws \":\" "
    "ws integer ws\n"
    "  (\",\" ws \"\\\"tags\\\"\" ws \":\" ws tags ws)? \",\" ws \"\\\"kind\\\"\" ws \":\" ws kind "
    "ws \"}\" )\n"
    "tags ::= \"[\" ws (number ws (\",\" ws number ws){0,9})? \"]\"\n"
    "kind ::= \"\\\"cat\\\"\" | \"\\\"dog\\\"\" | \"{\" ws \"\\\"other\\\"\" ws \":\" ws string ws "
    "\"}\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) "
    "){0,40} \"\\\"\"\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "number ::= integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
    "ws ::= [ \\t\\n]{0,4}\n";

static void check_mask_state(pi_grammar *g, const pi_model *m, int64_t n_vocab, float *logits,
                             int64_t *n_allowed_out) {
    for (int64_t t = 0; t < n_vocab; t++)
        logits[t] = 0.0f;
    int64_t n = pi_grammar_mask(g, logits, n_vocab);
    assert_true(n >= 0);
    int64_t count = 0;
    for (int64_t t = 0; t < n_vocab; t++) {
        pi_grammar *c;
        assert_int_equal(pi_grammar_clone(g, &c), PI_OK);
        int st = pi_grammar_accept(c, (int32_t)t);
        assert_true(st == PI_OK || st == PI_ERR_RANGE);
        const int allowed = logits[t] == 0.0f;
        if (allowed != (st == PI_OK)) {
            char piece[64];
            pi_token_to_piece(m, (int32_t)t, piece, sizeof piece, 0);
            fail_msg("token %lld (\"%s\"): mask %d, accept %d", (long long)t, piece, allowed, st);
        }
        if (pi_model_token_is_eog(m, (int32_t)t))
            assert_int_equal(allowed, pi_grammar_complete(g));
        count += allowed;
        pi_grammar_destroy(c);
    }
    assert_int_equal(count, n);
    *n_allowed_out = n;
}

static void test_mask(void **state) {
    (void)state;
    pi_model_params mp;
    pi_model_default_params(&mp);
    pi_model *m = NULL;
    FILE *f = g_model_path ? fopen(g_model_path, "rb") : NULL;
    if (!f) {
        const char *req = getenv("PI_REQUIRE_SMOLLM2");
        if (req && !strcmp(req, "1"))
            fail_msg("no model at %s", g_model_path ? g_model_path : "(none)");
        skip();
    }
    fclose(f);
    assert_int_equal(pi_model_open(g_model_path, &mp, &m), PI_OK);
    const int64_t n_vocab = pi_model_n_vocab(m);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    assert_non_null(logits);
    const char *grammars[] = {SCHEMA_GBNF, JSON_GBNF, ARITH_GBNF, UTF8_GBNF};
    uint64_t rng = 12345;
    int n_states = 0;
    for (size_t k = 0; k < sizeof grammars / sizeof *grammars; k++) {
        pi_grammar *g;
        char err[256];
        double t0 = now_ms();
        if (pi_grammar_create(m, grammars[k], strlen(grammars[k]), NULL, &g, err, sizeof err))
            fail_msg("grammar %zu: %s", k, err);
        double t_create = now_ms() - t0;
        double t_mask = 0;
        int n_mask = 0;
        for (int walk = 0; walk < 2; walk++) {
            assert_int_equal(pi_grammar_reset(g), PI_OK);
            for (int step = 0; step < 6; step++) {
                int64_t n_allowed;
                check_mask_state(g, m, n_vocab, logits, &n_allowed);
                n_states++;
                t0 = now_ms();
                for (int r = 0; r < 3; r++)
                    pi_grammar_mask(g, logits, n_vocab);
                t_mask += now_ms() - t0;
                n_mask += 3;
                if (n_allowed == 0)
                    break;
                /* a random allowed token (end of generation only when nothing else) */
                int64_t pick = (int64_t)(rng_next(&rng) % (uint64_t)n_allowed), t = 0;
                int32_t tok = -1;
                for (t = 0; t < n_vocab; t++)
                    if (logits[t] == 0.0f && !pi_model_token_is_eog(m, (int32_t)t) && pick-- <= 0) {
                        tok = (int32_t)t;
                        break;
                    }
                if (tok < 0)
                    break;
                assert_int_equal(pi_grammar_accept(g, tok), PI_OK);
            }
        }
        print_message("# grammar %zu: create %.1f ms (trie of the vocabulary), mask %.2f ms "
                      "per step (%d steps)\n",
                      k, t_create, t_mask / n_mask, n_mask);
        pi_grammar_destroy(g);
    }
    print_message("# %d states: mask == brute force over %lld tokens each\n", n_states,
                  (long long)n_vocab);
    free(logits);
    pi_model_close(m);
}

int main(int argc, char **argv) {
    g_model_path = argc > 1 ? argv[1] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_texts),
        cmocka_unit_test(test_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
