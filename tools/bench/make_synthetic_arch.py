#!/usr/bin/env python3
"""Write a GGUF file of another architecture family with random weights, for speed benchmarks.

The sibling of make_synthetic_llama.py (whose weight drawing, quantization and
SentencePiece vocabulary it reuses): the same 1B shape as its "1b" preset (TinyLlama:
22 layers, n_embd 2048, 32 heads of 64, 4 KV heads, vocabulary 32000), written with the
tensor names, shapes and metadata keys that llama.cpp's convert_hf_to_gguf.py writes for
the family (tests/fixtures/archs/manifest.json lists them for the converted fixtures),
sized so that every file has the same tensor bytes as the llama file within 0.2%:

    llama       attn_q/k/v, ffn_gate/up/down (SiLU), RMSNorm, untied output (the reference)
    qwen2       llama's shape plus attn_q/k/v biases; NeoX RoPE, base 1e6; BPE vocabulary
    phi3        fused attn_qkv {2048, 2560} and fused ffn_up {2048, 2*5632} (gate rows, then up)
    gemma2      post_attention_norm/post_ffw_norm, GELU, attention and final soft-caps (50,
                30), sliding window 4096 on even layers, embeddings scaled by sqrt(n_embd),
                tied output (llama.cpp reads no output.weight for Gemma 2); 26 layers, as
                llama.cpp knows Gemma 2's attention scale only for 26, 42 or 46 layers
                (2B, 9B, 27B) and aborts on 22, with n_ff 4928 for llama's bytes (the
                file is 0.2% smaller)
    falcon      Falcon-7B layout: one LayerNorm (weight and bias) per layer feeding attention
                and FFN in parallel, fused attn_qkv, plain GELU FFN (no ffn_gate, n_ff 8448
                = 1.5 x 5632 gives llama's FFN bytes); BPE vocabulary; output.weight
                untied (llama.cpp and we take it when present) to keep llama's bytes

    qwen3moe    mixture of experts, not llama's bytes: Qwen3-30B-A3B's layer (n_embd 2048,
                32 heads of 128 and 4 KV heads, per-head q/k norms, 128 experts of 768,
                top 8, renormalised; router F32; untied output; vocabulary 65536, not
                Qwen's 151936: the byte-level BPE writer stops at 65793) at --n-layer
                layers (default 12 of its 48, ~7.6 B weights, 4.3 GB in Q4_0; 48 is the
                real 30B); --n-expert, --n-expert-used, --n-ff-exp change the experts

Same-bytes shapes read the same weight bytes per decoded token, except Gemma 2: its tied
output is the embedding table, so a decode step reads the whole file (llama reads all but
token_embd's 65.5 M weights, 6% of the file, of which it only gathers one row).

Weights are N(0, std) with a fixed seed per tensor (the same stream as the llama writer
for the same tensor index), norm weights 1.0, LayerNorm biases 0, attention and other
biases N(0, std), all 1-D tensors F32.  Vocabularies: SentencePiece-style ("llama":
<unk>, <s>, </s>, 256 byte tokens, filler pieces) for phi3 and gemma2, as their
converters write; byte-level BPE ("gpt2": 256 byte tokens, then tokens that are merges
of two of them, each with its merge, and <|endoftext|> as BOS/EOS) for qwen2 and falcon,
with tokenizer.ggml.pre "qwen2" / "falcon".

Examples:
    make_synthetic_arch.py --arch gemma2 --type q4_0 -o /tmp/gemma2-1b-q4_0.gguf
    make_synthetic_arch.py --arch falcon --type q8_0 -o /tmp/falcon-1b-q8_0.gguf
    make_synthetic_arch.py --arch qwen2 --preset tiny --type f16 -o /tmp/qwen2-tiny.gguf
    make_synthetic_arch.py --arch phi3 --n-layer 2 -o /tmp/phi3-2l.gguf
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_synthetic_llama as base  # noqa: E402  (same directory)

gguf = base.gguf
QT = base.QT

ARCHS = ("llama", "qwen2", "phi3", "gemma2", "falcon", "qwen3moe")

# how each family changes the preset's n_ff so that its bytes match llama's
FF_SCALE = {"llama": 1.0, "qwen2": 1.0, "phi3": 1.0, "falcon": 1.5, "gemma2": None,
            "qwen3moe": None}


def n_weights(arch, h):
    return sum(int(np.prod(shape)) for _, shape, kind in tensor_plan(arch, h) if kind == "w")


def family_shape(arch, h):
    """The preset h adjusted for the family: n_ff for equal bytes, RoPE base, eps."""
    h = dict(h)
    f = h["n_ff"]
    if arch == "falcon":
        h["n_ff"] = int(f * 3 // 2)
    elif arch == "gemma2":
        # llama.cpp takes Gemma 2's attention scale from its size class, which it knows
        # only by the layer count (26: 2B, 42: 9B, 46: 27B) and aborts on others: 26
        # layers, and the n_ff (a multiple of 32: ffn_down's Q4_0/Q8_0 rows) whose 2-D
        # weights come nearest llama's with the tied output
        target = n_weights("llama", h)
        h["n_layer"] = 26 if h["n_layer"] == 22 else h["n_layer"]
        h["swa"] = 4096
        h["attn_softcap"], h["final_softcap"] = 50.0, 30.0
        best = None
        for nf in range(32, 8 * f, 32):
            h["n_ff"] = nf
            d = abs(n_weights(arch, h) - target)
            if best is None or d < best[0]:
                best = (d, nf)
        h["n_ff"] = best[1]
    if arch == "qwen3moe":
        h.update(n_embd=2048, n_head=32, n_head_kv=4, head_dim=128, n_vocab=65536,
                 n_ctx=4096, n_expert=128, n_expert_used=8, n_ff_exp=768, n_ff=6144)
        h["n_layer"] = 12 if h["n_layer"] == 22 else h["n_layer"]
    if arch in ("qwen2", "qwen3moe"):
        h["rope_base"], h["rms_eps"] = 1000000.0, 1e-6
    if arch == "gemma2":
        h["rms_eps"] = 1e-6
    return h


def tensor_plan(arch, h):
    """(name, numpy shape [rows, cols] or [n], kind) in file order; kind is "w" (a 2-D
    weight), "norm" (1.0), "zero" (a LayerNorm bias) or "bias" (random, F32)."""
    hd = h.get("head_dim", h["n_embd"] // h["n_head"])
    n_q, n_kv = hd * h["n_head"], hd * h["n_head_kv"]
    e, f, v = h["n_embd"], h["n_ff"], h["n_vocab"]
    plan = [("token_embd.weight", (v, e), "w")]
    if arch == "qwen3moe":
        x, fe = h["n_expert"], h["n_ff_exp"]
        for i in range(h["n_layer"]):
            b = f"blk.{i}."
            plan += [(b + "attn_norm.weight", (e,), "norm"),
                     (b + "attn_q.weight", (n_q, e), "w"), (b + "attn_k.weight", (n_kv, e), "w"),
                     (b + "attn_v.weight", (n_kv, e), "w"),
                     (b + "attn_q_norm.weight", (hd,), "norm"),
                     (b + "attn_k_norm.weight", (hd,), "norm"),
                     (b + "attn_output.weight", (e, n_q), "w"),
                     (b + "ffn_norm.weight", (e,), "norm"),
                     (b + "ffn_gate_inp.weight", (x, e), "router"),
                     (b + "ffn_gate_exps.weight", (x, fe, e), "w"),
                     (b + "ffn_up_exps.weight", (x, fe, e), "w"),
                     (b + "ffn_down_exps.weight", (x, e, fe), "w")]
        return plan + [("output_norm.weight", (e,), "norm"), ("output.weight", (v, e), "w")]
    for i in range(h["n_layer"]):
        b = f"blk.{i}."
        if arch == "falcon":
            plan += [(b + "attn_norm.weight", (e,), "norm"), (b + "attn_norm.bias", (e,), "zero")]
        else:
            plan += [(b + "attn_norm.weight", (e,), "norm")]
        if arch in ("phi3", "falcon"):
            plan += [(b + "attn_qkv.weight", (n_q + 2 * n_kv, e), "w")]
        else:
            plan += [(b + "attn_q.weight", (n_q, e), "w"), (b + "attn_k.weight", (n_kv, e), "w"),
                     (b + "attn_v.weight", (n_kv, e), "w")]
        if arch == "qwen2":
            plan += [(b + "attn_q.bias", (n_q,), "bias"), (b + "attn_k.bias", (n_kv,), "bias"),
                     (b + "attn_v.bias", (n_kv,), "bias")]
        plan += [(b + "attn_output.weight", (e, n_q), "w")]
        if arch == "gemma2":
            plan += [(b + "post_attention_norm.weight", (e,), "norm")]
        if arch != "falcon":
            plan += [(b + "ffn_norm.weight", (e,), "norm")]
        if arch == "phi3":
            plan += [(b + "ffn_up.weight", (2 * f, e), "w")]
        elif arch == "falcon":
            plan += [(b + "ffn_up.weight", (f, e), "w")]
        else:
            plan += [(b + "ffn_gate.weight", (f, e), "w"), (b + "ffn_up.weight", (f, e), "w")]
        plan += [(b + "ffn_down.weight", (e, f), "w")]
        if arch == "gemma2":
            plan += [(b + "post_ffw_norm.weight", (e,), "norm")]
    plan += [("output_norm.weight", (e,), "norm")]
    if arch == "falcon":
        plan += [("output_norm.bias", (e,), "zero")]
    if arch != "gemma2":
        plan += [("output.weight", (v, e), "w")]
    return plan


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: byte -> printable character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def add_bpe_vocab(w, n_vocab, pre):
    """Byte-level BPE: 256 byte tokens, tokens made of two byte characters (each with its
    merge, most frequent first: letters and the space marker before the rest), and
    <|endoftext|> last as BOS and EOS."""
    if n_vocab < 256 + 2:
        sys.exit(f"n_vocab must be at least 258 for a BPE vocabulary, got {n_vocab}")
    chars = [bytes_to_unicode()[b] for b in range(256)]
    order = sorted(chars, key=lambda c: (not c.isalpha() and c != "\u0120", ord(c)))
    toks, merges = list(chars), []
    n_pairs = n_vocab - 256 - 1
    for a in order:
        for b in order:
            if len(merges) == n_pairs:
                break
            merges.append(f"{a} {b}")
            toks.append(a + b)
        if len(merges) == n_pairs:
            break
    if len(merges) < n_pairs:
        sys.exit(f"n_vocab {n_vocab} is above the {256 + 256 * 256 + 1} a two-byte BPE vocabulary has")
    eot = len(toks)
    toks.append("<|endoftext|>")
    types = [gguf.TokenType.NORMAL] * eot + [gguf.TokenType.CONTROL]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(toks)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges(merges)
    w.add_bos_token_id(eot)
    w.add_eos_token_id(eot)


def add_keys(w, arch, name, h, ftype):
    """The family's hyper-parameters as its converter writes them, the file type and the
    vocabulary."""
    w.add_name(name)
    w.add_context_length(h["n_ctx"])
    w.add_embedding_length(h["n_embd"])
    w.add_block_count(h["n_layer"])
    w.add_feed_forward_length(h["n_ff"])
    w.add_head_count(h["n_head"])
    w.add_head_count_kv(h["n_head_kv"])
    hd = h["n_embd"] // h["n_head"]
    if arch == "falcon":
        w.add_tensor_data_layout("jploski")
        w.add_layer_norm_eps(h["rms_eps"])
    else:
        w.add_layer_norm_rms_eps(h["rms_eps"])
    if arch in ("llama", "phi3"):
        w.add_rope_dimension_count(hd)
    if arch in ("llama", "qwen2", "phi3", "qwen3moe"):
        w.add_rope_freq_base(h["rope_base"])
    if arch == "qwen3moe":
        w.add_key_length(h["head_dim"])
        w.add_value_length(h["head_dim"])
        w.add_expert_count(h["n_expert"])
        w.add_expert_used_count(h["n_expert_used"])
        w.add_expert_feed_forward_length(h["n_ff_exp"])
    if arch == "phi3":
        w.add_rope_scaling_orig_ctx_len(h["n_ctx"])
        w.add_sliding_window(0)
    if arch == "gemma2":
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_attn_logit_softcapping(h["attn_softcap"])
        w.add_final_logit_softcapping(h["final_softcap"])
        w.add_sliding_window(h["swa"])
    if arch == "llama":
        w.add_vocab_size(h["n_vocab"])
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if arch in ("qwen2", "falcon", "qwen3moe"):
        add_bpe_vocab(w, h["n_vocab"], "qwen2" if arch == "qwen3moe" else arch)
    else:
        # llama.cpp looks "<|endoftext|>" up in a model named like Phi-3, and the real
        # Phi-3 vocabulary has it (id 32000)
        base.add_vocab(w, h["n_vocab"], ("<|endoftext|>",) if arch == "phi3" else ())
        if arch == "gemma2":
            w.add_add_space_prefix(False)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True, help="output .gguf path")
    ap.add_argument("--arch", choices=ARCHS, required=True)
    ap.add_argument("--preset", choices=sorted(base.PRESETS), default="1b",
                    help="llama shape to match (default 1b); the family adjusts n_ff")
    ap.add_argument("--type", choices=sorted(base.TYPES), default="q4_0",
                    help="type of every 2-D weight (default q4_0)")
    for k in ("n_embd", "n_layer", "n_ff", "n_head", "n_head_kv", "n_vocab", "n_ctx"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None,
                        help=f"override {k} (n_ff: after the family's adjustment)")
    for k in ("n_expert", "n_expert_used", "n_ff_exp"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None,
                        help=f"qwen3moe: override {k}")
    ap.add_argument("--std", type=float, default=0.02, help="weight standard deviation (default 0.02)")
    ap.add_argument("--seed", type=int, default=1234, help="random seed (default 1234)")
    ap.add_argument("--name", default=None, help="general.name (default synthetic-ARCH-PRESET)")
    a = ap.parse_args()

    h = dict(base.PRESETS[a.preset])
    for k in ("n_embd", "n_layer", "n_head", "n_head_kv", "n_vocab", "n_ctx"):
        if getattr(a, k) is not None:
            h[k] = getattr(a, k)
    h = family_shape(a.arch, h)
    for k in ("n_embd", "n_head", "n_head_kv", "n_vocab", "n_ctx"):  # over the family's too
        if getattr(a, k) is not None:
            h[k] = getattr(a, k)
    if a.n_ff is not None:
        h["n_ff"] = a.n_ff
    for k in ("n_expert", "n_expert_used", "n_ff_exp"):
        if getattr(a, k) is not None:
            if a.arch != "qwen3moe":
                sys.exit(f"--{k.replace('_', '-')} is for --arch qwen3moe")
            h[k] = getattr(a, k)
    if (h["n_embd"] % h["n_head"] and "head_dim" not in h) or h["n_head"] % h["n_head_kv"]:
        sys.exit("n_embd must be a multiple of n_head, and n_head a multiple of n_head_kv")
    qtype, ftype = base.TYPES[a.type]
    plan = tensor_plan(a.arch, h)
    for name, shape, kind in plan:
        if kind == "w" and shape[-1] % gguf.GGML_QUANT_SIZES[qtype][0]:
            sys.exit(f"{name}: row length {shape[-1]} is not a multiple of the {qtype.name} block size")

    t_start = time.time()
    w = gguf.GGUFWriter(a.output, a.arch)
    add_keys(w, a.arch, a.name or f"synthetic-{a.arch}-{a.preset}", h, ftype)
    total = 0
    for name, shape, kind in plan:
        qt = qtype if kind == "w" else QT.F32  # routers stay F32, as the converter writes them
        nb = base.nbytes_of(shape, qt)
        total += nb
        dt = {QT.F32: np.float32, QT.F16: np.float16}.get(qt, np.uint8)
        w.add_tensor_info(name, base.byte_shape(shape, qt), np.dtype(dt), nb,
                          raw_dtype=None if qt in (QT.F32, QT.F16) else qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    n_params = 0
    for idx, (name, shape, kind) in enumerate(plan):
        n_params += int(np.prod(shape))
        if kind == "norm":
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
            continue
        if kind == "zero":
            w.write_tensor_data(np.zeros(shape, dtype=np.float32))
            continue
        rng = np.random.default_rng([a.seed, idx])  # per-tensor stream: independent of order
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(a.std)
        w.write_tensor_data(x if kind in ("bias", "router") else base.encode(x, qtype))
        del x
    w.close()
    dt = time.time() - t_start
    print(f"wrote {a.output}: {a.arch}, {a.preset}-based shape {h}, {a.type}, "
          f"{n_params / 1e6:.1f} M params, {total / 2**20:.1f} MiB of tensor data, {dt:.1f} s")


if __name__ == "__main__":
    main()
