"""The web console in a real headless browser: Debian's chromium driven by Selenium through Debian's chromedriver
(both given by path, so Selenium downloads nothing). One browser session serves every test here.

The store is filled as the engine would leave it (tests/support/console_world.py): a running job preempted once
and relaunched, spend rows, GPU samples. Checked: the fleet lists the running job; the spend plot renders bars
with their amounts; the job's timeline shows its relaunch after its preemption; the stop action marks a job for
teardown; a console bound to every interface (0.0.0.0) refuses requests without its token, and its login form
sets a cookie scripts cannot read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from orchestrator.console.server import RunningConsole, start_console
from orchestrator.console.settings import console_settings
from orchestrator.engine.states import DesiredState
from orchestrator.store import repo
from orchestrator.store.db import Store, open_store
from tests.support import console_world

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
TOKEN = "browser-test-token-0123456789abcdef"

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
    reason="Debian's chromium and chromedriver are not installed (apt-get install chromium chromium-driver; "
           "scripts/test.sh installs them)")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


@dataclass
class World:
    store: Store
    console: RunningConsole
    facts: console_world.ConsoleWorld

    def url(self, path: str = "/") -> str:
        return self.console.url.rstrip("/") + path


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1360,900", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    store = open_store(f"sqlite:///{tmp_path_factory.mktemp('console') / 'orch.db'}")
    facts = console_world.fill(store, datetime.now(UTC).replace(microsecond=0))
    console = start_console(store, console_settings("127.0.0.1:0", None))
    try:
        yield World(store, console, facts)
    finally:
        console.stop()
        store.close()


def _wait(browser: WebDriver, css: str) -> None:
    WebDriverWait(browser, 30).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))


def test_the_fleet_page_lists_the_running_job(browser: WebDriver, world: World) -> None:
    browser.get(world.url("/"))
    _wait(browser, "#fleet")
    assert browser.title.startswith("Fleet")
    row = browser.find_element(By.CSS_SELECTOR, f'tbody[data-job="{world.facts.running_job}"]')
    text = row.text
    assert "running" in text and "gcp" in text and "spot" in text and "us-central1-a" in text and "$2.05/h" in text
    spark = row.find_element(By.CSS_SELECTOR, "svg.spark polyline")
    assert len(spark.get_attribute("points").split()) >= 50 and spark.size["width"] > 50   # laid out, drawn
    others = {e.get_attribute("data-job") for e in browser.find_elements(By.CSS_SELECTOR, "tbody.job")}
    assert others == {"llama-ft", "bert-pretrain", "eval-sweep", "ablation-7"}


def test_the_spend_plot_renders_its_bars(browser: WebDriver, world: World) -> None:
    browser.get(world.url("/spend?range=24h"))
    _wait(browser, "svg.bars rect.bar")
    bars = browser.find_elements(By.CSS_SELECTOR, "svg.bars rect.bar")
    assert len(bars) >= 10
    drawn = [b for b in bars if b.size["height"] > 0 and b.size["width"] > 0]
    assert len(drawn) == len(bars)
    llama = sum(float(b.get_attribute("data-usd")) for b in bars[: len(bars) // 2]
                if b.get_attribute("data-series") == "llama-ft")
    legend = browser.find_element(By.XPATH, "//table[contains(@class,'legend-table')]//tr[.//a[text()='llama-ft']]")
    assert f"${llama:,.2f}" in legend.text     # the bars add up to the legend's total


def test_the_job_page_shows_the_relaunch_on_its_timeline(browser: WebDriver, world: World) -> None:
    browser.get(world.url(f"/jobs/{world.facts.running_job}"))
    _wait(browser, "svg.timeline")
    relaunch = browser.find_element(By.CSS_SELECTOR, "svg.timeline g.tl-relaunch")
    preemption = browser.find_element(By.CSS_SELECTOR, "svg.timeline g.tl-preemption")
    assert relaunch.is_displayed() and preemption.is_displayed()
    assert "relaunch 1" in relaunch.find_element(By.TAG_NAME, "title").get_attribute("textContent")
    assert relaunch.location["x"] >= preemption.location["x"]          # after the preemption, on the time axis
    assert relaunch.location["y"] > preemption.location["y"]           # on the next machine's lane
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.timeline .tl-checkpoint")) == 3


def test_the_stop_action_marks_the_job_for_teardown(browser: WebDriver, world: World) -> None:
    browser.get(world.url("/jobs/bert-pretrain"))
    _wait(browser, ".actions")
    browser.find_element(By.LINK_TEXT, "Stop…").click()
    _wait(browser, "#confirm")
    browser.find_element(By.ID, "confirm").click()
    WebDriverWait(browser, 30).until(expected_conditions.url_contains("done=stop"))
    assert "Marked for teardown" in browser.find_element(By.CSS_SELECTOR, "main").text
    with world.store.transaction() as tx:
        job = repo.get_job(tx, "bert-pretrain")
        assert job is not None and job.desired_state == DesiredState.DELETED.value
        other = repo.get_job(tx, world.facts.running_job)
        assert other is not None and other.desired_state == DesiredState.ACTIVE.value


def test_off_loopback_the_token_is_required_and_the_login_cookie_is_httponly(browser: WebDriver,
                                                                             world: World) -> None:
    public = start_console(world.store, console_settings("0.0.0.0:0", TOKEN))
    try:
        base = f"http://127.0.0.1:{public.port}"
        assert httpx.get(base + "/", timeout=30).status_code == 401
        assert httpx.get(base + "/jobs/llama-ft", headers={"Authorization": "Bearer " + "x" * 32},
                         timeout=30).status_code == 403
        assert httpx.get(base + "/", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).status_code == 200

        browser.get(base + "/budgets")
        _wait(browser, "input[name=token]")
        assert "llama-ft" not in browser.page_source
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        _wait(browser, "table.budgets")
        assert browser.current_url == base + "/budgets" and "llama-ft" in browser.page_source
        cookie = browser.get_cookie("orch_console")
        assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert TOKEN not in cookie["value"]
        assert "orch_console" not in browser.execute_script("return document.cookie")
        assert TOKEN not in browser.page_source
    finally:
        browser.delete_all_cookies()
        public.stop()
