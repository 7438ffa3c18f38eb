"""The span record: the plain-tuple form of a finished span, owned by this module.

A record holds only built-in types, so a batch of them is one ``marshal`` call
away from bytes, and the garbage collector stops tracking one after a single
look, however long it waits in the queue. A span builds its record when it
ends (:func:`from_span`, which *is* ``LeanSpan.record``); the export thread
ships batches of them to the exporter process, and there or in the training
process :class:`~otel_rl._internal.encode.readable.ReadableBuilder` turns each
into the SDK ``ReadableSpan`` the exporters take.

A record is a tuple of :data:`FIELDS` values, read by the index constants
below. Only this module builds or changes one: :func:`from_span`,
:func:`make`, :func:`phase` build; :func:`replace`, :func:`with_bundle`,
:func:`map_payloads`, :func:`make_marshalable` return changed copies (records
are never modified in place: one may be shared between a batch and its retry).

Fields (index constant, type, meaning, who sets it):

========================  ===================  =================================================
``NAME``                  ``str``              span name (``update_name`` may change it before
                                               the end); ``"session"`` for a session
``TRACE_ID``              ``int``              128-bit trace id, never 0
``SPAN_ID``               ``int``              64-bit span id, never 0
``PARENT_ID``             ``int``              the parent's span id; 0 for a root span
``PARENT_REMOTE``         ``bool``             the parent came from another process (a
                                               propagated context)
``FLAGS``                 ``int``              W3C trace flags: 1 sampled, 0 not
``TRACE_STATE``           ``str | None``       W3C ``tracestate`` header; ``None`` when empty
``START``                 ``int``              start, ns since the epoch (``time.time_ns``)
``END``                   ``int``              end, ns since the epoch
``KIND``                  ``int``              ``SpanKind`` value (0 internal ... 4 consumer)
``IDS``                   ``dict | None``      the baggage of the span's context: otel_rl's ids
                                               (``keys.BAGGAGE_KEYS``: step, task, session...)
                                               become attributes when the span is built;
                                               values may be text after crossing a process
``THREAD``                ``int | None``       ident of the thread the span ran on (its name is
                                               shipped beside the batch); ``None`` for spans of
                                               other instrumentation
``CATEGORY``              ``str | None``       a scope's category (``rl.category``)
``ATTRIBUTES``            ``dict | None``      attributes as set on the span, nested values
                                               allowed (flattened when built)
``ARGS``                  ``dict | None``      the caller's payload (``args=``, phase payloads),
                                               a snapshot taken at the start; exported as
                                               ``rl.args.*``; what the redaction hook sees
``EVENTS``                ``list | None``      ``(name, attributes or None, time ns)`` tuples
``LINKS``                 ``list | None``      ``(trace id, span id, is remote, flags,
                                               attributes or None)`` tuples (:func:`link_records`)
``STATUS``                ``int``              ``StatusCode`` value: 0 unset, 1 ok, 2 error
``STATUS_DESC``           ``str | None``       the error's description (``None`` unless error)
``SCOPE``                 ``tuple | None``     ``(name, version)`` of the instrumentation scope of
                                               another library's span; ``None``: otel_rl's own
``BUNDLE``                ``tuple | None``     sessions only, else ``None``: ``(session id,
                                               (phase, ...))``, the phases opened with
                                               ``mark_<phase>_start`` that ended before the
                                               session, each ``(name, start ns, end ns, thread,
                                               args, interrupted description or None, policy
                                               version or None)``
                                               (:func:`bundled_phase`); :func:`expand` makes
                                               them records of their own, children of the session
========================  ===================  =================================================

Who builds them: :func:`from_span` (every ``LeanSpan``, on the caller's thread),
:func:`make` (a session finalized without a span object, in
:mod:`.tracking`; another library's SDK span, in
:mod:`~otel_rl._internal.encode.readable`), :func:`phase` (a bundled phase,
on the export side).
"""

from __future__ import annotations

from random import getrandbits
from typing import Any

from opentelemetry.baggage import _BAGGAGE_KEY
from opentelemetry.trace import TraceState
from opentelemetry.trace.status import StatusCode

from .. import keys
from ..payload import json_safe
from .ids import new_span_id

(NAME, TRACE_ID, SPAN_ID, PARENT_ID, PARENT_REMOTE, FLAGS, TRACE_STATE, START, END, KIND, IDS,
 THREAD, CATEGORY, ATTRIBUTES, ARGS, EVENTS, LINKS, STATUS, STATUS_DESC, SCOPE, BUNDLE) = range(21)
#: How many fields a record has.
FIELDS = 21
#: Field names (lower case) by position: the keywords of :func:`replace`.
FIELD_NAMES = ("name", "trace_id", "span_id", "parent_id", "parent_remote", "flags", "trace_state",
               "start", "end", "kind", "ids", "thread", "category", "attributes", "args", "events",
               "links", "status", "status_desc", "scope", "bundle")
_INDEX = {name: index for index, name in enumerate(FIELD_NAMES)}

#: The empty trace state every span that starts a trace shares; a record
#: stores it as ``None`` (an identity check on the hot path).
EMPTY_TRACE_STATE = TraceState()
_ERROR = StatusCode.ERROR.value
_INTERNAL = 0  # SpanKind.INTERNAL.value


# --- building -----------------------------------------------------------------------------------
def from_span(span: Any) -> tuple:
    """The record of an ended ``LeanSpan``.

    ``LeanSpan.record`` is this function (bound as a method, so the hot path
    pays no extra call); it reads the span's slots of the same names.
    """
    state = span.trace_state
    links = span.links
    return (
        span.name, span.trace_id, span.span_id, span.parent_id, span.parent_remote, span.flags,
        None if state is EMPTY_TRACE_STATE else (state.to_header() or None), span.start_ns,
        span.end_ns, span.kind._value_, span.ctx.get(_BAGGAGE_KEY), span.thread, span.category,
        span.attributes, span.args, span.events, links and link_records(links),
        span.status_code._value_, span.status_desc, None, None,
    )


def make(name: str, trace_id: int, span_id: int, parent_id: int, parent_remote: bool, flags: int,
         trace_state: str | None, start: int, end: int, kind: int, ids: dict | None, thread: int | None,
         category: str | None, attributes: dict | None, args: dict | None, events: list | None,
         links: list | None, status: int, status_desc: str | None, scope: tuple | None,
         bundle: tuple | None) -> tuple:
    """A record from its fields, in field order (see the module docstring for each)."""
    return (name, trace_id, span_id, parent_id, parent_remote, flags, trace_state, start, end, kind,
            ids, thread, category, attributes, args, events, links, status, status_desc, scope, bundle)


def trace_state_header(state: TraceState | None) -> str | None:
    """What :data:`TRACE_STATE` holds for ``state``: its header, ``None`` when empty."""
    # The shared empty state first: a TraceState's truth is a Python __len__ call.
    return None if state is EMPTY_TRACE_STATE or not state else (state.to_header() or None)


def link_records(links: Any) -> list[tuple]:
    """OpenTelemetry links in record form (:data:`LINKS`)."""
    return [(link.context.trace_id, link.context.span_id, link.context.is_remote,
             int(link.context.trace_flags), dict(link.attributes) if link.attributes else None)
            for link in links]


def bundled_phase(name: str, start: int, end: int, thread: int, args: Any,
                  interrupted: str | None, version: Any = None) -> tuple:
    """One ended ``mark_<phase>_start`` phase, as a session's :data:`BUNDLE` holds it
    (``version``: the policy version when it started, ``None`` when none is set)."""
    return (name, start, end, thread, args, interrupted, version)


def bundle(session_id: Any, phases: list[tuple] | tuple) -> tuple | None:
    """A session's :data:`BUNDLE`: its ended ``phases`` (:func:`bundled_phase`
    tuples); ``None`` when there are none."""
    # Tuples of plain values only (see the module docstring).
    return (session_id, tuple(phases)) if phases else None


def with_bundle(rec: tuple, session_id: Any, phases: list[tuple] | tuple) -> tuple:
    """A session's ``rec`` with ``phases`` bundled in (see :func:`bundle`)."""
    return rec[:BUNDLE] + (bundle(session_id, phases),)


def phase_attributes(phase: str) -> dict[str, Any]:
    """The attributes of a marked phase's record: one shared dict per phase
    name (records are read, never changed)."""
    attrs = _PHASE_ATTRIBUTES.get(phase)
    if attrs is None:
        attrs = {keys.SPAN_KIND: keys.KIND_PHASE, keys.PHASE: phase}
        if len(_PHASE_ATTRIBUTES) < 4096:
            _PHASE_ATTRIBUTES[phase] = attrs
    return attrs


_PHASE_ATTRIBUTES: dict[str, dict[str, Any]] = {}


def shared_phase_attributes() -> dict[str, dict[str, Any]]:
    """The shared dicts :func:`phase_attributes` hands out, by phase name (read, never changed,
    by the compiled twins that tell a bundled phase by its attributes)."""
    return _PHASE_ATTRIBUTES


def is_bundled_phase(rec: tuple) -> bool:
    """Whether ``rec`` is a phase :func:`expand` made from its session's bundle: its
    attributes are the shared dict of its name. Its span id is drawn on the export side, so
    no span has it as its parent (an interrupted or versioned phase, with a dict of its own,
    is not told apart: treating it as any span is always right, only slower)."""
    attrs = rec[ATTRIBUTES]
    return attrs is not None and attrs is _PHASE_ATTRIBUTES.get(rec[NAME])


def phase(session: tuple, ids: dict[str, Any], name: str, start: int, end: int, thread: int, args: Any,
          interrupted: str | None, version: Any = None) -> tuple:
    """The record of a phase bundled in ``session`` (a child of it, with the baggage ``ids``);
    an ``interrupted`` one (its description) has ERROR status."""
    if interrupted is None:
        attrs, code = phase_attributes(name), 0
    else:
        attrs, code = {**phase_attributes(name), keys.PHASE_INTERRUPTED: True}, _ERROR
    if version is not None:
        attrs = {**attrs, keys.POLICY_VERSION: version}
    return (name, session[TRACE_ID], getrandbits(64) or new_span_id(), session[SPAN_ID], False,
            session[FLAGS], session[TRACE_STATE], start, end, _INTERNAL, ids, thread, None, attrs, args,
            None, None, code, interrupted, None, None)


def span_count(records: list[tuple]) -> int:
    """How many spans ``records`` hold, bundled phases included."""
    return len(records) + sum(len(rec[BUNDLE][1]) for rec in records if rec[BUNDLE])


def expand(records: list[tuple]) -> list[tuple]:
    """``records`` with every bundled phase as a record of its own, ahead of its
    session (which keeps no bundle)."""
    out: list[tuple] = []
    for rec in records:
        bundle = rec[BUNDLE]
        if not bundle:
            out.append(rec)
            continue
        session_id, phases = bundle
        # A phase's baggage: the session's (its task's) plus the session id.
        ids = dict(rec[IDS]) if rec[IDS] else {}
        ids[keys.SESSION_ID] = session_id
        for name, start, end, thread, args, interrupted, version in phases:
            out.append(phase(rec, ids, name, start, end, thread, args, interrupted, version))
        out.append(rec[:BUNDLE] + (None,))
    return out


# --- changed copies ------------------------------------------------------------------------------
def replace(rec: tuple, **fields: Any) -> tuple:
    """``rec`` with the named fields (:data:`FIELD_NAMES`) replaced."""
    out = list(rec)
    for name, value in fields.items():
        out[_INDEX[name]] = value
    return tuple(out)


def has_payloads(rec: tuple) -> bool:
    """Whether ``rec`` holds anything :func:`map_payloads` would map."""
    return bool(rec[ARGS] or rec[EVENTS] or rec[BUNDLE])


def map_payloads(rec: tuple, args: Any, event_attributes: Any) -> tuple:
    """``rec`` with the caller's payloads mapped: ``args(value)`` for its
    non-empty :data:`ARGS` and each bundled phase's, ``event_attributes(value)``
    for each event's attributes (``None`` included)."""
    out = list(rec)
    if rec[ARGS]:
        out[ARGS] = args(rec[ARGS])
    if rec[EVENTS]:
        out[EVENTS] = [(name, event_attributes(attrs), ts) for name, attrs, ts in rec[EVENTS]]
    if rec[BUNDLE]:
        session_id, phases = rec[BUNDLE]
        out[BUNDLE] = (session_id, tuple((n, s, e, t, args(a) if a else a, i, v)
                                             for n, s, e, t, a, i, v in phases))
    return tuple(out)


def layout() -> dict[str, int]:
    """Each field's index under its constant's name (``"TRACE_ID": 1``) and the record's
    length (``"fields"``): how the compiled twins that read records find their fields."""
    return {"fields": FIELDS, **{name.upper(): index for index, name in enumerate(FIELD_NAMES)}}


def make_marshalable(rec: tuple) -> tuple:
    """``rec`` with user payloads reduced to JSON-safe values (tensors summarised)
    and a name that is a ``str``: what ``marshal`` can always hold."""
    out = list(rec)
    for index in (IDS, ATTRIBUTES, ARGS):
        if out[index]:
            out[index] = json_safe(out[index])
    if out[EVENTS]:
        out[EVENTS] = [(n, json_safe(a) if a else None, ts) for n, a, ts in out[EVENTS]]
    if out[LINKS]:
        out[LINKS] = [(t, s, r, f, json_safe(a) if a else None) for t, s, r, f, a in out[LINKS]]
    if out[BUNDLE]:
        session_id, phases = out[BUNDLE]
        out[BUNDLE] = (json_safe(session_id), tuple((n, s, e, t, json_safe(a) if a else None, i, json_safe(v))
                                                    for n, s, e, t, a, i, v in phases))
    out[NAME] = str(out[NAME])
    return tuple(out)
