"""The converter's fast path: Chrome trace JSON lines checked and copied as read, never serialised again.

A batch closed by an otel_rl batch marker whose CRC-32 matches is copied as a
block; other lines are parsed one by one (in worker processes on large
inputs) and copied with at most their pid rewritten.
"""

from __future__ import annotations

from typing import Any

import orjson

from .._internal.encode.chrome_lines import crc32
from .._internal.encode.chrome_trace import BATCH_MARKER_PREFIX
from .._internal.read.source import CHUNK

__all__ = ["chunk_end", "remap_blob", "replace_pid", "scan_chrome_lines", "verified_batch", "with_pid"]

_MISSING = object()


def replace_pid(line: bytes, old: Any, new: Any) -> bytes | None:
    """``line`` with its top-level pid changed textually, or ``None`` if unsure.

    Serialising the parsed event again would be exact but costs more than the
    parse; a key ``"pid":`` that occurs once is the top-level one (the event
    has a pid, and the bytes cannot occur inside a JSON string).
    """
    if type(old) is not int or type(new) is not int or line.count(b'"pid":') != 1:
        return None
    start = line.find(b'"pid":') + 6
    while line[start:start + 1] == b" ":
        start += 1
    digits = b"%d" % old
    stop = start + len(digits)
    if line[start:stop] != digits or line[stop:stop + 1] not in (b",", b"}", b" "):
        return None
    return line[:start] + b"%d" % new + line[stop:]


def scan_chrome_lines(data: bytes, mapping: dict[Any, Any],
                      end: int | None = None) -> tuple[bytes, int, int, list, list]:
    """Checks a block of complete Chrome trace JSON lines and prepares them for output.

    One line that is not JSON would make the whole output unreadable, so every
    line is checked. A batch closed by a marker whose CRC-32 matches is checked
    by that checksum alone - its lines are exactly what otel_rl's exporter
    wrote - and copied as a block. Other lines are parsed one by one and copied
    as read (at most with their pid rewritten), never serialised again. Runs in
    worker processes on large inputs, so it only touches its arguments.

    Args:
        data: Whole lines, newline-separated.
        mapping: Old pid -> pid to write, for the pids known so far.
        end: Only ``data[:end]`` is read (saves copying a prefix); all of it by default.

    Returns:
        ``(blob, count, lines, unresolved, bad)``: the ready events joined with
        ``",\\n"``, how many they are, how many lines ``data`` holds,
        ``(index, line)`` for lines whose pid is not in ``mapping`` yet, and
        ``(index, message)`` for lines that are not events (``index`` counts
        lines from 0 within ``data``).
    """
    blobs: list[bytes] = []
    count = 0
    unresolved: list[tuple[int, bytes]] = []
    bad: list[tuple[int, str]] = []
    pos = 0
    size = len(data) if end is None else end
    while pos < size:
        marker = data.find(BATCH_MARKER_PREFIX, pos, size)
        if marker < 0:
            break
        eol = data.find(b"\n", marker, size)
        if eol < 0:
            eol = size
        batch = verified_batch(data, pos, marker, eol, mapping)
        if batch is None:
            count += _scan_lines(data, pos, eol + 1, mapping, blobs, unresolved, bad)
        else:
            start, blob, events = batch
            if start > pos:
                count += _scan_lines(data, pos, start, mapping, blobs, unresolved, bad)
            blobs.append(blob)
            count += events
        pos = eol + 1
    if pos < size:
        count += _scan_lines(data, pos, size, mapping, blobs, unresolved, bad)
    lines = data.count(b"\n", 0, size) + (0 if data.endswith(b"\n", 0, size) else 1)
    return b",\n".join(blobs), count, lines, unresolved, bad


def chunk_end(data: bytes) -> int:
    """Where to cut ``data`` for parsing: after its last batch marker, so batches
    stay whole and can be verified by checksum; at the last newline once a
    batch marker is overdue; 0 to wait for more data."""
    marker = data.rfind(BATCH_MARKER_PREFIX)
    if marker >= 0:
        eol = data.find(b"\n", marker)
        if eol >= 0:
            return eol + 1
    if len(data) < 2 * CHUNK:
        return 0
    return data.rfind(b"\n") + 1


def verified_batch(data: bytes, pos: int, marker: int, eol: int,
                   mapping: dict[Any, Any]) -> tuple[int, bytes, int] | None:
    """``(start, blob, events)`` for the batch the marker at ``marker`` closes, if
    its checksum matches and all its pids are mapped; ``None`` otherwise."""
    try:
        info = orjson.loads(data[marker:eol])["args"]
        length, lines, crc, pids = info["bytes"], info["lines"], info["crc32"], info["pids"]
        start = marker - length
        if start < pos or (start and data[start - 1] != 10) or lines <= 0:
            return None
        if crc32(memoryview(data)[start:marker]) != crc:
            return None
        changes = {}
        for pid in pids:
            new = mapping.get(pid, _MISSING)
            if new is _MISSING:
                return None
            if new != pid:
                changes[pid] = new
    except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
        return None
    blob = data[start:marker - 1].replace(b"\n", b",\n")
    if changes:
        if len(pids) != 1:
            return None
        blob = remap_blob(blob, lines, changes)
        if blob is None:
            return None
    return start, blob, lines


def _scan_lines(data: bytes, begin: int, end: int, mapping: dict[Any, Any], blobs: list[bytes],
                unresolved: list[tuple[int, bytes]], bad: list[tuple[int, str]]) -> int:
    """Parses the lines of ``data[begin:end]`` one by one; returns how many it kept."""
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    parts: list[bytes] = []
    append = parts.append
    pids: list[Any] = []
    add_pid = pids.append
    new_pids: list[tuple[int, bytes]] = []
    problems: list[tuple[int, str]] = []
    for index, line in enumerate(data[begin:end].split(b"\n")):
        if line.startswith(BATCH_MARKER_PREFIX):
            continue  # a marker whose batch could not be verified: the lines speak for themselves
        try:
            event = loads(line)
        except decode_error as exc:
            if line.strip():
                problems.append((index, str(exc)))
            continue
        if type(event) is not dict:
            problems.append((index, "not a JSON object"))
            continue
        pid = event.get("pid")
        if pid is not None:
            if type(pid) is not int and type(pid) is not str:
                problems.append((index, "pid is not an integer or string"))
                continue
            if pid not in mapping:
                new_pids.append((index, line))
                continue
        append(line)
        add_pid(pid)
    if problems or new_pids:
        first = data.count(b"\n", 0, begin)  # line index of data[begin] within data
        unresolved.extend((first + index, line) for index, line in new_pids)
        bad.extend((first + index, message) for index, message in problems)
    distinct = set(pids)
    changes = {pid: mapping[pid] for pid in distinct if pid is not None and mapping[pid] != pid}
    blob = b",\n".join(parts)
    if changes:
        # Whole-block rewriting needs every line to carry the one pid that changes.
        blob = remap_blob(blob, len(parts), changes) if len(distinct) == 1 else None
        if blob is None:
            for i, pid in enumerate(pids):
                new = changes.get(pid)
                if new is not None:
                    parts[i] = with_pid(parts[i], pid, new)
            blob = b",\n".join(parts)
    if parts:
        blobs.append(blob)
    return len(parts)


def remap_blob(blob: bytes, count: int, changes: dict[Any, Any]) -> bytes | None:
    """``blob`` (``count`` events) with its one changed pid rewritten, or ``None`` if unsure.

    The usual case - one file, one process, one pid to change - done on the
    whole block at once, when every pid key in it is exactly ``"pid":OLD,``.
    """
    ((old, new),) = changes.items()
    if type(old) is not int or type(new) is not int:
        return None
    pieces = blob.split(b'"pid":%d,' % old)
    if len(pieces) != count + 1 or blob.count(b'"pid":') != count:
        return None
    return (b'"pid":%d,' % new).join(pieces)


def with_pid(line: bytes, old: Any, new: Any) -> bytes:
    """``line`` with its pid ``old`` changed to ``new``: textually when sure, else parsed and serialised."""
    changed = replace_pid(line, old, new)
    if changed is None:
        event = orjson.loads(line)
        event["pid"] = new
        changed = orjson.dumps(event)
    return changed
