"""Issue 16, reading a task folder: a link swapped in between a check and a read is never
followed out of the task (the race, run for a thousand loads of each state, and made
deterministic), and a file over the size cap is refused before it is read into memory.

Only `load_tasks` is used, so these run unchanged against the loader before the issue, which
returned the outside file as the instruction (about one load in eight here) and read a 600 MB
file whole before checking the cap."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from sandboxes.tasks import TaskLoadError, load_tasks

SECRET = "TOP-SECRET-7f3a"


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


# --- the link-swap race ------------------------------------------------------------------------


# Another process swaps two directory entries atomically (renameat2 RENAME_EXCHANGE) as fast as
# it can: truly concurrent with the loader, which a thread under the GIL is not.
FLIPPER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
while True:
    libc.renameat2(-100, a, -100, b, 2)
"""


# Loads of each outcome the race must see: at the old loader's one leak in eight, missing it
# in a thousand loads has a chance of (7/8) ** 1000, about 1e-58. The count, not a duration,
# ends the race, so a slow machine runs it longer instead of seeing less of it.
RACE_LOADS = 1000
RACE_DEADLINE_S = 60.0  # only for a flipper that never runs


def test_instruction_swapped_for_a_link_is_never_read_through(tmp_path: Path) -> None:
    """instruction.md flips between a file and a link to a file outside the task until the
    loader has both read it and refused it a thousand times; no load may return the outside
    file's text (the loader before the issue did, in about one load in eight here)."""
    (tmp_path / "secret.txt").write_text(SECRET)
    task = write_task(tmp_path / "tasks" / "racy")
    os.symlink(tmp_path / "secret.txt", tmp_path / "swap")  # outside the task folder
    flipper = subprocess.Popen(
        [sys.executable, "-c", FLIPPER, str(task / "instruction.md"), str(tmp_path / "swap")]
    )
    loads = refused = 0
    leaked: list[str] = []
    deadline = time.monotonic() + RACE_DEADLINE_S
    try:
        while not os.path.islink(task / "instruction.md"):  # the flipper has started
            assert time.monotonic() < deadline, "the flipper never swapped the file"
            time.sleep(0.005)
        while loads < RACE_LOADS or refused < RACE_LOADS:
            assert time.monotonic() < deadline, f"the race never got going: {loads}, {refused}"
            try:
                [loaded] = load_tasks(task)
            except TaskLoadError as e:
                refused += 1
                assert SECRET not in str(e)
                continue
            loads += 1
            if SECRET in loaded.instruction:
                leaked.append(loaded.instruction)
    finally:
        flipper.kill()
        flipper.wait()
    assert not leaked, f"{len(leaked)} of {loads} loads returned the outside file"


def test_a_link_swapped_in_right_after_the_check_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race, made deterministic: the moment the loader has looked at instruction.md (an
    lstat), it becomes a link out of the task."""
    (tmp_path / "secret.txt").write_text(SECRET)
    task = write_task(tmp_path / "t")
    real_stat = os.stat
    armed = True

    def stat_then_swap(path, *args, dir_fd=None, follow_symlinks=True):  # type: ignore[no-untyped-def]
        nonlocal armed
        result = real_stat(path, *args, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
        if armed and not follow_symlinks and str(path).endswith("instruction.md"):
            armed = False
            os.unlink(task / "instruction.md")
            os.symlink(tmp_path / "secret.txt", task / "instruction.md")
        return result

    monkeypatch.setattr(os, "stat", stat_then_swap)
    with pytest.raises(TaskLoadError, match="instruction.md is a symlink pointing outside"):
        load_tasks(task)
    assert not armed  # the swap did happen between the check and the read


def test_links_inside_the_task_are_read_links_out_are_refused(tmp_path: Path) -> None:
    task = write_task(tmp_path / "t")
    os.symlink("test.sh", task / "tests" / "relative-inside.sh")
    os.symlink("../../secret", task / "tests" / "relative-out")
    (tmp_path / "secret").write_text(SECRET)
    with pytest.raises(TaskLoadError, match="relative-out is a symlink pointing outside"):
        load_tasks(task)
    os.unlink(task / "tests" / "relative-out")
    [loaded] = load_tasks(task)
    assert loaded.test_files["relative-inside.sh"] == loaded.test_files["test.sh"]
    os.symlink(task / "tests", task / "linked-dir")
    with pytest.raises(TaskLoadError, match="linked-dir is a symlinked directory"):
        load_tasks(task)


# --- size caps while reading ---------------------------------------------------------------


def test_a_600_mb_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    task = write_task(tmp_path / "big")
    with open(task / "tests" / "huge.bin", "wb") as f:
        f.truncate(600 << 20)  # sparse: no disk used
    tracemalloc.start()
    try:
        with pytest.raises(TaskLoadError, match="holds more than"):
            load_tasks(task)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MiB allocated while refusing the file"


def test_an_oversized_archive_in_a_parquet_file_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a Parquet source: the archives are read a row group at a time, so a row
    group holding more archive bytes than its rows may is refused from its metadata. (The cap
    is scaled down to 1 MiB here so that the file stays small.)"""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import sandboxes.tasks as tasks_module

    monkeypatch.setattr(tasks_module, "max_archive_bytes", lambda: 1 << 20)
    blob = os.urandom(8 << 20)  # incompressible: 8 MiB in the file and in memory if read
    source = tmp_path / "t.parquet"
    pq.write_table(pa.table({"path": ["big/huge-task"], "task_binary": [blob]}), source)
    del blob
    tracemalloc.start()
    try:
        with pytest.raises(TaskLoadError, match="huge-task.*over the size cap"):
            load_tasks(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, f"{peak >> 20} MiB allocated while refusing the archive"
