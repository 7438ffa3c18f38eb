"""Small, dependency-free statistics shared by the report views."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

#: Percentiles of the long-tail view (verl's CDF plus p99.9).
TAIL_PERCENTILES = (50.0, 80.0, 90.0, 95.0, 99.0, 99.9)


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (NumPy's default, sglang-omni's ``_percentile``):
    the one definition every view of a run uses (reports, the demo's summary, the bench).

    Args:
        sorted_values: Values in ascending order.
        q: Percentile in ``[0, 100]``.

    Returns:
        The percentile, or ``None`` for no values.
    """
    n = len(sorted_values)
    if n == 0:
        return None
    if n == 1:
        return float(sorted_values[0])
    k = (n - 1) * q / 100.0
    lo = int(math.floor(k))
    hi = min(lo + 1, n - 1)
    low = sorted_values[lo]
    return float(low + (sorted_values[hi] - low) * (k - lo))


def pct_key(q: float) -> str:
    """``50`` -> ``"p50"``, ``99.9`` -> ``"p99.9"``."""
    return f"p{q:g}"


def summarize(values: Iterable[float], unit: str = "s", scale: float = 1.0,
              percentiles: Sequence[float] = (50.0, 95.0, 99.0), presorted: bool = False) -> dict[str, Any]:
    """Count, total, average, percentiles and max of durations.

    Args:
        values: Durations (any order).
        unit: Suffix of the keys (``total_s``, ``p95_ms``...).
        scale: Multiplier applied to every value (``1000`` for seconds to ms).
        percentiles: Which percentiles.
        presorted: ``values`` is a list already in ascending order.

    Returns:
        ``{"count", "total_<unit>", "avg_<unit>", "p50_<unit>", ..., "max_<unit>"}``
        (``None`` statistics for no values).
    """
    data = values if presorted else sorted(values)
    n = len(data)
    total = math.fsum(data)
    out: dict[str, Any] = {"count": n, f"total_{unit}": total * scale,
                           f"avg_{unit}": total / n * scale if n else None}
    for q in percentiles:
        p = percentile(data, q)
        out[f"{pct_key(q)}_{unit}"] = None if p is None else p * scale
    out[f"max_{unit}"] = data[-1] * scale if n else None
    return out


def histogram(values: Sequence[float], bins: int, lo: float | None = None,
              hi: float | None = None, presorted: bool = False) -> dict[str, Any]:
    """Equal-width histogram.

    Args:
        values: The data.
        bins: Number of bins.
        lo: Lower edge (the minimum by default).
        hi: Upper edge (the maximum by default); values above it land in the last bin.
        presorted: ``values`` are in ascending order (each bin is then counted by two
            bisections, not value by value).

    Returns:
        ``{"edges": [bins + 1 floats], "counts": [bins ints]}``.
    """
    if not values:
        return {"edges": [], "counts": []}
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    if hi <= lo:
        hi = lo + 1e-9
    width = (hi - lo) / bins
    edges = [lo + i * width for i in range(bins + 1)]
    # lo + bins * width can round to just below hi, leaving the maximum outside
    # the last edge for any reader that bins by the edges (numpy does).
    edges[-1] = hi
    last = bins - 1
    if presorted:
        # The same bins as below: bin i holds edges[i] <= v < edges[i + 1], the first also
        # everything below, the last everything from edges[last] on.
        cuts = [0] + [bisect_left(values, e) for e in edges[1:bins]] + [len(values)]
        return {"edges": edges, "counts": [cuts[i + 1] - cuts[i] for i in range(bins)]}
    counts = [0] * bins
    for v in values:
        # Placed by the edges reported, not by (v - lo) / width: a value on an
        # edge must land where a reader of the edges expects (bins are half
        # open, the last one closed), whatever the float rounding.
        i = bisect_right(edges, v) - 1
        if i > last:
            i = last
        elif i < 0:
            i = 0
        counts[i] += 1
    return {"edges": edges, "counts": counts}


def clip_high(sorted_values: Sequence[float]) -> float:
    """Upper edge for a histogram: the maximum, or the p99.5 when the maximum is
    more than three times it (a far tail would squash every other bin into one)."""
    if not sorted_values:
        return 1.0
    top = float(sorted_values[-1])
    p = percentile(sorted_values, 99.5) or 0.0
    return p if p > 0 and top > 3 * p else top


def quantile_curve(sorted_values: Sequence[float], points: int = 200) -> dict[str, list[float]]:
    """An empirical CDF thinned to at most ``points`` points, for plotting.

    Returns:
        ``{"x": values, "y": fraction of values <= x}``.
    """
    n = len(sorted_values)
    if n == 0:
        return {"x": [], "y": []}
    if n <= points:
        idx = range(n)
    else:
        idx = sorted({round(i * (n - 1) / (points - 1)) for i in range(points)})
    return {"x": [float(sorted_values[i]) for i in idx], "y": [(i + 1) / n for i in idx]}


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping ``(start, end)`` intervals."""
    if not intervals:
        return 0.0
    intervals = sorted(intervals)
    total = 0.0
    cur_s, cur_e = intervals[0]
    for s, e in intervals[1:]:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    return total + (cur_e - cur_s)


def step_sort_key(step: Any) -> tuple[int, Any]:
    """Orders steps numerically, ``None`` (no step) last."""
    if step is None:
        return (2, 0)
    if isinstance(step, (int, float)):
        return (0, step)
    return (1, str(step))
