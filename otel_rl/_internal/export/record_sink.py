"""Records straight to the outputs: the export chain without an SDK span per span.

The chain's processors take SDK ``ReadableSpan`` objects, and building one per
span (contexts, status, an attribute mapping) and walking it through the
processors cost more than the trace file's encoding itself. Where nothing but
otel_rl's own outputs take the spans (the exporter process, and the training
process after a fail-over), :class:`RecordSink` hands each record to them as
it is, with its flat attributes computed once:

- the session processor derives from the record (:meth:`SessionSpanProcessor.on_record`);
- the trace file keeps ``(record, attributes)`` and its encoder reads the record;
- OTLP, when configured, gets the record's span already encoded
  (:class:`~..encode.otlp.EncodedSpan`, the bytes the SDK span built from the
  same attributes would give), or that SDK span where the compiled encoder
  leaves the record to it.

A record with events, links or another library's instrumentation scope (rare)
takes the span path through ``chain.sink()``, unchanged. Both paths feed the
same processors in order, so the outputs are those of the span path (a test
compares them byte for byte).

:meth:`RecordSink.on_records` takes a batch as the pipe carries it, each session's
phases still bundled in it, and hands it to the compiled twin (``_record_sink.c``): it
expands each session as it comes to it (the records :func:`expand` makes, with the same
span ids), builds the attributes of the plain records (most scopes, phases and sessions)
itself, has the session processor derive from them, keeps them for the file and hands
them to OTLP, and gives every other record to :meth:`RecordSink.on_record`, in order. A
plain session is derived with its phases in one step (``derive_bundle``) and kept for the
file as one item with their pairs (:func:`.file_exporter.bundled_spans`), which the trace
encoder places under the session span without a wait. Without the compiled twin the batch
is expanded first and each record takes :meth:`RecordSink.on_record`.
"""

from __future__ import annotations

from typing import Any

import random

from .. import diagnostics, guard, keys, payload
from ..encode.otlp import EncodedSpan, record_span
from ..encode.readable import ReadableBuilder
from ..recording import privacy, record
from ..recording.ids import new_span_id
from ..recording.record import EVENTS, FLAGS, LINKS, SCOPE
from .session_processor import compiled_derive, compiled_derive_bundle

try:
    from . import _record_sink as _native
except ImportError:  # built without a C compiler
    _native = None
else:
    _native.configure({
        "BAGGAGE_KEYS": keys.BAGGAGE_KEYS, "THREAD_ID": keys.THREAD_ID, "THREAD_NAME": keys.THREAD_NAME,
        "CATEGORY": keys.CATEGORY, "SPAN_KIND": keys.SPAN_KIND, "GAUGE_VALUE": keys.GAUGE_VALUE,
        "KIND_PHASE": keys.KIND_PHASE, "KIND_SESSION": keys.KIND_SESSION, "KIND_TASK": keys.KIND_TASK,
        "ARGS_PREFIX": keys.ARGS_PREFIX, "is_content_key": privacy.is_content_key, "IDS": record.IDS,
        "THREAD": record.THREAD, "CATEGORY_FIELD": record.CATEGORY, "ATTRIBUTES": record.ATTRIBUTES,
        "ARGS": record.ARGS, "EVENTS": EVENTS, "LINKS": LINKS, "SCOPE": SCOPE, "FLAGS": FLAGS,
        "fields": record.FIELDS, "SESSION_ID": keys.SESSION_ID, "phase": record.phase,
        "phase_attributes": record.phase_attributes, "expand": record.expand,
        # record.phase's draw: the random module's shared generator, one stream for both.
        "getrandbits": random.getrandbits, "new_span_id": new_span_id,
        **{name: index for name, index in record.layout().items()
           if name in ("NAME", "TRACE_ID", "SPAN_ID", "PARENT_ID", "PARENT_REMOTE", "TRACE_STATE", "START", "END",
                       "KIND", "STATUS", "BUNDLE")},
    })


def expand(records: list[tuple]) -> list[tuple]:
    """:func:`..recording.record.expand`, compiled where built (the same records, span ids
    drawn from the same generator in the same order)."""
    return _native.expand(records) if _native is not None else record.expand(records)


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
        self._thread_names = builder.thread_names
        self._sink_records = _native.sink_records if _native is not None else None
        self._keep = self._file.on_records if self._file is not None else _ignore
        self._resource = builder.resource
        self._scope = builder.own_scope
        # Records' spans encoded without an SDK span, where the exporter copies their bytes.
        takes = chain.otlp_exporter is not None and getattr(chain.otlp_exporter.inner, "takes_encoded_spans", False)
        self._record_span = record_span if takes else None
        self._each = self._to_otlp if self._otlp is not None else None
        self._derive = self._session.on_record if self._session is not None else None
        self._compiled_derive = compiled_derive if self._session is not None else None
        self._derive_bundle = compiled_derive_bundle if self._session is not None else None

    def on_records(self, records: list[tuple]) -> None:
        """Exports a batch of records, in order, each session's bundled phases first
        (:func:`expand`; the compiled walk expands each session as it comes to it, and derives
        a session with its phases in one step where it can)."""
        if self._sink_records is None:
            try:
                records = expand(records)
            except Exception as exc:  # noqa: BLE001 - only a failure of the interpreter itself
                guard.report(diagnostics.EXPORT_ERROR, "a batch could not be processed: %r", exc)
                return
            for rec in records:
                self.on_record(rec)
            return
        try:
            self._sink_records(records, self._thread_names, payload.max_str(), self._keep, self.on_record,
                               self._each, self._derive, self._compiled_derive, self._session, self._derive_bundle)
        except Exception as exc:  # noqa: BLE001 - only a failure of the interpreter itself
            guard.report(diagnostics.EXPORT_ERROR, "a batch could not be processed: %r", exc)

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
                self._to_otlp(rec, attrs)
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.EXPORT_ERROR, "a span could not be processed: %r", exc)

    def _to_otlp(self, rec: tuple, attrs: dict[str, Any]) -> None:
        """Hands the span of ``rec`` (with its flat ``attrs``) to the OTLP processor; never raises
        (the compiled walk calls it for each plain record)."""
        try:
            if self._record_span is not None:
                if not rec[FLAGS] & 1:
                    return  # not sampled: the batch processor would drop it
                encoded = self._record_span(rec, attrs)
                if encoded is not None:
                    self._otlp.on_end(EncodedSpan(encoded, self._resource, self._scope))
                    return
            self._otlp.on_end(self._span(rec, attrs))
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.EXPORT_ERROR, "a span could not be processed: %r", exc)


def _ignore(pairs: list[tuple], spans: int = 0) -> None:
    """Where no trace file is written, plain records have nothing left to do."""
