#!/usr/bin/env python3
"""pi-sparsify and PI_SPARSE_THRESHOLD against an independent float64 reference.

    test_sparsify.py PI_SPARSIFY LIBPOWERINFER SOURCE_ROOT WORK_DIR

Fixture: tests/fixtures/archs/qwen2.f16.gguf (a tiny random Qwen2 with a SiLU-gated FFN,
made by tests/fixtures/make_arch_models.py with llama.cpp's converter; its .ref.bin holds
transformers' float64 logits). The reference here is a float64 numpy forward of the
GGUF as stored (qwen2_ref.py, read with the gguf package): it is first checked against transformers'
logits (dense), then run with each layer's FFN masked as the thresholded mode defines it,
a = silu(gate . h), keep a neuron iff |a| > t_l, y = down((a * keep) * (up . h)).

Checks:
  1. pi-sparsify on the fixture (calibrated on the first half of the committed
     perplexity text) writes ffn_down_t = ffn_down transposed, bit for bit (F16 source),
     no ffn_down, and the powerinfer.sparsify.* keys;
  2. the file in threshold mode (its default) equals the masked reference, position by
     position (one token per decode), for a whole prompt decoded in one call (the union
     of the tokens' sets, each token masked to its own), and for a batch keeping every
     position's logits; dense mode of the same file equals the dense reference; the
     statistics count the rows and bytes really read (whole gate, kept up/down_t rows);
  3. --sparsity 0 gives thresholds 0 and the dense result; --method teal (thresholds on
     the intermediate |silu(gate h) * (up h)|, down only above them) equals the float64
     reference masked that way, reads the whole gate and up and the kept down rows;
     --order-stats permutes gate, up and down_t rows by the statistics' active counts
     (recorded as powerinfer.sparsify.neuron_order), the same logits up to summation order;
     quantized sources get the default ffn_down_t type (Q4_0 -> Q5_0, Q5_1 -> Q8_0) with
     less error per layer than the gguf package's quantizer of that type, and a Q4_0
     source's S = 0 file stays close to its dense logits;
  4. bad input fails cleanly (exit status, a message, no output file): gpt-oss's
     experts (clamped SwiGLU), a missing file, a bad --sparsity, a sparsified file given again;
     threshold mode on a dense file and a wrong number of thresholds are
     refused; with a CPU stand-in device holding some neurons, threshold and dense mode
     compute what the CPU alone computes;
  5. Gemma 2 and 3 (post-FFN norm), Phi-3 (fused gate_up, split by pi-sparsify), Falcon
     and StarCoder2 (plain FFNs, thresholds on act(up . h + b_up)), a Llama with gate, up
     and down biases (mlp_bias): at S = 0 threshold mode equals transformers' logits, at
     S = 0.5 it moves them while dense mode does not; Phi-3's halves bit for bit;
     --order-stats (rows and biases permuted) gives the same logits; a CPU stand-in
     device splitting layers equals the CPU alone. Mixture-of-experts files (Mixtral,
     Qwen2-MoE, Qwen3-MoE, OLMoE): the same checks with every expert thresholded
     (ffn_down_exps_t), kept counted over the routed experts, the device holding whole
     experts (S = 0 and 0.5), TEAL on Qwen2-MoE, --order-stats refused.
Exit status 0 when every check passes."""

import os
import subprocess
import sys

import numpy as np

TOOL, LIB, ROOT, WORK = sys.argv[1:5]
os.environ["PI_LIBRARY"] = LIB
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import powerinfer as pi  # noqa: E402
from qwen2_ref import forward, read_ref, rel, tensors  # noqa: E402

ARCHS = os.path.join(ROOT, "tests", "fixtures", "archs")
FIX = os.path.join(ARCHS, "qwen2.f16.gguf")
TEXT = os.path.join(ROOT, "tests", "fixtures", "perplexity", "text.txt")
os.makedirs(WORK, exist_ok=True)
FAILS = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILS.append(what)


def clear_thresholds(T, K, tokens, thr):
    """thr moved, layer by layer, to the middle of the widest gap between the 64 sorted
    |a| values of the reference nearest to it: a threshold float32 rounding cannot cross
    (the kept fraction barely changes)."""
    out = list(thr)
    for il in range(len(out)):
        acts = forward(T, K, tokens, out, kv16=True)[2][il].ravel()
        v = np.sort(acts)
        i = int(np.searchsorted(v, out[il]))
        lo, hi = max(i - 32, 0), min(i + 32, len(v) - 1)
        gaps = v[lo + 1:hi + 1] - v[lo:hi]
        j = lo + int(np.argmax(gaps))
        out[il] = float(np.float32((v[j] + v[j + 1]) / 2))
    return out


def sparsify(out, sparsity, src=FIX, extra=()):
    return subprocess.run([TOOL, "-m", src, "-o", out, "--sparsity", str(sparsity), "--calib",
                           calib, "-t", "2", "-q", *extra], capture_output=True, text=True)


def device_splits(path, tokens, want):
    """Decode `tokens` one by one with a CPU stand-in device at three budgets (a quarter,
    half and three quarters of the file's size): the largest rel distance from `want`
    over the budgets that put some neurons (or experts) on the device, and how many did."""
    m = pi.Model(path)
    worst, n = 0.0, 0
    for frac in (0.25, 0.5, 0.75):
        with pi.Context(m, n_ctx=64, n_threads=2, device="cpu",
                        device_budget=int(os.path.getsize(path) * frac)) as c:
            got = []
            for t in tokens:
                c.decode([t])
                got.append(np.array(c.logits(), np.float64))
            nd = sum(c.plan.layer_neurons(l) for l in range(c.plan.n_layer))
            nd += sum(c.plan.layer_experts(l) for l in range(c.plan.n_layer))
        if nd > 0:
            n += 1
            worst = max(worst, rel(np.stack(got), want))
    m.close()
    return worst, n


def engine_logits(path, tokens, mode, **kw):
    """Logits [n][V]: one token per decode; the last row of one whole-prompt decode; and
    every row of one batch."""
    m = pi.Model(path)
    steps = []
    with pi.Context(m, n_ctx=64, n_threads=2, sparse_mode=mode, **kw) as c:
        for t in tokens:
            c.decode([t])
            steps.append(np.array(c.logits(), np.float64))
        c.reset()
        c.decode(tokens)
        whole = np.array(c.logits(), np.float64)
        c.reset()
        c.decode_batch([(t, 0, i, 1) for i, t in enumerate(tokens)])
        batch = np.stack([np.array(c.batch_logits(i), np.float64) for i in range(len(tokens))])
    m.close()
    return np.stack(steps), whole, batch


def check_three(label, logits, want):
    """engine_logits' three ways (per token, whole prompt, batch) against the reference
    `want` [n][V], each within 5e-4 of max |logit|."""
    steps, whole, batch = logits
    for name, got, w in (("one token per decode", steps, want),
                         ("whole prompt, last position", whole, want[-1]),
                         ("batch, every position", batch, want)):
        e = rel(got, w)
        check(e < 5e-4, f"{label} ({name}) = masked float64 reference: {e:.2e} of max |logit|")


lines = open(TEXT, encoding="utf-8").read().splitlines(True)
calib = os.path.join(WORK, "calib.txt")
with open(calib, "w", encoding="utf-8") as f:
    f.writelines(lines[:len(lines) // 2])

tokens, ref = read_ref(os.path.join(ARCHS, "qwen2.ref.bin"))
T0, K0 = tensors(FIX)
dense_ref = forward(T0, K0, tokens)[0]
e = rel(dense_ref, ref)
check(e < 1e-5, f"float64 numpy forward = transformers' logits (max err {e:.2e} of max |logit|)")

# 1. the file
out = os.path.join(WORK, "qwen2.s50.gguf")
r = sparsify(out, 0.5)
check(r.returncode == 0, f"pi-sparsify --sparsity 0.5 succeeds ({r.stderr.strip()[:200]})")
T1, K1 = tensors(out)
L = K0["qwen2.block_count"]
same = all(np.array_equal(T1[f"blk.{l}.ffn_down_t.weight"], T0[f"blk.{l}.ffn_down.weight"].T)
           for l in range(L))
check(same and not any(f"blk.{l}.ffn_down.weight" in T1 for l in range(L)),
      "ffn_down_t is ffn_down transposed bit for bit; ffn_down is gone")
thr = np.array(K1["powerinfer.sparsify.thresholds"], np.float64)
check(K1["powerinfer.sparsify.method"] == "cats" and len(thr) == L and (thr > 0).all()
      and abs(K1["powerinfer.sparsify.sparsity"] - 0.5) < 1e-7
      and K1["powerinfer.sparsify.calibration"] == "calib.txt"
      and K1["powerinfer.sparsify.calibration_tokens"] > 100,
      f"powerinfer.sparsify keys (thresholds {np.round(thr, 4).tolist()})")

# 2. thresholded = masked reference: the file's thresholds moved into a clear gap (so
# that no activation of this prompt lies within float32 rounding of one), given as the
# override; then the file's own, on the whole prompt's last position
clear = clear_thresholds(T0, K0, tokens, thr)
masked_ref, margin, _, _ = forward(T0, K0, tokens, clear, kv16=True)
check(margin > 1e-4, f"thresholds {np.round(clear, 5).tolist()}: no activation within 1e-4 "
      f"(relative) of one (closest {margin:.1e})")
check_three("threshold mode", engine_logits(out, tokens, "auto", sparse_thresholds=clear),
            masked_ref)
file_ref = forward(T0, K0, tokens, thr, kv16=True)[0]
_, whole, _ = engine_logits(out, tokens, "auto")
e = rel(whole, file_ref[-1])
check(e < 5e-4, f"threshold mode with the file's thresholds = masked reference (last "
      f"position): {e:.2e}")
d = rel(masked_ref, forward(T0, K0, tokens, kv16=True)[0])
check(d > 1e-2, f"the mask matters: masked reference differs from dense by {d:.2e}")
steps, _, batch = engine_logits(out, tokens, "dense")
e = max(rel(steps, dense_ref), rel(batch, dense_ref))
check(e < 2e-3, f"dense mode of the sparsified file = dense reference: {e:.2e}")

# the context reports the threshold source (pi_ctx_sparse_threshold_source)
m = pi.Model(out)
with pi.Context(m, n_ctx=16) as c:
    got = c.sparse_thresholds
    check(c.sparse_mode == "threshold" and c.threshold_source == "file"
          and np.allclose(got, thr, rtol=0, atol=0),
          f"the file runs in threshold mode by default, the file's thresholds ({c.threshold_source})")
with pi.Context(m, n_ctx=16, sparse_thresholds=clear, sparse_threshold_scale=2.0) as c:
    check(c.threshold_source == "params" and
          np.allclose(c.sparse_thresholds, np.float32(clear) * 2, rtol=1e-6, atol=0),
          "the override and its scale are reported (source params)")
# telemetry counts what is read: the whole gate, up and ffn_down_t rows of the kept
# neurons only (F16: 2 * n_embd bytes a row); one token, so kept = active = rows_down
E, F = K0["qwen2.embedding_length"], K0["qwen2.feed_forward_length"]
acts = forward(T0, K0, tokens[:1], clear, kv16=True)[2]
with pi.Context(m, n_ctx=16, sparse_thresholds=clear, stats="on") as c:
    c.decode(tokens[:1])
    ok, got = True, []
    for l, ls in enumerate(c.stats.layers()):
        n = int((acts[l][0] > clear[l]).sum())
        got.append((n, int(ls.active), int(ls.rows_down), int(ls.rows_gate_up), int(ls.bytes_ffn)))
        ok &= (ls.active == n and ls.rows_down == n and ls.rows_gate_up == F
               and ls.bytes_ffn == 2 * E * (F + 2 * n))
    check(ok, f"telemetry of a thresholded token: kept = active = rows_down, the whole gate "
          f"and kept rows of up and down_t in bytes_ffn (per layer {got})")
try:
    pi.Context(m, n_ctx=16, sparse_thresholds=[0.1])
    check(False, "a wrong number of thresholds is refused")
except pi.PowerInferError as ex:
    check("sparse_thresholds" in str(ex), f"a wrong number of thresholds is refused ({ex})")
# hybrid: a CPU stand-in device holding some of the neurons (tests/model/test_hybrid.c
# sweeps the budgets) computes what the CPU alone computes
for mode in ("threshold", "dense"):
    want = engine_logits(out, tokens, mode)[1]
    plan = m.plan(device="cpu", n_ctx=64)
    half = plan.bytes() - plan.bytes("neurons") // 2
    with pi.Context(m, n_ctx=64, n_threads=2, sparse_mode=mode, device="cpu",
                    device_budget=half) as c:
        c.decode(tokens)
        got = np.array(c.logits(), np.float64)
        n_dev = sum(c.plan.layer_neurons(l) for l in range(L))
    e = rel(got, want)
    check(0 < n_dev < L * F and e < 1e-5, f"hybrid {mode} mode with {n_dev} of {L * F} neurons on "
          f"a CPU device = CPU only: {e:.1e}")
m.close()

# 3. S = 0: thresholds 0, the dense result
out0 = os.path.join(WORK, "qwen2.s0.gguf")
r = sparsify(out0, 0)
_, K2 = tensors(out0)
check(r.returncode == 0 and all(t == 0.0 for t in K2["powerinfer.sparsify.thresholds"]),
      "--sparsity 0 records thresholds 0")
steps, whole, batch = engine_logits(out0, tokens, "auto")
e = max(rel(steps, ref), rel(batch, ref), rel(whole, ref[-1]))
check(e < 2e-3, f"threshold mode at sparsity 0 = transformers' dense logits: {e:.2e}")

# 3b. TEAL-style: --method teal thresholds the intermediate |silu(gate h) * (up h)|, the
# down projection only above it (gate and up whole)
outt = os.path.join(WORK, "qwen2.teal50.gguf")
r = sparsify(outt, 0.5, extra=("--method", "teal"))
check(r.returncode == 0, f"pi-sparsify --method teal ({r.stderr.strip()[:200]})")
_, Kt = tensors(outt)
thr_t = np.array(Kt["powerinfer.sparsify.thresholds"], np.float64)
check(Kt["powerinfer.sparsify.method"] == "teal" and (thr_t > 0).all() and
      not np.allclose(thr_t, thr), f"method teal recorded, its own thresholds "
      f"{np.round(thr_t, 4).tolist()} (calibrated on |silu(g) * up|)")
kept = [float((a > t).mean()) for a, t in zip(forward(T0, K0, tokens, teal=True)[2], thr_t)]
check(all(0.3 < k < 0.7 for k in kept), f"the fixture's prompt keeps about half the neurons "
      f"per layer ({np.round(kept, 3).tolist()})")


def clear_teal(thr_in):
    out = list(thr_in)
    for il in range(len(out)):
        v = np.sort(forward(T0, K0, tokens, out, kv16=True, teal=True)[2][il].ravel())
        i = int(np.searchsorted(v, out[il]))
        lo, hi = max(i - 32, 0), min(i + 32, len(v) - 1)
        j = lo + int(np.argmax(v[lo + 1:hi + 1] - v[lo:hi]))
        out[il] = float(np.float32((v[j] + v[j + 1]) / 2))
    return out


clear_t = clear_teal(thr_t)
teal_ref, margin, _, _ = forward(T0, K0, tokens, clear_t, kv16=True, teal=True)
check(margin > 1e-4, f"TEAL thresholds {np.round(clear_t, 5).tolist()}: no intermediate within "
      f"1e-4 (relative) of one (closest {margin:.1e})")
check_three("TEAL threshold mode",
            engine_logits(outt, tokens, "auto", sparse_thresholds=clear_t), teal_ref)
d = rel(teal_ref, forward(T0, K0, tokens, kv16=True)[0])
check(d > 1e-2, f"the TEAL mask matters: {d:.2e} from dense")
acts = forward(T0, K0, tokens[:1], clear_t, kv16=True, teal=True)[2]
m = pi.Model(outt)
with pi.Context(m, n_ctx=16, sparse_thresholds=clear_t, stats="on") as c:
    c.decode(tokens[:1])
    ok, got = True, []
    for l, ls in enumerate(c.stats.layers()):
        n = int((acts[l][0] > clear_t[l]).sum())
        got.append((n, int(ls.active), int(ls.rows_down), int(ls.rows_gate_up), int(ls.bytes_ffn)))
        ok &= (ls.active == n and ls.rows_down == n and ls.rows_gate_up == F
               and ls.bytes_ffn == 2 * E * (2 * F + n))
check(ok, f"telemetry of a TEAL token: the whole gate and up, kept down_t rows only ({got})")
m.close()
r = sparsify(os.path.join(WORK, "bad.gguf"), 0.5, extra=("--method", "deja-vu"))
check(r.returncode == 2 and "--method" in r.stderr, f"pi-sparsify refuses --method deja-vu "
      f"({r.stderr.strip()[:120]})")

# 3c. --order-stats: each layer's neurons hottest first, by a statistics side file (of
# the sparsified file in threshold mode: which neurons pass the thresholds how often; in
# dense mode every SiLU neuron is active); rows of gate, up and down_t permuted exactly,
# the order recorded, the same thresholds and the same logits up to the summation order
stats_path = os.path.join(WORK, "qwen2.stats.gguf")
m = pi.Model(out)
ctoks = m.tokenize(open(calib, encoding="utf-8").read(), add_special=True)[:256]
with pi.Context(m, n_ctx=256, n_threads=2, stats="on") as c:
    c.decode(ctoks)
    c.stats.save(stats_path)
    counts = [np.array(c.stats.neurons(l, "active")) for l in range(L)]
m.close()
outo = os.path.join(WORK, "qwen2.s50o.gguf")
r = sparsify(outo, 0.5, extra=("--order-stats", stats_path))
check(r.returncode == 0, f"pi-sparsify --order-stats ({r.stderr.strip()[:200]})")
To, Ko = tensors(outo)
order = np.array(Ko["powerinfer.sparsify.neuron_order"]).reshape(L, F)
want = [np.lexsort((np.arange(F), -counts[l])) for l in range(L)]
check(all(np.array_equal(order[l], want[l]) for l in range(L)) and
      all((np.diff(counts[l][order[l]]) <= 0).all() for l in range(L)) and
      all((order[l] != np.arange(F)).sum() > F // 2 for l in range(L)),
      "neuron_order: each layer's ids by descending active count (ties: lower id), most "
      "neurons moved")
check(all(np.array_equal(To[f"blk.{l}.{w}.weight"], T1[f"blk.{l}.{w}.weight"][order[l]])
          for l in range(L) for w in ("ffn_gate", "ffn_up", "ffn_down_t")) and
      np.array_equal(Ko["powerinfer.sparsify.thresholds"], K1["powerinfer.sparsify.thresholds"]),
      "gate, up and down_t rows are the unordered file's in that order, bit for bit; the "
      "same thresholds")
for mode in ("auto", "dense"):
    a = engine_logits(outo, tokens, mode, sparse_thresholds=clear)[0]
    b = engine_logits(out, tokens, mode, sparse_thresholds=clear)[0]
    e = rel(a, b)
    check(e < 1e-4, f"{mode} mode: the ordered file's logits = the unordered file's up to the "
          f"summation order ({e:.1e})")
r = sparsify(os.path.join(WORK, "bad.gguf"), 0.5, extra=("--order-stats", os.path.join(
    ROOT, "tests", "fixtures", "gpuidx", "nope.gguf")))
check(r.returncode == 1 and "order-stats" in r.stderr, f"a missing --order-stats file is "
      f"refused ({r.stderr.strip()[:120]})")

# 3e. --keep-down: ffn_down kept as it is beside ffn_down_t (TEAL file); a step whose
# tokens need more than 40 % of a layer's rows (a prompt; a token keeping most neurons)
# runs the kept ffn_down's gemm over the masked activations, the same masked sums;
# dense mode is the original file's path, bit for bit; refused with --order-stats and
# with experts
outk = os.path.join(WORK, "qwen2.teal50k.gguf")
r = sparsify(outk, 0.5, extra=("--method", "teal", "--keep-down"))
check(r.returncode == 0, f"pi-sparsify --keep-down ({r.stderr.strip()[:200]})")
Tk, Kk = tensors(outk)
Tt, _ = tensors(outt)
check(all(np.array_equal(Tk[f"blk.{l}.ffn_down.weight"], T0[f"blk.{l}.ffn_down.weight"]) and
          np.array_equal(Tk[f"blk.{l}.ffn_down_t.weight"], Tt[f"blk.{l}.ffn_down_t.weight"])
          for l in range(L)) and
      np.array_equal(Kk["powerinfer.sparsify.thresholds"], Kt["powerinfer.sparsify.thresholds"]),
      "--keep-down: ffn_down bit for bit the input's, ffn_down_t and thresholds the TEAL file's")
check_three("--keep-down TEAL threshold mode",
            engine_logits(outk, tokens, "auto", sparse_thresholds=clear_t), teal_ref)
a = engine_logits(outk, tokens, "dense")
b = engine_logits(FIX, tokens, "dense")
check(all(np.array_equal(x, y) for x, y in zip(a, b)),
      "--keep-down: dense mode = the original file's dense logits, bit for bit")
m = pi.Model(outk)
with pi.Context(m, n_ctx=64, sparse_thresholds=clear_t, stats="on") as c:
    c.decode(tokens[:1])
    ok, got = True, []
    for l, ls in enumerate(c.stats.layers()):
        n = int((acts[l][0] > clear_t[l]).sum())
        rows = F if n > 0.4 * F else n
        got.append((n, int(ls.rows_down)))
        ok &= ls.active == n and ls.rows_down == rows and ls.bytes_ffn == 2 * E * (2 * F + rows)
    c.reset()
    c.reset_stats()
    c.decode(tokens)  # one step: the prompt's union is most of each layer
    ok &= all(ls.rows_down == F for ls in c.stats.layers())
check(ok, f"--keep-down telemetry: a token keeping more than 40 % of a layer reads ffn_down "
      f"whole, else its down_t rows ((kept, rows) {got}); a prompt reads ffn_down")
m.close()
for what, extra, src in (("--order-stats", ("--order-stats", stats_path), FIX),
                         ("experts", (), os.path.join(ARCHS, "mixtral.f16.gguf"))):
    bad = os.path.join(WORK, "bad.gguf")
    r = sparsify(bad, 0.5, src=src, extra=("--keep-down",) + extra)
    check(r.returncode == 1 and "keep_down" in r.stderr and not os.path.exists(bad),
          f"--keep-down with {what} is refused ({r.stderr.strip()[:140]})")

# 3d. quantized sources: the default ffn_down_t type (Q5_0 from a 4-bit down, Q8_0 from a
# 5-bit one), requantized with least-squares block scales (less error than the gguf
# package's reference quantizer of the same type on the same transposed rows), and
# threshold mode at S = 0 of the Q4_0 file close to that file's dense logits
import gguf  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402
for qt, want in (("q4_0", gguf.GGMLQuantizationType.Q5_0), ("q5_1", gguf.GGMLQuantizationType.Q8_0)):
    src = os.path.join(WORK, f"qwen2.{qt}.gguf")
    pi.quantize(FIX, src, qt, n_threads=2)
    dst = os.path.join(WORK, f"qwen2.{qt}.s0.gguf")
    r = sparsify(dst, 0, src=src)
    rd = gguf.GGUFReader(dst)
    dt = {t.name: t for t in rd.tensors}
    Ts, _ = tensors(src)
    types_ok, err_ok, errs = True, True, []
    for l in range(L):
        t = dt[f"blk.{l}.ffn_down_t.weight"]
        types_ok &= t.tensor_type == want
        d_src = Ts[f"blk.{l}.ffn_down.weight"].T.astype(np.float32)
        ours = dequantize(t.data, t.tensor_type).reshape(d_src.shape)
        theirs = dequantize(quantize(d_src, want), want).reshape(d_src.shape)
        e_ours = float(np.sqrt(((ours - d_src) ** 2).sum() / (d_src ** 2).sum()))
        e_ref = float(np.sqrt(((theirs - d_src) ** 2).sum() / (d_src ** 2).sum()))
        errs.append((round(e_ours, 4), round(e_ref, 4)))
        err_ok &= e_ours < e_ref
    check(r.returncode == 0 and types_ok and err_ok,
          f"{qt} source: ffn_down_t is {want.name}, each layer's error below the reference "
          f"quantizer's (ours, reference: {errs})")
    if qt == "q4_0":
        # this 2-layer fixture is sensitive: Q4_0 itself moves its logits by ~0.6 of
        # max |logit| from the F16 file's; the requantized down must add a small part
        d_steps = engine_logits(src, tokens, "dense")[0]
        t_steps = engine_logits(dst, tokens, "auto")[0]
        e, e_src = rel(t_steps, d_steps), rel(d_steps, ref)
        check(e < 0.1 * e_src, f"Q4_0 source, Q5_0 ffn_down_t: threshold mode at S = 0 within "
              f"{e:.2e} of the source's dense logits, a tenth of the Q4_0 source's own distance "
              f"from transformers' ({e_src:.2e})")
        # a CPU stand-in device holding some neurons (the Q5_0 rows split between the
        # two sides' 8-bit down projections) computes what the CPU alone computes
        mq = pi.Model(dst)
        plan = mq.plan(device="cpu", n_ctx=64)
        worst, n_dev = 0.0, []
        for div in (2, 4):
            with pi.Context(mq, n_ctx=64, n_threads=2, device="cpu",
                            device_budget=plan.bytes() - plan.bytes("neurons") // div) as c:
                got = []
                for t in tokens:
                    c.decode([t])
                    got.append(np.array(c.logits(), np.float64))
                n_dev.append(sum(c.plan.layer_neurons(l) for l in range(L)))
            worst = max(worst, rel(np.stack(got), t_steps))
        mq.close()
        check(all(0 < n < L * F for n in n_dev) and worst < 1e-4,
              f"Q5_0 ffn_down_t: a CPU device holding {n_dev} of {L * F} neurons = CPU only "
              f"({worst:.1e})")

# 4. bad input
bad = os.path.join(WORK, "bad.gguf")
for what, args, status, msg in (
        ("gpt-oss's experts (clamped SwiGLU: no act(gate) of their own)",
         [os.path.join(ARCHS, "gptoss.f16.gguf"), 0.5], 1, "experts"),
        ("a missing file", [os.path.join(WORK, "nope.gguf"), 0.5], 1, "nope.gguf"),
        ("sparsity 1", [FIX, 1.0], 2, "--sparsity"),
        ("sparsity -0.1", [FIX, -0.1], 2, "--sparsity"),
        ("sparsity abc", [FIX, "abc"], 2, "--sparsity"),
        ("an already sparsified file", [out, 0.5], 1, "already sparsified")):
    if os.path.exists(bad):
        os.remove(bad)
    r = sparsify(bad, args[1], src=args[0])
    check(r.returncode == status and msg in r.stderr and not os.path.exists(bad)
          and not any(f.startswith("bad.gguf.tmp") for f in os.listdir(WORK)),
          f"pi-sparsify refuses {what} (exit {r.returncode}: {r.stderr.strip()[:160]})")

# 5. other families (tests/fixtures/archs, against transformers' float64 logits): Gemma 2
# and 3 (GELU-gated, a post-FFN norm applied to the thresholded FFN's output), Phi-3
# (gate and up fused in one {E, 2F} ffn_up, written as ffn_gate and ffn_up), and the
# plain FFNs of Falcon (both layouts) and StarCoder2 (thresholds on a = act(up . h +
# b_up), the down rows where |a| > t_l, StarCoder2's up and down biases), and a Llama with
# gate, up and down biases (mlp_bias: act(gate . h + b_gate) thresholded). S = 0
# keeps every neuron (|act| > 0), so threshold mode must give the reference's logits;
# S = 0.5 must change them (neurons really skipped) and dense mode must not; a CPU
# stand-in device holding some neurons (layers split: the post-FFN norm applies to the
# sum of both parts) computes what the CPU alone computes, up to summation order
# Mixture-of-experts files (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE, OLMoE):
# every expert's FFN thresholded with the layer's t_l (gate and up whole, down_t only for
# the kept neurons; the shared expert dense), kept = the down rows read over the routed
# experts' neurons; the stand-in device holds whole experts; --order-stats is refused.
def moe_shape(path):
    """(experts used per token, an expert's neurons), or None for a dense FFN."""
    import gguf
    fs = gguf.GGUFReader(path).fields
    arch = fs["general.architecture"].contents()
    k = fs.get(f"{arch}.expert_used_count")
    if k is None:
        return None
    fe = fs.get(f"{arch}.expert_feed_forward_length") or fs[f"{arch}.feed_forward_length"]
    return int(k.contents()), int(fe.contents())


for fam in ("gemma2", "gemma3", "phi3", "phi3-longrope", "falcon-7b", "falcon-40b", "starcoder2",
            "llama-bias", "mixtral", "qwen2moe", "qwen3moe", "olmoe"):
    src = os.path.join(ARCHS, f"{fam}.f16.gguf")
    ftoks, fref = read_ref(os.path.join(ARCHS, f"{fam}.ref.bin"))
    f0, f5 = os.path.join(WORK, f"{fam}.s0.gguf"), os.path.join(WORK, f"{fam}.s50.gguf")
    r0, r5 = sparsify(f0, 0.0, src=src), sparsify(f5, 0.5, src=src)
    check(r0.returncode == 0 and r5.returncode == 0,
          f"{fam}: pi-sparsify --sparsity 0 and 0.5 succeed ({(r0.stderr + r5.stderr).strip()[:200]})")
    if r0.returncode or r5.returncode:
        continue
    e0 = rel(engine_logits(f0, ftoks, "auto")[0], fref)
    s5 = engine_logits(f5, ftoks, "auto")[0]
    e5, ed = rel(s5, fref), rel(engine_logits(f5, ftoks, "dense")[0], fref)
    check(e0 < 2e-3 and ed < 2e-3 and e5 > 1e-2,
          f"{fam}: threshold mode at S = 0 = transformers ({e0:.1e}), dense mode of the S = 0.5 "
          f"file too ({ed:.1e}), its threshold mode moves the logits ({e5:.1e})")
    mm = pi.Model(f5)  # the calibration's own tokens: about half of the neurons kept
    ct = mm.tokenize(open(calib, encoding="utf-8").read(), add_special=True)[:48]
    with pi.Context(mm, n_ctx=64, n_threads=2, stats="on") as c:
        for t in ct:
            c.decode([t])
        moe = moe_shape(f5)
        width = moe[0] * moe[1] if moe else mm.n_ff  # neurons a token could use
        kept = [ls.rows_down / (len(ct) * width) for ls in c.stats.layers()]
    mm.close()
    check(all(0.4 < k < 0.6 for k in kept), f"{fam}: S = 0.5 keeps about half of the neurons "
          f"on calibration text ({', '.join(f'{k:.3f}' for k in kept)} per layer)")
    if fam.startswith("phi3"):
        import gguf
        rs, ro = gguf.GGUFReader(src), gguf.GGUFReader(f0)
        ts = {t.name: t for t in rs.tensors}
        to = {t.name: t for t in ro.tensors}
        nl = int(next(v.contents() for k, v in rs.fields.items() if k.endswith(".block_count")))
        ok = True
        for l in range(nl):
            fused = np.asarray(ts[f"blk.{l}.ffn_up.weight"].data)
            g, u = np.asarray(to[f"blk.{l}.ffn_gate.weight"].data), np.asarray(to[f"blk.{l}.ffn_up.weight"].data)
            half = fused.shape[0] // 2
            ok = ok and g.tobytes() == fused[:half].tobytes() and u.tobytes() == fused[half:].tobytes()
        check(ok, f"{fam}: the fused gate_up written as ffn_gate (first half of its rows) and "
              f"ffn_up (second half), bit for bit")
    # --order-stats: gate, up (both halves of a fused gate_up) and their biases permuted alike;
    # the S = 0.5 file's statistics (at S = 0 every neuron fires: the order would be 0 .. F-1)
    mm = pi.Model(f5)
    st = os.path.join(WORK, f"{fam}.stats.gguf")
    with pi.Context(mm, n_ctx=64, n_threads=2, stats="on") as c:
        c.decode(mm.tokenize(open(calib, encoding="utf-8").read(), add_special=True)[:64])
        c.stats.save(st)
    mm.close()
    fo = os.path.join(WORK, f"{fam}.s0o.gguf")
    r = sparsify(fo, 0.0, src=src, extra=("--order-stats", st))
    if moe:
        check(r.returncode == 1 and "experts" in r.stderr and not os.path.exists(fo),
              f"{fam}: --order-stats is refused for experts ({r.stderr.strip()[:120]})")
    eo = rel(engine_logits(fo, ftoks, "auto")[0], fref) if r.returncode == 0 else 1.0
    moved = 0
    if r.returncode == 0 and not moe:
        import gguf
        fd = gguf.GGUFReader(fo).fields["powerinfer.sparsify.neuron_order"]
        order = np.array([fd.parts[i][0] for i in fd.data])
        moved = int(np.sum(order != np.tile(np.arange(order.size // len(kept)), len(kept))))
    if not moe:
        check(r.returncode == 0 and eo < 2e-3 and moved > 0, f"{fam}: {moved} neurons moved "
              f"by --order-stats: threshold mode at S = 0 = transformers ({eo:.1e})")
    worst, n_split = device_splits(f0, ftoks, engine_logits(f0, ftoks, "auto")[0])
    check(n_split > 0 and worst < 1e-4, f"{fam}: a CPU device holding some neurons (experts) "
          f"= CPU only ({worst:.1e} over three budgets)")
    if moe:  # the S = 0.5 file's thresholded experts split alike
        worst, n_split = device_splits(f5, ftoks, s5)
        check(n_split > 0 and worst < 1e-4, f"{fam}: at S = 0.5, a CPU device holding some "
              f"experts = CPU only ({worst:.1e})")
    if fam in ("llama-bias", "qwen2moe"):  # TEAL: gate and up (with biases) for every neuron
        ft0, ft5 = os.path.join(WORK, f"{fam}.t0.gguf"), os.path.join(WORK, f"{fam}.t50.gguf")
        r0 = sparsify(ft0, 0.0, src=src, extra=("--method", "teal"))
        r5 = sparsify(ft5, 0.5, src=src, extra=("--method", "teal"))
        et0 = rel(engine_logits(ft0, ftoks, "auto")[0], fref) if r0.returncode == 0 else 1.0
        et5, es, ns = 1.0, 1.0, 0
        if r5.returncode == 0:
            cpu5 = engine_logits(ft5, ftoks, "auto")[0]
            et5 = rel(cpu5, fref)
            es, ns = device_splits(ft5, ftoks, cpu5)
        check(et0 < 2e-3 and et5 > 1e-2 and ns > 0 and es < 1e-4, f"{fam}: --method teal at S = 0 = "
              f"transformers ({et0:.1e}), at S = 0.5 moves the logits ({et5:.1e}) and a CPU "
              f"device holding some neurons = CPU only ({es:.1e})")

m = pi.Model(FIX)
try:
    pi.Context(m, n_ctx=16, sparse_mode="threshold")
    check(False, "threshold mode on a dense file is refused")
except pi.PowerInferError as ex:
    check("ffn_down_t" in str(ex), f"threshold mode on a dense file is refused ({ex})")
m.close()

print(f"{len(FAILS)} failed" if FAILS else "all passed")
sys.exit(1 if FAILS else 0)
