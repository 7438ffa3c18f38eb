"""Reading ``annotations-r{rank}.jsonl``: sessions consumed by training steps, and annotations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .jsonl import LineProblems, json_objects
from .limits import InputLimits

#: The kinds of line the file holds (``otel_rl.consume``, ``otel_rl.annotate``).
ANNOTATION_KINDS = ("consume", "annotation")


def session_key(line: dict[str, Any]) -> Any:
    """What names the session of a line: its span's id when the line has it (ids repeat across
    rollout processes), else ``(task_id, session_id)``."""
    span_id = line.get("span_id")
    return span_id if span_id is not None else (line.get("task_id"), line.get("session_id"))


def read_annotations(path: str, limits: InputLimits, problems: LineProblems,
                     add: Callable[[dict[str, Any]], None],
                     on_read: Callable[[int], None] | None = None) -> int:
    """Reads an annotations file; returns how many lines it added.

    Args:
        path: The file (optionally gzipped).
        limits: Bounds on reading it.
        problems: Told of every line that could not be used, and why.
        add: Takes each line as written (``kind``, ``task_id``, ``session_id``,
            ``rank``, ``role``, ``ts``, the session span's ``span_id`` when known, and ``step``, ``policy_version``,
            ``staleness``, ``crossed_update`` for a consume, ``values`` for an
            annotation).
        on_read: Called with the size of each chunk read (for progress bars).
    """
    count = 0
    for lineno, rec in json_objects(path, limits, problems, on_read=on_read):
        if rec.get("kind") not in ANNOTATION_KINDS or rec.get("session_id") is None:
            problems.bad_line(path, lineno, "not an annotation (no known 'kind' and 'session_id')")
            continue
        if rec["kind"] == "annotation" and not isinstance(rec.get("values"), dict):
            problems.bad_line(path, lineno, "an annotation without a 'values' object")
            continue
        add(rec)
        count += 1
    return count
