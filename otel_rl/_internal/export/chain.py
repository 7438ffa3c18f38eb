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
import weakref
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from opentelemetry.sdk.environment_variables import (
    OTEL_BSP_EXPORT_TIMEOUT,
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
    OTEL_BSP_MAX_QUEUE_SIZE,
    OTEL_BSP_SCHEDULE_DELAY,
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
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from .. import diagnostics, guard, keys
from ..config import ConfigError, Settings
from .jsonl import JsonlAppender
from .metrics_file import JsonlMetricExporter
from .otlp_batch import CountingBatchSpanProcessor, CountingSpanExporter
from .session_metrics import AggregatedSessionMetrics, InstrumentSessionMetrics
from .session_processor import SessionSpanProcessor

logger = logging.getLogger("otel_rl")

#: The other ``OTEL_BSP_*`` defaults, the specification's (and the SDK's).
DEFAULT_BSP_SCHEDULE_DELAY_MS = 5000
DEFAULT_BSP_BATCH = 512
DEFAULT_BSP_EXPORT_TIMEOUT_MS = 30_000
#: The OTLP export timeout when the environment gives none or a bad one (the spec's 10 s).
DEFAULT_OTLP_TIMEOUT_S = 10.0
#: ``OTEL_EXPORTER_OTLP_*TIMEOUT`` values below this are read as seconds (the
#: Python SDK's reading), values from it on as milliseconds (the specification's).
TIMEOUT_MS_FROM = 1000
#: How long a shutdown step given up on gets to end once its exporter is shut down.
ABORT_GRACE_S = 0.5
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
    guard.count(diagnostics.OTLP_ENV_CORRECTED)
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


def bsp_options(environ: Any, default_queue: int) -> dict[str, int]:
    """The batch span processor's settings from ``OTEL_BSP_*``, checked.

    The queue holds ``default_queue`` spans unless ``OTEL_BSP_MAX_QUEUE_SIZE`` says
    otherwise. The export chain gives ``max_queue_size``: a burst the training process's
    queue holds, the OTLP queue holds too while the collector catches up. (The SDK's
    default, 2048, drops 2-10 % of a 50k-span burst; 65,536 still dropped 2-5 % of a
    100k-span one.)

    The SDK raises from the processor's constructor on a queue, batch size or
    delay that is not positive (and on a batch larger than the queue), which
    in the exporter process ended every output. A value that is no positive
    integer gets the default with a warning naming the variable, as the SDK
    does for one that is no integer; a batch size above the queue size is
    lowered to it, with a warning.
    """

    def read(name: str, default: int, minimum: int = 1) -> tuple[int, bool]:
        raw = environ.get(name, "").strip()
        if not raw:
            return default, False
        try:
            value = int(raw)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            _warn_env(name, raw, "%s=%r is not a positive integer; using the default %d",
                      name, raw, default)
            return default, False
        return value, True

    queue, _ = read(OTEL_BSP_MAX_QUEUE_SIZE, default_queue)
    delay, _ = read(OTEL_BSP_SCHEDULE_DELAY, DEFAULT_BSP_SCHEDULE_DELAY_MS)
    batch, batch_given = read(OTEL_BSP_MAX_EXPORT_BATCH_SIZE, DEFAULT_BSP_BATCH)
    timeout, _ = read(OTEL_BSP_EXPORT_TIMEOUT, DEFAULT_BSP_EXPORT_TIMEOUT_MS, minimum=0)
    if batch > queue:
        raw = environ.get(OTEL_BSP_MAX_EXPORT_BATCH_SIZE, "").strip() if batch_given else str(batch)
        _warn_env(OTEL_BSP_MAX_EXPORT_BATCH_SIZE, f"{raw}>{queue}",
                  "%s=%s%s is larger than %s=%d; exporting batches of %d",
                  OTEL_BSP_MAX_EXPORT_BATCH_SIZE, raw, "" if batch_given else " (the default)",
                  OTEL_BSP_MAX_QUEUE_SIZE, queue, queue)
        batch = queue
    return {"max_queue_size": queue, "schedule_delay_millis": delay,
            "max_export_batch_size": batch, "export_timeout_millis": timeout}


#: Loggers of the SDK's OTLP export path, and the signal each speaks for
#: (``None``: named in the message, the gRPC exporter serves both).
_SDK_EXPORT_LOGGERS = {
    "opentelemetry.exporter.otlp.proto.grpc.exporter": None,
    "opentelemetry.exporter.otlp.proto.http.trace_exporter": "traces",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter": "metrics",
    "opentelemetry.sdk.metrics._internal.export": "metrics",
}


class _SdkExportLogs(logging.Filter):
    """Turns the SDK exporters' retry and failure messages into one warning per
    exporter (traces, metrics) and counts the rest.

    Against an unreachable collector each export logs a line per retry, 15-40
    lines through a training job's progress bar; the failures themselves are
    counted in the run summary.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        signal = _SDK_EXPORT_LOGGERS.get(record.name)
        if record.name == "opentelemetry.sdk.metrics._internal.export" and not str(
                record.msg).startswith("Exception while exporting"):
            return True  # its configuration warnings are shown as they are
        if signal is None:
            args = record.args if isinstance(record.args, tuple) else ()
            signal = "metrics" if "metrics" in args else "traces"
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a message that does not format
            text = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {record.exc_info[1]!r}"
        guard.report(f"otlp_{signal}_exporter_log", "OTLP %s exporter: %s", signal, text)
        return False


_sdk_log_filter: _SdkExportLogs | None = None


def quiet_sdk_export_logs() -> None:
    """Installs :class:`_SdkExportLogs` on the SDK's export loggers (once per process)."""
    global _sdk_log_filter
    if _sdk_log_filter is not None:
        return
    _sdk_log_filter = _SdkExportLogs()
    for name in _SDK_EXPORT_LOGGERS:
        logging.getLogger(name).addFilter(_sdk_log_filter)


def otlp_span_exporter(environ: Any) -> Any:
    endpoint = traces_endpoint(environ)
    if not endpoint:
        return None
    protocol = otlp_protocol(environ, endpoint)
    quiet_sdk_export_logs()
    options = {"timeout": otlp_timeout_s(environ, "traces"),
               "compression": otlp_compression(environ, "traces", protocol)}
    if protocol == "grpc":
        from .grpc import GrpcSpanExporter

        return CountingSpanExporter(GrpcSpanExporter(**options))
    from .http import HttpSpanExporter

    return CountingSpanExporter(HttpSpanExporter(**options))


def otlp_metric_exporter(environ: Any, **options: Any) -> Any:
    """The OTLP metric exporter the environment asks for, or ``None``; ``options``
    go to its constructor (``preferred_temporality``...)."""
    endpoint = environ.get(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) or environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)
    if not endpoint:
        return None
    protocol = otlp_protocol(environ, endpoint)
    quiet_sdk_export_logs()
    options.setdefault("timeout", otlp_timeout_s(environ, "metrics"))
    options.setdefault("compression", otlp_compression(environ, "metrics", protocol))
    if protocol == "grpc":
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
        self.otlp_exporter: CountingSpanExporter | None = None
        self.closed = False
        self.session_processor: SessionSpanProcessor | None = None
        self.owned_metric_reader: PeriodicExportingMetricReader | None = None
        self._metric_exporter: Any = None
        if settings.file_export:
            from .file_exporter import ChromeTraceFileExporter, InPlaceBatchProcessor

            if settings.file_format == "perfetto":
                from .perfetto_file import PerfettoTraceFileExporter

                exporter: ChromeTraceFileExporter = PerfettoTraceFileExporter(
                    settings.file_path(keys.PERFETTO_TRACES_FILE), hold=settings.save_interval > 1)
            else:
                exporter = ChromeTraceFileExporter(
                    settings.file_path(keys.TRACES_FILE), hold=settings.save_interval > 1)
            self.file_processor = InPlaceBatchProcessor(exporter)
            self.exporting.append(self.file_processor)
            self.batch_hooks.append(self.file_processor.flush_batch)
        exporter = otlp_span_exporter(environ) if with_otlp else None
        if exporter is not None:
            self.otlp_processor = CountingBatchSpanProcessor(exporter,
                                                             **bsp_options(environ, settings.max_queue_size))
            self.otlp_exporter = exporter
            self.exporting.append(self.otlp_processor)
        self._meter_provider = meter_provider
        self._resource = resource
        self._environ = environ
        self._metrics_over_network = False
        self._closing = False
        self._network = BackgroundFlush(self._flush_network, "otel_rl-otlp-flush")

    def sink(self, downstream: SpanProcessor | None = None) -> SpanProcessor:
        """The processor finished spans are handed to."""
        if downstream is None:
            downstream = SynchronousMultiSpanProcessor()
            for processor in self.exporting:
                downstream.add_span_processor(processor)
        if not self.settings.session_tracer:
            return downstream
        if self._meter_provider is not None:
            metrics: Any = InstrumentSessionMetrics(self._meter_provider.get_meter(keys.INSTRUMENTATION_NAME))
        else:
            metric_exporter = self._metric_exporter = otlp_metric_exporter(self._environ)
            if metric_exporter is not None:
                reader = PeriodicExportingMetricReader(metric_exporter)
                self._metrics_over_network = True
            else:
                reader = PeriodicExportingMetricReader(
                    JsonlMetricExporter(self.settings.file_path(keys.METRICS_FILE)),
                    export_interval_millis=60_000)
            metrics = AggregatedSessionMetrics(self._resource, self._environ)
            self.owned_metric_reader = metrics.attach(reader)
        records = JsonlAppender(self.settings.file_path(keys.SESSIONS_FILE),
                                self.settings.flush_threshold, kind="session_records")
        self.session_processor = SessionSpanProcessor(
            downstream, rank=self.settings.rank, role=self.settings.role, records=records,
            metrics=metrics,
            max_pending_sessions=self.settings.max_pending_sessions)
        return self.session_processor

    def after_slice(self) -> None:
        """Encodes what the latest slice of a batch left for the trace file, written by
        :meth:`after_batch` (see :func:`.process.export_batch`)."""
        if self.file_processor is not None:
            self.file_processor.stage_batch()  # never raises

    def after_batch(self) -> None:
        for hook in self.batch_hooks:
            try:
                hook()
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.EXPORT_ERROR, "an exporter failed: %r", exc)

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
        if self.owned_metric_reader is not None and not self._metrics_over_network:
            self._flush_metrics(timeout_s)
        if self.otlp_processor is not None or self._metrics_over_network:
            self._network.request(timeout_s)
        return True

    def _flush_network(self, timeout_s: float) -> None:
        if self._closing:
            return  # shutdown sends what is left, within its own bound
        if self.otlp_processor is not None:
            try:
                # False only once shutdown has begun (the SDK's force_flush
                # ignores its timeout): shutdown then accounts for the spans.
                if not self.otlp_processor.force_flush(int(timeout_s * 1000)) and not self._closing:
                    guard.report(diagnostics.OTLP_FLUSH_TIMEOUT, "OTLP export did not finish within %.1fs; "
                                 "spans stay queued (bounded) and are retried", timeout_s)
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.EXPORT_ERROR, "OTLP flush failed: %r", exc)
        if self._metrics_over_network and not self._closing:
            self._flush_metrics(timeout_s)

    def _flush_metrics(self, timeout_s: float) -> None:
        try:
            self.owned_metric_reader.force_flush(timeout_s * 1000)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.METRICS_ERROR, "metrics flush failed: %r", exc)

    def shutdown(self, timeout_s: float) -> None:
        """Writes and closes the files, then gives the network what is left of
        ``timeout_s`` (the OTLP spans and the metrics share it)."""
        end = time.monotonic() + timeout_s
        self._closing = True
        self.after_batch()
        if self.session_processor is not None:
            self.session_processor.shutdown()
        if self.file_processor is not None:
            self.file_processor.shutdown()
        # A flush under way is sending what shutdown would send: let it finish
        # rather than closing the exporters under it (the SDK then logs
        # "Channel closed!" and the flush reports spans it did send as unsent).
        self._network.stop(max(0.0, end - time.monotonic()))
        if self.otlp_processor is not None:
            # Not aborted: spans still in an export when time runs out are counted as
            # unsent at exit (the summary's figure), which cancelling the call would blur.
            bounded(self.otlp_processor.shutdown, max(0.0, end - time.monotonic()))
        if self.owned_metric_reader is not None:
            bounded(self.owned_metric_reader.shutdown, max(0.0, end - time.monotonic()),
                    self._metric_exporter.shutdown if self._metric_exporter is not None else None)
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


class BackgroundFlush:
    """Runs ``fn(timeout_s)`` on a thread of its own when asked, one run at a
    time; a request made during a run makes it run once more, so nothing waits
    for the next schedule. For work that waits on the network, which
    ``save()`` must not.
    """

    def __init__(self, fn: Callable[[float], Any], name: str) -> None:
        self._fn = fn
        self._name = name
        self._reinit()
        _flushers.add(self)

    def _reinit(self) -> None:
        # Also run in a forked child: the parent's lock may have been held at
        # the fork, and its thread did not come along.
        self._lock = threading.Lock()
        self._again = False
        self._running = False
        self._stopped = False
        self._timeout_s = 0.0
        self._thread: threading.Thread | None = None

    def request(self, timeout_s: float) -> None:
        """Starts a run now, or one more after the run under way."""
        with self._lock:
            if self._stopped:
                return
            self._again = True
            self._timeout_s = timeout_s
            if self._running:
                return
            self._running = True
            thread = self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._again or self._stopped:
                    self._running = False
                    return
                self._again = False
                timeout_s = self._timeout_s
            try:
                self._fn(timeout_s)
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.EXPORT_ERROR, "a background flush failed: %r", exc)

    def stop(self, timeout_s: float) -> bool:
        """Runs no more; waits up to ``timeout_s`` for the run under way. ``False`` if it is still running."""
        with self._lock:
            self._stopped = True
            thread = self._thread if self._running else None
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout_s)
        return not thread.is_alive()


_flushers: weakref.WeakSet[BackgroundFlush] = weakref.WeakSet()


def after_fork_in_child() -> None:
    """Renews every background flusher in a forked child (its thread stayed in the parent)."""
    for flusher in list(_flushers):
        flusher._reinit()  # noqa: SLF001


def bounded(fn: Any, timeout_s: float, abort: Any = None) -> None:
    """Runs a shutdown step on a helper thread so an unreachable collector
    cannot stall process exit beyond ``timeout_s``.

    A step still running then is an export retrying against a collector that is
    down; ``abort`` (the exporter's ``shutdown``, which wakes the SDK's retry wait)
    ends it, so that nothing of this configuration keeps exporting and logging
    after ``shutdown()`` returned (it did, into the next configuration's log).
    """
    thread = threading.Thread(target=fn, name="otel_rl-shutdown", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        guard.report(diagnostics.SHUTDOWN_TIMEOUT, "an exporter did not shut down within %.1fs", timeout_s)
        if abort is not None:
            try:
                abort()
            except Exception:  # noqa: BLE001 - the exporter is being given up on anyway
                pass
            thread.join(ABORT_GRACE_S)
