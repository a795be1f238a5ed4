"""`rollouts view` of a 10,000-trajectory store in the browser, with every payload deleted but
one: the overview, the listing's pages and a group all render from the samples table alone,
and the one payload left opens. (No Docker: the store is generated through its own API.)"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from clients.commands.policy_stub import free_port, stop_process, wait_healthy
from service.store import DB_NAME, group_id_for, sample_trajectory_id
from tests.browser_env import chromium, screenshot
from tests.e2e.live import ROOT, wait_until
from tests.unit.test_ui_api import generate_store

KEPT = sample_trajectory_id(group_id_for("tenk", 1000), 2)


def test_a_10k_store_pages_in_the_browser_without_payloads(tmp_path: Path) -> None:
    generate_store(tmp_path, "tenk", n_groups=1250)
    conn = sqlite3.connect(tmp_path / DB_NAME)
    with conn:
        conn.execute("DELETE FROM payloads WHERE trajectory_id != ?", (KEPT,))
    conn.close()
    port = free_port()
    cmd = [sys.executable, "-m", "clients.cli", "view", "--data-dir", str(tmp_path)]
    proc = subprocess.Popen([*cmd, "--port", str(port)], cwd=ROOT, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/ui"
    try:
        wait_healthy(url, 60, proc, path="")
        with chromium() as driver:

            def text(selector: str) -> str | None:
                return driver.execute_script(
                    "const e = document.querySelector(arguments[0]); return e && e.textContent",
                    selector,
                )

            driver.get(url)
            wait_until("the overview", lambda: text("tr[data-rollout='tenk'] .samples"), 30)
            assert text("tr[data-rollout='tenk'] .samples") == "10000 / 10000"
            assert text("tr[data-rollout='tenk'] .groups") == "1250 / 1250"
            screenshot(driver, "store-10k-overview")
            driver.get(url + "#/samples?offset=9950")
            wait_until("the last page", lambda: text("#page-info") == " 9951–10000 of 10000 ", 30)
            driver.get(url + f"#/group/{group_id_for('tenk', 1000)}")
            cards = ".sample-card"
            wait_until(
                "the group", lambda: len(driver.find_elements("css selector", cards)) == 8, 30
            )
            driver.find_element("css selector", f".sample-card[data-trajectory='{KEPT}']").click()
            wait_until("the sample", lambda: text("#verifier-output") == "2 passed", 30)
            screenshot(driver, "store-10k-sample")
    finally:
        stop_process(proc)
