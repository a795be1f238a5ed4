"""Build examples/tasks.parquet from examples/tasks/, in the pymethods2test release layout.

Columns: `path` (str, "tasks/<name>") and `task_binary` (tar.gz of the task folder, with the
folder as the single top-level entry). The output is byte-for-byte reproducible: members sorted,
fixed mtime/uid/gid/owner names, normalised modes, gzip header without name or time.

    python scripts/build_example_parquet.py [--tasks examples/tasks] [--out examples/tasks.parquet]
"""

from __future__ import annotations

import argparse
import gzip
import io
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
FIXED_MTIME = 1_700_000_000  # any constant works; 0 makes some tar readers warn


def _tar_info(
    name: str, *, is_dir: bool, size: int = 0, executable: bool = False
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir or executable else 0o644
    info.size = size
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def task_folder_to_tar_gz(folder: Path) -> bytes:
    """A deterministic tar.gz of `folder`, whose entries live under `<folder name>/`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        top = folder.name
        tar.addfile(_tar_info(top, is_dir=True))
        for path in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix()):
            name = f"{top}/{path.relative_to(folder).as_posix()}"
            if "__pycache__" in path.relative_to(folder).parts:
                continue  # local test runs leave these; the loader ignores them too
            if path.is_symlink():
                raise ValueError(f"{path}: symlinks are not allowed in task folders")
            if path.is_dir():
                tar.addfile(_tar_info(name, is_dir=True))
            else:
                data = path.read_bytes()
                executable = bool(path.stat().st_mode & 0o111)
                info = _tar_info(name, is_dir=False, size=len(data), executable=executable)
                tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    # filename="" and mtime=0 keep the gzip header identical across runs and machines.
    with gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def build_table(tasks_dir: Path) -> pa.Table:
    folders = sorted(p for p in tasks_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    return pa.table(
        {
            "path": pa.array([f"tasks/{f.name}" for f in folders], pa.string()),
            "task_binary": pa.array([task_folder_to_tar_gz(f) for f in folders], pa.binary()),
        }
    )


def write_parquet(table: pa.Table, out: Path) -> None:
    pq.write_table(table, out, compression="zstd", row_group_size=64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=Path, default=REPO / "examples" / "tasks")
    parser.add_argument("--out", type=Path, default=REPO / "examples" / "tasks.parquet")
    args = parser.parse_args()
    table = build_table(args.tasks)
    write_parquet(table, args.out)
    print(f"wrote {table.num_rows} tasks to {args.out}")


if __name__ == "__main__":
    main()
