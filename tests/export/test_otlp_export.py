"""Spans reach real OTLP receivers (gRPC and HTTP) configured by standard env vars."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace import TracerProvider

from support import export_to, read_sessions, unreachable_endpoint

import otel_rl


def _run_one_session(task_id="t-1"):
    otel_rl.set_task_id(otel_rl.register_task(task_id))
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    with otel_rl.trace_session_phase("generate", start_payload={"attempt": 1}):
        with otel_rl.trace_scope("tokenize", category="compute"):
            pass
    with otel_rl.trace_session_phase("reward"):
        pass
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    return session_id


def _by_name(spans):
    return {s["name"]: s for s in spans}


def test_session_spans_arrive_over_otlp_with_parentage_and_typed_attributes(
        otlp_receiver, monkeypatch, tmp_path):
    receiver = otlp_receiver
    export_to(monkeypatch, receiver)
    otel_rl.configure(fileroot=str(tmp_path), rank=3, role="rollout",
                      tracer_provider=TracerProvider(shutdown_on_exit=False))
    session_id = _run_one_session()
    otel_rl.save(force=True)
    spans = _by_name(receiver.wait_for_spans(5))
    assert sorted(spans) == ["generate", "reward", "session", "task", "tokenize"]
    task, session = spans["task"], spans["session"]
    assert task["parent_span_id"] is None
    assert session["parent_span_id"] == task["span_id"]
    assert spans["generate"]["parent_span_id"] == session["span_id"]
    assert spans["tokenize"]["parent_span_id"] == spans["generate"]["span_id"]
    assert len({s["trace_id"] for s in spans.values()}) == 1
    assert spans["generate"]["attributes"]["rl.args.attempt"] == 1
    assert spans["tokenize"]["attributes"]["rl.category"] == "compute"
    assert spans["tokenize"]["attributes"]["rl.session.id"] == session_id
    assert spans["tokenize"]["attributes"]["rl.task.id"] == "t-1"
    assert isinstance(spans["tokenize"]["attributes"]["thread.id"], int)
    assert session["attributes"]["rl.session.status"] == "accepted"
    assert session["resource"]["rl.rank"] == 3
    assert session["resource"]["rl.role"] == "rollout"
    otel_rl.shutdown()  # before the receiver stops, so exit is not spent on retries


def test_sampled_out_traces_are_not_exported(grpc_receiver, monkeypatch, tmp_path):
    export_to(monkeypatch, grpc_receiver)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    with otel_rl.trace_scope("dropped"):
        pass
    otel_rl.save(force=True)
    assert grpc_receiver.spans() == []
    otel_rl.shutdown()


def test_session_metrics_reach_the_collector_when_an_endpoint_is_set(otlp_receiver, monkeypatch, tmp_path):
    export_to(monkeypatch, otlp_receiver)
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    _run_one_session()
    otel_rl.save(force=True)
    points = otlp_receiver.wait_for_metrics({"rl.sessions", "rl.session.duration",
                                              "rl.session.phase.duration"})
    sessions = [p for p in points if p["name"] == "rl.sessions"]
    assert [(p["attributes"], p["value"]) for p in sessions] == [({"rl.session.status": "accepted"}, 1)]
    phases = {p["attributes"]["rl.phase"]: p["count"] for p in points
              if p["name"] == "rl.session.phase.duration"}
    assert phases == {"generate": 1, "reward": 1}
    otel_rl.shutdown()


@pytest.mark.parametrize("export_process", [True, False])
def test_save_does_not_wait_for_an_unreachable_collector(monkeypatch, tmp_path, export_process):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", unreachable_endpoint())
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    # A save that waited for the collector would wait out the whole bound (5 s); one that
    # does not returns after writing the files. Half the bound tells them apart on a busy
    # machine too.
    bound_ms = 5000
    otel_rl.configure(fileroot=str(tmp_path), export_process=export_process, shutdown_timeout_ms=bound_ms)
    _run_one_session()
    started = time.monotonic()
    otel_rl.save(force=True)
    waited = time.monotonic() - started
    assert waited < bound_ms / 2000
    assert [r["status"] for r in read_sessions(otel_rl.settings().run_dir)] == ["accepted"]
    otel_rl.shutdown()
