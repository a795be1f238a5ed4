"""The verifier: run a task's tests on the agent's workspace in a FRESH container.

The agent never had access to this container: /logs/verifier starts empty and tests/ is copied
in only here. The tested code does run here, though, as root and often inside pytest's own
process, so the reward is read through a channel it cannot write:

- `pytest_guard.py` goes in as /tests/conftest.py and confines the pytest process (Landlock: no
  writes beneath /logs or /tests, no signals to test.sh) before any tested code is imported;
- when test.sh ends, every other process in the container is killed, and only then are the
  reward files and the guard's report read, by a second exec;
- `reward.py` grades from that evidence, and only infrastructure faults leave no reward.
"""

from __future__ import annotations

import importlib.resources
import io
import tarfile
import time
import uuid
from typing import Any

from sandboxes.backend import Verdict, VerifyResult
from sandboxes.docker_adapter import CappedBuffer, DockerAdapter, OutputTooLarge
from sandboxes.pool import ContainerPool
from sandboxes.process_tree import kill_tree_command, wrap_command
from sandboxes.reward import Evidence, grade
from sandboxes.task import Task
from sandboxes.workspace_tar import WorkspaceTooLarge, build_tar, sanitize_workspace

VERIFIER_OUTPUT_CAP = 16 << 10
EVIDENCE_CAP = 256 << 10  # the tar of /logs/verifier and the guard's report
EVIDENCE_FILE_CAP = 16 << 10  # per file kept in the record
READ_TIMEOUT_S = 30.0
GUARD_CONFTEST = "conftest.py"
TASK_CONFTEST = "_task_conftest.py"  # the task's own tests/conftest.py, run by the guard

# Runs before the tests, in the foreground, reading the upload tar from stdin. 90: the fresh
# container could not even make its folders (the infrastructure); 91: the upload did not fit
# or unpack, which only the agent's workspace can cause (ours is small and checked).
_PRELUDE = """
rm -rf /logs/verifier /logs/rollouts-guard || exit 90
mkdir -p /logs/verifier /logs/rollouts-guard /tests /app || exit 90
tar -x --no-same-owner -C / -f - || exit 91
"""
# After test.sh: nothing the tested code started may live on to write while we read.
_EPILOGUE = "kill -KILL -1 2>/dev/null; sleep 0.05; kill -KILL -1 2>/dev/null"

# Prints the mode of /logs/verifier on the first line, then a tar of the evidence on stdout.
_READ_EVIDENCE = f"""
kill -KILL -1 2>/dev/null
if [ -d /logs/verifier ] && [ ! -L /logs/verifier ]; then stat -c '%a' /logs/verifier
else echo missing; fi
cd /logs && tar -c --ignore-failed-read verifier rollouts-guard 2>/dev/null | head -c {EVIDENCE_CAP}
exit 0
"""


def _guard_source() -> bytes:
    return importlib.resources.files("sandboxes").joinpath("pytest_guard.py").read_bytes()


def verifier_upload(task: Task, workspace_tar: bytes) -> bytes:
    """One tar holding the sanitized workspace under app/ and the task's tests under tests/,
    with the pytest guard as tests/conftest.py (the task's own conftest renamed beside it)."""
    app_tar, _notes = sanitize_workspace(workspace_tar, prefix="app")
    tests = dict(task.test_files)
    if GUARD_CONFTEST in tests:
        tests[TASK_CONFTEST] = tests.pop(GUARD_CONFTEST)
    tests[GUARD_CONFTEST] = _guard_source()
    tests_tar = build_tar(tests, prefix="tests")
    # Two tars cannot simply be concatenated (end-of-archive blocks): re-pack into one.
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for blob in (app_tar, tests_tar):
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:") as src:
                for m in src:
                    dst.addfile(m, src.extractfile(m) if m.isreg() else None)
    return out.getvalue()


def is_pytest_task(task: Task) -> bool:
    return b"pytest" in task.test_files.get("test.sh", b"")


def parse_evidence(raw: bytes, tests_exit: int | None, pytest_task: bool) -> Evidence:
    """The read exec's output: the mode line, then a (possibly cut) tar of /logs."""
    first, _, tar_bytes = raw.partition(b"\n")
    mode_text = first.strip().decode(errors="replace")
    ev = Evidence(
        tests_exit=tests_exit,
        verifier_dir_mode=int(mode_text, 8) if mode_text.isdigit() else None,
        pytest_task=pytest_task,
    )
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
            for m in tar:
                f = tar.extractfile(m) if m.isreg() else None
                if f is None:
                    continue
                data = f.read()
                if m.name.startswith("verifier/"):
                    ev.files[m.name.removeprefix("verifier/")] = data
                elif m.name == "rollouts-guard/report.jsonl":
                    ev.guard_report = data
    except (tarfile.TarError, EOFError, OSError):
        pass  # cut at the cap: keep what came before
    return ev


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
        return VerifyResult(None, Verdict.tests_broken, f"task {task.id}: tests/test.sh missing")
    try:
        upload = verifier_upload(task, workspace_tar)
    except WorkspaceTooLarge as e:  # the agent filled /app: graded, never masked
        return VerifyResult(0.0, Verdict.graded, f"[rollouts] graded 0: {e}")
    except Exception as e:  # a malformed workspace tar is the infrastructure's fault
        return VerifyResult(None, Verdict.infrastructure, f"bad workspace archive: {e}")

    cid: str | None = None
    try:
        t0 = time.monotonic()
        cid, _ = await pool.acquire(args)
        durations["acquire_s"] = time.monotonic() - t0

        token = uuid.uuid4().hex[:12]

        async def kill() -> None:
            await adapter.exec_quick(cid, ["bash", "-c", kill_tree_command(token)])

        t0 = time.monotonic()
        script = wrap_command(_PRELUDE, _EPILOGUE)
        result, timed_out = await adapter.exec_stream(
            cid,
            ["bash", "-c", script, "rollouts-verify", token, "bash /tests/test.sh"],
            stdin=upload,
            max_output=VERIFIER_OUTPUT_CAP,
            timeout_s=task.config.verifier_timeout_sec,
            on_timeout=kill,
        )
        durations["tests_s"] = time.monotonic() - t0
        output = result.output.text()
        if timed_out:
            return VerifyResult(0.0, Verdict.tests_timeout, output, durations)
        if result.exit_code == 90:
            return VerifyResult(None, Verdict.infrastructure, f"setup failed: {output}", durations)
        if result.exit_code == 91:
            note = "graded 0: the workspace did not fit or unpack in the verifier"
            return VerifyResult(0.0, Verdict.graded, _append(output, note), durations)

        t0 = time.monotonic()
        read, read_timed_out = await adapter.exec_stream(
            cid,
            ["bash", "-c", _READ_EVIDENCE],
            collect_stdout=EVIDENCE_CAP + 4096,
            timeout_s=READ_TIMEOUT_S,
        )
        durations["reward_s"] = time.monotonic() - t0
        if read_timed_out or read.stdout_raw is None:
            # Every process was killed before this read: a hang here is the engine's.
            raise RuntimeError("reading the verifier's files timed out")
        evidence = parse_evidence(read.stdout_raw, result.exit_code, is_pytest_task(task))
        g = grade(evidence)
        if g.note:
            output = _append(output, g.note)
        return VerifyResult(
            g.reward,
            Verdict.graded,
            output,
            durations,
            flags=g.flags,
            files={k: _text(v) for k, v in sorted(evidence.files.items())},
        )
    except OutputTooLarge as e:  # the read is capped with head -c: only a broken engine
        return VerifyResult(None, Verdict.infrastructure, f"verifier read: {e}", durations)
    except Exception as e:  # engine or container failure: mask, never a fake zero
        return VerifyResult(
            None, Verdict.infrastructure, f"verifier container failed: {e}", durations
        )
    finally:
        if cid is not None:
            pool.remove_in_background(cid)
        durations["verify_s"] = time.monotonic() - t_start


def _text(data: bytes) -> str:
    if len(data) > EVIDENCE_FILE_CAP:
        data = data[:EVIDENCE_FILE_CAP] + b"\n[... cut ...]"
    return data.decode("utf-8", errors="replace")


def _append(output: str, note: str) -> str:
    buf = CappedBuffer(VERIFIER_OUTPUT_CAP)
    buf.add(f"{output}\n[rollouts] {note}".encode())
    return buf.text()
