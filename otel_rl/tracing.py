"""Scopes, decorators, instants and steps (AReaL ``perf_tracer`` names).

Every function here is cheap when tracing is off: it reads one flag and
returns a shared no-op object before touching OpenTelemetry.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any, Callable, TypeVar

from opentelemetry import context as context_api
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation import _SPAN_KEY

from ._internal import diagnostics, guard, keys
from ._internal.recording import counters, cuda_sync
from ._internal.recording.category import Category, normalize_category
from ._internal.payload import own_values
from ._internal.recording.resumed import ResumedSpan as _Resumed, record_failure as _record
from ._internal.recording.spans import NULL_SCOPE, LeanSpan, get_current
from ._internal.state import STATE
from ._internal.control.torch_profiler import PROFILER as _TORCH, CudaSyncedScope
from ._internal.recording.tracking import current_id, with_ids

F = TypeVar("F", bound=Callable[..., Any])

_get_current = get_current
_INTERNAL = SpanKind.INTERNAL
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: ``OTEL_RL_CUDA_SYNC`` in effect: a copy of the switch in ``recording.cuda_sync``
#: (set at configure, only when CUDA is available), read as a plain global by every scope.
_cuda_sync = False


def _follow_cuda_sync(on: bool) -> None:
    global _cuda_sync
    _cuda_sync = on


cuda_sync.follow(_follow_cuda_sync)
set_cuda_sync = cuda_sync.set_cuda_sync


def _synced(name: str, category: Any, args: Any) -> CudaSyncedScope:
    # The span is made after the GPU caught up, so its start timestamp is too.
    return CudaSyncedScope(lambda: LeanSpan(STATE.pipeline, name, _get_current(), _INTERNAL, None,
                                            args, category))


def trace_scope(name: str, category: Category | str | None = None, args: dict[str, Any] | None = None,
                enable_profiler: bool = False, profiler_args: dict[str, Any] | None = None):
    """Times a block as a span in the current context.

    Use as ``with trace_scope("train.rollout", args={"step": 3}):``. The object
    is also an async context manager, so ``async with`` works too.

    Args:
        name: Span name.
        category: A :class:`Category` (or its name, or any string of your own);
            shown as ``cat`` in Perfetto.
        args: Metadata shown in Perfetto under its own keys and exported as
            ``rl.args.<key>`` attributes. A ``global_step`` key is the step the
            scope belongs to (AReaL's convention), for ``enable_profiler``.
        enable_profiler: As in AReaL: when the scope's step (``args["global_step"]``,
            else an enclosing scope's, else the ``rl.step`` of :func:`step_scope` /
            :func:`set_step`) is in ``profile_steps``, the scope runs under a torch
            profiler window whose trace lands on the rank's timeline. Skipped
            while another window runs.
        profiler_args: ``torch.profiler.profile`` options for that window
            (``record_shapes``, ``profile_memory``, ``with_stack``, ``with_flops``).

    Returns:
        A context manager; the span itself when tracing is on.
    """
    if not STATE.scopes_on:
        return NULL_SCOPE
    if enable_profiler:
        return _profiled(name, category, args, profiler_args)
    if _cuda_sync:
        return _synced(name, category, args)
    return LeanSpan(STATE.pipeline, name, _get_current(), _INTERNAL, None, args, category)


atrace_scope = trace_scope
"""``async with atrace_scope(name, category, args):`` - the async spelling of :func:`trace_scope`."""


def trace_perf(name: str, category: Category | str | None = None, args: dict[str, Any] | None = None,
               enable_profiler: bool = False, profiler_args: dict[str, Any] | None = None):
    """Decorator timing every call of a function as a span.

    Works on plain functions, ``async def`` functions, generators and async
    generators (the span covers the whole iteration, and the function's body
    runs with the span current).

    Args:
        name: Span name.
        category: A :class:`Category` (or its name).
        args: Metadata attached to every call's span.
        enable_profiler: Each call is a :func:`trace_scope` with ``enable_profiler``.
        profiler_args: ``torch.profiler.profile`` options (see :func:`trace_scope`).
    """

    # Once per decoration, not per call.
    category = normalize_category(category)
    if enable_profiler:
        return _profiled_decorator(name, category, args, profiler_args)

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
    if current is not None and current.is_recording():
        attrs: dict[str, Any] = {}
        if category is not None:
            attrs[keys.CATEGORY] = normalize_category(category)
        if args:
            attrs.update(args)
            own_values(attrs)  # kept on the span until it ends: its values as they are now
        current.add_event(name, attrs or None)
        return
    # No span current: a zero-length span of its own (which snapshots args itself).
    span = LeanSpan(STATE.pipeline, name, ctx, _INTERNAL, {keys.SPAN_KIND: keys.KIND_INSTANT}, args,
                    category)
    span.end(span.start_ns)


class step_scope:  # noqa: N801 - used like a function, as in AReaL
    """``with step_scope(step):`` times one training step as a root span.

    The step number rides in baggage (``rl.step``) on everything recorded
    inside; tasks registered inside link to the step span. Steps in
    ``torch_profile_steps`` run under the torch profiler.
    """

    __slots__ = ("step", "_span", "_token", "_torch", "_cuda")

    def __init__(self, step: int) -> None:
        self.step = step
        self._span: LeanSpan | None = None
        self._token: Any = None
        self._torch = False
        self._cuda: Any = None

    def __enter__(self) -> LeanSpan | None:
        if not STATE.enabled:
            return None
        torch_steps = STATE.settings.torch_profile_steps
        if torch_steps is not None and self.step in torch_steps:
            self._torch = _TORCH.start_step(self.step)
        if _cuda_sync:
            self._cuda = _cuda_mark()
        ctx = with_ids(_get_current(), **{keys.STEP: self.step})
        values = dict(ctx)
        values.pop(_SPAN_KEY, None)  # each step is the root of its own trace
        attributes = {keys.SPAN_KIND: keys.KIND_STEP, keys.STEP: self.step}
        if STATE.policy_version is not None:
            attributes[keys.POLICY_VERSION] = STATE.policy_version
        span = self._span = LeanSpan(STATE.pipeline, "step", context_api.Context(values), attributes=attributes)
        span.__enter__()
        return span

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._span is not None:
            if self._cuda is not None:
                _cuda_elapsed(self._span, self._cuda)
                self._cuda = None
            self._span.__exit__(exc_type, exc, tb)
            self._span = None
            try:
                counters.sample_gpu_memory()
            except Exception as err:  # noqa: BLE001 - a counter never fails a step
                guard.report(diagnostics.INTERNAL_ERROR, "GPU memory could not be sampled: %r", err)
        if self._torch:
            self._torch = False
            _TORCH.stop_step()

    async def __aenter__(self) -> LeanSpan | None:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)


@guard.guarded()
def set_step(step: int) -> None:
    """Sets the current step (``rl.step`` baggage) without a step span."""
    if not STATE.enabled:
        return
    context_api.attach(with_ids(_get_current(), **{keys.STEP: step}))


@guard.guarded()
def _cuda_mark() -> Any:
    from ._internal.control.torch_profiler import cuda_mark

    return cuda_mark()


@guard.guarded()
def _cuda_elapsed(span: LeanSpan, start: Any) -> None:
    from ._internal.control.torch_profiler import cuda_elapsed_ms

    span.set_attribute(keys.CUDA_ELAPSED_MS, cuda_elapsed_ms(start))


# --- AReaL's enable_profiler: a torch profiler window around one scope -------------------

#: ``torch.profiler.profile`` options a scope's ``profiler_args`` may set.
_PROFILER_ARGS = frozenset({"record_shapes", "profile_memory", "with_stack", "with_flops"})


def _scope_step(args: Any) -> Any:
    """The step a scope belongs to, found as AReaL finds it: its own
    ``args["global_step"]``, else the nearest enclosing scope's, else ``rl.step``."""
    if isinstance(args, dict) and args.get("global_step") is not None:
        return args["global_step"]
    span = _get_current().get(_SPAN_KEY)
    for _ in range(64):  # bounded: a context chain is never that deep in practice
        if type(span) is not LeanSpan:
            break
        found = span.args.get("global_step") if isinstance(span.args, dict) else None
        if found is not None:
            return found
        span = span.ctx.get(_SPAN_KEY)
    return current_id(keys.STEP)


class _ProfiledScope:
    """A scope with a torch profiler window inside it (stopped before the span ends)."""

    __slots__ = ("span", "run_id", "options", "window")

    def __init__(self, span: Any, run_id: str, options: dict[str, Any] | None) -> None:
        self.span = span
        self.run_id = run_id
        self.options = options
        self.window = False

    def __enter__(self) -> Any:
        entered = self.span.__enter__()
        self.window = _start_scope_window(self.run_id, self.options)
        return entered

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        if self.window:
            self.window = False
            _stop_scope_window()
        return self.span.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        return self.__exit__(exc_type, exc, tb)


def _profiled(name: str, category: Any, args: Any, profiler_args: Any) -> Any:
    span = _synced(name, category, args) if _cuda_sync else LeanSpan(
        STATE.pipeline, name, _get_current(), _INTERNAL, None, args, category)
    try:
        steps = STATE.settings.profile_steps if STATE.settings is not None else None
        if not steps:
            return span
        step = _scope_step(args)
        if step is None or step not in steps:
            return span
        options = None
        if profiler_args:
            options = {k: bool(v) for k, v in profiler_args.items() if k in _PROFILER_ARGS}
            guard.ignored_arguments("trace_scope(profiler_args)",
                                    {k: v for k, v in profiler_args.items() if k not in _PROFILER_ARGS})
        return _ProfiledScope(span, f"step{step}-{_SAFE.sub('_', name)[:64]}", options)
    except Exception as exc:  # noqa: BLE001 - profiling never stops the scope
        guard.report(diagnostics.INTERNAL_ERROR, "internal error preparing a profiled scope: %r", exc)
        return span


@guard.guarded(False)
def _start_scope_window(run_id: str, options: Any) -> bool:
    return _TORCH.start_scope(run_id, options)


@guard.guarded()
def _stop_scope_window() -> None:
    _TORCH.stop_step()


def _profiled_decorator(name: str, category: Any, args: Any, profiler_args: Any) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            # A window cannot stay open across a generator's suspensions: timed, not profiled.
            return trace_perf(name, category, args)(fn)
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*a: Any, **kw: Any) -> Any:
                async with trace_scope(name, category, args, True, profiler_args):
                    return await fn(*a, **kw)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            with trace_scope(name, category, args, True, profiler_args):
                return fn(*a, **kw)

        return wrapper  # type: ignore[return-value]

    return decorate
