"""Worker processes for parsing large inputs on idle cores."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

__all__ = ["Done", "fork_pool", "idle_cpus", "process_pool"]


class Done:
    """A finished job, for the in-process path (same interface as a future)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


def idle_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes: forked when that is safe (it starts in
    milliseconds), spawned otherwise."""
    # fork is only safe while this process has no other thread that could hold
    # a lock the children would inherit.
    method = "fork" if threading.active_count() == 1 and \
        "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method))


def fork_pool(workers: int) -> Executor | None:
    """A pool of ``workers`` forked processes, started now; ``None`` where forking is not safe.

    For work a library call starts on its own: spawning would import the
    caller's main module again in every worker, so it is never done here;
    forking is, on Linux, while this process has a single thread. The workers
    are forked at once, so that threads started afterwards (a progress bar's)
    are never forked with them.
    """
    if workers < 1 or not sys.platform.startswith("linux") or threading.active_count() != 1:
        return None
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
    try:
        pool.submit(int).result()  # forks every worker (fork pools start all of them on the first job)
    except (OSError, RuntimeError):
        pool.shutdown(wait=False, cancel_futures=True)
        return None  # no memory or no process left for a worker: the work is done here instead
    return pool
