"""Batches cross the pipe to the exporter process and come back as the records they were."""

from __future__ import annotations

import marshal
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_rl._internal import keys
from otel_rl._internal.export import wire
from otel_rl._internal.recording import record

packed = pytest.mark.skipif(wire._native is None, reason="built without a C compiler")

# Values of every type the value stream takes (ints past int64 and nested dicts: marshal's).
_value = st.one_of(st.integers(), st.text(max_size=5), st.floats(allow_nan=False), st.booleans(), st.none())
_payload = st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.one_of(
    _value, st.dictionaries(st.text(max_size=3), _value, max_size=2)), max_size=3))


@st.composite
def bundles(draw, fits: bool = True):
    """A session's bundle: phases as the caller's thread ends them, some with a payload, an
    interruption or a policy version (those travel marshalled), or none."""
    times = st.integers(-(1 << 63), (1 << 63) - 1) if fits else st.integers()
    plain = st.tuples(st.text(max_size=6), times, times, st.one_of(st.none(), st.integers(0, (1 << 64) - 1)),
                      st.none(), st.none(), st.none())
    odd = st.tuples(st.text(max_size=6), times, times, st.integers(0, 9), _payload,
                    st.one_of(st.none(), st.just("cancelled")), st.one_of(st.none(), st.integers(0, 3)))
    phases = draw(st.lists(st.one_of(plain, plain, odd), max_size=4))
    return draw(st.one_of(st.none(), st.just((draw(st.one_of(st.integers(), st.text(max_size=4))), tuple(phases)))))


@st.composite
def records(draw, fits: bool = True) -> tuple:
    """A record; with ``fits``, its ids, times and codes in the ranges a span gives them."""
    ids = st.integers(0, (1 << 64) - 1)
    fields = [None] * record.FIELDS
    fields[record.NAME] = draw(st.text(max_size=8))
    fields[record.TRACE_ID] = draw(st.integers(0, (1 << 128) - 1) if fits else st.integers())
    fields[record.SPAN_ID] = draw(ids)
    fields[record.PARENT_ID] = draw(ids)
    fields[record.PARENT_REMOTE] = draw(st.booleans())
    fields[record.FLAGS] = draw(st.sampled_from([0, 1]))
    fields[record.TRACE_STATE] = draw(st.one_of(st.none(), st.just("k=v")))
    fields[record.START] = draw(st.integers(-(1 << 63), (1 << 63) - 1))
    fields[record.END] = draw(st.integers(-(1 << 63), (1 << 63) - 1))
    fields[record.KIND] = draw(st.integers(0, 4))
    fields[record.IDS] = draw(_payload)
    fields[record.THREAD] = draw(st.one_of(st.none(), ids))
    fields[record.CATEGORY] = draw(st.one_of(st.none(), st.text(max_size=4)))
    fields[record.ATTRIBUTES] = draw(_payload)
    fields[record.ARGS] = draw(_payload)
    fields[record.EVENTS] = draw(st.one_of(st.none(), st.just([("e", None, 5)])))
    fields[record.STATUS] = draw(st.integers(0, 2))
    fields[record.STATUS_DESC] = draw(st.one_of(st.none(), st.text(max_size=4)))
    fields[record.BUNDLE] = draw(bundles(fits))
    return tuple(fields)


def _typed(value):
    """``value`` with each value's type beside it, in tuples and lists too (``True == 1``
    must not hide a change)."""
    if isinstance(value, (tuple, list)):
        return type(value), [_typed(v) for v in value]
    return type(value), value


@settings(max_examples=200, deadline=None)
@given(st.lists(records(), max_size=20), st.dictionaries(st.integers(0, 1 << 40), st.text(max_size=6)))
def test_a_batch_comes_back_as_the_records_it_was(batch, names):
    got_names, got = wire.loads(wire.dumps(names, batch))
    assert got_names == names
    assert _typed(got) == _typed(batch)


@settings(max_examples=100, deadline=None)
@given(st.lists(records(), max_size=20), st.dictionaries(st.integers(0, 1 << 40), st.text(max_size=6)),
       st.integers(1, 7))
def test_a_batch_read_a_slice_at_a_time_comes_back_as_the_records_it_was(batch, names, size):
    reader = wire.reader(wire.dumps(names, batch))
    slices = []
    while slice_ := reader.take(size):
        slices.append(slice_)
    assert reader.names == names
    assert all(len(part) == size for part in slices[:-1])
    assert _typed([rec for part in slices for rec in part]) == _typed(batch)
    assert reader.take(size) == []


def test_without_the_compiled_twin_a_batch_is_read_a_slice_at_a_time_too(monkeypatch):
    monkeypatch.setattr(wire, "_native", None)
    reader = wire.reader(wire.dumps({7: "main"}, _scopes(5)))
    assert (reader.names, reader.take(3), reader.take(3), reader.take(3)) == (
        {7: "main"}, _scopes(5)[:3], _scopes(5)[3:], [])


@packed
def test_a_batch_broken_partway_is_refused_at_the_slice_that_reaches_the_break():
    data = bytearray(wire.dumps({}, _scopes(4)))
    assert data[:1] == b"\x00"
    third = 15 + 2 * 64  # the header, then 64 bytes a record
    data[third + 60:third + 64] = (1 << 20).to_bytes(4, "little")  # its fields at an index past the batch's
    reader = wire.reader(bytes(data))
    assert reader.take(2) == _scopes(4)[:2]
    with pytest.raises(ValueError, match="does not hold together"):
        reader.take(1)
    assert reader.take(1) == []  # nothing more is read


def test_without_the_compiled_twin_a_batch_is_marshal(monkeypatch):
    monkeypatch.setattr(wire, "_native", None)
    batch = _scopes(5)
    data = wire.dumps({7: "main"}, batch)
    assert marshal.loads(data) == ({7: "main"}, batch)
    assert wire.loads(data) == ({7: "main"}, batch)


@packed
@settings(max_examples=100, deadline=None)
@given(st.lists(records(), min_size=1, max_size=20))
def test_records_of_spans_travel_packed(batch):
    assert wire.dumps({}, batch)[:1] == b"\x00"


def _scopes(count: int, **changed) -> list[tuple]:
    """Records of a run of scopes on one thread, with ``changed`` fields (by name) set."""
    rng = random.Random(3)
    batch = []
    for n in range(count):
        fields = [None] * record.FIELDS
        start = 1_732_563_442_123_456_789 + 10_000 * n
        fields[record.NAME:record.END + 1] = ["step", rng.getrandbits(128), rng.getrandbits(64), 0, False, 1, None,
                                              start, start + 4_321]
        fields[record.KIND], fields[record.THREAD], fields[record.STATUS] = 0, 140_663_752_559_488, 0
        for name, value in changed.items():
            fields[record.FIELD_NAMES.index(name)] = value
        batch.append(tuple(fields))
    return batch


def _sessions(count: int, thread: int = 140_663_752_559_488) -> list[tuple]:
    """Records of sessions of one task, each with two phases marked on its thread."""
    batch = []
    for n, rec in enumerate(_scopes(count, name="session", trace_id=99)):
        start = rec[record.START]
        phases = (("generate", start + 10, start + 900, thread, None, None, None),
                  ("reward", start + 1_000, start + 1_500, thread, None, None, None))
        batch.append(rec[:record.BUNDLE] + ((n, phases),))
    return batch


@packed
def test_bundled_phases_travel_packed_and_share_their_records_thread_and_trace_id():
    batch = _sessions(50)
    data = wire.dumps({140_663_752_559_488: "MainThread"}, batch)
    assert int.from_bytes(data[7:11], "little") == 50 * (4 + 2 * 25)  # the phase stream: counts, times, threads
    got = wire.loads(data)[1]
    assert _typed(got) == _typed(batch)
    threads = {id(rec[record.THREAD]) for rec in got} | {id(ph[3]) for rec in got for ph in rec[record.BUNDLE][1]}
    assert len(threads) == 1
    assert len({id(rec[record.TRACE_ID]) for rec in got}) == 1


@packed
def test_ids_and_attributes_of_plain_values_travel_in_the_value_stream_with_each_text_once():
    batch = [rec[:record.IDS] + ({"rl.task.id": 3},) + rec[record.IDS + 1:record.ATTRIBUTES]
             + ({"rl.span.kind": "session", "rl.session.status": "accepted", "ok": True, "x": 0.5},)
             + rec[record.ATTRIBUTES + 1:] for rec in _sessions(20)]
    data = wire.dumps({}, batch)
    n, phases, values = (int.from_bytes(data[at:at + 4], "little") for at in (3, 7, 11))
    _, _, rests, _, texts = marshal.loads(data[15 + 64 * n + phases + values:])
    assert rests == []  # no record's fields left to marshal
    assert sorted(texts) == sorted({"rl.task.id", "rl.span.kind", "session", "rl.session.status", "accepted", "ok",
                                    "x"})
    assert _typed(wire.loads(data)[1]) == _typed(batch)


def test_attribute_keys_read_back_from_the_pipe_are_the_keys_modules_own_objects():
    # The names are interned on both sides, so the exporter's lookups match by identity.
    batch = [rec[:record.ATTRIBUTES] + ({keys.SPAN_KIND: keys.KIND_SESSION, keys.SESSION_ID: 1},)
             + rec[record.ATTRIBUTES + 1:] for rec in _scopes(2)]
    got = wire.loads(wire.dumps({}, batch))[1]
    assert [key is keys.SPAN_KIND for key in got[1][record.ATTRIBUTES]] == [True, False]
    assert list(got[1][record.ATTRIBUTES])[1] is keys.SESSION_ID
    assert got[0][record.ATTRIBUTES][keys.SPAN_KIND] is keys.KIND_SESSION


@packed
def test_a_batch_of_scopes_is_smaller_packed_than_marshalled():
    batch = _scopes(1000)
    data = wire.dumps({140_663_752_559_488: "MainThread"}, batch)
    assert len(data) < 0.7 * len(marshal.dumps(({140_663_752_559_488: "MainThread"}, batch)))
    assert wire.loads(data)[1] == batch


@packed
def test_a_record_with_an_id_out_of_range_sends_its_batch_as_marshal():
    batch = _scopes(3) + _scopes(1, trace_id=1 << 130)
    data = wire.dumps({1: "main"}, batch)
    assert data[:1] != b"\x00"
    assert marshal.loads(data) == ({1: "main"}, batch)
    assert wire.loads(data) == ({1: "main"}, batch)


@packed
def test_a_cut_batch_is_refused_with_a_value_error():
    data = wire.dumps({}, _scopes(3))
    with pytest.raises(ValueError, match="cut short"):
        wire.loads(data[:20])


def test_a_value_marshal_cannot_hold_raises_value_error_as_marshal_does():
    with pytest.raises(ValueError):
        wire.dumps({}, _scopes(1, args={"x": object()}))


def _surveyed(batch: list) -> tuple:
    """What the export thread's Python steps find in a batch (wire.survey without its twin)."""
    if not all(type(rec) is tuple for rec in batch):
        return False, 0, set()
    return True, record.span_count(batch), {rec[record.THREAD] for rec in batch}


@packed
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(records(fits=False), st.one_of(st.none(), st.integers(0, 3))), max_size=30), st.booleans())
def test_the_compiled_survey_of_a_batch_is_what_the_python_steps_find(drawn, with_other):
    batch = []
    for rec, phases in drawn:  # a session with that many bundled phases, or none
        if phases is not None:
            rec = rec[:record.BUNDLE] + (("s", tuple(range(phases))),) + rec[record.BUNDLE + 1:]
        batch.append(rec)
    if with_other:
        batch = [*batch, {"not": "a record"}]
    assert wire._native.survey(batch) == _surveyed(batch)


@packed
def test_a_survey_leaves_a_tuple_that_is_no_record_to_the_python_steps(monkeypatch):
    assert wire._native.survey([("short",)]) is None
    monkeypatch.setattr(wire, "_native", None)
    with pytest.raises(IndexError):
        wire.survey([("short",)])
