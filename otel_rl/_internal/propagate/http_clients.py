"""Trace context on every request of an HTTP client: httpx, aiohttp, requests.

Each helper adds a hook to a client the application owns; none of the three
libraries is a dependency of otel_rl, and each is imported only when its
helper is called. Headers the caller set explicitly are left alone.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import propagate

from .. import diagnostics, guard


def _inject_into(headers: Any) -> None:
    """Adds the current context's headers to ``headers`` (a mutable mapping)."""
    try:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        for name, value in carrier.items():
            if name not in headers:
                headers[name] = value
    except Exception as exc:  # noqa: BLE001 - a request must go out regardless
        guard.report(diagnostics.PROPAGATION_ERROR, "inject into request headers failed: %r", exc)


def instrument_httpx(client: Any) -> Any:
    """Adds a request hook to an ``httpx.Client`` or ``httpx.AsyncClient`` that
    writes ``traceparent`` / ``baggage`` into every request it sends.

    Args:
        client: The client; the hook matching its kind (sync or async) is added.

    Returns:
        The client, for ``client = otel_rl.instrument_httpx(httpx.AsyncClient())``.
    """
    import httpx

    hooks = dict(client.event_hooks)
    if isinstance(client, httpx.AsyncClient):
        async def hook(request: Any) -> None:
            _inject_into(request.headers)
    else:
        def hook(request: Any) -> None:  # type: ignore[misc]
            _inject_into(request.headers)
    hooks["request"] = [*hooks.get("request", []), hook]
    client.event_hooks = hooks
    return client


def aiohttp_trace_config() -> Any:
    """An ``aiohttp.TraceConfig`` that writes the context into every request's headers.

    Pass it to the session: ``aiohttp.ClientSession(trace_configs=[otel_rl.aiohttp_trace_config()])``.
    """
    import aiohttp

    async def on_request_start(session: Any, trace_ctx: Any, params: Any) -> None:
        _inject_into(params.headers)

    config = aiohttp.TraceConfig()
    config.on_request_start.append(on_request_start)
    return config


def instrument_requests(session: Any) -> Any:
    """Makes a ``requests.Session`` write the context into every request it sends.

    The session's ``send`` is wrapped on this instance only (requests has no
    request hook), so the headers are those of the context current when the
    request is sent.

    Args:
        session: The ``requests.Session``.

    Returns:
        The session.
    """
    send = session.send
    if getattr(send, "_otel_rl_wrapped", False):
        return session

    def traced_send(request: Any, **kwargs: Any) -> Any:
        _inject_into(request.headers)
        return send(request, **kwargs)

    traced_send._otel_rl_wrapped = True  # type: ignore[attr-defined]
    session.send = traced_send
    return session
