"""Interned strings of one packet sequence: event names, categories, annotation names and values.

A string is written once, in an ``InternedData`` entry, and every event after
that names it by a small integer id (``iid``): a slice named
``rl.session.counter.output_tokens`` costs two bytes instead of thirty-odd.
New entries are collected here and written by the encoder in a packet of
their own, ahead of the first packet that uses them.

Memory stays bounded: past ``max_entries`` strings the encoder clears the
sequence's incremental state (:meth:`Interner.reset`) and strings are defined
again as they are next used.
"""

from __future__ import annotations

from typing import Any

from . import fields as f
from .wire import VARINT, double_field, length_field, string_field, varint, varint_field

__all__ = ["INLINE_KEYS", "Annotations", "Interner", "LONG_STRING", "annotation_bytes", "scalar_bytes"]

#: Annotations whose string values are ids seen about once: written in place, never interned.
INLINE_KEYS = frozenset({"span_id", "parent_span_id"})
#: Strings longer than this are written in place: they rarely repeat and would fill the tables.
LONG_STRING = 128
#: Annotations remembered, encoded, for their next use (cleared wholesale when full).
_CACHE_LIMIT = 16_384
#: Nesting of list and dict values written as nested annotations; deeper ones become text.
_MAX_DEPTH = 8
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_TRUE = varint_field(f.ANNOTATION_BOOL, 1)
_FALSE = varint_field(f.ANNOTATION_BOOL, 0)
_STRING_IID_KEY = varint(f.ANNOTATION_STRING_IID << 3)
_INT_KEY = varint(f.ANNOTATION_INT << 3)
_NAME_IID_KEY = varint(f.ANNOTATION_NAME_IID << 3)


def _entry(iid: int, text: str) -> bytes:
    # EventName, EventCategory, DebugAnnotationName and InternedString share this layout.
    return varint_field(f.INTERNED_IID, iid) + string_field(f.INTERNED_TEXT, text)


def scalar_bytes(value: Any, depth: int = 0) -> bytes | None:
    """The value part of a DebugAnnotation written in place (no interning); ``None`` to skip it."""
    kind = type(value)
    if kind is str:
        return string_field(f.ANNOTATION_STRING, value)
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is int:
        if _INT64_MIN <= value <= _INT64_MAX:
            return _INT_KEY + varint(value)
        return string_field(f.ANNOTATION_STRING, str(value))
    if kind is float:
        return double_field(f.ANNOTATION_DOUBLE, value)
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and depth < _MAX_DEPTH:
        items = []
        for item in value:
            part = scalar_bytes(item, depth + 1)
            items.append(length_field(f.ANNOTATION_ARRAY_VALUES, part if part is not None else b""))
        return b"".join(items) if items else string_field(f.ANNOTATION_STRING, "[]")
    if isinstance(value, dict) and depth < _MAX_DEPTH:
        entries = []
        for key, item in value.items():
            part = scalar_bytes(item, depth + 1)
            if part is not None:
                entries.append(length_field(f.ANNOTATION_DICT_ENTRIES,
                                            string_field(f.ANNOTATION_NAME, str(key)) + part))
        return b"".join(entries) if entries else string_field(f.ANNOTATION_STRING, "{}")
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if isinstance(value, int):
        return scalar_bytes(int(value), depth)
    if isinstance(value, float):
        return double_field(f.ANNOTATION_DOUBLE, float(value))
    return string_field(f.ANNOTATION_STRING, str(value))


def annotation_bytes(name_part: bytes, value_part: bytes) -> bytes:
    """A whole ``TrackEvent.debug_annotations`` field from its name and value parts."""
    body = name_part + value_part
    size = len(body)
    return f.ANNOTATION_KEY + (VARINT[size] if size < 16384 else varint(size)) + body


class Annotations(dict):
    """``(name, value)`` -> the whole annotation field, for the events of one process.

    Looked up with ``map(cache.__getitem__, args.items())``, so an argument seen
    before costs one C-level dictionary lookup; a miss is encoded by
    :meth:`__missing__` and kept, unless its value is a long string, a float or
    an id seen about once (a span id). Values that compare equal share an
    entry, so an attribute holding both ``1`` and ``True`` (or ``2`` and ``2.0``)
    is written as the first seen: the same number, typed as first seen.

    The ``rank`` and ``role`` the Chrome trace adds to every event restate its
    process's name; pairs in ``elided`` (the process's own rank and role) are
    written as nothing.
    """

    __slots__ = ("interner", "elided")

    def __init__(self, interner: Interner, elided: frozenset = frozenset()) -> None:
        super().__init__()
        self.interner = interner
        self.elided = elided

    def __missing__(self, item: tuple[Any, Any]) -> bytes:
        if item in self.elided:
            self[item] = b""
            return b""
        name, value = item
        interner = self.interner
        if type(name) is not str:
            name = str(name)
        kind = type(value)
        if kind is str:
            if name in INLINE_KEYS:
                prefix = interner.inline_prefix(name, len(value)) if value.isascii() else None
                return prefix + value.encode() if prefix is not None else \
                    annotation_bytes(interner.key(name), string_field(f.ANNOTATION_STRING, value))
            encoded = annotation_bytes(interner.key(name), interner.string_value(value))
            keep = len(value) <= LONG_STRING
        else:
            part = scalar_bytes(value)
            if part is None:
                return b""
            encoded = annotation_bytes(interner.key(name), part)
            keep = kind is not float
        if keep:
            if len(self) >= _CACHE_LIMIT:
                self.clear()
            self[item] = encoded
        return encoded


class Interner:
    """The interning tables of one packet sequence, and the encoded annotations they make.

    Args:
        max_entries: Strings held before :attr:`full` asks for a reset.
    """

    __slots__ = ("names", "categories", "keys", "strings", "caches", "_inline", "_next", "_pending",
                 "_count", "max_entries")

    def __init__(self, max_entries: int = 200_000) -> None:
        self.max_entries = max(16, max_entries)
        #: Event name -> its ``name_iid`` field, ready to append to a TrackEvent.
        self.names: dict[str, bytes] = {}
        #: Category -> its ``category_iids`` field.
        self.categories: dict[str, bytes] = {}
        #: Annotation name -> its ``name_iid`` field inside a DebugAnnotation.
        self.keys: dict[str, bytes] = {}
        #: String value -> its ``string_value_iid`` field.
        self.strings: dict[str, bytes] = {}
        #: Process -> its annotation cache (:class:`Annotations`).
        self.caches: dict[Any, Annotations] = {}
        # (name, length) -> everything of an in-place string annotation but the text
        self._inline: dict[tuple[str, int], bytes] = {}
        self._next = [1, 1, 1, 1]
        self._pending: list[bytes] = []
        self._count = 0

    @property
    def full(self) -> bool:
        """Whether the tables hold more than ``max_entries`` strings."""
        return self._count > self.max_entries

    def reset(self) -> None:
        """Forgets every string (the sequence's incremental state is being cleared)."""
        self.names.clear()
        self.categories.clear()
        self.keys.clear()
        self.strings.clear()
        self.caches.clear()
        self._inline.clear()
        self._next = [1, 1, 1, 1]
        self._pending.clear()
        self._count = 0

    def take_pending(self) -> bytes:
        """The ``InternedData`` body of the entries made since the last call (empty if none)."""
        if not self._pending:
            return b""
        body = b"".join(self._pending)
        self._pending.clear()
        return body

    def _intern(self, table: int, text: str) -> int:
        iid = self._next[table]
        self._next[table] = iid + 1
        self._count += 1
        field = (f.INTERNED_EVENT_CATEGORIES, f.INTERNED_EVENT_NAMES,
                 f.INTERNED_ANNOTATION_NAMES, f.INTERNED_ANNOTATION_STRINGS)[table]
        self._pending.append(length_field(field, _entry(iid, text)))
        return iid

    def _field(self, table: dict, index: int, key_bytes: bytes, text: Any) -> bytes:
        # The field naming ``text`` by its iid in ``table`` (interned on first use).
        part = table.get(text)
        if part is None:
            name = text if type(text) is str else "" if text is None else str(text)
            part = table[text] = key_bytes + varint(self._intern(index, name))
        return part

    def name(self, text: Any) -> bytes:
        """The ``name_iid`` field of an event named ``text``."""
        part = self.names.get(text)
        return part if part is not None else self._field(self.names, 1, f.NAME_IID_KEY, text)

    def category(self, text: Any) -> bytes:
        """The ``category_iids`` field of an event in category ``text``."""
        part = self.categories.get(text)
        return part if part is not None else self._field(self.categories, 0, f.CATEGORY_IID_KEY, text)

    def key(self, text: str) -> bytes:
        """The ``name_iid`` field of a DebugAnnotation named ``text``."""
        part = self.keys.get(text)
        return part if part is not None else self._field(self.keys, 2, _NAME_IID_KEY, text)

    def string_value(self, text: str) -> bytes:
        """The value part of a DebugAnnotation holding ``text``: interned unless long."""
        if len(text) > LONG_STRING:
            return string_field(f.ANNOTATION_STRING, text)
        part = self.strings.get(text)
        if part is None:
            part = self.strings[text] = _STRING_IID_KEY + varint(self._intern(3, text))
        return part

    def annotations(self, process: Any, elided: frozenset = frozenset()) -> Annotations:
        """The annotation cache of one process (made on first use; ``elided`` then applies)."""
        cache = self.caches.get(process)
        if cache is None:
            if len(self.caches) >= 1024:
                self.caches.clear()
            cache = self.caches[process] = Annotations(self, elided)
        return cache

    def inline_prefix(self, name: str, length: int) -> bytes | None:
        """Everything of an in-place string annotation but the text itself (ASCII ``length``)."""
        key = (name, length)
        prefix = self._inline.get(key)
        if prefix is None and length < 128:
            name_part = self.key(name)
            value_key = varint((f.ANNOTATION_STRING << 3) | 2) + VARINT[length]
            size = len(name_part) + len(value_key) + length
            prefix = self._inline[key] = f.ANNOTATION_KEY + VARINT[size] + name_part + value_key
        return prefix

    def span_annotation(self, name: str, span: str) -> bytes:
        """An annotation holding a span id, written in place (it is seen once or twice)."""
        prefix = self._inline.get((name, len(span)))
        if prefix is None:
            prefix = self.inline_prefix(name, len(span))
        if prefix is not None and span.isascii():
            return prefix + span.encode()
        return annotation_bytes(self.key(name), string_field(f.ANNOTATION_STRING, span))

    def encode_args(self, args: dict[Any, Any], cache: Annotations) -> bytes:
        """Every ``name: value`` of ``args`` as ``debug_annotations`` fields, in order."""
        try:
            return b"".join(map(cache.__getitem__, args.items()))
        except TypeError:
            pass  # a list or dict value (unhashable): one at a time
        parts = []
        for item in args.items():
            value = item[1]
            if isinstance(value, (list, dict)):
                part = scalar_bytes(value)
                if part is not None:
                    parts.append(annotation_bytes(self.key(str(item[0])), part))
            else:
                parts.append(cache[item])
        return b"".join(parts)
