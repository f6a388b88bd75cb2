"""Many clients at once: continuous batching gives each the answer it gets alone, a full
queue answers 503, and a client that goes away frees its slot."""

import http.client
import json
import socket
import threading
import time

from conftest import Server, sse_events

PROMPTS = [
    "Write a haiku about the sea.",
    "What is the boiling point of water?",
    "Name three primary colors.",
    "Explain what a CPU does in one sentence.",
]


def stream_chat(server, content, max_tokens=24, timeout=120):
    """Stream a greedy chat answer; (text, finish_reason)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps({
            "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True}), headers=server.headers())
        r = conn.getresponse()
        assert r.status == 200, r.read()
        text, finish = "", None
        for _, ev in sse_events(r):
            c = ev["choices"][0]
            text += c["delta"].get("content") or ""
            finish = c["finish_reason"] or finish
        return text, finish
    finally:
        conn.close()


def test_16_concurrent_streams_equal_alone(server):
    alone = {p: stream_chat(server, p) for p in PROMPTS}
    assert all(t for t, _ in alone.values())
    results, errors = [None] * 16, []

    def worker(i):
        try:
            results[i] = stream_chat(server, PROMPTS[i % len(PROMPTS)])
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    for i, got in enumerate(results):
        want = alone[PROMPTS[i % len(PROMPTS)]]
        assert got == want, f"client {i}: {got!r} != alone {want!r}"
    assert server.wait_idle()["slots_busy"] == 0


def open_stream(port, headers, max_tokens, prompt="1, 2, 3, 4, 5, 6, 7,"):
    """Start a streaming completion on a raw socket and read until the first token;
    returns the socket."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "temperature": 0}).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head.encode() +
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while b'"text":"' not in got.replace(b'"text":""', b""):
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    return s


def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_disconnect_frees_slot(server):
    assert server.wait_idle()["slots_busy"] == 0
    s = open_stream(server.port, server.headers(), 1500)
    assert server.health()["slots_busy"] == 1
    t0 = time.monotonic()
    s.close()
    assert wait_for(lambda: server.health()["slots_busy"] == 0), server.health()
    assert time.monotonic() - t0 < 2.0
    # A non-streaming request whose client goes away while it runs.
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    body = json.dumps({"prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 1500,
                       "temperature": 0}).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in server.headers().items())
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head.encode() +
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert wait_for(lambda: server.health()["slots_busy"] == 1)
    s.close()
    assert wait_for(lambda: server.health()["slots_busy"] == 0), server.health()


def test_queue_full_503_and_queued_disconnect():
    srv = Server("--parallel", 1, "--queue", 1, "-c", 1024)
    try:
        a = open_stream(srv.port, srv.headers(), 900)  # holds the only slot
        # B waits in the queue (non-streaming, on its own thread).
        b_result = {}

        def b():
            b_result["r"] = srv.json("POST", "/v1/completions",
                                     {"prompt": "Hello", "max_tokens": 4, "temperature": 0})
        tb = threading.Thread(target=b)
        tb.start()
        assert wait_for(lambda: srv.health()["queued"] == 1), srv.health()
        # C finds the slot busy and the queue full.
        st, hdrs, data = srv.request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert st == 503, data
        err = json.loads(data)["error"]
        assert err["type"] == "server_error" and err["code"] == "server_busy"
        assert hdrs.get("retry-after") == "1"
        # A queued client that goes away leaves the queue.
        q = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        body = b'{"prompt": "Hi", "max_tokens": 4}'
        # (the queue is full: this one is refused; B stays queued)
        q.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nAuthorization: Bearer " +
                  srv.api_key.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert q.recv(100).startswith(b"HTTP/1.1 503")
        q.close()
        # A leaves: B gets the slot and finishes.
        a.close()
        tb.join(60)
        st, j = b_result["r"]
        assert st == 200 and j["choices"][0]["finish_reason"] == "length", j
        assert srv.wait_idle()["slots_busy"] == 0
        # A queued request whose client disconnects is dropped from the queue.
        a = open_stream(srv.port, srv.headers(), 900)
        q = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        q.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nAuthorization: Bearer " +
                  srv.api_key.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert wait_for(lambda: srv.health()["queued"] == 1)
        q.close()
        assert wait_for(lambda: srv.health()["queued"] == 0), srv.health()
        a.close()
        assert srv.wait_idle()["slots_busy"] == 0
    finally:
        srv.finish()


def test_sigterm_mid_stream():
    """SIGTERM with a stream running and a request queued: both end promptly, the server
    exits 0 (under ASan: without a leak)."""
    import signal
    srv = Server("--parallel", 1, "--queue", 2, "-c", 1024)
    a = open_stream(srv.port, srv.headers(), 1000)
    q = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    body = b'{"prompt": "Hi", "max_tokens": 4}'
    q.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nAuthorization: Bearer " +
              srv.api_key.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert wait_for(lambda: srv.health()["queued"] == 1)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    rest = b""
    while True:
        chunk = a.recv(65536)
        if not chunk:
            break
        rest += chunk
    assert b"data: [DONE]" in rest and b"shutting down" in rest
    answer = q.recv(65536)
    assert answer.startswith(b"HTTP/1.1 500") and b"shutting down" in answer, answer
    srv.proc.wait(30)
    assert time.monotonic() - t0 < 10
    a.close()
    q.close()
    srv.finish()
