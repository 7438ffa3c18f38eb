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

The recorder's code lives in ``otel_rl._internal.events`` (shared with the live
profiling control); this module is its public face.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from ._internal.events import recorder as _recorder
from ._internal.events import (
    STAGE_LOCAL,
    STAGE_VAR,
    ProfilingError,
    RequestEvent,
    RequestEventRecorder,
    active_run_id,
    emit,
    get_active_stage,
    get_recorder,
    is_active,
    json_default,
    new_run_id,
    reset_active_stage,
    set_active_stage,
    start,
    status,
    stop,
)
from ._internal.events import (  # noqa: F401 - importable from here, as before the move
    UNKNOWN_STAGE,
    StageToken,
    default_event_dir,
)

__all__ = [
    "ProfilingError", "RequestEvent", "RequestEventRecorder", "active_run_id", "emit",
    "emit_model_path", "emit_model_path_end", "emit_model_path_start", "get_active_stage",
    "get_recorder", "is_active", "json_default", "new_run_id", "read_host_boot_id",
    "reset_active_stage", "set_active_stage", "start", "status", "stop",
]

# sglang-omni's names: the two slots of the active stage (its tests inspect them) and
# the earlier name of json_default.
_active_stage_cv = STAGE_VAR
_thread_active_stage = STAGE_LOCAL
_json_default = json_default


# --- model-path activity (sglang-omni's helpers) -------------------------------------------------
# Defined here, not with the recorder: they look up ``time`` and ``read_host_boot_id``
# in this module, so patching them here (as sglang-omni's tests do) reaches them.
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
    if not _recorder.ACTIVE:
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


# Tracebacks, reprs, pickles and the API docs name the public module, as they did
# before the recorder's code moved to otel_rl._internal.events.
for _public in (*__all__, "StageToken", "default_event_dir"):
    globals()[_public].__module__ = __name__
del _public
