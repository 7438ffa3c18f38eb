"""What an asynchronous RL run means: policy versions, weight syncs, consumption, annotations.

A rollout worker generates with the weights it loaded last; the trainer trains
on sessions generated under older weights. These calls put that on the trace:

- :func:`set_policy_version`: the process's current policy version. Every phase
  and session started afterwards records it (``rl.policy.version``), and a
  session's record lists the versions it saw (``policy_versions``).
- :class:`weight_sync`: a scope around publishing (``role="send"``) or loading
  (``role="recv"``) weights; a receive sets the new version when it ends.
- :func:`consume`: the trainer marks the sessions a step trains on: their
  staleness (consumer version minus the oldest version a session saw), links
  from the step's span to each session's span, and a line in
  ``annotations-r{rank}.jsonl`` that joins the step into each session's record
  when the run is read (``otel-rl report``, ``otel-rl convert``).
- :func:`annotate`: values computed after the fact (advantages, rewards,
  logprob mismatch) attached to a session, from any process.
"""

from __future__ import annotations

from time import time_ns
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Link, SpanContext, TraceFlags, get_current_span

from ._internal import diagnostics, guard, keys
from ._internal.payload import json_safe, own_values, safe_repr
from ._internal.recording.consumption import SessionRef, is_number, resolve, staleness
from ._internal.recording.spans import NULL_SCOPE, LeanSpan, get_current
from ._internal.recording.tracking import current_id
from ._internal.state import STATE

_ROLES = ("send", "recv")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def set_policy_version(version: Any) -> None:
    """Sets the process's current policy version.

    On the trainer, the version being trained; on a rollout worker, the
    weights it loaded. Kept across ``configure()`` calls; read when a session,
    a phase or a step starts. Integers make staleness computable; any other
    value is kept as an opaque label.

    Args:
        version: The version (``None`` clears it).
    """
    STATE.policy_version = version


def get_policy_version() -> Any:
    """The process's current policy version (``None`` when none was set)."""
    return STATE.policy_version


class weight_sync:  # noqa: N801 - used like a function, as trace_scope
    """``with weight_sync(version, role="recv"):`` times one weight sync.

    A span named ``weight_sync`` (``rl.span.kind = weight_sync``, category
    ``comm``) with ``rl.policy.version`` and ``rl.weight_sync.role``. Like any
    span it joins the trace of a context propagated to it, so the trainer's
    send and each worker's receive line up across processes. A receive sets
    the process's policy version to ``version`` when it ends without an
    exception (also when tracing is off). Also an async context manager.

    Args:
        version: The policy version synced.
        role: ``"send"`` (publishing weights) or ``"recv"`` (loading them).
    """

    __slots__ = ("version", "role", "_span")

    def __init__(self, version: Any, role: str = "recv") -> None:
        self.version = version
        self.role = role
        self._span: Any = None

    def __enter__(self) -> LeanSpan | None:
        if self.role not in _ROLES:
            guard.report(diagnostics.UNKNOWN_WEIGHT_SYNC_ROLE, "weight_sync role %r is not 'send' or 'recv'; "
                         "recorded as given", self.role)
        if not STATE.scopes_on:
            self._span = NULL_SCOPE
            return None
        try:
            span = self._span = LeanSpan(STATE.pipeline, "weight_sync", get_current(), category="comm", attributes={
                keys.SPAN_KIND: keys.KIND_WEIGHT_SYNC, keys.POLICY_VERSION: _attribute(self.version),
                keys.WEIGHT_SYNC_ROLE: str(self.role)})
            return span.__enter__()
        except Exception as exc:  # noqa: BLE001 - never into the training loop
            guard.report(diagnostics.INTERNAL_ERROR, "internal error starting weight_sync: %r", exc)
            self._span = NULL_SCOPE
            return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        span, self._span = self._span, None
        if span is not None:
            span.__exit__(exc_type, exc, tb)
        if exc_type is None and self.role == "recv":
            STATE.policy_version = self.version

    async def __aenter__(self) -> LeanSpan | None:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)


@guard.guarded(default=0)
def consume(sessions: Any, step: Any = None) -> int:
    """Marks sessions as consumed by the current training step.

    Call it on the trainer with what it trains on. For each session it
    records the step and the staleness (this process's policy version minus
    the oldest version the session saw; only when both are numbers): on the
    session's span when the session is still open in this process, as a link
    from the current span (the step's) to the session's span, and as a line in
    ``annotations-r{rank}.jsonl`` that the report and the converter join into
    the session's record. The exporter counts consumed sessions
    (``rl.sessions.consumed``, by whether they saw a weight update) and their
    staleness (``rl.session.staleness``).

    Args:
        sessions: Session ids, session records (dicts with ``session_id`` and,
            when known, ``task_id``, ``policy_versions`` or ``version``,
            ``trace_id``, ``span_id``), or objects with those attributes; one
            item or an iterable of them. An id this process does not know and
            an item without ``session_id`` are counted
            (``unknown_consumed_session``) and skipped.
        step: The consuming step; the current one (``step_scope`` /
            ``set_step``) by default.

    Returns:
        How many sessions were recorded as consumed.
    """
    if not STATE.sessions_on:
        return 0
    if step is None:
        step = current_id(keys.STEP)
    version = STATE.policy_version
    items = _items(sessions)
    registry = STATE.registry
    links: list[Link] = []
    lines: list[dict[str, Any]] = []
    for item in items:
        ref = resolve(item, registry)
        if ref is None:
            guard.report(diagnostics.UNKNOWN_CONSUMED_SESSION, "consume: %s names no session known here; ignored",
                         safe_repr(item))
            continue
        stale = staleness(version, ref.versions)
        if stale is None and version is not None and ref.versions:
            guard.count(diagnostics.VERSION_NOT_NUMERIC)  # opaque labels: no arithmetic on them
        crossed = len(set(map(_hashable, ref.versions))) > 1
        marks = {keys.SESSION_CONSUMED_STEP: _attribute(step)}
        if stale is not None:
            marks[keys.SESSION_STALENESS] = stale
        if ref.state is not None:
            ref.state.extra = {**(ref.state.extra or {}), **marks}
        if ref.trace_id and ref.span_id:
            links.append(Link(SpanContext(ref.trace_id, ref.span_id, True, _SAMPLED), {
                keys.SESSION_ID: _attribute(ref.session_id), keys.TASK_ID: _attribute(ref.task_id),
                keys.SESSION_CROSSED_UPDATE: crossed, **marks}))
        lines.append(_line("consume", ref, {"step": json_safe(step), "policy_version": json_safe(version),
                                            "staleness": stale, "crossed_update": crossed}))
    if lines:
        _link_from_current("consume", links, {keys.POLICY_VERSION: _attribute(version), keys.STEP: _attribute(step)})
        _write(lines)
    return len(lines)


@guard.guarded(default=False)
def annotate(session_id: Any, task_id: Any = None, **values: Any) -> bool:
    """Attaches values computed after the fact to a session, from any process.

    Typically the trainer, once it has scored a group: ``annotate(sid,
    advantage=0.7, logprob_mismatch=0.02)``; a vector of rewards as
    ``reward=[...]`` or ``**{"reward.format": 1.0}``. Appended to
    ``annotations-r{rank}.jsonl`` (never rewriting a file) and joined into the
    session's record when the run is read (``annotations``); over OTLP, a
    zero-length ``annotation`` span linked to the session's span carries
    ``rl.annotation.<name>`` attributes.

    Args:
        session_id: The session (an id, or a record or object as for :func:`consume`).
        task_id: The session's task, when this process does not know the session
            (annotations are keyed by task and session id).
        **values: The values, by name.

    Returns:
        Whether the annotation was recorded (an unknown session without a
        ``task_id`` is counted as ``unknown_annotated_session`` and skipped).
    """
    if not STATE.sessions_on:
        return False
    ref = resolve(session_id, STATE.registry)
    if ref is None:
        if task_id is None:
            guard.report(diagnostics.UNKNOWN_ANNOTATED_SESSION, "annotate: %s names no session known here and "
                         "no task_id was given; ignored", safe_repr(session_id))
            return False
        ref = SessionRef(session_id, task_id)
    elif task_id is not None and ref.task_id is None:
        ref.task_id = task_id
    values = own_values(values) if values else {}
    links = []
    if ref.trace_id and ref.span_id:
        links.append(Link(SpanContext(ref.trace_id, ref.span_id, True, _SAMPLED)))
    attributes: dict[str, Any] = {keys.SPAN_KIND: keys.KIND_ANNOTATION, keys.SESSION_ID: _attribute(ref.session_id),
                                  keys.TASK_ID: _attribute(ref.task_id)}
    for name, value in values.items():
        attributes[keys.ANNOTATION_PREFIX + str(name)] = value
    span = LeanSpan(STATE.pipeline, "annotation", get_current(), links=links or None, attributes=attributes)
    span.end(span.start_ns)
    _write([_line("annotation", ref, {"values": json_safe(values)})])
    return True


def _items(sessions: Any) -> list[Any]:
    """``sessions`` as a list of items: one id, record or object, or an iterable of them."""
    if isinstance(sessions, (str, bytes, int, Mapping)) or hasattr(sessions, "session_id"):
        return [sessions]
    try:
        return list(sessions)
    except TypeError:
        return [sessions]


def _line(kind: str, ref: SessionRef, fields: dict[str, Any]) -> dict[str, Any]:
    settings = STATE.settings
    line = {"kind": kind, "task_id": json_safe(ref.task_id), "session_id": json_safe(ref.session_id),
            "rank": settings.rank, "role": settings.role, "ts": time_ns() / 1e9, **fields}
    if ref.span_id is not None:
        # The session span's id, as its record writes it: ids alone repeat across rollout processes.
        line["span_id"] = f"{ref.span_id:016x}"
    return line


def _write(lines: list[dict[str, Any]]) -> None:
    log = STATE.components.annotations if STATE.components is not None else None
    if log is None:
        return
    for line in lines:
        log.add(line)
    log.flush()


def _link_from_current(name: str, links: list[Link], attributes: dict[str, Any]) -> None:
    """Links the current span to ``links``; with none recording, a zero-length span carries them."""
    if not links:
        return
    current = get_current_span()
    if isinstance(current, LeanSpan) and current.is_recording():
        for link in links:
            current.add_link(link.context, link.attributes)
        return
    span = LeanSpan(STATE.pipeline, name, get_current(), links=links, attributes=attributes)
    span.end(span.start_ns)


def _attribute(value: Any) -> Any:
    """A version, step or id as an attribute value: numbers and text as they are, anything else as text."""
    if value is None or isinstance(value, (bool, str)) or is_number(value):
        return value
    return str(value)


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)
