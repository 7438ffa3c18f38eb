"""Small traced workloads the export and fault tests push through otel_rl."""

from __future__ import annotations

import otel_rl


def scopes(n: int, name: str = "work") -> None:
    """``n`` scopes named ``name``, each with its index as an argument."""
    for i in range(n):
        with otel_rl.trace_scope(name, args={"i": i}):
            pass


def sessions(n: int, status: str = "accepted") -> None:
    """One task of ``n`` sessions, each with a ``generate`` phase, finalized as ``status``."""
    otel_rl.set_task_id(otel_rl.register_task())
    for _ in range(n):
        otel_rl.set_session_id(otel_rl.register_session())
        with otel_rl.trace_session_phase("generate"):
            pass
        otel_rl.trace_session_event("mark_finalized", status=status)
