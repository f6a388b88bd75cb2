/* Model open through the public API (and the allocator seam): description of
 * llama / bamboo, dense and PowerInfer files; every required tensor missing or
 * misshaped; unsupported architectures; allocation failure at every step; abort;
 * metadata and tensor queries. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "failalloc.h"
#include "model/model.h"
#include "powerinfer.h"
#include "testmodel.h"

static char g_path[256];

static const char *write_model(const struct tm_spec *s) {
    snprintf(g_path, sizeof g_path, "%s/pi_test_model_%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    assert_int_equal(tm_write(s, g_path), PI_OK);
    return g_path;
}

static int open_status(const struct tm_spec *s, char *msg, size_t cap) {
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = msg;
    p.errbuf_cap = cap;
    pi_model *m = (pi_model *)1;
    int st = pi_model_open(write_model(s), &p, &m);
    if (st == PI_OK) {
        assert_non_null(m);
        pi_model_close(m);
    } else {
        assert_null(m);
    }
    remove(g_path);
    return st;
}

static void check_types(uint32_t wtype, int sparse, const char *arch) {
    struct tm_spec s;
    tm_default(&s);
    s.wtype = wtype;
    s.sparse = sparse;
    s.arch = arch;
    s.threshold = 0.25f;
    pi_model *m;
    char msg[512] = "";
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = msg;
    p.errbuf_cap = sizeof msg;
    int st = pi_model_open(write_model(&s), &p, &m);
    if (st != PI_OK)
        fail_msg("open failed: %s", msg);
    assert_string_equal(pi_model_arch(m), arch);
    assert_int_equal(pi_model_is_sparse(m), sparse);
    assert_int_equal(pi_model_n_layer(m), 2);
    assert_int_equal(pi_model_n_embd(m), 64);
    assert_int_equal(pi_model_n_ff(m), 96);
    assert_int_equal(pi_model_n_head(m), 4);
    assert_int_equal(pi_model_n_head_kv(m), 2);
    assert_int_equal(pi_model_n_vocab(m), 40);
    assert_int_equal(pi_model_n_ctx_train(m), 128);
    if (sparse) {
        assert_int_equal(pi_model_predictor_rank(m, 0), 8);
        assert_int_equal(pi_model_predictor_rank(m, 1), 9);
        assert_true(pi_model_sparse_threshold(m) == 0.25f);
    } else {
        assert_int_equal(pi_model_predictor_rank(m, 0), 0);
        assert_true(pi_model_sparse_threshold(m) == 0.0f);
    }
    assert_int_equal(pi_model_predictor_rank(m, 2), 0);
    assert_int_equal(pi_model_predictor_rank(m, -1), 0);
    /* 3 global + 9 (dense) or 11 (sparse) per layer */
    assert_int_equal(pi_model_n_tensors(m), 3 + 2 * (sparse ? 11 : 9));
    assert_true(pi_model_n_params(m) > 0);
    assert_true(pi_model_size_bytes(m) > 0);
    assert_string_equal(pi_model_errmsg(m), "");
    pi_model_close(m);
    remove(g_path);
}

static void test_dense_llama(void **state) {
    (void)state;
    check_types(PI_TYPE_F32, 0, "llama");
    check_types(PI_TYPE_F16, 0, "llama");
    check_types(PI_TYPE_Q8_0, 0, "llama");
    check_types(PI_TYPE_Q4_0, 0, "llama");
}

static void test_sparse_llama_and_bamboo(void **state) {
    (void)state;
    check_types(PI_TYPE_F16, 1, "llama");
    check_types(PI_TYPE_Q4_0, 1, "llama");
    check_types(PI_TYPE_F16, 1, "bamboo");
    check_types(PI_TYPE_F32, 0, "bamboo");
}

static void test_internal_description(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.tied = 1;
    s.sparse = 1;
    pi_model *m;
    assert_int_equal(pi_model_open(write_model(&s), NULL, &m), PI_OK);
    remove(g_path);
    const struct pi_model_desc *d = &m->desc;
    assert_ptr_equal(d->output, d->token_embd); /* tied */
    assert_int_equal(d->hp.ffn_act, PI_FFN_RELU);
    assert_int_equal(d->hp.head_dim_k, 16);
    assert_int_equal(d->hp.n_rot, 16);
    assert_true(fabsf(d->hp.rope_freq_base - 10000.0f) < 1e-3f);
    assert_non_null(d->layers[1].ffn_down_t);
    assert_null(d->layers[1].ffn_down);
    assert_string_equal(d->layers[1].fc2->name, "blk.1.fc2.weight");
    assert_int_equal(d->max_rank, 9);    /* ranks 8 and 9 */
    assert_int_equal(d->max_width, 96);  /* n_ff */
    pi_model_close(m);

    s.sparse = 0;
    s.arch = "bamboo";
    assert_int_equal(pi_model_open(write_model(&s), NULL, &m), PI_OK);
    remove(g_path);
    assert_int_equal(m->desc.hp.ffn_act, PI_FFN_RELU_BOTH);
    pi_model_close(m);
}

/* Each tensor in turn is left out, or written with a wrong shape: the open fails
 * with PI_ERR_FORMAT and the message names the tensor. */
static void test_missing_and_misshaped(void **state) {
    (void)state;
    static const char *const names[] = {
        "token_embd.weight",       "output_norm.weight",      "blk.0.attn_norm.weight",
        "blk.0.attn_q.weight",     "blk.0.attn_k.weight",     "blk.1.attn_v.weight",
        "blk.1.attn_output.weight", "blk.0.ffn_norm.weight",  "blk.0.ffn_gate.weight",
        "blk.1.ffn_up.weight",     "blk.1.ffn_down_t.weight", "blk.0.fc1.weight",
        "blk.1.fc2.weight",        "blk.1.ffn_down.weight",   "output.weight",
    };
    for (int sparse = 0; sparse <= 1; sparse++) {
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            const char *n = names[i];
            int sparse_only = strstr(n, "ffn_down_t") || strstr(n, "fc1") || strstr(n, "fc2");
            int dense_only = strstr(n, "ffn_down.") != NULL;
            if ((sparse_only && !sparse) || (dense_only && sparse))
                continue;
            struct tm_spec s;
            tm_default(&s);
            s.sparse = sparse;
            char msg[512] = "";
            s.omit = n;
            int st = open_status(&s, msg, sizeof msg);
            if (!strcmp(n, "output.weight")) {
                assert_int_equal(st, PI_OK); /* absent output: tied embeddings */
            } else {
                if (st != PI_ERR_FORMAT || !strstr(msg, n))
                    fail_msg("omit %s (sparse %d): status %d, '%s'", n, sparse, st, msg);
            }
            s.omit = NULL;
            s.misshape = n;
            msg[0] = '\0';
            st = open_status(&s, msg, sizeof msg);
            /* A misshaped token_embd changes n_vocab; the tokenizer check names it. */
            /* A misshaped fc1 changes the rank, so fc2 no longer matches it. */
            const char *also = strstr(n, "fc1") ? "fc2" : "token_embd";
            if (st != PI_ERR_FORMAT || (!strstr(msg, n) && !strstr(msg, also)))
                fail_msg("misshape %s (sparse %d): status %d, '%s'", n, sparse, st, msg);
        }
    }
}

static void test_sparse_file_rules(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.sparse = 1;
    s.extra = "blk.0.ffn_down.weight";
    char msg[512];
    assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_FORMAT);
    assert_non_null(strstr(msg, "ffn_down_t"));
}

/* A tensor the forward pass would not read is refused with PI_ERR_UNSUPPORTED naming it
 * (issue 12: rope_freqs and biases were accepted with an INFO line, and the model
 * computed something else than the file describes), unless docs/formats.md lists it as
 * one that may go unused. metadata_only still opens such files for inspection. */
static void test_unused_tensors(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int sparse;
        const char *why;
    } refused[] = {
        /* a LayerNorm bias in an RMSNorm architecture */
        {"output_norm.bias", 0, "bias"},
        {"blk.0.attn_norm.bias", 1, "bias"},
        {"blk.0.ffn_norm.bias", 0, "bias"},
        {"blk.2.attn_q.weight", 0, "has 2 layers"},
        {"blk.0.fc1.weight", 0, "PWRI"},
        {"blk.1.ffn_down_t.weight", 0, "PWRI"},
        {"blk.0.attn_sinks.weight", 0, "not read"},
        {"token_types.weight", 1, "not read"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        struct tm_spec s;
        tm_default(&s);
        s.sparse = refused[i].sparse;
        s.extra = refused[i].name;
        char msg[512] = "";
        int st = open_status(&s, msg, sizeof msg);
        if (st != PI_ERR_UNSUPPORTED || !strstr(msg, refused[i].name) ||
            !strstr(msg, refused[i].why))
            fail_msg("extra %s (sparse %d): status %d, '%s'", refused[i].name,
                     refused[i].sparse, st, msg);
        pi_model_params p;
        pi_model_default_params(&p);
        p.metadata_only = 1;
        pi_model *m;
        assert_int_equal(pi_model_open(write_model(&s), &p, &m), PI_OK);
        remove(g_path);
        pi_model_close(m);
    }
    static const char *const allowed[] = {"blk.0.attn_rot_embd.weight",
                                          "blk.1.attn_rot_embd.weight"};
    for (int sparse = 0; sparse <= 1; sparse++)
        for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++) {
            struct tm_spec s;
            tm_default(&s);
            s.sparse = sparse;
            s.extra = allowed[i];
            char msg[512] = "";
            if (open_status(&s, msg, sizeof msg) != PI_OK)
                fail_msg("extra %s (sparse %d): '%s'", allowed[i], sparse, msg);
        }
}

/* Mixture-of-experts keys and tensors that do not make a model (the files that do are
 * tests/fixtures/archs' mixtral, qwen2moe, qwen3moe, olmoe; misshaped ones are in
 * tests/corpus): expert_count without expert_used_count; expert tensors without
 * expert_count (PI_ERR_FORMAT, naming the tensor); experts in an architecture or a
 * file kind that has none (PI_ERR_UNSUPPORTED). */
static void test_experts(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.extra_key = "expert_count";
    s.extra_key_value = 8;
    char msg[512] = "";
    assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_FORMAT);
    if (!strstr(msg, "llama.expert_used_count"))
        fail_msg("'%s'", msg);
    /* expert tensors without the key */
    static const char *const tensors[] = {"blk.0.ffn_gate_exps.weight",
                                          "blk.1.ffn_gate_inp.weight",
                                          "blk.0.ffn_up_shexp.weight"};
    for (size_t i = 0; i < sizeof tensors / sizeof *tensors; i++) {
        tm_default(&s);
        s.omit = "blk.0.ffn_gate.weight";
        s.extra = tensors[i];
        assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_FORMAT);
        if (!strstr(msg, tensors[i]) || !strstr(msg, "mixture-of-experts") ||
            !strstr(msg, "llama.expert_count"))
            fail_msg("%s: '%s'", tensors[i], msg);
    }
    /* an architecture without experts */
    tm_default(&s);
    s.arch = "qwen2";
    s.extra_key = "expert_count";
    s.extra_key_value = 8;
    assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_UNSUPPORTED);
    if (!strstr(msg, "mixture-of-experts") || !strstr(msg, "qwen2.expert_count = 8"))
        fail_msg("'%s'", msg);
    /* a PowerInfer file with experts */
    tm_default(&s);
    s.sparse = 1;
    s.extra_key = "expert_count";
    s.extra_key_value = 4;
    assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_UNSUPPORTED);
    if (!strstr(msg, "PWRI") || !strstr(msg, "experts"))
        fail_msg("'%s'", msg);
    /* expert_count 0 is a dense model */
    tm_default(&s);
    s.extra_key = "expert_count";
    s.extra_key_value = 0;
    assert_int_equal(open_status(&s, msg, sizeof msg), PI_OK);
}

/* Keys that change the computation (in other engines) are refused unless neutral, instead
 * of being ignored: the file would compute something else than it describes. */
static void test_compute_keys(void **state) {
    (void)state;
    static const struct {
        const char *key;
        float value;
        int status;
    } cases[] = {
        /* computed since issue 13 */
        {"rope.scaling.attn_factor", 0.5f, PI_OK},
        {"attention.scale", 0.5f, PI_OK},
        {"attention.scale", 0.0f, PI_OK},
        {"attn_logit_softcapping", 50.0f, PI_OK},
        {"final_logit_softcapping", 30.0f, PI_OK},
        /* Granite's multipliers and DeepSeek's YaRN log multiplier are not */
        {"embedding_scale", 12.0f, PI_ERR_UNSUPPORTED},
        {"residual_scale", 0.22f, PI_ERR_UNSUPPORTED},
        {"residual_scale", 1.0f, PI_OK},
        {"logit_scale", 8.0f, PI_ERR_UNSUPPORTED},
        {"rope.scaling.yarn_log_multiplier", 0.1f, PI_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tm_spec s;
        tm_default(&s);
        s.extra_f32_key = cases[i].key;
        s.extra_f32_value = cases[i].value;
        char msg[512] = "";
        const int st = open_status(&s, msg, sizeof msg);
        if (st != cases[i].status ||
            (st != PI_OK && !strstr(msg, cases[i].key)))
            fail_msg("%s = %g: %d '%s'", cases[i].key, (double)cases[i].value, st, msg);
    }
}

/* Widths a file controls are bounded where they are read (PI_MAX_WIDTH), so scratch
 * sizes cannot overflow: 4 heads of 2^23 values make q rows of 2^25. */
static void test_width_limits(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.extra_key = "attention.key_length";
    s.extra_key_value = 1u << 23;
    char msg[512] = "";
    assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_FORMAT);
    if (!strstr(msg, "above the limit") || !strstr(msg, "key_length"))
        fail_msg("'%s'", msg);
}

/* pi_ctx_decode's count is compared exactly (issue 12: through a signed cast, n >= 2^63
 * passed and n * sizeof(entry) wrapped), and so is pi_ctx_decode_batch's. */
static void test_decode_counts(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    pi_model *m;
    assert_int_equal(pi_model_open(write_model(&s), NULL, &m), PI_OK);
    remove(g_path);
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 16;
    cp.n_threads = 1;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    int32_t toks[16];
    for (int i = 0; i < 16; i++)
        toks[i] = i % 40;
    const size_t huge[] = {(size_t)1 << 63, SIZE_MAX, SIZE_MAX / 4 + 1, 17};
    for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
        assert_int_equal(pi_ctx_decode(c, toks, huge[i]), PI_ERR_RANGE);
        assert_non_null(strstr(pi_ctx_errmsg(c), "exceed the context of 16"));
        assert_int_equal(pi_ctx_pos(c), 0);
    }
    assert_int_equal(pi_ctx_decode(c, toks, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_decode(c, toks, 2), PI_OK);
    assert_int_equal(pi_ctx_decode(c, toks, 15), PI_ERR_RANGE); /* 2 + 15 > 16 */
    assert_int_equal(pi_ctx_decode(c, toks, 14), PI_OK);
    assert_int_equal(pi_ctx_pos(c), 16);
    pi_batch_entry e[2] = {{1, 0, -1, 1}, {2, 0, -1, 1}};
    assert_int_equal(pi_ctx_seq_clear(c, -1), PI_OK);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(pi_ctx_decode_batch(c, e, huge[i]), PI_ERR_RANGE);
        assert_non_null(strstr(pi_ctx_errmsg(c), "capacity"));
    }
    assert_int_equal(pi_ctx_decode_batch(c, e, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_ctx_decode_batch(c, e, 2), PI_OK);
    assert_int_equal(pi_ctx_pos(c), 2);
    pi_ctx_destroy(c);
    pi_model_close(m);
}

static void test_bad_hparams(void **state) {
    (void)state;
    static const char *const keys[] = {"block_count", "embedding_length", "feed_forward_length",
                                       "attention.head_count", "context_length"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        struct tm_spec s;
        tm_default(&s);
        s.skip_key = keys[i];
        char msg[512];
        assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_FORMAT);
        assert_non_null(strstr(msg, keys[i]));
    }
    struct tm_spec s;
    tm_default(&s);
    s.n_head_kv = 3; /* 4 heads are not a multiple of 3 */
    char msg[512];
    assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_FORMAT);
    assert_non_null(strstr(msg, "head_count_kv"));
    tm_default(&s);
    s.n_layer = 600;
    s.n_embd = 32;
    s.n_ff = 32;
    s.n_head = 1;
    s.n_head_kv = 1;
    assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_FORMAT);
    assert_non_null(strstr(msg, "block_count"));
}

static void test_unsupported_arch(void **state) {
    (void)state;
    const char *archs[] = {"gptj", "gpt2", "mamba", "zzz-unknown"};
    for (size_t i = 0; i < 4; i++) {
        struct tm_spec s;
        tm_default(&s);
        s.arch = archs[i];
        char msg[512];
        assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_UNSUPPORTED);
        assert_non_null(strstr(msg, archs[i]));
        assert_non_null(strstr(msg, "not supported"));
        /* metadata_only opens it for inspection */
        pi_model_params p;
        pi_model_default_params(&p);
        p.metadata_only = 1;
        pi_model *m;
        assert_int_equal(pi_model_open(write_model(&s), &p, &m), PI_OK);
        remove(g_path);
        assert_string_equal(pi_model_arch(m), archs[i]);
        assert_int_equal(pi_model_n_layer(m), 0);
        assert_true(pi_model_n_tensors(m) > 0);
        pi_model_close(m);
    }
}

static void test_tokenizer_size_mismatch(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.misshape = "output.weight"; /* output rows differ from token_embd rows */
    char msg[512];
    assert_int_equal(open_status(&s, msg, sizeof msg), PI_ERR_FORMAT);
    assert_non_null(strstr(msg, "output.weight"));
}

/* Fail the Nth allocation for every N: each open fails cleanly with PI_ERR_NOMEM and
 * frees everything; the first N past the last allocation succeeds. */
static void test_alloc_failure_every_step(void **state) {
    (void)state;
    for (int sparse = 0; sparse <= 1; sparse++) {
        struct tm_spec s;
        tm_default(&s);
        s.sparse = sparse;
        const char *path = write_model(&s);
        struct failalloc fa;
        long n;
        for (n = 1; n < 100000; n++) {
            struct pi_allocator a = failalloc_make(&fa, n);
            pi_model *m = (pi_model *)1;
            char msg[256] = "";
            pi_model_params p;
            pi_model_default_params(&p);
            p.errbuf = msg;
            p.errbuf_cap = sizeof msg;
            int st = pi_model_open_with(path, &p, &a, &m);
            if (st == PI_OK) {
                assert_true(fa.count < n);
                assert_int_equal(pi_model_n_layer(m), 2);
                pi_model_close(m);
                assert_int_equal(fa.live, 0);
                break;
            }
            if (st != PI_ERR_NOMEM)
                fail_msg("allocation %ld failed: status %d (%s)", n, st, msg);
            assert_null(m);
            assert_true(strlen(msg) > 0);
            assert_int_equal(fa.live, 0);
        }
        assert_true(n > 3);
        remove(path);
    }
}

/* Contexts too: fail each allocation of pi_ctx_create in turn (sparse model, every FFN
 * mode with diagnostic statistics), then of pi_stats_save; every failure is
 * PI_ERR_NOMEM and leaves nothing allocated. */
static void test_ctx_alloc_failure_every_step(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.sparse = 1;
    const char *path = write_model(&s);
    struct failalloc fa;
    struct pi_allocator a = failalloc_make(&fa, 0);
    pi_model *m;
    assert_int_equal(pi_model_open_with(path, NULL, &a, &m), PI_OK);
    const long base = fa.live;
    char stats_path[300];
    snprintf(stats_path, sizeof stats_path, "%s.stats", path);
    for (uint32_t mode = PI_SPARSE_DENSE; mode <= PI_SPARSE_ORACLE; mode++) {
        long n;
        for (n = 1; n < 100000; n++) {
            fa.fail_at = fa.count + n;
            pi_ctx_params cp;
            pi_ctx_default_params(&cp);
            cp.n_ctx = 16;
            cp.n_threads = 2;
            cp.sparse_mode = mode;
            cp.stats = PI_STATS_DIAGNOSTIC;
            pi_ctx *c = (pi_ctx *)1;
            int st = pi_ctx_create(m, &cp, &c);
            if (st == PI_OK) {
                fa.fail_at = 0;
                const int32_t t[2] = {1, 2};
                assert_int_equal(pi_ctx_decode(c, t, 2), PI_OK);
                long k;
                for (k = 1; k < 100000; k++) {
                    fa.fail_at = fa.count + k;
                    int ss = pi_stats_save(pi_ctx_stats(c), stats_path, NULL, 0);
                    fa.fail_at = 0;
                    if (ss == PI_OK)
                        break;
                    assert_int_equal(ss, PI_ERR_NOMEM);
                    FILE *fp = fopen(stats_path, "rb");
                    assert_null(fp); /* nothing left behind */
                }
                remove(stats_path);
                pi_ctx_destroy(c);
                assert_int_equal(fa.live, base);
                break;
            }
            fa.fail_at = 0;
            assert_int_equal(st, PI_ERR_NOMEM);
            assert_null(c);
            assert_int_equal(fa.live, base);
        }
        assert_true(n > 5);
    }
    pi_model_close(m);
    assert_int_equal(fa.live, 0);
    remove(path);
}

struct prog {
    int calls;
    int stop_at;
    float last;
    int monotone;
};

static int on_progress(void *user, float f) {
    struct prog *p = user;
    if (f < p->last)
        p->monotone = 0;
    p->last = f;
    return ++p->calls == p->stop_at;
}

static void test_progress_and_abort(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    const char *path = write_model(&s);
    struct prog pr = {0, 0, 0.0f, 1};
    pi_model_params p;
    pi_model_default_params(&p);
    p.progress_fn = on_progress;
    p.progress_user = &pr;
    pi_model *m;
    assert_int_equal(pi_model_open(path, &p, &m), PI_OK);
    pi_model_close(m);
    assert_true(pr.monotone);
    assert_true(pr.last == 1.0f);
    int total = pr.calls;
    assert_true(total >= 4);
    for (int k = 1; k <= total; k++) {
        struct prog q = {0, k, 0.0f, 1};
        char msg[256];
        p.progress_user = &q;
        p.errbuf = msg;
        p.errbuf_cap = sizeof msg;
        assert_int_equal(pi_model_open(path, &p, &m), PI_ERR_ABORTED);
        assert_null(m);
        assert_non_null(strstr(msg, "aborted"));
    }
    remove(path);
}

struct logs {
    int n;
    char last[256];
};

static void on_log(void *user, int level, const char *msg) {
    struct logs *l = user;
    (void)level;
    l->n++;
    snprintf(l->last, sizeof l->last, "%s", msg);
}

static void test_logging(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    struct logs l = {0, ""};
    pi_model_params p;
    pi_model_default_params(&p);
    p.log_fn = on_log;
    p.log_user = &l;
    pi_model *m;
    assert_int_equal(pi_model_open(write_model(&s), &p, &m), PI_OK);
    assert_true(l.n >= 1);
    assert_non_null(strstr(l.last, "dense llama"));
    pi_model_close(m);
    p.log_level = PI_LOG_ERROR;
    l.n = 0;
    assert_int_equal(pi_model_open(g_path, &p, &m), PI_OK);
    assert_int_equal(l.n, 0);
    pi_model_close(m);
    s.omit = "blk.0.ffn_up.weight";
    assert_int_equal(pi_model_open(write_model(&s), &p, &m), PI_ERR_FORMAT);
    assert_int_equal(l.n, 1);
    assert_non_null(strstr(l.last, "blk.0.ffn_up.weight"));
    remove(g_path);
}

static void test_meta_queries(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.sparse = 1;
    s.threshold = -0.5f;
    pi_model *m;
    assert_int_equal(pi_model_open(write_model(&s), NULL, &m), PI_OK);
    remove(g_path);
    int64_t n = pi_model_meta_count(m);
    assert_true(n >= 9);
    int found = 0;
    for (int64_t i = 0; i < n; i++)
        found += !strcmp(pi_model_meta_key(m, i), "llama.block_count");
    assert_int_equal(found, 1);
    assert_null(pi_model_meta_key(m, n));
    assert_null(pi_model_meta_key(m, -1));

    int type, et;
    uint64_t cnt;
    assert_int_equal(pi_model_meta_type(m, "llama.block_count", &type, &et, &cnt), PI_OK);
    assert_int_equal(type, PI_META_U32);
    assert_int_equal(et, -1);
    assert_int_equal(cnt, 1);
    assert_int_equal(pi_model_meta_type(m, "tokenizer.ggml.tokens", &type, &et, &cnt), PI_OK);
    assert_int_equal(type, PI_META_ARRAY);
    assert_int_equal(et, PI_META_STRING);
    assert_int_equal(cnt, 40);
    assert_int_equal(pi_model_meta_type(m, "nope", NULL, NULL, NULL), PI_ERR_NOT_FOUND);

    int64_t v;
    double d;
    assert_int_equal(pi_model_meta_int(m, "llama.embedding_length", &v), PI_OK);
    assert_int_equal(v, 64);
    assert_int_equal(pi_model_meta_int(m, "general.name", &v), PI_ERR_TYPE);
    assert_int_equal(pi_model_meta_int(m, "tokenizer.ggml.tokens", &v), PI_ERR_TYPE);
    assert_int_equal(pi_model_meta_float(m, "powerinfer.sparse_threshold", &d), PI_OK);
    assert_true(d == -0.5);
    assert_int_equal(pi_model_meta_float(m, "llama.block_count", &d), PI_OK);
    assert_true(d == 2.0);

    char buf[8];
    assert_int_equal(pi_model_meta_str(m, "general.name", buf, sizeof buf), 10);
    assert_string_equal(buf, "test mo"); /* truncated, terminated */
    assert_int_equal(pi_model_meta_str(m, "general.name", NULL, 0), 10);
    assert_int_equal(pi_model_meta_str(m, "general.name", NULL, 4), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_meta_str(m, "llama.block_count", buf, sizeof buf), PI_ERR_TYPE);
    assert_int_equal(pi_model_meta_arr_str(m, "tokenizer.ggml.tokens", 39, buf, sizeof buf), 5);
    assert_string_equal(buf, "tok39");
    assert_int_equal(pi_model_meta_arr_str(m, "tokenizer.ggml.tokens", 40, buf, sizeof buf),
                     PI_ERR_RANGE);
    assert_int_equal(pi_model_meta_arr_int(m, "tokenizer.ggml.tokens", 0, &v), PI_ERR_TYPE);
    assert_int_equal(pi_model_meta_arr_int(m, "llama.block_count", 0, &v), PI_ERR_TYPE);
    assert_int_equal(pi_model_meta_arr_float(m, "general.name", 0, &d), PI_ERR_TYPE);

    char line[256];
    int64_t len = pi_model_meta_to_string(m, "tokenizer.ggml.tokens", 3, line, sizeof line);
    assert_string_equal(line, "[tok0, tok1, tok2, ...] (40 items)");
    assert_int_equal(len, (int64_t)strlen(line));
    assert_int_equal(pi_model_meta_to_string(m, "llama.block_count", 0, line, sizeof line), 1);
    assert_string_equal(line, "2");
    assert_int_equal(pi_model_meta_to_string(m, "powerinfer.sparse_threshold", 0, line, 5), 4);
    assert_string_equal(line, "-0.5");
    /* Length needed is reported even when the buffer is short. */
    assert_int_equal(pi_model_meta_to_string(m, "general.name", 0, line, 3), 10);
    assert_string_equal(line, "te");

    int64_t idx;
    assert_int_equal(pi_model_tensor_find(m, "blk.1.fc1.weight", &idx), PI_OK);
    assert_string_equal(pi_model_tensor_name(m, idx), "blk.1.fc1.weight");
    int nd;
    int64_t dims[4];
    assert_int_equal(pi_model_tensor_shape(m, idx, &nd, dims), PI_OK);
    assert_int_equal(nd, 2);
    assert_int_equal(dims[0], 64);
    assert_int_equal(dims[1], 9);
    assert_int_equal(dims[2], 1);
    assert_int_equal(pi_model_tensor_type(m, idx), PI_TYPE_F32);
    assert_int_equal(pi_model_tensor_nbytes(m, idx), 64 * 9 * 4);
    assert_int_equal(pi_model_tensor_find(m, "nope", &idx), PI_ERR_NOT_FOUND);
    assert_int_equal(pi_model_tensor_type(m, 9999), PI_ERR_RANGE);
    assert_int_equal(pi_model_tensor_shape(m, -1, &nd, dims), PI_ERR_RANGE);
    assert_null(pi_model_tensor_name(m, 9999));
    assert_int_equal(pi_model_tensor_nbytes(m, 9999), 0);
    pi_model_close(m);
}

static void test_buffer_open(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    FILE *fp = fopen(write_model(&s), "rb");
    assert_non_null(fp);
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    remove(g_path);
    pi_model *m;
    assert_int_equal(pi_model_open_buffer(buf, n, NULL, &pi_default_allocator, &m), PI_OK);
    assert_int_equal(pi_model_n_vocab(m), 40);
    pi_model_close(m);
    assert_int_equal(pi_model_open_buffer(buf, n / 2, NULL, &pi_default_allocator, &m),
                     PI_ERR_FORMAT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_llama),
        cmocka_unit_test(test_sparse_llama_and_bamboo),
        cmocka_unit_test(test_internal_description),
        cmocka_unit_test(test_missing_and_misshaped),
        cmocka_unit_test(test_sparse_file_rules),
        cmocka_unit_test(test_unused_tensors),
        cmocka_unit_test(test_experts),
        cmocka_unit_test(test_compute_keys),
        cmocka_unit_test(test_width_limits),
        cmocka_unit_test(test_decode_counts),
        cmocka_unit_test(test_bad_hparams),
        cmocka_unit_test(test_unsupported_arch),
        cmocka_unit_test(test_tokenizer_size_mismatch),
        cmocka_unit_test(test_alloc_failure_every_step),
        cmocka_unit_test(test_ctx_alloc_failure_every_step),
        cmocka_unit_test(test_progress_and_abort),
        cmocka_unit_test(test_logging),
        cmocka_unit_test(test_meta_queries),
        cmocka_unit_test(test_buffer_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
