"""Turning recorded statistics into exported values, in one process or across ranks.

A tracker keeps, per key, a handful of running numbers (sum, count, non-finite
count, min, max) instead of the tensors themselves; this module turns them into
AReaL's exported keys. Across a ``torch.distributed`` group every rank first
learns the union of keys (so each rank issues the same collectives in the same
order, whatever it recorded), then two ``all_reduce`` calls carry every key at
once: one SUM over (sum, count, non-finite) and one MIN over (min, -max).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from . import guard

logger = logging.getLogger("otel_rl")

INF = float("inf")

# What a key holds; together with the reduce type it decides how it exports.
SCALAR = "scalar"
DENOMINATOR = "denominator"
STAT = "stat"

COUNT_SUFFIX = "__count"
NONFINITE_SUFFIX = "__nonfinite"

#: Fields of a :class:`Partial` that may still be tensors when taken from a tracker.
FIELDS = ("total", "count", "nonfinite", "low", "high")


@dataclasses.dataclass
class Partial:
    """One key's contribution: plain floats, identity values when nothing was recorded."""

    kind: str
    reduce: str  # a ReduceType name
    total: float = 0.0
    count: float = 0.0
    nonfinite: float = 0.0
    low: float = INF
    high: float = -INF


def materialize(raw: Mapping[str, tuple[str, str, dict[str, Any]]]) -> dict[str, Partial]:
    """Builds :class:`Partial` values from ``{key: (kind, reduce, {field: number or tensor})}``.

    Tensors are moved to the host with one transfer per device, so exporting
    costs one synchronisation per device rather than one per key and field.
    """
    partials: dict[str, Partial] = {}
    pending: list[tuple[Partial, str, Any]] = []
    for key, (kind, reduce, fields) in raw.items():
        partial = partials[key] = Partial(kind, reduce)
        for name, value in fields.items():
            if value is None:
                continue
            if isinstance(value, (int, float)):
                setattr(partial, name, float(value))
            else:
                pending.append((partial, name, value))
    if pending:
        _fill_from_tensors(pending)
    return partials


def _fill_from_tensors(pending: list[tuple[Partial, str, Any]]) -> None:
    import torch

    by_device: dict[Any, list[tuple[Partial, str, Any]]] = {}
    for item in pending:
        by_device.setdefault(item[2].device, []).append(item)
    for device, items in by_device.items():
        # MPS has no float64; its sums were kept in float32 already.
        dtype = torch.float32 if device.type == "mps" else torch.float64
        values = torch.stack([t.detach().reshape(()).to(dtype) for _, _, t in items]).cpu().tolist()
        for (partial, name, _), value in zip(items, values):
            setattr(partial, name, float(value))


def results(key: str, partial: Partial) -> dict[str, float | int]:
    """AReaL's exported keys for one key: ``key``, ``key/avg|min|max``, ``key__count``.

    A value with nothing behind it (an average over an all-false mask, the
    min of no element) is left out rather than reported as 0.
    """
    out: dict[str, float | int] = {}
    if partial.kind == SCALAR:
        if partial.count > 0:
            out[key] = partial.total / partial.count
        out[key + COUNT_SUFFIX] = int(partial.count)
    elif partial.kind == DENOMINATOR:
        out[key] = partial.total
    else:
        avg = partial.total / partial.count if partial.count > 0 else None
        low = partial.low if partial.low != INF else None
        high = partial.high if partial.high != -INF else None
        reduce = partial.reduce
        if reduce == "AVG_MIN_MAX":
            for suffix, value in (("avg", avg), ("min", low), ("max", high)):
                if value is not None:
                    out[f"{key}/{suffix}"] = value
        else:
            value = {"AVG": avg, "SUM": partial.total, "MIN": low, "MAX": high}[reduce]
            if value is not None:
                out[key] = value
    if partial.nonfinite:
        out[key + NONFINITE_SUFFIX] = int(partial.nonfinite)
    return out


def report_nonfinite(tracker: str, partials: Mapping[str, Partial], warned: set[str]) -> None:
    """Counts this rank's excluded NaN / inf values; warns once per key."""
    for key, partial in partials.items():
        if not partial.nonfinite:
            continue
        guard.count("stats_nonfinite_values", int(partial.nonfinite))
        if key not in warned:
            warned.add(key)
            logger.warning("otel_rl.stats: %d NaN/inf value(s) of `%s` (tracker %r) were left out of its "
                           "statistics and exported as `%s%s`; later ones are counted in diagnostics()",
                           int(partial.nonfinite), key, tracker, key, NONFINITE_SUFFIX)


# --------------------------------------------------------------------------- distributed


def reduce_across(group: Any, local: Mapping[str, Mapping[str, Partial]]) -> dict[str, dict[str, Partial]]:
    """Reduces ``{tracker: {key: Partial}}`` over ``group``; every rank gets the same result.

    Keys recorded with different kinds or reduce types on different ranks
    cannot be combined: every rank leaves them out (and reports it), so the
    collectives still line up.
    """
    import torch
    import torch.distributed as dist

    device = _collective_device(group)
    mine = {tracker: {key: [p.kind, p.reduce] for key, p in keys.items()} for tracker, keys in local.items()}
    union: dict[str, dict[str, list[str]]] = {}
    conflicts: set[tuple[str, str]] = set()
    for theirs in _all_gather_json(mine, group, device):
        for tracker, keys in theirs.items():
            known = union.setdefault(tracker, {})
            for key, meta in keys.items():
                if known.setdefault(key, meta) != meta:
                    conflicts.add((tracker, key))
    for tracker, key in sorted(conflicts):
        guard.report("stats_inconsistent_key",
                     "stats key `%s` (tracker %r) was recorded with different kinds or reduce types on "
                     "different ranks; it is left out of the export", key, tracker)
    order = [(tracker, key) for tracker in sorted(union) for key in sorted(union[tracker])
             if (tracker, key) not in conflicts]
    out: dict[str, dict[str, Partial]] = {tracker: {} for tracker in union}
    if not order:
        return out
    sums: list[float] = []
    mins: list[float] = []
    for tracker, key in order:
        partial = local.get(tracker, {}).get(key) or Partial(*union[tracker][key])
        sums += (partial.total, partial.count, partial.nonfinite)
        mins += (partial.low, -partial.high)
    summed = torch.tensor(sums, dtype=torch.float64, device=device)
    lowest = torch.tensor(mins, dtype=torch.float64, device=device)
    dist.all_reduce(summed, op=dist.ReduceOp.SUM, group=group)
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN, group=group)
    summed_list, lowest_list = summed.cpu().tolist(), lowest.cpu().tolist()
    for i, (tracker, key) in enumerate(order):
        kind, reduce = union[tracker][key]
        out[tracker][key] = Partial(kind, reduce, summed_list[3 * i], summed_list[3 * i + 1],
                                    summed_list[3 * i + 2], lowest_list[2 * i], -lowest_list[2 * i + 1])
    return out


def _collective_device(group: Any) -> Any:
    """Where the group's backend wants tensors: host memory for gloo / MPI, the accelerator otherwise."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend(group)).lower()
    if "gloo" in backend or "mpi" in backend:
        return torch.device("cpu")
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return torch.device(accelerator.current_accelerator().type, accelerator.current_device_index())
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _all_gather_json(obj: Any, group: Any, device: Any) -> list[Any]:
    """``all_gather_object`` for JSON values, on plain byte tensors.

    Avoids pickle (another rank's bytes are never executed) and the numpy
    dependency of torch's object collectives.
    """
    import torch
    import torch.distributed as dist

    data = orjson.dumps(obj)
    world = dist.get_world_size(group)
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    lengths = [int(s.item()) for s in sizes]
    buffer = torch.zeros(max(lengths), dtype=torch.uint8, device=device)
    buffer[: len(data)] = torch.tensor(list(data), dtype=torch.uint8, device=device)
    buffers = [torch.empty_like(buffer) for _ in range(world)]
    dist.all_gather(buffers, buffer, group=group)
    return [orjson.loads(bytes(b[:n].cpu().tolist())) for b, n in zip(buffers, lengths)]


# --------------------------------------------------------------------------- rollout workers


def merge_worker_stats(worker_stats: Iterable[Mapping[str, Any]], *, keep_counts: bool = False) -> dict[str, float]:
    """Merges the exports of several processes that share no process group.

    AReaL's rollout-controller rule: a key with a ``key__count`` companion is
    the count-weighted average of the workers' values. Beyond it, ``.../min``
    and ``.../max`` keys take the min and max, and ``__nonfinite`` counts add
    up. Other keys carry no weight to merge by and are left out (logged once).

    Args:
        worker_stats: One ``export()`` / ``export_all()`` result per worker.
        keep_counts: Also return the summed ``key__count`` values (AReaL drops them).

    Returns:
        The merged statistics.
    """
    stats = [dict(s) for s in worker_stats]
    weighted: dict[str, float] = {}
    weights: dict[str, float] = {}
    counts: dict[str, float] = {}
    extremes: dict[str, float] = {}
    nonfinite: dict[str, int] = {}
    dropped: set[str] = set()
    for one in stats:
        for key, value in one.items():
            if key.endswith(COUNT_SUFFIX):
                counts[key] = counts.get(key, 0) + value
            elif key.endswith(NONFINITE_SUFFIX):
                nonfinite[key] = nonfinite.get(key, 0) + int(value)
            elif key + COUNT_SUFFIX in one:
                count = one[key + COUNT_SUFFIX]
                weights.setdefault(key, 0.0)
                weighted.setdefault(key, 0.0)
                if count > 0 and math.isfinite(value):
                    weighted[key] += value * count
                    weights[key] += count
            elif key.endswith(("/min", "/max")) and math.isfinite(value):
                pick = min if key.endswith("/min") else max
                extremes[key] = pick(extremes.get(key, value), value)
            else:
                dropped.add(key)
    merged: dict[str, float] = {key: weighted[key] / w for key, w in weights.items() if w > 0}
    merged.update(extremes)
    merged.update(nonfinite)
    if keep_counts:
        merged.update({key: int(value) for key, value in counts.items()})
    dropped -= merged.keys()
    if dropped:
        guard.report("stats_merge_unweighted", "merge_worker_stats left out %s: no `__count` to weight them by "
                     "(only scalar() keys, min and max merge across workers)", sorted(dropped))
    return merged
