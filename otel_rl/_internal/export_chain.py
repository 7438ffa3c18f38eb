"""The processors and exporters that turn finished spans into files, OTLP and metrics.

Built once per configuration, either in the training process (thread mode) or
in the exporter process: the session processor (records, metrics, derived
attributes) in front of the file exporter and the OTLP batch processor.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from opentelemetry.sdk.environment_variables import (
    OTEL_BSP_MAX_QUEUE_SIZE,
    OTEL_EXPORTER_OTLP_COMPRESSION,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_COMPRESSION,
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TIMEOUT,
    OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from . import guard, keys
from .config import ConfigError, Settings
from .jsonl import JsonlAppender
from .metrics_file import JsonlMetricExporter
from .session_processor import SessionMetrics, SessionSpanProcessor

logger = logging.getLogger("otel_rl")

#: The SDK's default queue (2048) drops 2-10% of a 50k-span burst; ours holds it.
DEFAULT_BSP_QUEUE = 65_536
#: The OTLP export timeout when the environment gives none or a bad one (the spec's 10 s).
DEFAULT_OTLP_TIMEOUT_S = 10.0
#: ``OTEL_EXPORTER_OTLP_*TIMEOUT`` values below this are read as seconds (the
#: Python SDK's reading), values from it on as milliseconds (the specification's).
TIMEOUT_MS_FROM = 1000
_warned: set[tuple[str, str]] = set()


def otlp_protocol(environ: Any, endpoint: str) -> str:
    protocol = environ.get(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) or environ.get(OTEL_EXPORTER_OTLP_PROTOCOL)
    if protocol:
        protocol = protocol.strip()
        if protocol not in ("grpc", "http/protobuf"):
            raise ConfigError(
                f"invalid value for environment variable {OTEL_EXPORTER_OTLP_PROTOCOL}: {protocol!r} "
                "(expected 'grpc' or 'http/protobuf')")
        return protocol
    # The spec's default is http/protobuf, but Jaeger and most collector
    # examples hand users port 4317, which only speaks gRPC.
    return "grpc" if urlparse(endpoint).port == 4317 else "http/protobuf"


def traces_endpoint(environ: Any) -> str | None:
    return environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)


def _warn_env(name: str, value: str, message: str, *args: Any) -> None:
    """One warning per variable and value (also counted as ``otlp_env_corrected``)."""
    guard.count("otlp_env_corrected")
    if (name, value) not in _warned:
        _warned.add((name, value))
        logger.warning("otel_rl: " + message, *args)


def otlp_timeout_s(environ: Any, signal: str) -> float:
    """The export timeout in seconds from ``OTEL_EXPORTER_OTLP_{signal}_TIMEOUT``, else
    ``OTEL_EXPORTER_OTLP_TIMEOUT``.

    The specification gives these in milliseconds; the Python SDK reads them in
    seconds, so ``10000`` (the spec's default) would be a timeout of 2.8 hours and
    a dead collector would hold every export that long. Values of
    :data:`TIMEOUT_MS_FROM` and more are milliseconds; smaller ones are taken as
    seconds, as the SDK's documentation asks for, with a warning. A value that is
    no positive finite number gets the default (10 s), with a warning.
    """
    specific = {"traces": OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
                "metrics": OTEL_EXPORTER_OTLP_METRICS_TIMEOUT}[signal]
    name = specific if environ.get(specific, "").strip() else OTEL_EXPORTER_OTLP_TIMEOUT
    raw = environ.get(name, "").strip()
    if not raw:
        return DEFAULT_OTLP_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        _warn_env(name, raw, "%s=%r is not a positive number of milliseconds; using %.0f ms",
                  name, raw, DEFAULT_OTLP_TIMEOUT_S * 1000)
        return DEFAULT_OTLP_TIMEOUT_S
    if value < TIMEOUT_MS_FROM:
        _warn_env(name, raw, "%s=%r is read as %s seconds (the OpenTelemetry specification "
                  "gives this timeout in milliseconds; write %d to be unambiguous)",
                  name, raw, raw, int(value * 1000))
        return value
    return value / 1000.0


def otlp_compression(environ: Any, signal: str, protocol: str) -> Any:
    """The compression from ``OTEL_EXPORTER_OTLP_{signal}_COMPRESSION``, else
    ``OTEL_EXPORTER_OTLP_COMPRESSION``, as the exporter's own enum.

    The spec's values are ``none`` and ``gzip``; the SDK's gRPC exporter raises
    at start on ``none`` (it knows only ``gzip``), which would stop training
    from starting. ``none`` / empty mean no compression, ``gzip`` and
    ``deflate`` are passed on, anything else is no compression with a warning.
    """
    specific = {"traces": OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
                "metrics": OTEL_EXPORTER_OTLP_METRICS_COMPRESSION}[signal]
    name = specific if environ.get(specific, "").strip() else OTEL_EXPORTER_OTLP_COMPRESSION
    raw = environ.get(name, "")
    value = raw.strip().lower()
    if protocol == "grpc":
        from grpc import Compression

        choices = {"none": Compression.NoCompression, "gzip": Compression.Gzip,
                   "deflate": Compression.Deflate}
    else:
        from opentelemetry.exporter.otlp.proto.http import Compression

        choices = {"none": Compression.NoCompression, "gzip": Compression.Gzip,
                   "deflate": Compression.Deflate}
    if not value:
        return choices["none"]
    if value not in choices:
        _warn_env(name, raw, "%s=%r is not a compression (expected none, gzip or deflate); "
                  "sending uncompressed", name, raw)
        return choices["none"]
    return choices[value]


def otlp_span_exporter(environ: Any) -> Any:
    endpoint = traces_endpoint(environ)
    if not endpoint:
        return None
    protocol = otlp_protocol(environ, endpoint)
    options = {"timeout": otlp_timeout_s(environ, "traces"),
               "compression": otlp_compression(environ, "traces", protocol)}
    if protocol == "grpc":
        from .grpc_exporter import GrpcSpanExporter

        return CountingSpanExporter(GrpcSpanExporter(**options))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter

    return CountingSpanExporter(HTTPExporter(**options))


def otlp_metric_exporter(environ: Any, **options: Any) -> Any:
    """The OTLP metric exporter the environment asks for, or ``None``; ``options``
    go to its constructor (``preferred_temporality``...)."""
    endpoint = environ.get(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) or environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)
    if not endpoint:
        return None
    protocol = otlp_protocol(environ, endpoint)
    options.setdefault("timeout", otlp_timeout_s(environ, "metrics"))
    options.setdefault("compression", otlp_compression(environ, "metrics", protocol))
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(**options)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HTTPExporter

    return HTTPExporter(**options)


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
            guard.report("export_error", "OTLP export failed: %r", exc)
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
    """The SDK's batch processor, counting the sampled spans handed to it: those
    neither exported nor refused by the end were still queued (or dropped by its queue)."""

    accepted = 0

    def on_end(self, span: ReadableSpan) -> None:
        if span.context.trace_flags.sampled:
            self.accepted += 1
        super().on_end(span)


class ExportChain:
    """Everything that consumes finished spans for one configuration.

    ``exporting`` holds the processors that write spans (file, OTLP); spans
    enter through :meth:`sink`, which puts the session processor in front of
    ``downstream`` (by default the exporting processors themselves).
    """

    def __init__(self, settings: Settings, resource: Resource, environ: Any, *,
                 with_otlp: bool = True, meter_provider: MeterProvider | None = None) -> None:
        self.settings = settings
        self.exporting: list[SpanProcessor] = []
        self.batch_hooks: list[Any] = []
        self.file_processor: Any = None
        self.otlp_processor: BatchSpanProcessor | None = None
        self.otlp_exporter: CountingSpanExporter | None = None
        self.closed = False
        self.session_processor: SessionSpanProcessor | None = None
        self.owned_meter_provider: MeterProvider | None = None
        if settings.file_export:
            from .file_exporter import ChromeTraceFileExporter, InPlaceBatchProcessor

            self.file_processor = InPlaceBatchProcessor(ChromeTraceFileExporter(
                settings.file_path(keys.TRACES_FILE), hold=settings.save_interval > 1))
            self.exporting.append(self.file_processor)
            self.batch_hooks.append(self.file_processor.flush_batch)
        exporter = otlp_span_exporter(environ) if with_otlp else None
        if exporter is not None:
            queue = None if environ.get(OTEL_BSP_MAX_QUEUE_SIZE) else DEFAULT_BSP_QUEUE
            self.otlp_processor = CountingBatchSpanProcessor(exporter, max_queue_size=queue)
            self.otlp_exporter = exporter
            self.exporting.append(self.otlp_processor)
        self._meter_provider = meter_provider
        self._resource = resource
        self._environ = environ
        self._metrics_over_network = False
        self._network_flush: threading.Thread | None = None
        self._network_lock = threading.Lock()
        self._network_again = False

    def sink(self, downstream: SpanProcessor | None = None) -> SpanProcessor:
        """The processor finished spans are handed to."""
        if downstream is None:
            downstream = SynchronousMultiSpanProcessor()
            for processor in self.exporting:
                downstream.add_span_processor(processor)
        if not self.settings.session_tracer:
            return downstream
        meter_provider = self._meter_provider
        if meter_provider is None:
            metric_exporter = otlp_metric_exporter(self._environ)
            if metric_exporter is not None:
                reader = PeriodicExportingMetricReader(metric_exporter)
                self._metrics_over_network = True
            else:
                reader = PeriodicExportingMetricReader(
                    JsonlMetricExporter(self.settings.file_path(keys.METRICS_FILE)),
                    export_interval_millis=60_000)
            meter_provider = self.owned_meter_provider = MeterProvider(
                metric_readers=[reader], resource=self._resource, shutdown_on_exit=False)
        records = JsonlAppender(self.settings.file_path(keys.SESSIONS_FILE),
                                self.settings.flush_threshold, kind="session_records")
        self.session_processor = SessionSpanProcessor(
            downstream, rank=self.settings.rank, role=self.settings.role, records=records,
            metrics=SessionMetrics(meter_provider.get_meter(keys.INSTRUMENTATION_NAME)),
            max_pending_sessions=self.settings.max_pending_sessions)
        return self.session_processor

    def after_batch(self) -> None:
        for hook in self.batch_hooks:
            try:
                hook()
            except Exception as exc:  # noqa: BLE001
                guard.report("export_error", "an exporter failed: %r", exc)

    def flush(self, timeout_s: float) -> bool:
        """Writes the files (traces, session records, file metrics) now, and
        starts sending what waits for OTLP without waiting for it: a collector
        that is slow or down must not hold up ``save()`` in a training loop.
        ``shutdown`` waits for the network, within its bound."""
        self.after_batch()
        if self.file_processor is not None:
            self.file_processor.force_flush()  # what save_interval held back
        if self.session_processor is not None:
            self.session_processor.flush()
        if self.owned_meter_provider is not None and not self._metrics_over_network:
            self._flush_metrics(timeout_s)
        if self.otlp_processor is not None or self._metrics_over_network:
            with self._network_lock:
                # One flush thread at a time; a request made while it runs makes
                # it go round once more, so nothing waits for the next schedule.
                self._network_again = True
                thread = self._network_flush
                if thread is None or not thread.is_alive():
                    thread = self._network_flush = threading.Thread(
                        target=self._flush_network_loop, args=(timeout_s,), name="otel_rl-otlp-flush",
                        daemon=True)
                    thread.start()
        return True

    def _flush_network_loop(self, timeout_s: float) -> None:
        while True:
            with self._network_lock:
                if not self._network_again:
                    return
                self._network_again = False
            self._flush_network(timeout_s)

    def _flush_network(self, timeout_s: float) -> None:
        if self.otlp_processor is not None:
            try:
                if not self.otlp_processor.force_flush(int(timeout_s * 1000)):
                    guard.report("otlp_flush_timeout", "OTLP export did not finish within %.1fs; "
                                 "spans stay queued (bounded) and are retried", timeout_s)
            except Exception as exc:  # noqa: BLE001
                guard.report("export_error", "OTLP flush failed: %r", exc)
        if self._metrics_over_network:
            self._flush_metrics(timeout_s)

    def _flush_metrics(self, timeout_s: float) -> None:
        try:
            self.owned_meter_provider.force_flush(int(timeout_s * 1000))  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001
            guard.report("metrics_error", "metrics flush failed: %r", exc)

    def shutdown(self, timeout_s: float) -> None:
        """Writes and closes the files, then gives the network what is left of
        ``timeout_s`` (the OTLP spans and the metrics share it)."""
        end = time.monotonic() + timeout_s
        self.after_batch()
        if self.session_processor is not None:
            self.session_processor.shutdown()
        if self.file_processor is not None:
            self.file_processor.shutdown()
        if self.otlp_processor is not None:
            bounded(self.otlp_processor.shutdown, max(0.0, end - time.monotonic()))
        if self.owned_meter_provider is not None:
            bounded(self.owned_meter_provider.shutdown, max(0.0, end - time.monotonic()))
        self.closed = True

    def stats(self) -> dict[str, Any]:
        """What this chain wrote and sent so far (plain numbers, for the run summary)."""
        out: dict[str, Any] = {"file_spans": 0, "file_spans_failed": 0, "otlp": False,
                               "otlp_spans_queued": 0, "otlp_spans_exported": 0,
                               "otlp_spans_failed": 0, "otlp_failed_calls": 0, "sessions": {},
                               "closed": self.closed}
        if self.file_processor is not None:
            out["file_spans"] = self.file_processor.exported
            out["file_spans_failed"] = self.file_processor.failed
        if self.otlp_exporter is not None:
            out["otlp"] = True
            out["otlp_spans_queued"] = getattr(self.otlp_processor, "accepted", 0)
            out["otlp_spans_exported"] = self.otlp_exporter.exported
            out["otlp_spans_failed"] = self.otlp_exporter.failed
            out["otlp_failed_calls"] = self.otlp_exporter.failed_calls
        if self.session_processor is not None:
            out["sessions"] = dict(self.session_processor.statuses)
        return out


def bounded(fn: Any, timeout_s: float) -> None:
    """Runs a shutdown step on a helper thread so an unreachable collector
    cannot stall process exit beyond ``timeout_s``."""
    thread = threading.Thread(target=fn, name="otel_rl-shutdown", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        guard.report("shutdown_timeout", "an exporter did not shut down within %.1fs", timeout_s)
