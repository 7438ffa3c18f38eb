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
``B``: a marshal-ed list of records. ``F``: a flush request carrying an
8-byte sequence number, acknowledged by writing the number back on stdout.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import select
import signal
import struct
import subprocess
import sys
import threading
from typing import Any

from . import guard
from .records import make_marshalable

CONFIG_ENV = "OTEL_RL_EXPORTER_CONFIG"
_HEADER = struct.Struct(">cI")
_SEQ = struct.Struct(">Q")


class ExporterProcess:
    """The training process's handle on its exporter process."""

    def __init__(self, settings: Any, resource_attributes: dict[str, Any]) -> None:
        self._config = json.dumps({
            "settings": dataclasses.asdict(settings),
            "resource": resource_attributes,
        })
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._seq = 0
        self.failed = False
        self.start()

    def start(self) -> None:
        env = dict(os.environ)
        env[CONFIG_ENV] = self._config
        # The child must not configure itself again on import.
        env.pop("OTEL_RL_ENABLED", None)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "otel_rl._internal.exporter_main"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def after_fork_in_child(self) -> None:
        # The pipe belongs to the parent: a forked child keeping it open would
        # delay the exporter's end-of-file, and writing to it would interleave.
        proc, self._proc = self._proc, None
        for stream in (proc.stdin, proc.stdout) if proc else ():
            try:
                os.close(stream.fileno())
            except OSError:
                pass
        self._lock = threading.Lock()
        self.start()

    def _write(self, kind: bytes, payload: bytes) -> bool:
        proc = self._proc
        if proc is None or self.failed:
            return False
        try:
            proc.stdin.write(_HEADER.pack(kind, len(payload)))
            proc.stdin.write(payload)
            proc.stdin.flush()
            return True
        except (OSError, ValueError) as exc:
            self.failed = True
            guard.report("exporter_process_lost", "the exporter process is gone (%r); "
                         "exporting in the training process from now on", exc)
            return False

    def send(self, records: list[tuple]) -> bool:
        """Ships one batch; ``False`` if the exporter process is gone."""
        try:
            payload = marshal.dumps(records)
        except ValueError:
            # A payload marshal cannot hold (a tensor, an enum): summarise it.
            payload = marshal.dumps([_safe(rec) for rec in records])
        with self._lock:
            return self._write(b"B", payload)

    def flush(self, timeout_s: float) -> bool:
        """Waits until the exporter process has written everything sent so far."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            if not self._write(b"F", _SEQ.pack(seq)):
                return False
            stdout = self._proc.stdout
            fd = stdout.fileno()
            deadline = timeout_s
            got = b""
            while len(got) < _SEQ.size:
                ready, _, _ = select.select([fd], [], [], deadline)
                if not ready:
                    guard.report("flush_timeout", "the exporter process did not flush within %.1fs",
                                 timeout_s)
                    return False
                chunk = os.read(fd, _SEQ.size - len(got))
                if not chunk:
                    return False
                got += chunk
                if len(got) == _SEQ.size and _SEQ.unpack(got)[0] < seq:
                    got = b""  # an acknowledgement of an earlier, timed-out flush
            return True

    def close(self, timeout_s: float) -> None:
        proc = self._proc
        if proc is None:
            return
        with self._lock:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            guard.report("shutdown_timeout", "the exporter process did not finish within %.1fs; "
                         "stopped", timeout_s)
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self._proc = None


def _safe(record: tuple) -> tuple:
    try:
        marshal.dumps(record)
        return record
    except ValueError:
        return make_marshalable(record)


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
    from opentelemetry.sdk.resources import Resource

    from .config import Settings
    from .export_chain import ExportChain
    from .records import ReadableBuilder

    config = json.loads(os.environ[CONFIG_ENV])
    settings_dict = config["settings"]
    if settings_dict.get("profile_steps") is not None:
        settings_dict["profile_steps"] = tuple(settings_dict["profile_steps"])
    settings = Settings(**settings_dict)
    resource = Resource(config["resource"])
    chain = ExportChain(settings, resource, os.environ)
    sink = chain.sink()
    build = ReadableBuilder(resource).build
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    timeout_s = settings.shutdown_timeout_ms / 1000.0
    while True:
        header = _read_exact(stdin, _HEADER.size)
        if header is None:
            break
        kind, length = _HEADER.unpack(header)
        payload = _read_exact(stdin, length)
        if payload is None:
            break
        if kind == b"B":
            for rec in marshal.loads(payload):
                try:
                    sink.on_end(build(rec))
                except Exception as exc:  # noqa: BLE001
                    guard.report("export_error", "a span could not be processed: %r", exc)
            chain.after_batch()
        elif kind == b"F":
            chain.flush(timeout_s)
            stdout.write(payload)
            stdout.flush()
    chain.shutdown(timeout_s)
    return 0
