"""What the report views read: sessions, spans and request events of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._internal.read.packed import pack, pack_details, unpack

#: Diagnostics keep the first this many malformed lines and warnings (all are counted).
MAX_REPORTED = 200


def _packed_field(index: int, doc: str) -> property:
    def get(row: SessionRow) -> Any:
        return unpack(row._details)[index]

    def set_(row: SessionRow, value: Any) -> None:
        values = list(unpack(row._details))
        values[index] = value
        row._details = pack_details(*values)

    return property(get, set_, doc=doc)


class SessionRow:
    """One session: from a session record (otel_rl's or AReaL's) or a ``session`` span.

    Times are wall-clock seconds; ``phases`` is a flat tuple
    ``(name, start, end, name, start, end, ...)`` in record order, with
    ``end`` ``None`` for a phase still open when the session ended.

    What every view reads for every session (worker, status, times, step,
    tokens) are plain attributes; ``phases`` and what only a few sessions are
    shown with (``task_id``, ``session_id``, ``reason``, ``counters``,
    ``span_id``, ``trace_id``) are kept packed into bytes and read back on
    access, each time a new copy: a million sessions then take half the memory.
    """

    __slots__ = ("worker", "status", "submit", "finalized", "total", "step", "_phases", "tokens", "_details")

    def __init__(self, worker: str, task_id: Any, session_id: Any, status: str, reason: Any,
                 submit: float | None, finalized: float | None, total: float | None,
                 step: Any, phases: tuple, counters: dict[str, Any] | None,
                 span_id: str | None, trace_id: str | None = None) -> None:
        self.worker = worker
        self.status = status
        self.submit = submit
        self.finalized = finalized
        self.total = total
        self.step = step
        self._phases = pack(tuple(phases))
        self.tokens: float | None = None
        self._details = pack_details(task_id, session_id, reason, counters, span_id, trace_id)

    @property
    def phases(self) -> tuple:
        """``(name, start, end, name, start, end, ...)``, a new copy at each access."""
        return unpack(self._phases)

    @phases.setter
    def phases(self, value: tuple) -> None:
        self._phases = pack(tuple(value))

    task_id = _packed_field(0, "The task (prompt) the session belongs to.")
    session_id = _packed_field(1, "The session's id.")
    reason = _packed_field(2, "Why it ended as it did (text), or ``None``.")
    counters = _packed_field(3, "Its counters (``{name: value}``), or ``None``.")
    span_id = _packed_field(4, "Its ``session`` span's id, or ``None``.")
    trace_id = _packed_field(5, "Its trace's id, or ``None``.")

    def details(self) -> tuple[Any, Any, Any, Any, Any, Any]:
        """``(task_id, session_id, reason, counters, span_id, trace_id)``, read back at once."""
        return unpack(self._details)

    def identity(self) -> tuple[Any, Any, Any, Any]:
        """``(task_id, session_id, span_id, trace_id)``, read back at once."""
        task_id, session_id, _reason, _counters, span_id, trace_id = unpack(self._details)
        return task_id, session_id, span_id, trace_id

    def phase_instances(self) -> list[tuple[str, float | None, float | None]]:
        """``[(phase, start, end), ...]`` in record order."""
        p = unpack(self._phases)
        return [(p[i], p[i + 1], p[i + 2]) for i in range(0, len(p), 3)]


def record_row(worker: str, status: str, submit: float | None, finalized: float | None, total: float | None,
               step: Any, phases: tuple, tokens: float | None, details: bytes | tuple) -> SessionRow:
    """A :class:`SessionRow` from a session record as the reader gives it (``phases`` and ``details`` packed).

    Slot by slot, not through ``__init__``: it runs once per record, a million times a run.
    """
    row = _new_row(SessionRow)
    row.worker = worker
    row.status = status
    row.submit = submit
    row.finalized = finalized
    row.total = total
    row.step = step
    row._phases = phases
    row.tokens = tokens
    row._details = details
    return row


_new_row = object.__new__


class SpanRow:
    """One span (a Chrome complete event, a B/E pair or an OTLP span); times in seconds.

    ``dur`` is the duration as recorded (``end - start`` of two epoch times
    loses digits a duration keeps).
    """

    __slots__ = ("name", "start", "end", "dur", "span_id", "parent_id", "worker", "tid", "args", "events")

    def __init__(self, name: str, start: float, dur: float, span_id: str | None,
                 parent_id: str | None, worker: str, tid: Any, args: dict[str, Any],
                 events: list | None = None) -> None:
        self.name = name
        self.start = start
        self.end = start + dur
        self.dur = dur
        self.span_id = span_id
        self.parent_id = parent_id
        self.worker = worker
        self.tid = tid
        self.args = args
        self.events = events


@dataclass
class Diagnostics:
    """Everything the loader could not use, and why (nothing is dropped silently).

    Attributes:
        files: ``(path, kind, items read)`` for every input file read.
        missing: Inputs that matched no file.
        ignored: ``(path, why)`` for files that hold nothing a report uses
            (metrics, statistics, unknown JSON).
        unreadable: ``(path, why)`` for files that could not be read at all.
        malformed: ``(path, line, message)`` for the first malformed lines.
        malformed_count: All malformed lines.
        truncated: ``path:line`` of incomplete last lines skipped.
        warnings: Other problems worth knowing (first ones; all are counted).
        warning_count: All warnings.
        open_spans: Chrome ``B`` events never closed by an ``E``.
        clock_offsets: Per worker, the clock offset estimated from
            cross-process parent / child spans, and whether it was applied.
    """

    files: list[tuple[str, str, int]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    malformed: list[tuple[str, int, str]] = field(default_factory=list)
    malformed_count: int = 0
    truncated: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    warning_count: int = 0
    open_spans: int = 0
    clock_offsets: list[dict[str, Any]] = field(default_factory=list)

    def bad_line(self, path: str, line: int, message: str) -> None:
        self.malformed_count += 1
        if len(self.malformed) < MAX_REPORTED:
            self.malformed.append((path, line, message))

    def warn(self, message: str) -> None:
        self.warning_count += 1
        if len(self.warnings) < MAX_REPORTED:
            self.warnings.append(message)

    def messages(self) -> list[str]:
        """Every problem as one line of text naming its file (and line), for a terminal."""
        out = [f"{path}: no such file or directory" for path in self.missing]
        out += [f"{path}: unreadable: {why}" for path, why in self.unreadable]
        out += [f"{where}: incomplete last line skipped (a writer stopped mid-line)"
                for where in self.truncated]
        out += [f"{path}:{line}: malformed line skipped: {msg}" for path, line, msg in self.malformed]
        if self.malformed_count > len(self.malformed):
            out.append(f"... and {self.malformed_count - len(self.malformed)} more malformed lines")
        out += self.warnings
        if self.warning_count > len(self.warnings):
            out.append(f"... and {self.warning_count - len(self.warnings)} more warnings")
        if self.open_spans:
            out.append(f"{self.open_spans} Chrome 'B' events were never closed (reported as open spans)")
        for c in self.clock_offsets:
            if c["applied"]:
                out.append(f"clock of {c['worker']} is {-c['offset_s'] * 1e3:.3f} ms behind "
                           f"{c['relative_to']} ({c['violations']} of {c['pairs']} cross-process "
                           "children start before their parents); its times were shifted")
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Diagnostics:
        """The inverse of :meth:`to_dict` (a report's ``diagnostics``)."""
        return cls(
            files=[(f["path"], f["kind"], f["items"]) for f in doc.get("files", ())],
            missing=list(doc.get("missing", ())),
            ignored=[(i["path"], i["why"]) for i in doc.get("ignored", ())],
            unreadable=[(u["path"], u["why"]) for u in doc.get("unreadable", ())],
            malformed=[(m["path"], m["line"], m["message"]) for m in doc.get("malformed", ())],
            malformed_count=doc.get("malformed_count", 0),
            truncated=list(doc.get("truncated", ())),
            warnings=list(doc.get("warnings", ())),
            warning_count=doc.get("warning_count", 0),
            open_spans=doc.get("open_spans", 0),
            clock_offsets=list(doc.get("clock_offsets", ())),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": [{"path": p, "kind": k, "items": n} for p, k, n in self.files],
            "missing": list(self.missing),
            "ignored": [{"path": p, "why": w} for p, w in self.ignored],
            "unreadable": [{"path": p, "why": w} for p, w in self.unreadable],
            "malformed": [{"path": p, "line": n, "message": m} for p, n, m in self.malformed],
            "malformed_count": self.malformed_count,
            "truncated": list(self.truncated),
            "warnings": list(self.warnings),
            "warning_count": self.warning_count,
            "open_spans": self.open_spans,
            "clock_offsets": list(self.clock_offsets),
        }


@dataclass
class RunData:
    """A loaded run: what :func:`otel_rl.report.load` returns and every view reads.

    Attributes:
        sessions: Sessions (records, and sessions only known from their spans).
        spans: Every span of every trace file read.
        instants: ``(worker, name, time_s, args)`` of instant events.
        requests: Request events by request id: ``[(timestamp_ns, stage,
            event_name, pid, metadata), ...]`` in time order.
        workers: Per worker label (``rollout-r0``, ``r1``...): ``rank``,
            ``role``, ``pid``, ``name`` when known.
        inputs: What was asked for.
        steps: The ``--step`` filter (``None``: all steps).
        ranks: The ``--rank`` filter (``None``: all ranks).
        stats: ``otel_rl.stats`` exports (``stats-r{rank}.jsonl`` lines:
            ``{"time", "step", "tracker", "rank", "values"}``).
        diagnostics: What could not be read, and why.
    """

    sessions: list[SessionRow] = field(default_factory=list)
    spans: list[SpanRow] = field(default_factory=list)
    instants: list[tuple[str, str, float, dict[str, Any]]] = field(default_factory=list)
    requests: dict[Any, list[tuple[int, str, str, Any, dict[str, Any]]]] = field(default_factory=dict)
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    steps: frozenset | None = None
    ranks: tuple | None = None
    stats: list[dict[str, Any]] = field(default_factory=list)
    #: Consumed sessions and annotations (``annotations-r{rank}.jsonl`` lines, as written).
    annotations: list[dict[str, Any]] = field(default_factory=list)
    #: Counter samples on the timeline (Chrome ``C`` events): ``(worker, name, time_s, value)``.
    counters: list[tuple[str, str, float, float]] = field(default_factory=list)
    diagnostics: Diagnostics = field(default_factory=Diagnostics)

    @property
    def worker_pids(self) -> dict[str, Any]:
        """Worker label -> its process id (when known)."""
        return {w: info.get("pid") for w, info in self.workers.items()}

    def is_empty(self) -> bool:
        """Nothing at all was read."""
        return not (self.sessions or self.spans or self.requests or self.instants)
