"""Torch profiler windows (live and per step) merged onto otel_rl's timeline, and
CUDA-synchronised timing (a no-op on CPU; its logic checked with stand-in CUDA events)."""

from __future__ import annotations

import gzip
import json
import os
import sys
import time

import orjson
import pytest
from support import one, read_trace

import otel_rl
from otel_rl import tracing
from otel_rl._internal import guard, keys
from otel_rl._internal.recording.spans import LeanSpan
from otel_rl._internal.control.torch_profiler import PROFILER, align_events
from otel_rl.convert import convert

try:
    import torch
except ImportError:  # the alignment and no-torch tests still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


@pytest.fixture(autouse=True)
def _clean():
    guard.clear()
    yield
    PROFILER.shutdown(30)


def configure(tmp_path, **overrides):
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="exp", trial_name="t1", rank=0,
                      export_process=False, export_interval_ms=20, **overrides)
    return otel_rl.settings().run_dir


def work():
    a = torch.randn(64, 64)
    for _ in range(3):
        a = torch.mm(a, a).tanh()
    return a


def converted(run_dir, tmp_path) -> list[dict]:
    out = tmp_path / "merged.json"
    convert([run_dir], str(out))
    return read_trace(out)


def inside(event, outer) -> bool:
    return outer["ts"] <= event["ts"] and event["ts"] + event["dur"] <= outer["ts"] + outer["dur"]


@needs_torch
def test_a_live_window_lands_inside_the_enclosing_scope_in_the_ranks_process(tmp_path):
    run_dir = configure(tmp_path)
    response = otel_rl.start_profile(run_id="live-1")  # what POST /start_profile does
    assert response["torch"]["started"] is True
    with otel_rl.trace_scope("train.forward"):
        work()
    otel_rl.stop_profile()
    otel_rl.shutdown()  # spans flushed, trace written

    assert os.path.exists(os.path.join(run_dir, "torch-r0-live-1.trace.json.gz"))
    merged = converted(run_dir, tmp_path)
    (scope,) = [e for e in merged if e.get("ph") == "X" and e["name"] == "train.forward"]
    mms = [e for e in merged if e.get("ph") == "X" and e["name"] == "aten::mm"]
    assert len(mms) == 3
    assert all(inside(mm, scope) for mm in mms)
    assert {mm["pid"] for mm in mms} == {scope["pid"]} == {os.getpid()}
    threads = {e["tid"]: e["args"]["name"] for e in merged
               if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == scope["pid"]}
    assert threads[mms[0]["tid"]].startswith("torch · ")
    processes = [e["args"]["name"] for e in merged if e.get("ph") == "M" and e["name"] == "process_name"]
    assert processes == ["Rank 0, Process"]  # one process: the rank's spans and its kernels


@needs_torch
def test_chosen_steps_run_under_the_profiler_and_others_do_not(tmp_path):
    run_dir = configure(tmp_path, torch_profile_steps="1")
    for step in range(3):
        with otel_rl.step_scope(step):
            work()
    otel_rl.shutdown()

    assert sorted(n for n in os.listdir(run_dir) if n.startswith("torch-")) == [
        "torch-r0-step1.trace.json.gz"]
    merged = converted(run_dir, tmp_path)
    steps = {e["args"][keys.STEP]: e for e in merged if e.get("ph") == "X" and e["name"] == "step"}
    mms = [e for e in merged if e.get("ph") == "X" and e["name"] == "aten::mm"]
    assert len(mms) == 3 and all(inside(mm, steps[1]) for mm in mms)


@needs_torch
def test_the_trace_names_its_rank_and_uses_the_wall_clock(tmp_path):
    run_dir = configure(tmp_path, torch_profile_steps=[0])
    before_us = time.time_ns() / 1000
    with otel_rl.step_scope(0):
        work()
    after_us = time.time_ns() / 1000
    otel_rl.shutdown()

    with gzip.open(os.path.join(run_dir, "torch-r0-step0.trace.json.gz")) as f:
        doc = orjson.loads(f.read())
    assert doc[keys.TRACE_JOIN_KEY]["traces_file"] == "traces-r0.jsonl"
    assert doc[keys.TRACE_JOIN_KEY]["pid"] == os.getpid()
    assert "baseTimeNanoseconds" not in doc
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert ops and all(before_us <= e["ts"] <= after_us for e in ops)


@needs_torch
def test_the_expensive_options_come_from_the_settings_and_the_request(tmp_path, monkeypatch):
    made = []

    class FakeProfile:
        def __init__(self, **kwargs):
            made.append(kwargs)

        def start(self):
            pass

        def stop(self):
            pass

        def export_chrome_trace(self, path):
            with open(path, "w") as f:
                json.dump({"traceEvents": []}, f)

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    configure(tmp_path, torch_record_shapes=True, torch_with_flops=True, torch_profile_steps=[0])
    with otel_rl.step_scope(0):
        pass
    otel_rl.start_profile(run_id="opts", config={"with_stack": True, "record_shapes": False})
    otel_rl.stop_profile()

    step_window, live_window = made
    assert step_window["activities"] == [torch.profiler.ProfilerActivity.CPU]  # no CUDA here
    assert {k: step_window[k] for k in ("record_shapes", "profile_memory", "with_stack", "with_flops")} == {
        "record_shapes": True, "profile_memory": False, "with_stack": False, "with_flops": True}
    assert {k: live_window[k] for k in ("record_shapes", "with_stack", "with_flops")} == {
        "record_shapes": False, "with_stack": True, "with_flops": True}


@needs_torch
def test_a_profiler_that_fails_to_start_is_reported_once_and_work_goes_on(tmp_path, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("CUPTI says no")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    run_dir = configure(tmp_path, torch_profile_steps="0,1")
    for step in range(2):
        with otel_rl.step_scope(step):
            work()
    response = otel_rl.start_profile(run_id="live")

    assert response["torch"] == {"requested": True, "started": False, "trace": None,
                                 "error": "torch profiler failed to start: RuntimeError('CUPTI says no')"}
    assert response["events"]["active"] is True  # request events still recorded
    assert otel_rl.diagnostics()["torch_profiler_start_failed"] == 3
    otel_rl.shutdown()
    assert not [n for n in os.listdir(run_dir) if n.startswith("torch-")]


def test_without_torch_windows_are_skipped_and_work_goes_on(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    monkeypatch.setitem(sys.modules, "torch.profiler", None)
    run_dir = configure(tmp_path, torch_profile_steps=[0])
    with otel_rl.step_scope(0):
        pass
    response = otel_rl.start_profile(run_id="live")

    assert response["torch"]["started"] is False
    assert "torch profiler unavailable" in response["torch"]["error"]
    assert response["events"]["active"] is True
    assert otel_rl.diagnostics()["torch_profiler_unavailable"] == 2
    otel_rl.shutdown()
    assert not [n for n in os.listdir(run_dir) if n.startswith("torch-")]


@needs_torch
def test_a_second_window_while_one_runs_is_refused(tmp_path):
    configure(tmp_path, torch_profile_steps=[5])
    otel_rl.start_profile(run_id="live")
    with otel_rl.step_scope(5):  # the step window is skipped, the live one goes on
        work()
    assert PROFILER.active_run_id() == "live"
    assert otel_rl.diagnostics()["torch_profiler_busy"] == 1


# --- CUDA-synchronised timing ---------------------------------------------------------------------
@needs_torch
def test_cuda_sync_on_a_machine_without_cuda_is_a_no_op(traced, monkeypatch):
    def no_gpu(*args, **kwargs):
        raise AssertionError("touched CUDA")

    monkeypatch.setattr(torch.cuda, "Event", no_gpu)
    monkeypatch.setattr(torch.cuda, "synchronize", no_gpu)
    otel_rl.configure(fileroot=str(traced.run_root), tracer_provider=traced.provider, cuda_sync=True)

    assert type(otel_rl.trace_scope("x")) is LeanSpan
    with otel_rl.step_scope(0):
        with otel_rl.trace_scope("train.backward"):
            pass
    spans = traced.spans()
    assert keys.CUDA_ELAPSED_MS not in one(spans, "train.backward")["attributes"]
    assert keys.CUDA_ELAPSED_MS not in one(spans, "step")["attributes"]


class FakeCudaEvent:
    """Stands in for torch.cuda.Event: remembers when the GPU was waited for."""

    waits: list[int] = []

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.recorded_ns = None

    def record(self):
        self.recorded_ns = time.time_ns()

    def synchronize(self):
        FakeCudaEvent.waits.append(time.time_ns())

    def elapsed_time(self, end):
        return (end.recorded_ns - self.recorded_ns) / 1e6


@needs_torch
def test_synchronised_scopes_wait_for_the_gpu_before_each_timestamp(traced, monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", FakeCudaEvent)
    FakeCudaEvent.waits = []
    tracing.set_cuda_sync(True)  # what configure() does when CUDA is available
    try:
        with otel_rl.trace_scope("train.backward"):
            time.sleep(0.01)

        @otel_rl.trace_perf("optimizer.step")
        def step():
            pass

        step()
    finally:
        tracing.set_cuda_sync(False)

    span = one(traced.spans(), "train.backward")
    start_wait, end_wait = FakeCudaEvent.waits[:2]
    assert start_wait <= span["start_ns"] and end_wait <= span["end_ns"]
    assert span["attributes"][keys.CUDA_ELAPSED_MS] >= 10
    assert keys.CUDA_ELAPSED_MS in one(traced.spans(), "optimizer.step")["attributes"]


# --- alignment ------------------------------------------------------------------------------------
def test_kineto_events_are_moved_onto_the_epoch_clock_and_grouped_under_the_rank():
    base_ns = 1_790_857_026_000_000_000  # Kineto's base: the wall clock at boot
    pid = 4242
    events = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": pid, "args": {"name": "thread 4242 (python)"}},
        {"ph": "X", "name": "aten::mm", "pid": pid, "tid": pid, "ts": 4_497_142_023_377.5, "dur": 9.0},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "X", "name": "gemm", "pid": 0, "tid": 7, "ts": 4_497_142_023_380.0, "dur": 5.0},
        {"ph": "X", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 4_497_142_023_000.0, "dur": 1000.0},
    ]
    out = align_events(events, base_ns, {"pid": pid, "rank": 3, "role": "actor", "run_id": "w"})

    mm = next(e for e in out if e["name"] == "aten::mm")
    assert mm["ts"] == 4_497_142_023_377.5 + base_ns / 1000 and mm["pid"] == pid
    assert mm["tid"] == (1 << 31) + pid  # clear of otel_rl's own track ids
    assert not [e for e in out if e["name"] == "process_name" and e["pid"] == pid]
    gpu = next(e for e in out if e["name"] == "process_name" and e["pid"] == 0)
    assert gpu["args"]["name"] == "rank 3 · actor · GPU 0"
    window = next(e for e in out if e["name"] == "PyTorch Profiler (0)")
    assert window["pid"] == pid and isinstance(window["tid"], int)


def test_the_converter_aligns_a_plain_torch_trace_whose_base_is_the_boot_time(tmp_path):
    base_ns = 1_790_857_026_000_000_000
    doc = {"baseTimeNanoseconds": base_ns, "traceEvents": [
        {"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 4_497_142_023_377.0, "dur": 9.0}]}
    (tmp_path / "plain.pt.trace.json").write_bytes(orjson.dumps(doc))
    out = tmp_path / "out.json"
    convert([str(tmp_path / "plain.pt.trace.json")], str(out))
    (mm,) = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"]
    assert mm["ts"] == 4_497_142_023_377.0 + base_ns / 1000
