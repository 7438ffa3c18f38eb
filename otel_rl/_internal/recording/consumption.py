"""Sessions as the trainer sees them: which session an item names, what versions it saw.

``otel_rl.consume`` and ``otel_rl.annotate`` take what the trainer holds: a
session id, a session record (a dict with ``session_id`` and, when known,
``task_id``, ``policy_versions``, ``trace_id``, ``span_id``), or any object
with such attributes (a sample, a trajectory; ``version`` / ``policy_version``
name a single version). An id is looked up in this process's registry: open
sessions, then recently finalized ones (:meth:`Registry.recent`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .ids import id_value
from .tracking import versions_seen

_NUMBERS = (int, float)


class SessionRef:
    """What is known of one session on the consumer's side."""

    __slots__ = ("session_id", "task_id", "versions", "trace_id", "span_id", "state")

    def __init__(self, session_id: Any, task_id: Any = None, versions: list[Any] | None = None,
                 trace_id: int | None = None, span_id: int | None = None, state: Any = None) -> None:
        self.session_id = session_id
        self.task_id = task_id
        #: The policy versions the session saw, oldest first (empty when unknown).
        self.versions = versions or []
        self.trace_id = trace_id
        self.span_id = span_id
        #: The session's open state in this process, when it is still open here.
        self.state = state


def _field(item: Any, name: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(name)
    return getattr(item, name, None)


def _hex_id(value: Any, bits: int) -> int | None:
    """A trace or span id given as an int or as its hex text; ``None`` otherwise."""
    if type(value) is int and 0 < value < (1 << bits):
        return value
    if isinstance(value, str):
        try:
            number = int(value, 16)
        except ValueError:
            return None
        return number if 0 < number < (1 << bits) else None
    return None


def resolve(item: Any, registry: Any) -> SessionRef | None:
    """The session ``item`` names, or ``None`` when nothing here knows it."""
    if isinstance(item, (str, int)) and not isinstance(item, bool):
        return _from_registry(id_value(item), registry)
    session_id = _field(item, "session_id")
    if session_id is None:
        return None
    session_id = id_value(session_id)
    task_id = _field(item, "task_id")
    known = _from_registry(session_id, registry)
    if known is not None and task_id is not None and known.task_id != id_value(task_id):
        known = None  # another process's session that happens to share the id
    versions = _field(item, "policy_versions")
    if versions is None:
        single = _field(item, "policy_version")
        single = _field(item, "version") if single is None else single
        versions = None if single is None else [single]
    elif not isinstance(versions, (list, tuple)):
        versions = [versions]
    trace_id = _hex_id(_field(item, "trace_id"), 128)
    span_id = _hex_id(_field(item, "span_id"), 64)
    if known is None:
        return SessionRef(session_id, task_id, list(versions or ()), trace_id, span_id)
    # What the item says wins; the registry fills in the rest.
    if versions is not None:
        known.versions = list(versions)
    known.trace_id = trace_id or known.trace_id
    known.span_id = span_id or known.span_id
    if known.task_id is None:
        known.task_id = task_id
    return known


def _from_registry(session_id: Any, registry: Any) -> SessionRef | None:
    if registry is None:
        return None
    state = registry.sessions.get(session_id)
    if state is not None:
        return SessionRef(session_id, state.task_id, state.versions(), state.task.span.trace_id,
                          state.span_id, state)
    recent = registry.recent.get(session_id)
    if recent is not None:
        task_id, trace_id, span_id, version, done = recent
        return SessionRef(session_id, task_id, versions_seen(version, done), trace_id, span_id)
    return None


def is_number(value: Any) -> bool:
    """A version usable in arithmetic (``bool`` is not one)."""
    return isinstance(value, _NUMBERS) and not isinstance(value, bool) and value == value


def staleness(consumer: Any, versions: list[Any]) -> Any:
    """The consumer's version minus the oldest version the session saw; ``None``
    when either is unknown or not a number (versions are then opaque labels)."""
    if not versions or not is_number(consumer) or not all(is_number(v) for v in versions):
        return None
    return consumer - min(versions)
