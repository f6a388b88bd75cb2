"""Tests of the Python package tools/python/powerinfer against the real library.

    PI_LIBRARY=build/lib/libpowerinfer.so python3 -m pytest tests/python -q

Needs: libpowerinfer (PI_LIBRARY, pkg-config or the loader's path), the SmolLM2 model
(PI_SMOLLM2, else tools/smollm2_path.py), and numpy + gguf for
tools/bench/make_synthetic_powerinfer.py. A missing library or generator fails every
test that needs it with a message that says what to do. A missing SmolLM2 skips the
tests that need it, with that message in the summary (-rs), as the C tests do; with
PI_REQUIRE_SMOLLM2=1 (tools/test.sh) it fails them instead.

The package is imported from tools/python unless PI_PYTHON_INSTALLED=1, which tests
the installed copy instead (pip install ./tools/python)."""

import math
import os
import shutil
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.environ.get("PI_PYTHON_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "tools", "python"))

import powerinfer as pi  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tools"))
import smollm2_path as smollm2_lookup  # noqa: E402

try:
    import numpy as np
except ImportError:
    np = None

FIXTURE_F32 = os.path.join(ROOT, "tests", "fixtures", "models", "tiny-silu-gqa.f32.gguf")


# ---- fixtures ---------------------------------------------------------------------------
@pytest.fixture(scope="session", autouse=True)
def library():
    """Fail every test with the loader's list of what it tried when the library is
    missing."""
    try:
        return pi.load_library()
    except pi.LibraryNotFoundError as e:
        error = str(e)
    pytest.fail(error, pytrace=False)


@pytest.fixture(scope="session")
def smollm2_path():
    return smollm2_lookup.for_tests()  # skipped (reported with -rs) or failed when missing


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    with pi.Model(smollm2_path, log=None) as m:
        yield m


@pytest.fixture(scope="session")
def pwri_path(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("pwri") / "syn"
    r = subprocess.run([sys.executable,
                        os.path.join(ROOT, "tools", "bench", "make_synthetic_powerinfer.py"),
                        "--preset", "tiny", "-o", str(prefix)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("make_synthetic_powerinfer.py failed:\n" + r.stderr[-2000:],
                    pytrace=False)
    return str(prefix) + ".powerinfer.gguf"


@pytest.fixture
def pwri(pwri_path):
    with pi.Model(pwri_path, log=None) as m:
        yield m


def argmax(values):
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


# ---- library ----------------------------------------------------------------------------
def test_version():
    assert pi.abi_version() == 1
    assert pi.version().count(".") == 2
    assert pi.status_str(pi.PI_ERR_IO)
    assert pi.type_name(8) == "Q8_0" and pi.type_name(12345) is None


def test_every_exported_function_is_declared():
    """The ctypes declarations cover lib/libpowerinfer.symbols exactly, so a new or
    removed function shows up here too."""
    from powerinfer import _lib
    with open(os.path.join(ROOT, "lib", "libpowerinfer.symbols")) as f:
        exported = {line.strip() for line in f if line.strip() and line[0] != "#"}
    assert set(_lib._PROTOTYPES) == exported


def test_load_library_explicit_path_must_match(library):
    assert pi.load_library(pi.library_path()) is library
    with pytest.raises(ValueError):
        pi.load_library("/nonexistent/libpowerinfer.so")


# ---- model: description, metadata, tensors ----------------------------------------------
def test_smollm2_description(smollm2):
    m = smollm2
    assert m.arch == "llama" and not m.is_sparse
    assert (m.n_layer, m.n_embd, m.n_ff, m.n_vocab) == (30, 576, 1536, 49152)
    assert m.n_head == 9 and m.n_head_kv == 3 and m.n_ctx_train > 0
    assert m.predictor_rank(0) == 0 and m.sparse_threshold == 0
    assert m.n_params > 100_000_000 and m.size_bytes > 0


def test_smollm2_metadata(smollm2):
    m = smollm2
    md = m.metadata
    keys = list(md)
    assert len(keys) == len(md) > 10 and keys[0] == "general.architecture"
    assert md["general.architecture"] == "llama"
    assert md["llama.block_count"] == m.n_layer == m.meta_int("llama.block_count")
    assert md.type_of("llama.block_count") == "u32"
    assert math.isclose(m.meta_float("llama.attention.layer_norm_rms_epsilon"), 1e-5,
                        rel_tol=1e-6)
    assert md.type_of("tokenizer.ggml.tokens") == "array[string]"
    assert "tokenizer.ggml.tokens" in md and "no.such.key" not in md
    with pytest.raises(KeyError):
        md["no.such.key"]
    with pytest.raises(pi.PowerInferError) as e:
        m.meta_str("no.such.key")
    assert e.value.status_name == "PI_ERR_NOT_FOUND"
    with pytest.raises(pi.PowerInferError) as e:
        m.meta_int("general.architecture")
    assert e.value.status == pi.PI_ERR_TYPE
    assert m.meta_to_string("llama.block_count") == "30"
    assert "<|im_start|>" in m.chat_template and m.chat_format == "chatml"


def test_smollm2_tensors(smollm2):
    ts = smollm2.tensors
    assert len(ts) == smollm2.n_tensors
    emb = smollm2.tensor("token_embd.weight")
    assert emb == ts[emb.index]
    assert emb.shape == (576, 49152) and emb.nbytes > 0 and emb.type_name == pi.type_name(emb.type)
    assert sum(t.nbytes for t in ts) <= smollm2.size_bytes
    with pytest.raises(KeyError):
        smollm2.tensor("no.such.tensor")


# ---- tokenizer --------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["The capital of France is", "Hello,  world!\n\tTabs",
                                  "héllo wörld 日本語 🙂", ""])
def test_tokenize_roundtrip(smollm2, text):
    toks = smollm2.tokenize(text, add_special=False)
    assert all(0 <= t < smollm2.n_vocab for t in toks)
    assert smollm2.detokenize(toks) == text
    assert b"".join(smollm2.token_to_piece(t) for t in toks) == text.encode("utf-8")


def test_detokenizer_streams_utf8(smollm2):
    text = "日本語 🙂"
    toks = smollm2.tokenize(text, add_special=False)
    pieces = [smollm2.token_to_piece(t) for t in toks]
    # byte-level BPE: some token carries part of a code point
    assert any(_incomplete_utf8(p) for p in pieces)
    with pi.Detokenizer(smollm2) as d:
        out = [d.push(t) for t in toks]
        assert "".join(out) + d.flush() == text
        for piece in out:  # every piece is whole text (str), never a split code point
            piece.encode("utf-8")
        first = smollm2.tokenize("日", add_special=False)
        partial = [d.push(t) for t in first[:-1]] if len(first) > 1 else []
        assert all(p == "" for p in partial)
        assert d.flush() in ("", "\ufffd")


def _incomplete_utf8(b):
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_special_tokens(smollm2):
    m = smollm2
    end = m.tokenize("<|im_end|>", add_special=False, parse_special=True)
    assert len(end) == 1 and m.is_eog(end[0])
    assert len(m.tokenize("<|im_end|>", add_special=False)) > 1
    assert m.token_to_piece(end[0]) == b""
    assert m.token_to_piece(end[0], special=True) == b"<|im_end|>"
    assert not m.is_eog(m.tokenize("Paris", add_special=False)[0])


# ---- generation -------------------------------------------------------------------------
def test_generate_paris(smollm2):
    text = "".join(pi.generate(smollm2, "The capital of France is", max_tokens=4,
                               temperature=0, n_threads=2))
    assert text.startswith(" Paris"), text


def test_quantized_kv_caches(smollm2):
    for kv in ("q8_0", "q4_0"):
        with pi.Context(smollm2, n_ctx=256, n_threads=2, kv_type=kv) as ctx:
            text = "".join(pi.generate(smollm2, "The capital of France is", 3, ctx=ctx,
                                       temperature=0))
        assert text.startswith(" Paris"), (kv, text)
    # keys and values apart: Q8_0 keys, Q4_0 values
    with pi.Context(smollm2, n_ctx=256, n_threads=2, kv_type="q8_0", kv_type_v="q4_0") as ctx:
        text = "".join(pi.generate(smollm2, "The capital of France is", 3, ctx=ctx,
                                   temperature=0))
    assert text.startswith(" Paris"), text
    with pytest.raises(ValueError):
        pi.Context(smollm2, n_ctx=64, kv_type="q2_k")
    with pytest.raises(ValueError):
        pi.Context(smollm2, n_ctx=64, kv_type_v="f16")


def test_generate_chat_and_reused_context(smollm2):
    with pi.Context(smollm2, n_ctx=256, n_threads=2) as ctx:
        pieces = list(pi.generate(smollm2, "What is the capital of France?", 24,
                                  chat=True, ctx=ctx, temperature=0))
        assert pieces and all(isinstance(p, str) and p for p in pieces)
        assert 0 < ctx.pos <= ctx.n_ctx
        assert not ctx.closed  # a caller's context stays open
        # the same as with a context of its own (pi-run --chat --temp 0 gives it too)
        assert "".join(pieces) == "".join(pi.generate(
            smollm2, "What is the capital of France?", 24, chat=True, temperature=0,
            n_ctx=256, n_threads=2))
        # continuing the context appends (no BOS in the middle)
        pos = ctx.pos
        more = "".join(pi.generate(smollm2, " And of Italy?", 4, ctx=ctx, temperature=0))
        assert isinstance(more, str) and ctx.pos > pos


def test_generate_stops_early_and_cleans_up(smollm2):
    it = pi.generate(smollm2, "Once upon a time", 100, temperature=0.8, seed=1,
                     n_threads=2)
    first = next(it)
    assert isinstance(first, str)
    it.close()  # closes the context and sampler it made


def test_chat_apply(smollm2):
    out = smollm2.chat_apply([{"role": "user", "content": "hi"}])
    assert "<|im_start|>user\nhi<|im_end|>" in out and out.endswith("<|im_start|>assistant\n")
    out = smollm2.chat_apply([("system", "S"), ("user", "U")], format="chatml",
                             add_assistant=False)
    assert out == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
    with pytest.raises(pi.PowerInferError) as e:
        smollm2.chat_apply([("robot", "x")])
    assert e.value.status_name == "PI_ERR_INVALID_ARG"


def test_chat_template():
    """ChatTemplate renders real templates as transformers does (the conformance fixture
    of tests/unit/test_jinja.c, made by tests/fixtures/gen_jinja_fixtures.py)."""
    import json
    fix = os.path.join(ROOT, "tests", "fixtures", "jinja")
    with open(os.path.join(fix, "conformance.json"), encoding="utf-8") as f:
        fx = json.load(f)
    checked = 0
    for t in fx["templates"]:
        if t["file"] not in ("Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
                             "google-gemma-2-2b-it.jinja"):
            continue
        with open(os.path.join(fix, "templates", t["file"]), encoding="utf-8", newline="") as f:
            tmpl = pi.ChatTemplate(source=f.read())
        with tmpl:
            for c in t["cases"]:
                now = None if c["now"] < 0 else c["now"]
                data = fx["conversations"][c["conv"]]
                if "text" in c:
                    assert tmpl.render(data, now=now) == c["text"]
                    # the same as keyword variables
                    assert tmpl.render(**json.loads(data), now=now) == c["text"]
                else:
                    with pytest.raises(pi.PowerInferError) as e:
                        tmpl.render(data, now=now)
                    if "raise" in c:
                        assert e.value.message == c["raise"]
                checked += 1
    assert checked >= 30
    with pytest.raises(pi.PowerInferError) as e:
        pi.ChatTemplate(source="{% if x %}")
    assert e.value.status_name == "PI_ERR_FORMAT" and "line 1, column" in e.value.message
    with pytest.raises(pi.PowerInferError) as e:
        pi.ChatTemplate(source="{{ x }}").render("[1]")
    assert e.value.status_name == "PI_ERR_INVALID_ARG"


def test_chat_template_of_the_model(smollm2):
    t = pi.ChatTemplate(smollm2)
    msgs = [{"role": "user", "content": "hi"}]
    out = t.render(messages=msgs, add_generation_prompt=True)
    # SmolLM2's template inserts its default system message, as chat_apply does
    assert out == smollm2.chat_apply(msgs)
    assert smollm2.chat_apply(msgs, format="jinja") == out
    t.close()
    assert t.closed


# ---- context ----------------------------------------------------------------------------
def test_decode_logits(smollm2):
    m = smollm2
    toks = m.tokenize("The capital of France is", add_special=False)
    with pi.Context(m, n_ctx=64, n_threads=2) as ctx, pi.Sampler(m, temperature=0) as s:
        assert ctx.model is m and ctx.n_ctx == 64 and ctx.n_threads == 2
        assert ctx.logits() is None and ctx.pos == 0
        assert ctx.sparse_mode == "dense"
        ctx.decode(toks)
        assert ctx.pos == len(toks)
        logits = ctx.logits()
        assert len(logits) == m.n_vocab
        if np is not None:
            assert isinstance(logits, np.ndarray) and logits.dtype == np.float32
            assert np.isfinite(logits).all()
        tok = s.sample(ctx)
        assert tok == argmax(logits)
        assert m.token_to_piece(tok) == b" Paris"
        # truncate and decode again: the same logits
        ctx.truncate(len(toks) - 1)
        assert ctx.pos == len(toks) - 1 and ctx.logits() is None
        ctx.decode(toks[-1:])
        again = ctx.logits()
        assert list(again) == list(logits)
        ctx.set_threads(1)
        assert ctx.n_threads == 1
        ctx.reset()
        assert ctx.pos == 0 and ctx.logits() is None
        if np is not None:  # any sequence of ids works
            ctx.decode(np.array(toks, dtype=np.int64))
            assert ctx.pos == len(toks)


def read_hidden(path):
    """tests/fixtures/embed/<name>.hidden.bin (make_embed_refs.py): per sequence its
    tokens, final hidden states [n_tok][n_embd], mean and last."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    n_seq, n_embd = struct.unpack_from("<II", data)
    at, out = 8, []
    for _ in range(n_seq):
        (n,) = struct.unpack_from("<I", data, at)
        at += 4
        toks = list(struct.unpack_from("<%di" % n, data, at))
        at += 4 * n
        vals = struct.unpack_from("<%df" % (n * n_embd + 2 * n_embd), data, at)
        at += 4 * len(vals)
        rows = [vals[t * n_embd:(t + 1) * n_embd] for t in range(n)]
        out.append((toks, rows, vals[n * n_embd:n * n_embd + n_embd], vals[n * n_embd + n_embd:]))
    assert at == len(data)
    return out


def unit(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def rel_err(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)


def test_embeddings_against_transformers():
    """Model.pooling, Context.embedding and embedding_pooled on the tiny Qwen3 embedding
    fixture (last-token pooling) against transformers' last_hidden_state."""
    d = os.path.join(ROOT, "tests", "fixtures", "embed")
    seqs = read_hidden(os.path.join(d, "qwen3-embed.hidden.bin"))
    with pi.Model(os.path.join(d, "qwen3-embed.f16.gguf"), log=None) as m:
        assert m.pooling == "last"
        with pi.Context(m, n_ctx=64, f32_activations=True, embeddings="on") as ctx:
            for toks, rows, mean, last in seqs:
                ctx.reset()
                ctx.decode(toks)
                assert ctx.logits() is not None
                for t, row in enumerate(rows):
                    assert rel_err(list(ctx.embedding(t)), row) < 2e-3
                assert ctx.embedding(len(toks)) is None
                got = ctx.embedding_pooled("last")
                assert abs(math.sqrt(sum(x * x for x in got)) - 1.0) < 1e-5
                assert rel_err(list(got), unit(last)) < 2e-3
                assert rel_err(list(ctx.embedding_pooled("mean", normalize=False)), mean) < 2e-3
                assert rel_err(list(ctx.embedding_pooled(pi.POOLINGS["cls"], seq=0,
                                                         normalize=False)), rows[0]) < 2e-3
        with pi.Context(m, n_ctx=64, f32_activations=True, embeddings="only") as ctx:
            ctx.decode(seqs[0][0])
            assert ctx.logits() is None and ctx.embedding(0) is not None
            with pytest.raises(pi.PowerInferError) as e:
                ctx.embedding_pooled("mean", seq=1)
            assert e.value.status == pi.PI_ERR_INVALID_ARG
            with pytest.raises(ValueError):
                ctx.embedding_pooled("median")
        with pi.Context(m, n_ctx=64) as ctx:
            ctx.decode(seqs[0][0])
            assert ctx.embedding(0) is None
            with pytest.raises(pi.PowerInferError) as e:
                ctx.embedding_pooled()
            assert e.value.status == pi.PI_ERR_INVALID_ARG and "PI_EMBD_OFF" in str(e.value)


def test_smollm2_has_no_pooling(smollm2):
    assert smollm2.pooling is None


def test_decode_errors_leave_context_unchanged(smollm2):
    m = smollm2
    with pi.Context(m, n_ctx=8, n_threads=2) as ctx:
        ctx.decode([1, 2, 3])
        before = ctx.logits()
        for bad in ([m.n_vocab], [-1], []):
            with pytest.raises(pi.PowerInferError) as e:
                ctx.decode(bad)
            assert e.value.status == pi.PI_ERR_INVALID_ARG
            assert e.value.status_name == "PI_ERR_INVALID_ARG"
            assert e.value.call == "pi_ctx_decode"
        with pytest.raises(pi.PowerInferError) as e:
            ctx.decode(list(range(10, 16)))
        assert e.value.status_name == "PI_ERR_RANGE" and e.value.message
        with pytest.raises(pi.PowerInferError) as e:
            ctx.truncate(99)
        assert e.value.status_name == "PI_ERR_RANGE"
        with pytest.raises(OverflowError):
            ctx.decode([1 << 40])
        assert ctx.pos == 3 and list(ctx.logits()) == list(before)
        with pytest.raises(pi.PowerInferError) as e:
            ctx.reset_stats()  # no statistics collected
        assert e.value.status == pi.PI_ERR_INVALID_ARG
        assert ctx.stats is None


def test_bad_token_in_tokenizer_calls(smollm2):
    with pytest.raises(pi.PowerInferError) as e:
        smollm2.token_to_piece(smollm2.n_vocab + 5)
    assert e.value.status_name == "PI_ERR_RANGE"
    with pi.Detokenizer(smollm2) as d, pytest.raises(pi.PowerInferError) as e:
        d.push(-3)
    assert e.value.status_name == "PI_ERR_RANGE"


def test_abort_callback(smollm2):
    calls = []

    def stop():
        calls.append(1)
        return True
    with pi.Context(smollm2, n_ctx=32, n_threads=2, abort=stop) as ctx:
        with pytest.raises(pi.PowerInferError) as e:
            ctx.decode([1, 2, 3])
        assert e.value.status_name == "PI_ERR_ABORTED" and calls
        assert ctx.pos == 0

    def boom():
        raise KeyError("from the callback")
    with pi.Context(smollm2, n_ctx=32, n_threads=2, abort=boom) as ctx:
        with pytest.raises(KeyError):
            ctx.decode([1, 2, 3])
        assert ctx.pos == 0


def test_context_is_one_thread_at_a_time(smollm2):
    """A call on a context in use (here: from its own abort callback, which runs
    during decode) raises RuntimeError instead of racing."""
    box = {}

    def reenter():
        box["ctx"].reset()
    with pi.Context(smollm2, n_ctx=32, n_threads=2, abort=reenter) as ctx:
        box["ctx"] = ctx
        with pytest.raises(RuntimeError, match="one thread at a time"):
            ctx.decode([1, 2, 3])
        assert ctx.pos == 0

    def close_model():
        box["ctx"].model.close()
    with pi.Model(smollm2.path, log=None) as m:
        sampler = pi.Sampler(m)
        idle = pi.Context(m, n_ctx=16, n_threads=1)
        with pi.Context(m, n_ctx=32, n_threads=2, abort=close_model) as ctx:
            box["ctx"] = ctx
            with pytest.raises(RuntimeError, match="in use"):
                ctx.decode([1, 2, 3])  # not freed under the running decode
            assert ctx.pos == 0 and not ctx.closed
            # the refused close closed nothing else either
            assert not sampler.closed and not idle.closed
        assert not m.closed


def test_contexts_share_a_model_across_threads(smollm2):
    toks = smollm2.tokenize("Threads share one model", add_special=False)
    results, errors = [None, None], []

    def work(i):
        try:
            with pi.Context(smollm2, n_ctx=32, n_threads=1) as ctx:
                ctx.decode(toks)
                results[i] = list(ctx.logits())
        except Exception as e:  # reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results[0] == results[1]


def test_grammar(smollm2):
    # text only: prefixes accepted, a refusal changes nothing, errors carry line:col
    g = pi.Grammar(None, 'root ::= "ab" [0-9]+')
    g.accept_text("ab1")
    assert g.complete
    with pytest.raises(pi.PowerInferError) as e:
        g.accept_text("x")
    assert e.value.status_name == "PI_ERR_RANGE" and "cannot continue" in str(e.value)
    g.accept_text("2")
    with pytest.raises(pi.PowerInferError) as e:
        pi.Grammar(None, 'root ::= "a" | b')
    assert e.value.status_name == "PI_ERR_FORMAT" and "1:16: undefined rule 'b'" in str(e.value)
    # with the model: the mask leaves exactly the tokens a clone accepts (a few checked)
    g = pi.Grammar(smollm2, 'root ::= ("yes" | "no") "."')
    row, n = g.mask([0.0] * smollm2.n_vocab)
    allowed = [t for t, v in enumerate(row) if v == 0.0]
    assert n == len(allowed) and 0 < n < 20
    for t in allowed:
        c = g.clone()
        c.accept(t)
        c.close()
    refused = next(t for t, v in enumerate(row) if v != 0.0)
    with pytest.raises(pi.PowerInferError):
        g.accept(refused)
    g.close()


def test_sampler(smollm2):
    d = pi.default_sampler_params()
    assert d["top_k"] == 40 and d["seed"] == 0x5EED
    toks = smollm2.tokenize("Once upon a time", add_special=False)
    with pi.Context(smollm2, n_ctx=32, n_threads=2) as ctx:
        ctx.decode(toks)
        with pi.Sampler(smollm2, temperature=1.0, seed=7) as s:
            s.accept(toks)
            a = [s.sample(ctx) for _ in range(5)]
            s.reset()
            s.accept(toks)
            assert [s.sample(ctx) for _ in range(5)] == a
        with pytest.raises(pi.PowerInferError) as e:
            pi.Sampler(smollm2, top_p=-1)
        assert e.value.status_name == "PI_ERR_INVALID_ARG"
    with pi.Context(smollm2, n_ctx=32, n_threads=2) as ctx, pi.Sampler(smollm2) as s:
        with pytest.raises(pi.PowerInferError) as e:
            s.sample(ctx)  # no logits yet
        assert e.value.status_name == "PI_ERR_INVALID_ARG"


# ---- sparse models and statistics --------------------------------------------------------
def test_pwri_sparse_mode_and_stats(pwri, tmp_path):
    m = pwri
    assert m.is_sparse and m.predictor_rank(0) > 0 and m.n_layer > 0
    toks = m.tokenize("a b c d", add_special=True)
    with pi.Context(m, n_threads=2) as ctx:
        assert ctx.sparse_mode == "predictor" and ctx.stats is None
    with pi.Context(m, n_threads=2, sparse_mode="dense") as ctx:
        assert ctx.sparse_mode == "dense"
    with pi.Context(m, n_threads=2, sparse_threshold=0.5) as ctx:
        assert ctx.sparse_threshold == 0.5
    with pi.Context(m, n_threads=2, stats="diagnostic") as ctx:
        ctx.decode(toks)
        st = ctx.stats
        assert (st.n_layer, st.n_ff) == (m.n_layer, m.n_ff)
        layers = st.layers()
        for ls in layers:
            assert ls.tokens_predicted == len(toks) == ls.tokens_observed
            assert 0 < ls.predicted and 0 <= ls.both <= min(ls.predicted, ls.active)
            assert ls.bytes_ffn > 0 and ls.bytes_predictor > 0
            assert set(ls.as_dict()) >= {"predicted", "active", "both", "ns_ffn"}
        pred = st.neurons(0, "predicted")
        active = st.neurons(0, "active")
        both = st.neurons(0, "both")
        assert len(pred) == len(active) == len(both) == m.n_ff
        assert sum(pred) == layers[0].predicted and sum(active) == layers[0].active
        assert all(b <= min(p, a) for p, a, b in zip(pred, active, both))
        with pytest.raises(pi.PowerInferError) as e:
            st.layer(m.n_layer)
        assert e.value.status_name == "PI_ERR_RANGE"
        with pytest.raises(ValueError):
            st.neurons(0, "sometimes")
        path = tmp_path / "stats.gguf"
        st.save(path)
        with pi.Stats.load(path) as loaded:
            assert (loaded.n_layer, loaded.n_ff) == (st.n_layer, st.n_ff)
            for layer in range(st.n_layer):
                for kind in ("predicted", "active", "both"):
                    assert list(loaded.neurons(layer, kind)) == list(st.neurons(layer, kind))
                lv, ov = loaded.layer(layer), st.layer(layer)
                assert (lv.predicted, lv.active, lv.both) == (ov.predicted, ov.active, ov.both)
                assert lv.ns_ffn == 0
        with pytest.raises(ValueError):
            loaded.layer(0)
        ctx.reset_stats()
        assert ctx.stats.layer(0).tokens_predicted == 0
    with pytest.raises(ValueError):
        st.n_layer  # the context's statistics went with it


def test_ffn_probe(smollm2_path):
    """pi_ctx_set_ffn_probe on SmolLM2 (dense, SiLU): every layer of every step; act is
    silu(gate . rmsnorm(h)) and inter act * (up . rmsnorm(h)), recomputed here from the
    probe's own h and the file's weights (Q4_1 rows dequantized by the gguf package; f32
    activations);
    another mode or a device is refused, and the probe's exception reaches the caller."""
    np = pytest.importorskip("numpy")
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize
    r = gguf.GGUFReader(smollm2_path)
    W = {t.name: t for t in r.tensors}

    def weight(name):
        t = W[name]
        return dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
    eps = float(r.fields["llama.attention.layer_norm_rms_epsilon"].contents())
    with pi.Model(smollm2_path, log=None) as m:
        toks = m.tokenize("The probe sees the FFN", add_special=False)
        seen = []
        with pi.Context(m, n_ctx=64, n_threads=2, sparse_mode="dense",
                        f32_activations=True) as ctx:
            ctx.set_ffn_probe(lambda l, h, a, i: seen.append((l, h.copy(), a.copy(), i.copy())))
            ctx.decode(toks[:-1])
            ctx.decode(toks[-1:])
            ctx.set_ffn_probe(None)
            ctx.decode([toks[0]])
            assert [(l, len(h)) for l, h, _, _ in seen] == \
                [(l, len(toks) - 1) for l in range(m.n_layer)] + [(l, 1) for l in range(m.n_layer)]
            worst = 0.0
            for l in (0, m.n_layer // 2, m.n_layer - 1):
                _, h, a, i = seen[l]
                xn = h / np.sqrt((h.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps)
                xn = xn * weight(f"blk.{l}.ffn_norm.weight")
                g = xn @ weight(f"blk.{l}.ffn_gate.weight").T
                u = xn @ weight(f"blk.{l}.ffn_up.weight").T
                act = g / (1 + np.exp(-g))
                worst = max(worst, np.abs(a - act).max() / np.abs(act).max(),
                            np.abs(i - act * u).max() / np.abs(act * u).max())
            assert worst < 1e-4, worst  # float32 rounding (f32 activations)

            def boom(*_):
                raise KeyError("from the probe")
            ctx.set_ffn_probe(boom)
            with pytest.raises(KeyError):
                ctx.decode([toks[1]])
        with pi.Context(m, n_ctx=16, n_threads=2, sparse_mode="dense", device="cpu") as ctx:
            with pytest.raises(pi.PowerInferError) as e:
                ctx.set_ffn_probe(lambda *_: None)
            assert e.value.status_name == "PI_ERR_UNSUPPORTED"


def test_sparse_mode_needs_pwri(smollm2):
    with pytest.raises(pi.PowerInferError) as e:
        pi.Context(smollm2, sparse_mode="predictor")
    assert e.value.status_name == "PI_ERR_UNSUPPORTED" and e.value.message
    with pytest.raises(ValueError):
        pi.Context(smollm2, sparse_mode="sometimes")


def test_stats_load_errors(tmp_path):
    with pytest.raises(pi.PowerInferError) as e:
        pi.Stats.load(tmp_path / "missing.gguf")
    assert e.value.status_name == "PI_ERR_IO" and "missing.gguf" in e.value.message
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(20))
    with pytest.raises(pi.PowerInferError) as e:
        pi.Stats.load(bad)
    assert e.value.status_name == "PI_ERR_FORMAT"


def test_expert_statistics(tmp_path):
    """Mixture-of-experts statistics (tests/corpus/valid/model_*moe*.gguf, 4 experts):
    selections sum to tokens x k per layer, renormalised weights to the tokens (times
    the file's scale), the side file keeps them, and a dense model has none."""
    corpus = os.path.join(ROOT, "tests", "corpus", "valid")
    cases = [("model_llama_moe", 2, 1.0), ("model_llama_moe_all", 4, 1.0),
             ("model_llama_moe_top1", 1, 1.0), ("model_qwen2moe", 2, 2.5),
             ("model_olmoe", 2, None)]
    tokens = [1, 2, 3, 0, 1, 2, 0]
    for name, k, scale in cases:
        m = pi.Model(os.path.join(corpus, name + ".gguf"))
        ctx = pi.Context(m, n_ctx=16, stats="on", f32_activations=True)
        ctx.decode(tokens[:3])
        ctx.decode(tokens[3:])          # a prompt step and one more step add up
        st = ctx.stats
        assert st.n_expert == 4
        sel = list(st.experts(0, "selected"))
        w = list(st.experts(0, "weight"))
        assert sum(sel) == len(tokens) * k and all(x == int(x) for x in sel), (name, sel)
        assert all((s == 0) == (x == 0) for s, x in zip(sel, w)), (name, sel, w)
        if scale is not None:          # renormalised: each token's weights sum to 1
            assert abs(sum(w) - len(tokens) * scale) < 1e-4, (name, w)
        else:                          # OLMoE: top-k of a softmax, not renormalised
            assert 0 < sum(w) < len(tokens), (name, w)
        assert st.layer(0).tokens_observed == len(tokens)
        path = tmp_path / (name + ".stats.gguf")
        st.save(path)
        back = pi.Stats.load(path)
        assert back.n_expert == 4 and list(back.experts(0, "weight")) == w
        with pytest.raises(pi.PowerInferError) as e:
            st.experts(1, "selected")
        assert e.value.status_name == "PI_ERR_RANGE"
    dense = pi.Model(os.path.join(corpus, "model_llama.gguf"))
    dctx = pi.Context(dense, n_ctx=16, stats="on")
    dctx.decode([1, 2])
    assert dctx.stats.n_expert == 0
    with pytest.raises(pi.PowerInferError) as e:
        dctx.stats.experts(0)
    assert e.value.status_name == "PI_ERR_INVALID_ARG"


def test_fused_gate_up_experts_equal_separate(tmp_path):
    """llama.cpp's converter can write each layer's experts as one ffn_gate_up_exps
    tensor (--fuse-gate-up-exps: per expert its gate rows, then its up rows). The same
    model rewritten that way with the gguf package gives the same logits, bit for bit,
    as tests/fixtures/archs/mixtral.f16.gguf (whose reference check is the archs test)."""
    import gguf
    import numpy as np
    src = os.path.join(ROOT, "tests", "fixtures", "archs", "mixtral.f16.gguf")
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(tmp_path / "fused.gguf"), arch="llama")
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = field.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, field.contents(), vt, sub_type=field.types[-1])
        else:
            w.add_key_value(name, field.contents(), vt)
    by_name = {t.name: t for t in r.tensors}
    fused = 0
    for t in r.tensors:
        if t.name.endswith("ffn_up_exps.weight"):
            continue
        if t.name.endswith("ffn_gate_exps.weight"):
            up = by_name[t.name.replace("ffn_gate_exps", "ffn_up_exps")]
            g = np.asarray(t.data)                 # [n_expert][n_ff][n_embd]
            u = np.asarray(up.data)
            w.add_tensor(t.name.replace("ffn_gate_exps", "ffn_gate_up_exps"),
                         np.concatenate([g, u], axis=1), raw_dtype=gguf.GGMLQuantizationType.F16)
            fused += 1
            continue
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    assert fused == 2
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tokens = [1, 17, 200, 45, 9, 300, 77]
    out = []
    for path in (src, str(tmp_path / "fused.gguf")):
        m = pi.Model(path)
        assert m.n_tensors == len(r.tensors) - (fused if path != src else 0)
        ctx = pi.Context(m, n_ctx=16, n_threads=1, f32_activations=True)
        ctx.decode(tokens)
        out.append(list(ctx.logits()))
    assert out[0] == out[1]


# ---- errors and lifetimes --------------------------------------------------------------
def test_open_missing_file(tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    with pytest.raises(pi.PowerInferError) as e:
        pi.Model(missing)
    err = e.value
    assert err.status == pi.PI_ERR_IO == -3 and err.status_name == "PI_ERR_IO"
    assert err.description == pi.status_str(pi.PI_ERR_IO)
    assert "no-such-model.gguf" in err.message and "PI_ERR_IO" in str(err)


def test_open_malformed_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + bytes(64))
    with pytest.raises(pi.PowerInferError) as e:
        pi.Model(bad)
    assert e.value.status_name == "PI_ERR_FORMAT"


def test_closed_objects_raise_value_error(smollm2_path):
    m = pi.Model(smollm2_path, log=None)
    ctx = pi.Context(m, n_ctx=16, n_threads=1)
    s = pi.Sampler(m)
    d = pi.Detokenizer(m)
    assert ctx.model is m
    m.close()  # closes what borrows it first
    assert m.closed and ctx.closed
    for call in (lambda: m.n_layer, lambda: m.tokenize("x"), lambda: m.metadata["x"],
                 lambda: m.tensors, lambda: pi.Context(m), lambda: ctx.pos,
                 lambda: ctx.decode([1]), lambda: s.reset(), lambda: d.push(1)):
        with pytest.raises(ValueError):
            call()
    m.close()
    ctx.close()  # idempotent
    assert repr(m) == "<powerinfer.Model closed>"


def test_context_keeps_model_alive(smollm2_path):
    ctx = pi.Context(pi.Model(smollm2_path, log=None), n_ctx=16, n_threads=1)
    ctx.decode([1, 2])  # the Model has no other reference
    assert ctx.model.n_layer == 30
    ctx.close()


def test_metadata_only(smollm2_path):
    with pi.Model(smollm2_path, metadata_only=True, log=None) as m:
        assert m.metadata_only and m.n_layer == 0 and m.arch == "llama"
        assert m.metadata["llama.block_count"] == 30 and len(m.tensors) > 0
        with pytest.raises(pi.PowerInferError) as e:
            pi.Context(m)
        assert e.value.status_name == "PI_ERR_INVALID_ARG"
        with pytest.raises(pi.PowerInferError) as e:
            m.tokenize("x")
        assert e.value.status_name == "PI_ERR_UNSUPPORTED"


def test_log_and_progress(smollm2_path):
    lines, fractions = [], []
    with pi.Model(smollm2_path, log=lambda level, msg: lines.append((level, msg)),
                  log_level="debug", progress=fractions.append) as m:
        assert m.n_layer == 30
    assert lines and all(isinstance(msg, str) for _, msg in lines)
    assert fractions and fractions[-1] == 1.0
    assert fractions == sorted(fractions)

    with pytest.raises(pi.PowerInferError) as e:
        pi.Model(smollm2_path, log=None, progress=lambda f: True)
    assert e.value.status_name == "PI_ERR_ABORTED"

    def boom(fraction):
        raise ZeroDivisionError()
    with pytest.raises(ZeroDivisionError):
        pi.Model(smollm2_path, log=None, progress=boom)


def test_log_to_python_logging(smollm2_path, caplog):
    with caplog.at_level("INFO", logger="powerinfer"):
        with pi.Model(smollm2_path) as m:
            pi.Context(m, n_ctx=16, n_threads=1).close()
    assert any(r.name == "powerinfer" for r in caplog.records)


# ---- quantization -----------------------------------------------------------------------
def test_quantize_q8_0(tmp_path):
    out = tmp_path / "tiny.q8_0.gguf"
    fractions = []
    pi.quantize(FIXTURE_F32, out, "q8_0", n_threads=2, progress=fractions.append)
    assert fractions and fractions[-1] == 1.0
    with pi.Model(FIXTURE_F32, log=None) as src, pi.Model(out, log=None) as q:
        assert q.metadata["general.file_type"] == 7  # llama.cpp MOSTLY_Q8_0
        src_t = {t.name: t for t in src.tensors}
        quantized = 0
        for t in q.tensors:
            assert t.shape == src_t[t.name].shape
            if t.type_name == "Q8_0":
                quantized += 1
            else:
                assert t.type == src_t[t.name].type
        assert quantized > 0
        with pi.Context(q, n_ctx=16, n_threads=1) as ctx:
            ctx.decode([1, 2, 3])
            assert len(ctx.logits()) == q.n_vocab


def test_quantize_errors(tmp_path):
    with pytest.raises(pi.PowerInferError) as e:
        pi.quantize(tmp_path / "missing.gguf", tmp_path / "out.gguf", "q4_0")
    assert e.value.status_name == "PI_ERR_IO" and e.value.message
    with pytest.raises(ValueError):
        pi.quantize(FIXTURE_F32, tmp_path / "out.gguf", "q3_z")
    with pytest.raises(pi.PowerInferError) as e:
        pi.quantize(FIXTURE_F32, tmp_path / "out.gguf", 14)  # Q6_K: not a target
    assert e.value.status_name == "PI_ERR_INVALID_ARG"
    with pytest.raises(pi.PowerInferError) as e:
        pi.quantize(FIXTURE_F32, tmp_path / "out.gguf", progress=lambda f: f > 0.2)
    assert e.value.status_name == "PI_ERR_ABORTED"
    assert not (tmp_path / "out.gguf").exists()


def test_requantize(tmp_path):
    q8 = tmp_path / "q8.gguf"
    pi.quantize(FIXTURE_F32, q8, "q8_0")
    with pytest.raises(pi.PowerInferError) as e:
        pi.quantize(q8, tmp_path / "q4.gguf", "q4_0")
    assert e.value.status_name == "PI_ERR_UNSUPPORTED" and "is already Q8_0" in e.value.message
    pi.quantize(q8, tmp_path / "q4.gguf", "q4_0", allow_requantize=True)
    with pi.Model(tmp_path / "q4.gguf", log=None) as q:
        assert q.metadata["general.file_type"] == 2
        assert "Q8_0" not in {t.type_name for t in q.tensors}
        assert "Q4_0" in {t.type_name for t in q.tensors}


def test_quantize_mxfp4_moe(tmp_path):
    """MXFP4 (gpt-oss's expert type) through the library, on the qwen3moe-all fixture
    (3-D F16 experts, every expert chosen, so no rounding can flip a routing choice):
      - pi.quantize's MXFP4 tensors are gguf.quants.quantize of the same values, bit
        for bit (tests/unit/test_types.c checks the dequantizer the same way);
      - the model, every matrix MXFP4, against a copy whose weights are
        gguf.quants.dequantize of them as F32: with f32_activations (the library's
        MXFP4 rows dequantized, then float dots) the logits agree to float rounding;
        with 8-bit activations (the MXFP4 x Q8_0 integer kernels) to the rounding of
        the activations, far below what a wrong kernel or scale would give."""
    import gguf
    import numpy as np
    from gguf.quants import dequantize, quantize
    MX = gguf.GGMLQuantizationType.MXFP4
    src = os.path.join(ROOT, "tests", "fixtures", "archs", "qwen3moe-all.f16.gguf")
    out = tmp_path / "moe.mxfp4.gguf"
    pi.quantize(src, out, "mxfp4", n_threads=2)
    rin, rout = gguf.GGUFReader(src), gguf.GGUFReader(str(out))
    n_mx = 0
    for ti, to in zip(rin.tensors, rout.tensors):
        assert ti.name == to.name
        if to.tensor_type != MX:
            continue
        n_mx += 1
        want = np.asarray(quantize(dequantize(ti.data, ti.tensor_type), MX)).view(np.uint8)
        assert np.asarray(to.data).view(np.uint8).tobytes() == want.tobytes(), to.name
    names = {t.name for t in rout.tensors if t.tensor_type == MX}
    assert n_mx > 0 and any(n.endswith("ffn_gate_exps.weight") for n in names)
    # the same model with the MXFP4 weights dequantized by the package, as F32
    w = gguf.GGUFWriter(str(tmp_path / "moe.deq.gguf"), arch="qwen3moe")
    for name, field in rout.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = field.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, field.contents(), vt, sub_type=field.types[-1])
        else:
            w.add_key_value(name, field.contents(), vt)
    for t in rout.tensors:
        if t.tensor_type == MX:
            w.add_tensor(t.name, dequantize(t.data, MX).astype(np.float32),
                         raw_dtype=gguf.GGMLQuantizationType.F32)
        else:
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pi.Model(out, log=None) as q:
        assert q.metadata["general.file_type"] == 38  # llama.cpp MOSTLY_MXFP4_MOE
    tokens = [1, 17, 200, 45, 9, 300, 77]

    def logits(path, f32):
        with pi.Model(path, log=None) as m, \
                pi.Context(m, n_ctx=16, n_threads=1, f32_activations=f32) as ctx:
            ctx.decode(tokens[:-1])  # prompt (gemm), then one token (matvec)
            ctx.decode(tokens[-1:])
            return np.array(ctx.logits(), dtype=np.float64)
    ref = logits(tmp_path / "moe.deq.gguf", True)
    scale = np.abs(ref).max()
    err_f32 = np.abs(logits(out, True) - ref).max() / scale
    err_q8 = np.abs(logits(out, False) - ref).max() / scale
    # measured: 0 (the same float dots on the same values) and 1.5e-2 of max |logit|;
    # the 4-bit rounding itself moves these logits by 0.5 (against transformers on the
    # F16 weights, archs-mxfp4), a wrong scale or kernel by as much or more
    assert err_f32 < 1e-6, err_f32
    assert err_q8 < 5e-2, err_q8


# ---- hybrid execution: placement plans -------------------------------------------------
# The committed fixtures (no tokenizer: fed token ids): a PowerInfer ReLU-Llama with
# predictors, and a dense Llama. Device "cpu" is a second CPU backend acting as the
# device, so plans and hybrid contexts are checked without a GPU.
FIXTURE_PWRI = os.path.join(ROOT, "tests", "fixtures", "sparse", "relu-llama.q4_0.gguf")
HYBRID_MODELS = [FIXTURE_PWRI, FIXTURE_F32]
PROMPT_IDS = [1, 100, 40, 23, 23, 47, 62, 124, 58, 111]  # both vocabularies hold 128


def greedy_ids(ctx, prompt, n):
    ctx.decode(prompt)
    out = []
    for _ in range(n):
        t = argmax(ctx.logits())
        out.append(t)
        ctx.decode([t])
    return out


@pytest.mark.parametrize("path", HYBRID_MODELS, ids=["pwri", "dense"])
def test_plan_dry_run_budgets(path):
    with pi.Model(path, log=None) as m:
        with m.plan(device="cpu", device_budget=0, n_ctx=64) as p:
            assert p.budget == 0 and p.bytes() == 0
            assert p.n_layer == m.n_layer and p.n_ff == m.n_ff
            for layer in range(p.n_layer):
                assert p.layer_parts(layer) == frozenset()
                assert p.layer_neurons(layer) == 0
            assert not p.output_on_device and not p.kv_on_device
            assert p.source == "computed"
            assert "budget" in p.describe()
        with m.plan(device="cpu", device_budget=1 << 40, n_ctx=64) as p:
            assert p.budget == 1 << 40
            assert 0 < p.bytes() <= p.budget
            assert sum(p.bytes(part) for part in pi.plan.PLAN_PARTS) == p.bytes()
            for layer in range(p.n_layer):
                parts = p.layer_parts(layer)
                assert "attention" in parts and "ffn_norm" in parts
                if m.is_sparse:
                    assert "predictor" in parts
                assert p.layer_neurons(layer) == m.n_ff
                assert sum(bool(x) for x in p.layer_mask(layer)) == m.n_ff
            assert p.output_on_device and p.kv_on_device
            assert p.bytes("neurons") > 0 and p.bytes("attention") > 0
            assert (p.bytes("predictor") > 0) == m.is_sparse
            assert "budget" in p.describe()
            assert "Plan" in repr(p)
        # a budget between: within it, and no more neurons than the big one
        small = m.size_bytes // 3
        with m.plan(device="cpu", device_budget=small, n_ctx=64) as p:
            assert p.bytes() <= small
            assert all(0 <= p.layer_neurons(x) <= m.n_ff for x in range(p.n_layer))
            with pytest.raises(pi.PowerInferError) as e:
                p.layer_neurons(p.n_layer)
            assert e.value.status_name == "PI_ERR_RANGE"
        with pytest.raises(ValueError):
            p.bytes()  # closed


def test_plan_errors(tmp_path):
    with pi.Model(FIXTURE_PWRI, log=None) as m:
        with pytest.raises(pi.PowerInferError) as e:
            m.plan(device="none")
        assert e.value.status_name == "PI_ERR_INVALID_ARG"
        with pytest.raises(pi.PowerInferError) as e:
            m.plan(device="cpu", plan_path=tmp_path / "missing.gpuidx", plan_file="read")
        assert e.value.status_name == "PI_ERR_IO" and e.value.message
        garbage = tmp_path / "garbage.gpuidx"
        garbage.write_bytes(b"not a gpu index file" * 8)
        with pytest.raises(pi.PowerInferError) as e:
            m.plan(device="cpu", plan_path=garbage, plan_file="read")
        assert e.value.status_name == "PI_ERR_FORMAT" and e.value.message
        with pytest.raises(pi.PowerInferError) as e:
            pi.Context(m, device="cpu", plan_path=garbage, plan_file="read")
        assert e.value.status_name == "PI_ERR_FORMAT" and e.value.message
        with pytest.raises(ValueError):
            m.plan(device="tpu")
        with pytest.raises(ValueError):
            m.plan(device="cpu", plan_path=garbage, plan_file="sometimes")
    with pi.Model(FIXTURE_F32, log=None) as dense:
        with pytest.raises(pi.PowerInferError) as e:  # a plan of another shape
            dense.plan(device="cpu", plan_path=garbage, plan_file="read")
        assert e.value.status < 0


def test_plan_save_read_and_cache(tmp_path):
    with pi.Model(FIXTURE_PWRI, log=None) as m:
        budget = m.size_bytes // 2
        with m.plan(device="cpu", device_budget=budget, n_ctx=64) as p:
            counts = [p.layer_neurons(x) for x in range(p.n_layer)]
            p.save(tmp_path / "saved.gpuidx")
        assert (tmp_path / "saved.gpuidx").stat().st_size > 0
        with m.plan(device="cpu", device_budget=budget, n_ctx=64,
                    plan_path=tmp_path / "saved.gpuidx", plan_file="read") as q:
            assert q.source == "from_file"
            assert [q.layer_neurons(x) for x in range(q.n_layer)] == counts
        cache = tmp_path / "m.generated.gpuidx"
        kw = dict(n_ctx=64, n_threads=2, device="cpu", device_budget=budget, plan_path=cache)
        with pi.Context(m, **kw) as c:
            assert c.plan.source == "cache_written"
        assert cache.exists()
        with pi.Context(m, **kw) as c:
            assert c.plan.source == "from_file"
            assert [c.plan.layer_neurons(x) for x in range(m.n_layer)] == counts
        with pi.Context(m, plan_file="write", **kw) as c:
            assert c.plan.source != "from_file"


def test_plan_with_statistics():
    with pi.Model(FIXTURE_PWRI, log=None) as m:
        with pi.Context(m, n_ctx=64, n_threads=2, stats="on") as prof:
            prof.decode(PROMPT_IDS)
            with m.plan(device="cpu", device_budget=m.size_bytes // 3, n_ctx=64,
                        plan_stats=prof.stats) as p:
                assert p.bytes() <= m.size_bytes // 3
                assert p.n_ff == m.n_ff


def test_expert_placement_follows_statistics():
    """In mixture-of-experts layers the planner's unit is an expert: with room for k
    experts beyond the dense parts, the device holds the k most chosen experts of all
    layers by the profiled counts (ties: lower layer, then lower expert), and a context
    with that plan and a CPU device decodes the CPU-only tokens."""
    path = os.path.join(ROOT, "tests", "fixtures", "archs", "qwen3moe.f16.gguf")
    with pi.Model(path, log=None) as m:
        X = m.meta_int("qwen3moe.expert_count")
        with pi.Context(m, n_ctx=64, n_threads=2, stats="on") as prof:
            ref = greedy_ids(prof, PROMPT_IDS, 8)
            counts = [list(prof.stats.experts(x)) for x in range(m.n_layer)]
            kw = dict(device="cpu", n_ctx=64, plan_stats=prof.stats)
            with m.plan(device_budget="auto", **kw) as full:
                n_all = sum(full.layer_experts(x) for x in range(m.n_layer))
                total, eb = full.bytes(), full.bytes("neurons")
            assert n_all == m.n_layer * X and eb % n_all == 0
            order = sorted((-counts[x][e], x, e) for x in range(m.n_layer) for e in range(X))
            for k in (0, 1, 3, 7, n_all - 1, n_all):
                with m.plan(device_budget=total - eb + k * (eb // n_all), **kw) as p:
                    want = sorted((x, e) for _, x, e in order[:k])
                    got = [(x, e) for x in range(m.n_layer) for e in p.layer_experts(x, X)]
                    assert got == want, (k, got, want)
            with pi.Context(m, n_threads=2, device_budget=total - eb // 2, **kw) as c:
                assert 0 < sum(c.plan.layer_experts(x) for x in range(m.n_layer)) < n_all
                assert greedy_ids(c, PROMPT_IDS, 8) == ref


def test_device_experts_of_a_layer_whose_router_stays_on_the_host(tmp_path):
    """Dense parts stop at the first that does not fit, but experts still take what is
    left: with layer 1's router and shared expert (qwen2moe: 77 KiB) too big for the
    rest of the budget and one of its experts (48 KiB) ranked first by the statistics
    (a side file rewritten with the gguf package), that expert runs on the device while
    its layer routes on the host; the tokens are the CPU-only ones."""
    import gguf
    import numpy as np
    path = os.path.join(ROOT, "tests", "fixtures", "archs", "qwen2moe.f16.gguf")
    with pi.Model(path, log=None) as m:
        X = m.meta_int("qwen2moe.expert_count")
        with pi.Context(m, n_ctx=64, n_threads=2, stats="on") as prof:
            ref = greedy_ids(prof, PROMPT_IDS, 8)
            prof.stats.save(tmp_path / "a.gguf")
        r = gguf.GGUFReader(str(tmp_path / "a.gguf"))
        w = gguf.GGUFWriter(str(tmp_path / "b.gguf"), arch=r.fields["general.architecture"].contents())
        for name, field in r.fields.items():
            if name.startswith("GGUF.") or name == "general.architecture":
                continue
            w.add_key_value(name, field.contents(), field.types[0])
        for t in r.tensors:
            data = np.array(t.data, dtype=np.float64)
            if t.name == "blk.1.expert_selected":
                data[3] = 1e6
            w.add_tensor(t.name, data)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        stats = pi.Stats.load(tmp_path / "b.gguf")
        kw = dict(device="cpu", n_ctx=64, plan_stats=stats)
        with m.plan(device_budget="auto", **kw) as full:
            per = full.bytes("neurons") // (m.n_layer * X)
            norm = full.bytes("ffn_norm") // m.n_layer
            budget = full.bytes("scratch") + full.bytes("attention") + norm + per + 16
        assert norm > per + 16
        with pi.Context(m, n_threads=2, device_budget=budget, **kw) as c:
            assert "ffn_norm" in c.plan.layer_parts(0) and "ffn_norm" not in c.plan.layer_parts(1)
            assert c.plan.layer_experts(0, X) == [] and c.plan.layer_experts(1, X) == [3]
            assert greedy_ids(c, PROMPT_IDS, 8) == ref


@pytest.mark.parametrize("path", HYBRID_MODELS, ids=["pwri", "dense"])
def test_hybrid_context_decodes_as_cpu(path):
    with pi.Model(path, log=None) as m:
        with pi.Context(m, n_ctx=64, n_threads=2) as c:
            assert c.plan is None
            ref = greedy_ids(c, PROMPT_IDS, 12)
        for budget in (0, m.size_bytes // 3, None, "auto", 1 << 40):
            with pi.Context(m, n_ctx=64, n_threads=2, device="cpu",
                            device_budget=budget) as c:
                plan = c.plan
                assert plan is not None and plan.source == "computed"
                if isinstance(budget, int):
                    assert plan.budget == budget and plan.bytes() <= budget
                assert greedy_ids(c, PROMPT_IDS, 12) == ref, "budget %r" % (budget,)
            with pytest.raises(ValueError):
                plan.bytes()  # the context is closed


# ---- several sequences and states -------------------------------------------------------
def test_batch_sequences_and_state(smollm2, tmp_path):
    a = smollm2.tokenize("The capital of France is")
    b = smollm2.tokenize("One, two, three,")
    with pi.Context(smollm2, n_ctx=64, n_threads=2) as alone:
        alone.decode(b)
        want_b = alone.logits()
    with pi.Context(smollm2, n_ctx=64, n_threads=2, n_seq_max=3) as ctx:
        entries = [(t, 0) for t in a] + [(t, 1, -1, i == len(b) - 1) for i, t in enumerate(b)]
        ctx.decode_batch(entries)
        got_b = ctx.batch_logits(len(entries) - 1)
        assert ctx.batch_logits(0) is None
        assert argmax(got_b) == argmax(want_b)
        greedy = pi.Sampler(smollm2, temperature=0)
        assert greedy.sample_logits(got_b) == argmax(got_b)
        with pytest.raises(ValueError):
            greedy.sample_logits(got_b[:-1])
        drawn = {pi.Sampler(smollm2, temperature=1.0, top_k=0, top_p=0.9, min_p=0.0,
                            seed=s).sample_logits(got_b) for s in range(20)}
        assert len(drawn) > 1 and all(0 <= t < smollm2.n_vocab for t in drawn)
        assert max(abs(x - y) for x, y in zip(got_b, want_b)) < 1e-3 * max(abs(x) for x in want_b)
        assert (ctx.seq_len(0), ctx.seq_len(1), ctx.seq_len(2)) == (len(a), len(b), 0)
        ctx.seq_copy(1, 2)
        assert ctx.seq_len(2) == len(b)
        state = ctx.save_state()
        one = ctx.save_state(seq=1)
        ctx.save_state_file(tmp_path / "ctx.state")
        ctx.decode_batch([(a[0], 2, -1, True)])
        want = ctx.batch_logits(0)
        ctx.seq_remove(1, 1, 2)
        assert ctx.seq_len(1) == len(b) - 1
        with pytest.raises(pi.PowerInferError):
            ctx.decode_batch([(a[0], 5)])
        with pytest.raises(pi.PowerInferError):
            ctx.load_state(state[:-1])
    for source in ("bytes", "file"):
        with pi.Context(smollm2, n_ctx=64, n_threads=2, n_seq_max=3) as r:
            if source == "bytes":
                r.load_state(state)
            else:
                r.load_state_file(tmp_path / "ctx.state")
            r.decode_batch([(a[0], 2, -1, True)])
            assert list(r.batch_logits(0)) == list(want)  # bit for bit
    with pi.Context(smollm2, n_ctx=64, n_threads=2, n_seq_max=3) as r:
        r.load_state(one, seq=2)
        r.decode_batch([(a[0], 2, -1, True)])
        assert list(r.batch_logits(0)) == list(want)


def test_no_mmap_copy_survives_the_file(tmp_path):
    """mmap=False reads the file into memory: truncating it and writing other bytes
    over it after the open leave the logits those of a mapped open; mlock=True opens
    (locked, or with a warning)."""
    live = tmp_path / "live.gguf"
    with open(FIXTURE_F32, "rb") as f:
        data = f.read()
    live.write_bytes(data)
    with pi.Model(FIXTURE_F32, log=None) as ref, pi.Context(ref, n_ctx=16) as c:
        c.decode([1, 2, 3])
        want = list(c.logits())
    with pi.Model(live, mmap=False, mlock=True, log=None) as m:
        os.truncate(live, 0)
        with pi.Context(m, n_ctx=16) as c:
            c.decode([1, 2, 3])
            assert list(c.logits()) == want  # bit for bit
        live.write_bytes(bytes(len(data)))
        with pi.Context(m, n_ctx=16) as c:
            c.decode([1, 2, 3])
            assert list(c.logits()) == want
    with pytest.raises(pi.PowerInferError) as e:
        pi.Model(tmp_path, mmap=False, log=None)  # a directory
    assert e.value.status_name == "PI_ERR_IO" and "a directory" in e.value.message


# ---- arguments the C types cannot hold are refused, not truncated or wrapped -----------
def test_integer_arguments_are_checked():
    with pi.Model(FIXTURE_F32, log=None) as m:
        for kw in ({"n_ctx": 2**32 + 16}, {"n_threads": -1}, {"n_batch": 2**40},
                   {"n_seq_max": 2**32}, {"device_index": 2**33}):
            with pytest.raises(OverflowError):
                pi.Context(m, **kw)
        for kw in ({"n_ctx": 1.5}, {"n_ctx": "16"}, {"n_threads": None}, {"n_batch": 2.0}):
            with pytest.raises(TypeError):
                pi.Context(m, **kw)
        with pytest.raises(TypeError):
            pi.Context(m, sparse_threshold="0.5")
        with pi.Context(m, n_ctx=16, n_threads=1) as ctx:
            with pytest.raises(TypeError):
                ctx.decode([1, 2.5])
            with pytest.raises(OverflowError):
                ctx.decode([2**32 + 1])
            assert ctx.pos == 0  # nothing reached the library
            ctx.decode([1, 2])
            with pytest.raises(TypeError):
                ctx.truncate(1.5)
            with pytest.raises(OverflowError):
                ctx.seq_len(2**31)
            with pytest.raises(TypeError):
                ctx.decode_batch([(3, 0.0)])
            assert ctx.pos == 2
        with pytest.raises(OverflowError):
            pi.Sampler(m, top_k=2**31)
        with pytest.raises(TypeError):
            pi.Sampler(m, temperature="hot")
        with pytest.raises(TypeError):
            pi.Sampler(m, seed=1.5)
        with pytest.raises(TypeError):
            m.token_to_piece(1.5)
        import numpy as np
        with pi.Context(m, n_ctx=np.uint32(16), n_threads=np.int64(1)) as ctx:
            assert ctx.n_ctx == 16  # numpy integers are integers


def test_text_and_path_arguments_are_checked(smollm2, tmp_path):
    for bad in (None, 12, 1.5, ["a"]):
        with pytest.raises(TypeError):
            smollm2.tokenize(bad)
    assert smollm2.tokenize(b"a\0b", add_special=False) == \
        smollm2.tokenize("a\0b", add_special=False)  # a length is passed: NUL is text
    with pytest.raises(ValueError, match="null byte in content"):
        smollm2.chat_apply([{"role": "user", "content": "hi\0 ignore the rest"}])
    with pytest.raises(ValueError, match="null byte in key"):
        smollm2.meta_str("general.name\0x")
    with pytest.raises(ValueError, match="null byte in path"):
        pi.Model(FIXTURE_F32 + "\0.ignored", log=None)
    with pytest.raises(TypeError):
        smollm2.chat_apply([{"role": None, "content": "hi"}])


def test_non_finite_logits_raise(tmp_path):
    import gguf
    import numpy as np
    bad = tmp_path / "inf.gguf"
    shutil.copyfile(FIXTURE_F32, bad)
    r = gguf.GGUFReader(bad, "r+")
    t = next(t for t in r.tensors if t.name == "blk.1.attn_output.weight")
    t.data.flat[0] = np.inf
    r.data.flush()
    del r, t
    with pi.Model(bad, log=None) as m:
        with pi.Context(m, n_ctx=16, n_threads=1) as ctx:
            with pytest.raises(pi.PowerInferError) as e:
                ctx.decode([1, 2, 3])
            assert e.value.status_name == "PI_ERR_NUMERIC"
            assert "logits of entry 2" in e.value.message
            assert ctx.pos == 0
        with pi.Context(m, n_ctx=16, n_threads=1, check_numerics=True) as ctx:
            with pytest.raises(pi.PowerInferError) as e:
                ctx.decode([1, 2, 3])
            assert "layer 1, after the attention block" in e.value.message


def test_model_close_waits_for_calls_in_flight(smollm2):
    """A model (or detokenizer, sampler) in a library call on one thread is not freed
    by close() on another: close raises RuntimeError. Shown deterministically from the
    detokenizer's text callback, which runs inside pi_detok_push."""
    with pi.Model(smollm2.path, log=None) as m:
        toks = m.tokenize("Hello there", add_special=False)
        d = pi.Detokenizer(m)
        seen = []
        real_sink = d._sink

        def closing_sink(user, text, n):
            try:
                m.close()
                seen.append("closed")
            except RuntimeError as e:
                seen.append(str(e))
            return real_sink(user, text, n)
        d._sink = pi._lib.TEXT_FN(closing_sink)
        assert d.push(toks[0]) == "Hello"
        assert seen and "in use" in seen[0]
        assert not m.closed and not d.closed
        assert m.tokenize("Hello there", add_special=False) == toks
    assert m.closed
    with pytest.raises(ValueError, match="closed"):
        m.tokenize("x")
