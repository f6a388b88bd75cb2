/* api.c -- OpenAI's request and response objects, read and written with cJSON.
 *
 * Requests are checked field by field: a wrong type, a value out of range or a field we
 * cannot honour is a 400 naming the parameter, as OpenAI answers. Unknown fields are
 * ignored (clients send vendor extensions). null is the same as absent. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "jsonschema.h"
#include "server.h"

#define MAX_MESSAGES 4096

void srv_error_set(struct srv_error *err, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...) {
    err->status = status;
    err->type = type;
    err->code = code;
    err->param = param;
    err->param_text[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

static void bad(struct srv_error *err, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void bad(struct srv_error *err, const char *param, const char *fmt, ...) {
    err->status = 400;
    err->type = "invalid_request_error";
    err->code = "invalid_value";
    err->param = param;
    err->param_text[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

char *api_error_json(const struct srv_error *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    if (!e) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddStringToObject(e, "message", err->message);
    cJSON_AddStringToObject(e, "type", err->type ? err->type : "invalid_request_error");
    const char *param = err->param ? err->param : err->param_text[0] ? err->param_text : NULL;
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (err->code)
        cJSON_AddStringToObject(e, "code", err->code);
    else
        cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* The escape \u0000 inside a string of the JSON text body[0..len) (already parsed, so
 * well-formed): its offset, or len when there is none; *key gets the top-level member
 * whose value holds it ([0..*key_len) of body, the key as written, quotes excluded;
 * key_len 0 when the NUL is in a top-level key itself). cJSON's strings end at the first
 * NUL, so such text would silently lose everything after it. */
static size_t find_nul_escape(const char *body, size_t len, const char **key, size_t *key_len) {
    int depth = 0, in_str = 0;
    size_t str_at = 0, last_at = 0, last_len = 0;
    *key = NULL;
    *key_len = 0;
    for (size_t i = 0; i < len; i++) {
        const char ch = body[i];
        if (in_str) {
            if (ch == '\\') {
                if (i + 5 < len && body[i + 1] == 'u' && !memcmp(body + i + 2, "0000", 4)) {
                    /* in a key at depth 1 (the next ':' decides), or in a value */
                    size_t j = i + 6;
                    while (j < len && body[j] != '"')
                        j += body[j] == '\\' ? 2 : 1;
                    j++;
                    while (j < len && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' ||
                                       body[j] == '\r'))
                        j++;
                    if (!(depth == 1 && j < len && body[j] == ':')) {
                        *key = body + last_at;
                        *key_len = last_len;
                    }
                    return i;
                }
                i++; /* the escaped character */
            } else if (ch == '"') {
                in_str = 0;
                if (depth == 1) { /* a key, if ':' follows; values are overwritten next */
                    size_t j = i + 1;
                    while (j < len && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' ||
                                       body[j] == '\r'))
                        j++;
                    if (j < len && body[j] == ':') {
                        last_at = str_at;
                        last_len = i - str_at;
                    }
                }
            }
        } else if (ch == '"') {
            in_str = 1;
            str_at = i + 1;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if (ch == '}' || ch == ']') {
            depth--;
        }
    }
    return len;
}

cJSON *api_parse_body(const char *body, size_t len, struct srv_error *err) {
    if (len == 0) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
                      "The request body is empty; send a JSON object.");
        return NULL;
    }
    if (!utf8_valid(body, len)) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
                      "The request body is not valid UTF-8.");
        return NULL;
    }
    /* RFC 8259 allows no byte below 0x20 in JSON text except tab, LF and CR, and those
     * only as whitespace between tokens; cJSON nevertheless accepts raw control bytes
     * inside strings and keys, and a raw NUL ends its string there ({"content":"hi<NUL>
     * there"} would tokenize "hi", a key "max_tokens<NUL>x" would be read as max_tokens).
     * So any byte 0x00-0x1f other than tab, LF and CR is refused, wherever it is. (Raw
     * tab, LF and CR inside a string are invalid too, but cJSON keeps them whole: nothing
     * is lost, so they are let through without a second scan.) */
    for (size_t i = 0; i < len; i++) {
        const unsigned char ch = (unsigned char)body[i];
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
            srv_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
                          "The request body holds the control character 0x%02x at byte %zu; "
                          "JSON text must escape it (as \\u%04x) inside a string and may "
                          "not contain it elsewhere.",
                          (unsigned)ch, i, (unsigned)ch);
            return NULL;
        }
    }
    /* cJSON stops at nesting depth CJSON_NESTING_LIMIT (1000), so a deep body cannot
     * exhaust the stack; require_null_terminated rejects trailing text. The body buffer
     * is NUL-terminated by the caller. */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len + 1, &end, 1);
    if (!root) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        srv_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
                      "We could not parse the JSON body of your request (near byte %zu).", at);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        srv_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
                      "The request body must be a JSON object.");
        return NULL;
    }
    /* Strings are NUL-terminated from here on (cJSON, the tokenizer, the chat template):
     * a NUL in a string would cut it short without a word, so it is refused. */
    const char *key;
    size_t key_len;
    size_t at = find_nul_escape(body, len, &key, &key_len);
    if (at < len) {
        cJSON_Delete(root);
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", NULL,
                      "The request holds a NUL character (\\u0000) at byte %zu%s%.*s%s; strings "
                      "must not contain NUL.",
                      at, key_len ? " in '" : " in a key", (int)(key_len < 48 ? key_len : 48),
                      key ? key : "", key_len ? "'" : "");
        if (key_len && key_len < sizeof err->param_text) {
            memcpy(err->param_text, key, key_len);
            err->param_text[key_len] = '\0';
        }
        return NULL;
    }
    return root;
}

/* ---- fields ------------------------------------------------------------------------- */

static const cJSON *field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A number in [lo, hi]: 1 when present (written to *out), 0 when absent, -1 with *err. */
static int get_number(const cJSON *obj, const char *name, double lo, double hi, double *out,
                      struct srv_error *err) {
    const cJSON *v = field(obj, name);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v)) {
        bad(err, name, "'%s' must be a number.", name);
        return -1;
    }
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", name,
                      "'%s' must be between %g and %g.", name, lo, hi);
        return -1;
    }
    *out = x;
    return 1;
}

static int get_int(const cJSON *obj, const char *name, double lo, double hi, int64_t *out,
                   struct srv_error *err) {
    double x;
    int rc = get_number(obj, name, lo, hi, &x, err);
    if (rc == 1) {
        if (x != floor(x)) {
            bad(err, name, "'%s' must be an integer.", name);
            return -1;
        }
        *out = (int64_t)x;
    }
    return rc;
}

static int get_bool(const cJSON *obj, const char *name, int *out, struct srv_error *err) {
    const cJSON *v = field(obj, name);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v)) {
        bad(err, name, "'%s' must be a boolean.", name);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 1;
}

/* ---- prompts ------------------------------------------------------------------------ */

static int32_t *tokenize(const pi_model *m, const char *text, size_t len, uint32_t flags,
                         size_t *n_out, struct srv_error *err) {
    int64_t n = pi_tokenize(m, text, len, NULL, 0, flags);
    if (n < 0) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Tokenizing failed: %s.",
                      pi_status_str((int)n));
        return NULL;
    }
    int32_t *toks = malloc((size_t)(n ? n : 1) * sizeof *toks);
    if (!toks) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return NULL;
    }
    if (n)
        pi_tokenize(m, text, len, toks, (size_t)n, flags);
    *n_out = (size_t)n;
    return toks;
}

/* The text of a message's content: a string, or an array of {"type":"text","text":..}
 * parts joined. malloc'd. */
static char *content_text(const cJSON *content, const char *role, struct srv_error *err) {
    if (!content) {
        if (!strcmp(role, "assistant"))
            return calloc(1, 1);
        bad(err, "messages", "Each '%s' message needs a 'content'.", role);
        return NULL;
    }
    if (cJSON_IsString(content))
        return strdup(content->valuestring);
    if (!cJSON_IsArray(content)) {
        bad(err, "messages", "A message's 'content' must be a string or an array of parts.");
        return NULL;
    }
    struct srv_buf b = {0};
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
            !cJSON_IsString(text)) {
            buf_free(&b);
            bad(err, "messages", "Only content parts of type 'text' are supported.");
            return NULL;
        }
        if (buf_append(&b, text->valuestring, strlen(text->valuestring)) != 0) {
            buf_free(&b);
            srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
            return NULL;
        }
    }
    return b.data ? b.data : calloc(1, 1);
}

/* The prompt from the model's chat template: the messages as the client sent them
 * (roles as chat_prompt read them: developer is system) or, when flat, with each content
 * as its text; add_generation_prompt; the members of chat_template_kwargs (an object:
 * enable_thinking, ...) unless they name those two; `tools` when the template takes
 * them (NULL: none); strftime_now at the current time.
 * Returns the status of the render and the text in *out (malloc'd, the model's BOS text
 * at its start left out when tokenizing adds it). */
static int64_t template_prompt(const struct srv_model_info *mi, const cJSON *req,
                               const cJSON *msgs, const cJSON *tools,
                               const pi_chat_message *pm, int flat, char **out, char *msg,
                               size_t msg_cap) {
    *out = NULL;
    cJSON *data = cJSON_CreateObject();
    cJSON *arr = data ? cJSON_AddArrayToObject(data, "messages") : NULL;
    int64_t st = arr ? PI_OK : PI_ERR_NOMEM;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (st != PI_OK)
            break;
        cJSON *c = cJSON_Duplicate(m, 1);
        if (!c || !cJSON_AddItemToArray(arr, c)) {
            cJSON_Delete(c);
            st = PI_ERR_NOMEM;
            break;
        }
        cJSON *role = cJSON_CreateString(pm[i].role);
        if (!role || !cJSON_ReplaceItemInObjectCaseSensitive(c, "role", role)) {
            cJSON_Delete(role);
            st = PI_ERR_NOMEM;
            break;
        }
        if (flat) {
            cJSON_DeleteItemFromObjectCaseSensitive(c, "content");
            if (!cJSON_AddStringToObject(c, "content", pm[i].content))
                st = PI_ERR_NOMEM;
        }
        i++;
    }
    const cJSON *kw = field(req, "chat_template_kwargs");
    if (st == PI_OK && cJSON_IsObject(kw)) {
        const cJSON *k;
        cJSON_ArrayForEach(k, kw) {
            if (!strcmp(k->string, "messages") || !strcmp(k->string, "add_generation_prompt"))
                continue;
            cJSON *v = cJSON_Duplicate(k, 1);
            if (!v || !cJSON_AddItemToObject(data, k->string, v)) {
                cJSON_Delete(v);
                st = PI_ERR_NOMEM;
                break;
            }
        }
    }
    if (st == PI_OK && !cJSON_AddTrueToObject(data, "add_generation_prompt"))
        st = PI_ERR_NOMEM;
    if (st == PI_OK && tools) { /* the template's own tool syntax (toolcall.c) */
        cJSON *t = cJSON_Duplicate(tools, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(data, "tools");
        if (!t || !cJSON_AddItemToObject(data, "tools", t)) {
            cJSON_Delete(t);
            st = PI_ERR_NOMEM;
        }
    }
    char *json = st == PI_OK ? cJSON_PrintUnformatted(data) : NULL;
    cJSON_Delete(data);
    if (!json)
        return PI_ERR_NOMEM;
    int64_t now = (int64_t)time(NULL);
    size_t cap = 1 << 16;
    for (int tries = 0; tries < 2; tries++) {
        char *text = malloc(cap);
        if (!text) {
            st = PI_ERR_NOMEM;
            break;
        }
        st = pi_chat_template_render(mi->chat_template, json, now, text, cap, msg, msg_cap);
        if (st >= 0 && (size_t)st < cap) {
            /* the BOS text a template writes first, when tokenizing with ADD_SPECIAL
             * adds it */
            char bos[64];
            int32_t b = pi_model_token_bos(mi->model), first[4];
            int adds = b >= 0 &&
                       pi_tokenize(mi->model, "", 0, first, 4, PI_TOKENIZE_ADD_SPECIAL) >= 1 &&
                       first[0] == b;
            int64_t bl = adds ? pi_token_to_piece(mi->model, b, bos, sizeof bos,
                                                  PI_PIECE_SPECIAL)
                              : 0;
            if (bl > 0 && (size_t)bl < sizeof bos && st >= bl && !memcmp(text, bos, (size_t)bl)) {
                memmove(text, text + bl, (size_t)(st - bl) + 1);
                st -= bl;
            }
            *out = text;
            break;
        }
        free(text);
        if (st < 0)
            break;
        cap = (size_t)st + 1;
    }
    free(json);
    return st;
}

static int32_t *chat_prompt(const struct srv_model_info *mi, const cJSON *req,
                            const cJSON *msgs, const cJSON *tools, size_t *n_out,
                            struct srv_error *err) {
    /* the template takes tools, and results in role tool */
    const int native = mi->chat_template && mi->tool_syntax != TC_NONE;
    if (!msgs) {
        srv_error_set(err, 400, "invalid_request_error", "missing_required_parameter", "messages",
                      "Missing required parameter: 'messages'.");
        return NULL;
    }
    int n = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : -1;
    if (n < 1 || n > MAX_MESSAGES) {
        bad(err, "messages", "'messages' must be a non-empty array (at most %d messages).",
            MAX_MESSAGES);
        return NULL;
    }
    pi_chat_message *pm = calloc((size_t)n, sizeof *pm);
    char **texts = calloc((size_t)n, sizeof *texts);
    int32_t *toks = NULL;
    char *prompt = NULL;
    if (!pm || !texts) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        goto done;
    }
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
        if (!cJSON_IsString(role)) {
            bad(err, "messages", "Each message must be an object with a string 'role'.");
            goto done;
        }
        const char *r = role->valuestring;
        if (!strcmp(r, "developer"))
            r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
            !(native && !strcmp(r, "tool"))) {
            bad(err, "messages",
                "Unsupported role '%.40s': use system, developer, user, assistant or tool.", r);
            goto done;
        }
        texts[i] = content_text(field(m, "content"), r, err);
        if (!texts[i])
            goto done;
        pm[i] = (pi_chat_message){r, texts[i]};
        i++;
    }
    if (mi->chat_template) {
        /* contents as sent (parts arrays, extra fields); a template that cannot take
         * parts arrays gets their text, as the built-in formats do */
        char msg[256] = "";
        int parts = 0;
        cJSON_ArrayForEach(m, msgs) {
            const cJSON *c = field(m, "content");
            parts |= c && !cJSON_IsString(c);
        }
        int64_t len = template_prompt(mi, req, msgs, tools, pm, 0, &prompt, msg, sizeof msg);
        /* an error of the interpreter ("line L: ...", a type error), not the template's
         * raise_exception: try again with the parts' text */
        if (len == PI_ERR_FORMAT && parts && !strncmp(msg, "line ", 5) && msg[5] >= '0' &&
            msg[5] <= '9')
            len = template_prompt(mi, req, msgs, tools, pm, 1, &prompt, msg, sizeof msg);
        if (len == PI_ERR_FORMAT || len == PI_ERR_RANGE) {
            /* the template refused the conversation (raise_exception) */
            bad(err, "messages", "The model's chat template refused the messages: %.180s", msg);
            goto done;
        }
        if (len < 0) {
            srv_error_set(err, 500, "server_error", NULL, NULL, "The chat template failed: %s.",
                          pi_status_str((int)len));
            goto done;
        }
        toks = tokenize(mi->model, prompt, (size_t)len,
                        PI_TOKENIZE_ADD_SPECIAL | PI_TOKENIZE_PARSE_SPECIAL, n_out, err);
        goto done;
    }
    int64_t need = pi_chat_apply(mi->model, mi->chat_format, pm, (size_t)n, 1, NULL, 0);
    if (need < 0) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "The chat template failed: %s.",
                      pi_status_str((int)need));
        goto done;
    }
    prompt = malloc((size_t)need + 1);
    if (!prompt) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        goto done;
    }
    pi_chat_apply(mi->model, mi->chat_format, pm, (size_t)n, 1, prompt, (size_t)need + 1);
    toks = tokenize(mi->model, prompt, (size_t)need,
                    PI_TOKENIZE_ADD_SPECIAL | PI_TOKENIZE_PARSE_SPECIAL, n_out, err);
done:
    if (texts)
        for (int k = 0; k < n; k++)
            free(texts[k]);
    free(texts);
    free(pm);
    free(prompt);
    return toks;
}

static int32_t *completion_prompt(const struct srv_model_info *mi, const cJSON *req, size_t *n_out,
                                  struct srv_error *err) {
    const cJSON *p = field(req, "prompt");
    if (!p) {
        srv_error_set(err, 400, "invalid_request_error", "missing_required_parameter", "prompt",
                      "Missing required parameter: 'prompt'.");
        return NULL;
    }
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child))
        p = p->child;
    if (cJSON_IsString(p))
        return tokenize(mi->model, p->valuestring, strlen(p->valuestring), PI_TOKENIZE_ADD_SPECIAL,
                        n_out, err);
    /* An array of token ids. */
    int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0;
    if (n < 1 || !cJSON_IsNumber(p->child)) {
        bad(err, "prompt",
            "'prompt' must be a string, an array of one string, or an array of token ids; "
            "one prompt per request.");
        return NULL;
    }
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    if (!toks) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return NULL;
    }
    int64_t n_vocab = pi_model_n_vocab(mi->model);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        double x = cJSON_IsNumber(t) ? t->valuedouble : -1.0;
        if (!(x >= 0 && x < (double)n_vocab && x == floor(x))) {
            free(toks);
            bad(err, "prompt", "Token ids in 'prompt' must be integers in [0, n_vocab).");
            return NULL;
        }
        toks[i++] = (int32_t)x;
    }
    *n_out = (size_t)n;
    return toks;
}

/* ---- the job ------------------------------------------------------------------------ */

static int add_stop(struct srv_job *job, const cJSON *s, struct srv_error *err) {
    if (!cJSON_IsString(s)) {
        bad(err, "stop", "'stop' must be a string or an array of strings.");
        return -1;
    }
    size_t len = strlen(s->valuestring);
    if (len == 0)
        return 0; /* matches nothing */
    if (len > 256) {
        bad(err, "stop", "A stop string may have at most 256 bytes.");
        return -1;
    }
    if (!(job->stop[job->n_stop] = strdup(s->valuestring))) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return -1;
    }
    job->n_stop++;
    return 0;
}

static int get_stops(const cJSON *req, struct srv_job *job, struct srv_error *err) {
    const cJSON *stop = field(req, "stop");
    if (!stop || cJSON_IsString(stop))
        return stop ? add_stop(job, stop, err) : 0;
    if (!cJSON_IsArray(stop)) {
        bad(err, "stop", "'stop' must be a string or an array of strings.");
        return -1;
    }
    if (cJSON_GetArraySize(stop) > SRV_MAX_STOP) {
        bad(err, "stop", "'stop' takes at most %d strings.", SRV_MAX_STOP);
        return -1;
    }
    const cJSON *s;
    cJSON_ArrayForEach(s, stop) {
        if (add_stop(job, s, err) < 0)
            return -1;
    }
    return 0;
}

/* A grammar for the job from GBNF text; `param` names the field for errors. */
static int make_grammar(const struct srv_model_info *mi, const char *gbnf, size_t len,
                        const char *param, const char *what, struct srv_job *job,
                        struct srv_error *err) {
    char msg[200];
    int st = pi_grammar_create(mi->model, gbnf, len, NULL, &job->grammar, msg, sizeof msg);
    if (st == PI_ERR_NOMEM) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return -1;
    }
    if (st != PI_OK) {
        bad(err, param, "%s: %s", what, msg);
        return -1;
    }
    return 0;
}

/* response_format: {"type": "text"} (nothing), {"type": "json_object"} (*json = 1),
 * {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}
 * (a grammar made from the schema: tools/common/jsonschema.h says what is supported). */
static int get_response_format(const struct srv_model_info *mi, const cJSON *req,
                               struct srv_job *job, struct srv_error *err) {
    const cJSON *rf = field(req, "response_format");
    job->json = 0;
    if (!rf)
        return 0;
    const cJSON *type = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
    if (!cJSON_IsString(type)) {
        bad(err, "response_format", "'response_format' must be an object with a 'type'.");
        return -1;
    }
    if (!strcmp(type->valuestring, "json_object")) {
        job->json = 1;
        return 0;
    }
    if (!strcmp(type->valuestring, "text"))
        return 0;
    if (!strcmp(type->valuestring, "json_schema")) {
        const cJSON *js = field(rf, "json_schema");
        const cJSON *schema = cJSON_IsObject(js) ? field(js, "schema") : NULL;
        if (!schema || !(cJSON_IsObject(schema) || cJSON_IsBool(schema))) {
            bad(err, "response_format", "response_format 'json_schema' must be an object with "
                                        "a 'schema' (a JSON schema).");
            return -1;
        }
        char msg[200];
        char *gbnf = json_schema_to_gbnf(schema, msg, sizeof msg);
        if (!gbnf) {
            bad(err, "response_format", "response_format json_schema: %s", msg);
            return -1;
        }
        int st = make_grammar(mi, gbnf, strlen(gbnf), "response_format",
                              "response_format json_schema", job, err);
        free(gbnf);
        return st;
    }
    bad(err, "response_format",
        "response_format 'type' must be 'text', 'json_object' or 'json_schema'.");
    return -1;
}

/* tool_choice required (or a named function): a grammar that admits only a call answer
 * in the model's syntax, whose name is one of the tools (or the named one) and whose
 * arguments follow that tool's schema (any JSON object when the schema uses a keyword
 * the converter does not take: a forced call is better loose than refused). */
static int tools_grammar(const struct srv_model_info *mi, const struct tc_request *tr,
                         int syntax, struct srv_job *job, struct srv_error *err) {
    if (syntax == TC_QWEN_XML || syntax == TC_MISTRAL_ARGS) {
        bad(err, "tool_choice",
            "'tool_choice' %s is not supported for this model's tool-call syntax: use auto.",
            tr->forced ? "naming a function" : "'required'");
        return -1;
    }
    const char *args_key = syntax == TC_LLAMA3 ? "parameters" : "arguments";
    cJSON *any = cJSON_CreateArray(), *schema = cJSON_CreateObject();
    const cJSON *t;
    cJSON_ArrayForEach(t, tr->tools) {
        const cJSON *fn = field(t, "function");
        const char *name = field(fn, "name")->valuestring;
        if (tr->forced && strcmp(name, tr->forced))
            continue;
        cJSON *call = cJSON_CreateObject();
        cJSON_AddStringToObject(call, "type", "object");
        cJSON *props = cJSON_AddObjectToObject(call, "properties");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "name"), "const", name);
        const cJSON *params = field(fn, "parameters");
        char msg[200];
        char *probe = params ? json_schema_to_gbnf(params, msg, sizeof msg) : NULL;
        if (probe) {
            cJSON_AddItemToObject(props, args_key, cJSON_Duplicate(params, 1));
        } else {
            cJSON_AddStringToObject(cJSON_AddObjectToObject(props, args_key), "type", "object");
        }
        free(probe);
        cJSON *req = cJSON_AddArrayToObject(call, "required");
        cJSON_AddItemToArray(req, cJSON_CreateString("name"));
        cJSON_AddItemToArray(req, cJSON_CreateString(args_key));
        cJSON_AddFalseToObject(call, "additionalProperties");
        cJSON_AddItemToArray(any, call);
    }
    if (syntax == TC_MISTRAL || syntax == TC_GRANITE) { /* a list of calls */
        cJSON_AddStringToObject(schema, "type", "array");
        cJSON_AddItemToObject(cJSON_AddObjectToObject(schema, "items"), "anyOf", any);
        cJSON_AddNumberToObject(schema, "minItems", 1);
        if (!tr->parallel)
            cJSON_AddNumberToObject(schema, "maxItems", 1);
    } else {
        cJSON_AddItemToObject(schema, "anyOf", any);
    }
    char msg[200];
    char *gbnf = json_schema_to_gbnf(schema, msg, sizeof msg);
    cJSON_Delete(schema);
    struct srv_buf g = {0};
    const char *start = syntax == TC_MISTRAL ? "\"[TOOL_CALLS]\" "
                        : syntax == TC_GRANITE ? "\"<|tool_call|>\" "
                                               : "";
    int rc = gbnf ? 0 : -1;
    if (rc == 0 && (syntax == TC_HERMES || syntax == TC_GENERIC))
        rc = buf_printf(&g, "%s\ntc-root ::= tc-call%s\ntc-call ::= \"<tool_call>\\n\" root "
                            "\"\\n</tool_call>\"\n",
                        gbnf, tr->parallel ? " (\"\\n\" tc-call)*" : "");
    else if (rc == 0 && syntax == TC_LLAMA3)
        rc = buf_printf(&g, "%s\ntc-root ::= root%s\n", gbnf,
                        tr->parallel ? " (\"; \" root)*" : "");
    else if (rc == 0)
        rc = buf_printf(&g, "%s\ntc-root ::= %sroot\n", gbnf, start);
    free(gbnf);
    if (rc != 0) {
        buf_free(&g);
        bad(err, "tools", "The tools' schemas give no grammar: %s", msg);
        return -1;
    }
    int st = pi_grammar_create(mi->model, g.data, g.len, "tc-root", &job->grammar, msg, sizeof msg);
    buf_free(&g);
    if (st == PI_ERR_NOMEM) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return -1;
    }
    if (st != PI_OK) {
        bad(err, "tools", "The tools give no grammar for a forced call: %s", msg);
        return -1;
    }
    return 0;
}

/* tools, tool_choice, parallel_tool_calls: job->tool_syntax (TC_NONE without tools), and
 * the forcing grammar for tool_choice required. A model whose executed template takes
 * tools in a syntax toolcall.c reads gets them through the template; any other is taught
 * the Hermes syntax in its system message (TC_GENERIC). */
static int job_tools(const struct srv_model_info *mi, const cJSON *req, struct srv_job *job,
                     struct srv_error *err) {
    struct tc_request tr;
    const char *param = NULL;
    char why[200];
    if (tc_request(req, &tr, &param, why, sizeof why) != 0) {
        bad(err, param, "%s", why);
        return -1;
    }
    job->tools = tr.tools;
    job->tool_syntax = !tr.n_tools ? TC_NONE : mi->tool_syntax ? mi->tool_syntax : TC_GENERIC;
    if (tr.choice != TC_CHOICE_REQUIRED)
        return 0;
    if (job->json || job->grammar) {
        bad(err, "tool_choice", "A forced tool call and response_format or grammar cannot be "
                                "combined.");
        return -1;
    }
    return tools_grammar(mi, &tr, job->tool_syntax, job, err);
}

/* 1 when the conversation has calls or tool results of earlier turns. */
static int tool_turns(const cJSON *msgs) {
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *r = field(m, "role");
        if (field(m, "tool_calls") || (cJSON_IsString(r) && !strcmp(r->valuestring, "tool")))
            return 1;
    }
    return 0;
}

/* The messages for the template of a request with tools, or with calls and results of
 * earlier turns (NULL after setting err). */
static cJSON *tools_messages(const struct srv_model_info *mi, const cJSON *msgs,
                             const struct srv_job *job, struct srv_error *err) {
    if (!cJSON_IsArray(msgs)) {
        bad(err, "messages", "'messages' must be a non-empty array.");
        return NULL;
    }
    /* a template that takes tools renders the turns itself; else they are taught */
    cJSON *m = mi->tool_syntax != TC_NONE ? tc_messages_for_template(msgs)
                                          : tc_generic_messages(msgs, job->tools);
    if (!m)
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
    return m;
}

/* grammar: GBNF text (as llama-server takes it), start rule "root". */
static int get_grammar(const struct srv_model_info *mi, const cJSON *req, struct srv_job *job,
                       struct srv_error *err) {
    const cJSON *g = field(req, "grammar");
    if (!g || cJSON_IsNull(g))
        return 0;
    if (!cJSON_IsString(g)) {
        bad(err, "grammar", "'grammar' must be a string (GBNF).");
        return -1;
    }
    if (job->json || job->grammar) {
        bad(err, "grammar", "'grammar' and a JSON response_format cannot be combined.");
        return -1;
    }
    return make_grammar(mi, g->valuestring, strlen(g->valuestring), "grammar", "grammar", job,
                        err);
}

/* logit_bias: {"token id": bias in [-100, 100], ...}, at most 1024 of them. */
static int get_logit_bias(const struct srv_model_info *mi, const cJSON *req,
                          struct srv_job *job, struct srv_error *err) {
    const cJSON *lb = field(req, "logit_bias");
    if (!lb)
        return 0;
    if (!cJSON_IsObject(lb)) {
        bad(err, "logit_bias", "'logit_bias' must be an object of token ids to numbers.");
        return -1;
    }
    int n = cJSON_GetArraySize(lb);
    if (n > 1024) {
        bad(err, "logit_bias", "'logit_bias' takes at most 1024 tokens.");
        return -1;
    }
    if (n == 0)
        return 0;
    job->bias_id = malloc((size_t)n * sizeof *job->bias_id);
    job->bias = malloc((size_t)n * sizeof *job->bias);
    if (!job->bias_id || !job->bias) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return -1;
    }
    const int64_t n_vocab = pi_model_n_vocab(mi->model);
    const cJSON *b;
    cJSON_ArrayForEach(b, lb) {
        char *end;
        errno = 0;
        long long id = strtoll(b->string, &end, 10);
        if (errno || end == b->string || *end || id < 0 || id >= n_vocab) {
            bad(err, "logit_bias", "'logit_bias' keys must be token ids in [0, n_vocab).");
            return -1;
        }
        if (!cJSON_IsNumber(b) || !(b->valuedouble >= -100.0 && b->valuedouble <= 100.0)) {
            bad(err, "logit_bias", "'logit_bias' values must be numbers in [-100, 100].");
            return -1;
        }
        job->bias_id[job->n_bias] = (int32_t)id;
        job->bias[job->n_bias++] = (float)b->valuedouble;
    }
    return 0;
}

static uint64_t fresh_seed(void) {
    static _Atomic uint64_t counter;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t x = (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 30);
    return x + 0x9e3779b97f4a7c15ull * ++counter;
}

struct srv_job *api_make_job(const struct srv_model_info *mi, const cJSON *req, int chat,
                             int *stream, int *include_usage, struct srv_error *err) {
    const cJSON *model = field(req, "model");
    if (model && !cJSON_IsString(model)) {
        bad(err, "model", "'model' must be a string.");
        return NULL;
    }
    /* Parameters we cannot honour are refused rather than ignored. */
    static const char *const unsupported[] = {"functions", "function_call", "suffix"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++) {
        const cJSON *v = field(req, unsupported[i]);
        if (v && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0) &&
            !(cJSON_IsString(v) && (!v->valuestring[0] || !strcmp(v->valuestring, "none")))) {
            srv_error_set(err, 400, "invalid_request_error", "unsupported_parameter",
                          unsupported[i], "'%s' is not supported by this server.", unsupported[i]);
            return NULL;
        }
    }
    /* logprobs: chat takes "logprobs": true and "top_logprobs": N, completions
     * "logprobs": N (null: none); both N <= 20. */
    int64_t logprobs = -1, top_logprobs = -1;
    int echo = 0;
    if (chat) {
        int want = 0;
        if (get_bool(req, "logprobs", &want, err) < 0 ||
            get_int(req, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &top_logprobs, err) < 0)
            return NULL;
        if (top_logprobs >= 0 && !want) {
            bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true.");
            return NULL;
        }
        logprobs = want ? (top_logprobs > 0 ? top_logprobs : 0) : -1;
    } else if (get_int(req, "logprobs", 0, SRV_MAX_TOP_LOGPROBS, &logprobs, err) < 0 ||
               get_bool(req, "echo", &echo, err) < 0) {
        return NULL;
    }
    /* OpenAI's defaults (temperature 1, top_p 1), and the library's top-k 40 and
     * min-p 0.05 on top, which the extension fields top_k and min_p (0: off) change;
     * the library takes no negative penalties. */
    pi_sampler_params sp;
    pi_sampler_default_params(&sp);
    int64_t n = 1, best_of = 1, max_tokens = -1, seed = 0, top_k = sp.top_k;
    double temperature = 1.0, top_p = 1.0, min_p = sp.min_p, fpen = 0.0, ppen = 0.0;
    *stream = 0;
    *include_usage = 0;
    if (get_int(req, "n", 1, 128, &n, err) < 0 ||
        get_int(req, "best_of", 1, 1, &best_of, err) < 0 ||
        get_number(req, "temperature", 0.0, 2.0, &temperature, err) < 0 ||
        get_number(req, "top_p", 0.0, 1.0, &top_p, err) < 0 ||
        get_int(req, "top_k", 0, 1 << 20, &top_k, err) < 0 ||
        get_number(req, "min_p", 0.0, 1.0, &min_p, err) < 0 ||
        get_number(req, "frequency_penalty", 0.0, 2.0, &fpen, err) < 0 ||
        get_number(req, "presence_penalty", 0.0, 2.0, &ppen, err) < 0 ||
        get_bool(req, "stream", stream, err) < 0)
        return NULL;
    if (*stream && echo) {
        srv_error_set(err, 400, "invalid_request_error", "unsupported_parameter", "echo",
                      "'echo' is not supported with 'stream' by this server: ask without "
                      "streaming.");
        return NULL;
    }
    if ((uint32_t)n > mi->n_slots) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", "n",
                      "'n' is %lld but this server has %u slots (--parallel).", (long long)n,
                      mi->n_slots);
        return NULL;
    }
    const char *mt_name =
        field(req, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    /* 0 only with echo: the prompt comes back, scored, and nothing is generated */
    if (get_int(req, mt_name, echo ? 0 : 1, 2147483647.0, &max_tokens, err) < 0)
        return NULL;
    int64_t n_keep = mi->n_keep;
    if (get_int(req, "n_keep", -1, 2147483647.0, &n_keep, err) < 0)
        return NULL;
    int has_seed = get_int(req, "seed", -9223372036854775808.0, 9223372036854775807.0, &seed, err);
    if (has_seed < 0)
        return NULL;
    const cJSON *so = field(req, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so) || get_bool(so, "include_usage", include_usage, err) < 0) {
            bad(err, "stream_options", "'stream_options' must be an object.");
            return NULL;
        }
    }
    struct srv_job *job = job_create((int)n);
    if (!job) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return NULL;
    }
    if (get_stops(req, job, err) < 0 || get_response_format(mi, req, job, err) < 0 ||
        get_grammar(mi, req, job, err) < 0 || get_logit_bias(mi, req, job, err) < 0)
        goto fail;
    if (!chat && (field(req, "tools") || field(req, "tool_choice"))) {
        bad(err, field(req, "tools") ? "tools" : "tool_choice",
            "Tools are for /v1/chat/completions.");
        goto fail;
    }
    const cJSON *msgs = field(req, "messages");
    cJSON *told = NULL; /* the messages as the template gets them, when they change */
    if (chat && msgs && (job_tools(mi, req, job, err) < 0 ||
                         ((job->tool_syntax || tool_turns(msgs)) &&
                          !(told = tools_messages(mi, msgs, job, err)))))
        goto fail;
    job->prompt = chat ? chat_prompt(mi, req, told ? told : msgs,
                                     job->tool_syntax == mi->tool_syntax ? job->tools : NULL,
                                     &job->n_prompt, err)
                       : completion_prompt(mi, req, &job->n_prompt, err);
    cJSON_Delete(told);
    if (!job->prompt)
        goto fail;
    if (job->n_prompt == 0) {
        bad(err, chat ? "messages" : "prompt", "The prompt is empty.");
        goto fail;
    }
    if ((int64_t)job->n_prompt >= mi->n_ctx) {
        srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded",
                      chat ? "messages" : "prompt",
                      "This model's context holds %lld tokens per slot; the prompt has %zu.",
                      (long long)mi->n_ctx, job->n_prompt);
        goto fail;
    }
    if (max_tokens < 0)
        max_tokens = mi->default_max_tokens;
    /* What fits: a choice ends (finish_reason length) when its slot's context is full,
     * unless the context shifts; then max_tokens alone ends it, up to SRV_MAX_SHIFTED. */
    const int64_t room = mi->n_ctx - (int64_t)job->n_prompt;
    if (max_tokens > (mi->context_shift ? SRV_MAX_SHIFTED : room)) {
        max_tokens = mi->context_shift ? SRV_MAX_SHIFTED : room;
        job->clamped = !mi->context_shift;
    }
    job->max_tokens = max_tokens;
    job->shift_keep = -1;
    if (mi->context_shift) {
        const int64_t bos = pi_model_token_bos(mi->model);
        job->shift_keep = n_keep == -2 ? (bos >= 0 && job->prompt[0] == bos)
                          : n_keep < 0 ? (int64_t)job->n_prompt
                                       : n_keep;
        if (job->shift_keep > mi->n_ctx / 2) /* each shift frees at least a quarter */
            job->shift_keep = mi->n_ctx / 2;
    }
    job->logprobs = (int)logprobs;
    job->echo = echo;
    if (logprobs >= 0) {
        for (int i = 0; i < job->n && max_tokens > 0; i++)
            if (!(job->choices[i].lp = calloc((size_t)max_tokens, sizeof(struct srv_logprob))))
                goto oom;
        if (echo && !(job->prompt_lp = calloc(job->n_prompt, sizeof *job->prompt_lp)))
            goto oom;
    }
    if (echo) {
        const cJSON *p = field(req, "prompt");
        if (cJSON_IsArray(p))
            p = p->child;
        if (cJSON_IsString(p) && !(job->prompt_text = strdup(p->valuestring)))
            goto oom;
    }
    sp.temperature = (float)temperature;
    sp.top_p = (float)top_p;
    sp.top_k = (int32_t)top_k;
    sp.min_p = (float)min_p;
    sp.frequency_penalty = (float)fpen;
    sp.presence_penalty = (float)ppen;
    /* OpenAI's penalties count everything generated (never the prompt). */
    sp.penalty_last_n = fpen != 0.0 || ppen != 0.0 ? (int32_t)max_tokens : 0;
    sp.seed = has_seed ? (uint64_t)seed : fresh_seed();
    job->sampling = sp;
    return job;
oom:
    srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
fail:
    job_free(job);
    return NULL;
}

/* ---- responses ---------------------------------------------------------------------- */

static int append_text(void *user, const char *text, size_t len) {
    return buf_append(user, text, len) != 0;
}

/* The text of toks[0..n), as the detokenizer gives it (U+FFFD for a broken UTF-8 end). */
static int detok_tokens(const pi_model *m, const int32_t *toks, size_t n, struct srv_buf *out) {
    pi_detok *dt = NULL;
    int st = pi_detok_create(m, 0, &dt);
    for (size_t i = 0; st == PI_OK && i < n; i++)
        st = pi_detok_push(dt, toks[i], append_text, out);
    if (st == PI_OK)
        st = pi_detok_flush(dt, append_text, out);
    pi_detok_destroy(dt);
    if (st == PI_OK && !out->data)
        st = buf_append(out, "", 0) ? PI_ERR_NOMEM : PI_OK;
    return st;
}

/* A token's piece (control tokens as their text): its raw bytes in raw[0..*n), and as
 * valid UTF-8 (U+FFFD for bytes of a character the token only starts) in *text. */
static int token_piece(const pi_model *m, int32_t tok, char *raw, size_t cap, size_t *n,
                       struct srv_buf *text) {
    int64_t len = pi_token_to_piece(m, tok, raw, cap, PI_PIECE_SPECIAL);
    if (len < 0)
        len = 0;
    *n = (size_t)len < cap - 1 ? (size_t)len : cap - 1;
    text->len = 0;
    return utf8_append_lossy(text, raw, *n);
}

enum { PIECE_CAP = 512 };

/* chat: {"token", "logprob", "bytes"} */
static cJSON *chat_token_lp(const pi_model *m, int32_t tok, float lp, struct srv_buf *tmp) {
    char raw[PIECE_CAP];
    size_t n;
    cJSON *o = cJSON_CreateObject();
    if (!o || token_piece(m, tok, raw, sizeof raw, &n, tmp) != 0)
        return o;
    cJSON_AddStringToObject(o, "token", tmp->data);
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)raw[i]));
    return o;
}

/* Chat's choices[i].logprobs: {"content": [{token, logprob, bytes, top_logprobs}],
 * "refusal": null}, for the first n generated tokens. */
static cJSON *chat_logprobs(const pi_model *m, const struct srv_logprob *lp, size_t n) {
    struct srv_buf tmp = {0};
    cJSON *root = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(root, "content");
    for (size_t i = 0; i < n; i++) {
        cJSON *o = chat_token_lp(m, lp[i].token, lp[i].logprob, &tmp);
        cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int k = 0; k < lp[i].n_top; k++)
            cJSON_AddItemToArray(top, chat_token_lp(m, lp[i].top_id[k], lp[i].top_lp[k], &tmp));
        cJSON_AddItemToArray(content, o);
    }
    cJSON_AddNullToObject(root, "refusal");
    buf_free(&tmp);
    return root;
}

/* One token of a completion's logprobs: its text, log-probability (lp NULL: null, the
 * first prompt token) and alternatives, starting at character `offset` of the text. */
static void completion_token_lp(const pi_model *m, cJSON *tokens, cJSON *lps, cJSON *tops,
                                cJSON *offsets, int32_t tok, const struct srv_logprob *lp,
                                size_t offset, struct srv_buf *tmp) {
    char raw[PIECE_CAP];
    size_t n;
    token_piece(m, tok, raw, sizeof raw, &n, tmp);
    cJSON_AddItemToArray(tokens, cJSON_CreateString(tmp->data ? tmp->data : ""));
    cJSON_AddItemToArray(lps, lp ? cJSON_CreateNumber(lp->logprob) : cJSON_CreateNull());
    if (!lp) {
        cJSON_AddItemToArray(tops, cJSON_CreateNull());
    } else {
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < lp->n_top; k++) {
            token_piece(m, lp->top_id[k], raw, sizeof raw, &n, tmp);
            if (tmp->data && !cJSON_GetObjectItemCaseSensitive(top, tmp->data))
                cJSON_AddNumberToObject(top, tmp->data, lp->top_lp[k]);
        }
        cJSON_AddItemToArray(tops, top);
    }
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)offset));
}

size_t api_lp_count(const struct srv_choice *ch, size_t upto, int final) {
    size_t n = 0, start = 0;
    while (n < (size_t)ch->n_tokens &&
           (ch->lp[n].text_end <= upto || (final && start < ch->text.len))) {
        start = ch->lp[n].text_end;
        n++;
    }
    return n;
}

static size_t tokens_in_text(const struct srv_choice *ch) {
    return api_lp_count(ch, ch->text.len, 1);
}

static const char *finish_name(int f) {
    switch (f) {
    case SRV_FINISH_STOP:
        return "stop";
    case SRV_FINISH_LENGTH:
        return "length";
    case SRV_FINISH_TOOLS:
        return "tool_calls";
    default:
        return NULL;
    }
}

/* A choice's calls as OpenAI's tool_calls (in a stream each with its index). The ids
 * are the response's own: unique per response, choice and call. */
static cJSON *tool_calls_json(const struct srv_choice *ch, const char *id, int choice,
                              int stream) {
    cJSON *a = cJSON_CreateArray();
    for (size_t k = 0; a && k < ch->calls.n; k++) {
        cJSON *t = cJSON_CreateObject();
        char cid[96];
        snprintf(cid, sizeof cid, "call_%s_%d_%zu", id, choice, k);
        if (stream)
            cJSON_AddNumberToObject(t, "index", (double)k);
        cJSON_AddStringToObject(t, "id", cid);
        cJSON_AddStringToObject(t, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(t, "function");
        cJSON_AddStringToObject(f, "name", ch->calls.calls[k].name);
        cJSON_AddStringToObject(f, "arguments", ch->calls.calls[k].arguments);
        cJSON_AddItemToArray(a, t);
    }
    return a;
}

static cJSON *response_head(const struct srv_model_info *mi, const char *object, const char *id,
                            int64_t created) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)created);
    cJSON_AddStringToObject(root, "model", mi->name);
    cJSON_AddStringToObject(root, "system_fingerprint", "libpowerinfer");
    return root;
}

static void add_usage(cJSON *root, int64_t prompt, int64_t cached, int64_t completion) {
    cJSON *u = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)cached);
}

static void add_finish(cJSON *obj, int finish) {
    const char *f = finish_name(finish);
    if (f)
        cJSON_AddStringToObject(obj, "finish_reason", f);
    else
        cJSON_AddNullToObject(obj, "finish_reason");
}

/* A completion's choices[i].logprobs: {tokens, token_logprobs, top_logprobs,
 * text_offset} over the echoed prompt (with echo; prompt_text[0..prompt_len) is its
 * text) and the generated tokens [from, to); offsets count characters. */
static cJSON *completion_logprobs(const struct srv_model_info *mi, const struct srv_job *job,
                                  const struct srv_choice *ch, const char *prompt_text,
                                  size_t prompt_len, size_t from, size_t to) {
    cJSON *root = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(root, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(root, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(root, "top_logprobs");
    cJSON *offsets = cJSON_AddArrayToObject(root, "text_offset");
    struct srv_buf tmp = {0};
    char raw[PIECE_CAP];
    size_t base = 0; /* characters before the generated text */
    if (job && job->echo) {
        size_t at = 0; /* bytes of the prompt's text the pieces so far cover */
        for (size_t i = 0; i < job->n_prompt; i++) {
            size_t off = utf8_chars(prompt_text, at < prompt_len ? at : prompt_len);
            completion_token_lp(mi->model, tokens, lps, tops, offsets, job->prompt[i],
                                i ? &job->prompt_lp[i] : NULL, off, &tmp);
            size_t n;
            token_piece(mi->model, job->prompt[i], raw, sizeof raw, &n, &tmp);
            at += n;
        }
        base = utf8_chars(prompt_text, prompt_len);
    }
    const char *text = ch->text.data ? ch->text.data : "";
    for (size_t i = from; i < to; i++) {
        size_t start = i ? ch->lp[i - 1].text_end : 0;
        start = start < ch->text.len ? start : ch->text.len;
        completion_token_lp(mi->model, tokens, lps, tops, offsets, ch->lp[i].token, &ch->lp[i],
                            base + utf8_chars(text, start), &tmp);
    }
    buf_free(&tmp);
    return root;
}

char *api_completion_json(const struct srv_model_info *mi, const struct srv_job *job, int chat,
                          const char *id, int64_t created) {
    cJSON *root = response_head(mi, chat ? "chat.completion" : "text_completion", id, created);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    int64_t completion = 0;
    /* echo: the prompt as sent, or the text of its token ids */
    struct srv_buf prompt = {0};
    if (job->echo && !job->prompt_text &&
        detok_tokens(mi->model, job->prompt, job->n_prompt, &prompt) != PI_OK) {
        buf_free(&prompt);
        cJSON_Delete(root);
        return NULL;
    }
    const char *ptext = job->prompt_text ? job->prompt_text : prompt.data ? prompt.data : "";
    const size_t plen = strlen(ptext);
    struct srv_buf full = {0};
    for (int i = 0; i < job->n; i++) {
        const struct srv_choice *ch = &job->choices[i];
        const char *text = ch->text.data ? ch->text.data : "";
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
        if (chat) {
            cJSON *msg = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            if (ch->finish != SRV_FINISH_TOOLS) {
                cJSON_AddStringToObject(msg, "content", text);
            } else {
                if (ch->calls.content_len == 0) {
                    cJSON_AddNullToObject(msg, "content");
                } else {
                    char *ct = malloc(ch->calls.content_len + 1);
                    if (ct) {
                        memcpy(ct, text, ch->calls.content_len);
                        ct[ch->calls.content_len] = '\0';
                        cJSON_AddStringToObject(msg, "content", ct);
                        free(ct);
                    }
                }
                cJSON_AddItemToObject(msg, "tool_calls", tool_calls_json(ch, id, i, 0));
            }
        } else if (job->echo) {
            full.len = 0;
            if (buf_append(&full, ptext, plen) == 0 && buf_append(&full, text, ch->text.len) == 0)
                cJSON_AddStringToObject(c, "text", full.data);
        } else {
            cJSON_AddStringToObject(c, "text", text);
        }
        if (job->logprobs < 0)
            cJSON_AddNullToObject(c, "logprobs");
        else if (chat)
            cJSON_AddItemToObject(c, "logprobs",
                                  chat_logprobs(mi->model, ch->lp, tokens_in_text(ch)));
        else
            cJSON_AddItemToObject(c, "logprobs", completion_logprobs(mi, job, ch, ptext, plen, 0,
                                                                     tokens_in_text(ch)));
        add_finish(c, ch->finish);
        if (ch->finish == SRV_FINISH_LENGTH && ch->context_full)
            cJSON_AddTrueToObject(c, "context_full");
        cJSON_AddItemToArray(choices, c);
        completion += ch->n_tokens;
    }
    buf_free(&full);
    buf_free(&prompt);
    add_usage(root, (int64_t)job->n_prompt, (int64_t)job->n_cached, completion);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static int append_event(struct srv_buf *out, cJSON *root) {
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s)
        return -1;
    int rc = buf_printf(out, "data: %s\n\n", s);
    free(s);
    return rc;
}

int api_stream_chunk(struct srv_buf *out, const struct srv_model_info *mi, int chat, const char *id,
                     int64_t created, int index, const char *text, size_t len, int role,
                     int finish, const struct srv_choice *ch, size_t lp_from, size_t lp_to) {
    cJSON *root =
        response_head(mi, chat ? "chat.completion.chunk" : "text_completion", id, created);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", index);
    char *copy = malloc(len + 1);
    if (!copy) {
        cJSON_Delete(root);
        return -1;
    }
    if (len)
        memcpy(copy, text, len);
    copy[len] = '\0';
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role)
            cJSON_AddStringToObject(d, "role", "assistant");
        if (text || role)
            cJSON_AddStringToObject(d, "content", copy);
    } else {
        cJSON_AddStringToObject(c, "text", copy);
    }
    free(copy);
    if (!ch || lp_from >= lp_to)
        cJSON_AddNullToObject(c, "logprobs");
    else if (chat)
        cJSON_AddItemToObject(c, "logprobs",
                              chat_logprobs(mi->model, ch->lp + lp_from, lp_to - lp_from));
    else /* streaming has no echo: the job's prompt is not part of the text */
        cJSON_AddItemToObject(c, "logprobs",
                              completion_logprobs(mi, NULL, ch, "", 0, lp_from, lp_to));
    add_finish(c, finish);
    if (finish == SRV_FINISH_LENGTH && ch && ch->context_full)
        cJSON_AddTrueToObject(c, "context_full");
    return append_event(out, root);
}

int api_stream_tool_calls(struct srv_buf *out, const struct srv_model_info *mi, const char *id,
                          int64_t created, int index, const struct srv_choice *ch) {
    cJSON *root = response_head(mi, "chat.completion.chunk", id, created);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", index);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    cJSON_AddItemToObject(d, "tool_calls", tool_calls_json(ch, id, index, 1));
    cJSON_AddNullToObject(c, "logprobs");
    return append_event(out, root);
}

int api_stream_usage(struct srv_buf *out, const struct srv_model_info *mi, int chat, const char *id,
                     int64_t created, int64_t prompt_tokens, int64_t cached_tokens,
                     int64_t completion_tokens) {
    cJSON *root =
        response_head(mi, chat ? "chat.completion.chunk" : "text_completion", id, created);
    cJSON_AddArrayToObject(root, "choices");
    add_usage(root, prompt_tokens, cached_tokens, completion_tokens);
    return append_event(out, root);
}

/* ---- tokenize, detokenize, models --------------------------------------------------- */

char *api_tokenize(const struct srv_model_info *mi, const cJSON *req, struct srv_error *err) {
    const cJSON *content = field(req, "content");
    if (!cJSON_IsString(content)) {
        bad(err, "content", "'content' must be a string.");
        return NULL;
    }
    int add_special = 0, parse_special = 0;
    if (get_bool(req, "add_special", &add_special, err) < 0 ||
        get_bool(req, "parse_special", &parse_special, err) < 0)
        return NULL;
    size_t n = 0;
    uint32_t flags = (add_special ? PI_TOKENIZE_ADD_SPECIAL : 0u) |
                     (parse_special ? PI_TOKENIZE_PARSE_SPECIAL : 0u);
    int32_t *toks =
        tokenize(mi->model, content->valuestring, strlen(content->valuestring), flags, &n, err);
    if (!toks)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(root, "tokens");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(toks[i]));
    free(toks);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s)
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
    return s;
}

char *api_detokenize(const struct srv_model_info *mi, const cJSON *req, struct srv_error *err) {
    const cJSON *tokens = field(req, "tokens");
    if (!cJSON_IsArray(tokens)) {
        bad(err, "tokens", "'tokens' must be an array of token ids.");
        return NULL;
    }
    int64_t n_vocab = pi_model_n_vocab(mi->model);
    const cJSON *t;
    cJSON_ArrayForEach(t, tokens) {
        double x = cJSON_IsNumber(t) ? t->valuedouble : -1.0;
        if (!(x >= 0 && x < (double)n_vocab && x == floor(x))) {
            bad(err, "tokens", "Token ids must be integers in [0, n_vocab).");
            return NULL;
        }
    }
    pi_detok *dt = NULL;
    if (pi_detok_create(mi->model, 0, &dt) != PI_OK) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return NULL;
    }
    struct srv_buf text = {0};
    int st = PI_OK;
    cJSON_ArrayForEach(t, tokens) {
        if ((st = pi_detok_push(dt, (int32_t)t->valuedouble, append_text, &text)) != PI_OK)
            break;
    }
    if (st == PI_OK)
        st = pi_detok_flush(dt, append_text, &text);
    pi_detok_destroy(dt);
    char *s = NULL;
    if (st == PI_OK) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "content", text.data ? text.data : "");
        s = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
    }
    buf_free(&text);
    if (!s)
        srv_error_set(err, 500, "server_error", NULL, NULL, "Detokenizing failed.");
    return s;
}

static cJSON *model_object(const struct srv_model_info *mi) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", mi->name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)mi->created);
    cJSON_AddStringToObject(m, "owned_by", "libpowerinfer");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx", (double)mi->n_ctx);
    cJSON_AddNumberToObject(meta, "n_slots", mi->n_slots);
    cJSON_AddNumberToObject(meta, "n_vocab", (double)pi_model_n_vocab(mi->model));
    cJSON_AddNumberToObject(meta, "n_params", (double)pi_model_n_params(mi->model));
    cJSON_AddStringToObject(meta, "architecture", pi_model_arch(mi->model));
    cJSON_AddBoolToObject(meta, "sparse", pi_model_is_sparse(mi->model));
    return m;
}

char *api_models_json(const struct srv_model_info *mi, int one) {
    cJSON *root;
    if (one) {
        root = model_object(mi);
    } else {
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "object", "list");
        cJSON *data = cJSON_AddArrayToObject(root, "data");
        cJSON_AddItemToArray(data, model_object(mi));
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}
