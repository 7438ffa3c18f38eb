"""Trace context and ids cross HTTP clients, ASGI servers, process pools and subprocesses."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import aiohttp
import httpx
import pytest
import requests
from opentelemetry import trace
from support import one

import otel_rl
from otel_rl.propagation import (
    ASGIMiddleware,
    aiohttp_trace_config,
    instrument_httpx,
    instrument_requests,
)

import propagation_workers as workers  # noqa: E402  (a module the worker processes can import)


class HeaderRecorder:
    """A real HTTP server on 127.0.0.1 that remembers the headers of each request."""

    def __init__(self):
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/generate"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder():
    server = HeaderRecorder()
    yield server
    server.close()


@pytest.fixture
def in_session(traced):
    """A task and session current, inside a `generate` phase; yields (session id, phase span)."""
    otel_rl.set_task_id(otel_rl.register_task())
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    with otel_rl.trace_session_phase("generate"):
        yield session_id, trace.get_current_span().get_span_context()


def _carried(headers):
    """(trace id, parent span id, session id) a receiver reads from ``headers``."""
    with otel_rl.attach(headers) as ctx:
        sc = trace.get_current_span(ctx).get_span_context()
        return sc.trace_id, sc.span_id, otel_rl.get_session_id()


def test_httpx_client_requests_carry_the_current_span_and_session(recorder, in_session):
    session_id, phase = in_session
    with instrument_httpx(httpx.Client()) as client:
        client.post(recorder.url, json={})
    assert _carried(recorder.received[0]) == (phase.trace_id, phase.span_id, session_id)


def test_httpx_async_client_requests_carry_the_current_span_and_session(recorder, in_session):
    session_id, phase = in_session

    async def send():
        async with instrument_httpx(httpx.AsyncClient()) as client:
            await client.post(recorder.url, json={})

    asyncio.run(send())
    assert _carried(recorder.received[0]) == (phase.trace_id, phase.span_id, session_id)


def test_aiohttp_requests_carry_the_current_span_and_session(recorder, in_session):
    session_id, phase = in_session

    async def send():
        async with aiohttp.ClientSession(trace_configs=[aiohttp_trace_config()]) as session:
            async with session.post(recorder.url, json={}) as response:
                await response.read()

    asyncio.run(send())
    assert _carried(recorder.received[0]) == (phase.trace_id, phase.span_id, session_id)


def test_requests_session_requests_carry_the_current_span_and_session(recorder, in_session):
    session_id, phase = in_session
    with instrument_requests(requests.Session()) as session:
        session.post(recorder.url, json={})
    assert _carried(recorder.received[0]) == (phase.trace_id, phase.span_id, session_id)


def test_a_traceparent_the_caller_set_is_left_alone(recorder, in_session):
    explicit = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with instrument_requests(requests.Session()) as session:
        session.post(recorder.url, json={}, headers={"traceparent": explicit})
    assert recorder.received[0]["traceparent"] == explicit


def test_requests_outside_any_context_go_out_without_trace_headers(recorder, traced):
    with instrument_requests(requests.Session()) as session:
        session.post(recorder.url, json={})
    assert "traceparent" not in recorder.received[0]


# --- ASGI -----------------------------------------------------------------------------------
async def _generate_app(scope, receive, send):
    """A stand-in inference server endpoint: records a span and answers with the ids it sees."""
    if scope["type"] != "http":
        return
    with otel_rl.trace_scope("server.generate"):
        body = json.dumps([otel_rl.get_task_id(), otel_rl.get_session_id()]).encode()
    status = 500 if scope["path"] == "/fail" else 200
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def asgi_server():
    """The app behind ASGIMiddleware, served by uvicorn on 127.0.0.1:<free port>."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = uvicorn.Server(uvicorn.Config(ASGIMiddleware(_generate_app), host="127.0.0.1", port=port,
                                           log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(5)


def _spans_once_present(traced, name, timeout_s=5.0):
    """The finished spans, once one named ``name`` is among them: the server
    span ends after the app returns, which can be just after the client has
    read the whole response."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = traced.spans()
        if any(s["name"] == name for s in spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.02)


def test_asgi_middleware_continues_the_callers_trace_with_a_server_span(asgi_server, traced):
    task_id = otel_rl.register_task()
    otel_rl.set_task_id(task_id)
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    with otel_rl.trace_session_phase("generate"):
        response = requests.post(f"{asgi_server}/generate", headers=otel_rl.inject({}))
    assert response.json() == [task_id, session_id]
    spans = _spans_once_present(traced, "POST /generate")
    server, handler, phase = one(spans, "POST /generate"), one(spans, "server.generate"), one(spans, "generate")
    assert server["trace_id"] == phase["trace_id"]
    assert server["parent_span_id"] == phase["span_id"]
    assert handler["parent_span_id"] == server["span_id"]
    assert {k: server["attributes"][k] for k in ("http.request.method", "url.path",
                                                 "http.response.status_code", "rl.session.id")} == {
        "http.request.method": "POST", "url.path": "/generate", "http.response.status_code": 200,
        "rl.session.id": session_id}


def test_asgi_middleware_marks_a_5xx_response_as_an_error(asgi_server, traced):
    requests.post(f"{asgi_server}/fail")
    assert one(_spans_once_present(traced, "POST /fail"), "POST /fail")["status"] == "ERROR"


def test_asgi_middleware_serves_a_request_with_malformed_trace_headers(asgi_server, traced):
    response = requests.post(f"{asgi_server}/generate",
                             headers={"traceparent": "00-zz-not-a-header", "baggage": "%%%;;="})
    assert response.status_code == 200
    assert one(_spans_once_present(traced, "POST /generate"), "POST /generate")["parent_span_id"] is None


def test_asgi_middleware_serves_ids_in_baggage_that_int_rejects(asgi_server, traced):
    # "²" is a digit to str.isdigit() and not to int(): untrusted baggage, kept as text.
    response = requests.post(f"{asgi_server}/generate",
                             headers={"baggage": "rl.session.id=%C2%B2,rl.task.id=%C2%B2"})
    assert (response.status_code, response.json()) == (200, ["\u00b2", "\u00b2"])
    server = one(_spans_once_present(traced, "POST /generate"), "POST /generate")
    assert server["attributes"]["rl.session.id"] == "\u00b2"


# --- processes ------------------------------------------------------------------------------
def _worker_env(tmp_path):
    return {"OTEL_RL_ENABLED": "1", "OTEL_RL_DIR": str(tmp_path), "OTEL_RL_EXPERIMENT": "exp",
            "OTEL_RL_TRIAL": "t1", "OTEL_RL_ROLE": "worker"}


def test_carry_runs_a_pool_task_inside_the_callers_session(in_session, monkeypatch, tmp_path):
    session_id, phase = in_session
    for name, value in _worker_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        seen = pool.submit(otel_rl.carry(workers.report_context), "score").result(timeout=60)
    assert seen == {"session_id": session_id, "trace_id": f"{phase.trace_id:032x}",
                    "parent_span_id": f"{phase.span_id:016x}"}


def test_propagating_worker_takes_the_context_passed_with_the_call(in_session):
    session_id, phase = in_session
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        seen = pool.apply(workers.propagating_report, ("score",), otel_rl.context_kwargs())
    assert seen["session_id"] == session_id
    assert seen["trace_id"] == f"{phase.trace_id:032x}"


def test_propagating_worker_called_without_a_context_runs_without_one():
    assert workers.propagating_report("score")["session_id"] is None


def test_a_subprocess_started_with_inject_env_joins_the_trace_by_itself(in_session, tmp_path):
    session_id, phase = in_session
    env = otel_rl.inject_env()
    env.update(_worker_env(tmp_path))
    script = textwrap.dedent("""
        import json, otel_rl
        from opentelemetry import trace
        with otel_rl.trace_scope("child.work") as span:
            sc = trace.get_current_span().get_span_context()
        print(json.dumps({"session_id": otel_rl.get_session_id(), "trace_id": f"{sc.trace_id:032x}"}))
    """)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"session_id": session_id, "trace_id": f"{phase.trace_id:032x}"}


def test_inject_env_outside_any_context_clears_inherited_carrier_variables(traced):
    env = otel_rl.inject_env({"TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                              "PATH": "/bin"})
    assert env == {"PATH": "/bin"}


def test_a_span_whose_context_is_sent_away_is_marked_as_a_flow_source(traced):
    with otel_rl.trace_scope("trainer.update_weights"):
        otel_rl.inject({})
    with otel_rl.trace_scope("trainer.local_only"):
        pass
    spans = traced.spans()
    assert one(spans, "trainer.update_weights")["attributes"].get("rl.context.sent") is True
    assert "rl.context.sent" not in one(spans, "trainer.local_only")["attributes"]
