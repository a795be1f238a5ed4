"""Held-out attacks of test_heldout_attacks.py delivered as the corpus delivers its solve.sh
(`run_oracle`: agent container, then a fresh verifier container; real Docker), against the
corpus's attacked task (camel-to-snake) in the shapes of tests/task_styles.py.

An attack is a wrong solution: reward 0 or flagged, never an unflagged 1. The ones that win by
chance per grading (decoys are drawn afresh) are graded up to `TRIES` times and must win none.
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import Callable

import pytest
from harness import CaseLog
from test_attack_corpus import AGENT_S, ATTACKED_TASK, VERIFIER_S
from test_heldout_attacks import DECOY_MEDIAN, OPERAND_VERIFIER

from sandboxes.docker_backend import DockerBackend
from sandboxes.oracle import run_oracle
from sandboxes.task import Task
from tests import task_styles

pytestmark = [pytest.mark.docker]


def _plant(source: str) -> str:
    encoded = base64.b64encode(source.encode()).decode()
    return f"echo {encoded} | base64 -d > /app/solution.py\n"


ATTACKS = {"decoy_median": _plant(DECOY_MEDIAN), "operand_verifier": _plant(OPERAND_VERIFIER)}
TRIES = {"decoy_median": 16, "operand_verifier": 1}  # decoy_median wins one in ~2
BROKE = {
    "decoy_median": "the probe's operands reach the tested process at once; the real one is "
    "the candidate every decoy is one substitution of",
    "operand_verifier": "the expected value reaches the tested process as a probe operand; an "
    "answer that checks candidates equals the real one only",
}
CASES = [
    pytest.param(
        name, style, id=f"{name}-{style}", marks=pytest.mark.xfail(strict=True, reason=BROKE[name])
    )
    for name in ATTACKS
    for style in ("bundled", "pymethods")
]


@pytest.mark.parametrize(("name", "style"), CASES)
async def test_heldout_attack(
    name: str,
    style: str,
    backend: DockerBackend,
    small_task: Callable[..., Task],
    case: CaseLog,
) -> None:
    attacked = task_styles.styled(
        small_task(ATTACKED_TASK, agent=AGENT_S, verifier=VERIFIER_S), style
    )
    shape = "" if style == "bundled" else f", {style} task"
    rec = case.add(name, f"solve.sh (run_oracle){shape}", "held-out (test_heldout_attacks.py)")
    outcomes = []
    for _ in range(TRIES[name]):
        run_id = f"adv-{name}-{uuid.uuid4().hex[:8]}"
        r = await run_oracle(
            attacked,
            backend,
            solve_script=ATTACKS[name].encode(),
            labels={"rollouts.rollout_id": run_id, "rollouts.task_id": attacked.id},
        )
        outcomes.append((r.reward, r.verdict.value, r.flags))
        if r.reward == 1.0 and not r.flags:
            break
    rec.observed = {"gradings": [list(o) for o in outcomes]}
    for reward, verdict, flags in outcomes:
        assert verdict == "graded", f"{name}: {verdict} ({outcomes})"
        assert reward == 0.0 or flags, f"{name}: a wrong solution scored {reward} unflagged"


# A correct solution (the task's own oracle) on a suite of 2500 tests (camel-to-snake's cases,
# parametrized): the guard's report passes the 256 KiB evidence cap and loses `finish`.
LONG_SUITE = """
import pytest

from solution import fn

CASES = [("getValue", "get_value"), ("HTTPServer", "http_server"), ("ABC", "abc")] * 834


@pytest.mark.parametrize("name, expected", CASES)
def test_case(name, expected):
    assert fn(name) == expected
"""


@pytest.mark.xfail(
    strict=True,
    reason="the guard's report of a 2500-test suite passes the 256 KiB evidence cap: the "
    "oracle is graded 0 (session_unfinished), through the boundary and in the fallback",
)
@pytest.mark.parametrize("plain", [False, True], ids=["boundary", "fallback"])
async def test_a_long_suite_grades_its_oracle_1(
    plain: bool, backend: DockerBackend, small_task: Callable[..., Task], case: CaseLog
) -> None:
    task = small_task(ATTACKED_TASK, agent=60, verifier=120)
    files = dict(task.test_files, **{"test_solution.py": LONG_SUITE.encode()})
    task = dataclasses.replace(task, id=f"{task.id}-long", test_files=files)
    rec = case.add("long_suite", "oracle (run_oracle)" + (", fallback" if plain else ""))
    r = await run_oracle(
        task,
        backend,
        solve_script=None,
        labels={"rollouts.rollout_id": f"adv-long-{uuid.uuid4().hex[:8]}"},
        plain=plain,
    )
    rec.observed = {"reward": r.reward, "verdict": r.verdict.value, "flags": r.flags}
    assert r.reward == 1.0, f"{r.verdict.value} {r.flags}: {r.output[-600:]}"
