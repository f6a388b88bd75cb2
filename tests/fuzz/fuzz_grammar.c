/* libFuzzer harness: the grammar engine (lib/grammar/) over arbitrary grammars and texts.
 *
 * An input is GBNF text, a NUL byte, then bytes to read (no NUL: all grammar, no text).
 * The grammar is compiled without a model, and with the model named by PI_FUZZ_MODEL
 * (SmolLM2) when that is set. The text is fed in chunks whose sizes come from its own
 * bytes. Checked, besides what the sanitizers see:
 *   - a refused grammar gives a message, and *out stays NULL;
 *   - feeding is all or nothing: a refused chunk leaves the state as it was (a clone
 *     taken before reads the rest the same way), and byte-by-byte feeding of a chunk
 *     agrees with feeding it whole;
 *   - with the model: pi_grammar_mask's count equals the tokens it left alone, and for
 *     a sample of tokens the mask agrees with pi_grammar_accept on a clone.
 * Build and run: see tests/fuzz/README.md. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "powerinfer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static pi_model *g_model;
static float *g_logits;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("PI_FUZZ_MODEL");
    if (path && *path) {
        if (pi_model_open(path, NULL, &g_model) != PI_OK)
            abort(); /* a harness set up wrongly, not a finding */
        g_logits = malloc((size_t)pi_model_n_vocab(g_model) * sizeof *g_logits);
        if (!g_logits)
            abort();
    }
    return 0;
}

static void check_mask(pi_grammar *g) {
    const int64_t n_vocab = pi_model_n_vocab(g_model);
    for (int64_t t = 0; t < n_vocab; t++)
        g_logits[t] = 0.0f;
    int64_t n = pi_grammar_mask(g, g_logits, n_vocab);
    if (n == PI_ERR_UNSUPPORTED) /* too ambiguous to mask: refused as a whole */
        return;
    if (n < 0)
        abort();
    int64_t left = 0;
    for (int64_t t = 0; t < n_vocab; t++)
        left += g_logits[t] == 0.0f;
    if (left != n)
        abort();
    for (int64_t t = 0; t < n_vocab; t += 997) { /* a spread of tokens */
        pi_grammar *c;
        if (pi_grammar_clone(g, &c) != PI_OK)
            abort();
        int st = pi_grammar_accept(c, (int32_t)t);
        /* a limit (PI_ERR_UNSUPPORTED) counts as refused by the mask too */
        if ((st == PI_OK) != (g_logits[t] == 0.0f))
            abort();
        pi_grammar_destroy(c);
    }
}

static void run(const pi_model *model, const char *gbnf, size_t glen, const uint8_t *text,
                size_t tlen) {
    pi_grammar *g = (pi_grammar *)&g;
    char err[256];
    int st = pi_grammar_create(model, gbnf, glen, NULL, &g, err, sizeof err);
    if (st != PI_OK) {
        if (g != NULL || !err[0])
            abort();
        return;
    }
    if (model)
        check_mask(g);
    size_t at = 0;
    for (int rounds = 0; at < tlen && rounds < 64; rounds++) {
        size_t n = 1 + text[at] % 8;
        if (n > tlen - at)
            n = tlen - at;
        pi_grammar *before;
        if (pi_grammar_clone(g, &before) != PI_OK)
            abort();
        const int complete = pi_grammar_complete(g);
        st = pi_grammar_accept_text(g, (const char *)text + at, n);
        /* the same chunk byte by byte on the copy */
        pi_grammar *bytes;
        if (pi_grammar_clone(before, &bytes) != PI_OK)
            abort();
        int st_bytes = PI_OK;
        for (size_t i = 0; i < n && st_bytes == PI_OK; i++)
            st_bytes = pi_grammar_accept_text(bytes, (const char *)text + at + i, 1);
        if ((st == PI_OK) != (st_bytes == PI_OK) && st != PI_ERR_UNSUPPORTED &&
            st_bytes != PI_ERR_UNSUPPORTED)
            abort();
        if (st == PI_OK && pi_grammar_complete(g) != pi_grammar_complete(bytes))
            abort();
        pi_grammar_destroy(bytes);
        if (st != PI_OK) {
            if (pi_grammar_complete(g) != complete || !pi_grammar_errmsg(g)[0])
                abort();
            /* unchanged: the copy from before reads one byte the same way */
            int a = pi_grammar_accept_text(g, (const char *)text + at, 1);
            int b = pi_grammar_accept_text(before, (const char *)text + at, 1);
            if (a != b)
                abort();
            pi_grammar_destroy(before);
            break;
        }
        pi_grammar_destroy(before);
        at += n;
        if (model && rounds == 1) /* the mask is slow under ASan: once more, midway */
            check_mask(g);
    }
    pi_grammar_reset(g);
    pi_grammar_destroy(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *text = nul ? nul + 1 : data + size;
    const size_t tlen = nul ? size - glen - 1 : 0;
    run(NULL, (const char *)data, glen, text, tlen);
    if (g_model)
        run(g_model, (const char *)data, glen, text, tlen);
    return 0;
}
