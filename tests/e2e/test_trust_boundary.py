"""Issue 16 against `rollouts serve` as a real process, probed as a hostile client would: paths
outside `--tasks-root` (including `..` and a link out of the root) all get one 4xx that says
nothing about the host's files, and a task holding a 600 MB file is refused without the
service's memory ever growing by it (before: RSS from 131 MB to 746 MB, and it stayed).

No Docker and no policy server are needed: nothing here may get as far as running a sample."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from clients.commands.policy_stub import free_port, wait_healthy

REPO = Path(__file__).resolve().parents[2]
KEY = "trust-boundary-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def write_task(folder: Path) -> Path:
    files = {
        "task.toml": "",
        "instruction.md": "Do something.\n",
        "environment/Dockerfile": "FROM rollouts-base:bookworm\nRUN id\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    }
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def memory_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, int, Path]]:
    root = tmp_path / "datasets"
    write_task(root / "suite" / "ok-task")
    big = write_task(root / "suite" / "big-task")
    with open(big / "tests" / "huge.bin", "wb") as f:
        f.truncate(600 << 20)  # sparse: 600 MB to read, no disk used
    os.symlink(tmp_path / "outside", root / "escape")
    write_task(tmp_path / "outside" / "evil-task")
    port = free_port()
    cmd = [
        sys.executable, "-m", "clients.cli", "serve", "--port", str(port),
        "--policy-url", "http://127.0.0.1:9", "--data-dir", str(tmp_path / "data"),
        "--api-key", KEY, "--tasks-root", str(root), "--log-level", "warning",
    ]  # fmt: skip
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 60, proc, path="/healthz")
        yield f"http://127.0.0.1:{port}", proc.pid, root
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_paths_outside_the_root_get_one_answer(
    service: tuple[str, int, Path], tmp_path: Path
) -> None:
    url, _, root = service
    probes = [
        "/etc",
        "/etc/shadow",
        "/proc/self/environ",
        "/nonexistent",
        str(tmp_path / "outside" / "evil-task"),  # a real task with a Dockerfile, outside
        f"{root}/../outside/evil-task",
        f"{root}/escape/evil-task",  # a link inside the root that leads out of it
        "escape/evil-task",
        "../outside",
        f"{root}/suite/not-there",
    ]
    answers = {}
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
        for path in probes:
            r = c.post("/v1/rollouts", json={"tasks": {"path": path}})
            assert r.status_code == 422, (path, r.text)
            answers[path] = r.text.replace(path, "<path>")
        assert len(set(answers.values())) == 1, answers
        assert "PackageKit" not in r.text and "task.toml" not in r.text and "root:" not in r.text
        assert c.get("/metrics").status_code == 200  # the service is fine


def test_a_600_mb_file_never_enters_memory(service: tuple[str, int, Path]) -> None:
    url, pid, root = service
    before = memory_kb(pid, "VmRSS")
    with httpx.Client(base_url=url, headers=AUTH, timeout=60) as c:
        for path in (f"{root}/suite/big-task", "suite/big-task", "suite"):
            r = c.post("/v1/rollouts", json={"tasks": {"path": path}})
            assert r.status_code == 422, r.text
            assert "holds more than" in r.text
    peak = memory_kb(pid, "VmHWM")  # the high-water mark: a transient spike counts too
    assert peak < 300 * 1024, f"service RSS peaked at {peak >> 10} MB (was {before >> 10} MB)"
    assert memory_kb(pid, "VmRSS") < before + 64 * 1024
