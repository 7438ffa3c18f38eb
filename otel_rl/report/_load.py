"""Reads a run's files into :class:`RunData`.

Inputs are found and read with the converter's readers
(:func:`otel_rl.convert.discover_inputs`, :func:`~otel_rl.convert.sniff_file`,
:func:`~otel_rl.convert.iter_lines`, the OTLP/JSON span reader and
:func:`~otel_rl.convert.iter_chrome_json_events`), so everything
``otel-rl convert`` reads, a report reads too: otel_rl's per-rank Chrome JSONL,
AReaL's traces, torch profiler JSON, OTLP/JSON from a collector. On top of those
it reads session records (otel_rl's and AReaL's ``sessions-r*.jsonl``) and
request events (sglang-omni's ``events_*.jsonl`` fields: ``request_id, stage,
event_name, timestamp_ns, run_id, pid, metadata``).

Reading is bounded as the converter's is (:class:`~otel_rl.convert.InputLimits`),
and a line whose fields have the wrong JSON type (an id that is a list or an
object, a time that is no date) is skipped and named with its file and line:
what a report is built from can always be hashed, compared and printed.
"""

from __future__ import annotations

import gc
import os
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from .._internal import keys
from ..convert import (_ID_TYPES, InputLimits, _first_line, _open_input, _otlp_span_problem, _OtlpReader,
                       discover_inputs, iter_chrome_json_events, iter_lines, sniff_file)
from ._requests import scope_request_ids
from ._model import RunData, SessionRow, SpanRow

_LABEL_RE = re.compile(r"^(?:traces|sessions|events|metrics|stats)[-_](.+?)\.jsonl?(?:\.gz)?$")
_RANK_RE = re.compile(r"(?:^|-)r(\d+)$")
_NUMBER = (int, float)
#: Session record counters that hold a response length (first found wins).
RESPONSE_LENGTH_COUNTERS = ("response_length", "response_tokens", "output_tokens",
                            "completion_tokens", "num_output_tokens", "generated_tokens")
#: Lines worth skipping before parsing: batch markers and flow arrows of otel_rl traces.
_SKIP_PREFIXES = (b'{"ph":"M","name":"otel_rl.batch"', b'{"ph":"f"', b'{"ph":"s"', b'{"ph":"t"')
#: Progress bars appear by themselves from this much input on.
PROGRESS_BYTES = 64 << 20
#: Fields of a request event line (sglang-omni's format, written by ``otel_rl.events``).
_RID, _STAGE, _NAME, _TS, _RUN, _PID, _META = keys.EVENT_FIELDS
#: Torch profiler traces otel_rl writes; read only when named (their kernels would swamp the views).
_SUMMARY_RE = re.compile(r"^summary-(?:.+-)?r\d+(?:-pid\d+)?\.json$")
_TORCH_TRACE_RE = re.compile(r"^torch-.*\.trace\.json(?:\.gz)?$")
#: Span args that identify something; a line whose one of them is a list or object is skipped.
_ID_ARGS = ("span_id", "parent_span_id", "trace_id", keys.TASK_ID, keys.SESSION_ID, keys.STEP,
            keys.REQUEST_ID, keys.THREAD_ID)
_CONTAINERS = frozenset({dict, list})
#: Times beyond this many seconds from the epoch (either way: years 1019 to 2920)
#: are garbage, not dates; they could not even be printed as one.
_MAX_S = 3e10
_MAX_US = _MAX_S * 1e6
_MAX_NS = _MAX_S * 1e9


def worker_label(rank: Any, role: Any) -> str:
    """The label of a process, as in its file names: ``{role}-r{rank}`` or ``r{rank}``."""
    return f"{role}-r{rank}" if role else f"r{rank}"


def file_label(path: str) -> str:
    """``traces-rollout-r0.jsonl`` -> ``rollout-r0``; other names -> their stem."""
    name = os.path.basename(path)
    m = _LABEL_RE.match(name)
    if m:
        return m.group(1)
    for suffix in (".gz", ".jsonl", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def rank_of(label: str) -> int | None:
    """The rank in a worker label (``rollout-r3`` -> 3), if it has one."""
    m = _RANK_RE.search(label.split(" ")[0])
    return int(m.group(1)) if m else None


def parse_steps(spec: Any) -> frozenset | None:
    """``"3"``, ``"1,4"``, ``"2-5"`` or an iterable of ints -> a set of steps (``None``: all)."""
    if spec is None:
        return None
    if isinstance(spec, int):
        return frozenset([spec])
    items: Iterable[Any] = spec.split(",") if isinstance(spec, str) else spec
    steps: set[int] = set()
    for item in items:
        if isinstance(item, int):
            steps.add(item)
            continue
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            m = re.fullmatch(r"(-?\d+)\s*(?:-|\.\.)\s*(-?\d+)", part)
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                steps.update(range(min(lo, hi), max(lo, hi) + 1))
            else:
                try:
                    steps.add(int(part))
                except ValueError:
                    raise ValueError(f"not a step or a range of steps: {part!r}") from None
    return frozenset(steps)


def parse_ranks(spec: Any) -> tuple | None:
    """Ranks (``0``) or worker labels (``rollout-r1``), comma-separated or an iterable."""
    if spec is None:
        return None
    items: Iterable[Any] = spec.split(",") if isinstance(spec, str) else (
        [spec] if isinstance(spec, int) else spec)
    out: list[Any] = []
    for item in items:
        for part in ([item] if isinstance(item, int) else str(item).split(",")):
            if isinstance(part, int):
                out.append(part)
                continue
            part = part.strip()
            if part:
                out.append(int(part) if part.isdigit() else part)
    return tuple(out)


def _num(value: Any) -> bool:
    return type(value) is float or type(value) is int


def _bad_id(args: dict[str, Any]) -> str | None:
    """What is wrong with span args whose ids or category are of the wrong JSON type, or ``None``."""
    if not _CONTAINERS.isdisjoint(map(type, args.values())):  # the usual case, at C speed
        for key in _ID_ARGS:
            if type(args.get(key)) not in _ID_TYPES:
                return f"{key} is not a string or number"
    category = args.get(keys.CATEGORY)
    if category is not None and type(category) is not str:
        return f"{keys.CATEGORY} is not a string"
    return None


def _seconds(value: Any, what: str) -> Any:
    """``value`` if it is a time in seconds (or ``None``); raises ``ValueError`` naming ``what`` otherwise."""
    if value is None:
        return None
    if type(value) is not float and type(value) is not int:
        raise ValueError(f"{what} is not a number: {value!r:.40}")
    if not -_MAX_S < value < _MAX_S:
        raise ValueError(f"{what} is out of range: {value!r}")
    return value


class _Progress:
    """A rich progress bar over bytes read, or nothing."""

    def __init__(self, total: int, show: bool | None) -> None:
        if show is None:
            show = total >= PROGRESS_BYTES and sys.stderr.isatty()
        self._bar = None
        if show and total > 0:
            from rich.console import Console
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                                       TimeRemainingColumn)

            self._bar = Progress(TextColumn("otel-rl report: reading"), BarColumn(), DownloadColumn(),
                                 TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("read", total=total)

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def callback(self, path: str) -> Callable[[int], None] | None:
        # Compressed files advance by their size once read (what they hold is bigger).
        if self._bar is None or path.endswith(".gz"):
            return None
        return self.advance

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class _Loader:
    def __init__(self, data: RunData, progress: _Progress, named: frozenset[str] = frozenset(),
                 limits: InputLimits | None = None) -> None:
        self.data = data
        self.named = named
        self.limits = limits or InputLimits()
        self.diag = data.diagnostics
        self.progress = progress
        self._names: dict[str, str] = {}
        self._allowed: dict[str, bool] = {}
        self._worker_cache: dict[tuple[Any, Any], str] = {}

    # --- helpers ----------------------------------------------------------------------------
    def intern(self, name: str) -> str:
        return self._names.setdefault(name, name)

    def allowed(self, worker: str) -> bool:
        ok = self._allowed.get(worker)
        if ok is None:
            ranks = self.data.ranks
            if ranks is None:
                ok = True
            else:
                rank = self.data.workers.get(worker, {}).get("rank", rank_of(worker))
                ok = any(r == worker or (isinstance(r, int) and r == rank) for r in ranks)
            self._allowed[worker] = ok
        return ok

    def worker(self, label: str, **info: Any) -> str:
        entry = self.data.workers.setdefault(label, {})
        if "rank" not in entry:
            entry["rank"] = rank_of(label)
            m = re.match(r"^(.+)-r\d+$", label)
            if m and " " not in label:
                entry["role"] = m.group(1)
        for key, value in info.items():
            if value is not None and entry.get(key) is None:
                entry[key] = value
        return label

    def _step_ok(self, args: dict[str, Any]) -> bool:
        # The step was checked to be a string, number or null (hashable).
        steps = self.data.steps
        return steps is None or args.get(keys.STEP) in steps

    # --- files ------------------------------------------------------------------------------
    def read(self, path: str) -> None:
        size = os.path.getsize(path)
        try:
            kind, head = sniff_file(path, self.limits)
        except (OSError, EOFError, ValueError) as exc:
            self.diag.unreadable.append((path, str(exc)))
            self.progress.advance(size)
            return
        try:
            if kind == "chrome-jsonl":
                count = self._chrome_jsonl(path)
            elif kind == "otlp-jsonl":
                count = self._otlp(path)
            elif kind == "document":
                if _TORCH_TRACE_RE.match(os.path.basename(path)) and os.path.realpath(path) not in self.named:
                    self.diag.ignored.append((path, "torch profiler trace (name the file to report on its "
                                                    "kernels)"))
                    count = -1
                else:
                    count = self._document(path)
            elif kind == "empty":
                self.diag.ignored.append((path, "empty"))
                count = -1
            elif isinstance(head, dict) and "session_id" in head and (
                    "submit_ts" in head or "task_id" in head):
                kind = "sessions"
                count = self._sessions(path)
            elif isinstance(head, dict) and _RID in head and _NAME in head:
                kind = "request-events"
                count = self._request_events(path)
            elif isinstance(head, dict) and isinstance(head.get("values"), dict) and "step" in head:
                kind = "stats"
                count = self._stats(path)
            else:
                self.diag.ignored.append((path, self._why_ignored(kind, head)))
                count = -1
        except (OSError, EOFError, ValueError) as exc:
            self.diag.unreadable.append((path, str(exc)))
            count = -1
        if path.endswith(".gz") or kind not in ("chrome-jsonl", "otlp-jsonl", "sessions",
                                                 "request-events", "stats"):
            self.progress.advance(size)
        if count >= 0:
            self.diag.files.append((path, kind, count))

    @staticmethod
    def _why_ignored(kind: str, head: Any) -> str:
        if isinstance(head, dict):
            if "resource_metrics" in head or "resourceMetrics" in head:
                return "OpenTelemetry metrics"
            if "resourceLogs" in head or "resource_logs" in head:
                return "OpenTelemetry logs"
            return "JSON lines that are neither trace events, session records nor request events"
        return kind

    def _lines(self, path: str, skip: tuple[bytes, ...] = ()) -> Iterable[tuple[int, Any]]:
        """Parsed JSON objects of a JSON lines file, with their line numbers; bad lines
        reported. Lines starting with one of ``skip`` are passed over unparsed."""
        loads = orjson.loads

        def skipped(lineno: int | None, message: str) -> None:
            if lineno is None:
                self.diag.warn(f"{path}: read only in part: {message}")
            else:
                self.diag.bad_line(path, lineno, message)

        for lineno, line, unterminated in iter_lines(path, self.progress.callback(path), self.limits, skipped):
            if not line or (skip and line.startswith(skip)) or line.isspace():
                continue
            try:
                obj = loads(line)
            except orjson.JSONDecodeError as exc:
                if unterminated:
                    self.diag.truncated.append(f"{path}:{lineno}")
                else:
                    self.diag.bad_line(path, lineno, str(exc))
                continue
            if type(obj) is not dict:
                self.diag.bad_line(path, lineno, "not a JSON object")
                continue
            yield lineno, obj

    # --- Chrome trace events ----------------------------------------------------------------
    def _chrome_jsonl(self, path: str) -> int:
        reader = _ChromeEvents(self, path)
        for lineno, event in self._lines(path, _SKIP_PREFIXES):
            problem = reader.feed(event)
            if problem:
                self.diag.bad_line(path, lineno, problem)
        return reader.finish()

    def _document(self, path: str) -> int:
        reader = _ChromeEvents(self, path)
        for index, event in enumerate(iter_chrome_json_events(path, self.limits)):
            problem = reader.feed(event)
            if problem:
                self.diag.bad_line(path, 0, f"event {index}: {problem}")
        return reader.finish()

    # --- OTLP/JSON --------------------------------------------------------------------------
    def _otlp(self, path: str) -> int:
        otlp = _OtlpReader()
        count = 0
        with _open_input(path, self.limits) as f:
            first = _first_line(f, self.limits)
            if type(first) is bytes and not first.rstrip().endswith(b"}"):
                # One request pretty-printed over many lines.
                f.rewind()
                request = orjson.loads(f.read_document())
                if type(request) is not dict:
                    raise ValueError("not a JSON object")
                try:
                    spans = otlp.spans(request)
                except (TypeError, KeyError, AttributeError) as exc:
                    raise ValueError(f"not an OTLP/JSON trace request: {exc!r}") from None
                return self._otlp_spans(spans, path, 0)
        for lineno, request in self._lines(path):
            if not ("resourceSpans" in request or "resource_spans" in request):
                continue  # metrics or logs written to the same file by a collector
            try:
                spans = otlp.spans(request)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                self.diag.bad_line(path, lineno, f"not an OTLP/JSON trace request: {exc!r}")
                continue
            count += self._otlp_spans(spans, path, lineno)
        return count

    def _otlp_spans(self, spans: Sequence[Any], path: str, lineno: int) -> int:
        count = 0
        for index, span in enumerate(spans):
            problem = self._otlp_problem(span)
            if problem:
                self.diag.bad_line(path, lineno, f"span {index}: {problem}")
                continue
            res = span.resource.attributes
            rank, role = res.get(keys.RANK), res.get(keys.ROLE)
            pid = res.get(keys.PROCESS_PID)
            if rank is not None:
                label = worker_label(rank, role)
            else:
                label = f"{res.get(keys.SERVICE_NAME, 'otlp')} pid {pid}"
            if not self.allowed(self.worker(label, rank=rank if isinstance(rank, int) else None,
                                            role=role, pid=pid)):
                continue
            args = dict(span.attributes or {})
            if not self._step_ok(args):
                continue
            args["trace_id"] = f"{span.context.trace_id:032x}"  # where Chrome trace events keep it
            parent = span.parent
            events = None
            if span.events:
                events = [(e.name, e.timestamp / 1e9, dict(e.attributes or {})) for e in span.events]
                for name, ts, attrs in events:
                    self.data.instants.append((label, name, ts, attrs))
            self.data.spans.append(SpanRow(
                self.intern(span.name), (span.start_time or 0) / 1e9,
                max(0, (span.end_time or span.start_time) - span.start_time) / 1e9,
                f"{span.context.span_id:016x}",
                f"{parent.span_id:016x}" if parent is not None else None,
                label, args.get(keys.THREAD_ID), args, events))
            count += 1
        return count

    @staticmethod
    def _otlp_problem(span: Any) -> str | None:
        """Why an OTLP span cannot be used (a name or an id of the wrong JSON type), or ``None``."""
        problem = _otlp_span_problem(span) or _bad_id(span.attributes or {})
        if problem:
            return problem
        for event in span.events:
            problem = _bad_id(event.attributes or {})
            if problem:
                return f"event {event.name}: {problem}"
        if not (0 <= (span.start_time or 0) < _MAX_NS and 0 <= (span.end_time or 0) < _MAX_NS):
            return "startTimeUnixNano / endTimeUnixNano out of range"
        return None

    # --- otel_rl.stats exports ---------------------------------------------------------------
    def _stats(self, path: str) -> int:
        """``stats-r{rank}.jsonl``: one tracker's export per line, kept for the training view."""
        count = 0
        for lineno, rec in self._lines(path):
            if not isinstance(rec, dict) or not isinstance(rec.get("values"), dict):
                self.diag.bad_line(path, lineno, "not a stats export (no 'values' object)")
                continue
            step = rec.get("step")
            if step is not None and type(step) is not int:
                step = None
            self.data.stats.append({"step": step, "tracker": rec.get("tracker"), "rank": rec.get("rank"),
                                    "values": rec["values"]})
            count += 1
        return count

    # --- session records --------------------------------------------------------------------
    def _sessions(self, path: str) -> int:
        label = file_label(path)
        count = 0
        sessions = self.data.sessions
        for lineno, rec in self._lines(path):
            try:
                row = self._session(rec, label)
            except (ValueError, TypeError, AttributeError) as exc:
                self.diag.bad_line(path, lineno, str(exc))
                continue
            if row is None:
                continue
            sessions.append(row)
            count += 1
        return count

    def _session(self, rec: dict[str, Any], label: str) -> SessionRow | None:
        if "session_id" not in rec:
            raise ValueError("not a session record (no session_id)")
        rank = rec.get("rank")
        role = rec.get("role")
        if role is not None and type(role) is not str:
            raise ValueError("role is not a string")
        for name in ("session_id", "task_id", "span_id", "trace_id"):
            if type(rec.get(name)) not in _ID_TYPES:
                raise ValueError(f"{name} is not a string or number")
        key = (rank, role) if type(rank) is int else (label, None)
        worker = self._worker_cache.get(key)
        if worker is None:
            if type(rank) is int:
                worker = self.worker(worker_label(rank, role), rank=rank, role=role or None)
            else:
                worker = self.worker(label)
            self._worker_cache[key] = worker
        if self.data.ranks is not None and not self.allowed(worker):
            return None
        submit = _seconds(rec.get("submit_ts"), "submit_ts")
        finalized = _seconds(rec.get("finalized_ts"), "finalized_ts")
        total = rec.get("total_s")
        if finalized is None:
            total = None  # still open: no duration
        elif total is None:
            if submit is not None:
                total = finalized - submit
        else:
            total = _seconds(total, "total_s")
        flat: list[Any] = []
        phases = rec.get("phases")
        if phases:
            if type(phases) is not dict:
                raise ValueError("phases is not an object")
            names = self._names
            for name, instances in phases.items():
                if type(instances) is not list:
                    raise ValueError(f"phases.{name} is not a list")
                name = names.setdefault(name, name)
                for inst in instances:
                    try:
                        s = inst["start_ts"]
                        e = inst.get("end_ts")
                    except (TypeError, KeyError):
                        raise ValueError(f"phases.{name}: an instance without start_ts") from None
                    if (type(s) is not float and type(s) is not int) or (
                            e is not None and type(e) is not float and type(e) is not int):
                        raise ValueError(f"phases.{name}: start_ts / end_ts are not numbers")
                    if not -_MAX_S < s < _MAX_S or (e is not None and not -_MAX_S < e < _MAX_S):
                        raise ValueError(f"phases.{name}: start_ts / end_ts out of range")
                    flat += (name, s, e)
        step = rec.get("step")
        if step is None:
            step = rec.get("global_step")
        if step is not None and type(step) is not int:
            step = None
        status = rec.get("status") or "unknown"
        if type(status) is not str:
            status = str(status)
        counters = rec.get("counters")
        reason = rec.get("reason")
        if type(reason) is dict or type(reason) is list:
            reason = orjson.dumps(reason).decode()  # shown as text, as structured as it was written
        return SessionRow(worker, rec.get("task_id"), rec["session_id"], self._names.setdefault(status, status),
                          reason, submit, finalized, total, step, tuple(flat),
                          counters if type(counters) is dict and counters else None, rec.get("span_id"),
                          rec.get("trace_id"))

    # --- request events ---------------------------------------------------------------------
    def _request_events(self, path: str) -> int:
        requests = self.data.requests
        count = 0
        missing_id = 0
        intern = self.intern
        for lineno, ev in self._lines(path):
            rid = ev.get(_RID)
            name = ev.get(_NAME)
            ts = ev.get(_TS)
            if rid is None or rid == "":
                missing_id += 1
                continue
            if not isinstance(name, str) or not _num(ts):
                self.diag.bad_line(path, lineno, "request event without a string event_name and "
                                                 "a numeric timestamp_ns")
                continue
            pid = ev.get(_PID)
            if type(rid) not in _ID_TYPES or type(pid) not in _ID_TYPES:
                self.diag.bad_line(path, lineno, f"{_RID if type(rid) not in _ID_TYPES else _PID} "
                                                 "is not a string or number")
                continue
            if not -_MAX_NS < ts < _MAX_NS:
                self.diag.bad_line(path, lineno, f"{_TS} is out of range: {ts!r}")
                continue
            metadata = ev.get(_META)
            if type(metadata) is not dict:
                metadata = {}
            stage = ev.get(_STAGE)
            requests.setdefault(rid, []).append(
                (int(ts), intern(stage if isinstance(stage, str) else "unknown"), intern(name), pid, metadata))
            count += 1
        if missing_id:
            self.diag.warn(f"{path}: {missing_id} request events without a request_id skipped")
        return count


class _ChromeEvents:
    """Turns Chrome trace events of one file into spans and instants."""

    def __init__(self, loader: _Loader, path: str) -> None:
        self.loader = loader
        self.path = path
        self.label = file_label(path)
        self.conventional = bool(_LABEL_RE.match(os.path.basename(path)))
        self.workers: dict[Any, str | None] = {}
        self.first_pid: Any = None
        self.open: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
        self.count = 0
        data = loader.data
        self.spans = data.spans
        self.instants = data.instants

    def _worker(self, pid: Any) -> str | None:
        if pid in self.workers:
            return self.workers[pid]
        if self.first_pid is None:
            self.first_pid = pid
        if pid == self.first_pid and self.conventional:
            label = self.label
        else:
            label = f"{self.label} pid {pid}"
        loader = self.loader
        loader.worker(label, pid=pid)
        worker = label if loader.allowed(label) else None
        self.workers[pid] = worker
        return worker

    def feed(self, ev: dict[str, Any]) -> str | None:
        """Takes one event; returns what is wrong with it (the line is then skipped), or ``None``."""
        ph = ev.get("ph")
        pid, tid = ev.get("pid"), ev.get("tid")
        if type(pid) not in _ID_TYPES or type(tid) not in _ID_TYPES:
            return f"{'pid' if type(pid) not in _ID_TYPES else 'tid'} is not a string or number"
        if ph == "X":
            worker = self._worker(pid)
            if worker is None:
                return None
            ts, dur = ev.get("ts"), ev.get("dur", 0)
            if not _num(ts) or not _num(dur):
                return "complete event without numeric ts / dur"
            if not (-_MAX_US < ts < _MAX_US and -_MAX_US < ts + dur < _MAX_US):
                return "ts / dur out of range"
            args = ev.get("args")
            if type(args) is not dict:
                args = {}
            problem = _bad_id(args)
            if problem:
                return f"args.{problem}"
            if not self.loader._step_ok(args):
                return None
            self.spans.append(SpanRow(self.loader.intern(str(ev.get("name", ""))), ts / 1e6,
                                      dur / 1e6, args.get("span_id"),
                                      args.get("parent_span_id"), worker, tid, args))
            self.count += 1
        elif ph == "B":
            if self._worker(pid) is None:
                return None
            ts = ev.get("ts")
            if not _num(ts) or not -_MAX_US < ts < _MAX_US:
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
            if not _num(ts) or not -_MAX_US < ts < _MAX_US:
                return "end event without a numeric ts in range"
            begin_args, end_args = begin.get("args"), ev.get("args")
            args = dict(begin_args) if type(begin_args) is dict else {}
            if type(end_args) is dict:
                args.update(end_args)
            problem = _bad_id(args)
            if problem:
                return f"args.{problem}"
            if not self.loader._step_ok(args):
                return None
            self.spans.append(SpanRow(self.loader.intern(str(begin.get("name", ""))),
                                      begin["ts"] / 1e6, (ts - begin["ts"]) / 1e6, args.get("span_id"),
                                      args.get("parent_span_id"), worker, tid, args))
            self.count += 1
        elif ph in ("i", "I", "n", "R"):
            worker = self._worker(pid)
            if worker is None:
                return None
            ts = ev.get("ts")
            if not _num(ts) or not -_MAX_US < ts < _MAX_US:
                return "instant event without a numeric ts in range"
            args = ev.get("args")
            if type(args) is not dict:
                args = {}
            problem = _bad_id(args)
            if problem:
                return f"args.{problem}"
            self.instants.append((worker, str(ev.get("name", "")), ts / 1e6, args))
            self.count += 1
        elif ph == "M":
            if ev.get("name") == "process_name":
                worker = self._worker(pid)
                name = (ev.get("args") or {}).get("name") if type(ev.get("args")) is dict else None
                if worker is not None and name:
                    if type(name) is not str:
                        return "process_name without a string args.name"
                    self.loader.worker(worker, name=name)
        return None

    def finish(self) -> int:
        left = sum(len(stack) for stack in self.open.values())
        if left:
            self.loader.diag.open_spans += left
            self.loader.diag.warn(f"{self.path}: {left} 'B' events never ended: reported as open spans")
        return self.count


# --- after reading ---------------------------------------------------------------------------
def _derive(data: RunData, loader: _Loader) -> None:
    """Steps and response lengths for session records; sessions known only from spans."""
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
    for row in data.sessions:
        span = session_spans.get(row.span_id) if row.span_id else None
        if span is None:
            span = by_key.get((row.worker, row.task_id, row.session_id))
        if span is not None:
            matched.add(id(span))
            if row.step is None:
                step = span.args.get(keys.STEP)
                row.step = step if type(step) is int else None
            if row.span_id is None:
                row.span_id = span.span_id
            if row.trace_id is None:
                row.trace_id = span.args.get("trace_id")
        row.tokens = _response_length(row.counters, tokens.get(row.span_id) if row.span_id else None)
    # Sessions seen only as spans (an OTLP export, or records not written yet).
    derived = 0
    for span in list(session_spans.values()) + [s for s in by_key.values() if not s.span_id]:
        if id(span) in matched:
            continue
        matched.add(id(span))
        args = span.args
        flat: list[Any] = []
        for ph in sorted(phase_spans.get(span.span_id or "", ()), key=lambda s: s.start):
            end = None if ph.args.get(keys.PHASE_INTERRUPTED) else ph.end
            flat += (loader.intern(str(ph.args.get(keys.PHASE, ph.name))), ph.start, end)
        counters = {k[len(keys.SESSION_COUNTER_PREFIX):]: v for k, v in args.items()
                    if k.startswith(keys.SESSION_COUNTER_PREFIX)} or None
        total = args.get(keys.SESSION_TOTAL_S)
        status = str(args.get(keys.SESSION_STATUS) or keys.STATUS_PENDING)
        step = args.get(keys.STEP)
        row = SessionRow(span.worker, args.get(keys.TASK_ID), args.get(keys.SESSION_ID),
                         loader.intern(status), args.get(keys.SESSION_REASON), span.start, span.end,
                         total if _num(total) else span.dur,
                         step if type(step) is int else None, tuple(flat), counters, span.span_id,
                         args.get("trace_id"))
        row.tokens = _response_length(counters, tokens.get(span.span_id) if span.span_id else None)
        data.sessions.append(row)
        derived += 1
    if data.steps is not None:
        data.sessions = [s for s in data.sessions if s.step in data.steps]
    if not data.requests:
        _requests_from_span_events(data, loader)


#: Chrome args an instant carries that are not request metadata.
_NOT_METADATA = frozenset({"rank", "role", "trace_id", "span_id", "parent_span_id"})


def _requests_from_span_events(data: RunData, loader: _Loader) -> None:
    """Request events recorded as span events (``rl.request.id``, ``rl.stage``), when no
    request-event file was read: what a collector's OTLP/JSON or a trace file alone holds."""
    prefix = keys.ARGS_PREFIX
    for worker, name, ts, args in data.instants:
        rid = args.get(keys.REQUEST_ID)
        if rid is None:
            continue
        stage = args.get(keys.STAGE)
        # OTLP attributes carry the metadata as ``rl.args.<key>``; Chrome args under
        # the key itself, beside otel_rl's own ``rl.*`` keys and the rank's labels.
        metadata = {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in args.items()
                    if k.startswith(prefix) or not (k.startswith("rl.") or k in _NOT_METADATA)}
        data.requests.setdefault(rid, []).append(
            (round(ts * 1e9), loader.intern(stage if isinstance(stage, str) else "unknown"),
             loader.intern(name), data.workers.get(worker, {}).get("pid"), metadata))


def _response_length(counters: dict[str, Any] | None, from_spans: float | None) -> float | None:
    if counters:
        for name in RESPONSE_LENGTH_COUNTERS:
            value = counters.get(name)
            if _num(value):
                return value
    return from_spans if from_spans else None


def _align_clocks(data: RunData, apply: bool) -> None:
    """Detects workers whose clock is behind, from cross-process parent / child spans.

    A span started from a context another process sent (a server span under a
    client's request span, a worker's span under the trainer's) cannot start
    before its parent did, whatever the messaging in between. When children on
    worker B start before their parents on worker A, B's clock is behind A's
    by at least the largest such gap; B's times are shifted by that much (the
    smallest shift that restores causality). Clocks that agree are never
    touched, and offsets chain from the worker with the most spans.
    """
    by_id = {s.span_id: s for s in data.spans if s.span_id}
    need: dict[tuple[str, str], float] = {}
    pairs: dict[frozenset, int] = defaultdict(int)
    violations: dict[tuple[str, str], int] = defaultdict(int)
    for span in data.spans:
        parent = by_id.get(span.parent_id) if span.parent_id else None
        if parent is None or parent.worker == span.worker:
            continue
        key = (parent.worker, span.worker)
        pairs[frozenset(key)] += 1
        gap = parent.start - span.start
        if gap > 0:
            violations[key] += 1
            if gap > need.get(key, 0.0):
                need[key] = gap
    if not pairs:
        return
    counts: dict[str, int] = defaultdict(int)
    for span in data.spans:
        counts[span.worker] += 1
    edges: dict[str, list[tuple[str, float, int, int]]] = defaultdict(list)
    for pair, n in pairs.items():
        a, b = sorted(pair) if len(pair) == 2 else (next(iter(pair)),) * 2
        ab, ba = need.get((a, b), 0.0), need.get((b, a), 0.0)
        v = violations.get((a, b), 0) + violations.get((b, a), 0)
        if ab and ba:
            data.diagnostics.warn(f"clocks of {a} and {b} contradict each other (children start before "
                                  "their parents both ways): not aligned")
            off = 0.0
        else:
            off = -ab if ab else ba  # b's clock minus a's
        edges[a].append((b, off, n, v))
        edges[b].append((a, -off, n, v))
    reference = max(counts, key=lambda w: (counts[w], w))
    offsets = {reference: 0.0}
    frontier = [reference]
    while frontier:
        nxt = []
        for a in frontier:
            for b, off, n, v in edges[a]:
                if b in offsets:
                    continue
                offsets[b] = offsets[a] + off
                nxt.append(b)
                data.diagnostics.clock_offsets.append({
                    "worker": b, "relative_to": reference, "offset_s": offsets[b], "pairs": n,
                    "violations": v, "applied": bool(apply and offsets[b] != 0.0)})
        frontier = nxt
    shift = {w: off for w, off in offsets.items() if off} if apply else {}
    if not shift:
        return
    for span in data.spans:
        d = shift.get(span.worker)
        if d:
            span.start -= d
            span.end -= d
    data.instants = [(w, n, t - shift.get(w, 0.0), a) for w, n, t, a in data.instants]
    for row in data.sessions:
        d = shift.get(row.worker)
        if not d:
            continue
        if row.submit is not None:
            row.submit -= d
        if row.finalized is not None:
            row.finalized -= d
        p = list(row.phases)
        for i in range(0, len(p), 3):
            p[i + 1] -= d
            if p[i + 2] is not None:
                p[i + 2] -= d
        row.phases = tuple(p)


def load(inputs: str | Sequence[str], *, steps: Any = None, ranks: Any = None,
         align_clocks: bool = True, progress: bool | None = None,
         limits: InputLimits | None = None) -> RunData:
    """Reads run directories, files or glob patterns into one :class:`RunData`.

    Args:
        inputs: Run directories (searched recursively), files or glob patterns:
            session records, trace files (Chrome JSONL or JSON, OTLP/JSON) and
            request-event files, in any mix, optionally gzipped.
        steps: Only these training steps (``3``, ``"1,4"``, ``"2-5"`` or ints).
        ranks: Only these ranks (``0``) or workers (``"rollout-r1"``).
        align_clocks: Shift a worker's times when its spans contradict their
            cross-process parents (clock skew between hosts).
        progress: Show a progress bar (``None``: on large inputs in a terminal).
        limits: Bounds on what one input may cost to read
            (:class:`otel_rl.convert.InputLimits`: line length, decompressed
            size); what goes past them is skipped and reported in the diagnostics.

    Returns:
        The run; ``data.diagnostics`` says what could not be read and why: a line
        that cannot be used (not JSON, a field of the wrong type, over the line
        bound) is skipped and named with its file and line, never raised.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [os.fspath(inputs)]
    inputs = [os.fspath(i) for i in inputs]
    data = RunData(inputs=list(inputs), steps=parse_steps(steps), ranks=parse_ranks(ranks))
    files, missing = discover_inputs(inputs)
    # Run summaries (summary-r{rank}.json) found in a directory describe the run's
    # own bookkeeping, not its work: left out without a word.
    named = {os.path.realpath(i) for i in inputs}
    files = [p for p in files if os.path.realpath(p) in named
             or not _SUMMARY_RE.match(os.path.basename(p))]
    data.diagnostics.missing.extend(missing)
    total = 0
    for path in files:
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    bar = _Progress(total, progress)
    named = frozenset(os.path.realpath(p) for p in inputs if os.path.isfile(p))
    loader = _Loader(data, bar, named, limits)
    # Millions of small objects and no cycles: the cyclic collector would only
    # rescan them over and over while they are created.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for path in files:
            try:
                loader.read(path)
            except OSError as exc:
                data.diagnostics.unreadable.append((path, str(exc)))
        _derive(data, loader)
        _align_clocks(data, align_clocks)
        scope_request_ids(data)
        for events in data.requests.values():
            events.sort(key=lambda e: e[0])
    finally:
        bar.close()
        if collecting:
            gc.enable()
    return data
