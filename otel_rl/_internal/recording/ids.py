"""Ids: new trace and span ids, and the otel_rl ids carried in baggage."""

from __future__ import annotations

from random import getrandbits
from typing import Any


def new_span_id() -> int:
    """A random, nonzero 64-bit span id.

    The hot path draws ``getrandbits(64) or new_span_id()`` itself and calls this
    only for the zero it drew (once in 2**64). A root span's trace id is its own
    span id (the upper 64 bits zero, as W3C trace context pads the ids of 64-bit
    systems): random where samplers read it, 16 hex digits in the trace file, and
    the id Jaeger prints and finds for that trace.
    """
    span_id = getrandbits(64)
    while not span_id:
        span_id = getrandbits(64)
    return span_id


def trace_text(trace_id: int) -> str:
    """A trace id as the trace file writes it: 16 hex digits where its upper half
    is zero (a root's id is its span id), 32 otherwise."""
    return f"{trace_id:016x}" if trace_id < 1 << 64 else f"{trace_id:032x}"


def span_text(span_id: int) -> str:
    """A span id as the trace file and the session records write it: 16 hex digits."""
    return f"{span_id:016x}"


def id_value(value: Any) -> Any:
    """An otel_rl id as read from baggage, with its integer type restored.

    Baggage values that crossed a process boundary are strings; ids that were
    integers become integers again so attribute types stay stable. Only ASCII
    digits count (``"²"`` is a digit to ``str.isdigit`` but not to ``int``),
    and text too long for ``int`` stays text: baggage is untrusted.
    """
    if isinstance(value, str) and value.isdigit() and value.isascii():
        try:
            return int(value)
        except ValueError:  # past sys.get_int_max_str_digits()
            return value
    return value
