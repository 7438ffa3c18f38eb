"""Scopes, decorators, instants, steps and the task -> session -> phase mapping."""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from opentelemetry import trace
from support import by_name, one
from support.capture import MAIN_THREAD as MAIN
from support.capture import S

import otel_rl
from otel_rl import Category


# Tests taking ``capture`` state whole spans: ids count up from 1 and the clock
# reads 1 s, 2 s, ... (S each), one step per read (support/capture.py).


def test_trace_scope_records_a_span_with_category_and_args(capture):
    with otel_rl.trace_scope("train.rollout", category=Category.COMPUTE, args={"step": 3, "bs": 8}):
        pass
    assert capture.spans() == [
        {"name": "train.rollout", "trace_id": 1, "span_id": 1, "parent_id": None,
         "start_ns": 1 * S, "end_ns": 2 * S,
         "attributes": {**MAIN, "rl.category": "compute", "rl.args.step": 3, "rl.args.bs": 8}},
    ]


def test_nested_scopes_are_parent_and_child(capture):
    with otel_rl.trace_scope("outer"):
        with otel_rl.trace_scope("inner"):
            pass
    with otel_rl.trace_scope("next"):  # a root again: a trace of its own
        pass
    assert capture.spans() == [
        {"name": "outer", "trace_id": 1, "span_id": 1, "parent_id": None,
         "start_ns": 1 * S, "end_ns": 4 * S, "attributes": MAIN},
        {"name": "inner", "trace_id": 1, "span_id": 2, "parent_id": 1,
         "start_ns": 2 * S, "end_ns": 3 * S, "attributes": MAIN},
        {"name": "next", "trace_id": 3, "span_id": 3, "parent_id": None,
         "start_ns": 5 * S, "end_ns": 6 * S, "attributes": MAIN},
    ]


def test_category_aliases_and_wrong_types_are_normalised(traced):
    with otel_rl.trace_scope("a", category="communication"):
        pass
    with otel_rl.trace_scope("b", category=42):
        pass
    spans = traced.spans()
    assert one(spans, "a")["attributes"]["rl.category"] == "comm"
    assert one(spans, "b")["attributes"]["rl.category"] == "misc"
    assert otel_rl.diagnostics()["bad_category_type"] == 1


def test_exception_in_scope_is_recorded_and_reraised_unchanged(capture):
    error = ValueError("boom")
    with pytest.raises(ValueError) as caught:
        with otel_rl.trace_scope("failing"):
            raise error
    assert caught.value is error
    assert capture.spans() == [
        {"name": "failing", "trace_id": 1, "span_id": 1, "parent_id": None,
         "start_ns": 1 * S, "end_ns": 3 * S, "attributes": MAIN,
         "status": {"code": "ERROR", "description": "ValueError: boom"},
         "events": [{"name": "exception", "timestamp_ns": 2 * S, "attributes": {
             "exception.type": "ValueError", "exception.message": "boom", "exception.escaped": True}}]},
    ]


def test_trace_perf_times_sync_functions(traced):
    @otel_rl.trace_perf("engine.train_batch", category="compute")
    def train_batch(x):
        return x * 2

    assert train_batch(21) == 42
    assert one(traced.spans(), "engine.train_batch")["attributes"]["rl.category"] == "compute"


def test_trace_perf_times_async_functions(traced):
    @otel_rl.trace_perf("agenerate")
    async def agenerate():
        with otel_rl.trace_scope("inside"):
            await asyncio.sleep(0)
        return "ok"

    assert asyncio.run(agenerate()) == "ok"
    spans = traced.spans()
    assert one(spans, "inside")["parent_span_id"] == one(spans, "agenerate")["span_id"]


def test_trace_perf_covers_a_whole_generator_without_leaking_it_as_current(traced):
    @otel_rl.trace_perf("batches")
    def batches():
        for i in range(3):
            with otel_rl.trace_scope("produce"):
                pass
            yield i

    seen_current = []
    for item in batches():
        seen_current.append(trace.get_current_span().is_recording())
    assert seen_current == [False, False, False]
    spans = traced.spans()
    gen = one(spans, "batches")
    assert [s["parent_span_id"] for s in by_name(spans, "produce")] == [gen["span_id"]] * 3


def test_trace_perf_covers_a_whole_async_generator(traced):
    @otel_rl.trace_perf("stream")
    async def stream():
        for i in range(2):
            yield i

    async def consume():
        return [i async for i in stream()]

    assert asyncio.run(consume()) == [0, 1]
    assert one(traced.spans(), "stream")["status"] == "UNSET"


def test_instant_is_an_event_on_the_current_span(capture):
    with otel_rl.trace_scope("scope"):
        otel_rl.instant("batch_prepared", category="scheduler", args={"n": 4})
    assert capture.spans() == [
        {"name": "scope", "trace_id": 1, "span_id": 1, "parent_id": None,
         "start_ns": 1 * S, "end_ns": 3 * S, "attributes": MAIN,
         "events": [{"name": "batch_prepared", "timestamp_ns": 2 * S,
                     "attributes": {"rl.category": "scheduler", "n": 4}}]},
    ]


def test_instant_without_a_current_span_is_a_zero_length_span(capture):
    otel_rl.instant("queue_state", args={"size": 7})
    assert capture.spans() == [
        {"name": "queue_state", "trace_id": 1, "span_id": 1, "parent_id": None,
         "start_ns": 1 * S, "end_ns": 1 * S,
         "attributes": {**MAIN, "rl.span.kind": "instant", "rl.args.size": 7}},
    ]


def test_tensor_args_are_summarised_not_materialised(traced):
    with otel_rl.trace_scope("with_array", args={"logits": np.zeros((2, 3), dtype=np.float32)}):
        pass
    attrs = one(traced.spans(), "with_array")["attributes"]
    assert attrs["rl.args.logits.shape"] == (2, 3)
    assert attrs["rl.args.logits.dtype"] == "float32"
    assert attrs["rl.args.logits.type"] == "ndarray"


def test_task_session_phase_spans_form_one_trace(capture):
    task_id = otel_rl.register_task()  # 1 s
    otel_rl.set_task_id(task_id)
    session_id = otel_rl.register_session()  # 2 s
    otel_rl.set_session_id(session_id)  # makes the session span object: one more id and clock read
    with otel_rl.trace_session_phase("generate"):  # 4 s to 5 s
        pass
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")  # 6 s
    ids = {"rl.task.id": 0, "rl.session.id": 0}
    assert (task_id, session_id) == (0, 0)
    assert capture.spans() == [
        {"name": "task", "trace_id": 1, "span_id": 1, "parent_id": None,
         "start_ns": 1 * S, "end_ns": 6 * S,  # ends with its last session
         "attributes": {**MAIN, "rl.span.kind": "task", "rl.task.id": 0, "rl.task.sessions": 1,
                        "rl.task.accepted": 1, "rl.task.rejected": 0, "rl.task.failed": 0,
                        "rl.task.dropped": 0, "rl.task.acceptance_rate": 1.0}},
        {"name": "session", "trace_id": 1, "span_id": 2, "parent_id": 1,
         "start_ns": 2 * S, "end_ns": 6 * S,
         "attributes": {**MAIN, **ids, "rl.span.kind": "session", "rl.session.status": "accepted",
                        "rl.session.total_s": 4.0, "rl.session.generate_s": 1.0,
                        "rl.session.generate_count": 1}},
        {"name": "generate", "trace_id": 1, "span_id": 4, "parent_id": 2,
         "start_ns": 4 * S, "end_ns": 5 * S,
         "attributes": {**MAIN, **ids, "rl.span.kind": "phase", "rl.phase": "generate"}},
    ]


def test_ids_do_not_cross_between_concurrent_asyncio_sessions(traced):
    @otel_rl.session_context()
    async def sample():
        my_session = otel_rl.get_session_id()
        async with otel_rl.atrace_session_phase("generate"):
            await asyncio.sleep(0.001)
            assert otel_rl.get_session_id() == my_session
        with otel_rl.trace_scope("postprocess"):
            await asyncio.sleep(0)
        otel_rl.trace_session_event("mark_finalized", status="accepted")
        return my_session

    async def task():
        otel_rl.set_task_id(otel_rl.register_task())
        return otel_rl.get_task_id(), await asyncio.gather(*[sample() for _ in range(8)])

    async def main():
        return await asyncio.gather(*[task() for _ in range(25)])

    results = asyncio.run(main())
    spans = traced.spans()
    sessions = {s["attributes"]["rl.session.id"]: s for s in by_name(spans, "session")}
    assert len(sessions) == 200
    for task_id, session_ids in results:
        for sid in session_ids:
            assert sessions[sid]["attributes"]["rl.task.id"] == task_id
    phases = by_name(spans, "generate") + by_name(spans, "postprocess")
    assert phases
    for phase in phases:
        owner = sessions[phase["attributes"]["rl.session.id"]]
        assert phase["trace_id"] == owner["trace_id"]


def test_ids_follow_copied_context_into_thread_pools(traced):
    otel_rl.set_task_id(otel_rl.register_task())
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)

    def reward():
        with otel_rl.trace_session_phase("reward"):
            return otel_rl.get_session_id()

    with ThreadPoolExecutor(4) as pool:
        got = [pool.submit(contextvars.copy_context().run, reward).result() for _ in range(4)]
    assert got == [session_id] * 4
    assert {p["attributes"]["rl.session.id"] for p in by_name(traced.spans(), "reward")} == {session_id}


def test_step_scope_puts_the_step_on_everything_inside(capture):
    with otel_rl.step_scope(7):
        with otel_rl.trace_scope("train"):
            pass
        task_id = otel_rl.register_task()
    otel_rl.trace_session_event("mark_finalized", task_id=task_id, status="accepted")
    assert capture.spans() == [
        {"name": "step", "trace_id": 1, "span_id": 1, "parent_id": None,
         "start_ns": 1 * S, "end_ns": 5 * S,
         "attributes": {**MAIN, "rl.span.kind": "step", "rl.step": 7}},
        {"name": "train", "trace_id": 1, "span_id": 2, "parent_id": 1,
         "start_ns": 2 * S, "end_ns": 3 * S, "attributes": {**MAIN, "rl.step": 7}},
        # A task roots a trace of its own: linked to the step that submitted it, not parented.
        {"name": "task", "trace_id": 3, "span_id": 3, "parent_id": None,
         "start_ns": 4 * S, "end_ns": 6 * S,
         "attributes": {**MAIN, "rl.step": 7, "rl.span.kind": "task", "rl.task.id": 0,
                        "rl.task.sessions": 0, "rl.task.accepted": 0, "rl.task.rejected": 0,
                        "rl.task.failed": 0, "rl.task.dropped": 0, "rl.task.acceptance_rate": 0.0},
         "links": [{"trace_id": 1, "span_id": 1, "attributes": {}}]},
    ]


def test_task_links_to_the_step_that_submitted_it(traced):
    with otel_rl.step_scope(1):
        task_id = otel_rl.register_task()
    otel_rl.trace_session_event("mark_finalized", task_id=task_id)
    otel_rl.save(force=True)
    spans = traced.exporter.get_finished_spans()
    step = next(s for s in spans if s.name == "step")
    task = next(s for s in spans if s.name == "task")
    assert [link.context.span_id for link in task.links] == [step.context.span_id]


def test_profile_steps_leave_every_step_recorded(traced):
    otel_rl.reset()
    otel_rl.configure({"profile_steps": [2]}, fileroot=str(traced.run_root), tracer_provider=traced.provider)
    for step in range(4):
        with otel_rl.step_scope(step):
            with otel_rl.trace_scope(f"work{step}"):
                pass
    names = sorted(s["name"] for s in traced.spans() if s["name"].startswith("work"))
    assert names == ["work0", "work1", "work2", "work3"]


def test_third_party_spans_inside_a_session_carry_its_ids(traced):
    task_id = otel_rl.register_task()
    otel_rl.set_task_id(task_id)
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    other = traced.provider.get_tracer("httpx-like")
    with otel_rl.trace_session_phase("generate"):
        with other.start_as_current_span("POST /generate"):
            pass
    spans = traced.spans()
    client = one(spans, "POST /generate")
    assert client["parent_span_id"] == one(spans, "generate")["span_id"]
    assert client["attributes"] == {"rl.task.id": task_id, "rl.session.id": session_id}


def test_get_tracer_spans_nest_under_otel_rl_scopes(traced):
    with otel_rl.trace_scope("outer"):
        with otel_rl.get_tracer().start_as_current_span("mine", attributes={"k": "v"}):
            pass
    spans = traced.spans()
    assert one(spans, "mine")["parent_span_id"] == one(spans, "outer")["span_id"]
    assert one(spans, "mine")["attributes"]["k"] == "v"
