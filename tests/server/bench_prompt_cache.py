"""What the prompt cache saves: time to the first token of a chat's turns, with the cache
and with --no-prompt-cache, the two servers asked in turn (so machine noise hits both).

    PI_SERVER=build/tools/pi-server/pi-server python3 tests/server/bench_prompt_cache.py

Each conversation has a long system message (about 600 tokens) and TURNS user turns;
each turn sends the whole conversation so far, as chat clients do. Prints per turn the
prompt tokens, the tokens reused, and the median time to first token of each server.
Not a test: figures only (docs/performance.md)."""

import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import Server, sse_events  # noqa: E402

TURNS = 4
REPEATS = int(os.environ.get("PI_BENCH_REPEATS", "5"))
SYSTEM = " ".join(
    f"Rule {i}: answer politely, keep to the facts, cite no sources, and prefer short "
    f"sentences over long ones." for i in range(1, 31))
QUESTIONS = ["What is the tallest mountain?", "How high is it?", "Who climbed it first?",
             "In which year?"]


def first_token(srv, messages):
    """(seconds to the first text delta, the answer, usage)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
    try:
        t0 = time.monotonic()
        conn.request("POST", "/v1/chat/completions", body=json.dumps({
            "messages": messages, "max_tokens": 8, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}), headers=srv.headers())
        r = conn.getresponse()
        assert r.status == 200, r.read()
        ttft, text, usage = None, "", None
        for t, ev in sse_events(r):
            if ev.get("choices"):
                d = ev["choices"][0]["delta"].get("content") or ""
                if d and ttft is None:
                    ttft = t - t0
                text += d
            usage = ev.get("usage") or usage
        return ttft, text, usage
    finally:
        conn.close()


def main():
    on = Server("--parallel", 2, "-c", 4096)
    off = Server("--parallel", 2, "-c", 4096, "--no-prompt-cache")
    try:
        rows = []
        for rep in range(REPEATS):
            convs = {"on": [{"role": "system", "content": SYSTEM}],
                     "off": [{"role": "system", "content": SYSTEM}]}
            for turn in range(TURNS):
                q = QUESTIONS[turn] + ("" if rep == 0 else f" ({rep})")
                for name, srv in (("on", on), ("off", off)):
                    msgs = convs[name] + [{"role": "user", "content": q}]
                    ttft, text, usage = first_token(srv, msgs)
                    convs[name] = msgs + [{"role": "assistant", "content": text}]
                    rows.append((turn, name, ttft, usage["prompt_tokens"],
                                 usage["prompt_tokens_details"]["cached_tokens"]))
        print(f"{'turn':>4} {'prompt':>7} {'reused':>7} {'TTFT cache':>11} "
              f"{'TTFT none':>10} {'ratio':>6}")
        for turn in range(TURNS):
            a = [r for r in rows if r[0] == turn and r[1] == "on"]
            b = [r for r in rows if r[0] == turn and r[1] == "off"]
            ta = statistics.median(r[2] for r in a)
            tb = statistics.median(r[2] for r in b)
            print(f"{turn + 1:>4} {a[-1][3]:>7} {a[-1][4]:>7} {ta * 1e3:>9.0f}ms "
                  f"{tb * 1e3:>8.0f}ms {tb / ta:>5.1f}x")
    finally:
        on.finish()
        off.finish()


if __name__ == "__main__":
    main()
