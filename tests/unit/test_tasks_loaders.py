"""Task loaders on real folders, tar archives and Parquet files built in tmp_path."""

from __future__ import annotations

import gzip
import io
import itertools
import os
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sandboxes.tasks as tasks_module
from sandboxes.tasks import TaskLoadError, iter_tasks, load_tasks, task_id_from_path

TOML = """
[metadata]
author = "tests"
[verifier]
timeout_sec = 30
[agent]
timeout_sec = 120
[environment]
build_timeout_sec = 50
cpus = 2
memory_mb = 512
storage_mb = 2048
network_mode = "bridge"
"""


def task_files(toml: str = TOML, **override: bytes | None) -> dict[str, bytes]:
    """A valid task as a file map; override a file with bytes, or drop it with None."""
    files: dict[str, bytes | None] = {
        "task.toml": toml.encode(),
        "instruction.md": b"Write /app/solution.py defining fn.\n",
        "environment/Dockerfile": b"FROM rollouts-base:bookworm\n",
        "tests/test.sh": b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        "tests/test_solution.py": b"def test_x():\n    assert True\n",
        "solution/solve.sh": b"#!/bin/bash\necho 'def fn(): pass' > /app/solution.py\n",
    }
    files.update(override)
    return {k: v for k, v in files.items() if v is not None}


def write_folder(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def make_tar(files: dict[str, bytes], *, top: str | None = None, gz: bool = True) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(out.getvalue()) if gz else out.getvalue()


def write_parquet(path: Path, rows: list[tuple[str, bytes]], **extra_columns: list) -> Path:
    columns = {
        "path": pa.array([r[0] for r in rows], pa.string()),
        "task_binary": pa.array([r[1] for r in rows], pa.binary()),
        **{k: pa.array(v) for k, v in extra_columns.items()},
    }
    pq.write_table(pa.table(columns), path)
    return path


def one_error(source: Path) -> TaskLoadError:
    with pytest.raises(TaskLoadError) as info:
        load_tasks(source)
    return info.value


# --- sources --------------------------------------------------------------------------------


def test_single_folder(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "my task!", task_files())
    [task] = load_tasks(folder)
    assert task.id == "my_task_"
    assert task.instruction.startswith("Write /app/solution.py")
    assert set(task.test_files) == {"test.sh", "test_solution.py"}
    assert set(task.environment_files) == {"Dockerfile"}
    assert task.has_oracle


def test_folder_of_folders_sorted_and_hidden_skipped(tmp_path: Path) -> None:
    for name in ["b-task", "a-task", "c-task"]:
        write_folder(tmp_path / name, task_files())
    write_folder(tmp_path / ".git", {"config": b"x"})
    (tmp_path / "README.md").write_text("not a task")
    assert [t.id for t in load_tasks(tmp_path)] == ["a-task", "b-task", "c-task"]


def test_single_folder_given_as_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_folder(tmp_path / "dot-task", task_files())
    monkeypatch.chdir(tmp_path / "dot-task")
    assert [t.id for t in load_tasks(".")] == ["dot-task"]


@pytest.mark.parametrize("top", [None, "some-folder"], ids=["root", "top-folder"])
@pytest.mark.parametrize("gz", [True, False], ids=["tar.gz", "tar"])
def test_parquet_layouts(tmp_path: Path, top: str | None, gz: bool) -> None:
    blob = make_tar(task_files(), top=top, gz=gz)
    source = write_parquet(
        tmp_path / "t.parquet",
        [("datasets/x/task-one", blob), ("task two/", blob)],
        difficulty=["easy", "hard"],  # extra columns are fine
    )
    tasks = load_tasks(source)
    assert [t.id for t in tasks] == ["task-one", "task_two"]
    assert tasks[0].path == "datasets/x/task-one"
    assert tasks[0].test_files["test.sh"].startswith(b"#!/bin/bash")


def test_folder_and_parquet_agree(tmp_path: Path) -> None:
    files = task_files()
    write_folder(tmp_path / "tasks" / "same", files)
    source = write_parquet(tmp_path / "t.parquet", [("same", make_tar(files, top="same"))])
    [a] = load_tasks(tmp_path / "tasks")
    [b] = load_tasks(source)
    assert (a.id, a.instruction, a.config, a.env_hash) == (
        b.id,
        b.instruction,
        b.config,
        b.env_hash,
    )
    assert (a.test_files, a.solution_files) == (b.test_files, b.solution_files)


# --- task.toml ------------------------------------------------------------------------------


def test_config_mapping_and_unknown_keys_kept(tmp_path: Path) -> None:
    toml = TOML + 'gpus = 0\nfuture_knob = "x"\n[verifier.env]\nA = "1"\n[brand_new]\nk = 1\n'
    [task] = load_tasks(write_folder(tmp_path / "t", task_files(toml)))
    cfg = task.config
    assert (cfg.verifier_timeout_sec, cfg.agent_timeout_sec) == (30.0, 120.0)
    env = cfg.environment
    assert (env.build_timeout_sec, env.cpus, env.memory_mb, env.storage_mb) == (
        50.0,
        2.0,
        512,
        2048,
    )
    assert env.network_mode == "bridge" and env.docker_image is None
    assert env.extra == {"gpus": 0, "future_knob": "x"}
    assert cfg.metadata == {"author": "tests"}
    assert cfg.raw["brand_new"] == {"k": 1} and cfg.raw["verifier"]["env"] == {"A": "1"}


def test_config_defaults_when_sections_missing(tmp_path: Path) -> None:
    [task] = load_tasks(write_folder(tmp_path / "t", task_files("")))
    assert task.config.verifier_timeout_sec == 720.0
    assert task.config.agent_timeout_sec == 900.0
    assert task.config.environment.network_mode == "none"


def test_docker_image_instead_of_dockerfile(tmp_path: Path) -> None:
    toml = '[environment]\ndocker_image = "rollouts-base:bookworm"\n'
    files = task_files(toml, **{"environment/Dockerfile": None})
    [task] = load_tasks(write_folder(tmp_path / "t", files))
    assert task.config.environment.docker_image == "rollouts-base:bookworm"
    assert task.environment_files == {}


@pytest.mark.parametrize(
    ("toml", "needles"),
    [
        ('[environment]\nmemory_mb = "big"\n', ["environment.memory_mb", "integer"]),
        ('[verifier]\ntimeout_sec = "60"\n', ["verifier.timeout_sec"]),
        ("[agent]\ntimeout_sec = -5\n", ["agent.timeout_sec", "greater than 0"]),
        ("[environment]\ncpus = true\n", ["environment.cpus"]),
        ("verifier = 3\n", ["[verifier]"]),
        ("[environment]\nnetwork_mode = 1\n", ["environment.network_mode"]),
    ],
)
def test_bad_types_name_the_key(tmp_path: Path, toml: str, needles: list[str]) -> None:
    err = one_error(write_folder(tmp_path / "typo-task", task_files(toml)))
    assert err.task == "typo-task"
    assert "typo-task" in str(err) and "invalid task.toml" in str(err)
    for needle in needles:
        assert needle in str(err)


# --- bad tasks: every error names the task and the problem ------------------------------------


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"task.toml": b"[verifier\ntimeout_sec = 1"}, "not valid TOML"),
        ({"task.toml": None}, "missing task.toml"),
        ({"instruction.md": None}, "missing instruction.md"),
        ({"instruction.md": b"  \n"}, "instruction.md is empty"),
        ({"instruction.md": b"\xff\xfe bad"}, "instruction.md is not UTF-8"),
        ({"tests/test.sh": None}, "missing tests/test.sh"),
        ({"environment/Dockerfile": None}, "missing environment/Dockerfile"),
    ],
)
def test_bad_task_folder(tmp_path: Path, override: dict[str, bytes | None], needle: str) -> None:
    err = one_error(write_folder(tmp_path / "broken-task", task_files(**override)))
    assert err.task == "broken-task"
    assert "broken-task" in str(err) and needle in str(err)


def _raw_tar(add) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in task_files().items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add(tar)
    return out.getvalue()


def _member(name: str, type_: bytes = tarfile.REGTYPE, linkname: str = "", data: bytes = b""):
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size = type_, linkname, len(data)
        tar.addfile(info, io.BytesIO(data) if data else None)

    return add


def _huge_header() -> bytes:
    # A member declaring 65 MiB: the 64 MiB cap must trip on the header, before any data.
    info = tarfile.TarInfo("big")
    info.size = 65 << 20
    return info.tobuf(format=tarfile.GNU_FORMAT)


@pytest.mark.parametrize(
    ("blob", "needle"),
    [
        (b"this is not a tar at all" * 30, "not a readable tar"),
        (gzip.compress(b"gzip of junk" * 100), "not a readable tar"),
        (_raw_tar(_member("/etc/cron.d/evil", data=b"x")), "absolute path"),
        (_raw_tar(_member("tests/../../evil", data=b"x")), "path traversal"),
        (_raw_tar(_member("tests/link", tarfile.SYMTYPE, "/etc/passwd")), "is a link"),
        (_raw_tar(_member("tests/hard", tarfile.LNKTYPE, "../../x")), "is a link"),
        (_raw_tar(_member("tests/dev", tarfile.CHRTYPE)), "not a regular file"),
        (_huge_header() + _raw_tar(lambda tar: None), "exceed"),
        (make_tar({"a/task.toml": b"", "b/task.toml": b""}), "single top-level folder"),
    ],
    ids=[
        "junk",
        "gzip-junk",
        "absolute",
        "dotdot",
        "symlink",
        "hardlink",
        "device",
        "too-big",
        "two-tops",
    ],
)
def test_bad_parquet_blobs(tmp_path: Path, blob: bytes, needle: str) -> None:
    source = write_parquet(tmp_path / "t.parquet", [("ds/evil-task", blob)])
    err = one_error(source)
    assert err.task == "evil-task"
    assert "evil-task" in str(err) and needle in str(err)


def test_tar_bomb_by_member_count(tmp_path: Path) -> None:
    def many(tar: tarfile.TarFile) -> None:
        for i in range(10_001):
            tar.addfile(tarfile.TarInfo(f"junk/{i}"))

    source = write_parquet(tmp_path / "t.parquet", [("bomb", gzip.compress(_raw_tar(many)))])
    assert "more than 10000 members" in str(one_error(source))


def test_null_cells(tmp_path: Path) -> None:
    table = pa.table(
        {"path": pa.array([None, "x"]), "task_binary": pa.array([b"", None], pa.binary())}
    )
    pq.write_table(table, tmp_path / "t.parquet")
    errors: list[TaskLoadError] = []
    assert (
        list(iter_tasks(tmp_path / "t.parquet", skip_invalid=True, on_invalid=errors.append)) == []
    )
    assert "row 1 of t.parquet" in str(errors[0]) and "'path'" in str(errors[0])
    assert errors[1].task == "x" and "'task_binary'" in str(errors[1])


@pytest.mark.parametrize("missing", ["path", "task_binary"])
def test_parquet_missing_column_is_a_source_error(tmp_path: Path, missing: str) -> None:
    columns = {"path": pa.array(["a"]), "task_binary": pa.array([b"x"]), "other": pa.array([1])}
    del columns[missing]
    pq.write_table(pa.table(columns), tmp_path / "t.parquet")
    # Raised when iter_tasks is called (not at the first next()), and never skipped.
    with pytest.raises(TaskLoadError, match=f"no column '{missing}'") as info:
        iter_tasks(tmp_path / "t.parquet", skip_invalid=True)
    assert "t.parquet" in str(info.value)


@pytest.mark.parametrize("kind", ["missing", "not-parquet", "empty-folder"])
def test_bad_sources(tmp_path: Path, kind: str) -> None:
    source = tmp_path / kind
    if kind == "not-parquet":
        source.write_text("hello")
    elif kind == "empty-folder":
        source.mkdir()
    with pytest.raises(TaskLoadError, match="task source") as info:
        iter_tasks(source, skip_invalid=True)
    assert str(source) in str(info.value)


def test_folder_symlink_outside_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s3cret")
    folder = write_folder(tmp_path / "tasks" / "linky", task_files())
    os.symlink(tmp_path / "secret", folder / "tests" / "leak.txt")
    err = one_error(folder)
    assert err.task == "linky" and "symlink pointing outside" in str(err)


def test_folder_symlink_inside_is_read(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "linky", task_files())
    os.symlink(folder / "tests" / "test_solution.py", folder / "tests" / "alias.py")
    [task] = load_tasks(folder)
    assert task.test_files["alias.py"] == task.test_files["test_solution.py"]


# --- ids, duplicates, skipping, laziness -----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a/b/c", "c"),
        ("tasks/with space/", "with_space"),
        ("x/ünï", "_n_"),
        ("x/task.tar.gz", "task"),
        ("a\\b", "b"),
    ],
)
def test_task_ids(path: str, expected: str) -> None:
    assert task_id_from_path(path) == expected


@pytest.mark.parametrize("path", ["", "/", "a/..", "x/."])
def test_task_id_refuses_degenerate_paths(path: str) -> None:
    with pytest.raises(TaskLoadError, match="cannot derive a task id"):
        task_id_from_path(path)


def test_duplicate_ids(tmp_path: Path) -> None:
    blob = make_tar(task_files())
    source = write_parquet(tmp_path / "t.parquet", [("a/dup", blob), ("b/dup", blob)])
    err = one_error(source)
    assert err.task == "dup" and "duplicate task id" in str(err) and "'b/dup'" in str(err)
    assert [t.path for t in load_tasks(source, skip_invalid=True)] == ["a/dup"]


def test_skip_invalid_reports_and_continues(tmp_path: Path) -> None:
    write_folder(tmp_path / "a-good", task_files())
    write_folder(tmp_path / "b-bad", task_files(**{"tests/test.sh": None}))
    write_folder(tmp_path / "c-good", task_files())
    seen: list[TaskLoadError] = []
    tasks = list(iter_tasks(tmp_path, skip_invalid=True, on_invalid=seen.append))
    assert [t.id for t in tasks] == ["a-good", "c-good"]
    assert [e.task for e in seen] == ["b-bad"]
    assert [t.id for t in load_tasks(tmp_path, skip_invalid=True)] == ["a-good", "c-good"]
    # Without skip_invalid the lazy iterator yields the good task, then fails on the bad one.
    it = iter_tasks(tmp_path)
    assert next(it).id == "a-good"
    with pytest.raises(TaskLoadError, match="b-bad"):
        next(it)
    # load_tasks fails before returning anything.
    assert one_error(tmp_path).task == "b-bad"


def test_load_tasks_ids_and_limit(tmp_path: Path) -> None:
    for name in ["t1", "t2", "t3", "t4"]:
        write_folder(tmp_path / name, task_files())
    assert [t.id for t in load_tasks(tmp_path, ids=["t3", "t1"])] == ["t1", "t3"]
    assert [t.id for t in load_tasks(tmp_path, limit=2)] == ["t1", "t2"]
    assert [t.id for t in load_tasks(tmp_path, ids=["t4", "t2"], limit=1)] == ["t2"]
    assert load_tasks(tmp_path, limit=0) == []
    with pytest.raises(TaskLoadError, match="no task with id nope"):
        load_tasks(tmp_path, ids=["t1", "nope"])


@pytest.fixture
def big_parquet(tmp_path: Path) -> Path:
    """200 generated tasks, the last one corrupt."""
    rows = [
        (
            f"gen/task-{i:03d}",
            make_tar(task_files(**{"instruction.md": f"task {i}\n".encode()}), top="t"),
        )
        for i in range(199)
    ]
    rows.append(("gen/task-199", b"corrupt"))
    path = tmp_path / "big.parquet"
    pq.write_table(
        pa.table({"path": [r[0] for r in rows], "task_binary": pa.array([r[1] for r in rows])}),
        path,
        row_group_size=50,
    )
    return path


def test_parquet_is_streamed_lazily(big_parquet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Count archive reads through the real reader: taking 3 tasks must unpack only 3 archives,
    # and the corrupt last row is never reached.
    reads: list[int] = []
    real = tasks_module.read_tar_members

    def counting(blob: bytes, **kwargs) -> dict[str, bytes]:
        reads.append(len(blob))
        return real(blob, **kwargs)

    monkeypatch.setattr(tasks_module, "read_tar_members", counting)
    first = list(itertools.islice(iter_tasks(big_parquet), 3))
    assert [t.instruction for t in first] == ["task 0\n", "task 1\n", "task 2\n"]
    assert len(reads) == 3
    assert [t.id for t in load_tasks(big_parquet, limit=5)][-1] == "task-004"


def test_parquet_streaming_reads_all_then_fails_on_corrupt_row(big_parquet: Path) -> None:
    errors: list[TaskLoadError] = []
    tasks = list(iter_tasks(big_parquet, skip_invalid=True, on_invalid=errors.append))
    assert len(tasks) == 199 and len({t.id for t in tasks}) == 199
    assert [e.task for e in errors] == ["task-199"]
    assert "row 200 of big.parquet" in str(errors[0])
