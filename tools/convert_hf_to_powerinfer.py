#!/usr/bin/env python3
"""Convert a Hugging Face Llama or Bamboo checkpoint plus PowerInfer predictors to a
PowerInfer GGUF (magic "PWRI"), laid out as PowerInfer's own converter does.

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
optional and ignored): the same as tools/convert_hf_to_gguf.py.

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


def convert(model_dir: str, pred_dir: str, outfile: str, outtype: str = "f32",
            name: str | None = None, tokenizer: bool = True, verbose: bool = True) -> None:
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
