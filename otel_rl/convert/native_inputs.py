"""Native Perfetto traces among the inputs: per-rank ``.pftrace`` files joined by concatenation.

A run recorded with ``OTEL_RL_FILE_FORMAT=perfetto`` leaves one native file
per rank. Each is a stream of ``TracePacket`` fields with its own packet
sequence and track uuids, so the merged trace is the files one after another:
the converter checks each packet's framing and copies it, never decoding it,
at the speed of the disk. A last packet cut short (a writer killed mid-write)
is left out and reported.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from typing import IO

from .._internal.keys import MERGED_PERFETTO_FILE
from .._internal.read.limits import InputLimits
from .._internal.read.source import open_input

__all__ = ["NATIVE_SUFFIXES", "copy_packets", "find_native"]

#: Names of native trace inputs.
NATIVE_SUFFIXES = (".pftrace", ".pftrace.gz")
# Trace.packet: field 1, length-delimited.
_PACKET_KEY = 0x0A
_READ = 1 << 20


def find_native(inputs: Sequence[str], exclude: Sequence[str] = ()) -> list[str]:
    """The native traces ``inputs`` name: files given, and those in directories and glob
    matches (a merged ``trace.pftrace`` in a directory is left out: it repeats every rank)."""
    skip = {os.path.realpath(p) for p in exclude}
    found: list[str] = []

    def add(path: str, named: bool) -> None:
        real = os.path.realpath(path)
        if real in skip or any(os.path.realpath(p) == real for p in found):
            return
        if path.endswith(NATIVE_SUFFIXES) and (named or os.path.basename(path) != MERGED_PERFETTO_FILE):
            found.append(path)

    for item in inputs:
        matches = [item] if os.path.exists(item) else sorted(glob.glob(item, recursive=True))
        for match in matches:
            if os.path.isdir(match):
                for root, dirs, names in os.walk(match):
                    dirs.sort()
                    for name in sorted(names):
                        add(os.path.join(root, name), False)
            elif os.path.isfile(match):
                add(match, True)
    return found


def copy_packets(path: str, out: IO[bytes], limits: InputLimits) -> tuple[int, str | None]:
    """Copies the whole packets of a native trace to ``out``.

    Returns:
        ``(packets, problem)``: how many were copied, and why the rest was not
        (``None`` when the file was whole).

    Raises:
        OSError: The file cannot be read.
    """
    packets = 0
    rest = b""
    with open_input(path, limits) as source:
        while True:
            chunk = source.read(_READ)
            if not chunk:
                break
            data = rest + chunk if rest else chunk
            cut, count, problem = _whole_packets(data)
            if problem:
                out.write(data[:cut])
                return packets + count, problem
            out.write(data[:cut])
            packets += count
            rest = data[cut:]
        cut_short = source.cut_message() if source.cut_short else None
    if rest:
        return packets, cut_short or f"its last {len(rest)} bytes are a packet cut short"
    return packets, cut_short


def _whole_packets(data: bytes) -> tuple[int, int, str | None]:
    """Where the whole packets at the start of ``data`` end, how many they are, and what is
    wrong if ``data`` holds something that is not a packet."""
    pos = count = 0
    size = len(data)
    while pos < size:
        if data[pos] != _PACKET_KEY:
            return pos, count, f"byte {pos} of a block is not a trace packet: not a native Perfetto trace"
        length = shift = 0
        cursor = pos + 1
        while True:
            if cursor >= size:
                return pos, count, None  # the length itself is cut: read more
            byte = data[cursor]
            cursor += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 63:
                return pos, count, "a packet length is not a varint: not a native Perfetto trace"
        end = cursor + length
        if end > size:
            return pos, count, None
        pos = end
        count += 1
    return pos, count, None
