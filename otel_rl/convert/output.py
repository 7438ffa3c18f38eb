"""The converter's output: one ``{"traceEvents": [...]}`` document, streamed as events come."""

from __future__ import annotations

import gzip
import os
from typing import IO, Any

import orjson

from .._internal.encode.flows import FlowJoiner

__all__ = ["OutputStream", "TraceOutput"]


class OutputStream:
    """The stream an output writes to: the file itself, or gzip over it for a ``.gz`` name."""

    def __init__(self, raw: IO[bytes], final_name: str) -> None:
        self._raw = raw
        self._file: IO[bytes] = raw
        if final_name.endswith(".gz"):
            # Level 3: most of the size win of level 9 at several times the speed.
            self._file = gzip.GzipFile(filename=os.path.basename(final_name[:-3]), mode="wb",
                                       fileobj=self._raw, compresslevel=3, mtime=0)

    def _done(self) -> None:
        """Ends a compressed stream and flushes (the file itself is the caller's)."""
        if self._file is not self._raw:
            self._file.close()
        self._raw.flush()

    def abort(self) -> None:
        """Closes a compressed stream after a failure (the file itself is the caller's)."""
        if self._file is not self._raw:
            try:
                self._file.close()
            except Exception:  # noqa: BLE001 - already failing; the first error matters
                pass


class TraceOutput(OutputStream):
    """Streams ``{"traceEvents": [...]}``: events are written as they come."""

    def __init__(self, raw: IO[bytes], final_name: str) -> None:
        super().__init__(raw, final_name)
        self._file.write(b'{"traceEvents":[\n')
        self._first = True
        self.events = 0
        # Every event passes here, whichever way it was read: remote flow ends and
        # their parents' slices meet, and close() adds the flow starts.
        self.flows = FlowJoiner()

    def write(self, parts: list[bytes]) -> None:
        """Writes serialised events."""
        if parts:
            self.write_blob(b",\n".join(parts), len(parts))

    def write_blob(self, blob: bytes, count: int) -> None:
        """Writes ``count`` events already joined with ``",\\n"``."""
        if not count:
            return
        if self._first:
            self._first = False
        else:
            self._file.write(b",\n")
        self._file.write(blob)
        self.events += count
        self.flows.scan(blob)

    def close(self, other: dict[str, Any]) -> None:
        """Adds the flow starts, ends the document with ``other`` as its ``otherData``, and flushes."""
        starts = self.flows.starts()
        if starts:
            blob = b",\n".join(orjson.dumps(event) for event in starts)
            if not self._first:
                self._file.write(b",\n")
            self._first = False
            self._file.write(blob)
            self.events += len(starts)
        self._file.write(b'\n],"displayTimeUnit":"ms","otherData":')
        self._file.write(orjson.dumps(other))
        self._file.write(b"}\n")
        self._done()
