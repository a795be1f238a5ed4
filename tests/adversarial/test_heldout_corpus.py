"""Held-out attacks of test_heldout_attacks.py delivered as the corpus delivers its solve.sh
(`run_oracle`: agent container, then a fresh verifier container; real Docker), against the
corpus's attacked task (camel-to-snake) in the shapes of tests/task_styles.py.

An attack is a wrong solution: reward 0 or flagged, never an unflagged 1. The ones that win by
chance per grading (decoys are drawn afresh) are graded up to `TRIES` times and must win none.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable

import pytest
from harness import CaseLog
from test_attack_corpus import AGENT_S, ATTACKED_TASK, VERIFIER_S
from test_heldout_attacks import DECOY_MEDIAN, OPERAND_VERIFIER, OPERAND_VERIFIER_STR

from sandboxes.docker_backend import DockerBackend
from sandboxes.oracle import run_oracle
from sandboxes.task import Task
from tests import task_styles

pytestmark = [pytest.mark.docker]


def _plant(source: str) -> str:
    encoded = base64.b64encode(source.encode()).decode()
    return f"echo {encoded} | base64 -d > /app/solution.py\n"


ATTACKS = {
    "decoy_median": _plant(DECOY_MEDIAN),
    "operand_verifier": _plant(OPERAND_VERIFIER),
    # a subclass of str arrives as a str holding its base value: its own == still judged
    "operand_verifier_str": _plant(OPERAND_VERIFIER_STR),
}
# decoy_median won one grading in ~2 while the decoys were its only check; what an object holds
# is now asked before it sees an operand (trusted.py), so a second grading only guards chance.
TRIES = {"decoy_median": 2, "operand_verifier": 1, "operand_verifier_str": 1}
CASES = [
    pytest.param(name, style, id=f"{name}-{style}")
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
