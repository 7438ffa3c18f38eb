"""Flow arrows between processes, joined where every rank's events meet: the merge.

A span whose parent ran in another process cannot start its own arrow: the
parent's slice is in another file. So each side writes what it knows: the
child a flow end with an id of its own and its parent's span id
(``args.parent``), the parent a :data:`~.chrome_markers.FLOW_SOURCE`
metadata line with its slice (any span whose context was sent away: a CLIENT
or PRODUCER span, or one current at ``otel_rl.inject``). When files are merged,
:class:`FlowJoiner` sees both and adds one flow start per child on the parent's
slice, so a broadcast (one parent, many children) gets an arrow to each child
and every end has its start.
"""

from __future__ import annotations

from typing import Any

import orjson

from .. import keys
from .chrome_markers import FLOW_CATEGORY, FLOW_NAME, FLOW_SOURCE, slice_id

_END_PREFIX = b'{"ph":"f"'
_SOURCE_PREFIX = b'{"ph":"M","name":"' + FLOW_SOURCE.encode() + b'"'


class FlowJoiner:
    """Collects remote flow ends and flow sources; :meth:`starts` pairs them."""

    __slots__ = ("_sources", "_ends")

    def __init__(self) -> None:
        # parent span id (hex) -> (pid, tid, ts) of its slice
        self._sources: dict[str, tuple[Any, Any, Any]] = {}
        # (flow id, parent span id) of every remote child
        self._ends: list[tuple[Any, str]] = []

    def add(self, event: dict[str, Any]) -> None:
        """Notes ``event`` if it is a remote flow end or a flow source (output pids)."""
        ph = event.get("ph")
        if ph == "f":
            args = event.get("args")
            parent = slice_id(args, keys.TRACE_ARG_PARENT_ID) if isinstance(args, dict) else None
            if isinstance(parent, str):
                self._ends.append((event.get("id"), parent))
        elif ph == "M" and event.get("name") == FLOW_SOURCE:
            args = event.get("args")
            span_id = slice_id(args, keys.TRACE_ARG_SPAN_ID) if isinstance(args, dict) else None
            if isinstance(span_id, str):
                self._sources[span_id] = (event.get("pid"), event.get("tid"), event.get("ts"))

    def scan(self, data: bytes | bytearray | memoryview) -> None:
        """Notes the flow ends and sources among JSON lines copied without parsing
        (only those lines are parsed, found by their prefix)."""
        data = bytes(data)
        for prefix in (_END_PREFIX, _SOURCE_PREFIX):
            needle = b"\n" + prefix
            pos = 0 if data.startswith(prefix) else _after(data.find(needle))
            while pos != -1:
                end = data.find(b"\n", pos)
                line = data[pos:] if end == -1 else data[pos:end]
                try:
                    # JSON lines, or the merged document's events (",\n" between them).
                    event = orjson.loads(line[:-1] if line.endswith(b",") else line)
                except orjson.JSONDecodeError:
                    event = None
                if isinstance(event, dict):
                    self.add(event)
                pos = -1 if end == -1 else _after(data.find(needle, end))

    def starts(self) -> list[dict[str, Any]]:
        """One flow start per remote child whose parent's slice was seen, on that slice."""
        out = []
        for flow_id, parent in self._ends:
            source = self._sources.get(parent)
            if source is None:
                continue  # the parent's process is not part of this merge
            pid, tid, ts = source
            out.append({"ph": "s", "name": FLOW_NAME, "cat": FLOW_CATEGORY, "id": flow_id,
                        "ts": ts, "pid": pid, "tid": tid})
        return out


def _after(newline: int) -> int:
    """The start of the line after the newline at ``newline`` (-1 stays -1)."""
    return -1 if newline == -1 else newline + 1
