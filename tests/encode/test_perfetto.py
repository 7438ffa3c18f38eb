"""PerfettoEncoder: Chrome trace events become a native trace Perfetto reads as an RL run.

Every trace is read back with Perfetto's own generated protos and replayed the
way its trace processor does (``support.perfetto.load``), which fails on a
track used before it is described, an interned id used before it is defined,
a slice end with no slice open, or counter samples out of time order.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanKind

from otel_rl._internal import keys
from otel_rl._internal.encode.chrome_trace import ChromeTraceEncoder
from otel_rl._internal.encode.perfetto import PerfettoEncoder
from support import T0_NS, SpanFactory
from support.perfetto import CLEARED, Trace, load, parse

TRAINER = Resource({keys.PROCESS_PID: 100, keys.RANK: 0, keys.ROLE: "trainer"})
ROLLOUT = Resource({keys.PROCESS_PID: 200, keys.RANK: 1, keys.ROLE: "rollout"})
US = 1000


def chrome(spans: list, *, exact: bool = True) -> list[dict[str, Any]]:
    """The Chrome events of ``spans``, given to the encoder as they end."""
    encoder = ChromeTraceEncoder(exact=exact)
    return encoder.encode(sorted(spans, key=lambda s: s.end_time)) + encoder.finish()


def encode(events: list[dict[str, Any]], **options: Any) -> bytes:
    encoder = PerfettoEncoder(**{"sequence_id": 1, "uuid_salt": 0, **options})
    return encoder.encode(events) + encoder.finish()


def native(events: list[dict[str, Any]], **options: Any) -> Trace:
    return load(encode(events, **options))


def session_spans(f: SpanFactory, task: int = 7, session: int = 3, start: float = 0) -> list:
    task_span = f.span("task", start, start + 100, attrs={keys.SPAN_KIND: keys.KIND_TASK, keys.TASK_ID: task})
    ids = {keys.TASK_ID: task, keys.SESSION_ID: session}
    sess = f.span("session", start + 10, start + 90, task_span, attrs={**ids, keys.SPAN_KIND: keys.KIND_SESSION})
    generate = f.span("generate", start + 20, start + 50, sess, attrs={**ids, keys.SPAN_KIND: keys.KIND_PHASE})
    reward = f.span("reward", start + 50, start + 60, sess, attrs={**ids, keys.SPAN_KIND: keys.KIND_PHASE})
    return [task_span, sess, generate, reward]


def raw(name: str, ts: float, dur: float, tid: int = 1, pid: int = 10, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": "c", "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def track_of(trace: Trace, name: str) -> str:
    (found,) = trace.by_name(name)
    return trace.track_name(found.track)


# --- the sequence ----------------------------------------------------------------------------
def test_the_first_packet_clears_the_state_and_states_the_wall_clock_as_the_trace_clock():
    packets = parse(encode(chrome(session_spans(SpanFactory(ROLLOUT)))))
    first = packets[0]
    assert first.sequence_flags & CLEARED
    assert first.clock_snapshot.primary_trace_clock == 1  # BUILTIN_CLOCK_REALTIME
    assert {p.trusted_packet_sequence_id for p in packets} == {1}


def test_slices_keep_their_wall_clock_start_and_duration_in_nanoseconds():
    trace = native(chrome(session_spans(SpanFactory(ROLLOUT))))
    (generate,) = trace.by_name("generate")
    assert (generate.ts, generate.dur) == (T0_NS + 20 * US, 30 * US)


# --- tracks ----------------------------------------------------------------------------------
def test_a_session_is_one_track_named_by_task_and_session_with_its_phases_nested_on_it():
    trace = native(chrome(session_spans(SpanFactory(ROLLOUT))))
    on_track = sorted((s.depth, s.name) for s in trace.slices if trace.track_name(s.track) == "task 7 · session 3")
    assert on_track == [(0, "session"), (1, "generate"), (1, "reward")]


def test_session_tracks_are_grouped_under_their_process_named_as_in_the_chrome_trace():
    trace = native(chrome(session_spans(SpanFactory(ROLLOUT))))
    (session,) = trace.by_name("session")
    assert trace.process_of(session.track) == "[rollout] Rank 1, Process"


def test_a_task_and_the_steps_have_tracks_of_their_own():
    f = SpanFactory(TRAINER)
    step = f.span("step", 0, 100, attrs={keys.SPAN_KIND: keys.KIND_STEP, keys.STEP: 0})
    work = f.span("train", 10, 90, step)
    trace = native(chrome(session_spans(f) + [step, work]))
    assert (track_of(trace, "task"), track_of(trace, "step"), track_of(trace, "train")) == \
        ("task 7", "steps", "MainThread")


def test_concurrent_sessions_of_one_thread_each_get_a_row_instead_of_numbered_lanes():
    f = SpanFactory(ROLLOUT)
    spans = session_spans(f, session=1) + session_spans(f, session=2, start=5)
    trace = native(chrome(spans))
    sessions = {trace.track_name(s.track) for s in trace.by_name("session")}
    assert sessions == {"task 7 · session 1", "task 7 · session 2"}


def test_a_process_without_a_usable_pid_becomes_a_named_group():
    events = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
              raw("kernel", 1.0, 2.0, pid=0, tid="stream 7")]
    trace = native(events)
    (kernel,) = trace.by_name("kernel")
    assert (trace.track_name(kernel.track), trace.track_name(trace.tracks[kernel.track].parent_uuid)) == \
        ("stream 7", "GPU 0")


# --- nesting and ordering ----------------------------------------------------------------------
def test_a_parent_arriving_after_a_child_with_the_same_start_still_encloses_it():
    # As an exporter writes them: the child ends first.
    trace = native([raw("child", 10.0, 5.0), raw("parent", 10.0, 20.0)])
    assert sorted((s.depth, s.name) for s in trace.slices) == [(0, "parent"), (1, "child")]


def test_slices_that_do_not_nest_go_to_an_overflow_track():
    trace = native([raw("a", 0.0, 10.0), raw("b", 5.0, 10.0)])
    assert {trace.track_name(s.track) for s in trace.slices} == {"thread 1", "thread 1 (2)"}


def test_overlaps_below_the_json_timestamp_resolution_stay_on_one_track():
    # An epoch timestamp in microseconds is a quarter of a microsecond coarse as a double:
    # two spans that touched overlap by a fraction of it once read back.
    ts = 1.8e15
    trace = native([raw("first", ts, 10.0), raw("second", ts + 9.9999, 10.0)])
    assert len({s.track for s in trace.slices}) == 1


def test_the_exporters_exact_nanoseconds_are_kept():
    f = SpanFactory(ROLLOUT)
    span = f.span("odd", 0.001, 7.003)  # 1 ns and 7003 ns after T0, finer than a double's microseconds
    (odd,) = native(chrome([span])).by_name("odd")
    assert (odd.ts, odd.dur) == (T0_NS + 1, 7002)


# --- flows ----------------------------------------------------------------------------------------
def test_a_task_fans_out_an_arrow_to_each_of_its_sessions():
    f = SpanFactory(ROLLOUT)
    task = f.span("task", 0, 100, attrs={keys.SPAN_KIND: keys.KIND_TASK, keys.TASK_ID: 1})
    sessions = [f.span("session", 10 * i, 10 * i + 5, task,
                       attrs={keys.SPAN_KIND: keys.KIND_SESSION, keys.TASK_ID: 1, keys.SESSION_ID: i})
                for i in range(3)]
    trace = native(chrome([task, *sessions]))
    assert sorted((a.name, b.args[keys.SESSION_ID]) for a, b in trace.flows) == \
        [("task", 0), ("task", 1), ("task", 2)]


def test_a_parent_and_child_nested_on_one_track_need_no_arrow():
    trace = native(chrome(session_spans(SpanFactory(ROLLOUT))))
    assert [(a.name, b.name) for a, b in trace.flows] == [("task", "session")]


def test_a_child_in_another_process_gets_an_arrow_from_its_parent():
    trainer, rollout = SpanFactory(TRAINER), SpanFactory(ROLLOUT, first_id=1000)
    send = trainer.span("send", 0, 10, kind=SpanKind.CLIENT)
    recv = rollout.span("recv", 2, 8, send.context, kind=SpanKind.SERVER)
    # Each process encodes its own spans, as each rank's file exporter does.
    trace = native(chrome([send]) + chrome([recv]))
    assert [(a.name, b.name) for a, b in trace.flows] == [("send", "recv")]


def test_every_arrow_has_both_ends():
    f = SpanFactory(ROLLOUT)
    trace = native(chrome(session_spans(f) + session_spans(f, task=8, session=4, start=200)))
    assert (trace.open_flows, trace.dangling_flow_ends) == (set(), set())


def test_another_writers_flow_events_bind_to_the_slices_starting_there():
    # A torch trace's launch -> kernel arrow ("ac2g"), bound to the slices it starts and ends on.
    events = [raw("cudaLaunchKernel", 10.0, 2.0, tid=1), raw("kernel", 15.0, 5.0, tid=2),
              {"ph": "s", "id": 9, "cat": "ac2g", "name": "ac2g", "ts": 10.0, "pid": 10, "tid": 1},
              {"ph": "f", "bp": "e", "id": 9, "cat": "ac2g", "name": "ac2g", "ts": 15.0, "pid": 10, "tid": 2}]
    trace = native(events)
    assert [(a.name, b.name) for a, b in trace.flows] == [("cudaLaunchKernel", "kernel")]


# --- counters -------------------------------------------------------------------------------------
def test_counter_samples_go_on_a_counter_track_per_name_in_time_order():
    samples = [{"ph": "C", "name": "rl.sessions.in_flight", "pid": 10, "tid": 0, "ts": float(ts),
                "args": {"value": value}} for ts, value in [(3, 2), (1, 5), (2, 4)]]
    trace = native(samples)
    assert trace.counters == {"rl.sessions.in_flight": [(1000, 5), (2000, 4), (3000, 2)]}


def test_a_counter_with_several_values_gets_a_track_for_each():
    sample = {"ph": "C", "name": "gpu", "pid": 10, "tid": 0, "ts": 1.0, "args": {"used": 3, "free": 1.5}}
    assert native([sample]).counters == {"gpu used": [(1000, 3)], "gpu free": [(1000, 1.5)]}


def test_a_gauge_on_a_span_becomes_a_counter_sample():
    f = SpanFactory(TRAINER)
    span = f.span("buffered", 5, 5, attrs={keys.SPAN_KIND: keys.KIND_COUNTER, keys.GAUGE_VALUE: 4})
    assert native(chrome([span])).counters == {"buffered": [(T0_NS + 5 * US, 4)]}


# --- annotations and interning -------------------------------------------------------------------------
def test_span_attributes_are_debug_annotations_of_their_own_types():
    args = {"s": "text", "i": -3, "f": 0.5, "b": True, "l": [1, "x"], "d": {"k": 2}, "n": None}
    (only,) = native([raw("a", 1.0, 1.0, **args)]).slices
    assert only.args == {"s": "text", "i": -3, "f": 0.5, "b": True, "l": [1, "x"], "d": {"k": 2}}


def test_rank_and_role_are_stated_by_the_process_not_by_every_slice():
    trace = native(chrome(session_spans(SpanFactory(ROLLOUT))))
    assert {k for s in trace.slices for k in s.args} & {"rank", "role"} == set()


def test_each_name_category_and_annotation_name_is_interned_once():
    f = SpanFactory(ROLLOUT)
    spans = [span for i in range(5) for span in session_spans(f, session=i, start=200 * i)]
    packets = parse(encode(chrome(spans)))
    names = [entry.name for p in packets for entry in p.interned_data.event_names]
    keys_ = [entry.name for p in packets for entry in p.interned_data.debug_annotation_names]
    assert (names.count("session"), keys_.count(keys.SESSION_ID)) == (1, 1)


def test_the_interning_state_is_cleared_and_rebuilt_when_it_outgrows_its_bound():
    events = [raw(f"name {i}", float(i), 0.5) for i in range(100)]
    encoder = PerfettoEncoder(sequence_id=1, uuid_salt=0, max_interned=16)
    data = b"".join(encoder.encode(events[i:i + 10]) for i in range(0, 100, 10)) + encoder.finish()
    trace = load(data)  # every iid still defined before its use
    assert len(trace.slices) == 100
    assert sum(1 for p in parse(data) if p.sequence_flags & CLEARED) > 1


# --- writers ---------------------------------------------------------------------------------------
def test_two_writers_files_concatenate_into_one_trace():
    trainer, rollout = SpanFactory(TRAINER), SpanFactory(ROLLOUT, first_id=1000)
    files = []
    for factory in (trainer, rollout):
        encoder = PerfettoEncoder()  # a random sequence id and uuid salt, as each rank's exporter
        files.append(encoder.encode(chrome(session_spans(factory))) + encoder.finish())
    trace = load(b"".join(files))
    assert len(trace.sequences) == 2
    assert {trace.process_of(s.track) for s in trace.by_name("session")} == \
        {"[trainer] Rank 0, Process", "[rollout] Rank 1, Process"}


def test_slices_wait_in_the_window_until_finish():
    encoder = PerfettoEncoder(sequence_id=1, uuid_salt=0, window=100)
    assert encoder.encode([raw("a", 1.0, 1.0)]) == b""
    assert [s.name for s in load(encoder.finish()).slices] == ["a"]


@pytest.mark.parametrize("event", [
    {"ph": "X", "name": "no ts", "pid": 1, "tid": 1},
    {"ph": "X", "name": "text ts", "ts": "soon", "pid": 1, "tid": 1},
    {"ph": "Q", "name": "unknown phase", "ts": 1.0},
    ["not", "a", "dict"],
    {"ph": "C", "name": "no args", "ts": 1.0, "pid": 1},
])
def test_an_event_it_cannot_read_is_left_out_and_counted(event):
    encoder = PerfettoEncoder(sequence_id=1, uuid_salt=0)
    data = encoder.encode([event, raw("good", 1.0, 1.0)]) + encoder.finish()
    assert ([s.name for s in load(data).slices], encoder.skipped) == (["good"], 1)
