"""Named statistics trackers with AReaL ``stats_tracker`` names and semantics.

What differs from AReaL, on purpose:

* Scopes live in a ``ContextVar`` per tracker, so concurrent asyncio tasks and
  threads each see their own scope stack (AReaL shares one list).
* Each recorded tensor is reduced when it is recorded (masked sum, count,
  min, max, kept on its device without synchronising), so memory does not
  grow with the batches of a step and ``export()`` moves one small tensor per
  device to the host.
* Misuse raises ``ValueError`` naming the key at the call, before anything
  of that call is recorded; NaN / inf values are left out of the statistics
  and counted (``key__nonfinite``) instead of poisoning an average.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import itertools
import math
import sys
import threading
import time
from enum import Enum, auto
from typing import Any, Callable, TypeVar

from .._internal import guard
from .._internal import stats_logging as _logging
from .._internal.stats_reduce import (
    DENOMINATOR,
    SCALAR,
    STAT,
    Partial,
    materialize,
    reduce_across,
    report_nonfinite,
    results,
)
from ..tracing import trace_scope

F = TypeVar("F", bound=Callable[..., Any])

#: Keys of :meth:`StatsTracker.record_timing` live under this scope, whatever the current scope.
TIMING_SCOPE = "timeperf"


class ReduceType(Enum):
    """How a key's recorded values become exported values (AReaL's names).

    ``AVG_MIN_MAX`` (the default of :meth:`StatsTracker.stat`) exports
    ``key/avg``, ``key/min`` and ``key/max``; ``AVG``, ``SUM``, ``MIN`` and
    ``MAX`` export ``key``; ``SCALAR`` (:meth:`StatsTracker.scalar`) exports the
    mean as ``key`` and the number of values as ``key__count``.
    """

    AVG_MIN_MAX = auto()
    AVG = auto()
    SUM = auto()
    MIN = auto()
    MAX = auto()
    SCALAR = auto()


_generations = itertools.count(1)


class _Entry:
    """One key of one tracker. Numbers are Python floats (scalars) or 0-d
    tensors on the recorded tensor's device (denominators, stats)."""

    __slots__ = ("kind", "reduce", "denominator", "total", "count", "nonfinite", "low", "high",
                 "masks", "generation", "paired", "paired_generation")

    def __init__(self, kind: str, reduce: ReduceType, denominator: str | None = None) -> None:
        self.kind = kind
        self.reduce = reduce
        self.denominator = denominator
        # Scalars count in Python floats; tensor entries start empty so their
        # first reduction sets the dtype (an int64 count stays exact).
        zero = 0.0 if kind == SCALAR else None
        self.total: Any = zero
        self.count: Any = zero
        self.nonfinite: Any = zero
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
        return self.kind, self.reduce.name, {"total": self.total, "count": self.count,
                                             "nonfinite": self.nonfinite, "low": self.low, "high": self.high}


def _torch(what: str, key: str) -> Any:
    try:
        import torch
    except ImportError:
        raise ImportError(f"otel_rl.stats: `{key}`: {what}() records torch tensors and needs torch "
                          "(pip install 'otel_rl[torch]'); scalar() works without it") from None
    return torch


def _is_tensor(value: Any) -> bool:
    # Without torch loaded nothing can be a tensor, and checking must not load it.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


class _Scope:
    """``with`` / ``async with`` block adding one level to a tracker's scope stack."""

    __slots__ = ("_var", "_name", "_token", "_previous")

    def __init__(self, var: contextvars.ContextVar, name: str) -> None:
        self._var = var
        self._name = name

    def __enter__(self) -> _Scope:
        self._previous = self._var.get()
        self._token = self._var.set(self._previous + (self._name,))
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._var.reset(self._token)
        except ValueError:
            # Left in another context than it was entered in (a generator
            # resumed elsewhere): restore that context's view of it.
            self._var.set(self._previous)

    async def __aenter__(self) -> _Scope:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)


class _NoScope(_Scope):
    """``disable_scope()``: keys are recorded as given, without the tracker's scopes."""

    def __enter__(self) -> _Scope:
        self._previous = self._var.get()
        self._token = self._var.set(())
        return self


class _Timing:
    """``record_timing(key)``: the block's duration as scalar ``timeperf/{key}``, and a span."""

    __slots__ = ("_tracker", "_key", "_span", "_start")

    def __init__(self, tracker: StatsTracker, key: str) -> None:
        self._tracker = tracker
        self._key = f"{TIMING_SCOPE}/{key}"

    def __enter__(self) -> _Timing:
        # trace_scope is a shared no-op unless otel_rl tracing is on.
        self._span = trace_scope(self._key)
        self._span.__enter__()
        self._start = time.perf_counter()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        elapsed = time.perf_counter() - self._start
        try:
            self._tracker._record_scalars({self._key: elapsed})
        except Exception as error:  # noqa: BLE001 - timing must never fail the timed code
            guard.report("internal_error", "record_timing(%r) failed: %r", self._key, error)
        self._span.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> _Timing:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)


class StatsTracker:
    """A named set of statistics (AReaL's ``DistributedStatsTracker``).

    Keys are ``<name>/<scopes...>/<key>``. Recording is thread-safe; scopes
    are per thread and per asyncio task.
    """

    def __init__(self, name: str = "") -> None:
        """Creates a tracker; use :func:`get` for the shared, named ones.

        Args:
            name: Prefix of every key (``rollout`` makes ``rollout/reward``).
        """
        self.name = name.strip("/")
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._warned: set[str] = set()
        self._scopes: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
            f"otel_rl.stats.scopes[{self.name}]", default=(self.name,) if self.name else ())

    def __repr__(self) -> str:
        return f"StatsTracker({self.name!r})"

    # ----------------------------------------------------------------- scopes

    def scope(self, name: str) -> _Scope:
        """Context manager nesting the keys recorded inside under ``name``.

        ``with scope("ppo_actor"): with scope("update"): stat(loss=...)``
        records ``ppo_actor/update/loss``. Works with ``with`` and
        ``async with``; concurrent asyncio tasks and threads do not see each
        other's scopes (a task or thread started inside a scope inherits it
        when it copies the context, as ``asyncio.create_task`` and
        ``asyncio.to_thread`` do).

        Args:
            name: One or more levels (``"a/b"``); surrounding ``/`` are ignored.
        """
        return _Scope(self._scopes, name.strip("/"))

    def scope_func_wrapper(self, name: str) -> Callable[[F], F]:
        """Decorator running every call of a function (or ``async def``) inside :meth:`scope`.

        Args:
            name: The scope's name.
        """

        def decorate(fn: F) -> F:
            if inspect.iscoroutinefunction(fn):
                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    with self.scope(name):
                        return await fn(*args, **kwargs)

                return async_wrapper  # type: ignore[return-value]

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.scope(name):
                    return fn(*args, **kwargs)

            return wrapper  # type: ignore[return-value]

        return decorate

    def disable_scope(self) -> _Scope:
        """Context manager recording keys exactly as given: no scopes, no tracker-name prefix."""
        return _NoScope(self._scopes, "")

    def _full_key(self, key: str) -> str:
        return "/".join(self._scopes.get() + (key,))

    # ---------------------------------------------------------------- recording

    def record_timing(self, key: str) -> _Timing:
        """Context manager recording the block's wall time in seconds as scalar ``timeperf/{key}``.

        As in AReaL the key ignores scopes and the tracker's name. When otel_rl
        tracing is on, the block is also a span named ``timeperf/{key}``.

        Args:
            key: Name of the timed step (``"rollout"``, ``"train_step"``).
        """
        return _Timing(self, key)

    def scalar(self, **values: Any) -> None:
        """Records single numbers; each key exports its mean as ``key`` and count as ``key__count``.

        Works without torch (a one-element tensor is accepted and read once).

        Args:
            **values: Key to number. NaN / inf values are left out and counted
                (``key__nonfinite``).

        Raises:
            ValueError: A value is not a number, or the key holds a tensor stat
                or denominator; the message names the key.
        """
        scope = self._scopes.get()
        numbers: dict[str, float] = {}
        for key, value in values.items():
            full = "/".join(scope + (key,))
            if isinstance(value, (str, bytes)) or value is None:
                raise ValueError(f"otel_rl.stats: `{full}`: scalar() takes a number, got {type(value).__name__}")
            try:
                numbers[full] = float(value)
            except (TypeError, ValueError, RuntimeError) as exc:
                hint = " (a tensor of many values belongs in stat())" if _is_tensor(value) else ""
                raise ValueError(f"otel_rl.stats: `{full}`: scalar() takes a number, got "
                                 f"{type(value).__name__}{hint}: {exc}") from None
        self._record_scalars(numbers)

    def _record_scalars(self, numbers: dict[str, float]) -> None:
        with self._lock:
            for full in numbers:
                self._check_kind(full, SCALAR)
            for full, number in numbers.items():
                entry = self._entries.get(full)
                if entry is None:
                    entry = self._entries[full] = _Entry(SCALAR, ReduceType.SCALAR)
                if math.isfinite(number):
                    entry.total += number
                    entry.count += 1
                else:
                    entry.nonfinite += 1

    def denominator(self, **masks: Any) -> None:
        """Records boolean masks that :meth:`stat` values are averaged over.

        Each key exports the number of ``True`` elements as ``key``. Call it
        once per batch, before the matching :meth:`stat` calls: the n-th
        ``stat()`` of a key pairs with the n-th mask of its denominator.

        Args:
            **masks: Key to a non-empty ``torch.bool`` tensor.

        Raises:
            ValueError: A mask is not a non-empty bool tensor, or the key holds
                something else; the message names the key.
            ImportError: torch is not installed.
        """
        scope = self._scopes.get()
        checked: dict[str, Any] = {}
        for key, mask in masks.items():
            full = "/".join(scope + (key,))
            torch = _torch("denominator", full)
            if not isinstance(mask, torch.Tensor):
                raise ValueError(f"otel_rl.stats: `{full}`: denominator() takes a torch.bool tensor, "
                                 f"got {type(mask).__name__}")
            if mask.dtype != torch.bool:
                raise ValueError(f"otel_rl.stats: `{full}`: denominator() takes a torch.bool tensor, "
                                 f"got dtype {mask.dtype} (use mask.bool())")
            if mask.numel() == 0:
                raise ValueError(f"otel_rl.stats: `{full}`: denominator mask is empty")
            checked[full] = mask
        with self._lock:
            for full in checked:
                self._check_kind(full, DENOMINATOR)
            for full, mask in checked.items():
                entry = self._entries.get(full)
                if entry is None:
                    entry = self._entries[full] = _Entry(DENOMINATOR, ReduceType.SUM)
                # A copy: the caller may reuse the mask's memory before stat() pairs with it.
                mask = mask.detach().clone()
                entry.masks.append(mask)
                entry.total = _add(entry.total, mask.sum())

    def stat(self, denominator: str, reduce_type: ReduceType | None = None, **values: Any) -> None:
        """Records tensors, averaged (or summed, min'd, max'd) over a denominator's mask.

        Elements where the mask is ``False`` are left out; so are NaN / inf
        elements (counted, ``key__nonfinite``). Nothing here waits for the
        device: the masked reductions stay on it until :func:`export`.

        Args:
            denominator: Name of a :meth:`denominator` key in the current scope.
            reduce_type: How to export (default ``ReduceType.AVG_MIN_MAX``).
            **values: Key to a tensor of the denominator mask's shape (float,
                integer or bool; integer and bool values are averaged as numbers).

        Raises:
            ValueError: Unknown denominator, more ``stat()`` calls than masks,
                a shape that differs from the mask, a non-tensor or empty value,
                ``ReduceType.SCALAR``, or a reduce type / denominator that
                differs from the key's earlier calls; the message names the key.
            ImportError: torch is not installed.
        """
        if not values:
            return
        reduce = ReduceType.AVG_MIN_MAX if reduce_type is None else reduce_type
        scope = self._scopes.get()
        denominator_key = "/".join(scope + (str(denominator).strip("/"),))
        fulls = {key: "/".join(scope + (key,)) for key in values}
        where = ", ".join(f"`{k}`" for k in fulls.values()) or "stat()"
        if isinstance(reduce, str) and reduce.upper() in ReduceType.__members__:
            reduce = ReduceType[reduce.upper()]
        if not isinstance(reduce, ReduceType):
            raise ValueError(f"otel_rl.stats: {where}: reduce_type must be a ReduceType, got {reduce_type!r}")
        if reduce is ReduceType.SCALAR:
            raise ValueError(f"otel_rl.stats: {where}: ReduceType.SCALAR is for scalar(), not tensors")
        torch = None
        for key, value in values.items():
            full = fulls[key]
            torch = _torch("stat", full)
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"otel_rl.stats: `{full}`: stat() takes a torch tensor, got "
                                 f"{type(value).__name__} (numbers go to scalar())")
            if value.is_complex():
                raise ValueError(f"otel_rl.stats: `{full}`: stat() takes real values, got dtype {value.dtype}")
            if value.numel() == 0:
                raise ValueError(f"otel_rl.stats: `{full}`: stat() value is empty")
        with self._lock:
            denom = self._entries.get(denominator_key)
            if denom is None or denom.kind != DENOMINATOR:
                raise ValueError(f"otel_rl.stats: {where}: denominator `{denominator_key}` does not exist "
                                 f"(call denominator({denominator_key.rsplit('/', 1)[-1]}=mask) first, "
                                 "in the same scope)")
            paired: dict[str, tuple[Any, Any]] = {}
            for key, value in values.items():
                full = fulls[key]
                self._check_kind(full, STAT, reduce, denominator_key)
                entry = self._entries.get(full)
                index = entry.paired if entry is not None and entry.paired_generation == denom.generation else 0
                if index >= len(denom.masks):
                    raise ValueError(
                        f"otel_rl.stats: `{full}`: this is stat() call {index + 1} since denominator "
                        f"`{denominator_key}` was set, which has {len(denom.masks)} mask(s); call "
                        "denominator() once per batch before its stat() calls")
                mask = denom.masks[index]
                if tuple(value.shape) != tuple(mask.shape):
                    raise ValueError(f"otel_rl.stats: `{full}`: shape {tuple(value.shape)} differs from "
                                     f"denominator `{denominator_key}` mask {index + 1} of shape "
                                     f"{tuple(mask.shape)}")
                paired[full] = (value, mask)
            for full, (value, mask) in paired.items():
                entry = self._entries.get(full)
                if entry is None:
                    entry = self._entries[full] = _Entry(STAT, reduce, denominator_key)
                if entry.paired_generation != denom.generation:
                    entry.paired_generation, entry.paired = denom.generation, 0
                entry.paired += 1
                _accumulate(torch, entry, value, mask)

    def _check_kind(self, full: str, kind: str, reduce: ReduceType | None = None,
                    denominator: str | None = None) -> None:
        entry = self._entries.get(full)
        if entry is None:
            return
        if entry.kind != kind:
            raise ValueError(f"otel_rl.stats: `{full}` holds a {entry.kind}; it cannot also be a {kind}")
        if reduce is not None and entry.reduce is not reduce:
            raise ValueError(f"otel_rl.stats: `{full}` was recorded with {entry.reduce.name}, not {reduce.name}")
        if denominator is not None and entry.denominator != denominator:
            raise ValueError(f"otel_rl.stats: `{full}` was recorded over denominator `{entry.denominator}`, "
                             f"not `{denominator}`")

    # ----------------------------------------------------------------- export

    def _take(self, full_key: str | None, reset: bool) -> dict[str, Partial]:
        with self._lock:
            if full_key is None:
                chosen = self._entries
                if reset:
                    self._entries = {}
            else:
                entry = self._entries.get(full_key)
                chosen = {} if entry is None else {full_key: entry}
                if reset and entry is not None:
                    del self._entries[full_key]
            raw = {key: entry.snapshot() for key, entry in chosen.items()}
        partials = materialize(raw)
        report_nonfinite(self.name, partials, self._warned)
        return partials

    def export(self, key: str | None = None, reduce_group: Any = None, reset: bool = True, *,
               step: int | None = None, log: bool | None = None) -> dict[str, float]:
        """Returns this tracker's statistics and, as AReaL's ``StatsLogger``, logs them.

        With ``reduce_group`` every rank of the group must call it (the same
        way); each gets the same result, reduced over all ranks, including
        keys that only some ranks recorded.

        Args:
            key: Only this key (in the current scope); an unknown key gives ``{}``.
            reduce_group: A ``torch.distributed`` process group to reduce over.
            reset: Forget what was exported.
            step: Step of the logged record (default: otel_rl's current step).
            log: ``None``: rank 0 logs (the group's rank 0 with a group);
                ``True``: log here; ``False``: only return.

        Returns:
            ``{key: value}`` with AReaL's names (``key/avg``, ``key__count``...).
        """
        partials = self._take(None if key is None else self._full_key(key), reset)
        by_tracker = {self.name: partials}
        if reduce_group is not None:
            by_tracker = reduce_across(reduce_group, by_tracker)
        out = _results_of(by_tracker.get(self.name, {}))
        _logging.deliver(self.name, out, step, reduce_group=reduce_group, log=log)
        return out


def _accumulate(torch: Any, entry: _Entry, value: Any, mask: Any) -> None:
    value = value.detach()
    if mask.device != value.device:
        mask = mask.to(value.device, non_blocking=True)
    # float64 sums unless the device has no float64 (MPS).
    acc = torch.float32 if value.device.type == "mps" else torch.float64
    if not value.is_floating_point():
        value = value.to(acc)
    finite = torch.isfinite(value)
    valid = mask & finite
    total = torch.where(valid, value, 0).sum(dtype=acc)
    count = valid.sum()
    nonfinite = (mask & ~finite).sum()
    low = torch.where(valid, value, float("inf")).min().to(acc)
    high = torch.where(valid, value, float("-inf")).max().to(acc)
    entry.total = _add(entry.total, total)
    entry.count = _add(entry.count, count)
    entry.nonfinite = _add(entry.nonfinite, nonfinite)
    entry.low = low if entry.low is None else torch.minimum(entry.low, low)
    entry.high = high if entry.high is None else torch.maximum(entry.high, high)


def _add(total: Any, value: Any) -> Any:
    return value if total is None else total + value


def _results_of(partials: dict[str, Partial]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in partials:
        out.update(results(key, partials[key]))
    return out


DEFAULT_TRACKER = StatsTracker()
_TRACKERS: dict[str, StatsTracker] = {"": DEFAULT_TRACKER}
_TRACKERS_LOCK = threading.Lock()


def get(name: str = "") -> StatsTracker:
    """The tracker called ``name``, created on first use (``""`` is the default tracker).

    Args:
        name: ``rollout``, ``eval-rollout``...; its keys start with ``name/``.
    """
    name = name.strip("/")
    with _TRACKERS_LOCK:
        tracker = _TRACKERS.get(name)
        if tracker is None:
            tracker = _TRACKERS[name] = StatsTracker(name)
        return tracker


def export_all(reduce_group: Any = None, reset: bool = True, *, step: int | None = None,
               log: bool | None = None) -> dict[str, float]:
    """Exports every tracker at once (see :meth:`StatsTracker.export`).

    With ``reduce_group`` all trackers and keys of all ranks are reduced
    together: one key exchange and two ``all_reduce`` calls in all.

    Args:
        reduce_group: A ``torch.distributed`` process group to reduce over.
        reset: Forget what was exported.
        step: Step of the logged records (default: otel_rl's current step).
        log: As for :meth:`StatsTracker.export`; one record per tracker.

    Returns:
        Every tracker's statistics in one dict.
    """
    with _TRACKERS_LOCK:
        trackers = list(_TRACKERS.values())
    by_tracker = {tracker.name: tracker._take(None, reset) for tracker in trackers}
    if reduce_group is not None:
        by_tracker = reduce_across(reduce_group, by_tracker)
        for name in by_tracker:
            get(name)  # as AReaL: a tracker another rank has exists here too
    merged: dict[str, float] = {}
    duplicates: set[str] = set()
    for name in sorted(by_tracker):
        out = _results_of(by_tracker[name])
        duplicates |= merged.keys() & out.keys()
        merged.update(out)
        _logging.deliver(name, out, step, reduce_group=reduce_group, log=log)
    if duplicates:
        guard.report("stats_duplicate_key", "stats keys exported by more than one tracker: %s",
                     sorted(duplicates))
    return merged


def commit(stats: dict[str, Any], step: int | None = None, *, tracker: str = "",
           log: bool | None = None) -> None:
    """Logs statistics exported elsewhere (AReaL's ``StatsLogger.commit``).

    For values merged with :func:`merge_worker_stats` from rollout workers,
    or any dict of numbers; ``__count`` keys are dropped, rank 0 logs.

    Args:
        stats: Key to number.
        step: The training step (default: otel_rl's current step).
        tracker: The ``rl.stats.tracker`` / ``tracker`` value of the record.
        log: ``None``: rank 0 logs; ``True``: log here; ``False``: nothing.
    """
    try:
        values = {str(k): float(v) for k, v in stats.items()}
    except (TypeError, ValueError) as exc:
        guard.report("stats_bad_value", "commit() got a value that is not a number: %r", exc)
        values = {}
        for k, v in stats.items():
            try:
                values[str(k)] = float(v)
            except (TypeError, ValueError):
                pass
    _logging.deliver(tracker, values, step, log=log)
