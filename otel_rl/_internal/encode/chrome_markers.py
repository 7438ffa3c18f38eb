"""Names of the lines otel_rl adds to Chrome trace files beyond plain slices.

Flows (the arrows between a parent and a child drawn on other tracks), the
metadata line marking where flows into other processes start, and the marker
closing each batch of a trace file. The encoder writes them, the file exporter
and the converter read them back.
"""

from __future__ import annotations

from typing import Any

from .. import keys

#: Category and name of every flow event: Perfetto keys v1 flows on (id, cat, name).
FLOW_CATEGORY = "rl.flow"
FLOW_NAME = "flow"
#: Name of the metadata line marking a span whose children may be in other processes
#: (``args.id``; its ``pid``, ``tid`` and ``ts`` are the span's slice). The converter
#: starts the flows of those children there; viewers ignore metadata they do not know.
FLOW_SOURCE = "otel_rl.flow_source"
#: A local parent->child flow's id is the child's span id mixed with this, so it never
#: takes the id a client span uses for its cross-process link.
LOCAL_FLOW_MIX = 0x9E3779B97F4A7C15
#: Name of the metadata line that closes each batch in a trace file. Its args
#: give the batch's line count, byte length, CRC-32 and pids, so a reader can
#: trust (and copy) the whole batch without parsing every line. Viewers ignore
#: metadata they do not know; the converter drops it.
BATCH_MARKER = "otel_rl.batch"
#: How a batch marker line starts: the exporter writes its keys in this order.
BATCH_MARKER_PREFIX = b'{"ph":"M","name":"otel_rl.batch",'
#: Keys of a complete event's exact start and end in nanoseconds, added only when the
#: encoder is asked to (``ChromeTraceEncoder(exact=True)``): ``ts`` and ``dur`` are
#: microseconds in a double, a quarter of a microsecond coarse at today's epoch. The
#: native Perfetto writer reads them; JSON files never hold them.
EXACT_START = "otel_rl.start_ns"
EXACT_END = "otel_rl.end_ns"

_LEGACY_NAME = {new: old for old, new in keys.TRACE_ARG_LEGACY.items()}


def slice_id(args: dict[str, Any], key: str) -> Any:
    """One of a slice's ids (``key``: a ``keys.TRACE_ARG_*`` name) from its args, also in files
    written before those names were shortened (``span_id``, ``parent_span_id``, ``trace_id``)."""
    value = args.get(key)
    return args.get(_LEGACY_NAME[key]) if value is None else value


def slice_trace_id(args: dict[str, Any]) -> Any:
    """A slice's trace id text: its ``trace`` arg, or on a root, whose line leaves it out, its own
    span id (``None`` where the line has neither, as in other tools' traces)."""
    trace = slice_id(args, keys.TRACE_ARG_TRACE_ID)
    return slice_id(args, keys.TRACE_ARG_SPAN_ID) if trace is None else trace
