"""Server side of propagation: an ASGI middleware that continues the caller's trace."""

from __future__ import annotations

from typing import Any

from opentelemetry import context as context_api
from opentelemetry import propagate
from opentelemetry.trace import SpanKind, StatusCode

from .. import diagnostics, guard, keys
from . import incoming
from ..state import STATE


def _headers_of(scope: dict[str, Any]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in scope.get("headers") or ():
        try:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
        except (AttributeError, UnicodeDecodeError):
            continue
        # Repeated headers (several baggage lines) combine as HTTP says they may.
        headers[key] = f"{headers[key]},{text}" if key in headers else text
    return headers


class ASGIMiddleware:
    """Runs each HTTP or WebSocket request of an ASGI app inside the context
    its headers carry (W3C ``traceparent`` + ``baggage``).

    When otel_rl is configured, each request is also a SERVER span
    (``"{method} {path}"``, with ``http.request.method``, ``url.path``,
    ``url.scheme`` and ``http.response.status_code``; ERROR on a 5xx or an
    exception) that is a child of the caller's span, so request events and the
    handler's own spans land under the session that sent the request.
    Malformed headers are ignored (counted); the request is served regardless.

    Args:
        app: The ASGI application to wrap (FastAPI, Starlette, any ASGI callable).
        server_span: Whether to record the per-request SERVER span.
    """

    def __init__(self, app: Any, *, server_span: bool = True) -> None:
        self.app = app
        self.server_span = server_span

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        try:
            headers = _headers_of(scope)
            ctx = incoming.limit(propagate.extract(headers), headers.get("baggage"))
        except Exception as exc:  # noqa: BLE001 - serve the request regardless
            guard.report(diagnostics.PROPAGATION_ERROR, "extract from request headers failed: %r", exc)
            ctx = context_api.Context()
        tracer = STATE.tracer if self.server_span and STATE.scopes_on else None
        if tracer is None:
            token = context_api.attach(ctx)
            try:
                await self.app(scope, receive, send)
            finally:
                context_api.detach(token)
            return
        method = scope.get("method") or "WS"
        path = scope.get("path") or "/"
        span = tracer.start_span(f"{method} {path}", ctx, SpanKind.SERVER, {
            keys.HTTP_REQUEST_METHOD: method, keys.URL_PATH: path,
            keys.URL_SCHEME: scope.get("scheme") or "http",
        })

        async def send_with_status(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                status = message.get("status")
                if isinstance(status, int):
                    span.set_attribute(keys.HTTP_RESPONSE_STATUS_CODE, status)
                    if status >= 500:
                        span.set_status(StatusCode.ERROR)
            await send(message)

        # The span is its own context manager: current inside, ended on exit,
        # an exception recorded on it and re-raised unchanged.
        with span:
            await self.app(scope, receive, send_with_status)
