"""Records straight to the outputs: the export chain without an SDK span per span.

The chain's processors take SDK ``ReadableSpan`` objects, and building one per
span (contexts, status, an attribute mapping) and walking it through the
processors cost more than the trace file's encoding itself. Where nothing but
otel_rl's own outputs take the spans (the exporter process, and the training
process after a fail-over), :class:`RecordSink` hands each record to them as
it is, with its flat attributes computed once:

- the session processor derives from the record (:meth:`SessionSpanProcessor.on_record`);
- the trace file keeps ``(record, attributes)`` and its encoder reads the record;
- OTLP, when configured, gets the SDK span built from the same attributes,
  so it carries exactly what the span path would have given it.

A record with events, links or another library's instrumentation scope (rare)
takes the span path through ``chain.sink()``, unchanged. Both paths feed the
same processors in order, so the outputs are those of the span path (a test
compares them byte for byte).
"""

from __future__ import annotations

from typing import Any

from .. import diagnostics, guard
from ..encode.readable import ReadableBuilder
from ..recording.record import EVENTS, FLAGS, LINKS, SCOPE


class RecordSink:
    """Hands records to the outputs of ``chain`` (an :class:`~.chain.ExportChain`
    whose sink has no processors of the application's downstream)."""

    def __init__(self, chain: Any, builder: ReadableBuilder) -> None:
        self._span_sink = chain.sink()
        self._session = chain.session_processor
        self._file = chain.file_processor
        self._otlp = chain.otlp_processor
        self._attributes = builder.attributes
        self._span = builder.span
        self._build = builder.build
        if self._file is not None:
            self._file.exporter.set_resource(builder.resource)

    def on_record(self, rec: tuple) -> None:
        """Exports one record (without a bundle: :func:`..recording.record.expand`)."""
        try:
            if rec[EVENTS] or rec[LINKS] or rec[SCOPE] is not None:
                self._span_sink.on_end(self._build(rec))
                return
            attrs = self._attributes(rec)
            if self._session is not None:
                attrs = self._session.on_record(rec, attrs)
            if self._file is not None and rec[FLAGS] & 1:
                self._file.on_record(rec, attrs)
            if self._otlp is not None:
                self._otlp.on_end(self._span(rec, attrs))
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.EXPORT_ERROR, "a span could not be processed: %r", exc)
