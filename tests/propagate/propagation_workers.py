"""Functions run in worker processes by tests/test_propagation.py (importable by spawn)."""

from __future__ import annotations

from opentelemetry import trace

import otel_rl


def report_context(label: str) -> dict:
    """What a worker sees of the caller's context: session id and parent span."""
    with otel_rl.trace_scope(f"worker.{label}"):
        sc = trace.get_current_span().get_span_context()
        parent = getattr(trace.get_current_span(), "parent_id", None)
        return {"session_id": otel_rl.get_session_id(), "trace_id": f"{sc.trace_id:032x}",
                "parent_span_id": f"{parent:016x}" if parent else None}


@otel_rl.propagating
def propagating_report(label: str) -> dict:
    """The same, taking the context as ``otel_rl_context=``."""
    return report_context(label)
