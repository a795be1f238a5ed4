"""The token view's texts in a real browser (headless Chromium, tests/browser_env.py), on
`rollouts view` of a store holding one trajectory of real Qwen3 token ids:

- with `--tokenizer` (the real Qwen3 files, ../shared/qwen3-tokenizer or
  ROLLOUTS_QWEN3_TOKENIZER): each chip shows its token's text, whitespace made visible, special
  tokens as written and the bytes of a character cut in two as \\xNN; the hover title holds the
  id (with the position, logprob and policy version it always had);
- without: the chips show ids, and a note says how to get the texts.

No Docker: the store is written through its own API. The ids are Qwen3's encoding of the
texts below, checked with transformers 5.19's AutoTokenizer on the same files.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clients.commands.policy_stub import free_port, stop_process, wait_healthy
from service.advantages import AdvantageConfig
from service.store import GroupPlan, Store, group_id_for, sample_trajectory_id
from service.trajectory import Status, Timings, Trajectory
from tests.browser_env import chromium, screenshot
from tests.ci import unavailable
from tests.e2e.live import ROOT, wait_until
from tests.trajectories import summarized
from tests.unit.test_ui_tokens import QWEN3

# "<|im_start|>user\nSay hi 🦜<|im_end|>\n<|im_start|>assistant\n"
PROMPT = [151644, 872, 198, 45764, 15588, 11162, 99, 250, 151645, 198, 151644, 77091, 198]
# "<think>\n\n</think>\n\nhello world\tok 🦜<|im_end|>" (generated), then the observation
# "\n<|im_start|>user\nls\n<|im_end|>\n<|im_start|>assistant\n", then "done<|im_end|>".
TURN_1 = [151667, 271, 151668, 271, 14990, 1879, 59268, 11162, 99, 250, 151645]
OBSERVATION = [198, 151644, 872, 198, 4730, 198, 151645, 198, 151644, 77091, 198]
TURN_2 = [10438, 151645]
# What a chip shows: "·" a space, "↵" a newline, "→" a tab; " 🦜" is cut into " \xf0\x9f",
# "\xa6" and "\x9c".
SHOWN = {
    151644: "<|im_start|>", 45764: "Say", 15588: "·hi", 198: "↵", 271: "↵↵", 14990: "hello",
    1879: "·world", 59268: "→ok", 151667: "<think>", 10438: "done",
    11162: "·\\xf0\\x9f", 99: "\\xa6", 250: "\\x9c",
}  # fmt: skip
RID = "qwen3"
TID = sample_trajectory_id(group_id_for(RID, 0), 0)
SUMMARIZED = sample_trajectory_id(group_id_for(RID, 1), 0)  # a summarized episode (issue 36)


def _store(data_dir: Path) -> None:
    response = TURN_1 + OBSERVATION + TURN_2
    mask = [1] * len(TURN_1) + [0] * len(OBSERVATION) + [1] * len(TURN_2)
    versions = [3] * len(TURN_1) + [-1] * len(OBSERVATION) + [4] * len(TURN_2)
    t = Trajectory(
        trajectory_id=TID,
        rollout_id=RID,
        group_id=group_id_for(RID, 0),
        task_id="say-hi",
        sample_index=0,
        policy_version_start=3,
        policy_version_end=4,
        prompt_token_ids=PROMPT,
        response_token_ids=response,
        loss_mask=mask,
        rollout_logprobs=[-0.5 if m else 0.0 for m in mask],
        response_policy_versions=versions,
        reward=1.0,
        status=Status.ok,
        messages=[{"role": "user", "content": "Say hi 🦜"},
                  {"role": "assistant", "content": "hello world\tok 🦜"}],
        verifier_output="1 passed",
        timings=Timings(total_s=1.0),
    )  # fmt: skip

    async def fill() -> None:
        store = Store(data_dir)
        store.open()
        try:
            plans = [GroupPlan(group_id_for(RID, 0), "say-hi", [TID]),
                     GroupPlan(group_id_for(RID, 1), "long", [SUMMARIZED])]  # fmt: skip
            await store.create_rollout(RID, "{}", 0, AdvantageConfig("rloo", 1), plans)
            await store.commit_trajectory(t)
            await store.commit_trajectory(
                summarized(SUMMARIZED, RID, group_id_for(RID, 1), "long", 0)
            )
        finally:
            store.close()

    asyncio.run(fill())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("qwen3-store")
    _store(data)
    return data


@contextmanager
def _view(store: Path, *extra: str) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "clients.cli", "view", "--data-dir", str(store), *extra]
    proc = subprocess.Popen([*cmd, "--port", str(port)], cwd=ROOT, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/ui"
    try:
        wait_healthy(url, 60, proc, path="")
        yield url
    finally:
        stop_process(proc)


def _tokens(driver, url: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """Open the sample, show its tokens; every chip's id, shown text, title and class."""
    driver.get(url + f"#/sample/{TID}")
    wait_until("the sample", lambda: driver.find_elements("id", "toggle-tokens"), 30)
    driver.find_element("id", "toggle-tokens").click()
    wait_until("the tokens", lambda: driver.find_elements("css selector", "#tokens .tok"), 30)
    return driver.execute_script(
        "return [...document.querySelectorAll('#tokens .chips .tok')].map((e) => ({"
        "id: Number(e.dataset.id), text: e.textContent, title: e.title, cls: e.className,"
        "ws: e.querySelectorAll('.ws').length}))"
    )


def test_token_chips_show_each_tokens_text_and_its_id_on_hover(store: Path) -> None:
    if not (QWEN3 / "vocab.json").is_file():
        unavailable(f"no Qwen3 tokenizer files at {QWEN3} (ROLLOUTS_QWEN3_TOKENIZER)")
    with _view(store, "--tokenizer", str(QWEN3)) as url, chromium() as driver:
        chips = _tokens(driver, url)
        assert [c["id"] for c in chips] == PROMPT + TURN_1 + OBSERVATION + TURN_2
        for c in chips:
            if c["id"] in SHOWN:
                assert c["text"] == SHOWN[c["id"]], c
            assert f"· id {c['id']}" in c["title"], c
        by_id = {c["id"]: c for c in chips}
        hello = by_id[14990]
        assert "generated" in hello["cls"] and hello["title"].startswith("response 4 · id 14990")
        assert "logprob -0.5000 · policy v3" in hello["title"] and 'text "hello"' in hello["title"]
        assert by_id[10438]["title"].endswith('policy v4 · text "done"')
        # Whitespace marks are set apart from text; a cut character is marked, with its bytes.
        assert by_id[198]["ws"] == 1 and by_id[271]["ws"] == 2 and by_id[14990]["ws"] == 0
        assert "partial" in by_id[99]["cls"] and "bytes \\xa6" in by_id[99]["title"]
        assert 'text "\\n\\n"' in by_id[271]["title"]  # the exact text, escaped, on hover
        source = driver.find_element("id", "token-source").text
        assert "token texts from tokenizer" in source and "vocab.json" in source
        assert not driver.find_elements("id", "token-note")
        screenshot(driver, "tokens-qwen3-texts")


def test_without_a_tokenizer_the_chips_show_ids_and_a_note_says_why(store: Path) -> None:
    with _view(store) as url, chromium() as driver:
        chips = _tokens(driver, url)
        assert [c["text"] for c in chips] == [
            str(i) for i in PROMPT + TURN_1 + OBSERVATION + TURN_2
        ]
        assert all(f"id {c['id']}" in c["title"] for c in chips)
        note = driver.find_element("id", "token-note").text
        assert note.startswith("Token ids shown: no tokenizer") and "--tokenizer" in note
        screenshot(driver, "tokens-ids-only")
        # A summarized episode: its earlier segments are boundaries that open onto their tokens.
        driver.get(url + f"#/sample/{SUMMARIZED}")
        boxes = "#boundaries details.boundary"
        wait_until("the boundaries", lambda: driver.find_elements("css selector", boxes), 30)
        kinds = [b.get_attribute("data-kind") for b in driver.find_elements("css selector", boxes)]
        assert kinds == ["main", "summary", "questions", "answers"]
        summary = driver.find_element("id", "segment-1")
        assert "summary · from segment 0" in summary.text and "6 response tokens" in summary.text
        summary.find_element("tag name", "summary").click()
        chips = "#segment-1 .chips .tok"
        wait_until("the summary's tokens", lambda: driver.find_elements("css selector", chips), 30)
        seg = summarized(SUMMARIZED, RID, group_id_for(RID, 1), "long", 0).segments[1]
        shown = [int(e.text) for e in driver.find_elements("css selector", chips)]
        assert shown == seg.prompt_token_ids + seg.response_token_ids
        screenshot(driver, "segments-boundary")
