"""Every file and directory otel_rl creates is created here, owner-only by default.

Run files can hold what a job would rather not share (payload values, request
ids, hostnames), so new files get ``OTEL_RL_FILE_MODE`` (``0600`` by default)
and new directories the same bits plus the matching execute bits (``0700``).
The process umask can only take bits away. Existing files and directories keep
their permissions.
"""

from __future__ import annotations

import os
from typing import IO, Any

DEFAULT_FILE_MODE = 0o600

_mode = DEFAULT_FILE_MODE


def dir_mode_for(file_mode: int) -> int:
    """The directory mode matching ``file_mode``: an execute bit wherever a read bit is."""
    return file_mode | ((file_mode & 0o444) >> 2)


def set_mode(file_mode: int) -> None:
    """Sets the permission bits of files created from now on (``configure`` calls it)."""
    global _mode
    _mode = file_mode & 0o777


def file_mode() -> int:
    return _mode


def dir_mode() -> int:
    return dir_mode_for(_mode)


def makedirs(path: str) -> None:
    """Creates ``path`` and any missing parent, each with :func:`dir_mode`
    (``os.makedirs`` gives the mode to the last directory only)."""
    path = os.fspath(path)
    if not path or os.path.isdir(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    if parent != os.path.abspath(path):
        makedirs(parent)
    try:
        os.mkdir(path, dir_mode())
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def open_fd(path: str, flags: int) -> int:
    """``os.open(path, flags)`` creating the file with :func:`file_mode`, and its
    directory with :func:`dir_mode`; raises ``OSError``."""
    makedirs(os.path.dirname(path))
    return os.open(path, flags, _mode)


def _opener(path: str, flags: int) -> int:
    return os.open(path, flags, _mode)


def open_private(path: str, mode: str = "wb", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` creating the file with :func:`file_mode` (and its
    directory with :func:`dir_mode`)."""
    makedirs(os.path.dirname(path))
    return open(path, mode, opener=_opener, **kwargs)  # noqa: SIM115 - the caller closes it
