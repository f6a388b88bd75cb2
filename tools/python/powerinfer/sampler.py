"""Sampler: choosing the next token from a context's logits."""

import ctypes

from . import _lib
from ._errors import check
from ._util import Handle, Owner, c_float, c_int, holding, token_array

# Fields of pi_sampler_params a caller may set, as keyword arguments.
SAMPLER_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty",
                  "frequency_penalty", "presence_penalty", "penalty_last_n", "seed")
# The integer fields and their C types; the others are floats.
_INT_FIELDS = {"top_k": "int32_t", "penalty_last_n": "int32_t", "seed": "uint64_t"}


def default_sampler_params():
    """The library's defaults (pi_sampler_default_params) as a dict."""
    p = _lib.SamplerParams()
    check(_lib.lib().pi_sampler_default_params(ctypes.byref(p)),
          "pi_sampler_default_params")
    return {f: getattr(p, f) for f in SAMPLER_FIELDS}


class Sampler(Owner):
    """A sampler for a model (pi_sampler_create / pi_sampler_destroy).

    The chain: repetition/frequency/presence penalties over the last penalty_last_n
    accepted tokens -> top_k -> top_p -> min_p -> temperature -> a draw seeded with
    seed. temperature <= 0 is greedy. Keyword arguments left as None keep the
    library's defaults (see default_sampler_params()).

    Keeps its model alive; closed with it. One thread at a time."""

    def __init__(self, model, *, temperature=None, top_k=None, top_p=None, min_p=None,
                 repeat_penalty=None, frequency_penalty=None, presence_penalty=None,
                 penalty_last_n=None, seed=None):
        self._handle = None
        lib = _lib.lib()
        p = _lib.SamplerParams()
        check(lib.pi_sampler_default_params(ctypes.byref(p)), "pi_sampler_default_params")
        given = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                     repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                     presence_penalty=presence_penalty, penalty_last_n=penalty_last_n,
                     seed=seed)
        for name, value in given.items():
            if value is not None:
                setattr(p, name, c_int(value, _INT_FIELDS[name], name) if name in _INT_FIELDS
                        else c_float(value, name))
        self.params = {f: getattr(p, f) for f in SAMPLER_FIELDS}
        out = ctypes.c_void_p()
        check(lib.pi_sampler_create(model._ptr(), ctypes.byref(p), ctypes.byref(out)),
              "pi_sampler_create")
        self._model = model
        self._handle = Handle(out.value, lib.pi_sampler_destroy, parent=model._handle)

    def _ptr(self):
        if self._handle is None or self._handle.ptr is None:
            raise ValueError("the sampler is closed")
        return self._handle.ptr

    @holding
    def sample(self, ctx):
        """Choose the next token from ctx's current logits and accept it into the
        penalty history. PI_ERR_INVALID_ARG: ctx of another model, or no logits."""
        tok = ctypes.c_int32()
        p = self._ptr()
        cp = ctx._enter()  # the context is read: no decode may run meanwhile
        try:
            check(_lib.lib().pi_sample(p, cp, ctypes.byref(tok)), "pi_sample")
        finally:
            ctx._busy.release()
        return tok.value

    @holding
    def sample_logits(self, logits):
        """Choose a token from a row of logits (a sequence of n_vocab floats, e.g. from
        Context.batch_logits) and accept it into the penalty history. ValueError for a
        row of another length."""
        n = self._model.n_vocab
        if len(logits) != n:
            raise ValueError(f"logits has {len(logits)} values; the model has {n} tokens")
        row = (ctypes.c_float * n)(*logits)
        tok = ctypes.c_int32()
        check(_lib.lib().pi_sample_logits(self._ptr(), row, n, ctypes.byref(tok)),
              "pi_sample_logits")
        return tok.value

    @holding
    def accept(self, token):
        """Add tokens (an id or a sequence of ids) to the penalty history."""
        toks = [token] if isinstance(token, int) else token
        arr, n = token_array(toks)
        lib, p = _lib.lib(), self._ptr()
        for i in range(n):
            check(lib.pi_sampler_accept(p, arr[i]), "pi_sampler_accept")

    @holding
    def reset(self):
        """Clear the history and re-seed."""
        check(_lib.lib().pi_sampler_reset(self._ptr()), "pi_sampler_reset")

