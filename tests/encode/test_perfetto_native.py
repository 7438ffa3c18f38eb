"""The compiled Perfetto encoder (``_native.c``) writes the Python encoder's bytes, event for event.

Both are given the same events in the same calls: the Python encoder the parsed
blob, the compiled one its JSON text, as the converter hands them over. Every
comparison is of whole outputs, byte for byte; input the compiled encoder does
not mirror must raise ``Unsupported`` (the converter then starts again in Python)
rather than write anything else.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from otel_rl._internal import keys
from otel_rl._internal.encode.perfetto import PerfettoEncoder
from otel_rl._internal.encode.perfetto import native
from support import SpanFactory
from support.perfetto import load

from test_perfetto import ROLLOUT, TRAINER, chrome, raw, session_spans

pytestmark = pytest.mark.skipif(native._native is None, reason="the compiled encoder was not built")


def both(blobs: list[bytes], **options: Any) -> tuple[bytes, bytes]:
    """The Python encoder's and the compiled encoder's output for the same blobs."""
    options = {"sequence_id": 1, "uuid_salt": 0, **options}
    python = PerfettoEncoder(**options)
    compiled = native._native.NativeEncoder(**options)
    ours = b"".join(python.encode(orjson.loads(b"[" + blob + b"]")) for blob in blobs) + python.finish()
    theirs = b"".join(compiled.encode(blob) for blob in blobs) + compiled.finish()
    assert (compiled.events, compiled.skipped) == (python.events, python.skipped)
    return ours, theirs


def blobs_of(events: list[Any], cuts: int = 3) -> list[bytes]:
    lines = [orjson.dumps(e) for e in events]
    step = max(1, len(lines) // cuts)
    return [b",\n".join(lines[i:i + step]) for i in range(0, len(lines), step)]


def assert_same(events: list[Any], **options: Any) -> bytes:
    ours, theirs = both(blobs_of(events), **options)
    assert theirs == ours
    return theirs


# --- the shapes the converter sees ------------------------------------------------------------------
def test_sessions_tasks_and_steps_of_two_processes():
    trainer, rollout = SpanFactory(TRAINER), SpanFactory(ROLLOUT, first_id=1000)
    step = trainer.span("step", 0, 500, attrs={keys.SPAN_KIND: keys.KIND_STEP, keys.STEP: 0})
    spans = [span for i in range(6) for span in session_spans(rollout, task=i // 2, session=i, start=40 * i)]
    events = chrome([step]) + chrome(spans, exact=False)
    load(assert_same(events))


def test_exact_nanoseconds_and_json_microseconds():
    spans = session_spans(SpanFactory(ROLLOUT))
    assert_same(chrome(spans, exact=True))
    assert_same(chrome(spans, exact=False))


def test_overflow_tracks_ties_and_slack():
    ts = 1.8e15
    assert_same([raw("a", 0.0, 10.0), raw("b", 5.0, 10.0), raw("c", 6.0, 10.0), raw("child", 10.0, 5.0),
                 raw("parent", 10.0, 20.0), raw("first", ts, 10.0), raw("second", ts + 9.9999, 10.0)])


def test_counters_instants_metadata_flows_and_async_events():
    events = [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "[rollout] Rank 3, Process"}},
        {"ph": "M", "name": "process_labels", "pid": 10, "tid": 0, "args": {"labels": "exp/trial"}},
        {"ph": "M", "name": "thread_name", "pid": 10, "tid": 1, "args": {"name": "MainThread"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 10, "tid": 1, "args": {"sort_index": 0}},
        {"ph": "M", "name": "thread_sort_index", "pid": 10, "tid": 2, "args": {"sort_index": 1}},
        raw("on lane", 1.0, 3.0, tid=2, rank=3, role="rollout", other=1.5),
        {"ph": "C", "name": "gpu", "pid": 10, "tid": 0, "ts": 3.0, "args": {"used": 3, "free": 1.5, "x": "no"}},
        {"ph": "C", "name": "gpu", "pid": 10, "tid": 0, "ts": 1.0, "args": {"used": 2}},
        {"ph": "i", "s": "g", "name": "global", "ts": 2.0, "pid": 10, "tid": 1},
        {"ph": "i", "s": "p", "name": "process", "ts": 2.0, "pid": 10, "tid": 1, "args": {"k": [1, {"a": None}]}},
        {"ph": "i", "name": "span event", "ts": 2.0, "pid": 10, "tid": 2, "args": {"span_id": "ab"}},
        raw("launch", 10.0, 2.0, tid=1), raw("kernel", 15.0, 5.0, tid=3),
        {"ph": "s", "id": 9, "cat": "ac2g", "name": "ac2g", "ts": 10.0, "pid": 10, "tid": 1},
        {"ph": "f", "bp": "e", "id": 9, "cat": "ac2g", "name": "ac2g", "ts": 15.0, "pid": 10, "tid": 3},
        {"ph": "t", "id": 9, "cat": "ac2g", "name": "ac2g", "ts": 15.0, "pid": 10, "tid": 3},
        {"ph": "B", "name": "begin", "ts": 30.0, "pid": 10, "tid": 1}, {"ph": "E", "ts": 31.0, "pid": 10, "tid": 1},
        {"ph": "b", "name": "async", "cat": "c", "id": "0x1", "ts": 30.0, "pid": 10},
        {"ph": "n", "name": "step", "cat": "c", "id": "0x1", "ts": 30.5, "pid": 10},
        {"ph": "e", "name": "async", "cat": "c", "id": "0x1", "ts": 31.0, "pid": 10},
    ]
    load(assert_same(events))


def test_slices_before_the_epoch_are_placed_by_both():
    # A negative start once refused every lane, so each overflow track made another, forever.
    load(assert_same([raw("before", -2.5, 1.0), raw("inside", -2.0, 0.2), raw("after", 3.0, 1.0),
                      raw("far before", -1.8e15, 10.0)]))


def test_events_it_cannot_read_are_left_out_and_counted_the_same_way():
    assert_same([{"ph": "X", "name": "no ts", "pid": 1, "tid": 1}, {"ph": "X", "name": "text ts", "ts": "soon"},
                 {"ph": "Q", "name": "unknown phase", "ts": 1.0}, ["not", "a", "dict"], 7, None,
                 {"ph": "C", "name": "no args", "ts": 1.0, "pid": 1}, {"ph": "X", "ts": 1.0, "pid": 1},
                 {"ph": ["X"], "ts": 1.0}, {"ph": "X", "name": ["a"], "ts": 1.0, "pid": 1, "tid": 1},
                 raw("good", 1.0, 1.0)])


def test_interned_state_cleared_when_full_and_a_small_window():
    events = [raw(f"name {i}", float(i), 0.5, value=i % 3, text=f"t{i % 5}") for i in range(120)]
    assert_same(events, max_interned=16, window=7)


def test_span_ids_when_the_interned_state_is_cleared():
    # The iids of "span_id" and "parent_span_id" are remembered by the compiled encoder until a clear.
    events = [raw(f"n{i}", float(i), 0.5, span_id=f"{i:016x}", parent_span_id=f"{i // 2:016x}", k=f"v{i}")
              for i in range(200)]
    assert_same(events, max_interned=16, window=7)


def test_values_that_python_compares_equal_share_one_entry():
    # 1, 1.0 and True are one dict key: the first seen is written for all of them.
    events = [raw("a", 1.0, 1.0, x=True), raw("b", 2.0, 1.0, x=1), raw("c", 3.0, 1.0, x=1.0),
              raw(True, 4.0, 1.0), raw(1, 5.0, 1.0), raw(1.0, 6.0, 1.0), raw(None, 7.0, 1.0),
              raw("é ü \u2603 \U0001F600", 8.0, 1.0, s="\u00e9" * 130, t="x" * 200)]
    assert_same(events)


def test_members_spelled_differently_and_caches_emptied_when_full():
    # The compiled encoder finds an args member by its JSON text before its (name, value): the
    # same value spelled otherwise (1, 1.0, true, white space, an escaped name) and more than
    # 16,384 values kept for one process (the cache empties) must still give the same bytes.
    spellings = [b'"x":1', b'"x": 1', b'"x":1.0', b'"x":true', b'"\\u0078":1', b'"x":"1"', b'"y":[1]']
    lines = []
    for i in range(17_000):
        lines.append(b'{"ph":"X","name":"s","ts":%d.5,"dur":0.25,"pid":1,"tid":1,"args":{%s,"v":%d,"rank":0}}'
                     % (i, spellings[i % len(spellings)], i))
    blobs = [b",\n".join(lines[i:i + 4_000]) for i in range(0, len(lines), 4_000)]
    ours, theirs = both(blobs)
    assert theirs == ours


@pytest.mark.parametrize("line", [
    b'{"ph":"X","name":"big","ts":1.0,"pid":1,"tid":1,"args":{"n":18446744073709551615}}',
    b'{"ph":"X","name":"twice","name":"again","ts":1.0,"pid":1,"tid":1}',
    b'{"ph":"X","name":"far","ts":1e300,"pid":1,"tid":1}',
])
def test_input_it_does_not_mirror_raises_unsupported(line):
    with pytest.raises(native.Unsupported):
        native._native.NativeEncoder(sequence_id=1, uuid_salt=0).encode(line)


# --- generated events ------------------------------------------------------------------------------
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False),
                     st.text(max_size=12), st.sampled_from(["rollout", "session", "task", "step", "annotation", "0a"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                       max_leaves=5)
_ids = st.sampled_from(["00000000000000a1", "00000000000000a2", "00000000000000a3", "00000000000000a4", "x", ""])
_arg_names = st.sampled_from([keys.SESSION_ID, keys.TASK_ID, keys.SPAN_KIND, "span_id", "parent_span_id", "rank",
                              "role", "value", "k", "name", "labels", "sort_index"])
_args = st.dictionaries(_arg_names, st.one_of(_values, _ids, st.integers(0, 3)), max_size=6)
_pid = st.one_of(st.sampled_from([1, 2, 3000]), st.sampled_from(["gpu", 0]), st.none())
_tid = st.one_of(st.integers(0, 4), st.sampled_from(["stream", 1.0, True]))
_ts = st.one_of(st.integers(-50, 50), st.floats(-50, 50), st.floats(1.8e15, 1.8e15 + 100), st.none())


@st.composite
def _event(draw: Any) -> dict[str, Any]:
    ph = draw(st.sampled_from(["X"] * 6 + ["M", "C", "i", "s", "f", "t", "B", "E", "b", "e", "n", "Q"]))
    event: dict[str, Any] = {"ph": ph, "pid": draw(_pid), "tid": draw(_tid)}
    if draw(st.integers(0, 9)):
        event["ts"] = draw(_ts)
    if ph == "X" and draw(st.booleans()):
        event["dur"] = draw(st.one_of(st.integers(-5, 30), st.floats(0, 30)))
    if ph == "M":
        event["name"] = draw(st.sampled_from(["process_name", "process_labels", "process_sort_index", "thread_name",
                                              "thread_sort_index", "otel_rl.flow_source", "other"]))
        event["args"] = draw(st.fixed_dictionaries({}, optional={
            "name": st.one_of(st.sampled_from(["[trainer] Rank 0, Process", "Rank 2, Process", "x"]), _scalars),
            "labels": _scalars, "sort_index": st.one_of(st.integers(-2, 3001), _scalars), "span_id": _ids}))
    else:
        event["name"] = draw(st.one_of(st.sampled_from(["a", "b", "session", "flow"]), _scalars))
        if draw(st.booleans()):
            event["cat"] = draw(st.one_of(st.sampled_from(["c", "rl.flow", "phase"]), st.none()))
        if draw(st.integers(0, 3)):
            event["args"] = draw(_args)
    if ph in "sftben" and draw(st.booleans()):
        event["id"] = draw(st.one_of(st.integers(0, 3), _ids))
    if ph == "i" and draw(st.booleans()):
        event["s"] = draw(st.sampled_from(["g", "p", "t"]))
    return event


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_event(), max_size=40), st.integers(1, 5), st.integers(0, 12), st.integers(16, 40))
def test_generated_events_give_the_same_bytes(events, cuts, window, max_interned):
    blobs = blobs_of(events, cuts)
    try:
        ours, theirs = both(blobs, window=window, max_interned=max_interned)
    except native.Unsupported:
        assume(False)
        return
    assert theirs == ours
