"""Scopes, decorators, instants and steps (AReaL ``perf_tracer`` names).

Every function here is cheap when tracing is off: it reads one flag and
returns a shared no-op object before touching OpenTelemetry.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

from opentelemetry import context as context_api
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.trace.status import StatusCode

from ._internal import guard, keys
from ._internal.category import Category, normalize_category
from ._internal.spans import NULL_SCOPE, LeanSpan, attach, detach, get_current
from ._internal.state import STATE
from ._internal.torch_profiler import PROFILER as _TORCH, CudaSyncedScope
from ._internal.tracking import with_ids

F = TypeVar("F", bound=Callable[..., Any])

_get_current = get_current
_INTERNAL = SpanKind.INTERNAL
#: ``OTEL_RL_CUDA_SYNC`` in effect (set at configure, only when CUDA is available).
_cuda_sync = False


def set_cuda_sync(on: bool) -> None:
    """Turns CUDA-synchronised timing of scopes, functions and steps on or off."""
    global _cuda_sync
    _cuda_sync = bool(on)


def _synced(name: str, category: Any, args: Any) -> CudaSyncedScope:
    # The span is made after the GPU caught up, so its start timestamp is too.
    return CudaSyncedScope(lambda: LeanSpan(STATE.pipeline, name, _get_current(), _INTERNAL, None,
                                            args, category))


def trace_scope(name: str, category: Category | str | None = None, args: dict[str, Any] | None = None):
    """Times a block as a span in the current context.

    Use as ``with trace_scope("train.rollout", args={"step": 3}):``. The object
    is also an async context manager, so ``async with`` works too.

    Args:
        name: Span name.
        category: A :class:`Category` (or its name); shown as ``cat`` in Perfetto.
        args: Metadata shown in Perfetto and exported as ``rl.args.<key>`` attributes.

    Returns:
        A context manager; the span itself when tracing is on.
    """
    if not STATE.scopes_on:
        return NULL_SCOPE
    if _cuda_sync:
        return _synced(name, category, args)
    return LeanSpan(STATE.pipeline, name, _get_current(), _INTERNAL, None, args, category)


atrace_scope = trace_scope
"""``async with atrace_scope(name, category, args):`` - the async spelling of :func:`trace_scope`."""


def trace_perf(name: str, category: Category | str | None = None, args: dict[str, Any] | None = None):
    """Decorator timing every call of a function as a span.

    Works on plain functions, ``async def`` functions, generators and async
    generators (the span covers the whole iteration, and the function's body
    runs with the span current).

    Args:
        name: Span name.
        category: A :class:`Category` (or its name).
        args: Metadata attached to every call's span.
    """

    # Once per decoration, not per call.
    category = normalize_category(category)

    def decorate(fn: F) -> F:
        if inspect.isasyncgenfunction(fn):
            @functools.wraps(fn)
            async def agen_wrapper(*a: Any, **kw: Any) -> Any:
                if not STATE.scopes_on:
                    async for item in fn(*a, **kw):
                        yield item
                    return
                span = LeanSpan(STATE.pipeline, name, _get_current(), _INTERNAL, None, args, category)
                agen = fn(*a, **kw)
                sent: Any = None
                try:
                    while True:
                        with _Resumed(span):
                            item = await agen.asend(sent)
                        sent = yield item
                except StopAsyncIteration:
                    pass
                except BaseException as exc:
                    _record(span, exc)
                    raise
                finally:
                    span.end()

            return agen_wrapper  # type: ignore[return-value]

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen_wrapper(*a: Any, **kw: Any) -> Any:
                if not STATE.scopes_on:
                    return (yield from fn(*a, **kw))
                span = LeanSpan(STATE.pipeline, name, _get_current(), _INTERNAL, None, args, category)
                gen = fn(*a, **kw)
                sent: Any = None
                try:
                    while True:
                        with _Resumed(span):
                            item = gen.send(sent)
                        sent = yield item
                except StopIteration as stop:
                    return stop.value
                except BaseException as exc:
                    _record(span, exc)
                    raise
                finally:
                    gen.close()
                    span.end()

            return gen_wrapper  # type: ignore[return-value]

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*a: Any, **kw: Any) -> Any:
                if not STATE.scopes_on:
                    return await fn(*a, **kw)
                with (_synced(name, category, args) if _cuda_sync else
                      LeanSpan(STATE.pipeline, name, _get_current(), _INTERNAL, None, args, category)):
                    return await fn(*a, **kw)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            if not STATE.scopes_on:
                return fn(*a, **kw)
            with (_synced(name, category, args) if _cuda_sync else
                  LeanSpan(STATE.pipeline, name, _get_current(), _INTERNAL, None, args, category)):
                return fn(*a, **kw)

        return wrapper  # type: ignore[return-value]

    return decorate


class _Resumed:
    """Makes ``span`` current only while a generator body runs, so a suspended
    generator never leaks its span into the consumer's context."""

    __slots__ = ("span", "token")

    def __init__(self, span: LeanSpan) -> None:
        self.span = span

    def __enter__(self) -> None:
        values = dict(_get_current())
        values[_SPAN_KEY] = self.span
        self.token = attach(context_api.Context(values))

    def __exit__(self, *exc: Any) -> None:
        detach(self.token)


def _record(span: LeanSpan, exc: BaseException) -> None:
    if isinstance(exc, GeneratorExit):
        return
    span.record_exception(exc, escaped=True)
    span.set_status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}")


@guard.guarded()
def instant(name: str, category: Category | str | None = None, args: dict[str, Any] | None = None) -> None:
    """Marks a point in time: a span event on the current span, or a zero-length
    span when no span is current (``ph: "i"`` in Perfetto).

    Args:
        name: Event name.
        category: A :class:`Category` (or its name).
        args: Event attributes.
    """
    if not STATE.scopes_on:
        return
    ctx = _get_current()
    current = ctx.get(_SPAN_KEY)
    attrs: dict[str, Any] = {}
    if category is not None:
        attrs[keys.CATEGORY] = normalize_category(category)
    if args:
        attrs.update(args)
    if current is not None and current.is_recording():
        current.add_event(name, attrs or None)
        return
    span = LeanSpan(STATE.pipeline, name, ctx, _INTERNAL, None, args, category)
    span.end(span.start_ns)


class step_scope:  # noqa: N801 - used like a function, as in AReaL
    """``with step_scope(step):`` times one training step as a root span.

    The step number rides in baggage (``rl.step``) on everything recorded
    inside; tasks registered inside link to the step span. When
    ``profile_steps`` is configured, scopes are recorded only in those steps;
    steps in ``torch_profile_steps`` run under the torch profiler.
    """

    __slots__ = ("step", "_span", "_token", "_prev", "_torch", "_cuda")

    def __init__(self, step: int) -> None:
        self.step = step
        self._span: LeanSpan | None = None
        self._token: Any = None
        self._torch = False
        self._cuda: Any = None

    def __enter__(self) -> LeanSpan | None:
        self._prev = STATE.scopes_on
        if not STATE.enabled:
            return None
        _apply_profile_steps(self.step)
        torch_steps = STATE.settings.torch_profile_steps
        if torch_steps is not None and self.step in torch_steps:
            self._torch = _TORCH.start_step(self.step)
        if _cuda_sync:
            self._cuda = _cuda_mark()
        ctx = with_ids(_get_current(), **{keys.STEP: self.step})
        values = dict(ctx)
        values.pop(_SPAN_KEY, None)  # each step is the root of its own trace
        span = self._span = LeanSpan(STATE.pipeline, "step", context_api.Context(values),
                                     attributes={keys.SPAN_KIND: keys.KIND_STEP, keys.STEP: self.step})
        span.__enter__()
        return span

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._span is not None:
            if self._cuda is not None:
                _cuda_elapsed(self._span, self._cuda)
                self._cuda = None
            self._span.__exit__(exc_type, exc, tb)
            self._span = None
        if self._torch:
            self._torch = False
            _TORCH.stop_step()
        STATE.scopes_on = self._prev

    async def __aenter__(self) -> LeanSpan | None:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)


@guard.guarded()
def set_step(step: int) -> None:
    """Sets the current step (``rl.step`` baggage) without a step span."""
    if not STATE.enabled:
        return
    _apply_profile_steps(step)
    context_api.attach(with_ids(_get_current(), **{keys.STEP: step}))


def _apply_profile_steps(step: int) -> None:
    steps = STATE.settings.profile_steps if STATE.settings else None
    STATE.scopes_on = STATE.enabled and (steps is None or step in steps)


@guard.guarded()
def _cuda_mark() -> Any:
    from ._internal.torch_profiler import cuda_mark

    return cuda_mark()


@guard.guarded()
def _cuda_elapsed(span: LeanSpan, start: Any) -> None:
    from ._internal.torch_profiler import cuda_elapsed_ms

    span.set_attribute(keys.CUDA_ELAPSED_MS, cuda_elapsed_ms(start))
