"""`rollouts tasks list`, through typer's CliRunner and once through the real console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from clients.commands.tasks import app as tasks_app

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"


def _cli() -> typer.Typer:
    # Wired the way clients/cli.py does it, so `tasks list` is a real sub-command path.
    root = typer.Typer()
    root.add_typer(tasks_app, name="tasks")
    return root


def _write_task(folder: Path, *, with_tests: bool = True) -> None:
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text("FROM rollouts-base:bookworm\n")
    (folder / "task.toml").write_text("[verifier]\ntimeout_sec = 10\n")
    (folder / "instruction.md").write_text("Do the thing.\n")
    if with_tests:
        (folder / "tests").mkdir()
        (folder / "tests" / "test.sh").write_text("exit 0\n")


def test_list_json() -> None:
    result = CliRunner().invoke(_cli(), ["tasks", "list", str(EXAMPLES), "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) >= 10
    assert rows[0]["id"] == "camel-to-snake"
    assert set(rows[0]) == {"id", "instruction_chars", "env_hash", "has_oracle", "calibration"}
    assert all(r["has_oracle"] and len(r["env_hash"]) == 16 for r in rows)


def test_list_table() -> None:
    result = CliRunner().invoke(_cli(), ["tasks", "list", str(REPO / "examples" / "tasks.parquet")])
    assert result.exit_code == 0, result.output
    assert "camel-to-snake" in result.stdout and "sliding-window" in result.stdout
    assert "env hash" in result.stdout


def test_bad_task_exits_2_with_one_line(tmp_path: Path) -> None:
    _write_task(tmp_path / "good")
    _write_task(tmp_path / "no-tests", with_tests=False)
    result = CliRunner().invoke(_cli(), ["tasks", "list", str(tmp_path), "--json"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: task 'no-tests': missing tests/test.sh (the verifier)"
    ]


def test_skip_invalid_lists_the_rest(tmp_path: Path) -> None:
    _write_task(tmp_path / "good")
    _write_task(tmp_path / "no-tests", with_tests=False)
    result = CliRunner().invoke(
        _cli(), ["tasks", "list", str(tmp_path), "--json", "--skip-invalid"]
    )
    assert result.exit_code == 0
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["good"]
    assert "skipped: task 'no-tests': missing tests/test.sh" in result.stderr


def test_missing_source_via_console_script(tmp_path: Path) -> None:
    missing = tmp_path / "nope.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "clients.cli", "tasks", "list", str(missing)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: task source '{missing}': no such file or folder"
