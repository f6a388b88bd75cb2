"""Finding and loading libpowerinfer, and the ctypes declarations of its API.

Every function the package calls is declared here with argtypes and restype that match
include/powerinfer.h exactly; the params structs are ctypes Structures with the same
fields in the same order (struct_size first) and are always filled by the library's
*_default_params functions before any field is set, so a field this module does not
know about keeps its default.

Search order for the shared library (the first that loads wins):
  1. the path given to load_library(path);
  2. the environment variable PI_LIBRARY (the full path of the .so); when it is set,
     nothing else is tried;
  3. pkg-config: libpowerinfer.so.<ABI> (else .so) in `pkg-config --variable=libdir
     powerinfer`, or in a directory of `pkg-config --libs-only-L powerinfer`;
  4. ctypes.util.find_library("powerinfer").
"""

import ctypes
import ctypes.util
import os
import subprocess
import sys
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_float,
                    c_int, c_int32, c_int64, c_size_t, c_uint, c_uint8, c_uint32, c_uint64,
                    c_void_p)

# The ABI this module was written against (PI_ABI_VERSION in the header).
ABI_VERSION = 1

# ---- callback types (typedefs of the header) ----------------------------------------
# Parameters that carry text not NUL-terminated are POINTER(c_char), not c_char_p,
# so ctypes does not read past `len`.
LOG_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)              # pi_log_fn
PROGRESS_FN = CFUNCTYPE(c_int, c_void_p, c_float)                # pi_progress_fn
ABORT_FN = CFUNCTYPE(c_int, c_void_p)                            # pi_abort_fn
TEXT_FN = CFUNCTYPE(c_int, c_void_p, POINTER(c_char), c_size_t)  # pi_text_fn
# pi_ffn_probe_fn
FFN_PROBE_FN = CFUNCTYPE(None, c_void_p, c_int64, c_int64, POINTER(c_float), POINTER(c_float),
                         POINTER(c_float))


# ---- params structs -------------------------------------------------------------------
class ModelParams(Structure):
    """pi_model_params."""
    _fields_ = [
        ("struct_size", c_uint32),
        ("metadata_only", c_int32),
        ("log_fn", LOG_FN),
        ("log_user", c_void_p),
        ("log_level", c_int32),
        ("progress_fn", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("errbuf", POINTER(c_char)),
        ("errbuf_cap", c_size_t),
        ("load_mode", c_int32),
        ("lock_memory", c_int32),
    ]


class CtxParams(Structure):
    """pi_ctx_params."""
    _fields_ = [
        ("struct_size", c_uint32),
        ("n_ctx", c_uint32),
        ("n_threads", c_uint32),
        ("n_batch", c_uint32),
        ("abort_fn", ABORT_FN),
        ("abort_user", c_void_p),
        ("f32_activations", c_uint32),
        ("sparse_mode", c_uint32),
        ("sparse_threshold_set", c_uint32),
        ("sparse_threshold", c_float),
        ("stats", c_uint32),
        ("errbuf", POINTER(c_char)),
        ("errbuf_cap", c_size_t),
        # hybrid execution
        ("device", c_uint32),
        ("device_index", c_uint32),
        ("device_budget", c_uint64),
        ("plan_stats", c_void_p),
        ("plan_path", c_char_p),
        ("plan_file", c_uint32),
        ("reserved0", c_uint32),
        # several sequences
        ("n_seq_max", c_uint32),
        ("check_numerics", c_uint32),
        # embeddings
        ("embeddings", c_uint32),
        ("reserved2", c_uint32),
        # thresholded sparsity (PI_SPARSE_THRESHOLD) and its calibration
        ("sparse_thresholds", POINTER(c_float)),
        ("n_sparse_thresholds", c_uint64),
        ("sparse_threshold_scale", c_float),
        ("gate_histogram", c_uint32),
        # graph submission of device steps (PI_GRAPHS_*)
        ("device_graphs", c_uint32),
        ("kv_type", c_uint32),
        ("kv_type_v", c_uint32),
        ("reserved3", c_uint32),
    ]


class BatchEntry(Structure):
    _fields_ = [
        ("token", c_int32),
        ("seq", c_int32),
        ("pos", c_int32),
        ("logits", c_uint32),
    ]


class LayerStats(Structure):
    """pi_layer_stats."""
    _fields_ = [
        ("struct_size", c_uint32),
        ("reserved", c_uint32),
        ("tokens_predicted", c_uint64),
        ("tokens_observed", c_uint64),
        ("predicted", c_double),
        ("active", c_double),
        ("both", c_double),
        ("rows_gate_up", c_uint64),
        ("rows_down", c_uint64),
        ("bytes_ffn", c_uint64),
        ("bytes_predictor", c_uint64),
        ("ns_attention", c_uint64),
        ("ns_predictor", c_uint64),
        ("ns_ffn", c_uint64),
    ]


class SamplerParams(Structure):
    """pi_sampler_params."""
    _fields_ = [
        ("struct_size", c_uint32),
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repeat_penalty", c_float),
        ("frequency_penalty", c_float),
        ("presence_penalty", c_float),
        ("penalty_last_n", c_int32),
        ("seed", c_uint64),
    ]


class ChatMessage(Structure):
    """pi_chat_message."""
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class QuantizeParams(Structure):
    """pi_quantize_params."""
    _fields_ = [
        ("struct_size", c_uint32),
        ("type", c_uint32),
        ("predictor_type", c_uint32),
        ("keep_output", c_uint32),
        ("n_threads", c_uint32),
        ("progress_fn", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("errbuf", POINTER(c_char)),
        ("errbuf_cap", c_size_t),
        ("allow_requantize", c_uint32),
        ("reserved0", c_uint32),
    ]


class SparsifyParams(Structure):
    """pi_sparsify_params."""
    _fields_ = [
        ("struct_size", c_uint32),
        ("down_type", c_uint32),
        ("thresholds", POINTER(c_float)),
        ("n_thresholds", c_uint64),
        ("sparsity", c_float),
        ("n_threads", c_uint32),
        ("calibration", c_char_p),
        ("calibration_tokens", c_uint64),
        ("progress_fn", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("errbuf", POINTER(c_char)),
        ("errbuf_cap", c_size_t),
        ("down_error", POINTER(c_double)),
        ("method", c_uint32),
        ("reserved0", c_uint32),
        ("neuron_order", POINTER(c_int32)),
        ("keep_down", c_uint32),
        ("reserved1", c_uint32),
    ]


# Opaque handles are passed as c_void_p.
_H = c_void_p
_PH = POINTER(c_void_p)  # out-pointer to a handle
_I64P = POINTER(c_int64)

# name: (restype, argtypes), in the order of the header.
_PROTOTYPES = {
    "pi_version": (c_uint, []),
    "pi_version_string": (c_char_p, []),
    "pi_abi_version": (c_uint, []),
    "pi_status_str": (c_char_p, [c_int]),
    "pi_type_name": (c_char_p, [c_int]),
    # model
    "pi_model_default_params": (c_int, [POINTER(ModelParams)]),
    "pi_model_open": (c_int, [c_char_p, POINTER(ModelParams), _PH]),
    "pi_model_close": (None, [_H]),
    "pi_model_errmsg": (c_char_p, [_H]),
    "pi_model_arch": (c_char_p, [_H]),
    "pi_model_is_sparse": (c_int, [_H]),
    "pi_model_n_layer": (c_int64, [_H]),
    "pi_model_n_embd": (c_int64, [_H]),
    "pi_model_n_ff": (c_int64, [_H]),
    "pi_model_n_head": (c_int64, [_H]),
    "pi_model_n_head_kv": (c_int64, [_H]),
    "pi_model_n_vocab": (c_int64, [_H]),
    "pi_model_n_ctx_train": (c_int64, [_H]),
    "pi_model_predictor_rank": (c_int64, [_H, c_int64]),
    "pi_model_sparse_threshold": (c_float, [_H]),
    "pi_model_n_params": (c_uint64, [_H]),
    "pi_model_size_bytes": (c_uint64, [_H]),
    # metadata
    "pi_model_meta_count": (c_int64, [_H]),
    "pi_model_meta_key": (c_char_p, [_H, c_int64]),
    "pi_model_meta_type": (c_int, [_H, c_char_p, POINTER(c_int), POINTER(c_int),
                                   POINTER(c_uint64)]),
    "pi_model_meta_int": (c_int, [_H, c_char_p, _I64P]),
    "pi_model_meta_float": (c_int, [_H, c_char_p, POINTER(c_double)]),
    "pi_model_meta_str": (c_int64, [_H, c_char_p, POINTER(c_char), c_size_t]),
    "pi_model_meta_arr_int": (c_int, [_H, c_char_p, c_uint64, _I64P]),
    "pi_model_meta_arr_float": (c_int, [_H, c_char_p, c_uint64, POINTER(c_double)]),
    "pi_model_meta_arr_str": (c_int64, [_H, c_char_p, c_uint64, POINTER(c_char),
                                        c_size_t]),
    "pi_model_meta_to_string": (c_int64, [_H, c_char_p, c_uint32, POINTER(c_char),
                                          c_size_t]),
    # tensors
    "pi_model_n_tensors": (c_int64, [_H]),
    "pi_model_tensor_find": (c_int, [_H, c_char_p, _I64P]),
    "pi_model_tensor_name": (c_char_p, [_H, c_int64]),
    "pi_model_tensor_type": (c_int, [_H, c_int64]),
    "pi_model_tensor_shape": (c_int, [_H, c_int64, POINTER(c_int), _I64P]),
    "pi_model_tensor_nbytes": (c_uint64, [_H, c_int64]),
    # tokenizer
    "pi_tokenize": (c_int64, [_H, POINTER(c_char), c_size_t, POINTER(c_int32), c_size_t,
                              c_uint32]),
    "pi_token_to_piece": (c_int64, [_H, c_int32, POINTER(c_char), c_size_t, c_uint32]),
    "pi_model_token_bos": (c_int32, [_H]),
    "pi_model_token_eos": (c_int32, [_H]),
    "pi_model_token_is_eog": (c_int, [_H, c_int32]),
    "pi_model_chat_template": (c_int64, [_H, POINTER(c_char), c_size_t]),
    "pi_detok_create": (c_int, [_H, c_uint32, _PH]),
    "pi_detok_push": (c_int, [_H, c_int32, TEXT_FN, c_void_p]),
    "pi_detok_flush": (c_int, [_H, TEXT_FN, c_void_p]),
    "pi_detok_destroy": (None, [_H]),
    # chat
    "pi_model_chat_format": (c_int, [_H]),
    "pi_chat_apply": (c_int64, [_H, c_int, POINTER(ChatMessage), c_size_t, c_int,
                                POINTER(c_char), c_size_t]),
    "pi_chat_template_create": (c_int, [_H, c_char_p, _PH, POINTER(c_char), c_size_t]),
    "pi_chat_template_render": (c_int64, [_H, c_char_p, c_int64, POINTER(c_char), c_size_t,
                                          POINTER(c_char), c_size_t]),
    "pi_chat_template_destroy": (None, [_H]),
    # context
    "pi_ctx_default_params": (c_int, [POINTER(CtxParams)]),
    "pi_ctx_create": (c_int, [_H, POINTER(CtxParams), _PH]),
    "pi_ctx_destroy": (None, [_H]),
    "pi_ctx_errmsg": (c_char_p, [_H]),
    "pi_ctx_model": (c_void_p, [_H]),
    "pi_ctx_decode": (c_int, [_H, POINTER(c_int32), c_size_t]),
    "pi_ctx_logits": (POINTER(c_float), [_H]),
    "pi_ctx_pos": (c_int64, [_H]),
    "pi_ctx_n_ctx": (c_int64, [_H]),
    "pi_ctx_reset": (c_int, [_H]),
    "pi_ctx_truncate": (c_int, [_H, c_int64]),
    "pi_ctx_decode_batch": (c_int, [_H, POINTER(BatchEntry), c_size_t]),
    "pi_ctx_batch_logits": (POINTER(c_float), [_H, c_size_t]),
    "pi_ctx_n_seq_max": (c_uint32, [_H]),
    "pi_model_pooling": (c_int, [_H]),
    "pi_ctx_embedding": (POINTER(c_float), [_H, c_size_t]),
    "pi_ctx_embedding_pooled": (c_int, [_H, c_int32, c_int, c_uint32, POINTER(c_float),
                                        c_size_t]),
    "pi_ctx_seq_len": (c_int64, [_H, c_int32]),
    "pi_ctx_seq_remove": (c_int, [_H, c_int32, c_int64, c_int64]),
    "pi_ctx_seq_copy": (c_int, [_H, c_int32, c_int32]),
    "pi_ctx_seq_keep": (c_int, [_H, c_int32]),
    "pi_ctx_seq_clear": (c_int, [_H, c_int32]),
    "pi_ctx_state_save": (c_int, [_H, c_int32, c_void_p, c_size_t, POINTER(c_size_t)]),
    "pi_ctx_state_load": (c_int, [_H, c_int32, c_void_p, c_size_t]),
    "pi_ctx_state_save_file": (c_int, [_H, c_int32, c_char_p]),
    "pi_ctx_state_load_file": (c_int, [_H, c_int32, c_char_p]),
    "pi_ctx_set_threads": (c_int, [_H, c_uint32]),
    "pi_ctx_set_ffn_probe": (c_int, [_H, FFN_PROBE_FN, c_void_p]),
    "pi_ctx_n_threads": (c_uint32, [_H]),
    "pi_ctx_sparse_mode": (c_int, [_H]),
    "pi_ctx_sparse_threshold": (c_float, [_H]),
    "pi_ctx_sparse_threshold_source": (c_int, [_H]),
    "pi_ctx_sparse_thresholds": (c_int64, [_H, POINTER(c_float), c_size_t]),
    # statistics
    "pi_ctx_stats": (c_void_p, [_H]),
    "pi_ctx_stats_reset": (c_int, [_H]),
    "pi_stats_n_layer": (c_int64, [_H]),
    "pi_stats_n_ff": (c_int64, [_H]),
    "pi_stats_layer": (c_int, [_H, c_int64, POINTER(LayerStats)]),
    "pi_stats_neurons": (c_int, [_H, c_int64, c_int, POINTER(c_double), c_size_t]),
    "pi_stats_gate_histogram": (c_int, [_H, c_int64, POINTER(c_uint64), c_size_t]),
    "pi_stats_gate_quantile": (c_int, [_H, c_int64, c_double, POINTER(c_float)]),
    "pi_stats_n_expert": (c_int64, [_H]),
    "pi_stats_experts": (c_int, [_H, c_int64, c_int, POINTER(c_double), c_size_t]),
    "pi_stats_save": (c_int, [_H, c_char_p, POINTER(c_char), c_size_t]),
    "pi_stats_load": (c_int, [c_char_p, _PH, POINTER(c_char), c_size_t]),
    "pi_stats_free": (None, [_H]),
    # placement plans
    "pi_model_plan": (c_int, [_H, POINTER(CtxParams), _PH]),
    "pi_ctx_plan": (c_void_p, [_H]),
    "pi_plan_budget": (c_uint64, [_H]),
    "pi_plan_bytes": (c_uint64, [_H, c_int]),
    "pi_plan_n_layer": (c_int64, [_H]),
    "pi_plan_n_ff": (c_int64, [_H]),
    "pi_plan_layer_parts": (c_uint32, [_H, c_int64]),
    "pi_plan_layer_neurons": (c_int64, [_H, c_int64, POINTER(c_uint8), c_size_t]),
    "pi_plan_layer_experts": (c_int64, [_H, c_int64, POINTER(c_uint8), c_size_t]),
    "pi_plan_output_on_device": (c_int, [_H]),
    "pi_plan_kv_on_device": (c_int, [_H]),
    "pi_plan_source": (c_int, [_H]),
    "pi_plan_describe": (c_int64, [_H, POINTER(c_char), c_size_t]),
    "pi_plan_save": (c_int, [_H, c_char_p]),
    "pi_plan_free": (None, [_H]),
    # sampling
    "pi_sampler_default_params": (c_int, [POINTER(SamplerParams)]),
    "pi_sampler_create": (c_int, [_H, POINTER(SamplerParams), _PH]),
    "pi_sampler_destroy": (None, [_H]),
    "pi_sample": (c_int, [_H, _H, POINTER(c_int32)]),
    "pi_sample_logits": (c_int, [_H, POINTER(c_float), c_int64, POINTER(c_int32)]),
    "pi_sampler_accept": (c_int, [_H, c_int32]),
    "pi_sampler_reset": (c_int, [_H]),
    # grammars
    "pi_grammar_create": (c_int, [_H, POINTER(c_char), c_size_t, c_char_p, _PH,
                                  POINTER(c_char), c_size_t]),
    "pi_grammar_destroy": (None, [_H]),
    "pi_grammar_errmsg": (c_char_p, [_H]),
    "pi_grammar_clone": (c_int, [_H, _PH]),
    "pi_grammar_reset": (c_int, [_H]),
    "pi_grammar_complete": (c_int, [_H]),
    "pi_grammar_mask": (c_int64, [_H, POINTER(c_float), c_int64]),
    "pi_grammar_accept": (c_int, [_H, c_int32]),
    "pi_grammar_accept_text": (c_int, [_H, POINTER(c_char), c_size_t]),
    # quantization
    "pi_quantize_default_params": (c_int, [POINTER(QuantizeParams)]),
    "pi_model_quantize": (c_int, [c_char_p, c_char_p, POINTER(QuantizeParams)]),
    "pi_sparsify_default_params": (c_int, [POINTER(SparsifyParams)]),
    "pi_model_sparsify": (c_int, [c_char_p, c_char_p, POINTER(SparsifyParams)]),
}


class LibraryNotFoundError(OSError):
    """libpowerinfer could not be found or loaded; the message lists what was tried."""


_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    """(where, path) pairs to try when no explicit path is given."""
    env = os.environ.get("PI_LIBRARY")
    if env:  # an explicit choice: nothing else is tried
        return [("$PI_LIBRARY", env)]
    out = [("$PI_LIBRARY", None)]
    # libdir, then the -L directories (a meson "-uninstalled" .pc points -L at the
    # build tree while its libdir names the install location)
    dirs = []
    for args in (["--variable=libdir"], ["--libs-only-L"]):
        try:
            r = subprocess.run(["pkg-config"] + args + ["powerinfer"],
                               capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            break
        if r.returncode != 0:
            break
        for word in r.stdout.split():
            d = word[2:] if word.startswith("-L") else word
            if d and d not in dirs:
                dirs.append(d)
    ext = ".dylib" if sys.platform == "darwin" else ".so"
    names = ("libpowerinfer%s.%d" % (ext, ABI_VERSION), "libpowerinfer" + ext)
    paths = [os.path.join(d, n) for d in dirs for n in names]
    existing = [q for q in paths if os.path.exists(q)]
    if existing:
        out += [("pkg-config", q) for q in existing]
    elif dirs:
        out.append(("pkg-config: no %s in %s" % (" or ".join(names), ", ".join(dirs)),
                    None))
    else:
        out.append(("pkg-config powerinfer", None))
    found = ctypes.util.find_library("powerinfer")
    out.append(("ctypes.util.find_library('powerinfer')", found))
    return out


def _declare(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def _open(path):
    lib = ctypes.CDLL(path)
    _declare(lib)  # AttributeError if a symbol is missing: not libpowerinfer
    abi = lib.pi_abi_version()
    if abi != ABI_VERSION:
        raise OSError("ABI version %d, this package needs %d" % (abi, ABI_VERSION))
    return lib


def load_library(path=None):
    """Load libpowerinfer and return the ctypes.CDLL.

    path: the shared library to load. When None, the search order of this module's
    docstring is used. The library is loaded once per process; a later call with a
    different explicit path raises ValueError. Raises LibraryNotFoundError (an OSError)
    listing every place tried when nothing loads. Thread-safe."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            if path is not None and os.path.realpath(path) != os.path.realpath(_lib_path):
                raise ValueError("libpowerinfer is already loaded from %r" % _lib_path)
            return _lib
        tried = []
        cands = [("explicit path", path)] if path is not None else _candidates()
        for where, cand in cands:
            if not cand:
                tried.append("%s: not set" % where if where.startswith("$")
                             else where if ":" in where else "%s: nothing found" % where)
                continue
            try:
                lib = _open(cand)
            except (OSError, AttributeError) as e:
                msg = str(e)
                tried.append("%s: %s" % (where, msg) if cand in msg
                             else "%s: %s: %s" % (where, cand, msg))
                continue
            _lib, _lib_path = lib, cand
            return lib
        raise LibraryNotFoundError(
            "cannot load libpowerinfer; tried:\n  " + "\n  ".join(tried) +
            "\nSet PI_LIBRARY to the full path of libpowerinfer.so "
            "(e.g. build/lib/libpowerinfer.so) or install it where pkg-config finds it.")


def lib():
    """The loaded library, loading it with the default search on first use."""
    return _lib if _lib is not None else load_library()


def library_path():
    """The path libpowerinfer was loaded from, or None if not loaded yet."""
    return _lib_path
