"""The dashboard in a real headless Chromium (Selenium): a run appears and its cost rises while it is written.

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them with apt when missing).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from cheaptune.runs.registry import Registry
from cheaptune.ui.app import create_app

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1280,1600")
WAIT_S = 30


@pytest.fixture
def server(registry, plans):
    """The app served by uvicorn on a free local port, in a thread."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(create_app(registry, [plans]), host="127.0.0.1", port=port, log_level="warning",
                                       ws="none"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture
def browser(tmp_path):
    assert CHROMIUM.exists() and DRIVER.exists(), "install Debian's chromium and chromium-driver (apt-get)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=opts)
    yield driver
    driver.quit()


def _trainer(registry: Path, stop: threading.Event) -> None:
    """Writes a run the way the guard does: points, segment cost, steps, until told to stop."""
    run = Registry(registry).start_run(name="live-run", model="tiny", method="lora", gpu="A100-80GB",
                                       provider="runpod", budget_usd=2.0, cost_predicted_usd=1.0)
    step = 0
    while not stop.is_set() and step < 400:
        step += 1
        cost = 0.01 * step
        run.record_point(step, loss=3.0 / step, elapsed_s=30.0 * step, cost_usd=cost)
        run.add_segment_cost(cost)
        run.update(steps=step, tokens_per_s=1000.0 + step)
        time.sleep(0.2)
    run.finish("finished")


def _spent(driver) -> float | None:
    cells = driver.find_elements(By.XPATH, "//tr[td/a[text()='live-run']]/td")
    return float(cells[6].text.lstrip("$")) if cells else None  # checkbox, name, status, method, GPU, provider, $


@pytest.mark.timeout(120)
def test_live_run_appears_cost_rises_and_run_page_draws(server, browser, registry, tmp_path):
    # live updates replace the rows and cards: an element read as it is swapped is stale, so poll again
    wait = WebDriverWait(browser, WAIT_S, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,))
    browser.get(f"{server}/runs")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-body tr"))
    assert _spent(browser) is None  # not started yet
    stop = threading.Event()
    writer = threading.Thread(target=_trainer, args=(registry, stop), daemon=True)
    writer.start()
    try:
        first = wait.until(_spent)  # the row appears without a reload
        wait.until(lambda d: (_spent(d) or 0) > first)  # and its cost rises
        browser.find_element(By.LINK_TEXT, "live-run").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#loss-chart .main-svg"))  # Plotly drew it
        before = wait.until(lambda d: float(d.find_element(By.CSS_SELECTOR, '[data-money="spent"]').text.lstrip("$")))
        wait.until(lambda d: float(d.find_element(By.CSS_SELECTOR, '[data-money="spent"]').text.lstrip("$")) > before)
        assert browser.find_element(By.ID, "status").text == "running"
        points = browser.execute_script(
            "return document.getElementById('cost-chart').data[0].y.length")
        assert points >= 2
        assert browser.find_element(By.CSS_SELECTOR, '[data-money="budget"]').text == "$2.00"
        shot = tmp_path / "run_page.png"
        assert browser.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    finally:
        stop.set()
        writer.join(10)
    wait.until(lambda d: d.find_element(By.ID, "status").text == "finished")  # polling sees the end too
