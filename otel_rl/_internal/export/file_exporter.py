"""The per-rank Chrome trace file: spans appended as JSON lines, Perfetto-ready.

The file is append-only and written one batch at a time, each batch as whole
lines, flushed before ``export`` returns: a crash loses at most the batch being
written, and at worst leaves one truncated last line, which the converter skips.

Each batch ends with a marker line (:data:`~.chrome_markers.BATCH_MARKER`) holding
the batch's CRC-32: the converter copies a batch whose checksum matches without
parsing its lines, which makes merging large runs several times faster.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import orjson
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .. import diagnostics, guard
from ..encode import chrome_lines
from ..encode.chrome_markers import BATCH_MARKER
from ..encode.chrome_trace import ChromeTraceEncoder
from ..encode.json_values import json_safe_value
from .jsonl import AppendOnlyFile


# Objects whose locks must be new in a forked child: a lock held by the parent's
# export thread at the moment of the fork would otherwise never be released.
_fork_sensitive: weakref.WeakSet[Any] = weakref.WeakSet()


def after_fork_in_child() -> None:
    """Renews the locks of every exporter and processor of this module in a forked child."""
    for obj in list(_fork_sensitive):
        obj._after_fork_in_child()


def _dumps(event: dict[str, Any]) -> bytes | None:
    """One event's line; ``None`` (counted) for the rare event nothing can write."""
    try:
        return orjson.dumps(event)
    except (TypeError, orjson.JSONEncodeError):
        pass
    # The encoder already made args JSON-safe; this only catches what slipped
    # through (a subclass orjson refuses, text with a lone surrogate from
    # surrogateescape), at the cost of a second pass over this event alone.
    try:
        return orjson.dumps({k: json_safe_value(v) for k, v in event.items()})
    except Exception as exc:  # noqa: BLE001 - one event never costs its batch
        guard.count(diagnostics.TRACE_FILE_EVENTS_LOST)
        guard.report(diagnostics.TRACE_FILE_ERROR, "a trace event could not be written: %r", exc)
        return None


def _batch(events: list[dict[str, Any] | bytes]) -> bytearray:
    """The lines of ``events`` (dicts, or lines the encoder already wrote) followed by the batch marker line."""
    body, lines, pids = chrome_lines.join(events, _dumps)
    ordered = sorted(pids)
    marker = orjson.dumps({"ph": "M", "name": BATCH_MARKER, "pid": ordered[0] if ordered else 0,
                           "tid": 0, "args": {"lines": lines, "bytes": len(body),
                                              "crc32": chrome_lines.crc32(body), "pids": ordered}})
    # orjson keeps the key order above, so the line starts with BATCH_MARKER_PREFIX,
    # which is how the converter finds it.
    body += marker
    body += b"\n"
    return body


class ChromeTraceFileExporter(SpanExporter):
    """Appends spans to a JSONL file of Chrome Trace events, one event per line.

    Args:
        path: The file to append to; missing parent directories are created.
        encoder: The encoder to use (a default one when omitted).
        hold: Keep encoded batches in memory until :meth:`force_flush` (AReaL's
            ``save_interval`` above 1: the file is written at the saving steps).
            Past :data:`MAX_HELD_BYTES` they are written anyway, so nothing is lost.
    """

    #: Encoded bytes a holding exporter keeps before writing them early.
    MAX_HELD_BYTES = 64 << 20
    #: :meth:`export` and :meth:`stage` take bundled sessions (:func:`bundled_spans`) as they are.
    takes_bundles = True

    def __init__(self, path: str, encoder: ChromeTraceEncoder | None = None, hold: bool = False) -> None:
        self.path = os.fspath(path)
        self._encoder = encoder if encoder is not None else ChromeTraceEncoder()
        self._lock = threading.Lock()
        self._file = AppendOnlyFile(self.path)
        self._closed = False
        self._hold = hold
        self._held = bytearray()
        self._held_events = 0
        # Events of spans encoded ahead (stage), written first by the next export.
        self._staged: list[Any] = []
        self.lines_written = 0
        _fork_sensitive.add(self)
        if hold:
            return  # the file appears at the first save, as AReaL's does
        try:
            self._file.open()
        except OSError as exc:
            # Not fatal: the next export tries again, and counts its failure.
            guard.report(diagnostics.TRACE_FILE_ERROR, "cannot open %s: %s", self.path, exc)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._staged = []  # the parent's spans: the parent writes them

    def set_resource(self, resource: Any) -> None:
        """The resource of the records handed to :meth:`export` (see :meth:`ChromeTraceEncoder.encode`)."""
        self._encoder.set_resource(resource)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Encodes ``spans`` and appends their events; never raises.

        Args:
            spans: Finished spans.

        Returns:
            ``SUCCESS``, or ``FAILURE`` when the file could not be written.
        """
        with self._lock:
            if self._closed:
                return SpanExportResult.FAILURE
            try:
                events = self._encoder.encode(spans)
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.TRACE_FILE_ERROR, "cannot encode spans for %s: %r", self.path, exc)
                return SpanExportResult.FAILURE
            if self._staged:
                self._staged.extend(events)
                events, self._staged = self._staged, []
            return SpanExportResult.SUCCESS if self._write(events) else SpanExportResult.FAILURE

    def stage(self, spans: Sequence[Any]) -> bool:
        """Encodes ``spans`` now and keeps their events for the next :meth:`export`, which
        writes them ahead of its own spans, in its batch; never raises.

        The exporter process encodes each slice of a batch as soon as it has derived it
        (while its objects are still in the core's cache) and writes the batch once.

        Args:
            spans: Finished spans, as for :meth:`export`.

        Returns:
            ``False`` when they could not be encoded (or the exporter is shut down).
        """
        with self._lock:
            if self._closed:
                return False
            try:
                self._staged.extend(self._encoder.encode(spans))
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.TRACE_FILE_ERROR, "cannot encode spans for %s: %r", self.path, exc)
                return False
            return True

    def _serialize(self, events: list[dict[str, Any]]) -> bytes | bytearray:
        """What ``events`` add to the file: their JSON lines and the batch marker."""
        return _batch(events)

    def _closing(self) -> bytes:
        """What the file gets at shutdown after the last events (nothing for JSON lines)."""
        return b""

    def _write(self, events: list[dict[str, Any]]) -> bool:
        if not events:
            return True
        try:
            data = self._serialize(events)
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.TRACE_FILE_ERROR, "cannot serialise trace events: %r", exc)
            return False
        return self._write_data(data, len(events))

    def _write_data(self, data: bytes | bytearray, count: int) -> bool:
        if not data:
            return True
        if self._hold:
            self._held += data
            self._held_events += count
            return len(self._held) < self.MAX_HELD_BYTES or self._write_held()
        return self._append(data, count)

    def _append(self, data: bytes | bytearray, count: int) -> bool:
        try:
            self._file.write(data, count)
        except OSError as exc:
            guard.count(diagnostics.TRACE_FILE_EVENTS_LOST, count)
            guard.report(diagnostics.TRACE_FILE_ERROR, "cannot write %s: %s", self.path, exc)
            return False
        self.lines_written += count
        return True

    def _write_held(self) -> bool:
        if not self._held:
            return True
        data, count = self._held, self._held_events
        self._held, self._held_events = bytearray(), 0
        return self._append(data, count)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Writes what a holding exporter kept; otherwise every batch is already written."""
        if not self._hold:
            return True
        with self._lock:
            return self._write_held()

    def shutdown(self) -> None:
        """Writes the spans the encoder still holds and closes the file."""
        with self._lock:
            if self._closed:
                return
            try:
                staged, self._staged = self._staged, []
                self._write(staged + self._encoder.finish())
                self._write_data(self._closing(), 0)
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.TRACE_FILE_ERROR, "cannot finish %s: %r", self.path, exc)
            self._write_held()
            self._closed = True
            self._file.close()


def bundled_spans(items: list[Any]) -> list[Any]:
    """``items`` with each bundled session spelled out as its spans' pairs.

    The compiled record sink keeps a session derived with its phases in one step as one item,
    ``(session record, its attributes, ((phase record, its attributes), ...))``: the pairs of
    its phases followed by the session's, in the order the exporter expands them. An exporter
    that takes them as they are says so with ``takes_bundles``; the others get the pairs.
    """
    out: list[Any] = []
    for item in items:
        if type(item) is tuple and len(item) == 3:
            out.extend(item[2])
            out.append(item[:2])
        else:
            out.append(item)
    return out


def span_total(items: list[Any]) -> int:
    """The spans ``items`` hold (a bundled session holds its phases too)."""
    return sum(len(item[2]) + 1 if type(item) is tuple and len(item) == 3 else 1 for item in items)


class InPlaceBatchProcessor(SpanProcessor):
    """Collects sampled spans and hands them to an exporter on ``flush_batch``.

    Unlike the SDK's batch processor it owns no thread: otel_rl's export thread
    calls :meth:`flush_batch` after each drain, so spans reach the file in the
    same rhythm as everything else, without a second thread waking up.

    Args:
        exporter: Receives the batches.
        max_batch: Spans per ``export`` call.
        max_buffered: Spans held between flushes before new ones are dropped.
    """

    def __init__(self, exporter: SpanExporter, max_batch: int = 8192,
                 max_buffered: int = 1_000_000) -> None:
        self.exporter = exporter
        self._max_batch = max(1, max_batch)
        self._max_buffered = max(1, max_buffered)
        # SDK spans, (record, attributes) pairs and bundled sessions (see bundled_spans)
        self._spans: list[Any] = []
        self._count = 0  # the spans those hold
        self._takes_bundles = getattr(exporter, "takes_bundles", False)
        # Spans the exporter encoded ahead (stage_batch), counted when their batch is written.
        self._staged_spans = 0
        self._stage = getattr(exporter, "stage", None)
        self._lock = threading.Lock()
        self._export_lock = threading.Lock()
        self._shutdown = False
        #: Spans written / not written by the exporter (the run summary's counts).
        self.exported = 0
        self.failed = 0
        _fork_sensitive.add(self)

    def _after_fork_in_child(self) -> None:
        # The parent exports the spans it collected; the child starts empty.
        self._spans = []
        self._count = 0
        self._staged_spans = 0
        self.exported = self.failed = 0
        self._lock = threading.Lock()
        self._export_lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        """Keeps ``span`` for the next batch if it is sampled."""
        if self._shutdown or not span.context.trace_flags.sampled:
            return
        with self._lock:
            if self._count >= self._max_buffered:
                guard.count(diagnostics.SPANS_DROPPED_FILE_BUFFER)
                return
            self._spans.append(span)
            self._count += 1

    def on_record(self, rec: tuple, attrs: dict[str, Any]) -> None:
        """Keeps a sampled span in record form (``rec`` and its flat ``attrs``) for
        the next batch: what :meth:`on_end` keeps of its SDK span, without building it."""
        if self._shutdown:
            return
        with self._lock:
            if self._count >= self._max_buffered:
                guard.count(diagnostics.SPANS_DROPPED_FILE_BUFFER)
                return
            self._spans.append((rec, attrs))
            self._count += 1

    def on_records(self, pairs: list[tuple], spans: int | None = None) -> None:
        """:meth:`on_record` for a list of sampled ``(record, attributes)`` pairs at once.

        Args:
            pairs: The pairs, and bundled sessions (:func:`bundled_spans`) where the record
                sink makes them.
            spans: The spans they hold (``len(pairs)`` when not given).
        """
        if self._shutdown:
            return
        if spans is None:
            spans = len(pairs)
        if spans != len(pairs) and not self._takes_bundles:
            pairs = bundled_spans(pairs)
        with self._lock:
            room = max(0, self._max_buffered - self._count)
            if spans > room:
                guard.count(diagnostics.SPANS_DROPPED_FILE_BUFFER, spans - room)
                pairs = bundled_spans(pairs)[:room]
                spans = room
            self._spans.extend(pairs)
            self._count += spans

    def _take(self) -> tuple[list[Any], int]:
        """The spans collected so far and their count, handed over (the collecting list
        starts anew)."""
        with self._lock:
            spans, self._spans = self._spans, []
            count, self._count = self._count, 0
        return spans, count

    def stage_batch(self) -> None:
        """Has the exporter encode the spans collected so far, to be written by the next
        :meth:`flush_batch` in its batch (an exporter without ``stage`` gets them then)."""
        if self._stage is None:
            return
        with self._export_lock:
            spans, count = self._take()
            if not spans:
                return
            try:
                staged = self._stage(spans)
            except Exception as exc:  # noqa: BLE001 - a foreign exporter may raise
                guard.report(diagnostics.EXPORT_ERROR, "an exporter failed: %r", exc)
                staged = False
            if staged:
                self._staged_spans += count
            else:
                self.failed += count

    def flush_batch(self) -> bool:
        """Exports every span collected so far (with those :meth:`stage_batch` encoded).

        Returns:
            ``False`` if any batch failed to export.
        """
        with self._export_lock:
            spans, total = self._take()
            staged, self._staged_spans = self._staged_spans, 0
            ok = True
            step = self._max_batch
            for i in range(0, max(len(spans), 1 if staged else 0), step):
                chunk = spans[i:i + step]
                count = (len(chunk) if total == len(spans) else span_total(chunk)) + (staged if i == 0 else 0)
                try:
                    result = self.exporter.export(chunk)
                except Exception as exc:  # noqa: BLE001 - a foreign exporter may raise
                    guard.report(diagnostics.EXPORT_ERROR, "an exporter failed: %r", exc)
                    result = SpanExportResult.FAILURE
                if result is SpanExportResult.SUCCESS:
                    self.exported += count
                else:
                    self.failed += count
                ok = ok and result is SpanExportResult.SUCCESS
            return ok

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Exports what is collected, then flushes the exporter."""
        ok = self.flush_batch()
        try:
            return self.exporter.force_flush(timeout_millis) and ok
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.EXPORT_ERROR, "an exporter failed to flush: %r", exc)
            return False

    def shutdown(self) -> None:
        """Exports what is collected and shuts the exporter down; later spans are ignored."""
        if self._shutdown:
            return
        self.flush_batch()
        self._shutdown = True
        try:
            self.exporter.shutdown()
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.EXPORT_ERROR, "an exporter failed to shut down: %r", exc)
