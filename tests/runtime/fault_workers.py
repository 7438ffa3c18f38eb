"""Functions run in spawn / forkserver worker processes by tests/test_fork_spawn.py."""

from __future__ import annotations

import os

import otel_rl


def record(n: int) -> dict:
    """Records ``n`` scopes in a worker configured from its environment alone."""
    for i in range(n):
        with otel_rl.trace_scope("child.work", args={"i": i}):
            pass
    return {"pid": os.getpid(), "configured": otel_rl.is_configured()}
