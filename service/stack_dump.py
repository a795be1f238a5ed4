"""`kill -USR1 <service pid>`: where every sample stands, in the service's log.

A sample that never finishes is awaiting something; a thread dump alone does not say what,
because a waiting coroutine is on no thread's stack. So the dump is every asyncio task's stack
(what each episode is awaiting), then every thread's (a blocking Docker call, a stream read).
The end-to-end tests send it when a rollout outlasts their wait, so a hang in CI leaves its
cause in the failure's output.
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import logging
import signal
import sys

log = logging.getLogger(__name__)


def tasks_report() -> str:
    """Every task of the running loop with the chain of awaits it is suspended in, outermost
    first, down to what it waits on (`Task.print_stack` shows only the outermost frame)."""
    out = io.StringIO()
    tasks = asyncio.all_tasks()
    out.write(f"{len(tasks)} asyncio tasks\n")
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.write(f"task {task.get_name()}:\n")
        awaited: object = task.get_coro()
        for _ in range(_MAX_DEPTH):
            frame = next((f for a in _FRAMES if (f := getattr(awaited, a, None)) is not None), None)
            if frame is None:
                break
            code = frame.f_code
            out.write(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}\n")
            awaited = next(
                (n for a in _AWAITS if (n := getattr(awaited, a, None)) is not None), None
            )
        out.write(f"  awaiting {awaited!r:.300}\n")
    return out.getvalue()


# Where a coroutine, generator or async generator keeps its frame, and what it awaits.
_FRAMES = ("cr_frame", "gi_frame", "ag_frame")
_AWAITS = ("cr_await", "gi_yieldfrom", "ag_await")
_MAX_DEPTH = 60


def _dump() -> None:
    log.warning("stack dump (SIGUSR1)\n%s", tasks_report())
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


def install() -> bool:
    """Answer SIGUSR1 with the dump, where the loop can take signals (the main thread: not
    under a test client's thread)."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _dump)
    except (NotImplementedError, RuntimeError, ValueError):
        return False
    return True


def uninstall() -> None:
    try:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)
    except (NotImplementedError, RuntimeError, ValueError):
        pass
