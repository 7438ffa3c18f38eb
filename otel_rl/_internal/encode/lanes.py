"""Lanes: the tracks a source thread's spans are laid out on so that they nest.

A Chrome trace draws the complete events of one ``(pid, tid)`` track as a
stack, and cannot show two slices that partially overlap. A :class:`Lane`
keeps the intervals already placed on one track as a forest of properly
nested intervals and accepts a new one only where it nests; the encoder opens
another lane when none does. Memory stays bounded: a lane forgets intervals
older than its horizon (:meth:`Lane.prune`).
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left, bisect_right
from typing import Any, Callable

#: A packed level of leaf intervals (:func:`pack_leaves`): each its start and end (int64)
#: and its span id (uint64), little-endian. ``_chrome_place.c`` reads and writes the same.
_PACKED = struct.Struct("<qqQ")


class TwoGenerationMap:
    """A bounded map: when the young generation fills it becomes the old one.

    Cheaper than evicting one entry at a time from an ordered dict, and keeps
    between ``cap`` and ``2 * cap`` of the most recent entries. ``None`` is
    not a storable value: :meth:`get` returns it for a missing key.
    """

    __slots__ = ("cap", "young", "old")

    def __init__(self, cap: int) -> None:
        self.cap = max(1, cap)
        self.young: dict[Any, Any] = {}
        self.old: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        """The value of ``key``, or ``None``."""
        value = self.young.get(key)
        if value is None:
            value = self.old.get(key)
        return value

    def __contains__(self, key: Any) -> bool:
        return key in self.young or key in self.old

    def set(self, key: Any, value: Any) -> None:
        """Stores ``value`` under ``key`` (the oldest generation goes when the young one fills)."""
        young = self.young
        young[key] = value
        if len(young) >= self.cap:
            self.old = young
            self.young = {}

    def pop(self, key: Any) -> Any:
        """Removes ``key``; returns its value or ``None``."""
        value = self.young.pop(key, None)
        old = self.old.pop(key, None)
        return value if value is not None else old


def is_ancestor(parent_of: TwoGenerationMap, ancestor: Any, span: Any, depth: int = 64, own: Any = None,
                own_parent: Any = None) -> bool:
    """Whether ``ancestor`` is ``span`` or one of its ancestors, as far as ``parent_of``
    (span -> parent, a falsy parent for a root) remembers, up to ``depth`` generations; the
    parent of the object ``own`` is ``own_parent``, which ``parent_of`` does not keep (a
    bundled phase being placed: no span is its child, so no map keeps it)."""
    for _ in range(depth):
        if span == ancestor:
            return True
        span = own_parent if own is not None and span is own else parent_of.get(span)
        if not span:
            return False
    return False


class LaneLevel:
    """Disjoint intervals sorted by start (so also by end), each with its children: ``None``,
    a level, or a level of leaves packed as bytes (:func:`pack_leaves`)."""

    __slots__ = ("starts", "ends", "ids", "kids")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.ids: list[int] = []
        self.kids: list[LaneLevel | bytes | None] = []


def pack_leaves(level: LaneLevel) -> bytes | None:
    """``level`` as bytes (:data:`_PACKED` an interval) where every interval in it is a
    leaf and fits; ``None`` otherwise.

    A session's phases are the children of its interval for as long as the lane keeps it
    (up to ``max_intervals_per_lane`` intervals, minutes of a long run); as a level of lists
    of ints they were about a dozen objects a session. Packed, they are one object (the
    exporter's memory in a long run about 30 MB smaller, its CPU a span in that steady
    state about 5 % lower), unpacked again (:func:`unpack_leaves`) only for a span that
    comes to nest among them.
    """
    if any(kid is not None for kid in level.kids):
        return None
    try:
        return b"".join(map(_PACKED.pack, level.starts, level.ends, level.ids))
    except (struct.error, TypeError):
        return None


def unpack_leaves(data: bytes) -> LaneLevel:
    """The level :func:`pack_leaves` packed."""
    level = LaneLevel()
    for start, end, span_id in _PACKED.iter_unpack(data):
        level.starts.append(start)
        level.ends.append(end)
        level.ids.append(span_id)
        level.kids.append(None)
    return level


def _subtree_size(level: LaneLevel | bytes | None) -> int:
    total = 0
    stack = [level]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if type(node) is bytes:
            total += len(node) // _PACKED.size
            continue
        total += len(node.starts)
        stack.extend(node.kids)
    return total


class Lane:
    """One track: a forest of properly nested intervals (integer nanoseconds).

    Each level of the forest is a sorted list of disjoint intervals, so finding
    what a new interval touches is two bisections per level.
    """

    __slots__ = ("index", "tid", "root", "count", "max_end", "pruned_before", "next_prune")

    def __init__(self, index: int, tid: int, prune_at: int) -> None:
        self.index = index
        self.tid = tid
        self.root = LaneLevel()
        self.count = 0
        self.max_end = 0
        # Intervals ending before this were forgotten; a span starting earlier
        # could cross one of them unseen, so it is not allowed into this lane.
        # Nothing is forgotten yet: any start, a negative one included, may come in
        # (at -1 a slice before the epoch was refused by every lane, and each
        # overflow track the refusal made refused it again, without end).
        self.pruned_before: float = -math.inf
        self.next_prune = prune_at

    def insert(self, start: int, end: int, span_id: int, is_ancestor: Callable[[int, int], bool]) -> bool:
        """Inserts ``[start, end]`` if it nests properly; ``False`` leaves the lane unchanged.

        Args:
            start: Start in nanoseconds.
            end: End in nanoseconds.
            span_id: The span the interval belongs to.
            is_ancestor: ``is_ancestor(a, b)``: whether span ``a`` is span ``b``
                or one of its ancestors. A span only sits under its ancestors
                and only encloses its descendants.
        """
        if start < self.pruned_before:
            return False
        level = self.root
        ends = level.ends
        if not ends or ends[-1] <= start:
            # The common case: the span follows everything placed so far on this
            # lane (what the bisections below would find, without them).
            level.starts.append(start)
            ends.append(end)
            level.ids.append(span_id)
            level.kids.append(None)
            self.count += 1
            if end > self.max_end:
                self.max_end = end
            return True
        while True:
            starts = level.starts
            ends = level.ends
            i = bisect_right(ends, start)
            j = bisect_left(starts, end, i)
            if i == j:
                starts.insert(i, start)
                ends.insert(i, end)
                level.ids.insert(i, span_id)
                level.kids.insert(i, None)
                break
            first_start = starts[i]
            if j - i == 1 and first_start <= start and ends[i] >= end and is_ancestor(level.ids[i], span_id):
                kid = level.kids[i]
                if kid is None:
                    kid = level.kids[i] = LaneLevel()
                elif type(kid) is bytes:
                    kid = level.kids[i] = unpack_leaves(kid)
                level = kid
                continue
            # Otherwise the new span must enclose everything it touches, and all
            # of it must be its own descendants.
            if first_start < start or ends[j - 1] > end:
                return False
            ids = level.ids
            for k in range(i, j):
                if not is_ancestor(span_id, ids[k]):
                    return False
            adopted = LaneLevel()
            adopted.starts = starts[i:j]
            adopted.ends = ends[i:j]
            adopted.ids = ids[i:j]
            adopted.kids = level.kids[i:j]
            starts[i:j] = [start]
            ends[i:j] = [end]
            ids[i:j] = [span_id]
            level.kids[i:j] = [adopted]
            break
        self.count += 1
        if end > self.max_end:
            self.max_end = end
        return True

    def prune(self, cutoff: int) -> None:
        """Forgets intervals that ended before ``cutoff``."""
        level: LaneLevel | None = self.root
        removed = 0
        gone = self.pruned_before
        while level is not None:
            ends = level.ends
            k = bisect_left(ends, cutoff)
            if k:
                gone = max(gone, ends[k - 1])
                removed += k
                for kid in level.kids[:k]:
                    removed += _subtree_size(kid)
                del level.starts[:k]
                del ends[:k]
                del level.ids[:k]
                del level.kids[:k]
            # Only the first surviving interval can still hold children older than
            # the cutoff: every later one starts after it ends.
            if not level.starts or level.starts[0] >= cutoff:
                break
            kid = level.kids[0]
            if type(kid) is bytes:
                kid = level.kids[0] = unpack_leaves(kid)
            level = kid
        self.count -= removed
        self.pruned_before = gone

    def pack_last(self, span_id: Any) -> None:
        """Packs the children of the root's last interval where it is ``span_id``'s and they
        are all leaves (:func:`pack_leaves`): a session's phases, once it and they are placed."""
        root = self.root
        if not root.ids or root.ids[-1] != span_id:
            return
        kid = root.kids[-1]
        if type(kid) is LaneLevel:
            packed = pack_leaves(kid)
            if packed is not None:
                root.kids[-1] = packed

    def shorten(self, horizon: int, max_intervals: int, step: int) -> None:
        """Shortens the placement history once it reaches :attr:`next_prune`.

        Intervals older than ``horizon`` (before the newest end) go first; over
        ``max_intervals`` the horizon halves until a quarter of the cap is free,
        so the next prune is many insertions away rather than the next one.

        Args:
            horizon: History kept, in nanoseconds before the newest end.
            max_intervals: Hard cap on the intervals kept.
            step: Insertions until the next prune, at most.
        """
        self.prune(self.max_end - horizon)
        target = max_intervals * 3 // 4
        while self.count > target and horizon > 0:
            horizon //= 2
            self.prune(self.max_end - horizon)
        self.next_prune = max(self.count + 1, min(max_intervals, self.count + step))


class LaneGroup:
    """The lanes of one source thread of one process."""

    __slots__ = ("key", "name", "number", "lanes", "used")

    def __init__(self, key: Any, name: str, number: int) -> None:
        self.key = key
        self.name = name
        self.number = number
        self.lanes: list[Lane] = []
        self.used = 0


class ProcessLanes:
    """One process of the trace: its pid and the lane groups of its threads."""

    __slots__ = ("pid", "groups", "groups_made", "rank", "role")

    def __init__(self, pid: int, rank: Any = None, role: Any = None) -> None:
        self.pid = pid
        self.groups: dict[Any, LaneGroup] = {}
        self.groups_made = 0
        # On every slice's and instant's args, as AReaL writes them (people filter on them).
        self.rank = rank
        self.role = role or None
