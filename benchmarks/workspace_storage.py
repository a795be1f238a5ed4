"""What keeping final workspaces costs the store, per trajectory (docs/regrade.md).

`python -m benchmarks.workspace_storage [--bundled N] [--synthetic N]`

- `--bundled N`: `rollouts collect` on the bundled tasks (examples/tasks), N samples each, the
  stand-in policy half right, real Docker sandboxes: the workspaces are what the verifiers
  received. Needs the Docker Engine.
- `--synthetic N`: workspaces the size of pymethods2test's, N samples per task, through the
  same split, compression and store (no Docker): what an agent leaves in /app there is its
  `solution.py` (a focal class with its methods, 1 to 20 KB of Python, median ~4 KB), the
  bytecode Python caches when the agent runs it (half the samples) and a scratch test it wrote
  (a quarter). The Python text is taken from the interpreter's own standard library, so it
  compresses as real code does; a quarter of a task's samples repeat an earlier sample's
  solution byte for byte (a policy converging), the rest are all distinct.

Prints a markdown table: bytes per trajectory of the tars verified, of what the store keeps
for them (manifests and new compressed blobs), and of the trajectory payloads beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import marshal
import os
import random
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from sandboxes.workspace_snapshot import split
from sandboxes.workspace_tar import build_tar, sanitize_workspace
from service.advantages import AdvantageConfig
from service.store import GroupPlan, Store, group_id_for, sample_trajectory_id
from service.store.workspaces import WorkspaceStats, pack_snapshot
from service.trajectory import Trajectory

ROOT = Path(__file__).resolve().parents[1]


def _row(label: str, n: int, tar: int, kept: int, manifests: int, blobs: int, payload: int) -> str:
    per = f"{payload / n:,.0f}" if payload else "(n/a)"
    return (
        f"| {label} | {n} | {tar / n:,.0f} | {kept / n:,.0f} | {manifests / n:,.0f} | "
        f"{blobs / n:.2f} | {kept / tar:.1%} | {per} |"
    )


async def _measure(data_dir: Path) -> tuple[WorkspaceStats, int]:
    store = Store(data_dir, recover=False)
    store.open()
    try:
        s = await store.workspace_stats()
        payloads = await store._call(
            lambda conn: conn.execute("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM payloads")
        )
        payload_bytes = payloads.fetchone()[0]
    finally:
        store.close()
    return s, payload_bytes


def bundled(n_samples: int) -> str:
    with tempfile.TemporaryDirectory(prefix="rollouts-ws-") as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "clients.cli", "collect", "--tasks",
               str(ROOT / "examples" / "tasks"), "--out", str(out), "--n-samples",
               str(n_samples), "--p-correct", "0.5", "--seed", "1"]  # fmt: skip
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        store = Path(run.stdout.strip().splitlines()[-1]).with_suffix(".store")
        s, payload = asyncio.run(_measure(store))
    label = f"bundled tasks (12 x {n_samples}, stand-in)"
    return _row(
        label, s.workspaces, s.tar_bytes, s.stored_bytes, s.manifest_bytes, s.blobs, payload
    )


def _python_text(rng: random.Random, size: int) -> bytes:
    """`size` bytes of real Python source, from a random stdlib module."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    modules = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 4 * size)
    text = rng.choice(modules).read_bytes()
    start = rng.randrange(0, len(text) - size)
    return text[start : start + size]


def _workspace(rng: random.Random, solution: bytes) -> bytes:
    files = {"solution.py": solution}
    if rng.random() < 0.5:  # the agent ran its code: Python cached the bytecode
        code = compile(solution.decode(errors="replace"), "solution.py", "exec", dont_inherit=True)
        files["__pycache__/solution.cpython-312.pyc"] = (
            b"\xcb\x0d\x0d\x0a" + bytes(12) + (marshal.dumps(code))
        )
    if rng.random() < 0.25:  # and wrote a scratch test
        files["test_scratch.py"] = _python_text(rng, rng.randint(300, 1500))
    return sanitize_workspace(build_tar(files))[0]


def _solution(rng: random.Random) -> bytes:
    size = int(min(20_000, max(1_000, rng.lognormvariate(8.3, 0.6))))  # median ~4 KB
    src = _python_text(rng, size * 2)
    # Whole lines that compile: cut at line ends, drop what does not parse.
    lines = src.decode(errors="replace").splitlines(keepends=True)[1:]
    out: list[str] = []
    for line in lines:
        out.append(line)
        if sum(map(len, out)) >= size:
            break
    text = "".join(out)
    try:
        compile(text, "solution.py", "exec")
    except SyntaxError:
        text = "".join(f"# {line}" if line.strip() else line for line in out)
    return text.encode()


async def _synthetic(data_dir: Path, tasks: int, n_samples: int) -> None:
    rng = random.Random(2026)
    store = Store(data_dir)
    store.open()
    try:
        for k in range(tasks):
            rid = f"r{k}"
            gid = group_id_for(rid, 0)
            ids = [sample_trajectory_id(gid, i) for i in range(n_samples)]
            plan = GroupPlan(gid, f"task{k}", ids)
            await store.create_rollout(rid, "{}", 0, AdvantageConfig(), [plan])
            solutions: list[bytes] = []
            for i, tid in enumerate(ids):
                repeat = solutions and rng.random() < 0.25
                solution = rng.choice(solutions) if repeat else _solution(rng)
                solutions.append(solution)
                snap = split(_workspace(rng, solution))
                have = await store.known_blobs(snap.digests)
                snap.blobs = {d: b for d, b in snap.blobs.items() if d not in have}
                t = Trajectory(
                    trajectory_id=tid, rollout_id=rid, group_id=gid, task_id=f"task{k}",
                    sample_index=i, prompt_token_ids=[1], response_token_ids=[2],
                    loss_mask=[1], rollout_logprobs=[-0.1], response_policy_versions=[0],
                    reward=1.0, status="ok",
                )  # fmt: skip
                t._workspace = pack_snapshot(snap, "ok")
                await store.commit_trajectory(t)
    finally:
        store.close()


def synthetic(n_samples: int, tasks: int = 50) -> str:
    with tempfile.TemporaryDirectory(prefix="rollouts-ws-") as tmp:
        asyncio.run(_synthetic(Path(tmp), tasks, n_samples))
        s, _ = asyncio.run(_measure(Path(tmp)))
    label = f"pymethods2test-sized ({tasks} x {n_samples}, synthetic)"
    return _row(label, s.workspaces, s.tar_bytes, s.stored_bytes, s.manifest_bytes, s.blobs, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundled", type=int, default=0, metavar="N")
    parser.add_argument("--synthetic", type=int, default=8, metavar="N")
    args = parser.parse_args()
    print("| workspaces | trajectories | tar bytes / trajectory | kept bytes / trajectory "
          "| of which manifest | files stored / trajectory | kept / tar "
          "| payload bytes / trajectory |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    if args.bundled:
        print(bundled(args.bundled), flush=True)
    if args.synthetic:
        print(synthetic(args.synthetic), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    main()
