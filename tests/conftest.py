"""Shared pytest fixtures."""

import pytest
from receivers import GrpcReceiver, HttpReceiver


@pytest.fixture
def grpc_receiver():
    """A running OTLP/gRPC receiver on 127.0.0.1; stopped after the test."""
    with GrpcReceiver() as receiver:
        yield receiver


@pytest.fixture
def http_receiver():
    """A running OTLP/HTTP receiver on 127.0.0.1; stopped after the test."""
    with HttpReceiver() as receiver:
        yield receiver


import otel_rl  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from spans_util import as_dict  # noqa: E402


class Traced:
    """otel_rl configured on a private provider whose spans land in memory."""

    def __init__(self, run_root, exporter, provider):
        self.run_root = run_root
        self.exporter = exporter
        self.provider = provider

    def spans(self):
        """Flushes otel_rl and returns every finished span as a plain dict."""
        otel_rl.save(force=True)
        return [as_dict(s) for s in self.exporter.get_finished_spans()]

    @property
    def run_dir(self):
        return otel_rl.settings().run_dir


@pytest.fixture
def traced(tmp_path):
    """otel_rl configured with file output under tmp_path and an in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="exp", trial_name="t1",
                      rank=0, tracer_provider=provider, export_interval_ms=20)
    yield Traced(tmp_path, exporter, provider)
    otel_rl.reset()


@pytest.fixture(autouse=True)
def _isolated():
    """Each test starts from an empty OpenTelemetry context and no configuration
    (set_task_id / set_session_id attach contexts that outlive a test)."""
    from opentelemetry import context

    token = context.attach(context.Context())
    yield
    if otel_rl.is_configured():
        otel_rl.reset()
    context.detach(token)
