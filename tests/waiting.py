"""Waiting on a condition, never on a fixed sleep: tests pass on a busy machine."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 30.0, interval: float = 0.01,
               what: str | None = None) -> T:
    """Polls ``condition`` until it returns something truthy, and returns that.

    Args:
        condition: Checked at once, then every ``interval`` seconds.
        timeout: Generous on purpose: it only matters when the condition never comes.
        interval: Seconds between checks.
        what: What is awaited, for the failure message.

    Raises:
        AssertionError: ``timeout`` seconds passed without the condition holding.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what or getattr(condition, '__name__', 'a condition')}")
        time.sleep(interval)


def reap_children(pids: list[int], timeout: float = 30.0) -> list[int]:
    """Waits for forked children, each to exit with status 0.

    Returns:
        The children still running after ``timeout`` (killed and reaped): hung ones.

    Raises:
        AssertionError: A child exited with another status.
    """
    deadline = time.monotonic() + timeout
    hung = []
    for pid in pids:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0, f"child {pid} exited with {status}"
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                hung.append(pid)
                break
            time.sleep(0.01)
    return hung
