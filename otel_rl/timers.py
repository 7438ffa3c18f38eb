"""Unity ML-Agents' hierarchical timer names over otel_rl's spans.

Code written against ``mlagents_envs.timers`` ports by changing the import::

    from otel_rl.timers import hierarchical_timer, set_gauge, timed

    @timed
    def advance(self, env): ...

    with hierarchical_timer("communicator.exchange"):
        outputs = self.communicator.exchange(step_input)

Each timed block is an ordinary otel_rl span (so it reaches Perfetto, Jaeger and
Tempo like any other), and ``otel-rl report`` (or
:func:`otel_rl.report.timer_tree`) rebuilds ML-Agents' timer tree - ``total``,
``count``, ``self``, ``children``, ``is_parallel``, gauges and metadata - from
the nesting of the spans, per rank and merged across ranks. Nothing is kept in
memory per block, so there is no global timer stack to reset.
"""

from __future__ import annotations

import math
from typing import Any, Callable, TypeVar

from opentelemetry.trace.propagation import _SPAN_KEY

from ._internal import guard, keys
from ._internal.spans import LeanSpan, get_current
from ._internal.state import STATE
from .tracing import trace_perf, trace_scope

__all__ = ["get_timer_tree", "hierarchical_timer", "set_gauge", "timed"]

F = TypeVar("F", bound=Callable[..., Any])


def timed(func: Any) -> Any:
    """Decorator timing every call of a function, named by its qualified name (ML-Agents ``@timed``).

    ``@timed`` uses ``func.__qualname__`` as the span name, as ML-Agents does;
    ``@timed("name")`` names it explicitly. Sync and async functions,
    generators and async generators all work (see :func:`otel_rl.trace_perf`).

    Args:
        func: The function to time, or a span name.

    Returns:
        The wrapped function (or, given a name, a decorator).
    """
    if isinstance(func, str):
        return trace_perf(func)
    return trace_perf(func.__qualname__)(func)


def hierarchical_timer(name: str, timer_stack: Any = None) -> Any:
    """Times a block as a span nested under the current one (ML-Agents ``hierarchical_timer``).

    ``with hierarchical_timer("name"):`` (``async with`` works too). The
    hierarchy comes from span nesting, which follows threads and asyncio tasks.

    Args:
        name: Block (span) name.
        timer_stack: Accepted for ML-Agents compatibility and ignored: every
            process has one timeline.

    Returns:
        A context manager (:func:`otel_rl.trace_scope`).
    """
    del timer_stack
    return trace_scope(name)


@guard.guarded()
def set_gauge(name: str, value: float, timer_stack: Any = None) -> None:
    """Records the current value of a gauge (ML-Agents ``set_gauge``).

    The value is recorded as a span event named ``name`` with attribute
    ``rl.gauge.value`` on the current span (a zero-length span when none is
    current). Reports show each gauge's last value, min, max and count in the
    timer tree's ``gauges``. NaN values are ignored, as in ML-Agents.

    Args:
        name: Gauge name.
        value: Its current value.
        timer_stack: Accepted for ML-Agents compatibility and ignored.
    """
    del timer_stack
    if not STATE.scopes_on:
        return
    value = float(value)
    if math.isnan(value):
        return
    attributes = {keys.GAUGE_VALUE: value}
    ctx = get_current()
    current = ctx.get(_SPAN_KEY)
    if current is not None and current.is_recording():
        current.add_event(name, attributes)
        return
    span = LeanSpan(STATE.pipeline, name, ctx, attributes=attributes)
    span.end(span.start_ns)


def get_timer_tree(timer_stack: Any = None) -> dict[str, Any]:
    """This process's timer tree so far, in ML-Agents' format (ML-Agents ``get_timer_tree``).

    Flushes otel_rl, then rebuilds the tree from this rank's trace file
    (``traces-r{rank}.jsonl``), so it needs ``file_export`` on (the default).

    Args:
        timer_stack: Accepted for ML-Agents compatibility and ignored.

    Returns:
        ``{"name": "root", "total", "count", "self", "children", "gauges",
        "metadata"}``, or ``{}`` when otel_rl is not configured or wrote no
        trace file.
    """
    del timer_stack
    import os

    from . import save
    from .report import load, timer_tree

    settings = STATE.settings
    if settings is None or not settings.file_export:
        return {}
    save(force=True)
    path = settings.file_path(keys.TRACES_FILE)
    if not os.path.exists(path):
        return {}
    data = load([path], progress=False)
    pid = os.getpid()
    workers = [w for w, p in data.worker_pids.items() if p == pid] or None
    return timer_tree(data, worker=workers[0] if workers else None)
