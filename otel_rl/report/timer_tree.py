"""Hierarchical timer trees in Unity ML-Agents' format, rebuilt from span nesting.

A node is one span name at one place in the hierarchy (``step > train > backward``
is not ``backward`` at the top level), with ML-Agents' fields: ``total``
(seconds, children included), ``count``, ``self`` (``total`` minus the children's
totals, at least 0), ``children`` (by name) and ``is_parallel``: instances that
overlapped in time (asyncio sessions, threads) or, in the merged tree, nodes
that ran on more than one worker, so that a total may exceed its parent's. The
root, ``name: "root"``, also carries ``gauges`` (``set_gauge`` values: last
``value``, ``min``, ``max``, ``count``) and ``metadata``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from .._internal import keys
from .._internal.recording.timer_stack import TIMER_FORMAT_VERSION
from ._model import RunData, SpanRow

_GAUGE_KEYS = (keys.GAUGE_VALUE, keys.ARGS_PREFIX + keys.GAUGE_VALUE)


def _gauge_value(args: dict[str, Any]) -> float | None:
    for key in _GAUGE_KEYS:
        value = args.get(key)
        if type(value) is float or type(value) is int:
            return float(value)
    return None


def parents(spans: list[SpanRow]) -> list[int]:
    """Index of each span's parent within ``spans`` (one worker's spans), or -1.

    Spans with ids nest by ``parent_span_id``; a parent on another worker (a
    remote caller) or not in the files makes a top-level span. Spans without
    ids (AReaL or torch profiler traces) nest by time containment per thread.
    """
    index = {s.span_id: i for i, s in enumerate(spans) if s.span_id}
    out = [-1] * len(spans)
    by_thread: dict[Any, list[int]] = defaultdict(list)
    for i, s in enumerate(spans):
        if s.span_id:
            if s.parent_id:
                out[i] = index.get(s.parent_id, -1)
        else:
            by_thread[s.tid].append(i)
    for members in by_thread.values():
        members.sort(key=lambda i: (spans[i].start, -spans[i].end))
        stack: list[int] = []
        for i in members:
            s = spans[i]
            while stack and spans[stack[-1]].end < s.end:
                stack.pop()
            if stack:
                out[i] = stack[-1]
            stack.append(i)
    return out


class _Node:
    __slots__ = ("total", "count", "children", "intervals", "parallel")

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0
        self.children: dict[str, _Node] = {}
        self.intervals: list[tuple[float, float]] = []
        self.parallel = False

    def child(self, name: str) -> _Node:
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = _Node()
        return node


def _overlapping(intervals: list[tuple[float, float]]) -> bool:
    intervals.sort()
    last_end = -math.inf
    for start, end in intervals:
        if start < last_end:
            return True
        last_end = max(last_end, end)
    return False


def _finish(node: _Node) -> None:
    if not node.parallel and len(node.intervals) > 1:
        node.parallel = _overlapping(node.intervals)
    node.intervals = []
    for child in node.children.values():
        _finish(child)


def _build(spans: list[SpanRow]) -> _Node:
    root = _Node()
    tree = [s for s in spans if not (s.dur == 0 and _gauge_value(s.args) is not None)]
    parent = parents(tree)
    nodes: list[_Node | None] = [None] * len(tree)
    for i in range(len(tree)):
        if nodes[i] is not None:
            continue
        chain = []
        j = i
        while j >= 0 and nodes[j] is None:
            chain.append(j)
            j = parent[j]
            if len(chain) > len(tree):  # a cycle in bad input: cut it
                j = -1
                break
        node = root if j < 0 else nodes[j]
        for k in reversed(chain):
            node = node.child(tree[k].name)  # type: ignore[union-attr]
            nodes[k] = node
    for s, node in zip(tree, nodes):
        node.total += s.dur  # type: ignore[union-attr]
        node.count += 1  # type: ignore[union-attr]
        node.intervals.append((s.start, s.end))  # type: ignore[union-attr]
    for child in root.children.values():
        _finish(child)
    return root


def _as_dict(node: _Node) -> dict[str, Any]:
    """ML-Agents' ``get_timing_tree`` shape for one node."""
    out: dict[str, Any] = {"total": node.total, "count": node.count}
    if node.parallel:
        out["is_parallel"] = True
    children = {name: _as_dict(child) for name, child in node.children.items()}
    out["self"] = max(0.0, node.total - math.fsum(c["total"] for c in children.values()))
    if children:
        out["children"] = children
    return out


def _gauges(instants: list[tuple[float, float]]) -> dict[str, float]:
    instants.sort()
    values = [v for _, v in instants]
    return {"value": values[-1], "min": min(values), "max": max(values), "count": len(values)}


def _merge(into: _Node, other: _Node, parallel: bool) -> None:
    into.total += other.total
    into.count += other.count
    into.parallel = into.parallel or other.parallel or parallel
    for name, child in other.children.items():
        _merge(into.child(name), child, parallel)


def _root(node: _Node, start: float, end: float, gauges: dict[str, Any],
          metadata: dict[str, Any]) -> dict[str, Any]:
    node.total = max(0.0, end - start) if math.isfinite(start) else 0.0
    node.count = 1
    tree = _as_dict(node)
    out: dict[str, Any] = {"name": "root"}
    if gauges:
        out["gauges"] = gauges
    out["metadata"] = metadata
    out.update(tree)
    return out


def timer_trees(data: RunData) -> dict[str, Any]:
    """Timer trees per worker and merged across workers.

    Args:
        data: A loaded run (:func:`otel_rl.report.load`).

    Returns:
        ``{"merged": tree, "workers": {label: tree}}``; each tree is
        ML-Agents' ``timers.json`` document (``name``, ``gauges``,
        ``metadata``, ``total``, ``count``, ``self``, ``children``,
        ``is_parallel``).
    """
    from .. import __version__

    by_worker: dict[str, list[SpanRow]] = defaultdict(list)
    for span in data.spans:
        by_worker[span.worker].append(span)
    gauge_points: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for worker, name, ts, args in data.instants:
        value = _gauge_value(args)
        if value is not None:
            gauge_points[worker][name].append((ts, value))
    for span in data.spans:
        if span.dur == 0:
            value = _gauge_value(span.args)
            if value is not None:
                gauge_points[span.worker][span.name].append((span.start, value))
    workers: dict[str, Any] = {}
    merged = _Node()
    roots: list[_Node] = []
    all_start, all_end = math.inf, -math.inf
    merged_gauges: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for worker in sorted(set(by_worker) | set(gauge_points)):
        spans = by_worker.get(worker, [])
        root = _build(spans)
        start = min((s.start for s in spans), default=math.inf)
        end = max((s.end for s in spans), default=-math.inf)
        all_start, all_end = min(all_start, start), max(all_end, end)
        info = data.workers.get(worker, {})
        meta = {"timer_format_version": TIMER_FORMAT_VERSION, "source": "otel_rl report",
                "otel_rl_version": __version__, "worker": worker}
        for key in ("rank", "role", "pid", "name"):
            if info.get(key) is not None:
                meta["process_name" if key == "name" else key] = str(info[key])
        if math.isfinite(start):
            meta["start_time_seconds"] = str(int(start))
            meta["end_time_seconds"] = str(int(end))
        gauges = {}
        for name, points in gauge_points.get(worker, {}).items():
            gauges[name] = _gauges(points)
            merged_gauges[name].extend(points)
        workers[worker] = _root(root, start, end, gauges, meta)
        _merge_children(merged, root)
        roots.append(root)
    # A node reached from more than one worker ran in parallel (ML-Agents' subprocess merge).
    if len(roots) > 1:
        _mark_multi(merged, roots)
    meta = {"timer_format_version": TIMER_FORMAT_VERSION, "source": "otel_rl report",
            "otel_rl_version": __version__, "workers": ",".join(workers)}
    if math.isfinite(all_start):
        meta["start_time_seconds"] = str(int(all_start))
        meta["end_time_seconds"] = str(int(all_end))
    gauges = {name: _gauges(points) for name, points in merged_gauges.items()}
    return {"merged": _root(merged, all_start, all_end, gauges, meta), "workers": workers}


def _merge_children(into: _Node, root: _Node) -> None:
    for name, child in root.children.items():
        _merge(into.child(name), child, False)


def _mark_multi(merged: _Node, roots: list[_Node]) -> None:
    """Flags merged nodes present under more than one worker's root as parallel."""

    def walk(node: _Node, others: list[_Node]) -> None:
        for name, child in node.children.items():
            present = [o.children[name] for o in others if name in o.children]
            if len(present) > 1:
                child.parallel = True
            walk(child, present)

    walk(merged, roots)


def timer_tree(data: RunData, worker: str | None = None) -> dict[str, Any]:
    """One timer tree: a worker's, or (``worker=None``) merged across workers.

    Args:
        data: A loaded run.
        worker: A worker label (``rollout-r0``); ``None`` for the merged tree.

    Returns:
        ML-Agents' ``timers.json`` document (``{}`` for an unknown worker).
    """
    trees = timer_trees(data)
    if worker is None:
        return trees["merged"]
    return trees["workers"].get(worker, {})
