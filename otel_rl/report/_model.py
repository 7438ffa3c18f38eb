"""What the report views read: sessions, spans and request events of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Diagnostics keep the first this many malformed lines and warnings (all are counted).
MAX_REPORTED = 200


class SessionRow:
    """One session: from a session record (otel_rl's or AReaL's) or a ``session`` span.

    Times are wall-clock seconds; ``phases`` is a flat tuple
    ``(name, start, end, name, start, end, ...)`` in record order, with
    ``end`` ``None`` for a phase still open when the session ended.
    """

    __slots__ = ("worker", "task_id", "session_id", "status", "reason", "submit", "finalized",
                 "total", "step", "phases", "counters", "span_id", "trace_id", "tokens")

    def __init__(self, worker: str, task_id: Any, session_id: Any, status: str, reason: Any,
                 submit: float | None, finalized: float | None, total: float | None,
                 step: Any, phases: tuple, counters: dict[str, Any] | None,
                 span_id: str | None, trace_id: str | None = None) -> None:
        self.worker = worker
        self.task_id = task_id
        self.session_id = session_id
        self.status = status
        self.reason = reason
        self.submit = submit
        self.finalized = finalized
        self.total = total
        self.step = step
        self.phases = phases
        self.counters = counters
        self.span_id = span_id
        self.trace_id = trace_id
        self.tokens: float | None = None

    def phase_instances(self) -> list[tuple[str, float | None, float | None]]:
        """``[(phase, start, end), ...]`` in record order."""
        p = self.phases
        return [(p[i], p[i + 1], p[i + 2]) for i in range(0, len(p), 3)]


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
    diagnostics: Diagnostics = field(default_factory=Diagnostics)

    @property
    def worker_pids(self) -> dict[str, Any]:
        """Worker label -> its process id (when known)."""
        return {w: info.get("pid") for w, info in self.workers.items()}

    def is_empty(self) -> bool:
        """Nothing at all was read."""
        return not (self.sessions or self.spans or self.requests or self.instants)
