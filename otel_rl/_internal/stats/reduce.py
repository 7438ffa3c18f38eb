"""Turning recorded statistics into exported values, in one process or across ranks.

A tracker keeps, per key, a handful of running numbers (sum, count, NaN
count, min, max) instead of the tensors themselves; this module turns them
into AReaL's exported keys with AReaL's values: NaN and inf propagate into
sums and averages, a NaN makes min and max NaN, and an infinite min or max is
left out.

Across ``torch.distributed`` groups every rank first learns the union of keys
of the group it reduces over (so each rank issues the same collectives in the
same order, whatever it recorded), then two ``all_reduce`` calls per group
carry every key at once: one SUM over (sum, count, non-finite, NaN) and one
MIN over (min, -max). As in AReaL, keys recorded with a per-key
``reduce_group`` are reduced over that group, or over ``key_sync_group`` when
the export gives one; other keys over the export's ``reduce_group``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from .. import diagnostics, guard

logger = logging.getLogger("otel_rl")

INF = float("inf")

# What a key holds; together with the reduce type it decides how it exports.
SCALAR = "scalar"
DENOMINATOR = "denominator"
STAT = "stat"
#: ``stat_compact()``: a stat whose mask came with the call instead of a denominator key.
COMPACT = "compact"
#: ``weighted_mean()``: a sum of value x weight over a sum of weights.
WEIGHTED = "weighted"

COUNT_SUFFIX = "__count"
#: Older otel_rl exports counted NaN / inf values under this suffix; merge_worker_stats still adds them up.
NONFINITE_SUFFIX = "__nonfinite"

#: Fields of a :class:`Partial` that may still be tensors when taken from a tracker.
FIELDS = ("total", "count", "nonfinite", "nan", "low", "high")


@dataclasses.dataclass
class Partial:
    """One key's contribution: plain floats, identity values when nothing was recorded.

    ``total`` and ``count`` are the masked sum and number of elements (for
    weighted keys: sum of value x weight and sum of weights); ``nonfinite``
    and ``nan`` count NaN / inf and NaN elements among them; ``low`` and
    ``high`` are the min and max of the elements that are not NaN.
    """

    kind: str
    reduce: str  # a ReduceType name
    total: float = 0.0
    count: float = 0.0
    nonfinite: float = 0.0
    nan: float = 0.0
    low: float = INF
    high: float = -INF


def materialize(raw: Mapping[str, tuple[str, str, dict[str, Any]]]) -> dict[str, Partial]:
    """Builds :class:`Partial` values from ``{key: (kind, reduce, {field: number or tensor})}``.

    Tensors are moved to the host with one transfer per device, so exporting
    costs one synchronisation per device rather than one per key and field.
    Never raises on recorded data: a key whose tensors cannot be read (a device
    that failed, a tensor subclass that refuses the copy) is left out and
    counted as ``stats_export_error``; the other keys export.
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
        failed = _fill_from_tensors(pending)
        for key in [k for k, p in partials.items() if id(p) in failed]:
            guard.report(diagnostics.STATS_EXPORT_ERROR, "stats key `%s` could not be read at export (%s); it is "
                         "left out", key, failed[id(partials[key])])
            del partials[key]
    return partials


def _fill_from_tensors(pending: list[tuple[Partial, str, Any]]) -> dict[int, str]:
    """Sets the pending fields from their tensors; ``{id(partial): error}`` of those that failed."""
    import torch

    by_device: dict[Any, list[tuple[Partial, str, Any]]] = {}
    for item in pending:
        try:
            device = item[2].device
        except Exception:  # noqa: BLE001 - read one by one below, and fail there
            device = None
        by_device.setdefault(device, []).append(item)
    failed: dict[int, str] = {}
    for device, items in by_device.items():
        try:
            values = _to_host(torch, device, items)
        except Exception:  # noqa: BLE001 - find the ones that cannot be read, keep the rest
            values = []
            for item in items:
                try:
                    values.append(_to_host(torch, device, [item])[0])
                except Exception as exc:  # noqa: BLE001
                    failed[id(item[0])] = f"{type(exc).__name__}: {exc}"[:200]
                    values.append(None)
        for (partial, name, _), value in zip(items, values):
            if value is not None:
                setattr(partial, name, float(value))
    return failed


def _to_host(torch: Any, device: Any, items: list[tuple[Partial, str, Any]]) -> list[float]:
    # MPS has no float64; its sums were kept in float32 already.
    dtype = torch.float32 if device is not None and device.type == "mps" else torch.float64
    return torch.stack([t.detach().reshape(()).to(dtype) for _, _, t in items]).cpu().tolist()


def _extreme(value: float, nan: float) -> float | None:
    # AReaL: a NaN among the elements makes the min / max NaN (torch.min
    # propagates it); an infinite min / max (also: no element at all) is left out.
    if nan:
        return math.nan
    return value if math.isfinite(value) else None


def results(key: str, partial: Partial) -> dict[str, float | int]:
    """AReaL's exported keys and values for one key: ``key``, ``key/avg|min|max``, ``key__count``.

    As AReaL: an average over no element is left out, a sum over none is 0,
    a scalar key with no value anywhere exports 0.0 and a count of 0.
    """
    out: dict[str, float | int] = {}
    if partial.kind == SCALAR:
        out[key] = partial.total / partial.count if partial.count > 0 else 0.0
        out[key + COUNT_SUFFIX] = int(partial.count)
    elif partial.kind == DENOMINATOR:
        out[key] = partial.total
    elif partial.kind == WEIGHTED:
        if partial.count != 0:
            out[key] = partial.total / partial.count
    else:
        avg = partial.total / partial.count if partial.count > 0 else None
        low = _extreme(partial.low, partial.nan)
        high = _extreme(partial.high, partial.nan)
        reduce = partial.reduce
        if reduce == "AVG_MIN_MAX":
            for suffix, value in (("avg", avg), ("min", low), ("max", high)):
                if value is not None:
                    out[f"{key}/{suffix}"] = value
        else:
            value = {"AVG": avg, "SUM": partial.total, "MIN": low, "MAX": high}.get(reduce)
            if value is not None:
                out[key] = value
    return out


def report_nonfinite(tracker: str, partials: Mapping[str, Partial], warned: set[str]) -> None:
    """Counts this rank's NaN / inf values in diagnostics; warns once per key.

    The values themselves are exported as AReaL exports them (a NaN average);
    this only makes their origin findable without changing the export.
    """
    for key, partial in partials.items():
        if not partial.nonfinite:
            continue
        guard.count(diagnostics.STATS_NONFINITE_VALUES, int(partial.nonfinite))
        if key not in warned:
            warned.add(key)
            logger.warning("otel_rl.stats: %d NaN/inf value(s) were recorded for `%s` (tracker %r); as in "
                           "AReaL they propagate into its exported statistics; later ones are counted in "
                           "diagnostics()", int(partial.nonfinite), key, tracker)


# --------------------------------------------------------------------------- distributed

Local = Mapping[str, Mapping[str, Partial]]
Meta = list  # [kind, reduce, has per-key group]


def reduce_stats(local: Local, groups: Mapping[tuple[str, str], Any] | None = None, *,
                 reduce_group: Any = None, key_sync_group: Any = None,
                 gather_group: Any = None) -> dict[str, dict[str, Partial]]:
    """Reduces ``{tracker: {key: Partial}}`` as AReaL's ``export`` does; every rank of a group gets the same.

    Args:
        local: This rank's partials by tracker and key.
        groups: Per-key reduce groups, ``{(tracker, key): group}``, for keys
            recorded with ``reduce_group=``.
        reduce_group: Group of the keys without a per-key group (``None``: not reduced).
        key_sync_group: When given, keys with a per-key group (on any rank of
            it) are exchanged and reduced over this group instead of their own.
        gather_group: Group for the key exchange of ``reduce_group`` (AReaL's
            older ``gloo_group``); the same ranks as ``reduce_group``.

    Returns:
        The reduced partials; trackers another rank has appear, maybe empty.
        Keys recorded with different kinds or reduce types on different ranks
        are left out on every rank and reported (AReaL raises instead).
    """
    groups = groups or {}
    if reduce_group is None and key_sync_group is None and not groups:
        return {tracker: dict(keys) for tracker, keys in local.items()}
    mine = {tracker: {key: [p.kind, p.reduce, (tracker, key) in groups] for key, p in keys.items()}
            for tracker, keys in local.items()}
    out: dict[str, dict[str, Partial]] = {tracker: {} for tracker in local}
    per_key: dict[int, tuple[Any, list[tuple[str, str]]]] = {}

    # Keys without a per-key group: exchanged and reduced over reduce_group.
    if reduce_group is not None:
        gathered = _all_gather_json(mine, gather_group or reduce_group)
    else:
        gathered = [mine]
    union, conflicts = _merge(gathered)
    default_order: list[tuple[str, str]] = []
    for tracker in sorted(union):
        out.setdefault(tracker, {})
        for key in sorted(union[tracker]):
            if (tracker, key) in conflicts:
                continue
            if not union[tracker][key][2]:
                if reduce_group is not None:
                    default_order.append((tracker, key))
                else:
                    out[tracker][key] = local[tracker][key]
            elif key_sync_group is None:
                group = groups.get((tracker, key))
                on_every_rank = all(key in rank.get(tracker, {}) for rank in gathered)
                if group is None or not on_every_rank:
                    # AReaL raises here (RuntimeError); every rank of the group
                    # sees the same exchange, so all leave the key out alike.
                    guard.report(diagnostics.STATS_KEY_SYNC_GROUP_MISSING,
                                 "stats key `%s` (tracker %r) has a per-key reduce_group on some ranks "
                                 "only; pass key_sync_group= to export() / export_all() to reduce it; "
                                 "it is left out", key, tracker)
                    continue
                per_key.setdefault(id(group), (group, []))[1].append((tracker, key))
    _report_conflicts(conflicts)
    _merge_into(out, _all_reduce(reduce_group, default_order, local, union))

    # Keys with a per-key group: over key_sync_group, or over each one's own group.
    if key_sync_group is not None:
        overrides = {tracker: {key: meta for key, meta in keys.items() if meta[2]} for tracker, keys in mine.items()}
        _reduce_keys(key_sync_group, overrides, local, conflicts, out)
    for group, keys in per_key.values():
        theirs: dict[str, dict[str, Meta]] = {}
        for tracker, key in keys:
            theirs.setdefault(tracker, {})[key] = mine[tracker][key]
        _reduce_keys(group, theirs, local, conflicts, out)
    return out


def _reduce_keys(group: Any, keys: dict[str, dict[str, Meta]], local: Local, reported: set,
                 out: dict[str, dict[str, Partial]]) -> None:
    """Reduces ``keys`` over ``group`` into ``out``. Its ranks may have recorded different
    keys: they exchange them first, so every rank issues the same collectives."""
    union, conflicts = _merge(_all_gather_json(keys, group))
    _report_conflicts(conflicts - reported)
    order = [(tracker, key) for tracker in sorted(union) for key in sorted(union[tracker])
             if (tracker, key) not in conflicts]
    for tracker in union:
        out.setdefault(tracker, {})
    _merge_into(out, _all_reduce(group, order, local, union))


def reduce_across(group: Any, local: Local) -> dict[str, dict[str, Partial]]:
    """Reduces ``{tracker: {key: Partial}}`` over ``group`` (no per-key groups); every rank gets the same."""
    return reduce_stats(local, reduce_group=group)


def _merge(gathered: Iterable[Mapping[str, Mapping[str, Meta]]]) -> tuple[dict[str, dict[str, Meta]],
                                                                          set[tuple[str, str]]]:
    union: dict[str, dict[str, Meta]] = {}
    conflicts: set[tuple[str, str]] = set()
    for theirs in gathered:
        for tracker, keys in theirs.items():
            known = union.setdefault(tracker, {})
            for key, meta in keys.items():
                if list(known.setdefault(key, list(meta))) != list(meta):
                    conflicts.add((tracker, key))
    return union, conflicts


def _report_conflicts(conflicts: set[tuple[str, str]]) -> None:
    for tracker, key in sorted(conflicts):
        guard.report(diagnostics.STATS_INCONSISTENT_KEY,
                     "stats key `%s` (tracker %r) was recorded with different kinds, reduce types or "
                     "per-key reduce groups on different ranks; it is left out of the export", key, tracker)


def _merge_into(out: dict[str, dict[str, Partial]], reduced: Mapping[str, Mapping[str, Partial]]) -> None:
    for tracker, keys in reduced.items():
        out.setdefault(tracker, {}).update(keys)


def _all_reduce(group: Any, order: list[tuple[str, str]], local: Local,
                union: Mapping[str, Mapping[str, Meta]]) -> dict[str, dict[str, Partial]]:
    """Two ``all_reduce`` calls over ``group`` for every key of ``order`` (the same list on every rank)."""
    out: dict[str, dict[str, Partial]] = {}
    if not order:
        return out
    import torch
    import torch.distributed as dist

    device = _collective_device(group)
    sums: list[float] = []
    mins: list[float] = []
    for tracker, key in order:
        kind, reduce = union[tracker][key][:2]
        partial = local.get(tracker, {}).get(key)
        if partial is None or (partial.kind, partial.reduce) != (kind, reduce):
            partial = Partial(kind, reduce)  # this rank contributes nothing to the key
        sums += (partial.total, partial.count, partial.nonfinite, partial.nan)
        mins += (partial.low, -partial.high)
    summed = torch.tensor(sums, dtype=torch.float64, device=device)
    lowest = torch.tensor(mins, dtype=torch.float64, device=device)
    dist.all_reduce(summed, op=dist.ReduceOp.SUM, group=group)
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN, group=group)
    summed_list, lowest_list = summed.cpu().tolist(), lowest.cpu().tolist()
    for i, (tracker, key) in enumerate(order):
        kind, reduce = union[tracker][key][:2]
        out.setdefault(tracker, {})[key] = Partial(kind, reduce, *summed_list[4 * i: 4 * i + 4],
                                                   lowest_list[2 * i], -lowest_list[2 * i + 1])
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


def _all_gather_json(obj: Any, group: Any) -> list[Any]:
    """``all_gather_object`` for JSON values, on plain byte tensors.

    Avoids pickle (another rank's bytes are never executed) and the numpy
    dependency of torch's object collectives.
    """
    import torch
    import torch.distributed as dist

    device = _collective_device(group)
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
        guard.report(diagnostics.STATS_MERGE_UNWEIGHTED, "merge_worker_stats left out %s: no `__count` to weight them by "
                     "(only scalar() keys, min and max merge across workers)", sorted(dropped))
    return merged
