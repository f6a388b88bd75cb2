/* gguf_read.c -- validating GGUF / PowerInfer-GGUF reader.
 *
 * The parser walks the buffer with a cursor that never reads past the end; every
 * number taken from the file is checked before it sizes anything. Allocations are
 * bounded by the buffer size: a count is compared with the bytes left (each item
 * needs a known minimum number of bytes) before an array of that many items is
 * allocated. */
#include "model/gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/types.h"

struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    struct pi_error *err;
};

static uint64_t left(const struct cursor *c) {
    return c->size - c->pos;
}

/* Little-endian loads; the file is little-endian whatever the host is. */
static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_u64(const uint8_t *p) {
    return (uint64_t)load_u32(p) | (uint64_t)load_u32(p + 4) << 32;
}

static int need(struct cursor *c, uint64_t n, const char *what) {
    if (n > left(c))
        PI_FAIL(c->err, PI_ERR_FORMAT,
                "truncated file: %s needs %llu bytes at offset %llu, %llu left", what,
                (unsigned long long)n, (unsigned long long)c->pos,
                (unsigned long long)left(c));
    return PI_OK;
}

static int read_u32(struct cursor *c, uint32_t *v, const char *what) {
    PI_TRY(need(c, 4, what));
    *v = load_u32(c->base + c->pos);
    c->pos += 4;
    return PI_OK;
}

static int read_u64(struct cursor *c, uint64_t *v, const char *what) {
    PI_TRY(need(c, 8, what));
    *v = load_u64(c->base + c->pos);
    c->pos += 8;
    return PI_OK;
}

/* A string: u64 length then bytes. Sets *s to the bytes in the buffer. */
static int read_str(struct cursor *c, const char **s, uint64_t *len, const char *what) {
    uint64_t at = c->pos;
    PI_TRY(read_u64(c, len, what));
    if (*len > left(c))
        PI_FAIL(c->err, PI_ERR_FORMAT,
                "%s at offset %llu has length %llu, more than the %llu bytes left", what,
                (unsigned long long)at, (unsigned long long)*len,
                (unsigned long long)left(c));
    *s = (const char *)(c->base + c->pos);
    c->pos += *len;
    return PI_OK;
}

uint32_t gguf_value_size(uint32_t type) {
    switch (type) {
    case PI_META_U8:
    case PI_META_I8:
    case PI_META_BOOL:
        return 1;
    case PI_META_U16:
    case PI_META_I16:
        return 2;
    case PI_META_U32:
    case PI_META_I32:
    case PI_META_F32:
        return 4;
    case PI_META_U64:
    case PI_META_I64:
    case PI_META_F64:
        return 8;
    default:
        return 0;
    }
}

static int valid_value_type(uint32_t t) {
    return t <= PI_META_F64;
}

/* Skip (and validate) `n` values of type `type` starting at the cursor; depth counts
 * array nesting. Bool bytes must be 0 or 1. */
static int skip_values(struct cursor *c, uint32_t type, uint64_t n, unsigned depth,
                       const char *key) {
    if (!valid_value_type(type))
        PI_FAIL(c->err, PI_ERR_FORMAT, "key '%s': invalid value type %u at offset %llu", key,
                type, (unsigned long long)c->pos);
    uint32_t vs = gguf_value_size(type);
    if (vs) {
        if (n > left(c) / vs)
            PI_FAIL(c->err, PI_ERR_FORMAT,
                    "key '%s': %llu values of %u bytes at offset %llu exceed the %llu bytes "
                    "left",
                    key, (unsigned long long)n, vs, (unsigned long long)c->pos,
                    (unsigned long long)left(c));
        if (type == PI_META_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                uint8_t b = c->base[c->pos + i];
                if (b > 1)
                    PI_FAIL(c->err, PI_ERR_FORMAT,
                            "key '%s': bool value %u at offset %llu is not 0 or 1", key, b,
                            (unsigned long long)(c->pos + i));
            }
        }
        c->pos += n * vs;
        return PI_OK;
    }
    if (type == PI_META_STRING) {
        /* Each string needs at least its 8-byte length. */
        if (n > left(c) / 8)
            PI_FAIL(c->err, PI_ERR_FORMAT,
                    "key '%s': %llu strings at offset %llu cannot fit in the %llu bytes left",
                    key, (unsigned long long)n, (unsigned long long)c->pos,
                    (unsigned long long)left(c));
        for (uint64_t i = 0; i < n; i++) {
            const char *s;
            uint64_t len;
            PI_TRY(read_str(c, &s, &len, "string value"));
        }
        return PI_OK;
    }
    /* Arrays of arrays: each element is (u32 type, u64 count, values). */
    if (depth >= GGUF_MAX_NESTING)
        PI_FAIL(c->err, PI_ERR_FORMAT, "key '%s': arrays nested deeper than %d at offset %llu",
                key, GGUF_MAX_NESTING, (unsigned long long)c->pos);
    if (n > left(c) / 12)
        PI_FAIL(c->err, PI_ERR_FORMAT,
                "key '%s': %llu arrays at offset %llu cannot fit in the %llu bytes left", key,
                (unsigned long long)n, (unsigned long long)c->pos,
                (unsigned long long)left(c));
    for (uint64_t i = 0; i < n; i++) {
        uint32_t et;
        uint64_t en;
        PI_TRY(read_u32(c, &et, "array element type"));
        PI_TRY(read_u64(c, &en, "array length"));
        PI_TRY(skip_values(c, et, en, depth + 1, key));
    }
    return PI_OK;
}

static int check_name(struct cursor *c, const char *s, uint64_t len, uint64_t at,
                      uint64_t max, const char *what) {
    if (len == 0)
        PI_FAIL(c->err, PI_ERR_FORMAT, "empty %s at offset %llu", what, (unsigned long long)at);
    if (len > max)
        PI_FAIL(c->err, PI_ERR_FORMAT, "%s at offset %llu is %llu bytes long (limit %llu)",
                what, (unsigned long long)at, (unsigned long long)len,
                (unsigned long long)max);
    if (memchr(s, '\0', (size_t)len))
        PI_FAIL(c->err, PI_ERR_FORMAT, "%s at offset %llu contains a NUL byte", what,
                (unsigned long long)at);
    return PI_OK;
}

static int parse_kv(struct cursor *c, struct gguf_kv *kv, const struct pi_allocator *a) {
    uint64_t at = c->pos;
    const char *key;
    uint64_t klen;
    PI_TRY(read_str(c, &key, &klen, "key"));
    PI_TRY(check_name(c, key, klen, at, GGUF_MAX_KEY, "key"));
    kv->key = pi_strndup(a, key, (size_t)klen);
    if (!kv->key)
        PI_FAIL(c->err, PI_ERR_NOMEM, "out of memory reading metadata");
    PI_TRY(read_u32(c, &kv->type, "value type"));
    if (!valid_value_type(kv->type))
        PI_FAIL(c->err, PI_ERR_FORMAT, "key '%s': invalid value type %u at offset %llu",
                kv->key, kv->type, (unsigned long long)(c->pos - 4));
    if (kv->type == PI_META_ARRAY) {
        PI_TRY(read_u32(c, &kv->elem_type, "array element type"));
        PI_TRY(read_u64(c, &kv->n, "array length"));
        kv->off = c->pos;
        PI_TRY(skip_values(c, kv->elem_type, kv->n, 1, kv->key));
        kv->size = c->pos - kv->off;
        if (kv->elem_type == PI_META_STRING && kv->n > 0) {
            kv->str_off = pi_calloc(a, (size_t)kv->n, sizeof *kv->str_off);
            if (!kv->str_off)
                PI_FAIL(c->err, PI_ERR_NOMEM, "out of memory indexing string array '%s'",
                        kv->key);
            uint64_t p = kv->off;
            for (uint64_t i = 0; i < kv->n; i++) {
                kv->str_off[i] = p;
                p += 8 + load_u64(c->base + p); /* validated by skip_values */
            }
        }
    } else {
        kv->n = 1;
        kv->off = c->pos;
        PI_TRY(skip_values(c, kv->type, 1, 0, kv->key));
        kv->size = c->pos - kv->off;
    }
    return PI_OK;
}

/* Multiply without overflow into int64; 0 on overflow. */
static int mul_i64(int64_t a, int64_t b, int64_t *out) {
    if (a != 0 && b > INT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

static int parse_tensor_info(struct cursor *c, struct gguf_tensor *t) {
    uint64_t at = c->pos;
    const char *name;
    uint64_t nlen;
    PI_TRY(read_str(c, &name, &nlen, "tensor name"));
    PI_TRY(check_name(c, name, nlen, at, GGUF_MAX_NAME - 1, "tensor name"));
    memcpy(t->name, name, (size_t)nlen);
    t->name[nlen] = '\0';
    PI_TRY(read_u32(c, &t->n_dims, "tensor dimension count"));
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        PI_FAIL(c->err, PI_ERR_FORMAT, "tensor '%s' has %u dimensions (1..%d allowed)",
                t->name, t->n_dims, GGUF_MAX_DIMS);
    int64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        if (d < t->n_dims)
            PI_TRY(read_u64(c, &v, "tensor dimension"));
        if (v > (uint64_t)INT64_MAX)
            PI_FAIL(c->err, PI_ERR_FORMAT, "tensor '%s': dimension %u is negative (%lld)",
                    t->name, d, (long long)(int64_t)v);
        t->ne[d] = (int64_t)v;
        if (!mul_i64(nel, t->ne[d], &nel))
            PI_FAIL(c->err, PI_ERR_FORMAT, "tensor '%s': element count overflows", t->name);
    }
    PI_TRY(read_u32(c, &t->type, "tensor type"));
    const struct pi_type_traits *tt = pi_type_traits(t->type);
    if (!tt)
        PI_FAIL(c->err, PI_ERR_FORMAT, "tensor '%s': unknown type id %u", t->name, t->type);
    if (t->ne[0] % tt->block_size)
        PI_FAIL(c->err, PI_ERR_FORMAT,
                "tensor '%s': row length %lld is not a multiple of the %s block size %u",
                t->name, (long long)t->ne[0], tt->name, tt->block_size);
    /* nbytes = blocks * block_bytes; nel/block_size * block_bytes can still overflow. */
    uint64_t blocks = (uint64_t)nel / tt->block_size;
    if (blocks > UINT64_MAX / 2 / tt->block_bytes)
        PI_FAIL(c->err, PI_ERR_FORMAT, "tensor '%s': byte size overflows", t->name);
    t->nbytes = blocks * tt->block_bytes;
    PI_TRY(read_u64(c, &t->offset, "tensor offset"));
    return PI_OK;
}

static int cmp_kv_keys(const struct gguf_file *f, uint64_t a, uint64_t b) {
    return strcmp(f->kv[a].key, f->kv[b].key);
}

/* qsort has no context argument in C11: sort index arrays with a small heap sort
 * that takes one (O(n log n), no recursion, no allocation). */
static void sort_indices(uint64_t *idx, uint64_t n, const struct gguf_file *f,
                         int (*cmp)(const struct gguf_file *, uint64_t, uint64_t)) {
    if (n < 2)
        return;
    for (uint64_t start = n / 2; start-- > 0;) {
        uint64_t root = start;
        for (;;) {
            uint64_t child = 2 * root + 1;
            if (child >= n)
                break;
            if (child + 1 < n && cmp(f, idx[child], idx[child + 1]) < 0)
                child++;
            if (cmp(f, idx[root], idx[child]) >= 0)
                break;
            uint64_t t = idx[root];
            idx[root] = idx[child];
            idx[child] = t;
            root = child;
        }
    }
    for (uint64_t end = n - 1; end > 0; end--) {
        uint64_t t = idx[0];
        idx[0] = idx[end];
        idx[end] = t;
        uint64_t root = 0;
        for (;;) {
            uint64_t child = 2 * root + 1;
            if (child >= end)
                break;
            if (child + 1 < end && cmp(f, idx[child], idx[child + 1]) < 0)
                child++;
            if (cmp(f, idx[root], idx[child]) >= 0)
                break;
            uint64_t s = idx[root];
            idx[root] = idx[child];
            idx[child] = s;
            root = child;
        }
    }
}

static int cmp_tensor_names(const struct gguf_file *f, uint64_t a, uint64_t b) {
    return strcmp(f->tensors[a].name, f->tensors[b].name);
}

static int cmp_tensor_offsets(const struct gguf_file *f, uint64_t a, uint64_t b) {
    uint64_t x = f->tensors[a].offset, y = f->tensors[b].offset;
    return x < y ? -1 : x > y;
}

static int resolve_alignment(struct gguf_file *f, struct pi_error *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv)
        return PI_OK;
    if (kv->type != PI_META_U32)
        PI_FAIL(err, PI_ERR_FORMAT, "general.alignment must be a u32 (it has value type %u)",
                kv->type);
    uint32_t a = load_u32(f->base + kv->off);
    if (a == 0 || (a & (a - 1)) != 0)
        PI_FAIL(err, PI_ERR_FORMAT, "general.alignment %u is not a power of two", a);
    f->alignment = a;
    return PI_OK;
}

static int check_tensor_data(struct gguf_file *f, struct pi_error *err) {
    uint64_t data_size = f->size - f->data_off;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment)
            PI_FAIL(err, PI_ERR_FORMAT, "tensor '%s': offset %llu is not a multiple of the "
                    "alignment %u", t->name, (unsigned long long)t->offset, f->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            PI_FAIL(err, PI_ERR_FORMAT,
                    "tensor '%s': data [%llu, +%llu) runs past the end of the file (data "
                    "section starts at %llu, file is %llu bytes)",
                    t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                    (unsigned long long)f->data_off, (unsigned long long)f->size);
        t->data = t->nbytes ? f->base + f->data_off + t->offset : NULL;
    }
    /* Overlap: sort by offset (reusing the name index's memory is not possible, it is
     * kept), then compare neighbours. */
    if (f->n_tensors < 2)
        return PI_OK;
    uint64_t *by_off = pi_calloc(f->alloc, (size_t)f->n_tensors, sizeof *by_off);
    if (!by_off)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory checking tensor offsets");
    for (uint64_t i = 0; i < f->n_tensors; i++)
        by_off[i] = i;
    sort_indices(by_off, f->n_tensors, f, cmp_tensor_offsets);
    int status = PI_OK;
    uint64_t end = 0;
    const char *prev = NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[by_off[i]];
        if (t->nbytes == 0)
            continue;
        if (prev && t->offset < end) {
            status = pi_error_set(err, PI_ERR_FORMAT, "tensors '%s' and '%s' overlap", prev,
                                  t->name);
            break;
        }
        end = t->offset + t->nbytes;
        prev = t->name;
    }
    pi_free(f->alloc, by_off);
    return status;
}

static int parse(struct gguf_file *f, struct cursor *c) {
    struct pi_error *err = c->err;
    uint32_t magic;
    if (c->size < 4)
        PI_FAIL(err, PI_ERR_FORMAT, "file of %llu bytes is too short to be GGUF",
                (unsigned long long)c->size);
    PI_TRY(read_u32(c, &magic, "magic"));
    if (magic != GGUF_MAGIC_GGUF && magic != GGUF_MAGIC_PWRI)
        PI_FAIL(err, PI_ERR_FORMAT,
                "not a GGUF file: magic is %02x %02x %02x %02x, expected 'GGUF' or 'PWRI'",
                c->base[0], c->base[1], c->base[2], c->base[3]);
    f->magic = magic;
    PI_TRY(read_u32(c, &f->version, "version"));
    if (f->version != 0 && (f->version & 0xffffu) == 0)
        PI_FAIL(err, PI_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    if (f->version == 1)
        PI_FAIL(err, PI_ERR_FORMAT, "GGUF version 1 is obsolete and not supported");
    if (f->version < 2 || f->version > 3)
        PI_FAIL(err, PI_ERR_FORMAT, "unknown GGUF version %u (2 and 3 are read)", f->version);
    PI_TRY(read_u64(c, &f->n_tensors, "tensor count"));
    PI_TRY(read_u64(c, &f->n_kv, "metadata count"));

    /* A KV pair needs at least 8 (key length) + 1 (key) + 4 (type) + 1 (value) bytes, a
     * tensor info 8 + 1 + 4 + 8 + 4 + 8; larger counts cannot be honest. */
    uint64_t n_kv = f->n_kv, n_t = f->n_tensors;
    f->n_kv = f->n_tensors = 0; /* nothing allocated yet */
    if (n_kv > left(c) / 14)
        PI_FAIL(err, PI_ERR_FORMAT, "metadata count %llu cannot fit in a %llu-byte file",
                (unsigned long long)n_kv, (unsigned long long)c->size);
    if (n_t > left(c) / 33)
        PI_FAIL(err, PI_ERR_FORMAT, "tensor count %llu cannot fit in a %llu-byte file",
                (unsigned long long)n_t, (unsigned long long)c->size);

    if (n_kv) {
        f->kv = pi_calloc(f->alloc, (size_t)n_kv, sizeof *f->kv);
        f->kv_sorted = pi_calloc(f->alloc, (size_t)n_kv, sizeof *f->kv_sorted);
        if (!f->kv || !f->kv_sorted)
            PI_FAIL(err, PI_ERR_NOMEM, "out of memory for %llu metadata entries",
                    (unsigned long long)n_kv);
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        f->n_kv = i + 1; /* so gguf_close frees what parse_kv allocated */
        PI_TRY(parse_kv(c, &f->kv[i], f->alloc));
        f->kv_sorted[i] = i;
    }
    sort_indices(f->kv_sorted, f->n_kv, f, cmp_kv_keys);
    for (uint64_t i = 1; i < f->n_kv; i++)
        if (cmp_kv_keys(f, f->kv_sorted[i - 1], f->kv_sorted[i]) == 0)
            PI_FAIL(err, PI_ERR_FORMAT, "duplicate metadata key '%s'",
                    f->kv[f->kv_sorted[i]].key);
    PI_TRY(resolve_alignment(f, err));

    if (n_t) {
        f->tensors = pi_calloc(f->alloc, (size_t)n_t, sizeof *f->tensors);
        f->tensor_sorted = pi_calloc(f->alloc, (size_t)n_t, sizeof *f->tensor_sorted);
        if (!f->tensors || !f->tensor_sorted)
            PI_FAIL(err, PI_ERR_NOMEM, "out of memory for %llu tensors",
                    (unsigned long long)n_t);
    }
    f->n_tensors = n_t;
    for (uint64_t i = 0; i < n_t; i++) {
        PI_TRY(parse_tensor_info(c, &f->tensors[i]));
        f->tensor_sorted[i] = i;
    }
    sort_indices(f->tensor_sorted, f->n_tensors, f, cmp_tensor_names);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        if (cmp_tensor_names(f, f->tensor_sorted[i - 1], f->tensor_sorted[i]) == 0)
            PI_FAIL(err, PI_ERR_FORMAT, "duplicate tensor name '%s'",
                    f->tensors[f->tensor_sorted[i]].name);

    uint64_t pad = (f->alignment - c->pos % f->alignment) % f->alignment;
    f->data_off = c->pos + pad;
    if (f->n_tensors == 0) {
        if (f->data_off > f->size)
            f->data_off = f->size; /* a metadata-only file may omit the final padding */
        return PI_OK;
    }
    if (pad > left(c))
        PI_FAIL(err, PI_ERR_FORMAT,
                "truncated file: the data section should start at offset %llu, file is %llu "
                "bytes", (unsigned long long)f->data_off, (unsigned long long)f->size);
    return check_tensor_data(f, err);
}

int gguf_parse(struct gguf_file *f, const void *data, uint64_t size,
               const struct pi_allocator *alloc, struct pi_error *err) {
    memset(f, 0, sizeof *f);
    f->base = data;
    f->size = size;
    f->alloc = alloc;
    if (!data && size)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "no data");
    struct cursor c = {data, size, 0, err};
    int status = parse(f, &c);
    if (status < 0) {
        gguf_close(f);
        f->base = data;
        f->size = size;
        f->alloc = alloc;
    }
    return status;
}

void gguf_close(struct gguf_file *f) {
    if (!f || !f->alloc)
        return;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        pi_free(f->alloc, f->kv[i].key);
        pi_free(f->alloc, f->kv[i].str_off);
    }
    pi_free(f->alloc, f->kv);
    pi_free(f->alloc, f->kv_sorted);
    pi_free(f->alloc, f->tensors);
    pi_free(f->alloc, f->tensor_sorted);
    const struct pi_allocator *a = f->alloc;
    memset(f, 0, sizeof *f);
    f->alloc = a;
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key) {
    uint64_t lo = 0, hi = f->n_kv;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const struct gguf_kv *kv = &f->kv[f->kv_sorted[mid]];
        int c = strcmp(kv->key, key);
        if (c == 0)
            return kv;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int64_t gguf_find_tensor(const struct gguf_file *f, const char *name) {
    uint64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        uint64_t i = f->tensor_sorted[mid];
        int c = strcmp(f->tensors[i].name, name);
        if (c == 0)
            return (int64_t)i;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Offset of element i of a numeric array or scalar kv, after type checks. */
static int element_at(const struct gguf_kv *kv, uint64_t i, uint32_t *type, uint64_t *off) {
    *type = kv->type == PI_META_ARRAY ? kv->elem_type : kv->type;
    uint32_t vs = gguf_value_size(*type);
    if (!vs)
        return PI_ERR_TYPE;
    if (i >= kv->n)
        return PI_ERR_RANGE;
    *off = kv->off + i * vs;
    return PI_OK;
}

int gguf_kv_int(const struct gguf_file *f, const struct gguf_kv *kv, uint64_t i,
                int64_t *out) {
    uint32_t type;
    uint64_t off;
    PI_TRY(element_at(kv, i, &type, &off));
    const uint8_t *p = f->base + off;
    switch (type) {
    case PI_META_U8:
    case PI_META_BOOL:
        *out = p[0];
        return PI_OK;
    case PI_META_I8:
        *out = (int8_t)p[0];
        return PI_OK;
    case PI_META_U16:
        *out = (uint16_t)(p[0] | p[1] << 8);
        return PI_OK;
    case PI_META_I16:
        *out = (int16_t)(uint16_t)(p[0] | p[1] << 8);
        return PI_OK;
    case PI_META_U32:
        *out = load_u32(p);
        return PI_OK;
    case PI_META_I32:
        *out = (int32_t)load_u32(p);
        return PI_OK;
    case PI_META_U64: {
        uint64_t v = load_u64(p);
        if (v > (uint64_t)INT64_MAX)
            return PI_ERR_RANGE;
        *out = (int64_t)v;
        return PI_OK;
    }
    case PI_META_I64:
        *out = (int64_t)load_u64(p);
        return PI_OK;
    default:
        return PI_ERR_TYPE;
    }
}

int gguf_kv_float(const struct gguf_file *f, const struct gguf_kv *kv, uint64_t i,
                  double *out) {
    uint32_t type;
    uint64_t off;
    PI_TRY(element_at(kv, i, &type, &off));
    const uint8_t *p = f->base + off;
    if (type == PI_META_F32) {
        uint32_t b = load_u32(p);
        float v;
        memcpy(&v, &b, 4);
        *out = v;
        return PI_OK;
    }
    if (type == PI_META_F64) {
        uint64_t b = load_u64(p);
        memcpy(out, &b, 8);
        return PI_OK;
    }
    if (type == PI_META_BOOL)
        return PI_ERR_TYPE;
    if (type == PI_META_U64) {
        *out = (double)load_u64(p);
        return PI_OK;
    }
    int64_t v;
    PI_TRY(gguf_kv_int(f, kv, i, &v));
    *out = (double)v;
    return PI_OK;
}

int gguf_kv_str(const struct gguf_file *f, const struct gguf_kv *kv, uint64_t i,
                const char **s, uint64_t *len) {
    uint64_t off;
    if (kv->type == PI_META_STRING) {
        if (i != 0)
            return PI_ERR_RANGE;
        off = kv->off;
    } else if (kv->type == PI_META_ARRAY && kv->elem_type == PI_META_STRING) {
        if (i >= kv->n)
            return PI_ERR_RANGE;
        off = kv->str_off[i];
    } else {
        return PI_ERR_TYPE;
    }
    *len = load_u64(f->base + off);
    *s = (const char *)(f->base + off + 8);
    return PI_OK;
}

/* ---- Split models ------------------------------------------------------------------ */

#define SPLIT_MAX_COUNT 65535u /* split.count and split.no are u16 */

/* An integer split key: absent (*present = 0), or a scalar integer in [0, max]. */
static int split_key(const struct gguf_file *f, const char *key, int64_t max, int *present,
                     int64_t *v, struct pi_error *err) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    *present = kv != NULL;
    *v = 0;
    if (!kv)
        return PI_OK;
    if (kv->type == PI_META_ARRAY || kv->type == PI_META_BOOL || kv->type == PI_META_STRING ||
        kv->type == PI_META_F32 || kv->type == PI_META_F64)
        PI_FAIL(err, PI_ERR_FORMAT, "%s must be an integer (it has value type %u)", key,
                kv->type);
    if (gguf_kv_int(f, kv, 0, v) < 0 || *v < 0 || *v > max)
        PI_FAIL(err, PI_ERR_FORMAT, "%s is out of range (0..%lld)", key, (long long)max);
    return PI_OK;
}

int gguf_split_info(const struct gguf_file *f, struct gguf_split *s, struct pi_error *err) {
    int has_no, has_count, has_total;
    int64_t no, count, total;
    s->no = 0;
    s->count = 1;
    s->n_tensors = f->n_tensors;
    PI_TRY(split_key(f, "split.count", SPLIT_MAX_COUNT, &has_count, &count, err));
    PI_TRY(split_key(f, "split.no", SPLIT_MAX_COUNT, &has_no, &no, err));
    PI_TRY(split_key(f, "split.tensors.count", INT32_MAX, &has_total, &total, err));
    if (!has_count) {
        if (has_no || has_total)
            PI_FAIL(err, PI_ERR_FORMAT, "%s without split.count",
                    has_no ? "split.no" : "split.tensors.count");
        return PI_OK;
    }
    if (count < 1)
        PI_FAIL(err, PI_ERR_FORMAT, "split.count is 0");
    if (count > 1 && (!has_no || !has_total))
        PI_FAIL(err, PI_ERR_FORMAT, "split.count is %lld but %s is missing", (long long)count,
                has_no ? "split.tensors.count" : "split.no");
    if (no >= count)
        PI_FAIL(err, PI_ERR_FORMAT, "split.no %lld is not below split.count %lld",
                (long long)no, (long long)count);
    if (!has_total)
        total = (int64_t)f->n_tensors;
    if ((uint64_t)total < f->n_tensors || (count == 1 && (uint64_t)total != f->n_tensors))
        PI_FAIL(err, PI_ERR_FORMAT, "split.tensors.count %lld does not fit the %llu tensors "
                "of this file (split.count %lld)", (long long)total,
                (unsigned long long)f->n_tensors, (long long)count);
    s->no = (uint32_t)no;
    s->count = (uint32_t)count;
    s->n_tensors = (uint64_t)total;
    return PI_OK;
}

#define SPLIT_SUFFIX_LEN 20 /* "-00001-of-00003.gguf" */

static int five_digits(const char *s, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 5; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        *v = *v * 10 + (uint32_t)(s[i] - '0');
    }
    return 1;
}

int gguf_split_name(const char *path, size_t *prefix_len, uint32_t *no, uint32_t *count) {
    size_t n = strlen(path);
    if (n < SPLIT_SUFFIX_LEN)
        return 0;
    const char *s = path + n - SPLIT_SUFFIX_LEN;
    if (s[0] != '-' || memcmp(s + 6, "-of-", 4) != 0 || memcmp(s + 15, ".gguf", 5) != 0 ||
        !five_digits(s + 1, no) || !five_digits(s + 10, count) || *no < 1 || *no > *count)
        return 0;
    *prefix_len = n - SPLIT_SUFFIX_LEN;
    return 1;
}

char *gguf_split_path(const struct pi_allocator *a, const char *path, size_t prefix_len,
                      uint32_t no, uint32_t count) {
    char *p = pi_malloc(a, prefix_len + SPLIT_SUFFIX_LEN + 1);
    if (!p)
        return NULL;
    memcpy(p, path, prefix_len);
    snprintf(p + prefix_len, SPLIT_SUFFIX_LEN + 1, "-%05u-of-%05u.gguf", no % 100000u,
             count % 100000u);
    return p;
}

int gguf_split_check_part(const struct gguf_file *first, const struct gguf_split *fs,
                          const struct gguf_file *part, const struct gguf_split *ps,
                          uint32_t no, struct pi_error *err) {
    if (part->magic != first->magic)
        PI_FAIL(err, PI_ERR_FORMAT, "its magic is '%s', the first part's '%s'",
                part->magic == GGUF_MAGIC_PWRI ? "PWRI" : "GGUF",
                first->magic == GGUF_MAGIC_PWRI ? "PWRI" : "GGUF");
    if (part->version != first->version)
        PI_FAIL(err, PI_ERR_FORMAT, "it is GGUF version %u, the first part version %u",
                part->version, first->version);
    if (!gguf_find_kv(part, "split.count"))
        PI_FAIL(err, PI_ERR_FORMAT, "it has no split keys: not a part of a split model");
    if (ps->count != fs->count)
        PI_FAIL(err, PI_ERR_FORMAT, "its split.count is %u, the first part's %u: a part of "
                "another split", ps->count, fs->count);
    if (ps->n_tensors != fs->n_tensors)
        PI_FAIL(err, PI_ERR_FORMAT, "its split.tensors.count is %llu, the first part's %llu: "
                "a part of another split", (unsigned long long)ps->n_tensors,
                (unsigned long long)fs->n_tensors);
    if (ps->no != no)
        PI_FAIL(err, PI_ERR_FORMAT, "its split.no is %u, so it is part %u, not part %u (parts "
                "renamed or swapped?)", ps->no, ps->no + 1, no + 1);
    return PI_OK;
}

/* The part (1-based, f being part 1) holding merged tensor index i. */
static uint64_t part_of(const struct gguf_file *f, const struct gguf_file *parts,
                        uint64_t i) {
    uint64_t end = f->n_tensors, k = 0;
    while (i >= end)
        end += parts[k++].n_tensors;
    return k + 1;
}

int gguf_merge_tensors(struct gguf_file *f, const struct gguf_file *parts, uint64_t n_parts,
                       struct pi_error *err) {
    /* No overflow: each count is bounded by its file's size (gguf_parse). */
    uint64_t total = f->n_tensors;
    for (uint64_t k = 0; k < n_parts; k++)
        total += parts[k].n_tensors;
    if (total == f->n_tensors)
        return PI_OK;
    if (total > SIZE_MAX / sizeof *f->tensors)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory for %llu tensors", (unsigned long long)total);
    struct gguf_file m = *f; /* the merged table, over f's metadata */
    m.n_tensors = total;
    m.tensors = pi_calloc(f->alloc, (size_t)total, sizeof *m.tensors);
    m.tensor_sorted = pi_calloc(f->alloc, (size_t)total, sizeof *m.tensor_sorted);
    if (!m.tensors || !m.tensor_sorted) {
        pi_free(f->alloc, m.tensors);
        pi_free(f->alloc, m.tensor_sorted);
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory for %llu tensors", (unsigned long long)total);
    }
    if (f->n_tensors)
        memcpy(m.tensors, f->tensors, (size_t)f->n_tensors * sizeof *m.tensors);
    uint64_t at = f->n_tensors;
    for (uint64_t k = 0; k < n_parts; k++) {
        if (parts[k].n_tensors)
            memcpy(m.tensors + at, parts[k].tensors,
                   (size_t)parts[k].n_tensors * sizeof *m.tensors);
        at += parts[k].n_tensors;
    }
    for (uint64_t i = 0; i < total; i++)
        m.tensor_sorted[i] = i;
    sort_indices(m.tensor_sorted, total, &m, cmp_tensor_names);
    for (uint64_t i = 1; i < total; i++) {
        uint64_t a = m.tensor_sorted[i - 1], b = m.tensor_sorted[i];
        if (cmp_tensor_names(&m, a, b) == 0) {
            uint64_t pa = part_of(f, parts, a), pb = part_of(f, parts, b);
            int st = pi_error_set(err, PI_ERR_FORMAT, "tensor '%s' is in part %llu and in "
                                  "part %llu", m.tensors[a].name,
                                  (unsigned long long)(pa < pb ? pa : pb),
                                  (unsigned long long)(pa < pb ? pb : pa));
            pi_free(f->alloc, m.tensors);
            pi_free(f->alloc, m.tensor_sorted);
            return st;
        }
    }
    pi_free(f->alloc, f->tensors);
    pi_free(f->alloc, f->tensor_sorted);
    f->tensors = m.tensors;
    f->tensor_sorted = m.tensor_sorted;
    f->n_tensors = total;
    return PI_OK;
}
