/* engine.c -- slots, the request queue and continuous batching.
 *
 * One context holds n_slots sequences; slot i is sequence i. A job with n choices
 * takes n slots at once (first come, first served: a job that does not fit waits,
 * and so does everything queued behind it, so big jobs cannot starve). Its prompt is
 * decoded once, in the first ("leading") slot, then copied into the others
 * (pi_ctx_seq_copy), and every choice goes on with its own sampler.
 *
 * Prompt cache: a slot given back keeps its sequence, and the tokens it holds. A new job
 * leads from the free slot whose tokens share the longest prefix with its prompt (the
 * least recently used among equals) and decodes only the rest: the next turn of a chat
 * reads just the new messages. At least the prompt's last token is decoded again, for
 * its logits. The other choices of a job take the least recently used free slots.
 *
 * Each step of the inference thread builds one batch: the pending token of every
 * generating slot, then prompt tokens of the slots still reading their prompt, up to
 * n_batch tokens in all; decodes it with one pi_ctx_decode_batch; samples each slot's
 * next token from its own row of logits; and appends the text to the job, waking the
 * connection that streams it. Generating slots never wait behind a long prompt for
 * more than one step of n_batch tokens.
 *
 * Locking: one mutex guards the queue, the slots and the guarded fields of every job.
 * The inference thread holds it except while decoding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

enum { SLOT_FREE = 0, SLOT_PROMPT, SLOT_WAIT, SLOT_GEN };

struct slot {
    int32_t seq;
    int phase;           /* SLOT_* */
    struct srv_job *job; /* NULL when free */
    int choice;          /* index into job->choices */
    size_t n_done;       /* prompt tokens decoded (leading slot) */
    size_t n_taken;      /* prompt tokens in the batch being decoded */
    size_t taken_at;     /* batch entry of the first of them */
    int32_t pending;     /* sampled, to be decoded in the next step (SLOT_GEN) */
    int64_t logits_at;   /* batch entry whose logits this slot samples from, or -1 */
    pi_sampler *smp;     /* the choice's own, made when the slot is taken */
    pi_detok *detok;
    pi_detok *detok_sp; /* with control tokens' text: for answers that may call tools
                         * ("[TOOL_CALLS]", "<|python_tag|>" are control tokens) */
    /* the tokens the sequence holds (prompt cache), [n_ctx]; written by the engine's
     * thread only, with the mutex held */
    int32_t *toks;
    size_t n_toks;
    int trim;           /* leading slot: cut the sequence to n_done before the next batch */
    size_t exact;       /* toks[0..exact) match the cache exactly (a shift cuts it) */
    uint64_t last_used; /* engine step it was last given back at */
    struct jm_state jm; /* response_format json_object: the text so far */
    pi_grammar *gram;   /* the job's grammar, this choice's clone (NULL: none) */
    float *row;         /* [n_vocab]: logits with logit_bias and the JSON or grammar mask */
};

struct srv_engine {
    pi_ctx *ctx;
    const pi_model *model;
    int64_t n_ctx, n_vocab;
    struct srv_engine_config cfg;
    struct slot *slots;
    pi_batch_entry *batch; /* [n_batch + n_slots] */
    /* every token's piece (pieces + piece_at[t], piece_at[t+1] - piece_at[t] bytes) and
     * whether it ends generation: what the JSON mask tries */
    char *pieces;
    size_t *piece_at;
    unsigned char *eog;

    pthread_mutex_t mu;
    pthread_cond_t wake; /* new work or stop */
    struct srv_job *q_head, *q_tail;
    uint32_t q_len;
    int stopping, started;
    pthread_t thread;
    uint64_t requests, tokens, steps;
    uint64_t prompt_tokens, prompt_cached, decoded, failed, shifts; /* for /metrics */
    double decode_s;
};

/* ---- jobs --------------------------------------------------------------------------- */

struct srv_job *job_create(int n) {
    struct srv_job *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    job->choices = calloc((size_t)n, sizeof *job->choices);
    if (!job->choices || pthread_cond_init(&job->cond, NULL) != 0) {
        free(job->choices);
        free(job);
        return NULL;
    }
    job->n = n;
    job->refs = 1;
    return job;
}

void job_free(struct srv_job *job) {
    for (int i = 0; i < job->n; i++) {
        buf_free(&job->choices[i].text);
        free(job->choices[i].lp);
        tc_result_free(&job->choices[i].calls);
    }
    free(job->prompt_lp);
    free(job->embd);
    free(job->prompt_text);
    pi_grammar_destroy(job->grammar);
    free(job->bias_id);
    free(job->bias);
    for (size_t i = 0; i < job->n_stop; i++)
        free(job->stop[i]);
    free(job->choices);
    free(job->prompt);
    pthread_cond_destroy(&job->cond);
    free(job);
}

static void job_unref_locked(struct srv_job *job) {
    if (--job->refs == 0)
        job_free(job);
}

/* ---- slots -------------------------------------------------------------------------- */

static pi_detok *detok_of(const struct slot *s) {
    return s->job && s->job->tool_syntax ? s->detok_sp : s->detok;
}

static int discard_text(void *user, const char *text, size_t len) {
    (void)user;
    (void)text;
    (void)len;
    return 0;
}

static int append_text(void *user, const char *text, size_t len) {
    return buf_append(user, text, len) != 0;
}

static uint32_t free_slots(const struct srv_engine *e) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->cfg.n_slots; i++)
        n += e->slots[i].phase == SLOT_FREE;
    return n;
}

static void job_done_locked(struct srv_engine *e, struct srv_job *job) {
    (void)e;
    job->state = SRV_JOB_DONE;
    pthread_cond_broadcast(&job->cond);
    job_unref_locked(job); /* the engine's reference */
}

/* Give the slot back: its detokenizer reset, its sequence kept for the prompt cache
 * (cleared when the cache is off or the job failed). The job is done when its last slot
 * goes. */
static void release_slot(struct srv_engine *e, struct slot *s) {
    struct srv_job *job = s->job;
    if (!e->cfg.prompt_cache || (job && job->error[0])) {
        pi_ctx_seq_clear(e->ctx, s->seq);
        s->n_toks = 0;
    }
    if (s->n_toks > s->exact) /* after a shift: only the exact part is offered again */
        s->n_toks = s->exact;
    s->exact = SIZE_MAX;
    s->trim = 0;
    s->last_used = e->steps;
    pi_detok_flush(s->detok, discard_text, NULL);
    pi_detok_flush(s->detok_sp, discard_text, NULL);
    pi_sampler_destroy(s->smp);
    s->smp = NULL;
    pi_grammar_destroy(s->gram);
    s->gram = NULL;
    s->job = NULL;
    s->phase = SLOT_FREE;
    s->n_done = s->n_taken = 0;
    s->logits_at = -1;
    if (job && --job->slots_held == 0)
        job_done_locked(e, job);
}

/* End a choice. `flush`: bytes of an unfinished UTF-8 sequence the detokenizer holds
 * come out as U+FFFD (not when a stop string cut the text: they followed it). */
static void finish_choice(struct srv_engine *e, struct slot *s, int reason, int flush) {
    struct srv_choice *ch = &s->job->choices[s->choice];
    if (flush && pi_detok_flush(detok_of(s), append_text, &ch->text) != PI_OK)
        reason = SRV_FINISH_ERROR;
    ch->stable = ch->text.len;
    if (reason != SRV_FINISH_ERROR && s->job->tool_syntax &&
        tc_parse(s->job->tool_syntax, ch->text.data ? ch->text.data : "", ch->text.len,
                 &ch->calls)) {
        ch->stable = ch->calls.content_len;
        reason = SRV_FINISH_TOOLS;
    }
    ch->finish = reason;
    pthread_cond_broadcast(&s->job->cond);
    release_slot(e, s);
}

/* Fail every choice of the job still running and free its slots. */
static void fail_job(struct srv_engine *e, struct srv_job *job, const char *why) {
    if (!job->error[0]) {
        snprintf(job->error, sizeof job->error, "%s", why);
        e->failed++;
    }
    for (uint32_t i = 0; i < e->cfg.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->job == job) {
            job->choices[s->choice].finish = SRV_FINISH_ERROR;
            release_slot(e, s);
        }
    }
}

static size_t find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || m > n)
        return SIZE_MAX;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0)
            return i;
    return SIZE_MAX;
}

/* Look for the stop strings in the text not yet final. A stop string found: the text is
 * cut where it starts, returns 1. Otherwise `stable` moves up to the longest suffix
 * that could still begin a stop string. No occurrence can start before `stable`: one
 * inside the text would have been found, and one running past its end would be a
 * longer suffix than the one held back. */
static int scan_stops(const struct srv_job *job, struct srv_choice *ch) {
    const char *t = ch->text.data ? ch->text.data : "";
    size_t from = ch->stable, len = ch->text.len, cut = SIZE_MAX;
    for (size_t i = 0; i < job->n_stop; i++) {
        size_t at = find_bytes(t + from, len - from, job->stop[i], strlen(job->stop[i]));
        if (at != SIZE_MAX && from + at < cut)
            cut = from + at;
    }
    if (cut != SIZE_MAX) {
        ch->text.len = cut;
        ch->text.data[cut] = '\0';
        return 1;
    }
    size_t hold = 0;
    for (size_t i = 0; i < job->n_stop; i++) {
        size_t m = strlen(job->stop[i]);
        size_t k = m - 1 < len - from ? m - 1 : len - from;
        for (; k > hold; k--)
            if (memcmp(t + len - k, job->stop[i], k) == 0)
                break;
        if (k > hold)
            hold = k;
    }
    ch->stable = len - hold;
    return 0;
}

/* The log-probability of `tok` under one row of logits, and the n_top most likely tokens
 * (larger first, equal ones by lower id). */
static void logprob_of(const float *row, int64_t n_vocab, int32_t tok, int n_top,
                       struct srv_logprob *out) {
    float mx = row[0];
    for (int64_t i = 1; i < n_vocab; i++)
        mx = row[i] > mx ? row[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; i++)
        sum += exp((double)(row[i] - mx));
    const double lse = (double)mx + log(sum);
    out->token = tok;
    out->logprob = (float)((double)row[tok] - lse);
    out->n_top = 0;
    for (int64_t i = 0; i < n_vocab && n_top > 0; i++) {
        int k = out->n_top;
        if (k == n_top && !(row[i] > row[out->top_id[k - 1]]))
            continue;
        if (k < n_top)
            out->n_top++;
        else
            k--;
        for (; k > 0 && row[i] > row[out->top_id[k - 1]]; k--)
            out->top_id[k] = out->top_id[k - 1];
        out->top_id[k] = (int32_t)i;
    }
    for (int k = 0; k < out->n_top; k++)
        out->top_lp[k] = (float)((double)row[out->top_id[k]] - lse);
}

/* A slot's sampled token: end the choice (end of generation, a stop string, max_tokens,
 * a full context) or keep it to decode in the next step. `row`: the logits it was
 * sampled from. */
static void accept_token(struct srv_engine *e, struct slot *s, int32_t tok, const float *row) {
    struct srv_job *job = s->job;
    struct srv_choice *ch = &job->choices[s->choice];
    if (job->t_first == 0.0)
        job->t_first = now_s();
    if (pi_model_token_is_eog(e->model, tok)) {
        finish_choice(e, s, SRV_FINISH_STOP, 1);
        return;
    }
    ch->n_tokens++;
    e->tokens++;
    if (job->json)
        jm_feed(&s->jm, e->pieces + e->piece_at[tok], e->piece_at[tok + 1] - e->piece_at[tok]);
    if (s->gram && pi_grammar_accept(s->gram, tok) != PI_OK) { /* the mask allowed it */
        fail_job(e, job, pi_grammar_errmsg(s->gram));
        return;
    }
    if (pi_detok_push(detok_of(s), tok, append_text, &ch->text) != PI_OK) {
        fail_job(e, job, "out of memory");
        return;
    }
    if (job->logprobs >= 0) { /* room for max_tokens entries was made with the job */
        struct srv_logprob *lp = &ch->lp[ch->n_tokens - 1];
        logprob_of(row, e->n_vocab, tok, job->logprobs, lp);
        lp->text_end = ch->text.len;
    }
    if (job->n_stop) {
        if (scan_stops(job, ch)) {
            finish_choice(e, s, SRV_FINISH_STOP, 0);
            return;
        }
    } else {
        ch->stable = ch->text.len;
    }
    if (job->tool_syntax) { /* a call that may be starting is not streamed as content */
        const size_t hold = tc_hold(job->tool_syntax, ch->text.data, ch->text.len);
        if (ch->stable > hold)
            ch->stable = hold;
    }
    if (ch->n_tokens >= job->max_tokens) {
        ch->context_full = job->clamped;
        finish_choice(e, s, SRV_FINISH_LENGTH, 1);
        return;
    }
    if (pi_ctx_seq_len(e->ctx, s->seq) >= e->n_ctx) {
        if (job->shift_keep < 0) { /* not reached: max_tokens is clamped to what fits */
            ch->context_full = 1;
            finish_choice(e, s, SRV_FINISH_LENGTH, 1);
            return;
        }
        /* Context shift: drop the older half of what follows the kept start. The
         * positions after it now hold keys and values computed while the dropped text
         * was visible, so the slot's cache is exact only up to `keep` for a later prompt. */
        const size_t keep = (size_t)job->shift_keep;
        const size_t drop = (size_t)(e->n_ctx - job->shift_keep) / 2;
        if (pi_ctx_seq_remove(e->ctx, s->seq, (int64_t)keep, (int64_t)(keep + drop)) != PI_OK) {
            fail_job(e, job, "the context shift failed");
            return;
        }
        memmove(s->toks + keep, s->toks + keep + drop,
                (s->n_toks - keep - drop) * sizeof *s->toks);
        s->n_toks -= drop;
        if (s->exact > keep)
            s->exact = keep;
        e->shifts++;
    }
    s->pending = tok;
    s->phase = SLOT_GEN;
    pthread_cond_broadcast(&job->cond);
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* The free slot for a new job's prompt (NULL for the other choices of a job). With the
 * prompt cache: the slot holding the longest conversation that this prompt continues or
 * repeats (its tokens and the prompt agree up to the shorter), so nothing cached is
 * lost. Else the prompt starts a conversation and takes the least recently used slot
 * (an empty one first), reusing whatever prefix that shares, such as a system prompt.
 * Taking the slot with the longest partial match instead would evict a conversation
 * that is still going on whenever another one shares its template: two chats would take
 * turns re-reading each other's history. *reuse: the prompt tokens the slot holds. */
static struct slot *pick_slot(struct srv_engine *e, const int32_t *prompt, size_t n_prompt,
                              size_t *reuse) {
    const int cache = prompt && e->cfg.prompt_cache;
    struct slot *best = NULL, *lru = NULL;
    size_t best_n = 0;
    for (uint32_t i = 0; i < e->cfg.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->phase != SLOT_FREE)
            continue;
        if (!lru || s->last_used < lru->last_used)
            lru = s;
        size_t n = cache ? common_prefix(s->toks, s->n_toks, prompt, n_prompt) : 0;
        if (n > best_n && n == (s->n_toks < n_prompt ? s->n_toks : n_prompt)) {
            best = s;
            best_n = n;
        }
    }
    if (!best) {
        best = lru;
        best_n = cache && lru ? common_prefix(lru->toks, lru->n_toks, prompt, n_prompt) : 0;
    }
    *reuse = best_n;
    return best;
}

/* Start queued jobs while enough slots are free, in order. Runs on any thread: the
 * context is not touched here (the leading slot's cut waits for the engine's thread). */
static void assign_locked(struct srv_engine *e) {
    while (e->q_head && free_slots(e) >= (uint32_t)e->q_head->n) {
        struct srv_job *job = e->q_head;
        e->q_head = job->next;
        if (!e->q_head)
            e->q_tail = NULL;
        job->next = NULL;
        e->q_len--;
        job->state = SRV_JOB_RUNNING;
        for (int c = 0; c < job->n; c++) {
            size_t reuse;
            /* an embedding pools every token from position 0: no prefix is reused, so it
             * takes the least recently used slot */
            const int32_t *match = c == 0 && !job->embed ? job->prompt : NULL;
            struct slot *s = pick_slot(e, match, job->n_prompt, &reuse);
            s->job = job;
            s->choice = c;
            s->phase = c == 0 ? SLOT_PROMPT : SLOT_WAIT;
            /* at least the last prompt token is decoded again, for its logits; all of
             * it when each position is to be scored */
            s->n_done = job->prompt_lp || job->embed ? 0
                        : reuse < job->n_prompt     ? reuse
                                                    : job->n_prompt - 1;
            s->n_taken = 0;
            s->trim = c == 0;
            jm_init(&s->jm);
            if (c == 0) {
                job->n_cached = s->n_done;
                e->prompt_tokens += job->n_prompt;
                e->prompt_cached += s->n_done;
            }
            /* The choices of one request differ: seed + index. A slot left without a
             * sampler (out of memory) fails its job in reap(), on the engine's thread. */
            pi_sampler_params sp = job->sampling;
            sp.seed += (uint64_t)c;
            if (job->embed || pi_sampler_create(e->model, &sp, &s->smp) != PI_OK)
                s->smp = NULL; /* an embedding samples nothing */
            if (job->grammar && pi_grammar_clone(job->grammar, &s->gram) != PI_OK) {
                pi_sampler_destroy(s->smp); /* fails the job in reap(), as above */
                s->smp = NULL;
            }
        }
        job->slots_held = job->n;
    }
}

/* Free the slots of cancelled jobs, and fail jobs a slot of which has no sampler. Only the
 * engine's thread touches the context, so this is not done where the slots are taken. */
static void reap(struct srv_engine *e) {
    for (uint32_t i = 0; i < e->cfg.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->job && s->job->cancelled)
            release_slot(e, s);
        else if (s->job && !s->smp && !s->job->embed)
            fail_job(e, s->job, "cannot create a sampler (out of memory?)");
    }
}

/* The batch of this step; returns its size. */
static size_t build_batch(struct srv_engine *e) {
    size_t n = 0;
    for (uint32_t i = 0; i < e->cfg.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->trim) { /* a new prompt: keep the prefix it shares with the cache */
            s->trim = 0;
            if (pi_ctx_seq_remove(e->ctx, s->seq, (int64_t)s->n_done, -1) != PI_OK) {
                pi_ctx_seq_clear(e->ctx, s->seq);
                e->prompt_cached -= s->n_done;
                s->n_done = 0;
                s->job->n_cached = 0;
            }
            s->n_toks = s->n_done;
        }
        s->logits_at = -1;
        s->n_taken = 0;
        if (s->phase == SLOT_GEN) {
            e->batch[n] = (pi_batch_entry){s->pending, s->seq, -1, 1};
            s->logits_at = (int64_t)n++;
        }
    }
    size_t budget = e->cfg.n_batch > n ? e->cfg.n_batch - n : 0;
    for (uint32_t i = 0; i < e->cfg.n_slots && budget; i++) {
        struct slot *s = &e->slots[i];
        if (s->phase != SLOT_PROMPT)
            continue;
        size_t left = s->job->n_prompt - s->n_done;
        size_t take = left < budget ? left : budget;
        const int every = s->job->prompt_lp != NULL; /* each position scores the next */
        s->taken_at = n;
        for (size_t k = 0; k < take; k++) {
            /* an embedding needs no logits: its tokens skip the LM head */
            int last = s->n_done + k + 1 == s->job->n_prompt && !s->job->embed;
            e->batch[n] = (pi_batch_entry){s->job->prompt[s->n_done + k], s->seq, -1,
                                           (uint32_t)(last || every)};
            if (last)
                s->logits_at = (int64_t)n;
            n++;
        }
        s->n_taken = take;
        budget -= take;
    }
    return n;
}

/* Every token's piece, for the JSON mask. */
static int make_pieces(struct srv_engine *e) {
    const int64_t n = e->n_vocab;
    size_t cap = (size_t)n * 8 + 64, len = 0;
    e->piece_at = malloc(((size_t)n + 1) * sizeof *e->piece_at);
    e->eog = malloc((size_t)n);
    e->pieces = malloc(cap);
    if (!e->piece_at || !e->eog || !e->pieces)
        return -1;
    for (int64_t t = 0; t < n; t++) {
        char buf[256];
        int64_t k = pi_token_to_piece(e->model, (int32_t)t, buf, sizeof buf, 0);
        k = k < 0 ? 0 : k < (int64_t)sizeof buf ? k : (int64_t)sizeof buf - 1;
        if (len + (size_t)k > cap) {
            char *p = realloc(e->pieces, cap * 2 + (size_t)k);
            if (!p)
                return -1;
            e->pieces = p;
            cap = cap * 2 + (size_t)k;
        }
        memcpy(e->pieces + len, buf, (size_t)k);
        e->piece_at[t] = len;
        len += (size_t)k;
        e->eog[t] = (unsigned char)pi_model_token_is_eog(e->model, (int32_t)t);
    }
    e->piece_at[n] = len;
    return 0;
}

/* The row a slot samples from: the model's logits, plus logit_bias, and under
 * response_format json_object -inf for every token that cannot continue the JSON text
 * (an end-of-generation token only once the object is complete), under a grammar
 * (json_schema, `grammar`) what pi_grammar_mask refuses. NULL when no token can (then
 * the job fails). */
static const float *sampling_row(struct srv_engine *e, struct slot *s, const float *logits) {
    const struct srv_job *job = s->job;
    if (!job->json && !job->n_bias && !s->gram)
        return logits;
    memcpy(s->row, logits, (size_t)e->n_vocab * sizeof *s->row);
    for (size_t i = 0; i < job->n_bias; i++)
        s->row[job->bias_id[i]] += job->bias[i];
    if (s->gram)
        return pi_grammar_mask(s->gram, s->row, e->n_vocab) > 0 ? s->row : NULL;
    if (!job->json)
        return s->row;
    const int done = jm_done(&s->jm);
    int64_t allowed = 0;
    for (int64_t t = 0; t < e->n_vocab; t++) {
        const size_t len = e->piece_at[t + 1] - e->piece_at[t];
        int ok;
        if (e->eog[t]) {
            ok = done;
        } else if (done || len == 0) {
            ok = 0; /* complete: only the end; a piece of nothing never moves on */
        } else {
            struct jm_state try = s->jm;
            ok = jm_feed(&try, e->pieces + e->piece_at[t], len);
        }
        if (!ok)
            s->row[t] = -INFINITY;
        allowed += ok;
    }
    return allowed ? s->row : NULL;
}

/* An embedding job's prompt is read: its pooled state is the result. */
static void finish_embedding(struct srv_engine *e, struct slot *s) {
    struct srv_job *job = s->job;
    const int64_t n_embd = pi_model_n_embd(e->model);
    int st = pi_ctx_embedding_pooled(e->ctx, s->seq, e->cfg.pooling, 1, job->embd,
                                     (size_t)n_embd);
    if (st != PI_OK) {
        char why[sizeof job->error];
        snprintf(why, sizeof why, "pooling failed: %s: %s", pi_status_str(st),
                 pi_ctx_errmsg(e->ctx));
        fail_job(e, job, why);
        return;
    }
    finish_choice(e, s, SRV_FINISH_STOP, 0);
}

static void after_decode(struct srv_engine *e) {
    e->steps++;
    /* What the sequences now hold. */
    for (uint32_t i = 0; i < e->cfg.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->phase == SLOT_GEN)
            s->toks[s->n_toks++] = s->pending;
        else if (s->phase == SLOT_PROMPT && s->n_taken) {
            memcpy(s->toks + s->n_toks, s->job->prompt + s->n_done,
                   s->n_taken * sizeof *s->toks);
            s->n_toks += s->n_taken;
        }
    }
    /* Prompts read to the end: copy them into the other slots of their job. */
    for (uint32_t i = 0; i < e->cfg.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->phase != SLOT_PROMPT)
            continue;
        struct srv_job *job = s->job;
        for (size_t k = 0; job->prompt_lp && k < s->n_taken; k++) {
            const size_t next = s->n_done + k + 1;
            const float *row = pi_ctx_batch_logits(e->ctx, s->taken_at + k);
            if (next < job->n_prompt && row)
                logprob_of(row, e->n_vocab, job->prompt[next], job->logprobs,
                           &job->prompt_lp[next]);
        }
        s->n_done += s->n_taken;
        s->n_taken = 0;
        if (s->n_done < s->job->n_prompt)
            continue;
        if (job->embed) {
            finish_embedding(e, s);
            continue;
        }
        for (uint32_t j = 0; j < e->cfg.n_slots; j++) {
            struct slot *f = &e->slots[j];
            if (f->job != s->job || f->phase != SLOT_WAIT)
                continue;
            int st = pi_ctx_seq_copy(e->ctx, s->seq, f->seq);
            if (st != PI_OK) {
                fail_job(e, s->job, pi_status_str(st));
                break;
            }
            memcpy(f->toks, s->toks, s->n_toks * sizeof *f->toks);
            f->n_toks = s->n_toks;
            f->phase = SLOT_GEN;
            f->logits_at = s->logits_at;
        }
    }
    for (uint32_t i = 0; i < e->cfg.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (!s->job || s->logits_at < 0)
            continue;
        const float *logits = pi_ctx_batch_logits(e->ctx, (size_t)s->logits_at);
        s->logits_at = -1;
        if (!logits) {
            fail_job(e, s->job, "no logits for a batch entry");
            continue;
        }
        if (s->job->max_tokens == 0) { /* echo only: the prompt, scored */
            finish_choice(e, s, SRV_FINISH_LENGTH, 1);
            continue;
        }
        const float *row = sampling_row(e, s, logits);
        if (!row) {
            fail_job(e, s->job, s->gram ? "no token can continue the text the grammar allows"
                                        : "no token can continue the JSON text (response_format)");
            continue;
        }
        int32_t tok;
        if (pi_sample_logits(s->smp, row, e->n_vocab, &tok) != PI_OK) {
            fail_job(e, s->job, "sampling failed");
            continue;
        }
        accept_token(e, s, tok, logits);
    }
}

/* src into dst[0..cap): whole when it fits, else cut after its last whole word that
 * leaves room for "...". */
static void clip_words(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n < cap) {
        memcpy(dst, src, n + 1);
        return;
    }
    n = cap - 4;
    while (n > 0 && src[n] != ' ')
        n--;
    while (n > 0 && strchr(" ,;:", src[n - 1]))
        n--;
    if (n == 0)
        n = cap - 4;
    memcpy(dst, src, n);
    memcpy(dst + n, "...", 4);
}

/* Every job in the failed batch ends with an error (answered 500). The library's message
 * (up to PI_ERRMSG_CAP bytes: more than a job's error holds) goes to the log whole; the
 * client gets a short text, cut at a word when long. A non-finite value names its layer
 * and position in the log only: it is the operator's to chase, not the client's. */
static void fail_batch(struct srv_engine *e, int st) {
    const char *msg = pi_ctx_errmsg(e->ctx);
    fprintf(stderr, "pi-server: decoding failed: %s: %s\n", pi_status_str(st), msg);
    char why[sizeof((struct srv_job *)0)->error];
    if (st == PI_ERR_NUMERIC) {
        snprintf(why, sizeof why,
                 "decoding failed: the model computed NaN or infinity (a broken or overflowing "
                 "model file); the server's log says where");
    } else {
        char full[1024];
        snprintf(full, sizeof full, "decoding failed: %s: %s", pi_status_str(st), msg);
        clip_words(why, sizeof why, full);
    }
    for (uint32_t i = 0; i < e->cfg.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->job && (s->phase == SLOT_GEN || s->n_taken))
            fail_job(e, s->job, why);
    }
}

static void *run(void *arg) {
    struct srv_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stopping) {
        reap(e);
        assign_locked(e);
        size_t n = build_batch(e);
        if (n == 0) {
            pthread_cond_wait(&e->wake, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        const double t0 = now_s();
        int st = pi_ctx_decode_batch(e->ctx, e->batch, n);
        const double dt = now_s() - t0;
        pthread_mutex_lock(&e->mu);
        e->decode_s += dt;
        e->decoded += st == PI_OK ? n : 0;
        if (st != PI_OK)
            fail_batch(e, st);
        else
            after_decode(e);
    }
    for (uint32_t i = 0; i < e->cfg.n_slots; i++)
        if (e->slots[i].job)
            fail_job(e, e->slots[i].job, "the server is shutting down");
    while (e->q_head) {
        struct srv_job *job = e->q_head;
        e->q_head = job->next;
        job->next = NULL;
        snprintf(job->error, sizeof job->error, "the server is shutting down");
        job_done_locked(e, job);
    }
    e->q_tail = NULL;
    e->q_len = 0;
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- the interface -------------------------------------------------------------------- */

int engine_create(pi_ctx *ctx, const struct srv_engine_config *cfg, struct srv_engine **out) {
    *out = NULL;
    struct srv_engine *e = calloc(1, sizeof *e);
    if (!e)
        return -1;
    e->ctx = ctx;
    e->model = pi_ctx_model(ctx);
    e->n_ctx = pi_ctx_n_ctx(ctx);
    e->cfg = *cfg;
    if (e->cfg.n_batch < e->cfg.n_slots)
        e->cfg.n_batch = e->cfg.n_slots;
    e->slots = calloc(cfg->n_slots, sizeof *e->slots);
    e->batch = malloc((e->cfg.n_batch + cfg->n_slots) * sizeof *e->batch);
    int ok = e->slots && e->batch;
    if (ok && pthread_mutex_init(&e->mu, NULL) != 0)
        ok = 0;
    if (ok && pthread_cond_init(&e->wake, NULL) != 0) {
        pthread_mutex_destroy(&e->mu);
        ok = 0;
    }
    if (!ok) {
        free(e->slots);
        free(e->batch);
        free(e);
        return -1;
    }
    e->n_vocab = pi_model_n_vocab(e->model);
    if (make_pieces(e) != 0) {
        engine_destroy(e);
        return -1;
    }
    for (uint32_t i = 0; i < cfg->n_slots; i++) {
        struct slot *s = &e->slots[i];
        s->seq = (int32_t)i;
        s->logits_at = -1;
        s->exact = SIZE_MAX;
        s->toks = malloc((size_t)e->n_ctx * sizeof *s->toks);
        s->row = malloc((size_t)e->n_vocab * sizeof *s->row);
        if (!s->toks || !s->row || pi_detok_create(e->model, 0, &s->detok) != PI_OK ||
            pi_detok_create(e->model, PI_PIECE_SPECIAL, &s->detok_sp) != PI_OK) {
            engine_destroy(e);
            return -1;
        }
    }
    *out = e;
    return 0;
}

int engine_start(struct srv_engine *e) {
    if (pthread_create(&e->thread, NULL, run, e) != 0)
        return -1;
    e->started = 1;
    return 0;
}

void engine_stop(struct srv_engine *e) {
    if (!e || !e->started)
        return;
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->started = 0;
}

void engine_destroy(struct srv_engine *e) {
    if (!e)
        return;
    engine_stop(e);
    for (uint32_t i = 0; i < e->cfg.n_slots; i++) {
        pi_sampler_destroy(e->slots[i].smp);
        pi_detok_destroy(e->slots[i].detok);
        pi_detok_destroy(e->slots[i].detok_sp);
        free(e->slots[i].toks);
        free(e->slots[i].row);
    }
    free(e->pieces);
    free(e->piece_at);
    free(e->eog);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->mu);
    free(e->slots);
    free(e->batch);
    free(e);
}

int engine_submit(struct srv_engine *e, struct srv_job *job) {
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    if (e->stopping) {
        rc = SRV_ERR_STOPPING;
    } else if ((e->q_head || free_slots(e) < (uint32_t)job->n) && e->q_len >= e->cfg.queue_max) {
        rc = SRV_ERR_BUSY;
    } else {
        job->state = SRV_JOB_QUEUED;
        job->t_submit = now_s();
        job->refs++;
        if (e->q_tail)
            e->q_tail->next = job;
        else
            e->q_head = job;
        e->q_tail = job;
        e->q_len++;
        e->requests++;
        /* Take the slots now, so that a burst of requests sees the real queue length. */
        assign_locked(e);
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void engine_cancel(struct srv_engine *e, struct srv_job *job) {
    pthread_mutex_lock(&e->mu);
    if (job->state == SRV_JOB_QUEUED && !job->cancelled) {
        struct srv_job **pp = &e->q_head, *prev = NULL;
        while (*pp && *pp != job) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        if (*pp) {
            *pp = job->next;
            if (e->q_tail == job)
                e->q_tail = prev;
            job->next = NULL;
            e->q_len--;
            job->cancelled = 1;
            job_done_locked(e, job);
            /* A job behind it may fit now. */
            assign_locked(e);
            pthread_cond_signal(&e->wake);
        }
    } else if (job->state == SRV_JOB_RUNNING) {
        job->cancelled = 1;
        pthread_cond_signal(&e->wake);
    }
    job->cancelled = 1;
    pthread_mutex_unlock(&e->mu);
}

void engine_release(struct srv_engine *e, struct srv_job *job) {
    if (!job)
        return;
    pthread_mutex_lock(&e->mu);
    job_unref_locked(job);
    pthread_mutex_unlock(&e->mu);
}

void engine_lock(struct srv_engine *e) {
    pthread_mutex_lock(&e->mu);
}

void engine_unlock(struct srv_engine *e) {
    pthread_mutex_unlock(&e->mu);
}

void engine_wait(struct srv_engine *e, struct srv_job *job, int ms) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&job->cond, &e->mu, &t);
}

void engine_health(struct srv_engine *e, struct srv_health *out) {
    pthread_mutex_lock(&e->mu);
    out->slots_idle = free_slots(e);
    out->slots_busy = e->cfg.n_slots - out->slots_idle;
    out->queued = e->q_len;
    out->requests = e->requests;
    out->tokens_generated = e->tokens;
    out->prompt_tokens = e->prompt_tokens;
    out->prompt_tokens_cached = e->prompt_cached;
    out->steps = e->steps;
    out->tokens_decoded = e->decoded;
    out->failed = e->failed;
    out->decode_seconds = e->decode_s;
    out->context_shifts = e->shifts;
    pthread_mutex_unlock(&e->mu);
}

uint32_t engine_n_slots(const struct srv_engine *e) {
    return e->cfg.n_slots;
}

int64_t engine_n_ctx(const struct srv_engine *e) {
    return e->n_ctx;
}
