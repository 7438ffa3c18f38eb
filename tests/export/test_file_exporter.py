"""The per-rank Chrome trace file: whole JSON lines, appended, never raising."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_rl._internal import guard, keys
from otel_rl._internal.encode.chrome_markers import BATCH_MARKER
from otel_rl._internal.export.file_exporter import ChromeTraceFileExporter, InPlaceBatchProcessor, bundled_spans
from otel_rl._internal.recording import record
from support import SpanFactory, read_trace

RESOURCE = Resource({keys.SERVICE_NAME: "trainer", keys.PROCESS_PID: 31337, keys.RANK: 2})
make_span = SpanFactory(RESOURCE, thread={keys.THREAD_ID: 1, keys.THREAD_NAME: "MainThread"}).span


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every line of the file, each of which must be one JSON object."""
    assert path.read_bytes().endswith(b"\n"), "the file must end with a complete line"
    return read_trace(path)


def names(events: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in events if e["ph"] == "X"]


@pytest.fixture(autouse=True)
def fresh_diagnostics():
    guard.clear()
    yield
    guard.clear()


def test_spans_of_a_tracer_provider_become_json_lines_in_a_new_directory(tmp_path):
    path = tmp_path / "run" / "logs" / "traces-r2.jsonl"
    processor = InPlaceBatchProcessor(ChromeTraceFileExporter(str(path)))
    provider = TracerProvider(resource=RESOURCE, shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")

    with tracer.start_as_current_span("train_step"):
        with tracer.start_as_current_span("forward"):
            pass
    provider.force_flush()

    events = read_events(path)
    assert sorted(names(events)) == ["forward", "train_step"]
    step = next(e for e in events if e["name"] == "train_step")
    assert step["pid"] == 31337
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in events)
    provider.shutdown()


def test_nothing_is_written_before_flush_batch(tmp_path):
    path = tmp_path / "traces.jsonl"
    processor = InPlaceBatchProcessor(ChromeTraceFileExporter(str(path)))
    processor.on_end(make_span("step"))
    assert path.read_bytes() == b""
    processor.flush_batch()
    assert names(read_events(path)) == ["step"]


def test_unsampled_spans_are_not_written(tmp_path):
    path = tmp_path / "traces.jsonl"
    processor = InPlaceBatchProcessor(ChromeTraceFileExporter(str(path)))
    processor.on_end(make_span("kept"))
    processor.on_end(make_span("sampled out", sampled=False))
    processor.flush_batch()
    assert names(read_events(path)) == ["kept"]


def test_batches_are_appended_to_what_the_file_already_holds(tmp_path):
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b'{"ph":"i","name":"earlier run","ts":1,"pid":1,"tid":1,"s":"t"}\n')
    exporter = ChromeTraceFileExporter(str(path))
    assert exporter.export([make_span("first", 0, 1)]) is SpanExportResult.SUCCESS
    assert exporter.export([make_span("second", 2, 3)]) is SpanExportResult.SUCCESS
    events = read_events(path)
    assert events[0]["name"] == "earlier run"
    assert names(events) == ["first", "second"]


def test_lines_are_on_disk_when_export_returns(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = ChromeTraceFileExporter(str(path))
    exporter.export([make_span("a")])
    # No flush, no shutdown: another reader (or a post-mortem) sees the line.
    assert names(read_events(path)) == ["a"]


def test_write_errors_return_failure_and_are_counted_not_raised(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the directory should be")
    exporter = ChromeTraceFileExporter(str(blocker / "traces.jsonl"))

    assert exporter.export([make_span("lost")]) is SpanExportResult.FAILURE
    assert guard.diagnostics().get("trace_file_error", 0) >= 1
    assert guard.diagnostics().get("trace_file_events_lost", 0) >= 1


def test_shutdown_writes_spans_still_waiting_for_their_session(tmp_path):
    path = tmp_path / "traces.jsonl"
    processor = InPlaceBatchProcessor(ChromeTraceFileExporter(str(path)))
    session = make_span("session", 0, 100)  # still running when the process stops
    processor.on_end(make_span("generate", 10, 20, parent=session,
                               attrs={keys.SESSION_ID: "s-1", keys.SPAN_KIND: "phase"}))
    processor.flush_batch()
    assert names(read_events(path)) == []

    processor.shutdown()
    assert names(read_events(path)) == ["generate"]


def test_spans_after_shutdown_are_ignored_and_export_fails(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = ChromeTraceFileExporter(str(path))
    processor = InPlaceBatchProcessor(exporter)
    processor.shutdown()
    processor.on_end(make_span("late"))
    assert processor.flush_batch() is True
    assert exporter.export([make_span("late")]) is SpanExportResult.FAILURE
    assert path.read_bytes() == b""


def test_a_full_buffer_drops_new_spans_and_counts_them(tmp_path):
    path = tmp_path / "traces.jsonl"
    processor = InPlaceBatchProcessor(ChromeTraceFileExporter(str(path)), max_buffered=5)
    for i in range(8):
        processor.on_end(make_span(f"s{i}", i, i + 1))
    processor.flush_batch()
    assert names(read_events(path)) == [f"s{i}" for i in range(5)]
    assert guard.diagnostics()["spans_dropped_file_buffer"] == 3


def test_a_full_buffer_drops_the_records_a_batch_brings_past_it_and_counts_them(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = ChromeTraceFileExporter(str(path))
    exporter.set_resource(Resource.create({"service.name": "t"}))
    processor = InPlaceBatchProcessor(exporter, max_buffered=5)
    pairs = []
    for i in range(8):
        rec = [None] * record.FIELDS
        rec[record.NAME:record.END + 1] = [f"s{i}", 7, i + 1, 0, False, 1, None, i * 1000, i * 1000 + 500]
        rec[record.KIND], rec[record.STATUS] = 0, 0
        pairs.append((tuple(rec), {keys.THREAD_ID: 1, keys.THREAD_NAME: "main"}))
    processor.on_records(pairs[:3])
    processor.on_records(pairs[3:])
    processor.flush_batch()
    assert names(read_events(path)) == [f"s{i}" for i in range(5)]
    assert guard.diagnostics()["spans_dropped_file_buffer"] == 3


def _pair(name: str, span_id: int, parent: int = 0, **attrs: Any) -> tuple:
    rec = [None] * record.FIELDS
    rec[record.NAME:record.END + 1] = [name, 7, span_id, parent, False, 1, None, span_id * 1000, span_id * 1000 + 500]
    rec[record.KIND], rec[record.STATUS] = 0, 0
    return tuple(rec), {keys.THREAD_ID: 1, keys.THREAD_NAME: "main", **attrs}


def _bundle(session_id: int, span_id: int) -> tuple:
    """A session kept with its two phases as one item, as the compiled record sink keeps it."""
    rec, attrs = _pair("session", span_id, 1, **{keys.SPAN_KIND: keys.KIND_SESSION, keys.SESSION_ID: session_id})
    phases = tuple(_pair(name, span_id * 10 + k, span_id, **{keys.SPAN_KIND: keys.KIND_PHASE,
                                                            keys.SESSION_ID: session_id})
                   for k, name in enumerate(["generate", "reward"]))
    return rec, attrs, phases


def test_a_bundled_session_spells_out_as_its_phases_pairs_then_its_own():
    session, attrs, phases = _bundle(3, 5)
    plain = _pair("step", 9)
    assert bundled_spans([session_item := (session, attrs, phases), plain]) == [*phases, session_item[:2], plain]


def test_bundled_sessions_count_every_span_they_hold(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = ChromeTraceFileExporter(str(path))
    exporter.set_resource(Resource.create({"service.name": "t"}))
    processor = InPlaceBatchProcessor(exporter)
    processor.on_records([_bundle(0, 2), _pair("step", 9)], 4)
    processor.stage_batch()
    processor.on_records([_bundle(1, 3)], 3)
    assert processor.flush_batch()
    assert sorted(names(read_events(path))) == sorted(["step"] + ["session", "generate", "reward"] * 2)
    assert processor.exported == 7 and processor.failed == 0


def test_an_exporter_that_does_not_take_bundled_sessions_gets_their_pairs():
    got: list[Any] = []

    class Listing:
        def export(self, spans):
            got.extend(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    processor = InPlaceBatchProcessor(Listing())
    item = _bundle(0, 2)
    processor.on_records([item, _pair("step", 9)], 4)
    assert processor.flush_batch()
    assert got == [*item[2], item[:2], _pair("step", 9)]
    assert processor.exported == 4


def test_a_full_buffer_drops_the_spans_of_a_bundled_session_past_it_and_counts_them():
    got: list[Any] = []

    class Listing:
        takes_bundles = True

        def export(self, spans):
            got.extend(spans)
            return SpanExportResult.SUCCESS

    processor = InPlaceBatchProcessor(Listing(), max_buffered=5)
    first, second = _bundle(0, 2), _bundle(1, 3)
    processor.on_records([first, second], 6)
    assert processor.flush_batch()
    assert got == [*first[2], first[:2], *second[2][:2]]
    assert guard.diagnostics()["spans_dropped_file_buffer"] == 1
    assert processor.exported == 5


def test_large_flushes_are_exported_in_batches_of_max_batch(tmp_path):
    calls: list[int] = []

    class Counting(ChromeTraceFileExporter):
        def export(self, spans):
            calls.append(len(spans))
            return super().export(spans)

    path = tmp_path / "traces.jsonl"
    processor = InPlaceBatchProcessor(Counting(str(path)), max_batch=4)
    for i in range(10):
        processor.on_end(make_span(f"s{i}", i, i + 1))
    assert processor.flush_batch() is True
    assert calls == [4, 4, 2]
    assert len(names(read_events(path))) == 10


def test_each_batch_is_closed_by_a_marker_with_its_checksum(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = ChromeTraceFileExporter(str(path))
    exporter.export([make_span("a", 0, 1), make_span("b", 2, 3)])
    exporter.export([make_span("c", 4, 5)])

    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    markers = [i for i, line in enumerate(lines) if json.loads(line)["name"] == BATCH_MARKER]
    assert len(markers) == 2 and markers[-1] == len(lines) - 1
    start = 0
    for index in markers:
        info = json.loads(lines[index])["args"]
        body = b"".join(lines[start:index])
        assert info["lines"] == index - start
        assert info["bytes"] == len(body)
        assert info["crc32"] == zlib.crc32(body)
        assert info["pids"] == [31337]
        start = index + 1


def test_spans_encoded_ahead_are_written_with_the_next_batch_under_one_marker(tmp_path):
    path = tmp_path / "traces.jsonl"
    processor = InPlaceBatchProcessor(ChromeTraceFileExporter(str(path)))
    processor.on_end(make_span("a", 0, 1))
    processor.on_end(make_span("b", 2, 3))
    processor.stage_batch()
    assert not path.exists() or path.read_bytes() == b""  # encoded, not yet written
    processor.on_end(make_span("c", 4, 5))
    processor.stage_batch()
    processor.on_end(make_span("d", 6, 7))
    assert processor.flush_batch()

    events = read_events(path)
    assert names(events) == ["a", "b", "c", "d"]
    assert [e["name"] for e in events].count(BATCH_MARKER) == 1
    assert processor.exported == 4 and processor.failed == 0


def test_spans_encoded_ahead_alone_still_make_a_batch(tmp_path):
    path = tmp_path / "traces.jsonl"
    processor = InPlaceBatchProcessor(ChromeTraceFileExporter(str(path)))
    processor.on_end(make_span("a", 0, 1))
    processor.stage_batch()
    assert processor.flush_batch()

    assert names(read_events(path)) == ["a"]
    assert processor.exported == 1


def test_spans_encoded_ahead_are_written_by_shutdown(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = ChromeTraceFileExporter(str(path))
    assert exporter.stage([make_span("a", 0, 1)])
    exporter.shutdown()

    assert names(read_events(path)) == ["a"]
    assert not exporter.stage([make_span("b", 2, 3)])  # shut down: refused, not kept


def test_a_holding_exporter_keeps_spans_encoded_ahead_until_the_save(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = ChromeTraceFileExporter(str(path), hold=True)  # save_interval above 1
    processor = InPlaceBatchProcessor(exporter)
    processor.on_end(make_span("a", 0, 1))
    processor.stage_batch()
    assert processor.flush_batch()
    assert not path.exists()  # held, as the batch it belongs to

    assert exporter.force_flush()
    assert names(read_events(path)) == ["a"]


def test_a_lone_surrogate_costs_no_line_of_its_batch(tmp_path):
    odd = b"run-\xff".decode("utf-8", "surrogateescape")  # an undecodable file name
    path = tmp_path / "traces.jsonl"
    exporter = ChromeTraceFileExporter(str(path))
    spans = [make_span(f"s{i}", i, i + 1) for i in range(50)]
    spans.insert(25, make_span(odd, 60, 61, attrs={"rl.args.file": odd, odd: 1}))
    assert exporter.export(spans) is SpanExportResult.SUCCESS

    events = read_events(path)  # strict UTF-8 throughout
    assert len(names(events)) == 51
    (written,) = [e for e in events if e["name"] == "run-\\udcff"]
    assert written["args"]["file"] == "run-\\udcff" and written["args"]["run-\\udcff"] == 1
    marker = events[-1]["args"]
    assert marker["lines"] == len(events) - 1
    assert "trace_file_error" not in guard.diagnostics()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_write_the_parents_spans_again(tmp_path):
    path = tmp_path / "traces.jsonl"
    processor = InPlaceBatchProcessor(ChromeTraceFileExporter(str(path)))
    processor.on_end(make_span("parent work"))
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            processor.flush_batch()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    processor.flush_batch()
    assert names(read_events(path)) == ["parent work"]
