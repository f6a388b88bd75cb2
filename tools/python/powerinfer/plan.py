"""Placement plans of hybrid CPU/device execution (pi_model_plan, pi_ctx_plan,
pi_plan_*): what lives on the device, per layer its attention, predictor, ffn_norm and
a set of FFN neurons, plus the output projection, the KV cache and scratch buffers.

    with Model("model.powerinfer.gguf") as m:
        with m.plan(device="gpu", device_budget=4 << 30) as plan:   # dry run
            print(plan.describe())
        with Context(m, device="gpu", device_budget=4 << 30) as ctx:
            print(ctx.plan.bytes(), ctx.plan.source)

A plan is immutable: its queries may be called from any thread.
"""

import ctypes

from . import _lib
from ._errors import PI_ERR_IO, PI_ERR_RANGE, PowerInferError, check
from ._util import Handle, Owner, _np, c_int, decode, errbuf, fill, fspath

# PI_PLAN_* parts
PLAN_PARTS = {"attention": 0, "predictor": 1, "ffn_norm": 2, "output": 3, "kv_cache": 4,
              "neurons": 5, "scratch": 6}
PLAN_ALL = 7  # PI_PLAN_N_PARTS: every part
_LAYER_PARTS = ("attention", "predictor", "ffn_norm")
# pi_plan_source
PLAN_SOURCES = {0: "computed", 1: "from_file", 2: "cache_written", 3: "cache_unwritten"}


def _part(part):
    if part is None or part == "all":
        return PLAN_ALL
    if isinstance(part, str):
        try:
            return PLAN_PARTS[part.lower()]
        except KeyError:
            raise ValueError("unknown plan part %r (one of %s, or 'all')"
                             % (part, ", ".join(PLAN_PARTS))) from None
    return c_int(part, "uint32_t", "part")


class Plan(Owner):
    """A placement plan: a dry run's (Model.plan: owned, close() frees it) or a
    context's (Context.plan: borrowed, valid while the context is open).

    budget              bytes it was made for
    bytes(part=None)    device bytes of one part ("attention", "predictor",
                        "ffn_norm", "output", "kv_cache", "neurons", "scratch") or of
                        all (None / "all")
    n_layer, n_ff       shape
    layer_parts(l)      frozenset of "attention", "predictor", "ffn_norm" on the device
    layer_neurons(l)    how many of layer l's FFN neurons are on the device
    layer_mask(l)       which (numpy bool array, else a list of bools)
    output_on_device, kv_on_device
    source              "computed", "from_file", "cache_written" or "cache_unwritten"
    describe()          the library's human-readable description
    save(path)          write it as a GPU index file (PowerInfer's .gpuidx format)"""

    def __init__(self, _handle=None, _ctx=None, _model=None):
        self._handle = _handle  # owned (Model.plan)
        self._ctx = _ctx        # borrowed from an open context
        self._model = _model    # kept alive while an owned plan is open

    @classmethod
    def _make(cls, model, params):
        """pi_model_plan for `model` with CtxParams `params` (errbuf set here)."""
        lib = _lib.lib()
        buf, params.errbuf = errbuf()
        params.errbuf_cap = len(buf)
        out = ctypes.c_void_p()
        check(lib.pi_model_plan(model._ptr(), ctypes.byref(params), ctypes.byref(out)),
              "pi_model_plan", lambda: decode(buf.value))
        return cls(_handle=Handle(out.value, lib.pi_plan_free, parent=model._handle),
                   _model=model)

    def _ptr(self):
        if self._ctx is not None:
            p = _lib.lib().pi_ctx_plan(self._ctx._ptr())
            if not p:
                raise ValueError("the context has no plan")
            return p
        if self._handle is None or self._handle.ptr is None:
            raise ValueError("the plan is closed")
        return self._handle.ptr

    def close(self):
        """Free an owned plan; a context's view just detaches. Idempotent."""
        if self._handle is not None:
            self._handle.close()
        self._ctx = None
        self._model = None
        if self._handle is None:
            self._handle = Handle(None, None)

    def __repr__(self):
        if self.closed:
            return "<powerinfer.Plan closed>"
        return "<powerinfer.Plan %d of %d bytes on the device, %s>" % (
            self.bytes(), self.budget, self.source)

    @property
    def closed(self):
        if self._ctx is not None:
            return self._ctx.closed
        return super().closed

    def _q(self, name, *args):
        return getattr(_lib.lib(), name)(self._ptr(), *args)

    budget = property(lambda self: self._q("pi_plan_budget"),
                      doc="the budget the plan was made for, in bytes")
    n_layer = property(lambda self: self._q("pi_plan_n_layer"))
    n_ff = property(lambda self: self._q("pi_plan_n_ff"), doc="FFN neurons per layer")
    output_on_device = property(lambda self: bool(self._q("pi_plan_output_on_device")),
                                doc="True if the output projection is on the device")
    kv_on_device = property(lambda self: bool(self._q("pi_plan_kv_on_device")),
                            doc="True if the KV cache is on the device")

    @property
    def source(self):
        """Where the neurons came from: "computed", "from_file" (read from the plan
        file), "cache_written" (planned and written to it) or "cache_unwritten"
        (planned; the file could not be written)."""
        s = self._q("pi_plan_source")
        return PLAN_SOURCES.get(s, s)

    def bytes(self, part=None):
        """Device bytes of `part` (a PLAN_PARTS name or id), or of all parts."""
        return self._q("pi_plan_bytes", _part(part))

    def _layer(self, layer):
        layer = c_int(layer, "int64_t", "layer")
        if not 0 <= layer < self.n_layer:
            raise PowerInferError(PI_ERR_RANGE, "layer %d of %d" % (layer, self.n_layer),
                                  "pi_plan_layer_neurons")
        return layer

    def layer_parts(self, layer):
        """The dense parts of `layer` on the device, as a frozenset of "attention",
        "predictor" and "ffn_norm"."""
        bits = self._q("pi_plan_layer_parts", self._layer(layer))
        return frozenset(n for n in _LAYER_PARTS if bits >> PLAN_PARTS[n] & 1)

    def layer_neurons(self, layer):
        """How many of `layer`'s FFN neurons are on the device."""
        return check(self._q("pi_plan_layer_neurons", self._layer(layer), None, 0),
                     "pi_plan_layer_neurons")

    def layer_mask(self, layer):
        """Which of `layer`'s n_ff neurons are on the device: a numpy bool array when
        numpy is installed, else a list of bools."""
        layer = self._layer(layer)
        n = self.n_ff
        mask = (ctypes.c_uint8 * max(n, 1))()
        check(self._q("pi_plan_layer_neurons", layer, mask, n), "pi_plan_layer_neurons")
        if _np is not None:
            return _np.frombuffer(bytes(mask), dtype=_np.uint8, count=n).astype(bool)
        return [bool(v) for v in mask[:n]]

    def layer_experts(self, layer, n_expert=None):
        """How many of `layer`'s experts are on the device (0 in a layer without
        experts); with n_expert (the model's <arch>.expert_count), the list of their
        ids instead, ascending."""
        layer = self._layer(layer)
        if n_expert is None:
            return check(self._q("pi_plan_layer_experts", layer, None, 0),
                         "pi_plan_layer_experts")
        mask = (ctypes.c_uint8 * max(n_expert, 1))()
        check(self._q("pi_plan_layer_experts", layer, mask, n_expert), "pi_plan_layer_experts")
        return [e for e in range(n_expert) if mask[e]]

    def describe(self):
        """The library's description: budget, bytes per part, each layer's parts and
        neuron count."""
        n, raw = fill(_lib.lib().pi_plan_describe, self._ptr(), cap=4096)
        check(n, "pi_plan_describe")
        return decode(raw)

    def save(self, path):
        """Write the plan's neurons as a GPU index file (PowerInfer's format, plus keys
        naming the model, statistics and budget), atomically."""
        st = _lib.lib().pi_plan_save(self._ptr(), fspath(path))
        check(st, "pi_plan_save",
              "cannot write %s" % decode(fspath(path)) if st == PI_ERR_IO else None)
