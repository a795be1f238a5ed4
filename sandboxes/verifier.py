"""The verifier: run a task's tests on the agent's workspace in a FRESH container.

The agent never had access to this container: /logs/verifier starts empty and tests/ is copied
in only here. The agent's code does run here, so who decides the reward is the design:

- The tests run in their own processes (root, the task's test.sh and whatever it starts) and
  never load the agent's code. The workspace goes to /rollouts/workspace, which the tests do
  not see; /app gets the agent's data files and, for each of its Python modules, a stub
  (verifier_runtime/view.py). Importing a stub starts the tested process
  (verifier_runtime/tested.py) under another user id with no capabilities, confined by
  Landlock where the kernel has it, and the module's functions, classes and objects are used
  through proxies (verifier_runtime/trusted.py, rpc.py). The agent's code cannot write the
  reward or the tests, signal, trace or read the tests' processes, or touch the test runner's
  plugins, hooks or descriptors: it can only answer calls, and the tests judge the answers
  (with decoys against values that equal everything).
- `pytest_guard.py` goes in as /tests/conftest.py (the task's own is loaded beside it) and
  records what pytest saw: a second layer that checks the reward against the tests' results.
- The verifier script is the container's PID 1 and talks to the service over the attached
  stdin/stdout (no exec): the tests' output goes to stderr, and only when test.sh has ended
  and every other process is killed does the script write the verdict, headed by a nonce the
  service sent it, then the reward files and the guard's report, to stdout.
- `reward.py` grades from that evidence, and only infrastructure faults leave no reward.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import io
import py_compile
import secrets
import shlex
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandboxes.backend import AgentCausedSandboxFault, Verdict, VerifyResult
from sandboxes.docker_adapter import (
    CappedBuffer,
    ContainerNotRunning,
    DockerAdapter,
    OutputTooLarge,
    StreamResult,
)
from sandboxes.pool import ContainerPool
from sandboxes.reward import NO_VERDICT, UNGUARDED, VERDICT_FORGED, Evidence, Grade, grade
from sandboxes.task import Task
from sandboxes.workspace_tar import add_files, check_workspace_async, copy_workspace

VERIFIER_OUTPUT_CAP = 16 << 10
EVIDENCE_CAP = 256 << 10  # the tar of /logs/verifier and the guard's report
EVIDENCE_FILE_CAP = 16 << 10  # per file kept in the record
UPLOAD_CHUNK = 1 << 20  # the upload is sent in pieces of this size, never held whole
# After the tests' own limit: time for the kills and the evidence tar before the stream is cut.
READ_GRACE_S = 30.0
GUARD_CONFTEST = "conftest.py"
TASK_CONFTEST = "_task_conftest.py"  # the task's own tests/conftest.py, loaded by the guard
RUNTIME_DIR = "rollouts/lib"  # the verifier runtime, in the container (root's, read-only)
WORKSPACE_DIR = "rollouts/workspace"  # the agent's files as they were; the tests never see it
AUTOLOAD_FLAG = "rollouts/plugin-autoload"  # uploaded when the task asks for plugin autoload
# The tested process switches to another user: the verifier container keeps the capabilities
# to switch (and, for its root processes, to kill what runs as that user when the tests end).
# The agent container has none; after the switch the tested process has none either.
VERIFIER_CAPABILITIES = ["SETUID", "SETGID", "KILL"]
# The tested process's user, a fresh one per verification (verifier_runtime/trusted.py says
# why; sent on stdin, so warm verifier containers stay interchangeable), from a range no image
# or host account uses.
TESTED_UIDS = range(1 << 30, (1 << 30) + (1 << 24))

# How the script starts view.py: loaded as a module, which runs its compiled file (runtime_bytecode)
# where a script would be compiled again (3 ms of CPU in every verification), by the loader
# importlib.util would use (that module and what it imports cost 4 ms more).
_VIEW_START = (
    "import importlib.machinery as m, sys; "
    'loader = m.SourceFileLoader("_rollouts_view", sys.argv[1]); '
    "view = type(sys)(loader.name); view.__file__ = loader.path; "
    "loader.exec_module(view); view.main(sys.argv[2:])"
)

# PID 1 of the verifier container, `bash -c SCRIPT rollouts-verify LIMIT_S LIMIT_US LAYOUT`
# (LAYOUT: view, or plain for the calibration fallback). It reads a line "<nonce> <tested user
# id>" and then the upload on stdin (the service attaches when it takes the container from the
# warm pool), lays out /app, writes "rollouts-began <nonce>" on stdout just before it starts
# the tests, runs them with all their output on stderr, kills every other process, then writes
# the evidence on stdout, which nothing but this process ever holds: a header line
# "rollouts-verdict <nonce> <code> <mode of /logs/verifier> <timed out 0|1>", then a tar of
# /logs/verifier and the guard's report. Being PID 1 it cannot be signalled from
# inside, and when it exits the kernel ends whatever is left. Codes: 90, the fresh container
# could not even make its folders (the infrastructure); 91, the upload did not fit or unpack,
# or /app could not be laid out from it, which only the agent's workspace can cause (ours is
# small and checked); otherwise test.sh's exit status.
_SCRIPT = f"""
trap '' TERM INT HUP
read -r nonce tested_uid
case $tested_uid in ''|*[!0-9]*) tested_uid=64000 ;; esac
export ROLLOUTS_TESTED_UID=$tested_uid  # the tested process's user (verifier_runtime/trusted.py)
verdict() {{ echo "rollouts-verdict $nonce $1 $2 $3"; }}
# What the image left in the evidence folders is removed (rm only when there is something: a
# program start is a few CPU-ms of every trial); install -d makes a folder and sets its mode.
gone() {{ [ ! -e "$1" ] && [ ! -L "$1" ]; }}
if ! {{ {{ gone /logs/verifier && gone /logs/rollouts-guard ||
         rm -rf /logs/verifier /logs/rollouts-guard; }} &&
       install -d -m 700 /logs /tests &&
       install -d -m 755 /logs/verifier /logs/rollouts-guard /app /rollouts; }} >&2; then
  verdict 90 - 0; exit 0
fi
tar -x --no-same-owner -C / -f - >&2 || {{ verdict 91 - 0; exit 0; }}
exec </dev/null
# The workspace is the tested code's writable view of /app (the tests never see it; only data
# files come back from it, view.py's sync); the runtime is read-only to it. view.py sets those
# modes itself where it runs (each program started here costs every verification about a
# CPU-millisecond, ten under gVisor); `modes` does where it does not.
modes() {{ chmod -R a+rX,go-w /{RUNTIME_DIR} >&2 && chmod -R a+rwX /{WORKSPACE_DIR} >&2; }}
report=/logs/rollouts-guard/report.jsonl
if [ "$3" = plain ]; then
  # The calibration fallback (sandboxes/calibration.py): the workspace itself as /app and no
  # tested process, as plain pytest would have it; the service flags the grade `unguarded`.
  modes
  cp -a /{WORKSPACE_DIR}/. /app/ >&2
  echo '{{"event": "view", "plain": true}}' >>"$report"
elif command -v python3 >/dev/null; then
  python3 -I -B -c {shlex.quote(_VIEW_START)} /{RUNTIME_DIR}/view.py /{WORKSPACE_DIR} /app \
    /tests /rollouts/view.json "$report" >&2 || {{ verdict 91 - 0; exit 0; }}
else
  # No Python here, so no tested process either: the tests get the files as they are, and
  # the grade says the sample was unguarded.
  modes
  cp -a /{WORKSPACE_DIR}/. /app/ >&2
  echo '{{"event": "view", "python": false}}' >>"$report"
fi
cd /app
t=${{EPOCHREALTIME/./}}; start=$((10#$t))
# `read -t` on a pipe nobody writes (fd 9) waits as sleep would, without starting a program
# (sleep where the pipe could not be made: a read that fails at once must not end the tests).
exec 9<> <(:)
pause() {{ read -t "$1" -u 9 || [ $? -gt 128 ] || sleep "$1"; }}
# The watchdog: killing everything ends the tests and wakes the wait below.
( pause "$1"; kill -KILL -1 ) >/dev/null 2>&1 &
# pytest loads no plugin it finds by its metadata (a place the tested code may write can be on
# a later session's sys.path) unless the task asks (plugin_autoload); `-p NAME` still loads one.
[ -e /{AUTOLOAD_FLAG} ] || export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
# Nothing of the agent's has run before this line (its files were only read, as data): a
# container that ends without it is replaced once (verifier.py, EndedBeforeTests).
echo "rollouts-began $nonce"
bash -lc 'bash /tests/test.sh' 9<&- >&2 2>&1 &
wait $!
rc=$?
# Builtins only until everything else is dead: the tested code may hold every pid the
# container has left, and a fork that keeps failing ends bash without a verdict. kill(-1)
# from PID 1 reaches every other process in one pass of the kernel, and nothing it reached
# can fork again.
t=${{EPOCHREALTIME/./}}
kill -KILL -1 2>/dev/null
timed_out=0
[ $(( 10#$t - start )) -ge "$2" ] && timed_out=1
# Nothing the tests or the tested code started may live on to write while the evidence is read.
pause 0.05; kill -KILL -1 2>/dev/null
# find, not stat: coreutils' stat uses statx, which gVisor (runsc) answers with EINVAL.
if [ -d /logs/verifier ] && [ ! -L /logs/verifier ]; then
  mode=$(find /logs/verifier -maxdepth 0 -printf '%m')
fi
[ -n "$mode" ] || mode=missing
verdict "$rc" "$mode" "$timed_out"
# What the grade reads goes first (the guard's report, then the reward file; tar adds the reward
# file again inside verifier/), so a large test log of the task's cannot push it past the cap.
cd /logs && tar -c --ignore-failed-read rollouts-guard verifier/reward.txt verifier/reward.json \\
  verifier 2>/dev/null | head -c {EVIDENCE_CAP}
exit 0
"""
_HEADER = b"rollouts-verdict "
_BEGAN = b"rollouts-began "


def verifier_container_args(
    args: dict[str, Any], limit_s: float, plain: bool = False
) -> dict[str, Any]:
    """The agent container's arguments (same image and isolation), with the verifier script as
    PID 1 waiting for its upload on stdin (read from the attached stream, never from logs), a
    tmpfs for the runtime and the workspace, and the capabilities to start the tested process
    as another user. `plain`: the calibration fallback's layout (the workspace as /app, no
    stubs, no tested process)."""
    limit_us = int(limit_s * 1e6)
    layout = "plain" if plain else "view"
    host = dict(args["host_config"])
    tmpfs = dict(host["tmpfs"])
    tmpfs["/rollouts"] = tmpfs["/app"].replace("mode=1777", "mode=755")
    host.update(tmpfs=tmpfs, cap_add=VERIFIER_CAPABILITIES)
    return {
        **args,
        "command": [
            "bash",
            "-c",
            _SCRIPT,
            "rollouts-verify",
            f"{limit_s:.3f}",
            str(limit_us),
            layout,
        ],
        "stdin_open": True,
        "host_config": host,
    }


def _runtime_files() -> dict[str, bytes]:
    """The verifier runtime (sandboxes/verifier_runtime/*.py) by file name."""
    folder = importlib.resources.files("sandboxes").joinpath("verifier_runtime")
    return {f.name: f.read_bytes() for f in folder.iterdir() if f.name.endswith(".py")}


@dataclass(frozen=True)
class Grader:
    """What decides a grade besides the tests: the grading rules (reward.py) and the verifier
    runtime uploaded beside the tests (verifier_runtime/). `version` names the pair, so a
    grading records which grader made it and a regrade after a fix to either shows."""

    rules: Callable[[Evidence], Grade]
    runtime: Mapping[str, bytes]  # file name -> content, uploaded under rollouts/lib/
    version: str


def grader_version(runtime: Mapping[str, bytes], rules_source: bytes) -> str:
    """sha256 (16 hex digits) of the rules' source, the runtime files and the verifier script."""
    h = hashlib.sha256(rules_source + b"\0" + _SCRIPT.encode())
    for name in sorted(runtime):
        h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(runtime[name]).digest())
    return h.hexdigest()[:16]


_bytecode_by_version: dict[str, dict[str, bytes]] = {}


def runtime_bytecode(grader: Grader) -> dict[str, bytes]:
    """The runtime's modules compiled by this interpreter, as `__pycache__/NAME.TAG.pyc` beside
    them: every interpreter of the tests and of the tested code would otherwise compile them
    again (the upload is fresh each time). Hash-checked: a module's bytecode is used only
    while its source has the same content, and only by a Python of this one's cache tag
    (cpython-311), which is also what makes the format the same; any other compiles the source
    as before. Made from the grader's own sources, so it says nothing they do not."""
    if grader.version not in _bytecode_by_version:
        tag = sys.implementation.cache_tag
        out: dict[str, bytes] = {}
        with tempfile.TemporaryDirectory(prefix="rollouts-bytecode-") as tmp:
            for name, source in grader.runtime.items():
                if name == "pytest_guard.py" or not name.endswith(".py") or tag is None:
                    continue  # the guard goes to tests/ as conftest.py, where pytest loads it
                src, pyc = Path(tmp, name), Path(tmp, name + "c")
                src.write_bytes(source)
                py_compile.compile(
                    str(src),
                    cfile=str(pyc),
                    dfile=f"/{RUNTIME_DIR}/{name}",
                    doraise=True,
                    optimize=0,  # as the container runs it, whatever flags the service has
                    invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
                )
                out[f"__pycache__/{name.removesuffix('.py')}.{tag}.pyc"] = pyc.read_bytes()
        _bytecode_by_version[grader.version] = out
    return _bytecode_by_version[grader.version]


@functools.cache
def default_grader() -> Grader:
    """The grader this code ships: reward.grade and sandboxes/verifier_runtime/*.py."""
    runtime = _runtime_files()
    rules = importlib.resources.files("sandboxes").joinpath("reward.py").read_bytes()
    return Grader(grade, runtime, grader_version(runtime, rules))


def plugin_autoload(task: Task) -> bool:
    """Whether the task asks pytest to autoload the plugins it finds installed
    (`[verifier] pytest_plugin_autoload = true` in task.toml); by default it does not."""
    section = task.config.raw.get("verifier")
    return isinstance(section, dict) and section.get("pytest_plugin_autoload") is True


def write_upload(out: _Sender, task: Task, workspace: bytes, grader: Grader | None = None) -> None:
    """One tar, written to `out` a block at a time (never whole in memory): the workspace
    sanitized (it must have passed `check_workspace` with the same prefix) under
    rollouts/workspace/, the verifier runtime under rollouts/lib/ with its bytecode
    (`runtime_bytecode`), and the task's tests under
    tests/ with the pytest guard as tests/conftest.py (the task's own conftest renamed beside
    it); AUTOLOAD_FLAG if the task asks for plugin autoload."""
    grader = grader or default_grader()
    runtime = dict(grader.runtime)
    tests = dict(task.test_files)
    if GUARD_CONFTEST in tests:
        tests[TASK_CONFTEST] = tests.pop(GUARD_CONFTEST)
    tests[GUARD_CONFTEST] = runtime.pop("pytest_guard.py")
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:  # type: ignore[arg-type]
        copy_workspace(workspace, dst, prefix=WORKSPACE_DIR)
        add_files(dst, runtime, prefix=RUNTIME_DIR)
        add_files(dst, runtime_bytecode(grader), prefix=RUNTIME_DIR)
        add_files(dst, tests, prefix="tests")
        if plugin_autoload(task):
            add_files(dst, {AUTOLOAD_FLAG: b""})


def _send_upload(
    line: bytes, task: Task, workspace: bytes, grader: Grader, send: Callable[[bytes], object]
) -> None:
    """The verifier's stdin: the first line, then the upload (`write_upload`)."""
    send(line)
    out = _Sender(send)
    write_upload(out, task, workspace, grader)
    out.flush()


class _Sender:
    """The verifier's stdin as tarfile writes it: gathered into sends of UPLOAD_CHUNK bytes."""

    def __init__(self, send: Callable[[bytes], object]) -> None:
        self._send = send
        self._buf = bytearray()
        self._offset = 0

    def write(self, data: bytes) -> int:
        self._buf += data
        self._offset += len(data)
        if len(self._buf) >= UPLOAD_CHUNK:
            self.flush()
        return len(data)

    def tell(self) -> int:
        return self._offset

    def flush(self) -> None:
        if self._buf:
            self._send(bytes(self._buf))
            self._buf.clear()


def is_pytest_task(task: Task) -> bool:
    return b"pytest" in task.test_files.get("test.sh", b"")


@dataclass(frozen=True)
class ScriptVerdict:
    """The verifier script's header line."""

    code: int
    mode: int | None  # of /logs/verifier; None when it was gone or not a folder
    timed_out: bool


class ForgedVerdict(ValueError):
    """The verdict stream does not start with the script's header and nonce: something in the
    container wrote into it (graded 0, never masked)."""


class EndedBeforeTests(Exception):
    """The verifier container ended before its script began the tests (it did not say it had);
    the message says how it ended."""


def split_began(raw: bytes, nonce: str) -> tuple[bool, bytes]:
    """Whether the script's stdout says the tests began (its line, with this verification's
    nonce, first), and what follows it. Without it, nothing of the agent's ran."""
    line = _BEGAN + nonce.encode() + b"\n"
    return (True, raw[len(line) :]) if raw.startswith(line) else (False, raw)


def parse_header(raw: bytes, nonce: str) -> tuple[ScriptVerdict | None, bytes]:
    """Split the script's stdout into its header and the evidence tar. Nothing at all (None):
    the script never reached the end, because its container died or the engine failed. Bytes
    that are not our header with this verification's nonce raise ForgedVerdict."""
    if not raw:
        return None, b""
    first, _, rest = raw.partition(b"\n")
    parts = first.removeprefix(_HEADER).decode(errors="replace").split(" ")
    if (
        not first.startswith(_HEADER)
        or len(parts) != 4
        or parts[0] != nonce
        or not parts[1].isascii()
        or not parts[1].isdigit()
        or parts[3] not in ("0", "1")
    ):
        raise ForgedVerdict(f"the verifier's stdout began with {first[:120]!r}")
    octal = parts[2] != "" and set(parts[2]) <= set("01234567")
    mode = int(parts[2], 8) if octal else None  # "missing" (or anything else): no folder
    return ScriptVerdict(int(parts[1]), mode, parts[3] == "1"), rest


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
    grader: Grader | None = None,
    plain: bool = False,
) -> VerifyResult:
    """Grade `workspace_tar` in a fresh container made from the agent container's `args`,
    with `grader` (default: this code's). The result names the grader and the tests used.
    `plain`: in the calibration fallback (sandboxes/calibration.py), flagged `unguarded`."""
    grader = grader or default_grader()
    result = await _run_verifier(adapter, pool, args, task, workspace_tar, grader, plain)
    result.grader_version, result.tests_digest = grader.version, task.tests_digest
    return result


async def _run_verifier(
    adapter: DockerAdapter,
    pool: ContainerPool,
    args: dict[str, Any],
    task: Task,
    workspace_tar: bytes,
    grader: Grader,
    plain: bool,
) -> VerifyResult:
    durations: dict[str, float] = {}
    t_start = time.monotonic()
    if "test.sh" not in task.test_files:
        return VerifyResult(None, Verdict.tests_broken, f"task {task.id}: tests/test.sh missing")
    try:
        # The workspace came out of the agent's container: too large or unreadable is the
        # agent's doing (graded 0), and decoding it is bounded and stops when we are cancelled.
        # Checked here, before a container is taken, and written sanitized only while it is
        # sent (on the stream's thread), so the host never holds a second copy of it.
        await check_workspace_async(workspace_tar, prefix=WORKSPACE_DIR)
    except AgentCausedSandboxFault as e:
        return VerifyResult(0.0, Verdict.graded, f"[rollouts] graded 0: {e}")
    async with pool.verifying():
        attempt = functools.partial(
            _verify_in_container, adapter, pool, args, task, workspace_tar, durations, t_start
        )
        try:
            return await attempt(grader, plain)
        except EndedBeforeTests as first:
            # Nothing of the agent's ran in that container (the script had not begun the tests),
            # so a fresh one is no second roll for its code: only for the engine's fault. How
            # a second end is judged: _attach_verifier and _script_died.
            took = time.monotonic() - t_start
            result = await attempt(grader, plain, first=first)
            result.durations["first_attempt_s"] = took
            result.output = _append(result.output, f"{first}; graded in a fresh container")
            return result


async def _verify_in_container(
    adapter: DockerAdapter,
    pool: ContainerPool,
    args: dict[str, Any],
    task: Task,
    workspace_tar: bytes,
    durations: dict[str, float],
    t_start: float,
    grader: Grader,
    plain: bool,
    first: EndedBeforeTests | None = None,
) -> VerifyResult:
    """One verifier container's grade. Raises EndedBeforeTests when it ended before the tests
    began, unless `first` (this is the attempt after such an end: a new container, not a warm
    one, which may have died idle as the first did)."""
    limit_s = task.config.verifier_timeout_sec
    cid: str | None = None
    try:
        t0 = time.monotonic()
        vargs = verifier_container_args(args, limit_s, plain)
        cid, _ = await pool.acquire(vargs, warm=first is None)
        durations["acquire_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        nonce = secrets.token_hex(16)
        tested_uid = TESTED_UIDS[secrets.randbelow(len(TESTED_UIDS))]
        result, cut = await _attach_verifier(
            adapter,
            cid,
            first,
            stdin=functools.partial(
                _send_upload, f"{nonce} {tested_uid}\n".encode(), task, workspace_tar, grader
            ),
            max_output=VERIFIER_OUTPUT_CAP,
            collect_stdout=EVIDENCE_CAP + 4096,
            timeout_s=limit_s + READ_GRACE_S,
        )
        durations["tests_s"] = time.monotonic() - t0
        output = result.output.text()
        try:
            began, stdout = split_began(result.stdout_raw or b"", nonce)
            header, tar_bytes = parse_header(stdout, nonce)
        except ForgedVerdict as e:
            note = f"graded 0: {e}"
            return VerifyResult(
                0.0, Verdict.graded, _append(output, note), durations, flags=[VERDICT_FORGED]
            )
        if header is None:
            if not began and first is None:
                raise EndedBeforeTests(await _how_it_ended(adapter, cid, output))
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
        g = grader.rules(evidence)
        if plain:
            g = fallback_grade(g)
        if g.note:
            output = _append(output, g.note)
        return VerifyResult(
            g.reward,
            Verdict.graded,
            output,
            durations,
            flags=g.flags,
            files={k: _text(v) for k, v in sorted(evidence.files.items())},
            isolation=g.layers,
        )
    except EndedBeforeTests:
        raise
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


def fallback_grade(g: Grade) -> Grade:
    """A grade made in the calibration fallback: the agent's code ran in the tests' process, so
    whatever the evidence says, the grade is flagged `unguarded` (set here, out of its reach)."""
    flags = g.flags if UNGUARDED in g.flags else [*g.flags, UNGUARDED]
    note = (
        "unguarded: graded in the calibration fallback (the task's oracle fails through the "
        "boundary, so the tests ran with the agent's code in their own process)"
    )
    if g.reward == 0 and g.note:  # why the 0, as the rules said
        note = f"{note}; {g.note}"
    return Grade(g.reward, flags, note, g.layers)


async def _script_died(
    adapter: DockerAdapter, cid: str, output: str, durations: dict[str, float]
) -> VerifyResult:
    """The stream ended without the script's verdict. Whose doing that was, as for the agent
    container (docker_backend's `_classify`): a container the engine still answers for, not
    being removed and no longer running, was ended from inside, where the tested code runs (it
    can exhaust the container's memory, or its pids so that PID 1 cannot fork, or end the
    Sentry under gVisor): graded 0, never masked, whatever the exit. An engine that does not
    answer, a container removed from outside, or a stream that ended while the script still
    runs are the infrastructure's doing, and masked."""
    try:
        state = (await adapter.inspect_container(cid)).get("State") or {}
    except Exception as e:
        gone = f"verifier container gone: {e}"
        return VerifyResult(None, Verdict.infrastructure, gone, durations)
    status = state.get("Status")
    if state.get("Running") or status in ("removing", "dead"):
        return VerifyResult(
            None,
            Verdict.infrastructure,
            f"the verifier's stream ended without a verdict (state {status}): {output}",
            durations,
        )
    if state.get("OOMKilled"):
        why = "the tests exhausted the verifier container's memory"
    else:
        why = f"the verifier container ended without a verdict (exit code {state.get('ExitCode')})"
    note = f"graded 0: {why}"
    return VerifyResult(0.0, Verdict.graded, _append(output, note), durations, flags=[NO_VERDICT])


async def _attach_verifier(
    adapter: DockerAdapter, cid: str, first: EndedBeforeTests | None, **kwargs: Any
) -> tuple[StreamResult, bool]:
    """The verifier script's stream. A container that is no longer running when it is attached
    (a warm one that died idle) ended before the tests began; so did a second one, new, but
    nothing was sent to it: the engine's fault, masked."""
    try:
        return await adapter.attach_stream(cid, **kwargs)
    except ContainerNotRunning:
        if first is None:
            raise EndedBeforeTests(await _how_it_ended(adapter, cid, "")) from None
        raise  # nothing was sent to the new one either: the engine's fault, masked


def longest_verification_s(limit_s: float) -> float:
    """The longest the verifier reads a verification's streams (a first container that ends
    before the tests began, cut at its timeout, then a new one), container creation aside."""
    return 2 * (limit_s + READ_GRACE_S)


async def _how_it_ended(adapter: DockerAdapter, cid: str, output: str) -> str:
    """For the record: a verifier container that ended before the tests began, as the engine
    tells it (its state and exit code) and with what it wrote."""
    try:
        state = (await adapter.inspect_container(cid)).get("State") or {}
        how = f"state {state.get('Status')}, exit code {state.get('ExitCode')}"
    except Exception as e:
        how = f"not inspected: {e}"
    said = f", output {output.strip()[:200]!r}" if output.strip() else ""
    return f"the first verifier container ended before the tests began ({how}{said})"


def _text(data: bytes) -> str:
    if len(data) > EVIDENCE_FILE_CAP:
        data = data[:EVIDENCE_FILE_CAP] + b"\n[... cut ...]"
    return data.decode("utf-8", errors="replace")


def _append(output: str, note: str) -> str:
    buf = CappedBuffer(VERIFIER_OUTPUT_CAP)
    buf.add(f"{output}\n[rollouts] {note}".encode())
    return buf.text()
