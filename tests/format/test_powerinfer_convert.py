#!/usr/bin/env python3
"""tools/convert_hf_to_powerinfer.py on the committed relu-llama HF and predictor
directories (tests/fixtures/sparse/), checked with the `gguf` package, and our
library's refusal of malformed PowerInfer files.

    test_powerinfer_convert.py --tmp DIR [--pirun PATH/pi-run]

(1) F16 conversion: "PWRI" on disk; read back (magic patched to GGUF) with
    gguf.GGUFReader: the keys and their types/values, the tensor order (model tensors
    with ffn_down_t in place of ffn_down, then fc1/fc2 per layer at the end), shapes
    and types, no ffn_down; ffn_down_t is exactly the transpose of HF down_proj, Q/K
    are permuted, fc1/fc2 are the predictor's; and the file equals the committed
    relu-llama.f16.gguf byte for byte (also Q4_0 against relu-llama.q4_0.gguf).
(2) The threshold key: absent without the predictor's config.json, the value of
    sparse_threshold otherwise; model_type "bamboo" gives arch bamboo.
(3) --dense: an ordinary GGUF with ffn_down and no predictors.
(4) Converter errors (exit status non-zero, message naming layer/tensor): missing
    model_1.pt, fc1/fc2 rank mismatch, fc2 rows != n_ff, an extra bias, an extra layer.
(5) With --pirun: `pi-run --info` accepts the converted file (sparse, ranks 32..64)
    and refuses edited copies, naming the tensor: ffn_down instead of ffn_down_t, a
    layer's predictor removed, fc2 with a rank different from fc1's.

Needs numpy and gguf only (the .pt files are read by tools/pt_reader.py).
Exit status: 0 all passed, 1 a check failed, 77 the gguf package is missing
(1 instead when PI_REQUIRE_ALL=1).
The last line printed is "N passed, N failed".
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGUFValueType as VT
    from gguf import GGMLQuantizationType as QT
except ImportError as e:  # pragma: no cover
    # tools/test.sh sets PI_REQUIRE_ALL=1: there a missing package is a failure
    if os.environ.get("PI_REQUIRE_ALL") == "1":
        print(f"FAIL cannot import gguf/numpy: {e} (PI_REQUIRE_ALL=1; pip install numpy gguf)")
        print("0 passed, 1 failed")
        sys.exit(1)
    print(f"SKIP: cannot import gguf/numpy: {e}")
    print("0 passed, 0 failed")
    sys.exit(77)

from checks import Mismatches, finish, run_check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOLS = os.path.join(ROOT, "tools")
FIX = os.path.join(ROOT, "tests", "fixtures", "sparse")
HF = os.path.join(FIX, "relu-llama-hf")
PRED = os.path.join(FIX, "relu-llama-predictor")
CONVERTER = os.path.join(TOOLS, "convert_hf_to_powerinfer.py")
sys.path.insert(0, TOOLS)
import convert_hf_to_gguf as conv  # noqa: E402
import pt_reader  # noqa: E402

N_LAYER, N_EMBD, N_FF, N_VOCAB = 3, 64, 256, 128
RANKS = [32, 64, 32]
LAYER_TENSORS = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                 "ffn_gate", "ffn_up", "ffn_down_t"]


def run_converter(args):
    p = subprocess.run([sys.executable, CONVERTER] + args + ["-q"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


def convert_ok(out, outtype="f16", pred=PRED, hf=HF, extra=()):
    rc, msg = run_converter([hf, pred, "--outfile", out, "--outtype", outtype,
                             "--name", "relu-llama", "--no-tokenizer"] + list(extra))
    assert rc == 0, f"converter exited {rc}: {msg}"


def reader(path, tmp):
    """GGUFReader of a copy of PWRI file `path` with the magic patched to GGUF."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"PWRI", f"{path}: magic {data[:4]!r}, expected b'PWRI'"
    cp = os.path.join(tmp, os.path.basename(path) + ".as-gguf")
    with open(cp, "wb") as f:
        f.write(b"GGUF" + data[4:])
    return gguf.GGUFReader(cp)


def as_f32(t):
    a = gguf.quants.dequantize(t.data, t.tensor_type)
    return np.asarray(a, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])


def kv(r):
    return {k: (f.types[0], f.contents()) for k, f in r.fields.items()
            if not k.startswith("GGUF.")}


# --------------------------------------------------------------------------- #
# (1) the F16 conversion                                                        #
# --------------------------------------------------------------------------- #

def check_f16(state):
    tmp = state["tmp"]
    out = os.path.join(tmp, "relu-llama.f16.gguf")
    convert_ok(out)
    state["f16"] = out
    r = reader(out, tmp)
    mm = Mismatches()
    k = kv(r)
    want = {
        "general.architecture": (VT.STRING, "llama"),
        "general.name": (VT.STRING, "relu-llama"),
        "llama.context_length": (VT.UINT32, 256),
        "llama.embedding_length": (VT.UINT32, N_EMBD),
        "llama.block_count": (VT.UINT32, N_LAYER),
        "llama.feed_forward_length": (VT.UINT32, N_FF),
        "llama.attention.head_count": (VT.UINT32, 4),
        "llama.attention.head_count_kv": (VT.UINT32, 2),
        "llama.attention.layer_norm_rms_epsilon": (VT.FLOAT32, float(np.float32(1e-5))),
        "llama.rope.freq_base": (VT.FLOAT32, 10000.0),
        "llama.rope.dimension_count": (VT.UINT32, 16),
        "llama.vocab_size": (VT.UINT32, N_VOCAB),
        "general.file_type": (VT.UINT32, int(gguf.LlamaFileType.MOSTLY_F16)),
        "powerinfer.ffn_activation": (VT.STRING, "relu"),
        "powerinfer.sparse_threshold": (VT.FLOAT32, 0.0),
    }
    for key, (vt, val) in want.items():
        if key not in k:
            mm.add(f"{key}: missing")
            continue
        mm.eq(f"{key}.type", k[key][0], vt)
        got = k[key][1]
        if vt == VT.FLOAT32:
            got = float(np.float32(got))
        mm.eq(f"{key}.value", got, val)
    for key in k:
        if key not in want and key != "general.alignment":
            mm.add(f"unexpected key {key}")

    names = [t.name for t in r.tensors]
    want_names = ["token_embd.weight", "output_norm.weight", "output.weight"]
    for L in range(N_LAYER):
        want_names += [f"blk.{L}.{n}.weight" for n in LAYER_TENSORS]
    for L in range(N_LAYER):
        want_names += [f"blk.{L}.fc1.weight", f"blk.{L}.fc2.weight"]
    mm.eq("tensor names/order", names, want_names)
    if any(".ffn_down.weight" in n for n in names):
        mm.add("the file has ffn_down tensors")

    hf = conv.read_safetensors(os.path.join(HF, "model.safetensors"))
    T = {t.name: t for t in r.tensors}
    for L in range(N_LAYER):
        t = T.get(f"blk.{L}.ffn_down_t.weight")
        if t is None:
            continue
        mm.eq(f"blk.{L}.ffn_down_t shape", [int(x) for x in t.shape], [N_EMBD, N_FF])
        mm.eq(f"blk.{L}.ffn_down_t type", t.tensor_type, QT.F16)
        down = hf[f"model.layers.{L}.mlp.down_proj.weight"]          # [n_embd, n_ff]
        if not np.array_equal(as_f32(t), down.T):
            mm.add(f"blk.{L}.ffn_down_t.weight is not the transpose of down_proj")
        q = as_f32(T[f"blk.{L}.attn_q.weight"])
        if not np.array_equal(q, conv.hf_qk_to_gguf(hf[f"model.layers.{L}.self_attn.q_proj.weight"], 4)):
            mm.add(f"blk.{L}.attn_q.weight is not the permuted q_proj")
        kk = as_f32(T[f"blk.{L}.attn_k.weight"])
        if not np.array_equal(kk, conv.hf_qk_to_gguf(hf[f"model.layers.{L}.self_attn.k_proj.weight"], 2)):
            mm.add(f"blk.{L}.attn_k.weight is not the permuted k_proj")
        sd = pt_reader.load(os.path.join(PRED, f"model_{L}.pt"))
        for nm, shape in (("fc1", [N_EMBD, RANKS[L]]), ("fc2", [RANKS[L], N_FF])):
            t = T.get(f"blk.{L}.{nm}.weight")
            if t is None:
                continue
            mm.eq(f"blk.{L}.{nm} shape", [int(x) for x in t.shape], shape)
            mm.eq(f"blk.{L}.{nm} type", t.tensor_type, QT.F16)
            if not np.array_equal(as_f32(t), sd[f"{nm}.weight"].astype(np.float32)):
                mm.add(f"blk.{L}.{nm}.weight differs from model_{L}.pt {nm}.weight")
    for n in ("token_embd.weight", "output.weight"):
        mm.eq(f"{n} type", T[n].tensor_type, QT.F16)
    mm.eq("output_norm type", T["output_norm.weight"].tensor_type, QT.F32)
    mm.done()


def check_bytes(state):
    tmp = state["tmp"]
    mm = Mismatches()
    for ty in ("f16", "q4_0"):
        out = state["f16"] if ty == "f16" else os.path.join(tmp, f"relu-llama.{ty}.gguf")
        if ty != "f16":
            convert_ok(out, ty)
        with open(out, "rb") as f:
            got = f.read()
        with open(os.path.join(FIX, f"relu-llama.{ty}.gguf"), "rb") as f:
            want = f.read()
        if got != want:
            first = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                         min(len(got), len(want)))
            mm.add(f"{ty}: differs from the committed relu-llama.{ty}.gguf ({len(got)} vs "
                   f"{len(want)} bytes, first difference at byte {first})")
    mm.done()


# --------------------------------------------------------------------------- #
# (2) threshold key and bamboo                                                  #
# --------------------------------------------------------------------------- #

def check_threshold_and_bamboo(state):
    tmp = state["tmp"]
    mm = Mismatches()
    nocfg = os.path.join(tmp, "pred-nocfg")
    shutil.rmtree(nocfg, ignore_errors=True)
    shutil.copytree(PRED, nocfg)
    os.remove(os.path.join(nocfg, "config.json"))
    out = os.path.join(tmp, "nocfg.gguf")
    convert_ok(out, pred=nocfg)
    if "powerinfer.sparse_threshold" in kv(reader(out, tmp)):
        mm.add("powerinfer.sparse_threshold written without the predictor's config.json")

    with open(os.path.join(nocfg, "config.json"), "w") as f:
        json.dump({"sparse_threshold": 0.25}, f)
    bam = os.path.join(tmp, "hf-bamboo")
    shutil.rmtree(bam, ignore_errors=True)
    shutil.copytree(HF, bam)
    with open(os.path.join(bam, "config.json")) as f:
        cfg = json.load(f)
    cfg["model_type"] = "bamboo"
    cfg["architectures"] = ["BambooForCausalLM"]
    with open(os.path.join(bam, "config.json"), "w") as f:
        json.dump(cfg, f)
    out = os.path.join(tmp, "bamboo.gguf")
    convert_ok(out, pred=nocfg, hf=bam)
    state["bamboo"] = out
    k = kv(reader(out, tmp))
    mm.eq("bamboo threshold", k.get("powerinfer.sparse_threshold"), (VT.FLOAT32, 0.25))
    mm.eq("bamboo arch", k.get("general.architecture"), (VT.STRING, "bamboo"))
    mm.eq("bamboo block_count", k.get("bamboo.block_count"), (VT.UINT32, N_LAYER))
    if "powerinfer.ffn_activation" in k:
        mm.add("bamboo file has powerinfer.ffn_activation (its FFN is fixed by the arch)")
    mm.done()


def check_dense(state):
    tmp = state["tmp"]
    out = os.path.join(tmp, "dense.gguf")
    rc, msg = run_converter([HF, "--dense", "--outfile", out, "--outtype", "f16",
                             "--no-tokenizer"])
    assert rc == 0, f"--dense exited {rc}: {msg}"
    with open(out, "rb") as f:
        assert f.read(4) == b"GGUF", "--dense output does not have the GGUF magic"
    r = gguf.GGUFReader(out)
    names = [t.name for t in r.tensors]
    mm = Mismatches()
    mm.eq("tensor count", len(names), 3 + 9 * N_LAYER)
    for L in range(N_LAYER):
        if f"blk.{L}.ffn_down.weight" not in names:
            mm.add(f"blk.{L}.ffn_down.weight missing")
    if any("fc1" in n or "fc2" in n or "ffn_down_t" in n for n in names):
        mm.add("dense output has predictor or ffn_down_t tensors")
    if "powerinfer.sparse_threshold" in kv(r):
        mm.add("dense output has powerinfer.sparse_threshold")
    mm.done()


# --------------------------------------------------------------------------- #
# (4) converter errors                                                          #
# --------------------------------------------------------------------------- #

def bad_pred_dir(tmp, name, edit):
    d = os.path.join(tmp, "pred-" + name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(PRED, d)
    edit(d)
    return d


def check_errors(state):
    tmp = state["tmp"]
    bad = os.path.join(FIX, "bad-predictor")
    cases = [
        ("missing model_1.pt",
         lambda d: os.remove(os.path.join(d, "model_1.pt")), ["layer 1", "model_1.pt"]),
        ("rank mismatch",
         lambda d: shutil.copyfile(os.path.join(bad, "rank_mismatch.pt"),
                                   os.path.join(d, "model_2.pt")),
         ["layer 2", "fc2.weight", "rank"]),
        ("fc2 rows != n_ff",
         lambda d: shutil.copyfile(os.path.join(bad, "fc2_rows.pt"),
                                   os.path.join(d, "model_2.pt")),
         ["layer 2", "fc2.weight", "256"]),
        ("extra bias",
         lambda d: shutil.copyfile(os.path.join(bad, "bias.pt"),
                                   os.path.join(d, "model_2.pt")),
         ["layer 2", "fc2.bias"]),
        ("extra layer",
         lambda d: shutil.copyfile(os.path.join(d, "model_0.pt"),
                                   os.path.join(d, "model_3.pt")),
         ["model_3.pt", "3 layers"]),
    ]
    mm = Mismatches()
    for name, edit, words in cases:
        d = bad_pred_dir(tmp, name.replace(" ", "_").replace("!", "").replace("=", ""), edit)
        out = os.path.join(tmp, "bad.gguf")
        if os.path.exists(out):
            os.remove(out)
        rc, msg = run_converter([HF, d, "--outfile", out])
        if rc == 0:
            mm.add(f"{name}: the converter exited 0")
            continue
        if "Traceback" in msg:
            mm.add(f"{name}: a traceback instead of a message: {msg.strip()[-300:]}")
        for w in words:
            if w not in msg:
                mm.add(f"{name}: message does not mention {w!r}: {msg.strip()}")
        if os.path.exists(out):
            mm.add(f"{name}: an output file was written")
    mm.done()


# --------------------------------------------------------------------------- #
# (5) the library refuses malformed PowerInfer files                             #
# --------------------------------------------------------------------------- #

def rewrite(src, dst, tmp, edit):
    """Copy PWRI file src to dst through GGUFReader/GGUFWriter; edit(name, tensor) returns
    None to drop the tensor or (name, data, raw_dtype) to write."""
    r = reader(src, tmp)
    arch = r.get_field("general.architecture").contents()
    w = gguf.GGUFWriter(dst, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.alignment"):
            continue
        sub = f.types[-1] if f.types[0] == VT.ARRAY else None
        w.add_key_value(key, f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        e = edit(t.name, t)
        if e is None:
            continue
        name, data, raw = e
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(dst, "r+b") as f:
        f.write(b"PWRI")


def pirun_info(pirun, path):
    p = subprocess.run([pirun, "-m", path, "--info"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


def check_library(state):
    pirun, tmp = state["pirun"], state["tmp"]
    mm = Mismatches()
    rc, msg = pirun_info(pirun, state["f16"])
    if rc != 0:
        mm.add(f"pi-run --info refused the converted file ({rc}): {msg.strip()}")
    for want in ("sparse (PowerInfer GGUF, magic PWRI", "predictor rank: 32..64",
                 "n_ff:           256"):
        if want not in msg:
            mm.add(f"pi-run --info on the converted file does not print {want!r}")
    rc, msg = pirun_info(pirun, state["bamboo"])
    if rc != 0 or "bamboo" not in msg or "threshold:      0.25" not in msg:
        mm.add(f"pi-run --info on the bamboo conversion ({rc}): {msg.strip()[:600]}")

    def down_not_t(name, t):
        if name == "blk.1.ffn_down_t.weight":   # F16 [n_ff, n_embd] -> HF layout
            return "blk.1.ffn_down.weight", np.ascontiguousarray(t.data.T), None
        return name, t.data, t.tensor_type

    def no_layer2_pred(name, t):
        if name in ("blk.2.fc1.weight", "blk.2.fc2.weight"):
            return None
        return name, t.data, t.tensor_type

    def rank_mismatch(name, t):
        if name == "blk.1.fc2.weight":          # F16 [n_ff, 64] -> [n_ff, 32]
            return name, np.ascontiguousarray(t.data[:, :32]), None
        return name, t.data, t.tensor_type

    for what, edit, tensor in (("ffn_down instead of ffn_down_t", down_not_t,
                                "blk.1.ffn_down.weight"),
                               ("layer 2 predictor missing", no_layer2_pred,
                                "blk.2.fc1.weight"),
                               ("fc2 rank != fc1 rank", rank_mismatch,
                                "blk.1.fc2.weight")):
        path = os.path.join(tmp, "edited.gguf")
        rewrite(state["f16"], path, tmp, edit)
        rc, msg = pirun_info(pirun, path)
        if rc == 0:
            mm.add(f"{what}: pi-run --info accepted the file")
        elif tensor not in msg:
            mm.add(f"{what}: pi-run's message does not name {tensor}: {msg.strip()}")
        else:
            print(f"     {what}: {msg.strip()}")
    mm.done()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--pirun", default=None)
    args = ap.parse_args()
    os.makedirs(args.tmp, exist_ok=True)
    state = {"tmp": args.tmp, "pirun": args.pirun}
    run_check("(1) F16 conversion: magic, keys, tensor order, ffn_down_t, predictors",
              check_f16, state)
    if "f16" in state:
        run_check("(1) byte-identical to the committed relu-llama.{f16,q4_0}.gguf",
                  check_bytes, state)
    run_check("(2) threshold key from the predictor config; bamboo arch",
              check_threshold_and_bamboo, state)
    run_check("(3) --dense writes an ordinary GGUF", check_dense, state)
    run_check("(4) converter errors name the layer and tensor", check_errors, state)
    if args.pirun and "f16" in state and "bamboo" in state:
        run_check("(5) pi-run --info refuses malformed PWRI files, naming the tensor",
                  check_library, state)
    else:
        print("skip (5): no --pirun (tools disabled)")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
