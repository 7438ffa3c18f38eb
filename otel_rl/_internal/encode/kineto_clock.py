"""Putting a torch profiler (Kineto) trace on the wall clock that spans use."""

from __future__ import annotations

from typing import Any


def kineto_shift_us(events: list[Any], base_ns: Any) -> float:
    """Microseconds to add to a torch profiler (Kineto) trace's timestamps to
    put them on the wall clock.

    Kineto's ``baseTimeNanoseconds`` is the wall clock at boot and, in torch
    2.x, its event timestamps count from it: far below the base itself, which
    epoch timestamps never are. (Not "below 1e12": machines run for more than
    11 days.) Traces already on the wall clock need no shift.

    Args:
        events: The trace's ``traceEvents``.
        base_ns: The trace's ``baseTimeNanoseconds`` (anything else: no shift).

    Returns:
        The shift in microseconds, 0.0 when none is needed.
    """
    if not isinstance(base_ns, (int, float)) or base_ns <= 0:
        return 0.0
    first = next((e.get("ts") for e in events
                  if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))), None)
    if first is not None and first < base_ns / 2000:
        return base_ns / 1000
    return 0.0
