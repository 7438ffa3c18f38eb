"""The exporter process: span encoding, session derivation and export off the training process.

Building SDK spans, deriving sessions, encoding Chrome events and OTLP
protobuf costs tens of microseconds of CPU per span, and in the training
process that work competes for the GIL with the training loop. In process
mode the export thread only turns finished spans into plain records
(:mod:`.records`) and writes them, ``marshal``-ed in batches, to the stdin of
a child process running this module, which does everything else. If the
training process dies, the child reads end-of-file, writes what it has and
exits.

Frames on the pipe: one type byte, a 4-byte big-endian length, the payload.
``B``: a marshal-ed pair ``(thread names, records)``. ``F``: a flush request carrying an
8-byte sequence number. ``E``: the end of the run: an 8-byte sequence number and a
4-byte budget in milliseconds; the child shuts its exporters down within the
budget and sends nothing more (later ``B`` frames are counted as dropped).

``F`` and ``E`` are acknowledged on stdout with the 8-byte sequence number, a
4-byte big-endian length and that many bytes of JSON: what the child has
written and sent so far (``ExportChain.stats()`` plus ``problems``, its
``guard`` counts, and ``file_bytes``, bytes appended per file), which the
training process keeps for the run summary. Nothing of this is on the
training loop's path: acknowledgements are read by ``flush``/``close`` only.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import json
import marshal
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from .. import environment_variables as ev
from . import guard, keys
from .records import make_marshalable, span_count

CONFIG_ENV = "OTEL_RL_EXPORTER_CONFIG"
#: CPU priority of the exporter process relative to the training process.
EXPORTER_NICE = 10
#: Garbage-collector thresholds of the exporter process (the default is 700, 10, 10).
EXPORTER_GC_THRESHOLDS = (50_000, 20, 100)
#: Of the training process's shutdown budget, what the child does not get for
#: its exporters: time to answer and exit before ``close`` stops waiting.
END_MARGIN_S = 0.3
_HEADER = struct.Struct(">cI")
_SEQ = struct.Struct(">Q")
_ACK = struct.Struct(">QI")
_END = struct.Struct(">QI")


class ExporterProcess:
    """The training process's handle on its exporter process.

    Batches are marshal-ed on the export thread and written to the pipe by a
    writer thread of their own (the write blocks with the GIL released), so
    finished spans leave the training process's heap at once and wait, when the
    exporter is busy, as compact bytes bounded by ``max_pending_spans``.
    """

    def __init__(self, settings: Any, resource_attributes: dict[str, Any],
                 max_pending_spans: int = 262_144) -> None:
        settings_dict = dataclasses.asdict(settings)
        # The exporter process serves no control requests: keep the secret out
        # of its environment (readable in /proc by the same user).
        settings_dict["control_token"] = ""
        settings_dict["ranks"] = None  # decided here already (and a set is no JSON)
        self._config = json.dumps({"settings": settings_dict, "resource": resource_attributes})
        self._max_pending = max_pending_spans
        self._proc: subprocess.Popen | None = None
        self.failed = False
        #: The child's numbers from its latest acknowledgement (``{}`` before the first).
        self.remote_stats: dict[str, Any] = {}
        #: Whether ``remote_stats`` came after the child shut its exporters down.
        self.final_stats = False
        self.start()

    def start(self) -> None:
        env = dict(os.environ)
        env[CONFIG_ENV] = self._config
        # The child must not configure itself again on import, and serves no
        # control requests, so it does not get their token either.
        env.pop(ev.OTEL_RL_ENABLED, None)
        env.pop(ev.OTEL_RL_CONTROL_TOKEN, None)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "otel_rl._internal.exporter_main"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            # A session of its own: Ctrl-C or a SIGTERM sent to the training job's
            # process group reaches the trainer, which flushes through this
            # process; it ends when the trainer closes the pipe.
            start_new_session=True)
        self._cond = threading.Condition()
        self._pending: collections.deque[tuple[bytes, int] | None] = collections.deque()
        self._pending_spans = 0
        self._writing: tuple[bytes, int] | None = None
        #: Spans written into the pipe (the summary's count of what the child should have).
        self.shipped = 0
        self._seq = 0
        self._ack_buf = b""
        self._ended = False
        self._flush_lock = threading.Lock()
        self._writer = threading.Thread(target=self._write_loop, name="otel_rl-ship", daemon=True)
        self._writer.start()

    def after_fork_in_child(self) -> None:
        # The pipe belongs to the parent: a forked child keeping it open would
        # delay the exporter's end-of-file, and writing to it would interleave.
        proc, self._proc = self._proc, None
        for stream in (proc.stdin, proc.stdout) if proc else ():
            try:
                os.close(stream.fileno())
            except OSError:
                pass
        config = json.loads(self._config)
        config["resource"][keys.PROCESS_PID] = os.getpid()  # the child is a process of its own
        self._config = json.dumps(config)
        self.failed = False
        self.remote_stats = {}
        self.final_stats = False
        self.start()

    # --- export thread side ------------------------------------------------------------
    def send(self, records: list[tuple], thread_names: dict[int, str], n: int) -> bool:
        """Queues one batch of ``n`` spans (bundled phases included) for the pipe;
        ``False`` once the exporter process is gone."""
        if self.failed:
            return False
        # Only this (export) thread adds to the backlog and the writer only
        # shrinks it, so a batch that does not fit now is dropped before the
        # training process pays for encoding it.
        with self._cond:
            behind = self._pending_spans
        if behind + n > self._max_pending:
            guard.count("spans_dropped_exporter_backlog", n)
            guard.report("exporter_backlog", "the exporter process is behind by %d spans; "
                         "dropping new spans (counted)", behind)
            return True
        try:
            payload = marshal.dumps((thread_names, records))
        except ValueError:
            # A payload marshal cannot hold (a tensor, an enum): summarise it.
            records = [safe for safe in map(_safe, records) if safe is not None]
            n = span_count(records)
            payload = marshal.dumps((thread_names, records))
        with self._cond:
            self._pending.append((_HEADER.pack(b"B", len(payload)) + payload, n))
            self._pending_spans += n
            self._cond.notify()
        return True

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
                records.extend(marshal.loads(frame[_HEADER.size:])[1])
        return records

    # --- writer thread ---------------------------------------------------------------------
    def _write_loop(self) -> None:
        proc = self._proc
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
                self._writing = None
                self.shipped += item[1]
                self._pending_spans -= item[1]
                self._cond.notify_all()

    def _lost(self, exc: BaseException) -> None:
        with self._cond:
            if self.failed:
                return
            self.failed = True
            self._cond.notify_all()
        guard.report("exporter_process_lost", "the exporter process is gone (%r); "
                     "exporting in the training process from now on", exc)

    # --- caller side ------------------------------------------------------------------------
    def flush(self, timeout_s: float) -> bool:
        """Waits until the exporter process has written everything sent so far."""
        if self.failed or self._proc is None or self._ended:
            return False
        end = time.monotonic() + timeout_s
        if not self._flush_lock.acquire(timeout=timeout_s):
            guard.report("flush_timeout", "the exporter process did not flush within %.1fs", timeout_s)
            return False
        try:
            self._seq += 1
            seq = self._seq
            self._send_control(_HEADER.pack(b"F", _SEQ.size) + _SEQ.pack(seq))
            if self._await_ack(seq, max(0.0, end - time.monotonic())):
                return True
            if not self.failed:
                guard.report("flush_timeout", "the exporter process did not flush within %.1fs",
                             timeout_s)
            return False
        finally:
            self._flush_lock.release()

    def _send_control(self, frame: bytes) -> None:
        with self._cond:
            self._pending.append((frame, 0))
            self._cond.notify()

    def _await_ack(self, seq: int, timeout_s: float) -> bool:
        """Reads acknowledgements until the one for ``seq``; keeps its numbers.
        Bytes of an acknowledgement cut off by a timeout stay in ``_ack_buf``, so
        the next call starts on a frame boundary."""
        fd = self._proc.stdout.fileno()
        end = time.monotonic() + timeout_s
        while True:
            buf = self._ack_buf
            if len(buf) >= _ACK.size:
                got, length = _ACK.unpack_from(buf)
                if len(buf) >= _ACK.size + length:
                    body = buf[_ACK.size:_ACK.size + length]
                    self._ack_buf = buf[_ACK.size + length:]
                    try:
                        self.remote_stats = json.loads(body) if body else {}
                    except ValueError:
                        guard.report("internal_error", "unreadable exporter acknowledgement")
                    if got >= seq:
                        return True
                    continue  # an acknowledgement of an earlier, timed-out request
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                return False
            chunk = os.read(fd, 65536)
            if not chunk:  # end-of-file: the exporter process is gone
                self._lost(EOFError("exporter process exited"))
                return False
            self._ack_buf += chunk

    def close(self, timeout_s: float) -> None:
        proc = self._proc
        if proc is None:
            return
        end = time.monotonic() + timeout_s
        if not self.failed and not self._ended:
            # The child's final numbers come with the end's acknowledgement; it
            # gets the time left, less a margin for the answer and its exit.
            if self._flush_lock.acquire(timeout=timeout_s):
                try:
                    self._ended = True
                    self._seq += 1
                    seq = self._seq
                    left = end - time.monotonic()
                    budget_ms = int(max(0.0, left - END_MARGIN_S) * 1000)
                    self._send_control(_HEADER.pack(b"E", _END.size) + _END.pack(seq, budget_ms))
                    if self._await_ack(seq, max(0.0, end - time.monotonic())):
                        self.final_stats = True
                finally:
                    self._flush_lock.release()
        with self._cond:
            self._pending.append(None)
            self._cond.notify()
        self._writer.join(max(0.0, end - time.monotonic()))
        try:
            proc.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            guard.report("shutdown_timeout", "the exporter process was still exporting when "
                         "shutdown_timeout_ms ran out (%.1fs were left for it); stopped", timeout_s)
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
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
        guard.report("export_error", "a span could not be shipped: %r", exc)
        return None


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

    from .config import Settings
    from .export_chain import ExportChain
    from .records import ReadableBuilder, expand

    config = json.loads(os.environ[CONFIG_ENV])
    settings_dict = config["settings"]
    if settings_dict.get("profile_steps") is not None:
        settings_dict["profile_steps"] = tuple(settings_dict["profile_steps"])
    settings = Settings(**settings_dict)
    from . import files, privacy

    files.set_mode(settings.file_mode)
    privacy.configure(settings)
    resource = Resource(config["resource"])
    chain = ExportChain(settings, resource, os.environ)
    sink = chain.sink()
    builder = ReadableBuilder(resource)
    # Each batch allocates thousands of short-lived objects and keeps them
    # across many young collections, which made the default thresholds scan
    # them again and again (about a third of this process's CPU). The modules
    # imported so far never become garbage: freeze them out of every scan.
    gc.freeze()
    gc.set_threshold(*EXPORTER_GC_THRESHOLDS)
    build = builder.build
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    timeout_s = settings.shutdown_timeout_ms / 1000.0
    ended = False
    spans_in = 0

    def acknowledge(seq: bytes) -> None:
        from .jsonl import bytes_written

        stats = chain.stats()
        stats["spans_in"] = spans_in
        stats["problems"] = guard.diagnostics()
        stats["file_bytes"] = bytes_written()
        body = json.dumps(stats).encode()
        stdout.write(_ACK.pack(_SEQ.unpack(seq)[0], len(body)) + body)
        stdout.flush()

    while True:
        header = _read_exact(stdin, _HEADER.size)
        if header is None:
            break
        kind, length = _HEADER.unpack(header)
        payload = _read_exact(stdin, length)
        if payload is None:
            break
        if kind == b"B" and ended:
            guard.count("spans_dropped_after_end", span_count(marshal.loads(payload)[1]))
        elif kind == b"B":
            thread_names, records = marshal.loads(payload)
            spans_in += span_count(records)
            builder.thread_names.update(thread_names)
            for rec in expand(records):
                try:
                    sink.on_end(build(rec))
                except Exception as exc:  # noqa: BLE001
                    guard.report("export_error", "a span could not be processed: %r", exc)
            chain.after_batch()
        elif kind == b"F":
            if not ended:
                chain.flush(timeout_s)
            acknowledge(payload[:_SEQ.size])
        elif kind == b"E":
            seq, budget_ms = _END.unpack(payload)
            if not ended:
                ended = True
                chain.shutdown(budget_ms / 1000.0)
            acknowledge(_SEQ.pack(seq))
    if not ended:
        chain.shutdown(timeout_s)
    return 0
