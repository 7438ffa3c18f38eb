"""One line of an events file: its fields, and values made fit for JSON.

Metadata keeps small scalars as they are; tensors and arrays are summarised
(never materialised), containers walked to a bounded depth and size, anything
else kept as its ``repr``.
"""

from __future__ import annotations

import dataclasses
import numbers
import time
from collections.abc import Mapping
from typing import Any

from .. import diagnostics, guard
from ..payload import json_safe


@dataclasses.dataclass(frozen=True)
class RequestEvent:
    """One request event: the fields of one line of an events file, in file order."""

    request_id: Any
    stage: str
    event_name: str
    timestamp_ns: int
    run_id: str | None = None
    pid: int | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The event as the JSON object of its line (the metadata copied)."""
        return {"request_id": self.request_id, "stage": self.stage, "event_name": self.event_name,
                "timestamp_ns": self.timestamp_ns, "run_id": self.run_id, "pid": self.pid,
                "metadata": dict(self.metadata)}


# --- metadata ------------------------------------------------------------------------------------
#: Types a value of the file may keep (strings cut, NaN as null, by ``json_safe``).
SCALARS = (str, int, float, bool)
_MAX_DEPTH = 4
_MAX_ITEMS = 128


def json_default(obj: Any) -> Any:
    """The JSON form of a value JSON cannot hold: tensors summarised, never materialised.

    A tensor or array (anything with ``shape`` and ``dtype``) becomes
    ``{"__tensor_summary__": true, "type", "shape", "dtype", "device"}``; a
    0-d one on the CPU (or without a device, as numpy scalars) becomes its
    plain value, while a 0-d GPU tensor stays a summary (its value would cost a
    device sync). Anything else becomes its ``repr``.
    """
    shape = getattr(obj, "shape", None)
    dtype = getattr(obj, "dtype", None)
    if shape is not None and dtype is not None:
        device = getattr(obj, "device", None)
        try:
            zero_d = len(shape) == 0
        except TypeError:  # a shape without a length: summarised below
            zero_d = False
        if zero_d and hasattr(obj, "item") and (device is None or str(device).startswith("cpu")):
            try:
                return obj.item()
            except Exception:  # noqa: BLE001 - summarised instead
                pass
        try:
            dims: Any = [int(d) for d in shape]
        except Exception:  # noqa: BLE001 - an odd shape is still summarised
            dims = repr(shape)
        return {"__tensor_summary__": True, "type": type(obj).__name__, "shape": dims,
                "dtype": str(dtype), "device": None if device is None else str(device)}
    return repr(obj)



def safe_value(value: Any, depth: int = 0) -> Any:
    """``value`` as the events file holds it: scalars kept (long strings cut, NaN as
    null), containers walked, anything else through :func:`json_default`."""
    kind = type(value)
    if value is None or kind is int or kind is bool:
        return value
    if isinstance(value, SCALARS):
        return json_safe(value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        out = json_default(value)
        return out if isinstance(out, dict) else safe_value(out, depth + 1)
    if depth < _MAX_DEPTH:
        if isinstance(value, Mapping):
            return {str(k): safe_value(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [safe_value(v, depth + 1) for v in list(value)[:_MAX_ITEMS]]
    return json_safe(repr(value))


def safe_metadata(values: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of one line: every key kept, each value through :func:`safe_value`."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        kind = type(value)
        out[key if type(key) is str else str(key)] = (
            value if value is None or kind is int or kind is bool else safe_value(value))
    return out


def timestamp_ns_of(value: Any) -> int:
    """A given ``timestamp_ns`` as an int; a value that is not a number is reported
    and the event takes the current time."""
    if type(value) is int:
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            return int(value)
        except (ValueError, OverflowError):
            pass
    guard.report(diagnostics.EVENT_BAD_TIMESTAMP, "request event timestamp_ns %r is not a number of "
                 "nanoseconds; the current time is used", value)
    return time.time_ns()

