"""Run a task's reference solution through the real sandbox path: agent container, then verifier.

This is what `rollouts verify` calls to prove a task is solvable (oracle -> 1.0) and that an
empty solution fails (-> 0.0).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sandboxes.backend import (
    AgentCausedSandboxFault,
    ExecResult,
    SandboxBackend,
    Upload,
    Verdict,
    VerifyResult,
)
from sandboxes.task import Task

SOLUTION_DIR = "/tmp/solution"  # never /app: the solution must not leak into the workspace


@dataclass
class OracleResult(VerifyResult):
    agent_output: str = ""
    agent_exit_code: int | None = None


async def run_oracle(
    task: Task,
    backend: SandboxBackend,
    *,
    solve_script: bytes | None,
    labels: dict[str, str],
    plain: bool = False,
) -> OracleResult:
    """Run `solve_script` (None: the task's solution/solve.sh; b"": do nothing) as the agent.
    `plain`: grade in the calibration fallback (SandboxBackend.verify).

    An agent timeout still runs the verifier, and its reward counts (status agent_timeout).
    A sandbox the script wrecked itself (workspace over the cap, container exited) scores 0
    with status ok: only infrastructure faults are masked.
    """
    if solve_script is None:
        if not task.has_oracle:
            raise ValueError(f"task {task.id}: no solution/solve.sh")
        files = dict(task.solution_files)
    else:
        files = {"solve.sh": solve_script}
    durations: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        sandbox = await backend.create(task, labels)
    except Exception as e:
        return OracleResult(None, Verdict.infrastructure, f"creating the sandbox failed: {e}")
    durations["create_s"] = time.monotonic() - t0
    agent: ExecResult | None = None
    try:
        t0 = time.monotonic()
        agent = await sandbox.exec(
            f"bash {SOLUTION_DIR}/solve.sh",
            timeout_s=task.config.agent_timeout_sec,
            upload=Upload(SOLUTION_DIR, files),
        )
        durations["agent_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        workspace = await sandbox.get_workspace()
        durations["workspace_s"] = time.monotonic() - t0
    except AgentCausedSandboxFault as e:
        await backend.destroy(sandbox)
        return OracleResult(
            0.0,
            Verdict.graded,
            f"[rollouts] graded 0: {e}",
            durations,
            agent_output=agent.output if agent else "",
            agent_exit_code=agent.exit_code if agent else None,
        )
    except Exception as e:
        await backend.destroy(sandbox)
        return OracleResult(None, Verdict.infrastructure, f"agent container failed: {e}", durations)
    await backend.destroy(sandbox)
    assert agent is not None  # set whenever the try block completed
    verdict = await backend.verify(task, workspace, labels, plain=plain)
    status = verdict.verdict
    if agent.timed_out and status == Verdict.graded:
        status = Verdict.agent_timeout
    return OracleResult(
        reward=verdict.reward,
        verdict=status,
        output=verdict.output,
        durations={**durations, **verdict.durations},
        flags=verdict.flags,
        files=verdict.files,
        isolation=verdict.isolation,
        agent_output=agent.output,
        agent_exit_code=agent.exit_code,
    )
