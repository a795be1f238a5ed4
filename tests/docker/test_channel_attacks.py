"""What a flood and a decompression bomb from inside an agent container cost the service.

The attacks are the stand-in's (`standin/attacks.py::ATTACKS`), run here as the solve script
of a real sandbox with the service's own code in this process, measured around the request
they attack: `channel_flood` writes `\\n@@rollouts ` and 128 MiB without a newline into every
stream of PID 1's it can open (the landed reader buffered and rescanned it: 7-18 s of CPU,
130-350 MB); `channel_workspace_bomb` puts a 535-byte bz2 tar of 300 MiB where the workspace
archive goes (the landed reader inflated 256 MiB of it: 1.7 s, 250 MB). The corpus
(tests/adversarial/test_attack_corpus.py) runs the same attacks as the agent and as solve.sh
and checks the grade; this checks the cost. Bounds, not timings: CPU seconds and resident
memory of this process.
"""

from __future__ import annotations

import pytest

from sandboxes.backend import AgentCausedSandboxFault, Upload
from standin.attacks import ATTACKS
from tests.resource_use import measured

pytestmark = pytest.mark.docker


async def _attack(sandbox, name: str):  # type: ignore[no-untyped-def]
    return await sandbox.exec(
        "bash /tmp/solution/solve.sh",
        timeout_s=120,
        upload=Upload("/tmp/solution", {"solve.sh": ATTACKS[name].encode()}),
    )


async def test_a_flood_leaves_the_service_bounded(backend, example_task, run_labels):
    sandbox = await backend.create(example_task, run_labels)
    try:
        with measured() as use:
            try:
                result = await _attack(sandbox, "channel_flood")
                print(f"flood: exit {result.exit_code}, {result.dropped_bytes} bytes dropped")
            except AgentCausedSandboxFault as e:  # graded: the agent garbled its own channel
                print(f"flood: {e}")
        print(f"flood: {use}")
        assert use.rss_growth < 64 << 20, use
        assert use.cpu_s < 8.0, use
        # The sandbox still answers in step, or says the agent broke it (graded).
        try:
            after = await sandbox.exec("echo after", timeout_s=30)
            assert after.output == "after\n"
        except AgentCausedSandboxFault:
            pass
    finally:
        await backend.destroy(sandbox)


async def test_a_workspace_bomb_leaves_the_service_bounded(backend, example_task, run_labels):
    sandbox = await backend.create(example_task, run_labels)
    try:
        await _attack(sandbox, "channel_workspace_bomb")
        with measured() as use:
            try:
                workspace = await sandbox.get_workspace()
                # The bomb did not get there first (the agent races tar): a real workspace.
                print(f"bomb: not delivered, a workspace of {len(workspace)} bytes")
            except AgentCausedSandboxFault as e:
                print(f"bomb: graded: {e}")
        print(f"bomb: {use}")
        assert use.rss_growth < 64 << 20, use
        assert use.cpu_s < 1.0, use
    finally:
        await backend.destroy(sandbox)
