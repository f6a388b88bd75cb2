"""Context handling (issue 18 item 5), through the official `openai` client:

- `-c` is the total of all slots, split evenly (llama-server's meaning);
- `max_tokens` above what fits is clamped: the answer ends with finish_reason "length"
  and `"context_full": true` (not a 400), `usage` counts exactly what fits;
- `--context-shift` goes on past a full context (keeping the first n_keep positions,
  dropping the older half of the rest), and the greedy text up to the first shift is the
  same as without it; a shifted slot's cache is offered again only up to what it kept."""

import re

import pytest

from conftest import API_KEY, Server, import_or_skip

openai = import_or_skip("openai", "pip install openai (tools/setup.sh does)")

PROMPT = "Write a long story about a dragon who learns to bake bread."
SLOT = 128  # positions per slot in these servers


def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=300)


def metric(srv, name):
    st, _, body = srv.request("GET", "/metrics")
    assert st == 200
    m = re.search(r"^%s (\S+)$" % name, body.decode(), re.M)
    assert m, body.decode()
    return float(m.group(1))


@pytest.fixture(scope="module")
def plain():
    s = Server("--parallel", 2, "-c", 2 * SLOT)
    yield s
    s.finish()


@pytest.fixture(scope="module")
def shifting():
    s = Server("--parallel", 1, "-c", SLOT, "--context-shift")
    yield s
    s.finish()


def chat(srv, **kw):
    return client(srv).chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], temperature=0, **kw)


def test_c_is_the_total_of_the_slots(plain):
    assert re.search(r"2 slots of %d positions" % SLOT, plain.stderr()), plain.stderr()
    with pytest.raises(openai.BadRequestError) as e:
        client(plain).completions.create(model="m", prompt="hello " * (SLOT + 8), max_tokens=1)
    assert "holds %d tokens per slot" % SLOT in str(e.value)


def test_too_few_positions_per_slot_is_refused():
    import subprocess

    from conftest import model_path, server_binary
    r = subprocess.run([server_binary(), "-m", model_path(), "--port", "0", "--parallel", "4",
                        "-c", "32"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "leaves each of the 4 slots 8 positions" in r.stderr, r.stderr


def test_max_tokens_is_clamped_to_the_context(plain):
    r = chat(plain, max_tokens=100000)
    ch = r.choices[0]
    assert ch.finish_reason == "length"
    assert r.usage.prompt_tokens + r.usage.completion_tokens == SLOT
    assert (ch.model_extra or {}).get("context_full") is True


def test_max_tokens_below_the_context_is_not_context_full(plain):
    r = chat(plain, max_tokens=5)
    ch = r.choices[0]
    assert r.usage.completion_tokens == 5 and ch.finish_reason == "length"
    assert "context_full" not in (ch.model_extra or {})


def test_streamed_answer_says_the_context_is_full(plain):
    last = None
    for ev in chat(plain, max_tokens=100000, stream=True):
        if ev.choices and ev.choices[0].finish_reason:
            last = ev.choices[0]
    assert last is not None and last.finish_reason == "length"
    assert (last.model_extra or {}).get("context_full") is True


def test_context_shift_goes_on_past_the_context(plain, shifting):
    full = chat(plain, max_tokens=100000)
    n_first = full.usage.completion_tokens
    before = metric(shifting, "pi_context_shifts_total")
    r = chat(shifting, max_tokens=3 * SLOT)
    ch = r.choices[0]
    assert r.usage.completion_tokens == 3 * SLOT and ch.finish_reason == "length"
    assert "context_full" not in (ch.model_extra or {})
    # at least two shifts: each frees (SLOT - keep) / 2 positions
    assert metric(shifting, "pi_context_shifts_total") >= before + 2
    # everything before the first shift is decoded exactly as without one
    assert ch.message.content.startswith(full.choices[0].message.content), (
        n_first, full.choices[0].message.content, ch.message.content)
    # the shifted slot keeps only its exact start for the next prompt
    again = chat(shifting, max_tokens=2)
    assert again.usage.prompt_tokens_details.cached_tokens <= 1


def test_n_keep_keeps_the_whole_prompt(shifting):
    r = chat(shifting, max_tokens=2 * SLOT, extra_body={"n_keep": -1})
    assert r.usage.completion_tokens == 2 * SLOT and r.choices[0].finish_reason == "length"
    # the whole prompt was kept: its cache is offered again
    again = chat(shifting, max_tokens=1)
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    with pytest.raises(openai.BadRequestError):
        client(shifting).completions.create(model="m", prompt=PROMPT, max_tokens=2,
                                            extra_body={"n_keep": -5})
