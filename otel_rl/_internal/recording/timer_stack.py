"""The in-memory timer tree behind :mod:`otel_rl.timers` (Unity ML-Agents' data model).

A :class:`TimerNode` is one timer name at one place in the hierarchy, so a
program keeps one node per distinct name path, however many times a block
runs. A :class:`TimerStack` owns a tree (its ``root``), the list of nodes
currently open (``stack``), gauges and metadata, and turns them into the
``timers.json`` document ML-Agents writes (:meth:`TimerStack.get_timing_tree`).

Nothing here reads otel_rl's configuration: the tree is kept whether or not
tracing is on. The per-thread stacks and the context managers live in
:mod:`otel_rl.timers`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from typing import Any, Dict, List, Optional
from .. import diagnostics

#: ``metadata.timer_format_version`` of every tree (ML-Agents' value).
TIMER_FORMAT_VERSION = "0.1.0"

_perf_counter = time.perf_counter
_JSON_SCALARS = (str, int, float, bool, type(None))


class TimerNode:
    """Time spent in one block of code at one place in the hierarchy.

    Attributes:
        children: Child nodes by timer name.
        total: Seconds spent in the block, children included.
        count: How many times the block ran.
        is_parallel: Whether instances ran at the same time (merged from other
            threads or processes, or overlapping in this one), so that
            ``total`` may exceed the parent's.
    """

    __slots__ = ("children", "total", "count", "is_parallel")

    def __init__(self) -> None:
        self.children: Dict[str, TimerNode] = {}
        self.total: float = 0.0
        self.count: int = 0
        self.is_parallel = False

    def get_child(self, name: str) -> TimerNode:
        """The child named ``name``, created (empty) when it does not exist yet."""
        child = self.children.get(name)
        if child is None:
            child = self.children[name] = TimerNode()
        return child

    #: Alias of :meth:`get_child`.
    add_child = get_child

    def add_time(self, elapsed: float) -> None:
        """Adds one run of ``elapsed`` seconds."""
        self.total += elapsed
        self.count += 1

    def merge(self, other: Any, root_name: Optional[str] = None, is_parallel: bool = True,
              **kwargs: Any) -> None:
        """Adds ``other``'s times and counts to this node, recursively by child name.

        Args:
            other: A :class:`TimerNode` (any object with ``total``, ``count``
                and ``children`` works, ML-Agents' own included), or a node
                dict as :meth:`TimerStack.get_timing_tree` returns it.
            root_name: When given, ``other`` is merged into the child of that
                name (created if needed) instead of into this node.
            is_parallel: Marks every node that receives time as parallel
                (the other tree ran alongside this one).
            kwargs: Unknown keyword arguments are accepted, ignored and counted.
        """
        if kwargs:
            from ..guard import ignored_arguments

            ignored_arguments("TimerNode.merge", kwargs)
        try:
            # A detached copy first: ``other`` may be an ancestor of this node.
            source = _copy_tree(other)
        except Exception as exc:  # noqa: BLE001 - never raise into the caller
            from ..guard import report

            report(diagnostics.TIMER_ERROR, "TimerNode.merge(): cannot read %r: %r", type(other), exc)
            return
        target = self.get_child(root_name) if root_name else self
        pending = [(target, source)]
        while pending:
            into, src = pending.pop()
            into.total += src.total
            into.count += src.count
            into.is_parallel = into.is_parallel or bool(is_parallel) or src.is_parallel
            for name, child in src.children.items():
                pending.append((into.get_child(name), child))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TimerNode:
        """A node tree from a ``get_timing_tree()`` dict (or ``timers.json``).

        ``children`` may be a dict by name or, as very old ML-Agents wrote
        it, a list of dicts with a ``name``. Missing or bad numbers read as 0.
        """
        root = cls()
        pending = [(root, data)]
        while pending:
            node, src = pending.pop()
            node.total = _number(src.get("total"), 0.0)
            node.count = int(_number(src.get("count"), 0))
            node.is_parallel = src.get("is_parallel") is True
            children = src.get("children")
            if isinstance(children, Mapping):
                items = list(children.items())
            elif isinstance(children, list):
                items = [(c.get("name"), c) for c in children if isinstance(c, Mapping)]
            else:
                items = []
            for name, child in items:
                if isinstance(child, Mapping):
                    pending.append((node.get_child(str(name)), child))
        return root

    def __repr__(self) -> str:
        return (f"TimerNode(total={self.total:.6f}, count={self.count}, "
                f"children={list(self.children)}, is_parallel={self.is_parallel})")


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value) if math.isfinite(value) else default


def _copy_tree(other: Any) -> TimerNode:
    """A detached :class:`TimerNode` copy of ``other`` (a node, a duck-typed node or a dict)."""
    if isinstance(other, Mapping):
        return TimerNode.from_dict(other)
    root = TimerNode()
    seen = {id(other)}
    pending = [(root, other)]
    while pending:
        node, src = pending.pop()
        node.total = float(src.total)
        node.count = int(src.count)
        node.is_parallel = bool(getattr(src, "is_parallel", False))
        for name, child in list(src.children.items()):
            if id(child) in seen:  # a node reachable twice (or a cycle): copied once
                continue
            seen.add(id(child))
            pending.append((node.get_child(name), child))
    return root


class GaugeNode:
    """The latest value of a metric, with its minimum, maximum and update count (a statsd gauge)."""

    __slots__ = ("value", "min_value", "max_value", "count", "_timestamp")

    def __init__(self, value: float) -> None:
        self.value = value
        self.min_value = value
        self.max_value = value
        self.count = 1
        self._timestamp = time.time()

    def update(self, new_value: float) -> None:
        """Records a new value."""
        self.min_value = min(self.min_value, new_value)
        self.max_value = max(self.max_value, new_value)
        self.value = new_value
        self.count += 1
        self._timestamp = time.time()

    def merge(self, other: GaugeNode) -> None:
        """Folds another gauge in: the later value wins; min, max and count combine."""
        if self._timestamp < other._timestamp:
            self.value = other.value
            self._timestamp = other._timestamp
        self.min_value = min(self.min_value, other.min_value)
        self.max_value = max(self.max_value, other.max_value)
        self.count += other.count

    def copy(self) -> GaugeNode:
        """An independent copy."""
        out = GaugeNode(self.value)
        out.min_value, out.max_value = self.min_value, self.max_value
        out.count, out._timestamp = self.count, self._timestamp
        return out

    def as_dict(self) -> Dict[str, float]:
        """``{"value", "min", "max", "count"}``, as in the tree's ``gauges``."""
        return {"value": self.value, "min": self.min_value, "max": self.max_value,
                "count": self.count}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], timestamp: Optional[float] = None) -> GaugeNode:
        """A gauge from its :meth:`as_dict` form (``timestamp`` defaults to now)."""
        value = _number(data.get("value"), math.nan)
        out = cls(value)
        out.min_value = _number(data.get("min"), value)
        out.max_value = _number(data.get("max"), value)
        out.count = int(_number(data.get("count"), 1))
        if timestamp is not None:
            out._timestamp = timestamp
        return out

    def __repr__(self) -> str:
        return (f"GaugeNode(value={self.value}, min={self.min_value}, max={self.max_value}, "
                f"count={self.count})")


class TimerStack:
    """One timer tree with its open blocks, gauges and metadata.

    :func:`otel_rl.timers.hierarchical_timer` and :func:`otel_rl.timers.timed`
    keep ``push`` and ``pop`` matched; call them directly only in pairs.
    """

    __slots__ = ("root", "stack", "start_time", "gauges", "metadata")

    def __init__(self) -> None:
        self.root = TimerNode()
        self.stack: List[TimerNode] = [self.root]
        self.start_time = _perf_counter()
        self.gauges: Dict[str, GaugeNode] = {}
        self.metadata: Dict[str, Any] = {}
        self._add_default_metadata()

    def reset(self) -> None:
        """Starts over: a new root (the old tree is left untouched), no gauges, fresh metadata."""
        self.root = TimerNode()
        self.stack = [self.root]
        self.start_time = _perf_counter()
        self.gauges = {}
        self.metadata = {}
        self._add_default_metadata()

    def push(self, name: str) -> TimerNode:
        """Enters the block ``name`` under the innermost open one; returns its node."""
        stack = self.stack
        if not stack:
            stack.append(self.root)
        node = stack[-1].get_child(name)
        stack.append(node)
        return node

    def pop(self) -> None:
        """Leaves the innermost open block (the root always stays)."""
        if len(self.stack) > 1:
            self.stack.pop()

    def get_root(self) -> TimerNode:
        """The root node, its ``total`` set to the seconds since the stack was made or reset."""
        root = self.root
        root.total = _perf_counter() - self.start_time
        root.count = 1
        return root

    def get_timing_tree(self, node: Optional[TimerNode] = None) -> Dict[str, Any]:
        """The tree as a JSON-ready dict (ML-Agents' ``timers.json``).

        Every node has ``total``, ``count``, ``self`` (``total`` minus the
        children's totals, at least 0), ``children`` when it has any and
        ``is_parallel: true`` when set. Without ``node`` the root is used and
        the dict also has ``name: "root"``, ``gauges`` (when any) and
        ``metadata`` (``end_time_seconds`` updated now).
        """
        res: Dict[str, Any] = {}
        if node is None:
            node = self.get_root()
            res["name"] = "root"
            if self.gauges:
                res["gauges"] = self._get_gauges()
            if self.metadata:
                self.metadata["end_time_seconds"] = str(int(time.time()))
                res["metadata"] = dict(self.metadata)
        res.update(_node_dict(node))
        return res

    def set_gauge(self, name: str, value: float) -> None:
        """Records ``value`` on the gauge ``name``; NaN (and what is not a number) is ignored."""
        try:
            value = float(value)
        except (TypeError, ValueError):
            from ..guard import report

            report(diagnostics.BAD_GAUGE_VALUE, "set_gauge(%r): %r is not a number; ignored", name, type(value))
            return
        if math.isnan(value):
            return
        gauge = self.gauges.get(name)
        if gauge is None:
            self.gauges[name] = GaugeNode(value)
        else:
            gauge.update(value)

    def add_metadata(self, key: str, value: str) -> None:
        """Sets ``metadata[key]`` (values that JSON cannot hold are stored as text)."""
        self.metadata[str(key)] = value if isinstance(value, _JSON_SCALARS) else str(value)

    def _get_gauges(self) -> Dict[str, Dict[str, float]]:
        return {name: gauge.as_dict() for name, gauge in list(self.gauges.items())}

    def _add_default_metadata(self) -> None:
        self.metadata["timer_format_version"] = TIMER_FORMAT_VERSION
        self.metadata["start_time_seconds"] = str(int(time.time()))
        self.metadata["python_version"] = sys.version
        self.metadata["command_line_arguments"] = " ".join(sys.argv)


def _node_dict(node: Any) -> Dict[str, Any]:
    res: Dict[str, Any] = {"total": node.total, "count": node.count}
    if node.is_parallel:
        res["is_parallel"] = True
    children = {}
    child_total = 0.0
    # A snapshot of the items: another thread may be adding children meanwhile.
    for name, child in list(node.children.items()):
        sub = children[name] = _node_dict(child)
        child_total += sub["total"]
    res["self"] = max(0.0, node.total - child_total)
    if children:
        res["children"] = children
    return res


def _ml_agents_signature() -> None:
    import inspect

    sig = inspect.signature(TimerNode.merge)
    TimerNode.merge.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD])


_ml_agents_signature()
for _cls in (TimerNode, GaugeNode, TimerStack):
    _cls.__module__ = "otel_rl.timers"
del _cls
