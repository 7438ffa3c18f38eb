"""Building and tearing down one process's tracing: providers, processors, exporters."""

from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Any
from urllib.parse import urlparse

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.environment_variables import (
    OTEL_BSP_MAX_QUEUE_SIZE,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_RESOURCE_ATTRIBUTES,
    OTEL_SDK_DISABLED,
    OTEL_SERVICE_NAME,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from . import guard, keys
from .config import Settings, resolve
from .jsonl import JsonlAppender
from .metrics_file import JsonlMetricExporter
from .pipeline import Pipeline, id_value
from .session_processor import SessionMetrics, SessionSpanProcessor
from .spans import LeanTracer
from .state import STATE
from .tracking import Registry

logger = logging.getLogger("otel_rl")

DEFAULT_SERVICE_NAME = "otel-rl"
#: The SDK's default queue (2048) drops 2-10% of a 50k-span burst; ours holds it.
DEFAULT_BSP_QUEUE = 65_536
_lock = threading.RLock()


class BaggageSpanProcessor(SpanProcessor):
    """Copies otel_rl's baggage ids onto spans other instrumentation starts
    (an HTTP client span made inside a session carries the session id)."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        from opentelemetry.baggage import get_all

        bag = get_all(parent_context)
        if not bag:
            return
        for key in keys.BAGGAGE_KEYS:
            value = bag.get(key)
            if value is not None:
                span.set_attribute(key, id_value(value))


class ProviderHook(SpanProcessor):
    """The one processor otel_rl adds to a TracerProvider. Its delegates are
    swapped on configure/reset because the SDK cannot remove a processor."""

    def __init__(self) -> None:
        self.delegates: tuple[SpanProcessor, ...] = ()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        for processor in self.delegates:
            try:
                processor.on_start(span, parent_context=parent_context)
            except Exception as exc:  # noqa: BLE001
                guard.report("processor_error", "span processor failed on start: %r", exc)

    def on_end(self, span: Any) -> None:
        for processor in self.delegates:
            try:
                processor.on_end(span)
            except Exception as exc:  # noqa: BLE001
                guard.report("processor_error", "span processor failed on end: %r", exc)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in self.delegates)


class Components:
    """Everything one ``configure()`` built, so ``shutdown()`` can undo it."""

    def __init__(self) -> None:
        self.provider: TracerProvider | None = None
        self.owns_provider = False
        self.hook: ProviderHook | None = None
        self.file_processor: Any = None
        self.otlp_processor: BatchSpanProcessor | None = None
        self.session_processor: SessionSpanProcessor | None = None
        self.meter_provider: MeterProvider | None = None
        self.pipeline: Pipeline | None = None


def _resource(settings: Settings, environ: Any) -> Resource:
    attrs: dict[str, Any] = {
        keys.RANK: settings.rank,
        keys.EXPERIMENT: settings.experiment_name,
        keys.TRIAL: settings.trial_name,
        "process.pid": os.getpid(),
    }
    if settings.role:
        attrs[keys.ROLE] = settings.role
    named = environ.get(OTEL_SERVICE_NAME) or "service.name=" in environ.get(OTEL_RESOURCE_ATTRIBUTES, "")
    if not named:
        attrs["service.name"] = DEFAULT_SERVICE_NAME
    return Resource.create(attrs)


def _otlp_protocol(environ: Any, endpoint: str) -> str:
    protocol = environ.get(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) or environ.get(OTEL_EXPORTER_OTLP_PROTOCOL)
    if protocol:
        return protocol.strip()
    # The spec's default is http/protobuf, but Jaeger and most collector
    # examples hand users port 4317, which only speaks gRPC.
    return "grpc" if urlparse(endpoint).port == 4317 else "http/protobuf"


def _otlp_span_exporter(environ: Any) -> Any:
    endpoint = environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)
    if not endpoint:
        return None
    protocol = _otlp_protocol(environ, endpoint)
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter

        return HTTPExporter()
    from .config import ConfigError

    raise ConfigError(
        f"invalid value for environment variable {OTEL_EXPORTER_OTLP_PROTOCOL}: {protocol!r} "
        "(expected 'grpc' or 'http/protobuf')"
    )


def _otlp_metric_exporter(environ: Any) -> Any:
    endpoint = environ.get(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) or environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)
    if not endpoint:
        return None
    if _otlp_protocol(environ, endpoint) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HTTPExporter

    return HTTPExporter()


def _exporters_of(provider: TracerProvider) -> list[Any]:
    """Exporters behind the provider's processors, as far as the SDK lets us see."""
    found = []
    for processor in getattr(provider._active_span_processor, "_span_processors", ()):  # noqa: SLF001
        inner = getattr(processor, "_batch_processor", processor)
        exporter = getattr(inner, "_exporter", None) or getattr(inner, "span_exporter", None)
        if exporter is not None:
            found.append(exporter)
    return found


def _has_otlp_exporter(provider: TracerProvider) -> bool:
    # Under opentelemetry-instrument (or an app that set up its own OTLP export)
    # a second OTLP exporter would send every span twice.
    return any(type(e).__module__.startswith("opentelemetry.exporter.otlp") for e in _exporters_of(provider))


def configure(config: Any = None, *, rank: int | None = None, role: str | None = None,
              tracer_provider: TracerProvider | None = None,
              meter_provider: MeterProvider | None = None, **overrides: Any) -> None:
    environ = os.environ
    overrides = dict(overrides)
    if rank is not None:
        overrides["rank"] = rank
    if role is not None:
        overrides["role"] = role
    settings = resolve(config, overrides, environ)
    with _lock:
        if STATE.configured:
            shutdown()
        STATE.settings = settings
        STATE.configured = True
        if not settings.enabled or environ.get(OTEL_SDK_DISABLED, "").strip().lower() == "true":
            return
        comps = Components()
        provider = tracer_provider
        if provider is None:
            current = trace_api.get_tracer_provider()
            if isinstance(current, TracerProvider):
                provider = current
        if provider is None:
            provider = TracerProvider(resource=_resource(settings, environ), shutdown_on_exit=False)
            comps.owns_provider = True
            trace_api.set_tracer_provider(provider)
            if trace_api.get_tracer_provider() is not provider:
                # The global provider can be set once per process; a second
                # configure() keeps its own provider private.
                logger.debug("otel_rl: global tracer provider already set; using a private one")
        comps.provider = provider
        resource = provider.resource if comps.owns_provider else provider.resource.merge(
            Resource({k: v for k, v in _resource(settings, environ).attributes.items()
                      if k != "service.name"}))

        delegates: list[SpanProcessor] = [BaggageSpanProcessor()]
        batch_hooks = []
        if settings.file_export:
            from .file_exporter import ChromeTraceFileExporter, InPlaceBatchProcessor

            comps.file_processor = InPlaceBatchProcessor(
                ChromeTraceFileExporter(settings.file_path(keys.TRACES_FILE)))
            delegates.append(comps.file_processor)
            batch_hooks.append(comps.file_processor.flush_batch)
        exporter = None if _has_otlp_exporter(provider) else _otlp_span_exporter(environ)
        if exporter is not None:
            queue = None if environ.get(OTEL_BSP_MAX_QUEUE_SIZE) else DEFAULT_BSP_QUEUE
            comps.otlp_processor = BatchSpanProcessor(exporter, max_queue_size=queue)
            delegates.append(comps.otlp_processor)
        hook = getattr(provider, "_otel_rl_hook", None)
        if hook is None:
            hook = ProviderHook()
            provider.add_span_processor(hook)
            provider._otel_rl_hook = hook  # type: ignore[attr-defined]
        hook.delegates = tuple(delegates)
        comps.hook = hook

        metrics = None
        if settings.session_tracer:
            if meter_provider is None:
                readers = []
                metric_exporter = _otlp_metric_exporter(environ)
                if metric_exporter is not None:
                    readers.append(PeriodicExportingMetricReader(metric_exporter))
                else:
                    readers.append(PeriodicExportingMetricReader(
                        JsonlMetricExporter(settings.file_path(keys.METRICS_FILE)),
                        export_interval_millis=60_000))
                meter_provider = MeterProvider(metric_readers=readers, resource=resource,
                                               shutdown_on_exit=False)
                comps.meter_provider = meter_provider
            metrics = SessionMetrics(meter_provider.get_meter(keys.INSTRUMENTATION_NAME))
            records = JsonlAppender(settings.file_path(keys.SESSIONS_FILE),
                                    settings.flush_threshold, kind="session_records")
            sink = comps.session_processor = SessionSpanProcessor(
                provider._active_span_processor,  # noqa: SLF001 - every processor of the provider
                rank=settings.rank, role=settings.role, records=records, metrics=metrics,
                max_pending_sessions=settings.max_pending_sessions)
        else:
            sink = provider._active_span_processor  # noqa: SLF001
        comps.pipeline = Pipeline(
            sink, resource, provider.sampler,
            max_queue_size=settings.max_queue_size,
            export_interval_ms=settings.export_interval_ms,
            batch_hooks=batch_hooks,
        )
        STATE.components = comps
        STATE.pipeline = comps.pipeline
        STATE.tracer = LeanTracer(comps.pipeline)
        STATE.registry = Registry(comps.pipeline, settings.max_pending_sessions)
        from ..sessions import _PHASES

        STATE.registry.phase_options.update(_PHASES)
        STATE.enabled = True
        STATE.sessions_on = settings.session_tracer
        STATE.scopes_on = settings.profile_steps is None
        _register_atexit()


def save(step: int | None = None, force: bool = False) -> None:
    settings = STATE.settings
    comps: Components | None = STATE.components
    if comps is None or settings is None:
        return
    if not force and step is not None and step % settings.save_interval != 0:
        return
    flush(settings.shutdown_timeout_ms / 1000.0)


def flush(timeout_s: float) -> bool:
    comps: Components | None = STATE.components
    if comps is None:
        return True
    ok = comps.pipeline.flush(timeout_s)
    if comps.session_processor is not None:
        comps.session_processor.flush()
    if comps.otlp_processor is not None:
        ok = comps.otlp_processor.force_flush(int(timeout_s * 1000)) and ok
    if comps.meter_provider is not None:
        try:
            comps.meter_provider.force_flush(int(timeout_s * 1000))
        except Exception as exc:  # noqa: BLE001
            guard.report("metrics_error", "metrics flush failed: %r", exc)
    return ok


def shutdown() -> None:
    with _lock:
        comps: Components | None = STATE.components
        settings = STATE.settings
        STATE.enabled = STATE.scopes_on = STATE.sessions_on = False
        STATE.configured = False
        if comps is None:
            return
        timeout_s = settings.shutdown_timeout_ms / 1000.0 if settings else 5.0
        if STATE.registry is not None:
            STATE.registry.close_all()
        comps.pipeline.shutdown(timeout_s)
        if comps.session_processor is not None:
            comps.session_processor.shutdown()
        if comps.hook is not None:
            comps.hook.delegates = ()
        if comps.file_processor is not None:
            comps.file_processor.shutdown()
        if comps.otlp_processor is not None:
            _bounded(comps.otlp_processor.shutdown, timeout_s)
        if comps.meter_provider is not None:
            _bounded(comps.meter_provider.shutdown, timeout_s)
        if comps.owns_provider and comps.provider is not None:
            comps.provider.force_flush(int(timeout_s * 1000))
        STATE.components = STATE.pipeline = STATE.tracer = STATE.registry = None


def _bounded(fn: Any, timeout_s: float) -> None:
    """Runs a shutdown step on a helper thread so an unreachable collector
    cannot stall process exit beyond ``timeout_s``."""
    thread = threading.Thread(target=fn, name="otel_rl-shutdown", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        guard.report("shutdown_timeout", "an exporter did not shut down within %.1fs", timeout_s)


_atexit_registered = False


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_atexit_shutdown)
        _atexit_registered = True


def _atexit_shutdown() -> None:
    try:
        shutdown()
    except Exception as exc:  # noqa: BLE001 - exit must not fail because of telemetry
        logger.warning("otel_rl: shutdown at exit failed: %r", exc)


def get_tracer() -> Any:
    if STATE.tracer is not None:
        return STATE.tracer
    return trace_api.get_tracer(keys.INSTRUMENTATION_NAME)


def metrics_meter() -> Any:
    comps: Components | None = STATE.components
    if comps is not None and comps.meter_provider is not None:
        return comps.meter_provider.get_meter(keys.INSTRUMENTATION_NAME)
    return metrics_api.get_meter(keys.INSTRUMENTATION_NAME)
