"""The compiled session-facts loop reads every line as the Python loop (orjson) reads it.

The compiled loop reads a record line itself when it is the plain case and hands any other
to ``orjson.loads``; the facts must be the same to the last digit whatever the line's text:
spacing, key order, escapes, non-ASCII text, repeated keys, numbers in any JSON spelling.
"""

from __future__ import annotations

import marshal
import random
import struct

import pytest
from test_report_columns import _exported

from otel_rl._internal.read import session_facts
from otel_rl._internal.read import sessions as session_reader

pytestmark = pytest.mark.skipif(session_facts._native is None, reason="otel_rl was built without a C compiler")


def _gathered(lines: list[bytes], native, monkeypatch) -> tuple:
    monkeypatch.setattr(session_facts, "_native", native)
    builder = session_facts.FactsBuilder(cold="candidates")
    ints: dict[int, int] = {}
    taken = builder.add_lines(lines, lambda rec: session_reader._careful(rec, ints), session_reader.response_length,
                              counter_names=session_reader.RESPONSE_LENGTH_COUNTERS)
    return taken, marshal.loads(marshal.dumps(builder.result())) if taken else None


def _same(lines: list[bytes], monkeypatch) -> bool:
    compiled = _gathered(lines, session_facts._native, monkeypatch)
    python = _gathered(lines, None, monkeypatch)
    assert compiled == python
    return compiled[0]


# Each turns one line's text into another spelling (or another meaning) of a record.
TEXT_CHANGES = {
    "spaced": lambda t: t.replace(b",", b" ,\t").replace(b":", b" : ").replace(b"{", b"{ \r\n"),
    "escaped role": lambda t: t.replace(b'"rollout"', b'"roll\\u006fut"'),
    "non-ascii status": lambda t: t.replace(b'"status":"', '"status":"é'.encode()),
    "escaped key": lambda t: t.replace(b'"phases"', b'"phas\\u0065s"'),
    "field twice": lambda t: t[:-1] + b',"status":"rejected"}',
    "counter twice": lambda t: t.replace(b'"counters":{', b'"counters":{"output_tokens":5,'),
    "unknown fields": lambda t: t[:-1] + b',"extra":[1,{"a":[true,false,null]},"x",-2.5e-3],"more":{}}',
    "exponent time": lambda t: t.replace(b'"submit_ts":1', b'"submit_ts":0.1E1', 1),
    "int counter": lambda t: t.replace(b'"counters":{', b'"counters":{"response_length":12,'),
    "float counter": lambda t: t.replace(b'"counters":{', b'"counters":{"response_tokens":1.5e2,'),
    "huge counter": lambda t: t.replace(b'"counters":{', b'"counters":{"response_length":12345678901234567890,'),
    "bool counter": lambda t: t.replace(b'"counters":{', b'"counters":{"response_length":true,'),
    "null counters": lambda t: t.replace(b'"counters":{', b'"counters":null,"c":{'),
    "phase twice": lambda t: t.replace(b'"phases":{', b'"phases":{"reward":[],'),
    "extra phase key": lambda t: t.replace(b'"end_ts":', b'"note":"x","end_ts":', 1),
    "leading zero": lambda t: t.replace(b'"session_id":', b'"session_id":0', 1),
    "trailing garbage": lambda t: t + b" x",
    "trailing space": lambda t: t + b" \r",
    "cut short": lambda t: t[: len(t) // 2],
    "not an object": lambda t: b"[" + t + b"]",
    "global step": lambda t: t.replace(b'"step":', b'"global_step":4,"step":null,"was":', 1),
    "string reason": lambda t: t.replace(b'"reason":null', b'"reason":"timeout"'),
    "object reason": lambda t: t.replace(b'"reason":null', b'"reason":{"why":["a"]}'),
    "negative zero": lambda t: t.replace(b'"total_s":', b'"total_s":-0.0,"was":', 1),
    "deep value": lambda t: t[:-1] + b',"deep":' + b"[" * 40 + b"]" * 40 + b"}",
}


@pytest.mark.parametrize("change", sorted(TEXT_CHANGES))
def test_a_line_reads_the_same_whichever_loop_reads_it(change, monkeypatch):
    lines = _exported(0, 200, 3)
    assert b'"reason":null' in lines[0] and b'"counters":{' in lines[0]
    rng = random.Random(change)
    for i in rng.sample(range(len(lines)), 20):
        changed = TEXT_CHANGES[change](lines[i])
        assert changed != lines[i]  # the change found what it changes
        lines[i] = changed
    _same(lines, monkeypatch)


def test_every_line_as_the_exporter_writes_it_is_taken(monkeypatch):
    assert _same(_exported(1, 500, 4), monkeypatch)


def test_json_numbers_read_as_python_reads_them():
    # Correctly rounded floats (every double's shortest spelling, random decimals of up to 18
    # digits with exponents), ints exactly; what is not a JSON number, or too long, is left to orjson.
    scan = session_facts._native.scan_float
    rng = random.Random(7)
    texts = []
    for _ in range(60_000):
        x = struct.unpack("d", struct.pack("Q", rng.getrandbits(63)))[0]
        if x == x and x != float("inf"):
            texts.append(repr(x))
        digits = str(rng.randrange(1, 10**rng.randint(1, 17)))
        cut = rng.randint(1, len(digits))
        texts.append(f"{'-' if rng.random() < 0.5 else ''}{digits[:cut]}.{digits[cut:] or '0'}e{rng.randint(-40, 40)}")
        texts.append(repr(rng.uniform(1.7e9, 1.9e9)))
    for text in texts:
        value = scan(text.encode())
        assert value is not None and struct.pack("d", value) == struct.pack("d", float(text)), text
    assert scan(b"123456789012345678") == 123456789012345678 and scan(b"-0") == 0
    for other in (b"01", b"1.", b".5", b"-", b"1e", b"+1", b"1e+", b"0x10", b"1234567890123456789", b"NaN"):
        assert scan(other) is None, other


def test_the_compiled_correlation_is_the_python_one_to_the_last_digit(monkeypatch):
    from otel_rl.report import longtail

    rng = random.Random(5)
    answers = []
    for trial in range(200):
        n = rng.randint(3, 2000)
        xs = [rng.choice((rng.random() * 1e3, float(rng.randint(0, 900)), rng.lognormvariate(0, 3))) for _ in range(n)]
        ys = [1.0] * n if trial % 7 == 0 else [x * rng.random() + rng.gauss(0, 1e-3 if trial % 3 else 1e6) for x in xs]
        compiled = session_facts._native.pearson(xs, ys)
        monkeypatch.setattr(longtail, "facts_native", None)
        assert compiled == longtail._pearson(xs, ys)
        monkeypatch.undo()
        answers.append(compiled)
    assert None in answers and len({type(a) for a in answers}) == 2  # constant durations: no correlation


def test_the_compiled_peak_concurrency_counts_a_finalization_at_a_submission_instant_first():
    from array import array

    rng = random.Random(9)
    for _ in range(200):
        spans = [(s := rng.choice((rng.random() * 100, float(rng.randint(0, 20)))), s + rng.choice((0.0, rng.random() * 10)))
                 for _ in range(rng.randint(1, 300))]
        starts, ends = sorted(s for s, _ in spans), sorted(e for _, e in spans)
        running = peak = j = 0
        for s in starts:
            while j < len(ends) and ends[j] <= s:
                running, j = running - 1, j + 1
            running += 1
            peak = max(peak, running)
        assert session_facts._native.peak_concurrency(array("d", starts), array("d", ends)) == peak
