/* gguf_dump.c -- test tool: parse a GGUF / PWRI file with the library's reader and
 * print what it found as one JSON document on stdout.
 *
 *   gguf_dump FILE
 *
 * {"magic": "GGUF"|"PWRI", "version": N, "alignment": N, "data_offset": N,
 *  "kv": [{"key": K, "type": T, "elem_type": E|null, "n": N, "value": V}, ...],
 *  "tensors": [{"name": S, "type": T, "dims": [...], "offset": N, "nbytes": N,
 *               "sha256": HEX}, ...]}
 *
 * kv and tensors are in file order. Integers and bools are printed exactly (bools
 * as true/false), floats with "%.17g" (always with a '.' or exponent so that JSON
 * readers see a float; NaN and infinities as the strings "nan", "inf", "-inf"),
 * strings as their raw UTF-8 bytes with only '"', '\\' and bytes below 0x20
 * escaped, arrays as JSON lists. Arrays of arrays cannot be read through the
 * gguf_kv_* accessors: their value is the string "<nested>" ("n" still gives the
 * outer count). "sha256" hashes the tensor's nbytes bytes of data.
 *
 * On a parse failure the status and message go to stderr and the exit status is 1.
 * Used by tests/format/test_roundtrip.py. */
#include <math.h>
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

/* ---- SHA-256 (FIPS 180-4) ---------------------------------------------------- */

struct sha256 {
    uint32_t h[8];
    uint8_t buf[64];
    uint64_t total; /* bytes hashed so far */
    size_t used;    /* bytes in buf */
};

static const uint32_t sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u,
    0x923f82a4u, 0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u,
    0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u,
    0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u,
    0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u,
    0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au,
    0x5b9cca4fu, 0x682e6ff3u, 0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u,
    0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(struct sha256 *s, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
    uint32_t e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                      sha256_k[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    s->h[0] += a;
    s->h[1] += b;
    s->h[2] += c;
    s->h[3] += d;
    s->h[4] += e;
    s->h[5] += f;
    s->h[6] += g;
    s->h[7] += h;
}

static void sha256_init(struct sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(s->h, h0, sizeof h0);
    s->total = 0;
    s->used = 0;
}

static void sha256_update(struct sha256 *s, const uint8_t *p, uint64_t n) {
    s->total += n;
    while (n > 0) {
        if (s->used == 0 && n >= 64) {
            sha256_block(s, p);
            p += 64;
            n -= 64;
            continue;
        }
        size_t take = 64 - s->used;
        if (take > n)
            take = (size_t)n;
        memcpy(s->buf + s->used, p, take);
        s->used += take;
        p += take;
        n -= take;
        if (s->used == 64) {
            sha256_block(s, s->buf);
            s->used = 0;
        }
    }
}

static void sha256_hex(struct sha256 *s, char out[65]) {
    uint64_t bits = s->total * 8;
    uint8_t pad[72] = {0x80};
    size_t padlen = (s->used < 56) ? 56 - s->used : 120 - s->used;
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(s, pad, padlen);
    sha256_update(s, len, 8);
    for (int i = 0; i < 8; i++)
        sprintf(out + 8 * i, "%08lx", (unsigned long)s->h[i]);
    out[64] = 0;
}

/* ---- JSON output ---------------------------------------------------------------- */

static void put_jstr(const char *s, uint64_t len) {
    putchar('"');
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            putchar('\\');
            putchar(c);
        } else if (c < 0x20) {
            printf("\\u%04x", c);
        } else {
            putchar(c);
        }
    }
    putchar('"');
}

static void put_double(double v) {
    if (isnan(v)) {
        fputs("\"nan\"", stdout);
    } else if (isinf(v)) {
        fputs(v > 0 ? "\"inf\"" : "\"-inf\"", stdout);
    } else {
        char b[64];
        snprintf(b, sizeof b, "%.17g", v);
        fputs(b, stdout);
        if (!strpbrk(b, ".eE"))
            fputs(".0", stdout);
    }
}

static int is_int_type(uint32_t t) {
    switch (t) {
    case PI_META_U8: case PI_META_I8: case PI_META_U16: case PI_META_I16:
    case PI_META_U32: case PI_META_I32: case PI_META_U64: case PI_META_I64:
        return 1;
    default:
        return 0;
    }
}

/* One value (element i) of scalar type t. Returns 0, or a negative status. */
static int put_value(const struct gguf_file *f, const struct gguf_kv *kv, uint32_t t,
                     uint64_t i) {
    int st;
    if (t == PI_META_BOOL) {
        int64_t v;
        if ((st = gguf_kv_int(f, kv, i, &v)) < 0)
            return st;
        fputs(v ? "true" : "false", stdout);
    } else if (is_int_type(t)) {
        int64_t v;
        st = gguf_kv_int(f, kv, i, &v);
        if (st == PI_ERR_RANGE && t == PI_META_U64) {
            /* Beyond INT64_MAX: gguf_kv_int cannot return it; read the raw
             * little-endian bytes. */
            const uint8_t *p = f->base + kv->off + i * 8;
            uint64_t u = 0;
            for (int b = 7; b >= 0; b--)
                u = u << 8 | p[b];
            printf("%llu", (unsigned long long)u);
            return 0;
        }
        if (st < 0)
            return st;
        printf("%lld", (long long)v);
    } else if (t == PI_META_F32 || t == PI_META_F64) {
        double v;
        if ((st = gguf_kv_float(f, kv, i, &v)) < 0)
            return st;
        put_double(v);
    } else if (t == PI_META_STRING) {
        const char *s;
        uint64_t len;
        if ((st = gguf_kv_str(f, kv, i, &s, &len)) < 0)
            return st;
        put_jstr(s, len);
    } else {
        return PI_ERR_TYPE;
    }
    return 0;
}

static int put_kv(const struct gguf_file *f, const struct gguf_kv *kv) {
    int st = 0;
    fputs("{\"key\": ", stdout);
    put_jstr(kv->key, strlen(kv->key));
    printf(", \"type\": %lu, \"elem_type\": ", (unsigned long)kv->type);
    if (kv->type == PI_META_ARRAY)
        printf("%lu", (unsigned long)kv->elem_type);
    else
        fputs("null", stdout);
    printf(", \"n\": %llu, \"value\": ", (unsigned long long)kv->n);
    if (kv->type != PI_META_ARRAY) {
        if ((st = put_value(f, kv, kv->type, 0)) < 0)
            fputs("null", stdout);
    } else if (kv->elem_type == PI_META_ARRAY) {
        fputs("\"<nested>\"", stdout);
    } else {
        putchar('[');
        for (uint64_t i = 0; i < kv->n && st == 0; i++) {
            if (i)
                fputs(", ", stdout);
            if ((st = put_value(f, kv, kv->elem_type, i)) < 0)
                fputs("null", stdout);
        }
        putchar(']');
    }
    putchar('}');
    if (st < 0)
        fprintf(stderr, "gguf_dump: key %s: value not readable: %s (%d)\n", kv->key,
                status_name(st), st);
    return st;
}

static void put_tensor(const struct gguf_tensor *t) {
    struct sha256 s;
    char hex[65];
    sha256_init(&s);
    if (t->nbytes)
        sha256_update(&s, t->data, t->nbytes);
    sha256_hex(&s, hex);
    fputs("{\"name\": ", stdout);
    put_jstr(t->name, strlen(t->name));
    printf(", \"type\": %lu, \"dims\": [", (unsigned long)t->type);
    for (uint32_t d = 0; d < t->n_dims && d < GGUF_MAX_DIMS; d++)
        printf("%s%lld", d ? ", " : "", (long long)t->ne[d]);
    printf("], \"offset\": %llu, \"nbytes\": %llu, \"sha256\": \"%s\"}",
           (unsigned long long)t->offset, (unsigned long long)t->nbytes, hex);
}

/* ---- main ----------------------------------------------------------------------- */

static uint8_t *read_file(const char *path, uint64_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 16;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return NULL;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, fp);
        len += got;
        if (got == 0)
            break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        return NULL;
    }
    *size = len;
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gguf_dump FILE\n");
        return 2;
    }
    uint64_t size = 0;
    uint8_t *buf = read_file(argv[1], &size);
    if (!buf) {
        fprintf(stderr, "gguf_dump: cannot read %s\n", argv[1]);
        return 1;
    }
    struct gguf_file f;
    struct pi_error err;
    memset(&f, 0, sizeof f);
    memset(&err, 0, sizeof err);
    int st = gguf_parse(&f, buf, size, &pi_default_allocator, &err);
    if (st < 0) {
        fprintf(stderr, "gguf_dump: %s: %s (%d): %s\n", argv[1], status_name(st), st,
                err.msg);
        gguf_close(&f);
        free(buf);
        return 1;
    }

    const char *magic = f.magic == GGUF_MAGIC_PWRI   ? "PWRI"
                        : f.magic == GGUF_MAGIC_GGUF ? "GGUF"
                                                     : "?";
    printf("{\"magic\": \"%s\", \"version\": %lu, \"alignment\": %lu, "
           "\"data_offset\": %llu,\n \"kv\": [",
           magic, (unsigned long)f.version, (unsigned long)f.alignment,
           (unsigned long long)f.data_off);
    int rc = 0;
    for (uint64_t i = 0; i < f.n_kv; i++) {
        fputs(i ? ",\n  " : "\n  ", stdout);
        if (put_kv(&f, &f.kv[i]) < 0)
            rc = 1;
    }
    fputs("],\n \"tensors\": [", stdout);
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        fputs(i ? ",\n  " : "\n  ", stdout);
        put_tensor(&f.tensors[i]);
    }
    fputs("]}\n", stdout);

    gguf_close(&f);
    free(buf);
    if (fflush(stdout) != 0)
        rc = 1;
    return rc;
}
