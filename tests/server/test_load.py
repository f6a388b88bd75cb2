"""A bounded soak on loopback: 500 streaming chat requests at concurrency 8 (12 tokens
each), none may fail, the server's memory must stay flat (VmRSS grows by less than
50 MiB between request 100 and request 500). Prints requests/s, time to first token
(median, p90) and tokens/s per stream; with PI_SERVER_LOAD_REPORT=FILE also writes them
there as JSON (docs/performance.md, "Server", quotes such a run)."""

import http.client
import json
import os
import statistics
import threading
import time

from conftest import sse_events

N_REQUESTS = int(os.environ.get("PI_SERVER_LOAD_REQUESTS", "500"))
CONCURRENCY = 8
MAX_TOKENS = 12
TOPICS = ["the sea", "a cat", "bread", "the moon", "rain", "a library", "trains", "music"]


def one_request(conn, server, i):
    """(ttft_s, decode tokens/s or None, completion_tokens); raises on any failure."""
    body = json.dumps({
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": f"One sentence about {TOPICS[i % 8]} and {i}."}],
        "max_tokens": MAX_TOKENS, "temperature": 0.7, "seed": i, "stream": True,
        "stream_options": {"include_usage": True}})
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body=body, headers=server.headers())
    r = conn.getresponse()
    if r.status != 200:
        raise AssertionError(f"request {i}: HTTP {r.status} {r.read()[:200]!r}")
    times, usage, finish = [], None, None
    for t, ev in sse_events(r):
        if ev.get("usage"):
            usage = ev["usage"]
        for c in ev["choices"]:
            if c["delta"].get("content"):
                times.append(t)
            finish = c["finish_reason"] or finish
    if r.read():  # the chunked body ends cleanly after [DONE]
        raise AssertionError(f"request {i}: data after [DONE]")
    if not usage or finish not in ("stop", "length") or not times:
        raise AssertionError(f"request {i}: incomplete stream (usage {usage}, finish {finish})")
    n = usage["completion_tokens"]
    rate = (n - 1) / (times[-1] - times[0]) if n > 2 and times[-1] > times[0] else None
    return times[0] - t0, rate, n


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def test_soak(server):
    server.wait_idle()
    lock = threading.Lock()
    next_i = [0]
    results, errors = [], []
    rss = {}

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        try:
            while True:
                with lock:
                    i = next_i[0]
                    if i >= N_REQUESTS or errors:
                        return
                    next_i[0] += 1
                try:
                    res = one_request(conn, server, i)
                except Exception as e:
                    with lock:
                        errors.append(f"request {i}: {e!r}")
                    return
                with lock:
                    results.append(res)
                    done = len(results)
                    if done in (100, N_REQUESTS):
                        rss[done] = server.rss_kib()
        finally:
            conn.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(CONCURRENCY)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    wall = time.monotonic() - t0
    assert not errors, errors[:5]
    assert len(results) == N_REQUESTS
    ttft = [r[0] for r in results]
    rates = [r[1] for r in results if r[1]]
    tokens = sum(r[2] for r in results)
    growth_mib = (rss[N_REQUESTS] - rss.get(100, rss[N_REQUESTS])) / 1024
    report = {
        "requests": N_REQUESTS, "concurrency": CONCURRENCY, "max_tokens": MAX_TOKENS,
        "wall_s": round(wall, 2), "requests_per_s": round(N_REQUESTS / wall, 2),
        "completion_tokens_per_s": round(tokens / wall, 1),
        "ttft_median_ms": round(statistics.median(ttft) * 1e3, 1),
        "ttft_p90_ms": round(pct(ttft, 90) * 1e3, 1),
        "stream_tokens_per_s_median": round(statistics.median(rates), 1),
        "stream_tokens_per_s_p10": round(pct(rates, 10), 1),
        "rss_mib_at_100": round(rss.get(100, 0) / 1024, 1),
        "rss_mib_at_end": round(rss[N_REQUESTS] / 1024, 1),
    }
    print("\npi-server load: " + json.dumps(report))
    if os.environ.get("PI_SERVER_LOAD_REPORT"):
        with open(os.environ["PI_SERVER_LOAD_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    assert growth_mib < 50, report
    h = server.wait_idle()
    assert h["slots_busy"] == 0 and h["queued"] == 0
