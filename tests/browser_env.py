"""Headless Chromium for the web view's tests: the system's own `chromium` and `chromedriver`
(Debian: `apt-get install chromium chromium-driver`; .ci/run installs them), driven by
Selenium. Nothing is downloaded: Selenium is pointed at the system's driver and browser.

Without them the tests skip, saying why; in CI (CI=true) they fail instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.ci import unavailable

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
ARTIFACTS = Path(os.environ.get("ROLLOUTS_ARTIFACTS", "/tmp/rollouts-artifacts")) / "ui"


def _unavailable(reason: str) -> None:
    unavailable(f"the web view's browser tests need headless Chromium: {reason}")


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[object]:
    """A headless Chromium session (selenium WebDriver), closed on exit."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (pip install -e '.[test]')")
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    driver_path = shutil.which("chromedriver")
    if browser is None or driver_path is None:
        _unavailable(
            "no chromium and chromedriver on PATH (apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: object, name: str) -> Path:
    """Save the page as ARTIFACTS/NAME.png (kept for a person to look at; never committed)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot at {path}"  # type: ignore[attr-defined]
    return path
