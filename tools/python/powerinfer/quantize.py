"""quantize(): rewrite a GGUF or PowerInfer file with its weights in a smaller type."""

import ctypes

from . import _lib
from ._errors import check
from ._util import c_int, decode, errbuf, fspath
from .model import _Progress

QUANT_TYPES = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "mxfp4": 39, "f16": 1,
               "bf16": 30}


def _type_id(t):
    if isinstance(t, str):
        try:
            return QUANT_TYPES[t.lower()]
        except KeyError:
            raise ValueError("unknown type %r (one of %s)" % (t, ", ".join(QUANT_TYPES))) \
                from None
    return c_int(t, "uint32_t", "type")


def quantize(in_path, out_path, type="q4_0", *, predictor_type=None, keep_output=False,
             n_threads=0, progress=None, allow_requantize=False):
    """pi_model_quantize: write in_path's weights as `type` ("q4_0", "q4_1", "q5_0",
    "q5_1", "q8_0", "mxfp4" or a PI_TYPE_* id) into out_path, written to a temporary file and
    renamed only when complete.

    predictor_type: type of a PowerInfer file's FFN predictors (one of the above, or
    "f16"/"bf16"); None: the same as type. keep_output: leave output.weight as is.
    allow_requantize: dequantize and quantize again weights already quantized to another
    type (otherwise such a file raises PI_ERR_UNSUPPORTED).
    n_threads: 0 for the processors available. progress: callable(fraction); a truthy
    return (or an exception, re-raised) stops it with PI_ERR_ABORTED.
    Raises PowerInferError with the library's message. Thread-safe for distinct files.
    """
    lib = _lib.lib()
    p = _lib.QuantizeParams()
    check(lib.pi_quantize_default_params(ctypes.byref(p)), "pi_quantize_default_params")
    p.type = _type_id(type)
    if predictor_type is not None:
        p.predictor_type = _type_id(predictor_type)
    p.keep_output = 1 if keep_output else 0
    p.n_threads = c_int(n_threads, "uint32_t", "n_threads")
    p.allow_requantize = 1 if allow_requantize else 0
    prog = _Progress(progress)
    if prog.fn is not None:
        p.progress_fn = prog.fn
    buf, p.errbuf = errbuf()
    p.errbuf_cap = len(buf)
    st = lib.pi_model_quantize(fspath(in_path), fspath(out_path), ctypes.byref(p))
    prog.reraise()
    check(st, "pi_model_quantize", lambda: decode(buf.value))
