/* embeddings.c -- POST /v1/embeddings: OpenAI's request and response objects.
 *
 * Each input becomes one prompt-only job of the engine (engine.c): its tokens are
 * decoded from position 0 in a slot, batched with whatever else runs, without logits,
 * and the job's result is the sequence's pooled final hidden state, L2-normalised
 * (pi_ctx_embedding_pooled). Strings are tokenized as /v1/completions prompts are (the
 * model's BOS/EOS rules). dimensions other than the model's n_embd are refused: cutting
 * a vector short only means something for models trained for it (Matryoshka), which
 * the file does not say. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server.h"

#define MAX_INPUTS 2048 /* OpenAI's limit on inputs per request */

static const cJSON *get(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static void invalid(struct srv_error *err, const char *param, const char *msg) {
    srv_error_set(err, 400, "invalid_request_error", "invalid_value", param, "%s", msg);
}

/* The token ids of one input: a string (tokenized) or an array of ids. NULL with *err. */
static int32_t *input_tokens(const struct srv_model_info *mi, const cJSON *in, size_t index,
                             size_t *n_out, struct srv_error *err) {
    int32_t *toks = NULL;
    int64_t n = 0;
    if (cJSON_IsString(in)) {
        const size_t len = strlen(in->valuestring);
        n = len ? pi_tokenize(mi->model, in->valuestring, len, NULL, 0, PI_TOKENIZE_ADD_SPECIAL)
                : 0;
        if (n < 0) {
            srv_error_set(err, 500, "server_error", NULL, NULL, "Tokenizing failed: %s.",
                          pi_status_str((int)n));
            return NULL;
        }
        if (n > 0 && (toks = malloc((size_t)n * sizeof *toks)) != NULL)
            pi_tokenize(mi->model, in->valuestring, len, toks, (size_t)n,
                        PI_TOKENIZE_ADD_SPECIAL);
    } else if (cJSON_IsArray(in)) {
        const int64_t n_vocab = pi_model_n_vocab(mi->model);
        n = cJSON_GetArraySize(in);
        if (n > 0 && (toks = malloc((size_t)n * sizeof *toks)) != NULL) {
            size_t i = 0;
            const cJSON *t;
            cJSON_ArrayForEach(t, in) {
                const double x = cJSON_IsNumber(t) ? t->valuedouble : -1.0;
                if (!(x >= 0 && x < (double)n_vocab && x == floor(x))) {
                    free(toks);
                    srv_error_set(err, 400, "invalid_request_error", "invalid_value", "input",
                                  "Input %zu: token ids must be integers in [0, %lld).", index,
                                  (long long)n_vocab);
                    return NULL;
                }
                toks[i++] = (int32_t)x;
            }
        }
    } else {
        invalid(err, "input", "'input' must be a string, an array of strings, an array of "
                              "token ids, or an array of arrays of token ids.");
        return NULL;
    }
    if (n == 0) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", "input",
                      "Input %zu is empty; every input needs at least one token.", index);
        return NULL;
    }
    if (!toks) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return NULL;
    }
    if (n > mi->n_ctx) {
        free(toks);
        srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded", "input",
                      "Input %zu has %lld tokens; this server embeds at most %lld tokens per "
                      "input (its context per slot, -c).", index, (long long)n,
                      (long long)mi->n_ctx);
        return NULL;
    }
    *n_out = (size_t)n;
    return toks;
}

void api_embed_jobs_free(struct srv_job **jobs, size_t n) {
    if (!jobs)
        return;
    for (size_t i = 0; i < n; i++)
        if (jobs[i])
            job_free(jobs[i]);
    free(jobs);
}

struct srv_job **api_make_embed_jobs(const struct srv_model_info *mi, const cJSON *req,
                                     size_t *n_jobs, int *base64, struct srv_error *err) {
    const cJSON *model = get(req, "model");
    if (model && !cJSON_IsString(model)) {
        invalid(err, "model", "'model' must be a string.");
        return NULL;
    }
    const cJSON *fmt = get(req, "encoding_format");
    *base64 = 0;
    if (fmt) {
        if (!cJSON_IsString(fmt) ||
            (strcmp(fmt->valuestring, "float") && strcmp(fmt->valuestring, "base64"))) {
            invalid(err, "encoding_format", "'encoding_format' must be 'float' or 'base64'.");
            return NULL;
        }
        *base64 = !strcmp(fmt->valuestring, "base64");
    }
    const int64_t n_embd = pi_model_n_embd(mi->model);
    const cJSON *dim = get(req, "dimensions");
    if (dim && !(cJSON_IsNumber(dim) && dim->valuedouble == (double)n_embd)) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", "dimensions",
                      "This model's embeddings have %lld dimensions; 'dimensions' must be %lld "
                      "or absent.", (long long)n_embd, (long long)n_embd);
        return NULL;
    }
    const cJSON *input = get(req, "input");
    if (!input) {
        srv_error_set(err, 400, "invalid_request_error", "missing_required_parameter", "input",
                      "Missing required parameter: 'input'.");
        return NULL;
    }
    /* one input (a string or an array of ids), or an array of them */
    const int many = cJSON_IsArray(input) && input->child &&
                     (cJSON_IsString(input->child) || cJSON_IsArray(input->child));
    const size_t n = many ? (size_t)cJSON_GetArraySize(input) : 1;
    if (n > MAX_INPUTS) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", "input",
                      "'input' holds %zu inputs; at most %d per request.", n, MAX_INPUTS);
        return NULL;
    }
    if (cJSON_IsArray(input) && !input->child) {
        invalid(err, "input", "'input' is an empty array.");
        return NULL;
    }
    struct srv_job **jobs = calloc(n, sizeof *jobs);
    if (!jobs) {
        srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return NULL;
    }
    const cJSON *in = many ? input->child : input;
    for (size_t i = 0; i < n; i++, in = in ? in->next : NULL) {
        if (many && !cJSON_IsString(in) && !cJSON_IsArray(in)) {
            invalid(err, "input", "The inputs of an array 'input' must all be strings or all "
                                  "arrays of token ids.");
            api_embed_jobs_free(jobs, n);
            return NULL;
        }
        struct srv_job *job = job_create(1);
        if (job)
            job->embd = malloc((size_t)n_embd * sizeof *job->embd);
        if (!job || !job->embd) {
            if (job)
                job_free(job);
            api_embed_jobs_free(jobs, n);
            srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
            return NULL;
        }
        jobs[i] = job;
        job->embed = 1;
        job->logprobs = -1;
        job->prompt = input_tokens(mi, in, i, &job->n_prompt, err);
        if (!job->prompt) {
            api_embed_jobs_free(jobs, n);
            return NULL;
        }
    }
    *n_jobs = n;
    return jobs;
}

/* base64 (RFC 4648, padded) of n bytes */
static char *base64_of(const unsigned char *p, size_t n) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                           (i + 2 < n ? p[i + 2] : 0);
        *o++ = a[v >> 18 & 63];
        *o++ = a[v >> 12 & 63];
        *o++ = i + 1 < n ? a[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? a[v & 63] : '=';
    }
    *o = '\0';
    return s;
}

/* The vector as little-endian float32 bytes, base64 (what OpenAI's clients decode). */
static char *base64_floats(const float *v, size_t n) {
    unsigned char *b = malloc(n * 4 + 1);
    if (!b)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++)
            b[4 * i + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    char *s = base64_of(b, n * 4);
    free(b);
    return s;
}

char *api_embeddings_json(const struct srv_model_info *mi, struct srv_job *const *jobs, size_t n,
                          int base64) {
    const size_t n_embd = (size_t)pi_model_n_embd(mi->model);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    int64_t tokens = 0;
    int ok = data != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *d = cJSON_CreateObject();
        ok = d && cJSON_AddItemToArray(data, d);
        if (!ok)
            break;
        cJSON_AddStringToObject(d, "object", "embedding");
        cJSON_AddNumberToObject(d, "index", (double)i);
        if (base64) {
            char *s = base64_floats(jobs[i]->embd, n_embd);
            ok = s && cJSON_AddStringToObject(d, "embedding", s);
            free(s);
        } else { /* %.9g: the shortest text that reads back as the same float32 */
            struct srv_buf b = {0};
            for (size_t j = 0; ok && j < n_embd; j++)
                ok = buf_printf(&b, "%c%.9g", j ? ',' : '[', (double)jobs[i]->embd[j]) == 0;
            ok = ok && buf_append(&b, "]", 1) == 0 && cJSON_AddRawToObject(d, "embedding", b.data);
            buf_free(&b);
        }
        tokens += (int64_t)jobs[i]->n_prompt;
    }
    cJSON_AddStringToObject(root, "model", mi->name);
    cJSON *u = cJSON_AddObjectToObject(root, "usage");
    if (u) {
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)tokens);
        cJSON_AddNumberToObject(u, "total_tokens", (double)tokens);
    }
    char *s = ok && u ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}
