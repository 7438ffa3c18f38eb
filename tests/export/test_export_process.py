"""The exporter process: same spans on the wire as in-process export, and no loss when it dies."""

from __future__ import annotations

import collections
import gc
import os
import signal
import time
import weakref

import pytest
from opentelemetry.sdk.trace import TracerProvider
from support import export_to, read_trace, run_python, slice_names, slices
from waiting import wait_until

import otel_rl
from otel_rl.convert import main as convert_main
from otel_rl._internal.state import STATE


def _workload():
    with otel_rl.step_scope(1):
        task_id = otel_rl.register_task()
    otel_rl.set_task_id(task_id)
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    with otel_rl.trace_session_phase("generate", start_payload={"turn": 0, "tokens": [1, 2]}):
        otel_rl.instant("first_token", args={"ttft_ms": 12.5})
        with otel_rl.trace_scope("tokenize", category="io"):
            pass
    try:
        with otel_rl.trace_session_phase("reward"):
            raise ValueError("judge down")
    except ValueError:
        pass
    otel_rl.increment_counter("retries")
    otel_rl.trace_session_event("mark_finalized", status="failed", reason="judge down")


def _capture_and_export(receiver, monkeypatch, tmp_path, export_process, replay=None):
    """Runs the workload (or replays captured spans) with one export path; returns
    the records of the finished spans and the spans the receiver got."""
    export_to(monkeypatch, receiver)
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False),
                      export_process=export_process)
    pipeline = STATE.pipeline
    assert (pipeline.shipper is not None) == export_process
    captured = []
    if replay is None:
        class CapturingQueue(collections.deque):
            def append(self, record):
                captured.append(record)
                super().append(record)

        pipeline.queue = CapturingQueue()  # ended spans append their records here
        _workload()
    else:
        for span in replay:
            pipeline.enqueue(span)
    otel_rl.save(force=True)
    spans = receiver.wait_for_spans(6)
    otel_rl.shutdown()
    return captured, sorted(spans, key=lambda s: (s["start_ns"], s["name"]))


def test_the_exporter_process_sends_exactly_what_in_process_export_sends(
        grpc_receiver, http_receiver, monkeypatch, tmp_path):
    captured, via_process = _capture_and_export(grpc_receiver, monkeypatch, tmp_path / "a", True)
    assert len(captured) == 6
    _, in_process = _capture_and_export(http_receiver, monkeypatch, tmp_path / "b", False, captured)
    for spans in (via_process, in_process):
        for span in spans:
            span["resource"].pop("process.pid", None)
    assert via_process == in_process
    session = next(s for s in via_process if s["name"] == "session")
    assert session["status"] == {"code": "STATUS_CODE_ERROR", "message": "judge down"}
    assert session["attributes"]["rl.session.counter.retries"] == 1


def test_spans_survive_the_exporter_process_dying(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    for _ in range(10):
        with otel_rl.trace_scope("before"):
            pass
    otel_rl.save(force=True)
    STATE.pipeline.shipper._proc.kill()
    STATE.pipeline.shipper._proc.wait()
    for _ in range(10):
        with otel_rl.trace_scope("after"):
            pass
    run_dir = otel_rl.settings().run_dir
    otel_rl.shutdown()
    names = slice_names(os.path.join(run_dir, "traces-r0.jsonl"))
    assert sorted(names) == ["after"] * 10 + ["before"] * 10
    assert otel_rl.diagnostics()["exporter_process_lost"] == 1


def _exporter_environ() -> dict[str, str]:
    """The environment the running exporter process was started with (Linux /proc)."""
    with open(f"/proc/{STATE.pipeline.shipper._proc.pid}/environ", "rb") as fh:
        return dict(item.decode().split("=", 1) for item in fh.read().split(b"\0") if b"=" in item)


@pytest.mark.skipif(not os.path.exists("/proc/self/environ"), reason="reads /proc")
def test_the_exporter_process_keeps_its_heap_where_the_environment_leaves_malloc_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_TOP_PAD_", "4096")  # set by the user: it stands
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    with otel_rl.trace_scope("step"):
        pass
    otel_rl.save(force=True)  # the exporter process is running
    environ = _exporter_environ()
    otel_rl.shutdown()
    assert environ["MALLOC_TRIM_THRESHOLD_"] == str(256 << 20)
    assert environ["MALLOC_MMAP_THRESHOLD_"] == str(256 << 20)
    assert environ["MALLOC_TOP_PAD_"] == "4096"


def test_a_sigkilled_training_process_leaves_every_shipped_span_on_disk(tmp_path):
    result = run_python("""
        import os, signal, time, otel_rl
        otel_rl.configure(export_interval_ms=20)
        for i in range(150):
            with otel_rl.trace_scope("step"):
                pass
        otel_rl.save(force=True)  # shipped (and written by the exporter process)
        os.kill(os.getpid(), signal.SIGKILL)
    """, {"OTEL_RL_DIR": str(tmp_path)})
    assert result.returncode == -signal.SIGKILL
    path = tmp_path / "default" / "trial0" / "traces-r0.jsonl"
    # The orphaned exporter finishes on end-of-file.
    wait_until(lambda: path.exists() and path.read_text().count('"ph":"X"') == 150,
               what="the orphaned exporter to write every span")
    assert len(slices(read_trace(path))) == 150
    out = tmp_path / "merged.json"
    assert convert_main([str(path), "-o", str(out), "-q"]) == 0
    assert len(slices(read_trace(out))) == 150


def test_a_forked_child_records_its_own_spans_under_its_own_pid(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    with otel_rl.trace_scope("parent.before_fork"):
        pass
    pid = os.fork()
    if pid == 0:  # the child: trace, flush, leave without running the parent's atexit
        code = 1
        try:
            with otel_rl.trace_scope("child.work"):
                pass
            otel_rl.shutdown()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    run_dir = otel_rl.settings().run_dir
    otel_rl.shutdown()
    events = slices(read_trace(os.path.join(run_dir, "traces-r0.jsonl")))
    pids = {e["name"]: e["pid"] for e in events}
    assert sorted(e["name"] for e in events) == ["child.work", "parent.before_fork"]
    assert pids["child.work"] == pid
    assert pids["parent.before_fork"] == os.getpid()


def test_payloads_marshal_cannot_hold_are_summarised_not_lost(tmp_path):
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    assert STATE.pipeline.shipper is not None
    with otel_rl.trace_scope("odd", args={"level": Level.HIGH, "handle": object()}):
        pass
    with otel_rl.trace_scope("plain"):
        pass
    run_dir = otel_rl.settings().run_dir
    otel_rl.shutdown()
    events = {e["name"]: e for e in slices(read_trace(os.path.join(run_dir, "traces-r0.jsonl")))}
    assert sorted(events) == ["odd", "plain"]
    assert events["odd"]["args"]["level"] == 3
    assert events["odd"]["args"]["handle"].startswith("<object object")
    assert "export_error" not in otel_rl.diagnostics()


class _Node:
    """A gc-tracked object that can refer to itself."""


class _Chain:
    def after_slice(self) -> None:
        pass

    def after_batch(self) -> None:
        pass


def _one_batch(on_records) -> None:
    from otel_rl._internal.export import process, wire

    process.export_batch(on_records, _Chain(), {}, wire.dumps({}, []))


def test_what_a_batch_leaves_alive_is_frozen_out_of_young_collections():
    kept = []
    try:
        before = gc.get_freeze_count()
        _one_batch(lambda records: kept.extend(_Node() for _ in range(1_000)))
        assert gc.get_freeze_count() >= before + len(kept)  # no young collection will scan them
    finally:
        gc.unfreeze()


def test_a_full_collection_every_interval_reclaims_cycles_frozen_before(monkeypatch):
    from otel_rl._internal.export import process

    node = _Node()
    node.itself = node
    gone = weakref.ref(node)
    del node
    try:
        gc.freeze()  # as an earlier batch left it
        monkeypatch.setattr(process, "_next_full_collect", 0.0)
        _one_batch(lambda records: None)
        assert gone() is None
        assert process._next_full_collect > time.monotonic() + process.EXPORTER_FULL_COLLECT_S / 2
    finally:
        gc.unfreeze()
