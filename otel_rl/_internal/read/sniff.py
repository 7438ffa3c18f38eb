"""Telling what an input file holds from its first JSON line (or its whole document)."""

from __future__ import annotations

from typing import Any

import orjson

from .. import keys
from .limits import DEFAULT_LIMITS, InputLimitError, InputLimits
from .lines import HEAD_READ, line_blocks, lines_of
from .source import open_input

__all__ = ["RECORD_KINDS", "classify_document", "record_kind", "sniff_file", "why_ignored"]

#: What :func:`record_kind` tells apart among JSON lines that hold no trace.
RECORD_KINDS = ("sessions", "request-events", "stats", "annotations")
_REQUEST_ID, _EVENT_NAME = keys.EVENT_FIELDS[0], keys.EVENT_FIELDS[2]


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
    limits = limits or DEFAULT_LIMITS
    with open_input(path, limits) as f:
        lines = lines_of(line_blocks(f, limits.max_line_bytes, HEAD_READ))
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
                return classify_document(doc), None
        if head is None:
            # JSON lines whose first line is damaged: the first object among the next ones.
            f.rewind()
            for n, line in enumerate(lines_of(line_blocks(f, limits.max_line_bytes, HEAD_READ))):
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


def classify_document(doc: Any) -> str:
    """The kind (as :func:`sniff_file` says it) of a JSON document parsed whole."""
    if isinstance(doc, list) or (isinstance(doc, dict) and "traceEvents" in doc):
        return "document"
    if isinstance(doc, dict) and ("resourceSpans" in doc or "resource_spans" in doc):
        return "otlp-jsonl"  # one request spread over lines: read as a document
    return "not a trace file"


def record_kind(head: Any) -> str | None:
    """What JSON lines that hold no trace hold, from their first object (one of :data:`RECORD_KINDS`).

    ``"sessions"``: session records (otel_rl's and AReaL's ``sessions-r*.jsonl``);
    ``"request-events"``: request events (sglang-omni's ``events_*.jsonl``);
    ``"stats"``: ``otel_rl.stats`` exports; ``"annotations"``: consumed sessions and
    annotations (``annotations-r*.jsonl``); ``None``: none of these.
    """
    if not isinstance(head, dict):
        return None
    if head.get("kind") in ("consume", "annotation") and "session_id" in head:
        return "annotations"
    if "session_id" in head and ("submit_ts" in head or "task_id" in head):
        return "sessions"
    if _REQUEST_ID in head and _EVENT_NAME in head:
        return "request-events"
    if isinstance(head.get("values"), dict) and "step" in head:
        return "stats"
    return None


def why_ignored(kind: str, head: Any) -> str:
    """Why a file a report cannot use was left out, for its diagnostics."""
    if isinstance(head, dict):
        if "resource_metrics" in head or "resourceMetrics" in head:
            return "OpenTelemetry metrics"
        if "resourceLogs" in head or "resource_logs" in head:
            return "OpenTelemetry logs"
        return "JSON lines that are neither trace events, session records nor request events"
    return kind
