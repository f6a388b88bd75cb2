#!/usr/bin/env python3
"""Write the GGUF test corpus: valid seeds, malformed files and unsupported files.

This script has its own tiny GGUF writer (standard library only) so that the
corpus does not depend on the library's reader or writer. Every file is built
byte by byte; malformed files are built by corrupting or truncating valid
layouts. Run it from anywhere:

    python3 tests/corpus/make_corpus.py

It clears and rewrites tests/corpus/{valid,malformed,unsupported}/ and prints a
SHA-256 of every file. The output is deterministic.

Expected results (checked by tests/format/test_corpus.c):
  valid/        pi_model_open returns PI_OK with metadata_only=1; model_*.gguf also
                open in full and decode two tokens to finite logits
  malformed/    PI_ERR_FORMAT with a message (metadata_only=1)
  unsupported/  PI_ERR_UNSUPPORTED with a message, in a full open (big-endian files;
                model_*.gguf: models this build refuses to run)
"""

import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# Metadata value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i",
              F32: "f", BOOL: "B", U64: "Q", I64: "q", F64: "d"}

# Tensor types: id -> (block elements, block bytes).
T_F32, T_F16, T_Q4_0, T_Q8_0, T_Q4_K = 0, 1, 2, 8, 12
TYPE_BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_Q4_0: (32, 18), T_Q8_0: (32, 34),
              T_Q4_K: (256, 144)}

U64_MAX = (1 << 64) - 1


class W:
    """A byte buffer with named marks (offsets of fields) for truncation cases."""

    def __init__(self, endian="<"):
        self.b = bytearray()
        self.e = endian
        self.marks = {}

    def mark(self, name):
        # The first occurrence of a name wins: it marks the first such field.
        self.marks.setdefault(name, len(self.b))

    def raw(self, data):
        self.b += data

    def pack(self, fmt, *v):
        self.b += struct.pack(self.e + fmt, *v)

    def u32(self, v):
        self.pack("I", v)

    def u64(self, v):
        self.pack("Q", v)

    def string(self, s, what="str"):
        if isinstance(s, str):
            s = s.encode()
        self.mark(what + "_len")
        self.u64(len(s))
        self.mark(what + "_bytes")
        self.raw(s)


def write_value(w, vtype, value):
    """Write a value of type vtype (the type id itself is written by the caller)."""
    if vtype == STRING:
        w.string(value, "val_str")
    elif vtype == ARRAY:
        etype, elems = value
        w.mark("arr_type")
        w.u32(etype)
        w.mark("arr_count")
        w.u64(len(elems))
        w.mark("arr_elems")
        for x in elems:
            write_value(w, etype, x)
    else:
        w.mark("val_scalar")
        w.pack(SCALAR_FMT[vtype], value)


def arr(etype, elems):
    return (etype, list(elems))


def row_bytes(ttype, ne0):
    blk, nb = TYPE_BLOCK[ttype]
    return (ne0 // blk) * nb


def tensor_nbytes(ttype, dims):
    n = row_bytes(ttype, dims[0])
    for d in dims[1:]:
        n *= d
    return n


def pattern(n, seed):
    """n deterministic pseudo-random bytes."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d:%d" % (seed, i)).digest()
        i += 1
    return bytes(out[:n])


def build(kvs, tensors, magic=b"GGUF", version=3, alignment=32, endian="<",
          n_kv=None, n_tensors=None, data_tail=None, pad_byte=b"\0"):
    """Build a GGUF file.

    kvs:      list of (key, vtype, value); key may be bytes.
    tensors:  list of dicts: name, dims, type, and optionally offset (default: laid
              out in order at aligned offsets), n_dims (override), data (bytes).
    alignment: the alignment used to lay out the data section (the key
              general.alignment must be put in kvs by the caller).
    data_tail: if given, the data section is replaced by these bytes.
    Returns the W buffer (with marks) and the data section offset.
    """
    w = W(endian)
    w.mark("magic")
    w.raw(magic)
    w.mark("version")
    w.u32(version)
    w.mark("n_tensors")
    w.u64(len(tensors) if n_tensors is None else n_tensors)
    w.mark("n_kv")
    w.u64(len(kvs) if n_kv is None else n_kv)
    w.mark("kv")
    for key, vtype, value in kvs:
        w.string(key, "key")
        w.mark("val_type")
        w.u32(vtype)
        write_value(w, vtype, value)
    w.mark("tensor_infos")
    offs = []
    off = 0
    for t in tensors:
        if "data" in t:
            nb = len(t["data"])
        elif (t["type"] in TYPE_BLOCK and t["dims"] and min(t["dims"]) >= 0
              and t["dims"][0] % TYPE_BLOCK[t["type"]][0] == 0):
            nb = tensor_nbytes(t["type"], t["dims"])
        else:
            nb = 0  # a deliberately bad tensor: the layout comes from data_tail
        if "offset" in t:
            o = t["offset"]
        else:
            o = off
            off = (off + nb + alignment - 1) // alignment * alignment
        offs.append((o, nb))
        w.string(t["name"], "tname")
        w.mark("n_dims")
        w.u32(t.get("n_dims", len(t["dims"])))
        w.mark("dims")
        for d in t["dims"]:
            w.u64(d & U64_MAX)
        w.mark("ttype")
        w.u32(t["type"])
        w.mark("toffset")
        w.u64(o & U64_MAX)
    w.mark("padding")
    pad = (-len(w.b)) % alignment
    w.raw(pad_byte * pad)
    data_off = len(w.b)
    w.mark("data")
    if data_tail is not None:
        w.raw(data_tail)
    else:
        end = 0
        for i, (t, (o, nb)) in enumerate(zip(tensors, offs)):
            end = max(end, o + nb)
        data = bytearray(end)
        for i, (t, (o, nb)) in enumerate(zip(tensors, offs)):
            data[o:o + nb] = t.get("data", pattern(nb, i))
        w.raw(bytes(data))
    return w, data_off


# --------------------------------------------------------------------------------
# Valid seeds
# --------------------------------------------------------------------------------

def seed_kvs():
    return [
        ("general.architecture", STRING, "test"),
        ("general.name", STRING, "corpus seed"),
        ("test.u8", U8, 200),
        ("test.i8", I8, -100),
        ("test.u16", U16, 60000),
        ("test.i16", I16, -30000),
        ("test.u32", U32, 4000000000),
        ("test.i32", I32, -2000000000),
        ("test.f32", F32, 1.5),
        ("test.bool", BOOL, 1),
        ("test.u64", U64, 1 << 63),
        ("test.i64", I64, -(1 << 62)),
        ("test.f64", F64, -2.25),
        ("test.str_arr", ARRAY, arr(STRING, ["alpha", "", "gamma", "d\u00e9lta"])),
        ("test.i32_arr", ARRAY, arr(I32, [1, -2, 3, -4, 5])),
        ("test.f32_arr", ARRAY, arr(F32, [0.5, -0.25])),
        ("test.bool_arr", ARRAY, arr(BOOL, [0, 1, 1])),
        ("test.empty_arr", ARRAY, arr(U32, [])),
        ("test.nested_arr", ARRAY,
         arr(ARRAY, [arr(U32, [1, 2, 3]), arr(U32, []), arr(U32, [7])])),
        ("test.nested_str_arr", ARRAY,
         arr(ARRAY, [arr(STRING, ["x", "yz"]), arr(STRING, ["w"])])),
    ]


def seed_tensors():
    return [
        {"name": "tok_embd.weight", "dims": [4, 2], "type": T_F32},
        {"name": "norm.weight", "dims": [8], "type": T_F16},
        {"name": "x" * 63, "dims": [1, 1, 1, 2], "type": T_F32},   # longest name
        {"name": "blk.0.ffn_up.weight", "dims": [32, 2], "type": T_Q8_0},
    ]


def seed(magic=b"GGUF", version=3, endian="<"):
    return build(seed_kvs(), seed_tensors(), magic=magic, version=version,
                 endian=endian)[0]


def small_kvs():
    return [("general.architecture", STRING, "test"), ("test.v", U32, 7)]


def small_tensors():
    return [{"name": "a", "dims": [4], "type": T_F32},
            {"name": "b", "dims": [8], "type": T_F32}]


def valid_files():
    out = {}
    out["seed_v3.gguf"] = seed().b
    out["seed_pwri.gguf"] = seed(magic=b"PWRI").b
    out["seed_v2.gguf"] = seed(version=2).b
    kv64 = seed_kvs() + [("general.alignment", U32, 64)]
    out["align64.gguf"] = build(kv64, seed_tensors(), alignment=64)[0].b
    out["minimal_no_kv_no_tensor.gguf"] = build([], [])[0].b
    out["q4_0_q4_k.gguf"] = build(small_kvs(), [
        {"name": "q4_0", "dims": [64, 2], "type": T_Q4_0},
        {"name": "q4_k", "dims": [256], "type": T_Q4_K}])[0].b
    out.update(model_files()[0])
    return out


# --------------------------------------------------------------------------------
# Small llama models (model_*.gguf): seeds for fuzz_model that run, and models that
# must be refused
# --------------------------------------------------------------------------------

def f32s(n, seed, scale=0.1):
    """n deterministic F32 values in [-scale, scale)."""
    raw = pattern(2 * n, 1000 + seed)
    return struct.pack("<%df" % n, *[
        (raw[2 * i] * 256 + raw[2 * i + 1]) / 32768.0 * scale - scale for i in range(n)])


def f16s(n, seed, scale=0.1):
    raw = pattern(2 * n, 2000 + seed)
    return struct.pack("<%de" % n, *[
        (raw[2 * i] * 256 + raw[2 * i + 1]) / 32768.0 * scale - scale for i in range(n)])


def tiny_llama(sparse=False, rank=4, extra_kvs=(), extra_tensors=(), drop=(), arch="llama",
               prefix="llama", alignment=32):
    """A 1-layer llama: n_embd 8, n_ff 16, 2 heads, vocab 4, F32 weights (F16
    predictor), tied embeddings. The last byte of the file is 0 (fuzz_model reads it
    as: CPU only, the file's default FFN mode, no statistics). `prefix`: the key
    prefix (another architecture's files reuse the layout, see arch_files)."""
    E, F, V = 8, 16, 4
    kvs = [("general.architecture", STRING, arch),
           ("general.name", STRING, "corpus model"),
           (prefix + ".context_length", U32, 64),
           (prefix + ".embedding_length", U32, E),
           (prefix + ".block_count", U32, 1),
           (prefix + ".feed_forward_length", U32, F),
           (prefix + ".attention.head_count", U32, 2),
           (prefix + ".attention.head_count_kv", U32, 2),
           (prefix + ".attention.layer_norm_rms_epsilon", F32, 1e-5)]
    if sparse:
        kvs.append(("powerinfer.sparse_threshold", F32, 0.0))
    kvs += list(extra_kvs)
    ones = struct.pack("<%df" % E, *([1.0] * E))
    ts = [("token_embd.weight", [E, V], T_F32, f32s(E * V, 1, 1.0)),
          ("output_norm.weight", [E], T_F32, ones),
          ("blk.0.attn_norm.weight", [E], T_F32, ones),
          ("blk.0.attn_q.weight", [E, E], T_F32, f32s(E * E, 2)),
          ("blk.0.attn_k.weight", [E, E], T_F32, f32s(E * E, 3)),
          ("blk.0.attn_v.weight", [E, E], T_F32, f32s(E * E, 4)),
          ("blk.0.attn_output.weight", [E, E], T_F32, f32s(E * E, 5)),
          ("blk.0.ffn_norm.weight", [E], T_F32, ones),
          ("blk.0.ffn_gate.weight", [E, F], T_F32, f32s(E * F, 6)),
          ("blk.0.ffn_up.weight", [E, F], T_F32, f32s(E * F, 7))]
    if sparse:
        ts += [("blk.0.ffn_down_t.weight", [E, F], T_F32, f32s(E * F, 8)),
               ("blk.0.fc1.weight", [E, rank], T_F16, f16s(E * rank, 9)),
               ("blk.0.fc2.weight", [rank, F], T_F16, f16s(rank * F, 10)[:-2] + b"\0\0")]
    else:
        ts.append(("blk.0.ffn_down.weight", [F, E], T_F32, f32s(F * E, 8)[:-4] + b"\0" * 4))
    ts = [t for t in ts if t[0] not in drop] + list(extra_tensors)
    if alignment != 32:
        kvs.append(("general.alignment", U32, alignment))
    return build(kvs, [{"name": n, "dims": d, "type": ty, "data": data}
                       for n, d, ty, data in ts], magic=b"PWRI" if sparse else b"GGUF",
                 alignment=alignment)[0].b


def refused_files():
    """Models whose metadata opens (metadata_only) but whose full open is PI_ERR_FORMAT:
    values the description checks when it is built."""
    f = lambda *v: struct.pack("<%df" % len(v), *v)
    freqs = lambda data: tiny_llama(extra_tensors=[("rope_freqs.weight", [2], T_F32, data)])
    return {
        # RoPE factors divide the angles: zero, negative, NaN or infinite are broken files
        "model_llama_rope_freqs_zero.gguf": freqs(f(1.0, 0.0)),
        "model_llama_rope_freqs_negative.gguf": freqs(f(-2.0, 1.0)),
        "model_llama_rope_freqs_nan.gguf": freqs(f(1.0, float("nan"))),
        "model_llama_rope_freqs_inf.gguf": freqs(f(float("inf"), 1.0)),
        # a cap that becomes 0 as a float would silently mean "no cap"
        "model_gemma2_softcap_tiny.gguf": tiny_llama(arch="gemma2", prefix="gemma2",
            extra_kvs=[("gemma2.final_logit_softcapping", F64, 1e-60)]),
        # pattern entries are 0 (global) or 1 (local)
        "model_gemma2_swa_pattern_bad.gguf": tiny_llama(arch="gemma2", prefix="gemma2",
            extra_kvs=[("gemma2.attention.sliding_window", U32, 2),
                       ("gemma2.attention.sliding_window_pattern", ARRAY, arr(I32, [-1]))]),
        # a fused gate+up of the wrong width is named as ffn_up, not as a missing ffn_gate
        "model_phi3_ffn_up_wrong_width.gguf": tiny_llama(arch="phi3", prefix="phi3",
            drop=("blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"),
            extra_tensors=[("blk.0.ffn_up.weight", [8, 24], T_F32, f32s(8 * 24, 40))]),
        **moe_files()[1],
    }


def data_offset(b):
    """Where the data section of the GGUF file in bytes b starts (gguf's reader)."""
    import tempfile
    import gguf
    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(b)
        f.flush()
        return gguf.GGUFReader(f.name).data_offset


def arch_files():
    """Seeds of each architecture family's layout (issue 13), on tiny_llama's 1-layer
    shapes (n_embd 8, n_ff 16, 2 heads of 4, vocab 4): what fuzz_model mutates into the
    other architectures' code paths."""
    E, F = 8, 16
    b = lambda name, n, seed: (name, [n], T_F32, f32s(n, seed))
    norm = lambda name: (name, [E], T_F32, struct.pack("<%df" % E, *([1.0] * E)))
    qkv_drop = ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight")
    # rope_freqs at an odd address (general.alignment 1): the factors are read as floats
    # (UBSan: misaligned load before they were copied); the name's length moves the
    # data section until its offset is odd
    for n in range(4):
        odd = tiny_llama(extra_kvs=[("corpus.pad", STRING, "x" * n)], alignment=1,
                         extra_tensors=[("rope_freqs.weight", [2], T_F32,
                                         struct.pack("<2f", 1.0, 2.0))])
        if data_offset(odd) % 2:
            break
    return {
        "model_llama_rope_freqs_align1.gguf": odd,
        # QKV biases
        "model_qwen2.gguf": tiny_llama(arch="qwen2", prefix="qwen2", extra_tensors=[
            b("blk.0.attn_q.bias", E, 20), b("blk.0.attn_k.bias", E, 21),
            b("blk.0.attn_v.bias", E, 22)]),
        # per-head q/k norms
        "model_qwen3.gguf": tiny_llama(arch="qwen3", prefix="qwen3", extra_tensors=[
            ("blk.0.attn_q_norm.weight", [4], T_F32, f32s(4, 23, 1.0)),
            ("blk.0.attn_k_norm.weight", [4], T_F32, f32s(4, 24, 1.0))]),
        # post-norms, soft-caps, a 2-position window on layer 0 (local)
        "model_gemma2.gguf": tiny_llama(arch="gemma2", prefix="gemma2", extra_kvs=[
            ("gemma2.attn_logit_softcapping", F32, 5.0),
            ("gemma2.final_logit_softcapping", F32, 3.0),
            ("gemma2.attention.sliding_window", U32, 2)], extra_tensors=[
            norm("blk.0.post_attention_norm.weight"), norm("blk.0.post_ffw_norm.weight")]),
        # fused QKV and gate+up, LongRoPE factors and attention factor
        "model_phi3.gguf": tiny_llama(arch="phi3", prefix="phi3", extra_kvs=[
            ("phi3.rope.scaling.attn_factor", F32, 1.2),
            ("phi3.rope.scaling.original_context_length", U32, 16)],
            drop=qkv_drop + ("blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"), extra_tensors=[
            ("blk.0.attn_qkv.weight", [E, 3 * E], T_F32, f32s(3 * E * E, 25)),
            ("blk.0.ffn_up.weight", [E, 2 * F], T_F32, f32s(2 * E * F, 26)),
            ("rope_factors_long.weight", [2], T_F32, struct.pack("<2f", 1.0, 3.0)),
            ("rope_factors_short.weight", [2], T_F32, struct.pack("<2f", 1.0, 1.5))]),
        # LayerNorm with bias, plain GELU FFN, biases
        "model_starcoder2.gguf": tiny_llama(arch="starcoder2", prefix="starcoder2",
            drop=("blk.0.ffn_gate.weight",), extra_tensors=[
            b("blk.0.attn_norm.bias", E, 27), b("blk.0.ffn_norm.bias", E, 28),
            b("output_norm.bias", E, 29), b("blk.0.attn_output.bias", E, 30),
            b("blk.0.ffn_up.bias", F, 31), b("blk.0.ffn_down.bias", E, 32)]),
        # parallel attention and FFN (40B layout: attn_norm_2), fused QKV
        "model_falcon.gguf": tiny_llama(arch="falcon", prefix="falcon", extra_kvs=[
            ("falcon.attention.layer_norm_epsilon", F32, 1e-5)],
            drop=qkv_drop + ("blk.0.ffn_gate.weight", "blk.0.ffn_norm.weight"),
            extra_tensors=[
            ("blk.0.attn_qkv.weight", [E, 3 * E], T_F32, f32s(3 * E * E, 33)),
            norm("blk.0.attn_norm_2.weight"), b("blk.0.attn_norm_2.bias", E, 34)]),
    }


def model_files():
    """(valid, unsupported) model files."""
    valid = {
        "model_llama.gguf": tiny_llama(),
        "model_pwri.gguf": tiny_llama(sparse=True),
        # A predictor rank far above n_embd and n_ff: scratch sized without the rank
        # overflowed on a 2-token decode (issue 12).
        "model_pwri_rank_2048.gguf": tiny_llama(sparse=True, rank=2048),
        # Llama 3.1's RoPE frequency factors and a bias (issue 13: both were refused)
        "model_llama_rope_freqs.gguf": tiny_llama(
            extra_tensors=[("rope_freqs.weight", [2], T_F32, struct.pack("<2f", 1.0, 4.0))]),
        "model_llama_attn_q_bias.gguf": tiny_llama(
            extra_tensors=[("blk.0.attn_q.bias", [8], T_F32, f32s(8, 11))]),
    }
    valid.update(arch_files())
    valid.update(moe_files()[0])
    zero = lambda n: b"\0" * n
    unsupported = {
        # gpt-oss's attention sinks: not read by any architecture here
        "model_llama_unknown_tensor.gguf": tiny_llama(
            extra_tensors=[("blk.0.attn_sinks.weight", [2], T_F32, zero(8))]),
        # Llama 3.1's factors and LongRoPE's in one file: which apply is undefined
        "model_phi3_rope_freqs_and_longrope.gguf": tiny_llama(arch="phi3", prefix="phi3",
            extra_tensors=[("rope_freqs.weight", [2], T_F32, struct.pack("<2f", 1.0, 4.0)),
                           ("rope_factors_long.weight", [2], T_F32, struct.pack("<2f", 1.0, 3.0)),
                           ("rope_factors_short.weight", [2], T_F32, struct.pack("<2f", 1.0, 1.5))]),
        # keys that would change the computation and are not done (red-team findings:
        # each ran as if absent)
        "model_qwen2_not_causal.gguf": tiny_llama(arch="qwen2", prefix="qwen2",
            extra_kvs=[("qwen2.attention.causal", BOOL, 0)]),
        "model_qwen2_ffn_activation.gguf": tiny_llama(arch="qwen2", prefix="qwen2",
            extra_kvs=[("powerinfer.ffn_activation", STRING, "relu")]),
        "model_llama_freq_base_swa.gguf": tiny_llama(extra_kvs=[
            ("llama.attention.sliding_window", U32, 4), ("llama.rope.freq_base_swa", F32, 500.0)]),
        "model_llama_scale_linear_and_type.gguf": tiny_llama(extra_kvs=[
            ("llama.rope.scaling.type", STRING, "linear"), ("llama.rope.scaling.factor", F32, 2.0),
            ("llama.rope.scale_linear", F32, 4.0)]),
        # a LayerNorm bias in an RMSNorm architecture would go unused
        "model_llama_norm_bias.gguf": tiny_llama(
            extra_tensors=[("blk.0.attn_norm.bias", [8], T_F32, zero(32))]),
        # "llama\0x" is not llama (the message once read "unknown architecture 'llama'")
        "model_arch_nul.gguf": tiny_llama(arch="llama\0x"),
        # experts in an architecture without them, grouped routing, an unknown gating
        # function, a router bias (gpt-oss) that would go unused
        "model_qwen2_experts.gguf": tiny_moe(arch="qwen2"),
        "model_llama_moe_groups.gguf": tiny_moe(extra_kvs=[("llama.expert_group_count", U32, 2)]),
        "model_llama_moe_gating_3.gguf": tiny_moe(extra_kvs=[("llama.expert_gating_func", U32, 3)]),
        "model_llama_moe_router_bias.gguf": tiny_moe(
            extra_tensors=[("blk.0.ffn_gate_inp.bias", [4], T_F32, zero(16))]),
        # gpt-oss with another gating function than its own, and sinks with a soft-cap
        "model_gptoss_gating_1.gguf": tiny_gptoss(extra_kvs=[("gpt-oss.expert_gating_func", U32, 1)]),
        "model_gptoss_softcap.gguf": tiny_gptoss(
            extra_kvs=[("gpt-oss.attn_logit_softcapping", F32, 30.0)]),
    }
    return valid, unsupported


MOE_DENSE = ("blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight")


def tiny_moe(arch="llama", n_expert=4, used=2, Fe=16, extra_kvs=(), extra_tensors=(), drop=(),
             fused=False, shared=False):
    """tiny_llama with its FFN replaced by n_expert experts of Fe neurons (Mixtral's
    layout; arch may be another prefix), top `used`; optionally fused gate_up experts
    and a gated shared expert of 12 neurons."""
    E = 8
    kvs = [(arch + ".expert_count", U32, n_expert), (arch + ".expert_used_count", U32, used),
           (arch + ".expert_feed_forward_length", U32, Fe)]
    ts = [("blk.0.ffn_gate_inp.weight", [E, n_expert], T_F32, f32s(E * n_expert, 50, 1.0))]
    if fused:
        ts.append(("blk.0.ffn_gate_up_exps.weight", [E, 2 * Fe, n_expert], T_F32,
                   f32s(E * 2 * Fe * n_expert, 51)))
    else:
        ts += [("blk.0.ffn_gate_exps.weight", [E, Fe, n_expert], T_F32, f32s(E * Fe * n_expert, 52)),
               ("blk.0.ffn_up_exps.weight", [E, Fe, n_expert], T_F32, f32s(E * Fe * n_expert, 53))]
    ts.append(("blk.0.ffn_down_exps.weight", [Fe, E, n_expert], T_F32, f32s(Fe * E * n_expert, 54)))
    if shared:
        kvs.append((arch + ".expert_shared_feed_forward_length", U32, 12))
        ts += [("blk.0.ffn_gate_shexp.weight", [E, 12], T_F32, f32s(E * 12, 55)),
               ("blk.0.ffn_up_shexp.weight", [E, 12], T_F32, f32s(E * 12, 56)),
               ("blk.0.ffn_down_shexp.weight", [12, E], T_F32, f32s(12 * E, 57)),
               ("blk.0.ffn_gate_inp_shexp.weight", [E], T_F32, f32s(E, 58, 1.0))]
    ts = [t for t in ts if t[0] not in drop]
    return tiny_llama(arch=arch, prefix=arch, extra_kvs=list(kvs) + list(extra_kvs),
                      drop=MOE_DENSE + tuple(drop), extra_tensors=ts + list(extra_tensors))


def tiny_gptoss(drop=(), extra_kvs=(), extra_tensors=()):
    """tiny_moe as gpt-oss: attention sinks (2 heads), post_attention_norm as the FFN's
    norm instead of ffn_norm, router and expert biases."""
    ones = struct.pack("<8f", *([1.0] * 8))
    ts = [("blk.0.attn_sinks.weight", [2], T_F32, f32s(2, 70, 1.0)),
          ("blk.0.post_attention_norm.weight", [8], T_F32, ones),
          ("blk.0.ffn_gate_inp.bias", [4], T_F32, f32s(4, 71)),
          ("blk.0.ffn_gate_exps.bias", [16, 4], T_F32, f32s(64, 72)),
          ("blk.0.ffn_up_exps.bias", [16, 4], T_F32, f32s(64, 73)),
          ("blk.0.ffn_down_exps.bias", [8, 4], T_F32, f32s(32, 74))]
    ts = [t for t in ts if t[0] not in drop]
    return tiny_moe(arch="gpt-oss", drop=("blk.0.ffn_norm.weight",) + tuple(drop),
                    extra_kvs=extra_kvs, extra_tensors=ts + list(extra_tensors))


def sparsified_moe(down="ffn_down_exps_t", dims=(8, 16, 4)):
    """tiny_moe as pi-sparsify writes it (issue 17): the powerinfer.sparsify keys and
    each expert's down projection transposed (ffn_down_exps_t {n_embd, Fe, n_expert})."""
    n = dims[0] * dims[1] * dims[2]
    return tiny_moe(drop=("blk.0.ffn_down_exps.weight",),
                    extra_kvs=[("powerinfer.sparsify.method", STRING, "cats"),
                               ("powerinfer.sparsify.sparsity", F32, 0.5),
                               ("powerinfer.sparsify.thresholds", ARRAY, arr(F32, [0.05])),
                               ("powerinfer.sparsify.calibration", STRING, "corpus"),
                               ("powerinfer.sparsify.calibration_tokens", U64, 64)],
                    extra_tensors=[("blk.0.%s.weight" % down, list(dims), T_F32, f32s(n, 54))])


def moe_files():
    """(valid, refused) mixture-of-experts models (issue 16)."""
    qk = lambda E, seed: [("blk.0.attn_q_norm.weight", [E], T_F32, f32s(E, seed, 1.0)),
                          ("blk.0.attn_k_norm.weight", [E], T_F32, f32s(E, seed + 1, 1.0))]
    valid = {
        # Mixtral's layout: arch llama, 4 experts, top 2, a router and no dense FFN
        "model_llama_moe.gguf": tiny_moe(),
        # every expert chosen (k = n), one expert (k = 1), fused gate_up experts
        "model_llama_moe_all.gguf": tiny_moe(used=4),
        "model_llama_moe_top1.gguf": tiny_moe(used=1),
        "model_llama_moe_fused.gguf": tiny_moe(fused=True),
        # Qwen2-MoE's gated shared expert; sigmoid gating, renormalised, scaled
        "model_qwen2moe.gguf": tiny_moe(arch="qwen2moe", shared=True, extra_kvs=[
            ("qwen2moe.expert_gating_func", U32, 2), ("qwen2moe.expert_weights_norm", BOOL, 1),
            ("qwen2moe.expert_weights_scale", F32, 2.5)]),
        # OLMoE's q/k norms over the whole row (n_embd 8 = 2 heads of 4)
        "model_olmoe.gguf": tiny_moe(arch="olmoe", extra_tensors=qk(8, 59)),
        "model_qwen3moe.gguf": tiny_moe(arch="qwen3moe", extra_tensors=qk(4, 61)),
        # gpt-oss: sinks, biases, softmax over the top k; with a window of 2 and YaRN
        "model_gptoss.gguf": tiny_gptoss(),
        # a sparsified Mixtral (pi-sparsify): thresholded experts by default
        "model_llama_moe_sparsified.gguf": sparsified_moe(),
        "model_gptoss_swa_yarn.gguf": tiny_gptoss(extra_kvs=[
            ("gpt-oss.attention.sliding_window", U32, 2),
            ("gpt-oss.rope.scaling.type", STRING, "yarn"),
            ("gpt-oss.rope.scaling.factor", F32, 32.0),
            ("gpt-oss.rope.scaling.original_context_length", U32, 16)]),
    }
    refused = {
        # k above the expert count, or missing
        "model_llama_moe_used_5.gguf": tiny_moe(used=5),
        "model_llama_moe_used_0.gguf": tiny_moe(used=0),
        # experts as a 2-D tensor, a third dimension that is not the expert count, a
        # router of the wrong width
        "model_llama_moe_exps_2d.gguf": tiny_moe(drop=("blk.0.ffn_up_exps.weight",),
            extra_tensors=[("blk.0.ffn_up_exps.weight", [8, 64], T_F32, f32s(8 * 64, 60))]),
        "model_llama_moe_exps_ne2.gguf": tiny_moe(drop=("blk.0.ffn_down_exps.weight",),
            extra_tensors=[("blk.0.ffn_down_exps.weight", [16, 8, 3], T_F32, f32s(16 * 8 * 3, 60))]),
        "model_llama_moe_router_width.gguf": tiny_moe(drop=("blk.0.ffn_gate_inp.weight",),
            extra_tensors=[("blk.0.ffn_gate_inp.weight", [8, 5], T_F32, f32s(40, 60))]),
        # a shared expert's gate of the wrong width; expert tensors without expert_count
        "model_qwen2moe_shexp_gate_width.gguf": tiny_moe(arch="qwen2moe", shared=True,
            drop=("blk.0.ffn_gate_inp_shexp.weight",),
            extra_tensors=[("blk.0.ffn_gate_inp_shexp.weight", [7], T_F32, f32s(7, 60))]),
        "model_llama_exps_without_count.gguf": tiny_llama(extra_tensors=[
            ("blk.0.ffn_up_exps.weight", [8, 16, 4], T_F32, f32s(8 * 16 * 4, 60))]),
        # gpt-oss without its sinks, with sinks of the wrong width, without the router's
        # bias, with an expert bias of the wrong expert count, with ffn_norm in place of
        # post_attention_norm
        "model_gptoss_no_sinks.gguf": tiny_gptoss(drop=("blk.0.attn_sinks.weight",)),
        "model_gptoss_sinks_width.gguf": tiny_gptoss(drop=("blk.0.attn_sinks.weight",),
            extra_tensors=[("blk.0.attn_sinks.weight", [3], T_F32, f32s(3, 75))]),
        "model_gptoss_no_router_bias.gguf": tiny_gptoss(drop=("blk.0.ffn_gate_inp.bias",)),
        "model_gptoss_down_bias_shape.gguf": tiny_gptoss(drop=("blk.0.ffn_down_exps.bias",),
            extra_tensors=[("blk.0.ffn_down_exps.bias", [8, 3], T_F32, f32s(24, 76))]),
        # sparsified experts whose down projection is not transposed, or is transposed
        # with the wrong expert width
        "model_llama_moe_sparsified_down.gguf": sparsified_moe("ffn_down_exps", (16, 8, 4)),
        "model_llama_moe_sparsified_width.gguf": sparsified_moe(dims=(8, 12, 4)),
        "model_gptoss_ffn_norm.gguf": tiny_gptoss(drop=("blk.0.post_attention_norm.weight",),
            extra_tensors=[("blk.0.ffn_norm.weight", [8], T_F32, f32s(8, 77, 1.0))]),
    }
    return valid, refused


# --------------------------------------------------------------------------------
# Malformed files
# --------------------------------------------------------------------------------

def hdr(magic=b"GGUF", version=3, n_tensors=0, n_kv=0):
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv_bytes(key, vtype, payload):
    """Raw KV: key string, value type, then payload bytes as given."""
    if isinstance(key, str):
        key = key.encode()
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + payload


def one_kv_file(key, vtype, payload, n_kv=1):
    return hdr(n_kv=n_kv) + kv_bytes(key, vtype, payload)


def nested_array(depth):
    """An array value nested `depth` levels (outermost included), innermost u8[0]."""
    b = struct.pack("<IQ", U8, 0)
    for _ in range(depth - 1):
        b = struct.pack("<IQ", ARRAY, 1) + b
    return b


def with_tensor(t, kvs=None, **kw):
    """A file with the small KVs and one given tensor (plus overrides)."""
    return build(small_kvs() if kvs is None else kvs, [t], **kw)[0].b


def malformed_files():
    out = {}

    # ---- Whole-file and header problems -------------------------------------
    out["empty_file.gguf"] = b""
    out["three_bytes.gguf"] = b"GGU"
    out["bad_magic.gguf"] = hdr(magic=b"GGUG")
    out["bad_magic_lowercase.gguf"] = hdr(magic=b"gguf")
    out["version_0.gguf"] = hdr(version=0)
    out["version_1.gguf"] = hdr(version=1)
    out["version_4.gguf"] = hdr(version=4)
    out["n_kv_2p63.gguf"] = hdr(n_kv=1 << 63)
    out["n_kv_2p40.gguf"] = hdr(n_kv=1 << 40)
    out["n_kv_max.gguf"] = hdr(n_kv=U64_MAX)
    out["n_tensors_2p63.gguf"] = hdr(n_tensors=1 << 63)
    out["n_tensors_2p40.gguf"] = hdr(n_tensors=1 << 40)
    out["n_tensors_max.gguf"] = hdr(n_tensors=U64_MAX)
    # One more KV claimed than present (the file ends after the second).
    w = build(small_kvs(), [], n_kv=3)[0]
    out["n_kv_one_too_many.gguf"] = bytes(w.b[:w.marks["tensor_infos"]])

    # ---- Truncations of the seed at every field --------------------------------
    s = seed()
    m = s.marks
    cuts = {
        "header_mid_magic": 2,
        "header_mid_version": m["version"] + 2,
        "header_mid_n_tensors": m["n_tensors"] + 3,
        "header_mid_n_kv": m["n_kv"] + 5,
        "after_header": m["kv"],
        "mid_key_len": m["key_len"] + 4,
        "mid_key_bytes": m["key_bytes"] + 5,
        "after_key": m["val_type"],
        "mid_value_type": m["val_type"] + 2,
        "mid_string_value_len": m["val_str_len"] + 1,
        "mid_string_value_bytes": m["val_str_bytes"] + 2,
        "mid_scalar_value": m["val_scalar"] + 1,
        "mid_array_type": m["arr_type"] + 3,
        "mid_array_count": m["arr_count"] + 4,
        "mid_array_elems": m["arr_elems"] + 7,
        "before_tensor_infos": m["tensor_infos"],
        "mid_tensor_name_len": m["tname_len"] + 6,
        "mid_tensor_name": m["tname_bytes"] + 3,
        "mid_n_dims": m["n_dims"] + 1,
        "mid_dims": m["dims"] + 9,
        "mid_tensor_type": m["ttype"] + 2,
        "mid_tensor_offset": m["toffset"] + 7,
        "before_padding": m["padding"],
        "mid_padding": m["padding"] + 1,
        "at_data": m["data"],
        "mid_data": m["data"] + 40,
        "last_byte_missing": len(s.b) - 1,
    }
    assert m["padding"] + 1 < m["data"], "seed needs padding before data"
    for name, cut in cuts.items():
        assert 0 < cut < len(s.b), name
        out["trunc_%s.gguf" % name] = bytes(s.b[:cut])
    # The middle of an element of a string array (the seed's first array).
    sa = seed_kvs()
    w = build([kv for kv in sa if kv[0] == "test.str_arr"], [])[0]
    out["trunc_mid_string_array_elem.gguf"] = bytes(w.b[:w.marks["val_str_bytes"] + 2])
    # Files with a single, long-keyed KV, cut in each of its fields. With one KV the
    # cut files are still long enough for the declared count, so a reader must
    # notice the truncation at the field itself.
    key = "test.a_rather_long_key_name_for_truncation"
    single = {
        "u64": (U64, 0x0102030405060708),
        "string": (STRING, "a string value of some length"),
        "u32_array": (ARRAY, arr(U32, [1, 2, 3, 4, 5, 6])),
        "string_array": (ARRAY, arr(STRING, ["first element", "second element"])),
    }
    fields = {"key_len": "key_len", "key_bytes": "key_bytes", "value_type": "val_type",
              "value": "val_scalar", "str_len": "val_str_len",
              "str_bytes": "val_str_bytes", "array_type": "arr_type",
              "array_count": "arr_count"}
    for kind, (vtype, value) in single.items():
        w = build([(key, vtype, value)], [])[0]
        end = w.marks["tensor_infos"]
        for fname, mk in fields.items():
            if mk not in w.marks:
                continue
            cut = w.marks[mk] + (20 if fname in ("key_bytes", "str_bytes") else 3)
            if cut < end:
                out["trunc1_%s_mid_%s.gguf" % (kind, fname)] = bytes(w.b[:cut])
        out["trunc1_%s_last_byte_missing.gguf" % kind] = bytes(w.b[:end - 1])

    # ---- Keys --------------------------------------------------------------------
    out["key_len_2p63.gguf"] = hdr(n_kv=1) + struct.pack("<Q", 1 << 63) + b"abc" * 8
    out["key_len_past_eof.gguf"] = hdr(n_kv=1) + struct.pack("<Q", 100) + b"abcdef"
    out["key_len_max.gguf"] = hdr(n_kv=1) + struct.pack("<Q", U64_MAX) + b"abcdef"
    out["key_empty.gguf"] = one_kv_file(b"", U32, struct.pack("<I", 1))
    out["key_embedded_nul.gguf"] = one_kv_file(b"test.a\0b", U32, struct.pack("<I", 1))
    # Longer than the 65535-byte limit of the specification (the bytes are present).
    out["key_len_65536.gguf"] = one_kv_file(b"k" * 65536, U8, b"\x01")
    out["key_duplicate.gguf"] = build(
        [("test.a", U32, 1), ("test.b", U32, 2), ("test.a", U32, 3)], [])[0].b

    # ---- Values ------------------------------------------------------------------
    out["value_type_13.gguf"] = one_kv_file("test.a", 13, struct.pack("<I", 1))
    out["value_type_ffffffff.gguf"] = one_kv_file("test.a", 0xFFFFFFFF,
                                                  struct.pack("<I", 1))
    out["bool_value_2.gguf"] = one_kv_file("test.a", BOOL, b"\x02")
    out["bool_array_elem_255.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", BOOL, 3) + b"\x00\x01\xff")
    out["string_len_2p63.gguf"] = one_kv_file("test.a", STRING,
                                              struct.pack("<Q", 1 << 63) + b"xyz")
    out["string_len_past_eof.gguf"] = one_kv_file("test.a", STRING,
                                                  struct.pack("<Q", 64) + b"xyz")
    # offset + length wraps around 2^64 to a small number.
    out["string_len_wraps.gguf"] = one_kv_file("test.a", STRING,
                                               struct.pack("<Q", U64_MAX - 7) + b"x" * 16)
    out["array_elem_type_13.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", 13, 1) + b"\0" * 8)
    out["array_elem_type_ffffffff.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", 0xFFFFFFFF, 1) + b"\0" * 8)
    out["array_count_2p63.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", U8, 1 << 63) + b"\0" * 8)
    out["array_count_2p40_u32.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", U32, 1 << 40) + b"\0" * 8)
    # count * 8 wraps around 2^64 to 8, and 8 bytes follow.
    out["array_count_times_size_wraps.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", U64, (1 << 61) + 1) + b"\0" * 8)
    out["array_count_past_eof.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", U32, 10) + b"\0" * 12)
    out["string_array_count_2p63.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", STRING, 1 << 63) + struct.pack("<Q", 1) + b"a")
    out["string_array_elem_len_huge.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", STRING, 2) + struct.pack("<Q", 1) + b"a"
        + struct.pack("<Q", 1 << 62) + b"bcd")
    out["nested_array_100_levels.gguf"] = one_kv_file("test.a", ARRAY, nested_array(100))
    out["nested_array_count_huge.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", ARRAY, 1 << 62) + nested_array(1))
    out["nested_array_bad_inner_type.gguf"] = one_kv_file(
        "test.a", ARRAY, struct.pack("<IQ", ARRAY, 1) + struct.pack("<IQ", 99, 1) + b"\0" * 8)

    # ---- general.alignment -------------------------------------------------------
    def align_file(vtype, value, alignment=32):
        kvs = [("general.alignment", vtype, value)] + small_kvs()
        return build(kvs, small_tensors(), alignment=alignment)[0].b
    out["alignment_type_u64.gguf"] = align_file(U64, 32)
    out["alignment_type_string.gguf"] = align_file(STRING, "32")
    out["alignment_0.gguf"] = align_file(U32, 0)
    out["alignment_48.gguf"] = align_file(U32, 48, alignment=48)
    out["alignment_3.gguf"] = align_file(U32, 3, alignment=3)
    out["alignment_type_u32_array.gguf"] = align_file(ARRAY, arr(U32, [32]))
    # A power of two, but the data section would start far past the end of the file.
    out["alignment_2p31_data_past_eof.gguf"] = build(
        [("general.alignment", U32, 1 << 31)] + small_kvs(), small_tensors(),
        data_tail=b"\0" * 64)[0].b

    # ---- Tensor infos ----------------------------------------------------------
    f32 = lambda name="t", dims=(4,), **k: dict(name=name, dims=list(dims), type=T_F32, **k)
    out["tensor_name_64_bytes.gguf"] = with_tensor(f32("n" * 64))
    out["tensor_name_1000_bytes.gguf"] = with_tensor(f32("n" * 1000))
    out["tensor_name_empty.gguf"] = with_tensor(f32(""))
    out["tensor_name_embedded_nul.gguf"] = with_tensor(f32("ab\0cd"))
    out["tensor_name_len_2p63.gguf"] = (hdr(n_tensors=1) + struct.pack("<Q", 1 << 63)
                                        + b"abcd" * 8)
    out["tensor_name_duplicate.gguf"] = build(
        small_kvs(), [f32("dup"), f32("other"), f32("dup")])[0].b
    out["n_dims_0.gguf"] = with_tensor(f32(dims=()), data_tail=b"\0" * 64)
    out["n_dims_5.gguf"] = with_tensor(f32(dims=(4, 1, 1, 1, 1)), data_tail=b"\0" * 64)
    out["n_dims_ffffffff.gguf"] = with_tensor(f32(dims=(4,), n_dims=0xFFFFFFFF),
                                              data_tail=b"\0" * 64)
    out["dim_negative.gguf"] = with_tensor(f32(dims=(4, -2)), data_tail=b"\0" * 64)
    out["dim_u64_max.gguf"] = with_tensor(f32(dims=(U64_MAX,)), data_tail=b"\0" * 64)
    out["dims_product_overflows_int64.gguf"] = with_tensor(
        f32(dims=(1 << 32, 1 << 32)), data_tail=b"\0" * 64)
    out["dims_product_overflows_4d.gguf"] = with_tensor(
        f32(dims=(1 << 16, 1 << 16, 1 << 16, 1 << 16)), data_tail=b"\0" * 64)
    # 2^62 elements fit int64, but 2^62 * 4 bytes does not fit in 64 bits.
    out["nbytes_overflows.gguf"] = with_tensor(
        f32(dims=(1 << 31, 1 << 31)), data_tail=b"\0" * 64)
    for tid in (4, 33, 1000, 0xFFFFFFFF):
        out["tensor_type_%d.gguf" % tid] = with_tensor(
            dict(name="t", dims=[32], type=tid), data_tail=b"\0" * 128)
    out["q4_0_ne0_33.gguf"] = with_tensor(
        dict(name="t", dims=[33, 2], type=T_Q4_0), data_tail=b"\0" * 128)
    out["q4_k_ne0_128.gguf"] = with_tensor(
        dict(name="t", dims=[128], type=T_Q4_K), data_tail=b"\0" * 160)

    # ---- Tensor offsets and data ------------------------------------------------
    out["offset_not_aligned.gguf"] = with_tensor(f32(offset=4), data_tail=b"\0" * 64)
    out["offset_past_end.gguf"] = with_tensor(f32(offset=1 << 20), data_tail=b"\0" * 64)
    out["offset_2p62.gguf"] = with_tensor(f32(offset=1 << 62), data_tail=b"\0" * 64)
    # data_off + offset wraps around 2^64 (offset is aligned).
    out["offset_wraps.gguf"] = with_tensor(f32(offset=U64_MAX - 31), data_tail=b"\0" * 64)
    out["data_past_eof.gguf"] = with_tensor(f32(dims=(64,)), data_tail=b"\0" * 128)
    out["data_past_eof_second_tensor.gguf"] = build(
        small_kvs(), small_tensors(), data_tail=b"\0" * 40)[0].b
    out["tensors_overlap.gguf"] = build(small_kvs(), [
        f32("a", (16,), offset=0), f32("b", (16,), offset=32)], data_tail=b"\0" * 96)[0].b
    out["tensors_same_offset.gguf"] = build(small_kvs(), [
        f32("a", (4,), offset=0), f32("b", (4,), offset=0)], data_tail=b"\0" * 32)[0].b
    # One more tensor claimed than present (the file ends after the second info).
    w = build(small_kvs(), small_tensors(), n_tensors=3)[0]
    out["tensor_infos_past_eof.gguf"] = bytes(w.b[:w.marks["padding"]])
    return out


# --------------------------------------------------------------------------------
# Unsupported files
# --------------------------------------------------------------------------------

def unsupported_files():
    out = {}
    # Big-endian: the magic is written as bytes, every number big-endian.
    out["big_endian_v3.gguf"] = seed(endian=">").b
    out["big_endian_v2.gguf"] = seed(version=2, endian=">").b
    out["big_endian_pwri.gguf"] = seed(magic=b"PWRI", endian=">").b
    out["big_endian_header_only.gguf"] = b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    out.update(model_files()[1])
    return out


def write_dir(name, files):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        if old.endswith(".gguf"):
            os.remove(os.path.join(d, old))
    total = 0
    for fname in sorted(files):
        data = bytes(files[fname])
        with open(os.path.join(d, fname), "wb") as fp:
            fp.write(data)
        total += len(data)
        print("%-12s %-44s %6d  %s" % (name, fname, len(data),
                                        hashlib.sha256(data).hexdigest()[:16]))
    return len(files), total


def main():
    summary = []
    for name, fn in (("valid", valid_files), ("malformed", malformed_files),
                     ("unsupported", unsupported_files), ("refused", refused_files)):
        summary.append((name,) + write_dir(name, fn()))
    for name, n, total in summary:
        print("%s: %d files, %d bytes" % (name, n, total))


if __name__ == "__main__":
    main()
