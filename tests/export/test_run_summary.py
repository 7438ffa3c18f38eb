"""The run summary: what a process recorded, wrote, sent and lost, checked against the
files on disk and what a real receiver got."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from support import (clean_env, export_to, read_json, read_sessions, read_trace, run_python, slices,
                     unreachable_endpoint)

import otel_rl
from otel_rl._internal import guard
from otel_rl._internal import keys
from otel_rl._internal.state import STATE
from otel_rl.convert import main as convert_main



@pytest.fixture(autouse=True)
def _fresh_counters():
    """Problem counters are per process; a test that ends shut down (not reset)
    must not leave its counts to the next one."""
    yield
    guard.clear()

def _sessions(statuses):
    otel_rl.set_task_id(otel_rl.register_task())
    for status in statuses:
        session_id = otel_rl.register_session()
        otel_rl.set_session_id(session_id)
        with otel_rl.trace_session_phase("generate"):
            pass
        if status != "pending":
            otel_rl.trace_session_event("mark_finalized", status=status)


def _scopes(n, name="work"):
    for i in range(n):
        with otel_rl.trace_scope(name, args={"i": i}):
            pass


def _configure(tmp_path, **kw):
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False),
                      **kw)
    return otel_rl.settings()


def _read_summary(settings):
    return read_json(settings.file_path(keys.SUMMARY_FILE))


def _trace_events(settings):
    return slices(read_trace(settings.file_path(keys.TRACES_FILE)))


@pytest.mark.parametrize("export_process", [True, False])
def test_the_summary_file_matches_the_files_on_disk(tmp_path, export_process):
    settings = _configure(tmp_path, export_process=export_process)
    _sessions(["accepted", "accepted", "rejected", "pending"])
    _scopes(25)
    otel_rl.shutdown()
    summary = _read_summary(settings)
    events = _trace_events(settings)
    assert summary["final"] and summary["complete"]
    assert summary["spans"]["recorded"] == summary["spans"]["exported_file"] == len(events)
    assert summary["spans"]["dropped"] == {}
    statuses = sorted(r["status"] for r in read_sessions(settings.file_path(keys.SESSIONS_FILE)))
    by_status = summary["sessions"]
    assert sorted(s for s, n in by_status.items() for _ in range(n)) == statuses
    assert by_status == {"accepted": 2, "pending": 1, "rejected": 1}
    for name, size in summary["file_bytes"].items():
        assert os.path.getsize(os.path.join(settings.run_dir, name)) == size, name
    assert {"traces-r0.jsonl", "sessions-r0.jsonl"} <= set(summary["file_bytes"])
    assert summary["exporter_process"] == {"used": export_process, "lost": False,
                                           "final_numbers": True if export_process else None}
    assert otel_rl.run_summary() == summary


def test_run_summary_while_configured_reports_numbers_as_of_the_last_save(tmp_path):
    settings = _configure(tmp_path)
    assert otel_rl.run_summary()["spans"]["recorded"] == 0
    _scopes(7)
    otel_rl.save(force=True)
    live = otel_rl.run_summary()
    assert not live["final"]
    assert live["spans"]["recorded"] == live["spans"]["exported_file"] == 7
    assert live["file_bytes"]["traces-r0.jsonl"] == os.path.getsize(settings.file_path(keys.TRACES_FILE))
    otel_rl.shutdown()


def test_spans_exported_over_otlp_are_counted_as_the_receiver_got_them(otlp_receiver, monkeypatch, tmp_path):
    export_to(monkeypatch, otlp_receiver)
    _configure(tmp_path)
    _sessions(["accepted"])
    _scopes(40)
    otel_rl.shutdown()
    summary = otel_rl.run_summary()
    received = len(otlp_receiver.spans())
    assert summary["spans"]["otlp_enabled"]
    assert summary["spans"]["exported_otlp"] == received == summary["spans"]["recorded"]
    assert summary["complete"]


def test_an_unreachable_collector_is_reported_as_lost_spans_with_a_warning(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", unreachable_endpoint())
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    _configure(tmp_path, shutdown_timeout_ms=1500)
    _scopes(30)
    with caplog.at_level(logging.INFO, logger="otel_rl"):
        otel_rl.shutdown()
    summary = otel_rl.run_summary()
    dropped = summary["spans"]["dropped"]
    assert summary["spans"]["exported_otlp"] == 0
    assert dropped.get("otlp_unsent_at_exit", 0) + dropped.get("otlp_export_failed", 0) == 30
    assert summary["spans"]["exported_file"] == 30  # the file has them all regardless
    assert not summary["complete"]
    (line,) = [r for r in caplog.records if "run summary" in r.getMessage()]
    assert line.levelno == logging.WARNING and "30 spans recorded" in line.getMessage()


def test_a_full_queue_is_reported_as_dropped_by_reason(tmp_path):
    # Thread mode: with the exporter process a queue this small also bounds its backlog.
    settings = _configure(tmp_path, max_queue_size=10, export_interval_ms=60_000, export_process=False)
    STATE.pipeline.wake_at = 10**9  # nothing drains until shutdown
    _scopes(25)
    otel_rl.shutdown()
    summary = _read_summary(settings)
    assert summary["spans"]["dropped"] == {"queue_full": 15}
    assert summary["spans"]["recorded"] == 25 and summary["spans"]["exported_file"] == 10
    assert len(_trace_events(settings)) == 10
    assert not summary["complete"]


def test_a_lost_exporter_process_is_reported_and_its_spans_still_counted(tmp_path):
    settings = _configure(tmp_path)
    _scopes(10, "before")
    otel_rl.save(force=True)
    STATE.pipeline.shipper._proc.kill()
    STATE.pipeline.shipper._proc.wait()
    _scopes(10, "after")
    otel_rl.shutdown()
    summary = _read_summary(settings)
    assert summary["exporter_process"]["lost"] is True
    assert summary["spans"]["recorded"] == summary["spans"]["exported_file"] == 20 == len(
        _trace_events(settings))
    assert not summary["complete"]


def test_the_summary_is_logged_and_written_at_interpreter_exit(tmp_path):
    result = run_python("""
        import logging, otel_rl
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        otel_rl.configure(role="rollout", rank=3)
        for _ in range(5):
            with otel_rl.trace_scope("x"):
                pass
    """, {"OTEL_RL_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    path = tmp_path / "default" / "trial0" / "summary-rollout-r3.json"
    lines = [line for line in result.stderr.splitlines() if "run summary" in line]
    assert lines == [f"INFO otel_rl run summary rollout-r3: 5 spans recorded, 5 written to file, "
                     f"0 dropped, sessions none, {json.loads(path.read_text())['file_bytes_total']} "
                     f"bytes written, 0 export errors; {path}"]


def test_converter_and_report_leave_the_summary_file_alone(tmp_path):
    settings = _configure(tmp_path)
    _sessions(["accepted"])
    otel_rl.shutdown()
    assert os.path.exists(settings.file_path(keys.SUMMARY_FILE))
    out = tmp_path / "merged.json"
    assert convert_main([settings.run_dir, "-o", str(out), "-q", "--strict"]) == 0
    result = subprocess.run([sys.executable, "-m", "otel_rl.report", settings.run_dir, "--format", "json",
                             "--out", str(tmp_path / "r.json")], capture_output=True, text=True,
                            timeout=60, env=clean_env())
    assert result.returncode == 0, result.stderr
    assert "summary" not in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_is_reported_as_lost_trace_events_and_training_goes_on(tmp_path):
    run_dir = tmp_path / "default" / "trial0"
    run_dir.mkdir(parents=True)
    os.symlink("/dev/full", run_dir / "traces-r0.jsonl")  # every write fails with ENOSPC
    settings = _configure(tmp_path)
    _sessions(["accepted"])
    _scopes(20)
    otel_rl.shutdown()
    summary = _read_summary(settings)
    assert summary["spans"]["recorded"] == 23  # task, session, phase and 20 scopes
    assert summary["spans"]["dropped"] == {"file_write_error": 23}
    assert summary["spans"]["exported_file"] == 0 and summary["problems"]["trace_file_error"] >= 1
    assert summary["sessions"] == {"accepted": 1} and not summary["complete"]
    assert [r["status"] for r in read_sessions(settings.file_path(keys.SESSIONS_FILE))] == ["accepted"]
