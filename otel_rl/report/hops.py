"""Time spent between stages and processes."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ._model import RunData
from ._stats import summarize

#: Stage a terminal stream chunk goes to (sglang-omni's coordinator).
COORDINATOR = "coordinator"


def hop_breakdown(data: RunData) -> dict[str, Any]:
    """Hop statistics per ``(source, destination, kind)``, in milliseconds.

    From request events, with sglang-omni's rules: ``stage_hop_sent`` (metadata
    ``to_stage``) pairs with ``stage_input_received`` (``from_stage``) as a
    ``payload`` hop, and ``stage_stream_chunk_sent`` with
    ``stage_stream_chunk_received`` as a ``stream_chunk`` hop, matched by
    ``(request_id, source, destination, chunk_id)`` first in, first out, across
    processes; a terminal stage's chunks go to ``coordinator``. Payloads received
    from the coordinator (submissions) are not hops.

    From spans: a span whose parent ran in another process (a server span under
    a client's request span) gives a ``call`` hop (child start - parent start:
    transport and queueing on the way in) and, when the child ended within its
    parent (a call, not a message), a ``return`` hop (parent end - child end:
    on the way back), from the parent's worker to the child's.

    Args:
        data: A loaded run.

    Returns:
        ``{"unit": "ms", "rows": [{"src", "dst", "kind", "count", "total_ms",
        "avg_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms", "unmatched"}]}``;
        ``unmatched`` counts sends never received.
    """
    durations: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    unmatched: dict[tuple[str, str, str], int] = defaultdict(int)
    for rid, events in data.requests.items():
        pending: dict[tuple[str, str, str, Any], list[int]] = defaultdict(list)
        for ts, stage, name, _pid, md in events:
            if name == "stage_hop_sent":
                pending[(stage, str(md.get("to_stage", "?")), "payload", None)].append(ts)
            elif name == "stage_stream_chunk_sent":
                dst = md.get("to_stage") or COORDINATOR
                pending[(stage, str(dst), "stream_chunk", md.get("chunk_id"))].append(ts)
            elif name == "stage_input_received":
                src = md.get("from_stage")
                if not src or src == COORDINATOR:
                    continue
                queue = pending.get((str(src), stage, "payload", None))
                if queue:
                    durations[(str(src), stage, "payload")].append((ts - queue.pop(0)) / 1e6)
            elif name == "stage_stream_chunk_received":
                src = md.get("from_stage")
                if not src:
                    continue
                queue = pending.get((str(src), stage, "stream_chunk", md.get("chunk_id")))
                if queue:
                    durations[(str(src), stage, "stream_chunk")].append((ts - queue.pop(0)) / 1e6)
        for (src, dst, kind, _chunk), queue in pending.items():
            if queue:
                unmatched[(src, dst, kind)] += len(queue)
    by_id = {s.span_id: s for s in data.spans if s.span_id}
    for span in data.spans:
        parent = by_id.get(span.parent_id) if span.parent_id else None
        if parent is None or parent.worker == span.worker:
            continue
        durations[(parent.worker, span.worker, "call")].append((span.start - parent.start) * 1e3)
        if span.end <= parent.end:  # a child that outlives its parent was sent, not called
            durations[(parent.worker, span.worker, "return")].append((parent.end - span.end) * 1e3)
    rows = []
    for key in set(durations) | set(unmatched):
        src, dst, kind = key
        row: dict[str, Any] = {"src": src, "dst": dst, "kind": kind}
        row.update(summarize(durations.get(key, ()), unit="ms"))
        row["unmatched"] = unmatched.get(key, 0)
        rows.append(row)
    rows.sort(key=lambda r: (-r["total_ms"], r["src"], r["dst"], r["kind"]))
    return {"unit": "ms", "rows": rows}
