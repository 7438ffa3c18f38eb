"""Session lifecycle: derived durations and statuses, records, metrics, bad input."""

from __future__ import annotations

import asyncio
import os

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support import by_name, one, read_jsonl, read_sessions
from support.capture import MAIN_THREAD as MAIN
from support.capture import S, span_hex, trace_hex

import otel_rl

RECORD_FIELDS = {
    "task_id", "session_id", "rank", "role", "step", "status", "reason", "submit_ts", "finalized_ts",
    "total_s", "generate_s", "reward_s", "toolcall_s", "phase_counts", "phases", "counters",
    "trace_id", "span_id",
}


def start_session(task_id=None):
    task_id = otel_rl.register_task(task_id)
    otel_rl.set_task_id(task_id)
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    return task_id, session_id


# Tests taking ``capture`` state whole spans and records: ids count up from 1 and
# the clock reads 1 s, 2 s, ... (S each), one step per read (support/capture.py).
# start_session() reads it three times: the task's start (1 s), the session's
# (2 s), and once making the session's span object current (3 s).

#: The ids every span inside the first session of the first task carries.
IDS = {"rl.task.id": 0, "rl.session.id": 0}


def task_span(end_s, *, accepted=0, rejected=0, failed=0, acceptance_rate=0.0):
    """The span of task 0 (trace 1, span 1, started at 1 s) with one session."""
    return {"name": "task", "trace_id": 1, "span_id": 1, "parent_id": None,
            "start_ns": 1 * S, "end_ns": end_s * S,
            "attributes": {**MAIN, "rl.span.kind": "task", "rl.task.id": 0, "rl.task.sessions": 1,
                           "rl.task.accepted": accepted, "rl.task.rejected": rejected,
                           "rl.task.failed": failed, "rl.task.dropped": 0,
                           "rl.task.acceptance_rate": acceptance_rate}}


def test_a_finalized_session_writes_one_areal_compatible_record(capture):
    task_id, session_id = start_session()
    with otel_rl.trace_session_phase("generate"):  # 4 s to 5 s
        pass
    with otel_rl.trace_session_phase("reward"):  # 6 s to 7 s
        pass
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")  # 8 s
    assert capture.sessions() == [{
        "task_id": 0, "session_id": 0, "rank": 0, "role": "", "step": None,
        "status": "accepted", "reason": None, "submit_ts": 2.0, "finalized_ts": 8.0, "total_s": 6.0,
        "generate_s": 1.0, "reward_s": 1.0, "toolcall_s": 0.0,
        "phase_counts": {"generate": 1, "reward": 1, "toolcall": 0},
        "phases": {"generate": [{"start_ts": 4.0, "end_ts": 5.0}], "reward": [{"start_ts": 6.0, "end_ts": 7.0}]},
        "counters": {}, "trace_id": trace_hex(1), "span_id": span_hex(2),
    }]
    assert set(capture.sessions()[0]) == RECORD_FIELDS


def test_record_fields_match_the_spans_received(capture):
    _, session_id = start_session()
    for _ in range(2):  # 4 s to 5 s, 6 s to 7 s
        with otel_rl.trace_session_phase("generate"):
            pass
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="rejected",
                                reason="stale_weight")  # 8 s
    generate = {**MAIN, **IDS, "rl.span.kind": "phase", "rl.phase": "generate"}
    assert capture.spans() == [
        task_span(8, rejected=1),
        {"name": "session", "trace_id": 1, "span_id": 2, "parent_id": 1,
         "start_ns": 2 * S, "end_ns": 8 * S,
         "attributes": {**MAIN, **IDS, "rl.span.kind": "session", "rl.session.status": "rejected",
                        "rl.session.reason": "stale_weight", "rl.session.total_s": 6.0,
                        "rl.session.generate_s": 2.0, "rl.session.generate_count": 2}},
        {"name": "generate", "trace_id": 1, "span_id": 4, "parent_id": 2,
         "start_ns": 4 * S, "end_ns": 5 * S, "attributes": generate},
        {"name": "generate", "trace_id": 1, "span_id": 5, "parent_id": 2,
         "start_ns": 6 * S, "end_ns": 7 * S, "attributes": generate},
    ]
    assert capture.sessions() == [{
        "task_id": 0, "session_id": 0, "rank": 0, "role": "", "step": None,
        "status": "rejected", "reason": "stale_weight", "submit_ts": 2.0, "finalized_ts": 8.0,
        "total_s": 6.0, "generate_s": 2.0, "reward_s": 0.0, "toolcall_s": 0.0,
        "phase_counts": {"generate": 2, "reward": 0, "toolcall": 0},
        "phases": {"generate": [{"start_ts": 4.0, "end_ts": 5.0}, {"start_ts": 6.0, "end_ts": 7.0}]},
        "counters": {}, "trace_id": trace_hex(1), "span_id": span_hex(2),
    }]


def test_custom_phases_get_their_own_duration_fields(traced):
    _, session_id = start_session()
    with otel_rl.trace_session_phase("verify"):
        pass
    otel_rl.trace_session_event("mark_verify_start")
    otel_rl.trace_session_event("mark_verify_end", passed=True)
    otel_rl.trace_session_event("mark_finalized", status="accepted")
    (record,) = traced.sessions()
    assert record["phase_counts"]["verify"] == 2
    assert record["verify_s"] > 0
    spans = traced.spans()
    assert one(spans, "session")["attributes"]["rl.session.verify_count"] == 2


def test_failed_sessions_have_error_status_with_the_reason(capture):
    start_session()
    otel_rl.trace_session_event("mark_finalized", status="failed", reason="engine timeout")  # 4 s
    assert capture.spans() == [
        task_span(4, failed=1),
        {"name": "session", "trace_id": 1, "span_id": 2, "parent_id": 1,
         "start_ns": 2 * S, "end_ns": 4 * S,
         "attributes": {**MAIN, **IDS, "rl.span.kind": "session", "rl.session.status": "failed",
                        "rl.session.reason": "engine timeout", "rl.session.total_s": 2.0},
         "status": {"code": "ERROR", "description": "engine timeout"}},
    ]


def test_finalizing_a_session_interrupts_a_phase_opened_by_a_mark(capture):
    _, session_id = start_session()
    otel_rl.trace_session_event("mark_reward_start", session_id=session_id, judge="rule")  # 4 s
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="rejected")  # 5 s
    assert capture.spans() == [
        task_span(5, rejected=1),
        {"name": "session", "trace_id": 1, "span_id": 2, "parent_id": 1,
         "start_ns": 2 * S, "end_ns": 5 * S,
         "attributes": {**MAIN, **IDS, "rl.span.kind": "session", "rl.session.status": "rejected",
                        "rl.session.total_s": 3.0, "rl.session.reward_s": 0.0,
                        "rl.session.reward_count": 1}},
        # Ended with its session, as an error; a marked phase gets its span id when exported.
        {"name": "reward", "trace_id": 1, "span_id": 4, "parent_id": 2,
         "start_ns": 4 * S, "end_ns": 5 * S,
         "attributes": {**MAIN, **IDS, "rl.span.kind": "phase", "rl.phase": "reward",
                        "rl.phase.interrupted": True, "rl.args.judge": "rule"},
         "status": {"code": "ERROR", "description": "interrupted: session rejected"}},
    ]
    assert capture.sessions() == [{
        "task_id": 0, "session_id": 0, "rank": 0, "role": "", "step": None,
        "status": "rejected", "reason": None, "submit_ts": 2.0, "finalized_ts": 5.0, "total_s": 3.0,
        "generate_s": 0.0, "reward_s": 0.0, "toolcall_s": 0.0,
        "phase_counts": {"generate": 0, "reward": 1, "toolcall": 0},
        "phases": {"reward": [{"start_ts": 4.0, "end_ts": None}]},  # interrupted: no end
        "counters": {}, "trace_id": trace_hex(1), "span_id": span_hex(2),
    }]


def test_marked_phases_of_a_session_never_made_current_are_children_of_its_span(capture):
    task_id = otel_rl.register_task()  # 1 s
    session_id = otel_rl.register_session(task_id)  # 2 s; never current: no span object
    otel_rl.trace_session_event("mark_generate_start", session_id=session_id, turn=0)  # 3 s
    otel_rl.trace_session_event("mark_generate_end", session_id=session_id, tokens=12)  # 4 s
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")  # 5 s
    assert capture.spans() == [
        task_span(5, accepted=1, acceptance_rate=1.0),
        {"name": "session", "trace_id": 1, "span_id": 2, "parent_id": 1,
         "start_ns": 2 * S, "end_ns": 5 * S,
         "attributes": {**MAIN, **IDS, "rl.span.kind": "session", "rl.session.status": "accepted",
                        "rl.session.total_s": 3.0, "rl.session.generate_s": 1.0,
                        "rl.session.generate_count": 1}},
        {"name": "generate", "trace_id": 1, "span_id": 3, "parent_id": 2,
         "start_ns": 3 * S, "end_ns": 4 * S,
         "attributes": {**MAIN, **IDS, "rl.span.kind": "phase", "rl.phase": "generate",
                        "rl.args.turn": 0, "rl.args.tokens": 12}},
    ]
    assert [(r["trace_id"], r["span_id"]) for r in capture.sessions()] == [(trace_hex(1), span_hex(2))]


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
    (record,) = traced.sessions()
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
    (record,) = traced.sessions()
    assert record["phase_counts"]["toolcall"] == 1
    assert record["phases"]["toolcall"][0]["end_ts"] is not None


def test_counters_land_in_the_record(traced):
    _, session_id = start_session()
    otel_rl.increment_counter("retries")
    otel_rl.increment_counter("retries", 2)
    otel_rl.trace_session_event("increment_counter", name="tool_calls")
    otel_rl.trace_session_event("mark_finalized", status="accepted")
    (record,) = traced.sessions()
    assert record["counters"] == {"retries": 3, "tool_calls": 1}


def test_second_finalize_is_ignored_and_counted(traced):
    _, session_id = start_session()
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="failed")
    (record,) = traced.sessions()
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
    (record,) = traced.sessions()
    assert record["phase_counts"]["judge"] == 2
    assert otel_rl.diagnostics()["overlapping_phase"] == 1


def test_sessions_pending_at_shutdown_are_written_as_pending(traced):
    start_session()
    run_dir = traced.run_dir
    otel_rl.shutdown()
    (record,) = read_sessions(run_dir)
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
    otel_rl.save(force=True)
    got = read_sessions(otel_rl.settings().run_dir)
    assert [r["status"] for r in got] == ["dropped"] * 15
    assert otel_rl.diagnostics()["sessions_evicted"] == 15


def test_an_eviction_takes_the_oldest_session_still_pending(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), max_pending_sessions=3,
                      tracer_provider=TracerProvider(shutdown_on_exit=False))
    task_id = otel_rl.register_task()
    first, second, third = (otel_rl.register_session(task_id) for _ in range(3))
    otel_rl.trace_session_event("mark_finalized", session_id=second, status="accepted")
    otel_rl.register_session(task_id)  # three pending: none evicted
    otel_rl.register_session(task_id)  # four: the first goes
    otel_rl.register_session(task_id)  # four again: the third, the second being finalized
    otel_rl.save(force=True)
    got = read_sessions(otel_rl.settings().run_dir)
    assert sorted((r["session_id"], r["status"]) for r in got) == [
        (first, "dropped"), (second, "accepted"), (third, "dropped")]


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
    otel_rl.save(force=True)
    got = read_sessions(otel_rl.settings().run_dir)
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
    last = read_jsonl(os.path.join(run_dir, "metrics-r0.jsonl"))[-1]
    metrics = {m["name"]: m for rm in last["resource_metrics"] for sm in rm["scope_metrics"]
               for m in sm["metrics"]}
    counts = {p["attributes"]["rl.session.status"]: p["value"]
              for p in metrics["rl.sessions"]["data"]["data_points"]}
    assert counts == {"accepted": 2, "rejected": 1}
    assert metrics["rl.session.duration"]["unit"] == "s"


def test_metric_exemplars_name_their_spans_as_the_session_records_do(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    task_id = otel_rl.register_task()
    for _ in range(40):  # span ids on both sides of 2**63, which came out as int and as text
        session_id = otel_rl.register_session(task_id)
        otel_rl.trace_session_event("mark_generate_start", session_id=session_id)
        otel_rl.trace_session_event("mark_generate_end", session_id=session_id)
        otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    run_dir = otel_rl.settings().run_dir
    otel_rl.shutdown()
    records = {(r["trace_id"], r["span_id"]) for r in read_sessions(run_dir)}
    exemplars = [e for line in read_jsonl(os.path.join(run_dir, "metrics-r0.jsonl"))
                 for rm in line["resource_metrics"] for sm in rm["scope_metrics"] for m in sm["metrics"]
                 if m["name"] == "rl.session.duration" for p in m["data"]["data_points"]
                 for e in p.get("exemplars", [])]
    assert exemplars
    assert {(e["trace_id"], e["span_id"]) for e in exemplars} <= records


def test_a_session_belongs_to_the_step_that_finalizes_it(traced):
    with otel_rl.step_scope(3):  # submitted while step 3 runs, one step ahead
        task_id, session_id = start_session()
    with otel_rl.step_scope(4):  # the trainer's verdict comes with the step that consumes it
        otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    (record,) = traced.sessions()
    session = one(traced.spans(), "session")
    assert (record["step"], record["submit_step"]) == (4, 3)
    assert (session["attributes"]["rl.step"], session["attributes"]["rl.session.submit_step"]) == (4, 3)


def test_a_session_finalized_outside_any_step_keeps_its_tasks_step(traced):
    with otel_rl.step_scope(2):
        _, session_id = start_session()
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    (record,) = traced.sessions()
    assert record["step"] == 2 and "submit_step" not in record
