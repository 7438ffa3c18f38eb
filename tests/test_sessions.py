"""Session lifecycle: derived durations and statuses, records, metrics, bad input."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spans_util import by_name, one

import otel_rl

RECORD_FIELDS = {
    "task_id", "session_id", "rank", "role", "step", "status", "reason", "submit_ts", "finalized_ts",
    "total_s", "generate_s", "reward_s", "toolcall_s", "phase_counts", "phases", "counters",
    "trace_id", "span_id",
}


def records(traced_or_dir) -> list[dict]:
    run_dir = traced_or_dir if isinstance(traced_or_dir, str) else traced_or_dir.run_dir
    otel_rl.save(force=True)
    path = os.path.join(run_dir, "sessions-r0.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def start_session(task_id=None):
    task_id = otel_rl.register_task(task_id)
    otel_rl.set_task_id(task_id)
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    return task_id, session_id


def test_a_finalized_session_writes_one_areal_compatible_record(traced):
    task_id, session_id = start_session()
    with otel_rl.trace_session_phase("generate"):
        pass
    with otel_rl.trace_session_phase("reward"):
        pass
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    (record,) = records(traced)
    assert set(record) == RECORD_FIELDS
    assert (record["task_id"], record["session_id"], record["rank"], record["status"]) == (
        task_id, session_id, 0, "accepted")
    assert record["phase_counts"] == {"generate": 1, "reward": 1, "toolcall": 0}
    assert record["toolcall_s"] == 0.0
    assert record["total_s"] == pytest.approx(record["finalized_ts"] - record["submit_ts"], abs=1e-6)


def test_record_fields_match_the_spans_received(traced):
    _, session_id = start_session()
    for _ in range(2):
        with otel_rl.trace_session_phase("generate"):
            pass
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="rejected",
                                reason="stale_weight")
    spans = traced.spans()
    (record,) = records(traced)
    session = one(spans, "session")
    generates = sorted(by_name(spans, "generate"), key=lambda s: s["start_ns"])
    assert record["trace_id"] == session["trace_id"]
    assert record["span_id"] == session["span_id"]
    assert record["submit_ts"] == session["start_ns"] / 1e9
    assert record["finalized_ts"] == session["end_ns"] / 1e9
    assert record["phases"]["generate"] == [
        {"start_ts": g["start_ns"] / 1e9, "end_ts": g["end_ns"] / 1e9} for g in generates]
    assert record["generate_s"] == pytest.approx(
        sum(g["end_ns"] - g["start_ns"] for g in generates) / 1e9)
    assert session["attributes"]["rl.session.status"] == "rejected"
    assert session["attributes"]["rl.session.reason"] == "stale_weight"
    assert session["attributes"]["rl.session.generate_count"] == 2
    assert session["attributes"]["rl.session.generate_s"] == record["generate_s"]
    assert session["attributes"]["rl.session.total_s"] == record["total_s"]


def test_custom_phases_get_their_own_duration_fields(traced):
    _, session_id = start_session()
    with otel_rl.trace_session_phase("verify"):
        pass
    otel_rl.trace_session_event("mark_verify_start")
    otel_rl.trace_session_event("mark_verify_end", passed=True)
    otel_rl.trace_session_event("mark_finalized", status="accepted")
    (record,) = records(traced)
    assert record["phase_counts"]["verify"] == 2
    assert record["verify_s"] > 0
    spans = traced.spans()
    assert one(spans, "session")["attributes"]["rl.session.verify_count"] == 2


def test_failed_sessions_have_error_status_with_the_reason(traced):
    _, session_id = start_session()
    otel_rl.trace_session_event("mark_finalized", status="failed", reason="engine timeout")
    session = one(traced.spans(), "session")
    assert (session["status"], session["status_message"]) == ("ERROR", "engine timeout")


def test_finalizing_a_session_interrupts_a_phase_opened_by_a_mark(traced):
    _, session_id = start_session()
    otel_rl.trace_session_event("mark_reward_start", session_id=session_id, judge="rule")
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="rejected")
    spans = traced.spans()
    reward, session = one(spans, "reward"), one(spans, "session")
    assert reward["parent_span_id"] == session["span_id"]
    assert (reward["status"], reward["status_message"]) == ("ERROR", "interrupted: session rejected")
    assert reward["attributes"]["rl.phase.interrupted"] is True
    assert reward["attributes"]["rl.session.id"] == session_id
    assert reward["attributes"]["rl.args.judge"] == "rule"
    (record,) = records(traced)
    assert record["phases"]["reward"][0]["end_ts"] is None
    assert record["reward_s"] == 0


def test_marked_phases_of_a_session_never_made_current_are_children_of_its_span(traced):
    task_id = otel_rl.register_task()
    session_id = otel_rl.register_session(task_id)
    otel_rl.trace_session_event("mark_generate_start", session_id=session_id, turn=0)
    otel_rl.trace_session_event("mark_generate_end", session_id=session_id, tokens=12)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    spans = traced.spans()
    generate, session = one(spans, "generate"), one(spans, "session")
    assert (generate["trace_id"], generate["parent_span_id"]) == (session["trace_id"], session["span_id"])
    assert {k: generate["attributes"][k] for k in ("rl.task.id", "rl.session.id", "rl.args.turn",
                                                   "rl.args.tokens")} == {
        "rl.task.id": task_id, "rl.session.id": session_id, "rl.args.turn": 0, "rl.args.tokens": 12}
    (record,) = records(traced)
    assert record["span_id"] == session["span_id"]


def test_a_session_made_current_after_marked_phases_keeps_one_span(traced):
    task_id = otel_rl.register_task()
    otel_rl.set_task_id(task_id)
    session_id = otel_rl.register_session()
    otel_rl.trace_session_event("mark_generate_start", session_id=session_id)
    otel_rl.trace_session_event("mark_generate_end", session_id=session_id)
    otel_rl.set_session_id(session_id)
    with otel_rl.trace_session_phase("reward"):
        pass
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    spans = traced.spans()
    (session,) = by_name(spans, "session")
    assert one(spans, "generate")["parent_span_id"] == session["span_id"]
    assert one(spans, "reward")["parent_span_id"] == session["span_id"]


def test_attributes_set_on_the_current_session_span_are_kept_at_finalize(traced):
    _, session_id = start_session()
    trace.get_current_span().set_attribute("gen_ai.request.model", "policy-v3")
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="rejected", reason="stale")
    attributes = one(traced.spans(), "session")["attributes"]
    assert (attributes["gen_ai.request.model"], attributes["rl.session.status"],
            attributes["rl.session.reason"]) == ("policy-v3", "rejected", "stale")


def test_finalizing_a_task_interrupts_a_running_phase(traced):
    task_id, session_id = start_session()
    phase = otel_rl.trace_session_phase("generate")
    phase.__enter__()  # the engine raised; the orchestrator finalizes the whole task
    otel_rl.trace_session_event("mark_finalized", task_id=task_id, status="failed", reason="engine error")
    spans = traced.spans()
    generate = one(spans, "generate")
    assert generate["status"] == "ERROR"
    assert generate["attributes"]["rl.phase.interrupted"] is True
    (record,) = records(traced)
    assert record["phases"]["generate"][0]["end_ts"] is None
    assert record["status"] == "failed"
    task = one(spans, "task")
    assert task["attributes"]["rl.task.failed"] == 1
    assert task["attributes"]["rl.task.acceptance_rate"] == 0.0


def test_task_span_carries_status_counts_and_acceptance_rate(traced):
    task_id = otel_rl.register_task()
    sessions = [otel_rl.register_session(task_id) for _ in range(4)]
    for sid, status in zip(sessions, ["accepted", "accepted", "accepted", "rejected"]):
        otel_rl.trace_session_event("mark_finalized", session_id=sid, status=status)
    task = one(traced.spans(), "task")
    assert {k: v for k, v in task["attributes"].items() if k.startswith("rl.task.")} == {
        "rl.task.id": task_id, "rl.task.sessions": 4, "rl.task.accepted": 3,
        "rl.task.rejected": 1, "rl.task.failed": 0, "rl.task.dropped": 0,
        "rl.task.acceptance_rate": 0.75,
    }


def test_exception_inside_a_phase_is_recorded_and_the_record_stays_complete(traced):
    _, session_id = start_session()
    with pytest.raises(RuntimeError):
        with otel_rl.trace_session_phase("toolcall"):
            raise RuntimeError("tool crashed")
    otel_rl.trace_session_event("mark_finalized", status="accepted")
    assert one(traced.spans(), "toolcall")["status"] == "ERROR"
    (record,) = records(traced)
    assert record["phase_counts"]["toolcall"] == 1
    assert record["phases"]["toolcall"][0]["end_ts"] is not None


def test_counters_land_in_the_record(traced):
    _, session_id = start_session()
    otel_rl.increment_counter("retries")
    otel_rl.increment_counter("retries", 2)
    otel_rl.trace_session_event("increment_counter", name="tool_calls")
    otel_rl.trace_session_event("mark_finalized", status="accepted")
    (record,) = records(traced)
    assert record["counters"] == {"retries": 3, "tool_calls": 1}


def test_second_finalize_is_ignored_and_counted(traced):
    _, session_id = start_session()
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="failed")
    (record,) = records(traced)
    assert record["status"] == "accepted"
    assert otel_rl.diagnostics()["double_finalize"] == 1


@pytest.mark.expect_diagnostics("unknown_session", "unknown_session_method")
def test_bad_session_events_are_counted_never_raised(traced):
    otel_rl.trace_session_event("mark_finalized", session_id=12345, status="accepted")
    _, session_id = start_session()
    otel_rl.trace_session_event("mark_generate_end")
    otel_rl.trace_session_event("no_such_method")
    otel_rl.trace_session_event("mark_finalized", status="accepted")
    otel_rl.trace_session_event("mark_reward_start", session_id=session_id)
    diagnostics = otel_rl.diagnostics()
    assert diagnostics["unknown_session"] == 1
    assert diagnostics["phase_end_without_start"] == 1
    assert diagnostics["unknown_session_method"] == 1
    assert diagnostics["event_after_finalize"] == 1


def test_a_session_of_an_unregistered_task_registers_the_task(traced):
    session_id = otel_rl.register_session("never-registered")
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    spans = traced.spans()
    assert one(spans, "session")["parent_span_id"] == one(spans, "task")["span_id"]
    assert otel_rl.diagnostics()["session_without_task"] == 1


def test_overlapping_instances_of_a_non_overlapping_phase_are_reported_and_kept(traced):
    otel_rl.register_phase("judge", allow_overlap=False)
    start_session()
    with otel_rl.trace_session_phase("judge"):
        with otel_rl.trace_session_phase("judge"):
            pass
    otel_rl.trace_session_event("mark_finalized", status="accepted")
    (record,) = records(traced)
    assert record["phase_counts"]["judge"] == 2
    assert otel_rl.diagnostics()["overlapping_phase"] == 1


def test_sessions_pending_at_shutdown_are_written_as_pending(traced):
    start_session()
    run_dir = traced.run_dir
    otel_rl.shutdown()
    (record,) = records(run_dir)
    assert record["status"] == "pending"
    assert record["finalized_ts"] is None


def test_records_are_buffered_up_to_the_flush_threshold(tmp_path):
    otel_rl.configure({"session_tracer": {"enabled": True, "flush_threshold": 3}},
                      fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False),
                      export_interval_ms=10, export_process=False)
    path = os.path.join(otel_rl.settings().run_dir, "sessions-r0.jsonl")
    task_id = otel_rl.register_task()
    for _ in range(2):
        otel_rl.trace_session_event("mark_finalized", session_id=otel_rl.register_session(task_id))
    otel_rl._internal.runtime.STATE.pipeline.flush(5)
    assert not os.path.exists(path)
    otel_rl.trace_session_event("mark_finalized", session_id=otel_rl.register_session(task_id))
    otel_rl._internal.runtime.STATE.pipeline.flush(5)
    with open(path) as f:
        assert len(f.readlines()) == 3


def test_too_many_open_sessions_evicts_the_oldest_as_dropped(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), max_pending_sessions=10,
                      tracer_provider=TracerProvider(shutdown_on_exit=False))
    task_id = otel_rl.register_task()
    for _ in range(25):
        otel_rl.register_session(task_id)
    got = records(otel_rl.settings().run_dir)
    assert [r["status"] for r in got] == ["dropped"] * 15
    assert otel_rl.diagnostics()["sessions_evicted"] == 15


def test_sampling_thins_export_but_records_cover_every_session(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.1")
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=provider)

    @otel_rl.session_context()
    async def sample():
        async with otel_rl.atrace_session_phase("generate"):
            await asyncio.sleep(0)
        otel_rl.trace_session_event("mark_finalized", status="accepted")

    async def task():
        otel_rl.set_task_id(otel_rl.register_task())
        await asyncio.gather(*[sample() for _ in range(4)])

    async def main():
        await asyncio.gather(*[task() for _ in range(100)])

    asyncio.run(main())
    got = records(otel_rl.settings().run_dir)
    assert len(got) == 400
    assert all(r["generate_s"] > 0 for r in got)
    # The SDK's in-memory exporter behind a SimpleSpanProcessor receives only sampled spans.
    sampled_sessions = [s for s in exporter.get_finished_spans() if s.name == "session"
                        and s.context.trace_flags.sampled]
    assert 0 < len(sampled_sessions) < 200


def test_session_metrics_are_recorded_by_status(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    task_id = otel_rl.register_task()
    for status in ["accepted", "accepted", "rejected"]:
        otel_rl.trace_session_event("mark_finalized", session_id=otel_rl.register_session(task_id),
                                    status=status)
    run_dir = otel_rl.settings().run_dir
    otel_rl.shutdown()
    with open(os.path.join(run_dir, "metrics-r0.jsonl")) as f:
        last = json.loads(f.readlines()[-1])
    metrics = {m["name"]: m for rm in last["resource_metrics"] for sm in rm["scope_metrics"]
               for m in sm["metrics"]}
    counts = {p["attributes"]["rl.session.status"]: p["value"]
              for p in metrics["rl.sessions"]["data"]["data_points"]}
    assert counts == {"accepted": 2, "rejected": 1}
    assert metrics["rl.session.duration"]["unit"] == "s"


def test_a_session_belongs_to_the_step_that_finalizes_it(traced):
    with otel_rl.step_scope(3):  # submitted while step 3 runs, one step ahead
        task_id, session_id = start_session()
    with otel_rl.step_scope(4):  # the trainer's verdict comes with the step that consumes it
        otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    (record,) = records(traced)
    session = one(traced.spans(), "session")
    assert (record["step"], record["submit_step"]) == (4, 3)
    assert (session["attributes"]["rl.step"], session["attributes"]["rl.session.submit_step"]) == (4, 3)


def test_a_session_finalized_outside_any_step_keeps_its_tasks_step(traced):
    with otel_rl.step_scope(2):
        _, session_id = start_session()
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    (record,) = records(traced)
    assert record["step"] == 2 and "submit_step" not in record
