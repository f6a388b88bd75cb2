"""Context (one sequence being decoded) and activation statistics.

Threading (the header's contract): a Context is used by one thread at a time; distinct
contexts, even of one model, run concurrently on different threads (ctypes releases
the GIL during decode, so Python threads do run in parallel). This module enforces the
rule: a call on a Context that another thread is using raises RuntimeError instead of
corrupting memory. A Context owns its worker threads (n_threads).
"""

import ctypes
import threading
from dataclasses import dataclass, fields

from . import _lib
from ._errors import PI_ERR_ABORTED, check
from ._util import (Handle, Owner, c_float, c_int, decode, errbuf, float_array, fspath,
                    new_float_buffer, token_array)

# PI_SPARSE_*
SPARSE_MODES = {"auto": 0, "dense": 1, "predictor": 2, "oracle": 3, "threshold": 4}
_SPARSE_NAMES = {v: k for k, v in SPARSE_MODES.items()}
# PI_THRESHOLDS_*
THRESHOLD_SOURCES = {0: "none", 1: "file", 2: "params", 3: "zero"}
# PI_STATS_*
STATS_MODES = {"off": 0, "on": 1, "diagnostic": 2}
# PI_NEURON_*
NEURON_KINDS = {"predicted": 0, "active": 1, "both": 2}
EXPERT_KINDS = {"selected": 0, "weight": 1}
# PI_DEVICE_*
DEVICES = {"none": 0, "gpu": 1, "cpu": 2}
_DEVICE_NAMES = {v: k for k, v in DEVICES.items()}
# PI_DEVICE_BUDGET_AUTO
DEVICE_BUDGET_AUTO = (1 << 64) - 1
# PI_PLAN_FILE_*
PLAN_FILES = {"read": 1, "cache": 2, "write": 3}
# PI_EMBD_*
EMBEDDINGS = {"off": 0, "on": 1, "only": 2}
# PI_KV_TYPE_*
KV_TYPES = {"f16": 0, "q8_0": 1, "q4_0": 2}
KV_TYPES_V = {"q8_0": 1, "q4_0": 2}  # kv_type_v=None: values stored as keys


def _enum(value, table, what):
    if isinstance(value, str):
        try:
            return table[value.lower()]
        except KeyError:
            raise ValueError("unknown %s %r (one of %s)" % (what, value, ", ".join(table))) \
                from None
    return c_int(value, "uint32_t", what)


def ctx_params(*, n_ctx=0, n_threads=0, n_batch=0, f32_activations=False,
               sparse_mode="auto", sparse_threshold=None, stats="off", device="none",
               device_index=0, device_budget=None, plan_stats=None, plan_path=None,
               plan_file=None, n_seq_max=1, check_numerics=False, embeddings="off",
               sparse_thresholds=None, sparse_threshold_scale=1.0, device_graphs=True,
               kv_type="f16", kv_type_v=None):
    """A CtxParams filled by pi_ctx_default_params, then from the keyword arguments
    (see Context). Used by Context and Model.plan; the errbuf is left to the caller."""
    lib = _lib.lib()
    params = _lib.CtxParams()
    check(lib.pi_ctx_default_params(ctypes.byref(params)), "pi_ctx_default_params")
    params.n_ctx = c_int(n_ctx, "uint32_t", "n_ctx")
    params.n_threads = c_int(n_threads, "uint32_t", "n_threads")
    params.n_batch = c_int(n_batch, "uint32_t", "n_batch")
    params.n_seq_max = c_int(n_seq_max, "uint32_t", "n_seq_max")
    params.f32_activations = 1 if f32_activations else 0
    params.check_numerics = 1 if check_numerics else 0  # PI_CHECK_LAYERS / PI_CHECK_LOGITS
    params.device_graphs = 0 if device_graphs else 1  # PI_GRAPHS_AUTO / PI_GRAPHS_OFF
    params.kv_type = _enum(kv_type, KV_TYPES, "KV cache type")
    params.kv_type_v = 0 if kv_type_v is None else _enum(kv_type_v, KV_TYPES_V,
                                                         "KV cache values' type")
    params.sparse_mode = _enum(sparse_mode, SPARSE_MODES, "sparse mode")
    params.embeddings = _enum({True: "on", False: "off"}.get(embeddings, embeddings),
                              EMBEDDINGS, "embeddings mode")
    if sparse_threshold is not None:
        params.sparse_threshold_set = 1
        params.sparse_threshold = c_float(sparse_threshold, "sparse_threshold")
    if sparse_thresholds is not None:
        arr = (ctypes.c_float * max(len(sparse_thresholds), 1))(*sparse_thresholds)
        params._thresholds = arr  # borrowed for pi_ctx_create: kept with the params
        params.sparse_thresholds = ctypes.cast(arr, ctypes.POINTER(ctypes.c_float))
        params.n_sparse_thresholds = len(sparse_thresholds)
    params.sparse_threshold_scale = float(sparse_threshold_scale)
    params.stats = _enum(stats, STATS_MODES, "stats mode")
    params.device = _enum(device, DEVICES, "device")
    params.device_index = c_int(device_index, "uint32_t", "device_index")
    if device_budget is not None:
        if isinstance(device_budget, str):
            if device_budget.lower() != "auto":
                raise ValueError("device_budget is a number of bytes or 'auto', not %r"
                                 % device_budget)
            params.device_budget = DEVICE_BUDGET_AUTO
        else:
            budget = c_int(device_budget, "uint64_t", "device_budget")
            if not 0 <= budget <= DEVICE_BUDGET_AUTO:
                raise ValueError("device_budget %d is out of range" % budget)
            params.device_budget = budget
    if plan_stats is not None:
        params.plan_stats = plan_stats._ptr()  # a Stats: loaded, or a context's
    if plan_path is not None:
        params.plan_path = fspath(plan_path)  # the Structure keeps the bytes alive
        params.plan_file = _enum("cache" if plan_file is None else plan_file, PLAN_FILES,
                                 "plan file mode")
    elif plan_file is not None:
        params.plan_file = _enum(plan_file, PLAN_FILES, "plan file mode")
    return params


class Context(Owner):
    """A context for a model (pi_ctx_create / pi_ctx_destroy): its KV cache, scratch
    memory and worker threads.

        with Context(model, n_ctx=512) as ctx:
            ctx.decode(model.tokenize("Hello"))
            logits = ctx.logits()

    n_ctx:            positions it can hold; 0: the model's training context, at most
                      4096.
    n_threads:        worker threads including the caller; 0: the processors available.
    n_batch:          most tokens per internal prefill step; 0: 256.
    f32_activations:  float activations for quantized products (slower, closer to a
                      float reference).
    sparse_mode:      "auto" (predictor for a PowerInfer file, dense otherwise),
                      "dense", "predictor" or "oracle" (or a SPARSE_* id).
    sparse_threshold: a float to override the file's powerinfer.sparse_threshold.
    sparse_thresholds: "threshold" mode: n_layer floats replacing the file's per-layer
                      thresholds on |act(gate . x)|; sparse_threshold_scale multiplies
                      whichever are used (default 1).
    stats:            "off", "on" or "diagnostic" (or True for "on"): collect
                      activation statistics (see the `stats` property).
    abort:            callable() polled between layers during decode; a truthy return
                      (or an exception, re-raised) stops the decode with
                      PowerInferError(PI_ERR_ABORTED), leaving the context as it was.

    Hybrid execution (attention, predictors, the KV cache and the hottest FFN neurons
    on a device, the rest on the CPU; see the `plan` property and Model.plan):
    device:           "none" (default: CPU only), "gpu" (the CUDA or HIP backend built
                      into the library; PI_ERR_UNSUPPORTED without one) or "cpu" (a
                      second CPU backend acting as the device, to check plans without
                      a GPU), or a DEVICE_* id.
    device_index:     which GPU (default 0).
    device_budget:    bytes the plan may place on the device, scratch included; None
                      or "auto" (default): the device's free memory minus 256 MiB
                      ("cpu": everything); 0 places nothing.
    kv_type:          "f16" (default), "q8_0" or "q4_0": how the KV cache stores keys
                      and values (q8_0: about half the memory, q4_0: 28 %; CPU-only
                      contexts, head dimensions multiples of 32).
    kv_type_v:        None (default): values stored as kv_type; "q8_0" or "q4_0": values
                      in that type, keys in kv_type (e.g. kv_type="q8_0",
                      kv_type_v="q4_0": 41 % of f16's memory; keys are the more
                      sensitive half).
    device_graphs:    True (default): device steps of up to 8 tokens are submitted as
                      CUDA graphs where nothing overlaps them on the CPU
                      (PI_GRAPHS_AUTO); False: op by op.
    plan_stats:       a Stats (Stats.load, or a profiling context's) ranking neurons;
                      None: all equally hot. Only read while the context is created.
    plan_path:        a GPU index file (PowerInfer's <model>.generated.gpuidx, or one
                      Plan.save wrote); None (default): plan in memory.
    plan_file:        what to do with plan_path: "read" (take the neurons from it),
                      "cache" (the default with a plan_path: reuse it when it was made
                      for this model, statistics and budget, else plan and rewrite it)
                      or "write" (plan, then write it).
    n_seq_max:        sequences the context holds (decode_batch, seq_*), default 1.
    check_numerics:   also check each layer's output for NaN/infinity, so that the
                      PowerInferError(PI_ERR_NUMERIC) of a decode names the layer and
                      block (logits are always checked).
    embeddings:       "off" (default), "on" (keep each decoded token's final hidden
                      state: embedding(i), embedding_pooled) or "only" (the same, and no
                      logits are computed: the LM head is skipped); True is "on".

    The Context keeps its model alive; closing the model closes the context. One
    thread at a time (enforced: see the module docstring)."""

    def __init__(self, model, *, n_ctx=0, n_threads=0, n_batch=0, f32_activations=False,
                 sparse_mode="auto", sparse_threshold=None, stats="off", abort=None,
                 device="none", device_index=0, device_budget=None, plan_stats=None,
                 plan_path=None, plan_file=None, n_seq_max=1, check_numerics=False,
                 embeddings="off", sparse_thresholds=None, sparse_threshold_scale=1.0,
                 device_graphs=True, kv_type="f16", kv_type_v=None):
        self._handle = None
        lib = _lib.lib()
        params = ctx_params(n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch,
                            f32_activations=f32_activations, sparse_mode=sparse_mode,
                            sparse_threshold=sparse_threshold, stats=stats, device=device,
                            device_index=device_index, device_budget=device_budget,
                            plan_stats=plan_stats, plan_path=plan_path, plan_file=plan_file,
                            n_seq_max=n_seq_max, check_numerics=check_numerics,
                            embeddings=embeddings, sparse_thresholds=sparse_thresholds,
                            sparse_threshold_scale=sparse_threshold_scale,
                            device_graphs=device_graphs, kv_type=kv_type,
                            kv_type_v=kv_type_v)
        self._abort_error = None
        self._abort_fn = None
        self._probe_fn = None
        self._probe_error = None
        if abort is not None:
            if not callable(abort):
                raise TypeError("abort must be callable")

            def c_abort(_user):
                try:
                    return 1 if abort() else 0
                except BaseException as e:  # noqa: BLE001 - re-raised after decode
                    self._abort_error = e
                    return 1
            self._abort_fn = _lib.ABORT_FN(c_abort)  # borrowed until destroyed
            params.abort_fn = self._abort_fn
        buf, params.errbuf = errbuf()
        params.errbuf_cap = len(buf)
        out = ctypes.c_void_p()
        check(lib.pi_ctx_create(model._ptr(), ctypes.byref(params), ctypes.byref(out)),
              "pi_ctx_create", lambda: decode(buf.value))
        self._model = model  # the context borrows the model: keep it alive
        self._busy = threading.Lock()
        self._handle = Handle(out.value, lib.pi_ctx_destroy, parent=model._handle,
                              busy=self._busy)

    # ---- lifetime (Owner): close() stops the workers and frees the context; it raises
    # RuntimeError while a call on it is in progress (another thread's, or from its
    # abort callback)

    def __repr__(self):
        if self.closed:
            return "<powerinfer.Context closed>"
        return "<powerinfer.Context pos=%d n_ctx=%d>" % (self.pos, self.n_ctx)

    @property
    def model(self):
        """The Model this context was created for."""
        return self._model

    def _ptr(self):
        if self._handle is None or self._handle.ptr is None:
            raise ValueError("the context is closed")
        return self._handle.ptr

    def _errmsg(self):
        return decode(_lib.lib().pi_ctx_errmsg(self._handle.ptr))

    def _enter(self):
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("the context is in use by another thread "
                               "(a context is used by one thread at a time)")
        try:
            return self._ptr()
        except BaseException:
            self._busy.release()
            raise

    def _call(self, name, *args):
        p = self._enter()
        try:
            st = getattr(_lib.lib(), name)(p, *args)
            return check(st, name, self._errmsg)
        finally:
            self._busy.release()

    # ---- decoding -------------------------------------------------------------------
    def decode(self, tokens):
        """Append tokens (a sequence of ids) at the current position, run the model
        over them and compute the logits of the last one. On failure
        (PI_ERR_INVALID_ARG for an empty list or an id outside the vocabulary,
        PI_ERR_RANGE when n_ctx would be exceeded, PI_ERR_ABORTED) the context is
        unchanged."""
        arr, n = token_array(tokens)
        p = self._enter()
        try:
            self._abort_error = None
            st = _lib.lib().pi_ctx_decode(p, arr, n)
            if st == PI_ERR_ABORTED and self._abort_error is not None:
                err, self._abort_error = self._abort_error, None
                raise err
            check(st, "pi_ctx_decode", self._errmsg)
            self._raise_probe_error()
        finally:
            self._busy.release()

    def _raise_probe_error(self):
        if self._probe_error is not None:
            err, self._probe_error = self._probe_error, None
            raise err

    def logits(self):
        """A copy of the n_vocab logits of the last decoded token: a numpy float32
        array when numpy is installed, else an array.array('f'); None when nothing was
        decoded since creation, reset or truncate."""
        p = self._enter()
        try:
            ptr = _lib.lib().pi_ctx_logits(p)
            if not ptr:
                return None
            return float_array(ptr, self._model.n_vocab, "f")
        finally:
            self._busy.release()

    @property
    def pos(self):
        """Positions decoded so far (the next token's position)."""
        return _lib.lib().pi_ctx_pos(self._ptr())

    @property
    def n_ctx(self):
        """Capacity in positions."""
        return _lib.lib().pi_ctx_n_ctx(self._ptr())

    def reset(self):
        """Forget everything decoded: position 0, no logits."""
        self._call("pi_ctx_reset")

    def truncate(self, n_keep):
        """Keep the first n_keep positions (PI_ERR_RANGE above pos); clears logits."""
        self._call("pi_ctx_truncate", c_int(n_keep, "int64_t", "n_keep"))

    def set_threads(self, n_threads):
        """Restart the workers with n_threads (0: the processors available)."""
        self._call("pi_ctx_set_threads", c_int(n_threads, "uint32_t", "n_threads"))

    def set_ffn_probe(self, probe):
        """probe(layer, h, act, inter), or None to remove it: called during each later
        decode once per layer and step (pi_ctx_set_ffn_probe) with numpy float32 views,
        valid during the call only (copy what you keep): h [n_tokens][n_embd] the FFN's
        predictor input (the residual stream before the FFN's norm), act
        [n_tokens][n_ff] the gate's activation act(gate . xn), inter [n_tokens][n_ff]
        the values the down projection multiplies. Needs numpy, a CPU-only context in
        "dense" mode and no experts (PowerInferError otherwise). An exception the probe
        raises is raised again by the decode call once it returns."""
        import numpy as np
        if probe is None:
            self._call("pi_ctx_set_ffn_probe", _lib.FFN_PROBE_FN(), None)
            self._probe_fn = None
            return
        if not callable(probe):
            raise TypeError("probe must be callable or None")
        E, F = self._model.n_embd, self._model.n_ff

        def c_probe(_user, layer, n_tok, h, act, inter):
            if self._probe_error is not None:
                return
            try:
                probe(int(layer), np.ctypeslib.as_array(h, (n_tok, E)),
                      np.ctypeslib.as_array(act, (n_tok, F)),
                      np.ctypeslib.as_array(inter, (n_tok, F)))
            except BaseException as e:  # noqa: BLE001 - raised again after decode
                self._probe_error = e
        fn = _lib.FFN_PROBE_FN(c_probe)
        self._call("pi_ctx_set_ffn_probe", fn, None)
        self._probe_fn = fn  # borrowed by the library until replaced

    @property
    def n_threads(self):
        return _lib.lib().pi_ctx_n_threads(self._ptr())

    @property
    def sparse_mode(self):
        """The FFN mode the context runs: "dense", "predictor", "oracle" or
        "threshold"."""
        st = check(_lib.lib().pi_ctx_sparse_mode(self._ptr()), "pi_ctx_sparse_mode",
                   self._errmsg)
        return _SPARSE_NAMES.get(st, st)

    @property
    def sparse_threshold(self):
        """The predictor threshold in use (the file's or the override)."""
        return _lib.lib().pi_ctx_sparse_threshold(self._ptr())

    @property
    def threshold_source(self):
        """"threshold" mode: where the per-layer thresholds came from: "file",
        "params" or "zero" ("none" in other modes)."""
        return THRESHOLD_SOURCES.get(_lib.lib().pi_ctx_sparse_threshold_source(self._ptr()))

    @property
    def sparse_thresholds(self):
        """The per-layer thresholds applied (scale included; zeros in other modes)."""
        lib = _lib.lib()
        n = lib.pi_ctx_sparse_thresholds(self._ptr(), None, 0)
        arr = (ctypes.c_float * max(n, 1))()
        lib.pi_ctx_sparse_thresholds(self._ptr(), arr, n)
        return list(arr[:n])

    # ---- statistics -----------------------------------------------------------------
    @property
    def stats(self):
        """The statistics this context collects (a Stats view, updated by each
        decode), or None when created with stats="off"."""
        if not _lib.lib().pi_ctx_stats(self._ptr()):
            return None
        return Stats(_ctx=self)

    def reset_stats(self):
        """Zero the statistics (PI_ERR_INVALID_ARG when none are collected)."""
        self._call("pi_ctx_stats_reset")

    # ---- several sequences ----------------------------------------------------------
    def decode_batch(self, entries):
        """Decode entries (token, seq[, pos[, logits]]) in one call: pos -1 or omitted
        is the sequence's next position, logits truthy keeps that entry's logits for
        batch_logits(i). On failure nothing changes."""
        items = list(entries)
        arr = (_lib.BatchEntry * max(len(items), 1))()
        for i, e in enumerate(items):
            e = tuple(e)
            arr[i] = _lib.BatchEntry(c_int(e[0], "int32_t", "token"),
                                     c_int(e[1], "int32_t", "seq"),
                                     c_int(e[2], "int32_t", "pos") if len(e) > 2 else -1,
                                     1 if len(e) > 3 and e[3] else 0)
        self._call("pi_ctx_decode_batch", arr, len(items))
        self._raise_probe_error()

    def batch_logits(self, i):
        """A copy of entry i's logits from the last decode_batch, or None."""
        p = self._enter()
        try:
            ptr = _lib.lib().pi_ctx_batch_logits(p, c_int(i, "size_t", "index"))
            return float_array(ptr, self._model.n_vocab, "f") if ptr else None
        finally:
            self._busy.release()

    # ---- embeddings -----------------------------------------------------------------
    def embedding(self, i):
        """A copy of the final hidden state (n_embd floats: after the output norm, the
        LM head's input) of entry i of the last decode or decode_batch, or None (i out
        of range, or a context made with embeddings "off")."""
        p = self._enter()
        try:
            ptr = _lib.lib().pi_ctx_embedding(p, c_int(i, "size_t", "index"))
            return float_array(ptr, self._model.n_embd, "f") if ptr else None
        finally:
            self._busy.release()

    def embedding_pooled(self, pooling="last", seq=0, normalize=True):
        """The pooled final hidden states of sequence seq over every token decoded
        into it since position 0: pooling "mean", "cls" (first token) or "last" (or a
        POOL_* id); normalize: scaled to unit L2 norm. PowerInferError
        PI_ERR_INVALID_ARG (embeddings "off", a bad seq or pooling) or PI_ERR_RANGE
        (the sequence is empty, or shortened or loaded since it was decoded)."""
        from .model import POOLINGS
        n = self._model.n_embd
        arr, ptr = new_float_buffer(n, "f")
        self._call("pi_ctx_embedding_pooled", c_int(seq, "int32_t", "seq"),
                   _enum(pooling, POOLINGS, "pooling"), 1 if normalize else 0, ptr, n)
        return arr

    def seq_len(self, seq):
        """Positions decoded in sequence seq (-1 for a bad id)."""
        return _lib.lib().pi_ctx_seq_len(self._ptr(), c_int(seq, "int32_t", "seq"))

    def seq_remove(self, seq, p0, p1=-1):
        """Remove positions p0..p1-1 (p1 -1: to the end); later ones move down."""
        self._call("pi_ctx_seq_remove", c_int(seq, "int32_t", "seq"), c_int(p0, "int64_t", "p0"),
                   c_int(p1, "int64_t", "p1"))

    def seq_copy(self, src, dst):
        self._call("pi_ctx_seq_copy", c_int(src, "int32_t", "src"), c_int(dst, "int32_t", "dst"))

    def seq_keep(self, seq):
        self._call("pi_ctx_seq_keep", c_int(seq, "int32_t", "seq"))

    def seq_clear(self, seq=-1):
        self._call("pi_ctx_seq_clear", c_int(seq, "int32_t", "seq"))

    # ---- state ----------------------------------------------------------------------
    def save_state(self, seq=-1):
        """The state of the whole context (seq -1) or of one sequence, as bytes."""
        lib = _lib.lib()
        size = ctypes.c_size_t(0)
        lib.pi_ctx_state_save(self._ptr(), c_int(seq, "int32_t", "seq"), None, 0, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        self._call("pi_ctx_state_save", c_int(seq, "int32_t", "seq"), buf, size.value, ctypes.byref(size))
        return buf.raw[:size.value]

    def load_state(self, data, seq=-1):
        """Restore a state from bytes (seq -1: a whole-context state; else a
        one-sequence state into sequence seq). On failure nothing changes."""
        data = bytes(data)
        buf = ctypes.create_string_buffer(data, len(data))
        self._call("pi_ctx_state_load", c_int(seq, "int32_t", "seq"), buf, len(data))

    def save_state_file(self, path, seq=-1):
        self._call("pi_ctx_state_save_file", c_int(seq, "int32_t", "seq"), fspath(path))

    def load_state_file(self, path, seq=-1):
        self._call("pi_ctx_state_load_file", c_int(seq, "int32_t", "seq"), fspath(path))

    # ---- hybrid execution -----------------------------------------------------------
    @property
    def plan(self):
        """The placement plan this context runs with (a Plan view, valid while the
        context is open; closing it just detaches), or None for a CPU-only context."""
        from .plan import Plan
        if not _lib.lib().pi_ctx_plan(self._ptr()):
            return None
        return Plan(_ctx=self)


@dataclass(frozen=True)
class LayerStats:
    """pi_layer_stats of one layer: token counts, neuron sums over tokens, weight rows
    and bytes read, and nanoseconds per layer part (0 for loaded statistics)."""
    tokens_predicted: int
    tokens_observed: int
    predicted: float
    active: float
    both: float
    rows_gate_up: int
    rows_down: int
    bytes_ffn: int
    bytes_predictor: int
    ns_attention: int
    ns_predictor: int
    ns_ffn: int

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Stats(Owner):
    """Activation statistics: a context's (Context.stats: borrowed, valid while the
    context is open) or a side file's (Stats.load: owned, close() frees them).

    layer(i) -> LayerStats; neurons(layer, kind) -> per-neuron counts, kind
    "predicted", "active" or "both" (numpy float64 array, else array('d'));
    save(path) writes the GGUF side file."""

    def __init__(self, _ctx=None, _handle=None):
        self._ctx = _ctx        # borrowed from an open context
        self._handle = _handle  # owned (loaded)

    @classmethod
    def load(cls, path):
        """Read a side file written by save() (or tools/convert_activation_stats.py).
        PowerInferError PI_ERR_IO, PI_ERR_FORMAT, ..."""
        lib = _lib.lib()
        buf, ptr = errbuf()
        out = ctypes.c_void_p()
        check(lib.pi_stats_load(fspath(path), ctypes.byref(out), ptr, len(buf)),
              "pi_stats_load", lambda: decode(buf.value))
        return cls(_handle=Handle(out.value, lib.pi_stats_free))

    def _ptr(self):
        if self._ctx is not None:
            return _lib.lib().pi_ctx_stats(self._ctx._ptr())
        if self._handle is None or self._handle.ptr is None:
            raise ValueError("the statistics are closed")
        return self._handle.ptr

    def close(self):
        """Free loaded statistics; a context's view just detaches. Idempotent."""
        if self._handle is not None:
            self._handle.close()
        self._ctx = None
        if self._handle is None:
            self._handle = Handle(None, None)

    @property
    def n_layer(self):
        return _lib.lib().pi_stats_n_layer(self._ptr())

    @property
    def n_ff(self):
        return _lib.lib().pi_stats_n_ff(self._ptr())

    def layer(self, layer):
        """Totals of one layer as a LayerStats (PI_ERR_RANGE for a bad layer)."""
        out = _lib.LayerStats()
        out.struct_size = ctypes.sizeof(_lib.LayerStats)
        check(_lib.lib().pi_stats_layer(self._ptr(), c_int(layer, "int64_t", "layer"), ctypes.byref(out)),
              "pi_stats_layer")
        return LayerStats(**{f.name: getattr(out, f.name) for f in fields(LayerStats)})

    def layers(self):
        """LayerStats of every layer."""
        return [self.layer(i) for i in range(self.n_layer)]

    def neurons(self, layer, kind="active"):
        """The n_ff per-neuron counts of kind for layer."""
        p = self._ptr()
        n = _lib.lib().pi_stats_n_ff(p)
        arr, ptr = new_float_buffer(n, "d")
        check(_lib.lib().pi_stats_neurons(p, c_int(layer, "int64_t", "layer"),
                                          _enum(kind, NEURON_KINDS, "neuron kind"),
                                          ptr, n), "pi_stats_neurons")
        return arr

    @property
    def n_expert(self):
        """Experts per layer (mixture-of-experts models; 0 for others)."""
        return _lib.lib().pi_stats_n_expert(self._ptr())

    def experts(self, layer, kind="selected"):
        """The n_expert values of kind ("selected": tokens that chose each expert,
        "weight": the router weight it got) for layer."""
        p = self._ptr()
        n = _lib.lib().pi_stats_n_expert(p)
        arr, ptr = new_float_buffer(max(n, 1), "d")
        check(_lib.lib().pi_stats_experts(p, c_int(layer, "int64_t", "layer"),
                                          _enum(kind, EXPERT_KINDS, "expert kind"),
                                          ptr, n), "pi_stats_experts")
        return arr[:n]

    def save(self, path):
        """Write the per-neuron counts as a GGUF side file (atomically replaced)."""
        buf, ptr = errbuf()
        check(_lib.lib().pi_stats_save(self._ptr(), fspath(path), ptr, len(buf)),
              "pi_stats_save", lambda: decode(buf.value))
