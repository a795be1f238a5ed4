"""Task loaders: Harbor-format task folders, folders of them, and Parquet releases.

Every source yields `Task` objects lazily, so a 5,000-task Parquet file is streamed a few rows at
a time. `load_tasks` is the eager wrapper the service uses: it validates every selected task
before any work starts, so a bad dataset fails at load time with a message naming the task.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import tomllib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandboxes.safe_fs import Folder, UnsafePath, open_beneath, opened, read_tree, spellings_of
from sandboxes.safe_tar import (
    DEFAULT_MAX_MEMBERS,
    DEFAULT_MAX_TOTAL_BYTES,
    UnsafeTarError,
    max_archive_bytes,
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
#
# A source is opened once (a descriptor); everything in it is read relative to that descriptor
# without following links out of it (sandboxes/safe_fs.py). It lists its tasks as entries whose
# ids are known from their names alone, so a selection (`ids`, `limit`) reads only what it takes.


class NotInRoots(_SourceError):
    """A path outside the service's tasks roots, or not there. The message is the same whatever
    the reason (outside, missing, a link leaving a root, unreadable), so it says nothing about
    the host's files."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "no such dataset under this server's tasks roots (--tasks-root)")


class UnknownTaskIds(_SourceError):
    def __init__(self, source: str, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(source, f"no task with id {', '.join(missing)}")


@dataclass
class _Entry:
    """One task of a source, not read yet. `task_id` is None when its name gives none (then
    `load` raises the error saying so)."""

    task_id: str | None
    load: Callable[[], Task]


def _fail(error: TaskLoadError) -> Callable[[], Task]:
    def load() -> Task:
        raise error

    return load


def _read_folder(folder: Folder, task_id: str) -> dict[str, bytes]:
    """A task folder's files, with the same caps and link rules as a tar archive: links are read
    through only when they stay inside the task and name a file; nothing is followed out."""
    try:
        return read_tree(
            folder,
            max_bytes=DEFAULT_MAX_TOTAL_BYTES,
            max_files=DEFAULT_MAX_MEMBERS,
            # Bytecode caches appear when someone runs a task's tests locally; they are not
            # content and would make the folder and Parquet copies of a task differ.
            skip_dirs=frozenset({"__pycache__"}),
        )
    except UnsafePath as e:
        message = {
            "outside": f"{e.rel} is a symlink pointing outside the task",
            "link_dir": f"{e.rel} is a symlinked directory; not supported",
            "special": f"{e.rel} is not a regular file",
            "changed": f"{e.rel} changed while it was being read",
        }.get(e.reason)
        if message is None and str(e).endswith("files"):
            message = f"task folder has more than {DEFAULT_MAX_MEMBERS} files"
        raise TaskLoadError(
            task_id, message or f"task folder holds more than {DEFAULT_MAX_TOTAL_BYTES} bytes"
        ) from e
    except OSError as e:
        raise TaskLoadError(task_id, f"task folder cannot be read: {e.strerror}") from e


def _has_marker(fd: int) -> bool:
    for marker in _TASK_MARKERS:  # lstat only: nothing is opened or followed here
        try:
            os.stat(marker, dir_fd=fd, follow_symlinks=False)
            return True
        except OSError:
            continue
    return False


class _Source:
    """An opened source: a folder descriptor (one task or a folder of tasks) or a Parquet file.
    `entries()` lists its tasks lazily; `close()` (also on garbage collection) releases it."""

    def __init__(self, display: str, fd: int, spellings: tuple[str, ...]) -> None:
        self.display = display
        self._fd = fd
        self._spellings = spellings
        self._closed = False
        self._file: Any = None
        self._parquet: pq.ParquetFile | None = None
        self._children: list[tuple[str, bool]] | None = None  # (name, is a link) per task folder
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                # A folder that looks like a task (even one missing task.toml) is one task, so
                # its error says "missing task.toml" rather than complaining about tests/.
                if not _has_marker(fd):
                    self._children = self._task_folders()
            elif stat.S_ISREG(st.st_mode):
                self._file = os.fdopen(os.dup(fd), "rb")
                self._parquet = _open_parquet(display, self._file)
            else:
                raise _SourceError(display, "not a folder or a Parquet file")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._fd)
            if self._file is not None:
                self._file.close()

    def __del__(self) -> None:
        self.close()

    def _task_folders(self) -> list[tuple[str, bool]]:
        # Hidden folders (.git, .cache) are not tasks; plain files (README.md) are ignored.
        # Links to folders are listed, to be refused by name when reached.
        out = []
        for name in sorted(n for n in os.listdir(self._fd) if not n.startswith(".")):
            st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                out.append((name, False))
            elif stat.S_ISLNK(st.st_mode):
                try:
                    if stat.S_ISDIR(os.stat(name, dir_fd=self._fd).st_mode):
                        out.append((name, True))
                except OSError:
                    pass
        if not out:
            raise _SourceError(self.display, "folder has no task.toml and no task folders")
        return out

    def entries(self) -> Iterator[_Entry]:
        if self._parquet is not None:
            yield from _parquet_entries(self.display, self._parquet)
        elif self._children is None:
            # abspath, not resolve(): "." gets the cwd's name, and a symlinked task keeps its own.
            yield self._folder_entry(os.path.basename(os.path.abspath(self.display)), None)
        else:
            for name, is_link in self._children:
                if is_link:
                    error = TaskLoadError(
                        _safe_id(name), "the task folder is a symbolic link; links are not followed"
                    )
                    yield _Entry(_safe_id(name), _fail(error))
                else:
                    yield self._folder_entry(name, name)

    def _folder_entry(self, id_source: str, child: str | None) -> _Entry:
        try:
            task_id = task_id_from_path(id_source)
        except TaskLoadError as e:
            return _Entry(None, _fail(e))
        path = self.display if child is None else os.path.join(self.display, child)
        spellings = self._spellings
        if child is not None:
            spellings = tuple(posixpath.join(s, child) for s in spellings)

        def load() -> Task:
            if child is None:
                fd = os.dup(self._fd)
            else:
                try:
                    fd, _ = open_beneath(Folder(self._fd, self._spellings), child, want_dir=True)
                except (UnsafePath, OSError) as e:
                    raise TaskLoadError(task_id, "task folder cannot be opened") from e
            with opened(fd):
                return task_from_files(task_id, path, _read_folder(Folder(fd, spellings), task_id))

        return _Entry(task_id, load)


def _safe_id(name: str) -> str:
    return _ID_UNSAFE.sub("_", name)


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


def _open_parquet(display: str, file: Any) -> pq.ParquetFile:
    try:
        parquet = pq.ParquetFile(file)
    except (pa.ArrowException, OSError) as e:
        file.close()
        raise _SourceError(display, f"not a readable Parquet file: {e}") from e
    names = parquet.schema_arrow.names
    for column in (PARQUET_PATH_COLUMN, PARQUET_BINARY_COLUMN):
        if column not in names:
            parquet.close()
            raise _SourceError(
                display,
                f"Parquet file has no column {column!r} (columns: {', '.join(names)}); "
                f"expected {PARQUET_PATH_COLUMN!r} (str) and {PARQUET_BINARY_COLUMN!r} "
                "(bytes of a tar of one task folder)",
            )
    return parquet


def _parquet_entries(display: str, parquet: pq.ParquetFile) -> Iterator[_Entry]:
    row = 0
    name = os.path.basename(display.rstrip("/")) or display
    meta = parquet.metadata
    leaves = [meta.schema.column(i).path for i in range(meta.num_columns)]
    blob_leaf = leaves.index(PARQUET_BINARY_COLUMN) if PARQUET_BINARY_COLUMN in leaves else None
    for group in range(meta.num_row_groups):
        rows = meta.row_group(group).num_rows
        # The archives of a row group are read a batch at a time: a group holding more archive
        # bytes than its rows may (each at most the tar cap) has one over the cap. Its rows are
        # refused by their paths alone, and no archive of it is ever read into memory.
        size = 0
        if blob_leaf is not None:
            size = meta.row_group(group).column(blob_leaf).total_uncompressed_size
        if size > rows * max_archive_bytes():
            paths = parquet.read_row_group(group, columns=[PARQUET_PATH_COLUMN])
            for path in paths.column(PARQUET_PATH_COLUMN).to_pylist():
                row += 1
                message = (
                    f"{PARQUET_BINARY_COLUMN} (row {row} of {name}): its row group holds an "
                    f"archive over the size cap ({DEFAULT_MAX_TOTAL_BYTES} bytes); not read"
                )
                task_id = _parquet_task_id(path) or f"row {row} of {name}"
                yield _Entry(None, _fail(TaskLoadError(task_id, message)))
            continue
        batches = parquet.iter_batches(
            batch_size=PARQUET_BATCH_SIZE,
            row_groups=[group],
            columns=[PARQUET_PATH_COLUMN, PARQUET_BINARY_COLUMN],
        )
        for batch in batches:
            paths = batch.column(PARQUET_PATH_COLUMN).to_pylist()
            blobs = batch.column(PARQUET_BINARY_COLUMN)
            for i, path in enumerate(paths):
                row += 1
                yield _parquet_entry(f"row {row} of {name}", path, blobs, i)


def _parquet_task_id(path: object) -> str | None:
    try:
        return task_id_from_path(path) if isinstance(path, str) and path else None
    except TaskLoadError:
        return None


def _parquet_entry(where: str, path: object, blobs: pa.Array, i: int) -> _Entry:
    if not isinstance(path, str) or not path:
        error = TaskLoadError(where, f"column {PARQUET_PATH_COLUMN!r} is empty or not a string")
        return _Entry(None, _fail(error))
    try:
        task_id = task_id_from_path(path)
    except TaskLoadError as e:
        return _Entry(None, _fail(e))
    # Only a selected row's archive is converted to bytes and unpacked.
    return _Entry(task_id, partial(_parquet_row_task, where, path, blobs, i, task_id))


def _parquet_row_task(where: str, path: str, blobs: pa.Array, i: int, task_id: str) -> Task:
    blob = blobs[i].as_py()
    if not isinstance(blob, bytes | bytearray):
        raise TaskLoadError(task_id, f"column {PARQUET_BINARY_COLUMN!r} is empty or not bytes")
    try:
        files = read_tar_members(bytes(blob))
    except UnsafeTarError as e:
        raise TaskLoadError(task_id, f"{PARQUET_BINARY_COLUMN} ({where}): {e}") from e
    return task_from_files(task_id, path, _strip_single_top_folder(task_id, files))


# --- where sources may come from ---------------------------------------------------------------


class TaskRoots:
    """The folders (or Parquet files) the service may read tasks from (`--tasks-root`).

    A request names a path inside a root, absolute (spelled through the root as configured or
    as resolved) or relative to a root (a dataset name); a root's own spelling names the root.
    `..` is refused; below the root nothing is followed out of it (links are resolved
    lexically and must stay inside). Every refusal is the same NotInRoots."""

    def __init__(self, roots: Iterable[str | os.PathLike[str]]) -> None:
        self.roots = [os.fspath(r) for r in roots]

    def _candidates(self, path: str) -> list[tuple[str, str]]:
        norm = posixpath.normpath(path)
        if os.path.isabs(path):
            out = []
            for root in self.roots:
                for s in spellings_of(root):
                    s = s.rstrip("/") or "/"
                    if norm == s:
                        out.append((root, ""))
                    elif norm.startswith(s + "/") or s == "/":
                        out.append((root, norm[len(s) :].lstrip("/")))
            return out
        exact = [(r, "") for r in self.roots if posixpath.normpath(r) == norm]
        return exact + [(r, "" if norm == "." else norm) for r in self.roots]

    def open(self, path: str) -> _Source:
        """The source `path` names, opened; NotInRoots for anything else."""
        if not path or "\x00" in path or ".." in path.replace("\\", "/").split("/"):
            raise NotInRoots(path)
        for root, rel in self._candidates(path):
            try:
                fd = os.open(root, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # the operator's
            except OSError:
                continue
            spellings = spellings_of(root)
            if rel:
                try:
                    folder = Folder(fd, spellings)
                    inner, _ = open_beneath(folder, rel)
                except (OSError, UnsafePath):
                    continue
                finally:
                    os.close(fd)
                fd = inner
                spellings = tuple(posixpath.join(s, rel) for s in spellings)
            try:
                return _Source(path, fd, spellings)
            except _SourceError:
                raise
            except OSError:
                continue
        raise NotInRoots(path)


def _open_source(source: str | Path, roots: TaskRoots | None) -> _Source:
    """Check the source itself now, so its errors are immediate."""
    if roots is not None:
        return roots.open(os.fspath(source))
    display = os.fspath(source)
    try:
        # The caller named this path on its own machine (a command line): it may be a link.
        fd = os.open(display, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise _SourceError(display, "no such file or folder") from e
    return _Source(display, fd, spellings_of(display))


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
    opened_source = _open_source(source, None)

    def generate() -> Iterator[Task]:
        seen: dict[str, str] = {}
        try:
            for entry in opened_source.entries():
                item: Task | TaskLoadError
                try:
                    item = entry.load()
                except TaskLoadError as e:
                    item = e
                if isinstance(item, Task) and item.id in seen:
                    item = TaskLoadError(
                        item.id,
                        f"duplicate task id (from {item.path!r}, already used by "
                        f"{seen[item.id]!r}); task ids come from the last path component and "
                        "must be unique",
                    )
                if isinstance(item, TaskLoadError):
                    if not skip_invalid:
                        raise item
                    if on_invalid is not None:
                        on_invalid(item)
                    continue
                seen[item.id] = item.path
                yield item
        finally:
            opened_source.close()

    return generate()


def select_tasks(
    source: str | Path,
    *,
    ids: list[str] | None = None,
    limit: int | None = None,
    roots: TaskRoots | None = None,
) -> Iterator[Task]:
    """The tasks a request selects, read one at a time as the caller takes them (the service
    admits each before it reads the next). Entries `ids` does not name are never read; reading
    stops at `limit`. With `roots`, the source must lie inside them (NotInRoots otherwise).

    Source errors raise at once; a bad selected task raises when reached; ids the source lacks
    raise UnknownTaskIds once it is exhausted (unless `limit` was reached first)."""
    opened_source = _open_source(source, roots)

    def generate() -> Iterator[Task]:
        wanted = set(ids) if ids is not None else None
        seen: dict[str, str] = {}
        try:
            if limit is not None and limit <= 0:
                return
            for entry in opened_source.entries():
                if wanted is not None and entry.task_id not in wanted:
                    continue
                task = entry.load()
                if task.id in seen:
                    raise TaskLoadError(
                        task.id,
                        f"duplicate task id (from {task.path!r}, already used by "
                        f"{seen[task.id]!r}); task ids come from the last path component and "
                        "must be unique",
                    )
                seen[task.id] = task.path
                yield task
                if limit is not None and len(seen) >= limit:
                    return
            if wanted is not None:
                missing = sorted(wanted - seen.keys())
                if missing:
                    raise UnknownTaskIds(os.fspath(source), missing)
        finally:
            opened_source.close()

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
            raise UnknownTaskIds(str(source), missing)
    return tasks
