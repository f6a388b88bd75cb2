/* PowerInfer's GPU index file (lib/plan/gpuidx.c): the committed fixtures written the
 * way PowerInfer writes them (tests/fixtures/make_gpuidx.py), every defect the reader
 * must name, truncation at every length and corruption of every byte, round trips of
 * our writer, its error paths, and allocation failures in both directions.
 *
 *     test_gpuidx FIXTURE_DIR WORK_DIR      the tests
 *     test_gpuidx --write PATH              write the OURS_* index below to PATH
 *                                           (read by tests/format/test_gpuidx.py) */
#define _POSIX_C_SOURCE 200809L /* mkdir, opendir, setrlimit */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#ifndef _WIN32
#  include <sys/resource.h>
#endif
#include <sys/stat.h>
#include <cmocka.h>

#include "failalloc.h"
#include "testfile.h"
#include "plan/gpuidx.h"
#include "portable.h" /* last: Windows shims of mkdir, mkdtemp */

/* The system's words for a missing file: strerror(ENOENT), or Windows' message for
 * ERROR_FILE_NOT_FOUND / ERROR_PATH_NOT_FOUND (FormatMessage, os_win32.c). */
#ifdef _WIN32
#  define NO_SUCH_FILE "not found"
#else
#  define NO_SUCH_FILE "No such file or directory"
#endif

static const char *fixture_dir, *work_dir;

/* The fixtures' content (make_gpuidx.py: N_LAYER, N_FF, LAYER0, CAPACITY, PLAN_KEYS). */
enum { FIX_LAYERS = 3, FIX_FF = 40 };
static const int fix_layer0[] = {0, 3, 4, 9, 16, 21, 22, 27, 35, 39};
#define FIX_CAPACITY 123456789ull
#define FIX_MODEL_ID 0x0123456789ABCDEFull
#define FIX_STATS_ID 0xFEDCBA9876543210ull
#define FIX_BUDGET   (8ull << 30)

/* What --write writes; tests/format/test_gpuidx.py expects the same. */
enum { OURS_LAYERS = 4, OURS_FF = 40 };
#define OURS_CAPACITY 123456789012ull
#define OURS_MODEL_ID 0x0123456789ABCDEFull
#define OURS_STATS_ID 0xFEDCBA9876543210ull
#define OURS_BUDGET   (1ull << 34)

static int ours_on(int64_t l, int64_t r) {
    return l == 0 ? r % 3 == 0 : l == 1 ? 0 : l == 2 ? 1 : r == OURS_FF - 1;
}

static const char *path_in(const char *dir, const char *name) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static const char *fixture(const char *name) {
    return path_in(fixture_dir, name);
}

static const char *work(const char *name) {
    return path_in(work_dir, name);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Entries of the work dir whose name starts with `prefix`. */
static int count_in_work(const char *prefix) {
    DIR *d = opendir(work_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static void write_bytes(const char *path, const uint8_t *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(p, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static int is_zeroed(const struct pi_gpuidx *g) {
    static const struct pi_gpuidx zero;
    return memcmp(g, &zero, sizeof zero) == 0;
}

static void check_fixture_content(const struct pi_gpuidx *g) {
    assert_int_equal(g->n_layer, FIX_LAYERS);
    assert_int_equal(g->n_ff, FIX_FF);
    assert_true(g->capacity == FIX_CAPACITY);
    for (int64_t r = 0; r < FIX_FF; r++) {
        int on = 0;
        for (size_t i = 0; i < sizeof fix_layer0 / sizeof fix_layer0[0]; i++)
            on |= fix_layer0[i] == r;
        assert_int_equal(g->neuron[r], on);
        assert_int_equal(g->neuron[FIX_FF + r], 0);
        assert_int_equal(g->neuron[2 * FIX_FF + r], 1);
    }
}

static void test_read_powerinfer(void **state) {
    (void)state;
    /* Old type id 18 (PowerInfer's gguf-py), then today's 26. */
    const char *files[] = {"powerinfer.gpuidx", "powerinfer-i32.gpuidx"};
    for (int i = 0; i < 2; i++) {
        struct pi_gpuidx g;
        struct pi_error err = {0};
        int st = pi_gpuidx_read(fixture(files[i]), FIX_LAYERS, FIX_FF, NULL, &g, &err);
        if (st != PI_OK)
            fail_msg("%s: %s", files[i], err.msg);
        check_fixture_content(&g);
        assert_int_equal(g.has_key, 0);
        assert_true(g.model_id == 0 && g.stats_id == 0 && g.budget == 0);
        pi_gpuidx_free(&g);
        assert_true(is_zeroed(&g));
    }
    struct pi_gpuidx g;
    struct pi_error err = {0};
    assert_int_equal(pi_gpuidx_read(fixture("plan-keys.gpuidx"), FIX_LAYERS, FIX_FF,
                                    &pi_default_allocator, &g, &err),
                     PI_OK);
    check_fixture_content(&g);
    assert_int_equal(g.has_key, 1);
    assert_true(g.model_id == FIX_MODEL_ID);
    assert_true(g.stats_id == FIX_STATS_ID);
    assert_true(g.budget == FIX_BUDGET);
    pi_gpuidx_free(&g);
    pi_gpuidx_free(&g); /* a zeroed struct */
    pi_gpuidx_free(NULL);
}

static void expect_error(const char *path, int64_t n_layer, int64_t n_ff, int status,
                         const char *needle) {
    struct pi_gpuidx g;
    memset(&g, 0xa5, sizeof g);
    struct pi_error err = {0};
    int st = pi_gpuidx_read(path, n_layer, n_ff, NULL, &g, &err);
    if (st != status || !strstr(err.msg, needle))
        fail_msg("%s (%lld x %lld): status %d, want %d; message '%s' should contain '%s'", path,
                 (long long)n_layer, (long long)n_ff, st, status, err.msg, needle);
    assert_true(is_zeroed(&g));
}

static void test_read_errors(void **state) {
    (void)state;
    static const struct {
        const char *file, *needle;
    } bad[] = {
        {"bad-unsorted.gpuidx", "'blk.0.gpu_bucket' is not sorted: entry 3 is 4 after 9"},
        {"bad-value2.gpuidx", "'blk.0.gpu_idx': neuron 5 has value 2, not 0 or 1"},
        {"bad-disagree.gpuidx", "'blk.0.gpu_bucket' lists neuron 2, which 'blk.0.gpu_idx' "
                                "marks 0"},
        {"bad-duplicate.gpuidx", "'blk.0.gpu_bucket': neuron 3 is listed twice"},
        {"bad-out-of-range.gpuidx", "'blk.2.gpu_bucket': entry 39 is neuron 40, out of range"},
        {"bad-count.gpuidx", "'blk.0.gpu_bucket' holds 9 ids, 'blk.0.gpu_idx' marks 10"},
        {"bad-short-idx.gpuidx", "'blk.1.gpu_idx' has 39 neurons, the model has 40"},
        {"bad-f32-idx.gpuidx", "'blk.1.gpu_idx' has type 0, expected I32"},
        {"bad-2d-bucket.gpuidx", "'blk.0.gpu_bucket' is not 1-D (dimension 1 is 5)"},
        {"bad-missing-tensor.gpuidx", "5 tensors, expected 2 per layer = 6"},
        {"bad-no-capacity.gpuidx", "split.vram_capacity is missing"},
        {"bad-capacity-u32.gpuidx", "split.vram_capacity must be a u64"},
        {"bad-block-count.gpuidx", "block_count is 4, the model has 3 layers"},
        {"bad-names.gpuidx", "tensor 0 is 'blk.0.gpu_bucket', expected 'blk.0.gpu_idx'"},
        {"bad-plan-partial.gpuidx", "powerinfer.plan.* keys come together: 1 of"},
        {"bad-plan-u32.gpuidx", "powerinfer.plan.stats_id must be a u64"},
        {"bad-truncated.gpuidx", "runs past the end of the file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        expect_error(fixture(bad[i].file), FIX_LAYERS, FIX_FF, PI_ERR_FORMAT, bad[i].needle);
        expect_error(fixture(bad[i].file), FIX_LAYERS, FIX_FF, PI_ERR_FORMAT, "gpu index '");
    }
    /* The model's shape must be the file's. */
    const char *good = fixture("powerinfer.gpuidx");
    expect_error(good, FIX_LAYERS, FIX_FF + 1, PI_ERR_FORMAT, "has 40 neurons, the model has 41");
    expect_error(good, FIX_LAYERS + 1, FIX_FF, PI_ERR_FORMAT, "block_count is 3, the model has 4");
    expect_error(good, FIX_LAYERS - 1, FIX_FF, PI_ERR_FORMAT, "block_count is 3, the model has 2");
    /* Not GGUF at all, empty, too large for the shape, missing, a directory. */
    const char *text = work("text.gpuidx");
    write_bytes(text, (const uint8_t *)"hello, world\n", 13);
    expect_error(text, FIX_LAYERS, FIX_FF, PI_ERR_FORMAT, "expected 'GGUF' or 'PWRI'");
    write_bytes(text, (const uint8_t *)"", 0);
    expect_error(text, FIX_LAYERS, FIX_FF, PI_ERR_FORMAT, "empty file");
    static uint8_t big[1100000] = {'G', 'G', 'U', 'F', 3};
    write_bytes(text, big, sizeof big);
    expect_error(text, 1, 1, PI_ERR_FORMAT, "more than an index of 1 layers x 1 neurons");
    expect_error(work("no-such-file.gpuidx"), FIX_LAYERS, FIX_FF, PI_ERR_IO,
                 NO_SUCH_FILE);
    expect_error(work_dir, FIX_LAYERS, FIX_FF, PI_ERR_IO, "not a regular file");
    /* Arguments. */
    struct pi_gpuidx g;
    expect_error(NULL, FIX_LAYERS, FIX_FF, PI_ERR_INVALID_ARG, "NULL path");
    expect_error(good, 0, FIX_FF, PI_ERR_INVALID_ARG, "out of range");
    expect_error(good, FIX_LAYERS, 0, PI_ERR_INVALID_ARG, "out of range");
    expect_error(good, FIX_LAYERS, (int64_t)INT32_MAX + 1, PI_ERR_INVALID_ARG, "out of range");
    expect_error(good, PI_GPUIDX_MAX_LAYER + 1, FIX_FF, PI_ERR_INVALID_ARG, "out of range");
    assert_int_equal(pi_gpuidx_read(good, FIX_LAYERS, FIX_FF, NULL, NULL, NULL),
                     PI_ERR_INVALID_ARG);
    assert_int_equal(
        pi_gpuidx_read(fixture("bad-value2.gpuidx"), FIX_LAYERS, FIX_FF, NULL, &g, NULL),
        PI_ERR_FORMAT); /* no error record */
    assert_true(is_zeroed(&g));
}

/* Every prefix of a good file fails with PI_ERR_FORMAT; every single-byte corruption
 * either fails cleanly or reads an index that is consistent (under ASan: no overrun). */
static void test_truncated_and_corrupted(void **state) {
    (void)state;
    size_t n;
    uint8_t *buf = tf_slurp(fixture("plan-keys.gpuidx"), &n);
    const char *path = work("cut.gpuidx");
    /* The last bucket is 40 ids, 160 bytes: the file ends with data, not padding. */
    for (size_t len = 0; len < n; len++) {
        write_bytes(path, buf, len);
        struct pi_gpuidx g;
        struct pi_error err = {0};
        int st = pi_gpuidx_read(path, FIX_LAYERS, FIX_FF, NULL, &g, &err);
        if (st != PI_ERR_FORMAT)
            fail_msg("prefix of %zu bytes: status %d (%s)", len, st, err.msg);
        assert_true(is_zeroed(&g));
    }
    static const uint8_t flips[] = {0xff, 0x01, 0x80};
    long ok = 0, failed = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t f = 0; f < sizeof flips; f++) {
            buf[i] ^= flips[f];
            write_bytes(path, buf, n);
            buf[i] ^= flips[f];
            struct failalloc fa;
            struct pi_allocator a = failalloc_make(&fa, 0);
            struct pi_gpuidx g;
            struct pi_error err = {0};
            int st = pi_gpuidx_read(path, FIX_LAYERS, FIX_FF, &a, &g, &err);
            if (st == PI_OK) {
                ok++;
                for (int64_t j = 0; j < FIX_LAYERS * FIX_FF; j++)
                    assert_true(g.neuron[j] <= 1);
                pi_gpuidx_free(&g);
            } else {
                failed++;
                assert_true(st == PI_ERR_FORMAT || st == PI_ERR_UNSUPPORTED);
                assert_true(err.msg[0] != '\0');
                assert_true(is_zeroed(&g));
            }
            assert_int_equal(fa.live, 0);
        }
    assert_true(failed > 0 && ok > 0); /* e.g. flips in key values or padding are harmless */
    free(buf);
}

static void fill_ours(struct pi_gpuidx *g, uint8_t *neuron) {
    memset(g, 0, sizeof *g);
    g->n_layer = OURS_LAYERS;
    g->n_ff = OURS_FF;
    g->neuron = neuron;
    for (int64_t l = 0; l < OURS_LAYERS; l++)
        for (int64_t r = 0; r < OURS_FF; r++)
            neuron[l * OURS_FF + r] = (uint8_t)ours_on(l, r);
    g->capacity = OURS_CAPACITY;
    g->model_id = OURS_MODEL_ID;
    g->stats_id = OURS_STATS_ID;
    g->budget = OURS_BUDGET;
}

static void expect_equal(const struct pi_gpuidx *a, const struct pi_gpuidx *b) {
    assert_int_equal(a->n_layer, b->n_layer);
    assert_int_equal(a->n_ff, b->n_ff);
    assert_memory_equal(a->neuron, b->neuron, (size_t)(a->n_layer * a->n_ff));
    assert_true(a->capacity == b->capacity);
    assert_true(a->model_id == b->model_id);
    assert_true(a->stats_id == b->stats_id);
    assert_true(a->budget == b->budget);
}

static void test_roundtrip(void **state) {
    (void)state;
    static uint8_t neuron[OURS_LAYERS * OURS_FF];
    struct pi_gpuidx g, back;
    struct pi_error err = {0};
    fill_ours(&g, neuron);
    const char *path = work("rt.gpuidx");
    remove(path);
    assert_int_equal(pi_gpuidx_write(path, &g, &err), PI_OK);
    assert_int_equal(pi_gpuidx_read(path, OURS_LAYERS, OURS_FF, NULL, &back, &err), PI_OK);
    assert_int_equal(back.has_key, 1);
    expect_equal(&g, &back);
    /* Written again over the old file, with other content, and read back. */
    for (int64_t i = 0; i < OURS_LAYERS * OURS_FF; i++)
        neuron[i] ^= (uint8_t)(i % 5 == 0);
    g.capacity = 0;
    g.model_id = 1;
    g.has_key = 0; /* ignored: the keys are always written */
    struct pi_gpuidx back2;
    assert_int_equal(pi_gpuidx_write(path, &g, &err), PI_OK);
    assert_int_equal(pi_gpuidx_read(path, OURS_LAYERS, OURS_FF, NULL, &back2, &err), PI_OK);
    expect_equal(&g, &back2);
    assert_int_equal(back2.has_key, 1);
    /* A struct returned by the reader writes as it is (its own allocator). */
    assert_int_equal(pi_gpuidx_write(path, &back2, &err), PI_OK);
    pi_gpuidx_free(&back);
    pi_gpuidx_free(&back2);
    /* A large shape: odd n_ff, every layer different. */
    enum { BL = 7, BF = 1000 };
    uint8_t *big = malloc(BL * BF);
    assert_non_null(big);
    uint32_t x = 12345;
    for (int i = 0; i < BL * BF; i++) {
        x = x * 1664525u + 1013904223u;
        big[i] = (uint8_t)((x >> 24) % (uint32_t)(i / BF + 2) == 0);
    }
    struct pi_gpuidx gb = {.n_layer = BL, .n_ff = BF, .neuron = big, .capacity = 42};
    assert_int_equal(pi_gpuidx_write(work("big.gpuidx"), &gb, &err), PI_OK);
    assert_int_equal(pi_gpuidx_read(work("big.gpuidx"), BL, BF, NULL, &back, &err), PI_OK);
    expect_equal(&gb, &back);
    pi_gpuidx_free(&back);
    free(big);
    assert_int_equal(count_in_work("rt.gpuidx.tmp"), 0);
    assert_int_equal(count_in_work("big.gpuidx.tmp"), 0);
}

static void test_write_errors(void **state) {
    (void)state;
    static uint8_t neuron[OURS_LAYERS * OURS_FF];
    struct pi_gpuidx g;
    struct pi_error err = {0};
    fill_ours(&g, neuron);
    const char *path = work("werr.gpuidx");
    remove(path);
    assert_int_equal(pi_gpuidx_write(NULL, &g, &err), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_gpuidx_write(path, NULL, &err), PI_ERR_INVALID_ARG);
    neuron[7] = 2;
    assert_int_equal(pi_gpuidx_write(path, &g, &err), PI_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "layer 0 neuron 7 has value 2"));
    neuron[7] = (uint8_t)ours_on(0, 7);
    g.n_ff = 0;
    assert_int_equal(pi_gpuidx_write(path, &g, &err), PI_ERR_INVALID_ARG);
    g.n_ff = OURS_FF;
    g.neuron = NULL;
    assert_int_equal(pi_gpuidx_write(path, &g, &err), PI_ERR_INVALID_ARG);
    g.neuron = neuron;
    assert_false(exists(path));
    /* A directory that does not exist. */
    assert_int_equal(pi_gpuidx_write(work("no-such-dir/x.gpuidx"), &g, &err), PI_ERR_IO);
    assert_non_null(strstr(err.msg, NO_SUCH_FILE));
    /* The target is a directory: refused before anything is written. */
    const char *dir = work("dir.gpuidx");
    mkdir(dir, 0777);
    assert_int_equal(pi_gpuidx_write(dir, &g, &err), PI_ERR_IO);
    assert_non_null(strstr(err.msg, "is a directory"));
    assert_int_equal(count_in_work("dir.gpuidx.tmp"), 0);
    /* A stale temporary file is skipped, not overwritten. */
    char stale[1024];
    snprintf(stale, sizeof stale, "%s.tmp0", path);
    write_bytes(stale, (const uint8_t *)"stale", 5);
    assert_int_equal(pi_gpuidx_write(path, &g, &err), PI_OK);
    size_t n;
    uint8_t *s = tf_slurp(stale, &n);
    assert_int_equal(n, 5);
    free(s);
    remove(stale);
    assert_int_equal(count_in_work("werr.gpuidx.tmp"), 0);
#ifndef _WIN32 /* Windows has no file size limit (RLIMIT_FSIZE) to play a full disk */
    /* A full disk, played by a file size limit: PI_ERR_IO, no temporary left, and the
     * index already at `path` is left as it was. */
    struct pi_gpuidx before;
    assert_int_equal(pi_gpuidx_read(path, OURS_LAYERS, OURS_FF, NULL, &before, &err), PI_OK);
    neuron[0] ^= 1;
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit lim = {600, old.rlim_max};
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int st = pi_gpuidx_write(path, &g, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, PI_ERR_IO);
    assert_non_null(strstr(err.msg, "File too large"));
    assert_int_equal(count_in_work("werr.gpuidx.tmp"), 0);
    struct pi_gpuidx after;
    assert_int_equal(pi_gpuidx_read(path, OURS_LAYERS, OURS_FF, NULL, &after, &err), PI_OK);
    expect_equal(&before, &after);
    pi_gpuidx_free(&before);
    pi_gpuidx_free(&after);
#endif

}

static void test_alloc_failures(void **state) {
    (void)state;
    /* Reading: every failing allocation gives PI_ERR_NOMEM, a zeroed struct, no leak. */
    const char *files[] = {"powerinfer.gpuidx", "plan-keys.gpuidx"};
    for (int i = 0; i < 2; i++) {
        long n;
        for (n = 1; n < 1000; n++) {
            struct failalloc fa;
            struct pi_allocator a = failalloc_make(&fa, n);
            struct pi_gpuidx g;
            struct pi_error err = {0};
            int st = pi_gpuidx_read(fixture(files[i]), FIX_LAYERS, FIX_FF, &a, &g, &err);
            if (st == PI_OK) {
                check_fixture_content(&g);
                pi_gpuidx_free(&g);
                assert_int_equal(fa.live, 0);
                break;
            }
            if (st != PI_ERR_NOMEM)
                fail_msg("%s, allocation %ld failing: status %d (%s)", files[i], n, st, err.msg);
            assert_true(is_zeroed(&g));
            assert_int_equal(fa.live, 0);
        }
        assert_true(n > 3 && n < 1000);
    }
    /* Writing: PI_ERR_NOMEM, no leak, neither the file nor a temporary left. */
    static uint8_t neuron[OURS_LAYERS * OURS_FF];
    const char *path = work("oom.gpuidx");
    remove(path);
    long n;
    for (n = 1; n < 100; n++) {
        struct failalloc fa;
        struct pi_gpuidx g;
        fill_ours(&g, neuron);
        g.alloc = failalloc_make(&fa, n);
        struct pi_error err = {0};
        int st = pi_gpuidx_write(path, &g, &err);
        assert_int_equal(fa.live, 0);
        if (st == PI_OK)
            break;
        assert_int_equal(st, PI_ERR_NOMEM);
        assert_false(exists(path));
        assert_int_equal(count_in_work("oom.gpuidx"), 0);
    }
    assert_true(n > 1 && n < 100);
    assert_true(exists(path));
}

static int write_ours(const char *path) {
    static uint8_t neuron[OURS_LAYERS * OURS_FF];
    struct pi_gpuidx g;
    struct pi_error err = {0};
    fill_ours(&g, neuron);
    if (pi_gpuidx_write(path, &g, &err) != PI_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write") == 0)
        return write_ours(argv[2]);
    if (argc != 3) {
        fprintf(stderr, "usage: %s FIXTURE_DIR WORK_DIR | --write PATH\n", argv[0]);
        return 2;
    }
    fixture_dir = argv[1];
    work_dir = argv[2];
    mkdir(work_dir, 0777);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_powerinfer),
        cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_truncated_and_corrupted),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
