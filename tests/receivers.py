"""Real OTLP receivers for tests: a gRPC server and an HTTP server.

Both listen on 127.0.0.1 with an OS-assigned port, keep every export request
they accept as the decoded protobuf message, and turn those messages into
plain Python dicts (see ``span_to_dict`` and ``metric_points``) so tests can
compare them with ``==``.

Fault knobs (readable and writable while the receiver runs):

* ``delay_s``: every Export call waits this long before it is recorded and
  answered (a slow collector). ``stop()`` cuts the wait short.
* ``fail_with``: when not ``None``, every Export call is answered with this
  error (a ``grpc.StatusCode`` for ``GrpcReceiver``, an HTTP status ``int``
  for ``HttpReceiver``) and its payload is not recorded. ``export_calls``
  still counts it.

Usage::

    with GrpcReceiver() as receiver:
        exporter = OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True)
        ...
        spans = receiver.wait_for_spans(2)
"""

from __future__ import annotations

import gzip
import socket
import threading
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)
from opentelemetry.proto.trace.v1 import trace_pb2

TraceRequest = trace_service_pb2.ExportTraceServiceRequest
MetricsRequest = metrics_service_pb2.ExportMetricsServiceRequest

_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


# --------------------------------------------------------------------------
# Protobuf -> plain Python
# --------------------------------------------------------------------------


def any_value_to_python(value: Any) -> Any:
    """Convert an OTLP ``AnyValue`` to str/bool/int/float/bytes/list/dict.

    An ``AnyValue`` with nothing set becomes ``None``.
    """
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value_to_python(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return attributes_to_dict(value.kvlist_value.values)
    return getattr(value, which)


def attributes_to_dict(key_values: Iterable[Any]) -> dict[str, Any]:
    """Convert repeated OTLP ``KeyValue`` to a ``{key: python value}`` dict."""
    return {kv.key: any_value_to_python(kv.value) for kv in key_values}


def _hex_or_none(raw: bytes) -> str | None:
    return raw.hex() if raw else None


def span_to_dict(resource_attrs: dict[str, Any], scope_name: str, span_pb: Any) -> dict[str, Any]:
    """Flatten one OTLP ``Span`` into a plain dict (ids as lowercase hex)."""
    return {
        "name": span_pb.name,
        "trace_id": span_pb.trace_id.hex(),
        "span_id": span_pb.span_id.hex(),
        "parent_span_id": _hex_or_none(span_pb.parent_span_id),
        "kind": trace_pb2.Span.SpanKind.Name(span_pb.kind),
        "start_ns": int(span_pb.start_time_unix_nano),
        "end_ns": int(span_pb.end_time_unix_nano),
        "attributes": attributes_to_dict(span_pb.attributes),
        "events": [
            {
                "name": event.name,
                "time_ns": int(event.time_unix_nano),
                "attributes": attributes_to_dict(event.attributes),
            }
            for event in span_pb.events
        ],
        "links": [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "attributes": attributes_to_dict(link.attributes),
            }
            for link in span_pb.links
        ],
        "status": {
            "code": trace_pb2.Status.StatusCode.Name(span_pb.status.code),
            "message": span_pb.status.message,
        },
        "resource": dict(resource_attrs),
        "scope": scope_name,
        "flags": span_pb.flags,
    }


def spans_from_requests(requests: Iterable[Any]) -> list[dict[str, Any]]:
    """All spans of ``ExportTraceServiceRequest`` messages, in arrival order."""
    spans = []
    for request in requests:
        for resource_spans in request.resource_spans:
            resource = attributes_to_dict(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span_pb in scope_spans.spans:
                    spans.append(span_to_dict(resource, scope_spans.scope.name, span_pb))
    return spans


def _point_value(point: Any) -> int | float | None:
    which = point.WhichOneof("value")
    return None if which is None else getattr(point, which)


def _optional_sum(point: Any) -> float | None:
    return point.sum if point.HasField("sum") else None


def metric_points(requests: Iterable[Any]) -> list[dict[str, Any]]:
    """Flatten ``ExportMetricsServiceRequest`` messages into one dict per data point.

    Every dict has ``name``, ``unit``, ``type``, ``attributes``, ``resource``
    and ``scope``. ``type`` is ``"sum"`` or ``"gauge"`` (with ``value``) or
    ``"histogram"`` (with ``count``, ``sum``, ``bucket_counts``,
    ``explicit_bounds``). Exponential histograms and summaries appear as
    ``"exponential_histogram"`` / ``"summary"`` with ``count`` and ``sum``.
    """
    points = []
    for request in requests:
        for resource_metrics in request.resource_metrics:
            resource = attributes_to_dict(resource_metrics.resource.attributes)
            for scope_metrics in resource_metrics.scope_metrics:
                scope_name = scope_metrics.scope.name
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    if kind is None:
                        continue
                    for point in getattr(metric, kind).data_points:
                        entry: dict[str, Any] = {
                            "name": metric.name,
                            "unit": metric.unit,
                            "type": kind,
                            "attributes": attributes_to_dict(point.attributes),
                        }
                        if kind in ("sum", "gauge"):
                            entry["value"] = _point_value(point)
                        elif kind == "histogram":
                            entry["count"] = int(point.count)
                            entry["sum"] = _optional_sum(point)
                            entry["bucket_counts"] = [int(c) for c in point.bucket_counts]
                            entry["explicit_bounds"] = list(point.explicit_bounds)
                        else:
                            entry["count"] = int(point.count)
                            entry["sum"] = _optional_sum(point) if kind == "exponential_histogram" else point.sum
                        entry["resource"] = dict(resource)
                        entry["scope"] = scope_name
                        points.append(entry)
    return points


# --------------------------------------------------------------------------
# Shared storage and waiting
# --------------------------------------------------------------------------

NamesPredicate = Callable[[set], bool]


class _Receiver:
    """Storage, waiting and lifecycle shared by both receivers."""

    def __init__(self, port: int, delay_s: float, fail_with: Any) -> None:
        self.delay_s = delay_s
        self.fail_with = fail_with
        self._port = port
        self._started = False
        self._stopping = threading.Event()
        self._cond = threading.Condition()
        self._trace_requests: list[Any] = []
        self._metric_requests: list[Any] = []
        self._headers_seen: list[dict[str, str]] = []
        self._span_count = 0
        self._metric_names: set[str] = set()
        self._export_calls = 0

    # -- lifecycle (subclasses provide _serve / _shutdown) -----------------

    def start(self):
        """Start listening. After ``stop()`` this listens again on the same port."""
        if self._started:
            return self
        self._stopping.clear()
        self._port = self._serve(self._port)
        self._started = True
        return self

    def stop(self) -> None:
        """Stop listening and drop open connections. Safe to call twice."""
        if not self._started:
            return
        self._stopping.set()
        self._shutdown()
        self._started = False

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _serve(self, port: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _shutdown(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- addresses -----------------------------------------------------------

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError(f"{type(self).__name__} has no port yet; call start() first")
        return self._port

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what arrived (snapshots, safe to read from any thread) -------------

    @property
    def trace_requests(self) -> list[Any]:
        """Accepted ``ExportTraceServiceRequest`` messages (a copy)."""
        with self._cond:
            return list(self._trace_requests)

    @property
    def metric_requests(self) -> list[Any]:
        """Accepted ``ExportMetricsServiceRequest`` messages (a copy)."""
        with self._cond:
            return list(self._metric_requests)

    @property
    def headers_seen(self) -> list[dict[str, str]]:
        """Request headers (HTTP) or metadata (gRPC) of every Export call, lower-case keys."""
        with self._cond:
            return [dict(h) for h in self._headers_seen]

    @property
    def export_calls(self) -> int:
        """Export calls that reached the receiver, including rejected ones."""
        with self._cond:
            return self._export_calls

    def spans(self) -> list[dict[str, Any]]:
        return spans_from_requests(self.trace_requests)

    def metric_points(self) -> list[dict[str, Any]]:
        return metric_points(self.metric_requests)

    def metric_names(self) -> set[str]:
        with self._cond:
            return set(self._metric_names)

    def clear(self) -> None:
        """Forget everything received so far."""
        with self._cond:
            self._trace_requests.clear()
            self._metric_requests.clear()
            self._headers_seen.clear()
            self._span_count = 0
            self._metric_names.clear()
            self._export_calls = 0

    def wait_for_spans(self, n: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Block until at least ``n`` spans arrived; return ``spans()``."""
        with self._cond:
            arrived = self._cond.wait_for(lambda: self._span_count >= n, timeout)
            count = self._span_count
        if not arrived:
            names = [span["name"] for span in self.spans()]
            raise AssertionError(
                f"{type(self).__name__} at {self.endpoint}: expected at least {n} span(s) "
                f"within {timeout}s, got {count}: {names} "
                f"({self.export_calls} export call(s), fail_with={self.fail_with!r})"
            )
        return self.spans()

    def wait_for_metrics(
        self,
        predicate: NamesPredicate | Iterable[str] | None = None,
        timeout: float = 10.0,
    ) -> list[dict[str, Any]]:
        """Block until the set of received metric names satisfies ``predicate``.

        ``predicate`` is ``None`` (any metric at all), a collection of names
        that must all be present, or a callable taking the ``set`` of names
        and returning a bool. Returns ``metric_points()``.
        """
        if predicate is None:
            check: NamesPredicate = bool
            wanted = "any metric"
        elif callable(predicate):
            check = predicate
            wanted = f"names matching {getattr(predicate, '__name__', predicate)!r}"
        else:
            required = set(predicate)
            check = required.issubset
            wanted = f"metrics {sorted(required)}"
        with self._cond:
            arrived = self._cond.wait_for(lambda: check(set(self._metric_names)), timeout)
            names = set(self._metric_names)
        if not arrived:
            raise AssertionError(
                f"{type(self).__name__} at {self.endpoint}: expected {wanted} within {timeout}s, "
                f"got {sorted(names)} ({self.export_calls} export call(s), fail_with={self.fail_with!r})"
            )
        return self.metric_points()

    # -- used by the servers -------------------------------------------------

    def _arrive(self, headers: dict[str, str]) -> None:
        """Count an Export call, remember its headers, then apply ``delay_s``."""
        with self._cond:
            self._export_calls += 1
            self._headers_seen.append(headers)
        delay = self.delay_s
        if delay:
            self._stopping.wait(delay)

    def _record(self, signal: str, request: Any) -> None:
        with self._cond:
            if signal == "traces":
                self._trace_requests.append(request)
                self._span_count += sum(
                    len(scope_spans.spans)
                    for resource_spans in request.resource_spans
                    for scope_spans in resource_spans.scope_spans
                )
            else:
                self._metric_requests.append(request)
                self._metric_names.update(
                    metric.name
                    for resource_metrics in request.resource_metrics
                    for scope_metrics in resource_metrics.scope_metrics
                    for metric in scope_metrics.metrics
                )
            self._cond.notify_all()


# --------------------------------------------------------------------------
# gRPC
# --------------------------------------------------------------------------


class _TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: GrpcReceiver) -> None:
        self._receiver = receiver

    def Export(self, request, context):  # noqa: N802 - gRPC method name
        self._receiver._handle_export("traces", request, context)
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: GrpcReceiver) -> None:
        self._receiver = receiver

    def Export(self, request, context):  # noqa: N802 - gRPC method name
        self._receiver._handle_export("metrics", request, context)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class GrpcReceiver(_Receiver):
    """OTLP/gRPC collector with the trace and metrics services on one server.

    ``endpoint`` is ``"http://127.0.0.1:PORT"``; give it to the gRPC
    exporters together with ``insecure=True``.
    """

    #: Its ``OTEL_EXPORTER_OTLP_PROTOCOL`` value.
    protocol = "grpc"

    def __init__(
        self,
        *,
        port: int = 0,
        delay_s: float = 0.0,
        fail_with: grpc.StatusCode | None = None,
        max_workers: int = 8,
    ) -> None:
        super().__init__(port, delay_s, fail_with)
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None

    def _serve(self, port: int) -> int:
        self._executor = ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="otlp-grpc-receiver")
        server = grpc.server(
            self._executor,
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceServicer(self), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsServicer(self), server)
        bound = server.add_insecure_port(f"127.0.0.1:{port}")
        if not bound:
            raise RuntimeError(f"GrpcReceiver could not bind 127.0.0.1:{port}")
        server.start()
        self._server = server
        return bound

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def _handle_export(self, signal: str, request: Any, context: grpc.ServicerContext) -> None:
        metadata = {key.lower(): value for key, value in context.invocation_metadata()}
        self._arrive(metadata)
        failure = self.fail_with
        if failure is not None:
            context.abort(failure, f"GrpcReceiver configured to fail with {failure.name}")
        self._record(signal, request)


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------

_HTTP_ROUTES = {
    "/v1/traces": ("traces", TraceRequest, trace_service_pb2.ExportTraceServiceResponse),
    "/v1/metrics": ("metrics", MetricsRequest, metrics_service_pb2.ExportMetricsServiceResponse),
}


def _decompress(body: bytes, encoding: str) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        try:
            return zlib.decompress(body)  # zlib-wrapped, what HTTP "deflate" means
        except zlib.error:
            return zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate, sent by some clients
    raise ValueError(f"unsupported Content-Encoding {encoding!r}")


class _OtlpHttpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _OtlpHttpServer

    def setup(self) -> None:
        super().setup()
        self.server.connections.add(self.connection)

    def finish(self) -> None:
        self.server.connections.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature from base class
        pass  # keep test output clean

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # CRLF after each chunk
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, body: bytes = b"", content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        body = self._read_body()
        route = _HTTP_ROUTES.get(urlsplit(self.path).path)
        if route is None:
            self._reply(404, b"not found")
            return
        signal, request_type, response_type = route
        receiver = self.server.receiver
        receiver._arrive({key.lower(): value for key, value in self.headers.items()})

        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type != "application/x-protobuf":
            self._reply(415, f"unsupported Content-Type {content_type!r}".encode())
            return
        try:
            payload = _decompress(body, self.headers.get("Content-Encoding", "").strip().lower())
        except ValueError as error:  # unknown encoding
            self._reply(415, str(error).encode())
            return
        except (OSError, EOFError, zlib.error) as error:  # corrupt compressed body
            self._reply(400, f"cannot decompress body: {error}".encode())
            return
        try:
            request = request_type.FromString(payload)
        except DecodeError as error:
            self._reply(400, f"cannot decode {request_type.__name__}: {error}".encode())
            return

        failure = receiver.fail_with
        if failure is not None:
            self._reply(int(failure), b"HttpReceiver configured to fail")
            return
        receiver._record(signal, request)
        self._reply(200, response_type().SerializeToString(), "application/x-protobuf")

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._reply(404 if urlsplit(self.path).path not in _HTTP_ROUTES else 405, b"POST only")


class _OtlpHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], receiver: HttpReceiver) -> None:
        self.receiver = receiver
        self.connections: set[socket.socket] = set()
        super().__init__(address, _OtlpHttpHandler)


class HttpReceiver(_Receiver):
    """OTLP/HTTP (binary protobuf) collector for ``/v1/traces`` and ``/v1/metrics``.

    Accepts ``Content-Encoding`` gzip and deflate; answers 200 with an empty
    response message, 404 for other paths, 415 for other content types.
    ``fail_with`` is an HTTP status code.
    """

    #: Its ``OTEL_EXPORTER_OTLP_PROTOCOL`` value.
    protocol = "http/protobuf"

    def __init__(self, *, port: int = 0, delay_s: float = 0.0, fail_with: int | None = None) -> None:
        super().__init__(port, delay_s, fail_with)
        self._server: _OtlpHttpServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def traces_endpoint(self) -> str:
        return self.endpoint + "/v1/traces"

    @property
    def metrics_endpoint(self) -> str:
        return self.endpoint + "/v1/metrics"

    def _serve(self, port: int) -> int:
        server = _OtlpHttpServer(("127.0.0.1", port), self)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="otlp-http-receiver",
            daemon=True,
        )
        thread.start()
        self._server, self._thread = server, thread
        return server.server_address[1]

    def _shutdown(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        for connection in list(server.connections):  # keep-alive connections outlive the listener
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if thread is not None:
            thread.join(5)
