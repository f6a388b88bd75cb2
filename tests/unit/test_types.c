/* test_types.c -- type traits, scalar dequantizers, fp16/bf16 conversions.
 *
 * Usage: test_types PATH/quant_fixtures.bin
 * The fixture file is written by tests/fixtures/gen_quant_fixtures.py (format
 * documented there) from the gguf Python package's reference dequantizers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/fp16.h"
#include "runtime/types.h"

#define FIXTURE_MAGIC 0x46515049u
#define FIXTURE_VERSION 1u

static const char *fixture_path;

/* ---- fixture file ---- */

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long len;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)len + 1);
        if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
            free(buf);
            buf = NULL;
        }
        *size = (size_t)len;
    }
    fclose(f);
    return buf;
}

static int is_k_quant(uint32_t type) {
    return type == 12 || type == 13 || type == 14;
}

static void test_dequant_fixtures(void **state) {
    size_t size = 0, off = 12;
    uint32_t n_records, inexact = 0;
    uint64_t seen = 0;
    uint8_t *buf;
    (void)state;

    if (!fixture_path)
        fail_msg("usage: test_types PATH/quant_fixtures.bin");
    buf = read_file(fixture_path, &size);
    if (!buf)
        fail_msg("cannot read fixture file %s", fixture_path);
    assert_true(size >= 12);
    assert_int_equal(le32(buf), FIXTURE_MAGIC);
    assert_int_equal(le32(buf + 4), FIXTURE_VERSION);
    n_records = le32(buf + 8);
    assert_true(n_records >= 15);

    for (uint32_t r = 0; r < n_records; r++) {
        uint32_t type, n, nbytes;
        const struct pi_type_traits *t;
        float *out;
        assert_true(size - off >= 12);
        type = le32(buf + off);
        n = le32(buf + off + 4);
        nbytes = le32(buf + off + 8);
        off += 12;
        assert_true((uint64_t)(size - off) >= (uint64_t)nbytes + 4u * (uint64_t)n);

        t = pi_type_traits(type);
        if (!t)
            fail_msg("record %u: unknown type %u", r, type);
        if (!t->to_float)
            fail_msg("record %u: type %s has no dequantizer", r, t->name);
        assert_int_equal(pi_type_row_bytes(type, n), nbytes);
        assert_true(pi_type_is_computable(type));

        out = malloc((size_t)n * sizeof *out + 1);
        assert_non_null(out);
        t->to_float(buf + off, out, n);
        off += nbytes;
        for (uint32_t i = 0; i < n; i++, off += 4) {
            float want = pi_bits_to_fp32(le32(buf + off));
            uint32_t gb = pi_fp32_to_bits(out[i]), wb = pi_fp32_to_bits(want);
            if (gb == wb)
                continue;
            if (is_k_quant(type)) {
                double tol = 1e-6 * fmax(1.0, fabs((double)want));
                if (fabs((double)out[i] - (double)want) <= tol) {
                    inexact++;
                    continue;
                }
            }
            fail_msg("%s (type %u) element %u: got %.9g (0x%08x), expected %.9g (0x%08x)",
                     t->name, type, i, (double)out[i], gb, (double)want, wb);
        }
        free(out);
        seen |= 1ull << (type & 63u);
    }
    assert_int_equal(off, size);
    /* all 16 computable types are covered */
    assert_int_equal(seen, (1ull << 0) | (1ull << 1) | (1ull << 2) | (1ull << 3) | (1ull << 6) |
                               (1ull << 7) | (1ull << 8) | (1ull << 10) | (1ull << 11) |
                               (1ull << 12) | (1ull << 13) | (1ull << 14) | (1ull << 20) |
                               (1ull << 23) | (1ull << 30) | (1ull << 39));
    if (inexact)
        print_message("note: %u K-quant values within tolerance but not bit-exact\n", inexact);
    free(buf);
}

/* ---- traits table ---- */

/* gguf.constants.GGML_QUANT_SIZES (gguf package), as (id, block_size, block_bytes). */
static const struct {
    uint32_t id, block_size, block_bytes;
    const char *name;
} gguf_sizes[] = {
    {0, 1, 4, "F32"},          {1, 1, 2, "F16"},          {2, 32, 18, "Q4_0"},
    {3, 32, 20, "Q4_1"},       {6, 32, 22, "Q5_0"},       {7, 32, 24, "Q5_1"},
    {8, 32, 34, "Q8_0"},       {9, 32, 40, "Q8_1"},       {10, 256, 84, "Q2_K"},
    {11, 256, 110, "Q3_K"},    {12, 256, 144, "Q4_K"},    {13, 256, 176, "Q5_K"},
    {14, 256, 210, "Q6_K"},    {15, 256, 292, "Q8_K"},    {16, 256, 66, "IQ2_XXS"},
    {17, 256, 74, "IQ2_XS"},   {18, 256, 98, "IQ3_XXS"},  {19, 256, 50, "IQ1_S"},
    {20, 32, 18, "IQ4_NL"},    {21, 256, 110, "IQ3_S"},   {22, 256, 82, "IQ2_S"},
    {23, 256, 136, "IQ4_XS"},  {24, 1, 1, "I8"},          {25, 1, 2, "I16"},
    {26, 1, 4, "I32"},         {27, 1, 8, "I64"},         {28, 1, 8, "F64"},
    {29, 256, 56, "IQ1_M"},    {30, 1, 2, "BF16"},        {34, 256, 54, "TQ1_0"},
    {35, 256, 66, "TQ2_0"},    {39, 32, 17, "MXFP4"},     {40, 64, 36, "NVFP4"},
    {41, 128, 18, "Q1_0"},
};

static const uint32_t computable[] = {0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23, 30, 39};

static void test_traits_table(void **state) {
    const size_t n_sizes = sizeof gguf_sizes / sizeof gguf_sizes[0];
    (void)state;
    for (uint32_t id = 0; id < PI_TYPE_ID_LIMIT + 8; id++) {
        const struct pi_type_traits *t = pi_type_traits(id);
        size_t k;
        int want_comp = 0;
        for (k = 0; k < n_sizes && gguf_sizes[k].id != id; k++)
            ;
        for (size_t c = 0; c < sizeof computable / sizeof computable[0]; c++)
            want_comp |= computable[c] == id;
        if (k == n_sizes) {
            if (t)
                fail_msg("id %u: not in gguf, but traits say %s", id, t->name);
            assert_false(pi_type_is_computable(id));
            continue;
        }
        if (!t)
            fail_msg("id %u (%s): no traits", id, gguf_sizes[k].name);
        assert_string_equal(t->name, gguf_sizes[k].name);
        assert_int_equal(t->block_size, gguf_sizes[k].block_size);
        assert_int_equal(t->block_bytes, gguf_sizes[k].block_bytes);
        if (pi_type_is_computable(id) != want_comp || (t->to_float != NULL) != want_comp)
            fail_msg("id %u (%s): computable should be %d", id, t->name, want_comp);
    }
    assert_null(pi_type_traits(UINT32_MAX));
    assert_false(pi_type_is_computable(UINT32_MAX));
}

static void test_row_bytes(void **state) {
    (void)state;
    assert_int_equal(pi_type_row_bytes(0, 3), 12);
    assert_int_equal(pi_type_row_bytes(1, 7), 14);
    assert_int_equal(pi_type_row_bytes(30, 5), 10);
    assert_int_equal(pi_type_row_bytes(2, 32), 18);
    assert_int_equal(pi_type_row_bytes(2, 4096), 128 * 18);
    assert_int_equal(pi_type_row_bytes(8, 64), 68);
    assert_int_equal(pi_type_row_bytes(12, 512), 288);
    assert_int_equal(pi_type_row_bytes(14, 4096), 16 * 210);
    assert_int_equal(pi_type_row_bytes(9, 32), 40);      /* known, not computable */
    assert_int_equal(pi_type_row_bytes(2, 0), 0);
    assert_int_equal(pi_type_row_bytes(2, 33), 0);       /* not a multiple */
    assert_int_equal(pi_type_row_bytes(2, 16), 0);
    assert_int_equal(pi_type_row_bytes(12, 255), 0);
    assert_int_equal(pi_type_row_bytes(14, 257), 0);
    assert_int_equal(pi_type_row_bytes(0, -1), 0);       /* negative */
    assert_int_equal(pi_type_row_bytes(2, -32), 0);
    assert_int_equal(pi_type_row_bytes(4, 32), 0);       /* unknown ids */
    assert_int_equal(pi_type_row_bytes(5, 32), 0);
    assert_int_equal(pi_type_row_bytes(31, 1), 0);
    assert_int_equal(pi_type_row_bytes(PI_TYPE_ID_LIMIT, 1), 0);
    assert_int_equal(pi_type_row_bytes(UINT32_MAX, 256), 0);
    /* large rows do not overflow */
    assert_true(pi_type_row_bytes(0, (int64_t)1 << 40) == (uint64_t)4 << 40);
}

/* ---- fp16 / bf16 ---- */

/* Independent decoding of a half: (-1)^s * m * 2^(e-25) with implicit bit. */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e ? ldexp((double)(m | 0x400), e - 25) : ldexp((double)m, -24);
    return (h & 0x8000) ? -v : v;
}

static void test_fp16_all_patterns(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 0x10000u; b++) {
        uint16_t h = (uint16_t)b;
        float f = pi_fp16_to_fp32(h);
        uint16_t back = pi_fp32_to_fp16(f);
        int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
        if (exp == 0x1f && man) {
            if (!isnan(f) || !signbit(f) != !(h & 0x8000))
                fail_msg("half 0x%04x: NaN did not decode as NaN of the same sign", b);
            if ((back & 0x7c00) != 0x7c00 || !(back & 0x3ff) || (back & 0x8000) != (h & 0x8000))
                fail_msg("half 0x%04x: NaN came back as 0x%04x", b, back);
            continue;
        }
        if (exp == 0x1f) {
            assert_true(isinf(f));
        } else if ((double)f != half_value(h) || !signbit(f) != !(h & 0x8000)) {
            fail_msg("half 0x%04x: decoded %.9g, expected %.9g", b, (double)f, half_value(h));
        }
        if (back != h)
            fail_msg("half 0x%04x -> %.9g -> 0x%04x", b, (double)f, back);
    }
}

static void test_fp16_rounding(void **state) {
    static const struct {
        double x;
        uint16_t h;
    } cases[] = {
        {1.0, 0x3c00},
        {-2.0, 0xc000},
        {0.0, 0x0000},
        {1.0 + 0x1p-11, 0x3c00},            /* tie, rounds to even 0x3c00 */
        {1.0 + 3 * 0x1p-11, 0x3c02},        /* tie, rounds to even 0x3c02 */
        {1.0 + 0x1p-11 + 0x1p-20, 0x3c01},  /* just above the tie */
        {1.0 + 0x1p-11 - 0x1p-23, 0x3c00},  /* just below the tie */
        {-(1.0 + 3 * 0x1p-11), 0xbc02},
        {65504.0, 0x7bff},                  /* largest finite */
        {65519.0, 0x7bff},
        {65520.0, 0x7c00},                  /* tie between 0x7bff and 2^16: overflows */
        {1e10, 0x7c00},
        {-1e10, 0xfc00},
        {0x1p-14, 0x0400},                  /* smallest normal */
        {0x1p-24, 0x0001},                  /* smallest subnormal */
        {0x1p-25, 0x0000},                  /* half of it: tie to even, zero */
        {-0x1p-25, 0x8000},
        {0x1p-25 + 0x1p-40, 0x0001},        /* just above: rounds up */
        {3 * 0x1p-25, 0x0002},              /* 1.5 ulp: tie to even 2 */
        {5 * 0x1p-25, 0x0002},              /* 2.5 ulp: tie to even 2 */
        {0x1p-26, 0x0000},
        {1023.5 * 0x1p-24, 0x0400},         /* largest subnormal + half: to normal */
        {1022.5 * 0x1p-24, 0x03fe},
        {1e-40, 0x0000},                    /* float subnormal */
        {-1e-40, 0x8000},
        {0.1, 0x2e66},
        {3.14159265358979, 0x4248},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f = (float)cases[i].x;
        uint16_t h = pi_fp32_to_fp16(f);
        if (h != cases[i].h)
            fail_msg("fp32 %.12g -> fp16 0x%04x, expected 0x%04x", (double)f, h, cases[i].h);
    }
    assert_int_equal(pi_fp32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(pi_fp32_to_fp16(INFINITY), 0x7c00);
    assert_int_equal(pi_fp32_to_fp16(-INFINITY), 0xfc00);
    {
        uint16_t h = pi_fp32_to_fp16(NAN);
        assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
        /* a NaN whose payload lives only in the low 13 bits stays a NaN */
        h = pi_fp32_to_fp16(pi_bits_to_fp32(0xff800001u));
        assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0 && (h & 0x8000));
    }
}

static void test_bf16(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 0x10000u; b++) {
        uint16_t h = (uint16_t)b;
        float f = pi_bf16_to_fp32(h);
        uint16_t back = pi_fp32_to_bf16(f);
        assert_int_equal(pi_fp32_to_bits(f), b << 16);
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) {
            if ((back & 0x7f80) != 0x7f80 || !(back & 0x7f) || (back & 0x8000) != (h & 0x8000))
                fail_msg("bf16 0x%04x: NaN came back as 0x%04x", b, back);
        } else if (back != h) {
            fail_msg("bf16 0x%04x -> 0x%04x", b, back);
        }
    }
    assert_int_equal(pi_fp32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(pi_fp32_to_bf16(pi_bits_to_fp32(0x3f808000u)), 0x3f80); /* tie, even */
    assert_int_equal(pi_fp32_to_bf16(pi_bits_to_fp32(0x3f818000u)), 0x3f82); /* tie, even */
    assert_int_equal(pi_fp32_to_bf16(pi_bits_to_fp32(0x3f808001u)), 0x3f81);
    assert_int_equal(pi_fp32_to_bf16(pi_bits_to_fp32(0x7f7fffffu)), 0x7f80); /* overflow */
    assert_int_equal(pi_fp32_to_bf16(pi_bits_to_fp32(0xff7fffffu)), 0xff80);
    assert_int_equal(pi_fp32_to_bf16(pi_bits_to_fp32(0x7f800001u)), 0x7fc0); /* quiet NaN */
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_fixtures),
        cmocka_unit_test(test_traits_table),
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_fp16_all_patterns),
        cmocka_unit_test(test_fp16_rounding),
        cmocka_unit_test(test_bf16),
    };
    if (argc > 1)
        fixture_path = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
