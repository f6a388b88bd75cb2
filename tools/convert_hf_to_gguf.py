#!/usr/bin/env python3
"""Convert a Hugging Face Llama-architecture (or Bamboo) checkpoint to a dense GGUF file.

Usage:
    python3 tools/convert_hf_to_gguf.py MODEL_DIR --outfile OUT.gguf
                                        [--outtype f32|f16|q8_0|q4_0|q4_1]
                                        [--name NAME] [--no-tokenizer]

MODEL_DIR holds config.json and the weights: *.safetensors (one file or shards)
or pytorch_model*.bin (the latter needs torch). Safetensors are read with a small
numpy reader here (F32, F16, BF16, F64), so converting them does not need torch.

What is written (architecture "bamboo" when config.json has model_type "bamboo",
else "llama"; below, llama.* stands for <arch>.*):
  keys     llama.vocab_size, context_length, embedding_length, block_count, feed_forward_length,
           attention.head_count, attention.head_count_kv,
           attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count,
           attention.key_length/value_length (only when head_dim != n_embd/n_head),
           rope.scaling.type "linear" + rope.scaling.factor (linear rope scaling only),
           general.name, general.file_type (+ general.quantization_version when
           quantized), powerinfer.ffn_activation = "relu" when hidden_act is relu
           (llama only: bamboo's FFN is relu(gate)*relu(up) by definition).
  tensors  token_embd, output_norm, output (omitted when the embeddings are tied),
           blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
           ffn_gate, ffn_up, ffn_down}.weight.

Q and K projection rows are permuted from HF's rotate-half RoPE layout (a head's
rotation pairs are (i, i + head_dim/2)) to the interleaved-pair layout GGUF
files use (pairs (2i, 2i+1)): rows reshaped as (n_head, 2, head_dim/2) and the
two middle axes swapped (n_head_kv heads for K). hf_qk_to_gguf / gguf_qk_to_hf
below are that permutation and its inverse.

1-D tensors are stored F32. 2-D tensors are stored in --outtype; a quantized
type needs the row length (ne0) to be a multiple of the block size (32), and a
tensor that is not is stored F16 instead, with a note on stderr.

With a tokenizer.json (BPE, e.g. GPT-2 style) or tokenizer.model (SentencePiece)
next to the weights, the vocabulary is copied too (best effort; --no-tokenizer
skips it). The vocabulary is padded with "[PAD<id>]" entries to the embedding's
row count, which GGUF readers (ours included) require.
"""

import argparse
import glob
import json
import os
import struct
import sys

import numpy as np

import gguf
from gguf.constants import GGMLQuantizationType as QT
from gguf.quants import quantize

OUTTYPES = {
    "f32": (QT.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (QT.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": (QT.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (QT.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
    "q4_1": (QT.Q4_1, gguf.LlamaFileType.MOSTLY_Q4_1),
}


# --------------------------------------------------------------------------- #
# Q/K permutation                                                               #
# --------------------------------------------------------------------------- #

def hf_qk_to_gguf(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotate-half rows -> GGUF interleaved-pair rows (per head)."""
    rows = w.shape[0]
    hd = rows // n_head
    if hd * n_head != rows or hd % 2:
        raise ValueError(f"cannot permute {w.shape} for {n_head} heads")
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_qk_to_hf(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of hf_qk_to_gguf."""
    rows = w.shape[0]
    hd = rows // n_head
    if hd * n_head != rows or hd % 2:
        raise ValueError(f"cannot permute {w.shape} for {n_head} heads")
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# --------------------------------------------------------------------------- #
# Reading checkpoints                                                           #
# --------------------------------------------------------------------------- #

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read_safetensors(path: str) -> dict:
    """Read a .safetensors file into float32 numpy arrays (F32/F16/BF16/F64)."""
    out = {}
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
        base = 8 + hlen
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dt = info["dtype"]
            shape = info["shape"]
            start, end = info["data_offsets"]
            f.seek(base + start)
            raw = f.read(end - start)
            if dt == "BF16":
                a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            elif dt in _ST_DTYPES:
                a = np.frombuffer(raw, dtype=np.dtype(_ST_DTYPES[dt]).newbyteorder("<"))
            else:
                raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
            out[name] = a.astype(np.float32).reshape(shape)
    return out


def read_torch_bin(path: str) -> dict:
    try:
        import torch
    except ImportError:
        sys.exit(f"{path}: reading pytorch_model.bin needs torch (pip install torch)")
    sd = torch.load(path, map_location="cpu", weights_only=True)
    return {k: v.to(torch.float32).numpy() for k, v in sd.items()}


def load_state_dict(model_dir: str) -> dict:
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    reader = read_safetensors
    if not files:
        files = sorted(glob.glob(os.path.join(model_dir, "pytorch_model*.bin")))
        reader = read_torch_bin
    if not files:
        sys.exit(f"{model_dir}: no *.safetensors or pytorch_model*.bin")
    sd = {}
    for p in files:
        sd.update(reader(p))
    return sd


# --------------------------------------------------------------------------- #
# Hyper-parameters                                                              #
# --------------------------------------------------------------------------- #

def rope_settings(cfg: dict):
    """(freq_base, scaling_type or None, factor) from either the old
    (rope_theta + rope_scaling) or the transformers-5 (rope_parameters) layout."""
    params = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or {}
    theta = cfg.get("rope_theta", params.get("rope_theta", 10000.0))
    rtype = scaling.get("rope_type", scaling.get("type"))
    factor = scaling.get("factor")
    if rtype is None:
        rtype = params.get("rope_type", params.get("type"))
        factor = params.get("factor")
    if rtype in (None, "default", "none"):
        return float(theta), None, 1.0
    if rtype != "linear":
        sys.exit(f"rope scaling type {rtype!r} is not supported (only linear)")
    return float(theta), "linear", float(factor)


# --------------------------------------------------------------------------- #
# Tokenizer (best effort)                                                       #
# --------------------------------------------------------------------------- #

def add_tokenizer(w: gguf.GGUFWriter, model_dir: str, cfg: dict, n_vocab: int) -> bool:
    tj = os.path.join(model_dir, "tokenizer.json")
    sp = os.path.join(model_dir, "tokenizer.model")
    tcfg = {}
    tcp = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.isfile(tcp):
        with open(tcp) as f:
            tcfg = json.load(f)

    if os.path.isfile(tj):
        with open(tj, encoding="utf-8") as f:
            tok = json.load(f)
        model = tok.get("model", {})
        if model.get("type") != "BPE":
            print(f"note: tokenizer.json model {model.get('type')!r} not copied", file=sys.stderr)
            return False
        vocab = dict(model["vocab"])
        added = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
        vocab.update(added)
        size = max(n_vocab, max(vocab.values()) + 1)
        tokens = [f"[PAD{i}]" for i in range(size)]
        types = [gguf.TokenType.UNUSED] * size
        for t, i in vocab.items():
            tokens[i] = t
            types[i] = gguf.TokenType.NORMAL
        for t, i in added.items():
            types[i] = gguf.TokenType.CONTROL
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
    elif os.path.isfile(sp):
        try:
            import sentencepiece
        except ImportError:
            print("note: sentencepiece not installed; tokenizer not copied", file=sys.stderr)
            return False
        proc = sentencepiece.SentencePieceProcessor(model_file=sp)
        size = max(n_vocab, proc.vocab_size())
        tokens = [f"[PAD{i}]" for i in range(size)]
        scores = [-1000.0] * size
        types = [gguf.TokenType.UNUSED] * size
        for i in range(proc.vocab_size()):
            tokens[i] = proc.id_to_piece(i)
            scores[i] = proc.get_score(i)
            if proc.is_unknown(i):
                types[i] = gguf.TokenType.UNKNOWN
            elif proc.is_control(i):
                types[i] = gguf.TokenType.CONTROL
            elif proc.is_unused(i):
                types[i] = gguf.TokenType.UNUSED
            elif proc.is_byte(i):
                types[i] = gguf.TokenType.BYTE
            else:
                types[i] = gguf.TokenType.NORMAL
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
    else:
        return False

    if size != n_vocab:
        print(f"warning: tokenizer has {size} entries, embedding {n_vocab} rows", file=sys.stderr)
    for key, fn in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id),
                    ("pad_token_id", w.add_pad_token_id)):
        v = cfg.get(key)
        if isinstance(v, list):
            v = v[0] if v else None
        if isinstance(v, int) and v >= 0:
            fn(v)
    if "add_bos_token" in tcfg:
        w.add_add_bos_token(bool(tcfg["add_bos_token"]))
    if isinstance(tcfg.get("chat_template"), str):
        w.add_chat_template(tcfg["chat_template"])
    return True


# --------------------------------------------------------------------------- #
# Conversion                                                                    #
# --------------------------------------------------------------------------- #

LAYER_MAP = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def map_name(hf: str):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    if hf.startswith("model.layers."):
        rest = hf[len("model.layers."):]
        idx, _, tail = rest.partition(".")
        if idx.isdigit() and tail in LAYER_MAP:
            return f"blk.{int(idx)}.{LAYER_MAP[tail]}"
    return None


def encode_tensor(a: np.ndarray, qtype: QT, name: str):
    """Return (array, raw_dtype) for GGUFWriter.add_tensor."""
    if a.ndim == 1 or qtype == QT.F32:
        return np.ascontiguousarray(a, dtype=np.float32), None
    if qtype == QT.F16:
        return np.ascontiguousarray(a, dtype=np.float16), None
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if a.shape[-1] % block:
        print(f"note: {name} row length {a.shape[-1]} is not a multiple of {block}; "
              f"stored F16", file=sys.stderr)
        return np.ascontiguousarray(a, dtype=np.float16), None
    return quantize(np.ascontiguousarray(a, dtype=np.float32), qtype), qtype


def load_config(model_dir: str) -> dict:
    """MODEL_DIR/config.json, checked to be a llama (or bamboo) model; adds the derived
    hyper-parameters under "_hp": arch, n_embd, n_layer, n_ff, n_head, n_head_kv,
    head_dim, act."""
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: {e}")
    archs = cfg.get("architectures") or []
    mtype = cfg.get("model_type")
    if mtype not in (None, "llama", "bamboo") and "LlamaForCausalLM" not in archs:
        sys.exit(f"model_type {mtype!r} is not llama or bamboo")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        sys.exit("attention/mlp biases are not supported")

    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "relu"):
        sys.exit(f"hidden_act {act!r} is not supported (silu or relu)")
    n_embd = int(cfg["hidden_size"])
    n_head = int(cfg["num_attention_heads"])
    cfg["_hp"] = dict(
        arch="bamboo" if mtype == "bamboo" else "llama",
        n_embd=n_embd,
        n_layer=int(cfg["num_hidden_layers"]),
        n_ff=int(cfg["intermediate_size"]),
        n_head=n_head,
        n_head_kv=int(cfg.get("num_key_value_heads") or n_head),
        head_dim=int(cfg.get("head_dim") or n_embd // n_head),
        act=act,
    )
    return cfg


def convert(model_dir: str, outfile: str, outtype: str = "f32", name: str | None = None,
            tokenizer: bool = True, verbose: bool = True, tensor_hook=None,
            extra_tensors=(), extra_kv=None) -> None:
    """Write the GGUF. Hooks for other converters (tools/convert_hf_to_powerinfer.py):
    tensor_hook(gguf_name, array) -> (gguf_name, array) is applied to every tensor
    (after the Q/K permutation, before encoding); extra_tensors, (gguf_name, array)
    pairs, are appended after the model's tensors in that order and encoded the same
    way; extra_kv(writer) adds metadata after the standard keys."""
    cfg = load_config(model_dir)
    hp = cfg["_hp"]
    arch, act = hp["arch"], hp["act"]
    n_embd, n_layer, n_ff = hp["n_embd"], hp["n_layer"], hp["n_ff"]
    n_head, n_head_kv, head_dim = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
    eps = float(cfg.get("rms_norm_eps", 1e-5))
    n_ctx = int(cfg.get("max_position_embeddings", 2048))
    theta, rtype, rfactor = rope_settings(cfg)
    qtype, ftype = OUTTYPES[outtype]

    sd = load_state_dict(model_dir)
    tied = bool(cfg.get("tie_word_embeddings", False)) or "lm_head.weight" not in sd

    w = gguf.GGUFWriter(outfile, arch)
    w.add_name(name or cfg.get("_name_or_path") or os.path.basename(os.path.abspath(model_dir)))
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(eps)
    w.add_rope_freq_base(theta)
    w.add_rope_dimension_count(head_dim)
    if head_dim * n_head != n_embd:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if rtype == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rfactor)
    w.add_file_type(ftype)
    if qtype not in (QT.F32, QT.F16):
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if act == "relu" and arch == "llama":
        w.add_string("powerinfer.ffn_activation", "relu")
    if extra_kv is not None:
        extra_kv(w)

    n_vocab = int(sd["model.embed_tokens.weight"].shape[0])
    w.add_vocab_size(n_vocab)
    if tokenizer and add_tokenizer(w, model_dir, cfg, n_vocab) and verbose:
        print("tokenizer copied", file=sys.stderr)

    # Deterministic order: globals first, then layers in order.
    def order(hf):
        g = map_name(hf) or ""
        if g.startswith("blk."):
            parts = g.split(".")
            return (1, int(parts[1]), list(LAYER_MAP.values()).index(".".join(parts[2:])))
        return (0, ["token_embd.weight", "output_norm.weight", "output.weight"].index(g), 0)

    names = []
    for hf in sd:
        g = map_name(hf)
        if g is None:
            if hf.endswith("rotary_emb.inv_freq"):
                continue
            sys.exit(f"unexpected tensor {hf}")
        if g == "output.weight" and tied:
            continue
        names.append(hf)
    names.sort(key=order)

    expected = 3 - (1 if tied else 0) + 9 * n_layer
    if len(names) != expected:
        sys.exit(f"expected {expected} tensors, found {len(names)}")

    def add(g, a):
        data, raw = encode_tensor(a, qtype, g)
        w.add_tensor(g, data, raw_dtype=raw)
        if verbose:
            print(f"{g:28s} {str(tuple(a.shape)):14s} {(raw or QT(0 if data.dtype == np.float32 else 1)).name}",
                  file=sys.stderr)

    for hf in names:
        g = map_name(hf)
        a = sd[hf]
        if g.endswith("attn_q.weight"):
            a = hf_qk_to_gguf(a, n_head)
        elif g.endswith("attn_k.weight"):
            a = hf_qk_to_gguf(a, n_head_kv)
        if tensor_hook is not None:
            g, a = tensor_hook(g, a)
        add(g, a)
    for g, a in extra_tensors:
        add(g, a)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--outfile", required=True)
    ap.add_argument("--outtype", choices=sorted(OUTTYPES), default="f32")
    ap.add_argument("--name", default=None, help="general.name (default: the directory name)")
    ap.add_argument("--no-tokenizer", action="store_true", help="do not copy a tokenizer")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    convert(args.model_dir, args.outfile, args.outtype, args.name,
            tokenizer=not args.no_tokenizer, verbose=not args.quiet)


if __name__ == "__main__":
    main()
