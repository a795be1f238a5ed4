"""The tested user's access to the folders the tests hand over, and to nothing else of theirs.

A test that writes its input in `tmp_path` (or `tmpdir`, or a `tempfile.mkdtemp()` folder)
and passes the path to the solution expects the solution to read it there, and to write its
output beside it. Those folders are the tests' (root's, mode 0700, under 0700 parents such as
/tmp/pytest-of-root), so the tested user (trusted.TESTED_UID) cannot enter them. When a path
under a temporary folder crosses to the tested process (an argument, an answer, a program's
argument or working folder), `grant` gives the tested user exactly that: read, write and
search on the folder handed over (the folder of a file handed over), read and write on the
file itself, and search alone, never a listing, on each folder between it and the temporary
root. Where the file system has POSIX ACLs the grant names the tested user; where it has none
(gVisor's) the grant is the folder's "other" bits, and in the verifier container the only user
besides the tests' own is the tested user.

Nothing outside a temporary root is ever granted: /tests, /logs and the guard's report stay
closed whatever path the tests pass; a folder the tests' user does not own is left as it is
(its owner decides); every step is taken through a descriptor that follows no link, so a link
the tested code plants in a granted folder grants nothing. And only a folder the tests'
process made is granted (changed since it started): a test may pass on a string the tested
code chose, and the folders test.sh made before it (`mktemp -d` for a JUnit report) must stay
closed whatever the tests pass.

Standard library only: this runs under the task image's Python.
"""

import errno
import os
import stat
import struct
import tempfile
import time

_ACL = "system.posix_acl_access"
# include/uapi/linux/posix_acl_xattr.h: a version word, then (tag, perm, id) entries sorted by
# tag and id.
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF
R, W, X = 4, 2, 1
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def temporary_roots():
    """The folders whose insides the tests may hand over: where temporary files go."""
    roots = {"/tmp", "/var/tmp", "/dev/shm", os.path.realpath(tempfile.gettempdir())}
    return tuple(sorted(r for r in roots if r != os.sep))


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


def grant(path, uid, roots, since):
    """Give user `uid` the use of `path` if it lies under one of `roots` (absolute, without
    links): the folder itself, or the folder holding the file (or the file to be made), if we
    own it and changed it at `since` or later. Returns the folder granted, or None."""
    if since is None:
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
            return None
        ours = os.getuid()
        if any(os.fstat(fd).st_uid != ours for fd in folders):
            return None
        if os.fstat(folders[-1]).st_ctime < since:
            return None
        for fd in folders[:-1]:
            _allow(fd, uid, X)
        _allow(folders[-1], uid, R | W | X)
        if len(folders) < len(parts):  # a file handed over, or one to be made
            _allow_file(folders[-1], parts[-1], uid)
        return os.sep.join([root] + parts[: len(folders)])
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _allow_file(folder, name, uid):
    try:
        fd = os.open(name, _READ, dir_fd=folder)
    except OSError:
        return  # to be made: the folder's grant lets the tested user make it
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            _allow(fd, uid, R | W)
    finally:
        os.close(fd)


def paths_in(node, roots):
    """The strings of a decoded-as-JSON message `node` that name something under `roots`."""
    prefixes = tuple(r + os.sep for r in roots)
    found, stack = [], [node]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if x.startswith(prefixes):
                found.append(x)
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    return found


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
