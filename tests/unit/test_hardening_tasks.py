"""Issue 16, what a request may name: the tasks roots (paths outside them, `..`, links out of
them and a symlinked root), the size cap enforced during the read itself, and lazy selection
(only the tasks taken are read). The reads' link rules are in test_hardening_task_reads.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sandboxes.safe_fs as safe_fs
from sandboxes.tasks import NotInRoots, TaskRoots, UnknownTaskIds, select_tasks


def write_task(folder: Path, instruction: str = "Write /app/solution.py.\n") -> Path:
    files = {
        "task.toml": "[verifier]\ntimeout_sec = 30\n",
        "instruction.md": instruction,
        "environment/Dockerfile": "FROM rollouts-base:bookworm\nRUN id\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    }
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


# --- size caps while reading -----------------------------------------------------------------


def test_a_growing_file_is_cut_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file grows after its size was checked: the read itself stops at the cap."""
    (tmp_path / "f").write_bytes(b"x" * 10)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        small = os.fstat(fd)
        with open(tmp_path / "f", "ab") as grow:
            grow.write(b"y" * (8 << 20))
        monkeypatch.setattr(safe_fs.os, "fstat", lambda _fd: small)  # what the check saw
        with pytest.raises(safe_fs.UnsafePath, match="more than 50"):
            safe_fs.read_capped(fd, 50)
        assert os.lseek(fd, 0, os.SEEK_CUR) <= 51  # not a byte more than the cap + 1
    finally:
        os.close(fd)


# --- the tasks roots ---------------------------------------------------------------------------


@pytest.fixture
def roots(tmp_path: Path) -> tuple[TaskRoots, Path, Path]:
    """A root holding two tasks, a link escaping it, and a valid task outside it."""
    root = tmp_path / "datasets"
    write_task(root / "suite" / "task-a")
    write_task(root / "suite" / "task-b")
    outside = write_task(tmp_path / "elsewhere" / "outside-task")
    os.symlink(tmp_path / "elsewhere", root / "escape")
    os.symlink("suite", root / "alias")  # a link that stays inside the root
    return TaskRoots([root]), root, outside


def refusal(roots: TaskRoots, path: str) -> str:
    with pytest.raises(NotInRoots) as info:
        list(select_tasks(path, roots=roots))
    return str(info.value).replace(repr(path), "<path>")


def test_paths_outside_the_roots_get_one_answer(
    roots: tuple[TaskRoots, Path, Path], tmp_path: Path
) -> None:
    task_roots, root, outside = roots
    probes = [
        "/etc",  # answered "task 'PackageKit': missing task.toml" before: a name oracle
        "/etc/shadow",
        "/etc/passwd",
        "/nonexistent",
        str(outside),  # a real task, with a Dockerfile that would have been built
        str(outside.parent),
        f"{root}/../elsewhere/outside-task",  # `..` out of a root
        f"{root}/suite/../../elsewhere",
        f"{root}/escape/outside-task",  # a link inside the root pointing out of it
        f"{root}/escape",
        "escape/outside-task",  # the same, as a dataset name relative to the root
        "../elsewhere",
        f"{root}/suite/nope",  # inside, but not there
        "",
        f"{root}/suite\x00",
    ]
    answers = {refusal(task_roots, p) for p in probes if p}
    assert len(answers) == 1, answers  # nothing tells apart missing, outside or refused
    (answer,) = answers
    assert "PackageKit" not in answer and "missing" not in answer and "root:" not in answer


def test_paths_inside_the_roots_load(roots: tuple[TaskRoots, Path, Path]) -> None:
    task_roots, root, _ = roots
    ids = lambda path: [t.id for t in select_tasks(path, roots=task_roots)]  # noqa: E731
    assert ids(str(root / "suite")) == ["task-a", "task-b"]
    assert ids(str(root / "suite" / "task-b")) == ["task-b"]
    assert ids("suite") == ["task-a", "task-b"]  # a dataset name, relative to the root
    assert ids("suite/task-a") == ["task-a"]
    assert ids("alias/task-a") == ["task-a"]  # a link that stays inside the root


def test_a_symlinked_root_serves_both_spellings(tmp_path: Path) -> None:
    real = tmp_path / "real-root"
    write_task(real / "only-task")
    os.symlink(real, tmp_path / "root-link")
    task_roots = TaskRoots([tmp_path / "root-link"])
    for path in (tmp_path / "root-link", tmp_path / "root-link" / "only-task", real):
        assert [t.id for t in select_tasks(str(path), roots=task_roots)] == ["only-task"]
    assert "no such dataset" in refusal(task_roots, str(tmp_path))


def test_no_roots_means_no_paths(tmp_path: Path) -> None:
    write_task(tmp_path / "t")
    assert "no such dataset" in refusal(TaskRoots([]), str(tmp_path / "t"))


# --- lazy selection ----------------------------------------------------------------------------


def test_selection_reads_only_what_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(6):
        write_task(tmp_path / f"t{i}")
    read: list[str] = []
    real = safe_fs.read_tree

    def counting(folder: safe_fs.Folder, **kw: object) -> dict[str, bytes]:
        read.append(folder.spellings[0].rsplit("/", 1)[-1])
        return real(folder, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr("sandboxes.tasks.read_tree", counting)
    it = select_tasks(tmp_path, ids=["t4", "t1"])
    assert read == []  # nothing read before the first task is taken
    assert next(it).id == "t1" and read == ["t1"]
    assert [t.id for t in it] == ["t4"] and read == ["t1", "t4"]
    read.clear()
    assert [t.id for t in select_tasks(tmp_path, limit=2)] == ["t0", "t1"] and read == ["t0", "t1"]
    with pytest.raises(UnknownTaskIds, match="no task with id zz"):
        list(select_tasks(tmp_path, ids=["t0", "zz"]))
