"""The ``OTEL_RL_CUDA_SYNC`` switch: whether scopes, functions and steps are timed
after the GPU caught up.

The live profiling control turns it on at configure (only where CUDA is
available) and off at shutdown. Code that reads it on a hot path (the scopes of
``otel_rl.tracing``) registers a follower with :func:`follow` and keeps its own
copy in a module global: a plain global read costs less than an attribute read
on every scope.
"""

from __future__ import annotations

from typing import Callable

_on = False
_followers: list[Callable[[bool], None]] = []


def set_cuda_sync(on: bool) -> None:
    """Turns CUDA-synchronised timing of scopes, functions and steps on or off."""
    global _on
    _on = bool(on)
    for follower in _followers:
        follower(_on)


def cuda_sync() -> bool:
    """Whether CUDA-synchronised timing is on."""
    return _on


def follow(follower: Callable[[bool], None]) -> None:
    """Calls ``follower(on)`` now and on every change of the switch."""
    _followers.append(follower)
    follower(_on)
