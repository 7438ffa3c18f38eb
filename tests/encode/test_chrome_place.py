"""The compiled common case of the Chrome encoder (``_chrome_place.c``) places spans as the
Python steps do.

Two encoders take the same records in the same batches: one walks each batch with the
compiled walk, which hands what it does not take to the Python step; the other runs the
Python step on every item. Their trace files must be equal byte for byte, over plain
scopes on several threads, nested spans (children first), children on other lanes (flow
arrows), sessions, remote parents, instants, counters, zero and negative durations and
lanes pruned as they fill.
"""

from __future__ import annotations

import itertools
import random
import threading

import pytest
from opentelemetry.sdk.resources import Resource

from otel_rl._internal import keys
from otel_rl._internal.encode import chrome_place, chrome_trace
from otel_rl._internal.encode.chrome_trace import ChromeTraceEncoder
from otel_rl._internal.encode.lanes import unpack_leaves
from otel_rl._internal.export import file_exporter
from otel_rl._internal.recording import record

compiled = pytest.mark.skipif(chrome_place.native is None, reason="built without a C compiler")

_RESOURCE = Resource.create({"service.name": "t", keys.RANK: 1, keys.ROLE: "actor"})
_T0 = 1_732_563_442_123_456_789


def _rec(name, span_id, parent, start, end, *, remote=False, kind=0, trace=7, status=0, attributes=None):
    fields = [None] * record.FIELDS
    fields[record.ATTRIBUTES] = attributes
    fields[record.NAME] = name
    fields[record.TRACE_ID] = trace
    fields[record.SPAN_ID] = span_id
    fields[record.PARENT_ID] = parent
    fields[record.PARENT_REMOTE] = remote
    fields[record.FLAGS] = 1
    fields[record.START] = start
    fields[record.END] = end
    fields[record.KIND] = kind
    fields[record.STATUS] = status
    return tuple(fields)


def _attrs(thread, **extra):
    return {keys.THREAD_ID: thread, keys.THREAD_NAME: f"t{thread}", **extra}


def _workload(seed: int, count: int) -> list[tuple]:
    """(record, attributes) pairs in the order they end, as the exporter gets them."""
    rng = random.Random(seed)
    ids = itertools.count(1)
    now = _T0
    out = []
    while len(out) < count:
        thread = rng.choice([1, 2, 3])
        pick = rng.random()
        start = now
        end = start + 50
        if pick < 0.5:  # a plain scope after the last one
            end = start + rng.choice([0, 1, 999, 1500, 2_000_000, -3])
            out.append((_rec("scope", next(ids), 0, start, end, trace=rng.choice([7, 8, (1 << 128) - 1])),
                        _attrs(thread, **{keys.CATEGORY: rng.choice(["io", "", "compute"])})))
        elif pick < 0.7:  # a parent with two children, which end first
            parent = next(ids)
            a, b = next(ids), next(ids)
            out.append((_rec("child", a, parent, start + 10, start + 20), _attrs(thread)))
            out.append((_rec("child", b, parent, start + 30, start + 40), _attrs(thread)))
            out.append((_rec("parent", parent, 0, start, start + 50), _attrs(thread)))
        elif pick < 0.8:  # a session: its phase ends before the session span
            session_id = f"s{next(ids)}"
            span, phase = next(ids), next(ids)
            out.append((_rec("generate", phase, span, start + 5, start + 15),
                        _attrs(thread, **{keys.SESSION_ID: session_id, keys.SPAN_KIND: keys.KIND_PHASE})))
            out.append((_rec("session", span, 0, start, start + 20),
                        _attrs(thread, **{keys.SESSION_ID: session_id, keys.SPAN_KIND: keys.KIND_SESSION})))
        elif pick < 0.85:  # work for another process's span, and a client call
            out.append((_rec("served", next(ids), rng.getrandbits(64) or 1, start, start + 9, remote=True, kind=1),
                        _attrs(thread)))
            out.append((_rec("call", next(ids), 0, start + 10, start + 12, kind=2), _attrs(thread)))
        elif pick < 0.9:  # an instant and a gauge
            out.append((_rec("tick", next(ids), 0, start, start),
                        _attrs(thread, **{keys.SPAN_KIND: keys.KIND_INSTANT})))
            out.append((_rec("mem", next(ids), 0, start, start + 1), _attrs(thread, **{keys.GAUGE_VALUE: 1.5})))
        elif pick < 0.93:  # overlapping the last span of its thread: another lane
            out.append((_rec("overlap", next(ids), 0, start - 500, start + 500), _attrs(thread)))
        elif pick < 0.96:  # overlapping children on other lanes (flow arrows), one outliving its parent
            parent = next(ids)
            a, b, late = next(ids), next(ids), next(ids)
            out.append((_rec("child", a, parent, start + 10, start + 60), _attrs(thread)))
            out.append((_rec("child", b, parent, start + 20, start + 80), _attrs(thread)))
            out.append((_rec("parent", parent, 0, start, start + 100), _attrs(thread)))
            out.append((_rec("late", late, parent, start + 90, start + 200), _attrs(thread)))
            end = start + 200
        else:  # a thread seen for the first time
            out.append((_rec("new", next(ids), 0, start, start + 3), _attrs(rng.randrange(10, 10_000))))
        now = max(start, end) + rng.randrange(1, 3_000)
    return out


def _encoder(monkeypatch, *, compiled_walk: bool, **limits) -> tuple[ChromeTraceEncoder, list[int]]:
    """A fresh encoder, and the count of items its Python step takes (a one-item list)."""
    monkeypatch.setattr(chrome_trace, "_encoder_numbers", itertools.count(1))  # the same tids in both
    encoder = ChromeTraceEncoder(max_intervals_per_lane=64, **limits)  # lanes prune as they fill
    encoder.set_resource(_RESOURCE)
    if not compiled_walk:
        encoder._encode_records = encoder._place_span = encoder._add_span = None
    python_steps = [0]
    step = encoder._encode_one

    def counted(item, out):
        python_steps[0] += 1
        step(item, out)

    encoder._encode_one = counted
    return encoder, python_steps


def _write(encoder: ChromeTraceEncoder, items: list[tuple], batch: int) -> bytes:
    """The trace file's bytes for ``items`` handed to ``encoder`` ``batch`` at a time."""
    data = bytearray()
    for i in range(0, len(items), batch):
        events = encoder.encode(items[i:i + batch])
        if events:
            data += file_exporter._batch(events)
    events = encoder.finish()
    if events:
        data += file_exporter._batch(events)
    return bytes(data)


def _trace_file(monkeypatch, items: list[tuple], batch: int, *, compiled_walk: bool,
                **limits) -> tuple[bytes, int]:
    """The trace file's bytes, and how many items the Python step took."""
    encoder, python_steps = _encoder(monkeypatch, compiled_walk=compiled_walk, **limits)
    return _write(encoder, items, batch), python_steps[0]


@compiled
@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_walk_writes_the_python_steps_bytes(monkeypatch, seed):
    items = _workload(seed, 3000)
    walked, python_steps = _trace_file(monkeypatch, items, 101, compiled_walk=True)
    stepped, all_steps = _trace_file(monkeypatch, items, 101, compiled_walk=False)
    assert walked == stepped
    assert all_steps == len(items)
    assert python_steps < len(items) * 0.7  # the plain scopes took the compiled walk
    assert walked.count(b'{"ph":"s","name":"flow"') >= 5  # local flow arrows were written


@compiled
def test_a_run_of_plain_scopes_never_leaves_the_compiled_walk_after_its_lanes_exist(monkeypatch):
    items = [(_rec("scope", n + 1, 0, _T0 + 10 * n, _T0 + 10 * n + 5), _attrs(1)) for n in range(500)]
    walked, python_steps = _trace_file(monkeypatch, items, 100, compiled_walk=True)
    stepped, _ = _trace_file(monkeypatch, items, 100, compiled_walk=False)
    assert walked == stepped
    assert python_steps == 1  # the first span makes the thread's lane
    assert walked.count(b'"ph":"X"') == 500


def _interleaved(seed: int, count: int) -> list[tuple]:
    """Trees of spans ending children first, and sessions whose phases and spans overlap
    other sessions' on one thread (asyncio), in end order."""
    rng = random.Random(seed)
    ids = itertools.count(1)
    spans = []  # (end, record, attributes)

    def tree(parent: int, start: int, end: int, depth: int, thread: int, extra: dict) -> None:
        span_id = next(ids)
        spans.append((end, _rec(f"d{depth}", span_id, parent, start, end), _attrs(thread, **extra)))
        at = start
        while depth < 5 and at < end and rng.random() < 0.7:
            width = rng.randrange(1, max(2, (end - start) // 2))
            lo = at + rng.randrange(0, 50)
            hi = min(end, lo + width) if rng.random() < 0.9 else end + 100  # now and then past its parent
            if hi > lo:
                tree(span_id, lo, hi, depth + 1, thread, extra)
            at = hi + 1

    now = _T0
    while len(spans) < count:
        thread = rng.choice([1, 2])
        if rng.random() < 0.5:
            tree(0, now, now + rng.randrange(100, 5_000), 0, thread, {})
        else:
            session_id = f"s{next(ids)}"
            span = next(ids)
            length = rng.randrange(1_000, 20_000)
            spans.append((now + length, _rec("session", span, 0, now, now + length),
                          _attrs(thread, **{keys.SESSION_ID: session_id, keys.SPAN_KIND: keys.KIND_SESSION})))
            for phase in range(rng.randrange(1, 4)):
                lo = now + rng.randrange(0, length)
                hi = min(now + length, lo + rng.randrange(1, 5_000))
                # now and then work for a session whose span is in another process (no parent here)
                parent = span if rng.random() < 0.9 else 0
                spans.append((hi, _rec("phase", next(ids), parent, lo, hi), _attrs(
                    thread, **{keys.SESSION_ID: session_id, keys.SPAN_KIND: keys.KIND_PHASE})))
        now += rng.randrange(1, 4_000)  # the next one may overlap this one
    spans.sort(key=lambda item: item[0])
    return [(rec, attrs) for _, rec, attrs in spans]


@compiled
@pytest.mark.parametrize("seed", range(12))
def test_nested_and_interleaved_spans_nest_as_the_python_steps_nest_them(monkeypatch, seed):
    items = _interleaved(seed, 2500)
    walked, _ = _trace_file(monkeypatch, items, 67, compiled_walk=True)
    stepped, _ = _trace_file(monkeypatch, items, 67, compiled_walk=False)
    assert walked == stepped
    assert walked.count(b"lane 3") >= 1  # overlaps made lanes beyond the thread's own


@compiled
@pytest.mark.parametrize("seed", range(6))
def test_sessions_released_early_or_stale_are_laid_out_as_the_python_steps_lay_them_out(monkeypatch, seed):
    items = _interleaved(seed, 2000)
    limits = {"max_buffered_spans": 3, "session_wait_s": 4e-6}  # the bound and the wait both reached
    walked, _ = _trace_file(monkeypatch, items, 53, compiled_walk=True, **limits)
    stepped, _ = _trace_file(monkeypatch, items, 53, compiled_walk=False, **limits)
    assert walked == stepped


def _session_with_phases(phases: list[tuple[int, int]], first_id: int) -> list[tuple]:
    """A session's phases (``(start, end)`` offsets), then its span, as the exporter gets them."""
    session_id, span = f"s{first_id}", first_id
    extra = {keys.SESSION_ID: session_id}
    items = [(_rec("phase", first_id + 1 + k, span, _T0 + lo, _T0 + hi),
              _attrs(1, **extra, **{keys.SPAN_KIND: keys.KIND_PHASE})) for k, (lo, hi) in enumerate(phases)]
    end = max(hi for _, hi in phases) + 10
    items.append((_rec("session", span, 0, _T0, _T0 + end), _attrs(1, **extra, **{keys.SPAN_KIND: keys.KIND_SESSION})))
    return items


@compiled
@pytest.mark.parametrize("phases", [
    [(30, 40), (10, 20), (10, 25), (10, 20), (10, 25)],  # equal keys keep their arrival order
    [(k % 7, 100 - k % 5) for k in range(40)],  # more than the compiled sort takes: the list's own sort
], ids=["ties", "many"])
def test_phases_waiting_for_their_session_are_placed_outer_first_as_the_python_steps_place_them(
        monkeypatch, phases):
    items = _session_with_phases(phases, 1000)
    walked, _ = _trace_file(monkeypatch, items, 100, compiled_walk=True)
    stepped, _ = _trace_file(monkeypatch, items, 100, compiled_walk=False)
    assert walked == stepped
    assert walked.count(b'"name":"phase"') == len(phases)


def _phases_then_session(session_id: str, span: int, phase_ends: list[int], end: int) -> list[tuple]:
    """A session's phases, each ending at ``_T0 + phase_ends[k]``, right before its span."""
    extra = {keys.SESSION_ID: session_id}
    items = [(_rec("phase", span + 1 + k, span, _T0 + e - 5, _T0 + e), _attrs(1, **extra, **{keys.SPAN_KIND: keys.KIND_PHASE}))
             for k, e in enumerate(phase_ends)]
    items.append((_rec("session", span, 0, _T0, _T0 + end), _attrs(1, **extra, **{keys.SPAN_KIND: keys.KIND_SESSION})))
    return items


_WAIT_NS = 1_000


@compiled
@pytest.mark.parametrize("older_end, bound", [
    (3_000 - _WAIT_NS, 3),  # the older session's phase just fresh, the bound just reached: one wait
    (3_000 - _WAIT_NS - 1, 3),  # stale once the last phase ends: released between the phases
    (3_000 - _WAIT_NS, 2),  # the bound passed by the last phase: the older session released early
], ids=["fits", "stale-at-the-last-phase", "bound-at-the-last-phase"])
def test_phases_right_before_their_session_span_are_laid_out_as_the_python_steps_lay_them_out(
        monkeypatch, older_end, bound):
    # The walk hands a session's phases to its span as one wait where buffering them one by one
    # could release nothing; at each edge of that the bytes must still be the Python steps'.
    older = [(_rec("phase", 101, 100, _T0 + older_end - 5, _T0 + older_end),
              _attrs(1, **{keys.SESSION_ID: "s100", keys.SPAN_KIND: keys.KIND_PHASE}))]
    items = older + _phases_then_session("s1", 1, [2_000, 3_000], 3_500) + _phases_then_session("s10", 10, [4_000], 4_500)
    limits = {"max_buffered_spans": bound, "session_wait_s": _WAIT_NS / 1e9}
    walked, _ = _trace_file(monkeypatch, items, 100, compiled_walk=True, **limits)
    stepped, _ = _trace_file(monkeypatch, items, 100, compiled_walk=False, **limits)
    assert walked == stepped
    released_first = walked.index(b'"id":"0000000000000065"') < walked.index(b'"name":"session"')
    assert released_first == (older_end < 3_000 - _WAIT_NS or bound < 3)


def _bundled_sessions(seed: int, count: int, *, bundled: bool) -> list[tuple]:
    """Sessions whose phases (``expand``'s records when ``bundled``: the shared attributes of
    their name) come right before their span, some nested or overlapping, some marked on
    another thread than their session's, some ending after a span of their session that took
    the span path, on two threads."""
    rng = random.Random(seed)
    ids = itertools.count(1)
    now = _T0
    out = []
    for _ in range(count):
        thread = rng.choice([1, 2])
        session_id, span = f"s{next(ids)}", next(ids)
        extra = {keys.SESSION_ID: session_id}
        shapes = rng.choice([[(5, 15), (20, 30)], [(5, 40), (10, 20)], [(5, 25), (15, 35)], [(5, 15)] * 3, []])
        if rng.random() < 0.3:  # a span of the session, a child, placed before its phases
            out.append((_rec("tool", next(ids), span, now + 1, now + 3), _attrs(thread, **extra)))
        for lo, hi in shapes:
            name = rng.choice(["generate", "reward"])
            attributes = record.phase_attributes(name) if bundled else None
            marked_on = thread if rng.random() < 0.9 else 3 - thread  # another thread: a flow to it
            out.append((_rec(name, next(ids), span, now + lo, now + hi, attributes=attributes),
                        _attrs(marked_on, **extra, **{keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: name})))
        out.append((_rec("session", span, 0, now, now + 50), _attrs(thread, **extra, **{keys.SPAN_KIND: keys.KIND_SESSION})))
        if rng.random() < 0.2:  # a child arriving after its session span: it finds the session placed
            out.append((_rec("late", next(ids), span, now + 45, now + 49), _attrs(thread, **extra)))
        now += rng.choice([20, 60, 200])  # some sessions overlap the one before: another lane
    return out


def _encoded(monkeypatch, items: list[tuple], *, compiled_walk: bool,
             **limits) -> tuple[bytes, list[int], list[tuple]]:
    """The trace file's bytes, then the encoder's clock, each thread's last use of it and each
    lane's count, next prune and pruned time."""
    encoder, _ = _encoder(monkeypatch, compiled_walk=compiled_walk, **limits)
    data = _write(encoder, items, 61)
    groups = [group for proc in encoder._processes.values() for group in proc.groups.values()]
    lanes = [(lane.count, lane.next_prune, lane.pruned_before) for group in groups for lane in group.lanes]
    return data, [encoder._clock, *(group.used for group in groups)], lanes


@pytest.mark.parametrize("compiled_walk", [pytest.param(True, marks=compiled), False], ids=["compiled", "python"])
@pytest.mark.parametrize("limits", [
    {"max_buffered_spans": 7},  # some sessions released early: phases placed before their span
    {"horizon_s": 2e-8},  # a horizon shorter than a session: each prune forgets phases it just placed
], ids=["released-early", "short-horizon"])
@pytest.mark.parametrize("seed", range(4))
def test_bundled_phases_write_the_bytes_the_same_phases_as_spans_write(monkeypatch, seed, limits, compiled_walk):
    # A bundled phase is no one's parent, so it is kept in no map; the lines stay the same,
    # and so do the lanes' pruning and the threads' last use (which thread's tracks go first).
    bundled = _encoded(monkeypatch, _bundled_sessions(seed, 400, bundled=True), compiled_walk=compiled_walk, **limits)
    spans = _encoded(monkeypatch, _bundled_sessions(seed, 400, bundled=False), compiled_walk=compiled_walk, **limits)
    assert bundled == spans
    assert bundled[0].count(b'"name":"generate"') + bundled[0].count(b'"name":"reward"') > 400
    assert b'{"ph":"s","name":"flow"' in bundled[0]  # phases marked on another thread, linked to their session


@compiled
@pytest.mark.parametrize("seed", range(4))
def test_bundled_phases_are_laid_out_as_the_python_steps_lay_them_out(monkeypatch, seed):
    items = _bundled_sessions(seed, 400, bundled=True)
    walked, _ = _trace_file(monkeypatch, items, 61, compiled_walk=True, max_buffered_spans=7)
    stepped, _ = _trace_file(monkeypatch, items, 61, compiled_walk=False, max_buffered_spans=7)
    assert walked == stepped


@pytest.mark.parametrize("compiled_walk", [pytest.param(True, marks=compiled), False], ids=["compiled", "python"])
def test_a_bundled_phase_is_kept_in_no_placement_map(monkeypatch, compiled_walk):
    session = {keys.SESSION_ID: "s1"}
    items = [
        (_rec("generate", 3, 2, _T0 + 10, _T0 + 20, attributes=record.phase_attributes("generate")),
         _attrs(1, **session, **{keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: "generate"})),
        (_rec("reward", 4, 2, _T0 + 30, _T0 + 40),  # a phase run as a span: it may have children
         _attrs(1, **session, **{keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: "reward"})),
        (_rec("session", 2, 0, _T0, _T0 + 50), _attrs(1, **session, **{keys.SPAN_KIND: keys.KIND_SESSION})),
    ]
    encoder, _ = _encoder(monkeypatch, compiled_walk=compiled_walk)
    lines = _write(encoder, items, 10).decode().splitlines()
    assert [encoder._placed.get(span) is not None for span in (2, 3, 4)] == [True, False, True]
    assert [encoder._parent_of.get(span) for span in (3, 4)] == [None, 2]
    tids = {name: line.split('"tid":')[1].split(",")[0] for line in lines if '"ph":"X"' in line
            for name in ("generate", "reward", "session") if f'"name":"{name}"' in line}
    assert tids["generate"] == tids["reward"] == tids["session"]  # nested under the session, one lane


@pytest.mark.parametrize("compiled_walk", [pytest.param(True, marks=compiled), False], ids=["compiled", "python"])
def test_a_sessions_phases_are_packed_once_placed_and_unpacked_for_a_span_nesting_among_them(
        monkeypatch, compiled_walk):
    session = {keys.SESSION_ID: "s1"}
    phases = [
        (_rec(name, span, 2, _T0 + lo, _T0 + hi, attributes=record.phase_attributes(name)),
         _attrs(1, **session, **{keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: name}))
        for name, span, lo, hi in (("generate", 3, 10, 20), ("reward", 4, 30, 40))]
    items = [*phases, (_rec("session", 2, 0, _T0, _T0 + 50), _attrs(1, **session, **{keys.SPAN_KIND: keys.KIND_SESSION}))]
    encoder, _ = _encoder(monkeypatch, compiled_walk=compiled_walk)
    first = _write(encoder, items, 10).decode()
    (lane,) = [lane for proc in encoder._processes.values() for group in proc.groups.values() for lane in group.lanes]
    assert type(lane.root.kids[-1]) is bytes  # the phases, one object

    late = (_rec("tool", 5, 2, _T0 + 22, _T0 + 28), _attrs(1, **session))  # between the two phases
    second = _write(encoder, [late], 10).decode()
    assert [line.split('"tid":')[1].split(",")[0] for line in (first + second).splitlines()
            if '"ph":"X"' in line] == [str(lane.tid)] * 4  # all nested on the session's one lane
    kids = lane.root.kids[-1]
    assert (kids.starts, kids.ends, kids.ids) == ([_T0 + 10, _T0 + 22, _T0 + 30], [_T0 + 20, _T0 + 28, _T0 + 40],
                                                  [3, 5, 4])


def _as_bundles(items: list[tuple]) -> list[tuple]:
    """``items`` with each session span and the bundled phases right before it as one bundled
    session, (record, attributes, its phases' pairs), as the record sink keeps them."""
    out, phases = [], []
    for rec, attrs in items:
        if attrs.get(keys.SPAN_KIND) == keys.KIND_PHASE and rec[record.ATTRIBUTES] is record.phase_attributes(
                rec[record.NAME]):
            phases.append((rec, attrs))
        elif attrs.get(keys.SPAN_KIND) == keys.KIND_SESSION:
            out.append((rec, attrs, tuple(phases)))
            phases = []
        else:
            out.extend(phases)
            out.append((rec, attrs))
            phases = []
    return out + phases


def _lane_state(encoder: ChromeTraceEncoder) -> list:
    """The encoder's clock, each thread's last use of it, and every lane's intervals, level by
    level, packed leaves read back."""
    def level(node):
        if node is None:
            return None
        if type(node) is bytes:
            node = unpack_leaves(node)
        return [node.starts, node.ends, node.ids, [level(kid) for kid in node.kids]]

    groups = [group for proc in encoder._processes.values() for group in proc.groups.values()]
    return [encoder._clock, *(group.used for group in groups),
            *((lane.count, lane.next_prune, lane.max_end, level(lane.root)) for group in groups for lane in group.lanes)]


@compiled
@pytest.mark.parametrize("seed", range(4))
def test_bundled_sessions_leave_the_lanes_the_python_steps_leave(monkeypatch, seed):
    # A session's phases go straight into its interval's packed leaves where they follow one
    # another inside it; spans arriving later nest among them. The lanes, intervals and all,
    # and the bytes must be the Python steps'.
    items = _as_bundles(_bundled_sessions(seed, 400, bundled=True))
    assert sum(len(item) == 3 and len(item[2]) > 0 for item in items) > 100
    states = {}
    for compiled_walk in (True, False):
        encoder, _ = _encoder(monkeypatch, compiled_walk=compiled_walk, max_buffered_spans=7)
        data = _write(encoder, items, 61)
        states[compiled_walk] = (data, _lane_state(encoder))
    assert states[True] == states[False]


def _open_at_once(waves: int, open_sessions: int) -> list[tuple]:
    """Waves of sessions on one thread, registered together and finalized four at a time (a
    task's: the same end), each a track of its own: a session tries the lanes before its own."""
    out = []
    ids = itertools.count(1)
    now = _T0
    for _ in range(waves):
        starts = [now + 10 * k for k in range(open_sessions)]
        for first in range(0, open_sessions, 4):
            end = now + 10 * open_sessions + 100 * (first + 1)
            for k in range(first, min(first + 4, open_sessions)):
                span = next(ids)
                extra = {keys.SESSION_ID: f"s{span}"}
                out.append((_rec("generate", next(ids), span, starts[k] + 1, starts[k] + 5,
                                 attributes=record.phase_attributes("generate")),
                            _attrs(1, **extra, **{keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: "generate"})))
                out.append((_rec("session", span, 0, starts[k], end),
                            _attrs(1, **extra, **{keys.SPAN_KIND: keys.KIND_SESSION})))
        now = end + 1_000
    return out


@compiled
def test_many_sessions_open_at_once_take_the_lanes_the_python_steps_give_them(monkeypatch):
    # The walk skips a lane whose last root interval starts before a span and ends inside it
    # without asking Lane.insert; the lanes each session ends up on must be the Python steps'.
    items = _open_at_once(3, 61)
    walked, _ = _trace_file(monkeypatch, items, 97, compiled_walk=True)
    stepped, _ = _trace_file(monkeypatch, items, 97, compiled_walk=False)
    assert walked == stepped
    assert walked.count(b'"name":"thread_name"') >= 61  # a track for each session open at once


@compiled
def test_what_the_encoders_python_places_during_a_walk_counts_for_the_spans_after_it(monkeypatch):
    # The walk keeps the encoder's clock, newest end and trace text itself and hands them to
    # the encoder's attributes around each call into its Python. The first span of a fresh
    # encoder takes the Python step (it makes the process): the newest end it sets must hold
    # for the phase after it, which is then past the session wait and released at once.
    wait = 1_000_000_000
    session = {keys.SESSION_ID: "s1"}
    items = [
        (_rec("late", 1, 0, _T0, _T0 + 10 * wait), _attrs(1)),
        (_rec("phase", 3, 2, _T0 + 1_000, _T0 + 2_000), _attrs(1, **session, **{keys.SPAN_KIND: keys.KIND_PHASE})),
        (_rec("scope", 4, 0, _T0 + 2_500, _T0 + 2_600), _attrs(2)),
        (_rec("session", 2, 0, _T0 + 500, _T0 + 3_000), _attrs(1, **session, **{keys.SPAN_KIND: keys.KIND_SESSION})),
    ]
    walked, python_steps = _trace_file(monkeypatch, items, 10, compiled_walk=True, session_wait_s=wait / 1e9)
    stepped, _ = _trace_file(monkeypatch, items, 10, compiled_walk=False, session_wait_s=wait / 1e9)
    assert walked == stepped
    assert python_steps == 1  # the first span: it makes the process
    assert walked.index(b'"name":"phase"') < walked.index(b'"name":"session"')  # released, not held


@compiled
def test_encoders_walking_batches_on_two_threads_at_once_write_what_each_writes_alone(monkeypatch):
    # A walk keeps the encoder's set-once attributes for its own thread; a Python step on one
    # thread lets the other thread's walk start and end in between.
    items = [_interleaved(seed, 1500) for seed in (21, 22)]
    alone = [_trace_file(monkeypatch, work, 37, compiled_walk=True)[0] for work in items]
    encoders = [_encoder(monkeypatch, compiled_walk=True)[0] for _ in items]
    together: list[bytes | None] = [None, None]

    def run(k: int) -> None:
        together[k] = _write(encoders[k], items[k], 37)

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert together == alone


@compiled
def test_timestamps_in_microseconds_are_pythons_int_division():
    # A start in nanoseconds since the epoch is past 2^53: the placement divides it by 1000
    # in integers, rounding to the double as Python's int division does (ties to even).
    rng = random.Random(11)
    values = [2**53, 2**53 + 1, -(2**53), 2**63 - 1, -(2**63), 1_795_687_747_323_989_500,
              1_795_687_747_323_989_125, 1_795_687_747_323_989_375, 1_795_687_747_323_989_625]
    for _ in range(50_000):
        pick = rng.randrange(3)
        if pick == 0:
            values.append(rng.randrange(1_700_000_000_000_000_000, 1_900_000_000_000_000_000))
        elif pick == 1:
            values.append(rng.choice([1, -1]) * rng.randrange(2**53, 2**63))
        else:  # the remainders that fall on or beside half a unit of the grid
            values.append(rng.randrange(2**53, 2**60) // 1000 * 1000 + rng.choice([125, 375, 500, 625, 875, 999]))
    wrong = [ns for ns in values if repr(chrome_place.native.micros_of(ns)) != repr(ns / 1000)]
    assert wrong == []
