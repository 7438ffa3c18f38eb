"""Blocks of whole lines of an uncompressed file as byte ranges, for worker processes that
read their blocks themselves.

Sending a worker its block through a pipe costs the reading process a read, a copy and a
write of every byte, and the worker a read and a copy: for a file of session records that
is about as much as parsing it. Given ``(start, end)`` instead, a worker reads the bytes
from the page cache itself; the reading process only looks for a newline near each cut.
"""

from __future__ import annotations

import os

from .source import CHUNK

__all__ = ["WINDOW", "line_ranges", "read_range"]

#: How far past a block's nominal end its last newline is looked for (a longer line: the file is streamed).
WINDOW = 1 << 20


def line_ranges(path: str, chunk: int | None = None, window: int | None = None) -> tuple[list[tuple[int, int]], int] | None:
    """Blocks of whole lines of about ``chunk`` bytes, as ``(start, end)`` byte ranges, and the
    offset the file's last part starts at (at most ``chunk + window`` bytes, left to a streaming
    reader: it holds the last line, which may be cut short). ``None`` for a compressed file or one
    with a line longer than ``window``: such files are streamed whole.
    """
    if path.endswith(".gz"):
        return None
    chunk = chunk or CHUNK
    window = window or WINDOW
    ranges: list[tuple[int, int]] = []
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        start = 0
        while size - start > chunk + window:
            cut = start + chunk - 1  # a block ends with the first newline from here on
            nl = os.pread(f.fileno(), window, cut).find(b"\n")
            if nl < 0:
                return None
            ranges.append((start, cut + nl + 1))
            start = cut + nl + 1
    return ranges, start


def read_range(path: str, start: int, end: int) -> bytes:
    """The bytes ``[start, end)`` of a file (whole lines: a file cut shorter since, up to its last newline)."""
    with open(path, "rb", buffering=0) as f:
        data = os.pread(f.fileno(), end - start, start)
    if len(data) < end - start:
        data = data[:data.rfind(b"\n") + 1]
    return data
