/* gpuidx.c -- see gpuidx.h.
 *
 * Reading: the file is copied into memory, the old I32 type id (18) is renumbered to
 * today's (26) in the tensor infos, and gguf_parse validates the container; the index's
 * own rules are checked after it. Writing: a direct writer, because gguf_writer sizes
 * tensors by today's type ids and cannot emit type 18. */
#include "plan/gpuidx.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "model/gguf.h"
#include "util/os.h"

#define KEY_ARCH     "general.architecture"
#define KEY_BLOCKS   PI_GPUIDX_ARCH ".block_count"
#define KEY_CAPACITY "split.vram_capacity"
#define KEY_MODEL_ID "powerinfer.plan.model_id"
#define KEY_STATS_ID "powerinfer.plan.stats_id"
#define KEY_BUDGET   "powerinfer.plan.budget"

/* Bytes a file may have beyond its tensor data before the reader refuses to copy it:
 * PowerInfer's header is a few hundred bytes plus ~50 per tensor info. */
#define HEADER_SLACK     (1u << 20)
#define PER_TENSOR_SLACK 4096u /* tensor info, padding up to an alignment of 4096 */

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_u64(const uint8_t *p) {
    return (uint64_t)load_u32(p) | (uint64_t)load_u32(p + 4) << 32;
}

static int shape_ok(int64_t n_layer, int64_t n_ff) {
    return n_layer >= 1 && n_layer <= PI_GPUIDX_MAX_LAYER && n_ff >= 1 && n_ff <= PI_GPUIDX_MAX_FF;
}

void pi_gpuidx_free(struct pi_gpuidx *g) {
    if (!g)
        return;
    if (g->neuron)
        pi_free(&g->alloc, g->neuron);
    memset(g, 0, sizeof *g);
}

/* ---- Reading ------------------------------------------------------------------- */

/* A bounds-checked walk over the header that only locates the tensor type fields. It
 * follows the grammar gguf_parse checks, but validates nothing: where it gives up,
 * gguf_parse rejects the file and says why. */
struct walk {
    uint8_t *p;
    uint64_t size, pos;
};

static int walk_skip(struct walk *w, uint64_t n) {
    if (n > w->size - w->pos)
        return 0;
    w->pos += n;
    return 1;
}

static int walk_u32(struct walk *w, uint32_t *v) {
    if (w->size - w->pos < 4)
        return 0;
    *v = load_u32(w->p + w->pos);
    w->pos += 4;
    return 1;
}

static int walk_u64(struct walk *w, uint64_t *v) {
    if (w->size - w->pos < 8)
        return 0;
    *v = load_u64(w->p + w->pos);
    w->pos += 8;
    return 1;
}

static int walk_str(struct walk *w) {
    uint64_t len;
    return walk_u64(w, &len) && walk_skip(w, len);
}

/* n values of `type`; every loop iteration consumes at least 8 bytes or stops, so a
 * hostile count costs no more than the file's size. */
static int walk_values(struct walk *w, uint32_t type, uint64_t n, unsigned depth) {
    uint32_t vs = gguf_value_size(type);
    if (vs)
        return n <= (w->size - w->pos) / vs && walk_skip(w, n * vs);
    if (type == PI_META_STRING) {
        for (uint64_t i = 0; i < n; i++)
            if (!walk_str(w))
                return 0;
        return 1;
    }
    if (type != PI_META_ARRAY || depth >= GGUF_MAX_NESTING)
        return 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t et;
        uint64_t en;
        if (!walk_u32(w, &et) || !walk_u64(w, &en) || !walk_values(w, et, en, depth + 1))
            return 0;
    }
    return 1;
}

static void renumber_old_i32(uint8_t *p, uint64_t size) {
    if (size < 8)
        return;
    struct walk w = {p, size, 8}; /* after magic and version */
    uint64_t n_tensors, n_kv;
    if (!walk_u64(&w, &n_tensors) || !walk_u64(&w, &n_kv))
        return;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint32_t type;
        if (!walk_str(&w) || !walk_u32(&w, &type) || !walk_values(&w, type, 1, 0))
            return;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        uint32_t n_dims, type;
        if (!walk_str(&w) || !walk_u32(&w, &n_dims) || n_dims > GGUF_MAX_DIMS ||
            !walk_skip(&w, 8ull * n_dims) || !walk_u32(&w, &type))
            return;
        if (type == PI_GPUIDX_TYPE_I32_OLD) {
            uint8_t *t = p + w.pos - 4;
            t[0] = (uint8_t)PI_TYPE_I32;
            t[1] = t[2] = t[3] = 0;
        }
        if (!walk_skip(&w, 8))
            return;
    }
}

/* A key that must be a u64 when present. Returns 1 if present, 0 if absent, <0 error. */
static int get_u64(const struct gguf_file *f, const char *key, uint64_t *v, struct pi_error *err) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return 0;
    if (kv->type != PI_META_U64)
        PI_FAIL(err, PI_ERR_FORMAT, "key %s must be a u64 (it has value type %u)", key, kv->type);
    *v = load_u64(f->base + kv->off);
    return 1;
}

static int check_keys(const struct gguf_file *f, int64_t n_layer, struct pi_gpuidx *out,
                      struct pi_error *err) {
    const struct gguf_kv *kv = gguf_find_kv(f, KEY_ARCH);
    if (kv) {
        const char *s;
        uint64_t len;
        if (gguf_kv_str(f, kv, 0, &s, &len) < 0)
            PI_FAIL(err, PI_ERR_FORMAT, "key " KEY_ARCH " must be a string");
        if (len != strlen(PI_GPUIDX_ARCH) || memcmp(s, PI_GPUIDX_ARCH, (size_t)len) != 0)
            PI_FAIL(err, PI_ERR_FORMAT, KEY_ARCH " is '%.*s', not '" PI_GPUIDX_ARCH "'",
                    (int)(len > 64 ? 64 : len), s);
    }
    kv = gguf_find_kv(f, KEY_BLOCKS);
    if (kv) {
        int64_t v;
        if (kv->type == PI_META_BOOL || kv->type == PI_META_ARRAY || gguf_kv_int(f, kv, 0, &v) < 0)
            PI_FAIL(err, PI_ERR_FORMAT, "key " KEY_BLOCKS " must be an integer");
        if (v != n_layer)
            PI_FAIL(err, PI_ERR_FORMAT, KEY_BLOCKS " is %lld, the model has %lld layers",
                    (long long)v, (long long)n_layer);
    }
    int st = get_u64(f, KEY_CAPACITY, &out->capacity, err);
    if (st < 0)
        return st;
    if (st == 0)
        PI_FAIL(err, PI_ERR_FORMAT, "key " KEY_CAPACITY " is missing");
    int present = 0;
    static const char *const keys[3] = {KEY_MODEL_ID, KEY_STATS_ID, KEY_BUDGET};
    uint64_t *dst[3] = {&out->model_id, &out->stats_id, &out->budget};
    for (int i = 0; i < 3; i++) {
        st = get_u64(f, keys[i], dst[i], err);
        if (st < 0)
            return st;
        present += st;
    }
    if (present != 0 && present != 3)
        PI_FAIL(err, PI_ERR_FORMAT,
                "the powerinfer.plan.* keys come together: %d of " KEY_MODEL_ID ", " KEY_STATS_ID
                ", " KEY_BUDGET " present",
                present);
    out->has_key = present == 3;
    return PI_OK;
}

/* Tensor `i` must be called blk.<layer>.<what>, I32 and 1-D (trailing dims of 1 allowed). */
static int check_tensor(const struct gguf_file *f, uint64_t i, int64_t layer, const char *what,
                        struct pi_error *err) {
    const struct gguf_tensor *t = &f->tensors[i];
    char name[GGUF_MAX_NAME];
    snprintf(name, sizeof name, "blk.%lld.%s", (long long)layer, what);
    if (strcmp(t->name, name) != 0)
        PI_FAIL(err, PI_ERR_FORMAT,
                "tensor %llu is '%s', expected '%s' (2 tensors per layer "
                "in order)",
                (unsigned long long)i, t->name, name);
    if (t->type != PI_TYPE_I32)
        PI_FAIL(err, PI_ERR_FORMAT,
                "tensor '%s' has type %u, expected I32 (%u, or %u in "
                "PowerInfer's numbering)",
                name, t->type, (unsigned)PI_TYPE_I32, PI_GPUIDX_TYPE_I32_OLD);
    for (uint32_t d = 1; d < GGUF_MAX_DIMS; d++)
        if (t->ne[d] != 1)
            PI_FAIL(err, PI_ERR_FORMAT, "tensor '%s' is not 1-D (dimension %u is %lld)", name, d,
                    (long long)t->ne[d]);
    return PI_OK;
}

static int check_layer(const struct gguf_file *f, int64_t l, int64_t n_ff, uint8_t *neuron,
                       struct pi_error *err) {
    PI_TRY(check_tensor(f, 2 * (uint64_t)l, l, "gpu_idx", err));
    PI_TRY(check_tensor(f, 2 * (uint64_t)l + 1, l, "gpu_bucket", err));
    const struct gguf_tensor *idx = &f->tensors[2 * l], *bucket = &f->tensors[2 * l + 1];
    if (idx->ne[0] != n_ff)
        PI_FAIL(err, PI_ERR_FORMAT, "tensor '%s' has %lld neurons, the model has %lld", idx->name,
                (long long)idx->ne[0], (long long)n_ff);
    int64_t k = 0;
    for (int64_t r = 0; r < n_ff; r++) {
        uint32_t v = load_u32(idx->data + 4 * r);
        if (v > 1)
            PI_FAIL(err, PI_ERR_FORMAT, "tensor '%s': neuron %lld has value %d, not 0 or 1",
                    idx->name, (long long)r, (int)(int32_t)v);
        neuron[r] = (uint8_t)v;
        k += v;
    }
    if (bucket->ne[0] != k)
        PI_FAIL(err, PI_ERR_FORMAT, "tensor '%s' holds %lld ids, '%s' marks %lld neurons",
                bucket->name, (long long)bucket->ne[0], idx->name, (long long)k);
    /* Strictly ascending, in range and each marked: with the counts equal, the bucket is
     * exactly the set of marked ids. */
    int64_t prev = -1;
    for (int64_t i = 0; i < k; i++) {
        int64_t id = (int32_t)load_u32(bucket->data + 4 * i);
        if (id < 0 || id >= n_ff)
            PI_FAIL(err, PI_ERR_FORMAT,
                    "tensor '%s': entry %lld is neuron %lld, out of range "
                    "[0, %lld)",
                    bucket->name, (long long)i, (long long)id, (long long)n_ff);
        if (id == prev)
            PI_FAIL(err, PI_ERR_FORMAT, "tensor '%s': neuron %lld is listed twice", bucket->name,
                    (long long)id);
        if (id < prev)
            PI_FAIL(err, PI_ERR_FORMAT,
                    "tensor '%s' is not sorted: entry %lld is %lld after "
                    "%lld",
                    bucket->name, (long long)i, (long long)id, (long long)prev);
        if (!neuron[id])
            PI_FAIL(err, PI_ERR_FORMAT, "tensor '%s' lists neuron %lld, which '%s' marks 0",
                    bucket->name, (long long)id, idx->name);
        prev = id;
    }
    return PI_OK;
}

static int decode(const struct gguf_file *f, int64_t n_layer, int64_t n_ff, struct pi_gpuidx *out,
                  struct pi_error *err) {
    PI_TRY(check_keys(f, n_layer, out, err));
    if (f->n_tensors != 2 * (uint64_t)n_layer)
        PI_FAIL(err, PI_ERR_FORMAT, "%llu tensors, expected 2 per layer = %lld",
                (unsigned long long)f->n_tensors, (long long)(2 * n_layer));
    out->neuron = pi_calloc(&out->alloc, (size_t)n_layer, (size_t)n_ff);
    if (!out->neuron)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory for %lld x %lld neurons", (long long)n_layer,
                (long long)n_ff);
    for (int64_t l = 0; l < n_layer; l++)
        PI_TRY(check_layer(f, l, n_ff, out->neuron + l * n_ff, err));
    out->n_layer = n_layer;
    out->n_ff = n_ff;
    return PI_OK;
}

/* The whole file in memory (it is edited before parsing), refusing sizes that no index
 * of this shape can have. */
static int load_copy(const char *path, int64_t n_layer, int64_t n_ff, const struct pi_allocator *a,
                     uint8_t **buf, uint64_t *size, struct pi_error *err) {
    struct pi_file_map map;
    PI_TRY(pi_os_map_file(path, &map, err));
    uint64_t max = HEADER_SLACK + 2 * (uint64_t)n_layer * (4 * (uint64_t)n_ff + PER_TENSOR_SLACK);
    int status = PI_OK;
    if (map.size == 0)
        status = pi_error_set(err, PI_ERR_FORMAT, "empty file");
    else if (map.size > max)
        status = pi_error_set(err, PI_ERR_FORMAT,
                              "%llu bytes is more than an index of %lld "
                              "layers x %lld neurons can take (%llu)",
                              (unsigned long long)map.size, (long long)n_layer, (long long)n_ff,
                              (unsigned long long)max);
    else if (map.size > SIZE_MAX || !(*buf = pi_malloc(a, (size_t)map.size)))
        status = pi_error_set(err, PI_ERR_NOMEM, "out of memory for a %llu-byte file",
                              (unsigned long long)map.size);
    if (status == PI_OK) {
        memcpy(*buf, map.data, (size_t)map.size);
        *size = map.size;
    }
    pi_os_unmap_file(&map);
    return status;
}

int pi_gpuidx_read(const char *path, int64_t n_layer, int64_t n_ff, const struct pi_allocator *a,
                   struct pi_gpuidx *out, struct pi_error *err) {
    if (out)
        memset(out, 0, sizeof *out);
    if (!path || !out)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "gpu index: NULL path or output");
    if (!shape_ok(n_layer, n_ff))
        PI_FAIL(err, PI_ERR_INVALID_ARG,
                "gpu index: shape %lld layers x %lld neurons is out "
                "of range",
                (long long)n_layer, (long long)n_ff);
    if ((uint64_t)n_layer > SIZE_MAX / (uint64_t)n_ff)
        PI_FAIL(err, PI_ERR_NOMEM, "gpu index: %lld x %lld neurons cannot be addressed",
                (long long)n_layer, (long long)n_ff);
    out->alloc = a ? *a : pi_default_allocator;
    uint8_t *buf = NULL;
    uint64_t size = 0;
    int status = load_copy(path, n_layer, n_ff, &out->alloc, &buf, &size, err);
    if (status == PI_OK) {
        renumber_old_i32(buf, size);
        struct gguf_file f;
        status = gguf_parse(&f, buf, size, &out->alloc, err);
        if (status == PI_OK)
            status = decode(&f, n_layer, n_ff, out, err);
        gguf_close(&f);
        pi_free(&out->alloc, buf);
    }
    if (status < 0) {
        if (status != PI_ERR_IO && status != PI_ERR_NOMEM)
            pi_error_prefix(err, "gpu index '%s'", path);
        pi_gpuidx_free(out);
    }
    return status;
}

/* ---- Writing ------------------------------------------------------------------- */

/* Output with a sticky error: a failed write is seen once, at the end. */
struct out {
    FILE *fp;
    uint64_t pos;
    int failed;
};

static void put(struct out *o, const void *p, size_t n) {
    if (!o->failed && n && fwrite(p, 1, n, o->fp) != n)
        o->failed = 1;
    o->pos += n;
}

static void put_u32(struct out *o, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(o, b, 4);
}

static void put_u64(struct out *o, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(o, b, 8);
}

static void put_str(struct out *o, const char *s) {
    size_t n = strlen(s);
    put_u64(o, n);
    put(o, s, n);
}

static void put_pad(struct out *o) {
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
    put(o, zeros,
        (size_t)((GGUF_DEFAULT_ALIGNMENT - o->pos % GGUF_DEFAULT_ALIGNMENT) %
                 GGUF_DEFAULT_ALIGNMENT));
}

static uint64_t align_up(uint64_t v) {
    return (v + GGUF_DEFAULT_ALIGNMENT - 1) / GGUF_DEFAULT_ALIGNMENT * GGUF_DEFAULT_ALIGNMENT;
}

static void put_key_u64(struct out *o, const char *key, uint64_t v) {
    put_str(o, key);
    put_u32(o, PI_META_U64);
    put_u64(o, v);
}

static void put_tensor_info(struct out *o, int64_t layer, const char *what, int64_t n,
                            uint64_t offset) {
    char name[GGUF_MAX_NAME];
    snprintf(name, sizeof name, "blk.%lld.%s", (long long)layer, what);
    put_str(o, name);
    put_u32(o, 1);
    put_u64(o, (uint64_t)n);
    put_u32(o, PI_GPUIDX_TYPE_I32_OLD);
    put_u64(o, offset);
}

/* The layout of export_split.py through GGUFWriter: header, KV pairs in insertion order,
 * tensor infos, padding to 32, each tensor's data padded to 32. `ids` is scratch for
 * n_ff i32 values. */
static void write_index(struct out *o, const struct pi_gpuidx *g, int64_t *k, uint8_t *ids) {
    const int64_t L = g->n_layer, F = g->n_ff;
    put_u32(o, GGUF_MAGIC_PWRI);
    put_u32(o, 3);
    put_u64(o, 2 * (uint64_t)L);
    put_u64(o, 6);
    put_str(o, KEY_ARCH);
    put_u32(o, PI_META_STRING);
    put_str(o, PI_GPUIDX_ARCH);
    put_str(o, KEY_BLOCKS);
    put_u32(o, PI_META_U32);
    put_u32(o, (uint32_t)L);
    put_key_u64(o, KEY_CAPACITY, g->capacity);
    put_key_u64(o, KEY_MODEL_ID, g->model_id);
    put_key_u64(o, KEY_STATS_ID, g->stats_id);
    put_key_u64(o, KEY_BUDGET, g->budget);
    uint64_t off = 0;
    for (int64_t l = 0; l < L; l++) {
        put_tensor_info(o, l, "gpu_idx", F, off);
        off += align_up(4 * (uint64_t)F);
        put_tensor_info(o, l, "gpu_bucket", k[l], off);
        off += align_up(4 * (uint64_t)k[l]);
    }
    put_pad(o);
    for (int64_t l = 0; l < L && !o->failed; l++) {
        const uint8_t *row = g->neuron + l * F;
        for (int64_t r = 0; r < F; r++) {
            ids[4 * r] = row[r];
            ids[4 * r + 1] = ids[4 * r + 2] = ids[4 * r + 3] = 0;
        }
        put(o, ids, (size_t)(4 * F));
        put_pad(o);
        int64_t n = 0;
        for (int64_t r = 0; r < F; r++)
            if (row[r]) {
                for (int i = 0; i < 4; i++)
                    ids[4 * n + i] = (uint8_t)((uint64_t)r >> (8 * i));
                n++;
            }
        put(o, ids, (size_t)(4 * n));
        put_pad(o);
    }
}

int pi_gpuidx_write(const char *path, const struct pi_gpuidx *g, struct pi_error *err) {
    if (!path || !g || !g->neuron)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "gpu index: NULL path or index");
    if (!shape_ok(g->n_layer, g->n_ff) || (uint64_t)g->n_layer > SIZE_MAX / (uint64_t)g->n_ff ||
        (uint64_t)g->n_ff > SIZE_MAX / 4)
        PI_FAIL(err, PI_ERR_INVALID_ARG,
                "gpu index: shape %lld layers x %lld neurons is out "
                "of range",
                (long long)g->n_layer, (long long)g->n_ff);
    const int64_t L = g->n_layer, F = g->n_ff;
    for (int64_t i = 0; i < L * F; i++)
        if (g->neuron[i] > 1)
            PI_FAIL(err, PI_ERR_INVALID_ARG,
                    "gpu index: layer %lld neuron %lld has value %u, "
                    "not 0 or 1",
                    (long long)(i / F), (long long)(i % F), g->neuron[i]);
    const struct pi_allocator *a = g->alloc.alloc ? &g->alloc : &pi_default_allocator;
    size_t cap = strlen(path) + 16;
    char *tmp = pi_malloc(a, cap);
    int64_t *k = pi_calloc(a, (size_t)L, sizeof *k);
    uint8_t *ids = pi_malloc(a, (size_t)(4 * F));
    int status = PI_OK;
    if (!tmp || !k || !ids) {
        status = pi_error_set(err, PI_ERR_NOMEM, "gpu index: out of memory writing '%s'", path);
        goto done;
    }
    for (int64_t i = 0; i < L * F; i++)
        k[i / F] += g->neuron[i];
    FILE *fp;
    status = pi_os_create_temp(path, tmp, cap, &fp, err);
    if (status < 0)
        goto done;
    struct out o = {fp, 0, 0};
    write_index(&o, g, k, ids);
    int e = o.failed ? errno : 0;
    if (fclose(fp) != 0 && !o.failed) {
        o.failed = 1;
        e = errno;
    }
    if (o.failed) {
        pi_os_remove(tmp);
        status = pi_error_set(err, PI_ERR_IO, "cannot write '%s': %s", path,
                              e ? strerror(e) : "write failed");
    } else if ((status = pi_os_replace(tmp, path, err)) < 0) {
        pi_os_remove(tmp);
    }
done:
    pi_free(a, tmp);
    pi_free(a, k);
    pi_free(a, ids);
    return status;
}
