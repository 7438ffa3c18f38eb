"""Carrying task, session and step ids across process boundaries.

Uses the globally configured OpenTelemetry propagators (``OTEL_PROPAGATORS``;
W3C ``traceparent`` + ``baggage`` by default), so anything that reads
``traceparent`` - an OpenTelemetry-instrumented vLLM or SGLang server, another
otel_rl process - joins the session's trace and gets its ids.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping

from opentelemetry import context as context_api
from opentelemetry import propagate

from ._internal import guard


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
    except Exception as exc:  # noqa: BLE001
        guard.report("propagation_error", "inject failed: %r", exc)
    return carrier


def extract(carrier: Mapping[str, str] | None) -> context_api.Context:
    """Reads a context written by :func:`inject`; malformed headers give an empty context.

    Args:
        carrier: The received mapping (for example request headers).

    Returns:
        An OpenTelemetry ``Context`` to pass to :func:`attach` or to a tracer.
    """
    try:
        return propagate.extract(carrier or {})
    except Exception as exc:  # noqa: BLE001
        guard.report("propagation_error", "extract failed: %r", exc)
        return context_api.Context()


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
