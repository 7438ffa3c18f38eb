"""Counters on the timeline: gauges, sessions in flight and GPU memory as Perfetto counter tracks."""

from __future__ import annotations

import sys
import types

from support import read_jsonl, read_trace
from support.capture import S
from waiting import wait_until

import otel_rl


def counter_events(run_dir):
    otel_rl.save(force=True)
    return [(e["name"], e["args"]["value"]) for e in read_trace(f"{run_dir}/traces-r0.jsonl") if e.get("ph") == "C"]


def test_a_gauge_is_a_counter_event_beside_its_slice(capture):
    otel_rl.set_gauge("rollout.buffer", 3)  # a zero-length span at 1 s
    with otel_rl.trace_scope("step"):  # 2 s to 4 s
        otel_rl.set_gauge("rollout.buffer", 5)  # an event of the scope at 3 s
    counters = [e for e in capture.records() if e["ph"] == "C"]
    assert counters == [
        {"ph": "C", "name": "rollout.buffer", "pid": 1, "tid": 2, "ts": 1e6, "args": {"value": 3.0}},
        {"ph": "C", "name": "rollout.buffer", "pid": 1, "tid": 2, "ts": 3e6, "args": {"value": 5.0}},
    ]


def test_sessions_in_flight_are_sampled_by_the_export_thread(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="e", trial_name="t", rank=0, export_interval_ms=10)
    run_dir = otel_rl.settings().run_dir
    task_id = otel_rl.register_task()
    sessions = [otel_rl.register_session(task_id) for _ in range(3)]
    wait_until(lambda: ("rl.sessions.in_flight", 3) in counter_events(run_dir), what="3 sessions in flight")
    for session_id in sessions:
        otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    wait_until(lambda: counter_events(run_dir)[-1] == ("rl.sessions.in_flight", 0), what="none in flight")
    values = [value for name, value in counter_events(run_dir) if name == "rl.sessions.in_flight"]
    assert values[0] > 0 and values[-1] == 0
    assert all(a != b for a, b in zip(values, values[1:]))  # written only when the number changed


def test_a_process_without_sessions_writes_no_in_flight_counter(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="e", trial_name="t", rank=0, export_interval_ms=10)
    for _ in range(3):
        with otel_rl.trace_scope("work"):
            pass
        otel_rl.save(force=True)
    assert counter_events(otel_rl.settings().run_dir) == []


def test_gpu_memory_is_sampled_at_the_end_of_each_step_when_cuda_is_up(capture, monkeypatch):
    cuda = types.SimpleNamespace(is_initialized=lambda: True, memory_allocated=lambda: 2048)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    with otel_rl.step_scope(0):  # 1 s to 2 s, the sample at 3 s
        pass
    assert [e for e in capture.records() if e["ph"] == "C"] == [
        {"ph": "C", "name": "rl.gpu.memory.allocated", "pid": 1, "tid": 2, "ts": 3 * S / 1000,
         "args": {"value": 2048}}]


def test_without_cuda_no_gpu_memory_is_sampled(capture, monkeypatch):
    cuda = types.SimpleNamespace(is_initialized=lambda: False, memory_allocated=lambda: 1)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    with otel_rl.step_scope(0):
        pass
    assert [e for e in capture.records() if e["ph"] == "C"] == []


def test_gauges_reach_the_metrics_file_by_name(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="e", trial_name="t", rank=0)
    otel_rl.set_gauge("rollout.buffer", 7)
    otel_rl.set_gauge("rollout.buffer", 9)
    run_dir = otel_rl.settings().run_dir
    otel_rl.shutdown()
    points = [(p["attributes"], p["value"]) for line in read_jsonl(f"{run_dir}/metrics-r0.jsonl")
              for rm in line["resource_metrics"] for sm in rm["scope_metrics"] for m in sm["metrics"]
              if m["name"] == "rl.gauge" for p in m["data"]["data_points"]]
    assert points[-1] == ({"rl.gauge.name": "rollout.buffer"}, 9.0)
