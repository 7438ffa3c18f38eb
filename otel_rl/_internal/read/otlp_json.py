"""OTLP/JSON: ``ExportTraceServiceRequest`` objects, one per line or one per file (what the
OpenTelemetry Collector's file exporter writes), turned into SDK spans."""

from __future__ import annotations

import base64
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from .. import keys
from .checks import ID_TYPES, MAX_NS, bad_id
from .limits import InputLimits
from .lines import first_line
from .source import open_input

__all__ = ["OtlpReader", "is_trace_request", "pretty_printed_request", "span_problem", "spans_from_otlp_json"]

_KINDS = {
    0: SpanKind.INTERNAL, 1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER, 5: SpanKind.CONSUMER,
    "SPAN_KIND_UNSPECIFIED": SpanKind.INTERNAL, "SPAN_KIND_INTERNAL": SpanKind.INTERNAL,
    "SPAN_KIND_SERVER": SpanKind.SERVER, "SPAN_KIND_CLIENT": SpanKind.CLIENT,
    "SPAN_KIND_PRODUCER": SpanKind.PRODUCER, "SPAN_KIND_CONSUMER": SpanKind.CONSUMER,
}
_STATUS = {
    0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR,
    "STATUS_CODE_UNSET": StatusCode.UNSET, "STATUS_CODE_OK": StatusCode.OK,
    "STATUS_CODE_ERROR": StatusCode.ERROR,
}
_UNSET_STATUS = Status(StatusCode.UNSET)
# Span.flags bits 8 and 9 (OTLP 1.1+): whether, and that, the parent was remote.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_RESOURCE_IDS = (keys.RANK, keys.ROLE, keys.PROCESS_PID, keys.SERVICE_NAME)
_SPAN_IDS = (keys.TASK_ID, keys.SESSION_ID, keys.STEP, keys.REQUEST_ID, keys.THREAD_ID)


def _get(obj: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    # The OTLP/JSON spec mandates lowerCamelCase; protobuf JSON printers can also
    # emit the proto field names, and receivers are asked to accept both.
    value = obj.get(camel)
    if value is None:
        value = obj.get(snake, default)
    return value


def _any_value(value: dict[str, Any] | None) -> Any:
    if not value:
        return None
    for key, item in value.items():
        if key == "stringValue" or key == "string_value":
            return item
        if key == "intValue" or key == "int_value":
            return int(item)  # int64 is a JSON string in OTLP/JSON
        if key == "doubleValue" or key == "double_value":
            return float(item)  # also "NaN", "Infinity"
        if key == "boolValue" or key == "bool_value":
            return bool(item)
        if key == "arrayValue" or key == "array_value":
            return [_any_value(v) for v in (item or {}).get("values") or ()]
        if key == "kvlistValue" or key == "kvlist_value":
            return _attributes((item or {}).get("values"))
        if key == "bytesValue" or key == "bytes_value":
            return item  # base64 text; kept as such
    return None


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    if not items:
        return {}
    return {kv.get("key", ""): _any_value(kv.get("value")) for kv in items}


def _otlp_id(value: Any, size: int) -> int:
    if not value:
        return 0
    if len(value) == size * 2:
        try:
            return int(value, 16)
        except ValueError:
            pass
    # The protobuf JSON mapping writes bytes as base64; some exporters follow it.
    return int.from_bytes(base64.b64decode(value), "big")


def _otlp_int(value: Any) -> int:
    return int(value) if value is not None and value != "" else 0


class OtlpReader:
    """Builds ``ReadableSpan`` objects from OTLP/JSON, sharing resources and scopes across requests."""

    def __init__(self) -> None:
        self._resources: dict[bytes, Resource] = {}
        self._scopes: dict[tuple[str, str], InstrumentationScope] = {}

    def spans(self, request: dict[str, Any]) -> list[ReadableSpan]:
        """The spans of one parsed ``ExportTraceServiceRequest``, in request order.

        Raises:
            ValueError, TypeError, KeyError, AttributeError: The request is not OTLP/JSON.
        """
        out: list[ReadableSpan] = []
        for resource_spans in _get(request, "resourceSpans", "resource_spans") or ():
            resource_json = resource_spans.get("resource") or {}
            raw_attrs = resource_json.get("attributes") or []
            cache_key = orjson.dumps(raw_attrs)
            resource = self._resources.get(cache_key)
            if resource is None:
                if len(self._resources) >= 4096:
                    self._resources.clear()
                # The constructor, not Resource.create: no detectors, no defaults
                # mixed into someone else's resource.
                resource = self._resources[cache_key] = Resource(_attributes(raw_attrs))
            for scope_spans in _get(resource_spans, "scopeSpans", "scope_spans") or ():
                scope_json = scope_spans.get("scope") or {}
                scope_key = (scope_json.get("name") or "", scope_json.get("version") or "")
                scope = self._scopes.get(scope_key)
                if scope is None:
                    scope = self._scopes[scope_key] = InstrumentationScope(*scope_key)
                for span_json in scope_spans.get("spans") or ():
                    out.append(self._span(span_json, resource, scope))
        return out

    @staticmethod
    def _span(obj: dict[str, Any], resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
        trace_id = _otlp_id(_get(obj, "traceId", "trace_id"), 16)
        span_id = _otlp_id(_get(obj, "spanId", "span_id"), 8)
        parent_id = _otlp_id(_get(obj, "parentSpanId", "parent_span_id"), 8)
        kind = _KINDS.get(obj.get("kind", 0), SpanKind.INTERNAL)
        span_flags = _otlp_int(obj.get("flags"))
        # A span in an exported file was sampled, whether or not its flags say so.
        trace_flags = TraceFlags((span_flags & 0xFF) | TraceFlags.SAMPLED)
        parent = None
        if parent_id:
            if span_flags & _HAS_IS_REMOTE:
                remote = bool(span_flags & _IS_REMOTE)
            else:
                remote = kind is SpanKind.SERVER or kind is SpanKind.CONSUMER
            parent = SpanContext(trace_id, parent_id, remote, trace_flags)
        status_json = obj.get("status") or {}
        code = _STATUS.get(status_json.get("code", 0), StatusCode.UNSET)
        status = _UNSET_STATUS if code is StatusCode.UNSET else Status(code, status_json.get("message"))
        events = tuple(
            Event(ev.get("name", ""), _attributes(ev.get("attributes")),
                  _otlp_int(_get(ev, "timeUnixNano", "time_unix_nano")))
            for ev in obj.get("events") or ()
        )
        links = tuple(
            Link(SpanContext(_otlp_id(_get(ln, "traceId", "trace_id"), 16),
                             _otlp_id(_get(ln, "spanId", "span_id"), 8), True),
                 _attributes(ln.get("attributes")))
            for ln in obj.get("links") or ()
        )
        return ReadableSpan(
            name=obj.get("name", ""),
            context=SpanContext(trace_id, span_id, False, trace_flags),
            parent=parent,
            resource=resource,
            attributes=_attributes(obj.get("attributes")),
            events=events,
            links=links,
            kind=kind,
            status=status,
            start_time=_otlp_int(_get(obj, "startTimeUnixNano", "start_time_unix_nano")),
            end_time=_otlp_int(_get(obj, "endTimeUnixNano", "end_time_unix_nano")),
            instrumentation_scope=scope,
        )


def spans_from_otlp_json(request: dict[str, Any]) -> list[ReadableSpan]:
    """Builds SDK spans from one OTLP/JSON ``ExportTraceServiceRequest``.

    Args:
        request: The parsed JSON object (``{"resourceSpans": [...]}``).

    Returns:
        The spans, in request order, each with its resource and scope.
    """
    return OtlpReader().spans(request)


def is_trace_request(request: dict[str, Any]) -> bool:
    """Whether a parsed request holds spans (a collector may write metrics or logs to the same file)."""
    return "resourceSpans" in request or "resource_spans" in request


def pretty_printed_request(path: str, limits: InputLimits) -> tuple[bool, Any]:
    """``(True, request)`` when the file holds one request pretty-printed over many lines
    (parsed whole); ``(False, None)`` when it holds one request per line.

    Raises:
        orjson.JSONDecodeError: The pretty-printed request is not JSON.
        InputLimitError: A gzipped file expands past its bound.
    """
    with open_input(path, limits) as f:
        first = first_line(f, limits)
        if type(first) is bytes and not first.rstrip().endswith(b"}"):
            f.rewind()
            return True, orjson.loads(f.read_document())
    return False, None


def span_problem(span: ReadableSpan, *, thorough: bool = False) -> str | None:
    """Why an OTLP span read from JSON cannot be used, or ``None``.

    Args:
        span: The span.
        thorough: Also check every span and event attribute that identifies
            something (:func:`.checks.bad_id`) and that the times are dates:
            what a report keeps must be hashable and printable.

    Returns:
        What is wrong (a name or an id of the wrong JSON type, a time out of range).
    """
    if type(span.name) is not str:
        return "name is not a string"
    res = span.resource.attributes
    for key in _RESOURCE_IDS:
        if type(res.get(key)) not in ID_TYPES:
            return f"resource attribute {key} is not a string or number"
    attrs = span.attributes or {}
    for key in _SPAN_IDS:
        if type(attrs.get(key)) not in ID_TYPES:
            return f"{key} is not a string or number"
    for event in span.events:
        if type(event.name) is not str:
            return "an event name is not a string"
        attrs = event.attributes or {}
        for key in _SPAN_IDS:
            if type(attrs.get(key)) not in ID_TYPES:
                return f"event {event.name}: {key} is not a string or number"
    if not thorough:
        return None
    problem = bad_id(span.attributes or {})
    if problem:
        return problem
    for event in span.events:
        problem = bad_id(event.attributes or {})
        if problem:
            return f"event {event.name}: {problem}"
    if not (0 <= (span.start_time or 0) < MAX_NS and 0 <= (span.end_time or 0) < MAX_NS):
        return "startTimeUnixNano / endTimeUnixNano out of range"
    return None
