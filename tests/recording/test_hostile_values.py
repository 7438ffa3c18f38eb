"""Values a program can hand otel_rl that no encoder likes: each is recorded
safely, on its own, and never costs the spans, sessions or metrics around it,
nor replaces the user's own exception."""

from __future__ import annotations

import asyncio
import gc
import os
import uuid
import weakref

import pytest
from support import read_json, read_jsonl, read_sessions, read_trace, slices

import otel_rl
from otel_rl._internal import guard
from otel_rl._internal.state import STATE

#: A file name decoded with ``surrogateescape`` (an undecodable byte 0xff).
LONE_SURROGATE = b"caf\xff.txt".decode("utf-8", "surrogateescape")
#: How that string is written: the surrogate as its escape, valid UTF-8.
LONE_SURROGATE_WRITTEN = "caf\\udcff.txt"
BIG_ID = uuid.UUID("f47ac10b-58cc-4372-a567-0e02b2c3d479").int


@pytest.fixture(autouse=True)
def _fresh_counters():
    guard.clear()
    yield
    guard.clear()


def _configure(tmp_path, export_process=False, **kwargs):
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="e", trial_name="t", rank=0,
                      export_process=export_process, **kwargs)
    return otel_rl.settings().run_dir


def _finish(run_dir):
    """Writes everything and returns (trace events, session records, summary, problems)."""
    otel_rl.save(force=True)
    problems = otel_rl.diagnostics()
    otel_rl.shutdown()
    # The readers decode strict UTF-8: a lone surrogate written as is would not decode.
    return (read_trace(os.path.join(run_dir, "traces-r0.jsonl")), read_sessions(run_dir),
            read_json(os.path.join(run_dir, "summary-r0.json")), problems)


def _session(task_id=None):
    task_id = otel_rl.register_task(task_id)
    otel_rl.set_task_id(task_id)
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    return session_id


# --- item 7: lone surrogates -------------------------------------------------------------------
def test_a_lone_surrogate_in_args_keeps_every_other_span_of_its_batch_in_the_trace_file(tmp_path):
    run_dir = _configure(tmp_path, export_process=True)
    for i in range(1000):
        with otel_rl.trace_scope("fine", args={"i": i}):
            pass
    with otel_rl.trace_scope("odd", args={"path": LONE_SURROGATE, LONE_SURROGATE: 1}):
        pass
    events, _, summary, _ = _finish(run_dir)
    assert len(slices(events, "fine")) == 1000
    (odd,) = slices(events, "odd")
    assert odd["args"]["path"] == LONE_SURROGATE_WRITTEN
    assert odd["args"][LONE_SURROGATE_WRITTEN] == 1
    assert summary["spans"]["dropped_total"] == 0 and summary["complete"]


def test_a_lone_surrogate_in_a_span_name_keeps_the_span(tmp_path):
    run_dir = _configure(tmp_path)
    with otel_rl.trace_scope(LONE_SURROGATE):
        pass
    events, _, summary, _ = _finish(run_dir)
    assert len(slices(events, LONE_SURROGATE_WRITTEN)) == 1
    assert summary["complete"]


def test_a_lone_surrogate_in_a_rejection_reason_keeps_the_session_span_and_record(tmp_path):
    run_dir = _configure(tmp_path, export_process=True)
    session_id = _session()
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="rejected",
                                reason=LONE_SURROGATE)
    events, records, summary, _ = _finish(run_dir)
    (record,) = records
    assert (record["status"], record["reason"]) == ("rejected", LONE_SURROGATE_WRITTEN)
    (session,) = slices(events, "session")
    assert session["args"]["rl.session.reason"] == LONE_SURROGATE_WRITTEN
    assert summary["complete"] and summary["export_errors"] == 0


# --- item 8: integers outside int64 ------------------------------------------------------------
def test_a_task_id_and_counter_outside_int64_keep_the_session_span_and_record(tmp_path):
    run_dir = _configure(tmp_path, export_process=True)
    session_id = _session(BIG_ID)
    otel_rl.increment_counter("tokens", 10**30, session_id=session_id)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    events, records, summary, _ = _finish(run_dir)
    (record,) = records
    # JSON integers have no range, but OpenTelemetry's are int64: such ids are
    # written as their decimal text everywhere, so they still match across files.
    assert record["task_id"] == str(BIG_ID)
    assert record["counters"] == {"tokens": str(10**30)}
    (session,) = slices(events, "session")
    (task,) = slices(events, "task")
    assert session["args"]["rl.task.id"] == task["args"]["rl.task.id"] == str(BIG_ID)
    assert summary["sessions"] == {"accepted": 1}
    assert summary["complete"] and summary["export_errors"] == 0


# --- item 12: contrived inputs -----------------------------------------------------------------
class Unprintable:
    def __str__(self):
        raise RuntimeError("no str")

    def __repr__(self):
        raise RuntimeError("no repr")

    def __bool__(self):
        raise RuntimeError("no bool")


def test_a_reason_whose_str_raises_still_finalizes_the_session(tmp_path):
    run_dir = _configure(tmp_path)
    session_id = _session()
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="failed",
                                reason=Unprintable())
    events, records, summary, problems = _finish(run_dir)
    (record,) = records
    assert record["status"] == "failed"
    assert "Unprintable" in record["reason"]
    assert len(slices(events, "session")) == 1
    assert "internal_error" not in problems
    assert summary["sessions"] == {"failed": 1}


@pytest.mark.expect_diagnostics("unknown_status")
def test_a_nan_status_keeps_the_session_and_the_metrics_interval(tmp_path):
    run_dir = _configure(tmp_path)
    session_id = _session()
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status=float("nan"))
    _, records, _, problems = _finish(run_dir)
    (record,) = records
    assert record["status"] == "nan"
    assert problems.get("unknown_status") == 1
    metrics = read_jsonl(os.path.join(run_dir, "metrics-r0.jsonl"))
    names = {m["name"] for line in metrics for rm in line["resource_metrics"]
             for sm in rm["scope_metrics"] for m in sm["metrics"]}
    assert "rl.session.duration" in names


def test_a_nan_metric_label_is_written_as_null_not_lost(tmp_path):
    from otel_rl._internal.export.metrics_file import JsonlMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    provider.get_meter("t").create_counter("c").add(1, {"status": float("nan"), "path": LONE_SURROGATE})
    path = tmp_path / "metrics.jsonl"
    exporter = JsonlMetricExporter(str(path))
    from opentelemetry.sdk.metrics.export import MetricExportResult

    assert exporter.export(reader.get_metrics_data()) is MetricExportResult.SUCCESS
    exporter.shutdown()
    provider.shutdown()
    (line,) = read_jsonl(str(path))
    point = line["resource_metrics"][0]["scope_metrics"][0]["metrics"][0]["data"]["data_points"][0]
    assert point["attributes"] == {"status": None, "path": LONE_SURROGATE_WRITTEN}


def _deep(levels):
    root = node = {}
    for _ in range(levels):
        node["k"] = {}
        node = node["k"]
    return root


def test_a_100000_deep_payload_keeps_its_span_and_its_session(tmp_path):
    run_dir = _configure(tmp_path, export_process=True)
    deep = _deep(100_000)
    with otel_rl.trace_scope("deep", args={"d": deep}):
        pass
    session_id = _session()
    otel_rl.trace_session_event("mark_generate_start", session_id=session_id, payload=deep)
    otel_rl.trace_session_event("mark_generate_end", session_id=session_id)
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    events, records, summary, _ = _finish(run_dir)
    assert len(slices(events, "deep")) == 1
    assert len(slices(events, "generate")) == 1
    assert [r["status"] for r in records] == ["accepted"]
    assert summary["complete"] and summary["export_errors"] == 0


def test_an_object_whose_repr_raises_is_recorded_by_its_type(tmp_path):
    run_dir = _configure(tmp_path)
    with otel_rl.trace_scope("odd", args={"obj": Unprintable()}):
        pass
    events, _, summary, _ = _finish(run_dir)
    (odd,) = slices(events, "odd")
    assert "Unprintable" in odd["args"]["obj"]
    assert summary["complete"]


# --- item 13: the user's exception comes out unchanged -----------------------------------------
class UnprintableError(Exception):
    def __str__(self):
        return self.missing  # AttributeError, as a half-initialised exception gives


def _raises_original(run):
    original = UnprintableError()
    with pytest.raises(UnprintableError) as info:
        run(original)
    assert info.value is original


def _error_span(traced, name):
    (span,) = [s for s in traced.spans() if s["name"] == name]
    assert span["status"] == "ERROR"
    assert span["events"][0]["attributes"]["exception.type"] == "UnprintableError"
    return span


def test_trace_scope_reraises_an_exception_whose_str_raises(traced):
    def run(exc):
        with otel_rl.trace_scope("scope"):
            raise exc

    _raises_original(run)
    _error_span(traced, "scope")


def test_step_scope_reraises_an_exception_whose_str_raises(traced):
    def run(exc):
        with otel_rl.step_scope(1):
            raise exc

    _raises_original(run)
    _error_span(traced, "step")


def test_trace_perf_reraises_an_exception_whose_str_raises(traced):
    @otel_rl.trace_perf("fn")
    def fn(exc):
        raise exc

    _raises_original(fn)
    _error_span(traced, "fn")


def test_trace_perf_on_async_and_generator_functions_reraises_an_exception_whose_str_raises(traced):
    @otel_rl.trace_perf("afn")
    async def afn(exc):
        raise exc

    @otel_rl.trace_perf("gen")
    def gen(exc):
        yield 1
        raise exc

    _raises_original(lambda exc: asyncio.run(afn(exc)))
    _raises_original(lambda exc: list(gen(exc)))
    spans = traced.spans()
    assert {s["name"]: s["status"] for s in spans} == {"afn": "ERROR", "gen": "ERROR"}


def test_a_session_phase_reraises_an_exception_whose_str_raises_and_ends(traced):
    _session()

    def run(exc):
        with otel_rl.trace_session_phase("generate"):
            raise exc

    _raises_original(run)
    _error_span(traced, "generate")
    assert "internal_error" not in otel_rl.diagnostics()


# --- item 14: untrusted baggage ----------------------------------------------------------------
@pytest.mark.parametrize("value", ["%C2%B2", "%D9%A3", "%C2%B9%C2%B2"])
def test_ids_from_baggage_that_int_rejects_are_kept_as_text(traced, value):
    from urllib.parse import unquote

    carrier = {"baggage": f"rl.session.id={value},rl.task.id={value}"}
    with otel_rl.attach(carrier):
        assert otel_rl.get_session_id() == unquote(value)
        assert otel_rl.get_task_id() == unquote(value)
        with otel_rl.trace_scope("server"):
            pass
    (span,) = traced.spans()
    assert span["attributes"]["rl.session.id"] == unquote(value)
    assert "internal_error" not in otel_rl.diagnostics()


def test_a_digit_id_from_baggage_is_an_integer_again(traced):
    with otel_rl.attach({"baggage": "rl.session.id=42"}):
        assert otel_rl.get_session_id() == 42


# --- item 15: payloads are snapshots taken at the call -----------------------------------------
def test_a_reused_args_dict_records_each_spans_own_values(traced):
    args = {}
    for i in range(3):
        args["i"] = i
        args["items"] = [i]
        with otel_rl.trace_scope("scope", args=args):
            pass
        otel_rl.instant("point", args=args)
    with otel_rl.trace_scope("outer"):
        for i in range(2):
            args["i"] = i
            args["items"].append(i)
            otel_rl.instant("inner", args=args)
    args.clear()
    spans = traced.spans()
    assert [s["attributes"]["rl.args.i"] for s in spans if s["name"] == "scope"] == [0, 1, 2]
    (outer,) = [s for s in spans if s["name"] == "outer"]
    assert [e["attributes"]["items"] for e in outer["events"]] == [(2, 0), (2, 0, 1)]
    assert [s["attributes"]["rl.args.items"] for s in spans if s["name"] == "scope"] == [(0,), (1,), (2,)]
    assert [s["attributes"]["rl.args.i"] for s in spans if s["name"] == "point"] == [0, 1, 2]


def test_a_reused_phase_payload_records_each_phases_own_values(traced):
    session_id = _session()
    payload = {}
    for i in range(2):
        payload["turn"] = i
        payload["ids"] = [i]
        with otel_rl.trace_session_phase("generate", start_payload=payload, end_payload=payload):
            pass
        otel_rl.trace_session_event("mark_reward_start", session_id=session_id, ids=payload["ids"])
        otel_rl.trace_session_event("mark_reward_end", session_id=session_id)
    payload["ids"].append(99)
    payload.clear()
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")
    spans = sorted(traced.spans(), key=lambda s: s["start_ns"])
    assert [s["attributes"]["rl.args.turn"] for s in spans if s["name"] == "generate"] == [0, 1]
    assert [s["attributes"]["rl.args.ids"] for s in spans if s["name"] == "reward"] == [(0,), (1,)]


def test_a_tensor_in_args_is_not_kept_alive_by_a_span_waiting_for_export(tmp_path):
    torch = pytest.importorskip("torch")
    run_dir = _configure(tmp_path, export_interval_ms=600_000)
    tensor = torch.zeros(2, 3)
    alive = weakref.ref(tensor)
    with otel_rl.trace_scope("scope", args={"t": tensor}):
        pass
    assert STATE.pipeline.queue, "the span should still wait for the export thread"
    del tensor
    gc.collect()
    assert alive() is None
    events, _, _, _ = _finish(run_dir)
    (scope,) = slices(events, "scope")
    assert scope["args"]["t.shape"] == [2, 3]

