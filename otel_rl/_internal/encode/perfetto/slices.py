"""Slices held back a little before they are written: how flows find both ends, and ties are ordered.

Events arrive as spans end, so a task's sessions come before the task itself,
and a parent is often written long before a child that outlives it. A flow
arrow needs a mark on both of its slices, so the most recent slices wait in a
window (:class:`SliceWindow`, a few thousand of them) before they are written:
a parent and child that both pass through it while the other is still there
get their arrow.

Flows are bound the way Chrome's own traces bind them, and one parent fans
out to every child: the parent's slice begin carries ``FLOW_OUT`` with an id
made from its span id, each child's slice end ``FLOW_IN`` with the id made from
its parent's span id. A child in another process needs nothing from this
window: it knows its parent's span id, and the parent marked itself as a flow
source (its context left the process), so per-rank files joined later still
get their arrows.

Perfetto orders packets by timestamp and packets with the same timestamp by
their place in the file; slices that start together on one track must
therefore be written outermost first. The window puts a slice that encloses
one waiting with the same start ahead of it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from ..lanes import TwoGenerationMap
from .tracks import Track

__all__ = ["INSTANT", "SLICE", "BEGIN", "END", "Record", "SliceWindow"]

SLICE = 0
INSTANT = 1
BEGIN = 2
END = 3

#: Slice starts remembered for ordering ties (forgotten wholesale beyond this).
_MAX_STARTS = 65_536


class Record:
    """One event waiting to be written: a slice (begin and end), an instant, or a lone begin or end.

    ``flow_out`` / ``flow_in`` hold what the flow id is made from: a span id
    (hex text) or an id already made (an int); ``None`` for no flow.
    """

    __slots__ = ("start", "end", "track", "body", "kind", "flow_out", "flow_in", "before",
                 "attached", "written", "span", "parent", "parent_part")

    def __init__(self, kind: int, start: int, end: int, track: Track, body: bytes,
                 span: str | None = None, parent: str | None = None, parent_part: bytes = b"") -> None:
        self.kind = kind
        self.start = start
        self.end = end
        self.track = track
        self.body = body
        self.span = span
        #: The parent's span id, and its ``parent_span_id`` annotation: written only
        #: where neither nesting nor an arrow shows the parent.
        self.parent = parent
        self.parent_part = parent_part
        self.flow_out: Any = None
        self.flow_in: Any = None
        self.before: list[Record] | None = None
        self.attached = False
        self.written = False


def _outermost_first(record: Record) -> int:
    return -record.end


class SliceWindow:
    """The slices (and instants) not written yet, oldest first.

    Args:
        size: Records held before the oldest are written.
    """

    def __init__(self, size: int) -> None:
        self.size = max(0, size)
        self._fifo: deque[Record] = deque()
        self._by_span: dict[str, Record] = {}
        # parent span id -> children waiting for it to arrive
        self._awaiting = TwoGenerationMap(max(1024, 2 * self.size))
        # span id -> track uuid, for written slices that carry FLOW_OUT (late children can still join)
        self._sources = TwoGenerationMap(16_384)
        # span id -> (track uuid, start, end) of a written slice, for children written after their parent
        self._written = TwoGenerationMap(16_384)
        # (track uuid, start) -> the first slice seen there: ties at one timestamp are ordered
        # by file position, so an enclosing slice must be written before what it encloses
        self._starts: dict[tuple[int, int], Record] = {}
        # (pid, tid, start) -> slice, for other writers' flow events; made on first need
        self._by_start: dict[tuple, Record] | None = None

    def __len__(self) -> int:
        return len(self._fifo)

    # --- placement -------------------------------------------------------------------------
    def tied(self, track: Track, start: int) -> bool:
        """Whether a slice starting at ``start`` on ``track`` was seen."""
        return (track.uuid, start) in self._starts

    def conflicts(self, track: Track, start: int, end: int) -> bool:
        """Whether ``[start, end]`` would enclose a slice already written at the same start
        on ``track`` (it could not be written ahead of it any more)."""
        first = self._starts.get((track.uuid, start))
        return first is not None and first.written and end > first.end

    def add(self, record: Record, key: tuple | None = None) -> None:
        """Queues an instant or a lone begin / end (``key``: ``(pid, tid)`` for flow events)."""
        self._fifo.append(record)
        if key is not None and self._by_start is not None:
            self._index(record, key)

    def add_slice(self, record: Record, key: tuple) -> None:
        """Queues a slice, ordering it against slices with the same start and joining its flows.

        Args:
            record: The slice; ``record.span`` is its span id and ``record.parent`` its
                parent's, if it has them.
            key: ``(pid, tid)`` it came from.
        """
        parent = record.parent
        starts = self._starts
        key = (record.track.uuid, record.start)
        first = starts.get(key)
        if first is None:
            if len(starts) >= _MAX_STARTS:
                starts.clear()
            starts[key] = record
            self._fifo.append(record)
        elif record.end > first.end and not first.written:
            # Encloses a slice waiting with the same start: written just ahead of it.
            if first.before is None:
                first.before = [record]
            else:
                first.before.append(record)
            record.attached = True
            self._fifo.append(record)
        else:
            self._fifo.append(record)
        if parent is not None:
            self._join_parent(record, parent)
        span = record.span
        if span is not None:
            children = self._awaiting.pop(span)
            if children:
                track = record.track
                for child in children:
                    if not child.written and child.flow_in is None and child.track is not track:
                        child.flow_in = span
                        record.flow_out = span
            self._by_span[span] = record
        if self._by_start is not None:
            self._index(record, key)

    def _join_parent(self, record: Record, parent: str) -> None:
        waiting = self._by_span.get(parent)
        if waiting is not None:
            if waiting.track is not record.track:
                waiting.flow_out = parent
                record.flow_in = parent
            return
        track = self._sources.get(parent)
        if track is not None:
            if track != record.track.uuid:
                record.flow_in = parent
            return
        children = self._awaiting.get(parent)
        if children is None:
            self._awaiting.set(parent, [record])
        elif len(children) < 4096:
            children.append(record)

    # --- flows marked by other events ----------------------------------------------------
    def mark_source(self, span: str) -> None:
        """The slice of ``span`` sent its context away: its children elsewhere draw arrows from it."""
        record = self._by_span.get(span)
        if record is not None:
            record.flow_out = span

    def bind(self, key: tuple, start: int, direction: str, flow: int) -> bool:
        """Binds another writer's flow event to the waiting slice of ``key`` starting at ``start``.

        Args:
            key: ``(pid, tid)``.
            start: The flow event's timestamp (ns): the slice starting then.
            direction: ``"out"`` (flow start) or ``"in"`` (flow end).
            flow: The flow id.

        Returns:
            Whether a slice took it.
        """
        if self._by_start is None:
            self._by_start = {}
            for record in self._fifo:
                if record.kind == SLICE and record.track.pid is not None:
                    self._by_start[(record.track.pid, record.track.tid, record.start)] = record
        record = self._by_start.get(key + (start,))
        if record is None or record.written:
            return False
        if direction == "out":
            if record.flow_out is not None:
                return False
            record.flow_out = flow
        else:
            if record.flow_in is not None:
                return False
            record.flow_in = flow
        return True

    def _index(self, record: Record, key: tuple) -> None:
        index = self._by_start
        if len(index) >= 4 * max(1024, self.size):
            index.clear()
        index[key + (record.start,)] = record

    # --- writing -------------------------------------------------------------------------
    def ready(self, keep: int | None = None) -> Iterator[Record]:
        """Takes the oldest records out until ``keep`` remain (the window size by default),
        in the order they must be written."""
        keep = self.size if keep is None else keep
        fifo = self._fifo
        while len(fifo) > keep:
            record = fifo.popleft()
            if record.attached:
                continue  # written with the slice it encloses
            if record.before:
                for outer in sorted(record.before, key=_outermost_first):
                    if not outer.written:
                        yield self._taken(outer)
                record.before = None
            yield self._taken(record)

    def _taken(self, record: Record) -> Record:
        record.written = True
        parent = record.parent
        if parent is not None and record.parent_part:
            if record.flow_in == parent:
                record.parent_part = b""  # the arrow shows it
            else:
                above = self._by_span.get(parent)
                placed = (above.track.uuid, above.start, above.end) if above is not None \
                    else self._written.get(parent)
                if placed is not None and placed[0] == record.track.uuid and \
                        placed[1] <= record.start and record.end <= placed[2]:
                    record.parent_part = b""  # it encloses this slice on its track
        span = record.span
        if span is not None:
            if self._by_span.get(span) is record:
                del self._by_span[span]
            if record.flow_out is not None:
                self._sources.set(span, record.track.uuid)
            self._written.set(span, (record.track.uuid, record.start, record.end))
        return record
