/* api_chat.c -- chat prompts: the model's own Jinja chat template executed by the
 * interpreter in chat/ (pi_chat_template_*, and pi_chat_apply's AUTO and JINJA formats),
 * and built-in renderers for the common template families, recognised by their marker
 * strings. Each built-in renderer writes what that family's published template writes
 * (checked against the templates rendered by jinja2 in tests/model/test_tokenizer.c),
 * except the BOS token a template puts first: that comes from tokenizing with
 * PI_TOKENIZE_ADD_SPECIAL. */
#include <stdio.h>
#include <string.h>

#include "chat/jinja.h"
#include "chat/json.h"
#include "model/model.h"

struct out {
    char *buf;
    size_t cap;
    uint64_t len;
};

static void put_n(struct out *o, const char *s, size_t n) {
    if (o->cap > 0 && o->len < o->cap - 1) {
        size_t room = (size_t)(o->cap - 1 - o->len);
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void put(struct out *o, const char *s) {
    put_n(o, s, strlen(s));
}

/* The chat template as a pointer into the file, or NULL. */
static const char *template_of(const pi_model *m, uint64_t *len) {
    const struct gguf_kv *kv = gguf_find_kv(&m->gguf, "tokenizer.chat_template");
    const char *s;
    if (!kv || gguf_kv_str(&m->gguf, kv, 0, &s, len) != PI_OK)
        return NULL;
    return s;
}

static int contains(const char *s, uint64_t n, const char *needle) {
    size_t k = strlen(needle);
    for (uint64_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0)
            return 1;
    return 0;
}

/* The built-in family whose markers the template has, or PI_ERR_UNSUPPORTED. */
static int recognised_format(const char *t, uint64_t n) {
    if (contains(t, n, "<|im_start|>"))
        return PI_CHAT_CHATML;
    if (contains(t, n, "<|start_header_id|>"))
        return PI_CHAT_LLAMA3;
    if (contains(t, n, "<start_of_turn>"))
        return PI_CHAT_GEMMA;
    if (contains(t, n, "<|assistant|>") && contains(t, n, "<|end|>"))
        return PI_CHAT_PHI3;
    if (contains(t, n, "[SYSTEM_PROMPT]") && contains(t, n, "[INST]"))
        return PI_CHAT_MISTRAL_V7;
    if (contains(t, n, "[INST]") && !contains(t, n, "<<SYS>>")) {
        /* Mistral's generations differ in the spaces around [INST] and [/INST]. */
        if (contains(t, n, "' [INST] '") || contains(t, n, "\" [INST] \""))
            return PI_CHAT_MISTRAL_V1;
        if (contains(t, n, "\"[INST]\" +") || contains(t, n, "'[INST]' +"))
            return PI_CHAT_MISTRAL_V3_TEKKEN;
        if ((contains(t, n, "\"[INST] \" +") || contains(t, n, "'[INST] ' +")) &&
            (contains(t, n, "+ \"[/INST]\"") || contains(t, n, "+ '[/INST]'")))
            return PI_CHAT_MISTRAL_V3;
    }
    if (contains(t, n, "[INST]"))
        return PI_CHAT_LLAMA2;
    if (contains(t, n, "'User: '") && contains(t, n, "Falcon:"))
        return PI_CHAT_FALCON;
    return PI_ERR_UNSUPPORTED;
}

/* A ChatML template that adds a system turn when there is none writes it literally:
 * "<|im_start|>system\n<text><|im_end|>" inside one Jinja string, its newline either
 * a real one (SmolLM2) or the escape \n (Qwen 2.5). Return that text if it holds no
 * template syntax, quote or backslash (so "'<|im_start|>system\n' + messages[0]..."
 * is not taken for one). */
static int default_system(const pi_model *m, const char **s, size_t *len) {
    uint64_t n;
    const char *t = template_of(m, &n);
    static const char *const opens[2] = {"<|im_start|>system\n", "<|im_start|>system\\n"};
    if (!t)
        return 0;
    for (int k = 0; k < 2; k++) {
        size_t ol = strlen(opens[k]);
        for (uint64_t i = 0; i + ol <= n; i++) {
            if (memcmp(t + i, opens[k], ol) != 0)
                continue;
            const char *b = t + i + ol;
            uint64_t rest = n - (i + ol);
            for (uint64_t j = 0; j + 10 <= rest; j++) {
                if (strchr("{}'\"\\", b[j]) && b[j])
                    break;
                if (memcmp(b + j, "<|im_end|>", 10) == 0) {
                    if (j == 0)
                        break;
                    *s = b;
                    *len = (size_t)j;
                    return 1;
                }
            }
        }
    }
    return 0;
}

static int valid_role(const char *r) {
    return !strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant");
}

static void chatml(const pi_model *m, struct out *o, const pi_chat_message *msgs, size_t n,
                   int add_assistant) {
    const char *sys;
    size_t sys_len;
    if ((n == 0 || strcmp(msgs[0].role, "system") != 0) && default_system(m, &sys, &sys_len)) {
        put(o, "<|im_start|>system\n");
        put_n(o, sys, sys_len);
        put(o, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        put(o, "<|im_start|>");
        put(o, msgs[i].role);
        put(o, "\n");
        put(o, msgs[i].content);
        put(o, "<|im_end|>\n");
    }
    if (add_assistant)
        put(o, "<|im_start|>assistant\n");
}

static void put_trim(struct out *o, const char *s);

/* The text of a template from `after` up to the next quote or backslash (the end of a
 * Jinja string literal or its \n), or NULL. */
static const char *literal_after(const char *t, uint64_t n, const char *after, size_t *len) {
    size_t k = strlen(after);
    for (uint64_t i = 0; i + k <= n; i++) {
        if (memcmp(t + i, after, k) != 0)
            continue;
        size_t j = 0;
        while (i + k + j < n && !strchr("\"'\\", t[i + k + j]))
            j++;
        *len = j;
        return t + i + k;
    }
    return NULL;
}

/* Llama 3.1 / 3.2 / 3.3: the template always opens with a system turn holding its
 * knowledge cut-off and a date: "Cutting Knowledge Date: <cut-off>\nToday Date: <date>
 * \n\n" and the (trimmed) system message. The date is the template's own default
 * (date_string, "26 Jul 2024"), what it renders without a clock; a library has none. */
static void llama31_system(const pi_model *m, struct out *o, const char *sys) {
    uint64_t n;
    const char *t = template_of(m, &n);
    size_t cl = 0, dl = 0;
    const char *cut = literal_after(t, n, "Cutting Knowledge Date: ", &cl);
    const char *date = literal_after(t, n, "set date_string = \"", &dl);
    put(o, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: ");
    put_n(o, cut, cl);
    put(o, "\nToday Date: ");
    if (date)
        put_n(o, date, dl);
    put(o, "\n\n");
    if (sys)
        put_trim(o, sys);
    put(o, "<|eot_id|>");
}

/* Llama 3 / 3.1: contents trimmed, as the template does. */
static void llama3(const pi_model *m, struct out *o, const pi_chat_message *msgs, size_t n,
                   int add_assistant) {
    uint64_t tn;
    const char *t = template_of(m, &tn);
    size_t i = 0;
    if (t && contains(t, tn, "Cutting Knowledge Date: ")) {
        int sys = n > 0 && !strcmp(msgs[0].role, "system");
        llama31_system(m, o, sys ? msgs[0].content : NULL);
        i = sys ? 1 : 0;
    }
    for (; i < n; i++) {
        put(o, "<|start_header_id|>");
        put(o, msgs[i].role);
        put(o, "<|end_header_id|>\n\n");
        put_trim(o, msgs[i].content);
        put(o, "<|eot_id|>");
    }
    if (add_assistant)
        put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 2: the BOS of the first turn comes from the tokenizer (ADD_SPECIAL); later
 * turns open with "<s>". A system message goes inside the first [INST]. */
static void llama2(struct out *o, const pi_chat_message *msgs, size_t n, int add_assistant) {
    size_t i = 0;
    const char *sys = NULL;
    if (n > 0 && !strcmp(msgs[0].role, "system"))
        sys = msgs[i++].content;
    int first = 1, open = 0;
    for (; i < n; i++) {
        if (!strcmp(msgs[i].role, "user")) {
            if (!first)
                put(o, "<s>");
            put(o, "[INST] ");
            if (sys && first) {
                put(o, "<<SYS>>\n");
                put(o, sys);
                put(o, "\n<</SYS>>\n\n");
            }
            put(o, msgs[i].content);
            put(o, " [/INST]");
            open = 1;
            first = 0;
        } else if (!strcmp(msgs[i].role, "assistant")) {
            put(o, " ");
            put(o, msgs[i].content);
            put(o, " </s>");
            open = 0;
        }
    }
    (void)add_assistant; /* an open [INST] already asks for the answer */
    (void)open;
}

/* Jinja's trim: leading and trailing whitespace (ASCII, as in the texts that matter). */
static void put_trim(struct out *o, const char *s) {
    size_t n = strlen(s);
    while (n > 0 && strchr(" \t\n\r\v\f", s[0]) && s[0]) {
        s++;
        n--;
    }
    while (n > 0 && strchr(" \t\n\r\v\f", s[n - 1]))
        n--;
    put_n(o, s, n);
}

/* The text of the model's EOS token, or "" (templates write eos_token after an answer). */
static void put_eos(const pi_model *m, struct out *o) {
    const struct pi_vocab *v = m->vocab;
    if (v && v->eos >= 0)
        put_n(o, v->tokens[v->eos].text, v->tokens[v->eos].len);
}

/* Gemma 2 / 3: turns "<start_of_turn>user|model\n" + trimmed content + "<end_of_turn>\n";
 * a system message goes in front of the first user turn followed by a blank line
 * (Gemma 3's template; Gemma 2's refuses system messages). */
static void gemma(struct out *o, const pi_chat_message *msgs, size_t n, int add_assistant) {
    size_t i = 0;
    const char *sys = NULL;
    if (n > 0 && !strcmp(msgs[0].role, "system"))
        sys = msgs[i++].content;
    for (size_t first = i; i < n; i++) {
        int model = !strcmp(msgs[i].role, "assistant");
        put(o, model ? "<start_of_turn>model\n" : "<start_of_turn>");
        if (!model) {
            put(o, msgs[i].role);
            put(o, "\n");
        }
        if (sys && i == first) {
            put(o, sys);
            put(o, "\n\n");
        }
        put_trim(o, msgs[i].content);
        put(o, "<end_of_turn>\n");
    }
    if (add_assistant)
        put(o, "<start_of_turn>model\n");
}

/* Phi-3 / 3.5: "<|role|>\n" + content + "<|end|>\n"; an empty system message is left
 * out; without a generation prompt the template ends with the EOS text. */
static void phi3(const pi_model *m, struct out *o, const pi_chat_message *msgs, size_t n,
                 int add_assistant) {
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(msgs[i].role, "system") && !msgs[i].content[0])
            continue;
        put(o, "<|");
        put(o, msgs[i].role);
        put(o, "|>\n");
        put(o, msgs[i].content);
        put(o, "<|end|>\n");
    }
    if (add_assistant)
        put(o, "<|assistant|>\n");
    else
        put_eos(m, o);
}

/* Mistral's [INST] formats, by generation:
 *   v1 (7B v0.2, SentencePiece): " [INST] " + user + " [/INST]", answers " " + text +
 *        EOS; a system message opens the first user turn ("\n\n" after it);
 *   v3 (7B v0.3): "[INST] " + user + "[/INST]", answers " " + trimmed text + EOS;
 *   v3-tekken (Nemo): "[INST]" + user + "[/INST]", answers text + EOS;
 *   in v3 and v3-tekken the system message opens the last user turn, and only when
 *   that turn is the last message (so it is dropped after a final answer). */
static void mistral(const pi_model *m, struct out *o, int format, const pi_chat_message *msgs,
                    size_t n) {
    size_t i = 0;
    const char *sys = NULL;
    if (n > 0 && !strcmp(msgs[0].role, "system"))
        sys = msgs[i++].content;
    int v1 = format == PI_CHAT_MISTRAL_V1, tekken = format == PI_CHAT_MISTRAL_V3_TEKKEN;
    for (size_t first = i; i < n; i++) {
        if (!strcmp(msgs[i].role, "user")) {
            put(o, v1 ? " [INST] " : tekken ? "[INST]" : "[INST] ");
            if (sys && (v1 ? i == first : i == n - 1)) {
                put(o, sys);
                put(o, "\n\n");
            }
            put(o, msgs[i].content);
            put(o, v1 ? " [/INST]" : "[/INST]");
        } else if (!strcmp(msgs[i].role, "assistant")) {
            if (!tekken)
                put(o, " ");
            if (format == PI_CHAT_MISTRAL_V3)
                put_trim(o, msgs[i].content);
            else
                put(o, msgs[i].content);
            put_eos(m, o);
        }
    }
}

/* Mistral v7 (Small 3, tekken): system messages "[SYSTEM_PROMPT]...[/SYSTEM_PROMPT]"
 * where they stand, "[INST]" + user + "[/INST]", answers text + EOS. The template's
 * own default system prompt (with today's date) is not inserted. */
static void mistral_v7(const pi_model *m, struct out *o, const pi_chat_message *msgs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(msgs[i].role, "system")) {
            put(o, "[SYSTEM_PROMPT]");
            put(o, msgs[i].content);
            put(o, "[/SYSTEM_PROMPT]");
        } else if (!strcmp(msgs[i].role, "user")) {
            put(o, "[INST]");
            put(o, msgs[i].content);
            put(o, "[/INST]");
        } else {
            put(o, msgs[i].content);
            put_eos(m, o);
        }
    }
}

/* Falcon-instruct: "System: ", "User: ", "Falcon: " + content, one message a line, and
 * "\nFalcon:" to ask for the answer. */
static void falcon(struct out *o, const pi_chat_message *msgs, size_t n, int add_assistant) {
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            put(o, "\n");
        put(o, !strcmp(msgs[i].role, "system") ? "System: "
               : !strcmp(msgs[i].role, "user") ? "User: "
                                               : "Falcon: ");
        put(o, msgs[i].content);
    }
    if (add_assistant)
        put(o, "\nFalcon:");
}

/* ---- the interpreter ---------------------------------------------------------------- */

struct pi_chat_template {
    struct jtemplate t;
    char *bos, *eos; /* the model's special token texts (copies), or NULL */
    size_t bos_n, eos_n;
};

static const struct pi_allocator *const tmpl_alloc = &pi_default_allocator;

void pi_chat_template_destroy(pi_chat_template *t) {
    if (!t)
        return;
    jinja_free(&t->t);
    pi_free(tmpl_alloc, t->bos);
    pi_free(tmpl_alloc, t->eos);
    pi_free(tmpl_alloc, t);
}

/* The text of token id, "" when the model has no such token (templates write
 * bos_token + ...: an undefined one would fail them), NULL without a model. */
static int token_text(const pi_model *m, int32_t id, char **out, size_t *n) {
    const struct pi_vocab *v = m ? m->vocab : NULL;
    *out = NULL;
    *n = 0;
    if (!m)
        return PI_OK;
    if (!v || id < 0 || id >= v->n_tokens) {
        *out = pi_strndup(tmpl_alloc, "", 0);
        return *out ? PI_OK : PI_ERR_NOMEM;
    }
    *out = pi_strndup(tmpl_alloc, v->tokens[id].text, v->tokens[id].len);
    *n = v->tokens[id].len;
    return *out ? PI_OK : PI_ERR_NOMEM;
}

/* Parse `n` bytes of template source, with the model's BOS / EOS texts (model may be
 * NULL). */
static int template_create(const pi_model *m, const char *src, size_t n, pi_chat_template **out,
                           struct pi_error *err) {
    *out = NULL;
    pi_chat_template *t = pi_calloc(tmpl_alloc, 1, sizeof *t);
    if (!t)
        return pi_error_set(err, PI_ERR_NOMEM, "out of memory");
    if (token_text(m, m && m->vocab ? m->vocab->bos : -1, &t->bos, &t->bos_n) < 0 ||
        token_text(m, m && m->vocab ? m->vocab->eos : -1, &t->eos, &t->eos_n) < 0) {
        pi_chat_template_destroy(t);
        return pi_error_set(err, PI_ERR_NOMEM, "out of memory");
    }
    struct jinja_limits lim;
    jinja_default_limits(&lim);
    int st = jinja_parse(&t->t, src, n, &lim, tmpl_alloc, err);
    if (st < 0) {
        pi_free(tmpl_alloc, t->bos);
        pi_free(tmpl_alloc, t->eos);
        pi_free(tmpl_alloc, t);
        return st;
    }
    *out = t;
    return PI_OK;
}

static void copy_err(const struct pi_error *e, char *errbuf, size_t cap) {
    if (errbuf && cap)
        snprintf(errbuf, cap, "%s", e->msg);
}

int pi_chat_template_create(const pi_model *model, const char *source, pi_chat_template **out,
                            char *errbuf, size_t errbuf_cap) {
    struct pi_error err = {PI_OK, ""};
    if (errbuf && errbuf_cap)
        errbuf[0] = '\0';
    if (out)
        *out = NULL;
    if (!out || (!model && !source)) {
        pi_error_set(&err, PI_ERR_INVALID_ARG, "pi_chat_template_create: %s",
                     !out ? "out is NULL" : "neither a model nor a source");
        copy_err(&err, errbuf, errbuf_cap);
        return PI_ERR_INVALID_ARG;
    }
    uint64_t n = 0;
    const char *src = source;
    if (src) {
        n = strlen(src);
    } else {
        src = template_of(model, &n);
        if (!src) {
            pi_error_set(&err, PI_ERR_NOT_FOUND, "the model has no tokenizer.chat_template");
            copy_err(&err, errbuf, errbuf_cap);
            return PI_ERR_NOT_FOUND;
        }
    }
    int st = template_create(model, src, (size_t)n, out, &err);
    if (st < 0)
        copy_err(&err, errbuf, errbuf_cap);
    return st;
}

/* The variables of a render: data's members, then what transformers'
 * apply_chat_template always passes (tools, documents: none; add_generation_prompt:
 * false) and the model's bos_token / eos_token, where data does not set them. */
static int render_vars(const pi_chat_template *t, struct jarena *a, const struct jdict *data,
                       struct jdict **out) {
    struct jdict *v = jd_new(a, data ? data->n + 5 : 5);
    if (!v)
        return ja_status(a);
    for (size_t i = 0; data && i < data->n; i++)
        PI_TRY(jd_set(a, v, data->k[i], data->v[i]));
    static const char *const none_names[] = {"tools", "documents"};
    for (int k = 0; k < 2; k++)
        if (!jd_get_str(v, none_names[k], strlen(none_names[k])))
            PI_TRY(jd_set(a, v, jv_cstr(none_names[k]), jv_none()));
    if (!jd_get_str(v, "add_generation_prompt", 21))
        PI_TRY(jd_set(a, v, jv_cstr("add_generation_prompt"), jv_bool(0)));
    if (t->bos && !jd_get_str(v, "bos_token", 9))
        PI_TRY(jd_set(a, v, jv_cstr("bos_token"), jv_str(t->bos, t->bos_n)));
    if (t->eos && !jd_get_str(v, "eos_token", 9))
        PI_TRY(jd_set(a, v, jv_cstr("eos_token"), jv_str(t->eos, t->eos_n)));
    *out = v;
    return PI_OK;
}

/* Copy text into buf as pi_model_meta_str does; the full length. */
static int64_t copy_out(const char *s, size_t n, char *buf, size_t cap) {
    if (cap > 0) {
        size_t k = n < cap - 1 ? n : cap - 1;
        if (k)
            memcpy(buf, s, k);
        buf[k] = '\0';
    }
    return (int64_t)n;
}

int64_t pi_chat_template_render(const pi_chat_template *t, const char *data_json, int64_t now,
                                char *buf, size_t cap, char *errbuf, size_t errbuf_cap) {
    struct pi_error err = {PI_OK, ""};
    if (errbuf && errbuf_cap)
        errbuf[0] = '\0';
    if (!t || (!buf && cap)) {
        pi_error_set(&err, PI_ERR_INVALID_ARG, "pi_chat_template_render: %s",
                     !t ? "the template is NULL" : "buf is NULL with cap > 0");
        copy_err(&err, errbuf, errbuf_cap);
        return PI_ERR_INVALID_ARG;
    }
    struct jarena a;
    ja_init(&a, tmpl_alloc, t->t.lim.max_memory, &err);
    jv data = jv_undef();
    int st = PI_OK;
    if (data_json) {
        st = json_parse(&a, data_json, strlen(data_json), &data, &err);
        if (st == PI_OK && data.kind != JV_DICT)
            st = pi_error_set(&err, PI_ERR_INVALID_ARG,
                              "the template data must be a JSON object, not %s",
                              jv_type_name(data));
    }
    struct jdict *vars = NULL;
    if (st == PI_OK)
        st = render_vars(t, &a, data.kind == JV_DICT ? data.u.dict : NULL, &vars);
    jv text;
    if (st == PI_OK)
        st = jinja_render(&t->t, &a, vars, now, &text, &err);
    int64_t r = st;
    if (st == PI_OK)
        r = copy_out(text.u.str.s, text.u.str.n, buf, cap);
    else
        copy_err(&err, errbuf, errbuf_cap);
    ja_free(&a);
    return r;
}

/* pi_chat_apply through the model's template: messages as {role, content}. The BOS text
 * a template writes first is left out when the tokenizer adds BOS (tokenizing with
 * ADD_SPECIAL puts it back; SmolLM2's BOS is <|im_start|>, which its tokenizer does not
 * add: there the text stays). */
static int64_t apply_jinja(const pi_model *m, const pi_chat_template *t,
                           const pi_chat_message *msgs, size_t n, int add_assistant, char *buf,
                           size_t cap) {
    struct pi_error err = {PI_OK, ""};
    struct jarena a;
    ja_init(&a, tmpl_alloc, t->t.lim.max_memory, &err);
    struct jlist *l = jl_new(&a, n, NULL);
    struct jdict *data = jd_new(&a, 2);
    int st = l && data ? PI_OK : ja_status(&a);
    for (size_t i = 0; i < n && st == PI_OK; i++) {
        struct jdict *d = jd_new(&a, 2);
        if (!d) {
            st = ja_status(&a);
            break;
        }
        st = jd_set(&a, d, jv_cstr("role"), jv_cstr(msgs[i].role));
        if (st == PI_OK)
            st = jd_set(&a, d, jv_cstr("content"), jv_cstr(msgs[i].content));
        l->v[i].kind = JV_DICT;
        l->v[i].flags = 0;
        l->v[i].u.dict = d;
    }
    if (st == PI_OK) {
        jv lv = {JV_LIST, 0, {0}};
        lv.u.list = l;
        st = jd_set(&a, data, jv_cstr("messages"), lv);
    }
    if (st == PI_OK)
        st = jd_set(&a, data, jv_cstr("add_generation_prompt"), jv_bool(add_assistant));
    struct jdict *vars = NULL;
    if (st == PI_OK)
        st = render_vars(t, &a, data, &vars);
    jv text;
    if (st == PI_OK)
        st = jinja_render(&t->t, &a, vars, -1, &text, &err);
    int64_t r = st;
    if (st == PI_OK) {
        size_t skip = 0;
        if (m->vocab && m->vocab->add_bos && t->bos && t->bos_n && text.u.str.n >= t->bos_n &&
            memcmp(text.u.str.s, t->bos, t->bos_n) == 0)
            skip = t->bos_n;
        r = copy_out(text.u.str.s + skip, text.u.str.n - skip, buf, cap);
    }
    ja_free(&a);
    return r;
}

int pi_model_chat_format(const pi_model *m) {
    if (!m)
        return PI_ERR_INVALID_ARG;
    uint64_t n;
    const char *t = template_of(m, &n);
    if (!t)
        return PI_ERR_NOT_FOUND;
    int f = recognised_format(t, n);
    if (f >= 0)
        return f;
    /* another style: executable when it parses */
    pi_chat_template *tmpl;
    struct pi_error err = {PI_OK, ""};
    if (template_create(m, t, (size_t)n, &tmpl, &err) == PI_OK) {
        pi_chat_template_destroy(tmpl);
        return PI_CHAT_JINJA;
    }
    return err.status == PI_ERR_NOMEM ? PI_ERR_NOMEM : PI_ERR_UNSUPPORTED;
}

int64_t pi_chat_apply(const pi_model *m, int format, const pi_chat_message *msgs, size_t n,
                      int add_assistant, char *buf, size_t cap) {
    if (!m || (n && !msgs) || (!buf && cap))
        return PI_ERR_INVALID_ARG;
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content || !valid_role(msgs[i].role))
            return PI_ERR_INVALID_ARG;
    if (format == PI_CHAT_AUTO || format == PI_CHAT_JINJA) {
        /* the model's own template when it parses and renders; AUTO falls back to the
         * built-in format of a recognised family (a template that needs a clock, or
         * refuses the conversation, rendered as the library did before it had an
         * interpreter), JINJA returns the failure */
        uint64_t tn;
        const char *src = template_of(m, &tn);
        if (!src)
            return PI_ERR_NOT_FOUND;
        pi_chat_template *t;
        struct pi_error err = {PI_OK, ""};
        int64_t st = template_create(m, src, (size_t)tn, &t, &err);
        int parsed = st == PI_OK;
        if (parsed) {
            st = apply_jinja(m, t, msgs, n, add_assistant, buf, cap);
            pi_chat_template_destroy(t);
            if (st >= 0 || st == PI_ERR_NOMEM || format == PI_CHAT_JINJA)
                return st;
        } else if (st == PI_ERR_NOMEM) {
            return st;
        } else if (format == PI_CHAT_JINJA) {
            return PI_ERR_UNSUPPORTED;
        }
        int f = recognised_format(src, tn);
        if (f < 0)
            return parsed ? st : PI_ERR_UNSUPPORTED;
        format = f;
    }
    struct out o = {buf, cap, 0};
    switch (format) {
    case PI_CHAT_CHATML:
        chatml(m, &o, msgs, n, add_assistant);
        break;
    case PI_CHAT_LLAMA3:
        llama3(m, &o, msgs, n, add_assistant);
        break;
    case PI_CHAT_LLAMA2:
        llama2(&o, msgs, n, add_assistant);
        break;
    case PI_CHAT_GEMMA:
        gemma(&o, msgs, n, add_assistant);
        break;
    case PI_CHAT_PHI3:
        phi3(m, &o, msgs, n, add_assistant);
        break;
    case PI_CHAT_MISTRAL_V1:
    case PI_CHAT_MISTRAL_V3:
    case PI_CHAT_MISTRAL_V3_TEKKEN:
        mistral(m, &o, format, msgs, n); /* an open [INST] asks for the answer */
        break;
    case PI_CHAT_MISTRAL_V7:
        mistral_v7(m, &o, msgs, n);
        break;
    case PI_CHAT_FALCON:
        falcon(&o, msgs, n, add_assistant);
        break;
    default:
        return PI_ERR_INVALID_ARG;
    }
    if (cap > 0)
        buf[o.len < cap ? o.len : cap - 1] = '\0';
    return (int64_t)o.len;
}
