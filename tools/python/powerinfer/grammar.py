"""Grammar: constrained decoding with a GBNF grammar (pi_grammar_*)."""

import ctypes

from . import _lib
from ._errors import check
from ._util import Handle, Owner, holding


class Grammar(Owner):
    """A GBNF grammar compiled for a model's vocabulary (pi_grammar_create /
    pi_grammar_destroy); model None makes one that reads text only (accept_text,
    complete). A bad grammar raises PowerInferError whose message says "line:col: why".

    mask(logits) returns the row with every token that may not come next at -inf and
    how many stay; accept(token) and accept_text(text) move it on (PI_ERR_RANGE when
    refused: nothing changes). Keeps its model alive; closed with it. One thread at a
    time; clone() gives an independent copy."""

    def __init__(self, model, gbnf, root="root", _ptr=None):
        self._handle = None
        self._model = model
        lib = _lib.lib()
        if _ptr is None:
            data = gbnf.encode() if isinstance(gbnf, str) else bytes(gbnf)
            out = ctypes.c_void_p()
            err = ctypes.create_string_buffer(512)
            st = lib.pi_grammar_create(model._ptr() if model is not None else None, data,
                                       len(data), root.encode(), ctypes.byref(out), err,
                                       len(err))
            check(st, "pi_grammar_create", err.value.decode(errors="replace"))
            _ptr = out.value
        parent = model._handle if model is not None else None
        self._handle = Handle(_ptr, lib.pi_grammar_destroy, parent=parent)

    def _ptr(self):
        if self._handle is None or self._handle.ptr is None:
            raise ValueError("the grammar is closed")
        return self._handle.ptr

    def _msg(self):
        m = _lib.lib().pi_grammar_errmsg(self._ptr())
        return m.decode(errors="replace") if m else ""

    @holding
    def clone(self):
        out = ctypes.c_void_p()
        check(_lib.lib().pi_grammar_clone(self._ptr(), ctypes.byref(out)), "pi_grammar_clone")
        return Grammar(self._model, None, _ptr=out.value)

    @holding
    def reset(self):
        check(_lib.lib().pi_grammar_reset(self._ptr()), "pi_grammar_reset", self._msg)

    @property
    def complete(self):
        """True when the text read so far is a whole sentence of the grammar."""
        return bool(_lib.lib().pi_grammar_complete(self._ptr()))

    @holding
    def mask(self, logits):
        """(masked logits as a list, number of tokens still allowed)."""
        n = len(logits)
        row = (ctypes.c_float * n)(*logits)
        k = check(_lib.lib().pi_grammar_mask(self._ptr(), row, n), "pi_grammar_mask",
                  self._msg)
        return list(row), k

    @holding
    def accept(self, token):
        check(_lib.lib().pi_grammar_accept(self._ptr(), int(token)), "pi_grammar_accept",
              self._msg)

    @holding
    def accept_text(self, text):
        data = text.encode() if isinstance(text, str) else bytes(text)
        check(_lib.lib().pi_grammar_accept_text(self._ptr(), data, len(data)),
              "pi_grammar_accept_text", self._msg)
