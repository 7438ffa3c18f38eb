"""The background half of a span's life: queue, records, processors.

A finished :class:`~otel_rl._internal.spans.LeanSpan` appends its record
(:mod:`.records`) to a deque (one atomic append on the caller's thread). A
single daemon thread drains it every ``export_interval_ms`` (sooner when it
fills). In thread mode the records become SDK ``ReadableSpan`` objects handed
to ``sink`` (the session processor, which wraps the TracerProvider's
processors) right here; in process mode each batch is shipped, as it is, to the
exporter process (:mod:`.exporter_process`).
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, Sampler
from opentelemetry.trace import SpanContext, SpanKind

from . import guard, keys, privacy
from .records import THREAD, ReadableBuilder, expand, record_from_readable, span_count

class Pipeline:
    """Owns the span queue and the export thread of one configured process.

    Thread mode: each finished span becomes a ``ReadableSpan`` handed to
    ``sink``. Process mode (``shipper`` set): records are shipped to the
    exporter process instead; should it die, ``fallback()`` builds an
    in-process sink and export goes on here.
    """

    def __init__(
        self,
        sink: SpanProcessor | None,
        resource: Resource,
        sampler: Sampler,
        *,
        max_queue_size: int,
        export_interval_ms: int,
        after_batch: Callable[[], None] | None = None,
        shipper: Any = None,
        fallback: Callable[[], tuple[SpanProcessor, Callable[[], None]]] | None = None,
    ) -> None:
        self.sink = sink
        self.resource = resource
        self._thread_names: dict[int, str] = {}
        self._build = ReadableBuilder(resource, self._thread_names).build
        self._sampler = sampler
        self._default_sampling = _is_default_sampler(sampler)
        self.max_queue_size = max_queue_size
        # Wake the export thread early in a burst: spans leave the heap sooner
        # (as records or bytes) and die young, which keeps garbage collection cheap.
        self.wake_at = max(1, min(max_queue_size // 4, 2048))
        self._interval = export_interval_ms / 1000.0
        self._after_batch = after_batch
        self.shipper = shipper
        self._fallback = fallback
        self._fail_over_lock = threading.Lock()
        self.queue: collections.deque[Any] = collections.deque()
        #: Spans taken off the queue by the export thread (bundled phases
        #: included), for the run summary; counted there, not on the caller's thread.
        self.spans_seen = 0
        self._closed = False
        self._init_thread_state()
        if hasattr(os, "register_at_fork"):
            # A weak reference: fork hooks cannot be unregistered, and a shut
            # down pipeline must neither be kept alive nor restarted by them.
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (m := ref()) and m())

    # --- thread management --------------------------------------------------------
    def _init_thread_state(self) -> None:
        self.wake = threading.Event()
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
        self.queue.clear()
        self.spans_seen = 0
        self.resource = self.resource.merge(Resource({keys.PROCESS_PID: os.getpid()}))
        self._build = ReadableBuilder(self.resource, self._thread_names).build
        if self.shipper is not None:
            self.shipper.after_fork_in_child()
        self._init_thread_state()

    # --- caller side --------------------------------------------------------------
    def enqueue(self, span: Any) -> None:
        """Queues a finished span: a record, or a ReadableSpan from other instrumentation."""
        queue = self.queue
        if len(queue) >= self.max_queue_size:
            guard.count("spans_dropped_queue_full")
            return
        queue.append(span)
        if len(queue) == self.wake_at:
            self.wake.set()

    def _enqueue_after_close(self, span: Any) -> None:
        """A span of this (shut down) configuration that ended afterwards: recorded
        by the configuration now in force, or counted when there is none."""
        from .state import STATE

        current = STATE.pipeline
        if current is not None and current is not self:
            current.enqueue(span)
        else:
            guard.report("spans_after_shutdown", "a span ended after otel_rl was shut down; "
                         "not recorded")

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
        deadline = monotonic_deadline(timeout_s)
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            self._drain()
        else:
            with self._cond:
                self._flush_requested += 1
                target = self._flush_requested
            self.wake.set()
            with self._cond:
                if not self._cond.wait_for(lambda: self._flush_done >= target, deadline()):
                    return False
        shipper = self.shipper
        if shipper is not None and self.sink is None:
            if shipper.flush(deadline()):
                return True
            if not shipper.failed:
                return False
            self._fail_over()
        return True

    def shutdown(self, timeout_s: float) -> bool:
        deadline = monotonic_deadline(timeout_s)
        ok = self.flush(timeout_s)
        self._closed = True
        # Spans still open now end later (a scope around reset() + configure());
        # an instance attribute keeps the open pipeline's enqueue free of checks.
        self.enqueue = self._enqueue_after_close  # type: ignore[method-assign]
        self.max_queue_size = 0  # sends LeanSpan's inlined enqueue to the method above
        self._stopping = True
        self.wake.set()
        self._thread.join(timeout=deadline())
        if self.shipper is not None:
            self.shipper.close(deadline())
        return ok

    # --- export thread --------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping:
            self.wake.wait(self._interval)
            self.wake.clear()
            with self._cond:
                requested = self._flush_requested
            self._drain()
            with self._cond:
                self._flush_done = max(self._flush_done, requested)
                self._cond.notify_all()

    def _drain(self) -> None:
        queue = self.queue
        popleft = queue.popleft
        while queue:
            # Only this thread pops, so ``take`` items are there.
            records = [popleft() for _ in range(min(len(queue), 4096))]
            if not all(type(rec) is tuple for rec in records):
                records = [rec if type(rec) is tuple else self._from_readable(rec) for rec in records]
                records = [rec for rec in records if rec is not None]
            n = span_count(records)
            self.spans_seen += n
            if privacy.redactor() is not None:  # one check per batch
                records = privacy.redact_records(records)
            names = self._names_of(records)
            shipper = self.shipper
            if shipper is not None and self.sink is None:
                if shipper.send(records, names, n):
                    continue
                self._fail_over()
            self._process_here(records)

    def _from_readable(self, span: Any) -> tuple | None:
        try:
            return record_from_readable(span)
        except Exception as exc:  # noqa: BLE001
            guard.report("export_error", "a span could not be processed: %r", exc)
            return None

    def _names_of(self, records: list[Any]) -> dict[int, str]:
        """Names of the threads ``records`` ran on (also cached for thread mode)."""
        thread_name = self.thread_name
        return {ident: thread_name(ident) for ident in {rec[THREAD] for rec in records}
                if ident is not None}

    def _process_here(self, records: list[tuple]) -> None:
        sink, build = self.sink, self._build
        for rec in expand(records):
            try:
                sink.on_end(build(rec))
            except Exception as exc:  # noqa: BLE001
                guard.report("export_error", "a span could not be processed: %r", exc)
        if self._after_batch is not None:
            self._after_batch()

    def _fail_over(self) -> None:
        """The exporter process is gone: export here from now on, starting
        with what it never received."""
        with self._fail_over_lock:
            if self.sink is not None:
                return
            self.sink, self._after_batch = self._fallback()
            self._process_here(self.shipper.take_unsent())

    def thread_name(self, ident: int) -> str:
        name = self._thread_names.get(ident)
        if name is None:
            thread = threading._active.get(ident)  # noqa: SLF001 - no public lookup by ident
            name = thread.name if thread is not None else f"thread-{ident}"
            self._thread_names[ident] = name
        return name



def _is_default_sampler(sampler: Sampler) -> bool:
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    if sampler is ALWAYS_ON:
        return True
    return isinstance(sampler, ParentBased) and getattr(sampler, "_root", None) is ALWAYS_ON


def monotonic_deadline(timeout_s: float) -> Callable[[], float]:
    """Returns a function giving the seconds left until ``timeout_s`` from now."""
    end = time.monotonic() + timeout_s
    return lambda: max(0.0, end - time.monotonic())
