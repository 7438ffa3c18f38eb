"""Chrome trace events (otel_rl's per-rank JSONL, AReaL's traces, torch profiler JSON) as spans and instants.

:class:`ChromeEventReader` takes the events of one file in order: complete
events (``X``) and begin / end pairs (``B`` / ``E``) become spans, ``i`` /
``I`` / ``n`` / ``R`` events instants, ``C`` events counter samples, ``process_name`` metadata names a
process. Each process becomes a worker labelled after the file
(``traces-rollout-r0.jsonl`` -> ``rollout-r0``; ``... pid N`` for the other
processes of a file). What it reads goes to a :class:`ChromeEventSink`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, Protocol

from .checks import ID_TYPES, MAX_US, bad_id, is_number
from .names import file_label, is_conventional_name

__all__ = ["SKIP_PREFIXES", "ChromeEventReader", "ChromeEventSink"]

#: Lines worth skipping before parsing: batch markers and flow arrows of otel_rl traces.
SKIP_PREFIXES = (b'{"ph":"M","name":"otel_rl.batch"', b'{"ph":"f"', b'{"ph":"s"', b'{"ph":"t"')
_INSTANTS = frozenset({"i", "I", "n", "R"})


class ChromeEventSink(Protocol):
    """Where a :class:`ChromeEventReader` puts what it reads."""

    def process(self, label: str, pid: Any) -> str | None:
        """The worker for a process first seen (``None``: its events are left out)."""

    def span(self, name: str, start_s: float, dur_s: float, worker: str, tid: Any,
             args: dict[str, Any]) -> None:
        """A span: a complete event or a begin / end pair; times in seconds."""

    def instant(self, worker: str, name: str, ts_s: float, args: dict[str, Any]) -> None:
        """An instant event."""

    def process_name(self, worker: str, name: str) -> None:
        """A process's name (``process_name`` metadata)."""

    def counter(self, worker: str, name: str, ts_s: float, value: float) -> None:
        """One sample of a counter track (``name`` is ``event.series`` for a counter of several series)."""


class ChromeEventReader:
    """Turns the Chrome trace events of one file into spans and instants (see the module).

    Args:
        path: The file (its name labels its processes).
        sink: Where spans, instants and process names go.
        keep: Whether to keep a span, from its args (a step filter); all when ``None``.
    """

    def __init__(self, path: str, sink: ChromeEventSink,
                 keep: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.path = path
        self.label = file_label(path)
        self.conventional = is_conventional_name(path)
        self.workers: dict[Any, str | None] = {}
        self.first_pid: Any = None
        self.open: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
        self.count = 0
        self._sink = sink
        self._span = sink.span
        self._instant = sink.instant
        self._keep = keep

    def _worker(self, pid: Any) -> str | None:
        if pid in self.workers:
            return self.workers[pid]
        if self.first_pid is None:
            self.first_pid = pid
        if pid == self.first_pid and self.conventional:
            label = self.label
        else:
            label = f"{self.label} pid {pid}"
        worker = self.workers[pid] = self._sink.process(label, pid)
        return worker

    def feed(self, ev: dict[str, Any]) -> str | None:
        """Takes one event; returns what is wrong with it (the line is then skipped), or ``None``."""
        ph = ev.get("ph")
        pid, tid = ev.get("pid"), ev.get("tid")
        if type(pid) not in ID_TYPES or type(tid) not in ID_TYPES:
            return f"{'pid' if type(pid) not in ID_TYPES else 'tid'} is not a string or number"
        if ph == "X":
            worker = self._worker(pid)
            if worker is None:
                return None
            ts, dur = ev.get("ts"), ev.get("dur", 0)
            if not is_number(ts) or not is_number(dur):
                return "complete event without numeric ts / dur"
            if not (-MAX_US < ts < MAX_US and -MAX_US < ts + dur < MAX_US):
                return "ts / dur out of range"
            args = ev.get("args")
            if type(args) is not dict:
                args = {}
            problem = bad_id(args)
            if problem:
                return f"args.{problem}"
            if self._keep is not None and not self._keep(args):
                return None
            self._span(str(ev.get("name", "")), ts / 1e6, dur / 1e6, worker, tid, args)
            self.count += 1
        elif ph == "B":
            if self._worker(pid) is None:
                return None
            ts = ev.get("ts")
            if not is_number(ts) or not -MAX_US < ts < MAX_US:
                return "begin event without a numeric ts in range"
            self.open[(pid, tid)].append(ev)
        elif ph == "E":
            worker = self._worker(pid)
            if worker is None:
                return None
            stack = self.open.get((pid, tid))
            if not stack:
                return "end event without a matching begin event"
            begin = stack.pop()
            ts = ev.get("ts")
            if not is_number(ts) or not -MAX_US < ts < MAX_US:
                return "end event without a numeric ts in range"
            begin_args, end_args = begin.get("args"), ev.get("args")
            args = dict(begin_args) if type(begin_args) is dict else {}
            if type(end_args) is dict:
                args.update(end_args)
            problem = bad_id(args)
            if problem:
                return f"args.{problem}"
            if self._keep is not None and not self._keep(args):
                return None
            self._span(str(begin.get("name", "")), begin["ts"] / 1e6, (ts - begin["ts"]) / 1e6, worker, tid, args)
            self.count += 1
        elif ph in _INSTANTS:
            worker = self._worker(pid)
            if worker is None:
                return None
            ts = ev.get("ts")
            if not is_number(ts) or not -MAX_US < ts < MAX_US:
                return "instant event without a numeric ts in range"
            args = ev.get("args")
            if type(args) is not dict:
                args = {}
            problem = bad_id(args)
            if problem:
                return f"args.{problem}"
            self._instant(worker, str(ev.get("name", "")), ts / 1e6, args)
            self.count += 1
        elif ph == "C":
            worker = self._worker(pid)
            if worker is None:
                return None
            ts, args = ev.get("ts"), ev.get("args")
            if not is_number(ts) or not -MAX_US < ts < MAX_US:
                return "counter event without a numeric ts in range"
            if type(args) is not dict or not args:
                return "counter event without args"
            name = str(ev.get("name", ""))
            for series, value in args.items():
                if is_number(value):
                    # One series (otel_rl writes {"value": v}) is the counter itself; several are name.series.
                    self._sink.counter(worker, name if len(args) == 1 else f"{name}.{series}", ts / 1e6,
                                       float(value))
            self.count += 1
        elif ph == "M":
            if ev.get("name") == "process_name":
                worker = self._worker(pid)
                name = (ev.get("args") or {}).get("name") if type(ev.get("args")) is dict else None
                if worker is not None and name:
                    if type(name) is not str:
                        return "process_name without a string args.name"
                    self._sink.process_name(worker, name)
        return None

    def open_spans(self) -> int:
        """``B`` events never ended by an ``E`` (call once every event is fed)."""
        return sum(len(stack) for stack in self.open.values())
