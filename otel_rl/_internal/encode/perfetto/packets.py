"""Framing ``TracePacket`` messages of one packet sequence.

A trace file is a ``Trace`` message: a stream of ``packet`` fields, so files
written this way can be concatenated. Every packet of one writer carries that
writer's ``trusted_packet_sequence_id``; its first packet clears the
sequence's incremental state, sets the packet defaults and states the clock:
timestamps count nanoseconds from a base on a sequence-scoped clock, and a
``ClockSnapshot`` ties that clock to the wall clock (``REALTIME``), which is the
trace's clock on every rank. A timestamp before the base is written on the
wall clock itself.
"""

from __future__ import annotations

import hashlib

from . import fields as f
from .slices import BEGIN, END, INSTANT, SLICE, Record
from .wire import (
    VARINT,
    length_field,
    timestamp,
    varint,
    varint_field,
)

__all__ = ["PacketWriter", "flow_id"]

#: Mixed into span ids to make flow ids: never equal to an id another writer picks.
_FLOW_MIX = 0x5D1C_7A3E_94B2_0F61
# Timestamps are relative to the first one seen minus this (about 2.4 hours), so that
# slices which began before it still count up from the base, in seven bytes.
_BASE_MARGIN_NS = 1 << 43
_REALTIME_CLOCK = f.TIMESTAMP_CLOCK_ID_KEY + VARINT[f.CLOCK_REALTIME]
_LEGACY_KEY = VARINT[(f.EVENT_LEGACY_EVENT << 3) | 2]
_BIND_KEY = VARINT[f.LEGACY_BIND_ID << 3]
_DIRECTION_OUT = varint_field(f.LEGACY_FLOW_DIRECTION, f.FLOW_OUT)
_DIRECTION_IN = varint_field(f.LEGACY_FLOW_DIRECTION, f.FLOW_IN)
_SEVEN_LOW = 1 << 42
_SEVEN_HIGH = 1 << 49


def flow_id(source: object) -> int:
    """The flow id of a flow marker: made from a span id (hex text), or already an id."""
    if type(source) is str:
        try:
            value = (int(source, 16) ^ _FLOW_MIX) & ((1 << 64) - 1)
        except ValueError:
            # Not a span id: the same text must give the same id in every process.
            value = int.from_bytes(hashlib.blake2b(source.encode("utf-8", "replace"), digest_size=8).digest(),
                                   "little")
        return value or 1
    return source  # type: ignore[return-value]


def _flow(source: object, direction: bytes) -> bytes:
    body = _BIND_KEY + varint(flow_id(source)) + direction
    return _LEGACY_KEY + VARINT[len(body)] + body


def _frame(body: bytes) -> bytes:
    size = len(body)
    return f.PACKET_KEY + (VARINT[size] if size < 16384 else varint(size)) + body


class PacketWriter:
    """Frames the packets of one sequence.

    Args:
        sequence_id: The sequence's ``trusted_packet_sequence_id`` (1 .. 2**32 - 1).
    """

    def __init__(self, sequence_id: int) -> None:
        self.sequence_id = sequence_id
        self._id = varint_field(f.TRUSTED_PACKET_SEQUENCE_ID, sequence_id)
        #: Closes every event packet: the sequence id, and "needs the incremental state".
        self._tail = self._id + varint_field(f.SEQUENCE_FLAGS, f.SEQ_NEEDS_INCREMENTAL_STATE)
        self.base: int | None = None
        # track uuid -> the bytes of its slice ends around the timestamp
        self._ends: dict[int, tuple[bytes, bytes]] = {}

    def start(self, first_ns: int) -> bytes:
        """The sequence's first packet, with its base taken from ``first_ns``."""
        self.base = max(0, first_ns - _BASE_MARGIN_NS)
        return self.cleared()

    def cleared(self) -> bytes:
        """A packet clearing the incremental state and setting the defaults and the clock again."""
        base = self.base or 0
        clocks = (length_field(f.SNAPSHOT_CLOCKS, varint_field(f.CLOCK_ID, f.CLOCK_SEQUENCE)
                               + varint_field(f.CLOCK_TIMESTAMP, 0))
                  + length_field(f.SNAPSHOT_CLOCKS, varint_field(f.CLOCK_ID, f.CLOCK_REALTIME)
                                 + varint_field(f.CLOCK_TIMESTAMP, base))
                  + varint_field(f.SNAPSHOT_PRIMARY_TRACE_CLOCK, f.CLOCK_REALTIME))
        defaults = varint_field(f.TIMESTAMP_CLOCK_ID, f.CLOCK_SEQUENCE)
        return _frame(self._id + varint_field(f.SEQUENCE_FLAGS, f.SEQ_INCREMENTAL_STATE_CLEARED)
                      + length_field(f.TRACE_PACKET_DEFAULTS, defaults)
                      + length_field(f.CLOCK_SNAPSHOT, clocks))

    def descriptor(self, body: bytes) -> bytes:
        """A packet holding one ``TrackDescriptor``."""
        return _frame(length_field(f.TRACK_DESCRIPTOR, body) + self._id)

    def interned(self, body: bytes) -> bytes:
        """A packet holding ``InternedData`` only, ahead of the packets that use it."""
        return _frame(length_field(f.INTERNED_DATA, body) + self._tail)

    def _stamp(self, ns: int) -> bytes:
        relative = ns - self.base  # type: ignore[operator]
        if relative >= 0:
            return f.TIMESTAMP_KEY + timestamp(relative)
        return f.TIMESTAMP_KEY + varint(ns) + _REALTIME_CLOCK

    def _event(self, ns: int, event: bytes) -> bytes:
        size = len(event)
        body = b"".join((self._stamp(ns), f.TRACK_EVENT_KEY,
                         VARINT[size] if size < 16384 else varint(size), event, self._tail))
        size = len(body)
        return f.PACKET_KEY + (VARINT[size] if size < 16384 else varint(size)) + body

    def _end(self, record: Record) -> bytes:
        """A slice's end: the same bytes for every slice of a track but the timestamp."""
        relative = record.end - self.base  # type: ignore[operator]
        if record.flow_in is not None or not _SEVEN_LOW <= relative < _SEVEN_HIGH:
            end = f.TYPE_END_BYTES + record.track.uuid_field
            if record.flow_in is not None:
                end += _flow(record.flow_in, _DIRECTION_IN)
            return self._event(record.end, end)
        cached = self._ends.get(record.track.uuid)
        if cached is None:
            event = f.TYPE_END_BYTES + record.track.uuid_field
            after = f.TRACK_EVENT_KEY + VARINT[len(event)] + event + self._tail
            # A seven-byte timestamp: the packet's length is known ahead of it.
            head = f.PACKET_KEY + VARINT[1 + 7 + len(after)] + f.TIMESTAMP_KEY
            if len(self._ends) >= 16_384:
                self._ends.clear()
            cached = self._ends[record.track.uuid] = (head, after)
        return cached[0] + timestamp(relative) + cached[1]

    def record(self, record: Record, out: list[bytes]) -> None:
        """Appends the packets of a slice, instant, or lone begin or end."""
        kind = record.kind
        if kind == SLICE:
            if record.flow_out is None:
                begin = b"".join((f.TYPE_BEGIN_BYTES, record.track.uuid_field, record.body, record.parent_part))
            else:
                begin = b"".join((f.TYPE_BEGIN_BYTES, record.track.uuid_field, record.body, record.parent_part,
                                  _flow(record.flow_out, _DIRECTION_OUT)))
            out.append(self._event(record.start, begin))
            out.append(self._end(record))
        elif kind == INSTANT:
            out.append(self._event(record.start, f.TYPE_INSTANT_BYTES + record.track.uuid_field + record.body))
        elif kind == BEGIN:
            out.append(self._event(record.start, f.TYPE_BEGIN_BYTES + record.track.uuid_field + record.body))
        elif kind == END:
            out.append(self._event(record.start, f.TYPE_END_BYTES + record.track.uuid_field))

    def counter(self, ns: int, uuid_field: bytes, value: bytes) -> bytes:
        """A counter sample: ``value`` is a ``counter_value`` or ``double_counter_value`` field."""
        return self._event(ns, f.TYPE_COUNTER_BYTES + uuid_field + value)
