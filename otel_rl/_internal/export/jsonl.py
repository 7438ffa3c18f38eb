"""Appending JSON lines so that a crash leaves every completed line readable."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import orjson

from .. import diagnostics, files, guard
from ..payload import json_safe

try:
    from ._session_processor import drain_records as _drain_compiled
except ImportError:  # built without a C compiler: the session step adds its lines itself
    _drain_compiled = None

#: Bytes appended to each file by this process (path -> bytes), for the run summary.
BYTES_WRITTEN: dict[str, int] = {}
_bytes_lock = threading.Lock()


def bytes_written() -> dict[str, int]:
    """A snapshot of :data:`BYTES_WRITTEN`."""
    with _bytes_lock:
        return dict(BYTES_WRITTEN)


#: The options of every JSON line this module writes (the compiled session step writes them too).
LINE_OPTION = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


def dumps_line(obj: Any) -> bytes:
    """One JSON line; values orjson cannot encode are made JSON-safe first."""
    try:
        return orjson.dumps(obj, option=LINE_OPTION)
    except TypeError:
        return orjson.dumps(json_safe(obj), option=orjson.OPT_APPEND_NEWLINE)


#: Open files whose locks a forked child must make anew (a parent thread may hold one).
_files: weakref.WeakSet[AppendOnlyFile] = weakref.WeakSet()


def after_fork_in_child() -> None:
    """Renews the byte counts' lock and every open file's lock in a forked child
    (the parent's export thread may have held one at the fork)."""
    global _bytes_lock
    _bytes_lock = threading.Lock()
    for f in list(_files):
        f._lock = threading.Lock()


class AppendOnlyFile:
    """A file written only by appending whole batches of lines.

    Opened lazily in append mode (a forked child or another writer never
    overwrites), written unbuffered (once ``write`` returns, a crash of this
    process cannot lose the lines), and a batch cut short by an error is
    followed by a newline so the next batch starts on a line of its own.

    The file is followed by its path: when the path no longer names the open
    file (the run directory was deleted, or the file was rotated away), the
    next write goes to a new file created there. Lines this process wrote to a
    deleted file are counted as ``deleted_file_lines_lost`` (``run_file_deleted``
    is logged once); a moved file keeps its lines (``run_file_moved``).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._dirty = False
        # (device, inode) of the open file, and the lines this process wrote to it.
        self._ident: tuple[int, int] | None = None
        self._lines = 0
        # Serialises writers: a file let go (closed) while another thread writes
        # to its descriptor could send that write to whatever reuses the number.
        self._lock = threading.Lock()
        _files.add(self)

    def open(self) -> int:
        """Opens (creating parent directories) if not yet open; raises ``OSError``."""
        with self._lock:
            return self._open()

    def _open(self) -> int:
        if self._fd is None:
            fd = files.open_fd(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            st = os.fstat(fd)
            self._fd, self._ident, self._lines = fd, (st.st_dev, st.st_ino), 0
        return self._fd

    def write(self, data: bytes | bytearray, count: int) -> None:
        """Appends ``data``, which holds ``count`` records (lines, or trace events: what
        is counted as lost if the file is deleted); raises ``OSError`` when it cannot."""
        with self._lock:
            self._write(data, count)

    def _write(self, data: bytes | bytearray, count: int) -> None:
        if self._fd is not None:
            # One stat per batch: cheap next to the write, and the only way to
            # notice a file deleted under us (writes to it succeed, then vanish).
            self._follow_path()
        self._open()
        view = memoryview(b"\n" + bytes(data) if self._dirty else data)
        self._dirty = True
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
            with _bytes_lock:
                BYTES_WRITTEN[self.path] = BYTES_WRITTEN.get(self.path, 0) + n
        self._dirty = False
        self._lines += count

    def _follow_path(self) -> None:
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError:
            return  # cannot tell (a permission change): keep writing where we were
        if st is not None and (st.st_dev, st.st_ino) == self._ident:
            return
        self._let_go()

    def _let_go(self) -> None:
        """Closes a file its path no longer names, counting what went with it."""
        fd, self._fd = self._fd, None
        try:
            deleted = os.fstat(fd).st_nlink == 0
        except OSError:
            deleted = False
        try:
            os.close(fd)
        except OSError:
            pass
        lines, self._lines = self._lines, 0
        self._dirty = False  # a new file starts clean
        if deleted:
            if lines:
                guard.count(diagnostics.DELETED_FILE_LINES_LOST, lines)
            guard.report(diagnostics.RUN_FILE_DELETED, "%s was deleted while otel_rl was writing it: the %d lines "
                         "this process wrote to it are lost (counted); later lines go to a new file "
                         "there", self.path, lines)
        else:
            guard.report(diagnostics.RUN_FILE_MOVED, "%s was moved away (rotated?) while otel_rl was writing it: "
                         "its lines stay in the moved file, later lines go to a new file there",
                         self.path)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._fd is None:
            return
        try:
            deleted = os.fstat(self._fd).st_nlink == 0
        except OSError:
            deleted = False
        if deleted:
            self._let_go()  # deleted after the last write: what it held is counted
            return
        try:
            os.close(self._fd)
        except OSError:
            pass
        self._fd = None


class JsonlAppender:
    """Buffers JSON lines and appends them with one ``write`` per batch.

    The file is opened in append mode, so concurrent writers (a forked child)
    never overwrite each other and a batch is written as whole lines.
    """

    def __init__(self, path: str, flush_threshold: int = 1, kind: str = "file") -> None:
        self.path = path
        self._threshold = max(1, flush_threshold)
        self._kind = kind
        # One growing buffer rather than a list of lines: each orjson result
        # kept alive holds far more memory than its length.
        self._buffer = bytearray()
        self._count = 0
        self._lock = threading.Lock()
        self._file = AppendOnlyFile(path)
        self.written = 0

    def _drained(self) -> None:
        """Adds the lines the compiled session step keeps for this appender to the buffer,
        so that lines keep their order (the caller holds the lock)."""
        if _drain_compiled is not None:
            try:
                _drain_compiled(self)
            except Exception as exc:  # noqa: BLE001 - the lines are lost, the appender goes on
                guard.report(f"{self._kind}_write_error", "cannot buffer %s: %r", self.path, exc)

    def add(self, obj: Any) -> None:
        try:  # dumps_line, inlined: a session record is added per session
            line = orjson.dumps(obj, option=LINE_OPTION)
        except TypeError:
            line = dumps_line(obj)
        with self._lock:
            self._drained()
            self._buffer += line
            self._count += 1
            if self._count < self._threshold:
                return
            data, count = self._take()
        self._write(data, count)

    def _take(self) -> tuple[bytearray, int]:
        self._drained()
        data, count = self._buffer, self._count
        self._buffer, self._count = bytearray(), 0
        return data, count

    def flush(self) -> bool:
        with self._lock:
            data, count = self._take()
        return self._write(data, count) if count else True

    def _write(self, data: bytearray, count: int) -> bool:
        try:
            self._file.write(data, count)
            self.written += count
            return True
        except OSError as exc:
            guard.count(f"{self._kind}_lines_lost", count)
            guard.report(f"{self._kind}_write_error", "cannot write %s: %s", self.path, exc)
            return False

    def close(self) -> None:
        self.flush()
        self._file.close()
