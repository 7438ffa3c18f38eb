"""The session metrics aggregated in the exporter equal what the metrics SDK makes of the same values."""

from __future__ import annotations

import dataclasses
import random

import pytest
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource

from otel_rl._internal.export.session_metrics import AggregatedSessionMetrics, InstrumentSessionMetrics

RESOURCE = Resource({"service.name": "test"})


def _values(seed=0, n=300):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = rng.choice(("phase", "phase", "session"))
        # Values on bucket edges too: an edge belongs to the bucket below it.
        seconds = rng.choice((rng.lognormvariate(-2, 2), 0.005, 1, 600, 700.0))
        out.append((kind, seconds, rng.choice(("generate", "reward")), rng.choice(("accepted", "rejected")),
                    rng.getrandbits(128) or 1, rng.getrandbits(64) or 1, rng.choice((0, 1))))
    return out


def _feed(metrics, values):
    for i, (kind, seconds, phase, status, trace_id, span_id, flags) in enumerate(values):
        if kind == "phase":
            metrics.phase(seconds, phase, "ok", trace_id, span_id, flags)
        else:
            metrics.session(seconds, status, trace_id, span_id, flags)
        if i % 3 == 0:
            metrics.staleness(i % 7 if i % 5 else None, bool(i % 2))
        if i % 11 == 0:
            metrics.stale(status)
        if i % 13 == 0:
            metrics.weight_sync(seconds, "recv" if i % 2 else "send")
        metrics.gauge(phase, float(i))


def _points(reader):
    """Every point as a plain dict, without its timestamps."""
    data = reader.get_metrics_data()
    out = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    as_dict = {k: v for k, v in dataclasses.asdict(point).items()
                               if k not in ("start_time_unix_nano", "time_unix_nano")}
                    as_dict["exemplars"] = sorted((e.value, e.span_id, e.trace_id) for e in point.exemplars)
                    as_dict["bucket_counts"] = list(as_dict.get("bucket_counts", ()))
                    as_dict["explicit_bounds"] = list(as_dict.get("explicit_bounds", ()))
                    key = (metric.name, metric.unit, metric.description,
                           tuple(sorted(point.attributes.items())), getattr(metric.data, "aggregation_temporality", None))
                    out[key] = as_dict
    return out


def _sdk_reader(temporality):
    reader = InMemoryMetricReader(preferred_temporality=temporality)
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE, shutdown_on_exit=False)
    return reader, InstrumentSessionMetrics(provider.get_meter("otel_rl"))


def _own_reader(temporality, environ=None):
    reader = InMemoryMetricReader(preferred_temporality=temporality)
    metrics = AggregatedSessionMetrics(RESOURCE, environ or {})
    metrics.attach(reader)
    return reader, metrics


@pytest.mark.parametrize("temporality", [AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA])
def test_aggregated_points_equal_the_sdks_over_two_collections(temporality):
    prefs = {Histogram: temporality, Counter: temporality}  # a gauge reports its last value either way
    sdk_reader, sdk = _sdk_reader(prefs)
    own_reader, own = _own_reader(prefs)
    for seed in (1, 2):
        values = _values(seed)
        _feed(sdk, values)
        _feed(own, values)
        expected = _points(sdk_reader)
        assert expected  # the comparison covers points
        assert _points(own_reader) == expected


def test_exemplars_follow_the_exemplar_filter():
    values = _values(3)
    for name in ("always_on", "always_off", "trace_based"):
        own_reader, own = _own_reader(None, {"OTEL_METRICS_EXEMPLAR_FILTER": name})
        _feed(own, values)
        exemplars = [e for p in _points(own_reader).values() for e in p["exemplars"]]
        if name == "always_off":
            assert exemplars == []
        else:
            assert exemplars


def test_start_times_are_the_first_value_then_the_previous_collection_for_delta():
    reader, metrics = _own_reader({Histogram: AggregationTemporality.DELTA})
    metrics.session(1.0, "accepted", 1, 1, 1)
    first = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics[0].data.data_points[0]
    metrics.session(2.0, "accepted", 1, 2, 1)
    second = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics[0].data.data_points[0]
    assert first.start_time_unix_nano < first.time_unix_nano
    assert second.start_time_unix_nano == first.time_unix_nano
    assert (first.count, second.count, second.sum) == (1, 1, 2.0)


def test_nothing_is_exported_before_the_first_value():
    reader, _ = _own_reader(None)
    assert reader.get_metrics_data() is None
