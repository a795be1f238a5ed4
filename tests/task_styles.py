"""The bundled camel-to-snake task in the other shapes Harbor-format tasks come in, so the reward
guarantees are tested against each way tests reach the solution:

- `bundled`: as shipped (isolated `python3 -I`, /app appended last, JUnit report checked);
- `pymethods`: as pymethods2test writes them: `PYTHONPATH=/app`, pytest from /app, and the
  reward is pytest's exit status alone;
- `unittest`: the same, with the tests as a `unittest.TestCase`;
- `plain`: no pytest at all: a script of asserts, whose exit status is the reward;
- `copied`: as `pymethods`, from a copy of /app that test.sh makes (as a suite that builds or
  installs the project elsewhere first).
"""

from __future__ import annotations

import re
from dataclasses import replace

from sandboxes.task import Task

STYLES = ("bundled", "pymethods", "unittest", "plain", "copied")

_EXIT_STATUS_REWARD = (
    'if [ "$rc" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; '
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)
_PYMETHODS_SH = (
    "#!/bin/bash\nmkdir -p /logs/verifier\nexport PYTHONPATH=/app\ncd /app\n"
    "python3 -m pytest -q -p no:cacheprovider /tests/test_solution.py\nrc=$?\n"
    + _EXIT_STATUS_REWARD
)
_COPIED_SH = (
    "#!/bin/bash\nmkdir -p /logs/verifier\nrm -rf /tmp/app-copy\ncp -r /app /tmp/app-copy\n"
    "export PYTHONPATH=/tmp/app-copy\ncd /tmp/app-copy\n"
    "python3 -m pytest -q -p no:cacheprovider /tests/test_solution.py\nrc=$?\n"
    + _EXIT_STATUS_REWARD
)
_PLAIN_SH = "#!/bin/bash\nmkdir -p /logs/verifier\ncd /app\npython3 /tests/run_checks.py\nrc=$?\n"
_PLAIN_SH += _EXIT_STATUS_REWARD
_ASSERT = re.compile(r"^(\s*)assert (fn\(.*\)) == (.*)$", re.M)


def styled(task: Task, style: str) -> Task:
    """`task` (camel-to-snake or any task whose tests are `assert fn(...) == ...` lines) with
    its tests in `style`."""
    if style == "bundled":
        return task
    tests = task.test_files["test_solution.py"].decode()
    if style in ("pymethods", "copied"):
        test_sh = _PYMETHODS_SH if style == "pymethods" else _COPIED_SH
        files = {"test.sh": test_sh.encode(), "test_solution.py": tests.encode()}
    elif style == "unittest":
        body = _ASSERT.sub(r"\1    self.assertEqual(\2, \3)", tests)
        body = re.sub(r"^def (test_\w+)\(\):", r"    def \1(self):", body, flags=re.M)
        body = body.replace("from solution import fn", "import unittest\n\nfrom solution import fn")
        body = body.replace(
            "\n    def test_", "\n\nclass TestFn(unittest.TestCase):\n    def test_", 1
        )
        files = {"test.sh": _PYMETHODS_SH.encode(), "test_solution.py": body.encode()}
    elif style == "plain":
        body = re.sub(r"^def (test_\w+)\(\):\n", "", tests, flags=re.M)
        body = re.sub(r"^    ", "", body, flags=re.M)
        body = (
            'import sys\n\nsys.path.insert(0, "/app")\n' + body + '\nprint("all checks passed")\n'
        )
        files = {"test.sh": _PLAIN_SH.encode(), "run_checks.py": body.encode()}
    else:
        raise ValueError(f"unknown style {style!r}")
    return replace(task, id=f"{task.id}-{style}", test_files=files)
