#!/usr/bin/env python3
"""Our GPU index writer (lib/plan/gpuidx.c) against PowerInfer's layout, checked with the
`gguf` package, and the committed fixtures in tests/fixtures/gpuidx/.

    test_gpuidx.py --writer PATH/test_gpuidx --tmp DIR

(1) tests/fixtures/make_gpuidx.py still writes the committed fixtures byte for byte.
(2) `test_gpuidx --write` writes the index of OURS_* below. Walked here without the gguf
    package: magic "PWRI", version 3, the six keys in order (general.architecture,
    generic.gpu_index.block_count u32, split.vram_capacity u64, then our
    powerinfer.plan.model_id / stats_id / budget u64) with their values; 2 tensors per
    layer in PowerInfer's order and names, 1-D, type id 18 (I32 in PowerInfer's
    numbering), offsets packed at alignment 32, the data section aligned, nothing after
    the last tensor.
(3) A copy with the magic patched to GGUF and the type ids to today's I32 (26), which
    gguf.GGUFReader needs, read with GGUFReader: the same keys, and every tensor's
    values (gpu_idx 0/1, gpu_bucket the sorted ids, empty for a layer with none).
(4) The file equals, byte for byte, what make_gpuidx.write_gpuidx (PowerInfer's
    export_split.py through GGUFWriter) writes for the same content and keys.

Exit status: 0 all passed, 1 a check failed, 77 the gguf package is missing
(1 instead when PI_REQUIRE_ALL=1).
The last line printed is "N passed, N failed".
"""
import argparse
import os
import shutil
import struct
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
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
sys.path.insert(0, FIXTURES)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import make_gpuidx as mk  # noqa: E402

# tests/unit/test_gpuidx.c, write_ours().
OURS_LAYERS, OURS_FF = 4, 40
OURS_KEYS = [("general.architecture", VT.STRING, "generic.gpu_index"),
             ("generic.gpu_index.block_count", VT.UINT32, OURS_LAYERS),
             ("split.vram_capacity", VT.UINT64, 123456789012),
             ("powerinfer.plan.model_id", VT.UINT64, 0x0123456789ABCDEF),
             ("powerinfer.plan.stats_id", VT.UINT64, 0xFEDCBA9876543210),
             ("powerinfer.plan.budget", VT.UINT64, 1 << 34)]
ALIGN = 32


def ours_on(layer, r):
    return {0: r % 3 == 0, 1: False, 2: True}.get(layer, r == OURS_FF - 1)


def ours_layers():
    out = []
    for layer in range(OURS_LAYERS):
        idx = np.array([int(ours_on(layer, r)) for r in range(OURS_FF)], dtype=np.int32)
        out.append((idx, np.flatnonzero(idx).astype(np.int32)))
    return out


def walk(data):
    """A plain GGUF header walk (scalar and string values only, which is all an index
    has): (magic, version, [(key, type, value)], [(name, dims, type, offset, at)],
    end of the tensor infos); `at` is the file offset of a tensor's type field."""
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode()
        pos += n
        return s

    scalar = {VT.UINT32: "I", VT.UINT64: "Q", VT.INT32: "i", VT.FLOAT32: "f"}
    magic = data[:4]
    pos = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    kvs = []
    for _ in range(n_kv):
        key = string()
        vt = VT(take("I"))
        kvs.append((key, vt, string() if vt == VT.STRING else take(scalar[vt])))
    tensors = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take("I")
        dims = [take("Q") for _ in range(n_dims)]
        at = pos
        ttype = take("I")
        tensors.append((name, dims, ttype, take("Q"), at))
    return magic, version, kvs, tensors, pos


def write_ours(args):
    path = os.path.join(args.tmp, "ours.gpuidx")
    if os.path.exists(path):
        os.remove(path)
    r = subprocess.run([args.writer, "--write", path], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, f"{args.writer} --write failed: {r.stdout}"
    with open(path, "rb") as f:
        return path, f.read()


def check_fixtures(args):
    m = Mismatches()
    out = os.path.join(args.tmp, "fixtures")
    shutil.rmtree(out, ignore_errors=True)
    written = sorted(mk.write_all(out))
    committed_dir = os.path.join(FIXTURES, "gpuidx")
    committed = sorted(f for f in os.listdir(committed_dir) if f.endswith(".gpuidx"))
    m.eq("files", committed, written)
    for name in written:
        with open(os.path.join(out, name), "rb") as a:
            want = a.read()
        path = os.path.join(committed_dir, name)
        if os.path.exists(path):
            with open(path, "rb") as b:
                if b.read() != want:
                    m.add(f"{name}: differs from what make_gpuidx.py writes now")
    # The PowerInfer-style fixture carries type 18, the -i32 one 26: checked on the bytes.
    for name, want in (("powerinfer.gpuidx", mk.OLD_I32), ("powerinfer-i32.gpuidx", QT.I32)):
        with open(os.path.join(committed_dir, name), "rb") as f:
            _, _, _, tensors, _ = walk(f.read())
        m.eq(f"{name} type ids", sorted({t[2] for t in tensors}), [int(want)])
    m.done()


def check_layout(args):
    m = Mismatches()
    _, data = write_ours(args)
    magic, version, kvs, tensors, end = walk(data)
    m.eq("magic", magic, b"PWRI")
    m.eq("version", version, 3)
    m.eq("keys", [(k, int(t), v) for k, t, v in kvs], [(k, int(t), v) for k, t, v in OURS_KEYS])
    layers = ours_layers()
    names = [f"blk.{layer}.{w}" for layer in range(OURS_LAYERS) for w in ("gpu_idx", "gpu_bucket")]
    m.eq("tensor names", [t[0] for t in tensors], names)
    m.eq("dims", [t[1] for t in tensors], [[len(a)] for pair in layers for a in pair])
    m.eq("type ids", [t[2] for t in tensors], [mk.OLD_I32] * len(names))
    off = 0
    for (name, dims, _, offset, _) in tensors:
        m.eq(f"{name} offset", offset, off)
        off += -(-4 * dims[0] // ALIGN) * ALIGN
    data_start = -(-end // ALIGN) * ALIGN
    m.eq("padding before data", data[end:data_start], bytes(data_start - end))
    m.eq("file size", len(data), data_start + off)
    m.done()


def check_gguf_reader(args):
    m = Mismatches()
    _, data = write_ours(args)
    _, _, _, tensors, _ = walk(data)
    patched = bytearray(data)
    patched[:4] = b"GGUF"
    for t in tensors:
        patched[t[4]:t[4] + 4] = struct.pack("<I", QT.I32)
    copy = os.path.join(args.tmp, "ours-patched.gguf")
    with open(copy, "wb") as f:
        f.write(patched)
    reader = gguf.GGUFReader(copy)
    fields = [f for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    got = []
    for f in fields:
        vt = f.types[0]
        part = f.parts[f.data[0]]
        value = bytes(part).decode() if vt == VT.STRING else int(part[0])
        got.append((f.name, int(vt), value))
    m.eq("keys (GGUFReader)", got, [(k, int(t), v) for k, t, v in OURS_KEYS])
    want = [a for pair in ours_layers() for a in pair]
    m.eq("tensor count", len(reader.tensors), len(want))
    for t, w in zip(reader.tensors, want):
        m.eq(f"{t.name} type", t.tensor_type, QT.I32)
        m.eq(f"{t.name} shape", [int(x) for x in t.shape], [len(w)])
        m.eq(f"{t.name} offset aligned", t.data_offset % ALIGN, 0)
        if not np.array_equal(np.asarray(t.data, dtype=np.int32), w):
            m.add(f"{t.name}: values {np.asarray(t.data).tolist()}, want {w.tolist()}")
    m.done()


def check_same_as_powerinfer(args):
    _, data = write_ours(args)
    ref = os.path.join(args.tmp, "powerinfer-style.gpuidx")
    extra = {k: v for k, _, v in OURS_KEYS[3:]}
    mk.write_gpuidx(ref, ours_layers(), capacity=OURS_KEYS[2][2], extra=extra)
    with open(ref, "rb") as f:
        want = f.read()
    if data != want:
        n = min(len(data), len(want))
        first = next((i for i in range(n) if data[i] != want[i]), n)
        raise AssertionError(f"ours ({len(data)} bytes) differs from GGUFWriter's "
                             f"({len(want)} bytes) first at byte {first}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writer", required=True)
    ap.add_argument("--tmp", required=True)
    args = ap.parse_args()
    os.makedirs(args.tmp, exist_ok=True)
    run_check("fixtures reproducible", check_fixtures, args)
    run_check("our layout (own walk)", check_layout, args)
    run_check("our file through GGUFReader", check_gguf_reader, args)
    run_check("ours == PowerInfer's writer + our keys", check_same_as_powerinfer, args)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
