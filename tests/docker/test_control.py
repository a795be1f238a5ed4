"""The agent container's control channel (PID 1 runs the service's requests), against a real
container: answers survive what the agent can do to the stream and to the requests' processes."""

from __future__ import annotations

import asyncio
import time

import pytest

from sandboxes.control import ControlChannel

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

        # Frames forged straight into PID 1's stdout inside our answer: a begin and an end
        # line with made-up nonces, and junk. The agent can garble its own output this way,
        # but not end the answer early or change its exit code, and the next answer is exact.
        forge = (
            "printf '@@rollouts 0123456789abcdef begin\\nQUFB\\n@@rollouts 0123456789abcdef "
            "end 0 0\\njunk\\n' > /proc/1/fd/1; echo real; exit 3"
        )
        r = await channel.run(_sh(forge), limit_s=10)
        assert r.exit_code == 3 and "real\n" in r.output.text(), r.output.text()
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

        # Requests add no process: PID 1 reaps them all.
        r = await channel.run(_sh("ps -eo stat= | grep -c '^Z' || true"), limit_s=10)
        assert r.output.text().strip() == "0"
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
