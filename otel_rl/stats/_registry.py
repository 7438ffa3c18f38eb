"""The shared trackers and AReaL's module-level functions that act on all of them.

``DEFAULT_TRACKER``, ``TRACKERS`` and ``LOCK`` are AReaL's module globals;
:func:`get` makes named trackers, :func:`export_all` exports every tracker in
one reduction, and :func:`commit` logs statistics exported elsewhere.
"""

from __future__ import annotations

import threading
from typing import Any

from .._internal import diagnostics, guard
from .._internal.stats import backends as _logging
from .._internal.stats.reduce import Partial, reduce_stats
from ._checks import positional_compat
from ._entry import results_of
from ._tracker import StatsTracker

DEFAULT_TRACKER = StatsTracker()
#: AReaL's ``TRACKERS``: every tracker by name; ``get`` adds to it.
TRACKERS: dict[str, StatsTracker] = {"": DEFAULT_TRACKER}
#: AReaL's ``LOCK``, guarding :data:`TRACKERS`.
LOCK = threading.Lock()


def get(name: str = "") -> StatsTracker:
    """The tracker called ``name``, created on first use (``""`` is the default tracker).

    Args:
        name: ``rollout``, ``eval-rollout``...; its keys start with ``name/``.
    """
    name = name.strip("/")
    if not name:
        # The module-level functions record into DEFAULT_TRACKER, even after TRACKERS.clear().
        with LOCK:
            TRACKERS.setdefault("", DEFAULT_TRACKER)
        return DEFAULT_TRACKER
    with LOCK:
        tracker = TRACKERS.get(name)
        if tracker is None:
            tracker = TRACKERS[name] = StatsTracker(name)
        return tracker


def _all_trackers() -> list[StatsTracker]:
    with LOCK:
        trackers = list(TRACKERS.values())
    if DEFAULT_TRACKER not in trackers:
        trackers.insert(0, DEFAULT_TRACKER)
    return trackers


def export_all(reduce_group: Any = None, key_sync_group: Any = None, reset: bool = True,
               gloo_group: Any = None, *, step: int | None = None, log: bool | None = None,
               **kwargs: Any) -> dict[str, float]:
    """Exports every tracker at once (see :meth:`StatsTracker.export`).

    With groups, all trackers and keys of all ranks are reduced together:
    one key exchange and two ``all_reduce`` calls per group in all. A tracker
    that only another rank has is created here too, as in AReaL.

    Positional arguments follow current AReaL (``reduce_group,
    key_sync_group, reset``); older AReaL's ``export_all(reduce_group, reset,
    gloo_group)`` is recognised by its boolean second argument.

    Args:
        reduce_group: A ``torch.distributed`` process group to reduce over.
        key_sync_group: A group, wider than ``reduce_group``, that keys with a
            per-key reduce group are exchanged and reduced over (the Megatron
            engine passes its data x context parallel group).
        reset: Forget what was exported.
        gloo_group: Older AReaL: a group of the same ranks as ``reduce_group``
            to exchange key names over.
        step: Step of the logged records (default: otel_rl's current step).
        log: As for :meth:`StatsTracker.export`; one record per tracker.
        **kwargs: Keyword arguments of other AReaL versions; ignored and
            counted (``ignored_argument``).

    Returns:
        Every tracker's statistics in one dict.
    """
    key_sync_group, reset, gloo_group = positional_compat(key_sync_group, reset, gloo_group)
    guard.ignored_arguments("stats.export_all", kwargs)
    by_tracker: dict[str, dict[str, Partial]] = {}
    groups: dict[tuple[str, str], Any] = {}
    for tracker in _all_trackers():
        partials, tracker_groups = tracker._take(None, reset)  # noqa: SLF001 - one package
        by_tracker[tracker.name] = partials
        groups.update({(tracker.name, key): group for key, group in tracker_groups.items()})
    by_tracker = reduce_stats(by_tracker, groups, reduce_group=reduce_group, key_sync_group=key_sync_group,
                              gather_group=gloo_group)
    for name in by_tracker:
        get(name)  # as AReaL: a tracker another rank has exists here too
    merged: dict[str, float] = {}
    duplicates: set[str] = set()
    for name in sorted(by_tracker):
        out = results_of(by_tracker[name])
        duplicates |= merged.keys() & out.keys()
        merged.update(out)
        _logging.deliver(name, out, step, reduce_group=reduce_group, log=log)
    if duplicates:
        guard.report(diagnostics.STATS_DUPLICATE_KEY, "stats keys exported by more than one tracker: %s",
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
        guard.report(diagnostics.STATS_BAD_VALUE, "commit() got a value that is not a number: %r", exc)
        values = {}
        for k, v in stats.items():
            try:
                values[str(k)] = float(v)
            except (TypeError, ValueError):
                pass
    _logging.deliver(tracker, values, step, log=log)
