"""The per-rank trace file in Perfetto's native format (``OTEL_RL_FILE_FORMAT=perfetto``).

Spans go through the same Chrome encoder as the JSON lines file, then through
:class:`~..encode.perfetto.PerfettoEncoder`, and are appended as
``TracePacket`` protobuf: ``traces-r{rank}.pftrace`` opens in Perfetto as it
is, and the files of every rank concatenate into one trace (each writer has
its own packet sequence and track uuids).

JSON lines stay the default and the crash-safe format: the native writer
holds the latest slices back to join parents and children with flow arrows
and to write counter samples in time order, so a crash loses what it held;
a clean shutdown writes everything.
"""

from __future__ import annotations

from typing import Any

from ..encode.chrome_trace import ChromeTraceEncoder
from ..encode.perfetto import PerfettoEncoder
from .file_exporter import ChromeTraceFileExporter

__all__ = ["PerfettoTraceFileExporter", "WINDOW"]

#: Slices a per-rank writer holds back to join flows (the converter holds more).
WINDOW = 4096


class PerfettoTraceFileExporter(ChromeTraceFileExporter):
    """Appends spans to a native Perfetto trace file.

    Args:
        path: The file to append to; missing parent directories are created.
        encoder: The Chrome encoder to use (a default one when omitted; it must
            give exact nanoseconds: ``ChromeTraceEncoder(exact=True)``).
        hold: As for :class:`ChromeTraceFileExporter`.
    """

    def __init__(self, path: str, encoder: ChromeTraceEncoder | None = None, hold: bool = False) -> None:
        self._perfetto = PerfettoEncoder(window=WINDOW)
        super().__init__(path, encoder if encoder is not None else ChromeTraceEncoder(exact=True), hold)

    def _after_fork_in_child(self) -> None:
        super()._after_fork_in_child()
        # A forked child writes its own packet sequence, with its own tracks, to the same file.
        self._perfetto = PerfettoEncoder(window=WINDOW)

    def _serialize(self, events: list[dict[str, Any]]) -> bytes:
        return self._perfetto.encode(events)

    def _closing(self) -> bytes:
        return self._perfetto.finish()
