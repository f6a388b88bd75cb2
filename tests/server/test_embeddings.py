"""POST /v1/embeddings through the official `openai` client: float and base64 vectors
equal to the library's own pooled final hidden state (the Python bindings on the same
model: SmolLM2 has no pooling_type, so last-token pooling), L2-normalised; a batch of
inputs gives the vectors of the inputs sent one by one; token-id inputs; usage; bad
inputs are 400s naming the parameter; concurrent requests."""

import base64
import math
import os
import struct
import sys
import threading

import pytest

from conftest import API_KEY, ROOT, Server, import_or_skip, model_path

openai = import_or_skip("openai", "pip install openai (tools/setup.sh does)")

sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
import powerinfer as pi  # noqa: E402

TEXTS = ["The capital of France is Paris.", "Embeddings map text to vectors.",
         "A third, somewhat longer sentence about the weather in the mountains today."]
# The server's vectors and the library's: the same tokens through the same kernels, the
# server's batched with other slots' tokens (each row's arithmetic does not depend on
# the others: measured equal bit for bit); the tolerance only allows for float rounding.
TOL = 2e-4


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=120)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def library_vectors():
    """The library's own path: each text tokenized as the server does (the model's BOS /
    EOS rules), decoded from position 0, its last token's state, normalised."""
    pi.load_library()
    out = {}
    with pi.Model(model_path(), log=None) as m, \
            pi.Context(m, n_ctx=512, embeddings="only") as ctx:
        assert m.pooling is None  # so the server pools the last token
        for t in TEXTS:
            toks = m.tokenize(t, add_special=True)
            ctx.reset()
            ctx.decode(toks)
            out[t] = (list(ctx.embedding_pooled("last")), len(toks), toks)
    return out


def f32(v):
    """Each value rounded to float32 (what the vectors are)."""
    return list(struct.unpack("<%df" % len(v), struct.pack("<%df" % len(v), *v)))


def close(a, b, tol=TOL):
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b)) <= tol


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def test_float_matches_library(client, model, library_vectors):
    for t in TEXTS:
        r = client.embeddings.create(model=model, input=t, encoding_format="float")
        want, n_tok, _ = library_vectors[t]
        assert r.object == "list" and r.model == model and len(r.data) == 1
        d = r.data[0]
        assert d.object == "embedding" and d.index == 0
        assert len(d.embedding) == 576  # SmolLM2-135M's n_embd
        assert abs(norm(d.embedding) - 1.0) < 1e-5
        assert close(d.embedding, want), max(abs(x - y) for x, y in zip(d.embedding, want))
        assert r.usage.prompt_tokens == n_tok and r.usage.total_tokens == n_tok


def test_base64_is_the_float_vector(client, model, server):
    t = TEXTS[0]
    f = client.embeddings.create(model=model, input=t, encoding_format="float").data[0].embedding
    # the client's default asks for base64 and decodes it itself
    b = client.embeddings.create(model=model, input=t).data[0].embedding
    assert b == f32(f)  # the float text reads back as the same float32 values
    # the raw answer: little-endian float32 bytes
    st, j = server.json("POST", "/v1/embeddings", {"input": t, "encoding_format": "base64"})
    assert st == 200
    raw = base64.b64decode(j["data"][0]["embedding"])
    assert len(raw) == 4 * 576
    assert list(struct.unpack("<576f", raw)) == f32(f)


def test_batch_equals_one_by_one(client, model, library_vectors):
    r = client.embeddings.create(model=model, input=TEXTS, encoding_format="float")
    assert [d.index for d in r.data] == list(range(len(TEXTS)))
    single = [client.embeddings.create(model=model, input=t, encoding_format="float")
              .data[0].embedding for t in TEXTS]
    for d, s, t in zip(r.data, single, TEXTS):
        assert close(d.embedding, s)
        assert close(d.embedding, library_vectors[t][0])
    assert r.usage.prompt_tokens == sum(library_vectors[t][1] for t in TEXTS)
    # different texts, different vectors
    assert not close(r.data[0].embedding, r.data[1].embedding, 1e-2)


def test_token_inputs(client, model, library_vectors):
    toks = [library_vectors[t][2] for t in TEXTS[:2]]
    one = client.embeddings.create(model=model, input=toks[0], encoding_format="float")
    assert close(one.data[0].embedding, library_vectors[TEXTS[0]][0])
    two = client.embeddings.create(model=model, input=toks, encoding_format="float")
    for d, t in zip(two.data, TEXTS[:2]):
        assert close(d.embedding, library_vectors[t][0])
    # dimensions equal to the model's is accepted
    r = client.embeddings.create(model=model, input="x", dimensions=576, encoding_format="float")
    assert len(r.data[0].embedding) == 576


def test_bad_inputs(client, model, server):
    cases = [
        (dict(input=""), "input"),
        (dict(input=[]), "input"),
        (dict(input=["ok", ""]), "input"),
        (dict(input=[[]]), "input"),
        (dict(input=[1, -2]), "input"),
        (dict(input=[1, 10 ** 9]), "input"),
        (dict(input=[1, 2.5]), "input"),
        (dict(input=["a", 3]), "input"),
        (dict(input=5), "input"),
        (dict(input="x", dimensions=64), "dimensions"),
        (dict(input="x", encoding_format="hex"), "encoding_format"),
    ]
    for kw, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model=model, **kw)
        assert e.value.body["param"] == param, kw
    st, j = server.json("POST", "/v1/embeddings", {"model": model})
    assert st == 400 and j["error"]["param"] == "input"
    # longer than a slot's context (-c 2048): 400 naming the limit
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=model, input=[1] * 2049)
    assert "2048" in e.value.body["message"]
    st, j = server.json("POST", "/v1/embeddings", {"input": ["a"] * 2049})
    assert st == 400
    st, _ = server.json("POST", "/v1/embeddings", {"input": "x"}, key=False)
    assert st == 401
    # still serving
    assert client.embeddings.create(model=model, input="still here").data


def test_concurrent_with_chat(client, model, library_vectors):
    """Embedding requests running beside a chat completion and each other give the same
    vectors."""
    errors, got = [], {}

    def embed(i):
        try:
            t = TEXTS[i % len(TEXTS)]
            got[i] = (t, client.embeddings.create(model=model, input=t,
                                                  encoding_format="float").data[0].embedding)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def chat():
        try:
            client.chat.completions.create(model=model, max_tokens=24, messages=[
                {"role": "user", "content": "Count to ten."}])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=chat)] + [threading.Thread(target=embed, args=(i,))
                                                 for i in range(9)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    for t, v in got.values():
        assert close(v, library_vectors[t][0])


def test_more_inputs_than_slots_and_queue(model, library_vectors):
    """A request of more inputs than slots + queue still completes (it waits for its own
    earlier inputs); a flag overrides the pooling."""
    s = Server("--parallel", 2, "--queue", 1, "-c", 256, "--pooling", "mean")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        texts = TEXTS * 3
        r = c.embeddings.create(model=model, input=texts, encoding_format="float")
        assert len(r.data) == len(texts)
        with pi.Model(model_path(), log=None) as m, \
                pi.Context(m, n_ctx=256, embeddings="only") as ctx:
            for d, t in zip(r.data, texts):
                ctx.reset()
                ctx.decode(m.tokenize(t, add_special=True))
                assert close(d.embedding, list(ctx.embedding_pooled("mean")))
                assert not close(d.embedding, library_vectors[t][0], 1e-2)  # not last
    finally:
        s.finish()
