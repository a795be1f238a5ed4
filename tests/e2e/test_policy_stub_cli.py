"""`rollouts policy-stub` as a real process on loopback, driven by the real policy client through
a whole scripted episode, token-in/token-out; the --record file matches what the client got."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.policy.client import PolicyClient
from service.sample import SamplingParams
from tests.ci import unavailable

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "examples" / "tasks"


def stub_command() -> list[str]:
    """The installed `rollouts` command when it has policy-stub, else the module itself."""
    exe = shutil.which("rollouts") or str(Path(sys.executable).with_name("rollouts"))
    if Path(exe).exists():
        help_text = subprocess.run([exe, "--help"], capture_output=True, text=True).stdout
        if "policy-stub" in help_text:
            return [exe, "policy-stub"]
    return [sys.executable, "-m", "clients.commands.policy_stub"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stub_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    if not any(TASKS.glob("*/task.toml")):
        unavailable(f"no example tasks in {TASKS}")
    port, record = free_port(), tmp_path / "served.jsonl"
    cmd = [*stub_command(), "--tasks", str(TASKS), "--port", str(port), "--record", str(record)]
    cmd += ["--p-malformed", "0", "--seed", "3", "--max-model-len", "8192"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"policy-stub did not start: {out}")
            time.sleep(0.1)
        yield url, record
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def first_task_instruction() -> str:
    folder = sorted(p.parent for p in TASKS.glob("*/task.toml"))[0]
    return (folder / "instruction.md").read_text()


async def test_scripted_episode_token_in_token_out(stub_server: tuple[str, Path]) -> None:
    url, record = stub_server
    client = PolicyClient([url + "/v1"], backoff_s=0.01)
    await client.start()
    try:
        assert client.model == "stub" and client.max_model_len == 8192
        server = client.pin("sample-0")
        messages = [
            {"role": "system", "content": "You are a terminal agent. Reply with one JSON object."},
            {"role": "user", "content": first_task_instruction()},
        ]
        sequence = await client.tokenize_messages(messages, server=server)
        params = SamplingParams(max_tokens=2048, seed=42)
        replies, sent, got = [], [], []
        for turn in range(3):
            sent.append(list(sequence))
            [gen] = await client.complete(sequence, params, server=server)
            got.append(gen)
            assert gen.finish_reason == "stop" and gen.token_ids[-1] == 2
            assert len(gen.logprobs) == len(gen.token_ids)
            replies.append(json.loads(gen.text))
            sequence = sequence + gen.token_ids  # the engine's tokens, never re-rendered
            note = "Are you sure?" if turn == 1 else f"$ (output of turn {turn})"
            delta = f"\n<|im_start|>user\n{note}<|im_end|>\n<|im_start|>assistant\n"
            sequence += await client.tokenize_text(delta, server=server)
        client.release("sample-0")
    finally:
        await client.aclose()
    assert [r["task_complete"] for r in replies] == [False, True, True]
    assert replies[0]["commands"][0]["keystrokes"].endswith("\n")
    assert replies[2]["commands"] == []
    served = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(served) == 3
    # The server's own record of each turn against what the client parsed off the wire: the
    # prompt it received is the one sent (token for token), and the ids, logprobs and finish
    # reason the client handed on are exactly those the server generated.
    for rec, prompt, gen in zip(served, sent, got, strict=True):
        assert rec["prompt_token_ids"] == prompt
        assert rec["token_ids"] == gen.token_ids and rec["logprobs"] == gen.logprobs
        assert (rec["finish_reason"], rec["stop_reason"]) == (gen.finish_reason, gen.stop_reason)
        # Salted with the version the server serves (the stand-in, fresh, was tagged 0).
        assert rec["cache_salt"].startswith("policy-v0-") and rec["seed"] == 42
        assert rec["route"] == "generate" and gen.versions == [0] * len(gen.token_ids)
    # Each turn's prompt extends the previous one by exactly the tokens served for it.
    for prev, nxt in zip(served, served[1:], strict=False):
        start = len(prev["prompt_token_ids"])
        assert nxt["prompt_token_ids"][:start] == prev["prompt_token_ids"]
        assert nxt["prompt_token_ids"][start : start + len(prev["token_ids"])] == prev["token_ids"]
    metrics = httpx.get(url + "/metrics").text
    hits = [ln for ln in metrics.splitlines() if ln.startswith("vllm:prefix_cache_hits_total")]
    assert float(hits[0].rsplit(" ", 1)[1]) > 0  # later turns reuse the cached prefix


def test_bad_flag_exits_with_one_line() -> None:
    cmd = [*stub_command(), "--tasks", str(TASKS), "--p-correct", "1.5"]
    r = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert r.returncode == 2
    assert "p-correct" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_tasks_exits_with_one_line(tmp_path: Path) -> None:
    cmd = [*stub_command(), "--tasks", str(tmp_path / "nope")]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "nope" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
