/* http.c -- the HTTP front end on libmicrohttpd: routing, limits, authentication,
 * streaming.
 *
 * libmicrohttpd runs one thread per connection, so a handler may block: a
 * non-streaming completion waits for its job in the access handler, and a streaming
 * one waits for the next piece of text inside the response's content reader. Both
 * wait in steps of WAIT_MS and look at the socket between steps: a client that hung up
 * (an orderly close reads as end of file) has its job cancelled at once, so its slot
 * is free within about WAIT_MS, even while the job is still queued. libmicrohttpd
 * itself reports a failed write through the request-completed callback, which cancels
 * too.
 *
 * Every error the handlers produce is OpenAI's error object. Requests that break HTTP
 * itself (a malformed request line or header, headers beyond the connection's memory
 * limit) are answered by libmicrohttpd with a 4xx of its own before any handler runs.
 *
 * Browsers. Any web page the user opens can send requests to a server on localhost, so
 * the defaults keep pages of other origins out: no CORS header unless --cors-origin
 * names the page's origin exactly (then that origin is echoed, with Vary: Origin, and
 * its preflight answered; another origin's preflight is refused with 403); POST bodies
 * must be declared application/json (a page can send text/plain or a form to another
 * origin without a preflight); and the Host header must name this server, so a DNS
 * rebinding page (its own name, resolving to 127.0.0.1) is refused with 403.
 *
 * Deadlines. libmicrohttpd's --timeout is an idle timeout: every byte restarts it, so a
 * client sending one byte a second holds a connection (and, at --max-connections, the
 * server) for ever. Each connection is therefore also registered (the connection
 * notification callback) with its phase and the time that phase began: the request
 * head must arrive within --header-timeout of the connection's start or of the end of
 * its previous request, and the body within --read-timeout of the head. A watchdog
 * thread looks every WATCH_MS and shuts down the socket of a connection past its
 * deadline; the connection's own thread then sees the end of the stream and closes it
 * as it would any client that went away. (With one thread per connection libmicrohttpd
 * calls no handler before the head is complete, so the head's deadline cannot be kept
 * from a handler.) The same watchdog cuts a stream whose client does not read: text
 * the engine produced and the connection has not yet formatted for sending is counted,
 * and past --max-stream-buffer bytes the job is cancelled (its slot is free at once)
 * and the socket shut down; each socket's kernel send buffer is fixed (SEND_BUFFER) so
 * that the kernel does not absorb megabytes first. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "server.h"

#define WAIT_MS 100
#define WATCH_MS 100
#define SEND_BUFFER (64 * 1024) /* SO_SNDBUF of every connection (the kernel doubles it) */

struct conn;

/* Where a connection is, for its deadlines. */
enum phase {
    PH_HEAD,   /* waiting for a request line and headers */
    PH_BODY,   /* the head is in; reading the body */
    PH_ANSWER, /* answering (no deadline: a completion may wait for a slot) */
    PH_STREAM  /* streaming an answer (the --max-stream-buffer cap) */
};

/* One TCP connection (libmicrohttpd's socket context); fields guarded by srv_http.mu. */
struct sock {
    struct sock *prev, *next;
    int fd;
    enum phase phase;
    double since;        /* now_s() when the phase began */
    struct conn *stream; /* PH_STREAM: the request streamed (holds a reference) */
    int cut;             /* the watchdog shut the socket down */
};

struct srv_http {
    struct MHD_Daemon *daemon;
    struct srv_http_config cfg;
    const struct srv_model_info *mi;
    struct srv_engine *engine;
    int port;
    atomic_uint_fast64_t next_id;
    atomic_int active; /* completions submitted and not yet answered */
    int bound_loopback; /* bound to 127/8 or ::1 */
    int bound_any;      /* bound to 0.0.0.0 or :: */
    int any_host;       /* --host-allow '*' */

    pthread_mutex_t mu; /* guards socks and every struct sock */
    struct sock *socks;
    pthread_t watchdog;
    int watchdog_started;
    atomic_int stopping;
};

enum route {
    R_NONE = 0,
    R_HEALTH,
    R_METRICS,
    R_MODELS,
    R_MODEL,
    R_CHAT,
    R_COMPLETIONS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_EMBEDDINGS,
    R_ASSET
};

/* One request; shared by the connection's handler and, for a stream, the response. */
struct conn {
    struct srv_http *h;
    atomic_int refs;
    enum route route;
    const struct srv_asset *asset;
    struct MHD_Connection *mc;
    struct sock *sock; /* NULL when the connection could not be registered */
    const char *cors;  /* the request's Origin when --cors-origin allows it (cfg's copy) */
    char method[16];
    char *path;     /* as libmicrohttpd decoded it, for routing */
    char shown[96]; /* the path for messages and the log: printable ASCII, cut */
    double t0;
    int status;
    int fd;
    struct srv_buf body;
    int too_large;
    /* A request refused before its body was read keeps reading and dropping the body
     * (at most drain_limit() bytes), then answers `refusal`: a client still sending
     * would otherwise be cut off by a TCP reset before it reads the answer. */
    int refused;
    struct srv_error refusal;
    size_t dropped;
    int close; /* answer with "Connection: close" (a request whose framing is in doubt) */

    /* completions */
    struct srv_job *job;
    int chat, stream, include_usage;
    char id[48];
    int64_t created;
    /* streaming: formatted events not yet handed to libmicrohttpd, and per choice how
     * far the text went out */
    struct srv_buf out;
    size_t out_at;
    size_t *sent;
    size_t *lp_sent; /* per choice, tokens whose logprobs went out */
    unsigned char *role_sent, *finish_sent;
    int finished;
    int counted; /* in h->active */
};

static void conn_unref(struct conn *c) {
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    if (c->job) {
        engine_cancel(c->h->engine, c->job); /* no-op when it is done */
        engine_release(c->h->engine, c->job);
    }
    buf_free(&c->body);
    buf_free(&c->out);
    free(c->sent);
    free(c->lp_sent);
    free(c->role_sent);
    free(c->finish_sent);
    free(c->path);
    free(c);
}

/* 1 when the peer closed the connection or it failed. */
static int peer_gone(int fd) {
    if (fd < 0)
        return 0;
    char ch;
    ssize_t r = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void set_phase(struct conn *c, enum phase ph) {
    if (!c->sock)
        return;
    pthread_mutex_lock(&c->h->mu);
    c->sock->phase = ph;
    c->sock->since = now_s();
    pthread_mutex_unlock(&c->h->mu);
}

/* While this connection waits for its job, libmicrohttpd must not count the time as
 * idleness (it would close the connection once the wait passed --timeout); setting the
 * timeout again afterwards restarts its clock. */
static void hold_timeout(struct conn *c, int hold) {
    MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT,
                              hold ? 0u : (unsigned)c->h->cfg.timeout_s);
}

static void printable(const char *in, char *out, size_t cap) {
    size_t n = 0;
    for (; *in && n + 4 < cap; in++)
        out[n++] = *in >= 0x20 && *in < 0x7f ? *in : '?';
    if (*in) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

/* ---- responses ---------------------------------------------------------------------- */

static enum MHD_Result queue(struct conn *c, struct MHD_Connection *mc, int status,
                             struct MHD_Response *r) {
    if (!r)
        return MHD_NO;
    if (c->cors)
        MHD_add_response_header(r, "Access-Control-Allow-Origin", c->cors);
    if (c->h->cfg.n_cors_origins)
        MHD_add_response_header(r, "Vary", "Origin");
    if (c->close)
        MHD_add_response_header(r, "Connection", "close");
    c->status = status;
    enum MHD_Result rc = MHD_queue_response(mc, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

/* body: malloc'd (freed by libmicrohttpd) or NULL (out of memory). */
static enum MHD_Result respond_json(struct conn *c, struct MHD_Connection *mc, int status,
                                    char *body) {
    static const char oom[] =
        "{\"error\":{\"message\":\"Out of memory.\",\"type\":\"server_error\",\"param\":null,"
        "\"code\":null}}";
    struct MHD_Response *r;
    if (body) {
        r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    } else {
        status = 500;
        r = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    }
    if (r)
        MHD_add_response_header(r, "Content-Type", "application/json");
    return queue(c, mc, status, r);
}

static enum MHD_Result respond_error(struct conn *c, struct MHD_Connection *mc,
                                     const struct srv_error *err) {
    char *body = api_error_json(err);
    if (!body)
        return respond_json(c, mc, 500, NULL);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (r) {
        MHD_add_response_header(r, "Content-Type", "application/json");
        if (err->status == 405) {
            MHD_add_response_header(r, "Allow",
                                    c->route == R_HEALTH || c->route == R_METRICS ||
                                            c->route == R_MODELS ||
                                            c->route == R_MODEL || c->route == R_ASSET
                                        ? "GET, HEAD, OPTIONS"
                                        : "POST, OPTIONS");
        }
        if (err->status == 503)
            MHD_add_response_header(r, "Retry-After", "1");
        if (err->status == 401)
            MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    }
    return queue(c, mc, err->status, r);
}

static enum MHD_Result fail(struct conn *c, struct MHD_Connection *mc, int status, const char *type,
                            const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

static enum MHD_Result fail(struct conn *c, struct MHD_Connection *mc, int status, const char *type,
                            const char *code, const char *fmt, ...) {
    struct srv_error err = {status, type, code, NULL, "", ""};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, ap);
    va_end(ap);
    return respond_error(c, mc, &err);
}

/* ---- routing ------------------------------------------------------------------------ */

static const struct {
    const char *path;
    enum route route;
    int post; /* 1: POST, 0: GET/HEAD */
    int auth; /* needs the API key */
} routes[] = {
    {"/health", R_HEALTH, 0, 0},
    {"/metrics", R_METRICS, 0, 1},
    {"/v1/models", R_MODELS, 0, 1},
    {"/v1/chat/completions", R_CHAT, 1, 1},
    {"/v1/completions", R_COMPLETIONS, 1, 1},
    {"/v1/embeddings", R_EMBEDDINGS, 1, 1},
    {"/tokenize", R_TOKENIZE, 1, 1},
    {"/detokenize", R_DETOKENIZE, 1, 1},
};

static int route_of(const char *path, const struct srv_asset **asset, int *post, int *auth) {
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(path, routes[i].path)) {
            *post = routes[i].post;
            *auth = routes[i].auth;
            return routes[i].route;
        }
    *post = 0;
    *auth = 1;
    if (!strncmp(path, "/v1/models/", 11) && path[11])
        return R_MODEL;
    *auth = 0;
    const char *want = !strcmp(path, "/") ? "/index.html" : path;
    for (size_t i = 0; i < srv_n_assets; i++)
        if (!strcmp(want, srv_assets[i].path)) {
            *asset = &srv_assets[i];
            return R_ASSET;
        }
    return R_NONE;
}

static int key_ok(const char *given, const char *key) {
    size_t n = strlen(key), m = strlen(given);
    unsigned diff = (unsigned)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? given[i] : 0);
    return diff == 0;
}

/* The name of a Host header value ("name", "name:port", "[v6]" or "[v6]:port") in
 * out[0..cap), without brackets or port; 0 when it is not of that form. */
static int host_name(const char *host, char *out, size_t cap) {
    const char *name = host, *end, *port;
    if (*host == '[') {
        name = host + 1;
        end = strchr(name, ']');
        if (!end)
            return 0;
        port = end + 1;
    } else {
        end = strchr(host, ':');
        if (end && strchr(end + 1, ':'))
            return 0; /* an IPv6 address must be in brackets */
        if (!end)
            end = host + strlen(host);
        port = end;
    }
    if (*port == ':')
        port += 1 + strspn(port + 1, "0123456789");
    size_t n = (size_t)(end - name);
    if (*port || n == 0 || n >= cap)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] <= 0x20 || (unsigned char)name[i] >= 0x7f ||
            strchr("/\\@?#[]", name[i]))
            return 0;
    memcpy(out, name, n);
    out[n] = '\0';
    return 1;
}

static int is_ip_literal(const char *name) {
    unsigned char a[16];
    return inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1;
}

/* Against DNS rebinding: a page whose own name resolves to this machine sends its name
 * as Host. Accepted: the bound address, localhost, the loopback addresses when bound to
 * loopback or to all addresses, any IP address when bound to all addresses (a rebinding
 * name is never an address), and --host-allow names. */
static int host_ok(const struct srv_http *h, const char *host) {
    char name[256];
    if (!host_name(host, name, sizeof name))
        return 0;
    if (h->any_host || !strcasecmp(name, "localhost") || !strcasecmp(name, h->cfg.host))
        return 1;
    if ((h->bound_loopback || h->bound_any) && (!strcmp(name, "127.0.0.1") || !strcmp(name, "::1")))
        return 1;
    if (h->bound_any && is_ip_literal(name))
        return 1;
    for (size_t i = 0; i < h->cfg.n_host_allow; i++)
        if (!strcasecmp(name, h->cfg.host_allow[i]))
            return 1;
    return 0;
}

/* The configured origin equal to the request's Origin, or NULL. */
static const char *cors_match(const struct srv_http *h, const char *origin) {
    for (size_t i = 0; origin && i < h->cfg.n_cors_origins; i++)
        if (!strcmp(origin, h->cfg.cors_origins[i]))
            return h->cfg.cors_origins[i];
    return NULL;
}

/* application/json, parameters (charset) allowed, any case. */
static int is_json_type(const char *ct) {
    if (!ct)
        return 0;
    ct += strspn(ct, " \t");
    if (strncasecmp(ct, "application/json", 16) != 0)
        return 0;
    ct += 16;
    ct += strspn(ct, " \t");
    return *ct == '\0' || *ct == ';';
}

/* How much body a refused request may still send before the connection is simply
 * closed: the largest accepted body plus 1 MiB. */
static size_t drain_limit(const struct srv_http *h) {
    return h->cfg.max_body + ((size_t)1 << 20);
}

/* Refuse the request: at once when it has no body to come (or one too big to drop),
 * else after its body has been read and dropped. */
static enum MHD_Result refuse(struct conn *c, struct MHD_Connection *mc, int drain,
                             const struct srv_error *err) {
    if (!drain)
        return respond_error(c, mc, err);
    c->refused = 1;
    c->refusal = *err;
    return MHD_YES;
}

/* What the request's head holds more than once. libmicrohttpd keeps every header line
 * and its lookups return the first: two Host headers would be checked by their first
 * (RFC 9112, section 3.2 wants 400), and two Content-Length headers would leave the
 * body's end to whichever a proxy in front of us believes (request smuggling). */
struct dup_count {
    int n_host, n_length;
    const char *length; /* the first Content-Length */
    int lengths_differ;
};

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    (void)kind;
    struct dup_count *d = cls;
    if (!key)
        return MHD_YES;
    if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) {
        d->n_host++;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (d->n_length++ == 0)
            d->length = value;
        else if (!value || !d->length || strcmp(value, d->length) != 0)
            d->lengths_differ = 1;
    }
    return MHD_YES;
}

/* The first call of a request: route, method, key and declared size are checked before
 * any body is read. Returns MHD_YES to go on reading, or the result of an early answer
 * (which sets c->status; libmicrohttpd then closes the connection after it). */
static enum MHD_Result first_call(struct srv_http *h, struct conn *c, struct MHD_Connection *mc,
                                  const char *method, const char *version) {
    int post = 0, auth = 0;
    c->route = (enum route)route_of(c->path, &c->asset, &post, &auth);
    const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
    c->cors = cors_match(h, origin);
    const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Transfer-Encoding");
    unsigned long long declared = 0;
    int bad_length = 0;
    if (cl) {
        char *end;
        errno = 0;
        declared = strtoull(cl, &end, 10);
        bad_length = errno != 0 || end == cl || *cl == '-';
    }
    int has_body = (cl && declared > 0) || (!cl && te != NULL);
    int drain = has_body && !bad_length && (!cl || declared <= drain_limit(h));
    struct srv_error err = {0, "invalid_request_error", NULL, NULL, "", ""};
    struct dup_count dup = {0, 0, NULL, 0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, count_header, &dup);
    if (dup.n_host > 1 || dup.lengths_differ) {
        /* the body, if any, is read (by the first Content-Length) and dropped, and the
         * connection closed after the answer: what follows could not be framed */
        c->close = 1;
        err.status = 400;
        err.code = "duplicate_header";
        snprintf(err.message, sizeof err.message, "The request has %s.",
                 dup.n_host > 1 ? "more than one Host header"
                                : "Content-Length headers with different values");
        return refuse(c, mc, drain && !dup.lengths_differ, &err);
    }
    /* libmicrohttpd decodes only the chunked transfer coding; with another one (gzip) it
     * would read the body until the client closes the connection, so the client would
     * wait for --read-timeout. Answered at once, and the connection closed. */
    if (te && strcasecmp(te, "chunked") != 0) {
        char shown[64];
        printable(te, shown, sizeof shown);
        c->close = 1;
        err.status = 501;
        err.code = "unsupported_transfer_encoding";
        snprintf(err.message, sizeof err.message,
                 "Transfer-Encoding '%s' is not supported; send the body as is or chunked.", shown);
        return respond_error(c, mc, &err);
    }
    /* HTTP/1.0 requests may come without Host (no browser sends one without it);
     * HTTP/1.1 requires it (RFC 9112, section 3.2: 400). */
    const char *host = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!host && version && strcmp(version, MHD_HTTP_VERSION_1_0) != 0) {
        err.status = 400;
        err.code = "missing_host";
        snprintf(err.message, sizeof err.message, "HTTP/1.1 requests need a Host header.");
        return refuse(c, mc, drain, &err);
    }
    if (host && !host_ok(h, host)) {
        char shown[64];
        printable(host, shown, sizeof shown);
        err.status = 403;
        err.code = "host_not_allowed";
        snprintf(err.message, sizeof err.message,
                 "Host '%s' is not a name of this server; start it with --host-allow NAME to "
                 "accept it.",
                 shown);
        return refuse(c, mc, drain, &err);
    }
    if (!strcmp(method, "OPTIONS")) {
        if (origin && !c->cors) { /* a preflight from an origin not allowed */
            char shown[64];
            printable(origin, shown, sizeof shown);
            err.status = 403;
            err.code = "origin_not_allowed";
            snprintf(err.message, sizeof err.message,
                     "Origin '%s' may not call this server; start it with --cors-origin ORIGIN "
                     "to allow it.",
                     shown);
            return refuse(c, mc, drain, &err);
        }
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (r) {
            MHD_add_response_header(r, "Allow", "GET, HEAD, POST, OPTIONS");
            if (c->cors) {
                /* the headers the page asks for (client libraries add their own, such as
                 * openai-node's X-Stainless-*), when they are a plain list of names */
                const char *ask = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                              "Access-Control-Request-Headers");
                const char *names = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789-_, ";
                if (!ask || !*ask || strlen(ask) > 1024 || ask[strspn(ask, names)])
                    ask = "Authorization, Content-Type";
                MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                MHD_add_response_header(r, "Access-Control-Allow-Headers", ask);
                MHD_add_response_header(r, "Access-Control-Max-Age", "600");
            }
        }
        return queue(c, mc, 204, r);
    }
    if (c->route == R_NONE) {
        err.status = 404;
        err.code = "unknown_url";
        snprintf(err.message, sizeof err.message, "Unknown request URL: %s %s.", c->method,
                 c->shown);
        return refuse(c, mc, drain, &err);
    }
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (post ? strcmp(method, "POST") != 0 : !is_get) {
        err.status = 405;
        err.code = "method_not_allowed";
        snprintf(err.message, sizeof err.message, "Method %s is not allowed on %s.", c->method,
                 c->shown);
        return refuse(c, mc, drain, &err);
    }
    if (auth && h->cfg.api_key) {
        const char *a = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
        if (!a || strncasecmp(a, "Bearer ", 7) != 0 || !key_ok(a + 7, h->cfg.api_key)) {
            err.status = 401;
            err.code = "invalid_api_key";
            snprintf(err.message, sizeof err.message,
                     "Incorrect or missing API key: send 'Authorization: Bearer KEY'.");
            return refuse(c, mc, drain, &err);
        }
    }
    const char *ct = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (post && !is_json_type(ct)) {
        char shown[64];
        printable(ct ? ct : "none", shown, sizeof shown);
        err.status = 415;
        err.code = "unsupported_media_type";
        snprintf(err.message, sizeof err.message,
                 "The body must be JSON sent with 'Content-Type: application/json' (not '%s').",
                 shown);
        return refuse(c, mc, drain, &err);
    }
    if (bad_length || declared > h->cfg.max_body) {
        c->too_large = 1; /* answered 413 once the body is dropped, or now */
        if (drain)
            return MHD_YES;
        return fail(c, mc, 413, "invalid_request_error", "request_too_large",
                    "The request body is larger than %zu bytes (--max-body).", h->cfg.max_body);
    }
    return MHD_YES;
}

/* ---- handlers ----------------------------------------------------------------------- */

static enum MHD_Result do_health(struct srv_http *h, struct conn *c, struct MHD_Connection *mc) {
    struct srv_health hs;
    engine_health(h->engine, &hs);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "status", "ok");
    cJSON_AddNumberToObject(root, "slots_idle", hs.slots_idle);
    cJSON_AddNumberToObject(root, "slots_busy", hs.slots_busy);
    cJSON_AddNumberToObject(root, "queued", hs.queued);
    cJSON_AddNumberToObject(root, "requests", (double)hs.requests);
    cJSON_AddNumberToObject(root, "tokens_generated", (double)hs.tokens_generated);
    /* where the plan put the model: device "none" (CPU only) has no other field */
    const struct cli_placement *p = &h->mi->placement;
    cJSON *pl = cJSON_AddObjectToObject(root, "placement");
    if (pl) {
        cJSON_AddStringToObject(pl, "device", cli_device_name(p->device));
        if (p->device != PI_DEVICE_NONE) {
            cJSON_AddNumberToObject(pl, "device_index", p->index);
            if (p->budget == UINT64_MAX)
                cJSON_AddNullToObject(pl, "budget_bytes");
            else
                cJSON_AddNumberToObject(pl, "budget_bytes", (double)p->budget);
            cJSON_AddNumberToObject(pl, "device_bytes", (double)p->bytes);
            cJSON_AddNumberToObject(pl, "ffn_neurons_on_device", p->neurons_on);
            cJSON_AddNumberToObject(pl, "ffn_neurons", p->neurons_total);
            cJSON_AddNumberToObject(pl, "attention_layers_on_device", (double)p->attn_layers);
            cJSON_AddNumberToObject(pl, "layers", (double)p->n_layer);
            cJSON_AddBoolToObject(pl, "output_on_device", p->output);
            cJSON_AddBoolToObject(pl, "kv_cache_on_device", p->kv);
        }
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return respond_json(c, mc, 200, s);
}

/* Prometheus' text format (version 0.0.4). */
static enum MHD_Result do_metrics(struct srv_http *h, struct conn *c, struct MHD_Connection *mc) {
    struct srv_health hs;
    engine_health(h->engine, &hs);
    static const struct {
        const char *name, *type, *help;
    } m[] = {
        {"pi_requests_total", "counter", "Requests accepted for generation."},
        {"pi_requests_failed_total", "counter", "Requests that ended with an error."},
        {"pi_prompt_tokens_total", "counter", "Prompt tokens of the requests started."},
        {"pi_prompt_tokens_cached_total", "counter",
         "Prompt tokens the prompt cache held (not decoded again)."},
        {"pi_tokens_generated_total", "counter", "Tokens generated."},
        {"pi_decode_steps_total", "counter", "Batched decode steps."},
        {"pi_tokens_decoded_total", "counter", "Tokens the decode steps took (prompt and generated)."},
        {"pi_decode_seconds_total", "counter", "Seconds spent in decode steps."},
        {"pi_context_shifts_total", "counter",
         "Context shifts (--context-shift): a full slot dropped old positions."},
        {"pi_slots_busy", "gauge", "Slots serving a request."},
        {"pi_slots_idle", "gauge", "Free slots."},
        {"pi_requests_queued", "gauge", "Requests waiting for a slot."},
        {"pi_device_bytes", "gauge",
         "Bytes the placement plan put on the device (0: CPU only)."},
        {"pi_device_budget_bytes", "gauge",
         "The device budget the plan was made for (0: no device; +Inf: unlimited)."},
        {"pi_device_ffn_neurons", "gauge", "FFN neurons on the device."},
        {"pi_plan_ffn_neurons", "gauge", "FFN neurons the plan places (layers x neurons; 0: no plan)."},
        {"pi_device_attention_layers", "gauge", "Layers whose attention runs on the device."},
        {"pi_device_output", "gauge", "1 if the output projection runs on the device."},
        {"pi_device_kv_cache", "gauge", "1 if the KV cache is on the device."},
    };
    const struct cli_placement *p = &h->mi->placement;
    const int dev = p->device != PI_DEVICE_NONE;
    const double v[] = {(double)hs.requests,      (double)hs.failed,
                        (double)hs.prompt_tokens, (double)hs.prompt_tokens_cached,
                        (double)hs.tokens_generated, (double)hs.steps,
                        (double)hs.tokens_decoded, hs.decode_seconds,
                        (double)hs.context_shifts,
                        (double)hs.slots_busy,    (double)hs.slots_idle,
                        (double)hs.queued,
                        dev ? (double)p->bytes : 0.0,
                        !dev ? 0.0 : p->budget == UINT64_MAX ? (double)INFINITY : (double)p->budget,
                        dev ? p->neurons_on : 0.0, p->neurons_total,
                        dev ? (double)p->attn_layers : 0.0, dev ? (double)p->output : 0.0,
                        dev ? (double)p->kv : 0.0};
    struct srv_buf out = {0};
    int rc = 0;
    for (size_t i = 0; i < sizeof m / sizeof *m && rc == 0; i++)
        rc = isinf(v[i]) ? buf_printf(&out, "# HELP %s %s\n# TYPE %s %s\n%s +Inf\n", m[i].name,
                                      m[i].help, m[i].name, m[i].type, m[i].name)
                         : buf_printf(&out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", m[i].name,
                                      m[i].help, m[i].name, m[i].type, m[i].name, v[i]);
    if (rc != 0) {
        buf_free(&out);
        return respond_json(c, mc, 500, NULL);
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(out.len, out.data, MHD_RESPMEM_MUST_FREE);
    if (r)
        MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    else
        buf_free(&out);
    return queue(c, mc, 200, r);
}

static enum MHD_Result do_asset(struct conn *c, struct MHD_Connection *mc) {
    struct MHD_Response *r = MHD_create_response_from_buffer(c->asset->size, (void *)c->asset->data,
                                                             MHD_RESPMEM_PERSISTENT);
    if (r) {
        MHD_add_response_header(r, "Content-Type", c->asset->mime);
        MHD_add_response_header(r, "Cache-Control", "no-cache");
    }
    return queue(c, mc, 200, r);
}

/* Append the events the job has ready to c->out. Returns 1 when something was added,
 * 0 when nothing is ready, -1 when out of memory. Called with the engine locked. */
static int collect_events(struct conn *c) {
    const struct srv_model_info *mi = c->h->mi;
    struct srv_job *job = c->job;
    size_t before = c->out.len;
    int rc = 0;
    for (int i = 0; i < job->n && rc == 0; i++) {
        struct srv_choice *ch = &job->choices[i];
        const int done = ch->finish != SRV_FINISH_NONE && ch->finish != SRV_FINISH_ERROR;
        if (c->chat && !c->role_sent[i]) {
            rc = api_stream_chunk(&c->out, mi, 1, c->id, c->created, i, "", 0, 1, SRV_FINISH_NONE,
                                  NULL, 0, 0);
            c->role_sent[i] = 1;
        }
        /* the logprobs of the tokens whose text goes out with this chunk */
        const size_t lp_to = job->logprobs >= 0 ? api_lp_count(ch, ch->stable, done) : 0;
        if (rc == 0 && ch->stable > c->sent[i]) {
            rc = api_stream_chunk(&c->out, mi, c->chat, c->id, c->created, i,
                                  ch->text.data + c->sent[i], ch->stable - c->sent[i], 0,
                                  SRV_FINISH_NONE, ch, c->lp_sent[i], lp_to);
            c->sent[i] = ch->stable;
            c->lp_sent[i] = lp_to > c->lp_sent[i] ? lp_to : c->lp_sent[i];
        }
        if (rc == 0 && done && !c->finish_sent[i] && ch->finish == SRV_FINISH_TOOLS && c->chat)
            rc = api_stream_tool_calls(&c->out, mi, c->id, c->created, i, ch);
        if (rc == 0 && done && !c->finish_sent[i]) {
            rc = api_stream_chunk(&c->out, mi, c->chat, c->id, c->created, i, NULL, 0, 0,
                                  ch->finish, ch, c->lp_sent[i], lp_to);
            c->finish_sent[i] = 1;
            c->lp_sent[i] = lp_to > c->lp_sent[i] ? lp_to : c->lp_sent[i];
        }
    }
    if (rc == 0 && job->state == SRV_JOB_DONE && c->out.len == before) {
        if (job->error[0]) {
            struct srv_error err;
            srv_error_set(&err, 500, "server_error", NULL, NULL, "%s", job->error);
            char *e = api_error_json(&err);
            rc = e ? buf_printf(&c->out, "data: %s\n\n", e) : -1;
            free(e);
        }
        if (rc == 0 && c->include_usage) {
            int64_t completion = 0;
            for (int i = 0; i < job->n; i++)
                completion += job->choices[i].n_tokens;
            rc = api_stream_usage(&c->out, mi, c->chat, c->id, c->created, (int64_t)job->n_prompt,
                                  (int64_t)job->n_cached, completion);
        }
        if (rc == 0)
            rc = buf_append(&c->out, "data: [DONE]\n\n", 14);
        c->finished = 1;
    }
    return rc < 0 ? -1 : c->out.len > before;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct conn *c = cls;
    while (c->out_at == c->out.len) {
        c->out.len = c->out_at = 0;
        if (c->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        engine_lock(c->h->engine);
        int rc, held = 0;
        while ((rc = collect_events(c)) == 0) {
            if (peer_gone(c->fd)) {
                rc = -1;
                break;
            }
            if (!held)
                hold_timeout(c, held = 1);
            engine_wait(c->h->engine, c->job, WAIT_MS);
        }
        engine_unlock(c->h->engine);
        if (held)
            hold_timeout(c, 0);
        if (rc < 0) {
            engine_cancel(c->h->engine, c->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = c->out.len - c->out_at;
    if (n > max)
        n = max;
    memcpy(buf, c->out.data + c->out_at, n);
    c->out_at += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    conn_unref(cls);
}

static enum MHD_Result do_completion(struct srv_http *h, struct conn *c, struct MHD_Connection *mc,
                                     cJSON *req) {
    struct srv_error err;
    c->chat = c->route == R_CHAT;
    c->job = api_make_job(h->mi, req, c->chat, &c->stream, &c->include_usage, &err);
    if (!c->job)
        return respond_error(c, mc, &err);
    if (c->stream) {
        c->sent = calloc((size_t)c->job->n, sizeof *c->sent);
        c->lp_sent = calloc((size_t)c->job->n, sizeof *c->lp_sent);
        c->role_sent = calloc((size_t)c->job->n, 1);
        c->finish_sent = calloc((size_t)c->job->n, 1);
        if (!c->sent || !c->lp_sent || !c->role_sent || !c->finish_sent)
            return respond_json(c, mc, 500, NULL);
    }
    int st = engine_submit(h->engine, c->job);
    if (st != 0) {
        struct srv_job *job = c->job;
        c->job = NULL;
        job_free(job); /* never seen by the engine */
        return fail(
            c, mc, 503, "server_error", st == SRV_ERR_BUSY ? "server_busy" : "shutting_down", "%s",
            st == SRV_ERR_BUSY ? "Every slot is busy and the queue is full; try again later."
                               : "The server is shutting down.");
    }
    atomic_fetch_add(&h->active, 1);
    c->counted = 1;
    uint64_t n = atomic_fetch_add(&h->next_id, 1) + 1;
    snprintf(c->id, sizeof c->id, "%s-%08llx%08llx", c->chat ? "chatcmpl" : "cmpl",
             (unsigned long long)(c->t0 * 1e3) & 0xffffffffull, (unsigned long long)n);
    c->created = (int64_t)time(NULL);
    if (c->stream) {
        atomic_fetch_add(&c->refs, 1); /* the response's */
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                                   stream_read, c, stream_free);
        if (!r) {
            atomic_fetch_sub(&c->refs, 1);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        enum MHD_Result qr = queue(c, mc, 200, r);
        if (qr == MHD_YES && c->sock) {
            atomic_fetch_add(&c->refs, 1); /* the watchdog's, until the request ends */
            pthread_mutex_lock(&h->mu);
            struct conn *old = c->sock->stream;
            c->sock->stream = c;
            c->sock->phase = PH_STREAM;
            c->sock->since = now_s();
            pthread_mutex_unlock(&h->mu);
            if (old)
                conn_unref(old);
        }
        return qr;
    }
    /* Non-streaming: wait here (this connection's own thread). */
    hold_timeout(c, 1);
    engine_lock(h->engine);
    while (c->job->state != SRV_JOB_DONE) {
        if (peer_gone(c->fd)) {
            engine_unlock(h->engine);
            engine_cancel(h->engine, c->job);
            c->status = 499; /* as nginx logs a client that went away */
            return MHD_NO;
        }
        engine_wait(h->engine, c->job, WAIT_MS);
    }
    engine_unlock(h->engine);
    hold_timeout(c, 0);
    if (c->job->error[0])
        return fail(c, mc, 500, "server_error", NULL, "%s", c->job->error);
    return respond_json(c, mc, 200, api_completion_json(h->mi, c->job, c->chat, c->id, c->created));
}

/* /v1/embeddings: one engine job per input. As many as the queue takes are submitted at
 * once (they run in parallel slots); when it is full the rest wait for the earlier ones.
 * Answered once all are done; a client that goes away cancels what is left. */
static enum MHD_Result do_embeddings(struct srv_http *h, struct conn *c, struct MHD_Connection *mc,
                                     cJSON *req) {
    struct srv_error err;
    size_t n = 0, sent = 0, done = 0;
    int base64 = 0;
    struct srv_job **jobs = api_make_embed_jobs(h->mi, req, &n, &base64, &err);
    if (!jobs)
        return respond_error(c, mc, &err);
    enum MHD_Result rc = MHD_NO;
    char why[sizeof jobs[0]->error] = "";
    int busy = 0, gone = 0;
    atomic_fetch_add(&h->active, 1); /* http_drain waits for the answer */
    c->counted = 1;
    hold_timeout(c, 1);
    while (done < n && !why[0] && !gone) {
        for (; sent < n; sent++) {
            const int st = engine_submit(h->engine, jobs[sent]);
            if (st == SRV_ERR_BUSY && sent > done)
                break; /* our own jobs hold the queue: wait for one */
            if (st != 0) {
                busy = st == SRV_ERR_BUSY ? 1 : 2;
                break;
            }
        }
        if (busy)
            break;
        engine_lock(h->engine);
        while (jobs[done]->state != SRV_JOB_DONE && !(gone = peer_gone(c->fd)))
            engine_wait(h->engine, jobs[done], WAIT_MS);
        if (!gone && jobs[done]->error[0])
            snprintf(why, sizeof why, "%s", jobs[done]->error);
        engine_unlock(h->engine);
        done += !gone;
    }
    hold_timeout(c, 0);
    if (gone || why[0] || busy) /* what is still queued or running is dropped */
        for (size_t i = done; i < sent; i++)
            engine_cancel(h->engine, jobs[i]);
    if (gone) {
        c->status = 499;
    } else if (busy) {
        rc = fail(c, mc, 503, "server_error", busy == 1 ? "server_busy" : "shutting_down", "%s",
                  busy == 1 ? "Every slot is busy and the queue is full; try again later."
                            : "The server is shutting down.");
    } else if (why[0]) {
        rc = fail(c, mc, 500, "server_error", NULL, "%s", why);
    } else {
        rc = respond_json(c, mc, 200, api_embeddings_json(h->mi, jobs, n, base64));
    }
    for (size_t i = 0; i < n; i++) {
        if (i < sent)
            engine_release(h->engine, jobs[i]); /* the engine keeps its own reference */
        else
            job_free(jobs[i]);
    }
    free(jobs);
    return rc;
}

static enum MHD_Result dispatch(struct srv_http *h, struct conn *c, struct MHD_Connection *mc) {
    switch (c->route) {
    case R_HEALTH:
        return do_health(h, c, mc);
    case R_METRICS:
        return do_metrics(h, c, mc);
    case R_MODELS:
        return respond_json(c, mc, 200, api_models_json(h->mi, 0));
    case R_MODEL:
        if (strcmp(c->path + 11, h->mi->name) != 0)
            return fail(c, mc, 404, "invalid_request_error", "model_not_found",
                        "The model '%s' does not exist.", c->shown + 11);
        return respond_json(c, mc, 200, api_models_json(h->mi, 1));
    case R_ASSET:
        return do_asset(c, mc);
    default:
        break;
    }
    if (c->too_large)
        return fail(c, mc, 413, "invalid_request_error", "request_too_large",
                    "The request body is larger than %zu bytes (--max-body).", h->cfg.max_body);
    struct srv_error err;
    cJSON *req = api_parse_body(c->body.data, c->body.len, &err);
    if (!req)
        return respond_error(c, mc, &err);
    enum MHD_Result rc;
    char *out = NULL;
    switch (c->route) {
    case R_TOKENIZE:
        out = api_tokenize(h->mi, req, &err);
        rc = out ? respond_json(c, mc, 200, out) : respond_error(c, mc, &err);
        break;
    case R_DETOKENIZE:
        out = api_detokenize(h->mi, req, &err);
        rc = out ? respond_json(c, mc, 200, out) : respond_error(c, mc, &err);
        break;
    case R_EMBEDDINGS:
        rc = do_embeddings(h, c, mc, req);
        break;
    default:
        rc = do_completion(h, c, mc, req);
        break;
    }
    cJSON_Delete(req);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **ptr) {
    struct srv_http *h = cls;
    struct conn *c = *ptr;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        atomic_init(&c->refs, 1);
        c->h = h;
        c->mc = mc;
        c->t0 = now_s();
        c->fd = -1;
        c->path = strdup(url ? url : "/");
        *ptr = c;
        if (!c->path)
            return MHD_NO;
        printable(c->path, c->shown, sizeof c->shown);
        printable(method, c->method, sizeof c->method);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci)
            c->fd = ci->connect_fd;
        ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        c->sock = ci ? ci->socket_context : NULL;
        set_phase(c, PH_BODY);
        return first_call(h, c, mc, method, version);
    }
    if (c->status) {
        *upload_size = 0; /* answered early: drop what else comes */
        return MHD_YES;
    }
    if (*upload_size) {
        if (!c->too_large && !c->refused && c->body.len + *upload_size > h->cfg.max_body) {
            c->too_large = 1;
            c->dropped = c->body.len;
            buf_free(&c->body);
        }
        if (c->too_large || c->refused) {
            c->dropped += *upload_size;
            *upload_size = 0;
            /* a body past what we drop: close without an answer */
            return c->dropped > drain_limit(h) ? MHD_NO : MHD_YES;
        }
        if (buf_append(&c->body, upload_data, *upload_size) != 0)
            return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    set_phase(c, PH_ANSWER);
    if (c->refused)
        return respond_error(c, mc, &c->refusal);
    return dispatch(h, c, mc);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **ptr,
                         enum MHD_RequestTerminationCode toe) {
    (void)mc;
    struct srv_http *h = cls;
    struct conn *c = *ptr;
    if (!c)
        return;
    *ptr = NULL;
    if (c->job && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        engine_cancel(h->engine, c->job);
    struct conn *streamed = NULL;
    if (c->sock) { /* the next request's head is due within --header-timeout */
        pthread_mutex_lock(&h->mu);
        streamed = c->sock->stream;
        c->sock->stream = NULL;
        c->sock->phase = PH_HEAD;
        c->sock->since = now_s();
        pthread_mutex_unlock(&h->mu);
    }
    if (streamed)
        conn_unref(streamed);
    if (c->counted)
        atomic_fetch_sub(&h->active, 1);
    if (h->cfg.verbose) {
        int64_t prompt = 0, cached = 0, completion = 0;
        if (c->job) {
            engine_lock(h->engine);
            prompt = (int64_t)c->job->n_prompt;
            cached = (int64_t)c->job->n_cached;
            for (int i = 0; i < c->job->n; i++)
                completion += c->job->choices[i].n_tokens;
            engine_unlock(h->engine);
        }
        fprintf(stderr, "pi-server: %s %s %d %.1f ms%s", c->method, c->shown,
                c->status ? c->status : 499, (now_s() - c->t0) * 1e3,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (client gone)");
        if (c->job)
            fprintf(stderr, " | prompt %lld (%lld cached), completion %lld tokens",
                    (long long)prompt, (long long)cached, (long long)completion);
        fputc('\n', stderr);
    }
    conn_unref(c);
}

/* The URL's %HH escapes decoded in place, except %00: libmicrohttpd's own decoder makes
 * it a NUL, and the path handed to the handler, a C string, would end there
 * ("/health%00x" answered as /health). Kept as written, it matches no route. */
static int hex_digit(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static size_t unescape_url(void *cls, struct MHD_Connection *mc, char *s) {
    (void)cls;
    (void)mc;
    size_t out = 0;
    for (size_t i = 0; s[i]; i++) {
        const int hi = s[i] == '%' ? hex_digit(s[i + 1]) : -1;
        const int lo = hi >= 0 ? hex_digit(s[i + 2]) : -1;
        const int v = lo >= 0 ? hi * 16 + lo : 0;
        if (v != 0) {
            s[out++] = (char)v;
            i += 2;
        } else {
            s[out++] = s[i];
        }
    }
    s[out] = '\0';
    return out;
}

/* ---- deadlines: the connection registry and its watchdog ----------------------------- */

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    struct srv_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct sock *s = calloc(1, sizeof *s);
        if (!s || !ci) {
            /* a connection without deadlines would undo them: refuse it */
            free(s);
            if (ci)
                shutdown(ci->connect_fd, SHUT_RDWR);
            *socket_context = NULL;
            return;
        }
        s->fd = ci->connect_fd;
        /* A fixed send buffer: with the kernel's autotuning a client that does not read
         * has up to net.ipv4.tcp_wmem's maximum (4 MiB) of a stream buffered for it
         * before the --max-stream-buffer count even starts. */
        int sndbuf = SEND_BUFFER;
        setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        s->phase = PH_HEAD;
        s->since = now_s();
        pthread_mutex_lock(&h->mu);
        s->next = h->socks;
        if (h->socks)
            h->socks->prev = s;
        h->socks = s;
        pthread_mutex_unlock(&h->mu);
        *socket_context = s;
        return;
    }
    /* Closed: libmicrohttpd closes the socket after this returns, so the watchdog never
     * shuts down a descriptor that was reused. */
    struct sock *s = *socket_context;
    if (!s)
        return;
    pthread_mutex_lock(&h->mu);
    if (s->prev)
        s->prev->next = s->next;
    else
        h->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    struct conn *streamed = s->stream;
    pthread_mutex_unlock(&h->mu);
    if (streamed)
        conn_unref(streamed);
    free(s);
    *socket_context = NULL;
}

/* Bytes of text (and logprob records) the stream's job has produced that the
 * connection has not formatted for sending yet. */
static size_t stream_unsent(struct srv_http *h, struct conn *c) {
    size_t n = 0;
    engine_lock(h->engine);
    for (int i = 0; i < c->job->n; i++) {
        const struct srv_choice *ch = &c->job->choices[i];
        if (ch->text.len > c->sent[i])
            n += ch->text.len - c->sent[i];
        if (c->job->logprobs >= 0 && (size_t)ch->n_tokens > c->lp_sent[i])
            n += ((size_t)ch->n_tokens - c->lp_sent[i]) * sizeof(struct srv_logprob);
    }
    engine_unlock(h->engine);
    return n;
}

static void *watchdog_main(void *arg) {
    struct srv_http *h = arg;
    const struct timespec tick = {0, WATCH_MS * 1000000L};
    const double head = h->cfg.header_timeout_s, body = h->cfg.read_timeout_s;
    while (!atomic_load(&h->stopping)) {
        nanosleep(&tick, NULL);
        const double now = now_s();
        pthread_mutex_lock(&h->mu);
        for (struct sock *s = h->socks; s; s = s->next) {
            if (s->cut)
                continue;
            const char *why = NULL;
            size_t unsent = 0;
            if (s->phase == PH_HEAD && head > 0 && now - s->since > head) {
                why = "no complete request head within --header-timeout";
            } else if (s->phase == PH_BODY && body > 0 && now - s->since > body) {
                why = "no complete body within --read-timeout";
            } else if (s->phase == PH_STREAM && s->stream && h->cfg.max_stream_buffer &&
                       (unsent = stream_unsent(h, s->stream)) > h->cfg.max_stream_buffer) {
                why = "the client does not read its stream (--max-stream-buffer)";
                engine_cancel(h->engine, s->stream->job);
            }
            if (!why)
                continue;
            s->cut = 1;
            shutdown(s->fd, SHUT_RDWR);
            if (h->cfg.verbose) {
                if (unsent)
                    fprintf(stderr, "pi-server: connection closed: %s (%zu bytes unsent)\n", why,
                            unsent);
                else
                    fprintf(stderr, "pi-server: connection closed: %s\n", why);
            }
        }
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

/* ---- start and stop ----------------------------------------------------------------- */

/* Whether the address to bind is a loopback or a wildcard one. */
static void classify_bound(struct srv_http *h) {
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, h->cfg.host, &a4) == 1) {
        uint32_t a = ntohl(a4.s_addr);
        h->bound_loopback = (a >> 24) == 127;
        h->bound_any = a == 0;
    } else if (inet_pton(AF_INET6, h->cfg.host, &a6) == 1) {
        h->bound_loopback = IN6_IS_ADDR_LOOPBACK(&a6);
        h->bound_any = IN6_IS_ADDR_UNSPECIFIED(&a6);
    } else {
        h->bound_loopback = !strcasecmp(h->cfg.host, "localhost");
    }
    for (size_t i = 0; i < h->cfg.n_host_allow; i++)
        if (!strcmp(h->cfg.host_allow[i], "*"))
            h->any_host = 1;
}

int http_start(const struct srv_http_config *cfg, const struct srv_model_info *mi,
               struct srv_engine *engine, struct srv_http **out, char *err, size_t cap) {
    *out = NULL;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        snprintf(err, cap, "cannot resolve '%s': %s", cfg->host, gai_strerror(gai));
        return -1;
    }
    struct srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        snprintf(err, cap, "out of memory");
        return -1;
    }
    h->cfg = *cfg;
    h->mi = mi;
    h->engine = engine;
    classify_bound(h);
    if (pthread_mutex_init(&h->mu, NULL) != 0) {
        freeaddrinfo(ai);
        free(h);
        snprintf(err, cap, "cannot create a mutex");
        return -1;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_AUTO | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (cfg->verbose)
        flags |= MHD_USE_ERROR_LOG;
    h->daemon =
        MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, h,
                         MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED,
                         on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                         MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_conns, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->daemon) {
        snprintf(err, cap,
                 "cannot listen on %s port %d (in use, or not an address of this "
                 "machine?)",
                 cfg->host, cfg->port);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return -1;
    }
    atomic_init(&h->stopping, 0);
    if (pthread_create(&h->watchdog, NULL, watchdog_main, h) != 0) {
        snprintf(err, cap, "cannot start the watchdog thread");
        MHD_stop_daemon(h->daemon);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return -1;
    }
    h->watchdog_started = 1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : cfg->port;
    *out = h;
    return 0;
}

int http_port(const struct srv_http *h) {
    return h->port;
}

void http_quiesce(struct srv_http *h) {
    MHD_socket fd = MHD_quiesce_daemon(h->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

int http_drain(struct srv_http *h, int ms) {
    struct timespec step = {0, 20 * 1000000L};
    for (int waited = 0; atomic_load(&h->active) > 0 && waited < ms; waited += 20)
        nanosleep(&step, NULL);
    return atomic_load(&h->active);
}

void http_stop(struct srv_http *h) {
    if (!h)
        return;
    if (h->watchdog_started) {
        atomic_store(&h->stopping, 1);
        pthread_join(h->watchdog, NULL);
    }
    MHD_stop_daemon(h->daemon);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
