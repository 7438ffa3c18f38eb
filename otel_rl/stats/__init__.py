"""Training and rollout statistics with AReaL ``stats_tracker`` names, on OpenTelemetry metrics.

``from otel_rl import stats as stats_tracker`` is all an AReaL user changes::

    stats_tracker.denominator(n_valid_tokens=loss_mask)
    stats_tracker.stat(advantages=adv, denominator="n_valid_tokens")
    stats_tracker.get("rollout").scalar(reward=0.5)
    with stats_tracker.record_timing("rollout"):
        batch = prepare_batch()
    stats = stats_tracker.export_all(reduce_group=dp_group)   # {"advantages/avg": ...}

Exports are also logged (rank 0, ``__count`` keys dropped) as OpenTelemetry
gauges ``rl.stats.<key>`` (over OTLP when an endpoint is set), as lines of
``stats-r{rank}.jsonl`` in the run directory, as TensorBoard event files when
tensorboard is installed, and to any backend given to :func:`register_backend`.
torch is needed only for tensor statistics.

Everything AReaL's ``areal.utils.stats_tracker`` offers is here under its
name and call forms: ``DistributedStatsTracker``, ``DEFAULT_TRACKER``,
``TRACKERS``, ``get``, ``scalar`` / ``denominator`` / ``stat`` (with a
per-key ``reduce_group=``), ``stat_compact``, ``weighted_mean``, ``scope``,
``scope_func_wrapper``, ``record_timing``, ``export`` and ``export_all``
(with ``key_sync_group=``), and ``ReduceType``. Exported values match
AReaL's, NaN included.
"""

from __future__ import annotations

from .._internal.stats.backends import StatsBackend, StatsRecord, register_backend, unregister_backend
from .._internal.stats.reduce import merge_worker_stats
from ._registry import DEFAULT_TRACKER, LOCK, TRACKERS, commit, export_all, get
from ._tracker import StatsTracker
from ._types import ReduceType, StatsShapeError, StatsTypeError

#: AReaL's class name.
DistributedStatsTracker = StatsTracker

#: AReaL's module-level dict of MoE auxiliary losses; kept so code that fills it
#: keeps working. otel_rl does not read it: record such losses with scalar().
MOE_AUX_LOSSES: dict = {}

# Module-level functions act on the default tracker, as in AReaL.
scalar = DEFAULT_TRACKER.scalar
denominator = DEFAULT_TRACKER.denominator
stat = DEFAULT_TRACKER.stat
stat_compact = DEFAULT_TRACKER.stat_compact
weighted_mean = DEFAULT_TRACKER.weighted_mean
scope = DEFAULT_TRACKER.scope
scope_func_wrapper = DEFAULT_TRACKER.scope_func_wrapper
disable_scope = DEFAULT_TRACKER.disable_scope
record_timing = DEFAULT_TRACKER.record_timing
export = DEFAULT_TRACKER.export

__all__ = [
    "DEFAULT_TRACKER", "LOCK", "MOE_AUX_LOSSES", "TRACKERS", "DistributedStatsTracker", "ReduceType",
    "StatsBackend", "StatsRecord", "StatsShapeError", "StatsTracker", "StatsTypeError", "commit",
    "denominator", "disable_scope", "export", "export_all", "get", "merge_worker_stats", "record_timing",
    "register_backend", "scalar", "scope", "scope_func_wrapper", "stat", "stat_compact", "unregister_backend",
    "weighted_mean",
]
