"""Live profiling control across this process's life: configure, shutdown, fork.

``configure()`` turns CUDA-synchronised timing on (where CUDA is available),
serves the control port given in the environment and starts following the
job's control directory; ``shutdown()`` undoes all of it and stops request
events and the torch profiler (traces written); a forked child leaves the
parent's watcher and servers behind.
"""

from __future__ import annotations

import logging
import os

from .. import diagnostics, events, guard, keys
from ..config import Settings
from ..recording.cuda_sync import set_cuda_sync
from .broadcast import Watcher
from .http import serve_control
from .job import JOB
from .operations import apply_state
from .torch_profiler import PROFILER, cuda_available

logger = logging.getLogger("otel_rl")


def on_configure(settings: Settings) -> None:
    """Starts what ``settings`` asks of live control (called by configure())."""
    if settings.cuda_sync:
        on = cuda_available()
        if not on:
            logger.info("otel_rl: OTEL_RL_CUDA_SYNC is set but CUDA is not available: no synchronisation")
        set_cuda_sync(on)
    if settings.control_port is not None:
        try:
            JOB.server = serve_control(settings.control_port, settings.control_host,
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
            JOB.control_dir = control_dir
            JOB.watcher = Watcher(control_dir, settings.control_poll_ms / 1000.0, apply_state)
        except OSError as exc:
            JOB.control_dir = None
            guard.report(diagnostics.CONTROL_ERROR, "live profiling control off: cannot use %s: %s",
                         control_dir, exc)


def on_shutdown(timeout_s: float) -> None:
    """Stops the watcher, the server configure() started, request events and the
    torch profiler (called by shutdown())."""
    set_cuda_sync(False)
    watcher, JOB.watcher = JOB.watcher, None
    if watcher is not None:
        watcher.stop(min(timeout_s, 1.0))
    JOB.control_dir = None
    server, JOB.server = JOB.server, None
    if server is not None:
        server.close()
    with JOB.apply_lock:
        events.stop()
        PROFILER.shutdown(timeout_s)


def after_fork_in_child() -> None:
    """Forgets the parent's control in a forked child (a DataLoader worker...).

    The child does not join job-wide control unless it calls configure()
    itself: it has no watcher or server thread, and the parent's lock may have
    been held at the fork.
    """
    JOB.forget()
