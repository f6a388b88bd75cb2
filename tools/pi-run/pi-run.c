/* pi-run -- the bundled command-line tool. Uses only the public header.
 *
 * Text generation from a prompt, and model inspection (--info). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "device.h"
#ifdef PI_HAVE_JSONSCHEMA
#include "jsonschema.h"
#endif
#include "powerinfer.h"
#include "telemetry.h"

const char cli_prog[] = "pi-run";

static void usage(FILE *out) {
    fprintf(out,
            "usage: pi-run -m MODEL.gguf -p PROMPT [options]     generate text\n"
            "       pi-run --info [--tensors] MODEL.gguf          describe a model\n"
            "\n"
            "  -m, --model FILE        model file (GGUF, or PowerInfer GGUF with magic PWRI)\n"
            "  -p, --prompt TEXT       prompt\n"
            "  -f, --file FILE         read the prompt from a file or a pipe (/dev/stdin);\n"
            "                          at most 64 MiB\n"
            "  -n, --n-predict N       tokens to generate (default 128; -1: until end of text\n"
            "                          or a full context; 0: only process the prompt)\n"
            "  -t, --threads N         worker threads (default: all processors)\n"
            "  -c, --ctx-size N        context positions (default: model's, at most 4096)\n"
            "  --context-shift         when the context is full, drop the older half of what\n"
            "                          follows the kept start and go on (attention then sees\n"
            "                          only the recent text); with -n -1, until end of text\n"
            "  --keep N                positions --context-shift keeps at the start (default:\n"
            "                          the BOS token if the prompt has one; -1: the whole\n"
            "                          prompt; at most half the context)\n"
            "  -b, --batch-size N      prompt tokens per step (default 256)\n"
            "  --temp T                temperature (default 0.8; 0: greedy)\n"
            "  --top-k N               (default 40; 0: off)\n"
            "  --top-p P               (default 0.95; 1: off)\n"
            "  --min-p P               (default 0.05; 0: off)\n"
            "  --repeat-penalty R      (default 1.0: off)\n"
            "  --repeat-last-n N       tokens the penalties look back (default 64)\n"
            "  --frequency-penalty F   (default 0)\n"
            "  --presence-penalty F    (default 0)\n"
            "  --seed N                sampling seed (default 0x5eed)\n"
            "  --chat                  wrap the prompt as a user message in the model's chat\n"
            "                          template (the format it is recognised as)\n"
            "  --chat-format F         as --chat, in format F, one of\n"
            "                          " CLI_CHAT_FORMAT_NAMES "\n"
            "  --system TEXT           system message for --chat\n"
            "  --grammar G             constrain the output to a GBNF grammar (start rule\n"
            "                          'root'): G is a file, or the grammar itself when it\n"
            "                          contains '::='\n"
            "  --json-schema S         constrain the output to JSON valid under a JSON schema\n"
            "                          (a file, or the schema itself when it starts with '{';\n"
            "                          what is supported: README, 'Constrained output')\n"
            "  --dump-logits FILE      write the float32 logits of the last prompt position\n"
            "  --embedding             print the prompt's pooled final hidden state (unit L2\n"
            "                          norm) as JSON and exit: {\"pooling\", \"n_tokens\",\n"
            "                          \"embedding\": [n_embd floats]}; the LM head is skipped\n"
            "  --pooling P             --embedding's pooling: mean, last or cls (first\n"
            "                          token); default: the file's pooling_type, else last\n"
            "  --sparse-mode M         FFN of PowerInfer models: sparse (default for them:\n"
            "                          predictor-driven), dense, oracle (exactly the neurons\n"
            "                          that fire), threshold (pi-sparsify files' default)\n"
            "  --sparse-threshold X    predictor threshold (default: the file's, else 0)\n"
            "  --stats                 print per-layer telemetry at the end: predicted-active\n"
            "                          ratio, weight bytes read per token, time split\n"
            "  --diagnostic            as --stats, also measuring predictor recall and\n"
            "                          precision against the true activations (slower)\n"
            "  --profile FILE          count per-neuron activity over the prompt (and the\n"
            "                          generated text) and write it as a statistics file\n"
            "  --check-numerics        check every layer's output for NaN/infinity, so that\n"
            "                          a failure names the layer and block (logits are\n"
            "                          always checked)\n");
    fputs("\n" CLI_DEVICE_USAGE
            "  --info                  print architecture, hyper-parameters, sparse or dense,\n"
            "                          metadata and the tensor table summary\n"
            "  --tensors               with --info: list every tensor\n",
          out);
    fputs(CLI_LOAD_USAGE
          "  -v, --verbose           log what the library does to stderr\n"
          "  --version               print the library version\n"
          "  -h, --help              this text\n",
          out);
}

static void human_bytes(uint64_t b, char *buf, size_t cap) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", v, units[u]);
}

static int is_long_array(const pi_model *m, const char *key) {
    int type, et;
    uint64_t n;
    if (pi_model_meta_type(m, key, &type, &et, &n) != PI_OK)
        return 0;
    return type == PI_META_ARRAY && n > 8;
}

/* `s` copied into buf[cap] for a terminal: control bytes (ESC, BEL, CR, ...) and DEL
 * become '?', tabs and line breaks a space, so that a file's strings cannot move the
 * cursor, retitle the window or forge lines. Returns buf. */
static const char *printable(const char *s, char *buf, size_t cap) {
    size_t n = 0;
    for (; s && *s && n + 1 < cap; s++) {
        const unsigned char ch = (unsigned char)*s;
        buf[n++] = ch == '\n' || ch == '\r' || ch == '\t' ? ' ' : ch < 0x20 || ch == 0x7f ? '?'
                                                                                        : *s;
    }
    buf[n] = 0;
    return buf;
}

static void print_meta(const pi_model *m) {
    int64_t n = pi_model_meta_count(m);
    printf("metadata (%" PRId64 " keys):\n", n);
    for (int64_t i = 0; i < n; i++) {
        const char *key = pi_model_meta_key(m, i);
        char small[160];
        uint32_t items = is_long_array(m, key) ? 4 : 8;
        int64_t len = pi_model_meta_to_string(m, key, items, small, sizeof small);
        if (len < 0)
            continue;
        /* one line per key: long values cut, control bytes neutralised */
        char k[128], v[sizeof small];
        printf("  %-44s %s%s\n", printable(key, k, sizeof k), printable(small, v, sizeof v),
               (size_t)len >= sizeof small ? " ..." : "");
    }
}

struct type_sum {
    uint64_t count, bytes, elems;
};

static void print_tensors(const pi_model *m, int list_all) {
    struct type_sum sums[64];
    memset(sums, 0, sizeof sums);
    int64_t n = pi_model_n_tensors(m);
    if (list_all)
        printf("tensors:\n");
    for (int64_t i = 0; i < n; i++) {
        int type = pi_model_tensor_type(m, i);
        int nd;
        int64_t d[4];
        pi_model_tensor_shape(m, i, &nd, d);
        uint64_t bytes = pi_model_tensor_nbytes(m, i);
        if (type >= 0 && type < 64) {
            sums[type].count++;
            sums[type].bytes += bytes;
            sums[type].elems += (uint64_t)(d[0] * d[1] * d[2] * d[3]);
        }
        if (list_all) {
            char shape[96];
            int at = snprintf(shape, sizeof shape, "{%" PRId64, d[0]);
            for (int k = 1; k < nd; k++)
                at += snprintf(shape + at, sizeof shape - (size_t)at, ", %" PRId64, d[k]);
            snprintf(shape + at, sizeof shape - (size_t)at, "}");
            const char *tn = pi_type_name(type);
            char name[128];
            printf("  %-36s %-8s %-22s %12" PRIu64 " B\n",
                   printable(pi_model_tensor_name(m, i), name, sizeof name), tn ? tn : "?",
                   shape, bytes);
        }
    }
    char hb[32];
    human_bytes(pi_model_size_bytes(m), hb, sizeof hb);
    printf("tensor types (%" PRId64 " tensors, %s, %" PRIu64 " weights):\n", n, hb,
           pi_model_n_params(m));
    for (int t = 0; t < 64; t++) {
        if (!sums[t].count)
            continue;
        human_bytes(sums[t].bytes, hb, sizeof hb);
        printf("  %-8s %5" PRIu64 " tensors  %12s  %6.3f bits/weight\n", pi_type_name(t),
               sums[t].count, hb,
               sums[t].elems ? 8.0 * (double)sums[t].bytes / (double)sums[t].elems : 0.0);
    }
}

static void print_hparams(const pi_model *m) {
    printf("kind:           %s\n", pi_model_is_sparse(m)
                                       ? "sparse (PowerInfer GGUF, magic PWRI, with predictors)"
                                       : "dense (GGUF)");
    printf("n_layer:        %" PRId64 "\n", pi_model_n_layer(m));
    printf("n_embd:         %" PRId64 "\n", pi_model_n_embd(m));
    printf("n_ff:           %" PRId64 "\n", pi_model_n_ff(m));
    printf("n_head:         %" PRId64 "\n", pi_model_n_head(m));
    printf("n_head_kv:      %" PRId64 "\n", pi_model_n_head_kv(m));
    printf("n_vocab:        %" PRId64 "\n", pi_model_n_vocab(m));
    printf("n_ctx_train:    %" PRId64 "\n", pi_model_n_ctx_train(m));
    if (pi_model_is_sparse(m)) {
        int64_t lo = INT64_MAX, hi = 0;
        for (int64_t l = 0; l < pi_model_n_layer(m); l++) {
            int64_t r = pi_model_predictor_rank(m, l);
            lo = r < lo ? r : lo;
            hi = r > hi ? r : hi;
        }
        printf("predictor rank: %" PRId64 "..%" PRId64 "\n", lo, hi);
        printf("threshold:      %g\n", (double)pi_model_sparse_threshold(m));
    }
}

static int info(const char *path, int list_tensors, int verbose) {
    char errbuf[512] = "";
    pi_model_params p;
    cli_model_params(&p, errbuf, sizeof errbuf, verbose);
    pi_model *m = NULL;
    int st = pi_model_open(path, &p, &m);
    int runnable = st == PI_OK;
    char why[512] = "";
    if (st == PI_ERR_UNSUPPORTED) {
        /* Still describe what the file holds. */
        snprintf(why, sizeof why, "%s", errbuf);
        p.metadata_only = 1;
        st = pi_model_open(path, &p, &m);
    }
    if (st != PI_OK) {
        fprintf(stderr, "pi-run: %s (%s)\n", errbuf, pi_status_str(st));
        return 1;
    }
    char name[128] = "", shown[128], why_shown[512];
    pi_model_meta_str(m, "general.name", name, sizeof name);
    printf("file:           %s\n", path);
    printf("name:           %s\n", name[0] ? printable(name, shown, sizeof shown) : "(none)");
    printf("architecture:   %s\n",
           pi_model_arch(m)[0] ? printable(pi_model_arch(m), shown, sizeof shown) : "(none)");
    if (runnable)
        print_hparams(m);
    else
        printf("runnable:       no: %s\n", printable(why, why_shown, sizeof why_shown));
    print_tensors(m, list_tensors);
    print_meta(m);
    pi_model_close(m);
    return 0;
}

struct opts {
    const char *model, *prompt, *prompt_file, *system, *dump_logits, *profile;
    const char *grammar, *json_schema; /* --grammar, --json-schema: file or text */
    int info, tensors, verbose, chat, chat_format, stats;
    int embedding, pooling; /* --embedding; --pooling PI_POOL_*, or -1: the file's */
    long n_predict;
    /* --context-shift: on a full context, keep the first n_keep positions (-1: the BOS
     * token when the prompt starts with one) and drop the older half of the rest */
    int context_shift;
    long n_keep;
    /* hybrid execution */
    struct cli_device dev;
    pi_ctx_params cp;
    pi_sampler_params sp;
};

static int emit(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* --grammar / --json-schema: the value is a file, or the text itself (a grammar with
 * "::=", a schema starting with '{'). Returns 0, or 1 after printing why. */
static int make_grammar(const struct opts *o, const pi_model *m, pi_grammar **out) {
    const int schema = o->json_schema != NULL;
    const char *v = schema ? o->json_schema : o->grammar;
    const char *opt = schema ? "--json-schema" : "--grammar";
    if (o->json_schema && o->grammar) {
        fprintf(stderr, "pi-run: --grammar and --json-schema cannot be combined\n");
        return 1;
    }
    size_t len = strlen(v);
    char *text;
    if (schema ? v[0] == '{' : strstr(v, "::=") != NULL) {
        if ((text = malloc(len + 1)) != NULL)
            memcpy(text, v, len + 1);
    } else {
        text = cli_read_file(v, &len);
    }
    if (!text)
        return 1; /* cli_read_file said why */
    char *gbnf = text;
#ifdef PI_HAVE_JSONSCHEMA
    if (schema) {
        cJSON *js = cJSON_Parse(text);
        char err[256];
        gbnf = js ? json_schema_to_gbnf(js, err, sizeof err) : NULL;
        if (!js)
            snprintf(err, sizeof err, "not JSON");
        cJSON_Delete(js);
        free(text);
        if (!gbnf) {
            fprintf(stderr, "pi-run: %s: %s\n", opt, err);
            return 1;
        }
    }
#else
    if (schema) {
        fprintf(stderr, "pi-run: --json-schema needs cJSON, which this build lacks\n");
        free(text);
        return 1;
    }
#endif
    char err[256];
    int st = pi_grammar_create(m, gbnf, strlen(gbnf), NULL, out, err, sizeof err);
    free(gbnf);
    if (st != PI_OK) {
        fprintf(stderr, "pi-run: %s: %s\n", opt, err);
        return 1;
    }
    return 0;
}

/* Tokenize, decode the prompt, then sample and stream the continuation. */
/* --embedding: decode the prompt and print its pooled state as one JSON object. */
static int print_embedding(struct opts *o, pi_model *m, pi_ctx *ctx, const int32_t *toks,
                           int64_t nt) {
    const int pool = cli_pooling_of(m, o->pooling);
    int st = pi_ctx_decode(ctx, toks, (size_t)nt);
    if (st != PI_OK)
        return cli_fail("cannot process the prompt", st, pi_ctx_errmsg(ctx));
    const size_t n = (size_t)pi_model_n_embd(m);
    float *v = malloc(n * sizeof *v);
    if (!v) {
        fprintf(stderr, "pi-run: out of memory\n");
        return 1;
    }
    st = pi_ctx_embedding_pooled(ctx, 0, pool, 1, v, n);
    if (st != PI_OK) {
        free(v);
        return cli_fail("cannot pool the hidden states", st, pi_ctx_errmsg(ctx));
    }
    printf("{\"pooling\": \"%s\", \"n_tokens\": %lld, \"embedding\": [",
           pool == PI_POOL_MEAN ? "mean" : pool == PI_POOL_CLS ? "cls" : "last", (long long)nt);
    for (size_t i = 0; i < n; i++)
        printf("%s%.9g", i ? ", " : "", (double)v[i]); /* reads back as the same float32 */
    printf("]}\n");
    free(v);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* A growing text for the template's JSON data; the js_* functions return -1 when out of
 * memory. */
struct jsbuf {
    char *p;
    size_t n, cap;
};

static int js_put(struct jsbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

static int js_puts(struct jsbuf *b, const char *s) {
    return js_put(b, s, strlen(s));
}

static int js_string(struct jsbuf *b, const char *s) {
    if (js_put(b, "\"", 1))
        return -1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char t[8];
        if (c == '"' || c == '\\') {
            t[0] = '\\';
            t[1] = (char)c;
            if (js_put(b, t, 2))
                return -1;
        } else if (c < 0x20) {
            snprintf(t, sizeof t, "\\u%04x", c);
            if (js_put(b, t, 6))
                return -1;
        } else if (js_put(b, s, 1)) {
            return -1;
        }
    }
    return js_put(b, "\"", 1);
}

/* Does tokenizing with PI_TOKENIZE_ADD_SPECIAL put the BOS token first? */
static int adds_bos(const pi_model *m) {
    int32_t t[4];
    int32_t bos = pi_model_token_bos(m);
    return bos >= 0 && pi_tokenize(m, "", 0, t, 4, PI_TOKENIZE_ADD_SPECIAL) >= 1 && t[0] == bos;
}

/* The chat prompt from the model's own template, executed with the current time for
 * strftime_now. Returns its length with *out set (malloc'd; a BOS text the template
 * writes first left out when tokenizing adds it), a negative status when the template
 * refuses the messages (its message printed), or 1 with *out NULL when the model has
 * no template it can execute (then a built-in format is used). */
static int64_t template_chat(const pi_model *m, const pi_chat_message *msgs, size_t n,
                             char **out) {
    *out = NULL;
    pi_chat_template *t;
    char err[512];
    if (pi_chat_template_create(m, NULL, &t, err, sizeof err) != PI_OK)
        return 1;
    struct jsbuf b = {0};
    int bad = js_puts(&b, "{\"add_generation_prompt\": true, \"messages\": [");
    for (size_t i = 0; i < n && !bad; i++) {
        bad |= js_puts(&b, i ? ", {\"role\": " : "{\"role\": ");
        bad |= js_string(&b, msgs[i].role);
        bad |= js_puts(&b, ", \"content\": ");
        bad |= js_string(&b, msgs[i].content);
        bad |= js_puts(&b, "}");
    }
    bad |= js_puts(&b, "]}");
    int64_t now = (int64_t)time(NULL), len = PI_ERR_NOMEM;
    if (!bad)
        len = pi_chat_template_render(t, b.p, now, NULL, 0, err, sizeof err);
    if (len >= 0) {
        *out = malloc((size_t)len + 1);
        if (!*out)
            len = PI_ERR_NOMEM;
        else
            pi_chat_template_render(t, b.p, now, *out, (size_t)len + 1, NULL, 0);
    } else if (!bad) {
        fprintf(stderr, "pi-run: the chat template: %s\n", err);
    }
    if (*out && adds_bos(m)) {
        char bos[64];
        int32_t id = pi_model_token_bos(m);
        int64_t bl = pi_token_to_piece(m, id, bos, sizeof bos, PI_PIECE_SPECIAL);
        if (bl > 0 && (size_t)bl < sizeof bos && len >= bl && !memcmp(*out, bos, (size_t)bl)) {
            memmove(*out, *out + bl, (size_t)(len - bl) + 1);
            len -= bl;
        }
    }
    free(b.p);
    pi_chat_template_destroy(t);
    return len;
}

static int generate(struct opts *o) {
    const double t0 = cli_now_s();
    pi_model *m = NULL;
    if (cli_model_open(o->model, o->verbose, &m))
        return 1;
    const double load_ms = (cli_now_s() - t0) * 1e3;

    size_t plen = 0;
    char *ptext = NULL;
    if (o->prompt_file) {
        ptext = cli_read_file(o->prompt_file, &plen);
        if (!ptext) {
            pi_model_close(m);
            if (errno == EFBIG)
                fprintf(stderr, "pi-run: '%s' holds more than %zu MiB, the limit for a "
                        "prompt file\n", o->prompt_file, CLI_READ_MAX >> 20);
            else
                fprintf(stderr, "pi-run: cannot read '%s': %s\n", o->prompt_file,
                        strerror(errno));
            return 1;
        }
    } else {
        plen = strlen(o->prompt);
        ptext = malloc(plen + 1);
        if (ptext)
            memcpy(ptext, o->prompt, plen + 1);
    }
    uint32_t tflags = PI_TOKENIZE_ADD_SPECIAL;
    if (ptext && o->chat) {
        pi_chat_message msgs[2];
        size_t n = 0;
        if (o->system)
            msgs[n++] = (pi_chat_message){"system", o->system};
        msgs[n++] = (pi_chat_message){"user", ptext};
        char *chat = NULL;
        int64_t need = o->chat_format == PI_CHAT_AUTO ? template_chat(m, msgs, n, &chat) : 1;
        if (need == 1 && !chat) {
            /* a built-in format: asked for, or the template cannot be executed */
            need = pi_chat_apply(m, o->chat_format, msgs, n, 1, NULL, 0);
            if (need >= 0) {
                chat = malloc((size_t)need + 1);
                if (chat)
                    pi_chat_apply(m, o->chat_format, msgs, n, 1, chat, (size_t)need + 1);
            }
        }
        if (need < 0) {
            free(ptext);
            pi_model_close(m);
            return cli_fail(o->chat_format == PI_CHAT_AUTO
                                ? "--chat: the model's chat template (--chat-format names one)"
                                : "--chat-format",
                            (int)need, NULL);
        }
        free(ptext);
        ptext = chat;
        plen = (size_t)need;
        tflags |= PI_TOKENIZE_PARSE_SPECIAL;
    }
    int rc = 1, st;
    int32_t *toks = NULL;
    pi_ctx *ctx = NULL;
    pi_sampler *smp = NULL;
    pi_detok *dt = NULL;
    pi_grammar *gram = NULL;
    float *row = NULL;
    if (!ptext) {
        fprintf(stderr, "pi-run: out of memory\n");
        goto done;
    }
    int64_t nt = pi_tokenize(m, ptext, plen, NULL, 0, tflags);
    if (nt < 0) {
        cli_fail("cannot tokenize the prompt", (int)nt, NULL);
        goto done;
    }
    if (nt == 0) {
        fprintf(stderr, "pi-run: the prompt is empty\n");
        goto done;
    }
    toks = malloc((size_t)nt * sizeof *toks);
    if (!toks)
        goto done;
    pi_tokenize(m, ptext, plen, toks, (size_t)nt, tflags);

    pi_ctx_params cp = o->cp;
    if (o->embedding)
        cp.embeddings = PI_EMBD_ONLY;
    if (o->profile && cp.stats == PI_STATS_OFF)
        cp.stats = pi_model_is_sparse(m) ? PI_STATS_DIAGNOSTIC : PI_STATS_ON;
    {
        if (cli_device_params(&o->dev, o->model, &cp) != 0)
            goto done;
        const int failed = cli_ctx_create(m, &cp, &ctx);
        cli_device_release(&o->dev); /* the statistics: borrowed for the call only */
        cp.plan_stats = NULL;
        if (failed)
            goto done;
    }
    if (cli_device_report(&o->dev, ctx, &cp) != 0)
        goto done;
    {
        int mode = pi_ctx_sparse_mode(ctx);
        if (pi_model_is_sparse(m) || mode == PI_SPARSE_THRESHOLD || o->verbose)
            fprintf(stderr, "pi-run: %s model, %s FFN%s", pi_model_is_sparse(m) ? "PowerInfer" : "dense",
                    mode == PI_SPARSE_PREDICTOR ? "sparse (predictor-driven)"
                    : mode == PI_SPARSE_ORACLE  ? "sparse (oracle: exactly the neurons that fire)"
                    : mode == PI_SPARSE_THRESHOLD
                        ? (pi_ctx_sparse_threshold_source(ctx) == PI_THRESHOLDS_FILE
                               ? "thresholded (the file's per-layer thresholds)"
                               : "thresholded (per-layer thresholds given)")
                        : "dense",
                    mode == PI_SPARSE_PREDICTOR ? "" : "\n");
        if (mode == PI_SPARSE_PREDICTOR)
            fprintf(stderr, ", threshold %g\n", (double)pi_ctx_sparse_threshold(ctx));
    }
    if (o->embedding) {
        rc = print_embedding(o, m, ctx, toks, nt);
        goto done;
    }
    if ((st = pi_sampler_create(m, &o->sp, &smp)) != PI_OK) {
        cli_fail("cannot create the sampler", st, NULL);
        goto done;
    }
    if ((st = pi_detok_create(m, 0, &dt)) != PI_OK) {
        cli_fail("cannot create the detokenizer", st, NULL);
        goto done;
    }
    if ((o->grammar || o->json_schema) && make_grammar(o, m, &gram) != 0)
        goto done;
    if (gram && !(row = malloc((size_t)pi_model_n_vocab(m) * sizeof *row))) {
        fprintf(stderr, "pi-run: out of memory\n");
        goto done;
    }
    if (!o->chat) {
        fwrite(ptext, 1, plen, stdout);
        fflush(stdout);
    }
    const double tp = cli_now_s();
    if ((st = pi_ctx_decode(ctx, toks, (size_t)nt)) != PI_OK) {
        cli_fail("cannot process the prompt", st, pi_ctx_errmsg(ctx));
        goto done;
    }
    const double prompt_ms = (cli_now_s() - tp) * 1e3;
    for (int64_t i = 0; i < nt; i++)
        pi_sampler_accept(smp, toks[i]);
    if (o->dump_logits) {
        FILE *fp = cli_fopen(o->dump_logits, "wb");
        size_t nv = (size_t)pi_model_n_vocab(m);
        if (!fp || fwrite(pi_ctx_logits(ctx), sizeof(float), nv, fp) != nv) {
            fprintf(stderr, "pi-run: cannot write '%s'\n", o->dump_logits);
            if (fp)
                fclose(fp);
            goto done;
        }
        fclose(fp);
    }
    long n_gen = 0, n_shifts = 0;
    const int64_t n_ctx = pi_ctx_n_ctx(ctx);
    long limit = o->n_predict >= 0 ? o->n_predict
                 : o->context_shift ? LONG_MAX
                                    : (long)(n_ctx - nt);
    /* what a shift keeps: at least 0, and at most half the context, so that each shift
     * frees at least a quarter of it */
    int64_t keep = o->n_keep >= 0                                         ? o->n_keep
                   : o->n_keep == -2 && toks[0] == pi_model_token_bos(m) ? 1
                   : o->n_keep == -2                                      ? 0
                                                                          : nt;
    if (keep > n_ctx / 2)
        keep = n_ctx / 2;
    int full = 0;
    const double tg = cli_now_s();
    while (n_gen < limit) {
        int32_t tok;
        if (gram) { /* the logits with every token the grammar refuses at -infinity */
            const int64_t nv = pi_model_n_vocab(m);
            memcpy(row, pi_ctx_logits(ctx), (size_t)nv * sizeof *row);
            int64_t allowed = pi_grammar_mask(gram, row, nv);
            if (allowed <= 0) {
                cli_fail("no token can continue the grammar", allowed ? (int)allowed : PI_ERR_RANGE,
                         allowed ? pi_grammar_errmsg(gram) : NULL);
                goto done;
            }
            st = pi_sample_logits(smp, row, nv, &tok);
        } else {
            st = pi_sample(smp, ctx, &tok);
        }
        if (st != PI_OK) {
            cli_fail("sampling failed", st, NULL);
            goto done;
        }
        if (pi_model_token_is_eog(m, tok))
            break;
        if (gram && (st = pi_grammar_accept(gram, tok)) != PI_OK) {
            cli_fail("the grammar refused a token it allowed", st, pi_grammar_errmsg(gram));
            goto done;
        }
        pi_detok_push(dt, tok, emit, NULL);
        n_gen++;
        if (pi_ctx_pos(ctx) >= n_ctx) {
            if (!o->context_shift) {
                full = 1;
                break;
            }
            const int64_t drop = (n_ctx - keep) / 2;
            if ((st = pi_ctx_seq_remove(ctx, 0, keep, keep + drop)) != PI_OK) {
                cli_fail("context shift failed", st, pi_ctx_errmsg(ctx));
                goto done;
            }
            n_shifts++;
        }
        if ((st = pi_ctx_decode(ctx, &tok, 1)) != PI_OK) {
            cli_fail("decode failed", st, pi_ctx_errmsg(ctx));
            goto done;
        }
    }
    const double gen_ms = (cli_now_s() - tg) * 1e3;
    pi_detok_flush(dt, emit, NULL);
    printf("\n");
    fflush(stdout);
    if (full)
        fprintf(stderr,
                "pi-run: the context is full (%lld positions): generation stopped; -c sets a "
                "larger one, --context-shift goes on past it\n",
                (long long)n_ctx);
    if (n_shifts)
        fprintf(stderr,
                "pi-run: %ld context shift%s (kept the first %lld positions, dropped %lld "
                "each time)\n",
                n_shifts, n_shifts == 1 ? "" : "s", (long long)keep,
                (long long)((n_ctx - keep) / 2));
    fprintf(stderr,
            "pi-run: load %.0f ms | prompt %lld tokens, %.1f ms, %.2f tok/s | generated %ld "
            "tokens, %.1f ms, %.2f tok/s | %u threads\n",
            load_ms, (long long)nt, prompt_ms, prompt_ms > 0 ? 1e3 * (double)nt / prompt_ms : 0.0,
            n_gen, gen_ms, gen_ms > 0 ? 1e3 * (double)n_gen / gen_ms : 0.0,
            pi_ctx_n_threads(ctx));
    if (pi_ctx_stats(ctx) && (o->stats || o->verbose))
        tele_print(stderr, pi_ctx_stats(ctx), tele_dense_bytes(m));
    if (o->profile) {
        char eb[512] = "";
        if ((st = pi_stats_save(pi_ctx_stats(ctx), o->profile, eb, sizeof eb)) != PI_OK) {
            cli_fail("cannot write the statistics", st, eb);
            goto done;
        }
        fprintf(stderr, "pi-run: wrote activation statistics of %lld positions to %s\n",
                (long long)pi_ctx_pos(ctx), o->profile);
    }
    rc = 0;
done:
    pi_grammar_destroy(gram);
    free(row);
    pi_detok_destroy(dt);
    pi_sampler_destroy(smp);
    pi_ctx_destroy(ctx);
    free(toks);
    free(ptext);
    pi_model_close(m);
    return rc;
}

int main(int argc, char **argv) {
    cli_init(&argc, &argv);
    struct opts o;
    memset(&o, 0, sizeof o);
    cli_device_init(&o.dev);
    o.n_predict = 128;
    o.n_keep = -2;
    o.pooling = -1;
    pi_ctx_default_params(&o.cp);
    pi_sampler_default_params(&o.sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        int takes = 1, r;
#define IS(s) (!strcmp(a, s))
        if (IS("--info")) {
            o.info = 1;
            takes = 0;
        } else if (IS("--tensors")) {
            o.tensors = 1;
            takes = 0;
        } else if (IS("--context-shift")) {
            o.context_shift = 1;
            takes = 0;
        } else if (IS("--chat")) {
            o.chat = 1;
            takes = 0;
        } else if (IS("--stats")) {
            o.stats = 1;
            if (o.cp.stats == PI_STATS_OFF)
                o.cp.stats = PI_STATS_ON;
            takes = 0;
        } else if (IS("--diagnostic")) {
            o.stats = 1;
            o.cp.stats = PI_STATS_DIAGNOSTIC;
            takes = 0;
        } else if (IS("--embedding")) {
            o.embedding = 1;
            takes = 0;
        } else if (IS("--pooling")) {
            o.pooling = cli_pooling(v);
            if (o.pooling == -2)
                return 2;
        } else if (IS("--check-numerics")) {
            o.cp.check_numerics = PI_CHECK_LAYERS;
            takes = 0;
        } else if ((r = cli_device_option(&o.dev, a, v, &takes)) >= 0) {
            if (r)
                return r;
        } else if ((r = cli_common_option(a, v, usage, &o.verbose)) >= 0) {
            return r;
        } else if (r == CLI_OPT_TAKEN) {
            takes = 0;
        } else if (IS("-m") || IS("--model")) {
            o.model = v;
        } else if (IS("-p") || IS("--prompt")) {
            o.prompt = v;
        } else if (IS("-f") || IS("--file")) {
            o.prompt_file = v;
        } else if (IS("--chat-format")) {
            o.chat_format = cli_chat_format("--chat-format", v);
            if (o.chat_format < 0)
                return 2;
            o.chat = 1;
        } else if (IS("--system")) {
            o.system = v;
        } else if (IS("--grammar")) {
            o.grammar = v;
        } else if (IS("--json-schema")) {
            o.json_schema = v;
        } else if (IS("--dump-logits")) {
            o.dump_logits = v;
        } else if (IS("--profile")) {
            o.profile = v;
        } else if (IS("--sparse-mode")) {
            const int mode = cli_sparse_mode(a, v);
            if (mode < 0)
                return 2;
            o.cp.sparse_mode = (uint32_t)mode;
        } else if (IS("--sparse-threshold")) {
            if (cli_parse_float(a, v, -INFINITY, INFINITY, &o.cp.sparse_threshold))
                return 2;
            o.cp.sparse_threshold_set = 1;
        } else if (IS("-n") || IS("--n-predict")) {
            if (cli_parse_long(a, v, 0, -1, 1 << 30, &o.n_predict))
                return 2;
        } else if (IS("-t") || IS("--threads")) {
            if (cli_parse_long(a, v, 0, 0, 512, &n))
                return 2;
            o.cp.n_threads = (uint32_t)n;
        } else if (IS("--keep")) {
            if (cli_parse_long(a, v, 0, -1, 1 << 20, &o.n_keep))
                return 2;
        } else if (IS("-c") || IS("--ctx-size")) {
            if (cli_parse_long(a, v, 0, 0, 1 << 20, &n))
                return 2;
            o.cp.n_ctx = (uint32_t)n;
        } else if (IS("-b") || IS("--batch-size")) {
            if (cli_parse_long(a, v, 0, 1, 1 << 16, &n))
                return 2;
            o.cp.n_batch = (uint32_t)n;
        } else if (IS("--top-k")) {
            if (cli_parse_long(a, v, 0, 0, 1 << 30, &n))
                return 2;
            o.sp.top_k = (int32_t)n;
        } else if (IS("--repeat-last-n")) {
            if (cli_parse_long(a, v, 0, 0, 1 << 20, &n))
                return 2;
            o.sp.penalty_last_n = (int32_t)n;
        } else if (IS("--seed")) {
            char *end;
            o.sp.seed = strtoull(v, &end, 0);
            if (*end) {
                fprintf(stderr, "pi-run: --seed wants an integer, not '%s'\n", v);
                return 2;
            }
        } else if (IS("--temp") || IS("--top-p") || IS("--min-p") || IS("--repeat-penalty") ||
                   IS("--frequency-penalty") || IS("--presence-penalty")) {
            float *f = IS("--temp")             ? &o.sp.temperature
                       : IS("--top-p")          ? &o.sp.top_p
                       : IS("--min-p")          ? &o.sp.min_p
                       : IS("--repeat-penalty") ? &o.sp.repeat_penalty
                       : IS("--frequency-penalty") ? &o.sp.frequency_penalty
                                                   : &o.sp.presence_penalty;
            if (cli_parse_float(a, v, -INFINITY, INFINITY, f))
                return 2;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "pi-run: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!o.model) {
            o.model = a;
            takes = 0;
        } else {
            fprintf(stderr, "pi-run: unexpected argument '%s'\n", a);
            return 2;
        }
#undef IS
        i += takes;
    }
    if (!o.model) {
        usage(stderr);
        return 2;
    }
    if (o.info)
        return info(o.model, o.tensors, o.verbose);
    if (cli_device_check(&o.dev))
        return 2;
    int rc;
    if (o.dev.dry_run) {
        rc = cli_device_dry_run(&o.dev, o.model, &o.cp, o.verbose);
    } else if (!o.prompt && !o.prompt_file) {
        fprintf(stderr, "pi-run: give a prompt with -p or -f (or --info to describe the model, "
                        "or --dry-run to print a plan)\n");
        rc = 2;
    } else {
        rc = generate(&o);
    }
    cli_device_free(&o.dev);
    return rc;
}
