"""otel_rl's place in an OpenTelemetry TracerProvider: the one processor it adds, and what it can
see of the processors and exporters already there."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from .. import diagnostics, guard, keys
from ..recording.ids import id_value


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

    @classmethod
    def of(cls, provider: TracerProvider) -> ProviderHook:
        """The provider's hook, added the first time otel_rl configures on it."""
        hook = getattr(provider, "_otel_rl_hook", None)
        if hook is None:
            hook = cls()
            provider.add_span_processor(hook)
            provider._otel_rl_hook = hook  # type: ignore[attr-defined]
        return hook

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        for processor in self.delegates:
            try:
                processor.on_start(span, parent_context=parent_context)
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.PROCESSOR_ERROR, "span processor failed on start: %r", exc)

    def on_end(self, span: Any) -> None:
        for processor in self.delegates:
            try:
                processor.on_end(span)
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.PROCESSOR_ERROR, "span processor failed on end: %r", exc)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in self.delegates)


class ForwardingProcessor(SpanProcessor):
    """In process mode, ships spans made by other instrumentation to the
    exporter process along with otel_rl's own."""

    def __init__(self, pipeline: Any) -> None:
        self._pipeline = pipeline

    def on_end(self, span: Any) -> None:
        self._pipeline.enqueue(span)


def processors_of(provider: TracerProvider) -> tuple[Any, ...]:
    """The span processors the provider runs, as far as the SDK lets us see."""
    return getattr(provider._active_span_processor, "_span_processors", ())  # noqa: SLF001


def exporters_of(provider: TracerProvider) -> list[Any]:
    """Exporters behind the provider's processors, as far as the SDK lets us see."""
    found = []
    for processor in processors_of(provider):
        inner = getattr(processor, "_batch_processor", processor)
        exporter = getattr(inner, "_exporter", None) or getattr(inner, "span_exporter", None)
        if exporter is not None:
            found.append(exporter)
    return found


def has_otlp_exporter(provider: TracerProvider) -> bool:
    """Whether the provider already exports over OTLP."""
    # Under opentelemetry-instrument (or an app that set up its own OTLP export)
    # a second OTLP exporter would send every span twice.
    return any(type(e).__module__.startswith("opentelemetry.exporter.otlp") for e in exporters_of(provider))
