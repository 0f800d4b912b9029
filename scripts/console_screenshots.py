#!/usr/bin/env python3
"""Screenshots of the web console's pages for docs/console/ (PNG), from a store filled with example jobs.

Uses Debian's chromium and chromedriver (apt-get install chromium chromium-driver) through Selenium, as the
browser tests do; nothing is downloaded. Run from the repository root:

    .venv/bin/python scripts/console_screenshots.py [--out docs/console]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WIDTH = 1360
PAGES = (
    ("fleet.png", "/"),
    ("spend.png", "/spend?range=24h"),
    ("budgets.png", "/budgets"),
    ("events.png", "/events?job=llama-ft"),
    ("job.png", "/jobs/llama-ft"),
    ("stop-confirm.png", "/jobs/llama-ft/stop"),
)


def browser():  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WIDTH},900", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def _save(driver, target: Path) -> None:  # type: ignore[no-untyped-def]
    driver.save_screenshot(str(target))
    print(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "console")
    args = parser.parse_args()
    for tool in (CHROMIUM, CHROMEDRIVER):
        if not Path(tool).exists():
            sys.stderr.write(f"error: {tool} is missing: apt-get install chromium chromium-driver\n")
            return 2
    from orchestrator.console.server import start_console
    from orchestrator.console.settings import console_settings
    from orchestrator.store.db import open_store
    from tests.support.console_world import fill

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/orch.db")
        now = datetime.now(UTC).replace(microsecond=0)
        fill(store, now)
        console = start_console(store, console_settings("127.0.0.1:0", None), clock=lambda: now)
        driver = browser()
        try:
            for name, path in PAGES:
                driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
                driver.get(console.url.rstrip("/") + path)
                height = int(driver.execute_script("return document.documentElement.scrollHeight"))
                # The whole page, not the window: a viewport as tall as the page (capped).
                driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                    "width": WIDTH, "height": min(height, 4000), "deviceScaleFactor": 1, "mobile": False})
                _save(driver, args.out / name)
            # The login form of a console that needs a token (any address but loopback).
            guarded = start_console(store, console_settings("127.0.0.1:0", "screenshot-token-0123456789"))
            try:
                driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                    "width": WIDTH, "height": 520, "deviceScaleFactor": 1, "mobile": False})
                driver.get(guarded.url)
                _save(driver, args.out / "login.png")
            finally:
                guarded.stop()
        finally:
            driver.quit()
            console.stop()
            store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
