"""The bundled example tasks: well-formed, identical in both sources, and their oracles work.

Each oracle is run against the hidden tests with the host Python (no Docker): the oracle must
pass and an empty solution.py must fail, so no task can be unsolvable or trivially passed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pyarrow.parquet as pq
import pytest

from sandboxes.task import Task
from sandboxes.tasks import load_tasks

REPO = Path(__file__).resolve().parents[2]
TASKS_DIR = REPO / "examples" / "tasks"
PARQUET = REPO / "examples" / "tasks.parquet"
EXPECTED_DOCKERFILE = (
    "FROM ubuntu:24.04\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pytest"
    " && rm -rf /var/lib/apt/lists/*\n"
    "WORKDIR /app\n"
)

FOLDER_TASKS = load_tasks(TASKS_DIR)


def _build_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "build_example_parquet", REPO / "scripts" / "build_example_parquet.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_at_least_ten_tasks_sharing_one_image() -> None:
    assert len(FOLDER_TASKS) >= 10
    assert {t.environment_files["Dockerfile"].decode() for t in FOLDER_TASKS} == {
        EXPECTED_DOCKERFILE
    }
    assert len({t.env_hash for t in FOLDER_TASKS}) == 1
    assert len({t.test_files["test.sh"] for t in FOLDER_TASKS}) == 1


@pytest.mark.parametrize("task", FOLDER_TASKS, ids=lambda t: t.id)
def test_task_shape(task: Task) -> None:
    cfg = task.config
    assert (cfg.verifier_timeout_sec, cfg.agent_timeout_sec) == (60.0, 300.0)
    env = cfg.environment
    assert (env.cpus, env.memory_mb, env.storage_mb, env.network_mode) == (1.0, 1024, 1024, "none")
    assert cfg.metadata["name"] == task.id
    assert "/app/solution.py" in task.instruction and "`fn(" in task.instruction
    assert set(task.test_files) == {"test.sh", "test_solution.py"}
    assert b"from solution import fn" in task.test_files["test_solution.py"]
    assert task.has_oracle
    assert task.solution_files["solve.sh"].count(b"cat > /app/solution.py <<'EOF'") == 1


def test_parquet_matches_folders() -> None:
    parquet_tasks = load_tasks(PARQUET)
    assert [t.id for t in parquet_tasks] == [t.id for t in FOLDER_TASKS]
    for a, b in zip(FOLDER_TASKS, parquet_tasks, strict=True):
        assert a.instruction == b.instruction
        assert a.config == b.config
        assert a.env_hash == b.env_hash
        assert (a.environment_files, a.test_files, a.solution_files) == (
            b.environment_files,
            b.test_files,
            b.solution_files,
        )


def test_committed_parquet_is_up_to_date_and_build_is_deterministic() -> None:
    build = _build_script()
    first = build.build_table(TASKS_DIR)
    assert first.equals(build.build_table(TASKS_DIR))  # same bytes on every run
    committed = pq.read_table(PARQUET)
    assert committed.column_names == ["path", "task_binary"]
    # Compared by content: Parquet's own footer names the writer's version.
    assert committed.equals(first), "run: python scripts/build_example_parquet.py"


def _run_hidden_tests(tests_dir: Path, app_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(app_dir),
        "PYTHONDONTWRITEBYTECODE": "1",
        # The venv's pytest plugins (hypothesis, schemathesis...) are irrelevant here and slow.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests_dir)],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("task", FOLDER_TASKS, ids=lambda t: t.id)
def test_oracle_passes_and_empty_solution_fails(task: Task, tmp_path: Path) -> None:
    app_dir, tests_dir = tmp_path / "app", tmp_path / "tests"
    app_dir.mkdir()
    tests_dir.mkdir()
    for name, data in task.test_files.items():
        (tests_dir / name).write_bytes(data)
    solve = task.solution_files["solve.sh"].decode().replace("/app/", f"{app_dir}/")
    subprocess.run(["bash", "-c", solve], check=True, timeout=30)
    solution = (app_dir / "solution.py").read_text()
    assert solution.count("def fn(") == 1  # exactly one function named fn

    passed = _run_hidden_tests(tests_dir, app_dir)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert " passed" in passed.stdout and "failed" not in passed.stdout

    (app_dir / "solution.py").write_text("")
    empty = _run_hidden_tests(tests_dir, app_dir)
    assert empty.returncode != 0, empty.stdout
