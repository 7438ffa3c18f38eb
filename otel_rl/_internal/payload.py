"""Turns user payloads (``args``, phase payloads, counters) into safe values.

Tensors and arrays are summarised as ``{type, shape, dtype, device}`` and never
materialised (no ``.tolist()``, no device sync); anything else that JSON or an
OpenTelemetry attribute cannot hold becomes its ``repr``, truncated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Longest string kept (the attribute value length limit; ``privacy.configure`` sets it).
_MAX_STR = 4096
_MAX_ITEMS = 128
_PRIMITIVES = (str, bool, int, float)
#: Attribute names by (prefix, key), bounded.
_NAMES: dict[tuple[str, str], str] = {}
_MAX_NAMES = 65_536


def set_max_str(limit: int) -> None:
    """Sets the longest string kept in attributes and payloads (``OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT``)."""
    global _MAX_STR
    _MAX_STR = max(0, int(limit))


def _tensor_summary(value: Any) -> dict[str, Any] | None:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    try:
        shape = [int(dim) for dim in shape]
    except Exception:  # noqa: BLE001 - an odd shape type is still summarised
        shape = str(shape)
    device = getattr(value, "device", "cpu")
    return {"type": type(value).__name__, "shape": shape, "dtype": str(dtype), "device": str(device)}


def _plain_value(value: Any) -> Any:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base.__str__(value) if base is str else base(value)
    return value


def json_safe(value: Any, depth: int = 0) -> Any:
    """A JSON-serialisable version of ``value`` (for session records and files)."""
    if value is None or isinstance(value, _PRIMITIVES):
        if type(value) not in _PRIMITIVES:
            # An enum or other subclass: its plain value (marshal and OTLP take no subclasses).
            value = _plain_value(value)
        if isinstance(value, str) and len(value) > _MAX_STR:
            # Cut to the limit, the last three characters marking the cut.
            return value[:_MAX_STR - 3] + "..." if _MAX_STR > 3 else value[:_MAX_STR]
        if isinstance(value, float) and value != value:  # NaN is not JSON
            return None
        return value
    summary = _tensor_summary(value)
    if summary is not None:
        if summary["shape"] == [] and hasattr(value, "item") and summary["device"] == "cpu":
            try:
                return json_safe(value.item(), depth)
            except Exception:  # noqa: BLE001
                pass
        return summary
    if depth >= 4:
        return repr(value)[:_MAX_STR]
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, depth + 1) for v in list(value)[:_MAX_ITEMS]]
    return repr(value)[:_MAX_STR]


def flatten_attributes(prefix: str, values: Mapping[str, Any] | None, out: dict[str, Any]) -> None:
    """Adds ``values`` to ``out`` as OpenTelemetry attributes under ``prefix``.

    Nested mappings become dotted keys; sequences of one primitive type stay
    arrays; anything else is stored as its JSON-safe string form.
    """
    if not values:
        return
    names = _NAMES
    for key, value in values.items():
        if value is None:
            continue
        if type(key) is str:
            # The same few keys recur on every span of a run: join each once.
            name = names.get((prefix, key))
            if name is None:
                name = prefix + key
                if len(names) < _MAX_NAMES:
                    names[(prefix, key)] = name
        else:
            name = prefix + str(key)
        kind = type(value)
        if kind is int or kind is float or kind is bool:
            out[name] = value
            continue
        if isinstance(value, _PRIMITIVES):
            out[name] = value if not isinstance(value, str) or len(value) <= _MAX_STR else value[:_MAX_STR]
            continue
        safe = json_safe(value)
        if isinstance(safe, Mapping):
            flatten_attributes(name + ".", safe, out)
        elif isinstance(safe, list):
            kinds = {type(v) for v in safe}
            if len(kinds) == 1 and kinds <= {str, bool, int, float}:
                out[name] = tuple(safe)
            elif not safe:
                out[name] = ()
            else:
                text = str(safe)
                out[name] = text if len(text) <= _MAX_STR else text[:_MAX_STR]
        elif safe is not None:
            out[name] = safe
