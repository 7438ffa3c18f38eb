"""The runtime object: one fork hook and one set of exit hooks for the process,
walking every component in its documented order, each once."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from waiting import reap_children

import otel_rl
from otel_rl import stats
from otel_rl._internal import control, events, guard, keys
from otel_rl._internal.control import torch_profiler
from otel_rl._internal.control.job import JOB
from otel_rl._internal.events import recorder
from otel_rl._internal.export import chain, jsonl, summary
from otel_rl._internal.runtime import RUNTIME
from otel_rl._internal.state import STATE
from otel_rl._internal.stats import backends

#: The fork walk, bottom floor first; the pipeline last (it starts the child's export thread).
FORK_ORDER = ["guard", "jsonl", "file_exporter", "export_chain", "summary", "stats", "request_events",
              "torch_profiler", "control", "timers", "runtime", "pipeline"]


@pytest.fixture(autouse=True)
def _fresh_counters():
    yield
    guard.clear()


def _configure_in_process(tmp_path):
    """Configured with an application processor: the export chain (and its trace
    file exporter) runs in this process, so every component of the walk exists."""
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    otel_rl.configure(fileroot=str(tmp_path), rank=0, tracer_provider=provider, export_interval_ms=20)
    with otel_rl.trace_scope("parent.work"):
        pass
    otel_rl.save(force=True)  # the trace file exists: its exporter is imported and open


def _child_reports(work):
    """Forks; the child runs ``work()`` and sends back what it returns (as JSON)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            os.write(write_fd, json.dumps(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    # Reaped first (a hung child is killed): its few bytes wait in the pipe.
    hung = reap_children([pid], timeout=60)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    assert hung == [], "the forked child hung"
    return json.loads(data)


def test_the_runtime_holds_the_only_fork_hook_of_the_package():
    code = textwrap.dedent("""
        import os, sys
        registered = []
        real = os.register_at_fork
        def register(**hooks):
            registered.append(sys._getframe(1).f_globals.get("__name__"))
            return real(**hooks)
        os.register_at_fork = register
        import otel_rl, otel_rl.stats, otel_rl.report, otel_rl.convert, otel_rl.timers
        import otel_rl._internal.export.file_exporter, otel_rl._internal.export.process
        print(sorted(name for name in registered if name.startswith("otel_rl")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "['otel_rl._internal.runtime.core']"


def test_the_fork_walk_visits_every_component_once_bottom_floor_first(tmp_path, monkeypatch):
    _configure_in_process(tmp_path)
    assert [name for name, _ in RUNTIME.fork_walk()] == FORK_ORDER
    visited = []

    def spy(name):
        return lambda: visited.append(name)

    file_exporter = sys.modules["otel_rl._internal.export.file_exporter"]
    for name, owner in [("guard", guard), ("jsonl", jsonl), ("file_exporter", file_exporter),
                        ("export_chain", chain), ("summary", summary), ("stats", backends),
                        ("request_events", events), ("torch_profiler", torch_profiler),
                        ("control", control), ("pipeline", STATE.pipeline)]:
        monkeypatch.setattr(owner, "after_fork_in_child", spy(name))
    monkeypatch.setattr(RUNTIME, "_after_fork_in_child", spy("runtime"))
    monkeypatch.setattr(RUNTIME, "_public_fork_steps", [("timers", spy("timers"))])
    assert _child_reports(lambda: visited) == FORK_ORDER
    assert visited == []  # the parent ran none of it


def _locks():
    """Every lock a component renews in a forked child, by where it is found
    (found again in the child: a renewed one is a new object there)."""
    found = {
        "guard": lambda: guard._lock,
        "jsonl bytes": lambda: jsonl._bytes_lock,
        "stats": lambda: backends._lock,
        "stats built-ins": lambda: backends.BUILT_INS._lock,
        "request events": lambda: recorder.get_recorder()._lock,
        "torch profiler": lambda: torch_profiler.PROFILER._lock,
        "control": lambda: JOB.apply_lock,
        "runtime": lambda: RUNTIME._lock,
        "registry": lambda: STATE.registry._lock,
        "pipeline": lambda: STATE.pipeline._take_lock,
    }
    for i, f in enumerate(list(jsonl._files)):
        found[f"jsonl file {i}"] = lambda f=f: f._lock
    file_exporter = sys.modules["otel_rl._internal.export.file_exporter"]
    for i, obj in enumerate(list(file_exporter._fork_sensitive)):
        found[f"trace file {i}"] = lambda obj=obj: obj._lock
    return found


def test_a_child_forked_while_parent_threads_hold_every_lock_starts_clean(tmp_path):
    _configure_in_process(tmp_path)
    stats.scalar(loss=1.0)
    stats.export_all(step=0)  # the stats backends are built and their file open
    locks = _locks()
    assert any(name.startswith("jsonl file") for name in locks)
    assert any(name.startswith("trace file") for name in locks)
    held, release = threading.Event(), threading.Event()

    def hold():
        taken = [get() for get in locks.values()]
        for lock in taken:
            lock.acquire()
        held.set()
        release.wait()
        for lock in reversed(taken):
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(30)

    def child():
        # Each lock, looked up again, is free: renewed by the fork walk.
        stale = [name for name, get in locks.items() if not get().acquire(timeout=10)]
        for name, get in locks.items():
            if name not in stale:
                get().release()
        fresh = {"stale": stale, "queue": len(STATE.pipeline.queue), "forked": summary.Baseline.forked}
        with otel_rl.trace_scope("child.work"):
            pass
        stats.scalar(loss=2.0)
        stats.export_all(step=1)
        otel_rl.diagnostics()
        otel_rl.shutdown()
        return fresh

    try:
        result = _child_reports(child)
    finally:
        release.set()
        holder.join()
    assert result == {"stale": [], "queue": 0, "forked": True}
    settings = otel_rl.settings()
    otel_rl.shutdown()
    with open(settings.file_path(keys.TRACES_FILE)) as f:
        spans = [e for e in map(json.loads, f) if e.get("ph") == "X"]
    assert sorted((e["name"], e["pid"] == os.getpid()) for e in spans) == [
        ("child.work", False), ("parent.work", True)]


_EXIT_SPY = textwrap.dedent("""
    import os, sys
    import otel_rl
    from otel_rl import stats
    from otel_rl._internal import control
    from otel_rl._internal.export import summary
    from otel_rl._internal.state import STATE
    from otel_rl._internal.stats import backends

    def spy(log_path):
        '''Logs each step of the shutdown walk (one line each, appended at once).'''
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        def wrap(owner, attr, name):
            real = getattr(owner, attr)
            def step(*args, **kwargs):
                os.write(fd, (name + "\\n").encode())
                return real(*args, **kwargs)
            setattr(owner, attr, step)
        wrap(control, "on_shutdown", "control")
        wrap(backends.BUILT_INS, "shutdown", "stats")
        wrap(STATE.registry, "close_all", "registry")
        wrap(STATE.pipeline, "shutdown", "pipeline")
        wrap(summary, "write", "summary")

    def run(run_root, log_path):
        otel_rl.configure(fileroot=run_root, rank=0, export_interval_ms=20)
        spy(log_path)
        with otel_rl.trace_scope("work"):
            stats.scalar(loss=1.0)
        stats.export_all(step=0)
""")


def _shutdown_steps(log_path):
    with open(log_path) as f:
        steps = f.read().split()
    # The stats backends close on a thread beside the spans: once, in no fixed place.
    assert steps.count("stats") == 1, steps
    return [step for step in steps if step != "stats"]


def test_the_exit_hooks_run_the_shutdown_walk_once_at_interpreter_exit(tmp_path):
    # Both multiprocessing's exit hook and atexit run in a main process.
    code = _EXIT_SPY + "\nimport multiprocessing.util\nrun(sys.argv[1], sys.argv[2])\n"
    log_path = tmp_path / "walk.log"
    subprocess.run([sys.executable, "-c", code, str(tmp_path), str(log_path)], timeout=120, check=True)
    assert _shutdown_steps(log_path) == ["control", "registry", "pipeline", "summary"]


def _worker(run_root, log_path):
    namespace = {}
    exec(compile(_EXIT_SPY, "exit_spy", "exec"), namespace)  # noqa: S102 - the test's own code
    namespace["run"](run_root, log_path)


def test_the_exit_hooks_run_the_shutdown_walk_once_in_a_forked_multiprocessing_worker(tmp_path):
    # A fork-started worker ends with os._exit: only multiprocessing's exit hook runs.
    log_path = tmp_path / "walk.log"
    proc = multiprocessing.get_context("fork").Process(target=_worker, args=(str(tmp_path), str(log_path)))
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0
    assert _shutdown_steps(log_path) == ["control", "registry", "pipeline", "summary"]
    assert not otel_rl.is_configured()  # the parent's runtime is its own


def test_save_flushes_the_stats_backends_then_the_pipeline_once_each(tmp_path, monkeypatch):
    _configure_in_process(tmp_path)
    calls = []
    for name, owner in [("stats", backends.BUILT_INS), ("pipeline", STATE.pipeline)]:
        real = owner.save if name == "pipeline" else owner.flush
        attr = "save" if name == "pipeline" else "flush"

        def step(*args, real=real, name=name, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, attr, step)
    otel_rl.save(force=True)
    assert calls == ["stats", "pipeline"]
