"""The converter's native output: Perfetto ``TracePacket`` protobuf, streamed as events come.

It takes the events the merge writes - blobs of Chrome JSON, already given
their final pids - exactly as :class:`~.output.TraceOutput` does, parses them
and hands them to :class:`~otel_rl._internal.encode.perfetto.PerfettoEncoder`,
so the native trace holds the same slices, durations and flows as the JSON
one of the same inputs.

Where the compiled twin was built (:mod:`~otel_rl._internal.encode.perfetto.native`)
it takes the blobs as they are, JSON text, and writes the same bytes without
Python objects per event; for input it does not mirror the conversion starts
again with the Python encoder (:meth:`PerfettoOutput.restart`).
"""

from __future__ import annotations

import gc
import os
import shutil
from typing import IO, Any

import orjson

from .._internal.encode.perfetto import PerfettoEncoder
from .._internal.encode.perfetto.native import compiled_encoder
from .._internal.read.limits import InputLimits
from .native_inputs import copy_packets
from .output import OutputStream

__all__ = ["PerfettoOutput", "PERFETTO_SUFFIXES", "is_perfetto_name"]

#: Output names that mean the native format when ``--format`` is not given.
PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pftrace.gz", ".perfetto-trace.gz")


def is_perfetto_name(name: str) -> bool:
    """Whether an output file name asks for the native format."""
    return name.lower().endswith(PERFETTO_SUFFIXES)


class PerfettoOutput(OutputStream):
    """Streams a native Perfetto trace: events are encoded and written as they come.

    Args:
        raw: The binary stream to write to.
        final_name: The output's name (``.gz`` compresses it).
        sequence_id: The packet sequence the encoder writes.
        uuid_salt: Added to its track uuids.
        compiled: Whether to use the compiled encoder where it was built: only for an
            output that can be rewound (:meth:`restart`), a regular file.
    """

    def __init__(self, raw: IO[bytes], final_name: str, sequence_id: int = 1, uuid_salt: int = 0,
                 compiled: bool = False) -> None:
        super().__init__(raw, final_name)
        self._final_name = final_name
        self._sequence_id = sequence_id
        self._uuid_salt = uuid_salt
        self._start = raw.tell() if compiled else 0
        # The only writer of its packet sequence: sequence 1 and small track uuids by default
        # (the parts of a parallel conversion take others).
        native = compiled_encoder(sequence_id, uuid_salt) if compiled else None
        #: Whether the compiled encoder writes this output.
        self.compiled = native is not None
        self.encoder: Any = native or PerfettoEncoder(sequence_id=sequence_id, uuid_salt=uuid_salt)
        self.events = 0

    def restart(self) -> PerfettoOutput:
        """The same output emptied, written by the Python encoder: for input the compiled one
        raised :class:`~otel_rl._internal.encode.perfetto.native.Unsupported` for."""
        if self._file is not self._raw:
            self._file.fileobj = None  # type: ignore[attr-defined]  # dropped: no gzip trailer
        self._raw.seek(self._start)
        self._raw.truncate()
        return PerfettoOutput(self._raw, self._final_name, self._sequence_id, self._uuid_salt, compiled=False)

    def write(self, parts: list[bytes]) -> None:
        """Writes serialised events."""
        if parts:
            self.write_blob(b",".join(parts), len(parts))

    def write_blob(self, blob: bytes, count: int) -> None:
        """Writes ``count`` events already joined with ``","`` (or ``",\\n"``)."""
        if not count:
            return
        if self.compiled:
            data = self.encoder.encode(blob)
            if data:
                self._file.write(data)
            self.events += count
            return
        # The events and records made here hold no cycles: the collector would only walk
        # them (a quarter of the time, measured); it is off while a blob is encoded.
        enabled = gc.isenabled()
        gc.disable()
        try:
            data = self.encoder.encode(orjson.loads(b"[" + blob + b"]"))
        finally:
            if enabled:
                gc.enable()
        if data:
            self._file.write(data)
        self.events += count

    def encode_lines(self, data: bytes, end: int, mapping: dict[Any, Any]) -> tuple[bytes, int, int, list, list]:
        """Encodes the whole JSONL lines of ``data[:end]`` with the compiled encoder, as the fast
        path's :func:`~.fast_path.scan_chrome_lines` and :meth:`write_blob` would.

        Returns:
            What ``scan_chrome_lines`` returns, its events already written: ``(b"", 0, lines,
            unresolved, [])`` (a line the fast path would report raises ``Unsupported``).
        """
        data_out, count, lines, unresolved = self.encoder.encode_lines(data, end, mapping)
        if data_out:
            self._file.write(data_out)
        self.events += count
        return b"", 0, lines, unresolved, []

    def append_native(self, path: str, limits: InputLimits) -> tuple[int, str | None]:
        """Appends the packets of a native trace (a per-rank ``.pftrace``) as they are.

        Returns:
            ``(packets, problem)`` as :func:`~.native_inputs.copy_packets` says.
        """
        return copy_packets(path, self._file, limits)

    def append_part(self, path: str) -> None:
        """Appends a part this conversion's own workers wrote: whole packets by construction,
        so its bytes are copied without walking them (which costs as much as encoding them)."""
        with open(path, "rb") as part:
            if self._file is self._raw and hasattr(os, "sendfile"):
                # In the kernel, from one file to the other: no copy through this process.
                self._raw.flush()
                out, source = self._raw.fileno(), part.fileno()
                while os.sendfile(out, source, None, 1 << 30):
                    pass
            else:
                shutil.copyfileobj(part, self._file, 1 << 20)

    def close(self, other: dict[str, Any]) -> None:
        """Writes what the encoder still holds and flushes (``other`` is for the JSON output only)."""
        data = self.encoder.finish()
        if data:
            self._file.write(data)
        self._done()
