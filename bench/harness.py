"""Shared machinery: sizes, statistics, otel_rl runs and output counting."""

from __future__ import annotations

import dataclasses
import gc
import glob
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import otel_rl
from otel_rl.report import percentile
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

#: Flushes in the benchmark may take long (100k spans through OTLP); a generous
#: timeout keeps ``save(force=True)`` from returning before the work is done.
#: Only a timeout: it changes no drop or batching behaviour.
FLUSH_TIMEOUT_MS = 120_000

#: Environment variables that would change what otel_rl or the SDK do; the
#: suite removes them at start so every run measures the same configuration.
_SCRUBBED_PREFIXES = ("OTEL_RL_", "OTEL_EXPORTER_OTLP", "OTEL_BSP_", "OTEL_TRACES_", "OTEL_SDK_",
                      "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_PYTHON_")


@dataclasses.dataclass(frozen=True)
class Sizes:
    disabled_n: int
    scope_n: int
    otlp_n: int
    session_tasks: int        # 4 sessions per task
    burst_n: int
    threads: int
    thread_n: int             # scopes per thread
    async_sessions: int
    tracemalloc_sessions: int
    memory_sessions: int
    memory_chunks: int

    @classmethod
    def full(cls) -> Sizes:
        return cls(disabled_n=1_000_000, scope_n=100_000, otlp_n=20_000, session_tasks=5_000,
                   burst_n=50_000, threads=16, thread_n=5_000, async_sessions=1_000,
                   tracemalloc_sessions=4_000, memory_sessions=100_000, memory_chunks=10)

    @classmethod
    def quick(cls) -> Sizes:
        return cls(disabled_n=20_000, scope_n=2_000, otlp_n=1_000, session_tasks=100,
                   burst_n=5_000, threads=16, thread_n=200, async_sessions=1_000,
                   tracemalloc_sessions=200, memory_sessions=2_000, memory_chunks=5)


def scrub_environment() -> dict[str, str]:
    """Removes telemetry settings inherited from the shell; returns what was removed."""
    removed = {}
    for key in list(os.environ):
        if key.startswith(_SCRUBBED_PREFIXES):
            removed[key] = os.environ.pop(key)
    return removed


def file_exporter_available() -> bool:
    """Whether otel_rl's Chrome-trace file exporter module exists yet."""
    try:
        return importlib.util.find_spec("otel_rl._internal.export.file_exporter") is not None
    except (ImportError, ValueError):
        return False


# --------------------------------------------------------------------------- statistics


def stats(values: list[float]) -> dict[str, float | None]:
    """Median, min, max, quartiles of ``values``, by otel_rl's one percentile
    definition (:func:`otel_rl.report.percentile`, linear interpolation)."""
    clean = sorted(v for v in values if v is not None)
    if not clean:
        return {"median": None, "min": None, "max": None, "q1": None, "q3": None, "n": 0}
    out: dict[str, Any] = {
        "median": percentile(clean, 50), "min": clean[0], "max": clean[-1], "n": len(clean),
        "q1": percentile(clean, 25), "q3": percentile(clean, 75),
    }
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


# --------------------------------------------------------------------------- timing


class Timer:
    """Wall (``perf_counter``), the calling thread's own CPU (``thread_time``:
    excludes time spent waiting for the GIL) and whole-process CPU
    (``process_time``, every thread) taken together."""

    __slots__ = ("wall0", "cpu0", "thread0", "wall", "cpu", "thread_cpu", "thread_cpu_total")

    def start(self) -> Timer:
        gc.collect()
        self.cpu0 = time.process_time()
        self.thread0 = time.thread_time()
        self.wall0 = time.perf_counter()
        return self

    def lap_wall(self) -> float:
        """Wall seconds since :meth:`start` (also records the thread's CPU)."""
        self.wall = time.perf_counter() - self.wall0
        self.thread_cpu = time.thread_time() - self.thread0
        return self.wall

    def stop_cpu(self) -> float:
        """Process CPU since :meth:`start`; also the calling thread's CPU
        including what ran after the lap (a tracer's save() on that thread)."""
        self.cpu = time.process_time() - self.cpu0
        self.thread_cpu_total = time.thread_time() - self.thread0
        return self.cpu


def interleaved(repeats: int, contenders: dict[str, Callable[[], dict[str, Any]]],
                log: Callable[[str], None]) -> dict[str, list[dict[str, Any]]]:
    """Runs every contender once per repeat, in turn, so drift hits all alike."""
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    for rep in range(repeats):
        for name, fn in contenders.items():
            sample = fn()
            sample["repeat"] = rep
            samples[name].append(sample)
            log(f"    {name} #{rep + 1}: " + ", ".join(
                f"{k}={_fmt_log(v)}" for k, v in sample.items() if k != "repeat"))
    return samples


def _fmt_log(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)[:120]
    return str(value)


# --------------------------------------------------------------------------- otel_rl runs


@dataclasses.dataclass
class OtelRun:
    """One configured otel_rl. Call :meth:`close` before reading its files:
    it shuts otel_rl down (files closed); the directory lives until the
    ``with`` block of :meth:`Context.otel` ends."""

    root: str
    provider: TracerProvider
    run_dir: str = ""

    def close(self) -> None:
        otel_rl.reset()


class Context:
    """What every workload gets: sizes, a scratch dir, the receiver, options."""

    def __init__(self, sizes: Sizes, scratch: str, file_export: bool, log: Callable[[str], None],
                 receiver_factory: Callable[[], Any]) -> None:
        self.sizes = sizes
        self.scratch = scratch
        self.file_export = file_export
        self.log = log
        self._receiver_factory = receiver_factory
        self._receiver: Any = None

    @property
    def receiver(self) -> Any:
        if self._receiver is None:
            self._receiver = self._receiver_factory()
        return self._receiver

    def close(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None

    def tmpdir(self, prefix: str) -> str:
        return tempfile.mkdtemp(prefix=prefix, dir=self.scratch)

    @contextmanager
    def otel(self, *, otlp_endpoint: str | None = None, processors: tuple[SpanProcessor, ...] = (),
             **overrides: Any) -> Iterator[OtelRun]:
        """otel_rl configured on a private provider with file output under a
        fresh directory (and OTLP/gRPC to ``otlp_endpoint`` when given)."""
        otel_rl.reset()
        root = self.tmpdir("otel-")
        provider = TracerProvider(shutdown_on_exit=False)
        for processor in processors:
            provider.add_span_processor(processor)
        env_keys = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL")
        if otlp_endpoint:
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_endpoint
            os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
        try:
            settings = dict(file_export=self.file_export, shutdown_timeout_ms=FLUSH_TIMEOUT_MS)
            settings.update(overrides)
            otel_rl.configure(fileroot=root, tracer_provider=provider, **settings)
        finally:
            for key in env_keys:
                os.environ.pop(key, None)
        settings_now = otel_rl.settings()
        run = OtelRun(root, provider, settings_now.run_dir if settings_now is not None else root)
        try:
            yield run
        finally:
            otel_rl.reset()
            provider.shutdown()
            shutil.rmtree(root, ignore_errors=True)


def exporter_cpu_s() -> float:
    """CPU seconds used so far by otel_rl's exporter process (0 in thread mode).

    Read from /proc, so it counts on Linux only: what the training process
    hands to the exporter still costs a core, and an honest total includes it.
    """
    from otel_rl._internal.state import STATE

    shipper = STATE.pipeline.shipper if STATE.pipeline is not None else None
    proc = getattr(shipper, "_proc", None)
    if proc is None:
        return 0.0
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drop_counters(diag: dict[str, int]) -> dict[str, int]:
    """The diagnostics entries that mean data was lost."""
    words = ("drop", "lost", "evict", "error", "timeout")
    return {k: v for k, v in diag.items() if any(w in k for w in words)}


# --------------------------------------------------------------------------- output files


def trace_files(run_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(run_dir, "traces-*.jsonl")))


def count_trace_events(run_dir: str, names: set[str] | None = None) -> dict[str, Any]:
    """Counts span events in otel_rl's ``traces-*.jsonl`` files.

    Lines are Chrome-trace events; metadata (``ph: "M"``) and end events
    (``ph: "E"``) are not spans. Returns ``{"events", "by_name", "tids", "bad_lines"}``.
    """
    by_name: dict[str, int] = {}
    tids: set[Any] = set()
    bad = 0
    total = 0
    for path in trace_files(run_dir):
        with open(path, "rb") as fh:
            for raw in fh:
                raw = raw.strip().rstrip(b",")
                if not raw or raw in (b"[", b"]"):
                    continue
                try:
                    event = json.loads(raw)
                except ValueError:
                    bad += 1
                    continue
                if not isinstance(event, dict) or event.get("ph") in ("M", "E"):
                    continue
                name = event.get("name")
                if names is not None and name not in names:
                    continue
                total += 1
                by_name[name] = by_name.get(name, 0) + 1
                if "tid" in event:
                    tids.add(event["tid"])
    return {"events": total, "by_name": by_name, "tids": len(tids), "bad_lines": bad}


def read_session_records(run_dir: str) -> list[dict[str, Any]]:
    records = []
    for path in sorted(glob.glob(os.path.join(run_dir, "sessions-*.jsonl"))):
        with open(path, "rb") as fh:
            for raw in fh:
                if raw.strip():
                    records.append(json.loads(raw))
    return records


def rss_kib() -> int | None:
    """Current resident set size in KiB (Linux ``/proc``; ``None`` elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def max_rss_kib() -> int:
    import resource

    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value // 1024 if sys.platform == "darwin" else value
