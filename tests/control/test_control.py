"""Live profiling control: sglang-omni's endpoints over real HTTP, the ASGI app,
and the broadcast through the run directory to real worker processes."""

from __future__ import annotations

import asyncio
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from waiting import wait_until

import otel_rl
from otel_rl import events
from otel_rl._internal import guard

WORKER = os.path.join(os.path.dirname(__file__), "control_worker.py")


@pytest.fixture(autouse=True)
def _clean():
    guard.clear()
    yield
    events.stop()


@pytest.fixture
def server(tmp_path):
    """otel_rl configured with live control and a standalone control server on 127.0.0.1:0."""
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="exp", trial_name="t1", rank=0,
                      export_process=False, control_port=0, control_poll_ms=50,
                      control_ack_wait_ms=5000)
    return otel_rl.serve_control()  # the server configure() started


def call(url: str, path: str, body=None, *, method: str = "POST", raw: bytes | None = None,
         token: str | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url + path, data=None if method == "GET" else data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def event_lines(event_dir) -> list[dict]:
    out = []
    for name in sorted(os.listdir(event_dir)):
        if name.startswith("events_"):
            with open(os.path.join(event_dir, name)) as f:
                out.extend(json.loads(line) for line in f)
    return out


# --- the endpoints over real HTTP -------------------------------------------------------------
def test_request_profile_starts_and_stops_over_http(server, tmp_path):
    assert server.host == "127.0.0.1" and server.port > 0

    status, started = call(server.url, "/start_request_profile", {"run_id": "demo"})
    assert status == 200 and started["run_id"] == "demo"
    assert [p["pid"] for p in started["processes"]] == [os.getpid()]
    events.emit("request_admission", request_id="req-1", stage="coordinator")
    status, stopped = call(server.url, "/stop_request_profile", {})

    assert status == 200 and stopped["stopped"] is True
    assert not events.is_active()
    (line,) = event_lines(os.path.join(otel_rl.settings().run_dir, "events"))
    assert (line["run_id"], line["request_id"]) == ("demo", "req-1")


def test_a_run_id_is_generated_when_omitted_and_event_dir_is_honoured(server, tmp_path):
    event_dir = os.path.join(otel_rl.settings().run_dir, "ev")
    status, body = call(server.url, "/start_request_profile", {"event_dir": event_dir})
    assert status == 200 and body["run_id"]
    assert events.active_run_id() == body["run_id"]
    assert body["events"]["event_dir"] == event_dir


def test_profile_status_reports_this_process_and_the_desired_state(server):
    call(server.url, "/start_request_profile", {"run_id": "r1"})
    status, body = call(server.url, "/profile_status", method="GET")
    assert status == 200
    assert body["process"]["events"]["run_id"] == "r1"
    assert body["state"]["events"] == {"active": True, "run_id": "r1", "event_dir": None}
    assert [p["pid"] for p in body["processes"]] == [os.getpid()]


@pytest.mark.parametrize("raw, message", [
    (b"{not json", "invalid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"run_id": "r", "trace_path_template": "x"}', "unknown field(s) ['trace_path_template']"),
    (b'{"enable_torch": "yes"}', "enable_torch must be true or false"),
    (b'{"run_id": "../../etc"}', "run_id must be"),
    (b'{"run_id": 7}', "run_id must be"),
    (b'{"config": {"with_stack": true, "bogus": true}}', "unknown config field(s) ['bogus']"),
    (b'{"config": {"with_stack": 1}}', "'with_stack' must be true or false"),
    (b'{"event_dir": ""}', "event_dir must be a non-empty string"),
])
def test_bad_requests_are_400_with_a_message_naming_the_problem(server, raw, message):
    status, body = call(server.url, "/start_profile", raw=raw)
    assert status == 400
    assert message in body["error"]
    assert not events.is_active()


def test_unknown_paths_are_404_and_wrong_methods_405(server):
    assert call(server.url, "/start_everything", {})[0] == 404
    assert call(server.url, "/start_profile", method="GET")[0] == 405
    assert call(server.url, "/profile_status", {})[0] == 405


def test_an_unwritable_event_dir_is_a_clear_error_not_a_later_crash(server, tmp_path):
    run_dir = otel_rl.settings().run_dir
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "file"), "w"):
        pass
    status, body = call(server.url, "/start_request_profile",
                        {"event_dir": os.path.join(run_dir, "file", "events")})
    assert status == 400 and "not writable" in body["error"]
    assert not events.is_active()


def test_a_stop_with_another_run_id_is_a_no_op(server):
    call(server.url, "/start_request_profile", {"run_id": "a"})
    status, body = call(server.url, "/stop_request_profile", {"run_id": "b"})

    assert status == 200 and body["stopped"] is False and "'b'" in body["message"]
    assert events.active_run_id() == "a"
    assert otel_rl.diagnostics()["profile_run_id_mismatch"] == 1


def test_starting_while_another_run_is_active_is_a_conflict(server):
    call(server.url, "/start_request_profile", {"run_id": "a"})
    status, body = call(server.url, "/start_request_profile", {"run_id": "b"})
    assert status == 409 and "'a'" in body["error"]
    assert call(server.url, "/start_request_profile", {"run_id": "a"})[0] == 200  # same run: joins


def test_a_token_is_required_when_set(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_RL_CONTROL_EVENT_DIRS", str(tmp_path))
    server = otel_rl.serve_control(port=0, token="s3cret")
    try:
        assert call(server.url, "/profile_status", method="GET")[0] == 401
        assert call(server.url, "/profile_status", method="GET", token="wrong")[0] == 401
        status, body = call(server.url, "/start_request_profile", {"event_dir": str(tmp_path)},
                            token="s3cret")
        assert status == 200 and events.is_active()
    finally:
        server.close()


def test_the_control_file_holds_the_desired_state_with_a_sequence_number(server):
    call(server.url, "/start_request_profile", {"run_id": "r1"})
    call(server.url, "/stop_request_profile", {})
    path = os.path.join(otel_rl.settings().run_dir, "control", "state.json")
    with open(path) as f:
        state = json.load(f)
    assert state["seq"] == 2 and state["command"] == "stop_request_profile"
    assert state["events"]["active"] is False
    assert state["origin"]["pid"] == os.getpid()


def test_without_configuration_a_server_controls_this_process_only(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_RL_CONTROL_EVENT_DIRS", str(tmp_path))
    server = otel_rl.serve_control(port=0)
    try:
        status, body = call(server.url, "/start_request_profile", {"run_id": "solo"})
        assert status == 400 and "event_dir" in body["error"]
        status, body = call(server.url, "/start_request_profile",
                            {"run_id": "solo", "event_dir": str(tmp_path)})
        assert status == 200 and body["seq"] is None
        assert [p["pid"] for p in body["processes"]] == [os.getpid()]
    finally:
        server.close()


# --- the ASGI app ------------------------------------------------------------------------------
def asgi_call(app, method: str, path: str, body: bytes = b"", *, root_path: str = "",
              headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, dict, dict]:
    """One request through an ASGI app, with the body in two chunks."""
    async def run():
        chunks = [{"type": "http.request", "body": body[:3], "more_body": True},
                  {"type": "http.request", "body": body[3:], "more_body": False}]
        sent = []

        async def receive():
            return chunks.pop(0) if chunks else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": method, "scheme": "http", "path": root_path + path,
                 "root_path": root_path, "query_string": b"", "headers": headers or []}
        await app(scope, receive, send)
        return sent

    start, body_message = asyncio.run(run())
    return (start["status"], json.loads(body_message["body"]),
            {k.decode(): v.decode() for k, v in start["headers"]})


def test_the_asgi_app_serves_the_endpoints_below_its_mount_point(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_RL_CONTROL_EVENT_DIRS", str(tmp_path))
    app = otel_rl.control_app()
    status, body, headers = asgi_call(app, "POST", "/start_request_profile",
                                      json.dumps({"run_id": "asgi", "event_dir": str(tmp_path)}).encode(),
                                      root_path="/otel_rl")
    assert status == 200 and body["run_id"] == "asgi"
    assert headers["content-type"] == "application/json"
    assert events.active_run_id() == "asgi"

    status, body, _ = asgi_call(app, "POST", "/stop_request_profile", b"{oops", root_path="/otel_rl")
    assert status == 400 and "invalid JSON" in body["error"]


def test_the_asgi_app_requires_the_token_when_set(tmp_path):
    app = otel_rl.control_app(token="s3cret")
    status, _, headers = asgi_call(app, "GET", "/profile_status")
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    status, _, _ = asgi_call(app, "GET", "/profile_status",
                             headers=[(b"authorization", b"Bearer s3cret")])
    assert status == 200


def test_the_asgi_app_under_a_real_asgi_server(tmp_path, monkeypatch):
    uvicorn = pytest.importorskip("uvicorn")  # a test dependency only
    monkeypatch.setenv("OTEL_RL_CONTROL_EVENT_DIRS", str(tmp_path))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(otel_rl.control_app(), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        url = f"http://127.0.0.1:{port}"
        status, body = call(url, "/start_request_profile", {"run_id": "uv", "event_dir": str(tmp_path)})
        assert status == 200 and body["run_id"] == "uv"
        assert call(url, "/start_request_profile", raw=b'{"bogus": 1}')[0] == 400
    finally:
        server.should_exit = True
        thread.join(10)


# --- broadcast to real processes ----------------------------------------------------------------
def start_worker(stage: str, rank: int, root) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_RL_DIR=str(root), OTEL_RL_EXPERIMENT="exp", OTEL_RL_TRIAL="t1",
               OTEL_RL_RANK=str(rank), OTEL_RL_CONTROL_POLL_MS="50")
    return subprocess.Popen([sys.executable, WORKER, stage], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def wait_ready(proc: subprocess.Popen, timeout_s: float = 60) -> None:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready and proc.stdout.readline().strip() == "ready", "worker did not start"


def test_one_http_request_reaches_every_registered_process(server, tmp_path):
    workers = [start_worker("worker1", 1, tmp_path), start_worker("worker2", 2, tmp_path)]
    try:
        for proc in workers:
            wait_ready(proc)  # configured: registered in the control directory
        worker_pids = {proc.pid for proc in workers}

        status, body = call(server.url, "/start_request_profile", {"run_id": "job-1"})
        assert status == 200 and body["pending"] == []
        acked = {p["pid"]: p for p in body["processes"]}
        assert set(acked) == worker_pids | {os.getpid()}
        assert all(p["events"]["active"] and p["events"]["run_id"] == "job-1" for p in acked.values())
        event_dir = os.path.join(otel_rl.settings().run_dir, "events")
        for proc, stage in zip(workers, ("worker1", "worker2")):  # each worker has emitted
            path = os.path.join(event_dir, f"events_{stage}_{proc.pid}.jsonl")
            wait_until(lambda path=path: os.path.exists(path) and b"\n" in Path(path).read_bytes(),
                       what=f"a request event in {path}")

        status, body = call(server.url, "/stop_request_profile", {"run_id": "not-this-one"})
        assert status == 200 and body["stopped"] is False
        status, body = call(server.url, "/profile_status", method="GET")
        assert {p["pid"] for p in body["processes"]} == worker_pids | {os.getpid()}
        assert all(p["events"]["active"] for p in body["processes"])  # nobody stopped

        status, body = call(server.url, "/stop_request_profile", {"run_id": "job-1"})
        assert status == 200 and body["pending"] == []
        assert {p["pid"] for p in body["processes"]} == worker_pids | {os.getpid()}
        assert not any(p["events"]["active"] for p in body["processes"])
    finally:
        for proc in workers:
            proc.stdin.close()
        for proc in workers:
            assert proc.wait(30) == 0

    event_dir = os.path.join(otel_rl.settings().run_dir, "events")
    for proc, stage in zip(workers, ("worker1", "worker2")):
        path = os.path.join(event_dir, f"events_{stage}_{proc.pid}.jsonl")
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        assert lines and {(e["run_id"], e["stage"], e["pid"]) for e in lines} == {("job-1", stage, proc.pid)}
    # A worker that exits deregisters: only this process is left.
    assert [p["pid"] for p in otel_rl.profile_status()["processes"]] == [os.getpid()]


# --- configuration ------------------------------------------------------------------------------
def test_the_port_in_the_environment_makes_configure_serve_control(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_RL_CONTROL_PORT", "0")
    otel_rl.configure(fileroot=str(tmp_path), export_process=False)
    url = otel_rl.profile_status()["process"]["control_url"]
    assert url.startswith("http://127.0.0.1:")
    assert call(url, "/profile_status", method="GET")[0] == 200
    otel_rl.shutdown()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/profile_status", timeout=5)


def test_a_port_taken_by_another_process_leaves_this_one_following_the_control_file(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        otel_rl.configure(fileroot=str(tmp_path), export_process=False,
                          control_port=taken.getsockname()[1])  # no exception
        status = otel_rl.profile_status()
        assert status["process"]["control_url"] is None
        assert [p["pid"] for p in status["processes"]] == [os.getpid()]  # still registered
        assert otel_rl.diagnostics()["control_port_unavailable"] == 1
    finally:
        taken.close()


def test_with_control_off_a_process_neither_registers_nor_publishes(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), export_process=False, control=False)
    body = otel_rl.start_request_profile(run_id="local")
    assert body["seq"] is None and events.active_run_id() == "local"
    assert not os.path.exists(os.path.join(otel_rl.settings().run_dir, "control"))


def test_a_state_left_active_by_a_job_that_died_does_not_block_a_new_start(tmp_path):
    run_dir = os.path.join(str(tmp_path), "exp", "t1")
    os.makedirs(os.path.join(run_dir, "control"))
    with open(os.path.join(run_dir, "control", "state.json"), "w") as f:
        json.dump({"seq": 9, "events": {"active": True, "run_id": "crashed", "event_dir": None},
                   "torch": {"active": False, "run_id": None, "config": None}}, f)
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="exp", trial_name="t1",
                      export_process=False)
    assert not events.is_active()  # registering does not replay the old state

    body = otel_rl.start_request_profile(run_id="fresh")
    assert body["seq"] == 10 and events.active_run_id() == "fresh"


# --- where a request may write, and how much of the server a client may hold ---------------------
def _run_dir():
    return otel_rl.settings().run_dir


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink"])
def test_an_event_dir_outside_the_run_directory_is_refused_and_nothing_is_created(server, tmp_path, where):
    outside = tmp_path / "elsewhere" / "events"
    if where == "absolute":
        event_dir = str(outside)
    elif where == "dotdot":
        event_dir = os.path.join(_run_dir(), "..", "..", "elsewhere", "events")
    else:
        os.makedirs(tmp_path / "elsewhere")
        os.makedirs(_run_dir(), exist_ok=True)
        os.symlink(tmp_path / "elsewhere", os.path.join(_run_dir(), "link"))
        event_dir = os.path.join(_run_dir(), "link", "events")
    status, body = call(server.url, "/start_request_profile", {"event_dir": event_dir})
    assert status == 403 and "outside" in body["error"] and "OTEL_RL_CONTROL_EVENT_DIRS" in body["error"]
    assert not events.is_active() and not outside.exists()
    status, body = call(server.url, "/start_profile", {"event_dir": event_dir})
    assert status == 403 and not outside.exists()


def test_a_relative_event_dir_is_inside_the_run_directory(server):
    status, body = call(server.url, "/start_request_profile", {"run_id": "rel", "event_dir": "ev/a"})
    assert status == 200
    assert body["events"]["event_dir"] == os.path.join(os.path.abspath(_run_dir()), "ev", "a")
    events.emit("admit", request_id="r", stage="s")
    call(server.url, "/stop_request_profile", {})
    assert [e["request_id"] for e in event_lines(os.path.join(_run_dir(), "ev", "a"))] == ["r"]


def test_the_operator_can_allow_more_event_directories(tmp_path):
    allowed = tmp_path / "profiles"
    otel_rl.configure(fileroot=str(tmp_path / "runs"), export_process=False,
                      control_event_dirs=str(allowed))
    body = otel_rl.start_request_profile(run_id="a", event_dir=str(allowed / "one"))
    assert body["events"]["event_dir"] == str(allowed / "one")
    otel_rl.stop_request_profile()
    with pytest.raises(events.ProfilingError, match="outside"):
        otel_rl.start_request_profile(run_id="b", event_dir=str(tmp_path / "other"))
    otel_rl.configure(fileroot=str(tmp_path / "runs"), export_process=False, control_event_dirs="*")
    assert otel_rl.start_request_profile(run_id="c", event_dir=str(tmp_path / "other"))["ok"]


def _wait_for_ack(seq, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for ack in otel_rl.profile_status()["processes"]:
            if ack["pid"] == os.getpid() and ack["seq"] >= seq:
                return ack
        time.sleep(0.02)
    raise AssertionError(f"no acknowledgement of seq {seq} within {timeout_s}s")


def test_a_planted_control_state_cannot_send_events_outside_the_run_directory(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="exp", trial_name="t1",
                      export_process=False, control_poll_ms=20)
    outside = tmp_path / "stolen"
    state = {"seq": 5, "command": "start_request_profile",
             "events": {"active": True, "run_id": "planted", "event_dir": str(outside)},
             "torch": {"active": False, "run_id": None, "config": None}}
    path = os.path.join(_run_dir(), "control", "state.json")
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)
    ack = _wait_for_ack(5)
    assert "outside" in ack["error"]
    assert not events.is_active() and not outside.exists()
    assert otel_rl.diagnostics()["control_apply_error"] == 1


def _raw_request(port, data, *, shut_write=True, timeout_s=30.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(data)
        if shut_write:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk


def test_a_truncated_body_is_rejected(server):
    body = json.dumps({"run_id": "cut"}).encode()
    reply = _raw_request(server.port, b"POST /start_request_profile HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: %d\r\n\r\n" % (len(body) + 50) + body)
    assert reply.startswith(b"HTTP/1.0 400") and b"truncated" in reply
    assert not events.is_active()


def test_a_client_that_stalls_is_cut_off_after_the_io_timeout():
    from otel_rl._internal.control import ControlServer

    server = ControlServer("127.0.0.1", 0, None, io_timeout_s=0.3)
    try:
        started = time.monotonic()
        # Headers promising a body that never comes, the connection left open.
        reply = _raw_request(server.port, b"POST /start_request_profile HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Length: 10\r\n\r\n{", shut_write=False)
        assert time.monotonic() - started < 20
        assert reply == b"" or reply.startswith(b"HTTP/1.0 408")
        assert not events.is_active()
    finally:
        server.close()


def test_connections_beyond_the_bound_are_refused_and_counted():
    from otel_rl._internal.control import ControlServer

    server = ControlServer("127.0.0.1", 0, None, max_connections=2, io_timeout_s=30)
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(2)]
    try:
        # The idle clients hold both slots (wait until the server has taken them).
        deadline = time.monotonic() + 30
        while server.active_connections() < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.active_connections() == 2
        reply = _raw_request(server.port, b"GET /profile_status HTTP/1.0\r\n\r\n")
        assert reply.startswith(b"HTTP/1.0 503")
        assert otel_rl.diagnostics()["control_connections_refused"] == 1
        for sock in idle:
            sock.close()
        deadline = time.monotonic() + 30
        while server.active_connections() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert call(server.url, "/profile_status", method="GET")[0] == 200
    finally:
        for sock in idle:
            sock.close()
        server.close()
