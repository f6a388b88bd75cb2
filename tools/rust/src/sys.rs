//! Raw declarations of `include/powerinfer.h`, written by hand from the header.
//!
//! Everything here mirrors the C API one to one: the opaque handle types, the params
//! structs (`#[repr(C)]`, the header's field order and types), the constants and every
//! exported function. The header is the manual; the doc comments here only point at
//! it. All functions are `unsafe`: the caller upholds the ownership rules the header
//! states for each pointer. The safe wrapper is the crate root.
//!
//! Type mapping: `uint32_t` -> `u32`, `int32_t` -> `i32`, `int64_t` -> `i64`,
//! `uint64_t` -> `u64`, `size_t` -> `usize`, `int` -> `c_int`, `unsigned` -> `c_uint`,
//! a C function pointer -> `Option<unsafe extern "C" fn(..)>` (NULL is `None`).

#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

// ---- Versions -----------------------------------------------------------------------

pub const PI_VERSION_MAJOR: c_uint = 0;
pub const PI_VERSION_MINOR: c_uint = 1;
pub const PI_VERSION_PATCH: c_uint = 0;
pub const PI_VERSION_NUMBER: c_uint =
    PI_VERSION_MAJOR * 10000 + PI_VERSION_MINOR * 100 + PI_VERSION_PATCH;
pub const PI_ABI_VERSION: c_uint = 1;

// ---- Status codes -------------------------------------------------------------------

pub const PI_OK: c_int = 0;
pub const PI_ERR_INVALID_ARG: c_int = -1;
pub const PI_ERR_NOMEM: c_int = -2;
pub const PI_ERR_IO: c_int = -3;
pub const PI_ERR_FORMAT: c_int = -4;
pub const PI_ERR_UNSUPPORTED: c_int = -5;
pub const PI_ERR_ABORTED: c_int = -6;
pub const PI_ERR_NOT_FOUND: c_int = -7;
pub const PI_ERR_TYPE: c_int = -8;
pub const PI_ERR_RANGE: c_int = -9;
pub const PI_ERR_INTERNAL: c_int = -10;
pub const PI_ERR_NUMERIC: c_int = -11;

// ---- Logging ------------------------------------------------------------------------

pub const PI_LOG_DEBUG: c_int = 0;
pub const PI_LOG_INFO: c_int = 1;
pub const PI_LOG_WARN: c_int = 2;
pub const PI_LOG_ERROR: c_int = 3;

/// `typedef void (*pi_log_fn)(void *user, int level, const char *msg);`
pub type pi_log_fn =
    Option<unsafe extern "C" fn(user: *mut c_void, level: c_int, msg: *const c_char)>;
/// `typedef int (*pi_progress_fn)(void *user, float fraction);`
pub type pi_progress_fn = Option<unsafe extern "C" fn(user: *mut c_void, fraction: f32) -> c_int>;

// ---- Tensor element types (GGUF ids) ------------------------------------------------

pub const PI_TYPE_F32: c_int = 0;
pub const PI_TYPE_F16: c_int = 1;
pub const PI_TYPE_Q4_0: c_int = 2;
pub const PI_TYPE_Q4_1: c_int = 3;
pub const PI_TYPE_Q5_0: c_int = 6;
pub const PI_TYPE_Q5_1: c_int = 7;
pub const PI_TYPE_Q8_0: c_int = 8;
pub const PI_TYPE_Q8_1: c_int = 9;
pub const PI_TYPE_Q2_K: c_int = 10;
pub const PI_TYPE_Q3_K: c_int = 11;
pub const PI_TYPE_Q4_K: c_int = 12;
pub const PI_TYPE_Q5_K: c_int = 13;
pub const PI_TYPE_Q6_K: c_int = 14;
pub const PI_TYPE_Q8_K: c_int = 15;
pub const PI_TYPE_I8: c_int = 24;
pub const PI_TYPE_I16: c_int = 25;
pub const PI_TYPE_I32: c_int = 26;
pub const PI_TYPE_I64: c_int = 27;
pub const PI_TYPE_F64: c_int = 28;
pub const PI_TYPE_BF16: c_int = 30;

// ---- Metadata value types (GGUF ids) ------------------------------------------------

pub const PI_META_U8: c_int = 0;
pub const PI_META_I8: c_int = 1;
pub const PI_META_U16: c_int = 2;
pub const PI_META_I16: c_int = 3;
pub const PI_META_U32: c_int = 4;
pub const PI_META_I32: c_int = 5;
pub const PI_META_F32: c_int = 6;
pub const PI_META_BOOL: c_int = 7;
pub const PI_META_STRING: c_int = 8;
pub const PI_META_ARRAY: c_int = 9;
pub const PI_META_U64: c_int = 10;
pub const PI_META_I64: c_int = 11;
pub const PI_META_F64: c_int = 12;

// ---- Opaque handles -----------------------------------------------------------------
//
// Incomplete C structs: zero-sized, not constructible outside this module, and (by the
// PhantomData of a raw pointer) neither Send, Sync nor Unpin, as the nomicon advises.

macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}
opaque!(pi_model, pi_ctx, pi_stats, pi_sampler, pi_detok, pi_plan, pi_grammar, pi_chat_template);

// ---- Model --------------------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pi_model_params {
    pub struct_size: u32,
    pub metadata_only: i32,
    pub log_fn: pi_log_fn,
    pub log_user: *mut c_void,
    pub log_level: i32,
    pub progress_fn: pi_progress_fn,
    pub progress_user: *mut c_void,
    pub errbuf: *mut c_char,
    pub errbuf_cap: usize,
    pub load_mode: i32,
    pub lock_memory: i32,
}

pub const PI_LOAD_MMAP: c_int = 0;
pub const PI_LOAD_READ: c_int = 1;

// ---- Tokenizer ----------------------------------------------------------------------

pub const PI_TOKENIZE_ADD_SPECIAL: u32 = 1 << 0;
pub const PI_TOKENIZE_PARSE_SPECIAL: u32 = 1 << 1;
pub const PI_PIECE_SPECIAL: u32 = 1 << 0;

/// `typedef int (*pi_text_fn)(void *user, const char *text, size_t len);`
pub type pi_text_fn =
    Option<unsafe extern "C" fn(user: *mut c_void, text: *const c_char, len: usize) -> c_int>;

// ---- Chat ---------------------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pi_chat_message {
    pub role: *const c_char,
    pub content: *const c_char,
}

pub const PI_CHAT_AUTO: c_int = 0;
pub const PI_CHAT_CHATML: c_int = 1;
pub const PI_CHAT_LLAMA2: c_int = 2;
pub const PI_CHAT_LLAMA3: c_int = 3;
pub const PI_CHAT_GEMMA: c_int = 4;
pub const PI_CHAT_PHI3: c_int = 5;
pub const PI_CHAT_MISTRAL_V1: c_int = 6;
pub const PI_CHAT_MISTRAL_V3: c_int = 7;
pub const PI_CHAT_MISTRAL_V3_TEKKEN: c_int = 8;
pub const PI_CHAT_MISTRAL_V7: c_int = 9;
pub const PI_CHAT_FALCON: c_int = 10;
pub const PI_CHAT_JINJA: c_int = 11;

// ---- Context ------------------------------------------------------------------------

/// `typedef int (*pi_abort_fn)(void *user);`
pub type pi_abort_fn = Option<unsafe extern "C" fn(user: *mut c_void) -> c_int>;

/// `typedef void (*pi_ffn_probe_fn)(void *user, int64_t layer, int64_t n_tokens,
/// const float *h, const float *act, const float *inter);`
pub type pi_ffn_probe_fn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        layer: i64,
        n_tokens: i64,
        h: *const f32,
        act: *const f32,
        inter: *const f32,
    ),
>;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pi_ctx_params {
    pub struct_size: u32,
    pub n_ctx: u32,
    pub n_threads: u32,
    pub n_batch: u32,
    pub abort_fn: pi_abort_fn,
    pub abort_user: *mut c_void,
    pub f32_activations: u32,
    pub sparse_mode: u32,
    pub sparse_threshold_set: u32,
    pub sparse_threshold: f32,
    pub stats: u32,
    pub errbuf: *mut c_char,
    pub errbuf_cap: usize,
    pub device: u32,
    pub device_index: u32,
    pub device_budget: u64,
    pub plan_stats: *const pi_stats,
    pub plan_path: *const c_char,
    pub plan_file: u32,
    pub reserved0: u32,
    pub n_seq_max: u32,
    pub check_numerics: u32,
    pub embeddings: u32,
    pub reserved2: u32,
    pub sparse_thresholds: *const f32,
    pub n_sparse_thresholds: u64,
    pub sparse_threshold_scale: f32,
    pub gate_histogram: u32,
    pub device_graphs: u32,
    pub kv_type: u32,
    pub kv_type_v: u32,
    pub reserved3: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct pi_batch_entry {
    pub token: i32,
    pub seq: i32,
    pub pos: i32,
    pub logits: u32,
}

pub const PI_DEVICE_NONE: c_int = 0;
pub const PI_DEVICE_GPU: c_int = 1;
pub const PI_DEVICE_CPU: c_int = 2;

pub const PI_DEVICE_BUDGET_AUTO: u64 = u64::MAX;

pub const PI_PLAN_FILE_READ: c_int = 1;
pub const PI_PLAN_FILE_CACHE: c_int = 2;
pub const PI_PLAN_FILE_WRITE: c_int = 3;

pub const PI_EMBD_OFF: c_int = 0;
pub const PI_EMBD_ON: c_int = 1;
pub const PI_EMBD_ONLY: c_int = 2;

pub const PI_POOL_NONE: c_int = 0;
pub const PI_POOL_MEAN: c_int = 1;
pub const PI_POOL_CLS: c_int = 2;
pub const PI_POOL_LAST: c_int = 3;
pub const PI_POOL_RANK: c_int = 4;

pub const PI_SPARSE_AUTO: c_int = 0;
pub const PI_SPARSE_DENSE: c_int = 1;
pub const PI_SPARSE_PREDICTOR: c_int = 2;
pub const PI_SPARSE_ORACLE: c_int = 3;
pub const PI_SPARSE_THRESHOLD: c_int = 4;
// pi_ctx_params.gate_histogram
pub const PI_HIST_GATE: u32 = 1;
pub const PI_HIST_INTER: u32 = 2;
// pi_sparsify_params.method
pub const PI_SPARSIFY_CATS: u32 = 0;
pub const PI_SPARSIFY_TEAL: u32 = 1;

pub const PI_STATS_OFF: c_int = 0;
pub const PI_STATS_ON: c_int = 1;
pub const PI_STATS_DIAGNOSTIC: c_int = 2;

// ---- Activation statistics ----------------------------------------------------------

pub const PI_NEURON_PREDICTED: c_int = 0;
pub const PI_NEURON_ACTIVE: c_int = 1;
pub const PI_NEURON_BOTH: c_int = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct pi_layer_stats {
    pub struct_size: u32,
    pub reserved: u32,
    pub tokens_predicted: u64,
    pub tokens_observed: u64,
    pub predicted: f64,
    pub active: f64,
    pub both: f64,
    pub rows_gate_up: u64,
    pub rows_down: u64,
    pub bytes_ffn: u64,
    pub bytes_predictor: u64,
    pub ns_attention: u64,
    pub ns_predictor: u64,
    pub ns_ffn: u64,
}

// ---- Placement plans ----------------------------------------------------------------

pub const PI_PLAN_ATTENTION: c_int = 0;
pub const PI_PLAN_PREDICTOR: c_int = 1;
pub const PI_PLAN_FFN_NORM: c_int = 2;
pub const PI_PLAN_OUTPUT: c_int = 3;
pub const PI_PLAN_KV_CACHE: c_int = 4;
pub const PI_PLAN_NEURONS: c_int = 5;
pub const PI_PLAN_SCRATCH: c_int = 6;
pub const PI_PLAN_N_PARTS: c_int = 7;

pub const PI_PLAN_COMPUTED: c_int = 0;
pub const PI_PLAN_FROM_FILE: c_int = 1;
pub const PI_PLAN_CACHE_WRITTEN: c_int = 2;
pub const PI_PLAN_CACHE_UNWRITTEN: c_int = 3;

// ---- Sampling -----------------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pi_sampler_params {
    pub struct_size: u32,
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub penalty_last_n: i32,
    pub seed: u64,
}

// ---- Quantization -------------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pi_quantize_params {
    pub struct_size: u32,
    pub type_: u32,
    pub predictor_type: u32,
    pub keep_output: u32,
    pub n_threads: u32,
    pub progress_fn: pi_progress_fn,
    pub progress_user: *mut c_void,
    pub errbuf: *mut c_char,
    pub errbuf_cap: usize,
    pub allow_requantize: u32,
    pub reserved0: u32,
}

// ---- Sparsified files ---------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pi_sparsify_params {
    pub struct_size: u32,
    pub down_type: u32,
    pub thresholds: *const f32,
    pub n_thresholds: u64,
    pub sparsity: f32,
    pub n_threads: u32,
    pub calibration: *const c_char,
    pub calibration_tokens: u64,
    pub progress_fn: pi_progress_fn,
    pub progress_user: *mut c_void,
    pub errbuf: *mut c_char,
    pub errbuf_cap: usize,
    pub down_error: *mut f64,
    pub method: u32,
    pub reserved0: u32,
    pub neuron_order: *const i32,
    pub keep_down: u32,
    pub reserved1: u32,
}

// ---- Functions ----------------------------------------------------------------------

extern "C" {
    // Versions and statuses
    pub fn pi_version() -> c_uint;
    pub fn pi_version_string() -> *const c_char;
    pub fn pi_abi_version() -> c_uint;
    pub fn pi_status_str(status: c_int) -> *const c_char;
    pub fn pi_type_name(type_: c_int) -> *const c_char;

    // Model
    pub fn pi_model_default_params(params: *mut pi_model_params) -> c_int;
    pub fn pi_model_open(
        path: *const c_char,
        params: *const pi_model_params,
        out: *mut *mut pi_model,
    ) -> c_int;
    pub fn pi_model_close(model: *mut pi_model);
    pub fn pi_model_errmsg(model: *const pi_model) -> *const c_char;

    // Description
    pub fn pi_model_arch(model: *const pi_model) -> *const c_char;
    pub fn pi_model_is_sparse(model: *const pi_model) -> c_int;
    pub fn pi_model_n_layer(model: *const pi_model) -> i64;
    pub fn pi_model_n_embd(model: *const pi_model) -> i64;
    pub fn pi_model_n_ff(model: *const pi_model) -> i64;
    pub fn pi_model_n_head(model: *const pi_model) -> i64;
    pub fn pi_model_n_head_kv(model: *const pi_model) -> i64;
    pub fn pi_model_n_vocab(model: *const pi_model) -> i64;
    pub fn pi_model_n_ctx_train(model: *const pi_model) -> i64;
    pub fn pi_model_predictor_rank(model: *const pi_model, layer: i64) -> i64;
    pub fn pi_model_sparse_threshold(model: *const pi_model) -> f32;
    pub fn pi_model_n_params(model: *const pi_model) -> u64;
    pub fn pi_model_size_bytes(model: *const pi_model) -> u64;

    // Metadata
    pub fn pi_model_meta_count(model: *const pi_model) -> i64;
    pub fn pi_model_meta_key(model: *const pi_model, index: i64) -> *const c_char;
    pub fn pi_model_meta_type(
        model: *const pi_model,
        key: *const c_char,
        type_: *mut c_int,
        elem_type: *mut c_int,
        n_elem: *mut u64,
    ) -> c_int;
    pub fn pi_model_meta_int(model: *const pi_model, key: *const c_char, out: *mut i64) -> c_int;
    pub fn pi_model_meta_float(model: *const pi_model, key: *const c_char, out: *mut f64) -> c_int;
    pub fn pi_model_meta_str(
        model: *const pi_model,
        key: *const c_char,
        buf: *mut c_char,
        cap: usize,
    ) -> i64;
    pub fn pi_model_meta_arr_int(
        model: *const pi_model,
        key: *const c_char,
        index: u64,
        out: *mut i64,
    ) -> c_int;
    pub fn pi_model_meta_arr_float(
        model: *const pi_model,
        key: *const c_char,
        index: u64,
        out: *mut f64,
    ) -> c_int;
    pub fn pi_model_meta_arr_str(
        model: *const pi_model,
        key: *const c_char,
        index: u64,
        buf: *mut c_char,
        cap: usize,
    ) -> i64;
    pub fn pi_model_meta_to_string(
        model: *const pi_model,
        key: *const c_char,
        max_items: u32,
        buf: *mut c_char,
        cap: usize,
    ) -> i64;

    // Tensors
    pub fn pi_model_n_tensors(model: *const pi_model) -> i64;
    pub fn pi_model_tensor_find(
        model: *const pi_model,
        name: *const c_char,
        index: *mut i64,
    ) -> c_int;
    pub fn pi_model_tensor_name(model: *const pi_model, index: i64) -> *const c_char;
    pub fn pi_model_tensor_type(model: *const pi_model, index: i64) -> c_int;
    pub fn pi_model_tensor_shape(
        model: *const pi_model,
        index: i64,
        n_dims: *mut c_int,
        dims: *mut i64, // int64_t dims[4]
    ) -> c_int;
    pub fn pi_model_tensor_nbytes(model: *const pi_model, index: i64) -> u64;

    // Tokenizer
    pub fn pi_tokenize(
        model: *const pi_model,
        text: *const c_char,
        len: usize,
        tokens: *mut i32,
        cap: usize,
        flags: u32,
    ) -> i64;
    pub fn pi_token_to_piece(
        model: *const pi_model,
        token: i32,
        buf: *mut c_char,
        cap: usize,
        flags: u32,
    ) -> i64;
    pub fn pi_model_token_bos(model: *const pi_model) -> i32;
    pub fn pi_model_token_eos(model: *const pi_model) -> i32;
    pub fn pi_model_token_is_eog(model: *const pi_model, token: i32) -> c_int;
    pub fn pi_model_chat_template(model: *const pi_model, buf: *mut c_char, cap: usize) -> i64;

    // Streaming detokenizer
    pub fn pi_detok_create(model: *const pi_model, flags: u32, out: *mut *mut pi_detok) -> c_int;
    pub fn pi_detok_push(
        detok: *mut pi_detok,
        token: i32,
        fn_: pi_text_fn,
        user: *mut c_void,
    ) -> c_int;
    pub fn pi_detok_flush(detok: *mut pi_detok, fn_: pi_text_fn, user: *mut c_void) -> c_int;
    pub fn pi_detok_destroy(detok: *mut pi_detok);

    // Chat prompts
    pub fn pi_model_chat_format(model: *const pi_model) -> c_int;
    pub fn pi_chat_apply(
        model: *const pi_model,
        format: c_int,
        msgs: *const pi_chat_message,
        n: usize,
        add_assistant: c_int,
        buf: *mut c_char,
        cap: usize,
    ) -> i64;
    pub fn pi_chat_template_create(
        model: *const pi_model,
        source: *const c_char,
        out: *mut *mut pi_chat_template,
        errbuf: *mut c_char,
        errbuf_cap: usize,
    ) -> c_int;
    pub fn pi_chat_template_render(
        t: *const pi_chat_template,
        data_json: *const c_char,
        now: i64,
        buf: *mut c_char,
        cap: usize,
        errbuf: *mut c_char,
        errbuf_cap: usize,
    ) -> i64;
    pub fn pi_chat_template_destroy(t: *mut pi_chat_template);

    // Context
    pub fn pi_ctx_default_params(params: *mut pi_ctx_params) -> c_int;
    pub fn pi_ctx_create(
        model: *const pi_model,
        params: *const pi_ctx_params,
        out: *mut *mut pi_ctx,
    ) -> c_int;
    pub fn pi_ctx_destroy(ctx: *mut pi_ctx);
    pub fn pi_ctx_errmsg(ctx: *const pi_ctx) -> *const c_char;
    pub fn pi_ctx_model(ctx: *const pi_ctx) -> *const pi_model;
    pub fn pi_ctx_decode(ctx: *mut pi_ctx, tokens: *const i32, n_tokens: usize) -> c_int;
    pub fn pi_ctx_logits(ctx: *const pi_ctx) -> *const f32;
    pub fn pi_ctx_pos(ctx: *const pi_ctx) -> i64;
    pub fn pi_ctx_n_ctx(ctx: *const pi_ctx) -> i64;
    pub fn pi_ctx_reset(ctx: *mut pi_ctx) -> c_int;
    pub fn pi_ctx_truncate(ctx: *mut pi_ctx, n_keep: i64) -> c_int;
    pub fn pi_ctx_decode_batch(ctx: *mut pi_ctx, entries: *const pi_batch_entry, n: usize)
        -> c_int;
    pub fn pi_ctx_batch_logits(ctx: *const pi_ctx, i: usize) -> *const f32;
    pub fn pi_ctx_n_seq_max(ctx: *const pi_ctx) -> u32;
    pub fn pi_model_pooling(model: *const pi_model) -> c_int;
    pub fn pi_ctx_embedding(ctx: *const pi_ctx, i: usize) -> *const f32;
    pub fn pi_ctx_embedding_pooled(
        ctx: *const pi_ctx,
        seq: i32,
        pooling: c_int,
        normalize: u32,
        out: *mut f32,
        n: usize,
    ) -> c_int;
    pub fn pi_ctx_seq_len(ctx: *const pi_ctx, seq: i32) -> i64;
    pub fn pi_ctx_seq_remove(ctx: *mut pi_ctx, seq: i32, p0: i64, p1: i64) -> c_int;
    pub fn pi_ctx_seq_copy(ctx: *mut pi_ctx, src: i32, dst: i32) -> c_int;
    pub fn pi_ctx_seq_keep(ctx: *mut pi_ctx, seq: i32) -> c_int;
    pub fn pi_ctx_seq_clear(ctx: *mut pi_ctx, seq: i32) -> c_int;
    pub fn pi_ctx_state_save(
        ctx: *const pi_ctx,
        seq: i32,
        buf: *mut c_void,
        cap: usize,
        size: *mut usize,
    ) -> c_int;
    pub fn pi_ctx_state_load(ctx: *mut pi_ctx, seq: i32, buf: *const c_void, size: usize) -> c_int;
    pub fn pi_ctx_state_save_file(ctx: *const pi_ctx, seq: i32, path: *const c_char) -> c_int;
    pub fn pi_ctx_state_load_file(ctx: *mut pi_ctx, seq: i32, path: *const c_char) -> c_int;
    pub fn pi_ctx_set_threads(ctx: *mut pi_ctx, n_threads: u32) -> c_int;
    pub fn pi_ctx_set_ffn_probe(ctx: *mut pi_ctx, f: pi_ffn_probe_fn, user: *mut c_void) -> c_int;
    pub fn pi_ctx_n_threads(ctx: *const pi_ctx) -> u32;
    pub fn pi_ctx_sparse_mode(ctx: *const pi_ctx) -> c_int;
    pub fn pi_ctx_sparse_threshold(ctx: *const pi_ctx) -> f32;
    pub fn pi_ctx_sparse_threshold_source(ctx: *const pi_ctx) -> c_int;
    pub fn pi_ctx_sparse_thresholds(ctx: *const pi_ctx, out: *mut f32, cap: usize) -> i64;

    // Activation statistics
    pub fn pi_ctx_stats(ctx: *const pi_ctx) -> *const pi_stats;
    pub fn pi_ctx_stats_reset(ctx: *mut pi_ctx) -> c_int;
    pub fn pi_stats_n_layer(stats: *const pi_stats) -> i64;
    pub fn pi_stats_n_ff(stats: *const pi_stats) -> i64;
    pub fn pi_stats_layer(stats: *const pi_stats, layer: i64, out: *mut pi_layer_stats) -> c_int;
    pub fn pi_stats_n_expert(stats: *const pi_stats) -> i64;
    pub fn pi_stats_experts(
        stats: *const pi_stats,
        layer: i64,
        kind: c_int,
        out: *mut f64,
        n: usize,
    ) -> c_int;
    pub fn pi_stats_neurons(
        stats: *const pi_stats,
        layer: i64,
        kind: c_int,
        out: *mut f64,
        n: usize,
    ) -> c_int;
    pub fn pi_stats_gate_histogram(
        stats: *const pi_stats,
        layer: i64,
        out: *mut u64,
        n: usize,
    ) -> c_int;
    pub fn pi_stats_gate_quantile(stats: *const pi_stats, layer: i64, q: f64, out: *mut f32)
        -> c_int;
    pub fn pi_stats_save(
        stats: *const pi_stats,
        path: *const c_char,
        errbuf: *mut c_char,
        errbuf_cap: usize,
    ) -> c_int;
    pub fn pi_stats_load(
        path: *const c_char,
        out: *mut *mut pi_stats,
        errbuf: *mut c_char,
        errbuf_cap: usize,
    ) -> c_int;
    pub fn pi_stats_free(stats: *mut pi_stats);

    // Placement plans
    pub fn pi_model_plan(
        model: *const pi_model,
        params: *const pi_ctx_params,
        out: *mut *mut pi_plan,
    ) -> c_int;
    pub fn pi_ctx_plan(ctx: *const pi_ctx) -> *const pi_plan;
    pub fn pi_plan_budget(plan: *const pi_plan) -> u64;
    pub fn pi_plan_bytes(plan: *const pi_plan, part: c_int) -> u64;
    pub fn pi_plan_n_layer(plan: *const pi_plan) -> i64;
    pub fn pi_plan_n_ff(plan: *const pi_plan) -> i64;
    pub fn pi_plan_layer_parts(plan: *const pi_plan, layer: i64) -> u32;
    pub fn pi_plan_layer_neurons(
        plan: *const pi_plan,
        layer: i64,
        mask: *mut u8,
        cap: usize,
    ) -> i64;
    pub fn pi_plan_layer_experts(
        plan: *const pi_plan,
        layer: i64,
        mask: *mut u8,
        cap: usize,
    ) -> i64;
    pub fn pi_plan_output_on_device(plan: *const pi_plan) -> c_int;
    pub fn pi_plan_kv_on_device(plan: *const pi_plan) -> c_int;
    pub fn pi_plan_source(plan: *const pi_plan) -> c_int;
    pub fn pi_plan_describe(plan: *const pi_plan, buf: *mut c_char, cap: usize) -> i64;
    pub fn pi_plan_save(plan: *const pi_plan, path: *const c_char) -> c_int;
    pub fn pi_plan_free(plan: *mut pi_plan);

    // Sampling
    pub fn pi_sampler_default_params(params: *mut pi_sampler_params) -> c_int;
    pub fn pi_sampler_create(
        model: *const pi_model,
        params: *const pi_sampler_params,
        out: *mut *mut pi_sampler,
    ) -> c_int;
    pub fn pi_sampler_destroy(sampler: *mut pi_sampler);
    pub fn pi_sample(sampler: *mut pi_sampler, ctx: *const pi_ctx, token: *mut i32) -> c_int;
    pub fn pi_sample_logits(
        sampler: *mut pi_sampler,
        logits: *const f32,
        n_vocab: i64,
        token: *mut i32,
    ) -> c_int;
    pub fn pi_sampler_accept(sampler: *mut pi_sampler, token: i32) -> c_int;
    pub fn pi_sampler_reset(sampler: *mut pi_sampler) -> c_int;

    // Grammars
    pub fn pi_grammar_create(
        model: *const pi_model,
        gbnf: *const c_char,
        len: usize,
        root: *const c_char,
        out: *mut *mut pi_grammar,
        err: *mut c_char,
        err_cap: usize,
    ) -> c_int;
    pub fn pi_grammar_destroy(grammar: *mut pi_grammar);
    pub fn pi_grammar_errmsg(grammar: *const pi_grammar) -> *const c_char;
    pub fn pi_grammar_clone(grammar: *const pi_grammar, out: *mut *mut pi_grammar) -> c_int;
    pub fn pi_grammar_reset(grammar: *mut pi_grammar) -> c_int;
    pub fn pi_grammar_complete(grammar: *const pi_grammar) -> c_int;
    pub fn pi_grammar_mask(grammar: *mut pi_grammar, logits: *mut f32, n_vocab: i64) -> i64;
    pub fn pi_grammar_accept(grammar: *mut pi_grammar, token: i32) -> c_int;
    pub fn pi_grammar_accept_text(
        grammar: *mut pi_grammar,
        text: *const c_char,
        len: usize,
    ) -> c_int;

    // Quantization
    pub fn pi_quantize_default_params(params: *mut pi_quantize_params) -> c_int;
    pub fn pi_model_quantize(
        in_path: *const c_char,
        out_path: *const c_char,
        params: *const pi_quantize_params,
    ) -> c_int;

    // Sparsified files
    pub fn pi_sparsify_default_params(params: *mut pi_sparsify_params) -> c_int;
    pub fn pi_model_sparsify(
        in_path: *const c_char,
        out_path: *const c_char,
        params: *const pi_sparsify_params,
    ) -> c_int;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, size_of};

    /// Byte offset of a field, computed on a zeroed value (every field of these structs
    /// is valid when all bits are zero: integers, floats, nullable pointers, `Option` of
    /// function pointers).
    macro_rules! offset_of {
        ($t:ty, $f:ident) => {{
            // SAFETY: all-zero bits are a valid value of each params struct (see above).
            let v: $t = unsafe { std::mem::zeroed() };
            (&v.$f as *const _ as usize) - (&v as *const $t as usize)
        }};
    }

    /// The sizes tests/abi/test_api.c pins with _Static_assert (x86-64 and every other
    /// LP64 target), plus those of the structs it does not pin, computed from the C
    /// layout rules (and checked against a C compiler when written).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn params_layout_matches_header() {
        assert_eq!(size_of::<pi_model_params>(), 72);
        assert_eq!(align_of::<pi_model_params>(), 8);
        assert_eq!(offset_of!(pi_model_params, struct_size), 0);
        assert_eq!(offset_of!(pi_model_params, log_fn), 8);
        assert_eq!(offset_of!(pi_model_params, errbuf_cap), 56);
        assert_eq!(offset_of!(pi_model_params, load_mode), 64);
        assert_eq!(offset_of!(pi_model_params, lock_memory), 68);

        assert_eq!(size_of::<pi_ctx_params>(), 168);
        assert_eq!(align_of::<pi_ctx_params>(), 8);
        assert_eq!(offset_of!(pi_ctx_params, f32_activations), 32);
        assert_eq!(offset_of!(pi_ctx_params, sparse_mode), 36);
        assert_eq!(offset_of!(pi_ctx_params, stats), 48);
        assert_eq!(offset_of!(pi_ctx_params, errbuf_cap), 64);
        assert_eq!(offset_of!(pi_ctx_params, device), 72);
        assert_eq!(offset_of!(pi_ctx_params, device_index), 76);
        assert_eq!(offset_of!(pi_ctx_params, device_budget), 80);
        assert_eq!(offset_of!(pi_ctx_params, plan_stats), 88);
        assert_eq!(offset_of!(pi_ctx_params, plan_path), 96);
        assert_eq!(offset_of!(pi_ctx_params, plan_file), 104);
        assert_eq!(offset_of!(pi_ctx_params, n_seq_max), 112);
        assert_eq!(offset_of!(pi_ctx_params, check_numerics), 116);
        assert_eq!(offset_of!(pi_ctx_params, embeddings), 120);
        assert_eq!(offset_of!(pi_ctx_params, gate_histogram), 148);
        assert_eq!(offset_of!(pi_ctx_params, device_graphs), 152);
        assert_eq!(offset_of!(pi_ctx_params, kv_type), 156);
        assert_eq!(offset_of!(pi_ctx_params, kv_type_v), 160);
        assert_eq!(size_of::<pi_batch_entry>(), 16);

        assert_eq!(size_of::<pi_layer_stats>(), 104);
        assert_eq!(align_of::<pi_layer_stats>(), 8);
        assert_eq!(offset_of!(pi_layer_stats, ns_ffn), 96);

        assert_eq!(size_of::<pi_sampler_params>(), 48);
        assert_eq!(align_of::<pi_sampler_params>(), 8);
        assert_eq!(offset_of!(pi_sampler_params, seed), 40);

        assert_eq!(size_of::<pi_quantize_params>(), 64);
        assert_eq!(align_of::<pi_quantize_params>(), 8);
        assert_eq!(offset_of!(pi_quantize_params, progress_fn), 24);
        assert_eq!(offset_of!(pi_quantize_params, allow_requantize), 56);

        assert_eq!(size_of::<pi_chat_message>(), 16);
        assert_eq!(align_of::<pi_chat_message>(), 8);

        // A nullable C function pointer is one pointer wide.
        assert_eq!(size_of::<pi_log_fn>(), size_of::<*const c_void>());
    }

    /// The library fills struct_size with its own sizeof: equal to ours.
    #[test]
    fn default_params_struct_size_agrees_with_library() {
        // SAFETY: each call writes one whole struct of the type it is given; zeroed
        // values are valid starting points (see offset_of!).
        unsafe {
            let mut m: pi_model_params = std::mem::zeroed();
            assert_eq!(pi_model_default_params(&mut m), PI_OK);
            assert_eq!(m.struct_size as usize, size_of::<pi_model_params>());
            let mut c: pi_ctx_params = std::mem::zeroed();
            assert_eq!(pi_ctx_default_params(&mut c), PI_OK);
            assert_eq!(c.struct_size as usize, size_of::<pi_ctx_params>());
            assert_eq!(c.device, PI_DEVICE_NONE as u32);
            assert_eq!(c.device_budget, PI_DEVICE_BUDGET_AUTO);
            assert!(c.plan_stats.is_null() && c.plan_path.is_null());
            let mut s: pi_sampler_params = std::mem::zeroed();
            assert_eq!(pi_sampler_default_params(&mut s), PI_OK);
            assert_eq!(s.struct_size as usize, size_of::<pi_sampler_params>());
            assert_eq!(s.seed, 0x5eed);
            let mut q: pi_quantize_params = std::mem::zeroed();
            assert_eq!(pi_quantize_default_params(&mut q), PI_OK);
            assert_eq!(q.struct_size as usize, size_of::<pi_quantize_params>());
            assert_eq!(q.type_, PI_TYPE_Q4_0 as u32);
        }
    }

    #[test]
    fn versions_agree_with_library() {
        // SAFETY: no arguments; the library documents these as callable at any time.
        unsafe {
            assert_eq!(pi_version(), PI_VERSION_NUMBER);
            assert_eq!(pi_abi_version(), PI_ABI_VERSION);
        }
    }

    /// Every symbol the library exports (lib/libpowerinfer.symbols, the committed list
    /// tests/abi/check_symbols.py keeps equal to the header) is declared above.
    #[test]
    fn every_exported_symbol_is_declared() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let list = dir.join("../../lib/libpowerinfer.symbols");
        let symbols = std::fs::read_to_string(&list).unwrap_or_else(|e| {
            panic!("cannot read {} (this crate lives in tools/rust/): {e}", list.display())
        });
        let source = include_str!("sys.rs");
        let mut missing = Vec::new();
        for name in symbols.lines().map(str::trim) {
            if name.is_empty() || name.starts_with('#') {
                continue;
            }
            if !source.contains(&format!("pub fn {name}(")) {
                missing.push(name.to_owned());
            }
        }
        assert!(missing.is_empty(), "exported but not declared in sys.rs: {missing:?}");
    }
}
