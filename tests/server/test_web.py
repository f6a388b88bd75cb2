"""The chat page in headless Chromium (Debian's chromium + chromium-driver, driven by
selenium with the system chromedriver: nothing is downloaded). Skips only when Chromium
or its driver is not installed, and fails instead with PI_REQUIRE_ALL=1 (tools/test.sh);
tools/setup.sh installs both.

Also what a page of another origin can do: served by a small http.server on another
loopback port, it may not read any answer (nor start a completion with a text/plain
body) unless the server was started with --cors-origin naming it; and a page whose
name resolves to 127.0.0.1 (DNS rebinding, simulated with Chromium's
--host-resolver-rules) gets 403 for everything."""

import http.server
import json
import os
import shutil
import tempfile
import threading
import time

import pytest

from conftest import API_KEY, Server, import_or_skip, skip_unless_required

REBIND = "rebind.test"  # resolves to 127.0.0.1 in this browser only

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver"
                                          if os.path.exists("/usr/bin/chromedriver") else None)


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM or not DRIVER:
        skip_unless_required("chromium and chromium-driver are not installed (apt-get install "
                             "chromium chromium-driver; tools/setup.sh does)")
    webdriver = import_or_skip("selenium.webdriver", "pip install selenium (tools/setup.sh does)")
    from selenium.webdriver.chrome.service import Service
    # Selenium Manager must not look for (or download) a driver or a browser: both paths
    # are given, and it is told to stay offline.
    os.environ["SE_OFFLINE"] = "true"
    os.environ["SE_AVOID_STATS"] = "true"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="pi-server-chromium-")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--disable-extensions", "--window-size=1000,800",
              f"--host-resolver-rules=MAP {REBIND} 127.0.0.1", f"--user-data-dir={profile}"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()
    shutil.rmtree(profile, ignore_errors=True)


def test_chat_page_streams_an_answer(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    browser.get(server.url + "/")
    assert browser.title == "pi-server"
    # The page sends the key the user typed under Settings.
    browser.execute_script(
        "document.getElementById('api_key').value = arguments[0];"
        "document.getElementById('temperature').value = '0';"
        "document.getElementById('max_tokens').value = '48';", API_KEY)
    box = browser.find_element(By.ID, "input")
    box.send_keys("What are three tips for staying healthy?")
    browser.find_element(By.ID, "send").click()
    # Watch the answer grow: several distinct partial texts before it is done.
    seen, deadline = [], time.monotonic() + 90
    done = False
    while time.monotonic() < deadline and not done:
        answers = browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")
        if answers:
            done = answers[-1].get_attribute("data-done") == "1"
            text = answers[-1].find_element(By.CSS_SELECTOR, ".content").text
            if text and (not seen or seen[-1] != text):
                seen.append(text)
        time.sleep(0.01)
    answer = browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]
    browser.save_screenshot(os.environ.get("PI_SCREENSHOT", str(tmp_path / "chat.png")))
    assert done, "the answer did not finish"
    assert not answer.find_elements(By.CSS_SELECTOR, ".error"), answer.text
    final = answer.find_element(By.CSS_SELECTOR, ".content").text
    assert len(final) > 20
    assert int(answer.get_attribute("data-chunks")) > 5  # it arrived in pieces
    assert len(seen) >= 2 and all(final.startswith(s) for s in seen), seen
    # After the answer the page asked /v1/models again, now with the key.
    deadline = time.monotonic() + 10
    while "SmolLM2" not in browser.find_element(By.ID, "model").text:
        assert time.monotonic() < deadline, browser.find_element(By.ID, "model").text
        time.sleep(0.05)
    assert server.wait_idle()["slots_busy"] == 0


@pytest.fixture(scope="module")
def other_origin():
    """http://127.0.0.1:PORT: a page that is not pi-server's."""
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<!doctype html><title>other origin</title><p>another site"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


# Run in the page: the three ways a page reaches another origin's API. A GET (without a
# key no preflight), a JSON POST (preflighted), and a "simple" text/plain POST in
# no-cors mode (sent without asking; the page cannot read the answer, but the server
# would act on it).
PROBE = """
const [api, key, done] = arguments;
const out = {};
async function attempt(name, f) {
  try {
    const r = await f();
    out[name] = {status: r.status, type: r.type, body: (await r.text()).slice(0, 4000)};
  } catch (e) {
    out[name] = {error: String(e)};
  }
}
(async () => {
  const auth = key ? {"Authorization": "Bearer " + key} : {};
  await attempt("get", () => fetch(api + "/v1/models", {headers: auth}));
  const h = Object.assign({"Content-Type": "application/json"}, auth);
  await attempt("post", () => fetch(api + "/v1/chat/completions", {method: "POST", headers: h,
    body: JSON.stringify({messages: [{role: "user", content: "Say hi"}], max_tokens: 3})}));
  await attempt("simple", () => fetch(api + "/v1/completions", {method: "POST",
    mode: "no-cors", headers: {"Content-Type": "text/plain"},
    body: JSON.stringify({prompt: "hi", max_tokens: 3})}));
  done(out);
})();
"""


def probe(browser, page, api, key=None):
    browser.get(page)
    browser.set_script_timeout(60)
    return browser.execute_async_script(PROBE, api, key)


def test_other_origin_cannot_read(browser, other_origin):
    """The default (no --cors-origin, and no API key, as most users run it): the other
    origin's page reads nothing, and its no-cors POST starts no completion."""
    srv = Server("--parallel", 1, "-c", 512, api_key=None)
    try:
        before = srv.health()["requests"]
        out = probe(browser, other_origin + "/", srv.url)
        assert "error" in out["get"], out  # fetch() rejects: no CORS header
        assert "error" in out["post"], out  # the preflight was refused
        assert out["simple"].get("type") == "opaque", out
        time.sleep(0.5)
        assert srv.health()["requests"] == before, "a page of another origin started a job"
    finally:
        srv.finish()


def test_cors_origin_allows_that_origin(browser, other_origin):
    srv = Server("--parallel", 1, "-c", 512, "--cors-origin", other_origin)
    try:
        out = probe(browser, other_origin + "/", srv.url, API_KEY)
        assert out["get"].get("status") == 200 and "SmolLM2" in out["get"]["body"], out
        assert out["post"].get("status") == 200, out
        assert json.loads(out["post"]["body"])["choices"][0]["message"]["content"], out
        assert out["simple"].get("type") == "opaque", out  # still 415 on the server
    finally:
        srv.finish()


def test_dns_rebinding_page_is_refused(server, browser):
    """A page loaded as http://rebind.test:PORT/ (a name the attacker controls, now
    resolving to 127.0.0.1): the server refuses every request naming that host."""
    url = f"http://{REBIND}:{server.port}"
    browser.get(url + "/")
    assert "host_not_allowed" in browser.page_source
    out = browser.execute_async_script(PROBE, url, API_KEY)  # now same-origin requests
    for name in ("get", "post"):
        assert out[name].get("status") == 403, out
        assert json.loads(out[name]["body"])["error"]["code"] == "host_not_allowed", out
