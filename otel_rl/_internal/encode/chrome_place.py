"""The compiled twin of the Chrome encoder's lane placement (``_chrome_place.c``), where built.

``native`` is ``None`` where the extension was not built, or where the line writer it
writes with (:mod:`.chrome_lines`) was not: :class:`~.chrome_trace.ChromeTraceEncoder`
then places every span in Python, which is also the specification (tests compare the
trace files both give, byte for byte). It reads the lanes' state from the slots of the
classes in :mod:`.lanes`, so it is configured with those classes here.
"""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from .. import keys
from ..recording import record
from . import chrome_lines
from .lanes import Lane, LaneGroup, LaneLevel, ProcessLanes, TwoGenerationMap

__all__ = ["MAX_WAITING_CHILDREN", "native", "outer_first"]

#: Children of one parent not placed yet, remembered for their flow arrows.
MAX_WAITING_CHILDREN = 4096


def outer_first(item: tuple) -> tuple[int, int]:
    """The order a session's waiting ``(record, attributes, process)`` items are placed in:
    by start, the longer first, so each finds its parent already placed."""
    rec = item[0]
    return rec[record.START], -rec[record.END]


try:
    from . import _chrome_place as native
except ImportError:  # built without a C compiler
    native = None
if chrome_lines.native is None:
    native = None
if native is not None:
    native.configure({
        "TwoGenerationMap": TwoGenerationMap, "Lane": Lane, "LaneLevel": LaneLevel, "LaneGroup": LaneGroup,
        "ProcessLanes": ProcessLanes, "SPAN_KIND": keys.SPAN_KIND, "SESSION_ID": keys.SESSION_ID,
        "THREAD_ID": keys.THREAD_ID, "GAUGE_VALUE": keys.GAUGE_VALUE, "CONTEXT_SENT": keys.CONTEXT_SENT,
        "CATEGORY": keys.CATEGORY, "KIND_COUNTER": keys.KIND_COUNTER, "KIND_INSTANT": keys.KIND_INSTANT,
        "KIND_SESSION": keys.KIND_SESSION, "default_category": "span", "CLIENT": SpanKind.CLIENT.value,
        "PRODUCER": SpanKind.PRODUCER.value, "max_waiting_children": MAX_WAITING_CHILDREN,
        "complete": chrome_lines.native.complete, "flows": chrome_lines.native.flows,
        "TRACE_ID": record.TRACE_ID, "SPAN_ID": record.SPAN_ID,
        "PARENT_ID": record.PARENT_ID, "PARENT_REMOTE": record.PARENT_REMOTE, "START": record.START,
        "END": record.END, "KIND": record.KIND, "EVENTS": record.EVENTS, "LINKS": record.LINKS,
        "fields": record.FIELDS, "outer_first": outer_first, "NAME": record.NAME,
        "ATTRIBUTES": record.ATTRIBUTES, "phase_attributes": record.shared_phase_attributes(),
    })
