"""The compiled session step (``_session_processor.c``) derives what the Python step derives.

Two session processors take the same phase and session records, one with the compiled step
and one without: the attributes each returns, the session records file, the statuses and the
metrics' points must be equal, over the common shapes (interrupted and failed phases, pending
sessions, counters, optional fields, stale reasons, phases of other names) and the ones the
compiled step leaves to Python (policy versions, gauges, text that is not UTF-8, integers
past int64, eviction at the pending-sessions bound).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re

import pytest
from opentelemetry.sdk.metrics import Counter, Histogram
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource

from otel_rl._internal import diagnostics, guard, keys
from otel_rl._internal.export import session_processor
from otel_rl._internal.export.jsonl import JsonlAppender
from otel_rl._internal.export.session_metrics import AggregatedSessionMetrics
from otel_rl._internal.export.session_processor import SessionSpanProcessor
from otel_rl._internal.recording import record

compiled = pytest.mark.skipif(session_processor._native is None, reason="built without a C compiler")
_T0 = 1_732_563_442_123_456_789


def _rec(name, span_id, start, end, status=0):
    fields = [None] * record.FIELDS
    fields[record.NAME:record.END + 1] = [name, (span_id << 64) | 7, span_id, 0, False, span_id % 2, None, start, end]
    fields[record.KIND], fields[record.STATUS] = 0, status
    return tuple(fields)


def _workload(seed: int, sessions: int) -> list[tuple]:
    """(record, attributes) of phases, then their session, as the exporter gets them."""
    rng = random.Random(seed)
    out = []
    span_id = 1
    for n in range(sessions):
        sid = rng.choice([n, f"s-{n}", f"é-{n}", n + 0.5, f"c\x01-{n}"])
        start = _T0 + n * 1_000_000
        base = {keys.SESSION_ID: sid, keys.TASK_ID: n // 4, keys.STEP: rng.choice([None, n % 3])}
        for k in range(rng.randrange(0, 4)):
            span_id += 1
            lo = start + rng.randrange(0, 500_000)
            attrs = {**base, keys.SPAN_KIND: keys.KIND_PHASE,
                     keys.PHASE: rng.choice(["generate", "reward", "toolcall", "judge", "ünï", 'q"uote'])}
            if rng.random() < 0.03:  # its "total_s" field would take the session's own key
                attrs[keys.PHASE] = "total"
            if rng.random() < 0.2:
                attrs[keys.PHASE_INTERRUPTED] = True
            odd = rng.random()
            if odd < 0.03:
                attrs[keys.POLICY_VERSION] = rng.randrange(3)
            elif odd < 0.05:
                attrs[keys.GAUGE_VALUE] = 1.5
            elif odd < 0.07:
                attrs[keys.PHASE] = "bad \udc80 phase"
            elif odd < 0.09:
                del attrs[keys.PHASE]  # named by the span
            out.append((_rec(rng.choice(["generate", "tool"]), span_id, lo, lo + rng.randrange(1, 300_000),
                             status=rng.choice([0, 0, 2])), attrs))
        span_id += 1
        attrs = {**base, keys.SPAN_KIND: keys.KIND_SESSION}
        status = rng.choice([None, "accepted", "rejected", "dropped"])
        if status is not None:
            attrs[keys.SESSION_STATUS] = status
        if rng.random() < 0.5:
            attrs[keys.SESSION_REASON] = rng.choice(["stale policy", "too long", "Stale"])
        if rng.random() < 0.5:
            attrs[keys.SESSION_COUNTER_PREFIX + rng.choice(["tokens", "tool_calls"])] = rng.choice(
                [rng.randrange(100), 2.5e-7, 1e22, float("inf"), True, None, "ten\n", [1, 2], (1 << 63) - 1])
        for key in (keys.SESSION_CONSUMED_STEP, keys.SESSION_STALENESS, keys.SESSION_REWARD, keys.SESSION_SUBMIT_STEP):
            if rng.random() < 0.3:
                attrs[key] = rng.choice([1, 0.5, 2])
        odd = rng.random()
        if odd < 0.03:
            attrs[keys.POLICY_VERSION] = 1
        elif odd < 0.05:
            attrs[keys.TASK_ID] = 1 << 70
        out.append((_rec("session", span_id, start, start + 900_000), attrs))
    return out


def _run(tmp_path, name: str, items: list[tuple], native, max_pending: int, monkeypatch,
         environ: dict | None = None) -> dict:
    monkeypatch.setattr(session_processor, "_native", native)
    path = os.path.join(tmp_path, f"{name}.jsonl")
    reader = InMemoryMetricReader()
    metrics = AggregatedSessionMetrics(Resource({"service.name": "t"}), environ or {})
    metrics.attach(reader)
    processor = SessionSpanProcessor(None, rank=2, role="actor", records=JsonlAppender(path), metrics=metrics,
                                     max_pending_sessions=max_pending)
    returned = [list(processor.on_record(rec, attrs).items()) for rec, attrs in items]
    return _figures(processor, reader, path, returned)


def _figures(processor, reader, path: str, returned: list) -> dict:
    """What a run derived: the attributes returned, the records file, the statuses, the points."""
    processor.shutdown()
    points = []
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    plain = dataclasses.asdict(point)
                    plain.pop("start_time_unix_nano"), plain.pop("time_unix_nano")
                    plain["exemplars"] = sorted((e.value, e.span_id) for e in point.exemplars)
                    points.append((metric.name, repr(sorted(plain.items()))))
    with open(path, "rb") as fh:
        return {"returned": returned, "records": fh.read(), "statuses": dict(processor.statuses),
                "points": sorted(points)}


@compiled
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_pending", [100_000, 3])
def test_the_compiled_step_derives_what_the_python_step_derives(tmp_path, monkeypatch, seed, max_pending):
    items = _workload(seed, 300)
    native = session_processor._native
    compiled_run = _run(tmp_path, "compiled", items, native, max_pending, monkeypatch)
    python_run = _run(tmp_path, "python", items, None, max_pending, monkeypatch)
    assert compiled_run == python_run
    assert compiled_run["records"].count(b"\n") > 250


@compiled
def test_each_metrics_object_keeps_its_own_exemplar_filter_in_the_compiled_step(tmp_path, monkeypatch):
    # The compiled step reads a metrics object's lock, filter and points once; runs with
    # other filters, one after the other, must each record what the Python step records.
    items = _workload(4, 120)
    native = session_processor._native
    for n, mode in enumerate(["always_on", "always_off", "trace_based", "always_on"]):
        environ = {"OTEL_METRICS_EXEMPLAR_FILTER": mode}
        compiled_run = _run(tmp_path, f"c{n}", items, native, 100_000, monkeypatch, environ)
        python_run = _run(tmp_path, f"p{n}", items, None, 100_000, monkeypatch, environ)
        assert compiled_run["points"] == python_run["points"]
        exemplars = sum(point.count("exemplars', []") for _, point in compiled_run["points"])
        assert (exemplars == len(compiled_run["points"])) == (mode == "always_off")


def _plain_workload(sessions: int) -> list[tuple]:
    """Sessions the compiled step takes whole: two phases each, then the session, accepted."""
    rng = random.Random(sessions)
    out = []
    for n in range(sessions):
        start = _T0 + n * 1_000_000
        base = {keys.SESSION_ID: n, keys.TASK_ID: n // 4}
        for k, phase in enumerate(("generate", "reward")):
            lo = start + k * 400_000 + rng.randrange(0, 100_000)
            out.append((_rec(phase, 3 * n + k + 1, lo, lo + rng.randrange(1, 300_000_000)),
                        {**base, keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: phase}))
        out.append((_rec("session", 3 * n + 3, start, start + rng.randrange(900_000, 9_000_000_000)),
                    {**base, keys.SPAN_KIND: keys.KIND_SESSION, keys.SESSION_STATUS: "accepted"}))
    return out


@compiled
def test_more_values_than_the_compiled_step_holds_reach_the_points_in_order(tmp_path, monkeypatch):
    # The compiled step keeps a thousand values before it adds them to the points, in order:
    # each key's sum is the same float as the Python step's.
    items = _plain_workload(1_500)
    native = session_processor._native
    compiled_run = _run(tmp_path, "compiled", items, native, 100_000, monkeypatch)
    python_run = _run(tmp_path, "python", items, None, 100_000, monkeypatch)
    assert compiled_run["points"] == python_run["points"]
    counts = [int(n) for _, point in compiled_run["points"] for n in re.findall(r"\('count', (\d+)\)", point)]
    assert sum(counts) == 3 * 1_500


def _collections(items, native, monkeypatch, temporality) -> list:
    """The points of two collections, one after each half of ``items``, without timestamps."""
    monkeypatch.setattr(session_processor, "_native", native)
    reader = InMemoryMetricReader(preferred_temporality={Histogram: temporality, Counter: temporality})
    metrics = AggregatedSessionMetrics(Resource({"service.name": "t"}), {})
    metrics.attach(reader)
    processor = SessionSpanProcessor(None, rank=0, role="actor", records=None, metrics=metrics,
                                     max_pending_sessions=100_000)
    collections = []
    for half in (items[:len(items) // 2], items[len(items) // 2:]):
        for rec, attrs in half:
            processor.on_record(rec, attrs)
        points = []
        for rm in reader.get_metrics_data().resource_metrics:
            for metric in rm.scope_metrics[0].metrics:
                for point in metric.data.data_points:
                    plain = dataclasses.asdict(point)
                    plain.pop("start_time_unix_nano"), plain.pop("time_unix_nano")
                    plain["exemplars"] = sorted((e.value, e.span_id) for e in point.exemplars)
                    points.append((metric.name, repr(sorted(plain.items()))))
        collections.append(sorted(points))
    processor.shutdown()
    return collections


@compiled
@pytest.mark.parametrize("temporality", [AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA])
def test_a_collection_sees_every_value_the_compiled_step_recorded_before_it(monkeypatch, temporality):
    items = _workload(8, 200)
    compiled_runs = _collections(items, session_processor._native, monkeypatch, temporality)
    python_runs = _collections(items, None, monkeypatch, temporality)
    assert compiled_runs == python_runs
    assert all(compiled_runs)


@compiled
def test_the_compiled_step_takes_the_common_sessions(monkeypatch):
    taken = []
    derive = session_processor._native.derive

    def counting(*args):
        got = derive(*args)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(session_processor, "_native", type("N", (), {"derive": staticmethod(counting)}))
    processor = SessionSpanProcessor(None, rank=0, role="actor", records=None, metrics=None,
                                     max_pending_sessions=1000)
    for rec, attrs in _workload(1, 200):
        processor.on_record(rec, attrs)
    assert sum(taken) > 0.8 * len(taken)


@compiled
def test_a_sessions_attributes_the_caller_still_holds_are_left_as_they_were():
    # The compiled step adds a session's derived attributes to the dict itself only where its
    # caller's reference is the only one (the compiled record sink's); here the test holds it too.
    processor = SessionSpanProcessor(None, rank=0, role="actor", records=None, metrics=None,
                                     max_pending_sessions=1000)
    rec, attrs = _workload(0, 1)[-1]
    held = dict(attrs)
    got = session_processor._native.derive(processor, rec, held, keys.KIND_SESSION)
    assert held == attrs
    assert got is not held and got[keys.SESSION_TOTAL_S] == 0.0009


def _sessions(items: list[tuple]) -> int:
    return sum(1 for _, attrs in items if attrs[keys.SPAN_KIND] == keys.KIND_SESSION)


@compiled
def test_the_compiled_step_appends_session_records_itself_as_the_appender_would(tmp_path, monkeypatch):
    items = _workload(2, 200)
    handed_on = []
    original = SessionSpanProcessor._write_record
    monkeypatch.setattr(SessionSpanProcessor, "_write_record",
                        lambda self, rec: (handed_on.append(rec), original(self, rec))[1])
    files = {}
    for name, native in (("compiled", session_processor._native), ("python", None)):
        monkeypatch.setattr(session_processor, "_native", native)
        path = tmp_path / f"{name}.jsonl"
        processor = SessionSpanProcessor(None, rank=0, role="actor", records=JsonlAppender(str(path), 7),
                                         metrics=None, max_pending_sessions=1000)
        for rec, attrs in items:
            processor.on_record(rec, attrs)
        if name == "compiled":
            compiled_handed_on = len(handed_on)
        processor.shutdown()
        files[name] = path.read_bytes()
    assert files["compiled"] == files["python"]
    assert files["compiled"].count(b"\n") == _sessions(items)
    assert compiled_handed_on < 0.2 * _sessions(items)  # only what the compiled step leaves to Python


def _plain_session(n: int) -> tuple[tuple, dict]:
    return (_rec("session", n + 1, _T0 + n, _T0 + n + 10),
            {keys.SESSION_ID: n, keys.SPAN_KIND: keys.KIND_SESSION, keys.SESSION_STATUS: "accepted"})


@compiled
def test_the_compiled_steps_records_are_written_at_the_appenders_flush_threshold(tmp_path):
    path = tmp_path / "records.jsonl"
    processor = SessionSpanProcessor(None, rank=0, role="actor", records=JsonlAppender(str(path), 5), metrics=None,
                                     max_pending_sessions=1000)
    for n in range(12):
        processor.on_record(*_plain_session(n))
    assert path.read_bytes().count(b"\n") == 10
    processor.shutdown()
    ids = [json.loads(line)["session_id"] for line in path.read_bytes().splitlines()]
    assert ids == list(range(12))


@compiled
def test_two_processors_taking_turns_each_write_their_own_records_in_order(tmp_path):
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    processors = [SessionSpanProcessor(None, rank=0, role="actor", records=JsonlAppender(str(path), 4),
                                       metrics=None, max_pending_sessions=1000) for path in paths]
    for n in range(20):
        processors[n % 3 % 2].on_record(*_plain_session(n))
    for processor in processors:
        processor.shutdown()
    ids = [[json.loads(line)["session_id"] for line in path.read_bytes().splitlines()] for path in paths]
    assert ids == [[n for n in range(20) if n % 3 % 2 == k] for k in (0, 1)]


@compiled
def test_a_session_record_the_compiled_step_cannot_write_is_counted_and_the_span_goes_on(tmp_path):
    guard.clear()
    records = JsonlAppender(str(tmp_path / "records.jsonl"))  # flushes every line
    records.flush = lambda: 1 / 0
    processor = SessionSpanProcessor(None, rank=0, role="actor", records=records, metrics=None,
                                     max_pending_sessions=1000)
    items = [(_rec("session", n + 1, _T0 + n, _T0 + n + 10), {keys.SESSION_ID: n, keys.SPAN_KIND: keys.KIND_SESSION})
             for n in range(5)]
    returned = [processor.on_record(rec, attrs) for rec, attrs in items]
    assert [attrs[keys.SESSION_ID] for attrs in returned] == list(range(5))
    assert guard.diagnostics()[diagnostics.SESSION_RECORDS_LINES_LOST] == 5


def _grouped(items: list[tuple]) -> list[tuple[tuple, tuple]]:
    """Each session's (record, attributes) with its phases' pairs, in the workload's order."""
    groups, phases = [], []
    for rec, attrs in items:
        if attrs[keys.SPAN_KIND] == keys.KIND_SESSION:
            groups.append(((rec, attrs), tuple(phases)))
            phases = []
        else:
            phases.append((rec, attrs))
    return groups


def _run_bundled(tmp_path, items: list[tuple], max_pending: int, monkeypatch) -> tuple[dict, int]:
    """``_run``'s figures with each session derived with its phases in one step where the
    compiled step takes it (the record sink's way: phases with a gauge are not offered),
    one by one otherwise; and how many sessions it took."""
    taken = 0
    bundle = session_processor._native.derive_bundle

    def derive_groups(processor):
        nonlocal taken
        returned = []
        for (rec, attrs), phases in _grouped(items):
            got = None
            if not any(keys.GAUGE_VALUE in a for _, a in phases):
                got = bundle(processor, rec, dict(attrs), phases)
            if got is None:
                returned += [list(processor.on_record(r, a).items()) for r, a in (*phases, (rec, attrs))]
            else:
                taken += 1
                returned += [list(a.items()) for _, a in phases] + [list(got.items())]
        return returned

    path = os.path.join(tmp_path, "bundled.jsonl")
    reader = InMemoryMetricReader()
    metrics = AggregatedSessionMetrics(Resource({"service.name": "t"}), {})
    metrics.attach(reader)
    processor = SessionSpanProcessor(None, rank=2, role="actor", records=JsonlAppender(path), metrics=metrics,
                                     max_pending_sessions=max_pending)
    returned = derive_groups(processor)
    return _figures(processor, reader, path, returned), taken


@compiled
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_pending", [100_000, 3])
def test_a_session_derived_with_its_phases_in_one_step_derives_what_the_python_step_derives(
        tmp_path, monkeypatch, seed, max_pending):
    items = _workload(seed, 300)
    bundled, taken = _run_bundled(tmp_path, items, max_pending, monkeypatch)
    python_run = _run(tmp_path, "python", items, None, max_pending, monkeypatch)
    assert bundled == python_run
    assert taken > 100  # most sessions are plain: the one step took them


@compiled
def test_the_one_step_leaves_a_session_with_phases_kept_from_earlier_spans_unchanged():
    # A phase that came as a span of its own is kept under its session; the session's bundled
    # phases must then join it, which the step-by-step way does: the one step declines.
    processor = SessionSpanProcessor(None, rank=0, role="actor", records=None, metrics=None,
                                     max_pending_sessions=1000)
    (rec, attrs), phases = next(g for g in _grouped(_workload(2, 40)) if len(g[1]) >= 2
                                and all(keys.PHASE in a and len(a) == 5 for _, a in g[1]))
    processor.on_record(*phases[0])
    kept = {k: {name: list(v) for name, v in inner.items()} for k, inner in processor._phases.items()}  # noqa: SLF001
    assert session_processor._native.derive_bundle(processor, rec, dict(attrs), phases[1:]) is None
    assert {k: {n: list(v) for n, v in inner.items()} for k, inner in processor._phases.items()} == kept  # noqa: SLF001
    assert dict(processor.statuses) == {}
