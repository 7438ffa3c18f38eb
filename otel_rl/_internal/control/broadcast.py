"""The job's desired profiling state, shared by every process through the run directory.

The run directory is the job's meeting point. A request is applied in the
serving process first (so a bad ``event_dir`` fails the request before anything
else happens), then written as the job's *desired state* to
``<run_dir>/control/state.json`` (atomically, by rename, under a ``flock``,
with a sequence number: :func:`publish`). Every process configured with
``control`` on (the default) checks that file every ``control_poll_ms`` from a
daemon thread (:class:`Watcher`), brings its own recorder and torch profiler to
the desired state (idempotently) and acknowledges in
``<run_dir>/control/ack-<host>-<pid>.json``, a file it also writes when it
starts watching (its registration), touches every few seconds while it lives
and removes at shutdown. :func:`wait_acks` tells the processes that
acknowledged a change from those still pending. A process applies the changes
made after it started watching; one that starts while a profile is active does
not join it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import orjson

from .. import diagnostics, events, files, guard, keys
from ..state import STATE
from .job import HOST, JOB, MAX_BODY, PIDNS
from .torch_profiler import PROFILER

_HEARTBEAT_S = 5.0
_STALE_S = 4 * _HEARTBEAT_S


def _state_path(control_dir: str) -> str:
    return os.path.join(control_dir, keys.CONTROL_STATE_FILE)


def _ack_path(control_dir: str, pid: int | None = None) -> str:
    return os.path.join(control_dir, keys.CONTROL_ACK_FILE.format(host=HOST, pid=pid or os.getpid()))


def _read_json(path: str) -> Any:
    try:
        return orjson.loads(files.read_own(path, MAX_BODY))
    except (OSError, orjson.JSONDecodeError):
        return None


def _write_json(path: str, obj: Any) -> None:
    """Writes ``obj`` so that readers see the old content or the new, never half."""
    tmp = f"{path}.tmp-{HOST}-{os.getpid()}-{threading.get_ident()}"
    with files.open_private(tmp, "wb") as f:
        f.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(control_dir: str | None) -> Iterator[None]:
    """Holds the control directory's lock (between processes) and this process's."""
    with JOB.apply_lock:
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


def empty_state() -> dict[str, Any]:
    """The desired state of a job that never started profiling."""
    return {"seq": 0, "events": {"active": False, "run_id": None, "event_dir": None},
            "torch": {"active": False, "run_id": None, "config": None}}


def read_state(control_dir: str) -> dict[str, Any]:
    """The job's desired profiling state (an inactive one when there is none yet)."""
    state = _read_json(_state_path(control_dir))
    if not isinstance(state, dict) or not isinstance(state.get("seq"), int):
        return empty_state()
    return state


def publish(control_dir: str, state: dict[str, Any], command: str) -> int:
    """Writes the next desired state (caller holds the lock); returns its sequence number."""
    seq = read_state(control_dir)["seq"] + 1
    state = dict(state, seq=seq, command=command, time_ns=time.time_ns(),
                 origin={"host": HOST, "pid": os.getpid()})
    _write_json(_state_path(control_dir), state)
    return seq


def snapshot(seq: int, error: str | None = None) -> dict[str, Any]:
    """This process's acknowledgement of ``seq``: who it is and what it records now."""
    settings = STATE.settings
    ev = events.status()
    torch = PROFILER.status()
    server = JOB.server or (JOB.servers[0] if JOB.servers else None)
    return {
        "host": HOST, "pidns": PIDNS, "pid": os.getpid(), "rank": settings.rank if settings else None,
        "role": settings.role if settings else None, "seq": seq, "time_ns": time.time_ns(),
        "events": {"active": ev["active"], "run_id": ev["run_id"], "file": ev["file"],
                   "event_dir": ev["event_dir"]},
        "torch": {"active": torch["active"], "run_id": torch["run_id"], "trace": torch["trace"],
                  "error": torch["error"]},
        "control_url": server.url if server is not None else None,
        "error": error,
    }


def acknowledge(seq: int, error: str | None = None) -> None:
    """Writes this process's acknowledgement of ``seq`` (and what went wrong applying it)."""
    control_dir = JOB.control_dir
    if control_dir is None:
        return
    try:
        _write_json(_ack_path(control_dir), snapshot(seq, error))
    except OSError as exc:
        guard.report(diagnostics.CONTROL_ERROR, "cannot write the control acknowledgement: %s", exc)


def _alive(ack: dict[str, Any]) -> bool:
    if ack.get("host") != HOST or ack.get("pidns") != PIDNS or not isinstance(ack.get("pid"), int):
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


def wait_acks(control_dir: str | None, seq: int | None,
              timeout_s: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(acknowledged, pending)``: waits until every registered process has
    applied ``seq``, or ``timeout_s``."""
    if control_dir is None or seq is None:
        return [snapshot(JOB.applied_seq)], []
    deadline = time.monotonic() + timeout_s
    while True:
        acks = registered(control_dir)
        done = [a for a in acks if isinstance(a.get("seq"), int) and a["seq"] >= seq]
        pending = [a for a in acks if a not in done]
        if not pending or time.monotonic() >= deadline:
            return done, [{k: a.get(k) for k in ("host", "pid", "rank", "role", "seq")} for a in pending]
        time.sleep(0.05)


class Watcher:
    """Follows ``<run_dir>/control/state.json`` from a daemon thread.

    Args:
        control_dir: The job's control directory (created when missing).
        poll_s: Seconds between two reads of the state file.
        apply: Brings this process to a desired state; returns what went
            wrong, if anything (written into the acknowledgement).
    """

    def __init__(self, control_dir: str, poll_s: float,
                 apply: Callable[[dict[str, Any]], str | None]) -> None:
        self.control_dir = control_dir
        self.poll_s = poll_s
        self._apply = apply
        self._stop = threading.Event()
        self._last: bytes | None = None
        files.makedirs(control_dir)
        self._last = self._read()
        # Changes made before this process started watching are not replayed.
        JOB.applied_seq = max(JOB.applied_seq, read_state(control_dir)["seq"])
        acknowledge(JOB.applied_seq)  # registration
        self._next_beat = time.monotonic() + _HEARTBEAT_S
        self.thread = threading.Thread(target=self._run, name="otel_rl-control", daemon=True)
        self.thread.start()

    def _read(self) -> bytes | None:
        path = _state_path(self.control_dir)
        try:
            # Only a regular file of this user: another user able to write the
            # control directory must not be able to start profiling.
            return files.read_own(path, MAX_BODY)
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
        """Applies a new desired state, else keeps the registration fresh."""
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
                with JOB.apply_lock:
                    if state["seq"] > JOB.applied_seq:
                        error = self._apply(state)
                        JOB.applied_seq = state["seq"]
                        acknowledge(state["seq"], error)
                        self._next_beat = time.monotonic() + _HEARTBEAT_S
                        return
        if time.monotonic() >= self._next_beat:
            self._next_beat = time.monotonic() + _HEARTBEAT_S
            path = _ack_path(self.control_dir)
            try:
                os.utime(path)
            except OSError:
                acknowledge(JOB.applied_seq)

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stops following and withdraws this process's registration."""
        self._stop.set()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout_s)
        with contextlib.suppress(OSError):
            os.unlink(_ack_path(self.control_dir))

