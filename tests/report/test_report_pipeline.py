"""The pipeline view: consumed sessions, staleness, sample age, bubbles, weight syncs, counters, values
vs latency, read back from the files a traced run wrote (the capture's clock: one second per reading)."""

from __future__ import annotations

import json

import pytest
from support import read_jsonl

import otel_rl
from otel_rl import report
from otel_rl.timers import set_gauge


@pytest.fixture(autouse=True)
def _no_version():
    otel_rl.set_policy_version(None)
    yield
    otel_rl.set_policy_version(None)


def finished_session(task_id, reason=None):
    session_id = otel_rl.register_session(task_id)
    for phase in ("generate", "reward"):
        otel_rl.trace_session_event(f"mark_{phase}_start", session_id=session_id)
        otel_rl.trace_session_event(f"mark_{phase}_end", session_id=session_id)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="rejected" if reason else "accepted",
                                reason=reason)
    return session_id


def pipeline(capture):
    otel_rl.save(force=True)
    return report.build(report.load(capture.run_dir), ["pipeline"])["pipeline"]


def notes(capture):
    return read_jsonl(f"{capture.run_dir}/annotations-r0.jsonl")


def spans_named(capture, name):
    return [e for e in capture.records() if e.get("name") == name and e.get("ph") == "X"]


def test_a_step_lists_the_sessions_it_consumed_with_their_staleness(capture):
    otel_rl.set_policy_version(0)
    task_id = otel_rl.register_task()
    old = [finished_session(task_id) for _ in range(2)]
    otel_rl.set_policy_version(1)
    new = finished_session(task_id)
    otel_rl.set_policy_version(2)
    with otel_rl.step_scope(5):
        otel_rl.consume(old + [new])
    (row,) = [r for r in pipeline(capture)["steps"] if r["step"] == 5]
    assert (row["consumed"], row["staleness"], row["crossed_update"]) == (
        3, {"count": 3, "not_numeric": 0, "mean": 5 / 3, "p50": 2.0, "max": 2.0, "counts": {"1": 1, "2": 2}}, 0.0)


def test_sample_age_runs_from_the_last_phase_to_the_consume(capture):
    task_id = otel_rl.register_task()
    session_id = finished_session(task_id)
    with otel_rl.step_scope(0):
        otel_rl.consume(session_id)
    (record,) = capture.sessions()
    (line,) = notes(capture)
    ready = max(i["end_ts"] for instances in record["phases"].values() for i in instances)
    (row,) = pipeline(capture)["steps"]
    assert row["sample_age"]["max_s"] == pytest.approx(line["ts"] - ready)
    assert line["ts"] > record["finalized_ts"] > ready


def test_the_trainer_wait_is_its_sync_spans_inside_the_step(capture):
    task_id = otel_rl.register_task()
    session_id = finished_session(task_id)
    with otel_rl.step_scope(0):
        with otel_rl.trace_scope("wait_rollouts", category="sync"):
            pass
        otel_rl.consume(session_id)
    (wait,) = spans_named(capture, "wait_rollouts")
    (row,) = pipeline(capture)["steps"]
    assert row["trainer_wait_s"] == pytest.approx(wait["dur"] / 1e6)


def test_without_wait_spans_the_trainer_waited_until_its_first_consume(capture):
    task_id = otel_rl.register_task()
    session_id = finished_session(task_id)
    with otel_rl.step_scope(0):
        otel_rl.consume(session_id)
    (step,) = spans_named(capture, "step")
    (line,) = notes(capture)
    (row,) = pipeline(capture)["steps"]
    assert row["trainer_wait_s"] == pytest.approx(line["ts"] - step["ts"] / 1e6)


def test_received_weight_syncs_are_rollout_time_paused_in_their_step(capture):
    with otel_rl.step_scope(3):
        with otel_rl.weight_sync(4, role="recv"):
            pass
    (sync,) = spans_named(capture, "weight_sync")
    view = pipeline(capture)
    (row,) = view["steps"]
    assert (row["step"], row["rollout_paused_s"], row["weight_sync_s"]) == (3, pytest.approx(sync["dur"] / 1e6), 0.0)
    assert [(r["worker"], r["role"], r["count"]) for r in view["weight_syncs"]] == [("r0", "recv", 1)]
    assert otel_rl.get_policy_version() == 4


def test_counters_are_series_per_worker(capture):
    for value in (3, 5, 4):
        set_gauge("rollout.buffer", value)
    (counter,) = pipeline(capture)["counters"]
    assert {k: counter[k] for k in ("name", "worker", "count", "min", "max", "last")} == {
        "name": "rollout.buffer", "worker": "r0", "count": 3, "min": 3.0, "max": 5.0, "last": 4.0}
    assert counter["points"]["value"] == [3.0, 5.0, 4.0]


def test_annotated_values_are_set_against_session_latency(capture):
    task_id = otel_rl.register_task()
    sessions = [finished_session(task_id) for _ in range(3)]
    for i, session_id in enumerate(sessions):
        otel_rl.annotate(session_id, task_id, advantage=float(i))
    totals = {r["session_id"]: r["total_s"] for r in capture.sessions()}
    view = pipeline(capture)["values_vs_latency"]
    assert list(view) == ["advantage"]
    assert sorted(zip(view["advantage"]["points"]["latency_s"], view["advantage"]["points"]["value"])) == sorted(
        (totals[s], float(i)) for i, s in enumerate(sessions))


def test_sessions_finalized_as_stale_are_counted(capture):
    task_id = otel_rl.register_task()
    finished_session(task_id, reason="stale_weights")
    finished_session(task_id, reason="truncated")
    assert pipeline(capture)["overall"]["dropped_stale"] == 1


def test_consumed_sessions_the_records_do_not_name_are_counted(capture):
    task_id = otel_rl.register_task()
    session_id = finished_session(task_id)
    with otel_rl.step_scope(0):
        otel_rl.consume(session_id)
    otel_rl.save(force=True)
    # The trainer's annotations without the rollout's records and spans (another machine's, say).
    data = report.load(f"{capture.run_dir}/annotations-r0.jsonl")
    view = report.build(data, ["pipeline"])["pipeline"]
    assert (view["overall"]["consumed"], view["overall"]["consumed_unknown"]) == (1, 1)
    assert view["steps"][0]["sample_age"]["count"] == 0


def test_a_session_timeline_shows_its_consume_and_its_annotations(capture):
    task_id = otel_rl.register_task()
    session_id = finished_session(task_id)
    otel_rl.set_policy_version(1)
    with otel_rl.step_scope(2):
        otel_rl.consume(session_id)
        otel_rl.annotate(session_id, task_id, advantage=0.5, logprob_mismatch=0.01)
    otel_rl.save(force=True)
    (tl,) = report.timeline(report.load(capture.run_dir), sessions=[session_id])["sessions"]
    assert (tl["consumed_step"], tl["staleness"], tl["annotations"]) == (
        2, None, {"advantage": 0.5, "logprob_mismatch": 0.01})
    assert [(e["event"], e["worker"]) for e in tl["events"][-2:]] == [("consumed", "r0"), ("annotation", "r0")]


def test_records_read_as_columns_join_their_consume_lines_too(capture, tmp_path):
    # The command line keeps records as columns, not rows, when no trace file is read: the join reads those.
    task_id = otel_rl.register_task()
    session_id = finished_session(task_id)
    with otel_rl.step_scope(0):
        otel_rl.consume(session_id)
    otel_rl.save(force=True)
    out = tmp_path / "report.json"
    assert report.main([f"{capture.run_dir}/sessions-r0.jsonl", f"{capture.run_dir}/annotations-r0.jsonl",
                        "--format", "json", "--view", "pipeline", "-o", str(out), "-q"]) == 0
    (row,) = json.loads(out.read_text())["pipeline"]["steps"]
    assert (row["consumed"], row["sample_age"]["count"]) == (1, 1)
