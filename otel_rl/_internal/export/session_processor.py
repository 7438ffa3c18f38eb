"""The session lifecycle processor: phase durations, status and records from spans.

It runs on the export thread, wraps the processors that export, and follows
each session's phase spans (``rl.span.kind == "phase"``). When the session span
itself ends (finalize, eviction or shutdown) it derives ``total_s``,
``<phase>_s`` and ``<phase>_count`` for every phase seen, status and reason,
writes them onto a rebuilt session span before handing it on (the SDK freezes
spans at ``end()``, so they cannot be mutated in ``on_end``), appends the
AReaL-compatible session record to ``sessions-r{rank}.jsonl`` and records the
duration metrics.
"""

from __future__ import annotations

import collections
from typing import Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace.status import StatusCode

from .. import diagnostics, guard, keys
from ..encode.readable import ExportSpan
from .jsonl import LINE_OPTION, JsonlAppender
from .session_metrics import AggregatedSessionMetrics
from ..payload import INT64_MAX, INT64_MIN, utf8_text
from ..recording.ids import span_text, trace_text
from ..recording.record import END, FLAGS, NAME, SPAN_ID, START, STATUS, TRACE_ID, layout

#: Phases every record carries, even at zero (AReaL's fields).
BUILTIN_PHASES = ("generate", "reward", "toolcall")
#: Session span attributes copied into the record when set, and their record fields.
_OPTIONAL_FIELDS = ((keys.SESSION_CONSUMED_STEP, "consumed_step"), (keys.SESSION_STALENESS, "staleness"),
                    (keys.SESSION_REWARD, "reward"))

_NS_PER_S = 1e9
_SPAN_KIND = keys.SPAN_KIND
_KIND_PHASE = keys.KIND_PHASE
_KIND_SESSION = keys.KIND_SESSION
_SESSION_ID = keys.SESSION_ID
_GAUGE_VALUE = keys.GAUGE_VALUE
_ERROR = StatusCode.ERROR.value

try:
    from . import _session_processor as _native
except ImportError:  # built without a C compiler
    _native = None
else:
    _native.configure({
        "SESSION_ID": keys.SESSION_ID, "PHASE": keys.PHASE, "PHASE_INTERRUPTED": keys.PHASE_INTERRUPTED,
        "POLICY_VERSION": keys.POLICY_VERSION, "SESSION_STATUS": keys.SESSION_STATUS,
        "SESSION_REASON": keys.SESSION_REASON, "TASK_ID": keys.TASK_ID, "STEP": keys.STEP,
        "SESSION_SUBMIT_STEP": keys.SESSION_SUBMIT_STEP, "SESSION_TOTAL_S": keys.SESSION_TOTAL_S,
        "SESSION_PREFIX": keys.SESSION_PREFIX, "SESSION_COUNTER_PREFIX": keys.SESSION_COUNTER_PREFIX,
        "STATUS_PENDING": keys.STATUS_PENDING, "KIND_PHASE": keys.KIND_PHASE, "BUILTIN_PHASES": BUILTIN_PHASES,
        "OPTIONAL_FIELDS": _OPTIONAL_FIELDS, "ERROR": _ERROR, "AggregatedSessionMetrics": AggregatedSessionMetrics,
        "STALE_REASON_MARK": keys.STALE_REASON_MARK, "JsonlAppender": JsonlAppender, "dumps": orjson.dumps,
        "LINE_OPTION": LINE_OPTION, **layout(),
    })

#: ``derive(processor, rec, attrs, kind)``: the compiled step for a phase or session span
#: without a gauge value (``None`` back: the Python step's), or ``None`` where not built.
compiled_derive = _native.derive if _native is not None else None
#: The compiled step for a session's expanded phases and its span at once (``_session_processor.c``).
compiled_derive_bundle = _native.derive_bundle if _native is not None else None


class SessionSpanProcessor(SpanProcessor):
    """Derives session attributes and records, then forwards to ``next_processor``."""

    def __init__(
        self,
        next_processor: SpanProcessor,
        *,
        rank: int,
        role: str,
        records: JsonlAppender | None,
        metrics: Any,
        max_pending_sessions: int,
    ) -> None:
        self._next = next_processor
        self._rank = rank
        self._role = role
        self._records = records
        self._metrics = metrics
        self._max_pending = max_pending_sessions
        #: Session spans seen, by status (the run summary's sessions).
        # A plain dict: a Counter's __delitem__ makes every item set a Python-level call
        # (about 700 instructions a session in the compiled step).
        self.statuses: dict[str, int] = {}
        # session id -> phase name -> [(start_ns, end_ns | None)]
        self._phases: collections.OrderedDict[Any, dict[str, list[tuple[int, int | None]]]] = (
            collections.OrderedDict()
        )
        # session id -> [(phase start ns, policy version)], for phases that ran under one
        self._versions: dict[Any, list[tuple[int, Any]]] = {}

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._next.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        attrs = span.attributes or {}
        kind = attrs.get(keys.SPAN_KIND)
        try:
            if kind == keys.KIND_PHASE or kind == keys.KIND_SESSION:
                ctx = span.context
                derived = self._derive(kind, attrs, span.name, span.start_time, span.end_time,
                                       span.status.status_code is StatusCode.ERROR, ctx.trace_id, ctx.span_id,
                                       ctx.trace_flags)
                if derived:
                    span = _with_attributes(span, derived)
            if self._metrics is not None:
                if kind == keys.KIND_WEIGHT_SYNC and span.end_time is not None:
                    self._metrics.weight_sync((span.end_time - span.start_time) / 1e9,
                                              _plain(attrs.get(keys.WEIGHT_SYNC_ROLE)))
                if span.links:
                    self._on_links(span.links)
                if span.events or keys.GAUGE_VALUE in attrs:
                    self._on_gauges(span, attrs)
        except Exception as exc:  # noqa: BLE001 - what was derived is lost, never the span
            if kind == keys.KIND_SESSION:
                guard.count(diagnostics.SESSION_RECORDS_LINES_LOST)
            guard.report(diagnostics.EXPORT_ERROR, "a session's durations could not be derived: %r", exc)
        self._next.on_end(span)

    def on_record(self, rec: tuple, attrs: dict[str, Any]) -> dict[str, Any]:
        """What :meth:`on_end` does for the span of a record without events or links
        (:mod:`..recording.record`; ``attrs``: its flat attributes), without building
        the span and without handing it on: returns ``attrs``, with the derived
        attributes of a session added (a new dict)."""
        kind = attrs.get(_SPAN_KIND)
        try:
            if kind == _KIND_PHASE or kind == _KIND_SESSION:
                if _native is not None and _GAUGE_VALUE not in attrs:
                    # The compiled step, where it takes the span (None: this one is Python's).
                    done = _native.derive(self, rec, attrs, kind)
                    if done is not None:
                        return done
                derived = self._derive(kind, attrs, rec[NAME], rec[START], rec[END], rec[STATUS] == _ERROR,
                                       rec[TRACE_ID], rec[SPAN_ID], rec[FLAGS])
                if derived:
                    attrs = {**attrs, **derived}
            elif self._metrics is not None and kind == keys.KIND_WEIGHT_SYNC:
                self._metrics.weight_sync((rec[END] - rec[START]) / 1e9, _plain(attrs.get(keys.WEIGHT_SYNC_ROLE)))
            if self._metrics is not None:
                value = attrs.get(_GAUGE_VALUE)
                if value is not None:
                    self._metrics.gauge(_plain(rec[NAME]), value)
        except Exception as exc:  # noqa: BLE001 - what was derived is lost, never the span
            self.derive_failed(kind, exc)
        return attrs

    @staticmethod
    def derive_failed(kind: Any, exc: BaseException) -> None:
        """Counts and reports a span whose derivation failed (the compiled record sink's too)."""
        if kind == _KIND_SESSION:
            guard.count(diagnostics.SESSION_RECORDS_LINES_LOST)
        guard.report(diagnostics.EXPORT_ERROR, "a session's durations could not be derived: %r", exc)

    def _derive(self, kind: str, attrs: Any, name: Any, start: int, end: int, error: bool, trace_id: int,
                span_id: int, flags: int) -> dict[str, Any] | None:
        if kind == _KIND_PHASE:
            self._on_phase(attrs, name, start, end, error, trace_id, span_id, flags)
            return None
        return self._on_session(attrs, start, end, trace_id, span_id, flags)

    def _on_links(self, links: Any) -> None:
        """Consumed sessions (``otel_rl.consume`` links the consuming span to each):
        their staleness and whether they saw a weight update."""
        for link in links:
            link_attrs = link.attributes
            if link_attrs and keys.SESSION_CONSUMED_STEP in link_attrs:
                self._metrics.staleness(link_attrs.get(keys.SESSION_STALENESS),
                                        bool(link_attrs.get(keys.SESSION_CROSSED_UPDATE)))

    def _on_gauges(self, span: ReadableSpan, attrs: Any) -> None:
        """Gauge values (``set_gauge``, sampled counters): on the span or its events."""
        value = attrs.get(keys.GAUGE_VALUE)
        if value is not None:
            self._metrics.gauge(_plain(span.name), value)
        for event in span.events:
            value = event.attributes.get(keys.GAUGE_VALUE) if event.attributes else None
            if value is not None:
                self._metrics.gauge(_plain(event.name), value)

    def _on_phase(self, attrs: Any, name: Any, start: int, end: int, error: bool, trace_id: int, span_id: int,
                  flags: int) -> None:
        session_id = attrs.get(_SESSION_ID)
        phase = _plain(attrs.get(keys.PHASE, name))
        interrupted = bool(attrs.get(keys.PHASE_INTERRUPTED))
        phases = self._phases.get(session_id)
        if phases is None:
            if len(self._phases) >= self._max_pending:
                self._phases.popitem(last=False)
                guard.count(diagnostics.SESSION_PHASES_EVICTED)
            phases = self._phases[session_id] = {}
        instances = phases.get(phase)
        if instances is None:
            instances = phases[phase] = []
        instances.append((start, None if interrupted else end))
        version = attrs.get(keys.POLICY_VERSION)
        if version is not None:
            versions = self._versions.get(session_id)
            if versions is None:
                if len(self._versions) >= self._max_pending:
                    del self._versions[next(iter(self._versions))]
                versions = self._versions[session_id] = []
            versions.append((start, version))
        if self._metrics is not None:
            status = "interrupted" if interrupted else ("error" if error else "ok")
            self._metrics.phase((end - start) / _NS_PER_S, phase, status, trace_id, span_id, flags)

    def _on_session(self, attrs: Any, start: int, end: int, trace_id: int, span_id: int,
                    flags: int) -> dict[str, Any]:
        session_id = attrs.get(_SESSION_ID)
        phases = self._phases.pop(session_id, {})
        status = attrs.get(keys.SESSION_STATUS, keys.STATUS_PENDING)
        reason = attrs.get(keys.SESSION_REASON)
        pending = status == keys.STATUS_PENDING
        key = str(status)
        self.statuses[key] = self.statuses.get(key, 0) + 1
        submit_ts = start / _NS_PER_S
        finalized_ts = None if pending else end / _NS_PER_S
        total_s = None if pending else (end - start) / _NS_PER_S
        derived: dict[str, Any] = {}
        if total_s is not None:
            derived[keys.SESSION_TOTAL_S] = total_s
        record: dict[str, Any] = {
            "task_id": _plain(attrs.get(keys.TASK_ID)),
            "session_id": _plain(session_id),
            "rank": self._rank,
            "role": self._role,
            "step": _plain(attrs.get(keys.STEP)),
            "status": _plain(status),
            "reason": _plain(reason),
            "submit_ts": submit_ts,
            "finalized_ts": finalized_ts,
            "total_s": total_s,
        }
        submitted = attrs.get(keys.SESSION_SUBMIT_STEP)
        if submitted is not None:
            record["submit_step"] = _plain(submitted)
        names = list(BUILTIN_PHASES) + [p for p in phases if p not in BUILTIN_PHASES]
        phase_counts = {}
        for name in names:
            instances = phases.get(name, ())
            seconds = sum(end - start for start, end in instances if end is not None) / _NS_PER_S
            record[f"{name}_s"] = seconds
            phase_counts[name] = len(instances)
            if instances:
                derived[f"{keys.SESSION_PREFIX}{name}_s"] = seconds
                derived[f"{keys.SESSION_PREFIX}{name}_count"] = len(instances)
        record["phase_counts"] = phase_counts
        record["phases"] = {
            name: [
                {"start_ts": start / _NS_PER_S, "end_ts": None if end is None else end / _NS_PER_S}
                for start, end in instances
            ]
            for name, instances in phases.items()
        }
        plen = len(keys.SESSION_COUNTER_PREFIX)
        record["counters"] = {
            utf8_text(k[plen:]): _plain(v)
            for k, v in attrs.items() if k.startswith(keys.SESSION_COUNTER_PREFIX)
        }
        versions = self._versions.pop(session_id, None)
        if versions is not None or keys.POLICY_VERSION in attrs:
            record["policy_versions"] = _distinct(attrs.get(keys.POLICY_VERSION), versions)
        for key, field in _OPTIONAL_FIELDS:
            value = attrs.get(key)
            if value is not None:
                record[field] = _plain(value)
        record["trace_id"] = trace_text(trace_id)  # as the trace file and Jaeger print it
        record["span_id"] = span_text(span_id)
        self._write_record(record)
        if not pending:
            self._session_metrics(total_s, record["status"], reason, trace_id, span_id, flags)
        return derived

    def _write_record(self, record: dict[str, Any]) -> None:
        """Appends a session's record to the records file (the compiled step calls it too)."""
        if self._records is not None:
            try:
                self._records.add(record)
            except Exception as exc:  # noqa: BLE001 - the span goes on without its record
                self._record_failed(exc)

    @staticmethod
    def _record_failed(exc: BaseException) -> None:
        """Counts and reports a session record that could not be written (the compiled step's too)."""
        guard.count(diagnostics.SESSION_RECORDS_LINES_LOST)
        guard.report(diagnostics.SESSION_RECORDS_WRITE_ERROR, "a session record could not be written: %r", exc)

    def _session_metrics(self, total_s: float, status: Any, reason: Any, trace_id: int, span_id: int,
                         flags: int) -> None:
        """A finalized session's duration and status metrics (the compiled step calls it too)."""
        if self._metrics is None:
            return
        try:
            self._metrics.session(total_s, status, trace_id, span_id, flags)
            if type(reason) is str and keys.STALE_REASON_MARK in reason.lower():
                self._metrics.stale(status)
        except Exception as exc:  # noqa: BLE001
            self.metrics_failed(exc)

    @staticmethod
    def metrics_failed(exc: BaseException) -> None:
        """Reports a session's metrics that could not be recorded (the compiled step's too)."""
        guard.report(diagnostics.METRICS_ERROR, "session metrics could not be recorded: %r", exc)

    def flush(self) -> None:
        if self._records is not None:
            self._records.flush()

    def shutdown(self) -> None:
        if self._records is not None:
            self._records.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flush()
        return True


def _distinct(first: Any, versions: list[tuple[int, Any]] | None) -> list[Any]:
    """The policy versions a session saw, oldest first, each once: the one it was
    registered under, then its phases' by start time."""
    seen = [] if first is None else [_plain(first)]
    for _, version in sorted(versions or (), key=_first):
        version = _plain(version)
        if version not in seen:
            seen.append(version)
    return seen


def _first(item: tuple) -> Any:
    return item[0]


def _plain(value: Any) -> Any:
    """A record field as JSON writes it: text as valid UTF-8 (a lone surrogate
    escaped), integers within int64 (larger ones as their text)."""
    kind = type(value)
    if kind is str:
        return utf8_text(value)
    if kind is int and not INT64_MIN <= value <= INT64_MAX:
        return str(value)
    return value


def _with_attributes(span: ReadableSpan, extra: dict[str, Any]) -> ReadableSpan:
    """A copy of ``span`` with ``extra`` attributes (ReadableSpans are immutable)."""
    if not extra:
        return span
    if isinstance(span, ExportSpan):
        return span.with_attributes(extra)
    attributes = dict(span.attributes or {})
    attributes.update(extra)
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
