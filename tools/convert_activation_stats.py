#!/usr/bin/env python3
"""Convert PowerInfer's activation statistics (activation/activation_N.pt) into our
activation-statistics side file (a GGUF; docs/formats.md, "Activation statistics side
file").

    convert_activation_stats.py ACTIVATION_DIR -o OUT.stats.gguf [--tokens N] [--name NAME]

ACTIVATION_DIR holds activation_0.pt ... activation_{L-1}.pt, one per layer, each a
torch.save'd 1-D tensor of n_ff per-neuron activation counts (or frequencies) of any
integer or floating dtype. The files are taken in NUMERIC order (activation_10 after
activation_9 -- PowerInfer's export_split.py sorts them lexicographically, a known bug
that pairs layers with the wrong statistics for models of more than 10 layers). The
indices must run 0..L-1 without a gap, and every tensor must have the same length.

The output has, per layer L in order, the F64 tensors blk.L.predicted, blk.L.active and
blk.L.both of shape {n_ff}: activation_L.pt goes to blk.L.active; predicted and both are
zero (PowerInfer's files say nothing about the predictor). tokens_predicted is 0 and
tokens_observed is --tokens (default 0 = unknown).

The .pt files are read with tools/pt_reader.py, which never runs code from the pickle
(torch is not needed). Writing needs the `gguf` package.

Exit status: 0 on success, 1 on any error (message on stderr, no output file left).
"""
import argparse
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pt_reader  # noqa: E402

ARCH = "activation_stats"
SOURCE = "powerinfer activation/*.pt"
NAME_RE = re.compile(r"^activation_([0-9]+)\.pt$")


class ConvertError(Exception):
    pass


def find_layer_files(d):
    """[(index, path)] sorted numerically; raises ConvertError on gaps and duplicates."""
    try:
        names = os.listdir(d)
    except OSError as e:
        raise ConvertError(f"cannot list {d}: {e}")
    found = {}
    for n in names:
        m = NAME_RE.match(n)
        if not m:
            continue
        i = int(m.group(1))
        if i in found:
            raise ConvertError(f"{d}: both {os.path.basename(found[i])} and {n} claim layer {i}")
        found[i] = os.path.join(d, n)
    if not found:
        raise ConvertError(f"{d}: no activation_N.pt files")
    idx = sorted(found)
    missing = [i for i in range(idx[-1] + 1) if i not in found]
    if missing:
        raise ConvertError(f"{d}: missing activation_{missing[0]}.pt (layers must run "
                           f"0..L-1 without a gap; found {len(idx)} files up to "
                           f"activation_{idx[-1]}.pt)")
    return [(i, found[i]) for i in idx]


def read_layer(path):
    try:
        t = pt_reader.load(path)
    except ValueError as e:
        raise ConvertError(str(e))
    if not isinstance(t, np.ndarray):
        raise ConvertError(f"{path}: holds a {type(t).__name__}, not a tensor")
    if t.ndim != 1:
        raise ConvertError(f"{path}: tensor of shape {list(t.shape)}, want a 1-D tensor")
    if t.dtype.kind not in "iuf":
        raise ConvertError(f"{path}: tensor of dtype {t.dtype}, want a numeric dtype")
    if t.shape[0] == 0:
        raise ConvertError(f"{path}: empty tensor")
    v = t.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        raise ConvertError(f"{path}: neuron {bad[0]} has count {v[bad[0]]} "
                           f"({bad.size} non-finite values)")
    neg = np.flatnonzero(v < 0)
    if neg.size:
        raise ConvertError(f"{path}: neuron {neg[0]} has negative count {v[neg[0]]} "
                           f"({neg.size} negative values)")
    return v


def read_activation_dir(d):
    """[float64 array per layer], validated."""
    layers = []
    for i, p in find_layer_files(d):
        v = read_layer(p)
        if layers and v.shape[0] != layers[0].shape[0]:
            raise ConvertError(f"{p}: {v.shape[0]} neurons, but activation_0.pt has "
                               f"{layers[0].shape[0]}")
        layers.append(v)
    return layers


def write_stats(out, active, tokens_observed=0, tokens_predicted=0, predicted=None,
                both=None, name=None, source=SOURCE):
    """Write the side file (atomically: OUT.tmp, then rename)."""
    try:
        import gguf
    except ImportError:
        raise ConvertError("needs the `gguf` Python package (pip install gguf)")
    n_layer, n_ff = len(active), active[0].shape[0]
    tmp = out + ".tmp"
    try:
        w = gguf.GGUFWriter(tmp, ARCH)
        w.add_uint32(f"{ARCH}.block_count", n_layer)
        w.add_uint32(f"{ARCH}.feed_forward_length", n_ff)
        w.add_uint64(f"{ARCH}.tokens_predicted", int(tokens_predicted))
        w.add_uint64(f"{ARCH}.tokens_observed", int(tokens_observed))
        w.add_string(f"{ARCH}.source", source)
        if name is not None:
            w.add_name(name)
        zeros = np.zeros(n_ff, dtype=np.float64)
        for L in range(n_layer):
            for kind, arr in (("predicted", predicted), ("active", active),
                              ("both", both)):
                t = zeros if arr is None else np.ascontiguousarray(arr[L], np.float64)
                w.add_tensor(f"blk.{L}.{kind}", t)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, out)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ConvertError(f"cannot write {out}: {e}")


def convert(act_dir, out, tokens=0, name=None):
    layers = read_activation_dir(act_dir)
    if tokens:
        for L, v in enumerate(layers):
            if v.max() > tokens:
                raise ConvertError(f"activation_{L}.pt: count {v.max()} exceeds --tokens "
                                   f"{tokens}")
    write_stats(out, layers, tokens_observed=tokens, name=name)
    return layers


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="See the module docstring for details.")
    ap.add_argument("activation_dir", metavar="ACTIVATION_DIR")
    ap.add_argument("-o", "--output", required=True, metavar="OUT.stats.gguf")
    ap.add_argument("--tokens", type=int, default=0,
                    help="number of tokens the counts were taken over (default 0 = unknown)")
    ap.add_argument("--name", default=None, help="general.name (the model's name)")
    a = ap.parse_args(argv)
    if a.tokens < 0 or a.tokens >= 1 << 64:
        print("convert_activation_stats.py: --tokens must be in [0, 2^64)", file=sys.stderr)
        return 1
    try:
        layers = convert(a.activation_dir, a.output, a.tokens, a.name)
    except ConvertError as e:
        print(f"convert_activation_stats.py: error: {e}", file=sys.stderr)
        return 1
    tot = [float(v.sum()) for v in layers]
    print(f"wrote {a.output}: {len(layers)} layers x {layers[0].shape[0]} neurons, "
          f"tokens_observed {a.tokens}; active-count sums per layer "
          f"{min(tot):.6g}..{max(tot):.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
