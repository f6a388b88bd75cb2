/* api_quantize.c -- pi_model_quantize: rewrite a GGUF / PWRI file with its weights
 * quantized.
 *
 * The input is mapped and validated by the GGUF reader; the output is streamed:
 * the metadata is carried over as raw bytes into the writer, the header written
 * with every tensor's new type and offset, then each tensor's bytes produced a
 * chunk of rows at a time (converted to float, quantized by runtime/quantize.c,
 * rows spread over a thread pool) or copied from the mapping. Memory: the metadata,
 * one chunk of output and one float row per thread. The file is written under a
 * temporary name next to the output and renamed into place only when complete. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "model/gguf.h"
#include "runtime/pool.h"
#include "runtime/quantize.h"
#include "runtime/types.h"
#include "util/os.h"
#include "util/params.h"

/* The size of the first published pi_quantize_params (0.1): up to errbuf_cap. */
#define QUANTIZE_PARAMS_MIN_SIZE \
    (offsetof(pi_quantize_params, errbuf_cap) + sizeof(((pi_quantize_params *)0)->errbuf_cap))

#define CHUNK_ELEMS ((int64_t)1 << 20) /* weights converted per step (4 MiB as float) */
#define COPY_CHUNK ((uint64_t)16 << 20) /* bytes copied per step */
#define ROW_GRAIN_ELEMS 16384           /* weights per pool work item, about */

int pi_quantize_default_params(pi_quantize_params *params) {
    if (!params)
        return PI_ERR_INVALID_ARG;
    memset(params, 0, sizeof *params);
    params->struct_size = (uint32_t)sizeof *params;
    params->type = PI_TYPE_Q4_0;
    return PI_OK;
}

/* llama.cpp's LlamaFileType of a model whose weights are mostly `type`; 0 if none. */
static uint32_t file_type_of(uint32_t type) {
    switch (type) {
    case PI_TYPE_Q4_0: return 2;
    case PI_TYPE_Q4_1: return 3;
    case PI_TYPE_Q8_0: return 7;
    case PI_TYPE_Q5_0: return 8;
    case PI_TYPE_Q5_1: return 9;
    case PI_TYPE_MXFP4: return 38; /* MOSTLY_MXFP4_MOE: the nearest */
    default: return 0;
    }
}

static int valid_predictor_type(uint32_t type) {
    return file_type_of(type) || type == PI_TYPE_F16 || type == PI_TYPE_BF16;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

static int is_float_type(uint32_t type) {
    return type == PI_TYPE_F32 || type == PI_TYPE_F16 || type == PI_TYPE_BF16;
}

/* The type tensor t gets in the output (its own type when it is copied) into *to.
 * A weight already quantized to another type is converted only with allow_requantize
 * (its rounding and the new one compound); otherwise PI_ERR_UNSUPPORTED. */
static int target_type(const struct gguf_tensor *t, const pi_quantize_params *p, uint32_t *to,
                       struct pi_error *err) {
    *to = t->type;
    if (t->n_dims < 2 || !ends_with(t->name, ".weight"))
        return PI_OK;
    const struct pi_type_traits *tr = pi_type_traits(t->type);
    if (!tr || !tr->to_float)
        return PI_OK; /* a type we cannot read: carried over as bytes */
    if (p->keep_output && strcmp(t->name, "output.weight") == 0)
        return PI_OK;
    /* mixture-of-experts routers stay as they are (as llama.cpp keeps them): they are
     * small, and their rounding would move which experts a token gets */
    if (ends_with(t->name, ".ffn_gate_inp.weight") || ends_with(t->name, ".ffn_gate_inp_shexp.weight"))
        return PI_OK;
    uint32_t want = p->type;
    if (p->predictor_type && strncmp(t->name, "blk.", 4) == 0 &&
        (ends_with(t->name, ".fc1.weight") || ends_with(t->name, ".fc2.weight")))
        want = p->predictor_type;
    if (want == t->type || !pi_type_row_bytes(want, t->ne[0]))
        return PI_OK; /* already there, or ne[0] is not a multiple of the block size */
    if (!is_float_type(t->type) && !p->allow_requantize)
        PI_FAIL(err, PI_ERR_UNSUPPORTED, "tensor %s is already %s: quantizing it to %s would "
                "round it twice; start from an F32/F16/BF16 file, or set allow_requantize "
                "(pi-quantize --allow-requantize)", t->name, pi_type_name((int)t->type),
                pi_type_name((int)want));
    *to = want;
    return PI_OK;
}

/* One chunk of rows: convert each to float in the thread's scratch row, quantize. */
struct rows_job {
    const uint8_t *src;
    uint64_t in_row;
    uint8_t *dst;
    uint64_t out_row;
    int64_t ne0;
    uint32_t to;
    void (*to_float)(const void *src, float *dst, int64_t n);
    float *scratch; /* ne0 floats per thread */
};

static void quantize_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    const struct rows_job *j = arg;
    float *row = j->scratch + (size_t)ith * (size_t)j->ne0;
    for (int64_t r = lo; r < hi; r++) {
        j->to_float(j->src + (uint64_t)r * j->in_row, row, j->ne0);
        pi_quantize_row(j->to, row, j->dst + (uint64_t)r * j->out_row, j->ne0);
    }
}

struct run {
    pi_quantize_params p;
    const char *in_path, *out_path;
    struct pi_error *err;
    struct pi_file_map map;
    struct gguf_file f;
    struct gguf_writer *w;
    uint32_t *to;        /* per tensor: output type */
    struct pi_pool *pool;
    int n_threads;
    float *scratch;
    uint8_t *obuf;
    uint64_t obuf_cap;
    char *tmp;           /* temporary file name, while it exists */
    FILE *fp;
    uint64_t done, total; /* input tensor bytes processed, for progress */
};

static int progress(struct run *r) {
    float frac = r->total ? (float)((double)r->done / (double)r->total) : 1.0f;
    if (r->p.progress_fn && r->p.progress_fn(r->p.progress_user, frac))
        PI_FAIL(r->err, PI_ERR_ABORTED, "quantization aborted by the caller");
    return PI_OK;
}

static int write_failed(struct run *r, int status) {
    if (status == PI_ERR_IO)
        PI_FAIL(r->err, PI_ERR_IO, "cannot write '%s': %s", r->tmp, strerror(errno));
    PI_FAIL(r->err, status == PI_ERR_NOMEM ? PI_ERR_NOMEM : PI_ERR_INTERNAL,
            "writing '%s' failed (%s)", r->tmp, pi_status_str(status));
}

static int put(struct run *r, const void *data, uint64_t n) {
    errno = 0;
    int st = gguf_writer_write_data(r->w, r->fp, data, n);
    return st < 0 ? write_failed(r, st) : PI_OK;
}

/* Writer with the input's metadata (general.file_type and
 * general.quantization_version replaced in place or appended) and the tensor infos
 * with their output types. Also sizes the buffers. */
static int plan(struct run *r) {
    const struct gguf_file *f = &r->f;
    if (gguf_writer_create(&pi_default_allocator, &r->w) < 0 ||
        !(r->to = pi_calloc(&pi_default_allocator, f->n_tensors ? f->n_tensors : 1,
                            sizeof *r->to)))
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory");
    int st = gguf_writer_set_alignment(r->w, f->alignment);
    uint32_t ftype = file_type_of(r->p.type), qver = 2;
    int have_ftype = 0, have_qver = 0;
    for (uint64_t i = 0; st == PI_OK && i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        if (strcmp(kv->key, "general.file_type") == 0) {
            st = gguf_writer_add_scalar(r->w, kv->key, PI_META_U32, &ftype);
            have_ftype = 1;
        } else if (strcmp(kv->key, "general.quantization_version") == 0) {
            st = gguf_writer_add_scalar(r->w, kv->key, PI_META_U32, &qver);
            have_qver = 1;
        } else {
            st = gguf_writer_add_raw(r->w, kv->key, kv->type, kv->elem_type, kv->n,
                                     f->base + kv->off, kv->size);
        }
    }
    if (st == PI_OK && !have_qver)
        st = gguf_writer_add_scalar(r->w, "general.quantization_version", PI_META_U32, &qver);
    if (st == PI_OK && !have_ftype)
        st = gguf_writer_add_scalar(r->w, "general.file_type", PI_META_U32, &ftype);
    int64_t max_ne0 = 0;
    for (uint64_t i = 0; st == PI_OK && i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        PI_TRY(target_type(t, &r->p, &r->to[i], r->err));
        st = gguf_writer_add_tensor_info(r->w, t->name, r->to[i], t->n_dims, t->ne);
        if (r->to[i] == t->type)
            continue;
        int64_t ne0 = t->ne[0];
        int64_t rows = CHUNK_ELEMS / ne0 ? CHUNK_ELEMS / ne0 : 1;
        uint64_t cap = pi_type_row_bytes(r->to[i], ne0) * (uint64_t)rows;
        if (cap > r->obuf_cap)
            r->obuf_cap = cap;
        if (ne0 > max_ne0)
            max_ne0 = ne0;
    }
    if (st == PI_ERR_NOMEM)
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory");
    if (st < 0) /* the reader validated every key and tensor the writer sees */
        PI_FAIL(r->err, PI_ERR_INTERNAL, "cannot carry the metadata over (%s)",
                pi_status_str(st));
    if (!max_ne0)
        return PI_OK;
    if ((uint64_t)max_ne0 > SIZE_MAX / sizeof(float) / (size_t)r->n_threads ||
        r->obuf_cap > SIZE_MAX)
        PI_FAIL(r->err, PI_ERR_NOMEM, "rows too long to quantize on this system");
    r->scratch = pi_calloc(&pi_default_allocator, (size_t)r->n_threads * (size_t)max_ne0,
                           sizeof(float));
    r->obuf = pi_malloc(&pi_default_allocator, (size_t)r->obuf_cap);
    if (!r->scratch || !r->obuf)
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory");
    if (r->n_threads > 1) {
        st = pi_pool_create(&r->pool, r->n_threads, &pi_default_allocator);
        if (st < 0)
            PI_FAIL(r->err, st == PI_ERR_NOMEM ? PI_ERR_NOMEM : PI_ERR_INTERNAL,
                    "cannot start %d threads", r->n_threads);
    }
    return PI_OK;
}

static int copy_tensor(struct run *r, const struct gguf_tensor *t) {
    for (uint64_t at = 0; at < t->nbytes;) {
        uint64_t k = t->nbytes - at < COPY_CHUNK ? t->nbytes - at : COPY_CHUNK;
        PI_TRY(put(r, t->data + at, k));
        at += k;
        r->done += k;
        PI_TRY(progress(r));
    }
    return PI_OK;
}

static int quantize_tensor(struct run *r, const struct gguf_tensor *t, uint32_t to) {
    int64_t ne0 = t->ne[0];
    int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3]; /* the reader bounded the product */
    int64_t chunk = CHUNK_ELEMS / ne0 ? CHUNK_ELEMS / ne0 : 1;
    int64_t grain = ROW_GRAIN_ELEMS / ne0 ? ROW_GRAIN_ELEMS / ne0 : 1;
    struct rows_job job = {
        .in_row = pi_type_row_bytes(t->type, ne0),
        .dst = r->obuf,
        .out_row = pi_type_row_bytes(to, ne0),
        .ne0 = ne0,
        .to = to,
        .to_float = pi_type_traits(t->type)->to_float,
        .scratch = r->scratch,
    };
    for (int64_t row = 0; row < n_rows; row += chunk) {
        int64_t n = n_rows - row < chunk ? n_rows - row : chunk;
        job.src = t->data + (uint64_t)row * job.in_row;
        if (r->pool)
            pi_pool_for(r->pool, n, grain, quantize_rows, &job);
        else
            quantize_rows(&job, 0, n, 0);
        PI_TRY(put(r, r->obuf, (uint64_t)n * job.out_row));
        r->done += (uint64_t)n * job.in_row;
        PI_TRY(progress(r));
    }
    return PI_OK;
}

/* Create the temporary output next to out_path; never replaces an existing file. */
static int open_tmp(struct run *r) {
    size_t cap = strlen(r->out_path) + 48;
    r->tmp = pi_malloc(&pi_default_allocator, cap);
    if (!r->tmp)
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory");
    int st = pi_os_create_temp(r->out_path, r->tmp, cap, &r->fp, r->err);
    if (st < 0) {
        pi_free(&pi_default_allocator, r->tmp);
        r->tmp = NULL;
    }
    return st;
}

/* Flush, sync and close the temporary file, then rename it over out_path. */
static int commit(struct run *r) {
    FILE *fp = r->fp;
    r->fp = NULL;
    PI_TRY(pi_os_sync_close(fp, r->tmp, r->err));
    PI_TRY(pi_os_replace(r->tmp, r->out_path, r->err));
    pi_free(&pi_default_allocator, r->tmp);
    r->tmp = NULL;
    return PI_OK;
}

static int quantize(struct run *r) {
    if (pi_os_same_file(r->in_path, r->out_path))
        PI_FAIL(r->err, PI_ERR_INVALID_ARG, "'%s' is the input file; write the output to "
                "another path", r->out_path);
    PI_TRY(pi_os_map_file(r->in_path, &r->map, r->err));
    int st = gguf_parse(&r->f, r->map.data, r->map.size, &pi_default_allocator, r->err);
    /* A split model's part holds only some tensors (and the first the metadata): its
     * quantized copy would be a partial model. */
    struct gguf_split split;
    if (st == PI_OK)
        st = gguf_split_info(&r->f, &split, r->err);
    if (st == PI_OK && split.count > 1)
        st = pi_error_set(r->err, PI_ERR_UNSUPPORTED, "part %u of %u of a split model: "
                          "pi_model_quantize takes a whole model in one file (merge the "
                          "parts first, e.g. llama-gguf-split --merge)", split.no + 1,
                          split.count);
    if (st < 0) {
        pi_error_prefix(r->err, "%s", r->in_path);
        return st;
    }
    for (uint64_t i = 0; i < r->f.n_tensors; i++)
        r->total += r->f.tensors[i].nbytes;
    PI_TRY(progress(r));
    PI_TRY(plan(r));
    PI_TRY(open_tmp(r));
    errno = 0;
    st = gguf_writer_write_header(r->w, r->fp, r->f.magic);
    if (st < 0)
        return write_failed(r, st);
    for (uint64_t i = 0; i < r->f.n_tensors; i++) {
        const struct gguf_tensor *t = &r->f.tensors[i];
        if (r->to[i] == t->type)
            PI_TRY(copy_tensor(r, t));
        else
            PI_TRY(quantize_tensor(r, t, r->to[i]));
    }
    st = gguf_writer_finish(r->w, r->fp);
    if (st < 0)
        return write_failed(r, st);
    return commit(r);
}

int pi_model_quantize(const char *in_path, const char *out_path,
                      const pi_quantize_params *params) {
    struct pi_error err;
    pi_error_clear(&err);
    struct run r;
    memset(&r, 0, sizeof r);
    r.in_path = in_path;
    r.out_path = out_path;
    r.err = &err;
    pi_quantize_default_params(&r.p);
    int st = pi_params_take(params, &r.p, sizeof r.p, QUANTIZE_PARAMS_MIN_SIZE,
                            "pi_quantize_params", &err);
    if (st == PI_OK && r.p.reserved0)
        st = pi_error_set(&err, PI_ERR_INVALID_ARG, "pi_quantize_params: reserved0 is not zero");
    if (st == PI_OK && (!in_path || !out_path))
        st = pi_error_set(&err, PI_ERR_INVALID_ARG,
                          "pi_model_quantize: in_path and out_path must not be NULL");
    if (st == PI_OK && !file_type_of(r.p.type))
        st = pi_error_set(&err, PI_ERR_INVALID_ARG, "pi_model_quantize: type %u (%s) is not "
                          "a quantization target; use Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0",
                          r.p.type, pi_type_name((int)r.p.type) ? pi_type_name((int)r.p.type)
                                                                : "unknown");
    if (st == PI_OK && r.p.predictor_type && !valid_predictor_type(r.p.predictor_type))
        st = pi_error_set(&err, PI_ERR_INVALID_ARG, "pi_model_quantize: predictor_type %u "
                          "(%s) is not allowed; use Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16 or BF16",
                          r.p.predictor_type,
                          pi_type_name((int)r.p.predictor_type)
                              ? pi_type_name((int)r.p.predictor_type) : "unknown");
    if (st == PI_OK) {
        int n = r.p.n_threads ? (int)(r.p.n_threads > 1024 ? 1024 : r.p.n_threads)
                              : pi_os_n_cpus();
        r.n_threads = n < 1 ? 1 : n;
        st = quantize(&r);
    }
    if (r.fp)
        fclose(r.fp);
    if (r.tmp)
        pi_os_remove(r.tmp);
    pi_free(&pi_default_allocator, r.tmp);
    pi_pool_destroy(r.pool);
    pi_free(&pi_default_allocator, r.scratch);
    pi_free(&pi_default_allocator, r.obuf);
    pi_free(&pi_default_allocator, r.to);
    gguf_writer_destroy(r.w);
    gguf_close(&r.f);
    pi_os_unmap_file(&r.map);
    /* r.p holds the caller's errbuf once its struct_size was found acceptable */
    if (st < 0 && r.p.errbuf && r.p.errbuf_cap > 0)
        snprintf(r.p.errbuf, r.p.errbuf_cap, "%s", err.msg);
    return st;
}
