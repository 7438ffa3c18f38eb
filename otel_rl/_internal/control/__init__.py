"""Live profiling control: sglang-omni's HTTP endpoints, broadcast to every process of the job (floor 5).

* :mod:`.operations` - start/stop a profile (request events plus a torch
  profiler window) or request events only, and the status, callable from Python;
* :mod:`.broadcast` - the job's desired state in ``<run_dir>/control/``, the
  watcher every process runs and the acknowledgements;
* :mod:`.http` - the endpoints over HTTP: :func:`control_app` (ASGI) and
  :func:`serve_control` (a standalone server);
* :mod:`.lifecycle` - what configure(), shutdown() and a fork do to control;
* :mod:`.job` - this process's part in the job;
* :mod:`.torch_profiler` - torch profiler windows and CUDA-synchronised timing.
"""

from .broadcast import read_state, registered
from .http import ControlServer, control_app, handle_request, serve_control
from .lifecycle import after_fork_in_child, on_configure, on_shutdown
from .operations import (
    profile_status,
    start_profile,
    start_request_profile,
    stop_profile,
    stop_request_profile,
)

__all__ = [
    "ControlServer", "after_fork_in_child", "control_app", "handle_request", "on_configure",
    "on_shutdown", "profile_status", "read_state", "registered", "serve_control", "start_profile",
    "start_request_profile", "stop_profile", "stop_request_profile",
]
