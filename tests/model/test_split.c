#define _POSIX_C_SOURCE 200809L
/* Split models (gguf-split / gguf-py's NAME-00001-of-00003.gguf files) opened as one
 * model from their first part:
 *  - a fixture split at test time into 3 parts by the library's own writer (cut at
 *    several places, the first part with or without tensors), and the files gguf-py's
 *    GGUFWriter split support wrote (tests/fixtures/split, make_split_fixtures.py),
 *    give the single file's logits exactly, with PI_LOAD_MMAP, PI_LOAD_READ and
 *    lock_memory, and in hybrid execution (a CPU backend as the device); the tensor
 *    table, n_params and size_bytes are the single file's;
 *  - hostile splits each fail with a message naming the part and what is wrong: a
 *    missing part, parts swapped, split.count or split.tensors.count that disagree, a
 *    tensor in two parts, a non-first part opened, a truncated part, a part of another
 *    split (magic, version), a part without split keys, split keys of the wrong type,
 *    a first part renamed; a split part through pi_model_open_buffer is refused;
 *  - allocation failure at every step and an abort at every progress report leave
 *    nothing allocated;
 *  - pi_model_quantize refuses a split input instead of writing a partial model; a
 *    state saved on a split model loads back into it.
 * argv[1]: tests/fixtures/models, argv[2]: tests/fixtures/split, argv[3]: a work
 * directory (created). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "failalloc.h"
#include "model/gguf.h"
#include "model/model.h"
#include "powerinfer.h"
#include "util/os.h"
#include "portable.h" /* last: Windows shims of mkdir, mkdtemp */

enum { NTOK = 9, MAXPARTS = 4 };
static const int32_t TOKS[NTOK] = {1, 107, 114, 26, 98, 59, 94, 57, 44};
static const char *g_models, *g_fixtures, *g_dir;

static const char *path_of(const char *dir, const char *name) {
    static char p[8][512];
    static int i;
    i = (i + 1) % 8;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

/* Part `no` (1-based) of `count` of the split named `base` in the work directory. */
static const char *part_path(const char *base, int no, int count) {
    char name[256];
    snprintf(name, sizeof name, "%s-%05d-of-%05d.gguf", base, no, count);
    return path_of(g_dir, name);
}

/* ---- making splits with lib/model/gguf_write.c -------------------------------------- */

/* How to split: cut[k] is the first tensor of part k (cut[0] = 0, cut[count] = all);
 * the rest are deliberate faults (0: none). */
struct split_spec {
    int count;
    uint64_t cut[MAXPARTS + 1];
    int no_of[MAXPARTS];        /* split.no written in part k, when set (+1: 0 is unset) */
    int count_of[MAXPARTS];     /* split.count written in part k, when set */
    int64_t total_delta;        /* added to split.tensors.count in every part */
    int dup_into_last;          /* the last part also holds part 2's first tensor */
    int no_keys_in;             /* part k (1-based) has no split keys */
    uint32_t magic_of[MAXPARTS];
    int string_count;           /* split.count of part 1 written as a string */
};

static void add_u16(struct gguf_writer *w, const char *key, int v) {
    uint16_t x = (uint16_t)v;
    assert_int_equal(gguf_writer_add_scalar(w, key, PI_META_U16, &x), PI_OK);
}

/* Write the split of the file `src` into part_path(base, k, count). */
static void write_split(const char *src_path, const char *base, const struct split_spec *s) {
    char src[512]; /* path_of's buffers are reused below */
    snprintf(src, sizeof src, "%s", src_path);
    struct pi_file_map map;
    struct pi_error err;
    pi_error_clear(&err);
    assert_int_equal(pi_os_map_file(src, &map, &err), PI_OK);
    struct gguf_file f;
    assert_int_equal(gguf_parse(&f, map.data, map.size, &pi_default_allocator, &err), PI_OK);
    const int64_t total = (int64_t)f.n_tensors + (s->dup_into_last ? 1 : 0) + s->total_delta;
    for (int k = 0; k < s->count; k++) {
        struct gguf_writer *w;
        assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
        assert_int_equal(gguf_writer_set_alignment(w, f.alignment), PI_OK);
        if (k == 0)
            for (uint64_t i = 0; i < f.n_kv; i++) {
                const struct gguf_kv *kv = &f.kv[i];
                if (strcmp(kv->key, "general.alignment") == 0 || strncmp(kv->key, "split.", 6) == 0)
                    continue;
                assert_int_equal(gguf_writer_add_raw(w, kv->key, kv->type, kv->elem_type, kv->n,
                                                     f.base + kv->off, kv->size),
                                 PI_OK);
            }
        if (s->no_keys_in != k + 1) {
            add_u16(w, "split.no", s->no_of[k] ? s->no_of[k] - 1 : k);
            if (k == 0 && s->string_count)
                assert_int_equal(gguf_writer_add_string(w, "split.count", "3"), PI_OK);
            else
                add_u16(w, "split.count", s->count_of[k] ? s->count_of[k] : s->count);
            int32_t t32 = (int32_t)total;
            assert_int_equal(gguf_writer_add_scalar(w, "split.tensors.count", PI_META_I32, &t32),
                             PI_OK);
        }
        for (uint64_t i = s->cut[k]; i < s->cut[k + 1]; i++) {
            const struct gguf_tensor *t = &f.tensors[i];
            assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data),
                             PI_OK);
        }
        if (s->dup_into_last && k == s->count - 1) {
            const struct gguf_tensor *t = &f.tensors[s->cut[1]];
            assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data),
                             PI_OK);
        }
        uint32_t magic = s->magic_of[k] ? s->magic_of[k] : f.magic;
        assert_int_equal(gguf_writer_write_file(w, part_path(base, k + 1, s->count), magic, &err),
                         PI_OK);
        gguf_writer_destroy(w);
    }
    gguf_close(&f);
    pi_os_unmap_file(&map);
}

static void remove_split(const char *base, int count) {
    for (int k = 1; k <= count; k++)
        remove(part_path(base, k, count));
}

/* A 3-part split of `src` with the tensors cut at a and b. */
static struct split_spec three(uint64_t a, uint64_t b, uint64_t n) {
    struct split_spec s;
    memset(&s, 0, sizeof s);
    s.count = 3;
    s.cut[1] = a;
    s.cut[2] = b;
    s.cut[3] = n;
    return s;
}

static uint64_t n_tensors_of(const char *path) {
    pi_model_params p;
    pi_model_default_params(&p);
    p.metadata_only = 1;
    pi_model *m;
    assert_int_equal(pi_model_open(path, &p, &m), PI_OK);
    uint64_t n = (uint64_t)pi_model_n_tensors(m);
    pi_model_close(m);
    return n;
}

static const char *src_f32(void) {
    static char p[512];
    snprintf(p, sizeof p, "%s/tiny-silu-gqa.f32.gguf", g_models);
    return p;
}

/* ---- logits --------------------------------------------------------------------------- */

/* The logits after each of TOKS, one token at a time, into out[NTOK][n_vocab]; with
 * `hybrid`, on the CPU and a CPU backend acting as the device, given half of what the
 * whole model would take there. */
static float *run_logits_on(const pi_model *m, int hybrid) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 32;
    cp.n_threads = 2;
    if (hybrid) {
        cp.device = PI_DEVICE_CPU;
        pi_plan *all;
        assert_int_equal(pi_model_plan(m, &cp, &all), PI_OK);
        cp.device_budget = pi_plan_bytes(all, PI_PLAN_N_PARTS) / 2;
        pi_plan_free(all);
    }
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    const int64_t nv = pi_model_n_vocab(m);
    float *out = malloc((size_t)(NTOK * nv) * sizeof *out);
    assert_non_null(out);
    for (int t = 0; t < NTOK; t++) {
        assert_int_equal(pi_ctx_decode(c, &TOKS[t], 1), PI_OK);
        memcpy(out + t * nv, pi_ctx_logits(c), (size_t)nv * sizeof *out);
    }
    pi_ctx_destroy(c);
    return out;
}

static float *run_logits(const pi_model *m) {
    return run_logits_on(m, 0);
}

static pi_model *open_ok(const char *path, int load_mode, int lock) {
    pi_model_params p;
    pi_model_default_params(&p);
    char msg[512] = "";
    p.errbuf = msg;
    p.errbuf_cap = sizeof msg;
    p.load_mode = load_mode;
    p.lock_memory = lock;
    pi_model *m = NULL;
    if (pi_model_open(path, &p, &m) != PI_OK)
        fail_msg("%s: %s", path, msg);
    return m;
}

/* The split at `first` is the model at `single`: same tensor table, sizes, metadata
 * that matters, and bit-identical logits in every load mode. */
static void check_same_model(const char *single, const char *first) {
    pi_model *a = open_ok(single, PI_LOAD_MMAP, 0);
    float *want = run_logits(a);
    const int64_t nv = pi_model_n_vocab(a);
    static const int modes[3][2] = {{PI_LOAD_MMAP, 0}, {PI_LOAD_READ, 0}, {PI_LOAD_MMAP, 1}};
    for (int i = 0; i < 3; i++) {
        pi_model *b = open_ok(first, modes[i][0], modes[i][1]);
        assert_int_equal(pi_model_n_tensors(b), pi_model_n_tensors(a));
        for (int64_t t = 0; t < pi_model_n_tensors(a); t++) {
            assert_string_equal(pi_model_tensor_name(b, t), pi_model_tensor_name(a, t));
            assert_int_equal(pi_model_tensor_type(b, t), pi_model_tensor_type(a, t));
            assert_int_equal(pi_model_tensor_nbytes(b, t), pi_model_tensor_nbytes(a, t));
            int64_t idx;
            assert_int_equal(pi_model_tensor_find(b, pi_model_tensor_name(a, t), &idx), PI_OK);
            assert_int_equal(idx, t);
        }
        assert_int_equal(pi_model_n_params(b), pi_model_n_params(a));
        assert_int_equal(pi_model_size_bytes(b), pi_model_size_bytes(a));
        assert_string_equal(pi_model_arch(b), pi_model_arch(a));
        assert_int_equal(pi_model_n_layer(b), pi_model_n_layer(a));
        int64_t v;
        assert_int_equal(pi_model_meta_int(b, "split.count", &v), PI_OK);
        assert_int_equal(v, 3);
        float *got = run_logits(b);
        assert_memory_equal(got, want, (size_t)(NTOK * nv) * sizeof *got);
        free(got);
        pi_model_close(b);
    }
    /* Hybrid execution places weights from every part. */
    float *want_h = run_logits_on(a, 1);
    pi_model *b = open_ok(first, PI_LOAD_MMAP, 0);
    float *got_h = run_logits_on(b, 1);
    assert_memory_equal(got_h, want_h, (size_t)(NTOK * nv) * sizeof *got_h);
    free(got_h);
    free(want_h);
    pi_model_close(b);
    free(want);
    pi_model_close(a);
}

static void test_own_split_logits_equal(void **state) {
    (void)state;
    const char *src = src_f32();
    const uint64_t n = n_tensors_of(src);
    assert_true(n > 6);
    const uint64_t cuts[][2] = {{1, 2}, {n / 3, 2 * n / 3}, {n - 2, n - 1}, {0, n / 2}};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        struct split_spec s = three(cuts[i][0], cuts[i][1], n);
        write_split(src, "own", &s);
        check_same_model(src, part_path("own", 1, 3));
        remove_split("own", 3);
    }
}

/* Files written by gguf-py's GGUFWriter with split_max_tensors (8 + 8 + 5 tensors), and
 * with small_first_shard (a first part of metadata only). */
static void test_gguf_py_split_logits_equal(void **state) {
    (void)state;
    const char *src = path_of(g_models, "tiny-silu-gqa.q4_0.gguf");
    check_same_model(src, path_of(g_fixtures, "tiny-silu-gqa.q4_0-00001-of-00003.gguf"));
    check_same_model(src, path_of(g_fixtures, "tiny-silu-gqa.q4_0.nofirst-00001-of-00003.gguf"));
}

/* ---- hostile splits ------------------------------------------------------------------- */

/* Open `path` expecting `status`, the message holding every non-NULL want[]. Also through
 * the failing allocator (never failing) to see that nothing is left allocated. */
static void expect_fail(const char *path, int status, const char *want1, const char *want2) {
    for (int mode = PI_LOAD_MMAP; mode <= PI_LOAD_READ; mode++) {
        struct failalloc fa;
        struct pi_allocator a = failalloc_make(&fa, 0);
        pi_model_params p;
        pi_model_default_params(&p);
        char msg[512] = "";
        p.errbuf = msg;
        p.errbuf_cap = sizeof msg;
        p.load_mode = mode;
        pi_model *m = (pi_model *)1;
        int st = pi_model_open_with(path, &p, &a, &m);
        if (st != status)
            fail_msg("%s: status %d (%s), expected %d", path, st, msg, status);
        assert_null(m);
        assert_int_equal(fa.live, 0);
        if (getenv("PI_TEST_VERBOSE") && mode == PI_LOAD_MMAP)
            printf("# %s\n", msg);
        if (want1 && !strstr(msg, want1))
            fail_msg("message '%s' does not contain '%s'", msg, want1);
        if (want2 && !strstr(msg, want2))
            fail_msg("message '%s' does not contain '%s'", msg, want2);
    }
}

static void test_missing_part(void **state) {
    (void)state;
    const uint64_t n = n_tensors_of(src_f32());
    struct split_spec s = three(4, 10, n);
    write_split(src_f32(), "miss", &s);
    char p3[512];
    snprintf(p3, sizeof p3, "%s", part_path("miss", 3, 3));
    remove(p3);
    char want[600];
    snprintf(want, sizeof want, "%s: split model part 3 of 3: cannot open '%s'",
             part_path("miss", 1, 3), p3);
    expect_fail(part_path("miss", 1, 3), PI_ERR_IO, want, NULL);
    remove_split("miss", 3);
}

static void test_swapped_parts(void **state) {
    (void)state;
    const uint64_t n = n_tensors_of(src_f32());
    struct split_spec s = three(4, 10, n);
    write_split(src_f32(), "swap", &s);
    char p2[512], p3[512];
    snprintf(p2, sizeof p2, "%s", part_path("swap", 2, 3));
    snprintf(p3, sizeof p3, "%s", part_path("swap", 3, 3));
    const char *tmp = path_of(g_dir, "swap.tmp");
    assert_int_equal(rename(p2, tmp), 0);
    assert_int_equal(rename(p3, p2), 0);
    assert_int_equal(rename(tmp, p3), 0);
    expect_fail(part_path("swap", 1, 3), PI_ERR_FORMAT, p2, "split.no is 2, so it is part 3");
    remove_split("swap", 3);
}

static void test_count_mismatch(void **state) {
    (void)state;
    const uint64_t n = n_tensors_of(src_f32());
    struct split_spec s = three(4, 10, n);
    s.count_of[1] = 4; /* part 2 thinks there are 4 parts */
    write_split(src_f32(), "cnt", &s);
    expect_fail(part_path("cnt", 1, 3), PI_ERR_FORMAT, part_path("cnt", 2, 3),
                "split.count is 4, the first part's 3");
    remove_split("cnt", 3);

    s = three(4, 10, n);
    s.total_delta = 1; /* every part claims one tensor more than there is */
    write_split(src_f32(), "tot", &s);
    expect_fail(part_path("tot", 1, 3), PI_ERR_FORMAT, part_path("tot", 1, 3),
                "split.tensors.count says");
    remove_split("tot", 3);

    s = three(4, 10, n);
    s.no_of[0] = 1 + 3; /* split.no 3 of 3 */
    write_split(src_f32(), "range", &s);
    expect_fail(part_path("range", 1, 3), PI_ERR_FORMAT, "split.no 3 is not below", NULL);
    remove_split("range", 3);
}

static void test_duplicate_tensor(void **state) {
    (void)state;
    const uint64_t n = n_tensors_of(src_f32());
    struct split_spec s = three(4, 10, n);
    s.dup_into_last = 1;
    write_split(src_f32(), "dup", &s);
    expect_fail(part_path("dup", 1, 3), PI_ERR_FORMAT, "is in part 2 and in part 3", NULL);
    remove_split("dup", 3);
}

static void test_non_first_part(void **state) {
    (void)state;
    const uint64_t n = n_tensors_of(src_f32());
    struct split_spec s = three(4, 10, n);
    write_split(src_f32(), "nf", &s);
    char first[512];
    snprintf(first, sizeof first, "'%s'", part_path("nf", 1, 3));
    expect_fail(part_path("nf", 2, 3), PI_ERR_INVALID_ARG, "part 2 of 3", first);
    expect_fail(part_path("nf", 3, 3), PI_ERR_INVALID_ARG, "part 3 of 3", first);
    /* also with metadata_only */
    pi_model_params p;
    pi_model_default_params(&p);
    p.metadata_only = 1;
    pi_model *m;
    assert_int_equal(pi_model_open(part_path("nf", 2, 3), &p, &m), PI_ERR_INVALID_ARG);
    /* renamed away from the split naming: still refused, the first part not named */
    const char *other = path_of(g_dir, "nf-part2.gguf");
    assert_int_equal(rename(part_path("nf", 2, 3), other), 0);
    expect_fail(other, PI_ERR_INVALID_ARG, "part 2 of 3", "split.no 0");
    remove(other);
    /* the first part renamed: its other parts cannot be found */
    const char *renamed = path_of(g_dir, "nf-renamed.gguf");
    assert_int_equal(rename(part_path("nf", 1, 3), renamed), 0);
    expect_fail(renamed, PI_ERR_INVALID_ARG, "-00001-of-00003.gguf", NULL);
    remove(renamed);
    remove_split("nf", 3);
}

static void truncate_to(const char *path, long keep) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    char *buf = malloc((size_t)keep);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)keep, fp), (size_t)keep);
    fclose(fp);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, (size_t)keep, fp), (size_t)keep);
    fclose(fp);
    free(buf);
}

static void test_truncated_part(void **state) {
    (void)state;
    const uint64_t n = n_tensors_of(src_f32());
    struct split_spec s = three(4, 10, n);
    write_split(src_f32(), "trunc", &s);
    struct stat st;
    char p2[512];
    snprintf(p2, sizeof p2, "%s", part_path("trunc", 2, 3));
    assert_int_equal(stat(p2, &st), 0);
    truncate_to(p2, (long)st.st_size - 100); /* into the last tensor's data */
    expect_fail(part_path("trunc", 1, 3), PI_ERR_FORMAT, p2, "runs past the end");
    truncate_to(p2, 60); /* into the metadata */
    expect_fail(part_path("trunc", 1, 3), PI_ERR_FORMAT, p2, "cannot fit");
    truncate_to(p2, 0);
    expect_fail(part_path("trunc", 1, 3), PI_ERR_FORMAT, p2, "too short");
    remove_split("trunc", 3);
}

static void test_part_of_another_split(void **state) {
    (void)state;
    const uint64_t n = n_tensors_of(src_f32());
    struct split_spec s = three(4, 10, n);
    s.magic_of[2] = GGUF_MAGIC_PWRI;
    write_split(src_f32(), "magic", &s);
    expect_fail(part_path("magic", 1, 3), PI_ERR_FORMAT, part_path("magic", 3, 3),
                "magic is 'PWRI'");
    remove_split("magic", 3);

    s = three(4, 10, n);
    s.no_keys_in = 2;
    write_split(src_f32(), "nokeys", &s);
    expect_fail(part_path("nokeys", 1, 3), PI_ERR_FORMAT, part_path("nokeys", 2, 3),
                "no split keys");
    remove_split("nokeys", 3);

    /* version: patch part 3's version field to 2 */
    s = three(4, 10, n);
    write_split(src_f32(), "ver", &s);
    FILE *fp = fopen(part_path("ver", 3, 3), "r+b");
    assert_non_null(fp);
    const uint8_t v2[4] = {2, 0, 0, 0};
    assert_int_equal(fseek(fp, 4, SEEK_SET), 0);
    assert_int_equal(fwrite(v2, 1, 4, fp), 4);
    fclose(fp);
    expect_fail(part_path("ver", 1, 3), PI_ERR_FORMAT, part_path("ver", 3, 3), "version 2");
    remove_split("ver", 3);

    s = three(4, 10, n);
    s.string_count = 1;
    write_split(src_f32(), "str", &s);
    expect_fail(part_path("str", 1, 3), PI_ERR_FORMAT, "split.count must be an integer", NULL);
    remove_split("str", 3);
}

/* A split part through pi_model_open_buffer has no name to find the others by. */
static void test_buffer_refuses_split(void **state) {
    (void)state;
    const uint64_t n = n_tensors_of(src_f32());
    struct split_spec s = three(4, 10, n);
    write_split(src_f32(), "buf", &s);
    for (int k = 1; k <= 3; k++) {
        struct pi_file_map map;
        struct pi_error err;
        assert_int_equal(pi_os_map_file(part_path("buf", k, 3), &map, &err), PI_OK);
        pi_model *m = (pi_model *)1;
        char msg[512] = "";
        pi_model_params p;
        pi_model_default_params(&p);
        p.errbuf = msg;
        p.errbuf_cap = sizeof msg;
        int st = pi_model_open_buffer(map.data, map.size, &p, &pi_default_allocator, &m);
        assert_int_equal(st, k == 1 ? PI_ERR_UNSUPPORTED : PI_ERR_INVALID_ARG);
        assert_null(m);
        assert_non_null(strstr(msg, "split model"));
        pi_os_unmap_file(&map);
    }
    remove_split("buf", 3);
}

/* ---- cleanup on every path ------------------------------------------------------------ */

static void test_alloc_failure_every_step(void **state) {
    (void)state;
    const char *first = path_of(g_fixtures, "tiny-silu-gqa.q4_0-00001-of-00003.gguf");
    for (int mode = PI_LOAD_MMAP; mode <= PI_LOAD_READ; mode++) {
        struct failalloc fa;
        long n;
        for (n = 1; n < 100000; n++) {
            struct pi_allocator a = failalloc_make(&fa, n);
            pi_model *m = (pi_model *)1;
            char msg[512] = "";
            pi_model_params p;
            pi_model_default_params(&p);
            p.errbuf = msg;
            p.errbuf_cap = sizeof msg;
            p.load_mode = mode;
            int st = pi_model_open_with(first, &p, &a, &m);
            if (st == PI_OK) {
                assert_true(fa.count < n);
                assert_int_equal(pi_model_n_tensors(m), 21);
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
        assert_true(n > 10);
    }
}

struct prog {
    int calls, stop_at, monotone;
    float last;
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
    const char *first = path_of(g_fixtures, "tiny-silu-gqa.q4_0-00001-of-00003.gguf");
    for (int mode = PI_LOAD_MMAP; mode <= PI_LOAD_READ; mode++) {
        pi_model_params p;
        pi_model_default_params(&p);
        p.load_mode = mode;
        p.progress_fn = on_progress;
        struct prog all = {0, 0, 1, 0.0f};
        p.progress_user = &all;
        pi_model *m;
        assert_int_equal(pi_model_open(first, &p, &m), PI_OK);
        pi_model_close(m);
        assert_true(all.monotone);
        assert_true(all.last == 1.0f);
        assert_true(all.calls >= 6);
        for (int k = 1; k <= all.calls; k++) {
            struct prog q = {0, k, 1, 0.0f};
            struct failalloc fa;
            struct pi_allocator a = failalloc_make(&fa, 0);
            char msg[512] = "";
            p.progress_user = &q;
            p.errbuf = msg;
            p.errbuf_cap = sizeof msg;
            assert_int_equal(pi_model_open_with(first, &p, &a, &m), PI_ERR_ABORTED);
            assert_null(m);
            assert_int_equal(fa.live, 0);
            assert_non_null(strstr(msg, "aborted"));
        }
    }
}

/* ---- other consumers of model files ----------------------------------------------------- */

/* pi_model_quantize reads one file: a split part is refused, nothing written. */
static void test_quantize_refuses_split(void **state) {
    (void)state;
    const char *out = path_of(g_dir, "quantized.gguf");
    remove(out);
    for (int k = 1; k <= 3; k++) {
        char name[128];
        snprintf(name, sizeof name, "tiny-silu-gqa.q4_0-%05d-of-00003.gguf", k);
        pi_quantize_params q;
        pi_quantize_default_params(&q);
        q.type = PI_TYPE_Q8_0;
        q.allow_requantize = 1;
        char msg[512] = "";
        q.errbuf = msg;
        q.errbuf_cap = sizeof msg;
        assert_int_equal(pi_model_quantize(path_of(g_fixtures, name), out, &q),
                         PI_ERR_UNSUPPORTED);
        assert_non_null(strstr(msg, "split model"));
        assert_int_equal(access(out, F_OK), -1);
    }
}

/* A state saved on a split model loads back into a new context over it and gives the
 * same next logits. */
static void test_state_round_trip(void **state) {
    (void)state;
    pi_model *m = open_ok(path_of(g_fixtures, "tiny-silu-gqa.q4_0-00001-of-00003.gguf"),
                          PI_LOAD_MMAP, 0);
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 32;
    cp.n_threads = 1;
    pi_ctx *a, *b;
    assert_int_equal(pi_ctx_create(m, &cp, &a), PI_OK);
    assert_int_equal(pi_ctx_create(m, &cp, &b), PI_OK);
    assert_int_equal(pi_ctx_decode(a, TOKS, 5), PI_OK);
    const char *sp = path_of(g_dir, "split.state");
    assert_int_equal(pi_ctx_state_save_file(a, -1, sp), PI_OK);
    assert_int_equal(pi_ctx_state_load_file(b, -1, sp), PI_OK);
    assert_int_equal(pi_ctx_decode(a, TOKS + 5, 1), PI_OK);
    assert_int_equal(pi_ctx_decode(b, TOKS + 5, 1), PI_OK);
    assert_memory_equal(pi_ctx_logits(a), pi_ctx_logits(b),
                        (size_t)pi_model_n_vocab(m) * sizeof(float));
    remove(sp);
    pi_ctx_destroy(a);
    pi_ctx_destroy(b);
    pi_model_close(m);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODELS_DIR SPLIT_FIXTURES_DIR WORK_DIR\n", argv[0]);
        return 2;
    }
    g_models = argv[1];
    g_fixtures = argv[2];
    g_dir = argv[3];
    mkdir(g_dir, 0755);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_split_logits_equal),
        cmocka_unit_test(test_gguf_py_split_logits_equal),
        cmocka_unit_test(test_missing_part),
        cmocka_unit_test(test_swapped_parts),
        cmocka_unit_test(test_count_mismatch),
        cmocka_unit_test(test_duplicate_tensor),
        cmocka_unit_test(test_non_first_part),
        cmocka_unit_test(test_truncated_part),
        cmocka_unit_test(test_part_of_another_split),
        cmocka_unit_test(test_buffer_refuses_split),
        cmocka_unit_test(test_alloc_failure_every_step),
        cmocka_unit_test(test_progress_and_abort),
        cmocka_unit_test(test_quantize_refuses_split),
        cmocka_unit_test(test_state_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
