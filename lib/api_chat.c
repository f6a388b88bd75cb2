/* api_chat.c -- chat prompt rendering for the common template families. Templates are
 * recognised by their marker strings, not executed (no Jinja interpreter). */
#include <string.h>

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

int pi_model_chat_format(const pi_model *m) {
    if (!m)
        return PI_ERR_INVALID_ARG;
    uint64_t n;
    const char *t = template_of(m, &n);
    if (!t)
        return PI_ERR_NOT_FOUND;
    if (contains(t, n, "<|im_start|>"))
        return PI_CHAT_CHATML;
    if (contains(t, n, "<|start_header_id|>"))
        return PI_CHAT_LLAMA3;
    if (contains(t, n, "[INST]"))
        return PI_CHAT_LLAMA2;
    return PI_ERR_UNSUPPORTED;
}

/* A ChatML template that adds a system turn when there is none writes it literally:
 * "<|im_start|>system\n<text><|im_end|>". Return that text if it holds no template
 * syntax. */
static int default_system(const pi_model *m, const char **s, size_t *len) {
    uint64_t n;
    const char *t = template_of(m, &n);
    static const char open[] = "<|im_start|>system\n";
    if (!t)
        return 0;
    for (uint64_t i = 0; i + sizeof open - 1 <= n; i++) {
        if (memcmp(t + i, open, sizeof open - 1) != 0)
            continue;
        const char *b = t + i + sizeof open - 1;
        uint64_t rest = n - (i + sizeof open - 1);
        for (uint64_t j = 0; j + 10 <= rest; j++) {
            if (b[j] == '{' || b[j] == '}')
                break;
            if (memcmp(b + j, "<|im_end|>", 10) == 0) {
                *s = b;
                *len = (size_t)j;
                return j > 0;
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

static void llama3(struct out *o, const pi_chat_message *msgs, size_t n, int add_assistant) {
    for (size_t i = 0; i < n; i++) {
        put(o, "<|start_header_id|>");
        put(o, msgs[i].role);
        put(o, "<|end_header_id|>\n\n");
        put(o, msgs[i].content);
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

int64_t pi_chat_apply(const pi_model *m, int format, const pi_chat_message *msgs, size_t n,
                      int add_assistant, char *buf, size_t cap) {
    if (!m || (n && !msgs) || (!buf && cap))
        return PI_ERR_INVALID_ARG;
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content || !valid_role(msgs[i].role))
            return PI_ERR_INVALID_ARG;
    if (format == PI_CHAT_AUTO) {
        format = pi_model_chat_format(m);
        if (format < 0)
            return format;
    }
    struct out o = {buf, cap, 0};
    switch (format) {
    case PI_CHAT_CHATML:
        chatml(m, &o, msgs, n, add_assistant);
        break;
    case PI_CHAT_LLAMA3:
        llama3(&o, msgs, n, add_assistant);
        break;
    case PI_CHAT_LLAMA2:
        llama2(&o, msgs, n, add_assistant);
        break;
    default:
        return PI_ERR_INVALID_ARG;
    }
    if (cap > 0)
        buf[o.len < cap ? o.len : cap - 1] = '\0';
    return (int64_t)o.len;
}
