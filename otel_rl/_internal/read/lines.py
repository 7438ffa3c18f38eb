"""The lines of an input file, never holding one over the line bound in memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .limits import DEFAULT_LIMITS, InputLimitError, InputLimits, long_line_message
from .source import CHUNK, InputFile, open_input

__all__ = ["BLOCK", "HEAD_READ", "LONG", "TAIL", "first_line", "iter_lines", "line_blocks", "lines_of"]

#: Items of :func:`line_blocks`: whole lines, a line over the bound, a last line without a newline.
BLOCK, LONG, TAIL = 0, 1, 2
#: Bytes a reader of a file's first lines reads at a time: a file is told apart by its head,
#: and reading (then splitting) a whole 4 MiB block for it cost as much as encoding 10,000 events.
HEAD_READ = 1 << 16


def line_blocks(f: InputFile, max_line: int, read_size: int = 0, views: bool = False) -> Iterator[tuple[int, Any]]:
    """Splits a stream into blocks of whole lines without ever holding a line over ``max_line``.

    Yields ``(BLOCK, bytes)`` for consecutive whole lines, each ending with a
    newline; ``(LONG, length)`` in their place for a line longer than
    ``max_line`` (dropped as it streams by); last ``(TAIL, bytes)`` for a final
    line without a newline. A stream cut short at the decompression bound
    yields no tail: the line was cut by the reader, not by a writer.
    ``read_size`` bounds each read (and so each block); 0 reads :data:`CHUNK` bytes at a time.
    With ``views`` a block may be a ``memoryview`` of the read rather than a copy of its
    whole lines (for a reader that takes any buffer), a line begun in an earlier read
    then coming as a block of its own.
    """
    # Reads no larger than the bound: every line inside one read is within it,
    # only a line that spans reads needs its length checked.
    size = max(1, min(read_size or CHUNK, max_line))
    head: list[bytes] = []  # the start of a line whose newline has not come yet
    head_len = 0
    skipping = False  # inside a line over the bound
    while True:
        chunk = f.read(size)
        if not chunk:
            break
        nl = chunk.find(b"\n")
        if nl < 0:
            head_len += len(chunk)
            if not skipping:
                head.append(chunk)
                if head_len > max_line:
                    skipping = True
                    head = []
            continue
        prefix = b""
        start = 0
        if head_len or skipping:
            length = head_len + nl
            if skipping or length > max_line:
                yield LONG, length
                start = nl + 1
            else:
                prefix = b"".join(head)
            head = []
            head_len = 0
            skipping = False
        last = chunk.rfind(b"\n")
        if prefix and not views:
            yield BLOCK, b"".join((prefix, memoryview(chunk)[:last + 1]))
        else:
            if prefix:
                yield BLOCK, b"".join((prefix, memoryview(chunk)[:nl + 1]))
                start = nl + 1
            if last >= start:
                if views:
                    yield BLOCK, memoryview(chunk)[start:last + 1]
                else:
                    yield BLOCK, chunk[start:last + 1] if start or last + 1 < len(chunk) else chunk
        rest = len(chunk) - last - 1
        if rest:
            head = [chunk[last + 1:]]
            head_len = rest
    if f.cut_short:
        return
    if skipping:
        yield LONG, head_len
    elif head_len:
        yield TAIL, b"".join(head)


def lines_of(blocks: Iterator[tuple[int, Any]]) -> Iterator[bytes | int]:
    """The lines of :func:`line_blocks` one by one: bytes, or the length of a line over the bound.

    Each line is cut from its block when asked for: a reader of the first lines only
    (:func:`first_line`, sniffing) does not split the whole block.
    """
    for kind, payload in blocks:
        if kind == BLOCK:
            start = 0
            end = len(payload)
            while start < end:
                nl = payload.index(b"\n", start)  # a block is whole lines
                yield payload[start:nl]
                start = nl + 1
        else:
            yield payload


def first_line(f: InputFile, limits: InputLimits) -> bytes | int | None:
    """The first line that is not blank (its length if over the bound); ``None`` when there is none."""
    return next((line for line in lines_of(line_blocks(f, limits.max_line_bytes, HEAD_READ))
                 if type(line) is int or line.strip()), None)


def iter_lines(path: str, on_read: Callable[[int], None] | None = None, limits: InputLimits | None = None,
               on_skip: Callable[[int | None, str], None] | None = None) -> Iterator[tuple[int, bytes, bool]]:
    """Yields ``(line number, line, is_last_line_without_newline)`` for every line of a file.

    A last line without a newline may have been cut short by a writer that died;
    readers skip it with a warning when it does not parse.

    Args:
        path: The file (optionally gzipped).
        on_read: Called with the size of each chunk read (for progress bars).
        limits: Bounds on reading it (:class:`InputLimits`).
        on_skip: Called with ``(line number, why)`` for each line over the line
            bound (it is not yielded; the lines after it are), and with
            ``(None, why)`` when a gzipped file is cut short at its
            decompression bound (after its last whole line).

    Raises:
        InputLimitError: A bound was reached and there is no ``on_skip``.
    """
    limits = limits or DEFAULT_LIMITS
    with open_input(path, limits, on_read) as f:
        lineno = 0
        for kind, payload in line_blocks(f, limits.max_line_bytes):
            if kind == BLOCK:
                lines = payload.split(b"\n")
                lines.pop()
                for line in lines:
                    lineno += 1
                    yield lineno, line, False
            elif kind == LONG:
                lineno += 1
                message = long_line_message(payload, limits)
                if on_skip is None:
                    raise InputLimitError(f"{path}:{lineno}: {message}")
                on_skip(lineno, message)
            else:
                yield lineno + 1, payload, True
        if f.cut_short:
            if on_skip is None:
                raise InputLimitError(f"{path}: {f.cut_message()}")
            on_skip(None, f.cut_message())
