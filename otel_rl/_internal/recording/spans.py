"""The hot path: a lean span that satisfies the OpenTelemetry API.

What a span costs on the caller's thread is what training pays, so a
:class:`LeanSpan` only takes two timestamps, draws ids, and attaches itself to
the OpenTelemetry context (so ``trace.get_current_span()`` returns it and any
third-party instrumentation nests under it). When it ends it appends its
record (:mod:`.record`, a tuple of built-in values) to its sink's queue, so
the background never touches the span object again. Everything else - the
SDK ``ReadableSpan``, baggage to attributes, payload sanitising, session
derivation, encoding - happens on the export thread of the sink (the
export pipeline, :class:`SpanSink` here) or in the exporter process.
"""

from __future__ import annotations

import collections
import threading
import time
from random import getrandbits
from types import TracebackType
from typing import Any, Protocol

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util import types

from . import record as records
from .category import normalize_category
from .ids import new_span_id
from ..payload import safe_str, snapshot

_time_ns = time.time_ns
_get_ident = threading.get_ident
_Context = context_api.Context
_dict_set = dict.__setitem__  # a Context refuses item assignment; a fresh copy may take one
_EMPTY_STATE = records.EMPTY_TRACE_STATE
_UNSET = StatusCode.UNSET


class SpanSink(Protocol):
    """Where ended spans go and who decides their sampling: the export pipeline
    (:class:`~otel_rl._internal.export.pipeline.Pipeline`), seen from below.

    :meth:`LeanSpan.__exit__` appends to ``queue`` itself while it holds fewer
    than ``max_queue_size`` records (one call less per scope), sets ``wake``
    when it reaches ``wake_at``, and otherwise calls :meth:`enqueue`.
    """

    queue: collections.deque[Any]
    max_queue_size: int
    wake_at: int
    wake: threading.Event

    def enqueue(self, span: Any) -> None:
        """Queues an ended span's record (or another library's ``ReadableSpan``)."""

    def sample_root(self, ctx: Any, trace_id: int, name: str, kind: SpanKind, attributes: Any) -> int:
        """The trace flags of a new trace's root span."""

    def sample_child(self, parent: SpanContext) -> int:
        """The trace flags of a span whose parent is a remote or foreign span."""

# The API's get_current / attach / detach are two Python calls deep around one
# ContextVar; with the default runtime context the hot path uses the ContextVar
# directly (same object, same semantics). Another runtime context selected with
# OTEL_PYTHON_CONTEXT keeps the API functions.
_runtime = getattr(context_api, "_RUNTIME_CONTEXT", None)
if type(_runtime) is ContextVarsRuntimeContext:
    _var = _runtime._current_context  # noqa: SLF001
    get_current = _var.get
    attach = _var.set
    detach = _var.reset
else:  # pragma: no cover - only with a custom OTEL_PYTHON_CONTEXT
    get_current = context_api.get_current
    attach = context_api.attach
    detach = context_api.detach


class LeanSpan(trace_api.Span):
    """A recording span whose heavy work is deferred to the export thread.

    Also its own context manager: entering makes it current, leaving ends it,
    and an exception raised inside is recorded (event + ERROR status) and
    propagated unchanged.
    """

    __slots__ = (
        "name", "trace_id", "span_id", "parent_id", "parent_remote", "flags", "trace_state",
        "start_ns", "end_ns", "ctx", "thread", "kind", "attributes", "args", "category",
        "events", "links", "status_code", "status_desc", "_pipeline", "_token", "_sc",
    )

    def __init__(
        self,
        pipeline: SpanSink,
        name: str,
        ctx: Any,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict[str, Any] | None = None,
        args: Any = None,
        category: Any = None,
        links: Any = None,
        start_ns: int | None = None,
        parent: Any = None,
    ) -> None:
        self._pipeline = pipeline
        self.name = name
        self.ctx = ctx
        self.kind = kind
        self.attributes = attributes
        # Exported later, on another thread: what the caller's dict holds now,
        # not what it holds then (a reused dict, a tensor freed meanwhile).
        self.args = args if args is None else snapshot(args)
        # Records hold built-in types only (a Category member is a str subclass).
        self.category = category if category is None else normalize_category(category)
        self.events = None
        self.links = links
        self.status_code = _UNSET
        self.status_desc = None
        self.end_ns = 0
        self._token = None
        self._sc = None
        self.thread = _get_ident()
        # Zero is not a valid id; the fallback runs once in 2**64 spans.
        self.span_id = getrandbits(64) or new_span_id()
        if parent is None:
            parent = ctx.get(_SPAN_KEY)
        if type(parent) is LeanSpan:
            self.trace_id = parent.trace_id
            self.parent_id = parent.span_id
            self.parent_remote = False
            self.flags = parent.flags
            self.trace_state = parent.trace_state
        else:
            sc = parent.get_span_context() if parent is not None else None
            if sc is not None and sc.is_valid:
                self.trace_id = sc.trace_id
                self.parent_id = sc.span_id
                self.parent_remote = sc.is_remote
                self.flags = pipeline.sample_child(sc)
                self.trace_state = sc.trace_state
            else:
                self.trace_id = self.span_id  # ids.new_span_id: a root's trace id
                self.parent_id = 0
                self.parent_remote = False
                self.flags = pipeline.sample_root(ctx, self.trace_id, name, kind, attributes)
                self.trace_state = _EMPTY_STATE
        self.start_ns = start_ns or _time_ns()

    # --- opentelemetry.trace.Span -------------------------------------------------
    def get_span_context(self) -> SpanContext:
        sc = self._sc
        if sc is None:
            sc = self._sc = SpanContext(
                self.trace_id, self.span_id, False, TraceFlags(self.flags), self.trace_state
            )
        return sc

    def is_recording(self) -> bool:
        return not self.end_ns

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self.end_ns:
            return
        if self.attributes is None:
            self.attributes = {}
        self.attributes[key] = value

    def set_attributes(self, attributes: types.Attributes) -> None:
        if self.end_ns or not attributes:
            return
        if self.attributes is None:
            self.attributes = {}
        self.attributes.update(attributes)

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        if self.end_ns:
            return
        if self.events is None:
            self.events = []
        self.events.append((name, attributes, timestamp or _time_ns()))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self.end_ns or context is None or not context.is_valid:
            return
        if self.links is None:
            self.links = []
        self.links.append(trace_api.Link(context, attributes))

    def update_name(self, name: str) -> None:
        if not self.end_ns:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self.end_ns:
            return
        if isinstance(status, Status):
            code, description = status.status_code, status.description
        else:
            code = status
        # OK is final; UNSET never overrides (OpenTelemetry status rules).
        if self.status_code is StatusCode.OK or code is StatusCode.UNSET:
            return
        self.status_code = code
        self.status_desc = description if code is StatusCode.ERROR else None

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        attrs = {
            "exception.type": type(exception).__qualname__,
            "exception.message": safe_str(exception),
            "exception.escaped": escaped,
        }
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self.end_ns:
            return
        self.end_ns = end_time or _time_ns()
        self._pipeline.enqueue(self.record())

    #: The span's record (:func:`.record.from_span`, bound here as a method: no
    #: extra call on the hot path); built once, at its end.
    record = records.from_span

    # --- context manager ------------------------------------------------------------
    def __enter__(self) -> LeanSpan:
        ctx = _Context(self.ctx)
        _dict_set(ctx, _SPAN_KEY, self)
        self._token = attach(ctx)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token = self._token
        if token is not None:
            self._token = None
            try:
                detach(token)
            except Exception:  # noqa: BLE001 - a token from another context; never raise
                pass
        if exc is not None and not self.end_ns:
            record_error(self, exc)
        if not self.end_ns:
            self.end_ns = _time_ns()
            # Pipeline.enqueue, inlined: this runs once for every scope.
            pipeline = self._pipeline
            queue = pipeline.queue
            if len(queue) < pipeline.max_queue_size:
                queue.append(self.record())
                if len(queue) == pipeline.wake_at:
                    pipeline.wake.set()
            else:
                # A full queue (counted there), or a pipeline shut down since the
                # span started (its bound is 0 then; the span goes to the current one).
                pipeline.enqueue(self.record())

    async def __aenter__(self) -> LeanSpan:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"LeanSpan({self.name!r}, trace_id={self.trace_id:032x}, span_id={self.span_id:016x})"


def record_error(span: LeanSpan, exc: BaseException) -> None:
    """Records ``exc`` escaping ``span`` (an event and ERROR status); never raises,
    so the caller's own exception is what propagates, whatever its ``__str__`` does."""
    try:
        message = safe_str(exc)
        span.add_event("exception", {"exception.type": type(exc).__qualname__,
                                     "exception.message": message, "exception.escaped": True})
        span.set_status(StatusCode.ERROR, f"{type(exc).__name__}: {message}")
    except Exception:  # noqa: BLE001 - recording must never replace the user's exception
        pass


class NullScope:
    """What a disabled scope returns: a no-op sync and async context manager."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: Any) -> None:
        return None


NULL_SCOPE = NullScope()


class LeanTracer(trace_api.Tracer):
    """An OpenTelemetry ``Tracer`` producing :class:`LeanSpan` objects."""

    def __init__(self, pipeline: SpanSink) -> None:
        self._pipeline = pipeline

    def start_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> LeanSpan:
        ctx = get_current() if context is None else context
        attrs = dict(attributes) if attributes else None
        links = [link for link in links if link.context.is_valid] if links else None
        return LeanSpan(self._pipeline, name, ctx, kind, attrs, links=links, start_ns=start_time)

    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> LeanSpan:
        # A LeanSpan is its own context manager, which is cheaper than the API's
        # generator-based one; ``with tracer.start_as_current_span(...) as span``
        # behaves the same.
        return self.start_span(name, context, kind, attributes, links, start_time)
