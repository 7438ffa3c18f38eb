"""Benchmarks: otel_rl beside the stock OpenTelemetry SDK and a plain JSONL tracer.

Run everything with ``python -m bench`` (``--quick`` for small sizes,
``--only disabled,sessions`` for a subset, ``--repeats N``). One table is
printed; every raw sample goes to ``bench/results/latest.json``.

Workloads (names for ``--only``):

``disabled``       a scope and a ``@trace_perf`` call while otel_rl is not configured
``enabled_scope``  ``with trace_scope(...)`` with the trace file on
``otlp``           the same exported over OTLP/gRPC to a receiver (child process), with and without 5 attributes
``attrs5``         a scope with 5 attributes, file output
``sessions``       register task, 4 sessions x (generate, reward), finalize the task
``burst``          50,000 spans as fast as possible at default settings: spans lost
``concurrency``    16 threads of scopes; 1,000 concurrent asyncio sessions
``memory``         tracemalloc peak of the session workload; RSS over ``--memory-sessions`` sessions
``total_cpu``      CPU of every process (exporter child included) per scope and per session (``--areal PATH``: AReaL's perf_tracer too)
``otlp_total``     OTLP + file, every process, beside the SDK's OTLP exporter over gRPC and HTTP
``wall_interleaved`` wall of the traced loop while export runs, chunks alternating with JSONL in one process
``exporter_throughput`` spans/s one exporter process delivers (file, OTLP, both), with losses
``bytes``          bytes written per scope and per session (``--areal PATH``: AReaL's perf_tracer too)
"""

__all__ = ["WORKLOAD_NAMES"]

WORKLOAD_NAMES = ("disabled", "enabled_scope", "otlp", "attrs5", "sessions", "burst", "concurrency", "memory",
                  "total_cpu", "otlp_total", "wall_interleaved", "exporter_throughput", "bytes")
