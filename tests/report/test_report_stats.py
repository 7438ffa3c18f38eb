"""The report's statistics helpers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from otel_rl.report._stats import histogram

_values = st.lists(st.one_of(st.floats(-50, 150), st.sampled_from([0.0, 10.0, 25.0, 100.0, 120.0])), max_size=300)


@given(_values, st.integers(1, 12), st.sampled_from([(None, None), (0.0, 100.0), (10.0, 10.0), (20.0, 40.0)]))
def test_a_histogram_of_sorted_values_counted_by_bisection_is_the_one_counted_value_by_value(values, bins, bounds):
    # Values on the edges, below the lower edge and above the upper one land in the same bins.
    lo, hi = bounds
    ordered = sorted(values)
    assert histogram(ordered, bins, lo, hi, presorted=True) == histogram(values, bins, lo, hi)
