"""Pointing otel_rl at the suite's real OTLP receivers (``receivers.py``)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

#: The two OTLP protocols (``OTEL_EXPORTER_OTLP_PROTOCOL`` values) the receivers speak.
PROTOCOLS = ("grpc", "http/protobuf")


def receiver_for(protocol: str) -> Any:
    """A new, unstarted receiver speaking ``protocol`` (a :data:`PROTOCOLS` value)."""
    from receivers import GrpcReceiver, HttpReceiver

    return {"grpc": GrpcReceiver, "http/protobuf": HttpReceiver}[protocol]()


def export_to(monkeypatch: pytest.MonkeyPatch, receiver: Any) -> None:
    """Sets the standard OTLP variables so the next ``configure()`` exports to ``receiver``."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", receiver.protocol)


def unreachable_endpoint() -> str:
    """An ``http://127.0.0.1:PORT`` endpoint nothing listens on (the port was just free)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"
