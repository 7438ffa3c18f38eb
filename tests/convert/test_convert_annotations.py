"""The converter joins what the trainer said of a session (consume, annotate) into the session's span."""

from __future__ import annotations

import json

import orjson

import otel_rl
from otel_rl.convert import convert
from otel_rl.convert.annotations import SessionNotes


def finished_session(task_id):
    session_id = otel_rl.register_session(task_id)
    otel_rl.trace_session_event("mark_generate_start", session_id=session_id)
    otel_rl.trace_session_event("mark_generate_end", session_id=session_id)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    return session_id


def session_args(capture, tmp_path):
    otel_rl.save(force=True)
    out = tmp_path / "trace.json"
    stats = convert([capture.run_dir], str(out))
    events = json.loads(out.read_text())["traceEvents"]
    return stats, {e["args"]["rl.session.id"]: e["args"] for e in events if e.get("name") == "session"}


def test_a_consumed_and_annotated_session_span_carries_the_step_the_staleness_and_the_values(capture, tmp_path):
    otel_rl.set_policy_version(1)
    task_id = otel_rl.register_task()
    session_id = finished_session(task_id)
    otel_rl.set_policy_version(3)
    with otel_rl.step_scope(7):
        otel_rl.consume(session_id)
    otel_rl.annotate(session_id, task_id, advantage=0.25, **{"reward.format": 1.0})
    otel_rl.set_policy_version(None)
    stats, args = session_args(capture, tmp_path)
    assert {k: v for k, v in args[session_id].items() if k.startswith(("rl.session.c", "rl.session.s", "rl.ann"))} == {
        "rl.session.consumed_step": 7, "rl.session.staleness": 2, "rl.session.crossed_update": False,
        "rl.session.status": "accepted", "rl.annotation.advantage": 0.25, "rl.annotation.reward.format": 1.0}
    assert stats.annotated == 1


def test_sessions_nothing_was_said_of_are_copied_as_they_were(capture, tmp_path):
    task_id = otel_rl.register_task()
    said, unsaid = finished_session(task_id), finished_session(task_id)
    otel_rl.annotate(said, task_id, advantage=1.0)
    _stats, args = session_args(capture, tmp_path)
    assert "rl.annotation.advantage" in args[said]
    assert not any(k.startswith(("rl.annotation.", "rl.session.consumed")) for k in args[unsaid])


def test_notes_join_lines_in_the_older_id_names_and_past_a_nested_id_key():
    notes = SessionNotes()
    notes.add({"kind": "annotate", "span_id": "00000000000000aa", "values": {"advantage": 1.0}})
    older = orjson.dumps({"ph": "X", "name": "session", "args": {"span_id": "00000000000000aa"}})
    nested = orjson.dumps({"ph": "X", "name": "session", "args": {"meta": {"id": "zz"}, "id": "00000000000000aa"}})
    joined = notes.join(older + b",\n" + nested).split(b",\n")
    assert [orjson.loads(line)["args"].get("rl.annotation.advantage") for line in joined] == [1.0, 1.0]
