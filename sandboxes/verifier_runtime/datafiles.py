"""The data files the tests and the tested code share through /app, kept in step between calls.

In one process a test that writes /app/config.json and then calls the solution, which reads
it beside its own module (`os.path.dirname(__file__)`) or by a relative name, finds it; and
a file the solution writes by a relative name is in /app for the tests to read. Here /app is
the tests' and the tested code's /app is its workspace (view.py), so the two are synced with
view.sync (data files only, never a module, a folder's metadata or anything the tests'
processes would load; the newer copy wins), and only where one side may have written:

- `Synced`, the tests' side: an audit hook notes a write of the tests' process into /app (an
  open for writing, a rename into it) or a program it starts; /app's data files go to the
  workspace before its next request. The tested side's word that it wrote ("fw", below)
  brings the workspace's back at once, before the tests' code goes on; a file it opened in
  one call and wrote in a later one comes back when the tests next open or list something
  in /app after a call (stated limit: a `stat` alone, `os.path.exists`, raises no event).
- `note_writes`, the tested side: an audit hook notes an open for writing that is not an
  absolute path outside its workspace, or a program it starts; its next answer or request
  says "fw". The tested code can keep quiet (ctypes) only against itself.

A program the tests run (trusted.py `run_main`) syncs around itself as before.

Standard library only, Python >= 3.8.
"""

import os
import sys
import threading

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)

_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Events of a program starting, which may write anywhere.
_PROGRAMS = frozenset(
    ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.spawn", "os.fork")
)
_LISTING = frozenset(("os.listdir", "os.scandir"))
_getcwd = os.getcwd  # (bound once: a test's patch of it is not called here)


def _writes(args):
    flags = args[2] if len(args) > 2 else 0
    return type(flags) is int and bool(flags & _WRITING)


def _absolute(path):
    """`path` as an absolute str, or None where it names no place by itself (a descriptor,
    a path relative to one, something that is no path)."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if type(path) is not str:
        return None
    if not path.startswith("/"):
        try:
            path = os.path.join(_getcwd(), path)
        except OSError:
            return None
    return os.path.normpath(path)


_synced = []


def synced(app, workspace, report):
    """This process's `Synced` (one audit hook, whatever number of tested processes)."""
    if not _synced:
        _synced.append(Synced(app, workspace, report))
    return _synced[0]


class Synced:
    """The tests' side: which of /app and the workspace may hold data files the other lacks."""

    def __init__(self, app, workspace, report):
        self.app, self.workspace, self.report = app, workspace, report
        self.inside = app.rstrip("/") + "/"
        # test.sh may have written into /app before pytest started: the first request syncs.
        self.forward = True  # /app may hold what the workspace lacks
        self.wrote = False  # the tested code has written into its workspace
        self.stale = False  # ... and ran since the workspace last came back
        self.lock = threading.RLock()
        self.failures_told = 0  # (a few: a file it cannot copy fails at every sync after)
        self.busy = False  # (our own opens raise the events we listen to)
        sys.addaudithook(self._heard)

    def _in_app(self, path):
        path = _absolute(path)
        return path is not None and (path + "/").startswith(self.inside)

    def _heard(self, event, args):
        if self.busy:
            return
        if event == "open":
            if self.stale and self._in_app(args[0]):
                self.back()  # (before the open: it reads what the tested code wrote)
            if not self.forward and _writes(args) and self._in_app(args[0]):
                self.forward = True
        elif event in _LISTING:
            if self.stale and args and self._in_app(args[0]):
                self.back()
        elif event == "os.rename":
            if not self.forward and len(args) > 1 and self._in_app(args[1]):
                self.forward = True
        elif event in _PROGRAMS:
            self.forward = True

    def before_request(self):
        """/app's data files to the workspace, where the tests may have written some."""
        if self.forward:
            self.forward = False
            self._sync(self.app, self.workspace, 0o666, 0o777)

    def heard(self, msg):
        """A message of the tested side: where it says it wrote, its data files come back."""
        if msg.get("fw") == 1:
            self.wrote = True
            self.back()
        elif self.wrote:
            self.stale = True

    def back(self):
        self.stale = False
        self._sync(self.workspace, self.app, 0o644, 0o755)

    def _sync(self, src, dst, file_mode, dir_mode):
        with self.lock:
            if self.busy:
                return
            self.busy = True
            try:
                _copied, failed = _load("view").sync(src, dst, file_mode, dir_mode)
            finally:
                self.busy = False
        if failed and self.failures_told < _FAILURES_TOLD:
            self.failures_told += 1
            self.report("sync_failed", source=src, failed=failed[:50])


_FAILURES_TOLD = 5


def note_writes(workspace):
    """The tested side: a list whose item 0 turns True at a write that may be the workspace's
    (the endpoint says "fw" and sets it back)."""
    wrote = [False]
    inside = workspace.rstrip("/") + "/"

    def heard(event, args):
        if wrote[0]:
            return
        if event == "open":
            if _writes(args):
                path = _absolute(args[0])
                wrote[0] = path is None or (path + "/").startswith(inside)
        elif event == "os.rename":
            path = _absolute(args[1]) if len(args) > 3 and args[3] == -1 else None
            wrote[0] = path is None or (path + "/").startswith(inside)
        elif event in _PROGRAMS:
            wrote[0] = True

    sys.addaudithook(heard)
    return wrote
