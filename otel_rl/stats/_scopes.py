"""Scope blocks of a stats tracker: each adds one level to the keys recorded inside."""

from __future__ import annotations

import contextvars
from typing import Any


class Scope:
    """``with`` / ``async with`` block adding one level to a tracker's scope stack."""

    __slots__ = ("_var", "_name", "_token", "_previous")

    def __init__(self, var: contextvars.ContextVar, name: str) -> None:
        self._var = var
        self._name = name

    def __enter__(self) -> Scope:
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

    async def __aenter__(self) -> Scope:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)


class NoScope(Scope):
    """``disable_scope()``: keys are recorded as given, without the tracker's scopes."""

    def __enter__(self) -> Scope:
        self._previous = self._var.get()
        self._token = self._var.set(())
        return self
