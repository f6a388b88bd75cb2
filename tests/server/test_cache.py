"""The prompt cache: a slot keeps its tokens after a request, and a later prompt that
starts the same way decodes only the rest. Answers must equal those of a server that
decodes every prompt whole (--no-prompt-cache), and usage reports what was reused
(usage.prompt_tokens_details.cached_tokens, as OpenAI's API does)."""

import json

import pytest

from conftest import Server, sse_events

SYSTEM = ("You are a careful assistant. Answer in one short sentence, without lists, "
          "and never mention that you are an assistant.")


def chat(srv, messages, max_tokens=16, **extra):
    st, j = srv.json("POST", "/v1/chat/completions", {
        "messages": messages, "max_tokens": max_tokens, "temperature": 0, **extra})
    assert st == 200, j
    return j["choices"][0]["message"]["content"], j["usage"]


def complete(srv, prompt, max_tokens=8):
    st, j = srv.json("POST", "/v1/completions", {
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert st == 200, j
    return j["choices"][0]["text"], j["usage"]


def cached(usage):
    return usage["prompt_tokens_details"]["cached_tokens"]


@pytest.fixture(scope="module")
def uncached():
    s = Server("--parallel", 2, "-c", 2048, "--no-prompt-cache")
    yield s
    s.finish()


@pytest.fixture(scope="module")
def cache_srv():
    """Two slots, so the test knows which caches can exist."""
    s = Server("--parallel", 2, "-c", 2048)
    yield s
    s.finish()


def test_same_prompt_twice(cache_srv, uncached):
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Why is the sky blue?"}]
    ref, ref_usage = chat(uncached, msgs)
    assert cached(ref_usage) == 0
    first, u1 = chat(cache_srv, msgs)
    second, u2 = chat(cache_srv, msgs)
    assert first == ref and second == ref
    assert u2["prompt_tokens"] == u1["prompt_tokens"] == ref_usage["prompt_tokens"]
    # all but the last prompt token, which is decoded again for its logits
    assert cached(u2) == u2["prompt_tokens"] - 1


def test_next_chat_turn_reads_only_the_new_part(cache_srv, uncached):
    turn1 = [{"role": "system", "content": SYSTEM},
             {"role": "user", "content": "Name a large animal that lives in the ocean."}]
    reply, u1 = chat(cache_srv, turn1)
    turn2 = turn1 + [{"role": "assistant", "content": reply},
                     {"role": "user", "content": "How long does it live?"}]
    text, u2 = chat(cache_srv, turn2)
    assert u1["prompt_tokens"] <= cached(u2) < u2["prompt_tokens"]
    ref, ref_usage = chat(uncached, turn2)
    assert cached(ref_usage) == 0
    assert text == ref


def test_shared_prefix_of_completions(uncached):
    """A prompt that shares only a prefix with the one slot's tokens reuses that prefix."""
    one = Server("--parallel", 1, "-c", 1024)
    try:
        a = "The list of prime numbers begins with two, three, five, seven and"
        b = "The list of prime numbers begins with two, three and"
        _, ua = complete(one, a)
        text, ub = complete(one, b)
        st, ta = one.json("POST", "/tokenize", {"content": a})
        st, tb = one.json("POST", "/tokenize", {"content": b})
    finally:
        one.finish()
    ta, tb = ta["tokens"], tb["tokens"]
    assert ua["prompt_tokens"] == len(ta) + (ub["prompt_tokens"] - len(tb))
    common = 0
    while common < min(len(ta), len(tb)) and ta[common] == tb[common]:
        common += 1
    bos = ub["prompt_tokens"] - len(tb)  # a BOS the completion adds, if any
    assert cached(ub) == min(common + bos, ub["prompt_tokens"] - 1)
    assert 0 < cached(ub) < ub["prompt_tokens"]
    ref, _ = complete(uncached, b)
    assert text == ref


def test_other_conversations_keep_their_slot(cache_srv):
    """With two slots, two conversations that alternate both hit their cache: a prompt
    that continues neither slot's tokens takes the least recently used one, so chats
    sharing a template do not evict each other."""
    convs = [[{"role": "user", "content": "Say something about " + topic + "."}]
             for topic in ("mountains and rivers in the far north", "the history of paper")]
    for m in convs:
        chat(cache_srv, m, max_tokens=4)
    for m in convs * 2:
        _, u = chat(cache_srv, m, max_tokens=4)
        assert cached(u) == u["prompt_tokens"] - 1, u


def test_streamed_usage_reports_cached_tokens(cache_srv):
    msgs = [{"role": "user", "content": "Count from one to five."}]
    chat(cache_srv, msgs, max_tokens=4)
    st, _, body = cache_srv.request("POST", "/v1/chat/completions", {
        "messages": msgs, "max_tokens": 4, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    assert st == 200
    usage = None
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            ev = json.loads(line[6:])
            usage = ev.get("usage") or usage
    assert usage and cached(usage) == usage["prompt_tokens"] - 1


def test_several_choices_from_a_cached_prompt(cache_srv, uncached):
    msgs = [{"role": "user", "content": "Give me a name for a cat."}]
    chat(cache_srv, msgs, max_tokens=4)
    body = {"messages": msgs, "max_tokens": 6, "temperature": 0.9, "seed": 3, "n": 2}
    st, j = cache_srv.json("POST", "/v1/chat/completions", body)
    assert st == 200, j
    st, r = uncached.json("POST", "/v1/chat/completions", body)
    assert st == 200, r
    assert cached(j["usage"]) == j["usage"]["prompt_tokens"] - 1
    assert [c["message"]["content"] for c in j["choices"]] == \
        [c["message"]["content"] for c in r["choices"]]
