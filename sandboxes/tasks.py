"""Task loaders: Harbor-format task folders, folders of them, and Parquet releases.

Every source yields `Task` objects lazily, so a 5,000-task Parquet file is streamed a few rows at
a time. `load_tasks` is the eager wrapper the service uses: it validates every selected task
before any work starts, so a bad dataset fails at load time with a message naming the task.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandboxes.safe_tar import (
    DEFAULT_MAX_MEMBERS,
    DEFAULT_MAX_TOTAL_BYTES,
    UnsafeTarError,
    read_tar_members,
)
from sandboxes.task import EnvironmentConfig, Task, TaskConfig

PARQUET_PATH_COLUMN = "path"
PARQUET_BINARY_COLUMN = "task_binary"
# Rows per Parquet batch: small, so memory holds a handful of task archives at a time.
PARQUET_BATCH_SIZE = 16

# Files that only a task folder has at its top level (a folder of tasks has none of them).
_TASK_MARKERS = ("task.toml", "instruction.md", "tests/test.sh")
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class TaskLoadError(ValueError):
    """A task (or a whole source) cannot be loaded. `task` names it: an id, a path or a source."""

    _kind = "task"

    def __init__(self, task: str, message: str) -> None:
        self.task = task
        self.message = message
        super().__init__(f"{self._kind} {task!r}: {message}")


class _SourceError(TaskLoadError):
    """The source as a whole is unusable (missing column, not a Parquet file): never skipped."""

    _kind = "task source"


# --- task.toml validation (a boundary, so pydantic; unknown keys are kept, never rejected) ----


class _Section(BaseModel):
    # strict: a string "60" for a timeout is a typo worth reporting, not something to coerce.
    # (Strict floats still accept TOML integers.)
    model_config = ConfigDict(extra="allow", strict=True)


class _VerifierSection(_Section):
    timeout_sec: float | None = Field(default=None, gt=0)


class _AgentSection(_Section):
    timeout_sec: float | None = Field(default=None, gt=0)


class _EnvironmentSection(_Section):
    build_timeout_sec: float | None = Field(default=None, gt=0)
    docker_image: str | None = Field(default=None, min_length=1)
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    storage_mb: int | None = Field(default=None, gt=0)
    network_mode: str | None = Field(default=None, min_length=1)


class _TaskToml(_Section):
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: _VerifierSection = Field(default_factory=_VerifierSection)
    agent: _AgentSection = Field(default_factory=_AgentSection)
    environment: _EnvironmentSection = Field(default_factory=_EnvironmentSection)


def _describe_validation_error(err: ValidationError) -> str:
    problems = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        problems.append(f"[{key}] {e['msg']} (got {e.get('input')!r})")
    return "invalid task.toml: " + "; ".join(problems)


def parse_task_config(task: str, text: bytes) -> TaskConfig:
    """Parse and type-check task.toml. `task` only names the task in errors."""
    try:
        raw = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TaskLoadError(task, f"task.toml is not UTF-8: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise TaskLoadError(task, f"task.toml is not valid TOML: {e}") from e
    try:
        parsed = _TaskToml.model_validate(raw)
    except ValidationError as e:
        raise TaskLoadError(task, _describe_validation_error(e)) from e

    env = parsed.environment
    defaults = EnvironmentConfig()
    environment = EnvironmentConfig(
        build_timeout_sec=(
            env.build_timeout_sec
            if env.build_timeout_sec is not None
            else defaults.build_timeout_sec
        ),
        docker_image=env.docker_image,
        cpus=env.cpus if env.cpus is not None else defaults.cpus,
        memory_mb=env.memory_mb if env.memory_mb is not None else defaults.memory_mb,
        storage_mb=env.storage_mb if env.storage_mb is not None else defaults.storage_mb,
        network_mode=env.network_mode if env.network_mode is not None else defaults.network_mode,
        extra=dict(env.model_extra or {}),
    )
    config_defaults = TaskConfig()
    return TaskConfig(
        verifier_timeout_sec=(
            parsed.verifier.timeout_sec
            if parsed.verifier.timeout_sec is not None
            else config_defaults.verifier_timeout_sec
        ),
        agent_timeout_sec=(
            parsed.agent.timeout_sec
            if parsed.agent.timeout_sec is not None
            else config_defaults.agent_timeout_sec
        ),
        environment=environment,
        metadata=dict(parsed.metadata),
        raw=raw,
    )


# --- building a Task from a file map (shared by every source) ---------------------------------


def _subtree(files: dict[str, bytes], folder: str) -> dict[str, bytes]:
    prefix = folder + "/"
    return {name[len(prefix) :]: data for name, data in files.items() if name.startswith(prefix)}


def task_from_files(task_id: str, path: str, files: dict[str, bytes]) -> Task:
    """Validate a task folder given as `{relative path: bytes}` and build the Task."""
    if "task.toml" not in files:
        raise TaskLoadError(task_id, "missing task.toml")
    config = parse_task_config(task_id, files["task.toml"])

    if "instruction.md" not in files:
        raise TaskLoadError(task_id, "missing instruction.md (the prompt)")
    try:
        instruction = files["instruction.md"].decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskLoadError(task_id, f"instruction.md is not UTF-8: {e}") from e
    if not instruction.strip():
        raise TaskLoadError(task_id, "instruction.md is empty")

    test_files = _subtree(files, "tests")
    if "test.sh" not in test_files:
        raise TaskLoadError(task_id, "missing tests/test.sh (the verifier)")

    environment_files = _subtree(files, "environment")
    if "Dockerfile" not in environment_files and config.environment.docker_image is None:
        raise TaskLoadError(
            task_id,
            "missing environment/Dockerfile and no [environment] docker_image in task.toml",
        )
    return Task(
        id=task_id,
        path=path,
        instruction=instruction,
        config=config,
        environment_files=environment_files,
        test_files=test_files,
        solution_files=_subtree(files, "solution"),
    )


def task_id_from_path(path: str) -> str:
    """The last path component, with anything outside [A-Za-z0-9._-] replaced by '_'."""
    name = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".tar.gz", ".tgz", ".tar"):  # a path naming the archive, not the folder
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    task_id = _ID_UNSAFE.sub("_", name)
    if not task_id.strip("."):  # "", ".", ".." would be dangerous as names of anything
        raise TaskLoadError(path or "<empty>", f"cannot derive a task id from path {path!r}")
    return task_id


# --- sources -----------------------------------------------------------------------------------


def _read_folder(folder: Path, task_id: str) -> dict[str, bytes]:
    """Read a task folder into memory with the same caps and link rules as a tar archive."""
    root = folder.resolve()
    files: dict[str, bytes] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        # Bytecode caches appear when someone runs a task's tests locally; they are not content
        # and would make the folder and Parquet copies of a task differ.
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames) + [d for d in dirnames if Path(dirpath, d).is_symlink()]:
            full = Path(dirpath, name)
            rel = full.relative_to(folder).as_posix()
            if full.is_symlink() and not full.resolve().is_relative_to(root):
                raise TaskLoadError(task_id, f"{rel} is a symlink pointing outside the task")
            if full.is_dir():
                raise TaskLoadError(task_id, f"{rel} is a symlinked directory; not supported")
            if not full.is_file():
                raise TaskLoadError(task_id, f"{rel} is not a regular file")
            if len(files) >= DEFAULT_MAX_MEMBERS:
                raise TaskLoadError(
                    task_id, f"task folder has more than {DEFAULT_MAX_MEMBERS} files"
                )
            data = full.read_bytes()
            total += len(data)
            if total > DEFAULT_MAX_TOTAL_BYTES:
                raise TaskLoadError(
                    task_id, f"task folder holds more than {DEFAULT_MAX_TOTAL_BYTES} bytes"
                )
            files[rel] = data
    return files


def _task_folders(parent: Path) -> list[Path]:
    # Hidden folders (.git, .cache) are not tasks; plain files (README.md) are ignored.
    return sorted(
        (p for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.name,
    )


def _iter_folder_of_tasks(folders: list[Path]) -> Iterator[Task | TaskLoadError]:
    for folder in folders:
        # abspath, not resolve(): "." gets the cwd's name, and a symlinked task keeps its own.
        name = os.path.basename(os.path.abspath(folder))
        item: Task | TaskLoadError
        try:
            task_id = task_id_from_path(name)
            item = task_from_files(task_id, str(folder), _read_folder(folder, task_id))
        except TaskLoadError as e:
            item = e
        yield item


def _strip_single_top_folder(task_id: str, files: dict[str, bytes]) -> dict[str, bytes]:
    """Accept files at the archive root, or all inside one top-level folder."""
    if "task.toml" in files:
        return files
    tops = {name.split("/", 1)[0] for name in files}
    if len(tops) == 1 and all("/" in name for name in files):
        top = tops.pop()
        stripped = _subtree(files, top)
        if "task.toml" in stripped:
            return stripped
    raise TaskLoadError(
        task_id, "archive has no task.toml at its root or inside a single top-level folder"
    )


def _open_parquet(source: Path) -> pq.ParquetFile:
    try:
        parquet = pq.ParquetFile(source)
    except (pa.ArrowException, OSError) as e:
        raise _SourceError(str(source), f"not a readable Parquet file: {e}") from e
    names = parquet.schema_arrow.names
    for column in (PARQUET_PATH_COLUMN, PARQUET_BINARY_COLUMN):
        if column not in names:
            raise _SourceError(
                str(source),
                f"Parquet file has no column {column!r} (columns: {', '.join(names)}); "
                f"expected {PARQUET_PATH_COLUMN!r} (str) and {PARQUET_BINARY_COLUMN!r} "
                "(bytes of a tar of one task folder)",
            )
    return parquet


def _iter_parquet(source: Path, parquet: pq.ParquetFile) -> Iterator[Task | TaskLoadError]:
    row = 0
    batches = parquet.iter_batches(
        batch_size=PARQUET_BATCH_SIZE, columns=[PARQUET_PATH_COLUMN, PARQUET_BINARY_COLUMN]
    )
    for batch in batches:
        paths = batch.column(PARQUET_PATH_COLUMN).to_pylist()
        blobs = batch.column(PARQUET_BINARY_COLUMN).to_pylist()
        for path, blob in zip(paths, blobs, strict=True):
            row += 1
            where = f"row {row} of {source.name}"
            item: Task | TaskLoadError
            try:
                item = _parquet_row_task(where, path, blob)
            except TaskLoadError as e:
                item = e
            yield item


def _parquet_row_task(where: str, path: object, blob: object) -> Task:
    if not isinstance(path, str) or not path:
        raise TaskLoadError(where, f"column {PARQUET_PATH_COLUMN!r} is empty or not a string")
    task_id = task_id_from_path(path)
    if not isinstance(blob, bytes | bytearray):
        raise TaskLoadError(task_id, f"column {PARQUET_BINARY_COLUMN!r} is empty or not bytes")
    try:
        files = read_tar_members(bytes(blob))
    except UnsafeTarError as e:
        raise TaskLoadError(task_id, f"{PARQUET_BINARY_COLUMN} ({where}): {e}") from e
    return task_from_files(task_id, path, _strip_single_top_folder(task_id, files))


def _open_source(source: Path) -> Iterator[Task | TaskLoadError]:
    """Check the source itself now (so its errors are immediate) and return the row iterator."""
    if source.is_dir():
        # A folder that looks like a task (even one missing task.toml) is one task, so its
        # error says "missing task.toml" rather than complaining about its tests/ subfolder.
        if any((source / marker).exists() for marker in _TASK_MARKERS):
            return _iter_folder_of_tasks([source])
        folders = _task_folders(source)
        if not folders:
            raise _SourceError(str(source), "folder has no task.toml and no task folders")
        return _iter_folder_of_tasks(folders)
    if source.is_file():
        return _iter_parquet(source, _open_parquet(source))
    raise _SourceError(str(source), "no such file or folder")


def iter_tasks(
    source: str | Path,
    *,
    skip_invalid: bool = False,
    on_invalid: Callable[[TaskLoadError], None] | None = None,
) -> Iterator[Task]:
    """Yield the tasks of a source lazily: a task folder, a folder of task folders (sorted by
    name) or a Parquet file with `path` and `task_binary` columns.

    Problems with the source itself raise TaskLoadError at once, whatever `skip_invalid` says.
    A bad task raises TaskLoadError when reached; with `skip_invalid` it is instead passed to
    `on_invalid` (if given) and skipped. Duplicate ids count as bad tasks (the later one).
    """
    items = _open_source(Path(source))

    def generate() -> Iterator[Task]:
        seen: dict[str, str] = {}
        for item in items:
            if isinstance(item, Task) and item.id in seen:
                item = TaskLoadError(
                    item.id,
                    f"duplicate task id (from {item.path!r}, already used by {seen[item.id]!r}); "
                    "task ids come from the last path component and must be unique",
                )
            if isinstance(item, TaskLoadError):
                if not skip_invalid:
                    raise item
                if on_invalid is not None:
                    on_invalid(item)
                continue
            seen[item.id] = item.path
            yield item

    return generate()


def load_tasks(
    source: str | Path,
    *,
    ids: list[str] | None = None,
    limit: int | None = None,
    skip_invalid: bool = False,
) -> list[Task]:
    """Load and validate tasks eagerly, so a bad dataset fails before any rollout starts.

    `ids` selects tasks (in source order; an unknown id is an error). `limit` keeps the first N
    selected tasks and stops reading there. Without `limit` every task of the source is
    validated, including those `ids` does not select.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    wanted = set(ids) if ids is not None else None
    tasks: list[Task] = []
    if limit == 0:
        return tasks
    for task in iter_tasks(source, skip_invalid=skip_invalid):
        if wanted is None or task.id in wanted:
            tasks.append(task)
            if limit is not None and len(tasks) >= limit:
                break  # stop reading: the rest of a large Parquet file is never touched
    if wanted is not None and (limit is None or len(tasks) < limit):
        missing = sorted(wanted - {t.id for t in tasks})
        if missing:
            raise _SourceError(str(source), f"no task with id {', '.join(missing)}")
    return tasks
