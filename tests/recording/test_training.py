"""Policy versions, weight syncs, consumed sessions, rewards and annotations on the trace."""

from __future__ import annotations

import os

import pytest
from support import read_jsonl
from support.capture import MAIN_THREAD as MAIN
from support.capture import S, span_hex, trace_hex

import otel_rl
from otel_rl._internal.state import STATE


@pytest.fixture(autouse=True)
def _no_version():
    otel_rl.set_policy_version(None)
    yield
    otel_rl.set_policy_version(None)


def marked_session(task_id, phases=("generate",)):
    session_id = otel_rl.register_session(task_id)
    for phase in phases:
        otel_rl.trace_session_event(f"mark_{phase}_start", session_id=session_id)
        otel_rl.trace_session_event(f"mark_{phase}_end", session_id=session_id)
    return session_id


def annotations(capture):
    otel_rl.save(force=True)
    path = f"{capture.run_dir}/annotations-r0.jsonl"
    return read_jsonl(path) if os.path.exists(path) else []


def test_phases_and_sessions_record_the_policy_version_they_started_under(capture):
    otel_rl.set_policy_version(3)
    task_id = otel_rl.register_task()  # 1 s
    session_id = otel_rl.register_session(task_id)  # 2 s
    otel_rl.trace_session_event("mark_generate_start", session_id=session_id)  # 3 s
    otel_rl.set_policy_version(4)
    otel_rl.trace_session_event("mark_generate_end", session_id=session_id)  # 4 s
    otel_rl.trace_session_event("mark_reward_start", session_id=session_id)  # 5 s
    otel_rl.trace_session_event("mark_reward_end", session_id=session_id)  # 6 s
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")  # 7 s
    phases = {s["name"]: s["attributes"]["rl.policy.version"] for s in capture.spans() if s["name"] != "task"
              and s["name"] != "session"}
    assert phases == {"generate": 3, "reward": 4}
    (session,) = [s for s in capture.spans() if s["name"] == "session"]
    assert session["attributes"]["rl.policy.version"] == 3
    (record,) = capture.sessions()
    assert record["policy_versions"] == [3, 4]


def test_without_a_version_nothing_about_versions_is_recorded(capture):
    task_id = otel_rl.register_task()
    session_id = marked_session(task_id)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    (record,) = capture.sessions()
    assert "policy_versions" not in record
    assert all("rl.policy.version" not in s["attributes"] for s in capture.spans())


def test_a_received_weight_sync_sets_the_version_when_it_ends(capture):
    otel_rl.set_policy_version(1)
    with otel_rl.weight_sync(2, role="recv"):  # 1 s to 2 s
        assert otel_rl.get_policy_version() == 1
    assert otel_rl.get_policy_version() == 2
    with otel_rl.weight_sync(3, role="send"):  # 3 s to 4 s
        pass
    assert otel_rl.get_policy_version() == 2
    assert capture.spans() == [
        {"name": "weight_sync", "trace_id": 1, "span_id": 1, "parent_id": None, "start_ns": 1 * S,
         "end_ns": 2 * S, "attributes": {**MAIN, "rl.category": "comm", "rl.span.kind": "weight_sync",
                                         "rl.policy.version": 2, "rl.weight_sync.role": "recv"}},
        {"name": "weight_sync", "trace_id": 2, "span_id": 2, "parent_id": None, "start_ns": 3 * S,
         "end_ns": 4 * S, "attributes": {**MAIN, "rl.category": "comm", "rl.span.kind": "weight_sync",
                                         "rl.policy.version": 3, "rl.weight_sync.role": "send"}},
    ]


def test_a_failed_weight_sync_keeps_the_old_version(capture):
    otel_rl.set_policy_version(1)
    with pytest.raises(RuntimeError):
        with otel_rl.weight_sync(2):
            raise RuntimeError("transfer failed")
    assert otel_rl.get_policy_version() == 1


def test_a_weight_sync_sets_the_version_with_tracing_off():
    with otel_rl.weight_sync(7):
        pass
    assert otel_rl.get_policy_version() == 7


@pytest.mark.expect_diagnostics("unknown_weight_sync_role")
def test_an_unknown_weight_sync_role_is_counted_and_recorded_as_given(capture):
    with otel_rl.weight_sync(1, role="broadcast"):
        pass
    assert otel_rl.diagnostics()["unknown_weight_sync_role"] == 1
    (span,) = capture.spans()
    assert span["attributes"]["rl.weight_sync.role"] == "broadcast"


def test_consuming_open_sessions_marks_their_records_and_links_the_step(capture):
    otel_rl.set_policy_version(0)
    task_id = otel_rl.register_task()
    first = marked_session(task_id)
    otel_rl.set_policy_version(1)
    second = marked_session(task_id)
    otel_rl.set_policy_version(3)
    with otel_rl.step_scope(7):
        assert otel_rl.consume([first, second]) == 2
    otel_rl.trace_session_event("mark_finalized", task_id=task_id, status="accepted")
    records = {r["session_id"]: r for r in capture.sessions()}
    assert {sid: (r["consumed_step"], r["staleness"], r["policy_versions"]) for sid, r in records.items()} == {
        first: (7, 3, [0]), second: (7, 2, [1])}
    (step,) = [s for s in capture.spans() if s["name"] == "step"]
    assert step["attributes"]["rl.policy.version"] == 3
    assert [(link["span_id"], link["attributes"]) for link in step["links"]] == [
        (int(records[first]["span_id"], 16), {"rl.session.id": first, "rl.task.id": task_id,
                                              "rl.session.crossed_update": False,
                                              "rl.session.consumed_step": 7, "rl.session.staleness": 3}),
        (int(records[second]["span_id"], 16), {"rl.session.id": second, "rl.task.id": task_id,
                                               "rl.session.crossed_update": False,
                                               "rl.session.consumed_step": 7, "rl.session.staleness": 2}),
    ]


def test_consumed_sessions_are_lines_the_report_joins(capture):
    otel_rl.set_policy_version(0)
    task_id = otel_rl.register_task()
    session_id = marked_session(task_id, ("generate", "reward"))
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    otel_rl.set_policy_version(2)
    with otel_rl.step_scope(4):
        otel_rl.consume(session_id)  # finalized already: remembered by the registry
    lines = [{k: v for k, v in line.items() if k != "ts"} for line in annotations(capture)]
    (record,) = capture.sessions()
    assert lines == [{"kind": "consume", "task_id": task_id, "session_id": session_id, "rank": 0, "role": "",
                      "step": 4, "policy_version": 2, "staleness": 2, "crossed_update": False,
                      "span_id": record["span_id"]}]


def test_samples_the_trainer_holds_carry_their_own_versions(capture):
    otel_rl.set_policy_version(5)
    sample = {"session_id": 42, "task_id": 9, "version": 3, "trace_id": trace_hex(77), "span_id": span_hex(78)}
    with otel_rl.step_scope(1):
        assert otel_rl.consume([sample]) == 1
    (step,) = [s for s in capture.spans() if s["name"] == "step"]
    assert [(link["trace_id"], link["span_id"], link["attributes"]["rl.session.staleness"])
            for link in step["links"]] == [(77, 78, 2)]
    (line,) = annotations(capture)
    assert (line["session_id"], line["task_id"], line["staleness"]) == (42, 9, 2)


@pytest.mark.expect_diagnostics("unknown_consumed_session")
def test_unknown_sessions_are_counted_and_ignored(capture):
    with otel_rl.step_scope(1):
        assert otel_rl.consume([12345, {"no": "id"}]) == 0
    assert otel_rl.diagnostics()["unknown_consumed_session"] == 2
    assert annotations(capture) == []


def test_opaque_versions_are_kept_without_a_staleness(capture):
    otel_rl.set_policy_version("ckpt-a")
    task_id = otel_rl.register_task()
    session_id = marked_session(task_id)
    otel_rl.set_policy_version("ckpt-b")
    with otel_rl.step_scope(1):
        otel_rl.consume(session_id)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    (record,) = capture.sessions()
    assert (record["policy_versions"], record["consumed_step"], "staleness" in record) == (["ckpt-a"], 1, False)
    assert otel_rl.diagnostics()["version_not_numeric"] == 1


def test_a_reward_given_with_the_verdict_is_on_the_span_and_the_record(capture):
    task_id = otel_rl.register_task()
    session_id = marked_session(task_id)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted", reward=0.75)
    (record,) = capture.sessions()
    assert record["reward"] == 0.75
    (session,) = [s for s in capture.spans() if s["name"] == "session"]
    assert session["attributes"]["rl.session.reward"] == 0.75


@pytest.mark.expect_diagnostics()
def test_a_reward_that_is_no_number_is_counted_and_the_session_kept(capture):
    task_id = otel_rl.register_task()
    session_id = marked_session(task_id)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted", reward="great")
    (record,) = capture.sessions()
    assert "reward" not in record and record["status"] == "accepted"
    assert otel_rl.diagnostics()["bad_reward"] == 1


def test_annotations_are_appended_and_linked_to_the_session(capture):
    task_id = otel_rl.register_task()
    session_id = marked_session(task_id)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    assert otel_rl.annotate(session_id, advantage=0.5, **{"reward.format": 1.0})
    assert otel_rl.annotate(999, task_id=3, logprob_mismatch=0.01)  # another process's session
    (record,) = capture.sessions()
    annotation = [s for s in capture.spans() if s["name"] == "annotation"]
    assert [(s["attributes"]["rl.session.id"], {k: v for k, v in s["attributes"].items()
                                                if k.startswith("rl.annotation.")}, s.get("links"))
            for s in annotation] == [
        (session_id, {"rl.annotation.advantage": 0.5, "rl.annotation.reward.format": 1.0},
         [{"trace_id": int(record["trace_id"], 16), "span_id": int(record["span_id"], 16), "attributes": {}}]),
        (999, {"rl.annotation.logprob_mismatch": 0.01}, None),
    ]
    assert [(line["kind"], line["task_id"], line["session_id"], line["values"]) for line in annotations(capture)] == [
        ("annotation", task_id, session_id, {"advantage": 0.5, "reward.format": 1.0}),
        ("annotation", 3, 999, {"logprob_mismatch": 0.01}),
    ]


@pytest.mark.expect_diagnostics("unknown_annotated_session")
def test_annotating_an_unknown_session_without_its_task_is_counted(capture):
    assert otel_rl.annotate(4242, advantage=1.0) is False
    assert otel_rl.diagnostics()["unknown_annotated_session"] == 1


def test_without_tracing_the_calls_do_nothing():
    assert otel_rl.consume([1, 2]) == 0
    assert otel_rl.annotate(1, advantage=1.0) is False
    assert STATE.components is None


def test_weight_sync_durations_reach_the_metrics_file_by_role(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="e", trial_name="t", rank=0)
    for role in ("send", "recv", "recv"):
        with otel_rl.weight_sync(1, role=role):
            pass
    run_dir = otel_rl.settings().run_dir
    otel_rl.shutdown()
    durations: dict[str, list[float]] = {}
    for span in read_jsonl(f"{run_dir}/traces-r0.jsonl"):
        if span.get("name") == "weight_sync":
            durations.setdefault(span["args"]["rl.weight_sync.role"], []).append(span["dur"] / 1e6)
    points = {p["attributes"]["rl.weight_sync.role"]: (p["count"], p["sum"])
              for line in read_jsonl(f"{run_dir}/metrics-r0.jsonl") for rm in line["resource_metrics"]
              for sm in rm["scope_metrics"] for m in sm["metrics"] if m["name"] == "rl.weight_sync.duration"
              for p in m["data"]["data_points"]}
    assert points == {role: (len(d), pytest.approx(sum(d), rel=1e-6)) for role, d in durations.items()}
    assert sorted(points) == ["recv", "send"]
