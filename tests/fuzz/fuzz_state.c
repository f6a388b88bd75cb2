/* libFuzzer harness: context state loading (pi_ctx_state_load) over arbitrary bytes,
 * into a two-sequence context of a small random model written at start-up, as a whole
 * context or into one sequence (the first byte picks: 2 whole, else that sequence). A load that succeeds must leave
 * a context that decodes; one that fails must leave it as it was (checked by the
 * sequences' lengths). Seeds: real states of that context (written to
 * $PI_FUZZ_STATE_SEEDS when set, so the corpus starts from valid files). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "powerinfer.h"
#include "testmodel.h"

static pi_model *g_model;
static pi_ctx *g_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A seed: the selector byte (2: whole context, else the target sequence), then the
 * state. */
static void save_seed(const char *dir, const char *name, int32_t seq) {
    size_t n = 0;
    pi_ctx_state_save(g_ctx, seq, NULL, 0, &n);
    uint8_t *buf = malloc(n + 1);
    if (!buf || pi_ctx_state_save(g_ctx, seq, buf + 1, n, &n) != PI_OK) {
        free(buf);
        return;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    buf[0] = (uint8_t)(seq < 0 ? 2 : seq);
    FILE *fp = fopen(path, "wb");
    if (fp) {
        fwrite(buf, 1, n + 1, fp);
        fclose(fp);
    }
    free(buf);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char path[] = "/tmp/pi-fuzz-state-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    close(fd);
    struct tm_spec s;
    tm_default(&s);
    s.sparse = 1;
    if (tm_write(&s, path) != PI_OK || pi_model_open(path, NULL, &g_model) != PI_OK)
        abort();
    remove(path);
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 16;
    cp.n_threads = 1;
    cp.n_seq_max = 2;
    if (pi_ctx_create(g_model, &cp, &g_ctx) != PI_OK)
        abort();
    const pi_batch_entry e[3] = {{1, 0, -1, 0}, {2, 0, -1, 1}, {3, 1, -1, 1}};
    if (pi_ctx_decode_batch(g_ctx, e, 3) != PI_OK)
        abort();
    const char *dir = getenv("PI_FUZZ_STATE_SEEDS");
    if (dir) {
        save_seed(dir, "whole.state", -1);
        save_seed(dir, "seq0.state", 0);
        save_seed(dir, "seq1.state", 1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const int32_t seq = data[0] % 3 == 2 ? -1 : data[0] % 3;
    const int64_t l0 = pi_ctx_seq_len(g_ctx, 0), l1 = pi_ctx_seq_len(g_ctx, 1);
    if (pi_ctx_state_load(g_ctx, seq, data + 1, size - 1) == PI_OK) {
        const pi_batch_entry e = {4, 0, -1, 1};
        if (pi_ctx_seq_len(g_ctx, 0) < 16 && pi_ctx_decode_batch(g_ctx, &e, 1) != PI_OK)
            abort();
        pi_ctx_seq_clear(g_ctx, -1);
        const pi_batch_entry r[3] = {{1, 0, -1, 0}, {2, 0, -1, 1}, {3, 1, -1, 1}};
        if (pi_ctx_decode_batch(g_ctx, r, 3) != PI_OK)
            abort();
    } else if (pi_ctx_seq_len(g_ctx, 0) != l0 || pi_ctx_seq_len(g_ctx, 1) != l1) {
        abort(); /* a refused state changed the context */
    }
    return 0;
}
