"""Chrome trace events to Perfetto's native trace format (``TracePacket`` protobuf).

:class:`PerfettoEncoder` reads the event dicts the Chrome encoder makes (and
any Chrome trace JSON: AReaL's files, torch profiler traces) and writes
TrackEvent packets, so a span's slice, duration and arguments are the same in
both formats by construction. What the native format adds:

* a track per session (``task 3 · session 12``), per task and for the steps
  of a thread, under their process; phases nest as slices on the session's
  track, where the Chrome trace needs numbered lanes;
* a counter track per gauge and counter (``ph: "C"``), time-ordered;
* flow arrows bound to the slices themselves, from a parent to each child on
  another track or in another process (:mod:`.slices`);
* interned names, categories, annotation names and string values
  (:mod:`.interning`), and timestamps on one clock (:mod:`.packets`).

Not thread-safe; one owner feeds it. Memory is bounded whatever the input length.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import os
import struct
from collections.abc import Iterable
from typing import Any

from ... import diagnostics, guard, keys
from ..lanes import TwoGenerationMap, is_ancestor
from ..track_metadata import rank_and_role
from ..chrome_markers import EXACT_END, EXACT_START, FLOW_CATEGORY, FLOW_SOURCE, slice_id
from . import fields as f
from .interning import Interner
from .packets import PacketWriter, flow_id
from .slices import BEGIN, END, INSTANT, SLICE, Record, SliceWindow
from .tracks import Track, TrackRegistry, geometric
from .wire import varint

__all__ = ["PerfettoEncoder"]

#: Counter samples a counter track holds back to write them in time order.
_COUNTER_HOLD = 64
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INF = float("inf")
_SPAN = keys.TRACE_ARG_SPAN_ID
_PARENT = keys.TRACE_ARG_PARENT_ID
_pack_double = struct.Struct("<d").pack
_SESSION_ID = keys.SESSION_ID
_SPAN_KIND = keys.SPAN_KIND
_TASK_ID = keys.TASK_ID
_KIND_ANNOTATION = keys.KIND_ANNOTATION
_KIND_SESSION = keys.KIND_SESSION
_KIND_TASK = keys.KIND_TASK
_KIND_STEP = keys.KIND_STEP
_sequence_numbers = itertools.count(1)
_MAX_ANCESTRY = 64
_PROCESS_METADATA = frozenset({"process_name", "process_labels", "process_sort_index"})
#: Spans, threads and tracks each table remembers: the memory bound, whatever the input length.
_REMEMBERED = 16_384
#: A Chrome lane's sort index: its thread's number times this, plus the lane's index.
_LANES_PER_THREAD = 1000


def _ns(value: Any) -> int | None:
    """Chrome microseconds as integer nanoseconds (``None`` for no number).

    The whole microseconds and the fraction are scaled apart: an epoch timestamp
    times 1000 no longer fits a double's 53 bits, and would come out up to 128 ns off.
    """
    kind = type(value)
    if kind is float:
        if value != value or value in (_INF, -_INF):
            return None
        whole = int(value)
        return whole * 1000 + round((value - whole) * 1000)
    if kind is int:
        return value * 1000
    return None


def _slack(ts: Any) -> int:
    """How far off a Chrome timestamp may be, in nanoseconds: two steps of its double."""
    return int(math.ulp(ts) * 2000) if type(ts) is float else 0


def _random_id(bits: int) -> int:
    return int.from_bytes(os.urandom(8), "little") & ((1 << bits) - 1)


#: Types of a session or task id that can name a track (not a list or dict from odd input).
_LABELS = frozenset({str, int, float})


class PerfettoEncoder:
    """Turns Chrome trace event dicts into framed ``TracePacket`` bytes.

    Args:
        sequence_id: This writer's ``trusted_packet_sequence_id``; a random one
            when omitted, so the files of concurrent writers concatenate.
        uuid_salt: Added to every track uuid; random when omitted, for the same reason.
            The converter, the only writer of its file, passes 0 for short uuids.
        window: Slices held back to join flows and order ties (:mod:`.slices`).
        max_interned: Interned strings before the sequence's state is cleared.
    """

    def __init__(self, *, sequence_id: int | None = None, uuid_salt: int | None = None,
                 window: int = 32_768, max_interned: int = 50_000) -> None:
        if sequence_id is None:
            # Distinct per writer: mixed from the pid, a counter and random bits.
            sequence_id = (_random_id(31) ^ (os.getpid() << 8) ^ next(_sequence_numbers)) & 0x7FFFFFFF
        self.sequence_id = sequence_id or 1
        salt = (_random_id(62) << 1) & ~0xFFFFFFFF if uuid_salt is None else uuid_salt
        self._writer = PacketWriter(self.sequence_id)
        self._tracks = TrackRegistry(salt)
        self._interner = Interner(max_interned)
        self._window = SliceWindow(window)
        self._counters: dict[Track, list[tuple[int, int, bytes]]] = {}
        self._counter_order = itertools.count()
        # (pid, tid) -> the latest slice from it: where its span events and flow ends belong
        self._last: dict[tuple[Any, Any], Record] = {}
        self._async: dict[tuple, Track] = {}
        # (pid, tid, "session" / "task" / "steps", id) -> the track of its own
        self._own: dict[tuple, Track] = {}
        # span id -> parent span id, for the ancestry a track's nesting respects
        self._parents = TwoGenerationMap(_REMEMBERED)
        self._is_ancestor = functools.partial(is_ancestor, self._parents, depth=_MAX_ANCESTRY)
        # (pid, lane tid) -> the tid of its thread's first lane: the Chrome trace's lanes
        # only kept sessions apart, which have tracks of their own here
        self._lanes: dict[tuple[Any, Any], Any] = {}
        self._first_lanes: dict[tuple[Any, int], Any] = {}
        # pid -> the (name, value) arguments its events restate: its own rank and role
        self._elided: dict[Any, frozenset] = {}
        self._first_ns: int | None = None
        self._started = False
        #: Events read, and those left out (not understood or not valid).
        self.events = 0
        self.skipped = 0

    # --- public API -------------------------------------------------------------------
    def encode(self, events: Iterable[dict[str, Any]]) -> bytes:
        """Reads events; returns the packets ready to be written (possibly none yet).

        Never raises for a bad event: it is counted in :attr:`skipped`.
        """
        handlers = self._handlers
        slice_ = self._slice
        count = 0
        for event in events:
            count += 1
            try:
                phase = event.get("ph")
                if phase == "X":
                    if slice_(event) is False:
                        self.skipped += 1
                    continue
                handler = handlers.get(phase)
                if handler is None or handler(self, event) is False:
                    self.skipped += 1
            except (AttributeError, TypeError, ValueError, KeyError, OverflowError):
                self.skipped += 1  # not an event this encoder can read: left out
            except Exception as exc:  # noqa: BLE001 - one odd event must not lose the rest
                self.skipped += 1
                guard.report(diagnostics.PERFETTO_TRACE_ENCODE_ERROR, "an event could not be encoded: %r", exc)
        self.events += count
        out: list[bytes] = []
        if self._interner.full:
            # Cleared only with nothing waiting: waiting slices name strings by the old ids.
            self._write(out, 0, counters_held=_COUNTER_HOLD)
            self._interner.reset()
            out.append(self._writer.cleared())
        else:
            self._write(out, None, counters_held=_COUNTER_HOLD)
        return b"".join(out)

    def finish(self) -> bytes:
        """Writes everything still held back."""
        out: list[bytes] = []
        self._write(out, 0, counters_held=0)
        return b"".join(out)

    # --- writing -----------------------------------------------------------------------
    def _write(self, out: list[bytes], keep: int | None, counters_held: int) -> None:
        records = list(self._window.ready(keep))
        samples = self._ready_samples(counters_held)
        if not records and not samples:
            return
        writer = self._writer
        if not self._started:
            self._started = True
            out.append(writer.start(self._first_ns or 0))
        interned = self._interner.take_pending()
        if interned:
            out.append(writer.interned(interned))
        described: list[bytes] = []
        registry = self._tracks
        registry.renamed(described)
        for record in records:
            track = record.track
            if not track.described or (track.parent is not None and not track.parent.described):
                registry.describe(track, described)
            if described:
                out.extend(writer.descriptor(body) for body in described)
                described.clear()
            writer.record(record, out)
            # A written slice is still looked up (ties at its start, its children's parent):
            # its bytes are not needed any more.
            record.body = record.parent_part = b""
        for ns, track, value in samples:
            registry.describe(track, described)
            if described:
                out.extend(writer.descriptor(body) for body in described)
                described.clear()
            out.append(writer.counter(ns, track.uuid_field, value))
        if described:
            out.extend(writer.descriptor(body) for body in described)

    def _ready_samples(self, held: int) -> list[tuple[int, Track, bytes]]:
        ready = []
        for track, heap in self._counters.items():
            while len(heap) > held:
                ns, _order, value = heapq.heappop(heap)
                ready.append((ns, track, value))
        return ready

    def _when(self, event: dict[str, Any]) -> int | None:
        """An event's time in nanoseconds (``None`` for none); the first one seen sets the base."""
        ns = _ns(event.get("ts"))
        if ns is not None and self._first_ns is None:
            self._first_ns = ns
        return ns

    # --- slices ------------------------------------------------------------------------
    def _slice(self, event: dict[str, Any]) -> bool:
        exact = event.get(EXACT_START)
        if exact is None:
            # _ns, inlined: this runs for every slice.
            ts = event["ts"]
            if type(ts) is float and ts - ts == 0.0:
                whole = int(ts)
                start = whole * 1000 + round((ts - whole) * 1000)
            elif type(ts) is int:
                start = ts * 1000
            else:
                return False
            dur = _ns(event.get("dur", 0))
            end = start + dur if dur is not None and dur > 0 else start
        else:
            # The exporter's own events carry the span's nanoseconds: no rounding to undo.
            start = exact
            end = event.get(EXACT_END)
            if type(start) is not int:
                return False
            end = end if type(end) is int and end >= start else start
            ts = None
        if self._first_ns is None:
            self._first_ns = start
        pid = event["pid"]
        source_tid = event["tid"]
        tid = self._lanes.get((pid, source_tid), source_tid)
        args = event.get("args")
        interner = self._interner
        span = parent = None
        ids = b""
        if args and type(args) is dict:
            track = self._track_for(pid, tid, args, start)
            # Span ids are taken out of the args: seen once or twice each, they are written
            # in place rather than looked up, and the parent's only where nothing else shows it.
            # The trace file's names where present, else older files' (the other stays an arg).
            span_key = _SPAN if _SPAN in args else "span_id"
            parent_key = _PARENT if _PARENT in args else "parent_span_id"
            span = args.pop(span_key, None)
            parent = args.pop(parent_key, None)
            if type(span) is str:
                ids = interner.span_annotation("span_id", span)
                if type(parent) is str:
                    self._parents.set(span, parent)
            elif span is not None:
                args[span_key] = span
                span = None
            if type(parent) is not str:
                if parent is not None:
                    args[parent_key] = parent
                parent = None
        else:
            args = None
            track = self._tracks.thread(pid, tid)
        is_ancestor = self._is_ancestor if span is not None else geometric
        window = self._window
        placed = None if window.tied(track, start) else track.take(start, end, 0, span, is_ancestor)
        if placed is None:
            # A tie with a slice already written, or it does not nest: see ``_place``.
            track, placed = self._place(track, start, end, _slack(ts), span, is_ancestor)
        category = event.get("cat")
        if category is None:
            body = interner.name(event.get("name"))
        else:
            body = interner.name(event.get("name")) + interner.category(category)
        if args is not None:
            cache = interner.caches.get(pid)
            if cache is None:
                cache = self._args_cache(pid)
            body = body + interner.encode_args(args, cache) + ids
        record = Record(SLICE, placed[0], placed[1], track, body, span, parent,
                        interner.span_annotation("parent_span_id", parent) if parent is not None else b"")
        key = (pid, source_tid)
        window.add_slice(record, key)
        last = self._last
        last[key] = record
        if len(last) > _REMEMBERED:
            last.clear()
        return True

    def _place(self, track: Track, start: int, end: int, slack: int, span: Any,
               is_ancestor: Any) -> tuple[Track, tuple[int, int]]:
        """The track of ``track``'s family that takes ``[start, end]`` (possibly an overflow
        track), and where on it: nudged by up to ``slack`` to nest (see :meth:`Track.take`)."""
        registry = self._tracks
        conflicts = self._window.conflicts
        while True:
            if not conflicts(track, start, end):
                placed = track.take(start, end, slack, span, is_ancestor)
                if placed is not None:
                    return track, placed
            track = registry.overflow(track)

    def _track_for(self, pid: Any, tid: Any, args: dict[str, Any], start: int) -> Track:
        """A session's, task's or the steps' own track, else the thread's."""
        session = args.get(_SESSION_ID)
        if session is not None:
            if type(session) in _LABELS and args.get(_SPAN_KIND) != _KIND_ANNOTATION:
                track = self._own.get((pid, tid, "session", session))
                return track if track is not None else self._new_own(
                    (pid, tid, "session", session), pid, start, f"session {session}", args.get(_TASK_ID))
        else:
            kind = args.get(_SPAN_KIND)
            if kind == _KIND_TASK:
                task = args.get(_TASK_ID)
                if type(task) in _LABELS:
                    track = self._own.get((pid, tid, "task", task))
                    return track if track is not None else self._new_own(
                        (pid, tid, "task", task), pid, start, f"task {task}", None)
            elif kind == _KIND_STEP:
                track = self._own.get((pid, tid, "steps", None))
                return track if track is not None else self._new_own(
                    (pid, tid, "steps", None), pid, start, "steps", None)
        return self._tracks.thread(pid, tid)

    def _new_own(self, key: tuple, pid: Any, start: int, name: str, task: Any) -> Track:
        """Makes the track of a session (named by its task too), task or steps."""
        if task is not None and type(task) in _LABELS:
            name = f"task {task} · {name}"
        rank_ms = (start - (self._first_ns or start)) // 1_000_000
        track = self._tracks.timed(key[1:], pid, name, rank_ms, key[2])
        if len(self._own) >= _REMEMBERED // 2:
            self._own.clear()  # forgotten tracks are found again by the registry
        self._own[key] = track
        return track

    # --- instants, lone begins and ends ------------------------------------------------------
    def _instant(self, event: dict[str, Any]) -> bool:
        ns = self._when(event)
        if ns is None:
            return False
        pid = event.get("pid")
        tid = event.get("tid")
        scope = event.get("s")
        if scope == "g":
            track = self._tracks.global_track()
        elif scope == "p":
            track = self._tracks.process(pid)
        else:
            # A span event: on the track of the slice it belongs to.
            last = self._last.get((pid, tid))
            if last is not None and last.start <= ns <= last.end:
                track = last.track
            else:
                track = self._tracks.thread(pid, self._lanes.get((pid, tid), tid))
        self._window.add(Record(INSTANT, ns, ns, track, self._event_body(event)))
        return True

    def _event_body(self, event: dict[str, Any]) -> bytes:
        interner = self._interner
        body = interner.name(event.get("name"))
        category = event.get("cat")
        if category is not None:
            body += interner.category(category)
        args = event.get("args")
        if type(args) is dict and args:
            pid = event.get("pid")
            cache = interner.caches.get(pid)
            if cache is None:
                cache = self._args_cache(pid)
            body += interner.encode_args(args, cache)
        return body

    def _args_cache(self, pid: Any) -> Any:
        return self._interner.annotations(pid, self._elided.get(pid, frozenset()))

    def _begin_end(self, event: dict[str, Any]) -> bool:
        ns = self._when(event)
        if ns is None:
            return False
        pid = event.get("pid")
        track = self._tracks.thread(pid, self._lanes.get((pid, event.get("tid")), event.get("tid")))
        if event["ph"] == "B":
            self._window.add(Record(BEGIN, ns, ns, track, self._event_body(event)))
        else:
            self._window.add(Record(END, ns, ns, track, b""))
        return True

    def _nestable_async(self, event: dict[str, Any]) -> bool:
        ns = self._when(event)
        if ns is None:
            return False
        pid = event.get("pid")
        key = (pid, event.get("cat"), str(event.get("id", event.get("id2"))))
        track = self._async.get(key)
        if track is None:
            if len(self._async) >= 10_000:
                self._async.clear()
            track = self._async[key] = self._tracks.timed(("async",) + key[1:], pid,
                                                           str(event.get("name")), 0, "async")
        phase = event["ph"]
        kind = BEGIN if phase == "b" else END if phase == "e" else INSTANT
        self._window.add(Record(kind, ns, ns, track, b"" if kind == END else self._event_body(event)))
        return True

    # --- counters ------------------------------------------------------------------------
    def _counter(self, event: dict[str, Any]) -> bool:
        args = event.get("args")
        ns = self._when(event) if type(args) is dict else None
        if ns is None:
            return False
        pid = event.get("pid")
        name = str(event.get("name"))
        wrote = False
        for key, value in args.items():
            kind = type(value)
            if kind is int and _INT64_MIN <= value <= _INT64_MAX:
                encoded = f.COUNTER_VALUE_KEY + varint(value)
            elif kind is float or kind is int:
                encoded = f.DOUBLE_COUNTER_VALUE_KEY + _pack_double(float(value))
            else:
                continue
            track = self._tracks.counter(pid, name if key == "value" else f"{name} {key}")
            heap = self._counters.get(track)
            if heap is None:
                heap = self._counters[track] = []
            heapq.heappush(heap, (ns, next(self._counter_order), encoded))
            wrote = True
        return wrote

    # --- metadata and flows ----------------------------------------------------------------
    def _metadata(self, event: dict[str, Any]) -> bool:
        name = event.get("name")
        args = event.get("args")
        if type(args) is not dict:
            return False
        pid = event.get("pid")
        registry = self._tracks
        if name in _PROCESS_METADATA and pid in self._elided and rank_and_role(args.get("name")) is None:
            # A rank's process keeps its name, labels and order when another writer's file
            # (a torch trace joined to the rank) names the same pid after its program.
            return True
        if name == "process_name":
            registry.name_process(pid, name=args.get("name"))
            identity = rank_and_role(args.get("name"))
            if identity is not None:
                # Every event of the process restates its rank and role: the track says it once.
                self._elided[pid] = frozenset({("rank", identity[0]), ("role", identity[1])})
                self._interner.caches.pop(pid, None)
        elif name == "process_labels":
            registry.name_process(pid, labels=args.get("labels"))
        elif name == "process_sort_index":
            registry.name_process(pid, sort_index=args.get("sort_index"))
        elif name == "thread_name":
            registry.name_thread(pid, event.get("tid"), name=args.get("name"))
        elif name == "thread_sort_index":
            self._lane(pid, event.get("tid"), args.get("sort_index"))
        elif name == FLOW_SOURCE:
            span = slice_id(args, _SPAN)
            if type(span) is str:
                self._window.mark_source(span)
        # Other metadata (otel_rl's batch markers, a profiler's extras): nothing to draw.
        return True

    def _lane(self, pid: Any, tid: Any, sort_index: Any) -> None:
        """Notes a Chrome lane: lane 0 is its thread's track, later lanes fold into it."""
        if type(sort_index) is not int or sort_index < 0:
            self._tracks.name_thread(pid, tid, sort_index=sort_index)
            return
        thread, lane = divmod(sort_index, _LANES_PER_THREAD)
        if lane == 0:
            self._first_lanes[(pid, thread)] = tid
            self._tracks.name_thread(pid, tid, sort_index=sort_index)
            return
        first = self._first_lanes.get((pid, thread))
        if first is not None:
            if len(self._lanes) >= 100_000:
                self._lanes.clear()
            self._lanes[(pid, tid)] = first

    def _flow(self, event: dict[str, Any]) -> bool:
        ns = _ns(event.get("ts"))
        if ns is None:
            return False
        key = (event.get("pid"), event.get("tid"))
        phase = event["ph"]
        if event.get("cat") == FLOW_CATEGORY:
            # otel_rl's own arrows are joined by span ids (see .slices); only the end of
            # one from another process says something the slices do not: its parent.
            args = event.get("args")
            parent = slice_id(args, _PARENT) if type(args) is dict else None
            if phase == "f" and type(parent) is str:
                child = self._last.get(key)
                if child is not None and child.start == ns and child.flow_in is None and not child.written:
                    child.flow_in = parent
            return True
        if phase == "t":
            return False
        ident = f"{event.get('cat')}\x1f{event.get('name')}\x1f{event.get('id', event.get('bind_id'))}"
        return self._window.bind(key, ns, "out" if phase == "s" else "in", flow_id(ident))

    _handlers = {
        "X": _slice, "i": _instant, "I": _instant, "R": _instant, "C": _counter, "M": _metadata,
        "s": _flow, "t": _flow, "f": _flow, "B": _begin_end, "E": _begin_end,
        "b": _nestable_async, "e": _nestable_async, "n": _nestable_async,
    }
