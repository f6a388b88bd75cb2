#!/usr/bin/env python3
"""Our reader and pi-run on a real model (SmolLM2-135M-Instruct Q4_1), checked
against the `gguf` Python package (the reference implementation of the format).

    test_real_model.py --dump PATH/gguf_dump --pirun PATH/pi-run --tmp DIR

(1) gguf_dump's view of the file equals gguf.GGUFReader's: header, every key with
    its type, element type, count and value (every array element: the tokens,
    token types and merges included), tensor names in order, types, dims, offsets,
    byte sizes and the sha256 of every tensor's bytes;
(2) `pi-run --info --tensors` agrees with GGUFReader on the architecture and
    hyper-parameters (llama.* keys, n_vocab from token_embd.weight), the per-type
    summary (tensor counts and weights exactly, byte sizes within the printed
    rounding) and every tensor line (name, type, shape, bytes);
(3) the file with its magic patched to "PWRI": gguf_dump reports PWRI with
    otherwise identical content, and `pi-run --info` refuses it (a dense layout
    under a sparse magic) with a message that names a tensor.

The model file is found by tools/smollm2_path.py. When it (or the gguf package) is
missing the test is skipped (exit 77), unless PI_REQUIRE_SMOLLM2=1 or PI_REQUIRE_ALL=1,
which make that a failure.

Exit status: 0 all passed, 1 a check failed, 77 skipped.
The last line printed is "N passed, N failed".
"""
import argparse
import hashlib
import json
import math
import mmap
import os
import re
import shutil
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PATH_TOOL = os.path.join(HERE, "..", "..", "tools", "smollm2_path.py")
REQUIRE = os.environ.get("PI_REQUIRE_SMOLLM2") == "1" or os.environ.get("PI_REQUIRE_ALL") == "1"


def skip_or_fail(why):
    if REQUIRE:
        print(f"FAIL {why} (PI_REQUIRE_SMOLLM2=1 or PI_REQUIRE_ALL=1)")
        print("0 passed, 1 failed")
        sys.exit(1)
    print(f"SKIP: {why}")
    print("0 passed, 0 failed")
    sys.exit(77)


try:
    import numpy as np
    import gguf
    from gguf import GGUFValueType as VT
    from gguf import GGMLQuantizationType as QT
except ImportError as e:  # pragma: no cover
    skip_or_fail(f"cannot import gguf/numpy: {e}")

from checks import FLOAT_TYPES, INT_TYPES, Mismatches, finish, run_check  # noqa: E402


def find_model():
    try:
        p = subprocess.run([sys.executable, PATH_TOOL], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    except OSError as e:
        return None, f"cannot run {PATH_TOOL}: {e}"
    path = p.stdout.decode(errors="replace").strip()
    if p.returncode != 0 or not path:
        return None, "SmolLM2-135M-Instruct Q4_1 GGUF not installed (tools/smollm2_path.py)"
    if not os.path.isfile(path):
        return None, f"tools/smollm2_path.py printed {path!r}, which is not a file"
    return path, None


def run_tool(argv):
    try:
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        raise AssertionError(f"cannot run {argv[0]}: {e}")


def dump(tool, path):
    p = run_tool([tool, path])
    assert p.returncode == 0, (f"gguf_dump {path} exited {p.returncode}: "
                               f"{p.stderr.decode(errors='replace').strip()}")
    # Strings are raw bytes: keep any invalid UTF-8 as surrogates, as the
    # reference side does, so that a byte-level difference still shows.
    try:
        return json.loads(p.stdout.decode("utf-8", errors="surrogateescape"))
    except ValueError as e:
        raise AssertionError(f"gguf_dump output is not valid JSON: {e}\n"
                             f"{p.stdout[:2000]!r}")


def patched(src, dst, magic):
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.write(magic)
    return dst


# ---------------------------------------------------------------------------------
# the reference view (gguf.GGUFReader), built once
# ---------------------------------------------------------------------------------

def ref_scalar(vtype, part):
    """One element from a GGUFReader part, as gguf_dump prints it."""
    if vtype == VT.STRING:
        return bytes(part).decode("utf-8", errors="surrogateescape")
    v = part.tolist()[0]
    if vtype == VT.BOOL:
        return bool(v)
    if vtype in INT_TYPES:
        return int(v)
    if vtype in FLOAT_TYPES:
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    raise AssertionError(f"unexpected value type {vtype}")


def reference(path):
    """{magic, version, alignment, data_offset, kv, tensors} in gguf_dump's layout,
    built from gguf.GGUFReader."""
    r = gguf.GGUFReader(path)
    kvs = []
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue
        vtype = VT(int(f.types[0]))
        if vtype != VT.ARRAY:
            value = ref_scalar(vtype, f.parts[f.data[0]])
            kvs.append({"key": key, "type": int(vtype), "elem_type": None, "n": 1,
                        "value": value})
            continue
        etype = VT(int(f.types[1]))
        n = len(f.data)
        if etype == VT.ARRAY:
            value = "<nested>"
        elif etype == VT.STRING:
            value = [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape")
                     for i in f.data]
        else:
            value = [ref_scalar(etype, f.parts[i]) for i in f.data]
        kvs.append({"key": key, "type": int(vtype), "elem_type": int(etype), "n": n,
                    "value": value})
    tensors = []
    with open(path, "rb") as fp:
        mm = mmap.mmap(fp.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            for t in r.tensors:
                start = int(t.data_offset)
                nbytes = int(t.n_bytes)
                assert start + nbytes <= len(mm), f"{t.name} runs past the end of the file"
                sha = hashlib.sha256(mm[start:start + nbytes]).hexdigest()
                tensors.append({"name": t.name, "type": int(t.tensor_type),
                                "dims": [int(x) for x in t.shape],
                                "offset": start - int(r.data_offset),
                                "nbytes": nbytes, "sha256": sha,
                                "n_elements": int(t.n_elements)})
        finally:
            mm.close()
    return {
        "magic": "GGUF",
        "version": int(r.fields["GGUF.version"].parts[-1][0]),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "kv": kvs,
        "tensors": tensors,
    }


def ref_kv(ref, key):
    for kv in ref["kv"]:
        if kv["key"] == key:
            return kv["value"]
    raise AssertionError(f"reference has no key {key}")


# ---------------------------------------------------------------------------------
# (1) gguf_dump == GGUFReader
# ---------------------------------------------------------------------------------

def same_value(vtype, got, want):
    if vtype in FLOAT_TYPES:
        if isinstance(want, str):
            return got == want
        return (type(got) is float and got == want
                and math.copysign(1.0, got) == math.copysign(1.0, want))
    if vtype == VT.BOOL:
        return type(got) is bool and got == want
    if vtype in INT_TYPES:
        return type(got) is int and got == want
    if vtype == VT.STRING:
        return type(got) is str and got == want
    return False


def compare_dump(mm, d, ref, magic):
    mm.eq("magic", d.get("magic"), magic)
    for k in ("version", "alignment", "data_offset"):
        mm.eq(k, d.get(k), ref[k])
    got_kv = d.get("kv", [])
    mm.eq("key list (in order)", [kv.get("key") for kv in got_kv],
          [kv["key"] for kv in ref["kv"]])
    by_key = {kv.get("key"): kv for kv in got_kv}
    for want in ref["kv"]:
        key = want["key"]
        kv = by_key.get(key)
        if kv is None:
            mm.add(f"{key}: missing")
            continue
        for field in ("type", "elem_type", "n"):
            mm.eq(f"{key}.{field}", kv.get(field), want[field])
        got, value = kv.get("value"), want["value"]
        vtype = VT(want["type"])
        if vtype != VT.ARRAY:
            if not same_value(vtype, got, value):
                mm.add(f"{key}.value: got {got!r}, want {value!r}")
            continue
        if want["elem_type"] == int(VT.ARRAY):
            mm.eq(f"{key}.value", got, "<nested>")
            continue
        if not isinstance(got, list) or len(got) != len(value):
            mm.add(f"{key}.value: got {type(got).__name__} of length "
                   f"{len(got) if isinstance(got, list) else '-'}, want list of {len(value)}")
            continue
        etype = VT(want["elem_type"])
        bad = [i for i, (g, w) in enumerate(zip(got, value)) if not same_value(etype, g, w)]
        for i in bad[:10]:
            mm.add(f"{key}[{i}]: got {got[i]!r}, want {value[i]!r}")
        if len(bad) > 10:
            mm.add(f"{key}: {len(bad) - 10} more differing elements")
    got_t = d.get("tensors", [])
    mm.eq("tensor names (in order)", [t.get("name") for t in got_t],
          [t["name"] for t in ref["tensors"]])
    by_name = {t.get("name"): t for t in got_t}
    for want in ref["tensors"]:
        t = by_name.get(want["name"])
        if t is None:
            continue
        for field in ("type", "dims", "offset", "nbytes", "sha256"):
            mm.eq(f"{want['name']}.{field}", t.get(field), want[field])


def check_dump(args, state):
    d = dump(args.dump, state["model"])
    state["dump"] = d
    ref = state["ref"]
    mm = Mismatches()
    compare_dump(mm, d, ref, "GGUF")
    # what the brief singles out: make sure the big arrays really were compared
    for key, n in (("tokenizer.ggml.tokens", 49152), ("tokenizer.ggml.token_type", 49152),
                   ("tokenizer.ggml.merges", 48900)):
        kv = next((k for k in ref["kv"] if k["key"] == key), None)
        if kv is None or kv["n"] != n:
            mm.add(f"reference {key} has {kv and kv['n']} elements, expected {n} "
                   "(is this the right model file?)")
    mm.done()


# ---------------------------------------------------------------------------------
# (2) pi-run --info --tensors == GGUFReader
# ---------------------------------------------------------------------------------

UNITS = {"B": 0, "KiB": 1, "MiB": 2, "GiB": 3, "TiB": 4}


def human_ok(printed, nbytes):
    """Is `printed` ("92.10 MiB", "2304 B") nbytes, as pi-run rounds it?"""
    m = re.fullmatch(r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)", printed.strip())
    if not m:
        return False
    v, u = float(m.group(1)), UNITS[m.group(2)]
    if u == 0:
        return m.group(1) == str(nbytes)
    if nbytes < 1024 ** u or (u < 4 and nbytes >= 1024 ** (u + 1)):
        return False
    return abs(nbytes / 1024 ** u - v) <= 0.005 + 1e-9


def parse_pirun(text):
    out = {"header": {}, "tensors": None, "summary": None, "types": [], "meta_keys": None,
           "meta_n": None}
    section = "header"
    for line in text.splitlines():
        if line == "tensors:":
            section = "tensors"
            out["tensors"] = []
            continue
        m = re.fullmatch(r"tensor types \((\d+) tensors, (.+), (\d+) weights\):", line)
        if m:
            section = "types"
            out["summary"] = (int(m.group(1)), m.group(2), int(m.group(3)))
            continue
        m = re.fullmatch(r"metadata \((\d+) keys\):", line)
        if m:
            section = "meta"
            out["meta_n"] = int(m.group(1))
            out["meta_keys"] = []
            continue
        if section == "header":
            m = re.fullmatch(r"([a-z_ ]+):\s+(.*)", line)
            if m:
                out["header"][m.group(1)] = m.group(2)
        elif section == "tensors":
            m = re.fullmatch(r"  (\S+)\s+(\S+)\s+\{([^}]*)\}\s+(\d+) B", line)
            if not m:
                raise AssertionError(f"cannot parse tensor line {line!r}")
            dims = [int(x) for x in m.group(3).split(",")] if m.group(3).strip() else []
            out["tensors"].append((m.group(1), m.group(2), dims, int(m.group(4))))
        elif section == "types":
            m = re.fullmatch(r"  (\S+)\s+(\d+) tensors\s+(\S+ \S+)\s+(\S+) bits/weight",
                             line)
            if not m:
                raise AssertionError(f"cannot parse tensor type line {line!r}")
            out["types"].append((m.group(1), int(m.group(2)), m.group(3),
                                 float(m.group(4))))
        elif section == "meta":
            if line.startswith("  "):
                out["meta_keys"].append(line.split()[0])
    return out


def type_name(t):
    try:
        return QT(t).name
    except ValueError:
        return f"type{t}"


def check_pirun(args, state):
    ref = state["ref"]
    p = run_tool([args.pirun, "--info", "--tensors", state["model"]])
    err = p.stderr.decode(errors="replace").strip()
    assert p.returncode == 0, f"pi-run --info --tensors exited {p.returncode}: {err}"
    out = parse_pirun(p.stdout.decode("utf-8", errors="replace"))
    mm = Mismatches()
    h = out["header"]
    arch = ref_kv(ref, "general.architecture")
    mm.eq("architecture", h.get("architecture"), arch)
    mm.eq("kind", h.get("kind"), "dense (GGUF)")
    mm.eq("name", h.get("name"), ref_kv(ref, "general.name"))
    for field, key in (("n_layer", "block_count"), ("n_embd", "embedding_length"),
                       ("n_ff", "feed_forward_length"), ("n_head", "attention.head_count"),
                       ("n_head_kv", "attention.head_count_kv"),
                       ("n_ctx_train", "context_length")):
        mm.eq(field, h.get(field), str(ref_kv(ref, f"{arch}.{key}")))
    emb = next((t for t in ref["tensors"] if t["name"] == "token_embd.weight"), None)
    assert emb is not None, "reference has no token_embd.weight"
    mm.eq("n_vocab", h.get("n_vocab"), str(emb["dims"][1]))

    # per-type summary
    if out["summary"] is None:
        mm.add("no 'tensor types (...)' line")
    else:
        n, size, weights = out["summary"]
        mm.eq("summary tensor count", n, len(ref["tensors"]))
        mm.eq("summary weights", weights, sum(t["n_elements"] for t in ref["tensors"]))
        total = sum(t["nbytes"] for t in ref["tensors"])
        if not human_ok(size, total):
            mm.add(f"summary size: printed {size!r}, total tensor bytes are {total}")
    want_types = {}
    for t in ref["tensors"]:
        s = want_types.setdefault(type_name(t["type"]), [0, 0, 0])
        s[0] += 1
        s[1] += t["nbytes"]
        s[2] += t["n_elements"]
    got_types = {name: (cnt, size, bpw) for name, cnt, size, bpw in out["types"]}
    mm.eq("type table (names)", sorted(got_types), sorted(want_types))
    for name, (cnt, nbytes, elems) in want_types.items():
        if name not in got_types:
            continue
        gcnt, gsize, gbpw = got_types[name]
        mm.eq(f"{name} tensor count", gcnt, cnt)
        if not human_ok(gsize, nbytes):
            mm.add(f"{name} bytes: printed {gsize!r}, reference total {nbytes}")
        if abs(gbpw - 8.0 * nbytes / elems) > 0.0005 + 1e-9:
            mm.add(f"{name} bits/weight: printed {gbpw}, reference {8.0 * nbytes / elems:.4f}")

    # every tensor line
    lines = out["tensors"]
    if lines is None:
        mm.add("no 'tensors:' list")
    else:
        mm.eq("tensor line names (in order)", [x[0] for x in lines],
              [t["name"] for t in ref["tensors"]])
        for (name, tname, dims, nbytes), t in zip(lines, ref["tensors"]):
            if name != t["name"]:
                continue
            mm.eq(f"{name} type", tname, type_name(t["type"]))
            mm.eq(f"{name} shape", dims, t["dims"])
            mm.eq(f"{name} bytes", nbytes, t["nbytes"])

    # metadata section: the key list (values are shortened there)
    mm.eq("metadata key count", out["meta_n"], len(ref["kv"]))
    mm.eq("metadata keys (in order)", out["meta_keys"], [kv["key"] for kv in ref["kv"]])
    if err:
        mm.add(f"unexpected stderr: {err[:300]!r}")
    mm.done()


# ---------------------------------------------------------------------------------
# (3) the same file under the sparse magic PWRI
# ---------------------------------------------------------------------------------

def pwri_path(args, state):
    if "pwri" not in state:
        state["pwri"] = patched(state["model"], os.path.join(args.tmp, "smollm2_pwri.gguf"),
                                b"PWRI")
    return state["pwri"]


def check_pwri_dump(args, state):
    path = pwri_path(args, state)
    with open(path, "rb") as f:
        assert f.read(4) == b"PWRI", "patching the magic failed"
    d = dump(args.dump, path)
    mm = Mismatches()
    compare_dump(mm, d, state["ref"], "PWRI")
    if "dump" in state:
        a, b = dict(state["dump"]), dict(d)
        a.pop("magic", None)
        b.pop("magic", None)
        if a != b:
            mm.add("PWRI dump differs from the GGUF dump beyond the magic")
    mm.done()


def check_pwri_pirun(args, state):
    path = pwri_path(args, state)
    p = run_tool([args.pirun, "--info", path])
    err = p.stderr.decode(errors="replace").strip()
    assert p.returncode != 0, ("pi-run --info accepted a dense layout under magic PWRI "
                               f"(exit 0); stdout starts {p.stdout[:300]!r}")
    assert p.returncode > 0 and p.returncode < 128, (
        f"pi-run --info died with status {p.returncode} (signal?): {err!r}")
    assert err, "pi-run --info failed without a message on stderr"
    low = err.lower()
    problems = []
    if "sparse" not in low and "pwri" not in low:
        problems.append("does not say the model is sparse/PWRI")
    if "ffn_down_t" not in low and "predictor" not in low:
        problems.append("mentions neither ffn_down_t nor a predictor")
    names = [t["name"] for t in state["ref"]["tensors"]]
    named = [n for n in names if n in err]
    named += re.findall(r"\bblk\.\d+\.[A-Za-z0-9_.]+", err)
    if not named:
        problems.append("names no tensor")
    assert not problems, f"message {err!r}: " + "; ".join(problems)


# ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", required=True)
    ap.add_argument("--pirun", required=True)
    ap.add_argument("--tmp", required=True)
    args = ap.parse_args()
    t0 = time.monotonic()

    model, why = find_model()
    if model is None:
        skip_or_fail(why)
    print(f"model: {model} ({os.path.getsize(model)} bytes)")
    os.makedirs(args.tmp, exist_ok=True)

    state = {"model": model}
    try:
        state["ref"] = reference(model)
    except Exception:
        print(f"FAIL gguf.GGUFReader cannot read the model:\n{traceback.format_exc()}")
        print("0 passed, 1 failed")
        return 1
    print(f"reference: {len(state['ref']['kv'])} keys, {len(state['ref']['tensors'])} "
          f"tensors ({time.monotonic() - t0:.2f} s)")

    run_check("(1) gguf_dump == gguf.GGUFReader (keys, values, tensors, sha256)",
              check_dump, args, state)
    run_check("(2) pi-run --info --tensors == gguf.GGUFReader", check_pirun, args, state)
    run_check("(3) magic PWRI: gguf_dump reports PWRI, otherwise identical",
              check_pwri_dump, args, state)
    run_check("(3) magic PWRI: pi-run --info refuses the dense layout, naming a tensor",
              check_pwri_pirun, args, state)
    if "pwri" in state:
        try:
            os.remove(state["pwri"])
        except OSError:
            pass

    print(f"time: {time.monotonic() - t0:.2f} s")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
