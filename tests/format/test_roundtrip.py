#!/usr/bin/env python3
"""GGUF round trips between the library and the `gguf` Python package (the
reference implementation of the format).

    test_roundtrip.py --dump PATH/gguf_dump --write PATH/gguf_write_sample --tmp DIR

(a) a file written by gguf.GGUFWriter (every value type, nested arrays, several
    tensor types and shapes) is read by our reader (gguf_dump) with identical
    keys, types, values and tensor bytes;
(b) the same file with magic "PWRI" reads the same and reports PWRI;
(c) our writer's sample (gguf_write_sample) is read by gguf.GGUFReader with the
    values mirrored in expected_sample(), aligned data; also with alignment 64;
(d) the PWRI variant of our writer's output becomes GGUFReader-readable, with
    identical contents, once its magic is patched back to GGUF;
(e) GGUFWriter files with non-default alignments read correctly.

Exit status: 0 all passed, 1 a check failed, 77 the gguf package is missing
(1 instead when PI_REQUIRE_ALL=1).
The last line printed is "N passed, N failed".
"""
import argparse
import hashlib
import json
import math
import os
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

from checks import FLOAT_TYPES, INT_TYPES, Mismatches, finish, run_check  # noqa: E402


def f32(x):
    return float(np.float32(x))


def dump(tool, path):
    try:
        p = subprocess.run([tool, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        raise AssertionError(f"cannot run {tool}: {e}")
    assert p.returncode == 0, (f"gguf_dump {path} exited {p.returncode}: "
                               f"{p.stderr.decode(errors='replace').strip()}")
    try:
        return json.loads(p.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise AssertionError(f"gguf_dump output is not valid UTF-8 JSON: {e}\n"
                             f"{p.stdout[:2000]!r}")


def same_value(vtype, got, want):
    """Compare one scalar value from gguf_dump's JSON with the written value."""
    if vtype in FLOAT_TYPES:
        if isinstance(want, float) and math.isnan(want):
            return got == "nan"
        if isinstance(want, float) and math.isinf(want):
            return got == ("inf" if want > 0 else "-inf")
        return (type(got) is float and got == want
                and math.copysign(1.0, got) == math.copysign(1.0, want))
    if vtype == VT.BOOL:
        return type(got) is bool and got == want
    if vtype in INT_TYPES:
        return type(got) is int and got == want
    if vtype == VT.STRING:
        return type(got) is str and got == want
    return False


def compare_kv(mm, got_kvs, want_kvs):
    """want_kvs: [(key, type, elem_type or None, value)], value "<nested>" + n for
    arrays of arrays (value then the outer list)."""
    got_keys = [kv.get("key") for kv in got_kvs]
    want_keys = [k for k, _, _, _ in want_kvs]
    if got_keys != want_keys:
        mm.add(f"key order/set: got {got_keys}, want {want_keys}")
    by_key = {kv.get("key"): kv for kv in got_kvs}
    for key, vtype, etype, value in want_kvs:
        kv = by_key.get(key)
        if kv is None:
            mm.add(f"{key}: missing")
            continue
        mm.eq(f"{key}.type", kv.get("type"), int(vtype))
        mm.eq(f"{key}.elem_type", kv.get("elem_type"),
              None if etype is None else int(etype))
        got = kv.get("value")
        if vtype != VT.ARRAY:
            mm.eq(f"{key}.n", kv.get("n"), 1)
            if not same_value(vtype, got, value):
                mm.add(f"{key}.value: got {got!r}, want {value!r}")
            continue
        mm.eq(f"{key}.n", kv.get("n"), len(value))
        if etype == VT.ARRAY:
            mm.eq(f"{key}.value", got, "<nested>")
            continue
        if not isinstance(got, list) or len(got) != len(value):
            mm.add(f"{key}.value: got {got!r}, want {value!r}")
            continue
        for i, (g, w) in enumerate(zip(got, value)):
            if not same_value(etype, g, w):
                mm.add(f"{key}[{i}]: got {g!r}, want {w!r}")


def compare_reader_fields(mm, reader, want_kvs, extra=None):
    """Compare GGUFReader fields with want_kvs (in order). `extra` maps keys that
    may appear anywhere (e.g. general.alignment) to (type, value)."""
    extra = extra or {}
    fields = [(k, f) for k, f in reader.fields.items() if not k.startswith("GGUF.")]
    got_keys = [k for k, _ in fields if k not in extra]
    want_keys = [k for k, _, _, _ in want_kvs]
    if got_keys != want_keys:
        mm.add(f"key order/set: got {got_keys}, want {want_keys}")
    for k, (vtype, value) in extra.items():
        f = reader.fields.get(k)
        if f is None:
            mm.add(f"{k}: missing")
            continue
        mm.eq(f"{k}.types", list(f.types), [vtype])
        mm.eq(f"{k}.value", f.contents(), value)
    for key, vtype, etype, value in want_kvs:
        f = reader.fields.get(key)
        if f is None:
            mm.add(f"{key}: missing")
            continue
        want_types = [vtype] if etype is None else [vtype, etype]
        mm.eq(f"{key}.types", [int(t) for t in f.types], [int(t) for t in want_types])
        got = f.contents()
        if vtype != VT.ARRAY:
            if not reader_value_eq(vtype, got, value):
                mm.add(f"{key}.value: got {got!r}, want {value!r}")
            continue
        if not isinstance(got, list) or len(got) != len(value):
            mm.add(f"{key}.value: got {got!r}, want {value!r}")
            continue
        for i, (g, w) in enumerate(zip(got, value)):
            if not reader_value_eq(etype, g, w):
                mm.add(f"{key}[{i}]: got {g!r}, want {w!r}")


def reader_value_eq(vtype, got, want):
    if vtype in FLOAT_TYPES:
        got = float(got)
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
    if vtype == VT.BOOL:
        return bool(got) is bool(want) and isinstance(got, (bool, np.bool_))
    if vtype in INT_TYPES:
        return int(got) == want
    return got == want


def patched(src, dst, magic):
    with open(src, "rb") as f:
        b = bytearray(f.read())
    b[0:4] = magic
    with open(dst, "wb") as f:
        f.write(bytes(b))
    return dst


def gguf_dims(shape, raw_dtype=None):
    """GGUF dims (ne[0] first) of a numpy shape; for raw quantized data the last
    numpy dim is in bytes."""
    shape = list(shape)
    if raw_dtype is not None:
        block, tsize = gguf.GGML_QUANT_SIZES[raw_dtype]
        shape[-1] = shape[-1] // tsize * block
    return list(reversed(shape))


def make_q8_0(rng, n_blocks, shape):
    blocks = rng.integers(0, 256, size=(n_blocks, 34), dtype=np.uint8)
    scales = (np.arange(n_blocks, dtype=np.float32) * 0.0078125 + 0.015625).astype(np.float16)
    blocks[:, 0:2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(shape)


# ---------------------------------------------------------------------------------
# (a), (b), (e): files written by gguf.GGUFWriter
# ---------------------------------------------------------------------------------

def reference_kvs(arch):
    nan, inf = float("nan"), float("inf")
    kvs = [
        ("general.architecture", VT.STRING, None, arch),
        ("a.u8", VT.UINT8, None, 255),
        ("a.i8", VT.INT8, None, -128),
        ("a.u16", VT.UINT16, None, 65535),
        ("a.i16", VT.INT16, None, -32768),
        ("a.u32", VT.UINT32, None, 2**32 - 1),
        ("a.i32", VT.INT32, None, -2**31),
        ("a.f32", VT.FLOAT32, None, f32(0.1)),
        ("a.f32_neg_zero", VT.FLOAT32, None, -0.0),
        ("a.f32_nan", VT.FLOAT32, None, nan),
        ("a.u64", VT.UINT64, None, 2**64 - 1),
        ("a.u64_small", VT.UINT64, None, 12345678901234),
        ("a.i64", VT.INT64, None, -2**63),
        ("a.i64_max", VT.INT64, None, 2**63 - 1),
        ("a.f64", VT.FLOAT64, None, 0.1),
        ("a.f64_inf", VT.FLOAT64, None, -inf),
        ("a.f64_tiny", VT.FLOAT64, None, 5e-324),
        ("a.bool_true", VT.BOOL, None, True),
        ("a.bool_false", VT.BOOL, None, False),
        ("a.str_empty", VT.STRING, None, ""),
        ("a.str_ascii", VT.STRING, None, "The quick brown fox"),
        ("a.str_unicode", VT.STRING, None,
         "h\u00e9llo \u4e16\u754c \U0001f680 \"quoted\" back\\slash\ttab\nnl \x01\x1f ctl \x7f"),
        ("a.str_long", VT.STRING, None, "xyz\u00e9" * 5000),
        ("a.arr_u8", VT.ARRAY, VT.UINT8, [0, 1, 127, 128, 255]),
        ("a.arr_i8", VT.ARRAY, VT.INT8, [-128, -1, 0, 127]),
        ("a.arr_u16", VT.ARRAY, VT.UINT16, [0, 65535, 300]),
        ("a.arr_i16", VT.ARRAY, VT.INT16, [-32768, 32767, -2]),
        ("a.arr_u32", VT.ARRAY, VT.UINT32, [0, 2**32 - 1, 7]),
        ("a.arr_i32", VT.ARRAY, VT.INT32, [-2**31, 2**31 - 1, 0]),
        ("a.arr_i32_long", VT.ARRAY, VT.INT32, list(range(-500, 1500, 3))),
        ("a.arr_f32", VT.ARRAY, VT.FLOAT32,
         [f32(x) for x in (0.0, -0.0, 1.5, 0.1, 3.4028234663852886e38, 1e-45)] + [inf, -inf, nan]),
        ("a.arr_u64", VT.ARRAY, VT.UINT64, [0, 2**63, 2**64 - 1]),
        ("a.arr_i64", VT.ARRAY, VT.INT64, [-2**63, 2**63 - 1, -1]),
        ("a.arr_f64", VT.ARRAY, VT.FLOAT64, [0.0, -2.5, 1e300, 5e-324, 1 / 3]),
        ("a.arr_bool", VT.ARRAY, VT.BOOL, [True, False, False, True]),
        ("a.arr_one", VT.ARRAY, VT.UINT32, [42]),
        ("a.arr_str", VT.ARRAY, VT.STRING,
         ["alpha", "", "\u03b2\u03b7\u03c4\u03b1", "with \"quote\"", "\U0001f600", "tab\there"]),
        ("a.nested_int", VT.ARRAY, VT.ARRAY, [[1, 2, 3], [4, 5]]),
        ("a.nested_str", VT.ARRAY, VT.ARRAY, [["a", "bc"], ["\u00e9"], ["x", "y", "z"]]),
        ("a.nested_deep", VT.ARRAY, VT.ARRAY, [[[1, 2], [3]], [[4.5]]]),
        ("a.after_nested", VT.STRING, None, "still in sync"),
        ("a.last_u32", VT.UINT32, None, 7),
    ]
    return kvs


def reference_tensors(rng):
    """[(name, ndarray, raw_dtype or None, expected GGUF type)]"""
    ts = []

    def add(name, arr, raw=None, qtype=None):
        ts.append((name, arr, raw, qtype))

    add("t.f32_1d", rng.standard_normal(7).astype(np.float32), qtype=QT.F32)
    add("t.f32_2d", rng.standard_normal((3, 5)).astype(np.float32), qtype=QT.F32)
    add("t.f32_3d", rng.standard_normal((2, 3, 4)).astype(np.float32), qtype=QT.F32)
    add("t.f32_4d", rng.standard_normal((2, 1, 3, 2)).astype(np.float32), qtype=QT.F32)
    add("t.f32_one", np.array([1.25], dtype=np.float32), qtype=QT.F32)
    add("t.f16_2d", rng.standard_normal((4, 8)).astype(np.float16), qtype=QT.F16)
    add("t.f16_1d", rng.standard_normal(3).astype(np.float16), qtype=QT.F16)
    add("t.i32_1d", rng.integers(-2**31, 2**31 - 1, 6, dtype=np.int32), qtype=QT.I32)
    add("t.i32_3d", rng.integers(-1000, 1000, (2, 2, 3), dtype=np.int32), qtype=QT.I32)
    add("t.q8_0_1d", make_q8_0(rng, 3, (3 * 34,)), raw=QT.Q8_0, qtype=QT.Q8_0)
    add("t.q8_0_2d", make_q8_0(rng, 6, (3, 2 * 34)), raw=QT.Q8_0, qtype=QT.Q8_0)
    add("t.q8_0_3d", make_q8_0(rng, 4, (2, 2, 34)), raw=QT.Q8_0, qtype=QT.Q8_0)
    # the longest tensor name the format allows: 63 bytes
    add("t." + "n" * 61, np.arange(5, dtype=np.float32), qtype=QT.F32)
    return ts


def write_reference(path, alignment=None):
    rng = np.random.default_rng(20240607)
    w = gguf.GGUFWriter(path, "testarch")
    kvs = reference_kvs("testarch")
    if alignment is not None:
        w.add_custom_alignment(alignment)
        kvs.insert(1, ("general.alignment", VT.UINT32, None, alignment))
    for key, vtype, etype, value in kvs:
        if key in ("general.architecture", "general.alignment"):
            continue  # added by the writer itself
        w.add_key_value(key, value, vtype, sub_type=etype)
    tensors = reference_tensors(rng)
    for name, arr, raw, _ in tensors:
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return kvs, tensors


def compare_dump_with_reference(d, path, kvs, tensors, magic, alignment):
    mm = Mismatches()
    ref = gguf.GGUFReader(patched(path, path + ".ref", b"GGUF") if magic != "GGUF" else path)
    mm.eq("magic", d.get("magic"), magic)
    mm.eq("version", d.get("version"), 3)
    mm.eq("alignment", d.get("alignment"), alignment)
    mm.eq("data_offset", d.get("data_offset"), int(ref.data_offset))
    if isinstance(d.get("data_offset"), int) and d["data_offset"] % alignment:
        mm.add(f"data_offset {d['data_offset']} not a multiple of {alignment}")
    compare_kv(mm, d.get("kv", []), kvs)
    got_t = d.get("tensors", [])
    mm.eq("tensor names", [t.get("name") for t in got_t], [t[0] for t in tensors])
    by_name = {t.get("name"): t for t in got_t}
    ref_by_name = {t.name: t for t in ref.tensors}
    for name, arr, raw, qtype in tensors:
        t = by_name.get(name)
        if t is None:
            continue
        raw_bytes = arr.tobytes()
        mm.eq(f"{name}.type", t.get("type"), int(qtype))
        mm.eq(f"{name}.dims", t.get("dims"), gguf_dims(arr.shape, raw))
        mm.eq(f"{name}.nbytes", t.get("nbytes"), len(raw_bytes))
        mm.eq(f"{name}.sha256", t.get("sha256"), hashlib.sha256(raw_bytes).hexdigest())
        r = ref_by_name[name]
        mm.eq(f"{name}.offset", t.get("offset"), int(r.data_offset) - int(ref.data_offset))
        if isinstance(t.get("offset"), int) and t["offset"] % alignment:
            mm.add(f"{name}.offset {t['offset']} not a multiple of {alignment}")
    mm.done()


def check_a(args, state):
    path = os.path.join(args.tmp, "ref_writer.gguf")
    kvs, tensors = write_reference(path)
    state["a"] = (path, kvs, tensors)
    d = dump(args.dump, path)
    state["a_dump"] = d
    compare_dump_with_reference(d, path, kvs, tensors, "GGUF", 32)


def check_b(args, state):
    assert "a" in state, "needs (a)'s file"
    path, kvs, tensors = state["a"]
    pw = patched(path, os.path.join(args.tmp, "ref_writer_pwri.gguf"), b"PWRI")
    d = dump(args.dump, pw)
    compare_dump_with_reference(d, pw, kvs, tensors, "PWRI", 32)
    if "a_dump" in state:
        a = dict(state["a_dump"])
        b = dict(d)
        a.pop("magic")
        b.pop("magic")
        assert a == b, "PWRI dump differs from the GGUF dump beyond the magic"


def check_e(args, state, alignment):
    path = os.path.join(args.tmp, f"ref_writer_align{alignment}.gguf")
    kvs, tensors = write_reference(path, alignment)
    d = dump(args.dump, path)
    compare_dump_with_reference(d, path, kvs, tensors, "GGUF", alignment)


# ---------------------------------------------------------------------------------
# (c), (d): files written by our writer (tests/format/gguf_write_sample.c)
# ---------------------------------------------------------------------------------

def expected_sample():
    """Mirror of gguf_write_sample.c: (kvs, tensors) where tensors are
    [(name, type, dims, bytes)]."""
    kvs = [
        ("general.architecture", VT.STRING, None, "sample"),
        ("sample.str_ascii", VT.STRING, None, "hello, world"),
        ("sample.str_utf8", VT.STRING, None,
         "h\u00e9llo w\u00f6rld \u2014 \u65e5\u672c\u8a9e \U0001f680"),
        ("sample.str_empty", VT.STRING, None, ""),
        ("sample.str_escape", VT.STRING, None,
         "quote\" backslash\\ tab\t newline\n ctl\x01 end"),
        ("sample.u8", VT.UINT8, None, 200),
        ("sample.i8", VT.INT8, None, -100),
        ("sample.u16", VT.UINT16, None, 65535),
        ("sample.i16", VT.INT16, None, -32768),
        ("sample.u32", VT.UINT32, None, 4294967295),
        ("sample.i32", VT.INT32, None, -2**31),
        ("sample.f32", VT.FLOAT32, None, f32(0.1)),
        ("sample.bool_true", VT.BOOL, None, True),
        ("sample.bool_false", VT.BOOL, None, False),
        ("sample.u64", VT.UINT64, None, 2**64 - 1),
        ("sample.i64", VT.INT64, None, -2**63),
        ("sample.f64", VT.FLOAT64, None, 2.718281828459045),
        ("sample.f64_neg", VT.FLOAT64, None, -1.5e300),
        ("sample.arr_u8", VT.ARRAY, VT.UINT8, [0, 1, 127, 128, 255]),
        ("sample.arr_i8", VT.ARRAY, VT.INT8, [-128, -1, 0, 1, 127]),
        ("sample.arr_u16", VT.ARRAY, VT.UINT16, [0, 1, 65535]),
        ("sample.arr_i16", VT.ARRAY, VT.INT16, [-32768, 0, 32767]),
        ("sample.arr_u32", VT.ARRAY, VT.UINT32, [0, 1, 4294967295]),
        ("sample.arr_i32", VT.ARRAY, VT.INT32, [-2**31, -1, 0, 2**31 - 1]),
        ("sample.arr_f32", VT.ARRAY, VT.FLOAT32,
         [0.0, -1.5, f32(0.1), f32(3.4028234663852886e38), -0.0]),
        ("sample.arr_bool", VT.ARRAY, VT.BOOL, [True, False, True]),
        ("sample.arr_u64", VT.ARRAY, VT.UINT64, [0, 1, 2**64 - 1]),
        ("sample.arr_i64", VT.ARRAY, VT.INT64, [-2**63, -1, 0, 2**63 - 1]),
        ("sample.arr_f64", VT.ARRAY, VT.FLOAT64, [0.0, -2.5, 1e300, 5e-324]),
        ("sample.arr_str", VT.ARRAY, VT.STRING,
         ["alpha", "", "\u03b2\u03b7\u03c4\u03b1", "with space", "quote\"q"]),
        ("sample.last", VT.STRING, None, "end"),
    ]
    t_f32 = np.array([i * 0.25 - 1.0 for i in range(15)], dtype="<f4").tobytes()
    t_f16 = np.array([0x3c00, 0xc000, 0x3800, 0x0000, 0x8000, 0x7bff, 0x0001, 0x3555],
                     dtype="<u2").tobytes()
    q8 = bytearray()
    for b in range(4):
        scale = 0x2c00 + 0x200 * b
        q8 += bytes([scale & 0xff, scale >> 8])
        q8 += bytes([(j * 37 + b * 11 + 5) & 255 for j in range(32)])
    t_i32 = np.array([-3, 0, 1, 2**31 - 1, -2**31, 42, 7], dtype="<i4").tobytes()
    tensors = [
        ("t.f32", QT.F32, [5, 3], t_f32),
        ("t.f16", QT.F16, [8], t_f16),
        ("t.q8_0", QT.Q8_0, [64, 2], bytes(q8)),
        ("t.i32", QT.I32, [7], t_i32),
    ]
    return kvs, tensors


def write_sample(args, name, *extra):
    path = os.path.join(args.tmp, name)
    if os.path.exists(path):
        os.remove(path)
    try:
        p = subprocess.run([args.write, path, *extra], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    except OSError as e:
        raise AssertionError(f"cannot run {args.write}: {e}")
    assert p.returncode == 0, (f"gguf_write_sample {' '.join(extra)} exited "
                               f"{p.returncode}: {p.stderr.decode(errors='replace').strip()}")
    return path


def compare_sample_with_reader(path, alignment):
    mm = Mismatches()
    kvs, tensors = expected_sample()
    r = gguf.GGUFReader(path)
    mm.eq("version", int(r.fields["GGUF.version"].parts[0][0]), 3)
    mm.eq("tensor_count", int(r.fields["GGUF.tensor_count"].parts[0][0]), len(tensors))
    extra = {"general.alignment": (VT.UINT32, alignment)} if alignment != 32 else {}
    if alignment == 32 and "general.alignment" in r.fields:
        f = r.fields["general.alignment"]
        mm.eq("general.alignment (default, optional)", f.contents(), 32)
        extra = {"general.alignment": (VT.UINT32, 32)}
    mm.eq("kv_count", int(r.fields["GGUF.kv_count"].parts[0][0]), len(kvs) + len(extra))
    compare_reader_fields(mm, r, kvs, extra)
    mm.eq("alignment", int(r.alignment), alignment)
    if r.data_offset % alignment:
        mm.add(f"data_offset {r.data_offset} not a multiple of {alignment}")
    mm.eq("tensor names", [t.name for t in r.tensors], [t[0] for t in tensors])
    by_name = {t.name: t for t in r.tensors}
    for name, qtype, dims, data in tensors:
        t = by_name.get(name)
        if t is None:
            continue
        mm.eq(f"{name}.type", int(t.tensor_type), int(qtype))
        mm.eq(f"{name}.dims", [int(x) for x in t.shape], dims)
        mm.eq(f"{name}.n_bytes", int(t.n_bytes), len(data))
        if t.data.tobytes() != data:
            mm.add(f"{name}.data differs: got {t.data.tobytes().hex()}, want {data.hex()}")
        if t.data_offset % alignment:
            mm.add(f"{name} data offset {t.data_offset} not a multiple of {alignment}")
    size = os.path.getsize(path)
    last = max(r.tensors, key=lambda t: t.data_offset) if r.tensors else None
    if last is not None and last.data_offset + last.n_bytes > size:
        mm.add(f"file is {size} bytes, shorter than the last tensor's end")
    mm.done()
    return r


def compare_sample_with_dump(args, path, magic, alignment):
    mm = Mismatches()
    kvs, tensors = expected_sample()
    d = dump(args.dump, path)
    mm.eq("magic", d.get("magic"), magic)
    mm.eq("version", d.get("version"), 3)
    mm.eq("alignment", d.get("alignment"), alignment)
    got_kvs = [kv for kv in d.get("kv", []) if kv.get("key") != "general.alignment"]
    compare_kv(mm, got_kvs, kvs)
    got_t = d.get("tensors", [])
    mm.eq("tensor names", [t.get("name") for t in got_t], [t[0] for t in tensors])
    by_name = {t.get("name"): t for t in got_t}
    for name, qtype, dims, data in tensors:
        t = by_name.get(name)
        if t is None:
            continue
        mm.eq(f"{name}.type", t.get("type"), int(qtype))
        mm.eq(f"{name}.dims", t.get("dims"), dims)
        mm.eq(f"{name}.nbytes", t.get("nbytes"), len(data))
        mm.eq(f"{name}.sha256", t.get("sha256"), hashlib.sha256(data).hexdigest())
    mm.done()


def check_c(args, state):
    path = write_sample(args, "our_writer.gguf")
    state["c"] = path
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF", "magic is not GGUF"
    compare_sample_with_reader(path, 32)


def check_c_dump(args, state):
    path = state.get("c") or write_sample(args, "our_writer.gguf")
    compare_sample_with_dump(args, path, "GGUF", 32)


def check_c_align(args, state, alignment):
    path = write_sample(args, f"our_writer_align{alignment}.gguf", "gguf", str(alignment))
    compare_sample_with_reader(path, alignment)
    compare_sample_with_dump(args, path, "GGUF", alignment)


def check_d(args, state):
    path = write_sample(args, "our_writer_pwri.gguf", "pwri")
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"PWRI", f"first 4 bytes are {data[:4]!r}, not b'PWRI'"
    try:
        gguf.GGUFReader(path)
    except ValueError:
        pass
    else:
        raise AssertionError("GGUFReader accepted a PWRI file (expected 'magic invalid')")
    back = patched(path, os.path.join(args.tmp, "our_writer_pwri_as_gguf.gguf"), b"GGUF")
    compare_sample_with_reader(back, 32)
    compare_sample_with_dump(args, path, "PWRI", 32)
    if "c" in state:
        with open(state["c"], "rb") as f:
            g = f.read()
        assert g[4:] == data[4:], "PWRI file differs from the GGUF file beyond the magic"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", required=True)
    ap.add_argument("--write", required=True)
    ap.add_argument("--tmp", required=True)
    args = ap.parse_args()
    os.makedirs(args.tmp, exist_ok=True)
    import logging
    logging.disable(logging.WARNING)  # GGUFWriter logs the endianness at INFO

    state = {}
    run_check("(a) gguf.GGUFWriter -> gguf_dump", check_a, args, state)
    run_check("(b) same file with magic PWRI -> gguf_dump", check_b, args, state)
    run_check("(c) gguf_write_sample -> gguf.GGUFReader", check_c, args, state)
    run_check("(c) gguf_write_sample -> gguf_dump", check_c_dump, args, state)
    run_check("(c) gguf_write_sample alignment 64 -> GGUFReader, gguf_dump",
              check_c_align, args, state, 64)
    run_check("(d) gguf_write_sample pwri -> patched -> gguf.GGUFReader", check_d, args, state)
    if hasattr(gguf.GGUFWriter, "add_custom_alignment"):
        for al in (64, 256, 8):
            run_check(f"(e) gguf.GGUFWriter alignment {al} -> gguf_dump", check_e, args,
                      state, al)
    else:
        print("skip (e): gguf.GGUFWriter has no add_custom_alignment")

    return finish()


if __name__ == "__main__":
    sys.exit(main())
