/* pi-server -- an OpenAI-compatible HTTP server for libpowerinfer.
 *
 * main.c: options; open the model and one context with --parallel sequences; start the
 * inference thread (engine.c) and the HTTP front end (http.c); wait for SIGINT or
 * SIGTERM; stop both and release everything. Uses only the public header. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "device.h"
#include "server.h"

const char cli_prog[] = "pi-server";

static void usage(FILE *out) {
    fprintf(out,
            "usage: pi-server -m MODEL.gguf [options]\n"
            "\n"
            "An OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions\n"
            "(streaming or not), GET /v1/models, GET /health, GET /metrics (Prometheus),\n"
            "POST /tokenize, /detokenize, /v1/embeddings, and a chat page at /.\n"
            "\n"
            "  -m, --model FILE        model file (GGUF, or PowerInfer GGUF)\n"
            "  --host ADDR             address to bind (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
            "  --port N                port (default 8080; 0: any free port, printed at start)\n"
            "  -np, --parallel N       slots: requests decoded together (default 4)\n"
            "  --queue N               requests that may wait for a slot (default 16); more\n"
            "                          are answered 503\n"
            "  -c, --ctx-size N        positions of all slots together, split evenly between\n"
            "                          them (llama-server's meaning; default: each slot gets\n"
            "                          the model's context, at most 4096)\n"
            "  --context-shift         when a slot's context is full, drop the older half of\n"
            "                          what follows its kept start and go on generating (by\n"
            "                          default generation ends there, finish_reason length);\n"
            "                          max_tokens is then not bounded by the context\n"
            "  --keep N                positions --context-shift keeps at the start unless a\n"
            "                          request sets n_keep (default: the BOS token if the\n"
            "                          prompt has one; -1: the whole prompt)\n"
            "  -b, --batch-size N      most tokens one decode step takes (default 256)\n"
            "  -t, --threads N         worker threads (default: all processors)\n"
            "  -n, --max-tokens N      max_tokens when a request gives none (default 256)\n"
            "  --alias NAME            the model's id in the API (default: the file name)\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' on /v1/* and\n"
            "                          /tokenize, /detokenize\n"
            "  --api-key-file FILE     the same, the key read from the first line of FILE\n"
            "                          (at most 16384 bytes)\n"
            "  --max-body BYTES        largest request body (default 1048576); more: 413\n"
            "  --timeout S             close idle connections after S seconds (default 30)\n"
            "  --header-timeout S      close a connection whose request line and headers are\n"
            "                          not complete S seconds after it opened or after its\n"
            "                          previous request (default 10; 0: no limit)\n"
            "  --read-timeout S        close a connection whose request body is not complete\n"
            "                          S seconds after its headers (default 30; 0: no limit)\n"
            "  --max-stream-buffer B   cut a stream (and free its slot) when its client leaves\n"
            "                          more than B bytes of generated text unread (default\n"
            "                          4194304; 0: no limit)\n"
            "  --max-connections N     open connections at once (default 256)\n");
    fputs(
            "  --cors-origin ORIGIN    let web pages from ORIGIN (e.g. http://localhost:3000)\n"
            "                          read the answers; repeatable (default: none, only the\n"
            "                          server's own chat page)\n"
            "  --host-allow NAME       accept requests whose Host header is NAME (besides the\n"
            "                          bound address, localhost and 127.0.0.1/::1); repeatable;\n"
            "                          '*' accepts any (behind a proxy that checks it)\n"
            "  --chat-format F         " CLI_CHAT_FORMAT_NAMES "\n"
            "  --chat-template-file F  run this Jinja chat template instead of the model's\n"
            "                          (at most 64 MiB; its tool-call syntax is used too)\n"
            "  --sparse-mode M         FFN of PowerInfer models: sparse, dense or oracle;\n"
            "                          threshold (default for pi-sparsify's files)\n"
            "  --no-prompt-cache       decode every prompt whole (by default a slot keeps its\n"
            "                          tokens and a new prompt decodes only what differs)\n"
            "  --pooling P             /v1/embeddings: mean, last or cls (first token) pooling\n"
            "                          of the final hidden states (default: the file's\n"
            "                          pooling_type, else last)\n"
            "\n" CLI_DEVICE_USAGE
            "                          (/health and /metrics report the placement)\n"
            "\n" CLI_LOAD_USAGE
            "  -v, --verbose           log each request, and what the library does, to stderr\n"
            "  --version               print the library version\n"
            "  -h, --help              this text\n",
          out);
}

struct opts {
    const char *model, *alias, *api_key_file, *chat_template_file;
    char *api_key; /* malloc'd */
    long n_slots, queue, n_ctx, n_batch, n_threads, max_tokens, max_body, timeout, max_conns;
    long header_timeout, read_timeout, max_stream_buffer;
#define MAX_NAMES 32
    const char *cors[MAX_NAMES], *host_allow[MAX_NAMES]; /* into argv */
    size_t n_cors, n_host_allow;
    int verbose, chat_format, no_prompt_cache, context_shift;
    int pooling; /* PI_POOL_*, -1: the file's */
    long n_keep;
    uint32_t sparse_mode;
    struct srv_http_config http;
    struct cli_device dev;
};

/* The longest key --api-key-file accepts: a client sends it in a header, and
 * libmicrohttpd holds the whole request head in 32 KiB. */
#define MAX_KEY (16 * 1024)

/* The first line of the file as the key, allocated to its size; a key longer than
 * MAX_KEY or holding a NUL byte is refused rather than cut short. */
static int read_key(const char *path, char **out) {
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "pi-server: cannot read '%s'\n", path);
        return -1;
    }
    char *key = malloc(MAX_KEY + 1);
    if (!key) {
        fclose(fp);
        fprintf(stderr, "pi-server: out of memory\n");
        return -1;
    }
    size_t n = 0;
    int ch, nul = 0;
    while ((ch = getc(fp)) != EOF && ch != '\n' && ch != '\r' && n <= MAX_KEY) {
        nul |= ch == '\0';
        key[n++] = (char)ch;
    }
    fclose(fp);
    if (n > MAX_KEY) {
        fprintf(stderr, "pi-server: the key in '%s' is longer than %d bytes\n", path, MAX_KEY);
        free(key);
        return -1;
    }
    if (nul) {
        fprintf(stderr, "pi-server: the key in '%s' holds a NUL byte\n", path);
        free(key);
        return -1;
    }
    key[n] = '\0';
    if (!n) {
        fprintf(stderr, "pi-server: '%s' holds no key\n", path);
        free(key);
        return -1;
    }
    *out = realloc(key, n + 1);
    if (!*out)
        *out = key;
    return 0;
}

/* The id the API shows: --alias, or the file name without directories and ".gguf". */
static char *model_name(const struct opts *o) {
    if (o->alias)
        return strdup(o->alias);
    const char *base = strrchr(o->model, '/');
    base = base ? base + 1 : o->model;
    char *name = strdup(base);
    if (name) {
        size_t n = strlen(name);
        if (n > 5 && !strcmp(name + n - 5, ".gguf"))
            name[n - 5] = '\0';
    }
    return name;
}

static int serve(struct opts *o) {
    int rc = 1;
    pi_model *m = NULL;
    pi_ctx *ctx = NULL;
    struct srv_engine *engine = NULL;
    struct srv_http *http = NULL;
    char *name = NULL;
    if (cli_model_open(o->model, o->verbose, &m))
        return 1;
    struct srv_model_info mi;
    memset(&mi, 0, sizeof mi);
    mi.model = m;
    mi.n_slots = (uint32_t)o->n_slots;
    mi.default_max_tokens = o->max_tokens;
    mi.created = (int64_t)time(NULL);
    mi.chat_format = o->chat_format;
    pi_chat_template *tmpl = NULL;
    char *src = NULL; /* the template's text */
    if (o->chat_template_file) {
        size_t tl;
        src = cli_read_file(o->chat_template_file, &tl);
        if (!src || strlen(src) != tl) {
            fprintf(stderr, "pi-server: cannot read the chat template '%s'%s\n",
                    o->chat_template_file, src ? " (it holds a NUL byte)" : "");
            free(src);
            goto done;
        }
        char terr[256] = "";
        if (pi_chat_template_create(m, src, &tmpl, terr, sizeof terr) != PI_OK) {
            fprintf(stderr, "pi-server: the chat template '%s': %s\n", o->chat_template_file,
                    terr);
            free(src);
            goto done;
        }
        mi.chat_template = tmpl;
        mi.chat_format = PI_CHAT_JINJA;
    } else if (mi.chat_format == PI_CHAT_AUTO) {
        /* the model's own template, executed; else the built-in format it names */
        char terr[256] = "";
        int st = pi_chat_template_create(m, NULL, &tmpl, terr, sizeof terr);
        if (st == PI_OK) {
            mi.chat_template = tmpl;
            mi.chat_format = PI_CHAT_JINJA;
            int64_t tl = pi_model_chat_template(m, NULL, 0);
            src = tl > 0 ? malloc((size_t)tl + 1) : NULL;
            if (src && pi_model_chat_template(m, src, (size_t)tl + 1) != tl) {
                free(src);
                src = NULL;
            }
        } else if (st != PI_ERR_NOT_FOUND) {
            fprintf(stderr, "pi-server: the model's chat template cannot be executed: %s\n",
                    terr);
        }
    }
    /* a template that takes tools teaches its own call syntax, unless it is one we do
     * not read: then ours is taught */
    if (src && strstr(src, "tools"))
        mi.tool_syntax = tc_syntax_of_template(src);
    if (mi.tool_syntax == TC_GENERIC)
        mi.tool_syntax = TC_NONE;
    free(src);
    if (mi.chat_format == PI_CHAT_AUTO) {
        int f = pi_model_chat_format(m);
        if (f < 0 || f == PI_CHAT_JINJA) {
            fprintf(stderr, "pi-server: the model has %s chat template; using ChatML\n",
                    f == PI_ERR_NOT_FOUND ? "no" : "an unknown");
            f = PI_CHAT_CHATML;
        }
        mi.chat_format = f;
    }
    name = model_name(o);
    if (!name)
        goto done;
    mi.name = name;

    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    /* -c is the total: each slot gets an equal share */
    cp.n_ctx = (uint32_t)(o->n_ctx / o->n_slots);
    if (o->n_ctx > 0 && cp.n_ctx < 16) {
        fprintf(stderr,
                "pi-server: -c %ld leaves each of the %ld slots %u positions; give at least "
                "%ld (16 per slot) or fewer slots (--parallel)\n",
                o->n_ctx, o->n_slots, cp.n_ctx, 16 * o->n_slots);
        goto done;
    }
    cp.n_batch = (uint32_t)o->n_batch;
    cp.n_threads = (uint32_t)o->n_threads;
    cp.n_seq_max = (uint32_t)o->n_slots;
    cp.sparse_mode = o->sparse_mode;
    /* the final hidden states for /v1/embeddings: one more norm per token decoded, and
     * a few vectors of n_embd floats per slot and batch entry */
    cp.embeddings = PI_EMBD_ON;
    if (o->dev.dry_run) { /* the plan for these slots, context and batch; nothing served */
        rc = cli_device_dry_run_model(&o->dev, m, o->model, &cp);
        goto done;
    }
    if (cli_device_params(&o->dev, o->model, &cp) != 0)
        goto done;
    {
        const int failed = cli_ctx_create(m, &cp, &ctx);
        cli_device_release(&o->dev); /* the statistics: borrowed for the call only */
        cp.plan_stats = NULL;
        if (failed || cli_device_report(&o->dev, ctx, &cp) != 0)
            goto done;
    }
    cli_placement_of(pi_ctx_plan(ctx), &cp, &mi.placement);
    mi.n_ctx = pi_ctx_n_ctx(ctx);
    struct srv_engine_config ec = {(uint32_t)o->n_slots, (uint32_t)o->queue, (uint32_t)o->n_batch,
                                   !o->no_prompt_cache, cli_pooling_of(m, o->pooling)};
    mi.context_shift = o->context_shift;
    mi.n_keep = o->n_keep;
    if (engine_create(ctx, &ec, &engine) != 0 || engine_start(engine) != 0) {
        fprintf(stderr, "pi-server: cannot start the inference thread\n");
        goto done;
    }
    char err[256] = "";
    if (http_start(&o->http, &mi, engine, &http, err, sizeof err) != 0) {
        fprintf(stderr, "pi-server: %s\n", err);
        goto done;
    }
    int v6 = strchr(o->http.host, ':') != NULL;
    fprintf(stderr,
            "pi-server: listening on http://%s%s%s:%d (model %s, %ld slots of %lld positions, "
            "queue %ld, %u threads%s)\n",
            v6 ? "[" : "", o->http.host, v6 ? "]" : "", http_port(http), name, o->n_slots,
            (long long)mi.n_ctx, o->queue, pi_ctx_n_threads(ctx),
            o->http.api_key ? ", API key required" : "");
    fflush(stderr);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "pi-server: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
    /* No new connections; running and queued jobs end with an error, and their clients
     * get it (a stream: an error event and [DONE]) before the connections close. */
    http_quiesce(http);
    engine_stop(engine);
    if (http_drain(http, 5000) > 0)
        fprintf(stderr, "pi-server: closing connections that did not finish in 5 s\n");
done:
    engine_stop(engine);
    http_stop(http);
    engine_destroy(engine);
    pi_ctx_destroy(ctx);
    pi_chat_template_destroy(tmpl);
    pi_model_close(m);
    free(name);
    return rc;
}

int main(int argc, char **argv) {
    struct opts o;
    memset(&o, 0, sizeof o);
    cli_device_init(&o.dev);
    o.n_slots = 4;
    o.queue = 16;
    o.n_batch = 256;
    o.max_tokens = 256;
    o.max_body = 1 << 20;
    o.timeout = 30;
    o.max_conns = 256;
    o.header_timeout = 10;
    o.read_timeout = 30;
    o.max_stream_buffer = 4L << 20;
    o.n_keep = -2;

    o.chat_format = PI_CHAT_AUTO;
    o.pooling = -1;
    o.http.host = "127.0.0.1";
    long port = 8080;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1, r;
        long *num = NULL;
        long lo = 0, hi = 0;
#define IS(s) (!strcmp(a, s))
        if ((r = cli_device_option(&o.dev, a, v, &takes)) >= 0) {
            if (r) {
                free(o.api_key);
                return r;
            }
        } else if (IS("--no-prompt-cache")) {
            o.no_prompt_cache = 1;
            takes = 0;
        } else if (IS("--context-shift")) {
            o.context_shift = 1;
            takes = 0;
        } else if (IS("--keep")) {
            num = &o.n_keep;
            lo = -1;
            hi = 1 << 20;
        } else if ((r = cli_common_option(a, v, usage, &o.verbose)) >= 0) {
            return r;
        } else if (r == CLI_OPT_TAKEN) {
            takes = 0;
        } else if (IS("-m") || IS("--model")) {
            o.model = v;
        } else if (IS("--host")) {
            o.http.host = v;
        } else if (IS("--cors-origin")) {
            /* an origin is scheme://host[:port], as the browser sends it: no path */
            const char *rest = v ? strstr(v, "://") : NULL;
            if (!rest || rest == v || !rest[3] || strchr(rest + 3, '/') || o.n_cors == MAX_NAMES) {
                fprintf(stderr,
                        "pi-server: --cors-origin wants an origin such as "
                        "http://localhost:3000 (scheme, host and port; no path; at "
                        "most %d)\n",
                        MAX_NAMES);
                return 2;
            }
            o.cors[o.n_cors++] = v;
        } else if (IS("--host-allow")) {
            if (!v || !*v || strchr(v, ':') || strchr(v, '/') || o.n_host_allow == MAX_NAMES) {
                fprintf(stderr,
                        "pi-server: --host-allow wants a host name without port (at "
                        "most %d)\n",
                        MAX_NAMES);
                return 2;
            }
            o.host_allow[o.n_host_allow++] = v;
        } else if (IS("--alias")) {
            o.alias = v;
        } else if (IS("--api-key")) {
            free(o.api_key);
            if (!*v || !(o.api_key = strdup(v))) {
                fprintf(stderr, "pi-server: --api-key wants a non-empty key\n");
                return 2;
            }
        } else if (IS("--api-key-file")) {
            free(o.api_key);
            o.api_key = NULL;
            if (read_key(v, &o.api_key) != 0)
                return 2;
        } else if (IS("--chat-template-file")) {
            o.chat_template_file = v;
        } else if (IS("--chat-format")) {
            o.chat_format = cli_chat_format("--chat-format", v);
            if (o.chat_format < 0)
                return 2;
        } else if (IS("--sparse-mode")) {
            const int mode = cli_sparse_mode(a, v);
            if (mode < 0)
                return 2;
            o.sparse_mode = (uint32_t)mode;
        } else if (IS("--pooling")) {
            o.pooling = cli_pooling(v);
            if (o.pooling == -2)
                return 2;
        } else if (IS("--port")) {
            num = &port;
            lo = 0;
            hi = 65535;
        } else if (IS("-np") || IS("--parallel")) {
            num = &o.n_slots;
            lo = 1;
            hi = 256;
        } else if (IS("--queue")) {
            num = &o.queue;
            lo = 0;
            hi = 1 << 16;
        } else if (IS("-c") || IS("--ctx-size")) {
            num = &o.n_ctx;
            lo = 0;
            hi = 1 << 20;
        } else if (IS("-b") || IS("--batch-size")) {
            num = &o.n_batch;
            lo = 1;
            hi = 1 << 16;
        } else if (IS("-t") || IS("--threads")) {
            num = &o.n_threads;
            lo = 0;
            hi = 512;
        } else if (IS("-n") || IS("--max-tokens")) {
            num = &o.max_tokens;
            lo = 1;
            hi = 1 << 20;
        } else if (IS("--max-body")) {
            num = &o.max_body;
            lo = 1024;
            hi = 1L << 30;
        } else if (IS("--timeout")) {
            num = &o.timeout;
            lo = 1;
            hi = 86400;
        } else if (IS("--header-timeout")) {
            num = &o.header_timeout;
            lo = 0;
            hi = 86400;
        } else if (IS("--read-timeout")) {
            num = &o.read_timeout;
            lo = 0;
            hi = 86400;
        } else if (IS("--max-stream-buffer")) {
            num = &o.max_stream_buffer;
            lo = 0;
            hi = 1L << 40;
        } else if (IS("--max-connections")) {
            num = &o.max_conns;
            lo = 1;
            hi = 65536;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "pi-server: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!o.model) {
            o.model = a;
            takes = 0;
        } else {
            fprintf(stderr, "pi-server: unexpected argument '%s'\n", a);
            return 2;
        }
#undef IS
        if (num && cli_parse_long(a, v, 0, lo, hi, num) != 0) {
            free(o.api_key);
            return 2;
        }
        i += takes;
    }
    if (!o.model) {
        usage(stderr);
        free(o.api_key);
        return 2;
    }
    if (cli_device_check(&o.dev)) {
        free(o.api_key);
        return 2;
    }
    if (o.chat_template_file && o.chat_format != PI_CHAT_AUTO) {
        fprintf(stderr, "pi-server: --chat-template-file and --chat-format exclude each other\n");
        free(o.api_key);
        return 2;
    }
    o.http.port = (int)port;
    o.http.api_key = o.api_key;
    o.http.max_body = (size_t)o.max_body;
    o.http.timeout_s = (unsigned)o.timeout;
    o.http.max_conns = (unsigned)o.max_conns;
    o.http.verbose = o.verbose;
    o.http.cors_origins = o.cors;
    o.http.n_cors_origins = o.n_cors;
    o.http.host_allow = o.host_allow;
    o.http.n_host_allow = o.n_host_allow;
    o.http.header_timeout_s = (unsigned)o.header_timeout;
    o.http.read_timeout_s = (unsigned)o.read_timeout;
    o.http.max_stream_buffer = (size_t)o.max_stream_buffer;

    /* Signals go to main's sigwait only: block them before any thread starts (threads
     * inherit the mask). A client that hangs up must not kill the server. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = serve(&o);
    cli_device_free(&o.dev);
    free(o.api_key);
    return rc;
}
