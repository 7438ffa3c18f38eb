"""A burst of spans faster than the collector: the OTLP batch processor's queue.

The SDK's queue drops its oldest span when full and logs that once. Here its queue holds
what the training process's queue holds (``max_queue_size``) unless ``OTEL_BSP_MAX_QUEUE_SIZE``
says otherwise, so a burst the collector catches up with loses nothing; what a full queue
does drop is counted (``spans_dropped_otlp_queue``, and the run summary's
``otlp_queue_full``), not taken for unsent at exit. Real gRPC receivers, real exporter
processes.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from receivers import GrpcReceiver
from support import export_to, read_json, slice_names

import otel_rl
from otel_rl._internal import diagnostics, guard
from otel_rl._internal.export.grpc import GrpcSpanExporter
from otel_rl._internal.export.otlp_batch import CountingBatchSpanProcessor, CountingSpanExporter

QUEUE = 64
BATCH = 16


@pytest.fixture(autouse=True)
def _fresh_counters():
    guard.clear()
    yield
    guard.clear()


def _burst(tmp_path, n: int, **settings) -> str:
    """Records ``n`` scopes as fast as one thread can and saves; returns the run directory."""
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False),
                      **settings)
    for i in range(n):
        with otel_rl.trace_scope("burst", args={"i": i}):
            pass
    otel_rl.save(force=True)
    return otel_rl.settings().run_dir


def test_the_otlp_queue_holds_a_burst_the_training_queue_holds(monkeypatch, tmp_path):
    n = 100_000  # beyond 65,536, the queue this processor had before it followed max_queue_size
    with GrpcReceiver(delay_s=0.02) as receiver:  # 512 spans a call: about 25k spans/s
        export_to(monkeypatch, receiver)
        # A training queue (and so an exporter backlog, a quarter of it) that holds the burst
        # however little CPU the exporter process gets on a busy machine.
        run_dir = _burst(tmp_path, n, max_queue_size=1_000_000, shutdown_timeout_ms=60_000)
        otel_rl.shutdown()  # within its bound: the collector has them all before it
        spans = receiver.spans()
    assert len({s["attributes"]["rl.args.i"] for s in spans if s["name"] == "burst"}) == n
    summary = read_json(f"{run_dir}/summary-r0.json")
    assert summary["spans"]["dropped"] == {}
    assert summary["spans"]["exported_otlp"] >= n


def test_spans_a_full_otlp_queue_drops_are_counted_as_such_and_stay_in_the_file(monkeypatch, tmp_path):
    n = 1000
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", str(QUEUE))
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", str(BATCH))
    with GrpcReceiver(delay_s=30) as receiver:  # holds every call: nothing is ever sent
        export_to(monkeypatch, receiver)
        run_dir = _burst(tmp_path, n, shutdown_timeout_ms=1000)
        otel_rl.shutdown()
    assert slice_names(f"{run_dir}/traces-r0.jsonl").count("burst") == n
    dropped = read_json(f"{run_dir}/summary-r0.json")["spans"]["dropped"]
    # The queue and the batch the held call took are all that are not dropped.
    assert n - QUEUE - 2 * BATCH <= dropped["otlp_queue_full"] <= n - QUEUE
    assert sum(dropped.values()) == n  # the rest failed with the held call or was queued at exit


def test_the_processor_counts_what_its_full_queue_drops():
    n = 500
    with GrpcReceiver(delay_s=30) as receiver:
        exporter = CountingSpanExporter(GrpcSpanExporter(endpoint=receiver.endpoint, insecure=True))
        processor = CountingBatchSpanProcessor(exporter, max_queue_size=QUEUE, max_export_batch_size=BATCH)
        provider = TracerProvider(resource=Resource({"service.name": "t"}), shutdown_on_exit=False)
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("t")
        for _ in range(n):
            tracer.start_span("s").end()
        counted = guard.diagnostics()[diagnostics.SPANS_DROPPED_OTLP_QUEUE]
        assert n - QUEUE - 2 * BATCH <= counted <= n - QUEUE
        assert processor.accepted == n
        exporter.inner.shutdown()  # what is left fails at once
        receiver.stop()  # and the held call returns
        provider.shutdown()
