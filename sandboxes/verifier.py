"""The verifier: run a task's tests on the agent's workspace in a FRESH container.

The agent never had access to this container: /logs/verifier starts empty and tests/ is copied
in only here. The tested code does run here, though, as root and often inside pytest's own
process, so the reward is read through a channel it cannot write:

- `pytest_guard.py` goes in as /tests/conftest.py and confines the pytest process (Landlock: no
  writes beneath /logs or /tests, no signals to test.sh) before any tested code is imported;
- the verifier script is the container's PID 1 and talks to the service over the attached
  stdin/stdout (no exec): the tests' output goes to stderr, and only when test.sh has ended
  and every other process is killed does the script write the reward files and the guard's
  report to stdout, which no tested process ever holds (Landlock also denies it the other
  processes' /proc/PID/fd);
- `reward.py` grades from that evidence, and only infrastructure faults leave no reward.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import io
import tarfile
import time
from dataclasses import dataclass
from typing import Any

from sandboxes.backend import Verdict, VerifyResult
from sandboxes.docker_adapter import CappedBuffer, DockerAdapter, OutputTooLarge
from sandboxes.pool import ContainerPool
from sandboxes.reward import Evidence, grade
from sandboxes.task import Task
from sandboxes.workspace_tar import WorkspaceTooLarge, build_tar, sanitize_workspace

VERIFIER_OUTPUT_CAP = 16 << 10
EVIDENCE_CAP = 256 << 10  # the tar of /logs/verifier and the guard's report
EVIDENCE_FILE_CAP = 16 << 10  # per file kept in the record
# After the tests' own limit: time for the kills and the evidence tar before the stream is cut.
READ_GRACE_S = 30.0
GUARD_CONFTEST = "conftest.py"
TASK_CONFTEST = "_task_conftest.py"  # the task's own tests/conftest.py, run by the guard

# PID 1 of the verifier container, `bash -c SCRIPT rollouts-verify LIMIT_S LIMIT_US`. It waits
# for the upload on stdin (the service attaches when it takes the container from the warm
# pool), runs the tests with all their output on stderr, kills every other process, then writes the
# evidence on stdout, which nothing but this process ever holds: a header line
# "rollouts-verdict <code> <mode of /logs/verifier> <timed out 0|1>", then a tar of
# /logs/verifier and the guard's report. Being PID 1 it cannot be signalled from inside, and
# when it exits the kernel ends whatever is left. Codes: 90, the fresh container could not even
# make its folders (the infrastructure); 91, the upload did not fit or unpack, which only the
# agent's workspace can cause (ours is small and checked); otherwise test.sh's exit status.
_SCRIPT = f"""
trap '' TERM INT HUP
verdict() {{ echo "rollouts-verdict $1 $2 $3"; }}
if ! {{ rm -rf /logs/verifier /logs/rollouts-guard &&
       mkdir -p /logs/verifier /logs/rollouts-guard /tests /app; }} >&2; then
  verdict 90 - 0; exit 0
fi
tar -x --no-same-owner -C / -f - >&2 || {{ verdict 91 - 0; exit 0; }}
exec </dev/null
cd /app
now() {{ local t=${{EPOCHREALTIME/./}}; echo $((10#$t)); }}
start=$(now)
# The watchdog is started here, outside the guard's Landlock domain: the tested code cannot
# signal it. Killing everything ends the tests and wakes the wait below.
( sleep "$1"; kill -KILL -1 ) >/dev/null 2>&1 &
bash -lc 'bash /tests/test.sh' >&2 2>&1 &
wait $!
rc=$?
timed_out=0
[ $(( $(now) - start )) -ge "$2" ] && timed_out=1
# Nothing the tested code started may live on to write while the evidence is read.
kill -KILL -1 2>/dev/null; sleep 0.05; kill -KILL -1 2>/dev/null
if [ -d /logs/verifier ] && [ ! -L /logs/verifier ]; then
  mode=$(stat -c '%a' /logs/verifier)
else
  mode=missing
fi
verdict "$rc" "$mode" "$timed_out"
cd /logs && tar -c --ignore-failed-read verifier rollouts-guard 2>/dev/null | head -c {EVIDENCE_CAP}
exit 0
"""
_HEADER = b"rollouts-verdict "


def verifier_container_args(args: dict[str, Any], limit_s: float) -> dict[str, Any]:
    """The agent container's arguments (same image and isolation), with the verifier script as
    PID 1 waiting for its upload on stdin (read from the attached stream, never from logs)."""
    limit_us = int(limit_s * 1e6)
    return {
        **args,
        "command": ["bash", "-c", _SCRIPT, "rollouts-verify", f"{limit_s:.3f}", str(limit_us)],
        "stdin_open": True,
    }


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


@dataclass(frozen=True)
class ScriptVerdict:
    """The verifier script's header line."""

    code: int
    mode: int | None  # of /logs/verifier; None when it was gone or not a folder
    timed_out: bool


def parse_header(raw: bytes) -> tuple[ScriptVerdict | None, bytes]:
    """Split the script's stdout into its header and the evidence tar. No header (None): the
    script never reached the end, because its container died or the engine failed."""
    first, _, rest = raw.partition(b"\n")
    if not first.startswith(_HEADER):
        return None, b""
    parts = first[len(_HEADER) :].decode(errors="replace").split()
    if len(parts) != 3 or not parts[0].isdigit():
        return None, b""
    mode = int(parts[1], 8) if parts[1].isdigit() else None
    return ScriptVerdict(int(parts[0]), mode, parts[2] == "1"), rest


def parse_evidence(header: ScriptVerdict, tar_bytes: bytes, pytest_task: bool) -> Evidence:
    """The evidence tar (possibly cut at the cap) with the header's exit status and mode."""
    ev = Evidence(
        tests_exit=header.code,
        verifier_dir_mode=header.mode,
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
    """Grade `workspace_tar` in a fresh container made from the agent container's `args`."""
    durations: dict[str, float] = {}
    t_start = time.monotonic()
    if "test.sh" not in task.test_files:
        return VerifyResult(None, Verdict.tests_broken, f"task {task.id}: tests/test.sh missing")
    try:
        # CPU work on the tars: off the event loop, which other samples are waiting on.
        upload = await asyncio.to_thread(verifier_upload, task, workspace_tar)
    except WorkspaceTooLarge as e:  # the agent filled /app: graded, never masked
        return VerifyResult(0.0, Verdict.graded, f"[rollouts] graded 0: {e}")
    except Exception as e:  # a malformed workspace tar is the infrastructure's fault
        return VerifyResult(None, Verdict.infrastructure, f"bad workspace archive: {e}")

    async with pool.verifying():
        return await _verify_in_container(adapter, pool, args, task, upload, durations, t_start)


async def _verify_in_container(
    adapter: DockerAdapter,
    pool: ContainerPool,
    args: dict[str, Any],
    task: Task,
    upload: bytes,
    durations: dict[str, float],
    t_start: float,
) -> VerifyResult:
    limit_s = task.config.verifier_timeout_sec
    cid: str | None = None
    try:
        t0 = time.monotonic()
        cid, _ = await pool.acquire(verifier_container_args(args, limit_s))
        durations["acquire_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        result, cut = await adapter.attach_stream(
            cid,
            stdin=upload,
            max_output=VERIFIER_OUTPUT_CAP,
            collect_stdout=EVIDENCE_CAP + 4096,
            timeout_s=limit_s + READ_GRACE_S,
        )
        durations["tests_s"] = time.monotonic() - t0
        output = result.output.text()
        header, tar_bytes = parse_header(result.stdout_raw or b"")
        if header is None:
            if cut:  # the script's own watchdog did not end it: something held it, as before
                return VerifyResult(0.0, Verdict.tests_timeout, output, durations)
            return await _script_died(adapter, cid, output, durations)
        if header.timed_out:
            return VerifyResult(0.0, Verdict.tests_timeout, output, durations)
        if header.code == 90:
            return VerifyResult(None, Verdict.infrastructure, f"setup failed: {output}", durations)
        if header.code == 91:
            note = "graded 0: the workspace did not fit or unpack in the verifier"
            return VerifyResult(0.0, Verdict.graded, _append(output, note), durations)
        evidence = parse_evidence(header, tar_bytes, is_pytest_task(task))
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
    except OutputTooLarge as e:  # the evidence is capped with head -c: only a broken engine
        return VerifyResult(None, Verdict.infrastructure, f"verifier read: {e}", durations)
    except Exception as e:  # engine or container failure: mask, never a fake zero
        return VerifyResult(
            None, Verdict.infrastructure, f"verifier container failed: {e}", durations
        )
    finally:
        if cid is not None:
            pool.remove_in_background(cid)
        durations["verify_s"] = time.monotonic() - t_start


async def _script_died(
    adapter: DockerAdapter, cid: str, output: str, durations: dict[str, float]
) -> VerifyResult:
    """The stream ended without the script's verdict. The tested code can end the script only
    by exhausting the container's memory (the kernel's OOM killer); anything else is the
    engine's doing or a removal from outside, and is masked."""
    try:
        state = (await adapter.inspect_container(cid)).get("State") or {}
    except Exception as e:
        gone = f"verifier container gone: {e}"
        return VerifyResult(None, Verdict.infrastructure, gone, durations)
    if state.get("OOMKilled"):
        note = "graded 0: the tests exhausted the verifier container's memory"
        return VerifyResult(0.0, Verdict.graded, _append(output, note), durations)
    return VerifyResult(
        None,
        Verdict.infrastructure,
        f"the verifier script ended without a verdict (state {state.get('Status')}): {output}",
        durations,
    )


def _text(data: bytes) -> str:
    if len(data) > EVIDENCE_FILE_CAP:
        data = data[:EVIDENCE_FILE_CAP] + b"\n[... cut ...]"
    return data.decode("utf-8", errors="replace")


def _append(output: str, note: str) -> str:
    buf = CappedBuffer(VERIFIER_OUTPUT_CAP)
    buf.add(f"{output}\n[rollouts] {note}".encode())
    return buf.text()
