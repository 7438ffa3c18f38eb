"""The profiling operations behind the control endpoints, callable from Python.

:func:`start_profile` / :func:`stop_profile` (request events plus a torch
profiler window), :func:`start_request_profile` / :func:`stop_request_profile`
(request events only) and :func:`profile_status`. Each checks its arguments
(bad input is a :class:`ProfilingError` with the HTTP status to answer), applies
the change in this process first, publishes it as the job's desired state
(``broadcast``) and waits a moment for the other processes' acknowledgements.
:func:`apply_state` is how every process, the watcher's included, brings its
recorder and torch profiler to a desired state.
"""

from __future__ import annotations

import os
import re
from typing import Any

from .. import diagnostics, events, guard
from ..events import ProfilingError, new_run_id
from ..state import STATE
from .broadcast import (acknowledge, empty_state, locked, publish, read_state, registered, snapshot,
                        wait_acks)
from .job import JOB, current_settings
from .torch_profiler import OPTIONS as TORCH_OPTIONS
from .torch_profiler import PROFILER

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


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
    settings = current_settings()
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
    control_dir = JOB.control_dir
    with locked(control_dir):
        state = read_state(control_dir) if control_dir else empty_state()
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
    control_dir = JOB.control_dir
    with locked(control_dir):
        state = read_state(control_dir) if control_dir else empty_state()
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
    seq = publish(control_dir, state, command)
    JOB.applied_seq = seq
    acknowledge(seq)
    return seq


def _response(command: str, run_id: str | None, seq: int | None, control_dir: str | None,
              torch: dict[str, Any] | None = None) -> dict[str, Any]:
    wait_s = current_settings().control_ack_wait_ms / 1000.0
    done, pending = wait_acks(control_dir, seq, wait_s)
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
    control_dir = JOB.control_dir
    return {
        "ok": True,
        "process": snapshot(JOB.applied_seq),
        "torch": PROFILER.status(),
        "control_dir": control_dir,
        "state": read_state(control_dir) if control_dir else None,
        "processes": registered(control_dir) if control_dir else [],
    }


def apply_state(state: dict[str, Any]) -> str | None:
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


