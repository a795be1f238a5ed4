"""The verifier's pytest guard, uploaded as /tests/conftest.py into every verifier container.

pytest loads it before it imports any test module, so before any code of the solution runs.
It then, inside the pytest process:

1. opens its report file (/logs/rollouts-guard/report.jsonl) for appending;
2. confines the process and all its children with an unprivileged Landlock ruleset: no writes
   beneath /logs (the reward files and this report) or /tests, and no signals to processes
   outside the ruleset (test.sh), so the tested code can neither write a reward nor kill the
   script that writes it;
3. writes one line per test report and a final line when the session finishes, including
   whether pytest's reporting functions were replaced while the tests ran.

The verifier reads the report only after every process in the container is dead, and grades 0
when a session never finished, when the reward contradicts what the tests reported, or when
pytest's reporting was tampered with. Code running inside the pytest process can still write
to the already-open report descriptor: that is detected (see docs/reliability.md), not
prevented. The task's own tests/conftest.py, if any, is uploaded as _task_conftest.py and run
below, in this module's namespace.

Standard library only: it runs under whatever Python the task's image has.
"""

import ctypes
import json
import os
import sys
import threading

REPORT_DIR = "/logs/rollouts-guard"
REPORT_PATH = REPORT_DIR + "/report.jsonl"
PROTECTED = ("logs", "tests")  # top-level folders the tested code may not write beneath
TASK_CONFTEST = "/tests/_task_conftest.py"

# Linux Landlock ABI (include/uapi/linux/landlock.h); syscall numbers are the same on x86_64
# and arm64.
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_WRITE_FILE = 1 << 1
_DIR_WRITES = sum(1 << b for b in (4, 5, 6, 7, 8, 9, 10, 11, 12))  # remove_*, make_*
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _confine():
    """Apply the ruleset to this process; returns (abi, None) or (abi, why it failed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    if abi < 1:
        return 0, "landlock unavailable: " + os.strerror(ctypes.get_errno())
    if abi < 6:
        return abi, f"landlock ABI {abi} lacks signal scoping (needs 6, Linux 6.12)"
    if threading.active_count() != 1:
        return abi, "more than one thread at start-up: landlock would confine only one"
    handled = _WRITE_FILE | _DIR_WRITES | _REFER | _TRUNCATE
    attr = _RulesetAttr(handled, 0, _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX_SOCKET)
    ruleset = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        return abi, "landlock_create_ruleset: " + os.strerror(ctypes.get_errno())
    try:
        for name in sorted(os.listdir("/")):
            if name in PROTECTED:
                continue
            path = "/" + name
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                is_dir = os.path.isdir(path)
                rule = _PathBeneath(handled if is_dir else _WRITE_FILE | _TRUNCATE, fd)
                if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                    return abi, f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            return abi, "prctl(NO_NEW_PRIVS): " + os.strerror(ctypes.get_errno())
        if libc.syscall(_SYS_RESTRICT, ruleset, 0):
            return abi, "landlock_restrict_self: " + os.strerror(ctypes.get_errno())
    finally:
        os.close(ruleset)
    return abi, None


_WATCHED = (
    "_pytest.runner:runtestprotocol",
    "_pytest.runner:call_and_report",
    "_pytest.runner:call_runtest_hook",
    "_pytest.runner:pytest_runtest_makereport",
    "_pytest.runner:CallInfo.from_call",
    "_pytest.reports:TestReport.from_item_and_call",
    "_pytest.reports:TestReport.__init__",
    "_pytest.python:pytest_pyfunc_call",
    "_pytest.python:Function.runtest",
    "_pytest.main:pytest_runtestloop",
    "_pytest.main:Session.perform_collect",
    "_pytest.terminal:TerminalReporter.pytest_runtest_logreport",
    "_pytest.junitxml:LogXML.pytest_runtest_logreport",
    "_pytest.junitxml:LogXML.pytest_sessionfinish",
    "pluggy._hooks:HookCaller.__call__",
    "pluggy._hooks:_HookCaller.__call__",
    "pluggy._manager:PluginManager._hookexec",
    "pluggy._callers:_multicall",
)


def _watched():
    """pytest's reporting path (what exists of it in this pytest version): replacing any of
    these can turn a failure into a pass."""
    import importlib

    found = {}
    for spec in _WATCHED:
        module, _, path = spec.partition(":")
        try:
            obj = importlib.import_module(module)
            for part in path.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            continue
        found[spec] = getattr(obj, "__func__", obj)
    return found


class _Guard:
    def __init__(self):
        os.makedirs(REPORT_DIR, exist_ok=True)
        self.fd = os.open(REPORT_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.pid = os.getpid()
        abi, problem = _confine()
        self.counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
        self.originals = _watched()
        self.plugins = None
        self.write(event="start", landlock_abi=abi, unguarded=problem, python=sys.version)

    def write(self, **record):
        record["pid"] = os.getpid()
        os.write(self.fd, (json.dumps(record) + "\n").encode())

    def tampered(self, session):
        changed = [name for name, fn in _watched().items() if self.originals.get(name) is not fn]
        for plugin in session.config.pluginmanager.get_plugins():
            if self.plugins is None or id(plugin) in self.plugins or _pytest_own(plugin):
                continue
            changed.append(f"plugin registered while the tests ran: {plugin!r}")
        return changed


def _pytest_own(plugin):
    """pytest's own objects and the task's conftest files, which register during collection."""
    if (getattr(plugin, "__file__", None) or "").startswith("/tests/"):
        return True
    name = getattr(plugin, "__name__", None) or type(plugin).__module__
    return name.split(".")[0] in ("_pytest", "pytest", "pluggy")


_guard = _Guard() if os.path.abspath(__file__) == "/tests/conftest.py" else None


def pytest_collection(session):
    if _guard is not None:
        _guard.plugins = {id(p) for p in session.config.pluginmanager.get_plugins()}


def pytest_collection_finish(session):
    if _guard is not None:
        _guard.write(event="collected", n=len(session.items))


def pytest_collectreport(report):
    if _guard is not None and report.failed:
        _guard.counts["error"] += 1
        _guard.write(event="collect_error", nodeid=report.nodeid)


def pytest_runtest_logreport(report):
    if _guard is None:
        return
    if report.when == "call" or report.outcome != "passed":
        outcome = report.outcome
        if report.when != "call" and outcome == "failed":
            outcome = "error"
        if hasattr(report, "wasxfail"):
            outcome = "skipped"
        _guard.counts[outcome] = _guard.counts.get(outcome, 0) + 1
        _guard.write(event="test", nodeid=report.nodeid, when=report.when, outcome=outcome)


def pytest_sessionfinish(session, exitstatus):
    if _guard is None or os.getpid() != _guard.pid:
        return
    _guard.write(
        event="finish",
        exitstatus=int(exitstatus),
        tampered=_guard.tampered(session),
        **_guard.counts,
    )


if os.path.exists(TASK_CONFTEST):
    with open(TASK_CONFTEST) as _f:
        exec(compile(_f.read(), TASK_CONFTEST, "exec"))
