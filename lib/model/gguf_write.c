/* gguf_write.c -- GGUF writer: metadata and tensors are collected in memory (copied),
 * then written in one pass: header, KV pairs, tensor infos, padding, aligned data.
 * The streaming variant declares tensors without data and takes their bytes after
 * the header, so nothing but the metadata is held in memory. */
#include "model/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "runtime/types.h"
#include "util/os.h"

struct wkv {
    char *key;
    uint32_t type;
    uint32_t elem_type;
    uint64_t n;
    uint8_t *payload; /* serialised value bytes (without key/type/array header) */
    uint64_t payload_size;
};

struct wtensor {
    char name[GGUF_MAX_NAME];
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint8_t *data;
    int declared; /* added by gguf_writer_add_tensor_info: no data held */
};

struct gguf_writer {
    const struct pi_allocator *alloc;
    uint32_t alignment;
    struct wkv *kv;
    uint64_t n_kv, cap_kv;
    struct wtensor *t;
    uint64_t n_t, cap_t;
    /* streaming state: header written; tensor being written, its bytes so far */
    int header_done;
    uint64_t cur, cur_bytes;
};

int gguf_writer_create(const struct pi_allocator *alloc, struct gguf_writer **out) {
    *out = NULL;
    struct gguf_writer *w = pi_calloc(alloc, 1, sizeof *w);
    if (!w)
        return PI_ERR_NOMEM;
    w->alloc = alloc;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return PI_OK;
}

void gguf_writer_destroy(struct gguf_writer *w) {
    if (!w)
        return;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        pi_free(w->alloc, w->kv[i].key);
        pi_free(w->alloc, w->kv[i].payload);
    }
    for (uint64_t i = 0; i < w->n_t; i++)
        pi_free(w->alloc, w->t[i].data);
    pi_free(w->alloc, w->kv);
    pi_free(w->alloc, w->t);
    pi_free(w->alloc, w);
}

int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)))
        return PI_ERR_INVALID_ARG;
    w->alignment = alignment;
    return PI_OK;
}

/* Grow an array of `elem` sized items to hold one more; no realloc in the allocator
 * interface, so copy. */
static int grow(const struct pi_allocator *a, void **arr, uint64_t n, uint64_t *cap,
                size_t elem) {
    if (n < *cap)
        return PI_OK;
    uint64_t ncap = *cap ? *cap * 2 : 16;
    void *p = pi_calloc(a, (size_t)ncap, elem);
    if (!p)
        return PI_ERR_NOMEM;
    if (n)
        memcpy(p, *arr, (size_t)n * elem);
    pi_free(a, *arr);
    *arr = p;
    *cap = ncap;
    return PI_OK;
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static int add_kv(struct gguf_writer *w, const char *key, uint32_t type, uint32_t elem_type,
                  uint64_t n, uint8_t *payload, uint64_t payload_size) {
    size_t klen = key ? strlen(key) : 0;
    int status = PI_ERR_INVALID_ARG;
    if (klen == 0 || klen > GGUF_MAX_KEY)
        goto fail;
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0)
            goto fail;
    status = PI_ERR_NOMEM;
    if (grow(w->alloc, (void **)&w->kv, w->n_kv, &w->cap_kv, sizeof *w->kv) < 0)
        goto fail;
    char *k = pi_strndup(w->alloc, key, klen);
    if (!k)
        goto fail;
    w->kv[w->n_kv++] = (struct wkv){k, type, elem_type, n, payload, payload_size};
    return PI_OK;
fail:
    pi_free(w->alloc, payload);
    return status;
}

/* Values are stored little-endian; this writer assumes a little-endian host for
 * numeric payloads (checked at build time in meson.build). */
int gguf_writer_add_scalar(struct gguf_writer *w, const char *key, uint32_t type,
                           const void *value) {
    uint32_t vs = gguf_value_size(type);
    if (!w || !vs || !value)
        return PI_ERR_INVALID_ARG;
    if (type == PI_META_BOOL && *(const uint8_t *)value > 1)
        return PI_ERR_INVALID_ARG;
    uint8_t *p = pi_malloc(w->alloc, vs);
    if (!p)
        return PI_ERR_NOMEM;
    memcpy(p, value, vs);
    return add_kv(w, key, type, 0, 1, p, vs);
}

int gguf_writer_add_string(struct gguf_writer *w, const char *key, const char *s) {
    if (!w || !s)
        return PI_ERR_INVALID_ARG;
    size_t len = strlen(s);
    uint8_t *p = pi_malloc(w->alloc, 8 + len);
    if (!p)
        return PI_ERR_NOMEM;
    put_u64(p, len);
    memcpy(p + 8, s, len);
    return add_kv(w, key, PI_META_STRING, 0, 1, p, 8 + len);
}

int gguf_writer_add_array(struct gguf_writer *w, const char *key, uint32_t elem_type,
                          const void *values, uint64_t n) {
    uint32_t vs = gguf_value_size(elem_type);
    if (!w || !vs || (n && !values) || n > SIZE_MAX / vs)
        return PI_ERR_INVALID_ARG;
    if (elem_type == PI_META_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)values)[i] > 1)
                return PI_ERR_INVALID_ARG;
    uint8_t *p = pi_malloc(w->alloc, (size_t)(n * vs));
    if (!p)
        return PI_ERR_NOMEM;
    if (n)
        memcpy(p, values, (size_t)(n * vs));
    return add_kv(w, key, PI_META_ARRAY, elem_type, n, p, n * vs);
}

int gguf_writer_add_string_array(struct gguf_writer *w, const char *key,
                                 const char *const *strings, uint64_t n) {
    if (!w || (n && !strings))
        return PI_ERR_INVALID_ARG;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!strings[i])
            return PI_ERR_INVALID_ARG;
        total += 8 + strlen(strings[i]);
    }
    uint8_t *p = pi_malloc(w->alloc, (size_t)total);
    if (!p)
        return PI_ERR_NOMEM;
    uint64_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = strlen(strings[i]);
        put_u64(p + at, len);
        memcpy(p + at + 8, strings[i], len);
        at += 8 + len;
    }
    return add_kv(w, key, PI_META_ARRAY, PI_META_STRING, n, p, total);
}

int gguf_writer_add_raw(struct gguf_writer *w, const char *key, uint32_t type,
                        uint32_t elem_type, uint64_t n, const void *payload, uint64_t size) {
    if (!w || (size && !payload) || size > SIZE_MAX || type > PI_META_F64 ||
        (type != PI_META_ARRAY && (elem_type != 0 || n != 1)))
        return PI_ERR_INVALID_ARG;
    uint8_t *p = NULL;
    if (size) {
        p = pi_malloc(w->alloc, (size_t)size);
        if (!p)
            return PI_ERR_NOMEM;
        memcpy(p, payload, (size_t)size);
    }
    return add_kv(w, key, type, elem_type, n, p, size);
}

static int add_tensor(struct gguf_writer *w, const char *name, uint32_t type,
                      uint32_t n_dims, const int64_t *ne, const void *data, int declared) {
    if (!w || !name || !ne || n_dims < 1 || n_dims > GGUF_MAX_DIMS || w->header_done)
        return PI_ERR_INVALID_ARG;
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen >= GGUF_MAX_NAME)
        return PI_ERR_INVALID_ARG;
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return PI_ERR_INVALID_ARG;
    uint64_t row = pi_type_row_bytes(type, ne[0]);
    if (!row && ne[0] != 0)
        return PI_ERR_INVALID_ARG;
    uint64_t nbytes = row;
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] < 0 || (ne[d] && nbytes > UINT64_MAX / (uint64_t)ne[d]))
            return PI_ERR_INVALID_ARG;
        nbytes *= (uint64_t)ne[d];
    }
    if (nbytes > SIZE_MAX || (nbytes && !data && !declared))
        return PI_ERR_INVALID_ARG;
    if (grow(w->alloc, (void **)&w->t, w->n_t, &w->cap_t, sizeof *w->t) < 0)
        return PI_ERR_NOMEM;
    uint8_t *copy = NULL;
    if (nbytes && !declared) {
        copy = pi_malloc(w->alloc, (size_t)nbytes);
        if (!copy)
            return PI_ERR_NOMEM;
        memcpy(copy, data, (size_t)nbytes);
    }
    struct wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, nlen + 1);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = nbytes;
    t->data = copy;
    t->declared = declared;
    return PI_OK;
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type,
                           uint32_t n_dims, const int64_t *ne, const void *data) {
    return add_tensor(w, name, type, n_dims, ne, data, 0);
}

int gguf_writer_add_tensor_info(struct gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const int64_t *ne) {
    return add_tensor(w, name, type, n_dims, ne, NULL, 1);
}

static int put(FILE *fp, const void *p, uint64_t n) {
    return n == 0 || fwrite(p, 1, (size_t)n, fp) == (size_t)n ? PI_OK : PI_ERR_IO;
}

static int put_zeros(FILE *fp, uint64_t n) {
    static const uint8_t zeros[64];
    while (n) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        PI_TRY(put(fp, zeros, k));
        n -= k;
    }
    return PI_OK;
}

static int put_str(FILE *fp, const char *s) {
    uint8_t len[8];
    size_t n = strlen(s);
    put_u64(len, n);
    PI_TRY(put(fp, len, 8));
    return put(fp, s, n);
}

static uint64_t align_up(uint64_t v, uint32_t a) {
    return v + (a - v % a) % a;
}

/* Header, KV pairs, tensor infos and the padding up to the data section. */
static int write_head(struct gguf_writer *w, FILE *fp, uint32_t magic) {
    uint8_t b[8];
    int with_align = w->alignment != GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < w->n_kv && with_align; i++)
        if (strcmp(w->kv[i].key, "general.alignment") == 0)
            with_align = 0; /* the caller wrote it; add_kv forbids duplicates */
    uint64_t pos = 0;
    put_u32(b, magic);
    PI_TRY(put(fp, b, 4));
    put_u32(b, 3);
    PI_TRY(put(fp, b, 4));
    put_u64(b, w->n_t);
    PI_TRY(put(fp, b, 8));
    put_u64(b, w->n_kv + (uint64_t)with_align);
    PI_TRY(put(fp, b, 8));
    pos += 24;
    if (with_align) {
        PI_TRY(put_str(fp, "general.alignment"));
        put_u32(b, PI_META_U32);
        PI_TRY(put(fp, b, 4));
        put_u32(b, w->alignment);
        PI_TRY(put(fp, b, 4));
        pos += 8 + strlen("general.alignment") + 8;
    }
    for (uint64_t i = 0; i < w->n_kv; i++) {
        const struct wkv *kv = &w->kv[i];
        PI_TRY(put_str(fp, kv->key));
        put_u32(b, kv->type);
        PI_TRY(put(fp, b, 4));
        pos += 8 + strlen(kv->key) + 4;
        if (kv->type == PI_META_ARRAY) {
            put_u32(b, kv->elem_type);
            PI_TRY(put(fp, b, 4));
            put_u64(b, kv->n);
            PI_TRY(put(fp, b, 8));
            pos += 12;
        }
        PI_TRY(put(fp, kv->payload, kv->payload_size));
        pos += kv->payload_size;
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        PI_TRY(put_str(fp, t->name));
        put_u32(b, t->n_dims);
        PI_TRY(put(fp, b, 4));
        for (uint32_t d = 0; d < t->n_dims; d++) {
            put_u64(b, (uint64_t)t->ne[d]);
            PI_TRY(put(fp, b, 8));
        }
        put_u32(b, t->type);
        PI_TRY(put(fp, b, 4));
        put_u64(b, off);
        PI_TRY(put(fp, b, 8));
        pos += 8 + strlen(t->name) + 4 + 8ull * t->n_dims + 4 + 8;
        off = align_up(off + t->nbytes, w->alignment);
    }
    return put_zeros(fp, align_up(pos, w->alignment) - pos);
}

static int write_all(struct gguf_writer *w, FILE *fp, uint32_t magic) {
    PI_TRY(write_head(w, fp, magic));
    for (uint64_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        PI_TRY(put(fp, t->data, t->nbytes));
        PI_TRY(put_zeros(fp, align_up(t->nbytes, w->alignment) - t->nbytes));
    }
    return PI_OK;
}

/* Write the whole file to fp, which is closed in any case; on failure `path` (the
 * file fp writes) is removed. */
static int write_and_close(struct gguf_writer *w, FILE *fp, const char *path, uint32_t magic,
                           struct pi_error *err) {
    int status = PI_OK;
    if (magic != GGUF_MAGIC_GGUF && magic != GGUF_MAGIC_PWRI)
        status = pi_error_set(err, PI_ERR_INVALID_ARG, "gguf writer: invalid magic");
    for (uint64_t i = 0; status == PI_OK && i < w->n_t; i++)
        if (w->t[i].declared)
            status = pi_error_set(err, PI_ERR_INVALID_ARG, "gguf writer: tensor '%s' has no "
                                  "data; write declared tensors with gguf_writer_write_data",
                                  w->t[i].name);
    if (status == PI_OK) {
        status = write_all(w, fp, magic);
        if (status < 0)
            pi_error_set(err, status, "cannot write '%s'", path);
    }
    if (fclose(fp) != 0 && status == PI_OK)
        status = pi_error_set(err, PI_ERR_IO, "cannot write '%s'", path);
    if (status < 0)
        pi_os_remove(path);
    return status;
}

int gguf_writer_write_file(struct gguf_writer *w, const char *path, uint32_t magic,
                           struct pi_error *err) {
    if (!w || !path || (magic != GGUF_MAGIC_GGUF && magic != GGUF_MAGIC_PWRI))
        PI_FAIL(err, PI_ERR_INVALID_ARG, "gguf writer: invalid argument");
    FILE *fp = pi_os_fopen(path, "wb");
    if (!fp)
        PI_FAIL(err, PI_ERR_IO, "cannot create '%s'", path);
    return write_and_close(w, fp, path, magic, err);
}

int gguf_writer_replace_file(struct gguf_writer *w, const char *path, uint32_t magic,
                             struct pi_error *err) {
    if (!w || !path)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "gguf writer: invalid argument");
    const size_t cap = strlen(path) + 16;
    char *tmp = pi_malloc(w->alloc, cap);
    if (!tmp)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory");
    FILE *fp;
    int st = pi_os_create_temp(path, tmp, cap, &fp, err);
    if (st == PI_OK)
        st = write_and_close(w, fp, tmp, magic, err);
    if (st == PI_OK) {
        st = pi_os_replace(tmp, path, err);
        if (st < 0)
            pi_os_remove(tmp);
    }
    pi_free(w->alloc, tmp);
    return st;
}

/* ---- Streaming ------------------------------------------------------------------ */

/* Skip tensors that are complete (including empty ones), padding each. */
static int advance(struct gguf_writer *w, FILE *fp) {
    while (w->cur < w->n_t && w->cur_bytes == w->t[w->cur].nbytes) {
        uint64_t nb = w->t[w->cur].nbytes;
        PI_TRY(put_zeros(fp, align_up(nb, w->alignment) - nb));
        w->cur++;
        w->cur_bytes = 0;
    }
    return PI_OK;
}

int gguf_writer_write_header(struct gguf_writer *w, FILE *fp, uint32_t magic) {
    if (!w || !fp || w->header_done || (magic != GGUF_MAGIC_GGUF && magic != GGUF_MAGIC_PWRI))
        return PI_ERR_INVALID_ARG;
    w->header_done = 1;
    w->cur = 0;
    w->cur_bytes = 0;
    PI_TRY(write_head(w, fp, magic));
    return advance(w, fp);
}

int gguf_writer_write_data(struct gguf_writer *w, FILE *fp, const void *data, uint64_t n) {
    if (!w || !fp || !w->header_done || (n && !data))
        return PI_ERR_INVALID_ARG;
    const uint8_t *p = data;
    while (n) {
        if (w->cur >= w->n_t)
            return PI_ERR_INVALID_ARG; /* more bytes than declared */
        uint64_t room = w->t[w->cur].nbytes - w->cur_bytes;
        uint64_t k = n < room ? n : room;
        PI_TRY(put(fp, p, k));
        w->cur_bytes += k;
        p += k;
        n -= k;
        PI_TRY(advance(w, fp));
    }
    return PI_OK;
}

int gguf_writer_finish(struct gguf_writer *w, FILE *fp) {
    if (!w || !fp || !w->header_done)
        return PI_ERR_INVALID_ARG;
    return w->cur == w->n_t ? PI_OK : PI_ERR_INVALID_ARG;
}
