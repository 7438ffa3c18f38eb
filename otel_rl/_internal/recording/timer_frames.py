"""Where a timed block sits in its tree: the innermost open block of each context.

ML-Agents nests a block under whatever its thread's stack has open. otel_rl
also follows asyncio tasks: each context remembers its innermost open block
(:data:`FRAME`), so concurrent tasks sharing a thread's stack never adopt each
other's blocks. :mod:`otel_rl.timers` opens and closes blocks with these
helpers, and merges gauges gathered elsewhere with :func:`merge_gauges_into`.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Dict, Optional

from .timer_stack import GaugeNode, TimerNode, TimerStack

#: The innermost open block of the current thread / asyncio task: (stack, its root, node).
FRAME: ContextVar[Optional[tuple]] = ContextVar("otel_rl_timer_frame", default=None)
_frame_get = FRAME.get
_frame_set = FRAME.set


def open_node(stack: TimerStack, name: str) -> TimerNode:
    """The node for block ``name`` under the innermost open block of this context.

    A node another instance of which is open right now (a concurrent asyncio
    task on the same stack) is marked ``is_parallel``.
    """
    frame = _frame_get()
    if frame is not None and frame[0] is stack and frame[1] is stack.root:
        parent = frame[2]
    else:
        open_nodes = stack.stack
        parent = open_nodes[-1] if open_nodes else stack.root
    node = parent.children.get(name)
    if node is None:
        node = parent.children[name] = TimerNode()
    elif node in stack.stack:  # another instance is open right now (asyncio task, shared stack)
        node.is_parallel = True
    return node


def close_node(stack: TimerStack, node: TimerNode) -> None:
    """Takes ``node`` off ``stack``'s open blocks, wherever it is among them."""
    open_nodes = stack.stack
    if open_nodes and open_nodes[-1] is node:
        open_nodes.pop()
        return
    # Blocks of concurrent asyncio tasks close out of order; after reset_timers() it is gone.
    for i in range(len(open_nodes) - 1, 0, -1):
        if open_nodes[i] is node:
            del open_nodes[i]
            return


def restore_frame(token: Any) -> None:
    """Resets :data:`FRAME` with ``token``, also when closed in another context than it was opened in."""
    try:
        FRAME.reset(token)
    except (ValueError, RuntimeError):  # closed in another context than it was opened in
        old = token.old_value
        _frame_set(None if old is token.MISSING else old)


def merge_gauges_into(into: Dict[str, GaugeNode], gauges: Dict[str, Any]) -> None:
    """Folds ``gauges`` into ``into`` (a stack's gauges), as ML-Agents' ``merge_gauges``.

    For a name both have, the later value wins and min, max and count
    combine; other gauges are copied in.

    Args:
        into: The gauges to merge into, by name.
        gauges: :class:`GaugeNode` objects or their dict form, by name.
    """
    for name, gauge in list(gauges.items()):
        if isinstance(gauge, dict):
            gauge = GaugeNode.from_dict(gauge)
        elif isinstance(gauge, GaugeNode):
            gauge = gauge.copy()
        mine = into.get(name)
        if mine is None:
            into[name] = gauge
        else:
            mine.merge(gauge)
