"""The request-event recorder: the process's JSONL sink and the module-level API.

:class:`RequestEventRecorder` is sglang-omni's recorder; :func:`get_recorder`
returns the process's own, the one the module-level :func:`emit`, :func:`start`,
:func:`stop` and the live profiling control drive. While it is inactive,
:func:`emit` returns after reading one module flag. ``otel_rl.events`` is the
public face of this module.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import orjson
from opentelemetry.trace.propagation import _SPAN_KEY

from .. import diagnostics, files, guard, keys
from ..payload import flatten_attributes, json_safe
from ..recording import privacy
from ..recording.spans import get_current
from ..recording.tracking import current_id
from .line import SCALARS, safe_metadata, timestamp_ns_of
from .run import (ProfilingError, check_writable, default_event_dir, fallback_file_stage, file_part,
                  new_run_id)
from .stage import STAGE_LOCAL, STAGE_VAR, UNKNOWN_STAGE, get_active_stage

logger = logging.getLogger("otel_rl")

#: Whether the process's recorder is recording: the one flag the module-level
#: :func:`emit` reads while it is not. Read it, never set it.
ACTIVE = False


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
        global ACTIVE
        self._active = value
        if self is _RECORDER:
            ACTIVE = value

    def _name_file(self, stage: str) -> None:
        self._file_stage = stage
        self._path = os.path.join(self._event_dir or "",
                                  keys.EVENTS_FILE.format(stage=file_part(stage), pid=self._pid))

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
                check_writable(directory, given)  # before the active run is given up
                logger.warning("otel_rl: request events were being recorded for run_id %r; "
                               "switching to run_id %r", self._run_id, run_id)
                guard.count(diagnostics.PROFILE_RUN_SWITCHED)
                self._deactivate()
            else:
                check_writable(directory, given)
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
            self._name_file(self._file_stage or stage or fallback_file_stage())
        self._fd = files.open_fd(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # type: ignore[arg-type]
        return self._fd

    def _record(self, event_name: Any, request_id: Any, stage: Any, extra: dict[str, Any]) -> None:
        try:
            # sglang-omni's keywords ride in ``extra`` so that the inactive path binds
            # no keyword-only defaults (each costs on every call).
            metadata = extra.pop("metadata", None) if extra else None
            timestamp_ns = extra.pop("timestamp_ns", None) if extra else None
            expected_run_id = extra.pop("expected_run_id", None) if extra else None
            ts = time.time_ns() if timestamp_ns is None else timestamp_ns_of(timestamp_ns)
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
                stage = STAGE_VAR.get() or getattr(STAGE_LOCAL, "stage", None)
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
            elif type(request_id) not in SCALARS:
                request_id = json_safe(request_id)
            # Content capture and the redaction hook decide what reaches the events file
            # (the span event's copy is handled on the export side).
            meta = privacy.metadata(safe_metadata(values)) if values else {}
            span = ctx.get(_SPAN_KEY)
            if span is not None and span.is_recording():
                attrs: dict[str, Any] = {keys.PROFILE_RUN_ID: run_id}
                if request_id is not None:
                    attrs[keys.REQUEST_ID] = (request_id if type(request_id) in SCALARS
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


def after_fork_in_child() -> None:
    """Renews the process's recorder in a forked child: a lock of its own, and no
    copy of the parent's file descriptor (the child's first event opens a file
    named after its own pid). Called by the runtime's fork hook."""
    _RECORDER._after_fork()  # noqa: SLF001


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
    return ACTIVE


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
    if not ACTIVE:
        return
    _RECORDER._record(event_name, request_id, stage, extra)  # noqa: SLF001
