"""Request events: sglang-omni's request-level event recorder, with its names and file format.

An inference server (or any stage of a pipeline) marks the milestones of each
request - admission, preprocess, prefill, first token, hops between stages,
terminal response - with :func:`emit`::

    from otel_rl import events

    events.emit("scheduler_prefill_start", request_id=req.rid, batch_size=8)

While the recorder is inactive, :func:`emit` returns after one flag check, so
call sites never guard it. While it is active (:func:`start`, or the
``/start_profile`` and ``/start_request_profile`` control endpoints), each
event becomes

* a span event on the current recording span (``rl.request.id``, ``rl.stage``,
  ``rl.profile.run_id`` and the metadata as ``rl.args.<key>``), so it shows on
  the request's span in Jaeger, Tempo and Perfetto, and
* a line in ``<event_dir>/events_<first stage>_<pid>.jsonl`` with exactly the
  fields ``request_id, stage, event_name, timestamp_ns, run_id, pid, metadata``.

The stage comes from :func:`set_active_stage` when the call does not name one;
the request id defaults to the current otel_rl session id (``rl.session.id``
baggage), so events emitted inside a session, or in a server handling a request
that carried the session's baggage, need no id. Write errors are counted in
``otel_rl.diagnostics()`` (``events_lost``, ``event_write_error``) and logged
once; profiling never breaks serving.
"""

from __future__ import annotations

import contextvars
import os
import re
import secrets
import tempfile
import threading
import time
from typing import Any

import orjson
from opentelemetry.trace.propagation import _SPAN_KEY

from ._internal import files, guard, keys, privacy
from ._internal.payload import flatten_attributes, json_safe
from ._internal.spans import get_current
from ._internal.state import STATE
from ._internal.tracking import current_id

__all__ = [
    "ProfilingError", "active_run_id", "emit", "get_active_stage", "is_active", "new_run_id",
    "reset_active_stage", "set_active_stage", "start", "status", "stop",
]


class ProfilingError(RuntimeError):
    """A profiling request that cannot be carried out; the message says why.

    Attributes:
        status: The HTTP status the control surface answers with (400 for a
            bad request, 409 for a conflict with the active run, 500 for a
            problem on the server's side).
    """

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# --- active stage --------------------------------------------------------------------------------
# Both slots, as sglang-omni: the ContextVar follows asyncio tasks, asyncio.to_thread
# and loop.run_in_executor (they copy the context); the thread-local covers code a
# stage's own thread runs in another context (callbacks, an event loop of its own).
_stage_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_rl_active_stage",
                                                                        default=None)
_stage_local = threading.local()


class StageToken:
    """What :func:`set_active_stage` returns; give it back to :func:`reset_active_stage`."""

    __slots__ = ("_var_token", "_previous", "_thread")

    def __init__(self, var_token: contextvars.Token, previous: str | None, thread: int) -> None:
        self._var_token = var_token
        self._previous = previous
        self._thread = thread


def set_active_stage(name: str | None) -> StageToken:
    """Binds ``name`` as the stage of events emitted from here without ``stage=``.

    The binding holds for this thread and for everything that copies this
    context (asyncio tasks, ``asyncio.to_thread``, ``loop.run_in_executor``,
    ``contextvars.copy_context().run``)::

        token = set_active_stage("thinker")
        try:
            ...
        finally:
            reset_active_stage(token)

    Args:
        name: The stage name.

    Returns:
        A token for :func:`reset_active_stage`.
    """
    previous = getattr(_stage_local, "stage", None)
    _stage_local.stage = name
    return StageToken(_stage_var.set(name), previous, threading.get_ident())


def reset_active_stage(token: StageToken | None) -> None:
    """Restores the stage bound before :func:`set_active_stage` returned ``token``.

    ``reset_active_stage(None)`` scrubs both slots (the thread-local and the
    context variable) of the calling thread, as sglang-omni's test fixtures do.
    Never raises: a token from another context or thread is applied as far
    as it can be.
    """
    if token is None:
        _stage_local.stage = None
        _stage_var.set(None)
        return
    try:
        _stage_var.reset(token._var_token)  # noqa: SLF001
    except (ValueError, RuntimeError):
        # Created in another context, or already used: restore the value it replaced.
        old = token._var_token.old_value  # noqa: SLF001
        _stage_var.set(None if old is contextvars.Token.MISSING else old)
    if token._thread == threading.get_ident():  # noqa: SLF001
        _stage_local.stage = token._previous  # noqa: SLF001


def get_active_stage() -> str | None:
    """The stage bound by :func:`set_active_stage` here: the context's first, then the thread's."""
    stage = _stage_var.get()
    if stage is None:
        stage = getattr(_stage_local, "stage", None)
    return stage


# --- the recorder --------------------------------------------------------------------------------
#: The one flag :func:`emit` reads while the recorder is inactive.
_ACTIVE = False

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_SCALARS = (str, int, float, bool)


def new_run_id() -> str:
    """A fresh run id: ``YYYYmmdd-HHMMSS-<6 hex digits>`` (UTC)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _file_part(text: str) -> str:
    return _SAFE_NAME.sub("_", text).strip("._") or "_"


def default_event_dir() -> str:
    """``<run_dir>/events`` of the configured run.

    Raises:
        ProfilingError: otel_rl is not configured, so there is no run directory.
    """
    settings = STATE.settings
    if settings is None:
        raise ProfilingError("no event_dir given and otel_rl is not configured (no run "
                             "directory to default to): pass event_dir or call otel_rl.configure()")
    return os.path.abspath(os.path.join(settings.run_dir, keys.EVENTS_DIR))


def _check_writable(event_dir: str, given: bool) -> None:
    """Creates ``event_dir`` and writes a probe file there, so a directory that
    cannot hold the events fails now, with its reason, not at the first event."""
    try:
        files.makedirs(event_dir)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=event_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ProfilingError(f"event_dir {event_dir!r} is not writable: {exc.strerror or exc}",
                             400 if given else 500) from None


class _Recorder:
    """The process's recorder: at most one run at a time, one file per process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = False
        self.run_id: str | None = None
        self.event_dir: str | None = None
        self.file_stage: str | None = None
        self.path: str | None = None
        self.fd: int | None = None
        self.pid = os.getpid()
        self.written = 0
        self.lost = 0

    def start(self, run_id: str | None, event_dir: str | None) -> str:
        global _ACTIVE
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise ProfilingError(f"run_id must be a non-empty string, got {run_id!r}")
        given = event_dir is not None
        if given and (not isinstance(event_dir, str) or not event_dir):
            raise ProfilingError(f"event_dir must be a non-empty string, got {event_dir!r}")
        directory = os.path.abspath(event_dir) if given else default_event_dir()
        with self.lock:
            if self.active:
                if run_id is None or run_id == self.run_id:
                    return self.run_id  # joining the run already recording here
                raise ProfilingError(f"request events are already being recorded for run_id "
                                     f"{self.run_id!r}; stop that run first", 409)
            _check_writable(directory, given)
            self.run_id = run_id or new_run_id()
            self.event_dir = directory
            self.file_stage = get_active_stage()
            self.path = None
            self.fd = None
            self.pid = os.getpid()
            self.written = self.lost = 0
            self.active = True
            _ACTIVE = True
            return self.run_id

    def stop(self, run_id: str | None) -> bool:
        global _ACTIVE
        with self.lock:
            if not self.active:
                return False
            if run_id is not None and run_id != self.run_id:
                guard.report("profile_run_id_mismatch",
                             "stop for run_id %r ignored: request events are recorded for run_id %r",
                             run_id, self.run_id)
                return False
            self.active = False
            _ACTIVE = False
            self._close()
            return True

    def _close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def _open(self, stage: str | None) -> int:
        pid = os.getpid()
        if self.pid != pid:  # a forked child writes a file of its own
            self.pid = pid
            self.path = None
        if self.path is None:
            name = self.file_stage or stage or _fallback_stage()
            self.file_stage = name
            self.path = os.path.join(self.event_dir, keys.EVENTS_FILE.format(stage=_file_part(name),
                                                                             pid=pid))
        self.fd = files.open_fd(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        return self.fd

    def write(self, event_name: str, request_id: Any, stage: str | None, ts: int,
              metadata: dict[str, Any]) -> None:
        run_id = self.run_id  # checked again under the lock before writing
        record = {
            "request_id": request_id, "stage": stage, "event_name": event_name, "timestamp_ns": ts,
            "run_id": run_id, "pid": os.getpid(), "metadata": metadata,
        }
        try:
            line = orjson.dumps(record) + b"\n"
        except TypeError:  # an odd request id or event name
            line = orjson.dumps(json_safe(record)) + b"\n"
        with self.lock:
            if not self.active or self.run_id != run_id:
                return
            try:
                fd = self.fd if self.fd is not None and self.pid == os.getpid() else self._open(stage)
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                self.written += 1
            except OSError as exc:
                # Closed, so the next event opens the file again (the disk may recover).
                self._close()
                self.lost += 1
                guard.count("events_lost")
                guard.report("event_write_error", "cannot write request events to %s: %s",
                             self.path or self.event_dir, exc)

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {"active": self.active, "run_id": self.run_id, "event_dir": self.event_dir,
                    "file": self.path, "events_written": self.written, "events_lost": self.lost}

    def after_fork(self) -> None:
        self.lock = threading.Lock()
        if self.fd is not None:
            try:
                os.close(self.fd)  # the child's copy; the parent keeps writing its own
            except OSError:
                pass
            self.fd = None


def _fallback_stage() -> str:
    """Names the file when neither start() nor the first event had a stage: the
    process's role, or ``r<rank>``, or ``process``."""
    settings = STATE.settings
    if settings is None:
        return "process"
    return settings.role or f"r{settings.rank}"


_RECORDER = _Recorder()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_RECORDER.after_fork)


def start(run_id: str | None = None, event_dir: str | None = None) -> str:
    """Starts recording request events in this process (the local form of
    ``/start_request_profile``; the control endpoints reach every process).

    Starting again with the same run id (or none) while recording joins the
    run. The file is named after the stage bound in the calling thread
    (:func:`set_active_stage`), or, when none is, after the first event's stage.

    Args:
        run_id: Identifies the run in every line; generated when omitted.
        event_dir: Directory of the events files; default ``<run_dir>/events``
            of the configured run.

    Returns:
        The run id.

    Raises:
        ProfilingError: No ``event_dir`` and otel_rl is not configured; the
            directory cannot be created or written (checked now, with a probe
            file); or another run is being recorded (``status`` 409).
    """
    return _RECORDER.start(run_id, event_dir)


def stop(run_id: str | None = None) -> bool:
    """Stops recording; the files stay on disk.

    Args:
        run_id: Stop only if this run is the one recording; ``None`` stops
            whatever is (sglang-omni's wildcard). A run id that does not match
            leaves the recorder running and is reported (counted as
            ``profile_run_id_mismatch``).

    Returns:
        Whether a run was stopped.
    """
    return _RECORDER.stop(run_id)


def is_active() -> bool:
    """Whether request events are being recorded in this process."""
    return _ACTIVE


def active_run_id() -> str | None:
    """The run id being recorded, or ``None``."""
    return _RECORDER.run_id if _ACTIVE else None


def status() -> dict[str, Any]:
    """``{active, run_id, event_dir, file, events_written, events_lost}`` of this process."""
    return _RECORDER.status()


def _metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if value is None or type(value) in _SCALARS:
            out[key] = json_safe(value) if type(value) is str or type(value) is float else value
            continue
        safe = json_safe(value)
        if isinstance(safe, dict) and hasattr(value, "shape") and hasattr(value, "dtype"):
            # A tensor or array: its summary, never its contents (sglang-omni's marker).
            safe = {"__tensor_summary__": True, **safe}
        out[key] = safe
    return out


def emit(event_name: str, request_id: Any = None, stage: str | None = None, **metadata: Any) -> None:
    """Records one request event; a no-op (one flag check) while the recorder is inactive.

    Args:
        event_name: Lowercase snake_case, prefixed with the layer that owns it
            (``scheduler_prefill_start``, ``stage_hop_sent``...).
        request_id: The request; default: the current otel_rl session id
            (``rl.session.id`` from baggage), else ``None``.
        stage: The stage emitting it; default: the bound active stage
            (:func:`set_active_stage`). An explicit stage always wins.
        **metadata: Small scalars (ids, counts, durations, modality, error
            strings). Tensors and arrays are summarised as ``{"__tensor_summary__":
            true, type, shape, dtype, device}`` and never materialised (0-d CPU
            tensors and numpy scalars become plain numbers).
    """
    if not _ACTIVE:
        return
    try:
        ts = time.time_ns()
        if stage is None:
            stage = _stage_var.get()
            if stage is None:
                stage = getattr(_stage_local, "stage", None)
        ctx = get_current()
        if request_id is None:
            request_id = current_id(keys.SESSION_ID, ctx)
        elif type(request_id) not in _SCALARS:
            request_id = json_safe(request_id)
        # Content capture and the redaction hook decide what reaches the events file
        # (the span event's copy is handled on the export side).
        meta = privacy.metadata(_metadata(metadata)) if metadata else {}
        span = ctx.get(_SPAN_KEY)
        if span is not None and span.is_recording():
            attrs: dict[str, Any] = {keys.PROFILE_RUN_ID: _RECORDER.run_id}
            if request_id is not None:
                attrs[keys.REQUEST_ID] = request_id if type(request_id) in _SCALARS else str(request_id)
            if stage is not None:
                attrs[keys.STAGE] = stage
            if metadata:
                flatten_attributes(keys.ARGS_PREFIX, metadata, attrs)
            span.add_event(event_name, attrs, ts)
        _RECORDER.write(event_name, request_id, stage, ts, meta)
    except Exception as exc:  # noqa: BLE001 - profiling must never break serving
        guard.report("event_error", "request event %r failed: %r", event_name, exc)
