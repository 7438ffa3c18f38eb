"""The background half of a span's life: queue, records, processors.

A finished :class:`~otel_rl._internal.recording.spans.LeanSpan` appends its
record (:mod:`~otel_rl._internal.recording.record`) to a deque (one atomic
append on the caller's thread). A single daemon thread drains it every
``export_interval_ms`` (sooner when it fills). In thread mode the records
become SDK ``ReadableSpan`` objects handed to ``sink`` (the session processor,
which wraps the TracerProvider's processors) right here; in process mode each
batch is shipped, as it is, to the exporter process (:mod:`.process`).

``save()`` asks this thread to do its work (drain, then write the files or ask
the exporter process to) and returns; only ``save(force=True)`` and
``shutdown()`` wait, each within ``shutdown_timeout_ms``.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, Sampler
from opentelemetry.trace import SpanContext, SpanKind

from .. import diagnostics, guard, keys
from ..encode.readable import ReadableBuilder, record_from_readable
from ..recording import privacy
from ..recording.record import expand, span_count
from . import wire

#: After shutdown's bound, how long the export thread gets to stop where it is.
ABANDON_GRACE_S = 0.05


class Pipeline:
    """Owns the span queue and the export thread of one configured process.

    Thread mode: each finished span becomes a ``ReadableSpan`` handed to
    ``sink``. Process mode (``shipper`` set): records are shipped to the
    exporter process instead; should it die or stop making progress,
    ``fallback(resource)`` builds an in-process sink and export goes on here,
    as it does in a child forked from a process-mode process.

    Requests (:meth:`flush`, :meth:`save`) are carried out by the export
    thread, so a caller that does not wait for them pays nothing for them.
    """

    #: Records taken off the queue at a time.
    CHUNK = 4096
    #: Most records kept waiting in the queue for room in the exporter's backlog.
    HOLD_MAX = 16_384
    #: Queued records that wake the export thread before its interval is up. 256 made the
    #: tight session loop about 5 % cheaper (records marshalled while still in the cache) but
    #: the exporter process 10-20 % dearer at a steady 10,000 sessions a second, where each
    #: wake-up finds its state out of the cache: a batch is worth waiting for there.
    WAKE_AT = 2048

    def __init__(
        self,
        sink: SpanProcessor | None,
        resource: Resource,
        sampler: Sampler,
        *,
        max_queue_size: int,
        export_interval_ms: int,
        after_batch: Callable[[], None] | None = None,
        on_save: Callable[[], Any] | None = None,
        shipper: Any = None,
        fallback: Callable[[Resource], tuple[SpanProcessor, Callable[[], None], Callable[[], Any]]]
        | None = None,
    ) -> None:
        self.sink = sink
        self.resource = resource
        self._thread_names: dict[int, str] = {}
        self._build = ReadableBuilder(resource, self._thread_names).build
        self._sampler = sampler
        self._default_sampling = _is_default_sampler(sampler)
        self.max_queue_size = max_queue_size
        # While the exporter process's backlog is full, records wait in the
        # queue (a burst then loses nothing), up to half its bound and at most
        # HOLD_MAX (records kept alive cost the training loop garbage-collector
        # time); past that a batch that does not fit the backlog is dropped,
        # counted, before it is marshalled.
        self._hold_limit = max(1, min(max_queue_size // 2, self.HOLD_MAX))
        # Wake the export thread early in a burst: spans leave the heap sooner
        # (as records or bytes) and die young, which keeps garbage collection cheap.
        self.wake_at = max(1, min(max_queue_size // 4, self.WAKE_AT))
        self._interval = export_interval_ms / 1000.0
        self._after_batch = after_batch
        self._on_save = on_save
        self.shipper = shipper
        self._fallback = fallback
        self.queue: collections.deque[Any] = collections.deque()
        #: Spans taken off the queue by the export thread (bundled phases
        #: included), for the run summary; counted there, not on the caller's thread.
        self.spans_seen = 0
        #: Of those, spans handed on (processed here or shipped), so that what
        #: a shutdown out of time leaves behind can be counted.
        self.spans_done = 0
        #: Spans still queued when shutdown ran out of time (never taken off the queue).
        self.spans_left = 0
        self._closed = False
        #: Called by the export thread before each drain (counters sampled off the
        #: training loop's path: sessions in flight).
        self.samplers: list[Callable[[], None]] = []
        self._init_thread_state()

    # --- thread management --------------------------------------------------------
    def _init_thread_state(self) -> None:
        # Also run in a forked child: locks the parent's threads held at the
        # fork would never be released there.
        self.wake = threading.Event()
        self._cond = threading.Condition()
        self._take_lock = threading.Lock()
        self._fail_over_lock = threading.Lock()
        self._flush_requested = self._flush_done = 0
        self._save_requested = self._save_done = 0
        self._save_seq: int | None = None
        self._stopping = False
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="otel_rl-export", daemon=True)
        self._thread.start()

    def after_fork_in_child(self) -> None:
        """Called by the runtime's fork walk in a forked child (last: it starts the export thread)."""
        # The parent's queued spans belong to the parent: a child that exported
        # them would duplicate them. The export thread did not survive the fork.
        if self._closed:
            return
        self.queue.clear()
        self.spans_seen = self.spans_done = self.spans_left = 0
        self.resource = self.resource.merge(Resource({keys.PROCESS_PID: os.getpid()}))
        self._build = ReadableBuilder(self.resource, self._thread_names).build
        if self.shipper is not None:
            # The parent's exporter process is the parent's. A fresh interpreter
            # of its own would cost every forked worker seconds on a loaded
            # machine, waited for again at its exit (a multiprocessing pool); the
            # child has everything imported and exports itself, from its first
            # span (a worker that records nothing builds nothing).
            self.shipper.after_fork_in_child()
            self.shipper = None
        self._init_thread_state()

    # --- caller side --------------------------------------------------------------
    def enqueue(self, span: Any) -> None:
        """Queues a finished span: a record, or a ReadableSpan from other instrumentation."""
        queue = self.queue
        if len(queue) >= self.max_queue_size:
            guard.count(diagnostics.SPANS_DROPPED_QUEUE_FULL)
            return
        queue.append(span)
        if len(queue) == self.wake_at:
            self.wake.set()

    def _enqueue_after_close(self, span: Any) -> None:
        """A span of this (shut down) configuration that ended afterwards: recorded
        by the configuration now in force, or counted when there is none."""
        from ..state import STATE

        current = STATE.pipeline
        if current is not None and current is not self:
            current.enqueue(span)
        else:
            guard.report(diagnostics.SPANS_AFTER_SHUTDOWN, "a span ended after otel_rl was shut down; "
                         "not recorded")

    def sample_root(self, ctx: Any, trace_id: int, name: str, kind: SpanKind, attributes: Any) -> int:
        if self._default_sampling:
            return 1
        try:
            result = self._sampler.should_sample(ctx, trace_id, name, kind, attributes)
        except Exception:  # noqa: BLE001 - a broken sampler must not break training
            guard.report(diagnostics.SAMPLER_ERROR, "sampler raised; span kept")
            return 1
        return 1 if result.decision is Decision.RECORD_AND_SAMPLE else 0

    def sample_child(self, parent: SpanContext) -> int:
        # Parent-based: a child follows its (remote or foreign) parent's decision.
        return 1 if parent.trace_flags.sampled else 0

    def flush(self, timeout_s: float) -> bool:
        """Processes every span queued before the call (in process mode, until the
        exporter process has written them); ``False`` on timeout."""
        return self._request(timeout_s, save=self.shipper is not None, wait=True)

    def save(self, timeout_s: float, wait: bool) -> bool:
        """Processes every span queued before the call, then writes the files and
        starts the network sends (the export chain's ``flush``, here or in the
        exporter process). Without ``wait`` it only asks the export thread and
        returns at once; with it, waits up to ``timeout_s``: ``False`` on timeout."""
        return self._request(timeout_s, save=True, wait=wait)

    def _request(self, timeout_s: float, *, save: bool, wait: bool) -> bool:
        asked_at = time.monotonic()
        deadline = monotonic_deadline(timeout_s)
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            # No export thread to ask: this is it, or it is gone (shut down).
            self._drain()
            self._check_shipper()
            seq = self._do_save() if save else None
            return self._await_exporter(seq, deadline, asked_at) if wait else True
        with self._cond:
            if save:
                self._save_requested += 1
                target = self._save_requested
            else:
                self._flush_requested += 1
                target = self._flush_requested
        self.wake.set()
        if not wait:
            return True
        with self._cond:
            if save:
                done = self._cond.wait_for(lambda: self._save_done >= target, deadline())
            else:
                done = self._cond.wait_for(lambda: self._flush_done >= target, deadline())
            seq = self._save_seq
        if not done:
            guard.report(diagnostics.FLUSH_TIMEOUT, "otel_rl could not process its queued spans within %.1fs",
                         timeout_s)
            return False
        return self._await_exporter(seq if save else None, deadline, asked_at)

    def _await_exporter(self, seq: int | None, deadline: Callable[[], float], asked_at: float) -> bool:
        """Waits for the exporter process's acknowledgement of ``seq`` (``None``:
        the work was done in this process). An exporter process that is gone, or
        that answered nothing at all during the whole wait, is given up on, and
        the save done again here."""
        shipper = self.shipper
        if seq is None or shipper is None:
            return True
        if shipper.wait_ack(seq, deadline()):
            return True
        if shipper.silent_since(asked_at) or shipper.stalled():
            shipper.abandon()
        if shipper.failed:
            return self._request(deadline(), save=True, wait=True)
        guard.report(diagnostics.FLUSH_TIMEOUT, "the exporter process did not flush within the bound")
        return False

    def shutdown(self, timeout_s: float) -> bool:
        """Processes (ships) what is queued and stops, within ``timeout_s``; what
        is left when it runs out is counted as dropped (``unprocessed_at_exit``)."""
        deadline = monotonic_deadline(timeout_s)
        ok = self._request(timeout_s, save=False, wait=True)
        self._closed = True
        # Spans still open now end later (a scope around reset() + configure());
        # an instance attribute keeps the open pipeline's enqueue free of checks.
        self.enqueue = self._enqueue_after_close  # type: ignore[method-assign]
        self.max_queue_size = 0  # sends LeanSpan's inlined enqueue to the method above
        self._stopping = True
        self.wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=deadline())
        self._count_left_behind()
        shipper = self.shipper
        if shipper is not None:
            shipper.close(deadline())
            if shipper.failed and self.sink is None and not self._thread.is_alive():
                # Gone before it had everything: what it never received is
                # exported here (the caller shuts the fallback chain down).
                self._fail_over(stop_at=time.monotonic() + deadline())
        return ok

    def _count_left_behind(self) -> None:
        """After the export thread was given its time: stops it where it is and
        counts what it did not process."""
        with self._take_lock:
            self._abandoned = True
            left = list(self.queue)
            self.queue.clear()
        left_n = span_count([rec for rec in left if type(rec) is tuple]) + sum(
            1 for rec in left if type(rec) is not tuple)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            # A moment to notice (it checks before each span), so the count
            # below is exact; one blocked in a write is counted as it stands.
            self._thread.join(ABANDON_GRACE_S)
        in_flight = max(0, self.spans_seen - self.spans_done)  # taken, not handed on
        self.spans_left = left_n
        if left_n or in_flight:
            guard.count(diagnostics.SPANS_DROPPED_UNPROCESSED_AT_EXIT, left_n + in_flight)
            guard.report(diagnostics.SHUTDOWN_TIMEOUT, "shutdown_timeout_ms ran out with %d spans not yet "
                         "exported; counted as dropped", left_n + in_flight)

    # --- export thread --------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping:
            self.wake.wait(self._interval)
            self.wake.clear()
            self._cycle()
        self._cycle()  # what ended while the shutdown's own flush ran

    def _cycle(self) -> None:
        for sampler in self.samplers:
            try:
                sampler()
            except Exception as exc:  # noqa: BLE001 - a sampler never stops the export
                guard.report(diagnostics.INTERNAL_ERROR, "a counter could not be sampled: %r", exc)
        with self._cond:
            flushes, saves = self._flush_requested, self._save_requested
        self._drain()
        self._check_shipper()
        saving = saves > self._save_done
        seq = self._do_save() if saving else None
        with self._cond:
            self._flush_done = max(self._flush_done, flushes)
            if saving:
                self._save_done = saves
                self._save_seq = seq
            self._cond.notify_all()

    def _do_save(self) -> int | None:
        """The save's work after the drain: a flush request to the exporter
        process (its sequence number), or the chain's flush here (``None``)."""
        if self.shipper is not None and self.sink is None:
            return self.shipper.request_flush()
        if self.sink is None:
            return None  # a forked child that has recorded nothing yet
        if self._on_save is not None:
            try:
                self._on_save()
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.EXPORT_ERROR, "the outputs could not be written: %r", exc)
        return None

    def _check_shipper(self) -> None:
        """Fails over from an exporter process that died or stopped making progress."""
        shipper = self.shipper
        if shipper is None or self.sink is not None:
            return
        if not shipper.failed and shipper.stalled():
            shipper.abandon()
        if shipper.failed:
            self._fail_over()

    def _drain(self) -> None:
        queue = self.queue
        popleft = queue.popleft
        while queue and not self._abandoned:
            take = min(len(queue), self.CHUNK)
            shipper = self.shipper
            shipping = shipper is not None and self.sink is None
            drop = False
            if shipping:
                room = shipper.room()
                if room < take:
                    if room >= max(1, shipper.max_pending // 4):
                        take = room
                    elif len(queue) < self._hold_limit:
                        # Busy, not overrun: wait for the backlog to go down.
                        shipper.wait_room(0.05)
                        self._check_shipper()
                        continue
                    else:
                        drop = True
            with self._take_lock:
                if self._abandoned:
                    return
                # Only this thread pops (shutdown's count takes the lock), so ``take`` items are there.
                records = [popleft() for _ in range(take)]
            tuples, n, threads = wire.survey(records)
            if not tuples:
                records = [rec if type(rec) is tuple else self._from_readable(rec) for rec in records]
                records = [rec for rec in records if rec is not None]
                _, n, threads = wire.survey(records)
            self.spans_seen += n
            if drop:
                self.spans_done += n
                guard.count(diagnostics.SPANS_DROPPED_EXPORTER_BACKLOG, n)
                guard.report(diagnostics.EXPORTER_BACKLOG, "the exporter process is behind by %d spans and "
                             "more wait in the queue; dropping new spans (counted)",
                             shipper.max_pending - shipper.room())
                continue
            if privacy.redactor() is not None:  # one check per batch
                records = privacy.redact_records(records)
            names = self._names_of(threads)
            if shipping:
                if shipper.send(records, names, n):
                    self.spans_done += n
                    continue
                self._fail_over()
            self._process_here(records)

    def _from_readable(self, span: Any) -> tuple | None:
        try:
            return record_from_readable(span)
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.EXPORT_ERROR, "a span could not be processed: %r", exc)
            return None

    def _names_of(self, threads: set[Any]) -> dict[int, str]:
        """Names of the threads with these idents (``None``: none; also cached for thread mode)."""
        thread_name = self.thread_name
        return {ident: thread_name(ident) for ident in threads if ident is not None}

    def _process_here(self, records: list[tuple], stop_at: float | None = None) -> None:
        """Hands ``records`` to the sink. The export thread stops when shutdown
        gave up on it (which counts the rest); with ``stop_at``, the rest is
        counted here when that time comes."""
        sink, build = self.sink or self._sink_here(), self._build
        todo = expand(records)
        for i, rec in enumerate(todo):
            if stop_at is None:
                if self._abandoned:
                    break
            elif time.monotonic() > stop_at:
                guard.count(diagnostics.SPANS_DROPPED_UNPROCESSED_AT_EXIT, len(todo) - i)
                break
            try:
                sink.on_end(build(rec))
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.EXPORT_ERROR, "a span could not be processed: %r", exc)
            self.spans_done += 1
        else:
            if self._after_batch is not None:
                self._after_batch()

    def _sink_here(self) -> SpanProcessor:
        """The in-process sink, built now (a forked child's first span)."""
        with self._fail_over_lock:
            if self.sink is None:
                self.sink, self._after_batch, self._on_save = self._fallback(self.resource)
            return self.sink

    def _fail_over(self, stop_at: float | None = None) -> None:
        """The exporter process is gone: export here from now on, starting
        with what it never received."""
        with self._fail_over_lock:
            if self.sink is not None:
                return
            self.sink, self._after_batch, self._on_save = self._fallback(self.resource)
            unsent = self.shipper.take_unsent()
            self.spans_done -= span_count(unsent)  # shipped no more: done once processed here
            self._process_here(unsent, stop_at)

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
