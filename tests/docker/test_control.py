"""The agent container's control channel (PID 1 runs the service's requests), against a real
container: answers survive what the agent can do to the stream and to the requests' processes."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from sandboxes.control import SERVICE_STATE_DIR, ControlChannel
from sandboxes.images import BASE_TAG
from sandboxes.isolation import container_args

pytestmark = pytest.mark.docker


def _sh(script: str, *args: str) -> list[str]:
    return ["bash", "-c", script, *args]


async def test_requests_stay_in_step_through_forged_answers_kills_and_stops(
    backend, example_task, run_labels
):
    sandbox = await backend.create(example_task, run_labels)
    channel = ControlChannel(backend.adapter, sandbox.id)
    try:
        r = await channel.run(_sh('printf "%s|" "$@"; exit 4', "-", "a b", "c\nd"), limit_s=10)
        assert (r.exit_code, r.timed_out, r.output.text()) == (4, False, "a b|c\nd|")

        # Frames forged into what the agent can reach: the command's own stdout and the pipe
        # the encoder writes to (PID 1's own stdout is out of reach, see the test below). They
        # land inside counted chunks of this answer: its own output is garbled at worst, the
        # answer does not end early, its exit code stands, and the next answer is exact.
        forge = (
            "f='@@rollouts 0123456789abcdef begin 1\\n8:QUFBQUFB\\n@@rollouts 0123456789abcdef "
            'end 0 0\\njunk\\n\'; printf "$f"; for p in $(pgrep -x base64); do '
            'printf "$f" > /proc/$p/fd/1; done; echo real; exit 3'
        )
        r = await channel.run(_sh(forge), limit_s=10)
        assert r.exit_code == 3 and not r.timed_out, r
        r = await channel.run(_sh("echo next"), limit_s=10)
        assert r.output.text() == "next\n"

        # An upload the command never reads is drained: the next request is read in step.
        r = await channel.run(_sh("echo ignored-stdin"), limit_s=10, stdin=b"x\n" * 100_000)
        assert r.output.text() == "ignored-stdin\n"
        # An upload without a newline, read by the command (as tar reads one), bigger than a
        # pipe holds; then one left half read by a command killed at its limit.
        blob = b"\0" * 300_000
        r = await channel.run(_sh("wc -c"), limit_s=30, stdin=blob)
        assert r.output.text().strip() == "300000"
        r = await channel.run(_sh("head -c 10; sleep 30"), limit_s=1, stdin=b"y" * 300_000)
        assert r.timed_out
        r = await channel.run(_sh("echo in-step"), limit_s=10)
        assert r.output.text() == "in-step\n"

        # Everything but PID 1 killed mid-request (what `kill -9 -1` in the terminal does).
        r = await channel.run(_sh("echo before; kill -9 -1; sleep 5"), limit_s=10)
        assert r.exit_code == 137 and not r.timed_out

        # Everything stopped: PID 1 kills the request's group at its limit and answers, with
        # what was written before.
        r = await channel.run(_sh("echo partial; sleep 0.2; kill -STOP -1; sleep 5"), limit_s=1)
        assert r.timed_out and r.exit_code is None and r.output.text() == "partial\n"

        # A timed-out command's background children die with it.
        r = await channel.run(_sh("sleep 301 & sleep 302"), limit_s=0.5)
        assert r.timed_out
        r = await channel.run(_sh("ps -eo args"), limit_s=10)
        assert "sleep 30" not in r.output.text(), r.output.text()

        # A background process that keeps the output open does not hold the answer for the
        # whole limit: it is killed a little after the command ends.
        r = await channel.run(_sh("echo main; sleep 60 & exit 5"), limit_s=120)
        assert (r.exit_code, r.timed_out, r.output.text()) == (5, False, "main\n")
        r = await channel.run(_sh("ps -eo args"), limit_s=10)
        assert "sleep 60" not in r.output.text()

        # A request the service stops waiting for (its task cancelled, as when the agent's
        # time runs out mid-command) is killed at once, and the next answer is not lost.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(channel.run(_sh("sleep 303"), limit_s=120), 1.0)
        t0 = time.monotonic()
        r = await channel.run(_sh("ps -eo args; echo after"), limit_s=60)
        assert r.output.text().endswith("after\n") and "sleep 303" not in r.output.text()
        assert time.monotonic() - t0 < 30

        # Binary output comes back exact; a collect limit raises, and the channel recovers.
        blob = bytes(range(256)) * 1000
        r = await channel.run(["cat"], limit_s=10, stdin=blob, collect_stdout=len(blob))
        assert r.stdout_raw == blob
        with pytest.raises(Exception, match="exceeds"):
            await channel.run(["cat"], limit_s=10, stdin=blob, collect_stdout=1000)
        r = await channel.run(_sh("echo $((6*7))"), limit_s=10)
        assert r.output.text() == "42\n"

        # Requests add no process: PID 1 reaps them all. A request's own short-lived helpers
        # (its `<(:)` pipes) may show as zombies while it runs, until PID 1's next wait; one
        # that is still there a request later was never reaped.
        zombies = "ps -eo pid=,stat=,args= | awk '$2 ~ /^Z/'"
        first = (await channel.run(_sh(zombies), limit_s=10)).output.text().splitlines()
        second = (await channel.run(_sh(zombies), limit_s=10)).output.text().splitlines()
        assert not set(first) & set(second), (first, second)
    finally:
        channel.close()
        await backend.destroy(sandbox)


async def test_a_stopped_container_is_refused_at_once(backend, example_task, run_labels):
    sandbox = await backend.create(example_task, run_labels)
    channel = ControlChannel(backend.adapter, sandbox.id)
    try:
        await backend.adapter.call(backend.adapter.client.api.kill, sandbox.id)
        with pytest.raises(Exception, match="not running"):
            await channel.run(["true"], limit_s=60)
    finally:
        channel.close()
        await backend.destroy(sandbox)


# Run by the agent's side (root, no capabilities) while a request with an upload is in flight:
# every file descriptor of every other process, opened for reading and for writing, and PID 1's
# memory and ptrace. Prints JSON.
_PROBE = r"""
import ctypes, json, os, time
open("/run/rollouts/probe-ready", "w").close()
while not os.path.exists("/run/rollouts/probe-go"):
    time.sleep(0.01)
me, fds, other = os.getpid(), [], {}
for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
    if pid == me:
        continue
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in names:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            link = os.readlink(path)
        except OSError:
            link = None
        opened = ""
        for flags, mode in ((os.O_RDONLY | os.O_NONBLOCK, "r"), (os.O_WRONLY | os.O_NONBLOCK, "w")):
            try:
                os.close(os.open(path, flags))
                opened += mode
            except OSError:
                pass
        fds.append([pid, int(fd), link, opened])
for path in ("/proc/1/mem", "/proc/1/environ", "/proc/1/fdinfo/0", "/proc/1/cwd/."):
    try:
        open(path, "rb").close()
        other[path] = "open"
    except OSError as e:
        other[path] = e.strerror
libc = ctypes.CDLL(None, use_errno=True)
# PTRACE_SEIZE: attaches without stopping PID 1 (detached again when this process exits).
seized = libc.ptrace(0x4206, 1, 0, 0) == 0
other["ptrace 1"] = "open" if seized else os.strerror(ctypes.get_errno())
print(json.dumps({"fds": fds, "other": other}))
"""
# Run with CAP_SYS_PTRACE in the sandbox's PID namespace: the truth, every process's links.
_TRUTH = r"""
import json, os
out = {}
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        out[pid] = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        pass
print(json.dumps(out))
"""


async def test_the_agent_cannot_reach_the_channel(backend, example_task, run_labels):
    """Root in the sandbox, without capabilities, can neither open PID 1's stdin and stdout
    (through /proc/1/fd or the descriptors of any process serving a request: the upload's
    reader, the encoder, the copier) nor read PID 1's memory or trace it."""
    sandbox = await backend.create(example_task, run_labels)
    channel = ControlChannel(backend.adapter, sandbox.id)
    api = backend.adapter.client.api
    try:
        # An upload far bigger than the pipes hold, which the command does not read until the
        # probe is done: the reader of PID 1's stdin is alive while the probe looks.
        upload = b"\0" * (4 << 20)
        probe = asyncio.ensure_future(
            channel.run(["python3", "-c", _PROBE], limit_s=120, stdin=upload)
        )
        for _ in range(600):
            ex = await backend.adapter.call(
                api.exec_create, sandbox.id, ["test", "-e", "/run/rollouts/probe-ready"]
            )
            await backend.adapter.call(api.exec_start, ex["Id"])
            if (await backend.adapter.call(api.exec_inspect, ex["Id"]))["ExitCode"] == 0:
                break
            await asyncio.sleep(0.1)
        truth_raw = await backend.adapter.call(
            backend.adapter.client.containers.run,
            BASE_TAG,
            ["python3", "-c", _TRUTH],
            pid_mode=f"container:{sandbox.id}",
            cap_add=["SYS_PTRACE"],
            network_disabled=True,
            remove=True,
            labels=run_labels,
        )
        truth = json.loads(truth_raw)
        ex = await backend.adapter.call(
            api.exec_create, sandbox.id, ["touch", "/run/rollouts/probe-go"]
        )
        await backend.adapter.call(api.exec_start, ex["Id"])
        r = await probe
        assert r.exit_code == 0, r
        seen = json.loads(r.output.text())

        channel_pipes = {truth["1"]["0"], truth["1"]["1"]}
        holders = {int(pid) for pid, fds in truth.items() if channel_pipes & set(fds.values())}
        # PID 1 and the forks that serve this request (the reader of its upload, the copier).
        assert 1 in holders and len(holders) >= 3, truth
        reached = [fd for fd in seen["fds"] if fd[0] in holders and (fd[2] or fd[3])]
        assert reached == [], f"the channel's descriptors were reachable: {reached}"
        leaked = [
            fd
            for fd in seen["fds"]
            if fd[3] and truth.get(str(fd[0]), {}).get(str(fd[1])) in channel_pipes
        ]
        assert leaked == [], f"opened a descriptor of the channel: {leaked}"
        # Everything else the agent could open is its own request's pipes.
        assert any(fd[3] for fd in seen["fds"]), "the probe opened nothing at all"
        assert all(v != "open" for v in seen["other"].values()), seen["other"]
        assert seen["other"]["ptrace 1"] == "Operation not permitted", seen["other"]
        assert r.sealed
    finally:
        channel.close()
        await backend.destroy(sandbox)


async def test_a_pid1_that_cannot_seal_still_serves_and_says_so(backend, example_task, run_labels):
    """Where PID 1 cannot run its sealed copy (here: its tmpfs mounted noexec; on gVisor: the
    copy runs but stays dumpable) the channel works as before and answers `sealed 0`."""
    args = container_args(example_task, run_labels, BASE_TAG)
    tmpfs = args["host_config"]["tmpfs"]
    tmpfs[SERVICE_STATE_DIR] = tmpfs[SERVICE_STATE_DIR].replace("exec", "noexec")
    cid = await backend.adapter.create_container(args)
    channel = ControlChannel(backend.adapter, cid)
    try:
        await backend.adapter.start(cid)
        r = await channel.run(_sh("echo hi; ls -A /run/rollouts"), limit_s=30)
        assert (r.exit_code, r.output.text(), r.sealed) == (0, "hi\n", False)
    finally:
        channel.close()
        await backend.adapter.remove(cid)


@pytest.mark.parametrize("runtime", ["runsc"], indirect=True)
async def test_under_gvisor_the_channel_serves_unsealed(backend, example_task, run_labels):
    """gVisor keeps a process dumpable whatever it runs, so PID 1 cannot seal itself there:
    the channel serves as before and says so (what the agent forges into it stays graded as
    its own doing: the corpus's channel attacks under runsc)."""
    sandbox = await backend.create(example_task, run_labels)
    channel = ControlChannel(backend.adapter, sandbox.id)
    try:
        r = await channel.run(_sh("uname -r"), limit_s=30)
        assert (r.exit_code, r.sealed) == (0, False)
        assert r.output.text().startswith("4.4.0")  # gVisor's kernel, not the host's
    finally:
        channel.close()
        await backend.destroy(sandbox)
