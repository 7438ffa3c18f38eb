"""Request events' core: sglang-omni's request-event recorder (floor 4).

``otel_rl.events`` is the public face of this package; the live profiling
control (``_internal.control``) drives the process's recorder through it too.

* :mod:`.stage` - the active stage bound by ``set_active_stage``;
* :mod:`.line` - one line of an events file: :class:`RequestEvent`, metadata
  made fit for JSON (tensors summarised);
* :mod:`.run` - :class:`ProfilingError`, run ids and event directories;
* :mod:`.recorder` - :class:`RequestEventRecorder`, the process's recorder and
  the module-level ``emit``/``start``/``stop``/``status``.
"""

from .line import RequestEvent, json_default
from .recorder import (
    RequestEventRecorder,
    active_run_id,
    after_fork_in_child,
    emit,
    get_recorder,
    is_active,
    start,
    status,
    stop,
)
from .run import ProfilingError, default_event_dir, new_run_id
from .stage import (
    STAGE_LOCAL,
    STAGE_VAR,
    UNKNOWN_STAGE,
    StageToken,
    get_active_stage,
    reset_active_stage,
    set_active_stage,
)

__all__ = [
    "STAGE_LOCAL", "STAGE_VAR", "UNKNOWN_STAGE", "ProfilingError", "RequestEvent",
    "RequestEventRecorder", "StageToken", "active_run_id", "after_fork_in_child",
    "default_event_dir", "emit", "get_active_stage", "get_recorder", "is_active", "json_default",
    "new_run_id", "reset_active_stage", "set_active_stage", "start", "status", "stop",
]
