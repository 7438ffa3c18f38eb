"""Report views over real runs: every number checked against the raw files.

The run comes from ``report_workload.py`` executed as two real processes (ranks
0 and 1); the expected values are computed here, independently, from the
session records and trace lines those processes wrote. Small hand-made inputs
cover sglang-omni request events, AReaL session records, OTLP/JSON from a
collector, clock skew and bad input.
"""

from __future__ import annotations

import glob
import gzip
import inspect
import io
import json
import os
import sys
import time
from collections import Counter, defaultdict

import numpy as np
import orjson
import pytest
import report_workload
from pytest import approx

import otel_rl
from otel_rl import report
from otel_rl._internal import keys
from otel_rl.convert import InputLimits
from otel_rl.report import cli as report_cli
from otel_rl.report.breakdown import STAGE_INTERVALS
from support import run_python

QS = (50, 95, 99)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return report_workload.two_rank_run(str(tmp_path_factory.getbasetemp() / "report-run"))


@pytest.fixture(scope="module")
def data(run):
    return report.load(run)


# --- the raw files, read without otel_rl ---------------------------------------------------------
def _label(path):
    name = os.path.basename(path)
    return name.split("-", 1)[1].rsplit(".jsonl", 1)[0]


def raw_records(run):
    out = []
    for path in sorted(glob.glob(os.path.join(run, "sessions-*.jsonl"))):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                rec["_worker"] = _label(path)
                out.append(rec)
    return out


def raw_events(run):
    out = []
    for path in sorted(glob.glob(os.path.join(run, "traces-*.jsonl"))):
        with open(path) as f:
            for line in f:
                ev = json.loads(line)
                if ev.get("ph") in ("X", "i"):
                    ev["_worker"] = _label(path)
                    out.append(ev)
    return out


def session_steps(run):
    """span id of each session span -> its rl.step."""
    return {e["args"]["id"]: e["args"].get("rl.step") for e in raw_events(run)
            if e["ph"] == "X" and e["args"].get("rl.span.kind") == "session"}


def finalized(records):
    return [r for r in records if r["finalized_ts"] is not None]


def union(intervals):
    covered = 0.0
    end = -np.inf
    for s, e in sorted(intervals):
        if e <= end:
            continue
        covered += e - max(s, end)
        end = e
    return covered


def completed(rec, phase=None):
    return [(i["start_ts"], i["end_ts"]) for name, insts in rec["phases"].items() for i in insts
            if (phase is None or name == phase) and i["end_ts"] is not None]


def check_stats(row, values, unit="s", scale=1.0):
    assert row["count"] == len(values)
    assert row[f"total_{unit}"] == approx(sum(values) * scale)
    assert row[f"avg_{unit}"] == approx(np.mean(values) * scale)
    assert row[f"max_{unit}"] == approx(max(values) * scale)
    for q in QS:
        assert row[f"p{q}_{unit}"] == approx(np.percentile(values, q) * scale)


# --- loading ------------------------------------------------------------------------------------
def test_every_record_and_span_is_loaded_with_its_worker_and_step(run, data):
    records = raw_records(run)
    events = raw_events(run)
    assert len(data.sessions) == len(records) == (report_workload.STEPS * report_workload.TASKS
                                                  * report_workload.SAMPLES * 2)
    assert len(data.spans) == sum(1 for e in events if e["ph"] == "X")
    assert {s.worker for s in data.sessions} == {"rollout-r0", "rollout-r1"}
    steps = session_steps(run)
    by_span = {s.span_id: s for s in data.sessions}
    for rec in records:
        row = by_span[rec["span_id"]]
        assert row.worker == rec["_worker"]
        assert row.step == steps[rec["span_id"]]
        assert row.total == rec["total_s"]
        assert row.status == rec["status"]
    d = data.diagnostics
    assert d.malformed_count == 0 and not d.truncated and not d.missing and not d.unreadable
    assert {os.path.basename(p) for p, _ in d.ignored} == {"metrics-rollout-r0.jsonl", "metrics-rollout-r1.jsonl"}


# --- phase and span breakdowns --------------------------------------------------------------------
def _phase_expectations(records):
    durations = defaultdict(list)
    open_ = Counter()
    for rec in records:
        for name, insts in rec["phases"].items():
            for i in insts:
                if i["end_ts"] is None:
                    open_[name] += 1
                else:
                    durations[name].append(i["end_ts"] - i["start_ts"])
    return durations, open_


def test_phase_breakdown_matches_the_session_records(run, data):
    records = raw_records(run)
    view = report.phase_breakdown(data)
    durations, open_ = _phase_expectations(records)
    done = finalized(records)
    session_time = sum(r["total_s"] for r in done)
    rows = {r["phase"]: r for r in view["overall"]["rows"]}
    assert set(durations) == {"generate", "toolcall", "reward"}  # what the workload records
    assert set(rows) == set(durations) | {"(unattributed)"}
    for name, values in durations.items():
        row = rows[name]
        check_stats(row, values)
        assert row["open"] == open_[name]
        assert row["share"] == approx(sum(values) / session_time)
        assert row["sessions"] == sum(1 for r in done if completed(r, name))
        assert row["avg_share"] == approx(np.mean([sum(e - s for s, e in completed(r, name)) / r["total_s"]
                                                   for r in done]))
        # The records' own <phase>_s fields are the same sums.
        assert row["total_s"] == approx(sum(r.get(f"{name}_s", 0.0) for r in records), abs=1e-5)
    assert open_["reward"] == 2  # the failed sessions (one per rank) left a reward open
    unattributed = [max(0.0, r["total_s"] - union(completed(r))) for r in done]
    check_stats(rows["(unattributed)"], unattributed)
    check_stats(view["overall"]["session"], [r["total_s"] for r in done])


def test_phase_breakdown_per_step(run, data):
    records = raw_records(run)
    steps = session_steps(run)
    view = report.phase_breakdown(data)
    assert [g["step"] for g in view["by_step"]] == list(range(report_workload.STEPS))
    for group in view["by_step"]:
        mine = [r for r in records if steps[r["span_id"]] == group["step"]]
        durations, _ = _phase_expectations(mine)
        rows = {r["phase"]: r for r in group["rows"]}
        assert "generate" in durations and "reward" in durations
        for name, values in durations.items():
            check_stats(rows[name], values)
            assert rows[name]["share"] == approx(sum(values) / sum(r["total_s"] for r in finalized(mine)))
        assert group["sessions"] == len(finalized(mine))


def test_span_breakdown_has_self_times_from_nesting(run, data):
    events = [e for e in raw_events(run) if e["ph"] == "X"]
    view = report.span_breakdown(data)
    rows = {r["name"]: r for r in view["overall"]}
    assert not {"session", "task", "generate", "reward"} & set(rows)  # the phase breakdown has those
    by_id = {e["args"]["id"]: e for e in events}
    child_time = defaultdict(float)
    for e in events:
        parent = e["args"].get("parent")
        if parent in by_id:
            child_time[parent] += e["dur"] / 1e6
    for name in ("step", "train", "rollout.batch", "backward", "compute_loss"):
        mine = [e for e in events if e["name"] == name]
        check_stats(rows[name], [e["dur"] / 1e6 for e in mine])
        assert rows[name]["self_s"] == approx(sum(max(0.0, e["dur"] / 1e6 - child_time[e["args"]["id"]])
                                                  for e in mine))
    assert sum(r["share"] for r in view["overall"]) == approx(1.0)
    assert [g["step"] for g in view["by_step"]] == list(range(report_workload.STEPS))


# --- timelines --------------------------------------------------------------------------------------
def test_timeline_is_relative_to_submission_and_shows_open_phases(run, data):
    rec = next(r for r in raw_records(run) if r["status"] == "failed")
    key = f"{rec['_worker']}:{rec['task_id']}:{rec['session_id']}"
    view = report.timeline(data, sessions=[key])
    (tl,) = view["sessions"]
    assert (tl["worker"], tl["task_id"], tl["session_id"], tl["status"]) == (
        rec["_worker"], rec["task_id"], rec["session_id"], "failed")
    assert tl["total_ms"] == approx(rec["total_s"] * 1e3)
    phases = [e for e in tl["events"] if e["event"] == "phase"]
    expected = sorted((i["start_ts"], name, i["end_ts"]) for name, insts in rec["phases"].items() for i in insts)
    assert len(phases) == len(expected)
    for event, (start, name, end) in zip(phases, expected):
        assert event["phase"] == name
        assert event["t_rel_ms"] == approx((start - rec["submit_ts"]) * 1e3)
        if end is None:
            assert event["open"] is True and event["duration_ms"] is None
        else:
            assert event["duration_ms"] == approx((end - start) * 1e3)
    assert [e["turn"] for e in phases if e["phase"] == "generate"] == list(
        range(1, len(rec["phases"]["generate"]) + 1))
    assert tl["events"][0] == {"t_rel_ms": 0.0, "event": "submit"}
    # Finalized, then consumed by the trainer's step (the workload consumes after the rollout).
    final, consumed = tl["events"][-2:]
    assert final["event"] == "finalized" and final["reason"] == "engine_error"
    assert final["t_rel_ms"] == approx((rec["finalized_ts"] - rec["submit_ts"]) * 1e3)
    assert (consumed["event"], consumed["step"], tl["consumed_step"]) == ("consumed", rec["step"], rec["step"])


def test_timelines_default_to_all_or_the_slowest(data):
    assert report.timeline(data)["selected"] == "all"
    view = report.timeline(data, limit=5)
    assert view["selected"] == "slowest"
    slowest = sorted((s.total for s in data.sessions if s.total is not None), reverse=True)[:5]
    assert [t["total_ms"] for t in view["sessions"]] == approx([t * 1e3 for t in slowest])


# --- timer trees --------------------------------------------------------------------------------------
def _expected_tree(events):
    """(path -> [total, count]) from each line's parent, per the raw trace lines."""
    by_id = {e["args"]["id"]: e for e in events}

    def path(e):
        parent = by_id.get(e["args"].get("parent"))
        return (path(parent) if parent else ()) + (e["name"],)

    nodes = defaultdict(lambda: [0.0, 0])
    for e in events:
        if e["dur"] == 0 and "rl.gauge.value" in e["args"]:
            continue
        node = nodes[path(e)]
        node[0] += e["dur"] / 1e6
        node[1] += 1
    return nodes


def _walk(tree, prefix=()):
    for name, child in (tree.get("children") or {}).items():
        yield prefix + (name,), child
        yield from _walk(child, prefix + (name,))


def test_timer_tree_per_worker_follows_span_nesting_in_ml_agents_format(run, data):
    events = [e for e in raw_events(run) if e["ph"] == "X"]
    trees = report.timer_trees(data)
    assert set(trees["workers"]) == {"rollout-r0", "rollout-r1"}
    for worker, tree in trees["workers"].items():
        mine = [e for e in events if e["_worker"] == worker]
        expected = _expected_tree(mine)
        got = dict(_walk(tree))
        assert expected and set(got) == set(expected)
        for path, (total, count) in expected.items():
            assert got[path]["total"] == approx(total, rel=1e-6)
            assert got[path]["count"] == count
            kids = sum(c["total"] for c in (got[path].get("children") or {}).values())
            assert got[path]["self"] == approx(max(0.0, got[path]["total"] - kids), abs=1e-9)
        assert tree["name"] == "root" and tree["count"] == 1
        wall = max(e["ts"] + e["dur"] for e in mine) / 1e6 - min(e["ts"] for e in mine) / 1e6
        assert tree["total"] == approx(wall, abs=1e-6)  # epoch seconds: about 0.2 µs apart
        assert tree["metadata"]["timer_format_version"] == "0.1.0"
        assert tree["metadata"]["worker"] == worker
        # Sessions overlapped (asyncio); the ML-Agents @timed function ran one call at a time.
        assert got[("task", "session")].get("is_parallel") is True
        compute = next(p for p in got if p[-1].endswith("compute_loss"))
        assert "is_parallel" not in got[compute]
        assert compute == ("step", "train", "compute_loss")
        assert got[compute + ("backward",)]["count"] == 2 * report_workload.STEPS
        gauges = [e["args"]["rl.gauge.value"] for e in raw_events(run)
                  if e["_worker"] == worker and e["ph"] == "i" and e["name"] == "loss"]
        assert tree["gauges"]["loss"] == {"value": gauges[-1], "min": min(gauges), "max": max(gauges),
                                          "count": len(gauges)}


def test_merged_timer_tree_sums_workers_and_marks_them_parallel(data):
    trees = report.timer_trees(data)
    merged = dict(_walk(trees["merged"]))
    per_worker = [dict(_walk(t)) for t in trees["workers"].values()]
    assert merged and len(per_worker) == 2
    for path, node in merged.items():
        present = [w[path] for w in per_worker if path in w]
        assert node["total"] == approx(sum(n["total"] for n in present))
        assert node["count"] == sum(n["count"] for n in present)
        if len(present) > 1:
            assert node["is_parallel"] is True
    assert trees["merged"]["gauges"]["loss"]["count"] == sum(t["gauges"]["loss"]["count"]
                                                             for t in trees["workers"].values())


def test_ml_agents_names_match_their_signatures_and_build_a_tree_in_process(tmp_path):
    assert otel_rl.timed is otel_rl.timers.timed
    assert list(inspect.signature(otel_rl.timed).parameters) == ["func"]
    params = inspect.signature(otel_rl.hierarchical_timer).parameters
    assert list(params) == ["name", "timer_stack"] and params["timer_stack"].default is None
    assert list(inspect.signature(otel_rl.set_gauge).parameters) == ["name", "value", "timer_stack"]
    otel_rl.configure(fileroot=str(tmp_path), rank=3, export_process=False)

    @otel_rl.timed
    def work():
        with otel_rl.hierarchical_timer("inner"):
            time.sleep(0.001)

    for _ in range(3):
        work()
    otel_rl.set_gauge("reward", 1.5)
    otel_rl.set_gauge("reward", float("nan"))  # ignored, as in ML-Agents
    otel_rl.set_gauge("reward", 0.5)
    tree = otel_rl.timers.get_timer_tree()
    node = tree["children"][work.__qualname__]
    assert node["count"] == 3 and node["children"]["inner"]["count"] == 3
    assert node["total"] >= node["children"]["inner"]["total"] >= 0.003
    assert tree["gauges"]["reward"] == {"value": 0.5, "min": 0.5, "max": 1.5, "count": 2}


# --- long tail ----------------------------------------------------------------------------------------
def test_long_tail_per_step_matches_completion_times(run, data):
    records = finalized(raw_records(run))
    steps = session_steps(run)
    view = report.long_tail(data, threshold=1.5)
    assert [s["step"] for s in view["steps"]] == list(range(report_workload.STEPS))
    expected_stragglers = set()
    for sv in view["steps"]:
        mine = [r for r in records if steps[r["span_id"]] == sv["step"]]
        t0 = min(r["submit_ts"] for r in mine)
        done = sorted(r["finalized_ts"] - t0 for r in mine)
        span = done[-1]
        assert sv["sessions"] == len(mine) and sv["span_s"] == approx(span)
        for q in (50, 80, 90, 95, 99, 99.9):
            assert sv["completion_s"][f"p{q:g}"] == approx(np.percentile(done, q))
            assert sv["completion_fraction"][f"p{q:g}"] == approx(np.percentile(done, q) / span)
        for f in sv["finished_by_fraction"]:
            assert f["share"] == approx(sum(1 for d in done if d <= f["fraction"] * span + 1e-12) / len(done))
        assert sv["tail_share"] == approx((span - np.percentile(done, 80)) / span)
        last = {w: max(r["finalized_ts"] - t0 for r in mine if r["_worker"] == w) for w in ("rollout-r0", "rollout-r1")}
        for w in sv["workers"]:
            other = last["rollout-r1" if w["worker"] == "rollout-r0" else "rollout-r0"]
            assert w["last_finish_s"] == approx(last[w["worker"]])
            assert w["ratio"] == approx(last[w["worker"]] / other)
            if last[w["worker"]] / other > 1.5:
                expected_stragglers.add(("worker", sv["step"], w["worker"]))
        assert sv["slowest_worker"]["worker"] == max(last, key=last.get)
    spans = {sv["step"]: sv["span_s"] for sv in view["steps"]}
    for step, span in spans.items():
        if span / np.median([v for k, v in spans.items() if k != step]) > 1.5:
            expected_stragglers.add(("step", step, None))
    assert {(s["kind"], s["step"], s["worker"]) for s in view["stragglers"]} == expected_stragglers
    # The workload's straggler (rank 1's slow generation in SLOW_STEP) is among them.
    assert ("worker", report_workload.SLOW_STEP, "rollout-r1") in expected_stragglers


def test_outliers_turns_and_response_lengths(run, data):
    records = finalized(raw_records(run))
    view = report.long_tail(data, outliers=4)
    slowest = sorted(records, key=lambda r: -r["total_s"])[:4]
    assert [(o["worker"], o["task_id"], o["session_id"]) for o in view["outliers"]] == [
        (r["_worker"], r["task_id"], r["session_id"]) for r in slowest]
    median = np.percentile([r["total_s"] for r in records], 50)
    for o, r in zip(view["outliers"], slowest):
        assert o["x_median"] == approx(r["total_s"] / median)
        assert "generate" in o["phases_s"]  # every session of the workload generates
        for name in o["phases_s"]:
            assert o["phases_s"][name] == approx(sum(e - s for s, e in completed(r, name)))
        assert o["unattributed_s"] == approx(max(0.0, r["total_s"] - union(completed(r))))
    # verl's turn analysis: turns are the generate instances.
    turns = view["turns"]
    counts = Counter(len(completed(r, "generate")) for r in records)
    assert {d["turns"]: d["sessions"] for d in turns["count_distribution"]} == dict(counts)
    per_turn = defaultdict(list)
    for r in records:
        for i, (s, e) in enumerate(sorted(completed(r, "generate")), 1):
            per_turn[i].append(e - s)
    assert [row["turn"] for row in turns["by_turn"]] == sorted(per_turn)
    for row in turns["by_turn"]:
        check_stats(row, per_turn[row["turn"]])
    for row in turns["by_turn_count"]:
        check_stats(row, [r["total_s"] for r in records if len(completed(r, "generate")) == row["turns"]])
    tokens = [r["counters"]["output_tokens"] for r in records]
    rl = view["response_length"]
    assert rl["sessions"] == len(tokens)
    assert rl["avg_tokens"] == approx(np.mean(tokens))
    assert rl["p95_tokens"] == approx(np.percentile(tokens, 95))
    assert sum(rl["histogram"]["counts"]) == len(tokens)
    assert rl["correlation_with_duration"] == approx(np.corrcoef(tokens, [r["total_s"] for r in records])[0, 1])


# --- lifecycle ----------------------------------------------------------------------------------------
def test_lifecycle_idle_time_concurrency_and_histograms(run, data):
    records = finalized(raw_records(run))
    view = report.lifecycle(data, bins=10)
    assert [w["worker"] for w in view["workers"]] == ["rollout-r0", "rollout-r1"]
    for w in view["workers"]:
        mine = [(r["submit_ts"], r["finalized_ts"]) for r in records if r["_worker"] == w["worker"]]
        window = max(e for _, e in mine) - min(s for s, _ in mine)
        busy = union(mine)
        assert w["sessions"] == len(mine)
        assert w["window_s"] == approx(window) and w["busy_s"] == approx(busy)
        assert w["idle_s"] == approx(window - busy)
        points = sorted([(s, 1) for s, _ in mine] + [(e, -1) for _, e in mine])
        assert w["max_concurrency"] == max(np.cumsum([d for _, d in points]))
        assert w["avg_concurrency"] == approx(sum(e - s for s, e in mine) / window)
    hist = view["histogram"]
    assert sum(hist["counts"]) == len(records)
    assert {k: sum(v) for k, v in hist["by_status"].items()} == dict(Counter(r["status"] for r in records))
    edges = hist["edges"]
    assert edges[0] == 0.0 and edges[-1] == approx(max(r["total_s"] for r in records))
    # The view computes a session's total from its timestamps, which can differ from the
    # record's total_s in the last bit; values past the last edge count in the last bin.
    totals = np.clip([r["total_s"] for r in records], edges[0], edges[-1])
    assert hist["counts"] == list(np.histogram(totals, bins=edges)[0])
    assert sum(sum(s["counts"]) for s in view["histogram_by_step"]) == len(records)
    assert view["status_counts"] == dict(sorted(Counter(r["status"] for r in raw_records(run)).items()))
    assert view["scatter"]["p95_s"] == approx(np.percentile([r["total_s"] for r in records], 95))
    gantt = view["gantt"]
    assert gantt["shown"] == len(records) and not gantt["truncated"]
    for worker in ("rollout-r0", "rollout-r1"):
        lanes = defaultdict(list)
        for s in gantt["sessions"]:
            if s["worker"] == worker:
                lanes[s["lane"]].append((s["start_s"], s["end_s"]))
        assert lanes
        for intervals in lanes.values():  # sessions in one lane never overlap
            intervals.sort()
            assert all(a[1] <= b[0] for a, b in zip(intervals, intervals[1:]))


# --- filters ------------------------------------------------------------------------------------------
def test_step_and_rank_filters(run):
    steps = session_steps(run)
    records = raw_records(run)
    one = report.load(run, steps="1")
    assert {s.step for s in one.sessions} == {1}
    assert len(one.sessions) == sum(1 for r in records if steps[r["span_id"]] == 1)
    assert one.spans and all(s.args.get("rl.step") == 1 for s in one.spans)
    by_label = report.load(run, ranks="rollout-r1")
    by_rank = report.load(run, ranks=[1])
    assert {s.worker for s in by_label.sessions} == {s.worker for s in by_rank.sessions} == {"rollout-r1"}
    assert len(by_rank.sessions) == sum(1 for r in records if r["_worker"] == "rollout-r1")
    assert {s.worker for s in by_rank.spans} == {"rollout-r1"}
    assert report.load(run, steps="0-1", ranks=0).steps == frozenset({0, 1})
    with pytest.raises(ValueError, match="not a step"):
        report.load(run, steps="two")


def test_build_has_every_view_and_is_json_ready(data):
    doc = report.build(data)
    assert set(report.VIEWS) <= set(doc)
    assert orjson.loads(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS))["summary"]["sessions"] == len(data.sessions)
    with pytest.raises(ValueError, match="unknown view"):
        report.build(data, ["nope"])


# --- sglang-omni request events ---------------------------------------------------------------------
MS = 1_000_000
T0 = 1_717_000_000_000_000_000


def _event(rid, stage, name, t_ms, pid, **md):
    return {"request_id": rid, "stage": stage, "event_name": name, "timestamp_ns": T0 + int(t_ms * MS),
            "run_id": "demo", "pid": pid, "metadata": md}


def _write_jsonl(path, items):
    with open(path, "w") as f:
        for item in items:
            f.write(json.dumps(item) + "\n")


def test_stage_pairing_and_hops_follow_sglang_omni_rules(tmp_path):
    # Two processes: the thinker (pid 1) and the talker (pid 2); events out of time order on disk.
    thinker = [
        _event("a", "coordinator", "request_admission", 0, 9),
        _event("a", "thinker", "stage_input_received", 1, 1, from_stage="coordinator"),
        _event("a", "thinker", "scheduler_prefill_start", 10, 1),
        _event("a", "thinker", "scheduler_first_emit", 25, 1),
        _event("a", "thinker", "stage_first_stream_chunk_sent", 30, 1),  # the same opener, a second pair
        _event("a", "thinker", "stage_hop_sent", 40, 1, to_stage="talker"),
        _event("a", "thinker", "stage_stream_chunk_sent", 41, 1, to_stage="talker", chunk_id=1),
        _event("a", "thinker", "stage_stream_chunk_sent", 42, 1, to_stage="talker", chunk_id=0),
        _event("a", "thinker", "stage_complete", 45, 1),
        _event("b", "thinker", "scheduler_prefill_start", 5, 1),
        _event("b", "thinker", "scheduler_prefill_start", 6, 1),   # two openers, one closer: FIFO
        _event("b", "thinker", "scheduler_first_emit", 20, 1),
        _event("b", "thinker", "encoder_start", 2, 1),             # never ends: open
        _event("b", "thinker", "stage_hop_sent", 30, 1, to_stage="talker"),  # never received
    ]
    talker = [
        _event("a", "talker", "stage_stream_chunk_received", 47, 2, from_stage="thinker", chunk_id=0),
        _event("a", "talker", "stage_input_received", 43, 2, from_stage="thinker"),
        _event("a", "talker", "stage_stream_chunk_received", 50, 2, from_stage="thinker", chunk_id=1),
        _event("a", "talker", "stage_complete", 60, 2),
        _event("a", "coordinator", "terminal_response", 61, 9),
    ]
    _write_jsonl(tmp_path / "events_thinker_1.jsonl", thinker)
    _write_jsonl(tmp_path / "events_talker_2.jsonl", talker)
    data = report.load(str(tmp_path))
    assert len(data.requests) == 2 and sum(map(len, data.requests.values())) == len(thinker) + len(talker)

    def t(rid, name, stage, nth=0):
        ev = [e for e in thinker + talker if (e["request_id"], e["event_name"], e["stage"]) == (rid, name, stage)]
        return ev[nth]["timestamp_ns"]

    rows = {(r["stage"], r["interval"]): r for r in report.stage_breakdown(data)["rows"]}
    prefill_emit = [(t("a", "scheduler_first_emit", "thinker") - t("a", "scheduler_prefill_start", "thinker")) / MS,
                    (t("b", "scheduler_first_emit", "thinker") - t("b", "scheduler_prefill_start", "thinker", 0)) / MS]
    check_stats(rows[("thinker", "scheduler_prefill_start->scheduler_first_emit")], prefill_emit, "ms")
    assert rows[("thinker", "scheduler_prefill_start->scheduler_first_emit")]["open"] == 1  # b's second opener
    ttfc = (t("a", "stage_first_stream_chunk_sent", "thinker") - t("a", "scheduler_prefill_start", "thinker")) / MS
    check_stats(rows[("thinker", "scheduler_prefill_start->stage_first_stream_chunk_sent")], [ttfc], "ms")
    for stage in ("thinker", "talker"):
        check_stats(rows[(stage, "stage_input_received->stage_complete")],
                    [(t("a", "stage_complete", stage) - t("a", "stage_input_received", stage)) / MS], "ms")
    assert rows[("thinker", "encoder_start->encoder_end")]["count"] == 0
    assert rows[("thinker", "encoder_start->encoder_end")]["open"] == 1
    assert {k[1] for k in rows} <= {f"{o}->{c}" for o, c in STAGE_INTERVALS}
    hops = {(r["src"], r["dst"], r["kind"]): r for r in report.hop_breakdown(data)["rows"]}
    check_stats(hops[("thinker", "talker", "payload")],
                [(t("a", "stage_input_received", "talker") - t("a", "stage_hop_sent", "thinker")) / MS], "ms")
    assert hops[("thinker", "talker", "payload")]["unmatched"] == 1  # b's hop never arrived
    chunks = [(t("a", "stage_stream_chunk_received", "talker", i) - t("a", "stage_stream_chunk_sent", "thinker", 1 - i))
              / MS for i in (0, 1)]  # matched by chunk id, not by order
    check_stats(hops[("thinker", "talker", "stream_chunk")], chunks, "ms")
    assert not any(k[0] == "coordinator" for k in hops)  # submissions from the coordinator are not hops
    view = report.timeline(data)
    a = next(r for r in view["requests"] if r["request_id"] == "a")
    assert a["events"][0]["event_name"] == "request_admission" and a["events"][0]["t_rel_ms"] == 0.0
    assert [e["t_rel_ms"] for e in a["events"]] == sorted((e["timestamp_ns"] - T0) / MS for e in thinker + talker
                                                         if e["request_id"] == "a")
    assert a["total_ms"] == 61.0


# --- AReaL session records ---------------------------------------------------------------------------
AREAL_RECORD = {  # the example record of AReaL's documentation, as is
    "task_id": 23, "session_id": 93, "rank": 0, "status": "accepted",
    "submit_ts": 7939251.674969524, "finalized_ts": 7939254.632833603, "total_s": 2.957864078693092,
    "generate_s": 2.65427936706692, "reward_s": 0.133724981918931, "toolcall_s": 0.156789012345678,
    "phases": {"generate": [{"start_ts": 7939251.674977085, "end_ts": 7939254.329256452}],
               "reward": [{"start_ts": 7939254.32926108, "end_ts": 7939254.462986062}],
               "toolcall": [{"start_ts": 7939254.463123456, "end_ts": 7939254.619912468}]},
}


def test_areal_session_records_load_as_is(tmp_path):
    interrupted = dict(AREAL_RECORD, session_id=94, rank=1, status="failed",
                       phases={"generate": [{"start_ts": 7939251.7, "end_ts": None}]})
    pending = dict(AREAL_RECORD, session_id=95, status="pending", finalized_ts=None, total_s=None, phases={})
    _write_jsonl(tmp_path / "sessions-r0.jsonl", [AREAL_RECORD, pending])
    _write_jsonl(tmp_path / "sessions-r1.jsonl", [interrupted])
    data = report.load(str(tmp_path))
    assert sorted(s.worker for s in data.sessions) == ["r0", "r0", "r1"]
    assert data.diagnostics.malformed_count == 0
    rows = {r["phase"]: r for r in report.phase_breakdown(data)["overall"]["rows"]}
    for name in ("generate", "reward", "toolcall"):
        (inst,) = AREAL_RECORD["phases"][name]
        assert rows[name]["total_s"] == approx(inst["end_ts"] - inst["start_ts"])
    assert rows["generate"]["open"] == 1
    life = report.lifecycle(data)
    assert life["open_sessions"]["count"] == 1 and life["open_sessions"]["examples"][0]["session_id"] == 95
    assert life["status_counts"] == {"accepted": 1, "failed": 1, "pending": 1}
    tail = report.long_tail(data)
    assert [s["step"] for s in tail["steps"]] == [None]  # no steps in AReaL records: one group
    assert tail["turns"]["count_distribution"] == [{"turns": 0, "sessions": 1, "share": 0.5},
                                                   {"turns": 1, "sessions": 1, "share": 0.5}]


# --- OTLP/JSON from a collector ----------------------------------------------------------------------
def test_otlp_json_from_a_collector_gives_the_same_sessions_as_the_records(tmp_path, traced):
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    with otel_rl.step_scope(4):
        otel_rl.set_task_id(otel_rl.register_task())
        for n in range(3):
            otel_rl.set_session_id(otel_rl.register_session())
            for _ in range(n + 1):
                with otel_rl.trace_session_phase("generate"):
                    time.sleep(0.002)
            with otel_rl.trace_session_phase("reward"):
                time.sleep(0.001)
            otel_rl.trace_session_event("mark_finalized", status="accepted" if n else "rejected")
    otel_rl.save(force=True)
    spans = traced.exporter.get_finished_spans()
    otlp = tmp_path / "otel-data"
    otlp.mkdir()
    with open(otlp / "traces.jsonl", "w") as f:  # the collector's file exporter: one request a line
        for i in range(0, len(spans), 4):
            f.write(json.dumps(MessageToDict(encode_spans(spans[i:i + 4]))) + "\n")
    from_otlp = report.load(str(otlp))
    from_records = report.load(glob.glob(os.path.join(traced.run_dir, "sessions-*.jsonl")))
    assert len(from_otlp.sessions) == len(from_records.sessions) == 3
    assert {s.step for s in from_otlp.sessions} == {4}
    a = {r["phase"]: r for r in report.phase_breakdown(from_otlp)["overall"]["rows"]}
    b = {r["phase"]: r for r in report.phase_breakdown(from_records)["overall"]["rows"]}
    assert set(a) == set(b) == {"generate", "reward", "(unattributed)"}
    for name in a:
        assert a[name]["count"] == b[name]["count"]
        assert a[name]["total_s"] == approx(b[name]["total_s"], abs=1e-5)
    assert sorted(s.status for s in from_otlp.sessions) == ["accepted", "accepted", "rejected"]


# --- clock skew -------------------------------------------------------------------------------------
def test_a_worker_whose_children_start_before_their_parents_is_shifted(tmp_path):
    def span(name, ts_ms, dur_ms, pid, span_id, parent=None):
        args = {"trace_id": "ab" * 16, "span_id": span_id}
        if parent:
            args["parent_span_id"] = parent
        return {"ph": "X", "name": name, "ts": 1.7e15 + ts_ms * 1e3, "dur": dur_ms * 1e3, "pid": pid, "tid": 1,
                "args": args}

    # The server's clock is behind: its spans start 20 ms before the client's requests.
    _write_jsonl(tmp_path / "traces-client-r0.jsonl",
                 [span("generate", 100, 100, 10, "1" * 16), span("generate", 300, 100, 10, "2" * 16),
                  span("other", 0, 1, 10, "5" * 16)])
    _write_jsonl(tmp_path / "traces-server-r1.jsonl",
                 [span("handle", 80, 50, 20, "3" * 16, "1" * 16), span("handle", 290, 50, 20, "4" * 16, "2" * 16)])
    data = report.load(str(tmp_path))
    (offset,) = data.diagnostics.clock_offsets
    assert offset["worker"] == "server-r1" and offset["relative_to"] == "client-r0"
    assert offset["offset_s"] == approx(-0.020) and offset["applied"] and offset["violations"] == 2
    spans = {s.span_id: s for s in data.spans}
    assert spans["3" * 16].start == approx(spans["1" * 16].start)  # the smallest shift restoring causality
    assert spans["4" * 16].start - spans["2" * 16].start == approx(0.010)
    assert any("behind" in m for m in data.diagnostics.messages())
    hops = {(r["src"], r["dst"], r["kind"]): r for r in report.hop_breakdown(data)["rows"]}
    assert hops[("client-r0", "server-r1", "call")]["count"] == 2
    untouched = report.load(str(tmp_path), align_clocks=False)
    assert not untouched.diagnostics.clock_offsets[0]["applied"]
    assert {s.span_id: s for s in untouched.spans}["3" * 16].start == approx(1.7e9 + 0.080)


# --- bad input --------------------------------------------------------------------------------------
def test_bad_lines_are_reported_with_file_and_line_and_the_rest_is_used(tmp_path):
    path = tmp_path / "sessions-r0.jsonl"
    good = dict(AREAL_RECORD)
    lines = [json.dumps(good), "{not json", json.dumps(dict(good, session_id=2, submit_ts="yesterday")),
             json.dumps([1, 2]), json.dumps(dict(good, session_id=3)), '{"task_id": 1, "session_id": 4, "sub']
    path.write_text("\n".join(lines))  # the last line has no newline: a writer died mid-line
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "notes.json").write_text('{"hello": "world"}')
    data = report.load([str(tmp_path), str(tmp_path / "nowhere"), str(tmp_path / "*.nothing")])
    assert sorted(s.session_id for s in data.sessions) == [3, 93]
    d = data.diagnostics
    assert [(os.path.basename(p), n) for p, n, _ in d.malformed] == [
        ("sessions-r0.jsonl", 2), ("sessions-r0.jsonl", 3), ("sessions-r0.jsonl", 4)]
    assert "submit_ts is not a number" in d.malformed[1][2]
    assert d.truncated == [f"{path}:6"]
    assert d.missing == [str(tmp_path / "nowhere"), str(tmp_path / "*.nothing")]
    ignored = {os.path.basename(p): why for p, why in d.ignored}
    assert ignored["empty.jsonl"] == "empty" and "neither" in ignored["notes.json"]
    text = "\n".join(d.messages())
    assert f"{path}:2: malformed line skipped" in text and f"{path}:6: incomplete last line" in text
    assert "nowhere: no such file" in text
    doc = report.build(data)  # a partial report from what was readable
    assert doc["summary"]["sessions"] == 2
    assert doc["diagnostics"]["malformed_count"] == 3


def test_chrome_begin_end_pairs_nest_by_time_and_unclosed_ones_are_reported(tmp_path):
    events = [{"ph": "B", "name": "outer", "ts": 0, "pid": 1, "tid": 1},
              {"ph": "B", "name": "inner", "ts": 10, "pid": 1, "tid": 1},
              {"ph": "E", "ts": 30, "pid": 1, "tid": 1},
              {"ph": "E", "ts": 100, "pid": 1, "tid": 1},
              {"ph": "X", "name": "inner", "ts": 40, "dur": 20, "pid": 1, "tid": 1},
              {"ph": "B", "name": "never_ends", "ts": 200, "pid": 1, "tid": 1}]
    path = tmp_path / "areal-trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    data = report.load(str(path))
    assert data.diagnostics.open_spans == 1
    tree = report.timer_tree(data)
    outer = tree["children"]["outer"]
    assert outer["total"] == approx(100e-6) and outer["count"] == 1
    assert outer["children"]["inner"]["count"] == 2 and outer["children"]["inner"]["total"] == approx(40e-6)
    assert outer["self"] == approx(60e-6)


# --- hostile input: field types, line length, decompressed size -------------------------------------
def _otlp_line(name="op", attrs=(), resource=()):
    def kv(key, value):
        return {"key": key, "value": value}

    span = {"traceId": "1" * 32, "spanId": "2" * 16, "name": name, "kind": 1,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
            "attributes": [kv(k, v) for k, v in attrs]}
    return {"resourceSpans": [{"resource": {"attributes": [kv(keys.RANK, {"intValue": "0"})]
                                            + [kv(k, v) for k, v in resource]},
                               "scopeSpans": [{"scope": {"name": "t"}, "spans": [span]}]}]}


_CHROME = {"ph": "X", "name": "op", "ts": 1.7e15, "dur": 5.0, "pid": 1, "tid": 1, "args": {}}
_REQUEST = {"request_id": "r", "stage": "s", "event_name": "e", "timestamp_ns": 1_700_000_000_000_000_000,
            "run_id": "x", "pid": 1, "metadata": {}}
WRONG_TYPES = [  # (file, good line, the same line with one field of the wrong JSON type, the field)
    ("sessions-r0.jsonl", AREAL_RECORD, dict(AREAL_RECORD, task_id={"a": 1}), "task_id"),
    ("sessions-r0.jsonl", AREAL_RECORD, dict(AREAL_RECORD, session_id=[1]), "session_id"),
    ("sessions-r0.jsonl", AREAL_RECORD, dict(AREAL_RECORD, span_id={"a": 1}), "span_id"),
    ("sessions-r0.jsonl", AREAL_RECORD, dict(AREAL_RECORD, trace_id=[1]), "trace_id"),
    ("sessions-r0.jsonl", AREAL_RECORD, dict(AREAL_RECORD, rank=0, role={"r": 1}), "role"),
    ("sessions-r0.jsonl", AREAL_RECORD, dict(AREAL_RECORD, submit_ts=1e300), "submit_ts"),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, pid={"p": 1}), "pid"),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, ph="B", tid=[1]), "tid"),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, ts=1e300), "ts"),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, args={"span_id": {"a": 1}}), "span_id"),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, args={"parent_span_id": [1]}), "parent_span_id"),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, args={"id": {"a": 1}}), "id"),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, args={"parent": [1]}), "parent"),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, args={keys.STEP: {"s": 1}}), keys.STEP),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, args={keys.TASK_ID: [1], keys.SPAN_KIND: "session"}),
     keys.TASK_ID),
    ("traces-r0.jsonl", _CHROME, dict(_CHROME, ph="i", args={keys.REQUEST_ID: {"r": 1}}), keys.REQUEST_ID),
    ("events_s_1.jsonl", _REQUEST, dict(_REQUEST, request_id={"r": 1}), "request_id"),
    ("events_s_1.jsonl", _REQUEST, dict(_REQUEST, pid=[1]), "pid"),
    ("otlp.jsonl", _otlp_line(), _otlp_line(name={"n": 1}), "name"),
    ("otlp.jsonl", _otlp_line(), _otlp_line(attrs=[(keys.SESSION_ID, {"kvlistValue": {"values": []}})]),
     keys.SESSION_ID),
    ("otlp.jsonl", _otlp_line(), _otlp_line(resource=[(keys.ROLE, {"arrayValue": {"values": []}})]),
     keys.ROLE),
]


@pytest.mark.parametrize("name, good, bad, field", WRONG_TYPES,
                         ids=[f"{n.split('-')[0].split('_')[0]}-{f}" for n, _, b, f in WRONG_TYPES])
def test_a_field_of_the_wrong_json_type_skips_its_line_with_file_line_and_field(tmp_path, name, good, bad,
                                                                                field):
    path = tmp_path / name
    _write_jsonl(path, [good, bad, good])

    data = report.load(str(path))

    (where,) = data.diagnostics.malformed
    assert where[:2] == (str(path), 2) and field in where[2], where
    assert len(data.sessions) + len(data.spans) + len(data.requests) + len(data.instants) >= 1
    doc = report.build(data)  # every view over what was read, nothing raised
    from rich.console import Console

    report.render_table(doc, Console(file=io.StringIO(), width=160))
    orjson.loads(report_cli._dump_json(doc))


def test_a_line_longer_than_the_bound_is_reported_and_the_rest_is_read(tmp_path):
    path = tmp_path / "sessions-r0.jsonl"
    long_record = dict(AREAL_RECORD, session_id=2, reason="x" * (2 << 20))
    _write_jsonl(path, [AREAL_RECORD, long_record, dict(AREAL_RECORD, session_id=3)])

    data = report.load(str(path), limits=InputLimits(max_line_bytes=1 << 20))

    assert sorted(s.session_id for s in data.sessions) == [3, 93]
    ((where, line, message),) = data.diagnostics.malformed
    assert (where, line) == (str(path), 2)
    assert message == f"line of {len(json.dumps(long_record)):,} bytes, over the bound of 1 MiB (--max-line-mb)"
    assert len(report.load(str(path), limits=InputLimits(max_line_bytes=4 << 20)).sessions) == 3


def test_a_gzip_input_is_read_only_up_to_its_decompression_bound(tmp_path):
    path = tmp_path / "sessions-r0.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for i in range(5_000):
            f.write(json.dumps(dict(AREAL_RECORD, session_id=i)) + "\n")

    data = report.load(str(path), limits=InputLimits(max_gzip_ratio=10, min_gzip_bytes=1024))

    assert 0 < len(data.sessions) < 5_000
    assert data.diagnostics.malformed_count == 0 and data.diagnostics.truncated == []
    (warning,) = data.diagnostics.warnings
    assert warning.startswith(f"{path}: read only in part: stopped after ")
    assert "more than 10 times its compressed size (--max-gzip-ratio)" in warning
    whole = report.load(str(path), limits=InputLimits(max_gzip_ratio=0))
    assert len(whole.sessions) == 5_000 and whole.diagnostics.warnings == []


def test_a_shared_opener_is_not_open_in_a_pair_its_stage_never_closes(tmp_path):
    # An engine that does not stream: prefill start is closed by the first emit, and no
    # first stream chunk ever comes, so no request is open in that pair.
    events = [_event(rid, "engine", name, t, 1) for rid in ("a", "b") for name, t in (
        ("scheduler_prefill_start", 1), ("scheduler_first_emit", 5))]
    _write_jsonl(tmp_path / "events_engine_1.jsonl", events)
    rows = {r["interval"]: r for r in report.stage_breakdown(report.load(str(tmp_path)))["rows"]}
    assert set(rows) == {"scheduler_prefill_start->scheduler_first_emit"}
    assert (rows["scheduler_prefill_start->scheduler_first_emit"]["count"],
            rows["scheduler_prefill_start->scheduler_first_emit"]["open"]) == (2, 0)


def test_the_training_view_puts_each_steps_stats_side_by_side(tmp_path):
    lines = [{"time": 1.0, "step": s, "tracker": t, "rank": 0, "values": v} for s, t, v in (
        (0, "", {"loss": 0.5, "loss__count": 4}), (0, "rollout", {"rollout/reward": 0.25, "rollout/accepted": 0.5}),
        (1, "", {"loss": 0.25}), (1, "rollout", {"rollout/reward": 0.75, "rollout/accepted": 1.0}))]
    _write_jsonl(tmp_path / "stats-trainer-r0.jsonl", lines)
    view = report.build(report.load(str(tmp_path)), ["training"])["training"]
    assert view["keys"][:3] == ["rollout/reward", "rollout/accepted", "loss"]
    assert [(r["step"], r["values"]) for r in view["rows"]] == [
        (0, {"rollout/reward": 0.25, "rollout/accepted": 0.5, "loss": 0.5}),
        (1, {"rollout/reward": 0.75, "rollout/accepted": 1.0, "loss": 0.25})]
    assert [r["step"] for r in report.build(report.load(str(tmp_path), steps="1"), ["training"])
            ["training"]["rows"]] == [1]


def test_a_gzip_input_damaged_mid_stream_is_reported_not_raised(tmp_path):
    data = bytearray(gzip.compress("".join(json.dumps(dict(AREAL_RECORD, session_id=i)) + "\n"
                                           for i in range(500)).encode()))
    data[100] ^= 0xFF  # the deflate stream itself, not only its checksum
    path = tmp_path / "sessions-r0.jsonl.gz"
    path.write_bytes(bytes(data))

    data = report.load(str(path))

    ((where, why),) = data.diagnostics.unreadable
    assert where == str(path) and "decompress" in why


def _session_rows(data):
    return [(s.worker, s.task_id, s.session_id, s.status, s.submit, s.finalized, s.total, s.step, s.phases,
             s.counters, s.tokens) for s in data.sessions]


# Worker processes are forked only from a single-threaded process, which a pytest process
# with receivers and exporters behind it is not: the forked load runs in a fresh interpreter.
_LOAD_IN_WORKERS = """
import json, sys
from otel_rl import report
from otel_rl._internal.read import sessions
from otel_rl.convert import InputLimits

pools, fork_pool = [], sessions.fork_pool
sessions.PARALLEL_BYTES = 0
sessions.idle_cpus = lambda: 2
sessions.fork_pool = lambda n: pools.append(fork_pool(n)) or pools[-1]
ranks = sys.argv[2] or None
data = report.load(sys.argv[1], ranks=ranks, limits=InputLimits(max_line_bytes=1000))
rows = [(s.worker, s.task_id, s.session_id, s.status, s.submit, s.finalized, s.total, s.step, s.phases,
         s.counters, s.tokens) for s in data.sessions]
print(json.dumps({"forked": bool(pools and pools[0] is not None), "rows": rows,
                  "diagnostics": data.diagnostics.to_dict(), "workers": data.workers}, default=str))
"""


def _load_in_workers(path, ranks=None):
    if not sys.platform.startswith("linux"):
        pytest.skip("worker processes are only forked on Linux")
    done = run_python(_LOAD_IN_WORKERS, None, str(path), ranks or "", timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["forked"]
    return out


def _as_json(value):
    return json.loads(json.dumps(value, default=str))


@pytest.mark.parametrize("ranks", [None, "1"])
def test_a_large_session_file_read_by_worker_processes_reads_as_read_here(tmp_path, monkeypatch, ranks):
    lines = []
    for i in range(400):
        record = dict(AREAL_RECORD, session_id=i, rank=i % 2, step=i // 40,
                      counters={"output_tokens": i} if i % 3 else {"turns": 2})
        if i % 50 == 7:
            record["submit_ts"] = "yesterday"  # malformed, reported only for a rank that is kept
        if i % 60 == 11:
            record["task_id"] = [1]  # malformed whatever the rank
        lines.append(json.dumps(record))
        if i % 70 == 3:
            lines += ["{not json", "[1, 2]", "", json.dumps(dict(record, reason="x" * 2000))]  # the last one too long
    path = tmp_path / "sessions-rollout-r0.jsonl"
    path.write_text("\n".join(lines + ['{"task_id": 1, "session_id": 4, "sub']))  # a writer died mid-line
    limits = InputLimits(max_line_bytes=1000)  # reads of 1000 bytes: a block of lines each

    here = report.load(str(path), ranks=ranks, limits=limits)
    forked = _load_in_workers(path, ranks)

    assert len(here.sessions) > 100 and here.diagnostics.malformed_count > 10 and here.diagnostics.truncated
    assert forked["rows"] == _as_json(_session_rows(here))
    assert forked["diagnostics"] == _as_json(here.diagnostics.to_dict())
    assert forked["workers"] == _as_json(here.workers)


def test_a_damaged_gzip_read_by_worker_processes_keeps_what_was_read_before(tmp_path):
    data = bytearray(gzip.compress("".join(json.dumps(dict(AREAL_RECORD, session_id=i, reason="r" * (i % 97))) + "\n"
                                           for i in range(3000)).encode(), compresslevel=1))
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "sessions-r0.jsonl.gz"
    path.write_bytes(bytes(data))
    limits = InputLimits(max_line_bytes=1000)

    here = report.load(str(path), limits=limits)
    forked = _load_in_workers(path)

    assert 0 < len(here.sessions) < 3000 and here.diagnostics.unreadable
    assert forked["rows"] == _as_json(_session_rows(here))
    assert forked["diagnostics"] == _as_json(here.diagnostics.to_dict())
