"""One processor for the two sides of a call across the boundary.

A call is a hand-off: the tests' process sends a request and sleeps until the answer, and the
tested process sleeps until a request comes. Where the two sleep on different processors,
every hand-off wakes a sleeping processor, which on a virtual machine is an exit to the host:
a Python ping-pong over a socket pair costs about 50 us there on two processors against 4 us
on one (the development machine), and a call is two hand-offs. So:

- the tests' thread that waits for an answer is held on its processor while it waits
  (`hold`, then `release`), and the request says which processor that is when it changed;
- the tested process sleeps held on that processor (`Follower`), so a request wakes it there
  and its answer wakes the tests' thread there; while it runs code (the tests' request, or
  its own waiting for an answer ended) it has all its processors, so the threads and
  processes the tested code starts get them all;
- between calls the tests' thread has its processors and may move (the tested process
  follows with the next request); what the tests start then gets them all.

Only speed rests on this: where the processor cannot be read or set (another C library, a
processor outside the set allowed), and under gVisor (`_gvisor`), nothing is held.

Standard library only, Python >= 3.8.
"""

import ctypes
import os


def _gvisor():
    """Whether this is gVisor's kernel (it says so on its command line): there a processor
    set moves no host thread, and each of its system calls is a trip through the sentry, so
    holding cost a call more than it saved (in the verifier container, 3,000 calls: 465 us a
    call without, 630 us with; under runc 165 us without, 94 us with)."""
    try:
        with open("/proc/cmdline", "rb") as f:
            return b"gvisor" in f.read()
    except OSError:
        return False


_AFFINITY = hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")
# Bound once: a test's patch of os (made in the tested process too, patches.py) is not ours.
_getaffinity = getattr(os, "sched_getaffinity", None)
_setaffinity = getattr(os, "sched_setaffinity", None)
try:
    _getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    if _gvisor() or not _AFFINITY:
        _getcpu = None
except (OSError, AttributeError):  # a C library without it
    _getcpu = None


def current():
    """The processor this thread runs on now, or -1 where it cannot be read."""
    return -1 if _getcpu is None else _getcpu()


def hold(cpu):
    """Keep this thread on processor `cpu` (from `current`) until `release` of what this
    returns: the thread's processors before, or None where nothing was changed."""
    if cpu < 0:
        return None
    try:
        allowed = _getaffinity(0)
        if len(allowed) < 2 or cpu not in allowed:
            return None
        _setaffinity(0, (cpu,))
    except OSError:
        return None
    return allowed


def release(allowed):
    if allowed is not None:
        try:
            _setaffinity(0, allowed)
        except OSError:
            pass


class Follower:
    """The tested process's side: it sleeps on the channel where the tests' process last said
    it runs (so a request wakes it there), and runs code with the processors it had (threads
    and processes the tested code starts get them all, as in one process; a set the tested
    code chose for itself stays its own)."""

    def __init__(self):
        self.cpu = -1  # where the tests' process runs, as last told
        self.held = None  # this thread's processors while it is held (`hold`)

    def told(self, cpu):
        if type(cpu) is int:
            self.cpu = cpu

    def wait(self):
        """Before this thread sleeps on the channel (an answer sent, or a request of its own)."""
        if self.held is None:
            self.held = hold(self.cpu)

    def run(self):
        """Before code runs (a request came, or the answer to one of its own)."""
        release(self.held)
        self.held = None
