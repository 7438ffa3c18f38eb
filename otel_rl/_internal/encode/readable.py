"""Records and SDK spans: the conversion both ways.

Both the in-process path (the export thread of
:class:`~otel_rl._internal.export.pipeline.Pipeline`) and the exporter process
build the SDK ``ReadableSpan`` of a record (:mod:`..recording.record`) with
:class:`ReadableBuilder`, so the spans that reach an exporter are identical
whichever path produced them. A span made by other instrumentation comes the
other way, into a record, with :func:`record_from_readable`.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from .. import keys
from ..payload import INT64_MAX, INT64_MIN, flatten_attributes
from ..recording import record
from ..recording.record import (ARGS, ATTRIBUTES, CATEGORY, END, EVENTS, FLAGS, IDS, KIND, LINKS, NAME,
                                PARENT_ID, PARENT_REMOTE, SCOPE, SPAN_ID, START, STATUS, STATUS_DESC,
                                THREAD, TRACE_ID, TRACE_STATE)
from ..recording.ids import id_value
from ..recording.privacy import scrub_attributes

_UNSET = Status(StatusCode.UNSET)
_KINDS = {kind.value: kind for kind in SpanKind}
_CODES = {code.value: code for code in StatusCode}
_EMPTY_STATE = TraceState()
_TRACE_FLAGS = {value: TraceFlags(value) for value in (TraceFlags.DEFAULT, TraceFlags.SAMPLED)}


class ExportSpan(ReadableSpan):
    """A ``ReadableSpan`` made by otel_rl's export path, cheaper to build and to read.

    The SDK's ``ReadableSpan`` reads every field through a property, wraps its
    attributes in a new ``MappingProxyType`` and copies its events and links
    into new tuples on every read; the encoders and processors read each span
    several times. These spans keep their fields in slots of the public names
    (already immutable tuples, and an attribute dict nothing downstream
    changes), and are built without keyword processing (:meth:`make`). The
    rest of ``ReadableSpan``'s surface is kept (``get_span_context``,
    ``to_json``, the dropped counts: always 0, limits were applied when the
    record was built), so an application's own processors and exporters take
    them as they take any ``ReadableSpan``.
    """

    __slots__ = ("name", "context", "parent", "resource", "attributes", "events", "links", "kind", "status",
                 "start_time", "end_time", "instrumentation_scope")
    dropped_attributes = 0
    dropped_events = 0
    dropped_links = 0
    instrumentation_info = None

    @classmethod
    def make(cls, name: str, context: SpanContext, parent: SpanContext | None, resource: Resource,
             attributes: dict[str, Any], events: tuple, links: tuple, kind: SpanKind, status: Status,
             start_time: int, end_time: int, scope: InstrumentationScope) -> ExportSpan:
        """A span from its fields (``events`` and ``links`` as tuples)."""
        span = _new(cls)
        span.name = name
        span.context = context
        span.parent = parent
        span.resource = resource
        span.attributes = attributes
        span.events = events
        span.links = links
        span.kind = kind
        span.status = status
        span.start_time = start_time
        span.end_time = end_time
        span.instrumentation_scope = scope
        return span

    def with_attributes(self, extra: dict[str, Any]) -> ExportSpan:
        """A copy with ``extra`` attributes added (spans are never changed once built)."""
        return self.make(self.name, self.context, self.parent, self.resource, {**self.attributes, **extra},
                         self.events, self.links, self.kind, self.status, self.start_time, self.end_time,
                         self.instrumentation_scope)

    def get_span_context(self) -> SpanContext:
        return self.context

    def to_json(self, indent: int | None = 4) -> str:
        return ReadableSpan(self.name, self.context, self.parent, self.resource, self.attributes, self.events,
                            self.links, self.kind, None, self.status, self.start_time, self.end_time,
                            self.instrumentation_scope).to_json(indent)


_new = object.__new__


def record_from_readable(span: ReadableSpan) -> tuple:
    """The record of an SDK span made by other instrumentation."""
    ctx = span.context
    parent = span.parent
    events = [(e.name, dict(e.attributes) if e.attributes else None, e.timestamp) for e in span.events]
    scope = span.instrumentation_scope
    return record.make(
        span.name, ctx.trace_id, ctx.span_id, parent.span_id if parent else 0,
        bool(parent and parent.is_remote), int(ctx.trace_flags),
        ctx.trace_state.to_header() if ctx.trace_state else None, span.start_time, span.end_time,
        span.kind.value, None, None, None, dict(span.attributes or {}), None, events or None,
        record.link_records(span.links) if span.links else None, span.status.status_code.value,
        span.status.description, (scope.name, scope.version) if scope is not None else ("", None), None,
    )


def span_record(span: Any) -> tuple:
    """An SDK span in the record form the Chrome encoder reads beside its attributes: unlike
    :func:`record_from_readable`, no copy of the attributes, and ``START``/``END`` never ``None``."""
    ctx = span.context
    parent = span.parent
    start = span.start_time or 0
    scope = span.instrumentation_scope
    status = span.status
    events = span.events
    links = span.links
    return (span.name, ctx.trace_id, ctx.span_id, parent.span_id if parent is not None else 0,
            parent is not None and parent.is_remote, 0, None, start, span.end_time or start, span.kind.value,
            None, None, None, None, None,
            [(e.name, e.attributes, e.timestamp) for e in events] if events else None,
            [(link.context.trace_id, link.context.span_id) for link in links] if links else None,
            status.status_code.value, status.description,
            (scope.name, scope.version) if scope is not None else ("", None), None)


class ReadableBuilder:
    """Builds ``ReadableSpan`` objects for one resource.

    ``thread_names`` maps the thread idents of records to names; the export
    thread ships the names of each batch's threads with it.
    """

    def __init__(self, resource: Resource, thread_names: dict[int, str] | None = None) -> None:
        self.resource = resource
        self.thread_names = {} if thread_names is None else thread_names
        #: The instrumentation scope of otel_rl's own spans.
        self.own_scope = InstrumentationScope(keys.INSTRUMENTATION_NAME)
        self._scopes: dict[Any, InstrumentationScope] = {}

    def build(self, rec: tuple) -> ExportSpan:
        """The SDK span of ``rec`` (a record without a bundle: see :func:`record.expand`)."""
        return self.span(rec, self.attributes(rec))

    def attributes(self, rec: tuple) -> dict[str, Any]:
        """The flat attributes the SDK span of ``rec`` carries: its baggage ids, thread,
        category, attributes and ``rl.args.*``, content capture and limits applied."""
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
        return attrs

    def span(self, rec: tuple, attrs: dict[str, Any]) -> ExportSpan:
        """The SDK span of ``rec`` with the flat attributes ``attrs`` (:meth:`attributes`,
        perhaps with derived ones added)."""
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
        scope = self.own_scope
        if rec[SCOPE] is not None:
            scope = self._scopes.get(rec[SCOPE])
            if scope is None:
                scope = self._scopes[rec[SCOPE]] = InstrumentationScope(*rec[SCOPE])
        return ExportSpan.make(rec[NAME], SpanContext(trace_id, rec[SPAN_ID], False, flags, state), parent,
                               self.resource, attrs, events, links, _KINDS[rec[KIND]], status, rec[START],
                               rec[END], scope)


def _event_attributes(attrs: Any) -> dict[str, Any] | None:
    if not attrs:
        return None
    out: dict[str, Any] = {}
    flatten_attributes("", attrs, out)
    scrub_attributes(out)
    return out
