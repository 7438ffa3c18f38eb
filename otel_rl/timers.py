"""Unity ML-Agents' hierarchical timers (``mlagents_envs.timers``), always on, and as otel_rl spans.

Code written against ``mlagents_envs.timers`` ports by changing the import::

    from otel_rl.timers import get_timer_tree, hierarchical_timer, set_gauge, timed

    @timed
    def advance(self, env): ...

    with hierarchical_timer("communicator.exchange"):
        outputs = self.communicator.exchange(step_input)

    json.dump(get_timer_tree(), f, indent=4)      # timers.json, as ML-Agents writes it

Every timed block is counted in an in-memory timer tree, one per thread as in
ML-Agents (one node per distinct name path, not per call), with or without
:func:`otel_rl.configure`: :func:`get_timer_tree` returns ML-Agents'
``timers.json`` document (``total``, ``count``, ``self``, ``children``,
``is_parallel``, ``gauges``, ``metadata``). When tracing is configured, every
block is also an otel_rl span and every gauge value a span event, so Perfetto,
Jaeger, Tempo and ``otel-rl report`` (:func:`otel_rl.report.timer_tree`,
rebuilt from the spans of every rank) see them too.

Nesting follows the current thread and, unlike ML-Agents, asyncio tasks: a
block's parent is the innermost block open in the same task (``async with``
works), so concurrent tasks never corrupt each other's nesting. Instances of
one node that overlap in time are marked ``is_parallel``.

All of ML-Agents' names are here: :class:`TimerNode`, :class:`GaugeNode`,
:class:`TimerStack`, :func:`hierarchical_timer`, :func:`timed`,
:func:`set_gauge`, :func:`merge_gauges`, :func:`add_metadata`,
:func:`get_timer_tree`, :func:`get_timer_root`, :func:`reset_timers`,
:func:`get_timer_stack_for_thread` and :data:`TIMER_FORMAT_VERSION`. Unknown
keyword arguments are accepted, ignored and counted
(:func:`otel_rl.diagnostics`), and no function here raises into the caller
because of a timer problem.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
import time
from typing import Any, Callable, Dict, Optional, TypeVar

from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation import _SPAN_KEY

from ._internal import diagnostics, guard, keys
from ._internal.recording.spans import LeanSpan, get_current
from ._internal.runtime import RUNTIME
from ._internal.state import STATE
from ._internal.recording.resumed import ResumedSpan, record_failure
from ._internal.recording.timer_frames import FRAME, close_node, merge_gauges_into, open_node, restore_frame
from ._internal.recording.timer_stack import TIMER_FORMAT_VERSION, GaugeNode, TimerNode, TimerStack
from .tracing import trace_scope

__all__ = [
    "TIMER_FORMAT_VERSION", "GaugeNode", "TimerNode", "TimerStack", "add_metadata", "get_timer_root",
    "get_timer_stack_for_thread", "get_timer_tree", "hierarchical_timer", "merge_gauges",
    "reset_timers", "set_gauge", "timed",
]

#: ``timed`` keeps the decorated function's signature (ML-Agents' name for the type variable).
FuncT = TypeVar("FuncT", bound=Callable[..., Any])

_perf_counter = time.perf_counter
_get_ident = threading.get_ident
_INTERNAL = SpanKind.INTERNAL


# --- one timer stack per thread ------------------------------------------------------------------
#: The main thread's stack.
_global_timer_stack = TimerStack()
_main_ident = threading.main_thread().ident
#: Every thread's stack by thread id (what :func:`get_timer_stack_for_thread` reads).
_thread_timer_stacks: Dict[int, TimerStack] = {_main_ident: _global_timer_stack}  # type: ignore[dict-item]
# A thread's own stack; a new thread that reuses a finished one's id starts afresh.
_local = threading.local()


def _get_thread_timer() -> TimerStack:
    """The current thread's timer stack (created on first use)."""
    ident = _get_ident()
    if ident == _main_ident:
        return _global_timer_stack
    try:
        return _local.stack
    except AttributeError:
        stack = _local.stack = _thread_timer_stacks[ident] = TimerStack()
        return stack


def _after_fork_in_child() -> None:
    # The forking thread is the child's only (and main) thread.
    global _global_timer_stack, _main_ident
    ident = _get_ident()
    if ident != _main_ident:
        _global_timer_stack = getattr(_local, "stack", None) or TimerStack()
        _main_ident = ident
    _thread_timer_stacks.clear()
    _thread_timer_stacks[ident] = _global_timer_stack


RUNTIME.add_fork_step("timers", _after_fork_in_child)


# The innermost open block of this thread / asyncio task (see timer_frames), read on every block.
_frame_get = FRAME.get
_frame_set = FRAME.set
_frame_reset = FRAME.reset


def _resolve(timer_stack: Any) -> Any:
    return timer_stack or _get_thread_timer()


def _hide_var_keyword(fn: Callable[..., Any]) -> None:
    """Shows ML-Agents' signature: the ``**kwargs`` catching unknown arguments is left out."""
    sig = inspect.signature(fn)
    fn.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD])


# --- timed blocks ----------------------------------------------------------------------------------
class _Timer:
    """What :func:`hierarchical_timer` returns: a sync and async context manager
    yielding the block's :class:`TimerNode`, and a decorator."""

    __slots__ = ("_name", "_stack", "_used", "_node", "_token", "_span", "_start", "_outer")

    def __init__(self, name: str, timer_stack: Any) -> None:
        self._name = name
        self._stack = timer_stack
        self._start: Optional[float] = None
        self._outer: Optional[tuple] = None

    def __enter__(self) -> Optional[TimerNode]:
        if self._start is not None:  # the same object entered again while open
            self._outer = (self._outer, getattr(self, "_used", None), self._node,
                           getattr(self, "_token", None), self._span, self._start)
        node = None
        try:
            stack = self._used = self._stack or _get_thread_timer()
            # _open_node, inlined: this runs for every block.
            frame = _frame_get()
            open_nodes = stack.stack
            root = stack.root
            if frame is not None and frame[0] is stack and frame[1] is root:
                parent = frame[2]
            else:
                parent = open_nodes[-1] if open_nodes else root
            name = self._name
            node = parent.children.get(name)
            if node is None:
                node = parent.children[name] = TimerNode()
            elif node in open_nodes:
                node.is_parallel = True
            open_nodes.append(node)
            self._token = _frame_set((stack, root, node))
        except Exception as exc:  # noqa: BLE001 - never raise into the caller
            guard.report(diagnostics.TIMER_ERROR, "hierarchical_timer(%r): %r", self._name, exc)
            node = None
        self._node = node
        span = None
        if STATE.scopes_on:
            try:
                span = trace_scope(self._name)
                span.__enter__()
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.INTERNAL_ERROR, "hierarchical_timer(%r) span: %r", self._name, exc)
                span = None
        self._span = span
        self._start = _perf_counter()
        return node

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        start = self._start
        if start is None:  # exited without entering
            return None
        elapsed = _perf_counter() - start
        node, span = self._node, self._span
        if node is not None:
            try:
                node.total += elapsed
                node.count += 1
                open_nodes = self._used.stack
                if open_nodes and open_nodes[-1] is node:
                    open_nodes.pop()
                else:
                    close_node(self._used, node)
                try:
                    _frame_reset(self._token)
                except (ValueError, RuntimeError):
                    restore_frame(self._token)
            except Exception as err:  # noqa: BLE001
                guard.report(diagnostics.TIMER_ERROR, "hierarchical_timer(%r): %r", self._name, err)
        outer = self._outer
        if outer is None:
            self._start = None
        else:
            self._outer, self._used, self._node, self._token, self._span, self._start = outer
        if span is not None:
            try:
                span.__exit__(exc_type, exc, tb)
            except Exception as err:  # noqa: BLE001
                guard.report(diagnostics.INTERNAL_ERROR, "hierarchical_timer(%r) span: %r", self._name, err)
        return None

    async def __aenter__(self) -> Optional[TimerNode]:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        return self.__exit__(exc_type, exc, tb)

    def __call__(self, func: Any) -> Any:
        """``@hierarchical_timer("name")`` times every call of ``func`` (a new timer per call)."""
        return _wrap(func, self._name, self._stack)


def hierarchical_timer(name: str, timer_stack: Optional[TimerStack] = None, **kwargs: Any) -> Any:
    """Times a block (ML-Agents ``hierarchical_timer``).

    ``with hierarchical_timer("name") as node:`` adds the block's time to the
    node ``name`` under the innermost open block of this thread (or asyncio
    task) and yields that :class:`TimerNode` (ML-Agents merges worker trees
    into it). ``async with`` works too, and so does ``@hierarchical_timer("name")``.
    When tracing is configured the block is also a span.

    Args:
        name: Timer name.
        timer_stack: The :class:`TimerStack` to record into; the current
            thread's by default.
        kwargs: Unknown keyword arguments are accepted, ignored and counted.

    Returns:
        A context manager yielding the block's :class:`TimerNode`.
    """
    if kwargs:
        guard.ignored_arguments("hierarchical_timer", kwargs)
    if type(name) is not str:
        name = str(name)
    return _Timer(name, timer_stack)


class _Pieces:
    """A timer for a body that runs in pieces (a generator): open from its first
    resumption to its end; the node (and span) is current only while a piece runs."""

    __slots__ = ("name", "stack", "node", "span", "start")

    def __init__(self, name: str, timer_stack: Any) -> None:
        self.name = name
        node = stack = None
        try:
            stack = timer_stack or _get_thread_timer()
            node = open_node(stack, name)
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.TIMER_ERROR, "timed(%r): %r", name, exc)
        self.stack, self.node = stack, node
        self.span = (LeanSpan(STATE.pipeline, name, get_current(), _INTERNAL)
                     if STATE.scopes_on else None)
        self.start = _perf_counter()

    def resume(self) -> tuple:
        node, span = self.node, self.span
        token = resumed = None
        if node is not None:
            self.stack.stack.append(node)
            token = _frame_set((self.stack, self.stack.root, node))
        if span is not None:
            resumed = ResumedSpan(span)
            resumed.__enter__()
        return token, resumed

    def suspend(self, state: tuple) -> None:
        token, resumed = state
        if resumed is not None:
            resumed.__exit__(None, None, None)
        if token is not None:
            close_node(self.stack, self.node)  # type: ignore[arg-type]
            restore_frame(token)

    def finish(self, exc: Optional[BaseException]) -> None:
        elapsed = _perf_counter() - self.start
        if self.node is not None:
            self.node.total += elapsed
            self.node.count += 1
        span = self.span
        if span is not None:
            if exc is not None:
                record_failure(span, exc)
            span.end()


def _wrap(func: Any, name: str, timer_stack: Any = None) -> Any:
    if inspect.isasyncgenfunction(func):
        @functools.wraps(func)
        async def agen_wrapper(*a: Any, **kw: Any) -> Any:
            timer = _Pieces(name, timer_stack)
            agen = func(*a, **kw)
            failure: Optional[BaseException] = None
            sent: Any = None
            thrown: Optional[BaseException] = None
            try:
                while True:
                    state = timer.resume()
                    try:
                        item = await (agen.athrow(thrown) if thrown is not None else agen.asend(sent))
                    finally:
                        timer.suspend(state)
                    thrown = None
                    try:
                        sent = yield item
                    except GeneratorExit:
                        raise
                    except BaseException as exc:  # noqa: BLE001 - forwarded to the generator
                        thrown, sent = exc, None
            except StopAsyncIteration:
                pass
            except BaseException as exc:
                failure = exc
                raise
            finally:
                await agen.aclose()
                timer.finish(failure)

        return agen_wrapper

    if inspect.isgeneratorfunction(func):
        @functools.wraps(func)
        def gen_wrapper(*a: Any, **kw: Any) -> Any:
            timer = _Pieces(name, timer_stack)
            gen = func(*a, **kw)
            failure: Optional[BaseException] = None
            sent: Any = None
            thrown: Optional[BaseException] = None
            try:
                while True:
                    state = timer.resume()
                    try:
                        item = gen.throw(thrown) if thrown is not None else gen.send(sent)
                    finally:
                        timer.suspend(state)
                    thrown = None
                    try:
                        sent = yield item
                    except GeneratorExit:
                        raise
                    except BaseException as exc:  # noqa: BLE001 - forwarded to the generator
                        thrown, sent = exc, None
            except StopIteration as stop:
                return stop.value
            except BaseException as exc:
                failure = exc
                raise
            finally:
                gen.close()
                timer.finish(failure)

        return gen_wrapper

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def async_wrapper(*a: Any, **kw: Any) -> Any:
            async with _Timer(name, timer_stack):
                return await func(*a, **kw)

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*a: Any, **kw: Any) -> Any:
        with _Timer(name, timer_stack):
            return func(*a, **kw)

    return wrapper


def timed(func: FuncT, **kwargs: Any) -> FuncT:
    """Decorator timing every call of a function, named by its qualified name (ML-Agents ``@timed``).

    ``@timed`` uses ``func.__qualname__`` as the timer name, as ML-Agents
    does; ``@timed("name")`` names it explicitly. Sync and async functions,
    generators and async generators all work (a generator is timed from its
    first item to its end). The wrapper keeps the function's name and
    docstring (``functools.wraps``).

    Args:
        func: The function to time, or a timer name.
        kwargs: Unknown keyword arguments are accepted, ignored and counted.

    Returns:
        The wrapped function (or, given a name, a decorator).
    """
    if kwargs:
        guard.ignored_arguments("timed", kwargs)
    if isinstance(func, str):
        name = func

        def named(fn: Any) -> Any:
            return _decorate(fn, name)

        return named  # type: ignore[return-value]
    label = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return _decorate(func, str(label or type(func).__qualname__))


def _decorate(func: Any, name: str) -> Any:
    if not callable(func):
        guard.report(diagnostics.TIMER_ERROR, "timed(): %r is not callable; returned unchanged", type(func))
        return func
    try:
        return _wrap(func, name)
    except Exception as exc:  # noqa: BLE001
        guard.report(diagnostics.TIMER_ERROR, "timed(%r): %r; returned unchanged", name, exc)
        return func


# --- gauges, metadata and trees ----------------------------------------------------------------------
def _emit_gauge(name: str, value: float) -> None:
    """The gauge value as a span event (the current span, or a zero-length span)."""
    attributes = {keys.GAUGE_VALUE: value}
    ctx = get_current()
    current = ctx.get(_SPAN_KEY)
    if current is not None and current.is_recording():
        current.add_event(name, attributes)
        return
    span = LeanSpan(STATE.pipeline, name, ctx, attributes=attributes)
    span.end(span.start_ns)


@guard.guarded()
def set_gauge(name: str, value: float, timer_stack: Optional[TimerStack] = None, **kwargs: Any) -> None:
    """Records the current value of a gauge (ML-Agents ``set_gauge``).

    The tree's ``gauges`` keep each gauge's last ``value``, ``min``, ``max``
    and ``count``. NaN is ignored, as in ML-Agents; a value that is not a
    number is ignored and counted. When tracing is configured the value is
    also a span event named ``name`` (attribute ``rl.gauge.value``) on the
    current span, or a zero-length span when none is current.

    Args:
        name: Gauge name.
        value: Its current value.
        timer_stack: The :class:`TimerStack` to record into; the current
            thread's by default.
        kwargs: Unknown keyword arguments are accepted, ignored and counted.
    """
    if kwargs:
        guard.ignored_arguments("set_gauge", kwargs)
    try:
        value = float(value)
    except (TypeError, ValueError):
        guard.report(diagnostics.BAD_GAUGE_VALUE, "set_gauge(%r): %r is not a number; ignored", name, type(value))
        return
    if math.isnan(value):
        return
    if type(name) is not str:
        name = str(name)
    (timer_stack or _get_thread_timer()).set_gauge(name, value)
    if STATE.scopes_on:
        _emit_gauge(name, value)


@guard.guarded()
def merge_gauges(gauges: Dict[str, Any], timer_stack: Optional[TimerStack] = None, **kwargs: Any) -> None:
    """Folds another stack's gauges into this thread's (or ``timer_stack``'s) (ML-Agents ``merge_gauges``).

    For a name both have, the later value wins and min, max and count
    combine; other gauges are copied in. ``gauges`` maps names to
    :class:`GaugeNode` objects (``TimerStack.gauges``) or to their dict form
    (a tree's ``gauges``, e.g. read from a subprocess's ``timers.json``).

    Args:
        gauges: The gauges to merge.
        timer_stack: The :class:`TimerStack` to merge into.
        kwargs: Unknown keyword arguments are accepted, ignored and counted.
    """
    if kwargs:
        guard.ignored_arguments("merge_gauges", kwargs)
    merge_gauges_into(_resolve(timer_stack).gauges, gauges)


@guard.guarded()
def add_metadata(key: str, value: str, timer_stack: Optional[TimerStack] = None, **kwargs: Any) -> None:
    """Sets ``metadata[key]`` of the tree (ML-Agents ``add_metadata``).

    Args:
        key: Metadata key.
        value: Its value (text; other values JSON cannot hold are stored as text).
        timer_stack: The :class:`TimerStack`; the current thread's by default.
        kwargs: Unknown keyword arguments are accepted, ignored and counted.
    """
    if kwargs:
        guard.ignored_arguments("add_metadata", kwargs)
    _resolve(timer_stack).add_metadata(key, value)


@guard.guarded(default={})
def get_timer_tree(timer_stack: Optional[TimerStack] = None, **kwargs: Any) -> Dict[str, Any]:
    """The current thread's (or ``timer_stack``'s) timer tree (ML-Agents ``get_timer_tree``).

    Works with or without :func:`otel_rl.configure`. For the tree of a whole
    traced run across ranks, rebuilt from the spans, use
    :func:`otel_rl.report.timer_tree`.

    Args:
        timer_stack: The :class:`TimerStack` to read.
        kwargs: Unknown keyword arguments are accepted, ignored and counted.

    Returns:
        ML-Agents' ``timers.json`` document: ``name`` (``"root"``),
        ``gauges`` (when any), ``metadata`` (``timer_format_version``,
        ``start_time_seconds``, ``end_time_seconds``, ``python_version``,
        ``command_line_arguments`` and what :func:`add_metadata` added),
        ``total`` (seconds since the stack was made or reset), ``count``,
        ``self`` and ``children``.
    """
    if kwargs:
        guard.ignored_arguments("get_timer_tree", kwargs)
    return _resolve(timer_stack).get_timing_tree()


@guard.guarded()
def get_timer_root(timer_stack: Optional[TimerStack] = None, **kwargs: Any) -> TimerNode:
    """The root :class:`TimerNode` of the current thread's (or ``timer_stack``'s) tree (ML-Agents ``get_timer_root``).

    Its ``total`` is set to the seconds since the stack was made or reset. A
    subprocess sends it (it pickles) to the parent, which merges it with
    :meth:`TimerNode.merge`.
    """
    if kwargs:
        guard.ignored_arguments("get_timer_root", kwargs)
    return _resolve(timer_stack).get_root()


@guard.guarded()
def reset_timers(timer_stack: Optional[TimerStack] = None, **kwargs: Any) -> None:
    """Starts the current thread's (or ``timer_stack``'s) tree over (ML-Agents ``reset_timers``).

    The old root is left untouched (a root already handed out stays valid),
    gauges are dropped and metadata starts again from the defaults.
    """
    if kwargs:
        guard.ignored_arguments("reset_timers", kwargs)
    _resolve(timer_stack).reset()


@guard.guarded()
def get_timer_stack_for_thread(t: threading.Thread, **kwargs: Any) -> Optional[TimerStack]:
    """The timer stack of thread ``t`` (ML-Agents ``get_timer_stack_for_thread``).

    ``None`` when ``t`` has not started or never timed anything. ML-Agents
    merges a finished trainer thread's ``root`` and ``gauges`` into the main
    thread with :meth:`TimerNode.merge` and :func:`merge_gauges`.
    """
    if kwargs:
        guard.ignored_arguments("get_timer_stack_for_thread", kwargs)
    ident = t.ident
    if ident is None:
        return None
    if ident == _main_ident:
        return _global_timer_stack
    return _thread_timer_stacks.get(ident)


for _fn in (hierarchical_timer, timed, set_gauge, merge_gauges, add_metadata, get_timer_tree,
            get_timer_root, reset_timers, get_timer_stack_for_thread):
    _hide_var_keyword(_fn)
del _fn
