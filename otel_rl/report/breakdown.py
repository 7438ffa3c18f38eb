"""Where the time goes: per phase (sessions), per span name (scopes) and per stage (request events)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from .._internal import keys
from .._internal.read.compiled import merged_runs
from .._internal.read.session_facts import UNATTRIBUTED
from ._columns import session_table
from ._model import RunData
from ._stats import step_sort_key, summarize
from .timer_tree import parents


#: sglang-omni's ``(open_event, close_event)`` pairs framing a stage-local interval.
#: An opener may take part in several pairs; each pair has its own FIFO of
#: pending openers per (request, stage), so closing one pair never consumes the
#: opener of another.
STAGE_INTERVALS: tuple[tuple[str, str], ...] = (
    ("stage_input_received", "stage_complete"),
    ("encoder_start", "encoder_end"),
    ("preprocess_start", "preprocess_end"),
    ("scheduler_request_build_start", "scheduler_request_build_end"),
    ("scheduler_prefill_start", "stage_first_stream_chunk_sent"),
    ("scheduler_prefill_start", "scheduler_first_emit"),
)




def _group_rows(durations: dict[str, list[float]], opened: dict[str, int], with_phase: dict[str, int],
                share_sums: dict[str, float], unattributed: list[float], totals: list[float]) -> dict[str, Any]:
    """A group's statistics from its sorted durations (per phase), unattributed times and totals."""
    time_total = math.fsum(totals)
    n = len(totals)
    stats = {name: summarize(values, presorted=True) for name, values in durations.items()}
    rows = []
    for phase in sorted(set(durations) | set(opened),
                        key=lambda p: -(stats[p]["total_s"] if p in stats else 0.0)):
        row: dict[str, Any] = {"phase": phase}
        row.update(stats.get(phase) or summarize(()))
        row["open"] = opened.get(phase, 0)
        row["sessions"] = with_phase.get(phase, 0)
        row["share"] = row["total_s"] / time_total if time_total > 0 else None
        row["avg_share"] = share_sums.get(phase, 0.0) / n if n else None
        rows.append(row)
    if unattributed:
        row = {"phase": UNATTRIBUTED}
        row.update(summarize(unattributed, presorted=True))
        row["open"] = 0
        row["sessions"] = len(unattributed)
        row["share"] = row["total_s"] / time_total if time_total > 0 else None
        row["avg_share"] = share_sums.get(UNATTRIBUTED, 0.0) / n if n else None
        rows.append(row)
    return {"sessions": n, "session_time_s": time_total, "session": summarize(totals, presorted=True),
            "rows": rows}


def phase_breakdown(data: RunData) -> dict[str, Any]:
    """Per-phase statistics of the sessions, overall and per step.

    Every completed phase instance (a turn) counts once in ``count``,
    ``total_s``, ``avg_s``, ``p50_s``, ``p95_s``, ``p99_s`` and ``max_s``;
    instances still running when their session ended are counted in ``open``.
    ``share`` is the phase's total over the total time of finalized sessions
    (verl's per-event share of time); ``avg_share`` averages each session's
    own share. The ``(unattributed)`` row is session time covered by no phase.

    Args:
        data: A loaded run.

    Returns:
        ``{"unit": "s", "overall": group, "by_step": [{"step", **group}]}``
        where a group is ``{"sessions", "session_time_s", "session": stats of
        total_s, "rows": [{"phase", "count", ..., "open", "sessions", "share",
        "avg_share"}]}``.
    """
    groups = session_table(data).phase
    by_step = []
    for step in sorted((s for s in groups if s is not None), key=step_sort_key):
        durations, opened, with_phase, shares, unattr, totals = groups[step]
        by_step.append(dict(step=step, **_group_rows({name: merged_runs(raws) for name, raws in durations.items()},
                                                     opened, with_phase, shares, merged_runs(unattr),
                                                     merged_runs(totals))))
    # Overall: every group's values merged, counts and share sums added in order of the groups.
    durations_all: dict[str, list[bytes]] = {}
    opened_all: dict[str, int] = defaultdict(int)
    with_all: dict[str, int] = defaultdict(int)
    shares_all: dict[str, float] = defaultdict(float)
    unattr_all: list[bytes] = []
    totals_all: list[bytes] = []
    for durations, opened, with_phase, shares, unattr, totals in groups.values():
        for name, raws in durations.items():
            durations_all.setdefault(name, []).extend(raws)
        for target, source in ((opened_all, opened), (with_all, with_phase), (shares_all, shares)):
            for name, value in source.items():
                target[name] += value
        unattr_all += unattr
        totals_all += totals
    overall = _group_rows({name: merged_runs(raws) for name, raws in durations_all.items()}, opened_all, with_all,
                          shares_all, merged_runs(unattr_all), merged_runs(totals_all))
    return {"unit": "s", "overall": overall, "by_step": by_step}


def span_breakdown(data: RunData) -> dict[str, Any]:
    """Per span name statistics of scopes, steps and other spans, overall and per step.

    Sessions, tasks and phases are left out (the phase breakdown covers them).
    ``self_s`` is time in the span minus time in its direct children; ``share``
    is each name's self time over all self time, so the shares add up to 1.

    Args:
        data: A loaded run.

    Returns:
        ``{"unit": "s", "overall": [rows], "by_step": [{"step", "rows"}]}`` with
        rows ``{"name", "category", "count", "total_s", "avg_s", "p50_s",
        "p95_s", "p99_s", "max_s", "self_s", "share"}``.
    """
    skip = (keys.KIND_SESSION, keys.KIND_TASK, keys.KIND_PHASE)
    by_worker: dict[str, list] = defaultdict(list)
    for span in data.spans:
        by_worker[span.worker].append(span)
    groups: dict[Any, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    selfs: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    categories: dict[str, Any] = {}
    for spans in by_worker.values():
        spans = [s for s in spans if not (s.dur == 0 and s.args.get(keys.GAUGE_VALUE) is not None)]
        parent = parents(spans)
        child_time = [0.0] * len(spans)
        for i, j in enumerate(parent):
            if j >= 0:
                child_time[j] += spans[i].dur
        for i, s in enumerate(spans):
            if s.args.get(keys.SPAN_KIND) in skip:
                continue
            d = s.dur
            own = max(0.0, d - child_time[i])
            step = s.args.get(keys.STEP)
            for key in ((None, step) if step is not None else (None,)):
                groups[key][s.name].append(d)
                selfs[key][s.name] += own
            if s.name not in categories:
                categories[s.name] = s.args.get(keys.CATEGORY)

    def rows(key: Any) -> list[dict[str, Any]]:
        names = groups.get(key, {})
        total_self = math.fsum(selfs[key].values())
        out = []
        for name, values in names.items():
            row: dict[str, Any] = {"name": name, "category": categories.get(name)}
            row.update(summarize(values))
            row["self_s"] = selfs[key][name]
            row["share"] = selfs[key][name] / total_self if total_self > 0 else None
            out.append(row)
        out.sort(key=lambda r: -r["total_s"])
        return out

    return {"unit": "s", "overall": rows(None),
            "by_step": [{"step": k, "rows": rows(k)}
                        for k in sorted((k for k in groups if k is not None), key=step_sort_key)]}


def stage_intervals(data: RunData, pairs: tuple[tuple[str, str], ...] = STAGE_INTERVALS
                    ) -> tuple[list[tuple[Any, str, str, str, int, int]], list[tuple[Any, str, str, str, int]]]:
    """Pairs request events into stage intervals with sglang-omni's rules.

    Events of a request are taken in time order. An event that opens a pair
    pushes its timestamp on that pair's queue for ``(request, stage)``; an event
    that closes a pair takes the oldest pending opener of that pair (first in,
    first out). An event can open and close (chained intervals).

    Args:
        data: A loaded run.
        pairs: ``(open_event, close_event)`` pairs.

    Returns:
        ``(closed, open)``: ``(request_id, stage, opener, closer, open_ns,
        close_ns)`` for every interval, and ``(request_id, stage, opener,
        closer, open_ns)`` for openers never closed (a shared opener only in
        pairs whose closing event its stage emits at all).
    """
    opens: dict[str, list[tuple[str, str]]] = defaultdict(list)
    closes: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for opener, closer in pairs:
        opens[opener].append((opener, closer))
        closes[closer].append((opener, closer))
    closed = []
    left = []
    # An opener shared by several pairs (prefill start opens both time-to-first-emit
    # and time-to-first-stream-chunk) is not left open in a pair whose closing event
    # its stage never emits: an engine that does not stream never sends a first chunk.
    emitted: set[tuple[str, str]] = set()
    for rid, events in data.requests.items():
        pending: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for ts, stage, name, _pid, _meta in events:
            emitted.add((stage, name))
            for opener, closer in opens.get(name, ()):
                pending[(stage, opener, closer)].append(ts)
            for opener, closer in closes.get(name, ()):
                queue = pending.get((stage, opener, closer))
                if queue:
                    closed.append((rid, stage, opener, closer, queue.pop(0), ts))
        for (stage, opener, closer), queue in pending.items():
            left.extend((rid, stage, opener, closer, ts) for ts in queue)
    left = [item for item in left if len(opens[item[2]]) == 1 or (item[1], item[3]) in emitted]
    return closed, left


def stage_breakdown(data: RunData, pairs: tuple[tuple[str, str], ...] = STAGE_INTERVALS) -> dict[str, Any]:
    """Per (stage, interval) statistics of request events, in milliseconds.

    Args:
        data: A loaded run.
        pairs: ``(open_event, close_event)`` pairs (sglang-omni's by default).

    Returns:
        ``{"unit": "ms", "requests": n, "rows": [{"stage", "interval",
        "count", "total_ms", "avg_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms",
        "open", "share"}]}``; ``open`` counts openers never closed, ``share``
        is the row's total over the sum of all rows of its stage.
    """
    closed, left = stage_intervals(data, pairs)
    durations: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    open_counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for _rid, stage, opener, closer, t0, t1 in closed:
        durations[(stage, opener, closer)].append((t1 - t0) / 1e6)
    for _rid, stage, opener, closer, _t0 in left:
        open_counts[(stage, opener, closer)] += 1
    stage_total: dict[str, float] = defaultdict(float)
    for (stage, _o, _c), values in durations.items():
        stage_total[stage] += math.fsum(values)
    rows = []
    for key in set(durations) | set(open_counts):
        stage, opener, closer = key
        row: dict[str, Any] = {"stage": stage, "interval": f"{opener}->{closer}"}
        row.update(summarize(durations.get(key, ()), unit="ms"))
        row["open"] = open_counts.get(key, 0)
        row["share"] = row["total_ms"] / stage_total[stage] if stage_total.get(stage) else None
        rows.append(row)
    rows.sort(key=lambda r: (-r["total_ms"], r["stage"], r["interval"]))
    return {"unit": "ms", "requests": len(data.requests), "rows": rows + _server_timing_rows(data)}


def _server_timing_rows(data: RunData) -> list[dict[str, Any]]:
    """Rows of the engine's own timings (``record_server_timings``) beside the client-side phases
    they ran in: stage ``<engine> server``, one row per timing and one per client phase
    (``generate (client)``); a timing's share is of the client phases' total."""
    timings: dict[tuple[str, str], list[float]] = defaultdict(list)
    parents: dict[str, str] = {}
    for span in data.spans:
        if span.args.get(keys.SPAN_KIND) == keys.KIND_SERVER_TIMING:
            engine = str(span.args.get(keys.SERVER_ENGINE) or "engine")
            timings[(engine, span.name)].append(span.dur * 1e3)
            if span.parent_id:
                parents[span.parent_id] = engine
    if not timings:
        return []
    client: dict[tuple[str, str], list[float]] = defaultdict(list)
    for span in data.spans:
        engine = parents.get(span.span_id) if span.span_id else None
        if engine is not None:
            client[(engine, span.name)].append(span.dur * 1e3)
    client_total = defaultdict(float)
    for (engine, _name), values in client.items():
        client_total[engine] += math.fsum(values)
    rows = []
    for (engine, name), values in sorted(client.items()):
        rows.append({"stage": f"{engine} server", "interval": f"{name} (client)", **summarize(values, unit="ms"),
                     "open": 0, "share": 1.0 if client_total[engine] else None})
    for (engine, name), values in sorted(timings.items(), key=lambda kv: -math.fsum(kv[1])):
        row = {"stage": f"{engine} server", "interval": name, **summarize(values, unit="ms"), "open": 0}
        row["share"] = row["total_ms"] / client_total[engine] if client_total.get(engine) else None
        rows.append(row)
    return rows
