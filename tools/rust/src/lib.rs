//! Rust bindings to libpowerinfer.
//!
//! [`sys`] holds the raw declarations of `include/powerinfer.h`; the rest of this crate
//! is a thin safe layer over them:
//!
//! * [`Model`]: an opened model file (open with [`Model::open`] or [`Model::builder`]);
//!   metadata, tensors, tokenizer and chat-template queries.
//! * [`Context`]: one sequence being decoded, or several decoded together in batches
//!   ([`BatchEntry`], [`Context::decode_batch`], the `seq_*` methods); its state saved
//!   and restored ([`Context::state_save`], [`Context::seq_state_save`], ...); borrows
//!   its model.
//! * [`Sampler`]: turns a context's logits (or any logits, e.g. one batch entry's)
//!   into the next token.
//! * [`StatsView`] / [`Stats`]: activation statistics of a context, or loaded from a
//!   side file.
//! * [`PlanView`] / [`Plan`]: hybrid CPU/device placement, of a context
//!   ([`Context::plan`]) or of a dry run ([`Model::plan`]).
//! * [`Error`]: the status code of a failed call, its name and a message.
//!
//! Threading follows the header's contract: a `Model` is immutable once open, so it is
//! `Send + Sync` and many `Context`s on many threads may share it; a `Context` (and a
//! `Sampler`, a `Detokenizer`) is used by one thread at a time, so it is `Send` but not
//! `Sync`. The model's own error message (`pi_model_errmsg`) belongs to whichever
//! thread failed last, so this crate never reads it: failures of model queries carry
//! the status and a description of the call; failures to open carry the message the
//! library wrote into a buffer for that call; context failures carry the context's
//! message, read right after the call by the thread that owns the context.
//!
//! ```no_run
//! let model = powerinfer::Model::open("model.gguf")?;
//! let mut ctx = powerinfer::Context::new(&model)?;
//! println!("{}", powerinfer::generate_greedy(&model, &mut ctx, "The capital of France is", 8)?);
//! # Ok::<(), powerinfer::Error>(())
//! ```
//!
//! A context cannot be shared between threads, nor outlive its model:
//!
//! ```compile_fail
//! fn shared<T: Sync>() {}
//! shared::<powerinfer::Context<'static>>();
//! ```
//! ```compile_fail
//! fn shared<T: Sync>() {}
//! shared::<powerinfer::Sampler<'static>>();
//! ```
//! ```compile_fail
//! let ctx = {
//!     let model = powerinfer::Model::open("m.gguf").unwrap();
//!     powerinfer::Context::new(&model).unwrap()
//! };
//! ```
//! ```compile_fail
//! # let model = powerinfer::Model::open("m.gguf").unwrap();
//! let mut ctx = powerinfer::Context::new(&model).unwrap();
//! let logits = ctx.logits();
//! ctx.decode(&[1]).unwrap(); // logits are borrowed until the next decode
//! println!("{}", logits[0]);
//! ```
//! ```compile_fail
//! # let model = powerinfer::Model::open("m.gguf").unwrap();
//! let mut ctx = powerinfer::Context::builder().n_seq_max(2).build(&model).unwrap();
//! let row = ctx.batch_logits(0).unwrap();
//! ctx.seq_clear(1).unwrap(); // so are a batch entry's
//! println!("{}", row[0]);
//! ```

pub mod sys;

use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};

// =====================================================================================
// Errors
// =====================================================================================

/// A failed call: the library's status code, its name and a message.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    status: i32,
    message: String,
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with `status` (a negative `PI_ERR_*`) and `message`.
    pub fn new(status: i32, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The status code, one of the negative `sys::PI_ERR_*` values.
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The library's short description of the status (`pi_status_str`), e.g.
    /// "invalid argument".
    pub fn name(&self) -> &'static str {
        status_str(self.status)
    }

    /// What went wrong, as the library (or this crate) described it; may be empty.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Failure of an argument this crate rejects before calling the library.
    fn invalid(message: impl Into<String>) -> Error {
        Error::new(sys::PI_ERR_INVALID_ARG, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.status)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("status", &self.status)
            .field("name", &self.name())
            .field("message", &self.message)
            .finish()
    }
}

impl std::error::Error for Error {}

/// `pi_status_str` as a `&'static str`.
pub fn status_str(status: i32) -> &'static str {
    // SAFETY: pi_status_str takes any int and returns a static NUL-terminated string,
    // never NULL, so the borrow may be 'static.
    let s = unsafe { CStr::from_ptr(sys::pi_status_str(status)) };
    s.to_str().unwrap_or("unknown status")
}

/// Turn a status (or a negative length) into a `Result`; `what` describes the call.
fn check(status: i64, what: impl FnOnce() -> String) -> Result<i64> {
    if status < 0 {
        Err(Error::new(status as i32, what()))
    } else {
        Ok(status)
    }
}

/// The message a library call wrote into an error buffer.
fn buf_message(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Copy a borrowed C string. `p` must be NULL or a valid NUL-terminated string.
unsafe fn cstr_to_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        Some(CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

fn c_string(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid(format!("{what} contains a NUL byte")))
}

fn c_path(path: &Path) -> Result<CString> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| Error::invalid(format!("path {} is not UTF-8", path.display())))?
        .as_bytes()
        .to_vec();
    CString::new(bytes)
        .map_err(|_| Error::invalid(format!("path {} contains a NUL byte", path.display())))
}

/// Call a (buf, cap) function of the library until the buffer is big enough; returns
/// the bytes without the terminating NUL, or the negative status.
fn fill_buffer(
    mut call: impl FnMut(*mut c_char, usize) -> i64,
) -> std::result::Result<Vec<u8>, i64> {
    let mut buf = vec![0u8; 256];
    loop {
        let n = call(buf.as_mut_ptr().cast(), buf.len());
        if n < 0 {
            return Err(n);
        }
        let n = n as usize;
        if n < buf.len() {
            buf.truncate(n);
            return Ok(buf);
        }
        buf.resize(n + 1, 0);
    }
}

const ERRBUF_CAP: usize = 1024;

// =====================================================================================
// Versions and names
// =====================================================================================

/// Version of the loaded library as MAJOR*10000 + MINOR*100 + PATCH
/// (compare with [`sys::PI_VERSION_NUMBER`]).
pub fn version() -> u32 {
    // SAFETY: no arguments; callable from any thread at any time.
    unsafe { sys::pi_version() }
}

/// The loaded library's version as "MAJOR.MINOR.PATCH".
pub fn version_string() -> &'static str {
    // SAFETY: returns static storage, never NULL.
    unsafe { CStr::from_ptr(sys::pi_version_string()) }.to_str().unwrap_or("")
}

/// ABI version of the loaded library (compare with [`sys::PI_ABI_VERSION`]).
pub fn abi_version() -> u32 {
    // SAFETY: no arguments; callable from any thread at any time.
    unsafe { sys::pi_abi_version() }
}

/// The GGUF name of a tensor type id ("F16", "Q4_0", ...), or `None` if unknown.
pub fn type_name(type_id: i32) -> Option<&'static str> {
    // SAFETY: takes any int; returns NULL or a static NUL-terminated string.
    let p = unsafe { sys::pi_type_name(type_id) };
    if p.is_null() {
        None
    } else {
        // SAFETY: non-NULL static string (see above).
        unsafe { CStr::from_ptr(p) }.to_str().ok()
    }
}

// =====================================================================================
// Enumerations
// =====================================================================================

/// Severity of a log line (`PI_LOG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

impl LogLevel {
    fn from_raw(level: c_int) -> LogLevel {
        match level {
            sys::PI_LOG_DEBUG => LogLevel::Debug,
            sys::PI_LOG_INFO => LogLevel::Info,
            sys::PI_LOG_WARN => LogLevel::Warn,
            _ => LogLevel::Error,
        }
    }
}

/// How a context computes the FFN of a PowerInfer model (`PI_SPARSE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SparseMode {
    Auto = 0,
    Dense = 1,
    Predictor = 2,
    Oracle = 3,
    Threshold = 4,
}

/// Whether a context keeps final hidden states (`PI_EMBD_*`): `On` keeps them
/// ([`Context::embedding`], [`Context::embedding_pooled`]) beside the logits, `Only`
/// computes no logits at all (the LM head is skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Embeddings {
    Off = 0,
    On = 1,
    Only = 2,
}

/// How hidden states are pooled (`PI_POOL_*`, the values of GGUF's
/// `{arch}.pooling_type`). [`Context::embedding_pooled`] computes `Mean`, `Cls` (the
/// first token) and `Last`; `None` and `Rank` are only reported by [`Model::pooling`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pooling {
    None = 0,
    Mean = 1,
    Cls = 2,
    Last = 3,
    Rank = 4,
}

/// Which statistics a context collects (`PI_STATS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatsLevel {
    Off = 0,
    On = 1,
    Diagnostic = 2,
}

/// Which per-neuron count [`StatsView::neurons`] returns (`PI_NEURON_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NeuronKind {
    Predicted = 0,
    Active = 1,
    Both = 2,
}

/// Which per-expert value [`Stats::experts`] returns (`PI_EXPERT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpertKind {
    /// Tokens whose router chose the expert.
    Selected = 0,
    /// The sum of the router weights it got.
    Weight = 1,
}

/// Where a context puts the part of the model its plan places (`PI_DEVICE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// CPU only (the default).
    None = 0,
    /// The CUDA or HIP backend compiled into the library.
    Gpu = 1,
    /// A second CPU backend acting as the device: checks plans without a GPU.
    Cpu = 2,
}

/// What a context does with its plan file (`PI_PLAN_FILE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanFile {
    /// Take the FFN neurons from the file (PowerInfer's `.gpuidx` or [`PlanView::save`]'s).
    Read = 1,
    /// Reuse the file when it was made for this model, statistics and budget; else plan
    /// and rewrite it.
    Cache = 2,
    /// Plan, then write the file.
    Write = 3,
}

/// A part of a plan (`PI_PLAN_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanPart {
    Attention = 0,
    Predictor = 1,
    FfnNorm = 2,
    Output = 3,
    KvCache = 4,
    Neurons = 5,
    Scratch = 6,
}

impl PlanPart {
    /// Every part, in the header's order.
    pub const ALL: [PlanPart; 7] = [
        PlanPart::Attention,
        PlanPart::Predictor,
        PlanPart::FfnNorm,
        PlanPart::Output,
        PlanPart::KvCache,
        PlanPart::Neurons,
        PlanPart::Scratch,
    ];
}

/// Where a plan's neurons came from (`pi_plan_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanSource {
    /// Planned now.
    Computed,
    /// Read from the plan file.
    FromFile,
    /// Planned now and written to the plan file.
    CacheWritten,
    /// Planned now; the plan file could not be written.
    CacheUnwritten,
}

/// A chat prompt format (`PI_CHAT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChatFormat {
    /// From the model's chat template.
    Auto = 0,
    ChatMl = 1,
    Llama2 = 2,
    Llama3 = 3,
    /// Gemma 2 / 3.
    Gemma = 4,
    /// Phi-3 / 3.5.
    Phi3 = 5,
    /// Mistral 7B v0.2: " [INST] ... [/INST]".
    MistralV1 = 6,
    /// Mistral 7B v0.3: "[INST] ...[/INST]".
    MistralV3 = 7,
    /// Mistral Nemo: "[INST]...[/INST]".
    MistralV3Tekken = 8,
    /// Mistral Small 3: "[SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST]".
    MistralV7 = 9,
    /// Falcon-instruct: "User: ...\nFalcon:".
    Falcon = 10,
    /// The model's own chat template, executed by the library's Jinja interpreter
    /// (see [`ChatTemplate`]).
    Jinja = 11,
}

/// Flags of [`Model::tokenize`] (`PI_TOKENIZE_*`); combine with `|`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TokenizeFlags(pub u32);

impl TokenizeFlags {
    /// Plain text: no BOS/EOS, special-token text tokenized as text.
    pub const NONE: TokenizeFlags = TokenizeFlags(0);
    /// Add BOS (and EOS) as the model's metadata asks.
    pub const ADD_SPECIAL: TokenizeFlags = TokenizeFlags(sys::PI_TOKENIZE_ADD_SPECIAL);
    /// Recognise control-token text ("<|im_start|>") as single tokens.
    pub const PARSE_SPECIAL: TokenizeFlags = TokenizeFlags(sys::PI_TOKENIZE_PARSE_SPECIAL);
}

impl std::ops::BitOr for TokenizeFlags {
    type Output = TokenizeFlags;
    fn bitor(self, rhs: TokenizeFlags) -> TokenizeFlags {
        TokenizeFlags(self.0 | rhs.0)
    }
}

// =====================================================================================
// Model
// =====================================================================================

type LogCallback = dyn Fn(LogLevel, &str) + Send + Sync;

/// An opened, validated model file. Immutable: share it between threads freely
/// (`&Model` is `Send`), e.g. one [`Context`] per thread.
pub struct Model {
    raw: NonNull<sys::pi_model>,
    /// The log sink the library keeps calling until the model is closed; dropped after
    /// `pi_model_close` (see `Drop`). Double-boxed so the user pointer is thin.
    _log: Option<Box<Box<LogCallback>>>,
}

// SAFETY: the header's threading contract: a pi_model is immutable once open and all
// query functions may be called from many threads at once; pi_model_close (Drop) takes
// the model by value, so it cannot race. The one piece of per-call mutable state,
// pi_model_errmsg, is never read by this crate. The log callback is Send + Sync.
unsafe impl Send for Model {}
// SAFETY: see Send.
unsafe impl Sync for Model {}

/// Options for opening a model; see `pi_model_params` in the header.
#[derive(Default)]
pub struct ModelBuilder<'p> {
    metadata_only: bool,
    no_mmap: bool,
    mlock: bool,
    log: Option<(Box<LogCallback>, LogLevel)>,
    progress: Option<&'p mut dyn FnMut(f32) -> bool>,
}

impl<'p> ModelBuilder<'p> {
    /// The defaults: full open, no logging, no progress.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only check the container and read metadata and tensors; any architecture is
    /// accepted, hyper-parameter queries return 0, and contexts cannot be created.
    pub fn metadata_only(mut self, yes: bool) -> Self {
        self.metadata_only = yes;
        self
    }

    /// Read the whole file into memory owned by the model (`PI_LOAD_READ`) instead of
    /// mapping it: slower to open, but truncating or rewriting the file afterwards
    /// cannot affect the model (with a mapping, truncation raises SIGBUS).
    pub fn no_mmap(mut self, yes: bool) -> Self {
        self.no_mmap = yes;
        self
    }

    /// Lock the model's bytes in RAM (`lock_memory`). When the system refuses, the
    /// model opens anyway and a warning goes to the log sink.
    pub fn mlock(mut self, yes: bool) -> Self {
        self.mlock = yes;
        self
    }

    /// Receive the library's log lines at `min_level` and above. The sink is called on
    /// the thread that makes the library call, for as long as the model is open.
    pub fn log(
        mut self,
        min_level: LogLevel,
        sink: impl Fn(LogLevel, &str) + Send + Sync + 'static,
    ) -> Self {
        self.log = Some((Box::new(sink), min_level));
        self
    }

    /// Called with the fraction done while the model opens; return `false` to stop,
    /// which fails the open with `PI_ERR_ABORTED`.
    pub fn progress(mut self, f: &'p mut dyn FnMut(f32) -> bool) -> Self {
        self.progress = Some(f);
        self
    }

    /// Open and validate the model file at `path`.
    pub fn open(self, path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        let cpath = c_path(path)?;
        let mut params = default_model_params();
        let mut errbuf = vec![0u8; ERRBUF_CAP];
        params.metadata_only = self.metadata_only as i32;
        params.load_mode = if self.no_mmap { sys::PI_LOAD_READ } else { sys::PI_LOAD_MMAP };
        params.lock_memory = self.mlock as i32;
        params.errbuf = errbuf.as_mut_ptr().cast();
        params.errbuf_cap = errbuf.len();

        let log = self.log.map(|(sink, level)| (Box::new(sink), level));
        if let Some((sink, level)) = &log {
            params.log_fn = Some(log_trampoline);
            params.log_user = (&**sink as *const Box<LogCallback>).cast_mut().cast();
            params.log_level = *level as i32;
        }
        let mut progress = self.progress;
        if let Some(f) = progress.as_mut() {
            params.progress_fn = Some(progress_trampoline);
            params.progress_user = (f as *mut &mut dyn FnMut(f32) -> bool).cast();
        }

        let mut out = ptr::null_mut();
        // SAFETY: cpath and params are valid for the call; errbuf (cap bytes) and the
        // progress closure outlive the call; the log sink is heap-allocated and moved
        // into the returned Model, which keeps it until after pi_model_close.
        let status = unsafe { sys::pi_model_open(cpath.as_ptr(), &params, &mut out) };
        match NonNull::new(out) {
            Some(raw) if status == sys::PI_OK => Ok(Model { raw, _log: log.map(|(s, _)| s) }),
            _ => {
                let mut message = buf_message(&errbuf);
                if message.is_empty() {
                    message = format!("cannot open {}", path.display());
                }
                let status = if status < 0 { status } else { sys::PI_ERR_INTERNAL };
                Err(Error::new(status, message))
            }
        }
    }
}

fn default_model_params() -> sys::pi_model_params {
    // SAFETY: all-zero bits are a valid pi_model_params (integers, NULL pointers,
    // None callbacks); pi_model_default_params then fills the whole struct.
    unsafe {
        let mut p: sys::pi_model_params = std::mem::zeroed();
        sys::pi_model_default_params(&mut p);
        p
    }
}

unsafe extern "C" fn log_trampoline(user: *mut c_void, level: c_int, msg: *const c_char) {
    // A panic must not unwind into C; a panicking sink loses its line.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: user is the Box<LogCallback> the Model owns (alive while the library
        // can log); msg is a NUL-terminated string borrowed for the call.
        let sink = &*(user as *const Box<LogCallback>);
        let text = CStr::from_ptr(msg).to_string_lossy();
        sink(LogLevel::from_raw(level), &text);
    }));
}

unsafe extern "C" fn progress_trampoline(user: *mut c_void, fraction: f32) -> c_int {
    // SAFETY: user points at the `&mut dyn FnMut` borrowed for the open call, which
    // runs on this thread; a panic stops the open instead of unwinding into C.
    let f = &mut *(user as *mut &mut dyn FnMut(f32) -> bool);
    match catch_unwind(AssertUnwindSafe(|| f(fraction))) {
        Ok(true) => 0,
        _ => 1,
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: we own the model; every Context, Sampler and Detokenizer borrows it
        // (lifetime 'm), so none is alive. The log box is dropped after this.
        unsafe { sys::pi_model_close(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("arch", &self.arch())
            .field("n_layer", &self.n_layer())
            .field("n_vocab", &self.n_vocab())
            .finish()
    }
}

/// Query methods: thin forwards to the header's functions of the same name.
/// SAFETY (for every `unsafe` block below unless it says more): `self.raw` is a valid,
/// open model for the lifetime of `&self`, the queries are thread-safe per the header,
/// and C strings passed in live for the call.
impl Model {
    /// Open `path` with the default options. See [`Model::builder`] for more.
    pub fn open(path: impl AsRef<Path>) -> Result<Model> {
        ModelBuilder::new().open(path)
    }

    /// Options for opening a model.
    pub fn builder<'p>() -> ModelBuilder<'p> {
        ModelBuilder::new()
    }

    /// The raw handle, for calls through [`sys`]. Valid while `self` lives; do not close.
    pub fn as_ptr(&self) -> *const sys::pi_model {
        self.raw.as_ptr()
    }

    /// Dry run of hybrid placement: the plan a context built with `options` would run
    /// with (see [`ContextBuilder::plan`]).
    pub fn plan(&self, options: &ContextBuilder<'_>) -> Result<Plan<'_>> {
        options.plan(self)
    }

    /// general.architecture ("llama", "bamboo", ...), "" if absent.
    pub fn arch(&self) -> String {
        unsafe { cstr_to_string(sys::pi_model_arch(self.as_ptr())) }.unwrap_or_default()
    }
    /// Whether the file is a PowerInfer sparse model ("PWRI").
    pub fn is_sparse(&self) -> bool {
        unsafe { sys::pi_model_is_sparse(self.as_ptr()) != 0 }
    }
    pub fn n_layer(&self) -> i64 {
        unsafe { sys::pi_model_n_layer(self.as_ptr()) }
    }
    pub fn n_embd(&self) -> i64 {
        unsafe { sys::pi_model_n_embd(self.as_ptr()) }
    }
    pub fn n_ff(&self) -> i64 {
        unsafe { sys::pi_model_n_ff(self.as_ptr()) }
    }
    pub fn n_head(&self) -> i64 {
        unsafe { sys::pi_model_n_head(self.as_ptr()) }
    }
    pub fn n_head_kv(&self) -> i64 {
        unsafe { sys::pi_model_n_head_kv(self.as_ptr()) }
    }
    pub fn n_vocab(&self) -> i64 {
        unsafe { sys::pi_model_n_vocab(self.as_ptr()) }
    }
    pub fn n_ctx_train(&self) -> i64 {
        unsafe { sys::pi_model_n_ctx_train(self.as_ptr()) }
    }
    /// Rank of layer `layer`'s FFN predictor; 0 for a dense model or a bad layer.
    pub fn predictor_rank(&self, layer: i64) -> i64 {
        unsafe { sys::pi_model_predictor_rank(self.as_ptr(), layer) }
    }
    pub fn sparse_threshold(&self) -> f32 {
        unsafe { sys::pi_model_sparse_threshold(self.as_ptr()) }
    }
    /// Number of weights (elements of all tensors).
    pub fn n_params(&self) -> u64 {
        unsafe { sys::pi_model_n_params(self.as_ptr()) }
    }
    /// Bytes of tensor data in the file.
    pub fn size_bytes(&self) -> u64 {
        unsafe { sys::pi_model_size_bytes(self.as_ptr()) }
    }

    // ---- Metadata ----

    pub fn meta_count(&self) -> i64 {
        unsafe { sys::pi_model_meta_count(self.as_ptr()) }
    }
    /// Key of pair `index`, or `None` out of range.
    pub fn meta_key(&self, index: i64) -> Option<String> {
        unsafe { cstr_to_string(sys::pi_model_meta_key(self.as_ptr(), index)) }
    }
    /// Value of an integer or bool key.
    pub fn meta_int(&self, key: &str) -> Result<i64> {
        let k = c_string(key, "key")?;
        let mut v = 0i64;
        let st = unsafe { sys::pi_model_meta_int(self.as_ptr(), k.as_ptr(), &mut v) };
        check(st.into(), || format!("metadata key {key:?} as integer"))?;
        Ok(v)
    }
    /// Value of a float (or integer) key.
    pub fn meta_float(&self, key: &str) -> Result<f64> {
        let k = c_string(key, "key")?;
        let mut v = 0f64;
        let st = unsafe { sys::pi_model_meta_float(self.as_ptr(), k.as_ptr(), &mut v) };
        check(st.into(), || format!("metadata key {key:?} as float"))?;
        Ok(v)
    }
    /// Value of a string key (lossily decoded if the file's bytes are not UTF-8).
    pub fn meta_str(&self, key: &str) -> Result<String> {
        let k = c_string(key, "key")?;
        let bytes = fill_buffer(|buf, cap| unsafe {
            // SAFETY: buf has cap writable bytes (fill_buffer's contract).
            sys::pi_model_meta_str(self.as_ptr(), k.as_ptr(), buf, cap)
        })
        .map_err(|st| Error::new(st as i32, format!("metadata key {key:?} as string")))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
    /// Any value as printable text; arrays show at most `max_items` items (0: 16).
    pub fn meta_to_string(&self, key: &str, max_items: u32) -> Result<String> {
        let k = c_string(key, "key")?;
        let bytes = fill_buffer(|buf, cap| unsafe {
            // SAFETY: buf has cap writable bytes.
            sys::pi_model_meta_to_string(self.as_ptr(), k.as_ptr(), max_items, buf, cap)
        })
        .map_err(|st| Error::new(st as i32, format!("metadata key {key:?}")))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    // ---- Tensors ----

    pub fn n_tensors(&self) -> i64 {
        unsafe { sys::pi_model_n_tensors(self.as_ptr()) }
    }
    /// Name of tensor `index`, or `None` out of range.
    pub fn tensor_name(&self, index: i64) -> Option<String> {
        unsafe { cstr_to_string(sys::pi_model_tensor_name(self.as_ptr(), index)) }
    }
    /// Index of the tensor called `name`.
    pub fn tensor_find(&self, name: &str) -> Result<i64> {
        let n = c_string(name, "tensor name")?;
        let mut index = 0i64;
        let st = unsafe { sys::pi_model_tensor_find(self.as_ptr(), n.as_ptr(), &mut index) };
        check(st.into(), || format!("tensor {name:?}"))?;
        Ok(index)
    }
    /// Type id of tensor `index` (see [`type_name`]).
    pub fn tensor_type(&self, index: i64) -> Result<i32> {
        let st = unsafe { sys::pi_model_tensor_type(self.as_ptr(), index) };
        Ok(check(st.into(), || format!("type of tensor {index}"))? as i32)
    }
    /// Shape of tensor `index` in GGUF order (1 to 4 dimensions).
    pub fn tensor_shape(&self, index: i64) -> Result<Vec<i64>> {
        let mut n_dims: c_int = 0;
        let mut dims = [0i64; 4];
        // SAFETY: dims is the int64_t[4] the header asks for.
        let st = unsafe {
            sys::pi_model_tensor_shape(self.as_ptr(), index, &mut n_dims, dims.as_mut_ptr())
        };
        check(st.into(), || format!("shape of tensor {index}"))?;
        Ok(dims[..(n_dims.clamp(0, 4) as usize)].to_vec())
    }
    /// Bytes of data of tensor `index`, 0 out of range.
    pub fn tensor_nbytes(&self, index: i64) -> u64 {
        unsafe { sys::pi_model_tensor_nbytes(self.as_ptr(), index) }
    }

    // ---- Tokenizer ----

    /// Tokenize UTF-8 `text`.
    pub fn tokenize(&self, text: &str, flags: TokenizeFlags) -> Result<Vec<i32>> {
        let mut tokens = vec![0i32; text.len() + 4];
        loop {
            // SAFETY: text is len readable bytes; tokens has cap writable entries.
            let n = unsafe {
                sys::pi_tokenize(
                    self.as_ptr(),
                    text.as_ptr().cast(),
                    text.len(),
                    tokens.as_mut_ptr(),
                    tokens.len(),
                    flags.0,
                )
            };
            let n = check(n, || format!("tokenize {} bytes", text.len()))? as usize;
            if n <= tokens.len() {
                tokens.truncate(n);
                return Ok(tokens);
            }
            tokens.resize(n, 0);
        }
    }

    /// The raw bytes `token` stands for (possibly part of a UTF-8 sequence). With
    /// `special`, control tokens give their text instead of nothing.
    pub fn token_to_piece(&self, token: i32, special: bool) -> Result<Vec<u8>> {
        let flags = if special { sys::PI_PIECE_SPECIAL } else { 0 };
        fill_buffer(|buf, cap| unsafe {
            // SAFETY: buf has cap writable bytes.
            sys::pi_token_to_piece(self.as_ptr(), token, buf, cap, flags)
        })
        .map_err(|st| Error::new(st as i32, format!("piece of token {token}")))
    }

    /// The text of `tokens`, as a [`Detokenizer`] gives it (control tokens give
    /// nothing; ill-formed UTF-8 becomes U+FFFD).
    pub fn detokenize(&self, tokens: &[i32]) -> Result<String> {
        let mut d = Detokenizer::new(self, false)?;
        let mut text = String::new();
        for &t in tokens {
            text.push_str(&d.push(t)?);
        }
        text.push_str(&d.flush()?);
        Ok(text)
    }

    /// The BOS token, if the model has one.
    pub fn token_bos(&self) -> Option<i32> {
        let t = unsafe { sys::pi_model_token_bos(self.as_ptr()) };
        (t >= 0).then_some(t)
    }
    /// The EOS token, if the model has one.
    pub fn token_eos(&self) -> Option<i32> {
        let t = unsafe { sys::pi_model_token_eos(self.as_ptr()) };
        (t >= 0).then_some(t)
    }
    /// Whether generation should stop at `token`.
    pub fn token_is_eog(&self, token: i32) -> bool {
        unsafe { sys::pi_model_token_is_eog(self.as_ptr(), token) != 0 }
    }

    // ---- Chat ----

    /// The model's chat template (tokenizer.chat_template).
    pub fn chat_template(&self) -> Result<String> {
        let bytes = fill_buffer(|buf, cap| unsafe {
            // SAFETY: buf has cap writable bytes.
            sys::pi_model_chat_template(self.as_ptr(), buf, cap)
        })
        .map_err(|st| Error::new(st as i32, "chat template"))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The pooling the file asks for (`{arch}.pooling_type`), `None` when it has none
    /// (chat models); an error for a value that is not a `PI_POOL_*`.
    pub fn pooling(&self) -> Result<Option<Pooling>> {
        let st = unsafe { sys::pi_model_pooling(self.as_ptr()) };
        if st == sys::PI_ERR_NOT_FOUND {
            return Ok(None);
        }
        match check(st.into(), || "pooling type of the model".to_owned())? as c_int {
            sys::PI_POOL_NONE => Ok(Some(Pooling::None)),
            sys::PI_POOL_MEAN => Ok(Some(Pooling::Mean)),
            sys::PI_POOL_CLS => Ok(Some(Pooling::Cls)),
            sys::PI_POOL_LAST => Ok(Some(Pooling::Last)),
            _ => Ok(Some(Pooling::Rank)),
        }
    }

    /// The chat format of the model's template: the built-in family its markers name,
    /// or [`ChatFormat::Jinja`] for a template of another style that parses.
    pub fn chat_format(&self) -> Result<ChatFormat> {
        let st = unsafe { sys::pi_model_chat_format(self.as_ptr()) };
        match check(st.into(), || "chat format of the model's template".to_owned())? as c_int {
            sys::PI_CHAT_CHATML => Ok(ChatFormat::ChatMl),
            sys::PI_CHAT_LLAMA2 => Ok(ChatFormat::Llama2),
            sys::PI_CHAT_LLAMA3 => Ok(ChatFormat::Llama3),
            sys::PI_CHAT_GEMMA => Ok(ChatFormat::Gemma),
            sys::PI_CHAT_PHI3 => Ok(ChatFormat::Phi3),
            sys::PI_CHAT_MISTRAL_V1 => Ok(ChatFormat::MistralV1),
            sys::PI_CHAT_MISTRAL_V3 => Ok(ChatFormat::MistralV3),
            sys::PI_CHAT_MISTRAL_V3_TEKKEN => Ok(ChatFormat::MistralV3Tekken),
            sys::PI_CHAT_MISTRAL_V7 => Ok(ChatFormat::MistralV7),
            sys::PI_CHAT_FALCON => Ok(ChatFormat::Falcon),
            sys::PI_CHAT_JINJA => Ok(ChatFormat::Jinja),
            other => {
                Err(Error::new(sys::PI_ERR_UNSUPPORTED, format!("unknown chat format {other}")))
            }
        }
    }

    /// Render `(role, content)` messages as a prompt in `format`, followed by the
    /// opening of an assistant turn when `add_assistant`. Tokenize the result with
    /// [`TokenizeFlags::PARSE_SPECIAL`].
    pub fn chat_apply(
        &self,
        format: ChatFormat,
        messages: &[(&str, &str)],
        add_assistant: bool,
    ) -> Result<String> {
        let owned = messages
            .iter()
            .map(|(r, c)| Ok((c_string(r, "chat role")?, c_string(c, "chat content")?)))
            .collect::<Result<Vec<_>>>()?;
        let msgs: Vec<sys::pi_chat_message> = owned
            .iter()
            .map(|(r, c)| sys::pi_chat_message { role: r.as_ptr(), content: c.as_ptr() })
            .collect();
        let bytes = fill_buffer(|buf, cap| unsafe {
            // SAFETY: msgs (and the CStrings it points into) live for the call; buf
            // has cap writable bytes.
            sys::pi_chat_apply(
                self.as_ptr(),
                format as c_int,
                msgs.as_ptr(),
                msgs.len(),
                add_assistant as c_int,
                buf,
                cap,
            )
        })
        .map_err(|st| Error::new(st as i32, format!("chat prompt of {} messages", msgs.len())))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

// =====================================================================================
// Chat templates
// =====================================================================================

/// A chat template executed by the library's Jinja interpreter, as Hugging Face
/// transformers' `apply_chat_template` runs it. It copies what it needs from the model
/// (bos_token, eos_token) and does not borrow it. Immutable: `render` may run on many
/// threads at once.
pub struct ChatTemplate {
    raw: NonNull<sys::pi_chat_template>,
}

// SAFETY: a pi_chat_template is immutable once created; render takes it as const and
// the library allows concurrent renders; destroy needs &mut (Drop).
unsafe impl Send for ChatTemplate {}
unsafe impl Sync for ChatTemplate {}

impl ChatTemplate {
    fn create(model: Option<&Model>, source: Option<&str>) -> Result<ChatTemplate> {
        let csrc = source.map(|s| c_string(s, "template source")).transpose()?;
        let mut errbuf = vec![0u8; ERRBUF_CAP];
        let mut out = ptr::null_mut();
        // SAFETY: the model (if any) is open for the call; csrc and errbuf outlive it.
        let st = unsafe {
            sys::pi_chat_template_create(
                model.map_or(ptr::null(), |m| m.as_ptr()),
                csrc.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
                &mut out,
                errbuf.as_mut_ptr().cast(),
                errbuf.len(),
            )
        };
        match NonNull::new(out) {
            Some(raw) if st == sys::PI_OK => Ok(ChatTemplate { raw }),
            _ => Err(Error::new(
                if st < 0 { st } else { sys::PI_ERR_INTERNAL },
                buf_message(&errbuf),
            )),
        }
    }

    /// The model's `tokenizer.chat_template` (`PI_ERR_NOT_FOUND` without one,
    /// `PI_ERR_FORMAT` with "line L, column C: ..." when it does not parse).
    pub fn from_model(model: &Model) -> Result<ChatTemplate> {
        ChatTemplate::create(Some(model), None)
    }

    /// Any template source; `model` (optional) gives bos_token and eos_token.
    pub fn from_source(source: &str, model: Option<&Model>) -> Result<ChatTemplate> {
        ChatTemplate::create(model, Some(source))
    }

    /// Render with `data_json`, a JSON object of the template's variables (messages,
    /// tools, add_generation_prompt, ...). `now`: seconds since the Unix epoch for
    /// strftime_now (UTC); `None` leaves it undefined. Errors carry the template's own
    /// message (raise_exception) or "line L: ...".
    pub fn render(&self, data_json: &str, now: Option<i64>) -> Result<String> {
        let data = c_string(data_json, "template data")?;
        let when = now.unwrap_or(-1);
        let mut errbuf = vec![0u8; ERRBUF_CAP];
        let bytes = fill_buffer(|buf, cap| unsafe {
            // SAFETY: data and errbuf live for the call; buf has cap writable bytes.
            sys::pi_chat_template_render(
                self.raw.as_ptr(),
                data.as_ptr(),
                when,
                buf,
                cap,
                errbuf.as_mut_ptr().cast(),
                errbuf.len(),
            )
        })
        .map_err(|st| Error::new(st as i32, buf_message(&errbuf)))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

impl Drop for ChatTemplate {
    fn drop(&mut self) {
        // SAFETY: raw came from pi_chat_template_create and is destroyed once.
        unsafe { sys::pi_chat_template_destroy(self.raw.as_ptr()) }
    }
}

// =====================================================================================
// Streaming detokenizer
// =====================================================================================

/// Turns generated tokens into text, never splitting a UTF-8 code point between two
/// pushes. Borrows its model; one thread at a time.
pub struct Detokenizer<'m> {
    raw: NonNull<sys::pi_detok>,
    _model: PhantomData<&'m Model>,
}

// SAFETY: the header: "one thread at a time" -- so it may move between threads (the
// borrowed Model is Sync) but not be shared: no Sync.
unsafe impl Send for Detokenizer<'_> {}

unsafe extern "C" fn text_sink(user: *mut c_void, text: *const c_char, len: usize) -> c_int {
    // SAFETY: user is the Vec<u8> of the push/flush call on this thread; text is len
    // readable bytes borrowed for the call. Extending a Vec does not unwind (allocation
    // failure aborts).
    let out = &mut *(user as *mut Vec<u8>);
    out.extend_from_slice(std::slice::from_raw_parts(text.cast::<u8>(), len));
    0
}

impl<'m> Detokenizer<'m> {
    /// A detokenizer for `model`; `special` renders control tokens as their text.
    pub fn new(model: &'m Model, special: bool) -> Result<Self> {
        let flags = if special { sys::PI_PIECE_SPECIAL } else { 0 };
        let mut out = ptr::null_mut();
        // SAFETY: model is open and outlives the detokenizer ('m).
        let st = unsafe { sys::pi_detok_create(model.as_ptr(), flags, &mut out) };
        check(st.into(), || "create a detokenizer".to_owned())?;
        let raw = NonNull::new(out)
            .ok_or_else(|| Error::new(sys::PI_ERR_INTERNAL, "pi_detok_create gave NULL"))?;
        Ok(Detokenizer { raw, _model: PhantomData })
    }

    /// Feed one token; returns the text it completes (possibly empty).
    pub fn push(&mut self, token: i32) -> Result<String> {
        let mut out = Vec::new();
        // SAFETY: &mut self: no other call on this detokenizer; `out` lives for the call.
        let st = unsafe {
            sys::pi_detok_push(
                self.raw.as_ptr(),
                token,
                Some(text_sink),
                (&mut out as *mut Vec<u8>).cast(),
            )
        };
        check(st.into(), || format!("detokenize token {token}"))?;
        Ok(into_string(out))
    }

    /// Deliver held-back bytes of an unfinished sequence (as U+FFFD) and reset.
    pub fn flush(&mut self) -> Result<String> {
        let mut out = Vec::new();
        // SAFETY: as in push.
        let st = unsafe {
            sys::pi_detok_flush(
                self.raw.as_ptr(),
                Some(text_sink),
                (&mut out as *mut Vec<u8>).cast(),
            )
        };
        check(st.into(), || "flush the detokenizer".to_owned())?;
        Ok(into_string(out))
    }
}

fn into_string(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

impl Drop for Detokenizer<'_> {
    fn drop(&mut self) {
        // SAFETY: we own it; nothing else refers to it.
        unsafe { sys::pi_detok_destroy(self.raw.as_ptr()) }
    }
}

// =====================================================================================
// Context
// =====================================================================================

type AbortCallback = dyn Fn() -> bool + Send + Sync;

/// One sequence being decoded (or several: [`ContextBuilder::n_seq_max`] and
/// [`Context::decode_batch`]). Borrows its model (`'m`); owns its KV cache and worker
/// threads. `Send` (it may move to another thread) but not `Sync`: the header allows
/// one thread at a time per context.
pub struct Context<'m> {
    raw: NonNull<sys::pi_ctx>,
    model: &'m Model,
    _abort: Option<Box<Box<AbortCallback>>>,
    probe: Option<Box<ProbeState>>,
}

/// What [`Context::set_ffn_probe`] calls, per layer and step: (layer, n_tokens, h
/// [n_tokens * n_embd], act [n_tokens * n_ff], inter [n_tokens * n_ff]).
type FfnProbeCallback = dyn FnMut(i64, usize, &[f32], &[f32], &[f32]) + Send;

struct ProbeState {
    f: Box<FfnProbeCallback>,
    n_embd: usize,
    n_ff: usize,
}

unsafe extern "C" fn probe_trampoline(
    user: *mut c_void,
    layer: i64,
    n_tokens: i64,
    h: *const f32,
    act: *const f32,
    inter: *const f32,
) {
    // SAFETY: user is the ProbeState the Context owns, called on the decoding thread
    // (which holds &mut Context); h, act and inter are n_tokens rows valid for the call.
    let st = &mut *(user as *mut ProbeState);
    let n = n_tokens.max(0) as usize;
    let h = std::slice::from_raw_parts(h, n * st.n_embd);
    let act = std::slice::from_raw_parts(act, n * st.n_ff);
    let inter = std::slice::from_raw_parts(inter, n * st.n_ff);
    // a panic cannot cross the C frames: it is swallowed here
    let _ = catch_unwind(AssertUnwindSafe(|| (st.f)(layer, n, h, act, inter)));
}

// SAFETY: the header's contract: a context is used by one thread at a time, distinct
// contexts run concurrently; it may therefore move between threads. The borrowed Model
// is Sync and the abort callback Send + Sync. Not Sync: NonNull keeps it !Sync.
unsafe impl Send for Context<'_> {}

/// Options for a context; see `pi_ctx_params` in the header. `'s` is the lifetime of
/// the statistics given to [`ContextBuilder::plan_stats`].
#[derive(Default)]
pub struct ContextBuilder<'s> {
    n_ctx: u32,
    n_threads: u32,
    n_batch: u32,
    f32_activations: bool,
    sparse_mode: Option<SparseMode>,
    sparse_threshold: Option<f32>,
    stats: Option<StatsLevel>,
    abort: Option<Box<AbortCallback>>,
    device: Option<Device>,
    device_index: u32,
    device_budget: Option<u64>,
    plan_stats: Option<StatsView<'s>>,
    plan_path: Option<PathBuf>,
    plan_file: Option<PlanFile>,
    n_seq_max: u32,
    check_layers: bool,
    graphs_off: bool,
    kv_type: u32,   // PI_KV_TYPE_*
    kv_type_v: u32, // the values': PI_KV_TYPE_Q8_0 / _Q4_0, or 0: as kv_type
    embeddings: Option<Embeddings>,
}

impl<'s> ContextBuilder<'s> {
    pub fn new() -> Self {
        Self::default()
    }
    /// Positions the context can hold; 0: the model's training context, at most 4096.
    pub fn n_ctx(mut self, n: u32) -> Self {
        self.n_ctx = n;
        self
    }
    /// Worker threads including the caller; 0: the processors available.
    pub fn n_threads(mut self, n: u32) -> Self {
        self.n_threads = n;
        self
    }
    /// Most tokens one prefill step processes; 0: 256.
    pub fn n_batch(mut self, n: u32) -> Self {
        self.n_batch = n;
        self
    }
    /// Sequences the context holds (ids `0..n`), each up to `n_ctx` positions, decoded
    /// together by [`Context::decode_batch`]; 0: 1. At most 256.
    pub fn n_seq_max(mut self, n: u32) -> Self {
        self.n_seq_max = n;
        self
    }
    /// Keep final hidden states for embeddings; default [`Embeddings::Off`].
    pub fn embeddings(mut self, mode: Embeddings) -> Self {
        self.embeddings = Some(mode);
        self
    }
    /// Keep activations in f32 for quantized products (slower, closer to a reference).
    pub fn f32_activations(mut self, yes: bool) -> Self {
        self.f32_activations = yes;
        self
    }
    /// Also check each layer's output for NaN/infinity (`PI_CHECK_LAYERS`), so that a
    /// decode's `PI_ERR_NUMERIC` names the layer and block; logits are always checked.
    pub fn check_numerics(mut self, yes: bool) -> Self {
        self.check_layers = yes;
        self
    }
    /// Submit device steps of up to `PI_GRAPHS_MAX_TOKENS` tokens as CUDA graphs where
    /// nothing overlaps them on the CPU (`PI_GRAPHS_AUTO`, the default); `false`: op by op.
    pub fn device_graphs(mut self, yes: bool) -> Self {
        self.graphs_off = !yes;
        self
    }
    /// Store the KV cache as Q8_0 blocks (`PI_KV_TYPE_Q8_0`: about half the memory of
    /// the default F16; CPU-only contexts, head dimensions multiples of 32); `false`:
    /// F16.
    pub fn kv_q8_0(mut self, yes: bool) -> Self {
        self.kv_type = if yes { 1 } else { 0 };
        self
    }
    /// Store the KV cache as Q4_0 blocks (`PI_KV_TYPE_Q4_0`: 28 % of the F16 cache's
    /// memory, more rounding than Q8_0; the same conditions); `false`: F16.
    pub fn kv_q4_0(mut self, yes: bool) -> Self {
        self.kv_type = if yes { 2 } else { 0 };
        self
    }
    /// Store the values (not the keys) as Q8_0 blocks whatever the keys' type
    /// (`kv_type_v = PI_KV_TYPE_Q8_0`; with F16 keys: 77 % of the F16 cache's memory);
    /// `false`: values as keys. The same conditions as `kv_q8_0`.
    pub fn kv_values_q8_0(mut self, yes: bool) -> Self {
        self.kv_type_v = if yes { 1 } else { 0 };
        self
    }
    /// Store the values as Q4_0 blocks whatever the keys' type (`PI_KV_TYPE_Q4_0`;
    /// with `kv_q8_0` keys: 41 % of the F16 cache's memory; keys are the more
    /// sensitive half); `false`: values as keys.
    pub fn kv_values_q4_0(mut self, yes: bool) -> Self {
        self.kv_type_v = if yes { 2 } else { 0 };
        self
    }
    pub fn sparse_mode(mut self, mode: SparseMode) -> Self {
        self.sparse_mode = Some(mode);
        self
    }
    /// Use `t` instead of the file's predictor threshold.
    pub fn sparse_threshold(mut self, t: f32) -> Self {
        self.sparse_threshold = Some(t);
        self
    }
    pub fn stats(mut self, level: StatsLevel) -> Self {
        self.stats = Some(level);
        self
    }
    /// Polled between layers during decode (possibly on any thread of the context);
    /// return `true` to stop the decode with `PI_ERR_ABORTED`.
    pub fn abort(mut self, f: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        self.abort = Some(Box::new(f));
        self
    }

    // ---- Hybrid execution ----

    /// Run attention, predictors, the KV cache and the hottest FFN neurons on `device`
    /// within the budget, the rest on the CPU. Default [`Device::None`] (CPU only).
    pub fn device(mut self, device: Device) -> Self {
        self.device = Some(device);
        self
    }
    /// Which GPU (default 0).
    pub fn device_index(mut self, index: u32) -> Self {
        self.device_index = index;
        self
    }
    /// Bytes the plan may place on the device, scratch included; 0 places nothing.
    /// Default [`sys::PI_DEVICE_BUDGET_AUTO`]: the device's free memory minus 256 MiB
    /// ([`Device::Cpu`]: everything).
    pub fn device_budget(mut self, bytes: u64) -> Self {
        self.device_budget = Some(bytes);
        self
    }
    /// Activation statistics that rank the neurons (loaded, or a profiling context's);
    /// read only while the context or plan is made. Default: all equally hot.
    pub fn plan_stats(mut self, stats: StatsView<'s>) -> Self {
        self.plan_stats = Some(stats);
        self
    }
    /// A GPU index file and what to do with it (PowerInfer's `<model>.generated.gpuidx`
    /// or one [`PlanView::save`] wrote). Default: plan in memory.
    pub fn plan_file(mut self, path: impl AsRef<Path>, mode: PlanFile) -> Self {
        self.plan_path = Some(path.as_ref().to_path_buf());
        self.plan_file = Some(mode);
        self
    }

    /// The params without the abort callback and error buffer; `path` receives the
    /// C string `plan_path` points into, which must outlive the params' use.
    fn raw_params(&self, path: &mut Option<CString>) -> Result<sys::pi_ctx_params> {
        // SAFETY: all-zero bits are a valid pi_ctx_params; the library fills it.
        let mut p: sys::pi_ctx_params = unsafe { std::mem::zeroed() };
        // SAFETY: p is a valid, writable pi_ctx_params.
        unsafe { sys::pi_ctx_default_params(&mut p) };
        p.n_ctx = self.n_ctx;
        p.n_threads = self.n_threads;
        p.n_batch = self.n_batch;
        p.n_seq_max = self.n_seq_max;
        p.f32_activations = self.f32_activations as u32;
        p.check_numerics = self.check_layers as u32;
        p.device_graphs = self.graphs_off as u32; // PI_GRAPHS_OFF = 1
        p.kv_type = self.kv_type;
        p.kv_type_v = self.kv_type_v;
        if let Some(e) = self.embeddings {
            p.embeddings = e as u32;
        }
        if let Some(m) = self.sparse_mode {
            p.sparse_mode = m as u32;
        }
        if let Some(t) = self.sparse_threshold {
            p.sparse_threshold_set = 1;
            p.sparse_threshold = t;
        }
        if let Some(s) = self.stats {
            p.stats = s as u32;
        }
        if let Some(d) = self.device {
            p.device = d as u32;
        }
        p.device_index = self.device_index;
        if let Some(b) = self.device_budget {
            p.device_budget = b;
        }
        if let Some(s) = &self.plan_stats {
            p.plan_stats = s.raw.as_ptr();
        }
        if let Some(file) = &self.plan_path {
            let c = path.insert(c_path(file)?);
            p.plan_path = c.as_ptr();
            p.plan_file = self.plan_file.unwrap_or(PlanFile::Cache) as u32;
        }
        Ok(p)
    }

    /// Dry run: the plan a context with these options would run with, without loading
    /// any weight onto a device (`pi_model_plan`). The device defaults to
    /// [`Device::Gpu`] here. With [`PlanFile::Cache`] or [`PlanFile::Write`] the plan
    /// file is written as a context would write it.
    pub fn plan<'m>(&self, model: &'m Model) -> Result<Plan<'m>> {
        let mut path = None;
        let mut p = self.raw_params(&mut path)?;
        if self.device.is_none() {
            p.device = Device::Gpu as u32;
        }
        let mut errbuf = vec![0u8; ERRBUF_CAP];
        p.errbuf = errbuf.as_mut_ptr().cast();
        p.errbuf_cap = errbuf.len();
        let mut out = ptr::null_mut();
        // SAFETY: model is open; p, the plan path, the statistics (borrowed for 's) and
        // errbuf live for the call; ownership of *out transfers to us.
        let st = unsafe { sys::pi_model_plan(model.as_ptr(), &p, &mut out) };
        match NonNull::new(out) {
            Some(raw) if st == sys::PI_OK => Ok(Plan { raw, _model: PhantomData }),
            _ => {
                let mut message = buf_message(&errbuf);
                if message.is_empty() {
                    message = "cannot make a plan".to_owned();
                }
                Err(Error::new(if st < 0 { st } else { sys::PI_ERR_INTERNAL }, message))
            }
        }
    }

    /// Create the context for `model`.
    pub fn build<'m>(self, model: &'m Model) -> Result<Context<'m>> {
        let mut path = None;
        let mut p = self.raw_params(&mut path)?;
        let abort = self.abort.map(Box::new);
        if let Some(f) = &abort {
            p.abort_fn = Some(abort_trampoline);
            p.abort_user = (&**f as *const Box<AbortCallback>).cast_mut().cast();
        }
        let mut errbuf = vec![0u8; ERRBUF_CAP];
        p.errbuf = errbuf.as_mut_ptr().cast();
        p.errbuf_cap = errbuf.len();

        let mut out = ptr::null_mut();
        // SAFETY: model is open and outlives the context (the returned Context borrows
        // it); p, errbuf, the plan path and the statistics live for the call; the abort
        // closure is heap-allocated and moved into the Context, which frees it only
        // after pi_ctx_destroy.
        let st = unsafe { sys::pi_ctx_create(model.as_ptr(), &p, &mut out) };
        match NonNull::new(out) {
            Some(raw) if st == sys::PI_OK => Ok(Context { raw, model, _abort: abort, probe: None }),
            _ => {
                let mut message = buf_message(&errbuf);
                if message.is_empty() {
                    message = "cannot create a context".to_owned();
                }
                Err(Error::new(if st < 0 { st } else { sys::PI_ERR_INTERNAL }, message))
            }
        }
    }
}

unsafe extern "C" fn abort_trampoline(user: *mut c_void) -> c_int {
    // SAFETY: user is the Box<AbortCallback> the Context owns; the callback is Sync, so
    // calling it from a worker thread is fine. A panic stops the decode.
    let f = &*(user as *const Box<AbortCallback>);
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(false) => 0,
        _ => 1,
    }
}

/// SAFETY (for every `unsafe` block below unless it says more): `self.raw` is a valid
/// context for the lifetime of `self`; methods that change it take `&mut self`, and the
/// type is not Sync, so no two calls on it overlap.
impl<'m> Context<'m> {
    /// A context for `model` with the default options.
    pub fn new(model: &'m Model) -> Result<Context<'m>> {
        ContextBuilder::new().build(model)
    }

    /// Options for a context.
    pub fn builder<'s>() -> ContextBuilder<'s> {
        ContextBuilder::new()
    }

    /// The raw handle, for calls through [`sys`]. Valid while `self` lives.
    pub fn as_ptr(&self) -> *const sys::pi_ctx {
        self.raw.as_ptr()
    }

    /// The model this context decodes.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// This context's last error as an `Error` with `status`. Reading the message is
    /// safe here: the context is not shared, so it is the message of our call.
    fn error(&self, status: c_int, what: &str) -> Error {
        let msg = unsafe { cstr_to_string(sys::pi_ctx_errmsg(self.as_ptr())) }.unwrap_or_default();
        Error::new(status, if msg.is_empty() { what.to_owned() } else { msg })
    }

    fn check(&self, status: c_int, what: &str) -> Result<()> {
        if status < 0 {
            Err(self.error(status, what))
        } else {
            Ok(())
        }
    }

    /// Append `tokens` at the current position and compute the last one's logits. On
    /// failure the context is unchanged.
    pub fn decode(&mut self, tokens: &[i32]) -> Result<()> {
        // SAFETY: tokens is borrowed for the call.
        let st = unsafe { sys::pi_ctx_decode(self.raw.as_ptr(), tokens.as_ptr(), tokens.len()) };
        self.check(st, "decode")
    }

    /// The n_vocab logits of the last decoded token; empty if nothing was decoded since
    /// creation, reset or truncate. Borrowed from the context: the next decode (which
    /// needs `&mut self`) cannot run while the slice is alive.
    pub fn logits(&self) -> &[f32] {
        let p = unsafe { sys::pi_ctx_logits(self.as_ptr()) };
        if p.is_null() {
            return &[];
        }
        let n = self.model.n_vocab().max(0) as usize;
        // SAFETY: non-NULL logits are n_vocab floats owned by the context, valid until
        // the next decode/reset/truncate/destroy, all of which need &mut self or self.
        unsafe { std::slice::from_raw_parts(p, n) }
    }

    /// Positions decoded so far (the next token's position).
    pub fn pos(&self) -> i64 {
        unsafe { sys::pi_ctx_pos(self.as_ptr()) }
    }
    /// Capacity in positions.
    pub fn n_ctx(&self) -> i64 {
        unsafe { sys::pi_ctx_n_ctx(self.as_ptr()) }
    }
    /// Forget everything: position 0, no logits.
    pub fn reset(&mut self) -> Result<()> {
        let st = unsafe { sys::pi_ctx_reset(self.raw.as_ptr()) };
        self.check(st, "reset")
    }
    /// Keep the first `n_keep` positions.
    pub fn truncate(&mut self, n_keep: i64) -> Result<()> {
        let st = unsafe { sys::pi_ctx_truncate(self.raw.as_ptr(), n_keep) };
        self.check(st, "truncate")
    }
    /// Change the worker thread count (0: the processors available).
    pub fn set_threads(&mut self, n: u32) -> Result<()> {
        let st = unsafe { sys::pi_ctx_set_threads(self.raw.as_ptr(), n) };
        self.check(st, "set threads")
    }
    pub fn n_threads(&self) -> u32 {
        unsafe { sys::pi_ctx_n_threads(self.as_ptr()) }
    }
    /// Install (`Some`) or remove (`None`) the FFN probe (`pi_ctx_set_ffn_probe`): every
    /// later decode calls it once per layer and step with the FFN's predictor input h,
    /// the gate's activation act and the intermediate inter (row-major, n_tokens rows).
    /// Needs a CPU-only context in dense mode without experts.
    pub fn set_ffn_probe(
        &mut self,
        f: Option<Box<dyn FnMut(i64, usize, &[f32], &[f32], &[f32]) + Send>>,
    ) -> Result<()> {
        let Some(f) = f else {
            let st =
                unsafe { sys::pi_ctx_set_ffn_probe(self.raw.as_ptr(), None, std::ptr::null_mut()) };
            self.check(st, "set ffn probe")?;
            self.probe = None;
            return Ok(());
        };
        let mut state = Box::new(ProbeState {
            f,
            n_embd: self.model.n_embd().max(0) as usize,
            n_ff: self.model.n_ff().max(0) as usize,
        });
        let user = (&mut *state as *mut ProbeState).cast::<c_void>();
        // SAFETY: the library borrows `user` until the probe is replaced or the context
        // destroyed; the box lives in self.probe until then.
        let st = unsafe { sys::pi_ctx_set_ffn_probe(self.raw.as_ptr(), Some(probe_trampoline), user) };
        self.check(st, "set ffn probe")?;
        self.probe = Some(state);
        Ok(())
    }
    /// The FFN mode the context runs (Auto resolved).
    pub fn sparse_mode(&self) -> Result<SparseMode> {
        let st = unsafe { sys::pi_ctx_sparse_mode(self.as_ptr()) };
        match st {
            sys::PI_SPARSE_DENSE => Ok(SparseMode::Dense),
            sys::PI_SPARSE_PREDICTOR => Ok(SparseMode::Predictor),
            sys::PI_SPARSE_ORACLE => Ok(SparseMode::Oracle),
            sys::PI_SPARSE_THRESHOLD => Ok(SparseMode::Threshold),
            sys::PI_SPARSE_AUTO => Ok(SparseMode::Auto),
            s if s < 0 => Err(self.error(s, "sparse mode")),
            s => Err(Error::new(sys::PI_ERR_INTERNAL, format!("unknown sparse mode {s}"))),
        }
    }
    /// The predictor threshold in use.
    pub fn sparse_threshold(&self) -> f32 {
        unsafe { sys::pi_ctx_sparse_threshold(self.as_ptr()) }
    }
    /// The statistics the context collects, or `None` if created with
    /// [`StatsLevel::Off`]. The view borrows the context, so no decode runs while it
    /// is alive.
    pub fn stats(&self) -> Option<StatsView<'_>> {
        let p = unsafe { sys::pi_ctx_stats(self.as_ptr()) };
        NonNull::new(p.cast_mut()).map(|raw| StatsView { raw, _owner: PhantomData })
    }
    /// Zero the statistics.
    pub fn stats_reset(&mut self) -> Result<()> {
        let st = unsafe { sys::pi_ctx_stats_reset(self.raw.as_ptr()) };
        self.check(st, "reset statistics")
    }
    /// The placement plan of a hybrid context; `None` for a CPU-only one.
    pub fn plan(&self) -> Option<PlanView<'_>> {
        let p = unsafe { sys::pi_ctx_plan(self.as_ptr()) };
        NonNull::new(p.cast_mut()).map(|raw| PlanView { raw, _owner: PhantomData })
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the context; StatsViews borrow it, so none is alive. The abort
        // box is dropped after this call.
        unsafe { sys::pi_ctx_destroy(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("pos", &self.pos()).field("n_ctx", &self.n_ctx()).finish()
    }
}

// =====================================================================================
// Several sequences in one context; state save and restore
// =====================================================================================

/// One token of a batch (`pi_batch_entry`): append `token` to sequence `seq` (an id in
/// `0..n_seq_max`) at the sequence's next position, keeping the entry's logits if
/// `logits`. Build with [`BatchEntry::new`], then [`BatchEntry::logits`] and
/// [`BatchEntry::at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchEntry {
    pub token: i32,
    pub seq: i32,
    /// The position the token must land at: the sequence's length plus the entries of
    /// the same sequence earlier in the batch (the library refuses any other). `None`
    /// (and `Some(-1)`): whatever the next position is.
    pub pos: Option<i32>,
    /// Keep this entry's logits ([`Context::batch_logits`]).
    pub logits: bool,
}

impl BatchEntry {
    /// `token` appended to `seq` at its next position, without logits.
    pub fn new(token: i32, seq: i32) -> Self {
        BatchEntry { token, seq, pos: None, logits: false }
    }
    /// Keep (or not) this entry's logits.
    pub fn logits(mut self, yes: bool) -> Self {
        self.logits = yes;
        self
    }
    /// Require the token to land at position `pos` of its sequence.
    pub fn at(mut self, pos: i32) -> Self {
        self.pos = Some(pos);
        self
    }

    fn raw(&self) -> sys::pi_batch_entry {
        sys::pi_batch_entry {
            token: self.token,
            seq: self.seq,
            pos: self.pos.unwrap_or(-1),
            logits: self.logits as u32,
        }
    }
}

/// Several sequences and the state calls. A context holds [`Context::n_seq_max`]
/// sequences, each with its own positions and cache; [`Context::decode`],
/// [`Context::pos`] and [`Context::truncate`] act on sequence 0, [`Context::reset`]
/// clears them all, and [`Context::logits`] are the last ones computed (after a batch:
/// its last entry's that asked for them). A failing call leaves every sequence, and the
/// logits, as they were.
///
/// SAFETY (for every `unsafe` block below unless it says more): as for the methods
/// above; sequence ids and positions are checked by the library.
impl Context<'_> {
    /// Sequences the context holds: ids `0..n_seq_max()`.
    pub fn n_seq_max(&self) -> u32 {
        unsafe { sys::pi_ctx_n_seq_max(self.as_ptr()) }
    }

    /// An error unless `seq` is a sequence of this context. The library refuses a bad id
    /// of the seq_* and state calls without a message (so pi_ctx_errmsg would still show
    /// an earlier call's), hence this check before them.
    fn check_seq(&self, seq: i32, what: &str) -> Result<()> {
        let n = self.n_seq_max();
        if seq < 0 || seq as u32 >= n {
            return Err(Error::invalid(format!(
                "{what}: sequence {seq} is outside 0..{}",
                n.saturating_sub(1)
            )));
        }
        Ok(())
    }

    /// Decode `entries` in one call: their matrix products run over all of them at once,
    /// attention stays within each sequence. Afterwards [`Context::batch_logits`] gives
    /// the logits of the entries that asked for them, and [`Context::logits`] those of
    /// the last such entry. On failure (an empty batch, a token outside the vocabulary, a
    /// sequence outside `0..n_seq_max`, a wrong position, a sequence past `n_ctx`)
    /// nothing changes.
    pub fn decode_batch(&mut self, entries: &[BatchEntry]) -> Result<()> {
        let raw: Vec<sys::pi_batch_entry> = entries.iter().map(BatchEntry::raw).collect();
        // SAFETY: raw holds raw.len() entries, borrowed for the call (an empty batch is
        // refused before the pointer is read).
        let st = unsafe { sys::pi_ctx_decode_batch(self.raw.as_ptr(), raw.as_ptr(), raw.len()) };
        self.check(st, "decode a batch")
    }

    /// The n_vocab logits of entry `i` of the last successful [`Context::decode_batch`];
    /// `None` if `i` is out of range or the entry did not ask for logits (and after a
    /// state load, reset or truncate). Borrowed from the context like
    /// [`Context::logits`]: no decode can run while the slice is alive.
    pub fn batch_logits(&self, i: usize) -> Option<&[f32]> {
        let p = unsafe { sys::pi_ctx_batch_logits(self.as_ptr(), i) };
        if p.is_null() {
            return None;
        }
        let n = self.model.n_vocab().max(0) as usize;
        // SAFETY: non-NULL batch logits are n_vocab floats owned by the context, valid
        // until the next decode, state load, reset, truncate or destroy, all of which
        // need &mut self or self.
        Some(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// The final hidden state (n_embd floats: after the output norm, the LM head's
    /// input) of entry `i` of the last decode or [`Context::decode_batch`]; `None` if
    /// `i` is out of range or the context keeps none ([`Embeddings::Off`]). Borrowed
    /// like [`Context::batch_logits`].
    pub fn embedding(&self, i: usize) -> Option<&[f32]> {
        let p = unsafe { sys::pi_ctx_embedding(self.as_ptr(), i) };
        if p.is_null() {
            return None;
        }
        let n = self.model.n_embd().max(0) as usize;
        // SAFETY: a non-NULL state is n_embd floats owned by the context, valid until
        // the next decode, state load, reset, truncate or destroy (all need &mut self
        // or self).
        Some(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// Sequence `seq`'s final hidden states pooled (`Mean`, `Cls` or `Last`) over every
    /// token decoded into it since position 0, scaled to unit L2 norm when
    /// `normalize`. Errors: embeddings off, a bad `seq` or pooling
    /// (`PI_ERR_INVALID_ARG`); an empty sequence, or one shortened or loaded since it
    /// was decoded (`PI_ERR_RANGE`).
    pub fn embedding_pooled(
        &self,
        seq: i32,
        pooling: Pooling,
        normalize: bool,
    ) -> Result<Vec<f32>> {
        let n = self.model.n_embd().max(0) as usize;
        let mut out = vec![0f32; n];
        // SAFETY: out has n writable floats, borrowed for the call.
        let st = unsafe {
            sys::pi_ctx_embedding_pooled(
                self.as_ptr(),
                seq,
                pooling as c_int,
                normalize as u32,
                out.as_mut_ptr(),
                n,
            )
        };
        self.check(st, "pool embeddings")?;
        Ok(out)
    }

    /// Positions decoded in sequence `seq` (its next position).
    pub fn seq_len(&self, seq: i32) -> Result<i64> {
        let n = unsafe { sys::pi_ctx_seq_len(self.as_ptr(), seq) };
        if n < 0 {
            return Err(self.check_seq(seq, "seq_len").err().unwrap_or_else(|| {
                Error::new(sys::PI_ERR_INTERNAL, format!("seq_len: {n} for sequence {seq}"))
            }));
        }
        Ok(n)
    }

    /// Remove `positions` of sequence `seq` (`2..4`, `3..` for a suffix, `..` for all).
    /// Later positions move down, their cached keys rotated back, and the sequence
    /// continues without the removed tokens. Removing a suffix is exact; after a middle
    /// range the later positions' cache still holds what they computed attending to the
    /// removed tokens, so the result is close to, not equal to, never having decoded them.
    /// `PI_ERR_RANGE` for a range outside `0..=seq_len(seq)`.
    pub fn seq_remove(&mut self, seq: i32, positions: impl RangeBounds<i64>) -> Result<()> {
        self.check_seq(seq, "seq_remove")?;
        // In i128 so that no bound overflows; an explicit negative end must not reach the
        // library, where p1 -1 means "to the end".
        let p0 = match positions.start_bound() {
            Bound::Included(&p) => p as i128,
            Bound::Excluded(&p) => p as i128 + 1,
            Bound::Unbounded => 0,
        };
        let p1 = match positions.end_bound() {
            Bound::Included(&p) => Some(p as i128 + 1),
            Bound::Excluded(&p) => Some(p as i128),
            Bound::Unbounded => None,
        };
        let fits = |p: i128| (0..=i64::MAX as i128).contains(&p);
        if !fits(p0) || !p1.map_or(true, fits) {
            let end = p1.map_or_else(String::new, |p| p.to_string());
            return Err(Error::new(
                sys::PI_ERR_RANGE,
                format!("cannot remove positions {p0}..{end} of sequence {seq}"),
            ));
        }
        let p1 = p1.map_or(-1, |p| p as i64);
        let st = unsafe { sys::pi_ctx_seq_remove(self.raw.as_ptr(), seq, p0 as i64, p1) };
        self.check(st, "seq_remove")
    }

    /// Make sequence `dst` a copy of sequence `src` (positions and cache): a shared
    /// prompt decoded once, continued several ways.
    pub fn seq_copy(&mut self, src: i32, dst: i32) -> Result<()> {
        self.check_seq(src, "seq_copy")?;
        self.check_seq(dst, "seq_copy")?;
        let st = unsafe { sys::pi_ctx_seq_copy(self.raw.as_ptr(), src, dst) };
        self.check(st, "seq_copy")
    }

    /// Clear every sequence but `seq`.
    pub fn seq_keep(&mut self, seq: i32) -> Result<()> {
        self.check_seq(seq, "seq_keep")?;
        let st = unsafe { sys::pi_ctx_seq_keep(self.raw.as_ptr(), seq) };
        self.check(st, "seq_keep")
    }

    /// Clear sequence `seq` (length 0). [`Context::reset`] clears them all.
    pub fn seq_clear(&mut self, seq: i32) -> Result<()> {
        self.check_seq(seq, "seq_clear")?;
        let st = unsafe { sys::pi_ctx_seq_clear(self.raw.as_ptr(), seq) };
        self.check(st, "seq_clear")
    }

    /// The state of `seq` (-1: the whole context) in the library's format.
    fn save_state(&self, seq: i32) -> Result<Vec<u8>> {
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let mut size = 0usize;
            let p = if buf.is_empty() { ptr::null_mut() } else { buf.as_mut_ptr().cast() };
            // SAFETY: p is NULL or buf's buf.len() writable bytes; size is written.
            let st = unsafe { sys::pi_ctx_state_save(self.as_ptr(), seq, p, buf.len(), &mut size) };
            if st == sys::PI_OK && size <= buf.len() {
                buf.truncate(size);
                return Ok(buf);
            }
            if st == sys::PI_ERR_RANGE && size > buf.len() {
                buf.resize(size, 0);
                continue;
            }
            return Err(if st < 0 {
                self.error(st, "save the state")
            } else {
                Error::new(sys::PI_ERR_INTERNAL, "pi_ctx_state_save gave a size above cap")
            });
        }
    }

    /// The state of the whole context: every sequence's positions and cache, and the
    /// last logits, in a versioned format with a checksum that names the model. Loading
    /// it into a context of the same model ([`Context::state_load`]) reproduces the next
    /// logits bit for bit.
    pub fn state_save(&self) -> Result<Vec<u8>> {
        self.save_state(-1)
    }

    /// The state of sequence `seq` alone (positions and cache), for
    /// [`Context::seq_state_load`] into any sequence of a context of the same model.
    pub fn seq_state_save(&self, seq: i32) -> Result<Vec<u8>> {
        self.check_seq(seq, "seq_state_save")?;
        self.save_state(seq)
    }

    /// Replace everything with a whole-context state ([`Context::state_save`]). A state
    /// of another model, a corrupted or truncated one, a one-sequence state or one that
    /// does not fit (`n_ctx`, `n_seq_max`) is refused (`PI_ERR_FORMAT`,
    /// `PI_ERR_INVALID_ARG`, `PI_ERR_RANGE`) and the context stays as it was.
    pub fn state_load(&mut self, state: &[u8]) -> Result<()> {
        // SAFETY: state is state.len() readable bytes, borrowed for the call.
        let st = unsafe {
            sys::pi_ctx_state_load(self.raw.as_ptr(), -1, state.as_ptr().cast(), state.len())
        };
        self.check(st, "load the state")
    }

    /// Load a one-sequence state ([`Context::seq_state_save`], of any sequence) into
    /// sequence `seq`, replacing it. Refusals as for [`Context::state_load`].
    pub fn seq_state_load(&mut self, seq: i32, state: &[u8]) -> Result<()> {
        self.check_seq(seq, "seq_state_load")?;
        // SAFETY: state is state.len() readable bytes, borrowed for the call.
        let st = unsafe {
            sys::pi_ctx_state_load(self.raw.as_ptr(), seq, state.as_ptr().cast(), state.len())
        };
        self.check(st, "load the state of a sequence")
    }

    /// [`Context::state_save`] into a file, written atomically (temporary name, then
    /// rename).
    pub fn state_save_file(&self, path: impl AsRef<Path>) -> Result<()> {
        self.save_state_file(-1, path.as_ref())
    }

    /// [`Context::seq_state_save`] into a file, written atomically.
    pub fn seq_state_save_file(&self, seq: i32, path: impl AsRef<Path>) -> Result<()> {
        self.check_seq(seq, "seq_state_save_file")?;
        self.save_state_file(seq, path.as_ref())
    }

    /// [`Context::state_load`] from a file.
    pub fn state_load_file(&mut self, path: impl AsRef<Path>) -> Result<()> {
        self.load_state_file(-1, path.as_ref())
    }

    /// [`Context::seq_state_load`] from a file.
    pub fn seq_state_load_file(&mut self, seq: i32, path: impl AsRef<Path>) -> Result<()> {
        self.check_seq(seq, "seq_state_load_file")?;
        self.load_state_file(seq, path.as_ref())
    }

    fn save_state_file(&self, seq: i32, path: &Path) -> Result<()> {
        let cpath = c_path(path)?;
        // SAFETY: cpath lives for the call.
        let st = unsafe { sys::pi_ctx_state_save_file(self.as_ptr(), seq, cpath.as_ptr()) };
        self.check(st, &format!("cannot write the state to {}", path.display()))
    }

    fn load_state_file(&mut self, seq: i32, path: &Path) -> Result<()> {
        let cpath = c_path(path)?;
        // SAFETY: cpath lives for the call.
        let st = unsafe { sys::pi_ctx_state_load_file(self.raw.as_ptr(), seq, cpath.as_ptr()) };
        self.check(st, &format!("cannot load the state from {}", path.display()))
    }
}

// =====================================================================================
// Statistics
// =====================================================================================

/// Totals of one layer (`pi_layer_stats`).
pub type LayerStats = sys::pi_layer_stats;

/// A read-only view of statistics: a context's ([`Context::stats`]) or loaded ones
/// ([`Stats::view`]). Neither Send nor Sync: it reads state its owner updates.
#[derive(Clone, Copy)]
pub struct StatsView<'a> {
    raw: NonNull<sys::pi_stats>,
    _owner: PhantomData<&'a sys::pi_stats>,
}

/// SAFETY (for every `unsafe` block below): `raw` is valid for `'a` and nothing
/// updates it meanwhile (its owner is borrowed shared).
impl StatsView<'_> {
    pub fn n_layer(&self) -> i64 {
        unsafe { sys::pi_stats_n_layer(self.raw.as_ptr()) }
    }
    pub fn n_ff(&self) -> i64 {
        unsafe { sys::pi_stats_n_ff(self.raw.as_ptr()) }
    }
    /// Experts per layer (mixture-of-experts models; 0 for others).
    pub fn n_expert(&self) -> i64 {
        unsafe { sys::pi_stats_n_expert(self.raw.as_ptr()) }
    }
    /// The n_expert values of `kind` for `layer` (an error for a model without experts).
    pub fn experts(&self, layer: i64, kind: ExpertKind) -> Result<Vec<f64>> {
        let mut out = vec![0f64; self.n_expert().max(0) as usize];
        // SAFETY: out has n_expert writable entries.
        let st = unsafe {
            sys::pi_stats_experts(
                self.raw.as_ptr(),
                layer,
                kind as c_int,
                out.as_mut_ptr(),
                out.len(),
            )
        };
        check(st.into(), || format!("expert counts of layer {layer}"))?;
        Ok(out)
    }
    /// Totals of `layer`.
    pub fn layer(&self, layer: i64) -> Result<LayerStats> {
        let mut out = LayerStats {
            struct_size: std::mem::size_of::<LayerStats>() as u32,
            ..Default::default()
        };
        let st = unsafe { sys::pi_stats_layer(self.raw.as_ptr(), layer, &mut out) };
        check(st.into(), || format!("statistics of layer {layer}"))?;
        Ok(out)
    }
    /// The n_ff per-neuron counts of `kind` for `layer`.
    pub fn neurons(&self, layer: i64, kind: NeuronKind) -> Result<Vec<f64>> {
        let mut out = vec![0f64; self.n_ff().max(0) as usize];
        // SAFETY: out has n_ff writable entries.
        let st = unsafe {
            sys::pi_stats_neurons(
                self.raw.as_ptr(),
                layer,
                kind as c_int,
                out.as_mut_ptr(),
                out.len(),
            )
        };
        check(st.into(), || format!("neuron counts of layer {layer}"))?;
        Ok(out)
    }
    /// Write the counts as a GGUF side file (replacing `path` only once complete).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let cpath = c_path(path.as_ref())?;
        let mut errbuf = vec![0u8; ERRBUF_CAP];
        // SAFETY: cpath and errbuf (cap bytes) live for the call.
        let st = unsafe {
            sys::pi_stats_save(
                self.raw.as_ptr(),
                cpath.as_ptr(),
                errbuf.as_mut_ptr().cast(),
                errbuf.len(),
            )
        };
        if st < 0 {
            return Err(Error::new(st, buf_message(&errbuf)));
        }
        Ok(())
    }
}

/// Statistics loaded from a side file; owned, freed on drop.
pub struct Stats {
    raw: NonNull<sys::pi_stats>,
}

// SAFETY: loaded statistics are a plain heap object with no thread affinity; moving
// ownership between threads is fine. Not Sync (the header promises nothing about
// concurrent reads of one pi_stats).
unsafe impl Send for Stats {}

impl Stats {
    /// Read a side file written by [`StatsView::save`] (or the conversion tool).
    pub fn load(path: impl AsRef<Path>) -> Result<Stats> {
        let cpath = c_path(path.as_ref())?;
        let mut errbuf = vec![0u8; ERRBUF_CAP];
        let mut out = ptr::null_mut();
        // SAFETY: cpath and errbuf live for the call; ownership of *out transfers to us.
        let st = unsafe {
            sys::pi_stats_load(cpath.as_ptr(), &mut out, errbuf.as_mut_ptr().cast(), errbuf.len())
        };
        match NonNull::new(out) {
            Some(raw) if st == sys::PI_OK => Ok(Stats { raw }),
            _ => Err(Error::new(
                if st < 0 { st } else { sys::PI_ERR_INTERNAL },
                buf_message(&errbuf),
            )),
        }
    }

    /// A view for the queries.
    pub fn view(&self) -> StatsView<'_> {
        StatsView { raw: self.raw, _owner: PhantomData }
    }
}

impl Drop for Stats {
    fn drop(&mut self) {
        // SAFETY: we own it (from pi_stats_load); views borrow self, so none is alive.
        unsafe { sys::pi_stats_free(self.raw.as_ptr()) }
    }
}

// =====================================================================================
// Placement plans
// =====================================================================================

/// The dense parts of one layer a plan puts on the device (`pi_plan_layer_parts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LayerParts(pub u32);

impl LayerParts {
    /// Whether `part` (Attention, Predictor or FfnNorm) is on the device.
    pub fn contains(self, part: PlanPart) -> bool {
        (self.0 >> part as u32) & 1 != 0
    }
    pub fn attention(self) -> bool {
        self.contains(PlanPart::Attention)
    }
    pub fn predictor(self) -> bool {
        self.contains(PlanPart::Predictor)
    }
    pub fn ffn_norm(self) -> bool {
        self.contains(PlanPart::FfnNorm)
    }
}

/// A read-only view of a plan: a context's ([`Context::plan`]) or an owned one's
/// ([`Plan::view`]). Plans are immutable.
#[derive(Clone, Copy)]
pub struct PlanView<'a> {
    raw: NonNull<sys::pi_plan>,
    _owner: PhantomData<&'a sys::pi_plan>,
}

/// SAFETY (for every `unsafe` block below): `raw` is a valid plan for `'a` (its owner,
/// a Plan or a Context, is borrowed shared) and plans do not change.
impl PlanView<'_> {
    /// The budget it was made for, in bytes.
    pub fn budget(&self) -> u64 {
        unsafe { sys::pi_plan_budget(self.raw.as_ptr()) }
    }
    /// Device bytes of one part.
    pub fn bytes(&self, part: PlanPart) -> u64 {
        unsafe { sys::pi_plan_bytes(self.raw.as_ptr(), part as c_int) }
    }
    /// Device bytes of all parts.
    pub fn total_bytes(&self) -> u64 {
        unsafe { sys::pi_plan_bytes(self.raw.as_ptr(), sys::PI_PLAN_N_PARTS) }
    }
    pub fn n_layer(&self) -> i64 {
        unsafe { sys::pi_plan_n_layer(self.raw.as_ptr()) }
    }
    /// FFN neurons per layer.
    pub fn n_ff(&self) -> i64 {
        unsafe { sys::pi_plan_n_ff(self.raw.as_ptr()) }
    }
    /// The dense parts of `layer` on the device (none when out of range).
    pub fn layer_parts(&self, layer: i64) -> LayerParts {
        LayerParts(unsafe { sys::pi_plan_layer_parts(self.raw.as_ptr(), layer) })
    }
    /// How many of `layer`'s FFN neurons are on the device.
    pub fn layer_neurons(&self, layer: i64) -> Result<i64> {
        let n = unsafe { sys::pi_plan_layer_neurons(self.raw.as_ptr(), layer, ptr::null_mut(), 0) };
        if n < 0 {
            return Err(Error::new(sys::PI_ERR_RANGE, format!("layer {layer} of the plan")));
        }
        Ok(n)
    }
    /// Which of `layer`'s n_ff neurons are on the device.
    pub fn layer_mask(&self, layer: i64) -> Result<Vec<bool>> {
        let mut mask = vec![0u8; self.n_ff().max(0) as usize];
        // SAFETY: mask has n_ff writable bytes.
        let n = unsafe {
            sys::pi_plan_layer_neurons(self.raw.as_ptr(), layer, mask.as_mut_ptr(), mask.len())
        };
        if n < 0 {
            return Err(Error::new(sys::PI_ERR_RANGE, format!("layer {layer} of the plan")));
        }
        Ok(mask.into_iter().map(|b| b != 0).collect())
    }
    /// Whether the output projection is on the device.
    pub fn output_on_device(&self) -> bool {
        unsafe { sys::pi_plan_output_on_device(self.raw.as_ptr()) != 0 }
    }
    /// Whether the KV cache is on the device.
    pub fn kv_on_device(&self) -> bool {
        unsafe { sys::pi_plan_kv_on_device(self.raw.as_ptr()) != 0 }
    }
    /// Where the neurons came from.
    pub fn source(&self) -> PlanSource {
        match unsafe { sys::pi_plan_source(self.raw.as_ptr()) } {
            sys::PI_PLAN_FROM_FILE => PlanSource::FromFile,
            sys::PI_PLAN_CACHE_WRITTEN => PlanSource::CacheWritten,
            sys::PI_PLAN_CACHE_UNWRITTEN => PlanSource::CacheUnwritten,
            _ => PlanSource::Computed,
        }
    }
    /// The library's description: budget, bytes per part, each layer's parts and
    /// neuron count.
    pub fn describe(&self) -> Result<String> {
        let bytes = fill_buffer(|buf, cap| unsafe {
            // SAFETY: buf has cap writable bytes.
            sys::pi_plan_describe(self.raw.as_ptr(), buf, cap)
        })
        .map_err(|st| Error::new(st as i32, "describe the plan"))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
    /// Write the plan's neurons as a GPU index file (PowerInfer's format), atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let cpath = c_path(path)?;
        // SAFETY: cpath lives for the call.
        let st = unsafe { sys::pi_plan_save(self.raw.as_ptr(), cpath.as_ptr()) };
        if st < 0 {
            return Err(Error::new(st, format!("cannot write the plan to {}", path.display())));
        }
        Ok(())
    }
}

impl fmt::Debug for PlanView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("budget", &self.budget())
            .field("bytes", &self.total_bytes())
            .field("source", &self.source())
            .finish()
    }
}

/// A plan from a dry run ([`Model::plan`]); owned, freed on drop. Borrows its model.
pub struct Plan<'m> {
    raw: NonNull<sys::pi_plan>,
    _model: PhantomData<&'m Model>,
}

// SAFETY: a plan is an immutable heap object with no thread affinity; moving ownership
// between threads is fine. Not Sync (NonNull): the header promises nothing about
// concurrent reads.
unsafe impl Send for Plan<'_> {}

impl Plan<'_> {
    /// A view for the queries.
    pub fn view(&self) -> PlanView<'_> {
        PlanView { raw: self.raw, _owner: PhantomData }
    }
}

impl Drop for Plan<'_> {
    fn drop(&mut self) {
        // SAFETY: we own it (from pi_model_plan); views borrow self, so none is alive.
        unsafe { sys::pi_plan_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view().fmt(f)
    }
}

// =====================================================================================
// Sampler
// =====================================================================================

/// Chooses tokens from a context's logits: penalties, top-k, top-p, min-p,
/// temperature, a seeded draw; `temperature <= 0` is greedy. Borrows its model.
/// `Send`, not `Sync`.
pub struct Sampler<'m> {
    raw: NonNull<sys::pi_sampler>,
    _model: PhantomData<&'m Model>,
}

// SAFETY: a sampler is a memory-only object with no thread affinity, used through
// &mut self only (one thread at a time); the borrowed Model is Sync. NonNull keeps it
// !Sync.
unsafe impl Send for Sampler<'_> {}

/// Sampler options (`pi_sampler_params`); [`SamplerParams::default`] gives the
/// library's defaults.
#[derive(Debug, Clone, Copy)]
pub struct SamplerParams(pub sys::pi_sampler_params);

impl Default for SamplerParams {
    fn default() -> Self {
        // SAFETY: all-zero bits are a valid pi_sampler_params; the library fills it.
        let mut p: sys::pi_sampler_params = unsafe { std::mem::zeroed() };
        // SAFETY: p is valid and writable.
        unsafe { sys::pi_sampler_default_params(&mut p) };
        SamplerParams(p)
    }
}

impl SamplerParams {
    /// Greedy: the arg max of the logits.
    pub fn greedy() -> Self {
        Self::default().temperature(0.0)
    }
    pub fn temperature(mut self, t: f32) -> Self {
        self.0.temperature = t;
        self
    }
    pub fn top_k(mut self, k: i32) -> Self {
        self.0.top_k = k;
        self
    }
    pub fn top_p(mut self, p: f32) -> Self {
        self.0.top_p = p;
        self
    }
    pub fn min_p(mut self, p: f32) -> Self {
        self.0.min_p = p;
        self
    }
    pub fn repeat_penalty(mut self, p: f32) -> Self {
        self.0.repeat_penalty = p;
        self
    }
    pub fn frequency_penalty(mut self, p: f32) -> Self {
        self.0.frequency_penalty = p;
        self
    }
    pub fn presence_penalty(mut self, p: f32) -> Self {
        self.0.presence_penalty = p;
        self
    }
    pub fn penalty_last_n(mut self, n: i32) -> Self {
        self.0.penalty_last_n = n;
        self
    }
    pub fn seed(mut self, seed: u64) -> Self {
        self.0.seed = seed;
        self
    }
}

impl<'m> Sampler<'m> {
    /// A sampler for `model` with `params`.
    pub fn new(model: &'m Model, params: SamplerParams) -> Result<Self> {
        let mut out = ptr::null_mut();
        // SAFETY: model outlives the sampler ('m); params live for the call.
        let st = unsafe { sys::pi_sampler_create(model.as_ptr(), &params.0, &mut out) };
        check(st.into(), || "create a sampler (check the parameters)".to_owned())?;
        let raw = NonNull::new(out)
            .ok_or_else(|| Error::new(sys::PI_ERR_INTERNAL, "pi_sampler_create gave NULL"))?;
        Ok(Sampler { raw, _model: PhantomData })
    }

    /// Choose the next token from `ctx`'s logits and add it to the penalty history.
    pub fn sample(&mut self, ctx: &Context<'_>) -> Result<i32> {
        let mut token = -1;
        // SAFETY: &mut self and &Context (not Sync, so on this thread): no overlapping
        // calls on either.
        let st = unsafe { sys::pi_sample(self.raw.as_ptr(), ctx.as_ptr(), &mut token) };
        check(st.into(), || "sample (no logits yet, or a context of another model)".to_owned())?;
        Ok(token)
    }

    /// Choose a token from `logits` (the n_vocab logits of the sampler's model, e.g. one
    /// entry's [`Context::batch_logits`], so that each sequence samples with its own
    /// sampler) and add it to the penalty history. A slice of another length is refused.
    pub fn sample_logits(&mut self, logits: &[f32]) -> Result<i32> {
        let mut token = -1;
        // SAFETY: &mut self; logits is logits.len() readable floats borrowed for the
        // call, and the library reads exactly n_vocab of them only when n_vocab equals
        // its model's (refusing the call otherwise). An empty slice's dangling pointer
        // is never read (length 0 is refused).
        let st = unsafe {
            sys::pi_sample_logits(
                self.raw.as_ptr(),
                logits.as_ptr(),
                logits.len() as i64,
                &mut token,
            )
        };
        check(st.into(), || {
            format!("sample from {} logits (not the model's n_vocab?)", logits.len())
        })?;
        Ok(token)
    }

    /// Add `token` to the penalty history without sampling (e.g. the prompt).
    pub fn accept(&mut self, token: i32) -> Result<()> {
        // SAFETY: &mut self.
        let st = unsafe { sys::pi_sampler_accept(self.raw.as_ptr(), token) };
        check(st.into(), || format!("accept token {token}")).map(drop)
    }

    /// Clear the history and re-seed.
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: &mut self.
        let st = unsafe { sys::pi_sampler_reset(self.raw.as_ptr()) };
        check(st.into(), || "reset the sampler".to_owned()).map(drop)
    }
}

impl Drop for Sampler<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the sampler.
        unsafe { sys::pi_sampler_destroy(self.raw.as_ptr()) }
    }
}

// =====================================================================================
// Grammars
// =====================================================================================

/// A GBNF grammar for constrained decoding (`pi_grammar_*`): [`Grammar::mask`] sets the
/// logits of every token that may not come next to -inf, [`Grammar::accept`] moves on by
/// the token sampled. Borrows its model (or none: text only). `Send`, not `Sync`.
pub struct Grammar<'m> {
    raw: NonNull<sys::pi_grammar>,
    _model: PhantomData<&'m Model>,
}

// SAFETY: a grammar is memory-only, used through &mut self (one thread at a time); what
// clones share is read-only in the library.
unsafe impl Send for Grammar<'_> {}

impl<'m> Grammar<'m> {
    /// Compile `gbnf` with start rule `root` for `model` (None: a grammar that reads
    /// text only). A malformed grammar's error says "line:col: why".
    pub fn new(model: Option<&'m Model>, gbnf: &str, root: &str) -> Result<Self> {
        let root_c = CString::new(root)
            .map_err(|_| Error::new(sys::PI_ERR_INVALID_ARG, "root contains a NUL byte"))?;
        let mut out = ptr::null_mut();
        let mut buf = vec![0u8; 512];
        let m = model.map_or(ptr::null(), |m| m.as_ptr() as *const sys::pi_model);
        // SAFETY: gbnf is gbnf.len() readable bytes and root_c a C string, both borrowed
        // for the call; buf is buf.len() writable bytes; the model outlives 'm.
        let st = unsafe {
            sys::pi_grammar_create(
                m,
                gbnf.as_ptr() as *const c_char,
                gbnf.len(),
                root_c.as_ptr(),
                &mut out,
                buf.as_mut_ptr() as *mut c_char,
                buf.len(),
            )
        };
        check(st.into(), || buf_message(&buf))?;
        let raw = NonNull::new(out)
            .ok_or_else(|| Error::new(sys::PI_ERR_INTERNAL, "pi_grammar_create gave NULL"))?;
        Ok(Grammar { raw, _model: PhantomData })
    }

    fn message(&self) -> String {
        // SAFETY: the message is owned by the grammar and valid until the next call on it.
        let p = unsafe { sys::pi_grammar_errmsg(self.raw.as_ptr()) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string from the library.
        unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// An independent copy in the same state.
    pub fn try_clone(&self) -> Result<Grammar<'m>> {
        let mut out = ptr::null_mut();
        // SAFETY: &self: the source is only read.
        let st = unsafe { sys::pi_grammar_clone(self.raw.as_ptr(), &mut out) };
        check(st.into(), || "clone the grammar".to_owned())?;
        let raw = NonNull::new(out)
            .ok_or_else(|| Error::new(sys::PI_ERR_INTERNAL, "pi_grammar_clone gave NULL"))?;
        Ok(Grammar { raw, _model: PhantomData })
    }

    /// Back to the start.
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: &mut self.
        let st = unsafe { sys::pi_grammar_reset(self.raw.as_ptr()) };
        check(st.into(), || self.message()).map(drop)
    }

    /// True when the text so far is a whole sentence of the grammar.
    pub fn is_complete(&self) -> bool {
        // SAFETY: &self: only read.
        unsafe { sys::pi_grammar_complete(self.raw.as_ptr()) == 1 }
    }

    /// Set every refused token's logit to -inf; how many tokens stay allowed.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<i64> {
        // SAFETY: &mut self; logits is logits.len() writable floats borrowed for the call
        // (the library refuses a length other than its model's n_vocab).
        let n = unsafe {
            sys::pi_grammar_mask(self.raw.as_ptr(), logits.as_mut_ptr(), logits.len() as i64)
        };
        check(n, || self.message())
    }

    /// Move on by `token` (PI_ERR_RANGE when it may not come next; nothing changes).
    pub fn accept(&mut self, token: i32) -> Result<()> {
        // SAFETY: &mut self.
        let st = unsafe { sys::pi_grammar_accept(self.raw.as_ptr(), token) };
        check(st.into(), || self.message()).map(drop)
    }

    /// Move on by `text`, all or nothing.
    pub fn accept_text(&mut self, text: &str) -> Result<()> {
        // SAFETY: &mut self; text is text.len() bytes borrowed for the call.
        let st = unsafe {
            sys::pi_grammar_accept_text(
                self.raw.as_ptr(),
                text.as_ptr() as *const c_char,
                text.len(),
            )
        };
        check(st.into(), || self.message()).map(drop)
    }
}

impl Drop for Grammar<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the grammar.
        unsafe { sys::pi_grammar_destroy(self.raw.as_ptr()) }
    }
}

// =====================================================================================
// Quantization
// =====================================================================================

/// Options of [`quantize`] (`pi_quantize_params`); `default()` targets Q4_0.
#[derive(Debug, Clone, Copy)]
pub struct QuantizeParams {
    /// Target type of the weights: sys::PI_TYPE_Q4_0, _Q4_1, _Q5_0, _Q5_1 or _Q8_0.
    pub type_id: i32,
    /// Type of a PowerInfer file's predictors; 0: the same as `type_id`.
    pub predictor_type: i32,
    /// Leave output.weight as it is.
    pub keep_output: bool,
    /// Threads; 0: the processors available.
    pub n_threads: u32,
    /// Dequantize and quantize again weights already quantized to another type
    /// (otherwise such a file is refused with `PI_ERR_UNSUPPORTED`).
    pub allow_requantize: bool,
}

impl Default for QuantizeParams {
    fn default() -> Self {
        QuantizeParams {
            type_id: sys::PI_TYPE_Q4_0,
            predictor_type: 0,
            keep_output: false,
            n_threads: 0,
            allow_requantize: false,
        }
    }
}

/// Rewrite the model at `input` with its large weights quantized, into `output`
/// (written whole to a temporary file, then renamed).
pub fn quantize(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    params: &QuantizeParams,
) -> Result<()> {
    let cin = c_path(input.as_ref())?;
    let cout = c_path(output.as_ref())?;
    // SAFETY: all-zero bits are a valid pi_quantize_params; the library fills it.
    let mut p: sys::pi_quantize_params = unsafe { std::mem::zeroed() };
    // SAFETY: p is valid and writable.
    unsafe { sys::pi_quantize_default_params(&mut p) };
    p.type_ = params.type_id as u32;
    p.predictor_type = params.predictor_type as u32;
    p.keep_output = params.keep_output as u32;
    p.n_threads = params.n_threads;
    p.allow_requantize = params.allow_requantize as u32;
    let mut errbuf = vec![0u8; ERRBUF_CAP];
    p.errbuf = errbuf.as_mut_ptr().cast();
    p.errbuf_cap = errbuf.len();
    // SAFETY: paths, params and errbuf live for the call.
    let st = unsafe { sys::pi_model_quantize(cin.as_ptr(), cout.as_ptr(), &p) };
    if st < 0 {
        return Err(Error::new(st, buf_message(&errbuf)));
    }
    Ok(())
}

// =====================================================================================
// Convenience
// =====================================================================================

/// Greedy generation: tokenize `prompt` (with the model's BOS if it asks for one),
/// decode it, then decode up to `n_predict` arg-max tokens, stopping at an
/// end-of-generation token. Returns the generated text (without the prompt).
pub fn generate_greedy(
    model: &Model,
    ctx: &mut Context<'_>,
    prompt: &str,
    n_predict: usize,
) -> Result<String> {
    let tokens = model.tokenize(prompt, TokenizeFlags::ADD_SPECIAL)?;
    let mut sampler = Sampler::new(model, SamplerParams::greedy())?;
    let mut detok = Detokenizer::new(model, false)?;
    let mut text = String::new();
    ctx.decode(&tokens)?;
    for _ in 0..n_predict {
        let t = sampler.sample(ctx)?;
        if model.token_is_eog(t) {
            break;
        }
        text.push_str(&detok.push(t)?);
        ctx.decode(&[t])?;
    }
    text.push_str(&detok.flush()?);
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}
    fn assert_sync<T: Sync>() {}

    #[test]
    fn thread_markers() {
        assert_send::<Model>();
        assert_sync::<Model>();
        assert_send::<Context<'static>>();
        assert_send::<Sampler<'static>>();
        assert_send::<Detokenizer<'static>>();
        assert_send::<Stats>();
        assert_send::<Plan<'static>>();
        assert_send::<Error>();
        assert_sync::<Error>();
    }

    #[test]
    fn status_names_and_display() {
        let e = Error::new(sys::PI_ERR_IO, "cannot open x");
        assert_eq!(e.status(), -3);
        assert!(!e.name().is_empty());
        assert_eq!(e.to_string(), format!("{} (-3): cannot open x", e.name()));
        assert_eq!(status_str(12345), "unknown status");
    }

    #[test]
    fn versions() {
        assert_eq!(version(), sys::PI_VERSION_NUMBER);
        assert_eq!(abi_version(), sys::PI_ABI_VERSION);
        assert_eq!(version_string(), "0.1.0");
        assert_eq!(type_name(sys::PI_TYPE_Q4_0), Some("Q4_0"));
        assert_eq!(type_name(9999), None);
    }

    #[test]
    fn open_missing_file_is_io_error() {
        let e = Model::open("/nonexistent/dir/model.gguf").unwrap_err();
        assert_eq!(e.status(), sys::PI_ERR_IO, "{e}");
        assert!(!e.message().is_empty());
    }

    #[test]
    fn batch_entry_to_raw() {
        let e = BatchEntry::new(7, 2).raw();
        assert_eq!((e.token, e.seq, e.pos, e.logits), (7, 2, -1, 0));
        let e = BatchEntry::new(7, 2).at(5).logits(true).raw();
        assert_eq!((e.token, e.seq, e.pos, e.logits), (7, 2, 5, 1));
        assert_eq!(BatchEntry::new(1, 0).logits(true).logits(false), BatchEntry::new(1, 0));
    }

    #[test]
    fn nul_in_path_is_invalid_arg() {
        let e = Model::open("a\0b").unwrap_err();
        assert_eq!(e.status(), sys::PI_ERR_INVALID_ARG);
    }
}
