"""Carrying task, session and step ids across process boundaries.

Uses the globally configured OpenTelemetry propagators (``OTEL_PROPAGATORS``;
W3C ``traceparent`` + ``baggage`` by default), so anything that reads
``traceparent`` - an OpenTelemetry-instrumented vLLM or SGLang server, another
otel_rl process - joins the session's trace and gets its ids.

Carriers, by where the other side lives:

* HTTP: :func:`inject` into request headers (or let :func:`instrument_httpx`,
  :func:`aiohttp_trace_config` and :func:`instrument_requests` do it for every
  request of a client); on the server :class:`ASGIMiddleware` or
  :func:`attach` / :func:`extract` on the received headers.
* A process pool, an executor or Ray: :func:`carry` wraps a function with the
  caller's context; :func:`propagating` makes a worker function accept one
  (``otel_rl_context=``, see :func:`context_kwargs`).
* A spawned subprocess: :func:`inject_env` writes the OpenTelemetry
  environment carrier (``TRACEPARENT``, ``TRACESTATE``, ``BAGGAGE``); a child
  that configures otel_rl picks it up by itself (:func:`extract_env`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

from opentelemetry import context as context_api
from opentelemetry import propagate
from opentelemetry.trace.propagation import _SPAN_KEY

from ._internal import diagnostics, guard, keys
from ._internal.propagate import carriers
from ._internal.propagate.carriers import ENV_CARRIER_KEYS
from ._internal.recording.spans import LeanSpan, get_current
from ._internal.propagate.asgi import ASGIMiddleware
from ._internal.propagate.http_clients import aiohttp_trace_config, instrument_httpx, instrument_requests

__all__ = [
    "ASGIMiddleware", "CONTEXT_KWARG", "ENV_CARRIER_KEYS", "aiohttp_trace_config", "attach", "carry",
    "context_kwargs", "extract", "extract_env", "inject", "inject_env", "instrument_httpx",
    "instrument_requests", "propagating",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The keyword argument :func:`propagating` functions take the caller's context in.
CONTEXT_KWARG = "otel_rl_context"


def inject(carrier: MutableMapping[str, str] | None = None) -> dict[str, str] | MutableMapping[str, str]:
    """Writes the current trace context and ids into ``carrier`` (HTTP headers, a dict sent to a worker).

    Args:
        carrier: A mutable mapping to fill; a new dict when omitted.

    Returns:
        The carrier, for chaining: ``requests.post(url, headers=inject({...}))``.
    """
    carrier = {} if carrier is None else carrier
    try:
        propagate.inject(carrier)
        span = get_current().get(_SPAN_KEY)
        if type(span) is LeanSpan:
            # Its children in other processes get arrows from it in Perfetto.
            span.set_attribute(keys.CONTEXT_SENT, True)
    except Exception as exc:  # noqa: BLE001
        guard.report(diagnostics.PROPAGATION_ERROR, "inject failed: %r", exc)
    return carrier


def extract(carrier: Mapping[str, str] | None) -> context_api.Context:
    """Reads a context written by :func:`inject`; malformed headers give an empty context.

    Baggage keys other than otel_rl's are dropped unless ``OTEL_RL_BAGGAGE_ALLOW``
    names them, and at most 180 entries / 8192 bytes are kept (both counted).

    Args:
        carrier: The received mapping (for example request headers).

    Returns:
        An OpenTelemetry ``Context`` to pass to :func:`attach` or to a tracer.
    """
    return carriers.extract(carrier)


@contextlib.contextmanager
def attach(carrier: Mapping[str, str] | context_api.Context | None) -> Iterator[context_api.Context]:
    """Runs a block inside the context carried by ``carrier``.

    Spans started inside are children of the remote span, and
    ``get_task_id()`` / ``get_session_id()`` return the carried ids.

    Args:
        carrier: Headers written by :func:`inject`, or a ``Context`` from :func:`extract`.
    """
    ctx = carrier if isinstance(carrier, context_api.Context) else extract(carrier)  # type: ignore[arg-type]
    token = context_api.attach(ctx)
    try:
        yield ctx
    finally:
        context_api.detach(token)


# --- spawned subprocesses: the environment carrier ---------------------------------------
def inject_env(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """Writes the current context into an environment for a subprocess.

    Uses the OpenTelemetry specification's environment carrier: the header
    names upper-cased (``TRACEPARENT``, ``TRACESTATE``, ``BAGGAGE``). Variables
    of a context that is not carried (no current span, no baggage) are removed,
    so a child never inherits a stale parent.

    Args:
        env: The environment to fill; a copy of ``os.environ`` when omitted.

    Returns:
        The environment, for ``subprocess.run(cmd, env=otel_rl.inject_env())``.
    """
    env = dict(os.environ) if env is None else env
    headers = inject({})
    for header, name in ENV_CARRIER_KEYS.items():
        value = headers.get(header)
        if value:
            env[name] = value
        else:
            env.pop(name, None)
    return env


def extract_env(environ: Mapping[str, str] | None = None) -> context_api.Context:
    """The context a parent process passed in the environment (see :func:`inject_env`).

    ``configure()`` attaches it by itself when ``TRACEPARENT`` or ``BAGGAGE``
    is set, so a subprocess's spans join its parent's trace with no code.

    Args:
        environ: The environment to read; ``os.environ`` when omitted.
    """
    return carriers.extract_env(environ)


# --- pools, executors, Ray: the context travels with the call --------------------------------
class _Carried:
    """A picklable callable: ``fn`` run inside the context captured when it was made."""

    __slots__ = ("fn", "carrier", "__wrapped__")

    def __init__(self, fn: Callable[..., Any], carrier: dict[str, str]) -> None:
        self.fn = fn
        self.carrier = carrier
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with attach(self.carrier):
            return self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Carried, (self.fn, self.carrier))


def carry(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` bound to the current context, to run in another process or thread.

    The context is captured now, as W3C headers, so the result pickles (when
    ``fn`` does: a module-level function) and works with ``multiprocessing``
    pools and ``Process(target=...)``, ``concurrent.futures`` executors and
    anything else that calls it elsewhere::

        pool.apply_async(otel_rl.carry(score), (sample,))

    Spans the call makes join the caller's trace and carry its task and
    session ids (when the worker process configured otel_rl, for example
    through ``OTEL_RL_ENABLED=1`` in its environment).
    """
    return _Carried(fn, dict(inject({})))


def context_kwargs() -> dict[str, dict[str, str]]:
    """The keyword argument that ships the current context to a :func:`propagating` function.

    For Ray, where the task is declared once and called by name::

        rollout.remote(prompt, **otel_rl.context_kwargs())
    """
    return {CONTEXT_KWARG: dict(inject({}))}


def propagating(fn: F) -> F:
    """Decorator for worker functions: an ``otel_rl_context=`` argument (from
    :func:`context_kwargs`) is taken off and the call runs inside that context.

    Calls without it run as before. Works under ``@ray.remote`` (put this
    decorator below it) and for any function called in another process::

        @ray.remote
        @otel_rl.propagating
        def rollout(prompt): ...
    """

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            carrier = kwargs.pop(CONTEXT_KWARG, None)
            if not carrier:
                return await fn(*args, **kwargs)
            with attach(carrier):
                return await fn(*args, **kwargs)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        carrier = kwargs.pop(CONTEXT_KWARG, None)
        if not carrier:
            return fn(*args, **kwargs)
        with attach(carrier):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
