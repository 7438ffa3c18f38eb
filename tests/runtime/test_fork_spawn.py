"""Worker processes: forked after configure (own spans, no duplicates, no deadlock while
the export thread is busy) and spawn / forkserver children configured from the environment."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import fault_workers
import pytest
from opentelemetry.sdk.trace import TracerProvider
from support import read_json, read_trace, slices
from waiting import reap_children, wait_until

import otel_rl
from otel_rl._internal import guard, keys


@pytest.fixture(autouse=True)
def _fresh_counters():
    yield
    guard.clear()


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_children_started_by_spawn_or_forkserver_configure_from_the_environment(monkeypatch, tmp_path, method):
    monkeypatch.setenv("OTEL_RL_ENABLED", "1")
    monkeypatch.setenv("OTEL_RL_DIR", str(tmp_path))
    monkeypatch.setenv("OTEL_RL_ROLE", "rollout")
    monkeypatch.setenv("OTEL_RL_RANK", "0")
    ctx = multiprocessing.get_context(method)
    procs = []
    for rank in range(2):
        # A spawned child reads the environment as it is when it starts; a
        # forkserver child inherits the server's (both may share rank 0 then).
        monkeypatch.setenv("OTEL_RL_RANK", str(rank))
        proc = ctx.Process(target=fault_workers.record, args=(30,))
        proc.start()
        procs.append(proc)
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    run_dir = tmp_path / "default" / "trial0"
    events = [e for path in sorted(run_dir.glob("traces-rollout-r*.jsonl")) for e in slices(read_trace(path))]
    by_pid = {proc.pid: [e["name"] for e in events if e["pid"] == proc.pid] for proc in procs}
    assert by_pid == {proc.pid: ["child.work"] * 30 for proc in procs}
    assert len(events) == 60  # the parent (not configured) recorded nothing
    summaries = [read_json(p) for p in run_dir.glob("summary-rollout-r*.json")]
    assert summaries and all(s["pid"] in by_pid and s["spans"]["recorded"] == 30 for s in summaries)
    if method == "spawn":
        assert sorted(s["rank"] for s in summaries) == [0, 1]


def test_forks_while_the_export_thread_is_busy_neither_deadlock_nor_duplicate(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False),
                      export_interval_ms=5)
    stop = threading.Event()
    made = {"n": 0}

    def busy():
        while not stop.is_set():
            for _ in range(20):
                with otel_rl.trace_scope("parent.work"):
                    made["n"] += 1
            time.sleep(0.001)  # busy, but within what the exporter process keeps up with

    thread = threading.Thread(target=busy)
    thread.start()
    children = []
    try:
        for _ in range(3):
            # Fork while the export thread has fresh spans to ship, whatever the machine's load.
            made_before = made["n"]
            wait_until(lambda made_before=made_before: made["n"] >= made_before + 100,
                       what="the busy thread recording spans")
            pid = os.fork()
            if pid == 0:  # the child: its own spans, its own exporter, then leave at once
                code = 1
                try:
                    for _ in range(40):
                        with otel_rl.trace_scope("child.work"):
                            pass
                    otel_rl.shutdown()
                    code = 0
                finally:
                    os._exit(code)
            children.append(pid)
        hung = reap_children(children)
        assert not hung, f"forked children {hung} did not finish: deadlocked"
    finally:
        stop.set()
        thread.join()
    settings = otel_rl.settings()
    otel_rl.shutdown()
    events = slices(read_trace(settings.file_path(keys.TRACES_FILE)))
    parent = [e for e in events if e["name"] == "parent.work"]
    assert len(parent) == made["n"] and {e["pid"] for e in parent} == {os.getpid()}
    for pid in children:
        mine = [e for e in events if e["pid"] == pid]
        assert [e["name"] for e in mine] == ["child.work"] * 40
        summary = read_json(os.path.join(settings.run_dir, f"summary-r0-pid{pid}.json"))
        assert summary["spans"]["recorded"] == 40
    assert read_json(settings.file_path(keys.SUMMARY_FILE))["pid"] == os.getpid()
