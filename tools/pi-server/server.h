/* server.h -- the pieces of pi-server and how they meet.
 *
 * Module graph (each arrow: "calls"):
 *
 *   main.c ──> http.c ──> api.c ──> engine.c ──> libpowerinfer (batch decode,
 *      │          │   └──> embeddings.c ──┘         pi_sample_logits, detokenizer,
 *      │          │          │                     pooled hidden states)
 *      │          │          └─> libpowerinfer (tokenizer, chat template), cJSON
 *      │          └─> libmicrohttpd, assets.c (generated from web/)
 *      └─> engine.c (create, start, stop)
 *
 * Threads: main (parses options, then waits for SIGINT/SIGTERM), libmicrohttpd's
 * listener and one thread per connection (parse, tokenize, submit, then stream the
 * job's output), and one inference thread (engine.c) that owns the pi_ctx. Jobs are
 * shared between a connection thread and the inference thread; every field of a job
 * below the "guarded" line is read and written under the engine's mutex only. */
#ifndef PI_SERVER_H
#define PI_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "powerinfer.h"

/* ---- util.c: a growable byte buffer, UTF-8, clocks ---------------------------------- */

struct srv_buf {
    char *data; /* NUL-terminated when non-NULL */
    size_t len, cap;
};

/* Append n bytes; 0 or -1 (out of memory, the buffer unchanged). */
int buf_append(struct srv_buf *b, const char *s, size_t n);
int buf_printf(struct srv_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void buf_free(struct srv_buf *b);

/* 1 if s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points above
 * U+10FFFF), else 0. */
int utf8_valid(const char *s, size_t n);

/* Append s[0..n) to b with each byte that does not start a well-formed UTF-8 sequence
 * replaced by U+FFFD; 0 or -1 (out of memory). */
int utf8_append_lossy(struct srv_buf *b, const char *s, size_t n);

/* Code points in the well-formed UTF-8 s[0..n) (continuation bytes not counted). */
size_t utf8_chars(const char *s, size_t n);

/* Monotonic seconds. */
double now_s(void);

/* ---- jsonmode.c: prefixes of a JSON object, for response_format json_object -------- */

#define JM_MAX_DEPTH 32 /* nesting */
#define JM_MAX_SPACE 64 /* whitespace bytes in a row between tokens */

struct jm_state {
    unsigned char mode, num, lit, is_key, top, first_in_array;
    int count, space, depth;
    unsigned char stack[JM_MAX_DEPTH];
};

/* Ready for a text that must be one JSON object (RFC 8259) and whitespace. */
void jm_init(struct jm_state *s);
/* Read n more bytes: 1 when the text so far is still the beginning of such a text (or
 * all of it), 0 when it can no longer be (s is then undefined: feed a copy to try). */
int jm_feed(struct jm_state *s, const char *bytes, size_t n);
/* 1 when the object is complete (only whitespace may follow). */
int jm_done(const struct jm_state *s);

/* ---- engine.c: slots, the queue, continuous batching -------------------------------- */

/* ---- toolcall.c: tool calls in an answer ---------------------------------------------- */

/* The call syntax a chat template teaches (TC_NONE: the request has no tools; TC_GENERIC:
 * the template takes none, so api.c teaches the Hermes syntax in a system message). */
enum { TC_NONE = 0, TC_GENERIC, TC_HERMES, TC_QWEN_XML, TC_LLAMA3, TC_MISTRAL, TC_MISTRAL_ARGS,
       TC_GRANITE };
#define TC_MAX_CALLS 16 /* calls one answer may make */

struct tc_call {
    char *name;      /* malloc'd */
    char *arguments; /* malloc'd JSON text */
};

struct tc_result {
    size_t content_len; /* the answer's text before its first call (trailing space cut) */
    struct tc_call calls[TC_MAX_CALLS];
    size_t n;
};

int tc_syntax_of_template(const char *tmpl);
/* How much of an unfinished answer a stream may send: up to where a call starts or
 * may start. */
size_t tc_hold(int syntax, const char *text, size_t len);
/* 1 and *r filled (free with tc_result_free) when the finished answer makes calls in
 * `syntax`; 0 (nothing to free) when it is plain content. */
int tc_parse(int syntax, const char *text, size_t len, struct tc_result *r);
void tc_result_free(struct tc_result *r);

struct cJSON;
enum { TC_CHOICE_AUTO = 0, TC_CHOICE_NONE, TC_CHOICE_REQUIRED };
#define TC_MAX_TOOLS 128

/* A request's tools (borrowed from it). */
struct tc_request {
    const struct cJSON *tools; /* the request's array, NULL when none (or tool_choice none) */
    int n_tools;
    int choice;         /* TC_CHOICE_* */
    const char *forced; /* tool_choice {"function": {"name"}}: that name, else NULL */
    int parallel;       /* parallel_tool_calls (default true) */
};

/* Check `tools`, `tool_choice` and `parallel_tool_calls`. 0, or -1 with *param and why. */
int tc_request(const struct cJSON *req, struct tc_request *out, const char **param, char *why,
               size_t cap);
/* The system message teaching the Hermes syntax, for a template that takes no tools
 * (malloc'd; NULL when out of memory). */
char *tc_generic_prompt(const struct cJSON *tools);
/* A copy of `messages` for a template: each assistant call's arguments given as a JSON
 * text (OpenAI's form) become that object, which is what templates render. NULL: out
 * of memory. */
struct cJSON *tc_messages_for_template(const struct cJSON *messages);
/* For a template that takes no tools: `messages` with the tools taught in the system
 * message (`tools` NULL: none), assistant calls written in the Hermes syntax and tool
 * results as user messages in <tool_response> tags, each content a string. NULL: out
 * of memory. */
struct cJSON *tc_generic_messages(const struct cJSON *messages, const struct cJSON *tools);

enum { SRV_FINISH_NONE = 0, SRV_FINISH_STOP, SRV_FINISH_LENGTH, SRV_FINISH_ERROR,
       SRV_FINISH_TOOLS };
enum { SRV_JOB_QUEUED = 0, SRV_JOB_RUNNING, SRV_JOB_DONE };
#define SRV_MAX_STOP 4
#define SRV_MAX_TOP_LOGPROBS 20
#define SRV_MAX_SHIFTED 65536 /* max_tokens at most, when the context shifts */

/* One token's log-probability under the model (log-softmax of its logits: temperature
 * 1, no penalties), and the most likely alternatives at that position. */
struct srv_logprob {
    int32_t token;
    float logprob;
    size_t text_end; /* generated tokens: the choice's text length once it was added */
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_lp[SRV_MAX_TOP_LOGPROBS];
};

struct srv_choice {
    struct srv_buf text; /* text so far; a stop string found is cut off with what follows */
    size_t stable;       /* the first `stable` bytes are final: no stop string can start
                          * inside them (the rest may be the beginning of one) */
    int finish;          /* SRV_FINISH_* */
    int64_t n_tokens;    /* tokens generated */
    int context_full;    /* ended (finish length) because the slot's context was full */
    struct tc_result calls; /* finish SRV_FINISH_TOOLS: the calls; text[0..content_len)
                             * is the content before them */
    struct srv_logprob *lp; /* [n_tokens] when the job wants logprobs (else NULL) */
};

struct srv_job {
    /* Set by the connection thread before engine_submit; read-only afterwards. */
    int32_t *prompt; /* malloc'd */
    size_t n_prompt;
    int n;                      /* choices, each in its own slot */
    int64_t max_tokens;         /* per choice */
    int64_t shift_keep;         /* --context-shift: positions a full slot keeps at its
                                 * start before dropping the older half of the rest;
                                 * -1: no shift (the choice ends at a full context) */
    int clamped;                /* max_tokens was cut to what fits in the context */
    int tool_syntax;            /* TC_*: the request has tools, answers may call them */
    const struct cJSON *tools;  /* the request's tools while the job is made (borrowed) */
    pi_sampler_params sampling; /* choice i samples with seed + i */
    char *stop[SRV_MAX_STOP];   /* malloc'd, non-empty */
    size_t n_stop;
    int logprobs;               /* -1: none; else alternatives per token (0..20) */
    int echo;                   /* completions: the prompt comes back before the text */
    char *prompt_text;          /* echo: the prompt as sent (NULL: given as token ids) */
    int json;                   /* response_format json_object: only JSON can be sampled */
    pi_grammar *grammar;        /* response_format json_schema or a GBNF `grammar`: each
                                 * choice samples through its own clone (NULL: none) */
    int32_t *bias_id;           /* logit_bias: added to these tokens' logits */
    float *bias;
    size_t n_bias;
    struct srv_logprob *prompt_lp; /* echo with logprobs: [n_prompt], [0] has none */
    /* /v1/embeddings: a prompt-only job (n 1, no logits, no sampling) whose result is
     * the prompt's pooled, L2-normalised final hidden state, written into embd
     * [n_embd] (malloc'd) by the engine before the job is done. */
    int embed;
    float *embd;

    /* ---- guarded by the engine's mutex ---- */
    struct srv_choice *choices; /* n of them */
    int state;                  /* SRV_JOB_* */
    int cancelled;              /* the client went away: free the slots */
    char error[256];            /* set with state DONE when decoding failed (fits in
                                 * srv_error.message) */
    double t_submit, t_first;   /* now_s() at submission and at the first token */
    size_t n_cached;            /* prompt tokens the prompt cache held (not decoded) */
    int refs;                   /* the connection's and, while queued or running, the engine's */
    int slots_held;             /* slots the job occupies */
    pthread_cond_t cond;        /* broadcast on new text and when done */
    struct srv_job *next;       /* queue link */
};

struct srv_engine_config {
    uint32_t n_slots;   /* sequences of the context */
    uint32_t queue_max; /* jobs that may wait for slots */
    uint32_t n_batch;   /* most tokens one decode step takes */
    int prompt_cache;   /* a slot given back keeps its sequence for the next prompt */
    int pooling;        /* embedding jobs: PI_POOL_MEAN, _CLS or _LAST (the context must
                         * have been created with pi_ctx_params.embeddings) */
};

struct srv_engine;

/* The context is borrowed until engine_destroy and used by the inference thread only. */
int engine_create(pi_ctx *ctx, const struct srv_engine_config *cfg, struct srv_engine **out);
int engine_start(struct srv_engine *e);
/* Stop the inference thread: running and queued jobs end with an error. */
void engine_stop(struct srv_engine *e);
void engine_destroy(struct srv_engine *e);

/* A new job with n choices, refs 1 (the caller's). NULL when out of memory. */
struct srv_job *job_create(int n);
/* Free a job that was never submitted. */
void job_free(struct srv_job *job);

/* Hand a job to the engine (it takes a reference). 0; SRV_ERR_BUSY when the queue is
 * full; SRV_ERR_STOPPING during shutdown. */
enum { SRV_ERR_BUSY = -100, SRV_ERR_STOPPING = -101 };
int engine_submit(struct srv_engine *e, struct srv_job *job);
/* Ask the engine to drop a job (queued or running); safe to call twice. */
void engine_cancel(struct srv_engine *e, struct srv_job *job);
/* Drop the caller's reference. */
void engine_release(struct srv_engine *e, struct srv_job *job);

/* The engine's mutex, for reading the guarded fields of a job. */
void engine_lock(struct srv_engine *e);
void engine_unlock(struct srv_engine *e);
/* With the lock held: wait for news on `job`, at most `ms` milliseconds. */
void engine_wait(struct srv_engine *e, struct srv_job *job, int ms);

struct srv_health {
    uint32_t slots_idle, slots_busy, queued;
    uint64_t requests, tokens_generated;
    /* for /metrics: prompt tokens of started jobs and how many of them the prompt cache
     * held; decode steps, the tokens they decoded and the seconds they took */
    uint64_t prompt_tokens, prompt_tokens_cached, steps, tokens_decoded, failed;
    uint64_t context_shifts;
    double decode_seconds;
};
void engine_health(struct srv_engine *e, struct srv_health *out);
uint32_t engine_n_slots(const struct srv_engine *e);
int64_t engine_n_ctx(const struct srv_engine *e);

/* ---- api.c: the OpenAI requests and responses (JSON) -------------------------------- */

struct srv_model_info {
    const pi_model *model;
    const char *name; /* the id /v1/models shows */
    int chat_format;  /* PI_CHAT_* used for messages */
    /* The model's chat template, executed for messages (chat_format PI_CHAT_JINJA), or
     * NULL: a built-in format (--chat-format, or a template that does not parse). */
    const pi_chat_template *chat_template;
    int tool_syntax; /* TC_* the executed template teaches; TC_NONE: it takes no tools */
    int64_t n_ctx;    /* positions per slot */
    uint32_t n_slots;
    int context_shift; /* --context-shift: a full slot drops old positions and goes on */
    long n_keep;       /* --keep: positions a shift keeps (-1 whole prompt, -2 the BOS) */
    int64_t default_max_tokens;
    int64_t created; /* Unix time the server started */
    /* Where the context's plan put the model (--vram-budget, --device; device
     * PI_DEVICE_NONE: CPU only), for /health and /metrics. */
    struct cli_placement placement;
};

/* An error for the client: HTTP status and the OpenAI error object's fields. */
struct srv_error {
    int status;
    const char *type;  /* "invalid_request_error", "server_error" */
    const char *code;  /* may be NULL */
    const char *param; /* may be NULL */
    char message[256];
    char param_text[64]; /* the param when it names a field of the request (param NULL) */
};

struct cJSON;
/* Parse a request body (after UTF-8 validation): NULL with *err filled on failure. */
struct cJSON *api_parse_body(const char *body, size_t len, struct srv_error *err);

/* Build a job from a /v1/chat/completions (chat 1) or /v1/completions body.
 * *stream and *include_usage receive the streaming options. NULL with *err on failure. */
struct srv_job *api_make_job(const struct srv_model_info *mi, const struct cJSON *req, int chat,
                             int *stream, int *include_usage, struct srv_error *err);

/* The response JSON (non-streaming) of a finished job; malloc'd text or NULL. */
char *api_completion_json(const struct srv_model_info *mi, const struct srv_job *job, int chat,
                          const char *id, int64_t created);

/* One server-sent event with a delta of choice `index` (text may be NULL for the
 * role-only first chunk of a chat, finish SRV_FINISH_NONE for none). Appends
 * "data: {...}\n\n" to out; 0 or -1. */
int api_stream_chunk(struct srv_buf *out, const struct srv_model_info *mi, int chat, const char *id,
                     int64_t created, int index, const char *text, size_t len, int role,
                     int finish, const struct srv_choice *ch, size_t lp_from, size_t lp_to);
/* ... with the logprobs of tokens [lp_from, lp_to) of choice ch (ch NULL or an empty
 * range: "logprobs": null). */
/* How many of the choice's generated tokens made its text up to byte `upto` (those
 * whose text ends there or before); final: all that made the whole text (a stop string
 * cuts it; a token the cut passes through counts). */
size_t api_lp_count(const struct srv_choice *ch, size_t upto, int final);
/* The final usage-only chunk (stream_options.include_usage). */
/* A chat stream's chunk with the choice's tool calls (before its finish chunk). */
int api_stream_tool_calls(struct srv_buf *out, const struct srv_model_info *mi, const char *id,
                          int64_t created, int index, const struct srv_choice *ch);
int api_stream_usage(struct srv_buf *out, const struct srv_model_info *mi, int chat, const char *id,
                     int64_t created, int64_t prompt_tokens, int64_t cached_tokens,
                     int64_t completion_tokens);

/* The error object as JSON text (malloc'd; a static fallback when out of memory is
 * never returned: NULL then). */
char *api_error_json(const struct srv_error *err);

/* /tokenize and /detokenize: response JSON or NULL with *err. */
char *api_tokenize(const struct srv_model_info *mi, const struct cJSON *req, struct srv_error *err);
char *api_detokenize(const struct srv_model_info *mi, const struct cJSON *req,
                     struct srv_error *err);

/* ---- embeddings.c: /v1/embeddings ---------------------------------------------------- */

/* The jobs of a /v1/embeddings body, one per input, in order (each embed 1, its prompt
 * and an n_embd result buffer; never submitted): *n_jobs of them, *base64 the
 * encoding_format. NULL with *err (a 400 naming the field) on failure. */
struct srv_job **api_make_embed_jobs(const struct srv_model_info *mi, const struct cJSON *req,
                                     size_t *n_jobs, int *base64, struct srv_error *err);
/* Free jobs never submitted (NULL entries skipped) and the array. */
void api_embed_jobs_free(struct srv_job **jobs, size_t n);
/* The response of n finished embedding jobs; malloc'd text or NULL (out of memory). */
char *api_embeddings_json(const struct srv_model_info *mi, struct srv_job *const *jobs, size_t n,
                          int base64);

/* /v1/models (id NULL) or /v1/models/{id}. */
char *api_models_json(const struct srv_model_info *mi, int one);

void srv_error_set(struct srv_error *err, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

/* ---- http.c: libmicrohttpd front end ---------------------------------------------- */

struct srv_http_config {
    const char *host;    /* numeric address to bind */
    int port;            /* 0: any free port */
    const char *api_key; /* NULL: none required */
    size_t max_body;     /* bytes */
    unsigned timeout_s;  /* idle connection timeout */
    unsigned max_conns;
    int verbose; /* one log line per request */
    /* Browsers: the origins that may read answers (CORS; none by default), and Host
     * names accepted besides the bound address, localhost and the loopback addresses
     * ("*": any). Both borrowed until http_stop. */
    const char *const *cors_origins;
    size_t n_cors_origins;
    const char *const *host_allow;
    size_t n_host_allow;
    unsigned header_timeout_s; /* request line and headers, from the connection's start
                                * or the end of its previous request */
    unsigned read_timeout_s;   /* the body, from the end of the headers */
    size_t max_stream_buffer;  /* bytes a stream may have produced and not yet sent */
};

struct srv_http;
/* Bind and start serving. *out NULL and a message in err on failure. */
int http_start(const struct srv_http_config *cfg, const struct srv_model_info *mi,
               struct srv_engine *engine, struct srv_http **out, char *err, size_t cap);
/* The port actually bound. */
int http_port(const struct srv_http *h);
/* Stop accepting connections (those open are still served). */
void http_quiesce(struct srv_http *h);
/* Wait up to `ms` milliseconds until every submitted completion has been answered;
 * returns how many are left. */
int http_drain(struct srv_http *h, int ms);
/* End every connection and join the threads. */
void http_stop(struct srv_http *h);

/* ---- assets.c (generated by embed_assets.py from web/) ------------------------------ */

struct srv_asset {
    const char *path; /* "/index.html" */
    const char *mime;
    const unsigned char *data;
    size_t size;
};
extern const struct srv_asset srv_assets[];
extern const size_t srv_n_assets;

#endif /* PI_SERVER_H */
