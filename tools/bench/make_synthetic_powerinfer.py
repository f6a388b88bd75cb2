#!/usr/bin/env python3
"""Write a synthetic ReLU-Llama PowerInfer model (magic PWRI) and its dense twin (magic
GGUF), for sparse-inference benchmarks.

    make_synthetic_powerinfer.py --preset 1b -o /work/bench-models/synth-1b
        -> synth-1b.powerinfer.gguf  PWRI, llama arch: ffn_down_t {n_embd, n_ff} and the
                                     predictor fc1 {n_embd, R}, fc2 {R, n_ff} per layer,
                                     powerinfer.sparse_threshold = 0.0
           synth-1b.dense.gguf       GGUF, same weights but ffn_down {n_ff, n_embd} and no
                                     predictor, powerinfer.ffn_activation = "relu"
                                     (llama.cpp loads it; it runs SiLU there)

Presets: tiny (tests), 1b (TinyLlama shape), 7b (Llama-2-7B shape). --type q4_0 (default),
q8_0 or f16 for every 2-D tensor; the predictor is in the same type when the rank is a
multiple of 32, else F16. Tokenizer metadata comes from make_synthetic_llama.py.

What makes it useful for sparse benchmarks: the engine's predictor score
fc2·relu(fc1·h) (h = the residual stream after attention, un-normalised) marks about
--active of the neurons per token, with power-law hotness (neuron of hotness rank k is
predicted with probability ∝ k^-alpha, capped at 0.999, mean --active; ranks are
shuffled per layer), and the true gate activation relu(gate·rmsnorm(h)) is positive for
most predicted neurons and mostly zero for the others. Construction, per layer:

  * bias channel: residual channel 0 is carried only by the embeddings: token_embd
    column 0 = B (= sqrt(n_embd), the other channels ~ N(0, 1)); attn_q/k/v and ffn_up
    ignore input channel 0 (column 0 zero); attn_output and ffn_down_t never write it
    (row 0 / column 0 zero). So h_0 = B in every layer and every other channel depends
    on the token. attn_output and ffn_down are small (std --out-std) so the residual
    stream does not drift far from the embeddings.
  * neuron r has a target probability p_r and latent z_r = Phi^-1(p_r).
  * predictor: hidden unit 0 is h_0/B = 1 (fc1 row 0 = e_0/B); the other hidden units
    come in pairs (w_j, -w_j), so relu(w_j·h) - relu(-w_j·h) = w_j·h is linear.
    fc2 row r = [z_r - m_r, +a_r1, -a_r1, +a_r2, -a_r2, ...] with a_r scaled so that
    the noise a_r·(W h) has unit variance and m_r its mean over simulated tokens:
    score_r = z_r + N(0, 1), so P(score_r >= 0) = p_r.
  * gate row r = lambda_r·(score_r as a linear function of h) + independent noise whose
    standard deviation (relative to the score's) is --gate-noise: the gate agrees with
    the predictor up to that noise. Row 0 of each matrix absorbs the means.
  * means and variances are measured on simulated tokens pushed through the layers as
    they are generated (embedding rows of random token ids through a numpy forward
    pass: attention without RoPE, dense ReLU FFN, float weights); the statistics
    printed at the end are measured on a second, held-out set of simulated tokens with
    the quantized predictor and gate.

The dense twin holds byte-identical tensors except ffn_down, which is the float down
matrix transposed and quantized along the other axis (Q4_0 blocks run along rows): same
shapes, types and byte counts as a real conversion, values equal up to quantization.

Tensors are generated, quantized and written one at a time (memory: a few of the
largest float matrices, ~1.5 GB for 7b); both files are written in one pass.

--unique-layers K builds only K layers that way and repeats their bytes for the others
(layer l is layer l mod K): the file has the full shape and the same per-layer sparsity,
in the time of K layers (the 7B pair in about a minute: for benchmarks on a machine
whose time is short, such as tests/gpu/compare.sh's GPU runs). Statistics cover the K.

Examples:
    make_synthetic_powerinfer.py --preset 1b -o /work/bench-models/synth-1b
    make_synthetic_powerinfer.py --preset 13b --unique-layers 2 -o /tmp/synth-13b
    make_synthetic_powerinfer.py --preset tiny --type f16 -o /tmp/synth-tiny
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_synthetic_llama as msl  # noqa: E402

gguf = msl.gguf
QT = msl.QT
from gguf.quants import dequantize  # noqa: E402

PRESETS = {
    "tiny": dict(msl.PRESETS["tiny"]),
    "1b": dict(msl.PRESETS["1b"]),
    "7b": dict(n_embd=4096, n_layer=32, n_ff=11008, n_head=32, n_head_kv=32, n_vocab=32000,
               n_ctx=4096, rope_base=10000.0, rms_eps=1e-5),
    "13b": dict(n_embd=5120, n_layer=40, n_ff=13824, n_head=40, n_head_kv=40, n_vocab=32000,
                n_ctx=4096, rope_base=10000.0, rms_eps=1e-5),
}
TYPES = {k: msl.TYPES[k] for k in ("q4_0", "q8_0", "f16")}
W_STD = 0.02  # q, k, v, up, output, gate rows


def powerlaw_probs(n, mean, alpha, rng, p_min=1e-4, p_max=0.999):
    """p_r for n neurons: c·rank^-alpha clipped to [p_min, p_max], mean `mean`, shuffled."""
    rank = np.arange(1, n + 1, dtype=np.float64)
    lo, hi = 1e-9, 1e9
    for _ in range(200):
        c = (lo * hi) ** 0.5
        if np.clip(c * rank ** -alpha, p_min, p_max).mean() < mean:
            lo = c
        else:
            hi = c
    p = np.clip(c * rank ** -alpha, p_min, p_max)
    return p[rng.permutation(n)]


def probit(p):
    nd = statistics.NormalDist()
    return np.array([nd.inv_cdf(float(x)) for x in p], dtype=np.float64)


def rmsnorm(x, eps):
    return x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + eps)


def attention(x, wq, wk, wv, n_head, n_head_kv):
    """Causal multi-head attention over the rows of x (one sequence), without RoPE."""
    T, n = x.shape
    hd = n // n_head
    q = (x @ wq.T).reshape(T, n_head, hd)
    k = (x @ wk.T).reshape(T, n_head_kv, hd)
    v = (x @ wv.T).reshape(T, n_head_kv, hd)
    g = n_head // n_head_kv
    out = np.empty((T, n_head, hd), dtype=np.float32)
    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    for hh in range(n_head):
        s = q[:, hh] @ k[:, hh // g].T / np.float32(np.sqrt(hd)) + mask
        s = np.exp(s - s.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        out[:, hh] = s @ v[:, hh // g]
    return out.reshape(T, n)


class Out:
    """Both files, written in one pass: tensors go to one or both writers in plan order."""

    def __init__(self, prefix, h, a, qtype, ftype, pred_qtype):
        self.h, self.qtype, self.pred_qtype = h, qtype, pred_qtype
        self.paths = (prefix + ".powerinfer.gguf", prefix + ".dense.gguf")
        self.w = [gguf.GGUFWriter(p, "llama") for p in self.paths]
        for i, w in enumerate(self.w):
            msl.add_llama_keys(w, a.name or f"synthetic-relu-llama-{a.preset}", h, ftype)
            if i == 0:
                w.add_float32("powerinfer.sparse_threshold", 0.0)
            else:
                w.add_string("powerinfer.ffn_activation", "relu")
        self.plan = self._plan()
        self.total = [0, 0]
        for name, shape, qt, which in self.plan:
            nb = msl.nbytes_of(shape, qt)
            dt = {QT.F32: np.float32, QT.F16: np.float16}.get(qt, np.uint8)
            for i in which:
                self.total[i] += nb
                self.w[i].add_tensor_info(name, msl.byte_shape(shape, qt), np.dtype(dt), nb,
                                          raw_dtype=None if qt in (QT.F32, QT.F16) else qt)
        for w in self.w:
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_ti_data_to_file()
        self.next = 0
        self.keep = None  # {name: encoded data} of the layers to repeat

    def _plan(self):
        """(name, numpy shape [rows, cols], type, writers) in file order."""
        h, q, pq = self.h, self.qtype, self.pred_qtype
        e, f, v, R = h["n_embd"], h["n_ff"], h["n_vocab"], h["rank"]
        n_kv = e // h["n_head"] * h["n_head_kv"]
        both, sp, de = (0, 1), (0,), (1,)
        plan = [("token_embd.weight", (v, e), q, both), ("output_norm.weight", (e,), QT.F32, both),
                ("output.weight", (v, e), q, both)]
        for i in range(h["n_layer"]):
            b = f"blk.{i}."
            plan += [(b + "attn_norm.weight", (e,), QT.F32, both),
                     (b + "attn_q.weight", (e, e), q, both),
                     (b + "attn_k.weight", (n_kv, e), q, both),
                     (b + "attn_v.weight", (n_kv, e), q, both),
                     (b + "attn_output.weight", (e, e), q, both),
                     (b + "ffn_norm.weight", (e,), QT.F32, both),
                     (b + "ffn_gate.weight", (f, e), q, both),
                     (b + "ffn_up.weight", (f, e), q, both),
                     (b + "ffn_down_t.weight", (f, e), q, sp),
                     (b + "ffn_down.weight", (e, f), q, de),
                     (b + "fc1.weight", (R, e), pq, sp),
                     (b + "fc2.weight", (f, R), pq, sp)]
        return plan

    def write(self, name, x):
        """Encode float32 x and write it; returns the encoded array."""
        pname, shape, qt, which = self.plan[self.next]
        assert pname == name and tuple(x.shape) == tuple(shape), (name, pname, x.shape, shape)
        self.next += 1
        data = x if qt == QT.F32 else msl.encode(np.ascontiguousarray(x, np.float32), qt)
        for i in which:
            self.w[i].write_tensor_data(data)
        if self.keep is not None and name.startswith("blk."):
            self.keep[name] = data
        return data, qt

    def repeat_layer(self, li, src):
        """Write layer li's tensors as the bytes of layer src (kept by write)."""
        pre, spre = f"blk.{li}.", f"blk.{src}."
        while self.next < len(self.plan) and self.plan[self.next][0].startswith(pre):
            pname, _, _, which = self.plan[self.next]
            self.next += 1
            data = self.keep[spre + pname[len(pre):]]
            for i in which:
                self.w[i].write_tensor_data(data)

    def close(self):
        assert self.next == len(self.plan)
        for w in self.w:
            w.close()
        with open(self.paths[0], "r+b") as f:  # PowerInfer's converters do the same
            f.write(b"PWRI")


def deq(data, qt, shape):
    if qt == QT.F32:
        return data
    if qt == QT.F16:
        return data.astype(np.float32)
    return dequantize(data, qt).reshape(shape).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True, metavar="PREFIX",
                    help="writes PREFIX.powerinfer.gguf and PREFIX.dense.gguf")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="1b")
    ap.add_argument("--type", choices=sorted(TYPES), default="q4_0")
    ap.add_argument("--n-layer", type=int, default=None, help="override the preset's n_layer")
    ap.add_argument("--rank", type=int, default=None, help="predictor rank R (default n_embd/8)")
    ap.add_argument("--active", type=float, default=0.10,
                    help="target mean fraction of neurons predicted active (default 0.10)")
    ap.add_argument("--alpha", type=float, default=1.0,
                    help="power-law exponent of neuron hotness (default 1.0)")
    ap.add_argument("--gate-noise", type=float, default=0.3,
                    help="gate noise relative to the predictor's (default 0.3)")
    ap.add_argument("--out-std", type=float, default=None,
                    help="std of attn_output and ffn_down weights (default 0.4/sqrt(n_embd))")
    ap.add_argument("--sim-tokens", type=int, default=128,
                    help="simulated tokens for calibration, and again for validation (default 128)")
    ap.add_argument("--unique-layers", type=int, default=0, metavar="K",
                    help="build K layers and repeat them (layer l = layer l mod K; default: all distinct)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--name", default=None, help="general.name")
    a = ap.parse_args()

    h = dict(PRESETS[a.preset])
    if a.n_layer:
        h["n_layer"] = a.n_layer
    if a.unique_layers < 0:
        sys.exit("--unique-layers must be >= 0")
    e, F, V, L = h["n_embd"], h["n_ff"], h["n_vocab"], h["n_layer"]
    R = h["rank"] = a.rank or e // 8
    if R < 3:
        sys.exit("--rank must be at least 3")
    if not 0 < a.active < 1:
        sys.exit("--active must be in (0, 1)")
    qtype, ftype = TYPES[a.type]
    pred_qtype = qtype if R % 32 == 0 else QT.F16
    if e % 32 or F % 32:
        sys.exit("n_embd and n_ff must be multiples of 32")
    B = float(np.sqrt(e))
    out_std = a.out_std or 0.4 / np.sqrt(e)
    T = a.sim_tokens
    eps = h["rms_eps"]
    P = (R - 1) // 2  # predictor directions

    t0 = time.time()
    out = Out(a.output, h, a, qtype, ftype, pred_qtype)
    rng0 = np.random.default_rng([a.seed, 0])

    # token_embd: column 0 = B, others N(0, 1)
    emb = rng0.standard_normal((V, e), dtype=np.float32)
    emb[:, 0] = B
    data, qt = out.write("token_embd.weight", emb)
    del emb
    ids = rng0.integers(3, V, size=2 * T)
    H = deq(data[ids], qt, (2 * T, e))  # simulated residual streams: [cal | val]
    del data
    out.write("output_norm.weight", np.ones(e, np.float32))
    x = rng0.standard_normal((V, e), dtype=np.float32)
    x *= np.float32(W_STD)
    out.write("output.weight", x)
    del x
    print(f"[{time.time() - t0:6.1f} s] embeddings written")

    stats = []
    K = a.unique_layers if 0 < a.unique_layers < L else L
    if K < L:
        out.keep = {}
    for li in range(L):
        if li >= K:
            out.repeat_layer(li, li % K)
            if li == K or li == L - 1:
                print(f"[{time.time() - t0:6.1f} s] layer {li}: the bytes of layer {li % K}"
                      + (f" (to layer {L - 1})" if li == K else ""), flush=True)
            continue
        rng = np.random.default_rng([a.seed, 1 + li])
        b = f"blk.{li}."
        n_kv = e // h["n_head"] * h["n_head_kv"]
        out.write(b + "attn_norm.weight", np.ones(e, np.float32))
        ws = {}
        for nm, rows_ in (("attn_q", e), ("attn_k", n_kv), ("attn_v", n_kv)):
            w = rng.standard_normal((rows_, e), dtype=np.float32) * np.float32(W_STD)
            w[:, 0] = 0
            out.write(b + nm + ".weight", w)
            ws[nm] = w
        wo = rng.standard_normal((e, e), dtype=np.float32) * np.float32(out_std)
        wo[0, :] = 0
        out.write(b + "attn_output.weight", wo)
        # simulated ffn_inp for the calibration and validation token sets
        xin = rmsnorm(H, eps).astype(np.float32)
        Hf = H.copy()
        for s in (slice(0, T), slice(T, 2 * T)):
            Hf[s] += attention(xin[s], ws["attn_q"], ws["attn_k"], ws["attn_v"],
                               h["n_head"], h["n_head_kv"]) @ wo.T
        del ws, wo, xin
        out.write(b + "ffn_norm.weight", np.ones(e, np.float32))
        hc, hv = Hf[:T], Hf[T:]

        # neuron probabilities and predictor directions
        p = powerlaw_probs(F, a.active, a.alpha, rng)
        z = probit(p)
        W = rng.standard_normal((P, e), dtype=np.float32) / np.float32(np.sqrt(e))
        W[:, 0] = 0
        A = rng.standard_normal((F, P), dtype=np.float32)
        noise = (hc @ W.T) @ A.T                      # [T, F]
        s = noise.std(axis=0).astype(np.float32) + np.float32(1e-12)
        A /= s[:, None]
        m = (noise.mean(axis=0) / s).astype(np.float32)
        del noise
        # gate: lambda·(score as a function of h) + eps_r
        G = A @ W                                     # [F, e]: the score's linear part
        G[:, 0] = (z.astype(np.float32) - m) / np.float32(B)
        Eps = rng.standard_normal((F, e), dtype=np.float32)
        Eps[:, 0] = 0
        en = hc @ Eps.T                               # [T, F]
        es = en.std(axis=0).astype(np.float32) + np.float32(1e-12)
        Eps *= (np.float32(a.gate_noise) / es)[:, None]
        Eps[:, 0] = -(en.mean(axis=0) * np.float32(a.gate_noise) / es) / np.float32(B)
        del en
        G += Eps
        del Eps
        G *= (np.float32(W_STD) / (G.std(axis=1) + np.float32(1e-12)))[:, None]
        gdata, gqt = out.write(b + "ffn_gate.weight", G)
        up = rng.standard_normal((F, e), dtype=np.float32) * np.float32(W_STD)
        up[:, 0] = 0
        out.write(b + "ffn_up.weight", up)
        down_t = rng.standard_normal((F, e), dtype=np.float32) * np.float32(out_std)
        down_t[:, 0] = 0
        out.write(b + "ffn_down_t.weight", down_t)
        out.write(b + "ffn_down.weight", np.ascontiguousarray(down_t.T))
        fc1 = np.zeros((R, e), dtype=np.float32)
        fc1[0, 0] = 1.0 / B
        fc1[1:2 * P + 1:2] = W
        fc1[2:2 * P + 2:2] = -W
        d1, q1 = out.write(b + "fc1.weight", fc1)
        fc2 = np.zeros((F, R), dtype=np.float32)
        fc2[:, 0] = z.astype(np.float32) - m
        fc2[:, 1:2 * P + 1:2] = A
        fc2[:, 2:2 * P + 2:2] = -A
        d2, q2 = out.write(b + "fc2.weight", fc2)
        del W, A, fc1, fc2

        # validation on held-out tokens, with the weights as stored
        f1, f2, gq = deq(d1, q1, (R, e)), deq(d2, q2, (F, R)), deq(gdata, gqt, (F, e))
        score = np.maximum(hv @ f1.T, 0) @ f2.T
        pred = score >= 0
        xv = rmsnorm(hv, eps).astype(np.float32)
        gpos = (xv @ gq.T) > 0
        del f1, f2, gq
        npred = pred.sum()
        stats.append(dict(
            frac=pred.mean(), frac_gate=gpos.mean(),
            recall=(pred & gpos).sum() / max(gpos.sum(), 1),
            p_gate_pred=(pred & gpos).sum() / max(npred, 1),
            p_gate_notpred=(~pred & gpos).sum() / max((~pred).sum(), 1),
            freq=pred.mean(axis=0), target=p))
        # dense ReLU FFN (float weights) to the next layer's input
        for sl in (slice(0, T), slice(T, 2 * T)):
            xs = rmsnorm(Hf[sl], eps).astype(np.float32)
            act = np.maximum(xs @ G.T, 0) * (xs @ up.T)
            Hf[sl] += act @ down_t
        H = Hf
        del G, up, down_t
        st = stats[-1]
        print(f"[{time.time() - t0:6.1f} s] layer {li}: predicted {st['frac']:.3f}, "
              f"gate>0 {st['frac_gate']:.3f}, P(gate>0|pred) {st['p_gate_pred']:.3f}, "
              f"P(gate>0|not pred) {st['p_gate_notpred']:.3f}, recall {st['recall']:.3f}, "
              f"|h_rest| rms {np.sqrt(np.mean(H[:, 1:] ** 2)):.2f}", flush=True)
    out.close()
    dt = time.time() - t0

    def mean(k):
        return float(np.mean([s[k] for s in stats]))
    freq = np.concatenate([s["freq"] for s in stats])
    target = np.concatenate([s["target"] for s in stats])
    cover = []
    for st in stats:
        f_ = np.sort(st["freq"])[::-1]
        c = np.cumsum(f_) / max(f_.sum(), 1e-12)
        cover.append([c[int(F * q) - 1] for q in (0.01, 0.1, 0.2, 0.5)])
    cover = np.mean(cover, axis=0)
    print(f"validation ({T} held-out simulated tokens x {len(stats)} layers, stored weights):")
    print(f"  predicted-active fraction {mean('frac'):.4f} (target {a.active}), "
          f"gate>0 fraction {mean('frac_gate'):.4f}")
    print(f"  P(gate>0 | predicted) {mean('p_gate_pred'):.4f}, "
          f"P(gate>0 | not predicted) {mean('p_gate_notpred'):.4f}, "
          f"recall P(predicted | gate>0) {mean('recall'):.4f}")
    print(f"  hotness: top 1%/10%/20%/50% of neurons take {cover[0]:.2f}/{cover[1]:.2f}/"
          f"{cover[2]:.2f}/{cover[3]:.2f} of the predicted activations; "
          f"corr(measured, target p) {np.corrcoef(freq, target)[0, 1]:.3f}")
    print(f"  always-predicted (>=95% of tokens) neurons {np.mean(freq >= 0.95):.4f}, "
          f"never-predicted {np.mean(freq == 0):.4f}")
    for path, tot in zip(out.paths, out.total):
        print(f"wrote {path}: {tot / 2**20:.1f} MiB of tensor data")
    print(f"{a.preset} {h} {a.type}, predictor {pred_qtype.name} rank {R}: {dt:.1f} s "
          f"({dt / L:.2f} s per layer)")


if __name__ == "__main__":
    main()
