"""The OTLP exporter and batch processor as the export chain wraps them: counting the spans
sent, refused and dropped by a full queue, for the run summary."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .. import diagnostics, guard


class CountingSpanExporter(SpanExporter):
    """Passes batches to the OTLP exporter and counts spans sent and refused,
    for the run summary."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0
        self.failed_calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # noqa: BLE001 - counted like a refused batch
            guard.report(diagnostics.EXPORT_ERROR, "OTLP export failed: %r", exc)
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failed += len(spans)
            self.failed_calls += 1
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.inner.shutdown()


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """The SDK's batch processor, counting the sampled spans handed to it and those its
    full queue drops: those neither exported, refused nor dropped by the end were still
    queued. The SDK's queue drops its oldest span when full and logs that once; nothing
    counts it, and the run summary took those spans for unsent at exit.
    """

    accepted = 0

    def __init__(self, exporter: SpanExporter, **options: Any) -> None:
        super().__init__(exporter, **options)
        # The SDK's queue is internal (opentelemetry-python's BatchProcessor since 1.33):
        # without it, the drops go uncounted, as the SDK leaves them.
        queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
        self._queue = queue if isinstance(queue, collections.deque) and queue.maxlen else None

    def on_end(self, span: ReadableSpan) -> None:
        if span.context.trace_flags.sampled:
            self.accepted += 1
            queue = self._queue
            if queue is not None and len(queue) >= queue.maxlen:  # type: ignore[operator]
                guard.count(diagnostics.SPANS_DROPPED_OTLP_QUEUE)  # the SDK drops the oldest
        super().on_end(span)
