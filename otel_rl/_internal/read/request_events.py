"""Request events: sglang-omni's ``events_*.jsonl`` (also what ``otel_rl.events`` writes).

One event per line with the fields ``request_id, stage, event_name,
timestamp_ns, run_id, pid, metadata``. An event without a request id is
counted and skipped; one whose name is not a string, whose time is not a
number in range, or whose ids are lists or objects is a malformed line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import keys
from .checks import ID_TYPES, MAX_NS
from .jsonl import LineProblems, json_objects
from .limits import InputLimits

__all__ = ["read_request_events"]

_RID, _STAGE, _NAME, _TS, _RUN, _PID, _META = keys.EVENT_FIELDS


def read_request_events(path: str, limits: InputLimits, problems: LineProblems,
                        add: Callable[[Any, tuple[int, str, str, Any, dict[str, Any]]], None],
                        intern: dict[str, str],
                        on_read: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Reads a request events file.

    Args:
        path: The file (optionally gzipped).
        limits: Bounds on reading it.
        problems: Told of every line that could not be used, and why.
        add: Takes ``(request_id, (timestamp_ns, stage, event_name, pid, metadata))``
            for each event (``stage`` is ``"unknown"`` when the event has none;
            ``metadata`` an empty dict when it has none).
        intern: Shared strings (stages, event names), filled as they are met.
        on_read: Called with the size of each chunk read (for progress bars).

    Returns:
        ``(events added, events skipped for want of a request id)``.
    """
    count = 0
    missing_id = 0
    names = intern
    for lineno, ev in json_objects(path, limits, problems, on_read=on_read):
        rid = ev.get(_RID)
        name = ev.get(_NAME)
        ts = ev.get(_TS)
        if rid is None or rid == "":
            missing_id += 1
            continue
        if not isinstance(name, str) or not (type(ts) is float or type(ts) is int):
            problems.bad_line(path, lineno, "request event without a string event_name and "
                                            "a numeric timestamp_ns")
            continue
        pid = ev.get(_PID)
        if type(rid) not in ID_TYPES or type(pid) not in ID_TYPES:
            problems.bad_line(path, lineno, f"{_RID if type(rid) not in ID_TYPES else _PID} "
                                            "is not a string or number")
            continue
        if not -MAX_NS < ts < MAX_NS:
            problems.bad_line(path, lineno, f"{_TS} is out of range: {ts!r}")
            continue
        metadata = ev.get(_META)
        if type(metadata) is not dict:
            metadata = {}
        stage = ev.get(_STAGE)
        stage = stage if isinstance(stage, str) else "unknown"
        add(rid, (int(ts), names.setdefault(stage, stage), names.setdefault(name, name), pid, metadata))
        count += 1
    return count, missing_id
