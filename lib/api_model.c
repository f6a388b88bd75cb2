/* api_model.c -- public model functions: argument checks, then delegation to
 * model/ (GGUF reader, description builder). Query functions never write to the
 * model, so a model can be shared by threads. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "runtime/types.h"
#include "util/params.h"

/* The size of the first published pi_model_params (0.1): every field up to
 * errbuf_cap. Callers compiled against later headers pass larger sizes; the fields
 * after it (load_mode, lock_memory) keep their defaults for smaller ones. */
#define MODEL_PARAMS_MIN_SIZE (offsetof(pi_model_params, errbuf_cap) + sizeof(size_t))

int pi_model_default_params(pi_model_params *params) {
    if (!params)
        return PI_ERR_INVALID_ARG;
    memset(params, 0, sizeof *params);
    params->struct_size = (uint32_t)sizeof *params;
    params->log_level = PI_LOG_INFO;
    return PI_OK;
}

static void write_errbuf(const pi_model_params *p, const char *msg) {
    if (p && p->errbuf && p->errbuf_cap > 0)
        snprintf(p->errbuf, p->errbuf_cap, "%s", msg);
}

static int take_params(const pi_model_params *in, pi_model_params *out,
                       struct pi_error *err) {
    pi_model_default_params(out);
    PI_TRY(pi_params_take(in, out, sizeof *out, MODEL_PARAMS_MIN_SIZE, "pi_model_params",
                          err));
    if (out->load_mode != PI_LOAD_MMAP && out->load_mode != PI_LOAD_READ)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "pi_model_params.load_mode %d is not a PI_LOAD_* "
                "value", (int)out->load_mode);
    return PI_OK;
}

static int progress(const pi_model_params *p, float frac, struct pi_error *err) {
    if (p->progress_fn && p->progress_fn(p->progress_user, frac))
        PI_FAIL(err, PI_ERR_ABORTED, "model loading aborted by the caller");
    return PI_OK;
}

static void tally(struct pi_model *m) {
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++) {
        const struct gguf_tensor *t = &m->gguf.tensors[i];
        m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        m->size_bytes += t->nbytes;
    }
}

/* Reading PI_LOAD_READ files is the first 45% of the progress, shared evenly by the
 * files of a split model. */
struct reading {
    const pi_model_params *p;
    uint32_t k, n; /* file k (0-based) of n */
};

static float read_frac(const struct reading *r, double part) {
    return 0.45f * (float)((r->k + part) / r->n);
}

static int read_tick(void *user, uint64_t done, uint64_t total) {
    const struct reading *r = user;
    const pi_model_params *p = r->p;
    return p->progress_fn &&
           p->progress_fn(p->progress_user, read_frac(r, (double)done / (double)total));
}

/* The bytes of file `path` into `map`, mapped or read, and locked when asked. */
static int get_bytes(struct pi_model *m, const char *path, const pi_model_params *p,
                     struct reading *r, struct pi_file_map *map, struct pi_error *err) {
    const int read = p->load_mode == PI_LOAD_READ;
    if (read)
        PI_TRY(pi_os_read_file(path, &m->alloc, read_tick, r, map, err));
    else
        PI_TRY(pi_os_map_file(path, map, err));
    pi_log(&m->log, PI_LOG_DEBUG, "%s: %llu bytes %s", path, (unsigned long long)map->size,
           read ? "read into memory" : "mapped");
    if (p->lock_memory) {
        struct pi_error lerr;
        pi_error_clear(&lerr);
        if (pi_os_lock_file(map, &lerr) < 0)
            pi_log(&m->log, PI_LOG_WARN, "%s: %s; the model stays unlocked", path, lerr.msg);
        else
            pi_log(&m->log, PI_LOG_DEBUG, "%s: locked in memory", path);
    }
    return PI_OK;
}

/* Part k (0-based, k >= 1) of the split model whose first part is `first`: its file
 * read or mapped, parsed and checked against the first. Messages name the part. */
static int open_part(struct pi_model *m, const char *first, size_t prefix_len,
                     const struct gguf_split *fs, uint32_t k, const pi_model_params *p,
                     struct pi_error *err) {
    struct pi_model_part *part = &m->parts[k - 1];
    char *path = gguf_split_path(&m->alloc, first, prefix_len, k + 1, fs->count);
    if (!path)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory");
    struct reading r = {p, k, fs->count};
    int st = get_bytes(m, path, p, &r, &part->map, err);
    if (st == PI_OK)
        st = gguf_parse(&part->gguf, part->map.data, part->map.size, &m->alloc, err);
    struct gguf_split ps;
    if (st == PI_OK)
        st = gguf_split_info(&part->gguf, &ps, err);
    if (st == PI_OK)
        st = gguf_split_check_part(&m->gguf, fs, &part->gguf, &ps, k, err);
    if (st < 0 && st != PI_ERR_ABORTED && st != PI_ERR_NOMEM) {
        if (st == PI_ERR_IO) /* the OS layer's message names the part; open_common
                              * adds no path to PI_ERR_IO messages */
            pi_error_prefix(err, "%s: split model part %u of %u", first, k + 1, fs->count);
        else
            pi_error_prefix(err, "split model part %u of %u '%s'", k + 1, fs->count, path);
    }
    part->header_size = part->gguf.data_off;
    pi_free(&m->alloc, path);
    PI_TRY(st);
    return progress(p, read_frac(&r, 1.0), err);
}

/* After the first file is parsed: a split model's other parts, their tensors merged
 * into m->gguf. A file without split keys (or split.count 1) is the whole model. */
static int open_parts(struct pi_model *m, const char *path, const pi_model_params *p,
                      struct pi_error *err) {
    struct gguf_split fs;
    PI_TRY(gguf_split_info(&m->gguf, &fs, err));
    size_t prefix_len = 0;
    uint32_t name_no = 0, name_count = 0;
    const int named = path && gguf_split_name(path, &prefix_len, &name_no, &name_count);
    if (fs.no != 0) {
        if (!named || name_count != fs.count)
            PI_FAIL(err, PI_ERR_INVALID_ARG, "this is part %u of %u of a split model: open "
                    "its first part (the file with split.no 0) instead", fs.no + 1, fs.count);
        char *first = gguf_split_path(&m->alloc, path, prefix_len, 1, fs.count);
        if (!first)
            PI_FAIL(err, PI_ERR_NOMEM, "out of memory");
        int st = pi_error_set(err, PI_ERR_INVALID_ARG, "this is part %u of %u of a split "
                              "model: open its first part, '%s', instead", fs.no + 1,
                              fs.count, first);
        pi_free(&m->alloc, first);
        return st;
    }
    if (fs.count == 1)
        return PI_OK;
    if (!path)
        PI_FAIL(err, PI_ERR_UNSUPPORTED, "part 1 of %u of a split model: its other parts are "
                "files, open it by name with pi_model_open", fs.count);
    if (!named || name_no != 1 || name_count != fs.count)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "part 1 of %u of a split model, but its name does not "
                "end in '-00001-of-%05u.gguf', so its other parts cannot be found (rename "
                "it as gguf-split named it)", fs.count, fs.count);
    m->parts = pi_calloc(&m->alloc, fs.count - 1, sizeof *m->parts);
    if (!m->parts)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory");
    m->n_parts = fs.count;
    for (uint32_t k = 1; k < fs.count; k++)
        m->parts[k - 1].gguf.alloc = &m->alloc; /* so that destroy can close any of them */
    uint64_t n_tensors = m->gguf.n_tensors;
    for (uint32_t k = 1; k < fs.count; k++) {
        PI_TRY(open_part(m, path, prefix_len, &fs, k, p, err));
        n_tensors += m->parts[k - 1].gguf.n_tensors;
    }
    if (n_tensors != fs.n_tensors)
        PI_FAIL(err, PI_ERR_FORMAT, "the %u parts of this split model hold %llu tensors, "
                "split.tensors.count says %llu", fs.count, (unsigned long long)n_tensors,
                (unsigned long long)fs.n_tensors);
    /* The parsed parts side by side, for the merge. */
    struct gguf_file *files = pi_calloc(&m->alloc, fs.count - 1, sizeof *files);
    if (!files)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory");
    for (uint32_t k = 1; k < fs.count; k++)
        files[k - 1] = m->parts[k - 1].gguf;
    int st = gguf_merge_tensors(&m->gguf, files, fs.count - 1, err);
    pi_free(&m->alloc, files);
    PI_TRY(st);
    for (uint32_t k = 1; k < fs.count; k++)
        gguf_close(&m->parts[k - 1].gguf);
    pi_log(&m->log, PI_LOG_DEBUG, "%s: split model, %u parts, %llu tensors", path, fs.count,
           (unsigned long long)m->gguf.n_tensors);
    return PI_OK;
}

/* Everything after the (first) file's bytes are available. */
static int load(struct pi_model *m, const char *path, const pi_model_params *p,
                struct pi_error *err) {
    PI_TRY(gguf_parse(&m->gguf, m->map.data, m->map.size, &m->alloc, err));
    PI_TRY(open_parts(m, path, p, err));
    PI_TRY(progress(p, 0.5f, err));
    const struct gguf_kv *akv = gguf_find_kv(&m->gguf, "general.architecture");
    const char *arch = "";
    uint64_t alen = 0;
    if (akv && akv->type == PI_META_STRING)
        gguf_kv_str(&m->gguf, akv, 0, &arch, &alen);
    m->arch = pi_strndup(&m->alloc, arch, (size_t)alen);
    if (!m->arch)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory");
    tally(m);
    if (!p->metadata_only) {
        PI_TRY(pi_model_desc_build(&m->desc, &m->gguf, &m->alloc, &m->log, p->progress_fn,
                                   p->progress_user, err));
        m->has_desc = 1;
        PI_TRY(vocab_load(&m->vocab, &m->gguf, &m->alloc, &m->log, err));
        const struct pi_hparams *hp = &m->desc.hp;
        pi_log(&m->log, PI_LOG_INFO,
               "loaded %s %s model: %lld layers, n_embd %lld, n_ff %lld, vocab %lld",
               hp->sparse ? "sparse" : "dense", m->arch, (long long)hp->n_layer,
               (long long)hp->n_embd, (long long)hp->n_ff, (long long)hp->n_vocab);
    }
    return progress(p, 1.0f, err);
}

static void destroy(struct pi_model *m) {
    if (!m)
        return;
    struct pi_allocator a = m->alloc;
    if (m->has_desc)
        pi_model_desc_free(&m->desc, &a);
    vocab_free(m->vocab);
    gguf_close(&m->gguf);
    if (m->owns_map)
        pi_os_unmap_file(&m->map);
    for (uint32_t k = 1; m->parts && k < m->n_parts; k++) {
        gguf_close(&m->parts[k - 1].gguf);
        pi_os_unmap_file(&m->parts[k - 1].map);
    }
    pi_free(&a, m->parts);
    pi_free(&a, m->arch);
    pi_free(&a, m);
}

static int open_common(const char *path, const void *data, uint64_t size,
                       const pi_model_params *params, const struct pi_allocator *alloc,
                       pi_model **out) {
    struct pi_error err;
    pi_error_clear(&err);
    pi_model_params p;
    int status = take_params(params, &p, &err);
    struct pi_model *m = NULL;
    if (status == PI_OK) {
        m = pi_calloc(alloc, 1, sizeof *m);
        if (!m)
            status = pi_error_set(&err, PI_ERR_NOMEM, "out of memory");
    }
    if (status == PI_OK) {
        m->alloc = *alloc;
        m->gguf.alloc = &m->alloc;
        m->n_parts = 1;
        m->log = (struct pi_logger){p.log_fn, p.log_user, p.log_level};
        status = progress(&p, 0.0f, &err);
    }
    if (status == PI_OK) {
        if (path) {
            /* A split model's first part shares the reading progress with the others. */
            size_t prefix_len;
            uint32_t no, count;
            struct reading r = {&p, 0, 1};
            if (gguf_split_name(path, &prefix_len, &no, &count) && no == 1)
                r.n = count;
            status = get_bytes(m, path, &p, &r, &m->map, &err);
            m->owns_map = status == PI_OK;
        } else {
            m->map.data = data;
            m->map.size = size;
        }
    }
    if (status == PI_OK)
        status = load(m, path, &p, &err);
    if (status < 0) {
        if (path && status != PI_ERR_IO)
            pi_error_prefix(&err, "%s", path);
        write_errbuf(params, err.msg);
        if (m)
            pi_log(&m->log, PI_LOG_ERROR, "%s", err.msg);
        destroy(m);
        return status;
    }
    *out = m;
    return PI_OK;
}

int pi_model_open_with(const char *path, const pi_model_params *params,
                       const struct pi_allocator *alloc, pi_model **out) {
    if (out)
        *out = NULL;
    if (!path || !out || !alloc) {
        write_errbuf(params, "pi_model_open: path and out must not be NULL");
        return PI_ERR_INVALID_ARG;
    }
    return open_common(path, NULL, 0, params, alloc, out);
}

int pi_model_open_buffer(const void *data, uint64_t size, const pi_model_params *params,
                         const struct pi_allocator *alloc, pi_model **out) {
    if (out)
        *out = NULL;
    if ((!data && size) || !out || !alloc)
        return PI_ERR_INVALID_ARG;
    return open_common(NULL, data, size, params, alloc, out);
}

int pi_model_open(const char *path, const pi_model_params *params, pi_model **out) {
    return pi_model_open_with(path, params, &pi_default_allocator, out);
}

void pi_model_close(pi_model *model) {
    destroy(model);
}

const char *pi_model_errmsg(const pi_model *model) {
    if (!model)
        return "no model (NULL handle)";
    return model->err.msg;
}

/* ---- Description ---------------------------------------------------------------- */

const char *pi_model_arch(const pi_model *m) {
    return m ? m->arch : "";
}

int pi_model_is_sparse(const pi_model *m) {
    return m && m->gguf.magic == GGUF_MAGIC_PWRI;
}

static const struct pi_hparams *hp_of(const pi_model *m) {
    return m && m->has_desc ? &m->desc.hp : NULL;
}

#define HP_GETTER(fn, field)                                                             \
    int64_t fn(const pi_model *m) {                                                      \
        const struct pi_hparams *hp = hp_of(m);                                          \
        return hp ? hp->field : 0;                                                       \
    }
HP_GETTER(pi_model_n_layer, n_layer)
HP_GETTER(pi_model_n_embd, n_embd)
HP_GETTER(pi_model_n_ff, n_ff)
HP_GETTER(pi_model_n_head, n_head)
HP_GETTER(pi_model_n_head_kv, n_head_kv)
HP_GETTER(pi_model_n_vocab, n_vocab)
HP_GETTER(pi_model_n_ctx_train, n_ctx_train)
#undef HP_GETTER

int pi_model_pooling(const pi_model *m) {
    if (!m)
        return PI_ERR_INVALID_ARG;
    /* the key {arch}.pooling_type, matched in two parts (no buffer for a long arch) */
    const size_t la = strlen(m->arch);
    for (uint64_t i = 0; i < m->gguf.n_kv; i++) {
        const struct gguf_kv *kv = &m->gguf.kv[i];
        if (strncmp(kv->key, m->arch, la) != 0 || strcmp(kv->key + la, ".pooling_type") != 0)
            continue;
        int64_t v;
        if (kv->type == PI_META_ARRAY || gguf_kv_int(&m->gguf, kv, 0, &v) < 0 ||
            v < PI_POOL_NONE || v > PI_POOL_RANK)
            return PI_ERR_FORMAT;
        return (int)v;
    }
    return PI_ERR_NOT_FOUND;
}

int64_t pi_model_predictor_rank(const pi_model *m, int64_t layer) {
    const struct pi_hparams *hp = hp_of(m);
    if (!hp || layer < 0 || layer >= hp->n_layer)
        return 0;
    return m->desc.layers[layer].pred_rank;
}

float pi_model_sparse_threshold(const pi_model *m) {
    const struct pi_hparams *hp = hp_of(m);
    return hp ? hp->sparse_threshold : 0.0f;
}

uint64_t pi_model_n_params(const pi_model *m) {
    return m ? m->n_params : 0;
}

uint64_t pi_model_size_bytes(const pi_model *m) {
    return m ? m->size_bytes : 0;
}

/* ---- Metadata ------------------------------------------------------------------- */

int64_t pi_model_meta_count(const pi_model *m) {
    return m ? (int64_t)m->gguf.n_kv : 0;
}

const char *pi_model_meta_key(const pi_model *m, int64_t index) {
    if (!m || index < 0 || (uint64_t)index >= m->gguf.n_kv)
        return NULL;
    return m->gguf.kv[index].key;
}

static int lookup(const pi_model *m, const char *key, const struct gguf_kv **kv) {
    if (!m || !key)
        return PI_ERR_INVALID_ARG;
    *kv = gguf_find_kv(&m->gguf, key);
    return *kv ? PI_OK : PI_ERR_NOT_FOUND;
}

int pi_model_meta_type(const pi_model *m, const char *key, int *type, int *elem_type,
                       uint64_t *n_elem) {
    const struct gguf_kv *kv;
    PI_TRY(lookup(m, key, &kv));
    if (type)
        *type = (int)kv->type;
    if (elem_type)
        *elem_type = kv->type == PI_META_ARRAY ? (int)kv->elem_type : -1;
    if (n_elem)
        *n_elem = kv->n;
    return PI_OK;
}

int pi_model_meta_int(const pi_model *m, const char *key, int64_t *out) {
    const struct gguf_kv *kv;
    if (!out)
        return PI_ERR_INVALID_ARG;
    PI_TRY(lookup(m, key, &kv));
    if (kv->type == PI_META_ARRAY)
        return PI_ERR_TYPE;
    return gguf_kv_int(&m->gguf, kv, 0, out);
}

int pi_model_meta_float(const pi_model *m, const char *key, double *out) {
    const struct gguf_kv *kv;
    if (!out)
        return PI_ERR_INVALID_ARG;
    PI_TRY(lookup(m, key, &kv));
    if (kv->type == PI_META_ARRAY)
        return PI_ERR_TYPE;
    return gguf_kv_float(&m->gguf, kv, 0, out);
}

static int64_t copy_out(const char *s, uint64_t len, char *buf, size_t cap) {
    if (cap > 0) {
        size_t n = len < cap - 1 ? (size_t)len : cap - 1;
        memcpy(buf, s, n);
        buf[n] = '\0';
    }
    return (int64_t)len;
}

int64_t pi_model_meta_str(const pi_model *m, const char *key, char *buf, size_t cap) {
    const struct gguf_kv *kv;
    if (!buf && cap)
        return PI_ERR_INVALID_ARG;
    PI_TRY(lookup(m, key, &kv));
    if (kv->type != PI_META_STRING)
        return PI_ERR_TYPE;
    const char *s;
    uint64_t len;
    PI_TRY(gguf_kv_str(&m->gguf, kv, 0, &s, &len));
    return copy_out(s, len, buf, cap);
}

static int array_of(const pi_model *m, const char *key, const struct gguf_kv **kv,
                    uint64_t index) {
    PI_TRY(lookup(m, key, kv));
    if ((*kv)->type != PI_META_ARRAY)
        return PI_ERR_TYPE;
    return index < (*kv)->n ? PI_OK : PI_ERR_RANGE;
}

int pi_model_meta_arr_int(const pi_model *m, const char *key, uint64_t index, int64_t *out) {
    const struct gguf_kv *kv;
    if (!out)
        return PI_ERR_INVALID_ARG;
    int s = array_of(m, key, &kv, index);
    if (s == PI_ERR_RANGE && gguf_value_size(kv->elem_type) == 0)
        return PI_ERR_TYPE;
    PI_TRY(s);
    return gguf_kv_int(&m->gguf, kv, index, out);
}

int pi_model_meta_arr_float(const pi_model *m, const char *key, uint64_t index, double *out) {
    const struct gguf_kv *kv;
    if (!out)
        return PI_ERR_INVALID_ARG;
    int s = array_of(m, key, &kv, index);
    if (s == PI_ERR_RANGE && gguf_value_size(kv->elem_type) == 0)
        return PI_ERR_TYPE;
    PI_TRY(s);
    return gguf_kv_float(&m->gguf, kv, index, out);
}

int64_t pi_model_meta_arr_str(const pi_model *m, const char *key, uint64_t index, char *buf,
                              size_t cap) {
    const struct gguf_kv *kv;
    if (!buf && cap)
        return PI_ERR_INVALID_ARG;
    int s = array_of(m, key, &kv, index);
    if (s == PI_ERR_RANGE && kv->elem_type != PI_META_STRING)
        return PI_ERR_TYPE;
    PI_TRY(s);
    const char *str;
    uint64_t len;
    PI_TRY(gguf_kv_str(&m->gguf, kv, index, &str, &len));
    return copy_out(str, len, buf, cap);
}

/* Appends to a caller buffer, counting the full length even past its end. */
struct out {
    char *buf;
    size_t cap;
    uint64_t len;
};

static void out_bytes(struct out *o, const char *s, uint64_t n) {
    if (o->cap > 0 && o->len < o->cap - 1) {
        uint64_t room = o->cap - 1 - o->len;
        memcpy(o->buf + o->len, s, (size_t)(n < room ? n : room));
    }
    o->len += n;
}

static void out_str(struct out *o, const char *s) {
    out_bytes(o, s, strlen(s));
}

static void out_value(struct out *o, const pi_model *m, const struct gguf_kv *kv, uint32_t type,
                      uint64_t i) {
    char num[64];
    if (type == PI_META_STRING) {
        const char *s;
        uint64_t len;
        if (gguf_kv_str(&m->gguf, kv, i, &s, &len) == PI_OK)
            out_bytes(o, s, len);
        return;
    }
    if (type == PI_META_BOOL) {
        int64_t v = 0;
        gguf_kv_int(&m->gguf, kv, i, &v);
        out_str(o, v ? "true" : "false");
        return;
    }
    if (type == PI_META_F32 || type == PI_META_F64) {
        double v = 0;
        gguf_kv_float(&m->gguf, kv, i, &v);
        snprintf(num, sizeof num, "%.*g", type == PI_META_F32 ? 9 : 17, v);
        out_str(o, num);
        return;
    }
    int64_t v;
    if (gguf_kv_int(&m->gguf, kv, i, &v) == PI_OK) {
        snprintf(num, sizeof num, "%lld", (long long)v);
    } else { /* a U64 above INT64_MAX */
        double d = 0;
        gguf_kv_float(&m->gguf, kv, i, &d);
        snprintf(num, sizeof num, "%.0f", d);
    }
    out_str(o, num);
}

int64_t pi_model_meta_to_string(const pi_model *m, const char *key, uint32_t max_items,
                                char *buf, size_t cap) {
    const struct gguf_kv *kv;
    if (!buf && cap)
        return PI_ERR_INVALID_ARG;
    PI_TRY(lookup(m, key, &kv));
    struct out o = {buf, cap, 0};
    if (kv->type != PI_META_ARRAY) {
        out_value(&o, m, kv, kv->type, 0);
    } else {
        uint64_t shown = max_items ? max_items : 16;
        out_str(&o, "[");
        if (kv->elem_type == PI_META_ARRAY) {
            out_str(&o, "...");
        } else {
            for (uint64_t i = 0; i < kv->n && i < shown; i++) {
                if (i)
                    out_str(&o, ", ");
                out_value(&o, m, kv, kv->elem_type, i);
            }
            if (kv->n > shown)
                out_str(&o, ", ...");
        }
        out_str(&o, "]");
        if (kv->n > shown || kv->elem_type == PI_META_ARRAY) {
            char tail[48];
            snprintf(tail, sizeof tail, " (%llu items)", (unsigned long long)kv->n);
            out_str(&o, tail);
        }
    }
    if (cap > 0)
        buf[o.len < cap ? o.len : cap - 1] = '\0';
    return (int64_t)o.len;
}

/* ---- Tensors -------------------------------------------------------------------- */

static const struct gguf_tensor *tensor_at(const pi_model *m, int64_t index) {
    if (!m || index < 0 || (uint64_t)index >= m->gguf.n_tensors)
        return NULL;
    return &m->gguf.tensors[index];
}

int64_t pi_model_n_tensors(const pi_model *m) {
    return m ? (int64_t)m->gguf.n_tensors : 0;
}

int pi_model_tensor_find(const pi_model *m, const char *name, int64_t *index) {
    if (!m || !name || !index)
        return PI_ERR_INVALID_ARG;
    int64_t i = gguf_find_tensor(&m->gguf, name);
    if (i < 0)
        return PI_ERR_NOT_FOUND;
    *index = i;
    return PI_OK;
}

const char *pi_model_tensor_name(const pi_model *m, int64_t index) {
    const struct gguf_tensor *t = tensor_at(m, index);
    return t ? t->name : NULL;
}

int pi_model_tensor_type(const pi_model *m, int64_t index) {
    if (!m)
        return PI_ERR_INVALID_ARG;
    const struct gguf_tensor *t = tensor_at(m, index);
    return t ? (int)t->type : PI_ERR_RANGE;
}

int pi_model_tensor_shape(const pi_model *m, int64_t index, int *n_dims, int64_t dims[4]) {
    if (!m || !n_dims || !dims)
        return PI_ERR_INVALID_ARG;
    const struct gguf_tensor *t = tensor_at(m, index);
    if (!t)
        return PI_ERR_RANGE;
    *n_dims = (int)t->n_dims;
    for (int d = 0; d < 4; d++)
        dims[d] = t->ne[d];
    return PI_OK;
}

uint64_t pi_model_tensor_nbytes(const pi_model *m, int64_t index) {
    const struct gguf_tensor *t = tensor_at(m, index);
    return t ? t->nbytes : 0;
}
