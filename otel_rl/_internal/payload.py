"""Turns user payloads (``args``, phase payloads, counters) into safe values.

Tensors and arrays are summarised as ``{type, shape, dtype, device}`` and never
materialised (no ``.tolist()``, no device sync); anything else that JSON or an
OpenTelemetry attribute cannot hold becomes its ``repr``, truncated.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Any

#: Longest string kept (the attribute value length limit; ``privacy.configure`` sets it).
_MAX_STR = 4096
_MAX_ITEMS = 128
_PRIMITIVES = (str, bool, int, float)
_PLAIN = frozenset({str, bool, int, float, type(None)})
#: OpenTelemetry attribute integers are int64; larger ones are kept as their decimal text.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Attribute names by (prefix, key), bounded.
_NAMES: dict[tuple[str, str], str] = {}
_MAX_NAMES = 65_536
#: ``fn(value, name) -> value`` redacting content found by shape in a structured
#: value (installed by ``privacy``; it leaves values alone while capture is on).
_shape_scrub: Any = None


def set_shape_scrub(fn: Any) -> None:
    """Installs the content-by-shape redaction run on structured payload values."""
    global _shape_scrub
    _shape_scrub = fn


def _scrubbed(value: Any, *key: str) -> Any:
    """``value`` after the content-by-shape redaction; a hook that fails keeps nothing
    of the value (it may hold content the hook did not get to redact)."""
    if _shape_scrub is None:
        return value
    try:
        return _shape_scrub(value, *key)
    except Exception:  # noqa: BLE001 - privacy first: the value is withheld, never raised
        return "<redacted: unreadable>"


def set_max_str(limit: int) -> None:
    """Sets the longest string kept in attributes and payloads (``OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT``)."""
    global _MAX_STR
    _MAX_STR = max(0, int(limit))


def max_str() -> int:
    """The longest string kept (:func:`set_max_str`)."""
    return _MAX_STR


def _tensor_summary(value: Any) -> dict[str, Any] | None:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    try:
        # torch.Size and numpy shapes are tuples of ints already.
        shape = list(shape) if isinstance(shape, tuple) else [int(dim) for dim in shape]
    except Exception:  # noqa: BLE001 - an odd shape type is still summarised
        shape = str(shape)
    device = getattr(value, "device", "cpu")
    return {"type": type(value).__name__, "shape": shape, "dtype": _text_of(dtype),
            "device": _text_of(device)}


#: ``str`` of dtypes and devices, which summaries take at the call (torch's
#: ``str(device)`` alone costs about a microsecond); bounded.
_TEXTS: dict[Any, str] = {}


def _text_of(obj: Any) -> str:
    try:
        text = _TEXTS.get(obj)
    except TypeError:  # unhashable
        return safe_str(obj)
    if text is None:
        text = safe_str(obj)
        if len(_TEXTS) < 256:
            _TEXTS[obj] = text
    return text


def utf8_text(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate (undecodable bytes kept by
    ``surrogateescape``: file names, argv, subprocess output) becomes its
    ``\\udcXX`` escape instead of making the encoder refuse the whole line."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def safe_str(value: Any) -> str:
    """``str(value)``, or a placeholder naming its type when ``__str__`` fails."""
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - user objects may do anything in __str__
        return _unprintable(value)
    return text if type(text) is str else _unprintable(value)


def _unprintable(value: Any) -> str:
    try:
        return f"<unprintable {type(value).__qualname__}>"
    except Exception:  # noqa: BLE001 - a metaclass may break even __qualname__
        return "<unprintable>"


class _BoundedRepr(reprlib.Repr):
    """``repr`` with its work bounded (levels, items, characters) and never raising:
    a 100,000-deep structure costs a few levels, not a ``RecursionError``."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxdict = self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = 16
        self.maxdeque = self.maxarray = 16
        self.maxstring = self.maxlong = self.maxother = 512

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            text = repr(x)
        except Exception:  # noqa: BLE001 - RecursionError included
            return _unprintable(x)
        if type(text) is not str:
            return _unprintable(x)
        return text if len(text) <= self.maxother else text[:self.maxother - 3] + "..."


_bounded = _BoundedRepr()


def safe_repr(value: Any) -> str:
    """A bounded ``repr`` of ``value`` that never raises, as valid UTF-8."""
    try:
        text = _bounded.repr(value)
    except Exception:  # noqa: BLE001
        text = _unprintable(value)
    return utf8_text(text[:_MAX_STR])


def _plain_value(value: Any) -> Any:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base.__str__(value) if base is str else base(value)
    return value


def json_safe(value: Any, depth: int = 0) -> Any:
    """A JSON-serialisable version of ``value`` (for session records and files).

    Never raises: text is valid UTF-8, integers fit in int64 (larger ones
    become their decimal text), nesting and sizes are bounded, and an object
    whose ``__repr__`` fails is named by its type.
    """
    if value is None or isinstance(value, _PRIMITIVES):
        if type(value) not in _PRIMITIVES:
            # An enum or other subclass: its plain value (marshal and OTLP take no subclasses).
            try:
                value = _plain_value(value)
            except Exception:  # noqa: BLE001 - a subclass with a broken __str__ / __int__
                return safe_repr(value)
        if isinstance(value, str):
            if len(value) > _MAX_STR:
                # Cut to the limit, the last three characters marking the cut.
                value = value[:_MAX_STR - 3] + "..." if _MAX_STR > 3 else value[:_MAX_STR]
            return utf8_text(value)
        if isinstance(value, float) and value != value:  # NaN is not JSON
            return None
        if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            return str(value)
        return value
    kind = type(value)
    if (kind is list or kind is tuple) and depth < 4:
        # The usual container (a list of ids, a tuple of sizes): no tensor probe.
        return [json_safe(v, depth + 1) for v in value[:_MAX_ITEMS]]
    try:
        summary = _tensor_summary(value)
    except Exception:  # noqa: BLE001 - a shape or dtype property that raises
        summary = None
    if summary is not None:
        if summary["shape"] == [] and summary["device"] == "cpu":
            try:
                return json_safe(value.item(), depth)
            except Exception:  # noqa: BLE001 - no item(), or one that fails: the summary
                pass
        return summary
    if depth >= 4:
        # Too deep to keep as structure: its text, with content inside redacted first.
        return safe_repr(_scrubbed(value))
    try:
        if isinstance(value, Mapping):
            return {_key(k): json_safe(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [json_safe(v, depth + 1) for v in list(value)[:_MAX_ITEMS]]
    except Exception:  # noqa: BLE001 - a container whose iteration raises
        pass
    return safe_repr(value)


def _key(key: Any) -> str:
    return utf8_text(key) if type(key) is str else utf8_text(safe_str(key))


def snapshot(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an ``args`` / payload mapping as it is now, for a span that is
    exported later: a dict the caller reuses or changes records its value at the
    call, and no tensor is kept alive by a span waiting for export.

    Plain values are kept as they are (the common case costs one dict copy);
    anything else becomes its :func:`json_safe` form at once.
    """
    out = dict(values) if type(values) is dict else _mapping_copy(values)
    for value in out.values():
        if type(value) not in _PLAIN:
            _own(out)
            break
    return out


def own_values(values: dict[str, Any]) -> dict[str, Any]:
    """:func:`snapshot` for a dict no one else holds (``**kwargs``): its values
    are made safe in place, with no copy."""
    for value in values.values():
        if type(value) not in _PLAIN:
            _own(values)
            break
    return values


def _own(values: dict[str, Any]) -> None:
    plain = _PLAIN
    for key, value in values.items():
        kind = type(value)
        if kind in plain:
            continue
        if kind is list or kind is tuple:
            # A flat sequence of plain values (ids, sizes): a copy of what the
            # export keeps anyway; the export thread makes it JSON-safe.
            head = value[:_MAX_ITEMS]
            for item in head:
                if type(item) not in plain:
                    break
            else:
                values[key] = head
                continue
        values[key] = json_safe(value)


def _mapping_copy(values: Any) -> dict[str, Any]:
    try:
        return dict(values)
    except Exception:  # noqa: BLE001 - not a mapping at all: kept under one key
        return {"value": values}


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
        if kind is float or kind is bool:
            out[name] = value
            continue
        if kind is int:
            out[name] = value if INT64_MIN <= value <= INT64_MAX else str(value)
            continue
        if isinstance(value, _PRIMITIVES):
            out[name] = value if not isinstance(value, str) or len(value) <= _MAX_STR else value[:_MAX_STR]
            continue
        safe = json_safe(_scrubbed(value, name))
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
