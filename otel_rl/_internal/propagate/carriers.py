"""Reading a carried context: received headers, and the environment carrier a
parent process writes for a subprocess (``TRACEPARENT``, ``TRACESTATE``, ``BAGGAGE``).

``otel_rl.propagation`` documents these as its public ``extract`` and
``extract_env``; the runtime uses them at ``configure()`` to continue the
parent's trace, which is why they live below it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import context as context_api
from opentelemetry import propagate

from .. import diagnostics, guard
from . import incoming

#: Environment variables of the OpenTelemetry environment carrier, by header name.
ENV_CARRIER_KEYS = {"traceparent": "TRACEPARENT", "tracestate": "TRACESTATE", "baggage": "BAGGAGE"}


def extract(carrier: Mapping[str, str] | None) -> context_api.Context:
    """The context in ``carrier`` (malformed headers: an empty one), its baggage limited."""
    try:
        # Incoming baggage keeps otel_rl's keys (and OTEL_RL_BAGGAGE_ALLOW's), within W3C limits.
        carrier = carrier or {}
        return incoming.limit(propagate.extract(carrier), incoming.header_of(carrier))
    except Exception as exc:  # noqa: BLE001
        guard.report(diagnostics.PROPAGATION_ERROR, "extract failed: %r", exc)
        return context_api.Context()


def env_carried(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` carries a context (a trace parent or baggage)."""
    return any(environ.get(name) for name in ENV_CARRIER_KEYS.values())


def extract_env(environ: Mapping[str, str] | None = None) -> context_api.Context:
    """The context a parent process passed in ``environ`` (``os.environ`` when omitted)."""
    environ = os.environ if environ is None else environ
    headers = {header: environ[name] for header, name in ENV_CARRIER_KEYS.items() if environ.get(name)}
    return extract(headers)
