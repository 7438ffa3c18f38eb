"""AReaL's tracer objects over otel_rl: ``PerfTracer``, ``SessionTracer`` and their enums.

AReaL code holds these objects (``tracer = perf_tracer.configure(...)``,
``perf_tracer.get_session_tracer().flush(force=True)``, ``PerfTracer(config,
rank=0)`` in tests), so otel_rl gives it objects with the same methods. They
keep no state of their own: every method acts on the process's one otel_rl
configuration, exactly as the module-level functions do, so mixing the two
styles records one consistent trace.

``PerfTracer`` is also an OpenTelemetry ``Tracer`` (``start_span``,
``start_as_current_span``), so ``otel_rl.get_tracer()`` serves both AReaL's
meaning and OpenTelemetry's.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Any

from opentelemetry import trace as trace_api

from . import sessions, tracing
from ._internal import diagnostics, guard
from ._internal import runtime as _setup
from ._internal.recording.category import Category
from ._internal.state import STATE

__all__ = ["PerfTraceCategory", "PerfTracer", "SessionTraceEvent", "SessionTracer", "get_session_tracer"]

#: AReaL's name for :class:`~otel_rl.Category`.
PerfTraceCategory = Category


class SessionTraceEvent(str, Enum):
    """Session lifecycle events (AReaL's values), for :meth:`SessionTracer.record_event`.

    Any phase works the same way as ``"<phase>_start"`` / ``"<phase>_end"``.
    """

    FINALIZED = "finalized"
    GENERATE_START = "generate_start"
    GENERATE_END = "generate_end"
    REWARD_START = "reward_start"
    REWARD_END = "reward_end"
    TOOLCALL_START = "toolcall_start"
    TOOLCALL_END = "toolcall_end"


def _method(event: Any) -> str:
    """``SessionTraceEvent.GENERATE_START`` / ``"generate_start"`` / ``"mark_generate_start"``
    -> the :func:`~otel_rl.trace_session_event` method ``"mark_generate_start"``."""
    value = event.value if isinstance(event, Enum) else str(event)
    return value if value.startswith("mark_") or value == "increment_counter" else "mark_" + value


class SessionTracer:
    """AReaL's ``SessionTracer``: tasks, sessions and their events by id.

    Returned by :func:`get_session_tracer` and :attr:`PerfTracer.session_tracer`
    while session tracing is on. Records are written as sessions finalize (every
    ``flush_threshold`` of them) and by :meth:`flush`.
    """

    __slots__ = ()

    def register_task(self, task_id: Any = None) -> Any:
        """Registers a task (AReaL's two forms: with your id, or without to get one).

        Returns:
            The task id.
        """
        return sessions.register_task(task_id)

    def register_session(self, task_id: Any) -> Any:
        """Registers one session of ``task_id`` and returns its id."""
        return sessions.register_session(task_id)

    def get_session_ids(self, task_id: Any) -> list[Any]:
        """The ids of the task's sessions that are not finalized yet."""
        registry = STATE.registry
        task = registry.tasks.get(task_id) if registry is not None else None
        return sorted(task.open_sessions, key=repr) if task is not None else []

    def record_event(self, session_id: Any, event: Any, **payload: Any) -> None:
        """Records ``event`` (a :class:`SessionTraceEvent` or its value) for a session.

        ``FINALIZED`` takes ``status`` (accepted, rejected, failed, dropped) and ``reason``.
        """
        try:
            method = _method(event)
        except Exception as exc:  # noqa: BLE001 - an event whose str() raises
            guard.report(diagnostics.BAD_SESSION_EVENT, "unusable session event %r: %r", type(event), exc)
            return
        sessions.trace_session_event(method, session_id=session_id, **payload)

    def increment_counter(self, session_id: Any, name: str, value: int = 1) -> None:
        """Adds ``value`` to counter ``name`` of a session's record."""
        sessions.increment_counter(name, value, session_id=session_id)

    def flush(self, force: bool = False) -> None:
        """Writes the finished sessions' records now (``force``: whatever
        ``flush_threshold`` still holds too). Open sessions stay open; ``shutdown()``
        writes them as ``pending``."""
        from . import save

        save(force=True)

    def reset(self) -> None:
        """Writes what is finished (AReaL's reset flushes before clearing)."""
        self.flush(force=True)


_SESSION_TRACER = SessionTracer()


def get_session_tracer() -> SessionTracer | None:
    """AReaL's ``get_session_tracer()``: the session tracer, or ``None`` when
    otel_rl is not configured or session tracing is off."""
    if not STATE.sessions_on:
        return None
    return _SESSION_TRACER


class PerfTracer(trace_api.Tracer):
    """AReaL's ``PerfTracer`` (what ``configure()`` and ``get_tracer()`` return).

    ``PerfTracer(config, rank=0, role=None)`` configures otel_rl as
    :func:`otel_rl.configure` does (replacing the current configuration, as
    constructing a new AReaL tracer does). Its methods are the module-level
    functions; it is also the OpenTelemetry ``Tracer`` otel_rl records with.

    Args:
        config: An AReaL ``PerfTracerConfig`` (or any config ``configure`` takes).
        rank: This process's rank.
        role: This process's role.
    """

    def __init__(self, config: Any = None, *, rank: int | None = None, role: str | None = None,
                 **overrides: Any) -> None:
        _setup.configure(config, rank=rank, role=role, **overrides)

    @classmethod
    def _current(cls) -> PerfTracer:
        return cls.__new__(cls)

    # --- AReaL's attributes -----------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        """Whether scopes and instants are being recorded."""
        return STATE.scopes_on

    def set_enabled(self, flag: bool) -> None:
        """Pauses (``False``) or resumes (``True``) recording of scopes and instants."""
        STATE.scopes_on = bool(flag) and STATE.enabled

    @property
    def session_tracer(self) -> SessionTracer | None:
        """The session tracer, or ``None`` when session tracing is off."""
        return get_session_tracer()

    @property
    def _rank(self) -> int | None:
        return STATE.settings.rank if STATE.settings is not None else None

    @property
    def _role(self) -> str | None:
        return (STATE.settings.role or None) if STATE.settings is not None else None

    @property
    def _pid(self) -> int:
        return os.getpid()

    @property
    def _config(self) -> Any:
        return STATE.settings

    # --- recording ----------------------------------------------------------------------------
    def trace_scope(self, name: str, *, category: Any = None, enable_profiler: bool = False,
                    profiler_args: dict[str, Any] | None = None, args: dict[str, Any] | None = None) -> Any:
        """:func:`otel_rl.trace_scope`."""
        return tracing.trace_scope(name, category, args, enable_profiler, profiler_args)

    atrace_scope = trace_scope

    def instant(self, name: str, *, category: Any = None, args: dict[str, Any] | None = None) -> None:
        """:func:`otel_rl.instant`."""
        tracing.instant(name, category, args)

    def save(self, *, step: int | None = None, force: bool = False) -> None:
        """:func:`otel_rl.save`."""
        from . import save

        save(step, force)

    def reset(self) -> None:
        """Writes everything recorded so far and resumes recording if paused."""
        self.save(force=True)
        STATE.scopes_on = STATE.enabled

    # --- OpenTelemetry's Tracer ----------------------------------------------------------------
    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        """``opentelemetry.trace.Tracer.start_span`` on otel_rl's tracer."""
        return _setup.get_tracer().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """``opentelemetry.trace.Tracer.start_as_current_span`` on otel_rl's tracer."""
        return _setup.get_tracer().start_as_current_span(*args, **kwargs)
