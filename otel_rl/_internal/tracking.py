"""Tasks and sessions on the caller's side: their spans and what is still open.

A task is the root span of its own trace, each session a child span of its
task, each phase instance a child span of its session. The registry keeps only
what is open (tasks with open sessions, unfinalized sessions, running phases);
derivation happens later, in the session processor on the export thread.
"""

from __future__ import annotations

import collections
import itertools
import threading
from random import getrandbits
from threading import get_ident
from time import time_ns
from typing import Any

from opentelemetry.baggage import _BAGGAGE_KEY
from opentelemetry.context import Context, get_current
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.trace.status import StatusCode

from . import guard, keys
from .records import id_value
from .spans import LeanSpan, new_span_id


def with_ids(ctx: Any, span: Any = None, **ids: Any) -> Context:
    """``ctx`` plus baggage ids (keys from :mod:`keys`) and, optionally, a current span."""
    values = dict(ctx)
    if ids:
        bag = dict(values.get(_BAGGAGE_KEY) or {})
        bag.update(ids)
        values[_BAGGAGE_KEY] = bag
    if span is not None:
        values[_SPAN_KEY] = span
    return Context(values)


def current_id(key: str, ctx: Any = None) -> Any:
    bag = (get_current() if ctx is None else ctx).get(_BAGGAGE_KEY)
    if not bag:
        return None
    value = bag.get(key)
    return None if value is None else id_value(value)


class PhaseOptions:
    """Options of a registered phase (see ``otel_rl.register_phase``)."""

    __slots__ = ("allow_overlap",)

    def __init__(self, allow_overlap: bool = True) -> None:
        self.allow_overlap = allow_overlap


#: A task whose sessions are all finalized ends after this long without a new
#: session (its span ends at the last finalize), or at save() / shutdown().
TASK_IDLE_GRACE_NS = 1_000_000_000


class TaskState:
    __slots__ = ("task_id", "span", "ctx", "bag", "open_sessions", "counts", "finalize_requested",
                 "idle_since")

    def __init__(self, task_id: Any, span: LeanSpan, ctx: Context) -> None:
        self.task_id = task_id
        self.span = span
        self.ctx = ctx
        self.bag = ctx.get(_BAGGAGE_KEY)
        self.open_sessions: set[Any] = set()
        self.counts: dict[str, int] = {}
        self.finalize_requested = False
        self.idle_since = 0


class MarkedPhase:
    """A phase instance opened by ``mark_<phase>_start``: never made current, so
    it needs no span object; its record is built when it ends."""

    __slots__ = ("name", "span_id", "start_ns", "thread", "args")

    def __init__(self, name: str, args: Any) -> None:
        self.name = name
        self.args = args
        self.span_id = getrandbits(64) or new_span_id()
        self.thread = get_ident()
        self.start_ns = time_ns()


class SessionState:
    __slots__ = ("session_id", "task_id", "span", "task_ctx", "bag", "_ctx", "open_phases",
                 "counters")

    def __init__(self, session_id: Any, task_id: Any, span: LeanSpan, task: TaskState) -> None:
        self.session_id = session_id
        self.task_id = task_id
        self.span = span
        self.task_ctx = task.ctx
        # The baggage of everything in the session: the task's plus the session id.
        bag = dict(task.bag) if task.bag else {}
        bag[keys.SESSION_ID] = session_id
        self.bag = bag
        self._ctx: Context | None = None
        self.open_phases: list[LeanSpan | MarkedPhase] = []
        self.counters: dict[str, Any] | None = None

    def phase_record(self, phase: MarkedPhase, end_ns: int, attributes: dict[str, Any],
                     status: int = 0, description: str | None = None) -> tuple:
        """The record (:mod:`.records`) of a marked phase, a child of this session's span."""
        span = self.span
        state = span.trace_state
        return (
            phase.name, span.trace_id, phase.span_id, span.span_id, False, span.flags,
            None if not state else state.to_header(), phase.start_ns, end_ns, 0, self.bag,
            phase.thread, None, attributes, phase.args, None, None, status, description, None,
        )

    @property
    def ctx(self) -> Context:
        """The session's context (its span current, its ids in baggage), built
        on first use: code that never makes the session current never pays."""
        ctx = self._ctx
        if ctx is None:
            values = dict(self.task_ctx)
            values[_BAGGAGE_KEY] = self.bag
            values[_SPAN_KEY] = self.span
            ctx = self._ctx = Context(values)
        return ctx


def _phase_attributes(phase: str) -> dict[str, Any]:
    """The attributes of a marked phase's record: one shared dict per phase
    name (records are read, never changed)."""
    attrs = _PHASE_ATTRIBUTES.get(phase)
    if attrs is None:
        attrs = {keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: phase}
        if len(_PHASE_ATTRIBUTES) < 4096:
            _PHASE_ATTRIBUTES[phase] = attrs
    return attrs


_PHASE_ATTRIBUTES: dict[str, dict[str, Any]] = {}


class Registry:
    """Open tasks and sessions of one process."""

    def __init__(self, pipeline: Any, max_pending_sessions: int) -> None:
        self._pipeline = pipeline
        self._max_pending = max_pending_sessions
        self._lock = threading.Lock()
        self._task_ids = itertools.count()
        self._session_ids = itertools.count()
        self.tasks: dict[Any, TaskState] = {}
        self.sessions: collections.OrderedDict[Any, SessionState] = collections.OrderedDict()
        self._finalized: collections.OrderedDict[Any, None] = collections.OrderedDict()
        # Tasks with no open session, oldest first, waiting out TASK_IDLE_GRACE_NS.
        self._idle: collections.OrderedDict[Any, TaskState] = collections.OrderedDict()
        self.phase_options: dict[str, PhaseOptions] = {}

    # --- tasks ---------------------------------------------------------------------
    def register_task(self, task_id: Any = None) -> Any:
        if task_id is None:
            task_id = next(self._task_ids)
        current = get_current()
        # A task is the root of its own trace; the step or scope that submitted
        # it is linked, not parented, because rollouts cross step boundaries.
        root = with_ids(Context(), **_carried_ids(current, keys.STEP))
        span = LeanSpan(self._pipeline, "task", root,
                        attributes={keys.SPAN_KIND: keys.KIND_TASK, keys.TASK_ID: task_id})
        parent = current.get(_SPAN_KEY)
        if parent is not None:
            span.add_link(parent.get_span_context())
        state = TaskState(task_id, span, with_ids(root, span, **{keys.TASK_ID: task_id}))
        with self._lock:
            old = self.tasks.get(task_id)
            self.tasks[task_id] = state
        if old is not None:
            guard.report("task_reregistered", "task %r registered twice; the first is ended", task_id)
            self._end_task(old)
        return task_id

    def task_context(self, task_id: Any) -> Context:
        state = self.tasks.get(task_id)
        if state is not None:
            return with_ids(get_current(), state.span, **{keys.TASK_ID: task_id})
        return with_ids(get_current(), **{keys.TASK_ID: task_id})

    def _end_task(self, task: TaskState, end_ns: int | None = None) -> None:
        span = task.span
        counts = collections.Counter(task.counts)
        finished = sum(counts[s] for s in keys.FINAL_STATUSES)
        span.set_attributes({
            keys.TASK_SESSIONS: finished + counts[keys.STATUS_PENDING],
            keys.TASK_ACCEPTED: counts[keys.STATUS_ACCEPTED],
            keys.TASK_REJECTED: counts[keys.STATUS_REJECTED],
            keys.TASK_FAILED: counts[keys.STATUS_FAILED],
            keys.TASK_DROPPED: counts[keys.STATUS_DROPPED],
            keys.TASK_ACCEPTANCE_RATE: counts[keys.STATUS_ACCEPTED] / finished if finished else 0.0,
        })
        span.end(end_ns)

    def end_idle_tasks(self, now_ns: int | None = None) -> None:
        """Ends tasks idle past the grace period (all idle tasks when ``now_ns`` is None)."""
        idle = self._idle
        if not idle:
            return
        expired = []
        with self._lock:
            while idle:
                task = next(iter(idle.values()))
                if now_ns is not None and now_ns - task.idle_since < TASK_IDLE_GRACE_NS:
                    break
                idle.popitem(last=False)
                if self.tasks.get(task.task_id) is task:
                    del self.tasks[task.task_id]
                expired.append(task)
        for task in expired:
            self._end_task(task, task.idle_since)

    # --- sessions ------------------------------------------------------------------
    def register_session(self, task_id: Any = None) -> Any:
        if task_id is None:
            task_id = current_id(keys.TASK_ID)
        task = self.tasks.get(task_id) if task_id is not None else None
        if task is None:
            guard.report("session_without_task",
                         "session registered for unregistered task %r; registering it", task_id)
            task_id = self.register_task(task_id)
            task = self.tasks[task_id]
        session_id = next(self._session_ids)
        span = LeanSpan(self._pipeline, "session", task.ctx, attributes={
            keys.SPAN_KIND: keys.KIND_SESSION, keys.SESSION_ID: session_id, keys.TASK_ID: task_id,
        })
        state = SessionState(session_id, task_id, span, task)
        evicted = None
        with self._lock:
            self.sessions[session_id] = state
            task.open_sessions.add(session_id)
            if task.idle_since:
                task.idle_since = 0
                self._idle.pop(task_id, None)
            if len(self.sessions) > self._max_pending:
                _, evicted = self.sessions.popitem(last=False)
        if evicted is not None:
            guard.count("sessions_evicted")
            self._finalize(evicted, keys.STATUS_DROPPED, "evicted: too many pending sessions")
        return session_id

    def session_context(self, session_id: Any) -> Context:
        state = self.sessions.get(session_id)
        if state is not None:
            return with_ids(get_current(), state.span, **{
                keys.TASK_ID: state.task_id, keys.SESSION_ID: session_id})
        return with_ids(get_current(), **{keys.SESSION_ID: session_id})

    def lookup_session(self, session_id: Any, what: str) -> SessionState | None:
        if session_id is None:
            session_id = current_id(keys.SESSION_ID)
        state = self.sessions.get(session_id) if session_id is not None else None
        if state is None:
            if session_id is None:
                guard.report("no_session", "%s outside any session; ignored", what)
            elif session_id in self._finalized:
                guard.report("event_after_finalize", "%s for finalized session %r; ignored",
                             what, session_id)
            else:
                guard.report("unknown_session", "%s for unknown session %r; ignored", what, session_id)
        return state

    # --- phases --------------------------------------------------------------------
    def _check_overlap(self, state: SessionState, phase: str) -> None:
        options = self.phase_options.get(phase)
        if options is not None and not options.allow_overlap:
            if any(p.name == phase for p in state.open_phases):
                guard.report("overlapping_phase",
                             "phase %r started while another instance is open (register_phase "
                             "allow_overlap=False); both are recorded", phase)

    def start_phase(self, state: SessionState, phase: str, payload: Any = None) -> LeanSpan:
        """A phase made current: a span, child of the session span, with the
        session's ids in its context for the spans inside it."""
        if self.phase_options:
            self._check_overlap(state, phase)
        span = LeanSpan(self._pipeline, phase, state.ctx, parent=state.span, args=payload,
                        attributes={keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: phase})
        state.open_phases.append(span)
        return span

    def mark_phase_start(self, state: SessionState, phase: str, payload: Any = None) -> None:
        if self.phase_options:
            self._check_overlap(state, phase)
        state.open_phases.append(MarkedPhase(phase, payload))

    def end_phase(self, state: SessionState | None, span: LeanSpan, payload: Any = None) -> None:
        if payload:
            span.args = {**span.args, **payload} if span.args else payload
        if state is not None:
            try:
                state.open_phases.remove(span)
            except ValueError:
                pass
        span.end()

    def end_phase_by_name(self, state: SessionState, phase: str, payload: Any = None) -> None:
        """Ends the latest open instance of ``phase`` (``mark_<phase>_end``)."""
        now = time_ns()
        phases = state.open_phases
        if phases and phases[-1].name == phase:  # the usual case: the phase opened last
            span = phases.pop()
        else:
            for i in range(len(phases) - 2, -1, -1):
                if phases[i].name == phase:
                    span = phases.pop(i)
                    break
            else:
                guard.report("phase_end_without_start", "mark_%s_end without a start; ignored", phase)
                return
        if type(span) is not MarkedPhase:
            self.end_phase(None, span, payload)
            return
        if payload:
            span.args = {**span.args, **payload} if span.args else payload
        self._pipeline.enqueue(state.phase_record(span, now, _phase_attributes(phase)))

    def increment_counter(self, state: SessionState, name: str, value: Any = 1) -> None:
        counters = state.counters
        if counters is None:
            counters = state.counters = {}
        counters[name] = counters.get(name, 0) + value

    # --- finalization ----------------------------------------------------------------
    def finalize_session(self, session_id: Any, status: str, reason: Any) -> None:
        with self._lock:
            state = self.sessions.pop(session_id, None)
        if state is None:
            if session_id in self._finalized:
                guard.report("double_finalize",
                             "session %r finalized twice; the first status stands", session_id)
            else:
                guard.report("unknown_session", "mark_finalized for unknown session %r; ignored",
                             session_id)
            return
        self._finalize(state, status, reason)

    def finalize_task(self, task_id: Any, status: str, reason: Any) -> None:
        task = self.tasks.get(task_id)
        if task is None:
            guard.report("unknown_task", "mark_finalized for unknown task %r; ignored", task_id)
            return
        task.finalize_requested = True
        for session_id in list(task.open_sessions):
            self.finalize_session(session_id, status, reason)
        with self._lock:
            self._idle.pop(task_id, None)
            ended = self.tasks.pop(task_id, None) is not None
        if ended:
            self._end_task(task)

    def _finalize(self, state: SessionState, status: str, reason: Any) -> None:
        if status not in keys.FINAL_STATUSES and status != keys.STATUS_PENDING:
            guard.report("unknown_status", "unknown session status %r; recorded as given", status)
        for phase in state.open_phases:
            # A phase still running when its session ends is interrupted: ended
            # now (no leaked span) with ERROR status and a null end in the record.
            description = f"interrupted: session {status}"
            if type(phase) is MarkedPhase:
                attrs = {**_phase_attributes(phase.name), keys.PHASE_INTERRUPTED: True}
                self._pipeline.enqueue(state.phase_record(
                    phase, time_ns(), attrs, StatusCode.ERROR.value, description))
            else:
                phase.set_attribute(keys.PHASE_INTERRUPTED, True)
                phase.set_status(StatusCode.ERROR, description)
                phase.end()
        state.open_phases.clear()
        span = state.span
        attrs = span.attributes  # registry spans always have a dict; no copy needed
        attrs[keys.SESSION_STATUS] = status
        if reason is not None:
            attrs[keys.SESSION_REASON] = str(reason)
        if state.counters:
            for name, value in state.counters.items():
                attrs[keys.SESSION_COUNTER_PREFIX + str(name)] = value
        if status == keys.STATUS_FAILED:
            span.set_status(StatusCode.ERROR, str(reason or "failed"))
        span.end()
        with self._lock:
            self._finalized[state.session_id] = None
            if len(self._finalized) > 65536:
                self._finalized.popitem(last=False)
            task = self.tasks.get(state.task_id)
            if task is None:
                return
            task.open_sessions.discard(state.session_id)
            task.counts[status] = task.counts.get(status, 0) + 1
            if not task.open_sessions and not task.finalize_requested:
                # More sessions of this task may still come (registered one by
                # one); end it once it has been idle for the grace period.
                task.idle_since = span.end_ns
                self._idle[task.task_id] = task
        self.end_idle_tasks(span.end_ns)

    def close_all(self) -> None:
        """Ends everything still open: sessions as ``pending``, then their tasks."""
        self.end_idle_tasks()
        with self._lock:
            sessions = list(self.sessions.values())
            self.sessions.clear()
        for state in sessions:
            self._finalize(state, keys.STATUS_PENDING, None)
        self.end_idle_tasks()
        with self._lock:
            tasks = list(self.tasks.values())
            self.tasks.clear()
        for task in tasks:
            self._end_task(task)


def _carried_ids(ctx: Any, *names: str) -> dict[str, Any]:
    bag = ctx.get(_BAGGAGE_KEY) or {}
    return {name: bag[name] for name in names if name in bag}
