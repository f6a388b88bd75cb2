"""A float64 numpy forward of the qwen2 fixture GGUF as stored, the FFN optionally masked
as this library's sparse modes define it. Shared by test_sparsify.py (thresholded mode)
and test_train_predictor.py (predictor mode); reads tensors with the gguf package."""

import numpy as np


def tensors(path):
    """{name: float64 array (numpy order)}, {key: value} of a GGUF file."""
    import gguf
    from gguf.quants import dequantize
    r = gguf.GGUFReader(path)
    T = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
        [int(x) for x in reversed(t.shape)]) for t in r.tensors}
    K = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    return T, K


def forward(T, K, tokens, thresholds=None, kv16=False, predictor=None, teal=False):
    """Float64 forward of a qwen2 GGUF as stored (NEOX RoPE, q/k/v biases).

    thresholds: the FFN masked at |silu(gate h)| > t_l (PI_SPARSE_THRESHOLD); with teal,
                at |silu(gate h) * (up h)| > t_l (a "teal" file's threshold mode).
    predictor:  a threshold p: the FFN masked to the neurons with fc2 . relu(fc1 . x) >= p,
                x the residual before ffn_norm, from the file's blk.N.fc1/fc2
                (PI_SPARSE_PREDICTOR).
    Returns (logits [n][V], the smallest relative margin of a masked decision over every
    (layer, token, neuron): | |a| - t | / t, or |score| / median |score| (inf if none),
    each layer's |a| (teal: |a * up h|) [n][F], each layer's predictor scores [n][F] or
    None).
    kv16 rounds K (after RoPE) and V to float16, as the engine's F16 KV cache does, so
    that its activations agree with the engine's to float32 rounding."""
    g = lambda k, d=None: K.get("qwen2." + k, d)  # noqa: E731
    n_head, n_kv, E = g("attention.head_count"), g("attention.head_count_kv"), g("embedding_length")
    hd, eps, base = E // n_head, g("attention.layer_norm_rms_epsilon"), g("rope.freq_base", 10000.0)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x, pos):
        inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        ang = (pos[:, None] * inv[None, :])[:, None, :]
        c, s = np.cos(ang), np.sin(ang)
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], -1)

    x = T["token_embd.weight"][tokens]
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    margin, acts, masks = np.inf, [], []
    for il in range(g("block_count")):
        p = f"blk.{il}."
        h = rms(x, T[p + "attn_norm.weight"])
        q, k, v = (h @ T[p + f"attn_{w}.weight"].T + T[p + f"attn_{w}.bias"] for w in "qkv")
        q, k, v = q.reshape(n, n_head, hd), k.reshape(n, n_kv, hd), v.reshape(n, n_kv, hd)
        q, k = rope(q, pos), rope(k, pos)
        if kv16:
            k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
        k, v = np.repeat(k, n_head // n_kv, axis=1), np.repeat(v, n_head // n_kv, axis=1)
        sc = np.einsum("thd,uhd->htu", q, k) / np.sqrt(hd)
        sc = np.where(np.tril(np.ones((n, n), bool))[None], sc, -np.inf)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        sc /= sc.sum(-1, keepdims=True)
        x = x + np.einsum("htu,uhd->thd", sc, v).reshape(n, n_head * hd) @ T[p + "attn_output.weight"].T
        h = rms(x, T[p + "ffn_norm.weight"])
        z = h @ T[p + "ffn_gate.weight"].T
        a = z / (1.0 + np.exp(-z))
        up = h @ T[p + "ffn_up.weight"].T
        if teal:  # threshold the intermediate: a holds act * up from here on
            a, up = a * up, np.ones_like(up)
        acts.append(np.abs(a))
        if thresholds is not None:
            t = float(thresholds[il])
            if t > 0:
                margin = min(margin, float((np.abs(np.abs(a) - t) / t).min()))
            a = np.where(np.abs(a) > t, a, 0.0)
        if predictor is not None:
            s = np.maximum(x @ T[p + "fc1.weight"].T, 0.0) @ T[p + "fc2.weight"].T
            margin = min(margin, float((np.abs(s - predictor) / np.median(np.abs(s))).min()))
            masks.append(s)
            a = np.where(s >= predictor, a, 0.0)
        else:
            masks.append(None)
        down = T[p + "ffn_down.weight"] if p + "ffn_down.weight" in T else T[p + "ffn_down_t.weight"].T
        x = x + (a * up) @ down.T
    x = rms(x, T["output_norm.weight"])
    return x @ T.get("output.weight", T["token_embd.weight"]).T, margin, acts, masks


def read_ref(path):
    """tokens, logits [n][V] of a fixture's .ref.bin (transformers' float64 logits)."""
    raw = open(path, "rb").read()
    n, v = np.frombuffer(raw[:8], "<u4")
    toks = np.frombuffer(raw[8:8 + 4 * n], "<i4").tolist()
    return toks, np.frombuffer(raw[8 + 4 * n:], "<f4").reshape(n, v).astype(np.float64)


def rel(a, b):
    """max |a - b| / max |b|."""
    return float(np.abs(a - b).max() / np.abs(b).max())
