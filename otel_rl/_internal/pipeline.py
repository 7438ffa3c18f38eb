"""The background half of a span's life: queue, conversion, processors.

Finished :class:`~otel_rl._internal.spans.LeanSpan` objects are appended to a
deque (one atomic append on the caller's thread). A single daemon thread drains
it every ``export_interval_ms`` (sooner when it fills), turns each span into an
SDK ``ReadableSpan`` (baggage ids, thread, category and args become
attributes) and hands it to ``sink`` - the session processor, which wraps the
TracerProvider's own processors. Processors that batch in place (the file
exporter) are flushed at the end of every drain.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.baggage import _BAGGAGE_KEY
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from . import guard, keys
from .category import normalize_category
from .payload import flatten_attributes
from .spans import LeanSpan

_UNSET = Status(StatusCode.UNSET)


def id_value(value: Any) -> Any:
    """Baggage values that crossed a process boundary are strings; ids that
    were integers become integers again so attribute types stay stable."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value


class Pipeline:
    """Owns the span queue and the export thread of one configured process."""

    def __init__(
        self,
        sink: SpanProcessor,
        resource: Resource,
        sampler: Sampler,
        *,
        max_queue_size: int,
        export_interval_ms: int,
        batch_hooks: Sequence[Callable[[], None]] = (),
    ) -> None:
        self.sink = sink
        self.resource = resource
        self.scope = InstrumentationScope(keys.INSTRUMENTATION_NAME)
        self._sampler = sampler
        self._default_sampling = _is_default_sampler(sampler)
        self._max = max_queue_size
        self._wake_at = max(1, min(max_queue_size // 4, 8192))
        self._interval = export_interval_ms / 1000.0
        self._batch_hooks = tuple(batch_hooks)
        self._queue: collections.deque[LeanSpan] = collections.deque()
        self._thread_names: dict[int, str] = {}
        self._closed = False
        self._init_thread_state()
        if hasattr(os, "register_at_fork"):
            # A weak reference: fork hooks cannot be unregistered, and a shut
            # down pipeline must neither be kept alive nor restarted by them.
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (m := ref()) and m())

    # --- thread management --------------------------------------------------------
    def _init_thread_state(self) -> None:
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._flush_requested = 0
        self._flush_done = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="otel_rl-export", daemon=True)
        self._thread.start()

    def _after_fork_in_child(self) -> None:
        # The parent's queued spans belong to the parent: a child that exported
        # them would duplicate them. The export thread did not survive the fork.
        if self._closed:
            return
        self._queue.clear()
        self._init_thread_state()

    # --- caller side --------------------------------------------------------------
    def enqueue(self, span: LeanSpan) -> None:
        queue = self._queue
        if len(queue) >= self._max:
            guard.count("spans_dropped_queue_full")
            return
        queue.append(span)
        if len(queue) == self._wake_at:
            self._wake.set()

    def sample_root(self, ctx: Any, trace_id: int, name: str, kind: SpanKind, attributes: Any) -> int:
        if self._default_sampling:
            return 1
        try:
            result = self._sampler.should_sample(ctx, trace_id, name, kind, attributes)
        except Exception:  # noqa: BLE001 - a broken sampler must not break training
            guard.report("sampler_error", "sampler raised; span kept")
            return 1
        return 1 if result.decision is Decision.RECORD_AND_SAMPLE else 0

    def sample_child(self, parent: SpanContext) -> int:
        # Parent-based: a child follows its (remote or foreign) parent's decision.
        return 1 if parent.trace_flags.sampled else 0

    def flush(self, timeout_s: float) -> bool:
        """Processes every span queued before the call; ``False`` on timeout."""
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            self._drain()
            return True
        with self._cond:
            self._flush_requested += 1
            target = self._flush_requested
        self._wake.set()
        with self._cond:
            return self._cond.wait_for(lambda: self._flush_done >= target, timeout_s)

    def shutdown(self, timeout_s: float) -> bool:
        ok = self.flush(timeout_s)
        self._closed = True
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=max(0.0, timeout_s))
        return ok

    @property
    def queued(self) -> int:
        return len(self._queue)

    # --- export thread --------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._interval)
            self._wake.clear()
            with self._cond:
                requested = self._flush_requested
            self._drain()
            with self._cond:
                self._flush_done = max(self._flush_done, requested)
                self._cond.notify_all()

    def _drain(self) -> None:
        queue = self._queue
        sink = self.sink
        convert = self.to_readable
        while queue:
            try:
                span = queue.popleft()
            except IndexError:
                break
            try:
                sink.on_end(convert(span))
            except Exception as exc:  # noqa: BLE001
                guard.report("export_error", "a span could not be processed: %r", exc)
        for hook in self._batch_hooks:
            try:
                hook()
            except Exception as exc:  # noqa: BLE001
                guard.report("export_error", "an exporter failed: %r", exc)

    def thread_name(self, ident: int) -> str:
        name = self._thread_names.get(ident)
        if name is None:
            thread = threading._active.get(ident)  # noqa: SLF001 - no public lookup by ident
            name = thread.name if thread is not None else f"thread-{ident}"
            self._thread_names[ident] = name
        return name

    def to_readable(self, span: LeanSpan) -> ReadableSpan:
        """Builds the SDK ``ReadableSpan`` the processors and exporters expect."""
        attrs: dict[str, Any] = {}
        bag = span.ctx.get(_BAGGAGE_KEY)
        if bag:
            for key in keys.BAGGAGE_KEYS:
                value = bag.get(key)
                if value is not None:
                    attrs[key] = id_value(value)
        attrs["thread.id"] = span.thread
        attrs["thread.name"] = self.thread_name(span.thread)
        if span.category is not None:
            attrs[keys.CATEGORY] = normalize_category(span.category)
        if span.attributes:
            flatten_attributes("", span.attributes, attrs)
        if span.args:
            flatten_attributes(keys.ARGS_PREFIX, span.args, attrs)
        events = ()
        if span.events:
            events = tuple(
                Event(name, _event_attributes(ev_attrs), ts) for name, ev_attrs, ts in span.events
            )
        flags = TraceFlags(span.flags)
        parent = None
        if span.parent_id:
            parent = SpanContext(span.trace_id, span.parent_id, span.parent_remote, flags,
                                 span.trace_state)
        status = _UNSET if span.status_code is StatusCode.UNSET else Status(
            span.status_code, span.status_desc)
        return ReadableSpan(
            name=span.name,
            context=SpanContext(span.trace_id, span.span_id, False, flags, span.trace_state),
            parent=parent,
            resource=self.resource,
            attributes=attrs,
            events=events,
            links=tuple(span.links) if span.links else (),
            kind=span.kind,
            status=status,
            start_time=span.start_ns,
            end_time=span.end_ns,
            instrumentation_scope=self.scope,
        )


def _event_attributes(attrs: Any) -> dict[str, Any] | None:
    if not attrs:
        return None
    out: dict[str, Any] = {}
    flatten_attributes("", attrs, out)
    return out


def _is_default_sampler(sampler: Sampler) -> bool:
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    if sampler is ALWAYS_ON:
        return True
    return isinstance(sampler, ParentBased) and getattr(sampler, "_root", None) is ALWAYS_ON


def monotonic_deadline(timeout_s: float) -> Callable[[], float]:
    """Returns a function giving the seconds left until ``timeout_s`` from now."""
    end = time.monotonic() + timeout_s
    return lambda: max(0.0, end - time.monotonic())
