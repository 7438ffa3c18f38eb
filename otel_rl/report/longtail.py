"""Long-tail analysis per step and per worker (verl's multi-turn rollout profiling)."""

from __future__ import annotations

import bisect
import math
import statistics
from array import array
from collections import defaultdict
from typing import Any

from .._internal.read.compiled import facts_native, merged_runs
from ._columns import SessionTable, session_table
from ._model import RunData
from ._stats import (TAIL_PERCENTILES, clip_high, histogram, pct_key, percentile, quantile_curve, step_sort_key,
                     summarize, union_length)

#: A worker (or step) is a straggler beyond this many times the median of the others.
DEFAULT_THRESHOLD = 1.5
#: Outlier sessions listed.
DEFAULT_OUTLIERS = 10
#: The phase whose instances are turns.
DEFAULT_TURN_PHASE = "generate"
#: Fractions of a step at which the share of finished sessions is reported.
FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
#: Workers per step that get their own CDF curve.
MAX_WORKER_CURVES = 16




def _step_view(step: Any, groups: dict[str, list[list[bytes]]], threshold: float,
               worker_totals: dict[str, list[list[float]]]) -> dict[str, Any]:
    """One step: ``groups`` per worker ``[submissions, finalizations, totals]``, sorted runs."""
    submits = {w: merged_runs(g[0]) for w, g in groups.items()}
    finals = {w: merged_runs(g[1]) for w, g in groups.items()}
    t0 = min([v[0] for v in submits.values()])
    t1 = max([v[-1] for v in finals.values()])
    span = t1 - t0
    completion = merged_runs([raw for g in groups.values() for raw in g[1]])
    completion = [f - t0 for f in completion]  # still in order: subtracting t0 keeps it
    n = len(completion)
    comp = {pct_key(q): percentile(completion, q) for q in TAIL_PERCENTILES}
    workers = []
    curves = {}
    for worker in sorted(groups):
        totals = merged_runs(groups[worker][2])
        worker_totals[worker].append(totals)
        done = [f - t0 for f in finals[worker]]
        if len(groups) <= MAX_WORKER_CURVES:
            curves[worker] = quantile_curve(done, 100)
        workers.append({
            "worker": worker, "sessions": len(totals),
            "first_submit_s": submits[worker][0] - t0,
            "last_finish_s": done[-1],
            "p50_s": percentile(totals, 50), "p95_s": percentile(totals, 95), "max_s": totals[-1],
        })
    for w in workers:
        others = [o["last_finish_s"] for o in workers if o is not w]
        median = statistics.median(others) if others else None
        w["others_median_s"] = median
        w["ratio"] = w["last_finish_s"] / median if median else None
        w["straggler"] = bool(w["ratio"] is not None and w["ratio"] > threshold)
    slowest = max(workers, key=lambda w: w["last_finish_s"])
    return {
        "step": step, "sessions": n, "start_ts": t0, "span_s": span,
        "completion_s": comp,
        "completion_fraction": {k: (v / span if span > 0 and v is not None else None)
                                for k, v in comp.items()},
        "finished_by_fraction": [
            {"fraction": f, "share": bisect.bisect_right(completion, f * span + 1e-12) / n}
            for f in FRACTIONS],
        "tail_share": (span - comp["p80"]) / span if span > 0 else None,
        "workers": workers,
        "slowest_worker": {"worker": slowest["worker"], "last_finish_s": slowest["last_finish_s"],
                           "others_median_s": slowest["others_median_s"], "ratio": slowest["ratio"]},
        "cdf": quantile_curve(completion),
        "worker_cdfs": curves,
    }


def _turns(table: SessionTable, n: int) -> dict[str, Any] | None:
    if not table.seen:
        return None
    by_turn: dict[int, list[bytes]] = defaultdict(list)
    by_count: dict[int, list[bytes]] = defaultdict(list)
    step_turn: dict[Any, dict[int, list[float]]] = defaultdict(dict)
    step_count: dict[Any, dict[int, int]] = defaultdict(dict)
    for (step, k), raws in table.bycount.items():
        by_count[k] += raws
        step_count[step][k] = sum(len(raw) for raw in raws) // 8
    for (step, i), raws in table.turns.items():
        by_turn[i] += raws
        step_turn[step][i] = merged_runs(raws)
    counts = {k: merged_runs(v) for k, v in by_count.items()}
    return {
        "phase": table.turn_phase,
        "count_distribution": [{"turns": k, "sessions": len(v), "share": len(v) / n}
                               for k, v in sorted(counts.items())],
        "by_turn": [dict(turn=i, **summarize(merged_runs(v), presorted=True)) for i, v in sorted(by_turn.items())],
        "by_turn_count": [dict(turns=k, **summarize(v, presorted=True)) for k, v in sorted(counts.items())],
        "by_step": [{
            "step": step,
            "avg_s_by_turn": {str(i): math.fsum(v) / len(v) for i, v in sorted(step_turn[step].items())},
            "share_by_turn_count": {str(k): c / sum(step_count[step].values())
                                    for k, c in sorted(step_count[step].items())},
        } for step in sorted(step_count, key=step_sort_key)],
    }


def _pearson(xs: list[float], ys: list[float]) -> float | None:
    n = len(xs)
    if n < 3:
        return None
    if facts_native is not None:  # the same operations, without a float object per value
        r = facts_native.pearson(xs, ys)
        if r is not NotImplemented:
            return r
    mx = math.fsum(xs) / n
    my = math.fsum(ys) / n
    dx = [x - mx for x in xs]
    dy = [y - my for y in ys]
    sxx = math.fsum([d * d for d in dx])
    syy = math.fsum([d * d for d in dy])
    if sxx <= 0 or syy <= 0:
        return None
    return math.fsum([a * b for a, b in zip(dx, dy)]) / math.sqrt(sxx * syy)


def _response_length(table: SessionTable, bins: int) -> dict[str, Any] | None:
    if not table.tokens:
        return None
    lengths: list[float] = []
    totals: list[float] = []
    by_step: dict[Any, list[float]] = {}
    for step, (tok, tot) in table.tokens.items():
        v: list[float] = []
        for raw in tok:
            a = array("d")
            a.frombytes(raw)
            v += a
        for raw in tot:
            a = array("d")
            a.frombytes(raw)
            totals += a
        lengths += v
        by_step[step] = v
    ordered = sorted(lengths)
    stats = summarize(ordered, unit="tokens", presorted=True)
    return {
        "sessions": len(lengths), **stats,
        "histogram": histogram(ordered, bins, 0.0, clip_high(ordered), presorted=True),
        "correlation_with_duration": _pearson(lengths, totals),
        "by_step": [{"step": s, "sessions": len(v), "avg_tokens": math.fsum(v) / len(v), "max_tokens": max(v)}
                    for s, v in sorted(by_step.items(), key=lambda kv: step_sort_key(kv[0]))],
    }


def long_tail(data: RunData, threshold: float = DEFAULT_THRESHOLD, outliers: int = DEFAULT_OUTLIERS,
              turn_phase: str = DEFAULT_TURN_PHASE, bins: int = 40) -> dict[str, Any]:
    """Long-tail analysis of finalized sessions, per step and per worker.

    Per step (``t0`` = the step's first submission, ``span_s`` = until its last
    session finished): completion times relative to ``t0`` at p50 / p80 / p90 /
    p95 / p99 / p99.9, also as fractions of the step (verl: "80% of requests
    finish in the first 40% of the time" is ``completion_fraction.p80 == 0.4``),
    the share of sessions finished by each tenth of the step, the tail's share
    of the step (after p80), each worker's last finish against the median of
    the other workers (stragglers beyond ``threshold``), and CDF curves.
    Steps whose span exceeds ``threshold`` times the median step are
    stragglers too. Outliers are the slowest sessions with their time per
    phase. Turn and response-length analyses appear when the data has them.

    Args:
        data: A loaded run.
        threshold: Straggler threshold (ratio to the median of the others).
        outliers: How many of the slowest sessions to list.
        turn_phase: The phase whose instances are turns.
        bins: Histogram bins (response lengths).

    Returns:
        ``{"threshold", "steps": [...], "workers": [...], "stragglers": [...],
        "outliers": [...], "turns": {...} | None, "response_length": {...} | None}``.
    """
    table = session_table(data, turn_phase, outliers)
    groups: dict[Any, dict[str, list[list[bytes]]]] = defaultdict(dict)
    for (step, worker, _status), raws in table.dgroups.items():
        merged = groups[step].setdefault(worker, [[], [], []])
        for target, raw in zip(merged, raws):
            target.extend(raw)
    worker_totals: dict[str, list[list[float]]] = defaultdict(list)
    steps = [_step_view(step, groups[step], threshold, worker_totals)
             for step in sorted(groups, key=step_sort_key)]
    stragglers: list[dict[str, Any]] = []
    for sv in steps:
        for w in sv["workers"]:
            if w["straggler"]:
                stragglers.append({"kind": "worker", "step": sv["step"], "worker": w["worker"],
                                   "value_s": w["last_finish_s"], "median_s": w["others_median_s"],
                                   "ratio": w["ratio"]})
    if len(steps) > 1:
        for sv in steps:
            others = [o["span_s"] for o in steps if o is not sv]
            median = statistics.median(others)
            sv["others_median_s"] = median
            sv["ratio"] = sv["span_s"] / median if median > 0 else None
            sv["straggler"] = bool(sv["ratio"] is not None and sv["ratio"] > threshold)
            if sv["straggler"]:
                stragglers.append({"kind": "step", "step": sv["step"], "worker": None,
                                   "value_s": sv["span_s"], "median_s": median, "ratio": sv["ratio"]})
    by_worker: dict[str, list[float]] = {}
    for worker, runs in worker_totals.items():
        merged = [v for run in runs for v in run]
        merged.sort()  # sorted runs: a merge
        by_worker[worker] = merged
    slowest_count: dict[str, int] = defaultdict(int)
    straggler_count: dict[str, int] = defaultdict(int)
    for sv in steps:
        if len(sv["workers"]) > 1:
            slowest_count[sv["slowest_worker"]["worker"]] += 1
        for w in sv["workers"]:
            straggler_count[w["worker"]] += w["straggler"]
    workers = [dict(worker=w, **summarize(v, presorted=True), slowest_in_steps=slowest_count.get(w, 0),
                    straggler_steps=straggler_count.get(w, 0)) for w, v in sorted(by_worker.items())]
    totals = [v for values in by_worker.values() for v in values]
    totals.sort()
    median_total = percentile(totals, 50)
    out_rows = table.rows(table.largest(max(0, outliers)))
    outlier_list = []
    for r in out_rows:
        per_phase: dict[str, float] = defaultdict(float)
        covered = []
        open_phases = 0
        turns = 0
        for name, s, e in r.phase_instances():
            if e is None:
                open_phases += 1
                continue
            per_phase[name] += e - s
            covered.append((s, e))
            turns += name == turn_phase
        outlier_list.append({
            "worker": r.worker, "task_id": r.task_id, "session_id": r.session_id, "step": r.step,
            "status": r.status, "reason": r.reason, "total_s": r.total,
            "x_median": r.total / median_total if median_total else None,  # type: ignore[operator]
            "phases_s": dict(per_phase),
            "unattributed_s": max(0.0, r.total - union_length(covered)),  # type: ignore[operator]
            "open_phases": open_phases, "turns": turns, "tokens": r.tokens,
        })
    return {
        "threshold": threshold,
        "steps": steps,
        "workers": workers,
        "stragglers": stragglers,
        "outliers": outlier_list,
        "turns": _turns(table, len(totals)),
        "response_length": _response_length(table, bins),
    }
