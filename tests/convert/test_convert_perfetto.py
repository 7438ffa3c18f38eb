"""otel-rl convert to Perfetto's native format: the same run as the JSON trace, as tracks, counters and arrows.

Each test converts the same inputs twice - to Chrome JSON and to ``.pftrace`` -
and reads the native file back with Perfetto's own protos
(``support.perfetto.load`` also checks that every track and interned id is
defined before use, that slices nest per track and counters come in time order).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanContext, SpanKind

from otel_rl._internal import keys
from otel_rl._internal.encode.chrome_trace import ChromeTraceEncoder
from otel_rl._internal.export.file_exporter import ChromeTraceFileExporter
from otel_rl.convert import convert, main
from support import T0_NS, SpanFactory, clean_env, run_python
from support.perfetto import (
    Trace,
    chrome_flows,
    chrome_slices,
    load_file,
    native_flows,
    native_slices,
    parse,
)

T0_US = T0_NS // 1000


def _ids(task: int, session: int, kind: str) -> dict[str, Any]:
    return {keys.TASK_ID: task, keys.SESSION_ID: session, keys.SPAN_KIND: kind}


def write_rank(run: Path, role: str, rank: int, pid: int, spans_of: Any) -> list:
    """A per-rank JSONL file written by otel_rl's own exporter; returns the spans."""
    resource = Resource({keys.PROCESS_PID: pid, keys.RANK: rank, keys.ROLE: role})
    spans = spans_of(SpanFactory(resource, first_id=pid << 32))
    exporter = ChromeTraceFileExporter(str(run / f"traces-{role}-r{rank}.jsonl"))
    exporter.export(sorted(spans, key=lambda s: s.end_time))
    exporter.shutdown()
    return spans


def rollout(f: SpanFactory, parent: Any = None, tasks: int = 3, samples: int = 4) -> list:
    """Tasks of concurrent sessions (generate, tool call, reward), each task under ``parent``."""
    spans = []
    for t in range(tasks):
        base = t * 1000
        task = f.span("task", base, base + 900, parent, attrs={keys.SPAN_KIND: keys.KIND_TASK, keys.TASK_ID: t})
        spans.append(task)
        for s in range(samples):
            sid = t * samples + s
            start = base + 10 + s * 5
            session = f.span("session", start, start + 800, task, attrs=_ids(t, sid, keys.KIND_SESSION))
            generate = f.span("generate", start + 10, start + 300, session, attrs=_ids(t, sid, keys.KIND_PHASE))
            tool = f.span("toolcall", start + 300, start + 500, session, attrs=_ids(t, sid, keys.KIND_PHASE))
            reward = f.span("reward", start + 500, start + 510, session, attrs=_ids(t, sid, keys.KIND_PHASE))
            spans += [session, generate, tool, reward]
    return spans


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A trainer whose step submits work to two rollout workers in other processes."""
    run = tmp_path / "run"
    run.mkdir()
    submitted = []

    def trainer(f: SpanFactory) -> list:
        step = f.span("step", 0, 5000, attrs={keys.SPAN_KIND: keys.KIND_STEP, keys.STEP: 0})
        submit = f.span("rollout.submit", 5, 4000, step, kind=SpanKind.CLIENT)
        # What a worker extracts from the request: the submit span's context, remote.
        ctx = submit.context
        submitted.append(SpanContext(ctx.trace_id, ctx.span_id, True, ctx.trace_flags))
        return [step, submit, f.span("train", 4000, 4900, step)]

    write_rank(run, "trainer", 0, 100, trainer)
    for rank in range(2):
        write_rank(run, "rollout", rank, 200 + rank, lambda f: rollout(f, submitted[0]))
    return run


def both(run: Path, tmp_path: Path) -> tuple[list[dict[str, Any]], Trace]:
    convert([str(run)], str(tmp_path / "trace.json"))
    convert([str(run)], str(tmp_path / "trace.pftrace"))
    events = orjson.loads((tmp_path / "trace.json").read_bytes())["traceEvents"]
    return events, load_file(tmp_path / "trace.pftrace")


# --- the format ---------------------------------------------------------------------------
def test_a_pftrace_output_is_written_in_perfettos_native_format(run, tmp_path):
    stats = convert([str(run)], str(tmp_path / "trace.pftrace"))
    packets = parse((tmp_path / "trace.pftrace").read_bytes())
    assert stats.files == 3
    assert any(p.HasField("track_event") for p in packets)


def test_format_perfetto_writes_the_native_format_whatever_the_name(run, tmp_path):
    assert main([str(run), "-o", str(tmp_path / "trace.bin"), "--format", "perfetto", "-q"]) == 0
    assert load_file(tmp_path / "trace.bin").slices


def test_format_chrome_writes_json_even_to_a_pftrace_name(run, tmp_path):
    assert main([str(run), "-o", str(tmp_path / "t.pftrace"), "--format", "chrome", "-q"]) == 0
    assert orjson.loads((tmp_path / "t.pftrace").read_bytes())["traceEvents"]


def test_an_unknown_format_is_refused(run, tmp_path):
    with pytest.raises(ValueError, match="unknown trace format"):
        convert([str(run)], str(tmp_path / "t.out"), fmt="xml")


def test_a_gzipped_native_output_loads(run, tmp_path):
    convert([str(run)], str(tmp_path / "trace.pftrace.gz"))
    assert load_file(tmp_path / "trace.pftrace.gz").slices


def test_the_native_trace_goes_to_standard_output(run, tmp_path):
    result = subprocess.run([sys.executable, "-m", "otel_rl.convert", str(run), "-o", "-", "--format",
                             "perfetto", "-q"], capture_output=True, env=clean_env(), timeout=60)
    assert result.returncode == 0, result.stderr
    assert any(p.HasField("track_event") for p in parse(result.stdout))


# --- the same run as the JSON trace --------------------------------------------------------------
def test_the_slices_and_durations_equal_the_json_traces(run, tmp_path):
    events, trace = both(run, tmp_path)
    assert native_slices(trace) == chrome_slices(events)


def test_every_arrow_of_the_json_trace_between_two_tracks_is_an_arrow_of_the_native_trace(run, tmp_path):
    events, trace = both(run, tmp_path)
    track_of = {s.args.get("span_id"): s.track for s in trace.slices}
    crossing = {(p, c) for p, c in chrome_flows(events) if track_of[p] != track_of[c]}
    assert crossing and crossing <= native_flows(trace)


def test_every_native_arrow_joins_a_parent_to_its_child(run, tmp_path):
    events, trace = both(run, tmp_path)
    parent_of = {e["args"]["id"]: e["args"].get("parent") for e in events if e["ph"] == "X"}
    assert trace.flows
    assert all(parent_of[child] == parent for parent, child in native_flows(trace))


def test_parent_span_id_is_stated_only_where_neither_nesting_nor_an_arrow_shows_the_parent(run, tmp_path):
    _events, trace = both(run, tmp_path)
    assert not any("parent_span_id" in s.args for s in trace.slices)


def test_a_parent_in_another_process_fans_out_to_its_children_in_both_workers(run, tmp_path):
    _events, trace = both(run, tmp_path)
    submit_children = [child for parent, child in trace.flows if parent.name == "rollout.submit"]
    assert {trace.process_of(c.track) for c in submit_children} == \
        {"[rollout] Rank 0, Process", "[rollout] Rank 1, Process"}


def test_each_session_is_a_row_of_its_process(run, tmp_path):
    _events, trace = both(run, tmp_path)
    rows = {(trace.process_of(s.track), trace.track_name(s.track)) for s in trace.by_name("session")}
    assert len(rows) == 2 * 3 * 4  # workers x tasks x samples
    assert ("[rollout] Rank 1, Process", "task 2 · session 11") in rows


def test_the_native_trace_is_well_over_twice_smaller_than_the_json(tmp_path):
    # A run the size of the demo's: enough events for the fixed costs not to matter.
    run = tmp_path / "run"
    run.mkdir()
    for rank in range(2):
        write_rank(run, "rollout", rank, 300 + rank, lambda f: rollout(f, tasks=20, samples=8))
    convert([str(run)], str(tmp_path / "trace.json"))
    convert([str(run)], str(tmp_path / "trace.pftrace"))
    json_size = (tmp_path / "trace.json").stat().st_size
    assert json_size >= 2.5 * (tmp_path / "trace.pftrace").stat().st_size


# --- other inputs ----------------------------------------------------------------------------
def test_a_torch_trace_joined_to_a_rank_puts_its_events_on_that_ranks_tracks(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_rank(run, "trainer", 0, 4242, lambda f: [f.span("step", 0, 100)])
    kineto = {"otel_rl": {"traces_file": "traces-trainer-r0.jsonl", "pid": 4242}, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 9, "ts": T0_US + 10.0, "dur": 5.0},
    ]}
    (run / "torch-r0-step0.trace.json").write_bytes(orjson.dumps(kineto))
    convert([str(run)], str(tmp_path / "trace.pftrace"))
    trace = load_file(tmp_path / "trace.pftrace")
    (mm,) = trace.by_name("aten::mm")
    assert trace.process_of(mm.track) == "[trainer] Rank 0, Process"


def test_a_torch_trace_naming_the_ranks_pid_after_its_program_leaves_the_ranks_name(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_rank(run, "trainer", 0, 4242, lambda f: [f.span("step", 0, 100)])
    kineto = {"otel_rl": {"traces_file": "traces-trainer-r0.jsonl", "pid": 4242}, "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 4242, "tid": 0, "args": {"name": "python3"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 9, "ts": T0_US + 10.0, "dur": 5.0},
    ]}
    (run / "torch-r0-step0.trace.json").write_bytes(orjson.dumps(kineto))
    convert([str(run)], str(tmp_path / "trace.pftrace"))
    trace = load_file(tmp_path / "trace.pftrace")
    assert {trace.process_of(s.track) for s in trace.slices} == {"[trainer] Rank 0, Process"}


def test_otlp_json_from_a_collector_converts_to_the_native_format(tmp_path):
    encoder_input = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "process.pid", "value": {"intValue": "77"}}]},
        "scopeSpans": [{"scope": {"name": "otel_rl"}, "spans": [
            {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "generate",
             "kind": 1, "startTimeUnixNano": str(T0_NS), "endTimeUnixNano": str(T0_NS + 2_500_000)}]}]}]}
    (tmp_path / "otlp.jsonl").write_bytes(orjson.dumps(encoder_input) + b"\n")
    convert([str(tmp_path / "otlp.jsonl")], str(tmp_path / "trace.pftrace"))
    (generate,) = load_file(tmp_path / "trace.pftrace").by_name("generate")
    assert (generate.ts, generate.dur) == (T0_NS, 2_500_000)


def test_an_areal_style_file_without_batch_markers_converts(tmp_path):
    lines = [{"ph": "M", "name": "process_name", "pid": 5, "tid": 0, "args": {"name": "[actor] Rank 0, Process"}},
             {"ph": "X", "name": "ppo_update", "cat": "compute", "ts": T0_US, "dur": 20.0, "pid": 5, "tid": 1,
              "args": {"rank": 0}},
             {"ph": "i", "s": "t", "name": "mark", "ts": T0_US + 5.0, "pid": 5, "tid": 1, "args": {}}]
    (tmp_path / "traces.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines))
    convert([str(tmp_path / "traces.jsonl")], str(tmp_path / "trace.pftrace"))
    trace = load_file(tmp_path / "trace.pftrace")
    assert sorted((s.name, s.depth) for s in trace.slices) == [("mark", 1), ("ppo_update", 0)]


def test_events_left_out_of_the_native_trace_are_warned_about(tmp_path, capsys):
    lines = [{"ph": "X", "name": "ok", "ts": T0_US, "dur": 1.0, "pid": 5, "tid": 1},
             {"ph": "X", "name": "no time", "pid": 5, "tid": 1}]
    (tmp_path / "t.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines))
    assert main([str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "t.pftrace")]) == 0
    assert "1 events left out of the native trace" in capsys.readouterr().err


def test_a_gzipped_input_converts_to_the_native_format(tmp_path):
    encoder = ChromeTraceEncoder()
    events = encoder.encode([SpanFactory(Resource({keys.PROCESS_PID: 9})).span("x", 0, 1)]) + encoder.finish()
    with gzip.open(tmp_path / "t.jsonl.gz", "wb") as fh:
        fh.write(b"".join(orjson.dumps(e) + b"\n" for e in events))
    convert([str(tmp_path / "t.jsonl.gz")], str(tmp_path / "t.pftrace"))
    assert [s.name for s in load_file(tmp_path / "t.pftrace").slices] == ["x"]


# --- native per-rank files (OTEL_RL_FILE_FORMAT=perfetto) -------------------------------------------
def write_native_rank(run: Path, rank: int) -> Path:
    from otel_rl._internal.export.perfetto_file import PerfettoTraceFileExporter

    path = run / f"traces-rollout-r{rank}.pftrace"
    resource = Resource({keys.PROCESS_PID: 300 + rank, keys.RANK: rank, keys.ROLE: "rollout"})
    exporter = PerfettoTraceFileExporter(str(path))
    exporter.export(sorted(rollout(SpanFactory(resource, first_id=(rank + 1) << 32), tasks=1, samples=2),
                           key=lambda s: s.end_time))
    exporter.shutdown()
    return path


def test_per_rank_native_files_merge_into_a_native_output_by_concatenation(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    parts = [write_native_rank(run, rank).read_bytes() for rank in range(2)]
    stats = convert([str(run)], str(tmp_path / "trace.pftrace"))
    assert stats.files == 2
    assert (tmp_path / "trace.pftrace").read_bytes() == b"".join(parts)


def test_a_native_file_cut_short_keeps_its_whole_packets_and_is_reported(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = write_native_rank(run, 0)
    path.write_bytes(path.read_bytes()[:-3])  # a writer killed mid-packet
    stats = convert([str(run)], str(tmp_path / "trace.pftrace"))
    assert [(p, reason.endswith("bytes are a packet cut short")) for p, reason in stats.cut_short] == \
        [(str(path), True)]
    assert parse((tmp_path / "trace.pftrace").read_bytes())  # every packet kept is whole


def test_a_native_input_is_not_merged_into_a_json_output_and_says_why(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_native_rank(run, 0)
    stats = convert([str(run)], str(tmp_path / "trace.json"))
    assert [reason for _path, reason in stats.skipped_files] == \
        ["a native Perfetto trace: it can only be merged into a .pftrace output"]


def test_a_merged_trace_in_the_run_directory_is_not_read_back(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_native_rank(run, 0)
    convert([str(run)], str(run / "trace.pftrace"))
    stats = convert([str(run)], str(tmp_path / "again.pftrace"))
    assert stats.files == 1


def test_native_and_json_line_inputs_merge_into_one_trace(run, tmp_path):
    (tmp_path / "native").mkdir()
    native = write_native_rank(tmp_path / "native", 5)
    convert([str(run), str(native)], str(tmp_path / "trace.pftrace"))
    trace = load_file(tmp_path / "trace.pftrace")
    assert "[rollout] Rank 5, Process" in {trace.process_of(s.track) for s in trace.by_name("session")}


# --- on several cores -------------------------------------------------------------------------------
def _picture(trace: Trace) -> tuple:
    """What a person sees: each slice on its process and track, and each arrow."""
    slices = sorted((trace.process_of(s.track), trace.track_name(s.track), s.name, s.ts, s.dur, s.depth)
                    for s in trace.slices)
    return slices, sorted(native_flows(trace))


def test_workers_encode_the_files_in_parallel_into_the_same_trace(run, tmp_path):
    convert([str(run)], str(tmp_path / "one.pftrace"))
    stats = convert([str(run)], str(tmp_path / "many.pftrace"), workers=2)
    assert stats.files == 3
    assert _picture(load_file(tmp_path / "many.pftrace")) == _picture(load_file(tmp_path / "one.pftrace"))


def _auto_workers(files: list[str], min_bytes: int) -> int:
    # In a fresh interpreter: this one holds threads, and forking is then never chosen.
    result = run_python("""
        import json, sys
        from otel_rl.convert.parallel import auto_workers
        print(auto_workers(json.loads(sys.argv[1]), int(sys.argv[2])))
    """, None, json.dumps(files), str(min_bytes), check=True)
    return int(result.stdout)


def test_large_native_conversions_default_to_a_worker_per_core(run):
    files = sorted(str(p) for p in run.iterdir())
    assert _auto_workers(files, min_bytes=1) == min(len(files), len(os.sched_getaffinity(0)))


def test_small_or_single_file_conversions_default_to_this_process(run):
    files = sorted(str(p) for p in run.iterdir())
    assert _auto_workers(files, min_bytes=sum(os.path.getsize(p) for p in files) + 1) == 0
    assert _auto_workers(files[:1], min_bytes=1) == 0


def test_jobs_must_be_a_count():
    result = subprocess.run([sys.executable, "-m", "otel_rl", "convert", "run", "-o", "t.pftrace", "-j", "-2"],
                            capture_output=True, text=True, env=clean_env())
    assert result.returncode == 2
    assert "-j/--jobs: expected a number of worker processes (0 or more), got '-2'" in result.stderr


def test_parallel_parts_are_removed_once_joined(run, tmp_path):
    convert([str(run)], str(tmp_path / "many.pftrace"), workers=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many.pftrace", "run"]
