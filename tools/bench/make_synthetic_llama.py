#!/usr/bin/env python3
"""Write a Llama-architecture GGUF file with random weights, for speed benchmarks.

The weights are drawn from N(0, std) (default std 0.02) with a fixed seed; the RMS-norm
weights are 1.0.  Every 2-D tensor -- token_embd.weight and the untied output.weight
included -- is stored in the type given by --type (unless --output-type says otherwise
for output.weight); the 1-D norm weights are F32.  The tokenizer metadata is a minimal
but valid SentencePiece-style ("llama") vocabulary so that llama.cpp accepts the file:

    0 "<unk>" (unknown), 1 "<s>" (control, BOS), 2 "</s>" (control, EOS),
    3..258 "<0x00>".."<0xFF>" (byte tokens), then filler pieces "\u2581a0", "\u2581a1", ...
    (normal tokens with decreasing scores) up to n_vocab.

Tensors are generated, quantized and written one at a time, so memory use stays at a
few hundred MB even for the 1B shape.

Examples:
    make_synthetic_llama.py --preset 1b --type q4_0 -o /work/bench-models/tinyllama-1b-q4_0.gguf
    make_synthetic_llama.py --preset tiny --type q8_0 -o /tmp/tiny.gguf
    make_synthetic_llama.py --preset 1b --n-layer 4 --type f16 -o /tmp/x.gguf
"""
import argparse
import sys
import time

import numpy as np

try:
    import gguf
    from gguf.quants import quantize
except ImportError:  # pragma: no cover
    sys.exit("make_synthetic_llama.py: needs the `gguf` Python package (pip install gguf)")

QT = gguf.GGMLQuantizationType

PRESETS = {
    # TinyLlama-1.1B shape
    "1b": dict(n_embd=2048, n_layer=22, n_ff=5632, n_head=32, n_head_kv=4, n_vocab=32000,
               n_ctx=2048, rope_base=10000.0, rms_eps=1e-5),
    # a few-MB model for quick tests
    "tiny": dict(n_embd=256, n_layer=4, n_ff=704, n_head=8, n_head_kv=2, n_vocab=1024,
                 n_ctx=512, rope_base=10000.0, rms_eps=1e-5),
}

TYPES = {
    "q4_0": (QT.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
    "q4_1": (QT.Q4_1, gguf.LlamaFileType.MOSTLY_Q4_1),
    "q8_0": (QT.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "f16": (QT.F16, gguf.LlamaFileType.MOSTLY_F16),
    "f32": (QT.F32, gguf.LlamaFileType.ALL_F32),
}


def tensor_plan(h):
    """(name, numpy shape [rows, cols] or [n], is_norm) in file order."""
    hd = h["n_embd"] // h["n_head"]
    n_kv = hd * h["n_head_kv"]
    e, f, v = h["n_embd"], h["n_ff"], h["n_vocab"]
    plan = [("token_embd.weight", (v, e), False)]
    for i in range(h["n_layer"]):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (e,), True),
            (b + "attn_q.weight", (e, e), False),
            (b + "attn_k.weight", (n_kv, e), False),
            (b + "attn_v.weight", (n_kv, e), False),
            (b + "attn_output.weight", (e, e), False),
            (b + "ffn_norm.weight", (e,), True),
            (b + "ffn_gate.weight", (f, e), False),
            (b + "ffn_up.weight", (f, e), False),
            (b + "ffn_down.weight", (e, f), False),
        ]
    plan += [("output_norm.weight", (e,), True), ("output.weight", (v, e), False)]
    return plan


def encode(x, qtype):
    """float32 array -> the array that goes to the file (uint8 bytes for quantized types)."""
    if qtype == QT.F32:
        return x
    if qtype == QT.F16:
        return x.astype(np.float16)
    return quantize(x, qtype)


def nbytes_of(shape, qtype):
    block, tsize = gguf.GGML_QUANT_SIZES[qtype]
    n = int(np.prod(shape))
    assert n % block == 0
    return n // block * tsize


def byte_shape(shape, qtype):
    if qtype in (QT.F32, QT.F16):
        return shape
    return gguf.quants.quant_shape_to_byte_shape(shape, qtype)


def add_vocab(w, n_vocab, extra_control=()):
    """The SentencePiece-style vocabulary of the module docstring; extra_control names
    control tokens that take the last ids (Phi-3's "<|endoftext|>")."""
    if n_vocab < 3 + 256 + 1 + len(extra_control):
        sys.exit(f"n_vocab must be at least 260 (3 specials + 256 byte tokens + 1), got {n_vocab}")
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + \
        [gguf.TokenType.BYTE] * 256
    scores = [0.0] * len(toks)
    n_fill = n_vocab - len(toks) - len(extra_control)
    toks += [f"\u2581a{i}" for i in range(n_fill)]
    types += [gguf.TokenType.NORMAL] * n_fill
    scores += [-float(i) for i in range(n_fill)]
    toks += list(extra_control)
    types += [gguf.TokenType.CONTROL] * len(extra_control)
    scores += [0.0] * len(extra_control)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types([int(t) for t in types])
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def add_llama_keys(w, name, h, ftype):
    """The llama hyper-parameters of shape h, the file type and the vocabulary."""
    w.add_name(name)
    w.add_context_length(h["n_ctx"])
    w.add_embedding_length(h["n_embd"])
    w.add_block_count(h["n_layer"])
    w.add_feed_forward_length(h["n_ff"])
    w.add_head_count(h["n_head"])
    w.add_head_count_kv(h["n_head_kv"])
    w.add_rope_dimension_count(h["n_embd"] // h["n_head"])
    w.add_rope_freq_base(h["rope_base"])
    w.add_layer_norm_rms_eps(h["rms_eps"])
    w.add_vocab_size(h["n_vocab"])
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_vocab(w, h["n_vocab"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True, help="output .gguf path")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="1b")
    ap.add_argument("--type", choices=sorted(TYPES), default="q4_0",
                    help="type of every 2-D weight (default q4_0)")
    ap.add_argument("--output-type", choices=sorted(TYPES), default=None,
                    help="type of output.weight (default: same as --type)")
    for k in ("n_embd", "n_layer", "n_ff", "n_head", "n_head_kv", "n_vocab", "n_ctx"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None, help=f"override preset {k}")
    ap.add_argument("--std", type=float, default=0.02, help="weight standard deviation (default 0.02)")
    ap.add_argument("--seed", type=int, default=1234, help="random seed (default 1234)")
    ap.add_argument("--name", default=None, help="general.name (default synthetic-llama-PRESET)")
    a = ap.parse_args()

    h = dict(PRESETS[a.preset])
    for k in ("n_embd", "n_layer", "n_ff", "n_head", "n_head_kv", "n_vocab", "n_ctx"):
        if getattr(a, k) is not None:
            h[k] = getattr(a, k)
    if h["n_embd"] % h["n_head"] or h["n_head"] % h["n_head_kv"]:
        sys.exit("n_embd must be a multiple of n_head, and n_head a multiple of n_head_kv")
    qtype, ftype = TYPES[a.type]
    out_qtype = TYPES[a.output_type][0] if a.output_type else qtype
    for name, shape, norm in tensor_plan(h):
        qt = out_qtype if name == "output.weight" else qtype
        if not norm and shape[-1] % gguf.GGML_QUANT_SIZES[qt][0]:
            sys.exit(f"{name}: row length {shape[-1]} is not a multiple of the {qt.name} block size")

    t_start = time.time()
    w = gguf.GGUFWriter(a.output, "llama")
    add_llama_keys(w, a.name or f"synthetic-llama-{a.preset}", h, ftype)

    plan = tensor_plan(h)
    total = 0
    for name, shape, norm in plan:
        qt = QT.F32 if norm else (out_qtype if name == "output.weight" else qtype)
        nb = nbytes_of(shape, qt)
        total += nb
        dt = {QT.F32: np.float32, QT.F16: np.float16}.get(qt, np.uint8)
        w.add_tensor_info(name, byte_shape(shape, qt), np.dtype(dt), nb,
                          raw_dtype=None if qt in (QT.F32, QT.F16) else qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    n_params = 0
    for idx, (name, shape, norm) in enumerate(plan):
        if norm:
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
            n_params += shape[0]
            continue
        qt = out_qtype if name == "output.weight" else qtype
        rng = np.random.default_rng([a.seed, idx])  # per-tensor stream: independent of order
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(a.std)
        data = encode(x, qt)
        w.write_tensor_data(data)
        n_params += x.size
        del x, data
    w.close()
    dt = time.time() - t_start
    print(f"wrote {a.output}: {a.preset} shape {h}, {a.type} "
          f"(output.weight {out_qtype.name}), {n_params / 1e6:.1f} M params, "
          f"{total / 2**20:.1f} MiB of tensor data, {dt:.1f} s")


if __name__ == "__main__":
    main()
