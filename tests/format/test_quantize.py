#!/usr/bin/env python3
"""pi-quantize against the `gguf` Python package's reference quantizer.

    test_quantize.py --quantize PATH/pi-quantize --pirun PATH/pi-run
                     --writer PATH/write_test_model --models DIR --corpus DIR --tmp DIR

Inputs: the committed tiny-silu-gqa f32 / f16 models, the tied tiny-relu-mha-tied
f32 model, the mixtral architecture fixture (3-D F16 expert tensors; to MXFP4, the type
of gpt-oss's experts), a PowerInfer (PWRI) F32 model made by write_test_model, and a file written
here with gguf.GGUFWriter holding every kind of tensor the selection rule tells apart
(BF16, 3-D, 1-D, not ".weight", ne0 not a multiple of 32, already quantized, I32).
For each input and target type, with GGUFReader (on a copy whose PWRI magic is
patched to GGUF, which GGUFReader requires):
  - every quantized tensor's bytes equal gguf.quants.quantize(dequantized input)
    bit for bit, and exactly the tensors the rule selects are quantized;
  - every other tensor is byte-identical, with the same type;
  - names, order and shapes are kept; every key is kept in order with the same type
    and bytes, except general.file_type and general.quantization_version (U32);
  - the magic is kept; pi-run --info opens the output.
Error paths (same input and output, missing input, malformed inputs, output
directory missing or not writable, a file size limit standing in for a full disk,
bad type): non-zero exit, a clear message, and no file left behind.

Exit status: 0 all passed, 1 a check failed, 77 the gguf package is missing
(1 instead when PI_REQUIRE_ALL=1).
The last line printed is "N passed, N failed".
"""
import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import warnings

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf.quants import dequantize, quantize
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

TYPES = {"q4_0": QT.Q4_0, "q4_1": QT.Q4_1, "q5_0": QT.Q5_0, "q5_1": QT.Q5_1,
         "q8_0": QT.Q8_0, "mxfp4": QT.MXFP4, "f16": QT.F16, "bf16": QT.BF16}
FILE_TYPE = {QT.Q4_0: 2, QT.Q4_1: 3, QT.Q8_0: 7, QT.Q5_0: 8, QT.Q5_1: 9, QT.MXFP4: 38}
FLOATS = {QT.F32, QT.F16, QT.BF16}
UPDATED = {"general.file_type", "general.quantization_version"}


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def magic_of(path):
    with open(path, "rb") as f:
        return f.read(4)


def readable_copy(path, tmp):
    """GGUFReader refuses PWRI: read a copy with the magic patched to GGUF."""
    if magic_of(path) != b"PWRI":
        return path
    dst = os.path.join(tmp, "patched-" + os.path.basename(path))
    shutil.copyfile(path, dst)
    with open(dst, "r+b") as f:
        f.write(b"GGUF")
    return dst


def fields_of(reader):
    """Key -> (position, value types, serialised value bytes)."""
    out = {}
    for pos, f in enumerate(x for x in reader.fields.values() if not x.name.startswith("GGUF.")):
        out[f.name] = (pos, list(f.types), b"".join(bytes(f.parts[i]) for i in f.data))
    return out


def raw_bytes(t):
    return np.ascontiguousarray(t.data).view(np.uint8).tobytes()


QUANTIZED = {QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K}


def expected_type(t, target, pred, keep_output, requant=False):
    """The selection rule of pi_model_quantize (docs/formats.md); requant: with
    --allow-requantize, weights already quantized take the target too."""
    ne = [int(x) for x in t.shape]
    if len(ne) < 2 or not t.name.endswith(".weight") or (
            t.tensor_type not in FLOATS and not (requant and t.tensor_type in QUANTIZED)):
        return t.tensor_type
    if keep_output and t.name == "output.weight":
        return t.tensor_type
    if t.name.endswith((".ffn_gate_inp.weight", ".ffn_gate_inp_shexp.weight")):
        return t.tensor_type  # MoE routers are copied, as llama.cpp does
    to = target
    if pred is not None and t.name.startswith("blk.") and (
            t.name.endswith(".fc1.weight") or t.name.endswith(".fc2.weight")):
        to = pred
    block = gguf.GGML_QUANT_SIZES[to][0]
    return to if ne[0] % block == 0 else t.tensor_type


def compare(src, dst, target, pred, keep_output, tmp, requant=False):
    mm = Mismatches()
    mm.eq("magic", magic_of(dst), magic_of(src))
    rin = gguf.GGUFReader(readable_copy(src, tmp))
    rout = gguf.GGUFReader(readable_copy(dst, tmp))
    fin, fout = fields_of(rin), fields_of(rout)
    kept_in = [k for k in fin if k not in UPDATED]
    kept_out = [k for k in fout if k not in UPDATED]
    mm.eq("key order", kept_out, kept_in)
    for k in kept_in:
        if k in fout and fout[k][1:] != fin[k][1:]:
            mm.add(f"key {k}: value or type changed")
    for k, want in (("general.file_type", FILE_TYPE[target]),
                    ("general.quantization_version", 2)):
        f = rout.fields.get(k)
        if f is None:
            mm.add(f"key {k} missing")
            continue
        mm.eq(f"{k} type", list(f.types), [gguf.GGUFValueType.UINT32])
        mm.eq(f"{k} value", int(f.parts[f.data[0]][0]), want)
    mm.eq("tensor names", [t.name for t in rout.tensors], [t.name for t in rin.tensors])
    n_quantized = 0
    for ti, to in zip(rin.tensors, rout.tensors):
        mm.eq(f"{ti.name} shape", [int(x) for x in to.shape], [int(x) for x in ti.shape])
        want = expected_type(ti, target, pred, keep_output, requant)
        mm.eq(f"{ti.name} type", to.tensor_type.name, want.name)
        if want == ti.tensor_type:
            if raw_bytes(to) != raw_bytes(ti):
                mm.add(f"{ti.name}: copied tensor's bytes differ")
            continue
        n_quantized += 1
        values = dequantize(ti.data, ti.tensor_type)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ref = np.asarray(quantize(values, want)).view(np.uint8).tobytes()
        got = raw_bytes(to)
        if got != ref:
            bs, bb = gguf.GGML_QUANT_SIZES[want]
            bad = next(i for i in range(0, len(ref), bb) if got[i:i + bb] != ref[i:i + bb])
            mm.add(f"{ti.name} ({want.name}): {sum(got[i:i + bb] != ref[i:i + bb] for i in range(0, len(ref), bb))} "
                   f"blocks differ from gguf.quants, first at byte {bad}: "
                   f"got {got[bad:bad + bb].hex()} want {ref[bad:bad + bb].hex()}")
    if n_quantized == 0:
        mm.add("nothing was quantized")
    mm.done()


def check_file(args, src, tname, extra, pred=None, keep_output=False, is_model=True):
    base = os.path.basename(src).replace(".gguf", "")
    dst = os.path.join(args.tmp, f"{base}.{tname}{'.pred' if pred else ''}"
                       f"{'.keep' if keep_output else ''}.gguf")
    p = run([args.quantize, *extra, "-t", "2", src, dst, tname])
    assert p.returncode == 0, f"pi-quantize exited {p.returncode}: {p.stderr}"
    assert "100%" in p.stderr, f"no progress on stderr: {p.stderr!r}"
    compare(src, dst, TYPES[tname], TYPES[pred] if pred else None, keep_output, args.tmp,
            "--allow-requantize" in extra)
    if is_model:
        p = run([args.pirun, "--info", dst])
        assert p.returncode == 0, f"pi-run --info {dst} exited {p.returncode}: {p.stderr}"
    os.remove(dst)


def write_mixed(path):
    """Every case of the selection rule, BF16 input included; a general.file_type of
    another type (I32) to be replaced."""
    rng = np.random.default_rng(20240614)
    w = gguf.GGUFWriter(path, arch="mixed")
    w.add_int32("general.file_type", 0)
    w.add_string("mixed.note", "h\u00e9llo")
    w.add_array("mixed.arr", [1, 2, 3])
    w.add_bool("mixed.flag", True)

    def t(name, shape, dtype=np.float32, raw_dtype=None):
        a = (rng.standard_normal(shape) * 0.2).astype(dtype)
        w.add_tensor(name, a, raw_dtype=raw_dtype)

    t("a.weight", (4, 64))
    t("b.weight", (3, 2, 32))                               # 3-D
    t("c.weight", (4, 64), np.float16)
    bf = gguf.quants.quantize((rng.standard_normal((2, 96)) * 0.2).astype(np.float32), QT.BF16)
    w.add_tensor("d.weight", bf, raw_dtype=QT.BF16)
    t("e.weight", (64,))                                    # 1-D
    t("f.bias", (4, 64))                                    # not ".weight"
    t("g.weight", (4, 48))                                  # ne0 % 32 != 0
    q8 = gguf.quants.quantize((rng.standard_normal((2, 64)) * 0.2).astype(np.float32), QT.Q8_0)
    w.add_tensor("h.weight", q8, raw_dtype=QT.Q8_0)  # already quantized
    w.add_tensor("i.weight", np.arange(64, dtype=np.int32).reshape(2, 32))
    t("output.weight", (4, 64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def expect_failure(args, cmd, needle, name, env_fn=None):
    before = sorted(os.listdir(args.err_dir))
    p = run(cmd, preexec_fn=env_fn)
    assert p.returncode != 0, f"{name}: exit 0; stderr {p.stderr!r}"
    assert needle in p.stderr, f"{name}: {needle!r} not in stderr {p.stderr!r}"
    after = sorted(os.listdir(args.err_dir))
    assert after == before, f"{name}: files left behind: {sorted(set(after) - set(before))}"


def check_errors(args, pwri):
    q = args.quantize
    d = args.err_dir
    out = os.path.join(d, "out.gguf")
    # same file, also through another name (a hard link)
    src = os.path.join(d, "in.gguf")
    shutil.copyfile(pwri, src)
    link = os.path.join(d, "link.gguf")
    os.link(src, link)
    data = open(src, "rb").read()
    expect_failure(args, [q, src, src, "q4_0"], "is the input file", "same path")
    expect_failure(args, [q, src, link, "q4_0"], "is the input file", "hard link")
    assert open(src, "rb").read() == data, "the input changed"
    os.remove(link)
    expect_failure(args, [q, os.path.join(d, "missing.gguf"), out, "q8_0"], "cannot open",
                   "missing input")
    mal = os.path.join(args.corpus, "malformed")
    for name in ("empty_file.gguf", "bad_magic.gguf", "data_past_eof.gguf",
                 "tensor_type_33.gguf", "n_kv_2p63.gguf", "offset_not_aligned.gguf"):
        expect_failure(args, [q, os.path.join(mal, name), out, "q8_0"], "(malformed file)",
                       f"malformed {name}")
    expect_failure(args, [q, src, os.path.join(d, "no-such-dir", "out.gguf"), "q4_0"],
                   "cannot create", "missing output dir")
    if os.geteuid() != 0:  # root writes anywhere
        ro = os.path.join(d, "ro")
        os.mkdir(ro, 0o555)
        expect_failure(args, [q, src, os.path.join(ro, "out.gguf"), "q4_0"], "cannot create",
                       "read-only output dir")
        os.rmdir(ro)

    def small_disk():  # a file size limit: writes fail with EFBIG, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))

    expect_failure(args, [q, src, out, "q8_0"], "cannot write", "write error", small_disk)
    for bad in ("q4_k", "f16", "Q4", ""):
        expect_failure(args, [q, src, out, bad], "unknown type", f"type {bad!r}")
    expect_failure(args, [q, "--predictor-type", "q6_k", src, out, "q4_0"],
                   "unknown predictor type", "bad predictor type")
    p = run([q, "--help"])
    assert p.returncode == 0 and "usage: pi-quantize" in p.stdout, "--help"
    # an existing output is replaced only on success
    with open(out, "wb") as f:
        f.write(b"old")
    expect_failure(args, [q, src, out, "q8_0"], "cannot write", "keeps old output",
                   small_disk)
    assert open(out, "rb").read() == b"old", "old output was touched"
    p = run([q, "-q", src, out, "Q8_0"])
    assert p.returncode == 0 and p.stderr == "", f"upper-case type, quiet: {p.stderr!r}"
    os.remove(out)
    os.remove(src)


def main():
    ap = argparse.ArgumentParser()
    for a in ("--quantize", "--pirun", "--writer", "--models", "--corpus", "--tmp"):
        ap.add_argument(a, required=True)
    args = ap.parse_args()
    shutil.rmtree(args.tmp, ignore_errors=True)
    os.makedirs(args.tmp)
    args.err_dir = os.path.join(args.tmp, "errors")
    os.makedirs(args.err_dir)

    pwri = os.path.join(args.tmp, "sparse.f32.gguf")
    p = run([args.writer, pwri, "llama", "sparse", "f32"])
    assert p.returncode == 0, p.stderr
    pwri16 = os.path.join(args.tmp, "sparse.f16.gguf")
    p = run([args.writer, pwri16, "llama", "sparse", "f16"])
    assert p.returncode == 0, p.stderr
    mixed = os.path.join(args.tmp, "mixed.gguf")
    write_mixed(mixed)

    models = [os.path.join(args.models, n) for n in (
        "tiny-silu-gqa.f32.gguf", "tiny-silu-gqa.f16.gguf", "tiny-relu-mha-tied.f32.gguf")]
    for src in models + [pwri]:
        for tname in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4"):
            run_check(f"{os.path.basename(src)} -> {tname}", check_file, args, src, tname, [])
    for tname, pred in (("q4_0", "q5_0"), ("q8_0", "f16"), ("q4_1", "bf16"), ("q4_0", "q8_0")):
        for src in (pwri, pwri16):
            run_check(f"{os.path.basename(src)} -> {tname}, predictors {pred}", check_file,
                      args, src, tname, ["--predictor-type", pred], pred)
    moe = os.path.join(os.path.dirname(os.path.abspath(args.models)), "archs", "mixtral.f16.gguf")
    for tname in ("mxfp4", "q8_0"):
        run_check(f"mixtral.f16 (3-D experts) -> {tname}", check_file, args, moe, tname, [])
    run_check("tiny-silu-gqa.f16 -> q4_0 --keep-output", check_file, args, models[1], "q4_0",
              ["--keep-output"], None, True)
    # h.weight is Q8_0 already: copied to q8_0; to another type only with
    # --allow-requantize (then gguf.quants of its dequantized values), else refused
    run_check("mixed tensor kinds -> q8_0", check_file, args, mixed, "q8_0", [], None,
              False, False)
    for tname in ("q4_0", "q5_1", "mxfp4"):
        run_check(f"mixed tensor kinds -> {tname} --allow-requantize", check_file, args, mixed,
                  tname, ["--allow-requantize"], None, False, False)
        run_check(f"mixed tensor kinds -> {tname} refused", lambda a, t=tname: expect_failure(
            a, [a.quantize, mixed, os.path.join(a.err_dir, "out.gguf"), t],
            "tensor h.weight is already Q8_0", f"mixed -> {t}"), args)
    run_check("error paths", check_errors, args, pwri)
    return finish()


if __name__ == "__main__":
    t0 = time.monotonic()
    st = main()
    print(f"# {time.monotonic() - t0:.1f} s")
    sys.exit(st)
