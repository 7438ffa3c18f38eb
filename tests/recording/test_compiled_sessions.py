"""The session calls compiled in ``recording/_tracking.c`` (phase marks, ``register_task``,
``register_session``, a task's ``mark_finalized``): the compiled path and the Python function
record the same tasks, sessions and phases, and the compiled one hands every call it does not
take to the Python function unchanged."""

from __future__ import annotations

import gc
import inspect
import threading

import pytest
from support.capture import MAIN_THREAD as MAIN
from support.capture import S, span_hex

import otel_rl
from otel_rl._internal.recording import record, tracking
from otel_rl import sessions

compiled = pytest.mark.skipif(sessions._tracking is None, reason="built without a C compiler")


def python_function(public):
    """The Python function behind a public session call (itself where nothing was compiled)."""
    return getattr(public, "__wrapped__", public)


#: Both ways a mark can run: the public callable (compiled where built) and the Python function.
PATHS = {"public": lambda: otel_rl.trace_session_event,
         "python": lambda: python_function(otel_rl.trace_session_event)}
#: Both ways a session can be registered.
REGISTER = {"public": lambda: otel_rl.register_session, "python": lambda: python_function(otel_rl.register_session)}
#: Both ways a task can be registered.
REGISTER_TASK = {"public": lambda: otel_rl.register_task, "python": lambda: python_function(otel_rl.register_task)}

IDS = {"rl.task.id": 0, "rl.session.id": 0}


@pytest.mark.parametrize("path", REGISTER)
def test_sessions_registered_on_either_path_record_the_same_spans(capture, path):
    register = REGISTER[path]()
    task_id = otel_rl.register_task()  # 1 s
    first, second = register(task_id), register(task_id)  # 2 s, 3 s
    otel_rl.trace_session_event("mark_finalized", session_id=second, status="rejected")  # 4 s
    otel_rl.trace_session_event("mark_finalized", session_id=first, status="accepted")  # 5 s
    spans = capture.spans()
    assert (first, second) == (0, 1)
    assert [(s["name"], s["span_id"], s["parent_id"], s["start_ns"] // S, s["end_ns"] // S,
             s["attributes"].get("rl.session.id")) for s in spans] == [
        ("task", 1, None, 1, 5, None), ("session", 2, 1, 2, 5, 0), ("session", 3, 1, 3, 4, 1)]
    assert [(r["session_id"], r["status"], r["span_id"]) for r in capture.sessions()] == [
        (1, "rejected", span_hex(3)), (0, "accepted", span_hex(2))]


def phase_span(name, span_id, start_s, end_s, **attributes):
    """A marked phase of session 0 (span 2 of trace 1), as the exporter builds it."""
    return {"name": name, "trace_id": 1, "span_id": span_id, "parent_id": 2, "start_ns": start_s * S,
            "end_ns": end_s * S, "attributes": {**MAIN, **IDS, "rl.span.kind": "phase", "rl.phase": name,
                                                  **attributes}}


@pytest.mark.parametrize("path", REGISTER)
def test_a_session_registered_for_an_idle_task_keeps_the_task_open(capture, path):
    register = REGISTER[path]()
    task_id = otel_rl.register_task()  # 1 s
    first = register(task_id)  # 2 s
    otel_rl.trace_session_event("mark_finalized", session_id=first)  # 3 s: the task waits, idle
    second = register(task_id)  # 4 s: and is busy again
    otel_rl.save(force=True)  # ends the tasks still idle
    otel_rl.trace_session_event("mark_finalized", session_id=second)  # 5 s
    task = capture.spans()[0]
    assert (task["name"], task["end_ns"] // S, task["attributes"]["rl.task.sessions"]) == ("task", 5, 2)


@pytest.mark.parametrize("path", REGISTER)
def test_sessions_registered_with_the_stdlibs_random_draw_distinct_span_ids(traced, path):
    register = REGISTER[path]()
    task_id = otel_rl.register_task()
    for _ in range(3):
        register(task_id)
    otel_rl.trace_session_event("mark_finalized", task_id=task_id)
    span_ids = {record["span_id"] for record in traced.sessions()}
    assert len(span_ids) == 3 and all(int(span_id, 16) for span_id in span_ids)


@pytest.mark.parametrize("path", PATHS)
def test_marks_on_either_path_record_the_same_phase_spans(capture, path):
    event = PATHS[path]()
    task_id = otel_rl.register_task()  # 1 s
    session_id = otel_rl.register_session(task_id)  # 2 s
    event("mark_generate_start", session_id=session_id)  # 3 s
    event("mark_generate_end", session_id=session_id)  # 4 s
    event("mark_reward_start", session_id)  # 5 s, the session given positionally
    event("mark_reward_end", session_id)  # 6 s
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")  # 7 s
    spans = capture.spans()
    assert spans[1]["attributes"] == {**MAIN, **IDS, "rl.span.kind": "session", "rl.session.status": "accepted",
                                      "rl.session.total_s": 5.0, "rl.session.generate_s": 1.0,
                                      "rl.session.generate_count": 1, "rl.session.reward_s": 1.0,
                                      "rl.session.reward_count": 1}
    assert spans[2:] == [phase_span("generate", 3, 3, 4), phase_span("reward", 4, 5, 6)]


@pytest.mark.parametrize("path", PATHS)
def test_a_mark_keeps_the_policy_version_in_force_at_its_start(capture, path):
    event = PATHS[path]()
    session_id = otel_rl.register_session(otel_rl.register_task())  # 1 s, 2 s
    otel_rl.set_policy_version(7)
    try:
        event("mark_generate_start", session_id=session_id)  # 3 s
        otel_rl.set_policy_version(8)
        event("mark_generate_end", session_id=session_id)  # 4 s
    finally:
        otel_rl.set_policy_version(None)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id)  # 5 s
    assert capture.spans()[2:] == [phase_span("generate", 3, 3, 4, **{"rl.policy.version": 7})]


@pytest.mark.parametrize("path", PATHS)
def test_ends_out_of_order_close_the_phase_they_name(capture, path):
    event = PATHS[path]()
    session_id = otel_rl.register_session(otel_rl.register_task())  # 1 s, 2 s
    event("mark_generate_start", session_id=session_id)  # 3 s
    event("mark_reward_start", session_id=session_id)  # 4 s
    event("mark_generate_end", session_id=session_id)  # 5 s: not the phase opened last
    event("mark_reward_end", session_id=session_id)  # 6 s
    otel_rl.trace_session_event("mark_finalized", session_id=session_id)  # 7 s
    assert sorted((s["name"], s["start_ns"] // S, s["end_ns"] // S) for s in capture.spans()[2:]) == [
        ("generate", 3, 5), ("reward", 4, 6)]


@pytest.mark.parametrize("path", PATHS)
def test_a_mark_with_a_payload_records_it_on_the_phase(capture, path):
    event = PATHS[path]()
    session_id = otel_rl.register_session(otel_rl.register_task())  # 1 s, 2 s
    event("mark_generate_start", session_id=session_id, turn=1)  # 3 s
    event("mark_generate_end", session_id=session_id, tokens=5)  # 4 s
    otel_rl.trace_session_event("mark_finalized", session_id=session_id)  # 5 s
    assert capture.spans()[2:] == [phase_span("generate", 3, 3, 4, **{"rl.args.turn": 1, "rl.args.tokens": 5})]


@pytest.mark.expect_diagnostics("phase_end_without_start", "unknown_session")
@pytest.mark.parametrize("path", PATHS)
def test_a_mark_the_fast_path_cannot_take_is_reported_as_the_python_function_reports_it(capture, path):
    event = PATHS[path]()
    session_id = otel_rl.register_session(otel_rl.register_task())
    event("mark_generate_end", session_id=session_id)
    event("mark_generate_start", session_id=12345)
    counts = otel_rl.diagnostics()
    assert (counts.get("phase_end_without_start"), counts.get("unknown_session")) == (1, 1)


def test_after_reset_the_calls_leave_the_registry_they_last_saw_alone(traced):
    task_id = otel_rl.register_task()
    session_id = otel_rl.register_session(task_id)  # the compiled calls now hold this registry
    registry = sessions.STATE.registry
    otel_rl.reset()
    assert otel_rl.register_session(task_id) is None
    assert otel_rl.trace_session_event("mark_generate_start", session_id=session_id) is None
    assert (registry.tasks, list(registry.sessions)) == ({}, [])  # closed at reset, and left so


@compiled
@pytest.mark.parametrize("name", ["trace_session_event", "register_session", "register_task"])
def test_a_compiled_call_keeps_the_python_functions_name_signature_and_docstring(name):
    public = getattr(otel_rl, name)
    python = public.__wrapped__
    assert public is not python
    assert inspect.signature(public) == inspect.signature(python)
    assert (public.__name__, public.__doc__) == (name, python.__doc__)


@compiled
def test_a_session_class_the_compiled_calls_do_not_fill_is_refused_and_changes_nothing(capture):
    class Session:
        __slots__ = ("session_id", "task_id")

    config = {**tracking._record_config(), "SessionState": Session}
    with pytest.raises(TypeError, match="Session"):
        tracking._tracking.configure(config)
    # The configuration in force is whole: a plain session's record is still built compiled.
    session_id = otel_rl.register_session(otel_rl.register_task())
    state = sessions.STATE.registry.sessions[session_id]
    rec = tracking._session_record(state, "accepted", None, 0, None, 5 * S)
    assert (rec[record.NAME], rec[record.SPAN_ID], rec[record.END]) == ("session", 2, 5 * S)


def test_without_the_compiled_twin_the_calls_are_the_python_functions(monkeypatch):
    monkeypatch.setattr(sessions, "_tracking", None)
    python = python_function(otel_rl.register_session)
    assert sessions._compiled(python, lambda fn: pytest.fail("nothing to build")) is python


@pytest.fixture(params=["public", "python"])
def record_path(request, monkeypatch):
    """Finalized sessions' records built compiled (where built) or by the Python steps."""
    if request.param == "python":
        monkeypatch.setattr(tracking, "_session_record", None)
        monkeypatch.setattr(tracking, "_finalize_sessions", None)
    return request.param


def test_a_plain_session_finalized_on_either_path_has_the_same_span_and_record(capture, record_path):
    otel_rl.set_policy_version(3)
    try:
        session_id = otel_rl.register_session(otel_rl.register_task())  # 1 s, 2 s
        otel_rl.trace_session_event("mark_generate_start", session_id=session_id)  # 3 s
        otel_rl.trace_session_event("mark_generate_end", session_id=session_id)  # 4 s
        otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="failed", reason="timeout")  # 5 s
    finally:
        otel_rl.set_policy_version(None)
    assert capture.spans()[1] == {
        "name": "session", "trace_id": 1, "span_id": 2, "parent_id": 1, "start_ns": 2 * S, "end_ns": 5 * S,
        "attributes": {**MAIN, **IDS, "rl.span.kind": "session", "rl.policy.version": 3,
                       "rl.session.status": "failed", "rl.session.reason": "timeout", "rl.session.total_s": 3.0,
                       "rl.session.generate_s": 1.0, "rl.session.generate_count": 1},
        "status": {"code": "ERROR", "description": "timeout"}}
    assert capture.sessions() == [{
        "task_id": 0, "session_id": 0, "rank": 0, "role": "", "step": None, "status": "failed", "reason": "timeout",
        "submit_ts": 2.0, "finalized_ts": 5.0, "total_s": 3.0, "generate_s": 1.0, "reward_s": 0.0, "toolcall_s": 0.0,
        "phase_counts": {"generate": 1, "reward": 0, "toolcall": 0},
        "phases": {"generate": [{"start_ts": 3.0, "end_ts": 4.0}]}, "counters": {}, "policy_versions": [3],
        "trace_id": span_hex(1), "span_id": span_hex(2)}]


def test_a_session_without_phases_finalized_on_either_path_has_no_bundle(capture, record_path):
    session_id = otel_rl.register_session(otel_rl.register_task())  # 1 s, 2 s
    otel_rl.trace_session_event("mark_finalized", session_id=session_id)  # 3 s
    assert [(s["name"], s["start_ns"] // S, s["end_ns"] // S) for s in capture.spans()] == [
        ("task", 1, 3), ("session", 2, 3)]
    assert capture.sessions()[0]["phases"] == {}


@compiled
def test_a_session_with_more_than_its_ids_takes_the_python_steps(capture):
    # A counter, a reward (extra attributes) or a step in force: the compiled builder leaves them.
    session_id = otel_rl.register_session(otel_rl.register_task())
    otel_rl.increment_counter("retries", session_id=session_id)
    state = sessions.STATE.registry.sessions[session_id]
    assert tracking._session_record(state, "accepted", None, 0, None, 5 * S) is None
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, reward=0.5)
    assert capture.sessions()[0]["counters"] == {"retries": 1}


def finalize_a_task_of_two(status):
    """A task with two sessions (one with a marked phase) finalized as a whole; returns their ids."""
    task_id = otel_rl.register_task()  # 1 s
    first, second = otel_rl.register_session(task_id), otel_rl.register_session(task_id)  # 2 s, 3 s
    otel_rl.trace_session_event("mark_generate_start", session_id=first)  # 4 s
    otel_rl.trace_session_event("mark_generate_end", session_id=first)  # 5 s
    otel_rl.trace_session_event("mark_finalized", task_id=task_id, status=status)  # 6 s (sessions), 7 s (task)
    return first, second


def test_a_task_finalized_on_either_path_has_the_same_spans_records_and_bookkeeping(capture, record_path):
    first, second = finalize_a_task_of_two("failed")
    registry = sessions.STATE.registry
    assert [(s["name"], s["span_id"], s["start_ns"] // S, s["end_ns"] // S, s.get("status")) for s in capture.spans()
            if s["name"] != "generate"] == [
        ("task", 1, 1, 7, None),
        ("session", 2, 2, 6, {"code": "ERROR", "description": "failed"}),
        ("session", 3, 3, 6, {"code": "ERROR", "description": "failed"})]
    assert capture.spans()[0]["attributes"]["rl.task.failed"] == 2
    assert sorted((r["session_id"], r["status"], r["reason"], r["finalized_ts"]) for r in capture.sessions()) == [
        (first, "failed", None, 6.0), (second, "failed", None, 6.0)]
    assert registry.recent[first] == (0, 1, 2, None, (("generate", 4 * S, 5 * S, registry.recent[first][4][0][3],
                                                       None, None, None),))
    assert registry.recent[second] == (0, 1, 3, None, ())
    assert (registry.sessions, registry.tasks, list(registry._finalized)) == ({}, {}, [first, second])


@compiled
def test_a_task_the_compiled_finalize_cannot_take_changes_nothing_there(capture):
    registry = sessions.STATE.registry
    task_id = otel_rl.register_task()
    session_id = otel_rl.register_session(task_id)
    task = registry.tasks[task_id]
    finalize = tracking._finalize_sessions
    otel_rl.increment_counter("retries", session_id=session_id)  # a session the compiled record leaves
    assert finalize(registry, task, "accepted", tracking.time_ns, tracking.current_id) is False
    registry.sessions[session_id].counters = None
    assert finalize(registry, task, "unheard-of", tracking.time_ns, tracking.current_id) is False
    with otel_rl.step_scope(3):  # a step in force goes on the records: the Python steps'
        assert finalize(registry, task, "accepted", tracking.time_ns, tracking.current_id) is False
    with registry._lock:  # another thread inside the registry
        assert finalize(registry, task, "accepted", tracking.time_ns, tracking.current_id) is False
    assert list(registry.sessions) == [session_id] and task.open_sessions == {session_id}
    assert finalize(registry, task, "accepted", tracking.time_ns, tracking.current_id) is True
    assert (list(registry.sessions), task.open_sessions, task.counts) == ([], set(), {"accepted": 1})


def test_the_compiled_steps_leave_the_registrys_lock_free(capture):
    # They take and free the lock without its methods (its struct's flag and PyThread lock):
    # what locked() reads, and what another acquire needs, must be as the methods leave them.
    registry = sessions.STATE.registry
    task_id = otel_rl.register_task()
    assert registry._lock.locked() is False
    otel_rl.register_session(task_id)
    assert registry._lock.locked() is False
    otel_rl.trace_session_event("mark_finalized", task_id=task_id)
    assert registry._lock.locked() is False
    assert registry._lock.acquire(False) is True
    registry._lock.release()


def task_spans(capture):
    """The task spans captured, as (span id, start s, end s, attributes)."""
    return [(s["span_id"], s["start_ns"] // S, s["end_ns"] // S, s["attributes"]) for s in capture.spans()
            if s["name"] == "task"]


def task_attributes(task_id, sessions, **counts):
    """A task span's attributes at its end: its sessions, its counts by status and its ``rate``."""
    return {**MAIN, "rl.span.kind": "task", "rl.task.id": task_id, "rl.task.sessions": sessions,
            "rl.task.accepted": counts.get("accepted", 0), "rl.task.rejected": counts.get("rejected", 0),
            "rl.task.failed": counts.get("failed", 0), "rl.task.dropped": counts.get("dropped", 0),
            "rl.task.acceptance_rate": counts.get("rate", 0.0)}


@pytest.mark.parametrize("path", REGISTER_TASK)
def test_tasks_registered_on_either_path_record_the_same_spans(capture, path):
    register = REGISTER_TASK[path]()
    first, second = register(), register("t-7")  # 1 s, 2 s
    otel_rl.register_session(second)  # 3 s
    otel_rl.trace_session_event("mark_finalized", task_id=first)  # 4 s: no session, the task ends
    otel_rl.trace_session_event("mark_finalized", task_id=second, status="rejected")  # 5 s, 6 s
    assert (first, second) == (0, "t-7")
    assert task_spans(capture) == [(1, 1, 4, task_attributes(0, 0)),
                                   (2, 2, 6, task_attributes("t-7", 1, rejected=1))]
    assert capture.spans()[1]["trace_id"] == 2 and capture.spans()[1]["parent_id"] is None


@pytest.mark.parametrize("path", REGISTER_TASK)
def test_a_task_registered_in_a_step_and_a_scope_carries_the_step_and_links_the_scope(capture, path):
    register = REGISTER_TASK[path]()
    with otel_rl.step_scope(3), otel_rl.trace_scope("rollout"):
        task_id = register()
    otel_rl.trace_session_event("mark_finalized", task_id=task_id)
    task = next(s for s in capture.spans() if s["name"] == "task")
    scope = next(s for s in capture.spans() if s["name"] == "rollout")
    assert task["attributes"]["rl.step"] == 3 and task["parent_id"] is None
    assert [(link["trace_id"], link["span_id"]) for link in task["links"]] == [(scope["trace_id"], scope["span_id"])]


@pytest.mark.expect_diagnostics("task_reregistered")
@pytest.mark.parametrize("path", REGISTER_TASK)
def test_a_task_registered_twice_on_either_path_is_reported_and_the_first_ended(capture, path):
    register = REGISTER_TASK[path]()
    register("t")  # 1 s
    register("t")  # 2 s: the first ends (3 s)
    otel_rl.trace_session_event("mark_finalized", task_id="t")  # 4 s
    assert otel_rl.diagnostics()["task_reregistered"] == 1
    assert [(span_id, start, end) for span_id, start, end, _ in task_spans(capture)] == [(1, 1, 3), (2, 2, 4)]


@pytest.mark.parametrize("path", PATHS)
def test_a_task_finalized_whole_on_either_path_records_the_same_spans_and_records(capture, path):
    event = PATHS[path]()
    task_id = otel_rl.register_task()  # 1 s
    first, second = otel_rl.register_session(task_id), otel_rl.register_session(task_id)  # 2 s, 3 s
    event("mark_finalized", task_id=task_id)  # 4 s (sessions, accepted), 5 s (task)
    assert task_spans(capture) == [(1, 1, 5, task_attributes(0, 2, accepted=2, rate=1.0))]
    assert [(r["session_id"], r["status"], r["finalized_ts"]) for r in capture.sessions()] == [
        (first, "accepted", 4.0), (second, "accepted", 4.0)]
    registry = sessions.STATE.registry
    assert (registry.tasks, registry.sessions, list(registry._finalized)) == ({}, {}, [first, second])


@pytest.mark.parametrize("path", PATHS)
def test_a_task_finalized_with_a_reason_or_a_reward_keeps_them_on_either_path(capture, path):
    event = PATHS[path]()
    task_id = otel_rl.register_task()
    otel_rl.register_session(task_id)
    event("mark_finalized", task_id=task_id, status="failed", reason="timeout", reward=0.5)
    assert [(r["status"], r["reason"], r["reward"]) for r in capture.sessions()] == [("failed", "timeout", 0.5)]
    assert task_spans(capture)[0][3]["rl.task.failed"] == 1


@pytest.mark.expect_diagnostics("unknown_task")
@pytest.mark.parametrize("path", PATHS)
def test_an_unknown_task_finalized_on_either_path_is_reported(capture, path):
    PATHS[path]()("mark_finalized", task_id="never registered")
    assert otel_rl.diagnostics()["unknown_task"] == 1


def a_task_of_one_session():
    """A registered task with one open session: (task id, the pipeline its records go to)."""
    task_id = otel_rl.register_task()
    otel_rl.register_session(task_id)
    return task_id, sessions.STATE.pipeline


@compiled
def test_a_finalized_tasks_queued_records_stay_out_of_the_collectors_generations(capture):
    # Waiting for the sender, tracked records were carried into the oldest generation, whose
    # growth sets off full collections of the user's whole heap.
    task_id, pipeline = a_task_of_one_session()
    otel_rl.trace_session_event("mark_finalized", task_id=task_id)
    queued = {rec[record.NAME]: gc.is_tracked(rec) for rec in pipeline.queue}
    assert queued == {"session": False, "task": False}


@compiled
@pytest.mark.expect_diagnostics("spans_dropped_queue_full")
def test_a_task_finalized_into_a_full_queue_has_its_records_counted_as_dropped(capture):
    task_id, pipeline = a_task_of_one_session()
    pipeline.max_queue_size = len(pipeline.queue)  # full: the session's and the task's record are dropped
    otel_rl.trace_session_event("mark_finalized", task_id=task_id)
    assert otel_rl.diagnostics()["spans_dropped_queue_full"] == 2


@compiled
def test_a_task_finalized_wakes_the_export_thread_once_its_records_reach_wake_at(capture):
    task_id, pipeline = a_task_of_one_session()
    # An event of the test's own: the export thread waits on the pipeline's, and would clear it.
    thread_wake, pipeline.wake = pipeline.wake, threading.Event()
    try:
        pipeline.wake_at = len(pipeline.queue) + 2  # the session's record, then the task's
        otel_rl.trace_session_event("mark_finalized", task_id=task_id)
        assert pipeline.wake.is_set() and len(pipeline.queue) == pipeline.wake_at
    finally:
        pipeline.wake = thread_wake


class RefusingQueue(list):
    """A queue whose appends fail: an error inside the compiled finalize, after its sessions left."""

    def append(self, item):
        raise RuntimeError("no room")


@compiled
@pytest.mark.expect_diagnostics("internal_error")
def test_an_error_inside_the_compiled_task_finalize_is_reported_not_raised(capture):
    task_id, pipeline = a_task_of_one_session()
    queue, pipeline.queue = pipeline.queue, RefusingQueue()
    try:
        assert otel_rl.trace_session_event("mark_finalized", task_id=task_id) is None
    finally:
        pipeline.queue = queue
    assert otel_rl.diagnostics()["internal_error"] == 1
