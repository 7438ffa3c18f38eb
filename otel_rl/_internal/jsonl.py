"""Appending JSON lines so that a crash leaves every completed line readable."""

from __future__ import annotations

import os
import threading
from typing import Any

import orjson

from . import files, guard
from .payload import json_safe

#: Bytes appended to each file by this process (path -> bytes), for the run summary.
BYTES_WRITTEN: dict[str, int] = {}
_bytes_lock = threading.Lock()


def bytes_written() -> dict[str, int]:
    """A snapshot of :data:`BYTES_WRITTEN`."""
    with _bytes_lock:
        return dict(BYTES_WRITTEN)


def dumps_line(obj: Any) -> bytes:
    """One JSON line; values orjson cannot encode are made JSON-safe first."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
    except TypeError:
        return orjson.dumps(json_safe(obj)) + b"\n"


class AppendOnlyFile:
    """A file written only by appending whole batches of lines.

    Opened lazily in append mode (a forked child or another writer never
    overwrites), written unbuffered (once ``write`` returns, a crash of this
    process cannot lose the lines), and a batch cut short by an error is
    followed by a newline so the next batch starts on a line of its own.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._dirty = False

    def open(self) -> int:
        """Opens (creating parent directories) if not yet open; raises ``OSError``."""
        if self._fd is None:
            self._fd = files.open_fd(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        return self._fd

    def write(self, data: bytes | bytearray) -> None:
        """Appends ``data``; raises ``OSError`` when it cannot."""
        self.open()
        view = memoryview(b"\n" + bytes(data) if self._dirty else data)
        self._dirty = True
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
            with _bytes_lock:
                BYTES_WRITTEN[self.path] = BYTES_WRITTEN.get(self.path, 0) + n
        self._dirty = False

    def close(self) -> None:
        if self._fd is not None:
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

    def add(self, obj: Any) -> None:
        line = dumps_line(obj)
        with self._lock:
            self._buffer += line
            self._count += 1
            if self._count < self._threshold:
                return
            data, count = self._take()
        self._write(data, count)

    def _take(self) -> tuple[bytearray, int]:
        data, count = self._buffer, self._count
        self._buffer, self._count = bytearray(), 0
        return data, count

    def flush(self) -> bool:
        with self._lock:
            data, count = self._take()
        return self._write(data, count) if count else True

    def _write(self, data: bytearray, count: int) -> bool:
        try:
            self._file.write(data)
            self.written += count
            return True
        except OSError as exc:
            guard.count(f"{self._kind}_lines_lost", count)
            guard.report(f"{self._kind}_write_error", "cannot write %s: %s", self.path, exc)
            return False

    def close(self) -> None:
        self.flush()
        self._file.close()
