"""Waiting on a condition, never on a fixed sleep: tests pass on a busy machine."""

from __future__ import annotations

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
