"""Field numbers and enum values of Perfetto's trace protos that otel_rl writes.

The numbers are those of Perfetto's published ``.proto`` files (the
``perfetto`` package's ``perfetto_trace_pb2`` holds the same; the tests read
every packet back with it). Pre-encoded keys of the fields written once per
event sit next to them, so the hot path concatenates constants.
"""

from __future__ import annotations

from .wire import tag

# --- Trace / TracePacket -------------------------------------------------------------------
TRACE_PACKET = 1
PACKET_KEY = tag(TRACE_PACKET, 2)

CLOCK_SNAPSHOT = 6
TIMESTAMP = 8
TRUSTED_PACKET_SEQUENCE_ID = 10
TRACK_EVENT = 11
INTERNED_DATA = 12
SEQUENCE_FLAGS = 13
TRACE_PACKET_DEFAULTS = 59
TIMESTAMP_CLOCK_ID = 58
TRACK_DESCRIPTOR = 60

TIMESTAMP_KEY = tag(TIMESTAMP, 0)
TRACK_EVENT_KEY = tag(TRACK_EVENT, 2)
TIMESTAMP_CLOCK_ID_KEY = tag(TIMESTAMP_CLOCK_ID, 0)

#: ``TracePacket.SequenceFlags``.
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2

# --- Clocks --------------------------------------------------------------------------------
#: ``BuiltinClock.BUILTIN_CLOCK_REALTIME``: the wall clock every otel_rl timestamp is read from.
CLOCK_REALTIME = 1
#: A sequence-scoped clock (ids 64-127 are local to one packet sequence): the wall
#: clock minus the sequence's base, so timestamps take seven bytes instead of nine.
CLOCK_SEQUENCE = 64
SNAPSHOT_CLOCKS = 1
SNAPSHOT_PRIMARY_TRACE_CLOCK = 2
CLOCK_ID = 1
CLOCK_TIMESTAMP = 2

# --- TrackEvent ----------------------------------------------------------------------------
EVENT_CATEGORY_IIDS = 3
EVENT_DEBUG_ANNOTATIONS = 4
EVENT_LEGACY_EVENT = 6
EVENT_TYPE = 9
EVENT_NAME_IID = 10
EVENT_TRACK_UUID = 11
EVENT_COUNTER_VALUE = 30
EVENT_DOUBLE_COUNTER_VALUE = 44

TYPE_SLICE_BEGIN = 1
TYPE_SLICE_END = 2
TYPE_INSTANT = 3
TYPE_COUNTER = 4

TYPE_BEGIN_BYTES = tag(EVENT_TYPE, 0) + bytes((TYPE_SLICE_BEGIN,))
TYPE_END_BYTES = tag(EVENT_TYPE, 0) + bytes((TYPE_SLICE_END,))
TYPE_INSTANT_BYTES = tag(EVENT_TYPE, 0) + bytes((TYPE_INSTANT,))
TYPE_COUNTER_BYTES = tag(EVENT_TYPE, 0) + bytes((TYPE_COUNTER,))
TRACK_UUID_KEY = tag(EVENT_TRACK_UUID, 0)
NAME_IID_KEY = tag(EVENT_NAME_IID, 0)
CATEGORY_IID_KEY = tag(EVENT_CATEGORY_IIDS, 0)
ANNOTATION_KEY = tag(EVENT_DEBUG_ANNOTATIONS, 2)
COUNTER_VALUE_KEY = tag(EVENT_COUNTER_VALUE, 0)
DOUBLE_COUNTER_VALUE_KEY = tag(EVENT_DOUBLE_COUNTER_VALUE, 1)

# TrackEvent.LegacyEvent: the flow binding that fans out (one id per parent, one
# arrow per child; see flows in docs/perfetto.md).
LEGACY_BIND_ID = 8
LEGACY_FLOW_DIRECTION = 13
FLOW_IN = 1
FLOW_OUT = 2

# --- DebugAnnotation -----------------------------------------------------------------------
ANNOTATION_NAME_IID = 1
ANNOTATION_BOOL = 2
ANNOTATION_INT = 4
ANNOTATION_DOUBLE = 5
ANNOTATION_STRING = 6
ANNOTATION_NAME = 10
ANNOTATION_DICT_ENTRIES = 11
ANNOTATION_ARRAY_VALUES = 12
ANNOTATION_STRING_IID = 17

# --- InternedData --------------------------------------------------------------------------
INTERNED_EVENT_CATEGORIES = 1
INTERNED_EVENT_NAMES = 2
INTERNED_ANNOTATION_NAMES = 3
INTERNED_ANNOTATION_STRINGS = 29
#: EventName, EventCategory, DebugAnnotationName and InternedString all hold (iid, name/str).
INTERNED_IID = 1
INTERNED_TEXT = 2

# --- TrackDescriptor -----------------------------------------------------------------------
TRACK_UUID = 1
TRACK_NAME = 2
TRACK_PROCESS = 3
TRACK_THREAD = 4
TRACK_PARENT_UUID = 5
TRACK_COUNTER = 8
TRACK_CHILD_ORDERING = 11
TRACK_SIBLING_ORDER_RANK = 12
#: ``TrackDescriptor.ChildTracksOrdering.EXPLICIT``: children sorted by their rank.
CHILD_ORDERING_EXPLICIT = 3

PROCESS_PID = 1
PROCESS_LEGACY_SORT_INDEX = 3
PROCESS_NAME = 6
PROCESS_LABELS = 8

THREAD_PID = 1
THREAD_TID = 2
THREAD_LEGACY_SORT_INDEX = 3
THREAD_NAME = 5
