"""JSON lines files: one JSON object per line, each line parsed alone.

:func:`json_objects` is what every JSON-lines reader of a report builds on
(session records, request events, OTLP requests, Chrome trace events,
``otel_rl.stats`` exports): lines that cannot be used are handed to a
:class:`LineProblems` with their file and line number, never raised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import orjson

from .limits import InputLimits, long_line_message
from .lines import BLOCK, LONG, line_blocks
from .source import open_input

__all__ = ["LineProblems", "json_objects"]


class LineProblems(Protocol):
    """Where a reader reports the lines it could not use."""

    def bad_line(self, path: str, line: int, message: str) -> None:
        """A malformed line (not JSON, not an object, a field of the wrong type, over the bound)."""

    def truncated(self, path: str, line: int) -> None:
        """A last line without a newline that does not parse: a writer stopped mid-line."""

    def cut_short(self, path: str, message: str) -> None:
        """A gzipped file read only up to its decompression bound."""


def json_objects(path: str, limits: InputLimits, problems: LineProblems, skip: tuple[bytes, ...] = (),
                 on_read: Callable[[int], None] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yields ``(line number, object)`` for every line of a JSON lines file that holds a JSON object.

    The file is read a block of lines at a time, never whole. Blank lines are
    passed over; lines starting with one of ``skip`` are passed over unparsed
    (batch markers and flow arrows a reader has no use for).

    Args:
        path: The file (optionally gzipped).
        limits: Bounds on reading it.
        problems: Told of every line that is not a JSON object, and of bounds reached.
        skip: Prefixes of lines not worth parsing.
        on_read: Called with the size of each chunk read (for progress bars).

    Raises:
        OSError: The file cannot be read, or its compressed data is damaged.
        EOFError: A gzipped file ends before its end-of-stream marker.
    """
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    with open_input(path, limits, on_read) as f:
        lineno = 0
        for kind, payload in line_blocks(f, limits.max_line_bytes):
            if kind == BLOCK:
                lines = payload.split(b"\n")
                lines.pop()
            elif kind == LONG:
                lineno += 1
                problems.bad_line(path, lineno, long_line_message(payload, limits))
                continue
            else:
                lines = [payload]  # a last line without a newline: perhaps cut short by a writer
            for line in lines:
                lineno += 1
                if not line or (skip and line.startswith(skip)) or line.isspace():
                    continue
                try:
                    obj = loads(line)
                except decode_error as exc:
                    if kind == BLOCK:
                        problems.bad_line(path, lineno, str(exc))
                    else:
                        problems.truncated(path, lineno)
                    continue
                if type(obj) is not dict:
                    problems.bad_line(path, lineno, "not a JSON object")
                    continue
                yield lineno, obj
        if f.cut_short:
            problems.cut_short(path, f.cut_message())
