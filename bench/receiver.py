"""A counting OTLP/gRPC receiver that runs in a child process.

The OTLP workloads compare total *process* CPU of the exporting side, so the
receiver (protobuf decoding, gRPC server threads) must not share the benchmark
process. :class:`ReceiverProcess` starts ``python -m bench.receiver`` and talks
to it over a line protocol on stdin/stdout:

* the child prints ``PORT <grpc> <http>`` once it listens on ``127.0.0.1``
  (OTLP/gRPC on the first port, OTLP/HTTP protobuf on the second);
* ``count`` answers ``<spans> <export calls>``;
* ``reset`` zeroes both and answers ``ok``;
* end of input (or ``quit``) stops it.

The child only counts spans (it keeps no requests), so a 50,000-span burst
costs it no memory. It answers the metrics service too, because otel_rl also
exports session metrics when an OTLP endpoint is set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class ReceiverProcess:
    """Handle on a counting receiver running in a child process."""

    def __init__(self, start_timeout_s: float = 30.0) -> None:
        env = dict(os.environ)
        # The child must not export anything itself.
        for key in list(env):
            if key.startswith(("OTEL_EXPORTER_OTLP", "OTEL_RL_")):
                del env[key]
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.receiver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            cwd=_project_root(),
            env=env,
        )
        self._lock = threading.Lock()
        line = self._readline(start_timeout_s)
        if not line.startswith("PORT "):
            self.close()
            raise RuntimeError(f"receiver did not start: {line!r}")
        ports = line.split()[1:]
        self.port = int(ports[0])
        self.http_port = int(ports[1]) if len(ports) > 1 else None

    @property
    def endpoint(self) -> str:
        """The OTLP/gRPC endpoint."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def http_endpoint(self) -> str:
        """The OTLP/HTTP base endpoint (exporters add ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _readline(self, timeout_s: float) -> str:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self._proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not result:
            raise RuntimeError("receiver process did not answer in time")
        return result[0].strip()

    def _ask(self, command: str) -> str:
        with self._lock:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
            return self._readline(30.0)

    def count(self) -> tuple[int, int]:
        """``(spans received, export calls)`` since the last :meth:`reset`."""
        spans, calls = self._ask("count").split()
        return int(spans), int(calls)

    def reset(self) -> None:
        self._ask("reset")

    def wait_for(self, n: int, timeout_s: float = 10.0, settle_s: float = 1.0) -> int:
        """Waits until ``n`` spans arrived, the count stops moving for
        ``settle_s``, or ``timeout_s`` passes; returns the count."""
        deadline = time.monotonic() + timeout_s
        last, last_change = -1, time.monotonic()
        while True:
            spans, _ = self.count()
            now = time.monotonic()
            if spans >= n or now >= deadline:
                return spans
            if spans != last:
                last, last_change = spans, now
            elif now - last_change >= settle_s:
                return spans
            time.sleep(0.02)

    def start_counting(self, expected: int, timeout_s: float = 10.0) -> None:
        """Waits for ``expected`` spans (a warm-up) and for the count to stop
        moving (nothing late from an earlier contender), then zeroes it."""
        self.wait_for(expected, timeout_s=timeout_s)
        self.wait_for(1 << 62, timeout_s=2.0, settle_s=0.3)
        self.reset()

    def close(self) -> None:
        proc = self._proc
        if proc.poll() is None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def __enter__(self) -> ReceiverProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _project_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- child side


def _serve() -> None:
    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    lock = threading.Lock()
    totals = {"spans": 0, "calls": 0}

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC name
            n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            with lock:
                totals["spans"] += n
                totals["calls"] += 1
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC name
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(
        ThreadPoolExecutor(max_workers=4),
        options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)],
    )
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    http_server = _http_server(lock, totals, trace_service_pb2)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    print(f"PORT {port} {http_server.server_address[1]}", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "count":
            with lock:
                print(f"{totals['spans']} {totals['calls']}", flush=True)
        elif command == "reset":
            with lock:
                totals["spans"] = totals["calls"] = 0
            print("ok", flush=True)
        elif command == "quit":
            break
        else:
            print("error", flush=True)
    server.stop(grace=None).wait(5)
    http_server.shutdown()


def _http_server(lock: threading.Lock, totals: dict[str, int], trace_service_pb2: Any) -> Any:
    """OTLP/HTTP (protobuf) on ``/v1/traces`` and ``/v1/metrics``, counting like the gRPC side."""
    import gzip
    import zlib
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    empty_traces = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector would

        def do_POST(self) -> None:  # noqa: N802 - http.server name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path.endswith("/v1/traces"):
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
                with lock:
                    totals["spans"] += n
                    totals["calls"] += 1
                reply = empty_traces
            else:
                reply = b""
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


if __name__ == "__main__":
    _serve()
