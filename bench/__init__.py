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
"""

__all__ = ["WORKLOAD_NAMES"]

WORKLOAD_NAMES = ("disabled", "enabled_scope", "otlp", "attrs5", "sessions", "burst", "concurrency", "memory")
