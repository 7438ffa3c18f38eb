"""``otel_rl.stats`` exports (``stats-r{rank}.jsonl``): one tracker's reduced values per line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .jsonl import LineProblems, json_objects
from .limits import InputLimits

__all__ = ["read_stats_exports"]


def read_stats_exports(path: str, limits: InputLimits, problems: LineProblems,
                       add: Callable[[dict[str, Any]], None],
                       on_read: Callable[[int], None] | None = None) -> int:
    """Reads a stats export file; returns how many exports it added.

    Args:
        path: The file (optionally gzipped).
        limits: Bounds on reading it.
        problems: Told of every line that could not be used, and why.
        add: Takes ``{"step", "tracker", "rank", "values"}`` for each line
            (``step`` ``None`` unless it is an integer).
        on_read: Called with the size of each chunk read (for progress bars).
    """
    count = 0
    for lineno, rec in json_objects(path, limits, problems, on_read=on_read):
        if not isinstance(rec.get("values"), dict):
            problems.bad_line(path, lineno, "not a stats export (no 'values' object)")
            continue
        step = rec.get("step")
        if step is not None and type(step) is not int:
            step = None
        add({"step": step, "tracker": rec.get("tracker"), "rank": rec.get("rank"), "values": rec["values"]})
        count += 1
    return count
