"""The verifier's pytest guard, uploaded as /tests/conftest.py into every verifier container.

The agent's code does not run in pytest's process (see trusted.py): this is the second layer,
which records what pytest saw so the grade can check the reward against it. Inside the pytest
process it:

1. opens its report file (/logs/rollouts-guard/report.jsonl) for appending;
2. writes a line for each of the first tests that did not pass (for the reader; the grade
   uses only the counts) and a final line when the session finishes, with the counts and
   whether pytest's reporting functions were replaced while the tests ran. A passing test
   writes nothing: the report stays small however long the suite, so the evidence cap never
   cuts the final line of an honest run;
3. loads the task's own tests/conftest.py (uploaded as _task_conftest.py) as a plugin of its
   own, so the task's hooks and fixtures run beside these and cannot replace them;
4. starts the runtime's watch of reads of the workspace's stubs (sources.py) before any test
   module is collected.

The verifier reads the report only after every process in the container is dead, and grades 0
when a session never finished, when the reward contradicts what the tests reported, or when
pytest's reporting was tampered with.

Standard library only: it runs under whatever Python the task's image has.
"""

import importlib.util
import json
import os
import sys

# Bound once: a test may patch os.getpid (mock.patch, patches.py), and the runtime's own
# checks of which process it is must not see the patch.
_getpid = os.getpid

REPORT_DIR = "/logs/rollouts-guard"
REPORT_PATH = REPORT_DIR + "/report.jsonl"
TASK_CONFTEST = "/tests/_task_conftest.py"
LISTED = 50  # tests that did not pass named in the report; the rest are only counted
NODEID_CHARS = 200


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
        self.pid = _getpid()
        self.counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
        self.listed = 0
        self.originals = _watched()
        self.plugins = None
        self.write(event="start", python=sys.version)

    def write(self, **record):
        record["pid"] = _getpid()
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


def _watch_sources():
    """Before any test module is collected (one may read a workspace module's file before it
    imports any): the runtime's watch of this process's reads of the stubs (sources.py), which
    the first stub imported would start otherwise. Nothing without the view's manifest."""
    try:
        with open(os.environ.get("ROLLOUTS_VIEW_MANIFEST", "/rollouts/view.json")) as f:
            runtime = json.load(f)["runtime"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    module = sys.modules.get("_rollouts_trusted")
    if module is None:  # as the stubs load it
        spec = importlib.util.spec_from_file_location("_rollouts_trusted", runtime)
        module = importlib.util.module_from_spec(spec)
        sys.modules["_rollouts_trusted"] = module
        spec.loader.exec_module(module)
    module.watch_sources()


_watch_sources()


def pytest_configure(config):
    """What pytest collects as tests, for the runtime (trusted.py `_descriptors_reach`)."""
    module = sys.modules.get("_rollouts_trusted")
    if _guard is not None and module is not None:
        module.collected_as(config.getini("python_classes"), config.getini("python_functions"))


def pytest_collection(session):
    if _guard is not None:
        _guard.plugins = {id(p) for p in session.config.pluginmanager.get_plugins()}


def pytest_collection_finish(session):
    if _guard is not None:
        _guard.write(event="collected", n=len(session.items))


def pytest_collectreport(report):
    if _guard is not None and report.failed:
        _guard.counts["error"] += 1
        if _guard.listed < LISTED:
            _guard.listed += 1
            _guard.write(event="collect_error", nodeid=report.nodeid[:NODEID_CHARS])


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
        if outcome != "passed" and _guard.listed < LISTED:
            _guard.listed += 1
            nodeid = report.nodeid[:NODEID_CHARS]
            _guard.write(event="test", nodeid=nodeid, when=report.when, outcome=outcome)


def pytest_sessionfinish(session, exitstatus):
    if _guard is None or _getpid() != _guard.pid:
        return
    _guard.write(
        event="finish",
        exitstatus=int(exitstatus),
        tampered=_guard.tampered(session),
        **_guard.counts,
    )


def pytest_addhooks(pluginmanager):
    """Called as this conftest registers: load the task's own conftest as a plugin of its own
    (its hooks run beside ours; executed in this module it would replace them)."""
    if _guard is None or not os.path.exists(TASK_CONFTEST):
        return
    spec = importlib.util.spec_from_file_location("_rollouts_task_conftest", TASK_CONFTEST)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    pluginmanager.register(module, TASK_CONFTEST)
    pluginmanager.consider_module(module)
