#!/usr/bin/env python3
"""Tests of tools/convert_activation_stats.py (PowerInfer activation/*.pt -> our
activation-statistics side file, docs/formats.md "Activation statistics side file").

    test_activation_stats.py [--fixtures DIR] [--tools DIR]

(a) the committed 12-layer activation directory (tests/fixtures/pt/activation, written
    by torch.save in make_pt_fixtures.py, mixed float32/int64/float16/int32 tensors)
    converts; gguf.GGUFReader reads back magic GGUF v3, alignment 32, the keys and their
    types, and blk.L.{predicted,active,both} F64 {n_ff} in layer order, with layer 10
    holding activation_10.pt's values (numeric, not lexicographic order) and
    predicted/both all zero;
(b) without --tokens/--name: tokens_observed 0 and no general.name;
(c) errors exit 1 with a message naming the problem and leave no output file: empty
    directory, missing activation_0, a gap, duplicate indices, mismatched length, a 2-D
    tensor, NaN, a negative count, counts above --tokens, a malicious pickle, a corrupt
    file.

Exit status: 0 all passed, 1 a check failed, 77 numpy or gguf is missing
(1 instead when PI_REQUIRE_ALL=1).
The last line printed is "N passed, N failed".
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import numpy as np
    import gguf
    from gguf import GGUFValueType as VT
except ImportError as e:  # pragma: no cover
    # tools/test.sh sets PI_REQUIRE_ALL=1: there a missing package is a failure
    if os.environ.get("PI_REQUIRE_ALL") == "1":
        print(f"FAIL cannot import numpy/gguf: {e} (PI_REQUIRE_ALL=1; pip install numpy gguf)")
        print("0 passed, 1 failed")
        sys.exit(1)
    print(f"SKIP: cannot import numpy/gguf: {e}")
    print("0 passed, 0 failed")
    sys.exit(77)

sys.path.insert(0, HERE)
from checks import Mismatches, finish, run_check  # noqa: E402

N_LAYER, N_FF = 12, 48


def convert(tool, act_dir, out, *extra):
    return subprocess.run([sys.executable, tool, act_dir, "-o", out, *extra],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def field(r, key):
    f = r.fields.get(key)
    if f is None:
        return None, None
    return f.types[0], f.contents()


def check_convert(tool, fixdir, tmp):
    out = os.path.join(tmp, "act.stats.gguf")
    p = convert(tool, os.path.join(fixdir, "activation"), out, "--tokens", "5000",
                "--name", "tiny-relu")
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr}"
    with open(out, "rb") as f:
        head = f.read(8)
    assert head == b"GGUF\x03\x00\x00\x00", f"header {head!r}"
    with open(os.path.join(fixdir, "expected.json")) as f:
        expected = json.load(f)

    r = gguf.GGUFReader(out)
    m = Mismatches()
    m.eq("alignment", int(r.alignment), 32)
    for key, vt, want in [("general.architecture", VT.STRING, "activation_stats"),
                          ("activation_stats.block_count", VT.UINT32, N_LAYER),
                          ("activation_stats.feed_forward_length", VT.UINT32, N_FF),
                          ("activation_stats.tokens_predicted", VT.UINT64, 0),
                          ("activation_stats.tokens_observed", VT.UINT64, 5000),
                          ("general.name", VT.STRING, "tiny-relu")]:
        t, v = field(r, key)
        m.eq(f"{key} type", t, vt)
        m.eq(key, v, want)
    t, v = field(r, "activation_stats.source")
    m.eq("source type", t, VT.STRING)
    names = [t.name for t in r.tensors]
    want_names = [f"blk.{L}.{k}" for L in range(N_LAYER) for k in ("predicted", "active", "both")]
    m.eq("tensor names in order", names, want_names)
    for t in r.tensors:
        m.eq(f"{t.name} type", t.tensor_type, gguf.GGMLQuantizationType.F64)
        m.eq(f"{t.name} shape", [int(x) for x in t.shape], [N_FF])
        if t.data_offset % 32:
            m.add(f"{t.name}: data offset {t.data_offset} not 32-aligned")
        L, kind = int(t.name.split(".")[1]), t.name.split(".")[2]
        data = np.asarray(t.data, dtype=np.float64)
        if kind == "active":
            want = np.array(expected[f"activation/activation_{L}.pt"][""]["values"],
                            dtype=np.float64)
            if not np.array_equal(data, want):
                m.add(f"{t.name}: {data[:4]} != activation_{L}.pt {want[:4]}")
            if not np.all(data // 64 == L):
                m.add(f"{t.name}: values {data[:4]} are not layer {L}'s (value // 64)")
        elif np.any(data != 0):
            m.add(f"{t.name}: not all zero")
    m.done()
    act10 = np.asarray(r.get_tensor(want_names.index("blk.10.active")).data)
    assert act10[0] == 640 and act10[1] == 647, f"layer 10 holds {act10[:2]}"


def check_defaults(tool, fixdir, tmp):
    out = os.path.join(tmp, "plain.stats.gguf")
    p = convert(tool, os.path.join(fixdir, "activation"), out)
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr}"
    r = gguf.GGUFReader(out)
    assert field(r, "activation_stats.tokens_observed") == (VT.UINT64, 0)
    assert field(r, "general.name") == (None, None), "general.name written without --name"


def check_errors(tool, fixdir, tmp):
    src = os.path.join(fixdir, "activation")
    bad = os.path.join(fixdir, "activation-bad")

    def case(what, setup, extra, want):
        d = os.path.join(tmp, "case")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        setup(d)
        out = os.path.join(tmp, "err.stats.gguf")
        p = convert(tool, d, out, *extra)
        assert p.returncode == 1, f"{what}: exit {p.returncode}, want 1 ({p.stderr.strip()})"
        assert want in p.stderr, f"{what}: message {p.stderr.strip()!r} lacks {want!r}"
        assert not os.path.exists(out) and not os.path.exists(out + ".tmp"), \
            f"{what}: output file left behind"
        print(f"     {what}: {p.stderr.strip()}")

    def rm(*ls):
        return lambda d: [os.unlink(os.path.join(d, f"activation_{i}.pt")) for i in ls]

    def put(layer, name):
        return lambda d: shutil.copy(os.path.join(bad, name),
                                     os.path.join(d, f"activation_{layer}.pt"))

    def evil(d):
        with zipfile.ZipFile(os.path.join(d, "activation_4.pt"), "w") as z:
            z.writestr("archive/data.pkl", b"cos\nsystem\n(S'touch " +
                       os.path.join(tmp, "PWNED").encode() + b"'\ntR.")

    def corrupt(d):
        p = os.path.join(d, "activation_2.pt")
        b = open(p, "rb").read()
        open(p, "wb").write(b[: len(b) // 2])

    case("empty directory", lambda d: rm(*range(N_LAYER))(d), [], "no activation_N.pt")
    case("missing layer 0", rm(0), [], "missing activation_0.pt")
    case("gap", rm(7), [], "missing activation_7.pt")
    case("duplicate index", lambda d: shutil.copy(os.path.join(d, "activation_1.pt"),
                                                  os.path.join(d, "activation_01.pt")),
         [], "claim layer 1")
    case("length mismatch", put(11, "short.pt"), [], "47 neurons")
    case("2-D tensor", put(3, "two_d.pt"), [], "1-D")
    case("NaN", put(5, "nan.pt"), [], "nan")
    case("negative count", put(6, "neg.pt"), [], "negative count -4")
    case("counts above --tokens", lambda d: None, ["--tokens", "100"], "exceeds --tokens")
    case("malicious pickle", evil, [], "refusing to load global os.system")
    assert not os.path.exists(os.path.join(tmp, "PWNED")), "the payload ran"
    case("truncated file", corrupt, [], "activation_2.pt")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(HERE, "..", "fixtures", "pt"))
    ap.add_argument("--tools", default=os.path.join(HERE, "..", "..", "tools"))
    a = ap.parse_args()
    tool = os.path.join(a.tools, "convert_activation_stats.py")
    with tempfile.TemporaryDirectory() as tmp:
        run_check("convert 12 layers, read back with GGUFReader", check_convert, tool,
                  a.fixtures, tmp)
        run_check("defaults: tokens_observed 0, no general.name", check_defaults, tool,
                  a.fixtures, tmp)
        run_check("error cases exit 1 with a clear message", check_errors, tool,
                  a.fixtures, tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
