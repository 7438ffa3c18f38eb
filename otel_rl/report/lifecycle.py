"""Session lifecycle (AReaL's ``plot_session_trace``): Gantt, idle time, histograms, latency scatter."""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from typing import Any

from ._model import RunData, SessionRow
from ._stats import clip_high, percentile, step_sort_key

#: Sessions drawn in the Gantt chart (every one is counted in the numbers).
DEFAULT_GANTT_LIMIT = 2000
#: Points drawn in the latency scatter.
DEFAULT_SCATTER_LIMIT = 5000
#: Longest idle gaps listed per worker.
GAPS_LISTED = 5


def _lanes(rows: list[SessionRow]) -> list[int]:
    """Lane per session (sorted by submission) so that sessions in a lane never overlap."""
    free: list[tuple[float, int]] = []  # (end, lane) of busy lanes
    idle: list[int] = []
    lanes = []
    count = 0
    for r in rows:
        start = r.submit
        while free and free[0][0] <= start:  # type: ignore[operator]
            heapq.heappush(idle, heapq.heappop(free)[1])
        lane = heapq.heappop(idle) if idle else count
        if lane == count:
            count += 1
        lanes.append(lane)
        heapq.heappush(free, (r.finalized, lane))  # type: ignore[arg-type]
    return lanes


def _worker_usage(rows: list[SessionRow]) -> dict[str, Any]:
    starts = [r.submit for r in rows]
    ends = [r.finalized for r in rows]
    intervals = sorted(zip(starts, ends))  # type: ignore[arg-type]
    starts.sort()  # type: ignore[call-arg]
    ends.sort()  # type: ignore[call-arg]
    start = starts[0]
    end = ends[-1]
    busy = 0.0
    gaps: list[tuple[float, float]] = []
    cur_s, cur_e = intervals[0]
    for s, e in intervals:
        if s > cur_e:
            busy += cur_e - cur_s
            gaps.append((cur_e, s - cur_e))
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    busy += cur_e - cur_s
    window = end - start  # type: ignore[operator]
    # Peak concurrency: merge the sorted submissions and finalizations (an end at the
    # same instant as a start comes first).
    running = peak = 0
    j = 0
    n = len(ends)
    for s in starts:
        while j < n and ends[j] <= s:  # type: ignore[operator]
            running -= 1
            j += 1
        running += 1
        if running > peak:
            peak = running
    total = math.fsum([e - s for s, e in intervals])
    gaps = heapq.nlargest(GAPS_LISTED, gaps, key=lambda g: g[1])
    return {
        "sessions": len(rows), "start_ts": start, "window_s": window, "busy_s": busy,
        "idle_s": window - busy, "idle_share": (window - busy) / window if window > 0 else 0.0,
        "max_concurrency": peak, "avg_concurrency": total / window if window > 0 else float(len(rows)),
        "longest_gaps": [{"at_s": at - start, "duration_s": d} for at, d in gaps],  # type: ignore[operator]
    }


def _histograms(rows: list[SessionRow], bins: int, hi: float) -> tuple[dict[str, Any], dict[str, list[int]],
                                                                      dict[Any, list[int]]]:
    """Counts per bin overall, per status and per step, in one pass."""
    width = (hi if hi > 0 else 1e-9) / bins
    last = bins - 1
    overall = [0] * bins
    by_status: dict[str, list[int]] = {}
    by_step: dict[Any, list[int]] = {}
    for r in rows:
        i = int(r.total / width)  # type: ignore[operator]
        if i > last:
            i = last
        elif i < 0:
            i = 0
        overall[i] += 1
        counts = by_status.get(r.status)
        if counts is None:
            counts = by_status[r.status] = [0] * bins
        counts[i] += 1
        if r.step is not None:
            counts = by_step.get(r.step)
            if counts is None:
                counts = by_step[r.step] = [0] * bins
            counts[i] += 1
    edges = [i * width for i in range(bins + 1)]
    return {"edges": edges, "counts": overall}, by_status, by_step


def lifecycle(data: RunData, gantt_limit: int = DEFAULT_GANTT_LIMIT, bins: int = 40,
              scatter_limit: int = DEFAULT_SCATTER_LIMIT) -> dict[str, Any]:
    """Session lifecycle per worker: Gantt data, idle time, duration histograms, latency scatter.

    Idle time is time inside a worker's window (first submission to last
    finalization) with no session open. The Gantt chart lays each worker's
    sessions out in lanes, with their phase segments; with more than
    ``gantt_limit`` sessions it shows the first ones by submission (pick a
    window with ``steps``). Histograms share bin edges, from 0 to the longest
    session or, when a few sessions are far longer than the rest, to the p99.5
    (``clipped_at_s``; longer sessions count in the last bin), overall by
    status and per step. The scatter plots each session's
    duration at its finalization time, with the p50 and p95 lines.

    Args:
        data: A loaded run.
        gantt_limit: Most sessions drawn in the Gantt chart.
        bins: Histogram bins.
        scatter_limit: Most points in the scatter (the slowest always included).

    Returns:
        ``{"status_counts", "open_sessions", "workers": [...], "gantt": {...},
        "histogram": {...}, "histogram_by_step": [...], "scatter": {...}}``;
        times in the Gantt and scatter are seconds from ``t0``.
    """
    status_counts = Counter(r.status for r in data.sessions)
    done = [r for r in data.sessions
            if r.total is not None and r.submit is not None and r.finalized is not None]
    open_rows = [r for r in data.sessions if r.finalized is None]
    by_worker: dict[str, list[SessionRow]] = defaultdict(list)
    for r in done:
        by_worker[r.worker].append(r)
    workers = [dict(worker=w, **_worker_usage(rows)) for w, rows in sorted(by_worker.items())]
    t0 = min([r.submit for r in done], default=0.0)  # type: ignore[type-var]
    # Gantt: the first sessions by submission.
    if 0 <= gantt_limit < len(done):
        shown = heapq.nsmallest(gantt_limit, done, key=lambda r: r.submit)  # type: ignore[arg-type, return-value]
    else:
        shown = sorted(done, key=lambda r: r.submit)  # type: ignore[arg-type, return-value]
    gantt_rows: dict[str, list[SessionRow]] = defaultdict(list)
    for r in shown:
        gantt_rows[r.worker].append(r)
    gantt = []
    lanes_per_worker = {}
    for worker in sorted(gantt_rows):
        rows = gantt_rows[worker]
        lanes = _lanes(rows)
        lanes_per_worker[worker] = max(lanes) + 1 if lanes else 0
        for r, lane in zip(rows, lanes):
            gantt.append({
                "worker": worker, "lane": lane, "task_id": r.task_id, "session_id": r.session_id,
                "status": r.status, "step": r.step,
                "start_s": r.submit - t0, "end_s": r.finalized - t0,  # type: ignore[operator]
                "phases": [[n, s - t0, None if e is None else e - t0] for n, s, e in r.phase_instances()],
            })
    totals = [r.total for r in done]
    totals.sort()  # type: ignore[call-arg]
    p50, p95 = percentile(totals, 50), percentile(totals, 95)  # type: ignore[arg-type]
    hi = clip_high(totals)  # type: ignore[arg-type]
    overall, by_status, step_counts = _histograms(done, bins, hi)
    # Scatter: the slowest fifth of the budget, then an even sample of the rest.
    chosen = done
    if len(done) > scatter_limit:
        top = heapq.nlargest(scatter_limit // 5, done, key=lambda r: r.total)  # type: ignore[arg-type, return-value]
        picked = {id(r) for r in top}
        rest = [r for r in done if id(r) not in picked]
        stride = len(rest) / (scatter_limit - len(top))
        chosen = top + [rest[int(i * stride)] for i in range(scatter_limit - len(top))]
    chosen = sorted(chosen, key=lambda r: r.finalized)  # type: ignore[arg-type, return-value]
    return {
        "t0": t0,
        "status_counts": dict(sorted(status_counts.items())),
        "open_sessions": {"count": len(open_rows),
                          "examples": [{"worker": r.worker, "task_id": r.task_id,
                                        "session_id": r.session_id, "status": r.status}
                                       for r in open_rows[:10]]},
        "workers": workers,
        "gantt": {"sessions": gantt, "lanes": lanes_per_worker, "shown": len(shown), "total": len(done),
                  "truncated": len(shown) < len(done)},
        "histogram": {"unit": "s", "edges": overall["edges"] if done else [],
                      "counts": overall["counts"] if done else [], "by_status": dict(sorted(by_status.items())),
                      "clipped_at_s": hi if done and totals[-1] > hi else None},
        "histogram_by_step": [
            {"step": s, "sessions": sum(c), "counts": c}
            for s, c in sorted(step_counts.items(), key=lambda kv: step_sort_key(kv[0]))],
        "scatter": {
            "x_s": [r.finalized - t0 for r in chosen],  # type: ignore[operator]
            "total_s": [r.total for r in chosen],
            "status": [r.status for r in chosen],
            "worker": [r.worker for r in chosen],
            "session_id": [r.session_id for r in chosen],
            "p50_s": p50, "p95_s": p95, "shown": len(chosen), "total": len(done),
        },
    }
