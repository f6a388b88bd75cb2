/* GGUF reader and writer: round trip, every truncation, random corruption,
 * allocation failure. The malformed-file corpus is in test_corpus.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "failalloc.h"
#include "model/gguf.h"
#include "runtime/types.h"
#include "testmodel.h"

static const char *tmp_path(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name);
    return buf;
}

static uint8_t *slurp(const char *path, uint64_t *size) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *size = (uint64_t)n;
    return buf;
}

/* A file exercising every value type, written by our writer. */
static uint8_t *sample(uint64_t *size, uint32_t alignment) {
    struct gguf_writer *w;
    assert_int_equal(gguf_writer_create(&pi_default_allocator, &w), PI_OK);
    if (alignment)
        assert_int_equal(gguf_writer_set_alignment(w, alignment), PI_OK);
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    uint32_t u32 = 4000000000u;
    int32_t i32 = -2000000000;
    float f32 = 1.5f;
    uint8_t b = 1;
    uint64_t u64 = 18000000000000000000ull;
    int64_t i64 = -9000000000000000000ll;
    double f64 = -2.25;
    assert_int_equal(gguf_writer_add_scalar(w, "t.u8", PI_META_U8, &u8), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.i8", PI_META_I8, &i8), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.u16", PI_META_U16, &u16), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.i16", PI_META_I16, &i16), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.u32", PI_META_U32, &u32), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.i32", PI_META_I32, &i32), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.f32", PI_META_F32, &f32), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.bool", PI_META_BOOL, &b), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.u64", PI_META_U64, &u64), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.i64", PI_META_I64, &i64), PI_OK);
    assert_int_equal(gguf_writer_add_scalar(w, "t.f64", PI_META_F64, &f64), PI_OK);
    assert_int_equal(gguf_writer_add_string(w, "t.str", "h\xc3\xa9llo"), PI_OK);
    assert_int_equal(gguf_writer_add_string(w, "t.empty", ""), PI_OK);
    int32_t arr[5] = {1, -2, 3, -4, 5};
    assert_int_equal(gguf_writer_add_array(w, "t.arr", PI_META_I32, arr, 5), PI_OK);
    const char *strs[3] = {"a", "", "ccc"};
    assert_int_equal(gguf_writer_add_string_array(w, "t.strs", strs, 3), PI_OK);
    /* Writer argument checks. */
    assert_int_equal(gguf_writer_add_scalar(w, "t.u8", PI_META_U8, &u8), PI_ERR_INVALID_ARG);
    assert_int_equal(gguf_writer_add_scalar(w, "", PI_META_U8, &u8), PI_ERR_INVALID_ARG);
    uint8_t two = 2;
    assert_int_equal(gguf_writer_add_scalar(w, "t.bad", PI_META_BOOL, &two), PI_ERR_INVALID_ARG);
    assert_int_equal(gguf_writer_add_scalar(w, "t.bad", PI_META_STRING, &u8), PI_ERR_INVALID_ARG);

    float f[15];
    for (int i = 0; i < 15; i++)
        f[i] = (float)i * 0.5f;
    int64_t ne[2] = {5, 3};
    assert_int_equal(gguf_writer_add_tensor(w, "w.f32", PI_TYPE_F32, 2, ne, f), PI_OK);
    uint8_t q[2 * 34];
    for (int i = 0; i < (int)sizeof q; i++)
        q[i] = (uint8_t)(i * 7);
    int64_t ne2[2] = {32, 2};
    assert_int_equal(gguf_writer_add_tensor(w, "w.q8", PI_TYPE_Q8_0, 2, ne2, q), PI_OK);
    int64_t bad[1] = {33};
    assert_int_equal(gguf_writer_add_tensor(w, "w.bad", PI_TYPE_Q8_0, 1, bad, q),
                     PI_ERR_INVALID_ARG);
    assert_int_equal(gguf_writer_add_tensor(w, "w.f32", PI_TYPE_F32, 2, ne, f),
                     PI_ERR_INVALID_ARG);
    /* MXFP4 last: every truncation of its 68 bytes (4 blocks of 17) is refused */
    uint8_t mx[4 * 17];
    for (int i = 0; i < (int)sizeof mx; i++)
        mx[i] = (uint8_t)(i * 13 + 1);
    int64_t ne3[2] = {64, 2};
    assert_int_equal(gguf_writer_add_tensor(w, "w.mxfp4", PI_TYPE_MXFP4, 2, ne3, mx), PI_OK);
    int64_t bad3[2] = {48, 2};
    assert_int_equal(gguf_writer_add_tensor(w, "w.bad3", PI_TYPE_MXFP4, 2, bad3, mx),
                     PI_ERR_INVALID_ARG);
    const char *path = tmp_path("pi_test_gguf_sample.gguf");
    assert_int_equal(gguf_writer_write_file(w, path, GGUF_MAGIC_GGUF, NULL), PI_OK);
    gguf_writer_destroy(w);
    uint8_t *buf = slurp(path, size);
    remove(path);
    return buf;
}

static void test_roundtrip(void **state) {
    (void)state;
    uint64_t size;
    uint8_t *buf = sample(&size, 0);
    struct gguf_file f;
    struct pi_error e;
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &e), PI_OK);
    assert_int_equal(f.magic, GGUF_MAGIC_GGUF);
    assert_int_equal(f.version, 3);
    assert_int_equal(f.alignment, 32);
    assert_int_equal(f.n_kv, 15);
    int64_t v;
    double d;
    const char *s;
    uint64_t len;
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.u8"), 0, &v), PI_OK);
    assert_int_equal(v, 200);
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.i8"), 0, &v), PI_OK);
    assert_int_equal(v, -100);
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.u16"), 0, &v), PI_OK);
    assert_int_equal(v, 60000);
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.i16"), 0, &v), PI_OK);
    assert_int_equal(v, -30000);
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.u32"), 0, &v), PI_OK);
    assert_int_equal(v, 4000000000ll);
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.i32"), 0, &v), PI_OK);
    assert_int_equal(v, -2000000000ll);
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.bool"), 0, &v), PI_OK);
    assert_int_equal(v, 1);
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.u64"), 0, &v), PI_ERR_RANGE);
    assert_int_equal(gguf_kv_float(&f, gguf_find_kv(&f, "t.u64"), 0, &d), PI_OK);
    assert_true(d == 18000000000000000000.0);
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.i64"), 0, &v), PI_OK);
    assert_true(v == -9000000000000000000ll);
    assert_int_equal(gguf_kv_float(&f, gguf_find_kv(&f, "t.f32"), 0, &d), PI_OK);
    assert_true(d == 1.5);
    assert_int_equal(gguf_kv_float(&f, gguf_find_kv(&f, "t.f64"), 0, &d), PI_OK);
    assert_true(d == -2.25);
    assert_int_equal(gguf_kv_int(&f, gguf_find_kv(&f, "t.f64"), 0, &v), PI_ERR_TYPE);
    assert_int_equal(gguf_kv_str(&f, gguf_find_kv(&f, "t.str"), 0, &s, &len), PI_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(s, "h\xc3\xa9llo", 6);
    assert_int_equal(gguf_kv_str(&f, gguf_find_kv(&f, "t.empty"), 0, &s, &len), PI_OK);
    assert_int_equal(len, 0);
    const struct gguf_kv *arr = gguf_find_kv(&f, "t.arr");
    assert_int_equal(arr->type, PI_META_ARRAY);
    assert_int_equal(arr->elem_type, PI_META_I32);
    assert_int_equal(arr->n, 5);
    assert_int_equal(gguf_kv_int(&f, arr, 3, &v), PI_OK);
    assert_int_equal(v, -4);
    assert_int_equal(gguf_kv_int(&f, arr, 5, &v), PI_ERR_RANGE);
    const struct gguf_kv *strs = gguf_find_kv(&f, "t.strs");
    assert_int_equal(gguf_kv_str(&f, strs, 2, &s, &len), PI_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "ccc", 3);
    assert_int_equal(gguf_kv_str(&f, strs, 1, &s, &len), PI_OK);
    assert_int_equal(len, 0);
    assert_int_equal(gguf_kv_str(&f, strs, 3, &s, &len), PI_ERR_RANGE);
    assert_int_equal(gguf_kv_str(&f, arr, 0, &s, &len), PI_ERR_TYPE);
    assert_null(gguf_find_kv(&f, "t.missing"));

    assert_int_equal(f.n_tensors, 3);
    int64_t i = gguf_find_tensor(&f, "w.q8");
    assert_int_equal(i, 1);
    const struct gguf_tensor *t = &f.tensors[i];
    assert_int_equal(t->type, PI_TYPE_Q8_0);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 32);
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->nbytes, 68);
    assert_int_equal(t->offset % 32, 0);
    assert_int_equal(t->data[5], (uint8_t)(5 * 7));
    t = &f.tensors[gguf_find_tensor(&f, "w.f32")];
    float x;
    memcpy(&x, t->data + 4 * 14, 4);
    assert_true(x == 7.0f);
    t = &f.tensors[gguf_find_tensor(&f, "w.mxfp4")];
    assert_int_equal(t->type, PI_TYPE_MXFP4);
    assert_int_equal(t->nbytes, 68);
    assert_int_equal(t->data[17], (uint8_t)(17 * 13 + 1));
    assert_int_equal(gguf_find_tensor(&f, "w.none"), -1);
    gguf_close(&f);
    free(buf);
}

static void test_alignment(void **state) {
    (void)state;
    uint64_t size;
    uint8_t *buf = sample(&size, 256);
    struct gguf_file f;
    struct pi_error e;
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &e), PI_OK);
    assert_int_equal(f.alignment, 256);
    assert_int_equal(f.data_off % 256, 0);
    for (uint64_t i = 0; i < f.n_tensors; i++)
        assert_int_equal(f.tensors[i].offset % 256, 0);
    gguf_close(&f);
    free(buf);
}

/* Every prefix shorter than the end of the last tensor's data is rejected with
 * PI_ERR_FORMAT and a message; longer prefixes (only trailing padding cut) parse. */
static void test_every_truncation(void **state) {
    (void)state;
    uint64_t size;
    uint8_t *buf = sample(&size, 0);
    struct gguf_file f;
    struct pi_error e;
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &e), PI_OK);
    uint64_t end = 0;
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        uint64_t te = f.data_off + f.tensors[i].offset + f.tensors[i].nbytes;
        end = te > end ? te : end;
    }
    gguf_close(&f);
    for (uint64_t n = 0; n < size; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size, so ASan sees any overread */
        memcpy(copy, buf, n);
        pi_error_clear(&e);
        int st = gguf_parse(&f, copy, n, &pi_default_allocator, &e);
        if (n < end) {
            if (st != PI_ERR_FORMAT)
                fail_msg("prefix of %llu bytes gave %d", (unsigned long long)n, st);
            assert_true(strlen(e.msg) > 0);
        } else {
            assert_int_equal(st, PI_OK);
        }
        gguf_close(&f);
        free(copy);
    }
    free(buf);
}

/* Random byte corruption never crashes, and every failure has a message. */
static void test_random_corruption(void **state) {
    (void)state;
    uint64_t size;
    uint8_t *buf = sample(&size, 0);
    uint32_t rng = 12345;
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 4000; iter++) {
        uint8_t *copy = malloc(size);
        memcpy(copy, buf, size);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            rng = rng * 1103515245u + 12345u;
            uint64_t at = (rng >> 8) % size;
            rng = rng * 1103515245u + 12345u;
            copy[at] = (uint8_t)(iter % 3 == 0 ? 0xff : rng >> 16);
        }
        struct gguf_file f;
        struct pi_error e;
        pi_error_clear(&e);
        int st = gguf_parse(&f, copy, size, &pi_default_allocator, &e);
        if (st == PI_OK) {
            ok++;
            for (uint64_t i = 0; i < f.n_kv; i++) {
                const struct gguf_kv *kv = gguf_find_kv(&f, f.kv[i].key);
                assert_ptr_equal(kv, &f.kv[i]);
                int64_t v;
                double d;
                const char *s;
                uint64_t len;
                for (uint64_t j = 0; j < kv->n && j < 8; j++) {
                    (void)gguf_kv_int(&f, kv, j, &v);
                    (void)gguf_kv_float(&f, kv, j, &d);
                    (void)gguf_kv_str(&f, kv, j, &s, &len);
                }
            }
        } else {
            bad++;
            assert_true(st == PI_ERR_FORMAT || st == PI_ERR_UNSUPPORTED);
            assert_true(strlen(e.msg) > 0);
        }
        gguf_close(&f);
        free(copy);
    }
    assert_true(ok > 0 && bad > 0);
    free(buf);
}

static void test_alloc_failure(void **state) {
    (void)state;
    uint64_t size;
    uint8_t *buf = sample(&size, 0);
    struct failalloc fa;
    for (long n = 1;; n++) {
        struct pi_allocator a = failalloc_make(&fa, n);
        struct gguf_file f;
        struct pi_error e;
        int st = gguf_parse(&f, buf, size, &a, &e);
        gguf_close(&f);
        assert_int_equal(fa.live, 0);
        if (st == PI_OK) {
            assert_true(fa.count < n); /* every allocation succeeded */
            break;
        }
        assert_int_equal(st, PI_ERR_NOMEM);
    }
    free(buf);
}

static void test_pwri_and_versions(void **state) {
    (void)state;
    uint64_t size;
    uint8_t *buf = sample(&size, 0);
    struct gguf_file f;
    struct pi_error e;
    memcpy(buf, "PWRI", 4);
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &e), PI_OK);
    assert_int_equal(f.magic, GGUF_MAGIC_PWRI);
    gguf_close(&f);
    buf[4] = 2; /* version 2 has the same layout */
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &e), PI_OK);
    assert_int_equal(f.version, 2);
    gguf_close(&f);
    buf[4] = 1;
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &e), PI_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "version 1"));
    buf[4] = 0;
    buf[7] = 3; /* 0x03000000: a big-endian file */
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &e), PI_ERR_UNSUPPORTED);
    memcpy(buf, "GGML", 4);
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &e), PI_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "magic"));
    free(buf);
}

/* A real model-shaped file written by the test model writer parses, and its
 * tensors are where the writer put them. */
static void test_model_file(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.sparse = 1;
    s.wtype = PI_TYPE_Q8_0;
    const char *path = tmp_path("pi_test_gguf_model.gguf");
    assert_int_equal(tm_write(&s, path), PI_OK);
    uint64_t size;
    uint8_t *buf = slurp(path, &size);
    remove(path);
    struct gguf_file f;
    struct pi_error e;
    assert_int_equal(gguf_parse(&f, buf, size, &pi_default_allocator, &e), PI_OK);
    assert_int_equal(f.magic, GGUF_MAGIC_PWRI);
    int64_t i = gguf_find_tensor(&f, "blk.1.fc2.weight");
    assert_true(i >= 0);
    assert_int_equal(f.tensors[i].ne[0], 9);
    assert_int_equal(f.tensors[i].type, PI_TYPE_F32); /* 9 is not a multiple of 32 */
    gguf_close(&f);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),         cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_every_truncation),  cmocka_unit_test(test_random_corruption),
        cmocka_unit_test(test_alloc_failure),     cmocka_unit_test(test_pwri_and_versions),
        cmocka_unit_test(test_model_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
