"""The stage breakdown puts an engine's own timings (``record_server_timings``) beside the client phase."""

from __future__ import annotations

import pytest

import otel_rl
from otel_rl import report
from otel_rl._internal.recording import server_timings
from otel_rl.inference import record_server_timings

#: SGLang ``meta_info`` (wall-clock seconds), timed inside a generate phase that starts at 4 s.
META = {"prompt_tokens": 12, "completion_tokens": 30, "cached_tokens": 8, "queue_time": 0.125,
        "forward_entry_time": 4.25, "prefill_finished_time": 4.5, "request_finished_ts": 4.875}


def test_server_timings_are_rows_beside_the_client_phase_they_ran_in(capture, monkeypatch):
    monkeypatch.setattr(server_timings, "now_ns", capture.clock)
    otel_rl.set_task_id(otel_rl.register_task())
    otel_rl.set_session_id(otel_rl.register_session())
    with otel_rl.trace_session_phase("generate"):
        assert record_server_timings(META, "sglang") == 3
    otel_rl.trace_session_event("mark_finalized", status="accepted")
    durations = {e["name"]: e["dur"] / 1e3 for e in capture.records() if e.get("ph") == "X"}
    rows = {r["interval"]: r for r in report.stage_breakdown(report.load(capture.run_dir))["rows"]
            if r["stage"] == "sglang server"}
    assert {name: (r["count"], r["total_ms"]) for name, r in rows.items()} == {
        name: (1, pytest.approx(durations[key])) for name, key in (
            ("generate (client)", "generate"), ("queue", "queue"), ("prefill", "prefill"), ("decode", "decode"))}
    assert rows["decode"]["share"] == pytest.approx(durations["decode"] / durations["generate"])
