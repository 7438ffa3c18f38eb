"""Where exported statistics go: OpenTelemetry metrics, a JSONL file, TensorBoard, user backends.

As AReaL's ``StatsLogger``: one process logs (rank 0, or the reduce group's
rank 0, since every member then holds the same numbers) and ``__count`` keys
are dropped. The built-in backends exist while otel_rl is configured and
enabled; they are built at the first logged export, flushed by ``save()``
and closed by ``shutdown()`` (the runtime walks :data:`BUILT_INS`). Backends a user registers
live for the process and run whether or not otel_rl is configured.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from .. import diagnostics, guard, keys
from ..config import Settings
from ..export.jsonl import JsonlAppender
from ..resource import process_resource
from ..state import STATE
from .reduce import COUNT_SUFFIX
from ..recording.tracking import current_id

logger = logging.getLogger("otel_rl")


@dataclasses.dataclass(frozen=True)
class StatsRecord:
    """One logged export: what every backend receives.

    Attributes:
        tracker: The tracker's name (``""`` for the default tracker).
        step: The training step, or ``None`` when none was given or current.
        values: Exported values by AReaL key, without ``__count`` keys.
        rank: The logging process's rank.
        time_unix_nano: When the export was logged.
    """

    tracker: str
    step: int | None
    values: Mapping[str, float]
    rank: int
    time_unix_nano: int


@runtime_checkable
class StatsBackend(Protocol):
    """What a logging backend implements (wandb, SwanLab, MLflow... through ten lines of glue).

    Only ``log`` is required; ``flush()`` runs at ``otel_rl.save()`` and
    ``close()`` at ``unregister_backend`` when the backend has them. A plain
    callable taking a :class:`StatsRecord` works as a backend too.
    """

    def log(self, record: StatsRecord) -> None:
        """Receives one export; exceptions are counted, never raised into training."""


class _CallableBackend:
    def __init__(self, fn: Callable[[StatsRecord], Any]) -> None:
        self.fn = fn

    def log(self, record: StatsRecord) -> None:
        self.fn(record)


_lock = threading.Lock()
_user_backends: list[Any] = []


def register_backend(backend: StatsBackend | Callable[[StatsRecord], Any]) -> Any:
    """Adds a logging backend for the life of the process.

    Args:
        backend: An object with ``log(record)`` (and optionally ``flush()``,
            ``close()``), or a function taking a :class:`StatsRecord`.

    Returns:
        The registered backend, to pass to :func:`unregister_backend`.

    Raises:
        TypeError: ``backend`` has no ``log`` method and is not callable.
    """
    if not hasattr(backend, "log"):
        if not callable(backend):
            raise TypeError(f"a stats backend has a log(record) method or is callable, got {backend!r}")
        backend = _CallableBackend(backend)
    with _lock:
        _user_backends.append(backend)
    return backend


def unregister_backend(backend: Any) -> None:
    """Removes a backend added by :func:`register_backend`, calling its ``close()`` if it has one.

    Args:
        backend: What :func:`register_backend` returned, or the function given to it.
    """
    with _lock:
        found = [b for b in _user_backends if b is backend or getattr(b, "fn", None) is backend]
        for b in found:
            _user_backends.remove(b)
    for b in found:
        _call(b, "close")


def _call(backend: Any, method: str, *args: Any) -> None:
    fn = getattr(backend, method, None)
    if fn is None:
        return
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - a backend must never break training
        guard.report(diagnostics.STATS_BACKEND_ERROR, "stats backend %r failed in %s: %r", backend, method, exc)


# --------------------------------------------------------------------------- built-in backends


class JsonlStatsBackend:
    """``stats-r{rank}.jsonl``: one line per export, written at once (a crash keeps every line)."""

    def __init__(self, path: str) -> None:
        self._out = JsonlAppender(path, flush_threshold=1, kind="stats")

    def log(self, record: StatsRecord) -> None:
        self._out.add({"time": record.time_unix_nano / 1e9, "step": record.step, "tracker": record.tracker,
                       "rank": record.rank, "values": dict(record.values)})

    def close(self) -> None:
        self._out.close()


_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_./-]")


def metric_name(key: str) -> str:
    """The OpenTelemetry instrument name of a stats key: ``rl.stats.<key>``, made valid."""
    return (keys.STATS_METRIC_PREFIX + _INVALID_NAME_CHARS.sub("_", key))[:255]


class OtelStatsBackend:
    """One synchronous gauge per key, ``rl.stats.<key>``; timings (``timeperf/...``) in seconds.

    A gauge because an exported statistic is a value at a step, not a
    quantity to sum; per key, because each is its own quantity with its own
    unit, as Prometheus names them.
    """

    def __init__(self, meter: Any, settings: Settings, provider: Any = None, exporter: Any = None) -> None:
        self._meter = meter
        self._provider = provider  # set when otel_rl built it (and must flush and close it)
        self._exporter = exporter  # its OTLP exporter: shut down at once when closing runs out of time
        self._flusher: Any = None
        self._timeout_s = settings.shutdown_timeout_ms / 1000.0
        self._gauges: dict[str, Any] = {}
        self._step_attribute = settings.stats_step_attribute
        self._base = {keys.EXPERIMENT: settings.experiment_name, keys.TRIAL: settings.trial_name,
                      keys.RANK: settings.rank}
        if settings.role:
            self._base[keys.ROLE] = settings.role

    def log(self, record: StatsRecord) -> None:
        attributes = dict(self._base)
        attributes[keys.STATS_TRACKER] = record.tracker
        if self._step_attribute and record.step is not None:
            attributes[keys.STEP] = record.step
        for key, value in record.values.items():
            gauge = self._gauges.get(key)
            if gauge is None:
                unit = "s" if key.startswith("timeperf/") else ""
                gauge = self._gauges[key] = self._meter.create_gauge(
                    metric_name(key), unit=unit, description=f"otel_rl.stats `{key}`")
            gauge.set(value, attributes)

    def flush(self) -> None:
        """Starts sending what is recorded, without waiting for the network
        (``save()`` must not: an unreachable endpoint held each one 7 s)."""
        if self._provider is not None:
            if self._flusher is None:
                from ..export.chain import BackgroundFlush

                self._flusher = BackgroundFlush(self._force_flush, "otel_rl-stats-flush")
            self._flusher.request(self._timeout_s)

    def _force_flush(self, timeout_s: float) -> None:
        self._provider.force_flush(int(timeout_s * 1000))

    def close(self, timeout_s: float | None = None) -> None:
        """Sends what is left and closes the provider otel_rl built, within ``timeout_s``."""
        if self._provider is None:
            return
        from ..export.chain import bounded

        end = time.monotonic() + (self._timeout_s if timeout_s is None else timeout_s)
        if self._flusher is not None:
            self._flusher.stop(max(0.0, end - time.monotonic()))
        bounded(self._provider.shutdown, max(0.0, end - time.monotonic()),
                self._exporter.shutdown if self._exporter is not None else None)


def _otel_backend(settings: Settings) -> OtelStatsBackend | None:
    provider = getattr(STATE.components, "meter_provider", None)
    if provider is not None:
        return OtelStatsBackend(provider.get_meter(keys.INSTRUMENTATION_NAME), settings)
    from opentelemetry.sdk.metrics import MeterProvider
    # The SDK exports its synchronous gauge class under this name.
    from opentelemetry.sdk.metrics import _Gauge as Gauge
    from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader

    from ..export.chain import otlp_metric_exporter

    # Delta for gauges: each collection sends the values set since the last
    # one, and the SDK forgets them after, so a point per step neither piles
    # up in memory nor runs into the SDK's 2000-series cardinality limit.
    exporter = otlp_metric_exporter(os.environ, preferred_temporality={Gauge: AggregationTemporality.DELTA})
    if exporter is None:
        return None
    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter)],
                             resource=process_resource(settings, os.environ),
                             shutdown_on_exit=False)
    return OtelStatsBackend(provider.get_meter(keys.INSTRUMENTATION_NAME), settings, provider, exporter)


class TensorBoardBackend:
    """TensorBoard event files, written by the tensorboard package's own (torch-free) writer."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer
        self._lock = threading.Lock()  # the writer is not thread-safe
        self._commits = 0

    @classmethod
    def create(cls, log_dir: str) -> TensorBoardBackend | None:
        try:
            from tensorboard.summary import Writer
        except ImportError:
            logger.debug("otel_rl.stats: tensorboard is not installed; no TensorBoard output")
            return None
        return cls(Writer(log_dir))

    def log(self, record: StatsRecord) -> None:
        with self._lock:
            # As a run without steps would, each commit advances the x axis by one.
            step = record.step if record.step is not None else self._commits
            self._commits += 1
            for key, value in record.values.items():
                self._writer.add_scalar(key, value, step, wall_time=record.time_unix_nano / 1e9)

    def flush(self) -> None:
        with self._lock:
            self._writer.flush()

    def close(self) -> None:
        with self._lock:
            self._writer.close()


class _BuiltIns:
    """The backends of one configuration (and the user's, for flushes): the
    runtime flushes them at ``save()`` and empties them when that configuration
    shuts down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settings: Settings | None = None
        self.backends: list[Any] = []

    def current(self) -> list[Any]:
        settings = STATE.settings
        if not STATE.enabled or settings is None:
            return []
        if self._settings is settings:
            return self.backends
        with self._lock:
            if self._settings is not settings:
                self._close()
                self.backends = self._build(settings)
                self._settings = settings
            return self.backends

    @staticmethod
    def _build(settings: Settings) -> list[Any]:
        backends: list[Any] = [JsonlStatsBackend(settings.file_path(keys.STATS_FILE))]
        for build in (lambda: _otel_backend(settings),
                      lambda: TensorBoardBackend.create(settings.file_path(keys.TENSORBOARD_DIR))
                      if settings.stats_tensorboard else None):
            try:
                backend = build()
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.STATS_BACKEND_ERROR, "a stats backend could not be built: %r", exc)
                backend = None
            if backend is not None:
                backends.append(backend)
        return backends

    def flush(self, timeout_s: float) -> bool:
        for backend in list(self.backends) + list(_user_backends):
            _call(backend, "flush")
        return True

    def shutdown(self, timeout_s: float) -> None:
        with self._lock:
            self._close(timeout_s)
            self._settings = None

    def _close(self, timeout_s: float | None = None) -> None:
        backends, self.backends = self.backends, []
        for backend in backends:
            if isinstance(backend, OtelStatsBackend):
                _call(backend, "close", timeout_s)
            else:
                _call(backend, "close")


BUILT_INS = _BuiltIns()


def after_fork_in_child() -> None:
    """Renews the locks a thread of the parent may have held at the fork."""
    global _lock
    _lock = threading.Lock()
    BUILT_INS._lock = threading.Lock()  # noqa: SLF001


# --------------------------------------------------------------------------- the logging rule


def _dist() -> Any:
    """``torch.distributed`` when torch is already loaded and a process group exists."""
    if "torch.distributed" not in sys.modules:
        return None
    dist = sys.modules["torch.distributed"]
    try:
        return dist if dist.is_available() and dist.is_initialized() else None
    except Exception:  # noqa: BLE001
        return None


def is_rank_zero() -> bool:
    """AReaL's ``StatsLogger`` test: torch.distributed's rank when a process group
    exists, else otel_rl's ``rank`` setting, else ``RANK``."""
    dist = _dist()
    if dist is not None:
        return dist.get_rank() == 0
    return own_rank() == 0


def own_rank() -> int:
    """The rank records are written under: otel_rl's setting (the ``r{rank}`` of
    its file names), else torch.distributed's, else ``RANK``, else 0."""
    if STATE.settings is not None:
        return STATE.settings.rank
    dist = _dist()
    if dist is not None:
        return dist.get_rank()
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def current_step(step: Any = None) -> int | None:
    """``step`` when given, else the step current in otel_rl's context (``step_scope`` / ``set_step``)."""
    if step is None:
        step = current_id(keys.STEP)
    if step is None:
        return None
    try:
        return int(step)
    except (TypeError, ValueError):
        guard.report(diagnostics.STATS_BAD_STEP, "stats step %r is not an integer; logged without a step", step)
        return None


def deliver(tracker: str, values: Mapping[str, Any], step: Any, *, reduce_group: Any = None,
            log: bool | None = None) -> None:
    """Sends one export to every backend, under AReaL's ``StatsLogger`` rule.

    Args:
        tracker: Name of the exporting tracker.
        values: The exported values (``__count`` keys are dropped here).
        step: The training step (``None``: the current otel_rl step, if any).
        reduce_group: The group the values were reduced over; only its rank 0 logs.
        log: ``None`` logs on rank 0 only, ``True`` logs here, ``False`` never.
    """
    if log is False:
        return
    try:
        backends = BUILT_INS.current() + list(_user_backends)
        if not backends:
            return
        shown = {k: v for k, v in values.items() if not k.endswith(COUNT_SUFFIX)}
        if not shown:
            return
        if log is None:
            if reduce_group is not None:
                import torch.distributed as dist

                if dist.get_rank(reduce_group) != 0:
                    return
            elif not is_rank_zero():
                return
        record = StatsRecord(tracker, current_step(step), shown, own_rank(), time.time_ns())
    except Exception as exc:  # noqa: BLE001
        guard.report(diagnostics.STATS_BACKEND_ERROR, "stats could not be logged: %r", exc)
        return
    for backend in backends:
        _call(backend, "log", record)
