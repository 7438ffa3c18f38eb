"""Property-based tests over otel_rl's parsers and its misuse-prone API: nothing raises
into user code, rejections are counted, and what is written stays readable."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import math
import os
import tempfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import otel_rl
from otel_rl import ConfigError
from otel_rl import report
from otel_rl._internal import guard, keys
from otel_rl._internal import config as cfg
from otel_rl._internal.config import PARAMS, parse_bool, resolve
from otel_rl.convert import main as convert_main

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _fresh_counters():
    yield
    guard.clear()


# --- environment values for every setting of the registry -----------------------------------
env_text = st.one_of(st.text(max_size=12), st.integers(-10**6, 10**6).map(str),
                     st.sampled_from(["1", "0", "true", "False", "yes", "off", " 7 ", "3,4", "1.5", "-1",
                                      "65536", "", "nan", "0x10"]))


@FAST
@given(param=st.sampled_from(PARAMS), text=env_text)
def test_any_env_value_parses_or_is_rejected_naming_the_variable(param, text):
    assume("\x00" not in text)
    try:
        settings_ = resolve(None, None, {param.env: text})
    except ConfigError as exc:
        assert param.env in str(exc)
        return
    value = getattr(settings_, param.name)
    if param.parse is parse_bool:
        assert value is parse_bool(text)
    elif param.unit in ("ms", "spans", "sessions", "steps", "int", "port") and value is not None:
        assert all(v >= 0 for v in (value if isinstance(value, tuple) else (value,)))


def _good_value(param):
    """Valid environment text for ``param``, by the parser the registry gives it."""
    return {
        parse_bool: st.sampled_from(["1", "0", "true", "FALSE", "yes", "No", "on", "off", " on "]),
        cfg._port: st.integers(0, 65535).map(str),
        cfg._steps: st.lists(st.integers(0, 10**6), min_size=1, max_size=4).map(lambda v: ",".join(map(str, v))),
        cfg._positive_int: st.integers(1, 10**7).map(str),
        cfg._ranks: st.lists(st.integers(0, 4096), min_size=1, max_size=4).map(lambda v: ",".join(map(str, v))),
        cfg._layout: st.sampled_from(cfg.LAYOUTS),
        cfg._file_format: st.sampled_from(cfg.FILE_FORMATS),
        cfg._non_negative_int: st.integers(0, 10**7).map(str),
        cfg._timeout_ms: st.integers(1, 10**7).map(str),
        cfg._wait_ms: st.integers(0, 10**7).map(str),
        cfg._event_dirs: st.sampled_from(["", "*", "/data/profiles", os.pathsep.join(["/a", "/b"])]),
        cfg._str: st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=10),
        cfg._file_mode: st.integers(0o600, 0o777).filter(lambda v: v & 0o600 == 0o600).map(
            lambda v: st.sampled_from([oct(v)[2:], "0" + oct(v)[2:], oct(v)])).flatmap(lambda s: s),
    }[param.parse]


@FAST
@given(data=st.data(), param=st.sampled_from(PARAMS))
def test_good_env_values_of_every_setting_parse(data, param):
    text = data.draw(_good_value(param))
    value = getattr(resolve(None, None, {param.env: text}), param.name)
    if param.parse is parse_bool:
        assert value is parse_bool(text)
    elif param.parse is cfg._steps:
        assert value == tuple(int(v) for v in text.split(","))
    elif param.parse in (cfg._str, cfg._event_dirs):
        assert value == text
    elif param.parse is cfg._file_mode:
        assert value == int(text.removeprefix("0o"), 8)
    elif param.parse is cfg._ranks:
        assert value == frozenset(int(v) for v in text.split(","))
    elif param.parse in (cfg._layout, cfg._file_format):
        assert value == text
    else:
        assert value == int(text)


# --- W3C headers --------------------------------------------------------------------------------
hex_ = "0123456789abcdefABCDEF"
traceparent = st.one_of(
    st.text(max_size=60),
    st.builds(lambda v, t, s, f: f"{v}-{t}-{s}-{f}", st.text(hex_, min_size=0, max_size=3),
              st.text(hex_, min_size=30, max_size=33), st.text(hex_, min_size=15, max_size=17),
              st.text(hex_, min_size=1, max_size=3)))
baggage = st.one_of(st.text(max_size=80), st.lists(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from([*keys.BAGGAGE_KEYS, "x", "", "a b", "%"]),
              st.text(max_size=12)), max_size=5).map(",".join))


@FAST
@given(tp=traceparent, bag=baggage, state=st.text(max_size=40))
def test_extract_and_attach_never_raise_on_any_header(tp, bag, state):
    carrier = {"traceparent": tp, "baggage": bag, "tracestate": state}
    ctx = otel_rl.extract(carrier)
    assert ctx is not None
    with otel_rl.attach(carrier):
        otel_rl.get_task_id()
        otel_rl.get_session_id()


@SLOW
@given(headers=st.lists(st.tuples(st.sampled_from([b"traceparent", b"baggage", b"tracestate", b"x-any"]),
                                  st.binary(max_size=80)), max_size=6))
def test_the_asgi_middleware_serves_any_header_bytes(traced, headers):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/generate", "headers": headers,
             "query_string": b"", "scheme": "http"}
    asyncio.run(otel_rl.propagation.ASGIMiddleware(app)(scope, receive, send))
    assert sent[0]["status"] == 200


# --- session events in any order ------------------------------------------------------------------
methods = st.sampled_from(["mark_generate_start", "mark_generate_end", "mark_reward_start", "mark_reward_end",
                           "mark_finalized", "increment_counter", "mark_", "bogus", "mark_x_start"])
statuses = st.sampled_from(["accepted", "rejected", "failed", "dropped", "pending", "weird", None])
events = st.lists(st.tuples(methods, st.integers(0, 4), statuses, st.booleans()), max_size=30)


@pytest.mark.expect_diagnostics("unknown_session", "unknown_session_method", "unknown_status", "unknown_task")
@SLOW
@given(seq=events, n_sessions=st.integers(1, 4))
def test_session_events_in_any_order_never_raise_and_end_each_session_once(seq, n_sessions):
    with tempfile.TemporaryDirectory() as root:
        otel_rl.configure(fileroot=root, export_process=False, flush_threshold=1)
        task = otel_rl.register_task()
        sessions = [otel_rl.register_session(task) for _ in range(n_sessions)]
        for method, index, status, by_task in seq:
            sid = sessions[index] if index < n_sessions else 10**6 + index  # unknown ids too
            kwargs = {"status": status, "reason": "r"} if method == "mark_finalized" else {}
            if method == "mark_finalized" and by_task:
                otel_rl.trace_session_event(method, task_id=task, **kwargs)
            else:
                otel_rl.trace_session_event(method, session_id=sid, **kwargs)
        settings_ = otel_rl.settings()
        otel_rl.shutdown()
        with open(settings_.file_path(keys.SESSIONS_FILE)) as f:
            ids = [json.loads(line)["session_id"] for line in f]
        assert sorted(ids) == sorted(sessions)
        assert "internal_error" not in otel_rl.diagnostics()
        otel_rl.reset()


# --- payload values of every type --------------------------------------------------------------------
class Opaque:
    def __repr__(self):
        return "<opaque>"


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                    st.binary(max_size=20), st.just(Opaque()), st.just(math.nan), st.just(float("inf")),
                    st.complex_numbers(allow_nan=True), st.just(object()))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=6), inner, max_size=4),
    st.frozensets(st.integers(), max_size=3)), max_leaves=12)
args_st = st.dictionaries(st.text(max_size=10), values, max_size=5)


# otel_rl's export thread draws span ids from the random module's shared generator (as the
# SDK does) while Hypothesis draws the next example; Hypothesis takes that for the strategy
# using `random` and warns.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
def test_payload_values_of_every_type_never_raise_and_stay_readable(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), export_process=True)
    otel_rl.set_task_id(otel_rl.register_task())
    session = otel_rl.register_session()
    otel_rl.set_session_id(session)
    count = {"n": 0}

    @SLOW
    @given(args=args_st, payload=args_st)
    def record(args, payload):
        count["n"] += 1
        with otel_rl.trace_scope("payload", args=args):
            otel_rl.instant("mark", args=payload)
        with otel_rl.trace_session_phase("generate", start_payload=args, end_payload=payload):
            pass
        otel_rl.increment_counter("turns")

    record()
    otel_rl.trace_session_event("mark_finalized", status="accepted", **{"extra": Opaque()})
    settings_ = otel_rl.settings()
    otel_rl.shutdown()
    with open(settings_.file_path(keys.TRACES_FILE)) as f:
        events_ = [json.loads(line) for line in f]
    assert sum(1 for e in events_ if e.get("name") == "payload" and e["ph"] == "X") == count["n"]
    summary = otel_rl.run_summary()
    assert summary["spans"]["dropped"] == {} and "internal_error" not in summary["problems"]


# --- converter and report inputs ------------------------------------------------------------------
good_line = json.dumps({"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}).encode()
lines = st.lists(st.one_of(
    st.just(good_line), st.binary(max_size=60), st.text(max_size=40).map(str.encode),
    st.just(good_line[:17]), st.just(b"\xff\xfe" + good_line),
    st.just(b'{"ph": "X", "name": "' + b"x" * 300_000 + b'"}'),  # a huge line
    st.just(json.dumps({"ph": "X"}).encode()), st.just(b"[1, 2]"), st.just(b'{"traceEvents": 3}'),
    st.just(json.dumps({"task_id": 1, "session_id": "s", "status": None}).encode())), max_size=12)


@SLOW
@given(body=lines, name=st.sampled_from(["traces-r0.jsonl", "sessions-r0.jsonl", "other.json", "events_x_1.jsonl"]),
       newline_at_end=st.booleans())
def test_convert_and_report_never_raise_on_malformed_files(tmp_path, body, name, newline_at_end):
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    for old in run.iterdir():
        old.unlink()
    (run / name).write_bytes(b"\n".join(body) + (b"\n" if newline_at_end else b""))
    out = tmp_path / "out.json"
    assert convert_main([str(run), "-o", str(out), "-q"]) in (0, 1)
    if out.exists():
        json.loads(out.read_text())
    data = report.load(str(run))
    json.dumps(report.build(data), default=str)
    assert os.path.exists(run / name)


# --- report and convert over fields of any JSON type --------------------------------------------------
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6))
json_any = st.recursive(json_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=6)


def any_or(good):
    """Mostly a plausible value, often one of any JSON type (a container, a huge number...)."""
    return st.one_of(good, good, json_any)


ids = any_or(st.sampled_from(["a", "b", 1, 2, 0]))
times = any_or(st.floats(1.7e9, 1.7e9 + 100))
session_records = st.fixed_dictionaries({"session_id": ids, "task_id": ids}, optional={
    "rank": any_or(st.integers(0, 2)), "role": any_or(st.sampled_from(["rollout", None])),
    "submit_ts": times, "finalized_ts": times, "total_s": any_or(st.floats(0, 100)),
    "status": any_or(st.sampled_from(["accepted", "rejected", "failed"])), "reason": json_any,
    "step": any_or(st.integers(0, 3)), "span_id": ids, "trace_id": ids,
    "counters": any_or(st.dictionaries(st.sampled_from(["output_tokens", "turns"]), json_any, max_size=2)),
    "phases": any_or(st.dictionaries(st.sampled_from(["generate", "reward"]), any_or(st.lists(
        st.fixed_dictionaries({"start_ts": times}, optional={"end_ts": times}), max_size=2)), max_size=2))})
span_args = st.fixed_dictionaries({}, optional={
    "span_id": ids, "parent_span_id": ids, "trace_id": ids, keys.TASK_ID: ids, keys.SESSION_ID: ids,
    keys.STEP: any_or(st.integers(0, 3)), keys.REQUEST_ID: ids, keys.STAGE: json_any,
    keys.SPAN_KIND: any_or(st.sampled_from([keys.KIND_SESSION, keys.KIND_PHASE, "scope"])),
    keys.PHASE: json_any, keys.SESSION_STATUS: json_any, keys.SESSION_TOTAL_S: json_any,
    keys.CATEGORY: json_any, keys.GEN_AI_USAGE_OUTPUT_TOKENS: json_any, keys.GAUGE_VALUE: json_any})
chrome_events = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "i"]), "name": any_or(st.sampled_from(["op", "step"])),
    "pid": any_or(st.integers(1, 3)), "tid": any_or(st.integers(1, 3)),
    "ts": any_or(st.floats(1.7e15, 1.7e15 + 1e8)), "dur": any_or(st.floats(0, 1e6)), "args": any_or(span_args)})
request_events = st.fixed_dictionaries({
    "request_id": st.one_of(st.sampled_from(["r1", "r2", 7]), json_any.filter(lambda v: v not in (None, ""))),
    "stage": any_or(st.sampled_from(["prefill", "decode"])), "event_name": any_or(st.sampled_from(["a", "b"])),
    "timestamp_ns": any_or(st.integers(1.7e18, 1.7e18 + 10**11)), "run_id": json_any,
    "pid": any_or(st.integers(1, 3)), "metadata": json_any})


def otlp_value(value):
    """``value`` as an OTLP/JSON AnyValue (containers become arrays and key-value lists)."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [otlp_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": otlp_value(v)} for k, v in value.items()]}}
    return {}


def otlp_request(span):
    attrs = [{"key": k, "value": otlp_value(v)} for k, v in span["args"].items()] \
        if isinstance(span["args"], dict) else span["args"]
    resource = [{"key": keys.RANK, "value": otlp_value(span["pid"])},
                {"key": keys.ROLE, "value": otlp_value(span["tid"])}]
    return {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": [{
        "traceId": "1" * 32, "spanId": "2" * 16, "name": span["name"], "attributes": attrs,
        "startTimeUnixNano": str(int(1.7e18)), "endTimeUnixNano": str(int(1.7e18) + 1000)}]}]}]}


@SLOW
@given(records=st.lists(session_records, max_size=5), events_=st.lists(chrome_events, max_size=6),
       requests=st.lists(request_events, max_size=5), otlp_spans=st.lists(chrome_events, max_size=3))
def test_report_and_convert_read_fields_of_any_json_type_without_raising(tmp_path, records, events_, requests,
                                                                         otlp_spans):
    from rich.console import Console

    from otel_rl.report.cli import _dump_json

    run = tmp_path / "fields"
    run.mkdir(exist_ok=True)
    for old in run.iterdir():
        old.unlink()
    files = {"sessions-r0.jsonl": records, "traces-r0.jsonl": events_, "events_s_1.jsonl": requests,
             "otlp.jsonl": [otlp_request(s) for s in otlp_spans]}
    for name, items in files.items():
        if items:
            (run / name).write_bytes(b"".join(json.dumps(item).encode() + b"\n" for item in items))

    data = report.load(str(run))

    # Every line is read or reported (with its file and line), none is lost without a word.
    read = {os.path.basename(path): count for path, _, count in data.diagnostics.files}
    bad = {}
    for path, _, _ in data.diagnostics.malformed:
        bad[os.path.basename(path)] = bad.get(os.path.basename(path), 0) + 1
    for name, items in files.items():
        if items:
            assert read.get(name, 0) + bad.get(name, 0) == len(items), (name, data.diagnostics.messages())
    doc = report.build(data)
    report.render_table(doc, Console(file=io.StringIO(), width=160))
    json.loads(_dump_json(doc))
    out = tmp_path / "fields.json"
    assert convert_main([str(run), "-o", str(out), "-q"]) in (0, 1)
    if out.exists():
        json.loads(out.read_text())


@FAST
@given(body=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
       newline_at_end=st.booleans(), max_line=st.integers(1, 30), gz=st.booleans())
def test_lines_over_the_bound_are_reported_in_place_and_the_others_read_exactly(tmp_path, body, newline_at_end,
                                                                               max_line, gz):
    from otel_rl.convert import InputLimits, iter_lines

    data = b"\n".join(body) + (b"\n" if newline_at_end and body else b"")
    path = tmp_path / ("lines.jsonl.gz" if gz else "lines.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    skipped = []

    got = list(iter_lines(str(path), limits=InputLimits(max_line_bytes=max_line),
                          on_skip=lambda n, why: skipped.append((n, why.split(" bytes")[0]))))

    expected, expected_skips = [], []
    pieces = data.split(b"\n")
    last = len(pieces) - 1
    for index, line in enumerate(pieces):
        if index == last and not line:
            break
        if len(line) > max_line:
            expected_skips.append((index + 1, f"line of {len(line):,}"))
        else:
            expected.append((index + 1, line, index == last))
    assert got == expected and skipped == expected_skips
