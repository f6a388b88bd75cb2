/*
 * powerinfer.h -- the public API of libpowerinfer.
 *
 * SPDX-License-Identifier: MIT
 *
 * This header is the reference manual. Anything not declared here is not part of
 * the API and may change without notice. See ABI.md for the stability promise.
 *
 * ---------------------------------------------------------------------------------
 * Threading contract
 * ---------------------------------------------------------------------------------
 * - Functions that take no handle (pi_version, pi_status_str, pi_type_name,
 *   pi_*_default_params) are safe to call from any thread at any time.
 * - A pi_model is immutable once pi_model_open has returned it. All query functions
 *   on a model may be called from many threads at once. The one exception is the
 *   model's error message (pi_model_errmsg): it belongs to the last failing call on
 *   that model, so a program that shares a model between threads should not rely on
 *   it; the status code of each call is always exact.
 * - pi_model_close must not race with any other call on the same model.
 * - The library keeps no mutable process-global state: no global initialisation,
 *   no global log hook, no environment variables.
 *
 * ---------------------------------------------------------------------------------
 * Error model
 * ---------------------------------------------------------------------------------
 * Every fallible call returns an int status: PI_OK (0) on success, a negative
 * PI_ERR_* value on failure. The values are fixed forever. Objects are returned through
 * an out-pointer that is set to NULL on failure. The library never prints, never
 * exits and never aborts on bad input, bad files, or resource exhaustion.
 *
 * Calls that fill a caller buffer take (buf, cap), always NUL-terminate when cap > 0,
 * and return the full length the text needs (excluding the NUL), so a caller can size
 * the buffer and call again; they return a negative status on failure.
 *
 * Ownership phrases used below:
 *   "borrowed for the call"        the library does not keep the pointer;
 *   "borrowed until <event>"       the pointer stays valid until the event;
 *   "ownership transfers to ..."   the receiver must release it.
 */
#ifndef POWERINFER_H
#define POWERINFER_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && !defined(PI_STATIC)
#  if defined(PI_BUILDING_LIBRARY)
#    define PI_API __declspec(dllexport)
#  else
#    define PI_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && defined(PI_BUILDING_LIBRARY)
#  define PI_API __attribute__((visibility("default")))
#else
#  define PI_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* =================================================================================
 * Versions
 * ================================================================================= */

/* Product version of this header. Meson reads these lines; keep their form. */
#define PI_VERSION_MAJOR 0
#define PI_VERSION_MINOR 1
#define PI_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH */
#define PI_VERSION_NUMBER (PI_VERSION_MAJOR * 10000 + PI_VERSION_MINOR * 100 + PI_VERSION_PATCH)
/* Binary interface version; equals the shared library's soversion. */
#define PI_ABI_VERSION 1

/* Product version of the library actually loaded, as PI_VERSION_NUMBER.
 * A program may compare it with the macro at start-up to detect a mismatched library.
 * Since: 0.1 */
PI_API unsigned pi_version(void);

/* The same as "MAJOR.MINOR.PATCH"; static storage, never NULL. Since: 0.1 */
PI_API const char *pi_version_string(void);

/* ABI version of the library actually loaded; compare with PI_ABI_VERSION.
 * Since: 0.1 */
PI_API unsigned pi_abi_version(void);

/* =================================================================================
 * Status codes (values pinned forever)
 * ================================================================================= */
enum {
    PI_OK = 0,
    PI_ERR_INVALID_ARG = -1, /* a NULL or out-of-range argument, bad struct_size      */
    PI_ERR_NOMEM = -2,       /* an allocation failed                                  */
    PI_ERR_IO = -3,          /* a file could not be opened, mapped, read or written   */
    PI_ERR_FORMAT = -4,      /* a file is malformed or inconsistent                   */
    PI_ERR_UNSUPPORTED = -5, /* valid input this build cannot handle (architecture,   */
                             /* tensor type, feature)                                 */
    PI_ERR_ABORTED = -6,     /* a callback asked to stop                              */
    PI_ERR_NOT_FOUND = -7,   /* no such key, tensor or item                           */
    PI_ERR_TYPE = -8,        /* the item exists but has another type                  */
    PI_ERR_RANGE = -9,       /* an index is out of range, or a value does not fit     */
    PI_ERR_INTERNAL = -10,   /* a bug in the library; please report it                */
    PI_ERR_NUMERIC = -11     /* a computation gave NaN or infinity (the message says  */
                             /* where); Since: 0.1                                    */
};

/* A short static English description of a status ("invalid argument", ...).
 * Unknown values give "unknown status". Never NULL. Since: 0.1 */
PI_API const char *pi_status_str(int status);

/* =================================================================================
 * Logging
 * ================================================================================= */
enum {
    PI_LOG_DEBUG = 0,
    PI_LOG_INFO = 1,
    PI_LOG_WARN = 2,
    PI_LOG_ERROR = 3
};

/* A log sink. `msg` is one complete, formatted line without a trailing newline,
 * borrowed for the call. Called on the thread that made the library call. */
typedef void (*pi_log_fn)(void *user, int level, const char *msg);

/* A progress sink for long calls. `fraction` grows from 0 to 1. Return 0 to go on,
 * anything else to stop the call, which then fails with PI_ERR_ABORTED. */
typedef int (*pi_progress_fn)(void *user, float fraction);

/* =================================================================================
 * Tensor element types
 *
 * The numeric values are those of the GGUF format (ggml type ids).
 * ================================================================================= */
enum {
    PI_TYPE_F32 = 0,
    PI_TYPE_F16 = 1,
    PI_TYPE_Q4_0 = 2,
    PI_TYPE_Q4_1 = 3,
    PI_TYPE_Q5_0 = 6,
    PI_TYPE_Q5_1 = 7,
    PI_TYPE_Q8_0 = 8,
    PI_TYPE_Q8_1 = 9,
    PI_TYPE_Q2_K = 10,
    PI_TYPE_Q3_K = 11,
    PI_TYPE_Q4_K = 12,
    PI_TYPE_Q5_K = 13,
    PI_TYPE_Q6_K = 14,
    PI_TYPE_Q8_K = 15,
    PI_TYPE_I8 = 24,
    PI_TYPE_I16 = 25,
    PI_TYPE_I32 = 26,
    PI_TYPE_I64 = 27,
    PI_TYPE_F64 = 28,
    PI_TYPE_BF16 = 30,
    /* OCP microscaling FP4: blocks of 32 E2M1 values with one shared E8M0 exponent,
     * 17 bytes (gpt-oss's expert weights). Computed by the CPU and CUDA backends.
     * Since: 0.1 */
    PI_TYPE_MXFP4 = 39
    /* Files may carry further GGUF types; IQ4_NL (20) and IQ4_XS (23) are computed as
     * well, the others (IQ2*, IQ3*, IQ1*, TQ*, NVFP4, ...) are read and reported by id
     * and name but cannot be computed with. */
};

/* The GGUF name of a tensor type id ("F16", "Q4_0", ...), or NULL for an id the
 * library does not know. Static storage. Since: 0.1 */
PI_API const char *pi_type_name(int type);

/* =================================================================================
 * Metadata value types (the GGUF value type ids)
 * ================================================================================= */
enum {
    PI_META_U8 = 0,
    PI_META_I8 = 1,
    PI_META_U16 = 2,
    PI_META_I16 = 3,
    PI_META_U32 = 4,
    PI_META_I32 = 5,
    PI_META_F32 = 6,
    PI_META_BOOL = 7,
    PI_META_STRING = 8,
    PI_META_ARRAY = 9,
    PI_META_U64 = 10,
    PI_META_I64 = 11,
    PI_META_F64 = 12
};

/* =================================================================================
 * Model
 *
 * A model is a GGUF file mapped into memory (by default; or read into memory, see
 * pi_model_params.load_mode) and validated. Two magics are accepted: "GGUF" (an ordinary, dense model) and "PWRI" (a PowerInfer
 * sparse model: the same layout, with FFN predictors). Architectures (general.architecture):
 * llama (Llama 2/3/3.1, Mistral, SmolLM), bamboo, qwen2, qwen3, gemma2, gemma3, phi3,
 * starcoder2, falcon, as llama.cpp's converter writes them; PWRI files: llama, bamboo.
 * A file asking for a computation this build does not do is PI_ERR_UNSUPPORTED naming
 * the tensor or key (docs/formats.md).
 * ================================================================================= */
typedef struct pi_model pi_model;

typedef struct pi_model_params {
    /* sizeof(pi_model_params) as the caller compiled it. The library reads only the
     * fields this size covers; pi_model_default_params sets it. */
    uint32_t struct_size;

    /* Non-zero: check the container and read the metadata and tensor table, but do
     * not require a supported architecture. Such a model answers every metadata and
     * tensor query; the hyper-parameter queries return 0. Default 0. */
    int32_t metadata_only;

    /* Log sink; NULL (the default) means silence. Borrowed until the model is
     * closed: the model keeps logging through it. */
    pi_log_fn log_fn;
    void *log_user;
    /* Least severe level passed to log_fn (PI_LOG_*). Default PI_LOG_INFO. */
    int32_t log_level;

    /* Progress of pi_model_open; may abort it. NULL (the default) means none.
     * Borrowed for the call to pi_model_open. */
    pi_progress_fn progress_fn;
    void *progress_user;

    /* Optional caller buffer that receives the error message when pi_model_open
     * fails (there is no handle yet to ask). Borrowed for the call. Default NULL/0. */
    char *errbuf;
    size_t errbuf_cap;

    /* How the file's bytes reach memory, PI_LOAD_*. Default PI_LOAD_MMAP.
     *
     * PI_LOAD_MMAP maps the file (shared, read-only): opening is quick, pages are
     * read on first use and shared with every process mapping the same file, and
     * the system may drop them under memory pressure and read them again. The
     * mapping stays tied to the file on disk for the model's lifetime:
     *   - truncating it (`truncate`, or `cp`/`>` writing over it in place) makes
     *     the next access to a lost page raise SIGBUS, which kills the process;
     *   - writing into it in place makes the model silently use the new bytes,
     *     which no longer match what pi_model_open checked;
     *   - replacing it by rename (`mv new.gguf model.gguf`, what most download and
     *     copy tools do when told to) or deleting it is safe: the model keeps the
     *     old file's bytes until it is closed.
     * A private mapping (MAP_PRIVATE) would not help: it copies only pages the
     * process writes, so it shows in-place changes and faults on truncation too.
     *
     * PI_LOAD_READ reads the whole file into memory the model owns (allocated
     * through the model's allocator, aligned as a mapping is) during pi_model_open:
     * slower to open, and the memory is the process's own, but nothing that later
     * happens to the file affects the model. Use it when the file may change
     * while a process runs (a server whose model is updated in place), or on a
     * file system where mapping is slow or unsupported. A file that shrinks while
     * it is read is PI_ERR_IO.
     *
     * On Linux both modes ask for transparent huge pages (madvise MADV_HUGEPAGE;
     * they apply where /sys/kernel/mm/transparent_hugepage/enabled is "always" or
     * "madvise"): a decode step reads every weight, and 2 MiB pages spare a TLB miss
     * per 4 KiB. A read copy gets them whenever the system has them; a mapping only
     * where the file system caches the file in huge folios (ext4 and xfs on recent
     * kernels). Where a mapping gets none, PI_LOAD_READ can decode faster.
     * Since: 0.1 */
    int32_t load_mode;

    /* Non-zero: lock the model's bytes in RAM (mlock) so that they are never paged
     * out (with PI_LOAD_MMAP this also reads every page during pi_model_open). When
     * the system refuses (most often the locked-memory limit, `ulimit -l`), the
     * model opens anyway, unlocked, and a PI_LOG_WARN message through log_fn says
     * why. Default 0. Since: 0.1 */
    int32_t lock_memory;
} pi_model_params;

/* pi_model_params.load_mode. */
enum {
    PI_LOAD_MMAP = 0,
    PI_LOAD_READ = 1
};

/* Fill `params` with the defaults, including struct_size.
 * Returns PI_OK, or PI_ERR_INVALID_ARG if params is NULL. Since: 0.1 */
PI_API int pi_model_default_params(pi_model_params *params);

/* Open and validate the model file at `path`.
 *
 * path:   NUL-terminated file name; borrowed for the call.
 * params: NULL for the defaults, or filled by pi_model_default_params; borrowed for
 *         the call (except log_fn, see above).
 * out:    receives the model, or NULL on failure; ownership of the model transfers to
 *         the caller, who releases it with pi_model_close.
 *
 * Returns PI_OK; PI_ERR_INVALID_ARG (NULL path or out, params->struct_size smaller
 * than the first published pi_model_params, or a load_mode not listed);
 * PI_ERR_UNSUPPORTED (struct_size larger than this library knows and a field it does
 * not know is non-zero, or an architecture or tensor type this build cannot run, a
 * mixture-of-experts model, or a tensor the forward pass would not read, such as
 * rope_freqs.weight or a bias, named in the message (docs/formats.md lists the few
 * that may go unused), or a metadata key that would change the computation, such as
 * rope.scaling.attn_factor or final_logit_softcapping, at a value other than its
 * neutral one: set metadata_only to inspect such files); PI_ERR_IO (cannot open, map or read the file,
 * or it is not a regular file: a directory, FIFO or device is refused at once, never
 * waited on); PI_ERR_FORMAT (malformed container, missing or misshaped tensor, bad
 * hyper-parameter, a width such as n_embd, n_head x head dim or a predictor rank above
 * 2^24); PI_ERR_NOMEM (also: no memory for a PI_LOAD_READ copy);
 * PI_ERR_ABORTED (progress_fn returned non-zero).
 * On failure the message is written to params->errbuf when given.
 *
 * Split models (llama.cpp's gguf-split, gguf-py's split writer: NAME-00001-of-00003.gguf,
 * NAME-00002-of-00003.gguf, ...) are opened from their first part: the other parts are
 * found beside it by that naming, opened as the first (load_mode and lock_memory apply
 * to each), checked against it and joined into one model whose tensor table, n_params
 * and size_bytes cover every part; the metadata is the first part's. Opening a later
 * part is PI_ERR_INVALID_ARG (the message names the first part's file), as is a first
 * part renamed away from the split naming (its parts cannot be found); a missing or
 * unreadable part is PI_ERR_IO;
 * parts that disagree (split.no, split.count, split.tensors.count, magic, version, a
 * tensor in two parts) or a malformed part are PI_ERR_FORMAT; each message names the
 * part. docs/formats.md, "Split files".
 * Since: 0.1 */
PI_API int pi_model_open(const char *path, const pi_model_params *params, pi_model **out);

/* Release the model and unmap its file (or free its PI_LOAD_READ copy). NULL is a
 * no-op. Every object borrowing the model must have been destroyed first.
 * Since: 0.1 */
PI_API void pi_model_close(pi_model *model);

/* The message of the last failing call on this model, or "" if none failed.
 * Borrowed until the next call on the model. NULL model gives a static message.
 * Since: 0.1 */
PI_API const char *pi_model_errmsg(const pi_model *model);

/* ---- Description -------------------------------------------------------------- */

/* The value of general.architecture ("llama", "bamboo", ...); "" if absent.
 * Borrowed until the model is closed. NULL model gives "". Since: 0.1 */
PI_API const char *pi_model_arch(const pi_model *model);

/* 1 if the file is a PowerInfer sparse model (magic "PWRI"), 0 if not or if model is
 * NULL. Since: 0.1 */
PI_API int pi_model_is_sparse(const pi_model *model);

/* Hyper-parameters of an opened (not metadata_only) model; 0 for a NULL model or a
 * metadata_only one. n_ff is the FFN width (neurons per layer). Since: 0.1 */
PI_API int64_t pi_model_n_layer(const pi_model *model);
PI_API int64_t pi_model_n_embd(const pi_model *model);
PI_API int64_t pi_model_n_ff(const pi_model *model);
PI_API int64_t pi_model_n_head(const pi_model *model);
PI_API int64_t pi_model_n_head_kv(const pi_model *model);
PI_API int64_t pi_model_n_vocab(const pi_model *model);
PI_API int64_t pi_model_n_ctx_train(const pi_model *model);

/* Rank of the FFN activation predictor of layer `layer` (rows of fc1), for a sparse
 * model; 0 for a dense model, a NULL model or a layer out of range. Since: 0.1 */
PI_API int64_t pi_model_predictor_rank(const pi_model *model, int64_t layer);

/* The sparse threshold of a sparse model (key powerinfer.sparse_threshold, default 0):
 * a neuron is predicted active iff its predictor score >= threshold. 0 for a dense
 * model. Since: 0.1 */
PI_API float pi_model_sparse_threshold(const pi_model *model);

/* Number of weights (elements of all tensors), and bytes of tensor data in the file.
 * 0 for a NULL model. Since: 0.1 */
PI_API uint64_t pi_model_n_params(const pi_model *model);
PI_API uint64_t pi_model_size_bytes(const pi_model *model);

/* ---- Metadata ----------------------------------------------------------------- */

/* Number of metadata key/value pairs. 0 for a NULL model. Since: 0.1 */
PI_API int64_t pi_model_meta_count(const pi_model *model);

/* The key of pair `index` (0 <= index < count), or NULL if out of range.
 * Borrowed until the model is closed. Since: 0.1 */
PI_API const char *pi_model_meta_key(const pi_model *model, int64_t index);

/* Type of the value of `key` (borrowed for the call), as PI_META_*. For arrays,
 * *type is PI_META_ARRAY, *elem_type the element type and *n_elem the count; for
 * scalars *elem_type is -1 and *n_elem 1. Any out-pointer may be NULL.
 * Returns PI_OK, PI_ERR_NOT_FOUND or PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_model_meta_type(const pi_model *model, const char *key, int *type,
                              int *elem_type, uint64_t *n_elem);

/* The value of an integer or bool key as int64_t.
 * Returns PI_OK; PI_ERR_NOT_FOUND; PI_ERR_TYPE (not an integer or bool);
 * PI_ERR_RANGE (a U64 above INT64_MAX); PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_model_meta_int(const pi_model *model, const char *key, int64_t *out);

/* The value of a float key (F32 or F64) or an integer key, as double.
 * Returns PI_OK, PI_ERR_NOT_FOUND, PI_ERR_TYPE, PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_model_meta_float(const pi_model *model, const char *key, double *out);

/* Copy the value of a STRING key into buf (cap bytes, NUL-terminated, truncated if
 * short). Returns the string's full length in bytes, or PI_ERR_NOT_FOUND,
 * PI_ERR_TYPE, PI_ERR_INVALID_ARG (buf NULL with cap > 0). Strings are bytes from the
 * file; GGUF says UTF-8 but the library does not enforce it. Since: 0.1 */
PI_API int64_t pi_model_meta_str(const pi_model *model, const char *key, char *buf,
                                 size_t cap);

/* Element `index` of an array of integers/bools (as int64_t) or floats (as double).
 * Returns PI_OK, PI_ERR_NOT_FOUND, PI_ERR_TYPE (not an array of that kind),
 * PI_ERR_RANGE (index out of range, or U64 element above INT64_MAX),
 * PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_model_meta_arr_int(const pi_model *model, const char *key, uint64_t index,
                                 int64_t *out);
PI_API int pi_model_meta_arr_float(const pi_model *model, const char *key, uint64_t index,
                                   double *out);

/* Element `index` of an array of strings, copied as pi_model_meta_str does.
 * Returns its length, or PI_ERR_NOT_FOUND, PI_ERR_TYPE, PI_ERR_RANGE,
 * PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int64_t pi_model_meta_arr_str(const pi_model *model, const char *key,
                                     uint64_t index, char *buf, size_t cap);

/* The value of any key as printable text: numbers in decimal, strings as they are,
 * arrays as "[a, b, c, ...]" with at most `max_items` items shown followed by
 * "... (N items)" when cut (max_items 0 means a default of 16). Returns the full
 * length, or PI_ERR_NOT_FOUND, PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int64_t pi_model_meta_to_string(const pi_model *model, const char *key,
                                       uint32_t max_items, char *buf, size_t cap);

/* ---- Tensors ------------------------------------------------------------------ */

/* Number of tensors in the file; 0 for a NULL model. Since: 0.1 */
PI_API int64_t pi_model_n_tensors(const pi_model *model);

/* Index of the tensor called `name` (borrowed for the call) into *index.
 * Returns PI_OK, PI_ERR_NOT_FOUND, PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_model_tensor_find(const pi_model *model, const char *name, int64_t *index);

/* Name of tensor `index`, or NULL if out of range. Borrowed until the model is
 * closed. Since: 0.1 */
PI_API const char *pi_model_tensor_name(const pi_model *model, int64_t index);

/* Type id (PI_TYPE_* or another GGUF type id) of tensor `index`, or PI_ERR_RANGE /
 * PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_model_tensor_type(const pi_model *model, int64_t index);

/* Shape of tensor `index` in GGUF order (dims[0] is the contiguous dimension).
 * Writes the number of dimensions (1..4) to *n_dims and fills dims[0..3], setting
 * unused entries to 1. Returns PI_OK, PI_ERR_RANGE, PI_ERR_INVALID_ARG.
 * Since: 0.1 */
PI_API int pi_model_tensor_shape(const pi_model *model, int64_t index, int *n_dims,
                                 int64_t dims[4]);

/* Bytes of data of tensor `index` in the file, 0 if out of range. Since: 0.1 */
PI_API uint64_t pi_model_tensor_nbytes(const pi_model *model, int64_t index);

/* =================================================================================
 * Tokenizer
 *
 * The vocabulary comes from the model file: SentencePiece-style
 * (tokenizer.ggml.model = "llama", with byte fallback) and byte-level BPE ("gpt2", with
 * the pre-tokenizer named by tokenizer.ggml.pre: the names llama.cpp's converter
 * writes for the GPT-2, StarCoder/SmolLM, Llama 3, Phi-4 (dbrx), Qwen 2/3, Qwen 3.5
 * (with Qwen's NFC normalisation), Falcon and Mistral Tekken pre-tokenizers, listed in
 * docs/formats.md; another name
 * fails pi_model_open with PI_ERR_UNSUPPORTED naming it, since tokens would differ
 * from the model's own). A model without tokenizer metadata (no tokenizer.ggml.model),
 * or opened with metadata_only, opens fine; the calls below then fail with
 * PI_ERR_UNSUPPORTED.
 * Tokenizer metadata that is present but malformed (wrong array types or lengths,
 * out-of-range special token ids, bad byte tokens, merges that are not "a b" of
 * known tokens) fails pi_model_open with PI_ERR_FORMAT naming the key; another
 * tokenizer.ggml.model ("bert", "t5", ...) fails it with PI_ERR_UNSUPPORTED.
 * docs/formats.md lists the rules. Ids agree with Hugging Face's tokenizers for the
 * same vocabulary (SentencePiece's for "llama" vocabularies).
 * All tokenizer calls are read-only on the model and thread-safe; their working
 * memory comes from the model's allocator.
 * ================================================================================= */

/* Flags of pi_tokenize. */
enum {
    /* Add the model's BOS (and EOS) tokens as its metadata asks
     * (tokenizer.ggml.add_bos_token / add_eos_token; SentencePiece models add BOS by
     * default). */
    PI_TOKENIZE_ADD_SPECIAL = 1u << 0,
    /* Recognise the text of control tokens ("<|im_start|>") in the input and emit
     * them as single tokens (scanning left to right, the longest token at each
     * position). Without it they are tokenized as text. User-defined tokens (token
     * type 4: Gemma's runs of spaces and newlines, added tokens that are not special)
     * are recognised in every text, as Hugging Face and sentencepiece do. */
    PI_TOKENIZE_PARSE_SPECIAL = 1u << 1
};

/* Tokenize `len` bytes of UTF-8 `text` (borrowed for the call; NULL allowed when len
 * is 0) into tokens[0..cap). Returns the number of tokens the text needs, which may
 * exceed cap (then only the first cap are written; call again with a larger array),
 * or PI_ERR_INVALID_ARG (also for len above 256 MiB or unknown flags),
 * PI_ERR_UNSUPPORTED (the model has no tokenizer), PI_ERR_NOMEM, PI_ERR_RANGE (on
 * this text a byte-level BPE pre-tokenizer regex needs more than PCRE2's match,
 * depth or heap limit allows one match: the limits that bound a hostile text's
 * cost). Invalid UTF-8 is
 * tokenized byte by byte as the model's byte tokens allow; a byte the vocabulary has
 * no token for is dropped (byte-level BPE, as Hugging Face does) or becomes the
 * unknown token (SentencePiece without byte tokens). Since: 0.1 */
PI_API int64_t pi_tokenize(const pi_model *model, const char *text, size_t len,
                           int32_t *tokens, size_t cap, uint32_t flags);

/* Flags of pi_token_to_piece. */
enum {
    /* Render control tokens (BOS, EOS, "<|im_end|>") as their text; by default they
     * give an empty piece. */
    PI_PIECE_SPECIAL = 1u << 0
};

/* The raw bytes that `token` stands for (a byte token gives its byte, so a piece can
 * be part of a UTF-8 sequence), copied into buf (cap bytes, NUL-terminated when
 * cap > 0). SentencePiece pieces read U+2581 as a space, so the first piece of a text
 * usually starts with the space that tokenizing added (add_space_prefix); byte-level
 * BPE pieces are the original bytes. User-defined tokens give their text; control and
 * unknown tokens give "" without PI_PIECE_SPECIAL. Returns the full length,
 * PI_ERR_RANGE for an id outside the vocabulary, PI_ERR_INVALID_ARG,
 * PI_ERR_UNSUPPORTED. Since: 0.1 */
PI_API int64_t pi_token_to_piece(const pi_model *model, int32_t token, char *buf, size_t cap,
                                 uint32_t flags);

/* Special token ids, or -1 when the model has none. Since: 0.1 */
PI_API int32_t pi_model_token_bos(const pi_model *model);
PI_API int32_t pi_model_token_eos(const pi_model *model);

/* 1 if generation should stop at `token` (EOS, EOT, <|im_end|>, <|eot_id|>, and the
 * other end-of-generation tokens the vocabulary marks), else 0. Since: 0.1 */
PI_API int pi_model_token_is_eog(const pi_model *model, int32_t token);

/* The model's chat template (tokenizer.chat_template) copied as pi_model_meta_str
 * does; PI_ERR_NOT_FOUND when the file has none. Since: 0.1 */
PI_API int64_t pi_model_chat_template(const pi_model *model, char *buf, size_t cap);

/* A text sink: `len` bytes of text (not NUL-terminated, never a partial UTF-8
 * sequence), borrowed for the call. Return 0 to go on; non-zero makes the calling
 * function return PI_ERR_ABORTED. */
typedef int (*pi_text_fn)(void *user, const char *text, size_t len);

/* A streaming detokenizer: turns generated tokens into text without ever splitting a
 * UTF-8 code point between two calls of the sink (bytes of an incomplete sequence are
 * held back until it completes). The sink only ever sees well-formed UTF-8: bytes that
 * cannot be part of a well-formed sequence become U+FFFD, one per maximal ill-formed
 * subpart (as Unicode recommends). Borrows the model, which must outlive it; one
 * thread at a time. */
typedef struct pi_detok pi_detok;

/* Create a detokenizer for `model` (borrowed until pi_detok_destroy). `flags` are
 * PI_PIECE_* flags. Returns PI_OK, PI_ERR_INVALID_ARG, PI_ERR_NOMEM,
 * PI_ERR_UNSUPPORTED. Since: 0.1 */
PI_API int pi_detok_create(const pi_model *model, uint32_t flags, pi_detok **out);

/* Feed one token; complete text goes to fn (borrowed for the call), usually in one
 * call (a piece longer than 256 bytes may take several). Returns PI_OK, PI_ERR_RANGE
 * (token outside the vocabulary; nothing changes), PI_ERR_ABORTED (fn asked to stop;
 * the text was delivered; if that happened before the end of a long piece, the rest
 * of it is dropped), PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_detok_push(pi_detok *detok, int32_t token, pi_text_fn fn, void *user);

/* Deliver held-back bytes of an unfinished sequence (as one U+FFFD, since they can
 * no longer complete) and reset. Returns PI_OK, PI_ERR_ABORTED, PI_ERR_INVALID_ARG.
 * Since: 0.1 */
PI_API int pi_detok_flush(pi_detok *detok, pi_text_fn fn, void *user);

/* NULL is a no-op. Since: 0.1 */
PI_API void pi_detok_destroy(pi_detok *detok);

/* =================================================================================
 * Chat prompts
 * ================================================================================= */

/* One message of a conversation. Both strings are NUL-terminated and borrowed for
 * the call that receives them. role is "system", "user" or "assistant". */
typedef struct pi_chat_message {
    const char *role;
    const char *content;
} pi_chat_message;

/* Chat formats pi_chat_apply knows. */
enum {
    /* the model's tokenizer.chat_template executed (as PI_CHAT_JINJA) when it parses,
     * else the built-in format its markers name */
    PI_CHAT_AUTO = 0,
    PI_CHAT_CHATML = 1, /* <|im_start|>role\ncontent<|im_end|>\n (Qwen, SmolLM, ...) */
    PI_CHAT_LLAMA2 = 2, /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST] answer </s> */
    /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>; Llama 3.1+
     * templates open with their "Cutting Knowledge Date" system turn (with the
     * template's own date: the library has no clock) */
    PI_CHAT_LLAMA3 = 3,
    /* <start_of_turn>user\n[system\n\n]content<end_of_turn>\n<start_of_turn>model\n
     * (Gemma 2, 3; contents trimmed). Since: 0.1 */
    PI_CHAT_GEMMA = 4,
    /* <|system|>\n...<|end|>\n<|user|>\n...<|end|>\n<|assistant|>\n (Phi-3, 3.5).
     * Since: 0.1 */
    PI_CHAT_PHI3 = 5,
    /* Mistral's [INST] generations (answers end with the EOS text). v1, 7B v0.2:
     * " [INST] [system\n\n]user [/INST] answer</s>"; v3, 7B v0.3: "[INST] user[/INST]
     * answer</s>"; v3-tekken, Nemo: "[INST]user[/INST]answer</s>" (in v3 and
     * v3-tekken a system message opens the last user turn); v7, Small 3:
     * "[SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]user[/INST]answer</s>". Since: 0.1 */
    PI_CHAT_MISTRAL_V1 = 6,
    PI_CHAT_MISTRAL_V3 = 7,
    PI_CHAT_MISTRAL_V3_TEKKEN = 8,
    PI_CHAT_MISTRAL_V7 = 9,
    /* System: ...\nUser: ...\nFalcon: ...\nFalcon: (Falcon-instruct). Since: 0.1 */
    PI_CHAT_FALCON = 10,
    /* The model's own tokenizer.chat_template, executed by the library's Jinja
     * interpreter (see pi_chat_template_create), with messages as {role, content},
     * add_generation_prompt, the model's bos_token / eos_token and no clock
     * (strftime_now undefined). Since: 0.1 */
    PI_CHAT_JINJA = 11
};

/* The chat format of the model's template: the built-in family its marker strings
 * name (PI_CHAT_CHATML ... PI_CHAT_FALCON), else PI_CHAT_JINJA when the template is of
 * another style that the interpreter parses; PI_ERR_NOT_FOUND (no template),
 * PI_ERR_UNSUPPORTED (a template the interpreter cannot parse), PI_ERR_NOMEM,
 * PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_model_chat_format(const pi_model *model);

/* Render `n` messages (borrowed for the call) as a prompt in `format` (PI_CHAT_*),
 * followed by the opening of an assistant turn when add_assistant is non-zero.
 * PI_CHAT_AUTO and PI_CHAT_JINJA execute the model's chat template (as
 * pi_chat_template_render with no clock, so the result is deterministic). When it does
 * not parse, or fails to render (a template that needs strftime_now, or refuses the
 * conversation with raise_exception: roles not alternating, a system message it does
 * not take), AUTO falls back to the built-in format of pi_model_chat_format's family,
 * and fails (with the render's status, PI_ERR_FORMAT for raise_exception) when the
 * template is of no known family; JINJA fails. Use the
 * pi_chat_template_* functions to get a template's message. The built-in formats write what
 * their family's template writes: the [INST] formats ignore add_assistant (a final
 * user turn asks for the answer); Phi-3 without it ends with the EOS text; ChatML
 * templates that insert a default system message when the conversation has none get
 * the same default. A BOS token that the template writes first is not in the text
 * when the tokenizer adds BOS: tokenize with PI_TOKENIZE_ADD_SPECIAL, which puts it
 * back (a BOS the tokenizer does not add, as SmolLM2's <|im_start|>, stays). The text
 * contains special-token text: tokenize it with PI_TOKENIZE_PARSE_SPECIAL. Copies into
 * buf as pi_model_meta_str does and returns the full length, or PI_ERR_INVALID_ARG
 * (NULL message fields, a role other than system/user/assistant, an unknown format),
 * PI_ERR_NOT_FOUND (AUTO/JINJA and no template), PI_ERR_UNSUPPORTED (a template that
 * neither parses nor is recognised), PI_ERR_FORMAT, PI_ERR_RANGE (a template past the
 * interpreter's limits), PI_ERR_NOMEM. Since: 0.1 */
PI_API int64_t pi_chat_apply(const pi_model *model, int format, const pi_chat_message *msgs,
                             size_t n, int add_assistant, char *buf, size_t cap);

/* A parsed chat template: a Jinja template executed by the library's interpreter, as
 * Hugging Face transformers' apply_chat_template executes it (jinja2's sandbox with
 * trim_blocks, lstrip_blocks and loop controls; |tojson as Python's json.dumps with
 * ensure_ascii=False; globals raise_exception, strftime_now, namespace, dict, range).
 * Supported: {{ }}, {% %}, {# #}, whitespace control, raw; if/elif/else, for (else,
 * loop.*, unpacking, `if` filter), set (namespaces, block set), macro, filter blocks,
 * break/continue, generation; jinja2's expressions, filters and tests that chat
 * templates use, and the methods of str, dict and list that do not modify them.
 * Immutable once created: pi_chat_template_render may run on many threads at once on
 * one template. Templates come from model files, so parsing and rendering are bounded
 * (source size, nesting, memory, output, loop iterations, macro recursion): a template
 * past a bound fails with PI_ERR_RANGE and a message, it does not hang or crash. */
typedef struct pi_chat_template pi_chat_template;

/* Parse `source` (a NUL-terminated template, borrowed for the call), or the model's
 * tokenizer.chat_template when source is NULL. `model` (borrowed for the call; may be
 * NULL when source is given) provides bos_token and eos_token, the texts of its BOS and
 * EOS tokens ("" for one it lacks; without a model they are undefined unless the data
 * sets them), copied into the template, which does not keep the model. *out receives the
 * template (ownership transfers to the caller: pi_chat_template_destroy), NULL on
 * failure; errbuf (may be NULL) receives the reason, NUL-terminated within errbuf_cap.
 * Returns PI_OK, PI_ERR_FORMAT (a syntax error: "line L, column C: expected ...,
 * found ...", an unknown tag, filter or test, invalid UTF-8), PI_ERR_RANGE (past a
 * parse limit), PI_ERR_NOT_FOUND (source NULL and the model has no template),
 * PI_ERR_INVALID_ARG (out NULL, or both model and source NULL), PI_ERR_NOMEM.
 * Since: 0.1 */
PI_API int pi_chat_template_create(const pi_model *model, const char *source,
                                   pi_chat_template **out, char *errbuf, size_t errbuf_cap);

/* Render `t` with the variables in data_json (borrowed for the call): a JSON object
 * whose members are the template's variables (messages, tools, add_generation_prompt,
 * documents, enable_thinking, ...: any JSON, passed as it is, so content-part arrays,
 * tool_calls and other fields reach the template); NULL is {}. Added where data_json
 * does not set them: bos_token and eos_token (the model's, when create had one), tools
 * and documents as none and add_generation_prompt as false (as apply_chat_template
 * always passes them). `now`: seconds since the Unix epoch for strftime_now (rendered
 * in UTC); now < 0 leaves strftime_now undefined, so templates that test `strftime_now
 * is defined` use their own fallback date and the result is deterministic. The text
 * is copied into buf as pi_model_meta_str does; returns its full length, or
 * PI_ERR_FORMAT (what jinja2 raises while rendering: raise_exception's message as the
 * template gives it, or "line L: " and a type error, an undefined value used, an
 * attribute the sandbox refuses), PI_ERR_INVALID_ARG (t NULL, buf NULL with cap > 0,
 * data_json not a JSON object: malformed, invalid UTF-8, a lone surrogate escape,
 * nested deeper than 128), PI_ERR_RANGE (past a render limit: memory, output, steps,
 * recursion; or an integer in data_json outside 64 bits), PI_ERR_NOMEM; errbuf (may be
 * NULL) receives the message. Safe to call from many threads on one template.
 * Since: 0.1 */
PI_API int64_t pi_chat_template_render(const pi_chat_template *t, const char *data_json,
                                       int64_t now, char *buf, size_t cap, char *errbuf,
                                       size_t errbuf_cap);

/* NULL is a no-op. Since: 0.1 */
PI_API void pi_chat_template_destroy(pi_chat_template *t);

/* =================================================================================
 * Context: one sequence being decoded
 *
 * A context borrows its model (which must outlive it), owns its KV cache, scratch
 * memory and worker threads, and is used by one thread at a time. Many contexts may
 * share one model and run concurrently on different threads.
 * ================================================================================= */
typedef struct pi_ctx pi_ctx;

/* Polled between layers during pi_ctx_decode; return non-zero to stop the call, which
 * then fails with PI_ERR_ABORTED and leaves the context as it was. */
typedef int (*pi_abort_fn)(void *user);

typedef struct pi_ctx_params {
    uint32_t struct_size;  /* set by pi_ctx_default_params */
    /* Positions the context can hold (prompt + generated). 0 (default): the model's
     * training context, at most 4096. Memory: 2 * n_layer * n_ctx * n_head_kv *
     * head_dim * 2 bytes of KV cache (F16), touched only as positions are used. */
    uint32_t n_ctx;
    /* Worker threads including the caller. 0 (default): the processors available. */
    uint32_t n_threads;
    /* Most tokens one internal prefill step processes at once; longer inputs are
     * split. 0 (default): 256. Scratch memory grows with it. */
    uint32_t n_batch;
    /* See pi_abort_fn; NULL (default) for none. Borrowed until the context is
     * destroyed. */
    pi_abort_fn abort_fn;
    void *abort_user;
    /* Non-zero: products with quantized weights (Q4_0, Q8_0, the K-quants, ...) use
     * float activations instead of quantizing them to 8 bits for integer dot
     * products (and a sparse FFN's Q4_0 down projection adds its rows in float instead
     * of with 8-bit coefficients). Slower (prefill several times), but closer to a
     * float reference: use it to check a model against another implementation.
     * Default 0. */
    uint32_t f32_activations;
    /* How the FFN of a PowerInfer (PWRI) model is computed, PI_SPARSE_*. Default
     * PI_SPARSE_AUTO: predictor-driven sparse for PowerInfer files and for
     * pi_model_sparsify's files with trained predictors (tools/train_predictor.py),
     * thresholded for pi_model_sparsify's files without, dense otherwise. PREDICTOR
     * needs predictors, ORACLE a PowerInfer file, THRESHOLD a file with ffn_down_t
     * (PI_ERR_UNSUPPORTED otherwise); PI_SPARSE_DENSE every model accepts. Since: 0.1 */
    uint32_t sparse_mode;
    /* Non-zero: use sparse_threshold instead of the file's powerinfer.sparse_threshold
     * (neuron r is computed iff its predictor score >= the threshold). Since: 0.1 */
    uint32_t sparse_threshold_set;
    float sparse_threshold;
    /* Activation statistics and telemetry, PI_STATS_* (see pi_ctx_stats). Default
     * PI_STATS_OFF. Since: 0.1 */
    uint32_t stats;
    /* Optional caller buffer that receives the error message when pi_ctx_create
     * fails (there is no context yet to ask). Borrowed for the call. Since: 0.1 */
    char *errbuf;
    size_t errbuf_cap;
    /* Hybrid execution (docs/design.md, "Hybrid execution"): a planner places
     * attention, predictors, norms, the output projection, the KV cache and the
     * hottest FFN neurons on a device within device_budget bytes; the CPU computes
     * the rest, and each layer adds the two parts. PI_DEVICE_NONE (default): CPU
     * only. PI_DEVICE_GPU: the CUDA or HIP backend compiled in (PI_ERR_UNSUPPORTED
     * when the library has none or no device answers). PI_DEVICE_CPU: a second CPU
     * backend with its own memory acting as the device (tests, and to check a plan
     * without a GPU). Since: 0.1 */
    uint32_t device;
    /* Ordinal of the GPU. Default 0. Since: 0.1 */
    uint32_t device_index;
    /* Bytes the plan may place on the device, scratch buffers included.
     * PI_DEVICE_BUDGET_AUTO (the default): the device's free memory minus 256 MiB
     * (PI_DEVICE_CPU: everything). 0 places nothing. Since: 0.1 */
    uint64_t device_budget;
    /* Activation statistics that rank neurons for the planner (pi_stats_load, or
     * pi_ctx_stats of a profiling run): active counts, or predicted counts when a
     * layer has none. NULL (default): all neurons equally hot, so lower ids first.
     * Borrowed for the call. Since: 0.1 */
    const struct pi_stats *plan_stats;
    /* A GPU index file (PowerInfer's <model>.generated.gpuidx, or one written by
     * pi_plan_save) and what to do with it, PI_PLAN_FILE_*. Borrowed for the call.
     * NULL (default): plan in memory. Since: 0.1 */
    const char *plan_path;
    uint32_t plan_file;
    uint32_t reserved0; /* zero (fills what would be padding, see ABI.md) */
    /* Sequences the context holds (independent conversations sharing the weights and
     * decoded together by pi_ctx_decode_batch), ids 0 .. n_seq_max - 1, each up to
     * n_ctx positions. Default 1; at most 256. The KV cache holds n_seq_max * n_ctx
     * positions (memory is touched only as positions are used). Since: 0.1 */
    uint32_t n_seq_max;
    /* Where decode looks for non-finite values (NaN, infinity), PI_CHECK_*. The
     * logits of every entry that asks for them are always checked: a non-finite logit
     * fails the decode with PI_ERR_NUMERIC (the context unchanged) and a message
     * naming the entry. PI_CHECK_LAYERS also checks the residual stream after each
     * layer's attention and FFN block, so the message names the first layer and part
     * that produced one (a debugging aid: it reads every activation once more and
     * waits for a device after each block). Default PI_CHECK_LOGITS. Since: 0.1 */
    uint32_t check_numerics;
    /* Final hidden states for embeddings, PI_EMBD_* (see "Embeddings" below). Default
     * PI_EMBD_OFF. Since: 0.1 */
    uint32_t embeddings;
    uint32_t reserved2; /* zero (fills what would be padding, see ABI.md) */
    /* PI_SPARSE_THRESHOLD: per-layer thresholds t_l on |act(gate . x)| that replace the
     * file's (powerinfer.sparsify.thresholds): NULL (default) keeps the file's; else
     * n_sparse_thresholds floats, exactly the model's n_layer (PI_ERR_INVALID_ARG
     * otherwise; each finite; a negative one keeps every neuron of its layer).
     * Borrowed for the call. Since: 0.1 */
    const float *sparse_thresholds;
    uint64_t n_sparse_thresholds;
    /* PI_SPARSE_THRESHOLD: every threshold used (the file's or the override) is
     * multiplied by this (finite, >= 0). Default 1. Since: 0.1 */
    float sparse_threshold_scale;
    /* Non-zero (with stats != PI_STATS_OFF): also collect, per layer, the histogram
     * of |act(gate . x)| (PI_HIST_GATE, or any non-zero value but PI_HIST_INTER) or of
     * the FFN's intermediate |act(gate . x) * (up . x)| (PI_HIST_INTER, the input of
     * the down projection: TEAL-style thresholds) over every neuron and token
     * (pi_stats_gate_histogram, pi_stats_gate_quantile: the calibration of
     * PI_SPARSE_THRESHOLD), in PI_SPARSE_DENSE mode (PI_HIST_GATE: also in
     * PI_SPARSE_THRESHOLD mode of a "cats" file; not counted in the others). Gated
     * FFNs (a layer's experts counted together: every chosen expert's neurons for
     * every token routed to it) or plain ones; experts need a SiLU, GELU or ReLU gate
     * (not gpt-oss's); PI_ERR_UNSUPPORTED otherwise. CPU-only contexts. Default 0.
     * Since: 0.1 */
    uint32_t gate_histogram;
    /* How a device step is submitted, PI_GRAPHS_*. PI_GRAPHS_AUTO (default): where
     * the device backend has graphs (CUDA; not HIP) and no layer splits its work
     * between the device and the CPU (so the CPU never waits on device work it could
     * overlap), the device ops of a step of up to PI_GRAPHS_MAX_TOKENS tokens between
     * two transfers are recorded once and submitted as one CUDA graph, updated in
     * place at each later step; the results are the same bits as op by op. Not with
     * stats, PI_CHECK_LAYERS or a device that failed to run one (the step is then
     * run again op by op, and graphs stay off for that context). PI_GRAPHS_OFF: op
     * by op. Since: 0.1 */
    uint32_t device_graphs;
    /* How the KV cache stores keys and values, PI_KV_TYPE_*. PI_KV_TYPE_F16 (0, the
     * default): binary16. PI_KV_TYPE_Q8_0: GGUF's Q8_0 blocks (32 values share an F16
     * scale), 34 bytes per 32 values instead of 64, so about half the memory; the
     * logits move by the blocks' rounding (docs/performance.md has its perplexity
     * cost); at 4096 positions a 1B model decoded at about binary16's speed (0.96x)
     * and its prompt ran at 0.7-0.9x on a 2-core AVX2 CPU. PI_KV_TYPE_Q4_0: GGUF's Q4_0
     * blocks (18 bytes per 32 values: 28 % of binary16), for long contexts where memory
     * matters more than the larger rounding, its keys stored rotated by a Hadamard
     * transform per head (queries rotated alike: the same scores; docs/design.md);
     * docs/performance.md has both types' perplexity cost and speed. The quantized types need head dimensions that are
     * multiples of 32 and a CPU-only
     * context (PI_ERR_UNSUPPORTED otherwise); states (pi_ctx_state_save) hold the
     * cache as stored and load only into a context with the same kv_type. Since: 0.1 */
    uint32_t kv_type;
    /* How the KV cache stores values where they differ from keys: 0 (the default):
     * as kv_type; PI_KV_TYPE_Q8_0 or PI_KV_TYPE_Q4_0: values in that type, keys in
     * kv_type (PI_KV_TYPE_F16 too). Keys are the more sensitive half, so the useful
     * pairs store values smaller than keys: on SmolLM2-135M, Q4_0 values with binary16
     * keys cost 0.6 % perplexity (64 % of binary16's memory), with Q8_0 keys 2.3 %
     * (41 %, decoding at binary16's speed at depth 2048), where Q4_0 keys and values
     * cost 6 % (docs/performance.md). Quantized keys with binary16 values cannot be
     * asked for. The conditions of a quantized kv_type apply to a quantized kv_type_v
     * (CPU-only, head dimensions multiples of 32), and a state loads only into a
     * context with the same keys' and values' types. Since: 0.1 */
    uint32_t kv_type_v;
    uint32_t reserved3; /* zero (fills what would be padding, see ABI.md) */
} pi_ctx_params;

/* pi_ctx_params.gate_histogram. */
enum {
    PI_HIST_GATE = 1, /* |act(gate . x)|: CATS-style thresholds */
    PI_HIST_INTER = 2 /* |act(gate . x) * (up . x)|: TEAL-style thresholds */
};

/* pi_ctx_params.kv_type. */
enum {
    PI_KV_TYPE_F16 = 0,
    PI_KV_TYPE_Q8_0 = 1,
    PI_KV_TYPE_Q4_0 = 2
};

/* pi_ctx_params.device_graphs. */
enum {
    PI_GRAPHS_AUTO = 0,
    PI_GRAPHS_OFF = 1
};
/* The largest step (tokens) submitted as graphs: decode steps and small batches,
 * whose ops are too short for launch overhead to hide. */
#define PI_GRAPHS_MAX_TOKENS 8

/* What pi_ctx_sparse_threshold_source reports. */
enum {
    PI_THRESHOLDS_NONE = 0,   /* not PI_SPARSE_THRESHOLD mode */
    PI_THRESHOLDS_FILE = 1,   /* the file's powerinfer.sparsify.thresholds */
    PI_THRESHOLDS_PARAMS = 2, /* pi_ctx_params.sparse_thresholds */
    PI_THRESHOLDS_ZERO = 3    /* a file without thresholds (a PowerInfer file): all 0 */
};

/* pi_ctx_params.embeddings:
 * - OFF: no hidden states are kept.
 * - ON: every decode keeps the final hidden state of each of its tokens
 *   (pi_ctx_embedding) and adds them to its sequence's pooled sums
 *   (pi_ctx_embedding_pooled); logits as usual. Costs the output norm of every token
 *   (not only of those asking for logits) and memory: n_embd floats per entry of the
 *   last decode, and 16 * n_embd bytes per sequence for the pooled sums.
 * - ONLY: as ON, and no logits are computed at all (the LM head is skipped: the entries'
 *   `logits` flags are ignored, pi_ctx_logits and pi_ctx_batch_logits return NULL). */
enum {
    PI_EMBD_OFF = 0,
    PI_EMBD_ON = 1,
    PI_EMBD_ONLY = 2
};

/* pi_ctx_params.check_numerics. */
enum {
    PI_CHECK_LOGITS = 0,
    PI_CHECK_LAYERS = 1
};

/* pi_ctx_params.device. */
enum {
    PI_DEVICE_NONE = 0,
    PI_DEVICE_GPU = 1,
    PI_DEVICE_CPU = 2
};

/* pi_ctx_params.device_budget. */
#define PI_DEVICE_BUDGET_AUTO UINT64_MAX

/* pi_ctx_params.plan_file:
 * - READ: take the FFN neurons from plan_path (the dense parts are placed by the
 *   rule). The file must have the model's shape and fit: its split.vram_capacity and
 *   its neurons' bytes must not exceed what the budget leaves after the dense parts;
 *   a file written by pi_plan_save must also name this model. Otherwise
 *   PI_ERR_FORMAT (malformed) or PI_ERR_RANGE (too big, another model), with a message.
 * - CACHE: use plan_path when it was written by pi_plan_save for this model, these
 *   statistics and this budget; otherwise plan and (re)write it. A file that cannot
 *   be written is not an error (pi_plan_source says what happened).
 * - WRITE: plan, then write plan_path (PI_ERR_IO when it cannot be written). */
enum {
    PI_PLAN_FILE_READ = 1,
    PI_PLAN_FILE_CACHE = 2,
    PI_PLAN_FILE_WRITE = 3
};

/* pi_ctx_params.sparse_mode. Every mode gives the same result for a neuron it
 * computes; they differ in which neurons are computed:
 * - PREDICTOR: per layer the predictor score = fc2 . relu(fc1 . h), h the residual
 *   stream after attention (before ffn_norm); only neurons with score >= threshold
 *   are computed (gate/up as row dot products, down as a sum over the active rows of
 *   ffn_down_t skipping zero activations). What PowerInfer computes. A sparsified file
 *   with predictors computes act(gate . xn) * (up . xn) with its own activation (SiLU,
 *   GELU) for every predicted neuron: the dense FFN with the others set to 0 (its
 *   thresholds then only say which neurons PI_STATS_DIAGNOSTIC counts as active).
 * - DENSE: every neuron (predictors ignored). Same result as PREDICTOR with a
 *   predictor that marks every neuron.
 * - ORACLE: the gate is computed for every neuron and exactly the neurons whose
 *   activation is non-zero are used: the same logits as DENSE up to rounding, at the
 *   cost of a full gate projection; the upper bound of any predictor's quality.
 * - THRESHOLD (training-free, CATS-style; files with ffn_down_t: pi_model_sparsify's
 *   and PowerInfer's): the gate is computed for every neuron, a = act(gate . xn), and
 *   token t uses the neurons with |a| > t_l, the layer's threshold (the file's
 *   powerinfer.sparsify.thresholds, or pi_ctx_params.sparse_thresholds, times
 *   sparse_threshold_scale; pi_ctx_sparse_threshold_source says which); up and down
 *   only for those. The result equals the dense FFN with the other neurons' a set to
 *   0, up to rounding; thresholds below 0 give the dense result. A file sparsified
 *   with PI_SPARSIFY_TEAL (powerinfer.sparsify.method "teal") thresholds the FFN's
 *   intermediate instead: gate and up for every neuron, m = act(gate . xn) * (up . xn),
 *   and the down projection only for the neurons with |m| > t_l (the dense FFN with the
 *   other neurons' m set to 0). The default (AUTO) for pi_model_sparsify's files
 *   without predictors. With a device, the planner places such a file's neurons like a
 *   PowerInfer file's and the device thresholds its own.
 * A prompt (many tokens in one step) is computed on the union of its tokens' active
 * sets, each token still using only its own neurons (docs/design.md). */
enum {
    PI_SPARSE_AUTO = 0,
    PI_SPARSE_DENSE = 1,
    PI_SPARSE_PREDICTOR = 2,
    PI_SPARSE_ORACLE = 3,
    PI_SPARSE_THRESHOLD = 4
};

/* pi_ctx_params.stats. */
enum {
    PI_STATS_OFF = 0,
    /* Count what the mode computes anyway: predicted neurons (PREDICTOR), truly
     * active neurons (DENSE, ORACLE), rows and bytes of weights read, and time per
     * layer part. Costs a clock read per layer part and a counter per neuron. */
    PI_STATS_ON = 1,
    /* Also compute what the mode skips, to measure the predictor: the predictor in
     * DENSE/ORACLE mode, the full gate and up projections in PREDICTOR mode (whose
     * output still uses only the predicted neurons). Slower. */
    PI_STATS_DIAGNOSTIC = 2
};

/* Fill `params` with the defaults. PI_OK or PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_ctx_default_params(pi_ctx_params *params);

/* Create a context for `model` (borrowed until pi_ctx_destroy; it must have been
 * opened without metadata_only). params: NULL for defaults, borrowed for the call.
 * out: receives the context (ownership transfers to the caller) or NULL.
 * Returns PI_OK, PI_ERR_INVALID_ARG (NULL model/out, metadata_only model, n_ctx above
 * 1<<20, bad struct_size), PI_ERR_UNSUPPORTED (struct_size with unknown set fields),
 * PI_ERR_NOMEM, PI_ERR_INTERNAL (threads could not start). Since: 0.1 */
PI_API int pi_ctx_create(const pi_model *model, const pi_ctx_params *params, pi_ctx **out);

/* Stop the workers and release everything. NULL is a no-op. Since: 0.1 */
PI_API void pi_ctx_destroy(pi_ctx *ctx);

/* Message of the last failing call on the context, "" if none. Borrowed until the
 * next call on the context. Since: 0.1 */
PI_API const char *pi_ctx_errmsg(const pi_ctx *ctx);

/* The model the context was created for. Since: 0.1 */
PI_API const pi_model *pi_ctx_model(const pi_ctx *ctx);

/* Append `n_tokens` tokens (borrowed for the call) at the current position, run the
 * model over them, and compute the logits of the last one (pi_ctx_logits).
 * Returns PI_OK; PI_ERR_INVALID_ARG (NULL, n_tokens 0, a token id outside the
 * vocabulary); PI_ERR_RANGE (the context would exceed n_ctx, for any n_tokens);
 * PI_ERR_ABORTED; PI_ERR_NUMERIC (a logit is NaN or infinite: see
 * pi_ctx_params.check_numerics); PI_ERR_NOMEM; PI_ERR_INTERNAL (the CPU backend refused
 * an op wider than the scratch it was sized for: a bug; every later decode of the
 * context fails the same way). On failure the context is unchanged: position, cache contents that matter, and
 * the previous logits. Since: 0.1 */
PI_API int pi_ctx_decode(pi_ctx *ctx, const int32_t *tokens, size_t n_tokens);

/* The n_vocab logits of the last decoded token, or NULL if nothing was decoded since
 * creation, reset or truncate (always NULL for a context created with PI_EMBD_ONLY). Borrowed until the next decode, reset, truncate or
 * destroy. Since: 0.1 */
PI_API const float *pi_ctx_logits(const pi_ctx *ctx);

/* Number of positions decoded so far (the next token's position). Since: 0.1 */
PI_API int64_t pi_ctx_pos(const pi_ctx *ctx);

/* Capacity in positions. Since: 0.1 */
PI_API int64_t pi_ctx_n_ctx(const pi_ctx *ctx);

/* Forget everything decoded: position 0, no logits. PI_OK or PI_ERR_INVALID_ARG.
 * Since: 0.1 */
PI_API int pi_ctx_reset(pi_ctx *ctx);

/* Keep the first `n_keep` positions and forget the rest (e.g. to regenerate from a
 * point). PI_OK, PI_ERR_INVALID_ARG, PI_ERR_RANGE (n_keep above the position).
 * Logits are cleared. Since: 0.1 */
PI_API int pi_ctx_truncate(pi_ctx *ctx, int64_t n_keep);

/* ---- Several sequences in one context ---------------------------------------------
 *
 * A context holds n_seq_max sequences (pi_ctx_params). Each has its own positions
 * 0 .. len-1 and cache; pi_ctx_decode and the single-sequence calls above act on
 * sequence 0 (pi_ctx_reset clears all). A batch appends tokens to any sequences in one
 * call: its matrix products run over all its tokens at once (what a server with many
 * clients wants), attention stays within each sequence.
 *
 * State after a failing call: every call below either succeeds or leaves every
 * sequence's length, cache contents that matter and the last logits as they were
 * (positions a failed call wrote beyond a sequence's length are never read). The one
 * exception is a device failing in the middle of pi_ctx_seq_copy or _remove (a GPU
 * error): the target sequence is then shortened to what is intact (copy: empty;
 * remove: positions before p0), and the message says so. */

/* One token of a batch: append `token` to sequence `seq` at position `pos`, which must
 * be the sequence's next position (its length, plus the entries of the same sequence
 * earlier in the batch), or -1 for "the next". `logits` non-zero: keep this entry's
 * logits (pi_ctx_batch_logits). 16 bytes. */
typedef struct pi_batch_entry {
    int32_t token;
    int32_t seq;
    int32_t pos;
    uint32_t logits;
} pi_batch_entry;

/* Decode `n` entries (borrowed for the call) in one call. Returns PI_OK;
 * PI_ERR_INVALID_ARG (NULL, n 0, a token outside the vocabulary, a seq outside
 * 0..n_seq_max-1, a pos that is not the sequence's next); PI_ERR_RANGE (n above
 * n_ctx x n_seq_max, or a sequence would exceed n_ctx); PI_ERR_ABORTED (the abort
 * callback; nothing changed); PI_ERR_NUMERIC (non-finite logits, as pi_ctx_decode;
 * nothing changed); PI_ERR_NOMEM; PI_ERR_INTERNAL (as pi_ctx_decode).
 * pi_ctx_logits then returns the logits of the last entry that asked for them, or
 * NULL when no entry asked. Since: 0.1 */
PI_API int pi_ctx_decode_batch(pi_ctx *ctx, const pi_batch_entry *entries, size_t n);

/* The n_vocab logits of entry `i` of the last successful pi_ctx_decode_batch, or NULL
 * (out of range, the entry did not ask for logits, or PI_EMBD_ONLY). Borrowed until the next decode,
 * state load, reset, truncate or destroy (the seq_* calls keep them). Since: 0.1 */
PI_API const float *pi_ctx_batch_logits(const pi_ctx *ctx, size_t i);

/* Sequences the context holds. 0 for NULL. Since: 0.1 */
PI_API uint32_t pi_ctx_n_seq_max(const pi_ctx *ctx);

/* ---- Embeddings ---------------------------------------------------------------------
 *
 * A context created with pi_ctx_params.embeddings (PI_EMBD_ON or _ONLY) keeps the final
 * hidden state of every token it decodes: the residual stream after the last layer,
 * normalized by the model's output norm, i.e. the input of the LM head (transformers'
 * last_hidden_state), n_embd floats. For decoder-only embedding models (Qwen3-Embedding,
 * e5-mistral, gte-Qwen2) a text's embedding pools these over its tokens: the file says
 * how in {arch}.pooling_type (pi_model_pooling); chat models have none, and last-token
 * pooling is the usual choice for them. Inputs longer than n_batch need no care (a
 * decode splits them), and a caller may also decode a long text in several calls: the
 * pooled sums cover every token of the sequence since it last started at position 0. */

/* Pooling, the values of GGUF's {arch}.pooling_type. NONE: per-token states only;
 * MEAN: the mean over the sequence's tokens; CLS: its first token's state; LAST: its
 * last token's; RANK: a reranker's classifier head (reported by pi_model_pooling, not
 * computed). */
enum {
    PI_POOL_NONE = 0,
    PI_POOL_MEAN = 1,
    PI_POOL_CLS = 2,
    PI_POOL_LAST = 3,
    PI_POOL_RANK = 4
};

/* The pooling the model's file asks for ({general.architecture}.pooling_type), a
 * PI_POOL_* value >= 0; PI_ERR_NOT_FOUND when the file has no such key (ordinary chat
 * models); PI_ERR_FORMAT when the value is not an integer 0..4; PI_ERR_INVALID_ARG for
 * NULL. Since: 0.1 */
PI_API int pi_model_pooling(const pi_model *model);

/* The final hidden state (n_embd floats, pi_model_n_embd) of entry `i` of the last
 * successful pi_ctx_decode (token i of its input) or pi_ctx_decode_batch (entry i), or
 * NULL: NULL context, i out of range, or a context created with PI_EMBD_OFF. Borrowed
 * until the next decode, state load, reset, truncate or destroy (the seq_* calls keep
 * it), like pi_ctx_batch_logits. Since: 0.1 */
PI_API const float *pi_ctx_embedding(const pi_ctx *ctx, size_t i);

/* Pool the final hidden states of sequence `seq` (0 for a single-sequence context)
 * into out[0..n_embd): `pooling` PI_POOL_MEAN, _CLS or _LAST, over every token decoded
 * into the sequence since it last started at position 0 (through any number of
 * decodes); `normalize` non-zero: scaled to unit L2 norm (a zero vector stays zero),
 * as OpenAI's and llama-server's /v1/embeddings return them. out: n floats, borrowed
 * for the call, n >= n_embd.
 * Returns PI_OK; PI_ERR_INVALID_ARG (NULL ctx or out, a bad seq, pooling not MEAN, CLS
 * or LAST, a context created with PI_EMBD_OFF); PI_ERR_RANGE (n below n_embd, or the
 * sums do not cover the sequence: it is empty, or was shortened (truncate, seq_remove)
 * or loaded from a state since its tokens were decoded; decode it again from position
 * 0). pi_ctx_seq_copy copies the sums with the sequence. Since: 0.1 */
PI_API int pi_ctx_embedding_pooled(const pi_ctx *ctx, int32_t seq, int pooling,
                                   uint32_t normalize, float *out, size_t n);

/* Positions decoded in sequence `seq` (its next position); -1 for NULL or a bad seq.
 * Since: 0.1 */
PI_API int64_t pi_ctx_seq_len(const pi_ctx *ctx, int32_t seq);

/* Remove positions p0 .. p1-1 of sequence `seq` (p1 -1: to the end). Removing a tail
 * leaves the sequence exactly as if it had never gone further. Later positions move down
 * by p1 - p0 and their cached keys are rotated back (RoPE composes), so positions stay
 * contiguous and attention sees the right distances; but the cached keys and values of
 * every layer above the first were computed while the removed tokens were visible, so
 * the continuation is close to, not equal to, that of a context that never saw them
 * (context shifting's usual trade-off). PI_OK, PI_ERR_INVALID_ARG (NULL, bad seq),
 * PI_ERR_RANGE (p0 < 0, p0 > p1, p1 > len). Since: 0.1 */
PI_API int pi_ctx_seq_remove(pi_ctx *ctx, int32_t seq, int64_t p0, int64_t p1);

/* Make sequence `dst` a copy of sequence `src` (its positions and cache): a shared
 * prompt decoded once, continued several ways. PI_OK, PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_ctx_seq_copy(pi_ctx *ctx, int32_t src, int32_t dst);

/* Clear every sequence but `seq`. PI_OK, PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_ctx_seq_keep(pi_ctx *ctx, int32_t seq);

/* Clear sequence `seq` (length 0); -1 clears all. PI_OK, PI_ERR_INVALID_ARG.
 * Since: 0.1 */
PI_API int pi_ctx_seq_clear(pi_ctx *ctx, int32_t seq);

/* ---- State save and restore ---------------------------------------------------------
 *
 * The state of the whole context (seq -1: every sequence's positions and cache, and the
 * last logits) or of one sequence (its positions and cache), in a versioned binary
 * format with a checksum that names the model it belongs to (docs/formats.md). Loading
 * a state of another model, a truncated or corrupted one, or one that does not fit
 * (n_ctx, n_seq_max) fails with PI_ERR_FORMAT / PI_ERR_RANGE and a message, and
 * leaves the context as it was. A round trip reproduces the next logits bit for bit. */

/* Write the state into buf (cap bytes); *size receives the bytes needed (also when buf
 * is NULL or cap too small: then PI_ERR_RANGE). PI_OK, PI_ERR_INVALID_ARG, PI_ERR_RANGE,
 * PI_ERR_NOMEM. Since: 0.1 */
PI_API int pi_ctx_state_save(const pi_ctx *ctx, int32_t seq, void *buf, size_t cap,
                             size_t *size);

/* Restore a state from `size` bytes at buf (borrowed for the call): seq -1 needs a
 * whole-context state and replaces everything; seq s takes a one-sequence state (of any
 * sequence) into sequence s. PI_OK, PI_ERR_INVALID_ARG, PI_ERR_FORMAT, PI_ERR_RANGE,
 * PI_ERR_NOMEM. Since: 0.1 */
PI_API int pi_ctx_state_load(pi_ctx *ctx, int32_t seq, const void *buf, size_t size);

/* The same through a file, written atomically (temporary name, then rename).
 * PI_ERR_IO when it cannot be written or read, or when the file to load or to replace
 * is not a regular file (a directory, FIFO or device is refused at once, never waited
 * on, read or replaced; a symbolic link to replace is replaced itself); PI_ERR_FORMAT also for a file larger than any state of this context (it is
 * not read). Since: 0.1 */
PI_API int pi_ctx_state_save_file(const pi_ctx *ctx, int32_t seq, const char *path);
PI_API int pi_ctx_state_load_file(pi_ctx *ctx, int32_t seq, const char *path);

/* Change the number of worker threads (restarts them). 0 means the processors
 * available. PI_OK, PI_ERR_INVALID_ARG, PI_ERR_NOMEM, PI_ERR_INTERNAL (the context
 * keeps its old threads on failure). Results do not depend on the thread count.
 * Since: 0.1 */
PI_API int pi_ctx_set_threads(pi_ctx *ctx, uint32_t n_threads);
PI_API uint32_t pi_ctx_n_threads(const pi_ctx *ctx);

/* What a probe (pi_ctx_set_ffn_probe) sees of one layer's FFN in one decode step of
 * n_tokens tokens (the step's entries in order), all borrowed for the call only:
 * - h [n_tokens][n_embd]: the FFN's predictor input, the residual stream before the
 *   FFN's norm (llama and most architectures: after attention; parallel blocks such as
 *   Falcon's: the layer's input), what a PowerInfer predictor reads;
 * - act [n_tokens][n_ff]: the activation of the gate, act(gate . xn) (gate biases
 *   included; FFNs without a gate: act(up . xn + b_up)), what PI_SPARSE_THRESHOLD
 *   thresholds;
 * - inter [n_tokens][n_ff]: the FFN's intermediate, the values the down projection
 *   multiplies (gated: act(gate . xn) * (up . xn); bamboo relu(gate . xn) * relu(up . xn);
 *   without a gate: act); a neuron of a ReLU FFN fired iff its value is non-zero.
 * The callback must not call the library on the same context. Since: 0.1 */
typedef void (*pi_ffn_probe_fn)(void *user, int64_t layer, int64_t n_tokens, const float *h,
                                const float *act, const float *inter);

/* Install (fn non-NULL) or remove (fn NULL) the context's FFN probe: from the next decode
 * on, fn(user, ...) is called once per layer and step, after the layer's FFN (how
 * tools/train_predictor.py collects a predictor's training pairs with this engine). The
 * probe needs the whole FFN computed: a CPU-only context in PI_SPARSE_DENSE mode whose
 * layers have no experts. `user` is borrowed until the probe is replaced or the context
 * destroyed. Costs a copy of the gate's activations per layer. PI_OK,
 * PI_ERR_INVALID_ARG (NULL ctx), PI_ERR_UNSUPPORTED (another mode, a device, experts),
 * PI_ERR_NOMEM. Since: 0.1 */
PI_API int pi_ctx_set_ffn_probe(pi_ctx *ctx, pi_ffn_probe_fn fn, void *user);

/* The FFN mode the context runs, PI_SPARSE_DENSE, _PREDICTOR or _ORACLE (AUTO
 * resolved), or PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_ctx_sparse_mode(const pi_ctx *ctx);

/* The predictor threshold the context uses (the file's, or the override). */
PI_API float pi_ctx_sparse_threshold(const pi_ctx *ctx);

/* PI_SPARSE_THRESHOLD (and PI_SPARSE_PREDICTOR of a sparsified file, where they define
 * the neurons diagnostic statistics count as active): where the per-layer thresholds
 * came from, PI_THRESHOLDS_* (PI_THRESHOLDS_NONE in other modes), or
 * PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_ctx_sparse_threshold_source(const pi_ctx *ctx);

/* Copy the per-layer thresholds the context applies (scale included; 0 in other
 * modes) into out[0 .. min(cap, n_layer)). Returns n_layer (call with cap 0 to size),
 * or PI_ERR_INVALID_ARG (NULL ctx, out NULL with cap > 0). Since: 0.1 */
PI_API int64_t pi_ctx_sparse_thresholds(const pi_ctx *ctx, float *out, size_t cap);

/* =================================================================================
 * Activation statistics
 *
 * Per layer and FFN neuron: how many tokens the predictor marked the neuron active
 * ("predicted"), how many tokens its activation was truly non-zero ("active"), and
 * both. A context collects them when created with stats != PI_STATS_OFF; they can be
 * saved as a small GGUF side file (docs/formats.md) and loaded again, e.g. to plan
 * which neurons to keep on a GPU. PowerInfer's activation/activation_N.pt files
 * convert to the same file with tools/convert_activation_stats.py.
 * ================================================================================= */
typedef struct pi_stats pi_stats;

/* Which per-neuron count pi_stats_neurons returns. */
enum {
    PI_NEURON_PREDICTED = 0,
    PI_NEURON_ACTIVE = 1,
    PI_NEURON_BOTH = 2
};

/* Per-layer totals and telemetry. Counts add over tokens; rows and bytes count
 * weight rows and bytes read by the FFN and predictor kernels (a prompt step reads
 * each row once for all its tokens); times are wall-clock nanoseconds of the
 * attention block, the predictor, and the FFN block (0 for loaded statistics). */
typedef struct pi_layer_stats {
    uint32_t struct_size; /* set by the caller to sizeof(pi_layer_stats) */
    uint32_t reserved;
    uint64_t tokens_predicted; /* tokens the predictor ran for */
    uint64_t tokens_observed;  /* tokens whose true activations were seen (a
                                * mixture-of-experts layer: tokens routed) */
    double predicted;          /* sum over tokens of neurons marked active */
    double active;             /* sum over observed tokens of truly active neurons */
    double both;               /* sum over tokens of neurons both marked and active */
    uint64_t rows_gate_up;     /* rows of ffn_gate (and as many of ffn_up) computed */
    uint64_t rows_down;        /* rows of the down projection accumulated */
    uint64_t bytes_ffn;        /* FFN weight bytes read */
    uint64_t bytes_predictor;  /* predictor weight bytes read */
    uint64_t ns_attention, ns_predictor, ns_ffn;
} pi_layer_stats;

/* The statistics a context collects, or NULL when created with PI_STATS_OFF.
 * Borrowed until the context is destroyed; updated by each decode. Since: 0.1 */
PI_API const pi_stats *pi_ctx_stats(const pi_ctx *ctx);

/* Zero the context's statistics. PI_OK, PI_ERR_INVALID_ARG (NULL, or no statistics
 * collected). Since: 0.1 */
PI_API int pi_ctx_stats_reset(pi_ctx *ctx);

/* Shape: layers and neurons per layer; 0 for NULL. Since: 0.1 */
PI_API int64_t pi_stats_n_layer(const pi_stats *stats);
PI_API int64_t pi_stats_n_ff(const pi_stats *stats);

/* Totals of one layer into *out (out->struct_size must be set; fields beyond it are
 * not written). PI_OK, PI_ERR_INVALID_ARG, PI_ERR_RANGE (layer). Since: 0.1 */
PI_API int pi_stats_layer(const pi_stats *stats, int64_t layer, pi_layer_stats *out);

/* Copy the n_ff counts of `kind` (PI_NEURON_*) for `layer` into out[0..n) (n must be
 * at least n_ff). PI_OK, PI_ERR_INVALID_ARG, PI_ERR_RANGE. Since: 0.1 */
PI_API int pi_stats_neurons(const pi_stats *stats, int64_t layer, int kind, double *out,
                            size_t n);

/* Which per-expert value pi_stats_experts returns. */
enum {
    PI_EXPERT_SELECTED = 0, /* tokens whose router chose the expert */
    PI_EXPERT_WEIGHT = 1    /* the sum of the weights the router gave it (its share of
                             * the layer's output: after renormalisation and scale) */
};

/* Experts per layer of a mixture-of-experts model's statistics (collected by a context,
 * or loaded); 0 for other models and for NULL. Since: 0.1 */
PI_API int64_t pi_stats_n_expert(const pi_stats *stats);

/* Copy the n_expert values of `kind` (PI_EXPERT_*) for `layer` into out[0..n) (n must be
 * at least n_expert); dense layers of such a model read zeros. Over T tokens a layer's
 * selections sum to T * expert_used_count. PI_OK, PI_ERR_INVALID_ARG (also statistics
 * without experts), PI_ERR_RANGE. Since: 0.1 */
PI_API int pi_stats_experts(const pi_stats *stats, int64_t layer, int kind, double *out,
                            size_t n);

/* Write the per-neuron counts as a GGUF side file (replacing `path` only once it is
 * complete). errbuf (may be NULL) receives the message on failure. PI_OK,
 * PI_ERR_INVALID_ARG, PI_ERR_IO (also when `path` is a directory, FIFO or device, which
 * is left as it is), PI_ERR_NOMEM. Since: 0.1 */
/* Gate histograms (pi_ctx_params.gate_histogram): per layer, counts of
 * |act(gate . x)| in PI_GATE_HIST_BINS log-spaced bins: bin 0 holds values below
 * 2^PI_GATE_HIST_MIN_LOG2 (zero included), bin i (1 .. BINS-2) holds
 * [2^(MIN_LOG2 + (i-1)/PER_OCTAVE), 2^(MIN_LOG2 + i/PER_OCTAVE)), the last bin
 * the rest (infinity and NaN included). In memory only: pi_stats_save does not
 * write them, and loaded statistics have none (all zero). */
#define PI_GATE_HIST_BINS 514
#define PI_GATE_HIST_MIN_LOG2 (-20)
#define PI_GATE_HIST_PER_OCTAVE 16

/* Copy the PI_GATE_HIST_BINS counts of `layer` into out (n must be at least
 * PI_GATE_HIST_BINS). PI_OK, PI_ERR_INVALID_ARG, PI_ERR_RANGE (layer). Since: 0.1 */
PI_API int pi_stats_gate_histogram(const pi_stats *stats, int64_t layer, uint64_t *out,
                                   size_t n);

/* *out = the q-quantile (0 <= q <= 1) of |act(gate . x)| of `layer`: the value below
 * which a fraction q of the counted activations lie, interpolated log-linearly inside
 * its bin (0 when q is 0 or every value sits in bin 0). Thresholding at it keeps about
 * a fraction 1 - q of the neurons. PI_OK, PI_ERR_INVALID_ARG (NULL, q outside [0, 1]
 * or NaN), PI_ERR_RANGE (layer), PI_ERR_NOT_FOUND (nothing counted for the layer).
 * Since: 0.1 */
PI_API int pi_stats_gate_quantile(const pi_stats *stats, int64_t layer, double q, float *out);

PI_API int pi_stats_save(const pi_stats *stats, const char *path, char *errbuf,
                         size_t errbuf_cap);

/* Read a side file. out receives the statistics (ownership transfers to the caller:
 * pi_stats_free) or NULL. PI_OK, PI_ERR_INVALID_ARG, PI_ERR_IO, PI_ERR_FORMAT,
 * PI_ERR_NOMEM. Since: 0.1 */
PI_API int pi_stats_load(const char *path, pi_stats **out, char *errbuf, size_t errbuf_cap);

/* Release loaded statistics; NULL is a no-op. Never call it on pi_ctx_stats's
 * result. Since: 0.1 */
PI_API void pi_stats_free(pi_stats *stats);

/* ---- Placement plans (hybrid execution) -------------------------------------------
 *
 * A plan says what lives on the device: per layer its attention (q, k, v, o and
 * attn_norm), predictor (fc1, fc2), ffn_norm and a set of FFN neurons (their gate,
 * up and down rows), plus the output projection and the KV cache. The rule
 * (docs/design.md, "Placement"): scratch buffers first; then dense parts in the order
 * every layer's attention, every predictor, every ffn_norm, output, KV cache,
 * stopping at the first that does not fit; then FFN neurons, hottest first across
 * all layers, in groups of 32 (dense files: whole layers' FFNs). Deterministic; the
 * total never exceeds the budget. */
typedef struct pi_plan pi_plan;

/* Parts of a plan (pi_plan_bytes, pi_plan_layer_parts bits 1 << part). */
enum {
    PI_PLAN_ATTENTION = 0,
    PI_PLAN_PREDICTOR = 1,
    PI_PLAN_FFN_NORM = 2,
    PI_PLAN_OUTPUT = 3,
    PI_PLAN_KV_CACHE = 4,
    PI_PLAN_NEURONS = 5,
    PI_PLAN_SCRATCH = 6,
    PI_PLAN_N_PARTS = 7
};

/* pi_plan_source. */
enum {
    PI_PLAN_COMPUTED = 0, /* planned now */
    PI_PLAN_FROM_FILE = 1, /* neurons read from plan_path */
    PI_PLAN_CACHE_WRITTEN = 2, /* planned now and written to plan_path */
    PI_PLAN_CACHE_UNWRITTEN = 3 /* planned now; plan_path could not be written */
};

/* Dry run: the plan pi_ctx_create would use for these params (device, budget,
 * n_ctx, n_batch, plan_stats, plan_path, plan_file), without loading any weight
 * onto a device. With PI_DEVICE_BUDGET_AUTO and PI_DEVICE_GPU it asks the GPU for
 * its free memory. PI_OK; PI_ERR_INVALID_ARG (NULL, metadata_only model, device
 * PI_DEVICE_NONE, bad fields, statistics of another shape); PI_ERR_UNSUPPORTED (no
 * GPU); PI_ERR_FORMAT, PI_ERR_RANGE, PI_ERR_IO (plan_path, see PI_PLAN_FILE_*);
 * PI_ERR_NOMEM. Messages go to params->errbuf. *out: free with pi_plan_free.
 * Since: 0.1 */
PI_API int pi_model_plan(const pi_model *model, const pi_ctx_params *params, pi_plan **out);

/* The plan a hybrid context runs with; NULL for NULL or a CPU-only context.
 * Borrowed until pi_ctx_destroy. Since: 0.1 */
PI_API const pi_plan *pi_ctx_plan(const pi_ctx *ctx);

/* The budget it was made for, in bytes. 0 for NULL. Since: 0.1 */
PI_API uint64_t pi_plan_budget(const pi_plan *plan);

/* Device bytes of one part (PI_PLAN_*), or of all when part is PI_PLAN_N_PARTS.
 * 0 for NULL or an unknown part. Since: 0.1 */
PI_API uint64_t pi_plan_bytes(const pi_plan *plan, int part);

/* Layers and neurons per layer; 0 for NULL. Since: 0.1 */
PI_API int64_t pi_plan_n_layer(const pi_plan *plan);
PI_API int64_t pi_plan_n_ff(const pi_plan *plan);

/* Bits 1 << PI_PLAN_ATTENTION, _PREDICTOR, _FFN_NORM set when that part of layer
 * `layer` is on the device; 0 when out of range. Since: 0.1 */
PI_API uint32_t pi_plan_layer_parts(const pi_plan *plan, int64_t layer);

/* Number of layer `layer`'s FFN neurons on the device (-1 if out of range); when
 * mask is non-NULL and cap >= n_ff, mask[r] = 1 for those neurons, else 0.
 * Since: 0.1 */
PI_API int64_t pi_plan_layer_neurons(const pi_plan *plan, int64_t layer, uint8_t *mask,
                                     size_t cap);

/* Number of layer `layer`'s experts on the device (0 in a layer without experts, -1 if
 * out of range); when mask is non-NULL and cap >= the model's expert count
 * (pi_stats_n_expert of its statistics, the file's <arch>.expert_count), mask[e] = 1
 * for those experts, else 0. A mixture-of-experts layer's FFN is placed by experts:
 * the planner puts the most frequently chosen experts of all layers (the statistics'
 * PI_EXPERT_SELECTED counts; uniform without) on the device after the dense parts,
 * whose PI_PLAN_FFN_NORM part then also holds the layer's router and shared expert;
 * the experts' bytes count in PI_PLAN_NEURONS. Since: 0.1 */
PI_API int64_t pi_plan_layer_experts(const pi_plan *plan, int64_t layer, uint8_t *mask,
                                     size_t cap);

/* 1 if the output projection (resp. the KV cache) is on the device. Since: 0.1 */
PI_API int pi_plan_output_on_device(const pi_plan *plan);
PI_API int pi_plan_kv_on_device(const pi_plan *plan);

/* PI_PLAN_COMPUTED, _FROM_FILE, _CACHE_WRITTEN or _CACHE_UNWRITTEN; -1 for NULL.
 * Since: 0.1 */
PI_API int pi_plan_source(const pi_plan *plan);

/* A human-readable description (budget, bytes per part, per layer parts and neuron
 * counts) written like snprintf: at most cap bytes with a NUL, returns the length
 * the whole text needs (excluding the NUL), or a negative PI_ERR_*. Since: 0.1 */
PI_API int64_t pi_plan_describe(const pi_plan *plan, char *buf, size_t cap);

/* Write the plan's neurons as a GPU index file (PowerInfer's format, readable by
 * PowerInfer, plus keys naming the model, statistics and budget; docs/formats.md),
 * atomically. PI_OK, PI_ERR_INVALID_ARG, PI_ERR_IO (also when `path` is a directory,
 * FIFO or device, which is left as it is), PI_ERR_NOMEM. Since: 0.1 */
PI_API int pi_plan_save(const pi_plan *plan, const char *path);

/* Release a plan from pi_model_plan. NULL is a no-op. Since: 0.1 */
PI_API void pi_plan_free(pi_plan *plan);

/* =================================================================================
 * Sampling
 *
 * The chain, in order: repetition/frequency/presence penalties over the last
 * penalty_last_n accepted tokens -> top-k -> top-p -> min-p -> temperature -> a draw
 * from a generator seeded with `seed`. temperature <= 0 is greedy (the arg max of the
 * penalised logits; ties go to the lowest id). Same seed, same logits: same tokens.
 * ================================================================================= */
typedef struct pi_sampler pi_sampler;

typedef struct pi_sampler_params {
    uint32_t struct_size;
    float temperature;       /* default 0.8; <= 0: greedy */
    int32_t top_k;           /* default 40; <= 0: off */
    float top_p;             /* default 0.95; >= 1: off */
    float min_p;             /* default 0.05; <= 0: off */
    float repeat_penalty;    /* default 1.0 (off); logit / p if > 0, * p if < 0 */
    float frequency_penalty; /* default 0; minus count * this */
    float presence_penalty;  /* default 0; minus this if present */
    int32_t penalty_last_n;  /* default 64 tokens of history; 0: penalties off */
    uint64_t seed;           /* default 0x5eed */
} pi_sampler_params;

/* Fill `params` with the defaults. PI_OK or PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_sampler_default_params(pi_sampler_params *params);

/* Create a sampler for `model` (borrowed until pi_sampler_destroy). Returns PI_OK,
 * PI_ERR_INVALID_ARG (NULL, NaN or negative top_p/min_p/penalties, bad struct_size),
 * PI_ERR_UNSUPPORTED, PI_ERR_NOMEM. Since: 0.1 */
PI_API int pi_sampler_create(const pi_model *model, const pi_sampler_params *params,
                             pi_sampler **out);
/* NULL is a no-op. Since: 0.1 */
PI_API void pi_sampler_destroy(pi_sampler *sampler);

/* Choose the next token from the context's current logits and accept it into the
 * penalty history. A NaN logit counts as -infinity (never chosen while another token
 * has a number; ties go to the lower id, so the choice stays deterministic) and
 * +infinity as the largest float. Returns PI_OK, PI_ERR_INVALID_ARG (NULL; ctx of
 * another model; no logits yet), PI_ERR_NUMERIC (every logit is NaN or -infinity;
 * nothing is accepted). Since: 0.1 */
PI_API int pi_sample(pi_sampler *sampler, const pi_ctx *ctx, int32_t *token);

/* The same on any n_vocab logits (borrowed for the call), e.g. one entry's of a batch
 * (pi_ctx_batch_logits): each sequence samples with its own sampler. PI_OK,
 * PI_ERR_INVALID_ARG (NULL, n_vocab not the sampler's model's), PI_ERR_NUMERIC (as
 * pi_sample). Since: 0.1 */
PI_API int pi_sample_logits(pi_sampler *sampler, const float *logits, int64_t n_vocab,
                            int32_t *token);

/* Add a token to the penalty history without sampling (e.g. the prompt).
 * PI_OK, PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_sampler_accept(pi_sampler *sampler, int32_t token);

/* Clear the history and re-seed. PI_OK, PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_sampler_reset(pi_sampler *sampler);

/* =================================================================================
 * Grammars (constrained decoding)
 *
 * A grammar restricts what may be generated: at each step pi_grammar_mask sets the
 * logits of every token whose text cannot continue a sentence of the grammar to
 * -infinity, and pi_grammar_accept moves the grammar on by the token sampled.
 *
 * The notation is GBNF (llama.cpp's): rules `name ::= alternatives`, one per line (a
 * rule goes on over several lines inside parentheses, after `::=` or `|`, and on lines
 * that start with `|`); alternatives separated by `|`; elements are rule names, string
 * literals "..." (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), character classes
 * [a-z_] and [^"\\] over code points, `.` (any code point), groups ( ... ) and the
 * postfixes `*` `+` `?` `{m}` `{m,}` `{m,n}` (m, n up to 1000); `#` starts a comment to
 * the end of the line. Text is UTF-8: a class matches one whole code point, and the
 * grammar refuses ill-formed UTF-8 at the byte that makes it so.
 *
 * Limits, so that a hostile grammar cannot make a call slow or big: 1 MiB of text,
 * 8192 rules (groups and repetitions make rules too), 2M words of compiled code, 1024
 * parse stacks alive at once, stacks 512 frames deep. Left recursion (a rule that can
 * derive itself before reading anything, `expr ::= expr "+" term`, or a repetition of
 * something that can be empty, `("")*`) is refused when the grammar is created:
 * write it as repetition (`expr ::= term ("+" term)*`).
 *
 * A grammar borrows its model (which must outlive it) and is used by one thread at a
 * time; clones share the compiled grammar and the vocabulary's trie (read-only) and may
 * be used on distinct threads. docs/design.md describes the recogniser and the mask.
 * ================================================================================= */
typedef struct pi_grammar pi_grammar;

/* Compile `len` bytes of GBNF (`gbnf`, borrowed for the call) with start rule `root`
 * (NUL-terminated; NULL: "root") for `model` (borrowed until pi_grammar_destroy; NULL
 * makes a grammar that takes text only: pi_grammar_accept_text and pi_grammar_complete
 * work, pi_grammar_mask and pi_grammar_accept are PI_ERR_INVALID_ARG). With a model, the
 * trie of its vocabulary's pieces (pi_token_to_piece without flags) is built here, once.
 * On success *out is the grammar at the start of its text. On failure *out is NULL and
 * err (err_cap bytes, NUL-terminated when err_cap > 0; NULL with err_cap 0 to ignore)
 * says why, as "line:col: reason" when it has a place (line and column count from 1,
 * columns in code points): a syntax error, an undefined or twice-defined rule, "left
 * recursion: rule 'x' can derive itself before reading anything".
 * Returns PI_OK; PI_ERR_INVALID_ARG (NULL gbnf or out); PI_ERR_FORMAT (the grammar is
 * malformed, as above, or has no rule `root`); PI_ERR_RANGE (a limit above: text size,
 * rule count, repetition count, nesting); PI_ERR_UNSUPPORTED (the model has no
 * tokenizer, or the start alone needs more parse stacks than the limits allow);
 * PI_ERR_NOMEM. Since: 0.1 */
PI_API int pi_grammar_create(const pi_model *model, const char *gbnf, size_t len,
                             const char *root, pi_grammar **out, char *err, size_t err_cap);

/* NULL is a no-op. Clones stay valid. Since: 0.1 */
PI_API void pi_grammar_destroy(pi_grammar *grammar);

/* The message of the last failed call on `grammar` (owned by it, valid until the next
 * call on it); "" when none. Since: 0.1 */
PI_API const char *pi_grammar_errmsg(const pi_grammar *grammar);

/* A copy of `grammar` in its current state (e.g. one per choice when sampling several);
 * the two then move on independently. Returns PI_OK, PI_ERR_INVALID_ARG, PI_ERR_NOMEM
 * (*out NULL). Since: 0.1 */
PI_API int pi_grammar_clone(const pi_grammar *grammar, pi_grammar **out);

/* Back to the start of the text. PI_OK, PI_ERR_INVALID_ARG, PI_ERR_NOMEM. Since: 0.1 */
PI_API int pi_grammar_reset(pi_grammar *grammar);

/* 1 when the text read so far is a whole sentence of the grammar (generation may end
 * here; it may also go on if the grammar allows more), else 0 (also for NULL).
 * Since: 0.1 */
PI_API int pi_grammar_complete(const pi_grammar *grammar);

/* Set logits[t] to -infinity for every token t that may not come next: a token whose
 * piece cannot continue the text (all of its bytes must be readable; a piece may end
 * inside a UTF-8 sequence), a token with an empty piece, and an end-of-generation token
 * (pi_model_token_is_eog) unless the text is complete. Other logits are left as they
 * are. logits: n_vocab floats, borrowed for the call. Nothing is allocated after the
 * first call. Returns how many tokens stay allowed (0: none can: the grammar allows
 * nothing more yet is not complete, or a limit was hit on every way on),
 * PI_ERR_INVALID_ARG (NULL, a grammar without a model, n_vocab not the model's),
 * PI_ERR_UNSUPPORTED (the walk over the vocabulary would need more than 2M expansion
 * steps: a grammar so ambiguous that masking would take a second or more; logits partly
 * masked, state unchanged), PI_ERR_NOMEM. Since: 0.1 */
PI_API int64_t pi_grammar_mask(pi_grammar *grammar, float *logits, int64_t n_vocab);

/* Move on by `token`'s piece. An end-of-generation token is accepted (PI_OK, nothing
 * changes) only when the text is complete. Returns PI_OK; PI_ERR_RANGE (the token may
 * not come next: what pi_grammar_mask refuses; nothing changes, the message names the
 * byte); PI_ERR_UNSUPPORTED (reading it would need more parse stacks than the limits
 * allow; nothing changes); PI_ERR_INVALID_ARG (NULL, a token outside the vocabulary, a
 * grammar without a model); PI_ERR_NOMEM (nothing changes). Since: 0.1 */
PI_API int pi_grammar_accept(pi_grammar *grammar, int32_t token);

/* Move on by `len` bytes of text (borrowed for the call; NULL allowed when len is 0),
 * all or nothing. Returns PI_OK; PI_ERR_RANGE (some byte cannot continue the text: the
 * message gives its offset; nothing changes); PI_ERR_UNSUPPORTED (a limit, as
 * pi_grammar_accept); PI_ERR_INVALID_ARG; PI_ERR_NOMEM. Since: 0.1 */
PI_API int pi_grammar_accept_text(pi_grammar *grammar, const char *text, size_t len);

/* =================================================================================
 * Quantization
 *
 * pi_model_quantize rewrites a GGUF or PowerInfer ("PWRI") file with its large
 * weights in a smaller type. Everything else is kept: the magic, every metadata key
 * in its order (except general.file_type, set to the target's llama.cpp file type,
 * and general.quantization_version, set to 2; both U32, appended when absent), the
 * tensor names and order, and the bytes of every tensor that is not quantized.
 * A tensor is quantized iff it has at least 2 dimensions, its name ends in
 * ".weight", it is F32, F16 or BF16, and ne[0] is a multiple of the target's block
 * size (32); tensors already quantized are copied, not requantized. Mixture-of-experts
 * routers (blk.N.ffn_gate_inp.weight, blk.N.ffn_gate_inp_shexp.weight) are copied too,
 * as llama.cpp keeps them: their rounding would move tokens to other experts. 3-D
 * expert tensors are quantized row by row like any weight. The blocks are
 * bit-identical to those of the gguf Python package (gguf.quants.quantize) for the
 * same float values. docs/formats.md has the details.
 * ================================================================================= */
typedef struct pi_quantize_params {
    uint32_t struct_size; /* set by pi_quantize_default_params */
    /* Target type of the weights: PI_TYPE_Q4_0 (default), PI_TYPE_Q4_1,
     * PI_TYPE_Q5_0, PI_TYPE_Q5_1, PI_TYPE_Q8_0 or PI_TYPE_MXFP4 (every weight, not
     * only the experts as llama-quantize's MXFP4_MOE does). */
    uint32_t type;
    /* Type of the FFN predictors of a PowerInfer file (blk.N.fc1.weight,
     * blk.N.fc2.weight). 0 (default): the same as `type`. Otherwise one of the
     * targets above or PI_TYPE_F16 / PI_TYPE_BF16 (PI_TYPE_F32 cannot be named, 0
     * meaning "same"). Dense files have no predictors and ignore it. */
    uint32_t predictor_type;
    /* Non-zero: leave output.weight as it is. Default 0. */
    uint32_t keep_output;
    /* Threads that quantize the rows of a tensor, including the caller. 0 (default):
     * the processors available. The output does not depend on it. */
    uint32_t n_threads;
    /* Progress of the call; may abort it. NULL (default): none. Borrowed for the
     * call. */
    pi_progress_fn progress_fn;
    void *progress_user;
    /* Optional caller buffer that receives the error message on failure. Borrowed
     * for the call. Default NULL/0. */
    char *errbuf;
    size_t errbuf_cap;
    /* Non-zero: weights already quantized to another type (a Q8_0 or Q6_K tensor
     * asked to become Q4_0) are dequantized and quantized again, which compounds
     * both roundings. 0 (default): such a file is refused with PI_ERR_UNSUPPORTED
     * naming the tensor (weights already of the target type are always copied).
     * Since: 0.1 */
    uint32_t allow_requantize;
    uint32_t reserved0; /* zero (fills what would be padding, see ABI.md) */
} pi_quantize_params;

/* Fill `params` with the defaults, including struct_size.
 * Returns PI_OK, or PI_ERR_INVALID_ARG if params is NULL. Since: 0.1 */
PI_API int pi_quantize_default_params(pi_quantize_params *params);

/* Quantize the model file at `in_path` into a new file at `out_path` (both
 * NUL-terminated, borrowed for the call). params: NULL for the defaults, or filled by
 * pi_quantize_default_params; borrowed for the call.
 *
 * The input must parse as a GGUF or PWRI file (the architecture is not checked).
 * It is read through a mapping and the output is written as it is produced, so
 * memory use stays small whatever the model size. The output is first written to a
 * temporary file next to out_path ("<out_path>.tmp<n>", created exclusively) and
 * renamed over out_path only when complete; on any failure the temporary file is
 * removed and out_path is untouched.
 *
 * Returns PI_OK; PI_ERR_INVALID_ARG (NULL path, out_path naming the input file,
 * a type or predictor_type not listed above, struct_size smaller than the first
 * published pi_quantize_params); PI_ERR_UNSUPPORTED (struct_size larger than this
 * library knows and a field it does not know is non-zero; a weight already quantized
 * to another type without allow_requantize); PI_ERR_IO (the input
 * cannot be opened or mapped, the output cannot be created, written (disk full),
 * synced or renamed, or out_path is a directory, FIFO or device, which is left as it
 * is: `pi-quantize in.gguf /dev/null` would otherwise replace /dev/null); PI_ERR_FORMAT (the input is malformed); PI_ERR_NOMEM;
 * PI_ERR_INTERNAL (threads could not start); PI_ERR_ABORTED (progress_fn returned
 * non-zero). On failure the message is written to params->errbuf when given.
 * Thread-safe: calls on different files may run at once. Since: 0.1 */
PI_API int pi_model_quantize(const char *in_path, const char *out_path,
                             const pi_quantize_params *params);

/* =================================================================================
 * Activation sparsity for ordinary models (pi-sparsify)
 *
 * pi_model_sparsify rewrites a dense GGUF file with a gated FFN (ffn_gate and ffn_up,
 * or a fused gate_up as Phi-3's, and ffn_down in every layer; a post-FFN norm as
 * Gemma 2/3's is kept and applied; gate and up biases (a Llama with mlp_bias) added
 * before the activation and its threshold; no bias on a fused gate_up) or a plain one
 * (act(up . x + b_up), Falcon's, StarCoder2's: thresholds on that activation, down
 * biases kept), or one with mixture-of-experts layers (SiLU/GELU/ReLU experts, no
 * expert biases, no neuron_order; blk.N.ffn_down_exps.weight is replaced by
 * blk.N.ffn_down_exps_t.weight {n_embd, n_ff_exp, n_expert}, each expert's down
 * transposed; one threshold per layer for all its experts, each run like a dense
 * layer of the method: the kept neurons' rows of up (CATS, on the CPU) and down; a
 * shared expert stays dense) into a
 * sparse-capable GGUF file (docs/formats.md, "Sparsified files"): every tensor is
 * copied except blk.N.ffn_down.weight, replaced by blk.N.ffn_down_t.weight, the
 * transposed down projection (one row of n_embd per neuron; with keep_down the two
 * stand side by side), and a fused gate_up,
 * written as ffn_gate and ffn_up (its halves); metadata gains the keys
 * powerinfer.sparsify.*, the per-layer thresholds among them. Such a file runs in
 * PI_SPARSE_THRESHOLD mode by default and exactly in PI_SPARSE_DENSE. The thresholds
 * come from a calibration (pi_ctx_params.gate_histogram and pi_stats_gate_quantile;
 * tools/pi-sparsify does both).
 * ================================================================================= */
typedef struct pi_sparsify_params {
    uint32_t struct_size; /* set by pi_sparsify_default_params */
    /* Type of ffn_down_t. 0 (default): ffn_down's own type when it is F32, F16 or BF16
     * (an exact transpose) or Q8_0; for other quantized types (dequantized, transposed,
     * quantized again with a least-squares scale per block) Q5_0 from a source of at
     * most 4.5 bits per weight (Q4_0, Q4_1, IQ4_NL, IQ4_XS, MXFP4, Q4_K, Q3_K, Q2_K),
     * Q8_0 from Q5_0, Q5_1, Q5_K, Q6_K (requantizing a 4-bit down to 4 bits along the
     * other axis costs far more, docs/formats.md); F16 when a 32-block does not divide
     * n_embd. Otherwise one of F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
     * (PI_ERR_INVALID_ARG; PI_TYPE_F32 is 0, "the same", so F32 is kept only from an
     * F32 source), PI_ERR_UNSUPPORTED when its block does not divide n_embd. */
    uint32_t down_type;
    /* The per-layer thresholds to record, n_thresholds = the model's n_layer floats,
     * each finite. Required. Borrowed for the call. */
    const float *thresholds;
    uint64_t n_thresholds;
    /* The target sparsity the thresholds were calibrated for, in [0, 1) (recorded). */
    float sparsity;
    /* Threads; 0 (default): the processors available. The output does not depend on
     * it. */
    uint32_t n_threads;
    /* Where the calibration text came from and how many tokens it had (recorded;
     * NULL: ""). Borrowed for the call. */
    const char *calibration;
    uint64_t calibration_tokens;
    pi_progress_fn progress_fn;
    void *progress_user;
    /* Optional caller buffer that receives the error message on failure. */
    char *errbuf;
    size_t errbuf_cap;
    /* Optional: receives per layer the relative RMS error of ffn_down_t against the
     * dequantized ffn_down, sqrt(sum (d' - d)^2 / sum d^2) (0 for an exact copy);
     * n_thresholds doubles. Borrowed for the call. */
    double *down_error;
    /* What the thresholds apply to, PI_SPARSIFY_*: PI_SPARSIFY_CATS (default) |act(gate
     * . x)|, PI_SPARSIFY_TEAL the intermediate |act(gate . x) * (up . x)| (calibrate
     * with pi_ctx_params.gate_histogram = PI_HIST_INTER). Recorded as
     * powerinfer.sparsify.method "cats" or "teal". Since: 0.1 */
    uint32_t method;
    uint32_t reserved0; /* zero (fills what would be padding, see ABI.md) */
    /* Optional neuron order, [n_layer][n_ff]: row i of layer l's ffn_gate, ffn_up and
     * ffn_down_t in the output is the input's neuron neuron_order[l * n_ff + i] (each
     * layer a permutation of 0 .. n_ff - 1, PI_ERR_INVALID_ARG otherwise), e.g. hottest
     * first (pi-sparsify --order-stats) so that the neurons most tokens use lie together.
     * The FFN computes the same sum in another order. Recorded as
     * powerinfer.sparsify.neuron_order (I32[n_layer * n_ff], the same array), which maps
     * the output's neuron ids back to the input's (statistics and plans of the input do
     * not apply to the output as they are). NULL (default): the input's order. Borrowed
     * for the call. Since: 0.1 */
    const int32_t *neuron_order;
    /* Non-zero: also keep blk.N.ffn_down.weight as it is, beside ffn_down_t, so that
     * prompts (and decode steps that keep most neurons) run the down projection as the
     * dense file does, through the gemm over the thresholded activations (zeros where
     * a neuron is dropped), which costs per multiply-add about half what the rows of
     * ffn_down_t do; the file grows by the down projections' bytes (about a fifth of a
     * Llama). Dense FFN layers only, and no neuron_order (ffn_down's columns would have
     * to be requantized): PI_ERR_UNSUPPORTED otherwise. Default 0. Since: 0.1 */
    uint32_t keep_down;
    uint32_t reserved1; /* zero (fills what would be padding, see ABI.md) */
} pi_sparsify_params;

/* pi_sparsify_params.method. */
enum {
    PI_SPARSIFY_CATS = 0,
    PI_SPARSIFY_TEAL = 1
};

/* Fill `params` with the defaults. PI_OK or PI_ERR_INVALID_ARG. Since: 0.1 */
PI_API int pi_sparsify_default_params(pi_sparsify_params *params);

/* Write the sparse-capable copy of the model file at in_path to out_path (both
 * borrowed for the call), through a temporary file renamed into place when complete
 * (as pi_model_quantize). Memory: the metadata, and one layer's down projection as
 * floats twice. Returns PI_OK; PI_ERR_INVALID_ARG (NULL path, out_path naming the
 * input, no thresholds or not n_layer of them, a non-finite one, sparsity outside
 * [0, 1), a down_type not listed); PI_ERR_UNSUPPORTED (a PowerInfer or already
 * sparsified file, an FFN that is not gated, experts, FFN biases or a post-FFN norm,
 * a down type that cannot be read, a down_type whose block does not divide n_embd,
 * keep_down with experts or a neuron_order);
 * PI_ERR_FORMAT (malformed input, or not a model this library runs); PI_ERR_IO;
 * PI_ERR_NOMEM; PI_ERR_INTERNAL; PI_ERR_ABORTED. Since: 0.1 */
PI_API int pi_model_sparsify(const char *in_path, const char *out_path,
                             const pi_sparsify_params *params);

#ifdef __cplusplus
}
#endif

#endif /* POWERINFER_H */
