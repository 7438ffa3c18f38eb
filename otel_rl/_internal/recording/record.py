"""Span records: the plain-tuple form of a finished span.

A record holds only built-in types, so a batch of them is one ``marshal``
call away from bytes: a span builds its own record when it ends
(:meth:`~otel_rl._internal.recording.spans.LeanSpan.record`), and the export thread
ships batches of them to the exporter process. Both the in-process path and the exporter process build the SDK
``ReadableSpan`` from a record with :func:`readable_from_record`, so the spans
that reach an exporter are identical whichever path produced them.
"""

from __future__ import annotations

from random import getrandbits
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from .. import keys
from ..payload import INT64_MAX, INT64_MIN, flatten_attributes, json_safe
from .privacy import scrub_attributes
from .spans import link_records, new_span_id

_UNSET = Status(StatusCode.UNSET)
_KINDS = {kind.value: kind for kind in SpanKind}
_CODES = {code.value: code for code in StatusCode}
_EMPTY_STATE = TraceState()
_TRACE_FLAGS = {value: TraceFlags(value) for value in (TraceFlags.DEFAULT, TraceFlags.SAMPLED)}

# Field positions of a record. IDS is the baggage dict of the span's context
# (otel_rl's ids are picked from it when the SDK span is built); THREAD is the
# thread ident, whose name the builder looks up in ``thread_names``.
(NAME, TRACE_ID, SPAN_ID, PARENT_ID, PARENT_REMOTE, FLAGS, TRACE_STATE, START, END, KIND, IDS,
 THREAD, CATEGORY, ATTRIBUTES, ARGS, EVENTS, LINKS, STATUS, STATUS_DESC, SCOPE) = range(20)
#: A session's record has one more field: ``None``, or the phases opened with
#: ``mark_<phase>_start`` that ended before it, as ``(session id,
#: ((name, start_ns, end_ns, thread, args, interrupted description or None), ...))``.
#: :func:`expand` turns them into phase records, children of the session.
BUNDLE = 20
_ERROR = StatusCode.ERROR.value


def phase_attributes(phase: str) -> dict[str, Any]:
    """The attributes of a marked phase's record: one shared dict per phase
    name (records are read, never changed)."""
    attrs = _PHASE_ATTRIBUTES.get(phase)
    if attrs is None:
        attrs = {keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: phase}
        if len(_PHASE_ATTRIBUTES) < 4096:
            _PHASE_ATTRIBUTES[phase] = attrs
    return attrs


_PHASE_ATTRIBUTES: dict[str, dict[str, Any]] = {}


def span_count(records: list[tuple]) -> int:
    """How many spans ``records`` hold, bundled phases included."""
    return len(records) + sum(len(rec[BUNDLE][1]) for rec in records if len(rec) > BUNDLE and rec[BUNDLE])


def expand(records: list[tuple]) -> list[tuple]:
    """``records`` with every bundled phase as a record of its own, ahead of its session."""
    out: list[tuple] = []
    for rec in records:
        if len(rec) <= BUNDLE:
            out.append(rec)
            continue
        bundle = rec[BUNDLE]
        if bundle:
            session_id, phases = bundle
            # A phase's baggage: the session's (its task's) plus the session id.
            bag = dict(rec[IDS]) if rec[IDS] else {}
            bag[keys.SESSION_ID] = session_id
            trace_id, parent, flags, state = rec[TRACE_ID], rec[SPAN_ID], rec[FLAGS], rec[TRACE_STATE]
            for name, start, end, thread, args, interrupted in phases:
                if interrupted is None:
                    attrs, code = phase_attributes(name), 0
                else:
                    attrs, code = {**phase_attributes(name), keys.PHASE_INTERRUPTED: True}, _ERROR
                out.append((name, trace_id, getrandbits(64) or new_span_id(), parent, False, flags, state,
                            start, end, 0, bag, thread, None, attrs, args, None, None, code, interrupted,
                            None))
        out.append(rec[:BUNDLE])
    return out


def id_value(value: Any) -> Any:
    """Baggage values that crossed a process boundary are strings; ids that
    were integers become integers again so attribute types stay stable.

    Only ASCII digits count (``"²"`` is a digit to ``str.isdigit`` but not to
    ``int``), and text too long for ``int`` stays text: baggage is untrusted.
    """
    if isinstance(value, str) and value.isdigit() and value.isascii():
        try:
            return int(value)
        except ValueError:  # past sys.get_int_max_str_digits()
            return value
    return value


def record_from_readable(span: ReadableSpan) -> tuple:
    """The record of an SDK span made by other instrumentation."""
    ctx = span.context
    parent = span.parent
    events = [(e.name, dict(e.attributes) if e.attributes else None, e.timestamp) for e in span.events]
    scope = span.instrumentation_scope
    return (
        span.name, ctx.trace_id, ctx.span_id, parent.span_id if parent else 0,
        bool(parent and parent.is_remote), int(ctx.trace_flags),
        ctx.trace_state.to_header() if ctx.trace_state else None, span.start_time, span.end_time,
        span.kind.value, None, None, None, dict(span.attributes or {}), None, events or None,
        link_records(span.links) if span.links else None, span.status.status_code.value,
        span.status.description, (scope.name, scope.version) if scope is not None else ("", None),
    )


def make_marshalable(record: tuple) -> tuple:
    """``record`` with user payloads reduced to JSON-safe values (tensors summarised)."""
    fields = list(record)
    for index in (IDS, ATTRIBUTES, ARGS):
        if fields[index]:
            fields[index] = json_safe(fields[index])
    if fields[EVENTS]:
        fields[EVENTS] = [(n, json_safe(a) if a else None, ts) for n, a, ts in fields[EVENTS]]
    if fields[LINKS]:
        fields[LINKS] = [(t, s, r, f, json_safe(a) if a else None) for t, s, r, f, a in fields[LINKS]]
    if len(fields) > BUNDLE and fields[BUNDLE]:
        session_id, phases = fields[BUNDLE]
        fields[BUNDLE] = (json_safe(session_id), [(n, s, e, t, json_safe(a) if a else None, i)
                                                  for n, s, e, t, a, i in phases])
    fields[NAME] = str(fields[NAME])
    return tuple(fields)


class ReadableBuilder:
    """Builds ``ReadableSpan`` objects for one resource.

    ``thread_names`` maps the thread idents of records to names; the export
    thread ships the names of each batch's threads with it.
    """

    def __init__(self, resource: Resource, thread_names: dict[int, str] | None = None) -> None:
        self.resource = resource
        self.thread_names = {} if thread_names is None else thread_names
        self._own_scope = InstrumentationScope(keys.INSTRUMENTATION_NAME)
        self._scopes: dict[Any, InstrumentationScope] = {}

    def build(self, rec: tuple) -> ReadableSpan:
        attrs: dict[str, Any] = {}
        bag = rec[IDS]
        if bag:
            for key in keys.BAGGAGE_KEYS:
                value = bag.get(key)
                if value is not None:
                    value = id_value(value)
                    kind = type(value)
                    if kind is str or kind is float or kind is bool or (
                            kind is int and INT64_MIN <= value <= INT64_MAX):
                        attrs[key] = value
                    else:
                        # An id of another type, or an integer past int64 (a
                        # uuid.int): the attribute form every exporter can take.
                        flatten_attributes("", {key: value}, attrs)
        thread = rec[THREAD]
        if thread is not None:
            attrs[keys.THREAD_ID] = thread
            attrs[keys.THREAD_NAME] = self.thread_names.get(thread) or f"thread-{thread}"
        if rec[CATEGORY] is not None:
            attrs[keys.CATEGORY] = rec[CATEGORY]
        if rec[ATTRIBUTES]:
            flatten_attributes("", rec[ATTRIBUTES], attrs)
        if rec[ARGS]:
            flatten_attributes(keys.ARGS_PREFIX, rec[ARGS], attrs)
        # Content capture (off by default) on the flat attributes; the length
        # limit was applied by flatten_attributes.
        scrub_attributes(attrs)
        events = ()
        if rec[EVENTS]:
            events = tuple(Event(name, _event_attributes(ev_attrs), ts) for name, ev_attrs, ts in rec[EVENTS])
        links = ()
        if rec[LINKS]:
            links = tuple(Link(SpanContext(t, s, r, TraceFlags(f)), _event_attributes(a))
                          for t, s, r, f, a in rec[LINKS])
        flags = _TRACE_FLAGS.get(rec[FLAGS]) or TraceFlags(rec[FLAGS])
        state = TraceState.from_header([rec[TRACE_STATE]]) if rec[TRACE_STATE] else _EMPTY_STATE
        trace_id = rec[TRACE_ID]
        parent = None
        if rec[PARENT_ID]:
            parent = SpanContext(trace_id, rec[PARENT_ID], rec[PARENT_REMOTE], flags, state)
        code = rec[STATUS]
        status = _UNSET if code == 0 else Status(_CODES[code], rec[STATUS_DESC])
        scope = self._own_scope
        if rec[SCOPE] is not None:
            scope = self._scopes.get(rec[SCOPE])
            if scope is None:
                scope = self._scopes[rec[SCOPE]] = InstrumentationScope(*rec[SCOPE])
        return ReadableSpan(
            name=rec[NAME],
            context=SpanContext(trace_id, rec[SPAN_ID], False, flags, state),
            parent=parent,
            resource=self.resource,
            attributes=attrs,
            events=events,
            links=links,
            kind=_KINDS[rec[KIND]],
            status=status,
            start_time=rec[START],
            end_time=rec[END],
            instrumentation_scope=scope,
        )


def _event_attributes(attrs: Any) -> dict[str, Any] | None:
    if not attrs:
        return None
    out: dict[str, Any] = {}
    flatten_attributes("", attrs, out)
    scrub_attributes(out)
    return out
