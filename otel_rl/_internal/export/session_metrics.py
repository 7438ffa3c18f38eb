"""The session metrics: durations by status and phase, and sessions by status.

Two ways to the same three instruments (``rl.session.duration``,
``rl.session.phase.duration``, ``rl.sessions``):

- :class:`InstrumentSessionMetrics` records through the OpenTelemetry metrics
  API on a meter of the application's own ``MeterProvider`` (``configure(meter_provider=...)``).
- :class:`AggregatedSessionMetrics` is what otel_rl's own exporter uses: it
  aggregates in plain Python (a bisect and a few additions per value, where the
  SDK's ``record`` costs about 7 µs through views, attribute hashing and
  exemplar reservoirs) and hands the totals to the SDK's
  ``PeriodicExportingMetricReader`` once per interval, so the SDK's exporters,
  intervals, timeouts and temporality preference apply unchanged. The points
  are those the SDK would make: explicit-bucket histograms with min and max,
  one exemplar per bucket (the latest value that fell in it, from a sampled
  span under the default ``trace_based`` filter), start times as the SDK sets
  them for either temporality. The compiled session step (``_session_processor.c``) keeps
  the values it records in C and adds them to the same points a thousand at a time, under
  the lock, and before anything here reads or adds to them (:meth:`_drain`).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.environment_variables import OTEL_METRICS_EXEMPLAR_FILTER
from opentelemetry.sdk.metrics import Counter, Histogram, _Gauge as Gauge
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.metrics.export import Gauge as GaugeData
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.metrics._internal.exemplar import Exemplar
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from .. import diagnostics, guard, keys

try:
    from ._session_processor import drain_metrics as _drain_compiled
except ImportError:  # built without a C compiler: every value takes the methods below
    _drain_compiled = None

#: Bucket boundaries in seconds, from sub-second rewards to multi-minute rollouts.
DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

#: Bucket boundaries of staleness, in policy versions.
STALENESS_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64)

SESSION_DURATION = ("rl.session.duration", "s", "Session time from submission to finalization, by status")
PHASE_DURATION = ("rl.session.phase.duration", "s", "Duration of each session phase instance, by phase and status")
SESSIONS = ("rl.sessions", "{session}", "Finalized sessions by status")
STALENESS = ("rl.session.staleness", "{version}",
             "Policy versions between the oldest a consumed session saw and its consumer's")
CONSUMED = ("rl.sessions.consumed", "{session}",
            "Sessions consumed by training steps, by whether they saw a weight update")
STALE = ("rl.sessions.stale", "{session}", "Sessions rejected or dropped for staleness, by status")
WEIGHT_SYNC_DURATION = ("rl.weight_sync.duration", "s",
                        "Duration of weight syncs (otel_rl.weight_sync), by role: send or recv")
GAUGE = ("rl.gauge", "1", "Values of set_gauge and of sampled counters (sessions in flight, GPU memory), by name")

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class InstrumentSessionMetrics:
    """The session instruments on an application's meter (the metrics API's ``record`` per value)."""

    def __init__(self, meter: Any) -> None:
        self._session_duration = meter.create_histogram(
            SESSION_DURATION[0], unit=SESSION_DURATION[1], description=SESSION_DURATION[2],
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)
        self._phase_duration = meter.create_histogram(
            PHASE_DURATION[0], unit=PHASE_DURATION[1], description=PHASE_DURATION[2],
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)
        self._sessions = meter.create_counter(SESSIONS[0], unit=SESSIONS[1], description=SESSIONS[2])
        self._staleness = meter.create_histogram(STALENESS[0], unit=STALENESS[1], description=STALENESS[2],
                                                 explicit_bucket_boundaries_advisory=STALENESS_BUCKETS)
        self._consumed = meter.create_counter(CONSUMED[0], unit=CONSUMED[1], description=CONSUMED[2])
        self._stale = meter.create_counter(STALE[0], unit=STALE[1], description=STALE[2])
        self._gauge = meter.create_gauge(GAUGE[0], unit=GAUGE[1], description=GAUGE[2])
        self._weight_sync = meter.create_histogram(
            WEIGHT_SYNC_DURATION[0], unit=WEIGHT_SYNC_DURATION[1], description=WEIGHT_SYNC_DURATION[2],
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)

    def weight_sync(self, seconds: float, role: Any) -> None:
        """One weight sync of ``seconds``, sent or received."""
        self._weight_sync.record(seconds, {keys.WEIGHT_SYNC_ROLE: role})

    def staleness(self, staleness: Any, crossed_update: bool) -> None:
        """One consumed session: its staleness (``None`` when not numeric)."""
        if staleness is not None:
            self._staleness.record(staleness)
        self._consumed.add(1, {keys.SESSION_CROSSED_UPDATE: crossed_update})

    def stale(self, status: Any) -> None:
        """One session rejected or dropped for staleness."""
        self._stale.add(1, {keys.SESSION_STATUS: status})

    def gauge(self, name: str, value: float) -> None:
        """The latest value of gauge ``name``."""
        self._gauge.set(value, {keys.GAUGE_NAME: name})

    def phase(self, seconds: float, phase: Any, status: str, trace_id: int, span_id: int, flags: int) -> None:
        """One phase instance of ``seconds`` (exemplar: the phase span)."""
        self._phase_duration.record(seconds, {keys.PHASE: phase, "status": status},
                                    context=_span_context(trace_id, span_id, flags))

    def session(self, seconds: float, status: Any, trace_id: int, span_id: int, flags: int) -> None:
        """One finalized session of ``seconds`` (exemplar: the session span)."""
        labels = {keys.SESSION_STATUS: status}
        self._session_duration.record(seconds, labels, context=_span_context(trace_id, span_id, flags))
        self._sessions.add(1, labels)


def _span_context(trace_id: int, span_id: int, flags: int) -> Any:
    # Exemplars link a histogram bucket to the trace; the metrics SDK takes the
    # span from the context passed to record().
    return trace_api.set_span_in_context(NonRecordingSpan(SpanContext(trace_id, span_id, False, TraceFlags(flags))))


class _Points:
    """One instrument's points by attribute set: histogram state, a sum or a gauge's last value."""

    __slots__ = ("name", "unit", "description", "kind", "bounds", "histogram", "points")

    def __init__(self, spec: tuple[str, str, str], kind: type, bounds: tuple = ()) -> None:
        self.name, self.unit, self.description = spec
        #: The SDK instrument class whose temporality preference applies (Histogram, Counter, Gauge).
        self.kind = kind
        self.bounds = bounds
        self.histogram = kind is Histogram
        # attributes key -> [attributes, start ns, count, sum since the last collection, min, max,
        # bucket counts, exemplars by bucket, sum collected before]
        self.points: dict[Any, list[Any]] = {}


class AggregatedSessionMetrics:
    """The session instruments aggregated here and collected by an SDK metric reader.

    Args:
        resource: The resource the points are reported under.
        environ: Where ``OTEL_METRICS_EXEMPLAR_FILTER`` is read (``trace_based``,
            the default, ``always_on`` or ``always_off``).
    """

    def __init__(self, resource: Resource, environ: Any) -> None:
        self._resource = resource
        self._scope = InstrumentationScope(keys.INSTRUMENTATION_NAME)
        exemplars = (environ.get(OTEL_METRICS_EXEMPLAR_FILTER) or "trace_based").strip().lower()
        #: 0: no exemplars; 1: from sampled spans; 2: from every span.
        self._exemplars = {"always_off": 0, "always_on": 2}.get(exemplars, 1)
        self._lock = threading.Lock()
        self._phase = _Points(PHASE_DURATION, Histogram, DURATION_BUCKETS_S)
        self._session = _Points(SESSION_DURATION, Histogram, DURATION_BUCKETS_S)
        self._sessions = _Points(SESSIONS, Counter)
        self._staleness = _Points(STALENESS, Histogram, STALENESS_BUCKETS)
        self._consumed = _Points(CONSUMED, Counter)
        self._stale = _Points(STALE, Counter)
        self._gauge = _Points(GAUGE, Gauge)
        self._weight_sync = _Points(WEIGHT_SYNC_DURATION, Histogram, DURATION_BUCKETS_S)
        #: In the order they are reported.
        self._all = (self._phase, self._session, self._sessions, self._staleness, self._consumed, self._stale,
                     self._gauge, self._weight_sync)
        self._collected_at: dict[int, int] = {}  # id(reader) -> time of its last collection

    def attach(self, reader: MetricReader) -> MetricReader:
        """Makes ``reader`` collect these metrics, as a ``MeterProvider`` would make it collect its own."""
        # The SDK has no public way to feed a reader metrics made elsewhere
        # (MetricProducer, open-telemetry/opentelemetry-python#4768); this is
        # the callback a MeterProvider registers on its readers.
        reader._set_collect_callback(self.collect)  # noqa: SLF001
        return reader

    def _drain(self) -> None:
        """Adds the values the compiled step holds for these metrics to their points, so that
        each key's values keep their order (the caller holds the lock)."""
        if _drain_compiled is not None:
            try:
                _drain_compiled(self)
            except Exception as exc:  # noqa: BLE001 - a collection must go on without them
                guard.report(diagnostics.METRICS_ERROR, "session metrics could not be recorded: %r", exc)

    def phase(self, seconds: float, phase: Any, status: str, trace_id: int, span_id: int, flags: int) -> None:
        """One phase instance of ``seconds`` (exemplar: the phase span)."""
        with self._lock:
            self._drain()
            self._histogram(self._phase, (phase, status), (keys.PHASE, phase, "status", status), seconds,
                            trace_id, span_id, flags)

    def session(self, seconds: float, status: Any, trace_id: int, span_id: int, flags: int) -> None:
        """One finalized session of ``seconds`` (exemplar: the session span)."""
        with self._lock:
            self._drain()
            self._histogram(self._session, status, (keys.SESSION_STATUS, status), seconds,
                            trace_id, span_id, flags)
            self._add(self._sessions, status, (keys.SESSION_STATUS, status), 1)

    def staleness(self, staleness: Any, crossed_update: bool) -> None:
        """One consumed session: its staleness in policy versions (``None`` when not numeric)."""
        with self._lock:
            if staleness is not None:
                self._histogram(self._staleness, None, (), staleness, 0, 0, 0)
            self._add(self._consumed, crossed_update, (keys.SESSION_CROSSED_UPDATE, crossed_update), 1)

    def weight_sync(self, seconds: float, role: Any) -> None:
        """One weight sync of ``seconds``, sent or received."""
        with self._lock:
            self._histogram(self._weight_sync, role, (keys.WEIGHT_SYNC_ROLE, role), seconds, 0, 0, 0)

    def stale(self, status: Any) -> None:
        """One session rejected or dropped for staleness."""
        with self._lock:
            self._add(self._stale, status, (keys.SESSION_STATUS, status), 1)

    def gauge(self, name: str, value: float) -> None:
        """The latest value of gauge ``name``."""
        with self._lock:
            point = self._gauge.points.get(name)
            if point is None:
                self._gauge.points[name] = [(keys.GAUGE_NAME, name), time.time_ns(), value]
            else:
                point[2] = value

    @staticmethod
    def _add(points: _Points, key: Any, attributes: tuple, value: int) -> None:
        point = points.points.get(key)
        if point is None:
            points.points[key] = [attributes, time.time_ns(), value]
        else:
            point[2] += value

    def _histogram(self, points: _Points, key: Any, attributes: tuple, value: float, trace_id: int,
                   span_id: int, flags: int) -> None:
        bounds = points.bounds
        bucket = bisect_left(bounds, value)
        point = points.points.get(key)
        now = time.time_ns()
        if point is None:
            counts = [0] * (len(bounds) + 1)
            point = points.points[key] = [attributes, now, 0, 0.0, value, value, counts, {}, 0.0]
        point[2] += 1
        point[3] += value
        if value < point[4]:
            point[4] = value
        if value > point[5]:
            point[5] = value
        point[6][bucket] += 1
        if span_id and (self._exemplars == 2 or (self._exemplars and flags & 1)):
            # The SDK's aligned-bucket reservoir: the latest value of each bucket.
            point[7][bucket] = (value, now, span_id, trace_id)

    # --- collection (the reader's thread) ------------------------------------------------------
    def collect(self, reader: MetricReader, timeout_millis: float = 10_000, **_: Any) -> MetricsData | None:
        """The points for ``reader`` now, in the temporality it prefers; ``None`` before the first value."""
        now = time.time_ns()
        prefs = getattr(reader, "_preferred_temporality", None) or {}
        with self._lock:
            self._drain()
            previous = self._collected_at.get(id(reader))
            self._collected_at[id(reader)] = now
            metrics = []
            for points in self._all:
                # Gauges report their last value whatever the temporality (as the SDK's do).
                temporality = prefs.get(points.kind, AggregationTemporality.CUMULATIVE)
                metric = self._metric(points, temporality, previous, now)
                if metric is not None:
                    metrics.append(metric)
                if temporality is AggregationTemporality.DELTA and points.kind is not Gauge:
                    points.points.clear()
                else:
                    for point in points.points.values():
                        if points.histogram:
                            # Sums added per collection, as the SDK's cumulative
                            # histograms add them (the same float, to the last bit).
                            point[8] += point[3]
                            point[3] = 0.0
                            point[7] = {}  # exemplars are reported once, as the SDK's reservoirs do
        if not metrics:
            return None  # as the SDK: nothing to export, no request
        return MetricsData(resource_metrics=[ResourceMetrics(
            resource=self._resource, schema_url=self._resource.schema_url,
            scope_metrics=[ScopeMetrics(scope=self._scope, metrics=metrics, schema_url="")])])

    def _metric(self, points: _Points, temporality: AggregationTemporality, previous: int | None,
                now: int) -> Metric | None:
        if not points.points:
            return None
        delta = temporality is AggregationTemporality.DELTA
        data_points = []
        for point in points.points.values():
            attributes = dict(zip(point[0][::2], point[0][1::2]))
            # Delta points start at the previous collection, cumulative ones at their first value.
            start = previous if delta and previous is not None else point[1]
            if points.histogram:
                exemplars = [Exemplar({}, value, at, span_id, trace_id)
                             for _, (value, at, span_id, trace_id) in sorted(point[7].items())]
                data_points.append(HistogramDataPoint(
                    attributes=attributes, start_time_unix_nano=start, time_unix_nano=now, count=point[2],
                    sum=point[8] + point[3], bucket_counts=tuple(point[6]), explicit_bounds=points.bounds,
                    min=point[4], max=point[5], exemplars=exemplars))
            elif points.kind is Gauge:
                data_points.append(NumberDataPoint(attributes=attributes, start_time_unix_nano=None,
                                                   time_unix_nano=now, value=point[2], exemplars=[]))
            else:
                data_points.append(NumberDataPoint(attributes=attributes, start_time_unix_nano=start,
                                                   time_unix_nano=now, value=point[2], exemplars=[]))
        if points.histogram:
            data: Any = HistogramData(data_points=data_points, aggregation_temporality=temporality)
        elif points.kind is Gauge:
            data = GaugeData(data_points=data_points)
        else:
            data = Sum(data_points=data_points, aggregation_temporality=temporality, is_monotonic=True)
        return Metric(name=points.name, description=points.description, unit=points.unit, data=data)
