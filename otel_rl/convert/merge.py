"""The merge: input files read in order, each event written once with a pid no other file uses."""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

import orjson

from .._internal.encode.chrome_trace import BATCH_MARKER, ChromeTraceEncoder
from .._internal.encode.perfetto.native import Unsupported
from .._internal.read.chrome_json import document_events, read_document
from .._internal.read.discovery import discover_inputs
from .._internal.read.limits import DEFAULT_LIMITS, InputLimits, long_line_message
from .._internal.read.lines import BLOCK, LONG, iter_lines, line_blocks
from .._internal.read.otlp_json import OtlpReader, is_trace_request, pretty_printed_request, span_problem
from .._internal.read.pool import Done, process_pool
from .._internal.read.sniff import record_kind, sniff_file
from .._internal.read.source import open_input
from .._internal.read.torch_trace import joined_traces_file
from .annotations import SessionNotes
from .fast_path import chunk_end, scan_chrome_lines, with_pid
from .output import TraceOutput
from .native_inputs import find_native
from .parallel import auto_workers, convert_in_parallel
from .perfetto_output import PerfettoOutput, is_perfetto_name
from .stats import ConvertStats

__all__ = ["FORMATS", "OTLP_SOURCE", "REMAP_PID_BASE", "Merger", "convert", "output_format"]

#: Output formats: Chrome trace JSON, or Perfetto's native protobuf.
FORMATS = ("chrome", "perfetto")

#: Events serialised in Python are written this many at a time.
WRITE_EVERY = 8192
#: Remapped integer pids start above every real Linux pid and every pid the
#: encoder synthesises, and stay below 2**32 (Perfetto's limit).
REMAP_PID_BASE = 1 << 23
#: The source that owns the pids of OTLP spans (one encoder for all OTLP inputs).
OTLP_SOURCE = "<otlp>"

class _Encoded:
    """A chunk the compiled Perfetto encoder reads when it is its turn to be written."""

    __slots__ = ("out", "data", "end", "mapping")

    def __init__(self, out: PerfettoOutput, data: bytes, end: int, mapping: dict[Any, Any]) -> None:
        self.out, self.data, self.end, self.mapping = out, data, end, mapping

    def result(self) -> tuple[bytes, int, int, list, list]:
        return self.out.encode_lines(self.data, self.end, self.mapping)


class Merger:
    """Merges input files into one :class:`TraceOutput`, giving each process a pid of its own."""

    def __init__(self, output: TraceOutput | PerfettoOutput, stats: ConvertStats, workers: int = 0,
                 named: frozenset[str] = frozenset(), limits: InputLimits | None = None) -> None:
        self.out = output
        self.stats = stats
        self.limits = limits or DEFAULT_LIMITS
        self._named = named  # real paths of the files named one by one
        self._pool = process_pool(workers) if workers > 0 else None
        # Chunks in flight, written strictly in submission order.
        self._pending: collections.deque[tuple] = collections.deque()
        self._max_in_flight = 2 * workers + 1 if self._pool is not None else 0
        # pid -> the source that owns it; (source, old pid) -> pid written
        self._owner: dict[Any, str] = {}
        self._mapping: dict[tuple[str, Any], Any] = {}
        self._next_pid = REMAP_PID_BASE
        self._encoder: ChromeTraceEncoder | None = None
        self._otlp = OtlpReader()
        self._sources: dict[str, str] = {}  # real path -> input path, for torch traces' ranks
        self.notes = SessionNotes()  # consume / annotation lines, joined into their session spans
        self.annotation_files: list[str] = []

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
            parts.append(dumps(event) if not self.notes.args else self.notes.join(dumps(event)))
            if len(parts) >= WRITE_EVERY:
                self.out.write(parts)
                parts = []
        self.out.write(parts)

    # files -------------------------------------------------------------------------------------
    def run(self, files: Sequence[str]) -> None:
        """Converts ``files`` in order, then releases what the OTLP encoder holds."""
        for path, kind, mapping in self.plan(files):
            self.convert_file(path, kind, mapping)
        self.finish()
        self.stats.annotated = self.notes.joined

    def plan(self, files: Sequence[str]) -> list[tuple[str, str, dict[Any, Any]]]:
        """Sniffs ``files`` and claims each one's main pid, in order; reads annotation files.

        Returns:
            ``(path, kind, pid mapping)`` of every file to convert, in order.
        """
        self._sources = {os.path.realpath(p): p for p in files}
        plan = []
        for path in files:
            try:
                kind, head = self._sniff(path)
            except (OSError, EOFError, ValueError) as exc:
                kind, head = f"unreadable: {exc}", None
            if head is not None and kind.startswith("not a trace file") and record_kind(head) == "annotations":
                # Read before any trace file: what they say of a session joins its span's args.
                self.notes.read(path, self.limits, self.stats)
                self.annotation_files.append(path)
                continue
            mapping: dict[Any, Any] = {}
            if kind == "chrome-jsonl":
                # Each file's main pid is claimed before any chunk is parsed: workers
                # then know how to map nearly every line, and which file keeps a
                # contested pid follows the file order, with or without workers.
                pid = head.get("pid")
                if type(pid) is int or type(pid) is str:
                    mapping[pid] = self._claim(path, pid)
            plan.append((path, kind, mapping))
        return plan

    def claims(self) -> dict[str, Any]:
        """What :meth:`plan` decided, for workers converting parts of it (picklable)."""
        return {"owner": dict(self._owner), "mapping": dict(self._mapping), "sources": dict(self._sources),
                "named": self._named, "annotation_files": list(self.annotation_files)}

    def adopt(self, claims: dict[str, Any], first_pid: int) -> None:
        """Takes the pids another merger's plan claimed (:meth:`claims`), remapping any
        other pid from ``first_pid`` up: a worker converting part of that plan."""
        self._owner = dict(claims["owner"])
        self._mapping = dict(claims["mapping"])
        self._sources = dict(claims["sources"])
        self._named = claims["named"]
        self._next_pid = first_pid

    def convert_file(self, path: str, kind: str, mapping: dict[Any, Any]) -> None:
        """Writes the events of one file of ``kind`` (as :func:`sniff_file` says it); a file that
        cannot be read is skipped and reported, keeping what it gave before."""
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
                self.stats.bad_line(path, lineno, message)

        return iter_lines(path, limits=self.limits, on_skip=skipped)

    def _bad_line(self, path: str, lineno: int, unterminated: bool, message: str) -> None:
        if unterminated:
            self.stats.skipped_truncated += 1
            self.stats.warnings.append(f"{path}:{lineno}: incomplete last line skipped")
        else:
            self.stats.bad_line(path, lineno, message)

    def _chrome_jsonl(self, path: str, mapping: dict[Any, Any]) -> None:
        """Sends the file's complete lines, a chunk at a time, to be checked and copied.

        ``mapping`` already holds the file's main pid, which covers every line
        of an otel_rl file; pids seen later are claimed as their chunks are written.
        """
        lines_done = [0]  # lines of this file written so far, for line numbers
        data = b""  # whole lines not submitted yet
        tail = b""
        # The compiled Perfetto encoder skips batch markers and checks no checksum: each
        # block of whole lines goes to it as read, not joined to the next up to a marker.
        direct = self._compiled()
        with open_input(path, self.limits) as f:
            for kind, payload in line_blocks(f, self.limits.max_line_bytes, views=direct):
                if kind == BLOCK and direct:
                    self._submit(path, payload, lines_done, mapping, len(payload))
                elif kind == BLOCK:
                    data = data + payload if data else payload
                    cut = chunk_end(data)
                    if cut:
                        self._submit(path, data, lines_done, mapping, cut)
                        data = data[cut:]
                elif kind == LONG:
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

    def _compiled(self) -> bool:
        """Whether the compiled Perfetto encoder reads the lines (in this process, as they come)."""
        return self._pool is None and getattr(self.out, "compiled", False) and not self.notes.args

    def _submit(self, path: str, data: bytes, lines_done: list[int],
                mapping: dict[Any, Any], end: int) -> None:
        """Queues ``data[:end]`` (whole lines) to be checked and written in order."""
        if self._compiled():
            # The compiled Perfetto encoder reads the lines itself, when they are written (in order).
            job: Any = _Encoded(self.out, data, end, mapping)
        elif self._pool is None:
            job = Done(scan_chrome_lines(data, mapping, end))
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
                self.stats.bad_line(path, base + 1, long_line_message(payload, self.limits))
                continue
            blob, count, lines, unresolved, bad = payload.result()
            lines_done[0] = base + lines
            self.out.write_blob(self.notes.join(blob) if self.notes.args else blob, count)
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
            parts.append(line if new == pid else with_pid(line, pid, new))
        self.out.write([self.notes.join(p) for p in parts] if self.notes.args else parts)

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
        self.out.write([self.notes.join(line)])

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
            problem = span_problem(span)
            if problem:
                self.stats.bad_line(path, lineno, f"span {index}: {problem}")
            else:
                spans.append(span)
        self.stats.spans += len(spans)
        if spans:
            self._write_events(OTLP_SOURCE, self._encoder_for_otlp().encode(spans))

    def _otlp_jsonl(self, path: str) -> None:
        whole, request = pretty_printed_request(path, self.limits)
        if whole:
            self._otlp_request(request, path, 0)
            return
        for lineno, line, unterminated in self._lines(path):
            if not line.strip():
                continue
            try:
                request = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                self._bad_line(path, lineno, unterminated, str(exc))
                continue
            if isinstance(request, dict) and not is_trace_request(request):
                continue  # metrics or logs written to the same file by a collector
            try:
                self._otlp_request(request, path, lineno)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                self.stats.bad_line(path, lineno, f"not an OTLP/JSON trace request: {exc!r}")

    def _document(self, path: str) -> None:
        doc = read_document(path, self.limits)
        self._write_events(self._joined_source(path, doc), document_events(doc))  # type: ignore[arg-type]

    def _joined_source(self, path: str, doc: Any) -> str:
        """A torch trace otel_rl wrote names its rank's trace file: its pids are
        claimed as that file's, so the kernels land in the rank's process instead
        of a remapped copy of it."""
        joined = joined_traces_file(path, doc)
        if joined is None:
            return path
        return self._sources.get(os.path.realpath(joined), path)

    def finish(self) -> None:
        """Writes what is still in flight, and what the OTLP encoder holds."""
        self._drain(0)
        if self._encoder is not None:
            self._write_events(OTLP_SOURCE, self._encoder.finish())

    def close(self) -> None:
        """Stops the worker processes."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


def _join_native(paths: list[str], out: TraceOutput | PerfettoOutput, stats: ConvertStats,
                 limits: InputLimits) -> None:
    """Appends native per-rank traces to a native output (their packets, copied); a JSON
    output cannot hold them: they are reported as skipped."""
    for path in paths:
        if not isinstance(out, PerfettoOutput):
            stats.skipped_files.append((path, "a native Perfetto trace: it can only be merged into a "
                                              ".pftrace output"))
            continue
        try:
            packets, problem = out.append_native(path, limits)
        except OSError as exc:
            stats.skipped_files.append((path, f"unreadable: {exc}"))
            continue
        if problem:
            stats.cut_short.append((path, problem))
        if packets:
            stats.files += 1
            stats.events += packets


def output_format(output: str, fmt: str | None = None) -> str:
    """The format to write: ``fmt`` when given, else ``perfetto`` for a ``.pftrace`` name.

    Raises:
        ValueError: ``fmt`` is not one of :data:`FORMATS`.
    """
    if fmt is None:
        return "perfetto" if is_perfetto_name(output) else "chrome"
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return fmt


def convert(inputs: Sequence[str], output: str, *, workers: int | None = 0,
            limits: InputLimits | None = None, fmt: str | None = None) -> ConvertStats:
    """Merges trace files into one trace: Chrome trace JSON, or Perfetto's native format.

    Args:
        inputs: Files, directories (searched recursively for ``*.jsonl``,
            ``*.json`` and their ``.gz`` forms) and glob patterns.
        output: The ``.json`` or ``.json.gz`` file to write (replaced atomically
            once the conversion is complete), or ``"-"`` for standard output.
        workers: Processes that parse Chrome JSON lines which carry no batch
            checksum (files not written by otel_rl, such as AReaL's), for large
            inputs on machines with idle cores; 0 parses in this process.
            Files written by otel_rl are checked by checksum, which is faster
            than handing them to another process. For the native format, the
            processes encode whole input files, one each (:mod:`.parallel`).
            ``None`` chooses: for the native format, a worker per core (at most
            one per file) once the JSON lines inputs reach 32 MiB
            (:func:`~.parallel.auto_workers`); otherwise 0.
        limits: Bounds on what one input may cost to read (line length,
            decompressed size; :class:`InputLimits`): what goes past them is
            skipped and reported in the returned stats.
        fmt: ``"chrome"`` (a ``{"traceEvents": [...]}`` document) or ``"perfetto"``
            (``TracePacket`` protobuf: a track per session, counter tracks, flows,
            interned strings); by default ``perfetto`` when ``output`` ends in
            ``.pftrace`` (or ``.pftrace.gz``), else ``chrome``.

    Returns:
        What was converted and what was skipped, and why.

    Raises:
        OSError: The output cannot be written.
        ValueError: ``fmt`` names no format.
    """
    fmt = output_format(output, fmt)
    started = time.perf_counter()
    stats = ConvertStats(output=output)
    to_stdout = output == "-"
    # A regular file is written next to its final name and renamed into place, so
    # a failed run never leaves half a trace; anything else (stdout, a pipe, a
    # device) is written directly and must never be renamed over.
    atomic = not to_stdout and (not os.path.exists(output) or os.path.isfile(output))
    tmp = f"{output}.tmp-{os.getpid()}" if atomic else None
    files, missing = discover_inputs(inputs, exclude=[p for p in (output, tmp) if p and not to_stdout])
    native = find_native(inputs, exclude=[p for p in (output, tmp) if p and not to_stdout])
    files = [p for p in files if p not in native]
    if workers is None:
        workers = auto_workers(files) if fmt == "perfetto" and not to_stdout else 0
    stats.skipped_files.extend((item, "no such file") for item in missing)
    if to_stdout:
        raw: IO[bytes] = sys.stdout.buffer
    else:
        directory = os.path.dirname(output)
        if directory:
            os.makedirs(directory, exist_ok=True)
        raw = open(tmp or output, "wb", buffering=1 << 20)
    # The compiled Perfetto encoder only writes a file that can be rewound: see PerfettoOutput.restart.
    out: TraceOutput | PerfettoOutput = (PerfettoOutput(raw, output, compiled=not to_stdout and raw.seekable())
                                         if fmt == "perfetto" else TraceOutput(raw, output))
    converter = None
    try:
        named = frozenset(os.path.realpath(p) for p in inputs if os.path.isfile(p))
        skipped = 0
        if isinstance(out, PerfettoOutput) and workers > 0 and len(files) > 1:
            # The native format is encoded file by file on the workers (see .parallel).
            planner = Merger(None, stats, 0, named, limits)  # type: ignore[arg-type]
            skipped = convert_in_parallel(planner, files, out, stats, workers, limits or DEFAULT_LIMITS,
                                          tmp or os.path.join(tempfile.gettempdir(), "otel-rl-convert"))
        else:
            try:
                converter = Merger(out, stats, 0 if isinstance(out, PerfettoOutput) else workers, named, limits)
                converter.run(files)
            except Unsupported:
                # Input the compiled encoder does not mirror exactly: all of it again, in Python.
                converter.close()
                out = out.restart()  # type: ignore[union-attr]
                stats = ConvertStats(output=output)
                stats.skipped_files.extend((item, "no such file") for item in missing)
                converter = Merger(out, stats, 0, named, limits)
                converter.run(files)
            stats.events = out.events
        _join_native(native, out, stats, limits or DEFAULT_LIMITS)
        if isinstance(out, PerfettoOutput):
            skipped += out.encoder.skipped
        if skipped:
            stats.warnings.append(f"{skipped} events left out of the native trace "
                                  "(no timestamp, or a kind of event it cannot hold)")
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
