"""The verifier: run a task's tests on the agent's workspace in a FRESH container.

The agent never had access to this container, so nothing it wrote outside /app can reach the
tests or the reward: /logs/verifier starts empty, tests/ is copied in only here, and the reward
is read only from this container. One exec uploads (workspace + tests as one tar on stdin) and
runs `bash /tests/test.sh` under the verifier timeout; a second reads the reward file.
"""

from __future__ import annotations

import io
import json
import math
import tarfile
import time
import uuid
from typing import Any

from sandboxes.backend import VerifyResult
from sandboxes.docker_adapter import CappedBuffer, DockerAdapter
from sandboxes.pool import ContainerPool
from sandboxes.process_tree import kill_tree_command, wrap_command
from sandboxes.task import Task
from sandboxes.workspace_tar import WorkspaceTooLarge, build_tar, sanitize_workspace
from service.trajectory import Status

VERIFIER_OUTPUT_CAP = 16 << 10
REWARD_FILE_CAP = 64 << 10

# Runs before the tests, in the foreground, reading the upload tar from stdin.
_PRELUDE = """
rm -rf /logs/verifier && mkdir -p /logs/verifier /tests /app || exit 90
tar -x --no-same-owner -C / -f - || exit 91
"""

_READ_REWARD = f"""
for f in reward.json reward.txt; do
  if [ -f "/logs/verifier/$f" ]; then
    echo "$f"; head -c {REWARD_FILE_CAP} "/logs/verifier/$f"; exit 0
  fi
done
exit 3
"""


class RewardError(ValueError):
    pass


def parse_reward(kind: str, text: str) -> float:
    """reward.json must be an object with a finite number under "reward"; reward.txt a float."""
    if kind == "reward.json":
        try:
            obj: Any = json.loads(text)
        except json.JSONDecodeError as e:
            raise RewardError(f"reward.json is not valid JSON: {e}") from e
        value = obj.get("reward") if isinstance(obj, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RewardError(f'reward.json has no numeric "reward": {text[:200]!r}')
        reward = float(value)
    else:
        try:
            reward = float(text.strip())
        except ValueError as e:
            raise RewardError(f"reward.txt is not a float: {text[:200]!r}") from e
    if not math.isfinite(reward):
        raise RewardError(f"reward is not finite: {reward}")
    return reward


def verifier_upload(task: Task, workspace_tar: bytes) -> bytes:
    """One tar holding the sanitized workspace under app/ and the task's tests under tests/."""
    app_tar, _notes = sanitize_workspace(workspace_tar, prefix="app")
    tests_tar = build_tar(task.test_files, prefix="tests")
    # Two tars cannot simply be concatenated (end-of-archive blocks): re-pack into one.
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for blob in (app_tar, tests_tar):
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:") as src:
                for m in src:
                    dst.addfile(m, src.extractfile(m) if m.isreg() else None)
    return out.getvalue()


async def run_verifier(
    adapter: DockerAdapter,
    pool: ContainerPool,
    args: dict[str, Any],
    task: Task,
    workspace_tar: bytes,
) -> VerifyResult:
    durations: dict[str, float] = {}
    t_start = time.monotonic()
    if "test.sh" not in task.test_files:
        return VerifyResult(None, Status.verifier_error, f"task {task.id}: tests/test.sh missing")
    try:
        upload = verifier_upload(task, workspace_tar)
    except WorkspaceTooLarge as e:  # the agent filled /app: graded, never masked
        return VerifyResult(0.0, Status.ok, f"[rollouts] graded 0: {e}")
    except Exception as e:  # a malformed workspace tar is the infrastructure's fault
        return VerifyResult(None, Status.sandbox_error, f"bad workspace archive: {e}")

    cid: str | None = None
    try:
        t0 = time.monotonic()
        cid, _ = await pool.acquire(args)
        durations["acquire_s"] = time.monotonic() - t0

        token = uuid.uuid4().hex[:12]

        async def kill() -> None:
            await adapter.exec_quick(cid, ["bash", "-c", kill_tree_command(token)])

        t0 = time.monotonic()
        result, timed_out = await adapter.exec_stream(
            cid,
            ["bash", "-c", wrap_command(_PRELUDE), "rollouts-verify", token, "bash /tests/test.sh"],
            stdin=upload,
            max_output=VERIFIER_OUTPUT_CAP,
            timeout_s=task.config.verifier_timeout_sec,
            on_timeout=kill,
        )
        durations["tests_s"] = time.monotonic() - t0
        output = result.output.text()
        if timed_out:
            return VerifyResult(0.0, Status.verifier_timeout, output, durations)
        if result.exit_code in (90, 91):
            return VerifyResult(None, Status.sandbox_error, f"upload failed: {output}", durations)

        t0 = time.monotonic()
        code, raw = await adapter.exec_quick(cid, ["bash", "-c", _READ_REWARD])
        durations["reward_s"] = time.monotonic() - t0
        if code != 0 and (result.exit_code or 0) >= 128:
            # test.sh died from a signal (`kill -9 -1` or the memory killer): the code under
            # test did it, as with a timeout. Masking it would let a policy dodge a 0.
            note = f"graded 0: the tests were killed by signal {result.exit_code - 128}"
            return VerifyResult(0.0, Status.ok, _append(output, note), durations)
        if code != 0:
            return VerifyResult(
                None, Status.verifier_error, _append(output, "no reward file written"), durations
            )
        kind, _, body = raw.partition(b"\n")
        try:
            reward = parse_reward(kind.decode(), body.decode("utf-8", errors="replace"))
        except RewardError as e:
            return VerifyResult(None, Status.verifier_error, _append(output, str(e)), durations)
        return VerifyResult(reward, Status.ok, output, durations)
    except Exception as e:  # engine or container failure: mask, never a fake zero
        return VerifyResult(
            None, Status.sandbox_error, f"verifier container failed: {e}", durations
        )
    finally:
        if cid is not None:
            pool.remove_in_background(cid)
        durations["verify_s"] = time.monotonic() - t_start


def _append(output: str, note: str) -> str:
    buf = CappedBuffer(VERIFIER_OUTPUT_CAP)
    buf.add(f"{output}\n[rollouts] {note}".encode())
    return buf.text()
