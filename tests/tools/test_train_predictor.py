#!/usr/bin/env python3
"""tools/train_predictor.py: predictors trained with this engine, for a ReLU model and a
thresholded SiLU model, checked by the engine on tokens the trainer never saw.

    test_train_predictor.py PI_SPARSIFY LIBPOWERINFER SOURCE_ROOT WORK_DIR

Checks:
  1. model_N.pt as torch.save writes it: the trainer's writer, given the tensors of the
     committed torch.save fixture (tests/fixtures/sparse/relu-llama-predictor, made by
     torch 2.15), writes the same records in the same order, byte for byte (all but
     torch's random serialization id), with the same 64-byte data alignment;
  2. ReLU (tests/fixtures/sparse/relu-llama.f16.gguf, PowerInfer layout): predictors
     trained on random tokens, written as model_N.pt and converted with the HF weights by
     tools/convert_hf_to_powerinfer.py; on other random tokens the engine's own
     statistics (PI_STATS_DIAGNOSTIC: predicted and truly active neurons) give every
     layer a recall above 0.85 (the target is 0.9) and a precision above the share of
     active neurons (better than predicting everything);
  3. SiLU (tests/fixtures/archs/qwen2.f16.gguf, pi-sparsify --sparsity 0.5): predictors
     written into the file, which then runs in predictor mode by default; on the second
     half of the committed text (the trainer saw the first) every layer's recall is above
     0.8 (target 0.9); the logits equal a float64 numpy forward whose FFN keeps exactly
     the neurons with fc2 . relu(fc1 . x) >= 0 (x before ffn_norm), computed from the
     file's tensors by qwen2_ref.py, position by position and for the whole prompt; a
     token's telemetry shows the gate read only for the predicted rows; threshold and
     dense mode still run the file; with predictors and part of the neurons on a CPU
     stand-in device it computes what the CPU alone does; the file keeps every tensor of
     its input bit for bit and records powerinfer.predictor.*;
     A --method teal file the same way (labels and the engine's truth |silu(gate h) *
     (up h)| > t_l): held-out recall above 0.8;
  4. refusals: a dense file that is not sparsified, -o for a PowerInfer file, a file that
     already has predictors.
Exit status 0 when every check passes."""

import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np

SPARSIFY, LIB, ROOT, WORK = sys.argv[1:5]
os.environ["PI_LIBRARY"] = LIB
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import powerinfer as pi  # noqa: E402
import pt_reader  # noqa: E402
import train_predictor  # noqa: E402
from qwen2_ref import forward, rel, tensors  # noqa: E402

TRAINER = os.path.join(ROOT, "tools", "train_predictor.py")
SPARSE = os.path.join(ROOT, "tests", "fixtures", "sparse")
QWEN2 = os.path.join(ROOT, "tests", "fixtures", "archs", "qwen2.f16.gguf")
TEXT = os.path.join(ROOT, "tests", "fixtures", "perplexity", "text.txt")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
FAILS = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def train(*args):
    r = subprocess.run([sys.executable, TRAINER, "--library", LIB, "-t", "1", "--seed", "1",
                        *args], capture_output=True, text=True)
    return r


def data_offset(z, info):
    z.fp.seek(info.header_offset)
    h = z.fp.read(30)
    return info.header_offset + 30 + int.from_bytes(h[26:28], "little") + \
        int.from_bytes(h[28:30], "little")


def engine_quality(path, tokens):
    """Per layer (recall, precision, active share) from the engine's diagnostic counts."""
    m = pi.Model(path)
    with pi.Context(m, n_ctx=len(tokens), n_threads=2, stats="diagnostic") as c:
        c.decode(tokens)
        out = [(ls.both / ls.active, ls.both / ls.predicted, ls.active / len(tokens) / m.n_ff)
               for ls in c.stats.layers()]
    m.close()
    return out


# 1. the .pt writer against torch's own output
ok = True
for n in range(3):
    src = os.path.join(SPARSE, "relu-llama-predictor", f"model_{n}.pt")
    sd = pt_reader.load(src)
    dst = os.path.join(WORK, f"model_{n}.pt")
    train_predictor.write_pt(dst, [("fc1.weight", sd["fc1.weight"]), ("fc2.weight", sd["fc2.weight"])])
    a, b = zipfile.ZipFile(src), zipfile.ZipFile(dst)
    ok &= [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
    for ia, ib in zip(a.infolist(), b.infolist()):
        same = a.read(ia) == b.read(ib) or ia.filename.endswith("serialization_id")
        ok &= same and data_offset(a, ia) % 64 == data_offset(b, ib) % 64 == 0
check(ok, "model_N.pt: the records torch.save wrote for the fixture, byte for byte, 64-byte "
      "aligned")

# 2. ReLU: PowerInfer layout, model_N.pt, our converter, the engine's statistics
pred_dir = os.path.join(WORK, "relu-pred")
r = train("-m", os.path.join(SPARSE, "relu-llama.f16.gguf"), "--random-tokens", "4096",
          "--ctx", "128", "--recall", "0.9", "--pt-dir", pred_dir, "-q")
check(r.returncode == 0, f"trainer on the ReLU fixture (exit {r.returncode}):\n{r.stdout}{r.stderr[-400:]}")
table = [ln.split() for ln in r.stdout.splitlines()[1:] if ln.strip()]
relu_gguf = os.path.join(WORK, "relu-trained.gguf")
c = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "convert_hf_to_powerinfer.py"),
                    "--outfile", relu_gguf, "--outtype", "f16", "-q",
                    os.path.join(SPARSE, "relu-llama-hf"), pred_dir], capture_output=True, text=True)
check(c.returncode == 0, f"the converter takes the trained model_N.pt ({c.stderr.strip()[-200:]})")
m = pi.Model(relu_gguf)
ranks = [m.predictor_rank(l) for l in range(m.n_layer)]
m.close()
check(ranks == [int(t[1]) for t in table], f"the file's ranks {ranks} are the trainer's table's")
held = np.random.default_rng(12345).integers(0, 128, 384).tolist()
q = engine_quality(relu_gguf, held)
check(all(rc > 0.85 and pr > act for rc, pr, act in q),
      "held-out random tokens, engine statistics: recall > 0.85 and precision above the active "
      "share in every layer (" + ", ".join(f"{rc:.3f}/{pr:.3f} vs {act:.3f}" for rc, pr, act in q) + ")")

# 3. SiLU, thresholded by pi-sparsify, predictors in the file
lines = open(TEXT, encoding="utf-8").read().splitlines(True)
calib, held_txt = os.path.join(WORK, "calib.txt"), os.path.join(WORK, "held.txt")
with open(calib, "w", encoding="utf-8") as f:
    f.writelines(lines[:len(lines) // 2])
with open(held_txt, "w", encoding="utf-8") as f:
    f.writelines(lines[len(lines) // 2:])
s50, s50p = os.path.join(WORK, "qwen2.s50.gguf"), os.path.join(WORK, "qwen2.s50p.gguf")
r = subprocess.run([SPARSIFY, "-m", QWEN2, "-o", s50, "--sparsity", "0.5", "--calib", calib,
                    "-t", "2", "-q"], capture_output=True, text=True)
check(r.returncode == 0, f"pi-sparsify --sparsity 0.5 ({r.stderr.strip()[:200]})")
r = train("-m", s50, "--calib", calib, "--recall", "0.9", "--ranks", "16,32,64", "-o", s50p, "-q")
check(r.returncode == 0, f"trainer on the sparsified SiLU file (exit {r.returncode}):\n"
      f"{r.stdout}{r.stderr[-400:]}")
print(r.stdout, end="")
table = [ln.split() for ln in r.stdout.splitlines()[1:] if ln.strip()]
T0, K0 = tensors(s50)
T1, K1 = tensors(s50p)
L, E, F = K0["qwen2.block_count"], K0["qwen2.embedding_length"], K0["qwen2.feed_forward_length"]
same = all(np.array_equal(T1[k], v) for k, v in T0.items()) and all(
    K1[k] == v for k, v in K0.items() if k != "general.architecture")
shapes = [T1[f"blk.{l}.fc1.weight"].shape + T1[f"blk.{l}.fc2.weight"].shape for l in range(L)]
check(same and all(s == (int(t[1]), E, F, int(t[1])) for s, t in zip(shapes, table)),
      f"every tensor and key of the input unchanged; fc1/fc2 of the table's ranks {shapes}")
check(K1["powerinfer.predictor.target_recall"] == np.float32(0.9)
      and np.allclose(K1["powerinfer.predictor.recall"], [float(t[5]) for t in table], atol=1e-4)
      and K1["powerinfer.predictor.calibration"] == "calib.txt",
      "powerinfer.predictor.* keys record the target, the recall per layer, the calibration")
m = pi.Model(s50p)
held_toks = m.tokenize(open(held_txt, encoding="utf-8").read(), add_special=True)[:256]
with pi.Context(m, n_ctx=16) as ctx:
    check(ctx.sparse_mode == "predictor", f"the file runs in predictor mode by default ({ctx.sparse_mode})")
m.close()
q = engine_quality(s50p, held_toks)
check(all(rc > 0.8 for rc, _, _ in q), "held-out text, engine statistics: recall > 0.8 in every "
      "layer (" + ", ".join(f"{rc:.3f}/{pr:.3f} vs {act:.3f}" for rc, pr, act in q) + ")")

# a window of the held-out text where no predictor score is within float32's reach of
# the threshold (a score that close could fall either side in the engine): the first of
# up to 8 windows of 24 tokens; which one depends on the trained predictor
for w0 in range(0, 8 * 24, 24):
    toks = held_toks[w0:w0 + 24]
    ref, margin, _, masks = forward(T1, K1, toks, kv16=True, predictor=0.0)
    if margin > 1e-4:
        break
check(margin > 1e-4, f"no predictor score within 1e-4 of the median |score| of the threshold "
      f"(closest {margin:.1e}, tokens {w0}..{w0 + 23}): the sets are the same in float32")
dense = forward(T1, K1, toks, kv16=True)[0]
check(rel(ref, dense) > 1e-2, f"the mask matters: masked reference differs from dense by "
      f"{rel(ref, dense):.2e}")
m = pi.Model(s50p)
steps = []
with pi.Context(m, n_ctx=64, n_threads=2) as ctx:
    for t in toks:
        ctx.decode([t])
        steps.append(np.array(ctx.logits(), np.float64))
    ctx.reset()
    ctx.decode(toks)
    whole = np.array(ctx.logits(), np.float64)
e1, e2 = rel(np.stack(steps), ref), rel(whole, ref[-1])
check(e1 < 5e-4 and e2 < 5e-4, f"predictor mode = dense FFN masked to the predicted set "
      f"(float64): {e1:.2e} one token per decode, {e2:.2e} the whole prompt's last position")
# telemetry of one token: with a predictor threshold that keeps under 60% of each layer
# (above it a step computes gate and up densely), gate and up rows only for the
# predicted neurons; the threshold sits in the widest gap between token 0's scores
s0 = masks[0][0]  # layer 0 (its input does not depend on the threshold)
v = np.sort(s0)
i = int(np.searchsorted(v, np.quantile(s0, 0.5)))
i += int(np.argmax(v[i + 1:i + 9] - v[i:i + 8]))
thr = float(np.float32((v[i] + v[i + 1]) / 2))
s0 = [sc[0] for sc in forward(T1, K1, toks[:1], kv16=True, predictor=thr)[3]]
with pi.Context(m, n_ctx=16, n_threads=2, stats="on", sparse_threshold=thr) as ctx:
    ctx.decode(toks[:1])
    ok, got = True, []
    for l, ls in enumerate(ctx.stats.layers()):
        n = int((s0[l] >= thr).sum())
        got.append((n, int(ls.predicted), int(ls.rows_gate_up), int(ls.rows_down)))
        ok &= (n < 0.6 * F and np.abs(s0[l] - thr).min() > 1e-3 * thr and ls.predicted == n and ls.rows_gate_up == n and ls.rows_down <= n
               and ls.bytes_ffn == 2 * E * (2 * n + ls.rows_down) and ls.bytes_predictor > 0)
check(ok, f"a token reads gate and up rows of the predicted neurons only (threshold {thr:.4g}; "
      f"per layer: predicted, engine's predicted, gate/up rows, down rows {got})")
# hybrid: predictors and some neurons on a CPU stand-in device = the CPU alone (the
# planner splits layers at these budgets: its rows are computed on both units)
seen = []
for frac in (4, 2):
    plan = m.plan(device="cpu", n_ctx=64)
    budget = plan.bytes() - plan.bytes("neurons") + plan.bytes("neurons") // frac
    with pi.Context(m, n_ctx=64, n_threads=2, device="cpu", device_budget=budget) as ctx:
        ctx.decode(toks)
        got = np.array(ctx.logits(), np.float64)
        n_dev = [ctx.plan.layer_neurons(l) for l in range(L)]
        pred_dev = all("predictor" in ctx.plan.layer_parts(l) for l in range(L))
    e = rel(got, whole)
    seen.append((n_dev, e))
    check(pred_dev and e < 1e-5, f"hybrid predictor mode, neurons {n_dev} of {F} per layer on "
          f"a CPU device = CPU only: {e:.1e}")
check(any(0 < n < F for n_dev, _ in seen for n in n_dev), "a layer split between the units "
      "was among them")
for mode in ("threshold", "dense"):
    with pi.Context(m, n_ctx=64, n_threads=2, sparse_mode=mode) as ctx:
        ctx.decode(toks)
        want = forward(T1, K1, toks, K1["powerinfer.sparsify.thresholds"], kv16=True)[0] \
            if mode == "threshold" else dense
        e = rel(np.array(ctx.logits(), np.float64), want[-1])
        check(e < 2e-3, f"{mode} mode still runs the file: {e:.2e} from its reference")
m.close()

# 3b. a TEAL file (thresholds on |silu(gate h) * (up h)|): the labels and the engine's
# truth are the intermediate above t_l
t50, t50p = os.path.join(WORK, "qwen2.teal50.gguf"), os.path.join(WORK, "qwen2.teal50p.gguf")
r = subprocess.run([SPARSIFY, "-m", QWEN2, "-o", t50, "--sparsity", "0.5", "--calib", calib,
                    "--method", "teal", "-t", "2", "-q"], capture_output=True, text=True)
r2 = train("-m", t50, "--calib", calib, "--recall", "0.9", "--ranks", "16,32", "-o", t50p, "-q")
check(r.returncode == 0 and r2.returncode == 0,
      f"pi-sparsify --method teal and the trainer ({r.stderr.strip()[:100]}{r2.stderr[-200:]})")
q = engine_quality(t50p, held_toks)
check(all(rc > 0.8 for rc, _, _ in q), "TEAL file, held-out text, engine statistics (truth "
      "|act(gate) up| > t_l): recall > 0.8 in every layer (" +
      ", ".join(f"{rc:.3f}/{pr:.3f} vs {act:.3f}" for rc, pr, act in q) + ")")

# 4. refusals
moe = os.path.join(WORK, "mixtral.s50.gguf")
r = subprocess.run([SPARSIFY, "-m", os.path.join(ROOT, "tests", "fixtures", "archs", "mixtral.f16.gguf"),
                    "-o", moe, "--sparsity", "0.5", "--calib", calib, "-t", "2", "-q"],
                   capture_output=True, text=True)
check(r.returncode == 0, f"pi-sparsify of the Mixtral fixture ({r.stderr.strip()[:200]})")
for what, args, msg in (
        ("a sparsified mixture-of-experts file", ["-m", moe, "--calib", calib, "-o", "x.gguf"],
         "mixture-of-experts"),
        ("a dense file that is not sparsified", ["-m", QWEN2, "--calib", calib, "-o", "x.gguf"],
         "pi-sparsify"),
        ("-o for a PowerInfer file", ["-m", os.path.join(SPARSE, "relu-llama.f16.gguf"),
                                      "--random-tokens", "512", "-o", "x.gguf"], "--pt-dir"),
        ("a file that already has predictors", ["-m", s50p, "--calib", calib, "--ranks", "16",
                                                "-o", os.path.join(WORK, "again.gguf")],
         "already has predictors")):
    r = train(*args, "-q")
    check(r.returncode not in (0, 3) and msg in r.stderr,
          f"refuses {what} (exit {r.returncode}: {r.stderr.strip()[-160:]})")

print(f"{len(FAILS)} failed" if FAILS else "all passed")
sys.exit(1 if FAILS else 0)
