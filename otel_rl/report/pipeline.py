"""The pipeline view: how rollouts fed training, step by step.

What an engineer asks of an asynchronous RL run, answered from what
``otel_rl.consume``, ``otel_rl.weight_sync``, ``otel_rl.annotate`` and the
counters on the timeline left in the run's files:

* per step, the sessions consumed, their staleness (consumer policy version
  minus the oldest version a session saw), the share that crossed a weight
  update, and their age at consumption (from the end of the session's last
  phase, when its sample was ready, to the ``consume``; a verdict the trainer
  gives afterwards does not count);
* the bubbles: time the trainer waited for rollouts in each step (its
  ``sync``-category spans, such as AReaL's ``wait`` scopes, or, without
  them, the time from the step's start to its first ``consume``) against
  the time rollout workers spent receiving weights (``weight_sync`` spans,
  role ``recv``), per step and per worker;
* throughput: sessions consumed per second of step, sessions finalized per
  second of the run;
* the counters over time (sessions in flight, buffer sizes, GPU memory, any
  ``set_gauge``);
* where annotations exist, each annotated value (advantage, reward,
  ``reward.<name>``, ...) against the session's latency.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from .._internal import keys
from .._internal.read.annotations import session_key
from .._internal.recording.category import Category
from ._columns import session_table
from ._model import RunData, SpanRow
from ._stats import percentile, step_sort_key, summarize, union_length

#: Most points kept of each series plotted (counters, value vs latency).
DEFAULT_POINTS = 500
#: Latency groups of the value vs latency view (quintiles).
LATENCY_GROUPS = 5


def _thin(n: int, points: int) -> range | list[int]:
    """Indices of at most ``points`` evenly spread items of ``n`` (first and last kept)."""
    if n <= points:
        return range(n)
    return sorted({round(i * (n - 1) / (points - 1)) for i in range(points)})


def _is_wait(span: SpanRow) -> bool:
    return span.args.get(keys.CATEGORY) == Category.SYNC.value or "wait" in span.name.lower()


def _steps_of(data: RunData) -> dict[Any, SpanRow]:
    """Step -> its step span (the longest, when several ranks ran it)."""
    steps: dict[Any, SpanRow] = {}
    for span in data.spans:
        if span.args.get(keys.SPAN_KIND) == keys.KIND_STEP:
            step = span.args.get(keys.STEP)
            if step is not None and (step not in steps or span.dur > steps[step].dur):
                steps[step] = span
    return steps


def _step_of(span: SpanRow, steps: dict[Any, SpanRow]) -> Any:
    """A span's step: its own ``rl.step``, else the trainer step whose span holds its start."""
    step = span.args.get(keys.STEP)
    if step is not None:
        return step
    for s, row in steps.items():
        if row.start <= span.start <= row.end:
            return s
    return None


def _numbers(values: list[Any]) -> list[float]:
    return sorted(float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool))


def _staleness(values: list[Any]) -> dict[str, Any]:
    numeric = _numbers(values)
    counts: dict[str, int] = defaultdict(int)
    for v in numeric:
        counts[f"{v:g}"] += 1
    return {"count": len(numeric), "not_numeric": len(values) - len(numeric),
            "mean": math.fsum(numeric) / len(numeric) if numeric else None,
            "p50": percentile(numeric, 50.0), "max": numeric[-1] if numeric else None,
            "counts": dict(sorted(counts.items(), key=lambda kv: float(kv[0])))}


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def _pearson(xs: list[float], ys: list[float]) -> float | None:
    n = len(xs)
    if n < 3:
        return None
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def _value_vs_latency(pairs: list[tuple[float, float]], points: int) -> dict[str, Any]:
    """One annotated value against session latency: correlations, means per latency group, points."""
    pairs.sort()
    xs = [p[0] for p in pairs]
    ys = [p[1] for p in pairs]
    n = len(pairs)
    groups = []
    for g in range(LATENCY_GROUPS):
        lo, hi = g * n // LATENCY_GROUPS, (g + 1) * n // LATENCY_GROUPS
        if hi > lo:
            part = ys[lo:hi]
            groups.append({"latency_from_s": xs[lo], "latency_to_s": xs[hi - 1], "count": hi - lo,
                           "mean": math.fsum(part) / len(part)})
    shown = _thin(n, points)
    return {"count": n, "pearson": _pearson(xs, ys), "spearman": _pearson(_ranks(xs), _ranks(ys)),
            "by_latency": groups, "points": {"latency_s": [xs[i] for i in shown], "value": [ys[i] for i in shown]}}


def _counters(data: RunData, points: int) -> list[dict[str, Any]]:
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for worker, name, ts, value in data.counters:
        series[(name, worker)].append((ts, value))
    out = []
    for (name, worker), samples in sorted(series.items()):
        samples.sort()
        values = [v for _, v in samples]
        shown = _thin(len(samples), points)
        out.append({"name": name, "worker": worker, "count": len(samples), "min": min(values),
                    "max": max(values), "mean": math.fsum(values) / len(values), "last": values[-1],
                    "points": {"t": [samples[i][0] for i in shown], "value": [values[i] for i in shown]}})
    return out


def _syncs(data: RunData, steps: dict[Any, SpanRow]) -> tuple[list[dict[str, Any]], dict[Any, dict[str, float]]]:
    """Weight syncs per worker and role, and per step: send time and rollout time paused."""
    per_worker: dict[tuple[str, str], list[float]] = defaultdict(list)
    per_step: dict[Any, dict[str, float]] = defaultdict(lambda: {"send_s": 0.0, "paused_s": 0.0})
    by_id = {s.span_id: s for s in data.spans if s.span_id and s.args.get(keys.SPAN_KIND) == keys.KIND_WEIGHT_SYNC}
    for span in by_id.values():
        role = str(span.args.get(keys.WEIGHT_SYNC_ROLE, "send"))
        per_worker[(span.worker, role)].append(span.dur)
        step = span.args.get(keys.STEP)
        if step is None:
            parent = by_id.get(span.parent_id)
            step = _step_of(parent if parent is not None else span, steps)
        per_step[step]["paused_s" if role == "recv" else "send_s"] += span.dur
    rows = [dict(worker=worker, role=role, **summarize(durations))
            for (worker, role), durations in sorted(per_worker.items())]
    return rows, per_step


def pipeline(data: RunData, points: int = DEFAULT_POINTS) -> dict[str, Any]:
    """How rollouts fed training (see the module): per step, overall, weight syncs, counters, values vs latency.

    Args:
        data: A loaded run.
        points: Most points kept of each plotted series.

    Returns:
        ``{"steps": [{"step", "consumed", "staleness", "crossed_update", "sample_age",
        "duration_s", "trainer_wait_s", "weight_sync_s", "rollout_paused_s",
        "throughput_sps"}], "overall": {...}, "weight_syncs": [...], "counters": [...],
        "values_vs_latency": {name: {...}}}``; ``staleness`` holds ``count``,
        ``not_numeric``, ``mean``, ``p50``, ``max`` and ``counts`` per value;
        ``sample_age`` is a duration summary in seconds (sample ready -> consumed).
    """
    consumed = [a for a in data.annotations if a.get("kind") == "consume"
                and (data.steps is None or a.get("step") in data.steps)]
    annotated = [a for a in data.annotations if a.get("kind") == "annotation"]
    table = session_table(data)
    sessions = table.lookup({session_key(a) for a in consumed + annotated})
    steps = _steps_of(data)
    sync_rows, sync_by_step = _syncs(data, steps)

    by_step: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for line in consumed:
        by_step[line.get("step")].append(line)
    waits: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    step_workers = {span.worker for span in steps.values()}
    for span in data.spans:
        if span.worker in step_workers and span.args.get(keys.SPAN_KIND) != keys.KIND_STEP and _is_wait(span):
            step = _step_of(span, steps)
            if step is not None:
                waits[step].append((span.start, span.end))

    rows = []
    all_ages: list[float] = []
    unknown = 0
    for step in sorted(set(by_step) | set(steps) | {s for s in sync_by_step if s is not None}, key=step_sort_key):
        lines = by_step.get(step, [])
        ages = []
        for line in lines:
            found = sessions.get(session_key(line))
            ts = line.get("ts")
            if found is None:  # no session of the records read, or several (ids without a span id)
                unknown += 1
            elif found[2] == found[2] and isinstance(ts, (int, float)):
                ages.append(ts - found[2])
        all_ages += ages
        span = steps.get(step)
        duration = span.dur if span is not None else None
        if waits.get(step):
            wait = union_length(waits[step])
        elif span is not None and lines:
            firsts = [line["ts"] for line in lines if isinstance(line.get("ts"), (int, float))]
            wait = max(0.0, min(firsts) - span.start) if firsts else None
        else:
            wait = None
        sync = sync_by_step.get(step, {})
        rows.append({
            "step": step, "consumed": len(lines),
            "staleness": _staleness([line.get("staleness") for line in lines]),
            "crossed_update": (sum(1 for line in lines if line.get("crossed_update")) / len(lines)) if lines else None,
            "sample_age": summarize(ages), "duration_s": duration, "trainer_wait_s": wait,
            "weight_sync_s": sync.get("send_s"), "rollout_paused_s": sync.get("paused_s"),
            "throughput_sps": len(lines) / duration if duration and lines else None,
        })

    stale_dropped = sum(n for (_status, reason), n in table.reasons.items()
                        if keys.STALE_REASON_MARK in reason.lower())
    window = (table.tmax - table.tmin) if table.tmin is not None and table.tmax is not None else None
    step_time = math.fsum(r["duration_s"] for r in rows if r["duration_s"] is not None)
    wait_time = math.fsum(r["trainer_wait_s"] for r in rows if r["trainer_wait_s"] is not None)
    paused = math.fsum(d["paused_s"] for d in sync_by_step.values())
    rollout_workers = {row["worker"] for row in sync_rows if row["role"] == "recv"} | set(table.workers)
    overall = {
        "consumed": len(consumed), "consumed_unknown": unknown,
        "staleness": _staleness([line.get("staleness") for line in consumed]),
        "crossed_update": (sum(1 for line in consumed if line.get("crossed_update")) / len(consumed)) if consumed else None,
        "sample_age": summarize(all_ages),
        "dropped_stale": stale_dropped,
        "finalized": table.finalized_n,
        "finalized_per_s": table.finalized_n / window if window else None,
        "trainer_wait_s": wait_time, "trainer_wait_share": wait_time / step_time if step_time else None,
        "rollout_paused_s": paused,
        "rollout_paused_share": (paused / (window * len(rollout_workers))
                                 if window and rollout_workers else None),
    }
    values: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for line in annotated:
        found = sessions.get(session_key(line))
        if found is None or found[3] != found[3]:
            continue
        for name, value in line["values"].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                values[str(name)].append((found[3], float(value)))
    return {"steps": rows, "overall": overall, "weight_syncs": sync_rows, "counters": _counters(data, points),
            "values_vs_latency": {name: _value_vs_latency(pairs, points) for name, pairs in sorted(values.items())}}
