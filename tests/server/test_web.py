"""The chat page in headless Chromium (Debian's chromium + chromium-driver, driven by
selenium with the system chromedriver: nothing is downloaded). Skips only when Chromium
or its driver is not installed, and fails instead with PI_REQUIRE_ALL=1 (tools/test.sh);
tools/setup.sh installs both."""

import os
import shutil
import tempfile
import time

import pytest

from conftest import API_KEY, import_or_skip, skip_unless_required

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
              f"--user-data-dir={profile}"):
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
