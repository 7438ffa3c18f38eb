"""``capture``: otel_rl recording into memory with deterministic ids and clock.

Modelled on the ``capfire`` fixture of pydantic logfire: span ids and trace ids
count up from 1 (each on its own), and the recording clock reads 1 s, 2 s, 3 s ...
- one fixed step per read - so a test states the WHOLE expected span list, record
list or trace file and compares it with ``==``::

    def test_nesting(capture):
        with otel_rl.trace_scope("outer"):
            with otel_rl.trace_scope("inner"):
                pass
        assert capture.spans() == [
            {"name": "outer", "trace_id": 1, "span_id": 1, "parent_id": None,
             "start_ns": 1 * S, "end_ns": 4 * S, "attributes": MAIN_THREAD},
            {"name": "inner", "trace_id": 1, "span_id": 2, "parent_id": 1,
             "start_ns": 2 * S, "end_ns": 3 * S, "attributes": MAIN_THREAD},
        ]

The seams are module attributes the recording path reads at call time (see
:data:`ID_SOURCES` and :data:`CLOCKS`); ``test_capture.py`` fails when a new
one appears that the fixture does not patch. Only the test's own thread may
record: spans made on other threads interleave their clock reads
nondeterministically. Spans of other instrumentation (an SDK tracer of the
capture's provider) get incremental ids too, but the SDK's own clock.

A task all of whose sessions are finalized ends once the clock passed its idle
grace (``TASK_IDLE_GRACE_NS``, one step here) at the next finalize - as it would
after a second of real time - with the same end time it gets otherwise.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind
from opentelemetry.trace.status import StatusCode

import otel_rl
from otel_rl._internal import keys
from otel_rl._internal.recording.ids import trace_text
from otel_rl._internal.state import STATE

from .files import read_sessions, read_trace
from .processes import scrub_environ

#: One step of the fake clock, and the first time it reads.
S = 1_000_000_000

#: Where the recording path draws its random ids (``random.getrandbits``).
ID_SOURCES = (
    "otel_rl._internal.recording.ids.getrandbits",
    "otel_rl._internal.recording.spans.getrandbits",
    "otel_rl._internal.recording.record.getrandbits",
    "otel_rl._internal.recording.tracking.getrandbits",
)
#: Where it reads the wall clock (``time.time_ns``).
CLOCKS = (
    "otel_rl._internal.recording.spans._time_ns",
    "otel_rl._internal.recording.tracking.time_ns",
    "otel_rl.sessions.time_ns",
    "otel_rl.training.time_ns",
)

#: The thread attributes of a span recorded on the test's own thread.
MAIN_THREAD = {keys.THREAD_ID: 1, keys.THREAD_NAME: "MainThread"}


class IncrementalIds:
    """Stands in for ``random.getrandbits``: 64-bit draws (span ids) and 128-bit
    draws (trace ids) count up from 1, each on its own."""

    def __init__(self) -> None:
        self._counters = {64: itertools.count(1), 128: itertools.count(1)}

    def __call__(self, bits: int) -> int:
        counter = self._counters.get(bits)
        if counter is None:
            raise AssertionError(f"capture: a {bits}-bit random draw; only span and trace ids are expected")
        return next(counter)


class SdkIds(IdGenerator):
    """The same counters for spans of other instrumentation (the SDK's tracer)."""

    def __init__(self, ids: IncrementalIds) -> None:
        self._ids = ids

    def generate_span_id(self) -> int:
        return self._ids(64)

    def generate_trace_id(self) -> int:
        return self._ids(128)


class FakeClock:
    """Stands in for ``time.time_ns``: each read is one step after the previous one."""

    def __init__(self, step_ns: int = S) -> None:
        self.step_ns = step_ns
        self._ticks = itertools.count(1)

    def __call__(self) -> int:
        return next(self._ticks) * self.step_ns


class _Numbering:
    """Small numbers for values that differ from run to run (thread idents, pids),
    in the order they are first seen."""

    def __init__(self, *first: Any) -> None:
        self._numbers: dict[Any, int] = {}
        for value in first:
            self(value)

    def __call__(self, value: Any) -> int:
        return self._numbers.setdefault(value, len(self._numbers) + 1)


class Capture:
    """What otel_rl recorded in the test, as plain dicts (see the module docstring)."""

    def __init__(self, run_root: str, exporter: InMemorySpanExporter, provider: TracerProvider,
                 ids: IncrementalIds, clock: FakeClock) -> None:
        self.run_root = run_root
        self.exporter = exporter
        self.provider = provider
        self.ids = ids
        self.clock = clock
        self._threads = _Numbering(threading.get_ident())

    @property
    def run_dir(self) -> str:
        return otel_rl.settings().run_dir

    def spans(self) -> list[dict[str, Any]]:
        """Every span exported so far, by start time: name, ids (integers),
        ``parent_id``, ``start_ns`` / ``end_ns``, attributes (``thread.id``
        numbered from 1, the test's thread), and - when not the default -
        ``kind``, ``status``, ``events`` and ``links``."""
        otel_rl.save(force=True)
        spans = sorted(self.exporter.get_finished_spans(), key=lambda s: (s.start_time, s.context.span_id))
        return [self._span_dict(span) for span in spans]

    def sessions(self) -> list[dict[str, Any]]:
        """The session records written so far (``sessions-r0.jsonl``), as the file has them."""
        otel_rl.save(force=True)
        return read_sessions(self.run_dir)

    def records(self) -> list[dict[str, Any]]:
        """The events of the trace file (``traces-r0.jsonl``) other than metadata,
        pids and tids numbered from 1 in file order."""
        otel_rl.save(force=True)
        pids, tids = _Numbering(), _Numbering()
        out = []
        for event in read_trace(f"{self.run_dir}/traces-r0.jsonl"):
            if event.get("ph") == "M":
                continue
            event = dict(event)
            if "pid" in event:
                event["pid"] = pids(event["pid"])
            if "tid" in event:
                event["tid"] = tids(event["tid"])
            out.append(event)
        return out

    def _span_dict(self, span: ReadableSpan) -> dict[str, Any]:
        attributes = dict(span.attributes or {})
        if keys.THREAD_ID in attributes:
            attributes[keys.THREAD_ID] = self._threads(attributes[keys.THREAD_ID])
        out: dict[str, Any] = {
            "name": span.name,
            "trace_id": span.context.trace_id,
            "span_id": span.context.span_id,
            "parent_id": span.parent.span_id if span.parent else None,
            "start_ns": span.start_time,
            "end_ns": span.end_time,
            "attributes": attributes,
        }
        if span.kind is not SpanKind.INTERNAL:
            out["kind"] = span.kind.name
        if span.status.status_code is not StatusCode.UNSET:
            out["status"] = {"code": span.status.status_code.name, "description": span.status.description}
        if span.events:
            out["events"] = [{"name": e.name, "timestamp_ns": e.timestamp, "attributes": dict(e.attributes or {})}
                             for e in span.events]
        if span.links:
            out["links"] = [{"trace_id": link.context.trace_id, "span_id": link.context.span_id,
                             "attributes": dict(link.attributes or {})} for link in span.links]
        return out


def trace_hex(n: int) -> str:
    """A trace id as the files write it (16 digits where its upper half is zero)."""
    return trace_text(n)


def span_hex(n: int) -> str:
    """A span id as the files write it."""
    return f"{n:016x}"


@pytest.fixture
def capture(tmp_path, monkeypatch) -> Capture:
    """otel_rl configured (rank 0, run ``exp/t1`` under ``tmp_path``) with incremental
    ids, the fake clock, and an in-memory exporter; reset after the test."""
    scrub_environ(monkeypatch)
    ids, clock = IncrementalIds(), FakeClock()
    for target in ID_SOURCES:
        monkeypatch.setattr(target, ids)
    for target in CLOCKS:
        monkeypatch.setattr(target, clock)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SdkIds(ids), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The export thread runs only when a capture method flushes: ids it draws
    # (phases bundled in a session's record) come after the test's own.
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="exp", trial_name="t1", rank=0,
                      tracer_provider=provider, export_interval_ms=3_600_000)
    # The export thread samples counters (sessions in flight) as spans of its own:
    # off here, where only the test's thread may read the clock.
    STATE.pipeline.samplers.clear()
    yield Capture(str(tmp_path), exporter, provider, ids, clock)
    otel_rl.reset()
