"""A metric exporter writing OTLP-shaped JSON lines when no collector is configured."""

from __future__ import annotations

from typing import Any

import orjson
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from .jsonl import JsonlAppender


class JsonlMetricExporter(MetricExporter):
    """Appends each export as one line: the SDK's JSON form of ``MetricsData``."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._out = JsonlAppender(path, kind="metrics")

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        self._out.add(orjson.loads(metrics_data.to_json(indent=None)))
        return MetricExportResult.SUCCESS if self._out.flush() else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._out.flush()

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._out.close()
