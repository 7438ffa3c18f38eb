"""Reading native Perfetto traces back in tests, with Perfetto's own generated protos.

:func:`load` parses every packet with ``perfetto_trace_pb2`` (the ``perfetto``
package) and replays them the way Perfetto's trace processor does - packets
sorted by timestamp, ties in file order, slice begins and ends paired per
track as a stack - checking on the way what a valid trace needs:

* the first packet of every sequence clears its incremental state;
* every track a packet uses is described by an earlier packet, and its parent first;
* every interned id is defined earlier on the same sequence;
* every slice end closes a slice begun on its track, and nothing is left open;
* counter samples of one track come in time order.

What it returns (:class:`Trace`) holds the slices, flows, counters and tracks
found, for tests to compare with the Chrome JSON of the same input.
"""

from __future__ import annotations

import bisect

import dataclasses
from collections import defaultdict
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
BEGIN, END, INSTANT, COUNTER = (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END,
                                pb.TrackEvent.TYPE_INSTANT, pb.TrackEvent.TYPE_COUNTER)
FLOW_IN, FLOW_OUT = pb.TrackEvent.LegacyEvent.FLOW_IN, pb.TrackEvent.LegacyEvent.FLOW_OUT


class InvalidTrace(AssertionError):
    """The trace breaks a rule Perfetto's trace processor relies on."""


@dataclasses.dataclass
class Slice:
    track: int
    name: str
    category: str
    ts: int
    dur: int
    args: dict[str, Any]
    depth: int = 0
    instant: bool = False


@dataclasses.dataclass
class Trace:
    packets: list[Any]
    tracks: dict[int, Any]
    slices: list[Slice]
    #: (outgoing slice, incoming slice) for every arrow
    flows: list[tuple[Slice, Slice]]
    #: counter track name (``process · counter``) -> [(ts, value)]
    counters: dict[str, list[tuple[int, float]]]
    #: flow ids begun that no slice ended, and ended that no slice began
    open_flows: set[int]
    dangling_flow_ends: set[int]
    sequences: set[int]

    def track_name(self, uuid: int) -> str:
        desc = self.tracks[uuid]
        if desc.HasField("thread"):
            return desc.thread.thread_name
        if desc.HasField("process"):
            return desc.process.process_name
        return desc.name

    def process_of(self, uuid: int) -> str:
        """The name of the process a track is grouped under (itself for a process track)."""
        desc = self.tracks[uuid]
        while not desc.HasField("process") and desc.HasField("parent_uuid"):
            desc = self.tracks[desc.parent_uuid]
        return self.track_name(desc.uuid)

    def by_name(self, name: str) -> list[Slice]:
        return [s for s in self.slices if s.name == name]


def _value(annotation: Any, strings: dict[int, str]) -> Any:
    kind = annotation.WhichOneof("value")
    if kind == "string_value_iid":
        if annotation.string_value_iid not in strings:
            raise InvalidTrace(f"string value iid {annotation.string_value_iid} used before it is defined")
        return strings[annotation.string_value_iid]
    if kind is None:
        if annotation.array_values:
            return [_value(item, strings) for item in annotation.array_values]
        if annotation.dict_entries:
            return {entry.name: _value(entry, strings) for entry in annotation.dict_entries}
        return None
    return getattr(annotation, kind)


class _Sequence:
    def __init__(self) -> None:
        self.cleared = False
        self.tables: dict[str, dict[int, str]] = defaultdict(dict)
        self.clock = None
        self.base = 0

    def intern(self, data: Any) -> None:
        for table in ("event_names", "event_categories", "debug_annotation_names"):
            for entry in getattr(data, table):
                self.tables[table][entry.iid] = entry.name
        for entry in data.debug_annotation_string_values:
            self.tables["strings"][entry.iid] = entry.str.decode()

    def lookup(self, table: str, iid: int) -> str:
        if iid not in self.tables[table]:
            raise InvalidTrace(f"{table} iid {iid} used before it is defined")
        return self.tables[table][iid]


def parse(data: bytes) -> list[Any]:
    """Every packet of a trace, parsed with Perfetto's protos."""
    trace = pb.Trace()
    trace.ParseFromString(data)
    return list(trace.packet)


def load(data: bytes) -> Trace:
    """Parses and replays a native trace; raises :class:`InvalidTrace` on a broken rule."""
    packets = parse(data)
    sequences: dict[int, _Sequence] = {}
    tracks: dict[int, Any] = {}
    events = []  # (ts, index, packet's event, sequence)
    for index, packet in enumerate(packets):
        seq_id = packet.trusted_packet_sequence_id
        seq = sequences.get(seq_id)
        if seq is None:
            seq = sequences[seq_id] = _Sequence()
            if not packet.sequence_flags & CLEARED:
                raise InvalidTrace(f"sequence {seq_id} starts without clearing its incremental state")
        if packet.sequence_flags & CLEARED:
            seq.tables.clear()
            seq.cleared = True
        if packet.HasField("trace_packet_defaults"):
            seq.clock = packet.trace_packet_defaults.timestamp_clock_id
        if packet.HasField("clock_snapshot"):
            clocks = {c.clock_id: c.timestamp for c in packet.clock_snapshot.clocks}
            if packet.clock_snapshot.primary_trace_clock != pb.BUILTIN_CLOCK_REALTIME:
                raise InvalidTrace("the trace clock is not the wall clock")
            seq.base = clocks[1] - clocks.get(64, 0)
        if packet.HasField("interned_data"):
            seq.intern(packet.interned_data)
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            if desc.HasField("parent_uuid") and desc.parent_uuid not in tracks:
                raise InvalidTrace(f"track {desc.uuid} described before its parent {desc.parent_uuid}")
            tracks[desc.uuid] = desc
        if packet.HasField("track_event"):
            event = packet.track_event
            if event.track_uuid not in tracks:
                raise InvalidTrace(f"track {event.track_uuid} used before it is described")
            clock = packet.timestamp_clock_id if packet.HasField("timestamp_clock_id") else seq.clock
            ts = packet.timestamp + (seq.base if clock == 64 else 0)
            # Interned ids are resolved where the packet is, as the trace processor does.
            events.append((ts, index, event, _resolved(event, seq)))
    return _replay(packets, tracks, events, set(sequences))


def _resolved(event: Any, seq: _Sequence) -> tuple[str, str, dict[str, Any]] | None:
    if event.type in (END, COUNTER):
        return None
    args = {}
    for annotation in event.debug_annotations:
        key = seq.lookup("debug_annotation_names", annotation.name_iid) \
            if annotation.HasField("name_iid") else annotation.name
        args[key] = _value(annotation, seq.tables["strings"])
    categories = [seq.lookup("event_categories", iid) for iid in event.category_iids]
    return seq.lookup("event_names", event.name_iid), ",".join(categories), args


def _replay(packets: list[Any], tracks: dict[int, Any], events: list, sequences: set[int]) -> Trace:
    events.sort(key=lambda item: (item[0], item[1]))
    stacks: dict[int, list[Slice]] = defaultdict(list)
    slices: list[Slice] = []
    counters: dict[str, list[tuple[int, float]]] = defaultdict(list)
    counter_file_order: dict[int, list[tuple[int, int]]] = defaultdict(list)
    flow_sources: dict[int, Slice] = {}
    flows = []
    ended: set[int] = set()
    dangling: set[int] = set()
    for ts, index, event, resolved in events:
        track = event.track_uuid
        if event.type == COUNTER:
            value = (event.counter_value if event.HasField("counter_value")
                     else event.double_counter_value)
            name = tracks[track].name
            counters[name].append((ts, value))
            counter_file_order[track].append((index, ts))
            continue
        if event.type == END:
            if not stacks[track]:
                raise InvalidTrace(f"slice end at {ts} on track {track} with no slice open")
            current = stacks[track].pop()
            current.dur = ts - current.ts
            if current.dur < 0:
                raise InvalidTrace(f"slice {current.name} ends before it starts")
        else:
            name, category, args = resolved
            current = Slice(track, name, category, ts, 0, args, depth=len(stacks[track]),
                            instant=event.type == INSTANT)
            slices.append(current)
            if event.type == BEGIN:
                stacks[track].append(current)
        if event.HasField("legacy_event") and event.legacy_event.HasField("bind_id"):
            flow = event.legacy_event.bind_id
            if event.legacy_event.flow_direction == FLOW_OUT:
                flow_sources[flow] = current
            elif flow in flow_sources:
                flows.append((flow_sources[flow], current))
                ended.add(flow)
            else:
                dangling.add(flow)
    still_open = {track: stack for track, stack in stacks.items() if stack}
    if still_open:
        raise InvalidTrace(f"slices never ended: {still_open}")
    for track, order in counter_file_order.items():
        times = [ts for _index, ts in sorted(order)]
        if times != sorted(times):
            raise InvalidTrace(f"counter track {tracks[track].name} is not written in time order")
    return Trace(packets, tracks, slices, flows, dict(counters), set(flow_sources) - ended, dangling,
                 sequences)


def load_file(path: Any) -> Trace:
    """:func:`load` of a file (gzipped or not)."""
    import gzip

    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return load(data)


def ns(us: float) -> int:
    """Chrome microseconds as nanoseconds, exactly as the double holds them."""
    whole = int(us)
    return whole * 1000 + round((us - whole) * 1000)


def chrome_slices(events: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """``(name, start ns, duration ns)`` of every complete event of a Chrome trace, sorted."""
    return sorted((e["name"], ns(e["ts"]), ns(e.get("dur", 0))) for e in events if e.get("ph") == "X")


def native_slices(trace: Trace) -> list[tuple[str, int, int]]:
    """The same for a native trace's slices (instants left out)."""
    return sorted((s.name, s.ts, s.dur) for s in trace.slices if not s.instant)


def same_slices(trace: Trace, events: list[dict[str, Any]], tolerance_ns: int = 1000) -> bool:
    """Whether the native trace holds the Chrome trace's slices: the same names, starts and
    durations, to ``tolerance_ns``.

    An epoch timestamp in Chrome JSON is a double of microseconds, a quarter of a
    microsecond coarse: a slice the converter nudged (by at most two of those
    steps) to nest where its writer placed it is still the same slice. Each Chrome
    slice is matched to an unmatched native one of its name within the tolerance,
    not to the one at its place in sorted order: two slices of one name that start
    within a microsecond may sort either way once one of them was nudged.
    """
    native, chrome = native_slices(trace), chrome_slices(events)
    if len(native) != len(chrome):
        return False
    by_name: dict[str, list[tuple[int, int]]] = {}
    for name, start, dur in native:
        by_name.setdefault(name, []).append((start, dur))
    used: set[tuple[str, int]] = set()
    for name, start, dur in chrome:
        candidates = by_name.get(name, [])
        i = bisect.bisect_left(candidates, (start - tolerance_ns, -1))
        while i < len(candidates) and candidates[i][0] <= start + tolerance_ns:
            if (name, i) not in used and abs(candidates[i][1] - dur) <= tolerance_ns:
                used.add((name, i))
                break
            i += 1
        else:
            return False
    return True


def native_flows(trace: Trace) -> set[tuple[str, str]]:
    """``(parent span id, child span id)`` of every arrow of a native trace."""
    return {(out.args.get("span_id"), into.args.get("span_id")) for out, into in trace.flows}


def chrome_flows(events: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """``(parent span id, child span id)`` of every arrow of a Chrome trace: each flow's
    start and end bound to the slice starting there on their track (how otel_rl writes them)."""
    starting = {}
    for e in events:
        if e.get("ph") == "X":
            starting.setdefault((e["pid"], e["tid"], e["ts"]), e)
    begins = {e["id"]: e for e in events if e.get("ph") == "s"}
    pairs = set()
    for e in events:
        if e.get("ph") == "f" and e["id"] in begins:
            s = begins[e["id"]]
            parent = starting.get((s["pid"], s["tid"], s["ts"]))
            child = starting.get((e["pid"], e["tid"], e["ts"]))
            if parent is not None and child is not None:
                pairs.add((parent["args"].get("id"), child["args"].get("id")))
    return pairs
