"""response_format json_object (only text that can still become one JSON object is ever
sampled, and the answer ends when the object does) and logit_bias."""

import json

import pytest

from test_logprobs import stream

CHAT, COMP = "/v1/chat/completions", "/v1/completions"
ASK = "Describe a cat as a JSON object with name, age and color."


def chat(srv, content, **kw):
    st, j = srv.json("POST", CHAT, dict({"messages": [{"role": "user", "content": content}],
                                         "max_tokens": 160}, **kw))
    assert st == 200, j
    return j["choices"][0]


@pytest.mark.parametrize("seed", range(6))
def test_json_object_parses(server, seed):
    # hot sampling and a prompt that does not ask for JSON: the format alone holds
    for content, temp in ((ASK, 0.9), ("Tell me about the sea.", 1.3)):
        c = chat(server, content, temperature=temp, seed=seed,
                 response_format={"type": "json_object"})
        text = c["message"]["content"]
        if c["finish_reason"] == "stop":
            assert isinstance(json.loads(text), dict), text
        else:  # cut by max_tokens: still the start of an object
            assert c["finish_reason"] == "length" and text.lstrip().startswith("{"), text


def test_json_object_greedy_and_streamed(server):
    c = chat(server, ASK, temperature=0, response_format={"type": "json_object"})
    assert c["finish_reason"] == "stop"
    obj = json.loads(c["message"]["content"])
    assert isinstance(obj, dict) and obj
    text = ""
    for ev in stream(server, CHAT, {"messages": [{"role": "user", "content": ASK}],
                                    "max_tokens": 160, "temperature": 0,
                                    "response_format": {"type": "json_object"}}):
        text += ev["choices"][0]["delta"].get("content") or ""
    assert text == c["message"]["content"]
    # "text" is the default: no constraint
    plain = chat(server, "Say hello.", temperature=0, max_tokens=8,
                 response_format={"type": "text"})
    assert not plain["message"]["content"].lstrip().startswith("{")


def test_json_object_on_completions(server):
    st, j = server.json("POST", COMP, {"prompt": "A person as JSON:", "max_tokens": 120,
                                       "temperature": 0, "response_format":
                                       {"type": "json_object"}})
    assert st == 200, j
    c = j["choices"][0]
    if c["finish_reason"] == "stop":
        assert isinstance(json.loads(c["text"]), dict)
    else:
        assert c["text"].lstrip().startswith("{")


def test_logit_bias(server):
    body = {"prompt": "The capital of France is", "max_tokens": 1, "temperature": 0,
            "logprobs": 2}
    st, j = server.json("POST", COMP, body)
    first = j["choices"][0]["logprobs"]["tokens"][0]
    st, t = server.json("POST", "/tokenize", {"content": first})
    tid = t["tokens"][0]
    # banned: the second choice comes instead
    st, j2 = server.json("POST", COMP, dict(body, logit_bias={str(tid): -100}))
    assert st == 200
    assert j2["choices"][0]["logprobs"]["tokens"][0] != first
    # forced: a token that was nowhere near the top
    st, t = server.json("POST", "/tokenize", {"content": " banana"})
    forced = t["tokens"][0]
    st, j3 = server.json("POST", COMP, dict(body, logit_bias={str(forced): 100}))
    assert st == 200
    st, d = server.json("POST", "/detokenize", {"tokens": [forced]})
    assert j3["choices"][0]["text"] == d["content"]
