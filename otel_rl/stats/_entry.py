"""One key's running reduction: what each stats call adds, and what export reads back.

Every recorded tensor is reduced when it is recorded (masked sum, count, NaN
count, min, max), kept on its device without synchronising, so memory does
not grow with the batches of a step.
"""

from __future__ import annotations

import itertools
from typing import Any

from .._internal.stats.reduce import COMPACT, DENOMINATOR, SCALAR, STAT, WEIGHTED, Partial, results
from ._types import ReduceType

_generations = itertools.count(1)

#: What each kind of key is called in misuse messages.
KIND_NAMES = {
    SCALAR: "scalar() values",
    DENOMINATOR: "a denominator() mask",
    STAT: "non-compact stats (stat())",
    COMPACT: "compact stats (stat_compact())",
    WEIGHTED: "weighted_mean() values",
}


class Entry:
    """One key of one tracker. Numbers are Python floats (scalars) or 0-d
    tensors on the recorded tensor's device (everything else)."""

    __slots__ = ("kind", "reduce", "denominator", "group", "total", "count", "nonfinite", "nan", "low",
                 "high", "masks", "generation", "paired", "paired_generation")

    def __init__(self, kind: str, reduce: ReduceType, denominator: str | None = None) -> None:
        self.kind = kind
        self.reduce = reduce
        self.denominator = denominator
        # AReaL's per-key reduce_group: set by any call that gives one, kept until export.
        self.group: Any = None
        # Scalars count in Python floats; tensor entries start empty so their
        # first reduction sets the dtype (an int64 count stays exact).
        zero = 0.0 if kind == SCALAR else None
        self.total: Any = zero
        self.count: Any = zero
        self.nonfinite: Any = zero
        self.nan: Any = zero
        self.low: Any = None
        self.high: Any = None
        # Denominators keep their masks so the n-th stat() of a key pairs with
        # the n-th denominator() (AReaL's rule); the generation tells a stat
        # whether the denominator it paired with was exported and started over.
        self.masks: list[Any] = []
        self.generation = next(_generations)
        self.paired = 0
        self.paired_generation = 0

    def snapshot(self) -> tuple[str, str, dict[str, Any]]:
        return self.kind, self.reduce.name, {"total": self.total, "count": self.count, "nonfinite": self.nonfinite,
                                             "nan": self.nan, "low": self.low, "high": self.high}


def accumulate(torch: Any, entry: Entry, value: Any, mask: Any) -> None:
    """Adds the elements of ``value`` where ``mask`` is true to ``entry`` (sum, count, NaN, min, max)."""
    value = value.detach()
    if mask.device != value.device:
        mask = mask.to(value.device, non_blocking=True)
    # float64 sums unless the device has no float64 (MPS).
    acc = torch.float32 if value.device.type == "mps" else torch.float64
    if not value.is_floating_point():
        value = value.to(acc)
    # As AReaL: NaN / inf inside the mask go into the sum (and so the average);
    # NaN is counted apart so min / max can report it, as torch.min does.
    total = torch.where(mask, value, 0).sum(dtype=acc)
    count = mask.sum()
    isnan = torch.isnan(value)
    nan = (mask & isnan).sum()
    nonfinite = (mask & ~torch.isfinite(value)).sum()
    ordered = mask & ~isnan
    low = torch.where(ordered, value, float("inf")).min().to(acc)
    high = torch.where(ordered, value, float("-inf")).max().to(acc)
    entry.total = add_to(entry.total, total)
    entry.count = add_to(entry.count, count)
    entry.nan = add_to(entry.nan, nan)
    entry.nonfinite = add_to(entry.nonfinite, nonfinite)
    entry.low = low if entry.low is None else torch.minimum(entry.low, low)
    entry.high = high if entry.high is None else torch.maximum(entry.high, high)


def add_to(total: Any, value: Any) -> Any:
    """``total + value``, where a ``total`` of ``None`` (nothing recorded yet) takes ``value``'s type."""
    return value if total is None else total + value


def results_of(partials: dict[str, Partial]) -> dict[str, float]:
    """The exported values (AReaL's key names) of reduced partials."""
    out: dict[str, float] = {}
    for key in partials:
        out.update(results(key, partials[key]))
    return out
