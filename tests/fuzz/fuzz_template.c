/* fuzz_template.c -- libFuzzer harness for the chat-template interpreter (lib/chat).
 *
 * The input is a template source, then optionally a NUL byte and JSON data (a
 * conversation with messages, tools and tool calls is used when there is none). The
 * template is parsed with tightened limits (so that a hostile template hits a limit in
 * milliseconds, not seconds), the data with the JSON reader, and the template rendered
 * twice: with no clock, and at a fixed time. Checked, besides what the sanitizers see:
 *   - a refused template or render has a negative status, a message, and leaves
 *     nothing allocated (the allocator counts);
 *   - PI_ERR_INTERNAL never comes back;
 *   - a rendered text is well-formed UTF-8 (strings in are, and every operation keeps
 *     them so) and no longer than the output limit;
 *   - rendering is deterministic: the same input gives the same text twice;
 *   - JSON data that parses is written back by json_dump and that text parses to an
 *     equal value.
 * See tests/fuzz/README.md. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"
#include "chat/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t live;

static void *count_alloc(void *user, size_t n) {
    (void)user;
    size_t *p = malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    live++;
    return (char *)p + 16;
}

static void count_free(void *user, void *ptr) {
    (void)user;
    if (!ptr)
        return;
    live--;
    free((char *)ptr - 16);
}

static const struct pi_allocator counting = {count_alloc, count_free, NULL};

static const char default_data[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi \\u00e9\"}]},"
    "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\","
    "\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]},"
    "{\"role\": \"tool\", \"content\": \"42\", \"tool_call_id\": \"c1\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\":"
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static void check_failure(int st, const struct pi_error *err) {
    if (st >= 0 || st == PI_ERR_INTERNAL || err->msg[0] == '\0')
        abort();
}

static void render_once(const struct jtemplate *t, const struct jdict *vars, int64_t now,
                        const struct jinja_limits *lim, char **text, size_t *len, int *status) {
    struct pi_error err = {PI_OK, ""};
    struct jarena a;
    ja_init(&a, &counting, lim->max_memory, &err);
    jv out;
    int st = jinja_render(t, &a, vars, now, &out, &err);
    *status = st;
    *text = NULL;
    *len = 0;
    if (st < 0) {
        check_failure(st, &err);
    } else {
        if (out.u.str.n > lim->max_output || !u8_valid(out.u.str.s, out.u.str.n))
            abort();
        *text = malloc(out.u.str.n + 1);
        if (!*text)
            abort();
        memcpy(*text, out.u.str.s, out.u.str.n);
        *len = out.u.str.n;
    }
    ja_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t src_n = nul ? (size_t)(nul - data) : size;
    const char *json = nul ? (const char *)nul + 1 : default_data;
    size_t json_n = nul ? size - src_n - 1 : sizeof default_data - 1;

    struct jinja_limits lim;
    jinja_default_limits(&lim);
    lim.max_memory = (size_t)16 << 20;
    lim.max_output = (size_t)1 << 20;
    lim.max_steps = 20000;
    lim.max_calls = 16;
    lim.max_depth = 400;

    struct pi_error err = {PI_OK, ""};
    struct jarena da; /* the data: lives across both renders */
    ja_init(&da, &counting, (size_t)16 << 20, &err);
    jv v;
    int st = json_parse(&da, json, json_n, &v, &err);
    struct jdict *vars = NULL;
    if (st < 0) {
        check_failure(st, &err);
    } else {
        /* the writer's text reads back as the same value */
        struct jbuf b;
        jb_init(&b, &da, (size_t)8 << 20);
        struct json_opts o;
        json_opts_default(&o);
        if (json_dump(&b, v, &o, &err) == PI_OK) {
            jv back;
            if (json_parse(&da, b.p ? b.p : "", b.n, &back, &err) != PI_OK || !jv_eq(v, back))
                abort();
        }
        if (v.kind == JV_DICT)
            vars = v.u.dict;
    }

    struct jtemplate t;
    err.msg[0] = '\0';
    st = jinja_parse(&t, src, src_n, &lim, &counting, &err);
    if (st < 0) {
        check_failure(st, &err);
    } else {
        for (int k = 0; k < 2; k++) {
            int64_t now = k ? 1735732800 : -1;
            char *t1, *t2;
            size_t n1, n2;
            int s1, s2;
            render_once(&t, vars, now, &lim, &t1, &n1, &s1);
            render_once(&t, vars, now, &lim, &t2, &n2, &s2);
            if (s1 != s2 || n1 != n2 || (t1 && memcmp(t1, t2, n1) != 0))
                abort();
            free(t1);
            free(t2);
        }
        jinja_free(&t);
    }
    ja_free(&da);
    if (live != 0)
        abort();
    return 0;
}
