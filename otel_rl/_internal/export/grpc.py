"""The SDK's OTLP/gRPC span exporter, fed by otel_rl's one-pass encoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

from ..encode.otlp import OtlpTraceEncoder


class GrpcSpanExporter(OTLPSpanExporter):
    """``OTLPSpanExporter`` (endpoint, headers, TLS, compression, timeout and
    retries from the standard ``OTEL_EXPORTER_OTLP_*`` settings) whose request
    is encoded by :class:`OtlpTraceEncoder` instead of the SDK's encoder.

    ``_translate_data`` is the exporter's documented extension point between
    spans and the request; the bytes are parsed back into the request message
    (in C, well under a microsecond per span) so the gRPC stub sends it as usual.
    """

    #: It takes :class:`~..encode.otlp.EncodedSpan` objects (its encoder copies their bytes).
    takes_encoded_spans = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._encoder = OtlpTraceEncoder()

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        return ExportTraceServiceRequest.FromString(self._encoder.encode(data))
