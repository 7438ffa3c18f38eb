"""This process's part in job-wide profiling control: who it is and what it runs.

:data:`JOB` holds what ``configure()`` sets up (the control directory it
follows, its watcher, the server it started) and the lock that serialises every
change of this process's profiling state; :data:`HOST` and :data:`PIDNS` tell
this process's acknowledgements apart from those of other machines and
containers.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from typing import Any

from ..config import Settings, resolve
from ..state import STATE

#: The largest JSON document control reads: a request body, a state or acknowledgement file.
MAX_BODY = 1 << 20
#: This machine's name, fit for a file name.
HOST = re.sub(r"[^A-Za-z0-9.-]+", "_", socket.gethostname()) or "host"


def _pid_namespace() -> int | None:
    # Containers sharing a hostname (host networking) still have pid namespaces of
    # their own: a pid is only checked for liveness inside the same one.
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


#: This process's pid namespace (``None`` where there is no ``/proc``).
PIDNS = _pid_namespace()


class Job:
    """This process's part in job-wide control (set up by configure()).

    Attributes:
        control_dir: The control directory followed, or ``None``.
        applied_seq: The sequence number of the latest desired state applied here.
        watcher: The ``broadcast.Watcher`` following the control directory.
        server: The ``http.ControlServer`` configure() started.
        servers: Every server ``serve_control()`` started in this process.
        apply_lock: Serialises every change of this process's profiling state
            (requests and the watcher).
    """

    def __init__(self) -> None:
        self.control_dir: str | None = None
        self.applied_seq = 0
        # Typed loosely: the classes live on modules that build on this one.
        self.watcher: Any = None
        self.server: Any = None
        self.servers: list[Any] = []
        self.apply_lock = threading.RLock()

    def forget(self) -> None:
        """Drops everything but the applied sequence number: a forked child has no
        watcher or server thread, and the parent's lock may be held."""
        self.control_dir = None
        self.watcher = None
        self.server = None
        self.servers.clear()
        self.apply_lock = threading.RLock()


JOB = Job()


def current_settings() -> Settings:
    """The configured settings, else those the environment gives."""
    return STATE.settings if STATE.settings is not None else resolve()
