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
from opentelemetry.trace import SpanKind
from opentelemetry.trace.status import StatusCode

from .. import diagnostics, guard, keys
from ..state import STATE
from ..payload import safe_repr, safe_str, snapshot
from . import record as records
from .ids import id_value, new_span_id
from . import spans as spans_module
from .spans import LeanSpan, SpanSink


_EMPTY_CONTEXT = Context()


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


#: Phases registered in this process (``otel_rl.register_phase``), by name: they
#: outlive configurations, and each new registry starts with them.
PHASES: dict[str, PhaseOptions] = {}

#: Finalized sessions a registry remembers for ``otel_rl.consume`` / ``annotate``
#: in the same process (their ids, trace ids and versions): at least this many.
RECENT_SESSIONS = 4096

#: Ids of finalized sessions a registry remembers, to tell a second finalize from
#: an unknown session: at least this many.
FINALIZED_KEPT = 65536

#: A task whose sessions are all finalized ends after this long without a new
#: session (its span ends at the last finalize), or at save() / shutdown().
TASK_IDLE_GRACE_NS = 1_000_000_000


def _keep_latest(ids: dict[Any, Any], kept: int) -> dict[Any, Any]:
    """``ids`` itself, or its latest ``kept`` entries once it holds twice that: a
    plain dict trimmed in bulk costs a finalize less than an ordered one trimmed
    one entry at a time."""
    if len(ids) <= 2 * kept:
        return ids
    return dict(itertools.islice(ids.items(), len(ids) - kept, None))


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


def marked_phase(name: str, args: Any) -> tuple:
    """A phase instance opened by ``mark_<phase>_start``: never made current, so
    it needs no span object, only ``(name, start_ns, thread, args, policy
    version)``. When it ends it joins its session's bundle
    (:data:`.record.BUNDLE`), shipped with the session's record."""
    return (name, time_ns(), get_ident(), args, STATE.policy_version)


def phase_name(phase: LeanSpan | tuple) -> str:
    """The name of an open phase: a span, or a :func:`marked_phase` tuple."""
    return phase[0] if type(phase) is tuple else phase.name


def versions_seen(version: Any, done: list[tuple]) -> list[Any]:
    """The policy versions of a session registered under ``version`` whose marked
    phases ``done`` ended, oldest first, each once."""
    seen = [] if version is None else [version]
    for phase in done:
        phase_version = phase[6]
        if phase_version is not None and phase_version not in seen:
            seen.append(phase_version)
    return seen


class SessionState:
    """An open session. Its span object is made only when something needs it
    (the session made current, a phase run as a span inside it); otherwise
    its record is built directly at finalize, with the phases that ended
    before it (``done``) bundled in, so the training thread queues one record
    per session instead of one per phase."""

    __slots__ = ("session_id", "task_id", "task", "span_id", "start_ns", "thread", "_span", "_ctx",
                 "open_phases", "done", "counters", "_pipeline", "version", "extra")

    def __init__(self, session_id: Any, task_id: Any, task: TaskState, pipeline: SpanSink) -> None:
        self.session_id = session_id
        self.task_id = task_id
        # Trace id, parent, flags and baggage come from the task when needed.
        self.task = task
        self.span_id = getrandbits(64) or new_span_id()
        self.start_ns = time_ns()
        self.thread = get_ident()
        self._span: LeanSpan | None = None
        self._ctx: Context | None = None
        self._pipeline = pipeline
        self.open_phases: list[LeanSpan | tuple] = []
        self.done: list[tuple] = []
        self.counters: dict[str, Any] | None = None
        #: The policy version when the session was registered.
        self.version = STATE.policy_version
        #: Attributes set on the session before it ends (consumed step, staleness, reward).
        self.extra: dict[str, Any] | None = None

    @property
    def bag(self) -> dict[str, Any]:
        """The baggage of everything in the session: the task's plus the session id."""
        bag = dict(self.task.bag) if self.task.bag else {}
        bag[keys.SESSION_ID] = self.session_id
        return bag

    def attributes(self) -> dict[str, Any]:
        attrs = {keys.SPAN_KIND: keys.KIND_SESSION, keys.SESSION_ID: self.session_id, keys.TASK_ID: self.task_id}
        if self.version is not None:
            attrs[keys.POLICY_VERSION] = self.version
        return attrs

    def versions(self) -> list[Any]:
        """The policy versions the session saw so far, oldest first, each once:
        at its registration, then at the start of each phase."""
        seen = versions_seen(self.version, self.done)
        for phase in self.open_phases:
            version = phase[4] if type(phase) is tuple else (phase.attributes or {}).get(keys.POLICY_VERSION)
            if version is not None and version not in seen:
                seen.append(version)
        return seen

    @property
    def span(self) -> LeanSpan:
        """The session's span, made on first use with the ids and start time
        the session was registered with."""
        span = self._span
        if span is None:
            span = LeanSpan(self._pipeline, "session", self.task.ctx, attributes=self.attributes())
            span.span_id = self.span_id
            span.start_ns = self.start_ns
            span.thread = self.thread
            self._span = span
        return span

    def end_marked(self, phase: tuple, end_ns: int, description: str | None = None,
                   payload: Any = None) -> None:
        """Keeps an ended :func:`marked_phase` for the session's record (see
        :data:`.record.BUNDLE`); an end ``payload`` joins its start payload."""
        name, start_ns, thread, args, version = phase
        if payload:
            args = {**args, **payload} if args else payload
        self.done.append(records.bundled_phase(name, start_ns, end_ns, thread, args, description, version))

    def record(self, end_ns: int, attributes: dict[str, Any], status: int, description: str | None) -> tuple:
        """The session's record with its ended marked phases bundled in."""
        span = self._span
        if span is not None:
            # Keep what was set on the span while the session was current.
            span.attributes = {**span.attributes, **attributes} if span.attributes else attributes
            span.end_ns = end_ns
            if status:
                span.status_code = StatusCode.ERROR
                span.status_desc = description
            return records.with_bundle(span.record(), self.session_id, self.done)
        task = self.task
        parent = task.span
        return records.make(
            "session", parent.trace_id, self.span_id, parent.span_id, False, parent.flags,
            records.trace_state_header(parent.trace_state), self.start_ns, end_ns, 0, task.bag, self.thread,
            None, attributes, None, None, None, status, description, None,
            records.bundle(self.session_id, self.done),
        )

    @property
    def ctx(self) -> Context:
        """The session's context (its span current, its ids in baggage), built
        on first use: code that never makes the session current never pays."""
        ctx = self._ctx
        if ctx is None:
            values = dict(self.task.ctx)
            values[_BAGGAGE_KEY] = self.bag
            values[_SPAN_KEY] = self.span
            ctx = self._ctx = Context(values)
        return ctx


class Registry:
    """Open tasks and sessions of one process."""

    def __init__(self, pipeline: SpanSink, max_pending_sessions: int) -> None:
        self._pipeline = pipeline
        self._max_pending = max_pending_sessions
        self._lock = threading.Lock()
        self._task_ids = itertools.count()
        self._session_ids = itertools.count()
        self.tasks: dict[Any, TaskState] = {}
        # A plain dict: an OrderedDict's links cost the compiled steps 450 instructions a session.
        self.sessions: dict[Any, SessionState] = {}
        self._oldest_id = 0  # no pending session's id is below it (_oldest_pending)
        self._finalized: dict[Any, None] = {}
        #: Recently finalized sessions, for a trainer in this process consuming or annotating them:
        #: id -> (task id, trace id, span id, version at registration, ended marked phases).
        self.recent: dict[Any, tuple] = {}
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
        # Only the step travels from the submitting context (as baggage).
        carried = current.get(_BAGGAGE_KEY)
        step = carried.get(keys.STEP) if carried else None
        root = _EMPTY_CONTEXT if step is None else Context({_BAGGAGE_KEY: {keys.STEP: step}})
        span = LeanSpan(self._pipeline, "task", root,
                        attributes={keys.SPAN_KIND: keys.KIND_TASK, keys.TASK_ID: task_id})
        parent = current.get(_SPAN_KEY)
        if parent is not None:
            span.add_link(parent.get_span_context())
        bag = {keys.TASK_ID: task_id} if step is None else {keys.STEP: step, keys.TASK_ID: task_id}
        state = TaskState(task_id, span, Context({_BAGGAGE_KEY: bag, _SPAN_KEY: span}))
        with self._lock:
            old = self.tasks.get(task_id)
            self.tasks[task_id] = state
        if old is not None:
            guard.report(diagnostics.TASK_REREGISTERED, "task %r registered twice; the first is ended", task_id)
            self._end_task(old)
        return task_id

    def task_context(self, task_id: Any) -> Context:
        state = self.tasks.get(task_id)
        if state is not None:
            return with_ids(get_current(), state.span, **{keys.TASK_ID: task_id})
        return with_ids(get_current(), **{keys.TASK_ID: task_id})

    def _end_task(self, task: TaskState, end_ns: int | None = None) -> None:
        span = task.span
        count = task.counts.get
        accepted = count(keys.STATUS_ACCEPTED, 0)
        finished = sum(count(s, 0) for s in keys.FINAL_STATUSES)
        span.set_attributes({
            keys.TASK_SESSIONS: finished + count(keys.STATUS_PENDING, 0),
            keys.TASK_ACCEPTED: accepted,
            keys.TASK_REJECTED: count(keys.STATUS_REJECTED, 0),
            keys.TASK_FAILED: count(keys.STATUS_FAILED, 0),
            keys.TASK_DROPPED: count(keys.STATUS_DROPPED, 0),
            keys.TASK_ACCEPTANCE_RATE: accepted / finished if finished else 0.0,
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
    def _oldest_pending(self, newest: int) -> Any:
        """The oldest pending session's id (lock held): ids count up as sessions register, so the smallest
        present, sought from the last found (a dict's first item skips every entry deleted before it: 30 µs)."""
        sid = self._oldest_id
        while sid <= newest and sid not in self.sessions:
            sid += 1
        self._oldest_id = sid if sid <= newest else next(iter(self.sessions))  # a replaced counter
        return self._oldest_id

    def register_session(self, task_id: Any = None) -> Any:
        if task_id is None:
            task_id = current_id(keys.TASK_ID)
        task = self.tasks.get(task_id) if task_id is not None else None
        if task is None:
            guard.report(diagnostics.SESSION_WITHOUT_TASK,
                         "session registered for unregistered task %r; registering it", task_id)
            task_id = self.register_task(task_id)
            task = self.tasks[task_id]
        session_id = next(self._session_ids)
        state = SessionState(session_id, task_id, task, self._pipeline)
        evicted = None
        with self._lock:
            self.sessions[session_id] = state
            task.open_sessions.add(session_id)
            if task.idle_since:
                task.idle_since = 0
                self._idle.pop(task_id, None)
            if len(self.sessions) > self._max_pending:
                evicted = self.sessions.pop(self._oldest_pending(session_id))
        if evicted is not None:
            guard.count(diagnostics.SESSIONS_EVICTED)
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
                guard.report(diagnostics.NO_SESSION, "%s outside any session; ignored", what)
            elif session_id in self._finalized:
                guard.report(diagnostics.EVENT_AFTER_FINALIZE, "%s for finalized session %r; ignored",
                             what, session_id)
            else:
                guard.report(diagnostics.UNKNOWN_SESSION, "%s for unknown session %r; ignored", what, session_id)
        return state

    # --- phases --------------------------------------------------------------------
    def _check_overlap(self, state: SessionState, phase: str) -> None:
        options = self.phase_options.get(phase)
        if options is not None and not options.allow_overlap:
            if any(phase_name(p) == phase for p in state.open_phases):
                guard.report(diagnostics.OVERLAPPING_PHASE,
                             "phase %r started while another instance is open (register_phase "
                             "allow_overlap=False); both are recorded", phase)

    def start_phase(self, state: SessionState, phase: str, payload: Any = None) -> LeanSpan:
        """A phase made current: a span, child of the session span, with the
        session's ids in its context for the spans inside it."""
        if self.phase_options:
            self._check_overlap(state, phase)
        attributes = {keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: phase}
        version = STATE.policy_version
        if version is not None:
            attributes[keys.POLICY_VERSION] = version
        span = LeanSpan(self._pipeline, phase, state.ctx, parent=state.span, args=payload, attributes=attributes)
        state.open_phases.append(span)
        return span

    def mark_phase_start(self, state: SessionState, phase: str, payload: Any = None) -> None:
        if self.phase_options:
            self._check_overlap(state, phase)
        state.open_phases.append(marked_phase(phase, payload))

    def end_phase(self, state: SessionState | None, span: LeanSpan, payload: Any = None) -> None:
        if payload:
            payload = snapshot(payload)
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
        if phases and phase_name(phases[-1]) == phase:  # the usual case: the phase opened last
            span = phases.pop()
        else:
            for i in range(len(phases) - 2, -1, -1):
                if phase_name(phases[i]) == phase:
                    span = phases.pop(i)
                    break
            else:
                guard.report(diagnostics.PHASE_END_WITHOUT_START, "mark_%s_end without a start; ignored", phase)
                return
        if type(span) is tuple:
            state.end_marked(span, now, payload=payload)
        else:
            self.end_phase(None, span, payload)

    def increment_counter(self, state: SessionState, name: str, value: Any = 1) -> None:
        counters = state.counters
        if counters is None:
            counters = state.counters = {}
        counters[name] = counters.get(name, 0) + value

    # --- finalization ----------------------------------------------------------------
    def finalize_session(self, session_id: Any, status: str, reason: Any, extra: dict[str, Any] | None = None,
                         ) -> None:
        with self._lock:
            state = self.sessions.pop(session_id, None)
        if state is None:
            if session_id in self._finalized:
                guard.report(diagnostics.DOUBLE_FINALIZE,
                             "session %r finalized twice; the first status stands", session_id)
            else:
                guard.report(diagnostics.UNKNOWN_SESSION, "mark_finalized for unknown session %r; ignored",
                             session_id)
            return
        self._finalize_all([state], status, reason, extra)

    def finalize_task(self, task_id: Any, status: str, reason: Any, extra: dict[str, Any] | None = None) -> None:
        task = self.tasks.get(task_id)
        if task is None:
            guard.report(diagnostics.UNKNOWN_TASK, "mark_finalized for unknown task %r; ignored", task_id)
            return
        task.finalize_requested = True
        # The plain case compiled (see _tracking.c); False sends the task the Python way below.
        compiled = _finalize_sessions if reason is None and not extra else None
        if not (compiled and compiled(self, task, status, time_ns, current_id)):
            with self._lock:
                pop = self.sessions.pop
                states = [state for state in (pop(sid, None) for sid in list(task.open_sessions)) if state]
            if states:
                self._finalize_all(states, status, reason, extra)
        with self._lock:
            self._idle.pop(task_id, None)
            ended = self.tasks.pop(task_id, None) is not None
        if ended:
            self._end_task(task)

    def _finalize(self, state: SessionState, status: str, reason: Any) -> None:
        self._finalize_all([state], status, reason)

    def _finalize_all(self, states: list[SessionState], status: str, reason: Any,
                      extra: dict[str, Any] | None = None) -> None:
        """Ends sessions already taken out of ``sessions``: their records, then
        the bookkeeping of their tasks under one lock. ``extra`` attributes go on
        every session's span (the reward given with the verdict)."""
        if type(status) is not str:
            # A str enum member as its value, anything else (a float('nan'), an object) as its text:
            # as a metric label or in a record it would otherwise cost the metrics interval or the record.
            status = str.__str__(status) if isinstance(status, str) else safe_str(status)
        if status not in keys.FINAL_STATUSES and status != keys.STATUS_PENDING:
            guard.report(diagnostics.UNKNOWN_STATUS, "unknown session status %s; recorded as given",
                         safe_repr(status))
        failed = status == keys.STATUS_FAILED
        code = StatusCode.ERROR.value if failed else 0
        # Never reason's own __bool__ / __str__ unguarded: a session is not lost to them.
        reason = None if reason is None else safe_str(reason)
        description = (reason or "failed") if failed else None
        enqueue = self._pipeline.enqueue
        end_ns = time_ns()
        # A session's step is the step that consumed it: the one in force where it is
        # finalized (the trainer's verdict travels with its step), else its task's.
        step = current_id(keys.STEP)
        # The plain case compiled (see _tracking.c): no step, no extra attributes, and the
        # session itself plain (checked there); None sends a session the Python way below.
        compiled = _session_record if step is None and not extra else None
        for state in states:
            rec = compiled(state, status, reason, code, description, end_ns) if compiled else None
            if rec is not None:
                enqueue(rec)
                continue
            if state.open_phases:
                self._interrupt_phases(state, status, end_ns)
            attrs = state.attributes()
            if step is not None:
                bag = state.task.bag
                submitted = bag.get(keys.STEP) if bag else None
                if submitted != step:
                    attrs[keys.STEP] = step
                    if submitted is not None:
                        attrs[keys.SESSION_SUBMIT_STEP] = submitted
            attrs[keys.SESSION_STATUS] = status
            if reason is not None:
                attrs[keys.SESSION_REASON] = reason
            if state.counters:
                for name, value in state.counters.items():
                    attrs[keys.SESSION_COUNTER_PREFIX + str(name)] = value
            if state.extra:
                attrs.update(state.extra)
            if extra:
                attrs.update(extra)
            enqueue(state.record(end_ns, attrs, code, description))
        finalized = self._finalized
        recent = self.recent
        with self._lock:
            for state in states:
                finalized[state.session_id] = None
                recent[state.session_id] = (state.task_id, state.task.span.trace_id, state.span_id, state.version,
                                            tuple(state.done))
                task = self.tasks.get(state.task_id)
                if task is None:
                    continue
                task.open_sessions.discard(state.session_id)
                task.counts[status] = task.counts.get(status, 0) + 1
                if not task.open_sessions and not task.finalize_requested:
                    # More sessions of this task may still come (registered one by
                    # one); end it once it has been idle for the grace period.
                    task.idle_since = end_ns
                    self._idle[task.task_id] = task
            self._finalized = _keep_latest(finalized, FINALIZED_KEPT)
            self.recent = _keep_latest(recent, RECENT_SESSIONS)
        if self._idle:
            self.end_idle_tasks(end_ns)

    @staticmethod
    def _interrupt_phases(state: SessionState, status: str, end_ns: int) -> None:
        """A phase still running when its session ends is interrupted: ended now
        (no leaked span) with ERROR status and a null end in the record."""
        description = f"interrupted: session {status}"
        for phase in state.open_phases:
            if type(phase) is tuple:
                state.end_marked(phase, end_ns, description)
            else:
                phase.set_attribute(keys.PHASE_INTERRUPTED, True)
                phase.set_status(StatusCode.ERROR, description)
                phase.end(end_ns)
        state.open_phases.clear()

    def close_all(self) -> None:
        """Ends everything still open: sessions as ``pending``, then their tasks."""
        self.end_idle_tasks()
        with self._lock:
            sessions = list(self.sessions.values())
            self.sessions.clear()
        if sessions:
            self._finalize_all(sessions, keys.STATUS_PENDING, None)
        self.end_idle_tasks()
        with self._lock:
            tasks = list(self.tasks.values())
            self.tasks.clear()
        for task in tasks:
            self._end_task(task)


def _record_config() -> dict[str, Any]:
    """What ``_tracking.c`` builds sessions and their records with: this module's classes,
    the keys of a session's attributes and the record's layout."""
    return {
        "SessionState": SessionState, "TaskState": TaskState, "LeanSpan": LeanSpan,
        "EMPTY_TRACE_STATE": records.EMPTY_TRACE_STATE, "SPAN_KIND": keys.SPAN_KIND,
        "KIND_SESSION": keys.KIND_SESSION, "SESSION_ID": keys.SESSION_ID, "TASK_ID": keys.TASK_ID,
        "POLICY_VERSION": keys.POLICY_VERSION, "SESSION_STATUS": keys.SESSION_STATUS,
        "SESSION_REASON": keys.SESSION_REASON, "layout": records.layout(), "STEP": keys.STEP,
        "STATUSES": (*keys.FINAL_STATUSES, keys.STATUS_PENDING),
        "ERROR_CODE": StatusCode.ERROR.value, "keep_latest": _keep_latest, "FINALIZED_KEPT": FINALIZED_KEPT,
        "RECENT_SESSIONS": RECENT_SESSIONS, "STATUS_FAILED": keys.STATUS_FAILED,
        # A task's end (Registry._end_task), in the order it sets the counts: the statuses it counts, the
        # keys it sets, what a plain task span holds, the globals the clocks are read from (the fake clock).
        "STATUS_ACCEPTED": keys.STATUS_ACCEPTED, "STATUS_PENDING": keys.STATUS_PENDING,
        "FINAL_STATUSES": keys.FINAL_STATUSES,
        "TASK_STATUSES": (keys.STATUS_ACCEPTED, keys.STATUS_REJECTED, keys.STATUS_FAILED, keys.STATUS_DROPPED),
        "TASK_KEYS": (keys.TASK_SESSIONS, keys.TASK_ACCEPTED, keys.TASK_REJECTED, keys.TASK_FAILED,
                      keys.TASK_DROPPED, keys.TASK_ACCEPTANCE_RATE),
        "BAGGAGE_KEY": _BAGGAGE_KEY, "KIND_INTERNAL": SpanKind.INTERNAL, "STATUS_UNSET": StatusCode.UNSET,
        "tracking_globals": globals(), "spans_globals": vars(spans_module),
        # A task's registration (Registry.register_task): the context variable the current context is read
        # from (None with another runtime context), and what the task's span and context are made of.
        "CONTEXT_VAR": getattr(spans_module, "_var", None), "Context": Context, "EMPTY_CONTEXT": _EMPTY_CONTEXT,
        "SPAN_KEY": _SPAN_KEY, "KIND_TASK": keys.KIND_TASK,
    }


try:
    from . import _tracking
except ImportError:  # built without a C compiler: every session takes the Python steps
    _tracking = None
    _session_record = _finalize_sessions = None
else:
    _tracking.configure(_record_config())
    _session_record = _tracking.session_record
    _finalize_sessions = _tracking.finalize_task_sessions
