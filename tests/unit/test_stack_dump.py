"""`kill -USR1` of the service: every asyncio task with the whole chain of awaits it is
suspended in (service/stack_dump.py), so a sample that never finishes says what it awaits."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from service import stack_dump


async def _waits_on(event: asyncio.Event) -> None:
    await _deeper(event)


async def _deeper(event: asyncio.Event) -> None:
    await event.wait()


def test_sigusr1_logs_each_task_down_to_what_it_awaits(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        event = asyncio.Event()
        stuck = asyncio.create_task(_waits_on(event), name="stuck-sample")
        await asyncio.sleep(0)  # (it runs up to its wait)
        assert stack_dump.install()
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(100):  # (the loop runs the handler at its next turn)
                if "stack dump" in caplog.text:
                    break
                await asyncio.sleep(0.01)
        finally:
            stack_dump.uninstall()
            event.set()
            await stuck

    with caplog.at_level(logging.WARNING, logger="service.stack_dump"):
        asyncio.run(main())
    text = caplog.text
    stuck_part = text[text.index("task stuck-sample:") :]
    lines = stuck_part.splitlines()[1:5]
    assert [line.rsplit(" in ", 1)[-1] for line in lines[:3]] == ["_waits_on", "_deeper", "wait"]
    assert lines[3].startswith("  awaiting ")
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # uninstalled


def test_without_a_loop_that_takes_signals_nothing_is_installed() -> None:
    async def in_a_thread() -> bool:
        return stack_dump.install()

    async def main() -> bool:
        return await asyncio.to_thread(asyncio.run, in_a_thread())

    assert asyncio.run(main()) is False
