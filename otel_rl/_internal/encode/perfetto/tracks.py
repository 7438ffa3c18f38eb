"""The tracks of a native trace: processes, threads, sessions, tasks, steps and counters.

Every track has a uuid and a ``TrackDescriptor``, written ahead of the first
packet that uses it. Processes and threads keep the names the Chrome trace
gives them (``[trainer] Rank 0, Process``, ``MainThread``); a session, a task
and the steps of a thread each get a track of their own under their process,
so a session is one row rather than a lane shared with others.

Perfetto draws the slices of one track as a stack, so a track only takes a
slice that nests with those already on it (a :class:`~..lanes.Lane` checks);
one that does not goes to the track's overflow track, ``"<name> (2)"``. Slices
from otel_rl's Chrome encoder always nest (each of its lanes does, and a track
holds a part of one lane), so overflow tracks are for other writers' files.

Uuids are unique across writers: a per-rank writer draws a random salt, so the
per-rank files of a run can be concatenated into one trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..lanes import Lane, TwoGenerationMap
from . import fields as f
from .wire import length_field, string_field, varint, varint_field

__all__ = ["Track", "TrackRegistry", "geometric"]

#: Placement history a track keeps for its nesting check, in nanoseconds of span time.
HORIZON_NS = 600 * 1_000_000_000
_MAX_INTERVALS = 50_000
_PRUNE_STEP = _MAX_INTERVALS // 8
#: Sibling order under a process: counters first, then steps, threads, tasks and sessions.
_RANK_COUNTER = 1_000
_RANK_STEPS = 10_000
_RANK_THREAD = 100_000
_RANK_TIMED = 200_000_000
_INT32_MAX = (1 << 31) - 1


def geometric(_ancestor: Any, _span: Any) -> bool:
    """Slices without span ids (other writers' files) nest by their times alone."""
    return True


class Track:
    """One track: its uuid, descriptor fields, nesting state and overflow track."""

    __slots__ = ("uuid", "uuid_field", "name", "parent", "pid", "tid", "kind", "rank", "labels",
                 "sort_index", "described", "lane", "overflow", "number")

    def __init__(self, uuid: int, name: str, parent: Track | None, kind: str, rank: int = 0,
                 pid: Any = None, tid: Any = None) -> None:
        self.uuid = uuid
        #: ``TrackEvent.track_uuid``, ready to append.
        self.uuid_field = f.TRACK_UUID_KEY + varint(uuid)
        self.name = name
        self.parent = parent
        self.kind = kind
        self.rank = rank
        self.pid = pid
        self.tid = tid
        self.labels: str | None = None
        self.sort_index: int | None = None
        #: False until the descriptor is written (again after a name arrives late).
        self.described = False
        self.lane: Lane | None = None
        self.overflow: Track | None = None
        self.number = 1

    def take(self, start: int, end: int, slack: int = 0, span: Any = None,
             is_ancestor: Callable[[Any, Any], bool] = geometric) -> tuple[int, int] | None:
        """Takes ``[start, end]`` if it nests with the slices already here; returns where it
        was put, or ``None``.

        With a ``span`` id and ``is_ancestor``, a slice only sits under its own
        ancestors and only encloses its own descendants, as in the Chrome
        encoder's lanes: nesting never suggests a parent that is not one.

        Chrome JSON keeps microseconds in a double, so an epoch timestamp is only
        known to a quarter of a microsecond: two spans that touched can overlap by
        a few hundred nanoseconds once read back. Up to ``slack`` nanoseconds at
        each end, a slice that does not nest as given is narrowed, then widened,
        to nest where its writer placed it.
        """
        lane = self.lane
        if lane is None:
            lane = self.lane = Lane(0, 0, max(8, _MAX_INTERVALS // 5))
        placed: tuple[int, int] | None = (start, end)
        if not lane.insert(start, end, span, is_ancestor):
            placed = None
            if slack:
                if end - start > 2 * slack and lane.insert(start + slack, end - slack, span, is_ancestor):
                    placed = (start + slack, end - slack)
                elif lane.insert(start - slack, end + slack, span, is_ancestor):
                    placed = (start - slack, end + slack)
            if placed is None:
                return None
        if lane.count >= lane.next_prune:
            lane.shorten(HORIZON_NS, _MAX_INTERVALS, _PRUNE_STEP)
        return placed

    def descriptor(self) -> bytes:
        """The ``TrackDescriptor`` message of this track."""
        body = varint_field(f.TRACK_UUID, self.uuid)
        if self.parent is not None:
            body += varint_field(f.TRACK_PARENT_UUID, self.parent.uuid)
        kind = self.kind
        if kind == "process":
            process = varint_field(f.PROCESS_PID, self.pid)
            if self.name:
                # Unnamed, the process keeps any name another writer gave its pid.
                process += string_field(f.PROCESS_NAME, self.name)
            if self.sort_index is not None:
                process += varint_field(f.PROCESS_LEGACY_SORT_INDEX, self.sort_index)
            if self.labels:
                process += string_field(f.PROCESS_LABELS, self.labels)
            body += length_field(f.TRACK_PROCESS, process)
            body += varint_field(f.TRACK_CHILD_ORDERING, f.CHILD_ORDERING_EXPLICIT)
        elif kind == "thread":
            thread = (varint_field(f.THREAD_PID, self.pid) + varint_field(f.THREAD_TID, self.tid)
                      + string_field(f.THREAD_NAME, self.name))
            if self.sort_index is not None:
                thread += varint_field(f.THREAD_LEGACY_SORT_INDEX, self.sort_index)
            body += length_field(f.TRACK_THREAD, thread)
        else:
            body += string_field(f.TRACK_NAME, self.name)
            if kind == "counter":
                body += length_field(f.TRACK_COUNTER, b"")
            elif kind == "group":
                body += varint_field(f.TRACK_CHILD_ORDERING, f.CHILD_ORDERING_EXPLICIT)
        if self.rank:
            body += varint_field(f.TRACK_SIBLING_ORDER_RANK, self.rank)
        return body


def _valid_pid(pid: Any) -> bool:
    return type(pid) is int and 0 < pid <= _INT32_MAX


class TrackRegistry:
    """Finds or makes the track of each process, thread, session, task, steps and counter.

    Args:
        salt: Added to every uuid: 0 numbers the tracks from 1 (one writer), a random
            salt keeps the uuids of concurrent writers apart.
        max_tracks: Session, task and counter tracks remembered; older ones are
            forgotten (should they come back they are described again).
    """

    def __init__(self, salt: int = 0, max_tracks: int = 4_096) -> None:
        self._salt = salt
        self._count = 0
        self._processes: dict[Any, Track] = {}
        self._threads: dict[tuple[Any, Any], Track] = {}
        self._timed: TwoGenerationMap = TwoGenerationMap(max_tracks)
        self._global: Track | None = None
        self._renamed: list[Track] = []

    def _uuid(self) -> int:
        self._count += 1
        return (self._salt + self._count) & ((1 << 63) - 1)

    # --- processes and threads -----------------------------------------------------------
    def process(self, pid: Any) -> Track:
        """The track of process ``pid`` (a plain group track when ``pid`` is no usable pid)."""
        track = self._processes.get(pid)
        if track is None:
            if _valid_pid(pid):
                track = Track(self._uuid(), "", None, "process", pid=pid)
            else:
                track = Track(self._uuid(), str(pid), None, "group")
            if len(self._processes) >= 100_000:
                self._processes.clear()
            self._processes[pid] = track
        return track

    def thread(self, pid: Any, tid: Any) -> Track:
        """The track of thread ``tid`` of process ``pid``."""
        key = (pid, tid)
        track = self._threads.get(key)
        if track is None:
            process = self.process(pid)
            if process.kind == "process" and type(tid) is int and 0 < tid < (1 << 63):
                track = Track(self._uuid(), f"thread {tid}", process, "thread", _RANK_THREAD,
                              pid=pid, tid=tid)
            else:
                track = Track(self._uuid(), str(tid), process, "named", _RANK_THREAD)
            if len(self._threads) >= 100_000:
                self._threads.clear()
            self._threads[key] = track
        return track

    def name_process(self, pid: Any, name: Any = None, labels: Any = None, sort_index: Any = None) -> None:
        """Records what a ``process_name`` / ``process_labels`` / ``process_sort_index`` event says."""
        track = self.process(pid)
        if name is not None:
            track.name = str(name)
        if labels is not None:
            track.labels = str(labels)
        if type(sort_index) is int and abs(sort_index) <= _INT32_MAX:
            track.sort_index = sort_index
        self._changed(track)

    def name_thread(self, pid: Any, tid: Any, name: Any = None, sort_index: Any = None) -> None:
        """Records what a ``thread_name`` / ``thread_sort_index`` event says."""
        track = self.thread(pid, tid)
        if name is not None:
            track.name = str(name)
        if type(sort_index) is int and 0 <= sort_index <= _INT32_MAX - _RANK_THREAD:
            track.sort_index = sort_index
            track.rank = _RANK_THREAD + sort_index
        self._changed(track)

    def _changed(self, track: Track) -> None:
        # Metadata usually comes first; a name that arrives after the descriptor
        # was written is written again (a descriptor may be repeated).
        if track.described:
            track.described = False
            self._renamed.append(track)

    def renamed(self, out: list[bytes]) -> None:
        """Appends the descriptors written before their track's name or order changed."""
        if self._renamed:
            for track in self._renamed:
                self.describe(track, out)
            self._renamed.clear()

    def global_track(self) -> Track:
        """The track of instant events scoped to the whole trace."""
        if self._global is None:
            self._global = Track(self._uuid(), "global", None, "named")
        return self._global

    # --- tracks of their own -------------------------------------------------------------
    def timed(self, key: tuple, pid: Any, name: str, rank_ms: int, kind: str) -> Track:
        """The track ``key`` of a session, task, steps or async id of process ``pid``, made
        on first use.

        Args:
            key: What the track is for, unique within the process.
            pid: The process it is grouped under.
            name: Its name.
            rank_ms: Milliseconds into the trace of its first slice: sessions and
                tasks are listed in the order they started.
            kind: ``session``, ``task``, ``steps`` or ``async``.
        """
        full = (pid,) + key
        track = self._timed.get(full)
        if track is None:
            rank = _RANK_STEPS if kind == "steps" else _RANK_TIMED + min(max(rank_ms, 0), _INT32_MAX - _RANK_TIMED)
            track = Track(self._uuid(), name, self.process(pid), kind, rank)
            self._timed.set(full, track)
        return track

    def counter(self, pid: Any, name: str) -> Track:
        """The counter track ``name`` of process ``pid``."""
        full = ("counter", pid, name)
        track = self._timed.get(full)
        if track is None:
            track = Track(self._uuid(), name, self.process(pid), "counter", _RANK_COUNTER)
            self._timed.set(full, track)
        return track

    def overflow(self, track: Track) -> Track:
        """The next track of ``track``'s family for slices that do not nest on it."""
        if track.overflow is None:
            number = track.number + 1
            base = track.name.rsplit(" (", 1)[0] if track.number > 1 else track.name
            parent = track.parent if track.kind != "process" else track
            kind = "named" if track.kind in ("thread", "process", "group") else track.kind
            spill = Track(self._uuid(), f"{base} ({number})", parent, kind, track.rank + 1)
            spill.number = number
            track.overflow = spill
        return track.overflow


    @staticmethod
    def describe(track: Track, out: list[bytes]) -> None:
        """Appends the descriptors ``track`` needs (its parent's first) that are not written yet."""
        if track.described and (track.parent is None or track.parent.described):
            return
        chain = []
        node: Track | None = track
        while node is not None:
            if not node.described:
                chain.append(node)
            node = node.parent
        for node in reversed(chain):
            node.described = True
            out.append(node.descriptor())
