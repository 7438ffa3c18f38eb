"""The exporter process: span encoding, session derivation and export off the training process.

Building SDK spans, deriving sessions, encoding Chrome events and OTLP
protobuf costs tens of microseconds of CPU per span, and in the training
process that work competes for the GIL with the training loop. In process
mode the export thread only turns finished spans into plain records
(:mod:`..recording.record`) and writes them in batches (:mod:`.wire`) to the stdin of
a child process running this module, which does everything else. If the
training process dies, the child reads end-of-file, writes what it has and
exits.

Frames on the pipe: one type byte, a 4-byte big-endian length, the payload.
``B``: a batch, ``(thread names, records)`` as :func:`.wire.dumps` writes it. ``F``: a flush request carrying an
8-byte sequence number. ``E``: the end of the run: an 8-byte sequence number and an
8-byte float deadline on ``time.monotonic()``'s clock (the system-wide monotonic
clock: both processes run on one host), so time the child spends before it reads
the frame (starting, or busy with earlier batches) is not given to it twice; the
child shuts its exporters down by then and sends nothing more (later ``B`` frames
are counted as dropped).

``F`` and ``E`` are acknowledged on stdout with the 8-byte sequence number, a
4-byte big-endian length and that many bytes of JSON: what the child has
written and sent so far (``ExportChain.stats()`` plus ``spans_in``, ``ended``,
``problems``, its ``guard`` counts, and ``file_bytes``, bytes appended per
file), which the training process keeps for the run summary. The child also
reports, with sequence number 0, once it is ready and after each ``B`` frame it
has processed (``batches`` counts them: its sign of progress, and numbers that
stay current should it be stopped before its end). Nothing of this is on the
training loop's path: a reader thread takes acknowledgements as they come, and
only ``save(force=True)`` and ``shutdown()`` wait for one.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import json
import marshal
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from ... import environment_variables as ev
from .. import diagnostics, guard
from ..recording.record import make_marshalable, span_count
from . import wire

CONFIG_ENV = "OTEL_RL_EXPORTER_CONFIG"
#: CPU priority of the exporter process relative to the training process.
EXPORTER_NICE = 10
#: Garbage-collector thresholds of the exporter process (the default is 700, 10, 10).
EXPORTER_GC_THRESHOLDS = (50_000, 20, 100)
#: glibc's malloc settings for the exporter process (mallopt(3), "Environment variables"),
#: where the environment does not set them. Each batch allocates and frees megabytes: by
#: default glibc gave its heap's top back to the kernel and served large buffers with fresh
#: mmaps, so every batch faulted its pages in again, zeroed (about 0.5 page faults a session,
#: 6 % of this process's CPU). Kept, the heap stays at a batch's peak size.
EXPORTER_MALLOC_ENV = {
    "MALLOC_TRIM_THRESHOLD_": str(256 << 20),
    "MALLOC_MMAP_THRESHOLD_": str(256 << 20),
    "MALLOC_TOP_PAD_": str(16 << 20),
}
#: Seconds between the exporter process's full collections (see :func:`export_batch`).
EXPORTER_FULL_COLLECT_S = 60.0
#: Records of a batch taken through the outputs at a time (see :func:`export_batch`).
EXPORT_SLICE = 128
_next_full_collect = time.monotonic() + EXPORTER_FULL_COLLECT_S
#: Of the training process's shutdown budget, what the child does not get for
#: its exporters: time to answer and exit before ``close`` stops waiting.
END_MARGIN_S = 0.3
#: The least time an exporter process that has not said it is ready yet gets
#: before it counts as stalled (an interpreter starting on a loaded machine).
STARTUP_GRACE_S = 30.0
#: How long ``close`` waits for a killed exporter process to be gone.
KILL_WAIT_S = 0.2
_HEADER = struct.Struct(">cI")
_SEQ = struct.Struct(">Q")
_ACK = struct.Struct(">QI")
#: The sequence number of reports that answer no request (ready, a batch processed).
_NO_SEQ = struct.pack(">Q", 0)
_END = struct.Struct(">Qd")


class ExporterProcess:
    """The training process's handle on its exporter process.

    Batches are encoded (:mod:`.wire`) on the export thread and written to the pipe by a
    writer thread of their own (the write blocks with the GIL released), so
    finished spans leave the training process's heap at once and wait, when the
    exporter is busy, as compact bytes bounded by ``max_pending_spans`` (the
    export thread takes no more off its queue than fits: :meth:`room`).
    Acknowledgements are read by a reader thread as they come, so a flush can
    be requested without waiting for it (:meth:`request_flush`) and waited for
    by those that must (:meth:`wait_ack`).

    A process that stops making progress with work outstanding for
    ``stall_s`` (stopped, or blocked on a stalled network filesystem) is
    :meth:`stalled`; the pipeline then :meth:`abandon`-s it and exports in the
    training process, as when it dies.
    """

    def __init__(self, settings: Any, resource_attributes: dict[str, Any],
                 max_pending_spans: int = 262_144, stall_s: float | None = None) -> None:
        settings_dict = dataclasses.asdict(settings)
        # The exporter process serves no control requests: keep the secret out
        # of its environment (readable in /proc by the same user).
        settings_dict["control_token"] = ""
        settings_dict["ranks"] = None  # decided here already (and a set is no JSON)
        self._config = json.dumps({"settings": settings_dict, "resource": resource_attributes})
        self.max_pending = max(1, max_pending_spans)
        self.stall_s = stall_s if stall_s is not None else settings.shutdown_timeout_ms / 1000.0
        self._proc: subprocess.Popen | None = None
        self.failed = False
        #: The child's numbers from its latest acknowledgement (``{}`` before the first).
        self.remote_stats: dict[str, Any] = {}
        #: Whether ``remote_stats`` came after the child shut its exporters down.
        self.final_stats = False
        #: Spans that never reached the exporter process, or that it never
        #: confirmed, when ``close`` ran out of time (the summary counts them).
        self.lost_at_exit = 0
        self.start()

    def start(self) -> None:
        """Starts the exporter process (and the threads that talk to it)."""
        self._init_state()
        self._spawn()

    def _init_state(self) -> None:
        self._proc = None
        self._cond = threading.Condition()
        self._spawn_lock = threading.Lock()
        self._pending: collections.deque[tuple[bytes, int] | None] = collections.deque()
        self._pending_spans = 0
        self._writing: tuple[bytes, int] | None = None
        #: Spans written into the pipe (the summary's count of what the child should have).
        self.shipped = 0
        self._seq = 0
        self._acked = -1  # the child acknowledges 0 once it is ready
        self._batches_written = 0
        self._batches_done = 0
        self._progress_at = time.monotonic()
        self._answered_at = 0.0  # when the latest acknowledgement was read
        self._ended = False
        self._closing = False
        self._writer: threading.Thread | None = None
        self._reader: threading.Thread | None = None

    def _spawn(self) -> None:
        with self._spawn_lock:
            if self._proc is not None or self._closing:
                return
            env = {**EXPORTER_MALLOC_ENV, **os.environ}
            env[CONFIG_ENV] = self._config
            # The child must not configure itself again on import, and serves no
            # control requests, so it does not get their token either.
            env.pop(ev.OTEL_RL_ENABLED, None)
            env.pop(ev.OTEL_RL_CONTROL_TOKEN, None)
            proc = subprocess.Popen(
                [sys.executable, "-m", "otel_rl._internal.export.child"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                # A session of its own: Ctrl-C or a SIGTERM sent to the training job's
                # process group reaches the trainer, which flushes through this
                # process; it ends when the trainer closes the pipe.
                start_new_session=True)
            with self._cond:
                self._progress_at = time.monotonic()
            self._writer = threading.Thread(target=self._write_loop, args=(proc,), name="otel_rl-ship",
                                            daemon=True)
            self._reader = threading.Thread(target=self._read_loop, args=(proc,),
                                            name="otel_rl-ship-ack", daemon=True)
            self._proc = proc
            self._writer.start()
            self._reader.start()

    def after_fork_in_child(self) -> None:
        """In a forked child: lets go of the parent's pipe (the child exports
        in-process). Kept open, it would delay the exporter's end-of-file, and
        writing to it would interleave with the parent."""
        proc, self._proc = self._proc, None
        for stream in (proc.stdin, proc.stdout) if proc else ():
            try:
                os.close(stream.fileno())
            except (OSError, ValueError):
                pass
        self._init_state()
        self._closing = True  # and never starts one

    # --- export thread side ------------------------------------------------------------
    def room(self) -> int:
        """Spans the backlog takes before it reaches ``max_pending_spans``."""
        return self.max_pending - self._pending_spans

    def wait_room(self, timeout_s: float) -> bool:
        """Waits until the backlog has room or the process is gone; ``False`` on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.failed or self._pending_spans < self.max_pending,
                                       timeout_s)

    def send(self, records: list[tuple], thread_names: dict[int, str], n: int) -> bool:
        """Queues one batch of ``n`` spans (bundled phases included) for the pipe;
        ``False`` once the exporter process is gone."""
        if self.failed:
            return False
        try:
            payload = wire.dumps(thread_names, records)
        except ValueError:
            # A payload marshal cannot hold (a tensor, an enum): summarise it.
            records = [safe for safe in map(_safe, records) if safe is not None]
            n = span_count(records)
            payload = wire.dumps(thread_names, records)
        self._queue_frame(_HEADER.pack(b"B", len(payload)) + payload, n)
        return True

    def request_flush(self) -> int | None:
        """Asks the exporter process to write its files and start its network
        sends after everything queued so far; returns the sequence number its
        acknowledgement will carry (see :meth:`wait_ack`), ``None`` when there
        is no process any more. Does not wait."""
        if self._proc is None:
            return None
        with self._cond:
            self._seq += 1
            seq = self._seq
        self._queue_frame(_HEADER.pack(b"F", _SEQ.size) + _SEQ.pack(seq), 0)
        return seq

    def _queue_frame(self, frame: bytes, n: int) -> None:
        with self._cond:
            if not self._outstanding():
                self._progress_at = time.monotonic()  # the clock of stalled() starts now
            self._pending.append((frame, n))
            self._pending_spans += n
            self._cond.notify_all()

    def _outstanding(self) -> bool:
        return (bool(self._pending) or self._writing is not None or self._acked < self._seq
                or self._batches_done < self._batches_written)

    def take_unsent(self) -> list[tuple]:
        """After a failure: the records that never reached the exporter process."""
        with self._cond:
            frames = ([self._writing] if self._writing else []) + [f for f in self._pending if f]
            self._pending.clear()
            self._writing = None
            self._pending_spans = 0
        records: list[tuple] = []
        for frame, n in frames:
            if n:
                records.extend(wire.loads(frame[_HEADER.size:])[1])
        return records

    def stalled(self) -> bool:
        """Whether work has been outstanding with no progress (a batch processed,
        a request acknowledged) for ``stall_s``; more before the process has said
        it is ready, since starting an interpreter on a loaded machine can take
        seconds. A write that went into the pipe's buffer is no progress: a
        stopped process does not read it."""
        with self._cond:
            if self.failed or self._closing or not self._outstanding():
                return False
            limit = self.stall_s if self._acked >= 0 else max(self.stall_s, STARTUP_GRACE_S)
            return time.monotonic() - self._progress_at > limit

    def silent_since(self, since: float) -> bool:
        """Whether a process that said it was ready has not answered anything
        (a batch, a request) since ``since``, with work outstanding."""
        with self._cond:
            return (not self.failed and self._acked >= 0 and self._outstanding()
                    and self._answered_at < since)

    def abandon(self) -> None:
        """Gives up on a process that stopped making progress: it is killed
        (a stopped one too, so it never writes again) and export goes on here."""
        with self._cond:
            if self.failed:
                return
            self.failed = True
            self._cond.notify_all()
        guard.report(diagnostics.EXPORTER_PROCESS_LOST, "the exporter process made no progress for %.1fs "
                     "(stopped, or blocked on a stalled filesystem); stopped it and exporting in "
                     "the training process from now on", self.stall_s)
        proc = self._proc
        if proc is not None:
            try:
                proc.kill()
            except OSError:
                pass

    # --- writer and reader threads -------------------------------------------------------
    def _write_loop(self, proc: subprocess.Popen) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                item = self._pending.popleft()
                self._writing = item
            if item is None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
                return
            try:
                proc.stdin.write(item[0])
                proc.stdin.flush()
            except (OSError, ValueError) as exc:
                self._lost(exc)
                return
            with self._cond:
                if self._writing is item:  # not taken back by take_unsent meanwhile
                    self._writing = None
                    self.shipped += item[1]
                    self._pending_spans -= item[1]
                    if item[0][:1] == b"B":
                        self._batches_written += 1
                self._cond.notify_all()

    def _read_loop(self, proc: subprocess.Popen) -> None:
        """Reads acknowledgements until end-of-file, keeping the latest numbers."""
        fd = proc.stdout.fileno()
        buf = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:  # end-of-file: the exporter process is gone
                self._lost(EOFError("exporter process exited"))
                return
            buf += chunk
            while len(buf) >= _ACK.size:
                got, length = _ACK.unpack_from(buf)
                if len(buf) < _ACK.size + length:
                    break
                body = buf[_ACK.size:_ACK.size + length]
                buf = buf[_ACK.size + length:]
                try:
                    stats = json.loads(body)
                except ValueError:
                    guard.report(diagnostics.INTERNAL_ERROR, "unreadable exporter acknowledgement")
                    stats = None
                with self._cond:
                    if stats is not None:
                        self.remote_stats = stats
                        self._batches_done = int(stats.get("batches", 0))
                        if stats.get("ended"):
                            self.final_stats = True
                    self._acked = max(self._acked, got)
                    self._progress_at = self._answered_at = time.monotonic()
                    self._cond.notify_all()

    def _lost(self, exc: BaseException) -> None:
        with self._cond:
            if self.failed or self._closing:
                self._cond.notify_all()
                return
            self.failed = True
            self._cond.notify_all()
        guard.report(diagnostics.EXPORTER_PROCESS_LOST, "the exporter process is gone (%r); "
                     "exporting in the training process from now on", exc)

    # --- caller side ------------------------------------------------------------------------
    def wait_ack(self, seq: int, timeout_s: float) -> bool:
        """Waits until the acknowledgement of ``seq`` has been read; ``False`` on
        timeout or when the process is gone."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._acked >= seq or self.failed, timeout_s)
            return ok and self._acked >= seq

    def flush(self, timeout_s: float) -> bool:
        """Waits until the exporter process has written everything sent so far."""
        if self.failed or self._ended:
            return False
        seq = self.request_flush()
        if seq is None or self.wait_ack(seq, timeout_s):
            return True
        if not self.failed:
            guard.report(diagnostics.FLUSH_TIMEOUT, "the exporter process did not flush within %.1fs", timeout_s)
        return False

    def close(self, timeout_s: float) -> None:
        with self._spawn_lock:
            proc = self._proc
            self._closing = proc is None  # and none is started from now on
        if proc is None:
            return
        end = time.monotonic() + timeout_s
        if not self.failed and not self._ended:
            # The child's final numbers come with the end's acknowledgement; it
            # gets the time left, less a margin for the answer and its exit.
            self._ended = True
            with self._cond:
                self._seq += 1
                seq = self._seq
            self._queue_frame(_HEADER.pack(b"E", _END.size) + _END.pack(seq, end - END_MARGIN_S), 0)
            if self.wait_ack(seq, max(0.0, end - time.monotonic())):
                self.final_stats = True
        with self._cond:
            self._closing = True
            self._pending.append(None)
            self._cond.notify_all()
        if self._writer is not None:
            self._writer.join(max(0.0, end - time.monotonic()))
        try:
            proc.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            if not self.failed:
                guard.report(diagnostics.SHUTDOWN_TIMEOUT, "the exporter process was still exporting when "
                             "shutdown_timeout_ms ran out (%.1fs were left for it); stopped",
                             timeout_s)
            proc.kill()
            try:
                # Not forever: a process blocked in the kernel (a stalled
                # network filesystem) dies only when its write returns.
                proc.wait(KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        if not self.final_stats and not self.failed:
            # Stopped at the bound: what it never received, and what it
            # received but never confirmed. (After a failure the pipeline
            # exports the unsent here and the summary counts the unconfirmed.)
            with self._cond:
                unsent = self._pending_spans  # the frame being written included
                self._pending.clear()
                self._pending_spans = 0
                self._writing = None
            unconfirmed = self.shipped - int((self.remote_stats or {}).get("spans_in", 0))
            self.lost_at_exit = unsent + max(0, unconfirmed)
        if self._reader is not None:
            self._reader.join(max(0.0, end - time.monotonic()))
        if proc.stdout is not None:
            try:
                proc.stdout.close()
            except OSError:
                pass
        self._proc = None


def _safe(record: tuple) -> tuple | None:
    """``record`` if marshal can hold it, else with its payloads summarised;
    ``None`` (counted) if even that fails."""
    try:
        marshal.dumps(record)
        return record
    except ValueError:
        pass
    try:
        record = make_marshalable(record)
        marshal.dumps(record)
        return record
    except Exception as exc:  # noqa: BLE001 - one bad span must not stop the export thread
        guard.report(diagnostics.EXPORT_ERROR, "a span could not be shipped: %r", exc)
        return None


def export_batch(on_records: Any, chain: Any, thread_names: dict[int, str], payload: bytes) -> int:
    """Decodes one batch as the pipe carries it, hands its records to the outputs,
    then ends the batch; returns its span count. The exporter process's step: it
    manages that process's garbage collector.

    The collector is paused meanwhile: nearly every object the batch allocates (records,
    attribute dicts, lines) is freed before it ends, and young collections in between
    traversed them all while alive. What survives (pending sessions, placement state,
    freed by their counts as the maps move on) holds no cycles, yet young and middle
    collections traversed it in turn (about 4 % of this process's CPU on sessions): it is
    frozen after each batch, and a full collection every ``EXPORTER_FULL_COLLECT_S``
    seconds reclaims any cycle something else made.

    The records go through the outputs ``EXPORT_SLICE`` at a time, each slice decoded
    where it is taken (``wire.reader``) and encoded for the trace file as soon as it is
    derived (``chain.after_slice``); the batch is written once, with one marker line
    (``chain.after_batch``). A whole batch (thousands of sessions) decoded, or derived,
    before the next step kept it all alive and out of the core's cache in between
    (``bench.profile_exporter``: an eighth of this process's CPU on sessions for the
    derivation, 4-9 % for the decoding).
    """
    global _next_full_collect
    gc.disable()
    try:
        batch = wire.reader(payload)
        thread_names.update(batch.names)
        spans, records = 0, batch.take(EXPORT_SLICE)
        while True:  # an empty batch too goes through once
            on_records(records)  # never raises
            chain.after_slice()
            spans += wire.survey(records)[1]
            if not (records := batch.take(EXPORT_SLICE)):
                break
        chain.after_batch()
        return spans
    finally:
        now = time.monotonic()
        if now >= _next_full_collect:
            _next_full_collect = now + EXPORTER_FULL_COLLECT_S
            gc.unfreeze()
            gc.collect()
        gc.freeze()
        gc.enable()


def _read_exact(stream: Any, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main() -> int:
    """Entry point of the child: read frames until end-of-file, export, exit."""
    # Ctrl-C reaches the whole process group; the exporter must outlive the
    # trainer's handling of it and finish on end-of-file instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Likewise SIGTERM sent to the whole group (Slurm, a launcher stopping a job):
    # the trainer flushes on it and closes the pipe; end-of-file ends this process.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Training comes first: when cores are scarce the scheduler should run the
    # trainer's threads before this process (its backlog is bounded and counted).
    try:
        os.nice(EXPORTER_NICE)
    except (AttributeError, OSError):
        pass
    from opentelemetry.sdk.resources import Resource

    from ..config import Settings
    from .chain import ExportChain
    from .record_sink import RecordSink
    from ..encode.readable import ReadableBuilder

    config = json.loads(os.environ[CONFIG_ENV])
    settings_dict = config["settings"]
    if settings_dict.get("profile_steps") is not None:
        settings_dict["profile_steps"] = tuple(settings_dict["profile_steps"])
    settings = Settings(**settings_dict)
    from .. import files
    from ..recording import privacy

    files.set_mode(settings.file_mode)
    privacy.configure(settings)
    resource = Resource(config["resource"])
    chain = ExportChain(settings, resource, os.environ)
    builder = ReadableBuilder(resource)
    on_records = RecordSink(chain, builder).on_records
    # Each batch allocates thousands of short-lived objects and keeps them
    # across many young collections, which made the default thresholds scan
    # them again and again (about a third of this process's CPU). The modules
    # imported so far never become garbage: freeze them out of every scan.
    gc.freeze()
    gc.set_threshold(*EXPORTER_GC_THRESHOLDS)
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    timeout_s = settings.shutdown_timeout_ms / 1000.0
    ended = False
    spans_in = 0

    answering = True

    def acknowledge(seq: bytes) -> None:
        nonlocal answering
        from .jsonl import bytes_written

        if not answering:
            return
        stats = chain.stats()
        stats["spans_in"] = spans_in
        stats["batches"] = batches
        stats["ended"] = ended
        stats["problems"] = guard.diagnostics()
        stats["file_bytes"] = bytes_written()
        body = json.dumps(stats).encode()
        try:
            stdout.write(_ACK.pack(_SEQ.unpack(seq)[0], len(body)) + body)
            stdout.flush()
        except OSError:
            # The training process is gone (SIGKILL): write what it sent, then exit on end-of-file.
            answering = False

    batches = 0

    def progress() -> None:
        nonlocal batches
        batches += 1
        acknowledge(_NO_SEQ)

    acknowledge(_NO_SEQ)  # ready: the training process starts counting stalls from here
    while True:
        header = _read_exact(stdin, _HEADER.size)
        if header is None:
            break
        kind, length = _HEADER.unpack(header)
        payload = _read_exact(stdin, length)
        if payload is None:
            break
        if kind == b"B" and ended:
            guard.count(diagnostics.SPANS_DROPPED_AFTER_END, span_count(wire.loads(payload)[1]))
            progress()
        elif kind == b"B":
            spans_in += export_batch(on_records, chain, builder.thread_names, payload)
            progress()
        elif kind == b"F":
            if not ended:
                chain.flush(timeout_s)
            acknowledge(payload[:_SEQ.size])
        elif kind == b"E":
            seq, deadline = _END.unpack(payload)
            if not ended:
                ended = True
                chain.shutdown(max(0.0, deadline - time.monotonic()))
            acknowledge(_SEQ.pack(seq))
    if not ended:
        chain.shutdown(timeout_s)
    return 0
