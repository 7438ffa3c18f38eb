"""The bytes a batch of records crosses the pipe to the exporter process in.

``marshal`` alone spends most of its time on a record's big integers (the 128-bit trace
id, 64-bit span ids, nanosecond times), which it writes and reads 15 bits at a time: about
a microsecond a record on each side of the pipe. The compiled twin (``_wire.c``) writes
those fields as fixed-width binary and marshals only the rest. Where it is not built, or a
batch holds a record whose fields it cannot take as they are, the batch is plain
``marshal``; :func:`loads` tells the two apart by the first byte (``marshal`` never writes
a zero byte first). Both ends of the pipe are the same installation.
"""

from __future__ import annotations

import marshal
from typing import Any

from ..recording import record
from ..recording.record import THREAD, span_count

try:
    from . import _wire as _native
except ImportError:  # built without a C compiler
    _native = None
else:
    _native.configure(record.layout())

_PACKED = 0  # the first byte of a packed batch


def dumps(thread_names: dict[int, str], records: list[tuple]) -> bytes:
    """One batch as bytes.

    Raises:
        ValueError: A record holds a value ``marshal`` cannot (what ``marshal.dumps`` raises).
    """
    if _native is not None:
        packed = _native.dumps(thread_names, records)
        if packed is not None:
            return packed
    return marshal.dumps((thread_names, records))


def loads(data: bytes) -> tuple[dict[int, str], list[tuple]]:
    """The ``(thread names, records)`` of bytes :func:`dumps` wrote.

    Raises:
        ValueError: ``data`` is not such a batch.
    """
    if data[:1] == bytes((_PACKED,)):
        if _native is None:
            raise ValueError("a packed batch needs the compiled reader")
        return _native.loads(data)
    thread_names, records = marshal.loads(data)
    return thread_names, records


class _Decoded:
    """A batch ``marshal`` read whole, handed out as the compiled reader hands out its records."""

    def __init__(self, names: dict[int, str], records: list[tuple]) -> None:
        self.names = names
        self._records = records
        self._next = 0

    def take(self, count: int) -> list[tuple]:
        start, self._next = self._next, min(len(self._records), self._next + max(0, count))
        return self._records[start:self._next]


def reader(data: bytes) -> Any:
    """The batch :func:`dumps` wrote, read a slice of records at a time: ``names`` its thread
    names, ``take(count)`` its next records (a list; empty at its end). The exporter process
    decodes each slice where it takes it through its outputs, so a batch's records are not
    all alive at once.

    Raises:
        ValueError: ``data`` is not such a batch (a packed batch found broken partway raises
            at the ``take`` that reaches the break).
    """
    if data[:1] == bytes((_PACKED,)):
        if _native is None:
            raise ValueError("a packed batch needs the compiled reader")
        return _native.reader(data)
    return _Decoded(*marshal.loads(data))


def survey(records: list[Any]) -> tuple[bool, int, set[Any]]:
    """What the export thread asks of a batch before shipping it: whether every record is a
    tuple (else ``(False, 0, set())``: the caller converts the others and asks again), how
    many spans they hold (:func:`..recording.record.span_count`) and the idents of the
    threads they ran on (``None`` among them where one has none); one compiled pass where built."""
    if _native is not None:
        got = _native.survey(records)
        if got is not None:
            return got
    if not all(type(rec) is tuple for rec in records):
        return False, 0, set()
    return True, span_count(records), {rec[THREAD] for rec in records}

