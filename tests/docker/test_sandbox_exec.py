"""The agent container: isolation, exec (timeouts, caps), terminal, workspace export."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import pytest

from sandboxes.backend import Upload
from sandboxes.control import PID1_COMMAND
from sandboxes.isolation import RUNSC_PIDS_LIMIT, IsolationError, container_args
from sandboxes.task import EnvironmentConfig, TaskConfig
from sandboxes.terminal import LOST_MARKER
from tests.runtimes import both_runtimes

pytestmark = pytest.mark.docker


def test_container_args_lock_down(example_task):
    args = container_args(example_task, {"rollouts.sample_id": "3"}, "img:1")
    host = args["host_config"]
    assert args["image"] == "img:1"
    assert args["labels"]["rollouts.managed"] == "true"
    assert args["labels"]["rollouts.owner"].split(":")[1] == str(__import__("os").getpid())
    assert args["labels"]["rollouts.sample_id"] == "3"
    assert host["network_mode"] == "none" and args["network_disabled"] is True
    assert host["cap_drop"] == ["ALL"] and host["security_opt"] == ["no-new-privileges"]
    assert host["read_only"] is True and host["pids_limit"] == 256
    # PID 1 is our signal-proof reaper loop, not Docker's tini (which exits with its child).
    assert host["init"] is False and args["command"] == PID1_COMMAND
    assert "/run/rollouts" in host["tmpfs"]
    assert host["mem_limit"] == host["memswap_limit"] == "1024m"
    assert host["nano_cpus"] == 1_000_000_000
    assert "size=1024m" in host["tmpfs"]["/app"] and "exec" in host["tmpfs"]["/app"]
    assert not any("docker.sock" in b for b in host["binds"])


def test_gvisor_containers_get_room_for_its_own_threads(example_task):
    """Under runsc the container's pids limit also counts gVisor's own host threads."""
    args = container_args(example_task, {}, "img", runtime="runsc")
    assert args["host_config"]["runtime"] == "runsc"
    assert args["host_config"]["pids_limit"] == RUNSC_PIDS_LIMIT
    assert "runtime" not in container_args(example_task, {}, "img")["host_config"]
    # The settings scripts/runsc_setup.sh --candidates registers are gVisor too.
    other = container_args(example_task, {}, "img", runtime="runsc-dcache")
    assert other["host_config"]["pids_limit"] == RUNSC_PIDS_LIMIT
    assert (
        container_args(example_task, {}, "img", runtime="runc")["host_config"]["pids_limit"]
        < RUNSC_PIDS_LIMIT
    )


def test_container_args_follow_task_and_refuse_host_network(example_task):
    from dataclasses import replace

    env = EnvironmentConfig(cpus=0.5, memory_mb=256, storage_mb=64, network_mode="bridge")
    task = replace(example_task, config=TaskConfig(environment=env))
    args = container_args(task, {}, "img")
    host = args["host_config"]
    assert host["nano_cpus"] == 500_000_000 and host["mem_limit"] == "256m"
    assert host["network_mode"] == "bridge" and "size=64m" in host["tmpfs"]["/app"]
    assert args["network_disabled"] is False
    bad = replace(task, config=TaskConfig(environment=EnvironmentConfig(network_mode="host")))
    with pytest.raises(IsolationError, match="network_mode"):
        container_args(bad, {}, "img")


@both_runtimes
async def test_container_is_isolated(backend, example_task, run_labels):
    sb = await backend.create(example_task, run_labels)
    # (test -e and /proc/net/dev, not ls: coreutils' ls uses statx, which gVisor refuses)
    r = await sb.exec(
        "touch /etc/x 2>&1; echo w > /app/f && cat /app/f; "
        "grep CapEff /proc/self/status; test -e /var/run/docker.sock || echo 'no docker socket'; "
        "(exec 3<>/dev/tcp/10.0.0.1/80) 2>&1; readlink /proc/self/ns/net; "
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
        30,
    )
    # Networking disabled: a network namespace of its own, not the host's, with no route out
    # (gVisor words it "No route to host").
    assert "Network is unreachable" in r.output or "No route to host" in r.output
    assert os.readlink("/proc/self/ns/net") not in r.output
    assert "Read-only file system" in r.output
    assert "w\n" in r.output
    assert "CapEff:\t0000000000000000" in r.output
    assert "no docker socket" in r.output
    assert r.output.strip().endswith("lo")  # network none: loopback only
    await backend.destroy(sb)


@both_runtimes
async def test_exec_timeout_kills_process_tree(backend, example_task, run_labels):
    sb = await backend.create(example_task, run_labels)
    r = await sb.exec("echo started; (sleep 301 &) ; sleep 302 & sleep 303", 1.0)
    assert r.timed_out and r.exit_code is None
    assert "started" in r.output
    ps = await sb.exec("ps -eo args", 10)
    assert "sleep 302" not in ps.output and "sleep 303" not in ps.output
    ok = await sb.exec("echo $((6*7)); exit 3", 10)
    assert ok.exit_code == 3 and ok.output == "42\n" and not ok.timed_out
    await backend.destroy(sb)


async def test_exec_output_capped_with_marker(backend, example_task, run_labels):
    sb = await backend.create(example_task, run_labels)
    cap = backend.settings.exec_output_cap
    r = await sb.exec("echo FIRST; head -c 50000000 /dev/zero | tr '\\0' x; echo; echo LAST", 120)
    assert r.exit_code == 0
    assert r.output.startswith("FIRST")
    assert r.output.rstrip().endswith("LAST")
    assert "bytes dropped ...]" in r.output
    assert len(r.output) <= cap + 100
    assert r.dropped_bytes > 49_000_000
    await backend.destroy(sb)


@both_runtimes
async def test_terminal_session(backend, example_task, run_labels):
    sb = await backend.create(example_task, run_labels)
    await sb.send_keys("cd /tmp && export FOO=bar42\n", 5)
    out = await sb.send_keys("echo $FOO; pwd\n", 5)
    assert "bar42\n/tmp\n" in out
    t0 = time.monotonic()
    out = await sb.send_keys("echo quick\n", 30)
    assert "quick" in out
    assert time.monotonic() - t0 < 20  # returned when the shell went idle, not after 30 s
    out = await sb.send_keys("sleep 100\n", 0.5)
    ps = await sb.exec("ps -eo args", 10)
    assert "sleep 100" in ps.output
    out = await sb.send_keys("C-c", 5)
    assert "^C" in out or "\x03" in out  # gVisor's pty echoes the control character as is
    ps = await sb.exec("ps -eo args", 10)
    assert "sleep 100" not in ps.output
    out = await sb.send_keys("printf '\\xff\\xfe ok\\n'\n", 5)
    assert "\ufffd" in out and " ok" in out
    await backend.destroy(sb)


# The CPU clock ticks (utime + stime) of the tmux server, read from /proc in the container.
_SERVER_TICKS = (
    "for f in /proc/[0-9]*/stat; do read -r l < $f; "
    "case $l in *'(tmux: server)'*) set -- ${l##*) }; echo $(( ${12} + ${13} ));; esac; done"
)


@both_runtimes
async def test_terminal_waits_for_the_command_while_tmux_sleeps(backend, example_task, run_labels):
    """A turn returns once its command is done, under gVisor too: its pty never learns the
    foreground group, so tmux named the pane's shell while `sleep` ran and the turn ended
    early. Meanwhile tmux's server waits rather than spins (libevent's poll backend, which tmux
    picks, woke at once for ever under gVisor), and the agent's shell sees none of that."""
    sb = await backend.create(example_task, run_labels)
    try:
        out = await sb.send_keys("echo ${EVENT_NOPOLL-unset}-$((2*3))\n", 5)
        assert "unset-6" in out, out
        before = int((await sb.exec(_SERVER_TICKS, 10)).output.split()[0])
        out = await sb.send_keys("sleep 3; echo done-$((3*4))\n", 30)
        assert "done-12" in out, out
        after = int((await sb.exec(_SERVER_TICKS, 10)).output.split()[0])
        # A spinning server takes up to a core (100 ticks a second) over the command; a waiting
        # one a few ticks for the pane's output.
        assert after - before < 30, (before, after)
        # A shell without the prompt hook (`sh` in the shell's place) is seen idle from /proc.
        await sb.send_keys("exec sh\n", 5)
        t0 = time.monotonic()
        out = await sb.send_keys("echo plain-$((2*4))\n", 30)
        assert "plain-8" in out, out
        assert time.monotonic() - t0 < 20  # returned when the shell went idle, not after 30 s
    finally:
        await backend.destroy(sb)


@both_runtimes
async def test_upload_and_workspace_refuses_outside_links(backend, example_task, run_labels):
    sb = await backend.create(example_task, run_labels)
    r = await sb.exec(
        "ln -s /etc/shadow /app/shadow; ln -s ../../etc/passwd /app/pkg/up; "
        "ln -s pkg/mod.py /app/inside; cat /app/pkg/mod.py",
        10,
        upload=Upload("/app", {"pkg/mod.py": b"X = 1\n"}),
    )
    assert r.output == "X = 1\n"
    data = await sb.get_workspace()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        names = {m.name: m for m in tf.getmembers()}
        assert tf.extractfile(names["pkg/mod.py"]).read() == b"X = 1\n"
    assert "shadow" not in names and "pkg/up" not in names
    assert names["inside"].issym()
    assert any("/etc/shadow" in n for n in sb.workspace_notes)
    await backend.destroy(sb)


@both_runtimes
async def test_terminal_turns_leave_the_sandbox_memory_where_it_was(
    backend, example_task, run_labels
):
    """Under gVisor (release 2024-07-29) every tmux client leaves 32 MiB in the Sentry for
    good, charged to the sandbox: a turn types its keys through the pane's pipe and reads the
    rest from /proc, so turns after the first start none. Before, a 1 GiB agent container was
    ended by the OOM killer after about ten turns, graded 0 as the agent's doing."""
    sb = await backend.create(example_task, run_labels)
    usage = Path(f"/sys/fs/cgroup/memory/docker/{sb.id}/memory.usage_in_bytes")
    try:
        await sb.send_keys("echo first\n", 5)  # starts the session: a few clients, once
        before = int(usage.read_text())
        for i in range(6):
            out = await sb.send_keys(f"echo turn-$(({i}*7))\n", 5)
            assert f"turn-{i * 7}" in out, out
        grown_mib = (int(usage.read_text()) - before) / (1 << 20)
        assert grown_mib < 6 * 10, grown_mib  # one client a turn would be 6 * 32 MiB
    finally:
        await backend.destroy(sb)


@both_runtimes
async def test_terminal_heals_the_pipe_its_keys_go_through(backend, example_task, run_labels):
    """The agent may break the pane's pipe (its keys' FIFO removed, its processes killed, a FIFO
    where the service records their pids or where the log is, which a read would wait on): the
    turn answers with what the terminal shows (a FIFO at the log held it for the request's
    whole limit, then lost its output), the turn after mends the pipe, and the next turns are
    typed and read as before."""
    sb = await backend.create(example_task, run_labels)
    try:
        await sb.send_keys("echo ready\n", 5)
        sabotage = [
            "rm /run/rollouts/keys",
            "kill $(cat /run/rollouts/pipe)",
            "kill -STOP $(cat /run/rollouts/pipe)",
            "rm /run/rollouts/pipe; mkfifo /run/rollouts/pipe",
            "echo 0 0 > /run/rollouts/pipe",  # `kill 0` would end the request's own group
            "echo 1 > /run/rollouts/pane",
            "rm /run/rollouts/pane; mkfifo /run/rollouts/pane; rm /run/rollouts/term.log; "
            "mkfifo /run/rollouts/term.log",
        ]
        for n, keys in enumerate(sabotage):
            out = await sb.send_keys(keys + "\n", 5)
            assert keys in out and LOST_MARKER not in out, (keys, out)
            for turn in range(2):
                out = await sb.send_keys(f"echo mended-$(({n}*10+{turn}))\n", 10)
                assert f"mended-{n * 10 + turn}" in out, (keys, out)
        # A shell the agent starts is busy until its script is done: while a program it
        # started runs, and while it runs builtins alone.
        out = await sb.send_keys("bash -c 'sleep 2; echo inner-$((5*5))'\n", 30)
        assert "inner-25" in out, out
        loop = "bash -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo looped-$((6*6))'"
        out = await sb.send_keys(loop + "\n", 60)
        assert "looped-36" in out, out
    finally:
        await backend.destroy(sb)
