"""What the stand-in "model" says: a scripted terminal agent (terminus-2 JSON protocol).

It reads its prompt back (detokenized), recognises the task by its instruction text in the first
user message, and infers which step it is on from its own earlier replies (the only assistant
turns): each reply that parsed as a protocol object moves it one step on, so after a malformed or
truncated reply (answered with an error observation) it simply redoes that step.

Script per sample:
  1. write the solution: the oracle solve.sh typed into bash as a heredoc (with probability
     p_correct), otherwise a plausible wrong solution (the function defined with a wrong body);
  2. run a quick import check, with task_complete true;
  3. (asked to confirm) task_complete true, no commands.
In attack mode, step 0 types one adversarial command first, then it proceeds like a wrong
solution. Correct-vs-wrong is decided once per sample from (stub seed, request seed, choice index,
task id), so it stays consistent across the sample's turns.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass

from sandboxes.task import Task
from service.policy.stub.chat_template import Turn, parse_transcript

# A port the reliability tests listen on (on the host); sandboxes must never reach it.
HOST_PROBE_PORT = 47631

# Adversarial first commands for reliability tests, by name. Data, not code: each is typed as is.
ATTACKS: dict[str, str] = {
    "fork_bomb": ":(){ :|:& };:\n",
    "infinite_loop": "while true; do :; done\n",
    "memory_bomb": 'python3 -c "a = []\nwhile True: a.append(bytearray(10**8))"\n',
    "disk_fill": "dd if=/dev/zero of=/app/fill bs=1M count=1000000 status=none\n",
    "big_output": "yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c 200000000\n",
    "network": (
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=5); "
        "print('NETWORK' + '-REACHED')\"; getent hosts pypi.org\n"
    ),
    "read_tests": "ls -la /tests; cat /tests/test.sh\n",
    "write_reward": (
        "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && "
        "echo '{\"reward\": 1}' > /logs/verifier/reward.json\n"
    ),
    "overwrite_tests": (
        "mkdir -p /tests && printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' "
        "> /tests/test.sh\n"
    ),
    "kill_all": "kill -9 -1\n",
    "daemon": "setsid nohup sh -c 'while :; do sleep 1; done' > /dev/null 2>&1 < /dev/null &\n",
    "disk_fill_tmp": "dd if=/dev/zero of=/tmp/fill bs=1M count=1000000 status=none\n",
    "big_output_one_line": "head -c 200000000 /dev/zero | tr '\\0' a\n",
    "bad_bytes": (
        "printf '\\xff\\xfe\\x80\\xc3\\x28 \\033[2J\\033[H\\033]0;pwned\\007"
        "\\033[?1049h\\033[6n\\033P+q544e\\033\\\\ BAD-BYTES-DONE\\n'\n"
    ),
    # The default gateway (if any route exists) and the Docker bridge's usual host address.
    "network_gateway": (
        "python3 -c \"import socket\nfor h in ('172.17.0.1', '10.0.0.1', '192.168.0.1'):\n"
        f" try: socket.create_connection((h, {HOST_PROBE_PORT}), timeout=3); "
        "print('NETWORK' + '-REACHED', h)\n"
        " except OSError as e: print('blocked', h, e)\"\n"
    ),
    # A service listening on the host's loopback (the test starts one on HOST_PROBE_PORT).
    "network_loopback": (
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {HOST_PROBE_PORT}), "
        "timeout=3); print('NETWORK' + '-REACHED')\"\n"
    ),
    "read_solution": "ls -la /solution /tests; cat /solution/solve.sh /tests/test_*.py\n",
    # Tests the agent plants in /app: the verifier must run its own hidden tests only.
    "overwrite_app_tests": (
        "printf 'def test_ok():\\n    assert True\\n' > /app/test_solution.py && "
        "printf 'import pytest\\n' > /app/conftest.py\n"
    ),
    # A fake `pytest` module in /app that writes a passing JUnit report and exits 0.
    "shadow_pytest": (
        'printf \'import sys\\nfor a in sys.argv:\\n    if a.startswith("--junitxml="):\\n'
        '        open(a.split("=",1)[1],"w").write("<testsuite tests=\\\\"3\\\\" '
        'failures=\\\\"0\\\\" errors=\\\\"0\\\\" skipped=\\\\"0\\\\"/>")\\n'
        "sys.exit(0)\\n' > /app/pytest.py\n"
    ),
    "symlink_escape": (
        "ln -sf /etc/shadow /app/shadow; ln -sf /proc/1/root /app/hostroot; "
        "ln -sf ../../../etc/passwd /app/passwd; ln /etc/passwd /app/hardlink 2>/dev/null; "
        "ls -la /app\n"
    ),
    # Solution code that hangs at import: the verifier's tests must time out, not hang the service.
    "hang_verifier": (
        "printf 'import time\\ntime.sleep(10**6)\\n' > /app/solution.py && "
        "chmod a-w /app/solution.py\n"
    ),
}

_PROTOCOL_KEYS = {"analysis", "plan", "commands", "task_complete"}
_HEREDOC_MARK = "__ROLLOUTS_STUB_EOF__"


@dataclass(frozen=True)
class BehaviourSettings:
    p_correct: float = 1.0
    p_malformed: float = 0.02
    seed: int = 0
    attack: str | None = None

    def __post_init__(self) -> None:
        for name in ("p_correct", "p_malformed"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {getattr(self, name)}")
        if self.attack is not None and self.attack not in ATTACKS:
            raise ValueError(f"attack: unknown {self.attack!r}; known: {', '.join(ATTACKS)}")


def _reply(analysis: str, plan: str, commands: list[tuple[str, float]], done: bool) -> str:
    return json.dumps(
        {
            "analysis": analysis,
            "plan": plan,
            "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
            "task_complete": done,
        }
    )


def is_protocol_reply(content: str) -> bool:
    try:
        obj = json.loads(content)
    except ValueError:
        return False
    return isinstance(obj, dict) and _PROTOCOL_KEYS <= obj.keys()


@dataclass(frozen=True)
class _Target:
    path: str  # the Python file the task wants, e.g. /app/solution.py
    function: str
    args: str


def _target(task: Task) -> _Target:
    solve = task.solution_files.get("solve.sh", b"").decode("utf-8", errors="replace")
    path_m = re.search(r"(/[\w./-]+\.py)\b", solve) or re.search(
        r"(/[\w./-]+\.py)\b", task.instruction
    )
    def_m = re.search(r"^\s*def\s+([A-Za-z_]\w*)\s*\(([^)]*)\)", solve, re.M) or re.search(
        r"`?([A-Za-z_]\w*)\(([^)]*)\)`?", task.instruction
    )
    return _Target(
        path=path_m.group(1) if path_m else "/app/solution.py",
        function=def_m.group(1) if def_m else "solve",
        args=def_m.group(2) if def_m else "*args, **kwargs",
    )


class ScriptedAgent:
    def __init__(self, tasks: Iterable[Task], settings: BehaviourSettings) -> None:
        self.settings = settings
        # Longest instruction first, so a task whose instruction contains another's wins.
        self.tasks = sorted(tasks, key=lambda t: -len(t.instruction.strip()))

    def find_task(self, turns: list[Turn]) -> Task | None:
        first_user = next((t.content for t in turns if t.role == "user"), None)
        if first_user is None:
            return None
        for task in self.tasks:
            instr = task.instruction.strip()
            if instr and instr in first_user:
                return task
        return None

    def is_correct(self, task: Task, seed: int | None, index: int, rng: random.Random) -> bool:
        if seed is None:  # no sample seed: nothing to stay consistent with, draw afresh
            return rng.random() < self.settings.p_correct
        h = hashlib.sha256(f"{self.settings.seed}:{seed}:{index}:{task.id}".encode()).digest()
        return int.from_bytes(h[:8], "big") / 2**64 < self.settings.p_correct

    def reply(self, prompt_text: str, *, seed: int | None, index: int, rng: random.Random) -> str:
        """The full scripted reply text (without EOS) for this prompt."""
        turns = parse_transcript(prompt_text)
        task = self.find_task(turns)
        if task is None:
            return _reply("I do not recognise this task.", "Stop here.", [], True)
        # Closed assistant turns only: the last, open one is the generation prompt.
        done_steps = sum(
            1 for t in turns if t.role == "assistant" and t.closed and is_protocol_reply(t.content)
        )
        steps = self._script(task, self.is_correct(task, seed, index, rng))
        text = steps[min(done_steps, len(steps) - 1)]
        if rng.random() < self.settings.p_malformed:
            # Cut strictly inside the object: a prefix of a JSON object is never valid JSON.
            text = text[: rng.randrange(1, len(text) - 1)]
        return text

    def _script(self, task: Task, correct: bool) -> list[str]:
        tgt = _target(task)
        module = tgt.path.rsplit("/", 1)[-1].removesuffix(".py")
        folder = tgt.path.rsplit("/", 1)[0] or "/"
        steps: list[str] = []
        if self.settings.attack is not None:
            steps.append(
                _reply(
                    "Let me look around the environment first.",
                    "Run a command.",
                    [(ATTACKS[self.settings.attack], 5.0)],
                    False,
                )
            )
            correct = False
        if correct and task.has_oracle:
            solve = task.solution_files["solve.sh"].decode("utf-8", errors="replace")
            if not solve.endswith("\n"):
                solve += "\n"
            keys = f"bash <<'{_HEREDOC_MARK}'\n{solve}{_HEREDOC_MARK}\n"
            analysis = f"The task asks for {tgt.function} in {tgt.path}. I know how to write it."
        else:
            body = f"def {tgt.function}({tgt.args}):\n    return None\n"
            keys = (
                f"mkdir -p {folder} && cat > {tgt.path} <<'{_HEREDOC_MARK}'\n"
                f"{body}{_HEREDOC_MARK}\n"
            )
            analysis = (
                f"The task asks for {tgt.function} in {tgt.path}. I will write a first version."
            )
        steps.append(_reply(analysis, f"Write {tgt.path}.", [(keys, 1.0)], False))
        check = f"cd {folder} && python3 -c \"import {module}; print('ok')\"\n"
        steps.append(
            _reply(
                "The solution file is written.",
                "Check that it imports, then finish.",
                [(check, 1.0)],
                True,
            )
        )
        steps.append(_reply("The solution is in place and imports cleanly.", "Confirm.", [], True))
        return steps
