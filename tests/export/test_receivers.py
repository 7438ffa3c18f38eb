"""The in-test OTLP receivers decode what the stock OpenTelemetry SDK exports.

These tests use only the upstream SDK and exporters (no otel_rl), so a
failure here points at the receivers, not at the code they are used to test.
Providers are always passed explicitly and shut down by the test; nothing is
installed globally.
"""

import socket
import time
import urllib.error
import urllib.request

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode
from receivers import GrpcReceiver, HttpReceiver, any_value_to_python
from support import make_span

RESOURCE_ATTRS = {"service.name": "receiver-spec", "deployment.environment": "test"}
SCOPE = "receiver-spec"

PARENT_ATTRS = {
    "rl.algo": "ppo",
    "rl.on_policy": True,
    "rl.num_envs": 8,
    "rl.learning_rate": 0.0003,
}
CHILD_ATTRS = {
    "rl.env_ids": ["cartpole-0", "cartpole-1"],
    "rl.dones": [False, True],
    "rl.steps": [10, 20, 30],
    "rl.rewards": [0.5, -1.25],
}
EVENT_ATTRS = {"step": 3, "loss": 0.25, "note": "checkpoint saved", "ok": True}
EVENT_TIME_NS = 1_700_000_000_123_456_789

# A span in some other trace that the child links to.
LINKED_CONTEXT = SpanContext(
    trace_id=0x0AF7651916CD43DD8448EB211C80319C,
    span_id=0x00F067AA0BA902B7,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
)
LINK_ATTRS = {"link.reason": "retry of"}

# The OTLP exporter marks every span "is_remote flag known"; both spans here have local (or no) parents.
LOCAL_PARENT_FLAGS = trace_pb2.SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK

# Far longer than any test: metrics are exported only by force_flush().
NO_PERIODIC_EXPORT_MS = 600_000


# ---------------------------------------------------------------- helpers


def tracer_provider(processor) -> TracerProvider:
    provider = TracerProvider(resource=Resource(RESOURCE_ATTRS))
    provider.add_span_processor(processor)
    return provider


def record_parent_and_child(provider: TracerProvider):
    """Record a SERVER parent and an INTERNAL child; return both SDK spans (ended)."""
    tracer = provider.get_tracer(SCOPE)
    with tracer.start_as_current_span("rollout", kind=SpanKind.SERVER, attributes=PARENT_ATTRS) as parent:
        with tracer.start_as_current_span(
            "env.step", attributes=CHILD_ATTRS, links=[Link(LINKED_CONTEXT, LINK_ATTRS)]
        ) as child:
            child.add_event("checkpoint", EVENT_ATTRS, timestamp=EVENT_TIME_NS)
            child.set_status(Status(StatusCode.ERROR, "env crashed"))
        parent.set_status(Status(StatusCode.OK))
    return parent, child


def expected_span_dicts(parent, child) -> list[dict]:
    """What the receiver must produce for record_parent_and_child(); ids and times come from the SDK."""
    trace_id = f"{parent.context.trace_id:032x}"
    return [
        {
            "name": "env.step",
            "trace_id": trace_id,
            "span_id": f"{child.context.span_id:016x}",
            "parent_span_id": f"{parent.context.span_id:016x}",
            "kind": "SPAN_KIND_INTERNAL",
            "start_ns": child.start_time,
            "end_ns": child.end_time,
            "attributes": CHILD_ATTRS,
            "events": [{"name": "checkpoint", "time_ns": EVENT_TIME_NS, "attributes": EVENT_ATTRS}],
            "links": [
                {
                    "trace_id": "0af7651916cd43dd8448eb211c80319c",
                    "span_id": "00f067aa0ba902b7",
                    "attributes": LINK_ATTRS,
                }
            ],
            "status": {"code": "STATUS_CODE_ERROR", "message": "env crashed"},
            "resource": RESOURCE_ATTRS,
            "scope": SCOPE,
            "flags": LOCAL_PARENT_FLAGS,
        },
        {
            "name": "rollout",
            "trace_id": trace_id,
            "span_id": f"{parent.context.span_id:016x}",
            "parent_span_id": None,
            "kind": "SPAN_KIND_SERVER",
            "start_ns": parent.start_time,
            "end_ns": parent.end_time,
            "attributes": PARENT_ATTRS,
            "events": [],
            "links": [],
            "status": {"code": "STATUS_CODE_OK", "message": ""},
            "resource": RESOURCE_ATTRS,
            "scope": SCOPE,
            "flags": LOCAL_PARENT_FLAGS,
        },
    ]


def value_types(value):
    """Replace every scalar by its type name, so 1, 1.0 and True compare different."""
    if isinstance(value, dict):
        return {key: value_types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [value_types(item) for item in value]
    return type(value).__name__


def attribute_types(span_dicts: list[dict]) -> list:
    return [
        (span["attributes"], [event["attributes"] for event in span["events"]], [link["attributes"] for link in span["links"]])
        for span in value_types(span_dicts)
    ]


def meter_provider(exporter) -> MeterProvider:
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=NO_PERIODIC_EXPORT_MS)
    return MeterProvider(resource=Resource(RESOURCE_ATTRS), metric_readers=[reader])


def record_counter_and_histogram(provider: MeterProvider) -> None:
    meter = provider.get_meter(SCOPE)
    episodes = meter.create_counter("rl.episodes", unit="{episode}")
    episodes.add(3, {"env": "cartpole"})
    episodes.add(2, {"env": "cartpole"})
    step_time = meter.create_histogram("rl.step.duration", unit="s", explicit_bucket_boundaries_advisory=[1.0, 5.0, 10.0])
    step_time.record(0.5, {"env": "cartpole"})
    step_time.record(7.0, {"env": "cartpole"})


EXPECTED_COUNTER_POINT = {
    "name": "rl.episodes",
    "unit": "{episode}",
    "type": "sum",
    "attributes": {"env": "cartpole"},
    "value": 5,
    "resource": RESOURCE_ATTRS,
    "scope": SCOPE,
}
EXPECTED_HISTOGRAM_POINT = {
    "name": "rl.step.duration",
    "unit": "s",
    "type": "histogram",
    "attributes": {"env": "cartpole"},
    "count": 2,
    "sum": 7.5,
    "bucket_counts": [1, 0, 1, 0],
    "explicit_bounds": [1.0, 5.0, 10.0],
    "resource": RESOURCE_ATTRS,
    "scope": SCOPE,
}


def points_named(points: list[dict], *names: str) -> list[dict]:
    return [point for point in points if point["name"] in names]


def finished_span(name: str):
    """An ended span of the receiver-spec resource and scope."""
    return make_span(name, resource=Resource(RESOURCE_ATTRS), scope=SCOPE, thread=None)


def export_directly(exporter, span) -> SpanExportResult:
    try:
        return exporter.export([span])
    finally:
        exporter.shutdown()


def span_exporter(receiver, **kwargs):
    """The SDK's span exporter of the receiver's protocol, pointed at it."""
    if receiver.protocol == "grpc":
        return GrpcSpanExporter(endpoint=receiver.endpoint, insecure=True, **kwargs)
    return HttpSpanExporter(endpoint=receiver.traces_endpoint, **kwargs)


def metric_exporter(receiver):
    """The SDK's metric exporter of the receiver's protocol, pointed at it."""
    if receiver.protocol == "grpc":
        return GrpcMetricExporter(endpoint=receiver.endpoint, insecure=True)
    return HttpMetricExporter(endpoint=receiver.metrics_endpoint)


def export_one_span_over_http(receiver: HttpReceiver, **exporter_kwargs) -> SpanExportResult:
    exporter = HttpSpanExporter(endpoint=receiver.traces_endpoint, timeout=2, **exporter_kwargs)
    return export_directly(exporter, finished_span("one"))


def refuses_connections(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) != 0


# ---------------------------------------------------------------- spans


@pytest.mark.parametrize("processor", [SimpleSpanProcessor, BatchSpanProcessor])
def test_receiver_decodes_parent_and_child_spans(otlp_receiver, processor):
    provider = tracer_provider(processor(span_exporter(otlp_receiver)))
    try:
        parent, child = record_parent_and_child(provider)
        assert provider.force_flush(5_000)
        received = otlp_receiver.wait_for_spans(2, timeout=5)
    finally:
        provider.shutdown()

    assert received == expected_span_dicts(parent, child)


def test_receiver_keeps_python_types_of_span_attribute_values(otlp_receiver):
    provider = tracer_provider(SimpleSpanProcessor(span_exporter(otlp_receiver)))
    try:
        parent, child = record_parent_and_child(provider)
        received = otlp_receiver.wait_for_spans(2, timeout=5)
    finally:
        provider.shutdown()

    assert attribute_types(received) == attribute_types(expected_span_dicts(parent, child))


def test_receiver_keeps_each_accepted_request_as_its_protobuf_message(grpc_receiver):
    provider = tracer_provider(SimpleSpanProcessor(GrpcSpanExporter(endpoint=grpc_receiver.endpoint, insecure=True)))
    try:
        record_parent_and_child(provider)
        grpc_receiver.wait_for_spans(2, timeout=5)
    finally:
        provider.shutdown()

    requests = grpc_receiver.trace_requests
    assert [type(r).__name__ for r in requests] == ["ExportTraceServiceRequest"] * 2  # one per span
    assert [r.resource_spans[0].scope_spans[0].spans[0].name for r in requests] == ["env.step", "rollout"]
    assert grpc_receiver.export_calls == 2


# ---------------------------------------------------------------- metrics


def test_receiver_collects_counter_and_histogram_points(otlp_receiver):
    provider = meter_provider(metric_exporter(otlp_receiver))
    try:
        record_counter_and_histogram(provider)
        assert provider.force_flush(5_000)
        points = otlp_receiver.wait_for_metrics({"rl.episodes", "rl.step.duration"}, timeout=5)
    finally:
        provider.shutdown()

    assert points_named(points, "rl.episodes", "rl.step.duration") == [EXPECTED_COUNTER_POINT, EXPECTED_HISTOGRAM_POINT]


def test_wait_for_metrics_accepts_a_predicate_over_metric_names(grpc_receiver):
    provider = meter_provider(GrpcMetricExporter(endpoint=grpc_receiver.endpoint, insecure=True))
    try:
        record_counter_and_histogram(provider)
        provider.force_flush(5_000)
        points = grpc_receiver.wait_for_metrics(lambda names: any(n.startswith("rl.") for n in names), timeout=5)
    finally:
        provider.shutdown()

    assert {point["name"] for point in points} >= {"rl.episodes", "rl.step.duration"}


# ---------------------------------------------------------------- HTTP details


@pytest.mark.parametrize(
    ("compression", "content_encoding"),
    [(Compression.Gzip, "gzip"), (Compression.Deflate, "deflate")],
)
def test_http_receiver_decodes_compressed_exports(http_receiver, compression, content_encoding):
    result = export_one_span_over_http(http_receiver, compression=compression)

    assert result is SpanExportResult.SUCCESS
    assert [span["name"] for span in http_receiver.spans()] == ["one"]
    assert http_receiver.headers_seen[0]["content-encoding"] == content_encoding


def test_http_receiver_records_request_headers(http_receiver):
    export_one_span_over_http(http_receiver, headers={"x-api-key": "secret"})

    assert http_receiver.headers_seen[0]["x-api-key"] == "secret"
    assert http_receiver.headers_seen[0]["content-type"] == "application/x-protobuf"


def test_http_receiver_answers_404_for_unknown_paths(http_receiver):
    request = urllib.request.Request(
        http_receiver.endpoint + "/v1/logs",
        data=b"",
        headers={"Content-Type": "application/x-protobuf"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=2)
    raised.value.close()

    assert raised.value.code == 404
    assert http_receiver.export_calls == 0


# ---------------------------------------------------------------- fault knobs


#: A failure of each protocol that its exporter does not retry.
NOT_RETRIED = {"grpc": grpc.StatusCode.INVALID_ARGUMENT, "http/protobuf": 400}  # 4xx other than 429


def test_receiver_fail_with_rejects_exports_without_recording_them(otlp_receiver):
    otlp_receiver.fail_with = NOT_RETRIED[otlp_receiver.protocol]
    result = export_directly(span_exporter(otlp_receiver, timeout=2), finished_span("rejected"))

    assert result is SpanExportResult.FAILURE
    assert otlp_receiver.export_calls == 1
    assert otlp_receiver.trace_requests == []


def test_delay_s_holds_each_export_before_answering(otlp_receiver):
    otlp_receiver.delay_s = 0.3
    provider = tracer_provider(SimpleSpanProcessor(span_exporter(otlp_receiver, timeout=5)))
    try:
        started = time.monotonic()
        with provider.get_tracer(SCOPE).start_as_current_span("slow"):
            pass
        elapsed = time.monotonic() - started
    finally:
        provider.shutdown()

    assert elapsed >= 0.3
    assert [span["name"] for span in otlp_receiver.spans()] == ["slow"]


def test_wait_for_spans_raises_assertion_error_naming_what_arrived(grpc_receiver):
    with pytest.raises(AssertionError, match=r"expected at least 1 span\(s\) within 0.1s, got 0"):
        grpc_receiver.wait_for_spans(1, timeout=0.1)


def test_wait_for_metrics_raises_assertion_error_naming_missing_metrics(http_receiver):
    with pytest.raises(AssertionError, match=r"expected metrics \['rl.episodes'\] within 0.1s, got \[\]"):
        http_receiver.wait_for_metrics({"rl.episodes"}, timeout=0.1)


# ---------------------------------------------------------------- lifecycle


@pytest.mark.parametrize("receiver_class", [GrpcReceiver, HttpReceiver])
def test_stopped_receiver_refuses_connections(receiver_class):
    receiver = receiver_class().start()
    port = receiver.port
    receiver.stop()

    assert refuses_connections(port)


@pytest.mark.parametrize("receiver_class", [GrpcReceiver, HttpReceiver])
def test_restarted_receiver_listens_on_the_same_port(receiver_class):
    receiver = receiver_class().start()
    port = receiver.port
    receiver.stop()
    try:
        receiver.start()
        assert receiver.port == port
        assert not refuses_connections(port)
    finally:
        receiver.stop()


# ---------------------------------------------------------------- AnyValue


def test_any_value_to_python_converts_nested_values_and_bytes():
    value = common_pb2.AnyValue(
        kvlist_value=common_pb2.KeyValueList(
            values=[
                common_pb2.KeyValue(key="blob", value=common_pb2.AnyValue(bytes_value=b"\x00\x01")),
                common_pb2.KeyValue(
                    key="mixed",
                    value=common_pb2.AnyValue(
                        array_value=common_pb2.ArrayValue(
                            values=[common_pb2.AnyValue(int_value=1), common_pb2.AnyValue(string_value="two")]
                        )
                    ),
                ),
                common_pb2.KeyValue(key="unset", value=common_pb2.AnyValue()),
            ]
        )
    )

    assert any_value_to_python(value) == {"blob": b"\x00\x01", "mixed": [1, "two"], "unset": None}
