"""Internal helpers: handle ownership, caller buffers, optional numpy."""

import contextlib
import ctypes
import functools
import numbers
import operator
import os
import threading
from array import array

try:
    import numpy as _np
except ImportError:  # numpy is optional
    _np = None

ERRBUF_CAP = 1024


class Handle:
    """One library handle and the function that releases it.

    A handle may have children: handles that borrow it (a model's contexts, samplers,
    detokenizers). Closing a handle closes its children first, so the library's rule
    "every object borrowing the model must have been destroyed first" holds whatever
    order Python finalises objects in (the records below hold no reference to the
    Python objects, so there are no cycles through them)."""

    __slots__ = ("ptr", "free", "children", "parent", "busy", "users", "lock")

    def __init__(self, ptr, free, parent=None, busy=None):
        self.ptr = ptr
        self.free = free
        self.children = {}
        self.parent = parent
        # a lock held while the handle is in a library call (a context's decode):
        # closing it then raises RuntimeError instead of freeing it under the call
        self.busy = busy
        # calls that may run on many threads at once (a model's tokenize) count
        # themselves in `users` instead (see hold)
        self.users = 0
        self.lock = threading.Lock()
        if parent is not None:
            parent.children[id(self)] = self

    @contextlib.contextmanager
    def hold(self):
        """For the duration of a call: close() raises RuntimeError instead of freeing
        the handle under it. A closed handle is not counted (the call's own _ptr() then
        raises its ValueError)."""
        with self.lock:
            counted = bool(self.ptr)
            self.users += counted
        try:
            yield
        finally:
            if counted:
                with self.lock:
                    self.users -= 1

    def _in_use(self):
        """True when this handle or one that borrows it is in a library call."""
        if self.busy is not None and self.ptr and self.busy.locked():
            return True
        if self.users:
            return True
        return any(c._in_use() for c in list(self.children.values()))

    def close(self):
        # refuse before closing anything: a model whose context is decoding keeps its
        # samplers and idle contexts too (each busy lock is still taken below, so a
        # call that starts after this check is not freed under either)
        if self._in_use():
            raise RuntimeError("cannot close: the object or one that borrows it is in use "
                               "(by another thread, or by the callback that is running)")
        for child in list(self.children.values()):
            child.close()
        locked = False
        if self.busy is not None and self.ptr:
            if not self.busy.acquire(blocking=False):
                raise RuntimeError("cannot close: the object is in use (by another "
                                   "thread, or by the callback that is running)")
            locked = True
        try:
            with self.lock:  # a call that began after the check above still counts
                if self.users:
                    raise RuntimeError("cannot close: the object is in use by another thread")
                ptr, self.ptr = self.ptr, None
            if self.parent is not None:
                self.parent.children.pop(id(self), None)
                self.parent = None
            if ptr:
                self.free(ptr)
        finally:
            if locked:
                self.busy.release()


def holding(method):
    """Decorator: the object's handle is held (Handle.hold) while the method runs, so
    that another thread's close() cannot free it under the library call."""
    @functools.wraps(method)
    def held(self, *args, **kwargs):
        h = self._handle
        if h is None:
            return method(self, *args, **kwargs)
        with h.hold():
            return method(self, *args, **kwargs)
    return held


class Owner:
    """What every object holding one Handle in self._handle shares: close() (idempotent),
    closed, use as a context manager, and closing when collected."""

    _handle = None

    def close(self):
        if self._handle is not None:
            self._handle.close()

    @property
    def closed(self):
        return self._handle is None or self._handle.ptr is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._handle is not None:
                self._handle.close()
        except Exception:  # interpreter shutdown, or in use by another thread
            pass


_C_RANGES = {
    "int32_t": (-(1 << 31), (1 << 31) - 1),
    "uint32_t": (0, (1 << 32) - 1),
    "int64_t": (-(1 << 63), (1 << 63) - 1),
    "uint64_t": (0, (1 << 64) - 1),
    "size_t": (0, (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1),
    "int": (-(1 << 31), (1 << 31) - 1),
}


def c_int(value, ctype, name):
    """value as an integer argument of C type ctype. Integers only (int, bool, numpy
    integers: whatever has __index__): 1.5, "3" and None raise TypeError instead of
    being truncated or parsed, and a value the C type cannot hold raises OverflowError
    instead of wrapping (n_ctx=2**32+16 is not 16)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an integer, not %s" % (name, type(value).__name__)) \
            from None
    lo, hi = _C_RANGES[ctype]
    if not lo <= v <= hi:
        raise OverflowError("%s = %d does not fit in %s" % (name, v, ctype))
    return v


def c_float(value, name):
    """value as a float argument: real numbers only (a str or None is a TypeError)."""
    if not isinstance(value, numbers.Real):
        raise TypeError("%s must be a number, not %s" % (name, type(value).__name__))
    return float(value)


def encode(text, name="text"):
    """str, bytes (bytearray, memoryview) or os.PathLike -> bytes. Anything else, None
    included, is a TypeError: str(None) would be the text "None"."""
    if isinstance(text, bytes):
        return text
    if isinstance(text, (bytearray, memoryview)):
        return bytes(text)
    if isinstance(text, str):
        return text.encode("utf-8", "surrogateescape")
    if isinstance(text, os.PathLike):
        return os.fsencode(text)
    raise TypeError("%s must be str or bytes, not %s" % (name, type(text).__name__))


def cstr(text, name="text"):
    """encode() for a NUL-terminated const char * parameter: an embedded NUL would
    silently cut the string there, so it is a ValueError (as in open())."""
    raw = encode(text, name)
    if b"\0" in raw:
        raise ValueError("embedded null byte in %s" % name)
    return raw


def fspath(path):
    """A path (str, bytes, os.PathLike) for a const char * parameter; ValueError for an
    embedded NUL, which the library would see as the end of the path."""
    raw = os.fsencode(os.fspath(path))
    if b"\0" in raw:
        raise ValueError("embedded null byte in path")
    return raw


def decode(raw):
    """bytes from the library -> str (bad UTF-8 survives a round trip)."""
    return "" if raw is None else raw.decode("utf-8", "surrogateescape")


def errbuf():
    """A caller error buffer and the pointer to put in a params struct."""
    buf = ctypes.create_string_buffer(ERRBUF_CAP)
    return buf, ctypes.cast(buf, ctypes.POINTER(ctypes.c_char))


def fill(call, *args, cap=256):
    """Call a (buf, cap) function of the library, growing the buffer until the text
    fits. Returns (n, bytes): n the full length or a negative status, bytes the text
    (b"" on failure)."""
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = call(*args, buf, cap)
        if n < 0:
            return n, b""
        if n < cap:
            return n, buf.raw[:n]
        cap = n + 1


def float_array(ptr, n, code="f"):
    """Copy n floats (code "f") or doubles ("d") from a ctypes pointer into a numpy
    array when numpy is installed, else an array.array."""
    if _np is not None:
        return _np.ctypeslib.as_array(ptr, shape=(n,)).copy()
    ctype = ctypes.c_float if code == "f" else ctypes.c_double
    out = array(code)
    out.frombytes(ctypes.string_at(ptr, n * ctypes.sizeof(ctype)))
    return out


def new_float_buffer(n, code="d"):
    """A writable buffer of n doubles/floats and a ctypes pointer into it."""
    ctype = ctypes.c_double if code == "d" else ctypes.c_float
    if _np is not None:
        arr = _np.zeros(n, dtype=_np.float64 if code == "d" else _np.float32)
        return arr, arr.ctypes.data_as(ctypes.POINTER(ctype))
    arr = array(code, bytes(n * ctypes.sizeof(ctype)))
    addr, _ = arr.buffer_info()
    return arr, ctypes.cast(addr, ctypes.POINTER(ctype))


def token_array(tokens):
    """A sequence of token ids -> (ctypes int32 array, n)."""
    toks = list(tokens) if not isinstance(tokens, (list, tuple)) else tokens
    n = len(toks)
    arr = (ctypes.c_int32 * max(n, 1))()
    for i, t in enumerate(toks):
        arr[i] = c_int(t, "int32_t", "token id")
    return arr, n
