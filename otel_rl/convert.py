"""Merges trace files into one Chrome trace JSON that Perfetto opens.

``python -m otel_rl.convert RUN_DIR/ -o trace.json`` (or ``otel-rl convert``)
reads any mix of:

* per-rank Chrome trace JSONL files written by otel_rl (``traces-r*.jsonl``),
* OTLP/JSON files, one ``ExportTraceServiceRequest`` per line or per file (what
  the OpenTelemetry Collector's file exporter writes),
* Chrome JSON documents (``{"traceEvents": [...]}`` or a bare array), such as
  torch profiler traces,

each optionally gzipped, and writes one ``{"traceEvents": [...]}`` document
(``.json`` or ``.json.gz``). Events are streamed through: memory stays flat
however large the inputs (a JSON *document* input is the exception: it is
parsed whole). What one input may cost is bounded (:class:`InputLimits`): a
line over ``--max-line-mb`` is skipped, a ``.gz`` input is read only until it
expands past ``--max-gzip-ratio`` times its size; both are reported.
Processes that used the same pid in different files get distinct pids, so
ranks on different machines never share a track.
"""

from __future__ import annotations

import argparse
import base64
import collections
import glob
import gzip
import os
import re
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from ._internal.encode.chrome_trace import BATCH_MARKER, BATCH_MARKER_PREFIX, ChromeTraceEncoder, kineto_shift_us
from ._internal.encode.flows import FlowJoiner
from ._internal import keys
from ._internal.keys import MERGED_TRACE_FILE, TRACE_JOIN_KEY

__all__ = ["ConvertStats", "InputLimitError", "InputLimits", "convert", "discover_inputs",
           "iter_chrome_json_events", "iter_lines", "main", "sniff_file", "spans_from_otlp_json"]

_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")
_CHUNK = 1 << 22
_WRITE_EVERY = 8192
_MAX_REPORTED = 1000
# Remapped integer pids start above every real Linux pid and every pid the
# encoder synthesises, and stay below 2**32 (Perfetto's limit).
_REMAP_PID_BASE = 1 << 23
_OTLP_SOURCE = "<otlp>"


@dataclass
class ConvertStats:
    """What a conversion read, wrote and skipped.

    Attributes:
        files: Input files whose events were converted.
        events: Events written to the output.
        spans: OTLP spans converted (their events are part of ``events``).
        skipped_truncated: Incomplete last lines skipped (a writer was killed mid-line).
        malformed: ``(file, line, message)`` for lines that could not be read
            (the first 1000; ``malformed_count`` counts all).
        malformed_count: Every malformed line.
        skipped_files: ``(file, reason)`` for inputs that were not converted.
        cut_short: ``(file, reason)`` for inputs converted only in part: a
            gzipped file that expanded past its decompression bound
            (:class:`InputLimits`) was read up to there.
        ignored: Files found in a directory or by a pattern that hold no trace
            (session records, metrics): left out without a warning.
        remapped_pids: Processes given a new pid because another file used theirs.
        output: The file written.
        seconds: Wall-clock duration of the conversion.
    """

    files: int = 0
    events: int = 0
    spans: int = 0
    skipped_truncated: int = 0
    malformed: list[tuple[str, int, str]] = field(default_factory=list)
    malformed_count: int = 0
    skipped_files: list[tuple[str, str]] = field(default_factory=list)
    cut_short: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    remapped_pids: int = 0
    output: str = ""
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def _malformed(self, path: str, line: int, message: str) -> None:
        self.malformed_count += 1
        if len(self.malformed) < _MAX_REPORTED:
            self.malformed.append((path, line, message))


# --- input discovery --------------------------------------------------------------------
def _natural_key(path: str) -> list[Any]:
    # traces-r2 before traces-r10: the first file to use a pid keeps it.
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


_MERGED_NAMES = (MERGED_TRACE_FILE, MERGED_TRACE_FILE + ".gz")


def _is_trace_name(name: str) -> bool:
    return name.endswith(_SUFFIXES)


def discover_inputs(inputs: Sequence[str], exclude: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """Expands files, directories (recursively) and glob patterns into input files.

    Args:
        inputs: Paths, directories or glob patterns.
        exclude: Paths never to read (the output being written).

    Returns:
        ``(files, missing)``: the files found, naturally sorted and without
        duplicates, and the inputs that matched nothing.
    """
    skip = {os.path.realpath(p) for p in exclude}
    found: list[str] = []
    seen: set[str] = set()
    missing: list[str] = []

    def add(path: str) -> None:
        real = os.path.realpath(path)
        if real not in seen and real not in skip:
            seen.add(real)
            found.append(path)

    def add_dir(directory: str) -> None:
        names = []
        for root, dirs, files in os.walk(directory):
            dirs.sort()
            # The demo's merged trace repeats every rank's events: read it only when named.
            names.extend(os.path.join(root, n) for n in files
                         if _is_trace_name(n) and n not in _MERGED_NAMES)
        for name in sorted(names, key=_natural_key):
            add(name)

    for item in inputs:
        if os.path.isdir(item):
            add_dir(item)
        elif os.path.isfile(item):
            add(item)
        elif glob.has_magic(item):
            matches = sorted(glob.glob(item, recursive=True), key=_natural_key)
            if not matches:
                missing.append(item)
            for match in matches:
                if os.path.isdir(match):
                    add_dir(match)
                elif os.path.isfile(match):
                    add(match)
        else:
            missing.append(item)
    return found, missing


# --- bounded reading ----------------------------------------------------------------------------
#: A line longer than this is skipped and reported (``--max-line-mb``): a JSON
#: line is parsed whole, so its length is what reading it costs in memory.
DEFAULT_MAX_LINE_BYTES = 64 << 20
#: A ``.gz`` input stops being read once it has expanded past this many times its
#: compressed size (``--max-gzip-ratio``). Trace JSON compresses 5-20 times; a
#: run of one repeated byte compresses about 1,000 times.
DEFAULT_MAX_GZIP_RATIO = 100.0
#: ... but never before this many bytes: small archives of repetitive text stay readable.
DEFAULT_MIN_GZIP_BYTES = 64 << 20


@dataclass(frozen=True)
class InputLimits:
    """What one input file may cost to read: bounds against damaged or hostile files.

    What goes past a bound is skipped and reported, never read into memory:
    a line longer than ``max_line_bytes`` is skipped (the lines after it are
    read); a gzipped input is read only until it has expanded past
    ``max_gzip_ratio`` times its compressed size (and at least
    ``min_gzip_bytes``), the rest of it left unread - a gzipped JSON document,
    parsed whole, is then skipped.

    Attributes:
        max_line_bytes: The longest JSON line read (``--max-line-mb``).
        max_gzip_ratio: Decompressed bytes per compressed byte a ``.gz`` input
            may reach (``--max-gzip-ratio``); 0 for no bound.
        min_gzip_bytes: Decompressed bytes every ``.gz`` input may reach, whatever its ratio.
    """

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_gzip_ratio: float = DEFAULT_MAX_GZIP_RATIO
    min_gzip_bytes: int = DEFAULT_MIN_GZIP_BYTES

    def __post_init__(self) -> None:
        if self.max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be at least 1, not {self.max_line_bytes}")
        if not self.max_gzip_ratio >= 0:
            raise ValueError(f"max_gzip_ratio must be 0 (no bound) or more, not {self.max_gzip_ratio}")

    def gzip_bound(self, compressed_bytes: int) -> int | None:
        """Decompressed bytes a ``.gz`` file of ``compressed_bytes`` may yield (``None``: no bound)."""
        if not self.max_gzip_ratio:
            return None
        return max(self.min_gzip_bytes, int(self.max_gzip_ratio * compressed_bytes))


_DEFAULT_LIMITS = InputLimits()


class InputLimitError(ValueError):
    """An input needs to be read whole (a JSON document) but is over a bound of :class:`InputLimits`."""


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.0f} MiB" if n >= 1 << 20 else f"{n:,.0f} bytes"


def _long_line_message(length: int, limits: InputLimits) -> str:
    return f"line of {length:,} bytes, over the bound of {_mib(limits.max_line_bytes)} (--max-line-mb)"


class _Input:
    """An input file, decompressed if gzipped, whose reads stop at the decompression bound.

    Reaching the bound reads as the end of the file; ``cut_short`` then tells
    the caller that there was more, and ``cut_message`` says why it was left.
    """

    def __init__(self, path: str, limits: InputLimits,
                 on_read: Callable[[int], None] | None = None) -> None:
        self._on_read = on_read
        self._limits = limits
        self.cut_short = False
        self.decompressed = 0
        if path.endswith(".gz"):
            self._file: IO[bytes] = gzip.open(path, "rb")  # type: ignore[assignment]
            try:
                self._bound = limits.gzip_bound(os.fstat(self._file.fileno()).st_size)
            except BaseException:
                self._file.close()
                raise
        else:
            self._file = open(path, "rb", buffering=_CHUNK)
            self._bound = None

    def __enter__(self) -> _Input:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all that is left within the bound when negative).

        Raises:
            OSError: The file cannot be read, or its compressed data is damaged.
            EOFError: A gzipped file ends before its end-of-stream marker.
        """
        try:
            if self._bound is None:
                data = self._file.read(size)
            else:
                left = self._bound - self.decompressed
                if left <= 0:
                    # One byte more tells a file that ends right at the bound from one cut short.
                    if not self.cut_short and self._file.read(1):
                        self.cut_short = True
                    return b""
                data = self._file.read(left if size < 0 else min(size, left))
                self.decompressed += len(data)
        except zlib.error as exc:
            # Not an OSError: readers that skip an unreadable file would let it through.
            raise gzip.BadGzipFile(f"damaged compressed data: {exc}") from None
        if data and self._on_read is not None:
            self._on_read(len(data))
        return data

    def rewind(self) -> None:
        self._file.seek(0)
        self.decompressed = 0
        self.cut_short = False

    def read_document(self) -> bytes:
        """The whole content, for a JSON document (parsed whole).

        Raises:
            InputLimitError: The content is over the decompression bound.
        """
        data = self.read()
        if self.read(1) or self.cut_short:
            raise InputLimitError(self.cut_message())
        return data

    def cut_message(self) -> str:
        limits = self._limits
        return (f"stopped after {_mib(self.decompressed)} decompressed: more than "
                f"{limits.max_gzip_ratio:g} times its compressed size (--max-gzip-ratio)")


def _open_input(path: str, limits: InputLimits | None = None,
                on_read: Callable[[int], None] | None = None) -> _Input:
    return _Input(path, limits or _DEFAULT_LIMITS, on_read)


# Items of _line_blocks: whole lines, a line over the bound, a last line without a newline.
_BLOCK, _LONG, _TAIL = 0, 1, 2


def _line_blocks(f: _Input, max_line: int) -> Iterator[tuple[int, Any]]:
    """Splits a stream into blocks of whole lines without ever holding a line over ``max_line``.

    Yields ``(_BLOCK, bytes)`` for consecutive whole lines, each ending with a
    newline; ``(_LONG, length)`` in their place for a line longer than
    ``max_line`` (dropped as it streams by); last ``(_TAIL, bytes)`` for a final
    line without a newline. A stream cut short at the decompression bound
    yields no tail: the line was cut by the reader, not by a writer.
    """
    # Reads no larger than the bound: every line inside one read is within it,
    # only a line that spans reads needs its length checked.
    size = max(1, min(_CHUNK, max_line))
    head: list[bytes] = []  # the start of a line whose newline has not come yet
    head_len = 0
    skipping = False  # inside a line over the bound
    while True:
        chunk = f.read(size)
        if not chunk:
            break
        nl = chunk.find(b"\n")
        if nl < 0:
            head_len += len(chunk)
            if not skipping:
                head.append(chunk)
                if head_len > max_line:
                    skipping = True
                    head = []
            continue
        prefix = b""
        start = 0
        if head_len or skipping:
            length = head_len + nl
            if skipping or length > max_line:
                yield _LONG, length
                start = nl + 1
            else:
                prefix = b"".join(head)
            head = []
            head_len = 0
            skipping = False
        last = chunk.rfind(b"\n")
        if prefix:
            yield _BLOCK, b"".join((prefix, memoryview(chunk)[:last + 1]))
        elif last >= start:
            yield _BLOCK, chunk[start:last + 1] if start or last + 1 < len(chunk) else chunk
        rest = len(chunk) - last - 1
        if rest:
            head = [chunk[last + 1:]]
            head_len = rest
    if f.cut_short:
        return
    if skipping:
        yield _LONG, head_len
    elif head_len:
        yield _TAIL, b"".join(head)


# --- Chrome JSON documents (torch profiler traces) ---------------------------------------
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
    with _open_input(path, limits) as f:
        doc = orjson.loads(f.read_document())
    yield from _document_events(doc)


def _document_events(doc: Any) -> Iterator[dict[str, Any]]:
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


# --- OTLP/JSON ---------------------------------------------------------------------------------
_OTLP_KINDS = {
    0: SpanKind.INTERNAL, 1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER, 5: SpanKind.CONSUMER,
    "SPAN_KIND_UNSPECIFIED": SpanKind.INTERNAL, "SPAN_KIND_INTERNAL": SpanKind.INTERNAL,
    "SPAN_KIND_SERVER": SpanKind.SERVER, "SPAN_KIND_CLIENT": SpanKind.CLIENT,
    "SPAN_KIND_PRODUCER": SpanKind.PRODUCER, "SPAN_KIND_CONSUMER": SpanKind.CONSUMER,
}
_OTLP_STATUS = {
    0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR,
    "STATUS_CODE_UNSET": StatusCode.UNSET, "STATUS_CODE_OK": StatusCode.OK,
    "STATUS_CODE_ERROR": StatusCode.ERROR,
}
_UNSET_STATUS = Status(StatusCode.UNSET)
# Span.flags bits 8 and 9 (OTLP 1.1+): whether, and that, the parent was remote.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


def _get(obj: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    # The OTLP/JSON spec mandates lowerCamelCase; protobuf JSON printers can also
    # emit the proto field names, and receivers are asked to accept both.
    value = obj.get(camel)
    if value is None:
        value = obj.get(snake, default)
    return value


def _any_value(value: dict[str, Any] | None) -> Any:
    if not value:
        return None
    for key, item in value.items():
        if key == "stringValue" or key == "string_value":
            return item
        if key == "intValue" or key == "int_value":
            return int(item)  # int64 is a JSON string in OTLP/JSON
        if key == "doubleValue" or key == "double_value":
            return float(item)  # also "NaN", "Infinity"
        if key == "boolValue" or key == "bool_value":
            return bool(item)
        if key == "arrayValue" or key == "array_value":
            return [_any_value(v) for v in (item or {}).get("values") or ()]
        if key == "kvlistValue" or key == "kvlist_value":
            return _attributes((item or {}).get("values"))
        if key == "bytesValue" or key == "bytes_value":
            return item  # base64 text; kept as such
    return None


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    if not items:
        return {}
    return {kv.get("key", ""): _any_value(kv.get("value")) for kv in items}


def _otlp_id(value: Any, size: int) -> int:
    if not value:
        return 0
    if len(value) == size * 2:
        try:
            return int(value, 16)
        except ValueError:
            pass
    # The protobuf JSON mapping writes bytes as base64; some exporters follow it.
    return int.from_bytes(base64.b64decode(value), "big")


def _otlp_int(value: Any) -> int:
    return int(value) if value is not None and value != "" else 0


class _OtlpReader:
    """Builds ``ReadableSpan`` objects from OTLP/JSON, sharing resources and scopes."""

    def __init__(self) -> None:
        self._resources: dict[bytes, Resource] = {}
        self._scopes: dict[tuple[str, str], InstrumentationScope] = {}

    def spans(self, request: dict[str, Any]) -> list[ReadableSpan]:
        out: list[ReadableSpan] = []
        for resource_spans in _get(request, "resourceSpans", "resource_spans") or ():
            resource_json = resource_spans.get("resource") or {}
            raw_attrs = resource_json.get("attributes") or []
            cache_key = orjson.dumps(raw_attrs)
            resource = self._resources.get(cache_key)
            if resource is None:
                if len(self._resources) >= 4096:
                    self._resources.clear()
                # The constructor, not Resource.create: no detectors, no defaults
                # mixed into someone else's resource.
                resource = self._resources[cache_key] = Resource(_attributes(raw_attrs))
            for scope_spans in _get(resource_spans, "scopeSpans", "scope_spans") or ():
                scope_json = scope_spans.get("scope") or {}
                scope_key = (scope_json.get("name") or "", scope_json.get("version") or "")
                scope = self._scopes.get(scope_key)
                if scope is None:
                    scope = self._scopes[scope_key] = InstrumentationScope(*scope_key)
                for span_json in scope_spans.get("spans") or ():
                    out.append(self._span(span_json, resource, scope))
        return out

    @staticmethod
    def _span(obj: dict[str, Any], resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
        trace_id = _otlp_id(_get(obj, "traceId", "trace_id"), 16)
        span_id = _otlp_id(_get(obj, "spanId", "span_id"), 8)
        parent_id = _otlp_id(_get(obj, "parentSpanId", "parent_span_id"), 8)
        kind = _OTLP_KINDS.get(obj.get("kind", 0), SpanKind.INTERNAL)
        span_flags = _otlp_int(obj.get("flags"))
        # A span in an exported file was sampled, whether or not its flags say so.
        trace_flags = TraceFlags((span_flags & 0xFF) | TraceFlags.SAMPLED)
        parent = None
        if parent_id:
            if span_flags & _HAS_IS_REMOTE:
                remote = bool(span_flags & _IS_REMOTE)
            else:
                remote = kind is SpanKind.SERVER or kind is SpanKind.CONSUMER
            parent = SpanContext(trace_id, parent_id, remote, trace_flags)
        status_json = obj.get("status") or {}
        code = _OTLP_STATUS.get(status_json.get("code", 0), StatusCode.UNSET)
        status = _UNSET_STATUS if code is StatusCode.UNSET else Status(code, status_json.get("message"))
        events = tuple(
            Event(ev.get("name", ""), _attributes(ev.get("attributes")),
                  _otlp_int(_get(ev, "timeUnixNano", "time_unix_nano")))
            for ev in obj.get("events") or ()
        )
        links = tuple(
            Link(SpanContext(_otlp_id(_get(ln, "traceId", "trace_id"), 16),
                             _otlp_id(_get(ln, "spanId", "span_id"), 8), True),
                 _attributes(ln.get("attributes")))
            for ln in obj.get("links") or ()
        )
        return ReadableSpan(
            name=obj.get("name", ""),
            context=SpanContext(trace_id, span_id, False, trace_flags),
            parent=parent,
            resource=resource,
            attributes=_attributes(obj.get("attributes")),
            events=events,
            links=links,
            kind=kind,
            status=status,
            start_time=_otlp_int(_get(obj, "startTimeUnixNano", "start_time_unix_nano")),
            end_time=_otlp_int(_get(obj, "endTimeUnixNano", "end_time_unix_nano")),
            instrumentation_scope=scope,
        )


#: Types an id may have: it keys dictionaries (processes, threads, sessions); a
#: JSON list or object cannot identify anything.
_ID_TYPES = frozenset({str, int, float, bool, type(None)})
_RESOURCE_IDS = (keys.RANK, keys.ROLE, keys.PROCESS_PID, keys.SERVICE_NAME)
_SPAN_IDS = (keys.TASK_ID, keys.SESSION_ID, keys.STEP, keys.REQUEST_ID, keys.THREAD_ID)


def _otlp_span_problem(span: ReadableSpan) -> str | None:
    """Why an OTLP span read from JSON cannot be used (a name or an id of the wrong JSON type), or ``None``."""
    if type(span.name) is not str:
        return "name is not a string"
    res = span.resource.attributes
    for key in _RESOURCE_IDS:
        if type(res.get(key)) not in _ID_TYPES:
            return f"resource attribute {key} is not a string or number"
    attrs = span.attributes or {}
    for key in _SPAN_IDS:
        if type(attrs.get(key)) not in _ID_TYPES:
            return f"{key} is not a string or number"
    for event in span.events:
        if type(event.name) is not str:
            return "an event name is not a string"
        attrs = event.attributes or {}
        for key in _SPAN_IDS:
            if type(attrs.get(key)) not in _ID_TYPES:
                return f"event {event.name}: {key} is not a string or number"
    return None


def spans_from_otlp_json(request: dict[str, Any]) -> list[ReadableSpan]:
    """Builds SDK spans from one OTLP/JSON ``ExportTraceServiceRequest``.

    Args:
        request: The parsed JSON object (``{"resourceSpans": [...]}``).

    Returns:
        The spans, in request order, each with its resource and scope.
    """
    return _OtlpReader().spans(request)


# --- Chrome JSON lines ---------------------------------------------------------------------------
_MISSING = object()


def _replace_pid(line: bytes, old: Any, new: Any) -> bytes | None:
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
        batch = _verified_batch(data, pos, marker, eol, mapping)
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


def _chunk_end(data: bytes) -> int:
    """Where to cut ``data`` for parsing: after its last batch marker, so batches
    stay whole and can be verified by checksum; at the last newline once a
    batch marker is overdue; 0 to wait for more data."""
    marker = data.rfind(BATCH_MARKER_PREFIX)
    if marker >= 0:
        eol = data.find(b"\n", marker)
        if eol >= 0:
            return eol + 1
    if len(data) < 2 * _CHUNK:
        return 0
    return data.rfind(b"\n") + 1


def _verified_batch(data: bytes, pos: int, marker: int, eol: int,
                    mapping: dict[Any, Any]) -> tuple[int, bytes, int] | None:
    """``(start, blob, events)`` for the batch the marker at ``marker`` closes, if
    its checksum matches and all its pids are mapped; ``None`` otherwise."""
    try:
        info = orjson.loads(data[marker:eol])["args"]
        length, lines, crc, pids = info["bytes"], info["lines"], info["crc32"], info["pids"]
        start = marker - length
        if start < pos or (start and data[start - 1] != 10) or lines <= 0:
            return None
        if zlib.crc32(data[start:marker]) != crc:
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
        blob = _remap_blob(blob, lines, changes)
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
        blob = _remap_blob(blob, len(parts), changes) if len(distinct) == 1 else None
        if blob is None:
            for i, pid in enumerate(pids):
                new = changes.get(pid)
                if new is not None:
                    parts[i] = _with_pid(parts[i], pid, new)
            blob = b",\n".join(parts)
    if parts:
        blobs.append(blob)
    return len(parts)


def _remap_blob(blob: bytes, count: int, changes: dict[Any, Any]) -> bytes | None:
    # The usual case - one file, one process, one pid to change - done on the
    # whole block at once, when every pid key in it is exactly ``"pid":OLD,``.
    ((old, new),) = changes.items()
    if type(old) is not int or type(new) is not int:
        return None
    pieces = blob.split(b'"pid":%d,' % old)
    if len(pieces) != count + 1 or blob.count(b'"pid":') != count:
        return None
    return (b'"pid":%d,' % new).join(pieces)


def _with_pid(line: bytes, old: Any, new: Any) -> bytes:
    changed = _replace_pid(line, old, new)
    if changed is None:
        event = orjson.loads(line)
        event["pid"] = new
        changed = orjson.dumps(event)
    return changed


class _Done:
    """A finished job, for the in-process path (same interface as a future)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


def _worker_pool(workers: int) -> Any:
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor

    # fork starts workers in milliseconds, but is only safe while this process
    # has no other thread that could hold a lock the children would inherit.
    method = "fork" if threading.active_count() == 1 and \
        "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method))


# --- reading input files ----------------------------------------------------------------------
def _lines_of(blocks: Iterator[tuple[int, Any]]) -> Iterator[bytes | int]:
    """The lines of :func:`_line_blocks` one by one: bytes, or the length of a line over the bound."""
    for kind, payload in blocks:
        if kind == _BLOCK:
            lines = payload.split(b"\n")
            lines.pop()
            yield from lines
        else:
            yield payload


def _first_line(f: _Input, limits: InputLimits) -> bytes | int | None:
    """The first line that is not blank (its length if over the bound); ``None`` when there is none."""
    return next((line for line in _lines_of(_line_blocks(f, limits.max_line_bytes))
                 if type(line) is int or line.strip()), None)


def sniff_file(path: str, limits: InputLimits | None = None) -> tuple[str, Any]:
    """Tells a file's kind from its first JSON line (or the whole document).

    Args:
        path: The file (optionally gzipped).
        limits: Bounds on reading it: a first line over the bound is not parsed;
            a document is parsed whole only within the decompression bound.

    Returns:
        ``(kind, head)``: ``kind`` is ``"chrome-jsonl"``, ``"otlp-jsonl"``,
        ``"document"``, ``"empty"``, ``"not JSON"`` or a reason starting with
        ``"not a trace file"``; ``head`` is the first JSON object of a
        Chrome JSON lines file or of a file that holds no trace (session
        records, request events), ``None`` otherwise.

    Raises:
        OSError: The file cannot be read.
        InputLimitError: A gzipped file expands past its bound before its
            first line (or its document) ends.
    """
    limits = limits or _DEFAULT_LIMITS
    with _open_input(path, limits) as f:
        lines = _lines_of(_line_blocks(f, limits.max_line_bytes))
        first = next((line for line in lines if type(line) is int or line.strip()), None)
        if first is None:
            if f.cut_short:
                raise InputLimitError(f.cut_message())
            return "empty", None
        head = None
        if type(first) is int:
            # Too long to be a line worth parsing: a document on one line if
            # nothing follows it, else JSON lines whose first line will be skipped.
            whole = next((line for line in lines if type(line) is int or line.strip()), None) is None
        else:
            try:
                head = orjson.loads(first)
            except orjson.JSONDecodeError:
                head = None
            # A pretty-printed document opens with a line that is no JSON value by
            # itself; a damaged JSON line most often still ends like one.
            whole = head is None and not first.rstrip().endswith((b"}", b"]"))
        if whole:
            f.rewind()
            try:
                doc = orjson.loads(f.read_document())
            except orjson.JSONDecodeError:
                doc = None
            if doc is not None:
                return _classify_document(doc), None
        if head is None:
            # JSON lines whose first line is damaged: the first object among the next ones.
            f.rewind()
            for n, line in enumerate(_lines_of(_line_blocks(f, limits.max_line_bytes))):
                if n > 1000:
                    break
                if type(line) is int:
                    continue
                try:
                    head = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(head, dict):
                    break
                head = None
            if head is None:
                return "not JSON", None
    if isinstance(head, list):
        return "document", None
    if not isinstance(head, dict):
        return "not a trace file", None
    if "traceEvents" in head:
        return "document", None
    if "resourceSpans" in head or "resource_spans" in head:
        return "otlp-jsonl", None
    if "ph" in head:
        return "chrome-jsonl", head
    return "not a trace file (no Chrome trace events or OTLP spans)", head


def _classify_document(doc: Any) -> str:
    if isinstance(doc, list) or (isinstance(doc, dict) and "traceEvents" in doc):
        return "document"
    if isinstance(doc, dict) and ("resourceSpans" in doc or "resource_spans" in doc):
        return "otlp-jsonl"  # one request spread over lines: read as a document below
    return "not a trace file"


def iter_lines(path: str, on_read: Callable[[int], None] | None = None, limits: InputLimits | None = None,
               on_skip: Callable[[int | None, str], None] | None = None) -> Iterator[tuple[int, bytes, bool]]:
    """Yields ``(line number, line, is_last_line_without_newline)`` for every line of a file.

    A last line without a newline may have been cut short by a writer that died;
    readers skip it with a warning when it does not parse.

    Args:
        path: The file (optionally gzipped).
        on_read: Called with the size of each chunk read (for progress bars).
        limits: Bounds on reading it (:class:`InputLimits`).
        on_skip: Called with ``(line number, why)`` for each line over the line
            bound (it is not yielded; the lines after it are), and with
            ``(None, why)`` when a gzipped file is cut short at its
            decompression bound (after its last whole line).

    Raises:
        InputLimitError: A bound was reached and there is no ``on_skip``.
    """
    limits = limits or _DEFAULT_LIMITS
    with _open_input(path, limits, on_read) as f:
        lineno = 0
        for kind, payload in _line_blocks(f, limits.max_line_bytes):
            if kind == _BLOCK:
                lines = payload.split(b"\n")
                lines.pop()
                for line in lines:
                    lineno += 1
                    yield lineno, line, False
            elif kind == _LONG:
                lineno += 1
                message = _long_line_message(payload, limits)
                if on_skip is None:
                    raise InputLimitError(f"{path}:{lineno}: {message}")
                on_skip(lineno, message)
            else:
                yield lineno + 1, payload, True
        if f.cut_short:
            if on_skip is None:
                raise InputLimitError(f"{path}: {f.cut_message()}")
            on_skip(None, f.cut_message())


# --- output ------------------------------------------------------------------------------------
class _Output:
    """Streams ``{"traceEvents": [...]}``: events are written as they come."""

    def __init__(self, raw: IO[bytes], final_name: str) -> None:
        self._raw = raw
        self._file: IO[bytes] = raw
        if final_name.endswith(".gz"):
            # Level 3: most of the size win of level 9 at several times the speed.
            self._file = gzip.GzipFile(filename=os.path.basename(final_name[:-3]), mode="wb",
                                       fileobj=self._raw, compresslevel=3, mtime=0)
        self._file.write(b'{"traceEvents":[\n')
        self._first = True
        self.events = 0
        # Every event passes here, whichever way it was read: remote flow ends and
        # their parents' slices meet, and close() adds the flow starts.
        self.flows = FlowJoiner()

    def write(self, parts: list[bytes]) -> None:
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
        if self._file is not self._raw:
            self._file.close()
        self._raw.flush()

    def abort(self) -> None:
        if self._file is not self._raw:
            try:
                self._file.close()
            except Exception:  # noqa: BLE001 - already failing; the first error matters
                pass


# --- conversion --------------------------------------------------------------------------------
class _Converter:
    def __init__(self, output: _Output, stats: ConvertStats, workers: int = 0,
                 named: frozenset[str] = frozenset(), limits: InputLimits | None = None) -> None:
        self.out = output
        self.stats = stats
        self.limits = limits or _DEFAULT_LIMITS
        self._named = named  # real paths of the files named one by one
        self._pool = _worker_pool(workers) if workers > 0 else None
        # Chunks in flight, written strictly in submission order.
        self._pending: collections.deque[tuple] = collections.deque()
        self._max_in_flight = 2 * workers + 1 if self._pool is not None else 0
        # pid -> the source that owns it; (source, old pid) -> pid written
        self._owner: dict[Any, str] = {}
        self._mapping: dict[tuple[str, Any], Any] = {}
        self._next_pid = _REMAP_PID_BASE
        self._encoder: ChromeTraceEncoder | None = None
        self._otlp = _OtlpReader()
        self._sources: dict[str, str] = {}  # real path -> input path, for torch traces' ranks

    # pids ------------------------------------------------------------------------------------
    def _claim(self, source: str, pid: Any) -> Any:
        key = (source, pid)
        mapped = self._mapping.get(key)
        if mapped is not None:
            return mapped
        if pid not in self._owner:
            mapped = pid
        elif isinstance(pid, str):
            n = 2
            while f"{pid} #{n}" in self._owner:
                n += 1
            mapped = f"{pid} #{n}"
        else:
            while self._next_pid in self._owner:
                self._next_pid += 1
            mapped = self._next_pid
            self._next_pid += 1
        if mapped != pid:
            self.stats.remapped_pids += 1
        self._owner[mapped] = source
        self._mapping[key] = mapped
        return mapped

    def _write_events(self, source: str, events: Sequence[dict[str, Any]]) -> None:
        parts = []
        dumps = orjson.dumps
        for event in events:
            pid = event.get("pid")
            if pid is not None and (type(pid) is int or type(pid) is str):
                new = self._claim(source, pid)
                if new != pid:
                    event["pid"] = new
            parts.append(dumps(event))
            if len(parts) >= _WRITE_EVERY:
                self.out.write(parts)
                parts = []
        self.out.write(parts)

    # files -------------------------------------------------------------------------------------
    def run(self, files: Sequence[str]) -> None:
        """Converts ``files`` in order, then releases what the OTLP encoder holds."""
        self._sources = {os.path.realpath(p): p for p in files}
        plan = []
        for path in files:
            try:
                kind, head = self._sniff(path)
            except (OSError, EOFError, ValueError) as exc:
                kind, head = f"unreadable: {exc}", None
            mapping: dict[Any, Any] = {}
            if kind == "chrome-jsonl":
                # Each file's main pid is claimed before any chunk is parsed: workers
                # then know how to map nearly every line, and which file keeps a
                # contested pid follows the file order, with or without workers.
                pid = head.get("pid")
                if type(pid) is int or type(pid) is str:
                    mapping[pid] = self._claim(path, pid)
            plan.append((path, kind, mapping))
        for path, kind, mapping in plan:
            self.convert_file(path, kind, mapping)
        self.finish()

    def convert_file(self, path: str, kind: str, mapping: dict[Any, Any]) -> None:
        stats = self.stats
        before = self.out.events
        try:
            if kind == "chrome-jsonl":
                self._chrome_jsonl(path, mapping)
            elif kind == "otlp-jsonl":
                self._drain(0)  # pids are claimed in file order
                self._otlp_jsonl(path)
            elif kind == "document":
                self._drain(0)
                self._document(path)
            elif kind.startswith("not a trace file") and \
                    os.path.realpath(path) not in self._named:
                stats.ignored.append(path)
                return
            else:
                stats.skipped_files.append((path, kind))
                return
        except (OSError, EOFError, ValueError, orjson.JSONDecodeError) as exc:
            # gzip.BadGzipFile is an OSError; a damaged file loses its own events only.
            stats.skipped_files.append((path, f"unreadable: {exc}"))
            self._drain(0)
            if self.out.events == before:
                return
        stats.files += 1

    def _sniff(self, path: str) -> tuple[str, Any]:
        return sniff_file(path, self.limits)

    def _lines(self, path: str) -> Iterator[tuple[int, bytes, bool]]:
        def skipped(lineno: int | None, message: str) -> None:
            if lineno is None:
                self.stats.cut_short.append((path, message))
            else:
                self.stats._malformed(path, lineno, message)

        return iter_lines(path, limits=self.limits, on_skip=skipped)

    def _bad_line(self, path: str, lineno: int, unterminated: bool, message: str) -> None:
        if unterminated:
            self.stats.skipped_truncated += 1
            self.stats.warnings.append(f"{path}:{lineno}: incomplete last line skipped")
        else:
            self.stats._malformed(path, lineno, message)

    def _chrome_jsonl(self, path: str, mapping: dict[Any, Any]) -> None:
        """Sends the file's complete lines, a chunk at a time, to be checked and copied.

        ``mapping`` already holds the file's main pid, which covers every line
        of an otel_rl file; pids seen later are claimed as their chunks are written.
        """
        lines_done = [0]  # lines of this file written so far, for line numbers
        data = b""  # whole lines not submitted yet
        tail = b""
        with _open_input(path, self.limits) as f:
            for kind, payload in _line_blocks(f, self.limits.max_line_bytes):
                if kind == _BLOCK:
                    data = data + payload if data else payload
                    cut = _chunk_end(data)
                    if cut:
                        self._submit(path, data, lines_done, mapping, cut)
                        data = data[cut:]
                elif kind == _LONG:
                    # Skipped in its place in the line order: what came before goes first.
                    if data:
                        self._submit(path, data, lines_done, mapping, len(data))
                        data = b""
                    self._pending.append(("long", path, lines_done, payload, mapping))
                else:
                    tail = payload
            cut_short = f.cut_message() if f.cut_short else None
        # What is left has no batch marker: its whole lines, then perhaps a line
        # cut short by a writer that died.
        if data:
            self._submit(path, data, lines_done, mapping, len(data))
        if tail.strip():
            self._pending.append(("tail", path, lines_done, tail, mapping))
        self._drain(self._max_in_flight)
        if cut_short:
            self.stats.cut_short.append((path, cut_short))

    def _submit(self, path: str, data: bytes, lines_done: list[int],
                mapping: dict[Any, Any], end: int) -> None:
        """Queues ``data[:end]`` (whole lines) to be checked and written in order."""
        if self._pool is None:
            job: Any = _Done(scan_chrome_lines(data, mapping, end))
        else:
            body = data if end == len(data) else data[:end]
            job = self._pool.submit(scan_chrome_lines, body, dict(mapping))
        self._pending.append(("chunk", path, lines_done, job, mapping))
        self._drain(self._max_in_flight)

    def _drain(self, keep: int) -> None:
        """Writes finished chunks in submission order until at most ``keep`` are in flight."""
        pending = self._pending
        while len(pending) > keep:
            kind, path, lines_done, payload, mapping = pending.popleft()
            base = lines_done[0]
            if kind == "tail":
                self._tail(path, base + 1, payload, mapping)
                continue
            if kind == "long":
                lines_done[0] = base + 1
                self.stats._malformed(path, base + 1, _long_line_message(payload, self.limits))
                continue
            blob, count, lines, unresolved, bad = payload.result()
            lines_done[0] = base + lines
            self.out.write_blob(blob, count)
            for index, message in bad:
                self._bad_line(path, base + index + 1, False, message)
            if unresolved:
                self._resolve(path, unresolved, mapping)

    def _resolve(self, path: str, unresolved: list[tuple[int, bytes]],
                 mapping: dict[Any, Any]) -> None:
        # Lines whose pid the chunk did not know yet: claimed here, in file order.
        parts = []
        for _index, line in unresolved:
            event = orjson.loads(line)
            pid = event["pid"]
            new = mapping.get(pid)
            if new is None:
                new = mapping[pid] = self._claim(path, pid)
            parts.append(line if new == pid else _with_pid(line, pid, new))
        self.out.write(parts)

    def _tail(self, path: str, lineno: int, line: bytes, mapping: dict[Any, Any]) -> None:
        # The last line had no newline: a writer may have died half way through it.
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            self._bad_line(path, lineno, True, "")
            return
        if type(event) is not dict:
            self._bad_line(path, lineno, False, "not a JSON object")
            return
        if event.get("ph") == "M" and event.get("name") == BATCH_MARKER:
            return
        pid = event.get("pid")
        if type(pid) is int or type(pid) is str:
            new = mapping.get(pid)
            if new is None:
                new = mapping[pid] = self._claim(path, pid)
            if new != pid:
                event["pid"] = new
                line = orjson.dumps(event)
        self.out.write([line])

    def _encoder_for_otlp(self) -> ChromeTraceEncoder:
        # One encoder for every OTLP input: a process whose spans a collector
        # split over several files keeps one pid and one set of tracks.
        if self._encoder is None:
            self._encoder = ChromeTraceEncoder()
        return self._encoder

    def _otlp_request(self, request: Any, path: str, lineno: int) -> None:
        if not isinstance(request, dict):
            raise ValueError("not a JSON object")
        spans = []
        for index, span in enumerate(self._otlp.spans(request)):
            problem = _otlp_span_problem(span)
            if problem:
                self.stats._malformed(path, lineno, f"span {index}: {problem}")
            else:
                spans.append(span)
        self.stats.spans += len(spans)
        if spans:
            self._write_events(_OTLP_SOURCE, self._encoder_for_otlp().encode(spans))

    def _otlp_jsonl(self, path: str) -> None:
        with _open_input(path, self.limits) as f:
            first = _first_line(f, self.limits)
            if type(first) is bytes and not first.rstrip().endswith(b"}"):
                # One request pretty-printed over many lines.
                f.rewind()
                self._otlp_request(orjson.loads(f.read_document()), path, 0)
                return
        for lineno, line, unterminated in self._lines(path):
            if not line.strip():
                continue
            try:
                request = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                self._bad_line(path, lineno, unterminated, str(exc))
                continue
            if isinstance(request, dict) and not (
                    "resourceSpans" in request or "resource_spans" in request):
                continue  # metrics or logs written to the same file by a collector
            try:
                self._otlp_request(request, path, lineno)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                self.stats._malformed(path, lineno, f"not an OTLP/JSON trace request: {exc!r}")

    def _document(self, path: str) -> None:
        with _open_input(path, self.limits) as f:
            doc = orjson.loads(f.read_document())
        self._write_events(self._joined_source(path, doc), _document_events(doc))  # type: ignore[arg-type]

    def _joined_source(self, path: str, doc: Any) -> str:
        """A torch trace otel_rl wrote names its rank's trace file (``"otel_rl":
        {"traces_file": ...}``): its pids are claimed as that file's, so the
        kernels land in the rank's process instead of a remapped copy of it."""
        join = doc.get(TRACE_JOIN_KEY) if isinstance(doc, dict) else None
        name = join.get("traces_file") if isinstance(join, dict) else None
        if not isinstance(name, str):
            return path
        return self._sources.get(os.path.realpath(os.path.join(os.path.dirname(path), name)), path)

    def finish(self) -> None:
        self._drain(0)
        if self._encoder is not None:
            self._write_events(_OTLP_SOURCE, self._encoder.finish())

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


def convert(inputs: Sequence[str], output: str, *, workers: int = 0,
            limits: InputLimits | None = None) -> ConvertStats:
    """Merges trace files into one Chrome trace JSON document.

    Args:
        inputs: Files, directories (searched recursively for ``*.jsonl``,
            ``*.json`` and their ``.gz`` forms) and glob patterns.
        output: The ``.json`` or ``.json.gz`` file to write (replaced atomically
            once the conversion is complete), or ``"-"`` for standard output.
        workers: Processes that parse Chrome JSON lines which carry no batch
            checksum (files not written by otel_rl, such as AReaL's), for large
            inputs on machines with idle cores; 0 parses in this process.
            Files written by otel_rl are checked by checksum, which is faster
            than handing them to another process.
        limits: Bounds on what one input may cost to read (line length,
            decompressed size; :class:`InputLimits`): what goes past them is
            skipped and reported in the returned stats.

    Returns:
        What was converted and what was skipped, and why.

    Raises:
        OSError: The output cannot be written.
    """
    started = time.perf_counter()
    stats = ConvertStats(output=output)
    to_stdout = output == "-"
    # A regular file is written next to its final name and renamed into place, so
    # a failed run never leaves half a trace; anything else (stdout, a pipe, a
    # device) is written directly and must never be renamed over.
    atomic = not to_stdout and (not os.path.exists(output) or os.path.isfile(output))
    tmp = f"{output}.tmp-{os.getpid()}" if atomic else None
    files, missing = discover_inputs(inputs, exclude=[p for p in (output, tmp) if p and not to_stdout])
    stats.skipped_files.extend((item, "no such file") for item in missing)
    if to_stdout:
        raw: IO[bytes] = sys.stdout.buffer
    else:
        directory = os.path.dirname(output)
        if directory:
            os.makedirs(directory, exist_ok=True)
        raw = open(tmp or output, "wb", buffering=1 << 20)
    out = _Output(raw, output)
    converter = None
    try:
        named = frozenset(os.path.realpath(p) for p in inputs if os.path.isfile(p))
        converter = _Converter(out, stats, workers, named, limits)
        converter.run(files)
        stats.events = out.events
        stats.seconds = time.perf_counter() - started
        out.close({
            "generator": "otel_rl.convert",
            "inputs": files,
            "files": stats.files,
            "events": stats.events,
            "remapped_pids": stats.remapped_pids,
            "skipped_truncated": stats.skipped_truncated,
            "malformed_lines": stats.malformed_count,
            "inputs_read_in_part": len(stats.cut_short),
        })
        if not to_stdout:
            raw.close()
        if tmp is not None:
            os.replace(tmp, output)
    except BaseException:
        out.abort()
        if not to_stdout:
            raw.close()
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    finally:
        if converter is not None:
            converter.close()
    stats.seconds = time.perf_counter() - started
    return stats


def _summary(stats: ConvertStats) -> str:
    rate = stats.events / stats.seconds if stats.seconds > 0 else 0.0
    text = (f"otel_rl.convert: {stats.files} files, {stats.events:,} events -> {stats.output} "
            f"in {stats.seconds:.2f} s ({rate:,.0f} events/s)")
    extras = []
    if stats.spans:
        extras.append(f"{stats.spans:,} OTLP spans")
    if stats.remapped_pids:
        extras.append(f"{stats.remapped_pids} pids remapped")
    if stats.skipped_truncated:
        extras.append(f"{stats.skipped_truncated} incomplete last lines skipped")
    if stats.malformed_count:
        extras.append(f"{stats.malformed_count} malformed lines skipped")
    if stats.skipped_files:
        extras.append(f"{len(stats.skipped_files)} inputs skipped")
    if stats.cut_short:
        extras.append(f"{len(stats.cut_short)} inputs read only in part")
    return text + ("; " + ", ".join(extras) if extras else "")


def _mib_arg(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value * (1 << 20) > 1 << 62:
        raise argparse.ArgumentTypeError(f"not a positive size in MiB: {text!r}")
    return max(1, int(value * (1 << 20)))


def _ratio_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"not a ratio of 0 (no bound) or more: {text!r}")
    return value


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """Adds ``--max-line-mb`` and ``--max-gzip-ratio`` (:class:`InputLimits`) to a command line."""
    parser.add_argument("--max-line-mb", type=_mib_arg, default=DEFAULT_MAX_LINE_BYTES, metavar="MB",
                        dest="max_line_bytes",
                        help="skip (and report) JSON lines longer than this many MiB "
                             f"(default {DEFAULT_MAX_LINE_BYTES >> 20})")
    parser.add_argument("--max-gzip-ratio", type=_ratio_arg, default=DEFAULT_MAX_GZIP_RATIO, metavar="X",
                        help="stop reading a .gz input (and report it) once it has expanded past X times "
                             f"its compressed size and {DEFAULT_MIN_GZIP_BYTES >> 20} MiB: a decompression "
                             f"bomb; 0 for no bound (default {DEFAULT_MAX_GZIP_RATIO:g})")


def limits_from_args(args: argparse.Namespace) -> InputLimits:
    """The :class:`InputLimits` of options added by :func:`add_limit_options`."""
    return InputLimits(max_line_bytes=args.max_line_bytes, max_gzip_ratio=args.max_gzip_ratio)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m otel_rl.convert INPUT... -o OUTPUT [--strict]``.

    Args:
        argv: Arguments (``sys.argv[1:]`` when ``None``).

    Returns:
        0 on success; 1 when nothing could be converted, or, with ``--strict``,
        when any line or input was skipped or read only in part.
    """
    parser = argparse.ArgumentParser(
        prog="otel-rl convert",
        description="Merge otel_rl trace files (per-rank Chrome JSONL, OTLP/JSON from a "
                    "Collector, Chrome JSON such as torch profiler traces) into one JSON "
                    "file for Perfetto (ui.perfetto.dev) or chrome://tracing.")
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="files, directories (searched recursively) or glob patterns")
    parser.add_argument("-o", "--output", required=True,
                        help="the .json or .json.gz file to write ('-' for standard output)")
    parser.add_argument("--strict", action="store_true",
                        help="exit non-zero if any line or input had to be skipped")
    parser.add_argument("-j", "--jobs", type=int, default=0,
                        help="worker processes parsing lines that carry no otel_rl batch "
                             "checksum, for large foreign JSONL inputs (default: 0, parse "
                             "in this process)")
    add_limit_options(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)
    err = sys.stderr
    found, missing = discover_inputs(args.inputs, exclude=[] if args.output == "-" else [args.output])
    if not found:
        # A mistyped run directory must not replace a good trace with an empty one.
        named = ", ".join(missing or args.inputs)
        err.write(f"otel_rl.convert: {named}: no such file, or no trace file in it; {args.output} "
                  "not written\n")
        return 1
    try:
        stats = convert(args.inputs, args.output, workers=args.jobs, limits=limits_from_args(args))
    except OSError as exc:
        err.write(f"otel_rl.convert: cannot write {args.output}: {exc}\n")
        return 1
    if not args.quiet:
        for message in stats.warnings[:_MAX_REPORTED]:
            err.write(f"warning: {message}\n")
        for path, lineno, message in stats.malformed:
            err.write(f"warning: {path}:{lineno}: malformed line skipped: {message}\n")
        if stats.malformed_count > len(stats.malformed):
            err.write(f"warning: ... and {stats.malformed_count - len(stats.malformed)} "
                      "more malformed lines\n")
        for path, reason in stats.skipped_files:
            err.write(f"warning: {path}: skipped ({reason})\n")
        for path, reason in stats.cut_short:
            err.write(f"warning: {path}: read only in part: {reason}\n")
    err.write(_summary(stats) + "\n")
    if stats.files == 0 or stats.events == 0:
        return 1
    if args.strict and (stats.malformed_count or stats.skipped_truncated or stats.skipped_files
                        or stats.cut_short):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
