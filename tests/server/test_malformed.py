"""Malformed requests, table-driven: broken JSON, wrong types, numbers out of range,
invalid UTF-8, bad HTTP, wrong Content-Length, oversized bodies, a slow client. Each gets
a 4xx (OpenAI's error object when a handler answers; libmicrohttpd answers requests that
break HTTP itself), never a crash, and the server stays healthy.

This file also runs against the ASan+UBSan build (build-asan, suite 'server'): there the
server exits non-zero at the end on any memory error, undefined behaviour or leak."""

import json
import socket
import time

import pytest

from conftest import Server, raw_exchange, status_of

MAX_BODY = 65536
N_CTX = 1024  # per slot: -c is the total of the 2 slots
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def srv():
    # "Host: x" in the raw requests below: a name this server is told to accept
    s = Server("--parallel", 2, "--queue", 4, "-c", 2 * N_CTX, "--max-body", MAX_BODY,
               "--timeout", 2, "-n", 4, "--host-allow", "x")
    yield s
    s.finish()


def chat(**kw):
    return dict({"messages": MSG, "max_tokens": 2}, **kw)


def comp(**kw):
    return dict({"prompt": "hi", "max_tokens": 2}, **kw)


CHAT, COMP = "/v1/chat/completions", "/v1/completions"

# (name, path, body (bytes, or an object sent as JSON), status, param or None)
JSON_CASES = [
    ("broken json", CHAT, b'{"messages": [', 400, None),
    ("trailing garbage", CHAT, b'{"messages": []} x', 400, None),
    ("not an object", CHAT, b"[1, 2, 3]", 400, None),
    ("a string", CHAT, b'"hello"', 400, None),
    ("empty body", CHAT, b"", 400, None),
    ("nul byte", CHAT, b'{"messages"\x00: 1}', 400, None),
    ("deep nesting", CHAT, b"[" * 20000 + b"]" * 20000, 400, None),
    ("deep nesting in a field", CHAT,
     b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, None),
    ("invalid utf-8", COMP, b'{"prompt": "\xff\xfe", "max_tokens": 2}', 400, None),
    ("overlong utf-8", COMP, b'{"prompt": "\xc0\xaf", "max_tokens": 2}', 400, None),
    ("utf-8 surrogate", COMP, b'{"prompt": "\xed\xa0\x80", "max_tokens": 2}', 400, None),
    ("truncated utf-8", COMP, b'{"prompt": "\xe2\x82", "max_tokens": 2}', 400, None),
    ("lone surrogate escape", COMP, b'{"prompt": "\\ud800", "max_tokens": 2}', 400, None),
    ("missing messages", CHAT, {"max_tokens": 2}, 400, "messages"),
    ("messages a string", CHAT, {"messages": "hi"}, 400, "messages"),
    ("messages empty", CHAT, {"messages": []}, 400, "messages"),
    ("message a number", CHAT, {"messages": [1]}, 400, "messages"),
    ("role a number", CHAT, {"messages": [{"role": 1, "content": "x"}]}, 400, "messages"),
    ("role unknown", CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages"),
    ("content a number", CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages"),
    ("content missing", CHAT, {"messages": [{"role": "user"}]}, 400, "messages"),
    ("content image part", CHAT, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}]}, 400, "messages"),
    ("model a number", CHAT, chat(model=5), 400, "model"),
    ("max_tokens a string", CHAT, chat(max_tokens="10"), 400, "max_tokens"),
    ("max_tokens fractional", CHAT, chat(max_tokens=1.5), 400, "max_tokens"),
    ("max_tokens zero", CHAT, chat(max_tokens=0), 400, "max_tokens"),
    ("max_tokens negative", CHAT, chat(max_tokens=-5), 400, "max_tokens"),
    ("max_tokens huge", CHAT, chat(max_tokens=10**12), 400, "max_tokens"),
    ("max_tokens above 2^31 - 1", CHAT, chat(max_tokens=2 ** 31), 400, "max_tokens"),
    ("max_tokens 1e400", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], '
     b'"max_tokens": 1e400}', 400, "max_tokens"),
    ("max_completion_tokens negative", CHAT, chat(max_completion_tokens=-1), 400,
     "max_completion_tokens"),
    ("temperature negative", CHAT, chat(temperature=-0.1), 400, "temperature"),
    ("temperature too high", CHAT, chat(temperature=2.5), 400, "temperature"),
    ("temperature a string", CHAT, chat(temperature="hot"), 400, "temperature"),
    ("top_p above 1", CHAT, chat(top_p=1.5), 400, "top_p"),
    ("frequency_penalty", CHAT, chat(frequency_penalty=9), 400, "frequency_penalty"),
    ("negative presence_penalty", CHAT, chat(presence_penalty=-1), 400, "presence_penalty"),
    ("top_k negative", CHAT, chat(top_k=-1), 400, "top_k"),
    ("min_p above 1", CHAT, chat(min_p=2), 400, "min_p"),
    ("n zero", CHAT, chat(n=0), 400, "n"),
    ("n above slots", CHAT, chat(n=3), 400, "n"),
    ("n a string", CHAT, chat(n="2"), 400, "n"),
    ("seed a string", CHAT, chat(seed="x"), 400, "seed"),
    ("seed too big", CHAT, chat(seed=1e30), 400, "seed"),
    ("stream a string", CHAT, chat(stream="yes"), 400, "stream"),
    ("stream_options a list", CHAT, chat(stream=True, stream_options=[1]), 400,
     "stream_options"),
    ("stop a number", CHAT, chat(stop=5), 400, "stop"),
    ("stop five strings", CHAT, chat(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    ("stop array of numbers", CHAT, chat(stop=[1]), 400, "stop"),
    ("stop too long", CHAT, chat(stop="x" * 300), 400, "stop"),
    ("tools not a list", CHAT, chat(tools={"type": "function", "function": {"name": "f"}}), 400,
     "tools"),
    ("legacy functions", CHAT, chat(functions=[{"name": "f"}]), 400, "functions"),
    ("top_logprobs without logprobs", CHAT, chat(top_logprobs=2), 400, "top_logprobs"),
    ("top_logprobs 21", CHAT, chat(logprobs=True, top_logprobs=21), 400, "top_logprobs"),
    ("logprobs a string", CHAT, chat(logprobs="yes"), 400, "logprobs"),
    ("completion logprobs 21", COMP, comp(logprobs=21), 400, "logprobs"),
    ("completion logprobs true", COMP, comp(logprobs=True), 400, "logprobs"),
    ("missing prompt", COMP, {"max_tokens": 2}, 400, "prompt"),
    ("prompt a number", COMP, comp(prompt=5), 400, "prompt"),
    ("prompt two strings", COMP, comp(prompt=["a", "b"]), 400, "prompt"),
    ("prompt mixed array", COMP, comp(prompt=[1, "a"]), 400, "prompt"),
    ("prompt negative token", COMP, comp(prompt=[-1]), 400, "prompt"),
    ("prompt token past vocab", COMP, comp(prompt=[99999999]), 400, "prompt"),
    ("prompt empty", COMP, comp(prompt=""), 400, "prompt"),
    ("prompt longer than the context", COMP, comp(prompt="hello " * (N_CTX + 10)), 400,
     "prompt"),
    ("echo streamed", COMP, comp(echo=True, stream=True), 400, "echo"),
    ("response_format json_schema unsupported", CHAT, chat(response_format={
     "type": "json_schema", "json_schema": {"name": "x", "schema": {"pattern": "a"}}}), 400,
     "response_format"),
    ("response_format json_schema without schema", CHAT, chat(response_format={
     "type": "json_schema", "json_schema": {"name": "x"}}), 400, "response_format"),
    ("grammar malformed", CHAT, chat(grammar="root ::= ("), 400, "grammar"),
    ("grammar a number", COMP, comp(grammar=1), 400, "grammar"),
    ("response_format unknown", CHAT, chat(response_format={"type": "yaml"}), 400,
     "response_format"),
    ("response_format a string", CHAT, chat(response_format="json"), 400, "response_format"),
    ("logit_bias a list", COMP, comp(logit_bias=[1]), 400, "logit_bias"),
    ("logit_bias bad id", COMP, comp(logit_bias={"x": 1}), 400, "logit_bias"),
    ("logit_bias id past vocab", COMP, comp(logit_bias={"99999999": 1}), 400, "logit_bias"),
    ("logit_bias 101", COMP, comp(logit_bias={"1": 101}), 400, "logit_bias"),
    ("logit_bias not a number", COMP, comp(logit_bias={"1": "x"}), 400, "logit_bias"),
    ("max_tokens 0 without echo", COMP, comp(max_tokens=0), 400, "max_tokens"),
    ("best_of", COMP, comp(best_of=2), 400, "best_of"),
    ("tokenize content a number", "/tokenize", {"content": 5}, 400, "content"),
    ("tokenize no content", "/tokenize", {}, 400, "content"),
    ("detokenize a string", "/detokenize", {"tokens": "x"}, 400, "tokens"),
    ("detokenize bad id", "/detokenize", {"tokens": [-1]}, 400, "tokens"),
    ("detokenize huge id", "/detokenize", {"tokens": [1e300]}, 400, "tokens"),
    ("detokenize fractional id", "/detokenize", {"tokens": [1.5]}, 400, "tokens"),
    ("embeddings no input", "/v1/embeddings", {"model": "x"}, 400, "input"),
    ("embeddings input a number", "/v1/embeddings", {"input": 5}, 400, "input"),
    ("embeddings input null list", "/v1/embeddings", {"input": [None]}, 400, "input"),
    ("embeddings empty string", "/v1/embeddings", {"input": ""}, 400, "input"),
    ("embeddings empty array", "/v1/embeddings", {"input": []}, 400, "input"),
    ("embeddings empty id list", "/v1/embeddings", {"input": [[1], []]}, 400, "input"),
    ("embeddings mixed array", "/v1/embeddings", {"input": ["a", 1]}, 400, "input"),
    ("embeddings nested deeper", "/v1/embeddings", {"input": [[[1]]]}, 400, "input"),
    ("embeddings token past vocab", "/v1/embeddings", {"input": [[1, 99999999]]}, 400, "input"),
    ("embeddings huge token", "/v1/embeddings", {"input": [1e300]}, 400, "input"),
    ("embeddings longer than the context", "/v1/embeddings", {"input": "hello " * (N_CTX + 10)},
     400, "input"),
    ("embeddings too many inputs", "/v1/embeddings", {"input": ["a"] * 2049}, 400, "input"),
    ("embeddings dimensions", "/v1/embeddings", {"input": "a", "dimensions": 8}, 400,
     "dimensions"),
    ("embeddings dimensions a string", "/v1/embeddings", {"input": "a", "dimensions": "576"},
     400, "dimensions"),
    ("embeddings encoding_format", "/v1/embeddings", {"input": "a", "encoding_format": 1}, 400,
     "encoding_format"),
    ("embeddings model a number", "/v1/embeddings", {"input": "a", "model": 1}, 400, "model"),
    ("body too large", COMP, {"prompt": "x" * (MAX_BODY + 1)}, 413, None),
]


@pytest.mark.parametrize("name,path,body,status,param", JSON_CASES,
                         ids=[c[0] for c in JSON_CASES])
def test_bad_json(srv, name, path, body, status, param):
    st, _, data = srv.request("POST", path, body)
    assert st == status, data[:300]
    err = json.loads(data)["error"]
    assert err["message"] and err["type"] == "invalid_request_error"
    if param:
        assert err["param"] == param, err
    assert srv.alive()


# (name, method, path, headers, status, error code)
ROUTE_CASES = [
    ("unknown path", "GET", "/nope", {}, 404, "unknown_url"),
    ("unknown v1 path", "POST", "/v1/audio/speech", {}, 404, "unknown_url"),
    ("path traversal", "GET", "/../../etc/passwd", {}, 404, "unknown_url"),
    ("GET a POST endpoint", "GET", CHAT, {}, 405, "method_not_allowed"),
    ("PUT", "PUT", COMP, {}, 405, "method_not_allowed"),
    ("DELETE health", "DELETE", "/health", {}, 405, "method_not_allowed"),
    ("POST models", "POST", "/v1/models", {}, 405, "method_not_allowed"),
    ("no key", "POST", CHAT, {"Authorization": ""}, 401, "invalid_api_key"),
    ("wrong key", "POST", CHAT, {"Authorization": "Bearer nope"}, 401, "invalid_api_key"),
    ("key prefix", "GET", "/v1/models", {"Authorization": "Bearer test"}, 401, "invalid_api_key"),
    ("basic auth", "GET", "/v1/models", {"Authorization": "Basic dGVzdA=="}, 401,
     "invalid_api_key"),
    ("unknown model", "GET", "/v1/models/other", {}, 404, "model_not_found"),
]


@pytest.mark.parametrize("name,method,path,headers,status,code", ROUTE_CASES,
                         ids=[c[0] for c in ROUTE_CASES])
def test_bad_route(srv, name, method, path, headers, status, code):
    st, hdrs, data = srv.request(method, path, b"{}" if method in ("POST", "PUT") else None,
                                 headers=headers)
    assert st == status, data[:300]
    assert json.loads(data)["error"]["code"] == code
    if status == 405:
        assert "allow" in hdrs


def post_raw(path, body, extra=b"", key=True, ctype=b"application/json"):
    auth = b"Authorization: Bearer test-key-1234\r\n" if key else b""
    ct = b"Content-Type: " + ctype + b"\r\n" if ctype else b""
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + auth + ct + extra +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


def chunked(body, size=4096):
    out = b""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


# (name, bytes, expected status: an int, a set, or None for "closed without an answer
# is fine too")
RAW_CASES = [
    ("garbage request line", b"GARBAGE\r\n\r\n", None),
    ("no version", b"GET /health\r\n\r\n", {200, 400, 505}),
    ("bad version", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n", range(400, 506)),
    ("header without colon", b"GET /health HTTP/1.1\r\nHost: x\r\nBroken header\r\n\r\n",
     range(400, 500)),
    ("huge header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n",
     range(400, 500)),
    ("bad content-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc"
     b"\r\n\r\n{}", range(400, 500)),
    ("negative content-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
     b"Content-Length: -5\r\n\r\n{}", range(400, 500)),
    ("huge content-length", post_raw(COMP, b"{}").replace(b"Content-Length: 2",
                                                          b"Content-Length: 99999999999999"),
     {413}),
    ("content-length past 2^64", post_raw(COMP, b"{}").replace(
        b"Content-Length: 2", b"Content-Length: 999999999999999999999999"), range(400, 500)),
    ("content-length short", post_raw(COMP, b'{"prompt": "hi", "max_tokens": 2}').replace(
        b"Content-Length: 33", b"Content-Length: 10"), {400}),
    ("content-length long", post_raw(COMP, b'{"prompt": "hi"}').replace(
        b"Content-Length: 16", b"Content-Length: 500"), None),
    ("chunked body over the limit", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
     b"Authorization: Bearer test-key-1234\r\nContent-Type: application/json\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n" +
     chunked(b"x" * (MAX_BODY + 4096)), {413}),
    ("bad chunk size", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
     b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", range(400, 500)),
    ("form content type", post_raw(COMP, b"prompt=hi",
                                   ctype=b"application/x-www-form-urlencoded"), {415}),
    ("binary body", post_raw(COMP, bytes(range(256)) * 4), {400}),
    ("unauthenticated big body", post_raw(COMP, b"x" * 60000, key=False), {401}),
    ("escaped bytes in the path", b"GET /%ff%fe%00%1b[31m HTTP/1.1\r\nHost: x\r\n\r\n",
     range(400, 500)),
    ("long path", b"GET /" + b"a" * 3000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", range(400, 500)),
]


@pytest.mark.parametrize("name,data,expect", RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_bad_http(srv, name, data, expect):
    out = raw_exchange(srv.port, data, timeout=10)
    st = status_of(out)
    if expect is None:
        assert st is None or 400 <= st < 500, out[:300]
    else:
        assert st in expect, out[:300]
    if st and st >= 400 and b"application/json" in out.split(b"\r\n\r\n")[0]:
        body = out.split(b"\r\n\r\n", 1)[1]
        assert json.loads(body.decode("utf-8"))["error"]["message"]
    assert srv.alive()
    assert srv.health()["status"] == "ok"


@pytest.mark.parametrize("name,path,body,key,status", [
    ("unauthenticated", COMP, b"x" * 60000, False, 401),
    ("over the limit", COMP, b"x" * (MAX_BODY + 30000), True, 413),
    ("unknown path", "/v1/nothing", b"x" * 60000, True, 404),
], ids=["unauthenticated", "over the limit", "unknown path"])
def test_refused_body_is_read_first(srv, name, path, body, key, status):
    """A client that sends its whole body before reading (as http.client does) gets the
    refusal, not a connection reset: the server drops the body, then answers."""
    for _ in range(15):
        st, _, data = srv.request("POST", path, body, key=key)
        assert st == status, data[:300]
        assert json.loads(data)["error"]["message"]
    assert srv.health()["status"] == "ok"


def test_refused_endless_body_is_cut(srv):
    """A refused request whose body goes on past what the server drops (max body + 1 MiB)
    is closed without an answer and costs nothing more."""
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sent, cut = 0, False
    try:
        s.sendall(head)
        piece = chunked(b"x" * 65536)[:-5]  # one chunk, no terminator
        while sent < MAX_BODY + (64 << 20):
            s.sendall(piece)
            sent += 65536
    except OSError:
        cut = True
    finally:
        s.close()
    assert cut, "the server read %d bytes of a refused body" % sent
    assert srv.alive()
    assert srv.health()["status"] == "ok"


def test_slow_clients(srv):
    """Connections that send a request a byte at a time, or stall half-way, neither block
    other clients nor stay open past --timeout (2 s here)."""
    slow = []
    for i in range(6):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
        slow.append(s)
    body_stall = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    body_stall.sendall(post_raw(COMP, b'{"prompt": "hi", "max_tokens": 2}')[:-10])
    t0 = time.monotonic()
    for _ in range(5):
        assert srv.health()["status"] == "ok"
        st, j = srv.json("POST", COMP, comp())
        assert st == 200, j
    # Every stalled connection is closed by the server within the timeout (+ slack).
    for s in slow + [body_stall]:
        s.settimeout(max(1.0, 10.0 - (time.monotonic() - t0)))
        try:
            rest = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            rest = b""
        assert rest == b"" or status_of(rest) is None or status_of(rest) >= 400
        s.close()
    assert time.monotonic() - t0 < 10.0


def test_queued_longer_than_timeout(srv):
    """Requests that wait in the queue for longer than --timeout (2 s) are still answered:
    waiting for a slot is not idleness."""
    from test_concurrency import open_stream, stream_chat, wait_for
    import threading
    hogs = [open_stream(srv.port, srv.headers(), N_CTX - 20) for _ in range(2)]
    out = {}
    waiting = [
        threading.Thread(target=lambda: out.__setitem__("stream", stream_chat(srv, "hi", 4))),
        threading.Thread(target=lambda: out.__setitem__("plain", srv.json("POST", COMP, comp(
            max_tokens=4))))]
    for t in waiting:
        t.start()
    assert wait_for(lambda: srv.health()["queued"] == 2)
    time.sleep(3.0)
    busy = srv.health()
    for h in hogs:
        h.close()
    for t in waiting:
        t.join(60)
    assert busy["slots_busy"] == 2 and busy["queued"] == 2, busy
    text, finish = out["stream"]
    assert text and finish in ("stop", "length")
    st, j = out["plain"]
    assert st == 200 and j["choices"][0]["finish_reason"] in ("stop", "length"), j


def test_still_serving(srv):
    st, j = srv.json("POST", CHAT, chat(max_tokens=3, temperature=0))
    assert st == 200 and j["choices"][0]["message"]["content"], j
    h = srv.wait_idle()
    assert h["slots_busy"] == 0 and h["queued"] == 0
