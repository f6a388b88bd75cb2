/* gguf.h -- GGUF / PowerInfer-GGUF container: a validating reader over bytes in
 * memory (a mapped file), and a writer.
 *
 * The reader treats the bytes as hostile: every count, length, type, dimension,
 * offset and size is checked against the buffer before it is used, and every
 * allocation is bounded by the buffer size. Failures are PI_ERR_FORMAT (or
 * PI_ERR_UNSUPPORTED for a valid file this reader cannot take, such as big-endian),
 * with a message naming what is wrong and the byte offset where it was found.
 * docs/formats.md describes the format as implemented. */
#ifndef PI_MODEL_GGUF_H
#define PI_MODEL_GGUF_H

#include <stdint.h>
#include <stdio.h>

#include "util/alloc.h"
#include "util/error.h"

#define GGUF_MAGIC_GGUF 0x46554747u /* "GGUF" read as little-endian u32 */
#define GGUF_MAGIC_PWRI 0x49525750u /* "PWRI" */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64     /* tensor names are at most 63 bytes */
#define GGUF_MAX_KEY 65535   /* key length limit of the specification */
#define GGUF_MAX_NESTING 8   /* arrays of arrays, deeper is rejected */

struct gguf_kv {
    char *key;          /* NUL-terminated copy of the key */
    uint32_t type;      /* PI_META_* */
    uint32_t elem_type; /* element type when type == PI_META_ARRAY, else 0 */
    uint64_t n;         /* elements of an array; 1 for a scalar */
    uint64_t off;       /* file offset of the value (of the first element for arrays) */
    uint64_t size;      /* bytes of the value (all elements for arrays) */
    /* For arrays of strings: file offset of element i's u64 length. NULL otherwise. */
    uint64_t *str_off;
};

struct gguf_tensor {
    char name[GGUF_MAX_NAME]; /* NUL-terminated */
    uint32_t n_dims;          /* 1..4 */
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims are 1 */
    uint32_t type;            /* GGUF type id, known to pi_type_traits */
    uint64_t offset;          /* relative to the data section of the file holding it */
    uint64_t nbytes;
    const uint8_t *data;      /* into the buffer; NULL when nbytes == 0 */
};

struct gguf_file {
    const uint8_t *base; /* borrowed: the whole file */
    uint64_t size;
    uint32_t magic;      /* GGUF_MAGIC_GGUF or GGUF_MAGIC_PWRI */
    uint32_t version;    /* 2 or 3 */
    uint32_t alignment;
    uint64_t data_off;   /* start of the tensor data section */
    uint64_t n_kv;
    struct gguf_kv *kv;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    /* Indices sorted by key / by name, for binary search. */
    uint64_t *kv_sorted;
    uint64_t *tensor_sorted;
    const struct pi_allocator *alloc;
};

/* Parse and validate the `size` bytes at `data` (borrowed until gguf_close).
 * On failure *f is left empty (safe to gguf_close). */
int gguf_parse(struct gguf_file *f, const void *data, uint64_t size,
               const struct pi_allocator *alloc, struct pi_error *err);
void gguf_close(struct gguf_file *f);

/* Lookup; NULL / -1 when absent. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
int64_t gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Bytes of one value of a scalar metadata type; 0 for STRING/ARRAY/unknown. */
uint32_t gguf_value_size(uint32_t type);

/* ------------------------------------------------------------------------------
 * Split models: llama.cpp's gguf-split and gguf-py's GGUFWriter (split_max_tensors,
 * split_max_size) write one model as files NAME-00001-of-00003.gguf, ...; each is a
 * whole GGUF file. Every part carries split.no (u16, 0-based), split.count (u16) and
 * split.tensors.count (i32, tensors over all parts); the first part also carries the
 * model's metadata, the others only their tensors. docs/formats.md, "Split files".
 * ------------------------------------------------------------------------------ */
struct gguf_split {
    uint32_t no;        /* split.no; 0 for a file without split keys */
    uint32_t count;     /* split.count; 1 for a file without split keys */
    uint64_t n_tensors; /* split.tensors.count; the file's own count without split keys */
};

/* The split keys of f, checked: integers (any integer type is taken, gguf-py writes
 * u16 / i32), split.count 1..65535, split.no below it, split.tensors.count at least
 * the file's own count (equal to it when split.count is 1); split.no and
 * split.tensors.count are required when split.count > 1, and split.no or
 * split.tensors.count without split.count is malformed. PI_ERR_FORMAT naming the key. */
int gguf_split_info(const struct gguf_file *f, struct gguf_split *s, struct pi_error *err);

/* The split naming, "-%05u-of-%05u.gguf" at the end of `path` (exactly five digits
 * each, the numbers 1-based, as gguf-split and gguf-py write them): returns 1 and
 * sets the length of the name before it and the two numbers, or returns 0. */
int gguf_split_name(const char *path, size_t *prefix_len, uint32_t *no, uint32_t *count);

/* Part `no` (1-based) of `count`, named as `path`'s first prefix_len bytes (from
 * gguf_split_name) followed by the split suffix; allocated with `a`, NULL when out of
 * memory. */
char *gguf_split_path(const struct pi_allocator *a, const char *path, size_t prefix_len,
                      uint32_t no, uint32_t count);

/* Check that `part` (parsed, with split info `ps`) is part `no` (0-based) of the split
 * whose first part is `first` (split info `fs`): same magic, version, split.count and
 * split.tensors.count, and split.no == no. PI_ERR_FORMAT saying what differs. */
int gguf_split_check_part(const struct gguf_file *first, const struct gguf_split *fs,
                          const struct gguf_file *part, const struct gguf_split *ps,
                          uint32_t no, struct pi_error *err);

/* Append the tensor tables of parts[0..n_parts) (parsed files, borrowed for the call)
 * to f's, in order: afterwards f lists its own tensors, then each part's, their data
 * pointers into the parts' bytes (which must outlive f), and finds any of them by
 * name. A name in two files is PI_ERR_FORMAT naming both (parts numbered from 1, f
 * being part 1); PI_ERR_NOMEM. On failure f is unchanged. */
int gguf_merge_tensors(struct gguf_file *f, const struct gguf_file *parts, uint64_t n_parts,
                       struct pi_error *err);

/* Typed reads of a validated value. */
int gguf_kv_int(const struct gguf_file *f, const struct gguf_kv *kv, uint64_t i,
                int64_t *out);  /* integers and bools; PI_ERR_TYPE / PI_ERR_RANGE */
int gguf_kv_float(const struct gguf_file *f, const struct gguf_kv *kv, uint64_t i,
                  double *out); /* floats and integers */
/* Element i (0 for a scalar string): pointer into the file and length. */
int gguf_kv_str(const struct gguf_file *f, const struct gguf_kv *kv, uint64_t i,
                const char **s, uint64_t *len);

/* ------------------------------------------------------------------------------
 * Writer: collects metadata and tensors in memory, then writes one file. Values
 * and tensor data are copied. Used by tools and tests.
 * ------------------------------------------------------------------------------ */
struct gguf_writer;

int gguf_writer_create(const struct pi_allocator *alloc, struct gguf_writer **out);
void gguf_writer_destroy(struct gguf_writer *w);
/* Alignment of the data section (a power of two); written as general.alignment
 * when it is not the default 32. */
int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment);
/* A scalar of a numeric or bool type; `value` points at one value of that type. */
int gguf_writer_add_scalar(struct gguf_writer *w, const char *key, uint32_t type,
                           const void *value);
int gguf_writer_add_string(struct gguf_writer *w, const char *key, const char *s);
/* An array of n numeric/bool values of elem_type. */
int gguf_writer_add_array(struct gguf_writer *w, const char *key, uint32_t elem_type,
                          const void *values, uint64_t n);
int gguf_writer_add_string_array(struct gguf_writer *w, const char *key,
                                 const char *const *strings, uint64_t n);
/* A tensor with n_dims dims ne[] (GGUF order) of `type`; data holds exactly the
 * tensor's bytes (pi_type_row_bytes(type, ne[0]) * ne[1] * ...). */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type,
                           uint32_t n_dims, const int64_t *ne, const void *data);
/* Write everything to `path` with magic GGUF_MAGIC_GGUF or GGUF_MAGIC_PWRI,
 * version 3. PI_ERR_INVALID_ARG if a tensor was declared without data. */
/* Write the file beside `path` (pi_os_create_temp) and rename it over `path` when
 * complete: the old file survives any failure, and nothing already at the temporary
 * name (a symbolic link, a FIFO) is written through. */
int gguf_writer_replace_file(struct gguf_writer *w, const char *path, uint32_t magic,
                             struct pi_error *err);
int gguf_writer_write_file(struct gguf_writer *w, const char *path, uint32_t magic,
                           struct pi_error *err);

/* A key whose value is given serialised, as it follows the value type in a file
 * (for arrays: after the element type and count); `size` bytes are copied as they
 * are. Carries metadata from one file to another without interpreting it. The
 * caller vouches for the bytes (e.g. a value gguf_parse validated). */
int gguf_writer_add_raw(struct gguf_writer *w, const char *key, uint32_t type,
                        uint32_t elem_type, uint64_t n, const void *payload, uint64_t size);

/* Streaming, for files too large to hold in memory: declare every tensor with
 * gguf_writer_add_tensor_info (no data), write the header with
 * gguf_writer_write_header, then the tensors' bytes in declaration order with any
 * number of gguf_writer_write_data calls (padding is inserted as each tensor
 * completes), and gguf_writer_finish. The stream is the caller's: the writer only
 * appends to it. I/O errors are PI_ERR_IO; writing more bytes than declared, or
 * finishing early, is PI_ERR_INVALID_ARG. */
int gguf_writer_add_tensor_info(struct gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const int64_t *ne);
int gguf_writer_write_header(struct gguf_writer *w, FILE *fp, uint32_t magic);
int gguf_writer_write_data(struct gguf_writer *w, FILE *fp, const void *data, uint64_t n);
int gguf_writer_finish(struct gguf_writer *w, FILE *fp);

#endif
