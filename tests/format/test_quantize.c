/* test_quantize.c -- the scalar quantizers against the gguf package's bytes, the
 * streaming GGUF writer, and pi_model_quantize's contract: argument checks, errors,
 * abort, no partial output, output independent of the thread count.
 *
 * Usage: test_quantize FIXTURE.bin MALFORMED.gguf WORK_DIR
 * FIXTURE.bin is written by tests/fixtures/gen_quantize_fixtures.py (format in its
 * docstring). Whole-file comparisons with the package are in test_quantize.py. */
#define _POSIX_C_SOURCE 200809L /* mkdir, opendir */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf.h"
#include "powerinfer.h"
#include "runtime/quantize.h"
#include "runtime/types.h"
#include "testmodel.h"
#include "portable.h" /* last: Windows shims of mkdir, mkdtemp */

/* The layout bindings see (x86-64 and other LP64 targets). */
_Static_assert(offsetof(pi_quantize_params, struct_size) == 0, "struct_size first");
_Static_assert(sizeof(void *) != 8 || sizeof(pi_quantize_params) == 64, "size");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_quantize_params, n_threads) == 16, "n_threads");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_quantize_params, progress_fn) == 24, "progress");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_quantize_params, errbuf_cap) == 48, "errbuf_cap");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_quantize_params, allow_requantize) == 56,
               "allow_requantize");

#define FIXTURE_MAGIC 0x51515049u

static const char *fixture_path, *malformed_path, *work_dir;

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static uint8_t *slurp(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    uint8_t *buf = NULL;
    long n;
    if (fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *size = (size_t)n;
    }
    fclose(fp);
    return buf;
}

static const char *path_in_work(const char *name) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", work_dir, name);
    return buf[k];
}

/* Number of entries in the work dir whose name starts with `prefix`. */
static int count_files(const char *prefix) {
    DIR *d = opendir(work_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* ---- the quantizers ------------------------------------------------------------- */

static void test_fixture(void **state) {
    (void)state;
    size_t size = 0;
    uint8_t *buf = slurp(fixture_path, &size);
    assert_non_null(buf);
    assert_true(size >= 12);
    assert_int_equal(le32(buf), FIXTURE_MAGIC);
    assert_int_equal(le32(buf + 4), 1);
    uint32_t n_records = le32(buf + 8);
    uint64_t types_seen = 0;
    size_t off = 12;
    for (uint32_t r = 0; r < n_records; r++) {
        assert_true(off + 12 <= size);
        uint32_t type = le32(buf + off), n = le32(buf + off + 4), nb = le32(buf + off + 8);
        off += 12;
        assert_true(pi_quantize_supported(type));
        assert_int_equal(pi_type_row_bytes(type, n), nb);
        assert_true(off + 4ull * n + nb <= size);
        float *in = malloc(4ull * n);
        uint8_t *out = malloc(nb);
        assert_non_null(in);
        assert_non_null(out);
        memcpy(in, buf + off, 4ull * n); /* the host is little-endian (meson.build) */
        memset(out, 0xa5, nb);
        pi_quantize_row(type, in, out, n);
        const uint8_t *want = buf + off + 4ull * n;
        const struct pi_type_traits *tr = pi_type_traits(type);
        for (uint32_t blk = 0; blk < n / tr->block_size; blk++) {
            const uint8_t *g = out + blk * tr->block_bytes, *w = want + blk * tr->block_bytes;
            if (memcmp(g, w, tr->block_bytes) != 0) {
                print_error("%s record %u block %u differs:\n", tr->name, r, blk);
                for (uint32_t j = 0; j < tr->block_bytes; j++)
                    print_error("  byte %2u: got %02x want %02x%s\n", j, g[j], w[j],
                                g[j] != w[j] ? "  <--" : "");
                fail();
            }
        }
        types_seen |= 1ull << type;
        off += 4ull * n + nb;
        free(in);
        free(out);
    }
    assert_int_equal(off, size);
    uint64_t want_types = 1ull << PI_TYPE_F16 | 1ull << PI_TYPE_Q4_0 | 1ull << PI_TYPE_Q4_1 |
                          1ull << PI_TYPE_Q5_0 | 1ull << PI_TYPE_Q5_1 | 1ull << PI_TYPE_Q8_0 |
                          1ull << PI_TYPE_MXFP4;
    assert_int_equal(types_seen & want_types, want_types);
    free(buf);
}

/* Quantize then dequantize stays within half a step; F32 is the identity. */
static void test_roundtrip_error(void **state) {
    (void)state;
    float x[64], y[64];
    uint8_t q[256];
    for (int i = 0; i < 64; i++)
        x[i] = (float)((i * 37) % 64 - 31) / 8.0f;
    static const uint32_t types[] = {PI_TYPE_Q4_0, PI_TYPE_Q4_1, PI_TYPE_Q5_0,
                                     PI_TYPE_Q5_1, PI_TYPE_Q8_0, PI_TYPE_F16,
                                     PI_TYPE_BF16, PI_TYPE_F32,  PI_TYPE_MXFP4};
    /* one step: Q4_0 / Q5_0 clip the end opposite to the largest magnitude; MXFP4 keeps
     * magnitudes up to 1.5 * 2^floor(log2 max): a block max of 3.875 clips to 3 */
    static const float steps[] = {4.0f / 8, 7.875f / 15, 4.0f / 16, 7.875f / 31, 4.0f / 127,
                                  2e-3f,    1.6e-2f,     0.0f,      0.875f};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        pi_quantize_row(types[t], x, q, 64);
        pi_type_traits(types[t])->to_float(q, y, 64);
        for (int i = 0; i < 64; i++)
            assert_true(fabsf(x[i] - y[i]) <= steps[t] + 1e-6f);
    }
    assert_false(pi_quantize_supported(PI_TYPE_Q4_K));
}

/* pi_quantize_row_mse: per block, never more squared error than pi_quantize_row's
 * (beyond the f16 rounding of its scale: 1e-3 relative), less over many random blocks
 * of several shapes (uniform, Gaussian-like, one outlier), and a block with a
 * non-finite value or all zeros as pi_quantize_row writes it. */
static double block_err(uint32_t type, const float *x, const uint8_t *q) {
    float y[32];
    pi_type_traits(type)->to_float(q, y, 32);
    double e = 0.0;
    for (int i = 0; i < 32; i++)
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    return e;
}

static void test_quantize_mse(void **state) {
    (void)state;
    static const uint32_t types[] = {PI_TYPE_Q4_0, PI_TYPE_Q4_1, PI_TYPE_Q5_0, PI_TYPE_Q5_1,
                                     PI_TYPE_Q8_0};
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        double tot_ref = 0.0, tot_mse = 0.0;
        for (int blk = 0; blk < 600; blk++) {
            float x[32];
            for (int i = 0; i < 32; i++) {
                double u = 0.0;
                for (int k = 0; k < (blk % 3 == 1 ? 4 : 1); k++) {
                    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                    u += (double)(s >> 11) / 9007199254740992.0 - 0.5;
                }
                x[i] = (float)(u * (blk % 5 + 1) * 0.01);
            }
            if (blk % 3 == 2)
                x[blk % 32] *= 6.0f; /* an outlier */
            if (blk % 7 == 3)
                for (int i = 0; i < 32; i++)
                    x[i] += 0.02f; /* off-centre */
            uint8_t qr[64], qm[64];
            pi_quantize_row(types[t], x, qr, 32);
            pi_quantize_row_mse(types[t], x, qm, 32);
            const double er = block_err(types[t], x, qr), em = block_err(types[t], x, qm);
            if (!(em <= er * 1.001 + 1e-30)) {
                print_error("%s block %d: least-squares error %.6g above the reference's %.6g\n",
                            pi_type_name((int)types[t]), blk, em, er);
                fail();
            }
            tot_ref += er;
            tot_mse += em;
        }
        print_message("# %s: least-squares / reference squared error %.3f\n",
                      pi_type_name((int)types[t]), tot_mse / tot_ref);
        assert_true(tot_mse < 0.97 * tot_ref);
        /* non-finite or zero blocks: the reference's bytes */
        float bad[32] = {0};
        uint8_t qr[64], qm[64];
        pi_quantize_row(types[t], bad, qr, 32);
        pi_quantize_row_mse(types[t], bad, qm, 32);
        assert_memory_equal(qr, qm, pi_type_row_bytes(types[t], 32));
        for (int i = 0; i < 32; i++)
            bad[i] = (float)i - 10.0f;
        bad[7] = NAN;
        pi_quantize_row(types[t], bad, qr, 32);
        pi_quantize_row_mse(types[t], bad, qm, 32);
        assert_memory_equal(qr, qm, pi_type_row_bytes(types[t], 32));
        bad[7] = INFINITY;
        pi_quantize_row(types[t], bad, qr, 32);
        pi_quantize_row_mse(types[t], bad, qm, 32);
        assert_memory_equal(qr, qm, pi_type_row_bytes(types[t], 32));
    }
}

/* ---- the streaming writer ------------------------------------------------------- */

/* Header + data in pieces gives the same bytes as the in-memory writer. */
static void test_stream_writer(void **state) {
    (void)state;
    float a[96], b[8];
    for (int i = 0; i < 96; i++)
        a[i] = (float)i;
    for (int i = 0; i < 8; i++)
        b[i] = -(float)i;
    const int64_t ne_a[2] = {32, 3}, ne_b[1] = {8}, ne_e[2] = {0, 4};
    struct gguf_writer *w[2];
    const uint8_t raw_str[] = {3, 0, 0, 0, 0, 0, 0, 0, 'a', 0, 'b'}; /* NUL inside */
    for (int k = 0; k < 2; k++) {
        assert_int_equal(gguf_writer_create(&pi_default_allocator, &w[k]), PI_OK);
        assert_int_equal(gguf_writer_set_alignment(w[k], 64), PI_OK);
        assert_int_equal(gguf_writer_add_raw(w[k], "k.s", PI_META_STRING, 0, 1, raw_str,
                                             sizeof raw_str), PI_OK);
        assert_int_equal(gguf_writer_add_raw(w[k], "k.bad", PI_META_U32, 1, 1, raw_str, 4),
                         PI_ERR_INVALID_ARG);
        if (k == 0) {
            assert_int_equal(gguf_writer_add_tensor(w[k], "a", PI_TYPE_F32, 2, ne_a, a), PI_OK);
            assert_int_equal(gguf_writer_add_tensor(w[k], "e", PI_TYPE_F32, 2, ne_e, NULL), PI_OK);
            assert_int_equal(gguf_writer_add_tensor(w[k], "b", PI_TYPE_F32, 1, ne_b, b), PI_OK);
        } else {
            assert_int_equal(gguf_writer_add_tensor_info(w[k], "a", PI_TYPE_F32, 2, ne_a), PI_OK);
            assert_int_equal(gguf_writer_add_tensor_info(w[k], "e", PI_TYPE_F32, 2, ne_e), PI_OK);
            assert_int_equal(gguf_writer_add_tensor_info(w[k], "b", PI_TYPE_F32, 1, ne_b), PI_OK);
        }
    }
    const char *p0 = path_in_work("stream0.gguf"), *p1 = path_in_work("stream1.gguf");
    assert_int_equal(gguf_writer_write_file(w[0], p0, GGUF_MAGIC_PWRI, NULL), PI_OK);
    /* a declared tensor has no data for the one-shot writer */
    assert_int_equal(gguf_writer_write_file(w[1], p1, GGUF_MAGIC_PWRI, NULL), PI_ERR_INVALID_ARG);
    FILE *fp = fopen(p1, "wb");
    assert_non_null(fp);
    assert_int_equal(gguf_writer_write_data(w[1], fp, a, 4), PI_ERR_INVALID_ARG); /* no header */
    assert_int_equal(gguf_writer_write_header(w[1], fp, GGUF_MAGIC_PWRI), PI_OK);
    assert_int_equal(gguf_writer_add_tensor_info(w[1], "late", PI_TYPE_F32, 1, ne_b),
                     PI_ERR_INVALID_ARG);
    assert_int_equal(gguf_writer_write_data(w[1], fp, a, 100), PI_OK);
    assert_int_equal(gguf_writer_finish(w[1], fp), PI_ERR_INVALID_ARG); /* incomplete */
    assert_int_equal(gguf_writer_write_data(w[1], fp, (uint8_t *)a + 100, 284), PI_OK);
    assert_int_equal(gguf_writer_write_data(w[1], fp, b, 32), PI_OK); /* across a and b */
    assert_int_equal(gguf_writer_finish(w[1], fp), PI_OK);
    assert_int_equal(gguf_writer_write_data(w[1], fp, b, 1), PI_ERR_INVALID_ARG); /* too much */
    fclose(fp);
    size_t s0, s1;
    uint8_t *f0 = slurp(p0, &s0), *f1 = slurp(p1, &s1);
    assert_non_null(f0);
    assert_non_null(f1);
    assert_int_equal(s0, s1);
    assert_memory_equal(f0, f1, s0);
    struct gguf_file g;
    assert_int_equal(gguf_parse(&g, f1, s1, &pi_default_allocator, NULL), PI_OK);
    const struct gguf_kv *kv = gguf_find_kv(&g, "k.s");
    assert_non_null(kv);
    const char *s;
    uint64_t len;
    assert_int_equal(gguf_kv_str(&g, kv, 0, &s, &len), PI_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "a\0b", 3);
    gguf_close(&g);
    free(f0);
    free(f1);
    gguf_writer_destroy(w[0]);
    gguf_writer_destroy(w[1]);
    remove(p0);
    remove(p1);
}

/* ---- pi_model_quantize ---------------------------------------------------------- */

static const char *sparse_model(void) {
    static char path[1024];
    snprintf(path, sizeof path, "%s", path_in_work("sparse.f32.gguf"));
    struct tm_spec s;
    tm_default(&s);
    s.sparse = 1;
    s.wtype = PI_TYPE_F32;
    s.pred_rank = 32;
    assert_int_equal(tm_write(&s, path), PI_OK);
    return path;
}

static void test_params(void **state) {
    (void)state;
    pi_quantize_params p;
    assert_int_equal(pi_quantize_default_params(NULL), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_quantize_default_params(&p), PI_OK);
    assert_int_equal(p.struct_size, sizeof p);
    assert_int_equal(p.type, PI_TYPE_Q4_0);
    assert_int_equal(p.predictor_type, 0);
    assert_int_equal(p.n_threads, 0);
    assert_null(p.progress_fn);
}

static int expect_fail(const char *in, const char *out, pi_quantize_params *p, int status,
                       const char *needle) {
    char msg[512] = "";
    p->errbuf = msg;
    p->errbuf_cap = sizeof msg;
    int st = pi_model_quantize(in, out, p);
    if (st != status || !strstr(msg, needle)) {
        print_error("got %d '%s', want %d with '%s'\n", st, msg, status, needle);
        return 0;
    }
    return 1;
}

static void test_errors(void **state) {
    (void)state;
    const char *in = sparse_model(), *out = path_in_work("err-out.gguf");
    pi_quantize_params p;
    pi_quantize_default_params(&p);
    assert_true(expect_fail(NULL, out, &p, PI_ERR_INVALID_ARG, "must not be NULL"));
    assert_true(expect_fail(in, NULL, &p, PI_ERR_INVALID_ARG, "must not be NULL"));
    assert_true(expect_fail(in, in, &p, PI_ERR_INVALID_ARG, "is the input file"));
    p.type = PI_TYPE_Q4_K;
    assert_true(expect_fail(in, out, &p, PI_ERR_INVALID_ARG, "Q4_K) is not a quantization"));
    p.type = PI_TYPE_F16;
    assert_true(expect_fail(in, out, &p, PI_ERR_INVALID_ARG, "not a quantization target"));
    p.type = 1000;
    assert_true(expect_fail(in, out, &p, PI_ERR_INVALID_ARG, "unknown"));
    p.type = PI_TYPE_Q8_0;
    p.predictor_type = PI_TYPE_Q6_K;
    assert_true(expect_fail(in, out, &p, PI_ERR_INVALID_ARG, "predictor_type"));
    p.predictor_type = 0;
    assert_true(expect_fail(path_in_work("missing.gguf"), out, &p, PI_ERR_IO, "cannot open"));
    assert_true(expect_fail(malformed_path, out, &p, PI_ERR_FORMAT, malformed_path));
    assert_true(expect_fail(in, path_in_work("no-such-dir/out.gguf"), &p, PI_ERR_IO,
                            "cannot create"));
    /* the output path is an existing directory: refused, nothing is left */
    const char *dir = path_in_work("err-dir.gguf");
    mkdir(dir, 0777);
    assert_true(expect_fail(in, dir, &p, PI_ERR_IO, "is a directory"));
    rmdir(dir);
    /* struct_size checks */
    pi_quantize_params small = p;
    small.struct_size = 8;
    assert_int_equal(pi_model_quantize(in, out, &small), PI_ERR_INVALID_ARG);
    struct {
        pi_quantize_params p;
        uint64_t future;
    } big;
    memset(&big, 0, sizeof big);
    big.p = p;
    big.p.errbuf = NULL;
    big.p.struct_size = sizeof big;
    big.future = 1;
    assert_int_equal(pi_model_quantize(in, out, &big.p), PI_ERR_UNSUPPORTED);
    big.future = 0;
    assert_int_equal(pi_model_quantize(in, out, &big.p), PI_OK);
    assert_int_equal(count_files("err-out.gguf"), 1); /* no temporary left over */
    remove(out);
    assert_int_equal(count_files("err-"), 0);
}

static int abort_after;

static int stop_at(void *user, float fraction) {
    int *calls = user;
    assert_true(fraction >= 0.0f && fraction <= 1.0f);
    return ++*calls > abort_after;
}

static void test_abort(void **state) {
    (void)state;
    const char *in = sparse_model(), *out = path_in_work("abort-out.gguf");
    pi_quantize_params p;
    pi_quantize_default_params(&p);
    int calls = 0;
    p.progress_fn = stop_at;
    p.progress_user = &calls;
    abort_after = 1000000;
    assert_int_equal(pi_model_quantize(in, out, &p), PI_OK);
    int total = calls;
    assert_true(total > 3);
    remove(out);
    /* abort at every progress call: PI_ERR_ABORTED, no output, no temporary */
    for (abort_after = 0; abort_after < total; abort_after++) {
        calls = 0;
        assert_true(expect_fail(in, out, &p, PI_ERR_ABORTED, "aborted"));
        assert_int_equal(count_files("abort-out"), 0);
    }
    /* an existing output survives a failed run untouched */
    FILE *fp = fopen(out, "wb");
    assert_non_null(fp);
    fputs("old", fp);
    fclose(fp);
    abort_after = total / 2;
    calls = 0;
    assert_true(expect_fail(in, out, &p, PI_ERR_ABORTED, "aborted"));
    size_t n;
    uint8_t *old = slurp(out, &n);
    assert_non_null(old);
    assert_int_equal(n, 3);
    free(old);
    assert_int_equal(count_files("abort-out"), 1);
    remove(out);
}

/* Same output for 1 and 3 threads; the result opens; the PWRI magic, types of the
 * predictors, file type and kept output follow the params. */
static void test_threads_and_types(void **state) {
    (void)state;
    const char *in = sparse_model();
    const char *o1 = path_in_work("t1.gguf"), *o3 = path_in_work("t3.gguf");
    pi_quantize_params p;
    pi_quantize_default_params(&p);
    p.type = PI_TYPE_Q4_1;
    p.predictor_type = PI_TYPE_F16;
    p.keep_output = 1;
    p.n_threads = 1;
    assert_int_equal(pi_model_quantize(in, o1, &p), PI_OK);
    p.n_threads = 3;
    assert_int_equal(pi_model_quantize(in, o3, &p), PI_OK);
    size_t n1, n3;
    uint8_t *f1 = slurp(o1, &n1), *f3 = slurp(o3, &n3);
    assert_non_null(f1);
    assert_non_null(f3);
    assert_int_equal(n1, n3);
    assert_memory_equal(f1, f3, n1);
    struct gguf_file g;
    assert_int_equal(gguf_parse(&g, f1, n1, &pi_default_allocator, NULL), PI_OK);
    assert_int_equal(g.magic, GGUF_MAGIC_PWRI);
    int64_t v;
    assert_int_equal(gguf_kv_int(&g, gguf_find_kv(&g, "general.file_type"), 0, &v), PI_OK);
    assert_int_equal(v, 3);
    assert_int_equal(gguf_kv_int(&g, gguf_find_kv(&g, "general.quantization_version"), 0, &v),
                     PI_OK);
    assert_int_equal(v, 2);
    int64_t i = gguf_find_tensor(&g, "blk.0.fc1.weight");
    assert_true(i >= 0);
    assert_int_equal(g.tensors[i].type, PI_TYPE_F16);
    i = gguf_find_tensor(&g, "blk.0.ffn_down_t.weight");
    assert_true(i >= 0);
    assert_int_equal(g.tensors[i].type, PI_TYPE_Q4_1);
    i = gguf_find_tensor(&g, "output.weight");
    assert_true(i >= 0);
    assert_int_equal(g.tensors[i].type, PI_TYPE_F32);
    i = gguf_find_tensor(&g, "output_norm.weight");
    assert_true(i >= 0);
    assert_int_equal(g.tensors[i].type, PI_TYPE_F32);
    gguf_close(&g);
    pi_model *m = NULL;
    char msg[512] = "";
    pi_model_params mp;
    pi_model_default_params(&mp);
    mp.errbuf = msg;
    mp.errbuf_cap = sizeof msg;
    assert_int_equal(pi_model_open(o1, &mp, &m), PI_OK);
    assert_int_equal(pi_model_is_sparse(m), 1);
    pi_model_close(m);
    free(f1);
    free(f3);
    remove(o1);
    remove(o3);
}

/* A file already quantized: to its own type it is copied; to another type it is refused
 * unless allow_requantize, which dequantizes and quantizes again (before, the Q4_0 blocks
 * were copied into a file labelled Q8_0). */
static void test_requantize(void **state) {
    (void)state;
    const char *in = sparse_model(), *q4 = path_in_work("rq-q4.gguf");
    const char *again = path_in_work("rq-q4b.gguf"), *q8 = path_in_work("rq-q8.gguf");
    pi_quantize_params p;
    pi_quantize_default_params(&p);
    assert_int_equal(p.allow_requantize, 0);
    assert_int_equal(pi_model_quantize(in, q4, &p), PI_OK);
    assert_int_equal(pi_model_quantize(q4, again, &p), PI_OK); /* same type: a copy */
    size_t n4, nb;
    uint8_t *f4 = slurp(q4, &n4), *fb = slurp(again, &nb);
    assert_int_equal(n4, nb);
    assert_memory_equal(f4, fb, n4);
    free(fb);
    p.type = PI_TYPE_Q8_0;
    assert_true(expect_fail(q4, q8, &p, PI_ERR_UNSUPPORTED, "is already Q4_0"));
    assert_int_equal(count_files("rq-q8"), 0);
    p.allow_requantize = 1;
    p.errbuf = NULL;
    assert_int_equal(pi_model_quantize(q4, q8, &p), PI_OK);
    p.reserved0 = 1;
    assert_true(expect_fail(q4, q8, &p, PI_ERR_INVALID_ARG, "reserved0"));

    size_t n8;
    uint8_t *f8 = slurp(q8, &n8);
    struct gguf_file g4, g8;
    assert_int_equal(gguf_parse(&g4, f4, n4, &pi_default_allocator, NULL), PI_OK);
    assert_int_equal(gguf_parse(&g8, f8, n8, &pi_default_allocator, NULL), PI_OK);
    int64_t v;
    assert_int_equal(gguf_kv_int(&g8, gguf_find_kv(&g8, "general.file_type"), 0, &v), PI_OK);
    assert_int_equal(v, 7);
    int converted = 0;
    for (uint64_t i = 0; i < g4.n_tensors; i++) {
        const struct gguf_tensor *a = &g4.tensors[i];
        const int64_t j = gguf_find_tensor(&g8, a->name);
        assert_true(j >= 0);
        const struct gguf_tensor *b = &g8.tensors[j];
        if (a->type != PI_TYPE_Q4_0) {
            assert_int_equal(b->type, a->type);
            continue;
        }
        assert_int_equal(b->type, PI_TYPE_Q8_0);
        converted++;
        /* the Q8_0 weights are the Q4_0 ones within Q8_0's step (amax / 127) */
        const int64_t n = a->ne[0] * a->ne[1];
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        assert_non_null(x);
        assert_non_null(y);
        pi_type_traits(PI_TYPE_Q4_0)->to_float(a->data, x, n);
        pi_type_traits(PI_TYPE_Q8_0)->to_float(b->data, y, n);
        for (int64_t k = 0; k < n; k += 32) {
            float amax = 0.0f;
            for (int e = 0; e < 32; e++)
                amax = fabsf(x[k + e]) > amax ? fabsf(x[k + e]) : amax;
            for (int e = 0; e < 32; e++)
                assert_true(fabsf(x[k + e] - y[k + e]) <= amax / 127.0f + 1e-7f);
        }
        free(x);
        free(y);
    }
    assert_true(converted >= 10); /* 2 layers x (q, k, v, o, gate, up, down_t, fc1, fc2) */
    gguf_close(&g4);
    gguf_close(&g8);
    free(f4);
    free(f8);
    remove(q4);
    remove(again);
    remove(q8);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s FIXTURE.bin MALFORMED.gguf WORK_DIR\n", argv[0]);
        return 2;
    }
    fixture_path = argv[1];
    malformed_path = argv[2];
    work_dir = argv[3];
    mkdir(work_dir, 0777);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture),     cmocka_unit_test(test_roundtrip_error),
        cmocka_unit_test(test_stream_writer), cmocka_unit_test(test_params),
        cmocka_unit_test(test_errors),      cmocka_unit_test(test_abort),
        cmocka_unit_test(test_threads_and_types), cmocka_unit_test(test_requantize),
        cmocka_unit_test(test_quantize_mse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
