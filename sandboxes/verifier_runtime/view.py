"""Lay out /app for the tests: the agent's data files, and a stub for each of its modules.

Run once in the verifier container, as root, before the tests:

    python3 -I view.py WORKSPACE APP TESTS MANIFEST REPORT

WORKSPACE holds the agent's files as they were; the tests never see it. APP gets:
- for every Python module or package the tests could import by name, a stub of the same name
  (trusted.py then runs the real one in the tested process);
- every other file, as data, owned by root and read-only to the tested code;
- nothing that Python or a test runner would load or obey on its own: no bytecode, no `.pth`,
  no package metadata (`*.dist-info`: entry points are how pytest autoloads plugins), no
  `conftest.py`, no `pytest.ini`/`tox.ini`/`setup.cfg`/`pyproject.toml`/`setup.py`, no
  `sitecustomize`, and no module that would shadow one the tests' interpreter has (the
  standard library, installed packages, a module beside the tests) or named like a test.
  Names are compared case-folded (importlib.metadata finds `EVIL.DIST-INFO` as readily as
  `evil.dist-info`), and a folder is metadata by what it holds (`METADATA`, `PKG-INFO`,
  `entry_points.txt`), whatever its name.
First it sets the modes the verifier script leaves to it (chmod's, without a program's start):
the runtime beside this file readable by all and writable by root alone, WORKSPACE writable by
all (it is the tested code's writable view of /app).
MANIFEST records the stubbed modules for trusted.py, and where a copy of each one's text is
(the folder `sources` beside MANIFEST: what the tests' source lookups answer, sources.py);
REPORT gets one line saying what was left out.

`sync` copies data files (what `build` would lay out as data, and nothing else) between the
tests' /app and the tested code's writable workspace: trusted.py calls it around a program
the tests run, and datafiles.py between calls where a side wrote, so the tested code reads
what the tests put in /app and the tests read what it wrote (module files, metadata and the
rest stay where they are).

Standard library only: this runs under the task image's Python. And few modules of it: this
interpreter starts in every verification, and `json`, `re`, `shutil` and `importlib.util` (with
what they import) cost as much CPU again as its bare start, so the little this needs of them
is done here. The verifier script loads it as a module (`main`), from its compiled file.
"""

import importlib.machinery
import os
import stat
import sys

# Compared case-folded.
EXCLUDED_NAMES = {
    "__pycache__",
    ".pytest_cache",
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
    "setup.py",
    "pyproject.toml",
}
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".pth", ".egg-link", ".dist-info", ".egg-info", ".egg", ".whl")
# A folder holding one of these is package metadata, whatever its own name.
METADATA_FILES = {"metadata", "pkg-info", "entry_points.txt"}
RESERVED_MODULES = {"sitecustomize", "usercustomize", "__main__", "conftest"}
_MODULE_SUFFIXES = sorted(
    importlib.machinery.SOURCE_SUFFIXES + importlib.machinery.EXTENSION_SUFFIXES,
    key=len,
    reverse=True,
)

STUB = """\
# Written by rollouts: the workspace module {name!r} runs in a separate, unprivileged
# process (see the verifier runtime's trusted.py); this stub is how the tests reach it.
def _rollouts_runtime():
    import importlib.util
    import sys

    runtime = sys.modules.get("_rollouts_trusted")
    if runtime is None:
        spec = importlib.util.spec_from_file_location("_rollouts_trusted", {runtime!r})
        runtime = importlib.util.module_from_spec(spec)
        sys.modules["_rollouts_trusted"] = runtime
        spec.loader.exec_module(runtime)
    return runtime


if __name__ == "__main__":
    _rollouts_runtime().run_main({name!r})
else:
    _rollouts_runtime().attach(globals(), {name!r})
    del _rollouts_runtime
"""


def _module_name(filename):
    for suffix in _MODULE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[: -len(suffix)]
    return None


def _excluded(name):
    folded = name.casefold()
    return folded in EXCLUDED_NAMES or folded.endswith(EXCLUDED_SUFFIXES)


def _test_file(name):
    """A module name pytest collects as a test file by default."""
    return name.startswith("test_") or name.endswith("_test")


def _metadata_folder(path):
    try:
        return any(n.casefold() in METADATA_FILES for n in os.listdir(path))
    except OSError:
        return True


def _shadows(top, tests):
    """True when the tests' interpreter already has a module `top` without /app."""
    if top in sys.builtin_module_names or top in RESERVED_MODULES or top.startswith("_rollouts"):
        return True
    if os.path.exists(os.path.join(tests, top + ".py")) or os.path.isdir(os.path.join(tests, top)):
        return True
    if top in sys.modules:
        return True
    try:  # (importlib.util.find_spec of a top-level name; that module imports contextlib, a
        # quarter of this interpreter's start)
        return any(
            getattr(f, "find_spec", None) is not None and f.find_spec(top, None) is not None
            for f in sys.meta_path
        )
    except (ImportError, ValueError):
        return True


def _copy(src, dest):
    """Copy a regular file's bytes (the workspace is the agent's, but nothing runs in it yet:
    `build` runs before any of its code)."""
    with open(src, "rb") as i, open(dest, "wb") as o:
        while True:
            chunk = i.read(_CHUNK)
            if not chunk:
                return
            o.write(chunk)


def build(workspace, app, tests, runtime, sources):
    """Fill `app` from `workspace`; returns (stubbed module names, what was left out, {stub:
    copy of the agent's text in `sources`, None for an extension module})."""
    modules, left_out, texts = [], [], {}
    for here, dirs, files in os.walk(workspace):
        rel = os.path.relpath(here, workspace)
        parts = [] if rel == "." else rel.split(os.sep)
        kept_dirs = []
        for d in sorted(dirs):
            path = os.path.join(here, d)
            if _excluded(d) or os.path.islink(path) or _metadata_folder(path):
                left_out.append(os.path.join(rel, d))
            else:
                kept_dirs.append(d)
                os.makedirs(os.path.join(app, *parts, d), mode=0o755, exist_ok=True)
        dirs[:] = kept_dirs
        importable = all(p.isidentifier() for p in parts) and not (
            parts and _shadows(parts[0], tests)
        )
        for f in sorted(files):
            src = os.path.join(here, f)
            st = os.lstat(src)
            if not stat.S_ISREG(st.st_mode) or _excluded(f):
                left_out.append(os.path.join(rel, f))
                continue
            name = _module_name(f)
            if name is None:  # data
                dest = os.path.join(app, *parts, f)
                _copy(src, dest)
                os.chmod(dest, 0o644)
                os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))  # sync: the same file
                continue
            dotted = ".".join(parts + ([] if name == "__init__" else [name]))
            if (
                not importable
                or not name.isidentifier()
                or (not parts and (_shadows(name, tests) or _test_file(name)))
                or (parts and _test_file(name))
                or not dotted
            ):
                left_out.append(os.path.join(rel, f))
                continue
            if dotted in modules:  # solution.py and solution.cpython-311-*.so: one stub
                continue
            dest = os.path.join(app, *parts, name + ".py")
            with open(dest, "w") as out:
                out.write(STUB.format(name=dotted, runtime=runtime))
            os.chmod(dest, 0o644)
            modules.append(dotted)
            texts[dest] = None  # an extension module: no text, but a stub all the same
            if f.endswith(tuple(importlib.machinery.SOURCE_SUFFIXES)):
                # The text the tests' source lookups get (sources.py), copied now, before any
                # of the agent's code ran, to where the tested code cannot write.
                texts[dest] = os.path.join(sources, *parts, name + ".py")
                os.makedirs(os.path.dirname(texts[dest]), mode=0o755, exist_ok=True)
                _copy(src, texts[dest])
                os.chmod(texts[dest], 0o644)
    return modules, left_out, texts


# ---- sync: data files between /app and the tested code's workspace -----------------------------
# One side is written by the tested user while this runs as root, so every step is taken
# through a descriptor of the folder above it and never follows a link: a link or a folder
# swapped in midway fails that one copy, and nothing outside the two trees is read or written.

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO swapped in: no wait
_MAKE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


def _open_dir(top, parts, make=None):
    """A descriptor of top/parts; `make`: the mode of folders made on the way (else None)."""
    fd = os.dup(top)
    try:
        for part in parts:
            if make is not None:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    child = os.open(part, _DIR, dir_fd=fd)
                    os.fchmod(child, make)
                    os.close(child)
                except FileExistsError:
                    pass
            child = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _same(a, b):
    while True:
        x, y = os.read(a, _CHUNK), os.read(b, _CHUNK)
        if x != y:
            return False
        if not x:
            return True


def _newer_or_same(was, st):
    """Whether the copy `was` needs no copy of `st` over it: it is the newer, or the same file
    (a copy keeps its source's time). File times move by clock ticks of some milliseconds, so
    one written in the tick of the last copy has that copy's time: then a size that changed
    tells it, and the side synced from, which is the one that acted last, wins."""
    if not stat.S_ISREG(was.st_mode):
        return False
    if was.st_mtime_ns != st.st_mtime_ns:
        return was.st_mtime_ns > st.st_mtime_ns
    return was.st_size == st.st_size


def _copy_file(src_dir, dst_dir, name, st, mode):
    """Copy src_dir/name (`st`: its stat) over dst_dir/name, unless dst's is the newer or the
    same (each side keeps the other's latest writes). True if copied."""
    try:
        if _newer_or_same(os.stat(name, dir_fd=dst_dir, follow_symlinks=False), st):
            return False  # (by their stats alone: most files of most syncs)
    except FileNotFoundError:
        pass
    src = os.open(name, _READ, dir_fd=src_dir)
    try:
        st = os.fstat(src)  # (what is copied: a file swapped in since the listing is judged again)
        # A file with other names may be one that only this side's user may read: a hard link
        # the tested user made to it where the kernel lets it.
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return False
        try:
            old = os.open(name, _READ, dir_fd=dst_dir)
        except OSError:
            old = None
        if old is not None:
            try:
                was = os.fstat(old)
                if _newer_or_same(was, st) or (
                    was.st_size == st.st_size and stat.S_ISREG(was.st_mode) and _same(src, old)
                ):
                    return False
            finally:
                os.close(old)
            os.lseek(src, 0, os.SEEK_SET)
        tmp = ".rollouts-sync-%d" % os.getpid()
        out = os.open(tmp, _MAKE, 0o600, dir_fd=dst_dir)
        try:
            while True:
                chunk = os.read(src, _CHUNK)
                if not chunk:
                    break
                os.write(out, chunk)
            os.fchmod(out, mode)
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            os.unlink(tmp, dir_fd=dst_dir)
            raise
        finally:
            os.close(out)
        os.replace(tmp, name, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
        return True
    finally:
        os.close(src)


def _sync_folder(tops, parts, pending, copied, failed, file_mode, dir_mode):
    rel = os.path.join(*parts) if parts else ""
    try:
        src_dir = _open_dir(tops[0], parts)
    except OSError:
        failed.append(rel)
        return
    dst_dir = None
    try:
        names = sorted(os.listdir(src_dir))
        if parts and any(n.casefold() in METADATA_FILES for n in names):
            return
        for name in names:
            if _excluded(name):
                continue
            try:
                st = os.stat(name, dir_fd=src_dir, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                pending.append(parts + [name])
            elif stat.S_ISREG(st.st_mode) and _module_name(name) is None:
                try:
                    if dst_dir is None:
                        dst_dir = _open_dir(tops[1], parts, make=dir_mode)
                    if _copy_file(src_dir, dst_dir, name, st, file_mode):
                        copied.append(os.path.join(rel, name))
                except OSError:
                    failed.append(os.path.join(rel, name))
    except OSError:
        failed.append(rel)
    finally:
        os.close(src_dir)
        if dst_dir is not None:
            os.close(dst_dir)


def sync(src, dst, file_mode=0o644, dir_mode=0o755):
    """Copy every data file of `src` that `dst` lacks, or holds with other bytes, into `dst`
    (folders made with `dir_mode`, files written with `file_mode`). Data: what `build` lays out
    as data; module files, bytecode, metadata and the other excluded names are never copied,
    nor anything under a folder that is not copied. Nothing is deleted. Returns the relative
    paths copied and those that failed (a file the tests' user may not write, a full disk)."""
    copied, failed = [], []
    tops = []
    try:
        tops = [os.open(src, _DIR)]
        tops.append(os.open(dst, _DIR))
        pending = [[]]
        while pending:
            parts = pending.pop()
            _sync_folder(tops, parts, pending, copied, failed, file_mode, dir_mode)
    except OSError:
        failed.append(os.curdir)
    finally:
        for fd in tops:
            os.close(fd)
    return copied, failed


# ---- JSON out, for the manifest and the report (the `json` module is what this avoids) --------

_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\"}


def _json_char(c):
    if " " <= c <= "~":
        return _JSON_ESCAPES.get(c, c)
    o = ord(c)
    if o > 0xFFFF:  # a surrogate pair, as json.dumps writes it
        o -= 0x10000
        return "\\u%04x\\u%04x" % (0xD800 | (o >> 10), 0xDC00 | (o & 0x3FF))
    return "\\u%04x" % o


def to_json(value):
    """`json.dumps(value)` for what this writes: str (ASCII out, as json.dumps writes it,
    lone surrogates of undecodable file names included), int, None, list and dict by str."""
    if value is None:
        return "null"
    if type(value) is str:
        return '"' + "".join(map(_json_char, value)) + '"'
    if type(value) is int:
        return str(value)
    if type(value) is list:
        return "[" + ", ".join(map(to_json, value)) + "]"
    if type(value) is dict:
        return "{" + ", ".join(to_json(k) + ": " + to_json(v) for k, v in value.items()) + "}"
    raise TypeError("not written as JSON here: %s" % type(value).__name__)


def _add_modes(top, add, remove=0):
    """chmod -R's `a+<add>X` less `remove` on `top` and everything below it (X: execute for all
    on a folder, or on a file that some may execute), without starting chmod. As chmod -R, it
    neither follows nor changes symbolic links, and carries on past what it cannot change."""
    _add_mode(top, add, remove)
    for here, dirs, files in os.walk(top):
        for name in dirs + files:
            _add_mode(os.path.join(here, name), add, remove)


def _add_mode(path, add, remove):
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return
        mode = stat.S_IMODE(st.st_mode)
        x = 0o111 if stat.S_ISDIR(st.st_mode) or mode & 0o111 else 0
        new = (mode | add | x) & ~remove
        if new != mode:
            os.chmod(path, new)
    except OSError:
        pass


def main(argv):
    workspace, app, tests, manifest, report = argv
    here = os.path.dirname(os.path.abspath(__file__))
    _add_modes(here, 0o444, 0o022)  # (the modes the verifier script leaves to this: above)
    _add_modes(workspace, 0o666)
    runtime = os.path.join(here, "trusted.py")
    sources = os.path.join(os.path.dirname(os.path.abspath(manifest)), "sources")
    modules, left_out, texts = build(workspace, app, tests, runtime, sources)
    with open(manifest, "w") as f:
        f.write(
            to_json(
                {
                    "app": app,
                    "workspace": workspace,
                    "tests": tests,
                    "report": report,
                    "modules": modules,
                    "sources": texts,
                    "runtime": runtime,
                }
            )
        )
    line = {
        "event": "view",
        "modules": modules[:100],
        "left_out": left_out[:100],
        "pid": os.getpid(),
    }
    with open(report, "a") as f:
        f.write(to_json(line) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
