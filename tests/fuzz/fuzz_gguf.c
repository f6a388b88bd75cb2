/* fuzz_gguf.c -- libFuzzer harness for the GGUF reader (lib/model/gguf_read.c).
 *
 * Parses the input as a whole GGUF file held in memory. When the parse succeeds,
 * every lookup and typed read is exercised, and the first and last byte of every
 * tensor's data are read, so that AddressSanitizer sees any pointer or size the
 * reader accepted but did not check. The split-model helpers run on the same bytes:
 * the split keys, the split naming on the input's first bytes as a name, and the
 * tensor-table merge of the file with itself (every name then collides: the merge
 * must refuse and leave the file as it was). See tests/fuzz/README.md. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/gguf.h"
#include "powerinfer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Keeps the reads below from being optimised away. */
static volatile uint64_t sink;

static void touch(const void *p, uint64_t len) {
    const volatile uint8_t *b = (const volatile uint8_t *)p;
    if (len > 0) {
        sink += b[0];
        sink += b[len - 1];
    }
}

static void exercise_kv(const struct gguf_file *f, const struct gguf_kv *kv) {
    const struct gguf_kv *found = gguf_find_kv(f, kv->key);
    if (found)
        sink += found->type;
    sink += gguf_value_size(kv->type) + gguf_value_size(kv->elem_type);

    /* Every element of an array (bounded by the file size, which the reader has
     * checked n against), element 0 of a scalar; also one past the end, which must
     * fail cleanly. */
    uint64_t n = kv->type == PI_META_ARRAY ? kv->n : 1;
    for (uint64_t i = 0; i <= n; i++) {
        int64_t iv = 0;
        double dv = 0;
        const char *s = NULL;
        uint64_t len = 0;
        if (gguf_kv_int(f, kv, i, &iv) == PI_OK)
            sink += (uint64_t)iv;
        if (gguf_kv_float(f, kv, i, &dv) == PI_OK)
            sink += dv == dv;
        if (gguf_kv_str(f, kv, i, &s, &len) == PI_OK && s)
            touch(s, len);
    }
}

static void exercise_split(struct gguf_file *f, const uint8_t *data, size_t size) {
    struct pi_error err;
    memset(&err, 0, sizeof err);
    struct gguf_split s;
    if (gguf_split_info(f, &s, &err) == PI_OK) {
        if (s.count < 1 || s.no >= s.count || s.n_tensors < f->n_tensors)
            __builtin_trap();
    } else if (err.msg[0] == '\0') {
        __builtin_trap();
    }

    char name[64];
    size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
    memcpy(name, data, n);
    name[n] = '\0';
    size_t prefix_len;
    uint32_t no, count;
    if (gguf_split_name(name, &prefix_len, &no, &count)) {
        char *p = gguf_split_path(&pi_default_allocator, name, prefix_len, no, count);
        if (!p || strcmp(p, name) != 0)
            __builtin_trap(); /* the name must come back as it was */
        pi_free(&pi_default_allocator, p);
    }

    struct gguf_file twin;
    if (gguf_parse(&twin, data, (uint64_t)size, &pi_default_allocator, &err) != PI_OK)
        __builtin_trap(); /* it parsed once */
    const uint64_t before = f->n_tensors;
    const struct gguf_tensor *tensors = f->tensors;
    int st = gguf_merge_tensors(f, &twin, 1, &err);
    if (before > 0 && (st != PI_ERR_FORMAT || f->n_tensors != before || f->tensors != tensors))
        __builtin_trap();
    if (before == 0 && (st != PI_OK || f->n_tensors != 0))
        __builtin_trap();
    gguf_close(&twin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_file f;
    struct pi_error err;
    memset(&f, 0, sizeof f);
    memset(&err, 0, sizeof err);

    int st = gguf_parse(&f, data, (uint64_t)size, &pi_default_allocator, &err);
    if (st != PI_OK) {
        /* A failure must carry a message; the file must be left empty. */
        if (err.msg[0] == '\0' || f.kv || f.tensors || f.kv_sorted || f.tensor_sorted)
            __builtin_trap();
        gguf_close(&f);
        return 0;
    }

    for (uint64_t i = 0; i < f.n_kv; i++)
        exercise_kv(&f, &f.kv[i]);
    (void)gguf_find_kv(&f, "");
    (void)gguf_find_kv(&f, "general.alignment");
    (void)gguf_find_kv(&f, "no.such.key");

    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const struct gguf_tensor *t = &f.tensors[i];
        if (gguf_find_tensor(&f, t->name) != (int64_t)i)
            __builtin_trap(); /* names are unique, so the lookup must find this one */
        if (t->nbytes > 0)
            touch(t->data, t->nbytes);
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
            sink += (uint64_t)t->ne[d];
    }
    (void)gguf_find_tensor(&f, "");
    (void)gguf_find_tensor(&f, "no.such.tensor");

    exercise_split(&f, data, size);
    gguf_close(&f);
    return 0;
}
