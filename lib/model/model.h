/* model.h -- the pi_model object behind the public handle. */
#ifndef PI_MODEL_MODEL_H
#define PI_MODEL_MODEL_H

#include "model/desc.h"
#include "model/gguf.h"
#include "model/vocab.h"
#include "util/alloc.h"
#include "util/error.h"
#include "util/log.h"
#include "util/os.h"

/* The second and later files of a split model (gguf.h, "Split models"). */
struct pi_model_part {
    struct pi_file_map map;    /* owned */
    struct gguf_file gguf;     /* parsed; closed once its tensors are merged */
    uint64_t header_size;      /* bytes before its tensor data: metadata, tensor table */
};

struct pi_model {
    struct pi_allocator alloc; /* copy: everything below was allocated with it */
    struct pi_logger log;
    struct pi_file_map map;    /* the (first) file; owned when owns_map */
    int owns_map;
    /* A split model's files after the first: n_parts - 1 entries (NULL for one file).
     * gguf.tensors lists every part's tensors, their data pointers into these maps;
     * gguf's metadata, base and size stay the first file's. */
    uint32_t n_parts;          /* 1, or the split.count of a split model */
    struct pi_model_part *parts;
    struct gguf_file gguf;
    int has_desc;              /* 0 for metadata_only models */
    struct pi_model_desc desc;
    char *arch;                /* general.architecture, NUL-terminated, "" if absent */
    struct pi_vocab *vocab;    /* tokenizer; NULL if the file has none or metadata_only */
    uint64_t n_params;
    uint64_t size_bytes;
    struct pi_error err;       /* written only by calls that may change the model */
};

/* Open a model from `path` with an explicit allocator (tests use one that fails on
 * demand); pi_model_open passes the C library's. */
int pi_model_open_with(const char *path, const pi_model_params *params,
                       const struct pi_allocator *alloc, pi_model **out);

/* Open a model over `size` bytes at `data`, borrowed until the model is closed (the
 * fuzzers use this). A part of a split model is refused (the first part:
 * PI_ERR_UNSUPPORTED, its other parts are found only by file name; a later part:
 * PI_ERR_INVALID_ARG, as pi_model_open). */
int pi_model_open_buffer(const void *data, uint64_t size, const pi_model_params *params,
                         const struct pi_allocator *alloc, pi_model **out);

#endif
