"""Log-probabilities: completions' "logprobs": N with "echo" (how evaluation harnesses
score text), chat's "logprobs"/"top_logprobs". The prompt's scores are checked against
Hugging Face transformers: tests/fixtures/perplexity/reference.json holds, per window of
128 tokens of text.txt, the negative log-likelihood of its second half as transformers
computes it (make_reference.py); the server's echoed token_logprobs must sum to it."""

import json
import math
import os

import pytest

from conftest import ROOT, import_or_skip, sse_events

FIX = os.path.join(ROOT, "tests", "fixtures", "perplexity")
COMP = "/v1/completions"
CHAT = "/v1/chat/completions"


def post(srv, path, body):
    st, j = srv.json("POST", path, body)
    assert st == 200, j
    return j


@pytest.fixture(scope="module")
def reference():
    with open(os.path.join(FIX, "reference.json")) as f:
        ref = json.load(f)
    with open(os.path.join(FIX, ref["text"]), encoding="utf-8") as f:
        text = f.read()
    return ref, text


def test_echoed_prompt_scores_equal_transformers(server, reference):
    ref, text = reference
    st, tok = server.json("POST", "/tokenize", {"content": text})
    assert st == 200
    toks = tok["tokens"]
    assert len(toks) == ref["n_tokens"]
    setting = next(s for s in ref["settings"] if s["name"] == "chunks-128")
    n_ctx = setting["n_ctx"]
    first = n_ctx // 2 + 1  # pi-perplexity scores positions n_ctx/2+1 .. n_ctx-1
    worst = 0.0
    for w, want in enumerate(setting["float32"]["nll_sums"]):
        window = toks[w * n_ctx:(w + 1) * n_ctx]
        j = post(server, COMP, {"prompt": window, "echo": True, "logprobs": 0,
                                "max_tokens": 0})
        c = j["choices"][0]
        lp = c["logprobs"]
        assert c["finish_reason"] == "length" and j["usage"]["completion_tokens"] == 0
        assert len(lp["token_logprobs"]) == n_ctx and lp["token_logprobs"][0] is None
        assert all(x is not None and x <= 0.0 for x in lp["token_logprobs"][1:])
        nll = -sum(lp["token_logprobs"][first:])
        assert len(lp["token_logprobs"][first:]) == setting["window_scored"][w]
        rel = abs(nll - want) / want
        worst = max(worst, rel)
        # the tolerance of pi-perplexity's test: 8-bit activations
        assert rel < 0.02, (w, nll, want)
    print(f"\n# echo logprobs vs transformers: worst window NLL {worst:.2%} off")


def test_generated_logprobs_are_the_prompt_scores_of_the_same_tokens(server):
    prompt = "The three primary colors are"
    j = post(server, COMP, {"prompt": prompt, "max_tokens": 8, "temperature": 0,
                            "logprobs": 5})
    lp = j["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == j["usage"]["completion_tokens"] == 8
    assert "".join(lp["tokens"]) == j["choices"][0]["text"]
    for tok, x, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert len(top) <= 5 and top[tok] == x  # greedy: the chosen one is in the top
        assert max(top.values()) == x
        assert list(top.values()) == sorted(top.values(), reverse=True)
    # score prompt + continuation in one request: the same numbers, up to rounding
    st, t = server.json("POST", "/tokenize", {"content": prompt + j["choices"][0]["text"]})
    e = post(server, COMP, {"prompt": t["tokens"], "echo": True, "logprobs": 1,
                            "max_tokens": 0})
    elp = e["choices"][0]["logprobs"]
    assert elp["tokens"][-8:] == lp["tokens"]  # the text re-tokenizes the same way
    for a, b in zip(elp["token_logprobs"][-8:], lp["token_logprobs"]):
        assert abs(a - b) < 1e-3 + 1e-3 * abs(b), (a, b)  # equal here: rows are batch-invariant
    offs = elp["text_offset"]
    assert offs == sorted(offs) and offs[0] == 0
    assert e["choices"][0]["text"] == prompt + j["choices"][0]["text"]


def test_echo_of_a_string_prompt_and_its_offsets(server):
    prompt = "Café au lait, s'il vous plaît:"
    j = post(server, COMP, {"prompt": prompt, "max_tokens": 3, "temperature": 0,
                            "echo": True, "logprobs": 1})
    c = j["choices"][0]
    assert c["text"].startswith(prompt)
    lp = c["logprobs"]
    n_prompt = j["usage"]["prompt_tokens"]
    assert len(lp["tokens"]) == n_prompt + 3
    # offsets count characters of the returned text; each generated token starts where
    # the text before it ends
    gen_offsets = lp["text_offset"][n_prompt:]
    assert gen_offsets[0] == len(prompt)
    text = c["text"]
    for i, off in enumerate(gen_offsets):
        assert text[off:].startswith(lp["tokens"][n_prompt + i])
    # echo without logprobs: the text only
    j = post(server, COMP, {"prompt": prompt, "max_tokens": 2, "temperature": 0,
                            "echo": True})
    assert j["choices"][0]["text"].startswith(prompt) and j["choices"][0]["logprobs"] is None


def test_chat_logprobs(server):
    j = post(server, CHAT, {"messages": [{"role": "user", "content": "Name a fruit."}],
                            "max_tokens": 10, "temperature": 0, "logprobs": True,
                            "top_logprobs": 3})
    c = j["choices"][0]
    content = c["logprobs"]["content"]
    assert c["logprobs"]["refusal"] is None
    assert len(content) == j["usage"]["completion_tokens"]
    assert bytes(b for t in content for b in t["bytes"]).decode() == c["message"]["content"]
    for t in content:
        assert len(t["top_logprobs"]) == 3
        tops = [x["logprob"] for x in t["top_logprobs"]]
        assert tops == sorted(tops, reverse=True) and tops[0] == t["logprob"]
        assert t["token"] == t["top_logprobs"][0]["token"]
    # logprobs without alternatives
    j = post(server, CHAT, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                            "logprobs": True, "seed": 1})
    for t in j["choices"][0]["logprobs"]["content"]:
        assert t["top_logprobs"] == [] and t["logprob"] <= 0.0
    # sampled tokens: probabilities of what was drawn, each a probability
    assert all(0.0 < math.exp(t["logprob"]) <= 1.0
               for t in j["choices"][0]["logprobs"]["content"])


def test_stop_string_cuts_the_logprobs_too(server):
    j = post(server, COMP, {"prompt": "1, 2, 3, 4,", "max_tokens": 16, "temperature": 0,
                            "stop": ["7"], "logprobs": 1})
    c = j["choices"][0]
    assert c["finish_reason"] == "stop" and "7" not in c["text"]
    joined = "".join(c["logprobs"]["tokens"])
    assert joined.startswith(c["text"]) and len(joined) - len(c["text"]) < 4
    assert len(c["logprobs"]["tokens"]) <= j["usage"]["completion_tokens"]


def test_each_choice_has_its_own_logprobs(server):
    j = post(server, COMP, {"prompt": "Once upon a time", "max_tokens": 5, "n": 2,
                            "temperature": 1.0, "seed": 11, "logprobs": 0})
    for c in j["choices"]:
        assert "".join(c["logprobs"]["tokens"]) == c["text"]
        assert len(c["logprobs"]["token_logprobs"]) == 5


def test_openai_client_reads_them(server):
    openai = import_or_skip("openai", "pip install openai (tools/setup.sh does)")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1",
                           api_key=server.api_key)
    r = client.completions.create(model="x", prompt="Hello, my name is", max_tokens=3,
                                  temperature=0, logprobs=2, echo=True)
    lp = r.choices[0].logprobs
    assert lp.token_logprobs[0] is None and len(lp.tokens) == len(lp.text_offset)
    r = client.chat.completions.create(model="x", max_tokens=3, temperature=0, logprobs=True,
                                       top_logprobs=2,
                                       messages=[{"role": "user", "content": "Hello"}])
    content = r.choices[0].logprobs.content
    assert content and len(content[0].top_logprobs) == 2


def stream(srv, path, body):
    """The events of a streamed request, as dicts."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    try:
        conn.request("POST", path, body=json.dumps(dict(body, stream=True)),
                     headers=srv.headers())
        r = conn.getresponse()
        assert r.status == 200, r.read()
        return [ev for _, ev in sse_events(r)]
    finally:
        conn.close()


@pytest.mark.parametrize("stop", [None, ["olor"]])
def test_streamed_chat_logprobs_equal_the_whole_answer(server, stop):
    body = {"messages": [{"role": "user", "content": "List three colors."}],
            "max_tokens": 24, "temperature": 0, "logprobs": True, "top_logprobs": 2,
            "stop": stop}
    whole = post(server, CHAT, body)["choices"][0]
    text, content = "", []
    for ev in stream(server, CHAT, body):
        c = ev["choices"][0]
        text += c["delta"].get("content") or ""
        if c.get("logprobs"):
            content += c["logprobs"]["content"]
    assert text == whole["message"]["content"]
    assert content == whole["logprobs"]["content"]
    if stop:  # cut inside " color": the token that holds the cut is kept
        assert whole["finish_reason"] == "stop" and text.endswith(" c")
        assert content[-1]["token"].startswith(" c")


def test_streamed_completion_logprobs_equal_the_whole_answer(server):
    body = {"prompt": "The sun rises in the", "max_tokens": 10, "temperature": 0,
            "logprobs": 3}
    whole = post(server, COMP, body)["choices"][0]
    text, tokens, lps, tops, offsets = "", [], [], [], []
    for ev in stream(server, COMP, body):
        c = ev["choices"][0]
        text += c["text"]
        if c.get("logprobs"):
            tokens += c["logprobs"]["tokens"]
            lps += c["logprobs"]["token_logprobs"]
            tops += c["logprobs"]["top_logprobs"]
            offsets += c["logprobs"]["text_offset"]
    assert text == whole["text"]
    w = whole["logprobs"]
    assert (tokens, lps, tops, offsets) == (w["tokens"], w["token_logprobs"],
                                            w["top_logprobs"], w["text_offset"])
