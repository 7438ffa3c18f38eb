"""A metric exporter writing OTLP-shaped JSON lines when no collector is configured."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from .. import diagnostics, guard
from .jsonl import JsonlAppender
from ..payload import INT64_MAX, INT64_MIN, utf8_text
from ..recording.ids import span_text, trace_text


class JsonlMetricExporter(MetricExporter):
    """Appends each export as one line: the SDK's JSON form of ``MetricsData``."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._out = JsonlAppender(path, kind="metrics")

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        try:
            # The standard parser: the SDK writes a NaN or infinite label or value
            # as a bare NaN / Infinity token, which strict JSON parsers refuse.
            # The line is written as strict JSON (NaN as null, text as UTF-8).
            self._out.add(_strict(_exemplar_ids(json.loads(metrics_data.to_json(indent=None)))))
        except Exception as exc:  # noqa: BLE001 - never into the SDK's reader thread
            guard.count(diagnostics.METRICS_LINES_LOST)
            guard.report(diagnostics.METRICS_WRITE_ERROR, "cannot write metrics to %s: %r", self._out.path, exc)
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS if self._out.flush() else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._out.flush()

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._out.close()


def _exemplar_ids(doc: dict[str, Any]) -> dict[str, Any]:
    """The SDK writes an exemplar's ids as decimal integers: here they become the hex text
    the trace file and the session records write, so that an exemplar finds its span there."""
    for resource in doc.get("resource_metrics", ()):
        for scope in resource.get("scope_metrics", ()):
            for metric in scope.get("metrics", ()):
                for point in (metric.get("data") or {}).get("data_points", ()):
                    for exemplar in point.get("exemplars") or ():
                        for key, text in (("span_id", span_text), ("trace_id", trace_text)):
                            if type(exemplar.get(key)) is int:
                                exemplar[key] = text(exemplar[key])
    return doc


def _strict(value: Any) -> Any:
    """Parsed SDK JSON (a few levels deep) as values orjson writes as they are:
    valid UTF-8 text, int64 integers (larger ones as their text), no NaN."""
    kind = type(value)
    if kind is str:
        return utf8_text(value)
    if kind is dict:
        return {utf8_text(k): _strict(v) for k, v in value.items()}
    if kind is list:
        return [_strict(v) for v in value]
    if kind is int and not INT64_MIN <= value <= INT64_MAX:
        return str(value)
    if kind is float and value != value:
        return None
    return value
