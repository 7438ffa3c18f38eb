"""Phase marks (``trace_session_event("mark_<phase>_start" / "_end")``): the compiled
path and the Python function record the same phases, and the compiled one hands every
call it does not take to the Python function unchanged."""

from __future__ import annotations

import inspect
import sys

import pytest
from support.capture import MAIN_THREAD as MAIN
from support.capture import S

import otel_rl
from otel_rl import sessions

compiled = pytest.mark.skipif(sessions.trace_session_event is getattr(sessions.trace_session_event, "__wrapped__", None)
                              or not hasattr(sessions.trace_session_event, "__wrapped__"),
                              reason="built without a C compiler")

#: Both ways a mark can run: the public callable (compiled where built) and the Python function.
PATHS = {"public": lambda: otel_rl.trace_session_event,
         "python": lambda: getattr(otel_rl.trace_session_event, "__wrapped__", otel_rl.trace_session_event)}

IDS = {"rl.task.id": 0, "rl.session.id": 0}


def phase_span(name, span_id, start_s, end_s, **attributes):
    """A marked phase of session 0 (span 2 of trace 1), as the exporter builds it."""
    return {"name": name, "trace_id": 1, "span_id": span_id, "parent_id": 2, "start_ns": start_s * S,
            "end_ns": end_s * S, "attributes": {**MAIN, **IDS, "rl.span.kind": "phase", "rl.phase": name,
                                                  **attributes}}


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


def test_marks_cost_nothing_while_sessions_are_off():
    otel_rl.reset()
    assert otel_rl.trace_session_event("mark_generate_start", session_id=0) is None


@compiled
def test_the_public_callable_keeps_the_python_functions_name_signature_and_docstring():
    python = otel_rl.trace_session_event.__wrapped__
    assert inspect.signature(otel_rl.trace_session_event) == inspect.signature(python)
    assert (otel_rl.trace_session_event.__name__, otel_rl.trace_session_event.__doc__) == (
        "trace_session_event", python.__doc__)


def test_without_the_compiled_twin_marks_run_in_the_python_function(monkeypatch):
    monkeypatch.setitem(sys.modules, "otel_rl._internal.recording._marks", None)
    python = getattr(otel_rl.trace_session_event, "__wrapped__", otel_rl.trace_session_event)
    assert sessions._with_compiled_marks(python) is python
