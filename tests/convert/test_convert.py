"""otel_rl.convert: many trace files in, one Perfetto-ready JSON document out."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hostile_files import gzip_bomb, run_measured
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_rl._internal import keys
from otel_rl._internal.encode.chrome_trace import BATCH_MARKER
from otel_rl._internal.export.file_exporter import ChromeTraceFileExporter, InPlaceBatchProcessor
from otel_rl._internal.read.lines import BLOCK, LONG, TAIL, line_blocks
from otel_rl._internal.read.source import open_input
from otel_rl.convert import ConvertStats, InputLimits, convert, iter_chrome_json_events, main

T0_US = 1_700_000_000_000_000


def event(name: str, ts: float, dur: float = 10.0, pid: Any = 1, tid: Any = 1, **extra: Any) -> dict:
    return {"ph": "X", "name": name, "cat": "span", "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            "args": {}, **extra}


def process_name(pid: Any, name: str) -> dict:
    return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}


def write_jsonl(path: Path, events: list[dict], tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events) + tail)
    return path


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def events_of(path: Path, ph: str | None = None) -> list[dict[str, Any]]:
    return [e for e in load(path)["traceEvents"] if ph is None or e["ph"] == ph]


def rank_file(directory: Path, rank: int, pid: int, span_names: list[str]) -> Path:
    """A real per-rank file: spans from a TracerProvider through the file exporter."""
    path = directory / f"traces-r{rank}.jsonl"
    resource = Resource({keys.SERVICE_NAME: "trainer", keys.PROCESS_PID: pid, keys.RANK: rank,
                         keys.ROLE: "actor"})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(InPlaceBatchProcessor(ChromeTraceFileExporter(str(path))))
    tracer = provider.get_tracer("test")
    for name in span_names:
        with tracer.start_as_current_span(name):
            pass
    provider.shutdown()
    return path


# --- merging ------------------------------------------------------------------------------
def test_rank_files_merge_into_one_document_perfetto_can_open(tmp_path):
    rank_file(tmp_path / "run", 0, pid=500, span_names=["step", "step"])
    rank_file(tmp_path / "run", 1, pid=501, span_names=["step"])
    out = tmp_path / "trace.json"

    stats = convert([str(tmp_path / "run")], str(out))

    doc = load(out)
    assert doc["displayTimeUnit"] == "ms"
    assert doc["otherData"]["files"] == 2
    assert stats.files == 2 and stats.events == len(doc["traceEvents"])
    assert len(events_of(out, "X")) == 3
    names = {e["pid"]: e["args"]["name"] for e in events_of(out, "M") if e["name"] == "process_name"}
    assert names == {500: "[actor] Rank 0, Process", 501: "[actor] Rank 1, Process"}


def test_identical_pids_and_tids_in_different_files_stay_separate(tmp_path):
    # Two machines, same pid and tid numbers: containers make this common.
    a = write_jsonl(tmp_path / "a.jsonl", [process_name(7, "rank 0"), event("fwd", T0_US, pid=7, tid=1)])
    b = write_jsonl(tmp_path / "b.jsonl", [process_name(7, "rank 1"), event("fwd", T0_US, pid=7, tid=1)])
    out = tmp_path / "merged.json"

    stats = convert([str(a), str(b)], str(out))

    assert stats.remapped_pids == 1
    x_pids = [e["pid"] for e in events_of(out, "X")]
    assert len(set(x_pids)) == 2
    names = {e["pid"]: e["args"]["name"] for e in events_of(out, "M")}
    # Each process keeps its name under its own pid.
    assert sorted(names.values()) == ["rank 0", "rank 1"]
    assert set(names) == set(x_pids)


def test_pid_is_rewritten_only_at_the_top_level_of_an_event(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [event("x", T0_US, pid=7)])
    tricky = event("x", T0_US, pid=7, args={"pid": 7, "note": '"pid":7,'})
    b = write_jsonl(tmp_path / "b.jsonl", [tricky])
    out = tmp_path / "merged.json"
    convert([str(a), str(b)], str(out))
    second = events_of(out, "X")[1]
    assert second["pid"] != 7
    assert second["args"] == {"pid": 7, "note": '"pid":7,'}


def test_a_pid_no_other_file_uses_is_kept(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [event("x", T0_US, pid=3), event("y", T0_US, pid=3)])
    out = tmp_path / "merged.json"
    convert([str(a)], str(out))
    assert {e["pid"] for e in events_of(out, "X")} == {3}


# --- damaged input --------------------------------------------------------------------------
def test_truncated_last_line_is_skipped_with_a_warning(tmp_path, capsys):
    path = write_jsonl(tmp_path / "traces-r0.jsonl", [event("a", T0_US), event("b", T0_US + 20)],
                       tail=b'{"ph":"X","name":"c","ts":17000000')
    out = tmp_path / "trace.json"

    assert main([str(path), "-o", str(out)]) == 0

    assert [e["name"] for e in events_of(out, "X")] == ["a", "b"]
    err = capsys.readouterr().err
    assert f"{path}:3: incomplete last line skipped" in err
    assert "1 incomplete last lines skipped" in err


def test_malformed_middle_line_is_reported_with_file_and_line(tmp_path, capsys):
    path = tmp_path / "traces-r0.jsonl"
    lines = [orjson.dumps(event("a", T0_US)), b'{"ph":"X","name":"bro', orjson.dumps(event("c", T0_US))]
    path.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "trace.json"

    assert main([str(path), "-o", str(out)]) == 0

    stats = convert([str(path)], str(out))
    assert [(f, line) for f, line, _ in stats.malformed] == [(str(path), 2)]
    assert [e["name"] for e in events_of(out, "X")] == ["a", "c"]
    assert f"{path}:2: malformed line skipped" in capsys.readouterr().err


def test_strict_mode_fails_when_a_line_was_skipped(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [event("a", T0_US)], tail=b'{"ph":')
    assert main([str(path), "-o", str(tmp_path / "out.json"), "--strict"]) == 1


def test_exit_status_is_nonzero_when_nothing_could_be_converted(tmp_path, capsys):
    assert main([str(tmp_path / "missing-*.jsonl"), "-o", str(tmp_path / "out.json")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_other_run_files_in_a_directory_are_left_out_quietly(tmp_path, capsys):
    write_jsonl(tmp_path / "traces-r0.jsonl", [event("a", T0_US)])
    records = write_jsonl(tmp_path / "sessions-r0.jsonl",
                          [{"task_id": 1, "session_id": 2, "status": "accepted"}])
    assert main([str(tmp_path), "-o", str(tmp_path / "out" / "trace.json")]) == 0
    assert "sessions-r0.jsonl" not in capsys.readouterr().err

    stats = convert([str(tmp_path)], str(tmp_path / "out" / "trace.json"))
    assert stats.files == 1 and stats.skipped_files == []
    assert [Path(f).name for f in stats.ignored] == ["sessions-r0.jsonl"]
    # Named explicitly, the same file earns a warning.
    named = convert([str(records)], str(tmp_path / "out" / "trace.json"))
    assert [Path(f).name for f, _ in named.skipped_files] == ["sessions-r0.jsonl"]


def test_output_inside_an_input_directory_is_not_read_back(tmp_path):
    write_jsonl(tmp_path / "traces-r0.jsonl", [event("a", T0_US)])
    first = convert([str(tmp_path)], str(tmp_path / "trace.json"))
    second = convert([str(tmp_path)], str(tmp_path / "trace.json"))
    assert first.events == second.events


def exporter_file(path: Path, batches: list[list[str]], pid: int = 42) -> Path:
    """A file as otel_rl's exporter writes it: checksummed batches of span events."""
    resource = Resource({keys.SERVICE_NAME: "trainer", keys.PROCESS_PID: pid, keys.RANK: 0})
    exporter = ChromeTraceFileExporter(str(path))
    span_id = 1
    for batch in batches:
        spans = []
        for name in batch:
            span_id += 1
            spans.append(ReadableSpan(name, SpanContext(span_id, span_id, False, TraceFlags(1)),
                                      None, resource, {keys.THREAD_ID: 1},
                                      start_time=T0_US * 1000 + span_id * 10_000,
                                      end_time=T0_US * 1000 + span_id * 10_000 + 5_000))
        exporter.export(spans)
    exporter.shutdown()
    return path


def test_batch_markers_are_not_copied_into_the_output(tmp_path):
    path = exporter_file(tmp_path / "traces-r0.jsonl", [["a", "b"], ["c"]])
    out = tmp_path / "trace.json"
    stats = convert([str(path)], str(out))
    assert sorted(e["name"] for e in events_of(out, "X")) == ["a", "b", "c"]
    assert BATCH_MARKER not in {e["name"] for e in events_of(out)}
    assert stats.events == len(events_of(out))


def test_an_edited_batch_is_checked_line_by_line_with_exact_line_numbers(tmp_path):
    path = exporter_file(tmp_path / "traces-r0.jsonl", [["a", "b"], ["c", "d"]])
    lines = path.read_bytes().splitlines(keepends=True)
    # Damage the second batch: its checksum no longer matches.
    bad = next(i for i, line in enumerate(lines) if b'"name":"d"' in line)
    lines[bad] = lines[bad][:40] + b"\n"
    path.write_bytes(b"".join(lines))
    out = tmp_path / "trace.json"

    stats = convert([str(path)], str(out))

    assert [line for _, line, _ in stats.malformed] == [bad + 1]
    assert sorted(e["name"] for e in events_of(out, "X")) == ["a", "b", "c"]


def test_verified_batches_are_remapped_when_their_pid_is_taken(tmp_path):
    first = exporter_file(tmp_path / "traces-r0.jsonl", [["a"]], pid=42)
    second = exporter_file(tmp_path / "traces-r1.jsonl", [["b", "c"]], pid=42)
    out = tmp_path / "trace.json"
    convert([str(first), str(second)], str(out))
    pids = {e["name"]: e["pid"] for e in events_of(out, "X")}
    assert pids["a"] == 42 and pids["b"] == pids["c"] != 42


# --- formats --------------------------------------------------------------------------------
def test_gzip_output_loads_with_the_standard_library(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [event("a", T0_US)])
    out = tmp_path / "trace.json.gz"
    convert([str(path)], str(out))
    with gzip.open(out, "rb") as f:
        doc = json.load(f)
    assert [e["name"] for e in doc["traceEvents"]] == ["a"]


def test_gzipped_inputs_are_found_in_directories_recursively(tmp_path):
    nested = tmp_path / "logs" / "rank1"
    nested.mkdir(parents=True)
    with gzip.open(nested / "traces-r1.jsonl.gz", "wb") as f:
        f.write(orjson.dumps(event("zipped", T0_US)) + b"\n")
    write_jsonl(tmp_path / "logs" / "traces-r0.jsonl", [event("plain", T0_US, pid=2)])
    out = tmp_path / "trace.json"
    stats = convert([str(tmp_path / "logs")], str(out))
    assert stats.files == 2
    assert sorted(e["name"] for e in events_of(out, "X")) == ["plain", "zipped"]


def test_chrome_json_documents_are_merged_like_torch_profiler_traces(tmp_path):
    kineto = {"schemaVersion": 1, "baseTimeNanoseconds": T0_US * 1000, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100.0, "dur": 5.0},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]}
    (tmp_path / "rank0.pt.trace.json").write_bytes(orjson.dumps(kineto, option=orjson.OPT_INDENT_2))
    (tmp_path / "array.json").write_bytes(orjson.dumps([event("cpu op", T0_US, pid=0)]))
    out = tmp_path / "out" / "trace.json"

    stats = convert([str(tmp_path / "rank0.pt.trace.json"), str(tmp_path / "array.json")], str(out))

    assert stats.files == 2
    gemm = next(e for e in events_of(out, "X") if e["name"] == "gemm")
    # Relative Kineto timestamps land on the epoch clock the spans use.
    assert gemm["ts"] == T0_US + 100.0
    cpu = next(e for e in events_of(out, "X") if e["name"] == "cpu op")
    assert cpu["pid"] != gemm["pid"]


def test_iter_chrome_json_events_reads_trace_event_documents(tmp_path):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wb") as f:
        f.write(orjson.dumps({"traceEvents": [event("a", 1.0), event("b", 2.0)]}))
    assert [e["name"] for e in iter_chrome_json_events(str(path))] == ["a", "b"]


def otlp_request(service: str, pid: int, spans: list[dict]) -> dict:
    return {"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": service}},
            {"key": "process.pid", "value": {"intValue": str(pid)}},
        ]},
        "scopeSpans": [{"scope": {"name": "otel_rl"}, "spans": spans}],
    }]}


def otlp_span(name: str, span_id: str, start_ns: int, end_ns: int, *, parent: str = "",
              kind: int = 1, **extra: Any) -> dict:
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": span_id,
            "parentSpanId": parent, "name": name, "kind": kind,
            "startTimeUnixNano": str(start_ns), "endTimeUnixNano": str(end_ns), **extra}


def test_otlp_json_lines_from_a_collector_are_converted(tmp_path):
    start = T0_US * 1000 + 123
    span = otlp_span("generate", "eee19b7ec3c1b174", start, start + 2_500_000, attributes=[
        {"key": "rl.phase", "value": {"stringValue": "generate"}},
        {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "512"}},
        {"key": "temperature", "value": {"doubleValue": 0.7}},
        {"key": "stop", "value": {"arrayValue": {"values": [{"stringValue": "</s>"}]}}},
        {"key": "rl.span.kind", "value": {"stringValue": "phase"}},
    ], events=[{"timeUnixNano": str(start + 1000), "name": "first_token",
                "attributes": [{"key": "ok", "value": {"boolValue": True}}]}],
        status={"code": 2, "message": "timeout"})
    path = tmp_path / "otel-collector.json"
    path.write_bytes(orjson.dumps(otlp_request("rollout", 4321, [span])) + b"\n")
    out = tmp_path / "trace.json"

    stats = convert([str(path)], str(out))

    assert stats.spans == 1
    (x,) = events_of(out, "X")
    assert (x["name"], x["cat"], x["pid"]) == ("generate", "phase", 4321)
    assert x["ts"] == start / 1000 and x["dur"] == 2500.0
    assert x["args"]["gen_ai.usage.output_tokens"] == 512
    assert x["args"]["stop"] == ["</s>"]
    assert x["args"]["id"] == "eee19b7ec3c1b174"
    assert x["args"]["trace"] == "5b8efff798038103d269b633813fc60c"
    assert x["args"]["status"] == "ERROR"
    (instant,) = events_of(out, "i")
    assert instant["name"] == "first_token" and instant["args"] == {"ok": True}


def test_a_pretty_printed_otlp_json_document_is_converted(tmp_path):
    request = otlp_request("svc", 11, [otlp_span("a", "00000000000000aa", T0_US * 1000,
                                                 T0_US * 1000 + 5000)])
    path = tmp_path / "export.json"
    path.write_bytes(orjson.dumps(request, option=orjson.OPT_INDENT_2))
    out = tmp_path / "trace.json"
    assert convert([str(path)], str(out)).spans == 1
    assert [e["name"] for e in events_of(out, "X")] == ["a"]


def test_otlp_client_and_server_spans_are_linked_by_a_flow(tmp_path):
    t = T0_US * 1000
    client = otlp_span("POST /generate", "0000000000000c11", t, t + 9000, kind=3)
    server = otlp_span("/generate", "00000000000005e1", t + 1000, t + 8000, kind=2,
                       parent="0000000000000c11")
    path = tmp_path / "collector.jsonl"
    path.write_bytes(orjson.dumps(otlp_request("rollout", 10, [client])) + b"\n"
                     + orjson.dumps(otlp_request("sglang", 20, [server])) + b"\n")
    out = tmp_path / "trace.json"
    convert([str(path)], str(out))
    (start,) = events_of(out, "s")
    (finish,) = events_of(out, "f")
    assert start["id"] == finish["id"] and start["pid"] == 10 and finish["pid"] == 20


def test_flows_join_client_and_server_files_of_different_processes(tmp_path):
    same_pid = 1  # both in containers: the merge must keep them apart and linked
    client_path, server_path = tmp_path / "traces-r0.jsonl", tmp_path / "server.jsonl"
    providers = []
    for path, service in ((client_path, "rollout"), (server_path, "sglang")):
        provider = TracerProvider(resource=Resource({keys.SERVICE_NAME: service,
                                                     keys.PROCESS_PID: same_pid}),
                                  shutdown_on_exit=False)
        provider.add_span_processor(InPlaceBatchProcessor(ChromeTraceFileExporter(str(path))))
        providers.append(provider)
    propagator = TraceContextTextMapPropagator()
    carrier: dict[str, str] = {}
    client_tracer, server_tracer = (p.get_tracer("test") for p in providers)
    with client_tracer.start_as_current_span("POST /generate", kind=SpanKind.CLIENT):
        propagator.inject(carrier)  # what an HTTP client instrumentation does
        with server_tracer.start_as_current_span("generate", context=propagator.extract(carrier),
                                                 kind=SpanKind.SERVER):
            pass
    for provider in providers:
        provider.shutdown()
    out = tmp_path / "trace.json"

    convert([str(client_path), str(server_path)], str(out))

    x = {e["name"]: e for e in events_of(out, "X")}
    (start,) = events_of(out, "s")
    (finish,) = events_of(out, "f")
    assert start["id"] == finish["id"]
    assert (start["pid"], start["tid"]) == (x["POST /generate"]["pid"], x["POST /generate"]["tid"])
    assert (finish["pid"], finish["tid"]) == (x["generate"]["pid"], x["generate"]["tid"])
    assert x["POST /generate"]["pid"] != x["generate"]["pid"]


# --- scale ----------------------------------------------------------------------------------
def test_worker_processes_produce_the_same_events(tmp_path):
    for rank in range(3):
        write_jsonl(tmp_path / "in" / f"traces-r{rank}.jsonl",
                    [process_name(9, f"rank {rank}")]
                    + [event(f"op{i}", T0_US + i, pid=9, tid=rank) for i in range(2_000)]
                    + [event("other", T0_US, pid=10)])
    serial, parallel = tmp_path / "serial.json", tmp_path / "parallel.json"
    s1 = convert([str(tmp_path / "in")], str(serial), workers=0)
    s2 = convert([str(tmp_path / "in")], str(parallel), workers=2)

    def canonical(path: Path) -> Counter:
        return Counter(orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in events_of(path))

    assert s1.events == s2.events == 3 * 2_002
    assert canonical(serial) == canonical(parallel)


def test_stats_are_a_plain_dataclass():
    stats = ConvertStats()
    assert (stats.files, stats.events, stats.skipped_truncated, stats.malformed) == (0, 0, 0, [])


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_output_is_replaced_only_when_complete(tmp_path, suffix):
    out = tmp_path / f"trace{suffix}"
    write_jsonl(tmp_path / "t.jsonl", [event("a", T0_US)])
    convert([str(tmp_path / "t.jsonl")], str(out))
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert load(out)["traceEvents"]


# --- hostile input: bounded line length and decompressed size ---------------------------------
def test_a_small_gzip_holding_a_256_mib_line_converts_in_bounded_memory(tmp_path):
    bomb = gzip_bomb(tmp_path / "in" / "traces-r0.jsonl.gz", before=[event("kept", T0_US)])
    assert bomb.stat().st_size < 400_000
    out = tmp_path / "trace.json"

    status, peak_mib, err = run_measured("otel_rl.convert", [str(bomb), "-o", str(out)])

    assert status == 0, err
    assert peak_mib < 300, f"peak RSS {peak_mib:.0f} MiB"
    assert [e["name"] for e in events_of(out, "X")] == ["kept"]
    assert f"warning: {bomb}: read only in part" in err and "--max-gzip-ratio" in err
    assert "1 inputs read only in part" in err


def test_a_line_longer_than_the_bound_is_skipped_with_its_line_number(tmp_path, capsys):
    path = tmp_path / "traces-r0.jsonl"
    long_event = orjson.dumps(event("long", T0_US, args={"blob": "x" * (3 << 20)}))
    path.write_bytes(b"\n".join([orjson.dumps(event("a", T0_US)), long_event,
                                 orjson.dumps(event("c", T0_US))]) + b"\n")
    out = tmp_path / "trace.json"

    assert main([str(path), "-o", str(out), "--max-line-mb", "1"]) == 0

    assert [e["name"] for e in events_of(out, "X")] == ["a", "c"]
    err = capsys.readouterr().err
    assert f"{path}:2: malformed line skipped: line of {len(long_event):,} bytes, over the bound " \
           "of 1 MiB (--max-line-mb)" in err
    assert main([str(path), "-o", str(out), "--max-line-mb", "1", "--strict"]) == 1
    assert main([str(path), "-o", str(out), "--max-line-mb", "4"]) == 0
    assert [e["name"] for e in events_of(out, "X")] == ["a", "long", "c"]


@pytest.mark.parametrize("read_size", [7, 64, 4096])
def test_blocks_read_as_views_hold_the_same_lines_skips_and_tail(tmp_path, read_size):
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"one\n" + b"x" * 300 + b"\ntwo\nthree and more\n\nfour\n" + b"y" * 40 + b"\nfive")

    def read(views: bool) -> tuple[bytes, list]:
        with open_input(str(path)) as f:
            items = list(line_blocks(f, 100, read_size, views=views))
        lines = b"".join(bytes(payload) for kind, payload in items if kind == BLOCK)
        return lines, [(kind, payload) for kind, payload in items if kind != BLOCK]

    assert read(views=True) == read(views=False) == (b"one\ntwo\nthree and more\n\nfour\n" + b"y" * 40 + b"\n",
                                                     [(LONG, 300), (TAIL, b"five")])


def test_a_long_first_line_does_not_hide_the_lines_after_it(tmp_path):
    path = tmp_path / "traces-r0.jsonl"
    lines = [b'{"ph":"X","name":"' + b"y" * (2 << 20) + b'"}'] + [orjson.dumps(event(n, T0_US)) for n in "ab"]
    path.write_bytes(b"\n".join(lines) + b"\n" + b"z" * (2 << 20))
    out = tmp_path / "trace.json"

    stats = convert([str(path)], str(out), limits=InputLimits(max_line_bytes=1 << 20))

    assert [e["name"] for e in events_of(out, "X")] == ["a", "b"]
    assert [(line, message.split(" bytes")[0] + " bytes") for _, line, message in stats.malformed] == [
        (1, f"line of {len(lines[0]):,} bytes"), (4, f"line of {2 << 20:,} bytes")]
    assert stats.skipped_truncated == 0


def test_a_gzip_input_is_read_only_up_to_its_decompression_bound(tmp_path):
    path = tmp_path / "traces-r0.jsonl.gz"
    with gzip.open(path, "wb") as f:
        for i in range(20_000):
            f.write(orjson.dumps(event("e", T0_US + i)) + b"\n")
    compressed = path.stat().st_size
    out = tmp_path / "trace.json"

    limits = InputLimits(max_gzip_ratio=10, min_gzip_bytes=1024)
    stats = convert([str(path)], str(out), limits=limits)

    written = len(events_of(out, "X"))
    assert 0 < written < 20_000
    # Whole lines only, and no more than the bound lets through.
    assert written * len(orjson.dumps(event("e", T0_US + 10_000)) + b"\n") <= 10 * compressed + 100
    assert [p for p, _ in stats.cut_short] == [str(path)] and stats.skipped_truncated == 0
    assert "more than 10 times its compressed size" in stats.cut_short[0][1]
    assert load(out)["otherData"]["inputs_read_in_part"] == 1
    everything = convert([str(path)], str(out), limits=InputLimits(max_gzip_ratio=0, min_gzip_bytes=1024))
    assert everything.events == 20_000 and everything.cut_short == []


def test_a_gzip_document_over_the_bound_is_skipped_unparsed(tmp_path):
    path = tmp_path / "torch.json.gz"
    with gzip.open(path, "wb") as f:
        f.write(orjson.dumps({"traceEvents": [event("k", T0_US + i) for i in range(20_000)]}))
    out = tmp_path / "trace.json"

    stats = convert([str(path)], str(out), limits=InputLimits(max_gzip_ratio=5, min_gzip_bytes=1024))

    assert stats.events == 0 and stats.files == 0
    assert [p for p, _ in stats.skipped_files] == [str(path)]
    assert "more than 5 times its compressed size" in stats.skipped_files[0][1]


def test_an_otlp_span_whose_id_is_a_json_object_is_skipped_and_reported(tmp_path):
    good = otlp_span("kept", "b" * 16, 1_700_000_000_000_000_000, 1_700_000_000_001_000_000)
    bad = otlp_span("lost", "c" * 16, 1_700_000_000_000_000_000, 1_700_000_000_001_000_000)
    bad["attributes"] = [{"key": keys.SESSION_ID, "value": {"kvlistValue": {"values": []}}}]
    path = tmp_path / "otel-traces.jsonl"
    path.write_text(json.dumps(otlp_request("svc", 7, [good, bad])) + "\n")
    out = tmp_path / "trace.json"

    stats = convert([str(path)], str(out))

    assert [e["name"] for e in events_of(out, "X")] == ["kept"]
    assert stats.malformed == [(str(path), 1, f"span 1: {keys.SESSION_ID} is not a string or number")]
    assert stats.spans == 1


def test_a_gzip_input_damaged_mid_stream_is_reported_not_raised(tmp_path, capsys):
    data = bytearray(gzip.compress(b"".join(orjson.dumps(event(f"e{i}", T0_US + i)) + b"\n"
                                            for i in range(2_000))))
    data[100] ^= 0xFF  # the deflate stream itself, not only its checksum
    path = tmp_path / "traces-r0.jsonl.gz"
    path.write_bytes(bytes(data))

    assert main([str(path), "-o", str(tmp_path / "trace.json")]) == 1

    assert f"warning: {path}: skipped (unreadable: " in capsys.readouterr().err


def test_a_mistyped_input_never_replaces_an_existing_output(tmp_path, capsys):
    out = tmp_path / "trace.json"
    out.write_text('{"traceEvents": [{"ph": "X", "name": "kept"}]}')
    assert main([str(tmp_path / "no-such-run"), "-o", str(out)]) == 1
    assert "no such file" in capsys.readouterr().err
    assert json.loads(out.read_text())["traceEvents"][0]["name"] == "kept"
