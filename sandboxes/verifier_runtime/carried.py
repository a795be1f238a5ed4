"""What each request of the tests carries besides its arguments (the trusted side): their
environment, command line, working folder, random state and the processor they wait on.

One way only: the tested code sees the tests' environment (less the runner's own variables),
`sys.argv`, working folder (/app as its workspace; a temporary folder handed over, access.py)
and random state as they are at each call, so a test that sets `sys.argv` or changes folder
(`monkeypatch.chdir(tmp_path)`) before it calls a command-line `main()` or a function that
writes a relative path gets what one process would; and nothing it does changes ours (a
random state sent back could make the tests draw the same input for ever). The random state
is asked for ("random") by the tested process when its code first draws after a request of
ours: taking it costs more than the rest of a request, and few calls draw. The processor:
colocate.py.

Standard library only, Python >= 3.8.
"""

import os
import random
import sys
import threading

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
colocate = _load("colocate")

# The runner's own variables: pytest's current test holds a parametrized test's ids, which are
# its inputs and expected values.
_RUNNER_VARIABLES = ("PYTEST_", "_PYTEST")
_RUNNER_BYTES = tuple(v.encode() for v in _RUNNER_VARIABLES)
# Bound once: a test's `mock.patch("os.getcwd")` is not asked at each request.
_getcwd = os.getcwd
# Whether our working folder may have moved since it was last read. Reading it at every
# request was a system call each (a trip through the sentry under gVisor); it moves by os.chdir
# or os.fchdir (both raise the "os.chdir" audit event), or by C code: where the tests' ctypes
# looks up chdir(2) or fchdir(2), it is read at every request from then on (stated limit: a C
# extension of the tests' that changes folder by itself).
_moved = [True]
_always = [False]
_threads = threading.active_count
_C_CHDIR = frozenset(("chdir", "fchdir"))


def _heard(event, args):
    if event == "os.chdir":
        _moved[0] = True
    elif event.startswith("ctypes.dlsym") and len(args) > 1 and args[1] in _C_CHDIR:
        _always[0] = True


sys.addaudithook(_heard)  # (this module is loaded once, by the tests' process: trusted.py)


def tested_environment():
    """The environment the tested process sees: the tests', less the runner's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_RUNNER_VARIABLES)}


class Carried:
    """The trusted endpoint's part (trusted.py): what it last sent of each."""

    env_sent = None  # the environment the tested process has (trusted.py's endpoint() sets it)
    env_seen = None  # ours as last seen (bytes as the OS holds them: cheap to copy)
    env_ours = None  # ... less the runner's variables
    random_sent = None
    reseeded = False  # the tests called random.seed or random.setstate
    random_drawn = False  # the tested code drew since it last took our state
    cpu_told = -1  # the processor the tested process was last told we run on
    argv_sent = None  # the command line the tested process has
    cwd_seen = None  # our working folder when last sent

    def carry(self, msg):
        """Into request `msg`: our environment, command line and working folder where they
        changed, and whether the tested code has our random state already ("rk")."""
        self._send_environment(msg)
        self._send_command_line(msg)
        self._send_working_folder(msg)
        if self.random_drawn:
            # The tested code draws: where it has our state already, it need not ask ("rk");
            # only then, as it would be answered None. (Comparing states costs a little, so
            # not on requests to code that does not draw.)
            if random.getstate() == self.random_sent and not self.reseeded:
                msg["rk"] = 1
            else:
                self.random_drawn = False

    def _send_environment(self, msg):
        raw, prefixes = getattr(os.environ, "_data", None), _RUNNER_BYTES  # (bytes on POSIX)
        if raw is None:
            raw, prefixes = os.environ, _RUNNER_VARIABLES
        if raw == self.env_seen:
            return
        # pytest changes its own variables at each phase of each test: only a change of the
        # rest (compared as the OS holds them, before any decoding) can change what is sent
        self.env_seen = dict(raw)
        ours = {k: v for k, v in raw.items() if not k.startswith(prefixes)}
        if ours == self.env_ours:
            return
        self.env_ours = ours
        current = tested_environment()
        if current != self.env_sent:
            self.env_sent = current
            msg["env"] = current

    def _send_command_line(self, msg):
        argv = sys.argv  # (only a list or tuple of str: nothing here may run a test's code)
        if type(argv) not in (list, tuple) or not all(type(a) is str for a in argv):
            return
        if list(argv) != self.argv_sent:
            self.argv_sent = list(argv)
            msg["argv"] = self.argv_sent

    def _send_working_folder(self, msg):
        # (with threads, read it always: the audit event comes before the folder moves, so
        # another thread's request could read the old one and take the event's word with it)
        if not (_moved[0] or _always[0] or _threads() > 1):
            return
        _moved[0] = False
        try:
            cwd = _getcwd()
        except OSError:  # removed under us: the tested process keeps the last one
            return
        if cwd != self.cwd_seen:
            self.cwd_seen = cwd
            msg["cwd"] = self.tested_folder(cwd)

    def tested_folder(self, path):
        """Our folder `path` as the tested process names it, handed over (trusted.py)."""
        return path

    def random_state(self):
        """Our random state for the tested process, or None when it has it already."""
        self.random_drawn = True
        state = random.getstate()
        if state == self.random_sent and not self.reseeded:
            return None
        self.random_sent = state
        self.reseeded = False
        version, internal, gauss = state
        return [version, list(internal), gauss]

    def before_wait(self, msg):
        # The tested process runs where we do, and we wait for its answer there (colocate.py).
        cpu = colocate.current()
        if cpu != self.cpu_told:
            self.cpu_told = cpu
            msg["cpu"] = cpu
        return colocate.hold(cpu)

    def after_wait(self, held):
        colocate.release(held)
