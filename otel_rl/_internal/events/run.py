"""A recording run: its errors, its id, and where its files go.

A run is named by a run id (given, or ``YYYYmmdd-HHMMSS-<hex>``) and writes
``events_<stage>_<pid>.jsonl`` files into an event directory (default
``<run_dir>/events``), which is checked with a probe file before the run starts.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
import time

from .. import files, keys
from ..state import STATE


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


_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def new_run_id() -> str:
    """A fresh run id: ``YYYYmmdd-HHMMSS-<6 hex digits>`` (UTC)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def file_part(text: str) -> str:
    """``text`` fit for a file name: anything but letters, digits, ``.``, ``_`` and ``-`` as ``_``."""
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


def check_writable(event_dir: str, given: bool) -> None:
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


def fallback_file_stage() -> str:
    """Names the file when neither start() nor the first event had a stage: the
    process's role, or ``r<rank>``, or ``process``."""
    settings = STATE.settings
    if settings is None:
        return "process"
    return settings.role or f"r{settings.rank}"

