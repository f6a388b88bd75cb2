#!/usr/bin/env python3
"""A safe, torch-free reader for PyTorch `.pt` files (the zip format of torch.save).

Since PyTorch 1.6, torch.save writes a zip archive (entries stored, not compressed):

    <name>/data.pkl        a pickle of the saved object; tensors appear in it as
                           torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
                           requires_grad, backward_hooks[, metadata]) calls, and each
                           storage as a *persistent id* ('storage', storage_type, key,
                           location, numel) instead of inline bytes
    <name>/data/<key>      the raw bytes of storage <key> (numel elements)
    <name>/byteorder       "little" or "big" (absent in old files: little)
    <name>/version         the serialization format version, e.g. "3"
    (and .format_version, .storage_alignment, .data/serialization_id, ignored here)

torch.load runs the pickle with the full unpickler, which can import and call any
Python function: loading an untrusted .pt file with it can execute code. This reader
uses a restricted unpickler instead. Its find_class allows only

    collections.OrderedDict
    torch._utils._rebuild_tensor_v2, torch._utils._rebuild_tensor,
    torch._utils._rebuild_parameter (nn.Parameter: returns the tensor itself)
    torch.<X>Storage for the storage types below, torch.UntypedStorage
    torch.<dtype> objects (torch.float16, ...), which become numpy dtypes

and each allowed name maps to a function of this module, never to torch itself. Any
other global -- os.system, builtins.eval, ... -- raises ValueError before anything is
called.

Storage types and what they become:

    FloatStorage float32, HalfStorage float16, BFloat16Storage float32 (widened exactly),
    DoubleStorage float64, LongStorage int64, IntStorage int32, ShortStorage int16,
    CharStorage int8, ByteStorage uint8, BoolStorage bool, UntypedStorage uint8

API:

    load(path) -> object   tensors become numpy arrays (C-contiguous copies, in native
                           byte order); dicts and OrderedDicts stay dicts; lists and
                           tuples stay lists and tuples; a bare tensor gives an array.

Every failure -- a legacy (pre-1.6, non-zip) file, an unknown class, a truncated or
corrupt archive, a storage too short for its tensor -- raises ValueError with a message
naming the file. Needs only numpy.

Command line: `pt_reader.py FILE...` prints a summary of each file's contents.
"""
import collections
import io
import pickle
import sys
import zipfile

import numpy as np

__all__ = ["load", "STORAGE_TYPES"]

# torch storage class name -> (numpy dtype of the stored bytes, element size)
STORAGE_TYPES = {
    "FloatStorage": np.dtype(np.float32),
    "HalfStorage": np.dtype(np.float16),
    "BFloat16Storage": np.dtype(np.uint16),  # widened to float32 after reading
    "DoubleStorage": np.dtype(np.float64),
    "LongStorage": np.dtype(np.int64),
    "IntStorage": np.dtype(np.int32),
    "ShortStorage": np.dtype(np.int16),
    "CharStorage": np.dtype(np.int8),
    "ByteStorage": np.dtype(np.uint8),
    "BoolStorage": np.dtype(np.bool_),
    "UntypedStorage": np.dtype(np.uint8),
}

# torch dtype objects that may appear in a pickle -> numpy dtype
TORCH_DTYPES = {
    "float32": np.float32, "float": np.float32, "float16": np.float16, "half": np.float16,
    "bfloat16": np.float32, "float64": np.float64, "double": np.float64,
    "int64": np.int64, "long": np.int64, "int32": np.int32, "int": np.int32,
    "int16": np.int16, "short": np.int16, "int8": np.int8, "uint8": np.uint8,
    "bool": np.bool_,
}

MAX_NDIM = 64


class _StorageType:
    """Stands in for a torch.*Storage class inside the pickle; only ever used as a tag."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


def _check_int(what, v):
    if type(v) is not int:  # bool is not a valid size either
        raise ValueError(f"{what} must be an int, got {type(v).__name__}")
    return v


def _rebuild_tensor(storage, storage_offset, size, stride, *rest):
    """Shared by _rebuild_tensor (old) and _rebuild_tensor_v2: the extra arguments
    (requires_grad, backward_hooks, metadata) do not matter for the values."""
    if not isinstance(storage, np.ndarray) or storage.ndim != 1:
        raise ValueError("tensor rebuilt from something that is not a storage")
    if not isinstance(size, (tuple, list)) or not isinstance(stride, (tuple, list)):
        raise ValueError("tensor size and stride must be tuples")
    if len(size) != len(stride) or len(size) > MAX_NDIM:
        raise ValueError(f"tensor size {size!r} and stride {stride!r} do not match")
    off = _check_int("storage offset", storage_offset)
    size = tuple(_check_int("tensor size", s) for s in size)
    stride = tuple(_check_int("tensor stride", s) for s in stride)
    if off < 0 or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise ValueError(f"negative offset, size or stride ({off}, {size}, {stride})")
    n = 1
    for s in size:
        n *= s
    if n == 0:
        return np.zeros(size, dtype=storage.dtype)
    last = off + sum((sz - 1) * st for sz, st in zip(size, stride))
    if last >= storage.shape[0]:
        raise ValueError(f"tensor (offset {off}, size {size}, stride {stride}) reaches "
                         f"element {last} of a storage of {storage.shape[0]} elements")
    item = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[off:], shape=size, strides=tuple(st * item for st in stride),
        writeable=False)
    return np.array(view, order="C", copy=True)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, *rest):
    if not isinstance(data, np.ndarray):
        raise ValueError("nn.Parameter rebuilt from something that is not a tensor")
    return data


class _Unpickler(pickle.Unpickler):
    def __init__(self, data, storage_reader):
        super().__init__(io.BytesIO(data))
        self._storage_reader = storage_reader
        self._storages = {}

    def find_class(self, module, name):
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch._utils":
            if name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
                return _rebuild_tensor
            if name == "_rebuild_parameter":
                return _rebuild_parameter
        if module == "torch":
            if name in STORAGE_TYPES:
                return _StorageType(name)
            if name in TORCH_DTYPES:
                return np.dtype(TORCH_DTYPES[name])
        raise ValueError(f"refusing to load global {module}.{name}: only tensors, "
                         f"storages and (Ordered)dicts are allowed in a .pt file read "
                         f"by pt_reader")

    def persistent_load(self, pid):
        if (not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage"
                or not isinstance(pid[1], _StorageType) or not isinstance(pid[2], str)):
            raise ValueError(f"unsupported persistent id {pid!r:.200}")
        _, stype, key, _location, numel = pid
        numel = _check_int("storage size", numel)
        if numel < 0:
            raise ValueError(f"negative storage size {numel}")
        if key in self._storages:
            arr = self._storages[key]
            if arr.shape[0] < numel:
                raise ValueError(f"storage {key} used with two different sizes")
            return arr
        dt = STORAGE_TYPES[stype.name]
        raw = self._storage_reader(key, numel * dt.itemsize)
        arr = np.frombuffer(raw, dtype=dt.newbyteorder(self.byteorder), count=numel)
        if dt.itemsize > 1:
            arr = arr.astype(dt.newbyteorder("="))
        if stype.name == "BFloat16Storage":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        self._storages[key] = arr
        return arr

    byteorder = "<"


def _find_prefix(names):
    """The archive's top-level directory: the one holding data.pkl."""
    pkls = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pkls) != 1:
        raise ValueError(f"expected exactly one <name>/data.pkl entry, found {len(pkls)}")
    return pkls[0][: -len("data.pkl")]


def load(path):
    """Read a torch.save zip file. Tensors become numpy arrays. Raises ValueError."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ValueError(f"{path}: cannot open: {e}") from e
    if head[:2] != b"PK":
        if head[:1] == b"\x80":
            raise ValueError(f"{path}: legacy (pre-1.6, non-zip) torch file; re-save it "
                             f"with a current torch.save, or convert it with torch")
        raise ValueError(f"{path}: not a zip-format torch file (magic {head!r})")
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            prefix = _find_prefix(names)
            nameset = set(names)
            byteorder = "little"
            if prefix + "byteorder" in nameset:
                byteorder = z.read(prefix + "byteorder").decode("ascii", "replace").strip()
                if byteorder not in ("little", "big"):
                    raise ValueError(f"unknown byteorder {byteorder!r}")

            def read_storage(key, nbytes):
                name = prefix + "data/" + key
                if name not in nameset:
                    raise ValueError(f"storage {key!r} is missing from the archive")
                info = z.getinfo(name)
                if info.file_size < nbytes:
                    raise ValueError(f"storage {key!r} has {info.file_size} bytes, "
                                     f"{nbytes} needed")
                with z.open(info) as f:
                    raw = f.read(nbytes)
                if len(raw) != nbytes:
                    raise ValueError(f"storage {key!r} is truncated")
                return raw

            up = _Unpickler(z.read(prefix + "data.pkl"), read_storage)
            up.byteorder = "<" if byteorder == "little" else ">"
            obj = up.load()
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if msg.startswith(f"{path}:") else f"{path}: {msg}") from None
    except Exception as e:  # BadZipFile, zlib.error, UnpicklingError, EOFError, ...:
        # a damaged archive can fail in many places of zipfile and pickle
        raise ValueError(f"{path}: corrupt or truncated .pt file: "
                         f"{type(e).__name__}: {e}") from None
    return obj


def _describe(obj, indent=""):
    if isinstance(obj, np.ndarray):
        return f"array {obj.dtype} {list(obj.shape)}"
    if isinstance(obj, dict):
        return "{\n" + "".join(f"{indent}  {k!r}: {_describe(v, indent + '  ')}\n"
                               for k, v in obj.items()) + indent + "}"
    return repr(obj)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    rc = 0
    for p in argv[1:]:
        try:
            print(f"{p}: {_describe(load(p))}")
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
