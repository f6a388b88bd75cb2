/* libFuzzer harness: the whole model open path (GGUF reader + description builder)
 * over arbitrary bytes, through pi_model_open_buffer, then every query; for small
 * models that open, two decode steps in one FFN mode (chosen by the input's last byte),
 * with or without diagnostic statistics, on the CPU or split with a CPU backend acting
 * as the device at a budget the byte also picks (the plan described too); and
 * the activation-statistics reader on the same bytes. */
#include <stddef.h>
#include <stdint.h>

#include "infer/stats.h"
#include "model/gguf.h"
#include "model/model.h"

static void decode_a_little(const pi_model *m, uint8_t pick) {
    if (pi_model_n_vocab(m) < 2 ||
        pi_model_n_layer(m) * pi_model_n_embd(m) * (pi_model_n_ff(m) + pi_model_n_vocab(m)) >
        (1 << 22))
        return; /* keep runs fast */
    /* one FFN mode per input (chosen by its last byte), so the parser still gets most
     * of the fuzzing time */
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 8;
    cp.n_threads = 1;
    cp.sparse_mode = pick % 4u;
    cp.stats = pick & 4 ? PI_STATS_DIAGNOSTIC : PI_STATS_OFF;
    if (pick & 8) { /* hybrid: a fraction (pick >> 4) / 15 of "everything" */
        cp.device = PI_DEVICE_CPU;
        pi_plan *all;
        if (pi_model_plan(m, &cp, &all) != PI_OK)
            return;
        char text[256];
        (void)pi_plan_describe(all, text, sizeof text);
        cp.device_budget = pi_plan_bytes(all, PI_PLAN_N_PARTS) / 15u * (uint64_t)(pick >> 4);
        pi_plan_free(all);
    }
    pi_ctx *c;
    if (pi_ctx_create(m, &cp, &c) != PI_OK)
        return;
    const int32_t toks[3] = {0, 1, 0};
    (void)pi_ctx_decode(c, toks, 2);
    (void)pi_ctx_decode(c, toks + 2, 1);
    pi_ctx_destroy(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int metadata_only = 0; metadata_only <= 1; metadata_only++) {
        pi_model_params p;
        pi_model_default_params(&p);
        p.metadata_only = metadata_only;
        char msg[256];
        p.errbuf = msg;
        p.errbuf_cap = sizeof msg;
        pi_model *m = NULL;
        if (pi_model_open_buffer(data, size, &p, &pi_default_allocator, &m) != PI_OK)
            continue;
        char buf[64];
        for (int64_t i = 0; i < pi_model_meta_count(m); i++) {
            const char *key = pi_model_meta_key(m, i);
            int64_t v;
            double d;
            (void)pi_model_meta_int(m, key, &v);
            (void)pi_model_meta_float(m, key, &d);
            (void)pi_model_meta_str(m, key, buf, sizeof buf);
            (void)pi_model_meta_to_string(m, key, 4, buf, sizeof buf);
            (void)pi_model_meta_arr_int(m, key, 0, &v);
            (void)pi_model_meta_arr_str(m, key, 1, buf, sizeof buf);
        }
        for (int64_t i = 0; i < pi_model_n_tensors(m); i++) {
            int nd;
            int64_t dims[4];
            (void)pi_model_tensor_shape(m, i, &nd, dims);
        }
        for (int64_t l = 0; l < pi_model_n_layer(m); l++)
            (void)pi_model_predictor_rank(m, l);
        if (!metadata_only)
            decode_a_little(m, size ? data[size - 1] : 0);
        pi_model_close(m);
    }
    struct gguf_file f;
    struct pi_error err;
    if (gguf_parse(&f, data, size, &pi_default_allocator, &err) == PI_OK) {
        struct pi_stats *s;
        if (pi_stats_from_gguf(&f, &pi_default_allocator, &s, &err) == PI_OK)
            pi_stats_destroy(s);
        gguf_close(&f);
    }
    return 0;
}
