"""The control endpoints over HTTP: request handling, an ASGI app and a standalone server.

Endpoints (``POST`` with a JSON object body; an empty body is ``{}``):

* ``/start_profile`` ``{run_id?, event_dir?, enable_torch? = true, config?}``:
  request events plus a torch profiler window;
* ``/stop_profile`` ``{run_id?}``: stops both;
* ``/start_request_profile`` ``{run_id?, event_dir?}``: request events only;
* ``/stop_request_profile`` ``{run_id?}``: stops the request events;
* ``GET /profile_status``: this process, the desired state, the registered processes.

Served by :func:`control_app` (an ASGI callable to mount in an existing app) or
:func:`serve_control` (a stdlib ``ThreadingHTTPServer`` on a daemon thread).
Both answer through :func:`handle_request`: bad input is a 4xx naming the
problem, a wrong or missing bearer token a 401, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit

import orjson

from .. import diagnostics, guard
from ..events import ProfilingError
from .job import JOB, MAX_BODY, current_settings
from .operations import (profile_status, start_profile, start_request_profile, stop_profile,
                         stop_request_profile)

logger = logging.getLogger("otel_rl")

#: Seconds a client of the standalone server may take for each read and write.
_IO_TIMEOUT_S = 10.0
#: Connections the standalone server serves at once; more are answered 503 and closed.
_MAX_CONNECTIONS = 16

#: Path: (method, fields its body may have, the operation).
_ENDPOINTS: dict[str, tuple[str, frozenset[str], Callable[..., dict[str, Any]]]] = {
    "/start_profile": ("POST", frozenset({"run_id", "event_dir", "enable_torch", "config"}), start_profile),
    "/stop_profile": ("POST", frozenset({"run_id"}), stop_profile),
    "/start_request_profile": ("POST", frozenset({"run_id", "event_dir"}), start_request_profile),
    "/stop_request_profile": ("POST", frozenset({"run_id"}), stop_request_profile),
    "/profile_status": ("GET", frozenset(), lambda: profile_status()),
}

Response = tuple[int, dict[str, Any], list[tuple[str, str]]]


def _error(status: int, message: str, headers: list[tuple[str, str]] | None = None) -> Response:
    return status, {"ok": False, "error": message}, headers or []


def handle_request(method: str, target: str, body: bytes, headers: dict[str, str],
                   token: str | None) -> Response:
    """Serves one control request: ``(status, JSON body, extra headers)``.

    Bad input is a 4xx with a message naming the problem; only a failure of
    otel_rl itself is a 500.
    """
    try:
        if token:
            given = headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(),
                                                                     token.encode()):
                return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                              [("www-authenticate", 'Bearer realm="otel_rl"')])
        path = urlsplit(target).path.rstrip("/") or "/"
        endpoint = _ENDPOINTS.get(path)
        if endpoint is None:
            return _error(404, f"no endpoint {path!r}; endpoints: {sorted(_ENDPOINTS)}")
        allowed_method, fields, operation = endpoint
        if method.upper() != allowed_method:
            return _error(405, f"{path} takes {allowed_method}, not {method}", [("allow", allowed_method)])
        if allowed_method == "GET":
            return 200, operation(), []
        text = body.strip()
        try:
            args = orjson.loads(text) if text else {}
        except orjson.JSONDecodeError as exc:
            return _error(400, f"invalid JSON body: {exc}")
        if not isinstance(args, dict):
            return _error(400, f"the body must be a JSON object, got {type(args).__name__}")
        unknown = sorted(set(args) - fields)
        if unknown:
            return _error(400, f"unknown field(s) {unknown} for {path}; allowed: {sorted(fields)}")
        # JSON null is the same as leaving the field out.
        return 200, operation(**{k: v for k, v in args.items() if v is not None}), []
    except ProfilingError as exc:
        return _error(exc.status, str(exc))
    except Exception as exc:  # noqa: BLE001 - never a traceback to the client, never a crash
        guard.report(diagnostics.CONTROL_ERROR, "control request failed: %r", exc)
        return _error(500, f"internal error: {exc!r}")


def _encode(payload: dict[str, Any]) -> bytes:
    return orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS) + b"\n"


def control_app(token: str | None = None) -> Callable[..., Any]:
    """An ASGI application serving the control endpoints; mount it in any ASGI app::

        app.mount("/otel_rl", otel_rl.control_app())      # FastAPI / Starlette
        # POST /otel_rl/start_profile, ...

    or serve it on its own (``uvicorn module:app`` with ``app = otel_rl.control_app()``).

    Args:
        token: Bearer token required on every request; default
            ``OTEL_RL_CONTROL_TOKEN`` (none when unset).
    """
    required = token if token is not None else current_settings().control_token

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            return
        chunks = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= MAX_BODY:
                chunks.append(chunk)
            more = message.get("more_body", False)
        headers = {}
        for name, value in scope.get("headers") or ():
            headers[name.decode("latin-1").lower()] = value.decode("latin-1")
        path = scope.get("path", "/")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"  # mounted: the path below the mount point
        if size > MAX_BODY:
            status, payload, extra = _error(413, f"body larger than {MAX_BODY} bytes")
        else:
            # The request may wait for acknowledgements: off the event loop.
            status, payload, extra = await asyncio.get_running_loop().run_in_executor(
                None, handle_request, scope.get("method", "GET"), path, b"".join(chunks), headers,
                required)
        data = _encode(payload)
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
            *((k.encode(), v.encode()) for k, v in extra)]})
        await send({"type": "http.response.body", "body": data})

    return app


class _Handler(BaseHTTPRequestHandler):
    server_version = "otel_rl-control"
    server: _Server

    def setup(self) -> None:
        # Every read and write of the connection is bounded: a client that stalls
        # (or trickles) holds a slot for at most this long per operation.
        self.timeout = self.server.io_timeout_s
        super().setup()

    def _serve(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            status, payload, extra = _error(400, "invalid Content-Length")
            self.close_connection = True
        elif length > MAX_BODY:
            status, payload, extra = _error(413, f"body larger than {MAX_BODY} bytes")
            self.close_connection = True
        else:
            try:
                body = self.rfile.read(length) if length else b""
            except TimeoutError:
                body = None
            if body is None:
                status, payload, extra = _error(408, f"the body did not arrive within "
                                                     f"{self.server.io_timeout_s:g}s")
                self.close_connection = True
            elif len(body) < length:
                # The client closed early: acting on part of a request is never right.
                status, payload, extra = _error(400, f"truncated body: {len(body)} of the {length} "
                                                     "bytes of Content-Length arrived")
                self.close_connection = True
            else:
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, payload, extra = handle_request(self.command, self.path, body, headers,
                                                        self.server.token)
        data = _encode(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        logger.debug("otel_rl control: " + format, *args)


_BUSY = _encode({"ok": False, "error": "too many connections to the control server; try again"})
_BUSY_RESPONSE = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" % len(_BUSY)
                  + _BUSY)


#: How long (and how much) a refused connection is read before it is closed.
_REFUSE_DRAIN_S = 0.2
_REFUSE_DRAIN_BYTES = 64 << 10


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    token: str | None = None
    io_timeout_s = _IO_TIMEOUT_S

    def __init__(self, address: Any, handler: Any, max_connections: int) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_connections = max_connections
        self._active = 0
        self._active_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        # One thread per connection, but only so many: beyond them a client is
        # told to come back, without a thread and without reading its request.
        if not self._slots.acquire(blocking=False):
            guard.count(diagnostics.CONTROL_CONNECTIONS_REFUSED)
            try:
                request.settimeout(_REFUSE_DRAIN_S)
                request.sendall(_BUSY_RESPONSE)
                # Closing with the request still unread would reset the connection and
                # the client could lose the answer: end our side, take what the client
                # already sent (briefly, bounded), then close.
                request.shutdown(socket.SHUT_WR)
                drained = 0
                while drained < _REFUSE_DRAIN_BYTES:
                    chunk = request.recv(4096)
                    if not chunk:
                        break
                    drained += len(chunk)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self._active_lock:
            self._active += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._active_lock:
            self._active -= 1
        self._slots.release()

    def active_connections(self) -> int:
        with self._active_lock:
            return self._active

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that resets or times out is not otel_rl's error: no traceback on stderr.
        logger.debug("otel_rl control: connection from %s ended with an error", client_address,
                     exc_info=True)


class ControlServer:
    """The standalone control server (:func:`serve_control`).

    Attributes:
        host: The interface it listens on.
        port: Its port (the one chosen when 0 was asked for).
        url: ``http://host:port``.
    """

    def __init__(self, host: str, port: int, token: str | None, *, io_timeout_s: float = _IO_TIMEOUT_S,
                 max_connections: int = _MAX_CONNECTIONS) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("_BoundServer", (_Server,), {"address_family": family})
        self._server = server_class((host, port), _Handler, max_connections)
        self._server.token = token or None
        self._server.io_timeout_s = io_timeout_s
        self.host = host
        self.port = self._server.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="otel_rl-control-http",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()

    def active_connections(self) -> int:
        """Connections being served now."""
        return self._server.active_connections()

    def close(self) -> None:
        """Stops serving and releases the port."""
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(ValueError):
            JOB.servers.remove(self)
        if JOB.server is self:
            JOB.server = None

    def __repr__(self) -> str:
        return f"ControlServer({self.url})"


def serve_control(port: int | None = None, host: str | None = None,
                  token: str | None = None) -> ControlServer:
    """Serves the control endpoints on a daemon thread (stdlib ``http.server``).

    Args:
        port: TCP port; default ``OTEL_RL_CONTROL_PORT``, else 0 (any free
            port: read it from the result's ``port``).
        host: Interface; default ``OTEL_RL_CONTROL_HOST`` (``127.0.0.1``).
            Anything but loopback without a token logs a warning.
        token: Bearer token; default ``OTEL_RL_CONTROL_TOKEN``.

    Returns:
        The running :class:`ControlServer` (the same one when called again
        for the same port and interface).

    Raises:
        OSError: The port cannot be bound.
    """
    settings = current_settings()
    port = settings.control_port if port is None else port
    port = 0 if port is None else int(port)
    host = host or settings.control_host
    token = settings.control_token if token is None else token
    for server in JOB.servers:
        if server.host == host and port in (0, server.port):
            return server
    server = ControlServer(host, port, token)
    if not token and host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("otel_rl: the control server listens on %s without a token; anyone who "
                       "can reach it can start profiling (set OTEL_RL_CONTROL_TOKEN)", server.url)
    JOB.servers.append(server)
    logger.info("otel_rl: control server on %s", server.url)
    return server
