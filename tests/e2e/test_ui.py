"""The web view in a real browser (the system's headless Chromium, tests/browser_env.py):

- `/ui` on `rollouts serve` collecting with the stand-in (real Docker sandboxes and
  verifier): the key is asked for once; progress reaches completion through the event stream
  (the page is never reloaded); a filter finds failed samples; a group shows its samples side
  by side; a failed sample shows its conversation, the verifier's output, its grading history
  and the token view (each token's text, from the stand-in's /detokenize; its id on hover);
- `rollouts view` on a Parquet file written by `rollouts export`: no key, the same browser
  (no --tokenizer: the token view shows ids and says why).

Screenshots go to $ROLLOUTS_ARTIFACTS/ui (default /tmp/rollouts-artifacts/ui), for a person.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.commands.policy_stub import free_port, stop_process, wait_healthy
from standin.tokenizer import StubTokenizer
from tests.browser_env import chromium, screenshot
from tests.e2e.live import API_KEY, ROOT, SMALL_GROUPS, TASKS, Service, serve, stand_in, wait_until

pytestmark = pytest.mark.docker
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service collecting with a stand-in that solves half the samples (seeded): some
    samples of every rollout below fail."""
    tmp = tmp_path_factory.mktemp("ui")
    with stand_in(tmp, p_correct=0.5, seed=11) as policy:
        with serve(tmp, [policy.url], "--max-concurrent-samples", "4") as svc:
            yield svc


def _body(limit: int, n_samples: int) -> dict:
    return {
        "tasks": {"path": TASKS, "limit": limit},
        "n_samples": n_samples,
        "sampling": {"seed": 5},
        "advantage": SMALL_GROUPS,
    }


def _css(driver, selector: str):  # type: ignore[no-untyped-def]
    return driver.find_elements("css selector", selector)


def _text(driver, selector: str) -> str | None:  # type: ignore[no-untyped-def]
    """An element's text read in the page, in one step: the overview redraws on every event,
    so a handle found first may be stale when read."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e && e.textContent", selector
    )


def _wait_css(driver, selector: str, what: str, timeout_s: float = 30):  # type: ignore[no-untyped-def]
    return wait_until(what, lambda: _css(driver, selector), timeout_s)


def _failed_sample(driver, prefix: str) -> str:  # type: ignore[no-untyped-def]
    """Filter the browser to failed samples (graded ok, reward 0) and open the first one's
    group, then that sample; its trajectory id."""
    driver.get(driver.current_url.split("#")[0] + "#/samples")
    _wait_css(driver, "#filters", "the filter form")
    driver.find_element("css selector", "#filter-status option[value='ok']").click()
    driver.find_element("id", "filter-reward_max").send_keys("0")
    driver.find_element("id", "apply-filters").click()
    rows = _wait_css(
        driver, "table.samples[data-query='status=ok&reward_max=0'] tbody tr", "failed"
    )
    assert {(r.get_attribute("data-status"), r.get_attribute("data-reward")) for r in rows} == {
        ("ok", "0")
    }, "the filter let through a sample that is not a failed one"
    screenshot(driver, f"{prefix}-failed-samples")
    failed = rows[0].get_attribute("data-trajectory")
    rows[0].find_element("css selector", "a.open-group").click()
    cards = _wait_css(driver, "#group-samples .sample-card", "the group's samples")
    assert len(cards) >= 2 and all("reward" in c.text and "advantage" in c.text for c in cards)
    screenshot(driver, f"{prefix}-group")
    next(c for c in cards if c.get_attribute("data-trajectory") == failed).click()
    return failed


def _visible(text: str) -> str:
    """A token's text as its chip shows it (static/sample.js): whitespace and control
    characters as marks."""
    marks = {" ": "·", "\t": "→", "\n": "↵", "\r": "␍", "\x7f": "␡"}
    return "".join(marks.get(c, chr(0x2400 + ord(c)) if ord(c) < 0x20 else c) for c in text)


def _check_sample(driver, prefix: str, texts: bool) -> None:  # type: ignore[no-untyped-def]
    """The open sample shows its conversation (a command typed, terminal output), the
    verifier's stdout, and on the toggle its tokens with logprobs: each token's text (`texts`:
    the service, from the stand-in's /detokenize) or, where there is no tokenizer (`rollouts
    view` without --tokenizer), its id and a note saying so; the id always on hover."""
    _wait_css(driver, "#conversation", "the conversation")
    turns = _css(driver, "#conversation .msg.assistant")
    assert turns and _css(driver, "#conversation pre.command"), "no command in the conversation"
    assert _css(driver, "#conversation .msg.user pre.terminal")
    output = driver.find_element("id", "verifier-output").text
    assert "failed" in output or "FAILED" in output, output[-500:]
    # Its grading history: the one grading it got when collected, the one served.
    gradings = _css(driver, "#gradings tbody tr")
    assert (
        len(gradings) == 1
        and "collected" in gradings[0].text
        and "served" in (gradings[0].get_attribute("class") or "")
    )
    screenshot(driver, f"{prefix}-sample")
    driver.find_element("id", "toggle-tokens").click()
    generated = _wait_css(driver, "#tokens .tok.generated", "generated tokens")
    assert _css(driver, "#tokens .segment.prompt .tok") and _css(driver, "#tokens .tok.observation")
    hover = generated[1].get_attribute("title")
    assert "logprob -" in hover or "logprob 0.0000" in hover, hover
    assert "policy v0" in hover and "v0" in generated[1].get_attribute("class"), hover
    chips = driver.execute_script(
        "return [...document.querySelectorAll('#tokens .chips .tok')]"
        ".map((e) => [Number(e.dataset.id), e.textContent, e.title])"
    )
    assert chips and all(f"id {i}" in title.split(" · ") for i, _, title in chips)
    if texts:
        stub = StubTokenizer()
        wrong = [(i, shown) for i, shown, _ in chips if shown != _visible(stub.token_str(i))]
        assert not wrong, f"chips not showing their token's text: {wrong[:10]}"
        assert "policy server" in driver.find_element("id", "token-source").text
        assert not _css(driver, "#token-note")
    else:
        assert [shown for _, shown, _ in chips] == [str(i) for i, _, _ in chips]
        assert "--tokenizer" in driver.find_element("id", "token-note").text
    screenshot(driver, f"{prefix}-tokens")


def test_live_view_of_a_collecting_service(service: Service) -> None:
    with chromium() as driver:
        driver.get(service.url + "/ui")
        _wait_css(driver, "#key-form:not([hidden])", "the key to be asked for")
        driver.find_element("id", "key-input").send_keys(API_KEY)
        driver.find_element("css selector", "#key-form button").click()
        wait_until("the live stream", lambda: "live" in _text(driver, "#live-status"), 30)
        # A mark the page loses if it is reloaded: what follows must come through the stream.
        driver.execute_script("window.sameDocument = true")
        rid = service.submit(_body(limit=1, n_samples=4))  # seeded: two of the four fail
        row = f"#rollouts tr[data-rollout='{rid}']"
        _wait_css(driver, row, "the new rollout on the overview")
        wait_until(
            "some progress",
            lambda: _text(driver, f"{row} .samples") not in (None, "0 / 4"),
            TIMEOUT_S,
        )
        screenshot(driver, "live-progress")
        wait_until(
            "the rollout to complete on the page",
            lambda: _text(driver, f"{row} .rollout-status") == "completed",
            TIMEOUT_S,
            poll_s=0.5,
        )
        assert driver.execute_script("return window.sameDocument") is True
        assert _text(driver, f"{row} .groups") == "1 / 1"
        assert _text(driver, f"{row} .samples") == "4 / 4"
        assert int(_text(driver, "#throughput .card-value")) > 0
        # The level samples are admitted to: --max-concurrent-samples, this service's fixed one.
        assert _text(driver, "#concurrency .card-value") == "4"
        assert service.status(rid)["status"] == "completed"
        screenshot(driver, "live-overview")
        failed = _failed_sample(driver, "live")
        _check_sample(driver, "live", texts=True)
        t = service.call("GET", f"/ui/api/trajectories/{failed}").json()
        assert (t["status"], t["reward"]) == ("ok", 0.0)


def test_rollouts_view_of_an_exported_file(service: Service, tmp_path: Path) -> None:
    rid = service.submit(_body(limit=1, n_samples=4))
    service.wait_finished(rid, TIMEOUT_S)
    out = tmp_path / "export.parquet"
    cli = [sys.executable, "-m", "clients.cli"]
    export = [*cli, "export", "--data-dir", str(service.data_dir), "--out", str(out)]
    subprocess.run(export, cwd=ROOT, check=True, capture_output=True, timeout=120)
    port = free_port()
    view = [*cli, "view", "--data-dir", str(out), "--port", str(port)]
    proc = subprocess.Popen(view, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, 60, proc, path="/ui/api/overview")
        with chromium() as driver:
            driver.get(url + "/ui")
            _wait_css(driver, f"#rollouts tr[data-rollout='{rid}']", "the exported rollout")
            assert driver.find_element("id", "key-form").get_attribute("hidden") is not None
            assert "export.parquet" in driver.find_element("id", "source").text
            assert _text(driver, "#live-status") == "read-only"
            screenshot(driver, "file-overview")
            _failed_sample(driver, "file")
            _check_sample(driver, "file", texts=False)
    finally:
        stop_process(proc)
