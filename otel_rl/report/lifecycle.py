"""Session lifecycle (AReaL's ``plot_session_trace``): Gantt, idle time, histograms, latency scatter."""

from __future__ import annotations

import bisect
import heapq
import math
from array import array
from collections import defaultdict
from typing import Any

from .._internal.read.compiled import facts_native, merged_runs
from ._columns import SessionTable, session_table
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


def _floats(raws: list[bytes]) -> list[float]:
    values: list[float] = []
    for raw in raws:
        a = array("d")
        a.frombytes(raw)
        values += a
    return values


def _worker_usage(groups: list[list[bytes]], comps: list[bytes]) -> dict[str, Any]:
    """A worker's usage from its sessions' sorted submissions, finalizations and durations
    (``groups``), and the unions of their intervals a block at a time (``comps``)."""
    starts = merged_runs(groups[0])
    ends = merged_runs(groups[1])
    start = starts[0]
    end = ends[-1]
    # The union of every interval: the blocks' unions merged again (the same components).
    flat = _floats(comps)
    intervals = sorted(zip(flat[0::2], flat[1::2]))
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
    window = end - start
    # Peak concurrency: merge the sorted submissions and finalizations (an end at the
    # same instant as a start comes first).
    n = len(ends)
    if facts_native is not None:
        peak = facts_native.peak_concurrency(starts, ends)
    else:
        running = peak = 0
        j = 0
        for s in starts:
            while j < n and ends[j] <= s:
                running -= 1
                j += 1
            running += 1
            if running > peak:
                peak = running
    total = math.fsum(_floats(groups[3]))
    gaps = heapq.nlargest(GAPS_LISTED, gaps, key=lambda g: g[1])
    return {
        "sessions": n, "start_ts": start, "window_s": window, "busy_s": busy,
        "idle_s": window - busy, "idle_share": (window - busy) / window if window > 0 else 0.0,
        "max_concurrency": peak, "avg_concurrency": total / window if window > 0 else float(n),
        "longest_gaps": [{"at_s": at - start, "duration_s": d} for at, d in gaps],
    }


def _bin_counts(sorted_totals: list[float], width: float, bins: int) -> list[int]:
    """Counts per bin of ``int(total / width)`` (clamped to the bins), from sorted totals:
    the bin grows with the total, so each bin is a run found by bisection."""
    last = bins - 1

    def bin_of(t: float) -> int:
        i = int(t / width)
        return last if i > last else (0 if i < 0 else i)

    counts = []
    lo = 0
    for i in range(bins):
        hi = bisect.bisect_right(sorted_totals, i, lo, key=bin_of)
        counts.append(hi - lo)
        lo = hi
    return counts


def _histograms(table: SessionTable, bins: int, hi: float, totals: list[float]
                ) -> tuple[dict[str, Any], dict[str, list[int]], dict[Any, list[int]]]:
    """Counts per bin overall, per status and per step."""
    width = (hi if hi > 0 else 1e-9) / bins
    by_status: dict[str, list[bytes]] = {}
    by_step: dict[Any, list[bytes]] = {}
    for (step, _worker, status), raws in table.dgroups.items():
        by_status.setdefault(status, []).extend(raws[2])
        if step is not None:
            by_step.setdefault(step, []).extend(raws[2])
    overall = _bin_counts(totals, width, bins)
    status_counts = {s: _bin_counts(sorted(_floats(v)), width, bins) for s, v in by_status.items()}
    step_counts = {s: _bin_counts(sorted(_floats(v)), width, bins) for s, v in by_step.items()}
    edges = [i * width for i in range(bins + 1)]
    return {"edges": edges, "counts": overall}, status_counts, step_counts


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
    table = session_table(data, candidates=max(gantt_limit, scatter_limit // 5))
    status_counts = table.status_counts
    open_rows = table.rows(table.first_open)
    by_worker: dict[str, list[list[bytes]]] = {}
    for (_step, worker, _status), raws in table.dgroups.items():
        merged = by_worker.setdefault(worker, [[], [], [], []])
        for target, raw in zip(merged, raws):
            target.extend(raw)
    workers = [dict(worker=w, **_worker_usage(groups, table.comps[w])) for w, groups in sorted(by_worker.items())]
    totals = _floats([raw for groups in by_worker.values() for raw in groups[2]])
    totals.sort()
    n_done = len(totals)
    t0 = min([array("d", raw[:8])[0] for groups in by_worker.values() for raw in groups[0]], default=0.0)
    # Gantt: the first sessions by submission.
    if 0 <= gantt_limit < n_done:
        shown = table.rows(table.largest(gantt_limit, "first_submit"))
    else:
        shown = sorted(table.rows(table.largest(n_done, "first_submit")), key=lambda r: r.submit)
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
    p50, p95 = percentile(totals, 50), percentile(totals, 95)  # type: ignore[arg-type]
    hi = clip_high(totals)  # type: ignore[arg-type]
    overall, by_status, step_counts = _histograms(table, bins, hi, totals)
    # Scatter: the slowest fifth of the budget, then an even sample of the rest.
    if n_done > scatter_limit:
        top = table.largest(scatter_limit // 5)
        done = table.done_indices()
        # The rest (the finished sessions not in top) sampled without being listed: its p-th
        # element is done's (p + k)-th, k the number of top's positions in done up to there.
        skipped = sorted({bisect.bisect_left(done, i) for i in top})
        stride = (len(done) - len(skipped)) / (scatter_limit - len(top))
        chosen = list(top)
        k = 0
        for i in range(scatter_limit - len(top)):
            p = int(i * stride)
            while k < len(skipped) and skipped[k] <= p + k:
                k += 1
            chosen.append(done[p + k])
    else:
        chosen = table.done_indices()
    points = sorted(map(table.scatter_point, chosen), key=lambda p: p[0])
    return {
        "t0": t0,
        "status_counts": dict(sorted(status_counts.items())),
        "open_sessions": {"count": len(open_rows),
                          "examples": [{"worker": r.worker, "task_id": r.task_id,
                                        "session_id": r.session_id, "status": r.status}
                                       for r in open_rows[:10]]},
        "workers": workers,
        "gantt": {"sessions": gantt, "lanes": lanes_per_worker, "shown": len(shown), "total": n_done,
                  "truncated": len(shown) < n_done},
        "histogram": {"unit": "s", "edges": overall["edges"] if n_done else [],
                      "counts": overall["counts"] if n_done else [], "by_status": dict(sorted(by_status.items())),
                      "clipped_at_s": hi if n_done and totals[-1] > hi else None},
        "histogram_by_step": [
            {"step": s, "sessions": sum(c), "counts": c}
            for s, c in sorted(step_counts.items(), key=lambda kv: step_sort_key(kv[0]))],
        "scatter": {
            "x_s": [p[0] - t0 for p in points],
            "total_s": [p[1] for p in points],
            "status": [p[2] for p in points],
            "worker": [p[3] for p in points],
            "session_id": [p[4] for p in points],
            "p50_s": p50, "p95_s": p95, "shown": len(points), "total": n_done,
        },
    }
