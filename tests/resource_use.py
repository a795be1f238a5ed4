"""What a piece of the service costs this process while it runs: CPU seconds (every thread)
and the peak growth of its resident memory, sampled. Tests assert these as bounds (a decode
bomb or a flood must not cost the service what it costs the attacker nothing to send), never
as timings."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


@dataclass
class Use:
    cpu_s: float = 0.0
    rss_growth: int = 0  # bytes: the peak seen over the resident size at the start

    def __str__(self) -> str:
        return f"{self.cpu_s:.2f} s of CPU, {self.rss_growth / 2**20:.0f} MiB more resident"


@contextlib.contextmanager
def measured(every_s: float = 0.005) -> Iterator[Use]:
    use = Use()
    start_rss, peak = _rss(), [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(every_s)

    sampler = threading.Thread(target=sample, daemon=True)
    cpu0 = time.process_time()
    sampler.start()
    try:
        yield use
    finally:
        stop.set()
        sampler.join()
        use.cpu_s = time.process_time() - cpu0
        use.rss_growth = max(peak[0], _rss()) - start_rss
