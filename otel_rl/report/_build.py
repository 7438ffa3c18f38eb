"""All views of a run in one plain-data document."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ._columns import session_table
from ._model import RunData
from ._stats import step_sort_key
from .breakdown import phase_breakdown, span_breakdown, stage_breakdown
from .hops import hop_breakdown
from .lifecycle import DEFAULT_GANTT_LIMIT, lifecycle
from .pipeline import pipeline
from .longtail import DEFAULT_OUTLIERS, DEFAULT_THRESHOLD, DEFAULT_TURN_PHASE, long_tail
from .timeline import DEFAULT_LIMIT, timeline
from .timer_tree import timer_trees
from .training import training

#: From this many sessions on, the long-tail view is computed in a forked process beside the others.
PARALLEL_SESSIONS = 200_000
#: View names, in report order (``--view`` picks among them).
VIEWS = ("summary", "training", "pipeline", "phases", "spans", "stages", "hops", "timers", "longtail", "lifecycle",
         "timeline")


def summary(data: RunData) -> dict[str, Any]:
    """Counts and extent of what was read.

    Returns:
        ``{"sessions", "finalized", "open", "by_status", "workers", "steps",
        "spans", "requests", "request_events", "start_ts", "end_ts",
        "duration_s", "inputs", "filters"}``.
    """
    table = session_table(data)
    statuses = table.status_counts
    finalized = table.finalized_n
    start = table.tmin
    end = table.tmax
    if data.spans:
        s0 = min(s.start for s in data.spans)
        s1 = max(s.end for s in data.spans)
        start = s0 if start is None else min(start, s0)
        end = s1 if end is None else max(end, s1)
    if data.requests:
        r0 = min(events[0][0] for events in data.requests.values() if events) / 1e9
        r1 = max(events[-1][0] for events in data.requests.values() if events) / 1e9
        start = r0 if start is None else min(start, r0)
        end = r1 if end is None else max(end, r1)
    steps = {s for s in table.steps if s is not None}
    workers = sorted(table.workers | {s.worker for s in data.spans})
    return {
        "sessions": len(data.sessions), "finalized": finalized, "open": len(data.sessions) - finalized,
        "by_status": dict(sorted(statuses.items())),
        "workers": [dict(worker=w, **{k: v for k, v in data.workers.get(w, {}).items() if v is not None})
                    for w in workers],
        "steps": sorted(steps, key=step_sort_key),
        "spans": len(data.spans),
        "requests": len(data.requests),
        "request_events": sum(len(v) for v in data.requests.values()),
        "start_ts": start, "end_ts": end,
        "duration_s": (end - start) if start is not None and end is not None else None,
        "inputs": list(data.inputs),
        "filters": {"steps": sorted(data.steps) if data.steps is not None else None,
                    "ranks": list(data.ranks) if data.ranks is not None else None},
    }


def build(data: RunData, views: Iterable[str] | None = None, *, threshold: float = DEFAULT_THRESHOLD,
          outliers: int = DEFAULT_OUTLIERS, turn_phase: str = DEFAULT_TURN_PHASE,
          sessions: Iterable[Any] | None = None, requests: Iterable[Any] | None = None,
          timeline_limit: int = DEFAULT_LIMIT, gantt_limit: int = DEFAULT_GANTT_LIMIT,
          bins: int = 40) -> dict[str, Any]:
    """Every view of a run as one JSON-ready dict (what ``--format json`` writes).

    Args:
        data: A loaded run (:func:`otel_rl.report.load`).
        views: Which views (names in :data:`VIEWS`; all by default).
        threshold: Straggler threshold of the long-tail view.
        outliers: Slowest sessions listed by the long-tail view.
        turn_phase: The phase whose instances are turns.
        sessions: Session ids for the timeline view.
        requests: Request ids for the timeline view.
        timeline_limit: Timelines shown when no ids are given.
        gantt_limit: Sessions drawn in the lifecycle Gantt chart.
        bins: Histogram bins.

    Returns:
        ``{"generator", "generated_at", "<view>": ..., "diagnostics": ...}``.
    """
    wanted = set(VIEWS if views is None else views)
    unknown = wanted - set(VIEWS)
    if unknown:
        raise ValueError(f"unknown view(s): {', '.join(sorted(unknown))} (known: {', '.join(VIEWS)})")
    out: dict[str, Any] = {"generator": "otel_rl report", "generated_at": time.time()}
    makers = {
        "summary": lambda: summary(data),
        "training": lambda: training(data),
        "pipeline": lambda: pipeline(data),
        "phases": lambda: phase_breakdown(data),
        "spans": lambda: span_breakdown(data),
        "stages": lambda: stage_breakdown(data),
        "hops": lambda: hop_breakdown(data),
        "timers": lambda: timer_trees(data),
        "longtail": lambda: long_tail(data, threshold, outliers, turn_phase, bins),
        "lifecycle": lambda: lifecycle(data, gantt_limit, bins),
        "timeline": lambda: timeline(data, sessions, requests, timeline_limit),
    }
    # The long-tail view is about half of the work over many sessions: on a second core it
    # overlaps the others (a forked child reads the loaded run without copying it).
    beside = {}
    if "longtail" in wanted and len(wanted) > 1 and len(data.sessions) >= PARALLEL_SESSIONS:
        beside["longtail"] = _forked(makers["longtail"])
    try:
        for name in VIEWS:
            if name in wanted:
                out[name] = beside[name]() if name in beside else makers[name]()
    finally:
        for get in beside.values():
            getattr(get, "close", lambda: None)()  # a child whose result was not taken: ended
    out["diagnostics"] = data.diagnostics.to_dict()
    return out


def _forked(make: Callable[[], Any]) -> Callable[[], Any]:
    """Starts ``make()`` in a forked process; returns what gives its result (a :class:`_Child`),
    or ``make`` itself where forking is not safe (another thread: it could hold a lock the
    child needs)."""
    if not sys.platform.startswith("linux") or threading.active_count() != 1 or (os.cpu_count() or 1) < 2:
        return make
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
    except OSError:
        return make
    if pid == 0:  # the child: the result, pickled, then out at once (no atexit, no buffers flushed twice)
        code = 1
        try:
            os.close(read_end)
            with os.fdopen(write_end, "wb") as f:
                f.write(pickle.dumps(make(), pickle.HIGHEST_PROTOCOL))
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    return _Child(make, pid, read_end)


class _Child:
    """A view being computed in a forked process."""

    def __init__(self, make: Callable[[], Any], pid: int, read_end: int) -> None:
        self.make = make
        self.pid: int | None = pid
        self.read_end = read_end

    def __call__(self) -> Any:
        """The child's result; computed here instead when the child failed."""
        with os.fdopen(self.read_end, "rb") as f:
            payload = f.read()
        _, status = os.waitpid(self.pid, 0)  # type: ignore[arg-type]
        self.pid = None
        if status == 0:
            try:
                return pickle.loads(payload)
            except Exception:  # noqa: BLE001 - a child cut short: computed here instead
                pass
        return self.make()

    def close(self) -> None:
        """Ends the child if its result was never taken (another view raised)."""
        if self.pid is not None:
            os.close(self.read_end)
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = None
