""".ci/run runs the README's '# 2.' Quickstart line, and refuses (exit 1, one line naming the
problem, nothing run) a line that would not run pytest over the whole of tests/."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _ci(tmp_path: Path, line: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / ".ci").mkdir(exist_ok=True)
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    fake = tmp_path / "bin" / "pytest"  # stands in for the real suite: says it ran, and how
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\necho "RAN pytest $*"\n')
    fake.chmod(0o755)
    (tmp_path / "README.md").write_text(f"# Title\n\n```bash\n# 2. Run the tests\n{line}\n```\n")
    return subprocess.run(
        ["bash", ".ci/run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ROLLOUTS_CI_SETUP": "0"},  # no package installs from a unit test
    )


def test_the_readme_line_is_accepted_as_it_stands(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text().splitlines()
    line = readme[readme.index(next(x for x in readme if x.startswith("# 2. "))) + 1]
    assert "'.[test]'" in line  # quoted: an unquoted .[test] is a shell glob
    last = line.rsplit("&&", 1)[1].split()
    assert last[0].endswith("pytest") and set(last[1:]) <= {"tests", "tests/", "-q"}
    r = _ci(tmp_path, "true && bin/pytest")
    assert r.returncode == 0 and "RAN pytest" in r.stdout, r.stderr


@pytest.mark.parametrize(
    "line",
    [
        "true && bin/pytest tests/unit",
        "true && bin/pytest -k fast",
        "true && bin/pytest -m 'not docker'",
        "true && bin/pytest --ignore=tests/e2e",
        "true && bin/pytest tests --deselect tests/x.py",
        "true && echo pytest",
        "true; bin/pytest",
        "bin/pytest || true",
        "true && bin/pytest && true",
        "",
    ],
)
def test_a_line_that_runs_less_fails_loudly(tmp_path: Path, line: str) -> None:
    r = _ci(tmp_path, line)
    assert r.returncode == 1 and "RAN" not in r.stdout
    assert r.stderr.startswith("README.md, Quickstart '# 2.'") and r.stderr.count("\n") == 1


def test_without_a_path_pytest_must_default_to_tests(tmp_path: Path) -> None:
    (tmp_path / ".ci").mkdir()
    r = _ci(tmp_path, "true && bin/pytest")
    assert r.returncode == 0
    toml = (tmp_path / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(
        toml.replace('testpaths = ["tests"]', 'testpaths = ["tests/unit"]')
    )
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    r = subprocess.run(["bash", ".ci/run"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and "testpaths" in r.stderr and "RAN" not in r.stdout
