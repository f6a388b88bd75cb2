"""pi-server through the official `openai` Python client: chat and completions, streaming
and not, n > 1, stop strings, seeds, usage, and the error statuses mapped to the client's
exception types."""

import pytest

from conftest import API_KEY, import_or_skip

openai = import_or_skip("openai", "pip install openai (tools/setup.sh does)")

QUESTION = [{"role": "user", "content": "What are three tips for staying healthy?"}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=120)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def test_models(client, model):
    assert model.startswith("SmolLM2")
    assert client.models.retrieve(model).id == model
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_chat(client, model):
    r = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=24,
                                       temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant"
    assert c.message.content.strip()
    assert c.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 5 and 0 < u.completion_tokens <= 24
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_chat_stream_equals_non_stream(client, model):
    args = dict(model=model, messages=QUESTION, max_tokens=32, temperature=0)
    whole = client.chat.completions.create(**args).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, **args))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert len({ch.id for ch in chunks}) == 1
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text == whole
    assert len([ch for ch in chunks if ch.choices[0].delta.content]) > 3  # really streamed
    assert chunks[-1].choices[0].finish_reason == "length"


def test_stream_usage(client, model):
    chunks = list(client.chat.completions.create(
        model=model, messages=QUESTION, max_tokens=6, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 6


def test_completions(client, model):
    r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8,
                                  temperature=0)
    assert r.object == "text_completion"
    assert "Paris" in r.choices[0].text
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=8, temperature=0,
        stream=True))
    assert streamed == r.choices[0].text


def test_max_tokens_length(client, model):
    r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=5,
                                  temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5


def test_n2(client, model):
    # Greedy: both choices are the same text, each decoded in its own slot.
    r = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=16,
                                       temperature=0, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].message.content == r.choices[1].message.content != ""
    assert r.usage.completion_tokens == 32
    # Sampled: each choice has its own generator; streamed deltas carry their index.
    chunks = list(client.chat.completions.create(model=model, messages=QUESTION, max_tokens=24,
                                                 temperature=1.0, seed=5, n=2, stream=True))
    texts = ["", ""]
    for ch in chunks:
        for c in ch.choices:
            texts[c.index] += c.delta.content or ""
    assert texts[0] and texts[1] and texts[0] != texts[1]


def test_stop_strings(client, model):
    args = dict(model=model, prompt="List the days of the week: Monday, Tuesday,",
                max_tokens=24, temperature=0)
    full = client.completions.create(**args).choices[0].text
    words = [w.strip(" ,.\n") for w in full.split()]
    stop = next(w for w in words[2:] if len(w) >= 4)
    cut = full[:full.index(stop)]
    r = client.completions.create(stop=[stop, "never-appears"], **args)
    assert r.choices[0].text == cut
    assert r.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(stop=stop, stream=True, **args))
    assert "".join(c.choices[0].text for c in streamed) == cut
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_seed_determinism(client, model):
    def run(seed):
        return client.chat.completions.create(model=model, messages=QUESTION, max_tokens=24,
                                              temperature=1.0, top_p=0.95,
                                              seed=seed).choices[0].message.content
    a = run(1234)
    assert run(1234) == a
    assert any(run(s) != a for s in (1, 2, 3))


def test_sampling_extensions(client, model):
    """top_k and min_p (not OpenAI's; the library's sampler) are accepted: top_k 1 is
    greedy whatever the temperature; penalties change the text."""
    args = dict(model=model, messages=QUESTION, max_tokens=24)
    greedy = client.chat.completions.create(temperature=0, **args).choices[0].message.content
    top1 = client.chat.completions.create(temperature=1.5, seed=9, extra_body={"top_k": 1},
                                          **args).choices[0].message.content
    assert top1 == greedy
    pen = client.chat.completions.create(temperature=0, frequency_penalty=2.0,
                                         presence_penalty=2.0, **args).choices[0].message.content
    assert pen != greedy


def test_errors(client, model, server):
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model=model, messages=QUESTION)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=123, messages=QUESTION)
    assert e.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages="hello")
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=[{"role": "wizard", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=QUESTION, temperature=7)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=QUESTION, max_tokens=-1)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=QUESTION, n=99)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=QUESTION, stop=list("abcde"))
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt=["one", "two"])
    with pytest.raises(openai.NotFoundError):
        client.get("/no/such/endpoint", cast_to=object)
    with pytest.raises(openai.APIStatusError) as e:
        client.get("/chat/completions", cast_to=object)
    assert e.value.status_code == 405
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model=model, messages=[
            {"role": "user", "content": "x" * (2 << 20)}])
    assert e.value.status_code == 413
    assert e.value.body["type"] == "invalid_request_error"
    # Still serving.
    assert client.completions.create(model=model, prompt="Hi", max_tokens=2).choices


def test_tokenize_roundtrip(server):
    text = "Hello, world! Grüße, 你好 🙂"
    st, j = server.json("POST", "/tokenize", {"content": text})
    assert st == 200 and len(j["tokens"]) > 5 and all(isinstance(t, int) for t in j["tokens"])
    st, d = server.json("POST", "/detokenize", {"tokens": j["tokens"]})
    assert st == 200 and d["content"] == text
    st, _ = server.json("POST", "/tokenize", {"content": text}, key=False)
    assert st == 401
