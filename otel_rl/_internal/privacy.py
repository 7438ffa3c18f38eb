"""What user payloads may put on spans and in files: content capture, the redaction
hook and the attribute value length limit.

All of it runs where records become attributes (the export thread, or the
exporter process), never on the caller's path:

* **content capture** (``OTEL_RL_CAPTURE_CONTENT``, off by default): a string or
  sequence under a content key (:data:`~.keys.CONTENT_KEYS`, the GenAI content
  prefixes) becomes ``"<redacted: N chars>"`` / ``"<redacted: N items>"``;
  numbers and booleans stay.
* **the redaction hook** (:func:`set_redactor`): ``fn(key, value) -> value`` on
  every user payload value (``rl.args.*``), before content capture; ``None``
  drops the value; an exception drops it and is counted (``redactor_error``).
* **the length limit** (``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`` /
  ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``, 4096 when unset): every string
  attribute value of otel_rl's spans, and every payload string in its files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import guard, keys, payload

Redactor = Callable[[str, Any], Any]

_capture_content = False
_redactor: Redactor | None = None
#: Attribute key -> whether it holds content (bounded cache).
_CONTENT: dict[str, bool] = {}
_MAX_CACHED = 65_536
_DROP = object()


def configure(settings: Any) -> None:
    """Applies the settings of one process (``configure()`` and the exporter process)."""
    global _capture_content
    _capture_content = bool(settings.capture_content)
    payload.set_max_str(settings.attribute_value_length_limit)


def capture_content() -> bool:
    return _capture_content


def set_redactor(fn: Redactor | None) -> None:
    """Installs ``fn(key, value) -> value`` for user payload values; ``None`` removes it.

    Raises:
        TypeError: ``fn`` is neither callable nor ``None``.
    """
    global _redactor
    if fn is not None and not callable(fn):
        raise TypeError(f"a redactor must be callable or None, got {type(fn).__name__}")
    _redactor = fn


def redactor() -> Redactor | None:
    return _redactor


def is_content_key(key: str) -> bool:
    """Whether the attribute ``key`` names prompt / completion content."""
    found = _CONTENT.get(key)
    if found is None:
        rest = key[len(keys.ARGS_PREFIX):] if key.startswith(keys.ARGS_PREFIX) else None
        if rest is None:
            found = key.startswith(keys.GEN_AI_CONTENT_PREFIXES)
        else:
            found = rest.startswith(keys.GEN_AI_CONTENT_PREFIXES) or any(
                part.lower() in keys.CONTENT_KEYS for part in rest.split("."))
        if len(_CONTENT) < _MAX_CACHED:
            _CONTENT[key] = found
    return found


def redacted(value: Any) -> Any:
    """The summary that replaces a content value; numbers, booleans and
    already redacted strings are returned unchanged."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        if value.startswith(keys.REDACTED_PREFIX):
            return value
        return keys.REDACTED_TEXT.format(n=len(value))
    if isinstance(value, Mapping):
        return {k: redacted(v) for k, v in value.items()}
    try:
        return keys.REDACTED_ITEMS.format(n=len(value))
    except TypeError:
        return keys.REDACTED_TEXT.format(n=len(repr(value)))


def scrub_attributes(attrs: dict[str, Any]) -> None:
    """Redacts content values of the flat attribute dict ``attrs`` in place when
    capture is off (the hook has already run on the record)."""
    if _capture_content or not attrs:
        return
    for key, value in attrs.items():
        if type(value) is not str and type(value) is not tuple:
            continue
        if is_content_key(key) and not (type(value) is str and value.startswith(keys.REDACTED_PREFIX)):
            attrs[key] = redacted(value)


def _call(fn: Redactor, key: str, value: Any) -> Any:
    try:
        return fn(key, value)
    except Exception as exc:  # noqa: BLE001 - a broken hook drops the value, never raises
        # The exception's type only: its message may quote the value.
        guard.report("redactor_error", "the redactor raised %s on %s (the value is dropped)",
                     type(exc).__name__, key)
        return _DROP


def redact_payload(prefix: str, values: Mapping[str, Any] | None, fn: Redactor | None = None,
                   depth: int = 0) -> Mapping[str, Any] | None:
    """``values`` with the hook applied to every leaf as ``fn(prefix + dotted key, value)``
    (nested mappings are walked); values it maps to ``None`` or raises on are left out."""
    fn = _redactor if fn is None else fn
    if fn is None or not values or not isinstance(values, Mapping):
        return values
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = prefix + str(key)
        if isinstance(value, Mapping) and depth < 4:
            value = redact_payload(name + ".", value, fn, depth + 1)
        else:
            value = _call(fn, name, value)
        if value is not None and value is not _DROP:
            out[key] = value
    return out


def redact_flat(attrs: Mapping[str, Any] | None, fn: Redactor | None = None) -> Mapping[str, Any] | None:
    """The hook on the user payload keys (``rl.args.*``) of flat attributes (span events)."""
    fn = _redactor if fn is None else fn
    if fn is None or not attrs:
        return attrs
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(key, str) and key.startswith(keys.ARGS_PREFIX):
            value = _call(fn, key, value)
            if value is None or value is _DROP:
                continue
        out[key] = value
    return out


def metadata(values: dict[str, Any]) -> dict[str, Any]:
    """Request-event metadata for the events file: the hook, then content capture."""
    fn = _redactor
    if fn is not None:
        values = dict(redact_payload(keys.ARGS_PREFIX, values, fn) or {})
    if _capture_content:
        return values
    out: dict[str, Any] = {}
    for key, value in values.items():
        out[key] = redacted(value) if is_content_key(keys.ARGS_PREFIX + str(key)) else value
    return out


def redact_records(records: list[tuple]) -> list[tuple]:
    """``records`` with the hook applied to their payloads (the export thread runs it
    before records are processed or shipped, only while a hook is installed)."""
    from .records import ARGS, BUNDLE, EVENTS

    fn = _redactor
    if fn is None:
        return records
    out = []
    for rec in records:
        if not rec[ARGS] and not rec[EVENTS] and not (len(rec) > BUNDLE and rec[BUNDLE]):
            out.append(rec)
            continue
        try:
            out.append(_redact_record(rec, fn))
        except Exception as exc:  # noqa: BLE001 - keep the span, without its payloads
            guard.report("redactor_error", "payloads of a span could not be redacted (dropped): %s",
                         type(exc).__name__)
            fields = list(rec)
            fields[ARGS] = None
            fields[EVENTS] = [(name, None, ts) for name, _attrs, ts in rec[EVENTS] or ()] or None
            if len(rec) > BUNDLE and rec[BUNDLE]:
                session_id, phases = rec[BUNDLE]
                fields[BUNDLE] = (session_id, [(n, s, e, t, None, i) for n, s, e, t, _a, i in phases])
            out.append(tuple(fields))
    return out


def _redact_record(rec: tuple, fn: Redactor) -> tuple:
    from .records import ARGS, BUNDLE, EVENTS

    fields = list(rec)
    if rec[ARGS]:
        fields[ARGS] = redact_payload(keys.ARGS_PREFIX, rec[ARGS], fn)
    if rec[EVENTS]:
        fields[EVENTS] = [(name, redact_flat(attrs, fn), ts) for name, attrs, ts in rec[EVENTS]]
    if len(rec) > BUNDLE and rec[BUNDLE]:
        session_id, phases = rec[BUNDLE]
        fields[BUNDLE] = (session_id, [(n, s, e, t, redact_payload(keys.ARGS_PREFIX, a, fn) if a else a, i)
                                       for n, s, e, t, a, i in phases])
    return tuple(fields)
