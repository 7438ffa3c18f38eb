"""Attribute values as JSON can hold them, and span attributes as Chrome ``args``.

orjson refuses what OpenTelemetry attributes may hold (bytes, integers beyond
64 bits, lone surrogates, arbitrary objects); these helpers turn such values
into something it writes, and leave every ordinary value as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import keys
from ..payload import safe_str, utf8_text

#: The integers orjson writes as numbers (signed 64-bit low end, unsigned 64-bit high end).
JSON_INT_MIN = -(1 << 63)
JSON_INT_MAX = (1 << 64) - 1

# Module-level copies: read once per attribute of every encoded span.
_INT_MIN = JSON_INT_MIN
_INT_MAX = JSON_INT_MAX
_ARGS_PREFIX = keys.ARGS_PREFIX
_ARGS_PREFIX_LEN = len(_ARGS_PREFIX)


def json_safe_value(value: Any) -> Any:
    """An attribute value orjson can write: sequences become lists, bytes hex text,
    text valid UTF-8 (a lone surrogate escaped)."""
    kind = type(value)
    if kind is str:
        return utf8_text(value)
    if kind is bool or kind is float or value is None:
        return value
    if kind is int:
        return value if _INT_MIN <= value <= _INT_MAX else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, Mapping):
        return {utf8_text(safe_str(k)): json_safe_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe_value(v) for v in value]
    if isinstance(value, int):  # bool subclasses and int enums
        return json_safe_value(int(value))
    return utf8_text(safe_str(value))


def chrome_args(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """A span's or event's attributes as Chrome ``args``.

    The user's own ``args`` appear under their own keys (the ``rl.args.``
    prefix is OpenTelemetry's namespacing, not part of the name people filter
    on in Perfetto), otel_rl's keys as they are.

    Args:
        attributes: The span's or event's attributes (``None`` for none).

    Returns:
        A new dict of JSON-safe values.
    """
    if not attributes:
        return {}
    out = {}
    names = _CHROME_NAMES
    for key, value in attributes.items():
        name = names.get(key)
        if name is None:
            name = _chrome_name(key)
        if name is _DROP:
            continue
        kind = type(value)
        if not (kind is str or kind is float or kind is bool or (
                kind is int and _INT_MIN <= value <= _INT_MAX)):
            value = json_safe_value(value)
        out[name] = value
    return out


# The track already names the thread; repeating it on every slice only makes
# the file bigger, so these keys (after the prefix is stripped) are left out.
_DROP = object()
_DROPPED = frozenset((keys.THREAD_ID, keys.THREAD_NAME))
# attribute key -> its args key (or _DROP): the same few keys recur on every span.
_CHROME_NAMES: dict[str, Any] = {}
_MAX_CHROME_NAMES = 4096


# An attribute named like one of the trace file's own id args keeps its full key (a raw
# attribute gets ``attr.``), so a reader never takes the user's value for an id.
_ID_ARGS = frozenset(keys.TRACE_ARG_NAMES)


def _chrome_name(key: str) -> Any:
    name = key[_ARGS_PREFIX_LEN:] if key.startswith(_ARGS_PREFIX) else key
    if name in _DROPPED:
        name = _DROP
    elif name in _ID_ARGS:
        name = key if key != name else "attr." + key
    if len(_CHROME_NAMES) < _MAX_CHROME_NAMES:
        _CHROME_NAMES[key] = name
    return name


#: What :func:`chrome_args` reads, for its compiled twin (:mod:`.chrome_lines`): the cache of
#: attribute key -> args key, the marker of a dropped key, and the function filling the cache.
ARG_NAMES = _CHROME_NAMES
DROPPED_ARG = _DROP
arg_name = _chrome_name
