"""otel_rl's OTLP/HTTP exporter sends the request the SDK's exporter sends, over the real wire."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.status import Status, StatusCode
from receivers import HttpReceiver

from otel_rl._internal.export.http import HttpSpanExporter
from support import SpanFactory

RESOURCE = Resource({"service.name": "trainer", "rl.rank": 1})


def _spans():
    spans = SpanFactory(RESOURCE)
    root = spans.span("step", 0, 100, attrs={"rl.step": 3, "rl.args.lr": 1e-4, "tags": ("a", "b")})
    child = spans.span("generate", 10, 50, root, kind=SpanKind.CLIENT,
                       events=(Event("token", {"n": 1}, 1_700_000_000_000_020_000),),
                       links=(Link(root.context, {"why": "consumed"}),),
                       status=Status(StatusCode.ERROR, "boom"))
    return [root, child]


def _received(exporter_cls, **options):
    with HttpReceiver() as receiver:
        exporter = exporter_cls(endpoint=receiver.traces_endpoint, timeout=5, **options)
        try:
            result = exporter.export(_spans())
        finally:
            exporter.shutdown()
        return result, receiver.trace_requests


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_the_request_equals_the_sdk_exporters(compression):
    ours, ours_requests = _received(HttpSpanExporter, compression=compression)
    sdk, sdk_requests = _received(OTLPSpanExporter, compression=compression)
    assert ours is sdk is SpanExportResult.SUCCESS
    assert len(ours_requests) == 1
    assert ours_requests == sdk_requests


def test_a_request_over_the_size_limit_is_dropped_as_the_sdk_drops_it():
    ours, ours_requests = _received(HttpSpanExporter, max_request_size=10)
    sdk, sdk_requests = _received(OTLPSpanExporter, max_request_size=10)
    assert ours is sdk is SpanExportResult.FAILURE
    assert ours_requests == sdk_requests == []


def test_a_refusing_collector_is_a_failed_export():
    with HttpReceiver(fail_with=400) as receiver:
        exporter = HttpSpanExporter(endpoint=receiver.traces_endpoint, timeout=5)
        try:
            assert exporter.export(_spans()) is SpanExportResult.FAILURE
        finally:
            exporter.shutdown()
        assert receiver.export_calls == 1


def test_the_installed_sdk_takes_the_one_pass_encoder():
    # Older SDK releases without an HTTP client object keep their own export.
    exporter = HttpSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
    try:
        assert exporter._send is not None
    finally:
        exporter.shutdown()
