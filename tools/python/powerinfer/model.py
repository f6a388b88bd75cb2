"""Model, its metadata and tensor table, the tokenizer, the detokenizer, chat prompts.

Threading (the header's contract): a Model is immutable once open; its queries,
tokenize/detokenize and chat_apply may be called from many threads at once (ctypes
releases the GIL during each library call). Model.close must not race with any other
call on the same model or on an object borrowing it. The library's error message of a
shared model belongs to its last failing call, so under threads the `message` of a
PowerInferError may describe another thread's failure; its `status` is always exact.
"""

import collections.abc
import ctypes
import json
import logging
from dataclasses import dataclass

from . import _lib
from ._errors import PI_ERR_NOT_FOUND, PowerInferError, check
from ._util import (Handle, Owner, c_int, cstr, decode, encode, errbuf, fill, fspath, holding,
                    token_array)

# PI_META_*
META_U8, META_I8, META_U16, META_I16, META_U32, META_I32 = 0, 1, 2, 3, 4, 5
META_F32, META_BOOL, META_STRING, META_ARRAY = 6, 7, 8, 9
META_U64, META_I64, META_F64 = 10, 11, 12
_META_NAMES = {0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32",
               7: "bool", 8: "string", 9: "array", 10: "u64", 11: "i64", 12: "f64"}
_META_INTS = {META_U8, META_I8, META_U16, META_I16, META_U32, META_I32, META_U64,
              META_I64}
_META_FLOATS = {META_F32, META_F64}

# PI_LOG_*
LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR = 0, 1, 2, 3
_LOG_LEVELS = {"debug": LOG_DEBUG, "info": LOG_INFO, "warn": LOG_WARN,
               "warning": LOG_WARN, "error": LOG_ERROR}
_TO_LOGGING = {LOG_DEBUG: logging.DEBUG, LOG_INFO: logging.INFO,
               LOG_WARN: logging.WARNING, LOG_ERROR: logging.ERROR}

# PI_TOKENIZE_*, PI_PIECE_*
# PI_LOAD_*
_LOAD_MMAP, _LOAD_READ = 0, 1
TOKENIZE_ADD_SPECIAL = 1 << 0
TOKENIZE_PARSE_SPECIAL = 1 << 1
PIECE_SPECIAL = 1 << 0

# PI_CHAT_*
CHAT_FORMATS = {"auto": 0, "chatml": 1, "llama2": 2, "llama3": 3, "gemma": 4, "phi3": 5,
                "mistral-v1": 6, "mistral-v3": 7, "mistral-v3-tekken": 8, "mistral-v7": 9,
                "falcon": 10, "jinja": 11}
_CHAT_NAMES = {v: k for k, v in CHAT_FORMATS.items()}
# PI_POOL_*
POOLINGS = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
_POOL_NAMES = {v: k for k, v in POOLINGS.items()}

_DEFAULT_LOGGER = object()


def _log_level(level, log):
    if level is None:
        if isinstance(log, logging.Logger):
            eff = log.getEffectiveLevel()
            return (LOG_DEBUG if eff <= logging.DEBUG else LOG_INFO if eff <= logging.INFO
                    else LOG_WARN if eff <= logging.WARNING else LOG_ERROR)
        return None
    if isinstance(level, str):
        try:
            return _LOG_LEVELS[level.lower()]
        except KeyError:
            raise ValueError("unknown log level %r" % level) from None
    return c_int(level, "int", "log level")


def _make_log_fn(log):
    """A pi_log_fn for `log` (a logging.Logger or a callable(level, msg)), or None."""
    if log is None or log is False:
        return None
    if isinstance(log, logging.Logger):
        logger = log

        def sink(level, msg):
            logger.log(_TO_LOGGING.get(level, logging.INFO), "%s", msg)
    elif callable(log):
        sink = log
    else:
        raise TypeError("log must be a logging.Logger, a callable(level, msg) or None")

    def c_log(_user, level, msg):
        # An exception here cannot cross into C: ctypes reports it through
        # sys.unraisablehook and the library goes on.
        sink(level, decode(msg))
    return _lib.LOG_FN(c_log)


class _Progress:
    """Wraps a Python progress callable as a pi_progress_fn. A truthy return value
    asks the library to stop (PI_ERR_ABORTED); an exception does the same and is
    re-raised by reraise() once the call has returned."""

    def __init__(self, progress):
        self.error = None
        self.fn = None
        if progress is not None:
            if not callable(progress):
                raise TypeError("progress must be callable")

            def c_progress(_user, fraction):
                try:
                    return 1 if progress(float(fraction)) else 0
                except BaseException as e:  # noqa: BLE001 - re-raised after the call
                    self.error = e
                    return 1
            self.fn = _lib.PROGRESS_FN(c_progress)

    def reraise(self):
        if self.error is not None:
            err, self.error = self.error, None
            raise err


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table. shape is in GGUF order (shape[0] is the
    contiguous dimension), with n_dims entries."""
    index: int
    name: str
    type: int
    type_name: str
    shape: tuple
    nbytes: int


def type_name(type_id):
    """pi_type_name: the GGUF name of a tensor type id ("Q4_0"), or None."""
    raw = _lib.lib().pi_type_name(c_int(type_id, "int", "type_id"))
    return None if raw is None else raw.decode("ascii")


class Model(Owner):
    """An open model file (pi_model_open / pi_model_close).

        with Model("model.gguf") as m:
            print(m.arch, m.n_layer, m.tokenize("Hello"))

    path:          the GGUF or PowerInfer (PWRI) file.
    metadata_only: check the container and read metadata and tensors only; no
                   hyper-parameters (they read 0), no tokenizer, no contexts.
    log:           where the library's diagnostics go: a logging.Logger (default: the
                   "powerinfer" logger), a callable(level: int, msg: str) with level a
                   LOG_* value, or None for silence. The model keeps logging through
                   it until closed.
    log_level:     least severe level passed on ("debug", "info", "warn", "error" or
                   LOG_*); default: from the logger's effective level, else the
                   library's default (info).
    progress:      callable(fraction) during the open; return a truthy value (or
                   raise) to stop it, which raises PowerInferError(PI_ERR_ABORTED)
                   (or the exception raised).
    mmap:          True (default): map the file; False: read it whole into memory
                   the model owns (PI_LOAD_READ), so that truncating or rewriting
                   the file later cannot affect the model (with a mapping a
                   truncation kills the process with SIGBUS).
    mlock:         lock the model's bytes in RAM; when the system refuses, the model
                   opens anyway and a warning is logged.
    library:       explicit path of libpowerinfer, see load_library.

    Raises PowerInferError (status PI_ERR_IO for a missing file, PI_ERR_FORMAT for a
    malformed one, PI_ERR_UNSUPPORTED, ...) with the library's message.

    Objects that borrow the model (Context, Sampler, Detokenizer) keep it alive;
    close() closes them first, after which they raise ValueError. Thread-safety: see
    the module docstring."""

    def __init__(self, path, *, metadata_only=False, log=_DEFAULT_LOGGER, log_level=None,
                 progress=None, mmap=True, mlock=False, library=None):
        self._handle = None
        lib = _lib.load_library(library)
        if log is _DEFAULT_LOGGER:
            log = logging.getLogger("powerinfer")
        params = _lib.ModelParams()
        check(lib.pi_model_default_params(ctypes.byref(params)), "pi_model_default_params")
        params.metadata_only = 1 if metadata_only else 0
        params.load_mode = _LOAD_MMAP if mmap else _LOAD_READ
        params.lock_memory = 1 if mlock else 0
        self._log_fn = _make_log_fn(log)  # kept alive until the model is closed
        if self._log_fn is not None:
            params.log_fn = self._log_fn
            level = _log_level(log_level, log)
            if level is not None:
                params.log_level = level
        prog = _Progress(progress)
        if prog.fn is not None:
            params.progress_fn = prog.fn
        buf, params.errbuf = errbuf()
        params.errbuf_cap = len(buf)
        out = ctypes.c_void_p()
        st = lib.pi_model_open(fspath(path), ctypes.byref(params), ctypes.byref(out))
        prog.reraise()
        check(st, "pi_model_open", lambda: decode(buf.value))
        self._handle = Handle(out.value, lib.pi_model_close)
        self.path = path
        self.metadata_only = bool(metadata_only)

    # ---- lifetime: close() (closes everything borrowing the model first), closed,
    # context manager: Owner

    def __repr__(self):
        if self.closed:
            return "<powerinfer.Model closed>"
        return "<powerinfer.Model %r arch=%s%s>" % (
            self.path, self.arch, " sparse" if self.is_sparse else "")

    def _ptr(self):
        if self._handle is None or self._handle.ptr is None:
            raise ValueError("the model is closed")
        return self._handle.ptr

    def _errmsg(self):
        return decode(_lib.lib().pi_model_errmsg(self._handle.ptr))

    def _check(self, status, call):
        return check(status, call, self._errmsg)

    # ---- description ----------------------------------------------------------------
    @holding
    def _q(self, name, *args):
        return getattr(_lib.lib(), name)(self._ptr(), *args)

    arch = property(lambda self: decode(self._q("pi_model_arch")),
                    doc="general.architecture ('llama', 'bamboo'), '' if absent")
    is_sparse = property(lambda self: bool(self._q("pi_model_is_sparse")),
                         doc="True for a PowerInfer (PWRI) file")
    n_layer = property(lambda self: self._q("pi_model_n_layer"))
    n_embd = property(lambda self: self._q("pi_model_n_embd"))
    n_ff = property(lambda self: self._q("pi_model_n_ff"), doc="FFN neurons per layer")
    n_head = property(lambda self: self._q("pi_model_n_head"))
    n_head_kv = property(lambda self: self._q("pi_model_n_head_kv"))
    n_vocab = property(lambda self: self._q("pi_model_n_vocab"))
    n_ctx_train = property(lambda self: self._q("pi_model_n_ctx_train"))
    sparse_threshold = property(lambda self: self._q("pi_model_sparse_threshold"),
                                doc="powerinfer.sparse_threshold; 0 for a dense model")
    n_params = property(lambda self: self._q("pi_model_n_params"),
                        doc="elements of all tensors")
    size_bytes = property(lambda self: self._q("pi_model_size_bytes"),
                          doc="bytes of tensor data")

    def predictor_rank(self, layer):
        """Rank of layer's FFN predictor; 0 for a dense model or a bad layer."""
        return self._q("pi_model_predictor_rank", c_int(layer, "int64_t", "layer"))

    # ---- metadata -------------------------------------------------------------------
    @property
    def metadata(self):
        """A read-only Mapping of the metadata: key -> Python value (int, float, bool,
        str, or a list for arrays). Values are read from the model on access."""
        return Metadata(self)

    def meta_keys(self):
        """The metadata keys in file order."""
        lib, p = _lib.lib(), self._ptr()
        return [decode(lib.pi_model_meta_key(p, i))
                for i in range(lib.pi_model_meta_count(p))]

    @holding
    def meta_type(self, key):
        """(type, elem_type, n_elem) of key's value, types as META_* ids; elem_type is
        -1 for scalars. Raises PowerInferError(PI_ERR_NOT_FOUND)."""
        t, et, n = ctypes.c_int(), ctypes.c_int(), ctypes.c_uint64()
        self._check(_lib.lib().pi_model_meta_type(self._ptr(), cstr(key, "key"), ctypes.byref(t),
                                                  ctypes.byref(et), ctypes.byref(n)),
                    "pi_model_meta_type")
        return t.value, et.value, n.value

    @holding
    def meta_int(self, key):
        """An integer or bool key's value (PI_ERR_TYPE for other types)."""
        out = ctypes.c_int64()
        self._check(_lib.lib().pi_model_meta_int(self._ptr(), cstr(key, "key"), ctypes.byref(out)),
                    "pi_model_meta_int")
        return out.value

    @holding
    def meta_float(self, key):
        """A float or integer key's value as a float."""
        out = ctypes.c_double()
        self._check(_lib.lib().pi_model_meta_float(self._ptr(), cstr(key, "key"),
                                                   ctypes.byref(out)),
                    "pi_model_meta_float")
        return out.value

    def meta_bytes(self, key):
        """A string key's value as the bytes stored in the file."""
        n, raw = fill(_lib.lib().pi_model_meta_str, self._ptr(), cstr(key, "key"))
        self._check(n, "pi_model_meta_str")
        return raw

    @holding
    def meta_str(self, key):
        """A string key's value (undecodable bytes kept as surrogate escapes)."""
        return decode(self.meta_bytes(key))

    @holding
    def meta_array(self, key):
        """An array key's elements as a list of int, float or str."""
        lib, p, k = _lib.lib(), self._ptr(), cstr(key, "key")
        _, et, n = self.meta_type(key)
        out = []
        if et == META_STRING:
            for i in range(n):
                m, raw = fill(lib.pi_model_meta_arr_str, p, k, i)
                self._check(m, "pi_model_meta_arr_str")
                out.append(decode(raw))
        elif et in _META_FLOATS:
            v = ctypes.c_double()
            for i in range(n):
                self._check(lib.pi_model_meta_arr_float(p, k, i, ctypes.byref(v)),
                            "pi_model_meta_arr_float")
                out.append(v.value)
        else:
            v = ctypes.c_int64()
            for i in range(n):
                self._check(lib.pi_model_meta_arr_int(p, k, i, ctypes.byref(v)),
                            "pi_model_meta_arr_int")
                out.append(bool(v.value) if et == META_BOOL else v.value)
        return out

    @holding
    def meta_to_string(self, key, max_items=0):
        """Any key's value as printable text (pi_model_meta_to_string)."""
        n, raw = fill(_lib.lib().pi_model_meta_to_string, self._ptr(), cstr(key, "key"),
                      c_int(max_items, "uint32_t", "max_items"))
        self._check(n, "pi_model_meta_to_string")
        return decode(raw)

    def meta_get(self, key):
        """key's value as a Python object (see metadata)."""
        t, _, _ = self.meta_type(key)
        if t == META_STRING:
            return self.meta_str(key)
        if t == META_ARRAY:
            return self.meta_array(key)
        if t == META_BOOL:
            return bool(self.meta_int(key))
        if t in _META_FLOATS:
            return self.meta_float(key)
        if t == META_U64:
            try:
                return self.meta_int(key)
            except PowerInferError:  # above INT64_MAX: the text is exact
                return int(self.meta_to_string(key))
        return self.meta_int(key)

    # ---- tensors --------------------------------------------------------------------
    @holding
    def _tensor(self, i):
        lib, p = _lib.lib(), self._ptr()
        nd, dims = ctypes.c_int(), (ctypes.c_int64 * 4)()
        self._check(lib.pi_model_tensor_shape(p, i, ctypes.byref(nd), dims),
                    "pi_model_tensor_shape")
        t = self._check(lib.pi_model_tensor_type(p, i), "pi_model_tensor_type")
        return TensorInfo(i, decode(lib.pi_model_tensor_name(p, i)), t,
                          type_name(t) or "type%d" % t, tuple(dims[:nd.value]),
                          lib.pi_model_tensor_nbytes(p, i))

    @property
    @holding
    def n_tensors(self):
        return _lib.lib().pi_model_n_tensors(self._ptr())

    @property
    def tensors(self):
        """The tensor table as a list of TensorInfo, in file order."""
        return [self._tensor(i) for i in range(self.n_tensors)]

    @holding
    def tensor(self, name):
        """The TensorInfo called name; KeyError if there is none."""
        idx = ctypes.c_int64()
        st = _lib.lib().pi_model_tensor_find(self._ptr(), cstr(name, "name"), ctypes.byref(idx))
        if st == PI_ERR_NOT_FOUND:
            raise KeyError(name)
        self._check(st, "pi_model_tensor_find")
        return self._tensor(idx.value)

    # ---- tokenizer ------------------------------------------------------------------
    @holding
    def tokenize(self, text, *, add_special=True, parse_special=False):
        """Token ids of text (str, or bytes of UTF-8). add_special: add BOS/EOS as the
        model's metadata asks; parse_special: recognise the text of control tokens
        ("<|im_start|>"). Raises PowerInferError(PI_ERR_UNSUPPORTED) for a model
        without a tokenizer."""
        raw = encode(text)
        flags = (TOKENIZE_ADD_SPECIAL if add_special else 0) | \
            (TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        lib, p = _lib.lib(), self._ptr()
        src = ctypes.create_string_buffer(raw, len(raw))
        cap = len(raw) + 8
        while True:
            toks = (ctypes.c_int32 * cap)()
            n = self._check(lib.pi_tokenize(p, src, len(raw), toks, cap, flags),
                            "pi_tokenize")
            if n <= cap:
                return toks[:n]
            cap = n

    def token_to_piece(self, token, *, special=False):
        """The raw bytes token stands for (may be part of a UTF-8 sequence).
        PI_ERR_RANGE for an id outside the vocabulary."""
        token_array([token])  # int32_t range check
        n, raw = self._piece(c_int(token, "int32_t", "token"), special)
        self._check(n, "pi_token_to_piece")
        return raw

    @holding
    def _piece(self, token, special):
        lib, p = _lib.lib(), self._ptr()
        flags = PIECE_SPECIAL if special else 0
        cap = 64
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = lib.pi_token_to_piece(p, token, buf, cap, flags)
            if n < 0 or n < cap:
                return n, (buf.raw[:n] if n >= 0 else b"")
            cap = n + 1

    @holding
    def detokenize(self, tokens, *, special=False):
        """The text of a token sequence, decoded by the library's streaming
        detokenizer (ill-formed UTF-8 becomes U+FFFD)."""
        with Detokenizer(self, special=special) as d:
            return "".join(d.push(t) for t in tokens) + d.flush()

    bos = property(lambda self: self._q("pi_model_token_bos"),
                   doc="BOS token id, -1 if none")
    eos = property(lambda self: self._q("pi_model_token_eos"),
                   doc="EOS token id, -1 if none")

    def is_eog(self, token):
        """True if generation should stop at token."""
        return bool(self._q("pi_model_token_is_eog", c_int(token, "int32_t", "token")))

    # ---- chat -----------------------------------------------------------------------
    @property
    @holding
    def chat_template(self):
        """tokenizer.chat_template, or None if the file has none."""
        n, raw = fill(_lib.lib().pi_model_chat_template, self._ptr())
        if n == PI_ERR_NOT_FOUND:
            return None
        self._check(n, "pi_model_chat_template")
        return decode(raw)

    @property
    @holding
    def chat_format(self):
        """The chat format of the template: the built-in family its markers name (a
        name of CHAT_FORMATS: 'chatml', 'llama2', 'llama3', 'gemma', 'phi3',
        'mistral-v1', 'mistral-v3', 'mistral-v3-tekken', 'mistral-v7', 'falcon'), or
        'jinja' for a template of another style that the interpreter parses.
        PowerInferError PI_ERR_NOT_FOUND (no template) or PI_ERR_UNSUPPORTED (a
        template that does not parse)."""
        st = self._check(_lib.lib().pi_model_chat_format(self._ptr()),
                         "pi_model_chat_format")
        return _CHAT_NAMES.get(st, st)

    @property
    @holding
    def pooling(self):
        """The pooling the file asks for ({arch}.pooling_type): a name of POOLINGS
        ('none', 'mean', 'cls', 'last', 'rank'), or None when the file has none (chat
        models). PowerInferError PI_ERR_FORMAT for a value that is not one of them."""
        st = _lib.lib().pi_model_pooling(self._ptr())
        if st == PI_ERR_NOT_FOUND:
            return None
        st = self._check(st, "pi_model_pooling")
        return _POOL_NAMES.get(st, st)

    @holding
    def chat_apply(self, messages, *, format="auto", add_assistant=True):
        """Render messages as a prompt: an iterable of {"role": ..., "content": ...}
        dicts or (role, content) pairs, role "system", "user" or "assistant".
        format: "auto" (the model's template executed, else the built-in format it
        names), "jinja" (the template executed), a name of CHAT_FORMATS or a PI_CHAT_*
        id. For tools, tool calls or other data use ChatTemplate. The result contains special-token text: tokenize it with
        parse_special=True."""
        fmt = CHAT_FORMATS[format] if isinstance(format, str) else c_int(format, "int", "format")
        pairs = []
        for m in messages:
            role, content = (m["role"], m["content"]) if isinstance(m, dict) else m
            pairs.append((cstr(role, "role"), cstr(content, "content")))
        arr = (_lib.ChatMessage * max(len(pairs), 1))()
        for i, (r, c) in enumerate(pairs):
            arr[i].role, arr[i].content = r, c
        n, raw = fill(_lib.lib().pi_chat_apply, self._ptr(), fmt, arr, len(pairs),
                      1 if add_assistant else 0, cap=1024)
        self._check(n, "pi_chat_apply")
        return decode(raw)

    # ---- hybrid execution -----------------------------------------------------------
    def plan(self, **ctx_kwargs):
        """Dry run of hybrid placement (pi_model_plan): the Plan a Context with the same
        keyword arguments would run with (device, device_index, device_budget, n_ctx,
        n_batch, plan_stats, plan_path, plan_file; see Context), without loading any
        weight onto a device. device defaults to "gpu" here ("cpu" checks a plan
        without one). With plan_path and plan_file "cache" or "write" the plan file is
        written as a context would write it. The Plan is owned: close() frees it (so
        does closing the model). PowerInferError PI_ERR_UNSUPPORTED (no GPU),
        PI_ERR_FORMAT / PI_ERR_RANGE / PI_ERR_IO (plan file), PI_ERR_INVALID_ARG."""
        from .context import ctx_params
        from .plan import Plan
        ctx_kwargs.setdefault("device", "gpu")
        return Plan._make(self, ctx_params(**ctx_kwargs))


class Metadata(collections.abc.Mapping):
    """Read-only mapping view of a model's metadata (see Model.metadata)."""

    def __init__(self, model):
        self._model = model

    def __getitem__(self, key):
        try:
            return self._model.meta_get(key)
        except PowerInferError as e:
            if e.status == PI_ERR_NOT_FOUND:
                raise KeyError(key) from None
            raise

    def __iter__(self):
        return iter(self._model.meta_keys())

    def __len__(self):
        return _lib.lib().pi_model_meta_count(self._model._ptr())

    def __contains__(self, key):
        try:
            self._model.meta_type(key)
            return True
        except PowerInferError as e:
            if e.status == PI_ERR_NOT_FOUND:
                return False
            raise

    def type_of(self, key):
        """Type name of key's value ("u32", "string", "array[string]", ...)."""
        t, et, _ = self._model.meta_type(key)
        name = _META_NAMES.get(t, str(t))
        return "array[%s]" % _META_NAMES.get(et, str(et)) if t == META_ARRAY else name


class ChatTemplate(Owner):
    """A chat template executed by the library's Jinja interpreter (pi_chat_template_*),
    as transformers' apply_chat_template runs it.

    ChatTemplate(model) parses the model's tokenizer.chat_template, ChatTemplate(source=
    text) any template (model optional: it gives bos_token and eos_token, copied; the
    template does not keep the model). PowerInferError PI_ERR_FORMAT (syntax error,
    message "line L, column C: ..."), PI_ERR_NOT_FOUND (the model has no template),
    PI_ERR_RANGE. render() may run on many threads at once."""

    def __init__(self, model=None, source=None):
        self._handle = None
        if model is None and source is None:
            raise ValueError("ChatTemplate needs a model or a source")
        lib = _lib.lib()
        out = ctypes.c_void_p()
        buf, ptr = errbuf()
        src = None if source is None else cstr(source, "source")
        st = lib.pi_chat_template_create(None if model is None else model._ptr(), src,
                                         ctypes.byref(out), ptr, len(buf))
        check(st, "pi_chat_template_create", lambda: decode(buf.value))
        self._handle = Handle(out.value, lib.pi_chat_template_destroy)

    def _ptr(self):
        if self._handle is None or self._handle.ptr is None:
            raise ValueError("the chat template is closed")
        return self._handle.ptr

    @holding
    def render(self, data=None, *, now=None, **variables):
        """Render with the template's variables: `data` (a dict, or its JSON text) and/or
        keyword arguments (messages=[...], tools=[...], add_generation_prompt=True,
        enable_thinking=False, ...). now: seconds since the epoch for strftime_now (UTC);
        None leaves strftime_now undefined (templates fall back to their own date).
        PowerInferError PI_ERR_FORMAT with the template's message (raise_exception) or
        "line L: ..." (a type error, an undefined value used), PI_ERR_INVALID_ARG (data
        not a JSON object), PI_ERR_RANGE (a limit)."""
        if isinstance(data, (str, bytes)):
            text = cstr(data, "data")
            if variables:
                raise ValueError("give either JSON text or keyword variables")
        else:
            d = dict(data or {})
            d.update(variables)
            text = cstr(json.dumps(d, ensure_ascii=False), "data")
        when = -1 if now is None else int(now)
        lib = _lib.lib()
        cap = 4096
        while True:
            out = ctypes.create_string_buffer(cap)
            buf, ptr = errbuf()
            n = lib.pi_chat_template_render(self._ptr(), text, when, out, cap, ptr, len(buf))
            check(n, "pi_chat_template_render", lambda: decode(buf.value))
            if n < cap:
                return decode(out.raw[:n])
            cap = n + 1


class Detokenizer(Owner):
    """A streaming detokenizer (pi_detok_*): push(token) returns the text that token
    completes, never splitting a UTF-8 code point (bytes of an incomplete sequence
    are held until it completes); flush() returns what is held back (as U+FFFD) and
    resets. special: render control tokens as their text.

    Borrows the model (kept alive; closed with it). One thread at a time."""

    def __init__(self, model, *, special=False):
        self._handle = None
        lib = _lib.lib()
        out = ctypes.c_void_p()
        model._check(lib.pi_detok_create(model._ptr(), PIECE_SPECIAL if special else 0,
                                         ctypes.byref(out)), "pi_detok_create")
        self._model = model
        self._handle = Handle(out.value, lib.pi_detok_destroy, parent=model._handle)
        self._pieces = []

        def sink(_user, text, n):
            self._pieces.append(ctypes.string_at(text, n))
            return 0
        self._sink = _lib.TEXT_FN(sink)

    def _ptr(self):
        if self._handle is None or self._handle.ptr is None:
            raise ValueError("the detokenizer is closed")
        return self._handle.ptr

    def _take(self, status, call):
        pieces, self._pieces = self._pieces, []
        check(status, call)
        return b"".join(pieces).decode("utf-8")

    @holding
    def push(self, token):
        """Feed one token; returns the completed text ("" if none)."""
        token_array([token])
        return self._take(_lib.lib().pi_detok_push(self._ptr(), c_int(token, "int32_t", "token"), self._sink,
                                                   None), "pi_detok_push")

    @holding
    def flush(self):
        """Return held-back bytes (as one U+FFFD) and reset."""
        return self._take(_lib.lib().pi_detok_flush(self._ptr(), self._sink, None),
                          "pi_detok_flush")

