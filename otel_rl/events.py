"""Request events: sglang-omni's request-level event recorder, with its names and file format.

An inference server (or any stage of a pipeline) marks the milestones of each
request - admission, preprocess, prefill, first token, hops between stages,
terminal response - with :func:`emit`, in either of two forms::

    from otel_rl import events

    # otel_rl's short form: metadata as keyword arguments
    events.emit("scheduler_prefill_start", request_id=req.rid, batch_size=8)

    # sglang-omni's form (``sglang_omni.profiler.event_recorder.emit``)
    events.emit(request_id=req.rid, stage=None, event_name="scheduler_prefill_start",
                metadata={"batch_size": 8}, timestamp_ns=t_ns)

The module is a drop-in for ``sglang_omni.profiler.event_recorder``:
:func:`get_recorder` returns the process's :class:`RequestEventRecorder`
(``start``, ``stop``, ``emit``, ``is_active``, ``active_run_id``,
``active_path``...), :class:`RequestEvent` is one line of the file, and
:func:`set_active_stage`, :func:`reset_active_stage`, :func:`get_active_stage`,
:func:`json_default` and the ``emit_model_path*`` helpers keep their names.

While the recorder is inactive, :func:`emit` returns after one flag check, so
call sites never guard it. While it is active (:func:`start`,
``get_recorder().start(...)``, or the ``/start_profile`` and
``/start_request_profile`` control endpoints), each event becomes

* a span event on the current recording span (``rl.request.id``, ``rl.stage``,
  ``rl.profile.run_id`` and the metadata as ``rl.args.<key>``), so it shows on
  the request's span in Jaeger, Tempo and Perfetto, and
* a line in ``<event_dir>/events_<first stage>_<pid>.jsonl`` with exactly the
  fields ``request_id, stage, event_name, timestamp_ns, run_id, pid, metadata``.

An event emitted without a stage takes the stage bound by
:func:`set_active_stage`, else the stage the recorder was started with, else
``"unknown"``. The request id defaults to the current otel_rl session id
(``rl.session.id`` baggage), so events emitted inside a session, or in a server
handling a request that carried the session's baggage, need no id. Write errors
are counted in ``otel_rl.diagnostics()`` (``events_lost``, ``event_write_error``)
and logged once; profiling never breaks serving.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import numbers
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any

import orjson
from opentelemetry.trace.propagation import _SPAN_KEY

from ._internal import files, guard, keys
from ._internal.recording import privacy
from ._internal.payload import flatten_attributes, json_safe
from ._internal.recording.spans import get_current
from ._internal.state import STATE
from ._internal.recording.tracking import current_id
from ._internal import diagnostics

__all__ = [
    "ProfilingError", "RequestEvent", "RequestEventRecorder", "active_run_id", "emit",
    "emit_model_path", "emit_model_path_end", "emit_model_path_start", "get_active_stage",
    "get_recorder", "is_active", "json_default", "new_run_id", "read_host_boot_id",
    "reset_active_stage", "set_active_stage", "start", "status", "stop",
]

logger = logging.getLogger("otel_rl")

#: The stage of an event that names none, when no stage is bound and the
#: recorder was started without one (sglang-omni's last resort).
UNKNOWN_STAGE = "unknown"


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
# sglang-omni's names for the two slots (its tests inspect them).
_active_stage_cv = _stage_var
_thread_active_stage = _stage_local


class StageToken:
    """What :func:`set_active_stage` returns; give it back to :func:`reset_active_stage`."""

    __slots__ = ("_var_token", "_previous", "_thread")

    def __init__(self, var_token: contextvars.Token, previous: str | None, thread: int) -> None:
        self._var_token = var_token
        self._previous = previous
        self._thread = thread


def set_active_stage(stage: str | None) -> StageToken:
    """Binds ``stage`` as the stage of events emitted from here without one.

    The binding holds for this thread and for everything that copies this
    context (asyncio tasks, ``asyncio.to_thread``, ``loop.run_in_executor``,
    ``contextvars.copy_context().run``)::

        token = set_active_stage("thinker")
        try:
            ...
        finally:
            reset_active_stage(token)

    Args:
        stage: The stage name (``None`` unbinds).

    Returns:
        A token for :func:`reset_active_stage`.
    """
    previous = getattr(_stage_local, "stage", None)
    _stage_local.stage = stage
    return StageToken(_stage_var.set(stage), previous, threading.get_ident())


def reset_active_stage(token: StageToken | contextvars.Token | None) -> None:
    """Restores the stage bound before :func:`set_active_stage` returned ``token``.

    ``reset_active_stage(None)`` scrubs both slots (the thread-local and the
    context variable) of the calling thread, as sglang-omni's test fixtures do.
    A bare ``contextvars.Token`` of the context variable is accepted too (the
    thread-local slot is then cleared, as sglang-omni does). Never raises: a
    token from another context or thread is applied as far as it can be.
    """
    if token is None:
        _stage_local.stage = None
        _stage_var.set(None)
        return
    if isinstance(token, StageToken):
        var_token, previous, same_thread = (token._var_token, token._previous,  # noqa: SLF001
                                            token._thread == threading.get_ident())  # noqa: SLF001
    elif isinstance(token, contextvars.Token):
        var_token, previous, same_thread = token, None, True
    else:
        guard.report(diagnostics.BAD_STAGE_TOKEN, "reset_active_stage(): not a token: %r", token)
        return
    try:
        _stage_var.reset(var_token)
    except (ValueError, RuntimeError):
        # Created in another context, or already used: restore the value it replaced.
        old = var_token.old_value
        _stage_var.set(None if old is contextvars.Token.MISSING else old)
    if same_thread:
        _stage_local.stage = previous


def get_active_stage() -> str | None:
    """The stage bound by :func:`set_active_stage` here: the context's first, then the thread's."""
    stage = _stage_var.get()
    if stage is None:
        stage = getattr(_stage_local, "stage", None)
    return stage


# --- one event -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RequestEvent:
    """One request event: the fields of one line of an events file, in file order."""

    request_id: Any
    stage: str
    event_name: str
    timestamp_ns: int
    run_id: str | None = None
    pid: int | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The event as the JSON object of its line (the metadata copied)."""
        return {"request_id": self.request_id, "stage": self.stage, "event_name": self.event_name,
                "timestamp_ns": self.timestamp_ns, "run_id": self.run_id, "pid": self.pid,
                "metadata": dict(self.metadata)}


# --- metadata ------------------------------------------------------------------------------------
_SCALARS = (str, int, float, bool)
_MAX_DEPTH = 4
_MAX_ITEMS = 128


def json_default(obj: Any) -> Any:
    """The JSON form of a value JSON cannot hold: tensors summarised, never materialised.

    A tensor or array (anything with ``shape`` and ``dtype``) becomes
    ``{"__tensor_summary__": true, "type", "shape", "dtype", "device"}``; a
    0-d one on the CPU (or without a device, as numpy scalars) becomes its
    plain value, while a 0-d GPU tensor stays a summary (its value would cost a
    device sync). Anything else becomes its ``repr``.
    """
    shape = getattr(obj, "shape", None)
    dtype = getattr(obj, "dtype", None)
    if shape is not None and dtype is not None:
        device = getattr(obj, "device", None)
        try:
            zero_d = len(shape) == 0
        except TypeError:  # a shape without a length: summarised below
            zero_d = False
        if zero_d and hasattr(obj, "item") and (device is None or str(device).startswith("cpu")):
            try:
                return obj.item()
            except Exception:  # noqa: BLE001 - summarised instead
                pass
        try:
            dims: Any = [int(d) for d in shape]
        except Exception:  # noqa: BLE001 - an odd shape is still summarised
            dims = repr(shape)
        return {"__tensor_summary__": True, "type": type(obj).__name__, "shape": dims,
                "dtype": str(dtype), "device": None if device is None else str(device)}
    return repr(obj)


# sglang-omni's earlier name for it.
_json_default = json_default


def _safe(value: Any, depth: int = 0) -> Any:
    """``value`` as the events file holds it: scalars kept (long strings cut, NaN as
    null), containers walked, anything else through :func:`json_default`."""
    kind = type(value)
    if value is None or kind is int or kind is bool:
        return value
    if isinstance(value, _SCALARS):
        return json_safe(value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        out = json_default(value)
        return out if isinstance(out, dict) else _safe(out, depth + 1)
    if depth < _MAX_DEPTH:
        if isinstance(value, Mapping):
            return {str(k): _safe(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [_safe(v, depth + 1) for v in list(value)[:_MAX_ITEMS]]
    return json_safe(repr(value))


def _safe_metadata(values: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of one line: every key kept, each value through :func:`_safe`."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        kind = type(value)
        out[key if type(key) is str else str(key)] = (
            value if value is None or kind is int or kind is bool else _safe(value))
    return out


def _timestamp(value: Any) -> int:
    """A given ``timestamp_ns`` as an int; a value that is not a number is reported
    and the event takes the current time."""
    if type(value) is int:
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            return int(value)
        except (ValueError, OverflowError):
            pass
    guard.report(diagnostics.EVENT_BAD_TIMESTAMP, "request event timestamp_ns %r is not a number of "
                 "nanoseconds; the current time is used", value)
    return time.time_ns()


# --- the recorder --------------------------------------------------------------------------------
#: The one flag the module-level :func:`emit` reads while the process's recorder is inactive.
_ACTIVE = False

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


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


def _fallback_file_stage() -> str:
    """Names the file when neither start() nor the first event had a stage: the
    process's role, or ``r<rank>``, or ``process``."""
    settings = STATE.settings
    if settings is None:
        return "process"
    return settings.role or f"r{settings.rank}"


class RequestEventRecorder:
    """A process-local JSONL sink of request events, at most one run at a time.

    sglang-omni's recorder, method for method: :meth:`start` opens (or joins)
    the run, :meth:`stop` ends it, :meth:`emit` records an event while a run is
    active and is a no-op otherwise. :func:`get_recorder` returns the process's
    recorder, the one the module-level functions and the control endpoints drive;
    a recorder constructed directly is independent of it.

    Co-located stages share one file: the first stage to start (or, when none
    was named, the first event's stage) names it, and each line's ``stage``
    field tells them apart. The file is created with the first event.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = False
        self._run_id: str | None = None
        self._event_dir: str | None = None
        self._stage: str | None = None  # the first stage to start: the fallback of emit()
        self._stages: set[str] = set()
        self._file_stage: str | None = None  # names the file
        self._path: str | None = None
        self._fd: int | None = None
        self._pid = os.getpid()
        self._written = 0
        self._dropped = 0

    # --- lifecycle ---------------------------------------------------------------------------
    def is_active(self) -> bool:
        """Whether a run is being recorded."""
        return self._active

    def active_run_id(self) -> str | None:
        """The run id being recorded, or ``None``."""
        return self._run_id if self._active else None

    def active_path(self) -> str | None:
        """The events file of the active run (absolute), or ``None`` while
        inactive or while no stage has named the file yet."""
        return self._path if self._active else None

    def start(self, run_id: str | None = None, event_dir: str | os.PathLike[str] | None = None,
              stage: str | None = None, **kwargs: Any) -> str | None:
        """Opens (or joins) the run's events file in this process.

        Starting with the active run id (or none) joins the run: ``stage`` is
        added to its stages and the file keeps its name. Starting with another
        run id switches to that run with a warning (counted as
        ``profile_run_switched``); the new directory is checked first, so a
        bad one leaves the active run recording.

        Args:
            run_id: Identifies the run in every line; generated when omitted.
            event_dir: Directory of the events files; default ``<run_dir>/events``
                of the configured run.
            stage: The starting stage: it names the file
                (``events_<stage>_<pid>.jsonl``) and is the stage of events
                emitted without one where no stage is bound. Default: the stage
                bound in the calling thread (:func:`set_active_stage`).
            **kwargs: Accepted and ignored (counted as ``ignored_argument``).

        Returns:
            The absolute path of the events file, or ``None`` when no stage is
            known yet (the first event's stage will name it).

        Raises:
            ProfilingError: No ``event_dir`` and otel_rl is not configured, or
                the directory cannot be created or written (checked now).
        """
        if kwargs:
            guard.ignored_arguments("RequestEventRecorder.start", kwargs)
        return self._start(run_id, event_dir, stage)[1]

    def stop(self, run_id: str | None = None, **kwargs: Any) -> str | None:
        """Closes the active run's file; the files stay on disk.

        Args:
            run_id: Stop only if this run is the one recording; ``None`` stops
                whatever is (a wildcard). A run id that does not match leaves
                the recorder running and is reported (``profile_run_id_mismatch``).
            **kwargs: Accepted and ignored (counted as ``ignored_argument``).

        Returns:
            The path of the file of the run stopped, or ``None`` when nothing
            was stopped (or the run never named a file).
        """
        if kwargs:
            guard.ignored_arguments("RequestEventRecorder.stop", kwargs)
        return self._stop(run_id)[1]

    def close_unlocked(self) -> None:
        """Ends the active run without taking the recorder's lock (sglang-omni's
        internal close; :meth:`stop` is the method to call)."""
        self._deactivate()

    _close_unlocked = close_unlocked

    def capture_active_run_timestamp_ns(self) -> tuple[str, int] | None:
        """``(run_id, now in ns)`` while a run is active, else ``None``: a time
        observed now, to emit later with ``timestamp_ns`` and ``expected_run_id``."""
        run_id = self._run_id if self._active else None
        if run_id is None:
            return None
        return run_id, time.time_ns()

    def status(self) -> dict[str, Any]:
        """``{active, run_id, event_dir, file, events_written, events_lost}``; the
        last run's id, directory and file stay after it stops."""
        with self._lock:
            return {"active": self._active, "run_id": self._run_id, "event_dir": self._event_dir,
                    "file": self._path, "events_written": self._written,
                    "events_lost": self._dropped}

    # --- emit --------------------------------------------------------------------------------
    def emit(self, event_name: str | None = None, request_id: Any = None, stage: str | None = None,
             **extra: Any) -> None:
        """Records one event of the active run; a no-op while inactive.

        Takes both forms of the module-level :func:`emit`, with the same
        keywords (``metadata``, ``timestamp_ns``, ``expected_run_id``; see there).
        """
        if not self._active:
            return
        self._record(event_name, request_id, stage, extra)

    # --- internals ---------------------------------------------------------------------------
    def _set_active(self, value: bool) -> None:
        global _ACTIVE
        self._active = value
        if self is _RECORDER:
            _ACTIVE = value

    def _name_file(self, stage: str) -> None:
        self._file_stage = stage
        self._path = os.path.join(self._event_dir or "",
                                  keys.EVENTS_FILE.format(stage=_file_part(stage), pid=self._pid))

    def _start(self, run_id: Any, event_dir: Any, stage: Any) -> tuple[str, str | None]:
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise ProfilingError(f"run_id must be a non-empty string, got {run_id!r}")
        given = event_dir is not None
        if given:
            if isinstance(event_dir, os.PathLike):
                event_dir = os.fspath(event_dir)
            if not isinstance(event_dir, str) or not event_dir:
                raise ProfilingError(f"event_dir must be a non-empty string, got {event_dir!r}")
        if stage is not None and not isinstance(stage, str):
            stage = str(stage)
        stage = stage or get_active_stage() or None
        directory = (os.path.abspath(os.path.expanduser(event_dir)) if given
                     else default_event_dir())
        with self._lock:
            if self._active:
                if run_id is None or run_id == self._run_id:
                    # Joining the run recording here: the file keeps its first name.
                    if stage is not None:
                        self._stages.add(stage)
                        if self._stage is None:
                            self._stage = stage
                        if self._file_stage is None:
                            self._name_file(stage)
                    return self._run_id, self._path  # type: ignore[return-value]
                _check_writable(directory, given)  # before the active run is given up
                logger.warning("otel_rl: request events were being recorded for run_id %r; "
                               "switching to run_id %r", self._run_id, run_id)
                guard.count(diagnostics.PROFILE_RUN_SWITCHED)
                self._deactivate()
            else:
                _check_writable(directory, given)
            self._run_id = run_id or new_run_id()
            self._event_dir = directory
            self._pid = os.getpid()
            self._stage = stage
            self._stages = {stage} if stage is not None else set()
            self._file_stage = None
            self._path = None
            if stage is not None:
                self._name_file(stage)
            self._fd = None
            self._written = self._dropped = 0
            self._set_active(True)
            return self._run_id, self._path

    def _stop(self, run_id: Any) -> tuple[bool, str | None]:
        with self._lock:
            if not self._active:
                return False, None
            if run_id is not None and run_id != self._run_id:
                guard.report(diagnostics.PROFILE_RUN_ID_MISMATCH,
                             "stop for run_id %r ignored: request events are recorded for run_id %r",
                             run_id, self._run_id)
                return False, None
            path = self._path
            self._deactivate()
            return True, path

    def _deactivate(self) -> None:
        self._set_active(False)
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _open(self, stage: str | None) -> int:
        pid = os.getpid()
        if self._pid != pid:  # a forked child writes a file of its own
            self._pid = pid
            self._path = None
        if self._path is None:
            self._name_file(self._file_stage or stage or _fallback_file_stage())
        self._fd = files.open_fd(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # type: ignore[arg-type]
        return self._fd

    def _record(self, event_name: Any, request_id: Any, stage: Any, extra: dict[str, Any]) -> None:
        try:
            # sglang-omni's keywords ride in ``extra`` so that the inactive path binds
            # no keyword-only defaults (each costs on every call).
            metadata = extra.pop("metadata", None) if extra else None
            timestamp_ns = extra.pop("timestamp_ns", None) if extra else None
            expected_run_id = extra.pop("expected_run_id", None) if extra else None
            ts = time.time_ns() if timestamp_ns is None else _timestamp(timestamp_ns)
            run_id = self._run_id
            if expected_run_id is not None and expected_run_id != run_id:
                # Observed during another run: it belongs to none being recorded now.
                guard.count(diagnostics.EVENTS_OTHER_RUN)
                return
            if type(event_name) is not str:
                if event_name is None:
                    guard.report(diagnostics.EVENT_ERROR, "request event without an event_name dropped "
                                 "(request_id %r)", request_id)
                    return
                event_name = str(event_name)
            if stage is None:
                stage = _stage_var.get() or getattr(_stage_local, "stage", None)
                names_file = stage
                if not stage:
                    stage = self._stage or UNKNOWN_STAGE
                    names_file = self._stage
            else:
                if type(stage) is not str:
                    stage = str(stage)
                names_file = stage
            if metadata is None:
                values = extra
            elif isinstance(metadata, Mapping):
                values = {**metadata, **extra} if extra else metadata
            else:  # otel_rl's keyword form: a value that is not a mapping is a key named "metadata"
                values = {"metadata": metadata, **extra}
            ctx = get_current()
            if request_id is None:
                request_id = current_id(keys.SESSION_ID, ctx)
            elif type(request_id) not in _SCALARS:
                request_id = json_safe(request_id)
            # Content capture and the redaction hook decide what reaches the events file
            # (the span event's copy is handled on the export side).
            meta = privacy.metadata(_safe_metadata(values)) if values else {}
            span = ctx.get(_SPAN_KEY)
            if span is not None and span.is_recording():
                attrs: dict[str, Any] = {keys.PROFILE_RUN_ID: run_id}
                if request_id is not None:
                    attrs[keys.REQUEST_ID] = (request_id if type(request_id) in _SCALARS
                                              else str(request_id))
                attrs[keys.STAGE] = stage
                if values:
                    flatten_attributes(keys.ARGS_PREFIX, values, attrs)
                span.add_event(event_name, attrs, ts)
            self._write(event_name, request_id, stage, names_file, ts, run_id, meta)
        except Exception as exc:  # noqa: BLE001 - profiling must never break serving
            guard.report(diagnostics.EVENT_ERROR, "request event %r failed: %r", event_name, exc)

    def _write(self, event_name: str, request_id: Any, stage: str, names_file: str | None, ts: int,
               run_id: str | None, metadata: dict[str, Any]) -> None:
        record = {
            "request_id": request_id, "stage": stage, "event_name": event_name, "timestamp_ns": ts,
            "run_id": run_id, "pid": os.getpid(), "metadata": metadata,
        }
        try:
            line = orjson.dumps(record) + b"\n"
        except TypeError:  # an odd request id or event name
            line = orjson.dumps(json_safe(record)) + b"\n"
        with self._lock:
            if not self._active or self._run_id != run_id:
                return  # stopped, or another run started, since the event was taken
            try:
                fd = (self._fd if self._fd is not None and self._pid == os.getpid()
                      else self._open(names_file))
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                self._written += 1
            except OSError as exc:
                # Closed, so the next event opens the file again (the disk may recover).
                self._close_fd()
                self._dropped += 1
                guard.count(diagnostics.EVENTS_LOST)
                guard.report(diagnostics.EVENT_WRITE_ERROR, "cannot write request events to %s: %s",
                             self._path or self._event_dir, exc)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        if self._fd is not None:
            try:
                os.close(self._fd)  # the child's copy; the parent keeps writing its own
            except OSError:
                pass
            self._fd = None


_RECORDER = RequestEventRecorder()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_RECORDER._after_fork)  # noqa: SLF001


def get_recorder() -> RequestEventRecorder:
    """The process's recorder: the one :func:`emit`, :func:`start`, :func:`stop`
    and the control endpoints use."""
    return _RECORDER


# --- module-level API ----------------------------------------------------------------------------
def start(run_id: str | None = None, event_dir: str | os.PathLike[str] | None = None,
          stage: str | None = None, **kwargs: Any) -> str:
    """Starts recording request events in this process (the local form of
    ``/start_request_profile``; the control endpoints reach every process).

    Starting again with the same run id (or none) while recording joins the
    run; starting with another run id switches to it with a warning (the
    control endpoints answer 409 instead). The file is named after ``stage``,
    else the stage bound in the calling thread (:func:`set_active_stage`),
    else the first event's stage.

    Args:
        run_id: Identifies the run in every line; generated when omitted.
        event_dir: Directory of the events files; default ``<run_dir>/events``
            of the configured run.
        stage: The starting stage (see :meth:`RequestEventRecorder.start`).
        **kwargs: Accepted and ignored (counted as ``ignored_argument``).

    Returns:
        The run id (``get_recorder().start`` returns the file's path instead).

    Raises:
        ProfilingError: No ``event_dir`` and otel_rl is not configured, or the
            directory cannot be created or written (checked now, with a probe file).
    """
    if kwargs:
        guard.ignored_arguments("events.start", kwargs)
    return _RECORDER._start(run_id, event_dir, stage)[0]  # noqa: SLF001


def stop(run_id: str | None = None, **kwargs: Any) -> bool:
    """Stops recording; the files stay on disk.

    Args:
        run_id: Stop only if this run is the one recording; ``None`` stops
            whatever is (sglang-omni's wildcard). A run id that does not match
            leaves the recorder running and is reported (counted as
            ``profile_run_id_mismatch``).
        **kwargs: Accepted and ignored (counted as ``ignored_argument``).

    Returns:
        Whether a run was stopped (``get_recorder().stop`` returns the file's path).
    """
    if kwargs:
        guard.ignored_arguments("events.stop", kwargs)
    return _RECORDER._stop(run_id)[0]  # noqa: SLF001


def is_active() -> bool:
    """Whether request events are being recorded in this process."""
    return _ACTIVE


def active_run_id() -> str | None:
    """The run id being recorded, or ``None``."""
    return _RECORDER.active_run_id()


def status() -> dict[str, Any]:
    """``{active, run_id, event_dir, file, events_written, events_lost}`` of this process."""
    return _RECORDER.status()


def emit(event_name: str | None = None, request_id: Any = None, stage: str | None = None,
         **extra: Any) -> None:
    """Records one request event; a no-op (one flag check) while the recorder is inactive.

    Two forms, freely mixed::

        emit("scheduler_prefill_start", request_id=rid, batch_size=8)          # otel_rl
        emit(request_id=rid, stage=None, event_name="scheduler_prefill_start",
             metadata={"batch_size": 8}, timestamp_ns=t_ns)                    # sglang-omni

    Args:
        event_name: Lowercase snake_case, prefixed with the layer that owns it
            (``scheduler_prefill_start``, ``stage_hop_sent``...). An event
            without one is dropped and reported (``event_error``).
        request_id: The request; default: the current otel_rl session id
            (``rl.session.id`` from baggage), else ``None``.
        stage: The stage emitting it. ``None``: the bound active stage
            (:func:`set_active_stage`), else the stage the recorder was
            started with, else ``"unknown"``. An explicit stage always wins.
        **extra: Metadata: small scalars (ids, counts, durations, modality,
            error strings). Tensors and arrays are summarised as
            ``{"__tensor_summary__": true, type, shape, dtype, device}`` and
            never materialised (0-d CPU tensors and numpy scalars become plain
            numbers). Three keywords are not metadata (sglang-omni's):

    Keyword Args:
        metadata: The event's metadata as a mapping (sglang-omni's form); the
            keyword arguments are added to it. A value that is not a mapping is
            kept as a metadata key named ``metadata``.
        timestamp_ns: The event's time (``time.time_ns()`` clock) in the file
            and on the span event; default: now.
        expected_run_id: Record only if this run is the one recording (a time
            captured during an earlier run is not written into a later one;
            such events are counted as ``events_other_run``).
    """
    if not _ACTIVE:
        return
    _RECORDER._record(event_name, request_id, stage, extra)  # noqa: SLF001


# --- model-path activity (sglang-omni's helpers) -------------------------------------------------
@functools.cache
def read_host_boot_id() -> str | None:
    """This host's boot id (``/proc/sys/kernel/random/boot_id``), read once; ``None``
    where there is none. Monotonic clock readings compare only within one boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def emit_model_path(event_name: str, request_id: Any, **extra: Any) -> None:
    """Emits ``event_name`` (stage: the bound one) with a monotonic clock reading:
    metadata ``clock="CLOCK_MONOTONIC"``, ``host_boot_id``, ``monotonic_ns`` and ``extra``.
    Reads no clock while the recorder is inactive."""
    if not _ACTIVE:
        return
    emit(request_id=request_id, stage=None, event_name=event_name,
         metadata={"clock": "CLOCK_MONOTONIC", "host_boot_id": read_host_boot_id(),
                   "monotonic_ns": time.monotonic_ns(), **extra})


def emit_model_path_start(request_id: Any) -> None:
    """``model_path_start`` for ``request_id`` (see :func:`emit_model_path`)."""
    emit_model_path("model_path_start", request_id)


def emit_model_path_end(request_id: Any, *, status: str) -> None:
    """``model_path_end`` for ``request_id`` with its ``status`` (see :func:`emit_model_path`)."""
    emit_model_path("model_path_end", request_id, status=status)
