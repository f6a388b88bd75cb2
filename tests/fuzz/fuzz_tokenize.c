/* libFuzzer harness: the tokenizer over arbitrary bytes.
 *
 * Opens the model named by PI_FUZZ_MODEL once (SmolLM2: byte-level BPE; without the
 * variable every input is skipped) and, if PI_FUZZ_SPM_MODEL is set, a SentencePiece
 * model too (tests/fixtures/tokenizer/spm_tiny.gguf). Each input is tokenized with and
 * without PI_TOKENIZE_PARSE_SPECIAL (and ADD_SPECIAL), then detokenized piece by piece
 * and through a pi_detok. Checked, besides what the sanitizers see:
 *   - the count from a cap-0 call equals the count of the filling call;
 *   - every id is in the vocabulary;
 *   - every chunk the streaming detokenizer delivers is complete, well-formed UTF-8;
 *   - for byte-level BPE the pieces give the input back exactly, less the bytes whose
 *     byte-level character the vocabulary lacks (tokenizing drops those);
 *   - for SentencePiece with all 256 byte tokens, the pieces are " " + the input with
 *     U+2581 read as a space.
 * Build and run: see tests/fuzz/README.md. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static pi_model *g_bpe, *g_spm;

static pi_model *open_env(const char *var) {
    const char *path = getenv(var);
    if (!path || !*path)
        return NULL;
    pi_model *m = NULL;
    if (pi_model_open(path, NULL, &m) != PI_OK || !m->vocab)
        abort(); /* a harness set up wrongly, not a finding */
    return m;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_bpe = open_env("PI_FUZZ_MODEL");
    g_spm = open_env("PI_FUZZ_SPM_MODEL");
    return 0;
}

static int utf8_ok(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t need = c < 0x80                 ? 1
                      : c >= 0xc2 && c <= 0xdf ? 2
                      : c >= 0xe0 && c <= 0xef ? 3
                      : c >= 0xf0 && c <= 0xf4 ? 4
                                               : 0;
        if (!need || i + need > n)
            return 0;
        unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
        unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
        if (need > 1 && (p[i + 1] < lo || p[i + 1] > hi))
            return 0;
        for (size_t k = 2; k < need; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xbf)
                return 0;
        i += need;
    }
    return 1;
}

static int all_bytes(const struct pi_vocab *v) {
    for (int b = 0; b < 256; b++)
        if (v->byte_token[b] < 0)
            return 0;
    return 1;
}

static int chunk_fn(void *user, const char *text, size_t len) {
    (void)user;
    if (len == 0 || !utf8_ok((const unsigned char *)text, len))
        __builtin_trap();
    return 0;
}

static void run(const pi_model *m, const uint8_t *data, size_t size, uint32_t flags) {
    const struct pi_vocab *v = m->vocab;
    int64_t n = pi_tokenize(m, (const char *)data, size, NULL, 0, flags);
    if (n < 0)
        __builtin_trap();
    int32_t *ids = malloc((size_t)n * sizeof *ids + 1);
    if (!ids)
        abort();
    if (pi_tokenize(m, (const char *)data, size, ids, (size_t)n, flags) != n)
        __builtin_trap();
    uint32_t pflags = (flags & PI_TOKENIZE_PARSE_SPECIAL) ? PI_PIECE_SPECIAL : 0;
    size_t total = 1;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n_tokens)
            __builtin_trap();
        total += v->tokens[ids[i]].len + 1;
    }
    char *text = malloc(total);
    if (!text)
        abort();
    size_t len = 0;
    pi_detok *d;
    if (pi_detok_create(m, pflags, &d) != PI_OK)
        abort();
    for (int64_t i = 0; i < n; i++) {
        int64_t k = pi_token_to_piece(m, ids[i], NULL, 0, pflags);
        if (k < 0 || (uint64_t)k > v->tokens[ids[i]].len)
            __builtin_trap();
        char *piece = text + len;
        if (pi_token_to_piece(m, ids[i], piece, (size_t)k + 1, pflags) != k)
            __builtin_trap();
        len += (size_t)k;
        if (pi_detok_push(d, ids[i], chunk_fn, NULL) != PI_OK)
            __builtin_trap();
    }
    if (pi_detok_flush(d, chunk_fn, NULL) != PI_OK)
        __builtin_trap();
    pi_detok_destroy(d);
    if (v->kind == PI_VOCAB_BPE && !(flags & PI_TOKENIZE_ADD_SPECIAL)) {
        size_t j = 0;
        for (size_t i = 0; i < size; i++) {
            if (v->byte_char_token[data[i]] < 0)
                continue;
            if (j >= len || (uint8_t)text[j] != data[i])
                __builtin_trap();
            j++;
        }
        if (j != len)
            __builtin_trap();
    }
    if (v->kind == PI_VOCAB_SPM && flags == 0 && v->add_space_prefix && all_bytes(v)) {
        /* With a byte token for every byte nothing is lost: the pieces are a space, then
         * the input with U+2581 read as a space. */
        size_t j = 0;
        if (size > 0 && (len == 0 || text[j++] != ' '))
            __builtin_trap();
        for (size_t i = 0; i < size; i++, j++) {
            int lower_block = i + 2 < size && !memcmp(data + i, "\xe2\x96\x81", 3);
            if (j >= len || text[j] != (lower_block ? ' ' : (char)data[i]))
                __builtin_trap();
            i += lower_block ? 2 : 0;
        }
        if (j != len)
            __builtin_trap();
    }
    free(ids);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_bpe && !g_spm)
        return 0;
    static const uint32_t flag_sets[] = {0, PI_TOKENIZE_PARSE_SPECIAL,
                                         PI_TOKENIZE_PARSE_SPECIAL | PI_TOKENIZE_ADD_SPECIAL};
    for (size_t f = 0; f < sizeof flag_sets / sizeof flag_sets[0]; f++) {
        if (g_bpe)
            run(g_bpe, data, size, flag_sets[f]);
        if (g_spm)
            run(g_spm, data, size, flag_sets[f]);
    }
    return 0;
}
