"""What a hostile web page or a hostile client can do to a server on localhost.

- CORS: no Access-Control-* header unless --cors-origin names the request's Origin; a
  preflight from any other origin is refused (403).
- DNS rebinding: a Host that is not a name of this server is refused (403).
- Bodies must be declared application/json (415 otherwise: text/plain and forms need no
  preflight, so a page on any origin could send them).
- Slow clients: the request head must be complete within --header-timeout, the body
  within --read-timeout, however slowly the bytes keep coming (libmicrohttpd's --timeout
  restarts with every byte); a stream whose client does not read is cut past
  --max-stream-buffer and its slot freed.
- A NUL (\\u0000) inside a string is refused with 400 naming the field, not cut short;
  a raw control byte (0x00-0x1f but tab, LF, CR) anywhere in the body is refused with 400
  naming its offset; %00 in the URL stays as written (no route matches) instead of
  ending the path.
- A head with two Host headers, or Content-Length headers that differ, is refused (400,
  then the connection closed); a Transfer-Encoding other than chunked gets 501 at once.
- --api-key-file takes the whole first line as the key (up to 16 KiB), never a part.

Raw sockets on 127.0.0.1 only; every loop is bounded in time."""

import json
import os
import socket
import subprocess
import threading
import time

import pytest

from conftest import API_KEY, Server, model_path, raw_exchange, server_binary, status_of

CHAT, COMP = "/v1/chat/completions", "/v1/completions"
HEAD_S, READ_S = 2, 3
ORIGIN = "http://127.0.0.1:9"  # allowed by the module's server; never contacted
OTHER = "http://evil.example"


@pytest.fixture(scope="module")
def srv():
    s = Server("--parallel", 2, "--queue", 4, "-c", 2048, "-n", 8, "--max-connections", 4,
               "--header-timeout", HEAD_S, "--read-timeout", READ_S, "--timeout", 30,
               "--max-stream-buffer", 4096, "--cors-origin", ORIGIN,
               "--cors-origin", "http://localhost:5173", "--host-allow", "pi.internal")
    yield s
    s.finish()


def head(method, path, host=b"127.0.0.1", extra=b"", body=b"", version=b"HTTP/1.1",
         ctype=b"application/json"):
    h = method + b" " + path + b" " + version + b"\r\n"
    if host is not None:
        h += b"Host: " + host + b"\r\n"
    h += b"Authorization: Bearer " + API_KEY.encode() + b"\r\n"
    if ctype:
        h += b"Content-Type: " + ctype + b"\r\n"
    if body or method == b"POST":
        h += b"Content-Length: %d\r\n" % len(body)
    return h + b"Connection: close\r\n" + extra + b"\r\n" + body


def answer(raw):
    """(status, header dict with lower-case names, body bytes) of a raw response."""
    top, _, body = raw.partition(b"\r\n\r\n")
    lines = top.split(b"\r\n")
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        hdrs[k.strip().lower().decode()] = v.strip().decode()
    return status_of(raw), hdrs, body


# ---- CORS ---------------------------------------------------------------------------

def test_no_cors_headers_by_default(server):
    """The shared server has no --cors-origin: no answer carries Access-Control-*, whatever
    the Origin, and a preflight is refused."""
    for method, path, body in (("GET", "/health", None), ("GET", "/v1/models", None),
                               ("GET", "/metrics", None), ("GET", "/", None),
                               ("POST", COMP, {"prompt": "hi", "max_tokens": 1}),
                               ("GET", "/nope", None)):
        for origin in (None, OTHER, "null", server.url):
            extra = {"Origin": origin} if origin else {}
            st, hdrs, data = server.request(method, path, body, headers=extra)
            assert st in (200, 404), data[:200]
            assert not [k for k in hdrs if k.startswith("access-control-")], (method, path, hdrs)
    st, hdrs, data = server.request("OPTIONS", CHAT, headers={
        "Origin": OTHER, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert st == 403, data
    assert json.loads(data)["error"]["code"] == "origin_not_allowed"
    assert not [k for k in hdrs if k.startswith("access-control-")], hdrs


def test_cors_origin_is_echoed_only_for_itself(srv):
    st, hdrs, _ = srv.request("GET", "/v1/models", headers={"Origin": ORIGIN})
    assert st == 200
    assert hdrs.get("access-control-allow-origin") == ORIGIN
    assert "origin" in hdrs.get("vary", "").lower()
    st, hdrs, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://localhost:5173"})
    assert hdrs.get("access-control-allow-origin") == "http://localhost:5173"
    # an origin that only looks like an allowed one gets nothing
    for other in (OTHER, ORIGIN + "0", ORIGIN.upper(), ORIGIN + "/", "null",
                  "http://127.0.0.1:9.evil.example"):
        st, hdrs, _ = srv.request("GET", "/v1/models", headers={"Origin": other})
        assert st == 200
        assert "access-control-allow-origin" not in hdrs, (other, hdrs)
        assert "origin" in hdrs.get("vary", "").lower()  # caches must keep them apart
    # preflights: the allowed origin gets the methods and headers, another one 403
    pre = {"Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type"}
    st, hdrs, _ = srv.request("OPTIONS", CHAT, headers=dict(pre, Origin=ORIGIN))
    assert st == 204
    assert hdrs["access-control-allow-origin"] == ORIGIN
    assert "POST" in hdrs["access-control-allow-methods"]
    assert "authorization" in hdrs["access-control-allow-headers"].lower()
    # the headers a client library adds are allowed too; anything odd is not echoed
    st, hdrs, _ = srv.request("OPTIONS", CHAT, headers=dict(
        pre, Origin=ORIGIN, **{"Access-Control-Request-Headers": "content-type, x-stainless-os"}))
    assert st == 204 and "x-stainless-os" in hdrs["access-control-allow-headers"], hdrs
    st, hdrs, _ = srv.request("OPTIONS", CHAT, headers=dict(
        pre, Origin=ORIGIN, **{"Access-Control-Request-Headers": "x-a\tb;c"}))
    assert st == 204 and hdrs["access-control-allow-headers"] == "Authorization, Content-Type"
    st, hdrs, data = srv.request("OPTIONS", CHAT, headers=dict(pre, Origin=OTHER))
    assert st == 403 and json.loads(data)["error"]["code"] == "origin_not_allowed"
    assert not [k for k in hdrs if k.startswith("access-control-")], hdrs


# ---- Host (DNS rebinding) -------------------------------------------------------------

HOSTS = [  # (Host header or None for none, HTTP version, status)
    (b"127.0.0.1", b"HTTP/1.1", 200),
    (b"127.0.0.1:8080", b"HTTP/1.1", 200),
    (b"localhost", b"HTTP/1.1", 200),
    (b"LocalHost:1", b"HTTP/1.1", 200),
    (b"[::1]", b"HTTP/1.1", 200),
    (b"[::1]:80", b"HTTP/1.1", 200),
    (b"pi.internal:8080", b"HTTP/1.1", 200),  # --host-allow
    (b"PI.INTERNAL", b"HTTP/1.1", 200),
    (b"evil.example", b"HTTP/1.1", 403),
    (b"evil.example:8080", b"HTTP/1.1", 403),
    (b"localhost.evil.example", b"HTTP/1.1", 403),
    (b"127.0.0.1.nip.io", b"HTTP/1.1", 403),
    (b"pi.internal.evil", b"HTTP/1.1", 403),
    (b"192.168.1.7", b"HTTP/1.1", 403),  # bound to 127.0.0.1: not one of its addresses
    (b"::1", b"HTTP/1.1", 403),  # an IPv6 address must be in brackets
    (b"[::1", b"HTTP/1.1", 403),
    (b"localhost:80x", b"HTTP/1.1", 403),
    (b"local host", b"HTTP/1.1", 403),
    (b"user@localhost", b"HTTP/1.1", 403),
    (b"", b"HTTP/1.1", 403),
    (None, b"HTTP/1.1", 400),  # RFC 9112: HTTP/1.1 requires Host
    (None, b"HTTP/1.0", 200),  # no browser sends a request without Host
]


@pytest.mark.parametrize("host,version,status", HOSTS,
                         ids=[repr(h) + " " + v.decode() for h, v, _ in HOSTS])
def test_host_header(srv, host, version, status):
    for method, path, body in ((b"GET", b"/v1/models", b""), (b"GET", b"/", b""),
                               (b"POST", b"/tokenize", b'{"content": "hi"}'),
                               (b"OPTIONS", CHAT.encode(), b"")):
        out = raw_exchange(srv.port, head(method, path, host, body=body, version=version))
        st, hdrs, data = answer(out)
        want = 204 if status == 200 and method == b"OPTIONS" else status
        assert st == want, (method, path, out[:300])
        if st >= 400:
            err = json.loads(data)["error"]
            assert err["code"] == ("host_not_allowed" if st == 403 else "missing_host"), err
    assert srv.health()["status"] == "ok"


def test_host_rebinding_cannot_start_a_completion(srv):
    before = srv.health()["requests"]
    body = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
    out = raw_exchange(srv.port, head(b"POST", COMP.encode(), b"attacker.example:8080",
                                      body=body, extra=b"Origin: http://attacker.example:8080\r\n"))
    assert status_of(out) == 403, out[:300]
    assert srv.health()["requests"] == before


# ---- Content-Type -------------------------------------------------------------------

CTYPES = [  # (Content-Type or None, status)
    (b"application/json", 200),
    (b"application/json; charset=utf-8", 200),
    (b"Application/JSON;charset=UTF-8", 200),
    (b" application/json ", 200),
    (b"text/plain", 415),
    (b"text/plain;charset=UTF-8", 415),
    (b"application/x-www-form-urlencoded", 415),
    (b"multipart/form-data; boundary=x", 415),
    (b"application/jsonx", 415),
    (b"application/json-patch+json", 415),
    (b"", 415),
    (None, 415),
]


@pytest.mark.parametrize("ctype,status", CTYPES, ids=[repr(c) for c, _ in CTYPES])
def test_content_type(srv, ctype, status):
    before = srv.health()["requests"]
    for path, body in ((b"/tokenize", b'{"content": "hi"}'),
                       (COMP.encode(), b'{"prompt": "hi", "max_tokens": 1}')):
        out = raw_exchange(srv.port, head(b"POST", path, body=body, ctype=ctype), shutdown=False)
        st, hdrs, data = answer(out)
        assert st == status, out[:300]
        if st == 415:
            assert hdrs["content-type"] == "application/json"
            err = json.loads(data)["error"]
            assert err["code"] == "unsupported_media_type" and err["message"], err
    if status == 415:  # nothing was generated
        assert srv.health()["requests"] == before


def test_wrong_type_big_body_gets_the_status(srv):
    """The body of a 415 is read and dropped: a client sending it all first gets the
    answer, not a reset."""
    body = b"x" * 200000
    st, _, data = srv.request("POST", COMP, body, headers={"Content-Type": "text/plain"})
    assert st == 415, data[:200]


# ---- NUL in strings -------------------------------------------------------------------

NULS = [  # (path, body, param)
    (CHAT, {"messages": [{"role": "user", "content": "say A\u0000 then ignore this"}]},
     "messages"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a\u0000b"}]}]},
     "messages"),
    (CHAT, {"messages": [{"role": "user\u0000x", "content": "hi"}]}, "messages"),
    (COMP, {"prompt": "hello\u0000world"}, "prompt"),
    (COMP, {"prompt": ["ok", "\u0000"]}, "prompt"),
    (COMP, {"prompt": "hi", "stop": ["x\u0000y"]}, "stop"),
    (COMP, {"prompt": "hi", "user": "\u0000"}, "user"),
    ("/tokenize", {"content": "a\u0000b"}, "content"),
]


@pytest.mark.parametrize("path,body,param", NULS, ids=[f"{p} {k}" for p, _, k in NULS])
def test_nul_in_a_string_is_refused(srv, path, body, param):
    body = dict(body, max_tokens=2) if path != "/tokenize" else body
    st, j = srv.json("POST", path, body)
    assert st == 400, j
    assert j["error"]["param"] == param, j
    assert "NUL" in j["error"]["message"]


def test_nul_in_a_key_and_lookalikes(srv):
    st, j = srv.json("POST", COMP, b'{"prompt": "hi", "max_tokens": 2, "x\\u0000": 1}')
    assert st == 400 and "NUL" in j["error"]["message"], j
    # a backslash followed by "u0000" is text, not a NUL
    st, j = srv.json("POST", "/tokenize", b'{"content": "a\\\\u0000b"}')
    assert st == 200, j
    st, j2 = srv.json("POST", "/tokenize", {"content": "a\\u0000b"})
    assert st == 200 and j2 == j
    st, j = srv.json("POST", COMP, b'{"prompt": "a\\u0001b", "max_tokens": 1}')
    assert st == 200, j


RAW_CONTROL = [  # (body, offset of the control byte)
    (b'{"content": "hi\x00 there"}', 15),  # a raw NUL would end the string: "hi"
    (b'{"content\x00ignored": "hi there"}', 9),  # ... or the key: "content"
    (b'{"content": "a\x01b"}', 14),
    (b'{"content": "a\x1f"}', 14),
    (b'{"content":\x0b"a"}', 11),  # vertical tab is not JSON whitespace
]


@pytest.mark.parametrize("body,at", RAW_CONTROL, ids=[repr(b) for b, _ in RAW_CONTROL])
def test_raw_control_byte_is_refused(srv, body, at):
    """cJSON accepts raw control bytes, and a raw NUL cuts its string or key short (the
    \\u0000 escape is refused by name): the body is refused before it is parsed."""
    out = raw_exchange(srv.port, head(b"POST", b"/tokenize", body=body))
    st, hdrs, data = answer(out)
    assert st == 400, out[:300]
    err = json.loads(data)["error"]
    assert err["code"] == "invalid_json", err
    assert f"0x{body[at]:02x} at byte {at}" in err["message"], err


def test_raw_control_byte_in_a_key_does_not_set_the_field(srv):
    """The reported case: "max_tokens<NUL>zzz" was read as max_tokens."""
    before = srv.health()["requests"]
    body = b'{"prompt": "Once upon", "max_tokens\x00zzz": 1, "temperature": 0}'
    st, hdrs, data = answer(raw_exchange(srv.port, head(b"POST", COMP.encode(), body=body)))
    assert st == 400 and "0x00 at byte 35" in json.loads(data)["error"]["message"], data
    assert srv.health()["requests"] == before


def test_whitespace_between_tokens_still_works(srv):
    """Tab, LF and CR are JSON whitespace: still accepted between tokens."""
    st, j = srv.json("POST", "/tokenize", {"content": "hi there"})
    assert st == 200, j
    body = b'\r\n{\n\t"content"\t:\r\n  "hi there"\n}\n'
    st, hdrs, data = answer(raw_exchange(srv.port, head(b"POST", b"/tokenize", body=body)))
    assert st == 200, data
    assert json.loads(data) == j


@pytest.mark.parametrize("path,status", [
    ("/health%00x", 404), ("/health%00", 404), ("/v1/models%00/x", 404),
    ("/v1/chat/completions%00", 404), ("/%68ealth", 200), ("/health%20", 404),
])
def test_nul_in_the_path(srv, path, status):
    """%00 in the URL is not decoded to a NUL that would end the path early (and answer
    /health for /health%00x); other escapes still are."""
    st, _, data = srv.request("GET", path)
    assert st == status, data[:200]
    if st == 404:
        assert json.loads(data)["error"]["code"] == "unknown_url"


# ---- duplicate headers, transfer codings ------------------------------------------------

TOK = b'{"content": "a"}'  # 16 bytes

DUPLICATES = [  # (the head's lines between the request line and Connection, body)
    (b"Host: evil.example\r\nHost: 127.0.0.1\r\n", b""),
    (b"Host: 127.0.0.1\r\nHost: evil.example\r\n", b""),
    (b"Host: 127.0.0.1\r\nHost: 127.0.0.1\r\n", b""),
    (b"Host: 127.0.0.1\r\nhost: 127.0.0.1:8080\r\n", b""),
    (b"Host: 127.0.0.1\r\nContent-Length: 16\r\nContent-Length: 3\r\n", TOK),
    (b"Host: 127.0.0.1\r\nContent-Length: 3\r\ncontent-length: 16\r\n", TOK),
]


@pytest.mark.parametrize("lines,body", DUPLICATES, ids=[repr(d) for d, _ in DUPLICATES])
def test_duplicate_headers_are_refused(srv, lines, body):
    """RFC 9112: two Host headers are a 400; Content-Length headers that differ leave the
    body's end in doubt (request smuggling). Refused, and the connection closed: a second
    request on it is not answered."""
    before = srv.health()["requests"]
    req = (b"POST /tokenize HTTP/1.1\r\n" + lines + b"Authorization: Bearer " +
           API_KEY.encode() + b"\r\nContent-Type: application/json\r\n" +
           (b"" if body else b"Content-Length: 16\r\n") + b"\r\n" + TOK)
    nxt = head(b"GET", b"/health")
    t0 = time.monotonic()
    out = raw_exchange(srv.port, req + nxt, shutdown=False, timeout=READ_S + 2)
    assert time.monotonic() - t0 < READ_S, "no answer until --read-timeout"
    st, hdrs, data = answer(out)
    assert st == 400, out[:300]
    assert hdrs.get("connection", "").lower() == "close", hdrs
    assert json.loads(data)["error"]["code"] == "duplicate_header", data
    assert out.count(b"HTTP/1.1 ") == 1, out
    assert srv.health()["requests"] == before


def test_unknown_transfer_coding_is_answered_at_once(srv):
    """libmicrohttpd decodes only chunked; with gzip it would read until the client
    closes, so the client waited for --read-timeout. Now 501 at once."""
    def coded(coding, body):
        return head(b"POST", b"/tokenize", extra=b"Transfer-Encoding: " + coding + b"\r\n"
                    ).replace(b"Content-Length: 0\r\n", b"") + body

    t0 = time.monotonic()
    out = raw_exchange(srv.port, coded(b"gzip", TOK), shutdown=False, timeout=READ_S + 2)
    assert time.monotonic() - t0 < READ_S, "no answer until --read-timeout"
    st, hdrs, data = answer(out)
    assert st == 501, out[:300]
    assert json.loads(data)["error"]["code"] == "unsupported_transfer_encoding", data
    # chunked still works
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(TOK), TOK)
    out = raw_exchange(srv.port, coded(b"chunked", body))
    assert status_of(out) == 200, out[:300]


# ---- --api-key-file ---------------------------------------------------------------------

def test_long_api_key_file_is_used_whole(tmp_path):
    """A 1500-byte key was cut at 1023 bytes: the full key got 401, its first 1023 bytes
    200. Now the whole line is the key."""
    key = "k" * 1000 + "".join(chr(ord("a") + i % 26) for i in range(500))
    path = tmp_path / "key.txt"
    path.write_text(key + "\n")
    s = Server("--parallel", 1, "-c", 256, "--api-key-file", path, api_key=None)
    try:
        s.api_key = key
        st, _, data = s.request("GET", "/v1/models")
        assert st == 200, data[:200]
        for wrong in (key[:1023], key[:-1], key + "x"):
            s.api_key = wrong
            st, _, data = s.request("GET", "/v1/models")
            assert st == 401, (len(wrong), data[:200])
    finally:
        s.finish()


def test_too_long_api_key_file_is_refused(tmp_path):
    path = tmp_path / "key.txt"
    for key, why in (("k" * (16 * 1024 + 1), "longer than 16384 bytes"),
                     ("abc\0def", "holds a NUL byte")):
        path.write_bytes(key.encode() + b"\n")
        p = subprocess.run([server_binary(), "-m", model_path(), "--port", "0",
                            "--api-key-file", str(path)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2, (p.returncode, p.stderr[-500:])
        assert why in p.stderr and os.fspath(path) in p.stderr, p.stderr[-500:]
    path.write_bytes(b"k" * (16 * 1024) + b"\r\n")  # the most it takes
    s = Server("--parallel", 1, "-c", 256, "--api-key-file", path, api_key=None)
    s.finish()


# ---- slow clients ---------------------------------------------------------------------

def trickle(port, first, byte, every, stop_at, closed_at, i):
    """Send `first`, then `byte` every `every` seconds until the server closes the
    connection or stop_at (monotonic); records when it closed in closed_at[i]."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(first)
        s.settimeout(every)
        while time.monotonic() < stop_at:
            try:
                if s.recv(4096) == b"":
                    break
            except socket.timeout:
                pass
            except OSError:
                break
            try:
                s.sendall(byte)
            except OSError:
                break
        else:
            return
        closed_at[i] = time.monotonic()
    finally:
        s.close()


def attack(srv, first, n=4, every=0.5, budget=12.0):
    """n connections trickling a request (one byte every `every` s); returns (start, the
    times they were closed (None: still open at the end), threads)."""
    t0 = time.monotonic()
    closed = [None] * n
    threads = [threading.Thread(target=trickle, args=(srv.port, first, b"X", every,
                                                      t0 + budget, closed, i))
               for i in range(n)]
    for t in threads:
        t.start()
    return t0, closed, threads


def test_trickled_heads_are_dropped_and_new_clients_served(srv):
    """The reported attack: --max-connections 4 held by 4 sockets sending a byte every
    0.5 s (each byte restarts libmicrohttpd's idle --timeout, 30 s here). The head
    deadline (2 s) drops them, and new clients are served."""
    t0, closed, threads = attack(srv, b"GET /health HTTP/1.1\r\nX-Slow: ")
    time.sleep(0.5)
    served_at = None
    while time.monotonic() < t0 + 10.0 and served_at is None:
        try:
            st, _, _ = srv.request("GET", "/health", key=False, timeout=2)
            if st == 200:
                served_at = time.monotonic()
        except OSError:
            time.sleep(0.1)  # refused: every connection is taken
    for t in threads:
        t.join(15)
    assert all(c is not None for c in closed), "trickling connections still open after 12 s"
    late = max(c - t0 for c in closed)
    print(f"\n  head deadline {HEAD_S} s: trickling connections closed after "
          f"{min(c - t0 for c in closed):.2f}-{late:.2f} s; a new client served after "
          f"{served_at - t0 if served_at else float('nan'):.2f} s")
    assert late < HEAD_S + 1.5, closed
    assert served_at is not None and served_at - t0 < HEAD_S + 2.0


def test_trickled_body_is_dropped(srv):
    body_head = (b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                 API_KEY.encode() + b"\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000\r\n\r\n{\"content\": \"")
    t0, closed, threads = attack(srv, body_head, n=2)
    for t in threads:
        t.join(15)
    assert all(c is not None for c in closed), "trickling bodies still open after 12 s"
    late = max(c - t0 for c in closed)
    print(f"\n  read deadline {READ_S} s: trickling bodies closed after {late:.2f} s")
    assert READ_S - 0.5 < late < READ_S + 1.5, closed
    assert srv.health()["status"] == "ok"


def test_keepalive_is_not_cut_mid_request(srv):
    """Requests on one keep-alive connection, each well within the deadlines, all pass
    even when the connection lives longer than the deadlines."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < HEAD_S + READ_S + 1:
            conn.request("POST", "/tokenize", body=b'{"content": "hi"}', headers=srv.headers())
            r = conn.getresponse()
            assert r.status == 200, r.read()
            r.read()
            time.sleep(0.3)
    finally:
        conn.close()


def test_unread_stream_is_cut_and_its_slot_freed(srv):
    """A client that sends a streaming request and never reads: once what the job made
    and could not send passes --max-stream-buffer (4 KiB here), the stream is cut and its
    slot is free, long before max_tokens."""
    before = srv.wait_idle()
    assert before["slots_busy"] == 0
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    s.settimeout(10)
    s.connect(("127.0.0.1", srv.port))
    body = json.dumps({"prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 900, "stream": True,
                       "temperature": 0, "logprobs": 20}).encode()
    t0 = time.monotonic()
    s.sendall(head(b"POST", COMP.encode(), body=body))
    try:
        busy_seen, freed_at = False, None
        while time.monotonic() < t0 + 60:
            h = srv.health()
            busy_seen = busy_seen or h["slots_busy"] == 1
            if busy_seen and h["slots_busy"] == 0:
                freed_at = time.monotonic()
                break
            time.sleep(0.1)
        generated = srv.health()["tokens_generated"] - before["tokens_generated"]
        assert busy_seen and freed_at is not None, srv.health()
        print(f"\n  unread stream cut, slot free after {freed_at - t0:.2f} s and {generated} "
              "of 900 tokens")
        # what arrived ends without [DONE]: the stream was cut, not finished
        s.settimeout(5)
        got = b""
        try:
            while len(got) < 64 << 20:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        assert b"data: [DONE]" not in got
        assert b'"finish_reason":"length"' not in got
    finally:
        s.close()
    # the server is free for others
    st, j = srv.json("POST", COMP, {"prompt": "hi", "max_tokens": 2})
    assert st == 200, j
    assert generated < 900, generated


def test_reading_stream_is_not_cut(srv):
    """A client that reads gets its whole stream, longer than the cap."""
    import http.client
    from conftest import sse_events
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        conn.request("POST", COMP, body=json.dumps({
            "prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 200, "stream": True,
            "temperature": 0, "logprobs": 20}), headers=srv.headers())
        r = conn.getresponse()
        assert r.status == 200
        finish = None
        for _, ev in sse_events(r):
            if ev.get("choices"):
                finish = ev["choices"][0]["finish_reason"] or finish
        assert finish == "length", finish
    finally:
        conn.close()


def test_chat_format_names():
    # every PI_CHAT_* name is taken (the library renders it: SmolLM2's ChatML tokens
    # are plain text to another format, so a chat request still answers), and an
    # unknown one exits 2 naming the choices
    for name in ("gemma", "mistral-v7"):
        s = Server("--parallel", 1, "-c", 256, "--chat-format", name)
        try:
            st, j = s.json("POST", "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
            assert st == 200, j
        finally:
            s.finish()
    p = subprocess.run([server_binary(), "-m", model_path(), "--port", "0",
                        "--chat-format", "gemma4"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "mistral-v3-tekken" in p.stderr, (p.returncode, p.stderr)
