"""One processor for the two sides of a call across the boundary.

A call is a hand-off: the tests' process sends a request and sleeps until the answer, and the
tested process sleeps until a request comes. Where the two sleep on different processors,
every hand-off wakes a sleeping processor, which on a virtual machine is an exit to the host:
a Python ping-pong over a socket pair costs about 50 us there on two processors against 4 us
on one (the development machine), and a call is two hand-offs. So:

- the tested process runs on the processor the tests' process last said it runs on (`follow`);
- the tests' thread that waits for an answer is held on its processor while it waits
  (`hold`, then `release`), so the answer wakes it where the tested process runs; between
  calls it may move as before (the tested process follows with the next request), and what
  it starts then gets its own processors;
- a child the tested code forks gets the tested process's processors back (`follow`).

Only speed rests on this: where the processor cannot be read or set (another C library,
gVisor's own scheduler, a processor outside the set allowed), nothing is held.

Standard library only, Python >= 3.8.
"""

import ctypes
import os

try:
    _getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
except (OSError, AttributeError):  # a C library without it
    _getcpu = None
_AFFINITY = hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def current():
    """The processor this thread runs on now, or -1 where it cannot be read."""
    if _getcpu is None or not _AFFINITY:
        return -1
    return _getcpu()


def hold(cpu):
    """Keep this thread on processor `cpu` (from `current`) until `release` of what this
    returns: the thread's processors before, or None where nothing was changed."""
    if cpu < 0:
        return None
    try:
        allowed = os.sched_getaffinity(0)
        if len(allowed) < 2 or cpu not in allowed:
            return None
        os.sched_setaffinity(0, (cpu,))
    except OSError:
        return None
    return allowed


def release(allowed):
    if allowed is not None:
        try:
            os.sched_setaffinity(0, allowed)
        except OSError:
            pass


class Follower:
    """The tested process's side: run on the processor the tests' process says it runs on."""

    def __init__(self):
        self.allowed = os.sched_getaffinity(0) if _AFFINITY else None
        self.cpu = -1
        if self.allowed is not None and len(self.allowed) > 1:
            os.register_at_fork(after_in_child=self._unpin)

    def follow(self, cpu):
        if type(cpu) is not int or cpu == self.cpu or self.allowed is None:
            return
        if cpu not in self.allowed:
            return
        try:
            os.sched_setaffinity(0, (cpu,))
        except OSError:
            return
        self.cpu = cpu

    def _unpin(self):
        if self.cpu >= 0:
            release(self.allowed)
            self.cpu = -1
