"""The exporter's record path writes what the SDK-span path writes, byte for byte."""

from __future__ import annotations

import collections
import dataclasses
import gc
import itertools
import os
import random
import threading

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import otel_rl
from otel_rl._internal.encode import chrome_place, chrome_trace
from otel_rl._internal.encode.perfetto import encoder as perfetto_encoder
from otel_rl._internal.encode.readable import ReadableBuilder
from otel_rl._internal.export.chain import ExportChain
from otel_rl._internal.export import process, record_sink, wire
from otel_rl._internal.export.file_exporter import InPlaceBatchProcessor, span_total
from otel_rl._internal.export.record_sink import RecordSink
from otel_rl._internal.recording import record
from otel_rl._internal.recording.record import expand
from otel_rl._internal.state import STATE


def _workload(rounds: int) -> None:
    tracer = otel_rl.get_otel_tracer()
    event = otel_rl.trace_session_event
    for i in range(rounds):
        with otel_rl.step_scope(i):
            with otel_rl.trace_scope("outer", category="compute",
                                     args={"i": i, "nested": {"a": [1, 2], "b": "x"}, "big": 1 << 70}):
                with otel_rl.trace_scope("inner", args={"prompt": "secret", "f": 1.5}):
                    otel_rl.instant("tick", args={"k": i})
                otel_rl.set_gauge("gpu_mem", float(i))
            try:
                with otel_rl.trace_scope("boom"):
                    raise ValueError("bad")
            except ValueError:
                pass
        task = otel_rl.register_task()
        sessions = []
        for k in range(3):
            sid = otel_rl.register_session(task)
            sessions.append(sid)
            event("mark_generate_start", session_id=sid)
            event("mark_generate_end", session_id=sid)
            otel_rl.increment_counter("tokens", 5, session_id=sid)
            if k == 1:  # a phase with a payload, and one marked on another thread
                event("mark_judge_start", session_id=sid, model="m", tokens=3)
                event("mark_judge_end", session_id=sid)
                marker = threading.Thread(target=lambda: (event("mark_verify_start", session_id=sid),
                                                          event("mark_verify_end", session_id=sid)), name="verifier")
                marker.start()
                marker.join()
            event("mark_reward_start", session_id=sid)
            if k == 2:
                event("mark_toolcall_start", session_id=sid)  # interrupted at the end
            event("mark_reward_end", session_id=sid)
        otel_rl.set_session_id(sessions[0])
        with otel_rl.trace_session_phase("generate"):
            with tracer.start_as_current_span("sdk-child") as span:
                span.add_event("ev", {"x": 1})
        event("mark_finalized", task_id=task, status="accepted" if i % 3 else "rejected",
              reason="stale" if i % 5 == 0 else None)
        if i % 4 == 0:
            otel_rl.consume(sessions, step=i)
            otel_rl.weight_sync(i, "recv")
        worker = threading.Thread(target=lambda: otel_rl.trace_scope("thread-work").__enter__().__exit__(
            None, None, None), name=f"w{i % 2}")
        worker.start()
        worker.join()


def _nested_phases(rounds: int) -> None:
    """Sessions whose marked phase holds another: it ends after it, so its session's bundle
    holds it after the phase it holds (not outer first)."""
    event = otel_rl.trace_session_event
    for _ in range(rounds):
        task = otel_rl.register_task()
        for _ in range(3):
            sid = otel_rl.register_session(task)
            event("mark_plan_start", session_id=sid)
            event("mark_generate_start", session_id=sid)
            event("mark_generate_end", session_id=sid)
            event("mark_plan_end", session_id=sid)
            event("mark_reward_start", session_id=sid)
            event("mark_reward_end", session_id=sid)
        event("mark_finalized", task_id=task)


def _capture(tmp_path, workload=_workload) -> tuple[object, dict, list, dict]:
    otel_rl.configure(fileroot=str(tmp_path / "capture"), tracer_provider=TracerProvider(shutdown_on_exit=False),
                      rank=0, role="actor")
    pipeline = STATE.pipeline
    captured: list[tuple] = []

    class CapturingQueue(collections.deque):
        def append(self, record):
            captured.append(record)
            super().append(record)

    pipeline.queue = CapturingQueue()
    workload(12)
    names = pipeline._names_of({rec[record.THREAD] for rec in captured})  # noqa: SLF001 - the names shipped
    settings = otel_rl.settings()
    resource = dict(pipeline.resource.attributes)
    otel_rl.shutdown()
    return settings, resource, captured, names


def _replay(settings, resource_attrs, records, names, root, path: str, monkeypatch) -> dict[str, bytes]:
    """The files of the run ``records`` make through ``path``: ``"span"`` (an SDK span per
    record into the chain's sink), ``"record"`` (:meth:`RecordSink.on_record` each) or
    ``"batch"`` (:meth:`RecordSink.on_records` given the bundled records as the pipe carries
    them: the compiled expansion and walk where built) or ``"pipe"`` (the exporter process's
    step: the batch's bytes decoded and taken through the outputs a few records at a time)."""
    settings = dataclasses.replace(settings, fileroot=str(root))
    # The same tids, sequence ids and track uuids both times.
    monkeypatch.setattr(chrome_trace, "_encoder_numbers", itertools.count(1))
    monkeypatch.setattr(perfetto_encoder, "_random_id", lambda bits: 12345)
    monkeypatch.setattr(perfetto_encoder, "_sequence_numbers", itertools.count(1))
    resource = Resource(resource_attrs)
    chain = ExportChain(settings, resource, {})
    builder = ReadableBuilder(resource, dict(names))
    random.seed(7)  # bundled phases draw their span ids
    if path == "batch":
        RecordSink(chain, builder).on_records(list(records))
    elif path == "pipe":
        monkeypatch.setattr(process, "EXPORT_SLICE", 5)  # bundles and parents split across slices
        try:
            process.export_batch(RecordSink(chain, builder).on_records, chain, builder.thread_names,
                                 wire.dumps(names, list(records)))
        finally:
            gc.unfreeze()  # as the exporter process leaves it after a batch
    elif path == "record":
        on_record = RecordSink(chain, builder).on_record
        for rec in expand(records):
            on_record(rec)
    else:
        sink = chain.sink()
        for rec in expand(records):
            sink.on_end(builder.build(rec))
    chain.after_batch()
    chain.shutdown(5.0)
    out = {}
    for dirpath, _, files in os.walk(settings.run_dir):
        for name in files:
            if name.startswith(("traces", "sessions")):
                with open(os.path.join(dirpath, name), "rb") as fh:
                    out[name] = fh.read()
    return out


@pytest.mark.parametrize("path", ["record", "batch", "pipe"])
@pytest.mark.parametrize("file_format", ["jsonl", "perfetto"])
def test_record_path_writes_the_span_paths_bytes(tmp_path, monkeypatch, file_format, path):
    settings, resource, records, names = _capture(tmp_path)
    settings = dataclasses.replace(settings, file_format=file_format)
    spans = _replay(settings, resource, records, names, tmp_path / "spans", "span", monkeypatch=monkeypatch)
    direct = _replay(settings, resource, records, names, tmp_path / "records", path, monkeypatch=monkeypatch)
    assert set(spans) == set(direct) and len(spans) == 2
    for name in spans:
        assert len(spans[name]) > 1000
        assert direct[name] == spans[name], name


compiled_sink = pytest.mark.skipif(record_sink._native is None, reason="built without a C compiler")


@compiled_sink
@pytest.mark.parametrize("path", ["batch", "pipe"])
def test_a_python_trace_encoder_writes_the_bytes_of_the_bundled_sessions_it_is_given(
        tmp_path, monkeypatch, path):
    # The compiled record sink keeps a plain session with its phases as one item; without the
    # compiled placement the encoder's Python step takes it, as the phases' pairs and its own.
    settings, resource, records, names = _capture(tmp_path)
    spans = _replay(settings, resource, records, names, tmp_path / "spans", "span", monkeypatch=monkeypatch)
    monkeypatch.setattr(chrome_place, "native", None)
    direct = _replay(settings, resource, records, names, tmp_path / "records", path, monkeypatch=monkeypatch)
    assert direct == spans


@compiled_sink
@pytest.mark.parametrize("path", ["batch", "pipe"])
def test_phases_not_outer_first_are_placed_as_the_python_trace_encoder_places_them(tmp_path, monkeypatch, path):
    settings, resource, records, names = _capture(tmp_path, _nested_phases)
    compiled = _replay(settings, resource, records, names, tmp_path / "compiled", path, monkeypatch=monkeypatch)
    monkeypatch.setattr(chrome_place, "native", None)
    python = _replay(settings, resource, records, names, tmp_path / "python", path, monkeypatch=monkeypatch)
    assert compiled == python and b'"name":"plan"' in compiled["traces-actor-r0.jsonl"]


@compiled_sink
def test_plain_sessions_reach_the_trace_file_as_one_item_each_with_their_phases(tmp_path, monkeypatch):
    settings, resource, records, names = _capture(tmp_path)
    kept = []
    keep = InPlaceBatchProcessor.on_records

    def spy(self, pairs, spans=None):
        kept.append((list(pairs), spans))
        return keep(self, pairs, spans)

    monkeypatch.setattr(InPlaceBatchProcessor, "on_records", spy)
    _replay(settings, resource, records, names, tmp_path / "records", "batch", monkeypatch=monkeypatch)
    items = [item for pairs, _ in kept for item in pairs]
    bundles = [item for item in items if len(item) == 3]
    assert len(bundles) >= 24 and all(len(phases) >= 2 for _, _, phases in bundles)
    assert sum(spans for _, spans in kept) == span_total(items)
    # every sampled record the walk keeps (those with events, links or another scope take the span path)
    sampled = sum(1 for rec in expand(records) if rec[record.FLAGS] & 1 and not rec[record.EVENTS]
                  and not rec[record.LINKS] and rec[record.SCOPE] is None)
    assert span_total(items) == sampled


def _bundled_records(seed: int) -> list[tuple]:
    """Plain records and sessions with bundles of every shape record.expand takes: plain,
    interrupted and versioned phases, baggage or none, and an empty bundle."""
    rng = random.Random(seed)
    out = []
    for i in range(300):
        fields = [None] * record.FIELDS
        fields[record.NAME] = f"span{i}"
        fields[record.TRACE_ID] = rng.getrandbits(128)
        fields[record.SPAN_ID] = rng.getrandbits(64) or 1
        fields[record.FLAGS] = rng.choice([0, 1])
        fields[record.START], fields[record.END] = 1_000 * i, 1_000 * i + 500
        fields[record.IDS] = rng.choice([None, {}, {"rl.task.id": i}])
        pick = rng.random()
        if pick < 0.7:
            phases = tuple(
                record.bundled_phase(rng.choice(["generate", "reward", "toolcall"]), 10 * k, 10 * k + 5,
                                     rng.randrange(3), rng.choice([None, {"n": k}]),
                                     rng.choice([None, None, None, "the session ended"]),
                                     rng.choice([None, None, None, 7]))
                for k in range(rng.randrange(1, 4)))
            fields[record.BUNDLE] = record.bundle(f"s{i}", phases)
        elif pick < 0.75:
            fields[record.BUNDLE] = (f"s{i}", ())
        out.append(tuple(fields))
    return out


@pytest.mark.skipif(record_sink._native is None, reason="built without a C compiler")
@pytest.mark.parametrize("seed", range(3))
def test_the_compiled_expansion_gives_record_expands_records_and_span_ids(seed):
    records = _bundled_records(seed)
    random.seed(seed)
    expected = expand(records)
    assert len(expected) > len(records) + 100  # phases became records of their own
    random.seed(seed)
    assert record_sink.expand(records) == expected
