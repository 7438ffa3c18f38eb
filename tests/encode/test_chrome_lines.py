"""The compiled line writer (``_chrome_lines.c``) gives the bytes of the Python encoder.

Two encoders take the same records: one with the compiled writer, one with the module
absent (the Python path: event dicts written by orjson); the batches they give the
trace file must be equal byte for byte, for ordinary spans and for hostile values.
"""

from __future__ import annotations

import itertools
import math
import random
import struct

import orjson
import pytest
from opentelemetry.sdk.resources import Resource

from otel_rl._internal import keys
from otel_rl._internal.encode import chrome_lines, chrome_trace
from otel_rl._internal.encode.chrome_trace import ChromeTraceEncoder
from otel_rl._internal.export import file_exporter

compiled = pytest.mark.skipif(chrome_lines.native is None, reason="built without a C compiler")

_RESOURCE = Resource.create({"service.name": "t", keys.RANK: 3, keys.ROLE: "actor"})

_FLOATS = [0.0, -0.0, 1.0, 0.1, 1e-4, 1e-5, 1e-7, 5e-324, 1e15, 1e16, 1.5e16, 1e20, 1e300,
           -2.5, 12345.678, math.nan, math.inf, -math.inf, 1 / 3, 2.0 ** 60]
_TEXTS = ["", "plain", 'quote " and \\ back', "\x00\x01\x1f\x7f\b\t\n\f\r", "é ü 漢字 \u2028 😀",
          "lone \ud800 surrogate", "/slash",
          # past eight bytes, where whole words are copied until one needs escaping
          "a name longer than eight bytes", 'eight ok"then a quote, then more', "0123456789abcdef\n",
          "01234567\\", "long ascii, then ü and a \x1f control after the first words"]
_INTS = [0, 1, -1, 7, (1 << 63) - 1, -(1 << 63), 1 << 63, (1 << 64) - 1, 1 << 64, -(1 << 63) - 1, 1 << 80,
         (1 << 30) - 1, 1 << 30, -(1 << 30), (1 << 60) - 1, 1 << 60, -(1 << 60) - 1, (1 << 90) - 1]


class _FloatKind(float):
    pass


def _value(rng: random.Random):
    pick = rng.randrange(10)
    if pick == 0:
        return rng.choice(_FLOATS)
    if pick == 1:
        return rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-12, 20)
    if pick == 2:
        return rng.choice(_TEXTS)
    if pick == 3:
        return rng.choice(_INTS)
    if pick == 4:
        return rng.choice([True, False, None])
    if pick == 5:
        return rng.choice([[1, 2.5, "x"], (True, None), [], b"\x00\xff", {"a": [1, "b"]}])
    if pick == 6:
        return rng.choice([_FloatKind(1.5), bytearray(b"ab"), ValueError("x")])
    return rng.randrange(1000)


def _attrs(rng: random.Random, thread: int) -> dict:
    attrs = {keys.THREAD_ID: thread, keys.THREAD_NAME: f"t{thread}"}
    for _ in range(rng.randrange(8)):
        if rng.random() < 0.05:  # a key the encoder sets itself: the Python encoder's
            name = rng.choice(["rank", "role", "trace_id", "status", "span.kind"])
        else:
            name = rng.choice(["step", "lr", "x", "ok", "big", 'we"ird', "é"])
        key = name if rng.random() < 0.3 else keys.ARGS_PREFIX + name
        attrs[key] = _value(rng)
    if rng.random() < 0.2:
        attrs[keys.CATEGORY] = rng.choice(["compute", "io", "", 'c"at'])
    if rng.random() < 0.05:
        attrs[keys.SPAN_KIND] = keys.KIND_INSTANT
    if rng.random() < 0.05:
        attrs[keys.GAUGE_VALUE] = _value(rng)
    return attrs


def _records(seed: int, count: int) -> list[tuple]:
    rng = random.Random(seed)
    out = []
    now = 1_732_563_442_123_456_789
    open_ids: list[int] = []
    for n in range(count):
        span_id = rng.getrandbits(64) or 1
        parent = rng.choice(open_ids) if open_ids and rng.random() < 0.5 else 0
        start = now + rng.randrange(-10_000, 10_000_000)
        end = start + rng.choice([0, 1, 999, 1000, 123_456_789, -5])
        now += rng.randrange(1, 2_000_000)
        name = rng.choice(["step", "gen", 'na"me', "ünï", ""] * 10 + ["lone \udc80"])
        rec = (name, rng.choice([1, 2, (1 << 128) - 1]), span_id, parent, rng.random() < 0.1, 0, None,
               start, end, rng.choice([0, 0, 0, 1, 2, 3]), None, None, None, None, None, None,
               rng.choice([None] * 20 + [[(5, 6)]]), rng.choice([0, 0, 1, 2]),
               rng.choice([None, "", "bad \"thing\""] * 5 + ["\ud800"]), None, None)
        out.append((rec, _attrs(rng, rng.choice([1, 2]))))
        open_ids = (open_ids + [span_id])[-8:]
        if n % 7 == 0:
            out.append((rec, {}))  # no attributes at all
    return out


def _file_bytes(monkeypatch, records: list[tuple], batch: int) -> bytes:
    monkeypatch.setattr(chrome_trace, "_encoder_numbers", itertools.count(1))  # the same tids in both
    encoder = ChromeTraceEncoder()
    encoder.set_resource(_RESOURCE)
    data = bytearray()
    for i in range(0, len(records), batch):
        events = encoder.encode(records[i:i + batch])
        if events:
            data += file_exporter._batch(events)
    events = encoder.finish()
    if events:
        data += file_exporter._batch(events)
    return bytes(data)


def _python_bytes(monkeypatch, records: list[tuple], batch: int) -> bytes:
    with monkeypatch.context() as patch:
        patch.setattr(chrome_lines, "native", None)
        return _file_bytes(patch, records, batch)


@compiled
@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_lines_are_the_python_encoders_bytes(monkeypatch, seed):
    records = _records(seed, 600)
    native = _file_bytes(monkeypatch, records, 97)
    assert native == _python_bytes(monkeypatch, records, 97)
    assert native.count(b"\n") > 600
    encoder = ChromeTraceEncoder()
    encoder.set_resource(_RESOURCE)
    written = sum(type(event) is bytes for event in encoder.encode(records))
    assert written > len(records) // 3  # most spans took the compiled writer, the rest the dicts


@compiled
def test_the_compiled_writer_writes_most_complete_events_itself():
    encoder = ChromeTraceEncoder()
    encoder.set_resource(_RESOURCE)
    rec = ("step", 7, 9, 0, False, 0, None, 1_000_000, 3_500_000, 0, None, None, None, None, None, None,
           None, 0, None, None, None)
    events = encoder.encode([(rec, {keys.THREAD_ID: 1, keys.ARGS_PREFIX + "lr": 1e-4})])
    lines = [event for event in events if type(event) is bytes]
    assert len(lines) == 1
    head, _, tail = lines[0].partition(b',"pid":')
    assert head == b'{"ph":"X","name":"step","ts":1000.0,"dur":2500.0'
    assert tail.endswith(b',"args":{"lr":0.0001,"trace":"0000000000000007","id":"0000000000000009"}}')


@compiled
def test_more_distinct_keys_than_the_compiled_key_cache_holds_write_the_same_bytes(monkeypatch):
    # The compiled writer keeps each attribute key's args text (512 slots, at most 8
    # probes a key); keys beyond that, or a key written before under other names, take
    # the uncached way and must write the same bytes.
    rng = random.Random(7)
    odd = ["lone \udc80 key", "span.kind", keys.ARGS_PREFIX + "status", 'q"uote', "trace"]
    records = []
    for n, (rec, attrs) in enumerate(_records(3, 700)):
        extra = {f"k{rng.randrange(3000)}": rng.randrange(100) for _ in range(4)}
        if n % 50 == 0:
            extra[rng.choice(odd)] = n
        records.append((rec, {**attrs, **extra}))
    native = _file_bytes(monkeypatch, records, 64)
    assert native == _python_bytes(monkeypatch, records, 64)
    assert native.count(b'"k') > 2000


def test_without_the_compiled_module_the_encoder_builds_dicts(monkeypatch):
    monkeypatch.setattr(chrome_lines, "native", None)
    records = _records(1, 200)
    encoder = ChromeTraceEncoder()
    encoder.set_resource(_RESOURCE)
    events = encoder.encode(records) + encoder.finish()
    assert events and all(type(event) is dict for event in events)
    body = file_exporter._batch(events)
    assert body.count(b"\n") == len(events) + 1


def test_the_python_join_reads_lines_and_dicts_alike(monkeypatch):
    monkeypatch.setattr(chrome_lines, "native", None)
    line = b'{"ph":"X","name":",\\"pid\\":9","cat":"span","ts":1.0,"dur":0.0,"pid":-42,"tid":5,"args":{}}'
    body, lines, pids = chrome_lines.join([line, {"ph": "M", "pid": 7}], file_exporter._dumps)
    assert (bytes(body), lines, pids) == (line + b'\n{"ph":"M","pid":7}\n', 2, {-42, 7})


@compiled
def test_the_compiled_join_is_the_python_join(monkeypatch):
    line = b'{"ph":"X","name":",\\"pid\\":9","cat":"span","ts":1.0,"dur":0.0,"pid":-42,"tid":5,"args":{}}'
    other = line.replace(b'"pid":-42', b'"pid":8')
    events = [line, {"ph": "M", "pid": 7}, {"ph": "C", "pid": True}, {"ph": "i", "name": "\ud800", "pid": 3},
              line, other, other, line, b'{"ph":"X","name":"no pid here"}']
    native = chrome_lines.join(events, file_exporter._dumps)
    assert native[2] == {-42, 7, 8, 3}
    monkeypatch.setattr(chrome_lines, "native", None)
    assert chrome_lines.join(events, file_exporter._dumps) == native


def test_an_exact_encoder_never_gets_lines():
    encoder = ChromeTraceEncoder(exact=True)
    encoder.set_resource(_RESOURCE)
    events = encoder.encode(_records(2, 50))
    assert all(type(event) is dict for event in events)


@compiled
@pytest.mark.parametrize("seed", range(3))
def test_floats_are_written_as_orjson_writes_them(seed):
    # The compiled writer finds repr's shortest digits itself in [1e-20, 1e16) (fixed down
    # to 1e-5, an exponent below, as orjson writes them) and asks Python elsewhere;
    # timestamps (integer nanoseconds / 1000) and durations in seconds are the common case.
    rng = random.Random(seed)
    values = [1e-3, 1e16, 9.999999999999998e15, 2.0 ** 52, 2.0 ** 52 + 1, 2.0 ** 53 + 2, 0.5, 0.1, 2 / 3,
              1_732_563_442_123_456.75, 1_732_563_442_123_456.25, -1.5, -0.001, 0.0, -0.0, *_FLOATS,
              1e-5, 1.5e-5, -1.5e-5, 9.99e-5, 9.999999e-6, 9.257e-6, 1e-7, 1e-20, 9.99e-21, 2.0 ** -60,
              1.2345678901234567e-6, 5e-324, 1e16, 1.2345e17, -1e300]
    for _ in range(40_000):
        pick = rng.randrange(7)
        if pick == 0:
            values.append(rng.randrange(10**18, 2 * 10**18) / 1000)
        elif pick == 1:
            values.append(rng.randrange(0, 10**12) / 1000)
        elif pick == 2:
            values.append(struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0])
        elif pick == 3:
            values.append(rng.randrange(2**40, 2**53) / 2 ** rng.randint(0, 12))
        elif pick == 4:
            values.append(rng.randrange(1, 10 ** rng.randint(1, 17)) / 10 ** rng.randint(0, 19))
        elif pick == 5:
            values.append(rng.choice([1, -1]) * 2.0 ** rng.randint(-20, 60))
        else:  # short durations in seconds, integer nanoseconds / 1e9: 6.41e-6, 0.000102853
            values.append(rng.randrange(1, 10 ** rng.randint(1, 7)) / 1e9)
    wrong = [x for x in values if chrome_lines.native.float_text(x) != orjson.dumps(x)]
    assert wrong == []


@compiled
@pytest.mark.parametrize("scale", [1, 3, 6, 9])
def test_integer_quotients_are_written_with_the_digits_repr_finds(scale):
    # Durations are integer nanoseconds over 10**3 (µs in the trace) or 10**9 (seconds in the
    # session record): below a bound the quotient's digits are the integer's, trailing zeros
    # dropped, and the writer takes them without searching; past the bound it declines.
    rng = random.Random(scale)
    divisor = 10 ** scale
    values = [1, -1, 7, 10, 100 * divisor, divisor - 1, (1 << 53) - 1, -(1 << 53) + 1, 1 << 53, 12_345_678]
    for _ in range(40_000):
        pick = rng.randrange(4)
        if pick == 0:
            values.append(rng.randrange(1, 10 ** rng.randint(1, 16)))
        elif pick == 1:
            values.append(-rng.randrange(1, 10 ** rng.randint(1, 12)))
        elif pick == 2:
            values.append(rng.randrange(1, 10_000) * 10 ** rng.randint(0, 12))
        else:
            values.append((1 << rng.randint(10, 60)) + rng.randrange(-5, 6))
    written = {v: chrome_lines.native.scaled_text(v, scale) for v in values}
    wrong = [v for v, text in written.items() if text is not None and text != orjson.dumps(v / divisor)]
    assert wrong == []
    assert sum(text is not None for text in written.values()) > len(written) // 2
    assert written[1 << 53] is None  # (double)v would round first


@compiled
@pytest.mark.parametrize("seed", range(3))
def test_the_compiled_checksum_is_zlibs_crc32_at_every_length_offset_and_start(seed):
    import zlib

    rng = random.Random(seed)
    data = rng.randbytes(300_000)
    lengths = list(range(0, 200)) + [rng.randrange(200, len(data) // 2) for _ in range(100)]
    for length in lengths:
        at = rng.randrange(0, len(data) - length)
        piece = memoryview(data)[at:at + length]
        start = rng.choice([0, rng.getrandbits(32)])
        assert chrome_lines.native.crc32(piece, start) == zlib.crc32(piece, start), (length, at)
