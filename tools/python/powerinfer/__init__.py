"""Python bindings (ctypes) for libpowerinfer.

    import powerinfer
    with powerinfer.Model("SmolLM2-135M-Instruct.Q4_1.gguf") as m:
        print("".join(powerinfer.generate(m, "The capital of France is", 8, temperature=0)))

The classes map the C API one to one: Model (pi_model_*, tokenizer, chat), Context
(pi_ctx_*), Stats (pi_stats_*), Plan (pi_plan_*: hybrid CPU/device placement, from
Model.plan or Context.plan), Sampler (pi_sampler_*), Grammar (pi_grammar_*), Detokenizer (pi_detok_*), and
quantize (pi_model_quantize). Failures raise PowerInferError (.status, .status_name,
.message); using a closed object raises ValueError.

The library is found on first use: load_library(path), else $PI_LIBRARY, else
pkg-config's libdir, else ctypes.util.find_library (see powerinfer._lib).

Threading, as in include/powerinfer.h: a Model is immutable and may be shared by many
threads and contexts; a Context (and a Sampler, a Detokenizer) is used by one thread
at a time; distinct contexts run concurrently. close() while the object, or one that
borrows it (a model's contexts, samplers, detokenizers), is in a library call on
another thread raises RuntimeError and closes nothing: nothing is freed under a call.
"""

from ._errors import (PI_ERR_ABORTED, PI_ERR_FORMAT, PI_ERR_INTERNAL, PI_ERR_INVALID_ARG,
                      PI_ERR_IO, PI_ERR_NOMEM, PI_ERR_NOT_FOUND, PI_ERR_NUMERIC, PI_ERR_RANGE,
                      PI_ERR_TYPE, PI_ERR_UNSUPPORTED, PI_OK, STATUS_NAMES, PowerInferError,
                      status_str)
from ._lib import LibraryNotFoundError, library_path, load_library
from .context import DEVICE_BUDGET_AUTO, Context, LayerStats, Stats
from .generate import generate
from .grammar import Grammar
from .model import POOLINGS, ChatTemplate, Detokenizer, Metadata, Model, TensorInfo, type_name
from .plan import Plan
from .quantize import quantize
from .sampler import Sampler, default_sampler_params

__version__ = "0.1.0"


def version():
    """The loaded library's version string ("0.1.0")."""
    from . import _lib
    return _lib.lib().pi_version_string().decode("ascii")


def abi_version():
    """The loaded library's ABI version (pi_abi_version)."""
    from . import _lib
    return _lib.lib().pi_abi_version()


__all__ = [
    "ChatTemplate", "Context", "DEVICE_BUDGET_AUTO", "Detokenizer", "Grammar", "LayerStats",
    "LibraryNotFoundError", "Metadata", "Model", "POOLINGS", "Plan", "PowerInferError",
    "Sampler", "Stats", "TensorInfo",
    "abi_version", "default_sampler_params", "generate", "library_path", "load_library", "quantize",
    "status_str", "type_name", "version", "STATUS_NAMES", "PI_OK", "PI_ERR_INVALID_ARG",
    "PI_ERR_NOMEM", "PI_ERR_IO", "PI_ERR_FORMAT", "PI_ERR_UNSUPPORTED", "PI_ERR_ABORTED",
    "PI_ERR_NOT_FOUND", "PI_ERR_TYPE", "PI_ERR_RANGE", "PI_ERR_INTERNAL", "PI_ERR_NUMERIC",
]
