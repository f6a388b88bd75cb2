"""Shared pieces of the pi-server tests: start a server on a free port, talk HTTP to it.

    PI_SERVER=build/tools/pi-server/pi-server python3 -m pytest tests/server -q -rs

Needs pi-server (PI_SERVER, else build/tools/pi-server/pi-server) and the real model
SmolLM2-135M-Instruct (PI_SMOLLM2, else tools/smollm2_path.py). Without the model the
tests skip, with the reason in the summary (-rs); with PI_REQUIRE_SMOLLM2=1 (tools/test.sh)
they fail instead. All traffic stays on 127.0.0.1, every loop is bounded.

Each server is stopped with SIGTERM at the end and must exit 0: under ASan/UBSan (the
build-asan run of test_malformed.py) a memory error or a leak makes that exit non-zero."""

import http.client
import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import smollm2_path as smollm2_lookup  # noqa: E402

API_KEY = "test-key-1234"
# tools/test.sh sets PI_REQUIRE_ALL=1: there a missing package or browser fails the test.
REQUIRE_ALL = os.environ.get("PI_REQUIRE_ALL") == "1"


def skip_unless_required(reason):
    """pytest.skip(reason), or a failure when PI_REQUIRE_ALL=1, so that CI cannot pass
    with a suite that did not run."""
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (PI_REQUIRE_ALL=1)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def import_or_skip(module, reason):
    """pytest.importorskip, failing instead when PI_REQUIRE_ALL=1."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        skip_unless_required(f"cannot import {module} ({e}): {reason}")


def server_binary():
    path = os.environ.get("PI_SERVER") or os.path.join(ROOT, "build", "tools", "pi-server",
                                                       "pi-server")
    if not os.path.isfile(path):
        pytest.fail(f"pi-server not found at {path}: build it (meson compile -C build) or set "
                    "PI_SERVER", pytrace=False)
    return path


def model_path():
    return smollm2_lookup.for_tests()


class Server:
    """A pi-server process on 127.0.0.1 and a free port."""

    def __init__(self, *args, api_key=API_KEY, startup_s=120):
        self.api_key = api_key
        self.log = tempfile.NamedTemporaryFile(prefix="pi-server-", suffix=".log", delete=False)
        cmd = [server_binary(), "-m", model_path(), "--host", "127.0.0.1", "--port", "0"]
        if api_key:
            cmd += ["--api-key", api_key]
        cmd += [str(a) for a in args]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + startup_s
        self.port = None
        while time.monotonic() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.stderr())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"pi-server did not start: {' '.join(cmd)}\n{self.stderr()}",
                        pytrace=False)
        self.url = f"http://127.0.0.1:{self.port}"

    def stderr(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def headers(self, extra=None, key=True):
        h = {"Content-Type": "application/json"}
        if key and self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, headers=None, key=True, timeout=120):
        """(status, headers dict with lower-case names, body bytes)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=self.headers(headers, key))
            r = conn.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            conn.close()

    def json(self, method, path, body=None, **kw):
        status, _, data = self.request(method, path, body, **kw)
        return status, json.loads(data) if data else None

    def health(self):
        status, j = self.json("GET", "/health", key=False)
        assert status == 200, j
        return j

    def wait_idle(self, timeout=10.0):
        """Wait until every slot is idle and nothing is queued; the last health."""
        deadline = time.monotonic() + timeout
        while True:
            h = self.health()
            if (h["slots_busy"] == 0 and h["queued"] == 0) or time.monotonic() > deadline:
                return h
            time.sleep(0.05)

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, timeout=60):
        """SIGTERM, wait, and return the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "did not stop within %ds" % timeout
        rc = self.proc.returncode
        self.log.close()
        return rc

    def finish(self):
        """Stop and require a clean exit (under ASan: no error, no leak)."""
        rc = self.stop()
        log = self.stderr()
        if rc == 0:
            os.unlink(self.log.name)
        assert rc == 0, f"pi-server exited with {rc} (log: {self.log.name}):\n{log[-6000:]}"


def sse_events(resp):
    """The parsed `data:` objects of a server-sent-event response (http.client), until
    [DONE]; yields (time.monotonic(), object)."""
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            return
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    data = line[6:]
                    if data == b"[DONE]":
                        return
                    yield time.monotonic(), json.loads(data)


def raw_exchange(port, data, timeout=10.0, shutdown=True):
    """Send bytes on a fresh connection, read until the server closes it or `timeout`;
    returns what came back."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
            if shutdown:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed early: read what it sent
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def status_of(raw):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else None


@pytest.fixture(scope="session")
def server():
    """The shared server: 8 slots, a queue of 16, an API key."""
    s = Server("--parallel", 8, "--queue", 16, "-c", 8 * 2048)
    yield s
    s.finish()
