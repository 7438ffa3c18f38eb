"""Per session and per request timelines, relative to submission (sglang-omni's ``t_rel_ms``)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .._internal import keys
from .._internal.read.annotations import session_key
from ._requests import requests_by_session, session_requests
from ._columns import session_table
from ._model import RunData, SessionRow

#: Timelines listed when none are asked for by id: every one up to this many, else the slowest.
DEFAULT_LIMIT = 50


def _ms(t: float, t0: float) -> float:
    return (t - t0) * 1e3


def _session_timeline(row: SessionRow, spans: list[Any], requests: list[tuple] | None,
                      notes: list[dict[str, Any]]) -> dict[str, Any]:
    t0 = row.submit if row.submit is not None else min(
        [row.phases[i + 1] for i in range(0, len(row.phases), 3)] or [0.0])
    events: list[dict[str, Any]] = [{"t_rel_ms": 0.0, "event": "submit"}]
    turns: dict[str, int] = defaultdict(int)
    for name, start, end in sorted(row.phase_instances(), key=lambda p: p[1]):
        turns[name] += 1
        item: dict[str, Any] = {"t_rel_ms": _ms(start, t0), "event": "phase", "phase": name,
                                "turn": turns[name]}
        if end is None:
            item["open"] = True
            item["duration_ms"] = None
        else:
            item["duration_ms"] = (end - start) * 1e3
            item["end_rel_ms"] = _ms(end, t0)
        events.append(item)
    for span in spans:
        item = {"t_rel_ms": _ms(span.start, t0), "event": "span", "name": span.name,
                "duration_ms": span.dur * 1e3, "end_rel_ms": _ms(span.end, t0),
                "worker": span.worker}
        events.append(item)
        for name, ts, attrs in span.events or ():
            events.append({"t_rel_ms": _ms(ts, t0), "event": "instant", "name": name,
                           "worker": span.worker, "attributes": attrs})
    for ts, stage, name, pid, md in requests or ():
        events.append({"t_rel_ms": _ms(ts / 1e9, t0), "event": "request_event", "name": name,
                       "stage": stage, "pid": pid, "metadata": md})
    if row.finalized is not None:
        events.append({"t_rel_ms": _ms(row.finalized, t0), "event": "finalized",
                       "status": row.status, "reason": row.reason})
    # What the trainer said of it afterwards (otel_rl.consume, otel_rl.annotate), joined by its ids.
    consumed: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for note in notes:
        if note["kind"] == "consume":
            consumed = {k: note.get(k) for k in _CONSUME_FIELDS}
            event = {"event": "consumed", **consumed}
        else:
            values.update(note["values"])
            event = {"event": "annotation", "values": note["values"]}
        ts = note.get("ts")
        if isinstance(ts, (int, float)):  # a line without a time adds its values, not an event
            events.append({"t_rel_ms": _ms(ts, t0), "worker": _note_worker(note), **event})
    events.sort(key=lambda e: (e["t_rel_ms"], e["event"] == "finalized"))
    return {
        "worker": row.worker, "task_id": row.task_id, "session_id": row.session_id,
        "step": row.step, "status": row.status, "reason": row.reason, "submit_ts": row.submit,
        "total_ms": row.total * 1e3 if row.total is not None else None,
        "consumed_step": consumed.get("step"), "staleness": consumed.get("staleness"), "annotations": values,
        "events": events,
    }


#: What a session's timeline shows of its ``consume`` line.
_CONSUME_FIELDS = ("step", "policy_version", "staleness", "crossed_update")


def _note_worker(note: dict[str, Any]) -> str:
    role, rank = note.get("role"), note.get("rank")
    return f"{role}-r{rank}" if role else f"r{rank}"


def _request_timeline(rid: Any, events: list[tuple]) -> dict[str, Any]:
    t0 = events[0][0] if events else 0
    return {
        "request_id": rid,
        "total_ms": (events[-1][0] - t0) / 1e6 if events else 0.0,
        "events": [{"t_rel_ms": (ts - t0) / 1e6, "stage": stage, "event_name": name, "pid": pid,
                    "metadata": md} for ts, stage, name, pid, md in events],
    }


def timeline(data: RunData, sessions: Iterable[Any] | None = None,
             requests: Iterable[Any] | None = None, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """Timelines of sessions and requests, with times relative to submission.

    A session's timeline holds its submission (``t_rel_ms`` 0), every phase
    instance (``phase``, ``turn``, ``duration_ms``, ``end_rel_ms``; ``open``
    when it never ended), the other spans that ran in it on any worker (a
    server's spans, scopes) with their span events, the request events whose
    request id is the session id (``otel_rl.events`` uses the session id by
    default), and its finalization with status and reason. A request's timeline lists its events with
    ``t_rel_ms`` anchored at its first event (admission), as sglang-omni does.

    Args:
        data: A loaded run.
        sessions: Session ids to show (``session_id``, ``task_id:session_id`` or
            ``worker:task_id:session_id``, ids being per process);
            ``None`` shows all when there are at most ``limit``, else the
            ``limit`` slowest.
        requests: Request ids to show; ``None`` as for sessions.
        limit: See above.

    Returns:
        ``{"sessions": [...], "requests": [...], "sessions_total",
        "requests_total", "selected": "all" | "slowest" | "ids"}``.
    """
    rows = data.sessions
    if sessions is not None:
        wanted = {str(s) for s in sessions}
        chosen = [r for r in rows if str(r.session_id) in wanted or f"{r.task_id}:{r.session_id}" in wanted
                  or f"{r.worker}:{r.task_id}:{r.session_id}" in wanted]
        selected = "ids"
    elif len(rows) <= limit:
        chosen = sorted(rows, key=lambda r: (r.submit if r.submit is not None else 0.0))
        selected = "all"
    else:
        table = session_table(data, candidates=limit)
        chosen = table.rows(table.largest(limit, "top_total"))
        selected = "slowest"
    # A session's spans: those carrying its id in its trace (on any worker: a server's
    # spans join the caller's trace), or on its worker when the trace is unknown.
    by_trace = {(r.trace_id, r.session_id): r for r in chosen if r.trace_id}
    by_worker = {(r.worker, r.task_id, r.session_id): r for r in chosen if not r.trace_id}
    spans_by_session: dict[int, list[Any]] = defaultdict(list)
    if chosen:
        skip = (keys.KIND_SESSION, keys.KIND_PHASE, keys.KIND_TASK)
        for span in data.spans:
            args = span.args
            sid = args.get(keys.SESSION_ID)
            if sid is None or args.get(keys.SPAN_KIND) in skip:
                continue
            row = by_trace.get((args.get("trace_id"), sid)) if by_trace else None
            if row is None and by_worker:
                row = by_worker.get((span.worker, args.get(keys.TASK_ID), sid))
            if row is not None:
                spans_by_session[id(row)].append(span)
    req_ids = list(data.requests)
    if requests is not None:
        wanted_r = {str(r) for r in requests}
        req_chosen = [r for r in req_ids if str(r) in wanted_r]
    elif len(req_ids) <= limit:
        req_chosen = req_ids
    else:
        def span_ns(rid: Any) -> int:
            ev = data.requests[rid]
            return ev[-1][0] - ev[0][0]
        req_chosen = sorted(req_ids, key=span_ns, reverse=True)[:limit]
    by_session = requests_by_session(data)
    notes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    if chosen and data.annotations:
        shown: dict[Any, list[SessionRow]] = defaultdict(list)
        for r in chosen:
            task_id, session_id, span_id, _trace_id = r.identity()
            shown[(task_id, session_id)].append(r)
            if span_id is not None:
                shown[span_id].append(r)
        for note in data.annotations:
            matches = shown.get(session_key(note), ())
            if len(matches) == 1:  # a pair that several sessions shown have names none of them
                notes[id(matches[0])].append(note)
    return {
        "sessions": [_session_timeline(r, sorted(spans_by_session.get(id(r), []), key=lambda s: s.start),
                                       session_requests(data, r.session_id, r.worker, by_session),
                                       notes.get(id(r), []))
                     for r in chosen],
        "requests": [_request_timeline(rid, data.requests[rid]) for rid in req_chosen],
        "sessions_total": len(rows),
        "requests_total": len(req_ids),
        "selected": selected,
    }


def describe_event(event: dict[str, Any]) -> str:
    """One line naming a session timeline event, for tables and the HTML page."""
    what = event["event"]
    if what == "phase":
        return f"{event['phase']} #{event['turn']}" + (" (open)" if event.get("open") else "")
    if what in ("span", "instant"):
        return f"{event['name']} [{event['worker']}]"
    if what == "request_event":
        return f"{event['stage']}: {event['name']}"
    if what == "consumed":
        return f"consumed by step {event['step']} [{event['worker']}] (staleness {event['staleness']})"
    if what == "annotation":
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in event["values"].items())
        return f"annotation [{event['worker']}]: {shown}"
    if what == "finalized":
        return f"finalized: {event['status']}" + (f" ({event['reason']})" if event.get("reason") else "")
    return what
