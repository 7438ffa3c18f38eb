"""The trace file's events as dicts: what the Python writer hands orjson (the compiled line
writer, :mod:`.chrome_lines`, gives the same bytes for the complete events it writes)."""

from __future__ import annotations

from typing import Any

from .. import keys
from .json_values import json_safe_value

__all__ = ["counter_event", "slice_event"]

_DEFAULT_CATEGORY = keys.DEFAULT_CATEGORY


def slice_event(ph: str, name: Any, cat: Any, ts: float, pid: int, tid: int, args: dict[str, Any],
                s: str | None = None, dur: float | None = None) -> dict[str, Any]:
    """A slice's (or instant's) event in the trace file's key order; no ``cat`` for the default
    category (readers take :data:`~..keys.DEFAULT_CATEGORY` where it is missing), so the
    commonest line stays short. The process's rank and role are on its track, not repeated here."""
    event: dict[str, Any] = {"ph": ph}
    if s is not None:
        event["s"] = s
    event["name"] = name
    if cat != _DEFAULT_CATEGORY:
        event["cat"] = cat
    event["ts"] = ts
    if dur is not None:
        event["dur"] = dur
    event["pid"] = pid
    event["tid"] = tid
    event["args"] = args
    return event


def counter_event(name: Any, value: Any, pid: int, ts: float) -> dict[str, Any]:
    """A counter sample (``ph: C``): Perfetto draws the process's track ``<name> value``."""
    return {"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": ts, "args": {"value": json_safe_value(value)}}
