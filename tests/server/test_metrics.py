"""GET /metrics: Prometheus' text format, counters that move by what the requests used."""

import re

LINE = re.compile(r"^([a-z_]+) (-?[0-9.e+]+)$")


def scrape(srv, **kw):
    st, hdrs, body = srv.request("GET", "/metrics", **kw)
    assert st == 200, body
    assert hdrs["content-type"].startswith("text/plain")
    values, types = {}, {}
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            m = LINE.match(line)
            assert m, line
            values[m.group(1)] = float(m.group(2))
    assert set(values) == set(types)
    return values, types


def test_metrics_follow_the_requests(server):
    before, types = scrape(server)
    for name in ("pi_requests_total", "pi_prompt_tokens_total", "pi_tokens_generated_total",
                 "pi_prompt_tokens_cached_total", "pi_decode_seconds_total"):
        assert types[name] == "counter"
    assert types["pi_slots_busy"] == "gauge" and types["pi_requests_queued"] == "gauge"
    msgs = [{"role": "user", "content": "Name a color."}]
    usage = []
    for _ in range(2):  # the second is served from the prompt cache
        st, j = server.json("POST", "/v1/chat/completions",
                            {"messages": msgs, "max_tokens": 4, "temperature": 0})
        assert st == 200
        usage.append(dict(j["usage"], finish=j["choices"][0]["finish_reason"]))
    server.wait_idle()
    after, _ = scrape(server)
    d = {k: after[k] - before[k] for k in after}
    assert d["pi_requests_total"] == 2
    assert d["pi_prompt_tokens_total"] == sum(u["prompt_tokens"] for u in usage)
    assert d["pi_prompt_tokens_cached_total"] == sum(
        u["prompt_tokens_details"]["cached_tokens"] for u in usage)
    assert d["pi_prompt_tokens_cached_total"] > 0
    assert d["pi_tokens_generated_total"] == sum(u["completion_tokens"] for u in usage)
    # each token decoded once: prompts less what was cached, and the generated tokens but
    # the last of an answer cut by max_tokens (sampled, never decoded; an answer that
    # ends by itself ends on a token that is not counted)
    assert d["pi_tokens_decoded_total"] == sum(
        u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"] + u["completion_tokens"]
        - (u["finish"] == "length") for u in usage)
    assert d["pi_decode_steps_total"] >= 2 and d["pi_decode_seconds_total"] > 0
    assert after["pi_slots_busy"] == 0 and after["pi_requests_queued"] == 0
    assert after["pi_slots_idle"] == server.health()["slots_idle"]


def test_metrics_need_the_key(server):
    st, _, _ = server.request("GET", "/metrics", key=False)
    assert st == 401
    st, hdrs, _ = server.request("POST", "/metrics", b"{}")
    assert st == 405 and "GET" in hdrs["allow"]
