"""Keeps telemetry bugs and misuse away from user code.

Every public entry point that runs inside the user's training loop is wrapped
with :func:`guarded` or calls :func:`report`: a problem is counted by kind,
logged once per kind, and never raised into the caller.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter
from typing import Any, Callable, TypeVar
from . import diagnostics as kinds

logger = logging.getLogger("otel_rl")

_lock = threading.Lock()
_counts: Counter[str] = Counter()
# (api, argument name) pairs already counted by ignored_arguments().
_ignored_seen: set[tuple[str, str]] = set()


def after_fork_in_child() -> None:
    """Renews the lock in a forked child (the runtime's fork walk calls this first)."""
    # A thread of the parent (one polling diagnostics()) may have held the lock
    # at the fork; the child's first count would then wait forever.
    global _lock
    _lock = threading.Lock()

F = TypeVar("F", bound=Callable[..., Any])


def report(kind: str, message: str, *args: Any) -> None:
    """Counts one problem of ``kind``; logs a warning the first time it is seen."""
    with _lock:
        _counts[kind] += 1
        first = _counts[kind] == 1
    if first:
        logger.warning("otel_rl: " + message + " (further '%s' problems are counted, not logged)",
                       *args, kind)


def count(kind: str, n: int = 1) -> None:
    """Counts ``n`` occurrences of ``kind`` without logging (drops reported in summaries)."""
    with _lock:
        _counts[kind] += n


def diagnostics() -> dict[str, int]:
    """Returns a snapshot of every problem and drop counted so far, by kind."""
    with _lock:
        return dict(_counts)


def clear() -> None:
    with _lock:
        _counts.clear()
        _ignored_seen.clear()


def guarded(default: Any = None) -> Callable[[F], F]:
    """Decorator: an exception inside ``fn`` is reported and ``default`` returned."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the point is to swallow
                report(kinds.INTERNAL_ERROR, "internal error in %s: %r", fn.__qualname__, exc)
                return default

        return inner  # type: ignore[return-value]

    return wrap



def ignored_arguments(api: str, kwargs: dict[str, Any]) -> None:
    """Accepts keyword arguments of a peer's signature that otel_rl cannot honour.

    Each ``(api, name)`` pair is counted once as ``ignored_argument`` in
    :func:`diagnostics` and logged the first time, so porting code keeps running
    instead of failing with a ``TypeError`` inside the training loop.
    """
    if not kwargs:
        return
    for name in kwargs:
        key = (api, name)
        with _lock:
            if key in _ignored_seen:
                continue
            _ignored_seen.add(key)
        report(kinds.IGNORED_ARGUMENT, "%s(): keyword argument %r is accepted and ignored", api, name)
