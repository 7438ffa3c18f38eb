"""Enablement by environment alone, and ids crossing into other processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from opentelemetry.sdk.trace import TracerProvider
from support import clean_env, export_to, run_python

import otel_rl


def test_env_vars_alone_enable_tracing_and_export(grpc_receiver, tmp_path):
    result = run_python("""
        import otel_rl
        with otel_rl.trace_scope("from_env"):
            pass
    """, {"OTEL_RL_ENABLED": "1", "OTEL_RL_DIR": str(tmp_path), "RANK": "2",
          "OTEL_EXPORTER_OTLP_ENDPOINT": grpc_receiver.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert result.returncode == 0, result.stderr
    (span,) = grpc_receiver.wait_for_spans(1)
    assert span["name"] == "from_env"
    assert span["resource"]["service.name"] == "otel-rl"
    assert span["resource"]["rl.rank"] == 2
    assert os.path.exists(tmp_path / "default" / "trial0" / "traces-r2.jsonl")


def test_otel_service_name_is_honoured(grpc_receiver, tmp_path):
    result = run_python("""
        import otel_rl
        with otel_rl.trace_scope("x"):
            pass
    """, {"OTEL_RL_ENABLED": "true", "OTEL_RL_DIR": str(tmp_path), "OTEL_SERVICE_NAME": "rollout-svc",
          "OTEL_EXPORTER_OTLP_ENDPOINT": grpc_receiver.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert result.returncode == 0, result.stderr
    (span,) = grpc_receiver.wait_for_spans(1)
    assert span["resource"]["service.name"] == "rollout-svc"


def test_importing_otel_rl_does_not_import_torch():
    result = run_python("import sys, otel_rl; print('torch' in sys.modules)", {})
    assert result.stdout.strip() == "False"


def test_without_the_env_var_nothing_is_configured(tmp_path):
    result = run_python("import otel_rl; print(otel_rl.is_configured())", {"OTEL_RL_DIR": str(tmp_path)})
    assert result.stdout.strip() == "False"


def test_a_bad_env_value_fails_at_import_naming_the_variable(tmp_path):
    result = run_python("import otel_rl", {"OTEL_RL_ENABLED": "1", "OTEL_RL_FLUSH_THRESHOLD": "lots"})
    assert result.returncode != 0
    assert "OTEL_RL_FLUSH_THRESHOLD" in result.stderr


def test_inject_extract_joins_a_subprocess_span_to_the_session(grpc_receiver, monkeypatch, tmp_path):
    export_to(monkeypatch, grpc_receiver)
    otel_rl.configure(fileroot=str(tmp_path), tracer_provider=TracerProvider(shutdown_on_exit=False))
    otel_rl.set_task_id(otel_rl.register_task())
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    with otel_rl.trace_session_phase("generate"):
        headers = otel_rl.inject({})
        result = run_python("""
            import json, sys, otel_rl
            with otel_rl.attach(json.loads(sys.argv[1])):
                with otel_rl.trace_scope("server.generate"):
                    print(json.dumps([otel_rl.get_task_id(), otel_rl.get_session_id()]))
        """, {"OTEL_RL_ENABLED": "1", "OTEL_RL_DIR": str(tmp_path), "OTEL_RL_ROLE": "server",
              "OTEL_EXPORTER_OTLP_ENDPOINT": grpc_receiver.endpoint,
              "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, json.dumps(headers))
    otel_rl.trace_session_event("mark_finalized", status="accepted")
    otel_rl.save(force=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [0, session_id]
    spans = {s["name"]: s for s in grpc_receiver.wait_for_spans(4)}
    server, phase = spans["server.generate"], spans["generate"]
    assert server["trace_id"] == phase["trace_id"]
    assert server["parent_span_id"] == phase["span_id"]
    assert server["attributes"]["rl.session.id"] == session_id
    assert server["resource"]["rl.role"] == "server"
    otel_rl.shutdown()


def test_an_application_provider_installed_globally_gets_otel_rl_spans(tmp_path):
    result = run_python("""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        import otel_rl
        otel_rl.configure()
        with otel_rl.trace_scope("mine"):
            with trace.get_tracer("app").start_as_current_span("app-span"):
                pass
        otel_rl.save(force=True)
        print(sorted(s.name for s in exporter.get_finished_spans()))
        print(trace.get_tracer_provider() is provider)
    """, {"OTEL_RL_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["['app-span', 'mine']", "True"]


def test_opentelemetry_instrument_runs_otel_rl_on_the_distro_provider_without_duplicates(
        grpc_receiver, tmp_path):
    import shutil

    instrument = shutil.which("opentelemetry-instrument", path=os.path.dirname(sys.executable))
    assert instrument, "opentelemetry-distro is part of the test extra"
    env = clean_env(OTEL_RL_DIR=str(tmp_path), OTEL_EXPORTER_OTLP_ENDPOINT=grpc_receiver.endpoint,
                    OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_TRACES_EXPORTER="otlp",
                    OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none", OTEL_BSP_SCHEDULE_DELAY="50")
    code = "import otel_rl\nwith otel_rl.trace_scope('under-instrument'):\n    pass\nprint(otel_rl.is_enabled())"
    result = subprocess.run([instrument, sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    # The process has exited, so every export it made was answered, and the receiver
    # records a request before answering it: a duplicate would be here already.
    assert [s["name"] for s in grpc_receiver.wait_for_spans(1)] == ["under-instrument"]
    assert grpc_receiver.export_calls == len(grpc_receiver.trace_requests)
