"""Standard OTLP variables the Python SDK reads against the specification: otel_rl reads
them itself (timeout in milliseconds, ``compression=none``), against real receivers."""

from __future__ import annotations

import logging
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from receivers import GrpcReceiver
from support import run_python

import otel_rl
from otel_rl._internal import guard
from otel_rl._internal.export.chain import DEFAULT_OTLP_TIMEOUT_S, otlp_timeout_s


@pytest.fixture(autouse=True)
def _fresh_counters():
    yield
    guard.clear()


SCRIPT = """
import otel_rl
otel_rl.configure()
for _ in range(5):
    with otel_rl.trace_scope("x"):
        pass
otel_rl.shutdown()
print(otel_rl.run_summary()["spans"]["exported_otlp"], otel_rl.run_summary()["problems"].get("otlp_env_corrected", 0))
"""


def test_compression_none_does_not_stop_grpc_export_from_starting(grpc_receiver, tmp_path):
    # The SDK's gRPC exporter raises InvalidCompressionValueException on "none".
    result = run_python(SCRIPT, {"OTEL_RL_DIR": str(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": grpc_receiver.endpoint,
                           "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_COMPRESSION": "none"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["5", "0"]
    assert len(grpc_receiver.wait_for_spans(5)) == 5
    assert "compression" not in result.stderr


def test_gzip_from_the_traces_variable_reaches_the_http_receiver_compressed(http_receiver, tmp_path):
    result = run_python(SCRIPT, {"OTEL_RL_DIR": str(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint,
                           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                           "OTEL_EXPORTER_OTLP_COMPRESSION": "none",
                           "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip"})
    assert result.returncode == 0, result.stderr
    http_receiver.wait_for_spans(5)
    trace_headers = [h for h in http_receiver.headers_seen if h.get("content-encoding")]
    assert trace_headers and all(h["content-encoding"] == "gzip" for h in trace_headers)


def test_an_unknown_compression_warns_once_and_sends_uncompressed(grpc_receiver, tmp_path):
    result = run_python(SCRIPT, {"OTEL_RL_DIR": str(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": grpc_receiver.endpoint,
                           "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd9"})
    assert result.returncode == 0, result.stderr
    assert len(grpc_receiver.wait_for_spans(5)) == 5
    warnings = [line for line in result.stderr.splitlines() if "OTEL_EXPORTER_OTLP_COMPRESSION" in line]
    assert len(warnings) == 1 and "'zstd9'" in warnings[0] and "uncompressed" in warnings[0]
    assert result.stdout.split()[1] != "0"  # counted (spans and metrics exporters)


def test_the_timeout_is_read_in_milliseconds_as_the_specification_says(monkeypatch, tmp_path):
    # 1000 ms against a collector that answers after 6 s: the export fails after
    # about a second. Read in seconds, as the SDK does, it would wait 1000 s.
    with GrpcReceiver(delay_s=6) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")
        otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False),
                          export_process=False, session_tracer=False, shutdown_timeout_ms=1000)
        for _ in range(3):
            with otel_rl.trace_scope("x"):
                pass
        started = time.monotonic()
        otel_rl.save(force=True)
        while time.monotonic() - started < 5:
            if otel_rl.run_summary()["spans"]["dropped"].get("otlp_export_failed") == 3:
                break
            time.sleep(0.05)
        failed_after = time.monotonic() - started
        otel_rl.shutdown()
    assert otel_rl.run_summary()["spans"]["dropped"].get("otlp_export_failed") == 3
    assert failed_after < 3.0, failed_after


@pytest.mark.parametrize(("env", "expected", "warns"), [
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "10000"}, 10.0, False),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}, 2.5, False),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "5"}, 5.0, True),  # the SDK's seconds, kept
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, DEFAULT_OTLP_TIMEOUT_S, True),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "-3"}, DEFAULT_OTLP_TIMEOUT_S, True),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "inf"}, DEFAULT_OTLP_TIMEOUT_S, True),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "7", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "3000"}, 3.0, False),
    ({}, DEFAULT_OTLP_TIMEOUT_S, False),
])
def test_timeout_values_and_their_warnings(env, expected, warns, caplog):
    from otel_rl._internal.export import chain as export_chain

    export_chain._warned.clear()
    with caplog.at_level(logging.WARNING, logger="otel_rl"):
        assert otlp_timeout_s(env, "traces") == expected
    assert bool(caplog.records) == warns
    if warns:
        assert "OTEL_EXPORTER_OTLP_TIMEOUT" in caplog.records[0].getMessage()
