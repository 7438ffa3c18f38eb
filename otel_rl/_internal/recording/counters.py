"""Counters on the timeline: values sampled off the training loop's path.

A counter sample is a zero-length span named after the counter, with
``rl.span.kind = counter`` and ``rl.gauge.value``: the trace file draws it on
the process's counter track (Chrome ``ph: C``), the exporter keeps its last
value as the ``rl.gauge`` metric. Two counters are kept automatically:

- sessions in flight (``rl.sessions.in_flight``): the registry's open sessions,
  sampled by the export thread each time it drains (every ``export_interval_ms``)
  and written when the number changed, so registering and finalizing a session
  costs nothing more;
- GPU memory allocated by torch (``rl.gpu.memory.allocated``), at the end of
  each ``step_scope`` when torch has initialised CUDA in the process (otel_rl
  never imports torch nor initialises CUDA for it).
"""

from __future__ import annotations

import sys
from typing import Any

from opentelemetry.context import Context

from .. import keys
from ..state import STATE
from .spans import LeanSpan

_EMPTY = Context()


def emit(name: str, value: float, pipeline: Any = None) -> None:
    """Queues one sample of counter ``name``."""
    pipeline = pipeline if pipeline is not None else STATE.pipeline
    if pipeline is None:
        return
    span = LeanSpan(pipeline, name, _EMPTY, attributes={keys.SPAN_KIND: keys.KIND_COUNTER,
                                                       keys.GAUGE_VALUE: value})
    span.end(span.start_ns)


class InFlightSampler:
    """Samples the sessions in flight when called; writes a sample only on a change."""

    __slots__ = ("_pipeline", "_last")

    def __init__(self, pipeline: Any) -> None:
        self._pipeline = pipeline
        self._last = 0  # nothing is written before the first session

    def __call__(self) -> None:
        registry = STATE.registry
        if registry is None:
            return
        count = len(registry.sessions)
        if count != self._last:
            self._last = count
            emit(keys.SESSIONS_IN_FLIGHT, count, self._pipeline)


def sample_gpu_memory() -> None:
    """Samples torch's allocated GPU memory, when torch has CUDA initialised here."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return
    emit(keys.GPU_MEMORY_ALLOCATED, cuda.memory_allocated())
