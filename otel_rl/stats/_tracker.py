"""Named statistics trackers with AReaL ``stats_tracker`` names and semantics.

Exported values are AReaL's, NaN and inf included: a NaN recorded under a key
makes its average (and min / max) NaN, as it does in AReaL, so a diverging
run shows in its metrics. What differs from AReaL, on purpose:

* Scopes live in a ``ContextVar`` per tracker, so concurrent asyncio tasks and
  threads each see their own scope stack (AReaL shares one list).
* Each recorded tensor is reduced when it is recorded (masked sum, count,
  NaN count, min, max, kept on its device without synchronising), so memory
  does not grow with the batches of a step and ``export()`` moves one small
  tensor per device to the host.
* Misuse raises at the call, naming the key, before anything of that call is
  recorded, with the exception type AReaL raises (``ValueError``; a shape
  that differs from its mask raises an error that is both ``ValueError`` and
  AReaL's ``AssertionError``). Ranks that recorded a key differently leave it
  out of the export instead of raising.
* Unknown keyword arguments of ``export`` / ``export_all`` are ignored and
  counted (``ignored_argument`` in ``otel_rl.diagnostics()``).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import math
import threading
import time
from typing import Any, Callable, TypeVar

from .._internal import diagnostics, guard
from .._internal.stats import backends as _logging
from .._internal.stats.reduce import (
    COMPACT,
    DENOMINATOR,
    SCALAR,
    STAT,
    WEIGHTED,
    Partial,
    materialize,
    reduce_stats,
    report_nonfinite,
)
from ..tracing import trace_scope
from ._checks import (
    check_mask,
    check_readable,
    check_values,
    is_tensor,
    positional_compat,
    require_torch,
    scope_name,
    tensor_reduce_type,
)
from ._entry import KIND_NAMES, Entry, accumulate, add_to, results_of
from ._scopes import NoScope, Scope
from ._types import TIMING_SCOPE, ReduceType, StatsShapeError, StatsTypeError

F = TypeVar("F", bound=Callable[..., Any])


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
            guard.report(diagnostics.INTERNAL_ERROR, "record_timing(%r) failed: %r", self._key, error)
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
        self._entries: dict[str, Entry] = {}
        self._warned: set[str] = set()
        self._scopes: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
            f"otel_rl.stats.scopes[{self.name}]", default=(self.name,) if self.name else ())

    def __repr__(self) -> str:
        return f"StatsTracker({self.name!r})"

    # ----------------------------------------------------------------- scopes

    def scope(self, name: str) -> Scope:
        """Context manager nesting the keys recorded inside under ``name``.

        ``with scope("ppo_actor"): with scope("update"): stat(loss=...)``
        records ``ppo_actor/update/loss``. Works with ``with`` and
        ``async with``; concurrent asyncio tasks and threads do not see each
        other's scopes (a task or thread started inside a scope inherits it
        when it copies the context, as ``asyncio.create_task`` and
        ``asyncio.to_thread`` do).

        Args:
            name: One or more levels (``"a/b"``); surrounding ``/`` are ignored.

        Raises:
            TypeError: ``name`` is not a string (the error is a ``ValueError`` too).
        """
        return Scope(self._scopes, scope_name(name, "scope"))

    def scope_func_wrapper(self, name: str) -> Callable[[F], F]:
        """Decorator running every call of a function (or ``async def``) inside :meth:`scope`.

        Args:
            name: The scope's name.

        Raises:
            TypeError: ``name`` is not a string (the error is a ``ValueError`` too),
                when the decorator is made, not at the first call.
        """
        scope_name(name, "scope_func_wrapper")

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

    def disable_scope(self) -> Scope:
        """Context manager recording keys exactly as given: no scopes, no tracker-name prefix."""
        return NoScope(self._scopes, "")

    def _full_key(self, key: str) -> str:
        return "/".join(self._scopes.get() + (key,))

    # ---------------------------------------------------------------- recording

    def record_timing(self, key: str) -> _Timing:
        """Context manager recording the block's wall time in seconds as scalar ``timeperf/{key}``.

        As in AReaL the key ignores scopes and the tracker's name, and the
        time is recorded even when the block raises. When otel_rl tracing is
        on, the block is also a span named ``timeperf/{key}``.

        Args:
            key: Name of the timed step (``"rollout"``, ``"train_step"``).
        """
        return _Timing(self, key)

    def scalar(self, *, reduce_group: Any = None, **values: Any) -> None:
        """Records single numbers; each key exports its mean as ``key`` and count as ``key__count``.

        A value is read with ``float()``, as AReaL does (a one-element tensor,
        a numpy number, a bool or a numeric string); NaN and inf are kept and
        propagate into the mean. Works without torch.

        Args:
            reduce_group: A process group these keys are reduced over at
                export, whatever the export's own ``reduce_group``.
            **values: Key to number.

        Raises:
            TypeError: ``float()`` rejects the value's type (``None``, a
                list); the error is a ``ValueError`` too.
            ValueError: ``float()`` rejects the value (text, a tensor of many
                values), or the key holds something else; the message names the key.
        """
        scope = self._scopes.get()
        numbers: dict[str, float] = {}
        for key, value in values.items():
            full = "/".join(scope + (key,))
            try:
                numbers[full] = float(value)
            except Exception as exc:  # noqa: BLE001 - re-raised with the key, as AReaL's type
                hint = " (a tensor of many values belongs in stat())" if is_tensor(value) else ""
                error = StatsTypeError if isinstance(exc, TypeError) else ValueError
                raise error(f"otel_rl.stats: `{full}`: scalar() takes a number, got "
                            f"{type(value).__name__}{hint}: {exc}") from None
        self._record_scalars(numbers, reduce_group)

    def _record_scalars(self, numbers: dict[str, float], group: Any = None) -> None:
        with self._lock:
            for full in numbers:
                self._check_kind(full, SCALAR)
            for full, number in numbers.items():
                entry = self._entries.get(full)
                if entry is None:
                    entry = self._entries[full] = Entry(SCALAR, ReduceType.SCALAR)
                if group is not None:
                    entry.group = group
                entry.total += number
                entry.count += 1
                if not math.isfinite(number):
                    entry.nonfinite += 1

    def denominator(self, *, reduce_group: Any = None, **masks: Any) -> None:
        """Records boolean masks that :meth:`stat` values are averaged over.

        Each key exports the number of ``True`` elements as ``key``. Call it
        once per batch, before the matching :meth:`stat` calls: the n-th
        ``stat()`` of a key pairs with the n-th mask of its denominator.

        Args:
            reduce_group: A process group these keys are reduced over at
                export, whatever the export's own ``reduce_group``.
            **masks: Key to a non-empty ``torch.bool`` tensor.

        Raises:
            ValueError: A mask is not a non-empty, dense bool tensor holding
                values (not sparse, not on the meta device), or the key holds
                something else; the message names the key.
            ImportError: torch is not installed.
        """
        scope = self._scopes.get()
        checked: dict[str, Any] = {}
        for key, mask in masks.items():
            full = "/".join(scope + (key,))
            check_mask(require_torch("denominator", full), "denominator", full, mask)
            checked[full] = mask
        with self._lock:
            for full in checked:
                self._check_kind(full, DENOMINATOR)
            for full, mask in checked.items():
                entry = self._entries.get(full)
                if entry is None:
                    entry = self._entries[full] = Entry(DENOMINATOR, ReduceType.SUM)
                if reduce_group is not None:
                    entry.group = reduce_group
                # A copy: the caller may reuse the mask's memory before stat() pairs with it.
                mask = mask.detach().clone()
                entry.masks.append(mask)
                entry.total = add_to(entry.total, mask.sum())

    def stat(self, denominator: str, reduce_type: ReduceType | None = None, *, reduce_group: Any = None,
             **values: Any) -> None:
        """Records tensors, averaged (or summed, min'd, max'd) over a denominator's mask.

        Elements where the mask is ``False`` are left out; NaN / inf elements
        inside the mask are kept, as in AReaL (a NaN makes the average, min and
        max NaN). Nothing here waits for the device: the masked reductions
        stay on it until :func:`export`.

        As AReaL pairs them, the n-th ``stat()`` of a key goes with the n-th
        mask of its denominator; a ``stat()`` with no mask left to pair with is
        dropped (AReaL leaves it out of the export) and counted as
        ``stats_unpaired_value``. The last reduce type given for a key is the
        one it exports with.

        Args:
            denominator: Name of a :meth:`denominator` key in the current scope.
            reduce_type: How to export (default ``ReduceType.AVG_MIN_MAX``).
            reduce_group: A process group these keys are reduced over at
                export, whatever the export's own ``reduce_group``.
            **values: Key to a tensor of the denominator mask's shape (float,
                integer or bool; integer and bool values are averaged as numbers).

        Raises:
            AssertionError: A value's shape differs from its mask (AReaL's
                type; the error is a ``ValueError`` too).
            ValueError: Unknown denominator, a non-tensor or empty value, a
                tensor export could not read (sparse, meta, nested, quantized),
                ``ReduceType.SCALAR`` or ``WEIGHTED_AVG``, a key that holds
                something else or was recorded over another denominator; the
                message names the key.
            ImportError: torch is not installed.
        """
        if not values:
            return
        scope = self._scopes.get()
        denominator_key = "/".join(scope + (str(denominator).strip("/"),))
        fulls = {key: "/".join(scope + (key,)) for key in values}
        where = ", ".join(f"`{k}`" for k in fulls.values())
        reduce = tensor_reduce_type(reduce_type, where)
        torch = require_torch("stat", next(iter(fulls.values())))
        check_values(torch, "stat", values, fulls)
        with self._lock:
            denom = self._entries.get(denominator_key)
            if denom is None or denom.kind != DENOMINATOR:
                raise ValueError(f"otel_rl.stats: {where}: denominator `{denominator_key}` does not exist "
                                 f"(call denominator({denominator_key.rsplit('/', 1)[-1]}=mask) first, "
                                 "in the same scope)")
            paired: dict[str, tuple[Any, Any]] = {}
            unpaired: list[str] = []
            for key, value in values.items():
                full = fulls[key]
                self._check_kind(full, STAT, denominator_key)
                entry = self._entries.get(full)
                index = entry.paired if entry is not None and entry.paired_generation == denom.generation else 0
                if index >= len(denom.masks):
                    unpaired.append(full)
                    continue
                mask = denom.masks[index]
                if tuple(value.shape) != tuple(mask.shape):
                    raise StatsShapeError(f"otel_rl.stats: `{full}`: shape {tuple(value.shape)} differs from "
                                          f"denominator `{denominator_key}` mask {index + 1} of shape "
                                          f"{tuple(mask.shape)}")
                paired[full] = (value, mask)
            for full, (value, mask) in paired.items():
                entry = self._entries.get(full)
                if entry is None:
                    entry = self._entries[full] = Entry(STAT, reduce, denominator_key)
                entry.reduce = reduce  # AReaL: the last reduce type given wins
                if reduce_group is not None:
                    entry.group = reduce_group
                if entry.paired_generation != denom.generation:
                    entry.paired_generation, entry.paired = denom.generation, 0
                entry.paired += 1
                accumulate(torch, entry, value, mask)
        for full in unpaired:
            guard.report(diagnostics.STATS_UNPAIRED_VALUE,
                         "stats: stat() of `%s` was called more often than denominator `%s` since the last "
                         "export; the extra value is left out, as AReaL leaves it out (call denominator() "
                         "once per batch before its stat() calls)", full, denominator_key)

    def stat_compact(self, mask: Any, reduce_type: ReduceType | None = None, *, reduce_group: Any = None,
                     **values: Any) -> None:
        """Records tensors reduced over a mask given with the call (AReaL's ``stat_compact``).

        Exports as :meth:`stat` does, without a denominator key: masked-out
        elements are left out (a NaN there too), one without any valid element
        exports no average and a sum of 0. A key recorded here cannot also be
        recorded with :meth:`stat` or :meth:`weighted_mean`.

        Args:
            mask: A non-empty ``torch.bool`` tensor of the values' shape.
            reduce_type: How to export (default ``ReduceType.AVG_MIN_MAX``).
            reduce_group: A process group these keys are reduced over at
                export, whatever the export's own ``reduce_group``.
            **values: Key to a tensor of the mask's shape.

        Raises:
            AssertionError: A value's shape differs from the mask (the error
                is a ``ValueError`` too).
            ValueError: A bad mask or value (as for :meth:`stat`), ``ReduceType.SCALAR`` or
                ``WEIGHTED_AVG``, or a key that holds something else; the
                message names the key.
            ImportError: torch is not installed.
        """
        if not values:
            return
        scope = self._scopes.get()
        fulls = {key: "/".join(scope + (key,)) for key in values}
        where = ", ".join(f"`{k}`" for k in fulls.values())
        reduce = tensor_reduce_type(reduce_type, where)
        torch = require_torch("stat_compact", next(iter(fulls.values())))
        check_mask(torch, "stat_compact", where.strip("`"), mask)
        check_values(torch, "stat_compact", values, fulls)
        for key, value in values.items():
            if tuple(value.shape) != tuple(mask.shape):
                raise StatsShapeError(f"otel_rl.stats: `{fulls[key]}`: shape {tuple(value.shape)} differs "
                                      f"from its stat_compact() mask of shape {tuple(mask.shape)}")
        with self._lock:
            for full in fulls.values():
                self._check_kind(full, COMPACT)
            for key, value in values.items():
                full = fulls[key]
                entry = self._entries.get(full)
                if entry is None:
                    entry = self._entries[full] = Entry(COMPACT, reduce)
                entry.reduce = reduce
                if reduce_group is not None:
                    entry.group = reduce_group
                accumulate(torch, entry, value, mask)

    def weighted_mean(self, key: str, value: Any, weight: Any, *, reduce_group: Any = None,
                      **kwargs: Any) -> None:
        """Records one value with a weight; ``key`` exports sum(value x weight) / sum(weight).

        AReaL's ``weighted_mean``: partial means of a partitioned batch,
        weighted by their share, give the mean of the whole batch, within a
        rank and across ranks. A value with weight 0 is ignored even when it
        is NaN or inf; a key whose weights add up to 0 is left out. The inputs
        are copied, so later in-place changes do not reach the statistics.

        Args:
            key: The key (in the current scope).
            value: A real 0-d tensor.
            weight: A real 0-d tensor (float or integer).
            reduce_group: A process group this key is reduced over at export,
                whatever the export's own ``reduce_group``.
            **kwargs: Keyword arguments of later AReaL versions; ignored and
                counted (``ignored_argument``).

        Raises:
            ValueError: ``value`` or ``weight`` is not a real, dense 0-d tensor
                holding a value (the message names which), or the key holds
                something else.
            ImportError: torch is not installed.
        """
        guard.ignored_arguments("stats.weighted_mean", kwargs)
        full = self._full_key(str(key))
        torch = require_torch("weighted_mean", full)
        for name, tensor in (("value", value), ("weight", weight)):
            if not isinstance(tensor, torch.Tensor) or tensor.dim() != 0 or tensor.is_complex():
                got = (f"a {tensor.dim()}-d {tensor.dtype} tensor" if isinstance(tensor, torch.Tensor)
                       else type(tensor).__name__)
                raise ValueError(f"otel_rl.stats: `{full}`: weighted_mean() `{name}` must be a real 0-d "
                                 f"tensor, got {got}")
            check_readable(torch, "weighted_mean", full, tensor, f"`{name}`")
        with self._lock:
            self._check_kind(full, WEIGHTED)
            entry = self._entries.get(full)
            if entry is None:
                entry = self._entries[full] = Entry(WEIGHTED, ReduceType.WEIGHTED_AVG)
            if reduce_group is not None:
                entry.group = reduce_group
            value = value.detach()
            weight = weight.detach().to(value.device, non_blocking=True)
            acc = torch.float32 if value.device.type == "mps" else torch.float64
            value, weight = value.to(acc), weight.to(acc)
            counted = weight != 0
            entry.total = add_to(entry.total, torch.where(counted, value * weight, 0.0))
            entry.count = add_to(entry.count, weight)
            entry.nonfinite = add_to(entry.nonfinite, (counted & ~torch.isfinite(value)).to(acc))
            entry.nan = add_to(entry.nan, (counted & torch.isnan(value)).to(acc))

    def _check_kind(self, full: str, kind: str, denominator: str | None = None) -> None:
        entry = self._entries.get(full)
        if entry is None:
            return
        if entry.kind != kind:
            raise ValueError(f"otel_rl.stats: `{full}` holds {KIND_NAMES[entry.kind]}; it cannot also "
                             f"hold {KIND_NAMES[kind]}")
        if denominator is not None and entry.denominator != denominator:
            raise ValueError(f"otel_rl.stats: `{full}` was recorded over denominator `{entry.denominator}`, "
                             f"not `{denominator}`")

    # ----------------------------------------------------------------- export

    def _take(self, full_key: str | None, reset: bool) -> tuple[dict[str, Partial], dict[str, Any]]:
        """This tracker's partials (all, or one key) and the per-key reduce groups among them."""
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
            groups = {key: entry.group for key, entry in chosen.items() if entry.group is not None}
        partials = materialize(raw)
        report_nonfinite(self.name, partials, self._warned)
        return partials, groups

    def export(self, key: str | None = None, reduce_group: Any = None, key_sync_group: Any = None,
               reset: bool = True, gloo_group: Any = None, *, step: int | None = None,
               log: bool | None = None, **kwargs: Any) -> dict[str, float]:
        """Returns this tracker's statistics and, as AReaL's ``StatsLogger``, logs them.

        With ``reduce_group`` every rank of the group must call it (the same
        way); each gets the same result, reduced over all ranks, including
        keys that only some ranks recorded. Keys recorded with a per-key
        ``reduce_group=`` are reduced over that group, or, when
        ``key_sync_group`` is given, exchanged and reduced over
        ``key_sync_group`` (AReaL's rule for groups wider than
        ``reduce_group``, such as data x context parallel).

        Positional arguments follow current AReaL (``key, reduce_group,
        key_sync_group, reset``); older AReaL's ``export(key, reduce_group,
        reset, gloo_group)`` is recognised by its boolean third argument.

        Args:
            key: Only this key (in the current scope); an unknown key gives ``{}``.
                It is reduced over its per-key group, else ``reduce_group``.
            reduce_group: A ``torch.distributed`` process group to reduce over.
            key_sync_group: A group, wider than ``reduce_group``, that keys
                with a per-key reduce group are exchanged and reduced over.
            reset: Forget what was exported.
            gloo_group: Older AReaL: a group of the same ranks as
                ``reduce_group`` to exchange key names over.
            step: Step of the logged record (default: otel_rl's current step).
            log: ``None``: rank 0 logs (the group's rank 0 with a group);
                ``True``: log here; ``False``: only return.
            **kwargs: Keyword arguments of other AReaL versions; ignored and
                counted (``ignored_argument``).

        Returns:
            ``{key: value}`` with AReaL's names (``key/avg``, ``key__count``...).
        """
        key_sync_group, reset, gloo_group = positional_compat(key_sync_group, reset, gloo_group)
        guard.ignored_arguments("stats.export", kwargs)
        if key is not None:
            full = self._full_key(key)
            partials, groups = self._take(full, reset)
            # AReaL reduces a single key over its own group, else the export's; no key exchange.
            group = groups.get(full, reduce_group)
            by_tracker = reduce_stats({self.name: partials}, reduce_group=group,
                                      gather_group=gloo_group if group is reduce_group else None)
        else:
            partials, groups = self._take(None, reset)
            by_tracker = reduce_stats({self.name: partials}, {(self.name, k): g for k, g in groups.items()},
                                      reduce_group=reduce_group, key_sync_group=key_sync_group,
                                      gather_group=gloo_group)
        out = results_of(by_tracker.get(self.name, {}))
        _logging.deliver(self.name, out, step, reduce_group=reduce_group, log=log)
        return out
