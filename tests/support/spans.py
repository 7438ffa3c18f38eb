"""SDK spans for tests: one factory of finished ``ReadableSpan`` objects with explicit
times, ids and parents, and the plain-dict view tests compare with ``==``."""

from __future__ import annotations

import itertools
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from otel_rl._internal import keys

#: Span times are whole microseconds after a realistic epoch start, so Chrome
#: ``ts`` and ``ts + dur`` are exact floats and nesting checks can compare exactly.
T0_NS = 1_700_000_000_000_000_000

#: The thread attributes otel_rl puts on each of its spans, for the main thread.
MAIN_THREAD = {keys.THREAD_ID: 140_000_000_001, keys.THREAD_NAME: "MainThread"}

_UNSET = Status(StatusCode.UNSET)


class SpanFactory:
    """Builds finished ReadableSpans; ids count up from 1 per factory.

    The constructor's arguments are the defaults of every span it builds.
    """

    def __init__(self, resource: Resource | None = None, thread: dict[str, Any] | None = MAIN_THREAD,
                 scope: str | InstrumentationScope | None = "otel_rl", first_id: int = 1) -> None:
        # Factories standing for different processes start apart: real ids never repeat.
        self._ids = itertools.count(first_id)
        self.resource = resource if resource is not None else Resource({})
        self.thread = thread
        self.scope = scope

    def context(self, parent: SpanContext | None = None, *, sampled: bool = True,
                state: TraceState | None = None) -> SpanContext:
        """A new span context, in the parent's trace if there is one."""
        trace_id = parent.trace_id if parent is not None else next(self._ids)
        flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
        return SpanContext(trace_id, next(self._ids), False, flags, state)

    def span(self, name: str, start_us: float = 0, end_us: float = 10,
             parent: ReadableSpan | SpanContext | None = None, *,
             attrs: dict[str, Any] | None = None, resource: Resource | None = None,
             thread: dict[str, Any] | None | type[Ellipsis] = ..., kind: SpanKind = SpanKind.INTERNAL,
             events: tuple[Event, ...] = (), links: tuple[Link, ...] = (), status: Status | None = None,
             context: SpanContext | None = None, sampled: bool = True, state: TraceState | None = None,
             scope: str | InstrumentationScope | None | type[Ellipsis] = ...) -> ReadableSpan:
        """One finished span.

        Args:
            name: Span name.
            start_us: Start, microseconds after :data:`T0_NS` (fractions allowed).
            end_us: End, likewise.
            parent: A span of this factory, or any span context (a remote one too).
            attrs: Attributes, after the thread attributes.
            resource: Instead of the factory's resource.
            thread: Instead of the factory's thread attributes; ``None`` for none.
            kind: Span kind.
            events: SDK events.
            links: SDK links.
            status: Status; UNSET by default.
            context: The span's own context, instead of new ids.
            sampled: The trace flag of new ids.
            state: The trace state of new ids.
            scope: Instrumentation scope name (or scope), instead of the factory's;
                ``None`` for none.
        """
        parent_ctx = parent.context if isinstance(parent, ReadableSpan) else parent
        thread = self.thread if thread is ... else thread
        # Without thread attributes ``attrs`` goes in as given (None, or BoundedAttributes
        # with their dropped count).
        attributes = attrs if not thread else {**thread, **(attrs or {})}
        scope = self.scope if scope is ... else scope
        if isinstance(scope, str):
            scope = InstrumentationScope(scope)
        return ReadableSpan(
            name=name,
            context=context or self.context(parent_ctx, sampled=sampled, state=state),
            parent=parent_ctx,
            resource=resource if resource is not None else self.resource,
            attributes=attributes,
            events=events,
            links=links,
            kind=kind,
            status=status or _UNSET,
            start_time=T0_NS + round(start_us * 1000),
            end_time=T0_NS + round(end_us * 1000),
            instrumentation_scope=scope,
        )


_DEFAULT = SpanFactory()


def make_span(name: str, start_us: float = 0, end_us: float = 10,
              parent: ReadableSpan | SpanContext | None = None, **options: Any) -> ReadableSpan:
    """A span from a module-wide :class:`SpanFactory` (see :meth:`SpanFactory.span`)."""
    return _DEFAULT.span(name, start_us, end_us, parent, **options)


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    """A ReadableSpan as a plain dict (ids in hex, attributes as a dict)."""
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "status": span.status.status_code.name,
        "status_message": span.status.description,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
    }


def by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The span dicts named ``name``."""
    return [s for s in spans if s["name"] == name]


def one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The one span dict named ``name`` (fails naming what there is otherwise)."""
    found = by_name(spans, name)
    assert len(found) == 1, f"expected one span {name!r}, got {len(found)}: {[s['name'] for s in spans]}"
    return found[0]


def without_thread(attributes: dict[str, Any]) -> dict[str, Any]:
    """Attributes minus the per-run thread identity, for exact comparisons."""
    return {k: v for k, v in attributes.items() if not k.startswith("thread.")}
