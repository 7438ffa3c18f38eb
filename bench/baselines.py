"""The two baselines otel_rl is measured against.

1. **Stock OpenTelemetry SDK**: a private ``TracerProvider`` with a
   ``BatchSpanProcessor`` and either a counting no-op exporter or a real
   ``OTLPSpanExporter``; spans via ``tracer.start_as_current_span(name)``.
2. **A plain JSONL tracer of the AReaL kind** (:class:`JsonlTracer`,
   :class:`JsonlSessionTracker`): ``perf_counter`` timestamps, one Chrome-trace
   event dict per scope appended to a locked list, JSON lines (stdlib ``json``)
   written at ``save()``; sessions kept as per-session record dicts, built and
   appended as JSON lines at finalization.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, Callable

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

# --------------------------------------------------------------------------- SDK side


class CountingExporter(SpanExporter):
    """A no-op exporter that only counts what it is handed."""

    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class CountingProcessor(SpanProcessor):
    """Counts finished spans by name and the threads they ran on (``thread.id``
    attribute when present). Used to check otel_rl delivered every span."""

    def __init__(self) -> None:
        self.by_name: collections.Counter[str] = collections.Counter()
        self.threads: set[Any] = set()
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        attrs = span.attributes or {}
        with self._lock:
            self.by_name[span.name] += 1
            tid = attrs.get("thread.id")
            if tid is not None:
                self.threads.add(tid)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.by_name.values())


class SdkTracer:
    """A stock SDK provider + ``BatchSpanProcessor`` around ``exporter``."""

    def __init__(self, exporter: SpanExporter, **bsp_kwargs: Any) -> None:
        self.exporter = exporter
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.processor = BatchSpanProcessor(exporter, **bsp_kwargs)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("bench")

    def flush(self, timeout_ms: int = 120_000) -> bool:
        return self.provider.force_flush(timeout_ms)

    def close(self) -> None:
        self.provider.shutdown()


# --------------------------------------------------------------------------- JSONL scopes


class _NullScope:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NULL = _NullScope()


class JsonlScope:
    """One timed block: a Chrome-trace ``"X"`` event appended at exit."""

    __slots__ = ("tracer", "name", "category", "args", "start")

    def __init__(self, tracer: JsonlTracer, name: str, category: str | None, args: dict | None) -> None:
        self.tracer = tracer
        self.name = name
        self.category = category
        self.args = args

    def __enter__(self) -> JsonlScope:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        end = time.perf_counter()
        tracer = self.tracer
        event = {
            "name": self.name,
            "ph": "X",
            "ts": self.start * 1e6,
            "dur": (end - self.start) * 1e6,
            "pid": tracer.pid,
            "tid": threading.get_ident(),
            "args": self.args or {},
        }
        if self.category is not None:
            event["cat"] = self.category
        with tracer.lock:
            tracer.events.append(event)


class JsonlTracer:
    """The AReaL-style scope tracer: events in memory, JSON lines at ``save()``."""

    def __init__(self, path: str | None, enabled: bool = True) -> None:
        self.path = path
        self.enabled = enabled
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.written = 0

    def trace_scope(self, name: str, category: str | None = None, args: dict | None = None) -> Any:
        if not self.enabled:
            return _NULL
        return JsonlScope(self, name, category, args)

    def trace_perf(self, name: str, category: str | None = None) -> Callable:
        def decorate(fn: Callable) -> Callable:
            @functools.wraps(fn)
            def wrapper(*a: Any, **kw: Any) -> Any:
                if not self.enabled:
                    return fn(*a, **kw)
                with JsonlScope(self, name, category, None):
                    return fn(*a, **kw)

            return wrapper

        return decorate

    def save(self) -> int:
        """Writes and forgets every recorded event; returns how many."""
        with self.lock:
            events, self.events = self.events, []
        if not events or self.path is None:
            return len(events)
        lines = [json.dumps(event) + "\n" for event in events]
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.writelines(lines)
        self.written += len(lines)
        return len(lines)


# --------------------------------------------------------------------------- JSONL sessions

BUILTIN_PHASES = ("generate", "reward", "toolcall")


class JsonlSessionTracker:
    """The AReaL-style session tracker.

    ``register_task`` / ``register_session`` create entries; ``record_event``
    with ``mark_<phase>_start`` / ``mark_<phase>_end`` appends phase instances
    to the session's record dict; ``mark_finalized`` builds the final record
    (``total_s``, ``<phase>_s``, counts) and appends it as a JSON line, written
    to the file every ``flush_threshold`` records.
    """

    def __init__(self, path: str | None, enabled: bool = True, flush_threshold: int = 100,
                 rank: int = 0) -> None:
        self.path = path
        self.enabled = enabled
        self.flush_threshold = flush_threshold
        self.rank = rank
        self._lock = threading.Lock()
        self._task_ids = itertools.count()
        self._session_ids = itertools.count()
        self._tasks: dict[Any, set[Any]] = {}
        self._sessions: dict[Any, dict[str, Any]] = {}
        self._lines: list[str] = []
        self.written = 0

    def register_task(self, task_id: Any = None) -> Any:
        if not self.enabled:
            return task_id
        if task_id is None:
            task_id = next(self._task_ids)
        with self._lock:
            self._tasks[task_id] = set()
        return task_id

    def register_session(self, task_id: Any) -> Any:
        if not self.enabled:
            return None
        session_id = next(self._session_ids)
        record = {
            "task_id": task_id,
            "session_id": session_id,
            "rank": self.rank,
            "status": "pending",
            "reason": None,
            "submit_ts": time.time(),
            "finalized_ts": None,
            "phases": {},
            "counters": {},
        }
        with self._lock:
            self._sessions[session_id] = record
            self._tasks.setdefault(task_id, set()).add(session_id)
        return session_id

    def record_event(self, session_id: Any, method: str, **payload: Any) -> None:
        if not self.enabled:
            return
        now = time.time()
        with self._lock:
            record = self._sessions.get(session_id)
            if record is None:
                return
            if method == "mark_finalized":
                self._finalize_locked(session_id, payload.get("status", "accepted"),
                                      payload.get("reason"), now)
                return
            if method.endswith("_start"):
                phase = method[len("mark_"):-len("_start")]
                record["phases"].setdefault(phase, []).append(
                    {"start_ts": now, "end_ts": None, **payload})
            elif method.endswith("_end"):
                phase = method[len("mark_"):-len("_end")]
                for instance in reversed(record["phases"].get(phase, ())):
                    if instance["end_ts"] is None:
                        instance["end_ts"] = now
                        instance.update(payload)
                        break
        self._maybe_flush()

    def finalize_task(self, task_id: Any, status: str = "accepted", reason: Any = None) -> None:
        if not self.enabled:
            return
        now = time.time()
        with self._lock:
            for session_id in list(self._tasks.pop(task_id, ())):
                if session_id in self._sessions:
                    self._finalize_locked(session_id, status, reason, now)
        self._maybe_flush()

    def _finalize_locked(self, session_id: Any, status: str, reason: Any, now: float) -> None:
        record = self._sessions.pop(session_id)
        task = self._tasks.get(record["task_id"])
        if task is not None:
            task.discard(session_id)
        record["status"] = status
        record["reason"] = reason
        record["finalized_ts"] = now
        record["total_s"] = now - record["submit_ts"]
        phases = record["phases"]
        counts = {}
        for name in list(BUILTIN_PHASES) + [p for p in phases if p not in BUILTIN_PHASES]:
            instances = phases.get(name, ())
            record[f"{name}_s"] = sum(i["end_ts"] - i["start_ts"] for i in instances
                                      if i["end_ts"] is not None)
            counts[name] = len(instances)
        record["phase_counts"] = counts
        self._lines.append(json.dumps(record) + "\n")

    def _maybe_flush(self) -> None:
        if len(self._lines) >= self.flush_threshold:
            self.flush()

    def flush(self) -> int:
        with self._lock:
            lines, self._lines = self._lines, []
        if lines and self.path is not None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.writelines(lines)
        self.written += len(lines)
        return len(lines)

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)
