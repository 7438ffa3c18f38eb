"""Security and privacy: content capture off by default, the attribute value length
limit, the redaction hook, secrets kept out of logs and files, owner-only files,
incoming baggage limited, OTLP over TLS. Every check reads back what was written
(trace files, events files, a real OTLP receiver)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import httpx
import pytest
from opentelemetry import baggage
from receivers import GrpcReceiver, _MetricsServicer, _TraceServicer
from support import clean_env, export_to, read_sessions, read_trace, run_python, scrub_environ

import otel_rl
from otel_rl import events
from otel_rl._internal import files, guard, payload
from otel_rl._internal.recording import privacy
from otel_rl._internal.config import resolve
from otel_rl.propagation import ASGIMiddleware, extract

SECRET_PROMPT = "tell me the launch codes"


@pytest.fixture(autouse=True)
def _clean_policy():
    guard.clear()
    yield
    privacy.set_redactor(None)
    privacy.configure(resolve(None, None, {}))
    files.set_mode(files.DEFAULT_FILE_MODE)
    guard.clear()


def _export_to(monkeypatch, receiver):
    export_to(monkeypatch, receiver)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")


def _files(root, pattern):
    return glob.glob(os.path.join(str(root), "**", pattern), recursive=True)


def _trace_events(root, name):
    """The Chrome trace events called ``name`` in every traces file under ``root``."""
    return [e for path in _files(root, "traces-*.jsonl") for e in read_trace(path) if e.get("name") == name]


def _session_records(root):
    """Every session record in every sessions file under ``root``."""
    return [r for path in _files(root, "sessions-*.jsonl") for r in read_sessions(path)]


def _record_scope(tmp_path, args, **settings):
    otel_rl.configure(fileroot=str(tmp_path), **settings)
    with otel_rl.trace_scope("gen", args=args):
        pass
    otel_rl.shutdown()
    (event,) = _trace_events(tmp_path, "gen")
    return event["args"]


# --- content capture ---------------------------------------------------------------------------
def test_prompt_text_in_args_is_redacted_by_default_in_the_trace_file(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    args = _record_scope(tmp_path, {"prompt": SECRET_PROMPT, "n": 3})
    assert args["prompt"] == f"<redacted: {len(SECRET_PROMPT)} chars>"
    assert args["n"] == 3
    with open(glob.glob(str(tmp_path / "**" / "traces-*.jsonl"), recursive=True)[0]) as f:
        assert SECRET_PROMPT not in f.read()


def test_token_ids_nested_completions_and_message_lists_are_redacted(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    args = _record_scope(tmp_path, {"input_ids": [5, 6, 7], "sample": {"completion": "abcd", "reward": 1.0},
                                    "messages": [{"role": "user", "content": SECRET_PROMPT}]})
    assert args["input_ids"] == "<redacted: 3 items>"
    assert args["sample.completion"] == "<redacted: 4 chars>"
    assert args["sample.reward"] == 1.0
    assert args["messages"].startswith("<redacted: ")


def test_gen_ai_content_attributes_are_redacted_but_usage_stays(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    otel_rl.configure(fileroot=str(tmp_path))
    with otel_rl.trace_scope("gen") as span:
        span.set_attribute("gen_ai.input.messages", SECRET_PROMPT)
        span.set_attribute("gen_ai.usage.input_tokens", 12)
    otel_rl.shutdown()
    (event,) = _trace_events(tmp_path, "gen")
    assert event["args"]["gen_ai.input.messages"] == f"<redacted: {len(SECRET_PROMPT)} chars>"
    assert event["args"]["gen_ai.usage.input_tokens"] == 12


def test_phase_payloads_are_redacted_on_the_phase_span(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    otel_rl.configure(fileroot=str(tmp_path))
    task = otel_rl.register_task()
    sid = otel_rl.register_session(task)
    otel_rl.trace_session_event("mark_generate_start", sid, prompt=SECRET_PROMPT)
    otel_rl.trace_session_event("mark_generate_end", sid, completion="the answer", output_tokens=2)
    otel_rl.trace_session_event("mark_finalized", sid)
    otel_rl.shutdown()
    assert [r["status"] for r in _session_records(tmp_path)] == ["accepted"]
    (phase,) = _trace_events(tmp_path, "generate")
    assert phase["args"]["prompt"] == f"<redacted: {len(SECRET_PROMPT)} chars>"
    assert phase["args"]["completion"] == "<redacted: 10 chars>"
    assert phase["args"]["output_tokens"] == 2


def test_request_event_metadata_is_redacted_in_the_events_file_and_on_the_span(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    otel_rl.configure(fileroot=str(tmp_path))
    events.start(event_dir=str(tmp_path / "ev"))
    with otel_rl.trace_scope("request"):
        events.emit("scheduler_admit", request_id="r1", stage="s", prompt=SECRET_PROMPT, batch_size=4)
    events.stop()
    otel_rl.shutdown()
    (path,) = glob.glob(str(tmp_path / "ev" / "*.jsonl"))
    with open(path) as f:
        (line,) = [json.loads(x) for x in f]
    assert line["metadata"] == {"prompt": f"<redacted: {len(SECRET_PROMPT)} chars>", "batch_size": 4}
    with open(glob.glob(str(tmp_path / "**" / "traces-*.jsonl"), recursive=True)[0]) as f:
        assert SECRET_PROMPT not in f.read()


def test_capture_content_on_records_the_text(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    monkeypatch.setenv("OTEL_RL_CAPTURE_CONTENT", "true")
    args = _record_scope(tmp_path, {"prompt": SECRET_PROMPT})
    assert args["prompt"] == SECRET_PROMPT


def test_the_genai_switch_decides_when_otel_rl_capture_is_unset():
    genai = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    assert resolve(None, None, {}).capture_content is False
    assert resolve(None, None, {genai: "SPAN_AND_EVENT"}).capture_content is True
    assert resolve(None, None, {genai: "NO_CONTENT"}).capture_content is False
    assert resolve(None, None, {genai: "true", "OTEL_RL_CAPTURE_CONTENT": "0"}).capture_content is False
    with pytest.raises(otel_rl.ConfigError, match=genai):
        resolve(None, None, {genai: "sometimes"})


def test_content_reaches_the_otlp_receiver_redacted(tmp_path, monkeypatch, grpc_receiver):
    scrub_environ(monkeypatch)
    _export_to(monkeypatch, grpc_receiver)
    _record_scope(tmp_path, {"prompt": SECRET_PROMPT})
    (span,) = [s for s in grpc_receiver.wait_for_spans(1) if s["name"] == "gen"]
    assert span["attributes"]["rl.args.prompt"] == f"<redacted: {len(SECRET_PROMPT)} chars>"


# --- redaction by shape: chat messages and content fields wherever they are ----------------------
CHAT = [{"role": "system", "content": "you are terse"}, {"role": "user", "content": SECRET_PROMPT}]


def _all_run_text(root):
    text = ""
    for path in glob.glob(os.path.join(str(root), "**", "*.jsonl"), recursive=True):
        with open(path) as f:
            text += f.read()
    return text


@pytest.mark.parametrize("key", ["conversation", "chat", "history", "turns"])
def test_a_message_list_under_any_key_is_redacted_in_the_trace_file(tmp_path, monkeypatch, key):
    scrub_environ(monkeypatch)
    args = _record_scope(tmp_path, {key: CHAT, "n": 3})
    assert SECRET_PROMPT not in _all_run_text(tmp_path)
    assert "you are terse" not in _all_run_text(tmp_path)
    assert "<redacted: " in args[key] and "'role': 'user'" in args[key], args[key]
    assert args["n"] == 3


@pytest.mark.parametrize("payload", [
    {"a": {"b": {"c": {"d": {"e": {"content": SECRET_PROMPT}}}}}},
    {"items": [{"id": 1, "text": SECRET_PROMPT}]},
    {"batch": [[{"role": "user", "parts": [{"text": SECRET_PROMPT}]}]]},
    {"sample": {"turns": ({"role": "assistant", "tool_calls": [{"arguments": SECRET_PROMPT}]},)}},
])
def test_content_fields_at_any_depth_are_redacted(tmp_path, monkeypatch, payload):
    scrub_environ(monkeypatch)
    _record_scope(tmp_path, payload)
    text = _all_run_text(tmp_path)
    assert "<redacted: " in text
    assert SECRET_PROMPT not in text


def test_shape_redaction_keeps_numbers_and_leaves_the_callers_payload_alone(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    chat = [dict(m) for m in CHAT]
    args = _record_scope(tmp_path, {"scores": [{"reward": 1.5, "label": "ok"}], "chat": chat})
    assert args["scores"] == str([{"reward": 1.5, "label": "ok"}])
    assert chat == CHAT  # redacted copies; the user's objects are untouched


def test_a_message_list_in_request_event_metadata_is_redacted_in_the_events_file(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    otel_rl.configure(fileroot=str(tmp_path))
    events.start(event_dir=str(tmp_path / "ev"))
    with otel_rl.trace_scope("request"):
        events.emit("scheduler_admit", request_id="r1", stage="s", conversation=CHAT, batch_size=4)
    events.stop()
    otel_rl.shutdown()
    (path,) = glob.glob(str(tmp_path / "ev" / "*.jsonl"))
    with open(path) as f:
        (line,) = [json.loads(x) for x in f]
    assert line["metadata"]["batch_size"] == 4
    assert [m["role"] for m in line["metadata"]["conversation"]] == ["system", "user"]
    assert SECRET_PROMPT not in _all_run_text(tmp_path)


def test_a_message_list_in_a_phase_payload_is_redacted(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    otel_rl.configure(fileroot=str(tmp_path))
    sid = otel_rl.register_session(otel_rl.register_task())
    otel_rl.trace_session_event("mark_generate_start", sid, history=CHAT)
    otel_rl.trace_session_event("mark_generate_end", sid)
    otel_rl.trace_session_event("mark_finalized", sid)
    otel_rl.shutdown()
    (phase,) = _trace_events(tmp_path, "generate")
    assert "<redacted: " in phase["args"]["history"]
    assert SECRET_PROMPT not in _all_run_text(tmp_path)


def test_a_message_list_reaches_the_otlp_receiver_redacted(tmp_path, monkeypatch, grpc_receiver):
    scrub_environ(monkeypatch)
    _export_to(monkeypatch, grpc_receiver)
    _record_scope(tmp_path, {"conversation": CHAT})
    (span,) = [s for s in grpc_receiver.wait_for_spans(1) if s["name"] == "gen"]
    assert SECRET_PROMPT not in json.dumps(span)
    assert "<redacted: " in span["attributes"]["rl.args.conversation"]


def test_capture_content_on_keeps_message_lists(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    monkeypatch.setenv("OTEL_RL_CAPTURE_CONTENT", "true")
    args = _record_scope(tmp_path, {"conversation": CHAT})
    assert args["conversation"] == str(CHAT)


# --- attribute value length limit ----------------------------------------------------------------
def test_the_standard_length_limit_cuts_strings_in_the_file_and_over_otlp(tmp_path, monkeypatch,
                                                                        grpc_receiver):
    scrub_environ(monkeypatch)
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "16")
    _export_to(monkeypatch, grpc_receiver)
    args = _record_scope(tmp_path, {"note": "x" * 100, "tags": ["y" * 40, "z"]})
    assert args["note"] == "x" * 16
    assert all(len(tag) <= 16 for tag in args["tags"])
    (span,) = [s for s in grpc_receiver.wait_for_spans(1) if s["name"] == "gen"]
    assert span["attributes"]["rl.args.note"] == "x" * 16


def test_the_span_specific_limit_wins_over_the_general_one(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "16")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "8")
    assert _record_scope(tmp_path, {"note": "x" * 100})["note"] == "x" * 8


def test_without_a_limit_strings_are_cut_at_4096(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    assert _record_scope(tmp_path, {"note": "x" * 5000})["note"] == "x" * 4096


# --- redaction hook ----------------------------------------------------------------------------
def test_the_redactor_rewrites_payload_values_before_export(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    seen = []

    def redact(key, value):
        seen.append(key)
        return "***" if key == "rl.args.user.email" else value

    otel_rl.set_redactor(redact)
    args = _record_scope(tmp_path, {"user": {"email": "a@b.c", "id": 7}, "n": 1})
    assert args["user.email"] == "***"
    assert (args["user.id"], args["n"]) == (7, 1)
    assert set(seen) == {"rl.args.user.email", "rl.args.user.id", "rl.args.n"}


def test_a_value_the_redactor_maps_to_none_is_dropped(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    otel_rl.set_redactor(lambda key, value: None if key == "rl.args.token" else value)
    args = _record_scope(tmp_path, {"token": "hunter2", "n": 1})
    assert "token" not in args and args["n"] == 1


def test_a_redactor_that_raises_drops_the_value_and_is_counted(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)

    def broken(key, value):
        if key == "rl.args.bad":
            raise ValueError(f"cannot handle {value}")
        return value

    otel_rl.set_redactor(broken)
    args = _record_scope(tmp_path, {"bad": "sensitive-value", "good": 2})
    assert "bad" not in args and args["good"] == 2
    assert otel_rl.run_summary()["problems"]["redactor_error"] == 1


def test_the_redactor_runs_on_request_event_metadata(tmp_path):
    otel_rl.set_redactor(lambda key, value: "<hidden>" if key == "rl.args.user" else value)
    events.start(event_dir=str(tmp_path))
    events.emit("admit", request_id="r", stage="s", user="alice")
    events.stop()
    (path,) = glob.glob(str(tmp_path / "*.jsonl"))
    with open(path) as f:
        assert json.loads(f.readline())["metadata"] == {"user": "<hidden>"}


def test_set_redactor_rejects_a_non_callable():
    with pytest.raises(TypeError):
        otel_rl.set_redactor("not a function")


# --- secrets -------------------------------------------------------------------------------------
SECRET_SCRIPT = """
import json, logging, os, otel_rl
from otel_rl._internal.state import STATE
logging.basicConfig(level=logging.DEBUG)
otel_rl.configure(control_port=0)
for i in range(5):
    with otel_rl.trace_scope("x", args={"i": i}):
        pass
otel_rl.stats.scalar(loss=1.0)
otel_rl.stats.export(step=1)
otel_rl.save(force=True)
proc = STATE.pipeline.shipper._proc
with open(f"/proc/{proc.pid}/environ", "rb") as f:
    child = dict(item.split(b"=", 1) for item in f.read().split(b"\\0") if b"=" in item)
print("CHILD_CONFIG", child[b"OTEL_RL_EXPORTER_CONFIG"].decode())
print("CHILD_HAS_TOKEN", b"OTEL_RL_CONTROL_TOKEN" in child)
print("SETTINGS", repr(otel_rl.settings()))
otel_rl.shutdown()
"""


def test_otlp_headers_and_the_control_token_never_reach_logs_files_or_the_exporter_config(
        tmp_path, http_receiver):
    if not os.path.exists("/proc/self/environ"):
        pytest.skip("reads the exporter process's environment from /proc")
    env = clean_env({
        "OTEL_RL_DIR": str(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=SECRETHEADER1",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "authorization=Bearer%20SECRETHEADER2",
        "OTEL_RL_CONTROL_TOKEN": "SECRETTOKEN3",
        # Warnings that log environment values: none of them may carry a secret.
        "OTEL_EXPORTER_OTLP_TIMEOUT": "5", "OTEL_EXPORTER_OTLP_COMPRESSION": "brotli",
    })
    result = subprocess.run([sys.executable, "-c", SECRET_SCRIPT], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    http_receiver.wait_for_spans(5)
    # The headers were sent (so they were in use) ...
    assert any(h.get("authorization") == "Bearer SECRETHEADER2" for h in http_receiver.headers_seen)
    secrets = ("SECRETHEADER1", "SECRETHEADER2", "SECRETTOKEN3")
    # ... and appear in no output, no run file, and not in the exporter's config.
    output = result.stdout + result.stderr
    assert "CHILD_CONFIG" in output and "DEBUG" in output
    for secret in secrets:
        assert secret not in output, secret
    written = [p for p in glob.glob(str(tmp_path / "**" / "*"), recursive=True) if os.path.isfile(p)]
    assert any(os.path.basename(p).startswith("summary-") for p in written)
    assert any(os.path.basename(p).startswith("traces-") for p in written)
    for path in written:
        with open(path, "rb") as f:
            data = f.read()
        for secret in secrets:
            assert secret.encode() not in data, (path, secret)
    assert "CHILD_HAS_TOKEN False" in result.stdout


# --- file permissions ------------------------------------------------------------------------------
def _run_everything(tmp_path):
    """A run that writes every kind of run file: traces, sessions, summary, control,
    stats, request events."""
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="e", trial_name="t")
    task = otel_rl.register_task()
    sid = otel_rl.register_session(task)
    otel_rl.trace_session_event("mark_finalized", sid)
    with otel_rl.trace_scope("x"):
        pass
    events.start()
    events.emit("admit", request_id="r", stage="s")
    events.stop()
    otel_rl.stats.scalar(loss=1.0)
    otel_rl.stats.export(step=1)
    otel_rl.shutdown()
    assert [r["status"] for r in _session_records(tmp_path)] == ["accepted"]
    return tmp_path / "e" / "t"


def _modes(root):
    out = {}
    for path in glob.glob(os.path.join(str(root), "**"), recursive=True):
        if "tensorboard" in os.path.relpath(path, str(root)):
            continue  # written by tensorboard itself, inside the owner-only run directory
        out[os.path.relpath(path, str(root))] = stat.S_IMODE(os.stat(path).st_mode)
    return out


def test_run_files_are_owner_only_by_default(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    run_dir = _run_everything(tmp_path)
    modes = _modes(run_dir)
    names = " ".join(modes)
    for kind in ("traces-", "sessions-", "summary-", "stats-", "events", "control"):
        assert kind in names, kind
    for rel, mode in modes.items():
        expected = 0o700 if os.path.isdir(os.path.join(run_dir, rel)) else 0o600
        assert mode == expected, (rel, oct(mode))
    assert stat.S_IMODE(os.stat(tmp_path / "e").st_mode) == 0o700


def test_the_file_mode_setting_relaxes_files_and_directories(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    monkeypatch.setenv("OTEL_RL_FILE_MODE", "0640")
    old = os.umask(0o022)
    try:
        run_dir = _run_everything(tmp_path)
    finally:
        os.umask(old)
    modes = _modes(run_dir)
    assert "traces-" in " ".join(modes) and "sessions-" in " ".join(modes)
    for rel, mode in modes.items():
        expected = 0o750 if os.path.isdir(os.path.join(run_dir, rel)) else 0o640
        assert mode == expected, (rel, oct(mode))


@pytest.mark.parametrize("text", ["0400", "999", "1777", "rw"])
def test_a_bad_file_mode_is_rejected_naming_the_variable(text):
    with pytest.raises(otel_rl.ConfigError, match="OTEL_RL_FILE_MODE"):
        resolve(None, None, {"OTEL_RL_FILE_MODE": text})


# --- incoming baggage --------------------------------------------------------------------------
def _asgi_baggage(headers):
    """The baggage a handler behind the middleware sees for a real HTTP request."""
    seen = {}

    async def app(scope, receive, send):
        seen.update(baggage.get_all())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    transport = httpx.ASGITransport(app=ASGIMiddleware(app))

    async def call():
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
            response = await client.get("/generate", headers=headers)
            assert response.status_code == 200

    import asyncio

    asyncio.run(call())
    return seen


def test_foreign_baggage_keys_from_a_request_are_dropped_and_counted(monkeypatch):
    scrub_environ(monkeypatch)
    seen = _asgi_baggage({"baggage": "rl.task.id=7,rl.session.id=3,tenant=acme,rl.step=2,admin=1"})
    assert seen == {"rl.task.id": "7", "rl.session.id": "3", "rl.step": "2"}
    assert otel_rl.diagnostics()["baggage_dropped"] == 2


def test_allowed_baggage_keys_are_kept(monkeypatch):
    scrub_environ(monkeypatch)
    monkeypatch.setenv("OTEL_RL_BAGGAGE_ALLOW", "tenant, region")
    seen = _asgi_baggage({"baggage": "rl.task.id=7,tenant=acme,region=eu,admin=1"})
    assert seen == {"rl.task.id": "7", "tenant": "acme", "region": "eu"}


def test_a_star_allows_every_baggage_key(tmp_path, monkeypatch):
    scrub_environ(monkeypatch)
    monkeypatch.setenv("OTEL_RL_BAGGAGE_ALLOW", "*")
    assert baggage.get_all(extract({"baggage": "a=1,b=2"})) == {"a": "1", "b": "2"}
    assert "baggage_dropped" not in otel_rl.diagnostics()


def test_baggage_over_the_w3c_entry_limit_is_trimmed_and_counted(monkeypatch):
    scrub_environ(monkeypatch)
    monkeypatch.setenv("OTEL_RL_BAGGAGE_ALLOW", "*")
    header = ",".join(f"k{i}={i}" for i in range(200))
    seen = _asgi_baggage({"baggage": header})
    assert len(seen) == 180
    assert otel_rl.diagnostics()["baggage_trimmed"] == 20


def test_a_baggage_header_over_8192_bytes_is_counted(monkeypatch):
    scrub_environ(monkeypatch)
    header = "rl.task.id=1," + ",".join(f"pad{i}={'v' * 90}" for i in range(100))
    assert len(header) > 8192
    assert baggage.get_all(extract({"baggage": header})) == {}
    assert otel_rl.diagnostics()["baggage_trimmed"] == 101


def test_the_environment_carrier_is_limited_too(monkeypatch):
    scrub_environ(monkeypatch)
    from otel_rl.propagation import extract_env

    ctx = extract_env({"BAGGAGE": "rl.task.id=9,secret=1"})
    assert baggage.get_all(ctx) == {"rl.task.id": "9"}


# --- TLS -----------------------------------------------------------------------------------------
class TlsGrpcReceiver(GrpcReceiver):
    """The in-test gRPC receiver serving over TLS with the given key and certificate."""

    def __init__(self, key: bytes, cert: bytes) -> None:
        super().__init__()
        self._credentials = (key, cert)

    def _serve(self, port):
        import grpc
        from concurrent.futures import ThreadPoolExecutor
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        self._executor = ThreadPoolExecutor(max_workers=4)
        server = grpc.server(self._executor)
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceServicer(self), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsServicer(self), server)
        bound = server.add_secure_port(f"127.0.0.1:{port}", grpc.ssl_server_credentials([self._credentials]))
        server.start()
        self._server = server
        return bound


def _certificate(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to generate a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return key, cert


TLS_SCRIPT = textwrap.dedent("""
    import otel_rl
    otel_rl.configure()
    for i in range(3):
        with otel_rl.trace_scope("tls", args={"i": i}):
            pass
    otel_rl.shutdown()
    print(otel_rl.run_summary()["spans"]["exported_otlp"])
""")


def _run_tls_script(tmp_path, receiver, **extra_env):
    """TLS_SCRIPT in a fresh process exporting to ``receiver`` over https, configured only by env."""
    return run_python(TLS_SCRIPT, {
        "OTEL_RL_DIR": str(tmp_path / "runs"), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"https://127.0.0.1:{receiver.port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "false", **extra_env,
    }, timeout=120)


def test_spans_reach_a_tls_receiver_configured_only_by_standard_variables(tmp_path):
    key, cert = _certificate(tmp_path)
    with TlsGrpcReceiver(key.read_bytes(), cert.read_bytes()) as receiver:
        result = _run_tls_script(tmp_path, receiver, OTEL_EXPORTER_OTLP_CERTIFICATE=str(cert))
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["3"], result.stderr
        spans = receiver.wait_for_spans(3)
        assert sorted(s["attributes"]["rl.args.i"] for s in spans if s["name"] == "tls") == [0, 1, 2]


def test_a_tls_receiver_with_an_untrusted_certificate_gets_nothing(tmp_path):
    key, cert = _certificate(tmp_path)
    with TlsGrpcReceiver(key.read_bytes(), cert.read_bytes()) as receiver:
        result = _run_tls_script(tmp_path, receiver, OTEL_RL_SHUTDOWN_TIMEOUT_MS="2000")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["0"]
        assert receiver.spans() == []


def test_payload_limit_helper_leaves_short_strings_alone():
    payload.set_max_str(10)
    assert payload.json_safe("short") == "short"
    assert payload.json_safe("y" * 50) == "y" * 7 + "..."
