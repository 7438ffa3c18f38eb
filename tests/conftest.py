"""Shared pytest fixtures (helpers shared by the modules live in ``support``)."""

import pytest
from receivers import GrpcReceiver, HttpReceiver
from support import PROTOCOLS, receiver_for
from support.capture import capture  # noqa: F401 - the fixture, for every module


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


@pytest.fixture(params=PROTOCOLS)
def otlp_receiver(request):
    """A running receiver of each OTLP protocol in turn (the test runs once per
    protocol); ``receiver.protocol`` is its ``OTEL_EXPORTER_OTLP_PROTOCOL`` value."""
    with receiver_for(request.param) as receiver:
        yield receiver


import otel_rl  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from support import as_dict, read_sessions  # noqa: E402


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

    def sessions(self):
        """Flushes otel_rl and returns the session records written so far."""
        otel_rl.save(force=True)
        return read_sessions(self.run_dir)

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


# --- unexpected diagnostics fail the test -----------------------------------------------------
from collections import Counter  # noqa: E402

from otel_rl._internal import guard  # noqa: E402

#: Diagnostics kinds that mean a bug in otel_rl or in the test (a call that did not do
#: what it says), never an expected outcome - unless the test declares them.
_WATCHED_PREFIXES = ("internal_error", "unknown_")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "expect_diagnostics(*kinds): the test provokes these internal_error / unknown_* diagnostics "
        "kinds on purpose (any other one fails it)")


@pytest.fixture(autouse=True)
def _no_unexpected_diagnostics(request, monkeypatch):
    """Fails a test that counted an ``internal_error`` or ``unknown_*`` diagnostic it did not declare.

    Every count is seen as it happens (``reset()`` and the tests' own
    ``guard.clear()`` would wipe ``otel_rl.diagnostics()`` before the end of
    the test), with the message it was reported with. Defined before
    ``_isolated`` so that it is set up first and checks last, after every other
    fixture's teardown (shutdowns report too).
    """
    expected = set()
    for marker in request.node.iter_markers("expect_diagnostics"):
        expected.update(marker.args)
    seen = []
    real_report, real_count = guard.report, guard.count

    def report(kind, message, *args):
        if kind.startswith(_WATCHED_PREFIXES) and kind not in expected:
            try:
                text = message % args
            except Exception:  # noqa: BLE001 - the message is only for the failure text
                text = message
            seen.append(f"{kind}: {text}")
        real_report(kind, message, *args)

    def count(kind, n=1):
        if kind.startswith(_WATCHED_PREFIXES) and kind not in expected:
            seen.append(f"{kind} (counted {n})")
        real_count(kind, n)

    monkeypatch.setattr(guard, "report", report)
    monkeypatch.setattr(guard, "count", count)
    yield
    if seen:
        distinct = Counter(seen)
        lines = [f"{text}" + (f" (x{n})" if n > 1 else "") for text, n in list(distinct.items())[:20]]
        pytest.fail("unexpected otel_rl diagnostics (declare provoked ones with "
                    "@pytest.mark.expect_diagnostics(kind)):\n  " + "\n  ".join(lines), pytrace=False)


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



@pytest.fixture
def recorder_stopped():
    """The process's request-event recorder stopped, no stage bound and no counts,
    before and after the test (modules of request-event tests use it for every test)."""
    from otel_rl import events
    from otel_rl._internal import guard

    events.stop()
    events.reset_active_stage(None)
    guard.clear()
    yield
    events.stop()
    events.reset_active_stage(None)
