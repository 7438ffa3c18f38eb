"""Names of the lines otel_rl adds to Chrome trace files beyond plain slices.

Flows (the arrows between a parent and a child drawn on other tracks), the
metadata line marking where flows into other processes start, and the marker
closing each batch of a trace file. The encoder writes them, the file exporter
and the converter read them back.
"""

from __future__ import annotations

#: Category and name of every flow event: Perfetto keys v1 flows on (id, cat, name).
FLOW_CATEGORY = "rl.flow"
FLOW_NAME = "flow"
#: Name of the metadata line marking a span whose children may be in other processes
#: (``args.span_id``; its ``pid``, ``tid`` and ``ts`` are the span's slice). The converter
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
