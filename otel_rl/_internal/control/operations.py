"""Live profiling control: sglang-omni's HTTP endpoints, broadcast to every process of the job.

Endpoints (``POST`` with a JSON object body; an empty body is ``{}``):

* ``/start_profile`` ``{run_id?, event_dir?, enable_torch? = true, config?}``:
  request events plus a torch profiler window;
* ``/stop_profile`` ``{run_id?}``: stops both;
* ``/start_request_profile`` ``{run_id?, event_dir?}``: request events only;
* ``/stop_request_profile`` ``{run_id?}``: stops the request events;
* ``GET /profile_status``: this process, the desired state, the registered processes.

Served by :func:`control_app` (an ASGI callable to mount in an existing app) or
:func:`serve_control` (a stdlib ``ThreadingHTTPServer`` on a daemon thread).

**Broadcast.** The run directory is the job's meeting point. A request is
applied in the serving process first (so a bad ``event_dir`` fails the request
before anything else happens), then written as the job's *desired state* to
``<run_dir>/control/state.json`` (atomically, by rename, under a ``flock``,
with a sequence number). Every process configured with ``control`` on (the
default) checks that file every ``control_poll_ms`` from a daemon thread,
brings its own recorder and torch profiler to the desired state (idempotently)
and acknowledges in ``<run_dir>/control/ack-<host>-<pid>.json``, a file it
also writes when it starts watching (its registration), touches every few
seconds while it lives and removes at shutdown. The response lists the
processes that acknowledged within ``control_ack_wait_ms`` and those still
pending. A process applies the changes made after it started watching; one
that starts while a profile is active does not join it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit

import orjson

from ... import events
from ...events import ProfilingError, new_run_id
from .. import files, guard, keys
from ..config import Settings, resolve
from ..state import STATE
from .torch_profiler import OPTIONS as TORCH_OPTIONS
from .torch_profiler import PROFILER
from .. import diagnostics

logger = logging.getLogger("otel_rl")

_MAX_BODY = 1 << 20
#: Seconds a client of the standalone server may take for each read and write.
_IO_TIMEOUT_S = 10.0
#: Connections the standalone server serves at once; more are answered 503 and closed.
_MAX_CONNECTIONS = 16
_HEARTBEAT_S = 5.0
_STALE_S = 4 * _HEARTBEAT_S
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_HOST = re.sub(r"[^A-Za-z0-9.-]+", "_", socket.gethostname()) or "host"


def _pid_namespace() -> int | None:
    # Containers sharing a hostname (host networking) still have pid namespaces of
    # their own: a pid is only checked for liveness inside the same one.
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


_PIDNS = _pid_namespace()

# Serialises every change of this process's profiling state (requests and the watcher).
_APPLY_LOCK = threading.RLock()


class _Job:
    """This process's part in job-wide control (set up by configure())."""

    def __init__(self) -> None:
        self.control_dir: str | None = None
        self.applied_seq = 0
        self.watcher: _Watcher | None = None
        self.server: ControlServer | None = None  # started by configure()


_JOB = _Job()
_SERVERS: list[ControlServer] = []


def _settings() -> Settings:
    return STATE.settings if STATE.settings is not None else resolve()


# --- the control directory --------------------------------------------------------------------
def _state_path(control_dir: str) -> str:
    return os.path.join(control_dir, keys.CONTROL_STATE_FILE)


def _ack_path(control_dir: str, pid: int | None = None) -> str:
    return os.path.join(control_dir, keys.CONTROL_ACK_FILE.format(host=_HOST, pid=pid or os.getpid()))


def _read_json(path: str) -> Any:
    try:
        return orjson.loads(files.read_own(path, _MAX_BODY))
    except (OSError, orjson.JSONDecodeError):
        return None


def _write_json(path: str, obj: Any) -> None:
    """Writes ``obj`` so that readers see the old content or the new, never half."""
    tmp = f"{path}.tmp-{_HOST}-{os.getpid()}-{threading.get_ident()}"
    with files.open_private(tmp, "wb") as f:
        f.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(control_dir: str | None) -> Iterator[None]:
    """Holds the control directory's lock (between processes) and this process's."""
    with _APPLY_LOCK:
        if control_dir is None:
            yield
            return
        fd = files.open_fd(os.path.join(control_dir, ".lock"), os.O_RDWR | os.O_CREAT)
        try:
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX)
            except (ImportError, OSError):  # no flock here (another OS, some network FS)
                pass
            yield
        finally:
            os.close(fd)


def _empty_state() -> dict[str, Any]:
    return {"seq": 0, "events": {"active": False, "run_id": None, "event_dir": None},
            "torch": {"active": False, "run_id": None, "config": None}}


def read_state(control_dir: str) -> dict[str, Any]:
    """The job's desired profiling state (an inactive one when there is none yet)."""
    state = _read_json(_state_path(control_dir))
    if not isinstance(state, dict) or not isinstance(state.get("seq"), int):
        return _empty_state()
    return state


def _publish(control_dir: str, state: dict[str, Any], command: str) -> int:
    """Writes the next desired state (caller holds the lock); returns its sequence number."""
    seq = read_state(control_dir)["seq"] + 1
    state = dict(state, seq=seq, command=command, time_ns=time.time_ns(),
                 origin={"host": _HOST, "pid": os.getpid()})
    _write_json(_state_path(control_dir), state)
    return seq


def _snapshot(seq: int, error: str | None = None) -> dict[str, Any]:
    settings = STATE.settings
    ev = events.status()
    torch = PROFILER.status()
    server = _JOB.server or (_SERVERS[0] if _SERVERS else None)
    return {
        "host": _HOST, "pidns": _PIDNS, "pid": os.getpid(), "rank": settings.rank if settings else None,
        "role": settings.role if settings else None, "seq": seq, "time_ns": time.time_ns(),
        "events": {"active": ev["active"], "run_id": ev["run_id"], "file": ev["file"],
                   "event_dir": ev["event_dir"]},
        "torch": {"active": torch["active"], "run_id": torch["run_id"], "trace": torch["trace"],
                  "error": torch["error"]},
        "control_url": server.url if server is not None else None,
        "error": error,
    }


def _acknowledge(seq: int, error: str | None = None) -> None:
    control_dir = _JOB.control_dir
    if control_dir is None:
        return
    try:
        _write_json(_ack_path(control_dir), _snapshot(seq, error))
    except OSError as exc:
        guard.report(diagnostics.CONTROL_ERROR, "cannot write the control acknowledgement: %s", exc)


def _alive(ack: dict[str, Any]) -> bool:
    if ack.get("host") != _HOST or ack.get("pidns") != _PIDNS or not isinstance(ack.get("pid"), int):
        return True  # another machine or container: freshness of the file decides
    try:
        os.kill(ack["pid"], 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def registered(control_dir: str) -> list[dict[str, Any]]:
    """The processes watching ``control_dir``: their latest acknowledgements.

    A file not touched for a while (its process died on another machine) or
    whose process is gone (this machine) is left out, and removed when local.
    """
    out = []
    now = time.time()
    try:
        names = os.listdir(control_dir)
    except OSError:
        return out
    for name in sorted(names):
        if not (name.startswith(keys.CONTROL_ACK_PREFIX) and name.endswith(".json")):
            continue
        path = os.path.join(control_dir, name)
        try:
            fresh = now - os.stat(path).st_mtime < _STALE_S
        except OSError:
            continue
        ack = _read_json(path)
        if not isinstance(ack, dict):
            continue
        if not _alive(ack):
            with contextlib.suppress(OSError):
                os.unlink(path)
            continue
        if fresh:
            out.append(ack)
    return out


def _wait_acks(control_dir: str | None, seq: int | None,
               timeout_s: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(acknowledged, pending)``: waits until every registered process has
    applied ``seq``, or ``timeout_s``."""
    if control_dir is None or seq is None:
        return [_snapshot(_JOB.applied_seq)], []
    deadline = time.monotonic() + timeout_s
    while True:
        acks = registered(control_dir)
        done = [a for a in acks if isinstance(a.get("seq"), int) and a["seq"] >= seq]
        pending = [a for a in acks if a not in done]
        if not pending or time.monotonic() >= deadline:
            return done, [{k: a.get(k) for k in ("host", "pid", "rank", "role", "seq")} for a in pending]
        time.sleep(0.05)


# --- bringing this process to a desired state --------------------------------------------------
def _apply_state(state: dict[str, Any]) -> str | None:
    """Reconciles this process with ``state``; returns what went wrong, if anything."""
    problems = []
    wanted = state.get("events") or {}
    try:
        current = events.active_run_id()
        if wanted.get("active"):
            # The state file is input like a request: this process's own limits apply.
            event_dir = _check_event_dir(wanted.get("event_dir"))
            if current is not None and current != wanted.get("run_id"):
                events.stop()
            events.start(wanted.get("run_id"), event_dir)
        elif current is not None and wanted.get("run_id") in (None, current):
            events.stop()
    except ProfilingError as exc:
        problems.append(str(exc))
        guard.report(diagnostics.CONTROL_APPLY_ERROR, "request events not started here: %s", exc)
    wanted = state.get("torch") or {}
    current = PROFILER.active_run_id()
    if wanted.get("active"):
        if current != wanted.get("run_id"):
            if current is not None:
                PROFILER.stop_live()
            if not PROFILER.start_live(wanted.get("run_id"), None, wanted.get("config")):
                problems.append(PROFILER.last_error or "torch profiler did not start")
    elif current is not None and wanted.get("run_id") in (None, current):
        PROFILER.stop_live(wanted.get("run_id"))
    return "; ".join(problems) or None


class _Watcher:
    """Follows ``<run_dir>/control/state.json`` from a daemon thread."""

    def __init__(self, control_dir: str, poll_s: float) -> None:
        self.control_dir = control_dir
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._last: bytes | None = None
        files.makedirs(control_dir)
        self._last = self._read()
        # Changes made before this process started watching are not replayed.
        _JOB.applied_seq = max(_JOB.applied_seq, read_state(control_dir)["seq"])
        _acknowledge(_JOB.applied_seq)  # registration
        self._next_beat = time.monotonic() + _HEARTBEAT_S
        self.thread = threading.Thread(target=self._run, name="otel_rl-control", daemon=True)
        self.thread.start()

    def _read(self) -> bytes | None:
        path = _state_path(self.control_dir)
        try:
            # Only a regular file of this user: another user able to write the
            # control directory must not be able to start profiling.
            return files.read_own(path, _MAX_BODY)
        except files.UnsafePathError as exc:
            guard.report(diagnostics.CONTROL_STATE_REFUSED, "control state not followed: %s", exc)
            return None
        except OSError:
            return None

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - the watcher must outlive any one problem
                guard.report(diagnostics.CONTROL_ERROR, "control watcher: %r", exc)

    def tick(self) -> None:
        data = self._read()
        if data is not None and data != self._last:
            self._last = data
            try:
                state = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                guard.report(diagnostics.CONTROL_STATE_INVALID, "unreadable control state %s: %s",
                             _state_path(self.control_dir), exc)
                return
            if isinstance(state, dict) and isinstance(state.get("seq"), int):
                with _APPLY_LOCK:
                    if state["seq"] > _JOB.applied_seq:
                        error = _apply_state(state)
                        _JOB.applied_seq = state["seq"]
                        _acknowledge(state["seq"], error)
                        self._next_beat = time.monotonic() + _HEARTBEAT_S
                        return
        if time.monotonic() >= self._next_beat:
            self._next_beat = time.monotonic() + _HEARTBEAT_S
            path = _ack_path(self.control_dir)
            try:
                os.utime(path)
            except OSError:
                _acknowledge(_JOB.applied_seq)

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout_s)
        with contextlib.suppress(OSError):
            os.unlink(_ack_path(self.control_dir))


# --- operations (the HTTP endpoints, callable from Python) ---------------------------------------
def _check_run_id(run_id: Any) -> str | None:
    if run_id is None:
        return None
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ProfilingError(f"run_id must be 1-128 characters of letters, digits, '.', '_', ':' "
                             f"or '-' (starting with a letter or digit), got {run_id!r}")
    return run_id


def _check_event_dir(event_dir: Any) -> str | None:
    """``event_dir`` as an absolute path inside the directories requests may write to.

    A relative path is taken from the run directory. The path is resolved
    (``..``, symbolic links) before it is compared, so neither leads out.

    Raises:
        ProfilingError: Not a non-empty string (400), or outside the run
            directory and ``OTEL_RL_CONTROL_EVENT_DIRS`` (403).
    """
    if event_dir is None:
        return None
    if not isinstance(event_dir, str) or not event_dir.strip() or "\0" in event_dir:
        raise ProfilingError(f"event_dir must be a non-empty string, got {event_dir!r}")
    settings = _settings()
    run_dir = os.path.abspath(settings.run_dir)
    path = os.path.abspath(os.path.join(run_dir, event_dir))
    allowed = settings.control_event_dirs.strip()
    if allowed == "*":
        return path
    roots = [run_dir] + [os.path.abspath(os.path.expanduser(part.strip()))
                         for part in allowed.split(os.pathsep) if part.strip()]
    real = os.path.realpath(path)
    for root in roots:
        real_root = os.path.realpath(root)
        if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
            return path
    raise ProfilingError(
        f"event_dir {path!r} is outside the run directory {run_dir}: control requests write request "
        f"events and profiler traces only there, unless the operator allows more directories with "
        f"OTEL_RL_CONTROL_EVENT_DIRS", 403)


def _check_config(config: Any) -> dict[str, bool] | None:
    if config is None:
        return None
    if not isinstance(config, dict):
        raise ProfilingError(f"config must be a JSON object, got {type(config).__name__}")
    unknown = sorted(set(config) - set(TORCH_OPTIONS))
    if unknown:
        raise ProfilingError(f"unknown config field(s) {unknown}; allowed: {sorted(TORCH_OPTIONS)}")
    for key, value in config.items():
        if not isinstance(value, bool):
            raise ProfilingError(f"config field {key!r} must be true or false, got {value!r}")
    return dict(config)


def _torch_trace_dir(event_dir: str | None) -> str | None:
    # Configured: the run directory (beside the rank's traces); otherwise the event dir.
    if STATE.settings is not None:
        return None
    return event_dir or events.status()["event_dir"]


def _start(command: str, run_id: Any, event_dir: Any, enable_torch: Any, config: Any) -> dict[str, Any]:
    run_id = _check_run_id(run_id) or new_run_id()
    event_dir = _check_event_dir(event_dir)
    if not isinstance(enable_torch, bool):
        raise ProfilingError(f"enable_torch must be true or false, got {enable_torch!r}")
    config = _check_config(config)
    control_dir = _JOB.control_dir
    with _locked(control_dir):
        state = read_state(control_dir) if control_dir else _empty_state()
        # Runs still recording somewhere (a state file left active by a job that
        # died does not count: only live processes' acknowledgements do).
        recording = {events.active_run_id()}
        if control_dir:
            recording |= {(a.get("events") or {}).get("run_id") for a in registered(control_dir)
                          if (a.get("events") or {}).get("active")}
        for other in sorted(r for r in recording if r is not None):
            if other != run_id:
                raise ProfilingError(f"a profile is already active (run_id {other!r}); stop it "
                                     "first", 409)
        # Here first: a directory that cannot be written fails the request before the broadcast.
        events.start(run_id, event_dir)
        torch: dict[str, Any] = {"requested": enable_torch}
        if enable_torch:
            torch["started"] = PROFILER.start_live(run_id, _torch_trace_dir(event_dir), config)
            torch["error"] = None if torch["started"] else PROFILER.last_error
            torch["trace"] = PROFILER.status()["trace"]
            state["torch"] = {"active": True, "run_id": run_id, "config": config}
        state["events"] = {"active": True, "run_id": run_id, "event_dir": event_dir}
        seq = _commit(control_dir, state, command)
    return _response(command, run_id, seq, control_dir, torch=torch)


def _stop(command: str, run_id: Any, with_torch: bool) -> dict[str, Any]:
    run_id = _check_run_id(run_id)
    control_dir = _JOB.control_dir
    with _locked(control_dir):
        state = read_state(control_dir) if control_dir else _empty_state()
        known = {events.active_run_id(), state["events"].get("run_id") if state["events"].get("active")
                 else None}
        if with_torch:
            known |= {PROFILER.active_run_id(),
                      state["torch"].get("run_id") if state["torch"].get("active") else None}
        known.discard(None)
        if run_id is not None and run_id not in known:
            guard.report(diagnostics.PROFILE_RUN_ID_MISMATCH, "%s for run_id %r ignored: active: %s",
                         command, run_id, sorted(known) or "none")
            return {"ok": True, "command": command, "run_id": run_id, "stopped": False,
                    "message": f"no active profile with run_id {run_id!r} (active: "
                               f"{', '.join(sorted(known)) or 'none'}); nothing stopped"}
        stopped = events.stop(run_id)
        torch: dict[str, Any] | None = None
        if with_torch:
            trace = PROFILER.stop_live(run_id)
            torch = {"stopped": trace is not None, "trace": trace}
            stopped = stopped or trace is not None
            state["torch"] = {"active": False, "run_id": run_id, "config": None}
        state["events"] = {"active": False, "run_id": run_id, "event_dir": None}
        seq = _commit(control_dir, state, command)
    out = _response(command, run_id, seq, control_dir, torch=torch)
    out["stopped"] = stopped or bool(known)
    return out


def _commit(control_dir: str | None, state: dict[str, Any], command: str) -> int | None:
    if control_dir is None:
        return None
    seq = _publish(control_dir, state, command)
    _JOB.applied_seq = seq
    _acknowledge(seq)
    return seq


def _response(command: str, run_id: str | None, seq: int | None, control_dir: str | None,
              torch: dict[str, Any] | None = None) -> dict[str, Any]:
    wait_s = _settings().control_ack_wait_ms / 1000.0
    done, pending = _wait_acks(control_dir, seq, wait_s)
    out: dict[str, Any] = {"ok": True, "command": command, "run_id": run_id, "seq": seq,
                           "events": events.status()}
    if torch is not None:
        out["torch"] = torch
    out["processes"] = done
    out["pending"] = pending
    return out


def start_profile(run_id: str | None = None, event_dir: str | None = None, enable_torch: bool = True,
                  config: dict[str, bool] | None = None) -> dict[str, Any]:
    """Starts request events and (``enable_torch``) a torch profiler window in
    every registered process of the job (``POST /start_profile``).

    Args:
        run_id: Names the run; generated when omitted.
        event_dir: Directory of the events files; default ``<run_dir>/events``
            of each process.
        enable_torch: Also run the torch profiler.
        config: Torch profiler options for this window: ``record_shapes``,
            ``profile_memory``, ``with_stack``, ``with_flops`` (default: the
            ``OTEL_RL_TORCH_*`` settings).

    Returns:
        What the endpoint answers: run id, sequence number, this process's
        state, the processes that acknowledged (``processes``) and those
        that did not within ``control_ack_wait_ms`` (``pending``).

    Raises:
        ProfilingError: A bad argument, an event directory that cannot be
            written, or another run already active (``status`` 409).
    """
    return _start("start_profile", run_id, event_dir, enable_torch, config)


def stop_profile(run_id: str | None = None) -> dict[str, Any]:
    """Stops request events and the torch window everywhere (``POST /stop_profile``);
    ``run_id`` ``None`` stops whatever is active, another run id is a no-op (reported)."""
    return _stop("stop_profile", run_id, True)


def start_request_profile(run_id: str | None = None, event_dir: str | None = None) -> dict[str, Any]:
    """Starts request events only, everywhere (``POST /start_request_profile``)."""
    return _start("start_request_profile", run_id, event_dir, False, None)


def stop_request_profile(run_id: str | None = None) -> dict[str, Any]:
    """Stops request events everywhere (``POST /stop_request_profile``); wildcard as :func:`stop_profile`."""
    return _stop("stop_request_profile", run_id, False)


def profile_status() -> dict[str, Any]:
    """This process's recorder and torch profiler, the job's desired state and
    the registered processes (``GET /profile_status``)."""
    control_dir = _JOB.control_dir
    return {
        "ok": True,
        "process": _snapshot(_JOB.applied_seq),
        "torch": PROFILER.status(),
        "control_dir": control_dir,
        "state": read_state(control_dir) if control_dir else None,
        "processes": registered(control_dir) if control_dir else [],
    }


# --- HTTP ----------------------------------------------------------------------------------------
_ENDPOINTS: dict[str, tuple[str, frozenset[str], Callable[..., dict[str, Any]]]] = {
    "/start_profile": ("POST", frozenset({"run_id", "event_dir", "enable_torch", "config"}), start_profile),
    "/stop_profile": ("POST", frozenset({"run_id"}), stop_profile),
    "/start_request_profile": ("POST", frozenset({"run_id", "event_dir"}), start_request_profile),
    "/stop_request_profile": ("POST", frozenset({"run_id"}), stop_request_profile),
    "/profile_status": ("GET", frozenset(), lambda: profile_status()),
}

Response = tuple[int, dict[str, Any], list[tuple[str, str]]]


def _error(status: int, message: str, headers: list[tuple[str, str]] | None = None) -> Response:
    return status, {"ok": False, "error": message}, headers or []


def handle_request(method: str, target: str, body: bytes, headers: dict[str, str],
                   token: str | None) -> Response:
    """Serves one control request: ``(status, JSON body, extra headers)``.

    Bad input is a 4xx with a message naming the problem; only a failure of
    otel_rl itself is a 500.
    """
    try:
        if token:
            given = headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(),
                                                                     token.encode()):
                return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                              [("www-authenticate", 'Bearer realm="otel_rl"')])
        path = urlsplit(target).path.rstrip("/") or "/"
        endpoint = _ENDPOINTS.get(path)
        if endpoint is None:
            return _error(404, f"no endpoint {path!r}; endpoints: {sorted(_ENDPOINTS)}")
        allowed_method, fields, operation = endpoint
        if method.upper() != allowed_method:
            return _error(405, f"{path} takes {allowed_method}, not {method}", [("allow", allowed_method)])
        if allowed_method == "GET":
            return 200, operation(), []
        text = body.strip()
        try:
            args = orjson.loads(text) if text else {}
        except orjson.JSONDecodeError as exc:
            return _error(400, f"invalid JSON body: {exc}")
        if not isinstance(args, dict):
            return _error(400, f"the body must be a JSON object, got {type(args).__name__}")
        unknown = sorted(set(args) - fields)
        if unknown:
            return _error(400, f"unknown field(s) {unknown} for {path}; allowed: {sorted(fields)}")
        # JSON null is the same as leaving the field out.
        return 200, operation(**{k: v for k, v in args.items() if v is not None}), []
    except ProfilingError as exc:
        return _error(exc.status, str(exc))
    except Exception as exc:  # noqa: BLE001 - never a traceback to the client, never a crash
        guard.report(diagnostics.CONTROL_ERROR, "control request failed: %r", exc)
        return _error(500, f"internal error: {exc!r}")


def _encode(payload: dict[str, Any]) -> bytes:
    return orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS) + b"\n"


def control_app(token: str | None = None) -> Callable[..., Any]:
    """An ASGI application serving the control endpoints; mount it in any ASGI app::

        app.mount("/otel_rl", otel_rl.control_app())      # FastAPI / Starlette
        # POST /otel_rl/start_profile, ...

    or serve it on its own (``uvicorn module:app`` with ``app = otel_rl.control_app()``).

    Args:
        token: Bearer token required on every request; default
            ``OTEL_RL_CONTROL_TOKEN`` (none when unset).
    """
    required = token if token is not None else _settings().control_token

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            return
        chunks = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= _MAX_BODY:
                chunks.append(chunk)
            more = message.get("more_body", False)
        headers = {}
        for name, value in scope.get("headers") or ():
            headers[name.decode("latin-1").lower()] = value.decode("latin-1")
        path = scope.get("path", "/")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"  # mounted: the path below the mount point
        if size > _MAX_BODY:
            status, payload, extra = _error(413, f"body larger than {_MAX_BODY} bytes")
        else:
            # The request may wait for acknowledgements: off the event loop.
            status, payload, extra = await asyncio.get_running_loop().run_in_executor(
                None, handle_request, scope.get("method", "GET"), path, b"".join(chunks), headers,
                required)
        data = _encode(payload)
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
            *((k.encode(), v.encode()) for k, v in extra)]})
        await send({"type": "http.response.body", "body": data})

    return app


class _Handler(BaseHTTPRequestHandler):
    server_version = "otel_rl-control"
    server: _Server

    def setup(self) -> None:
        # Every read and write of the connection is bounded: a client that stalls
        # (or trickles) holds a slot for at most this long per operation.
        self.timeout = self.server.io_timeout_s
        super().setup()

    def _serve(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            status, payload, extra = _error(400, "invalid Content-Length")
            self.close_connection = True
        elif length > _MAX_BODY:
            status, payload, extra = _error(413, f"body larger than {_MAX_BODY} bytes")
            self.close_connection = True
        else:
            try:
                body = self.rfile.read(length) if length else b""
            except TimeoutError:
                body = None
            if body is None:
                status, payload, extra = _error(408, f"the body did not arrive within "
                                                     f"{self.server.io_timeout_s:g}s")
                self.close_connection = True
            elif len(body) < length:
                # The client closed early: acting on part of a request is never right.
                status, payload, extra = _error(400, f"truncated body: {len(body)} of the {length} "
                                                     "bytes of Content-Length arrived")
                self.close_connection = True
            else:
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, payload, extra = handle_request(self.command, self.path, body, headers,
                                                        self.server.token)
        data = _encode(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        logger.debug("otel_rl control: " + format, *args)


_BUSY = _encode({"ok": False, "error": "too many connections to the control server; try again"})
_BUSY_RESPONSE = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" % len(_BUSY)
                  + _BUSY)


#: How long (and how much) a refused connection is read before it is closed.
_REFUSE_DRAIN_S = 0.2
_REFUSE_DRAIN_BYTES = 64 << 10


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    token: str | None = None
    io_timeout_s = _IO_TIMEOUT_S

    def __init__(self, address: Any, handler: Any, max_connections: int) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_connections = max_connections
        self._active = 0
        self._active_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        # One thread per connection, but only so many: beyond them a client is
        # told to come back, without a thread and without reading its request.
        if not self._slots.acquire(blocking=False):
            guard.count(diagnostics.CONTROL_CONNECTIONS_REFUSED)
            try:
                request.settimeout(_REFUSE_DRAIN_S)
                request.sendall(_BUSY_RESPONSE)
                # Closing with the request still unread would reset the connection and
                # the client could lose the answer: end our side, take what the client
                # already sent (briefly, bounded), then close.
                request.shutdown(socket.SHUT_WR)
                drained = 0
                while drained < _REFUSE_DRAIN_BYTES:
                    chunk = request.recv(4096)
                    if not chunk:
                        break
                    drained += len(chunk)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self._active_lock:
            self._active += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._active_lock:
            self._active -= 1
        self._slots.release()

    def active_connections(self) -> int:
        with self._active_lock:
            return self._active

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that resets or times out is not otel_rl's error: no traceback on stderr.
        logger.debug("otel_rl control: connection from %s ended with an error", client_address,
                     exc_info=True)


class ControlServer:
    """The standalone control server (:func:`serve_control`).

    Attributes:
        host: The interface it listens on.
        port: Its port (the one chosen when 0 was asked for).
        url: ``http://host:port``.
    """

    def __init__(self, host: str, port: int, token: str | None, *, io_timeout_s: float = _IO_TIMEOUT_S,
                 max_connections: int = _MAX_CONNECTIONS) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("_BoundServer", (_Server,), {"address_family": family})
        self._server = server_class((host, port), _Handler, max_connections)
        self._server.token = token or None
        self._server.io_timeout_s = io_timeout_s
        self.host = host
        self.port = self._server.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="otel_rl-control-http",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()

    def active_connections(self) -> int:
        """Connections being served now."""
        return self._server.active_connections()

    def close(self) -> None:
        """Stops serving and releases the port."""
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(ValueError):
            _SERVERS.remove(self)
        if _JOB.server is self:
            _JOB.server = None

    def __repr__(self) -> str:
        return f"ControlServer({self.url})"


def serve_control(port: int | None = None, host: str | None = None,
                  token: str | None = None) -> ControlServer:
    """Serves the control endpoints on a daemon thread (stdlib ``http.server``).

    Args:
        port: TCP port; default ``OTEL_RL_CONTROL_PORT``, else 0 (any free
            port: read it from the result's ``port``).
        host: Interface; default ``OTEL_RL_CONTROL_HOST`` (``127.0.0.1``).
            Anything but loopback without a token logs a warning.
        token: Bearer token; default ``OTEL_RL_CONTROL_TOKEN``.

    Returns:
        The running :class:`ControlServer` (the same one when called again
        for the same port and interface).

    Raises:
        OSError: The port cannot be bound.
    """
    settings = _settings()
    port = settings.control_port if port is None else port
    port = 0 if port is None else int(port)
    host = host or settings.control_host
    token = settings.control_token if token is None else token
    for server in _SERVERS:
        if server.host == host and port in (0, server.port):
            return server
    server = ControlServer(host, port, token)
    if not token and host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("otel_rl: the control server listens on %s without a token; anyone who "
                       "can reach it can start profiling (set OTEL_RL_CONTROL_TOKEN)", server.url)
    _SERVERS.append(server)
    logger.info("otel_rl: control server on %s", server.url)
    return server


# --- lifecycle (called by configure() and shutdown()) -------------------------------------------
def on_configure(settings: Settings) -> None:
    from ... import tracing
    from .torch_profiler import cuda_available

    if settings.cuda_sync:
        on = cuda_available()
        if not on:
            logger.info("otel_rl: OTEL_RL_CUDA_SYNC is set but CUDA is not available: no synchronisation")
        tracing.set_cuda_sync(on)
    if settings.control_port is not None:
        try:
            _JOB.server = serve_control(settings.control_port, settings.control_host,
                                        settings.control_token)
        except OSError as exc:
            # Several ranks of one machine share the environment: one binds the port,
            # the others follow it through the control file.
            guard.count(diagnostics.CONTROL_PORT_UNAVAILABLE)
            logger.info("otel_rl: control port %s:%s not served by this process (%s); it follows "
                        "the job's control file", settings.control_host, settings.control_port, exc)
    if settings.control:
        control_dir = os.path.abspath(os.path.join(settings.run_dir, keys.CONTROL_DIR))
        try:
            _JOB.control_dir = control_dir
            _JOB.watcher = _Watcher(control_dir, settings.control_poll_ms / 1000.0)
        except OSError as exc:
            _JOB.control_dir = None
            guard.report(diagnostics.CONTROL_ERROR, "live profiling control off: cannot use %s: %s",
                         control_dir, exc)


def on_shutdown(timeout_s: float) -> None:
    from ... import tracing

    tracing.set_cuda_sync(False)
    watcher, _JOB.watcher = _JOB.watcher, None
    if watcher is not None:
        watcher.stop(min(timeout_s, 1.0))
    _JOB.control_dir = None
    server, _JOB.server = _JOB.server, None
    if server is not None:
        server.close()
    with _APPLY_LOCK:
        events.stop()
        PROFILER.shutdown(timeout_s)


def _after_fork_in_child() -> None:
    # A forked child (a DataLoader worker...) does not join job-wide control
    # unless it calls configure() itself; it has no watcher or server thread.
    global _APPLY_LOCK
    _APPLY_LOCK = threading.RLock()
    _JOB.watcher = None
    _JOB.server = None
    _JOB.control_dir = None
    _SERVERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
