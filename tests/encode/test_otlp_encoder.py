"""otel_rl's one-pass OTLP encoder produces the SDK encoder's request, byte for byte in meaning."""

from __future__ import annotations

import math

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from otel_rl._internal import guard
from otel_rl._internal.encode.otlp import OtlpTraceEncoder
from support import SpanFactory

RESOURCE = Resource({"service.name": "trainer", "rl.rank": 3})
SCOPE = InstrumentationScope("otel_rl", "0.1.0")

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.floats(allow_nan=False),
    st.text(max_size=300),
    st.binary(max_size=20),
)
values = st.one_of(
    scalars,
    st.lists(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), max_size=4),
    st.lists(st.text(max_size=10), max_size=4),
    st.lists(st.floats(allow_nan=False), max_size=4),
    st.dictionaries(st.text(max_size=5), scalars, max_size=3),
)
attributes = st.dictionaries(st.text(min_size=1, max_size=20), values, max_size=8)


@pytest.fixture(autouse=True)
def _fresh_counters():
    # Encoding problems are reported to the process-wide diagnostics on purpose here;
    # later test modules must not see them.
    yield
    guard.clear()


_SPANS = SpanFactory(RESOURCE, thread=None, scope=SCOPE)


def _span(name="scope", *, trace_id=0x0AF7651916CD43DD8448EB211C80319C, span_id=0x00F067AA0BA902B7,
          state=TraceState(), **options):
    """A span with fixed ids and times (sub-microsecond parts included); ``options``
    as :meth:`support.SpanFactory.span` takes them."""
    return _SPANS.span(name, 123_456.789, 223_456.789,
                       context=SpanContext(trace_id, span_id, False, TraceFlags(1), state), **options)


def _mine(spans):
    return ExportTraceServiceRequest.FromString(OtlpTraceEncoder().encode(spans))


def test_a_plain_span_encodes_as_the_sdk_does():
    assert _mine([_span()]) == encode_spans([_span()])


@settings(max_examples=200, deadline=None)
@given(attributes)
def test_attributes_of_every_type_encode_as_the_sdk_does(attrs):
    spans = [_span(attrs=attrs)]
    assert _mine(spans) == encode_spans(spans)


@settings(max_examples=100, deadline=None)
@given(attributes, attributes)
def test_events_and_links_encode_as_the_sdk_does(event_attrs, link_attrs):
    remote = SpanContext(0x1234, 0x5678, True, TraceFlags(1))
    spans = [_span(events=[Event("exception", event_attrs, 1_700_000_000_200_000_000), Event("", None, 5)],
                   links=[Link(remote, link_attrs), Link(SpanContext(0x99, 0x98, False, TraceFlags(0)))])]
    assert _mine(spans) == encode_spans(spans)


def test_a_remote_parent_sets_the_remote_flag_as_the_sdk_does():
    parent = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0x1111, True, TraceFlags(1))
    spans = [_span(parent=parent, kind=SpanKind.SERVER)]
    mine = _mine(spans)
    assert mine == encode_spans(spans)
    assert mine.resource_spans[0].scope_spans[0].spans[0].flags == 0x300


def test_status_kind_and_trace_state_encode_as_the_sdk_does():
    spans = [
        _span(status=Status(StatusCode.ERROR, "boom ✗"), kind=kind, state=TraceState([("vendor", "v1")]))
        for kind in SpanKind
    ] + [_span(status=Status(StatusCode.OK))]
    assert _mine(spans) == encode_spans(spans)


def test_dropped_counts_encode_as_the_sdk_does():
    attrs = BoundedAttributes(maxlen=2, attributes={"a": 1, "b": 2, "c": 3, "d": 4})
    spans = [_span(attrs=attrs)]
    mine = _mine(spans)
    assert mine == encode_spans(spans)
    assert mine.resource_spans[0].scope_spans[0].spans[0].dropped_attributes_count == 2


def test_spans_are_grouped_by_resource_and_scope_as_the_sdk_does():
    other_resource = Resource({"service.name": "rollout"}, schema_url="https://opentelemetry.io/schemas/1.21.0")
    other_scope = InstrumentationScope("httpx", "1.0", "https://opentelemetry.io/schemas/1.21.0",
                                       {"library": "httpx"})
    spans = [_span("a"), _span("b", resource=other_resource), _span("c", scope=other_scope),
             _span("d", scope=None), _span("e"),
             # an equal resource that is another object joins the first group
             _span("f", resource=Resource({"service.name": "trainer", "rl.rank": 3}))]
    assert _mine(spans) == encode_spans(spans)


def test_an_integer_beyond_int64_is_left_out_as_the_sdk_does():
    spans = [_span(attrs={"big": 1 << 70, "ok": 1})]
    mine = _mine(spans)
    assert mine == encode_spans(spans)
    assert [kv.key for kv in mine.resource_spans[0].scope_spans[0].spans[0].attributes] == ["ok"]


def test_repeated_values_come_from_the_cache_unchanged():
    encoder = OtlpTraceEncoder()
    spans = [_span(attrs={"thread.name": "MainThread", "rl.category": "compute", "step": i % 3,
                          "ok": i % 2 == 0, "lr": math.pi})
             for i in range(10)]
    first, second = encoder.encode(spans), encoder.encode(spans)
    assert first == second
    assert ExportTraceServiceRequest.FromString(first) == encode_spans(spans)


def test_text_with_a_lone_surrogate_is_escaped_in_that_value_and_the_span_kept():
    odd = b"caf\xff".decode("utf-8", "surrogateescape")  # undecodable bytes, as from os.listdir
    spans = [_span(odd, attrs={"path": odd, odd: 1, "paths": (odd, "ok"), "ok": "fine"},
                   events=(Event(odd, {"file": odd}, 1),),
                   status=Status(StatusCode.ERROR, odd)),
             _span("next", span_id=2)]
    encoded = _mine(spans).resource_spans[0].scope_spans[0].spans
    assert [s.name for s in encoded] == ["caf\\udcff", "next"]
    attrs = {kv.key: kv.value for kv in encoded[0].attributes}
    assert attrs["path"].string_value == "caf\\udcff"
    assert attrs["caf\\udcff"].int_value == 1
    assert [v.string_value for v in attrs["paths"].array_value.values] == ["caf\\udcff", "ok"]
    assert attrs["ok"].string_value == "fine"
    assert encoded[0].events[0].name == "caf\\udcff"
    assert encoded[0].events[0].attributes[0].value.string_value == "caf\\udcff"
    assert encoded[0].status.message == "caf\\udcff"
