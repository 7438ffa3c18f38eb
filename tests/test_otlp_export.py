"""Spans reach real OTLP receivers (gRPC and HTTP) configured by standard env vars."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider

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


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_session_spans_arrive_over_otlp_with_parentage_and_typed_attributes(
        protocol, grpc_receiver, http_receiver, monkeypatch, tmp_path):
    receiver = grpc_receiver if protocol == "grpc" else http_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
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
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", grpc_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    with otel_rl.trace_scope("dropped"):
        pass
    otel_rl.save(force=True)
    assert grpc_receiver.spans() == []
    otel_rl.shutdown()


def test_session_metrics_reach_the_collector_when_an_endpoint_is_set(grpc_receiver, monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", grpc_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    _run_one_session()
    otel_rl.save(force=True)
    points = grpc_receiver.wait_for_metrics({"rl.sessions", "rl.session.duration",
                                              "rl.session.phase.duration"})
    sessions = [p for p in points if p["name"] == "rl.sessions"]
    assert [(p["attributes"], p["value"]) for p in sessions] == [({"rl.session.status": "accepted"}, 1)]
    phases = {p["attributes"]["rl.phase"]: p["count"] for p in points
              if p["name"] == "rl.session.phase.duration"}
    assert phases == {"generate": 1, "reward": 1}
    otel_rl.shutdown()


@pytest.mark.parametrize("export_process", [True, False])
def test_save_does_not_wait_for_an_unreachable_collector(monkeypatch, tmp_path, export_process):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    otel_rl.configure(fileroot=str(tmp_path), export_process=export_process, shutdown_timeout_ms=1500)
    _run_one_session()
    started = time.monotonic()
    otel_rl.save(force=True)
    waited = time.monotonic() - started
    # The files are written by then; the collector's absence costs save() nothing like the bound.
    assert waited < 1.0
    with open(os.path.join(otel_rl.settings().run_dir, "sessions-r0.jsonl")) as f:
        assert [json.loads(line)["status"] for line in f] == ["accepted"]
    otel_rl.shutdown()
