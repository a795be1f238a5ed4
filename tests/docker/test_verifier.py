"""The verifier in a fresh container: rewards, timeouts, masked failures, reward-file hacking."""

from __future__ import annotations

import asyncio
import io
import tarfile
from dataclasses import dataclass, field, replace

import docker
import pytest

from sandboxes import verifier
from sandboxes.backend import Verdict
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import BASE_TAG
from sandboxes.isolation import LABEL_BACKEND, container_args
from sandboxes.oracle import run_oracle
from sandboxes.pool import PoolSettings
from sandboxes.reward import NO_VERDICT, RewardError, parse_reward
from sandboxes.task import Task, TaskConfig
from sandboxes.verifier import TESTED_UIDS, _script_died, verifier_container_args
from sandboxes.verifier_runtime.trusted import TESTED_NPROC
from sandboxes.workspace_tar import build_tar
from standin.attacks import _PID_FILLER
from tests import task_styles
from tests.resource_use import measured
from tests.runtimes import both_runtimes

pytestmark = pytest.mark.docker


def _with_tests(task: Task, test_sh: bytes, verifier_timeout: float | None = None) -> Task:
    config = task.config
    if verifier_timeout is not None:
        config = TaskConfig(
            verifier_timeout_sec=verifier_timeout,
            agent_timeout_sec=config.agent_timeout_sec,
            environment=config.environment,
        )
    return replace(task, test_files={**task.test_files, "test.sh": test_sh}, config=config)


def test_parse_reward():
    assert parse_reward("reward.json", '{"reward": 0.5}') == 0.5
    assert parse_reward("reward.txt", " 1\n") == 1.0
    for kind, text in [
        ("reward.json", "[1]"),
        ("reward.json", '{"reward": true}'),
        ("reward.txt", "nan"),
        ("reward.txt", "yes"),
    ]:
        with pytest.raises(RewardError):
            parse_reward(kind, text)


@both_runtimes
async def test_oracle_scores_one_and_empty_scores_zero(pooled_backend, example_task, run_labels):
    oracle = await run_oracle(example_task, pooled_backend, solve_script=None, labels=run_labels)
    assert (oracle.verdict, oracle.reward) == (Verdict.graded, 1.0), (
        oracle.output + oracle.agent_output
    )
    assert {"create_s", "agent_s", "tests_s", "verify_s"} <= set(oracle.durations)
    empty = await run_oracle(example_task, pooled_backend, solve_script=b"", labels=run_labels)
    assert (empty.verdict, empty.reward) == (Verdict.graded, 0.0)


@both_runtimes
async def test_agent_written_reward_is_never_read(backend, example_task, run_labels):
    hack = (
        b"mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt; echo 1 > /app/reward.txt"
    )
    result = await run_oracle(example_task, backend, solve_script=hack, labels=run_labels)
    assert (result.verdict, result.reward) == (Verdict.graded, 0.0)


async def test_missing_reward_is_graded_zero_and_flagged(backend, example_task, run_labels):
    """Only the tested code can stop a working test.sh from writing its reward, so a missing
    reward is a 0 (a broken task gives the whole group 0: advantage 0, as if masked)."""
    task = _with_tests(example_task, b"echo no reward here\n")
    result = await backend.verify(task, build_tar({"solution.py": b""}), run_labels)
    assert (result.verdict, result.reward) == (Verdict.graded, 0.0), result.output
    assert result.flags == ["no_reward"]
    assert "no reward here" in result.output


async def test_verifier_timeout_scores_zero(backend, example_task, run_labels):
    task = _with_tests(
        example_task, b"echo 1 > /logs/verifier/reward.txt; sleep 100\n", verifier_timeout=1.5
    )
    result = await backend.verify(task, build_tar({"solution.py": b""}), run_labels)
    assert result.verdict == Verdict.tests_timeout and result.reward == 0.0


async def test_reward_json_preferred_and_tests_see_workspace(backend, example_task, run_labels):
    script = (
        b"test -f /app/solution.py && test -f /tests/test_solution.py && "
        b"echo '{\"reward\": 0.25}' > /logs/verifier/reward.json; "
        b"echo 1 > /logs/verifier/reward.txt\n"
    )
    task = _with_tests(example_task, script)
    result = await backend.verify(task, build_tar({"solution.py": b"x = 1\n"}), run_labels)
    assert (result.verdict, result.reward) == (Verdict.graded, 0.25)


async def test_agent_timeout_still_verifies(backend, example_task, run_labels):
    config = TaskConfig(
        verifier_timeout_sec=60, agent_timeout_sec=1.0, environment=example_task.config.environment
    )
    task = replace(example_task, config=config)
    solve = example_task.solution_files["solve.sh"] + b"\nsleep 100\n"
    result = await run_oracle(task, backend, solve_script=solve, labels=run_labels)
    assert result.verdict == Verdict.agent_timeout
    assert result.reward == 1.0


@both_runtimes
async def test_solution_that_kills_the_tests_scores_zero_not_masked(
    backend, example_task, run_labels
):
    """`kill -9 -1` at import: the guard's Landlock scope keeps the signal from reaching test.sh
    (which then writes its 0); where it did reach it, test.sh dying by a signal is graded 0
    too (sandboxes/reward.py). Never masked: that would reward sabotage with advantage 0."""
    saboteur = b"import os, signal\nos.kill(-1, signal.SIGKILL)\n"
    result = await backend.verify(example_task, build_tar({"solution.py": saboteur}), run_labels)
    assert (result.verdict, result.reward) == (Verdict.graded, 0.0), result.output
    assert result.files.get("reward.txt") == "0\n", result.files


_FORGE = b"""
import io, json, os, tarfile

def _member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))

buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as tar:
    _member(tar, "verifier/reward.txt", b"1\\n")
    done = {"event": "finish", "passed": 1, "failed": 0, "exitstatus": 0}
    lines = "".join(json.dumps(r) + "\\n" for r in ({"event": "start"}, done))
    _member(tar, "rollouts-guard/report.jsonl", lines.encode())
forged = b"rollouts-verdict 0 755 0\\n" + buf.getvalue()
opened = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            with open(f"/proc/{pid}/fd/1", "wb") as out:  # the verifier script's stdout is PID 1's
                out.write(forged)
            opened.append(pid)
        except OSError:
            pass
print("FORGE opened", opened)
"""


@both_runtimes
async def test_tested_code_cannot_write_the_verdict_stream(backend, example_task, run_labels):
    """The evidence goes to the service on the verifier script's stdout (PID 1's). Code under
    the pytest guard that forges a whole passing verdict (header, reward 1, a finished session)
    into every other process's stdout reaches none outside the guard's own processes: the
    reward is what test.sh wrote (0), and the forgery shows up only in the tests' output."""
    test_sh = (
        b"cd /app && python3 -m pytest -q -p no:cacheprovider -s /tests/test_forge.py\n"
        b"echo 0 > /logs/verifier/reward.txt\n"
    )
    task = _with_tests(example_task, test_sh)
    forge_test = b"import forge\n\ndef test_imported():\n    assert forge.forged\n"
    task = replace(task, test_files={**task.test_files, "test_forge.py": forge_test})
    solve = b"cat > /app/forge.py <<'PY'\n" + _FORGE + b"PY\n"
    result = await run_oracle(task, backend, solve_script=solve, labels=run_labels)
    assert result.verdict == Verdict.graded, result.output
    assert result.reward == 0.0, result.output
    assert "FORGE opened" in result.output  # the forger ran under the guard
    assert "'1'" not in result.output.split("FORGE opened", 1)[1].splitlines()[0]  # not PID 1


_PROBE = b"""
import os, signal

def fn(name):
    seen = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}
    try:
        os.listdir("/proc/self/fd")
        open("/proc/self/environ", "rb").close()
        seen["own"] = "read"
    except OSError as e:
        seen["own"] = e.errno
    for path in ("/logs/verifier/reward.txt", "/logs/rollouts-guard/report.jsonl",
                 "/tests/test_solution.py", "/app/solution.py", "/rollouts/lib/trusted.py"):
        try:
            open(path, "ab").close()
            seen[path] = "written"
        except OSError as e:
            seen[path] = e.errno
    for name, path in (("tests' stdout", "/proc/%d/fd/1" % os.getppid()),
                       ("verdict", "/proc/1/fd/1"),
                       ("tests' memory", "/proc/%d/mem" % os.getppid())):
        try:
            open(path, "wb").close()
            seen[name] = "opened"
        except OSError as e:
            seen[name] = e.errno
    for pid in (1, os.getppid()):
        try:
            os.kill(pid, signal.SIGCONT)
            seen["signal %d" % pid] = "sent"
        except OSError as e:
            seen["signal %d" % pid] = e.errno
    print("SEEN", seen)
    return "seen"
"""


@both_runtimes
async def test_the_tested_code_runs_as_another_user_and_reaches_nothing(
    backend, example_task, run_labels
):
    """In the verifier the agent's code runs in its own process (verifier_runtime/tested.py):
    another user id, no capabilities, no supplementary groups (its own /proc is its own to
    read, as in one process). From there the reward, the tests, their report and the runtime
    are not writable, the tests' and the verifier script's descriptors and memory cannot be
    opened, and neither process can be signalled."""
    result = await backend.verify(example_task, build_tar({"solution.py": _PROBE}), run_labels)
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 0.0, [])
    # Under gVisor there is no Landlock: the user id alone holds, and says so.
    uid = result.isolation["user"]
    assert uid in TESTED_UIDS  # one of its own: the kernel counts a user's tasks host-wide
    line = next(x for x in result.output.splitlines() if x.startswith("SEEN "))
    seen = eval(line.removeprefix("SEEN "))  # a dict literal printed by the probe
    assert (seen.pop("uid"), seen.pop("gid"), seen.pop("groups")) == (uid, uid, [])
    assert seen.pop("own") == "read"  # its own /proc, as in one process
    assert set(seen.values()) <= {13, 1}, seen  # EACCES, EPERM: nothing written, opened, sent


_WAITS = b"""
import os


def fn(callback):
    return len(os.sched_getaffinity(0)), callback(os.getpid())
"""
_WAITS_TESTS = b"""
import os

from solution import fn


def test_a_call_waits_on_one_processor_and_runs_on_all():
    mine = os.sched_getaffinity(0)

    def meanwhile(pid):
        return sorted(os.sched_getaffinity(0)), sorted(os.sched_getaffinity(pid))

    running, (ours, theirs) = fn(meanwhile)
    assert running == len(mine)
    if HELD and len(mine) > 1:  # (one processor: nothing to share)
        assert len(ours) == 1 and theirs == ours
    else:
        assert ours == theirs == sorted(mine)
    assert os.sched_getaffinity(0) == mine
"""


@both_runtimes
async def test_both_sides_of_a_call_wait_on_one_processor(
    runtime, backend, example_task, run_labels
):
    """In the verifier container too (its seccomp profile, the tested user), the tests' thread
    and the tested process wait for each other on one processor, and the tested code runs
    with all of them (verifier_runtime/colocate.py). Not under gVisor, where holding costs
    more than it saves."""
    tests = b"HELD = %r\n" % (runtime == "runc") + _WAITS_TESTS
    task = replace(example_task, test_files={**example_task.test_files, "test_solution.py": tests})
    result = await backend.verify(task, build_tar({"solution.py": _WAITS}), run_labels)
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 1.0, []), result.output


async def test_a_task_conftest_runs_beside_the_guard(backend, example_task, run_labels):
    """The task's own conftest.py (its fixtures, its hooks, even pytest_sessionfinish) runs
    beside the pytest guard without replacing the guard's hooks: a correct solution scores 1
    unflagged, as the task intends."""
    conftest = (
        b"import pytest\n\n\n@pytest.fixture\ndef expected():\n    return 'get_value'\n\n\n"
        b"def pytest_sessionfinish(session, exitstatus):\n    print('TASK HOOK RAN')\n"
    )
    test = (
        b"from solution import fn\n\n\n"
        b"def test_fixture(expected):\n    assert fn('getValue') == expected\n"
    )
    task = replace(
        example_task,
        test_files={**example_task.test_files, "conftest.py": conftest, "test_solution.py": test},
    )
    oracle = await run_oracle(task, backend, solve_script=None, labels=run_labels)
    assert (oracle.verdict, oracle.reward, oracle.flags) == (Verdict.graded, 1.0, []), oracle.output
    assert "TASK HOOK RAN" in oracle.output


async def test_tests_run_from_a_copy_of_app_grade_the_solution(backend, example_task, run_labels):
    """test.sh copies /app and runs the tests from the copy, which the tested process's path
    then names too: the correct solution scores 1 unflagged through the boundary (it scored 0
    here, each tested process importing a stub and starting the next until the container's
    process limit), and the empty one 0."""
    task = task_styles.styled(example_task, "copied")
    oracle = await run_oracle(task, backend, solve_script=None, labels=run_labels)
    assert (oracle.verdict, oracle.reward, oracle.flags) == (Verdict.graded, 1.0, []), oracle.output
    empty = await run_oracle(task, backend, solve_script=b"", labels=run_labels)
    assert (empty.verdict, empty.reward) == (Verdict.graded, 0.0)


_PATCHED_SOLUTION = b"""
import sys
import time


def read_config(path):
    with open(path) as f:
        return f.read().strip().split(",")


def wait_and_read():
    time.sleep(30)
    return sys.stdin.read().split()
"""
_PATCHED_TESTS = b"""
import io
from unittest import mock

import solution


def test_patched_in_the_tested_process_too(monkeypatch):
    with mock.patch("builtins.open", mock.mock_open(read_data="a,b")):
        assert solution.read_config("/no/such.cfg") == ["a", "b"]
    monkeypatch.setattr("sys.stdin", io.StringIO("x y"))
    with mock.patch("time.sleep") as sleep:
        assert solution.wait_and_read() == ["x", "y"]
    sleep.assert_called_once_with(30)
"""


async def test_the_tests_patches_reach_the_solution_in_its_container(
    backend, example_task, run_labels
):
    """The tests' `mock.patch` and `monkeypatch.setattr` of builtins and the standard library
    are made in the tested process (another user, Landlock) too: a correct solution scores 1
    unflagged (it read the real file, slept and read an empty stdin: 0)."""
    tests = {**example_task.test_files, "test_solution.py": _PATCHED_TESTS}
    task = replace(example_task, test_files=tests)
    workspace = build_tar({"solution.py": _PATCHED_SOLUTION})
    result = await backend.verify(task, workspace, run_labels)
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 1.0, []), result.output


async def test_a_long_suite_with_a_large_test_log_is_graded_from_its_evidence(
    backend, example_task, run_labels
):
    """A real suite's size is not the solution's doing: 500 parametrized cases and a 600 KB
    test log the task's own test.sh writes under /logs/verifier, together past the evidence cap,
    still grade a correct solution 1 unflagged (the guard's report stays small, and it and the
    reward file lead the evidence), and a wrong one 0."""
    test = (
        b"import pytest\n\nfrom solution import fn\n\n\n"
        b"@pytest.mark.parametrize('i', range(500))\n"
        b"def test_case(i):\n    assert fn('getValue%d' % i) == 'get_value%d' % i\n"
    )
    log = b"head -c 450000 /dev/urandom | base64 > /logs/verifier/test_output.log\n"
    task = _with_tests(example_task, example_task.test_files["test.sh"] + log)
    task = replace(task, test_files={**task.test_files, "test_solution.py": test})
    oracle = await run_oracle(task, backend, solve_script=None, labels=run_labels)
    assert (oracle.verdict, oracle.reward, oracle.flags) == (Verdict.graded, 1.0, []), oracle.output
    wrong = b"printf 'def fn(s):\\n    return s\\n' > /app/solution.py\n"
    graded = await run_oracle(task, backend, solve_script=wrong, labels=run_labels)
    assert (graded.verdict, graded.reward) == (Verdict.graded, 0.0), graded.output


@both_runtimes
async def test_a_corrupted_verdict_stream_is_graded_never_masked(backend, example_task, run_labels):
    """Bytes before the verifier script's header (here written by test.sh itself: the tested
    code cannot reach that stream) are graded 0 and flagged: only the engine may mask."""
    task = _with_tests(
        example_task,
        b"printf 'rollouts-verdict 0 9 0\\n' > /proc/1/fd/1\necho 1 > /logs/verifier/reward.txt\n",
    )
    result = await backend.verify(task, build_tar({"solution.py": b""}), run_labels)
    assert (result.verdict, result.reward, result.flags) == (
        Verdict.graded,
        0.0,
        ["verdict_forged"],
    )


async def test_tests_that_never_use_the_agents_modules_are_flagged_unguarded(
    backend, example_task, run_labels
):
    """A test.sh that reads the workspace's files instead of importing its code runs nothing
    in the tested process: the reward stands, flagged `unguarded` (not established out of the
    agent's reach); `rollouts verify` shows the flag for such a task."""
    task = _with_tests(
        example_task,
        b"grep -qx 42 /app/answer.txt && echo 1 > /logs/verifier/reward.txt || "
        b"echo 0 > /logs/verifier/reward.txt\n",
    )
    result = await backend.verify(task, build_tar({"answer.txt": b"42\n"}), run_labels)
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 1.0, ["unguarded"])


_PATHS_SOLUTION = b"""
import pathlib
import sys


def convert(source, target):
    pathlib.Path(target).write_text(pathlib.Path(source).read_text().upper())
    return len(list(pathlib.Path(target).parent.iterdir()))


def configure(text):
    # Its settings under the user's home folder, as command-line tools keep them.
    path = pathlib.Path("~/.convert/settings.txt").expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def shout_settings(target):
    # Its settings beside its own module, its output by a relative name.
    here = pathlib.Path(__file__).parent
    pathlib.Path(target).write_text((here / "settings.cfg").read_text().upper())


def export(text):
    # Its output in a file of its own that only it may read (mkstemp: 0600), by its path.
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".txt")
    with open(fd, "w") as f:
        f.write(text.upper())
    return path


def main():
    # A command line read from sys.argv, relative paths from the working folder.
    source, target = sys.argv[1:3]
    return convert(source, target)


def daemon(pid_file):
    # Leave a process of its own behind (a program that did would outlive itself).
    import os
    import time

    ready, signal = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            pathlib.Path(pid_file).write_text(str(os.getpid()))
            os.write(signal, b"x")
            while True:
                time.sleep(1)
        os._exit(0)
    os.read(ready, 1)


if __name__ == "__main__":
    convert(sys.argv[1], sys.argv[2])
    if len(sys.argv) > 3:
        daemon(sys.argv[3])
"""
_PATHS_TESTS = b"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from solution import configure, convert, export, shout_settings


def test_tmp_path(tmp_path):
    (tmp_path / "in.txt").write_text("abc")
    assert convert(tmp_path / "in.txt", tmp_path / "out.txt") == 2
    assert (tmp_path / "out.txt").read_text() == "ABC"


def test_tmpdir(tmpdir):
    tmpdir.join("in.txt").write("def")
    convert(str(tmpdir.join("in.txt")), str(tmpdir.join("out.txt")))
    assert tmpdir.join("out.txt").read() == "DEF"


def test_mkdtemp():
    folder = tempfile.mkdtemp()
    try:
        Path(folder, "in.txt").write_text("ghi")
        convert(folder + "/in.txt", folder + "/out.txt")
        assert Path(folder, "out.txt").read_text() == "GHI"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_files_tempfile_makes_in_the_temporary_folder_itself():
    # NamedTemporaryFile and mkstemp make 0600 files in /tmp, not in a folder of their own
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as source:
        source.write("stu")
        source.flush()
        fd, target = tempfile.mkstemp()
        os.close(fd)
        try:
            convert(source.name, target)
            assert Path(target).read_text() == "STU"
        finally:
            os.remove(target)


def test_home_pointed_at_tmp_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    configure("on")
    assert (tmp_path / ".convert" / "settings.txt").read_text() == "on"


def test_a_file_the_solution_made_only_for_itself():
    path = export("yz")
    assert Path(path).read_text() == "YZ"
    with open(path, "a") as f:
        f.write("!")
    assert Path(path).read_text() == "YZ!"


def test_a_program_reads_a_named_temporary_file():
    out = tempfile.mkdtemp()
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as source:
        source.write("vwx")
        source.flush()
        argv = [sys.executable, "/app/solution.py", source.name, out + "/o.txt"]
        subprocess.run(argv, check=True)
    assert Path(out, "o.txt").read_text() == "VWX"
    shutil.rmtree(out, ignore_errors=True)


def test_a_file_the_tests_write_in_app_is_beside_the_solution(monkeypatch):
    monkeypatch.chdir("/app")
    Path("/app/settings.cfg").write_text("on")
    shout_settings("shouted.txt")
    assert Path("/app/shouted.txt").read_text() == "ON"


def test_a_program_writes_its_output_in_app():
    Path("/app/in.txt").write_text("jkl")
    argv = [sys.executable, "/app/solution.py", "in.txt", "out.txt"]
    subprocess.run(argv, cwd="/app", check=True)
    assert Path("/app/out.txt").read_text() == "JKL"


def test_a_program_run_in_tmp_path_writes_an_app_path(tmp_path):
    (tmp_path / "in.txt").write_text("mno")
    argv = [sys.executable, "/app/solution.py", "in.txt", "/app/res.txt", "daemon.pid"]
    subprocess.run(argv, cwd=tmp_path, check=True)
    assert Path("/app/res.txt").read_text() == "MNO"
    # What the program left behind ended with it; the solution the tests import did not.
    pid = (tmp_path / "daemon.pid").read_text()
    try:
        state = Path("/proc", pid, "stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("Z", "gone")
    assert convert(tmp_path / "in.txt", tmp_path / "again.txt") == 3


def test_a_command_line_main_run_in_tmp_path(tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("pqr")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["convert", "in.txt", "out.txt"])
    import solution

    assert solution.main() == 2
    assert (tmp_path / "out.txt").read_text() == "PQR"
"""


@pytest.mark.parametrize(
    ("style", "runtime"),
    [("pymethods", "runc"), ("bundled", "runc"), ("pymethods", "runsc")],
    indirect=["runtime"],
)
async def test_paths_the_tests_hand_over_are_usable(backend, example_task, run_labels, style):
    """Oracle shapes that plain pytest passes: a file the test writes in its tmp_path, tmpdir
    or mkdtemp folder read by the solution, which writes its output beside it; files that
    NamedTemporaryFile and mkstemp make in /tmp itself, read and written by the solution and
    by a program the tests run with one among its arguments; the solution's own `mkstemp`
    output (0600) read and appended to by the tests; `HOME` pointed at a temporary folder
    by `monkeypatch.setenv`, where the solution keeps its settings; a program the
    tests run that writes its output in /app (relative to /app, or by an /app path from the
    tests' tmp_path); a file the tests write in /app that the solution reads beside its
    module, writing its output by a relative name; an imported command-line `main()` after
    the test set `sys.argv` and changed folder to its tmp_path (relative paths). A correct
    solution scores 1, unflagged."""
    tests = {**example_task.test_files, "test_solution.py": _PATHS_TESTS}
    task = task_styles.styled(replace(example_task, test_files=tests), style)
    workspace = build_tar({"solution.py": _PATHS_SOLUTION})
    result = await backend.verify(task, workspace, run_labels)
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 1.0, []), result.output


async def test_plugin_autoload_is_off_unless_the_task_asks(backend, example_task, run_labels):
    """pytest loads no plugin by its metadata in the verifier (PYTEST_DISABLE_PLUGIN_AUTOLOAD
    in the tests' environment) unless task.toml says `[verifier] pytest_plugin_autoload =
    true`."""
    script = (
        b'echo "${PYTEST_DISABLE_PLUGIN_AUTOLOAD-unset}" > /logs/verifier/autoload.txt\n'
        b"echo 1 > /logs/verifier/reward.txt\n"
    )
    task = _with_tests(example_task, script)
    raw = {**task.config.raw, "verifier": {"timeout_sec": 60, "pytest_plugin_autoload": True}}
    asks = replace(task, config=replace(task.config, raw=raw))
    seen = []
    for t in (task, asks):
        result = await backend.verify(t, build_tar({"solution.py": b""}), run_labels)
        seen.append(result.files.get("autoload.txt"))
    assert seen == ["1\n", "unset\n"]


@both_runtimes
async def test_tested_code_that_takes_every_pid_is_graded_never_masked(
    backend, example_task, run_labels
):
    """The tested code forks until the kernel refuses and keeps re-taking every pid that frees
    (standin/attacks.py's pid filler). Its user holds at most its share of the container's
    pids (RLIMIT_NPROC, set before its exec), so the tests, their killer of the tested user
    and the verifier script still fork: the tested user's processes are gone when pytest has
    ended, test.sh writes its 0, and the script its verdict."""
    count = b'n=0; for d in /proc/[0-9]*; do [ -O "$d" ] || n=$((n+1)); done; echo "LEFT $n"\n'
    task = _with_tests(example_task, example_task.test_files["test.sh"] + count)
    result = await backend.verify(
        task, build_tar({"solution.py": _PID_FILLER.encode()}), run_labels
    )
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 0.0, []), result.output
    assert result.files.get("reward.txt") == "0\n", result.files
    taken = int(next(x for x in result.output.splitlines() if "PIDS TAKEN" in x).split()[-1])
    # Its user's processes, zombies included (the kernel compares the count before a fork
    # adds one); without the limit it took the container's 256 but a few.
    assert 0 < taken <= TESTED_NPROC + 1, result.output
    assert "LEFT 0" in result.output.splitlines(), result.output  # none but root's after pytest


async def test_a_verifier_container_ended_from_inside_is_graded_never_masked(
    backend, example_task, run_labels
):
    """When the verifier's stream ends without the script's verdict, a container the engine
    still answers for and that exited was ended from inside, where the tested code runs (its
    memory, its pids, gVisor's Sentry): graded 0, flagged. A container still running (the
    stream broke) or removed from outside is the infrastructure's doing: masked."""
    image = await backend.resolver.resolve(example_task, None)
    labels = {**run_labels, LABEL_BACKEND: backend.backend_id}
    args = verifier_container_args(container_args(example_task, labels, image), 10.0)
    adapter, pool = backend.adapter, backend.pool
    exited, _ = await pool.acquire({**args, "command": ["bash", "-c", "exit 3"]})
    running, _ = await pool.acquire({**args, "command": ["sleep", "1000"]})
    removed, _ = await pool.acquire({**args, "command": ["sleep", "1000"]})
    try:
        await adapter.call(adapter.client.api.wait, exited)
        await adapter.remove(removed)
        died = await _script_died(adapter, exited, "", {})
        assert (died.verdict, died.reward, died.flags) == (Verdict.graded, 0.0, [NO_VERDICT])
        assert "exit code 3" in died.output
        for cid in (running, removed):
            masked = await _script_died(adapter, cid, "", {})
            assert (masked.verdict, masked.reward) == (Verdict.infrastructure, None), cid
    finally:
        for cid in (exited, running, removed):
            await pool.remove(cid)


def _oracle_workspace(task: Task) -> bytes:
    """The workspace the task's solve.sh makes (its heredoc), without an agent container."""
    solve = task.solution_files["solve.sh"].decode()
    body = solve.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0] + "\n"
    return build_tar({"solution.py": body.encode()})


@dataclass
class _Handed:
    asked: list[bool] = field(default_factory=list)  # per container, whether warm was asked
    ids: list[str] = field(default_factory=list)
    first: asyncio.Event = field(default_factory=asyncio.Event)  # one was handed out


def _verifiers_ending_early(monkeypatch, pool, how_many: int, when: str) -> _Handed:
    """Kill each of the first `how_many` verifier containers the pool hands out (exit code 137)
    before the tests begin: "idle", before it is attached, as a warm container that died idle;
    "upload", once attached, with the first line sent (and no more: it would be sent to a
    process that is gone), as one whose runtime failed (gVisor's Sentry). Returns what was
    handed out."""
    acquire, send_upload, handed = pool.acquire, verifier._send_upload, _Handed()

    def kill(cid):
        pool.adapter.client.api.kill(cid)
        pool.adapter.client.api.wait(cid)

    async def ending(args, warm=True):
        cid, took = await acquire(args, warm)
        handed.asked.append(warm)
        handed.ids.append(cid)
        if len(handed.asked) <= how_many and when == "idle":
            await pool.adapter.call(kill, cid)
        handed.first.set()
        return cid, took

    def sending(line, task, workspace, grader, send):
        if len(handed.asked) <= how_many and when == "upload":
            send(line)
            kill(handed.ids[-1])  # on the stream's thread, which is where the upload is sent
        else:
            send_upload(line, task, workspace, grader, send)

    monkeypatch.setattr(pool, "acquire", ending)
    monkeypatch.setattr(verifier, "_send_upload", sending)
    return handed


@pytest.mark.parametrize("when", ["idle", "upload"])
@both_runtimes
async def test_a_verifier_container_that_ended_before_the_tests_began_is_replaced(
    pooled_backend, example_task, run_labels, monkeypatch, when
):
    """A verifier container that ends before its script says the tests began ran nothing of
    the agent's (a warm one that died idle, the runtime failing): the correct solution is
    graded in a new container, not a warm one, and earns its 1; the record says why."""
    handed = _verifiers_ending_early(monkeypatch, pooled_backend.pool, 1, when)
    workspace = _oracle_workspace(example_task)
    result = await pooled_backend.verify(example_task, workspace, run_labels)
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 1.0, []), result.output
    assert handed.asked == [True, False]
    assert "ended before the tests began (state exited, exit code 137" in result.output


@pytest.mark.parametrize("when", ["idle", "upload"])
async def test_a_second_verifier_container_that_ends_before_the_tests_is_judged(
    backend, example_task, run_labels, monkeypatch, when
):
    """One new container, not more. If it too had ended before it was attached, nothing was
    sent to either: the engine's fault, masked. If it ended once the upload was on its way, it
    is judged as any end without a verdict (exited: 0, flagged): a workspace that exhausts the
    container's memory as it is unpacked ends every container it is sent to."""
    handed = _verifiers_ending_early(monkeypatch, backend.pool, 2, when)
    result = await backend.verify(example_task, _oracle_workspace(example_task), run_labels)
    assert len(handed.asked) == 2
    if when == "idle":
        assert (result.verdict, result.reward) == (Verdict.infrastructure, None), result.output
        assert "is not running" in result.output
        return
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 0.0, [NO_VERDICT])
    assert "ended before the tests began" in result.output and "exit code 137" in result.output


async def test_a_verifier_container_that_ends_once_the_tests_began_is_not_replaced(
    backend, example_task, run_labels, monkeypatch
):
    """Once the script has said the tests began, the agent's code may have run: a container
    that ends then (killed here while test.sh runs) is graded 0, flagged, in that container
    alone; a new one would be a second roll."""
    # test.sh and the test meet at a FIFO (whichever comes first makes it): test.sh's write
    # waits for the test's read, then it sleeps until the kill. No polling, no window.
    fifo = "mkfifo /tmp/began 2>/dev/null; "
    test_sh = f"{fifo}echo > /tmp/began\nexec sleep 1000\n".encode()
    task = _with_tests(example_task, test_sh, 120.0)
    handed = _verifiers_ending_early(monkeypatch, backend.pool, 0, "idle")
    verifying = asyncio.ensure_future(
        backend.verify(task, _oracle_workspace(example_task), run_labels)
    )
    await handed.first.wait()
    api = backend.adapter.client.api

    def tests_began() -> bytes:
        ex = api.exec_create(handed.ids[0], ["sh", "-c", fifo + "cat /tmp/began"])
        return api.exec_start(ex["Id"])

    assert await backend.adapter.call(tests_began) == b"\n", verifying
    await backend.adapter.call(api.kill, handed.ids[0])
    result = await verifying
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 0.0, [NO_VERDICT])
    assert handed.asked == [True]
    assert "fresh container" not in result.output and "exit code 137" in result.output


async def test_a_workspace_near_its_cap_costs_the_verifier_no_copy(
    backend, example_task, run_labels
):
    """A free 250 MiB sparse file in /app comes out of the agent container as 250 MiB of zeros.
    The verifier checks that workspace without copying it and writes it sanitized while it
    is sent, a block at a time, beside the runtime and the tests: this process grows by far
    less than the workspace (it held it four times more: 750 MiB)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        sparse = tarfile.TarInfo("sparse")
        sparse.size = 250 << 20
        tar.addfile(sparse, io.BytesIO(bytes(sparse.size)))
        solution = tarfile.TarInfo("solution.py")
        solution.size = len(_WRONG_SOLUTION)
        tar.addfile(solution, io.BytesIO(_WRONG_SOLUTION))
    workspace = buf.getvalue()
    del buf
    with measured() as use:
        result = await backend.verify(example_task, workspace, run_labels)
    # The tests ran on it: the upload fitted and unpacked, and the wrong answer scored 0.
    assert (result.verdict, result.reward, result.flags) == (Verdict.graded, 0.0, []), result.output
    assert "3 failed, 1 passed" in result.output, result.output
    assert use.rss_growth < 64 << 20, use


_WRONG_SOLUTION = b"def fn(name):\n    return name\n"


async def test_an_images_own_evidence_folders_are_replaced(example_task, run_labels):
    """An image may ship /logs/verifier/reward.txt = 1, or /logs/rollouts-guard as a link: only
    what this run's test.sh writes is graded (two layers: /logs is a fresh tmpfs, and the
    verifier script removes whatever is there before it starts)."""
    client = docker.from_env()
    tag = f"rollouts-test-evidence:{run_labels['rollouts.rollout_id']}"
    dockerfile = (
        f"FROM {BASE_TAG}\n"
        "RUN mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"
        " && ln -s /nonexistent /logs/rollouts-guard\n"
    )
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    backend = DockerBackend(
        BackendSettings(pool=PoolSettings(warm_per_key=0), reap_at_start=False, image_override=tag)
    )
    try:
        task = _with_tests(example_task, b"echo no reward here\n")
        result = await backend.verify(task, build_tar({"solution.py": b""}), run_labels)
        assert (result.verdict, result.reward) == (Verdict.graded, 0.0), result.output
        assert result.flags == ["no_reward"]
    finally:
        await backend.aclose()
        client.images.remove(tag, force=True)
