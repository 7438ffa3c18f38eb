"""Perfetto's native trace format (``TracePacket`` protobuf), written by hand.

:class:`PerfettoEncoder` turns Chrome trace events into packets; the
converter (``otel-rl convert -o trace.pftrace``) and the per-rank file
exporter (``OTEL_RL_FILE_FORMAT=perfetto``) both use it. See docs/perfetto.md.
"""

from __future__ import annotations

from .encoder import PerfettoEncoder

__all__ = ["PerfettoEncoder"]
