"""The web page of `strata serve` in a real headless browser (Debian's chromium through chromedriver,
driven by selenium): crates/cli/tests/serve.rs starts the server with an API key and runs this. The page
loads without the key, asks for it, sends a message and shows the streamed reply, stops a long reply,
keeps the conversation over a reload, and its monitor shows the engine's figures.
Usage: serve_page.py BASE_URL API_KEY [SCREENSHOT_DIR]. Exits non-zero on any failure."""

import json
import sys
import tempfile
import threading
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BASE, KEY = sys.argv[1], sys.argv[2]
SHOTS = sys.argv[3] if len(sys.argv) > 3 else None

opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-dev-shm-usage", "--window-size=1200,800", "--user-data-dir=" + tempfile.mkdtemp()]:
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
wait = WebDriverWait(driver, 120)
el = lambda i: driver.find_element(By.ID, i)


def api(path, body):
    req = urllib.request.Request(BASE + path, json.dumps(body).encode(),
                                 {"content-type": "application/json", "authorization": "Bearer " + KEY})
    return json.load(urllib.request.urlopen(req))


def replies():
    return driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")


def send(text, temperature, max_tokens):
    for i, v in [("temperature", temperature), ("max-tokens", max_tokens)]:
        el(i).clear()
        el(i).send_keys(str(v))
    el("prompt").send_keys(text)
    el("send").click()


try:
    driver.get(BASE + "/")
    assert driver.title == "strata", driver.title
    # The page loads without the key; its first API call gets 401 and it asks for one.
    wait.until(lambda d: el("key-dialog").get_attribute("open") is not None)
    el("key").send_keys(KEY)
    el("key-save").click()
    wait.until(lambda d: el("model").text != "")
    send("Tell me a fortune.", 0, 40)
    # The reply streams in, then the Send button comes back.
    wait.until(lambda d: len(replies()) == 1 and el("send").is_displayed())
    shown = replies()[0].find_element(By.CLASS_NAME, "body").text
    want = api("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a fortune."}],
                                        "max_tokens": 40, "temperature": 0})["choices"][0]["message"]["content"]
    words = lambda s: " ".join(s.replace("*", "").replace("#", "").replace("`", "").split())
    assert words(shown) and words(shown) == words(want), f"page {shown!r} vs api {want!r}"
    print("ok   a message sent, the streamed reply shown (the API's greedy reply)", flush=True)
    if SHOTS:
        driver.save_screenshot(SHOTS + "/chat.png")

    # A reply stopped while the engine is busy with another client's long one (a small model's own
    # replies end too soon to stop): the page says so and the server never generates it (serve.rs counts
    # the generations in its log).
    busy = threading.Thread(target=api, args=("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Go on."}], "max_tokens": 2000, "temperature": 1, "ignore_eos": True}))
    busy.start()
    wait.until(lambda d: json.load(urllib.request.urlopen(urllib.request.Request(
        BASE + "/v1/status", headers={"authorization": "Bearer " + KEY})))["running"] is not None)
    send("Tell me a long story.", 1, 4000)
    wait.until(lambda d: len(replies()) == 2 and el("stop").is_displayed())
    el("stop").click()
    wait.until(lambda d: "(stopped)" in replies()[1].text and el("send").is_displayed())
    busy.join()
    print("ok   a reply stopped", flush=True)

    # The conversation is kept in the browser: a reload shows it again.
    driver.refresh()
    wait.until(lambda d: len(replies()) == 2)
    assert len(driver.find_elements(By.CSS_SELECTOR, "#conversations li")) == 1
    print("ok   the conversation kept over a reload", flush=True)

    # The monitor: the last reply's rates, the queue, the cache.
    el("tab-monitor").click()
    wait.until(lambda d: el("m-decode").text not in ("", "–") and el("m-queue").text != "–")
    assert float(el("m-decode").text) > 0 and float(el("m-prefill").text) > 0, el("m-decode").text
    assert el("m-cache").text.isdigit() and int(el("m-cache").text) >= 1, el("m-cache").text
    assert "cells of context" in el("m-about").text
    print(f"ok   the monitor: {el('m-decode').text} tok/s decode, {el('m-prefill').text} tok/s prefill, "
          f"{el('m-cache').text} cached", flush=True)
    if SHOTS:
        driver.save_screenshot(SHOTS + "/monitor.png")
    print("page: passed")
except Exception:
    print("FAIL; the page's console:", driver.get_log("browser") if hasattr(driver, "get_log") else "")
    raise
finally:
    driver.quit()
