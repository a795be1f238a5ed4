"""The tested user's access to the folders the tests hand over, and to nothing else of theirs.

A test that writes its input in `tmp_path` (or `tmpdir`, or a `tempfile.mkdtemp()` folder) and
passes the path to the solution expects the solution to read it there, and to write its output
beside it. Those folders are the tests' (root's, mode 0700, under 0700 parents such as
/tmp/pytest-of-root), so the tested user (trusted.TESTED_UID) cannot enter them. When a path
under a temporary folder crosses to the tested process in a request of the tests (an argument,
a variable of the environment they change, a program's argument or working folder; never in an
answer of theirs, since the tested code can have a tests' object echo any name), `grant` gives
the tested user exactly that: read, write and search on the folder handed over (the folder of a
file handed over), read and write on the file itself, and search alone, never a listing, on
each folder between it and the temporary root. A file the tests made in the temporary root
itself (`tempfile.NamedTemporaryFile`, `mkstemp`: mode 0600, in /tmp) is granted alone, read
and write, where the caller says it may go (trusted.py: the tests' own request, never an
answer): the root is not theirs to open up, and everyone may enter it and list it already. The
other way, a file the tested code made for itself under a temporary root (`mkstemp`: 0600) is
opened up to the tests' process by the tested user when the tests open it (`open_for_us`).
Where the file system has POSIX ACLs the grant names the user; where it has none (gVisor's) the
grant is the folder's (or the file's) "other" bits, and in the verifier container the only user
besides the tests' own is the tested user.

Nothing outside a temporary root is ever granted: /tests, /logs and the guard's report stay
closed whatever path the tests pass; a folder the tests' user does not own is left as it is
(its owner decides); every step is taken through a descriptor that follows no link, so a link
the tested code plants in a granted folder grants nothing. And only a folder the tests'
process made is granted (changed since it started): a test may pass on a string the tested
code chose, and the folders test.sh made before it (`mktemp -d` for a JUnit report) must stay
closed whatever the tests pass.

What the tested user may do beside a file handed over stops at the tests' own files, and at
what the tests' process opens. The folder of a path handed over (an output to be made) is
granted sticky, so the tested user cannot unlink a file of the tests there (their expected data
beside its output), nor (under runc) rename its own over one; not where a file of the tests was
handed over there (a task may move, delete or atomically replace it, which sticky would
forbid), nor a folder handed over whole (what it holds is the tested code's to manage: an
"organize these files" task). There, and under gVisor, the tests' process refuses to read a
file of theirs (one it wrote, or had beside a file it handed over) that another user's file now
stands for. The tests' process opens nothing through a symbolic link another user made under a
temporary root (`guard_links`, an audit hook): not to write (a link planted at a name the tests
write later would send their expected value into the tested code's output), and not to read
what the link's maker could not open itself (/tests, /logs, another test's folder). Each
refusal is reported (`open_refused`; reward.py flags a positive reward `unguarded`). The
kernel's protection of links (fs.protected_symlinks) is not relied on: a host sysctl (0 on some
hosts), absent under gVisor, and only for world-writable sticky folders.

Standard library only: this runs under the task image's Python.
"""

import errno
import os
import select
import stat
import struct
import sys
import tempfile
import threading
import time
import warnings

_ACL = "system.posix_acl_access"
# include/uapi/linux/posix_acl_xattr.h: a version word, then (tag, perm, id) entries sorted by
# tag and id.
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF
R, W, X = 4, 2, 1
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

# In the tests' process: the paths of files it wrote under a temporary root, or had beside a
# file it handed over, oldest first (at most _THEIRS_CAP; _FOLDER_CAP a folder); and the
# paths it handed over (files, and folders whole), which the tested code may replace.
# (The process that runs a program keeps its own, unused.)
_theirs, _handed = {}, {}
_moved = {}  # folders where a file of the tests was handed over: never sticky
_THEIRS_CAP, _FOLDER_CAP = 10000, 1000


_roots_for = {}  # tempfile.tempdir -> its roots (a test may set tempdir)


def temporary_roots():
    """The folders whose insides the tests may hand over: where temporary files go."""
    key = tempfile.tempdir
    if key not in _roots_for:
        roots = {"/tmp", "/var/tmp", "/dev/shm", os.path.realpath(tempfile.gettempdir())}
        _roots_for[key] = tuple(sorted(r for r in roots if r != os.sep))
    return _roots_for[key]


def started(pid):
    """When process `pid` started, in seconds since the epoch (at most a clock tick early)."""
    with open("/proc/%s/stat" % pid) as f:
        ticks = int(f.read().rpartition(")")[2].split()[19])
    since = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - since


def made_after(pid):
    """The time after which a folder counts as made by process `pid` (its start, plus the
    tick its start time may be early by); None if unknown, and then nothing is granted."""
    try:
        return started(pid) + 1.0 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _entries(fd, mode):
    try:
        raw = os.getxattr(fd, _ACL)
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise
        return {
            (_USER_OBJ, _NO_ID): mode >> 6 & 7,
            (_GROUP_OBJ, _NO_ID): mode >> 3 & 7,
            (_OTHER, _NO_ID): mode & 7,
        }
    return {
        (tag, uid): perm
        for tag, perm, uid in (struct.unpack_from("<HHI", raw, i) for i in range(4, len(raw), 8))
    }


def _may(path, uid, perm):
    """Whether user `uid` (neither the owner nor in a group of it) has `perm` (R, X) on the
    folder `path`: its "other" bits, or an ACL entry naming it within the mask. None where the
    folder cannot be opened; where its ACL cannot be read (but for a file system without
    ACLs), as if it had."""
    try:
        fd = os.open(path, _DIR)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_mode & perm:  # (R and X are the "other" bits S_IROTH and S_IXOTH)
            return True
        try:
            entries = _entries(fd, st.st_mode)
        except OSError as e:
            return e.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP)
        mask = entries.get((_MASK, _NO_ID), perm)
        return bool(entries.get((_USER, uid), 0) & mask & perm)
    finally:
        os.close(fd)


def lets_search(path, uid):
    """Whether user `uid` may (or might) search the folder `path`."""
    return _may(path, uid, X) is not False


def _allow(fd, uid, perm):
    """Add `perm` for user `uid` to the open file or folder `fd` (which we own)."""
    st = os.fstat(fd)
    try:
        entries = _entries(fd, st.st_mode)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
        entries = None
    if entries is None:  # no ACLs here: the tested user is the only "other" user
        if st.st_mode & perm != perm:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) | perm)
        return
    had = entries.get((_USER, uid), 0)
    mask = entries.get((_MASK, _NO_ID))
    if had & perm == perm and (mask is None or mask & perm == perm):
        return
    entries[(_USER, uid)] = had | perm
    if mask is None:  # the mask bounds the group class: what its entries had, and ours
        mask = 0
        for (tag, _uid), p in entries.items():
            if tag in (_USER, _GROUP_OBJ, _GROUP):
                mask |= p
    entries[(_MASK, _NO_ID)] = mask | perm
    blob = struct.pack("<I", _VERSION) + b"".join(
        struct.pack("<HHI", tag, entries[(tag, i)], i) for tag, i in sorted(entries)
    )
    try:
        os.setxattr(fd, _ACL, blob)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | perm)


def grant(path, uid, roots, since, loose=None):
    """Give user `uid` the use of `path` if it lies under one of `roots` (absolute, without
    links): the folder itself, or the folder holding the file (or the file to be made), if we
    own it and changed it at `since` or later; a file of ours in a root itself, alone, where
    `loose(path)` says so (None: never). Returns the folder (or that file) granted, or None.

    A file in a root itself is anyone's to name: every user may list /tmp. So the caller
    says which may go (trusted.py): a path in the tests' own request, of a file this process
    wrote, that the tested code never sent; never one in an answer, since the tested code
    can have an object of the tests (a `StringIO`) echo any name back to it."""
    if since is None or "\0" in path:
        return None
    real = os.path.normpath(os.path.abspath(path))
    root = next((r for r in roots if real.startswith(r + os.sep)), None)
    if root is None:
        return None
    parts = real[len(root) + 1 :].split(os.sep)
    fds = []
    try:
        fds.append(os.open(root, _DIR))
        for i, part in enumerate(parts):
            try:
                fds.append(os.open(part, _DIR, dir_fd=fds[-1]))
            except (FileNotFoundError, NotADirectoryError):
                if i < len(parts) - 1:
                    return None
                break  # the last part is a file, or one to be made
        folders = fds[1:]
        if not folders:
            # A file made in the temporary root itself (`NamedTemporaryFile`, `mkstemp`): the
            # root is everyone's to enter already and not ours to open up, so the file alone.
            if loose is None or len(parts) != 1 or not loose(real):
                return None
            if _allow_loose_file(fds[0], parts[0], uid, since):
                _handed[real] = None
                return real
            return None
        ours = os.getuid()
        if any(os.fstat(fd).st_uid != ours for fd in folders):
            return None
        if os.fstat(folders[-1]).st_ctime < since:
            return None
        for fd in folders[:-1]:
            _allow(fd, uid, X)
        _allow(folders[-1], uid, R | W | X)
        granted = os.sep.join([root] + parts[: len(folders)])
        if len(folders) < len(parts):  # a file handed over, or one to be made
            if _allow_file(folders[-1], parts[-1], uid):
                _moved[granted] = None  # the tests' file: the tested code may move it
            _handed[granted + os.sep + parts[-1]] = None
            # Its siblings stay the tests': sticky, unless a file of the tests handed over
            # there may have to move (or the folder was handed over whole).
            on = granted not in _handed and granted not in _moved
            _sticky(folders[-1], on)
            if granted not in _handed:
                _remember_files(granted, folders[-1])
        else:  # the folder handed over whole: what it holds is the tested code's to manage
            _handed[granted] = None
            _sticky(folders[-1], False)
        return granted
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _sticky(fd, on):
    """Whether only a file's owner (or the folder's) may unlink or rename it in folder `fd`:
    on, the tested user keeps its own files and cannot replace the tests'."""
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    want = mode | stat.S_ISVTX if on else mode & ~stat.S_ISVTX
    if want != mode:
        os.fchmod(fd, want)


def _remember_files(path, fd):
    """Note the files of ours in the folder `path` (open as `fd`) as the tests' own: one
    another user's file stands for later is refused to this process (`check_open`)."""
    ours = os.getuid()
    for name in os.listdir(fd)[:_FOLDER_CAP]:
        # One noted already (at an earlier grant in this folder, or as a file this process
        # wrote) would be noted again to no effect: no stat for it, so a test that hands over
        # its files one by one does not stat the whole folder for each.
        if path + os.sep + name in _theirs:
            continue
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == ours:
            _note(_theirs, path + os.sep + name)


def _note(theirs, path):
    theirs[path] = None
    while len(theirs) > _THEIRS_CAP:
        del theirs[next(iter(theirs))]


def _allow_file(folder, name, uid):
    """Let user `uid` read and write the file `name` of ours in `folder`; whether it is one."""
    try:
        fd = os.open(name, _READ, dir_fd=folder)
    except OSError:
        return False  # to be made: the folder's grant lets the tested user make it
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            _allow(fd, uid, R | W)
            return True
        return False
    finally:
        os.close(fd)


_named = set()  # the absolute paths the tested code sent (`heard_names`)
_NAMED_CAP = 100000  # past it, every name counts as sent: nothing more is handed over
_NAME_MAX = 4096  # (PATH_MAX: a longer string names no file)


def heard_names(node):
    """Note the paths under the temporary roots among the strings of a message the tested
    process sent (an answer, or a request of its own), each part of a `PATH`-like list too:
    names the tests may pass on (trusted.py hands over none of them)."""
    prefixes = None  # (most messages hold no path: nothing more to do for them)
    for text in _strings(node):
        if os.sep not in text:
            continue
        if prefixes is None:
            prefixes = tuple(r + os.sep for r in temporary_roots())
        for path in text.split(os.pathsep) if os.pathsep in text else (text,):
            if not path.startswith(os.sep):
                continue
            path = os.path.normpath(path[: _NAME_MAX * 4])
            if not path.startswith(prefixes) or len(path) > _NAME_MAX:
                continue
            if len(_named) < _NAMED_CAP:
                _named.add(path)
            else:
                _named.add(None)  # (full: `named_by_tested` says yes to all)


def named_by_tested(path):
    """Whether the tested code sent `path` (as spelled, or normalised) in any message."""
    return None in _named or os.path.normpath(path) in _named


def written_here(path):
    """Whether this process opened `path` to write (`check_open` notes it): a file of its own,
    as a `NamedTemporaryFile` or `mkstemp` of the tests is."""
    return path in _theirs


def _allow_loose_file(root, name, uid, since):
    """Let user `uid` read and write the file `name` of ours in the temporary root `root`
    (open): a regular file with no other name (a hard link would hand over what it names),
    changed at `since` or later (test.sh's `mktemp` of before stays closed). Whether it did.
    The root stays as it is: sticky, as /tmp is, so the tests' file cannot be unlinked or
    replaced by the tested user."""
    try:
        fd = os.open(name, _READ, dir_fd=root)
    except OSError:
        return False  # none yet: the tested user may make it there itself
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.getuid()
            or st.st_nlink != 1
            or st.st_ctime < since
        ):
            return False
        _allow(fd, uid, R | W)
        return True
    finally:
        os.close(fd)


def _strings(node):
    """The strings of a decoded-as-JSON message `node`, one by one."""
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            yield x
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())


def absolute_strings(node):
    """The strings of a decoded-as-JSON message `node` that are absolute paths."""
    return [x for x in _strings(node) if x.startswith(os.sep)]


def under(paths, roots):
    """Those of `paths` below one of `roots`."""
    prefixes = tuple(r + os.sep for r in roots)
    return [p for p in paths if p.startswith(prefixes)]


def argument_paths(args, cwd, roots):
    """The paths under `roots` among a program's arguments (`PATH`, `--opt=PATH`; relative
    ones are taken from `cwd`)."""
    found = []
    for arg in args:
        for candidate in (arg, arg.partition("=")[2]):
            if candidate:
                path = os.path.join(cwd, candidate)
                if os.path.normpath(path).startswith(tuple(r + os.sep for r in roots)):
                    found.append(path)
    return found


# ---- links another user made, met by the tests' process --------------------------------------
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_installed = []
_busy = threading.local()  # the hook's own opens (the report, the fork's check)


def unchecked(action):
    """`action()` with this thread's opens left unchecked by the hook: the runtime's own (the
    guard's report, which a name the tested code sent must never close to the tests)."""
    was = getattr(_busy, "on", False)
    _busy.on = True
    try:
        return action()
    finally:
        _busy.on = was


def foreign_link(path, flags, roots):
    """The first symbolic link on `path` (absolute), below one of `roots`, whose owner is not
    this process's user and which opening `path` with `flags` would follow: (the link's
    path, its lstat) or None. Each prefix is looked up as the kernel would (links before it
    followed), so `..` after a link is not skipped."""
    root = next((r for r in roots if path.startswith(r + os.sep)), None)
    if root is None:
        return None
    ours = os.getuid()
    parts = [p for p in path[len(root) + 1 :].split(os.sep) if p and p != "."]
    at = root
    for i, part in enumerate(parts):
        at = at + os.sep + part
        try:
            st = os.lstat(at)
        except OSError:
            return None  # nothing there (a file to be made), or not ours to look into
        if stat.S_ISLNK(st.st_mode) and st.st_uid != ours:
            if i == len(parts) - 1 and flags & os.O_NOFOLLOW:
                return None  # the open fails on the link itself
            return at, st
    return None


_AS_USER_LIMIT_S = 30.0  # what a fork switched to another user may take (a large process)
_poll = select.poll  # (bound once: a test's patch of select is not this hook's)


def _as_user(uid, gid, action):
    """Run `action()` (system calls only) in a fork of this process switched to user `uid`
    (group `gid`, no others), and return whether it said yes. The answer comes through a
    pipe (the tests may have set SIGCHLD ignored, and with it lost the exit status), within
    _AS_USER_LIMIT_S: that user may stop its own processes, the fork among them, so a fork
    that does not answer in time is killed and its answer is no (as where no fork or pipe
    can be made)."""
    try:
        r, w = os.pipe()
    except OSError:  # (no descriptor left: the answer is no)
        return False
    with warnings.catch_warnings():
        # (Python 3.12 warns of fork() in a process with threads: the fork only makes system
        # calls and exits, and a warning turned into an error must not fail the tests' open)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            pid = os.fork()
        except (OSError, RuntimeError):  # (RuntimeError: the interpreter is shutting down)
            os.close(r)
            os.close(w)
            return False
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            if action():
                os.write(w, b"1")
        finally:
            os._exit(0)
    os.close(w)
    try:
        waiting = _poll()
        waiting.register(r, select.POLLIN)
        ready = waiting.poll(_AS_USER_LIMIT_S * 1000)
        return bool(ready) and os.read(r, 1) == b"1"
    finally:
        os.close(r)
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
        except (ChildProcessError, ProcessLookupError):  # reaped already (SIGCHLD ignored)
            pass


def maker_may_open(path, uid, gid):
    """Whether user `uid` (group `gid`, no others) can open `path` to read: asked of a fork
    switched to that user (this process must be root with the capability to switch; else
    no)."""

    def opens():
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
        return True

    return _as_user(uid, gid, opens)


def _where(path):
    """The steps of `path` (`_chain`) and where it leads once every link is followed (its real
    path and what is there), to tell whether anything on the way changed meanwhile."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        there = (st.st_dev, st.st_ino, st.st_mode)
    except OSError:
        there = None
    return _chain(path), real, there


def _chain(path):
    """What each step of `path` is now (lstat of every prefix: device, inode, mode, owner, and
    change time but for folders), to tell whether anything on it changed while another user
    was asked."""
    out, at = [], os.sep
    for part in [p for p in path.split(os.sep) if p]:
        at = os.path.join(at, part)
        try:
            st = os.lstat(at)
        except OSError:
            out.append(None)
            break
        # (a folder's change time moves with every name made in it: left out, its inode is it)
        when = None if stat.S_ISDIR(st.st_mode) else st.st_ctime_ns
        out.append((st.st_dev, st.st_ino, st.st_mode, st.st_uid, when))
    return out


def open_for_us(path, flags, uid):
    """Before the tests' process opens `path`, a regular file of the tested user (`uid`) that
    it may not open so (the solution's `mkstemp` or `NamedTemporaryFile(delete=False)` output,
    0600, whose path it returned): that user lets it, read (and write, where the open
    writes), as in one process, where the tests' root has no `CAP_DAC_OVERRIDE`. Done by a
    fork of this process switched to that user, which opens the file itself (an owner's
    right: it can only ever open up a file of its own) and adds an entry naming this
    process's user (or, where the file system has no ACLs, the "other" bits)."""
    if uid is None or os.getuid() == uid or not isinstance(path, (str, bytes)):
        return  # (a descriptor: opened already)
    try:
        st = os.stat(path)
    except OSError:
        return
    write = bool(flags & _WRITES)
    if st.st_uid != uid or not stat.S_ISREG(st.st_mode):
        return
    if os.access(path, os.R_OK | (os.W_OK if write else 0)):
        return
    ours, perm = os.getuid(), R | (W if write else 0)

    def allow():
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            mine = os.fstat(fd)
            if stat.S_ISREG(mine.st_mode) and mine.st_uid == uid:
                _allow(fd, ours, perm)
        finally:
            os.close(fd)
        return True

    _as_user(uid, st.st_gid, allow)


def _flags(mode, flags):
    if isinstance(flags, int):
        return flags
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return os.O_WRONLY
    return os.O_RDONLY


def check_open(path, mode, flags, roots, written=None):
    """Why the tests' process may not open `path` (an "open" audit event's arguments), or
    None: a write through another user's link, a read through one of what its maker could
    not open itself, or a read of a file of the tests (a path in `written`, kept in order:
    those this process opened to write, and noted when their folder was handed over) that
    another user's file now stands for (renamed over it: gVisor lets the tested user do so
    in a sticky folder, runc does not). Writes are noted in `written`."""
    if isinstance(path, int):
        return None
    try:
        path = os.fsdecode(path)
    except TypeError:
        return None
    if not path.startswith(os.sep):
        try:
            path = os.path.join(os.getcwd(), path)
        except OSError:
            return None
    flags = _flags(mode, flags)
    found = foreign_link(path, flags, roots)
    if found is None:
        if written is None:
            return None
        if flags & _WRITES:
            try:
                if os.lstat(path).st_uid != os.getuid():
                    return None  # the tested user's file, written by the tests: theirs still
            except OSError:
                pass  # to be made: ours
            _note(written, path)
            return None
        if path in written and path not in _handed and os.path.dirname(path) not in _handed:
            try:
                owner = os.lstat(path).st_uid
            except OSError:
                return None
            if owner != os.getuid():
                return "read %s, which this process wrote, now a file of user %d" % (path, owner)
        return None
    link, st = found
    if flags & _WRITES:
        return "written through %s, a link of user %d" % (link, st.st_uid)
    before = _where(path)
    if not maker_may_open(path, st.st_uid, st.st_gid):
        return "read through %s, a link of user %d, which that user cannot read" % (
            link,
            st.st_uid,
        )
    if _where(path) != before:  # (its maker may stop the fork that asked, or swap a link)
        return "read through %s, a link of user %d, changed while it was checked" % (
            link,
            st.st_uid,
        )
    return None


def _named_beyond_its_user(path, uid):
    """Why the tests' process may not open `path`, a text the tested code sent, or None: its
    user cannot open it itself (a path under /tests, /logs)."""
    if uid is None:
        return None
    if not path.startswith(os.sep):
        path = os.path.join(os.getcwd(), path)
    before = _where(path)
    if not maker_may_open(path, uid, uid):
        return "opened %s, a path the tested code named, which its user cannot open" % path
    if _where(path) != before:  # (that user may stop the fork that asked, or swap a link)
        return "opened %s, a path the tested code named, changed while it was checked" % path
    return None


def guard_links(report, named, tested_uid, tested_user=None):
    """Install (once) the audit hook that refuses the tests' process the opens `check_open`
    names, and the opens of a path the tested code named (`named(text)`: it sent that text)
    that the tested user (`tested_uid()`, None: no other user) could not open itself: a
    solution that returns the tests' own expected file as its output's path reads nothing of
    theirs. Each refusal is reported as `open_refused` through `report(event, **fields)`.
    An open it lets through, of a file of the tested user (`tested_user()`, whether or not
    a tested process runs now: a program's file too) under a temporary root, is opened up
    to this process first where it could not open it (`open_for_us`)."""
    if _installed:
        return
    _installed.append(report)
    roots = temporary_roots()
    prefixes = tuple(r + os.sep for r in roots)
    reported = set()

    def audit(event, args):
        if event != "open" or not args:
            return
        path = args[0]
        # Cheap for what is not under a temporary root (an import's files): a prefix test,
        # and a lookup among the texts the tested code sent.
        outside = isinstance(path, str) and path.startswith(os.sep)
        outside = outside and not path.startswith(prefixes)
        chosen = isinstance(path, str) and named(path)
        if outside and not chosen:
            return
        if getattr(_busy, "on", False):
            return
        _busy.on = True
        try:
            mode = args[1] if len(args) > 1 else None
            flags = _flags(mode, args[2] if len(args) > 2 else None)
            if not outside and tested_user is not None:
                # First: what follows checks the path as it is once the fork is done.
                try:
                    open_for_us(path, flags, tested_user())
                except (OSError, ValueError):  # (then the open may fail, as it would have)
                    pass
            try:
                why = _named_beyond_its_user(path, tested_uid()) if chosen else None
                if why is None and not outside:
                    why = check_open(path, mode, flags, roots, _theirs)
            except (OSError, ValueError):  # a path the open itself will refuse
                why = None
            if why is not None and why not in reported and len(reported) < 20:
                reported.add(why)
                report("open_refused", why=why)
        finally:
            _busy.on = False
        if why is None:
            return
        raise PermissionError(errno.EACCES, "refused to the tests' process: " + why)

    sys.addaudithook(audit)
