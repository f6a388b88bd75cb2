#!/usr/bin/env python3
"""Convert a Hugging Face Llama, Bamboo, Falcon or OPT checkpoint plus PowerInfer
predictors to a PowerInfer GGUF (magic "PWRI"), laid out as PowerInfer's own converters do.

Usage:
    python3 tools/convert_hf_to_powerinfer.py MODEL_DIR PREDICTOR_DIR --outfile OUT.gguf
                                             [--outtype f32|f16|q8_0|q4_0|q4_1]
                                             [--name NAME] [--no-tokenizer] [--dense]

MODEL_DIR is read exactly as tools/convert_hf_to_gguf.py reads it (config.json plus
safetensors or pytorch_model*.bin; the architecture is "bamboo" when config.json has
model_type "bamboo", else "llama"), and the same keys are written.

PREDICTOR_DIR holds model_0.pt ... model_{L-1}.pt, one per transformer layer: PyTorch
state dicts with exactly the keys fc1.weight [R, n_embd] and fc2.weight [n_ff, R] (no
biases; the rank R may differ between layers), and optionally config.json whose
"sparse_threshold" (a number) becomes the f32 key powerinfer.sparse_threshold. The .pt
files are read with tools/pt_reader.py (a restricted unpickler: no torch needed, and no
code in the file is run).

What is written, compared with the dense converter:
  - every blk.N.ffn_down.weight is replaced, in place, by blk.N.ffn_down_t.weight, the
    transpose of HF down_proj: GGUF shape {n_embd, n_ff}, row r = neuron r's output
    vector (so the rows of the active neurons are contiguous);
  - blk.N.fc1.weight {n_embd, R_N} and blk.N.fc2.weight {R_N, n_ff} for every layer,
    after all other tensors, in layer order (fc1 then fc2);
  - powerinfer.sparse_threshold (f32) when the predictor config has sparse_threshold;
  - the first four bytes of the file are "PWRI" instead of "GGUF".
Predictors are encoded in --outtype like the other 2-D tensors (F16 fallback when a
row length is not a multiple of the quantization block).

--dense writes an ordinary GGUF from the same MODEL_DIR instead (PREDICTOR_DIR is then
optional and ignored): the same as tools/convert_hf_to_gguf.py for llama and bamboo.

Falcon (config.json architectures FalconForCausalLM / RWForCausalLM or model_type
falcon) and OPT (OPTForCausalLM / model_type opt) are written here, as PowerInfer's
convert-hf-to-powerinfer-gguf.py writes them (the same tensor names and layouts):
  falcon  keys falcon.{context_length, embedding_length, block_count,
          feed_forward_length, attention.head_count, attention.head_count_kv,
          attention.layer_norm_epsilon, rope.freq_base}, falcon.tensor_data_layout
          "jploski"; tensors token_embd, output_norm.{weight,bias}, output (always, also
          when tied), blk.N.attn_norm.{weight,bias} (HF input_layernorm, or ln_mlp on
          the new decoder architecture), blk.N.attn_norm_2.{weight,bias} (ln_attn, new
          decoder architecture with two norms only), attn_qkv (HF query_key_value with
          its rows regrouped from per-KV-group [q heads, k, v] to [all q | all k | all
          v]), attn_output, ffn_up, ffn_down_t (dense: ffn_down). Both layouts: Falcon-7B
          (one LayerNorm, multi-query) and Falcon-40B (new_decoder_architecture: ln_attn +
          ln_mlp, grouped KV). Refused: ALiBi, biases, sequential (parallel_attn false)
          blocks, and, in PWRI files, an activation other than relu (PowerInfer's sparse
          FFN is relu(up x)); a dense file of a relu Falcon is refused too (a dense falcon
          GGUF runs GELU in every engine).
  opt     keys opt.{context_length (max_position_embeddings), embedding_length,
          block_count, feed_forward_length (ffn_dim), attention.head_count,
          attention.head_count_kv, attention.layer_norm_epsilon = 1e-5}; tensors
          token_embd, position_embd (HF embed_positions as it is: {n_embd,
          max_position_embeddings + 2}, position p at row p + 2), output_norm.{weight,
          bias}, output only when not tied, blk.N.attn_norm, attn_q, attn_k, attn_v,
          attn_output, ffn_norm, ffn_up (each .weight and .bias), ffn_down_t.weight and
          ffn_down_t.bias (PowerInfer's name for fc2's bias; dense: ffn_down.{weight,
          bias}). PowerInfer's converter writes no epsilon (its runtime then uses 0);
          transformers' OPT uses nn.LayerNorm's 1e-5, which is written here. Refused:
          post-LN (do_layer_norm_before false, OPT-350m), project_in/project_out
          (word_embed_proj_dim != hidden_size), no final layer norm, LayerNorms without
          weights, and activations other than relu.

Errors (missing or extra predictor layers, wrong keys or shapes) exit with status 1
and a message naming the file, layer and tensor, before anything is written.
"""

import argparse
import json
import math
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import convert_hf_to_gguf as conv  # noqa: E402
import pt_reader  # noqa: E402


def load_predictors(pred_dir: str, n_layer: int, n_embd: int, n_ff: int):
    """[(fc1 [R, n_embd], fc2 [n_ff, R]) per layer] as float32, validated."""
    if not os.path.isdir(pred_dir):
        sys.exit(f"{pred_dir}: predictor directory not found")
    present = set()
    for fn in os.listdir(pred_dir):
        m = re.fullmatch(r"model_(\d+)\.pt", fn)
        if m:
            present.add(int(m.group(1)))
    missing = [i for i in range(n_layer) if i not in present]
    if missing:
        sys.exit(f"{pred_dir}: predictor for layer {missing[0]} is missing "
                 f"(model_{missing[0]}.pt); the model has {n_layer} layers, so "
                 f"model_0.pt .. model_{n_layer - 1}.pt are needed")
    extra = sorted(i for i in present if i >= n_layer)
    if extra:
        sys.exit(f"{pred_dir}: model_{extra[0]}.pt is a predictor for layer {extra[0]}, "
                 f"but the model has only {n_layer} layers")
    out = []
    for il in range(n_layer):
        path = os.path.join(pred_dir, f"model_{il}.pt")
        try:
            sd = pt_reader.load(path)
        except (OSError, ValueError) as e:  # the reader's message names the file
            sys.exit(f"cannot read the layer {il} predictor: {e}")
        if not isinstance(sd, dict):
            sys.exit(f"{path}: layer {il} predictor is a {type(sd).__name__}, not a state "
                     f"dict with fc1.weight and fc2.weight")
        keys = set(sd)
        if keys != {"fc1.weight", "fc2.weight"}:
            unexpected = sorted(keys - {"fc1.weight", "fc2.weight"})
            lacking = sorted({"fc1.weight", "fc2.weight"} - keys)
            what = []
            if lacking:
                what.append("lacks " + ", ".join(lacking))
            if unexpected:
                what.append("has unexpected " + ", ".join(unexpected))
            sys.exit(f"{path}: layer {il} predictor {' and '.join(what)} (expected exactly "
                     f"fc1.weight and fc2.weight, no biases)")
        fc1 = np.asarray(sd["fc1.weight"], dtype=np.float32)
        fc2 = np.asarray(sd["fc2.weight"], dtype=np.float32)
        if fc1.ndim != 2 or fc1.shape[1] != n_embd or fc1.shape[0] < 1:
            sys.exit(f"{path}: layer {il} fc1.weight has shape {list(fc1.shape)}, expected "
                     f"[R, {n_embd}] (R = predictor rank, n_embd = {n_embd})")
        rank = fc1.shape[0]
        if fc2.ndim != 2 or fc2.shape[0] != n_ff:
            sys.exit(f"{path}: layer {il} fc2.weight has shape {list(fc2.shape)}, expected "
                     f"[{n_ff}, {rank}] (n_ff = {n_ff} rows)")
        if fc2.shape[1] != rank:
            sys.exit(f"{path}: layer {il} fc2.weight has shape {list(fc2.shape)}: its rank "
                     f"{fc2.shape[1]} differs from fc1.weight's rank {rank} "
                     f"(fc1.weight {list(fc1.shape)})")
        for nm, a in (("fc1.weight", fc1), ("fc2.weight", fc2)):
            if not np.isfinite(a).all():
                sys.exit(f"{path}: layer {il} {nm} has non-finite values")
        out.append((fc1, fc2))
    return out


def load_threshold(pred_dir: str):
    """sparse_threshold from PREDICTOR_DIR/config.json, or None."""
    path = os.path.join(pred_dir, "config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: {e}")
    if not isinstance(cfg, dict) or "sparse_threshold" not in cfg:
        return None
    v = cfg["sparse_threshold"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        sys.exit(f"{path}: sparse_threshold must be a finite number, got {v!r}")
    return float(v)


def set_magic(path: str, magic: bytes) -> None:
    with open(path, "r+b") as f:
        head = f.read(4)
        if head != b"GGUF":
            sys.exit(f"{path}: expected the writer's GGUF magic, found {head!r}")
        f.seek(0)
        f.write(magic)


def family(model_dir: str):
    """"falcon", "opt", or None (llama/bamboo: convert_hf_to_gguf.py's reader)."""
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: {e}")
    archs = cfg.get("architectures") or []
    mtype = cfg.get("model_type")
    if mtype in ("falcon", "RefinedWeb", "RefinedWebModel") or \
            any(a in ("FalconForCausalLM", "RWForCausalLM") for a in archs):
        return "falcon"
    if mtype == "opt" or "OPTForCausalLM" in archs:
        return "opt"
    return None


def falcon_config(cfg: dict, sparse: bool) -> dict:
    def get(*keys, default=None):
        for k in keys:
            if cfg.get(k) is not None:
                return cfg[k]
        return default
    if get("alibi", default=False):
        sys.exit("Falcon with ALiBi positions is not supported (RoPE Falcon is)")
    if get("bias", default=False):
        sys.exit("Falcon with linear biases (bias: true) is not supported")
    new_arch = bool(get("new_decoder_architecture", default=False))
    if not new_arch and not get("parallel_attn", default=True):
        sys.exit("Falcon with sequential attention and MLP (parallel_attn: false) is not "
                 "supported")
    act = get("activation", default="gelu")
    if sparse and act != "relu":
        sys.exit(f"activation {act!r}: a PowerInfer Falcon file runs relu(up x), so the "
                 f"model must be a ReLU Falcon (activation \"relu\")")
    if not sparse and act not in ("gelu",):
        sys.exit(f"activation {act!r}: a dense falcon GGUF runs GELU; convert a ReLU Falcon "
                 f"with its predictors to a PowerInfer file instead")
    n_embd = int(get("hidden_size", "n_embed"))
    n_head = int(get("num_attention_heads", "n_head"))
    if new_arch:
        n_kv = int(get("num_kv_heads", "n_head_kv", default=n_head))
    elif get("multi_query", default=True):
        n_kv = 1
    else:
        n_kv = n_head
    n_ln = get("num_ln_in_parallel_attn", default=2 if new_arch else 1)
    return dict(arch="falcon", n_embd=n_embd, n_layer=int(get("num_hidden_layers", "n_layer")),
                n_ff=int(get("ffn_hidden_size", default=4 * n_embd)), n_head=n_head,
                n_head_kv=n_kv, head_dim=n_embd // n_head, new_arch=new_arch,
                two_norms=bool(new_arch and n_ln == 2),
                eps=float(get("layer_norm_epsilon", default=1e-5)),
                n_ctx=int(get("max_position_embeddings", default=2048)),
                theta=float(get("rope_theta", default=10000.0)))


def opt_config(cfg: dict) -> dict:
    n_embd = int(cfg["hidden_size"])
    if not cfg.get("do_layer_norm_before", True):
        sys.exit("OPT with post-LN blocks (do_layer_norm_before: false, OPT-350m) is not "
                 "supported")
    if int(cfg.get("word_embed_proj_dim", n_embd)) != n_embd:
        sys.exit("OPT with project_in/project_out (word_embed_proj_dim != hidden_size, "
                 "OPT-350m) is not supported")
    if cfg.get("_remove_final_layer_norm", False):
        sys.exit("OPT without its final layer norm is not supported")
    if not cfg.get("layer_norm_elementwise_affine", True):
        sys.exit("OPT with LayerNorms without weights is not supported")
    act = cfg.get("activation_function", "relu")
    if act != "relu":
        sys.exit(f"activation_function {act!r} is not supported (relu)")
    n_head = int(cfg["num_attention_heads"])
    return dict(arch="opt", n_embd=n_embd, n_layer=int(cfg["num_hidden_layers"]),
                n_ff=int(cfg["ffn_dim"]), n_head=n_head, n_head_kv=n_head,
                head_dim=n_embd // n_head, eps=1e-5,
                n_ctx=int(cfg.get("max_position_embeddings", 2048)),
                bias=bool(cfg.get("enable_bias", True)))


def falcon_qkv(a: np.ndarray, hp: dict) -> np.ndarray:
    """HF query_key_value rows [q heads | k | v] in the order PowerInfer's ("jploski")
    layout and ours read: all q heads, then all k heads, then all v heads."""
    H, HK, D = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
    E = a.shape[1]
    if hp["new_arch"]:  # per KV group: H/HK q heads, its k head, its v head
        g = a.reshape(HK, H // HK + 2, D, E)
        q, k, v = g[:, :-2], g[:, -2], g[:, -1]
    elif HK == 1:        # multi-query: already q heads, k, v
        return a
    else:                # per head: q, k, v interleaved
        g = a.reshape(H, 3, D, E)
        q, k, v = g[:, 0], g[:, 1], g[:, 2]
    return np.concatenate([q.reshape(-1, E), k.reshape(-1, E), v.reshape(-1, E)], axis=0)


def convert_other(fam: str, model_dir: str, pred_dir: str | None, outfile: str,
                  outtype: str = "f32", name: str | None = None, tokenizer: bool = True,
                  verbose: bool = True) -> None:
    """Falcon or OPT to PWRI (pred_dir given) or to a dense GGUF (pred_dir None)."""
    import gguf
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    sparse = pred_dir is not None
    hp = falcon_config(cfg, sparse) if fam == "falcon" else opt_config(cfg)
    E, L, F = hp["n_embd"], hp["n_layer"], hp["n_ff"]
    if hp["head_dim"] * hp["n_head"] != E or hp["n_head"] % hp["n_head_kv"]:
        sys.exit(f"hidden_size {E} and {hp['n_head']} heads / {hp['n_head_kv']} KV heads do "
                 f"not divide")
    preds = load_predictors(pred_dir, L, E, F) if sparse else None
    threshold = load_threshold(pred_dir) if sparse else None
    qtype, ftype = conv.OUTTYPES[outtype]
    sd = {k: np.asarray(v, dtype=np.float32) for k, v in conv.load_state_dict(model_dir).items()}
    used = set()

    def take(k):
        if k not in sd:
            sys.exit(f"{model_dir}: tensor {k} is missing")
        used.add(k)
        return sd[k]

    out = []  # (gguf name, array)
    if fam == "falcon":
        pre = "transformer."
        emb = take(pre + "word_embeddings.weight")
        out += [("token_embd.weight", emb), ("output_norm.weight", take(pre + "ln_f.weight")),
                ("output_norm.bias", take(pre + "ln_f.bias"))]
        lm = sd.get("lm_head.weight")
        if lm is not None:
            used.add("lm_head.weight")
        out.append(("output.weight", emb if lm is None else lm))
        for il in range(L):
            b = f"{pre}h.{il}."
            if hp["two_norms"]:
                norms = [("attn_norm", "ln_mlp"), ("attn_norm_2", "ln_attn")]
            else:
                norms = [("attn_norm", "input_layernorm")]
            for g, h in norms:
                out += [(f"blk.{il}.{g}.weight", take(b + h + ".weight")),
                        (f"blk.{il}.{g}.bias", take(b + h + ".bias"))]
            out += [(f"blk.{il}.attn_qkv.weight",
                     falcon_qkv(take(b + "self_attention.query_key_value.weight"), hp)),
                    (f"blk.{il}.attn_output.weight", take(b + "self_attention.dense.weight")),
                    (f"blk.{il}.ffn_up.weight", take(b + "mlp.dense_h_to_4h.weight"))]
            down = take(b + "mlp.dense_4h_to_h.weight")  # [E, F]
            out.append((f"blk.{il}.ffn_down_t.weight", np.ascontiguousarray(down.T)) if sparse
                       else (f"blk.{il}.ffn_down.weight", down))
            if sparse:
                out += [(f"blk.{il}.fc1.weight", preds[il][0]),
                        (f"blk.{il}.fc2.weight", preds[il][1])]
    else:
        pre = next((p for p in ("model.decoder.", "decoder.") if p + "embed_tokens.weight" in sd),
                   "model.decoder.")
        emb = take(pre + "embed_tokens.weight")
        pos = take(pre + "embed_positions.weight")
        if pos.shape != (hp["n_ctx"] + 2, E):
            sys.exit(f"embed_positions.weight has shape {list(pos.shape)}, expected "
                     f"[{hp['n_ctx'] + 2}, {E}] (max_position_embeddings + OPT's offset 2)")
        out += [("token_embd.weight", emb), ("position_embd.weight", pos),
                ("output_norm.weight", take(pre + "final_layer_norm.weight")),
                ("output_norm.bias", take(pre + "final_layer_norm.bias"))]
        lm = sd.get("lm_head.weight")
        if lm is not None:
            used.add("lm_head.weight")
            if not np.array_equal(lm, emb):
                out.append(("output.weight", lm))
        for il in range(L):
            b = f"{pre}layers.{il}."
            parts = [("attn_norm", "self_attn_layer_norm"), ("attn_q", "self_attn.q_proj"),
                     ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
                     ("attn_output", "self_attn.out_proj"), ("ffn_norm", "final_layer_norm"),
                     ("ffn_up", "fc1")]
            for g, h in parts:
                out.append((f"blk.{il}.{g}.weight", take(b + h + ".weight")))
                if hp.get("bias", True) or g.endswith("norm"):
                    out.append((f"blk.{il}.{g}.bias", take(b + h + ".bias")))
            down = take(b + "fc2.weight")
            dn = "ffn_down_t" if sparse else "ffn_down"
            out.append((f"blk.{il}.{dn}.weight", np.ascontiguousarray(down.T) if sparse else down))
            if hp.get("bias", True):
                out.append((f"blk.{il}.{dn}.bias", take(b + "fc2.bias")))
            if sparse:
                out += [(f"blk.{il}.fc1.weight", preds[il][0]),
                        (f"blk.{il}.fc2.weight", preds[il][1])]
    left = sorted(k for k in sd if k not in used and not k.endswith("rotary_emb.inv_freq"))
    if left:
        sys.exit(f"{model_dir}: tensor {left[0]} is not converted ({len(left)} such)")

    arch = hp["arch"]
    w = gguf.GGUFWriter(outfile, arch)
    w.add_name(name or os.path.basename(os.path.abspath(model_dir)))
    w.add_context_length(hp["n_ctx"])
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(hp["n_head"])
    w.add_head_count_kv(hp["n_head_kv"])
    w.add_layer_norm_eps(hp["eps"])
    if fam == "falcon":
        w.add_rope_freq_base(hp["theta"])
        w.add_string(f"{arch}.tensor_data_layout", "jploski")
    w.add_file_type(ftype)
    if qtype not in (conv.QT.F32, conv.QT.F16):
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if threshold is not None:
        w.add_float32("powerinfer.sparse_threshold", threshold)
    n_vocab = int(emb.shape[0])
    w.add_vocab_size(n_vocab)
    if tokenizer and conv.add_tokenizer(w, model_dir, cfg, n_vocab) and verbose:
        print("tokenizer copied", file=sys.stderr)
    for g, a in out:
        data, raw = conv.encode_tensor(a, qtype, g)
        w.add_tensor(g, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if sparse:
        set_magic(outfile, b"PWRI")
    if verbose:
        print(f"wrote {outfile}: {'PWRI' if sparse else 'GGUF'}, arch {arch}, {L} layers, "
              f"{len(out)} tensors", file=sys.stderr)


def convert(model_dir: str, pred_dir: str, outfile: str, outtype: str = "f32",
            name: str | None = None, tokenizer: bool = True, verbose: bool = True) -> None:
    fam = family(model_dir)
    if fam is not None:
        return convert_other(fam, model_dir, pred_dir, outfile, outtype, name, tokenizer,
                             verbose)
    cfg = conv.load_config(model_dir)
    hp = cfg["_hp"]
    preds = load_predictors(pred_dir, hp["n_layer"], hp["n_embd"], hp["n_ff"])
    threshold = load_threshold(pred_dir)

    def transpose_down(g, a):
        if g.endswith(".ffn_down.weight"):
            # HF down_proj [n_embd, n_ff] -> [n_ff, n_embd]: GGUF {n_embd, n_ff}.
            return g[:-len("ffn_down.weight")] + "ffn_down_t.weight", np.ascontiguousarray(a.T)
        return g, a

    def kv(w):
        if threshold is not None:
            w.add_float32("powerinfer.sparse_threshold", threshold)

    extra = []
    for il, (fc1, fc2) in enumerate(preds):
        extra.append((f"blk.{il}.fc1.weight", fc1))
        extra.append((f"blk.{il}.fc2.weight", fc2))
    conv.convert(model_dir, outfile, outtype, name, tokenizer=tokenizer, verbose=verbose,
                 tensor_hook=transpose_down, extra_tensors=extra, extra_kv=kv)
    set_magic(outfile, b"PWRI")
    if verbose:
        ranks = [fc1.shape[0] for fc1, _ in preds]
        print(f"wrote {outfile}: PWRI, arch {hp['arch']}, {hp['n_layer']} layers, "
              f"predictor ranks {ranks}, threshold "
              f"{'(none: 0)' if threshold is None else threshold}", file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", help="Hugging Face model directory (config.json + weights)")
    ap.add_argument("predictor_dir", nargs="?",
                    help="PowerInfer predictor directory (model_N.pt [+ config.json])")
    ap.add_argument("--outfile", required=True)
    ap.add_argument("--outtype", choices=sorted(conv.OUTTYPES), default="f32")
    ap.add_argument("--name", default=None, help="general.name (default: the directory name)")
    ap.add_argument("--no-tokenizer", action="store_true", help="do not copy a tokenizer")
    ap.add_argument("--dense", action="store_true",
                    help="write an ordinary dense GGUF (no predictors, ffn_down kept)")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.dense and family(args.model_dir) is not None:
        convert_other(family(args.model_dir), args.model_dir, None, args.outfile,
                      args.outtype, args.name, tokenizer=not args.no_tokenizer,
                      verbose=not args.quiet)
        return
    if args.dense:
        conv.convert(args.model_dir, args.outfile, args.outtype, args.name,
                     tokenizer=not args.no_tokenizer, verbose=not args.quiet)
        return
    if args.predictor_dir is None:
        ap.error("PREDICTOR_DIR is required (or --dense)")
    convert(args.model_dir, args.predictor_dir, args.outfile, args.outtype, args.name,
            tokenizer=not args.no_tokenizer, verbose=not args.quiet)


if __name__ == "__main__":
    main()
