"""What user payloads may put on spans and in files: content capture, the redaction
hook and the attribute value length limit.

All of it runs where records become attributes (the export thread, or the
exporter process), never on the caller's path:

* **content capture** (``OTEL_RL_CAPTURE_CONTENT``, off by default): a string or
  sequence under a content key (:data:`~.keys.CONTENT_KEYS`, the GenAI content
  prefixes) becomes ``"<redacted: N chars>"`` / ``"<redacted: N items>"``;
  numbers and booleans stay. Content is also found by its shape, under any key
  and at any depth (:func:`scrub_shapes`): a chat message (a mapping with a
  ``role``) keeps only its ``role`` and ``type``, and a content key inside a
  nested mapping or list is redacted like one at the top.
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

from .. import diagnostics, guard, keys, payload
from . import record

Redactor = Callable[[str, Any], Any]

_capture_content = False
_redactor: Redactor | None = None
#: Attribute key -> whether it holds content (bounded cache).
_CONTENT: dict[str, bool] = {}
_MAX_CACHED = 65_536
_DROP = object()


#: Fields of a chat message kept when capture is off; everything else in it is content.
_MESSAGE_KEEP = frozenset({"role", "type"})
#: Nesting walked before a container is redacted whole (what cannot be inspected is not kept).
_MAX_DEPTH = 32
#: Items looked at per container; json_safe keeps no more of any container.
_MAX_ITEMS = 128
#: Containers visited per value before the rest is redacted whole (bounds the work).
_MAX_NODES = 10_000
_SCALARS = frozenset({str, int, float, bool, type(None)})


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
        guard.report(diagnostics.REDACTOR_ERROR, "the redactor raised %s on %s (the value is dropped)",
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
        out[key] = (redacted(value) if is_content_key(keys.ARGS_PREFIX + str(key))
                    else scrub_shapes(value))
    return out


def redact_records(records: list[tuple]) -> list[tuple]:
    """``records`` with the hook applied to their payloads (the export thread runs it
    before records are processed or shipped, only while a hook is installed)."""
    fn = _redactor
    if fn is None:
        return records
    out = []
    for rec in records:
        if not record.has_payloads(rec):
            out.append(rec)
            continue
        try:
            out.append(record.map_payloads(rec, lambda args: redact_payload(keys.ARGS_PREFIX, args, fn),
                                           lambda attrs: redact_flat(attrs, fn)))
        except Exception as exc:  # noqa: BLE001 - keep the span, without its payloads
            guard.report(diagnostics.REDACTOR_ERROR, "payloads of a span could not be redacted (dropped): %s",
                         type(exc).__name__)
            out.append(record.map_payloads(rec, _dropped, _dropped))
    return out


def _dropped(_value: Any) -> None:
    return None


# --- content found by shape -------------------------------------------------------------------
def scrub_shapes(value: Any) -> Any:
    """``value`` with content found by its shape redacted, when capture is off.

    Content keys name content at the top of a payload; a chat message list
    under ``conversation`` or a ``text`` field three lists deep is content too.
    Walking mappings, lists and tuples: a mapping with a string ``role`` (a
    chat message) keeps its ``role`` and ``type`` and has every other field
    redacted; a field whose key is a content key (``content``, ``text``,
    ``prompt``...) is redacted wherever it is. Containers nested deeper than
    can be walked are redacted whole. Numbers and booleans always stay.

    Returns ``value`` itself when nothing changed, otherwise a copy (the
    caller's objects are never modified). Never raises: a value that cannot be
    walked is redacted whole.
    """
    if _capture_content or type(value) in _SCALARS:
        return value
    try:
        return _scrub(value, 0, [_MAX_NODES])
    except Exception:  # noqa: BLE001 - a mapping or sequence whose iteration raises
        guard.count(diagnostics.CONTENT_REDACTED_UNREADABLE)
        return keys.REDACTED_ITEMS.format(n="?")


def _shape_hook(value: Any, name: str = "") -> Any:
    """The hook :mod:`.payload` calls on structured values before they become
    attributes or text; a value under a content key is left to :func:`scrub_attributes`,
    which redacts it whole."""
    if _capture_content or type(value) in _SCALARS or (name and is_content_key(name)):
        return value
    return scrub_shapes(value)


def _is_message(value: Mapping[Any, Any]) -> bool:
    role = value.get("role")
    return type(role) is str and len(value) > 1


def _scrub(value: Any, depth: int, budget: list[int]) -> Any:
    if type(value) in _SCALARS:
        return value
    is_mapping = isinstance(value, Mapping)
    if not is_mapping and not isinstance(value, (list, tuple)):
        return value  # tensors, arrays and other objects are summarised, not walked
    budget[0] -= 1
    if depth >= _MAX_DEPTH or budget[0] < 0:
        return redacted(value)
    if is_mapping:
        message = _is_message(value)
        out: dict[Any, Any] = {}
        changed = False
        for index, (key, item) in enumerate(value.items()):
            if index >= _MAX_ITEMS:
                changed = True
                break
            name = key if type(key) is str else str(key)
            if message and name not in _MESSAGE_KEEP:
                new = redacted(item)
            elif name.lower() in keys.CONTENT_KEYS:
                new = redacted(item)
            else:
                new = _scrub(item, depth + 1, budget)
            changed = changed or new is not item
            out[key] = new
        return out if changed else value
    items = value[:_MAX_ITEMS]
    changed: list[Any] | None = None
    scalars = _SCALARS
    for index, item in enumerate(items):
        if type(item) in scalars:  # token ids, rewards: nothing to walk
            continue
        new = _scrub(item, depth + 1, budget)
        if new is not item:
            if changed is None:
                changed = list(items)
            changed[index] = new
    if changed is None:
        if len(items) == len(value):
            return value
        changed = list(items)
    return tuple(changed) if isinstance(value, tuple) else changed


payload.set_shape_scrub(_shape_hook)
