"""One input file opened for reading: decompressed if gzipped, bounded by :class:`InputLimits`."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from typing import IO

from .limits import DEFAULT_LIMITS, InputLimitError, InputLimits, mib

__all__ = ["CHUNK", "InputFile", "open_input"]

#: Bytes read at a time (and the buffer of an uncompressed file).
CHUNK = 1 << 22


class InputFile:
    """An input file, decompressed if gzipped, whose reads stop at the decompression bound.

    Reaching the bound reads as the end of the file; ``cut_short`` then tells
    the caller that there was more, and :meth:`cut_message` says why it was left.
    """

    def __init__(self, path: str, limits: InputLimits,
                 on_read: Callable[[int], None] | None = None) -> None:
        self._on_read = on_read
        self._limits = limits
        self.cut_short = False
        self.decompressed = 0
        if path.endswith(".gz"):
            self._file: IO[bytes] = gzip.open(path, "rb")  # type: ignore[assignment]
            try:
                self._bound = limits.gzip_bound(os.fstat(self._file.fileno()).st_size)
            except BaseException:
                self._file.close()
                raise
        else:
            self._file = open(path, "rb", buffering=CHUNK)
            self._bound = None

    def __enter__(self) -> InputFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all that is left within the bound when negative).

        Raises:
            OSError: The file cannot be read, or its compressed data is damaged.
            EOFError: A gzipped file ends before its end-of-stream marker.
        """
        try:
            if self._bound is None:
                data = self._file.read(size)
            else:
                left = self._bound - self.decompressed
                if left <= 0:
                    # One byte more tells a file that ends right at the bound from one cut short.
                    if not self.cut_short and self._file.read(1):
                        self.cut_short = True
                    return b""
                data = self._file.read(left if size < 0 else min(size, left))
                self.decompressed += len(data)
        except zlib.error as exc:
            # Not an OSError: readers that skip an unreadable file would let it through.
            raise gzip.BadGzipFile(f"damaged compressed data: {exc}") from None
        if data and self._on_read is not None:
            self._on_read(len(data))
        return data

    def skip_to(self, offset: int) -> None:
        """On to ``offset`` of an uncompressed file (what is skipped was read by others)."""
        if self._bound is not None:
            raise ValueError("a compressed input is read from its start")
        self._file.seek(offset)

    def rewind(self) -> None:
        """Back to the start (the decompression count starts again)."""
        self._file.seek(0)
        self.decompressed = 0
        self.cut_short = False

    def read_document(self) -> bytes:
        """The whole content, for a JSON document (parsed whole).

        Raises:
            InputLimitError: The content is over the decompression bound.
        """
        data = self.read()
        if self.read(1) or self.cut_short:
            raise InputLimitError(self.cut_message())
        return data

    def cut_message(self) -> str:
        """Why the file was read only in part (once ``cut_short``)."""
        limits = self._limits
        return (f"stopped after {mib(self.decompressed)} decompressed: more than "
                f"{limits.max_gzip_ratio:g} times its compressed size (--max-gzip-ratio)")


def open_input(path: str, limits: InputLimits | None = None,
               on_read: Callable[[int], None] | None = None) -> InputFile:
    """Opens ``path`` for bounded reading (use it in a ``with`` block).

    Args:
        path: The file; a ``.gz`` name is decompressed as it is read.
        limits: The bounds (:data:`~.limits.DEFAULT_LIMITS` when ``None``).
        on_read: Called with the size of each chunk read (for progress bars).
    """
    return InputFile(path, limits or DEFAULT_LIMITS, on_read)
