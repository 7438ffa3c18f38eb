"""Tasks, sessions and phases (AReaL ``perf_tracer`` session-tracer names).

A task is one dataset item being rolled out (the root span of its own trace);
each sampled trajectory is a session (a child span of its task); generate,
toolcall, reward and any phase you name are child spans of the session. Ids
live in the OpenTelemetry context (baggage), so asyncio tasks and threads that
copy context inherit them, and :func:`otel_rl.inject` carries them across
processes.
"""

from __future__ import annotations

import functools
import inspect
from threading import get_ident
from time import time_ns
from typing import Any, Callable, TypeVar

from opentelemetry import context as context_api

from ._internal import diagnostics, guard, keys
from ._internal.payload import own_values
from ._internal.recording.spans import LeanSpan, record_error
from ._internal.state import STATE
from ._internal.recording import tracking
from ._internal.recording.tracking import PHASES, PhaseOptions, current_id

try:
    from ._internal.recording import _tracking  # configured when tracking was imported
except ImportError:  # built without a C compiler: the Python functions run as they are
    _tracking = None

F = TypeVar("F", bound=Callable[..., Any])


def register_task(task_id: Any = None) -> Any:
    """Registers a dataset task and starts its span (the root of a new trace).

    Args:
        task_id: Your id for the task; a process-unique integer when omitted.

    Returns:
        The task id (``None`` when tracing is off and no id was given).
    """
    if not STATE.sessions_on:
        return task_id
    try:
        return STATE.registry.register_task(task_id)
    except Exception as exc:  # noqa: BLE001 - guard.guarded, inlined on this hot path
        _report_compiled_error("register_task", exc)
        return task_id


@guard.guarded()
def set_task_id(task_id: Any) -> None:
    """Makes ``task_id`` (and its span, if registered here) current in this context."""
    if STATE.sessions_on:
        context_api.attach(STATE.registry.task_context(task_id))


def get_task_id() -> Any:
    """The task id of the current context, or ``None``."""
    return current_id(keys.TASK_ID)


def register_session(task_id: Any = None) -> Any:
    """Registers one sampled session of a task and starts its span.

    Args:
        task_id: The task; defaults to the current context's task.

    Returns:
        The new session id (``None`` when tracing is off).
    """
    if not STATE.sessions_on:
        return None
    try:
        return STATE.registry.register_session(task_id)
    except Exception as exc:  # noqa: BLE001 - guard.guarded, inlined on this hot path
        _report_compiled_error("register_session", exc)
        return None


@guard.guarded()
def set_session_id(session_id: Any) -> None:
    """Makes ``session_id`` (and its span) current in this context."""
    if STATE.sessions_on:
        context_api.attach(STATE.registry.session_context(session_id))


def get_session_id() -> Any:
    """The session id of the current context, or ``None``."""
    return current_id(keys.SESSION_ID)


def session_context() -> Callable[[F], F]:
    """Decorator registering a new session for each call made inside a task.

    The call runs with the session current, so phases and scopes inside it
    belong to the session. Outside a task (no task id in context) the function
    simply runs.
    """

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*a: Any, **kw: Any) -> Any:
                token = _enter_new_session()
                try:
                    return await fn(*a, **kw)
                finally:
                    _leave(token)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            token = _enter_new_session()
            try:
                return fn(*a, **kw)
            finally:
                _leave(token)

        return wrapper  # type: ignore[return-value]

    return decorate


@guard.guarded()
def _enter_new_session() -> Any:
    if not STATE.sessions_on or current_id(keys.TASK_ID) is None:
        return None
    session_id = STATE.registry.register_session()
    return context_api.attach(STATE.registry.session_context(session_id))


def _leave(token: Any) -> None:
    if token is not None:
        try:
            context_api.detach(token)
        except Exception:  # noqa: BLE001 - never raise into user code
            pass


class trace_session_phase:  # noqa: N801 - AReaL's name; a class for speed
    """Times one phase of the current session: ``with trace_session_phase("generate"):``.

    Any phase name works (built-in generate, toolcall, reward, or your own) and
    repeats are counted as turns. Also an async context manager
    (``async with atrace_session_phase(...)``).

    Args:
        phase: Phase name.
        start_payload: Metadata recorded at the start (``rl.args.*`` attributes).
        end_payload: Metadata recorded at the end.
    """

    __slots__ = ("phase", "start_payload", "end_payload", "_state", "_span", "_token")

    def __init__(self, phase: str, start_payload: dict[str, Any] | None = None,
                 end_payload: dict[str, Any] | None = None) -> None:
        self.phase = phase
        self.start_payload = start_payload
        self.end_payload = end_payload
        self._span: LeanSpan | None = None

    def __enter__(self) -> LeanSpan | None:
        if not STATE.sessions_on:
            return None
        try:
            registry = STATE.registry
            state = self._state = registry.lookup_session(None, self.phase)
            if state is None:
                return None
            span = self._span = registry.start_phase(state, self.phase, self.start_payload)
            span.__enter__()
            return span
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.INTERNAL_ERROR, "internal error starting a phase: %r", exc)
            self._span = None
            return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        span = self._span
        if span is None:
            return
        self._span = None
        try:
            token, span._token = span._token, None
            if token is not None:
                context_api.detach(token)
            if exc is not None and not span.end_ns:
                record_error(span, exc)
            STATE.registry.end_phase(self._state, span, self.end_payload)
        except Exception as err:  # noqa: BLE001
            guard.report(diagnostics.INTERNAL_ERROR, "internal error ending a phase: %r", err)

    async def __aenter__(self) -> LeanSpan | None:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)


atrace_session_phase = trace_session_phase
"""``async with atrace_session_phase(phase, ...)`` - the async spelling."""


def trace_session(phase: str) -> Callable[[F], F]:
    """Decorator timing each call as ``phase`` of the current session."""

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*a: Any, **kw: Any) -> Any:
                with trace_session_phase(phase):
                    return await fn(*a, **kw)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            with trace_session_phase(phase):
                return fn(*a, **kw)

        return wrapper  # type: ignore[return-value]

    return decorate


def trace_session_event(method: str, session_id: Any = None, task_id: Any = None, **payload: Any) -> None:
    """Records a lifecycle event of a session (or of every session of a task).

    Methods:
        ``mark_finalized`` (``status``: accepted, rejected, failed or dropped;
        ``reason``; ``reward``: a number, ``rl.session.reward`` and the record's
        ``reward``): ends the session; with ``task_id`` and no ``session_id``
        it finalizes every open session of the task and ends the task span.
        ``mark_<phase>_start`` / ``mark_<phase>_end``: opens / closes a phase
        instance (payload recorded on it). ``increment_counter`` (``name``,
        ``value=1``): adds to a counter in the session record.

    Args:
        method: One of the methods above.
        session_id: Target session; defaults to the current one.
        task_id: Target task (for ``mark_finalized`` of a whole task).
        **payload: Method arguments and metadata.
    """
    if not STATE.sessions_on:
        return
    try:
        registry = STATE.registry
        parsed = _PHASE_METHODS.get(method)
        if parsed and session_id is not None and not registry.phase_options:
            # The common case, inlined: a phase mark for a known, open session.
            state = registry.sessions.get(session_id)
            if state is not None:
                phases = state.open_phases
                if parsed[1]:  # tracking.marked_phase, inlined
                    args = own_values(payload) if payload else None
                    phases.append((parsed[0], time_ns(), get_ident(), args, STATE.policy_version))
                    return
                if phases and type(phases[-1]) is tuple and phases[-1][0] == parsed[0] and not payload:
                    # SessionState.end_marked, inlined.
                    name, start_ns, thread, args, version = phases.pop()
                    state.done.append((name, start_ns, time_ns(), thread, args, None, version))
                    return
                registry.end_phase_by_name(state, parsed[0], own_values(payload) if payload else None)
                return
        _session_event(registry, method, session_id, task_id, payload)
    except Exception as exc:  # noqa: BLE001 - inlined guard: this is a hot path
        _report_compiled_error("trace_session_event", exc)


def _report_compiled_error(name: str, exc: BaseException) -> None:
    """The guard of a session call ``name`` (its compiled twin reports through it too)."""
    guard.report(diagnostics.INTERNAL_ERROR, "internal error in %s: %r", name, exc)


def _session_event(registry: Any, method: str, session_id: Any, task_id: Any,
                   payload: dict[str, Any]) -> None:
    # Phase marks are the common case: one dict lookup decides.
    parsed = _PHASE_METHODS.get(method)
    if parsed is None:
        if method == "mark_finalized":
            status = payload.get("status", keys.STATUS_ACCEPTED)
            reason = payload.get("reason")
            extra = _reward(payload.get("reward"))
            if session_id is None and task_id is not None:
                registry.finalize_task(task_id, status, reason, extra)
                return
            if session_id is None:
                session_id = current_id(keys.SESSION_ID)
            registry.finalize_session(session_id, status, reason, extra)
            return
        if method == "increment_counter":
            state = registry.lookup_session(session_id, method)
            if state is not None:
                name = payload.get("name", payload.get("counter", "count"))
                registry.increment_counter(state, str(name), payload.get("value", 1))
            return
        parsed = _parse_phase_method(method)
        if len(_PHASE_METHODS) < 4096:
            _PHASE_METHODS[method] = parsed
    if parsed:
        phase, start = parsed
        state = registry.lookup_session(session_id, method)
        if state is None:
            return
        if start:
            registry.mark_phase_start(state, phase, own_values(payload) if payload else None)
        else:
            registry.end_phase_by_name(state, phase, own_values(payload) if payload else None)
        return
    guard.report(diagnostics.UNKNOWN_SESSION_METHOD, "unknown trace_session_event method %r; ignored", method)


def _reward(reward: Any) -> dict[str, Any] | None:
    """The session attributes of a ``reward=`` given with a verdict (a number, else counted)."""
    if reward is None:
        return None
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        return {keys.SESSION_REWARD: reward}
    try:
        return {keys.SESSION_REWARD: float(reward)}  # a numpy or torch scalar
    except (TypeError, ValueError):
        guard.report(diagnostics.BAD_REWARD, "mark_finalized reward=%s is not a number; ignored",
                     type(reward).__name__)
        return None


def _parse_phase_method(method: str) -> tuple[str, bool] | tuple[()]:
    """``mark_<phase>_start`` -> (phase, True), ``mark_<phase>_end`` -> (phase, False), else ()."""
    for suffix, start in (("_start", True), ("_end", False)):
        if method.startswith("mark_") and method.endswith(suffix) and len(method) > 5 + len(suffix):
            return method[5:-len(suffix)], start
    return ()


#: Parsed phase methods; bounded because method names come from code, but capped anyway.
_PHASE_METHODS: dict[str, Any] = {}


def _compiled(python: Callable[..., Any], build: Callable[[Callable[..., Any]], Any]) -> Callable[..., Any]:
    """``python`` with its common case compiled where ``recording/_tracking.c`` is built:
    ``build(python)`` makes the compiled callable, which takes that case itself and hands
    every other call to ``python``; it keeps ``python``'s name, docstring and signature."""
    if _tracking is None:
        return python
    return functools.update_wrapper(build(python), python)


register_task = _compiled(register_task, lambda python: _tracking.register_task(python, STATE, globals()))
register_session = _compiled(register_session, lambda python: _tracking.register_session(
    python, STATE, vars(tracking)))
trace_session_event = _compiled(trace_session_event, lambda python: _tracking.session_event(
    python, STATE, _PHASE_METHODS, globals()))


@guard.guarded()
def increment_counter(name: str, value: int | float = 1, session_id: Any = None) -> None:
    """Adds ``value`` to counter ``name`` of the current (or given) session."""
    trace_session_event("increment_counter", session_id=session_id, name=name, value=value)


def register_phase(name: str, *, allow_overlap: bool = True) -> None:
    """Declares options of a phase (any name works without registering).

    Args:
        name: Phase name.
        allow_overlap: Whether instances of this phase may overlap within one
            session; when ``False`` an overlap is reported (and still recorded).
    """
    _PHASES[name] = PhaseOptions(allow_overlap)
    if STATE.registry is not None:
        STATE.registry.phase_options[name] = _PHASES[name]


_PHASES = PHASES  # kept in recording.tracking: configure() applies them to its registry
