"""Spans to Chrome Trace Event Format events (what Perfetto and chrome://tracing read).

:class:`ChromeTraceEncoder` is pure: it turns SDK ``ReadableSpan`` objects into
event dicts and never touches a file. The per-rank file exporter and the
converter's OTLP/JSON path both use it, so a span looks the same whichever way
it reached the viewer.

Why there is more here than a field mapping: a Chrome trace draws complete
(``X``) events of one ``(pid, tid)`` track as a stack, and a stack cannot show
two slices that partially overlap - viewers drop or mangle them. Many asyncio
sessions interleave on one thread, so their spans overlap all the time. Each
source thread is therefore split into *lanes* (lane 0 is the thread's own
track, further lanes are synthetic tracks named ``"<thread> · lane N"``), and
every span goes into a lane where it nests properly. Within a lane a span only
sits under its own ancestors and only encloses its own descendants, so the
picture never suggests a parent that is not one. Sessions are kept together:
their phases end before the session span does, so they wait until it arrives
and are then laid out under it. Parent/child pairs that end up on different
tracks, and client/server pairs in different processes, are joined with flow
arrows.

The lanes themselves are in :mod:`.lanes`, track names and pids in
:mod:`.track_metadata`, value conversion in :mod:`.json_values` and the names
of flow and batch lines in :mod:`.chrome_markers`.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.trace import SpanKind

from .. import diagnostics, guard, keys
from ..recording import ids
from .chrome_markers import (
    BATCH_MARKER,
    BATCH_MARKER_PREFIX,
    EXACT_END,
    EXACT_START,
    FLOW_CATEGORY,
    FLOW_NAME,
    FLOW_SOURCE,
    LOCAL_FLOW_MIX,
)
from . import chrome_lines, chrome_place
from .chrome_place import MAX_WAITING_CHILDREN, outer_first
from .event_dicts import counter_event, slice_event
from .json_values import chrome_args, json_safe_value
from .kineto_clock import kineto_shift_us
from .readable import span_record
from ..recording.record import (END, EVENTS, KIND, LINKS, NAME, PARENT_ID, PARENT_REMOTE, SCOPE, SPAN_ID,
                                START, STATUS, STATUS_DESC, TRACE_ID, is_bundled_phase)
from .lanes import Lane, LaneGroup, ProcessLanes, TwoGenerationMap, is_ancestor
from .track_metadata import (
    TRAINING_ROLES,
    add_lane_metadata,
    add_process_metadata,
    process_pid,
    resource_identity,
)

# Importers of this module find the names that moved to its neighbours here too.
__all__ = [
    "BATCH_MARKER", "BATCH_MARKER_PREFIX", "FLOW_CATEGORY", "FLOW_NAME", "FLOW_SOURCE", "TRAINING_ROLES",
    "ChromeTraceEncoder", "json_safe_value", "kineto_shift_us",
]

# Each encoder gets its own tid range, so two encoders writing the same file from
# one process (a reconfigured exporter) never share a track by accident. The first
# starts at 1: every slice line carries its tid, and small ones are short.
_TIDS_PER_ENCODER = 1 << 20
_encoder_numbers = itertools.count(0)
# A remote child's flow id: its own span id mixed with this, unique per edge.
_REMOTE_FLOW_MIX = 0xC2B2AE3D27D4EB4F

_MAX_GROUPS = 1024  # source threads remembered per process
_MAX_ANCESTRY = 64

# Module-level copies of the keys read for every placed span (one lookup, not two).
_CATEGORY = keys.CATEGORY
_DEFAULT_CATEGORY = keys.DEFAULT_CATEGORY
_ARG_SPAN = keys.TRACE_ARG_SPAN_ID
_ARG_PARENT = keys.TRACE_ARG_PARENT_ID
_ARG_TRACE = keys.TRACE_ARG_TRACE_ID
_SPAN_KIND = keys.SPAN_KIND
_KIND_INSTANT = keys.KIND_INSTANT
_CONTEXT_SENT = keys.CONTEXT_SENT
_THREAD_ID = keys.THREAD_ID
_KIND_COUNTER = keys.KIND_COUNTER
_GAUGE_VALUE = keys.GAUGE_VALUE
_SESSION_ID = keys.SESSION_ID
_KIND_SESSION = keys.KIND_SESSION
_KIND_NAMES = chrome_lines.KIND_NAMES
_STATUS_NAMES = chrome_lines.STATUS_NAMES
_CLIENT = SpanKind.CLIENT.value
_PRODUCER = SpanKind.PRODUCER.value


def _flow_id(value: int) -> str:
    return f"0x{value & 0xFFFFFFFFFFFFFFFF:016x}"


class ChromeTraceEncoder:
    """Turns finished spans into Chrome Trace Event Format dicts.

    Not thread-safe: one owner (an exporter holding a lock, or the converter)
    feeds it. Memory is bounded by the ``max_*`` arguments, whatever the run
    length.

    Args:
        max_buffered_spans: Session spans waiting for their session span; beyond
            this the oldest waiting session is laid out without it.
        session_wait_s: A session whose spans have waited this long (span clock)
            for the session span is laid out without it.
        horizon_s: Placement history a busy lane keeps, in seconds of span time.
        max_intervals_per_lane: Hard cap on the placement history of one lane.
        max_tracked_spans: Span ids remembered for nesting, ancestry and flows.
        exact: Also give each complete event its span's start and end in integer
            nanoseconds (:data:`~.chrome_markers.EXACT_START`, ``EXACT_END``), for
            the native Perfetto writer; never for a JSON file.
    """

    def __init__(
        self,
        *,
        max_buffered_spans: int = 100_000,
        session_wait_s: float = 600.0,
        horizon_s: float = 600.0,
        max_intervals_per_lane: int = 50_000,
        max_tracked_spans: int = 50_000,
        exact: bool = False,
    ) -> None:
        self._exact = exact
        self._max_buffered = max(1, max_buffered_spans)
        self._session_wait_ns = int(session_wait_s * 1e9)
        self._horizon_ns = int(horizon_s * 1e9)
        self._max_intervals = max(16, max_intervals_per_lane)
        self._prune_at = max(8, self._max_intervals // 5)
        self._prune_step = max(8, self._max_intervals // 8)
        self._next_tid = next(_encoder_numbers) * _TIDS_PER_ENCODER % (1 << 31) + 1
        self._resource_cache: dict[int, tuple[Any, ProcessLanes]] = {}
        self._processes: dict[tuple, ProcessLanes] = {}
        self._pid_owner: dict[int, tuple] = {}
        # span id -> (group, lane index, pid, tid, start in us) once placed
        self._placed = TwoGenerationMap(max_tracked_spans)
        # span id -> local parent span id (0 for roots and remote parents)
        self._parent_of = TwoGenerationMap(max_tracked_spans)
        self._is_ancestor = functools.partial(is_ancestor, self._parent_of, depth=_MAX_ANCESTRY)
        # parent span id -> placed children still waiting for that parent
        self._waiting = TwoGenerationMap(max_tracked_spans)
        # (pid, session id) -> [(span, process), ...], oldest session first
        self._buffered: dict[tuple, list[tuple[tuple, Mapping[str, Any], ProcessLanes]]] = {}
        self._buffered_count = 0
        self._session_lane = TwoGenerationMap(10_000)  # (pid, session id) -> (group, lane index)
        self._foreign_sessions = TwoGenerationMap(10_000)  # sessions whose session span lives elsewhere
        self._newest_end = 0
        self._clock = 0
        # The latest trace id and its hex text: consecutive spans mostly share a trace.
        self._trace_hex: tuple[int, str] = (-1, "")
        self._record_resource: Any = None
        self._record_proc: ProcessLanes | None = None
        # The compiled writer of complete events' lines, once records come (set_resource):
        # the file exporter writes those lines as they are; other users get dicts.
        self._complete_line: Any = None
        # Its compiled twin (records only): the walk over a batch (the common case), _add
        # and _place.
        self._encode_records: Any = None
        self._place_span: Any = None
        self._add_span: Any = None

    # --- public API -------------------------------------------------------------------
    def encode(self, spans: Iterable[Any]) -> list[dict[str, Any] | bytes]:
        """Encodes finished spans; returns the events that are ready now.

        Spans of a session may be held back until the session span arrives, so
        the result can hold fewer (or more) spans than were passed in.

        Args:
            spans: Finished SDK spans, in the order they ended where possible;
                or, from otel_rl's own export path, ``(record, flat attributes)``
                tuples (:mod:`..recording.record`; events, if any, with flat
                attributes), for the resource given to :meth:`set_resource`, and
                bundled sessions (:func:`..export.file_exporter.bundled_spans`).

        Returns:
            Event dicts (metadata, complete, instant and flow events) ready for
            ``orjson.dumps``; complete events of records come as their encoded
            line already (``bytes``, no newline) where :mod:`.chrome_lines` has its compiled
            writer, which the file exporter writes as they are.
        """
        out: list[Any] = []
        if self._encode_records is not None and type(spans) is list:
            # The compiled common case; it hands every other item to _encode_one, in order.
            try:
                self._encode_records(self, spans, out, self._encode_one)
            except Exception as exc:  # noqa: BLE001 - only a failure of the interpreter itself
                guard.report(diagnostics.CHROME_TRACE_ENCODE_ERROR, "a batch could not be encoded: %r", exc)
            return out
        for span in spans:
            self._encode_one(span, out)
        return out

    def _encode_one(self, span: Any, out: list[Any]) -> None:
        if type(span) is tuple and len(span) == 3:
            # A bundled session (file_exporter.bundled_spans): its phases' pairs, then its own.
            for pair in span[2]:
                self._encode_one(pair, out)
            span = span[:2]
        try:
            if type(span) is tuple:
                proc = self._record_proc
                if proc is None:
                    proc = self._record_proc = self._process(self._record_resource, out)
                self._add(span[0], span[1], proc, out)
            else:
                self._add(span_record(span), span.attributes, self._process(span.resource, out), out)
        except Exception as exc:  # noqa: BLE001 - one odd span must not lose the rest
            self._encode_error(exc)


    def set_resource(self, resource: Any) -> None:
        """The resource of the records :meth:`encode` is given (otel_rl's own process)."""
        self._record_resource = resource
        self._record_proc = None
        native = chrome_lines.native
        self._complete_line = native.complete if native is not None and not self._exact else None
        fast = chrome_place.native is not None and self._complete_line is not None
        self._encode_records = chrome_place.native.encode_records if fast else None
        self._place_span = chrome_place.native.place_span if fast else None
        self._add_span = chrome_place.native.add_span if fast else None

    def finish(self) -> list[dict[str, Any] | bytes]:
        """Releases every span still waiting for its session span.

        Returns:
            The events of the released spans.
        """
        out: list[Any] = []
        for key in list(self._buffered):
            try:
                self._release(key, out)
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.CHROME_TRACE_ENCODE_ERROR, "a span could not be encoded: %r", exc)
        return out

    @property
    def buffered(self) -> int:
        """Spans currently held back waiting for their session span."""
        return self._buffered_count

    # --- sessions -------------------------------------------------------------------------
    def _add(self, rec: tuple, attrs: Mapping[str, Any], proc: ProcessLanes, out: list[Any]) -> None:
        if self._add_span is not None:
            self._add_span(self, rec, attrs, proc, out)
            return
        if attrs.get(_SPAN_KIND) == _KIND_COUNTER:
            self._counter_line(rec, attrs, proc, out)
            return
        span_id = rec[SPAN_ID]
        parent_id = rec[PARENT_ID]
        local_root = not parent_id or rec[PARENT_REMOTE]
        # A span not remembered is a local root to is_ancestor; a bundled phase is no one's
        # parent, so only its own insert asks for its parent (_place tells it).
        if not local_root and not is_bundled_phase(rec):
            self._parent_of.set(span_id, parent_id)
        end = rec[END]
        if end > self._newest_end:
            self._newest_end = end
        session = attrs.get(_SESSION_ID)
        if session is None:
            self._place(rec, proc, attrs, out)
        else:
            key = (proc.pid, session)
            if attrs.get(_SPAN_KIND) == _KIND_SESSION:
                self._place_session(rec, proc, attrs, key, out)
            elif key in self._foreign_sessions:
                self._place(rec, proc, attrs, out)
            else:
                lane = self._session_lane.get(key)
                if lane is not None:  # outlived its session span
                    self._place(rec, proc, attrs, out, prefer=lane)
                elif local_root:
                    # A local root that is not the session span: this process runs
                    # work for a session whose session span lives elsewhere (an
                    # inference server, a worker), so nothing is worth waiting for.
                    self._foreign_sessions.set(key, True)
                    if key in self._buffered:
                        self._release(key, out)
                    self._place(rec, proc, attrs, out)
                else:
                    self._buffer(key, (rec, attrs, proc), out)
        if self._buffered:
            self._release_stale(out)

    @staticmethod
    def _counter_line(rec: tuple, attrs: Mapping[str, Any], proc: ProcessLanes, out: list[Any]) -> None:
        """A sampled counter: a point on the process's counter track, no slice."""
        out.append(counter_event(rec[NAME], attrs.get(_GAUGE_VALUE), proc.pid, rec[START] / 1000))

    def _buffer(self, key: tuple, item: tuple, out: list[Any]) -> None:
        waiting = self._buffered.get(key)
        if waiting is None:
            waiting = self._buffered[key] = []
        waiting.append(item)
        self._buffered_count += 1
        while self._buffered_count > self._max_buffered:
            self._released_early()
            self._release(next(iter(self._buffered)), out)

    def _release_stale(self, out: list[Any]) -> None:
        buffered = self._buffered
        limit = self._newest_end - self._session_wait_ns
        while buffered:
            key = next(iter(buffered))
            if buffered[key][0][0][END] >= limit:
                break
            self._release(key, out)

    def _release(self, key: tuple, out: list[Any]) -> None:
        waiting = self._buffered.pop(key, None)
        if not waiting:
            return
        self._buffered_count -= len(waiting)
        waiting.sort(key=outer_first)
        for rec, attrs, proc in waiting:
            self._place(rec, proc, attrs, out)

    def _place_session(self, rec: tuple, proc: ProcessLanes, attrs: Mapping[str, Any],
                       key: tuple, out: list[Any]) -> None:
        lane = self._place(rec, proc, attrs, out)
        self._session_lane.set(key, lane)
        waiting = self._buffered.pop(key, None)
        if not waiting:
            return
        self._buffered_count -= len(waiting)
        # Outer spans first, so each span finds its parent already placed and
        # can sit under it in the session's lane.
        waiting.sort(key=outer_first)
        for child, child_attrs, child_proc in waiting:
            self._place(child, child_proc, child_attrs, out, prefer=lane)
        group, index = lane
        group.lanes[index].pack_last(rec[SPAN_ID])

    # --- processes and threads -----------------------------------------------------------
    def _process(self, resource: Any, out: list[dict[str, Any]]) -> ProcessLanes:
        cached = self._resource_cache.get(id(resource))
        if cached is not None and cached[0] is resource:
            return cached[1]
        attrs = resource.attributes
        ident = resource_identity(attrs)
        proc = self._processes.get(ident)
        if proc is None:
            proc = self._new_process(attrs, ident, out)
        if len(self._resource_cache) >= 1024:
            self._resource_cache.clear()
        self._resource_cache[id(resource)] = (resource, proc)
        return proc

    def _new_process(self, attrs: Mapping[str, Any], ident: tuple,
                     out: list[dict[str, Any]]) -> ProcessLanes:
        # No usable pid, or another resource already has it: one derived from the resource.
        pid = process_pid(attrs, ident, self._pid_owner)
        if len(self._processes) >= 10_000:
            # Thousands of distinct resources in one stream: forget the old ones
            # rather than grow; their pids stay reserved so none is reused.
            self._processes.clear()
        self._pid_owner[pid] = ident
        proc = self._processes[ident] = ProcessLanes(pid, attrs.get(keys.RANK), attrs.get(keys.ROLE))
        add_process_metadata(attrs, pid, out)
        return proc

    def _group(self, proc: ProcessLanes, attrs: Mapping[str, Any], rec: tuple) -> LaneGroup:
        thread = attrs.get(keys.THREAD_ID)
        if thread is not None:
            key: Any = thread
        else:
            # Spans from other instrumentation carry no thread: one group per
            # instrumentation scope keeps them together and apart from threads.
            scope = rec[SCOPE]
            key = ("scope", scope[0] if scope is not None else keys.INSTRUMENTATION_NAME)
        groups = proc.groups
        group = groups.get(key)
        if group is None:
            if len(groups) >= _MAX_GROUPS:
                # A process that keeps starting threads: forget the one idle
                # longest. Should it come back it gets fresh tracks.
                del groups[min(groups.values(), key=_last_used).key]
            if thread is not None:
                name = attrs.get(keys.THREAD_NAME) or f"thread {thread}"
            else:
                name = key[1] or "spans"
            group = groups[key] = LaneGroup(key, str(name), proc.groups_made)
            proc.groups_made += 1
        self._clock += 1
        group.used = self._clock
        return group

    def _new_lane(self, proc: ProcessLanes, group: LaneGroup, out: list[dict[str, Any]]) -> Lane:
        index = len(group.lanes)
        tid = self._next_tid
        self._next_tid += 1
        lane = Lane(index, tid, self._prune_at)
        group.lanes.append(lane)
        add_lane_metadata(proc.pid, tid, group.name, group.number, index, out)
        return lane

    # --- placement and events ------------------------------------------------------------
    def _place(self, rec: tuple, proc: ProcessLanes, attrs: Mapping[str, Any],
               out: list[Any], prefer: tuple[LaneGroup, int] | None = None,
               ) -> tuple[LaneGroup, int]:
        if self._place_span is not None:
            return self._place_span(self, rec, proc, attrs, out, prefer)
        start = rec[START]
        end = rec[END]
        if end < start:
            end = start
        span_id = rec[SPAN_ID]
        parent_id = rec[PARENT_ID]
        remote = rec[PARENT_REMOTE]
        thread = attrs.get(_THREAD_ID)
        group = proc.groups.get(thread) if thread is not None else None
        if group is None:
            group = self._group(proc, attrs, rec)
        else:
            self._clock += 1
            group.used = self._clock
        lanes = group.lanes

        parent_rec = self._placed.get(parent_id) if parent_id and not remote else None
        # A bundled phase is no one's parent: no child waits for it and no map keeps it.
        bundled = bool(parent_id) and not remote and is_bundled_phase(rec)
        waiting = self._waiting
        children = waiting.pop(span_id) if not bundled and (waiting.young or waiting.old) else None

        chosen = None
        is_ancestor = self._is_ancestor  # (ancestor, span id): whether one is the other's local ancestor
        if bundled:
            is_ancestor = functools.partial(is_ancestor, own=span_id, own_parent=parent_id)
        if parent_rec is None and prefer is None and not children:
            # Nothing to sit under or enclose: the first lane that takes it.
            for lane in lanes:
                if lane.insert(start, end, span_id, is_ancestor):
                    chosen = lane
                    break
        else:
            # Lanes worth trying first: the parent's (children sit under parents),
            # the session's, then the lane of a child already placed (a parent
            # arriving after its children can enclose them there).
            tried: list[int] = []
            if parent_rec is not None and parent_rec[0] is group:
                tried.append(parent_rec[1])
            if prefer is not None and prefer[0] is group and prefer[1] not in tried:
                tried.append(prefer[1])
            if children:
                for child in children:
                    if child[0] is group and child[1] not in tried:
                        tried.append(child[1])
                        break
            for index in tried:
                if lanes[index].insert(start, end, span_id, is_ancestor):
                    chosen = lanes[index]
                    break
            if chosen is None:
                for lane in lanes:
                    if lane.index not in tried and lane.insert(start, end, span_id, is_ancestor):
                        chosen = lane
                        break
        if chosen is None:
            chosen = self._new_lane(proc, group, out)
            chosen.insert(start, end, span_id, is_ancestor)
        if chosen.count >= chosen.next_prune:
            chosen.shorten(self._horizon_ns, self._max_intervals, self._prune_step)

        pid = proc.pid
        tid = chosen.tid
        ts = start / 1000
        span_kind = attrs.get(_SPAN_KIND)
        cat = attrs.get(_CATEGORY) or span_kind or _DEFAULT_CATEGORY
        trace_id = rec[TRACE_ID]
        if trace_id == span_id:
            trace_text = None  # a root: its span id says it
        else:
            trace_hex = self._trace_hex
            if trace_hex[0] != trace_id:
                trace_hex = self._trace_hex = (trace_id, ids.trace_text(trace_id))
            trace_text = trace_hex[1]
        line = None
        if self._complete_line is not None and span_kind != _KIND_INSTANT:
            # The line orjson would write for the dict below, or None where the dict is needed.
            line = self._complete_line(rec, attrs, cat, ts, (end - start) / 1000, pid, tid, trace_text)
        if line is not None:
            out.append(line)
        else:
            self._slice(rec, attrs, span_kind, cat, trace_text, pid, tid, ts, end, out)
        if _GAUGE_VALUE in attrs or rec[EVENTS]:
            self._extras(rec, attrs, cat, pid, tid, ts, out)

        record = (group, chosen.index, pid, tid, ts)
        if not bundled:
            self._placed.set(span_id, record)
        if parent_id:
            if remote:
                self._remote_flow(span_id, parent_id, pid, tid, ts, out)
            elif parent_rec is not None:
                if parent_rec[2] != pid or parent_rec[3] != tid:
                    self._link(parent_rec, record, span_id, out)
            else:
                siblings = waiting.get(parent_id)
                if siblings is None:
                    waiting.set(parent_id, [record + (span_id,)])
                elif len(siblings) < MAX_WAITING_CHILDREN:
                    siblings.append(record + (span_id,))
                else:
                    self._flows_dropped()
        if children:
            for child in children:
                self._link(record, child, child[5], out)
        kind = rec[KIND]
        if kind == _CLIENT or kind == _PRODUCER or attrs.get(_CONTEXT_SENT):
            self._flow_source(span_id, pid, tid, ts, out)
        return group, chosen.index

    @staticmethod
    def _extras(rec: tuple, attrs: Mapping[str, Any], cat: Any, pid: int, tid: int, ts: float,
                out: list[Any]) -> None:
        """A placed span's gauge sample and its events (instants, and their gauge samples)."""
        if _GAUGE_VALUE in attrs:
            out.append(counter_event(rec[NAME], attrs[_GAUGE_VALUE], pid, ts))
        for event_name, event_attrs, timestamp in rec[EVENTS] or ():
            event_ts = timestamp / 1000
            out.append(slice_event("i", event_name, cat, event_ts, pid, tid, chrome_args(event_attrs), s="t"))
            if event_attrs and _GAUGE_VALUE in event_attrs:
                out.append(counter_event(event_name, event_attrs[_GAUGE_VALUE], pid, event_ts))

    @staticmethod
    def _remote_flow(span_id: int, parent_id: int, pid: int, tid: int, ts: float, out: list[Any]) -> None:
        """The other side of a process boundary: the converter adds the flow's start on the
        parent's slice, in another file. One id per child: a broadcast gets an arrow each."""
        out.append({"ph": "f", "bp": "e", "name": FLOW_NAME, "cat": FLOW_CATEGORY,
                    "id": _flow_id(span_id ^ _REMOTE_FLOW_MIX), "ts": ts, "pid": pid,
                    "tid": tid, "args": {_ARG_PARENT: f"{parent_id:016x}"}})

    @staticmethod
    def _flow_source(span_id: int, pid: int, tid: int, ts: float, out: list[Any]) -> None:
        """A span whose context left the process: where remote children's flows start."""
        out.append({"ph": "M", "name": FLOW_SOURCE, "pid": pid, "tid": tid, "ts": ts,
                    "args": {_ARG_SPAN: f"{span_id:016x}"}})

    # What the Python steps and the compiled twin count and report through.
    _flows_dropped = staticmethod(functools.partial(guard.count, diagnostics.CHROME_TRACE_FLOWS_DROPPED))
    _released_early = staticmethod(functools.partial(guard.count, diagnostics.CHROME_TRACE_SESSIONS_RELEASED_EARLY))
    _encode_error = staticmethod(functools.partial(guard.report, diagnostics.CHROME_TRACE_ENCODE_ERROR,
                                                   "a span could not be encoded: %r"))

    def _slice(self, rec: tuple, attrs: Mapping[str, Any], span_kind: Any, cat: Any, trace_text: str | None,
               pid: int, tid: int, ts: float, end: int, out: list[Any]) -> None:
        """The complete (or instant) event of a placed span, as a dict (``trace_text``: ``None``
        on a root, whose trace id is its span id)."""
        start = rec[START]
        span_id = rec[SPAN_ID]
        parent_id = rec[PARENT_ID]
        args = chrome_args(attrs)
        if trace_text is not None:
            args[_ARG_TRACE] = trace_text
        args[_ARG_SPAN] = f"{span_id:016x}"
        if parent_id:
            args[_ARG_PARENT] = f"{parent_id:016x}"
        kind = rec[KIND]
        if kind:
            args["span.kind"] = _KIND_NAMES[kind]
        code = rec[STATUS]
        if code:
            args["status"] = _STATUS_NAMES[code]
            if rec[STATUS_DESC]:
                args["status.description"] = rec[STATUS_DESC]
        links = rec[LINKS]
        if links:
            args["links"] = [f"{link[0]:032x}:{link[1]:016x}" for link in links]
        if span_kind == _KIND_INSTANT:
            # instant() outside any span: a point in time, as AReaL writes it.
            out.append(slice_event("i", rec[NAME], cat, ts, pid, tid, args, s="t"))
        else:
            complete = slice_event("X", rec[NAME], cat, ts, pid, tid, args, dur=(end - start) / 1000)
            if self._exact:
                complete[EXACT_START] = start
                complete[EXACT_END] = end
            out.append(complete)

    @staticmethod
    def _link(parent: tuple, child: tuple, child_id: int, out: list[dict[str, Any]]) -> None:
        if parent[2] == child[2] and parent[3] == child[3]:
            return  # same track: nesting already shows the relation
        flow_id = _flow_id(child_id ^ LOCAL_FLOW_MIX)
        # The start binds to the slice open on the parent's track at its own start
        # (the parent), the end to the slice enclosing the child's start (the child).
        out.append({"ph": "s", "name": FLOW_NAME, "cat": FLOW_CATEGORY, "id": flow_id,
                    "ts": parent[4], "pid": parent[2], "tid": parent[3]})
        out.append({"ph": "f", "bp": "e", "name": FLOW_NAME, "cat": FLOW_CATEGORY, "id": flow_id,
                    "ts": child[4], "pid": child[2], "tid": child[3]})


def _last_used(group: LaneGroup) -> int:
    return group.used
