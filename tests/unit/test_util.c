/* Unit tests of lib/util: errors, allocation wrapper, file mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "util/alloc.h"
#include "util/error.h"
#include "util/log.h"
#include "util/os.h"

static int fails_with(struct pi_error *e) {
    PI_FAIL(e, PI_ERR_FORMAT, "bad thing at %d", 42);
}

static int propagates(struct pi_error *e) {
    PI_TRY(fails_with(e));
    return PI_OK;
}

static void test_error_macros(void **state) {
    (void)state;
    struct pi_error e;
    pi_error_clear(&e);
    assert_int_equal(propagates(&e), PI_ERR_FORMAT);
    assert_int_equal(e.status, PI_ERR_FORMAT);
    assert_string_equal(e.msg, "bad thing at 42");
    pi_error_prefix(&e, "file %s", "x.gguf");
    assert_string_equal(e.msg, "file x.gguf: bad thing at 42");
    assert_int_equal(pi_error_set(NULL, PI_ERR_IO, "ignored"), PI_ERR_IO);
}

static void test_error_truncates(void **state) {
    (void)state;
    struct pi_error e;
    char big[2 * PI_ERRMSG_CAP];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    pi_error_set(&e, PI_ERR_IO, "%s", big);
    assert_int_equal(strlen(e.msg), PI_ERRMSG_CAP - 1);
}

static void test_calloc_overflow(void **state) {
    (void)state;
    const struct pi_allocator *a = &pi_default_allocator;
    assert_null(pi_calloc(a, (size_t)-1 / 2, 4));
    char *p = pi_calloc(a, 3, 5);
    assert_non_null(p);
    for (int i = 0; i < 15; i++)
        assert_int_equal(p[i], 0);
    pi_free(a, p);
    pi_free(a, NULL);
    char *s = pi_strndup(a, "abcdef", 3);
    assert_string_equal(s, "abc");
    pi_free(a, s);
}

struct logged {
    int n;
    int level;
    char msg[64];
};

static void sink(void *user, int level, const char *msg) {
    struct logged *l = user;
    l->n++;
    l->level = level;
    snprintf(l->msg, sizeof l->msg, "%s", msg);
}

static void test_log_levels(void **state) {
    (void)state;
    struct logged l = {0, -1, ""};
    struct pi_logger lg = {sink, &l, PI_LOG_WARN};
    pi_log(&lg, PI_LOG_INFO, "dropped");
    assert_int_equal(l.n, 0);
    pi_log(&lg, PI_LOG_ERROR, "kept %d", 7);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.level, PI_LOG_ERROR);
    assert_string_equal(l.msg, "kept 7");
    struct pi_logger silent = {NULL, NULL, 0};
    pi_log(&silent, PI_LOG_ERROR, "nobody listens");
    pi_log(NULL, PI_LOG_ERROR, "nobody listens");
}

static void test_map_errors(void **state) {
    (void)state;
    struct pi_file_map m;
    struct pi_error e;
    assert_int_equal(pi_os_map_file("/nonexistent/dir/file.gguf", &m, &e), PI_ERR_IO);
    assert_non_null(strstr(e.msg, "cannot open"));
    assert_null(m.data);
    assert_int_equal(pi_os_map_file("/", &m, &e), PI_ERR_IO);
    assert_non_null(strstr(e.msg, "not a regular file"));
}

static void test_map_file(void **state) {
    (void)state;
    char path[] = "/tmp/pi_test_map_XXXXXX.bin";
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs("hello", fp);
    fclose(fp);
    struct pi_file_map m;
    struct pi_error e;
    assert_int_equal(pi_os_map_file(path, &m, &e), PI_OK);
    assert_int_equal(m.size, 5);
    assert_memory_equal(m.data, "hello", 5);
    pi_os_unmap_file(&m);
    assert_null(m.data);
    remove(path);
}

/* A read copy starts on a page boundary, and on POSIX systems a file of 8 MiB or more on
 * a 2 MiB one (so that all of its whole huge pages can be huge), with the file's bytes.
 * (Windows: large pages need a privilege; a page boundary.) */
static void test_read_file_alignment(void **state) {
    (void)state;
    static const size_t sizes[] = {5, (size_t)9 << 20};
    for (size_t k = 0; k < 2; k++) {
        char path[] = "/tmp/pi_test_read_XXXXXX.bin";
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        for (size_t i = 0; i < sizes[k]; i++)
            fputc((int)((i * 7u) ^ (i >> 13)) & 0xff, fp);
        fclose(fp);
        struct pi_file_map m;
        struct pi_error e;
        assert_int_equal(pi_os_read_file(path, &pi_default_allocator, NULL, NULL, &m, &e), PI_OK);
        assert_int_equal(m.size, sizes[k]);
#ifdef _WIN32
        assert_int_equal((uintptr_t)m.data % 4096, 0);
#else
        assert_int_equal((uintptr_t)m.data % (k ? (uintptr_t)2 << 20 : 4096), 0);
#endif
        size_t bad = 0;
        for (size_t i = 0; i < sizes[k]; i++)
            bad += m.data[i] != (uint8_t)(((i * 7u) ^ (i >> 13)) & 0xff);
        assert_int_equal(bad, 0);
        pi_os_unmap_file(&m);
        assert_null(m.data);
        remove(path);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_macros),   cmocka_unit_test(test_error_truncates),
        cmocka_unit_test(test_calloc_overflow), cmocka_unit_test(test_log_levels),
        cmocka_unit_test(test_map_errors),     cmocka_unit_test(test_map_file),
        cmocka_unit_test(test_read_file_alignment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
