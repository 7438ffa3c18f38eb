"""Protocol Buffers wire format, written by hand: varints, tags and length-delimited fields.

Messages are never built as objects: every packet is a few ``bytes``
concatenations of pre-encoded pieces. Building and serialising a slice's two
packets with the generated ``perfetto_trace_pb2`` classes alone took longer
(21.7 us a slice, measured; docs/perfetto.md) than this whole encoder takes
with its tracks, nesting, flows and interning (20.3 us), so those classes
are only used by the tests, to read every packet back.

Only the wire types a trace needs are here: varint (0), 64-bit (1) and
length-delimited (2).
"""

from __future__ import annotations

import struct

__all__ = [
    "MASK64", "VARINT", "fixed64_field", "double_field", "length_field", "string_field", "tag",
    "timestamp", "varint", "varint_field",
]

MASK64 = (1 << 64) - 1

#: Varints of 0 .. 2**14 - 1 (one or two bytes), looked up rather than computed.
VARINT: tuple[bytes, ...] = tuple(
    bytes((i,)) if i < 0x80 else bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(1 << 14))
# 14 bits as two varint bytes that both say "more follows": the inner chunks of a long varint.
_CONTINUED14: tuple[bytes, ...] = tuple(
    bytes(((i & 0x7F) | 0x80, (i >> 7) | 0x80)) for i in range(1 << 14))
_SEVEN_BYTES_LOW = 1 << 42
_SEVEN_BYTES_HIGH = 1 << 49
_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack


def varint(value: int) -> bytes:
    """The varint of ``value``; a negative one as its 64-bit two's complement (ten bytes)."""
    if 0 <= value < 16384:
        return VARINT[value]
    value &= MASK64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def timestamp(value: int) -> bytes:
    """:func:`varint`, with a fast path for seven-byte values (2**42 .. 2**49 - 1).

    Packet timestamps are written relative to a base chosen so that a run's
    timestamps nearly all take seven bytes: four table lookups instead of a loop.
    """
    if _SEVEN_BYTES_LOW <= value < _SEVEN_BYTES_HIGH:
        return (_CONTINUED14[value & 16383] + _CONTINUED14[(value >> 14) & 16383]
                + _CONTINUED14[(value >> 28) & 16383] + VARINT[value >> 42])
    return varint(value)


def tag(field: int, wire_type: int) -> bytes:
    """The key of a field: its number and wire type, as a varint."""
    return varint((field << 3) | wire_type)


def varint_field(field: int, value: int) -> bytes:
    """A varint field (``int32``, ``int64``, ``uint64``, ``bool``, enums)."""
    return varint(field << 3) + varint(value)


def length_field(field: int, data: bytes) -> bytes:
    """A length-delimited field: a nested message, ``bytes`` or ``string``."""
    return varint((field << 3) | 2) + varint(len(data)) + data


def string_field(field: int, text: str) -> bytes:
    """A ``string`` field (UTF-8; a lone surrogate is replaced, never raised)."""
    return length_field(field, text.encode("utf-8", "replace"))


def double_field(field: int, value: float) -> bytes:
    """A ``double`` field (wire type 1)."""
    return varint((field << 3) | 1) + _pack_double(value)


def fixed64_field(field: int, value: int) -> bytes:
    """A ``fixed64`` field (wire type 1)."""
    return varint((field << 3) | 1) + _pack_fixed64(value & MASK64)
