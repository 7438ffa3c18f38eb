"""Reads a run's files into :class:`RunData`.

Inputs are found and read by the reader layer ``otel-rl convert`` reads
through too (``otel_rl._internal.read``), so everything ``otel-rl convert``
reads, a report reads too: otel_rl's per-rank Chrome JSONL, AReaL's traces,
torch profiler JSON, OTLP/JSON from a collector. On top of those it reads
session records (otel_rl's and AReaL's ``sessions-r*.jsonl``), request events
(sglang-omni's ``events_*.jsonl`` fields: ``request_id, stage, event_name,
timestamp_ns, run_id, pid, metadata``) and ``otel_rl.stats`` exports.

Reading is bounded as the converter's is (:class:`~otel_rl.convert.InputLimits`)
and streamed: files are read a block of lines at a time, and a session keeps
only what the views read. A line whose fields have the wrong JSON type (an id
that is a list or an object, a time that is no date) is skipped and named with
its file and line: what a report is built from can always be hashed, compared
and printed.
"""

from __future__ import annotations

import gc
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from typing import Any

from .._internal import keys
from .._internal.encode.chrome_markers import slice_id
from .._internal.read.chrome_events import SKIP_PREFIXES, ChromeEventReader
from .._internal.read.chrome_json import iter_chrome_json_events
from .._internal.read.discovery import discover_inputs
from .._internal.read.jsonl import json_objects
from .._internal.read.limits import InputLimits
from .._internal.read.names import file_label, is_run_summary
from .._internal.read.otlp_json import OtlpReader, is_trace_request, pretty_printed_request, span_problem
from .._internal.read.request_events import read_request_events
from .._internal.read.sessions import read_session_records, session_pool
from .._internal.read.sniff import record_kind, sniff_file, why_ignored
from .._internal.read.annotations import read_annotations
from .._internal.read.stats_exports import read_stats_exports
from .._internal.read.torch_trace import is_torch_trace
from .._internal.recording.ids import trace_text
from ._clocks import align_clocks as _align
from ._columns import LazySessions, SessionTable
from ._derive import derive
from ._model import RunData, SpanRow, record_row
from ._requests import scope_request_ids

_RANK_RE = re.compile(r"(?:^|-)r(\d+)$")
#: Progress bars appear by themselves from this much input on.
PROGRESS_BYTES = 64 << 20
#: Kinds whose progress is counted as they are read (the others once read).
_STREAMED = frozenset({"chrome-jsonl", "otlp-jsonl", "sessions", "request-events", "stats"})


def worker_label(rank: Any, role: Any) -> str:
    """The label of a process, as in its file names: ``{role}-r{rank}`` or ``r{rank}``."""
    return f"{role}-r{rank}" if role else f"r{rank}"


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


def _holds_annotations(path: str, limits: InputLimits | None) -> bool:
    """Whether a file holds annotation lines: only then are sessions read with what joins them
    (a million sessions' task and span ids take tens of MB)."""
    try:
        kind, head = sniff_file(path, limits or InputLimits())
    except (OSError, EOFError, ValueError):
        return False
    return kind not in ("chrome-jsonl", "otlp-jsonl", "document", "empty") and record_kind(head) == "annotations"


class _Loader:
    """Reads files into one :class:`RunData`: where the readers put what they read
    (a ``LineProblems`` and a ``ChromeEventSink``), and which worker each thing is from."""

    def __init__(self, data: RunData, progress: _Progress, named: frozenset[str] = frozenset(),
                 limits: InputLimits | None = None, cold: str = "all", joins: bool = True) -> None:
        self.data = data
        self.named = named
        self.limits = limits or InputLimits()
        self.diag = data.diagnostics
        self.progress = progress
        self.names: dict[str, str] = {}
        self._allowed: dict[str, bool] = {}
        self._keep = self._step_ok if data.steps is not None else None
        self.pool: Executor | None = None  # worker processes parsing session records
        # Session records gathered as columns, when every record is kept (no --step / --rank).
        self.table = (SessionTable(cold=cold, joins=joins) if cold and data.steps is None and data.ranks is None
                      else None)

    # --- where readers report bad lines -------------------------------------------------------
    def bad_line(self, path: str, line: int, message: str) -> None:
        self.diag.bad_line(path, line, message)

    def truncated(self, path: str, line: int) -> None:
        self.diag.truncated.append(f"{path}:{line}")

    def cut_short(self, path: str, message: str) -> None:
        self.diag.warn(f"{path}: read only in part: {message}")

    # --- workers ------------------------------------------------------------------------------
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
        return args.get(keys.STEP) in self.data.steps  # type: ignore[operator]

    # --- what Chrome trace events hold (a ChromeEventSink) ------------------------------------
    def process(self, label: str, pid: Any) -> str | None:
        self.worker(label, pid=pid)
        return label if self.allowed(label) else None

    def span(self, name: str, start_s: float, dur_s: float, worker: str, tid: Any,
             args: dict[str, Any]) -> None:
        self.data.spans.append(SpanRow(self.names.setdefault(name, name), start_s, dur_s,
                                       slice_id(args, keys.TRACE_ARG_SPAN_ID), slice_id(args, keys.TRACE_ARG_PARENT_ID),
                                       worker, tid, args))

    def instant(self, worker: str, name: str, ts_s: float, args: dict[str, Any]) -> None:
        self.data.instants.append((worker, name, ts_s, args))

    def process_name(self, worker: str, name: str) -> None:
        self.worker(worker, name=name)

    def counter(self, worker: str, name: str, ts_s: float, value: float) -> None:
        self.data.counters.append((worker, name, ts_s, value))

    # --- files --------------------------------------------------------------------------------
    def read(self, path: str) -> None:
        size = os.path.getsize(path)
        try:
            kind, head = sniff_file(path, self.limits)
        except (OSError, EOFError, ValueError) as exc:
            self.diag.unreadable.append((path, str(exc)))
            self.progress.advance(size)
            return
        try:
            count = -1
            if kind == "chrome-jsonl":
                count = self._chrome_events(path, None)
            elif kind == "otlp-jsonl":
                count = self._otlp(path)
            elif kind == "document":
                if is_torch_trace(path) and os.path.realpath(path) not in self.named:
                    self.diag.ignored.append((path, "torch profiler trace (name the file to report on its "
                                                    "kernels)"))
                else:
                    count = self._chrome_events(path, iter_chrome_json_events(path, self.limits))
            elif kind == "empty":
                self.diag.ignored.append((path, "empty"))
            else:
                kind = record_kind(head) or kind
                on_read = self.progress.callback(path)
                if kind == "sessions":
                    count = read_session_records(path, self.limits, self, self._session_workers(path),
                                                 record_row, self.data.sessions.append, on_read, self.pool,
                                                 self.table.add if self.table is not None else None,
                                                 self.table.cold if self.table is not None else "all",
                                                 self.table.joins if self.table is not None else True,
                                                 self.table.floors if self.table is not None else None)
                elif kind == "request-events":
                    count = self._request_events(path, on_read)
                elif kind == "stats":
                    count = read_stats_exports(path, self.limits, self, self.data.stats.append, on_read)
                elif kind == "annotations":
                    count = read_annotations(path, self.limits, self, self.data.annotations.append, on_read)
                else:
                    self.diag.ignored.append((path, why_ignored(kind, head)))
        except (OSError, EOFError, ValueError) as exc:
            self.diag.unreadable.append((path, str(exc)))
            count = -1
        if path.endswith(".gz") or kind not in _STREAMED:
            self.progress.advance(size)
        if count >= 0:
            self.diag.files.append((path, kind, count))

    def _session_workers(self, path: str) -> Callable[[Any, Any], str | None]:
        """The worker of a session record of ``path`` from its rank and role (``None``: left out)."""
        label = file_label(path)

        def worker_of(rank: Any, role: Any) -> str | None:
            if rank is not None:
                worker = self.worker(worker_label(rank, role), rank=rank, role=role or None)
            else:
                worker = self.worker(label)  # no integer rank: the file's worker
            if self.data.ranks is not None and not self.allowed(worker):
                return None
            return worker

        return worker_of

    def _request_events(self, path: str, on_read: Callable[[int], None] | None) -> int:
        requests = self.data.requests

        def add(rid: Any, event: tuple) -> None:
            events = requests.get(rid)
            if events is None:
                requests[rid] = [event]
            else:
                events.append(event)

        count, missing_id = read_request_events(path, self.limits, self, add, self.names, on_read)
        if missing_id:
            self.diag.warn(f"{path}: {missing_id} request events without a request_id skipped")
        return count

    def _chrome_events(self, path: str, events: Iterable[dict[str, Any]] | None) -> int:
        """Chrome trace events: of a JSON lines file (``events`` None) or of a document."""
        reader = ChromeEventReader(path, self, self._keep)
        if events is None:
            for lineno, event in json_objects(path, self.limits, self, SKIP_PREFIXES,
                                              self.progress.callback(path)):
                problem = reader.feed(event)
                if problem:
                    self.diag.bad_line(path, lineno, problem)
        else:
            for index, event in enumerate(events):
                problem = reader.feed(event)
                if problem:
                    self.diag.bad_line(path, 0, f"event {index}: {problem}")
        left = reader.open_spans()
        if left:
            self.diag.open_spans += left
            self.diag.warn(f"{path}: {left} 'B' events never ended: reported as open spans")
        return reader.count

    def _otlp(self, path: str) -> int:
        otlp = OtlpReader()
        whole, request = pretty_printed_request(path, self.limits)
        if whole:
            if type(request) is not dict:
                raise ValueError("not a JSON object")
            try:
                spans = otlp.spans(request)
            except (TypeError, KeyError, AttributeError) as exc:
                raise ValueError(f"not an OTLP/JSON trace request: {exc!r}") from None
            return self._otlp_spans(spans, path, 0)
        count = 0
        for lineno, request in json_objects(path, self.limits, self, on_read=self.progress.callback(path)):
            if not is_trace_request(request):
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
        names = self.names
        for index, span in enumerate(spans):
            problem = span_problem(span, thorough=True)
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
            if self._keep is not None and not self._keep(args):
                continue
            args[keys.TRACE_ARG_TRACE_ID] = trace_text(span.context.trace_id)  # as Chrome trace events keep it
            parent = span.parent
            events = None
            if span.events:
                events = [(e.name, e.timestamp / 1e9, dict(e.attributes or {})) for e in span.events]
                for name, ts, attrs in events:
                    self.data.instants.append((label, name, ts, attrs))
            self.data.spans.append(SpanRow(
                names.setdefault(span.name, span.name), (span.start_time or 0) / 1e9,
                max(0, (span.end_time or span.start_time) - span.start_time) / 1e9,
                f"{span.context.span_id:016x}",
                f"{parent.span_id:016x}" if parent is not None else None,
                label, args.get(keys.THREAD_ID), args, events))
            count += 1
        return count


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
    # Every row, made as it is read (the parsing workers send them back whole): the quickest
    # way to have all of them; the views build their columns from them when asked.
    return load_run(inputs, steps=steps, ranks=ranks, align_clocks=align_clocks, progress=progress, limits=limits,
                    columns=False)


def load_run(inputs: str | Sequence[str], *, steps: Any = None, ranks: Any = None,
             align_clocks: bool = True, progress: bool | None = None,
             limits: InputLimits | None = None, every_row: bool = True, columns: bool = True) -> RunData:
    """:func:`load`, the sessions gathered as the views' columns while they are read
    (``columns``; else as rows); ``every_row`` false: the sessions are read for the report
    views alone, which show only a few of them one by one (the slowest, the first, the open
    ones): only those can be read back from ``data.sessions`` (what the others were shown
    with is not kept, a large run then takes less memory and time)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [os.fspath(inputs)]
    inputs = [os.fspath(i) for i in inputs]
    data = RunData(inputs=list(inputs), steps=parse_steps(steps), ranks=parse_ranks(ranks))
    files, missing = discover_inputs(inputs)
    # Run summaries (summary-r{rank}.json) found in a directory describe the run's
    # own bookkeeping, not its work: left out without a word.
    named = {os.path.realpath(i) for i in inputs}
    files = [p for p in files if os.path.realpath(p) in named or not is_run_summary(p)]
    data.diagnostics.missing.extend(missing)
    total = 0
    for path in files:
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    loader = _Loader(data, _Progress(0, False), frozenset(os.path.realpath(p) for p in inputs if os.path.isfile(p)),
                     limits, ("all" if every_row else "candidates") if columns or not every_row else "",
                     any(_holds_annotations(path, limits) for path in files))
    # Millions of small objects and no cycles: the cyclic collector would only
    # rescan them over and over while they are created.
    collecting = gc.isenabled()
    gc.disable()
    # Forked before the progress bar starts its thread.
    loader.pool = session_pool(total)
    bar = loader.progress = _Progress(total, progress)
    again = False
    try:
        for path in files:
            try:
                loader.read(path)
            except OSError as exc:
                data.diagnostics.unreadable.append((path, str(exc)))
        table = loader.table
        if table is not None and table.n and (data.spans or not table.exact) and not every_row:
            # Sessions matched with spans, or times that are not all floats (the views then read
            # the rows themselves): only every row kept can give them. Read again, keeping them.
            again = True
        elif table is not None and table.n:
            if data.spans:
                # Sessions are matched with their spans, and shifted with their worker's clock: as rows.
                data.sessions = [table.row(i) for i in range(table.n)]
            else:
                data.sessions = LazySessions(table)
        if not again:
            derive(data, loader.names)
            _align(data, align_clocks)
            scope_request_ids(data)
            for events in data.requests.values():
                events.sort(key=lambda e: e[0])
    finally:
        bar.close()
        if loader.pool is not None:
            loader.pool.shutdown(cancel_futures=True)
        if collecting:
            gc.enable()
    if again:
        return load_run(inputs, steps=steps, ranks=ranks, align_clocks=align_clocks, progress=progress,
                        limits=limits, every_row=True, columns=columns)
    return data
