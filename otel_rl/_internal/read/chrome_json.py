"""Chrome JSON documents: ``{"traceEvents": [...]}`` or a bare array (torch profiler traces among them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from ..encode.chrome_trace import kineto_shift_us
from .limits import InputLimits
from .source import open_input

__all__ = ["document_events", "iter_chrome_json_events", "read_document"]


def read_document(path: str, limits: InputLimits | None = None) -> Any:
    """A JSON document parsed whole, within the decompression bound.

    Raises:
        orjson.JSONDecodeError: The file is not one JSON document.
        InputLimitError: A gzipped file expands past its bound.
    """
    with open_input(path, limits) as f:
        return orjson.loads(f.read_document())


def iter_chrome_json_events(path: str, limits: InputLimits | None = None) -> Iterator[dict[str, Any]]:
    """Yields the events of a Chrome JSON document: ``{"traceEvents": [...]}`` or ``[...]``.

    This is the seam for kernel-level traces from the torch profiler (Kineto):
    they land on the same timeline as otel_rl's spans when both use the wall
    clock. otel_rl's timestamps are Unix-epoch microseconds; Kineto writes
    epoch microseconds too on current PyTorch, but may write timestamps
    relative to ``baseTimeNanoseconds`` - those (recognisably small) are
    shifted onto the epoch here. A profiler clock that is not the wall clock
    cannot be aligned after the fact.

    Args:
        path: A ``.json`` or ``.json.gz`` file.
        limits: Bounds on reading it (a ``.gz`` file's decompressed size).

    Yields:
        Event dicts, in file order.

    Raises:
        ValueError: The file is not a Chrome JSON document.
        InputLimitError: A gzipped file expands past its bound.
    """
    yield from document_events(read_document(path, limits))


def document_events(doc: Any) -> Iterator[dict[str, Any]]:
    """The event dicts of a parsed Chrome JSON document, shifted onto the epoch when Kineto's are not.

    Raises:
        ValueError: ``doc`` is not a Chrome JSON document.
    """
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            raise ValueError("a JSON object without a traceEvents list")
        base_ns = doc.get("baseTimeNanoseconds")
    elif isinstance(doc, list):
        events, base_ns = doc, None
    else:
        raise ValueError("neither a JSON object nor an array")
    shift = kineto_shift_us(events, base_ns)
    for event in events:
        if isinstance(event, dict):
            if shift and isinstance(event.get("ts"), (int, float)):
                event["ts"] += shift
            yield event
