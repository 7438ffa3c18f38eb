"""Span records: the plain-tuple form of a finished span.

A record holds only built-in types, so a batch of them is one ``marshal``
call away from bytes: this is what the export thread ships to the exporter
process. Both the in-process path and the exporter process build the SDK
``ReadableSpan`` from a record with :func:`readable_from_record`, so the spans
that reach an exporter are identical whichever path produced them.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.baggage import _BAGGAGE_KEY
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from . import keys
from .category import normalize_category
from .payload import flatten_attributes, json_safe

_UNSET = Status(StatusCode.UNSET)
_KINDS = {kind.value: kind for kind in SpanKind}
_CODES = {code.value: code for code in StatusCode}
_EMPTY_STATE = TraceState()

# Field positions of a record.
(NAME, TRACE_ID, SPAN_ID, PARENT_ID, PARENT_REMOTE, FLAGS, TRACE_STATE, START, END, KIND, IDS,
 THREAD, THREAD_NAME, CATEGORY, ATTRIBUTES, ARGS, EVENTS, LINKS, STATUS, STATUS_DESC, SCOPE) = range(21)


def id_value(value: Any) -> Any:
    """Baggage values that crossed a process boundary are strings; ids that
    were integers become integers again so attribute types stay stable."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value


def _links(links: Any) -> list[tuple] | None:
    if not links:
        return None
    return [(link.context.trace_id, link.context.span_id, link.context.is_remote,
             int(link.context.trace_flags), dict(link.attributes) if link.attributes else None)
            for link in links]


def record_from_lean(span: Any, thread_name: str) -> tuple:
    """The record of a finished :class:`~otel_rl._internal.spans.LeanSpan`."""
    ids = None
    bag = span.ctx.get(_BAGGAGE_KEY)
    if bag:
        ids = tuple(bag.get(key) for key in keys.BAGGAGE_KEYS)
    state = span.trace_state
    return (
        span.name, span.trace_id, span.span_id, span.parent_id, span.parent_remote, span.flags,
        state.to_header() if state else None, span.start_ns, span.end_ns, span.kind.value, ids,
        span.thread, thread_name,
        None if span.category is None else normalize_category(span.category),
        span.attributes, span.args, span.events, _links(span.links), span.status_code.value,
        span.status_desc,
        None,
    )


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
        span.kind.value, None, None, None, None, dict(span.attributes or {}), None, events or None,
        _links(span.links), span.status.status_code.value, span.status.description,
        (scope.name, scope.version) if scope is not None else ("", None),
    )


def make_marshalable(record: tuple) -> tuple:
    """``record`` with user payloads reduced to JSON-safe values (tensors summarised)."""
    fields = list(record)
    for index in (ATTRIBUTES, ARGS):
        if fields[index]:
            fields[index] = json_safe(fields[index])
    if fields[EVENTS]:
        fields[EVENTS] = [(n, json_safe(a) if a else None, ts) for n, a, ts in fields[EVENTS]]
    if fields[LINKS]:
        fields[LINKS] = [(t, s, r, f, json_safe(a) if a else None) for t, s, r, f, a in fields[LINKS]]
    fields[NAME] = str(fields[NAME])
    return tuple(fields)


class ReadableBuilder:
    """Builds ``ReadableSpan`` objects for one resource."""

    def __init__(self, resource: Resource) -> None:
        self.resource = resource
        self._own_scope = InstrumentationScope(keys.INSTRUMENTATION_NAME)
        self._scopes: dict[Any, InstrumentationScope] = {}

    def build(self, rec: tuple) -> ReadableSpan:
        attrs: dict[str, Any] = {}
        ids = rec[IDS]
        if ids:
            for key, value in zip(keys.BAGGAGE_KEYS, ids):
                if value is not None:
                    attrs[key] = id_value(value)
        if rec[THREAD] is not None:
            attrs[keys.THREAD_ID] = rec[THREAD]
            attrs[keys.THREAD_NAME] = rec[THREAD_NAME]
        if rec[CATEGORY] is not None:
            attrs[keys.CATEGORY] = rec[CATEGORY]
        if rec[ATTRIBUTES]:
            flatten_attributes("", rec[ATTRIBUTES], attrs)
        if rec[ARGS]:
            flatten_attributes(keys.ARGS_PREFIX, rec[ARGS], attrs)
        events = ()
        if rec[EVENTS]:
            events = tuple(Event(name, _event_attributes(ev_attrs), ts) for name, ev_attrs, ts in rec[EVENTS])
        links = ()
        if rec[LINKS]:
            links = tuple(Link(SpanContext(t, s, r, TraceFlags(f)), _event_attributes(a))
                          for t, s, r, f, a in rec[LINKS])
        flags = TraceFlags(rec[FLAGS])
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
    return out
