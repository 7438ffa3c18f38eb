"""Differential tests: the encoder's fast paths give what the general paths give.

``Lane.insert`` takes a shortcut when a span follows everything already on the
lane; :class:`ReferenceLane` below is the general path alone (two bisections
per level), and both must build the same forest and accept the same spans over
randomized workloads (sequential, nested, overlapping, with pruning).
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right

import pytest

from otel_rl._internal.encode.lanes import Lane, LaneLevel, pack_leaves, unpack_leaves


class ReferenceLane(Lane):
    """``Lane`` with the placement written as the general search only."""

    __slots__ = ()

    def insert(self, start, end, span_id, is_ancestor):  # noqa: D102 - see Lane.insert
        if start < self.pruned_before:
            return False
        level = self.root
        while True:
            starts, ends = level.starts, level.ends
            i = bisect_right(ends, start)
            j = bisect_left(starts, end, i)
            if i == j:
                starts.insert(i, start)
                ends.insert(i, end)
                level.ids.insert(i, span_id)
                level.kids.insert(i, None)
                break
            if j - i == 1 and starts[i] <= start and ends[i] >= end and is_ancestor(level.ids[i], span_id):
                kid = level.kids[i]
                if kid is None:
                    kid = level.kids[i] = LaneLevel()
                level = kid
                continue
            if starts[i] < start or ends[j - 1] > end:
                return False
            ids = level.ids
            if not all(is_ancestor(span_id, ids[k]) for k in range(i, j)):
                return False
            adopted = LaneLevel()
            adopted.starts, adopted.ends = starts[i:j], ends[i:j]
            adopted.ids, adopted.kids = ids[i:j], level.kids[i:j]
            starts[i:j], ends[i:j], ids[i:j], level.kids[i:j] = [start], [end], [span_id], [adopted]
            break
        self.count += 1
        self.max_end = max(self.max_end, end)
        return True


def _shape(level: LaneLevel | bytes | None) -> object:
    if level is None:
        return None
    if type(level) is bytes:
        level = unpack_leaves(level)
    return [(s, e, i, _shape(k)) for s, e, i, k in zip(level.starts, level.ends, level.ids, level.kids)]


def _workload(seed: int) -> tuple[list[tuple[int, int, int]], dict[int, int]]:
    """Intervals in end order with a parent map: runs of sequential spans, nested
    groups (children end first), overlapping async spans and exact repeats."""
    rng = random.Random(seed)
    parent_of: dict[int, int] = {}
    out: list[tuple[int, int, int]] = []
    t = 0
    next_id = 1
    for _ in range(300):
        mode = rng.random()
        if mode < 0.35:
            a = t + rng.randint(0, 3)
            t = a + rng.randint(0, 5)
            out.append((a, t, next_id))
            next_id += 1
        elif mode < 0.7:
            parent = next_id + 5
            s0 = t
            for _ in range(rng.randint(1, 4)):
                a = t + rng.randint(0, 2)
                t = a + rng.randint(0, 4)
                parent_of[next_id] = parent
                out.append((a, t, next_id))
                next_id += 1
            next_id = parent
            t += rng.randint(0, 2)
            out.append((s0, t, next_id))
            next_id += 1
        else:
            a = max(0, t - rng.randint(0, 20))
            out.append((a, t + rng.randint(0, 20), next_id))
            next_id += 1
    return out, parent_of


def _insert_both(intervals, parent_of, a: Lane, b: Lane, after_insert=lambda span_id: None) -> None:
    """Inserts ``intervals`` into lanes ``a`` and ``b`` alike, pruning both every 50: they must
    accept the same spans and keep the same counts, and end with the same forest."""

    def is_ancestor(ancestor: int, span_id: int) -> bool:
        while span_id:
            if span_id == ancestor:
                return True
            span_id = parent_of.get(span_id, 0)
        return False

    for n, (start, end, span_id) in enumerate(intervals):
        assert a.insert(start, end, span_id, is_ancestor) == b.insert(start, end, span_id, is_ancestor)
        after_insert(span_id)
        if n % 50 == 49:
            cutoff = a.max_end - 30
            a.prune(cutoff)
            b.prune(cutoff)
        assert (a.count, a.max_end, a.pruned_before) == (b.count, b.max_end, b.pruned_before)
    assert _shape(a.root) == _shape(b.root)


@pytest.mark.parametrize("seed", range(60))
def test_lane_fast_path_matches_general_search(seed: int) -> None:
    intervals, parent_of = _workload(seed)
    _insert_both(intervals, parent_of, Lane(0, 1, 8), ReferenceLane(0, 1, 8))


@pytest.mark.parametrize("seed", range(60))
def test_a_lane_with_its_leaf_levels_packed_places_as_one_without(seed: int) -> None:
    intervals, parent_of = _workload(seed)
    packed = Lane(0, 1, 8)
    packings = []

    def pack(span_id: int) -> None:  # as a session's phases are, once it and they are placed
        kids = packed.root.kids
        before = kids[-1] if kids else None
        packed.pack_last(span_id)
        packings.append(bool(kids) and kids[-1] is not before)

    _insert_both(intervals, parent_of, packed, Lane(0, 1, 8), after_insert=pack)
    assert sum(packings) > 5


def test_a_level_packs_only_where_every_interval_is_a_leaf_that_fits() -> None:
    level = LaneLevel()
    level.starts, level.ends, level.ids, level.kids = [-5, 10], [9, 1 << 62], [1, (1 << 64) - 1], [None, None]
    packed = pack_leaves(level)
    assert len(packed) == 48
    assert _shape(unpack_leaves(packed)) == _shape(level)
    level.kids[1] = LaneLevel()
    assert pack_leaves(level) is None  # a child with children of its own
    level.kids[1], level.ids[1] = None, 1 << 64
    assert pack_leaves(level) is None  # an id past 64 bits


def _reference_chrome_args(attributes: dict) -> dict:
    """``chrome_args`` as it was written before its key cache: strip, then drop thread keys."""
    from otel_rl._internal import keys
    from otel_rl._internal.encode.json_values import json_safe_value

    out = {}
    for key, value in attributes.items():
        if key.startswith(keys.ARGS_PREFIX):
            key = key[len(keys.ARGS_PREFIX):]
        kind = type(value)
        if not (kind is str or kind is float or kind is bool or (kind is int and -(1 << 63) <= value < 1 << 64)):
            value = json_safe_value(value)
        out[key] = value
    out.pop(keys.THREAD_ID, None)
    out.pop(keys.THREAD_NAME, None)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_chrome_args_matches_reference(seed: int) -> None:
    from otel_rl._internal import keys
    from otel_rl._internal.encode.json_values import chrome_args

    rng = random.Random(seed)
    pool = ["step", "lr", keys.ARGS_PREFIX + "step", keys.ARGS_PREFIX + "lr", keys.THREAD_ID, keys.THREAD_NAME,
            keys.ARGS_PREFIX + keys.THREAD_ID, keys.CATEGORY, f"k{seed}", keys.ARGS_PREFIX]
    values = [1, 2.5, True, "text", "\ud800", 1 << 70, b"\x01", (1, 2), None, -(1 << 65)]
    for _ in range(50):
        attrs = {rng.choice(pool): rng.choice(values) for _ in range(rng.randint(0, 8))}
        got = chrome_args(attrs)
        want = _reference_chrome_args(attrs)
        assert got == want
        assert list(got) == list(want)  # same key order: the file's bytes depend on it
