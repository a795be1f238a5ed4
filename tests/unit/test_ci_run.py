""".ci/run runs the README's '# 2.' Quickstart line, and refuses (exit 1, one line naming the
problem, nothing run) a line that would not run pytest over the whole of tests/."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _ci(
    tmp_path: Path, line: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / ".ci").mkdir(exist_ok=True)
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    if not (tmp_path / "pyproject.toml").exists():
        shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    fake = tmp_path / "bin" / "pytest"  # stands in for the real suite: says it ran, and how
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\necho "RAN pytest $* addopts=[$PYTEST_ADDOPTS]"\n')
    fake.chmod(0o755)
    (tmp_path / "README.md").write_text(f"# Title\n\n```bash\n# 2. Run the tests\n{line}\n```\n")
    return subprocess.run(
        ["bash", ".ci/run", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        # No package installs from a unit test.
        env={**os.environ, "ROLLOUTS_CI_SETUP": "0", **(env or {})},
    )


def _readme_line() -> str:
    readme = (REPO / "README.md").read_text().splitlines()
    return readme[readme.index(next(x for x in readme if x.startswith("# 2. "))) + 1]


def test_the_readme_line_is_accepted_as_it_stands(tmp_path: Path) -> None:
    line = _readme_line()
    assert "'.[test]'" in line  # quoted: an unquoted .[test] is a shell glob
    r = _ci(tmp_path, line, "--check")  # checked, not run: its setup steps install things
    assert r.returncode == 0 and r.stdout.strip() == line, r.stderr


def test_an_accepted_line_runs_without_the_callers_addopts(tmp_path: Path) -> None:
    r = _ci(tmp_path, "bin/pytest -q", env={"PYTEST_ADDOPTS": "-k fast"})
    assert r.returncode == 0 and "RAN pytest -q addopts=[]" in r.stdout, r.stderr


@pytest.mark.parametrize(
    "line",
    [
        "scripts/vllm_env.sh && bin/pytest tests/unit",
        "true && bin/pytest",
        "export PYTEST_ADDOPTS=-kfast && bin/pytest",
        "rm -rf tests/e2e && bin/pytest",
        "scripts/vllm_env.sh > /dev/null && bin/pytest",
        "bin/pytest $(echo -k fast)",
        "bin/pytest `echo tests/unit`",
        "scripts/vllm_env.sh && bin/pytest -k fast",
        "bin/pytest -m 'not docker'",
        "bin/pytest --ignore=tests/e2e",
        "bin/pytest tests --deselect tests/x.py",
        "scripts/vllm_env.sh && echo pytest",
        "scripts/vllm_env.sh; bin/pytest",
        "bin/pytest || true",
        "bin/pytest && scripts/vllm_env.sh",
        "",
    ],
)
def test_a_line_that_runs_less_fails_loudly(tmp_path: Path, line: str) -> None:
    r = _ci(tmp_path, line)
    assert r.returncode == 1 and "RAN" not in r.stdout
    assert r.stderr.startswith("README.md, Quickstart '# 2.'") and r.stderr.count("\n") == 1


def test_without_a_path_pytest_must_default_to_tests(tmp_path: Path) -> None:
    r = _ci(tmp_path, "bin/pytest")
    assert r.returncode == 0
    toml = (tmp_path / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(
        toml.replace('testpaths = ["tests"]', 'testpaths = ["tests/unit"]')
    )
    r = _ci(tmp_path, "bin/pytest")
    assert r.returncode == 1 and "testpaths" in r.stderr and "RAN" not in r.stdout


def test_addopts_in_pyproject_are_refused(tmp_path: Path) -> None:
    _ci(tmp_path, "bin/pytest")
    toml = (tmp_path / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(
        toml.replace('testpaths = ["tests"]', 'testpaths = ["tests"]\naddopts = "-m \'not slow\'"')
    )
    r = _ci(tmp_path, "bin/pytest tests")
    assert r.returncode == 1 and "addopts" in r.stderr and "RAN" not in r.stdout
