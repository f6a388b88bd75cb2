#!/usr/bin/env python3
"""Train activation predictors for a model, with this engine, in PowerInfer's layout.

    train_predictor.py -m MODEL.gguf (--calib TEXT | --random-tokens N)
                       [-o OUT.gguf] [--pt-dir DIR] [--recall 0.9] [--ranks 16,32,...]

A predictor of layer l guesses, from the FFN's predictor input h (the residual stream
before the FFN's norm), which neurons the FFN will use for a token:

    score = fc2 . relu(fc1 . h),   fc1 {n_embd, R} (R x n_embd), fc2 {R, n_ff},

neuron r used iff score[r] >= 0 (no biases, the rank R per layer: PowerInfer's layout,
docs/formats.md). PowerInfer never published how it trains them; this is one way:

1. Pairs (h, active set) come from this engine: the model runs densely over the
   calibration tokens in windows of --ctx tokens, and pi_ctx_set_ffn_probe hands over
   each layer's h, the gate's activation a = act(gate . xn) and the intermediate. A
   neuron is active (the label) when
     - a file made by pi-sparsify: |a| > t_l, the file's thresholds (what
       PI_SPARSE_THRESHOLD computes; a ReLU model sparsified at --sparsity 0 has t_l = 0,
       so exactly the neurons that fire); a --method teal file: |intermediate| > t_l;
     - a PowerInfer (PWRI) file: the intermediate is non-zero (the ReLU fired).
   Any other dense file is refused: run pi-sparsify on it first.
2. The last --held-out fraction of the windows is kept for validation; the rest trains.
3. Per layer and per rank R of --ranks, a two-layer MLP is trained with Adam on the
   weighted logistic loss  w y softplus(-s) + (1 - y) softplus(s),  each token's h
   divided by its RMS (the decision score >= 0 does not change: the score has no
   biases, so it scales with h) and each feature by its RMS (folded into fc1
   afterwards, so the file sees raw h). The
   positive weight w starts at 1 and grows by 1.5x per round until the validation
   recall (neuron-tokens predicted and active / active) reaches --recall, at most
   --rounds rounds of --epochs epochs each (by default as many as 200 minibatch steps
   take).
4. Among the ranks that reach the recall, the one reading the fewest bytes per token
   is kept: the predictor's own (R (n_embd + n_ff) F16 values) plus the rows of the
   neurons it predicts (gate, up and down rows at the file's types); when none reaches
   it, the rank with the highest recall.

Output: a table of rank, weight, recall and precision per layer on the validation
tokens; with -o, a copy of the sparsified file with blk.N.fc1.weight and
blk.N.fc2.weight (F16, or --pred-type f32) after its tensors and the keys
powerinfer.predictor.* (docs/formats.md), which then runs in PI_SPARSE_PREDICTOR mode by
default (the gate is computed only for the predicted rows); with --pt-dir, model_N.pt
files (fc1.weight [R, n_embd], fc2.weight [n_ff, R], F16; the zip layout of torch.save,
written without torch) and config.json {"sparse_threshold": 0.0} for PowerInfer's
converter (or ours, tools/convert_hf_to_powerinfer.py).

Exit status: 0; 3 when some layer stays below the target recall (the outputs are written
all the same, with the best rank it found); 1 or 2 on errors.

Needs numpy and gguf (the package), and the library (PI_LIBRARY or --library). No torch:
the predictors are small enough for numpy, and CI has no torch. --threads sets the
BLAS threads numpy may use (default 1) and the engine's.
"""

import argparse
import json
import os
import struct
import sys
import time
import zipfile


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="a pi-sparsify or PowerInfer file")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--calib", help="calibration text (UTF-8 file)")
    src.add_argument("--random-tokens", type=int, metavar="N",
                     help="N uniformly random token ids instead (models without a "
                          "meaningful tokenizer, such as random test fixtures)")
    ap.add_argument("-o", "--output", help="write the model with its predictors here")
    ap.add_argument("--pt-dir", help="write model_N.pt and config.json here")
    ap.add_argument("--recall", type=float, default=0.9,
                    help="target recall per layer on the validation tokens (0.9)")
    ap.add_argument("--ranks", default="",
                    help="ranks to try, comma-separated (default: powers of two from 16 "
                         "to min(n_embd, n_ff / 2))")
    ap.add_argument("--ctx", type=int, default=256, help="tokens per window (256)")
    ap.add_argument("--max-tokens", type=int, default=16384,
                    help="calibration tokens used at most (16384)")
    ap.add_argument("--held-out", type=float, default=0.2,
                    help="fraction of the windows kept for validation (0.2)")
    ap.add_argument("--epochs", type=int, default=0,
                    help="epochs per round (default: enough for 200 minibatch steps)")
    ap.add_argument("--rounds", type=int, default=6,
                    help="rounds of raising the positive weight, at most (6)")
    ap.add_argument("--batch", type=int, default=256, help="minibatch (256)")
    ap.add_argument("--lr", type=float, default=3e-3, help="Adam's step size (3e-3)")
    ap.add_argument("--pred-type", choices=("f16", "f32"), default="f16",
                    help="type of fc1/fc2 in the output file (f16)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--library", help="libpowerinfer.so (default: PI_LIBRARY or the "
                                      "usual search)")
    ap.add_argument("-q", "--quiet", action="store_true", help="only the table")
    a = ap.parse_args(argv)
    if not 0.0 < a.recall <= 1.0:
        ap.error("--recall must be in (0, 1]")
    if not 0.0 < a.held_out < 1.0:
        ap.error("--held-out must be in (0, 1)")
    if not a.output and not a.pt_dir:
        ap.error("nothing to write: give -o OUT.gguf and/or --pt-dir DIR")
    if a.ctx < 2 or a.epochs < 0 or a.rounds < 1 or a.batch < 1 or a.threads < 1:
        ap.error("--ctx, --epochs, --rounds, --batch and --threads must be positive")
    try:
        a.ranks = [int(r) for r in a.ranks.split(",") if r.strip()]
    except ValueError:
        ap.error("--ranks: comma-separated integers")
    if any(r < 1 for r in a.ranks):
        ap.error("--ranks must be positive")
    return a


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None:  # BLAS threads are fixed when numpy loads
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)
    if ARGS.library:
        os.environ["PI_LIBRARY"] = ARGS.library

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "python"))


def log(*a):
    if ARGS is None or not ARGS.quiet:
        print(*a, file=sys.stderr, flush=True)


# ---- collection ------------------------------------------------------------------------
class Collected:
    """Per layer: h [N][E] (float16 when it fits, else float32) and labels [N][F]
    (bit-packed along F) of every calibration token, in window order."""

    def __init__(self, n_layer):
        self.h = [[] for _ in range(n_layer)]
        self.y = [[] for _ in range(n_layer)]

    def finish(self):
        for l in range(len(self.h)):
            h = np.concatenate(self.h[l])
            h16 = h.astype(np.float16)
            self.h[l] = h16 if np.isfinite(h16).all() else h
            self.y[l] = np.concatenate(self.y[l])

    def labels(self, l, rows, F):
        return np.unpackbits(self.y[l][rows], axis=1, count=F).astype(bool)


def file_kind(path):
    """("sparsified", thresholds) for a pi-sparsify file ("teal" for one made with
    --method teal), ("pwri", None) for a PowerInfer file; SystemExit for anything
    else."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PWRI":
        return "pwri", None
    import gguf
    r = gguf.GGUFReader(path)
    if "powerinfer.sparsify.thresholds" not in r.fields:
        sys.exit(f"{path}: neither a pi-sparsify file nor a PowerInfer (PWRI) file; run "
                 "pi-sparsify on it first (--sparsity 0 for a ReLU model keeps exactly the "
                 "neurons that fire)")
    thr = np.array(r.fields["powerinfer.sparsify.thresholds"].contents(), np.float32)
    if any(t.name.endswith((".fc1.weight", ".fc2.weight")) for t in r.tensors):
        sys.exit(f"{path} already has predictors: train on the file pi-sparsify wrote")
    if any(t.name.endswith(".ffn_down_exps_t.weight") for t in r.tensors):
        sys.exit(f"{path} has mixture-of-experts layers: their predictors would be per "
                 "expert, which PowerInfer's layout (one fc1/fc2 per layer) cannot hold; "
                 "run the file in threshold mode")
    method = r.fields["powerinfer.sparsify.method"].contents()
    return ("teal" if method == "teal" else "sparsified"), thr


def windows_of(model, args, n_vocab):
    if args.calib:
        with open(args.calib, encoding="utf-8") as f:
            toks = model.tokenize(f.read(), add_special=True)
    else:
        rng = np.random.default_rng(args.seed + 1)
        toks = rng.integers(0, n_vocab, args.random_tokens).tolist()
    toks = toks[:args.max_tokens]
    w = [toks[i:i + args.ctx] for i in range(0, len(toks), args.ctx)]
    w = [x for x in w if len(x) >= 2]
    if len(w) < 2:
        sys.exit(f"{args.calib or 'random tokens'}: {len(toks)} tokens make fewer than two "
                 f"windows of --ctx {args.ctx}: nothing to validate on")
    return w


def collect(model, windows, kind, thr, threads):
    """Run the model densely over each window from position 0 and keep each layer's
    (h, label) pairs."""
    import powerinfer as pi
    L, F = model.n_layer, model.n_ff
    out = Collected(L)

    def probe(l, h, act, inter):
        lab = (np.abs(act) > thr[l] if kind == "sparsified" else
               np.abs(inter) > thr[l] if kind == "teal" else inter != 0)
        out.h[l].append(h.copy())
        out.y[l].append(np.packbits(lab, axis=1))
    n_ctx = max(len(w) for w in windows)
    with pi.Context(model, n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads,
                    sparse_mode="dense") as ctx:
        ctx.set_ffn_probe(probe)
        for i, w in enumerate(windows):
            ctx.reset()
            ctx.decode(w)
            if (i + 1) % 16 == 0:
                log(f"  collected {i + 1}/{len(windows)} windows")
        ctx.set_ffn_probe(None)
    out.finish()
    assert all(len(out.h[l]) == sum(len(w) for w in windows) for l in range(L))
    assert all(out.y[l].shape[1] * 8 >= F for l in range(L))
    return out


# ---- training ----------------------------------------------------------------------------
def evaluate(W1, W2, X, Y, chunk=4096):
    """Micro recall and precision over (token, neuron) pairs, and the mean number of
    neurons predicted per token, of score = W2 relu(W1 x) >= 0."""
    tp = pred = act = 0
    for i in range(0, len(X), chunk):
        s = np.maximum(X[i:i + chunk] @ W1.T, 0.0) @ W2.T
        p, y = s >= 0.0, Y[i:i + chunk]
        tp += int((p & y).sum())
        pred += int(p.sum())
        act += int(y.sum())
    recall = tp / act if act else 1.0
    precision = tp / pred if pred else 1.0
    return recall, precision, pred / len(X)


def adam_epochs(W, X, Y, w_pos, epochs, args, rng, state):
    """Minibatch Adam on the weighted logistic loss; W = [W1, W2] updated in place."""
    W1, W2 = W
    m, v, t = state
    n = len(X)
    for _ in range(epochs):
        order = rng.permutation(n)
        for i in range(0, n, args.batch):
            b = order[i:i + args.batch]
            x, y = X[b], Y[b]
            hp = x @ W1.T                                  # [B][R]
            hr = np.maximum(hp, 0.0)
            s = hr @ W2.T                                  # [B][F]
            p = 1.0 / (1.0 + np.exp(-np.clip(s, -40.0, 40.0)))
            # d/ds of w y softplus(-s) + (1 - y) softplus(s), mean over the batch
            g = (np.where(y, -w_pos * (1.0 - p), p) / len(b)).astype(np.float32)
            gW2 = g.T @ hr
            gh = (g @ W2) * (hp > 0)
            gW1 = gh.T @ x
            t += 1
            for k, gr in ((0, gW1), (1, gW2)):
                m[k] = 0.9 * m[k] + 0.1 * gr
                v[k] = 0.999 * v[k] + 0.001 * gr * gr
                step = args.lr * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)
                W[k] -= step.astype(np.float32)
    state[2] = t


def train_rank(R, X, Y, Xv, Yv, args, rng):
    """Train one rank; raise the positive weight until the validation recall reaches
    the target. Returns (W1, W2, w_pos, recall, precision, predicted per token)."""
    E, F = X.shape[1], Y.shape[1]
    W = [(rng.standard_normal((R, E)) / np.sqrt(E)).astype(np.float32),
         (rng.standard_normal((F, R)) / np.sqrt(R)).astype(np.float32)]
    state = [[np.zeros_like(W[0]), np.zeros_like(W[1])],
             [np.zeros_like(W[0]), np.zeros_like(W[1])], 0]
    w_pos = 1.0
    best = None
    epochs = args.epochs or max(1, -(-200 * args.batch // len(X)))
    for rnd in range(args.rounds):
        adam_epochs(W, X, Y, w_pos, epochs, args, rng, state)
        rec, prec, npred = evaluate(W[0], W[1], Xv, Yv)
        best = (W[0].copy(), W[1].copy(), w_pos, rec, prec, npred)
        if rec >= args.recall:
            break
        w_pos *= 1.5
    return best


def neuron_bytes(path, L):
    """Bytes a predicted neuron costs per token in layer l: its gate, up and down rows
    at the file's types (from the file's tensor sizes)."""
    import gguf
    if open(path, "rb").read(4) == b"PWRI":  # the gguf package reads only GGUF magic
        return None
    r = gguf.GGUFReader(path)
    T = {t.name: t for t in r.tensors}
    out = []
    for l in range(L):
        b = 0
        for part in ("ffn_gate", "ffn_up", "ffn_down_t"):
            t = T.get(f"blk.{l}.{part}.weight")
            if t is not None:
                b += int(t.n_bytes) // int(t.shape[1])
        out.append(b)
    return out


def train_layer(l, col, n_train, F, args, row_bytes):
    rng = np.random.default_rng(args.seed * 1000003 + l)
    h = col.h[l]
    X = h[:n_train].astype(np.float32)
    Xv = h[n_train:].astype(np.float32)
    Y = col.labels(l, slice(0, n_train), F)
    Yv = col.labels(l, slice(n_train, None), F)
    # Inputs: each token's h divided by its RMS, then each feature by its RMS over the
    # training tokens. The first changes nothing the file computes: without biases the
    # score is positively homogeneous in h (score(c h) = c score(h), c > 0), so its
    # sign, the decision, is the same; as the FFN sees rmsnorm(h), the labels do not
    # depend on that scale either. The second is folded into fc1.
    for A in (X, Xv):
        A /= np.sqrt((A * A).mean(1, keepdims=True)) + 1e-12
    scale = np.sqrt((X * X).mean(0)) + 1e-6
    X /= scale
    Xv /= scale
    E = X.shape[1]
    ranks = args.ranks or [r for r in (16, 32, 64, 128, 256, 512, 1024, 2048)
                           if r <= max(16, min(E, F // 2))]
    tried = []
    for R in ranks:
        t0 = time.time()
        W1, W2, w_pos, rec, prec, npred = train_rank(R, X, Y, Xv, Yv, args, rng)
        cost = 2 * R * (E + F) + npred * row_bytes
        tried.append((cost, R, W1 / scale[None, :], W2, w_pos, rec, prec, npred))
        log(f"  layer {l} rank {R}: recall {rec:.4f} precision {prec:.4f} weight "
            f"{w_pos:.2f}, {npred:.1f} of {F} predicted, {cost / 1024:.1f} KiB/token "
            f"({time.time() - t0:.1f} s)")
        ok = [x for x in tried if x[5] >= args.recall]
        # bytes grow with the rank once the target is met: stop after two more that cost more
        if ok and len(tried) - tried.index(min(ok, key=lambda x: x[0])) > 2:
            break
    ok = [x for x in tried if x[5] >= args.recall]
    pick = min(ok, key=lambda x: x[0]) if ok else max(tried, key=lambda x: x[5])
    active = float(Yv.sum()) / len(Yv)
    return {"rank": pick[1], "fc1": pick[2], "fc2": pick[3], "weight": pick[4],
            "recall": pick[5], "precision": pick[6], "predicted": pick[7], "active": active,
            "met": bool(ok)}


# ---- output --------------------------------------------------------------------------------
def write_gguf(src, dst, results, args, n_tokens):
    """src's metadata and tensors, then blk.N.fc1/fc2 and the powerinfer.predictor keys."""
    import gguf
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    tmp = dst + ".tmp"
    w = gguf.GGUFWriter(tmp, arch)
    for field in r.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        if field.name.startswith("powerinfer.predictor."):
            continue  # replaced below
        vt = field.types[0]
        sub = field.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), vt, sub_type=sub)
    F32 = gguf.GGUFValueType.FLOAT32
    w.add_key_value("powerinfer.predictor.trainer", "tools/train_predictor.py",
                    gguf.GGUFValueType.STRING)
    w.add_key_value("powerinfer.predictor.target_recall", float(args.recall), F32)
    for key in ("recall", "precision"):
        w.add_key_value(f"powerinfer.predictor.{key}", [float(x[key]) for x in results],
                        gguf.GGUFValueType.ARRAY, sub_type=F32)
    w.add_key_value("powerinfer.predictor.calibration",
                    os.path.basename(args.calib) if args.calib else
                    f"{args.random_tokens} random tokens", gguf.GGUFValueType.STRING)
    w.add_key_value("powerinfer.predictor.calibration_tokens", int(n_tokens),
                    gguf.GGUFValueType.UINT64)
    dt = np.float16 if args.pred_type == "f16" else np.float32
    extra = []
    for l, x in enumerate(results):
        extra.append((f"blk.{l}.fc1.weight", np.ascontiguousarray(x["fc1"], dtype=dt)))
        extra.append((f"blk.{l}.fc2.weight", np.ascontiguousarray(x["fc2"], dtype=dt)))
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    for name, a in extra:
        w.add_tensor_info(name, a.shape, a.dtype, a.nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data, tensor_endianess=r.endianess)
    for _, a in extra:
        w.write_tensor_data(a)
    w.close()
    os.replace(tmp, dst)


def _pickle_state_dict(tensors):
    """The data.pkl torch.save writes for an OrderedDict-free dict {name: tensor} of
    contiguous F16 tensors (protocol 2, the memo numbering torch's pickler gives), with
    storage keys "0", "1", ... in order. tensors: [(name, shape)]."""
    out = bytearray(b"\x80\x02}q\x00(")
    memo = [1]

    def put():
        i = memo[0]
        memo[0] += 1
        return b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)

    def uni(s):
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    def intop(v):
        if v < 256:
            return b"K" + bytes([v])
        if v < 65536:
            return b"M" + struct.pack("<H", v)
        return b"J" + struct.pack("<i", v)

    ids = {}
    for key, (name, shape) in enumerate(tensors):
        out += uni(name) + put()
        if "rebuild" not in ids:
            out += b"ctorch._utils\n_rebuild_tensor_v2\n"
            ids["rebuild"] = memo[0]
            out += put()
        else:
            out += b"h" + bytes([ids["rebuild"]])
        out += b"(("
        if "storage" not in ids:
            out += uni("storage")
            ids["storage"] = memo[0]
            out += put() + b"ctorch\nHalfStorage\n"
            ids["half"] = memo[0]
            out += put()
        else:
            out += b"h" + bytes([ids["storage"]]) + b"h" + bytes([ids["half"]])
        out += uni(str(key)) + put()
        if "cpu" not in ids:
            out += uni("cpu")
            ids["cpu"] = memo[0]
            out += put()
        else:
            out += b"h" + bytes([ids["cpu"]])
        numel = int(np.prod(shape))
        out += intop(numel) + b"t" + put() + b"Q" + intop(0)
        stride = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
        for seq in (shape, stride):
            out += b"".join(intop(int(v)) for v in seq)
            out += {1: b"\x85", 2: b"\x86", 3: b"\x87"}[len(seq)] + put()
        out += b"\x89"
        if "od" not in ids:
            out += b"ccollections\nOrderedDict\n"
            ids["od"] = memo[0]
            out += put()
        else:
            out += b"h" + bytes([ids["od"]])
        out += b")R" + put() + b"t" + put() + b"R" + put()
    out += b"u."
    return bytes(out)


def write_pt(path, arrays):
    """torch.save({name: F16 tensor}) for arrays [(name, 2-D array)], without torch: the
    zip archive torch writes (stored entries, data records 64-byte aligned, the same
    record names and order), readable by torch.load and tools/pt_reader.py."""
    name = os.path.splitext(os.path.basename(path))[0]
    arrays = [(k, np.ascontiguousarray(a, dtype="<f2")) for k, a in arrays]
    records = [("data.pkl", _pickle_state_dict([(k, a.shape) for k, a in arrays])),
               (".format_version", b"1"), (".storage_alignment", b"64"),
               ("byteorder", b"little")]
    records += [(f"data/{i}", a.tobytes()) for i, (_, a) in enumerate(arrays)]
    import hashlib
    digest = hashlib.sha256(b"".join(r[1] for r in records)).digest()
    serial = str(int.from_bytes(digest[:16], "little")).rjust(40, "0")[:40]
    records += [("version", b"3\n"), (".data/serialization_id", serial.encode())]
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for rec, data in records:
            info = zipfile.ZipInfo(f"{name}/{rec}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            # pad the local header's extra field ("FB" id, as torch) so the data is
            # 64-byte aligned
            hdr = 30 + len(info.filename.encode()) + 4
            pad = (-(z.fp.tell() + hdr)) % 64
            info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            z.writestr(info, data)
    os.replace(tmp, path)


def write_pt_dir(d, results):
    os.makedirs(d, exist_ok=True)
    for l, x in enumerate(results):
        write_pt(os.path.join(d, f"model_{l}.pt"),
                 [("fc1.weight", x["fc1"]), ("fc2.weight", x["fc2"])])
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"sparse_threshold": 0.0}, f, indent=1)
        f.write("\n")


# ---- main ------------------------------------------------------------------------------------
def main(args):
    import powerinfer as pi
    kind, thr = file_kind(args.model)
    if args.output and kind == "pwri":
        sys.exit("-o writes predictors into a pi-sparsify file; for a PowerInfer file use "
                 "--pt-dir and its converter")
    model = pi.Model(args.model, log=None)
    L, E, F = model.n_layer, model.n_embd, model.n_ff
    windows = windows_of(model, args, model.n_vocab)
    n_val = max(1, int(round(len(windows) * args.held_out)))
    train_w, val_w = windows[:-n_val], windows[-n_val:]
    n_train = sum(len(w) for w in train_w)
    t0 = time.time()
    labels = {"sparsified": "|act(gate)| > the file thresholds",
              "teal": "|act(gate) up| > the file thresholds", "pwri": "ReLU fired"}[kind]
    log(f"{args.model}: {L} layers, n_embd {E}, n_ff {F}; labels: {labels}; "
        f"{n_train} training and {sum(len(w) for w in val_w)} validation tokens")
    col = collect(model, train_w + val_w, kind, thr, args.threads)
    model.close()
    log(f"collected in {time.time() - t0:.1f} s")
    rb = neuron_bytes(args.model, L) or [6 * E] * L  # PWRI: as if F16 rows
    results = []
    for l in range(L):
        results.append(train_layer(l, col, n_train, F, args, rb[l]))
    print(f"{'layer':>5} {'rank':>5} {'weight':>7} {'active':>8} {'predicted':>9} "
          f"{'recall':>7} {'precision':>9}")
    for l, x in enumerate(results):
        print(f"{l:5d} {x['rank']:5d} {x['weight']:7.2f} {x['active']:8.1f} "
              f"{x['predicted']:9.1f} {x['recall']:7.4f} {x['precision']:9.4f}"
              + ("" if x["met"] else "  (below the target)"))
    if args.output:
        write_gguf(args.model, args.output, results, args, n_train)
        log(f"wrote {args.output}")
    if args.pt_dir:
        write_pt_dir(args.pt_dir, results)
        log(f"wrote {args.pt_dir}/model_0.pt .. model_{L - 1}.pt, config.json")
    log(f"done in {time.time() - t0:.1f} s")
    return 0 if all(x["met"] for x in results) else 3


if __name__ == "__main__":
    sys.exit(main(ARGS))
