/* gguf_write_sample.c -- test tool: write a deterministic sample file with the
 * library's GGUF writer.
 *
 *   gguf_write_sample OUT.gguf [gguf|pwri] [ALIGNMENT]
 *
 * The file covers every scalar metadata type, strings (ASCII, multi-byte UTF-8,
 * empty, characters that need JSON escaping), an array of every numeric type and
 * of bool, an array of strings, and tensors of types F32, F16, Q8_0 and I32.
 * Magic "PWRI" when the second argument is "pwri". A third argument sets a
 * non-default data alignment (written as general.alignment).
 *
 * tests/format/test_roundtrip.py mirrors every value below (expected_sample());
 * keep the two in step. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "powerinfer.h"
#include "util/alloc.h"
#include "util/error.h"

/* Status names, local so that the tool links with the reader alone (pi_status_str
 * lives in the public API layer). */
static const char *status_name(int st) {
    switch (st) {
    case PI_OK: return "PI_OK";
    case PI_ERR_INVALID_ARG: return "PI_ERR_INVALID_ARG";
    case PI_ERR_NOMEM: return "PI_ERR_NOMEM";
    case PI_ERR_IO: return "PI_ERR_IO";
    case PI_ERR_FORMAT: return "PI_ERR_FORMAT";
    case PI_ERR_UNSUPPORTED: return "PI_ERR_UNSUPPORTED";
    case PI_ERR_ABORTED: return "PI_ERR_ABORTED";
    case PI_ERR_NOT_FOUND: return "PI_ERR_NOT_FOUND";
    case PI_ERR_TYPE: return "PI_ERR_TYPE";
    case PI_ERR_RANGE: return "PI_ERR_RANGE";
    case PI_ERR_INTERNAL: return "PI_ERR_INTERNAL";
    case PI_ERR_NUMERIC: return "PI_ERR_NUMERIC";
    default: return "unknown status";
    }
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static int fail(const char *what, int st) {
    fprintf(stderr, "gguf_write_sample: %s: %s (%d)\n", what, status_name(st), st);
    return 1;
}

#define TRY(what, expr)                                                                 \
    do {                                                                                \
        int st_ = (expr);                                                               \
        if (st_ < 0) {                                                                  \
            gguf_writer_destroy(w);                                                     \
            return fail((what), st_);                                                   \
        }                                                                               \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: gguf_write_sample OUT.gguf [gguf|pwri] [ALIGNMENT]\n");
        return 2;
    }
    uint32_t magic = GGUF_MAGIC_GGUF;
    if (argc >= 3) {
        if (strcmp(argv[2], "pwri") == 0) {
            magic = GGUF_MAGIC_PWRI;
        } else if (strcmp(argv[2], "gguf") != 0) {
            fprintf(stderr, "gguf_write_sample: magic must be gguf or pwri\n");
            return 2;
        }
    }
    uint32_t alignment = 0;
    if (argc == 4)
        alignment = (uint32_t)strtoul(argv[3], NULL, 10);

    struct gguf_writer *w = NULL;
    int st = gguf_writer_create(&pi_default_allocator, &w);
    if (st < 0)
        return fail("gguf_writer_create", st);
    if (alignment)
        TRY("set_alignment", gguf_writer_set_alignment(w, alignment));

    /* ---- strings ---- */
    TRY("general.architecture", gguf_writer_add_string(w, "general.architecture", "sample"));
    TRY("sample.str_ascii", gguf_writer_add_string(w, "sample.str_ascii", "hello, world"));
    /* "h\u00e9llo w\u00f6rld \u2014 \u65e5\u672c\u8a9e \U0001f680" in UTF-8 */
    TRY("sample.str_utf8",
        gguf_writer_add_string(w, "sample.str_utf8",
                               "h\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 "
                               "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x9a\x80"));
    TRY("sample.str_empty", gguf_writer_add_string(w, "sample.str_empty", ""));
    TRY("sample.str_escape",
        gguf_writer_add_string(w, "sample.str_escape",
                               "quote\" backslash\\ tab\t newline\n ctl\x01 end"));

    /* ---- scalars ---- */
    {
        uint8_t u8 = 200;
        int8_t i8 = -100;
        uint16_t u16 = 65535;
        int16_t i16 = -32768;
        uint32_t u32 = 4294967295u;
        int32_t i32 = INT32_MIN;
        float f32 = 0.1f;
        uint8_t bt = 1, bf = 0;
        uint64_t u64 = UINT64_MAX;
        int64_t i64 = INT64_MIN;
        double f64 = 2.718281828459045;
        double f64n = -1.5e300;
        TRY("sample.u8", gguf_writer_add_scalar(w, "sample.u8", PI_META_U8, &u8));
        TRY("sample.i8", gguf_writer_add_scalar(w, "sample.i8", PI_META_I8, &i8));
        TRY("sample.u16", gguf_writer_add_scalar(w, "sample.u16", PI_META_U16, &u16));
        TRY("sample.i16", gguf_writer_add_scalar(w, "sample.i16", PI_META_I16, &i16));
        TRY("sample.u32", gguf_writer_add_scalar(w, "sample.u32", PI_META_U32, &u32));
        TRY("sample.i32", gguf_writer_add_scalar(w, "sample.i32", PI_META_I32, &i32));
        TRY("sample.f32", gguf_writer_add_scalar(w, "sample.f32", PI_META_F32, &f32));
        TRY("sample.bool_true",
            gguf_writer_add_scalar(w, "sample.bool_true", PI_META_BOOL, &bt));
        TRY("sample.bool_false",
            gguf_writer_add_scalar(w, "sample.bool_false", PI_META_BOOL, &bf));
        TRY("sample.u64", gguf_writer_add_scalar(w, "sample.u64", PI_META_U64, &u64));
        TRY("sample.i64", gguf_writer_add_scalar(w, "sample.i64", PI_META_I64, &i64));
        TRY("sample.f64", gguf_writer_add_scalar(w, "sample.f64", PI_META_F64, &f64));
        TRY("sample.f64_neg",
            gguf_writer_add_scalar(w, "sample.f64_neg", PI_META_F64, &f64n));
    }

    /* ---- arrays ---- */
    {
        static const uint8_t a_u8[] = {0, 1, 127, 128, 255};
        static const int8_t a_i8[] = {-128, -1, 0, 1, 127};
        static const uint16_t a_u16[] = {0, 1, 65535};
        static const int16_t a_i16[] = {-32768, 0, 32767};
        static const uint32_t a_u32[] = {0, 1, 4294967295u};
        static const int32_t a_i32[] = {INT32_MIN, -1, 0, INT32_MAX};
        static const float a_f32[] = {0.0f, -1.5f, 0.1f, 3.4028234663852886e38f, -0.0f};
        static const uint8_t a_bool[] = {1, 0, 1};
        static const uint64_t a_u64[] = {0, 1, UINT64_MAX};
        static const int64_t a_i64[] = {INT64_MIN, -1, 0, INT64_MAX};
        static const double a_f64[] = {0.0, -2.5, 1e300, 4.9406564584124654e-324};
        static const char *const a_str[] = {"alpha", "", "\xce\xb2\xce\xb7\xcf\x84\xce\xb1",
                                            "with space", "quote\"q"};
        TRY("arr_u8", gguf_writer_add_array(w, "sample.arr_u8", PI_META_U8, a_u8, N_OF(a_u8)));
        TRY("arr_i8", gguf_writer_add_array(w, "sample.arr_i8", PI_META_I8, a_i8, N_OF(a_i8)));
        TRY("arr_u16",
            gguf_writer_add_array(w, "sample.arr_u16", PI_META_U16, a_u16, N_OF(a_u16)));
        TRY("arr_i16",
            gguf_writer_add_array(w, "sample.arr_i16", PI_META_I16, a_i16, N_OF(a_i16)));
        TRY("arr_u32",
            gguf_writer_add_array(w, "sample.arr_u32", PI_META_U32, a_u32, N_OF(a_u32)));
        TRY("arr_i32",
            gguf_writer_add_array(w, "sample.arr_i32", PI_META_I32, a_i32, N_OF(a_i32)));
        TRY("arr_f32",
            gguf_writer_add_array(w, "sample.arr_f32", PI_META_F32, a_f32, N_OF(a_f32)));
        TRY("arr_bool",
            gguf_writer_add_array(w, "sample.arr_bool", PI_META_BOOL, a_bool, N_OF(a_bool)));
        TRY("arr_u64",
            gguf_writer_add_array(w, "sample.arr_u64", PI_META_U64, a_u64, N_OF(a_u64)));
        TRY("arr_i64",
            gguf_writer_add_array(w, "sample.arr_i64", PI_META_I64, a_i64, N_OF(a_i64)));
        TRY("arr_f64",
            gguf_writer_add_array(w, "sample.arr_f64", PI_META_F64, a_f64, N_OF(a_f64)));
        TRY("arr_str", gguf_writer_add_string_array(w, "sample.arr_str", a_str, N_OF(a_str)));
    }
    TRY("sample.last", gguf_writer_add_string(w, "sample.last", "end"));

    /* ---- tensors ---- */
    {
        /* F32 {5,3}: element i = i * 0.25 - 1 */
        float t_f32[15];
        for (int i = 0; i < 15; i++)
            t_f32[i] = (float)i * 0.25f - 1.0f;
        const int64_t ne_f32[2] = {5, 3};
        TRY("t.f32", gguf_writer_add_tensor(w, "t.f32", PI_TYPE_F32, 2, ne_f32, t_f32));

        /* F16 {8}: bit patterns 1, -2, 0.5, 0, -0, 65504, smallest subnormal, 1/3 */
        static const uint16_t t_f16[8] = {0x3c00, 0xc000, 0x3800, 0x0000,
                                          0x8000, 0x7bff, 0x0001, 0x3555};
        const int64_t ne_f16[1] = {8};
        TRY("t.f16", gguf_writer_add_tensor(w, "t.f16", PI_TYPE_F16, 1, ne_f16, t_f16));

        /* Q8_0 {64,2}: 4 blocks of 34 bytes; block b: fp16 scale 0x2c00 + 0x200*b
         * (0.0625, 0.125, 0.25, 0.5) little-endian, then qs[j] = (j*37 + b*11 + 5) & 255 */
        uint8_t t_q8[4 * 34];
        for (int b = 0; b < 4; b++) {
            uint16_t scale = (uint16_t)(0x2c00 + 0x200 * b);
            t_q8[34 * b] = (uint8_t)(scale & 0xff);
            t_q8[34 * b + 1] = (uint8_t)(scale >> 8);
            for (int j = 0; j < 32; j++)
                t_q8[34 * b + 2 + j] = (uint8_t)((j * 37 + b * 11 + 5) & 255);
        }
        const int64_t ne_q8[2] = {64, 2};
        TRY("t.q8_0", gguf_writer_add_tensor(w, "t.q8_0", PI_TYPE_Q8_0, 2, ne_q8, t_q8));

        static const int32_t t_i32[7] = {-3, 0, 1, INT32_MAX, INT32_MIN, 42, 7};
        const int64_t ne_i32[1] = {7};
        TRY("t.i32", gguf_writer_add_tensor(w, "t.i32", PI_TYPE_I32, 1, ne_i32, t_i32));
    }

    struct pi_error err;
    memset(&err, 0, sizeof err);
    st = gguf_writer_write_file(w, argv[1], magic, &err);
    gguf_writer_destroy(w);
    if (st < 0) {
        fprintf(stderr, "gguf_write_sample: write %s: %s (%d): %s\n", argv[1],
                status_name(st), st, err.msg);
        return 1;
    }
    return 0;
}
