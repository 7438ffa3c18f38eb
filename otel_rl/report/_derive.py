"""What a run's files say only together: sessions matched with their spans, sessions known only
from spans, response lengths from phase spans, request events recorded as span events."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .._internal import keys
from .._internal.encode.chrome_markers import slice_trace_id
from .._internal.read.sessions import response_length
from ._model import RunData, SessionRow, SpanRow

#: Chrome args an instant carries that are not request metadata.
_NOT_METADATA = frozenset({"rank", "role", *keys.TRACE_ARG_NAMES})


def _num(value: Any) -> bool:
    return type(value) is float or type(value) is int


def derive(data: RunData, names: dict[str, str]) -> None:
    """Steps and response lengths for session records; sessions known only from spans.

    Args:
        data: The run as read.
        names: Shared strings (phase names, statuses).
    """
    session_spans: dict[str, SpanRow] = {}
    by_key: dict[tuple[str, Any, Any], SpanRow] = {}
    phase_spans: dict[str, list[SpanRow]] = defaultdict(list)
    tokens: dict[str, float] = defaultdict(float)
    kind_key, phase_kind = keys.SPAN_KIND, keys.KIND_PHASE
    out_tokens = keys.GEN_AI_USAGE_OUTPUT_TOKENS
    for span in data.spans:
        args = span.args
        kind = args.get(kind_key)
        if kind == keys.KIND_SESSION:
            if span.span_id:
                session_spans[span.span_id] = span
            by_key[(span.worker, args.get(keys.TASK_ID), args.get(keys.SESSION_ID))] = span
        elif kind == phase_kind and span.parent_id:
            phase_spans[span.parent_id].append(span)
            n = args.get(out_tokens)
            if _num(n):
                tokens[span.parent_id] += n
    matched: set[int] = set()
    if session_spans or by_key or tokens:
        # Records read back their ids only when there are spans to match them with.
        for row in data.sessions:
            task_id, session_id, span_id, trace_id = row.identity()
            span = session_spans.get(span_id) if span_id else None
            if span is None:
                span = by_key.get((row.worker, task_id, session_id))
            if span is not None:
                matched.add(id(span))
                if row.step is None:
                    step = span.args.get(keys.STEP)
                    row.step = step if type(step) is int else None
                if span_id is None:
                    row.span_id = span_id = span.span_id
                if trace_id is None:
                    row.trace_id = slice_trace_id(span.args)
            if row.tokens is None and span_id:
                from_spans = tokens.get(span_id)
                if from_spans:
                    row.tokens = from_spans
    # Sessions seen only as spans (an OTLP export, or records not written yet).
    for span in list(session_spans.values()) + [s for s in by_key.values() if not s.span_id]:
        if id(span) in matched:
            continue
        matched.add(id(span))
        args = span.args
        flat: list[Any] = []
        for ph in sorted(phase_spans.get(span.span_id or "", ()), key=lambda s: s.start):
            end = None if ph.args.get(keys.PHASE_INTERRUPTED) else ph.end
            name = str(ph.args.get(keys.PHASE, ph.name))
            flat += (names.setdefault(name, name), ph.start, end)
        counters = {k[len(keys.SESSION_COUNTER_PREFIX):]: v for k, v in args.items()
                    if k.startswith(keys.SESSION_COUNTER_PREFIX)} or None
        total = args.get(keys.SESSION_TOTAL_S)
        status = str(args.get(keys.SESSION_STATUS) or keys.STATUS_PENDING)
        step = args.get(keys.STEP)
        row = SessionRow(span.worker, args.get(keys.TASK_ID), args.get(keys.SESSION_ID),
                         names.setdefault(status, status), args.get(keys.SESSION_REASON), span.start, span.end,
                         total if _num(total) else span.dur,
                         step if type(step) is int else None, tuple(flat), counters, span.span_id,
                         slice_trace_id(args))
        row.tokens = response_length(counters, tokens.get(span.span_id) if span.span_id else None)
        data.sessions.append(row)
    if data.steps is not None:
        data.sessions = [s for s in data.sessions if s.step in data.steps]
    if not data.requests:
        _requests_from_span_events(data, names)


def _requests_from_span_events(data: RunData, names: dict[str, str]) -> None:
    """Request events recorded as span events (``rl.request.id``, ``rl.stage``), when no
    request-event file was read: what a collector's OTLP/JSON or a trace file alone holds."""
    prefix = keys.ARGS_PREFIX
    for worker, name, ts, args in data.instants:
        rid = args.get(keys.REQUEST_ID)
        if rid is None:
            continue
        stage = args.get(keys.STAGE)
        stage = stage if isinstance(stage, str) else "unknown"
        # OTLP attributes carry the metadata as ``rl.args.<key>``; Chrome args under
        # the key itself, beside otel_rl's own ``rl.*`` keys and the rank's labels.
        metadata = {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in args.items()
                    if k.startswith(prefix) or not (k.startswith("rl.") or k in _NOT_METADATA)}
        data.requests.setdefault(rid, []).append(
            (round(ts * 1e9), names.setdefault(stage, stage), names.setdefault(name, name),
             data.workers.get(worker, {}).get("pid"), metadata))
