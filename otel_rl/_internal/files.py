"""Every file and directory otel_rl creates is created here, owner-only by default.

Run files can hold what a job would rather not share (payload values, request
ids, hostnames), so new files get ``OTEL_RL_FILE_MODE`` (``0600`` by default)
and new directories the same bits plus the matching execute bits (``0700``).
The process umask can only take bits away. Existing files and directories keep
their permissions.

A run root may be shared with other users, so nothing here follows what
someone else could have planted: a run file is never opened through a symbolic
link (``O_NOFOLLOW``), must be a regular file owned by this user (or root), and
is only written in a directory owned by this user (or root); a file that must
be new (a temporary file renamed into place) is created with ``O_EXCL``. A
refusal is an :class:`UnsafePathError` saying which path and why.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import IO, Any

DEFAULT_FILE_MODE = 0o600

_mode = DEFAULT_FILE_MODE

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# A FIFO planted where a run file goes would block open() until a reader comes.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class UnsafePathError(PermissionError):
    """A run file or directory otel_rl refuses to use (a symbolic link, another
    user's file or directory, not a regular file); the message says which and why."""


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


def _trusted_owners() -> tuple[int, ...] | None:
    """Owners whose files and directories may be written: this user and root
    (``None`` where the platform has no owners to compare)."""
    if not hasattr(os, "geteuid"):
        return None
    return (os.geteuid(), 0)


def _foreign(uid: int) -> str:
    return f"owned by uid {uid}, not by this user (uid {os.geteuid()})"


def dir_problem(path: str, file_mode: int | None = None) -> str | None:
    """Why run files must not be written into the directory ``path``, or ``None``
    (also when it does not exist yet: it will be created owner-only).

    Refused: a symbolic link owned by another user (they can point it anywhere
    at any time), a directory owned by another user (they can plant files and
    links in it), a directory every user may write to without the sticky bit
    (beyond what ``OTEL_RL_FILE_MODE`` grants: ``file_mode``, default the current
    one), something that is not a directory.
    """
    owners = _trusted_owners()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be inspected: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        if owners is not None and st.st_uid not in owners:
            return f"{path} is a symbolic link {_foreign(st.st_uid)}"
        try:
            st = os.stat(path)
        except OSError as exc:
            return f"{path} is a symbolic link that cannot be followed: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if owners is not None and st.st_uid not in owners:
        return f"{path} is {_foreign(st.st_uid)}"
    # Write access for every user (beyond what OTEL_RL_FILE_MODE grants) lets anyone
    # remove or replace run files, unless the sticky bit keeps each file to its owner.
    # Group write is allowed: with a user-private group (umask 002, the default on
    # many distributions) a directory the user made is group-writable and only theirs.
    granted = dir_mode() if file_mode is None else dir_mode_for(file_mode)
    wider = stat.S_IMODE(st.st_mode) & stat.S_IWOTH & ~granted
    if wider and not st.st_mode & stat.S_ISVTX:
        who = "other users"
        return (f"{path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o}, no sticky bit), "
                f"who could replace the files in it (remove that access with chmod go-w, or grant "
                f"it on purpose with OTEL_RL_FILE_MODE)")
    return None


def makedirs(path: str) -> None:
    """Creates ``path`` and any missing parent, each with :func:`dir_mode`
    (``os.makedirs`` gives the mode to the last directory only).

    Raises:
        UnsafePathError: ``path`` exists but must not be written into
            (:func:`dir_problem`).
        OSError: It cannot be created.
    """
    path = os.fspath(path)
    if not path:
        return
    makedirs_unchecked(path)
    problem = dir_problem(path)
    if problem is not None:
        raise UnsafePathError(errno.EPERM, f"refusing to write run files in {problem}")


def makedirs_unchecked(path: str) -> None:
    # Parents of a run directory (the file root, /tmp...) may belong to anyone;
    # only the directory files go into is checked.
    if not path or os.path.isdir(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    if parent != os.path.abspath(path):
        makedirs_unchecked(parent)
    try:
        os.mkdir(path, dir_mode())
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def _refuse(path: str, why: str) -> UnsafePathError:
    return UnsafePathError(errno.EPERM, f"refusing to open {path}: {why}")


def _open_checked(path: str, flags: int) -> int:
    """``os.open`` that follows no link, blocks on no FIFO, and accepts only a
    regular file owned by this user (or root)."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK, _mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise _refuse(path, "it is a symbolic link (run files are never opened through one; "
                          "someone may have planted it to redirect the writes)") from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader
            raise _refuse(path, "it is not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "it is not a regular file")
        owners = _trusted_owners()
        if owners is not None and st.st_uid not in owners:
            raise _refuse(path, f"it is {_foreign(st.st_uid)}")
        if _NONBLOCK and not flags & _NONBLOCK:
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_fd(path: str, flags: int) -> int:
    """``os.open(path, flags)`` creating the file with :func:`file_mode`, and its
    directory with :func:`dir_mode`.

    Raises:
        UnsafePathError: ``path`` is a symbolic link, not a regular file, or
            another user's file, or its directory is another user's.
        OSError: It cannot be opened.
    """
    makedirs(os.path.dirname(path))
    return _open_checked(path, flags)


def read_own(path: str, limit: int) -> bytes:
    """The first ``limit`` bytes of a regular file of this user (or root), not
    read through a symbolic link.

    Raises:
        UnsafePathError: ``path`` is a symbolic link, not a regular file, or
            another user's file.
        OSError: It cannot be read.
    """
    fd = _open_checked(path, os.O_RDONLY)
    try:
        chunks = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _opener(path: str, flags: int) -> int:
    if flags & os.O_TRUNC and flags & os.O_CREAT:
        # A file written whole (a temporary file renamed into place) is created
        # new: never truncating, and so never writing, a file planted there.
        flags = (flags & ~os.O_TRUNC) | os.O_EXCL
        try:
            return _open_checked(path, flags)
        except FileExistsError:
            _remove_own_file(path)
            return _open_checked(path, flags)
    return _open_checked(path, flags)


def _remove_own_file(path: str) -> None:
    """Removes a regular file of this user left at ``path`` (a crashed writer's);
    anything else there is refused."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "it is a symbolic link (run files are never opened through one; "
                      "someone may have planted it to redirect the writes)")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "it is not a regular file")
    owners = _trusted_owners()
    if owners is not None and st.st_uid not in owners:
        raise _refuse(path, f"it is {_foreign(st.st_uid)}")
    os.unlink(path)


def open_private(path: str, mode: str = "wb", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` creating the file with :func:`file_mode` (and its
    directory with :func:`dir_mode`); ``w`` modes create a new file.

    Raises:
        UnsafePathError: As :func:`open_fd`.
        OSError: It cannot be opened.
    """
    makedirs(os.path.dirname(path))
    return open(path, mode, opener=_opener, **kwargs)  # noqa: SIM115 - the caller closes it
