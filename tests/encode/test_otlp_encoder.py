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


# --- records' spans, written by the compiled encoder ----------------------------------------------
from otel_rl._internal.encode.otlp import EncodedSpan, record_span  # noqa: E402
from otel_rl._internal.encode.readable import ReadableBuilder  # noqa: E402
from otel_rl._internal.recording import record  # noqa: E402

_BUILDER = ReadableBuilder(RESOURCE)
flat_values = st.one_of(
    st.booleans(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.floats(),
    st.text(max_size=40),
)


@st.composite
def span_records(draw) -> tuple:
    ids = st.integers(0, (1 << 64) - 1)
    fields = [None] * record.FIELDS
    fields[record.NAME] = draw(st.text(max_size=12))
    fields[record.TRACE_ID] = draw(st.integers(1, (1 << 128) - 1))
    fields[record.SPAN_ID] = draw(st.integers(1, (1 << 64) - 1))
    fields[record.PARENT_ID] = draw(st.one_of(st.just(0), ids))
    fields[record.PARENT_REMOTE] = draw(st.booleans())
    fields[record.FLAGS] = 1
    fields[record.TRACE_STATE] = draw(st.one_of(st.none(), st.none(), st.just("vendor=1")))
    fields[record.START] = draw(st.integers(0, (1 << 63) - 1))
    fields[record.END] = draw(st.integers(0, (1 << 63) - 1))
    fields[record.KIND] = draw(st.integers(0, 4))
    fields[record.STATUS] = draw(st.integers(0, 2))
    fields[record.STATUS_DESC] = draw(st.one_of(st.none(), st.just(""), st.text(max_size=8)))
    return tuple(fields)


def _python_field(rec: tuple, attrs: dict) -> bytes:
    return OtlpTraceEncoder()._span(_BUILDER.span(rec, attrs))


compiled = pytest.mark.skipif(record_span is None, reason="built without a C compiler")


@compiled
@settings(max_examples=300, deadline=None)
@given(span_records(), st.dictionaries(st.text(min_size=1, max_size=12), flat_values, max_size=8))
def test_a_records_span_field_is_the_python_encoders_bytes(rec, attrs):
    encoded = record_span(rec, attrs)
    if encoded is None:
        # Left to the SDK span: a trace state, a description the SDK's Status drops, or
        # text that is not UTF-8.
        texts = [rec[record.NAME], *attrs, *(v for v in attrs.values() if isinstance(v, str))]
        assert (rec[record.TRACE_STATE] is not None
                or (rec[record.STATUS_DESC] and rec[record.STATUS] != StatusCode.ERROR.value)
                or any(not t.isascii() and not _encodes(t) for t in texts))
    else:
        assert encoded == _python_field(rec, attrs)


def _encodes(text: str) -> bool:
    try:
        text.encode()
        return True
    except UnicodeEncodeError:
        return False


@compiled
def test_a_plain_scopes_span_field_is_written_by_the_compiled_encoder():
    rec = [None] * record.FIELDS
    rec[record.NAME:record.END + 1] = ["step", 7, 9, 3, False, 1, None, 1_000, 2_000]
    rec[record.KIND], rec[record.STATUS] = 0, 0
    attrs = {"thread.id": 5, "thread.name": "main", "rl.args.lr": 1e-4, "rl.args.ok": True, "rl.args.tag": "a"}
    encoded = record_span(tuple(rec), attrs)
    assert encoded is not None and encoded == _python_field(tuple(rec), attrs)


@compiled
def test_encoded_spans_give_the_request_their_sdk_spans_give():
    scope = _BUILDER.own_scope
    recs = []
    for n in range(5):
        rec = [None] * record.FIELDS
        rec[record.NAME:record.END + 1] = [f"s{n}", 7 + n, 9 + n, 0, False, 1, None, 1_000 * n, 1_000 * n + 5]
        rec[record.KIND], rec[record.STATUS] = 0, 2 if n == 3 else 0
        rec[record.STATUS_DESC] = "boom" if n == 3 else None
        recs.append((tuple(rec), {"thread.id": 5, "n": n}))
    encoded = [EncodedSpan(record_span(rec, attrs), RESOURCE, scope) for rec, attrs in recs]
    sdk = [_BUILDER.span(rec, attrs) for rec, attrs in recs]
    assert OtlpTraceEncoder().encode(encoded) == OtlpTraceEncoder().encode(sdk)
    assert ExportTraceServiceRequest.FromString(OtlpTraceEncoder().encode(encoded)) == encode_spans(sdk)
