"""`rollouts collect --agent NAME [--agent-profile FILE]` end to end with the stand-in (real
Docker, real HTTP): the terminus-2 harness with profiles imported from a real Harbor 0.25.0
(tests/harbor_env.py), JSON and XML, and the tools harness. Every trajectory passes the token
invariants (checked before it is stored, and again by `from_arrow`), earns the reward the
stand-in intends, records its harness and profile hash, and its transcript is in the harness's
forms: terminus-2's first prompt without a system message, its terminal-output and confirmation
messages; tool calls answered by tool messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clients.cli import app
from sandboxes.tasks import load_tasks
from service.agent.harnesses import build_harness, load_profile
from service.trajectory import Status
from tests.e2e.test_collect import TASKS, run_collect_cli

pytestmark = pytest.mark.docker


def _prefix(template: str) -> str:
    """The fixed words a profile text starts with (up to its first placeholder)."""
    return template.split("{", 1)[0]


@pytest.mark.parametrize(("variant", "p_correct"), [("json", 1.0), ("xml", 0.0)])
def test_collect_speaks_terminus_2(
    tmp_path: Path, harbor_profiles: dict[str, Path], variant: str, p_correct: float
) -> None:
    path = harbor_profiles[variant]
    profile = load_profile(path)
    harness = build_harness("terminus-2", path)
    trajs, stdout, wall = run_collect_cli(
        tmp_path, "--limit", "1", "--n-samples", "4", "--p-correct", str(p_correct),
        "--seed", "7", "--agent", "terminus-2", "--agent-profile", str(path),
    )  # fmt: skip
    assert len(trajs) == 4
    task = next(t for t in load_tasks(TASKS, limit=1))
    (first,) = harness.first_messages(task.instruction)
    for t in trajs:
        assert t.status is Status.ok and t.reward == p_correct, (t.status, t.verifier_output)
        assert (t.harness, t.harness_profile_hash) == ("terminus-2", profile.hash)
        assert sum(t.loss_mask) > 0 and len(t.prompt_token_ids) > 0
        roles = [m.role for m in t.messages]
        assert roles[0] == "user" and "system" not in roles[:1]  # no system prompt
        assert t.messages[0].content == first["content"]
        users = [m.content for m in t.messages[1:] if m.role == "user"]
        assert any(u.startswith(_prefix(profile.texts["new_output"])) for u in users), users
        assert any(u.startswith(_prefix(profile.texts["confirmation"])) for u in users), users
        # The episode ended on the second task_complete: the last message is the model's.
        assert t.messages[-1].role == "assistant"
    print(f"terminus-2 {variant}: 4 trajectories in {wall:.1f}s")


def test_collect_speaks_tools(tmp_path: Path) -> None:
    trajs, _, wall = run_collect_cli(
        tmp_path, "--limit", "1", "--n-samples", "4", "--p-correct", "1.0", "--seed", "3",
        "--agent", "tools",
    )  # fmt: skip
    tools = build_harness("tools")
    assert len(trajs) == 4
    for t in trajs:
        assert t.status is Status.ok and t.reward == 1.0, (t.status, t.verifier_output)
        assert (t.harness, t.harness_profile_hash) == ("tools", tools.profile.hash)
        roles = [m.role for m in t.messages]
        assert roles[:2] == ["system", "user"] and "tool" in roles
        calls = [m.content for m in t.messages if m.role == "assistant"]
        assert "<tool_call>" in calls[0] and "<tool_call>" not in calls[-1]  # a plain answer ends
    print(f"tools: 4 trajectories in {wall:.1f}s")


def test_collect_refuses_terminus_2_without_a_profile(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["collect", "--tasks", TASKS, "--out", str(tmp_path), "--agent", "terminus-2"]
    )
    assert result.exit_code == 2
    assert "import-harbor" in result.output
