"""The processors and exporters that turn finished spans into files, OTLP and metrics.

Built once per configuration, either in the training process (thread mode) or
in the exporter process: the session processor (records, metrics, derived
attributes) in front of the file exporter and the OTLP batch processor.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlparse

from opentelemetry.sdk.environment_variables import (
    OTEL_BSP_MAX_QUEUE_SIZE,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from . import guard, keys
from .config import ConfigError, Settings
from .jsonl import JsonlAppender
from .metrics_file import JsonlMetricExporter
from .session_processor import SessionMetrics, SessionSpanProcessor

#: The SDK's default queue (2048) drops 2-10% of a 50k-span burst; ours holds it.
DEFAULT_BSP_QUEUE = 65_536


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


def otlp_span_exporter(environ: Any) -> Any:
    endpoint = traces_endpoint(environ)
    if not endpoint:
        return None
    if otlp_protocol(environ, endpoint) == "grpc":
        from .grpc_exporter import GrpcSpanExporter

        return GrpcSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter

    return HTTPExporter()


def otlp_metric_exporter(environ: Any, **options: Any) -> Any:
    """The OTLP metric exporter the environment asks for, or ``None``; ``options``
    go to its constructor (``preferred_temporality``...)."""
    endpoint = environ.get(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) or environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)
    if not endpoint:
        return None
    if otlp_protocol(environ, endpoint) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(**options)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HTTPExporter

    return HTTPExporter(**options)


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
        self.session_processor: SessionSpanProcessor | None = None
        self.owned_meter_provider: MeterProvider | None = None
        if settings.file_export:
            from .file_exporter import ChromeTraceFileExporter, InPlaceBatchProcessor

            self.file_processor = InPlaceBatchProcessor(
                ChromeTraceFileExporter(settings.file_path(keys.TRACES_FILE)))
            self.exporting.append(self.file_processor)
            self.batch_hooks.append(self.file_processor.flush_batch)
        exporter = otlp_span_exporter(environ) if with_otlp else None
        if exporter is not None:
            queue = None if environ.get(OTEL_BSP_MAX_QUEUE_SIZE) else DEFAULT_BSP_QUEUE
            self.otlp_processor = BatchSpanProcessor(exporter, max_queue_size=queue)
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
        self.after_batch()
        if self.session_processor is not None:
            self.session_processor.shutdown()
        if self.file_processor is not None:
            self.file_processor.shutdown()
        if self.otlp_processor is not None:
            bounded(self.otlp_processor.shutdown, timeout_s)
        if self.owned_meter_provider is not None:
            bounded(self.owned_meter_provider.shutdown, timeout_s)


def bounded(fn: Any, timeout_s: float) -> None:
    """Runs a shutdown step on a helper thread so an unreachable collector
    cannot stall process exit beyond ``timeout_s``."""
    thread = threading.Thread(target=fn, name="otel_rl-shutdown", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        guard.report("shutdown_timeout", "an exporter did not shut down within %.1fs", timeout_s)
