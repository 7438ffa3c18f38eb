"""The public types of :mod:`otel_rl.stats`: reduce types and misuse errors (AReaL's names)."""

from __future__ import annotations

from enum import Enum, auto

#: Keys of :meth:`StatsTracker.record_timing` live under this scope, whatever the current scope.
TIMING_SCOPE = "timeperf"


class ReduceType(Enum):
    """How a key's recorded values become exported values (AReaL's names).

    ``AVG_MIN_MAX`` (the default of :meth:`StatsTracker.stat`) exports
    ``key/avg``, ``key/min`` and ``key/max``; ``AVG``, ``SUM``, ``MIN`` and
    ``MAX`` export ``key``; ``SCALAR`` (:meth:`StatsTracker.scalar`) exports the
    mean as ``key`` and the number of values as ``key__count``;
    ``WEIGHTED_AVG`` (:meth:`StatsTracker.weighted_mean`) exports
    sum(value x weight) / sum(weight) as ``key``.
    """

    AVG_MIN_MAX = auto()
    AVG = auto()
    SUM = auto()
    MIN = auto()
    MAX = auto()
    SCALAR = auto()
    WEIGHTED_AVG = auto()


class StatsShapeError(ValueError, AssertionError):
    """A tensor whose shape differs from its mask.

    AReaL checks shapes with ``assert`` (``AssertionError``); otel_rl's misuse
    errors are ``ValueError``. This is both, so either ``except`` catches it.
    """


class StatsTypeError(TypeError, ValueError):
    """An argument of the wrong type: a ``scalar()`` value ``float()`` rejects with
    ``TypeError`` (``None``, a list), as AReaL raises it, or a scope name that is
    not a string. Also a ``ValueError``, otel_rl's type for every misuse."""
