"""OTEL_RL_FILE_FORMAT=perfetto: each rank writes Perfetto's native format, and the files concatenate.

Files are read back with Perfetto's own protos (``support.perfetto``), which
also checks tracks and interned ids are defined before use and slices nest.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import otel_rl
from otel_rl._internal import config, keys
from otel_rl._internal.export.file_exporter import InPlaceBatchProcessor
from otel_rl._internal.export.perfetto_file import PerfettoTraceFileExporter
from support import SpanFactory, run_python
from support.perfetto import load, load_file

TESTS = Path(__file__).resolve().parents[1]

WORKLOAD = """
import sys
import otel_rl
from support.workloads import sessions
otel_rl.configure(rank=int(sys.argv[1]), role="rollout")
sessions(3)
otel_rl.shutdown()
"""


def _rank(tmp_path: Path, rank: int) -> None:
    result = run_python(WORKLOAD, {"OTEL_RL_DIR": str(tmp_path), "OTEL_RL_FILE_FORMAT": "perfetto",
                                   "PYTHONPATH": str(TESTS)}, str(rank))
    assert result.returncode == 0, result.stderr


def test_each_rank_writes_a_native_trace_file_instead_of_json_lines(tmp_path):
    _rank(tmp_path, 0)
    run = tmp_path / "default" / "trial0"
    assert (run / "traces-rollout-r0.pftrace").exists()
    assert not (run / "traces-rollout-r0.jsonl").exists()


def test_a_ranks_native_file_shows_each_session_as_a_row_with_its_phase(tmp_path):
    _rank(tmp_path, 0)
    trace = load_file(tmp_path / "default" / "trial0" / "traces-rollout-r0.pftrace")
    rows = sorted((trace.track_name(s.track), s.name, s.depth) for s in trace.slices if s.name == "generate")
    assert rows == [(f"task 0 · session {i}", "generate", 1) for i in range(3)]


def test_the_native_files_of_every_rank_concatenate_into_one_trace(tmp_path):
    for rank in range(2):
        _rank(tmp_path, rank)
    run = tmp_path / "default" / "trial0"
    files = [(run / f"traces-rollout-r{rank}.pftrace").read_bytes() for rank in range(2)]
    uuids = [set(load(data).tracks) for data in files]
    trace = load(b"".join(files))
    assert len(trace.sequences) == 2
    assert uuids[0] and not uuids[0] & uuids[1]
    assert {trace.process_of(s.track) for s in trace.by_name("session")} == \
        {"[rollout] Rank 0, Process", "[rollout] Rank 1, Process"}


def test_the_areal_layout_puts_the_native_file_where_the_json_lines_would_be(tmp_path):
    settings = config.resolve(overrides={"fileroot": str(tmp_path), "layout": "areal", "rank": 3,
                                         "file_format": "perfetto"}, environ={})
    path = settings.file_path(keys.PERFETTO_TRACES_FILE)
    assert Path(path).parts[-2:] == ("perf_tracer", "traces-r3.pftrace")


def test_json_lines_stay_the_default_format():
    assert config.resolve(environ={}).file_format == "jsonl"


def test_an_unknown_file_format_fails_configuration_naming_the_setting():
    with pytest.raises(config.ConfigError, match="OTEL_RL_FILE_FORMAT"):
        config.resolve(environ={"OTEL_RL_FILE_FORMAT": "protobuf"})


def test_configure_takes_the_file_format_as_an_argument(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="e", trial_name="t", file_format="perfetto",
                      tracer_provider=TracerProvider(shutdown_on_exit=False), export_process=False)
    try:
        with otel_rl.trace_scope("work"):
            pass
    finally:
        otel_rl.shutdown()
    trace = load_file(tmp_path / "e" / "t" / "traces-r0.pftrace")
    assert [s.name for s in trace.slices] == ["work"]


def test_slices_held_back_to_join_flows_are_written_at_shutdown(tmp_path):
    path = tmp_path / "traces-r0.pftrace"
    exporter = PerfettoTraceFileExporter(str(path))
    factory = SpanFactory(Resource({keys.PROCESS_PID: 11, keys.RANK: 0}))
    exporter.export([factory.span("step", 0, 10)])
    held = path.read_bytes() if path.exists() else b""
    exporter.shutdown()
    assert (held, [s.name for s in load_file(path).slices]) == (b"", ["step"])


def test_the_native_exporter_keeps_the_spans_exact_nanoseconds(tmp_path):
    path = tmp_path / "traces-r0.pftrace"
    processor = InPlaceBatchProcessor(PerfettoTraceFileExporter(str(path)))
    factory = SpanFactory(Resource({keys.PROCESS_PID: 11}))
    span = factory.span("odd", 0.001, 7.003)
    processor.on_end(span)
    processor.shutdown()
    (odd,) = load_file(path).by_name("odd")
    assert (odd.ts, odd.dur) == (span.start_time, span.end_time - span.start_time)
