/* toolcall.c -- tool calls in a model's answer: which syntax the chat template teaches
 * (read from the template's text), where a call may start (so that a stream holds it
 * back, as it holds a stop string), and the calls parsed out of the finished answer.
 *
 * The syntaxes are those of the published templates:
 *   Hermes (Qwen 2.5/3, QwQ, Hermes 2/3, SmolLM3):  <tool_call>{"name": N, "arguments": {..}}</tool_call>
 *   Qwen3-Coder:  <tool_call><function=N><parameter=P>value</parameter>...</function></tool_call>
 *   Llama 3.x:    {"name": N, "parameters": {..}}, the whole answer (after <|python_tag|>)
 *   Mistral Nemo: [TOOL_CALLS][{"name": N, "arguments": {..}, "id": ".."}, ...]
 *   Mistral Small 3.2, Devstral, Ministral:  [TOOL_CALLS]N[CALL_ID]id[ARGS]{..} ...
 *   Granite, Phi-4-mini:  <|tool_call|>[{"name": N, "arguments": {..}}, ...]
 * A template that takes no tools gets the Hermes syntax taught in a system message
 * (api.c). An answer whose call does not parse is plain content: nothing is lost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server.h"

static int has(const char *t, const char *needle) {
    return t && strstr(t, needle) != NULL;
}

int tc_syntax_of_template(const char *tmpl) {
    if (has(tmpl, "<tool_call>") && has(tmpl, "<function="))
        return TC_QWEN_XML;
    if (has(tmpl, "<tool_call>"))
        return TC_HERMES;
    if (has(tmpl, "[TOOL_CALLS]") && has(tmpl, "[ARGS]"))
        return TC_MISTRAL_ARGS;
    if (has(tmpl, "[TOOL_CALLS]"))
        return TC_MISTRAL;
    if (has(tmpl, "<|tool_call|>"))
        return TC_GRANITE;
    if (has(tmpl, "<|python_tag|>") || (has(tmpl, "ipython") && has(tmpl, "parameters")))
        return TC_LLAMA3;
    return TC_GENERIC;
}

static const char *opener(int syntax) {
    switch (syntax) {
    case TC_MISTRAL:
    case TC_MISTRAL_ARGS:
        return "[TOOL_CALLS]";
    case TC_GRANITE:
        return "<|tool_call|>";
    case TC_LLAMA3:
        return "<|python_tag|>";
    default:
        return "<tool_call>";
    }
}

static size_t find(const char *t, size_t n, const char *s) {
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(t + i, s, k) == 0)
            return i;
    return SIZE_MAX;
}

static size_t skip_space(const char *t, size_t n, size_t i) {
    while (i < n && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t'))
        i++;
    return i;
}

size_t tc_hold(int syntax, const char *text, size_t len) {
    if (syntax == TC_NONE)
        return len;
    /* Llama 3 answers with the call alone: hold an answer that starts as JSON would */
    if (syntax == TC_LLAMA3) {
        size_t i = skip_space(text, len, 0);
        if (i == len || text[i] == '{')
            return 0;
    }
    const char *o = opener(syntax);
    size_t at = find(text, len, o);
    if (at != SIZE_MAX)
        return at;
    size_t m = strlen(o);
    for (size_t k = m - 1 < len ? m - 1 : len; k > 0; k--)
        if (memcmp(text + len - k, o, k) == 0)
            return len - k;
    return len;
}

/* ---- parsing -------------------------------------------------------------------------- */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

static int add_call(struct tc_result *r, const char *name, size_t name_len, const cJSON *args) {
    if (r->n == TC_MAX_CALLS || name_len == 0)
        return -1;
    char *a = NULL;
    if (!args)
        a = dup_str("{}");
    else if (cJSON_IsString(args)) /* already a JSON text, as OpenAI sends it */
        a = dup_str(args->valuestring);
    else
        a = cJSON_PrintUnformatted(args);
    char *n = malloc(name_len + 1);
    if (!a || !n) {
        free(a);
        free(n);
        return -1;
    }
    memcpy(n, name, name_len);
    n[name_len] = '\0';
    r->calls[r->n].name = n;
    r->calls[r->n].arguments = a;
    r->n++;
    return 0;
}

/* One call object {"name": .., "arguments"|"parameters": ..}. */
static int add_object(struct tc_result *r, const cJSON *o) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsObject(o) || !cJSON_IsString(name))
        return -1;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args)
        args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (args && !cJSON_IsObject(args) && !cJSON_IsString(args))
        return -1;
    return add_call(r, name->valuestring, strlen(name->valuestring), args);
}

/* A JSON value at t[i..n): parsed, and *end set past it. NULL if there is none. */
static cJSON *json_at(const char *t, size_t n, size_t i, size_t *end) {
    const char *e = NULL;
    *end = i;
    cJSON *v = cJSON_ParseWithLengthOpts(t + i, n - i, &e, 0);
    if (v && e)
        *end = (size_t)(e - t);
    return v;
}

static int add_list_or_object(struct tc_result *r, const cJSON *v) {
    if (cJSON_IsArray(v)) {
        if (cJSON_GetArraySize(v) == 0)
            return -1;
        for (const cJSON *c = v->child; c; c = c->next)
            if (add_object(r, c) != 0)
                return -1;
        return 0;
    }
    return add_object(r, v);
}

static int parse_hermes(const char *t, size_t n, struct tc_result *r) {
    size_t i = find(t, n, "<tool_call>");
    r->content_len = i;
    while (i != SIZE_MAX) {
        i += strlen("<tool_call>");
        size_t end;
        cJSON *v = json_at(t, n, skip_space(t, n, i), &end);
        int st = v ? add_object(r, v) : -1;
        cJSON_Delete(v);
        if (st != 0)
            return -1;
        end = skip_space(t, n, end);
        if (end < n && find(t + end, n - end, "</tool_call>") != 0)
            return -1;
        i = end < n ? end + strlen("</tool_call>") : n;
        size_t next = find(t + i, n - i, "<tool_call>");
        if (next == SIZE_MAX) {
            if (skip_space(t, n, i) != n)
                return -1; /* text after the last call: not a call answer */
            break;
        }
        i += next;
    }
    return 0;
}

/* <function=NAME> (<parameter=P>\nVALUE\n</parameter>)* </function> */
static int parse_qwen_xml(const char *t, size_t n, struct tc_result *r) {
    size_t i = find(t, n, "<tool_call>");
    r->content_len = i;
    while (i != SIZE_MAX) {
        i = skip_space(t, n, i + strlen("<tool_call>"));
        if (n - i < 10 || memcmp(t + i, "<function=", 10) != 0)
            return -1;
        i += 10;
        size_t gt = find(t + i, n - i, ">");
        if (gt == SIZE_MAX)
            return -1;
        const char *name = t + i;
        size_t name_len = gt;
        i += gt + 1;
        cJSON *args = cJSON_CreateObject();
        if (!args)
            return -1;
        for (;;) {
            i = skip_space(t, n, i);
            if (n - i >= 11 && memcmp(t + i, "</function>", 11) == 0) {
                i += 11;
                break;
            }
            if (n - i < 11 || memcmp(t + i, "<parameter=", 11) != 0) {
                cJSON_Delete(args);
                return -1;
            }
            i += 11;
            size_t pg = find(t + i, n - i, ">");
            size_t close = pg == SIZE_MAX ? SIZE_MAX : find(t + i + pg, n - i - pg, "</parameter>");
            if (close == SIZE_MAX) {
                cJSON_Delete(args);
                return -1;
            }
            char key[256];
            if (pg >= sizeof key) {
                cJSON_Delete(args);
                return -1;
            }
            memcpy(key, t + i, pg);
            key[pg] = '\0';
            size_t v0 = i + pg + 1, v1 = i + pg + close;
            if (v0 < v1 && t[v0] == '\n')
                v0++;
            if (v1 > v0 && t[v1 - 1] == '\n')
                v1--;
            /* a value that is JSON (a number, true, an object) is that value, else a string */
            size_t end = 0;
            cJSON *v = json_at(t, v1, v0, &end);
            if (v && end != v1) {
                cJSON_Delete(v);
                v = NULL;
            }
            if (!v) {
                char *s = malloc(v1 - v0 + 1);
                if (s) {
                    memcpy(s, t + v0, v1 - v0);
                    s[v1 - v0] = '\0';
                    v = cJSON_CreateString(s);
                    free(s);
                }
            }
            if (!v || !cJSON_AddItemToObject(args, key, v)) {
                cJSON_Delete(v);
                cJSON_Delete(args);
                return -1;
            }
            i = i + pg + close + strlen("</parameter>");
        }
        int st = add_call(r, name, name_len, args);
        cJSON_Delete(args);
        if (st != 0)
            return -1;
        i = skip_space(t, n, i);
        if (n - i >= 12 && memcmp(t + i, "</tool_call>", 12) == 0)
            i += 12;
        size_t next = find(t + i, n - i, "<tool_call>");
        if (next == SIZE_MAX)
            return skip_space(t, n, i) == n ? 0 : -1;
        i += next;
    }
    return 0;
}

/* The answer is the call: one object, or several separated by ';' or whitespace. */
static int parse_llama3(const char *t, size_t n, struct tc_result *r) {
    size_t i = skip_space(t, n, 0);
    r->content_len = 0;
    if (n - i >= 14 && memcmp(t + i, "<|python_tag|>", 14) == 0)
        i += 14;
    else if (i == n || t[i] != '{')
        return -1;
    while ((i = skip_space(t, n, i)) < n) {
        size_t end;
        cJSON *v = json_at(t, n, i, &end);
        int st = v ? add_object(r, v) : -1;
        cJSON_Delete(v);
        if (st != 0)
            return -1;
        i = skip_space(t, n, end);
        if (i < n && t[i] == ';')
            i++;
    }
    return r->n ? 0 : -1;
}

/* [TOOL_CALLS] then a JSON list (Mistral Nemo) or a list, Granite's <|tool_call|>. */
static int parse_marker_list(const char *t, size_t n, const char *marker, struct tc_result *r) {
    size_t i = find(t, n, marker);
    r->content_len = i;
    if (i == SIZE_MAX)
        return -1;
    i = skip_space(t, n, i + strlen(marker));
    size_t end;
    cJSON *v = json_at(t, n, i, &end);
    int st = v ? add_list_or_object(r, v) : -1;
    cJSON_Delete(v);
    if (st != 0 || skip_space(t, n, end) != n)
        return -1;
    return 0;
}

/* ([TOOL_CALLS]NAME([CALL_ID]id)?[ARGS]{..})+ */
static int parse_mistral_args(const char *t, size_t n, struct tc_result *r) {
    size_t i = find(t, n, "[TOOL_CALLS]");
    r->content_len = i;
    while (i != SIZE_MAX) {
        i += strlen("[TOOL_CALLS]");
        size_t a = find(t + i, n - i, "[ARGS]");
        if (a == SIZE_MAX)
            return -1;
        size_t name_len = a, id = find(t + i, a, "[CALL_ID]");
        if (id != SIZE_MAX)
            name_len = id;
        while (name_len > 0 && (t[i + name_len - 1] == ' ' || t[i + name_len - 1] == '\n'))
            name_len--;
        size_t end;
        cJSON *v = json_at(t, n, skip_space(t, n, i + a + 6), &end);
        int st = v && cJSON_IsObject(v) ? add_call(r, t + i, name_len, v) : -1;
        cJSON_Delete(v);
        if (st != 0)
            return -1;
        i = skip_space(t, n, end);
        if (i == n)
            break;
        if (n - i < 12 || memcmp(t + i, "[TOOL_CALLS]", 12) != 0)
            return -1;
    }
    return 0;
}

int tc_parse(int syntax, const char *text, size_t len, struct tc_result *r) {
    memset(r, 0, sizeof *r);
    int st;
    switch (syntax) {
    case TC_HERMES:
    case TC_GENERIC:
        st = parse_hermes(text, len, r);
        break;
    case TC_QWEN_XML:
        st = parse_qwen_xml(text, len, r);
        break;
    case TC_LLAMA3:
        st = parse_llama3(text, len, r);
        break;
    case TC_MISTRAL:
        st = parse_marker_list(text, len, "[TOOL_CALLS]", r);
        break;
    case TC_MISTRAL_ARGS:
        st = parse_mistral_args(text, len, r);
        break;
    case TC_GRANITE:
        st = parse_marker_list(text, len, "<|tool_call|>", r);
        break;
    default:
        st = -1;
    }
    if (st != 0 || r->n == 0) {
        tc_result_free(r);
        return 0;
    }
    /* the content is the text before the first call, without the space that led to it */
    while (r->content_len > 0 && strchr(" \n\r\t", text[r->content_len - 1]))
        r->content_len--;
    return 1;
}

void tc_result_free(struct tc_result *r) {
    for (size_t i = 0; i < r->n; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    memset(r, 0, sizeof *r);
}

/* ---- the request side ------------------------------------------------------------------ */

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

static int fail(const char **param, const char *p, char *why, size_t cap, const char *msg) {
    *param = p;
    snprintf(why, cap, "%s", msg);
    return -1;
}

int tc_request(const cJSON *req, struct tc_request *out, const char **param, char *why,
               size_t cap) {
    memset(out, 0, sizeof *out);
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(req, "tool_choice");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(req, "parallel_tool_calls");
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) > TC_MAX_TOOLS)
            return fail(param, "tools", why, cap,
                        "'tools' must be an array of at most 128 tools.");
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
            if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
                !cJSON_IsObject(fn) || !cJSON_IsString(name))
                return fail(param, "tools", why, cap,
                            "Each tool must be {\"type\": \"function\", \"function\": {\"name\": ..}}.");
            if (!valid_name(name->valuestring))
                return fail(param, "tools", why, cap,
                            "A tool's name must be 1 to 64 letters, digits, '_', '-' or '.'.");
            if (params && !cJSON_IsObject(params))
                return fail(param, "tools", why, cap, "A tool's 'parameters' must be an object.");
        }
        out->n_tools = cJSON_GetArraySize(tools);
    }
    out->choice = TC_CHOICE_AUTO;
    if (choice && !cJSON_IsNull(choice)) {
        if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) {
            out->choice = TC_CHOICE_NONE;
        } else if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "auto")) {
            out->choice = TC_CHOICE_AUTO;
        } else if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "required")) {
            out->choice = TC_CHOICE_REQUIRED;
        } else if (cJSON_IsObject(choice)) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            if (!cJSON_IsString(name))
                return fail(param, "tool_choice", why, cap,
                            "'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                            "\"function\": {\"name\": ..}}.");
            out->choice = TC_CHOICE_REQUIRED;
            out->forced = name->valuestring;
        } else {
            return fail(param, "tool_choice", why, cap,
                        "'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                        "\"function\": {\"name\": ..}}.");
        }
        if (out->choice != TC_CHOICE_NONE && out->n_tools == 0)
            return fail(param, "tool_choice", why, cap, "'tool_choice' needs 'tools'.");
        if (out->forced) {
            int found = 0;
            const cJSON *t;
            cJSON_ArrayForEach(t, tools) {
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
                found |= !strcmp(n->valuestring, out->forced);
            }
            if (!found)
                return fail(param, "tool_choice", why, cap,
                            "'tool_choice' names a function that is not in 'tools'.");
        }
    }
    if (par && !cJSON_IsBool(par))
        return fail(param, "parallel_tool_calls", why, cap,
                    "'parallel_tool_calls' must be a boolean.");
    out->parallel = !par || cJSON_IsTrue(par);
    out->tools = out->choice == TC_CHOICE_NONE ? NULL : tools;
    if (out->choice == TC_CHOICE_NONE)
        out->n_tools = 0;
    return 0;
}

char *tc_generic_prompt(const cJSON *tools) {
    static const char head[] =
        "You can call functions. These are their signatures, as JSON schemas:\n<tools>\n";
    static const char tail[] =
        "</tools>\nTo call one, answer with a JSON object holding its name and arguments "
        "inside <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, "
        "\"arguments\": <args-json-object>}\n</tool_call>";
    struct srv_buf b = {0};
    int rc = buf_append(&b, head, sizeof head - 1);
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char *s = cJSON_PrintUnformatted(t);
        rc |= s ? buf_append(&b, s, strlen(s)) : -1;
        rc |= buf_append(&b, "\n", 1);
        free(s);
    }
    rc |= buf_append(&b, tail, sizeof tail - 1);
    if (rc != 0) {
        buf_free(&b);
        return NULL;
    }
    return b.data;
}

cJSON *tc_messages_for_template(const cJSON *messages) {
    cJSON *m = cJSON_Duplicate(messages, 1);
    cJSON *msg;
    cJSON_ArrayForEach(msg, m) {
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
        cJSON *call;
        cJSON_ArrayForEach(call, calls) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
            cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            if (!cJSON_IsString(args))
                continue;
            cJSON *obj = cJSON_Parse(args->valuestring);
            if (obj && cJSON_IsObject(obj))
                cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
            else
                cJSON_Delete(obj);
        }
    }
    return m;
}

/* The text of a message's content (a string or text parts), or NULL. */
static char *content_of(const cJSON *c) {
    if (cJSON_IsString(c))
        return dup_str(c->valuestring);
    struct srv_buf b = {0};
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsString(t) && buf_append(&b, t->valuestring, strlen(t->valuestring)) != 0) {
            buf_free(&b);
            return NULL;
        }
    }
    return b.data ? b.data : dup_str("");
}

static int add_message(cJSON *out, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content)) {
        cJSON_Delete(m);
        return -1;
    }
    cJSON_AddItemToArray(out, m);
    return 0;
}

cJSON *tc_generic_messages(const cJSON *messages, const cJSON *tools) {
    cJSON *out = cJSON_CreateArray();
    char *teach = tools ? tc_generic_prompt(tools) : NULL;
    if (!out || (tools && !teach)) {
        cJSON_Delete(out);
        free(teach);
        return NULL;
    }
    int rc = 0, first = 1;
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        char *text = content_of(cJSON_GetObjectItemCaseSensitive(m, "content"));
        struct srv_buf b = {0};
        rc |= text ? 0 : -1;
        if (rc == 0 && first && teach && (!strcmp(r, "system") || !strcmp(r, "developer"))) {
            /* the tools go after the conversation's own system message */
            rc |= buf_printf(&b, "%s\n\n%s", text, teach);
            free(teach);
            teach = NULL;
        } else if (rc == 0 && !strcmp(r, "tool")) {
            rc |= buf_printf(&b, "<tool_response>\n%s\n</tool_response>", text);
            r = "user";
        } else if (rc == 0 && !strcmp(r, "assistant")) {
            rc |= buf_append(&b, text, strlen(text));
            const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
            cJSON_ArrayForEach(c, calls) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                char *a = cJSON_IsString(args) ? dup_str(args->valuestring)
                          : args              ? cJSON_PrintUnformatted(args)
                                              : dup_str("{}");
                rc |= a && cJSON_IsString(name)
                          ? buf_printf(&b, "%s<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n"
                                           "</tool_call>",
                                       b.len ? "\n" : "", name->valuestring, a)
                          : -1;
                free(a);
            }
        } else if (rc == 0) {
            rc |= buf_append(&b, text, strlen(text));
        }
        if (rc == 0 && first && teach) { /* no system message: the tools make one */
            rc |= add_message(out, "system", teach);
            free(teach);
            teach = NULL;
        }
        if (rc == 0)
            rc |= add_message(out, r, b.data ? b.data : "");
        buf_free(&b);
        free(text);
        first = 0;
    }
    free(teach);
    if (rc != 0) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}
