"""Ids: new trace and span ids, and the otel_rl ids carried in baggage."""

from __future__ import annotations

from random import getrandbits
from typing import Any


def new_trace_id() -> int:
    """A random, nonzero 128-bit trace id.

    The hot path draws ``getrandbits(128) or new_trace_id()`` itself and calls
    this only for the zero it drew (once in 2**128).
    """
    trace_id = getrandbits(128)
    while not trace_id:
        trace_id = getrandbits(128)
    return trace_id


def new_span_id() -> int:
    """A random, nonzero 64-bit span id (see :func:`new_trace_id`)."""
    span_id = getrandbits(64)
    while not span_id:
        span_id = getrandbits(64)
    return span_id


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
